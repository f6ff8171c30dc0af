/* DLPack layer of libdevbuf: device and dtype mappings, validation of
 * imported tensors, construction of exported ones. See devbuf/dlpack.h for
 * the contracts and docs/interop.md for the decisions. Pure C: no Python,
 * no runtime state, so it is cheap enough for the per-tensor fast path of
 * the DLPack C exchange table. */
#include "devbuf/dlpack.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/format.h"
#include "devbuf/runtime.h"

/* Our layouts must be DLPack's, byte for byte: a consumer built against the
 * real dlpack.h reads what we write. These are the offsets on LP64. */
#if UINTPTR_MAX == 0xffffffffffffffffu
_Static_assert(sizeof(DLDevice) == 8, "DLDevice layout");
_Static_assert(sizeof(DLDataType) == 4, "DLDataType layout");
_Static_assert(offsetof(DLTensor, device) == 8, "DLTensor.device");
_Static_assert(offsetof(DLTensor, ndim) == 16, "DLTensor.ndim");
_Static_assert(offsetof(DLTensor, dtype) == 20, "DLTensor.dtype");
_Static_assert(offsetof(DLTensor, shape) == 24, "DLTensor.shape");
_Static_assert(offsetof(DLTensor, strides) == 32, "DLTensor.strides");
_Static_assert(offsetof(DLTensor, byte_offset) == 40, "DLTensor.byte_offset");
_Static_assert(sizeof(DLTensor) == 48, "DLTensor size");
_Static_assert(offsetof(DLManagedTensor, manager_ctx) == 48, "DLManagedTensor.manager_ctx");
_Static_assert(offsetof(DLManagedTensor, deleter) == 56, "DLManagedTensor.deleter");
_Static_assert(offsetof(DLManagedTensorVersioned, manager_ctx) == 8, "versioned.manager_ctx");
_Static_assert(offsetof(DLManagedTensorVersioned, deleter) == 16, "versioned.deleter");
_Static_assert(offsetof(DLManagedTensorVersioned, flags) == 24, "versioned.flags");
_Static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) == 32, "versioned.dl_tensor");
_Static_assert(offsetof(devbuf_dlpack_exchange_api, managed_tensor_allocator) == 16,
               "exchange api header");
_Static_assert(sizeof(devbuf_dlpack_exchange_api) == 56, "exchange api size");
#endif

#define KNOWN_DL_FLAGS                                                   \
  ((uint64_t)(DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED | \
              DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED))

/* ======================================================================
 * devices
 * ====================================================================== */

const char *devbuf_dlpack_device_type_name(int32_t t) {
  switch (t) {
    case kDLCPU: return "kDLCPU";
    case kDLCUDA: return "kDLCUDA";
    case kDLCUDAHost: return "kDLCUDAHost";
    case kDLOpenCL: return "kDLOpenCL";
    case kDLVulkan: return "kDLVulkan";
    case kDLMetal: return "kDLMetal";
    case kDLVPI: return "kDLVPI";
    case kDLROCM: return "kDLROCM";
    case kDLROCMHost: return "kDLROCMHost";
    case kDLExtDev: return "kDLExtDev";
    case kDLCUDAManaged: return "kDLCUDAManaged";
    case kDLOneAPI: return "kDLOneAPI";
    case kDLWebGPU: return "kDLWebGPU";
    case kDLHexagon: return "kDLHexagon";
    case kDLMAIA: return "kDLMAIA";
    case kDLTrn: return "kDLTrn";
    case kDLTPU: return "kDLTPU";
    case kDLTPUHost: return "kDLTPUHost";
    case kDLAscend: return "kDLAscend";
    default: return "kDL?";
  }
}

static const char ID_CPU[] = "cpu";
static const char ID_CUDA[] = "devbuf.cuda";
static const char ID_OPENCL[] = "devbuf.opencl";
static const char ID_HIP[] = "devbuf.hip";
static const char ID_L0[] = "devbuf.level_zero";
static const char ID_SIM[] = "devbuf.sim";

int devbuf_dlpack_device_to_identifier(DLDevice device, const char **identifier,
                                       int32_t *ordinal, uint32_t *flags, devbuf_error *err) {
  const char *id;
  uint32_t f = 0;
  int32_t dt = (int32_t)device.device_type;
  switch (dt) {
    case kDLCPU: id = ID_CPU; f = DEVBUF_DLPACK_HOST_ACCESSIBLE; break;
    case kDLCUDAHost:
    case kDLROCMHost:
    case kDLTPUHost: id = ID_CPU; f = DEVBUF_DLPACK_HOST_ACCESSIBLE | DEVBUF_DLPACK_PINNED; break;
    case kDLCUDA: id = ID_CUDA; break;
    case kDLCUDAManaged: id = ID_CUDA; f = DEVBUF_DLPACK_HOST_ACCESSIBLE | DEVBUF_DLPACK_MANAGED; break;
    case kDLOpenCL: id = ID_OPENCL; f = DEVBUF_DLPACK_HANDLE; break;
    case kDLROCM: id = ID_HIP; break;
    case kDLOneAPI: id = ID_L0; break;
    case kDLExtDev: id = ID_SIM; break;
    default:
      return devbuf_error_set(err, DEVBUF_ENOTSUP,
                              "dlpack: device: DLPack device type %d (%s) has no devbuf device "
                              "identifier (supported: kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, "
                              "kDLROCM, kDLROCMHost, kDLExtDev, kDLCUDAManaged, kDLOneAPI, "
                              "kDLTPUHost)",
                              (int)dt, devbuf_dlpack_device_type_name(dt));
  }
  if (device.device_id < 0)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack: device: negative device_id %d for %s",
                            (int)device.device_id, devbuf_dlpack_device_type_name(dt));
  if (identifier) *identifier = id;
  /* Pinned host memory is "cpu", and cpu has a single device 0 whatever GPU
   * the pinning runtime belongs to. */
  if (ordinal) *ordinal = (id == ID_CPU) ? 0 : device.device_id;
  if (flags) *flags = f;
  return DEVBUF_OK;
}

int devbuf_dlpack_device_from_identifier(const char *identifier, int32_t ordinal, uint32_t flags,
                                         DLDevice *out, devbuf_error *err) {
  DLDeviceType t;
  if (identifier == NULL || out == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack: device: NULL identifier or output");
  if (ordinal < 0)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack: device: negative ordinal %d for '%s'",
                            (int)ordinal, identifier);
  /* "cpu", the common case, tested inline (a strcmp call was a tenth of an
   * export's device lookup). */
  if (identifier[0] == 'c' && identifier[1] == 'p' && identifier[2] == 'u' &&
      identifier[3] == '\0') {
    /* Pinned memory could be kDLCUDAHost or kDLROCMHost: without knowing
     * which runtime pinned it, plain kDLCPU is the honest answer. */
    t = kDLCPU;
    ordinal = 0;
  } else if (strcmp(identifier, ID_CUDA) == 0) {
    t = (flags & DEVBUF_DLPACK_MANAGED) ? kDLCUDAManaged : kDLCUDA;
  } else if (strcmp(identifier, ID_OPENCL) == 0) {
    t = kDLOpenCL;
  } else if (strcmp(identifier, ID_HIP) == 0) {
    t = kDLROCM;
  } else if (strcmp(identifier, ID_L0) == 0) {
    t = kDLOneAPI;
  } else if (strcmp(identifier, ID_SIM) == 0) {
    t = kDLExtDev;
  } else {
    /* Any other plugin (third-party, Python-defined) says what it is through
     * devbuf_device_props.dlpack_device_type; a plugin that does not know
     * (-1 or 0) has no DLPack device type. */
    devbuf_device dev;
    devbuf_device_props props;
    if (devbuf_device_open_ordinal(identifier, ordinal, &dev, NULL) == DEVBUF_OK &&
        devbuf_device_props_get(&dev, &props, NULL) == DEVBUF_OK && props.dlpack_device_type > 0) {
      out->device_type = (DLDeviceType)props.dlpack_device_type;
      out->device_id = props.dlpack_device_type == kDLCPU ? 0 : props.dlpack_device_id;
      return DEVBUF_OK;
    }
    return devbuf_error_set(err, DEVBUF_ENOTSUP,
                            "dlpack: device: identifier '%s' has no DLPack device type (its "
                            "plugin reports none in device_props.dlpack_device_type; built-in "
                            "mappings: cpu, devbuf.cuda, devbuf.opencl, devbuf.hip, "
                            "devbuf.level_zero, devbuf.sim)",
                            identifier);
  }
  out->device_type = t;
  out->device_id = ordinal;
  return DEVBUF_OK;
}

/* ======================================================================
 * dtypes
 * ====================================================================== */

/* The builtin devbuf namespace's names for DLPack's extended float codes
 * (code - kDLFloat8_e3m4 indexes the float8 rows). The packed spelling of a
 * sub-byte type holds `epi` elements per item of `item` bytes; the padded
 * spelling (one element per byte) is the bare name. These names are checked
 * against the format engine's registry by tests/interop/test_dlpack.c. */
typedef struct ext_dtype {
  uint8_t code, bits;
  const char *name;        /* padded / ordinary spelling, e.g. "bfloat16" */
  const char *packed;      /* packed spelling for sub-byte types, else NULL */
  uint8_t packed_item;     /* bytes of one packed item */
  uint8_t packed_epi;      /* elements in one packed item */
} ext_dtype;

static const ext_dtype EXT_DTYPES[] = {
  {kDLBfloat, 16, "bfloat16", NULL, 0, 0},
  {kDLFloat8_e3m4, 8, "float8_e3m4", NULL, 0, 0},
  {kDLFloat8_e4m3, 8, "float8_e4m3", NULL, 0, 0},
  {kDLFloat8_e4m3b11fnuz, 8, "float8_e4m3b11fnuz", NULL, 0, 0},
  {kDLFloat8_e4m3fn, 8, "float8_e4m3fn", NULL, 0, 0},
  {kDLFloat8_e4m3fnuz, 8, "float8_e4m3fnuz", NULL, 0, 0},
  {kDLFloat8_e5m2, 8, "float8_e5m2", NULL, 0, 0},
  {kDLFloat8_e5m2fnuz, 8, "float8_e5m2fnuz", NULL, 0, 0},
  {kDLFloat8_e8m0fnu, 8, "float8_e8m0fnu", NULL, 0, 0},
  {kDLFloat6_e2m3fn, 6, "float6_e2m3fn", "float6_e2m3fn_x4", 3, 4},
  {kDLFloat6_e3m2fn, 6, "float6_e3m2fn", "float6_e3m2fn_x4", 3, 4},
  {kDLFloat4_e2m1fn, 4, "float4_e2m1fn", "float4_e2m1fn_x2", 1, 2},
  /* Complex of two float16: NumPy and struct have no plain code for it. */
  {kDLComplex, 32, "complex32", NULL, 0, 0},
  /* Complex of two bfloat16 (ml_dtypes' bcomplex32, DLPack main's kDLBcomplex). */
  {kDLBcomplex, 32, "bcomplex32", NULL, 0, 0},
  /* Sub-byte integers (DLPack allows any bits for kDLInt / kDLUInt). */
  {kDLInt, 4, "int4", "int4_x2", 1, 2},
  {kDLUInt, 4, "uint4", "uint4_x2", 1, 2},
  {kDLInt, 2, "int2", "int2_x4", 1, 4},
  {kDLUInt, 2, "uint2", "uint2_x4", 1, 4},
  {kDLInt, 1, "int1", "int1_x8", 1, 8},
  {kDLUInt, 1, "uint1", "uint1_x8", 1, 8},
};
#define N_EXT (sizeof EXT_DTYPES / sizeof EXT_DTYPES[0])

static const ext_dtype *ext_by_code(uint8_t code, uint8_t bits) {
  for (size_t i = 0; i < N_EXT; i++)
    if (EXT_DTYPES[i].code == code && EXT_DTYPES[i].bits == bits) return &EXT_DTYPES[i];
  return NULL;
}

/* The one row of a code that has exactly one width (the float families). */
static const ext_dtype *ext_only_width(uint8_t code) {
  if (code < kDLBfloat || code == kDLComplex || code == kDLBool) return NULL;
  for (size_t i = 0; i < N_EXT; i++)
    if (EXT_DTYPES[i].code == code) return &EXT_DTYPES[i];
  return NULL;
}

static const char *code_name(uint8_t code) {
  static const char *const names[] = {"kDLInt", "kDLUInt", "kDLFloat", "kDLOpaqueHandle",
                                      "kDLBfloat", "kDLComplex", "kDLBool"};
  if (code < sizeof names / sizeof names[0]) return names[code];
  const ext_dtype *e = ext_only_width(code);
  return e ? e->name : "unknown code";
}

/* The plain struct code for (code, bits), or 0. */
static const char *plain_code(uint8_t code, uint8_t bits) {
  switch (code) {
    case kDLInt:
      switch (bits) { case 8: return "b"; case 16: return "h"; case 32: return "i"; case 64: return "q"; }
      break;
    case kDLUInt:
      switch (bits) { case 8: return "B"; case 16: return "H"; case 32: return "I"; case 64: return "Q"; }
      break;
    case kDLFloat:
      switch (bits) { case 16: return "e"; case 32: return "f"; case 64: return "d"; }
      break;
    case kDLComplex:
      switch (bits) { case 64: return "Zf"; case 128: return "Zd"; }
      break;
    case kDLBool:
      if (bits == 8) return "?";
      break;
  }
  return NULL;
}

int devbuf_dlpack_dtype_to_format(DLDataType dt, int padded, char *buf, size_t capacity,
                                  uint64_t *itemsize, uint32_t *elements_per_item,
                                  devbuf_error *err) {
  char tmp[DEVBUF_DLPACK_FORMAT_MAX];
  uint64_t isz;
  uint32_t epi = 1;
  int n;
  if (dt.lanes == 0)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack: dtype: lanes is 0 (code %u, bits %u)",
                            dt.code, dt.bits);
  if (dt.bits == 0)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack: dtype: bits is 0 (code %u = %s)",
                            dt.code, code_name(dt.code));
  const char *plain = plain_code(dt.code, dt.bits);
  if (plain != NULL) {
    isz = (uint64_t)dt.bits / 8u * dt.lanes;
    if (dt.lanes == 1) { /* the common case, on every import: no printf */
      n = (int)strlen(plain);
      memcpy(tmp, plain, (size_t)n + 1);
    } else {
      n = snprintf(tmp, sizeof tmp, "%u%s", (unsigned)dt.lanes, plain);
    }
  } else {
    const ext_dtype *e = ext_by_code(dt.code, dt.bits);
    if (e == NULL) {
      e = ext_only_width(dt.code);
      if (dt.code == kDLOpaqueHandle)
        return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                                "dlpack: dtype: kDLOpaqueHandle (bits %u) has no format: its "
                                "meaning is private to the producer",
                                dt.bits);
      if (e != NULL)
        return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                                "dlpack: dtype: %s must have bits %u, got %u", e->name, e->bits,
                                dt.bits);
      return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                              "dlpack: dtype: no format for DLPack dtype (code %u = %s, bits %u, "
                              "lanes %u): not reinterpreting it as another type of that size",
                              dt.code, code_name(dt.code), dt.bits, dt.lanes);
    }
    if (e->packed != NULL && !padded) {
      /* Packed sub-byte values: an item is a group of whole bytes. Lanes
       * would pack into the same bits; not supported. */
      if (dt.lanes != 1)
        return devbuf_error_set(err, DEVBUF_ENOTSUP,
                                "dlpack: dtype: packed %s with lanes %u is not supported",
                                e->name, dt.lanes);
      isz = e->packed_item;
      epi = e->packed_epi;
      n = snprintf(tmp, sizeof tmp, "[devbuf$%s]", e->packed);
    } else {
      isz = (e->packed != NULL ? 1u : (uint64_t)dt.bits / 8u) * dt.lanes;
      if (dt.lanes == 1) n = snprintf(tmp, sizeof tmp, "[devbuf$%s]", e->name);
      else n = snprintf(tmp, sizeof tmp, "%u[devbuf$%s]", (unsigned)dt.lanes, e->name);
    }
  }
  if (n < 0 || (size_t)n >= capacity || buf == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "dlpack: dtype: output buffer of %zu bytes too small for '%s'",
                            capacity, tmp);
  memcpy(buf, tmp, (size_t)n + 1);
  if (itemsize) *itemsize = isz;
  if (elements_per_item) *elements_per_item = epi;
  return DEVBUF_OK;
}

static int host_is_little(void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 1;
}

/* Fall back to the full format engine for what the fast path does not
 * recognise (alternatives, other namespaces, whitespace...). */
static int dtype_from_engine(const char *fmt, size_t len, DLDataType *out, int *padded,
                             devbuf_error *err) {
  devbuf_format f;
  uint8_t code = 0, bits = 0;
  uint16_t lanes = 0;
  f.struct_size = sizeof f;
  int rc = devbuf_format_parse(fmt, len, DEVBUF_FORMAT_DEFAULT, &f, err);
  if (rc == DEVBUF_OK) rc = devbuf_format_to_dlpack(&f, &code, &bits, &lanes, err);
  if (rc == DEVBUF_OK) {
    int pad = 0;
    /* A custom sub-byte type whose item is one element per byte is the
     * padded DLPack form. */
    const devbuf_format_field *fld = f.fields;
    if (fld && fld->kind == DEVBUF_FIELD_CUSTOM && fld->custom && fld->custom->desc.bits < 8 &&
        fld->custom->desc.elements_per_item == 1)
      pad = 1;
    /* A repeated packed item ("7[devbuf$float4_e2m1fn_x4]") would need lanes
     * of packed elements, which DLPack does not define (the fast path refuses
     * the same; found by fuzz_dlpack: the mapping could not come back). */
    if (fld && fld->kind == DEVBUF_FIELD_CUSTOM && fld->custom &&
        fld->custom->desc.elements_per_item > 1 && lanes != 1) {
      /* Named by what the format says: a namespace may leave `canonical` empty. */
      const devbuf_format_custom *cu = fld->custom;
      const devbuf_format_alt *a = cu->alts && cu->chosen >= 0 ? &cu->alts[cu->chosen] : NULL;
      int rc2 = devbuf_error_set(err, DEVBUF_ENOTSUP,
                                 "dlpack: dtype: packed [%s$%s] with a count is not supported "
                                 "(DLPack has no lanes of packed sub-byte elements)",
                                 a && a->id ? a->id : "?", a && a->payload ? a->payload : "");
      devbuf_format_release(&f);
      return rc2;
    }
    out->code = code;
    out->bits = bits;
    out->lanes = lanes;
    if (padded) *padded = pad;
  } else {
    devbuf_error_prefix(err, "dlpack: dtype");
    if (rc != DEVBUF_EFORMAT && rc != DEVBUF_ENOTFOUND) rc = DEVBUF_ENOTSUP;
  }
  devbuf_format_release(&f);
  return rc;
}

int devbuf_dlpack_dtype_from_format(const char *format, size_t len, DLDataType *out, int *padded,
                                    devbuf_error *err) {
  if (format == NULL || out == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack: dtype: NULL format or output");
  if (len == (size_t)-1) len = strlen(format);
  if (padded) *padded = 0;
  const char *p = format, *end = format + len;
  int native_sizes = 1;
  if (p < end) {
    char c = *p;
    if (c == '@') p++;
    else if (c == '=') { native_sizes = 0; p++; }
    else if (c == '<' || c == '>' || c == '!') {
      int little = (c == '<');
      if (little != host_is_little())
        return devbuf_error_set(err, DEVBUF_ENOTSUP,
                                "dlpack: dtype: format '%.*s' is not in native byte order; "
                                "DLPack carries native-order data only",
                                (int)len, format);
      native_sizes = 0;
      p++;
    }
  }
  unsigned long lanes = 1;
  if (p < end && *p >= '0' && *p <= '9') {
    lanes = 0;
    while (p < end && *p >= '0' && *p <= '9') {
      lanes = lanes * 10 + (unsigned long)(*p - '0');
      if (lanes > 65535) break;
      p++;
    }
    if (lanes == 0 || lanes > 65535)
      return devbuf_error_set(err, DEVBUF_ENOTSUP,
                              "dlpack: dtype: count in format '%.*s' must be 1..65535 "
                              "(DLPack lanes)",
                              (int)len, format);
  }
  if (p >= end)
    return devbuf_error_set(err, DEVBUF_EFORMAT, "dlpack: dtype: format '%.*s' has no item code",
                            (int)len, format);
  uint8_t code = 0, bits = 0;
  const char *q = p + 1; /* end of the code if it is one character */
  switch (*p) {
    case 'b': code = kDLInt; bits = 8; break;
    case 'B': code = kDLUInt; bits = 8; break;
    case 'h': code = kDLInt; bits = 16; break;
    case 'H': code = kDLUInt; bits = 16; break;
    case 'i': code = kDLInt; bits = 32; break;
    case 'I': code = kDLUInt; bits = 32; break;
    case 'l': code = kDLInt; bits = native_sizes ? (uint8_t)(8 * sizeof(long)) : 32; break;
    case 'L': code = kDLUInt; bits = native_sizes ? (uint8_t)(8 * sizeof(long)) : 32; break;
    case 'q': code = kDLInt; bits = 64; break;
    case 'Q': code = kDLUInt; bits = 64; break;
    case 'n': case 'N':
      if (!native_sizes) goto engine; /* struct refuses n/N outside native mode */
      code = (*p == 'n') ? kDLInt : kDLUInt;
      bits = (uint8_t)(8 * sizeof(size_t));
      break;
    case 'e': code = kDLFloat; bits = 16; break;
    case 'f': code = kDLFloat; bits = 32; break;
    case 'd': code = kDLFloat; bits = 64; break;
    case '?': code = kDLBool; bits = 8; break;
    case 'F': code = kDLComplex; bits = 64; break;  /* CPython 3.14 struct */
    case 'D': code = kDLComplex; bits = 128; break;
    case 'Z':
      if (q < end && (*q == 'e' || *q == 'f' || *q == 'd')) {
        code = kDLComplex;
        bits = (*q == 'e') ? 32 : (*q == 'f') ? 64 : 128;
        q++;
        break;
      }
      goto engine;
    case '[': {
      /* Fast path for exactly "[devbuf$NAME]". */
      static const char pre[] = "[devbuf$";
      size_t plen = sizeof pre - 1;
      if ((size_t)(end - p) > plen + 1 && memcmp(p, pre, plen) == 0 && end[-1] == ']') {
        const char *name = p + plen;
        size_t nlen = (size_t)(end - 1 - name);
        for (size_t i = 0; i < N_EXT; i++) {
          const ext_dtype *e = &EXT_DTYPES[i];
          if (strlen(e->name) == nlen && memcmp(e->name, name, nlen) == 0) {
            out->code = e->code;
            out->bits = e->bits;
            out->lanes = (uint16_t)lanes;
            if (padded) *padded = (e->packed != NULL);
            return DEVBUF_OK;
          }
          if (e->packed && strlen(e->packed) == nlen && memcmp(e->packed, name, nlen) == 0) {
            if (lanes != 1)
              return devbuf_error_set(err, DEVBUF_ENOTSUP,
                                      "dlpack: dtype: packed %s with a count is not supported",
                                      e->packed);
            out->code = e->code;
            out->bits = e->bits;
            out->lanes = 1;
            return DEVBUF_OK;
          }
        }
      }
      goto engine;
    }
    case 'c': case 's': case 'p': case 'x': case 'P': case 'g': case 'O': case 'u': case 'w':
      return devbuf_error_set(err, DEVBUF_ENOTSUP,
                              "dlpack: dtype: format '%.*s': code '%c' has no DLPack dtype",
                              (int)len, format, *p);
    default:
      goto engine;
  }
  if (q != end) goto engine;
  out->code = code;
  out->bits = bits;
  out->lanes = (uint16_t)lanes;
  return DEVBUF_OK;
engine:
  return dtype_from_engine(format, len, out, padded, err);
}

/* ======================================================================
 * import
 * ====================================================================== */

int devbuf_dlpack_describe(const DLTensor *t, uint64_t dl_flags, devbuf_dlpack_desc *out,
                           devbuf_error *err) {
  if (t == NULL || out == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack import: NULL tensor or description");
  if (out->struct_size < sizeof *out)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "dlpack import: description struct_size %u, expected %zu",
                            out->struct_size, sizeof *out);
  if (dl_flags & ~KNOWN_DL_FLAGS)
    return devbuf_error_set(err, DEVBUF_ENOTSUP,
                            "dlpack import: unknown flag bits 0x%llx (devbuf knows READ_ONLY, "
                            "IS_COPIED, IS_SUBBYTE_TYPE_PADDED of DLPack %d.%d)",
                            (unsigned long long)(dl_flags & ~KNOWN_DL_FLAGS), DEVBUF_DLPACK_MAJOR,
                            DEVBUF_DLPACK_MINOR);

  uint32_t dflags = 0;
  int rc;
  if ((int32_t)t->device.device_type == kDLCPU && t->device.device_id >= 0) {
    /* The common case, as devbuf_dlpack_device_to_identifier maps it,
     * without the call. */
    out->identifier = ID_CPU;
    out->ordinal = 0;
    dflags = DEVBUF_DLPACK_HOST_ACCESSIBLE;
  } else {
    rc = devbuf_dlpack_device_to_identifier(t->device, &out->identifier, &out->ordinal, &dflags,
                                            err);
    if (rc) return rc;
  }
  out->dl_device_type = (int32_t)t->device.device_type;
  out->dl_device_id = t->device.device_id;

  int32_t ndim = t->ndim;
  if (ndim < 0 || ndim > DEVBUF_DLPACK_MAX_NDIM)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack import: ndim %d out of range 0..%d",
                            (int)ndim, DEVBUF_DLPACK_MAX_NDIM);
  if (ndim > 0 && t->shape == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack import: shape is NULL with ndim %d",
                            (int)ndim);

  uint64_t itemsize;
  uint32_t epi;
  int padded = (dl_flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) != 0;
  /* dtype -> format is a pure function of (code, bits, lanes, padded): the
   * last answer is kept per thread, as imports repeat the same few dtypes
   * (the conversion was a sixth of describing a tensor). */
  static _Thread_local struct {
    int valid, padded;
    DLDataType dtype;
    uint64_t itemsize;
    uint32_t epi;
    char format[sizeof out->format];
  } memo;
  /* One TLS address lookup (__tls_get_addr in a shared library), not one
   * per access; the whole format buffer is copied (a fixed-size copy the
   * compiler inlines, instead of strlen + memcpy calls). */
  __typeof__(memo) *mp = &memo;
  if (mp->valid && mp->padded == padded && mp->dtype.code == t->dtype.code &&
      mp->dtype.bits == t->dtype.bits && mp->dtype.lanes == t->dtype.lanes) {
    memcpy(out->format, mp->format, sizeof out->format);
    itemsize = mp->itemsize;
    epi = mp->epi;
  } else {
    rc = devbuf_dlpack_dtype_to_format(t->dtype, padded, out->format, sizeof out->format,
                                       &itemsize, &epi, err);
    if (rc) {
      devbuf_error_prefix(err, "dlpack import");
      return rc;
    }
    mp->valid = 1;
    mp->padded = padded;
    mp->dtype = t->dtype;
    mp->itemsize = itemsize;
    mp->epi = epi;
    memcpy(mp->format, out->format, sizeof mp->format);
  }
  out->dtype = t->dtype;
  out->itemsize = itemsize;
  out->elements_per_item = epi;
  out->ndim = ndim;

  /* Shapes (elements) and strides (elements), with C-order strides filled
   * in when absent (the producer's own array is read in place otherwise). */
  int64_t c_order[DEVBUF_DLPACK_MAX_NDIM];
  const int64_t *estrides = t->strides;
  uint64_t nelem = 1;
  int empty = 0;
  for (int32_t i = 0; i < ndim; i++) {
    int64_t n = t->shape[i];
    if (n < 0)
      return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack import: shape[%d] = %lld is negative",
                              (int)i, (long long)n);
    if (n == 0) empty = 1;
    if (!empty && __builtin_mul_overflow(nelem, (uint64_t)n, &nelem))
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "dlpack import: element count overflows 64 bits at shape[%d] = %lld",
                              (int)i, (long long)n);
  }
  if (empty) nelem = 0;
  if (estrides == NULL) {
    int64_t s = 1;
    for (int32_t i = ndim - 1; i >= 0; i--) {
      c_order[i] = s;
      int64_t n = t->shape[i] > 0 ? t->shape[i] : 1;
      if (__builtin_mul_overflow(s, n, &s)) s = INT64_MAX; /* only reached if empty elsewhere */
    }
    estrides = c_order;
  }

  /* Elements -> items and bytes. */
  if (epi > 1) {
    if (ndim == 0)
      return devbuf_error_set(err, DEVBUF_ENOTSUP,
                              "dlpack import: a 0-d packed %s tensor cannot be described in "
                              "whole-byte items",
                              out->format);
    int32_t last = ndim - 1;
    if (t->shape[last] % epi != 0)
      return devbuf_error_set(err, DEVBUF_ENOTSUP,
                              "dlpack import: packed sub-byte tensor: last dimension %lld is not "
                              "a multiple of %u elements per byte group",
                              (long long)t->shape[last], epi);
    if (t->shape[last] > 1 && estrides[last] != 1)
      return devbuf_error_set(err, DEVBUF_ENOTSUP,
                              "dlpack import: packed sub-byte tensor: last dimension has stride "
                              "%lld, only 1 can be split into bytes",
                              (long long)estrides[last]);
    for (int32_t i = 0; i < ndim; i++) {
      int64_t s = (i == last) ? (int64_t)epi : estrides[i];
      if (s % (int64_t)epi != 0)
        return devbuf_error_set(err, DEVBUF_ENOTSUP,
                                "dlpack import: packed sub-byte tensor: stride[%d] = %lld is not "
                                "a multiple of %u elements",
                                (int)i, (long long)s, epi);
      out->shape[i] = (i == last) ? t->shape[i] / (int64_t)epi : t->shape[i];
      if (__builtin_mul_overflow(s / (int64_t)epi, (int64_t)itemsize, &out->strides[i]))
        return devbuf_error_set(err, DEVBUF_EINVAL,
                                "dlpack import: stride[%d] = %lld overflows in bytes", (int)i,
                                (long long)s);
    }
  } else {
    for (int32_t i = 0; i < ndim; i++) {
      out->shape[i] = t->shape[i];
      if (__builtin_mul_overflow(estrides[i], (int64_t)itemsize, &out->strides[i]))
        return devbuf_error_set(err, DEVBUF_EINVAL,
                                "dlpack import: stride[%d] = %lld elements overflows 64 bits in "
                                "bytes (itemsize %llu)",
                                (int)i, (long long)estrides[i], (unsigned long long)itemsize);
    }
  }
  uint64_t nitems = epi > 1 ? nelem / epi : nelem; /* no 64-bit division in the common case */
  out->nitems = nitems;

  /* The byte range the view touches, relative to data + byte_offset. */
  int64_t lo = 0, hi = 0;
  if (nitems > 0) {
    for (int32_t i = 0; i < ndim; i++) {
      int64_t span;
      if (out->shape[i] <= 1) continue;
      if (__builtin_mul_overflow(out->shape[i] - 1, out->strides[i], &span) ||
          (span < 0 ? __builtin_add_overflow(lo, span, &lo) : __builtin_add_overflow(hi, span, &hi)))
        return devbuf_error_set(err, DEVBUF_EINVAL,
                                "dlpack import: extent overflows 64 bits at dimension %d (shape "
                                "%lld, stride %lld bytes)",
                                (int)i, (long long)out->shape[i], (long long)out->strides[i]);
    }
    if (__builtin_add_overflow(hi, (int64_t)itemsize, &hi))
      return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack import: extent overflows 64 bits");
  }
  out->extent_lo = lo;
  out->extent_hi = hi;

  if (t->byte_offset > (uint64_t)INT64_MAX)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack import: byte_offset %llu is too large",
                            (unsigned long long)t->byte_offset);
  out->data = t->data;
  out->byte_offset = t->byte_offset;
  if (nitems > 0) {
    if (t->data == NULL)
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "dlpack import: data is NULL but the tensor has %llu elements",
                              (unsigned long long)nelem);
    int64_t first; /* lowest byte offset from data */
    int64_t last;  /* one past the highest */
    if (__builtin_add_overflow((int64_t)t->byte_offset, lo, &first) ||
        __builtin_add_overflow((int64_t)t->byte_offset, hi, &last))
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "dlpack import: byte_offset %llu plus the extent overflows 64 bits",
                              (unsigned long long)t->byte_offset);
    if (dflags & DEVBUF_DLPACK_HANDLE) {
      if (first < 0)
        return devbuf_error_set(err, DEVBUF_EINVAL,
                                "dlpack import: negative strides reach %lld bytes before the "
                                "start of the %s memory handle",
                                (long long)-first, devbuf_dlpack_device_type_name(out->dl_device_type));
    } else {
      uintptr_t base = (uintptr_t)t->data;
      if ((first < 0 && (uint64_t)(-(first + 1)) + 1 > (uint64_t)base) ||
          (last > 0 && (uint64_t)last - 1 > (uint64_t)(UINTPTR_MAX - base)))
        return devbuf_error_set(err, DEVBUF_EINVAL,
                                "dlpack import: the view [%lld, %lld) bytes from data %p wraps "
                                "around the address space",
                                (long long)first, (long long)last, t->data);
    }
  } else if (!(dflags & DEVBUF_DLPACK_HANDLE) && t->data != NULL &&
             t->byte_offset > (uint64_t)(UINTPTR_MAX - (uintptr_t)t->data)) {
    /* Empty, but data + byte_offset is still computed (the first item's
     * address, ptr): it must not wrap either (UB in C). */
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "dlpack import: empty tensor, but data %p + byte_offset %llu wraps "
                            "around the address space",
                            t->data, (unsigned long long)t->byte_offset);
  }

  /* Contiguity, judged on items. */
  uint32_t f = dflags;
  {
    int c = 1, fo = 1;
    if (nitems > 1) {
      int64_t s = (int64_t)itemsize;
      for (int32_t i = ndim - 1; i >= 0; i--) {
        if (out->shape[i] == 1) continue;
        if (out->strides[i] != s) { c = 0; break; }
        s *= out->shape[i];
      }
      s = (int64_t)itemsize;
      for (int32_t i = 0; i < ndim; i++) {
        if (out->shape[i] == 1) continue;
        if (out->strides[i] != s) { fo = 0; break; }
        s *= out->shape[i];
      }
    }
    if (c) f |= DEVBUF_DLPACK_C_CONTIGUOUS;
    if (fo) f |= DEVBUF_DLPACK_F_CONTIGUOUS;
  }
  if (dl_flags & DLPACK_FLAG_BITMASK_READ_ONLY) f |= DEVBUF_DLPACK_READONLY;
  if (dl_flags & DLPACK_FLAG_BITMASK_IS_COPIED) f |= DEVBUF_DLPACK_IS_COPIED;
  out->flags = f;
  out->version.major = 0;
  out->version.minor = 0;
  return DEVBUF_OK;
}

int devbuf_dlpack_describe_versioned(const DLManagedTensorVersioned *m, devbuf_dlpack_desc *out,
                                     devbuf_error *err) {
  if (m == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack import: NULL DLManagedTensorVersioned");
  if (m->version.major != DEVBUF_DLPACK_MAJOR)
    return devbuf_error_set(err, DEVBUF_EABI,
                            "dlpack import: DLPack version %u.%u is not supported (devbuf reads "
                            "major %d, up to %d.%d); the tensor's deleter must still be called",
                            m->version.major, m->version.minor, DEVBUF_DLPACK_MAJOR,
                            DEVBUF_DLPACK_MAJOR, DEVBUF_DLPACK_MINOR);
  int rc = devbuf_dlpack_describe(&m->dl_tensor, m->flags, out, err);
  if (rc) return rc;
  out->flags |= DEVBUF_DLPACK_VERSIONED;
  out->version = m->version;
  return DEVBUF_OK;
}

int devbuf_dlpack_describe_legacy(const DLManagedTensor *m, devbuf_dlpack_desc *out,
                                  devbuf_error *err) {
  if (m == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack import: NULL DLManagedTensor");
  /* Before 1.0 DLPack could not say "read-only": assume it, as NumPy does,
   * so an immutable producer (JAX) is never written through. */
  return devbuf_dlpack_describe(&m->dl_tensor, DLPACK_FLAG_BITMASK_READ_ONLY, out, err);
}

int devbuf_dlpack_check_bounds(const devbuf_dlpack_desc *d, uint64_t alloc_size,
                               devbuf_error *err) {
  if (d == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack import: NULL description");
  if (d->nitems == 0) return DEVBUF_OK;
  int64_t first = (int64_t)d->byte_offset + d->extent_lo; /* checked by describe */
  int64_t last = (int64_t)d->byte_offset + d->extent_hi;
  if (first < 0)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "dlpack import: view starts %lld bytes before the allocation",
                            (long long)-first);
  if ((uint64_t)last > alloc_size)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "dlpack import: view reaches byte %lld past an allocation of %llu "
                            "bytes (byte_offset %llu)",
                            (long long)last, (unsigned long long)alloc_size,
                            (unsigned long long)d->byte_offset);
  return DEVBUF_OK;
}

void devbuf_dlpack_delete_versioned(DLManagedTensorVersioned *m) {
  if (m != NULL && m->deleter != NULL) m->deleter(m);
}

void devbuf_dlpack_delete_legacy(DLManagedTensor *m) {
  if (m != NULL && m->deleter != NULL) m->deleter(m);
}

/* ======================================================================
 * export
 * ====================================================================== */

/* Shared by the three export forms: device, dtype, shape and strides in
 * DLPack's units. */
static int export_prepare(const devbuf_dlpack_export_spec *s, DLTensor *t, int64_t *shape,
                          int64_t *strides, uint64_t *dl_flags, devbuf_error *err) {
  if (s == NULL || t == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: NULL spec or output");
  if (s->struct_size < sizeof *s)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: spec struct_size %u, expected %zu",
                            s->struct_size, sizeof *s);
  if (s->ndim < 0 || s->ndim > DEVBUF_DLPACK_MAX_NDIM)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: ndim %d out of range 0..%d",
                            (int)s->ndim, DEVBUF_DLPACK_MAX_NDIM);
  if (s->ndim > 0 && s->shape == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: shape is NULL with ndim %d",
                            (int)s->ndim);
  if (s->format == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: NULL format");
  int rc = devbuf_dlpack_device_from_identifier(s->identifier, s->ordinal, s->flags, &t->device,
                                                err);
  if (rc) {
    devbuf_error_prefix(err, "dlpack export");
    return rc;
  }
  /* The format's dtype, item size and elements per item: the last answer is
   * kept per thread, since a program exports the same few formats over and
   * over (the two conversions were a third of an export). Without '[' the
   * only input is the format's text, so a hit is exactly what a parse would
   * give; a custom dtype depends on the registry and is never kept. */
  static _Thread_local struct {
    char format[16];
    DLDataType dtype;
    uint64_t itemsize;
    uint32_t epi;
    int padded;
  } memo;
  uint64_t itemsize;
  uint32_t epi;
  int padded = 0;
  if (memo.format[0] != '\0' && strcmp(memo.format, s->format) == 0) {
    t->dtype = memo.dtype;
    itemsize = memo.itemsize;
    epi = memo.epi;
    padded = memo.padded;
  } else {
    rc = devbuf_dlpack_dtype_from_format(s->format, (size_t)-1, &t->dtype, &padded, err);
    if (rc) {
      devbuf_error_prefix(err, "dlpack export");
      return rc;
    }
    char fmtbuf[DEVBUF_DLPACK_FORMAT_MAX];
    rc = devbuf_dlpack_dtype_to_format(t->dtype, padded, fmtbuf, sizeof fmtbuf, &itemsize, &epi,
                                       err);
    if (rc) {
      devbuf_error_prefix(err, "dlpack export");
      return rc;
    }
    size_t n = strlen(s->format);
    if (n < sizeof memo.format && memchr(s->format, '[', n) == NULL) {
      memcpy(memo.format, s->format, n + 1);
      memo.dtype = t->dtype;
      memo.itemsize = itemsize;
      memo.epi = epi;
      memo.padded = padded;
    }
  }
  int32_t ndim = s->ndim;
  if (epi > 1 && ndim == 0)
    return devbuf_error_set(err, DEVBUF_ENOTSUP,
                            "dlpack export: a 0-d packed sub-byte tensor has no DLPack form");
  int empty = 0;
  for (int32_t i = 0; i < ndim; i++) {
    if (s->shape[i] < 0)
      return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: shape[%d] = %lld is negative",
                              (int)i, (long long)s->shape[i]);
    if (s->shape[i] == 0) empty = 1;
  }
  int64_t c = (int64_t)itemsize; /* C-order stride of dimension i, bytes */
  for (int32_t i = ndim - 1; i >= 0; i--) {
    int64_t sb = s->strides ? s->strides[i] : c;
    int64_t n = s->shape[i];
    if (sb % (int64_t)itemsize != 0)
      return devbuf_error_set(err, DEVBUF_ENOTSUP,
                              "dlpack export: stride[%d] = %lld bytes is not a multiple of the "
                              "itemsize %llu (DLPack counts strides in elements)",
                              (int)i, (long long)sb, (unsigned long long)itemsize);
    int64_t se = sb / (int64_t)itemsize;
    if (epi > 1) {
      if (i == ndim - 1) {
        if (n > 1 && se != 1)
          return devbuf_error_set(err, DEVBUF_ENOTSUP,
                                  "dlpack export: packed sub-byte items must be contiguous in "
                                  "the last dimension (stride %lld bytes)",
                                  (long long)sb);
        se = 1;
        if (__builtin_mul_overflow(n, (int64_t)epi, &n))
          return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: shape overflows");
      } else if (__builtin_mul_overflow(se, (int64_t)epi, &se)) {
        return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: stride overflows");
      }
    }
    shape[i] = n;
    strides[i] = se;
    if (!empty && !s->strides && __builtin_mul_overflow(c, s->shape[i] ? s->shape[i] : 1, &c))
      return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: size overflows 64 bits");
  }
  t->data = s->data;
  t->ndim = ndim;
  t->byte_offset = s->byte_offset;
  t->shape = ndim ? shape : NULL;
  t->strides = ndim ? strides : NULL;
  uint64_t fl = 0;
  if (s->flags & DEVBUF_DLPACK_READONLY) fl |= DLPACK_FLAG_BITMASK_READ_ONLY;
  if (s->flags & DEVBUF_DLPACK_IS_COPIED) fl |= DLPACK_FLAG_BITMASK_IS_COPIED;
  if (padded) fl |= DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
  *dl_flags = fl;
  return DEVBUF_OK;
}

int devbuf_dlpack_fill_tensor(const devbuf_dlpack_export_spec *spec, DLTensor *t,
                              int64_t *shape_out, int64_t *strides_out, devbuf_error *err) {
  uint64_t fl;
  if ((shape_out == NULL || strides_out == NULL) && spec && spec->ndim > 0)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: NULL shape/strides arrays");
  return export_prepare(spec, t, shape_out, strides_out, &fl, err);
}

/* What a legacy (unversioned) tensor cannot say. */
static int legacy_refusal(uint64_t fl, devbuf_error *err) {
  if (fl & DLPACK_FLAG_BITMASK_READ_ONLY)
    return devbuf_error_set(err, DEVBUF_ENOTSUP,
                            "dlpack export: a read-only buffer cannot be exported as a legacy "
                            "(unversioned) DLPack tensor, which has no read-only flag; ask with "
                            "max_version >= (1, 0)");
  if (fl & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)
    return devbuf_error_set(err, DEVBUF_ENOTSUP,
                            "dlpack export: padded sub-byte elements need the versioned form's "
                            "IS_SUBBYTE_TYPE_PADDED flag");
  return DEVBUF_OK;
}

/* Into caller storage: the owner allocates (and may reuse) the block, sets
 * manager_ctx and deleter itself. The same checks and refusals as the
 * allocating forms. */
static int export_into(const devbuf_dlpack_export_spec *spec, DLTensor *t, int64_t *dims,
                       uint64_t *fl, devbuf_error *err) {
  if (t == NULL || (dims == NULL && spec && spec->ndim > 0))
    return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: NULL output or dims");
  int32_t nd = spec ? spec->ndim : 0;
  return export_prepare(spec, t, dims, nd > 0 ? dims + nd : NULL, fl, err);
}

int devbuf_dlpack_export_versioned_into(const devbuf_dlpack_export_spec *spec,
                                        DLManagedTensorVersioned *m, int64_t *dims,
                                        devbuf_error *err) {
  uint64_t fl;
  int rc = export_into(spec, m ? &m->dl_tensor : NULL, dims, &fl, err);
  if (rc) return rc;
  m->version.major = DEVBUF_DLPACK_MAJOR;
  m->version.minor = DEVBUF_DLPACK_MINOR;
  m->flags = fl;
  return DEVBUF_OK;
}

int devbuf_dlpack_export_legacy_into(const devbuf_dlpack_export_spec *spec, DLManagedTensor *m,
                                     int64_t *dims, devbuf_error *err) {
  uint64_t fl;
  int rc = export_into(spec, m ? &m->dl_tensor : NULL, dims, &fl, err);
  if (rc) return rc;
  return legacy_refusal(fl, err);
}

/* One heap block: the managed tensor, the owner's release callback, then
 * shape and strides. */
typedef struct export_block_v {
  DLManagedTensorVersioned m;
  void (*release)(void *);
  void *release_ctx;
  int64_t dims[]; /* shape[ndim], strides[ndim] */
} export_block_v;

typedef struct export_block_l {
  DLManagedTensor m;
  void (*release)(void *);
  void *release_ctx;
  int64_t dims[];
} export_block_l;

static void export_deleter_v(DLManagedTensorVersioned *self) {
  export_block_v *b = (export_block_v *)self->manager_ctx;
  void (*release)(void *) = b->release;
  void *ctx = b->release_ctx;
  free(b);
  if (release) release(ctx);
}

static void export_deleter_l(DLManagedTensor *self) {
  export_block_l *b = (export_block_l *)self->manager_ctx;
  void (*release)(void *) = b->release;
  void *ctx = b->release_ctx;
  free(b);
  if (release) release(ctx);
}

int devbuf_dlpack_export_versioned(const devbuf_dlpack_export_spec *spec,
                                   DLManagedTensorVersioned **out, devbuf_error *err) {
  DLTensor t;
  int64_t shape[DEVBUF_DLPACK_MAX_NDIM], strides[DEVBUF_DLPACK_MAX_NDIM];
  uint64_t fl;
  if (out == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: NULL output");
  *out = NULL;
  int rc = export_prepare(spec, &t, shape, strides, &fl, err);
  if (rc) return rc;
  size_t nd = (size_t)t.ndim;
  export_block_v *b = malloc(sizeof *b + 2 * nd * sizeof(int64_t));
  if (b == NULL)
    return devbuf_error_set(err, DEVBUF_ENOMEM, "dlpack export: out of memory for a %zu-d tensor",
                            nd);
  memcpy(b->dims, shape, nd * sizeof(int64_t));
  memcpy(b->dims + nd, strides, nd * sizeof(int64_t));
  b->m.version.major = DEVBUF_DLPACK_MAJOR;
  b->m.version.minor = DEVBUF_DLPACK_MINOR;
  b->m.manager_ctx = b;
  b->m.deleter = export_deleter_v;
  b->m.flags = fl;
  b->m.dl_tensor = t;
  b->m.dl_tensor.shape = nd ? b->dims : NULL;
  b->m.dl_tensor.strides = nd ? b->dims + nd : NULL;
  b->release = spec->release;
  b->release_ctx = spec->release_ctx;
  *out = &b->m;
  return DEVBUF_OK;
}

int devbuf_dlpack_export_legacy(const devbuf_dlpack_export_spec *spec, DLManagedTensor **out,
                                devbuf_error *err) {
  DLTensor t;
  int64_t shape[DEVBUF_DLPACK_MAX_NDIM], strides[DEVBUF_DLPACK_MAX_NDIM];
  uint64_t fl;
  if (out == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "dlpack export: NULL output");
  *out = NULL;
  int rc = export_prepare(spec, &t, shape, strides, &fl, err);
  if (rc) return rc;
  rc = legacy_refusal(fl, err);
  if (rc) return rc;
  size_t nd = (size_t)t.ndim;
  export_block_l *b = malloc(sizeof *b + 2 * nd * sizeof(int64_t));
  if (b == NULL)
    return devbuf_error_set(err, DEVBUF_ENOMEM, "dlpack export: out of memory for a %zu-d tensor",
                            nd);
  memcpy(b->dims, shape, nd * sizeof(int64_t));
  memcpy(b->dims + nd, strides, nd * sizeof(int64_t));
  b->m.dl_tensor = t;
  b->m.dl_tensor.shape = nd ? b->dims : NULL;
  b->m.dl_tensor.strides = nd ? b->dims + nd : NULL;
  b->m.manager_ctx = b;
  b->m.deleter = export_deleter_l;
  b->release = spec->release;
  b->release_ctx = spec->release_ctx;
  *out = &b->m;
  return DEVBUF_OK;
}
