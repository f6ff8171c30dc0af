/* libFuzzer target: DLPack managed-tensor import (devbuf/dlpack.h).
 *
 * The input bytes become a DLManagedTensorVersioned (or a legacy
 * DLManagedTensor): version, flags, device, dtype, ndim, shape, strides,
 * data pointer and byte offset, each possibly NULL or absurd. Import must
 * answer with a description or an error, never crash, hang or read outside
 * the shape/strides arrays it was given. A tensor that imports is exported
 * again from its description and re-imported: the two descriptions must
 * agree (abort() otherwise, which the fuzzer reports).
 *
 * Layout of the input (short inputs are padded with zero bytes):
 *   0      mode: bit0 legacy, bit1 NULL shape, bit2 NULL strides,
 *                bit3 take ndim as a full int32, bit4 NULL data
 *   1..4   version major (u32, small values favoured), 5..8 minor
 *   9..16  flags (u64)
 *   17..20 ndim (int8 in bit3-off mode, int32 otherwise)
 *   21     dtype code, 22 bits, 23..24 lanes
 *   25..28 device type (int32), 29..32 device id
 *   33..40 data pointer (never dereferenced), 41..48 byte_offset
 *   49..   shape[ndim] then strides[ndim], int64 little-endian
 * The tail is also tried as a format string for dtype_from_format. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/dlpack.h"

typedef struct reader {
  const uint8_t *p;
  size_t n, at;
} reader;

static uint64_t take(reader *r, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; i++) {
    uint64_t b = r->at < r->n ? r->p[r->at] : 0;
    r->at++;
    v |= b << (8 * i);
  }
  return v;
}

#define FUZZ_ASSERT(c) \
  do {                 \
    if (!(c)) abort(); \
  } while (0)

static void check_desc(const devbuf_dlpack_desc *d) {
  FUZZ_ASSERT(d->ndim >= 0 && d->ndim <= DEVBUF_DLPACK_MAX_NDIM);
  FUZZ_ASSERT(d->itemsize > 0);
  FUZZ_ASSERT(d->elements_per_item >= 1);
  FUZZ_ASSERT(d->identifier != NULL);
  FUZZ_ASSERT(memchr(d->format, '\0', sizeof d->format) != NULL);
  FUZZ_ASSERT(d->extent_lo <= 0 && d->extent_hi >= 0);
  uint64_t n = 1;
  for (int32_t i = 0; i < d->ndim; i++) {
    FUZZ_ASSERT(d->shape[i] >= 0);
    n *= (uint64_t)d->shape[i]; /* no overflow: describe checked it */
  }
  FUZZ_ASSERT(n == d->nitems);
  if (d->nitems == 0) FUZZ_ASSERT(d->extent_lo == 0 && d->extent_hi == 0);
  else FUZZ_ASSERT(d->extent_hi - d->extent_lo >= (int64_t)d->itemsize);
}

/* Export the description again and re-import it. */
static void round_trip(const devbuf_dlpack_desc *d) {
  devbuf_dlpack_export_spec s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  s.flags = d->flags & (DEVBUF_DLPACK_READONLY | DEVBUF_DLPACK_IS_COPIED | DEVBUF_DLPACK_MANAGED);
  s.identifier = d->identifier;
  s.ordinal = d->ordinal;
  s.ndim = d->ndim;
  s.data = d->data;
  s.byte_offset = d->byte_offset;
  s.format = d->format;
  s.shape = d->shape;
  s.strides = d->strides;
  DLManagedTensorVersioned *m = NULL;
  devbuf_error err;
  int rc = devbuf_dlpack_export_versioned(&s, &m, &err);
  if (rc != DEVBUF_OK) {
    FUZZ_ASSERT(m == NULL && err.message[0] != '\0');
    return;
  }
  devbuf_dlpack_desc e;
  memset(&e, 0, sizeof e);
  e.struct_size = sizeof e;
  rc = devbuf_dlpack_describe_versioned(m, &e, &err);
  FUZZ_ASSERT(rc == DEVBUF_OK);
  FUZZ_ASSERT(strcmp(e.format, d->format) == 0 && e.ndim == d->ndim && e.nitems == d->nitems);
  FUZZ_ASSERT(e.identifier == d->identifier || strcmp(e.identifier, d->identifier) == 0);
  for (int32_t i = 0; i < d->ndim; i++) {
    FUZZ_ASSERT(e.shape[i] == d->shape[i]);
    /* A stride of a length-1 dimension carries no information, but we keep it. */
    FUZZ_ASSERT(e.strides[i] == d->strides[i]);
  }
  FUZZ_ASSERT((e.flags & DEVBUF_DLPACK_READONLY) == (d->flags & DEVBUF_DLPACK_READONLY));
  devbuf_dlpack_delete_versioned(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size, 0};
  uint8_t mode = (uint8_t)take(&r, 1);
  uint32_t major = (uint32_t)take(&r, 4);
  uint32_t minor = (uint32_t)take(&r, 4);
  if (major > 3 && (major & 0x100) == 0) major &= 3; /* favour 0..3 */
  uint64_t flags = take(&r, 8);
  if ((flags >> 8) != 0 && (flags & 0x80) == 0) flags &= 7; /* favour known bits */
  int32_t ndim = (mode & 8) ? (int32_t)(uint32_t)take(&r, 4) : (int32_t)(int8_t)take(&r, 4);
  DLDataType dt;
  dt.code = (uint8_t)take(&r, 1);
  dt.bits = (uint8_t)take(&r, 1);
  dt.lanes = (uint16_t)take(&r, 2);
  DLDevice dev;
  int32_t dtype_raw = (int32_t)(uint32_t)take(&r, 4);
  memcpy(&dev.device_type, &dtype_raw, sizeof dtype_raw);
  dev.device_id = (int32_t)(uint32_t)take(&r, 4);
  uintptr_t ptr = (uintptr_t)take(&r, 8);
  uint64_t byte_offset = take(&r, 8);

  /* Arrays hold exactly the entries a well-formed tensor of this ndim would;
   * beyond the limit the importer must refuse before reading them. */
  size_t nd = (ndim > 0 && ndim <= DEVBUF_DLPACK_MAX_NDIM) ? (size_t)ndim : 0;
  int64_t *shape = nd ? malloc(nd * sizeof *shape) : NULL;
  int64_t *strides = nd ? malloc(nd * sizeof *strides) : NULL;
  if (nd && (!shape || !strides)) {
    free(shape);
    free(strides);
    return 0;
  }
  for (size_t i = 0; i < nd; i++) {
    uint64_t v = take(&r, 8);
    /* Mostly small shapes, sometimes raw 64-bit values. */
    shape[i] = (v >> 63) ? (int64_t)v : (int64_t)(v & 0xff) - ((v & 0x100) ? 2 : 0);
  }
  for (size_t i = 0; i < nd; i++) {
    uint64_t v = take(&r, 8);
    strides[i] = (v >> 62) == 1 ? (int64_t)v : (int64_t)(int16_t)(v & 0xffff);
  }

  DLTensor t;
  t.data = (mode & 16) ? NULL : (void *)ptr;
  t.device = dev;
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = (mode & 2) ? NULL : shape;
  t.strides = (mode & 4) ? NULL : strides;
  t.byte_offset = byte_offset;

  devbuf_dlpack_desc d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  devbuf_error err;
  int rc;
  if (mode & 1) {
    DLManagedTensor m;
    memset(&m, 0, sizeof m);
    m.dl_tensor = t;
    rc = devbuf_dlpack_describe_legacy(&m, &d, &err);
  } else {
    DLManagedTensorVersioned m;
    memset(&m, 0, sizeof m);
    m.version.major = major;
    m.version.minor = minor;
    m.flags = flags;
    m.dl_tensor = t;
    rc = devbuf_dlpack_describe_versioned(&m, &d, &err);
  }
  if (rc == DEVBUF_OK) {
    check_desc(&d);
    (void)devbuf_dlpack_check_bounds(&d, byte_offset ^ (uint64_t)ptr, &err);
    round_trip(&d);
  } else {
    FUZZ_ASSERT(err.code == rc && err.message[0] != '\0');
    FUZZ_ASSERT(memchr(err.message, '\0', sizeof err.message) != NULL);
  }

  /* The rest of the input as a format string. */
  if (r.at < size) {
    DLDataType back;
    int padded;
    size_t len = size - r.at;
    if (memchr(data + r.at, '\0', len) == NULL &&
        devbuf_dlpack_dtype_from_format((const char *)data + r.at, len, &back, &padded, &err) ==
            DEVBUF_OK) {
      char buf[DEVBUF_DLPACK_FORMAT_MAX];
      uint64_t isz;
      uint32_t epi;
      /* Whatever a format maps to must map back to a format. */
      FUZZ_ASSERT(devbuf_dlpack_dtype_to_format(back, padded, buf, sizeof buf, &isz, &epi, &err) ==
                  DEVBUF_OK);
    }
  }
  free(shape);
  free(strides);
  return 0;
}
