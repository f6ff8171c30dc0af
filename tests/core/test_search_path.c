/* Discovery driven by the environment (the test's ENVIRONMENT sets it):
 *  env   DEVBUF_PLUGIN_PATH = the broken corpus dir + a missing dir,
 *        DEVBUF_PLUGINS = a missing file, default directories off.
 *  empty nothing at all: the runtime still works and lists no plugin. */
#include "devbuf/runtime.h"
#include "devbuf_test.h"

static const char *g_mode, *g_dir;

static void test_search_entries(void) {
  size_t n = devbuf_search_path_count();
  if (strcmp(g_mode, "empty") == 0) {
    CHECK(n == 0, "no search entries expected, got %zu", n);
    CHECK(devbuf_plugin_count() == 0, "no plugins expected");
    devbuf_error err;
    devbuf_device d;
    CHECK(devbuf_device_open("cpu", &d, &err) == DEVBUF_ENOTFOUND, "cpu absent");
    CHECK_HAS(err.message, "devbuf-info");
    return;
  }
  CHECK(n == 3, "3 entries expected, got %zu", n);
  int saw_dir = 0, saw_missing_dir = 0, saw_file = 0;
  for (size_t i = 0; i < n; i++) {
    const devbuf_search_entry *e = devbuf_search_path_get(i);
    if (strcmp(e->path, g_dir) == 0 && e->exists && strcmp(e->source, "DEVBUF_PLUGIN_PATH") == 0) saw_dir = 1;
    if (strcmp(e->path, "/nonexistent/dir") == 0 && !e->exists) saw_missing_dir = 1;
    if (e->is_file && !e->exists && strcmp(e->source, "DEVBUF_PLUGINS") == 0) saw_file = 1;
  }
  CHECK(saw_dir && saw_missing_dir && saw_file, "entries %d %d %d", saw_dir, saw_missing_dir, saw_file);
}

static void test_records(void) {
  if (strcmp(g_mode, "env") != 0) return;
  /* The missing explicit file and every corpus file have a record. */
  size_t n = devbuf_plugin_count();
  int missing = 0, good = 0, failed = 0;
  for (size_t i = 0; i < n; i++) {
    devbuf_plugin_info info = {.struct_size = sizeof info};
    devbuf_plugin_info_get(i, &info, NULL);
    if (strstr(info.path, "devbuf_plugin_missing.so") && info.state == DEVBUF_PLUGIN_FAILED) {
      missing = 1;
      CHECK_HAS(info.reason, "dlopen");
      CHECK(strcmp(info.source, "DEVBUF_PLUGINS") == 0, "source %s", info.source);
    }
    if (info.name && strcmp(info.name, "broken17") == 0 && info.state == DEVBUF_PLUGIN_LOADED) good = 1;
    if (info.state == DEVBUF_PLUGIN_FAILED) failed++;
  }
  CHECK(missing, "missing file recorded");
  CHECK(good, "good plugin from DEVBUF_PLUGIN_PATH loaded");
  CHECK(failed >= 14, "every broken plugin recorded (%d)", failed);
  devbuf_error err;
  devbuf_device d;
  CHECK_OK(devbuf_device_open("test.kind17", &d, &err), &err);
  CHECK(devbuf_device_open("cpu", &d, &err) == DEVBUF_ENOTFOUND, "no default plugins");
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  g_mode = argv[1];
  g_dir = argv[2];
  RUN(test_search_entries);
  RUN(test_records);
  return devbuf_test_finish();
}
