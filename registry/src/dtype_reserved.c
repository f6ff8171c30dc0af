/* The reserved dtype ids struct$ and buffer$, and the complete namespace
 * listing (reserved first, then the registry's).
 *
 * A struct$ or buffer$ payload is itself a format string, so interpreting
 * one calls the format engine: this file sits above both format_parse.c
 * (which handles the two ids inline while parsing) and dtype_registry.c
 * (which holds every other namespace and never calls the format engine), so
 * that neither of those calls up into the other. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "format_internal.h"
#include "registry.h"

static int reserved_interpret(void *ctx, const char *payload, size_t len, devbuf_dtype_desc *out,
                              devbuf_error *err) {
  bool is_struct = ctx != NULL;
  uint64_t sz = 0, al = 1;
  size_t off = 0;
  int r = devbuf__format_itemsize(payload, len,
                                 is_struct ? DEVBUF_FORMAT_STRUCT
                                           : DEVBUF_FORMAT_DEFAULT | DEVBUF_FORMAT_NO_CUSTOM,
                                 &sz, &al, &off, err);
  if (r != DEVBUF_OK) return r;
  if (sz > UINT32_MAX)
    return devbuf_error_set(err, DEVBUF_EFORMAT, "%s: payload larger than 4 GiB",
                            is_struct ? "struct" : "buffer");
  out->kind = DEVBUF_KIND_STRUCT;
  out->itemsize = (uint32_t)sz;
  out->alignment = (uint32_t)al;
  out->bits = sz * 8 > UINT32_MAX ? 0 : (uint32_t)(sz * 8);
  out->elements_per_item = 1;
  out->dlpack_code = -1;
  out->dlpack_bits = 0;
  snprintf(out->canonical, sizeof out->canonical, "%s$%.*s", is_struct ? "struct" : "buffer",
           (int)(len > 56 ? 56 : len), payload);
  if (!is_struct && len < sizeof out->plain_format) {
    memcpy(out->plain_format, payload, len);
    out->plain_format[len] = '\0';
  }
  return DEVBUF_OK;
}

static const devbuf_dtype_namespace STRUCT_NS = {
    sizeof(devbuf_dtype_namespace), 0, "struct", "python",
    "reserved: the payload is a CPython struct-module format", reserved_interpret,
    (void *)&STRUCT_NS};
static const devbuf_dtype_namespace BUFFER_NS = {
    sizeof(devbuf_dtype_namespace), 0, "buffer", "python",
    "reserved: the payload is a plain PEP 3118 format (no [...] inside)", reserved_interpret,
    NULL};

static bool is_reserved(const char *id, size_t len, const devbuf_dtype_namespace **ns) {
  if (len == 6 && memcmp(id, "struct", 6) == 0) *ns = &STRUCT_NS;
  else if (len == 6 && memcmp(id, "buffer", 6) == 0) *ns = &BUFFER_NS;
  else return false;
  return true;
}

int devbuf__dtype_lookup(const char *id, size_t len, const devbuf_dtype_namespace **out,
                         const char **source, devbuf_error *err) {
  if (id == NULL || out == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dtype_lookup: NULL argument");
  if (len == (size_t)-1) len = strlen(id);
  if (is_reserved(id, len, out)) {
    if (source) *source = "reserved";
    return DEVBUF_OK;
  }
  return devbuf__dtype_ns_lookup(id, len, out, source, err);
}

int devbuf__dtype_interpret(const char *id, const char *payload, size_t len,
                            devbuf_dtype_desc *out, devbuf_error *err) {
  const devbuf_dtype_namespace *ns;
  if (id == NULL || out == NULL || (payload == NULL && len != 0))
    return devbuf_error_set(err, DEVBUF_EINVAL, "dtype_interpret: NULL argument");
  if (!is_reserved(id, strlen(id), &ns)) return devbuf__dtype_ns_interpret(id, payload, len, out, err);
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  return reserved_interpret(ns->ctx, payload ? payload : "", len, out, err);
}

size_t devbuf__dtype_namespace_count(void) { return 2 + devbuf__dtype_ns_count(); }

size_t devbuf__dtype_namespace_list(devbuf_dtype_namespace_info *out, size_t capacity) {
  if (out == NULL) capacity = 0;
  for (size_t i = 0; i < 2 && i < capacity; i++)
    devbuf__dtype_info_fill(&out[i], i == 0 ? &STRUCT_NS : &BUFFER_NS, "reserved");
  return devbuf__dtype_ns_list(out, capacity, 2);
}

int devbuf__dtype_namespace_get(size_t index, const devbuf_dtype_namespace **ns,
                                const char **source, devbuf_error *err) {
  if (ns == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "dtype_namespace_get: NULL ns");
  if (index < 2) {
    *ns = index == 0 ? &STRUCT_NS : &BUFFER_NS;
    if (source) *source = "reserved";
    return DEVBUF_OK;
  }
  return devbuf__dtype_ns_get(index - 2, ns, source, err);
}
