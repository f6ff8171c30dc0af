/* SPDX-License-Identifier: BSD-3-Clause */
/* devbuf_buffer.h: a header-only backport of the device extension of the
 * Python buffer protocol (the "extended buffer protocol PEP draft for device
 * memory support"), for CPython 3.8+ as it ships today.
 *
 * Include it after <Python.h> from any C extension. It needs nothing else:
 * no libdevbuf, no devbuf headers, no link step (as pythoncapi_compat does
 * for other APIs). Producers and consumers built against it interoperate
 * with each other and with every existing buffer producer and consumer.
 *
 * What it provides
 *  - DevbufPy_buffer_ext: the extended Py_buffer, i.e. the standard fields
 *    followed by `int flags; int ext_flags; char *device; void *device_info;`
 *  - PyBUF_DEVICE: the device request flag (provisional value, see below).
 *  - PyBUF_REQUIRED_FLAGS: the request flags a producer must not ignore.
 *  - The backport of the `bf_supported_flags` slot: a type attribute
 *    `__buffer_supported_flags__` (see "Advertising supported flags").
 *  - DevbufPy_CheckBufferSupports(obj, flags): the backport of
 *    PyObject_CheckBufferSupports.
 *  - DevbufPy_GetBufferEx(obj, view, flags): PyObject_GetBuffer as the draft
 *    says future CPython will do it: zero `flags`/`ext_flags`/`device`/
 *    `device_info` first, refuse required flags the type does not support,
 *    and treat a producer that did not set PyBUF_DEVICE in `flags` as a CPU
 *    buffer.
 *  - Small helpers for producers (DevbufPy_BufferSetDevice) and consumers
 *    (DevbufPy_BufferIsDevice, DevbufPy_BufferRelease).
 *
 * A producer without the buffer protocol that speaks DLPack (__dlpack__,
 * __dlpack_device__) is read by devbuf_dlpack_import.h, beside this file and
 * header-only too (DevbufPy_DLPackImport / DevbufPy_DLPackRelease): the same
 * kind of description (device, pointer, shape, strides, format, read-only,
 * the owner and a release that calls the deleter once), no devbuf object.
 *
 * The rules, in one place
 *  Consumer: pass a DevbufPy_buffer_ext whenever PyBUF_DEVICE is in the
 *    request (always, if you go through DevbufPy_GetBufferEx), and read
 *    `device`/`device_info` only when `view.flags & PyBUF_DEVICE` is set
 *    after the call. A buffer without it is ordinary host memory.
 *    Memory whose `device` is non-NULL must not be dereferenced by the host
 *    unless that device's specification says it may, and only after
 *    honouring the synchronisation its `device_info` describes.
 *    PyBuffer_* helpers that read the data (PyBuffer_ToContiguous, ...)
 *    work only on CPU buffers.
 *  Producer: touch the four extended fields only when the request had
 *    PyBUF_DEVICE (the struct behind a plain request may be a plain
 *    Py_buffer: writing past it corrupts the consumer's memory). If the
 *    buffer can only be described with device information and the request
 *    lacks PyBUF_DEVICE, raise BufferError. When you fill device
 *    information, set PyBUF_DEVICE in `flags`. `device` is NULL (host
 *    memory) or a unique, NUL-terminated UTF-8 identifier that outlives the
 *    export; `device_info` points to data laid out as that identifier's
 *    specification says, valid until the matching release.
 *
 * PyBUF_DEVICE's value (PROVISIONAL)
 *  The draft names the flag but no CPython release defines it. This header
 *  uses bit 24 (0x1000000): CPython's request flags end at PyBUF_WRITE
 *  (0x200), and no release uses a higher bit. This is the only place the
 *  value lives; producers and consumers must agree on it, so do not redefine
 *  it. If the interpreter's own headers ever define PyBUF_DEVICE, theirs is
 *  used and DEVBUFPY_PYBUF_DEVICE_IS_BACKPORT is 0.
 *
 * Advertising supported flags (the bf_supported_flags backport)
 *  A type advertises the request flags it supports with a class attribute
 *  `__buffer_supported_flags__` (an int), i.e. the value Python code sees as
 *  `type(obj).__buffer_supported_flags__`. Meaning, as the draft defines
 *  bf_supported_flags:
 *     absent or 0 : every classic flag (DEVBUFPY_BUF_CLASSIC_FLAGS), and no
 *                   extended flag; this is what every existing type gets;
 *     -1          : only PyBUF_SIMPLE;
 *     other       : exactly these bits; list the classic ones you support
 *                   too, e.g. DEVBUFPY_BUF_CLASSIC_FLAGS | PyBUF_DEVICE.
 *  A C type sets it once, after PyType_Ready, with
 *     DevbufPy_SetBufferSupportedFlags(&MyType, DEVBUFPY_BUF_CLASSIC_FLAGS | PyBUF_DEVICE);
 *  and a Python class writes `__buffer_supported_flags__ = ...` in its body.
 *  Advertising is optional: PyBUF_DEVICE is a soft flag, and a consumer must
 *  check `view.flags` anyway. It lets a consumer that cannot use CPU memory
 *  skip asking, and lets GetBufferEx refuse required flags up front.
 *  Lookups are cached per type (keyed by the type's version tag, which
 *  CPython invalidates whenever a type attribute changes), so the check
 *  costs two or three compares on the hot path. What "valid tag" means
 *  differs by version (see DevbufPy__CacheableTag). The cache relies on the
 *  GIL; on a free-threaded build (Py_GIL_DISABLED) it is compiled out.
 *
 * All functions here follow CPython's conventions: 0 / 1 results, -1 with
 * an exception set on error, and they must be called with the GIL held. */
#ifndef DEVBUF_BUFFER_H
#define DEVBUF_BUFFER_H

#ifndef Py_PYTHON_H
#error "include <Python.h> before devbuf_buffer.h"
#endif

#include <stddef.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this header's API; grows when functions are added. */
#define DEVBUFPY_BUFFER_H_VERSION 1

/* ---- the flags ----------------------------------------------------------- */

#ifndef PyBUF_DEVICE
/* PROVISIONAL (see the top of this file): the one place the value lives. */
#define PyBUF_DEVICE 0x1000000
#define DEVBUFPY_PYBUF_DEVICE_IS_BACKPORT 1
#else
#define DEVBUFPY_PYBUF_DEVICE_IS_BACKPORT 0
#endif

/* Every request flag CPython defined before the draft. */
#define DEVBUFPY_BUF_CLASSIC_FLAGS                                                     \
  (PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_ND | PyBUF_STRIDES | PyBUF_C_CONTIGUOUS |       \
   PyBUF_F_CONTIGUOUS | PyBUF_ANY_CONTIGUOUS | PyBUF_INDIRECT)

/* The flags a producer must not ignore: every classic flag except the bit
 * that only PyBUF_INDIRECT adds (a soft "I could follow suboffsets"), and
 * not PyBUF_DEVICE (soft by the draft: a producer may answer it with a
 * plain CPU buffer). */
#ifndef PyBUF_REQUIRED_FLAGS
#define PyBUF_REQUIRED_FLAGS (DEVBUFPY_BUF_CLASSIC_FLAGS & ~(PyBUF_INDIRECT & ~PyBUF_STRIDES))
#endif

/* Every extended request flag this header knows. */
#define DEVBUFPY_BUF_EXTENDED_FLAGS (PyBUF_DEVICE)

/* The class attribute that backports bf_supported_flags. */
#define DEVBUFPY_SUPPORTED_FLAGS_ATTR "__buffer_supported_flags__"

/* ---- the extended Py_buffer ------------------------------------------------ */

/* The classic Py_buffer, field for field, as CPython 3.11 froze it: the
 * layout every binary built against unpatched headers uses. */
typedef struct DevbufPy__classic_buffer {
  void *buf;
  PyObject *obj;
  Py_ssize_t len;
  Py_ssize_t itemsize;
  int readonly;
  int ndim;
  char *format;
  Py_ssize_t *shape;
  Py_ssize_t *strides;
  Py_ssize_t *suboffsets;
  void *internal;
} DevbufPy__classic_buffer;

#if defined(__cplusplus) && __cplusplus >= 201103L
#define DEVBUFPY__STATIC_ASSERT(c, m) static_assert(c, m)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define DEVBUFPY__STATIC_ASSERT(c, m) _Static_assert(c, m)
#else
#define DEVBUFPY__STATIC_ASSERT(c, m)
#endif

#ifdef Py_HAVE_BUFFER_DEVICE_EXTENSION
/* NATIVE: the interpreter's own Py_buffer already ends with the draft's
 * fields (devbuf's cpython/patches/ series, or a future CPython). Then
 * DevbufPy_buffer_ext is a view of that very struct: `ext.view` is the
 * Py_buffer, and `ext.flags`/`ext.device`/... alias its own fields, so code
 * written against the backport compiles unchanged and CPython's
 * PyObject_GetBuffer does the zeroing. */
#define DEVBUFPY_NATIVE_BUFFER_EXTENSION 1
/* The aliasing needs an anonymous struct: standard C11, an extension in
 * C++ that GCC, Clang and MSVC all have. `__extension__` keeps
 * -Wpedantic quiet about it; MSVC's level-4 C4201 is silenced locally. */
#if defined(__GNUC__) || defined(__clang__)
#define DEVBUFPY__ANON_STRUCT __extension__ struct
#else
#define DEVBUFPY__ANON_STRUCT struct
#endif
#ifdef _MSC_VER
#pragma warning(push)
#pragma warning(disable : 4201)
#endif
typedef union DevbufPy_buffer_ext {
  Py_buffer view;
  DEVBUFPY__ANON_STRUCT {
    char devbuf_classic_[offsetof(Py_buffer, flags)];
    int flags;
    int ext_flags;
    char *device;
    void *device_info;
  };
} DevbufPy_buffer_ext;
#ifdef _MSC_VER
#pragma warning(pop)
#endif
#else
#define DEVBUFPY_NATIVE_BUFFER_EXTENSION 0
/* BACKPORT: the standard Py_buffer, then the draft's fields. `view` comes
 * first, so a `DevbufPy_buffer_ext *` and a `Py_buffer *` to it are
 * interchangeable (pass `&ext.view` to PyObject_GetBuffer; a producer
 * recovers the extended struct with DEVBUFPY_BUFFER_EXT(view) once it has
 * seen PyBUF_DEVICE). */
typedef struct DevbufPy_buffer_ext {
  Py_buffer view;     /* buf, obj, len, itemsize, readonly, ndim, format, shape, ... */
  int flags;          /* extended request flags the producer honoured (PyBUF_DEVICE) */
  int ext_flags;      /* zero; general flag space for future extensions */
  char *device;       /* NULL (host) or the device identifier, e.g. "devbuf.sim" */
  void *device_info;  /* the identifier's own device information, or NULL */
} DevbufPy_buffer_ext;
DEVBUFPY__STATIC_ASSERT(sizeof(Py_buffer) == sizeof(DevbufPy__classic_buffer),
                        "devbuf_buffer.h: Py_buffer is not the classic 3.11 layout");
#endif

/* Byte for byte, backport and native agree: the draft's fields start right
 * after the classic struct, in this order, with no padding of their own. */
DEVBUFPY__STATIC_ASSERT(offsetof(DevbufPy_buffer_ext, flags) == sizeof(DevbufPy__classic_buffer),
                        "DevbufPy_buffer_ext: flags must follow the classic Py_buffer directly");
DEVBUFPY__STATIC_ASSERT(offsetof(DevbufPy_buffer_ext, ext_flags) ==
                            sizeof(DevbufPy__classic_buffer) + sizeof(int),
                        "DevbufPy_buffer_ext: ext_flags misplaced");
DEVBUFPY__STATIC_ASSERT(offsetof(DevbufPy_buffer_ext, device) ==
                            sizeof(DevbufPy__classic_buffer) + 2 * sizeof(int),
                        "DevbufPy_buffer_ext: device misplaced");
DEVBUFPY__STATIC_ASSERT(offsetof(DevbufPy_buffer_ext, device_info) ==
                            sizeof(DevbufPy__classic_buffer) + 2 * sizeof(int) + sizeof(char *),
                        "DevbufPy_buffer_ext: device_info misplaced");
DEVBUFPY__STATIC_ASSERT(sizeof(DevbufPy_buffer_ext) ==
                            sizeof(DevbufPy__classic_buffer) + 2 * sizeof(int) + 2 * sizeof(void *),
                        "DevbufPy_buffer_ext: unexpected size");
#ifdef Py_HAVE_BUFFER_DEVICE_EXTENSION
DEVBUFPY__STATIC_ASSERT(sizeof(DevbufPy_buffer_ext) == sizeof(Py_buffer),
                        "native Py_buffer and DevbufPy_buffer_ext differ in size");
DEVBUFPY__STATIC_ASSERT(offsetof(Py_buffer, device) == offsetof(DevbufPy_buffer_ext, device) &&
                            offsetof(Py_buffer, device_info) ==
                                offsetof(DevbufPy_buffer_ext, device_info) &&
                            offsetof(Py_buffer, ext_flags) ==
                                offsetof(DevbufPy_buffer_ext, ext_flags),
                        "native Py_buffer's device fields are not where devbuf puts them");
DEVBUFPY__STATIC_ASSERT(PyBUF_DEVICE == 0x1000000,
                        "the interpreter's PyBUF_DEVICE differs from devbuf's backport value");
#endif

/* The bytes of a Py_buffer that every consumer's struct has. A producer
 * that fills a view from a template must copy only these (the consumer may
 * be an old binary, and on a native interpreter `*view = template` would
 * also overwrite the extended fields a plain request must leave alone). */
#define DEVBUFPY_CLASSIC_BUFFER_SIZE (sizeof(DevbufPy__classic_buffer))
static inline void DevbufPy_BufferCopyClassic(Py_buffer *dst, const Py_buffer *src) {
  memcpy(dst, src, DEVBUFPY_CLASSIC_BUFFER_SIZE);
}

/* From a producer's `Py_buffer *` to the extended struct. Only valid when
 * the request flags had PyBUF_DEVICE (or another extended flag). */
#define DEVBUFPY_BUFFER_EXT(pybuffer) ((DevbufPy_buffer_ext *)(void *)(pybuffer))

/* ---- advertising and checking supported flags ----------------------------- */

/* Advertise `flags` as the supported request flags of `type` (the
 * bf_supported_flags backport). Call after PyType_Ready. Works for static
 * and heap types. Returns 0, or -1 with an exception set.
 *
 * A static type is shared by every interpreter of the process, and so is
 * what this stores in its dict: the object must come from an interpreter
 * that shares the main allocator. On CPython 3.12+, use multi-phase init,
 * call this from Py_mod_exec, and declare
 *   {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_SUPPORTED}
 * (not ..._PER_INTERPRETER_GIL_SUPPORTED, nor single-phase init): then an
 * isolated subinterpreter is refused before exec runs. A single-phase
 * PyInit runs before that refusal, and the static type keeps an object of
 * an interpreter that is about to die (a double free on a later import).
 * Calling it again with the same flags (exec in another interpreter)
 * changes nothing. */
static inline int DevbufPy_SetBufferSupportedFlags(PyTypeObject *type, int flags) {
  PyObject *value;
  int rc;
#ifdef Py_HAVE_BUFFER_DEVICE_EXTENSION
  /* Native: fill bf_supported_flags too, so CPython's own PyObject_GetBuffer
   * and PyObject_CheckBufferSupports see it. A static type's PyBufferProcs
   * was compiled with these headers, so it has the field: opting it in with
   * the type flag is safe. A heap type has the field only if its spec had
   * Py_bf_supported_flags (its embedded as_buffer is the classic two-slot
   * struct): otherwise only the attribute below records the value. */
  if (type->tp_as_buffer != NULL) {
    if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
      if (type->tp_as_buffer != type->tp_base->tp_as_buffer) {
        type->tp_flags |= Py_TPFLAGS_HAVE_BUFFER_SUPPORTED_FLAGS;
        type->tp_as_buffer->bf_supported_flags = flags;
      }
    } else if (type->tp_flags & Py_TPFLAGS_HAVE_BUFFER_SUPPORTED_FLAGS) {
      type->tp_as_buffer->bf_supported_flags = flags;
    }
  }
#endif
  if (type->tp_dict != NULL && !(type->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
    PyObject *old = PyDict_GetItemString(type->tp_dict, DEVBUFPY_SUPPORTED_FLAGS_ATTR);
    int overflow = 0;
    if (old != NULL && PyLong_Check(old) && PyLong_AsLongAndOverflow(old, &overflow) == flags &&
        !overflow)
      return 0;
    if (PyErr_Occurred()) return -1;
  }
  value = PyLong_FromLong(flags);
  if (value == NULL) return -1;
  if ((type->tp_flags & Py_TPFLAGS_HEAPTYPE)
#ifdef Py_TPFLAGS_IMMUTABLETYPE
      && !(type->tp_flags & Py_TPFLAGS_IMMUTABLETYPE)
#endif
  ) {
    rc = PyObject_SetAttrString((PyObject *)type, DEVBUFPY_SUPPORTED_FLAGS_ATTR, value);
  } else {
    /* Static or immutable types refuse setattr; their dict is still ours to
     * fill once, right after PyType_Ready. PyType_Modified invalidates every
     * cache keyed on the type's version tag. */
    rc = type->tp_dict ? PyDict_SetItemString(type->tp_dict, DEVBUFPY_SUPPORTED_FLAGS_ATTR, value)
                       : -1;
    if (rc == 0) PyType_Modified(type);
    else if (!PyErr_Occurred())
      PyErr_Format(PyExc_TypeError, "%.100s has no type dict to record buffer flags in",
                   type->tp_name);
  }
  Py_DECREF(value);
  return rc;
}

/* Uncached: the raw advertised value of `type` (0 if absent). */
static inline int DevbufPy__LookupSupportedFlags(PyTypeObject *type, int *raw) {
  static PyObject *name = NULL; /* interned, immortal for our purposes */
  PyObject *value;
  long v;
#if defined(Py_GIL_DISABLED)
  /* Made once; two threads racing to make it agree on one (the loser's
   * interned string is the same object anyway). */
  PyObject *n = (PyObject *)_Py_atomic_load_ptr_acquire(&name);
  if (n == NULL) {
    PyObject *expected = NULL;
    n = PyUnicode_InternFromString(DEVBUFPY_SUPPORTED_FLAGS_ATTR);
    if (n == NULL) return -1;
    if (!_Py_atomic_compare_exchange_ptr(&name, &expected, n)) {
      Py_DECREF(n);
      n = expected;
    }
  }
#else
  PyObject *n;
  if (name == NULL) {
    name = PyUnicode_InternFromString(DEVBUFPY_SUPPORTED_FLAGS_ATTR);
    if (name == NULL) return -1;
  }
  n = name;
#endif
  /* Through the type's getattr, so that the answer is what Python code sees
   * and so that CPython assigns the type a version tag to cache on. */
  value = PyObject_GetAttr((PyObject *)type, n);
  if (value == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    *raw = 0;
    return 0;
  }
  if (!PyLong_Check(value)) {
    PyErr_Format(PyExc_TypeError, "%.100s.%s must be an int, not %.100s", type->tp_name,
                 DEVBUFPY_SUPPORTED_FLAGS_ATTR, Py_TYPE(value)->tp_name);
    Py_DECREF(value);
    return -1;
  }
  v = PyLong_AsLong(value);
  Py_DECREF(value);
  if (v == -1 && PyErr_Occurred()) return -1;
  if (v < INT_MIN || v > INT_MAX) {
    PyErr_Format(PyExc_OverflowError, "%.100s.%s does not fit in a C int", type->tp_name,
                 DEVBUFPY_SUPPORTED_FLAGS_ATTR);
    return -1;
  }
  *raw = (int)v;
  return 0;
}

/* The per-type cache of advertised values, keyed by (type, version tag).
 * Version tags are never reused, and a hit needs the tag to be valid now, so
 * a hit is always current. Direct-mapped; one static table per translation
 * unit.
 * Locking: with the GIL the table is shared and the GIL guards it. Without
 * it (free-threaded builds) each thread has its own table (thread-local
 * storage): nothing is shared, so a hit costs no atomic and no lock, and an
 * entry is never seen half-written; the type's version tag is read with a
 * relaxed atomic load, as CPython's own type cache reads it. A thread's
 * first request for a type pays one attribute lookup. */
#if defined(Py_GIL_DISABLED)
#define DEVBUFPY__SF_CACHE 16
#if defined(__cplusplus)
#define DEVBUFPY__SF_TLS thread_local
#elif defined(_MSC_VER)
#define DEVBUFPY__SF_TLS __declspec(thread)
#else
#define DEVBUFPY__SF_TLS _Thread_local
#endif
#else
#define DEVBUFPY__SF_CACHE 32
#define DEVBUFPY__SF_TLS
#endif
typedef struct DevbufPy__sf_entry {
  PyTypeObject *type;
  unsigned int tag;  /* never 0 in a filled entry, so a reset tag never hits */
  int supported;     /* after DevbufPy__SupportedFromRaw */
} DevbufPy__sf_entry;

static inline DevbufPy__sf_entry *DevbufPy__SupportedFlagsSlot(PyTypeObject *type) {
  static DEVBUFPY__SF_TLS DevbufPy__sf_entry cache[DEVBUFPY__SF_CACHE];
  return &cache[((size_t)(uintptr_t)type >> 5) & (DEVBUFPY__SF_CACHE - 1)];
}

/* The type's version tag if it is valid now, else 0 (never cache, never hit).
 * Before 3.13, PyType_Modified clears Py_TPFLAGS_VALID_VERSION_TAG, and on
 * some versions (3.9, measured) it leaves tp_version_tag unchanged until the
 * next lookup assigns a new one: the tag alone would hit a stale entry, so
 * the flag is checked too.
 * 3.13 no longer sets the flag at all and resets the tag to 0 instead: there
 * the tag alone is the truth (checking the flag would never cache). */
static inline unsigned int DevbufPy__CacheableTag(PyTypeObject *type) {
#if PY_VERSION_HEX < 0x030D0000 && defined(Py_TPFLAGS_VALID_VERSION_TAG)
  if (!(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) return 0;
#endif
#if defined(Py_GIL_DISABLED)
  /* Another thread's PyType_Modified may reset it meanwhile. */
  return _Py_atomic_load_uint_relaxed(&type->tp_version_tag);
#else
  return type->tp_version_tag;
#endif
}

/* The draft's conventions: 0 -> every classic flag, -1 -> PyBUF_SIMPLE only. */
static inline int DevbufPy__SupportedFromRaw(int raw) {
  return raw == 0 ? DEVBUFPY_BUF_CLASSIC_FLAGS : raw == -1 ? PyBUF_SIMPLE : raw;
}

/* The request flags `type` supports. 0, or -1 with an exception. */
static inline int DevbufPy_GetBufferSupportedFlags(PyTypeObject *type, int *supported) {
  int raw = 0;
#ifdef Py_HAVE_BUFFER_DEVICE_EXTENSION
  /* Native: the type's own bf_supported_flags wins when it says anything. */
  if ((type->tp_flags & Py_TPFLAGS_HAVE_BUFFER_SUPPORTED_FLAGS) && type->tp_as_buffer != NULL &&
      type->tp_as_buffer->bf_supported_flags != 0) {
    *supported = DevbufPy__SupportedFromRaw(type->tp_as_buffer->bf_supported_flags);
    return 0;
  }
#endif
  {
  DevbufPy__sf_entry *e = DevbufPy__SupportedFlagsSlot(type);
  unsigned int tag;
  if (e->type == type && e->tag == DevbufPy__CacheableTag(type)) {
    *supported = e->supported;
    return 0;
  }
#if PY_VERSION_HEX >= 0x030C0000
  /* 3.12+ may leave a type untagged until something asks; ask. Older
   * versions tag it in the lookup below, and the next call caches. */
  if (DevbufPy__CacheableTag(type) == 0) (void)PyUnstable_Type_AssignVersionTag(type);
#endif
  /* The tag before the lookup: if the lookup itself changed the type (a
   * metaclass __getattribute__ may run any code), the tag moves on and the
   * answer is not cached. */
  tag = DevbufPy__CacheableTag(type);
  if (DevbufPy__LookupSupportedFlags(type, &raw) < 0) return -1;
  if (tag != 0 && DevbufPy__CacheableTag(type) == tag) {
    e->type = type;
    e->tag = tag;
    e->supported = DevbufPy__SupportedFromRaw(raw);
  }
  }
  *supported = DevbufPy__SupportedFromRaw(raw);
  return 0;
}

/* The backport of PyObject_CheckBufferSupports: 1 if `obj` exports buffers
 * and advertises every flag in `flags`, 0 if not (including "no buffer
 * protocol at all": call PyObject_CheckBuffer to tell the two apart), -1
 * with an exception if the advertised value is malformed. */
static inline int DevbufPy_CheckBufferSupports(PyObject *obj, int flags) {
  PyTypeObject *type = Py_TYPE(obj);
  int supported = 0;
  if (type->tp_as_buffer == NULL || type->tp_as_buffer->bf_getbuffer == NULL) return 0;
  if (flags == PyBUF_SIMPLE) return 1;
  if (DevbufPy_GetBufferSupportedFlags(type, &supported) < 0) return -1;
  return (flags & ~supported) == 0;
}

/* ---- getting and releasing -------------------------------------------------- */

static inline int DevbufPy__GetBufferExRefused(PyObject *obj, int required) {
  int supported = 0;
  PyTypeObject *type = Py_TYPE(obj);
  if (type->tp_as_buffer == NULL || type->tp_as_buffer->bf_getbuffer == NULL) {
    PyErr_Format(PyExc_TypeError, "a bytes-like object is required, not '%.100s'",
                 type->tp_name);
    return -1;
  }
  if (DevbufPy_GetBufferSupportedFlags(type, &supported) < 0) return -1;
  PyErr_Format(PyExc_BufferError,
               "%.100s does not support buffer request flags 0x%x (it advertises 0x%x in %s)",
               type->tp_name, required & ~supported, supported, DEVBUFPY_SUPPORTED_FLAGS_ATTR);
  return -1;
}

/* PyObject_GetBuffer as the draft specifies it for future CPython:
 *  1. zero `flags`, `ext_flags`, `device` and `device_info`;
 *  2. refuse (BufferError) required flags the type does not advertise;
 *  3. get the buffer;
 *  4. if the producer did not set PyBUF_DEVICE in `flags` (an old producer
 *     that ignored the request, or a plain request), the result is a CPU
 *     buffer: `flags` loses PyBUF_DEVICE and `device`/`device_info` are NULL;
 *  5. strides are never NULL when a strided request (PyBUF_STRIDES or more)
 *     was answered with ndim > 0: a producer that left them NULL gets C-order
 *     strides filled in (memory these helpers own, marked by
 *     DEVBUFPY_EXT_OWNS_STRIDES in `ext_flags`, freed by
 *     DevbufPy_BufferRelease). A 0-d buffer keeps shape and strides NULL.
 * Returns 0, or -1 with an exception set (view->view.obj is then NULL).
 * Release with DevbufPy_BufferRelease (PyBuffer_Release(&view->view) also
 * works, but leaks the filled-in strides of such a producer). */
/* The ext_flags bit of step 5: private to these helpers (the draft's own
 * bits of ext_flags are all still zero). */
#define DEVBUFPY_EXT_OWNS_STRIDES 0x40000000

/* Step 5 of DevbufPy_GetBufferEx: C-order strides for a producer that gave
 * none under a strided request, as CPython's memoryview computes them. */
static inline int DevbufPy__FillStrides(DevbufPy_buffer_ext *view) {
  Py_buffer *b = &view->view;
  if (b->strides != NULL || b->ndim <= 0 || b->shape == NULL) return 0;
  Py_ssize_t *st = (Py_ssize_t *)PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)b->ndim);
  if (st == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  Py_ssize_t s = b->itemsize;
  for (int i = b->ndim - 1; i >= 0; i--) {
    st[i] = s;
    s *= b->shape[i];
  }
  b->strides = st;
  view->ext_flags |= DEVBUFPY_EXT_OWNS_STRIDES;
  return 0;
}

/* DevbufPy_GetBufferEx without step 2, for a caller that knows the type of
 * `obj` supports every required flag of `flags` (a producer of its own).
 * The same result, ownership and release: on success `view` holds a new
 * reference to the exporter in view->view.obj and, where step 5 filled them
 * in, strides these helpers own; DevbufPy_BufferRelease gives back both. */
static inline int DevbufPy__GetBufferExSupported(PyObject *obj, DevbufPy_buffer_ext *view,
                                                 int flags) {
  view->flags = 0;
  view->ext_flags = 0;
  view->view.obj = NULL;
  if (PyObject_GetBuffer(obj, &view->view, flags) < 0) goto fail;
  if ((flags & PyBUF_WRITABLE) && view->view.readonly) {
    /* A writable request answered read-only (pyarrow's read-only Tensor
     * does): the producer said no, whatever getbuffer returned. */
    PyBuffer_Release(&view->view);
    PyErr_Format(PyExc_BufferError,
                 "%.100s answered the writable request with a read-only buffer (readonly=1 to "
                 "PyBUF_WRITABLE); ask "
                 "for a read-only buffer, or make the producer writable",
                 Py_TYPE(obj)->tp_name);
    view->flags = 0;
    goto fail;
  }
  if (!(view->flags & flags & PyBUF_DEVICE)) {
    /* A CPU buffer. Without PyBUF_DEVICE in the request the producer was not
     * allowed to write here; scrub anyway so nobody reads garbage. */
    view->flags &= ~PyBUF_DEVICE;
    view->device = NULL;
    view->device_info = NULL;
  }
  if ((flags & PyBUF_STRIDES) == PyBUF_STRIDES && view->view.strides == NULL &&
      DevbufPy__FillStrides(view) < 0) {
    PyBuffer_Release(&view->view);
    goto fail;
  }
  return 0;
fail:
  view->device = NULL;
  view->device_info = NULL;
  return -1;
}

static inline int DevbufPy_GetBufferEx(PyObject *obj, DevbufPy_buffer_ext *view, int flags) {
  int required = flags & PyBUF_REQUIRED_FLAGS;
  /* device/device_info need no zeroing here: unless the producer sets
   * PyBUF_DEVICE (and then fills them), step 4 clears them. */
  if (required) {
    /* The hot path is the cache hit of DevbufPy_GetBufferSupportedFlags,
     * inlined; a type without the buffer protocol falls through to
     * PyObject_GetBuffer's own TypeError. */
    int supported;
    PyTypeObject *type = Py_TYPE(obj);
    DevbufPy__sf_entry *e = DevbufPy__SupportedFlagsSlot(type);
    if (e->type == type && e->tag == DevbufPy__CacheableTag(type))
      supported = e->supported;
    else if (DevbufPy_GetBufferSupportedFlags(type, &supported) < 0) goto fail;
    if (required & ~supported) {
      DevbufPy__GetBufferExRefused(obj, required);
      goto fail;
    }
  }
  return DevbufPy__GetBufferExSupported(obj, view, flags);
fail:
  view->flags = 0;
  view->ext_flags = 0;
  view->view.obj = NULL;
  view->device = NULL;
  view->device_info = NULL;
  return -1;
}

/* 1 if `view` (from DevbufPy_GetBufferEx) is device memory the host must not
 * touch without the device's rules: PyBUF_DEVICE set and a device other than
 * NULL or the reserved "cpu". */
static inline int DevbufPy_BufferIsDevice(const DevbufPy_buffer_ext *view) {
  return (view->flags & PyBUF_DEVICE) && view->device != NULL &&
         strcmp(view->device, "cpu") != 0;
}

/* Release a buffer from DevbufPy_GetBufferEx, once. Safe on a view whose
 * get failed or that was already released (view->view.obj == NULL). */
static inline void DevbufPy_BufferRelease(DevbufPy_buffer_ext *view) {
  if (view->ext_flags & DEVBUFPY_EXT_OWNS_STRIDES) {
    /* The producer gets back the NULL it gave. */
    PyMem_Free(view->view.strides);
    view->view.strides = NULL;
    view->ext_flags &= ~DEVBUFPY_EXT_OWNS_STRIDES;
  }
  PyBuffer_Release(&view->view); /* a no-op when view.obj is NULL */
  view->flags = 0;
  view->device = NULL;
  view->device_info = NULL;
}

/* For producers, inside bf_getbuffer: record device information if and only
 * if the request allows it. Returns 1 if written, 0 if `flags` lacked
 * PyBUF_DEVICE (then nothing was touched: answer with a CPU buffer or raise
 * BufferError). */
static inline int DevbufPy_BufferSetDevice(Py_buffer *pybuffer, int flags, const char *device,
                                           void *device_info) {
  DevbufPy_buffer_ext *ext;
  if (!(flags & PyBUF_DEVICE)) return 0;
  ext = DEVBUFPY_BUFFER_EXT(pybuffer);
  ext->flags |= PyBUF_DEVICE;
  ext->device = (char *)device;
  ext->device_info = device_info;
  return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* DEVBUF_BUFFER_H */
