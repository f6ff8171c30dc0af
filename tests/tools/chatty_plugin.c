/* Two valid test plugins from one source.
 *
 * chatty (default): writes to stdout from init and device_count, through
 * stdio and straight to fd 1, as some drivers do. devbuf-info must keep that
 * out of its own output (the --json document stays parseable).
 *
 * thread_state (-DDEVBUF_TOOLS_THREAD_STATE): ties state to the thread that
 * probes it, as real vendor libraries do. Its device_count does what LLVM's
 * RemoveFileOnSignal does inside PoCL when the alternate signal stack it finds
 * is smaller than it wants: it installs a malloc'd one. It wants more than any
 * CPU gives (LLVM's threshold sits near the default on some CPUs and above it
 * on others, which made the failure vendor-dependent), so it swaps the stack
 * on every host. It also keeps an allocation reachable only from thread-local
 * storage, as libamdhip64's constructors do. A host that runs the probe on a
 * thread that then exits either loses that block (LeakSanitizer) or has
 * AddressSanitizer unmap the malloc'd stack as its own and abort. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devbuf/plugin.h"

#ifdef DEVBUF_TOOLS_THREAD_STATE
#define TOOLS_NAME "thread_state"
#define TOOLS_WANTED_ALTSTACK (1u << 20) /* more than any CPU's default */

static _Thread_local void *thread_block; /* the vendor's per-thread state */
static void *altstack_block;              /* LLVM keeps its stack in a static too */

static int init_fn(void **state, devbuf_error *err) {
  (void)err;
  *state = NULL;
  return DEVBUF_OK;
}
static int count_fn(void *s, int *count, devbuf_error *err) {
  (void)s;
  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0)
    return devbuf_error_set(err, DEVBUF_EBACKEND, "sigaltstack: cannot read the current stack");
  if ((cur.ss_flags & SS_DISABLE) || cur.ss_size < TOOLS_WANTED_ALTSTACK) {
    stack_t mine = {.ss_sp = malloc(TOOLS_WANTED_ALTSTACK), .ss_size = TOOLS_WANTED_ALTSTACK};
    if (mine.ss_sp == NULL || sigaltstack(&mine, NULL) != 0)
      return devbuf_error_set(err, DEVBUF_EBACKEND, "sigaltstack: cannot install a stack");
    altstack_block = mine.ss_sp; /* like LLVM: kept, never freed */
  }
  if (thread_block == NULL) thread_block = malloc(112);
  if (thread_block == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "malloc failed");
  *count = 1;
  return DEVBUF_OK;
}
#else
#define TOOLS_NAME "chatty"
static int init_fn(void **state, devbuf_error *err) {
  (void)err;
  *state = NULL;
  printf("chatty: hello from init (stdio)\n");
  return DEVBUF_OK;
}
static int count_fn(void *s, int *count, devbuf_error *err) {
  static const char msg[] = "chatty: probing (write to fd 1)\n";
  (void)s; (void)err;
  printf("chatty: probing (stdio) {\"not\": \"json\"\n");
  if (write(STDOUT_FILENO, msg, sizeof msg - 1) < 0) { /* nothing to do */ }
  *count = 1;
  return DEVBUF_OK;
}
#endif
static int props_fn(void *s, int d, devbuf_device_props *p, devbuf_error *err) {
  (void)s; (void)d; (void)err;
  snprintf(p->name, sizeof p->name, TOOLS_NAME " device");
  snprintf(p->vendor, sizeof p->vendor, "devbuf tests");
  p->flags = DEVBUF_DEVICE_HOST_ACCESSIBLE;
  p->alloc_alignment = 16;
  p->dlpack_device_type = DEVBUF_DL_EXT_DEV;
  return DEVBUF_OK;
}
static int alloc_fn(void *s, int d, size_t n, size_t a, void *st, void **p, devbuf_error *err) {
  (void)s; (void)d; (void)a; (void)st;
  *p = malloc(n ? n : 1);
  return *p ? DEVBUF_OK : devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: malloc failed");
}
static int free_fn(void *s, int d, void *p, void *st, devbuf_error *err) {
  (void)s; (void)d; (void)st; (void)err;
  free(p);
  return DEVBUF_OK;
}
static int h2d_fn(void *s, int d, void *dst, size_t o, const void *src, size_t n, void *st,
                  devbuf_error *e) {
  (void)s; (void)d; (void)st; (void)e;
  memcpy((char *)dst + o, src, n);
  return DEVBUF_OK;
}
static int d2h_fn(void *s, int d, void *dst, const void *src, size_t o, size_t n, void *st,
                  devbuf_error *e) {
  (void)s; (void)d; (void)st; (void)e;
  memcpy(dst, (const char *)src + o, n);
  return DEVBUF_OK;
}
static int d2d_fn(void *s, int d, void *dst, size_t doff, const void *src, size_t soff, size_t n,
                  void *st, devbuf_error *e) {
  (void)s; (void)d; (void)st; (void)e;
  memmove((char *)dst + doff, (const char *)src + soff, n);
  return DEVBUF_OK;
}
static int screate(void *s, int d, void **st, devbuf_error *e) {
  (void)s; (void)d; (void)e;
  *st = NULL;
  return DEVBUF_OK;
}
static int sop(void *s, int d, void *st, devbuf_error *e) {
  (void)s; (void)d; (void)st; (void)e;
  return DEVBUF_OK;
}
static int ecreate(void *s, int d, void **ev, devbuf_error *e) {
  (void)s; (void)d; (void)e;
  *ev = malloc(1);
  return *ev ? DEVBUF_OK : DEVBUF_ENOMEM;
}
static int edestroy(void *s, int d, void *ev, devbuf_error *e) {
  (void)s; (void)d; (void)e;
  free(ev);
  return DEVBUF_OK;
}
static int erecord(void *s, int d, void *ev, void *st, devbuf_error *e) {
  (void)s; (void)d; (void)ev; (void)st; (void)e;
  return DEVBUF_OK;
}
static int ewait(void *s, int d, void *st, void *ev, devbuf_error *e) {
  (void)s; (void)d; (void)st; (void)ev; (void)e;
  return DEVBUF_OK;
}
static int eop(void *s, int d, void *ev, devbuf_error *e) {
  (void)s; (void)d; (void)ev; (void)e;
  return DEVBUF_OK;
}

static const char *const ids[] = {"test." TOOLS_NAME, NULL};
static const devbuf_plugin_table table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = TOOLS_NAME,
    .version = "0.0.1",
#ifdef DEVBUF_TOOLS_THREAD_STATE
    .description = "keeps per-thread state and its own signal stack (tests/tools)",
#else
    .description = "writes to stdout (tests/tools)",
#endif
    .identifiers = ids,
    .init = init_fn,
    .device_count = count_fn,
    .device_props = props_fn,
    .mem_alloc = alloc_fn,
    .mem_free = free_fn,
    .copy_h2d = h2d_fn,
    .copy_d2h = d2h_fn,
    .copy_d2d = d2d_fn,
    .stream_create = screate,
    .stream_destroy = sop,
    .stream_synchronize = sop,
    .event_create = ecreate,
    .event_destroy = edestroy,
    .event_record = erecord,
    .stream_wait_event = ewait,
    .event_synchronize = eop,
    .event_query = eop,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &table; }
