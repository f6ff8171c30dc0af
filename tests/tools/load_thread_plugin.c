/* A plugin whose runtime starts at load time, as Go's does (and a CUDA
 * driver's after cuInit): a constructor starts a worker thread, and every
 * slot hands its call to that thread and waits for the answer on a
 * condition variable. A process forked from one that loaded this file has no
 * worker, so its first call waits forever: the fork hazard.
 * Loaded fresh in a child (exec, posix_spawn) it works, which is what
 * devbuf-info's probes and the conformance tool's checks must do.
 *
 * The device itself is the "good" test double of tests/broken (host memory,
 * synchronous streams); only the threading is new here. */
#define BROKEN_KIND 17
#define devbuf_plugin_entry load_thread_inner_entry
#include "../broken/broken_plugin.c"
#undef devbuf_plugin_entry

#include <pthread.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static unsigned long g_asked, g_answered;

/* The "runtime": answers every request that arrives. */
static void *lt_worker(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_lock);
  for (;;) {
    while (g_answered == g_asked) pthread_cond_wait(&g_cond, &g_lock);
    g_answered = g_asked;
    pthread_cond_broadcast(&g_cond);
  }
  return NULL;
}

__attribute__((constructor)) static void lt_start(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, lt_worker, NULL) == 0) pthread_detach(t);
}

/* Every call into the plugin goes through the worker, as a call into Go
 * needs the Go runtime's threads. */
static void gate(void) {
  pthread_mutex_lock(&g_lock);
  unsigned long ticket = ++g_asked;
  pthread_cond_broadcast(&g_cond);
  while (g_answered < ticket) pthread_cond_wait(&g_cond, &g_lock);
  pthread_mutex_unlock(&g_lock);
}

static const devbuf_plugin_table *inner;

#define GATED(slot, params, args) \
  static int g_##slot params {    \
    gate();                       \
    return inner->slot args;      \
  }
GATED(init, (void **st, devbuf_error *e), (st, e))
GATED(device_count, (void *s, int *n, devbuf_error *e), (s, n, e))
GATED(device_props, (void *s, int d, devbuf_device_props *p, devbuf_error *e), (s, d, p, e))
/* The double's malloc ignores the asked alignment; this one honours it. */
static int g_mem_alloc(void *s, int d, size_t n, size_t a, void *st, void **p, devbuf_error *e) {
  gate();
  if (a < 16) a = 16;
  if (posix_memalign(p, a, n ? n : 1) != 0) {
    *p = NULL;
    return devbuf_error_set(e, DEVBUF_ENOMEM, "mem_alloc: cannot allocate %zu bytes", n);
  }
  return DEVBUF_OK;
}
GATED(mem_free, (void *s, int d, void *p, void *st, devbuf_error *e), (s, d, p, st, e))
GATED(copy_h2d, (void *s, int d, void *dst, size_t o, const void *src, size_t n, void *st,
                 devbuf_error *e), (s, d, dst, o, src, n, st, e))
GATED(copy_d2h, (void *s, int d, void *dst, const void *src, size_t o, size_t n, void *st,
                 devbuf_error *e), (s, d, dst, src, o, n, st, e))
GATED(copy_d2d, (void *s, int d, void *dst, size_t doff, const void *src, size_t soff, size_t n,
                 void *st, devbuf_error *e), (s, d, dst, doff, src, soff, n, st, e))
GATED(stream_create, (void *s, int d, void **st, devbuf_error *e), (s, d, st, e))
GATED(stream_destroy, (void *s, int d, void *st, devbuf_error *e), (s, d, st, e))
GATED(stream_synchronize, (void *s, int d, void *st, devbuf_error *e), (s, d, st, e))
GATED(event_create, (void *s, int d, void **ev, devbuf_error *e), (s, d, ev, e))
GATED(event_destroy, (void *s, int d, void *ev, devbuf_error *e), (s, d, ev, e))
GATED(event_record, (void *s, int d, void *ev, void *st, devbuf_error *e), (s, d, ev, st, e))
GATED(stream_wait_event, (void *s, int d, void *st, void *ev, devbuf_error *e), (s, d, st, ev, e))
GATED(event_synchronize, (void *s, int d, void *ev, devbuf_error *e), (s, d, ev, e))
GATED(event_query, (void *s, int d, void *ev, devbuf_error *e), (s, d, ev, e))

static const char *const lt_ids[] = {"test.load_thread", NULL};
static devbuf_plugin_table lt_table;

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) {
  gate(); /* a Go entry function needs the runtime too */
  inner = load_thread_inner_entry();
  lt_table = *inner;
  lt_table.name = "load_thread";
  lt_table.description = "test plugin: a runtime thread started at load time (like Go's)";
  lt_table.identifiers = lt_ids;
#define SET(slot) lt_table.slot = g_##slot
  SET(init); SET(device_count); SET(device_props); SET(mem_alloc); SET(mem_free);
  SET(copy_h2d); SET(copy_d2h); SET(copy_d2d); SET(stream_create); SET(stream_destroy);
  SET(stream_synchronize); SET(event_create); SET(event_destroy); SET(event_record);
  SET(stream_wait_event); SET(event_synchronize); SET(event_query);
#undef SET
  return &lt_table;
}
