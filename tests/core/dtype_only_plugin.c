/* A dtype-only plugin (ABI 1.1): no device identifier, no device slot, only
 * the namespace "mypkg", as a dtype owner ships it so that [mypkg$int4x2]
 * is understood in every process that loads plugins. */
#include <string.h>

#include "devbuf/plugin.h"

static int mypkg_interpret(void *ctx, const char *payload, size_t len, devbuf_dtype_desc *out,
                           devbuf_error *err) {
  (void)ctx, (void)err;
  if (len != 6 || memcmp(payload, "int4x2", 6) != 0) return DEVBUF_ENOTFOUND;
  out->kind = DEVBUF_KIND_INT;
  out->itemsize = 1; /* two signed 4-bit integers in one byte, lowest first */
  out->alignment = 1;
  out->bits = 4;
  out->elements_per_item = 2;
  out->dlpack_code = DEVBUF_DLDT_INT;
  out->dlpack_bits = 4;
  strcpy(out->canonical, "int4x2");
  return DEVBUF_OK;
}

static const devbuf_dtype_namespace mypkg = {
    .struct_size = sizeof(devbuf_dtype_namespace),
    .id = "mypkg",
    .provider = "mypkg",
    .description = "mypkg's packed types (a dtype-only plugin)",
    .interpret = mypkg_interpret,
};
static const devbuf_dtype_namespace *const namespaces[] = {&mypkg, NULL};

static const devbuf_plugin_table table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "mypkg_dtypes",
    .version = "0.1.0",
    .description = "dtype namespaces only",
    .dtype_namespaces = namespaces,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &table; }
