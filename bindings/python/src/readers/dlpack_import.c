/* dlpack_import.c: the DLPack reader.
 *
 * A producer's DLPack tensor (through its type's C exchange table, or a
 * capsule from __dlpack__) is validated and filled into the one import
 * description (desc/desc.h), with the stream hand-off the DLPack spec asks
 * for; the DeviceView that devbuf.from_dlpack() (objects/from_dlpack.c) and
 * the devbuf.view() fallback (route/route.c) return owns that description
 * directly and calls the tensor's deleter once. It only fills the
 * description: it calls base/ and desc/, nothing above. See docs/interop.md
 * and docs/consumers.md. */
#include "readers/readers.h"

#include <string.h>

static PyObject *g_s_dlpack, *g_s_dlpack_device, *g_s_api_attr;
/* ("stream", "max_version", "dl_device", "copy")[:n] for n = 0..4, and
 * devbuf's max_version: built once, they cost an import nothing. */
static PyObject *g_kwnames[5], *g_max_version;
/* ("max_version", "dl_device", "copy")[:n] for n = 0..3: the calls that
 * leave stream at its default (None). */
static PyObject *g_kwnames_ns[4];

/* ---- the exchange table of a producer type ------------------------------------------ */

static int method_call_is_direct(PyTypeObject *type, PyObject *descr);

/* A producer type's exchange table, and (*dlpack, when asked) its
 * __dlpack__ as the type's dict holds it, borrowed, with *direct = 1 when a
 * method call obj.__dlpack__(...) calls exactly it (method_call_is_direct).
 * NULL with an exception when the table attribute is malformed. */
const devbuf_dlpack_exchange_api *dbp_dlpack_type_of(PyTypeObject *type, PyObject **dlpack,
                                                     int *direct) {
  /* Direct-mapped cache keyed by (type, version tag), as the flag cache of
   * devbuf_buffer.h: a type attribute change gives a new tag. Per thread
   * where the GIL can be off, as that cache, so no entry is torn. The
   * borrowed __dlpack__ is kept only with the GIL: its type's dict holds it
   * while the tag is unchanged (a change to the type or a base resets the
   * tag), and without the GIL another thread may drop it meanwhile. */
  enum { NCACHE = 16 };
  static DEVBUFPY__SF_TLS struct {
    PyTypeObject *type;
    unsigned int tag;
    const devbuf_dlpack_exchange_api *api;
    PyObject *dlpack;
    int direct;
  } cache[NCACHE];
  size_t slot = ((size_t)(uintptr_t)type >> 4) & (NCACHE - 1);
  unsigned int tag = DevbufPy__CacheableTag(type);
  if (cache[slot].type == type && tag != 0 && cache[slot].tag == tag) {
    if (dlpack != NULL) {
#if defined(Py_GIL_DISABLED)
      *dlpack = _PyType_Lookup(type, g_s_dlpack);
      *direct = *dlpack != NULL && method_call_is_direct(type, *dlpack);
#else
      *dlpack = cache[slot].dlpack;
      *direct = cache[slot].direct;
#endif
    }
    return cache[slot].api;
  }
  PyObject *attr = _PyType_Lookup(type, g_s_api_attr); /* borrowed, no exception */
  const devbuf_dlpack_exchange_api *api = NULL;
  if (attr != NULL) {
    if (!PyCapsule_IsValid(attr, DEVBUF_DLPACK_EXCHANGE_API_CAPSULE)) {
      PyErr_Format(PyExc_TypeError,
                   "%.100s.%s is not a PyCapsule named \"%s\"", type->tp_name,
                   DEVBUF_DLPACK_EXCHANGE_API_ATTR, DEVBUF_DLPACK_EXCHANGE_API_CAPSULE);
      return NULL;
    }
    api = PyCapsule_GetPointer(attr, DEVBUF_DLPACK_EXCHANGE_API_CAPSULE);
    /* Walk to a table of the major we read. */
    const devbuf_dlpack_exchange_api_header *h = api ? &api->header : NULL;
    while (h != NULL && h->version.major != DEVBUF_DLPACK_MAJOR) h = h->prev_api;
    api = (const devbuf_dlpack_exchange_api *)h;
    if (api && (api->managed_tensor_from_py_object_no_sync == NULL)) api = NULL;
  }
  PyObject *m = _PyType_Lookup(type, g_s_dlpack); /* borrowed, no exception */
  int d = m != NULL && method_call_is_direct(type, m);
  if (dlpack != NULL) {
    *dlpack = m;
    *direct = d;
  }
  /* The lookups above gave the type a tag if it can have one. */
  tag = DevbufPy__CacheableTag(type);
  if (tag != 0) {
    cache[slot].type = type;
    cache[slot].tag = tag;
    cache[slot].api = api;
    cache[slot].dlpack = m;
    cache[slot].direct = d;
  }
  return api;
}

const devbuf_dlpack_exchange_api *dbp_exchange_api_of(PyTypeObject *type) {
  return dbp_dlpack_type_of(type, NULL, NULL);
}

/* Import through the table: an owning tensor, then the producer's current
 * stream turned into an event. */
dbp_desc *dbp_dlpack_import_exchange(PyObject *obj, const devbuf_dlpack_exchange_api *api) {
  DLManagedTensorVersioned *m = NULL;
  if (api->managed_tensor_from_py_object_no_sync(obj, &m) != 0 || m == NULL) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_BufferError, "%.100s's DLPack exchange table returned no tensor",
                   Py_TYPE(obj)->tp_name);
    return NULL;
  }
  dbp_desc *f = dbp_desc_from_versioned(m, obj);
  if (f == NULL) {
    devbuf_dlpack_delete_versioned(m); /* ours: the table gave it to us */
    return NULL;
  }
  if (!f->is_host && api->current_work_stream != NULL) {
    void *stream = NULL;
    if (api->current_work_stream(m->dl_tensor.device.device_type, m->dl_tensor.device.device_id,
                                 &stream) != 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_BufferError, "current_work_stream failed");
      dbp_desc_free(f);
      return NULL;
    }
    /* The producer's work stream (NULL: its device's default stream, where
     * devbuf itself orders its work) gets an event every reader waits on:
     * with no sync from the producer, this is what makes the data safe. */
    int rc = stream != NULL ? dbp_desc_record(f, stream, "DLPack exchange import")
                            : dbp_desc_after_stream_import(f);
    if (rc < 0) {
      dbp_desc_free(f);
      return NULL;
    }
  }
  return f;
}

/* ---- capsules --------------------------------------------------------------------- */

/* legacy_writable: the caller vouched that a pre-1.0 producer allows
 * writes; otherwise a legacy tensor is read-only (it cannot say). */
/* not_cpu: when not NULL, a tensor that is not on kDLCPU is left in the
 * capsule (not consumed, no exception) and *not_cpu set: the caller skipped
 * the device query on the word of the producer type's cache. */
static dbp_desc *import_capsule(PyObject *cap, PyObject *producer, int legacy_writable,
                                int *not_cpu) {
  if (!PyCapsule_CheckExact(cap)) {
    PyErr_Format(PyExc_TypeError, "__dlpack__ returned %.100s, not a PyCapsule",
                 Py_TYPE(cap)->tp_name);
    return NULL;
  }
  /* The usual capsule first: one name compare, inside GetPointer (its
   * ValueError for another name is dropped: the name is judged below). */
  const char *name = DEVBUF_DLPACK_CAPSULE_VERSIONED;
  void *p = PyCapsule_GetPointer(cap, name);
  int versioned = 1;
  if (p == NULL) {
    PyErr_Clear();
    name = PyCapsule_GetName(cap);
    if (name != NULL && strcmp(name, DEVBUF_DLPACK_CAPSULE_LEGACY) == 0) {
      versioned = 0;
    } else if (name != NULL && (strcmp(name, DEVBUF_DLPACK_CAPSULE_VERSIONED_USED) == 0 ||
                                strcmp(name, DEVBUF_DLPACK_CAPSULE_LEGACY_USED) == 0)) {
      PyErr_Format(PyExc_BufferError,
                   "the DLPack capsule was already consumed (its name is \"%s\"): a capsule "
                   "can be imported once",
                   name);
      return NULL;
    } else {
      PyErr_Format(PyExc_BufferError,
                   "a DLPack capsule must be named \"dltensor_versioned\" or \"dltensor\", "
                   "not %s%s%s",
                   name ? "\"" : "", name ? name : "NULL", name ? "\"" : "");
      return NULL;
    }
  }
  if (p == NULL && (p = PyCapsule_GetPointer(cap, name)) == NULL) return NULL;
  if (not_cpu != NULL) {
    /* Another major's layout is not read here: the import below refuses it. */
    const DLTensor *t = versioned ? (((DLManagedTensorVersioned *)p)->version.major ==
                                             DEVBUF_DLPACK_MAJOR
                                         ? &((DLManagedTensorVersioned *)p)->dl_tensor
                                         : NULL)
                                  : &((DLManagedTensor *)p)->dl_tensor;
    if (t != NULL && t->device.device_type != kDLCPU) {
      *not_cpu = 1;
      return NULL;
    }
  }
  dbp_desc *f;
  if (versioned) {
    /* Another major: refuse without consuming, so that the capsule's own
     * destructor still calls the deleter. */
    f = dbp_desc_from_versioned(p, producer);
  } else {
    DLManagedTensor *m = p;
    DLPackVersion none = {0, 0};
    f = dbp_desc_new_undescribed(DBP_DESC_DLPACK_LEGACY, producer);
    uint64_t fl = legacy_writable ? 0 : DLPACK_FLAG_BITMASK_READ_ONLY;
    if (f != NULL && dbp_desc_describe(f, &m->dl_tensor, fl, none) < 0) {
      dbp_desc_free(f);
      f = NULL;
    }
  }
  if (f == NULL) return NULL;
  if (PyCapsule_SetName(cap, versioned ? DEVBUF_DLPACK_CAPSULE_VERSIONED_USED
                                       : DEVBUF_DLPACK_CAPSULE_LEGACY_USED) < 0) {
    f->managed = NULL; /* the capsule keeps it */
    dbp_desc_free(f);
    return NULL;
  }
  f->managed = p;
  return f;
}

/* The stream devbuf consumes on, as the DLPack Python spec numbers it:
 * devbuf works on each device's default stream. For OpenCL that is the
 * plugin's default queue, passed as its cl_command_queue handle (what the
 * devbuf_device_info of a NULL stream names, docs/devices/opencl.md) so that
 * any producer can order its work before it; if the device cannot be
 * opened, None (the producer then synchronizes as it sees fit). */
static PyObject *consumer_stream(DLDevice pd) {
  switch ((int32_t)pd.device_type) {
    case kDLCUDA:
    case kDLCUDAManaged: return PyLong_FromLong(1); /* legacy default stream */
    case kDLROCM: return PyLong_FromLong(0);        /* default stream */
    case kDLOpenCL: {
      devbuf_device dev;
      devbuf_device_info info;
      size_t size = 0;
      devbuf_error err;
      devbuf_error_clear(&err);
      if (devbuf_device_open_ordinal("devbuf.opencl", pd.device_id, &dev, &err) == DEVBUF_OK &&
          devbuf_device_info_export(&dev, NULL, NULL, 0, &info, sizeof info, &size, &err) ==
              DEVBUF_OK &&
          size >= offsetof(devbuf_device_info, stream) + sizeof info.stream && info.stream != NULL)
        return PyLong_FromVoidPtr(info.stream);
      Py_RETURN_NONE;
    }
    default: Py_RETURN_NONE;
  }
}

static PyTypeObject *g_ndarray; /* set once, to the same value by any thread */

/* obj.__dlpack_device__() as (type, id), or -1 with an exception. *has = 0
 * when the method is missing. */
static int producer_device(PyObject *obj, DLDevice *out, int *has) {
  *has = 0;
  /* NumPy's ndarray is host memory by definition (its __dlpack_device__
   * always answers (kDLCPU, 0)): skip the round trip, a third of an import.
   * Only the exact C type: a subclass may say otherwise. A Python class's
   * tp_name has no dot, so no other type can pass this name test. */
  PyTypeObject *type = Py_TYPE(obj), *ndarray = (PyTypeObject *)DBP_LOAD_PTR(&g_ndarray);
  if (type == ndarray || (ndarray == NULL && !(type->tp_flags & Py_TPFLAGS_HEAPTYPE) &&
                          strcmp(type->tp_name, "numpy.ndarray") == 0)) {
    DBP_STORE_PTR(&g_ndarray, type);
    out->device_type = kDLCPU;
    out->device_id = 0;
    *has = 1;
    return 0;
  }
  PyObject *r = PyObject_CallMethodNoArgs(obj, g_s_dlpack_device);
  if (r == NULL) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
      return 0;
    }
    return -1;
  }
  int ok = PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2;
  long t = ok ? PyLong_AsLong(PyTuple_GET_ITEM(r, 0)) : 0;
  long id = ok ? PyLong_AsLong(PyTuple_GET_ITEM(r, 1)) : 0;
  Py_DECREF(r);
  if (!ok) {
    PyErr_SetString(PyExc_TypeError, "__dlpack_device__() must return a (device_type, device_id) tuple");
    return -1;
  }
  if (PyErr_Occurred()) return -1;
  int32_t ti = (int32_t)t;
  memcpy(&out->device_type, &ti, sizeof ti);
  out->device_id = (int32_t)id;
  *has = 1;
  return 0;
}

/* Whether a method call obj.name(...) on an instance of `type`, whose
 * type attribute `descr` (from _PyType_Lookup) is, calls descr(obj, ...)
 * exactly, as CPython's _PyObject_GetMethod decides: generic attribute
 * lookup, a method descriptor (a builtin method, as NumPy's __dlpack__ is;
 * not a data descriptor), and no instance dict that could shadow it. Then
 * the call skips the second lookup of the method. */
static int method_call_is_direct(PyTypeObject *type, PyObject *descr) {
  if (type->tp_getattro != PyObject_GenericGetAttr) return 0;
  if (!PyType_HasFeature(Py_TYPE(descr), Py_TPFLAGS_METHOD_DESCRIPTOR)) return 0;
  if (type->tp_dictoffset != 0) return 0;
#ifdef Py_TPFLAGS_MANAGED_DICT
  if (type->tp_flags & Py_TPFLAGS_MANAGED_DICT) return 0;
#endif
  return 1;
}

/* Call obj.__dlpack__ with what the producer understands: the full
 * keywords first, then without dl_device/copy (*dropped = 1), then the
 * pre-2023 forms. */
static PyObject *call_dlpack(PyObject *obj, PyObject *fn, int unbound, PyObject *stream,
                             PyObject *dl_device, PyObject *copy, int *dropped) {
  int extra = dl_device != Py_None || copy != Py_None;
  /* stream=None is the default: leaving it out spares the producer parsing
   * a keyword (NumPy's own from_dlpack leaves it out too). */
  int ns = stream == Py_None;
  static const int tries_full[] = {4, 2, 1, 0}, tries_short[] = {2, 1, 0};
  static const int tries_full_ns[] = {3, 1, 0}, tries_short_ns[] = {1, 0};
  const int *tries = extra ? (ns ? tries_full_ns : tries_full) : (ns ? tries_short_ns : tries_short);
  int ntries = (extra ? 4 : 3) - ns;
  int nall = 4 - ns;
  /* argv[0] is obj, for the method call without a bound method object. */
  PyObject *argv[5] = {obj, stream, g_max_version, dl_device, copy};
  PyObject **vals = argv + 1 + ns, **names = ns ? g_kwnames_ns : g_kwnames;
  if (ns) vals[-1] = obj;
  PyObject *r = NULL;
  *dropped = 0;
  for (int a = 0; a < ntries; a++) {
    /* A producer that does not know a keyword raises TypeError: retry with
     * fewer, as the array API standard suggests. */
    if (a > 0) {
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) break;
      PyErr_Clear();
    }
    int n = tries[a];
    if (extra && n < nall) *dropped = 1;
    /* fn: an instance attribute the caller found (unbound: the type's
     * method descriptor, called with obj first, as a method call would);
     * else the type's method, looked up by the call. */
    r = fn == NULL ? PyObject_VectorcallMethod(g_s_dlpack, vals - 1, 1, names[n])
        : unbound  ? PyObject_Vectorcall(fn, vals - 1, 1, names[n])
                   : PyObject_Vectorcall(fn, vals, 0, names[n]);
    if (r != NULL) break;
  }
  return r;
}

/* fn: obj.__dlpack__ when the caller found it on the instance, else NULL
 * (the type's method is called). */
/* The device query, cached per producer type that has only answered
 * kDLCPU (the DLPack spec asks for __dlpack_device__ to choose the stream,
 * and for the CPU the stream is None). Per thread, so that no lock is taken
 * and nothing is shared without the GIL; keyed by interpreter, type and the
 * type's version tag (a changed or new type gets a new tag). Every import
 * that skipped the query checks the tensor's device before taking it: a
 * type caught off the CPU is marked so and never skips the query again. */
enum { CPU_TYPES = 8 };
static _Thread_local struct {
  PyInterpreterState *interp;
  PyTypeObject *type;
  unsigned int tag;
  int cpu_only; /* 1: only kDLCPU seen; 0: seen elsewhere */
} t_cpu_types[CPU_TYPES];

/* 1 if `type` answered only kDLCPU so far; 0 if unknown or not. */
static int cpu_type_cached(PyTypeObject *type, PyInterpreterState *interp) {
  size_t i = ((size_t)(uintptr_t)type >> 4) & (CPU_TYPES - 1);
  /* The tag's validity differs by version (3.13 has no VALID flag): the
   * header's DevbufPy__CacheableTag knows each. */
  unsigned int tag = DevbufPy__CacheableTag(type);
  return t_cpu_types[i].type == type && t_cpu_types[i].interp == interp && tag != 0 &&
         t_cpu_types[i].tag == tag && t_cpu_types[i].cpu_only;
}

static void cpu_type_note(PyTypeObject *type, PyInterpreterState *interp, int cpu) {
  unsigned int tag = DevbufPy__CacheableTag(type);
  if (tag == 0) return;
  size_t i = ((size_t)(uintptr_t)type >> 4) & (CPU_TYPES - 1);
  /* Once off the CPU, a type stays off: a CPU answer does not overwrite it. */
  if (cpu && t_cpu_types[i].type == type && t_cpu_types[i].interp == interp &&
      t_cpu_types[i].tag == tag && !t_cpu_types[i].cpu_only)
    return;
  t_cpu_types[i].interp = interp;
  t_cpu_types[i].type = type;
  t_cpu_types[i].tag = tag;
  t_cpu_types[i].cpu_only = cpu;
}

dbp_desc *dbp_dlpack_import_call(PyObject *obj, PyObject *fn, int unbound,
                                 PyObject *dl_device, PyObject *copy, int *dropped,
                                 int legacy_writable) {
  DLDevice pd;
  int has = 0;
  PyTypeObject *type = Py_TYPE(obj);
  /* NumPy's ndarray needs no cache (producer_device knows it); a requested
   * device may move the data, so then the producer is always asked. */
  int cacheable = dl_device == Py_None && type != (PyTypeObject *)DBP_LOAD_PTR(&g_ndarray);
  PyInterpreterState *interp = cacheable ? PyInterpreterState_Get() : NULL;
  int skip = cacheable && cpu_type_cached(type, interp);
  if (skip) {
    pd.device_type = kDLCPU;
    pd.device_id = 0;
    has = 1;
  } else {
    if (producer_device(obj, &pd, &has) < 0) return NULL;
    if (has && cacheable) cpu_type_note(type, interp, pd.device_type == kDLCPU);
  }
  PyObject *stream = has ? consumer_stream(pd) : Py_NewRef(Py_None);
  if (stream == NULL) return NULL;
  PyObject *cap = call_dlpack(obj, fn, unbound, stream, dl_device, copy, dropped);
  /* The producer cannot reach that device (NumPy only knows the CPU): take
   * the tensor where it is and let devbuf's plugins move it. The standard
   * says BufferError; NumPy 2.1-2.2 raise ValueError("unsupported device
   * requested"). Only the retry without dl_device decides: any other
   * ValueError comes back from it unchanged. */
  if (cap == NULL && dl_device != Py_None &&
      (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_ValueError))) {
    PyErr_Clear();
    cap = call_dlpack(obj, fn, unbound, stream, Py_None, copy == Py_True ? Py_None : copy,
                      dropped);
    *dropped = 1;
  }
  Py_DECREF(stream);
  if (cap == NULL) return NULL;
  int not_cpu = 0;
  dbp_desc *f = import_capsule(cap, obj, legacy_writable, skip ? &not_cpu : NULL);
  Py_DECREF(cap); /* consumed: its destructor does nothing; else it deletes */
  if (not_cpu) {
    /* The cache was wrong for this object: it was exported without the
     * device query and the stream it asks for (the capsule, unconsumed, has
     * just been deleted). Mark the type and import again the full way. */
    cpu_type_note(type, interp, 0);
    return dbp_dlpack_import_call(obj, fn, unbound, dl_device, copy, dropped, legacy_writable);
  }
  if (f != NULL && dbp_desc_after_stream_import(f) < 0) {
    dbp_desc_free(f);
    f = NULL;
  }
  return f;
}

/* Interned names and keyword tuples, built once (from the module's first exec). */
int dbp_dlpack_reader_init(void) {
  g_s_dlpack = PyUnicode_InternFromString("__dlpack__");
  g_s_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
  g_s_api_attr = PyUnicode_InternFromString(DEVBUF_DLPACK_EXCHANGE_API_ATTR);
  if (!g_s_dlpack || !g_s_dlpack_device || !g_s_api_attr) return -1;
  static const char *const kw[] = {"stream", "max_version", "dl_device", "copy"};
  for (int n = 0; n <= 3; n++) {
    g_kwnames_ns[n] = PyTuple_New(n);
    if (g_kwnames_ns[n] == NULL) return -1;
    for (int i = 0; i < n; i++) {
      PyObject *k = PyUnicode_InternFromString(kw[i + 1]);
      if (k == NULL) return -1;
      PyTuple_SET_ITEM(g_kwnames_ns[n], i, k);
    }
  }
  for (int n = 0; n <= 4; n++) {
    g_kwnames[n] = PyTuple_New(n);
    if (g_kwnames[n] == NULL) return -1;
    for (int i = 0; i < n; i++) {
      PyObject *k = PyUnicode_InternFromString(kw[i]);
      if (k == NULL) return -1;
      PyTuple_SET_ITEM(g_kwnames[n], i, k);
    }
  }
  g_max_version = Py_BuildValue("(ii)", DEVBUF_DLPACK_MAJOR, DEVBUF_DLPACK_MINOR);
  if (g_max_version == NULL) return -1;
  return 0;
}
