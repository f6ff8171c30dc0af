/* A first devbuf plugin: one device of plain host memory, in under 100 lines.
 *
 * Identifier "example.first", in the author's own namespace as the draft asks.
 * Only device_count, device_props, mem_alloc and mem_free are written: from
 * ABI 1.1 a host-accessible device may leave the copy, stream and event slots
 * NULL, and the runtime runs them synchronously (memcpy; every stream and
 * event complete at once). device_info_export/import are NULL too: the
 * runtime writes and checks the common devbuf_device_info layout. It passes
 * the whole conformance suite (docs/conformance.md).
 *
 * Build:  cc -std=c11 -fPIC -shared -fvisibility=hidden -I<devbuf>/include \
 *            -o devbuf_plugin_first.so first.c
 * Try:    DEVBUF_PLUGINS=$PWD/devbuf_plugin_first.so devbuf_conformance example.first */
#define _POSIX_C_SOURCE 200809L /* posix_memalign under -std=c11 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <devbuf/plugin.h>

#define FIRST_ALIGN 64 /* what mem_alloc guarantees without a request */

/* The host never passes an ordinal it did not get from device_count, but a
 * plugin checks what it is given: say what was wrong and where. */
static int check_device(int device, const char *op, devbuf_error *err) {
  if (device == 0) return DEVBUF_OK;
  return devbuf_error_set(err, DEVBUF_ENODEV, "%s: example.first has one device (0), not %d", op,
                          device);
}

static int first_device_count(void *state, int *count, devbuf_error *err) {
  (void)state, (void)err;
  *count = 1; /* host memory is always there: no driver to find */
  return DEVBUF_OK;
}

static int first_device_props(void *state, int device, devbuf_device_props *props,
                              devbuf_error *err) {
  (void)state;
  if (check_device(device, "device_props", err)) return DEVBUF_ENODEV;
  /* HOST_ACCESSIBLE: consumers may read the memory directly, and the
   * runtime's synchronous defaults stand in for the NULL slots. */
  props->flags = DEVBUF_DEVICE_HOST_ACCESSIBLE;
  snprintf(props->name, sizeof props->name, "host memory (first plugin)");
  snprintf(props->vendor, sizeof props->vendor, "example");
  props->alloc_alignment = FIRST_ALIGN;
  props->dlpack_device_type = DEVBUF_DL_CPU;
  props->dlpack_device_id = 0;
  return DEVBUF_OK;
}

static int first_mem_alloc(void *state, int device, size_t size, size_t alignment, void *stream,
                           void **ptr, devbuf_error *err) {
  (void)state, (void)stream; /* synchronous: every stream is the same */
  if (check_device(device, "mem_alloc", err)) return DEVBUF_ENODEV;
  if (alignment < FIRST_ALIGN) alignment = FIRST_ALIGN; /* the host checked: a power of two */
  /* size 0 still gets a unique pointer: 1 byte backs it. */
  int e = posix_memalign(ptr, alignment, size ? size : 1);
  if (e != 0) {
    *ptr = NULL;
    return devbuf_error_set(err, e == ENOMEM ? DEVBUF_ENOMEM : DEVBUF_EINVAL,
                            "mem_alloc: posix_memalign(%zu bytes, alignment %zu): %s", size,
                            alignment, strerror(e));
  }
  return DEVBUF_OK;
}

static int first_mem_free(void *state, int device, void *ptr, void *stream, devbuf_error *err) {
  (void)state, (void)stream;
  if (check_device(device, "mem_free", err)) return DEVBUF_ENODEV;
  free(ptr); /* the runtime has already refused double and foreign frees */
  return DEVBUF_OK;
}

static const char *const first_identifiers[] = {"example.first", NULL};

static const devbuf_plugin_table first_table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR, /* >= 1: the NULL slots below get the defaults */
    .name = "first",
    .version = "0.1.0",
    .description = "host memory in under 100 lines (docs/plugin-authors.md)",
    .identifiers = first_identifiers,
    .device_count = first_device_count,
    .device_props = first_device_props,
    .mem_alloc = first_mem_alloc,
    .mem_free = first_mem_free,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &first_table; }
