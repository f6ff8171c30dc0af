/* The dtype-namespace registry: registration rules, lookup order, refusals,
 * unregister while other threads parse, and namespaces offered by plugins. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devbuf/format.h"
#include "devbuf/plugin.h"
#include "devbuf/runtime.h"
#include "devbuf_test.h"

/* ---- namespaces used below ---------------------------------------------------- */
static int fixed4(void *ctx, const char *p, size_t n, devbuf_dtype_desc *out, devbuf_error *err) {
  (void)ctx;
  if (n == 3 && memcmp(p, "bad", 3) == 0) return devbuf_error_set(err, DEVBUF_ENOTFOUND, "fixed4: no 'bad'");
  if (n == 4 && memcmp(p, "boom", 4) == 0) return devbuf_error_set(err, DEVBUF_EINVAL, "fixed4: payload exploded");
  out->kind = DEVBUF_KIND_UINT;
  out->itemsize = 4;
  out->alignment = 4;
  out->bits = 32;
  out->dlpack_code = DEVBUF_DLDT_UINT;
  out->dlpack_bits = 32;
  snprintf(out->canonical, sizeof out->canonical, "u32");
  return DEVBUF_OK;
}

static int bad_align(void *ctx, const char *p, size_t n, devbuf_dtype_desc *out, devbuf_error *err) {
  (void)ctx, (void)p, (void)n, (void)err;
  out->itemsize = 4;
  out->alignment = 3;
  return DEVBUF_OK;
}
static int zero_size(void *ctx, const char *p, size_t n, devbuf_dtype_desc *out, devbuf_error *err) {
  (void)ctx, (void)p, (void)n, (void)err;
  out->alignment = 1;
  return DEVBUF_OK;
}

#define NS(id, fn) {sizeof(devbuf_dtype_namespace), 0, id, "devbuf-tests", "test", fn, NULL}
static const devbuf_dtype_namespace NS_A = NS("mypkg.a", fixed4);
static const devbuf_dtype_namespace NS_BADALIGN = NS("badalign", bad_align);
static const devbuf_dtype_namespace NS_ZERO = NS("zerosize", zero_size);

static int parse_size(const char *s, uint64_t *size, devbuf_error *err) {
  return devbuf_format_itemsize(s, strlen(s), 0, size, NULL, NULL, err);
}

static void test_register_rules(void) {
  devbuf_error err;
  CHECK(devbuf_dtype_register(NULL, &err) == DEVBUF_EINVAL, "NULL");
  devbuf_dtype_namespace ns = NS("ok", fixed4);
  ns.struct_size = 8;
  CHECK(devbuf_dtype_register(&ns, &err) == DEVBUF_EINVAL, "small struct_size");
  ns = (devbuf_dtype_namespace)NS("ok", NULL);
  CHECK(devbuf_dtype_register(&ns, &err) == DEVBUF_EINVAL, "no interpret");
  static const char *const bad_ids[] = {"", "a b", "a$b", "a;b", "a]b", "a[b", "a\x01",
                                        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
  for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
    ns = (devbuf_dtype_namespace)NS(bad_ids[i], fixed4);
    CHECK(devbuf_dtype_register(&ns, &err) == DEVBUF_EINVAL, "id '%s' accepted", bad_ids[i]);
  }
  static const char *const reserved[] = {"struct", "buffer", "devbuf"};
  for (size_t i = 0; i < 3; i++) {
    ns = (devbuf_dtype_namespace)NS(reserved[i], fixed4);
    CHECK(devbuf_dtype_register(&ns, &err) == DEVBUF_EEXIST, "'%s' accepted", reserved[i]);
    CHECK_HAS(err.message, "reserved");
  }
  CHECK_OK(devbuf_dtype_register(&NS_A, &err), &err);
  CHECK(devbuf_dtype_register(&NS_A, &err) == DEVBUF_EEXIST, "duplicate accepted");
  CHECK_HAS(err.message, "'mypkg.a' is already registered");

  uint64_t sz = 0;
  CHECK_OK(parse_size("b[mypkg.a$x]", &sz, &err), &err);
  CHECK(sz == 8, "size %llu", (unsigned long long)sz);
  /* ENOTFOUND from the interpreter moves on to the next alternative... */
  CHECK_OK(parse_size("[mypkg.a$bad;devbuf$int8]", &sz, &err), &err);
  CHECK(sz == 1, "fallback size %llu", (unsigned long long)sz);
  /* ...and so does any other refusal; the reason is kept for the message. */
  CHECK_OK(parse_size("[mypkg.a$boom;devbuf$int16]", &sz, &err), &err);
  CHECK(sz == 2, "fallback size %llu", (unsigned long long)sz);
  CHECK(parse_size("[mypkg.a$boom]", &sz, &err) == DEVBUF_ENOTFOUND, "boom");
  CHECK_HAS(err.message, "'mypkg.a' did not understand payload 'boom' (fixed4: payload exploded)");

  devbuf_format f = DEVBUF_FORMAT_INIT;
  CHECK_OK(devbuf_format_parse("[mypkg.a$bad;mypkg.a$boom;mypkg.a$ok;zz$]", 41, 0, &f, &err), &err);
  const devbuf_format_custom *cu = f.fields->custom;
  CHECK(cu->chosen == 2 && cu->alts[0].state == DEVBUF_ALT_REFUSED &&
            cu->alts[0].status == DEVBUF_ENOTFOUND && cu->alts[1].status == DEVBUF_EINVAL &&
            cu->alts[3].state == DEVBUF_ALT_NOT_TRIED,
        "alt states");
  CHECK(strcmp(cu->desc.canonical, "u32") == 0 && cu->desc.struct_size == sizeof cu->desc, "desc");
  devbuf_format_release(&f);

  /* Malformed descriptions from an interpreter are refused, not trusted. */
  CHECK_OK(devbuf_dtype_register(&NS_BADALIGN, &err), &err);
  CHECK_OK(devbuf_dtype_register(&NS_ZERO, &err), &err);
  CHECK(parse_size("[badalign$x]", &sz, &err) == DEVBUF_ENOTFOUND, "bad alignment trusted");
  CHECK_HAS(err.message, "alignment 3, not a power of two");
  CHECK(parse_size("[zerosize$x]", &sz, &err) == DEVBUF_ENOTFOUND, "zero size trusted");
  CHECK_HAS(err.message, "invalid itemsize 0");
  CHECK_OK(devbuf_dtype_unregister("badalign", &err), &err);
  CHECK_OK(devbuf_dtype_unregister("zerosize", &err), &err);
}

static void test_lookup_and_listing(void) {
  devbuf_error err;
  const devbuf_dtype_namespace *ns = NULL;
  const char *src = NULL;
  CHECK_OK(devbuf_dtype_lookup("devbuf", (size_t)-1, &ns, &src, &err), &err);
  CHECK(ns && strcmp(ns->id, "devbuf") == 0 && strcmp(src, "builtin") == 0, "devbuf");
  CHECK_OK(devbuf_dtype_lookup("struct", 6, &ns, &src, &err), &err);
  CHECK(strcmp(src, "reserved") == 0, "struct source %s", src);
  CHECK_OK(devbuf_dtype_lookup("mypkg.a", 7, &ns, &src, &err), &err);
  CHECK(ns == &NS_A && strcmp(src, "registered") == 0, "mypkg.a");
  CHECK(devbuf_dtype_lookup("numpy", 5, &ns, &src, &err) == DEVBUF_ENOTFOUND, "numpy");
  CHECK_HAS(err.message, "defined by the 'numpy' package");
  CHECK(devbuf_dtype_lookup("whatever", 8, &ns, &src, &err) == DEVBUF_ENOTFOUND, "whatever");
  CHECK_HAS(err.message, "'whatever' is not a known dtype id");

  size_t n = devbuf_dtype_namespace_count();
  CHECK(n >= 4, "count %zu", n);
  bool seen_a = false, seen_devbuf = false;
  for (size_t i = 0; i < n; i++) {
    CHECK_OK(devbuf_dtype_namespace_get(i, &ns, &src, &err), &err);
    if (ns == &NS_A) seen_a = true;
    if (strcmp(ns->id, "devbuf") == 0) seen_devbuf = true;
  }
  CHECK(seen_a && seen_devbuf, "listing");
  CHECK(devbuf_dtype_namespace_get(n + 5, &ns, &src, &err) == DEVBUF_ENOTFOUND, "past end");

  /* devbuf_dtype_interpret goes through the same path. */
  devbuf_dtype_desc d;
  CHECK_OK(devbuf_dtype_interpret("mypkg.a", "q", 1, &d, &err), &err);
  CHECK(d.itemsize == 4 && d.dlpack_code == DEVBUF_DLDT_UINT, "interpret");
  CHECK(devbuf_dtype_interpret("mypkg.a", "boom", 4, &d, &err) == DEVBUF_EINVAL, "interpret boom");
}

static void test_unregister(void) {
  devbuf_error err;
  uint64_t sz;
  CHECK_OK(devbuf_dtype_unregister("mypkg.a", &err), &err);
  CHECK(devbuf_dtype_unregister("mypkg.a", &err) == DEVBUF_ENOTFOUND, "twice");
  CHECK(parse_size("[mypkg.a$x]", &sz, &err) == DEVBUF_ENOTFOUND, "still resolves");
  CHECK_HAS(err.message, "'mypkg.a' is not a known dtype id");
  CHECK_OK(devbuf_dtype_register(&NS_A, &err), &err);
  CHECK_OK(parse_size("[mypkg.a$x]", &sz, &err), &err);
  CHECK_OK(devbuf_dtype_unregister("mypkg.a", &err), &err);
}

/* ---- unregister under load ------------------------------------------------------ */
typedef struct live_ctx {
  atomic_int alive;
  atomic_long calls;
} live_ctx;
static live_ctx g_live;
static atomic_int g_stop, g_bad;
static atomic_long g_ok, g_missing;

static int live_interpret(void *ctx, const char *p, size_t n, devbuf_dtype_desc *out,
                          devbuf_error *err) {
  (void)p, (void)n, (void)err;
  live_ctx *c = (live_ctx *)ctx;
  if (atomic_load(&c->alive) != 1) atomic_store(&g_bad, 1);
  atomic_fetch_add(&c->calls, 1);
  for (volatile int i = 0; i < 200; i++) {}
  if (atomic_load(&c->alive) != 1) atomic_store(&g_bad, 1); /* freed under our feet */
  out->itemsize = 4;
  out->alignment = 4;
  return DEVBUF_OK;
}
static const devbuf_dtype_namespace NS_LIVE = {sizeof(devbuf_dtype_namespace), 0, "live", "t", "t",
                                               live_interpret, &g_live};

static void *parser_thread(void *arg) {
  (void)arg;
  while (!atomic_load(&g_stop)) {
    uint64_t sz = 0;
    devbuf_error err;
    int rc = devbuf_format_itemsize("i[live$x]", 9, DEVBUF_FORMAT_NO_PLUGINS, &sz, NULL, NULL, &err);
    if (rc == DEVBUF_OK && sz == 8) atomic_fetch_add(&g_ok, 1);
    else if (rc == DEVBUF_ENOTFOUND) atomic_fetch_add(&g_missing, 1);
    else atomic_store(&g_bad, 2);
  }
  return NULL;
}

static void test_concurrent_unregister(void) {
  enum { NT = 4 };
  pthread_t th[NT];
  devbuf_error err;
  atomic_store(&g_live.alive, 1);
  for (int i = 0; i < NT; i++) pthread_create(&th[i], NULL, parser_thread, NULL);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rounds = 0;
  do {
    atomic_store(&g_live.alive, 1);
    CHECK_OK(devbuf_dtype_register(&NS_LIVE, &err), &err);
    for (volatile int i = 0; i < 20000; i++) {}
    CHECK_OK(devbuf_dtype_unregister("live", &err), &err);
    /* After unregister returns nobody may be inside live_interpret. */
    atomic_store(&g_live.alive, 0);
    for (volatile int i = 0; i < 2000; i++) {}
    rounds++;
    clock_gettime(CLOCK_MONOTONIC, &t1);
  } while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 700000000L);
  atomic_store(&g_stop, 1);
  for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
  CHECK(atomic_load(&g_bad) == 0, "interpret ran after unregister returned (%d)", atomic_load(&g_bad));
  CHECK(atomic_load(&g_ok) > 0 && atomic_load(&g_missing) > 0, "ok %ld missing %ld",
        atomic_load(&g_ok), atomic_load(&g_missing));
  printf("     %d register/unregister rounds, %ld resolved, %ld unknown\n", rounds,
         atomic_load(&g_ok), atomic_load(&g_missing));
}

/* ---- listing while others register and unregister ------------------------------
 * devbuf_dtype_namespace_list must list a namespace that stays registered
 * the whole time, once, however the others come and go; listing by index
 * (count + get) can miss it when one before it is removed between calls. */
static const devbuf_dtype_namespace NS_STABLE = NS("stable", fixed4);
static const devbuf_dtype_namespace NS_CHURN[4] = {NS("churn0", fixed4), NS("churn1", fixed4),
                                                   NS("churn2", fixed4), NS("churn3", fixed4)};
static atomic_int g_churn_stop;

/* Each churned namespace is a heap descriptor with heap strings, scribbled
 * over and freed as soon as its unregister returns: a listing that read one
 * after that would copy 'X's (or, under AddressSanitizer, fail at once). */
static void *churn_thread(void *arg) {
  (void)arg;
  devbuf_error err;
  while (!atomic_load(&g_churn_stop))
    for (int i = 0; i < 4; i++) {
      devbuf_dtype_namespace *ns = malloc(sizeof *ns);
      char *id = malloc(16), *prov = malloc(16);
      if (ns == NULL || id == NULL || prov == NULL) abort();
      *ns = NS_CHURN[i];
      snprintf(id, 16, "%s", NS_CHURN[i].id);
      snprintf(prov, 16, "churner");
      ns->id = id;
      ns->provider = prov;
      if (devbuf_dtype_register(ns, &err) == DEVBUF_OK) (void)devbuf_dtype_unregister(id, &err);
      memset(id, 'X', 15);
      memset(prov, 'X', 15);
      memset(ns, 'X', sizeof *ns);
      free(id);
      free(prov);
      free(ns);
    }
  return NULL;
}

static void test_listing_while_others_churn(void) {
  devbuf_error err;
  CHECK_OK(devbuf_dtype_register(&NS_STABLE, &err), &err);
  /* Capacity 0 (and no array) only counts. */
  size_t n0 = devbuf_dtype_namespace_list(NULL, 0);
  CHECK(n0 == devbuf_dtype_namespace_count(), "count %zu vs %zu", n0, devbuf_dtype_namespace_count());
  enum { CAP = 32 };
  static devbuf_dtype_namespace_info info[CAP];
  size_t n = devbuf_dtype_namespace_list(info, CAP);
  CHECK(n == n0 && n <= CAP, "listed %zu", n);
  CHECK(strcmp(info[0].id, "struct") == 0 && strcmp(info[0].source, "reserved") == 0, "first %s",
        info[0].id);
  int found = 0;
  for (size_t i = 0; i < n && i < CAP; i++)
    if (strcmp(info[i].id, "stable") == 0)
      found += strcmp(info[i].source, "registered") == 0 &&
               strcmp(info[i].provider, NS_STABLE.provider) == 0 &&
               info[i].flags == (DEVBUF_DTYPE_INFO_HAS_PROVIDER | DEVBUF_DTYPE_INFO_HAS_DESCRIPTION);
  CHECK(found == 1, "'stable' copied %d times", found);
  atomic_store(&g_churn_stop, 0);
  pthread_t th;
  pthread_create(&th, NULL, churn_thread, NULL);
  int bad = 0, index_missed = 0, scribbled = 0;
  for (int round = 0; round < 20000; round++) {
    n = devbuf_dtype_namespace_list(info, CAP);
    int seen = 0;
    for (size_t i = 0; i < n && i < CAP; i++) {
      seen += strcmp(info[i].id, "stable") == 0;
      if (info[i].id[0] == 'X' || info[i].provider[0] == 'X') scribbled++;
    }
    if (n > CAP || seen != 1) bad++;
    /* The same by index, only to show the difference this call makes. */
    size_t m = devbuf_dtype_namespace_count();
    int seen_by_index = 0;
    for (size_t i = 0; i < m; i++) {
      const devbuf_dtype_namespace *x = NULL;
      if (devbuf_dtype_namespace_get(i, &x, NULL, NULL) == DEVBUF_OK && x == &NS_STABLE) seen_by_index++;
    }
    index_missed += seen_by_index != 1;
  }
  atomic_store(&g_churn_stop, 1);
  pthread_join(th, NULL);
  CHECK(bad == 0, "%d of 20000 one-pass listings did not list 'stable' exactly once", bad);
  CHECK(scribbled == 0, "%d copies read a descriptor after its unregister returned", scribbled);
  printf("     20000 listings while another thread churns: one pass missed %d, by index %d\n", bad,
         index_missed);
  CHECK_OK(devbuf_dtype_unregister("stable", &err), &err);
}

/* ---- namespaces from plugins -------------------------------------------------------- */
static int stub_count(void *s, int *c, devbuf_error *e) {
  (void)s;
  *c = 0;
  return devbuf_error_set(e, DEVBUF_ENODEV, "fmt test plugin has no devices");
}
static int stub_props(void *s, int d, devbuf_device_props *p, devbuf_error *e) { (void)s, (void)d, (void)p; return devbuf_error_set(e, DEVBUF_ENOTSUP, "stub"); }
static int stub_alloc(void *s, int d, size_t n, size_t a, void *st, void **p, devbuf_error *e) { (void)s, (void)d, (void)n, (void)a, (void)st, (void)p; return devbuf_error_set(e, DEVBUF_ENOTSUP, "stub"); }
static int stub_free(void *s, int d, void *p, void *st, devbuf_error *e) { (void)s, (void)d, (void)p, (void)st; return devbuf_error_set(e, DEVBUF_ENOTSUP, "stub"); }
static int stub_h2d(void *s, int d, void *dst, size_t o, const void *src, size_t n, void *st, devbuf_error *e) { (void)s, (void)d, (void)dst, (void)o, (void)src, (void)n, (void)st; return devbuf_error_set(e, DEVBUF_ENOTSUP, "stub"); }
static int stub_d2h(void *s, int d, void *dst, const void *src, size_t o, size_t n, void *st, devbuf_error *e) { (void)s, (void)d, (void)dst, (void)o, (void)src, (void)n, (void)st; return devbuf_error_set(e, DEVBUF_ENOTSUP, "stub"); }
static int stub_d2d(void *s, int d, void *dst, size_t o, const void *src, size_t so, size_t n, void *st, devbuf_error *e) { (void)s, (void)d, (void)dst, (void)o, (void)src, (void)so, (void)n, (void)st; return devbuf_error_set(e, DEVBUF_ENOTSUP, "stub"); }
static int stub_sc(void *s, int d, void **st, devbuf_error *e) { (void)s, (void)d, (void)st; return devbuf_error_set(e, DEVBUF_ENOTSUP, "stub"); }
static int stub_sd(void *s, int d, void *st, devbuf_error *e) { (void)s, (void)d, (void)st; return devbuf_error_set(e, DEVBUF_ENOTSUP, "stub"); }
static int stub_er(void *s, int d, void *ev, void *st, devbuf_error *e) { (void)s, (void)d, (void)ev, (void)st; return devbuf_error_set(e, DEVBUF_ENOTSUP, "stub"); }

static int plug_interpret(void *ctx, const char *p, size_t n, devbuf_dtype_desc *out,
                          devbuf_error *err) {
  (void)ctx;
  if (n != 3 || memcmp(p, "abc", 3) != 0) return devbuf_error_set(err, DEVBUF_ENOTFOUND, "plugns: only abc");
  out->kind = DEVBUF_KIND_OPAQUE;
  out->itemsize = 6;
  out->alignment = 2;
  return DEVBUF_OK;
}
static const devbuf_dtype_namespace PLUG_NS = {sizeof(devbuf_dtype_namespace), 0, "plugns",
                                               "fmttest", "from a plugin", plug_interpret, NULL};
static const devbuf_dtype_namespace *const PLUG_NS_LIST[] = {&PLUG_NS, NULL};
static const char *const PLUG_IDS[] = {"devbuf.fmttest", NULL};

static void test_plugin_namespaces(void) {
  devbuf_plugin_table t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.abi_major = DEVBUF_ABI_MAJOR;
  t.abi_minor = DEVBUF_ABI_MINOR;
  t.name = "fmttest";
  t.version = "0.0.1";
  t.description = "dtype namespaces from a plugin table";
  t.identifiers = PLUG_IDS;
  t.device_count = stub_count;
  t.device_props = stub_props;
  t.mem_alloc = stub_alloc;
  t.mem_free = stub_free;
  t.copy_h2d = stub_h2d;
  t.copy_d2h = stub_d2h;
  t.copy_d2d = stub_d2d;
  t.stream_create = stub_sc;
  t.stream_destroy = stub_sd;
  t.stream_synchronize = stub_sd;
  t.event_create = stub_sc;
  t.event_destroy = stub_sd;
  t.event_record = stub_er;
  t.stream_wait_event = stub_er;
  t.event_synchronize = stub_sd;
  t.event_query = stub_sd;
  t.dtype_namespaces = PLUG_NS_LIST;
  devbuf_error err;
  uint64_t sz = 0;
  CHECK(parse_size("[plugns$abc]", &sz, &err) == DEVBUF_ENOTFOUND, "resolved before load");
  size_t index = 0;
  CHECK_OK(devbuf_plugin_register(&t, "test_dtype_registry", &index, &err), &err);
  CHECK_OK(parse_size("b[plugns$abc]", &sz, &err), &err);
  CHECK(sz == 8, "size %llu", (unsigned long long)sz);
  CHECK(devbuf_format_itemsize("[plugns$abc]", 12, DEVBUF_FORMAT_NO_PLUGINS, &sz, NULL, NULL,
                               &err) == DEVBUF_ENOTFOUND,
        "NO_PLUGINS ignored");
  CHECK(parse_size("[plugns$xyz]", &sz, &err) == DEVBUF_ENOTFOUND, "xyz");
  CHECK_HAS(err.message, "plugns: only abc");

  const devbuf_dtype_namespace *ns;
  const char *src;
  CHECK_OK(devbuf_dtype_lookup("plugns", 6, &ns, &src, &err), &err);
  CHECK(ns == &PLUG_NS && strcmp(src, "fmttest") == 0, "lookup source %s", src);
  devbuf_dtype_namespace dup = {sizeof dup, 0, "plugns", "x", "x", plug_interpret, NULL};
  CHECK(devbuf_dtype_register(&dup, &err) == DEVBUF_EEXIST, "shadowing a plugin accepted");
  CHECK_HAS(err.message, "provided by plugin 'fmttest'");
  bool listed = false;
  size_t n = devbuf_dtype_namespace_count();
  for (size_t i = 0; i < n; i++)
    if (devbuf_dtype_namespace_get(i, &ns, &src, &err) == DEVBUF_OK && ns == &PLUG_NS &&
        strcmp(src, "fmttest") == 0)
      listed = true;
  CHECK(listed, "plugin namespace not listed");

  CHECK_OK(devbuf_plugin_unregister(index, &err), &err);
  CHECK(parse_size("[plugns$abc]", &sz, &err) == DEVBUF_ENOTFOUND, "resolved after unregister");
}

int main(void) {
  RUN(test_register_rules);
  RUN(test_lookup_and_listing);
  RUN(test_unregister);
  RUN(test_concurrent_unregister);
  RUN(test_listing_while_others_churn);
  RUN(test_plugin_namespaces);
  printf("%d passed, %d failed\n", devbuf_test_passed, devbuf_test_failed);
  return devbuf_test_failed ? 1 : 0;
}
