/* Tests of the devbuf.sim plugin through its table, with no runtime in
 * between: dlopen the .so given as argv[1] and call the slots directly.
 *
 *     test_sim_plugin PLUGIN.so [case...]     (no case: run them all)
 *
 * Every case sets the DEVBUF_SIM_* environment it needs, then runs the
 * plugin's init, so each one gets a fresh plugin state. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devbuf/plugin.h"
#include "devbuf_test.h"

static const devbuf_plugin_table *T;
static void *S; /* the plugin state of the running case */

/* ---- helpers ------------------------------------------------------------------ */

static const char *const sim_env[] = {"DEVBUF_SIM_DEVICES", "DEVBUF_SIM_MEMORY_MB",
                                      "DEVBUF_SIM_LATENCY_US", "DEVBUF_SIM_FAIL_ALLOC_AFTER"};

/* Clear every DEVBUF_SIM_* variable, set the NULL-terminated NAME, VALUE
 * pairs given, and init the plugin. */
static int sim_open(const char *first, ...) {
  for (size_t i = 0; i < sizeof sim_env / sizeof *sim_env; i++) unsetenv(sim_env[i]);
  va_list ap;
  va_start(ap, first);
  for (const char *name = first; name != NULL; name = va_arg(ap, const char *)) {
    const char *value = va_arg(ap, const char *);
    setenv(name, value, 1);
  }
  va_end(ap);
  devbuf_error err = {0};
  S = NULL;
  int rc = T->init(&S, &err);
  CHECK(rc == DEVBUF_OK, "init: %d %s", rc, err.message);
  return rc;
}

static void sim_close(void) {
  T->shutdown(S);
  S = NULL;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int thread_count(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  int n = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "Threads: %d", &n) == 1) break;
  if (f) fclose(f);
  return n;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 8));
}

static int check_fill(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(seed * 131u + i * 7u + (i >> 8))) return 0;
  return 1;
}

/* Synchronous helpers on the default stream of `dev`. */
static void *alloc_ok(int dev, size_t size) {
  devbuf_error err = {0};
  void *p = NULL;
  CHECK_OK(T->mem_alloc(S, dev, size, 0, NULL, &p, &err), &err);
  CHECK(p != NULL, "mem_alloc gave NULL");
  return p;
}

static void free_ok(int dev, void *p) {
  devbuf_error err = {0};
  CHECK_OK(T->mem_free(S, dev, p, NULL, &err), &err);
}

/* ---- cases ------------------------------------------------------------------- */

static void test_table(void) {
  CHECK(T->struct_size == sizeof(devbuf_plugin_table), "struct_size %u", T->struct_size);
  CHECK(T->abi_major == DEVBUF_ABI_MAJOR && T->abi_minor == DEVBUF_ABI_MINOR, "abi %u.%u",
        T->abi_major, T->abi_minor);
  CHECK(strcmp(T->name, "sim") == 0, "name %s", T->name);
  CHECK(T->version && T->description, "version/description missing");
  CHECK(T->identifiers && strcmp(T->identifiers[0], "devbuf.sim") == 0 && T->identifiers[1] == NULL,
        "identifiers");
  void (*const slots[])(void) = {
      (void (*)(void))T->init, (void (*)(void))T->shutdown, (void (*)(void))T->device_count,
      (void (*)(void))T->device_props, (void (*)(void))T->mem_alloc, (void (*)(void))T->mem_free,
      (void (*)(void))T->copy_h2d, (void (*)(void))T->copy_d2h, (void (*)(void))T->copy_d2d,
      (void (*)(void))T->stream_create, (void (*)(void))T->stream_destroy,
      (void (*)(void))T->stream_synchronize, (void (*)(void))T->event_create,
      (void (*)(void))T->event_destroy, (void (*)(void))T->event_record,
      (void (*)(void))T->stream_wait_event, (void (*)(void))T->event_synchronize,
      (void (*)(void))T->event_query, (void (*)(void))T->device_info_export,
      (void (*)(void))T->device_info_import, (void (*)(void))T->host_alloc,
      (void (*)(void))T->host_free};
  for (size_t i = 0; i < sizeof slots / sizeof *slots; i++) CHECK(slots[i] != NULL, "slot %zu", i);
}

/* init, device_count, props and even allocation start no thread; the first
 * queued copy starts one worker; shutdown joins it. */
static void test_lazy_threads(void) {
  int base = thread_count();
  if (sim_open(NULL)) return;
  devbuf_error err = {0};
  int n = -1;
  CHECK_OK(T->device_count(S, &n, &err), &err);
  CHECK(n == 1, "count %d", n);
  devbuf_device_props props = {.struct_size = sizeof props};
  CHECK_OK(T->device_props(S, 0, &props, &err), &err);
  void *p = alloc_ok(0, 64);
  void *s = NULL;
  CHECK_OK(T->stream_create(S, 0, &s, &err), &err);
  CHECK(thread_count() == base, "threads %d, expected %d before any copy", thread_count(), base);
  unsigned char buf[64] = {1};
  CHECK_OK(T->copy_h2d(S, 0, p, 0, buf, sizeof buf, s, &err), &err);
  CHECK(thread_count() == base + 1, "threads %d, expected %d after one copy", thread_count(),
        base + 1);
  CHECK_OK(T->stream_synchronize(S, 0, s, &err), &err);
  CHECK_OK(T->stream_destroy(S, 0, s, &err), &err);
  CHECK(thread_count() == base, "stream_destroy left its worker: %d threads", thread_count());
  free_ok(0, p);
  sim_close();
  CHECK(thread_count() == base, "threads %d after shutdown, expected %d", thread_count(), base);
}

static void test_props(void) {
  if (sim_open("DEVBUF_SIM_MEMORY_MB", "16", NULL)) return;
  devbuf_error err = {0};
  devbuf_device_props p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  CHECK_OK(T->device_props(S, 0, &p, &err), &err);
  CHECK(p.flags == DEVBUF_DEVICE_ASYNC, "flags 0x%x: must be async and not host-accessible",
        p.flags);
  CHECK(strcmp(p.name, "devbuf simulated device 0") == 0, "name '%s'", p.name);
  CHECK(strcmp(p.vendor, "devbuf") == 0, "vendor '%s'", p.vendor);
  CHECK(p.total_memory == 16u << 20, "total %llu", (unsigned long long)p.total_memory);
  CHECK(p.free_memory == p.total_memory, "free %llu", (unsigned long long)p.free_memory);
  CHECK(p.alloc_alignment == 256, "alignment %u", p.alloc_alignment);
  CHECK(p.dlpack_device_type == DEVBUF_DL_EXT_DEV && p.dlpack_device_id == 0, "dlpack %d/%d",
        p.dlpack_device_type, p.dlpack_device_id);
  void *a = alloc_ok(0, 1000);
  CHECK_OK(T->device_props(S, 0, &p, &err), &err);
  CHECK(p.free_memory == p.total_memory - 1024, "free %llu after a 1000-byte allocation",
        (unsigned long long)p.free_memory);
  free_ok(0, a);
  CHECK_OK(T->device_props(S, 0, &p, &err), &err);
  CHECK(p.free_memory == p.total_memory, "free %llu after free", (unsigned long long)p.free_memory);

  /* An older, smaller props struct: nothing past its struct_size is written. */
  unsigned char raw[sizeof(devbuf_device_props)];
  memset(raw, 0xAB, sizeof raw);
  devbuf_device_props *small = (devbuf_device_props *)raw;
  uint32_t ssz = (uint32_t)offsetof(devbuf_device_props, vendor);
  small->struct_size = ssz;
  CHECK_OK(T->device_props(S, 0, small, &err), &err);
  CHECK(strcmp(small->name, "devbuf simulated device 0") == 0, "small props name");
  CHECK(raw[ssz] == 0xAB && raw[sizeof raw - 1] == 0xAB, "wrote past struct_size");

  CHECK(T->device_props(S, 1, &p, &err) == DEVBUF_ENODEV, "device 1 of 1");
  CHECK_HAS(err.message, "device 1 does not exist");
  sim_close();
}

static void test_roundtrip(void) {
  if (sim_open(NULL)) return;
  devbuf_error err = {0};
  enum { N = 1 << 20 };
  unsigned char *in = malloc(N), *out = malloc(N);
  fill(in, N, 1);
  memset(out, 0, N);
  void *a = alloc_ok(0, N), *b = alloc_ok(0, N);
  CHECK((uintptr_t)a % 256 == 0, "alignment of %p", a);
  CHECK_OK(T->copy_h2d(S, 0, a, 0, in, N, NULL, &err), &err);
  CHECK_OK(T->copy_d2d(S, 0, b, 0, a, 0, N, NULL, &err), &err);
  CHECK_OK(T->copy_d2h(S, 0, out, b, 0, N, NULL, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 0, NULL, &err), &err);
  CHECK(memcmp(in, out, N) == 0, "round trip h2d -> d2d -> d2h differs");

  /* Offsets and interior pointers address the right bytes. */
  unsigned char part[100], back[300];
  fill(part, sizeof part, 9);
  CHECK_OK(T->copy_h2d(S, 0, a, 1000, part, sizeof part, NULL, &err), &err);
  CHECK_OK(T->copy_d2h(S, 0, back, (unsigned char *)a + 900, 0, 300, NULL, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 0, NULL, &err), &err);
  CHECK(memcmp(back, in + 900, 100) == 0, "bytes before the partial write changed");
  CHECK(memcmp(back + 100, part, 100) == 0, "partial write not at offset 1000");
  CHECK(memcmp(back + 200, in + 1100, 100) == 0, "bytes after the partial write changed");

  /* Overlapping d2d inside one allocation behaves as memmove. */
  CHECK_OK(T->copy_d2d(S, 0, a, 10, a, 0, 1000, NULL, &err), &err);
  CHECK_OK(T->copy_d2h(S, 0, back, a, 0, 300, NULL, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 0, NULL, &err), &err);
  CHECK(memcmp(back, in, 10) == 0 && memcmp(back + 10, in, 290) == 0, "overlapping d2d");

  /* Alignments. */
  size_t aligns[] = {1, 64, 256, 4096, 1 << 16, 1 << 21};
  for (size_t i = 0; i < sizeof aligns / sizeof *aligns; i++) {
    void *p = NULL;
    CHECK_OK(T->mem_alloc(S, 0, 33, aligns[i], NULL, &p, &err), &err);
    CHECK(p && (uintptr_t)p % aligns[i] == 0 && (uintptr_t)p % 256 == 0, "%p not aligned to %zu",
          p, aligns[i]);
    free_ok(0, p);
  }
  void *p = NULL;
  CHECK(T->mem_alloc(S, 0, 33, 48, NULL, &p, &err) == DEVBUF_EINVAL, "alignment 48 accepted");
  CHECK_HAS(err.message, "not a power of two");

  /* Size 0: unique non-NULL handles, freeable, zero-byte copies fine. */
  void *z[4];
  for (int i = 0; i < 4; i++) {
    z[i] = alloc_ok(0, 0);
    for (int j = 0; j < i; j++) CHECK(z[i] != z[j], "size-0 handles %d and %d equal", i, j);
  }
  CHECK_OK(T->copy_h2d(S, 0, z[0], 0, in, 0, NULL, &err), &err);
  CHECK(T->copy_h2d(S, 0, z[0], 0, in, 1, NULL, &err) == DEVBUF_EINVAL, "1 byte into size 0");
  for (int i = 0; i < 4; i++) free_ok(0, z[i]);

  free_ok(0, a);
  free_ok(0, b);
  free(in);
  free(out);
  sim_close();
}

/* Reading a buffer a worker may be writing is the point of the stale-read
 * test: a byte loop kept out of ThreadSanitizer's view. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((no_sanitize_thread))
#elif defined(__clang__)
__attribute__((no_sanitize("thread")))
#endif
static void racy_snapshot(unsigned char *dst, const volatile unsigned char *src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

/* With latency, a d2h read before sync sees the old host bytes; after the
 * sync it sees the device's. The calls themselves return at once. */
static void test_stale_before_sync(void) {
  if (sim_open("DEVBUF_SIM_LATENCY_US", "200000", NULL)) return;
  devbuf_error err = {0};
  enum { N = 4096 };
  unsigned char data[N], host[N];
  fill(data, N, 3);
  memset(host, 0xEE, N);
  void *a = alloc_ok(0, N);
  double t0 = now_s();
  CHECK_OK(T->copy_h2d(S, 0, a, 0, data, N, NULL, &err), &err);
  CHECK_OK(T->copy_d2h(S, 0, host, a, 0, N, NULL, &err), &err);
  double dt = now_s() - t0;
  /* Not a speed bound: synchronous copies would take their 2 x 200 ms here. */
  CHECK(dt < 0.4, "queuing two copies took %.3f s: copies are not asynchronous", dt);
  /* Stale: the worker is still sleeping on the first copy. */
  unsigned char snapshot[N];
  racy_snapshot(snapshot, host, N);
  int stale = 1;
  for (size_t i = 0; i < N; i++) stale &= snapshot[i] == 0xEE;
  CHECK(stale, "host buffer changed before synchronize");
  CHECK(!check_fill(snapshot, N, 3), "d2h complete before synchronize");
  CHECK_OK(T->stream_synchronize(S, 0, NULL, &err), &err);
  CHECK(check_fill(host, N, 3), "after synchronize the host buffer is not the device's data");
  CHECK(now_s() - t0 >= 0.4, "two copies with 200 ms latency finished in %.3f s", now_s() - t0);
  free_ok(0, a);
  sim_close();
}

/* Runs in the child: dereference `p`, which must fault. Exit codes say
 * what happened, since a sanitizer's own SEGV report would exit 1. */
#define FAULT_OK 42       /* SIGSEGV at exactly the address touched */
#define FAULT_WRONG 43    /* SIGSEGV elsewhere */
#define FAULT_NONE 44     /* no fault at all */
static volatile uintptr_t fault_expected;

static void on_fault(int sig, siginfo_t *si, void *ctx) {
  (void)sig;
  (void)ctx;
  _exit((uintptr_t)si->si_addr == fault_expected ? FAULT_OK : FAULT_WRONG);
}

static int child_touch(void *p, int write) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    /* A handler of our own (not SIG_DFL): the sanitizers leave a user's
     * SEGV handler in place, and this one reports the faulting address. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
    fault_expected = (uintptr_t)p;
    if (write)
      *(volatile unsigned char *)p = 1;
    else
      (void)*(volatile unsigned char *)p;
    _exit(FAULT_NONE);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS))
    return FAULT_OK;
  return -1;
}

static void test_host_deref_faults(void) {
  if (sim_open(NULL)) return;
  devbuf_error err = {0};
  unsigned char data[512];
  fill(data, sizeof data, 5);
  void *p = alloc_ok(0, sizeof data);
  CHECK_OK(T->copy_h2d(S, 0, p, 0, data, sizeof data, NULL, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 0, NULL, &err), &err);
  int r = child_touch(p, 0);
  CHECK(r == FAULT_OK, "reading sim memory from the host: child result %d (42 = faulted)", r);
  r = child_touch((unsigned char *)p + 100, 1);
  CHECK(r == FAULT_OK, "writing sim memory from the host: child result %d (42 = faulted)", r);
  /* Control: the same child code on host memory does not fault. */
  r = child_touch(data, 0);
  CHECK(r == FAULT_NONE, "control read of host memory: child result %d", r);
  /* The data is still there for the plugin. */
  unsigned char back[512];
  CHECK_OK(T->copy_d2h(S, 0, back, p, 0, sizeof back, NULL, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 0, NULL, &err), &err);
  CHECK(memcmp(back, data, sizeof data) == 0, "data lost");
  free_ok(0, p);
  sim_close();
}

/* Many copies on one stream run in submission order. */
static void test_stream_order(void) {
  if (sim_open("DEVBUF_SIM_LATENCY_US", "50", NULL)) return;
  devbuf_error err = {0};
  void *s = NULL;
  CHECK_OK(T->stream_create(S, 0, &s, &err), &err);
  enum { K = 200, N = 256 };
  static unsigned char vals[K][N];
  unsigned char out[N];
  void *a = alloc_ok(0, N), *b = alloc_ok(0, N), *c = alloc_ok(0, N);
  for (int i = 0; i < K; i++) {
    memset(vals[i], i & 0xff, N);
    CHECK_OK(T->copy_h2d(S, 0, a, 0, vals[i], N, s, &err), &err);
  }
  CHECK_OK(T->copy_d2d(S, 0, b, 0, a, 0, N, s, &err), &err);
  CHECK_OK(T->copy_d2d(S, 0, c, 0, b, 0, N, s, &err), &err);
  CHECK_OK(T->copy_d2h(S, 0, out, c, 0, N, s, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 0, s, &err), &err);
  int ok = 1;
  for (int i = 0; i < N; i++) ok &= out[i] == ((K - 1) & 0xff);
  CHECK(ok, "last write did not win: out[0] = %d", out[0]);

  /* A free queued on a busy stream waits for the copies before it. */
  CHECK_OK(T->copy_h2d(S, 0, a, 0, vals[7], N, s, &err), &err);
  CHECK_OK(T->copy_d2h(S, 0, out, a, 0, N, s, &err), &err);
  CHECK_OK(T->mem_free(S, 0, a, s, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 0, s, &err), &err);
  CHECK(out[0] == 7 && out[N - 1] == 7, "copy before a stream-ordered free: %d", out[0]);

  /* Destroying a stream drains it first. */
  memset(out, 0, N);
  CHECK_OK(T->copy_h2d(S, 0, b, 0, vals[9], N, s, &err), &err);
  CHECK_OK(T->copy_d2h(S, 0, out, b, 0, N, s, &err), &err);
  CHECK_OK(T->stream_destroy(S, 0, s, &err), &err);
  CHECK(out[0] == 9 && out[N - 1] == 9, "stream_destroy did not drain: %d", out[0]);
  free_ok(0, b);
  free_ok(0, c);
  sim_close();
}

/* An event recorded on stream A, waited on by stream B: B's copy sees A's
 * data; the host was not blocked by the wait. */
static void test_events_across_streams(void) {
  if (sim_open("DEVBUF_SIM_LATENCY_US", "100000", NULL)) return;
  devbuf_error err = {0};
  void *sa = NULL, *sb = NULL, *ev = NULL, *ev_never = NULL;
  CHECK_OK(T->stream_create(S, 0, &sa, &err), &err);
  CHECK_OK(T->stream_create(S, 0, &sb, &err), &err);
  CHECK_OK(T->event_create(S, 0, &ev, &err), &err);
  CHECK_OK(T->event_create(S, 0, &ev_never, &err), &err);
  CHECK_OK(T->event_query(S, 0, ev_never, &err), &err); /* never recorded: complete */
  CHECK_OK(T->event_synchronize(S, 0, ev_never, &err), &err);

  enum { N = 1024 };
  unsigned char old[N], fresh[N], out[N];
  memset(old, 0x11, N);
  fill(fresh, N, 7);
  void *a = alloc_ok(0, N);
  CHECK_OK(T->copy_h2d(S, 0, a, 0, old, N, sa, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 0, sa, &err), &err);

  /* A is busy for 200 ms before `fresh` lands; B's own copy takes 100 ms,
   * so without the wait B would read the old bytes. */
  void *scratch = alloc_ok(0, N);
  double t0 = now_s();
  CHECK_OK(T->copy_h2d(S, 0, scratch, 0, old, N, sa, &err), &err);
  CHECK_OK(T->copy_h2d(S, 0, a, 0, fresh, N, sa, &err), &err);
  CHECK_OK(T->event_record(S, 0, ev, sa, &err), &err);
  CHECK_OK(T->stream_wait_event(S, 0, sb, ev, &err), &err);
  CHECK_OK(T->copy_d2h(S, 0, out, a, 0, N, sb, &err), &err);
  /* Not a speed bound: a blocking wait would take A's 200 ms of copies. */
  CHECK(now_s() - t0 < 0.2, "stream_wait_event blocked the host");
  int q = T->event_query(S, 0, ev, &err);
  CHECK(q == DEVBUF_EBUSY, "event_query right after record: %d", q);
  CHECK_HAS(err.message, "SIM_NOT_READY");
  /* The waiting stream may be destroyed and the event too: queued work holds on. */
  CHECK_OK(T->event_destroy(S, 0, ev, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 0, sb, &err), &err);
  CHECK(check_fill(out, N, 7), "stream B read before stream A's copy finished");
  CHECK(now_s() - t0 >= 0.29, "B finished in %.3f s, before A's 200 ms of copies + its own",
        now_s() - t0);

  /* event_synchronize blocks until the recorded work is done. */
  CHECK_OK(T->event_create(S, 0, &ev, &err), &err);
  memset(out, 0, N);
  CHECK_OK(T->copy_d2h(S, 0, out, a, 0, N, sa, &err), &err);
  CHECK_OK(T->event_record(S, 0, ev, sa, &err), &err);
  CHECK_OK(T->event_synchronize(S, 0, ev, &err), &err);
  CHECK(check_fill(out, N, 7), "event_synchronize returned before the copy");
  CHECK_OK(T->event_query(S, 0, ev, &err), &err);

  /* Record on the default stream; wait on an explicit one. */
  CHECK_OK(T->copy_h2d(S, 0, a, 0, old, N, NULL, &err), &err);
  CHECK_OK(T->event_record(S, 0, ev, NULL, &err), &err);
  CHECK_OK(T->stream_wait_event(S, 0, sb, ev, &err), &err);
  CHECK_OK(T->copy_d2h(S, 0, out, a, 0, N, sb, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 0, sb, &err), &err);
  CHECK(out[0] == 0x11 && out[N - 1] == 0x11, "default-stream record not honoured");

  /* Handle checks. */
  int local;
  CHECK(T->event_record(S, 0, &local, sa, &err) == DEVBUF_EINVAL, "foreign event accepted");
  CHECK_HAS(err.message, "SIM_INVALID_HANDLE");
  CHECK(T->event_record(S, 0, sa, sa, &err) == DEVBUF_EINVAL, "stream used as event");
  CHECK_HAS(err.message, "it is a sim stream");
  CHECK(T->stream_synchronize(S, 0, ev, &err) == DEVBUF_EINVAL, "event used as stream");
  CHECK_HAS(err.message, "it is a sim event");
  CHECK(T->stream_destroy(S, 0, NULL, &err) == DEVBUF_EINVAL, "default stream destroyed");
  CHECK_OK(T->event_destroy(S, 0, ev, &err), &err);
  CHECK(T->event_destroy(S, 0, ev, &err) == DEVBUF_EINVAL, "double event_destroy");
  CHECK(T->event_query(S, 0, ev, &err) == DEVBUF_EINVAL, "query of a destroyed event");
  CHECK_OK(T->stream_destroy(S, 0, sa, &err), &err);
  CHECK(T->stream_destroy(S, 0, sa, &err) == DEVBUF_EINVAL, "double stream_destroy");
  CHECK(T->copy_h2d(S, 0, a, 0, old, N, sa, &err) == DEVBUF_EINVAL, "copy on a destroyed stream");
  CHECK_HAS(err.message, "not a live sim stream");
  CHECK_OK(T->stream_destroy(S, 0, sb, &err), &err);
  CHECK_OK(T->event_destroy(S, 0, ev_never, &err), &err);
  free_ok(0, a);
  free_ok(0, scratch);
  sim_close();
}

static void test_fail_injection(void) {
  if (sim_open("DEVBUF_SIM_FAIL_ALLOC_AFTER", "2", NULL)) return;
  devbuf_error err = {0};
  void *a = alloc_ok(0, 10), *b = alloc_ok(0, 0), *c = NULL;
  int rc = T->mem_alloc(S, 0, 10, 0, NULL, &c, &err);
  CHECK(rc == DEVBUF_ENOMEM && c == NULL, "third allocation: rc %d", rc);
  CHECK_HAS(err.message, "SIM_INJECTED_FAILURE");
  CHECK_HAS(err.message, "DEVBUF_SIM_FAIL_ALLOC_AFTER=2");
  free_ok(0, a);
  free_ok(0, b);
  CHECK(T->mem_alloc(S, 0, 10, 0, NULL, &c, &err) == DEVBUF_ENOMEM, "fails stay failing");
  sim_close();

  if (sim_open("DEVBUF_SIM_FAIL_ALLOC_AFTER", "0", NULL)) return;
  CHECK(T->mem_alloc(S, 0, 1, 0, NULL, &c, &err) == DEVBUF_ENOMEM, "AFTER=0: first succeeded");
  sim_close();
}

static void test_exhaustion(void) {
  if (sim_open("DEVBUF_SIM_MEMORY_MB", "1", NULL)) return;
  devbuf_error err = {0};
  enum { B = 64 * 1024 };
  void *p[32] = {0};
  int n = 0;
  while (n < 32 && T->mem_alloc(S, 0, B, 0, NULL, &p[n], &err) == DEVBUF_OK) n++;
  CHECK(n == 16, "%d blocks of 64 KiB fit in 1 MiB", n);
  CHECK(err.code == DEVBUF_ENOMEM, "code %d", err.code);
  CHECK_HAS(err.message, "SIM_OUT_OF_MEMORY");
  devbuf_device_props props = {.struct_size = sizeof props};
  CHECK_OK(T->device_props(S, 0, &props, &err), &err);
  CHECK(props.free_memory == 0, "free %llu", (unsigned long long)props.free_memory);
  /* Every other block freed: 512 KiB free, but no 128 KiB hole. */
  for (int i = 0; i < n; i += 2) free_ok(0, p[i]);
  void *big = NULL;
  CHECK(T->mem_alloc(S, 0, 2 * B, 0, NULL, &big, &err) == DEVBUF_ENOMEM, "fragmented fit");
  void *small = alloc_ok(0, B); /* fills the first hole (first fit) */
  CHECK(small == p[0], "first fit: got %p, expected %p", small, p[0]);
  free_ok(0, small);
  for (int i = 1; i < n; i += 2) free_ok(0, p[i]);
  /* All coalesced again: the whole arena in one piece. */
  big = alloc_ok(0, 1 << 20);
  free_ok(0, big);
  CHECK(T->mem_alloc(S, 0, (1 << 20) + 1, 0, NULL, &big, &err) == DEVBUF_ENOMEM, "over size");
  CHECK(T->mem_alloc(S, 0, SIZE_MAX, 0, NULL, &big, &err) == DEVBUF_ENOMEM, "SIZE_MAX");
  CHECK(T->mem_alloc(S, 0, 16, (size_t)1 << 40, NULL, &big, &err) == DEVBUF_ENOMEM, "huge align");
  sim_close();
}

static void test_free_errors(void) {
  if (sim_open("DEVBUF_SIM_LATENCY_US", "100000", NULL)) return;
  devbuf_error err = {0};
  int local;
  void *a = alloc_ok(0, 1000);
  CHECK(T->mem_free(S, 0, &local, NULL, &err) == DEVBUF_EINVAL, "host pointer freed");
  CHECK_HAS(err.message, "SIM_INVALID_POINTER");
  CHECK(T->mem_free(S, 0, (unsigned char *)a + 8, NULL, &err) == DEVBUF_EINVAL, "interior freed");
  CHECK_HAS(err.message, "8 bytes into");
  CHECK_OK(T->mem_free(S, 0, NULL, NULL, &err), &err);
  free_ok(0, a);
  CHECK(T->mem_free(S, 0, a, NULL, &err) == DEVBUF_EINVAL, "double free accepted");
  CHECK_HAS(err.message, "already freed");

  /* While a stream-ordered free is pending. */
  void *s = NULL;
  unsigned char buf[1000] = {0};
  CHECK_OK(T->stream_create(S, 0, &s, &err), &err);
  a = alloc_ok(0, 1000);
  CHECK_OK(T->copy_h2d(S, 0, a, 0, buf, sizeof buf, s, &err), &err);
  CHECK_OK(T->mem_free(S, 0, a, s, &err), &err);
  CHECK(T->mem_free(S, 0, a, s, &err) == DEVBUF_EINVAL, "double free while pending");
  CHECK_HAS(err.message, "SIM_DOUBLE_FREE");
  CHECK(T->copy_h2d(S, 0, a, 0, buf, 10, s, &err) == DEVBUF_EINVAL, "copy into freed memory");
  CHECK_HAS(err.message, "which was freed");
  CHECK_OK(T->stream_destroy(S, 0, s, &err), &err);
  CHECK(T->copy_h2d(S, 0, a, 0, buf, 10, NULL, &err) == DEVBUF_EINVAL, "copy after release");
  CHECK_HAS(err.message, "not inside a live allocation");
  sim_close();
}

static void test_bounds(void) {
  if (sim_open(NULL)) return;
  devbuf_error err = {0};
  unsigned char buf[2048] = {0};
  void *a = alloc_ok(0, 1000), *b = alloc_ok(0, 500);
  CHECK_OK(T->copy_h2d(S, 0, a, 0, buf, 1000, NULL, &err), &err);
  CHECK_OK(T->copy_h2d(S, 0, a, 999, buf, 1, NULL, &err), &err);
  CHECK_OK(T->copy_h2d(S, 0, a, 1000, buf, 0, NULL, &err), &err);
  CHECK(T->copy_h2d(S, 0, a, 0, buf, 1001, NULL, &err) == DEVBUF_EINVAL, "h2d 1001 into 1000");
  CHECK_HAS(err.message, "copy_h2d: SIM_OUT_OF_BOUNDS");
  CHECK_HAS(err.message, "offset 0 + 1001 bytes");
  CHECK_HAS(err.message, "1000 bytes");
  char ptrtext[32];
  snprintf(ptrtext, sizeof ptrtext, "%p", a);
  CHECK_HAS(err.message, ptrtext);
  CHECK(T->copy_h2d(S, 0, a, 990, buf, 11, NULL, &err) == DEVBUF_EINVAL, "h2d at 990 + 11");
  CHECK_HAS(err.message, "offset 990 + 11 bytes");
  CHECK(T->copy_h2d(S, 0, a, SIZE_MAX, buf, 2, NULL, &err) == DEVBUF_EINVAL, "offset overflow");
  CHECK(T->copy_h2d(S, 0, a, 2, buf, SIZE_MAX, NULL, &err) == DEVBUF_EINVAL, "size overflow");
  CHECK(T->copy_d2h(S, 0, buf, a, 500, 501, NULL, &err) == DEVBUF_EINVAL, "d2h past end");
  CHECK_HAS(err.message, "copy_d2h: SIM_OUT_OF_BOUNDS: source");
  CHECK(T->copy_d2h(S, 0, buf, (unsigned char *)a + 900, 50, 51, NULL, &err) == DEVBUF_EINVAL,
        "d2h from an interior pointer past the end");
  CHECK(T->copy_d2d(S, 0, b, 0, a, 0, 501, NULL, &err) == DEVBUF_EINVAL, "d2d into 500");
  CHECK_HAS(err.message, "copy_d2d: SIM_OUT_OF_BOUNDS: destination");
  CHECK(T->copy_d2d(S, 0, a, 0, b, 100, 401, NULL, &err) == DEVBUF_EINVAL, "d2d from 500");
  CHECK_HAS(err.message, "copy_d2d: SIM_OUT_OF_BOUNDS: source");
  CHECK_OK(T->copy_d2d(S, 0, a, 500, b, 0, 500, NULL, &err), &err);
  /* Pointers of the wrong kind. */
  CHECK(T->copy_h2d(S, 0, buf, 0, buf, 10, NULL, &err) == DEVBUF_EINVAL, "host as device");
  CHECK_HAS(err.message, "not inside a live allocation");
  CHECK(T->copy_h2d(S, 0, a, 0, b, 10, NULL, &err) == DEVBUF_EINVAL, "device as host source");
  CHECK_HAS(err.message, "not host memory");
  CHECK(T->copy_d2h(S, 0, b, a, 0, 10, NULL, &err) == DEVBUF_EINVAL, "device as host dest");
  CHECK_HAS(err.message, "not host memory");
  CHECK(T->copy_h2d(S, 0, a, 0, NULL, 10, NULL, &err) == DEVBUF_EINVAL, "NULL source");
  CHECK_OK(T->stream_synchronize(S, 0, NULL, &err), &err);
  free_ok(0, a);
  free_ok(0, b);
  sim_close();
}

static void test_device_info(void) {
  if (sim_open(NULL)) return;
  devbuf_error err = {0};
  void *s = NULL, *ev = NULL;
  CHECK_OK(T->stream_create(S, 0, &s, &err), &err);
  CHECK_OK(T->event_create(S, 0, &ev, &err), &err);
  devbuf_device_info info;
  memset(&info, 0x5A, sizeof info);
  size_t size = 0;
  CHECK_OK(T->device_info_export(S, "devbuf.sim", 0, ev, s, DEVBUF_DEVICE_INFO_READONLY, &info,
                                 sizeof info, &size, &err), &err);
  CHECK(size == sizeof info && info.struct_size == sizeof info, "size %zu/%u", size,
        info.struct_size);
  CHECK(info.version == 1 && info.reserved0 == 0 && info.device_ordinal == 0, "header");
  CHECK(info.flags == DEVBUF_DEVICE_INFO_READONLY && info.event == ev && info.stream == s, "body");
  int zero = 1;
  for (int i = 0; i < 6; i++) zero &= info.reserved[i] == 0;
  CHECK(zero, "reserved not zeroed");

  devbuf_device_info_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  CHECK_OK(T->device_info_import(S, "devbuf.sim", &info, &desc, &err), &err);
  CHECK(desc.device_ordinal == 0 && desc.event == ev && desc.stream == s &&
        desc.flags == DEVBUF_DEVICE_INFO_READONLY, "desc");

  /* A newer writer's larger struct is accepted; the tail is ignored. */
  struct {
    devbuf_device_info v1;
    uint64_t extra[4];
  } big;
  memset(&big, 0xFF, sizeof big);
  big.v1 = info;
  big.v1.struct_size = sizeof big;
  CHECK_OK(T->device_info_import(S, "devbuf.sim", &big, &desc, &err), &err);

  /* Export errors. */
  CHECK(T->device_info_export(S, "devbuf.sim", 0, ev, s, 0, &info, sizeof info - 1, &size, &err) ==
        DEVBUF_EINVAL, "small capacity");
  CHECK_HAS(err.message, "capacity");
  CHECK(T->device_info_export(S, "devbuf.sim", 0, NULL, NULL, DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE,
                              &info, sizeof info, &size, &err) == DEVBUF_EINVAL, "host flag");
  CHECK(T->device_info_export(S, "devbuf.sim", 0, s, NULL, 0, &info, sizeof info, &size, &err) ==
        DEVBUF_EINVAL, "stream as event");
  CHECK(T->device_info_export(S, "devbuf.cuda", 0, NULL, NULL, 0, &info, sizeof info, &size,
                              &err) != DEVBUF_OK, "foreign identifier");
  CHECK(T->device_info_export(S, "devbuf.sim", 3, NULL, NULL, 0, &info, sizeof info, &size,
                              &err) == DEVBUF_ENODEV, "device 3");

  /* Import errors, one field at a time. */
  devbuf_device_info bad;
#define IMPORT_FAILS(mutate, needle)                                               \
  do {                                                                             \
    bad = info;                                                                    \
    mutate;                                                                        \
    int rc_ = T->device_info_import(S, "devbuf.sim", &bad, &desc, &err);           \
    CHECK(rc_ == DEVBUF_EINVAL, "%s accepted (%d)", #mutate, rc_);                 \
    CHECK_HAS(err.message, needle);                                                \
  } while (0)
  IMPORT_FAILS(bad.struct_size = sizeof bad - 8, "struct_size");
  IMPORT_FAILS(bad.struct_size = 0, "struct_size 0");
  IMPORT_FAILS(bad.version = 2, "version 2");
  IMPORT_FAILS(bad.version = 0, "version 0");
  IMPORT_FAILS(bad.device_ordinal = 1, "device_ordinal 1 out of range");
  IMPORT_FAILS(bad.device_ordinal = -1, "device_ordinal -1 out of range");
  IMPORT_FAILS(bad.reserved0 = 1, "reserved0");
  IMPORT_FAILS(bad.reserved[3] = 7, "reserved[3]");
  IMPORT_FAILS(bad.reserved[5] = 1, "reserved[5]");
  IMPORT_FAILS(bad.flags = DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE, "HOST_ACCESSIBLE");
  IMPORT_FAILS(bad.flags = 0x80, "unknown flags");
  IMPORT_FAILS(bad.event = &bad, "not a live sim event");
  IMPORT_FAILS(bad.stream = &bad, "not a live sim stream");
  IMPORT_FAILS(bad.event = s, "it is a sim stream");
#undef IMPORT_FAILS
  CHECK(T->device_info_import(S, "devbuf.sim", NULL, &desc, &err) == DEVBUF_EINVAL, "NULL info");
  CHECK_HAS(err.message, "device_info is NULL");
  CHECK(T->device_info_import(S, "other.dev", &info, &desc, &err) != DEVBUF_OK, "foreign id");
  CHECK_HAS(err.message, "other.dev");

  /* After the producer destroys its event, the info no longer validates. */
  CHECK_OK(T->event_destroy(S, 0, ev, &err), &err);
  CHECK(T->device_info_import(S, "devbuf.sim", &info, &desc, &err) == DEVBUF_EINVAL,
        "destroyed event accepted");
  CHECK_HAS(err.message, "not a live sim event");
  CHECK_OK(T->stream_destroy(S, 0, s, &err), &err);
  sim_close();
}

static void test_multi_device(void) {
  if (sim_open("DEVBUF_SIM_DEVICES", "2", "DEVBUF_SIM_MEMORY_MB", "8", NULL)) return;
  devbuf_error err = {0};
  int n = 0;
  CHECK_OK(T->device_count(S, &n, &err), &err);
  CHECK(n == 2, "count %d", n);
  devbuf_device_props p = {.struct_size = sizeof p};
  CHECK_OK(T->device_props(S, 1, &p, &err), &err);
  CHECK(strcmp(p.name, "devbuf simulated device 1") == 0 && p.dlpack_device_id == 1, "props 1");
  CHECK(T->device_props(S, 2, &p, &err) == DEVBUF_ENODEV, "device 2 of 2");
  CHECK_HAS(err.message, "DEVBUF_SIM_DEVICES=2");

  enum { N = 4096 };
  unsigned char in0[N], in1[N], out[N];
  fill(in0, N, 10);
  fill(in1, N, 11);
  void *a0 = alloc_ok(0, N), *a1 = alloc_ok(1, N);
  CHECK_OK(T->copy_h2d(S, 0, a0, 0, in0, N, NULL, &err), &err);
  CHECK_OK(T->copy_h2d(S, 1, a1, 0, in1, N, NULL, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 1, NULL, &err), &err);
  /* A pointer, a stream or an event of device 0 used on device 1 is refused. */
  CHECK(T->copy_d2h(S, 1, out, a0, 0, N, NULL, &err) == DEVBUF_EINVAL, "dev0 ptr on dev1");
  CHECK_HAS(err.message, "sim device 1");
  CHECK(T->mem_free(S, 1, a0, NULL, &err) == DEVBUF_EINVAL, "dev0 ptr freed on dev1");
  void *s0 = NULL, *e0 = NULL, *s1 = NULL;
  CHECK_OK(T->stream_create(S, 0, &s0, &err), &err);
  CHECK_OK(T->stream_create(S, 1, &s1, &err), &err);
  CHECK_OK(T->event_create(S, 0, &e0, &err), &err);
  CHECK(T->copy_d2h(S, 1, out, a1, 0, N, s0, &err) == DEVBUF_EINVAL, "dev0 stream on dev1");
  CHECK_HAS(err.message, "belongs to sim device 0, not 1");
  CHECK(T->event_record(S, 1, e0, s1, &err) == DEVBUF_EINVAL, "dev0 event recorded on dev1");
  /* But stream 1 may wait on an event of device 0. */
  CHECK_OK(T->event_record(S, 0, e0, NULL, &err), &err);
  CHECK_OK(T->stream_wait_event(S, 1, s1, e0, &err), &err);
  CHECK_OK(T->copy_d2h(S, 1, out, a1, 0, N, s1, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 1, s1, &err), &err);
  CHECK(check_fill(out, N, 11), "device 1 data");
  /* s0 must first wait for the default stream, which wrote a0. */
  CHECK_OK(T->stream_wait_event(S, 0, s0, e0, &err), &err);
  CHECK_OK(T->copy_d2h(S, 0, out, a0, 0, N, s0, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 0, s0, &err), &err);
  CHECK(check_fill(out, N, 10), "device 0 data");
  CHECK_OK(T->device_props(S, 0, &p, &err), &err);
  CHECK(p.free_memory == (8u << 20) - N, "dev0 free %llu", (unsigned long long)p.free_memory);

  devbuf_device_info info;
  size_t size;
  devbuf_device_info_desc desc = {.struct_size = sizeof desc};
  CHECK_OK(T->device_info_export(S, "devbuf.sim", 1, NULL, s1, 0, &info, sizeof info, &size, &err),
           &err);
  CHECK_OK(T->device_info_import(S, "devbuf.sim", &info, &desc, &err), &err);
  CHECK(desc.device_ordinal == 1 && desc.stream == s1, "desc of device 1");
  CHECK_OK(T->stream_destroy(S, 0, s0, &err), &err);
  CHECK_OK(T->stream_destroy(S, 1, s1, &err), &err);
  CHECK_OK(T->event_destroy(S, 0, e0, &err), &err);
  free_ok(0, a0);
  free_ok(1, a1);
  sim_close();
}

static void test_no_device_and_bad_env(void) {
  devbuf_error err = {0};
  int n = -1;
  if (sim_open("DEVBUF_SIM_DEVICES", "0", NULL)) return;
  CHECK(T->device_count(S, &n, &err) == DEVBUF_ENODEV && n == 0, "count %d", n);
  CHECK_HAS(err.message, "DEVBUF_SIM_DEVICES=0");
  void *p = NULL;
  CHECK(T->mem_alloc(S, 0, 8, 0, NULL, &p, &err) == DEVBUF_ENODEV, "alloc with no device");
  sim_close();

  const char *bad[][2] = {{"DEVBUF_SIM_DEVICES", "two"},  {"DEVBUF_SIM_DEVICES", "-1"},
                          {"DEVBUF_SIM_DEVICES", "999"},  {"DEVBUF_SIM_MEMORY_MB", "0"},
                          {"DEVBUF_SIM_LATENCY_US", "1x"}, {"DEVBUF_SIM_FAIL_ALLOC_AFTER", "-3"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    if (sim_open(bad[i][0], bad[i][1], NULL)) return;
    CHECK(T->device_count(S, &n, &err) == DEVBUF_ENODEV, "%s=%s accepted", bad[i][0], bad[i][1]);
    CHECK_HAS(err.message, bad[i][0]);
    CHECK_HAS(err.message, bad[i][1]);
    sim_close();
  }
}

static void test_host_alloc(void) {
  if (sim_open(NULL)) return;
  devbuf_error err = {0};
  void *h = NULL, *z1 = NULL, *z2 = NULL;
  CHECK_OK(T->host_alloc(S, 0, 10000, &h, &err), &err);
  CHECK(h != NULL && (uintptr_t)h % 4096 == 0, "host_alloc %p", h);
  memset(h, 1, 10000); /* host memory really is host-accessible */
  CHECK_OK(T->host_alloc(S, 0, 0, &z1, &err), &err);
  CHECK_OK(T->host_alloc(S, 0, 0, &z2, &err), &err);
  CHECK(z1 && z2 && z1 != z2, "size-0 host handles");
  /* Host staging memory works as a copy source/destination. */
  void *d = alloc_ok(0, 10000);
  CHECK_OK(T->copy_h2d(S, 0, d, 0, h, 10000, NULL, &err), &err);
  CHECK_OK(T->stream_synchronize(S, 0, NULL, &err), &err);
  free_ok(0, d);
  int local;
  CHECK(T->host_free(S, 0, &local, &err) == DEVBUF_EINVAL, "foreign host_free");
  CHECK_HAS(err.message, "not live sim host memory");
  CHECK_OK(T->host_free(S, 0, h, &err), &err);
  CHECK(T->host_free(S, 0, h, &err) == DEVBUF_EINVAL, "double host_free");
  CHECK_OK(T->host_free(S, 0, z1, &err), &err);
  CHECK_OK(T->host_free(S, 0, z2, &err), &err);
  sim_close();
}

/* Shutdown with work still queued and objects still alive: it drains,
 * joins and frees everything (LeakSanitizer checks the last part). */
static void test_shutdown_with_live_objects(void) {
  int base = thread_count();
  if (sim_open("DEVBUF_SIM_LATENCY_US", "20000", "DEVBUF_SIM_DEVICES", "2", NULL)) return;
  devbuf_error err = {0};
  static unsigned char buf[4096];
  void *s = NULL, *e = NULL, *h = NULL;
  CHECK_OK(T->stream_create(S, 0, &s, &err), &err);
  CHECK_OK(T->event_create(S, 1, &e, &err), &err);
  CHECK_OK(T->host_alloc(S, 1, 100, &h, &err), &err);
  void *a = alloc_ok(0, sizeof buf), *b = alloc_ok(1, sizeof buf);
  for (int i = 0; i < 5; i++) {
    CHECK_OK(T->copy_h2d(S, 0, a, 0, buf, sizeof buf, s, &err), &err);
    CHECK_OK(T->copy_h2d(S, 1, b, 0, buf, sizeof buf, NULL, &err), &err);
  }
  CHECK_OK(T->event_record(S, 1, e, NULL, &err), &err);
  CHECK_OK(T->stream_wait_event(S, 0, s, e, &err), &err);
  CHECK_OK(T->copy_d2h(S, 0, buf, a, 0, sizeof buf, s, &err), &err);
  CHECK_OK(T->mem_free(S, 1, b, NULL, &err), &err);
  sim_close();
  CHECK(thread_count() == base, "threads %d after shutdown, expected %d", thread_count(), base);
}

/* Several threads allocate, copy, record, wait and sync at once. */
typedef struct mt_arg {
  int id;
  void *shared_event;
  int failures;
} mt_arg;

static void *mt_worker(void *p) {
  mt_arg *arg = p;
  devbuf_error err = {0};
  void *s = NULL, *ev = NULL;
  unsigned char in[3000], out[3000];
  int use_default = arg->id % 3 == 0;
  int dev = arg->id % 2;
  if (!use_default && T->stream_create(S, dev, &s, &err)) arg->failures++;
  if (T->event_create(S, dev, &ev, &err)) arg->failures++;
  for (int it = 0; it < 150; it++) {
    size_t n = 1 + (size_t)((arg->id * 7919 + it * 104729) % 3000);
    void *a = NULL, *b = NULL;
    if (T->mem_alloc(S, dev, n, 0, s, &a, &err) || T->mem_alloc(S, dev, n, 512, s, &b, &err)) {
      arg->failures++;
      break;
    }
    fill(in, n, (unsigned)(arg->id * 1000 + it));
    memset(out, 0, n);
    int rc = T->copy_h2d(S, dev, a, 0, in, n, s, &err);
    rc |= T->copy_d2d(S, dev, b, 0, a, 0, n, s, &err);
    rc |= T->event_record(S, dev, ev, s, &err);
    rc |= T->copy_d2h(S, dev, out, b, 0, n, s, &err);
    if (it % 4 == 0) rc |= T->event_synchronize(S, dev, ev, &err);
    if (it % 5 == 0 && s) rc |= T->stream_wait_event(S, dev, s, arg->shared_event, &err);
    rc |= T->mem_free(S, dev, a, s, &err);
    rc |= T->stream_synchronize(S, dev, s, &err);
    rc |= T->mem_free(S, dev, b, s, &err);
    if (rc || !check_fill(out, n, (unsigned)(arg->id * 1000 + it))) arg->failures++;
  }
  if (s && T->stream_destroy(S, dev, s, &err)) arg->failures++;
  if (T->event_destroy(S, dev, ev, &err)) arg->failures++;
  return NULL;
}

static void test_multithreaded(void) {
  if (sim_open("DEVBUF_SIM_DEVICES", "2", "DEVBUF_SIM_MEMORY_MB", "64", NULL)) return;
  devbuf_error err = {0};
  enum { NT = 8 };
  void *shared = NULL;
  CHECK_OK(T->event_create(S, 0, &shared, &err), &err);
  CHECK_OK(T->event_record(S, 0, shared, NULL, &err), &err);
  pthread_t th[NT];
  mt_arg args[NT];
  for (int i = 0; i < NT; i++) {
    args[i] = (mt_arg){.id = i, .shared_event = shared};
    pthread_create(&th[i], NULL, mt_worker, &args[i]);
  }
  /* Meanwhile this thread keeps re-recording the shared event. */
  for (int i = 0; i < 200; i++) {
    if (T->event_record(S, 0, shared, NULL, &err)) break;
    if (i % 50 == 0) (void)T->event_query(S, 0, shared, NULL);
  }
  for (int i = 0; i < NT; i++) {
    pthread_join(th[i], NULL);
    CHECK(args[i].failures == 0, "thread %d: %d failures", i, args[i].failures);
  }
  CHECK_OK(T->stream_synchronize(S, 0, NULL, &err), &err);
  CHECK_OK(T->event_destroy(S, 0, shared, &err), &err);
  devbuf_device_props p = {.struct_size = sizeof p};
  for (int d = 0; d < 2; d++) {
    CHECK_OK(T->device_props(S, d, &p, &err), &err);
    CHECK(p.free_memory == p.total_memory, "device %d: %llu bytes still allocated", d,
          (unsigned long long)(p.total_memory - p.free_memory));
  }
  sim_close();
}

/* ---- main ---------------------------------------------------------------------- */

typedef struct test_case {
  const char *name;
  void (*fn)(void);
} test_case;

#define CASE(fn) {&(#fn)[5], fn} /* name without "test_" */
static const test_case cases[] = {
    CASE(test_table),         CASE(test_lazy_threads),
    CASE(test_props),         CASE(test_roundtrip),
    CASE(test_stale_before_sync), CASE(test_host_deref_faults),
    CASE(test_stream_order),  CASE(test_events_across_streams),
    CASE(test_fail_injection), CASE(test_exhaustion),
    CASE(test_free_errors),   CASE(test_bounds),
    CASE(test_device_info),   CASE(test_multi_device),
    CASE(test_no_device_and_bad_env), CASE(test_host_alloc),
    CASE(test_shutdown_with_live_objects), CASE(test_multithreaded),
};

static void *noop_thread(void *arg) { return arg; }

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PLUGIN.so [case...]\n", argv[0]);
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 1;
  }
  devbuf_plugin_entry_fn entry = (devbuf_plugin_entry_fn)dlsym(h, DEVBUF_PLUGIN_ENTRY_NAME);
  if (entry == NULL || (T = entry()) == NULL) {
    fprintf(stderr, "%s: no plugin table\n", argv[1]);
    return 1;
  }
  /* One throwaway thread first: ThreadSanitizer starts a helper thread at
   * the first pthread_create, which would upset the thread counts. */
  pthread_t warm;
  if (pthread_create(&warm, NULL, noop_thread, NULL) == 0) pthread_join(warm, NULL);
  size_t ncases = sizeof cases / sizeof *cases;
  for (size_t i = 0; i < ncases; i++) {
    int wanted = argc == 2;
    for (int k = 2; k < argc; k++) wanted |= strcmp(argv[k], cases[i].name) == 0;
    if (!wanted) continue;
    int before = devbuf_test_failed_checks;
    devbuf_test_current = cases[i].name;
    cases[i].fn();
    if (devbuf_test_failed_checks == before) {
      devbuf_test_passed++;
      printf("ok   %s\n", cases[i].name);
    } else {
      devbuf_test_failed++;
      printf("FAIL %s\n", cases[i].name);
    }
    fflush(stdout);
  }
  for (int k = 2; k < argc; k++) {
    int known = 0;
    for (size_t i = 0; i < ncases; i++) known |= strcmp(argv[k], cases[i].name) == 0;
    if (!known) {
      fprintf(stderr, "unknown case '%s'\n", argv[k]);
      return 2;
    }
  }
  if (devbuf_test_passed + devbuf_test_failed == 0) return 2;
  /* The plugin stays loaded: dlclose would hide leaks' stack frames. */
  return devbuf_test_finish();
}
