/* Privilege and paths: no environment variable, relative path or
 * bare name makes libdevbuf load code the listing did not name.
 *  relative  (cwd = the broken corpus) DEVBUF_PLUGINS and DEVBUF_PLUGIN_PATH
 *            hold relative entries that exist from the cwd: each is refused
 *            with a record saying why, and nothing is loaded from them; the
 *            absolute entry still works.
 *  bare      LD_LIBRARY_PATH holds the corpus: devbuf_plugin_load of a bare
 *            name is refused, never handed to dlopen's search.
 *  probe     the setuid helper's body: print what was loaded, one line per
 *            plugin, for tests/core/secure_setuid.sh. */
#include <stdio.h>

#include "devbuf/runtime.h"
#include "devbuf_test.h"

static const char *g_mode, *g_dir;

static const devbuf_plugin_info *find(const char *needle, devbuf_plugin_info *info) {
  size_t n = devbuf_plugin_count();
  for (size_t i = 0; i < n; i++) {
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    if (devbuf_plugin_info_get(i, info, NULL) == DEVBUF_OK && strstr(info->path, needle))
      return info;
  }
  return NULL;
}

static void test_relative(void) {
  if (strcmp(g_mode, "relative") != 0) return;
  devbuf_plugin_info a, c;
  CHECK(find("devbuf_plugin_good.so", &a) != NULL, "the relative file has a record");
  if (a.path) {
    CHECK(a.state == DEVBUF_PLUGIN_FAILED, "relative DEVBUF_PLUGINS entry refused, state %d", a.state);
    CHECK_HAS(a.reason, "relative path: refused");
    CHECK(strcmp(a.source, "DEVBUF_PLUGINS") == 0, "source %s", a.source);
  }
  CHECK(find("./", &c) != NULL, "the relative directory has a record");
  if (c.path) {
    CHECK(c.state == DEVBUF_PLUGIN_FAILED, "relative dir refused");
    CHECK_HAS(c.reason, "DEVBUF_PLUGIN_PATH entry './' is a relative path");
  }
  /* Nothing loaded through the relative entries (the cwd is the corpus). */
  size_t n = devbuf_plugin_count();
  for (size_t i = 0; i < n; i++) {
    devbuf_plugin_info info = {.struct_size = sizeof info};
    devbuf_plugin_info_get(i, &info, NULL);
    CHECK(info.state != DEVBUF_PLUGIN_LOADED, "loaded %s from a relative entry", info.path);
  }
  /* Only the absolute entry (a missing file) is searched. */
  size_t ns = devbuf_search_path_count();
  CHECK(ns == 1, "only the absolute entry is searched, got %zu", ns);
  if (ns == 1) CHECK(devbuf_search_path_get(0)->path[0] == '/', "absolute entry");
  devbuf_device d;
  devbuf_error err;
  CHECK(devbuf_device_open("test.kind17", &d, &err) != DEVBUF_OK, "good plugin not loaded");
}

static void test_bare(void) {
  if (strcmp(g_mode, "bare") != 0) return;
  devbuf_error err;
  size_t idx = 0;
  int rc = devbuf_plugin_load("devbuf_plugin_good.so", &idx, &err);
  CHECK(rc == DEVBUF_ELOAD, "bare name refused, got %s", devbuf_status_name(rc));
  CHECK_HAS(err.message, "bare file name");
  devbuf_device d;
  CHECK(devbuf_device_open("test.kind17", &d, &err) != DEVBUF_OK,
        "nothing loaded through LD_LIBRARY_PATH");
  /* A path is fine. */
  char *p = malloc(strlen(g_dir) + 40);
  sprintf(p, "%s/devbuf_plugin_good.so", g_dir);
  CHECK_OK(devbuf_plugin_load(p, &idx, &err), &err);
  free(p);
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  g_mode = argv[1];
  g_dir = argv[2];
  if (strcmp(g_mode, "probe") == 0) {
    /* What a setuid program sees: secure mode, and every loaded plugin. */
    devbuf_error err;
    if (devbuf_init(&err) != DEVBUF_OK) return 3;
    printf("secure=%d\n", devbuf_secure_execution());
    size_t n = devbuf_plugin_count();
    for (size_t i = 0; i < n; i++) {
      devbuf_plugin_info info = {.struct_size = sizeof info};
      devbuf_plugin_info_get(i, &info, NULL);
      printf("plugin %s %s %s\n", info.state == DEVBUF_PLUGIN_LOADED ? "loaded" : "failed",
             info.source, info.path);
    }
    return 0;
  }
  RUN(test_relative);
  RUN(test_bare);
  return devbuf_test_finish();
}
