/* SPDX-License-Identifier: BSD-3-Clause */
/* devbuf/dlpack.h: DLPack (1.x) struct layouts and libdevbuf's DLPack layer.
 *
 * Part 1 declares the DLPack ABI: DLDevice, DLDataType, DLTensor, the legacy
 * DLManagedTensor, the versioned DLManagedTensorVersioned (DLPack >= 1.0) and
 * the C exchange table of DLPack 1.3 (found on a Python type as the PyCapsule
 * "dlpack_exchange_api" in the attribute `__dlpack_c_exchange_api__`). The
 * layouts are DLPack's; the standard names (DLTensor, kDLCUDA...) are only
 * declared when no real <dlpack/dlpack.h> was included first, and this header
 * then defines DLPACK_DLPACK_H_ so that a real dlpack.h included afterwards
 * is skipped: the layouts are identical either way. The exchange table is
 * always declared under devbuf's own name (devbuf_dlpack_exchange_api), so it
 * is available even next to an older real dlpack.h.
 *
 * Part 2 is libdevbuf's DLPack layer, independent of Python:
 *  - the device mapping DLDevice <-> (devbuf identifier, ordinal),
 *  - the dtype mapping DLDataType <-> buffer-protocol format string
 *    (plain struct codes where they mean exactly the same thing, devbuf's
 *    custom dtypes such as "[devbuf$bfloat16]" otherwise),
 *  - validation of an imported tensor into a plain description
 *    (devbuf_dlpack_desc), refusing whatever it cannot prove sane,
 *  - building an exported DLManagedTensorVersioned / DLManagedTensor.
 * docs/interop.md has the mapping tables and the decisions taken.
 *
 * Errors: every function returns DEVBUF_OK or a devbuf_status code and fills
 * the caller's devbuf_error (may be NULL) with "dlpack: what: detail". Nothing
 * here prints, aborts, or calls a producer's deleter unless it says so. */
#ifndef DEVBUF_DLPACK_H
#define DEVBUF_DLPACK_H

#include <stddef.h>
#include <stdint.h>

#include "devbuf/error.h"
#include "devbuf/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================
 * Part 1: the DLPack ABI
 * ====================================================================== */

/* The DLPack version this header describes and devbuf produces. */
#define DEVBUF_DLPACK_MAJOR 1
#define DEVBUF_DLPACK_MINOR 3

#if !defined(DLPACK_DLPACK_H_) && !defined(DLPACK_MAJOR_VERSION)
#define DLPACK_DLPACK_H_ 1 /* a later #include <dlpack/dlpack.h> becomes a no-op */
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3

/* A major change means another layout of DLManagedTensorVersioned after
 * `flags`; only version, manager_ctx and deleter stay where they are. */
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

/* Device types. Values are fixed by DLPack; 5 and 6 are unused. */
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,     /* pinned host memory (cudaMallocHost) */
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,    /* pinned host memory (hipMallocHost) */
  kDLExtDev = 12,      /* reserved for testing new devices */
  kDLCUDAManaged = 13, /* cudaMallocManaged */
  kDLOneAPI = 14,      /* oneAPI unified shared memory */
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
  kDLTrn = 18,
  /* DLPack main after 1.3 (enumeration values only, minor stays 3). */
  kDLTPU = 19,
  kDLTPUHost = 20, /* TPU pinned host memory */
  kDLAscend = 21
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id; /* 0 for plain CPU, pinned and managed memory */
} DLDevice;

/* Type codes of DLDataType.code (stored as uint8_t). */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U, /* bits = both parts together: complex64 has bits 64 */
  kDLBool = 6U,    /* bits 8: one byte per value */
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  kDLFloat6_e2m3fn = 15U, /* bits must be 6 */
  kDLFloat6_e3m2fn = 16U, /* bits must be 6 */
  kDLFloat4_e2m1fn = 17U, /* bits must be 4 */
  kDLBcomplex = 18U       /* DLPack main after 1.3: two bfloat16, bits 32 */
} DLDataTypeCode;

/* One element: `lanes` values of `bits` bits each, native byte order.
 * Sub-byte types are packed little-bit-endian unless the versioned tensor
 * sets DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED. */
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;           /* device pointer, host pointer, or handle (OpenCL cl_mem) */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;       /* ndim entries; may be NULL when ndim == 0 */
  int64_t *strides;     /* ndim entries, in ELEMENTS; NULL = C-contiguous (before 1.2) */
  uint64_t byte_offset; /* bytes from data to the first element */
} DLTensor;

/* The pre-1.0 managed tensor (capsule name "dltensor"). */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self); /* may be NULL; frees self too */
} DLManagedTensor;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
/* The producer made a copy: the consumer owns it until it calls the deleter. */
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
/* Sub-byte elements sit one per byte instead of packed (DLPack 1.1). */
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

/* The 1.x managed tensor (capsule name "dltensor_versioned"). Everything up
 * to and including `flags` keeps its place across majors, so the deleter of
 * a tensor of an unknown major can still be called. */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self); /* may be NULL; frees self too */
  uint64_t flags; /* DLPACK_FLAG_BITMASK_* */
  DLTensor dl_tensor;
} DLManagedTensorVersioned;
#endif /* standard names */

/* ---- the DLPack 1.3 C exchange table -----------------------------------
 * A producer type publishes a static table, for the life of the process, as
 * type(obj).__dlpack_c_exchange_api__ = PyCapsule(table, "dlpack_exchange_api").
 * A consumer checks header.version.major (walking prev_api for an older
 * major it knows) and may cache the table per type. `py_object` arguments are
 * PyObject*; "NoSync" functions do no stream synchronisation: a consumer that
 * needs it asks current_work_stream. Functions returning int give 0 on
 * success and -1 with a Python exception set. */
#define DEVBUF_DLPACK_EXCHANGE_API_ATTR "__dlpack_c_exchange_api__"
#define DEVBUF_DLPACK_EXCHANGE_API_CAPSULE "dlpack_exchange_api"

typedef struct devbuf_dlpack_exchange_api_header {
  DLPackVersion version;
  struct devbuf_dlpack_exchange_api_header *prev_api; /* older table, or NULL */
} devbuf_dlpack_exchange_api_header;

typedef struct devbuf_dlpack_exchange_api {
  devbuf_dlpack_exchange_api_header header;
  /* Allocate a new tensor like `prototype` (dtype, ndim, shape, device). On
   * failure returns -1 and calls set_error exactly once. */
  int (*managed_tensor_allocator)(DLTensor *prototype, DLManagedTensorVersioned **out,
                                  void *error_ctx,
                                  void (*set_error)(void *error_ctx, const char *kind,
                                                    const char *message));
  /* An owning versioned tensor for py_object (caller calls its deleter). */
  int (*managed_tensor_from_py_object_no_sync)(void *py_object, DLManagedTensorVersioned **out);
  /* Wrap an owning tensor (ownership stolen) into the producer's type. */
  int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *tensor,
                                             void **out_py_object);
  /* Optional (may be NULL): fill a caller-provided DLTensor whose shape and
   * strides point into py_object; valid only while py_object is alive and
   * unchanged, and only until control returns to the caller's caller. */
  int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
  /* The stream the producer currently works on for a device (NULL on CPU). */
  int (*current_work_stream)(DLDeviceType device_type, int32_t device_id,
                             void **out_current_stream);
} devbuf_dlpack_exchange_api;

/* Capsule names of the Python protocol (static storage, as the spec asks). */
#define DEVBUF_DLPACK_CAPSULE_LEGACY "dltensor"
#define DEVBUF_DLPACK_CAPSULE_LEGACY_USED "used_dltensor"
#define DEVBUF_DLPACK_CAPSULE_VERSIONED "dltensor_versioned"
#define DEVBUF_DLPACK_CAPSULE_VERSIONED_USED "used_dltensor_versioned"

/* ======================================================================
 * Part 2: libdevbuf's DLPack layer
 * ====================================================================== */

/* The largest ndim accepted on import and export. Same as CPython's
 * PyBUF_MAX_NDIM and NumPy 2's NPY_MAXDIMS, so that every accepted tensor
 * can be re-exported through the buffer protocol. */
#define DEVBUF_DLPACK_MAX_NDIM 64

/* Room for the longest format devbuf_dlpack_dtype_to_format writes
 * ("65535[devbuf$float8_e4m3b11fnuz]" and the like), NUL included. */
#define DEVBUF_DLPACK_FORMAT_MAX 64

/* devbuf_dlpack_desc.flags (and devbuf_dlpack_device_* flags) */
#define DEVBUF_DLPACK_READONLY 0x1u        /* DLPACK_FLAG_BITMASK_READ_ONLY was set */
#define DEVBUF_DLPACK_IS_COPIED 0x2u       /* DLPACK_FLAG_BITMASK_IS_COPIED was set */
#define DEVBUF_DLPACK_HOST_ACCESSIBLE 0x4u /* the host may dereference the pointer */
#define DEVBUF_DLPACK_C_CONTIGUOUS 0x8u    /* row-major compact (trivially for 0/1 items) */
#define DEVBUF_DLPACK_F_CONTIGUOUS 0x10u   /* column-major compact */
#define DEVBUF_DLPACK_VERSIONED 0x20u      /* described from a DLManagedTensorVersioned */
#define DEVBUF_DLPACK_HANDLE 0x40u         /* `data` is a handle (cl_mem), not an address */
#define DEVBUF_DLPACK_PINNED 0x80u         /* host memory pinned by a GPU runtime */
#define DEVBUF_DLPACK_MANAGED 0x100u       /* GPU managed (unified) memory */

/* ---- devices ---------------------------------------------------------------
 *   DLPack                 devbuf identifier   flags on import
 *   kDLCPU (1)             "cpu"               HOST_ACCESSIBLE
 *   kDLCUDA (2)            "devbuf.cuda"       -
 *   kDLCUDAHost (3)        "cpu"               HOST_ACCESSIBLE|PINNED
 *   kDLOpenCL (4)          "devbuf.opencl"     HANDLE
 *   kDLROCM (10)           "devbuf.hip"        -
 *   kDLROCMHost (11)       "cpu"               HOST_ACCESSIBLE|PINNED
 *   kDLExtDev (12)         "devbuf.sim"        -
 *   kDLCUDAManaged (13)    "devbuf.cuda"       HOST_ACCESSIBLE|MANAGED
 *   kDLOneAPI (14)         "devbuf.level_zero" -
 *   kDLTPUHost (20)        "cpu"               HOST_ACCESSIBLE|PINNED
 * device_id is the plugin's ordinal (0 for cpu and pinned memory). Any other
 * device type is DEVBUF_ENOTSUP. *identifier is a static string. */
DEVBUF_API int devbuf_dlpack_device_to_identifier(DLDevice device, const char **identifier,
                                                  int32_t *ordinal, uint32_t *flags,
                                                  devbuf_error *err);
/* The reverse: "cpu" -> kDLCPU (kDLCUDAHost with PINNED, ...), "devbuf.cuda"
 * -> kDLCUDA (kDLCUDAManaged when flags has MANAGED), ... Unknown identifiers
 * (another project's "numpy.cuda") give DEVBUF_ENOTSUP. */
DEVBUF_API int devbuf_dlpack_device_from_identifier(const char *identifier, int32_t ordinal,
                                                    uint32_t flags, DLDevice *out,
                                                    devbuf_error *err);
/* "kDLCUDA" etc., "kDL?" for unknown values. Static. */
DEVBUF_API const char *devbuf_dlpack_device_type_name(int32_t device_type);

/* ---- dtypes ----------------------------------------------------------------
 * DLDataType -> the format of one DLPack element, NUL-terminated in buf:
 *   int 8/16/32/64      b h i q        uint 8/16/32/64  B H I Q
 *   float 16/32/64      e f d          complex 64/128   Zf Zd
 *   bool 8              ?
 *   bfloat16, float8_*, float6_*, float4_*, bcomplex32, complex32, int4/2/1,
 *   uint4/2/1: "[devbuf$<name>]" as the format
 *   engine's builtin devbuf namespace spells them (see docs/interop.md).
 * lanes > 1 prefixes a count ("4f"). A (code, bits) pair with no exact
 * meaning (float 128, opaque handles, bool 1...) is DEVBUF_ENOTFOUND, never a
 * same-sized stand-in. Sub-byte types: `padded` selects the one-element-per-
 * byte spelling (DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED), otherwise the
 * packed one, whose format item holds several elements (*elements_per_item
 * says how many; 1 for everything else). Out pointers other than buf may be
 * NULL; *itemsize receives the bytes of one format item. */
DEVBUF_API int devbuf_dlpack_dtype_to_format(DLDataType dtype, int padded, char *buf,
                                             size_t capacity, uint64_t *itemsize,
                                             uint32_t *elements_per_item, devbuf_error *err);
/* Format string (len bytes, or (size_t)-1 for NUL-terminated) -> DLDataType.
 * Accepts one native-order item: the codes above plus 'l' 'L' 'n' 'N' (their
 * sizes on this platform), an optional '@' '=' (and '<' or '>' when it names
 * the native order), a count for lanes, and single custom dtypes whose
 * namespace gives a DLPack code. *padded (may be NULL) is set to 1 when the
 * format is a one-per-byte sub-byte type. Anything else (structs, 'c', 's',
 * 'g', 'P', non-native order...) is DEVBUF_ENOTSUP naming why. */
DEVBUF_API int devbuf_dlpack_dtype_from_format(const char *format, size_t len, DLDataType *out,
                                               int *padded, devbuf_error *err);

/* ---- import: validate and describe ---------------------------------------
 * A plain description of a DLPack tensor as a buffer-protocol consumer wants
 * it. Caller-allocated (set struct_size = sizeof(devbuf_dlpack_desc)); it
 * holds no pointer into the tensor other than `data`, so it stays valid
 * after the tensor's shape and strides arrays go away (the memory behind
 * `data` of course lives only as long as the producer keeps it).
 *
 * shape and strides count FORMAT ITEMS and BYTES, as the buffer protocol
 * does: strides[i] = DLPack stride (elements) * itemsize. For packed
 * sub-byte types one item holds elements_per_item elements, so the last
 * dimension is divided by it (see docs/interop.md for what is accepted). */
typedef struct devbuf_dlpack_desc {
  uint32_t struct_size;    /* in: sizeof(devbuf_dlpack_desc) */
  uint32_t flags;          /* DEVBUF_DLPACK_* */
  const char *identifier;  /* devbuf device identifier, static storage */
  int32_t ordinal;         /* the plugin's device ordinal */
  int32_t dl_device_type;  /* as received */
  int32_t dl_device_id;    /* as received */
  uint32_t elements_per_item;
  DLDataType dtype;        /* as received */
  DLPackVersion version;   /* {0,0} for a legacy tensor */
  void *data;              /* DLTensor.data as received (NULL allowed when empty) */
  uint64_t byte_offset;    /* DLTensor.byte_offset */
  uint64_t itemsize;       /* bytes per format item */
  uint64_t nitems;         /* product of shape (items) */
  /* Byte range touched, relative to data + byte_offset: [lo, hi). lo <= 0
   * only with negative strides; both 0 when nitems is 0. */
  int64_t extent_lo;
  int64_t extent_hi;
  int32_t ndim;
  char format[DEVBUF_DLPACK_FORMAT_MAX];
  int64_t shape[DEVBUF_DLPACK_MAX_NDIM];   /* items */
  int64_t strides[DEVBUF_DLPACK_MAX_NDIM]; /* bytes */
} devbuf_dlpack_desc;

/* Validate `t` and describe it. `dl_flags` are the versioned tensor's flags
 * (0 for legacy). Refuses, each with its own message: ndim < 0 or >
 * DEVBUF_DLPACK_MAX_NDIM; NULL shape (or strides array too short to hold) with
 * ndim > 0; negative extents; unknown or unmapped dtype (bits 0, lanes 0,
 * ...); unsupported device type; NULL data with a non-empty tensor; extents
 * or offsets that overflow 64 bits or wrap the address space; handle-based
 * memory (OpenCL) reached below the handle by negative strides; unknown flag
 * bits. NULL strides mean C-contiguous. */
DEVBUF_API int devbuf_dlpack_describe(const DLTensor *t, uint64_t dl_flags,
                                      devbuf_dlpack_desc *out, devbuf_error *err);
/* Check the version first (another major: DEVBUF_EABI; the caller must then
 * still call the deleter, which devbuf_dlpack_delete_versioned does safely),
 * then as devbuf_dlpack_describe. */
DEVBUF_API int devbuf_dlpack_describe_versioned(const DLManagedTensorVersioned *m,
                                                devbuf_dlpack_desc *out, devbuf_error *err);
/* A legacy (pre-1.0) tensor cannot say whether it may be written: it is
 * described read-only (DEVBUF_DLPACK_READONLY), the safe reading NumPy makes
 * too. A caller that knows its producer can call devbuf_dlpack_describe(&m->
 * dl_tensor, 0, ...) instead. */
DEVBUF_API int devbuf_dlpack_describe_legacy(const DLManagedTensor *m, devbuf_dlpack_desc *out,
                                             devbuf_error *err);
/* When the allocation behind the tensor is known to span `alloc_size` bytes
 * from `data`, refuse a view that reaches outside it (offset past the end,
 * negative strides below the start). */
DEVBUF_API int devbuf_dlpack_check_bounds(const devbuf_dlpack_desc *desc, uint64_t alloc_size,
                                          devbuf_error *err);

/* Call the deleter (when non-NULL). Safe for a tensor of any major version:
 * only fields that DLPack keeps in place are read. NULL m is a no-op. */
DEVBUF_API void devbuf_dlpack_delete_versioned(DLManagedTensorVersioned *m);
DEVBUF_API void devbuf_dlpack_delete_legacy(DLManagedTensor *m);

/* ---- export --------------------------------------------------------------
 * Build a managed tensor around memory the caller keeps alive. The result is
 * one heap block (struct, shape, strides) owned by whoever receives it; its
 * deleter frees the block and then calls release(release_ctx) exactly once
 * (release may be NULL). release runs on whatever thread the consumer calls
 * the deleter from: a Python owner must take the GIL itself. On failure
 * nothing is allocated and release is NOT called. */
typedef struct devbuf_dlpack_export_spec {
  uint32_t struct_size;     /* sizeof(devbuf_dlpack_export_spec) */
  uint32_t flags;           /* DEVBUF_DLPACK_READONLY | IS_COPIED | PINNED | MANAGED */
  const char *identifier;   /* "cpu", "devbuf.cuda", ... */
  int32_t ordinal;
  int32_t ndim;             /* 0..DEVBUF_DLPACK_MAX_NDIM */
  void *data;               /* pointer or handle of the allocation */
  uint64_t byte_offset;     /* to the first item */
  const char *format;       /* NUL-terminated buffer-protocol format of one item */
  const int64_t *shape;     /* ndim entries, items */
  const int64_t *strides;   /* ndim entries, BYTES (multiples of the itemsize); NULL = C order */
  void (*release)(void *release_ctx);
  void *release_ctx;
} devbuf_dlpack_export_spec;

DEVBUF_API int devbuf_dlpack_export_versioned(const devbuf_dlpack_export_spec *spec,
                                              DLManagedTensorVersioned **out,
                                              devbuf_error *err);
/* Legacy form, for consumers whose max_version is below 1.0 (no flags:
 * a read-only export is refused with DEVBUF_ENOTSUP, as a legacy consumer
 * would write to it). */
DEVBUF_API int devbuf_dlpack_export_legacy(const devbuf_dlpack_export_spec *spec,
                                           DLManagedTensor **out, devbuf_error *err);

/* The same managed tensors built in caller storage, for an owner that keeps
 * its own blocks (a freelist): fills version (versioned form), flags and
 * dl_tensor, with shape and strides pointing at dims (2 * spec->ndim
 * entries: shape, then strides in elements); manager_ctx and deleter are
 * the caller's to set. Same checks and refusals as the allocating forms
 * (a read-only or padded sub-byte export has no legacy form). On failure
 * the contents of m and dims are unspecified. */
DEVBUF_API int devbuf_dlpack_export_versioned_into(const devbuf_dlpack_export_spec *spec,
                                                   DLManagedTensorVersioned *m, int64_t *dims,
                                                   devbuf_error *err);
DEVBUF_API int devbuf_dlpack_export_legacy_into(const devbuf_dlpack_export_spec *spec,
                                                DLManagedTensor *m, int64_t *dims,
                                                devbuf_error *err);

/* Fill a caller-owned DLTensor (for dltensor_from_py_object_no_sync) with
 * shape/strides pointing at the caller's arrays shape_out/strides_out
 * (ndim entries each, strides in elements). No allocation. */
DEVBUF_API int devbuf_dlpack_fill_tensor(const devbuf_dlpack_export_spec *spec, DLTensor *t,
                                         int64_t *shape_out, int64_t *strides_out,
                                         devbuf_error *err);

#ifdef __cplusplus
}
#endif

#endif /* DEVBUF_DLPACK_H */
