/* SPDX-License-Identifier: BSD-3-Clause */
/* devbuf/dtype.h: the contract between the format-string engine and a dtype
 * namespace interpreter (the `id` of a `[id$payload]` custom dtype).
 *
 * A namespace is a static, plugin-owned descriptor; the registry calls its
 * `interpret` function with a payload and gets back a devbuf_dtype_desc.
 * Self-contained: includes only devbuf/error.h. Part of the plugin ABI, so it
 * only ever grows at the end of each struct (`struct_size` first). */
#ifndef DEVBUF_DTYPE_H
#define DEVBUF_DTYPE_H

#include <stdint.h>
#include <stddef.h>

#include "devbuf/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What kind of value one element is. Append-only. */
enum devbuf_dtype_kind {
  DEVBUF_KIND_OPAQUE = 0,    /* bytes with a meaning only its namespace knows */
  DEVBUF_KIND_BOOL = 1,
  DEVBUF_KIND_INT = 2,
  DEVBUF_KIND_UINT = 3,
  DEVBUF_KIND_FLOAT = 4,
  DEVBUF_KIND_COMPLEX = 5,
  DEVBUF_KIND_DATETIME = 6,
  DEVBUF_KIND_TIMEDELTA = 7,
  DEVBUF_KIND_STRING = 8,
  DEVBUF_KIND_STRUCT = 9,
  DEVBUF_KIND_POINTER = 10
};

/* DLPack DLDataTypeCode values (DLPack 1.1+) for devbuf_dtype_desc.dlpack_code. */
#define DEVBUF_DLDT_INT 0
#define DEVBUF_DLDT_UINT 1
#define DEVBUF_DLDT_FLOAT 2
#define DEVBUF_DLDT_OPAQUE_HANDLE 3
#define DEVBUF_DLDT_BFLOAT 4
#define DEVBUF_DLDT_COMPLEX 5
#define DEVBUF_DLDT_BOOL 6
#define DEVBUF_DLDT_FLOAT8_E3M4 7
#define DEVBUF_DLDT_FLOAT8_E4M3 8
#define DEVBUF_DLDT_FLOAT8_E4M3B11FNUZ 9
#define DEVBUF_DLDT_FLOAT8_E4M3FN 10
#define DEVBUF_DLDT_FLOAT8_E4M3FNUZ 11
#define DEVBUF_DLDT_FLOAT8_E5M2 12
#define DEVBUF_DLDT_FLOAT8_E5M2FNUZ 13
#define DEVBUF_DLDT_FLOAT8_E8M0FNU 14
#define DEVBUF_DLDT_FLOAT6_E2M3FN 15
#define DEVBUF_DLDT_FLOAT6_E3M2FN 16
#define DEVBUF_DLDT_FLOAT4_E2M1FN 17
#define DEVBUF_DLDT_BCOMPLEX 18

/* The interpretation of one custom dtype item.
 *
 * `itemsize` is the number of bytes one format item occupies in the buffer
 * and is what the format engine uses for offsets. Sub-byte types (int4,
 * float4_e2m1fn, float6_*) set `bits` below 8 and `elements_per_item` to the
 * number of elements packed into one item (e.g. int4: itemsize 1, bits 4,
 * elements_per_item 2, lowest element in the least significant bits).
 *
 * `dlpack_code`/`dlpack_bits` name the DLPack type of ONE element. DLPack
 * stores sub-byte types packed, so the item's bytes have DLPack's layout
 * exactly when bits * elements_per_item == 8 * itemsize (int4_x2: yes; int4
 * stored one per byte as ml_dtypes does: no, it needs repacking).
 *
 * `plain_format` is non-empty only when a plain format means exactly the
 * same thing (devbuf$float16 -> "e"); storage-compatible is not enough. */
typedef struct devbuf_dtype_desc {
  uint32_t struct_size;        /* set by the caller to sizeof(devbuf_dtype_desc) */
  uint32_t kind;               /* enum devbuf_dtype_kind */
  uint32_t itemsize;           /* bytes per format item, >= 1 */
  uint32_t alignment;          /* required alignment in bytes, power of two */
  uint32_t bits;               /* bits per element */
  uint32_t elements_per_item;  /* 1 unless sub-byte packing */
  int32_t dlpack_code;         /* DLDataTypeCode, or -1 when DLPack has none */
  uint32_t dlpack_bits;        /* DLDataType.bits when dlpack_code >= 0 */
  char canonical[64];          /* canonical spelling, e.g. "bfloat16" */
  char plain_format[32];       /* equivalent plain struct format or "" */
  uint64_t reserved[4];        /* zero */
} devbuf_dtype_desc;

/* Interpret `payload` (not NUL-terminated; `len` bytes, printable ASCII
 * without ']' ';' '$'). Returns DEVBUF_OK and fills *out, or
 * DEVBUF_ENOTFOUND when this namespace does not understand the payload (the
 * engine then tries the next alternative), or another code on error.
 * `ctx` is the namespace's own `ctx`. Must be thread-safe. */
typedef int (*devbuf_dtype_interpret_fn)(void *ctx, const char *payload, size_t len,
                                         devbuf_dtype_desc *out, devbuf_error *err);

typedef struct devbuf_dtype_namespace {
  uint32_t struct_size;          /* sizeof(devbuf_dtype_namespace) of the provider */
  uint32_t reserved0;
  const char *id;                /* e.g. "devbuf"; printable ASCII without ']' ';' '$' */
  const char *provider;          /* package that defines it, e.g. "devbuf", "ml_dtypes" */
  const char *description;       /* one line */
  devbuf_dtype_interpret_fn interpret;
  void *ctx;                     /* passed back to interpret */
} devbuf_dtype_namespace;

#ifdef __cplusplus
}
#endif

#endif /* DEVBUF_DTYPE_H */
