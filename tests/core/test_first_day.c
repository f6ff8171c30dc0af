/* "A plugin author's first day": the ABI 1.1 synchronous defaults,
 * the default device_info path held to the common layout's promises, and
 * messages that name what a broken plugin answered. Tables are registered
 * in memory, so each case builds exactly the plugin it needs. */
#include <stdlib.h>
#include <string.h>

#include "devbuf/format.h"
#include "devbuf/runtime.h"
#include "devbuf_test.h"

static uint32_t g_flags = DEVBUF_DEVICE_HOST_ACCESSIBLE; /* what device_props reports */
static int g_count = 1, g_count_rc = DEVBUF_OK, g_alloc_rc = DEVBUF_OK;

static int t_count(void *s, int *count, devbuf_error *err) {
  (void)s, (void)err;
  *count = g_count;
  return g_count_rc;
}
static int t_props(void *s, int d, devbuf_device_props *p, devbuf_error *err) {
  (void)s, (void)d, (void)err;
  p->flags = g_flags;
  strcpy(p->name, "first-day");
  p->alloc_alignment = 64;
  return DEVBUF_OK;
}
static int t_alloc(void *s, int d, size_t size, size_t al, void *st, void **ptr, devbuf_error *err) {
  (void)s, (void)d, (void)al, (void)st, (void)err;
  if (g_alloc_rc != DEVBUF_OK) return g_alloc_rc;
  /* The 64 bytes device_props promises (the runtime checks it). */
  *ptr = aligned_alloc(64, (size + 64) & ~(size_t)63);
  return *ptr ? DEVBUF_OK : DEVBUF_ENOMEM;
}
static int t_free(void *s, int d, void *ptr, void *st, devbuf_error *err) {
  (void)s, (void)d, (void)st, (void)err;
  free(ptr);
  return DEVBUF_OK;
}

/* Only the four slots a host-memory plugin must write. */
static devbuf_plugin_table minimal(const char *const *ids, uint16_t minor) {
  devbuf_plugin_table t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.abi_major = DEVBUF_ABI_MAJOR;
  t.abi_minor = minor;
  t.name = "firstday";
  t.version = "0";
  t.identifiers = ids;
  t.device_count = t_count;
  t.device_props = t_props;
  t.mem_alloc = t_alloc;
  t.mem_free = t_free;
  return t;
}

static void test_abi_1_0_tables_keep_the_1_0_rules(void) {
  static const char *const ids[] = {"firstday.old", NULL};
  devbuf_plugin_table t = minimal(ids, 0);
  devbuf_error err;
  size_t idx;
  CHECK(devbuf_plugin_register(&t, "old", &idx, &err) == DEVBUF_EABI, "1.0 table with NULL slots");
  CHECK_HAS(err.message, "mandatory slot 'copy_h2d' is NULL");
  CHECK_HAS(err.message, "ABI 1.1 or later may leave it NULL");
}

static int t_sop(void *s, int d, void *st, devbuf_error *err) {
  (void)s, (void)d, (void)st, (void)err;
  return DEVBUF_OK;
}

static void test_stream_and_event_slots_come_together(void) {
  static const char *const ids[] = {"firstday.mixed", NULL};
  devbuf_plugin_table t = minimal(ids, 1);
  t.stream_synchronize = t_sop;
  devbuf_error err;
  size_t idx;
  CHECK(devbuf_plugin_register(&t, "mixed", &idx, &err) == DEVBUF_EABI, "half the stream slots");
  CHECK_HAS(err.message, "slot 'stream_create' is NULL but 'stream_synchronize' is not");
}

static void test_sync_defaults_and_default_device_info(void) {
  static const char *const ids[] = {"firstday.host", NULL};
  devbuf_plugin_table t = minimal(ids, 1);
  devbuf_error err;
  size_t idx;
  g_flags = DEVBUF_DEVICE_HOST_ACCESSIBLE;
  CHECK_OK(devbuf_plugin_register(&t, "host", &idx, &err), &err);
  devbuf_device d;
  CHECK_OK(devbuf_device_open("firstday.host", &d, &err), &err);
  void *s = NULL, *e = NULL, *p = NULL;
  CHECK_OK(devbuf_stream_create(&d, &s, &err), &err);
  CHECK(s != NULL, "a created default stream is not the default stream (NULL)");
  CHECK_OK(devbuf_event_create(&d, &e, &err), &err);
  CHECK_OK(devbuf_mem_alloc(&d, 16, 0, s, &p, &err), &err);
  CHECK_OK(devbuf_copy_h2d(&d, p, 4, "abcdefgh", 8, s, &err), &err);
  CHECK_OK(devbuf_copy_d2d(&d, p, 0, p, 4, 8, s, &err), &err); /* overlapping: memmove */
  char out[9] = {0};
  CHECK_OK(devbuf_copy_d2h(&d, out, p, 0, 8, s, &err), &err);
  CHECK(memcmp(out, "abcdefgh", 8) == 0, "copies: '%s'", out);
  CHECK_OK(devbuf_event_record(&d, e, s, &err), &err);
  CHECK(devbuf_event_query(&d, e, &err) == DEVBUF_OK, "a default event is complete at once");
  CHECK(devbuf_stream_destroy(&d, NULL, &err) == DEVBUF_EINVAL, "default stream destroy");
  int bogus;
  CHECK(devbuf_event_synchronize(&d, &bogus, &err) == DEVBUF_EINVAL, "foreign event");
  CHECK_HAS(err.message, "is not a live event");

  /* The default device_info path: HOST_ACCESSIBLE set for this device, the
   * event refused once it is no longer the plugin's. */
  devbuf_device_info di;
  size_t n = 0;
  CHECK_OK(devbuf_device_info_export(&d, e, s, 0, &di, sizeof di, &n, &err), &err);
  CHECK(di.flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE, "HOST_ACCESSIBLE not set: 0x%x", di.flags);
  CHECK(devbuf_device_info_export(&d, NULL, NULL, 0x40, &di, sizeof di, &n, &err) == DEVBUF_EINVAL,
        "unknown export flags");
  CHECK_OK(devbuf_device_info_export(&d, e, s, 0, &di, sizeof di, &n, &err), &err);
  devbuf_device_info_desc desc;
  CHECK_OK(devbuf_device_info_import("firstday.host", &di, &desc, NULL, &err), &err);
  CHECK(desc.event == e && desc.stream == s, "handles carried");
  devbuf_device_info bad = di;
  bad.flags |= 0x100;
  CHECK(devbuf_device_info_import("firstday.host", &bad, &desc, NULL, &err) == DEVBUF_EINVAL, "flags");
  CHECK_HAS(err.message, "unknown flags 0x100");
  bad = di;
  bad.reserved[2] = 7;
  CHECK(devbuf_device_info_import("firstday.host", &bad, &desc, NULL, &err) == DEVBUF_EINVAL, "reserved");
  CHECK_OK(devbuf_event_destroy(&d, e, &err), &err);
  CHECK(devbuf_device_info_import("firstday.host", &di, &desc, NULL, &err) == DEVBUF_EINVAL,
        "an event no longer live");
  CHECK_HAS(err.message, "is not a live event of plugin 'firstday'");
  CHECK_OK(devbuf_mem_free(&d, p, s, &err), &err);
  CHECK_OK(devbuf_stream_destroy(&d, s, &err), &err);
  CHECK_OK(devbuf_plugin_unregister(idx, &err), &err);
}

static void test_defaults_need_a_host_accessible_device(void) {
  static const char *const ids[] = {"firstday.far", NULL};
  devbuf_plugin_table t = minimal(ids, 1);
  devbuf_error err;
  size_t idx;
  g_flags = 0;
  CHECK_OK(devbuf_plugin_register(&t, "far", &idx, &err), &err);
  devbuf_device d;
  CHECK_OK(devbuf_device_open("firstday.far", &d, &err), &err);
  void *s = NULL;
  CHECK(devbuf_stream_create(&d, &s, &err) == DEVBUF_ENOTSUP, "no defaults off the host");
  CHECK_HAS(err.message, "firstday.far:0: stream_create: plugin 'firstday' leaves the slot NULL");
  CHECK_HAS(err.message, "DEVBUF_DEVICE_HOST_ACCESSIBLE");
  devbuf_device_info di;
  size_t n = 0;
  CHECK_OK(devbuf_device_info_export(&d, NULL, NULL, DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE, &di,
                                     sizeof di, &n, &err), &err);
  CHECK(!(di.flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE), "HOST_ACCESSIBLE set for a far device");
  CHECK_OK(devbuf_plugin_unregister(idx, &err), &err);
  g_flags = DEVBUF_DEVICE_HOST_ACCESSIBLE;
}

static void test_broken_answers_are_named(void) {
  static const char *const ids[] = {"firstday.neg", NULL};
  static const char *const ids2[] = {"firstday.status", NULL};
  devbuf_plugin_table t = minimal(ids, 1);
  devbuf_error err;
  size_t idx;
  g_count = -1;
  CHECK_OK(devbuf_plugin_register(&t, "neg", &idx, &err), &err);
  int n = 5;
  CHECK(devbuf_device_count("firstday.neg", &n, &err) == DEVBUF_EABI, "*count = -1");
  CHECK(n == 0, "count %d", n);
  CHECK_HAS(err.message, "device_count returned DEVBUF_OK with *count = -1");
  CHECK_OK(devbuf_plugin_unregister(idx, &err), &err);
  g_count = 1;

  devbuf_plugin_table t2 = minimal(ids2, 1);
  CHECK_OK(devbuf_plugin_register(&t2, "status", &idx, &err), &err);
  devbuf_device d;
  CHECK_OK(devbuf_device_open("firstday.status", &d, &err), &err);
  void *p = NULL;
  g_alloc_rc = 77;
  CHECK(devbuf_mem_alloc(&d, 8, 0, NULL, &p, &err) == DEVBUF_EBACKEND, "status 77");
  CHECK_HAS(err.message, "mem_alloc returned status 77 (not a devbuf_status)");
  g_alloc_rc = -1;
  CHECK(devbuf_mem_alloc(&d, 8, 0, NULL, &p, &err) == DEVBUF_EBACKEND, "status -1");
  CHECK_HAS(err.message, "mem_alloc returned status -1 (not a devbuf_status)");
  g_alloc_rc = DEVBUF_OK;
  CHECK_OK(devbuf_plugin_unregister(idx, &err), &err);
}

static int ns_interpret(void *ctx, const char *payload, size_t len, devbuf_dtype_desc *out,
                        devbuf_error *err) {
  (void)ctx, (void)payload, (void)len, (void)err;
  out->kind = DEVBUF_KIND_OPAQUE;
  out->itemsize = 2;
  out->alignment = 2;
  out->bits = 16;
  out->dlpack_code = -1;
  return DEVBUF_OK;
}

static void test_dtype_only_tables(void) {
  static const devbuf_dtype_namespace ns = {.struct_size = sizeof ns, .id = "firstdayns",
                                            .provider = "firstday", .interpret = ns_interpret};
  static const devbuf_dtype_namespace *const list[] = {&ns, NULL};
  devbuf_plugin_table t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.abi_major = DEVBUF_ABI_MAJOR;
  t.abi_minor = 1;
  t.name = "firstday_dtypes";
  t.version = "0";
  t.dtype_namespaces = list;
  devbuf_error err;
  size_t idx;
  CHECK_OK(devbuf_plugin_register(&t, "dtypes", &idx, &err), &err);
  devbuf_plugin_info info = {.struct_size = sizeof info};
  CHECK_OK(devbuf_plugin_info_get(idx, &info, &err), &err);
  CHECK(info.state == DEVBUF_PLUGIN_LOADED && info.identifiers[0] == NULL, "loaded, no identifier");
  int n = 7;
  CHECK(devbuf_plugin_device_count(idx, &n, &err) == DEVBUF_ENODEV && n == 0, "no devices");
  CHECK_HAS(err.message, "provides dtype namespaces only");
  CHECK_OK(devbuf_plugin_unregister(idx, &err), &err);
  /* ABI 1.0 had no such table: still refused there, saying how to make one. */
  t.abi_minor = 0;
  CHECK(devbuf_plugin_register(&t, "dtypes10", &idx, &err) == DEVBUF_EABI, "1.0 dtype-only");
  CHECK_HAS(err.message, "declares no device identifiers (a plugin that only provides dtype "
                         "namespaces sets dtype_namespaces and ABI minor >= 1; this one was built "
                         "for ABI 1.0)");
}

/* Two 4-bit integers per byte, and no canonical name (a namespace may leave it empty). */
static int packed_interpret(void *ctx, const char *payload, size_t len, devbuf_dtype_desc *out,
                            devbuf_error *err) {
  (void)ctx, (void)payload, (void)len, (void)err;
  out->kind = DEVBUF_KIND_INT;
  out->itemsize = 1;
  out->alignment = 1;
  out->bits = 4;
  out->elements_per_item = 2;
  out->dlpack_code = DEVBUF_DLDT_INT;
  out->dlpack_bits = 4;
  return DEVBUF_OK;
}

static void test_packed_dtype_with_a_count_has_no_dlpack_dtype(void) {
  static const devbuf_dtype_namespace ns = {.struct_size = sizeof ns, .id = "firstdaypk",
                                            .provider = "firstday", .interpret = packed_interpret};
  devbuf_error err;
  CHECK_OK(devbuf_dtype_register(&ns, &err), &err);
  devbuf_format f = DEVBUF_FORMAT_INIT;
  uint8_t code = 0, bits = 0;
  uint16_t lanes = 0;
  CHECK_OK(devbuf_format_parse("[firstdaypk$int4x2]", 19, 0, &f, &err), &err);
  CHECK_OK(devbuf_format_to_dlpack(&f, &code, &bits, &lanes, &err), &err);
  CHECK(code == DEVBUF_DLDT_INT && bits == 4 && lanes == 1, "one packed item: %u %u %u", code, bits, lanes);
  devbuf_format_release(&f);
  /* (4)[...]: 4 bytes of 8 elements, which DLPack lanes cannot say (it read
   * as 4 lanes of 4 bits, 2 bytes, before). */
  CHECK_OK(devbuf_format_parse("(4)[firstdaypk$int4x2]", 22, 0, &f, &err), &err);
  CHECK(devbuf_format_to_dlpack(&f, &code, &bits, &lanes, &err) == DEVBUF_ENOTSUP, "count refused");
  CHECK_HAS(err.message, "packed [firstdaypk$int4x2] (2 elements per item) with a count of 4 is "
                         "not supported");
  devbuf_format_release(&f);
  CHECK_OK(devbuf_dtype_unregister("firstdaypk", &err), &err);
}

int main(void) {
  RUN(test_abi_1_0_tables_keep_the_1_0_rules);
  RUN(test_stream_and_event_slots_come_together);
  RUN(test_sync_defaults_and_default_device_info);
  RUN(test_defaults_need_a_host_accessible_device);
  RUN(test_broken_answers_are_named);
  RUN(test_dtype_only_tables);
  RUN(test_packed_dtype_with_a_count_has_no_dlpack_dtype);
  return devbuf_test_finish();
}
