/* A test plugin whose shutdown leaves a trace: it appends "shutdown NAME" to
 * the file named by $DEVBUF_TEST_EXIT_LOG (write(2), no stdio: it may run
 * late in exit). Built twice (EXIT_NAME a, b) to see the order. Otherwise a
 * host-memory plugin on the ABI 1.1 synchronous defaults. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devbuf/plugin.h"

#define STR2(x) #x
#define STR(x) STR2(x)

static void trace(const char *what) {
  const char *log = getenv("DEVBUF_TEST_EXIT_LOG");
  if (log == NULL) return;
  int fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  char line[128];
  size_t n = (size_t)snprintf(line, sizeof line, "%s %s\n", what, STR(EXIT_NAME));
  if (write(fd, line, n) < 0) { /* nothing to do about it at exit */ }
  close(fd);
}

static int x_init(void **state, devbuf_error *err) {
  (void)err;
  *state = malloc(1); /* freed by shutdown: LeakSanitizer sees a missing one */
  trace("init");
  return DEVBUF_OK;
}
static void x_shutdown(void *state) {
  free(state);
  trace("shutdown");
}
static int x_count(void *s, int *count, devbuf_error *err) {
  (void)s, (void)err;
  *count = 1;
  return DEVBUF_OK;
}
static int x_props(void *s, int d, devbuf_device_props *p, devbuf_error *err) {
  (void)s, (void)d, (void)err;
  p->flags = DEVBUF_DEVICE_HOST_ACCESSIBLE;
  strcpy(p->name, "exit trace");
  p->alloc_alignment = 64;
  p->dlpack_device_type = DEVBUF_DL_CPU;
  return DEVBUF_OK;
}
static int x_alloc(void *s, int d, size_t size, size_t al, void *st, void **ptr, devbuf_error *err) {
  (void)s, (void)d, (void)st, (void)err;
  return posix_memalign(ptr, al < 64 ? 64 : al, size ? size : 1) ? DEVBUF_ENOMEM : DEVBUF_OK;
}
static int x_free(void *s, int d, void *ptr, void *st, devbuf_error *err) {
  (void)s, (void)d, (void)st, (void)err;
  free(ptr);
  return DEVBUF_OK;
}

static const char *const ids[] = {"test.exit_" STR(EXIT_NAME), NULL};
static const devbuf_plugin_table table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "exit_" STR(EXIT_NAME),
    .version = "0",
    .identifiers = ids,
    .init = x_init,
    .shutdown = x_shutdown,
    .device_count = x_count,
    .device_props = x_props,
    .mem_alloc = x_alloc,
    .mem_free = x_free,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &table; }
