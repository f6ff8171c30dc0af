/* devbuf_conformance: one suite for every plugin, driven through the runtime
 * API (devbuf/runtime.h) and parametrised by a device identifier.
 *
 *   devbuf_conformance [--allow-no-device] [--check NAME]... IDENTIFIER[:ORDINAL]
 *
 * Prints one line per check ("PASS name", "FAIL name: why", "SKIP name:
 * why") and closes with "N passed, N failed, N skipped". Exit status 0 when
 * nothing failed. An identifier whose plugin has no device fails the run,
 * unless --allow-no-device is given: then the suite prints "no device,
 * because REASON", skips every check and exits 0 -- provided the plugin
 * loaded, answered DEVBUF_ENODEV and gave a reason. See docs/conformance.md.
 *
 * Every resource a check creates goes through the tracker below, so that a
 * failing check (which returns early) still synchronizes its streams before
 * its host buffers are freed, and releases everything: the final `no_leaks`
 * check compares the runtime's live counters with those at the start. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devbuf/format.h"
#include "devbuf/runtime.h"

enum { PASS = 0, FAIL = 1, SKIP = 2 };

/* Per check, in its own process (see run_isolated); --timeout changes it. */
#define DEFAULT_TIMEOUT_S 120

#define MAX_TRACKED 256

typedef struct ctx {
  const char *spec;
  devbuf_device dev;
  devbuf_device_props props;
  int count;            /* devices of the identifier */
  size_t plugin;        /* plugin index */
  int addresses;        /* device pointers are addresses (alignment is checkable) */
  int common_layout;    /* device_info is devbuf_device_info: a devbuf.* identifier, or
                           the runtime's default path (both device_info slots NULL) */
  int default_info;     /* the runtime's default device_info path */
  devbuf_error err;     /* scratch for calls */
  char why[1024];       /* reason of a FAIL or SKIP */
  /* tracked resources of the running check */
  void *mem[MAX_TRACKED];
  int nmem;
  void *streams[MAX_TRACKED];
  int nstreams;
  void *events[MAX_TRACKED];
  int nevents;
  void *host[MAX_TRACKED];
  int nhost;
} ctx;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static int result(ctx *c, int r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->why, sizeof c->why, fmt, ap);
  va_end(ap);
  return r;
}

/* What the running check is doing, for the FAIL line of a check whose
 * process dies (a crash, an abort, a hang): the runtime call about to be
 * made. In a check's child process it lies in memory shared with the
 * parent, which reads it after the child is gone; in-process it is unused.
 * Written from the check's own thread only (the threads check notes once
 * before its threads start). */
static char *g_doing;
enum { DOING_MAX = 512 };

static void doing(int line, const char *what) {
  if (g_doing != NULL) snprintf(g_doing, DOING_MAX, "line %d: %s", line, what);
}

/* Fail unless `cond`. */
#define REQUIRE(cond, ...)                                                                   \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      char m_[768];                                                                          \
      snprintf(m_, sizeof m_, __VA_ARGS__);                                                  \
      return result(c, FAIL, "line %d: %s", __LINE__, m_);                                   \
    }                                                                                        \
  } while (0)

/* Fail unless the runtime call succeeds; the call's error message is kept. */
#define OK(expr)                                                                             \
  do {                                                                                       \
    devbuf_error_clear(&c->err);                                                             \
    doing(__LINE__, #expr);                                                                  \
    int rc_ = (expr);                                                                        \
    if (rc_ != DEVBUF_OK)                                                                    \
      return result(c, FAIL, "line %d: %s returned %s: %s", __LINE__, #expr,                \
                    devbuf_status_name(rc_), c->err.message);                                \
  } while (0)

/* Evaluate a call expected to fail; its status lands in `rc`. */
#define CALL(rc, expr)          \
  do {                          \
    devbuf_error_clear(&c->err); \
    doing(__LINE__, #expr);     \
    (rc) = (expr);              \
  } while (0)

/* A failing call must name what went wrong. */
#define REQUIRE_FAILS(expr, ...)                                                             \
  do {                                                                                       \
    int rf_;                                                                                 \
    CALL(rf_, expr);                                                                         \
    REQUIRE(rf_ != DEVBUF_OK, "%s succeeded but must fail", #expr);                         \
    REQUIRE(c->err.message[0] != '\0', "%s failed (%s) without a message", #expr,           \
            devbuf_status_name(rf_));                                                        \
    int ok_ = 0;                                                                             \
    const int codes_[] = {__VA_ARGS__};                                                      \
    for (size_t i_ = 0; i_ < sizeof codes_ / sizeof codes_[0]; i_++) ok_ |= rf_ == codes_[i_]; \
    REQUIRE(ok_, "%s failed with %s, not an expected code: %s", #expr,                       \
            devbuf_status_name(rf_), c->err.message);                                        \
  } while (0)

/* ---- tracked resources ------------------------------------------------------ */

static int dalloc(ctx *c, size_t size, size_t alignment, void *stream, void **p) {
  *p = NULL;
  if (c->nmem == MAX_TRACKED) return devbuf_error_set(&c->err, DEVBUF_ENOMEM, "tracker full");
  int rc = devbuf_mem_alloc(&c->dev, size, alignment, stream, p, &c->err);
  if (rc == DEVBUF_OK) c->mem[c->nmem++] = *p;
  return rc;
}

/* Free a tracked allocation now. */
static int dfree(ctx *c, void *p, void *stream) {
  for (int i = 0; i < c->nmem; i++)
    if (c->mem[i] == p) {
      c->mem[i] = c->mem[--c->nmem];
      break;
    }
  return devbuf_mem_free(&c->dev, p, stream, &c->err);
}

static int snew(ctx *c, void **s) {
  *s = NULL;
  if (c->nstreams == MAX_TRACKED) return devbuf_error_set(&c->err, DEVBUF_ENOMEM, "tracker full");
  int rc = devbuf_stream_create(&c->dev, s, &c->err);
  if (rc == DEVBUF_OK) c->streams[c->nstreams++] = *s;
  return rc;
}

static int enew(ctx *c, void **e) {
  *e = NULL;
  if (c->nevents == MAX_TRACKED) return devbuf_error_set(&c->err, DEVBUF_ENOMEM, "tracker full");
  int rc = devbuf_event_create(&c->dev, e, &c->err);
  if (rc == DEVBUF_OK) c->events[c->nevents++] = *e;
  return rc;
}

/* Host memory, zeroed; freed after the check once every stream is idle
 * (asynchronous copies may still read or write it until then). */
static unsigned char *hbuf(ctx *c, size_t n) {
  if (c->nhost == MAX_TRACKED) return NULL;
  unsigned char *p = calloc(1, n ? n : 1);
  if (p) c->host[c->nhost++] = p;
  return p;
}

static void release_all(ctx *c) {
  devbuf_error e;
  doing(__LINE__, "release_all: synchronizing the check's streams, then destroying and freeing "
                  "what it created");
  for (int i = 0; i < c->nstreams; i++) devbuf_stream_synchronize(&c->dev, c->streams[i], &e);
  devbuf_stream_synchronize(&c->dev, NULL, &e);
  for (int i = 0; i < c->nevents; i++) devbuf_event_destroy(&c->dev, c->events[i], &e);
  for (int i = 0; i < c->nmem; i++) devbuf_mem_free(&c->dev, c->mem[i], NULL, &e);
  devbuf_stream_synchronize(&c->dev, NULL, &e);
  for (int i = 0; i < c->nstreams; i++) devbuf_stream_destroy(&c->dev, c->streams[i], &e);
  for (int i = 0; i < c->nhost; i++) free(c->host[i]);
  c->nmem = c->nstreams = c->nevents = c->nhost = 0;
}

/* ---- helpers ---------------------------------------------------------------- */

/* A deterministic byte pattern, distinct per seed. */
static void fill(unsigned char *p, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 0x9e3779b9u;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = (unsigned char)(x >> 11);
  }
}

/* Where two buffers first differ, or -1. */
static long first_diff(const unsigned char *a, const unsigned char *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i]) return (long)i;
  return -1;
}

#define REQUIRE_SAME(got, want, n, what)                                                      \
  do {                                                                                        \
    long d_ = first_diff((got), (want), (n));                                                 \
    REQUIRE(d_ < 0, "%s: byte %ld is 0x%02x, expected 0x%02x", what, d_,                      \
            d_ >= 0 ? (got)[d_] : 0, d_ >= 0 ? (want)[d_] : 0);                                \
  } while (0)

static int is_pow2(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

/* ---- checks ---------------------------------------------------------------------- */

static int check_properties(ctx *c) {
  const devbuf_device_props *p = &c->props;
  REQUIRE(c->count >= 1, "device count %d", c->count);
  REQUIRE(p->struct_size >= offsetof(devbuf_device_props, reserved), "struct_size %u",
          p->struct_size);
  REQUIRE(memchr(p->name, '\0', sizeof p->name) != NULL, "name not NUL-terminated");
  REQUIRE(memchr(p->vendor, '\0', sizeof p->vendor) != NULL, "vendor not NUL-terminated");
  REQUIRE(p->name[0] != '\0', "empty device name");
  REQUIRE(p->total_memory == 0 || p->free_memory <= p->total_memory,
          "free memory %llu > total %llu", (unsigned long long)p->free_memory,
          (unsigned long long)p->total_memory);
  REQUIRE(is_pow2(p->alloc_alignment), "alloc_alignment %u is not a power of two",
          p->alloc_alignment);
  /* The runtime's rule (core/src/backend.c): -1, or a DLDeviceType of devbuf/dlpack.h. */
  REQUIRE(p->dlpack_device_type == -1 ||
              (p->dlpack_device_type >= 1 && p->dlpack_device_type <= 4) ||
              (p->dlpack_device_type >= 7 && p->dlpack_device_type <= 21),
          "dlpack_device_type %d is not a DLDeviceType", p->dlpack_device_type);
  REQUIRE(p->dlpack_device_type != DEVBUF_DL_CPU || (p->flags & DEVBUF_DEVICE_HOST_ACCESSIBLE),
          "dlpack type kDLCPU but not host-accessible");
  REQUIRE((p->flags & ~(uint32_t)(DEVBUF_DEVICE_HOST_ACCESSIBLE | DEVBUF_DEVICE_UNIFIED |
                                  DEVBUF_DEVICE_ASYNC)) == 0,
          "unknown flags 0x%x", p->flags);
  /* Every ordinal answers. */
  for (int i = 0; i < c->count; i++) {
    devbuf_device d;
    devbuf_device_props q;
    OK(devbuf_device_open_ordinal(c->dev.identifier, i, &d, &c->err));
    OK(devbuf_device_props_get(&d, &q, &c->err));
    REQUIRE(q.name[0] != '\0', "device %d has an empty name", i);
  }
  return result(c, PASS, "%s, %s, %d device(s), alignment %u, dlpack %d", p->name, p->vendor,
                c->count, p->alloc_alignment, p->dlpack_device_type);
}

static int check_alloc_free(ctx *c) {
  static const size_t sizes[] = {0, 0, 1, 3, 64, 4096, 65537, (size_t)1 << 20};
  enum { NS = sizeof sizes / sizeof sizes[0] };
  void *p[NS];
  devbuf_stats before, during, after;
  OK(devbuf_plugin_stats(c->plugin, &before, &c->err));
  for (int i = 0; i < NS; i++) {
    OK(dalloc(c, sizes[i], 0, NULL, &p[i]));
    REQUIRE(p[i] != NULL, "size %zu: NULL pointer", sizes[i]);
    for (int j = 0; j < i; j++)
      REQUIRE(p[j] != p[i], "allocations %d and %d (sizes %zu, %zu) share handle %p", j, i,
              sizes[j], sizes[i], p[i]);
  }
  OK(devbuf_plugin_stats(c->plugin, &during, &c->err));
  REQUIRE(during.live_allocations == before.live_allocations + NS, "live allocations %llu, want %llu",
          (unsigned long long)during.live_allocations,
          (unsigned long long)(before.live_allocations + NS));
  for (int i = NS - 1; i >= 0; i--) OK(dfree(c, p[i], NULL));
  OK(devbuf_plugin_stats(c->plugin, &after, &c->err));
  REQUIRE(after.live_allocations == before.live_allocations &&
              after.live_bytes == before.live_bytes,
          "after free: %llu allocations, %llu bytes live (before: %llu, %llu)",
          (unsigned long long)after.live_allocations, (unsigned long long)after.live_bytes,
          (unsigned long long)before.live_allocations, (unsigned long long)before.live_bytes);
  /* Ordered on a created stream; used on it at once, freed on it. */
  void *s, *q;
  unsigned char *h = hbuf(c, 4096), *back = hbuf(c, 4096);
  REQUIRE(h && back, "host memory");
  fill(h, 4096, 11);
  OK(snew(c, &s));
  OK(dalloc(c, 4096, 0, s, &q));
  OK(devbuf_copy_h2d(&c->dev, q, 0, h, 4096, s, &c->err));
  OK(devbuf_copy_d2h(&c->dev, back, q, 0, 4096, s, &c->err));
  OK(dfree(c, q, s));
  OK(devbuf_stream_synchronize(&c->dev, s, &c->err));
  REQUIRE_SAME(back, h, 4096, "stream-ordered allocation");
  return PASS;
}

static int check_alloc_alignment(ctx *c) {
  size_t def = c->props.alloc_alignment ? c->props.alloc_alignment : 1;
  for (size_t a = 0; a <= 65536; a = a ? a * 2 : 1) {
    void *p;
    OK(dalloc(c, 100, a, NULL, &p));
    size_t want = a > def ? a : def;
    if (c->addresses)
      REQUIRE(((uintptr_t)p & (want - 1)) == 0, "alignment %zu: pointer %p not %zu-aligned", a, p,
              want);
  }
  REQUIRE_FAILS(dalloc(c, 100, 3, NULL, &(void *){NULL}), DEVBUF_EINVAL);
  REQUIRE_FAILS(dalloc(c, 100, 48, NULL, &(void *){NULL}), DEVBUF_EINVAL);
  if (!c->addresses)
    return result(c, PASS, "pointers are handles (dlpack type %d): only accepted/refused checked",
                  c->props.dlpack_device_type);
  return PASS;
}

static int check_alloc_absurd(ctx *c) {
  const size_t sizes[] = {SIZE_MAX, SIZE_MAX / 2 + 1, (size_t)1 << 50};
  char example[DEVBUF_ERROR_MESSAGE_SIZE] = "";
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = (void *)&p; /* must come back NULL */
    int rc;
    CALL(rc, devbuf_mem_alloc(&c->dev, sizes[i], 0, NULL, &p, &c->err));
    if (rc == DEVBUF_OK) {
      devbuf_mem_free(&c->dev, p, NULL, &c->err);
      /* 1 PiB might exist one day; SIZE_MAX never will. */
      REQUIRE(sizes[i] == (size_t)1 << 50, "allocating %zu bytes succeeded", sizes[i]);
      continue;
    }
    REQUIRE(rc == DEVBUF_ENOMEM || rc == DEVBUF_EINVAL, "%zu bytes: %s (want ENOMEM or EINVAL): %s",
            sizes[i], devbuf_status_name(rc), c->err.message);
    REQUIRE(c->err.message[0] != '\0', "%zu bytes: no message", sizes[i]);
    REQUIRE(p == NULL, "%zu bytes: failed but *ptr is %p, not NULL", sizes[i], p);
    if (i == 0) snprintf(example, sizeof example, "%s", c->err.message);
  }
  /* The device still works. */
  unsigned char *h = hbuf(c, 256), *back = hbuf(c, 256);
  void *q;
  REQUIRE(h && back, "host memory");
  fill(h, 256, 5);
  OK(dalloc(c, 256, 0, NULL, &q));
  OK(devbuf_copy_h2d(&c->dev, q, 0, h, 256, NULL, &c->err));
  OK(devbuf_copy_d2h(&c->dev, back, q, 0, 256, NULL, &c->err));
  OK(devbuf_stream_synchronize(&c->dev, NULL, &c->err));
  REQUIRE_SAME(back, h, 256, "after failed allocations");
  return result(c, PASS, "e.g. \"%s\"", example);
}

/* h2d then d2h of a whole buffer, on the default stream and on a created one. */
static int check_copy_roundtrip(ctx *c) {
  enum { N = 1 << 20 };
  for (int k = 0; k < 2; k++) {
    void *s = NULL, *d;
    if (k == 1) OK(snew(c, &s));
    unsigned char *h = hbuf(c, N), *back = hbuf(c, N);
    REQUIRE(h && back, "host memory");
    fill(h, N, 100 + (uint32_t)k);
    memset(back, 0xEE, N);
    OK(dalloc(c, N, 0, s, &d));
    OK(devbuf_copy_h2d(&c->dev, d, 0, h, N, s, &c->err));
    OK(devbuf_copy_d2h(&c->dev, back, d, 0, N, s, &c->err));
    OK(devbuf_stream_synchronize(&c->dev, s, &c->err));
    REQUIRE_SAME(back, h, N, k ? "created stream" : "default stream");
  }
  return PASS;
}

/* Every direction with offsets, checked against a host model. */
static int check_copy_offsets(ctx *c) {
  enum { NA = 65536, NB = 40000 };
  void *s, *a, *b;
  OK(snew(c, &s));
  OK(dalloc(c, NA, 0, s, &a));
  OK(dalloc(c, NB, 0, s, &b));
  unsigned char *ma = hbuf(c, NA), *mb = hbuf(c, NB); /* models */
  unsigned char *p = hbuf(c, NA), *q = hbuf(c, 3000), *r = hbuf(c, NB);
  unsigned char *got_a = hbuf(c, NA), *got_b = hbuf(c, NB), *part = hbuf(c, 5000);
  REQUIRE(ma && mb && p && q && r && got_a && got_b && part, "host memory");
  fill(p, NA, 1);
  fill(q, 3000, 2);
  fill(r, NB, 3);
  /* a = p; b = r; a[1000..4000) = q */
  OK(devbuf_copy_h2d(&c->dev, a, 0, p, NA, s, &c->err));
  memcpy(ma, p, NA);
  OK(devbuf_copy_h2d(&c->dev, b, 0, r, NB, s, &c->err));
  memcpy(mb, r, NB);
  OK(devbuf_copy_h2d(&c->dev, a, 1000, q, 3000, s, &c->err));
  memcpy(ma + 1000, q, 3000);
  /* d2d across buffers with both offsets: b[123..8123) = a[500..8500) */
  OK(devbuf_copy_d2d(&c->dev, b, 123, a, 500, 8000, s, &c->err));
  memcpy(mb + 123, ma + 500, 8000);
  /* d2d inside one buffer, disjoint ranges: a[60000..61000) = a[10..1010) */
  OK(devbuf_copy_d2d(&c->dev, a, 60000, a, 10, 1000, s, &c->err));
  memmove(ma + 60000, ma + 10, 1000);
  /* ends of the buffers, and empty copies at the very end */
  OK(devbuf_copy_d2d(&c->dev, a, NA - 7, b, NB - 7, 7, s, &c->err));
  memcpy(ma + NA - 7, mb + NB - 7, 7);
  OK(devbuf_copy_h2d(&c->dev, a, NA, p, 0, s, &c->err));
  OK(devbuf_copy_d2h(&c->dev, part, a, NA, 0, s, &c->err));
  OK(devbuf_copy_d2d(&c->dev, b, NB, a, NA, 0, s, &c->err));
  /* d2h with an offset */
  OK(devbuf_copy_d2h(&c->dev, part, b, 100, 5000, s, &c->err));
  OK(devbuf_copy_d2h(&c->dev, got_a, a, 0, NA, s, &c->err));
  OK(devbuf_copy_d2h(&c->dev, got_b, b, 0, NB, s, &c->err));
  OK(devbuf_stream_synchronize(&c->dev, s, &c->err));
  REQUIRE_SAME(got_a, ma, NA, "buffer a");
  REQUIRE_SAME(got_b, mb, NB, "buffer b");
  REQUIRE_SAME(part, mb + 100, 5000, "d2h at offset 100");
  return PASS;
}

/* Many dependent operations on one stream, no sync in between: each host
 * source is distinct and stays alive, so only ordering can break content. */
static int check_stream_ordering(ctx *c) {
  enum { N = 1 << 18, OPS = 96 };
  void *s, *x, *y;
  OK(snew(c, &s));
  OK(dalloc(c, N, 0, s, &x));
  OK(dalloc(c, N, 0, s, &y));
  unsigned char *mx = hbuf(c, N), *my = hbuf(c, N), *gx = hbuf(c, N), *gy = hbuf(c, N);
  unsigned char *init = hbuf(c, N);
  REQUIRE(mx && my && gx && gy && init, "host memory");
  fill(init, N, 77);
  OK(devbuf_copy_h2d(&c->dev, x, 0, init, N, s, &c->err));
  OK(devbuf_copy_h2d(&c->dev, y, 0, init, N, s, &c->err));
  memcpy(mx, init, N);
  memcpy(my, init, N);
  uint32_t rng = 12345;
  for (int i = 0; i < OPS; i++) {
    rng = rng * 1103515245u + 12345u;
    size_t len = 1 + (rng >> 8) % 20000;
    size_t o1 = ((rng >> 3) * 7919u) % (N - len), o2 = ((rng >> 5) * 104729u) % (N - len);
    switch (i % 3) {
      case 0: { /* fresh host data into x */
        unsigned char *src = hbuf(c, len);
        REQUIRE(src, "host memory");
        fill(src, len, 1000 + (uint32_t)i);
        OK(devbuf_copy_h2d(&c->dev, x, o1, src, len, s, &c->err));
        memcpy(mx + o1, src, len);
        break;
      }
      case 1: /* x -> y */
        OK(devbuf_copy_d2d(&c->dev, y, o2, x, o1, len, s, &c->err));
        memcpy(my + o2, mx + o1, len);
        break;
      default: /* y -> x */
        OK(devbuf_copy_d2d(&c->dev, x, o1, y, o2, len, s, &c->err));
        memcpy(mx + o1, my + o2, len);
        break;
    }
  }
  OK(devbuf_copy_d2h(&c->dev, gx, x, 0, N, s, &c->err));
  OK(devbuf_copy_d2h(&c->dev, gy, y, 0, N, s, &c->err));
  OK(devbuf_stream_synchronize(&c->dev, s, &c->err));
  REQUIRE_SAME(gx, mx, N, "x after the sequence");
  REQUIRE_SAME(gy, my, N, "y after the sequence");
  return result(c, PASS, "%d operations", OPS + 4);
}

/* Stream B consumes what stream A produced, ordered only by an event. */
static int check_events_across_streams(ctx *c) {
  enum { N = 4 << 20 };
  void *sa, *sb, *e, *x, *y;
  OK(snew(c, &sa));
  OK(snew(c, &sb));
  OK(enew(c, &e));
  OK(dalloc(c, N, 0, NULL, &x));
  OK(dalloc(c, N, 0, NULL, &y));
  OK(devbuf_stream_synchronize(&c->dev, NULL, &c->err)); /* allocations visible to A and B */
  unsigned char *h = hbuf(c, N), *g = hbuf(c, N), *g2 = hbuf(c, N);
  REQUIRE(h && g && g2, "host memory");
  fill(h, N, 21);
  /* round 1: A writes x; B waits, reads x */
  OK(devbuf_copy_h2d(&c->dev, x, 0, h, N, sa, &c->err));
  OK(devbuf_event_record(&c->dev, e, sa, &c->err));
  OK(devbuf_stream_wait_event(&c->dev, sb, e, &c->err));
  OK(devbuf_copy_d2h(&c->dev, g, x, 0, N, sb, &c->err));
  OK(devbuf_stream_synchronize(&c->dev, sb, &c->err)); /* B only */
  REQUIRE_SAME(g, h, N, "B's read of A's write");
  /* B finished after waiting on e, so e is complete. */
  OK(devbuf_event_query(&c->dev, e, &c->err));
  OK(devbuf_event_synchronize(&c->dev, e, &c->err));
  /* round 2: the same event recorded again, after a d2d on A */
  OK(devbuf_copy_d2d(&c->dev, y, 0, x, 1, N - 1, sa, &c->err));
  OK(devbuf_event_record(&c->dev, e, sa, &c->err));
  OK(devbuf_stream_wait_event(&c->dev, sb, e, &c->err));
  OK(devbuf_copy_d2h(&c->dev, g2, y, 0, N - 1, sb, &c->err));
  OK(devbuf_stream_synchronize(&c->dev, sb, &c->err));
  REQUIRE_SAME(g2, h + 1, N - 1, "B's read after the event was recorded again");
  /* the default stream can wait too */
  OK(devbuf_event_record(&c->dev, e, sb, &c->err));
  OK(devbuf_stream_wait_event(&c->dev, NULL, e, &c->err));
  OK(devbuf_stream_synchronize(&c->dev, NULL, &c->err));
  return PASS;
}

/* The host reads only after an event (not the stream) says the copy is done. */
static int check_sync_before_host_read(ctx *c) {
  enum { N = 2 << 20 };
  void *s, *e, *d;
  OK(snew(c, &s));
  OK(enew(c, &e));
  OK(dalloc(c, N, 0, s, &d));
  unsigned char *h = hbuf(c, N), *g1 = hbuf(c, N), *g2 = hbuf(c, N);
  REQUIRE(h && g1 && g2, "host memory");
  fill(h, N, 31);
  OK(devbuf_copy_h2d(&c->dev, d, 0, h, N, s, &c->err));
  OK(devbuf_copy_d2h(&c->dev, g1, d, 0, N, s, &c->err));
  OK(devbuf_event_record(&c->dev, e, s, &c->err));
  OK(devbuf_event_synchronize(&c->dev, e, &c->err));
  REQUIRE_SAME(g1, h, N, "after event_synchronize");
  /* polling: EBUSY until done, then OK */
  OK(devbuf_copy_d2h(&c->dev, g2, d, 0, N, s, &c->err));
  OK(devbuf_event_record(&c->dev, e, s, &c->err));
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int busy = 0;
  for (;;) {
    int rc;
    CALL(rc, devbuf_event_query(&c->dev, e, &c->err));
    if (rc == DEVBUF_OK) break;
    REQUIRE(rc == DEVBUF_EBUSY, "event_query returned %s: %s", devbuf_status_name(rc),
            c->err.message);
    busy++;
    clock_gettime(CLOCK_MONOTONIC, &t);
    REQUIRE(t.tv_sec - t0.tv_sec < 60, "event still busy after 60 s");
    nanosleep(&(struct timespec){0, 100000}, NULL);
  }
  REQUIRE_SAME(g2, h, N, "after event_query said done");
  return result(c, PASS, "event_query polled busy %d time(s)", busy);
}

/* Pinned (or plain) host staging from the runtime. Once host_alloc has
 * succeeded, every step runs only while the previous ones did, and the
 * staging buffer is freed whatever failed: an early return would leave it
 * alive for no_leaks to blame on this check. Each step is noted with
 * doing(), so that a crash names the call it happened in. */
static int check_host_staging(ctx *c) {
  enum { N = 1 << 20 };
  void *hp = NULL, *d = NULL;
  unsigned char *h = hbuf(c, N);
  REQUIRE(h, "host memory");
  fill(h, N, 41);
  OK(devbuf_host_alloc(&c->dev, N, &hp, &c->err));
  REQUIRE(hp != NULL, "host_alloc gave NULL");
  int rc = DEVBUF_OK, line = 0;
  const char *what = "";
  devbuf_error_clear(&c->err);
#define STAGING_STEP(expr)  \
  if (rc == DEVBUF_OK) {    \
    line = __LINE__;        \
    what = #expr;           \
    doing(__LINE__, #expr); \
    rc = (expr);            \
  }
  STAGING_STEP(dalloc(c, N, 0, NULL, &d))
  STAGING_STEP(devbuf_copy_h2d(&c->dev, d, 0, h, N, NULL, &c->err))
  STAGING_STEP(devbuf_copy_d2h(&c->dev, hp, d, 0, N, NULL, &c->err))
  STAGING_STEP(devbuf_stream_synchronize(&c->dev, NULL, &c->err))
#undef STAGING_STEP
  long diff = rc ? -1 : first_diff(hp, h, N);
  devbuf_error e2;
  devbuf_error_clear(&e2);
  doing(__LINE__, "devbuf_host_free(&c->dev, hp, &e2)");
  int frc = devbuf_host_free(&c->dev, hp, &e2);
  if (rc != DEVBUF_OK)
    return result(c, FAIL, "line %d: %s returned %s: %s", line, what, devbuf_status_name(rc),
                  c->err.message);
  REQUIRE(diff < 0, "staging buffer differs at byte %ld", diff);
  REQUIRE(frc == DEVBUF_OK, "host_free: %s", e2.message);
  return PASS;
}

static int check_device_info_roundtrip(ctx *c) {
  enum { N = 1 << 20 };
  void *s, *e, *d, *sc;
  OK(snew(c, &s));
  OK(snew(c, &sc));
  OK(enew(c, &e));
  OK(dalloc(c, N, 0, s, &d));
  unsigned char *h = hbuf(c, N), *g = hbuf(c, N);
  REQUIRE(h && g, "host memory");
  fill(h, N, 51);
  /* producer: write on s, record e, export */
  OK(devbuf_copy_h2d(&c->dev, d, 0, h, N, s, &c->err));
  OK(devbuf_event_record(&c->dev, e, s, &c->err));
  _Alignas(16) unsigned char blob[512];
  size_t size = 0;
  memset(blob, 0, sizeof blob);
  OK(devbuf_device_info_export(&c->dev, e, s, 0, blob, sizeof blob, &size, &c->err));
  REQUIRE(size > 0 && size <= sizeof blob, "export wrote %zu bytes", size);
  if (c->common_layout) {
    devbuf_device_info di;
    REQUIRE(size >= sizeof di, "devbuf_device_info of %zu bytes < %zu", size, sizeof di);
    memcpy(&di, blob, sizeof di);
    REQUIRE(di.struct_size == size && di.version == DEVBUF_DEVICE_INFO_VERSION,
            "header: struct_size %u version %u", di.struct_size, di.version);
    REQUIRE(di.device_ordinal == c->dev.ordinal, "ordinal %d", di.device_ordinal);
    REQUIRE(di.reserved0 == 0, "reserved0 not zero");
    for (int i = 0; i < 6; i++) REQUIRE(di.reserved[i] == 0, "reserved[%d] not zero", i);
    REQUIRE(((di.flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE) != 0) ==
                ((c->props.flags & DEVBUF_DEVICE_HOST_ACCESSIBLE) != 0),
            "HOST_ACCESSIBLE flag disagrees with the device's properties");
  }
  /* consumer: import, wait on its event on another stream, read */
  devbuf_device_info_desc desc;
  devbuf_device dev2;
  memset(&desc, 0, sizeof desc);
  OK(devbuf_device_info_import(c->dev.identifier, blob, &desc, &dev2, &c->err));
  REQUIRE(dev2.identifier == c->dev.identifier && dev2.ordinal == c->dev.ordinal &&
              dev2.backend == c->dev.backend,
          "import opened %s:%d, not %s:%d", dev2.identifier, dev2.ordinal, c->dev.identifier,
          c->dev.ordinal);
  REQUIRE(desc.device_ordinal == c->dev.ordinal, "desc ordinal %d", desc.device_ordinal);
  if (desc.event) OK(devbuf_stream_wait_event(&dev2, sc, desc.event, &c->err));
  OK(devbuf_copy_d2h(&dev2, g, d, 0, N, sc, &c->err));
  OK(devbuf_stream_synchronize(&dev2, sc, &c->err));
  REQUIRE_SAME(g, h, N, "consumer read after the device_info event");
  int had_event = desc.event != NULL;
  if (desc.event) OK(devbuf_event_synchronize(&dev2, desc.event, &c->err));
  /* no event: nothing to wait on; READONLY survives */
  OK(devbuf_stream_synchronize(&c->dev, s, &c->err));
  OK(devbuf_device_info_export(&c->dev, NULL, NULL, DEVBUF_DEVICE_INFO_READONLY, blob,
                               sizeof blob, &size, &c->err));
  memset(&desc, 0xAB, sizeof desc);
  OK(devbuf_device_info_import(c->dev.identifier, blob, &desc, &dev2, &c->err));
  REQUIRE(desc.event == NULL, "export without event imported with event %p", desc.event);
  REQUIRE(desc.flags & DEVBUF_DEVICE_INFO_READONLY, "READONLY lost (flags 0x%x)", desc.flags);
  return result(c, PASS, "%zu bytes; the producer's event came through as %s", size,
                had_event ? "an event" : "NULL (data ready at export)");
}

static int check_device_info_invalid(ctx *c) {
  _Alignas(16) unsigned char good[512], bad[512];
  size_t size = 0;
  memset(good, 0, sizeof good);
  OK(devbuf_device_info_export(&c->dev, NULL, NULL, 0, good, sizeof good, &size, &c->err));
  devbuf_device_info_desc desc;
  devbuf_device dev2;
  OK(devbuf_device_info_import(c->dev.identifier, good, &desc, &dev2, &c->err));
  REQUIRE_FAILS(devbuf_device_info_import(c->dev.identifier, NULL, &desc, &dev2, &c->err),
                DEVBUF_EINVAL);
  /* export must refuse a buffer too small, writing nothing past it */
  memset(bad, 0x5A, sizeof bad);
  REQUIRE_FAILS(devbuf_device_info_export(&c->dev, NULL, NULL, 0, bad, 4, &size, &c->err),
                DEVBUF_EINVAL);
  for (size_t i = 4; i < sizeof bad; i++) REQUIRE(bad[i] == 0x5A, "export wrote byte %zu past capacity 4", i);
  if (!c->common_layout)
    return result(c, PASS, "layout-specific mutations skipped: %s has its own device_info "
                  "layout (not devbuf.*, and the plugin implements device_info_export)",
                  c->dev.identifier);
  /* Readable memory the plugin never handed out: an import that trusts the
   * handle would wait on it; one that dereferences it does not crash. */
  static unsigned char never_made[64];
  /* The devbuf_device_info layout: each corruption must be refused. */
  struct {
    const char *what;
    size_t off;
    int64_t value;
    int width;
    int default_only; /* a promise of the runtime's default path; a plugin's own import
                         may accept handles made elsewhere (OpenCL's cl_event) */
  } muts[] = {
      {"struct_size 0", offsetof(devbuf_device_info, struct_size), 0, 4, 0},
      {"struct_size 8", offsetof(devbuf_device_info, struct_size), 8, 4, 0},
      {"version 0", offsetof(devbuf_device_info, version), 0, 2, 0},
      {"version 99", offsetof(devbuf_device_info, version), 99, 2, 0},
      {"reserved0 1", offsetof(devbuf_device_info, reserved0), 1, 2, 0},
      {"device_ordinal -1", offsetof(devbuf_device_info, device_ordinal), -1, 4, 0},
      {"device_ordinal = count", offsetof(devbuf_device_info, device_ordinal), c->count, 4, 0},
      {"device_ordinal 1<<30", offsetof(devbuf_device_info, device_ordinal), 1 << 30, 4, 0},
      {"reserved[0] 1", offsetof(devbuf_device_info, reserved), 1, 8, 0},
      {"reserved[5] nonzero", offsetof(devbuf_device_info, reserved) + 5 * 8, 0x100000000LL, 8, 0},
      {"unknown flag 0x80", offsetof(devbuf_device_info, flags), 0x80, 4, 0},
      {"unknown flag 0x80000000", offsetof(devbuf_device_info, flags), (int32_t)0x80000000u, 4, 0},
      {"an event the plugin never made", offsetof(devbuf_device_info, event),
       (int64_t)(intptr_t)never_made, 8, 1},
      {"a stream the plugin never made", offsetof(devbuf_device_info, stream),
       (int64_t)(intptr_t)(never_made + 32), 8, 1},
  };
  size_t tried = 0;
  for (size_t i = 0; i < sizeof muts / sizeof muts[0]; i++) {
    if (muts[i].default_only && !c->default_info) continue;
    tried++;
    memcpy(bad, good, sizeof bad);
    if (muts[i].width == 2) {
      uint16_t v = (uint16_t)muts[i].value;
      memcpy(bad + muts[i].off, &v, 2);
    } else if (muts[i].width == 4) {
      int32_t v = (int32_t)muts[i].value;
      memcpy(bad + muts[i].off, &v, 4);
    } else {
      memcpy(bad + muts[i].off, &muts[i].value, 8);
    }
    int rc;
    CALL(rc, devbuf_device_info_import(c->dev.identifier, bad, &desc, &dev2, &c->err));
    REQUIRE(rc != DEVBUF_OK, "import accepted a device_info with %s", muts[i].what);
    REQUIRE(c->err.message[0] != '\0', "%s refused without a message", muts[i].what);
  }
  /* A larger struct from a newer writer is accepted (its tail ignored). */
  memcpy(bad, good, sizeof bad);
  uint32_t bigger = (uint32_t)sizeof(devbuf_device_info) + 64;
  memcpy(bad, &bigger, 4);
  OK(devbuf_device_info_import(c->dev.identifier, bad, &desc, &dev2, &c->err));
  return result(c, PASS, "%zu corruptions refused", tried);
}

static int check_error_bad_ordinal(ctx *c) {
  devbuf_device d;
  REQUIRE_FAILS(devbuf_device_open_ordinal(c->dev.identifier, c->count, &d, &c->err), DEVBUF_ENODEV,
                DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_device_open_ordinal(c->dev.identifier, -1, &d, &c->err), DEVBUF_ENODEV,
                DEVBUF_EINVAL);
  char spec[128];
  snprintf(spec, sizeof spec, "%s:%d", c->dev.identifier, c->count + 7);
  REQUIRE_FAILS(devbuf_device_open(spec, &d, &c->err), DEVBUF_ENODEV, DEVBUF_EINVAL);
  snprintf(spec, sizeof spec, "%s:x", c->dev.identifier);
  REQUIRE_FAILS(devbuf_device_open(spec, &d, &c->err), DEVBUF_EINVAL);
  /* a forged handle with a bad ordinal is refused by every call */
  devbuf_device forged = c->dev;
  forged.ordinal = c->count;
  void *p = NULL;
  devbuf_device_props props;
  unsigned char h[16] = {0};
  REQUIRE_FAILS(devbuf_mem_alloc(&forged, 16, 0, NULL, &p, &c->err), DEVBUF_ENODEV, DEVBUF_EINVAL);
  REQUIRE(p == NULL, "failed alloc set *ptr");
  REQUIRE_FAILS(devbuf_device_props_get(&forged, &props, &c->err), DEVBUF_ENODEV, DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_stream_synchronize(&forged, NULL, &c->err), DEVBUF_ENODEV, DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_copy_h2d(&forged, h, 0, h, 16, NULL, &c->err), DEVBUF_ENODEV, DEVBUF_EINVAL);
  forged.ordinal = -1;
  REQUIRE_FAILS(devbuf_stream_create(&forged, &p, &c->err), DEVBUF_ENODEV, DEVBUF_EINVAL);
  return PASS;
}

static int check_error_copy_out_of_bounds(ctx *c) {
  enum { N = 64 };
  void *d, *d2;
  unsigned char *h = hbuf(c, 4096), *g = hbuf(c, 4096), *junk = hbuf(c, 4096);
  REQUIRE(h && g && junk, "host memory");
  fill(h, N, 61);
  fill(junk, 4096, 62);
  OK(dalloc(c, N, 0, NULL, &d));
  OK(dalloc(c, N, 0, NULL, &d2));
  OK(devbuf_copy_h2d(&c->dev, d, 0, h, N, NULL, &c->err));
  OK(devbuf_copy_h2d(&c->dev, d2, 0, h, N, NULL, &c->err));
  OK(devbuf_stream_synchronize(&c->dev, NULL, &c->err));
  /* The runtime knows every allocation's size, so every plugin must refuse
   * these before touching memory. */
  REQUIRE_FAILS(devbuf_copy_h2d(&c->dev, d, 0, junk, N + 1, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_copy_h2d(&c->dev, d, 60, junk, 8, NULL, &c->err), DEVBUF_EINVAL);
  char example[DEVBUF_ERROR_MESSAGE_SIZE];
  snprintf(example, sizeof example, "%s", c->err.message);
  REQUIRE_FAILS(devbuf_copy_h2d(&c->dev, d, N + 1, junk, 0, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_copy_h2d(&c->dev, d, SIZE_MAX - 2, junk, 4, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_copy_d2h(&c->dev, g, d, 0, N + 1, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_copy_d2h(&c->dev, g, d, 63, 2, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_copy_d2d(&c->dev, d2, 0, d, 1, N, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_copy_d2d(&c->dev, d2, 1, d, 0, N, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_copy_d2d(&c->dev, d2, SIZE_MAX, d, 0, 1, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_copy_h2d(&c->dev, d, 0, NULL, 8, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_copy_d2h(&c->dev, NULL, d, 0, 8, NULL, &c->err), DEVBUF_EINVAL);
  /* nothing was written by the refused copies */
  OK(devbuf_copy_d2h(&c->dev, g, d, 0, N, NULL, &c->err));
  OK(devbuf_copy_d2h(&c->dev, g + N, d2, 0, N, NULL, &c->err));
  OK(devbuf_stream_synchronize(&c->dev, NULL, &c->err));
  REQUIRE_SAME(g, h, N, "buffer after refused copies");
  REQUIRE_SAME(g + N, h, N, "second buffer after refused copies");
  return result(c, PASS, "e.g. \"%s\"", example);
}

static int check_error_free(ctx *c) {
  int rc;
  CALL(rc, devbuf_mem_free(&c->dev, NULL, NULL, &c->err));
  REQUIRE(rc == DEVBUF_OK || rc == DEVBUF_EINVAL, "free(NULL): %s", devbuf_status_name(rc));
  int local = 0;
  REQUIRE_FAILS(devbuf_mem_free(&c->dev, &local, NULL, &c->err), DEVBUF_EINVAL);
  void *p;
  OK(dalloc(c, 128, 0, NULL, &p));
  OK(dfree(c, p, NULL));
  REQUIRE_FAILS(devbuf_mem_free(&c->dev, p, NULL, &c->err), DEVBUF_EINVAL);
  return result(c, PASS, "double free: \"%s\"", c->err.message);
}

static int check_error_streams_events(ctx *c) {
  int rc;
  /* The default stream (NULL) cannot be destroyed: refused with EINVAL. A
   * synchronous plugin whose stream_create hands out NULL is the exception:
   * there, destroying NULL is how that created stream is destroyed. */
  void *made = (void *)&rc;
  OK(devbuf_stream_create(&c->dev, &made, &c->err));
  const char *how;
  if (made == NULL) {
    OK(devbuf_stream_destroy(&c->dev, made, &c->err));
    how = "is the created stream (synchronous plugin)";
  } else {
    c->streams[c->nstreams++] = made; /* tracked: destroyed after the check */
    REQUIRE_FAILS(devbuf_stream_destroy(&c->dev, NULL, &c->err), DEVBUF_EINVAL);
    how = "refused";
  }
  unsigned char *h = hbuf(c, 1024), *g = hbuf(c, 1024);
  void *d;
  REQUIRE(h && g, "host memory");
  fill(h, 1024, 71);
  OK(dalloc(c, 1024, 0, NULL, &d));
  OK(devbuf_copy_h2d(&c->dev, d, 0, h, 1024, NULL, &c->err));
  OK(devbuf_copy_d2h(&c->dev, g, d, 0, 1024, NULL, &c->err));
  OK(devbuf_stream_synchronize(&c->dev, NULL, &c->err));
  REQUIRE_SAME(g, h, 1024, "default stream after stream_destroy(NULL)");
  REQUIRE_FAILS(devbuf_event_destroy(&c->dev, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_event_record(&c->dev, NULL, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_event_synchronize(&c->dev, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_stream_wait_event(&c->dev, NULL, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_stream_create(&c->dev, NULL, &c->err), DEVBUF_EINVAL);
  REQUIRE_FAILS(devbuf_event_create(&c->dev, NULL, &c->err), DEVBUF_EINVAL);
  /* An event never recorded has nothing to wait for. */
  void *e, *s;
  OK(enew(c, &e));
  OK(snew(c, &s));
  OK(devbuf_event_synchronize(&c->dev, e, &c->err));
  OK(devbuf_stream_wait_event(&c->dev, s, e, &c->err));
  OK(devbuf_stream_synchronize(&c->dev, s, &c->err));
  return result(c, PASS, "stream_destroy(NULL) %s", how);
}

/* Several threads at once, each with its own stream, event and buffers:
 * every slot may be called concurrently (plugin.h, "Threading"). */
enum { TH_N = 4, TH_ITERS = 25, TH_BYTES = 64 * 1024 };

typedef struct thread_job {
  const devbuf_device *dev;
  int id;
  char why[DEVBUF_ERROR_MESSAGE_SIZE + 64]; /* empty when it went well */
} thread_job;

#define TH_OK(expr)                                                                      \
  do {                                                                                   \
    int rc_ = (expr);                                                                    \
    if (rc_ != DEVBUF_OK) {                                                              \
      snprintf(j->why, sizeof j->why, "thread %d, iteration %d: %s: %s", j->id, it,     \
               devbuf_status_name(rc_), e.message);                                      \
      goto out;                                                                          \
    }                                                                                    \
  } while (0)

static void *thread_body(void *arg) {
  thread_job *j = arg;
  devbuf_error e;
  devbuf_error_clear(&e);
  unsigned char *h = malloc(TH_BYTES), *g = malloc(TH_BYTES);
  void *s = NULL, *ev = NULL, *a = NULL, *b = NULL;
  int have_s = 0, it = -1;
  if (h == NULL || g == NULL) {
    snprintf(j->why, sizeof j->why, "thread %d: out of host memory", j->id);
    goto out;
  }
  TH_OK(devbuf_stream_create(j->dev, &s, &e));
  have_s = 1;
  TH_OK(devbuf_event_create(j->dev, &ev, &e));
  for (it = 0; it < TH_ITERS; it++) {
    fill(h, TH_BYTES, (uint32_t)(j->id * 1000 + it));
    memset(g, 0, TH_BYTES);
    TH_OK(devbuf_mem_alloc(j->dev, TH_BYTES, 0, s, &a, &e));
    TH_OK(devbuf_mem_alloc(j->dev, TH_BYTES, 0, s, &b, &e));
    TH_OK(devbuf_copy_h2d(j->dev, a, 0, h, TH_BYTES, s, &e));
    TH_OK(devbuf_copy_d2d(j->dev, b, 0, a, 0, TH_BYTES, s, &e));
    TH_OK(devbuf_copy_d2h(j->dev, g, b, 0, TH_BYTES, s, &e));
    TH_OK(devbuf_event_record(j->dev, ev, s, &e));
    TH_OK(devbuf_event_synchronize(j->dev, ev, &e));
    long d = first_diff(g, h, TH_BYTES);
    if (d >= 0) {
      snprintf(j->why, sizeof j->why, "thread %d, iteration %d: byte %ld differs", j->id, it, d);
      goto out;
    }
    void *fa = a, *fb = b;
    a = b = NULL;
    TH_OK(devbuf_mem_free(j->dev, fa, s, &e));
    TH_OK(devbuf_mem_free(j->dev, fb, s, &e));
  }
out:
  if (have_s) devbuf_stream_synchronize(j->dev, s, &e);
  if (a) devbuf_mem_free(j->dev, a, NULL, &e);
  if (b) devbuf_mem_free(j->dev, b, NULL, &e);
  if (ev) devbuf_event_destroy(j->dev, ev, &e);
  if (have_s) devbuf_stream_destroy(j->dev, s, &e);
  free(h);
  free(g);
  return NULL;
}

static int check_threads(ctx *c) {
  pthread_t th[TH_N];
  thread_job jobs[TH_N];
  int started = 0;
  doing(__LINE__, "4 threads, each creating a stream and an event and running mem_alloc, "
                  "copy_h2d, copy_d2d, copy_d2h, event_record, event_synchronize, mem_free");
  for (int i = 0; i < TH_N; i++) {
    jobs[i].dev = &c->dev;
    jobs[i].id = i;
    jobs[i].why[0] = '\0';
    if (pthread_create(&th[i], NULL, thread_body, &jobs[i]) != 0) break;
    started++;
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  REQUIRE(started == TH_N, "only %d of %d threads started", started, TH_N);
  for (int i = 0; i < TH_N; i++) REQUIRE(jobs[i].why[0] == '\0', "%s", jobs[i].why);
  return result(c, PASS, "%d threads x %d iterations", TH_N, TH_ITERS);
}

static devbuf_stats g_start_stats;

static int check_no_leaks(ctx *c) {
  devbuf_stats now;
  OK(devbuf_plugin_stats(c->plugin, &now, &c->err));
  const devbuf_stats *s = &g_start_stats;
  REQUIRE(now.live_allocations == s->live_allocations && now.live_bytes == s->live_bytes &&
              now.live_streams == s->live_streams && now.live_events == s->live_events &&
              now.live_host_allocations == s->live_host_allocations,
          "live now / at start: allocations %llu/%llu, bytes %llu/%llu, streams %llu/%llu, "
          "events %llu/%llu, host %llu/%llu",
          (unsigned long long)now.live_allocations, (unsigned long long)s->live_allocations,
          (unsigned long long)now.live_bytes, (unsigned long long)s->live_bytes,
          (unsigned long long)now.live_streams, (unsigned long long)s->live_streams,
          (unsigned long long)now.live_events, (unsigned long long)s->live_events,
          (unsigned long long)now.live_host_allocations,
          (unsigned long long)s->live_host_allocations);
  return result(c, PASS, "%llu allocations made in all",
                (unsigned long long)(now.total_allocations - s->total_allocations));
}

/* ---- driver ----------------------------------------------------------------- */

typedef struct check {
  const char *name;
  int (*fn)(ctx *);
} check;

static const check checks[] = {
    {"properties", check_properties},
    {"alloc_free", check_alloc_free},
    {"alloc_alignment", check_alloc_alignment},
    {"alloc_absurd_size", check_alloc_absurd},
    {"copy_roundtrip", check_copy_roundtrip},
    {"copy_offsets", check_copy_offsets},
    {"stream_ordering", check_stream_ordering},
    {"events_across_streams", check_events_across_streams},
    {"sync_before_host_read", check_sync_before_host_read},
    {"host_staging", check_host_staging},
    {"device_info_roundtrip", check_device_info_roundtrip},
    {"device_info_invalid", check_device_info_invalid},
    {"error_bad_ordinal", check_error_bad_ordinal},
    {"error_copy_out_of_bounds", check_error_copy_out_of_bounds},
    {"error_free", check_error_free},
    {"error_streams_events", check_error_streams_events},
    {"threads", check_threads},
    {"no_leaks", check_no_leaks},
};
enum { NCHECKS = sizeof checks / sizeof checks[0] };

static void usage(FILE *f, const char *argv0) {
  fprintf(f,
          "usage: %s [--allow-no-device] [--in-process] [--timeout SECONDS] [--check NAME]...\n"
          "          IDENTIFIER[:ORDINAL]\n"
          "       %s --dtype [--in-process] [--timeout SECONDS] [--check NAME]...\n"
          "          --payload PAYLOAD [--payload PAYLOAD]... NAMESPACE\n"
          "       %s [--dtype] --list\n"
          "Runs the devbuf plugin conformance checks against a device identifier\n"
          "(e.g. cpu, devbuf.sim, devbuf.opencl:1). Each check runs in a process of its\n"
          "own with a deadline (default %d s), so that a plugin that crashes, aborts or\n"
          "hangs costs that check's FAIL line and not the run; --in-process runs them all\n"
          "in this process, one after another, as a debugger wants. With --dtype, the checks\n"
          "for a dtype namespace (e.g. mypkg), on payloads it understands. See\n"
          "docs/conformance.md.\n",
          argv0, argv0, argv0, DEFAULT_TIMEOUT_S);
}

/* Plugins that failed to load, to explain an unknown identifier. */
static void print_plugins(void) {
  size_t n = devbuf_plugin_count();
  printf("# %zu plugin(s) found:\n", n);
  for (size_t i = 0; i < n; i++) {
    devbuf_plugin_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (devbuf_plugin_info_get(i, &info, NULL) != DEVBUF_OK) continue;
    printf("#   %s: %s%s%s\n", info.path, info.name ? info.name : "?",
           info.state == DEVBUF_PLUGIN_LOADED ? "" : " FAILED: ",
           info.state == DEVBUF_PLUGIN_LOADED ? "" : info.reason);
  }
}

enum { OPEN_OK = 1, OPEN_NO_DEVICE_ALLOWED = 2, OPEN_FAILED = 3 };

/* Open the device and fill the context. With `say`, prints what the run
 * header needs: the device line, or why there is none. */
static int open_device(ctx *c, const char *spec, int allow_no_device, int say) {
  devbuf_error err;
  devbuf_error_clear(&err);
  doing(__LINE__, "devbuf_device_open (loads the plugins, then device_count)");
  int rc = devbuf_device_open(spec, &c->dev, &err);
  if (rc != DEVBUF_OK) {
    if (!say) {
      result(c, FAIL, "cannot open %s in the check's process: %s: %s", spec,
             devbuf_status_name(rc), err.message);
      return OPEN_FAILED;
    }
    if (rc == DEVBUF_ENODEV && err.message[0] != '\0') {
      /* Report the plugin's own reason, without the runtime's prefix. */
      const char *reason = strstr(err.message, "no device: ");
      reason = reason ? reason + strlen("no device: ") : err.message;
      printf("no device, because %s\n", reason);
      /* A plugin with no device must say why: the runtime's stand-ins for a
       * missing message (core/src/runtime.c) are no reason, and fail even
       * with --allow-no-device. */
      if (strstr(reason, "(no message)") != NULL || strstr(reason, "gives no reason") != NULL) {
        printf("FAIL device: %s has no device and its plugin gave no reason (device_count "
               "returned DEVBUF_ENODEV with an empty message; say why in err, e.g. which "
               "driver library or device node is missing)\n", spec);
        return OPEN_FAILED;
      }
      if (allow_no_device) return OPEN_NO_DEVICE_ALLOWED;
      printf("FAIL device: %s has no device (run with --allow-no-device to accept that)\n", spec);
    } else {
      printf("FAIL device: cannot open %s: %s: %s\n", spec, devbuf_status_name(rc),
             err.message[0] ? err.message : "(no message)");
      print_plugins();
    }
    return OPEN_FAILED;
  }
  c->plugin = devbuf_device_plugin_index(&c->dev);
  devbuf_device_count(c->dev.identifier, &c->count, &err);
  doing(__LINE__, "devbuf_device_props_get");
  rc = devbuf_device_props_get(&c->dev, &c->props, &err);
  if (rc != DEVBUF_OK) {
    if (say) printf("FAIL device: device_props of %s: %s\n", spec, err.message);
    else result(c, FAIL, "device_props of %s in the check's process: %s", spec, err.message);
    return OPEN_FAILED;
  }
  /* Handle-based devices (OpenCL cl_mem, Vulkan, Metal buffers) have no
   * address whose alignment could be checked; the rest hand out addresses. */
  int dl = c->props.dlpack_device_type;
  c->addresses = (c->props.flags & DEVBUF_DEVICE_HOST_ACCESSIBLE) ||
                 (dl != -1 && dl != DEVBUF_DL_OPENCL && dl != DEVBUF_DL_VULKAN &&
                  dl != DEVBUF_DL_METAL);
  /* Every plugin whose device_info is the common layout is held to all of
   * its checks, whatever its identifier. */
  devbuf_plugin_info pinfo;
  memset(&pinfo, 0, sizeof pinfo);
  pinfo.struct_size = sizeof pinfo;
  c->default_info = devbuf_plugin_info_get(c->plugin, &pinfo, NULL) == DEVBUF_OK &&
                    pinfo.table != NULL && pinfo.table->device_info_export == NULL &&
                    pinfo.table->device_info_import == NULL;
  c->common_layout = c->default_info || strncmp(c->dev.identifier, "devbuf.", 7) == 0;
  if (say)
    printf("# device %s:%d: %s (%s)\n", c->dev.identifier, c->dev.ordinal, c->props.name,
           c->props.vendor);
  devbuf_plugin_stats(c->plugin, &g_start_stats, NULL);
  return OPEN_OK;
}

/* Run check k on an open device, release what it made; the verdict. */
static int run_check(ctx *c, int k) {
  c->why[0] = '\0';
  int r = checks[k].fn(c);
  release_all(c);
  return r;
}

static void print_result(const char *name, int r, const char *why) {
  const char *tag = r == PASS ? "PASS" : r == SKIP ? "SKIP" : "FAIL";
  if (why[0])
    printf("%s %s: %s\n", tag, name, why);
  else
    printf("%s %s\n", tag, name);
}

/* ---- dtype namespaces ---------------------------------------------------------------- */

/* `devbuf_conformance --dtype ID --payload P...`: the checks for a namespace
 * (a plugin's dtype_namespaces, or one registered in the process). The
 * namespace's interpret is called directly, as the format engine does, so
 * that what the engine would quietly refuse is named; the payloads are the
 * author's (the suite cannot guess what a namespace understands). */
enum { MAX_PAYLOADS = 64, DT_THREADS = 4, DT_ITERS = 200 };

typedef struct dctx {
  const char *id;
  const char *payloads[MAX_PAYLOADS];
  int npayloads;
  const devbuf_dtype_namespace *ns;
  const char *source;
  devbuf_dtype_desc ref[MAX_PAYLOADS]; /* each payload's answer, filled by dt_open */
  char why[1024];
} dctx;

static int dresult(dctx *d, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int dresult(dctx *d, int r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->why, sizeof d->why, fmt, ap);
  va_end(ap);
  return r;
}

#define DREQUIRE(cond, ...)                                                                  \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      char m_[768];                                                                          \
      snprintf(m_, sizeof m_, __VA_ARGS__);                                                  \
      return dresult(d, FAIL, "%s", m_);                                                     \
    }                                                                                        \
  } while (0)

/* One raw call of the namespace's interpret, as the engine makes it. */
static int dt_call(const dctx *d, const char *payload, size_t len, devbuf_dtype_desc *out,
                   devbuf_error *err) {
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->elements_per_item = 1;
  out->dlpack_code = -1;
  devbuf_error_clear(err);
  return d->ns->interpret(d->ns->ctx, payload, len, out, err);
}

static int printable(const char *s, size_t max) {
  size_t i = 0;
  for (; i < max && s[i]; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) return 0;
  return i < max;
}

/* Find the namespace and every payload's answer (in each check's process). */
static int dt_open(dctx *d) {
  devbuf_error err;
  devbuf_error_clear(&err);
  doing(__LINE__, "devbuf_dtype_lookup (loads the plugins)");
  int rc = devbuf_dtype_lookup(d->id, (size_t)-1, &d->ns, &d->source, &err);
  if (rc != DEVBUF_OK)
    return dresult(d, FAIL, "namespace '%s': %s: %s", d->id, devbuf_status_name(rc), err.message);
  if (d->ns->interpret == NULL) return dresult(d, FAIL, "namespace '%s' has no interpret", d->id);
  for (int i = 0; i < d->npayloads; i++) {
    char what[160];
    snprintf(what, sizeof what, "interpret(\"%.100s\")", d->payloads[i]);
    doing(__LINE__, what);
    rc = dt_call(d, d->payloads[i], strlen(d->payloads[i]), &d->ref[i], &err);
    if (rc != DEVBUF_OK)
      return dresult(d, FAIL, "[%s$%s]: interpret returned %s: %s (each --payload must be one the "
                     "namespace understands)", d->id, d->payloads[i], devbuf_status_name(rc),
                     err.message[0] ? err.message : "(no message)");
  }
  return PASS;
}

static int dt_check_namespace(dctx *d) {
  const devbuf_dtype_namespace *ns = d->ns;
  DREQUIRE(ns->struct_size >= sizeof *ns, "struct_size %u < %zu (devbuf_dtype_namespace)",
           (unsigned)ns->struct_size, sizeof *ns);
  DREQUIRE(ns->id && strcmp(ns->id, d->id) == 0, "the descriptor's id is '%s', not '%s'",
           ns->id ? ns->id : "(NULL)", d->id);
  DREQUIRE(ns->provider && ns->provider[0] && printable(ns->provider, 256),
           "provider is NULL, empty or not printable (name the package that defines the ids)");
  DREQUIRE(ns->description && printable(ns->description, 1024),
           "description is NULL or not printable");
  return dresult(d, PASS, "from %s, provider %s", d->source ? d->source : "?", ns->provider);
}

/* Each payload: the same answer twice, the same answer when the bytes after
 * it are not a NUL (the engine passes [id$payload;...] in place), the
 * engine's answer, and a canonical spelling that means the same. */
static int dt_check_payloads(dctx *d) {
  devbuf_error err;
  devbuf_dtype_desc again;
  for (int i = 0; i < d->npayloads; i++) {
    const char *p = d->payloads[i];
    size_t n = strlen(p);
    const devbuf_dtype_desc *r = &d->ref[i];
    doing(__LINE__, "interpret, a second time");
    int rc = dt_call(d, p, n, &again, &err);
    DREQUIRE(rc == DEVBUF_OK && memcmp(&again, r, sizeof again) == 0,
             "[%s$%s]: a second interpret gave another answer (%s)", d->id, p,
             devbuf_status_name(rc));
    char buf[600];
    snprintf(buf, sizeof buf, "%s;%s$x]garbage", p, d->id);
    doing(__LINE__, "interpret of the payload followed by other bytes");
    rc = dt_call(d, buf, n, &again, &err);
    DREQUIRE(rc == DEVBUF_OK && memcmp(&again, r, sizeof again) == 0,
             "[%s$%s]: followed by ';...' the payload gave another answer (%s): interpret must "
             "read exactly `len` bytes, the payload is not NUL-terminated", d->id, p,
             devbuf_status_name(rc));
    DREQUIRE(memchr(r->canonical, '\0', sizeof r->canonical) && printable(r->canonical, sizeof r->canonical),
             "[%s$%s]: canonical is not a terminated printable string", d->id, p);
    DREQUIRE(memchr(r->plain_format, '\0', sizeof r->plain_format),
             "[%s$%s]: plain_format is not terminated", d->id, p);
    if (r->canonical[0]) {
      doing(__LINE__, "interpret of the canonical spelling");
      rc = dt_call(d, r->canonical, strlen(r->canonical), &again, &err);
      DREQUIRE(rc == DEVBUF_OK, "[%s$%s]: its canonical spelling '%s' is refused: %s: %s", d->id,
               p, r->canonical, devbuf_status_name(rc), err.message);
      DREQUIRE(again.itemsize == r->itemsize && again.alignment == r->alignment &&
                   again.kind == r->kind && again.bits == r->bits &&
                   again.elements_per_item == r->elements_per_item &&
                   again.dlpack_code == r->dlpack_code && again.dlpack_bits == r->dlpack_bits,
               "[%s$%s]: its canonical spelling '%s' means another type", d->id, p, r->canonical);
    }
    char fmt[600];
    snprintf(fmt, sizeof fmt, "[%s$%s]", d->id, p);
    uint64_t isz = 0, al = 0;
    devbuf_error_clear(&err);
    doing(__LINE__, "devbuf_format_itemsize of [id$payload]");
    rc = devbuf_format_itemsize(fmt, strlen(fmt), 0, &isz, &al, NULL, &err);
    DREQUIRE(rc == DEVBUF_OK && isz == r->itemsize,
             "the format engine on %s: %s (itemsize %llu, the namespace says %u): %s", fmt,
             devbuf_status_name(rc), (unsigned long long)isz, (unsigned)r->itemsize, err.message);
  }
  return dresult(d, PASS, "%d payload(s)", d->npayloads);
}

static int dt_check_layout(dctx *d) {
  for (int i = 0; i < d->npayloads; i++) {
    const devbuf_dtype_desc *r = &d->ref[i];
    const char *p = d->payloads[i];
    DREQUIRE(r->itemsize >= 1 && r->itemsize <= (1u << 30), "[%s$%s]: itemsize %u", d->id, p,
             (unsigned)r->itemsize);
    DREQUIRE(is_pow2(r->alignment) && r->alignment <= 4096,
             "[%s$%s]: alignment %u is not a power of two <= 4096", d->id, p,
             (unsigned)r->alignment);
    DREQUIRE(r->itemsize % r->alignment == 0,
             "[%s$%s]: itemsize %u is not a multiple of alignment %u (arrays of it misalign)",
             d->id, p, (unsigned)r->itemsize, (unsigned)r->alignment);
    DREQUIRE(r->kind <= DEVBUF_KIND_POINTER, "[%s$%s]: kind %u is not a devbuf_dtype_kind",
             d->id, p, (unsigned)r->kind);
    DREQUIRE(r->elements_per_item >= 1, "[%s$%s]: elements_per_item 0", d->id, p);
    DREQUIRE((uint64_t)r->bits * r->elements_per_item <= (uint64_t)r->itemsize * 8,
             "[%s$%s]: %u elements of %u bits do not fit in itemsize %u", d->id, p,
             (unsigned)r->elements_per_item, (unsigned)r->bits, (unsigned)r->itemsize);
    int dirty = 0;
    for (size_t k = 0; k < sizeof r->reserved / sizeof r->reserved[0]; k++) dirty |= r->reserved[k] != 0;
    DREQUIRE(!dirty, "[%s$%s]: reserved fields written", d->id, p);
    if (r->plain_format[0]) {
      uint64_t isz = 0, al = 0;
      devbuf_error err;
      devbuf_error_clear(&err);
      int rc = devbuf_format_itemsize(r->plain_format, strlen(r->plain_format), 0, &isz, &al, NULL,
                                      &err);
      DREQUIRE(rc == DEVBUF_OK && isz == r->itemsize,
               "[%s$%s]: plain_format '%s' has itemsize %llu (%s), not %u", d->id, p,
               r->plain_format, (unsigned long long)isz, devbuf_status_name(rc),
               (unsigned)r->itemsize);
    }
  }
  return dresult(d, PASS, "%d payload(s)", d->npayloads);
}

/* The DLPack dtype a payload claims must describe the same bytes. */
static int dt_check_dlpack(dctx *d) {
  int with = 0;
  for (int i = 0; i < d->npayloads; i++) {
    const devbuf_dtype_desc *r = &d->ref[i];
    const char *p = d->payloads[i];
    if (r->dlpack_code < 0) continue;
    with++;
    DREQUIRE(r->dlpack_code <= DEVBUF_DLDT_FLOAT4_E2M1FN,
             "[%s$%s]: dlpack_code %d is not a DLDataTypeCode", d->id, p, (int)r->dlpack_code);
    uint64_t item_bits = (uint64_t)r->itemsize * 8,
             dl = (uint64_t)r->dlpack_bits * r->elements_per_item;
    DREQUIRE(r->dlpack_bits > 0 && dl <= item_bits && (r->dlpack_bits < 8 || dl == item_bits),
             "[%s$%s]: DLPack %d bits x %u element(s) is %llu bits, the itemsize %u is %llu",
             d->id, p, (int)r->dlpack_bits, (unsigned)r->elements_per_item,
             (unsigned long long)dl, (unsigned)r->itemsize, (unsigned long long)item_bits);
    int c = r->dlpack_code, k = (int)r->kind;
    int agrees = (c == DEVBUF_DLDT_INT && k == DEVBUF_KIND_INT) ||
                 (c == DEVBUF_DLDT_UINT && k == DEVBUF_KIND_UINT) ||
                 (c == DEVBUF_DLDT_BOOL && k == DEVBUF_KIND_BOOL) ||
                 (c == DEVBUF_DLDT_COMPLEX && k == DEVBUF_KIND_COMPLEX) ||
                 (c == DEVBUF_DLDT_OPAQUE_HANDLE && (k == DEVBUF_KIND_OPAQUE || k == DEVBUF_KIND_POINTER)) ||
                 ((c == DEVBUF_DLDT_FLOAT || c == DEVBUF_DLDT_BFLOAT || c >= DEVBUF_DLDT_FLOAT8_E3M4) &&
                  k == DEVBUF_KIND_FLOAT);
    DREQUIRE(agrees, "[%s$%s]: dlpack_code %d does not describe kind %d", d->id, p, c, k);
  }
  return dresult(d, PASS, "%d of %d payload(s) have a DLPack dtype", with, d->npayloads);
}

/* What no namespace understands: refused, with a message unless it is the
 * engine's "try the next alternative" (DEVBUF_ENOTFOUND). */
static int dt_check_malformed(dctx *d) {
  static char longest[4097];
  memset(longest, 'z', sizeof longest - 1);
  const char *bad[] = {"", "?!?", "  ", longest};
  const char *names[] = {"an empty payload", "\"?!?\"", "two spaces", "4096 bytes of 'z'"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    devbuf_dtype_desc out;
    devbuf_error err;
    doing(__LINE__, names[i]);
    int rc = dt_call(d, bad[i], strlen(bad[i]), &out, &err);
    DREQUIRE(rc != DEVBUF_OK, "[%s$...]: %s was accepted (itemsize %u): a payload the namespace "
             "does not define must be refused with DEVBUF_ENOTFOUND", d->id, names[i],
             (unsigned)out.itemsize);
    DREQUIRE(rc == DEVBUF_ENOTFOUND || err.message[0],
             "[%s$...]: %s refused with %s and no message", d->id, names[i],
             devbuf_status_name(rc));
  }
  return dresult(d, PASS, "%zu malformed payloads refused", sizeof bad / sizeof bad[0]);
}

typedef struct dt_job {
  dctx *d;
  int id;
  char why[256];
} dt_job;

static void *dt_thread(void *arg) {
  dt_job *j = arg;
  dctx *d = j->d;
  for (int it = 0; it < DT_ITERS; it++)
    for (int i = 0; i < d->npayloads; i++) {
      devbuf_dtype_desc out;
      devbuf_error err;
      int rc = dt_call(d, d->payloads[i], strlen(d->payloads[i]), &out, &err);
      if (rc != DEVBUF_OK || memcmp(&out, &d->ref[i], sizeof out) != 0) {
        snprintf(j->why, sizeof j->why, "thread %d, iteration %d: [%s$%s] gave %s / another answer",
                 j->id, it, d->id, d->payloads[i], devbuf_status_name(rc));
        return NULL;
      }
      if (dt_call(d, "?!?", 3, &out, &err) == DEVBUF_OK) {
        snprintf(j->why, sizeof j->why, "thread %d, iteration %d: '?!?' accepted", j->id, it);
        return NULL;
      }
    }
  return NULL;
}

static int dt_check_threads(dctx *d) {
  pthread_t th[DT_THREADS];
  dt_job jobs[DT_THREADS];
  int started = 0;
  doing(__LINE__, "4 threads interpreting every payload at once");
  for (int i = 0; i < DT_THREADS; i++) {
    jobs[i].d = d;
    jobs[i].id = i;
    jobs[i].why[0] = '\0';
    if (pthread_create(&th[i], NULL, dt_thread, &jobs[i]) != 0) break;
    started++;
  }
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  DREQUIRE(started == DT_THREADS, "only %d of %d threads started", started, DT_THREADS);
  for (int i = 0; i < DT_THREADS; i++) DREQUIRE(jobs[i].why[0] == '\0', "%s", jobs[i].why);
  return dresult(d, PASS, "%d threads x %d rounds, the same answers", DT_THREADS, DT_ITERS);
}

typedef struct dcheck {
  const char *name;
  int (*fn)(dctx *);
} dcheck;

static const dcheck dchecks[] = {
    {"dtype_namespace", dt_check_namespace}, {"dtype_payloads", dt_check_payloads},
    {"dtype_layout", dt_check_layout},       {"dtype_dlpack", dt_check_dlpack},
    {"dtype_malformed", dt_check_malformed}, {"dtype_threads", dt_check_threads},
};
enum { NDCHECKS = sizeof dchecks / sizeof dchecks[0] };

/* ---- isolation: one child process per check ------------------------------------------- */

/* What a child leaves for its parent, in shared memory: the verdict and
 * its reason, a leak found after the check, and what it was doing. */
typedef struct shared_result {
  int done;     /* the child got to the end and wrote its verdict */
  int verdict;  /* PASS, FAIL, SKIP; for the opening child, OPEN_* */
  char why[1024];
  char leak[512]; /* non-empty: the check left resources alive */
  char doing[DOING_MAX];
} shared_result;

/* In the library build (devbuf.plugin.run_conformance, `main` renamed) the
 * child is a copy of a Python process: it leaves with _exit, running no
 * exit handler of the interpreter or of libraries loaded there. The
 * executable's children exit normally, so that each runs the plugins'
 * shutdown and, under the sanitizers, LeakSanitizer's check at exit. */
#ifdef main
#define CHILD_EXIT(code) _exit(code)
#else
#define CHILD_EXIT(code) exit(code)
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* How the child ended, as words for a FAIL line; "" when it wrote its
 * verdict and exited 0. */
static void describe_end(int timed_out, int wstatus, double timeout_s, const shared_result *r,
                         char *out, size_t cap) {
  out[0] = '\0';
  if (timed_out) {
    snprintf(out, cap, "did not finish within %g s (its process was killed)", timeout_s);
  } else if (WIFSIGNALED(wstatus)) {
    int sig = WTERMSIG(wstatus);
    const char *name = sig == SIGSEGV   ? "SIGSEGV"
                       : sig == SIGABRT ? "SIGABRT"
                       : sig == SIGBUS  ? "SIGBUS"
                       : sig == SIGILL  ? "SIGILL"
                       : sig == SIGFPE  ? "SIGFPE"
                       : sig == SIGKILL ? "SIGKILL"
                       : sig == SIGTRAP ? "SIGTRAP"
                                        : "signal";
    snprintf(out, cap, "crashed: %s (%s, signal %d)", name, strsignal(sig), sig);
  } else if (!r->done) {
    snprintf(out, cap,
             "its process exited with status %d before the check ended (a sanitizer report, "
             "or the plugin called exit())",
             WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
  } else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0) {
    snprintf(out, cap,
             "its process exited with status %d after the check (at exit: the plugin's "
             "shutdown, or a sanitizer's leak report)",
             WEXITSTATUS(wstatus));
  }
}

/* Fork, run `body` in the child, wait for it with a deadline. Returns 0
 * with *wstatus / *timed_out, or -1 (errno) when no child could be made. */
static int in_child(shared_result *r, double timeout_s, void (*body)(void *), void *arg,
                    int *wstatus, int *timed_out) {
  int fds[2];
  memset(r, 0, sizeof *r);
  *timed_out = 0;
  *wstatus = 0;
  if (pipe(fds) != 0) return -1;
  fflush(NULL); /* the child must not print our buffered output again */
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(fds[0]);
    close(fds[1]);
    errno = e;
    return -1;
  }
  if (pid == 0) {
    /* Its own process group: a deadline kills what the plugin started too. */
    setpgid(0, 0);
    close(fds[0]);
    g_doing = r->doing;
    body(arg);
    fflush(NULL);
    r->done = 1;
    CHILD_EXIT(0);
  }
  close(fds[1]);
  /* The pipe's write end closes when the child's process is gone, which
   * wakes the wait at once. A process the plugin started may hold it open
   * longer: every 50 ms the child itself is asked for too. */
  double deadline = now_s() + timeout_s;
  int reaped = 0;
  for (;;) {
    double left = deadline - now_s();
    if (left <= 0) {
      *timed_out = 1;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      break;
    }
    struct pollfd pf = {.fd = fds[0], .events = POLLIN};
    int n = poll(&pf, 1, left > 0.05 ? 50 : (int)(left * 1000) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) break; /* hang-up: the child is gone, or about to be */
    if (waitpid(pid, wstatus, WNOHANG) == pid) {
      reaped = 1;
      break;
    }
  }
  close(fds[0]);
  while (!reaped && waitpid(pid, wstatus, 0) < 0 && errno == EINTR) {
  }
  if (*timed_out) kill(-pid, SIGKILL); /* anything the plugin started, in its group */
  return 0;
}

static void count_verdict(int v, int *passed, int *failed, int *skipped) {
  if (v == PASS) (*passed)++;
  else if (v == SKIP) (*skipped)++;
  else (*failed)++;
}

/* Print the line of a check that ran in a child; its verdict. A crash, an
 * abort, a hang or an exit before the end is that check's FAIL line, with
 * what it was doing. */
static int child_verdict(const char *name, shared_result *r, int timed_out, int wstatus,
                         double timeout_s) {
  char end[DOING_MAX];
  describe_end(timed_out, wstatus, timeout_s, r, end, sizeof end);
  if (end[0] && !r->done) {
    printf("FAIL %s: %s, while doing %s (rerun alone under a debugger: --in-process --check "
           "%s)\n",
           name, end, r->doing[0] ? r->doing : "nothing yet", name);
    return FAIL;
  }
  int v = r->verdict;
  if (end[0] && v != FAIL) {
    v = FAIL;
    snprintf(r->why, sizeof r->why, "%s", end);
  }
  print_result(name, v, r->why);
  return v;
}

typedef struct child_job {
  ctx *c;
  const char *spec;
  int allow_no_device;
  int k;
  shared_result *r;
} child_job;

static void open_body(void *arg) {
  child_job *j = arg;
  j->r->verdict = open_device(j->c, j->spec, j->allow_no_device, 1);
}

static void check_body(void *arg) {
  child_job *j = arg;
  ctx *c = j->c;
  if (open_device(c, j->spec, 0, 0) != OPEN_OK) {
    j->r->verdict = FAIL;
    snprintf(j->r->why, sizeof j->r->why, "%s", c->why);
    return;
  }
  int r = run_check(c, j->k);
  j->r->verdict = r;
  snprintf(j->r->why, sizeof j->r->why, "%s", c->why);
  /* The whole-run no_leaks check, per check: what this one left alive. */
  c->why[0] = '\0';
  if (check_no_leaks(c) != PASS) snprintf(j->r->leak, sizeof j->r->leak, "%s", c->why);
}

static int run_isolated(ctx *c, const char *spec, int allow_no_device, double timeout_s,
                        const char *const *only, int nonly) {
  int passed = 0, failed = 0, skipped = 0;
  shared_result *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                          -1, 0);
  if (r == MAP_FAILED) {
    printf("FAIL device: cannot map memory shared with the check processes: %s (try "
           "--in-process)\n", strerror(errno));
    printf("0 passed, 1 failed, %d skipped\n", NCHECKS);
    return 1;
  }
  child_job job = {c, spec, allow_no_device, -1, r};
  int wstatus, timed_out;
  char end[DOING_MAX];
  /* The device is opened in a child too: the parent never starts a driver
   * (a CUDA context does not survive fork) and survives one that crashes. */
  if (in_child(r, timeout_s, open_body, &job, &wstatus, &timed_out) != 0) {
    printf("FAIL device: fork: %s (try --in-process)\n", strerror(errno));
    printf("0 passed, 1 failed, %d skipped\n", NCHECKS);
    munmap(r, sizeof *r);
    return 1;
  }
  describe_end(timed_out, wstatus, timeout_s, r, end, sizeof end);
  int open = r->done ? r->verdict : OPEN_FAILED;
  if (end[0] && !(r->done && open == OPEN_OK)) {
    printf("FAIL device: opening %s %s, while doing %s\n", spec, end,
           r->doing[0] ? r->doing : "nothing yet");
    open = OPEN_FAILED;
  }
  if (open == OPEN_NO_DEVICE_ALLOWED) {
    for (int k = 0; k < NCHECKS; k++) printf("SKIP %s: no device\n", checks[k].name);
    printf("0 passed, 0 failed, %d skipped\n", NCHECKS);
    munmap(r, sizeof *r);
    return 0;
  }
  if (open != OPEN_OK) {
    printf("0 passed, 1 failed, %d skipped\n", NCHECKS);
    munmap(r, sizeof *r);
    return 1;
  }
  char leaks[1024] = "";
  int nleaks = 0, nran = 0;
  for (int k = 0; k < NCHECKS; k++) {
    int is_leaks = strcmp(checks[k].name, "no_leaks") == 0;
    int selected = nonly == 0;
    for (int j = 0; j < nonly; j++) selected |= strcmp(only[j], checks[k].name) == 0;
    if (is_leaks) {
      /* Each check's process compared the runtime's live counters after it
       * with those before: this verdict gathers theirs. */
      if (nleaks)
        printf("FAIL no_leaks: %d check(s) left resources alive: %s\n", nleaks, leaks);
      else
        printf("PASS no_leaks: none of the %d check(s) left anything alive in its process\n",
               nran);
      if (nleaks) failed++;
      else passed++;
      continue;
    }
    if (!selected) {
      skipped++;
      printf("SKIP %s: not selected\n", checks[k].name);
      continue;
    }
    job.k = k;
    if (in_child(r, timeout_s, check_body, &job, &wstatus, &timed_out) != 0) {
      printf("FAIL %s: fork: %s (try --in-process)\n", checks[k].name, strerror(errno));
      failed++;
      continue;
    }
    nran++;
    int v = child_verdict(checks[k].name, r, timed_out, wstatus, timeout_s);
    if (r->done && r->leak[0]) {
      size_t used = strlen(leaks);
      snprintf(leaks + used, sizeof leaks - used, "%s%s (%s)", nleaks ? "; " : "",
               checks[k].name, r->leak);
      nleaks++;
    }
    count_verdict(v, &passed, &failed, &skipped);
  }
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  munmap(r, sizeof *r);
  return failed ? 1 : 0;
}

static int run_in_process(ctx *c, const char *spec, int allow_no_device, const char *const *only,
                          int nonly) {
  int passed = 0, failed = 0, skipped = 0;
  int open = open_device(c, spec, allow_no_device, 1);
  if (open == OPEN_NO_DEVICE_ALLOWED) {
    for (int k = 0; k < NCHECKS; k++) printf("SKIP %s: no device\n", checks[k].name);
    printf("0 passed, 0 failed, %d skipped\n", NCHECKS);
    return 0;
  }
  if (open != OPEN_OK) {
    printf("0 passed, 1 failed, %d skipped\n", NCHECKS);
    return 1;
  }
  for (int k = 0; k < NCHECKS; k++) {
    int selected = nonly == 0;
    for (int j = 0; j < nonly; j++) selected |= strcmp(only[j], checks[k].name) == 0;
    if (!selected && strcmp(checks[k].name, "no_leaks") != 0) {
      skipped++;
      printf("SKIP %s: not selected\n", checks[k].name);
      continue;
    }
    int r = run_check(c, k);
    print_result(checks[k].name, r, c->why);
    count_verdict(r, &passed, &failed, &skipped);
  }
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}

typedef struct dt_child {
  dctx *d;
  int k;
  shared_result *r;
} dt_child;

static int dt_run_one(dctx *d, int k) {
  d->why[0] = '\0';
  int v = dt_open(d);
  if (v != PASS) return v;
  d->why[0] = '\0';
  return dchecks[k].fn(d);
}

static void dt_body(void *arg) {
  dt_child *j = arg;
  j->r->verdict = dt_run_one(j->d, j->k);
  snprintf(j->r->why, sizeof j->r->why, "%s", j->d->why);
}

/* The dtype checks, isolated like the device checks or in this process. */
static int run_dtype(dctx *d, int in_process, double timeout_s, const char *const *only,
                     int nonly) {
  int passed = 0, failed = 0, skipped = 0;
  shared_result *r = NULL;
  if (!in_process) {
    r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) {
      printf("FAIL dtype: cannot map memory shared with the check processes: %s (try "
             "--in-process)\n", strerror(errno));
      printf("0 passed, 1 failed, %d skipped\n", NDCHECKS);
      return 1;
    }
  }
  for (int k = 0; k < NDCHECKS; k++) {
    int selected = nonly == 0;
    for (int j = 0; j < nonly; j++) selected |= strcmp(only[j], dchecks[k].name) == 0;
    if (!selected) {
      skipped++;
      printf("SKIP %s: not selected\n", dchecks[k].name);
      continue;
    }
    if (in_process) {
      int v = dt_run_one(d, k);
      print_result(dchecks[k].name, v, d->why);
      count_verdict(v, &passed, &failed, &skipped);
      continue;
    }
    dt_child job = {d, k, r};
    int wstatus, timed_out;
    if (in_child(r, timeout_s, dt_body, &job, &wstatus, &timed_out) != 0) {
      printf("FAIL %s: fork: %s (try --in-process)\n", dchecks[k].name, strerror(errno));
      failed++;
      continue;
    }
    count_verdict(child_verdict(dchecks[k].name, r, timed_out, wstatus, timeout_s), &passed,
                  &failed, &skipped);
  }
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  if (r) munmap(r, sizeof *r);
  return failed ? 1 : 0;
}

int main(int argc, char **argv) {
  int allow_no_device = 0, in_process = 0, list = 0, dtype = 0;
  double timeout_s = DEFAULT_TIMEOUT_S;
  const char *spec = NULL;
  const char *only[NCHECKS + NDCHECKS];
  int nonly = 0;
  static dctx dx; /* large: keep it off the stack */
  dctx *d = &dx;
  memset(d, 0, sizeof *d);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--allow-no-device") == 0) {
      allow_no_device = 1;
    } else if (strcmp(argv[i], "--in-process") == 0) {
      in_process = 1;
    } else if (strcmp(argv[i], "--dtype") == 0) {
      dtype = 1;
    } else if (strcmp(argv[i], "--payload") == 0 && i + 1 < argc) {
      if (d->npayloads == MAX_PAYLOADS) {
        fprintf(stderr, "%s: more than %d --payload\n", argv[0], MAX_PAYLOADS);
        return 2;
      }
      if (strlen(argv[i + 1]) > 256) {
        fprintf(stderr, "%s: --payload longer than 256 bytes\n", argv[0]);
        return 2;
      }
      d->payloads[d->npayloads++] = argv[++i];
    } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
      char *end = NULL;
      timeout_s = strtod(argv[++i], &end);
      if (end == argv[i] || *end != '\0' || !(timeout_s > 0 && timeout_s <= 86400)) {
        fprintf(stderr, "%s: --timeout wants seconds in (0, 86400], not '%s'\n", argv[0],
                argv[i]);
        return 2;
      }
    } else if (strcmp(argv[i], "--list") == 0) {
      list = 1;
    } else if (strcmp(argv[i], "--check") == 0 && i + 1 < argc) {
      if (nonly == NCHECKS + NDCHECKS) {
        fprintf(stderr, "%s: too many --check\n", argv[0]);
        return 2;
      }
      only[nonly++] = argv[++i];
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout, argv[0]);
      return 0;
    } else if (argv[i][0] != '-' && spec != NULL) {
      /* `--payload A B NS`: each value wants its own --payload. */
      fprintf(stderr, "%s: unexpected argument '%s' after '%s': one %s only%s\n", argv[0],
              argv[i], spec, dtype || d->npayloads ? "NAMESPACE" : "IDENTIFIER",
              d->npayloads ? "; --payload takes one value, so repeat it: --payload A "
                             "--payload B NAMESPACE"
                           : "");
      usage(stderr, argv[0]);
      return 2;
    } else if (argv[i][0] == '-') {
      usage(stderr, argv[0]);
      return 2;
    } else {
      spec = argv[i];
    }
  }
  if (list) {
    if (dtype)
      for (int k = 0; k < NDCHECKS; k++) printf("%s\n", dchecks[k].name);
    else
      for (int k = 0; k < NCHECKS; k++) printf("%s\n", checks[k].name);
    return 0;
  }
  for (int j = 0; j < nonly; j++) {
    int known = 0;
    if (dtype)
      for (int k = 0; k < NDCHECKS; k++) known |= strcmp(dchecks[k].name, only[j]) == 0;
    else
      for (int k = 0; k < NCHECKS; k++) known |= strcmp(checks[k].name, only[j]) == 0;
    if (!known) {
      fprintf(stderr, "%s: unknown check '%s' (see %s--list)\n", argv[0], only[j],
              dtype ? "--dtype " : "");
      return 2;
    }
  }
  if (spec == NULL || (dtype && d->npayloads == 0) || (!dtype && d->npayloads)) {
    if (dtype && spec != NULL)
      fprintf(stderr, "%s: --dtype %s: give at least one --payload PAYLOAD that the namespace "
              "understands\n", argv[0], spec);
    usage(stderr, argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_doing = NULL;
  if (dtype) {
    d->id = spec;
    printf("# devbuf %s conformance: dtype namespace %s, %d payload(s)%s\n", devbuf_version(), spec,
           d->npayloads, in_process ? " (in this process)" : "");
    return run_dtype(d, in_process, timeout_s, only, nonly);
  }

  static ctx cx; /* large: keep it off the stack */
  ctx *c = &cx;
  memset(c, 0, sizeof *c); /* runs repeat in one process (devbuf.plugin) */
  c->spec = spec;
  printf("# devbuf %s conformance: %s%s\n", devbuf_version(), spec,
         in_process ? " (in this process)" : "");
  if (in_process) return run_in_process(c, spec, allow_no_device, only, nonly);
  return run_isolated(c, spec, allow_no_device, timeout_s, only, nonly);
}
