/* arrow_export.c: the Arrow C data / C device data interfaces through the
 * Arrow PyCapsule interface, the producer side; the reader is
 * readers/arrow_import.c. See exporters/exporters.h and docs/arrow.md.
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
 * Import (the reader, devbuf.from_arrow() and devbuf.ArrowArray) is
 * arrow_import.c. */
#include "exporters/exporters.h"

#include <stdlib.h>
#include <string.h>

#include "base/arrow_c.h"
#include "devbuf/dlpack.h"


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
  dbp_home home;          /* where release enters Python (base/dbp_enter.h) */
} ExpArray;

/* Arrow may release from any thread, with or without a thread state, also
 * during and after finalization: enter the array's interpreter to drop the
 * view (which releases devbuf's export) through base/dbp_enter.h, which
 * uses the thread state of a thread already running Python (a capsule
 * destructor, pyarrow's release under the GIL) rather than asking again.
 * Once the interpreter finalizes or is gone the view is leaked: nothing of
 * Python is touched. */
static void exp_array_release(DbpArrowArray *a) {
  if (a->release == NULL) return;
  ExpArray *p = a->private_data;
  if (p != NULL) {
    dbp_entered e;
    if (p->holder != NULL && dbp_enter(&p->home, &e) == 0) {
      Py_DECREF(p->holder);
      dbp_leave(&e);
    }
    dbp_home_drop(&p->home);
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
  if (dbp_home_take(&ap->home) < 0) goto fail;
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
  if (ap) dbp_home_drop(&ap->home);
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
     "__arrow_c_device_array__($self, /, requested_schema=None, **kwargs)\n--\n\n"
     "__arrow_c_device_array__(requested_schema=None, **kwargs) -> (schema, device array) "
     "PyCapsules of a contiguous 1-d buffer (Arrow C device data interface). devbuf.sim and "
     "devices Arrow has no type for are ARROW_DEVICE_EXT_DEV, named in the schema metadata "
     "key 'devbuf.device'."},
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))m_arrow_c_array,
     METH_VARARGS | METH_KEYWORDS,
     "__arrow_c_array__($self, /, requested_schema=None)\n--\n\n"
     "__arrow_c_array__(requested_schema=None) -> (schema, array) PyCapsules of a contiguous "
     "1-d buffer the host can read (Arrow C data interface); BufferError for device memory."},
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
  if (dbp_arrow_import_init(module) < 0) return -1;
  if (install(&DbpBuffer_Type) < 0 || install(&DbpView_Type) < 0) return -1;
  return 0;
}
