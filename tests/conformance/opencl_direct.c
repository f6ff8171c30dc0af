/* opencl_direct: the devbuf.opencl plugin driven through its table alone
 * (dlopen + entry symbol, no libdevbuf), for what the runtime-level
 * conformance suite cannot see:
 *   - loading and init do not open libOpenCL (cheap entry, lazy backend);
 *   - DEVBUF_OPENCL_LIBRARY pointing at a missing file gives ENODEV with the
 *     dlopen reason, and every other call fails cleanly;
 *   - CL error names in messages, raw cl_events from device_info accepted as
 *     events, default queues refused by stream_destroy.
 *
 * usage: opencl_direct PLUGIN.so [--no-library]
 *   --no-library expects DEVBUF_OPENCL_LIBRARY to name a missing file. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/plugin.h"

static int failures = 0;

#define CHECK(cond, ...)                                \
  do {                                                  \
    if (!(cond)) {                                      \
      failures++;                                       \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                              \
      printf("\n");                                     \
    }                                                   \
  } while (0)

static int opencl_loaded(void) {
  void *h = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h != NULL) dlclose(h);
  return h != NULL;
}

static void no_library(const devbuf_plugin_table *t, void *st) {
  const char *lib = getenv("DEVBUF_OPENCL_LIBRARY");
  devbuf_error err;
  int count = -1;
  devbuf_error_clear(&err);
  int rc = t->device_count(st, &count, &err);
  CHECK(rc == DEVBUF_ENODEV, "device_count returned %d (%s)", rc, err.message);
  CHECK(err.code == DEVBUF_ENODEV, "err.code %d", err.code);
  CHECK(count == 0, "count %d", count);
  CHECK(lib != NULL && strstr(err.message, lib) != NULL, "reason '%s' does not name '%s'",
        err.message, lib ? lib : "(unset)");
  CHECK(strstr(err.message, "dlopen") != NULL, "reason '%s' does not say dlopen", err.message);
  printf("no device, because %s\n", err.message);
  /* A second call repeats the reason. */
  char first[sizeof err.message];
  memcpy(first, err.message, sizeof first);
  rc = t->device_count(st, &count, &err);
  CHECK(rc == DEVBUF_ENODEV && strcmp(first, err.message) == 0, "second call: %d '%s'", rc,
        err.message);
  /* Everything else fails cleanly too. */
  void *p = NULL, *s = NULL, *e = NULL;
  char buf[8] = {0};
  devbuf_device_props props;
  memset(&props, 0, sizeof props);
  props.struct_size = sizeof props;
  CHECK(t->device_props(st, 0, &props, &err) == DEVBUF_ENODEV, "device_props");
  CHECK(t->mem_alloc(st, 0, 16, 0, NULL, &p, &err) == DEVBUF_ENODEV && p == NULL, "mem_alloc");
  CHECK(t->copy_h2d(st, 0, buf, 0, buf, 8, NULL, &err) == DEVBUF_ENODEV, "copy_h2d");
  CHECK(t->stream_create(st, 0, &s, &err) == DEVBUF_ENODEV && s == NULL, "stream_create");
  CHECK(t->event_create(st, 0, &e, &err) == DEVBUF_ENODEV && e == NULL, "event_create");
  CHECK(t->stream_synchronize(st, 0, NULL, &err) == DEVBUF_ENODEV, "stream_synchronize");
  CHECK(!opencl_loaded(), "libOpenCL.so.1 got loaded although the override names another file");
}

static void with_device(const devbuf_plugin_table *t, void *st) {
  devbuf_error err;
  int count = 0;
  devbuf_error_clear(&err);
  int rc = t->device_count(st, &count, &err);
  CHECK(rc == DEVBUF_OK && count >= 1, "device_count %d count %d: %s", rc, count, err.message);
  if (rc != DEVBUF_OK) return;
  CHECK(opencl_loaded(), "libOpenCL.so.1 not loaded after device_count");

  devbuf_device_props props;
  memset(&props, 0, sizeof props);
  props.struct_size = sizeof props;
  CHECK(t->device_props(st, 0, &props, &err) == DEVBUF_OK, "%s", err.message);
  printf("device 0: %s (%s), %llu bytes, alignment %u\n", props.name, props.vendor,
         (unsigned long long)props.total_memory, props.alloc_alignment);
  CHECK(props.dlpack_device_type == DEVBUF_DL_OPENCL, "dlpack type %d", props.dlpack_device_type);
  CHECK((props.flags & DEVBUF_DEVICE_HOST_ACCESSIBLE) == 0, "flags 0x%x", props.flags);

  /* A truncated props struct is not written past its struct_size. */
  devbuf_device_props small;
  memset(&small, 0xAB, sizeof small);
  small.struct_size = 8;
  CHECK(t->device_props(st, 0, &small, &err) == DEVBUF_OK, "%s", err.message);
  const unsigned char *raw = (const unsigned char *)&small;
  for (size_t i = 8; i < sizeof small; i++)
    if (raw[i] != 0xAB) {
      CHECK(raw[i] == 0xAB, "device_props wrote byte %zu past struct_size 8", i);
      break;
    }

  /* Error messages carry the CL error name or the call. */
  void *huge = NULL;
  rc = t->mem_alloc(st, 0, (size_t)1 << 62, 0, NULL, &huge, &err);
  CHECK(rc == DEVBUF_ENOMEM && huge == NULL, "huge alloc rc %d", rc);
  CHECK(strstr(err.message, "CL_") != NULL && strstr(err.message, "clCreateBuffer") != NULL,
        "message '%s'", err.message);
  rc = t->mem_alloc(st, 0, 64, 3, NULL, &huge, &err);
  CHECK(rc == DEVBUF_EINVAL, "alignment 3: rc %d", rc);

  /* A round trip, through a device_info whose event is a raw cl_event. */
  enum { N = 1 << 16 };
  unsigned char *src = malloc(N), *dst = calloc(1, N);
  for (int i = 0; i < N; i++) src[i] = (unsigned char)(i * 7 + 3);
  void *mem = NULL, *s1 = NULL, *s2 = NULL, *ev = NULL;
  CHECK(t->mem_alloc(st, 0, N, 0, NULL, &mem, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(t->stream_create(st, 0, &s1, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(t->stream_create(st, 0, &s2, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(t->event_create(st, 0, &ev, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(t->copy_h2d(st, 0, mem, 0, src, N, s1, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(t->event_record(st, 0, ev, s1, &err) == DEVBUF_OK, "%s", err.message);
  devbuf_device_info info;
  size_t size = 0;
  CHECK(t->device_info_export(st, "devbuf.opencl", 0, ev, s1, 0, &info, sizeof info, &size,
                              &err) == DEVBUF_OK,
        "%s", err.message);
  CHECK(size == sizeof info && info.event != NULL && info.event != ev && info.stream == s1,
        "size %zu event %p stream %p", size, info.event, info.stream);
  devbuf_device_info_desc desc;
  CHECK(t->device_info_import(st, "devbuf.opencl", &info, &desc, &err) == DEVBUF_OK, "%s",
        err.message);
  CHECK(desc.event == info.event && desc.device_ordinal == 0, "desc");
  /* desc.event is the raw cl_event: accepted by the event functions. */
  CHECK(t->stream_wait_event(st, 0, s2, desc.event, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(t->copy_d2h(st, 0, dst, mem, 0, N, s2, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(t->stream_synchronize(st, 0, s2, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(memcmp(src, dst, N) == 0, "content differs after the raw-event wait");
  CHECK(t->event_query(st, 0, desc.event, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(t->event_synchronize(st, 0, desc.event, &err) == DEVBUF_OK, "%s", err.message);

  /* The default queue named in device_info is the default stream: usable,
   * not destroyable. */
  CHECK(t->device_info_export(st, "devbuf.opencl", 0, NULL, NULL, 0, &info, sizeof info, &size,
                              &err) == DEVBUF_OK,
        "%s", err.message);
  CHECK(info.stream != NULL && info.event == NULL, "default export");
  CHECK(t->stream_synchronize(st, 0, info.stream, &err) == DEVBUF_OK, "%s", err.message);
  rc = t->stream_destroy(st, 0, info.stream, &err);
  CHECK(rc == DEVBUF_EINVAL && strstr(err.message, "default") != NULL, "rc %d '%s'", rc,
        err.message);
  /* Handles of the wrong kind are refused, not passed to the ICD. */
  CHECK(t->mem_free(st, 0, s1, NULL, &err) == DEVBUF_EINVAL, "mem_free of a stream");
  CHECK(t->stream_destroy(st, 0, mem, &err) == DEVBUF_EINVAL, "stream_destroy of a buffer");
  CHECK(t->event_record(st, 0, mem, NULL, &err) == DEVBUF_EINVAL, "event_record on a buffer");
  CHECK(t->stream_wait_event(st, 0, NULL, mem, &err) == DEVBUF_EINVAL, "wait on a buffer");
  CHECK(t->copy_h2d(st, 0, s1, 0, src, 1, NULL, &err) == DEVBUF_EINVAL, "copy into a stream");
  /* Overlapping copy inside one buffer. */
  rc = t->copy_d2d(st, 0, mem, 8, mem, 0, 16, NULL, &err);
  CHECK(rc == DEVBUF_EINVAL && strstr(err.message, "CL_MEM_COPY_OVERLAP"), "rc %d '%s'", rc,
        err.message);
  /* Wrong identifier. */
  CHECK(t->device_info_import(st, "devbuf.cuda", &info, &desc, &err) == DEVBUF_EINVAL, "ident");

  CHECK(t->event_destroy(st, 0, ev, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(t->stream_destroy(st, 0, s1, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(t->stream_destroy(st, 0, s2, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(t->mem_free(st, 0, mem, NULL, &err) == DEVBUF_OK, "%s", err.message);
  CHECK(t->mem_free(st, 0, mem, NULL, &err) == DEVBUF_EINVAL, "double free accepted");
  free(src);
  free(dst);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PLUGIN.so [--no-library]\n", argv[0]);
    return 2;
  }
  int expect_no_library = argc > 2 && strcmp(argv[2], "--no-library") == 0;
  void *so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (so == NULL) {
    printf("FAIL dlopen %s: %s\n", argv[1], dlerror());
    return 1;
  }
  devbuf_plugin_entry_fn entry;
  void *sym = dlsym(so, DEVBUF_PLUGIN_ENTRY_NAME);
  CHECK(sym != NULL, "no entry symbol");
  if (sym == NULL) return 1;
  memcpy(&entry, &sym, sizeof sym);
  const devbuf_plugin_table *t = entry();
  CHECK(t->struct_size >= DEVBUF_PLUGIN_TABLE_V1_SIZE && t->abi_major == DEVBUF_ABI_MAJOR,
        "table header");
  CHECK(strcmp(t->identifiers[0], "devbuf.opencl") == 0 && t->identifiers[1] == NULL,
        "identifiers");

  void *st = NULL;
  devbuf_error err;
  devbuf_error_clear(&err);
  CHECK(t->init(&st, &err) == DEVBUF_OK, "init: %s", err.message);
  CHECK(!opencl_loaded(), "libOpenCL.so.1 loaded by the entry or init (must be lazy)");

  if (expect_no_library)
    no_library(t, st);
  else
    with_device(t, st);
  t->shutdown(st);
  printf("%s (%d failure%s)\n", failures ? "FAILED" : "OK", failures, failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
