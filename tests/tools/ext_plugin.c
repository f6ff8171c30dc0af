/* Test plugins for devbuf-info's view of extension functions:
 * one with a valid and two malformed entries (EXT_KIND 0), one whose
 * struct_size ends before ext_functions, so that its entries cannot be seen
 * (EXT_KIND 1). A host-memory device on the ABI 1.1 defaults otherwise. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "devbuf/plugin.h"

static int e_count(void *s, int *count, devbuf_error *err) {
  (void)s, (void)err;
  *count = 1;
  return DEVBUF_OK;
}
static int e_props(void *s, int d, devbuf_device_props *p, devbuf_error *err) {
  (void)s, (void)d, (void)err;
  p->flags = DEVBUF_DEVICE_HOST_ACCESSIBLE;
  strcpy(p->name, "ext test");
  p->alloc_alignment = 64;
  return DEVBUF_OK;
}
static int e_alloc(void *s, int d, size_t size, size_t al, void *st, void **ptr, devbuf_error *err) {
  (void)s, (void)d, (void)st, (void)err;
  return posix_memalign(ptr, al < 64 ? 64 : al, size ? size : 1) ? DEVBUF_ENOMEM : DEVBUF_OK;
}
static int e_free(void *s, int d, void *ptr, void *st, devbuf_error *err) {
  (void)s, (void)d, (void)st, (void)err;
  free(ptr);
  return DEVBUF_OK;
}
static int answer(void) { return 42; }

static const devbuf_ext_function ext[] = {
    {"answer", "i()", "the answer", (void (*)(void))answer},
    {"bad_letter", "i(x)", "a letter that is no type", (void (*)(void))answer},
    {"star_e", "i(*e)", "an error record as an out-parameter", (void (*)(void))answer},
};

#if EXT_KIND == 0
static const char *const ids[] = {"test.ext_bad", NULL};
#define EXT_NAME "ext_bad"
#define EXT_SIZE sizeof(devbuf_plugin_table)
#else
static const char *const ids[] = {"test.ext_cut", NULL};
#define EXT_NAME "ext_cut"
#define EXT_SIZE offsetof(devbuf_plugin_table, ext_functions)
#endif

static const devbuf_plugin_table table = {
    .struct_size = (uint32_t)EXT_SIZE,
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = EXT_NAME,
    .version = "0",
    .identifiers = ids,
    .device_count = e_count,
    .device_props = e_props,
    .mem_alloc = e_alloc,
    .mem_free = e_free,
    .ext_functions = ext,
    .ext_function_count = 3,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &table; }
