/* Plugin-table failure modes found by fuzzing, and the runtime's fixed limits,
 * each stated as a test with the exact error a user sees.
 * argv[1]: the broken-plugin corpus directory. */
#include <stddef.h>
#include <stdint.h>

#include "devbuf/runtime.h"
#include "devbuf_test.h"

static const char *g_broken_dir;

static int ok_count(void *s, int *count, devbuf_error *err) {
  *count = 1;
  return DEVBUF_OK;
}
static int neg_count(void *s, int *count, devbuf_error *err) { return -5; }
static int ok_props(void *s, int d, devbuf_device_props *p, devbuf_error *err) {
  p->alloc_alignment = 1; /* 0 is refused */
  return DEVBUF_OK;
}
static int brim_props(void *s, int d, devbuf_device_props *p, devbuf_error *err) {
  memset(p->name, 'n', sizeof p->name);
  memset(p->vendor, 'v', sizeof p->vendor);
  p->alloc_alignment = 16;
  return DEVBUF_OK;
}
static int any(void) { return DEVBUF_OK; }
static int bad_export(void) { return DEVBUF_EINTERNAL; }

typedef void (*fnptr)(void);

/* A valid table with every mandatory slot set to a harmless function. */
static void make_table(devbuf_plugin_table *t, const char *const *ids) {
  memset(t, 0, sizeof *t);
  t->struct_size = sizeof *t;
  t->abi_major = DEVBUF_ABI_MAJOR;
  t->abi_minor = DEVBUF_ABI_MINOR;
  t->name = "hardening";
  t->version = "1";
  t->identifiers = ids;
  fnptr *slots = (fnptr *)(void *)&t->device_count;
  for (int i = 0; i < 16; i++) slots[i] = (fnptr)any;
  t->device_count = ok_count;
  t->device_props = ok_props;
}

/* A plugin whose vendor library is missing loads anyway, reports no device
 * with dlopen's own words, and the others keep working. main() points every
 * GPU plugin at a library that does not exist before anything runs. */
static void test_vendor_library_missing(void) {
  static const struct { const char *id, *lib; } gpus[] = {
      {"devbuf.cuda", "/nonexistent/libcuda.so.1"},
      {"devbuf.hip", "/nonexistent/libamdhip64.so"},
      {"devbuf.level_zero", "/nonexistent/libze_loader.so.1"},
      {"devbuf.opencl", "/nonexistent/libOpenCL.so.1"}};
  devbuf_error err;
  int tested = 0;
  for (size_t i = 0; i < sizeof gpus / sizeof gpus[0]; i++) {
    size_t idx;
    if (devbuf_identifier_lookup(gpus[i].id, NULL, &idx, NULL) != DEVBUF_OK) continue; /* not built */
    tested++;
    devbuf_plugin_info info = {.struct_size = sizeof info};
    CHECK_OK(devbuf_plugin_info_get(idx, &info, &err), &err);
    CHECK(info.state == DEVBUF_PLUGIN_LOADED, "%s loads without its library", gpus[i].id);
    devbuf_device d;
    CHECK(devbuf_device_open(gpus[i].id, &d, &err) == DEVBUF_ENODEV, "%s: no device", gpus[i].id);
    CHECK_HAS(err.message, gpus[i].id);
    CHECK_HAS(err.message, gpus[i].lib);
    CHECK_HAS(err.message, "cannot open shared object file");
  }
  CHECK(tested >= 1, "no GPU plugin was built");
  devbuf_device d;
  void *p = NULL;
  CHECK_OK(devbuf_device_open("devbuf.sim", &d, &err), &err);
  CHECK_OK(devbuf_mem_alloc(&d, 64, 0, NULL, &p, &err), &err);
  CHECK_OK(devbuf_mem_free(&d, p, NULL, &err), &err);
  CHECK_OK(devbuf_device_open("cpu", &d, &err), &err);
}

static void test_identifier_listed_twice(void) {
  static const char *const ids[] = {"hard.twice", "hard.other", "hard.twice", NULL};
  devbuf_plugin_table t;
  make_table(&t, ids);
  size_t before = devbuf_plugin_count(), idx = 7;
  devbuf_error err;
  CHECK(devbuf_plugin_register(&t, "twice", &idx, &err) == DEVBUF_EABI, "refused");
  CHECK_HAS(err.message, "<registered: twice> (hardening): identifier 'hard.twice' is listed twice (#0 and #2)");
  CHECK(idx == (size_t)-1, "no record index for a refused table");
  CHECK(devbuf_plugin_count() == before, "a refused table leaves no record");
  CHECK(devbuf_identifier_lookup("hard.other", NULL, NULL, NULL) == DEVBUF_ENOTFOUND,
        "none of its identifiers resolves");
}

static void test_struct_size_inside_a_field(void) {
  /* struct_size ends 3 bytes into device_info_export: that slot must count
   * as absent, not as 3 bytes of a pointer. */
  static const char *const ids[] = {"hard.split", NULL};
  devbuf_plugin_table t;
  make_table(&t, ids);
  t.device_info_export = (void *)bad_export;
  t.struct_size = (uint32_t)(offsetof(devbuf_plugin_table, device_info_export) + 3);
  devbuf_error err;
  size_t idx;
  CHECK_OK(devbuf_plugin_register(&t, "split", &idx, &err), &err);
  devbuf_plugin_info info = {.struct_size = sizeof info};
  CHECK_OK(devbuf_plugin_info_get(idx, &info, &err), &err);
  CHECK(info.table->struct_size == offsetof(devbuf_plugin_table, device_info_export),
        "host copy ends at the last whole field: %u", info.table->struct_size);
  CHECK(info.table->device_info_export == NULL, "the split slot is absent");
  devbuf_device d;
  CHECK_OK(devbuf_device_open("hard.split", &d, &err), &err);
  devbuf_device_info di;
  size_t n = 0;
  CHECK_OK(devbuf_device_info_export(&d, NULL, NULL, 0, &di, sizeof di, &n, &err), &err);
  CHECK(n == sizeof di && di.version == DEVBUF_DEVICE_INFO_VERSION, "default layout written");
  CHECK_OK(devbuf_plugin_unregister(idx, &err), &err);
}

static void test_negative_status_and_unterminated_props(void) {
  static const char *const ids[] = {"hard.negative", NULL};
  static const char *const ids2[] = {"hard.brim", NULL};
  devbuf_plugin_table t, t2;
  make_table(&t, ids);
  t.device_count = neg_count;
  devbuf_error err;
  size_t idx, idx2;
  CHECK_OK(devbuf_plugin_register(&t, "negative", &idx, &err), &err);
  devbuf_device d;
  CHECK(devbuf_device_open("hard.negative", &d, &err) == DEVBUF_EBACKEND, "negative -> EBACKEND");
  /* The number the plugin returned, not "DEVBUF_E?". */
  CHECK_HAS(err.message, "hard.negative: hardening: no device: plugin 'hardening': device_count "
                         "returned -5, which is not a devbuf_status");
  CHECK_OK(devbuf_plugin_unregister(idx, &err), &err);

  make_table(&t2, ids2);
  t2.device_props = brim_props;
  CHECK_OK(devbuf_plugin_register(&t2, "brim", &idx2, &err), &err);
  CHECK_OK(devbuf_device_open("hard.brim", &d, &err), &err);
  /* A name filled to the brim has no NUL: refused, as a struct laid out
   * otherwise than in C reads, rather than cut short. */
  devbuf_device_props p;
  CHECK(devbuf_device_props_get(&d, &p, &err) == DEVBUF_EABI, "unterminated name refused");
  CHECK_HAS(err.message, "hard.brim:0: device_props: plugin 'hardening' reports a name with no "
                         "terminating NUL within its 128 bytes");
  CHECK_OK(devbuf_plugin_unregister(idx2, &err), &err);
}

static void test_failures_do_not_use_up_records(void) {
  static const char *const ids[] = {"cpu", NULL}; /* reserved: always refused */
  devbuf_plugin_table t;
  make_table(&t, ids);
  size_t before = devbuf_plugin_count();
  devbuf_error err;
  for (int i = 0; i < 1000; i++)
    CHECK(devbuf_plugin_register(&t, "loop", NULL, &err) == DEVBUF_EABI, "refused");
  CHECK_HAS(err.message, "identifier 'cpu' is reserved");
  CHECK(devbuf_plugin_count() == before, "%zu records after 1000 refusals (was %zu)",
        devbuf_plugin_count(), before);

  /* A broken file loaded again and again keeps one record. */
  char path[4096];
  snprintf(path, sizeof path, "%s/devbuf_plugin_wrong_major.so", g_broken_dir);
  size_t first = 0, again = 0;
  CHECK(devbuf_plugin_load(path, &first, &err) == DEVBUF_EABI, "wrong major");
  before = devbuf_plugin_count();
  for (int i = 0; i < 1000; i++) devbuf_plugin_load(path, &again, &err);
  CHECK(again == first && devbuf_plugin_count() == before, "one record for one repeated failure");
  devbuf_plugin_info info = {.struct_size = sizeof info};
  CHECK_OK(devbuf_plugin_info_get(first, &info, &err), &err);
  CHECK(info.state == DEVBUF_PLUGIN_FAILED && info.error_code == DEVBUF_EABI, "still listed");
}

/* The fixed limits: 8192 interned identifiers and 4096 plugin records, both
 * never freed (pointers into them stay valid). Hitting either is a clean
 * error, and what was loaded keeps working. Runs last: it uses them up. */
static void test_limits(void) {
  devbuf_error err;
  static char names[160][64][16];
  static const char *lists[160][65];
  int interned_full = 0;
  for (int r = 0; r < 160 && !interned_full; r++) {
    for (int k = 0; k < 64; k++) {
      snprintf(names[r][k], sizeof names[r][k], "lim.%d.%d", r, k);
      lists[r][k] = names[r][k];
    }
    lists[r][64] = NULL;
    devbuf_plugin_table t;
    make_table(&t, lists[r]);
    size_t idx;
    int rc = devbuf_plugin_register(&t, "limits", &idx, &err);
    if (rc == DEVBUF_ENOMEM) {
      CHECK_HAS(err.message, "(registry full)");
      interned_full = 1;
      break;
    }
    CHECK_OK(rc, &err);
    CHECK_OK(devbuf_plugin_unregister(idx, &err), &err);
  }
  CHECK(interned_full, "8192 interned identifiers run out");
  /* An identifier interned before still registers. */
  static const char *const reuse[] = {"lim.0.0", NULL};
  devbuf_plugin_table t;
  make_table(&t, reuse);
  size_t idx;
  int rc = DEVBUF_OK, cycles = 0;
  while ((rc = devbuf_plugin_register(&t, "cycle", &idx, &err)) == DEVBUF_OK && cycles < 10000) {
    cycles++;
    CHECK_OK(devbuf_plugin_unregister(idx, &err), &err);
  }
  CHECK(rc == DEVBUF_ENOMEM, "records run out: %s", err.message);
  CHECK_HAS(err.message, "too many plugins (limit 4096)");
  CHECK(cycles > 3000, "%d register/unregister cycles before the limit", cycles);
  /* What was loaded still works. */
  devbuf_device d;
  CHECK_OK(devbuf_device_open("cpu", &d, &err), &err);
  void *p = NULL;
  CHECK_OK(devbuf_mem_alloc(&d, 16, 0, NULL, &p, &err), &err);
  CHECK_OK(devbuf_mem_free(&d, p, NULL, &err), &err);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_registration BROKEN_PLUGIN_DIR\n");
    return 2;
  }
  g_broken_dir = argv[1];
  setenv("DEVBUF_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  setenv("DEVBUF_HIP_LIBRARY", "/nonexistent/libamdhip64.so", 1);
  setenv("DEVBUF_LEVEL_ZERO_LIBRARY", "/nonexistent/libze_loader.so.1", 1);
  setenv("DEVBUF_OPENCL_LIBRARY", "/nonexistent/libOpenCL.so.1", 1);
  RUN(test_vendor_library_missing);
  RUN(test_identifier_listed_twice);
  RUN(test_struct_size_inside_a_field);
  RUN(test_negative_status_and_unterminated_props);
  RUN(test_failures_do_not_use_up_records);
  RUN(test_limits);
  return devbuf_test_finish();
}
