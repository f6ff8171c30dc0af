/* roundtrip.c: check that the example.hostmem plugin is found by the
 * installed devbuf runtime and that data survives a round trip through it.
 *
 *   hostmem-roundtrip [EXPECTED_SOURCE]
 *
 * EXPECTED_SOURCE, when given, is where the plugin must have been found:
 * "DEVBUF_PLUGIN_PATH", "DEVBUF_PLUGINS" or "install" (the runtime's own
 * plugin directory, no environment variable).
 *
 * The round trip: host -> device (stream A) -> event -> device copy on
 * stream B, which waits on the event -> host (stream B). Exit status 0 and
 * "hostmem-roundtrip: ok" on success; otherwise a message naming the step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/runtime.h"

#define NBYTES (4u << 20)

static int fail(const char *step, const devbuf_error *err) {
  fprintf(stderr, "hostmem-roundtrip: %s failed: %s\n", step, err ? err->message : "");
  return 1;
}

#define CHECK(call)                          \
  do {                                       \
    if ((call) != DEVBUF_OK) return fail(#call, &err); \
  } while (0)

int main(int argc, char **argv) {
  const char *expected_source = argc > 1 ? argv[1] : NULL;
  devbuf_error err;
  devbuf_error_clear(&err);
  CHECK(devbuf_init(&err));

  /* 1. The plugin is listed, loaded, and came from where we expect. */
  size_t index = (size_t)-1;
  devbuf_plugin_info info;
  for (size_t i = 0; i < devbuf_plugin_count(); i++) {
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK(devbuf_plugin_info_get(i, &info, &err));
    if (info.name && strcmp(info.name, "hostmem") == 0) {
      index = i;
      break;
    }
  }
  if (index == (size_t)-1) {
    fprintf(stderr, "hostmem-roundtrip: plugin 'hostmem' not found; searched:\n");
    for (size_t i = 0; i < devbuf_search_path_count(); i++) {
      const devbuf_search_entry *e = devbuf_search_path_get(i);
      fprintf(stderr, "  %s (%s)%s\n", e->path, e->source, e->exists ? "" : " [missing]");
    }
    return 1;
  }
  if (info.state != DEVBUF_PLUGIN_LOADED) {
    fprintf(stderr, "hostmem-roundtrip: plugin %s failed to load: %s\n", info.path, info.reason);
    return 1;
  }
  printf("hostmem-roundtrip: plugin %s %s from %s (%s)\n", info.name, info.version, info.path,
         info.source);
  if (expected_source && strcmp(expected_source, info.source) != 0) {
    fprintf(stderr, "hostmem-roundtrip: plugin found through '%s', expected '%s'\n", info.source,
            expected_source);
    return 1;
  }

  /* 2. The device. */
  devbuf_device dev;
  CHECK(devbuf_device_open("example.hostmem", &dev, &err));
  devbuf_device_props props;
  CHECK(devbuf_device_props_get(&dev, &props, &err));
  if (!(props.flags & DEVBUF_DEVICE_ASYNC)) {
    fprintf(stderr, "hostmem-roundtrip: device does not report DEVBUF_DEVICE_ASYNC\n");
    return 1;
  }

  /* 3. The round trip across two streams ordered by an event. */
  unsigned char *in = malloc(NBYTES), *out = malloc(NBYTES);
  if (!in || !out) return fail("malloc", NULL);
  for (size_t i = 0; i < NBYTES; i++) in[i] = (unsigned char)(i * 131u + 7u);
  memset(out, 0, NBYTES);

  void *a, *b, *d1, *d2, *ev;
  CHECK(devbuf_stream_create(&dev, &a, &err));
  CHECK(devbuf_stream_create(&dev, &b, &err));
  CHECK(devbuf_event_create(&dev, &ev, &err));
  CHECK(devbuf_mem_alloc(&dev, NBYTES, 0, a, &d1, &err));
  CHECK(devbuf_mem_alloc(&dev, NBYTES, 0, b, &d2, &err));
  CHECK(devbuf_copy_h2d(&dev, d1, 0, in, NBYTES, a, &err));
  CHECK(devbuf_event_record(&dev, ev, a, &err));
  CHECK(devbuf_stream_wait_event(&dev, b, ev, &err));
  CHECK(devbuf_copy_d2d(&dev, d2, 0, d1, 0, NBYTES, b, &err));
  CHECK(devbuf_copy_d2h(&dev, out, d2, 0, NBYTES, b, &err));
  CHECK(devbuf_stream_synchronize(&dev, b, &err));
  if (devbuf_event_query(&dev, ev, &err) != DEVBUF_OK) return fail("event_query after sync", &err);
  if (memcmp(in, out, NBYTES) != 0) {
    fprintf(stderr, "hostmem-roundtrip: data differs after the round trip\n");
    return 1;
  }

  /* 4. The blocking helper, at an offset. */
  memset(out, 0, NBYTES);
  CHECK(devbuf_copy_to_host_sync(&dev, out, d2, 1000, 5000, NULL, &err));
  if (memcmp(out, in + 1000, 5000) != 0) {
    fprintf(stderr, "hostmem-roundtrip: copy_to_host_sync at offset 1000 returned wrong bytes\n");
    return 1;
  }

  /* 5. Clean up, then nothing may be left alive. */
  CHECK(devbuf_mem_free(&dev, d1, a, &err));
  CHECK(devbuf_mem_free(&dev, d2, b, &err));
  CHECK(devbuf_event_destroy(&dev, ev, &err));
  CHECK(devbuf_stream_destroy(&dev, a, &err));
  CHECK(devbuf_stream_destroy(&dev, b, &err));
  devbuf_stats st;
  CHECK(devbuf_plugin_stats(index, &st, &err));
  if (st.live_allocations || st.live_streams || st.live_events) {
    fprintf(stderr, "hostmem-roundtrip: leaked: %llu allocations, %llu streams, %llu events\n",
            (unsigned long long)st.live_allocations, (unsigned long long)st.live_streams,
            (unsigned long long)st.live_events);
    return 1;
  }
  free(in);
  free(out);
  printf("hostmem-roundtrip: ok: %u bytes host -> example.hostmem (stream A) -> event -> "
         "stream B -> host\n", NBYTES);
  return 0;
}
