/* Dtype-only plugins with one mistake each in their namespace "dtbug", for
 * the conformance suite's dtype checks. Payload "t" is the type
 * every variant defines; DT_BUG picks the mistake:
 *   1 reads the payload as a C string (past `len`)
 *   2 itemsize 3 with alignment 2
 *   3 a DLPack dtype of 16 bits for a 4-byte item
 *   4 accepts any payload
 *   5 crashes on a payload it does not know */
#include <signal.h>
#include <string.h>

#include "devbuf/plugin.h"

#ifndef DT_BUG
#error "define DT_BUG"
#endif

static int dtbug_interpret(void *ctx, const char *payload, size_t len, devbuf_dtype_desc *out,
                           devbuf_error *err) {
  (void)ctx, (void)err;
#if DT_BUG == 1
  (void)len;
  if (strcmp(payload, "t") != 0) return DEVBUF_ENOTFOUND;
#elif DT_BUG == 4
  (void)payload, (void)len;
#else
  if (len != 1 || payload[0] != 't') {
#if DT_BUG == 5
    raise(SIGSEGV);
#endif
    return DEVBUF_ENOTFOUND;
  }
#endif
  out->kind = DEVBUF_KIND_INT;
  out->itemsize = 4;
  out->alignment = 4;
  out->bits = 32;
  out->dlpack_code = DEVBUF_DLDT_INT;
  out->dlpack_bits = 32;
#if DT_BUG == 2
  out->itemsize = 3;
  out->alignment = 2;
  out->bits = 24;
  out->dlpack_code = -1;
#elif DT_BUG == 3
  out->dlpack_bits = 16;
#endif
  strcpy(out->canonical, "t");
  return DEVBUF_OK;
}

static const devbuf_dtype_namespace dtbug = {
    .struct_size = sizeof(devbuf_dtype_namespace),
    .id = "dtbug",
    .provider = "devbuf-tests",
    .description = "a namespace with one mistake (tests/broken/dtype_plugin.c)",
    .interpret = dtbug_interpret,
};
static const devbuf_dtype_namespace *const namespaces[] = {&dtbug, NULL};

static const devbuf_plugin_table table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "dtbug",
    .version = "0.0.1",
    .description = "dtype namespace only, with a mistake",
    .dtype_namespaces = namespaces,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &table; }
