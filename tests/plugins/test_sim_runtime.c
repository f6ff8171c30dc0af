/* devbuf.sim through libdevbuf's runtime API, as a consumer sees it: found
 * by identifier, with the producer-event model of device_info.
 * ctest runs it with DEVBUF_SIM_DEVICES=2 and DEVBUF_SIM_LATENCY_US=100000. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devbuf/runtime.h"

#if defined(__SANITIZE_THREAD__)
#define SIM_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SIM_TEST_TSAN 1
#endif
#endif
#ifndef SIM_TEST_TSAN
#define SIM_TEST_TSAN 0
#endif
#include "devbuf_test.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_open_and_props(void) {
  devbuf_error err = {0};
  devbuf_device dev;
  int n = 0;
  CHECK_OK(devbuf_device_count("devbuf.sim", &n, &err), &err);
  CHECK(n == 2, "DEVBUF_SIM_DEVICES=2 gave %d devices", n);
  CHECK_OK(devbuf_device_open("devbuf.sim", &dev, &err), &err);
  CHECK(dev.ordinal == 0 && strcmp(dev.identifier, "devbuf.sim") == 0, "open devbuf.sim");
  CHECK_OK(devbuf_device_open("devbuf.sim:1", &dev, &err), &err);
  CHECK(dev.ordinal == 1, "ordinal %d", dev.ordinal);
  CHECK(devbuf_device_open("devbuf.sim:2", &dev, &err) != DEVBUF_OK, "device 2 of 2 opened");
  CHECK_OK(devbuf_device_open("devbuf.sim:1", &dev, &err), &err);
  devbuf_device_props p;
  memset(&p, 0, sizeof p);
  CHECK_OK(devbuf_device_props_get(&dev, &p, &err), &err);
  CHECK(!(p.flags & DEVBUF_DEVICE_HOST_ACCESSIBLE) && (p.flags & DEVBUF_DEVICE_ASYNC),
        "flags 0x%x", p.flags);
  CHECK(strcmp(p.name, "devbuf simulated device 1") == 0, "name '%s'", p.name);
  /* The interned identifier compares by pointer. */
  const char *interned = NULL;
  size_t idx = 0;
  CHECK_OK(devbuf_identifier_lookup("devbuf.sim", &interned, &idx, &err), &err);
  CHECK(interned == dev.identifier, "identifier not interned");
}

static void test_sync_roundtrip(void) {
  devbuf_error err = {0};
  devbuf_device dev;
  CHECK_OK(devbuf_device_open("devbuf.sim:0", &dev, &err), &err);
  enum { N = 65536 };
  unsigned char *in = malloc(N), *out = malloc(N);
  for (size_t i = 0; i < N; i++) in[i] = (unsigned char)(i * 13 + 5);
  memset(out, 0, N);
  void *d = NULL;
  CHECK_OK(devbuf_mem_alloc(&dev, N, 0, NULL, &d, &err), &err);
  CHECK_OK(devbuf_copy_from_host_sync(&dev, d, 0, in, N, &err), &err);
  CHECK_OK(devbuf_copy_to_host_sync(&dev, out, d, 0, N, NULL, &err), &err);
  CHECK(memcmp(in, out, N) == 0, "round trip through the runtime differs");
  /* The plugin's own bounds check answers past the runtime's. */
  CHECK(devbuf_copy_d2h(&dev, out, (unsigned char *)d + 100, N - 50, 100, NULL, &err) ==
            DEVBUF_EINVAL, "interior pointer past the end");
  CHECK_HAS(err.message, "SIM_OUT_OF_BOUNDS");
  CHECK_OK(devbuf_mem_free(&dev, d, NULL, &err), &err);
  free(in);
  free(out);
}

/* A producer writes asynchronously and exports device_info with an event;
 * a consumer that reads before syncing sees stale bytes, one that honours
 * the event sees the data. */
static void test_device_info_event(void) {
  devbuf_error err = {0};
  devbuf_device dev;
  CHECK_OK(devbuf_device_open("devbuf.sim", &dev, &err), &err);
  enum { N = 4096 };
  unsigned char data[N], out[N];
  memset(data, 0x5C, N);
  memset(out, 0, N);
  void *d = NULL, *stream = NULL, *ev = NULL;
  CHECK_OK(devbuf_mem_alloc(&dev, N, 0, NULL, &d, &err), &err);
  CHECK_OK(devbuf_stream_create(&dev, &stream, &err), &err);
  CHECK_OK(devbuf_event_create(&dev, &ev, &err), &err);

  /* What the device holds before the producer writes: a known pattern (freed
   * device memory, like a real device's, keeps whatever was there). */
  unsigned char old[N];
  memset(old, 0x11, N);
  CHECK_OK(devbuf_copy_from_host_sync(&dev, d, 0, old, N, &err), &err);

  /* The producer is busy 100 ms before its 100 ms copy of `data` starts. */
  void *scratch = NULL;
  CHECK_OK(devbuf_mem_alloc(&dev, N, 0, NULL, &scratch, &err), &err);
  double t0 = now_s();
  CHECK_OK(devbuf_copy_h2d(&dev, scratch, 0, data, N, stream, &err), &err);
  CHECK_OK(devbuf_copy_h2d(&dev, d, 0, data, N, stream, &err), &err);
  CHECK_OK(devbuf_event_record(&dev, ev, stream, &err), &err);
  devbuf_device_info info;
  size_t size = 0;
  CHECK_OK(devbuf_device_info_export(&dev, ev, stream, 0, &info, sizeof info, &size, &err), &err);
  CHECK(size == sizeof info && info.event == ev && info.stream == stream && info.version == 1,
        "exported device_info");

  /* A careless consumer copies on its own stream without waiting: done at
   * 100 ms, it reads what the device held before (the 0x11 pattern).
   * (A data race by design, so not under ThreadSanitizer.) */
  void *careless = NULL;
  unsigned char stale[N];
  memset(stale, 0xEE, N);
  CHECK_OK(devbuf_stream_create(&dev, &careless, &err), &err);
#if !SIM_TEST_TSAN
  CHECK_OK(devbuf_copy_d2h(&dev, stale, d, 0, N, careless, &err), &err);
#endif
  CHECK(devbuf_event_query(&dev, ev, &err) == DEVBUF_EBUSY, "producer done too early");

  /* A careful consumer imports the info and honours its event. */
  devbuf_device_info_desc desc;
  devbuf_device cdev;
  memset(&desc, 0, sizeof desc);
  CHECK_OK(devbuf_device_info_import("devbuf.sim", &info, &desc, &cdev, &err), &err);
  CHECK(desc.event == ev && desc.device_ordinal == 0 && cdev.ordinal == 0, "imported desc");
  CHECK_OK(devbuf_copy_to_host_sync(&cdev, out, d, 0, N, desc.event, &err), &err);
  CHECK(out[0] == 0x5C && out[N - 1] == 0x5C && memcmp(out, data, N) == 0,
        "event-honouring consumer read %#x", out[0]);
  CHECK(now_s() - t0 >= 0.29, "finished in %.3f s: the producer's 200 ms were not waited for",
        now_s() - t0);
  CHECK_OK(devbuf_stream_synchronize(&dev, careless, &err), &err);
#if !SIM_TEST_TSAN
  CHECK(stale[0] == 0x11 && stale[N - 1] == 0x11,
        "careless consumer read %#x, expected the old 0x11", stale[0]);
#endif

  /* A malformed device_info is refused with the plugin's reason. */
  devbuf_device_info bad = info;
  bad.reserved[2] = 1;
  CHECK(devbuf_device_info_import("devbuf.sim", &bad, &desc, &cdev, &err) == DEVBUF_EINVAL,
        "nonzero reserved accepted");
  CHECK_HAS(err.message, "reserved[2]");
  bad = info;
  bad.device_ordinal = 5;
  CHECK(devbuf_device_info_import("devbuf.sim", &bad, &desc, &cdev, &err) == DEVBUF_EINVAL,
        "ordinal 5 accepted");
  CHECK_HAS(err.message, "device_ordinal 5");

  CHECK_OK(devbuf_stream_destroy(&dev, careless, &err), &err);
  CHECK_OK(devbuf_event_destroy(&dev, ev, &err), &err);
  CHECK_OK(devbuf_stream_destroy(&dev, stream, &err), &err);
  CHECK_OK(devbuf_mem_free(&dev, d, NULL, &err), &err);
  CHECK_OK(devbuf_mem_free(&dev, scratch, NULL, &err), &err);
}

static void test_no_leaks_recorded(void) {
  devbuf_error err = {0};
  devbuf_device dev;
  CHECK_OK(devbuf_device_open("devbuf.sim", &dev, &err), &err);
  devbuf_stats st;
  memset(&st, 0, sizeof st);
  CHECK_OK(devbuf_plugin_stats(devbuf_device_plugin_index(&dev), &st, &err), &err);
  CHECK(st.live_allocations == 0 && st.live_streams == 0 && st.live_events == 0,
        "live: %llu allocations, %llu streams, %llu events",
        (unsigned long long)st.live_allocations, (unsigned long long)st.live_streams,
        (unsigned long long)st.live_events);
  CHECK(st.total_allocations >= 2, "total allocations %llu",
        (unsigned long long)st.total_allocations);
}

int main(void) {
  RUN(test_open_and_props);
  RUN(test_sync_roundtrip);
  RUN(test_device_info_event);
  RUN(test_no_leaks_recorded);
  return devbuf_test_finish();
}
