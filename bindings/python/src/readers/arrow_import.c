/* arrow_import.c: the Arrow PyCapsule (device) interface reader. It
 * only fills a description: calls desc/ and base/. See
 * docs/arrow.md and docs/consumers.md.
 *
 * The producer's __arrow_c_device_array__ (else __arrow_c_array__) array is
 * moved into the one import description (desc.h, kind DBP_DESC_ARROW): its
 * owner is the moved ArrowArray, whose release callback dbp_desc_free calls
 * exactly once; the schema is only read (format, the devbuf.dtype extension,
 * the devbuf.device key) and released by its capsule when the import ends.
 * Only a primitive, null-free, flat array is taken. The producer's
 * sync_event is the description's event: every reader waits on it, and it
 * is never destroyed here (it belongs to the array).
 *
 * devbuf.view() owns the description in a DeviceView, nothing in between;
 * devbuf.from_arrow() puts it behind devbuf.ArrowArray (objects/arrow_array.c),
 * a read-only exporter of the extended buffer protocol. Both export it with the checks
 * and messages of dbp_arrow_desc_export. */
#include "readers/readers.h"

#include <stdlib.h>
#include <string.h>


static PyObject *g_s_device_array, *g_s_array;

void dbp_arrow_owner_free(void *owner) {
  dbp_arrow_owner *o = owner;
  /* The producer's release may run Python code (pyarrow's does);
   * dbp_desc_free keeps any pending exception out of it. */
  if (o->arr.array.release != NULL) o->arr.array.release(&o->arr.array);
  PyMem_Free(o->format);
  PyMem_Free(o->arrow_format);
  PyMem_Free(o);
}

/* ---- the schema ---------------------------------------------------------------------- */

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
static int import_format(dbp_arrow_owner *o, dbp_desc *dsc, const DbpArrowSchema *s) {
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
  o->arrow_format = PyMem_Malloc(strlen(f) + 1);
  if (o->arrow_format == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  strcpy(o->arrow_format, f);
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
    o->format = custom;
  } else {
    o->format = PyMem_Malloc(strlen(code) + 1);
    if (o->format == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    strcpy(o->format, code);
  }
  dsc->desc.itemsize = (uint64_t)size;
  return 0;
}

/* Host bitmap check for null_count -1 (not computed). */
static int64_t count_nulls(const uint8_t *bits, int64_t offset, int64_t length) {
  int64_t nulls = 0;
  for (int64_t i = offset; i < offset + length; i++) nulls += !((bits[i >> 3] >> (i & 7)) & 1);
  return nulls;
}

/* Where the memory is: identifier and flags for the Arrow device. */
static int import_device(dbp_arrow_owner *o, dbp_desc *f, const DbpArrowSchema *s) {
  int32_t t = o->arr.device_type;
  int64_t id = o->arr.device_id;
  f->event = o->arr.sync_event ? *(void **)o->arr.sync_event : NULL;
  if (t == DBP_ARROW_DEVICE_CPU) {
    f->is_host = 1;
    f->event = NULL; /* the spec: CPU memory needs no sync */
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
  f->desc.ordinal = ordinal;
  if (strcmp(interned, "cpu") == 0) {
    /* Pinned host memory: readable once the GPU runtime's event completed;
     * devbuf can only wait on it through that runtime's plugin. */
    if (f->event != NULL) {
      const char *rt = t == DBP_ARROW_DEVICE_ROCM_HOST ? "devbuf.hip" : "devbuf.cuda";
      devbuf_device d;
      int r = devbuf_device_open_ordinal(rt, (int)id, &d, &err);
      if (r == DEVBUF_OK) DBP_NOGIL(r = devbuf_event_synchronize(&d, f->event, &err));
      if (r != DEVBUF_OK) {
        PyErr_Format(PyExc_BufferError,
                     "devbuf.from_arrow: cannot wait on the sync_event of %s memory through "
                     "%s:%lld: %s", device_type_name(t), rt, (long long)id, err.message);
        return -1;
      }
      f->event = NULL;
    }
    f->is_host = 1;
    return 0;
  }
  int passes = t == DBP_ARROW_DEVICE_CUDA || t == DBP_ARROW_DEVICE_CUDA_MANAGED ||
               t == DBP_ARROW_DEVICE_ROCM || t == DBP_ARROW_DEVICE_OPENCL ||
               t == DBP_ARROW_DEVICE_EXT_DEV;
  if (f->event != NULL && !passes) {
    PyErr_Format(PyExc_BufferError,
                 "devbuf.from_arrow: the sync_event of %s memory is not an event devbuf's %s "
                 "plugin can wait on", device_type_name(t), interned);
    return -1;
  }
  f->desc.identifier = interned;
  f->identifier = interned;
  f->desc.flags |= dlflags & DEVBUF_DLPACK_HOST_ACCESSIBLE;
  if ((dlflags & DEVBUF_DLPACK_HANDLE) && o->arr.array.offset != 0) {
    PyErr_Format(PyExc_BufferError,
                 "devbuf.from_arrow: %s buffers are handles, not addresses: an array offset "
                 "(%lld) cannot be applied to one", device_type_name(t),
                 (long long)o->arr.array.offset);
    return -1;
  }
  return 0;
}

/* ---- the reader ---------------------------------------------------------------------- */

dbp_desc *dbp_arrow_import(PyObject *obj, int need) {
  int device = 1;
  PyObject *meth = NULL;
  if (dbp_compat_LookupAttr(obj, g_s_device_array, &meth) < 0) return NULL;
  if (meth == NULL) {
    device = 0;
    if (dbp_compat_LookupAttr(obj, g_s_array, &meth) < 0) return NULL;
  }
  if (meth == NULL) {
    if (!need) return NULL; /* speaks no Arrow */
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
  dbp_arrow_owner *o = PyMem_Calloc(1, sizeof *o);
  dbp_desc *f = o ? dbp_desc_new(DBP_DESC_ARROW, obj) : NULL;
  if (f == NULL) {
    if (o == NULL) PyErr_NoMemory();
    PyMem_Free(o);
    Py_DECREF(pair);
    return NULL;
  }
  /* Move the array in first: from here on the producer's memory is ours to
   * release exactly once (dbp_desc_free), whatever is refused below. */
  if (device) {
    o->arr = *(DbpArrowDeviceArray *)ap;
  } else {
    o->arr.array = *src;
    o->arr.device_type = DBP_ARROW_DEVICE_CPU;
    o->arr.device_id = -1;
  }
  src->release = NULL;
  f->managed = o;
  f->release_owner = dbp_arrow_owner_free;
  f->desc.identifier = "cpu"; /* until import_device says otherwise */
  f->desc.dl_device_type = o->arr.device_type;
  f->desc.dl_device_id = (int32_t)o->arr.device_id;
  const DbpArrowArray *arr = &o->arr.array;
  const char *refuse = NULL;
  char why[200];
  if (s->dictionary != NULL || arr->dictionary != NULL)
    refuse = "it is dictionary-encoded: decode it first (pc.dictionary_decode / .dictionary_decode())";
  else if (s->n_children != 0 || arr->n_children != 0)
    refuse = "it has children (a nested type): only flat primitive arrays are accepted";
  if (refuse == NULL && import_format(o, f, s) < 0) goto fail;
  if (refuse == NULL && arr->n_buffers != 2) {
    snprintf(why, sizeof why, "a fixed-width primitive array has 2 buffers, this one %lld",
             (long long)arr->n_buffers);
    refuse = why;
  }
  if (refuse == NULL && (arr->length < 0 || arr->offset < 0)) refuse = "negative length or offset";
  if (refuse == NULL && import_device(o, f, s) < 0) goto fail;
  if (refuse == NULL && arr->null_count != 0) {
    int64_t nulls = arr->null_count;
    if (nulls < 0) { /* not computed: count them if the host can */
      if (arr->buffers[0] == NULL) nulls = 0;
      else if (f->is_host) nulls = count_nulls(arr->buffers[0], arr->offset, arr->length);
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
  Py_ssize_t itemsize = (Py_ssize_t)f->desc.itemsize;
  if (arr->length > 0 && (arr->offset + arr->length) > PY_SSIZE_T_MAX / itemsize) {
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
  /* One flat, contiguous, read-only dimension (Arrow data is immutable). */
  f->desc.data = values ? (void *)(values + arr->offset * itemsize) : (void *)empty_data;
  f->desc.byte_offset = 0;
  f->desc.ndim = 1;
  f->desc.nitems = (uint64_t)arr->length;
  f->desc.shape[0] = arr->length;
  f->desc.strides[0] = itemsize;
  f->desc.flags |= DEVBUF_DLPACK_READONLY | DEVBUF_DLPACK_C_CONTIGUOUS | DEVBUF_DLPACK_F_CONTIGUOUS;
  if (f->is_host) f->desc.flags |= DEVBUF_DLPACK_HOST_ACCESSIBLE;
  Py_DECREF(pair); /* the schema is released by its capsule: it was only read */
  return f;
fail:
  Py_DECREF(pair);
  dbp_desc_free(f); /* releases the moved array, once */
  return NULL;
}

/* device_info for device exports (once); opening the device needs its plugin. */
static int arrow_prepare(dbp_desc *f) {
  if (f->info_ready) return 0;
  devbuf_error err;
  devbuf_error_clear(&err);
  int rc = DEVBUF_OK;
  if (!f->has_dev) {
    rc = devbuf_device_open_ordinal(f->desc.identifier, f->desc.ordinal, &f->dev, &err);
    if (rc == DEVBUF_OK) f->has_dev = 1;
  }
  uint32_t flags = DEVBUF_DEVICE_INFO_READONLY; /* Arrow data is immutable */
  if (f->desc.flags & DEVBUF_DLPACK_HOST_ACCESSIBLE) flags |= DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE;
  size_t size = 0;
  if (rc == DEVBUF_OK)
    rc = devbuf_device_info_export(&f->dev, f->event, NULL, flags, &f->info, sizeof f->info,
                                   &size, &err);
  if (rc != DEVBUF_OK) {
    char prefix[160];
    snprintf(prefix, sizeof prefix, "devbuf.ArrowArray: device_info for %s:%d",
             f->desc.identifier, (int)f->desc.ordinal);
    devbuf_error_prefix(&err, prefix);
    return dbp_buffer_error(&err);
  }
  f->info_ready = 1;
  return 0;
}

int dbp_arrow_desc_export(dbp_desc *f, Py_buffer *view, int flags) {
  const dbp_arrow_owner *o = f->managed;
  if (flags & PyBUF_WRITABLE) {
    PyErr_Format(PyExc_BufferError,
                 "devbuf.ArrowArray is read-only: Arrow arrays are immutable (the producer: "
                 "%.100s), so a writable request is refused",
                 f->source ? Py_TYPE(f->source)->tp_name : "unknown");
    return -1;
  }
  if (dbp_refuse_flat_format("devbuf.ArrowArray", o->format, flags) < 0) return -1;
  int device_export = !f->is_host && (flags & PyBUF_DEVICE);
  if (!f->is_host && !device_export) {
    if (!(f->desc.flags & DEVBUF_DLPACK_HOST_ACCESSIBLE)) {
      PyErr_Format(PyExc_BufferError,
                   "devbuf.ArrowArray: the values are on %s:%d, which the host cannot read: "
                   "request the buffer with PyBUF_DEVICE (devbuf.view(obj) does), or copy it "
                   "with devbuf.view(obj).to_host()", f->desc.identifier, (int)f->desc.ordinal);
      return -1;
    }
    if (f->event != NULL) { /* the host reads: wait for the producer */
      if (arrow_prepare(f) < 0) return -1;
      devbuf_error err;
      int rc;
      devbuf_error_clear(&err);
      DBP_NOGIL(rc = devbuf_event_synchronize(&f->dev, f->event, &err));
      if (rc != DEVBUF_OK) return dbp_buffer_error(&err);
    }
  }
  if (device_export && arrow_prepare(f) < 0) return -1;
  view->buf = f->desc.data;
  view->obj = NULL;
  view->len = (Py_ssize_t)(f->desc.nitems * f->desc.itemsize);
  view->itemsize = (Py_ssize_t)f->desc.itemsize;
  view->readonly = 1;
  view->format = (flags & PyBUF_FORMAT) ? o->format : NULL;
  view->ndim = 1;
  /* int64_t and Py_ssize_t are the same width (desc/desc.h asserts it). */
  view->shape = (flags & PyBUF_ND) ? (Py_ssize_t *)f->desc.shape : NULL;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? (Py_ssize_t *)f->desc.strides : NULL;
  view->suboffsets = NULL;
  view->internal = NULL;
  if (device_export) DevbufPy_BufferSetDevice(view, flags, f->desc.identifier, &f->info);
  return 0;
}

/* Interned names; from the module's first exec (objects/arrow_array.c). 0 or -1. */
int dbp_arrow_reader_init(void) {
  g_s_device_array = PyUnicode_InternFromString("__arrow_c_device_array__");
  g_s_array = PyUnicode_InternFromString("__arrow_c_array__");
  if (g_s_device_array == NULL || g_s_array == NULL) return -1;
  return 0;
}
