/* Loader, ABI checks, identifier registry and the checked runtime wrappers.
 * argv[1]: the directory holding the broken-plugin corpus. */
#include <pthread.h>
#include <stdint.h>

#include "devbuf/runtime.h"
#include "devbuf_test.h"

static const char *g_broken_dir;

static int load_kind(const char *kind, size_t *index, devbuf_error *err) {
  char path[4096];
  snprintf(path, sizeof path, "%s/devbuf_plugin_%s.so", g_broken_dir, kind);
  devbuf_error_clear(err);
  return devbuf_plugin_load(path, index, err);
}

static void test_versions(void) {
  int maj = -1, min = -1;
  devbuf_abi_version(&maj, &min);
  CHECK(maj == DEVBUF_ABI_MAJOR && min == DEVBUF_ABI_MINOR, "abi %d.%d", maj, min);
  CHECK(strcmp(devbuf_version(), DEVBUF_VERSION_STRING) == 0, "%s", devbuf_version());
  CHECK(strcmp(devbuf_status_name(DEVBUF_EABI), "DEVBUF_EABI") == 0, "name");
  CHECK(strcmp(devbuf_status_name(999), "DEVBUF_E?") == 0, "unknown name");
}

static void test_default_discovery_finds_cpu(void) {
  devbuf_error err;
  devbuf_device dev;
  CHECK_OK(devbuf_device_open("cpu", &dev, &err), &err);
  devbuf_device_props p;
  CHECK_OK(devbuf_device_props_get(&dev, &p, &err), &err);
  CHECK(p.flags & DEVBUF_DEVICE_HOST_ACCESSIBLE, "cpu must be host-accessible");
  CHECK(p.dlpack_device_type == DEVBUF_DL_CPU, "dlpack type %d", p.dlpack_device_type);
  int found = 0;
  for (size_t i = 0; i < devbuf_search_path_count(); i++) {
    const devbuf_search_entry *e = devbuf_search_path_get(i);
    if (strcmp(e->source, "build tree") == 0 && e->exists) found = 1;
  }
  CHECK(found, "the build tree's plugin directory should be on the search path");
  size_t idx = 0;
  const char *in = NULL;
  CHECK_OK(devbuf_identifier_lookup("cpu", &in, &idx, &err), &err);
  devbuf_plugin_info info = {.struct_size = sizeof info};
  CHECK_OK(devbuf_plugin_info_get(idx, &info, &err), &err);
  CHECK(info.state == DEVBUF_PLUGIN_LOADED && strcmp(info.name, "cpu") == 0, "cpu record");
  CHECK(strcmp(info.source, "build tree") == 0, "source %s", info.source);
}

static void test_interning(void) {
  devbuf_error err;
  const char *a = NULL, *b = NULL;
  char copy[] = "cpu";
  CHECK_OK(devbuf_identifier_lookup("cpu", &a, NULL, &err), &err);
  CHECK_OK(devbuf_identifier_lookup(copy, &b, NULL, &err), &err);
  CHECK(a == b && a != copy, "interned identifiers compare by pointer");
  devbuf_device d1, d2;
  CHECK_OK(devbuf_device_open("cpu:0", &d1, &err), &err);
  CHECK_OK(devbuf_device_open_ordinal(copy, 0, &d2, &err), &err);
  CHECK(d1.identifier == d2.identifier && d1.identifier == a, "device identifiers interned");
}

/* devbuf_device_open_ordinal opens what devbuf_device_open opens from the
 * spec "identifier:ordinal"; devbuf_device_open2, its old name, is still
 * exported by libdevbuf (this test links it) and behaves the same. */
static void test_open_ordinal_and_old_name(void) {
  devbuf_error err;
  devbuf_device by_spec, by_ordinal, by_old;
  CHECK_OK(devbuf_device_open("cpu:0", &by_spec, &err), &err);
  CHECK_OK(devbuf_device_open_ordinal("cpu", 0, &by_ordinal, &err), &err);
  CHECK(by_spec.identifier == by_ordinal.identifier && by_spec.ordinal == by_ordinal.ordinal &&
            by_spec.backend == by_ordinal.backend, "same device both ways");
  CHECK(devbuf_device_open_ordinal("cpu", -1, NULL, &err) == DEVBUF_ENODEV, "negative ordinal");
  CHECK(devbuf_device_open_ordinal("no.such.device", 0, NULL, &err) == DEVBUF_ENOTFOUND,
        "unknown identifier");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  CHECK_OK(devbuf_device_open2("cpu", 0, &by_old, &err), &err);
  CHECK(devbuf_device_open2("cpu", -1, NULL, &err) == DEVBUF_ENODEV, "old name, same checks");
#pragma GCC diagnostic pop
  CHECK(by_old.identifier == by_ordinal.identifier && by_old.backend == by_ordinal.backend,
        "the old name opens the same device");
}

static void test_identifier_rules(void) {
  devbuf_error err;
  CHECK(devbuf_identifier_check("devbuf.sim", &err) == DEVBUF_OK, "valid");
  CHECK(devbuf_identifier_check("", &err) == DEVBUF_EINVAL, "empty");
  CHECK_HAS(err.message, "empty");
  CHECK(devbuf_identifier_check("a b", &err) == DEVBUF_EINVAL, "space");
  CHECK_HAS(err.message, "offset 1");
  CHECK(devbuf_identifier_check("a:b", &err) == DEVBUF_EINVAL, "colon");
  CHECK(devbuf_identifier_check(NULL, &err) == DEVBUF_EINVAL, "NULL");
  char longid[100];
  memset(longid, 'x', sizeof longid - 1);
  longid[sizeof longid - 1] = 0;
  CHECK(devbuf_identifier_check(longid, &err) == DEVBUF_EINVAL, "overlong");
  CHECK_HAS(err.message, "longer than 63");
}

static void test_device_spec_errors(void) {
  devbuf_error err;
  devbuf_device d;
  CHECK(devbuf_device_open("no.such.device", &d, &err) == DEVBUF_ENOTFOUND, "unknown");
  CHECK_HAS(err.message, "no.such.device");
  CHECK(devbuf_device_open("cpu:7", &d, &err) == DEVBUF_ENODEV, "ordinal");
  CHECK_HAS(err.message, "cpu:7");
  CHECK(devbuf_device_open("cpu:x", &d, &err) == DEVBUF_EINVAL, "not a number");
  CHECK_HAS(err.message, "offset 4");
  CHECK(devbuf_device_open("cpu:1x", &d, &err) == DEVBUF_EINVAL, "trailing junk");
  CHECK(devbuf_device_open(":0", &d, &err) == DEVBUF_EINVAL, "empty id");
  CHECK(devbuf_device_open(NULL, &d, &err) == DEVBUF_EINVAL, "NULL");
}

typedef struct { const char *kind; int code; const char *needle; } broken_case;

static void test_broken_corpus(void) {
  static const broken_case cases[] = {
      {"no_entry", DEVBUF_ELOAD, "no entry symbol 'devbuf_plugin_entry'"},
      {"wrong_major", DEVBUF_EABI, "built for devbuf plugin ABI 2.0, this runtime speaks ABI 1.1"},
      {"size_zero", DEVBUF_EABI, "struct_size 0 is too small"},
      {"size_short", DEVBUF_EABI, "short table"},
      {"null_slot", DEVBUF_EABI, "mandatory slot 'mem_alloc' is NULL"},
      {"null_table", DEVBUF_EABI, "returned NULL"},
      {"id_empty", DEVBUF_EABI, "identifier is empty"},
      {"id_nonprint", DEVBUF_EABI, "non-printable"},
      {"id_overlong", DEVBUF_EABI, "longer than 63 bytes"},
      {"id_cpu", DEVBUF_EABI, "'cpu' is reserved"},
      {"id_colon", DEVBUF_EABI, "contains ':'"},
      {"init_fail", DEVBUF_EINIT, "init failed: DEVBUF_EBACKEND: broken_init: simulated driver refusal"},
      {"no_ids", DEVBUF_EABI, "declares no device identifiers"},
      {"null_name", DEVBUF_EABI, "'name' is NULL"},
      /* Not "ABI 32762.0, rebuild", and not an unknown "test.unterm". */
      {"not_repr_c", DEVBUF_EABI, "this is not a devbuf plugin table ("},
      {"id_unterminated", DEVBUF_EABI,
       "identifier #0 reads 'test.unterm0.1.0', which runs into the table's version ('0.1.0') "
       "at byte 11: the identifier is missing its terminating NUL"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    devbuf_error err;
    size_t idx = (size_t)-1;
    int rc = load_kind(cases[i].kind, &idx, &err);
    CHECK(rc == cases[i].code, "%s: rc %s, want %s (%s)", cases[i].kind, devbuf_status_name(rc),
          devbuf_status_name(cases[i].code), err.message);
    CHECK_HAS(err.message, cases[i].needle);
    CHECK_HAS(err.message, cases[i].kind); /* the message names the file */
    /* The failure is on record for listings. */
    devbuf_plugin_info info = {.struct_size = sizeof info};
    CHECK(idx != (size_t)-1 && devbuf_plugin_info_get(idx, &info, NULL) == DEVBUF_OK, "%s: record", cases[i].kind);
    CHECK(info.state == DEVBUF_PLUGIN_FAILED && info.error_code == cases[i].code, "%s: state %d", cases[i].kind, info.state);
    CHECK(info.table == NULL, "failed plugins expose no table");
  }
  /* A missing file. */
  devbuf_error err;
  CHECK(devbuf_plugin_load("/nonexistent/devbuf_plugin_x.so", NULL, &err) == DEVBUF_ELOAD, "missing file");
  CHECK_HAS(err.message, "/nonexistent/devbuf_plugin_x.so");
  /* And the good plugins still work after all that. */
  devbuf_device d;
  CHECK_OK(devbuf_device_open("cpu", &d, &err), &err);
}

static void test_tolerated_tables(void) {
  devbuf_error err;
  size_t idx;
  CHECK_OK(load_kind("minor_newer", &idx, &err), &err);
  devbuf_plugin_info info = {.struct_size = sizeof info};
  devbuf_plugin_info_get(idx, &info, NULL);
  CHECK(info.abi_minor == DEVBUF_ABI_MINOR + 7, "minor %u", info.abi_minor);
  CHECK_HAS(info.reason, "newer than this runtime");
  CHECK_OK(load_kind("size_huge", &idx, &err), &err);
  devbuf_plugin_info_get(idx, &info, NULL);
  CHECK(info.table != NULL && info.table->struct_size == sizeof(devbuf_plugin_table),
        "host copy is clamped to what the host knows");
  /* Loading the same file twice gives the same record, not a conflict. */
  size_t idx2;
  CHECK_OK(load_kind("size_huge", &idx2, &err), &err);
  CHECK(idx == idx2, "same file, same record");
}

static void test_duplicate_identifier(void) {
  devbuf_error err;
  size_t a, b;
  CHECK_OK(load_kind("dup_a", &a, &err), &err);
  CHECK(load_kind("dup_b", &b, &err) == DEVBUF_EEXIST, "second claim refused");
  CHECK_HAS(err.message, "devbuf_plugin_dup_b.so");
  CHECK_HAS(err.message, "devbuf_plugin_dup_a.so");
  CHECK_HAS(err.message, "'test.dup'");
  size_t owner;
  CHECK_OK(devbuf_identifier_lookup("test.dup", NULL, &owner, &err), &err);
  CHECK(owner == a, "the first plugin keeps the identifier");
}

static void test_lazy_probe(void) {
  /* Loading must not probe devices: this plugin crashes when probed. */
  devbuf_error err;
  size_t idx;
  CHECK_OK(load_kind("crash_probe", &idx, &err), &err);
  CHECK_OK(load_kind("hang_probe", &idx, &err), &err);
}

static void test_good_plugin_and_bookkeeping(void) {
  devbuf_error err;
  size_t idx;
  CHECK_OK(load_kind("good", &idx, &err), &err);
  devbuf_device d;
  CHECK_OK(devbuf_device_open("test.kind17", &d, &err), &err);
  void *p = NULL;
  CHECK_OK(devbuf_mem_alloc(&d, 100, 0, NULL, &p, &err), &err);
  devbuf_stats st;
  devbuf_plugin_stats(idx, &st, NULL);
  CHECK(st.live_allocations == 1 && st.live_bytes == 100, "live %llu/%llu",
        (unsigned long long)st.live_allocations, (unsigned long long)st.live_bytes);
  char in[100], out[100];
  for (int i = 0; i < 100; i++) in[i] = (char)i;
  CHECK_OK(devbuf_copy_from_host_sync(&d, p, 0, in, 100, &err), &err);
  CHECK_OK(devbuf_copy_to_host_sync(&d, out, p, 0, 100, NULL, &err), &err);
  CHECK(memcmp(in, out, 100) == 0, "round trip");
  CHECK(devbuf_copy_d2h(&d, out, p, 50, 51, NULL, &err) == DEVBUF_EINVAL, "out of range");
  CHECK_HAS(err.message, "outside the 100-byte allocation");
  CHECK(devbuf_plugin_unregister(idx, &err) == DEVBUF_EBUSY, "unregister while alive");
  CHECK_HAS(err.message, "1 allocation(s)");
  CHECK_OK(devbuf_mem_free(&d, p, NULL, &err), &err);
  CHECK(devbuf_mem_free(&d, p, NULL, &err) == DEVBUF_EINVAL, "double free caught");
  CHECK_HAS(err.message, "already freed");
  int x;
  CHECK(devbuf_mem_free(&d, &x, NULL, &err) == DEVBUF_EINVAL, "foreign free caught");
  devbuf_plugin_stats(idx, &st, NULL);
  CHECK(st.live_allocations == 0 && st.live_bytes == 0 && st.total_allocations == 1, "back to zero");
  CHECK_OK(devbuf_plugin_unregister(idx, &err), &err);
  CHECK(devbuf_device_open("test.kind17", &d, &err) == DEVBUF_ENOTFOUND, "gone after unregister");
  CHECK(devbuf_mem_alloc(&d, 1, 0, NULL, &p, &err) == DEVBUF_ENODEV, "stale handle refused");
}

static int t_count(void *s, int *c, devbuf_error *e) { *c = 0; return devbuf_error_set(e, DEVBUF_ENODEV, "no hardware here: test reason"); }
static int t_props(void *s, int d, devbuf_device_props *p, devbuf_error *e) { return DEVBUF_OK; }
static int t_alloc(void *s, int d, size_t n, size_t a, void *st, void **p, devbuf_error *e) { return DEVBUF_ENOTSUP; }
static int t_free(void *s, int d, void *p, void *st, devbuf_error *e) { return DEVBUF_OK; }
static int t_cp1(void *s, int d, void *a, size_t b, const void *c, size_t n, void *st, devbuf_error *e) { return 0; }
static int t_cp2(void *s, int d, void *a, const void *c, size_t b, size_t n, void *st, devbuf_error *e) { return 0; }
static int t_cp3(void *s, int d, void *a, size_t b, const void *c, size_t o, size_t n, void *st, devbuf_error *e) { return 0; }
static int t_sc(void *s, int d, void **st, devbuf_error *e) { return 0; }
static int t_so(void *s, int d, void *st, devbuf_error *e) { return 0; }
static int t_er(void *s, int d, void *ev, void *st, devbuf_error *e) { return 0; }
static int t_sw(void *s, int d, void *st, void *ev, devbuf_error *e) { return 0; }

static void test_registered_table_without_device(void) {
  static const char *const ids[] = {"test.registered", NULL};
  static const devbuf_plugin_table t = {
      .struct_size = sizeof t, .abi_major = DEVBUF_ABI_MAJOR, .abi_minor = DEVBUF_ABI_MINOR,
      .name = "registered", .version = "1", .identifiers = ids,
      .device_count = t_count, .device_props = t_props, .mem_alloc = t_alloc, .mem_free = t_free,
      .copy_h2d = t_cp1, .copy_d2h = t_cp2, .copy_d2d = t_cp3, .stream_create = t_sc,
      .stream_destroy = t_so, .stream_synchronize = t_so, .event_create = t_sc,
      .event_destroy = t_so, .event_record = t_er, .stream_wait_event = t_sw,
      .event_synchronize = t_so, .event_query = t_so};
  devbuf_error err;
  size_t idx;
  CHECK_OK(devbuf_plugin_register(&t, "test_loader.c", &idx, &err), &err);
  devbuf_plugin_info info = {.struct_size = sizeof info};
  devbuf_plugin_info_get(idx, &info, NULL);
  CHECK_HAS(info.path, "<registered: test_loader.c>");
  int n = -1;
  CHECK(devbuf_plugin_device_count(idx, &n, &err) == DEVBUF_ENODEV && n == 0, "no device");
  CHECK_HAS(err.message, "no hardware here: test reason");
  devbuf_device d;
  CHECK(devbuf_device_open("test.registered", &d, &err) == DEVBUF_ENODEV, "open fails");
  CHECK_HAS(err.message, "no hardware here: test reason");
  CHECK(devbuf_plugin_register(&t, "again", NULL, &err) == DEVBUF_EEXIST, "same ids twice");
  CHECK(devbuf_plugin_register(NULL, "null", NULL, &err) == DEVBUF_EABI, "NULL table");
}

static void *thread_body(void *arg) {
  devbuf_error err;
  for (int i = 0; i < 2000; i++) {
    devbuf_device d;
    if (devbuf_device_open("cpu", &d, &err)) return (void *)1;
    void *p;
    if (devbuf_mem_alloc(&d, 64 + (size_t)i, 0, NULL, &p, &err)) return (void *)2;
    char buf[64] = {0};
    if (devbuf_copy_h2d(&d, p, 0, buf, sizeof buf, NULL, &err)) return (void *)3;
    if (devbuf_mem_free(&d, p, NULL, &err)) return (void *)4;
    devbuf_plugin_count();
  }
  return NULL;
}

static void test_threads(void) {
  pthread_t th[8];
  for (int i = 0; i < 8; i++) pthread_create(&th[i], NULL, thread_body, NULL);
  for (int i = 0; i < 8; i++) {
    void *r;
    pthread_join(th[i], &r);
    CHECK(r == NULL, "thread %d failed at step %p", i, r);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_loader BROKEN_PLUGIN_DIR\n");
    return 2;
  }
  g_broken_dir = argv[1];
  RUN(test_versions);
  RUN(test_default_discovery_finds_cpu);
  RUN(test_interning);
  RUN(test_open_ordinal_and_old_name);
  RUN(test_identifier_rules);
  RUN(test_device_spec_errors);
  RUN(test_broken_corpus);
  RUN(test_tolerated_tables);
  RUN(test_duplicate_identifier);
  RUN(test_lazy_probe);
  RUN(test_good_plugin_and_bookkeeping);
  RUN(test_registered_table_without_device);
  RUN(test_threads);
  return devbuf_test_finish();
}
