/* arrow.c: the Arrow C data / C device data interfaces through the Arrow
 * PyCapsule interface, both ways (issue 18). See arrow.h and docs/arrow.md.
 *
 * Export: DeviceBuffer and DeviceView (C-contiguous, 1-d) get
 * __arrow_c_device_array__ and __arrow_c_array__. The exported array holds a
 * DeviceView of the object (so the memory can be neither freed nor released
 * while Arrow holds it); its release drops that view under the GIL. Items
 * are Arrow primitives where Arrow has one; anything else (bool, bfloat16,
 * float8, structs, complex, non-native byte order) goes as fixed-size binary
 * or uint8 storage tagged with the extension type "devbuf.dtype", whose
 * metadata is the devbuf format string.
 *
 * Import: from_arrow(obj) moves the producer's array into a devbuf.ArrowArray
 * (the capsules keep only their now-released shells), checks that it is a
 * primitive, null-free, flat array, and exports it through the extended
 * buffer protocol with the producer's sync_event carried in device_info. */
#include "arrow.h"

#include <stdlib.h>
#include <string.h>

#include "arrow_c.h"
#include "interop.h" /* dbp_buffer_error */
#include "devbuf/dlpack.h"

#define EXT_NAME_KEY "ARROW:extension:name"
#define EXT_META_KEY "ARROW:extension:metadata"
#define EXT_NAME "devbuf.dtype"
#define DEVICE_KEY "devbuf.device" /* the identifier behind ARROW_DEVICE_EXT_DEV */

static PyObject *g_s_device_array, *g_s_array;

static int host_little_endian(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 1;
}

/* ---- schema metadata ------------------------------------------------------------------- */

/* Encode up to 3 (key, value) pairs as the spec lays metadata out: int32
 * count, then per pair int32 length + bytes, native byte order. malloc'd, or
 * NULL when there are none (and on OOM, with *oom set). */
static char *meta_encode(const char *const *kv, int n, int *oom) {
  *oom = 0;
  if (n == 0) return NULL;
  size_t size = 4;
  for (int i = 0; i < 2 * n; i++) size += 4 + strlen(kv[i]);
  char *out = malloc(size), *p = out;
  if (out == NULL) {
    *oom = 1;
    return NULL;
  }
  int32_t v = n;
  memcpy(p, &v, 4);
  p += 4;
  for (int i = 0; i < 2 * n; i++) {
    v = (int32_t)strlen(kv[i]);
    memcpy(p, &v, 4);
    memcpy(p + 4, kv[i], (size_t)v);
    p += 4 + v;
  }
  return out;
}

/* The value of `key` in encoded metadata as a new PyMem string, NULL if
 * absent (or on error, with an exception). */
static char *meta_get(const char *meta, const char *key, int *failed) {
  *failed = 0;
  if (meta == NULL) return NULL;
  int32_t n, kl, vl;
  const char *p = meta;
  memcpy(&n, p, 4);
  p += 4;
  size_t klen = strlen(key);
  for (int32_t i = 0; i < n; i++) {
    memcpy(&kl, p, 4);
    p += 4;
    const char *k = p;
    p += kl;
    memcpy(&vl, p, 4);
    p += 4;
    if (kl < 0 || vl < 0) break; /* malformed: stop reading rather than wander */
    if ((size_t)kl == klen && memcmp(k, key, klen) == 0) {
      char *out = PyMem_Malloc((size_t)vl + 1);
      if (out == NULL) {
        *failed = 1;
        PyErr_NoMemory();
        return NULL;
      }
      memcpy(out, p, (size_t)vl);
      out[vl] = '\0';
      return out;
    }
    p += vl;
  }
  return NULL;
}

/* ---- export ------------------------------------------------------------------------------ */

/* The Arrow format of `itemsize`-byte items of devbuf format `fmt` into out;
 * *ext = 1 when the item needs the devbuf.dtype extension to keep its
 * meaning (the storage alone would read as plain integers or bytes). */
static void arrow_format_for(const char *fmt, Py_ssize_t itemsize, char *out, size_t cap,
                             int *ext) {
  const char *p = fmt;
  int native = 1;
  *ext = 0;
  if (*p == '@' || *p == '=') p++;
  else if (*p == '<') native = host_little_endian(), p++;
  else if (*p == '>' || *p == '!') native = !host_little_endian(), p++;
  if (native && p[0] != '\0' && p[1] == '\0') {
    const char *code = NULL;
    switch (p[0]) {
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
      code = itemsize == 1 ? "c" : itemsize == 2 ? "s" : itemsize == 4 ? "i" : itemsize == 8 ? "l" : NULL;
      break;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N':
      code = itemsize == 1 ? "C" : itemsize == 2 ? "S" : itemsize == 4 ? "I" : itemsize == 8 ? "L" : NULL;
      break;
    case '?': /* Arrow's boolean is bit-packed: bytes go as uint8, tagged */
      if (itemsize == 1) code = "C", *ext = 1;
      break;
    case 'e': code = itemsize == 2 ? "e" : NULL; break;
    case 'f': code = itemsize == 4 ? "f" : NULL; break;
    case 'd': code = itemsize == 8 ? "g" : NULL; break;
    default: break;
    }
    if (code != NULL) {
      snprintf(out, cap, "%s", code);
      return;
    }
  }
  snprintf(out, cap, "w:%zd", itemsize);
  *ext = 1;
}

typedef struct ExpSchema {
  char format[32];
  char *metadata; /* malloc'd or NULL */
} ExpSchema;

static void exp_schema_release(DbpArrowSchema *s) {
  if (s->release == NULL) return;
  ExpSchema *p = s->private_data;
  if (p != NULL) {
    free(p->metadata);
    free(p);
  }
  s->private_data = NULL;
  s->release = NULL;
}

typedef struct ExpArray {
  PyObject *holder;       /* the DeviceView holding the producer's export */
  const void *buffers[2]; /* validity (none), values */
  void *event;            /* what sync_event points at */
} ExpArray;

/* Arrow may release from any thread, without the GIL: take it to drop the
 * view (which releases devbuf's export), unless the interpreter is gone. A
 * thread that already runs Python (a capsule destructor, pyarrow's release
 * under the GIL, a subinterpreter whose thread state PyGILState does not
 * know) must not ask again: it would wait on itself. */
static void exp_array_release(DbpArrowArray *a) {
  if (a->release == NULL) return;
  ExpArray *p = a->private_data;
  if (p != NULL) {
    if (p->holder != NULL && Py_IsInitialized()) {
#if PY_VERSION_HEX >= 0x030D0000
      PyThreadState *ts = PyThreadState_GetUnchecked();
#else
      PyThreadState *ts = _PyThreadState_UncheckedGet();
#endif
      if (ts != NULL) {
        Py_DECREF(p->holder);
      } else {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_DECREF(p->holder);
        PyGILState_Release(g);
      }
    }
    free(p);
  }
  a->private_data = NULL;
  a->release = NULL;
}

static void schema_capsule_free(PyObject *cap) {
  DbpArrowSchema *s = PyCapsule_GetPointer(cap, DBP_ARROW_SCHEMA_CAPSULE);
  if (s == NULL) {
    PyErr_WriteUnraisable(cap);
    return;
  }
  if (s->release != NULL) s->release(s); /* not consumed: ours to release */
  free(s);
}

static void array_capsule_free(PyObject *cap) {
  DbpArrowArray *a = PyCapsule_GetPointer(cap, DBP_ARROW_ARRAY_CAPSULE);
  if (a == NULL) {
    PyErr_WriteUnraisable(cap);
    return;
  }
  if (a->release != NULL) a->release(a);
  free(a);
}

static void device_array_capsule_free(PyObject *cap) {
  DbpArrowDeviceArray *a = PyCapsule_GetPointer(cap, DBP_ARROW_DEVICE_ARRAY_CAPSULE);
  if (a == NULL) {
    PyErr_WriteUnraisable(cap);
    return;
  }
  if (a->array.release != NULL) a->array.release(&a->array);
  free(a);
}

/* The PyCapsule interface: requested_schema is a hint producers may ignore
 * (devbuf cannot cast); other keywords with a value other than None are
 * refused, since ignoring one could drop a request the consumer relies on. */
static int parse_capsule_args(const char *what, PyObject *args, PyObject *kwargs) {
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (n > 1) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most 1 positional argument (requested_schema), "
                 "%zd given", what, n);
    return -1;
  }
  if (kwargs == NULL) return 0;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(kwargs, &pos, &k, &v)) {
    if (PyUnicode_Check(k) && PyUnicode_CompareWithASCIIString(k, "requested_schema") == 0) {
      if (n == 1) {
        PyErr_Format(PyExc_TypeError, "%s() got requested_schema twice", what);
        return -1;
      }
      continue;
    }
    if (v == Py_None) continue;
    PyErr_Format(PyExc_NotImplementedError,
                 "%s(): devbuf does not support the keyword %R (given %R); only "
                 "requested_schema, which devbuf treats as a hint", what, k, v);
    return -1;
  }
  return 0;
}

/* Build (schema capsule, array or device-array capsule) for `self`. */
static PyObject *arrow_export(PyObject *self, int device, const char *what) {
  DbpView *v = dbp_view_new(self, 0);
  if (v == NULL) return NULL;
  const Py_buffer *b = &v->buf.view;
  PyObject *result = NULL, *scap = NULL, *acap = NULL;
  DbpArrowSchema *schema = NULL;
  ExpSchema *sp = NULL;
  ExpArray *ap = NULL;
  const char *tname = Py_TYPE(self)->tp_name;
  int ndim = (b->shape || b->ndim == 0) ? b->ndim : 1;
  if (ndim != 1) {
    PyErr_Format(PyExc_BufferError,
                 "%s.%s(): Arrow arrays are 1-d, this buffer has %d dimensions: export a "
                 "1-d buffer (or a 1-d view of this one)", tname, what, ndim);
    goto fail;
  }
  if (!PyBuffer_IsContiguous(b, 'C')) {
    PyErr_Format(PyExc_BufferError,
                 "%s.%s(): the buffer is strided (stride %zd for items of %zd bytes); Arrow "
                 "needs contiguous values: copy it first (.to_host() or copy_to())", tname,
                 what, b->strides ? b->strides[0] : b->itemsize, b->itemsize);
    goto fail;
  }
  if (dbp_view_resolve(v) < 0) goto fail;
  const char *fmt = b->format ? b->format : "B";
  const char *identifier = v->is_device ? v->buf.device : "cpu";
  int host_ok = !v->is_device || (v->desc.flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE);
  int32_t dtype = DBP_ARROW_DEVICE_CPU;
  int64_t dev_id = -1;
  int ext_dev = 0, pass_event = 0;
  if (!device) {
    if (!host_ok) {
      PyErr_Format(PyExc_BufferError,
                   "%s.__arrow_c_array__(): the memory is on %s, which the host cannot read; "
                   "the Arrow C data interface is for CPU memory: use __arrow_c_device_array__ "
                   "(pyarrow: pa.Array._import_from_c_device_capsule) or copy it with .to_host()",
                   tname, identifier);
      goto fail;
    }
    if (dbp_view_synchronize(v) < 0) goto fail; /* the host reads right away */
  } else if (v->is_device) {
    DLDevice dl;
    devbuf_error err;
    devbuf_error_clear(&err);
    dev_id = v->desc.device_ordinal;
    if (devbuf_dlpack_device_from_identifier(identifier, v->desc.device_ordinal, 0, &dl, &err) ==
        DEVBUF_OK) {
      dtype = (int32_t)dl.device_type;
      dev_id = dl.device_id;
    } else {
      dtype = DBP_ARROW_DEVICE_EXT_DEV; /* Arrow has no type for it: documented */
    }
    if (dtype == DBP_ARROW_DEVICE_CPU) dev_id = -1;
    ext_dev = dtype == DBP_ARROW_DEVICE_EXT_DEV;
    /* sync_event points at the device's own event type for CUDA (CUevent ==
     * cudaEvent_t), ROCm (hipEvent_t), OpenCL (cl_event), and devbuf's
     * event handle for EXT_DEV. Others (oneAPI wants a sycl::event, devbuf
     * has a Level Zero event) get a host wait now and no event. */
    pass_event = dtype == DBP_ARROW_DEVICE_CUDA || dtype == DBP_ARROW_DEVICE_CUDA_MANAGED ||
                 dtype == DBP_ARROW_DEVICE_ROCM || dtype == DBP_ARROW_DEVICE_OPENCL || ext_dev;
    if (!pass_event && dbp_view_synchronize(v) < 0) goto fail;
  }

  /* The schema. */
  int ext = 0;
  schema = calloc(1, sizeof *schema);
  sp = calloc(1, sizeof *sp);
  if (schema == NULL || sp == NULL) {
    PyErr_NoMemory();
    goto fail;
  }
  arrow_format_for(fmt, b->itemsize, sp->format, sizeof sp->format, &ext);
  const char *kv[6];
  int n = 0;
  if (ext) {
    kv[2 * n] = EXT_NAME_KEY, kv[2 * n + 1] = EXT_NAME, n++;
    kv[2 * n] = EXT_META_KEY, kv[2 * n + 1] = fmt, n++;
  }
  if (ext_dev) kv[2 * n] = DEVICE_KEY, kv[2 * n + 1] = identifier, n++;
  int oom;
  sp->metadata = meta_encode(kv, n, &oom);
  if (oom) {
    PyErr_NoMemory();
    goto fail;
  }
  schema->format = sp->format;
  schema->name = "";
  schema->metadata = sp->metadata;
  schema->flags = 0; /* devbuf buffers have no nulls */
  schema->private_data = sp;
  schema->release = exp_schema_release;
  sp = NULL;
  scap = PyCapsule_New(schema, DBP_ARROW_SCHEMA_CAPSULE, schema_capsule_free);
  if (scap == NULL) goto fail;
  schema = NULL; /* the capsule owns it */

  /* The array. */
  ap = calloc(1, sizeof *ap);
  if (ap == NULL) {
    PyErr_NoMemory();
    goto fail;
  }
  DbpArrowArray arr;
  memset(&arr, 0, sizeof arr);
  arr.length = b->itemsize ? b->len / b->itemsize : 0;
  arr.null_count = 0;
  arr.offset = 0;
  arr.n_buffers = 2;
  arr.n_children = 0;
  ap->buffers[0] = NULL;
  ap->buffers[1] = b->buf;
  ap->event = pass_event ? v->desc.event : NULL;
  arr.buffers = ap->buffers;
  arr.private_data = ap;
  arr.release = exp_array_release;
  if (device) {
    DbpArrowDeviceArray *da = calloc(1, sizeof *da);
    if (da == NULL) {
      PyErr_NoMemory();
      goto fail;
    }
    da->array = arr;
    da->device_type = dtype;
    da->device_id = dev_id;
    da->sync_event = ap->event ? (void *)&ap->event : NULL;
    acap = PyCapsule_New(da, DBP_ARROW_DEVICE_ARRAY_CAPSULE, device_array_capsule_free);
    if (acap == NULL) {
      free(da);
      goto fail;
    }
  } else {
    DbpArrowArray *a = malloc(sizeof *a);
    if (a == NULL) {
      PyErr_NoMemory();
      goto fail;
    }
    *a = arr;
    acap = PyCapsule_New(a, DBP_ARROW_ARRAY_CAPSULE, array_capsule_free);
    if (acap == NULL) {
      free(a);
      goto fail;
    }
  }
  ap->holder = (PyObject *)v; /* the array owns the view from here on */
  ap = NULL;
  v = NULL;
  result = PyTuple_Pack(2, scap, acap);
fail:
  Py_XDECREF(scap);
  Py_XDECREF(acap); /* on failure after the capsule took the view, this drops it */
  if (schema) {
    if (schema->release) schema->release(schema);
    free(schema);
  }
  if (sp) {
    free(sp->metadata);
    free(sp);
  }
  free(ap);
  Py_XDECREF(v);
  return result;
}

static PyObject *m_arrow_c_device_array(PyObject *self, PyObject *args, PyObject *kwargs) {
  if (parse_capsule_args("__arrow_c_device_array__", args, kwargs) < 0) return NULL;
  return arrow_export(self, 1, "__arrow_c_device_array__");
}

static PyObject *m_arrow_c_array(PyObject *self, PyObject *args, PyObject *kwargs) {
  if (parse_capsule_args("__arrow_c_array__", args, kwargs) < 0) return NULL;
  return arrow_export(self, 0, "__arrow_c_array__");
}

static PyMethodDef export_methods[] = {
    {"__arrow_c_device_array__", (PyCFunction)(void (*)(void))m_arrow_c_device_array,
     METH_VARARGS | METH_KEYWORDS,
     "__arrow_c_device_array__(requested_schema=None, **kwargs) -> (schema, device array) "
     "PyCapsules of a contiguous 1-d buffer (Arrow C device data interface). devbuf.sim and "
     "devices Arrow has no type for are ARROW_DEVICE_EXT_DEV, named in the schema metadata "
     "key 'devbuf.device'."},
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))m_arrow_c_array,
     METH_VARARGS | METH_KEYWORDS,
     "__arrow_c_array__(requested_schema=None) -> (schema, array) PyCapsules of a contiguous "
     "1-d buffer the host can read (Arrow C data interface); BufferError for device memory."},
    {NULL},
};

/* ---- import: devbuf.ArrowArray ----------------------------------------------------------- */

typedef struct DbpArrowImport {
  PyObject_HEAD
  DbpArrowDeviceArray arr; /* moved in; released at deallocation */
  PyObject *source;        /* the producer (kept alive for the repr and .obj) */
  char *format;            /* PyMem; the devbuf format of one item */
  char *arrow_format;      /* PyMem; as received */
  Py_ssize_t itemsize;
  Py_ssize_t shape[1];
  Py_ssize_t strides[1];
  void *ptr;               /* values + offset */
  Py_ssize_t len;
  int is_host;             /* plain CPU buffer export */
  int host_accessible;     /* device memory the host may read (managed) */
  int info_ready;
  int has_dev;
  const char *identifier;  /* interned, for device memory */
  int32_t ordinal;
  void *event;             /* *sync_event: the producer's event, or NULL */
  devbuf_device dev;
  Py_ssize_t exports;
  union {
    devbuf_device_info info;
    uint64_t raw[32];
  } info;
  PyObject *weakreflist;
} DbpArrowImport;

static PyTypeObject DbpArrowImport_Type;

static const char *device_type_name(int32_t t) {
  switch (t) {
  case DBP_ARROW_DEVICE_CPU: return "ARROW_DEVICE_CPU";
  case DBP_ARROW_DEVICE_CUDA: return "ARROW_DEVICE_CUDA";
  case DBP_ARROW_DEVICE_CUDA_HOST: return "ARROW_DEVICE_CUDA_HOST";
  case DBP_ARROW_DEVICE_OPENCL: return "ARROW_DEVICE_OPENCL";
  case DBP_ARROW_DEVICE_VULKAN: return "ARROW_DEVICE_VULKAN";
  case DBP_ARROW_DEVICE_METAL: return "ARROW_DEVICE_METAL";
  case DBP_ARROW_DEVICE_VPI: return "ARROW_DEVICE_VPI";
  case DBP_ARROW_DEVICE_ROCM: return "ARROW_DEVICE_ROCM";
  case DBP_ARROW_DEVICE_ROCM_HOST: return "ARROW_DEVICE_ROCM_HOST";
  case DBP_ARROW_DEVICE_EXT_DEV: return "ARROW_DEVICE_EXT_DEV";
  case DBP_ARROW_DEVICE_CUDA_MANAGED: return "ARROW_DEVICE_CUDA_MANAGED";
  case DBP_ARROW_DEVICE_ONEAPI: return "ARROW_DEVICE_ONEAPI";
  case DBP_ARROW_DEVICE_WEBGPU: return "ARROW_DEVICE_WEBGPU";
  case DBP_ARROW_DEVICE_HEXAGON: return "ARROW_DEVICE_HEXAGON";
  default: return "an unknown device type";
  }
}

/* devbuf format and item size for an Arrow format; BufferError naming the
 * format and why when devbuf cannot take it. */
static int import_format(DbpArrowImport *a, const DbpArrowSchema *s) {
  const char *f = s->format;
  const char *code = NULL;
  Py_ssize_t size = 0;
  if (f == NULL) {
    PyErr_SetString(PyExc_BufferError, "devbuf.from_arrow: the schema has no format");
    return -1;
  }
  if (f[0] != '\0' && f[1] == '\0') {
    switch (f[0]) {
    case 'c': code = "b", size = 1; break;
    case 'C': code = "B", size = 1; break;
    case 's': code = "h", size = 2; break;
    case 'S': code = "H", size = 2; break;
    case 'i': code = "i", size = 4; break;
    case 'I': code = "I", size = 4; break;
    case 'l': code = "q", size = 8; break;
    case 'L': code = "Q", size = 8; break;
    case 'e': code = "e", size = 2; break;
    case 'f': code = "f", size = 4; break;
    case 'g': code = "d", size = 8; break;
    default: break;
    }
  }
  char fsb[32];
  if (code == NULL && strncmp(f, "w:", 2) == 0) {
    char *end = NULL;
    long long w = strtoll(f + 2, &end, 10);
    if (end != f + 2 && *end == '\0' && w > 0 && w < (1LL << 31)) {
      snprintf(fsb, sizeof fsb, "%llds", w);
      code = fsb;
      size = (Py_ssize_t)w;
    }
  }
  if (code == NULL) {
    const char *why;
    switch (f[0]) {
    case 'b': why = "Arrow's boolean is bit-packed and devbuf buffers hold whole items: cast it "
                    "to uint8 (or int8) first"; break;
    case 'n': why = "the null type has no values"; break;
    case 'u': case 'U': case 'z': case 'Z': case 'v':
      why = "variable-length types have an offsets buffer (or views); only fixed-width "
            "primitive arrays are accepted"; break;
    case '+': why = "nested types have children; only flat primitive arrays are accepted"; break;
    case 'd': why = "decimals are not a devbuf item type: cast to float64 or use fixed-size "
                    "binary"; break;
    case 't': why = "temporal types carry units devbuf formats cannot say: cast to their "
                    "integer storage (pc.cast to int32/int64) first"; break;
    default: why = "it is not a fixed-width primitive type devbuf knows"; break;
    }
    PyErr_Format(PyExc_BufferError, "devbuf.from_arrow: Arrow format '%.60s' is refused: %s", f,
                 why);
    return -1;
  }
  a->arrow_format = PyMem_Malloc(strlen(f) + 1);
  if (a->arrow_format == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  strcpy(a->arrow_format, f);
  /* The devbuf.dtype extension restores the meaning the storage lost. */
  int failed;
  char *ename = meta_get(s->metadata, EXT_NAME_KEY, &failed);
  if (failed) return -1;
  char *custom = NULL;
  if (ename != NULL && strcmp(ename, EXT_NAME) == 0) {
    custom = meta_get(s->metadata, EXT_META_KEY, &failed);
    if (failed) {
      PyMem_Free(ename);
      return -1;
    }
  }
  PyMem_Free(ename);
  if (custom != NULL) {
    Py_ssize_t csize = 0;
    if (dbp_format_itemsize(custom, &csize) < 0) {
      PyErr_Clear();
      csize = -1;
    }
    if (csize != size) {
      PyErr_Format(PyExc_BufferError,
                   "devbuf.from_arrow: the %s extension names format '%.100s' (%zd-byte items) "
                   "on Arrow storage '%s' of %zd-byte items", EXT_NAME, custom, csize, f, size);
      PyMem_Free(custom);
      return -1;
    }
    a->format = custom;
  } else {
    a->format = PyMem_Malloc(strlen(code) + 1);
    if (a->format == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    strcpy(a->format, code);
  }
  a->itemsize = size;
  return 0;
}

/* Host bitmap check for null_count -1 (not computed). */
static int64_t count_nulls(const uint8_t *bits, int64_t offset, int64_t length) {
  int64_t nulls = 0;
  for (int64_t i = offset; i < offset + length; i++) nulls += !((bits[i >> 3] >> (i & 7)) & 1);
  return nulls;
}

/* Where the memory is: identifier and flags for the Arrow device. */
static int import_device(DbpArrowImport *a, const DbpArrowSchema *s) {
  int32_t t = a->arr.device_type;
  int64_t id = a->arr.device_id;
  a->event = a->arr.sync_event ? *(void **)a->arr.sync_event : NULL;
  if (t == DBP_ARROW_DEVICE_CPU) {
    a->is_host = 1;
    a->event = NULL; /* the spec: CPU memory needs no sync */
    return 0;
  }
  if (id < 0 || id > INT32_MAX) {
    PyErr_Format(PyExc_BufferError, "devbuf.from_arrow: device_id %lld of %s is out of range",
                 (long long)id, device_type_name(t));
    return -1;
  }
  const char *ident = NULL;
  char *named = NULL;
  uint32_t dlflags = 0;
  int32_t ordinal = (int32_t)id;
  if (t == DBP_ARROW_DEVICE_EXT_DEV) {
    /* EXT_DEV says nothing by itself: devbuf's exports name the identifier
     * in the schema metadata; without it, devbuf.sim (DLPack's mapping). */
    int failed;
    named = meta_get(s->metadata, DEVICE_KEY, &failed);
    if (failed) return -1;
    ident = named ? named : "devbuf.sim";
  } else {
    DLDevice dl;
    devbuf_error err;
    devbuf_error_clear(&err);
    int32_t tv = t;
    memcpy(&dl.device_type, &tv, sizeof tv);
    dl.device_id = (int32_t)id;
    if (devbuf_dlpack_device_to_identifier(dl, &ident, &ordinal, &dlflags, &err) != DEVBUF_OK) {
      PyErr_Format(PyExc_BufferError,
                   "devbuf.from_arrow: memory on %s (device type %d) has no devbuf device",
                   device_type_name(t), (int)t);
      return -1;
    }
  }
  devbuf_error err;
  devbuf_error_clear(&err);
  const char *interned = NULL;
  size_t pidx = 0;
  int rc = devbuf_identifier_lookup(ident, &interned, &pidx, &err);
  if (rc != DEVBUF_OK) {
    PyErr_Format(PyExc_BufferError,
                 "devbuf.from_arrow: memory on %s (device %lld) maps to devbuf identifier '%s', "
                 "which no loaded plugin implements (%s)", device_type_name(t), (long long)id,
                 ident, err.message);
    PyMem_Free(named);
    return -1;
  }
  PyMem_Free(named);
  a->ordinal = ordinal;
  if (strcmp(interned, "cpu") == 0) {
    /* Pinned host memory: readable once the GPU runtime's event completed;
     * devbuf can only wait on it through that runtime's plugin. */
    if (a->event != NULL) {
      const char *rt = t == DBP_ARROW_DEVICE_ROCM_HOST ? "devbuf.hip" : "devbuf.cuda";
      devbuf_device d;
      int r = devbuf_device_open_ordinal(rt, (int)id, &d, &err);
      if (r == DEVBUF_OK) DBP_NOGIL(r = devbuf_event_synchronize(&d, a->event, &err));
      if (r != DEVBUF_OK) {
        PyErr_Format(PyExc_BufferError,
                     "devbuf.from_arrow: cannot wait on the sync_event of %s memory through "
                     "%s:%lld: %s", device_type_name(t), rt, (long long)id, err.message);
        return -1;
      }
      a->event = NULL;
    }
    a->is_host = 1;
    return 0;
  }
  int passes = t == DBP_ARROW_DEVICE_CUDA || t == DBP_ARROW_DEVICE_CUDA_MANAGED ||
               t == DBP_ARROW_DEVICE_ROCM || t == DBP_ARROW_DEVICE_OPENCL ||
               t == DBP_ARROW_DEVICE_EXT_DEV;
  if (a->event != NULL && !passes) {
    PyErr_Format(PyExc_BufferError,
                 "devbuf.from_arrow: the sync_event of %s memory is not an event devbuf's %s "
                 "plugin can wait on", device_type_name(t), interned);
    return -1;
  }
  a->identifier = interned;
  a->host_accessible = (dlflags & DEVBUF_DLPACK_HOST_ACCESSIBLE) != 0;
  if ((dlflags & DEVBUF_DLPACK_HANDLE) && a->arr.array.offset != 0) {
    PyErr_Format(PyExc_BufferError,
                 "devbuf.from_arrow: %s buffers are handles, not addresses: an array offset "
                 "(%lld) cannot be applied to one", device_type_name(t),
                 (long long)a->arr.array.offset);
    return -1;
  }
  return 0;
}

static DbpArrowImport *arrow_import(PyObject *obj) {
  int device = 1;
  PyObject *meth = NULL;
  if (dbp_compat_LookupAttr(obj, g_s_device_array, &meth) < 0) return NULL;
  if (meth == NULL) {
    device = 0;
    if (dbp_compat_LookupAttr(obj, g_s_array, &meth) < 0) return NULL;
  }
  if (meth == NULL) {
    PyErr_Format(PyExc_TypeError,
                 "devbuf.from_arrow: %.100s has neither __arrow_c_device_array__ nor "
                 "__arrow_c_array__", Py_TYPE(obj)->tp_name);
    return NULL;
  }
  PyObject *pair = PyObject_CallNoArgs(meth);
  Py_DECREF(meth);
  if (pair == NULL) return NULL;
  const char *mname = device ? "__arrow_c_device_array__" : "__arrow_c_array__";
  const char *aname = device ? DBP_ARROW_DEVICE_ARRAY_CAPSULE : DBP_ARROW_ARRAY_CAPSULE;
  if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 ||
      !PyCapsule_IsValid(PyTuple_GET_ITEM(pair, 0), DBP_ARROW_SCHEMA_CAPSULE) ||
      !PyCapsule_IsValid(PyTuple_GET_ITEM(pair, 1), aname)) {
    PyErr_Format(PyExc_TypeError,
                 "devbuf.from_arrow: %.100s.%s() must return a pair of PyCapsules named "
                 "'%s' and '%s'", Py_TYPE(obj)->tp_name, mname, DBP_ARROW_SCHEMA_CAPSULE, aname);
    Py_DECREF(pair);
    return NULL;
  }
  DbpArrowSchema *s = PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 0), DBP_ARROW_SCHEMA_CAPSULE);
  void *ap = PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 1), aname);
  DbpArrowArray *src = device ? &((DbpArrowDeviceArray *)ap)->array : (DbpArrowArray *)ap;
  if (s->release == NULL || src->release == NULL) {
    PyErr_Format(PyExc_ValueError, "devbuf.from_arrow: %.100s.%s() returned a released %s",
                 Py_TYPE(obj)->tp_name, mname, s->release == NULL ? "schema" : "array");
    Py_DECREF(pair);
    return NULL;
  }
  DbpArrowImport *a = PyObject_New(DbpArrowImport, &DbpArrowImport_Type);
  if (a == NULL) {
    Py_DECREF(pair);
    return NULL;
  }
  memset((char *)a + sizeof(PyObject), 0, sizeof *a - sizeof(PyObject));
  /* Move the array in first: from here on the producer's memory is ours to
   * release exactly once (at deallocation), whatever is refused below. */
  if (device) {
    a->arr = *(DbpArrowDeviceArray *)ap;
  } else {
    a->arr.array = *src;
    a->arr.device_type = DBP_ARROW_DEVICE_CPU;
    a->arr.device_id = -1;
  }
  src->release = NULL;
  a->source = Py_NewRef(obj);
  const DbpArrowArray *arr = &a->arr.array;
  const char *refuse = NULL;
  char why[200];
  if (s->dictionary != NULL || arr->dictionary != NULL)
    refuse = "it is dictionary-encoded: decode it first (pc.dictionary_decode / .dictionary_decode())";
  else if (s->n_children != 0 || arr->n_children != 0)
    refuse = "it has children (a nested type): only flat primitive arrays are accepted";
  if (refuse == NULL && import_format(a, s) < 0) goto fail;
  if (refuse == NULL && arr->n_buffers != 2) {
    snprintf(why, sizeof why, "a fixed-width primitive array has 2 buffers, this one %lld",
             (long long)arr->n_buffers);
    refuse = why;
  }
  if (refuse == NULL && (arr->length < 0 || arr->offset < 0)) refuse = "negative length or offset";
  if (refuse == NULL && import_device(a, s) < 0) goto fail;
  if (refuse == NULL && arr->null_count != 0) {
    int64_t nulls = arr->null_count;
    if (nulls < 0) { /* not computed: count them if the host can */
      if (arr->buffers[0] == NULL) nulls = 0;
      else if (a->is_host) nulls = count_nulls(arr->buffers[0], arr->offset, arr->length);
      else refuse = "its null count is not known and its validity bitmap is device memory";
    }
    if (nulls > 0) {
      snprintf(why, sizeof why,
               "it has %lld null%s; devbuf buffers have no validity bitmap: fill them "
               "(pc.fill_null) or drop them first", (long long)nulls, nulls == 1 ? "" : "s");
      refuse = why;
    }
  }
  if (refuse != NULL) {
    PyErr_Format(PyExc_BufferError, "devbuf.from_arrow: the array of %.100s is refused: %s",
                 Py_TYPE(obj)->tp_name, refuse);
    goto fail;
  }
  if (arr->length > 0 && (arr->offset + arr->length) > PY_SSIZE_T_MAX / a->itemsize) {
    PyErr_Format(PyExc_OverflowError, "devbuf.from_arrow: %lld items at offset %lld overflow",
                 (long long)arr->length, (long long)arr->offset);
    goto fail;
  }
  static char empty_data[8];
  const char *values = arr->buffers[1];
  if (values == NULL && arr->length > 0) {
    PyErr_SetString(PyExc_BufferError, "devbuf.from_arrow: the values buffer is NULL");
    goto fail;
  }
  a->ptr = values ? (void *)(values + arr->offset * a->itemsize) : (void *)empty_data;
  a->shape[0] = (Py_ssize_t)arr->length;
  a->strides[0] = a->itemsize;
  a->len = (Py_ssize_t)arr->length * a->itemsize;
  Py_DECREF(pair);
  return a;
fail:
  Py_DECREF(pair);
  Py_DECREF(a);
  return NULL;
}

/* device_info for device exports (once); opening the device needs its plugin. */
static int import_prepare(DbpArrowImport *a) {
  if (a->info_ready) return 0;
  devbuf_error err;
  devbuf_error_clear(&err);
  int rc = DEVBUF_OK;
  if (!a->has_dev) {
    rc = devbuf_device_open_ordinal(a->identifier, a->ordinal, &a->dev, &err);
    if (rc == DEVBUF_OK) a->has_dev = 1;
  }
  uint32_t flags = DEVBUF_DEVICE_INFO_READONLY; /* Arrow data is immutable */
  if (a->host_accessible) flags |= DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE;
  size_t size = 0;
  if (rc == DEVBUF_OK)
    rc = devbuf_device_info_export(&a->dev, a->event, NULL, flags, &a->info, sizeof a->info,
                                   &size, &err);
  if (rc != DEVBUF_OK) {
    char prefix[160];
    snprintf(prefix, sizeof prefix, "devbuf.ArrowArray: device_info for %s:%d", a->identifier,
             (int)a->ordinal);
    devbuf_error_prefix(&err, prefix);
    return dbp_buffer_error(&err);
  }
  a->info_ready = 1;
  return 0;
}

static int import_getbuffer_locked(DbpArrowImport *a, Py_buffer *view, int flags) {
  if (flags & PyBUF_WRITABLE) {
    PyErr_Format(PyExc_BufferError,
                 "devbuf.ArrowArray is read-only: Arrow arrays are immutable (the producer: "
                 "%.100s), so a writable request is refused",
                 a->source ? Py_TYPE(a->source)->tp_name : "unknown");
    return -1;
  }
  if (dbp_refuse_flat_format("devbuf.ArrowArray", a->format, flags) < 0) return -1;
  int device_export = !a->is_host && (flags & PyBUF_DEVICE);
  if (!a->is_host && !device_export) {
    if (!a->host_accessible) {
      PyErr_Format(PyExc_BufferError,
                   "devbuf.ArrowArray: the values are on %s:%d, which the host cannot read: "
                   "request the buffer with PyBUF_DEVICE (devbuf.view(obj) does), or copy it "
                   "with devbuf.view(obj).to_host()", a->identifier, (int)a->ordinal);
      return -1;
    }
    if (a->event != NULL) { /* the host reads: wait for the producer */
      if (import_prepare(a) < 0) return -1;
      devbuf_error err;
      int rc;
      devbuf_error_clear(&err);
      DBP_NOGIL(rc = devbuf_event_synchronize(&a->dev, a->event, &err));
      if (rc != DEVBUF_OK) return dbp_buffer_error(&err);
    }
  }
  if (device_export && import_prepare(a) < 0) return -1;
  view->buf = a->ptr;
  view->obj = Py_NewRef(a);
  view->len = a->len;
  view->itemsize = a->itemsize;
  view->readonly = 1;
  view->format = (flags & PyBUF_FORMAT) ? a->format : NULL;
  if (flags & PyBUF_ND) {
    view->ndim = 1;
    view->shape = a->shape;
  } else {
    view->ndim = 1;
    view->shape = NULL;
  }
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? a->strides : NULL;
  view->suboffsets = NULL;
  view->internal = NULL;
  if (device_export) DevbufPy_BufferSetDevice(view, flags, a->identifier, &a->info);
  a->exports++;
  return 0;
}

static void import_releasebuffer_locked(DbpArrowImport *a, Py_buffer *view) {
  (void)view;
  a->exports--; /* nothing to free early: the array goes at deallocation */
}
/* Locked (dbp.h): the export count and the lazily opened device_info. */
DBP_LOCKED_GETBUFFER(DbpArrowImport, import_getbuffer)
DBP_LOCKED_RELEASEBUFFER(DbpArrowImport, import_releasebuffer)

static PyBufferProcs import_as_buffer = {
    .bf_getbuffer = (getbufferproc)import_getbuffer,
    .bf_releasebuffer = (releasebufferproc)import_releasebuffer,
};

static void import_dealloc(DbpArrowImport *a) {
  if (a->weakreflist) PyObject_ClearWeakRefs((PyObject *)a);
  /* The producer's release may run Python code (pyarrow's does): keep any
   * pending exception out of it. */
  if (a->arr.array.release != NULL) {
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    a->arr.array.release(&a->arr.array);
    PyErr_Restore(t, v, tb);
  }
  PyMem_Free(a->format);
  PyMem_Free(a->arrow_format);
  Py_XDECREF(a->source);
  PyObject_Free(a);
}

static PyObject *imp_obj(DbpArrowImport *a, void *c) { return Py_NewRef(a->source); }
static PyObject *imp_format(DbpArrowImport *a, void *c) { return PyUnicode_FromString(a->format); }
static PyObject *imp_arrow_format(DbpArrowImport *a, void *c) {
  return PyUnicode_FromString(a->arrow_format);
}
static PyObject *imp_device_type(DbpArrowImport *a, void *c) {
  return PyLong_FromLong(a->arr.device_type);
}
static PyObject *imp_device_id(DbpArrowImport *a, void *c) {
  return PyLong_FromLongLong(a->arr.device_id);
}
static PyObject *imp_identifier(DbpArrowImport *a, void *c) {
  if (a->is_host) Py_RETURN_NONE;
  return PyUnicode_FromString(a->identifier);
}
static PyObject *imp_sync_event(DbpArrowImport *a, void *c) {
  if (a->event == NULL) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(a->event);
}
static Py_ssize_t imp_len(DbpArrowImport *a) { return a->shape[0]; }

static PyGetSetDef import_getset[] = {
    {"obj", (getter)imp_obj, NULL, "the Arrow producer", NULL},
    {"format", (getter)imp_format, NULL, "the devbuf format of one item", NULL},
    {"arrow_format", (getter)imp_arrow_format, NULL, "the Arrow format string as received", NULL},
    {"device_type", (getter)imp_device_type, NULL, "the ArrowDeviceType (1: CPU)", NULL},
    {"device_id", (getter)imp_device_id, NULL, "the Arrow device_id", NULL},
    {"identifier", (getter)imp_identifier, NULL,
     "the devbuf device identifier of the values, None for host memory", NULL},
    {"sync_event", (getter)imp_sync_event, NULL,
     "the producer's event (the handle sync_event pointed at), or None", NULL},
    {NULL},
};

static PySequenceMethods import_as_sequence = {.sq_length = (lenfunc)imp_len};

static PyObject *import_repr(DbpArrowImport *a) {
  return PyUnicode_FromFormat("<devbuf.ArrowArray %s length=%zd format='%s' arrow='%s'>",
                              a->is_host ? "host" : a->identifier, a->shape[0], a->format,
                              a->arrow_format);
}

static PyTypeObject DbpArrowImport_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf.ArrowArray",
    .tp_basicsize = sizeof(DbpArrowImport),
    .tp_dealloc = (destructor)import_dealloc,
    .tp_repr = (reprfunc)import_repr,
    .tp_as_buffer = &import_as_buffer,
    .tp_as_sequence = &import_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A primitive, null-free Arrow array moved out of an Arrow producer by "
              "devbuf.from_arrow(); read-only, exported through the extended buffer protocol "
              "(device memory with the producer's sync_event in device_info). The producer's "
              "release runs when this object goes.",
    .tp_weaklistoffset = offsetof(DbpArrowImport, weakreflist),
    .tp_getset = import_getset,
};

PyObject *dbp_arrow_exporter(PyObject *obj) {
  PyObject *m = NULL;
  if (dbp_compat_LookupAttr(obj, g_s_device_array, &m) < 0) return NULL;
  if (m == NULL && dbp_compat_LookupAttr(obj, g_s_array, &m) < 0) return NULL;
  if (m == NULL) return NULL; /* speaks no Arrow */
  Py_DECREF(m);
  return (PyObject *)arrow_import(obj);
}

static PyObject *from_arrow(PyObject *self, PyObject *obj) {
  return (PyObject *)arrow_import(obj);
}

static PyMethodDef arrow_functions[] = {
    {"from_arrow", (PyCFunction)from_arrow, METH_O,
     "from_arrow(obj) -> devbuf.ArrowArray: import a primitive, null-free, flat array from any "
     "object with __arrow_c_device_array__ or __arrow_c_array__ (pyarrow, nanoarrow, ...). "
     "Refuses nulls, children, dictionaries, offsets buffers and non-primitive types with "
     "BufferError."},
    {NULL},
};

static int install(PyTypeObject *type) {
  for (PyMethodDef *m = export_methods; m->ml_name; m++) {
    PyObject *d = PyDescr_NewMethod(type, m);
    if (d == NULL || PyDict_SetItemString(type->tp_dict, m->ml_name, d) < 0) {
      Py_XDECREF(d);
      return -1;
    }
    Py_DECREF(d);
  }
  PyType_Modified(type);
  return 0;
}

int dbp_arrow_init(PyObject *module) {
  g_s_device_array = PyUnicode_InternFromString("__arrow_c_device_array__");
  g_s_array = PyUnicode_InternFromString("__arrow_c_array__");
  if (g_s_device_array == NULL || g_s_array == NULL) return -1;
  if (PyType_Ready(&DbpArrowImport_Type) < 0) return -1;
  if (DevbufPy_SetBufferSupportedFlags(&DbpArrowImport_Type,
                                       DEVBUFPY_BUF_CLASSIC_FLAGS | PyBUF_DEVICE) < 0)
    return -1;
  if (PyModule_AddObjectRef(module, "ArrowArray", (PyObject *)&DbpArrowImport_Type) < 0)
    return -1;
  if (PyModule_AddFunctions(module, arrow_functions) < 0) return -1;
  if (install(&DbpBuffer_Type) < 0 || install(&DbpView_Type) < 0) return -1;
  return 0;
}
