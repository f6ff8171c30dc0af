/* SPDX-License-Identifier: BSD-3-Clause */
/* devbuf_dlpack_import.h: header-only import of a DLPack producer (an object
 * with __dlpack__ and __dlpack_device__, and no buffer protocol), for any C
 * or C++ extension on CPython 3.9+ (3.13t included).
 *
 * Include it after <Python.h>. Like devbuf_buffer.h (which it includes), it
 * needs no libdevbuf, no devbuf module loaded and no link step, and it makes
 * no Python object of devbuf's: the result is a plain C struct that the
 * caller owns.
 *
 *     DevbufPy_DLPackView v;
 *     if (DevbufPy_DLPackImport(obj, 0, NULL, &v) < 0) return NULL;
 *     ... v.buf, v.shape[i], v.strides[i] (bytes), v.format, v.readonly,
 *         v.device_type / v.device_id (DLPack's), v.host_accessible ...
 *     DevbufPy_DLPackRelease(&v);   // the tensor's deleter, exactly once
 *
 * What it does, as devbuf's own reader (bindings/python/src/readers/dlpack_import.c
 * and libdevbuf's devbuf_dlpack_describe) does it, with the same checks and
 * messages:
 *  - asks obj.__dlpack_device__() to choose the stream it passes (none on the
 *    CPU), except for a producer type that has only ever answered kDLCPU (a
 *    cache keyed by interpreter, type and the type's version tag; see
 *    Threads below):
 *    then the tensor's device is checked before the capsule is consumed, and
 *    a tensor found elsewhere leaves its capsule unconsumed (its destructor
 *    deletes it), marks the type, and the import is made again the full way;
 *  - calls obj.__dlpack__(stream=..., max_version=(1, 3)), retrying without
 *    max_version and then without stream for a producer that does not know
 *    them (TypeError), as the array API standard suggests;
 *  - accepts the "dltensor_versioned" capsule and the legacy "dltensor",
 *    renames the one it consumes ("used_dltensor_versioned" /
 *    "used_dltensor"), refuses a used or misnamed capsule and a versioned
 *    tensor of another major (without consuming it);
 *  - validates the tensor: flag bits it does not know, the device type
 *    (devbuf's set) and id, ndim (0..64), shape and element count, the dtype
 *    (lanes, bits, code) and its format string, strides (NULL means
 *    C-contiguous), strides in bytes, the extent and byte_offset (64-bit
 *    overflow, wrapping the address space), NULL data, and a memory handle
 *    (OpenCL) with a byte_offset or reached below by negative strides;
 *  - refuses a read-only tensor when the caller asks for a writable one; a
 *    legacy capsule cannot say, so it is read-only unless the caller vouches
 *    (DEVBUFPY_DLPACK_LEGACY_WRITABLE).
 * Errors: -1 with BufferError (the tensor or capsule is wrong: the message
 * says what and where), TypeError (no __dlpack__, or it returned something
 * other than a capsule; __dlpack_device__ returned something other than a
 * pair), or whatever the producer raised.
 *
 * What it does not do: devbuf's runtime is not involved, so no event is
 * recorded and no device is opened. On a device the producer orders its work
 * before `stream` (the DLPack hand-off): use the memory on that stream. The
 * default, when the caller passes NULL, is what devbuf passes: 1 (CUDA's
 * legacy default stream) for kDLCUDA / kDLCUDAManaged, 0 for kDLROCM, None
 * elsewhere.
 *
 * Ownership and lifetime
 *  - DevbufPy_DLPackView is caller storage (about 1.1 KiB: put it on the
 *    stack). Every array in it (format, shape, strides) is inside the struct:
 *    it may be copied or moved, but released once only (one copy).
 *  - On success it holds a strong reference to the producer (`producer`) and
 *    owns the managed tensor (`managed_`): the memory behind `buf` stays
 *    valid until DevbufPy_DLPackRelease, which calls the tensor's deleter
 *    exactly once, then drops the producer, and clears the struct (a second
 *    release does nothing). Release with the GIL held (an attached thread
 *    state on 3.13t): deleters usually run Python code.
 *  - `tensor` points at the producer's DLTensor, valid until the release;
 *    read it only for what the struct does not carry.
 *  - On failure nothing is held and the struct is cleared; releasing it is
 *    harmless.
 *  - Not shared between threads unless the caller orders them.
 *
 * Threads: the per-type device cache and the interned names are kept per
 * interpreter (keyed by its ID), in one static state guarded by the GIL
 * before 3.12 and in thread-local storage from 3.12 (isolated
 * subinterpreters) and on 3.13t: nothing is shared without a lock, and
 * subinterpreters never see each other's objects. */
#ifndef DEVBUF_DLPACK_IMPORT_H
#define DEVBUF_DLPACK_IMPORT_H

#ifndef Py_PYTHON_H
#error "include <Python.h> before devbuf_dlpack_import.h"
#endif
#if PY_VERSION_HEX < 0x03090000
#error "devbuf_dlpack_import.h needs CPython 3.9 or newer (PyObject_Vectorcall)"
#endif

#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "devbuf_buffer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- what the caller gets ---------------------------------------------------- */

/* The largest ndim accepted (as devbuf, CPython's PyBUF_MAX_NDIM, NumPy 2). */
#define DEVBUFPY_DLPACK_MAX_NDIM 64
/* Room for the longest format ("65535[devbuf$float8_e4m3b11fnuz]"), NUL included. */
#define DEVBUFPY_DLPACK_FORMAT_MAX 64
/* The DLPack version read (its major) and asked for (max_version). */
#define DEVBUFPY_DLPACK_MAJOR 1
#define DEVBUFPY_DLPACK_MINOR 3

/* DevbufPy_DLPackImport flags. */
#define DEVBUFPY_DLPACK_WRITABLE 0x1        /* refuse a read-only tensor (BufferError) */
#define DEVBUFPY_DLPACK_LEGACY_WRITABLE 0x2 /* a legacy ("dltensor") capsule may be written */

typedef struct DevbufPy_DLPackView {
  /* As a buffer-protocol consumer reads memory (shape in items, strides in
   * bytes, both ndim entries; the format of one item, struct syntax plus
   * devbuf's "[devbuf$name]" custom dtypes for what struct has no code for). */
  void *buf;                     /* first item: data + byte_offset (off the host: a device
                                  * address) */
  Py_ssize_t len;                /* nitems * itemsize */
  Py_ssize_t itemsize;
  int ndim;
  int readonly;                  /* READ_ONLY flag, or a legacy capsule (see the flags) */
  Py_ssize_t nitems;
  int c_contiguous;              /* row-major compact (trivially for 0 or 1 items) */
  int f_contiguous;              /* column-major compact */
  /* Where it lives: DLPack's own device. */
  int32_t device_type;           /* kDLCPU = 1, kDLCUDA = 2, ... as the tensor says */
  int32_t device_id;
  int host_accessible;           /* the host may dereference buf (CPU, pinned, managed) */
  int is_handle;                 /* buf is a memory handle (OpenCL cl_mem), not an address */
  PyObject *stream;              /* the stream passed to __dlpack__, that the producer
                                  * ordered its work before (a strong reference); NULL when
                                  * none was passed (the CPU, or no __dlpack_device__) */
  /* DLPack's own words. */
  uint32_t version_major;        /* 0.0 for a legacy capsule */
  uint32_t version_minor;
  uint64_t dl_flags;             /* DLPACK_FLAG_BITMASK_* as received (0 for legacy) */
  int is_copied;                 /* IS_COPIED: the producer made a fresh copy for this import */
  void *data;                    /* DLTensor.data and byte_offset as received */
  uint64_t byte_offset;
  uint8_t dtype_code, dtype_bits;
  uint16_t dtype_lanes;
  uint32_t elements_per_item;    /* > 1: packed sub-byte elements per format item */
  const void *tensor;            /* the producer's DLTensor, until the release */
  /* The owner. */
  PyObject *producer;            /* strong reference */
  void *managed_;                /* DLManagedTensor(Versioned)*: private */
  int versioned_;                /* private */
  char format[DEVBUFPY_DLPACK_FORMAT_MAX];
  Py_ssize_t shape[DEVBUFPY_DLPACK_MAX_NDIM];
  Py_ssize_t strides[DEVBUFPY_DLPACK_MAX_NDIM];
} DevbufPy_DLPackView;

/* ---- DLPack's layouts (private names: no clash with any dlpack.h) ------------- */

typedef struct DevbufPy__DLVersion {
  uint32_t major, minor;
} DevbufPy__DLVersion;
typedef struct DevbufPy__DLDevice {
  int32_t device_type, device_id;
} DevbufPy__DLDevice;
typedef struct DevbufPy__DLDataType {
  uint8_t code, bits;
  uint16_t lanes;
} DevbufPy__DLDataType;
typedef struct DevbufPy__DLTensor {
  void *data;
  DevbufPy__DLDevice device;
  int32_t ndim;
  DevbufPy__DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DevbufPy__DLTensor;
typedef struct DevbufPy__DLManaged {
  DevbufPy__DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DevbufPy__DLManaged *self);
} DevbufPy__DLManaged;
typedef struct DevbufPy__DLManagedVersioned {
  DevbufPy__DLVersion version;
  void *manager_ctx;
  void (*deleter)(struct DevbufPy__DLManagedVersioned *self);
  uint64_t flags;
  DevbufPy__DLTensor dl_tensor;
} DevbufPy__DLManagedVersioned;

/* DLPack's extents are 64-bit, and so must the buffer protocol's be here
 * (as in devbuf itself): a 32-bit build is not supported. */
DEVBUFPY__STATIC_ASSERT(sizeof(Py_ssize_t) == sizeof(int64_t),
                        "devbuf_dlpack_import.h needs a 64-bit Py_ssize_t");

#define DEVBUFPY__DL_READ_ONLY 1u
#define DEVBUFPY__DL_IS_COPIED 2u
#define DEVBUFPY__DL_SUBBYTE_PADDED 4u
#define DEVBUFPY__DL_KNOWN_FLAGS 7u

/* Overflow-checked arithmetic (1 on overflow). */
#if defined(__GNUC__) || defined(__clang__)
#define DEVBUFPY__MUL_OVF(a, b, r) __builtin_mul_overflow(a, b, r)
#define DEVBUFPY__ADD_OVF(a, b, r) __builtin_add_overflow(a, b, r)
#else
static inline int DevbufPy__mul_i64(int64_t a, int64_t b, int64_t *r) {
  if (a != 0 && b != 0 &&
      ((a > 0) == (b > 0) ? (a > 0 ? a > INT64_MAX / b : a < INT64_MAX / b)
                          : (a > 0 ? b < INT64_MIN / a : a < INT64_MIN / b)))
    return 1;
  *r = a * b;
  return 0;
}
static inline int DevbufPy__add_i64(int64_t a, int64_t b, int64_t *r) {
  if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return 1;
  *r = a + b;
  return 0;
}
#define DEVBUFPY__MUL_OVF(a, b, r) DevbufPy__mul_i64((a), (b), (r))
#define DEVBUFPY__ADD_OVF(a, b, r) DevbufPy__add_i64((a), (b), (r))
#endif

/* Where the import's state (interned names, the per-type cache) lives.
 * Before 3.12 one GIL serialises the whole process (subinterpreters
 * included): one static state, guarded by it. From 3.12 isolated
 * subinterpreters run at once under their own GILs, and 3.13t runs threads
 * without one: thread-local storage there. Either way the state holds one
 * interpreter's objects, keyed by its ID. */
#if defined(__cplusplus)
#define DEVBUFPY__TLS thread_local
#elif defined(_MSC_VER)
#define DEVBUFPY__TLS __declspec(thread)
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define DEVBUFPY__TLS _Thread_local
#else
#define DEVBUFPY__TLS __thread
#endif
#if PY_VERSION_HEX < 0x030C0000 && !defined(Py_GIL_DISABLED)
#define DEVBUFPY__DL_STATE_STORAGE
#else
#define DEVBUFPY__DL_STATE_STORAGE DEVBUFPY__TLS
#endif

/* ---- the device and the dtype --------------------------------------------------- */

static inline const char *DevbufPy__DLDeviceName(int32_t t) {
  static const char *const names[] = {
      "kDL?",       "kDLCPU",     "kDLCUDA",        "kDLCUDAHost", "kDLOpenCL", "kDL?",
      "kDL?",       "kDLVulkan",  "kDLMetal",       "kDLVPI",      "kDLROCM",   "kDLROCMHost",
      "kDLExtDev",  "kDLCUDAManaged", "kDLOneAPI",  "kDLWebGPU",   "kDLHexagon", "kDLMAIA",
      "kDLTrn",     "kDLTPU",     "kDLTPUHost",     "kDLAscend"};
  return t >= 0 && t < (int32_t)(sizeof names / sizeof names[0]) ? names[t] : "kDL?";
}

/* The device types devbuf maps (devbuf/dlpack.h's table); 0 and a BufferError
 * naming the type for any other. *host / *handle: what the memory is. */
static inline int DevbufPy__DLDeviceKnown(DevbufPy__DLDevice d, int *host, int *handle) {
  *host = 0;
  *handle = 0;
  switch (d.device_type) {
    case 1: case 3: case 11: case 13: case 20: *host = 1; break; /* CPU, pinned, managed */
    case 4: *handle = 1; break;                                   /* OpenCL */
    case 2: case 10: case 12: case 14: break;                     /* CUDA, ROCm, ExtDev, oneAPI */
    default:
      PyErr_Format(PyExc_BufferError,
                   "dlpack: device: DLPack device type %d (%s) has no devbuf device identifier "
                   "(supported: kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, kDLROCM, kDLROCMHost, "
                   "kDLExtDev, kDLCUDAManaged, kDLOneAPI, kDLTPUHost)",
                   (int)d.device_type, DevbufPy__DLDeviceName(d.device_type));
      return 0;
  }
  if (d.device_id < 0) {
    PyErr_Format(PyExc_BufferError, "dlpack: device: negative device_id %d for %s",
                 (int)d.device_id, DevbufPy__DLDeviceName(d.device_type));
    return 0;
  }
  return 1;
}

/* devbuf's builtin names for what struct has no code for (devbuf/dlpack.h). */
typedef struct DevbufPy__DLExt {
  uint8_t code, bits;
  const char *name;   /* padded / ordinary spelling */
  const char *packed; /* packed spelling of a sub-byte type, or NULL */
  uint8_t packed_item, packed_epi;
} DevbufPy__DLExt;

static inline const DevbufPy__DLExt *DevbufPy__DLExtTable(size_t *n) {
  static const DevbufPy__DLExt t[] = {
      {4, 16, "bfloat16", NULL, 0, 0},
      {7, 8, "float8_e3m4", NULL, 0, 0},
      {8, 8, "float8_e4m3", NULL, 0, 0},
      {9, 8, "float8_e4m3b11fnuz", NULL, 0, 0},
      {10, 8, "float8_e4m3fn", NULL, 0, 0},
      {11, 8, "float8_e4m3fnuz", NULL, 0, 0},
      {12, 8, "float8_e5m2", NULL, 0, 0},
      {13, 8, "float8_e5m2fnuz", NULL, 0, 0},
      {14, 8, "float8_e8m0fnu", NULL, 0, 0},
      {15, 6, "float6_e2m3fn", "float6_e2m3fn_x4", 3, 4},
      {16, 6, "float6_e3m2fn", "float6_e3m2fn_x4", 3, 4},
      {17, 4, "float4_e2m1fn", "float4_e2m1fn_x2", 1, 2},
      {5, 32, "complex32", NULL, 0, 0},
      {18, 32, "bcomplex32", NULL, 0, 0},
      {0, 4, "int4", "int4_x2", 1, 2},
      {1, 4, "uint4", "uint4_x2", 1, 2},
      {0, 2, "int2", "int2_x4", 1, 4},
      {1, 2, "uint2", "uint2_x4", 1, 4},
      {0, 1, "int1", "int1_x8", 1, 8},
      {1, 1, "uint1", "uint1_x8", 1, 8},
  };
  *n = sizeof t / sizeof t[0];
  return t;
}

static inline const char *DevbufPy__DLCodeName(uint8_t code) {
  static const char *const names[] = {"kDLInt",  "kDLUInt",    "kDLFloat", "kDLOpaqueHandle",
                                      "kDLBfloat", "kDLComplex", "kDLBool"};
  size_t n, i;
  const DevbufPy__DLExt *t;
  if (code < sizeof names / sizeof names[0]) return names[code];
  t = DevbufPy__DLExtTable(&n);
  for (i = 0; i < n; i++)
    if (t[i].code == code) return t[i].name;
  return "unknown code";
}

/* The struct code of (code, bits), or NULL. */
static inline const char *DevbufPy__DLPlainCode(uint8_t code, uint8_t bits) {
  switch (code) {
    case 0: return bits == 8 ? "b" : bits == 16 ? "h" : bits == 32 ? "i" : bits == 64 ? "q" : NULL;
    case 1: return bits == 8 ? "B" : bits == 16 ? "H" : bits == 32 ? "I" : bits == 64 ? "Q" : NULL;
    case 2: return bits == 16 ? "e" : bits == 32 ? "f" : bits == 64 ? "d" : NULL;
    case 5: return bits == 64 ? "Zf" : bits == 128 ? "Zd" : NULL;
    case 6: return bits == 8 ? "?" : NULL;
    default: return NULL;
  }
}

/* DLPack dtype -> the format of one item, as libdevbuf's
 * devbuf_dlpack_dtype_to_format writes it. 0, or -1 with BufferError. */
static inline int DevbufPy__DLFormat(DevbufPy__DLDataType dt, int padded, char *fmt,
                                     uint64_t *itemsize, uint32_t *epi) {
  const char *plain;
  const DevbufPy__DLExt *t, *e = NULL, *only = NULL;
  size_t n, i;
  *epi = 1;
  if (dt.lanes == 0) {
    PyErr_Format(PyExc_BufferError, "dlpack import: dlpack: dtype: lanes is 0 (code %u, bits %u)",
                 (unsigned)dt.code, (unsigned)dt.bits);
    return -1;
  }
  if (dt.bits == 0) {
    PyErr_Format(PyExc_BufferError, "dlpack import: dlpack: dtype: bits is 0 (code %u = %s)",
                 (unsigned)dt.code, DevbufPy__DLCodeName(dt.code));
    return -1;
  }
  plain = DevbufPy__DLPlainCode(dt.code, dt.bits);
  if (plain != NULL) {
    *itemsize = (uint64_t)dt.bits / 8u * dt.lanes;
    if (dt.lanes == 1) {
      fmt[0] = plain[0];
      fmt[1] = plain[1]; /* the NUL, or "Z?"'s second letter */
      fmt[2] = '\0';
    } else {
      PyOS_snprintf(fmt, DEVBUFPY_DLPACK_FORMAT_MAX, "%u%s", (unsigned)dt.lanes, plain);
    }
    return 0;
  }
  t = DevbufPy__DLExtTable(&n);
  for (i = 0; i < n && e == NULL; i++)
    if (t[i].code == dt.code && t[i].bits == dt.bits) e = &t[i];
  if (e == NULL) {
    /* The float families have exactly one width. */
    if (dt.code >= 4 && dt.code != 5 && dt.code != 6)
      for (i = 0; i < n && only == NULL; i++)
        if (t[i].code == dt.code) only = &t[i];
    if (dt.code == 3)
      PyErr_Format(PyExc_BufferError,
                   "dlpack import: dlpack: dtype: kDLOpaqueHandle (bits %u) has no format: its "
                   "meaning is private to the producer",
                   (unsigned)dt.bits);
    else if (only != NULL)
      PyErr_Format(PyExc_BufferError, "dlpack import: dlpack: dtype: %s must have bits %u, got %u",
                   only->name, (unsigned)only->bits, (unsigned)dt.bits);
    else
      PyErr_Format(PyExc_BufferError,
                   "dlpack import: dlpack: dtype: no format for DLPack dtype (code %u = %s, bits "
                   "%u, lanes %u): not reinterpreting it as another type of that size",
                   (unsigned)dt.code, DevbufPy__DLCodeName(dt.code), (unsigned)dt.bits,
                   (unsigned)dt.lanes);
    return -1;
  }
  if (e->packed != NULL && !padded) {
    if (dt.lanes != 1) {
      PyErr_Format(PyExc_BufferError,
                   "dlpack import: dlpack: dtype: packed %s with lanes %u is not supported",
                   e->name, (unsigned)dt.lanes);
      return -1;
    }
    *itemsize = e->packed_item;
    *epi = e->packed_epi;
    PyOS_snprintf(fmt, DEVBUFPY_DLPACK_FORMAT_MAX, "[devbuf$%s]", e->packed);
  } else {
    *itemsize = (e->packed != NULL ? 1u : (uint64_t)dt.bits / 8u) * dt.lanes;
    if (dt.lanes == 1) PyOS_snprintf(fmt, DEVBUFPY_DLPACK_FORMAT_MAX, "[devbuf$%s]", e->name);
    else
      PyOS_snprintf(fmt, DEVBUFPY_DLPACK_FORMAT_MAX, "%u[devbuf$%s]", (unsigned)dt.lanes,
                    e->name);
  }
  return 0;
}

/* ---- describing a tensor ---------------------------------------------------------- */

/* Validate `t` (with the versioned tensor's `dl_flags`; legacy: 0) into
 * `out`'s description fields. The checks and messages are libdevbuf's
 * devbuf_dlpack_describe followed by devbuf's layout check of its result
 * (layout.c), in that order: where a tensor has several faults, the one
 * devbuf names first is named. The per-dimension checks share two loops
 * (a check found failing is remembered and raised when its turn comes).
 * Takes nothing: the owner fields are the caller's. 0, or -1 with
 * BufferError naming what is wrong. */
static inline int DevbufPy_DLPackDescribe(const void *tensor, uint64_t dl_flags,
                                          DevbufPy_DLPackView *out) {
  const DevbufPy__DLTensor *t = (const DevbufPy__DLTensor *)tensor;
  int32_t ndim = t->ndim, i, last = ndim - 1;
  int host, handle, empty = 0, c = 1, fo = 1;
  uint64_t itemsize = 0, nelem = 1, nitems;
  uint32_t epi = 1;
  int64_t lo = 0, hi = 0, c_order[DEVBUFPY_DLPACK_MAX_NDIM];
  const int64_t *es = t->strides;
  /* The layout check's own sums (Py_ssize_t is int64_t here), and the first
   * dimension where each of its per-dimension checks fails (-1: none). */
  Py_ssize_t items = 1, rlo = 0, rhi, need, prev = -1;
  /* Contiguity's running products, unsigned: a tensor whose products would
   * wrap is refused below anyway, and signed overflow would be undefined. */
  uint64_t fs = 0, cs = 0;
  int32_t extent_bad = -1, items_bad = -1, reach_bad = -1, span_bad = -1, none = 0;
  if (dl_flags & ~(uint64_t)DEVBUFPY__DL_KNOWN_FLAGS) {
    char msg[160]; /* PyErr_Format has no %llx before 3.12 */
    PyOS_snprintf(msg, sizeof msg,
                  "dlpack import: unknown flag bits 0x%llx (devbuf knows READ_ONLY, IS_COPIED, "
                  "IS_SUBBYTE_TYPE_PADDED of DLPack %d.%d)",
                  (unsigned long long)(dl_flags & ~(uint64_t)DEVBUFPY__DL_KNOWN_FLAGS),
                  DEVBUFPY_DLPACK_MAJOR, DEVBUFPY_DLPACK_MINOR);
    PyErr_SetString(PyExc_BufferError, msg);
    return -1;
  }
  if (!DevbufPy__DLDeviceKnown(t->device, &host, &handle)) return -1;
  if (ndim < 0 || ndim > DEVBUFPY_DLPACK_MAX_NDIM) {
    PyErr_Format(PyExc_BufferError, "dlpack import: ndim %d out of range 0..%d", (int)ndim,
                 DEVBUFPY_DLPACK_MAX_NDIM);
    return -1;
  }
  if (ndim > 0 && t->shape == NULL) {
    PyErr_Format(PyExc_BufferError, "dlpack import: shape is NULL with ndim %d", (int)ndim);
    return -1;
  }
  if (DevbufPy__DLFormat(t->dtype, (dl_flags & DEVBUFPY__DL_SUBBYTE_PADDED) != 0, out->format,
                         &itemsize, &epi) < 0)
    return -1;
  for (i = 0; i < ndim; i++) {
    int64_t n = t->shape[i];
    if (n < 0) {
      PyErr_Format(PyExc_BufferError, "dlpack import: shape[%d] = %lld is negative", (int)i,
                   (long long)n);
      return -1;
    }
    if (n == 0) empty = 1;
    if (!empty && DEVBUFPY__MUL_OVF(nelem, (uint64_t)n, &nelem)) {
      PyErr_Format(PyExc_BufferError,
                   "dlpack import: element count overflows 64 bits at shape[%d] = %lld", (int)i,
                   (long long)n);
      return -1;
    }
  }
  if (empty) nelem = 0;
  if (es == NULL) { /* C order, in elements */
    int64_t s = 1;
    for (i = last; i >= 0; i--) {
      int64_t n = t->shape[i] > 0 ? t->shape[i] : 1;
      c_order[i] = s;
      if (DEVBUFPY__MUL_OVF(s, n, &s)) s = INT64_MAX; /* only reached if empty elsewhere */
    }
    es = c_order;
  }
  if (epi > 1) {
    /* Packed sub-byte elements: the last dimension is split into items. */
    if (ndim == 0) {
      PyErr_Format(PyExc_BufferError,
                   "dlpack import: a 0-d packed %s tensor cannot be described in whole-byte items",
                   out->format);
      return -1;
    }
    if (t->shape[last] % epi != 0) {
      PyErr_Format(PyExc_BufferError,
                   "dlpack import: packed sub-byte tensor: last dimension %lld is not a multiple "
                   "of %u elements per byte group",
                   (long long)t->shape[last], (unsigned)epi);
      return -1;
    }
    if (t->shape[last] > 1 && es[last] != 1) {
      PyErr_Format(PyExc_BufferError,
                   "dlpack import: packed sub-byte tensor: last dimension has stride %lld, only 1 "
                   "can be split into bytes",
                   (long long)es[last]);
      return -1;
    }
    for (i = 0; i < ndim; i++) {
      int64_t s = (i == last) ? (int64_t)epi : es[i], bs;
      if (s % (int64_t)epi != 0) {
        PyErr_Format(PyExc_BufferError,
                     "dlpack import: packed sub-byte tensor: stride[%d] = %lld is not a multiple "
                     "of %u elements",
                     (int)i, (long long)s, (unsigned)epi);
        return -1;
      }
      out->shape[i] = (i == last) ? t->shape[i] / (int64_t)epi : t->shape[i];
      if (DEVBUFPY__MUL_OVF(s / (int64_t)epi, (int64_t)itemsize, &bs)) {
        PyErr_Format(PyExc_BufferError, "dlpack import: stride[%d] = %lld overflows in bytes",
                     (int)i, (long long)s);
        return -1;
      }
      out->strides[i] = bs;
    }
  }
  nitems = epi > 1 ? nelem / epi : nelem;
  rhi = (Py_ssize_t)itemsize;
  /* One pass: strides in bytes (raised at once: devbuf checks them first),
   * then the extent, the layout check's items and reach (remembered), and
   * contiguity, judged on items (C order read forwards: each stride is the
   * next non-trivial one times its extent, the last one the itemsize). */
  for (i = 0; i < ndim; i++) {
    Py_ssize_t n, st, span, mag, prod;
    if (epi == 1) {
      out->shape[i] = t->shape[i];
      if (DEVBUFPY__MUL_OVF(es[i], (int64_t)itemsize, &out->strides[i])) {
        PyErr_Format(PyExc_BufferError,
                     "dlpack import: stride[%d] = %lld elements overflows 64 bits in bytes "
                     "(itemsize %llu)",
                     (int)i, (long long)es[i], (unsigned long long)itemsize);
        return -1;
      }
    }
    n = out->shape[i];
    st = out->strides[i];
    if (nitems > 0 && n > 1 && extent_bad < 0 &&
        (DEVBUFPY__MUL_OVF(n - 1, st, &span) ||
         (span < 0 ? DEVBUFPY__ADD_OVF(lo, span, &lo) : DEVBUFPY__ADD_OVF(hi, span, &hi))))
      extent_bad = i;
    if (n == 0) {
      none = 1;
    } else if (items_bad < 0) {
      if (DEVBUFPY__MUL_OVF(items, n, &prod)) items_bad = i;
      else if (!none) items = prod;
    }
    if (st != 0 && n > 1 && reach_bad < 0 && span_bad < 0) {
      if (st == PY_SSIZE_T_MIN || DEVBUFPY__MUL_OVF(st < 0 ? -st : st, n - 1, &mag) ||
          mag > PY_SSIZE_T_MAX / 2) {
        reach_bad = i;
      } else {
        if (st < 0) rlo += (n - 1) * st;
        else rhi += (n - 1) * st;
        if (rlo < -PY_SSIZE_T_MAX / 2 || rhi > PY_SSIZE_T_MAX / 2) span_bad = i;
      }
    }
    if (n != 1 && nitems > 1) {
      if (prev >= 0 && cs != (uint64_t)st * (uint64_t)n) c = 0;
      cs = (uint64_t)st;
      prev = i;
      if ((uint64_t)st != (fs ? fs : itemsize)) fo = 0;
      fs = (fs ? fs : itemsize) * (uint64_t)n;
    }
  }
  if (prev >= 0 && cs != itemsize) c = 0;
  /* libdevbuf's checks, in its order. */
  if (extent_bad >= 0) {
    PyErr_Format(PyExc_BufferError,
                 "dlpack import: extent overflows 64 bits at dimension %d (shape %lld, stride "
                 "%lld bytes)",
                 (int)extent_bad, (long long)out->shape[extent_bad],
                 (long long)out->strides[extent_bad]);
    return -1;
  }
  if (nitems > 0 && DEVBUFPY__ADD_OVF(hi, (int64_t)itemsize, &hi)) {
    PyErr_SetString(PyExc_BufferError, "dlpack import: extent overflows 64 bits");
    return -1;
  }
  if (t->byte_offset > (uint64_t)INT64_MAX) {
    PyErr_Format(PyExc_BufferError, "dlpack import: byte_offset %llu is too large",
                 (unsigned long long)t->byte_offset);
    return -1;
  }
  if (nitems > 0) {
    int64_t first, end;
    if (t->data == NULL) {
      PyErr_Format(PyExc_BufferError,
                   "dlpack import: data is NULL but the tensor has %llu elements",
                   (unsigned long long)nelem);
      return -1;
    }
    if (DEVBUFPY__ADD_OVF((int64_t)t->byte_offset, lo, &first) ||
        DEVBUFPY__ADD_OVF((int64_t)t->byte_offset, hi, &end)) {
      PyErr_Format(PyExc_BufferError,
                   "dlpack import: byte_offset %llu plus the extent overflows 64 bits",
                   (unsigned long long)t->byte_offset);
      return -1;
    }
    if (handle) {
      if (first < 0) {
        PyErr_Format(PyExc_BufferError,
                     "dlpack import: negative strides reach %lld bytes before the start of the "
                     "%s memory handle",
                     (long long)-first, DevbufPy__DLDeviceName(t->device.device_type));
        return -1;
      }
    } else {
      uintptr_t base = (uintptr_t)t->data;
      if ((first < 0 && (uint64_t)(-(first + 1)) + 1 > (uint64_t)base) ||
          (end > 0 && (uint64_t)end - 1 > (uint64_t)(UINTPTR_MAX - base))) {
        PyErr_Format(PyExc_BufferError,
                     "dlpack import: the view [%lld, %lld) bytes from data %p wraps around the "
                     "address space",
                     (long long)first, (long long)end, t->data);
        return -1;
      }
    }
  } else if (!handle && t->data != NULL &&
             t->byte_offset > (uint64_t)(UINTPTR_MAX - (uintptr_t)t->data)) {
    PyErr_Format(PyExc_BufferError,
                 "dlpack import: empty tensor, but data %p + byte_offset %llu wraps around the "
                 "address space",
                 t->data, (unsigned long long)t->byte_offset);
    return -1;
  }
  /* Then what the buffer protocol can count, as devbuf holds every
   * description it makes to (its layout check, with the same rules): items
   * and bytes in Py_ssize_t, and each stride's reach within half of it, so
   * that the arithmetic of any copy or gather over the view cannot wrap. */
  if (items_bad >= 0) {
    PyErr_Format(PyExc_BufferError, "dlpack import: shape overflows Py_ssize_t at shape[%d]",
                 (int)items_bad);
    return -1;
  }
  if (none) items = 0;
  if (DEVBUFPY__MUL_OVF(items, (Py_ssize_t)itemsize, &need)) {
    PyErr_SetString(PyExc_BufferError, "dlpack import: shape * itemsize overflows Py_ssize_t");
    return -1;
  }
  if (!none && ndim > 0) {
    if ((Py_ssize_t)itemsize > PY_SSIZE_T_MAX / 2) {
      PyErr_Format(PyExc_BufferError, "dlpack import: itemsize %zd is too large to stride over",
                   (Py_ssize_t)itemsize);
      return -1;
    }
    if (reach_bad >= 0) {
      PyErr_Format(PyExc_BufferError,
                   "dlpack import: strides[%d] = %zd overflows over shape[%d] = %zd",
                   (int)reach_bad, out->strides[reach_bad], (int)reach_bad,
                   out->shape[reach_bad]);
      return -1;
    }
    if (span_bad >= 0) {
      PyErr_SetString(PyExc_BufferError,
                      "dlpack import: strides span more than Py_ssize_t can count");
      return -1;
    }
  }
  if (handle && t->byte_offset != 0) {
    PyErr_Format(PyExc_BufferError,
                 "a %s tensor with byte_offset %llu cannot be re-exported: its data is a memory "
                 "handle, and the buffer protocol has no offset field",
                 DevbufPy__DLDeviceName(t->device.device_type),
                 (unsigned long long)t->byte_offset);
    return -1;
  }
  out->c_contiguous = c;
  out->f_contiguous = fo;
  out->buf = (void *)((uintptr_t)t->data + (uintptr_t)t->byte_offset);
  out->nitems = (Py_ssize_t)nitems;
  out->itemsize = (Py_ssize_t)itemsize;
  out->len = (Py_ssize_t)(nitems * itemsize);
  out->ndim = ndim;
  out->readonly = (dl_flags & DEVBUFPY__DL_READ_ONLY) != 0;
  out->is_copied = (dl_flags & DEVBUFPY__DL_IS_COPIED) != 0;
  out->dl_flags = dl_flags;
  out->device_type = t->device.device_type;
  out->device_id = t->device.device_id;
  out->host_accessible = host;
  out->is_handle = handle;
  out->data = t->data;
  out->byte_offset = t->byte_offset;
  out->dtype_code = t->dtype.code;
  out->dtype_bits = t->dtype.bits;
  out->dtype_lanes = t->dtype.lanes;
  out->elements_per_item = epi;
  out->tensor = t;
  return 0;
}

/* ---- per thread and interpreter: names and the device cache ------------------------ */

#define DEVBUFPY__DL_TYPES 8
/* What is known of a producer type, valid while its version tag is. */
typedef struct DevbufPy__DLType {
  PyTypeObject *type;
  unsigned int tag;  /* never 0 in a filled entry */
  int cpu;           /* 1: answered only kDLCPU so far; 0: seen elsewhere; -1: not asked */
  PyObject *method;  /* borrowed from the type's dict (alive while the tag is): the
                      * __dlpack__ that obj.__dlpack__(...) calls unbound, or NULL to
                      * look it up at each call */
} DevbufPy__DLType;

typedef struct DevbufPy__DLState {
  int64_t interp_id; /* the interpreter the objects below belong to, plus 1; 0: none yet */
  PyObject *s_dlpack, *s_dlpack_device, *max_version;
  PyObject *kw[3];   /* ("stream", "max_version")[:n] for n = 0..2 */
  PyObject *kw_mv;   /* ("max_version",) */
  DevbufPy__DLType types[DEVBUFPY__DL_TYPES];
} DevbufPy__DLState;

/* The state for the current interpreter (and thread, from 3.12), made on
 * first use. The previous interpreter's objects are left alone (never
 * touched from another interpreter: it owns them and frees them at its
 * end). NULL with an exception. */
static inline DevbufPy__DLState *DevbufPy__DLGetState(void) {
  static DEVBUFPY__DL_STATE_STORAGE DevbufPy__DLState st;
  DevbufPy__DLState *s = &st;
  /* The ID, not the pointer: a new interpreter may reuse a dead one's address. */
  int64_t id = PyInterpreterState_GetID(PyInterpreterState_Get()) + 1;
  PyObject *k_stream, *k_mv;
  int i;
#if defined(__GNUC__) || defined(__clang__)
  /* One TLS address lookup per import: without this the compiler may redo
   * it (a __tls_get_addr call) after every call it makes. */
  __asm__("" : "+r"(s));
#endif
  if (s->interp_id == id) return s;
  memset(s, 0, sizeof *s);
  /* Interned keyword names: the producer's argument parser (NumPy's, and
   * CPython's for a **kw function) matches them by pointer first. */
  s->s_dlpack = PyUnicode_InternFromString("__dlpack__");
  s->s_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
  k_stream = PyUnicode_InternFromString("stream");
  k_mv = PyUnicode_InternFromString("max_version");
  s->max_version = Py_BuildValue("(ii)", DEVBUFPY_DLPACK_MAJOR, DEVBUFPY_DLPACK_MINOR);
  if (k_stream && k_mv) {
    s->kw[0] = PyTuple_New(0);
    s->kw[1] = PyTuple_Pack(1, k_stream);
    s->kw[2] = PyTuple_Pack(2, k_stream, k_mv);
    s->kw_mv = PyTuple_Pack(1, k_mv);
  }
  Py_XDECREF(k_stream);
  Py_XDECREF(k_mv);
  if (!s->s_dlpack || !s->s_dlpack_device || !s->max_version || !s->kw[0] || !s->kw[1] ||
      !s->kw[2] || !s->kw_mv) {
    Py_XDECREF(s->s_dlpack);
    Py_XDECREF(s->s_dlpack_device);
    Py_XDECREF(s->max_version);
    for (i = 0; i < 3; i++) Py_XDECREF(s->kw[i]);
    Py_XDECREF(s->kw_mv);
    memset(s, 0, sizeof *s);
    return NULL;
  }
  s->interp_id = id;
  return s;
}

/* The cache entry of `type`, (re)filled when it is not current: the
 * __dlpack__ method found once (a method descriptor that no instance dict
 * can shadow, as CPython's method call decides, is called unbound). A type
 * without a valid version tag gets `scratch`, used for this call only. */
static inline DevbufPy__DLType *DevbufPy__DLTypeOf(DevbufPy__DLState *s, PyTypeObject *type,
                                                   DevbufPy__DLType *scratch) {
  DevbufPy__DLType *e = &s->types[((size_t)(uintptr_t)type >> 4) & (DEVBUFPY__DL_TYPES - 1)];
  unsigned int tag = DevbufPy__CacheableTag(type);
  PyObject *descr = NULL;
  if (e->type == type && tag != 0 && e->tag == tag) return e;
#if !defined(Py_GIL_DISABLED)
  /* Borrowed, and kept only while the tag says the type is unchanged (a
   * change to it or a base resets the tag). Without the GIL another thread
   * may drop it meanwhile: there every call looks the method up. */
  descr = _PyType_Lookup(type, s->s_dlpack);
  if (descr != NULL && !(type->tp_getattro == PyObject_GenericGetAttr &&
                         PyType_HasFeature(Py_TYPE(descr), Py_TPFLAGS_METHOD_DESCRIPTOR) &&
                         type->tp_dictoffset == 0
#ifdef Py_TPFLAGS_MANAGED_DICT
                         && !(type->tp_flags & Py_TPFLAGS_MANAGED_DICT)
#endif
                         ))
    descr = NULL;
#endif
  tag = DevbufPy__CacheableTag(type); /* the lookup may have given it one */
  if (tag == 0) e = scratch;
  e->type = type;
  e->tag = tag;
  e->cpu = -1;
  e->method = descr;
  return e;
}

/* ---- the calls ------------------------------------------------------------------------ */

/* obj.__dlpack_device__() -> *dev; *has = 0 when there is no such method.
 * 0, or -1 with an exception. */
static inline int DevbufPy__DLProducerDevice(DevbufPy__DLState *s, PyObject *obj,
                                             DevbufPy__DLDevice *dev, int *has) {
  PyObject *r, *argv[1];
  long t = 0, id = 0;
  int ok;
  *has = 0;
  argv[0] = obj;
  r = PyObject_VectorcallMethod(s->s_dlpack_device, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                NULL);
  if (r == NULL) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
      return 0;
    }
    return -1;
  }
  ok = PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2;
  if (ok) {
    t = PyLong_AsLong(PyTuple_GET_ITEM(r, 0));
    id = PyLong_AsLong(PyTuple_GET_ITEM(r, 1));
  }
  Py_DECREF(r);
  if (!ok) {
    PyErr_SetString(PyExc_TypeError,
                    "__dlpack_device__() must return a (device_type, device_id) tuple");
    return -1;
  }
  if (PyErr_Occurred()) return -1;
  dev->device_type = (int32_t)t;
  dev->device_id = (int32_t)id;
  *has = 1;
  return 0;
}

/* The stream devbuf passes for a device (its default stream), or NULL
 * (none: the producer's default) without an exception. */
static inline PyObject *DevbufPy__DLDefaultStream(int32_t device_type) {
  switch (device_type) {
    case 2: case 13: return PyLong_FromLong(1); /* CUDA: the legacy default stream */
    case 10: return PyLong_FromLong(0);         /* ROCm: the default stream */
    default: return NULL;
  }
}

/* obj.__dlpack__(stream=stream, max_version=(1, 3)), fewer keywords for a
 * producer that refuses them with TypeError: the stream is left out when it
 * is NULL (None, its default), then max_version, then stream. method: the
 * type's __dlpack__ to call unbound, or NULL to look it up. */
static inline PyObject *DevbufPy__DLCall(DevbufPy__DLState *s, PyObject *obj, PyObject *method,
                                         PyObject *stream) {
  PyObject *argv[3], *r = NULL;
  int ns = stream == NULL, a, ntries;
  /* n keywords: stream + max_version, stream, none; without stream:
   * max_version, none. */
  static const int tries_s[] = {2, 1, 0}, tries_ns[] = {1, 0};
  const int *tries = ns ? tries_ns : tries_s;
  ntries = ns ? 2 : 3;
  Py_XINCREF(method); /* the call may change the type, which holds it */
  argv[0] = obj;
  for (a = 0; a < ntries; a++) {
    int n = tries[a];
    PyObject *kwnames;
    if (a > 0) {
      if (!PyErr_ExceptionMatches(PyExc_TypeError)) break;
      PyErr_Clear();
    }
    if (ns) {
      argv[1] = s->max_version;
      kwnames = n ? s->kw_mv : s->kw[0];
    } else {
      argv[1] = stream;
      argv[2] = s->max_version;
      kwnames = s->kw[n];
    }
    r = method != NULL ? PyObject_Vectorcall(method, argv, 1, kwnames)
                       : PyObject_VectorcallMethod(s->s_dlpack, argv,
                                                   1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
    if (r != NULL) break;
  }
  Py_XDECREF(method);
  return r;
}

/* Clear everything, holding nothing. */
static inline void DevbufPy__DLClear(DevbufPy_DLPackView *v) {
  v->producer = NULL;
  v->stream = NULL;
  v->managed_ = NULL;
  v->tensor = NULL;
  v->buf = NULL;
  v->ndim = 0;
  v->len = 0;
}

/* Take the tensor out of `cap` (a new reference, kept by the caller) into
 * `out`. not_cpu != NULL: a tensor off kDLCPU is left in the capsule (no
 * exception) and *not_cpu set. 0, or -1 with an exception (the capsule then
 * still owns its tensor: its destructor deletes it). */
static inline int DevbufPy__DLFromCapsule(PyObject *cap, PyObject *producer, int flags,
                                          DevbufPy_DLPackView *out, int *not_cpu) {
  const char *name;
  void *p;
  int versioned;
  const DevbufPy__DLTensor *t;
  uint64_t dl_flags;
  if (!PyCapsule_CheckExact(cap)) {
    PyErr_Format(PyExc_TypeError, "__dlpack__ returned %.100s, not a PyCapsule",
                 Py_TYPE(cap)->tp_name);
    return -1;
  }
  /* The usual capsule first: one name compare, inside GetPointer (its
   * ValueError for another name is dropped: the name is judged below). */
  p = PyCapsule_GetPointer(cap, "dltensor_versioned");
  versioned = 1;
  if (p == NULL) {
    PyErr_Clear();
    name = PyCapsule_GetName(cap);
    if (name != NULL && strcmp(name, "dltensor") == 0) {
      versioned = 0;
    } else if (name != NULL && (strcmp(name, "used_dltensor_versioned") == 0 ||
                                strcmp(name, "used_dltensor") == 0)) {
      PyErr_Format(PyExc_BufferError,
                   "the DLPack capsule was already consumed (its name is \"%s\"): a capsule "
                   "can be imported once",
                   name);
      return -1;
    } else {
      PyErr_Format(PyExc_BufferError,
                   "a DLPack capsule must be named \"dltensor_versioned\" or \"dltensor\", "
                   "not %s%s%s",
                   name ? "\"" : "", name ? name : "NULL", name ? "\"" : "");
      return -1;
    }
    p = PyCapsule_GetPointer(cap, name);
    if (p == NULL) return -1;
  }
  if (versioned) {
    const DevbufPy__DLManagedVersioned *m = (const DevbufPy__DLManagedVersioned *)p;
    /* Another major: refused unconsumed (its layout past `flags` is not
     * ours), so that the capsule's destructor still calls the deleter. */
    if (m->version.major != DEVBUFPY_DLPACK_MAJOR) {
      PyErr_Format(PyExc_BufferError,
                   "DLPack version %u.%u is not supported (devbuf reads major %d)",
                   (unsigned)m->version.major, (unsigned)m->version.minor, DEVBUFPY_DLPACK_MAJOR);
      return -1;
    }
    t = &m->dl_tensor;
    dl_flags = m->flags;
    out->version_major = m->version.major;
    out->version_minor = m->version.minor;
  } else {
    t = &((const DevbufPy__DLManaged *)p)->dl_tensor;
    /* A legacy tensor cannot say whether it may be written. */
    dl_flags = (flags & DEVBUFPY_DLPACK_LEGACY_WRITABLE) ? 0 : DEVBUFPY__DL_READ_ONLY;
    out->version_major = 0;
    out->version_minor = 0;
  }
  if (not_cpu != NULL && t->device.device_type != 1) {
    *not_cpu = 1;
    return -1;
  }
  if (DevbufPy_DLPackDescribe(t, dl_flags, out) < 0) return -1;
  if (!versioned) out->dl_flags = 0; /* as received: a legacy tensor has none */
  if ((flags & DEVBUFPY_DLPACK_WRITABLE) && out->readonly) {
    if (versioned)
      PyErr_Format(PyExc_BufferError,
                   "the producer (%.100s, through dlpack) marked it read-only, so a writable "
                   "request is refused",
                   producer ? Py_TYPE(producer)->tp_name : "unknown");
    else
      PyErr_Format(PyExc_BufferError,
                   "the producer (%.100s) gave a legacy DLPack capsule, which cannot say it is "
                   "writable, so it is read-only and a writable request is refused (pass "
                   "DEVBUFPY_DLPACK_LEGACY_WRITABLE if you know the producer allows writes)",
                   producer ? Py_TYPE(producer)->tp_name : "unknown");
    return -1;
  }
  /* Consumed: renamed, as the spec asks, and without its destructor, which
   * would only read the new name to learn that it has nothing to do. */
  if (PyCapsule_SetName(cap, versioned ? "used_dltensor_versioned" : "used_dltensor") < 0 ||
      PyCapsule_SetDestructor(cap, NULL) < 0)
    return -1;
  out->managed_ = p;
  out->versioned_ = versioned;
  Py_XINCREF(producer);
  out->producer = producer;
  return 0;
}

/* ---- entry points ------------------------------------------------------------------- */

/* Import `obj` (a DLPack producer) into `out`. flags: 0, or
 * DEVBUFPY_DLPACK_WRITABLE and/or DEVBUFPY_DLPACK_LEGACY_WRITABLE. stream:
 * the stream to pass to __dlpack__ when the tensor is not on the CPU (NULL:
 * devbuf's default for the device, see the top of this file); borrowed. The
 * one passed is out->stream.
 * 0, or -1 with an exception (nothing held). */
static inline int DevbufPy_DLPackImport(PyObject *obj, int flags, PyObject *stream,
                                        DevbufPy_DLPackView *out) {
  DevbufPy__DLState *s = DevbufPy__DLGetState();
  DevbufPy__DLType *e, scratch;
  PyTypeObject *type = Py_TYPE(obj);
  DevbufPy__DLDevice dev = {0, 0};
  PyObject *st, *cap; /* st: the stream passed, NULL for none (left at its default) */
  int has = 0, skip, not_cpu = 0, rc;
  if (s == NULL) goto fail;
  for (;;) {
    e = DevbufPy__DLTypeOf(s, type, &scratch);
    skip = e->cpu == 1;
    if (skip) {
      dev.device_type = 1;
      dev.device_id = 0;
      has = 1;
    } else {
      if (DevbufPy__DLProducerDevice(s, obj, &dev, &has) < 0) goto fail;
      /* The query may have run any code: the entry is trusted only if its
       * type is still unchanged. Once off the CPU, a type stays off. */
      e = DevbufPy__DLTypeOf(s, type, &scratch);
      if (has && e->cpu != 0) e->cpu = dev.device_type == 1;
    }
    if (!has || dev.device_type == 1 || stream == Py_None) {
      st = NULL;
    } else if (stream != NULL) {
      st = stream;
      Py_INCREF(st);
    } else if ((st = DevbufPy__DLDefaultStream(dev.device_type)) == NULL && PyErr_Occurred()) {
      goto fail;
    }
    cap = DevbufPy__DLCall(s, obj, e->method, st);
    if (cap == NULL) {
      Py_XDECREF(st);
      if (PyErr_ExceptionMatches(PyExc_AttributeError) && e->method == NULL &&
          _PyType_Lookup(type, s->s_dlpack) == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "devbuf_dlpack_import.h: %.100s has no __dlpack__ (a DLPack producer is "
                     "needed; for a buffer exporter use DevbufPy_GetBufferEx)",
                     type->tp_name);
      }
      goto fail;
    }
    rc = DevbufPy__DLFromCapsule(cap, obj, flags, out, skip ? &not_cpu : NULL);
    Py_DECREF(cap); /* consumed: it has no destructor left; else it deletes the tensor */
    if (rc == 0) {
      out->stream = st; /* the reference moves into out */
      return 0;
    }
    Py_XDECREF(st);
    if (!not_cpu) goto fail;
    /* The cache was wrong for this object: exported without the device
     * query and its stream (the capsule, unconsumed, is deleted). Mark the
     * type and import again the full way. */
    e = DevbufPy__DLTypeOf(s, type, &scratch);
    e->cpu = 0;
    not_cpu = 0;
  }
fail:
  DevbufPy__DLClear(out);
  return -1;
}

/* Import a capsule someone else got from __dlpack__ (consumes it: renamed
 * to its used name). producer: kept alive with the tensor, may be NULL. */
static inline int DevbufPy_DLPackImportCapsule(PyObject *capsule, PyObject *producer, int flags,
                                               DevbufPy_DLPackView *out) {
  DevbufPy__DLClear(out);
  if (DevbufPy__DLFromCapsule(capsule, producer, flags, out, NULL) < 0) {
    DevbufPy__DLClear(out);
    return -1;
  }
  return 0;
}

/* Call the tensor's deleter (exactly once) and drop the producer. Keeps any
 * pending exception; one the deleter leaves is cleared (it has nowhere to
 * go). Safe on a cleared or already released view. */
static inline void DevbufPy_DLPackRelease(DevbufPy_DLPackView *v) {
  void *m = v->managed_;
  PyObject *producer = v->producer, *stream = v->stream;
  DevbufPy__DLClear(v);
  if (m != NULL) {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException(); /* NULL: nothing pending */
#else
    PyObject *et = NULL, *ev = NULL, *etb = NULL;
    int pending = PyErr_Occurred() != NULL;
    if (pending) PyErr_Fetch(&et, &ev, &etb);
#endif
    if (v->versioned_) {
      DevbufPy__DLManagedVersioned *mv = (DevbufPy__DLManagedVersioned *)m;
      if (mv->deleter != NULL) mv->deleter(mv);
    } else {
      DevbufPy__DLManaged *ml = (DevbufPy__DLManaged *)m;
      if (ml->deleter != NULL) ml->deleter(ml);
    }
    if (PyErr_Occurred()) PyErr_Clear(); /* the deleter's: it has nowhere to go */
#if PY_VERSION_HEX >= 0x030C0000
    if (exc != NULL) PyErr_SetRaisedException(exc);
#else
    if (pending) PyErr_Restore(et, ev, etb);
#endif
  }
  Py_XDECREF(stream);
  Py_XDECREF(producer);
}

#ifdef __cplusplus
}
#endif

#endif /* DEVBUF_DLPACK_IMPORT_H */
