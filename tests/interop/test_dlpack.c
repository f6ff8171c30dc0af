/* Tests of libdevbuf's DLPack layer (devbuf/dlpack.h): device and dtype
 * mappings both ways, validation of malformed tensors (each a clear error),
 * and exported managed tensors (deleter runs the owner's release once). */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/dlpack.h"
#include "devbuf/format.h"
#include "devbuf/runtime.h"
#include "devbuf_test.h"

static DLTensor make_tensor(void *data, int32_t ndim, int64_t *shape, int64_t *strides,
                            uint8_t code, uint8_t bits) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.device.device_id = 0;
  t.ndim = ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  t.strides = strides;
  return t;
}

static devbuf_dlpack_desc new_desc(void) {
  devbuf_dlpack_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  return d;
}

/* Describe and expect failure with `code` and a message containing `needle`. */
#define EXPECT_REFUSED(tensor, flags, code, needle)                                    \
  do {                                                                                 \
    devbuf_error e_;                                                                   \
    devbuf_error_clear(&e_);                                                           \
    devbuf_dlpack_desc d_ = new_desc();                                                \
    int rc_ = devbuf_dlpack_describe((tensor), (flags), &d_, &e_);                     \
    CHECK(rc_ == (code), "rc %d (%s), expected %d: %s", rc_, devbuf_status_name(rc_),  \
          (code), e_.message);                                                         \
    CHECK_HAS(e_.message, needle);                                                     \
  } while (0)

static void test_device_mapping(void) {
  static const struct { int32_t dl; const char *id; uint32_t flags; } rows[] = {
    {kDLCPU, "cpu", DEVBUF_DLPACK_HOST_ACCESSIBLE},
    {kDLCUDA, "devbuf.cuda", 0},
    {kDLCUDAHost, "cpu", DEVBUF_DLPACK_HOST_ACCESSIBLE | DEVBUF_DLPACK_PINNED},
    {kDLOpenCL, "devbuf.opencl", DEVBUF_DLPACK_HANDLE},
    {kDLROCM, "devbuf.hip", 0},
    {kDLROCMHost, "cpu", DEVBUF_DLPACK_HOST_ACCESSIBLE | DEVBUF_DLPACK_PINNED},
    {kDLExtDev, "devbuf.sim", 0},
    {kDLCUDAManaged, "devbuf.cuda", DEVBUF_DLPACK_HOST_ACCESSIBLE | DEVBUF_DLPACK_MANAGED},
    {kDLOneAPI, "devbuf.level_zero", 0},
    {kDLTPUHost, "cpu", DEVBUF_DLPACK_HOST_ACCESSIBLE | DEVBUF_DLPACK_PINNED}, /* DLPack main */
  };
  devbuf_error err;
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    DLDevice dev = {(DLDeviceType)rows[i].dl, 3};
    const char *id = NULL;
    int32_t ord = -1;
    uint32_t fl = 99;
    CHECK_OK(devbuf_dlpack_device_to_identifier(dev, &id, &ord, &fl, &err), &err);
    CHECK(id && strcmp(id, rows[i].id) == 0, "%s -> %s", devbuf_dlpack_device_type_name(rows[i].dl), id);
    CHECK(fl == rows[i].flags, "%s flags 0x%x", rows[i].id, fl);
    CHECK(ord == (strcmp(rows[i].id, "cpu") == 0 ? 0 : 3), "ordinal %d", ord);
    /* Back again: pinned host memory comes back as plain kDLCPU. */
    DLDevice back;
    CHECK_OK(devbuf_dlpack_device_from_identifier(id, ord, fl, &back, &err), &err);
    int32_t expect = rows[i].dl == kDLCUDAHost || rows[i].dl == kDLROCMHost ||
                             rows[i].dl == kDLTPUHost
                         ? kDLCPU
                         : rows[i].dl;
    CHECK((int32_t)back.device_type == expect, "%s back to %d, expected %d", id, back.device_type, expect);
    CHECK(back.device_id == ord, "device_id %d", back.device_id);
  }
  DLDevice vk = {kDLVulkan, 0};
  int rc = devbuf_dlpack_device_to_identifier(vk, NULL, NULL, NULL, &err);
  CHECK(rc == DEVBUF_ENOTSUP, "rc %d", rc);
  CHECK_HAS(err.message, "kDLVulkan");
  /* DLPack main's devices without a devbuf plugin, refused by their names. */
  static const struct { int32_t dl; const char *name; } none[] = {
      {kDLTrn, "kDLTrn"}, {kDLTPU, "kDLTPU"}, {kDLAscend, "kDLAscend"}};
  CHECK(kDLTPU == 19 && kDLTPUHost == 20 && kDLAscend == 21, "DLPack main's device numbers");
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
    DLDevice d = {(DLDeviceType)none[i].dl, 0};
    rc = devbuf_dlpack_device_to_identifier(d, NULL, NULL, NULL, &err);
    CHECK(rc == DEVBUF_ENOTSUP, "%s rc %d", none[i].name, rc);
    CHECK_HAS(err.message, none[i].name);
  }
  DLDevice odd = {(DLDeviceType)99, 0};
  rc = devbuf_dlpack_device_to_identifier(odd, NULL, NULL, NULL, &err);
  CHECK(rc == DEVBUF_ENOTSUP, "rc %d", rc);
  CHECK_HAS(err.message, "99");
  DLDevice neg = {kDLCUDA, -1};
  rc = devbuf_dlpack_device_to_identifier(neg, NULL, NULL, NULL, &err);
  CHECK(rc == DEVBUF_EINVAL, "rc %d", rc);
  CHECK_HAS(err.message, "negative device_id");
  DLDevice out;
  rc = devbuf_dlpack_device_from_identifier("numpy.cuda", 0, 0, &out, &err);
  CHECK(rc == DEVBUF_ENOTSUP, "rc %d", rc);
  CHECK_HAS(err.message, "numpy.cuda");
}

typedef struct dtype_row {
  uint8_t code, bits;
  const char *format;
  uint64_t itemsize;
} dtype_row;

static const dtype_row PLAIN[] = {
  {kDLInt, 8, "b", 1},     {kDLInt, 16, "h", 2},    {kDLInt, 32, "i", 4},
  {kDLInt, 64, "q", 8},    {kDLUInt, 8, "B", 1},    {kDLUInt, 16, "H", 2},
  {kDLUInt, 32, "I", 4},   {kDLUInt, 64, "Q", 8},   {kDLFloat, 16, "e", 2},
  {kDLFloat, 32, "f", 4},  {kDLFloat, 64, "d", 8},  {kDLComplex, 32, "[devbuf$complex32]", 4},
  {kDLComplex, 64, "Zf", 8}, {kDLComplex, 128, "Zd", 16}, {kDLBool, 8, "?", 1},
  {kDLBfloat, 16, "[devbuf$bfloat16]", 2},
  {kDLFloat8_e3m4, 8, "[devbuf$float8_e3m4]", 1},
  {kDLFloat8_e4m3, 8, "[devbuf$float8_e4m3]", 1},
  {kDLFloat8_e4m3b11fnuz, 8, "[devbuf$float8_e4m3b11fnuz]", 1},
  {kDLFloat8_e4m3fn, 8, "[devbuf$float8_e4m3fn]", 1},
  {kDLFloat8_e4m3fnuz, 8, "[devbuf$float8_e4m3fnuz]", 1},
  {kDLFloat8_e5m2, 8, "[devbuf$float8_e5m2]", 1},
  {kDLFloat8_e5m2fnuz, 8, "[devbuf$float8_e5m2fnuz]", 1},
  {kDLFloat8_e8m0fnu, 8, "[devbuf$float8_e8m0fnu]", 1},
  {kDLBcomplex, 32, "[devbuf$bcomplex32]", 4}, /* DLPack main's code 18 */
};

static void test_dtype_round_trips(void) {
  devbuf_error err;
  char buf[DEVBUF_DLPACK_FORMAT_MAX];
  for (size_t i = 0; i < sizeof PLAIN / sizeof PLAIN[0]; i++) {
    for (unsigned lanes = 1; lanes <= 4; lanes += 3) {
      DLDataType dt = {PLAIN[i].code, PLAIN[i].bits, (uint16_t)lanes};
      uint64_t isz = 0;
      uint32_t epi = 0;
      CHECK_OK(devbuf_dlpack_dtype_to_format(dt, 0, buf, sizeof buf, &isz, &epi, &err), &err);
      char expect[80];
      if (lanes == 1) snprintf(expect, sizeof expect, "%s", PLAIN[i].format);
      else snprintf(expect, sizeof expect, "%u%s", lanes, PLAIN[i].format);
      CHECK(strcmp(buf, expect) == 0, "(%u,%u,%u) -> '%s', expected '%s'", dt.code, dt.bits,
            lanes, buf, expect);
      CHECK(isz == PLAIN[i].itemsize * lanes, "%s itemsize %llu", buf, (unsigned long long)isz);
      CHECK(epi == 1, "epi %u", epi);
      DLDataType back = {0, 0, 0};
      int padded = -1;
      CHECK_OK(devbuf_dlpack_dtype_from_format(buf, (size_t)-1, &back, &padded, &err), &err);
      CHECK(back.code == dt.code && back.bits == dt.bits && back.lanes == dt.lanes,
            "'%s' -> (%u,%u,%u)", buf, back.code, back.bits, back.lanes);
      CHECK(padded == 0, "padded %d", padded);
    }
  }
  /* Sub-byte: packed (default) and padded spellings. */
  static const struct { uint8_t code, bits; const char *packed, *padded; uint64_t isz; uint32_t epi; } sub[] = {
    {kDLFloat4_e2m1fn, 4, "[devbuf$float4_e2m1fn_x2]", "[devbuf$float4_e2m1fn]", 1, 2},
    {kDLFloat6_e2m3fn, 6, "[devbuf$float6_e2m3fn_x4]", "[devbuf$float6_e2m3fn]", 3, 4},
    {kDLFloat6_e3m2fn, 6, "[devbuf$float6_e3m2fn_x4]", "[devbuf$float6_e3m2fn]", 3, 4},
    {kDLInt, 4, "[devbuf$int4_x2]", "[devbuf$int4]", 1, 2},
    {kDLUInt, 4, "[devbuf$uint4_x2]", "[devbuf$uint4]", 1, 2},
    {kDLInt, 2, "[devbuf$int2_x4]", "[devbuf$int2]", 1, 4},
    {kDLUInt, 2, "[devbuf$uint2_x4]", "[devbuf$uint2]", 1, 4},
    {kDLInt, 1, "[devbuf$int1_x8]", "[devbuf$int1]", 1, 8},
    {kDLUInt, 1, "[devbuf$uint1_x8]", "[devbuf$uint1]", 1, 8},
  };
  for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++) {
    DLDataType dt = {sub[i].code, sub[i].bits, 1};
    uint64_t isz;
    uint32_t epi;
    CHECK_OK(devbuf_dlpack_dtype_to_format(dt, 0, buf, sizeof buf, &isz, &epi, &err), &err);
    CHECK(strcmp(buf, sub[i].packed) == 0, "packed '%s'", buf);
    CHECK(isz == sub[i].isz && epi == sub[i].epi, "%s: itemsize %llu epi %u", buf,
          (unsigned long long)isz, epi);
    DLDataType back;
    int padded = -1;
    CHECK_OK(devbuf_dlpack_dtype_from_format(buf, (size_t)-1, &back, &padded, &err), &err);
    CHECK(back.code == dt.code && back.bits == dt.bits && back.lanes == 1 && padded == 0,
          "'%s' back (%u,%u,%u) padded %d", buf, back.code, back.bits, back.lanes, padded);
    CHECK_OK(devbuf_dlpack_dtype_to_format(dt, 1, buf, sizeof buf, &isz, &epi, &err), &err);
    CHECK(strcmp(buf, sub[i].padded) == 0, "padded '%s'", buf);
    CHECK(isz == 1 && epi == 1, "%s: itemsize %llu epi %u", buf, (unsigned long long)isz, epi);
    CHECK_OK(devbuf_dlpack_dtype_from_format(buf, (size_t)-1, &back, &padded, &err), &err);
    CHECK(back.code == dt.code && padded == 1, "'%s' back code %u padded %d", buf, back.code,
          padded);
  }
}

static void test_dtype_refused(void) {
  static const struct { uint8_t code, bits; uint16_t lanes; int rc; const char *needle; } bad[] = {
    {kDLFloat, 128, 1, DEVBUF_ENOTFOUND, "not reinterpreting"},
    {kDLFloat, 8, 1, DEVBUF_ENOTFOUND, "kDLFloat"},
    {kDLOpaqueHandle, 64, 1, DEVBUF_ENOTFOUND, "kDLOpaqueHandle"},
    {kDLBool, 1, 1, DEVBUF_ENOTFOUND, "kDLBool"},
    {kDLBfloat, 32, 1, DEVBUF_ENOTFOUND, "bfloat16 must have bits 16"},
    {kDLFloat4_e2m1fn, 8, 1, DEVBUF_ENOTFOUND, "bits 4"},
    {kDLFloat6_e2m3fn, 8, 1, DEVBUF_ENOTFOUND, "bits 6"},
    {kDLInt, 12, 1, DEVBUF_ENOTFOUND, "bits 12"},
    {kDLComplex, 16, 1, DEVBUF_ENOTFOUND, "kDLComplex"},
    {kDLInt, 3, 1, DEVBUF_ENOTFOUND, "kDLInt"},
    {kDLBcomplex, 64, 1, DEVBUF_ENOTFOUND, "bcomplex32 must have bits 32"},
    {99, 8, 1, DEVBUF_ENOTFOUND, "code 99"},
    {kDLFloat, 0, 1, DEVBUF_EINVAL, "bits is 0"},
    {kDLFloat, 32, 0, DEVBUF_EINVAL, "lanes is 0"},
    {kDLFloat4_e2m1fn, 4, 2, DEVBUF_ENOTSUP, "lanes 2"},
  };
  devbuf_error err;
  char buf[DEVBUF_DLPACK_FORMAT_MAX];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    DLDataType dt = {bad[i].code, bad[i].bits, bad[i].lanes};
    devbuf_error_clear(&err);
    int rc = devbuf_dlpack_dtype_to_format(dt, 0, buf, sizeof buf, NULL, NULL, &err);
    CHECK(rc == bad[i].rc, "(%u,%u,%u): rc %d expected %d: %s", dt.code, dt.bits, dt.lanes, rc,
          bad[i].rc, err.message);
    CHECK_HAS(err.message, bad[i].needle);
  }
  /* Too small an output buffer is an error, not a truncation. */
  DLDataType bf = {kDLBfloat, 16, 1};
  int rc = devbuf_dlpack_dtype_to_format(bf, 0, buf, 5, NULL, NULL, &err);
  CHECK(rc == DEVBUF_EINVAL, "rc %d", rc);
  CHECK_HAS(err.message, "too small");
}

static void test_dtype_from_format(void) {
  devbuf_error err;
  DLDataType dt;
  CHECK_OK(devbuf_dlpack_dtype_from_format("l", 1, &dt, NULL, &err), &err);
  CHECK(dt.code == kDLInt && dt.bits == 8 * sizeof(long), "l -> bits %u", dt.bits);
  CHECK_OK(devbuf_dlpack_dtype_from_format("=l", 2, &dt, NULL, &err), &err);
  CHECK(dt.code == kDLInt && dt.bits == 32, "=l -> bits %u", dt.bits);
  CHECK_OK(devbuf_dlpack_dtype_from_format("N", 1, &dt, NULL, &err), &err);
  CHECK(dt.code == kDLUInt && dt.bits == 8 * sizeof(size_t), "N -> bits %u", dt.bits);
  CHECK_OK(devbuf_dlpack_dtype_from_format("@3d", 3, &dt, NULL, &err), &err);
  CHECK(dt.code == kDLFloat && dt.bits == 64 && dt.lanes == 3, "@3d");
  /* Only the length given is read. */
  CHECK_OK(devbuf_dlpack_dtype_from_format("fXYZ", 1, &dt, NULL, &err), &err);
  CHECK(dt.code == kDLFloat && dt.bits == 32, "f of fXYZ");
  const uint16_t one = 1;
  int little = *(const unsigned char *)&one == 1;
  const char *native = little ? "<f" : ">f", *foreign = little ? ">f" : "<f";
  CHECK_OK(devbuf_dlpack_dtype_from_format(native, 2, &dt, NULL, &err), &err);
  int rc = devbuf_dlpack_dtype_from_format(foreign, 2, &dt, NULL, &err);
  CHECK(rc == DEVBUF_ENOTSUP, "%s rc %d", foreign, rc);
  CHECK_HAS(err.message, "native byte order");
  rc = devbuf_dlpack_dtype_from_format("!i", 2, &dt, NULL, &err);
  CHECK(little ? rc == DEVBUF_ENOTSUP : rc == 0, "!i rc %d", rc);
  static const char *const refused[] = {"c", "s", "5s", "P", "g", "x", "O", "w", "0f", "70000f", ""};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    devbuf_error_clear(&err);
    rc = devbuf_dlpack_dtype_from_format(refused[i], (size_t)-1, &dt, NULL, &err);
    CHECK(rc != DEVBUF_OK, "'%s' accepted", refused[i]);
    CHECK(err.message[0] != '\0', "'%s' refused without a message", refused[i]);
    CHECK_HAS(err.message, "dlpack");
  }
  /* A repeated packed sub-byte item has no DLPack dtype, on the fast path
   * and through the engine alike (fuzz_dlpack found the engine accepting
   * what could not be mapped back). One packed item is fine. */
  static const char *const packed_counted[] = {"2[devbuf$float4_e2m1fn_x2]",
                                               "7[devbuf$float4_e2m1fn_x4]"};
  for (size_t i = 0; i < sizeof packed_counted / sizeof packed_counted[0]; i++) {
    rc = devbuf_dlpack_dtype_from_format(packed_counted[i], (size_t)-1, &dt, NULL, &err);
    CHECK(rc == DEVBUF_ENOTSUP, "'%s' rc %d", packed_counted[i], rc);
    CHECK_HAS(err.message, "with a count");
  }
  CHECK_OK(devbuf_dlpack_dtype_from_format("[devbuf$float4_e2m1fn_x4]", (size_t)-1, &dt, NULL, &err), &err);
  CHECK(dt.code == 17 && dt.bits == 4 && dt.lanes == 1, "x4 -> code %u bits %u lanes %u",
        dt.code, dt.bits, dt.lanes);
}

/* The names above must be the ones the format engine's builtin devbuf
 * namespace registers, with the same DLPack codes. */
static void test_names_match_format_engine(void) {
  devbuf_error err;
  char buf[DEVBUF_DLPACK_FORMAT_MAX], eng[DEVBUF_DLPACK_FORMAT_MAX];
  static const uint8_t codes[][2] = {{kDLBfloat, 16}, {7, 8}, {8, 8}, {9, 8}, {10, 8},
                                      {11, 8}, {12, 8}, {13, 8}, {14, 8}, {15, 6}, {16, 6},
                                      {17, 4}, {kDLComplex, 32}, {kDLInt, 4}, {kDLUInt, 4},
                                      {kDLInt, 2}, {kDLUInt, 2}};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    for (int padded = 0; padded <= 1; padded++) {
      uint8_t bits = codes[i][1];
      DLDataType dt = {codes[i][0], bits, 1};
      uint64_t isz;
      uint32_t epi;
      CHECK_OK(devbuf_dlpack_dtype_to_format(dt, padded, buf, sizeof buf, &isz, &epi, &err), &err);
      /* "[devbuf$NAME]" -> interpret NAME in the devbuf namespace. */
      size_t n = strlen(buf);
      CHECK(n > 9 && strncmp(buf, "[devbuf$", 8) == 0 && buf[n - 1] == ']', "'%s'", buf);
      if (n <= 9) continue;
      devbuf_dtype_desc d;
      memset(&d, 0, sizeof d);
      d.struct_size = sizeof d;
      int rc = devbuf_dtype_interpret("devbuf", buf + 8, n - 9, &d, &err);
      CHECK(rc == DEVBUF_OK, "format engine does not know '%s': %s", buf, err.message);
      if (rc) continue;
      CHECK(d.dlpack_code == codes[i][0], "'%s': engine says DLPack code %d", buf, d.dlpack_code);
      CHECK(d.dlpack_bits == bits, "'%s': engine says bits %u", buf, d.dlpack_bits);
      CHECK(d.itemsize == isz, "'%s': engine itemsize %u, dlpack layer %llu", buf, d.itemsize,
            (unsigned long long)isz);
      CHECK(d.elements_per_item == epi, "'%s': engine elements_per_item %u, dlpack layer %u", buf,
            d.elements_per_item, epi);
      if (!padded) {
        size_t needed = 0;
        rc = devbuf_format_from_dlpack(dt.code, dt.bits, 1, eng, sizeof eng, &needed, &err);
        CHECK(rc == DEVBUF_OK && strcmp(eng, buf) == 0,
              "devbuf_format_from_dlpack(%u,%u) = '%s' (rc %d), dlpack layer '%s'", dt.code,
              dt.bits, rc == DEVBUF_OK ? eng : err.message, rc, buf);
      }
    }
  }
  /* The engine fallback: alternatives where the first one is unknown. */
  DLDataType dt;
  int rc = devbuf_dlpack_dtype_from_format("[nosuch$x;devbuf$bfloat16]", (size_t)-1, &dt, NULL, &err);
  CHECK(rc == DEVBUF_OK && dt.code == kDLBfloat && dt.bits == 16,
        "alternatives: rc %d (%s) code %u", rc, err.message, dt.code);
  rc = devbuf_dlpack_dtype_from_format("T{f:x:}", (size_t)-1, &dt, NULL, &err);
  CHECK(rc != DEVBUF_OK, "a struct was accepted");
  rc = devbuf_dlpack_dtype_from_format("[nosuch$x]", (size_t)-1, &dt, NULL, &err);
  CHECK(rc != DEVBUF_OK, "unknown custom dtype accepted");
  CHECK_HAS(err.message, "nosuch");
}

static void test_describe_valid(void) {
  devbuf_error err;
  float data[24];
  int64_t shape[3] = {2, 3, 4};
  DLTensor t = make_tensor(data, 3, shape, NULL, kDLFloat, 32);
  devbuf_dlpack_desc d = new_desc();
  CHECK_OK(devbuf_dlpack_describe(&t, 0, &d, &err), &err);
  CHECK(strcmp(d.identifier, "cpu") == 0, "id %s", d.identifier);
  CHECK(strcmp(d.format, "f") == 0, "format %s", d.format);
  CHECK(d.itemsize == 4 && d.nitems == 24 && d.ndim == 3, "itemsize/nitems/ndim");
  CHECK(d.strides[0] == 48 && d.strides[1] == 16 && d.strides[2] == 4, "C strides %lld %lld %lld",
        (long long)d.strides[0], (long long)d.strides[1], (long long)d.strides[2]);
  CHECK(d.extent_lo == 0 && d.extent_hi == 96, "extent [%lld,%lld)", (long long)d.extent_lo,
        (long long)d.extent_hi);
  CHECK((d.flags & DEVBUF_DLPACK_C_CONTIGUOUS) && !(d.flags & DEVBUF_DLPACK_F_CONTIGUOUS) &&
            (d.flags & DEVBUF_DLPACK_HOST_ACCESSIBLE) && !(d.flags & DEVBUF_DLPACK_READONLY),
        "flags 0x%x", d.flags);
  CHECK_OK(devbuf_dlpack_check_bounds(&d, sizeof data, &err), &err);
  CHECK(devbuf_dlpack_check_bounds(&d, sizeof data - 1, &err) == DEVBUF_EINVAL, "bounds");
  CHECK_HAS(err.message, "past an allocation of 95 bytes");

  /* Fortran order, explicit strides. */
  int64_t fstr[3] = {1, 2, 6};
  t.strides = fstr;
  CHECK_OK(devbuf_dlpack_describe(&t, DLPACK_FLAG_BITMASK_READ_ONLY, &d, &err), &err);
  CHECK((d.flags & DEVBUF_DLPACK_F_CONTIGUOUS) && !(d.flags & DEVBUF_DLPACK_C_CONTIGUOUS) &&
            (d.flags & DEVBUF_DLPACK_READONLY),
        "F flags 0x%x", d.flags);

  /* Negative strides: a reversed view whose data points at the last element. */
  int64_t shape1[1] = {24};
  int64_t rev[1] = {-1};
  DLTensor r = make_tensor(data, 1, shape1, rev, kDLFloat, 32);
  r.byte_offset = 23 * 4;
  CHECK_OK(devbuf_dlpack_describe(&r, 0, &d, &err), &err);
  CHECK(d.extent_lo == -92 && d.extent_hi == 4, "reverse extent [%lld,%lld)",
        (long long)d.extent_lo, (long long)d.extent_hi);
  CHECK(!(d.flags & DEVBUF_DLPACK_C_CONTIGUOUS), "reversed is not contiguous");
  CHECK_OK(devbuf_dlpack_check_bounds(&d, sizeof data, &err), &err);
  r.byte_offset = 22 * 4;
  CHECK_OK(devbuf_dlpack_describe(&r, 0, &d, &err), &err);
  CHECK(devbuf_dlpack_check_bounds(&d, sizeof data, &err) == DEVBUF_EINVAL, "below start");
  CHECK_HAS(err.message, "before the allocation");

  /* 0-d, and empty tensors (NULL data allowed). */
  DLTensor s = make_tensor(data, 0, NULL, NULL, kDLInt, 64);
  CHECK_OK(devbuf_dlpack_describe(&s, 0, &d, &err), &err);
  CHECK(d.nitems == 1 && d.extent_hi == 8 && strcmp(d.format, "q") == 0, "0-d");
  int64_t eshape[2] = {0, 5};
  DLTensor e = make_tensor(NULL, 2, eshape, NULL, kDLUInt, 8);
  CHECK_OK(devbuf_dlpack_describe(&e, 0, &d, &err), &err);
  CHECK(d.nitems == 0 && d.extent_hi == 0, "empty");

  /* Lanes and a custom dtype. */
  int64_t shape2[1] = {6};
  DLTensor l = make_tensor(data, 1, shape2, NULL, kDLFloat, 32);
  l.dtype.lanes = 4;
  CHECK_OK(devbuf_dlpack_describe(&l, 0, &d, &err), &err);
  CHECK(strcmp(d.format, "4f") == 0 && d.itemsize == 16 && d.strides[0] == 16, "lanes");
  DLTensor b = make_tensor(data, 1, shape2, NULL, kDLBfloat, 16);
  CHECK_OK(devbuf_dlpack_describe(&b, 0, &d, &err), &err);
  CHECK(strcmp(d.format, "[devbuf$bfloat16]") == 0 && d.itemsize == 2, "bf16 %s", d.format);

  /* Packed float4: 8 elements in a row = 4 bytes, items of 2 elements. */
  int64_t fshape[2] = {3, 8};
  DLTensor f4 = make_tensor(data, 2, fshape, NULL, kDLFloat4_e2m1fn, 4);
  CHECK_OK(devbuf_dlpack_describe(&f4, 0, &d, &err), &err);
  CHECK(d.shape[0] == 3 && d.shape[1] == 4 && d.strides[0] == 4 && d.strides[1] == 1 &&
            d.elements_per_item == 2 && d.extent_hi == 12,
        "float4 shape (%lld,%lld) strides (%lld,%lld)", (long long)d.shape[0],
        (long long)d.shape[1], (long long)d.strides[0], (long long)d.strides[1]);
  fshape[1] = 7;
  EXPECT_REFUSED(&f4, 0, DEVBUF_ENOTSUP, "not a multiple of 2");
  fshape[1] = 8;
  CHECK_OK(devbuf_dlpack_describe(&f4, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, &d, &err), &err);
  CHECK(strcmp(d.format, "[devbuf$float4_e2m1fn]") == 0 && d.shape[1] == 8 && d.strides[0] == 8,
        "padded float4 %s", d.format);

  /* Devices: sim, managed, opencl handle with byte_offset. */
  DLTensor g = make_tensor((void *)(uintptr_t)0x1000, 1, shape2, NULL, kDLFloat, 32);
  g.device.device_type = kDLExtDev;
  g.device.device_id = 1;
  CHECK_OK(devbuf_dlpack_describe(&g, 0, &d, &err), &err);
  CHECK(strcmp(d.identifier, "devbuf.sim") == 0 && d.ordinal == 1 &&
            !(d.flags & DEVBUF_DLPACK_HOST_ACCESSIBLE),
        "sim");
}

static void test_describe_versioned(void) {
  devbuf_error err;
  float data[4];
  int64_t shape[1] = {4};
  DLManagedTensorVersioned m;
  memset(&m, 0, sizeof m);
  m.version.major = 1;
  m.version.minor = 7; /* a newer minor is fine */
  m.flags = DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED;
  m.dl_tensor = make_tensor(data, 1, shape, NULL, kDLFloat, 32);
  devbuf_dlpack_desc d = new_desc();
  CHECK_OK(devbuf_dlpack_describe_versioned(&m, &d, &err), &err);
  CHECK((d.flags & DEVBUF_DLPACK_READONLY) && (d.flags & DEVBUF_DLPACK_IS_COPIED) &&
            (d.flags & DEVBUF_DLPACK_VERSIONED) && d.version.minor == 7,
        "flags 0x%x", d.flags);
  m.version.major = 2;
  int rc = devbuf_dlpack_describe_versioned(&m, &d, &err);
  CHECK(rc == DEVBUF_EABI, "major 2 rc %d", rc);
  CHECK_HAS(err.message, "version 2.7");
  CHECK_HAS(err.message, "deleter");
  m.version.major = 0;
  rc = devbuf_dlpack_describe_versioned(&m, &d, &err);
  CHECK(rc == DEVBUF_EABI, "major 0 rc %d", rc);
  m.version.major = 1;
  m.flags = 1u << 9;
  rc = devbuf_dlpack_describe_versioned(&m, &d, &err);
  CHECK(rc == DEVBUF_ENOTSUP, "unknown flags rc %d", rc);
  CHECK_HAS(err.message, "unknown flag bits 0x200");
  rc = devbuf_dlpack_describe_versioned(NULL, &d, &err);
  CHECK(rc == DEVBUF_EINVAL, "NULL");
  DLManagedTensor lm;
  memset(&lm, 0, sizeof lm);
  lm.dl_tensor = make_tensor(data, 1, shape, NULL, kDLUInt, 16);
  CHECK_OK(devbuf_dlpack_describe_legacy(&lm, &d, &err), &err);
  CHECK(!(d.flags & DEVBUF_DLPACK_VERSIONED) && (d.flags & DEVBUF_DLPACK_READONLY) &&
            strcmp(d.format, "H") == 0,
        "legacy: read-only by default (no flag to say otherwise before DLPack 1.0)");
}

static void test_describe_malformed(void) {
  float data[16];
  int64_t shape[2] = {4, 4};
  int64_t strides[2] = {4, 1};
  DLTensor t = make_tensor(data, 2, shape, strides, kDLFloat, 32);

  t.ndim = DEVBUF_DLPACK_MAX_NDIM + 1;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "ndim 65 out of range");
  t.ndim = INT32_MAX;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "out of range");
  t.ndim = -1;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "ndim -1");
  t.ndim = 2;

  t.shape = NULL;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "shape is NULL with ndim 2");
  t.shape = shape;

  shape[1] = -3;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "shape[1] = -3 is negative");
  shape[1] = 4;

  /* Element count overflow. */
  int64_t big[3] = {INT64_MAX, INT64_MAX, 4};
  DLTensor o = make_tensor(data, 3, big, NULL, kDLFloat, 32);
  EXPECT_REFUSED(&o, 0, DEVBUF_EINVAL, "overflows");
  /* Strides overflowing in bytes. */
  strides[0] = INT64_MAX / 2;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "overflows 64 bits in bytes");
  /* Extent overflow: shape * stride. */
  strides[0] = INT64_MAX / 8;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "extent overflows");
  strides[0] = INT64_MIN / 8;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "overflows");
  /* Negative strides that wrap below address 0. */
  strides[0] = -((int64_t)1 << 40);
  t.data = (void *)(uintptr_t)4096;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "wraps around the address space");
  /* ... or above the top. */
  strides[0] = (int64_t)1 << 40;
  t.data = (void *)(uintptr_t)(UINTPTR_MAX - 4096);
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "wraps around");
  strides[0] = 4;
  t.data = data;
  /* A huge byte offset. */
  t.byte_offset = UINT64_MAX - 3;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "byte_offset");
  t.byte_offset = (uint64_t)INT64_MAX - 8;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "overflows");
  t.byte_offset = 0;

  /* NULL data with elements. */
  t.data = NULL;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "data is NULL but the tensor has 16 elements");
  t.data = data;

  /* Unsupported device and dtype. */
  t.device.device_type = kDLMetal;
  EXPECT_REFUSED(&t, 0, DEVBUF_ENOTSUP, "kDLMetal");
  t.device.device_type = kDLCPU;
  t.dtype.code = kDLOpaqueHandle;
  EXPECT_REFUSED(&t, 0, DEVBUF_ENOTFOUND, "kDLOpaqueHandle");
  t.dtype.code = 200;
  EXPECT_REFUSED(&t, 0, DEVBUF_ENOTFOUND, "code 200");
  t.dtype.code = kDLFloat;
  t.dtype.lanes = 0;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "lanes is 0");
  t.dtype.lanes = 1;

  /* OpenCL handles cannot be reached below by negative strides. */
  t.device.device_type = kDLOpenCL;
  strides[0] = -4;
  t.byte_offset = 4;
  EXPECT_REFUSED(&t, 0, DEVBUF_EINVAL, "before the start of the kDLOpenCL memory handle");
  t.byte_offset = 48;
  devbuf_error err;
  devbuf_dlpack_desc d = new_desc();
  CHECK_OK(devbuf_dlpack_describe(&t, 0, &d, &err), &err);
  CHECK((d.flags & DEVBUF_DLPACK_HANDLE) && strcmp(d.identifier, "devbuf.opencl") == 0, "opencl");

  /* Packed sub-byte with a non-unit inner stride. */
  int64_t pshape[1] = {8};
  int64_t pstr[1] = {2};
  DLTensor p = make_tensor(data, 1, pshape, pstr, kDLFloat4_e2m1fn, 4);
  EXPECT_REFUSED(&p, 0, DEVBUF_ENOTSUP, "only 1 can be split");
  DLTensor p0 = make_tensor(data, 0, NULL, NULL, kDLFloat4_e2m1fn, 4);
  EXPECT_REFUSED(&p0, 0, DEVBUF_ENOTSUP, "0-d packed");

  /* A description that is too small. */
  devbuf_dlpack_desc small = new_desc();
  small.struct_size = 8;
  t = make_tensor(data, 2, shape, NULL, kDLFloat, 32);
  int rc = devbuf_dlpack_describe(&t, 0, &small, &err);
  CHECK(rc == DEVBUF_EINVAL, "small desc rc %d", rc);
  CHECK_HAS(err.message, "struct_size");
}

static int releases;
static void count_release(void *ctx) {
  releases++;
  *(int *)ctx += 1;
}

static void test_export(void) {
  devbuf_error err;
  double data[12];
  for (int i = 0; i < 12; i++) data[i] = i;
  int64_t shape[2] = {3, 2};
  int64_t strides[2] = {32, 8}; /* every other column of a 3x4 */
  int owner = 0;
  devbuf_dlpack_export_spec s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  s.flags = DEVBUF_DLPACK_READONLY;
  s.identifier = "cpu";
  s.ndim = 2;
  s.data = data;
  s.byte_offset = 8;
  s.format = "d";
  s.shape = shape;
  s.strides = strides;
  s.release = count_release;
  s.release_ctx = &owner;

  DLManagedTensorVersioned *m = NULL;
  releases = 0;
  CHECK_OK(devbuf_dlpack_export_versioned(&s, &m, &err), &err);
  if (m == NULL) return;
  CHECK(m->version.major == 1 && m->version.minor == DEVBUF_DLPACK_MINOR, "version");
  CHECK(m->flags == DLPACK_FLAG_BITMASK_READ_ONLY, "flags %llu", (unsigned long long)m->flags);
  CHECK(m->dl_tensor.device.device_type == kDLCPU && m->dl_tensor.dtype.code == kDLFloat &&
            m->dl_tensor.dtype.bits == 64 && m->dl_tensor.dtype.lanes == 1,
        "device/dtype");
  CHECK(m->dl_tensor.strides[0] == 4 && m->dl_tensor.strides[1] == 1, "element strides %lld %lld",
        (long long)m->dl_tensor.strides[0], (long long)m->dl_tensor.strides[1]);
  CHECK(m->dl_tensor.byte_offset == 8 && m->dl_tensor.data == data, "data/offset");
  /* The caller's arrays may change: the tensor kept its own copy. */
  shape[0] = 99;
  CHECK(m->dl_tensor.shape[0] == 3, "shape copied");
  shape[0] = 3;
  devbuf_dlpack_desc d = new_desc();
  CHECK_OK(devbuf_dlpack_describe_versioned(m, &d, &err), &err);
  CHECK(d.strides[0] == 32 && d.strides[1] == 8 && (d.flags & DEVBUF_DLPACK_READONLY) &&
            d.extent_hi == 2 * 32 + 8 + 8,
        "round trip strides %lld %lld extent %lld", (long long)d.strides[0],
        (long long)d.strides[1], (long long)d.extent_hi);
  CHECK(releases == 0, "released early");
  devbuf_dlpack_delete_versioned(m);
  CHECK(releases == 1 && owner == 1, "release ran %d times", releases);

  /* Legacy: refused while read-only, fine once writable. */
  DLManagedTensor *lm = NULL;
  int rc = devbuf_dlpack_export_legacy(&s, &lm, &err);
  CHECK(rc == DEVBUF_ENOTSUP && lm == NULL, "read-only legacy rc %d", rc);
  CHECK_HAS(err.message, "read-only");
  CHECK(releases == 1, "release ran on a failed export");
  s.flags = DEVBUF_DLPACK_IS_COPIED; /* legacy has no flags: dropped */
  CHECK_OK(devbuf_dlpack_export_legacy(&s, &lm, &err), &err);
  if (lm) {
    CHECK(lm->dl_tensor.shape[0] == 3 && lm->dl_tensor.strides[0] == 4, "legacy dims");
    devbuf_dlpack_delete_legacy(lm);
  }
  CHECK(releases == 2, "legacy release %d", releases);

  /* NULL strides = C order; 0-d. */
  s.strides = NULL;
  CHECK_OK(devbuf_dlpack_export_versioned(&s, &m, &err), &err);
  if (m) {
    CHECK(m->dl_tensor.strides[0] == 2 && m->dl_tensor.strides[1] == 1, "C strides");
    CHECK(m->flags == DLPACK_FLAG_BITMASK_IS_COPIED, "copied flag");
    devbuf_dlpack_delete_versioned(m);
  }
  s.ndim = 0;
  CHECK_OK(devbuf_dlpack_export_versioned(&s, &m, &err), &err);
  if (m) {
    CHECK(m->dl_tensor.ndim == 0 && m->dl_tensor.shape == NULL, "0-d");
    devbuf_dlpack_delete_versioned(m);
  }
  s.ndim = 2;
  s.release = NULL;

  /* Refusals. */
  int64_t odd[2] = {32, 4};
  s.strides = odd;
  rc = devbuf_dlpack_export_versioned(&s, &m, &err);
  CHECK(rc == DEVBUF_ENOTSUP && m == NULL, "odd stride rc %d", rc);
  CHECK_HAS(err.message, "not a multiple of the itemsize 8");
  s.strides = strides;
  s.format = "T{d:a:}";
  rc = devbuf_dlpack_export_versioned(&s, &m, &err);
  CHECK(rc != DEVBUF_OK && m == NULL, "struct format exported");
  s.format = "d";
  s.identifier = "numpy.cuda";
  rc = devbuf_dlpack_export_versioned(&s, &m, &err);
  CHECK(rc == DEVBUF_ENOTSUP, "foreign identifier rc %d", rc);
  CHECK_HAS(err.message, "numpy.cuda");
  s.identifier = "devbuf.cuda";
  s.flags = DEVBUF_DLPACK_MANAGED;
  CHECK_OK(devbuf_dlpack_export_versioned(&s, &m, &err), &err);
  if (m) {
    CHECK(m->dl_tensor.device.device_type == kDLCUDAManaged, "managed");
    devbuf_dlpack_delete_versioned(m);
  }
  s.identifier = "cpu";
  s.ndim = 65;
  rc = devbuf_dlpack_export_versioned(&s, &m, &err);
  CHECK(rc == DEVBUF_EINVAL, "ndim 65 rc %d", rc);
  s.ndim = 2;

  /* Packed float4 items: the last dimension doubles in elements. */
  uint8_t bytes[6];
  int64_t ishape[2] = {2, 3};
  s.data = bytes;
  s.byte_offset = 0;
  s.format = "[devbuf$float4_e2m1fn_x2]";
  s.shape = ishape;
  s.strides = NULL;
  s.flags = 0;
  CHECK_OK(devbuf_dlpack_export_versioned(&s, &m, &err), &err);
  if (m) {
    CHECK(m->dl_tensor.dtype.code == kDLFloat4_e2m1fn && m->dl_tensor.dtype.bits == 4 &&
              m->dl_tensor.shape[1] == 6 && m->dl_tensor.strides[0] == 6 &&
              m->dl_tensor.strides[1] == 1 && m->flags == 0,
          "float4 export shape %lld strides %lld,%lld", (long long)m->dl_tensor.shape[1],
          (long long)m->dl_tensor.strides[0], (long long)m->dl_tensor.strides[1]);
    CHECK_OK(devbuf_dlpack_describe_versioned(m, &d, &err), &err);
    CHECK(d.shape[1] == 3 && d.strides[0] == 3 && strcmp(d.format, s.format) == 0, "float4 back");
    devbuf_dlpack_delete_versioned(m);
  }
  s.format = "[devbuf$float4_e2m1fn]";
  CHECK_OK(devbuf_dlpack_export_versioned(&s, &m, &err), &err);
  if (m) {
    CHECK(m->flags == DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED && m->dl_tensor.shape[1] == 3,
          "padded float4 export");
    devbuf_dlpack_delete_versioned(m);
  }

  /* fill_tensor: no allocation, caller's arrays. */
  int64_t sh[2], st[2];
  DLTensor t;
  s.format = "f";
  s.data = data;
  CHECK_OK(devbuf_dlpack_fill_tensor(&s, &t, sh, st, &err), &err);
  CHECK(t.shape == sh && t.strides == st && st[0] == 3 && st[1] == 1 && t.dtype.bits == 32,
        "fill_tensor");

  /* _into: the caller's block, same refusals, manager_ctx/deleter untouched. */
  {
    DLManagedTensorVersioned mv;
    DLManagedTensor ml;
    int64_t dims[4];
    memset(&mv, 0, sizeof mv);
    memset(&ml, 0, sizeof ml);
    s.flags = DEVBUF_DLPACK_READONLY;
    CHECK_OK(devbuf_dlpack_export_versioned_into(&s, &mv, dims, &err), &err);
    CHECK(mv.version.major == DEVBUF_DLPACK_MAJOR && mv.version.minor == DEVBUF_DLPACK_MINOR &&
              mv.flags == DLPACK_FLAG_BITMASK_READ_ONLY && mv.dl_tensor.shape == dims &&
              mv.dl_tensor.strides == dims + 2 && dims[0] == 2 && dims[1] == 3 &&
              dims[2] == 3 && dims[3] == 1 && mv.dl_tensor.data == data &&
              mv.manager_ctx == NULL && mv.deleter == NULL,
          "versioned_into");
    rc = devbuf_dlpack_export_legacy_into(&s, &ml, dims, &err);
    CHECK(rc == DEVBUF_ENOTSUP, "legacy_into of a read-only buffer rc %d", rc);
    s.flags = 0;
    CHECK_OK(devbuf_dlpack_export_legacy_into(&s, &ml, dims, &err), &err);
    CHECK(ml.dl_tensor.shape == dims && ml.dl_tensor.strides == dims + 2 && dims[2] == 3 &&
              ml.manager_ctx == NULL && ml.deleter == NULL,
          "legacy_into");
    s.format = "[devbuf$float4_e2m1fn]";
    rc = devbuf_dlpack_export_legacy_into(&s, &ml, dims, &err);
    CHECK(rc == DEVBUF_ENOTSUP, "legacy_into of padded sub-byte items rc %d", rc);
    s.format = "f";
    rc = devbuf_dlpack_export_versioned_into(&s, &mv, NULL, &err);
    CHECK(rc == DEVBUF_EINVAL, "versioned_into NULL dims rc %d", rc);
  }

  /* Deleters of a foreign major are still callable. */
  devbuf_dlpack_delete_versioned(NULL);
  devbuf_dlpack_delete_legacy(NULL);
}

int main(void) {
  RUN(test_device_mapping);
  RUN(test_dtype_round_trips);
  RUN(test_dtype_refused);
  RUN(test_dtype_from_format);
  RUN(test_names_match_format_engine);
  RUN(test_describe_valid);
  RUN(test_describe_versioned);
  RUN(test_describe_malformed);
  RUN(test_export);
  return devbuf_test_finish();
}
