/* The messages a first-time plugin author (often writing Rust or
 * C++) still missed, each from a file of the broken-plugin corpus loaded
 * the way an author would load it.
 *
 *   test_author_messages BROKEN_DIR CASE
 *
 * One case per ctest test, since a case may need its own environment (the
 * plugin search path) or may not run under a sanitizer (a dangling pointer
 * is read on purpose). */
#include <stdint.h>

#include "devbuf/runtime.h"
#include "devbuf_test.h"

static const char *g_dir;

static int load(const char *kind, size_t *index, devbuf_error *err) {
  char path[4096];
  snprintf(path, sizeof path, "%s/devbuf_plugin_%s.so", g_dir, kind);
  devbuf_error_clear(err);
  return devbuf_plugin_load(path, index, err);
}

/* device_count answering DEVBUF_ENODEV with no message: the reason was
 * empty ("no device: " and nothing after it). */
static void test_count_without_message(void) {
  devbuf_error err;
  size_t idx;
  CHECK_OK(load("count_nomsg", &idx, &err), &err);
  int n = -1;
  devbuf_error_clear(&err);
  int rc = devbuf_device_count("test.kind22", &n, &err);
  CHECK(rc == DEVBUF_ENODEV && n == 0, "rc %s, n %d", devbuf_status_name(rc), n);
  CHECK_HAS(err.message, "broken22: no device: device_count failed with DEVBUF_ENODEV (no message)");
}

/* A table laid out otherwise than plugin.h: its "struct_size" and
 * "abi_major" are half a pointer, different at every run. */
static void test_not_a_table(void) {
  devbuf_error err;
  size_t idx = (size_t)-1;
  int rc = load("not_repr_c", &idx, &err);
  CHECK(rc == DEVBUF_EABI, "rc %s", devbuf_status_name(rc));
  CHECK_HAS(err.message, "devbuf_plugin_not_repr_c.so: this is not a devbuf plugin table (");
  CHECK_HAS(err.message, " is implausible; is the table laid out as in plugin.h, e.g. #[repr(C)]?");
  CHECK(strstr(err.message, "rebuild") == NULL, "no advice to rebuild: %s", err.message);
  /* Not a table, so no ABI either: listings show none rather than half a
   * pointer. */
  devbuf_plugin_info info = {.struct_size = sizeof info};
  CHECK_OK(devbuf_plugin_info_get(idx, &info, &err), &err);
  CHECK(info.abi_major == 0 && info.abi_minor == 0, "ABI %u.%u recorded for a non-table",
        info.abi_major, info.abi_minor);
}

/* An identifier that is not found, but a near miss of one that is: the
 * error suggests it. A registered name that extends the asked one
 * is what an identifier without its NUL looks like when the loader cannot
 * tell (rustc placed other strings after it: "rustdev.hostsrc/lib.rs"). */
static void test_near_miss(void) {
  devbuf_error err;
  size_t idx;
  CHECK_OK(load("good", &idx, &err), &err);
  devbuf_device dev;
  devbuf_error_clear(&err);
  int rc = devbuf_device_open("test.kind1", &dev, &err);
  CHECK(rc == DEVBUF_ENOTFOUND, "rc %s", devbuf_status_name(rc));
  CHECK_HAS(err.message, "no plugin implements device identifier 'test.kind1' (did you mean "
                         "'test.kind17'?");
  CHECK_HAS(err.message, "its identifier string may lack its terminating NUL");
  devbuf_error_clear(&err);
  rc = devbuf_device_open("test.kidn17", &dev, &err);
  CHECK(rc == DEVBUF_ENOTFOUND, "rc %s", devbuf_status_name(rc));
  CHECK_HAS(err.message, "'test.kidn17' (did you mean 'test.kind17'?)");
  devbuf_error_clear(&err);
  rc = devbuf_device_open("cpv", &dev, &err);
  CHECK(rc == DEVBUF_ENOTFOUND, "rc %s", devbuf_status_name(rc));
  CHECK_HAS(err.message, "'cpv' (did you mean 'cpu'?)");
  devbuf_error_clear(&err);
  rc = devbuf_device_open("nothing.like.it", &dev, &err);
  CHECK(rc == DEVBUF_ENOTFOUND, "rc %s", devbuf_status_name(rc));
  CHECK(strstr(err.message, "did you mean") == NULL, "no suggestion for a far name: %s",
        err.message);
}

/* A pointer one byte past what mem_alloc should have returned. */
static void test_misaligned_allocation(void) {
  devbuf_error err;
  size_t idx;
  CHECK_OK(load("misaligned_alloc", &idx, &err), &err);
  devbuf_device dev;
  CHECK_OK(devbuf_device_open("test.kind26", &dev, &err), &err);
  void *p = (void *)&p;
  devbuf_error_clear(&err);
  int rc = devbuf_mem_alloc(&dev, 100, 0, NULL, &p, &err);
  CHECK(rc == DEVBUF_EABI && p == NULL, "rc %s, p %p", devbuf_status_name(rc), p);
  CHECK_HAS(err.message, "test.kind26:0: mem_alloc: plugin 'broken26' returned 0x");
  CHECK_HAS(err.message, "which is not aligned to 16 bytes (asked alignment 0; its device_props "
                         "promise alloc_alignment 16)");
  devbuf_error_clear(&err);
  rc = devbuf_mem_alloc(&dev, 100, 256, NULL, &p, &err);
  CHECK(rc == DEVBUF_EABI, "rc %s", devbuf_status_name(rc));
  CHECK_HAS(err.message, "not aligned to 256 bytes (asked alignment 256;");
  /* Handed back to the plugin: nothing is live, nothing leaks. */
  devbuf_stats st;
  CHECK_OK(devbuf_plugin_stats(idx, &st, &err), &err);
  CHECK(st.live_allocations == 0, "%llu live", (unsigned long long)st.live_allocations);
  /* A size-0 allocation is a handle, not memory: not held to alignment. */
  CHECK_OK(devbuf_mem_alloc(&dev, 0, 0, NULL, &p, &err), &err);
  CHECK_OK(devbuf_mem_free(&dev, p, NULL, &err), &err);
  /* A well-behaved plugin's allocations pass the same check. */
  devbuf_device cpu;
  CHECK_OK(devbuf_device_open("cpu", &cpu, &err), &err);
  CHECK_OK(devbuf_mem_alloc(&cpu, 100, 4096, NULL, &p, &err), &err);
  CHECK(((uintptr_t)p & 4095) == 0, "cpu: %p", p);
  CHECK_OK(devbuf_mem_free(&cpu, p, NULL, &err), &err);
}

/* A version string freed before the loader read it. Run without sanitizers:
 * the loader's read of freed memory is the mistake being diagnosed, and
 * glibc's allocator hands the freed bytes to the loader's next string. */
static void test_dangling_version(void) {
  devbuf_error err;
  size_t idx = (size_t)-1;
  int rc = load("dangling_version", &idx, &err);
  CHECK(rc == DEVBUF_EABI, "rc %s: %s", devbuf_status_name(rc), err.message);
  CHECK_HAS(err.message, "devbuf_plugin_dangling_version.so: table 'version' points at memory "
                         "devbuf allocated after the plugin handed over its table");
  CHECK_HAS(err.message, "a dangling pointer; table strings must stay valid until shutdown");
}

/* cargo's name for a cdylib in a DEVBUF_PLUGIN_PATH directory. */
static void test_lib_prefix_in_search_dir(void) {
  size_t n = devbuf_plugin_count();
  int found = 0;
  for (size_t i = 0; i < n; i++) {
    devbuf_plugin_info info = {.struct_size = sizeof info};
    if (devbuf_plugin_info_get(i, &info, NULL) != DEVBUF_OK) continue;
    if (strstr(info.path, "/libdevbuf_plugin_cargo.so") == NULL) continue;
    found = 1;
    CHECK(info.state == DEVBUF_PLUGIN_FAILED && info.error_code == DEVBUF_ELOAD, "state %d",
          info.state);
    CHECK_HAS(info.reason, "libdevbuf_plugin_cargo.so: not loaded: a plugin file in a search "
                           "directory is named devbuf_plugin_*.so, without the 'lib' prefix");
    CHECK_HAS(info.reason, "/devbuf_plugin_cargo.so, or list the file itself in DEVBUF_PLUGINS");
    CHECK(strcmp(info.source, "DEVBUF_PLUGIN_PATH") == 0, "source %s", info.source);
  }
  CHECK(found, "no record for libdevbuf_plugin_cargo.so among %zu plugins", n);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s BROKEN_DIR CASE\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];
  const char *c = argv[2];
  if (strcmp(c, "count") == 0) RUN(test_count_without_message);
  else if (strcmp(c, "table") == 0) RUN(test_not_a_table);
  else if (strcmp(c, "misaligned") == 0) RUN(test_misaligned_allocation);
  else if (strcmp(c, "dangling") == 0) RUN(test_dangling_version);
  else if (strcmp(c, "libprefix") == 0) RUN(test_lib_prefix_in_search_dir);
  else if (strcmp(c, "nearmiss") == 0) RUN(test_near_miss);
  else {
    fprintf(stderr, "unknown case '%s'\n", c);
    return 2;
  }
  return devbuf_test_finish();
}
