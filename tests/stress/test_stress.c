/* Concurrency stress through the runtime API (runtime.h), on devbuf.sim.
 *
 * Many threads at once: loading plugins of the broken-plugin corpus (good and
 * broken, the same files from several threads), registering and
 * unregistering in-memory tables, looking identifiers up, listing records,
 * opening devices, allocating, copying on their own streams, making one
 * stream wait on another's event, and consuming a buffer that one producer
 * shares with everyone through device_info (export once, import and wait on
 * the producer's event in every thread). Every result is checked; at the end
 * the sim plugin's statistics are back to zero.
 *
 * Built into the ThreadSanitizer stage of CI (ctest -L tsan): the point is as
 * much the absence of data races as the answers.
 *
 *   test_stress BROKEN_PLUGIN_DIR [ROUNDS]
 * Environment: DEVBUF_SIM_DEVICES=2 and a little DEVBUF_SIM_LATENCY_US make
 * the streams really overlap. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "devbuf/runtime.h"
#include "devbuf_test.h"

#define NTHREADS 8
#define BUF 4096

static const char *g_broken_dir;
static int g_rounds = 40;
static atomic_int g_failures;
static pthread_barrier_t g_start;

/* The shared buffer: written once by the main thread, then read by all. */
static devbuf_device g_shared_dev;
static void *g_shared_ptr;
static unsigned char g_shared_info[sizeof(devbuf_device_info)];
static unsigned char g_expected[BUF];

#define T_CHECK(cond, ...)                                           \
  do {                                                               \
    if (!(cond)) {                                                   \
      atomic_fetch_add(&g_failures, 1);                              \
      fprintf(stderr, "  FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                  \
      fprintf(stderr, "\n");                                         \
    }                                                                \
  } while (0)
#define T_OK(expr, errp)                                             \
  do {                                                               \
    int rc_ = (expr);                                                \
    T_CHECK(rc_ == DEVBUF_OK, "%s -> %d: %s", #expr, rc_, (errp)->message); \
  } while (0)

static void load_corpus(unsigned seed) {
  /* Good plugins load once, the same file from many threads gives the same
   * record; broken ones fail with their own code every time. */
  static const struct { const char *kind; int code; } kinds[] = {
      {"good", DEVBUF_OK},          {"minor_newer", DEVBUF_OK},  {"size_huge", DEVBUF_OK},
      {"wrong_major", DEVBUF_EABI}, {"size_short", DEVBUF_EABI}, {"null_slot", DEVBUF_EABI},
      {"no_entry", DEVBUF_ELOAD},   {"init_fail", DEVBUF_EINIT}, {"id_cpu", DEVBUF_EABI}};
  size_t k = seed % (sizeof kinds / sizeof kinds[0]);
  char path[4096];
  snprintf(path, sizeof path, "%s/devbuf_plugin_%s.so", g_broken_dir, kinds[k].kind);
  devbuf_error err;
  size_t idx = (size_t)-1;
  int rc = devbuf_plugin_load(path, &idx, &err);
  T_CHECK(rc == kinds[k].code, "load %s: %s, want %s: %s", kinds[k].kind,
          devbuf_status_name(rc), devbuf_status_name(kinds[k].code), err.message);
  devbuf_plugin_info info = {.struct_size = sizeof info};
  T_CHECK(idx != (size_t)-1 && devbuf_plugin_info_get(idx, &info, NULL) == DEVBUF_OK,
          "record of %s", kinds[k].kind);
  if (rc == DEVBUF_OK) {
    T_CHECK(info.state == DEVBUF_PLUGIN_LOADED, "%s loaded", kinds[k].kind);
    size_t owner = (size_t)-1;
    T_OK(devbuf_identifier_lookup(info.identifiers[0], NULL, &owner, &err), &err);
    T_CHECK(owner == idx, "%s owns its identifier (%zu vs %zu)", kinds[k].kind, owner, idx);
  } else {
    T_CHECK(info.state == DEVBUF_PLUGIN_FAILED && info.error_code == rc, "%s failed record",
            kinds[k].kind);
  }
}

static void browse(void) {
  /* Lock-free readers over records and identifiers while others append. */
  size_t n = devbuf_plugin_count();
  for (size_t i = 0; i < n; i++) {
    devbuf_plugin_info info = {.struct_size = sizeof info};
    T_CHECK(devbuf_plugin_info_get(i, &info, NULL) == DEVBUF_OK, "record %zu", i);
    /* Read the strings: they must stay valid while others unregister. */
    T_CHECK(info.path != NULL && info.reason != NULL && strlen(info.path) + strlen(info.reason) < 65536,
            "record %zu strings", i);
  }
  size_t m = devbuf_identifier_count();
  for (size_t i = 0; i < m; i++) {
    size_t owner;
    const char *id = devbuf_identifier_get(i, &owner);
    if (id == NULL) break; /* one was unregistered meanwhile */
    const char *in = NULL;
    size_t o2;
    if (devbuf_identifier_lookup(id, &in, &o2, NULL) == DEVBUF_OK)
      T_CHECK(in == id, "interned pointer stable for %s", id);
  }
  devbuf_error err;
  T_CHECK(devbuf_identifier_lookup("stress.nobody", NULL, NULL, &err) == DEVBUF_ENOTFOUND,
          "unknown identifier");
}

/* A thread's own in-memory plugin, registered and unregistered repeatedly. */
static int tp_count(void *s, int *c, devbuf_error *e) { *c = 1; return DEVBUF_OK; }
static int tp_props(void *s, int d, devbuf_device_props *p, devbuf_error *e) { return DEVBUF_OK; }
static int tp_alloc(void *s, int d, size_t n, size_t a, void *st, void **p, devbuf_error *e) {
  *p = malloc(n ? n : 1);
  return *p ? DEVBUF_OK : DEVBUF_ENOMEM;
}
static int tp_free(void *s, int d, void *p, void *st, devbuf_error *e) { free(p); return DEVBUF_OK; }
static int tp_cp1(void *s, int d, void *a, size_t b, const void *c, size_t n, void *st, devbuf_error *e) {
  memcpy((char *)a + b, c, n);
  return DEVBUF_OK;
}
static int tp_cp2(void *s, int d, void *a, const void *c, size_t b, size_t n, void *st, devbuf_error *e) {
  memcpy(a, (const char *)c + b, n);
  return DEVBUF_OK;
}
static int tp_cp3(void *s, int d, void *a, size_t b, const void *c, size_t o, size_t n, void *st, devbuf_error *e) {
  memmove((char *)a + b, (const char *)c + o, n);
  return DEVBUF_OK;
}
static int tp_sc(void *s, int d, void **st, devbuf_error *e) { *st = NULL; return DEVBUF_OK; }
static int tp_so(void *s, int d, void *st, devbuf_error *e) { return DEVBUF_OK; }
static int tp_er(void *s, int d, void *ev, void *st, devbuf_error *e) { return DEVBUF_OK; }
static int tp_sw(void *s, int d, void *st, void *ev, devbuf_error *e) { return DEVBUF_OK; }
static int tp_ec(void *s, int d, void **ev, devbuf_error *e) {
  *ev = malloc(1);
  return *ev ? DEVBUF_OK : DEVBUF_ENOMEM;
}
static int tp_ed(void *s, int d, void *ev, devbuf_error *e) { free(ev); return DEVBUF_OK; }

static void own_plugin(int tid, int round) {
  char id[32];
  snprintf(id, sizeof id, "stress.t%d", tid);
  const char *ids[] = {id, NULL};
  devbuf_plugin_table t = {
      .struct_size = sizeof t, .abi_major = DEVBUF_ABI_MAJOR, .abi_minor = DEVBUF_ABI_MINOR,
      .name = "stress", .version = "1", .identifiers = ids,
      .device_count = tp_count, .device_props = tp_props, .mem_alloc = tp_alloc,
      .mem_free = tp_free, .copy_h2d = tp_cp1, .copy_d2h = tp_cp2, .copy_d2d = tp_cp3,
      .stream_create = tp_sc, .stream_destroy = tp_so, .stream_synchronize = tp_so,
      .event_create = tp_ec, .event_destroy = tp_ed, .event_record = tp_er,
      .stream_wait_event = tp_sw, .event_synchronize = tp_so, .event_query = tp_so};
  devbuf_error err;
  size_t idx;
  int rc = devbuf_plugin_register(&t, "test_stress.c", &idx, &err);
  if (rc == DEVBUF_ENOMEM) return; /* out of records: a clean limit, checked elsewhere */
  T_OK(rc, &err);
  if (rc) return;
  devbuf_device d;
  T_OK(devbuf_device_open(id, &d, &err), &err);
  void *p = NULL;
  T_OK(devbuf_mem_alloc(&d, 64, 0, NULL, &p, &err), &err);
  T_CHECK(devbuf_plugin_unregister(idx, &err) == DEVBUF_EBUSY, "busy while memory lives");
  T_OK(devbuf_mem_free(&d, p, NULL, &err), &err);
  T_CHECK(devbuf_mem_free(&d, p, NULL, &err) == DEVBUF_EINVAL, "double free caught");
  T_OK(devbuf_plugin_unregister(idx, &err), &err);
  T_CHECK(devbuf_device_open(id, &d, &err) == DEVBUF_ENOTFOUND, "gone after unregister");
  (void)round;
}

/* Copies on the thread's own streams of one sim device: h2d on stream A,
 * d2d on stream B after B waits for A's event, d2h on B; check the bytes. */
static void sim_traffic(int tid, int round) {
  devbuf_error err;
  devbuf_device d;
  int ndev = 0;
  T_OK(devbuf_device_count("devbuf.sim", &ndev, &err), &err);
  if (ndev < 1) return;
  char spec[32];
  snprintf(spec, sizeof spec, "devbuf.sim:%d", (tid + round) % ndev);
  T_OK(devbuf_device_open(spec, &d, &err), &err);
  void *a = NULL, *b = NULL, *sa = NULL, *sb = NULL, *ev = NULL;
  size_t n = 256 + (size_t)((tid * 131 + round * 17) % 2048);
  T_OK(devbuf_stream_create(&d, &sa, &err), &err);
  T_OK(devbuf_stream_create(&d, &sb, &err), &err);
  T_OK(devbuf_event_create(&d, &ev, &err), &err);
  T_OK(devbuf_mem_alloc(&d, n, 0, sa, &a, &err), &err);
  T_OK(devbuf_mem_alloc(&d, n, 0, sa, &b, &err), &err);
  unsigned char *in = malloc(n), *out = malloc(n);
  for (size_t i = 0; i < n; i++) in[i] = (unsigned char)(i * 7 + (size_t)tid + (size_t)round);
  memset(out, 0, n);
  T_OK(devbuf_copy_h2d(&d, a, 0, in, n, sa, &err), &err);
  T_OK(devbuf_event_record(&d, ev, sa, &err), &err);
  T_OK(devbuf_stream_wait_event(&d, sb, ev, &err), &err);
  T_OK(devbuf_copy_d2d(&d, b, 0, a, 0, n, sb, &err), &err);
  T_OK(devbuf_copy_d2h(&d, out, b, 0, n, sb, &err), &err);
  int q = devbuf_event_query(&d, ev, &err);
  T_CHECK(q == DEVBUF_OK || q == DEVBUF_EBUSY, "event_query: %d", q);
  T_OK(devbuf_stream_synchronize(&d, sb, &err), &err);
  T_CHECK(memcmp(in, out, n) == 0, "thread %d round %d: bytes differ after h2d/d2d/d2h", tid, round);
  /* Out of bounds is refused, not executed. */
  T_CHECK(devbuf_copy_d2h(&d, out, b, 1, n, sb, &err) == DEVBUF_EINVAL, "bounds");
  T_OK(devbuf_mem_free(&d, a, sb, &err), &err);
  T_OK(devbuf_mem_free(&d, b, sb, &err), &err);
  T_OK(devbuf_stream_synchronize(&d, sa, &err), &err);
  T_OK(devbuf_event_destroy(&d, ev, &err), &err);
  T_OK(devbuf_stream_destroy(&d, sa, &err), &err);
  T_OK(devbuf_stream_destroy(&d, sb, &err), &err);
  free(in);
  free(out);
}

/* Every thread consumes the one shared buffer through its device_info. */
static void consume_shared(int tid) {
  devbuf_error err;
  devbuf_device_info_desc desc;
  memset(&desc, 0, sizeof desc);
  devbuf_device d;
  T_OK(devbuf_device_info_import("devbuf.sim", g_shared_info, &desc, &d, &err), &err);
  T_CHECK(d.backend == g_shared_dev.backend && d.ordinal == g_shared_dev.ordinal, "same device");
  unsigned char *out = malloc(BUF);
  size_t off = (size_t)(tid * 64) % (BUF / 2);
  T_OK(devbuf_copy_to_host_sync(&d, out, g_shared_ptr, off, BUF - off, desc.event, &err), &err);
  T_CHECK(memcmp(out, g_expected + off, BUF - off) == 0, "thread %d: shared bytes", tid);
  free(out);
}

static void *worker(void *arg) {
  int tid = (int)(intptr_t)arg;
  pthread_barrier_wait(&g_start);
  for (int r = 0; r < g_rounds; r++) {
    load_corpus((unsigned)(tid * 7 + r));
    browse();
    sim_traffic(tid, r);
    if (r % 4 == tid % 4) own_plugin(tid, r);
    consume_shared(tid);
  }
  return NULL;
}

static void test_stress(void) {
  devbuf_error err;
  CHECK_OK(devbuf_device_open("devbuf.sim", &g_shared_dev, &err), &err);
  size_t sim_index = devbuf_device_plugin_index(&g_shared_dev);
  devbuf_stats before;
  CHECK_OK(devbuf_plugin_stats(sim_index, &before, &err), &err);

  /* The producer: write the shared buffer on a stream, record an event, and
   * publish the device_info naming that event. Nobody syncs the host. */
  void *stream = NULL, *event = NULL;
  CHECK_OK(devbuf_stream_create(&g_shared_dev, &stream, &err), &err);
  CHECK_OK(devbuf_event_create(&g_shared_dev, &event, &err), &err);
  CHECK_OK(devbuf_mem_alloc(&g_shared_dev, BUF, 0, stream, &g_shared_ptr, &err), &err);
  for (int i = 0; i < BUF; i++) g_expected[i] = (unsigned char)(i * 13 + 1);
  CHECK_OK(devbuf_copy_h2d(&g_shared_dev, g_shared_ptr, 0, g_expected, BUF, stream, &err), &err);
  CHECK_OK(devbuf_event_record(&g_shared_dev, event, stream, &err), &err);
  size_t n = 0;
  CHECK_OK(devbuf_device_info_export(&g_shared_dev, event, stream, DEVBUF_DEVICE_INFO_READONLY,
                                     g_shared_info, sizeof g_shared_info, &n, &err), &err);

  pthread_t th[NTHREADS];
  pthread_barrier_init(&g_start, NULL, NTHREADS);
  for (int i = 0; i < NTHREADS; i++)
    pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&g_start);
  CHECK(atomic_load(&g_failures) == 0, "%d failed checks in worker threads",
        atomic_load(&g_failures));

  CHECK_OK(devbuf_stream_synchronize(&g_shared_dev, stream, &err), &err);
  CHECK_OK(devbuf_mem_free(&g_shared_dev, g_shared_ptr, stream, &err), &err);
  CHECK_OK(devbuf_stream_synchronize(&g_shared_dev, stream, &err), &err);
  CHECK_OK(devbuf_event_destroy(&g_shared_dev, event, &err), &err);
  CHECK_OK(devbuf_stream_destroy(&g_shared_dev, stream, &err), &err);

  devbuf_stats after;
  CHECK_OK(devbuf_plugin_stats(sim_index, &after, &err), &err);
  CHECK(after.live_allocations == before.live_allocations && after.live_bytes == before.live_bytes &&
            after.live_streams == before.live_streams && after.live_events == before.live_events,
        "sim statistics back to baseline: %llu allocations, %llu bytes, %llu streams, %llu events",
        (unsigned long long)after.live_allocations, (unsigned long long)after.live_bytes,
        (unsigned long long)after.live_streams, (unsigned long long)after.live_events);
  CHECK(after.total_allocations >= before.total_allocations + 2u * NTHREADS * (unsigned)g_rounds,
        "every allocation counted");
  /* Each good corpus file has exactly one loaded record. */
  const char *good[] = {"devbuf_plugin_good.so", "devbuf_plugin_minor_newer.so",
                        "devbuf_plugin_size_huge.so"};
  for (size_t g = 0; g < 3; g++) {
    int loaded = 0;
    for (size_t i = 0; i < devbuf_plugin_count(); i++) {
      devbuf_plugin_info info = {.struct_size = sizeof info};
      devbuf_plugin_info_get(i, &info, NULL);
      const char *slash = strrchr(info.path, '/');
      if (info.state == DEVBUF_PLUGIN_LOADED && slash && strcmp(slash + 1, good[g]) == 0)
        loaded++;
    }
    CHECK(loaded == 1, "%s: %d loaded records", good[g], loaded);
  }
}

/* ---- unregister waits for a device_count probe still inside the plugin ----------------
 * A listing probes device_count with no lock held. An unregister in that
 * window must not run `shutdown` (which frees what the probe uses: a Python
 * plugin's closures) until the probe has returned (a crash seen once on
 * 3.13t). The plugin's device_count blocks until told to go; shutdown notes
 * whether a probe was still inside. Without the wait, shutdown runs at once:
 * caught unless this thread is starved for all of the 50 ms (then the test
 * cannot see it, but never fails wrongly). */
static atomic_int g_probe_inside, g_probe_go, g_shutdown_during_probe, g_shutdown_ran;
static size_t g_probe_idx;
static int g_probe_self;
static int tp_count_blocking(void *s, int *c, devbuf_error *e) {
  (void)s; (void)e;
  if (g_probe_self) {
    devbuf_error err;
    int rc = devbuf_plugin_unregister(g_probe_idx, &err);
    CHECK(rc == DEVBUF_EBUSY && strstr(err.message, "its own device_count") != NULL,
          "unregister from inside the plugin's own device_count is refused");
    *c = 1;
    return DEVBUF_OK;
  }
  atomic_store(&g_probe_inside, 1);
  while (!atomic_load(&g_probe_go)) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  *c = 1;
  atomic_store(&g_probe_inside, 0);
  return DEVBUF_OK;
}
static void tp_shutdown_noting(void *s) {
  (void)s;
  if (atomic_load(&g_probe_inside)) atomic_store(&g_shutdown_during_probe, 1);
  atomic_store(&g_shutdown_ran, 1);
}
static void *probe_thread(void *arg) {
  (void)arg;
  int n = 0;
  devbuf_error err;
  devbuf_plugin_device_count(g_probe_idx, &n, &err);
  return NULL;
}
static void *unregister_thread(void *arg) {
  devbuf_error err;
  *(int *)arg = devbuf_plugin_unregister(g_probe_idx, &err);
  return NULL;
}
static void register_blocking(const char *id) {
  static const char *ids[2];
  ids[0] = id;
  ids[1] = NULL;
  devbuf_plugin_table t = {
      .struct_size = sizeof t, .abi_major = DEVBUF_ABI_MAJOR, .abi_minor = DEVBUF_ABI_MINOR,
      .name = "blocking_probe", .version = "1", .identifiers = ids,
      .device_count = tp_count_blocking, .device_props = tp_props, .mem_alloc = tp_alloc,
      .mem_free = tp_free, .copy_h2d = tp_cp1, .copy_d2h = tp_cp2, .copy_d2d = tp_cp3,
      .shutdown = tp_shutdown_noting};
  devbuf_error err;
  CHECK_OK(devbuf_plugin_register(&t, "test_stress.c", &g_probe_idx, &err), &err);
}

static void test_unregister_waits_for_probe(void) {
  register_blocking("stress.blockingprobe");
  pthread_t prober, remover;
  int urc = -1;
  pthread_create(&prober, NULL, probe_thread, NULL);
  while (!atomic_load(&g_probe_inside)) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  pthread_create(&remover, NULL, unregister_thread, &urc);
  struct timespec ts = {0, 50000000}; /* let the unregister run (or wait) */
  nanosleep(&ts, NULL);
  CHECK(!atomic_load(&g_shutdown_ran), "shutdown waits while device_count is still running");
  atomic_store(&g_probe_go, 1);
  pthread_join(prober, NULL);
  pthread_join(remover, NULL);
  CHECK(urc == DEVBUF_OK, "the unregister succeeds once the probe returned");
  CHECK(atomic_load(&g_shutdown_ran) && !atomic_load(&g_shutdown_during_probe),
        "shutdown ran, and never while the probe was inside the plugin");

  /* From inside its own device_count: refused, not a wait for itself. */
  g_probe_self = 1;
  atomic_store(&g_shutdown_ran, 0);
  register_blocking("stress.selfprobe");
  int n = 0;
  devbuf_error err;
  CHECK_OK(devbuf_plugin_device_count(g_probe_idx, &n, &err), &err);
  CHECK_OK(devbuf_plugin_unregister(g_probe_idx, &err), &err);
  CHECK(atomic_load(&g_shutdown_ran), "and it unregisters normally afterwards");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_stress BROKEN_PLUGIN_DIR [ROUNDS]\n");
    return 2;
  }
  g_broken_dir = argv[1];
  if (argc > 2) g_rounds = atoi(argv[2]);
  RUN(test_stress);
  RUN(test_unregister_waits_for_probe);
  return devbuf_test_finish();
}
