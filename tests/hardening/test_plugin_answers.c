/* A plugin's answers are checked, not trusted: each misbehaviour
 * below was passed through before and is now refused with DEVBUF_EABI
 * naming the plugin. In-memory tables (devbuf_plugin_register), one
 * identifier per case. */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "devbuf/runtime.h"
#include "devbuf_test.h"

typedef void (*fnptr)(void);
static int any(void) { return DEVBUF_OK; }
static int one(void *s, int *count, devbuf_error *err) { *count = 1; return DEVBUF_OK; }
static int int_max(void *s, int *count, devbuf_error *err) { *count = INT_MAX; return DEVBUF_OK; }
static int align3(void *s, int d, devbuf_device_props *p, devbuf_error *err) {
  p->alloc_alignment = 3;
  return DEVBUF_OK;
}
static int free_above_total(void *s, int d, devbuf_device_props *p, devbuf_error *err) {
  p->total_memory = 1 << 20;
  p->free_memory = 2 << 20;
  p->alloc_alignment = 256;
  return DEVBUF_OK;
}
static int sane_props(void *s, int d, devbuf_device_props *p, devbuf_error *err) {
  p->total_memory = 2 << 20;
  p->free_memory = 1 << 20;
  p->alloc_alignment = 256;
  return DEVBUF_OK;
}
static int oversize_export(void *s, const char *id, int d, void *ev, void *st, uint32_t flags,
                           void *out, size_t capacity, size_t *size, devbuf_error *err) {
  *size = capacity + 64;
  return DEVBUF_OK;
}
static char g_block[64];
static int same_pointer(void *s, int d, size_t size, size_t al, void *st, void **ptr,
                        devbuf_error *err) {
  *ptr = g_block;
  return DEVBUF_OK;
}

static void make_table(devbuf_plugin_table *t, const char *name, const char *const *ids) {
  memset(t, 0, sizeof *t);
  t->struct_size = sizeof *t;
  t->abi_major = DEVBUF_ABI_MAJOR;
  t->abi_minor = DEVBUF_ABI_MINOR;
  t->name = name;
  t->version = "1";
  t->identifiers = ids;
  fnptr *slots = (fnptr *)(void *)&t->device_count;
  for (int i = 0; i < 16; i++) slots[i] = (fnptr)any;
  t->device_count = one;
}

static void test_device_count_int_max(void) {
  static const char *const ids[] = {"answers.count", NULL};
  static devbuf_plugin_table t;
  make_table(&t, "answers_count", ids);
  t.device_count = int_max;
  devbuf_error err;
  CHECK_OK(devbuf_plugin_register(&t, "int_max", NULL, &err), &err);
  devbuf_device d;
  int n = -1;
  CHECK(devbuf_device_count("answers.count", &n, &err) == DEVBUF_EABI, "refused, n=%d", n);
  CHECK(n == 0, "no devices reported, got %d", n);
  CHECK_HAS(err.message, "answers_count");
  CHECK_HAS(err.message, "more than devbuf's limit of 4096");
  CHECK(devbuf_device_open("answers.count", &d, &err) == DEVBUF_EABI, "open refused");
}

static void test_props_alignment_and_memory(void) {
  static const char *const ids_a[] = {"answers.align", NULL}, *const ids_m[] = {"answers.mem", NULL};
  static devbuf_plugin_table ta, tm;
  make_table(&ta, "answers_align", ids_a);
  ta.device_props = align3;
  make_table(&tm, "answers_mem", ids_m);
  tm.device_props = free_above_total;
  devbuf_error err;
  CHECK_OK(devbuf_plugin_register(&ta, "align3", NULL, &err), &err);
  CHECK_OK(devbuf_plugin_register(&tm, "free>total", NULL, &err), &err);
  devbuf_device d;
  devbuf_device_props p;
  CHECK_OK(devbuf_device_open("answers.align", &d, &err), &err);
  CHECK(devbuf_device_props_get(&d, &p, &err) == DEVBUF_EABI, "alignment 3 refused");
  CHECK_HAS(err.message, "plugin 'answers_align' reports alloc_alignment 3, not a power of two");
  CHECK_OK(devbuf_device_open("answers.mem", &d, &err), &err);
  CHECK(devbuf_device_props_get(&d, &p, &err) == DEVBUF_EABI, "free > total refused");
  CHECK_HAS(err.message, "plugin 'answers_mem' reports free memory 2097152 above its total 1048576");
}

static void test_device_info_export_size(void) {
  static const char *const ids[] = {"answers.export", NULL};
  static devbuf_plugin_table t;
  make_table(&t, "answers_export", ids);
  t.device_props = sane_props;
  t.device_info_export = oversize_export;
  devbuf_error err;
  CHECK_OK(devbuf_plugin_register(&t, "oversize", NULL, &err), &err);
  devbuf_device d;
  CHECK_OK(devbuf_device_open("answers.export", &d, &err), &err);
  uint64_t buf[32];
  size_t size = 0;
  CHECK(devbuf_device_info_export(&d, NULL, NULL, 0, buf, sizeof buf, &size, &err) == DEVBUF_EABI,
        "oversize export refused");
  CHECK_HAS(err.message, "plugin 'answers_export' reports 320 bytes written into a 256-byte buffer");
  CHECK(size == 0, "size not passed on: %zu", size);
}

static void test_allocation_handed_out_twice(void) {
  static const char *const ids[] = {"answers.alloc", NULL};
  static devbuf_plugin_table t;
  make_table(&t, "answers_alloc", ids);
  t.mem_alloc = same_pointer;
  devbuf_error err;
  size_t idx = 0;
  CHECK_OK(devbuf_plugin_register(&t, "twice", &idx, &err), &err);
  devbuf_device d;
  CHECK_OK(devbuf_device_open("answers.alloc", &d, &err), &err);
  void *a = NULL, *b = NULL;
  CHECK_OK(devbuf_mem_alloc(&d, 64, 0, NULL, &a, &err), &err);
  CHECK(devbuf_mem_alloc(&d, 64, 0, NULL, &b, &err) == DEVBUF_EABI, "second alias refused");
  CHECK(b == NULL, "no pointer handed out");
  CHECK_HAS(err.message, "plugin 'answers_alloc' returned");
  CHECK_HAS(err.message, "already a live allocation (handed out twice)");
  devbuf_stats st;
  memset(&st, 0, sizeof st);
  CHECK_OK(devbuf_plugin_stats(idx, &st, &err), &err);
  CHECK(st.live_allocations == 1 && st.live_bytes == 64, "statistics stay right: %llu live, %llu bytes",
        (unsigned long long)st.live_allocations, (unsigned long long)st.live_bytes);
  CHECK_OK(devbuf_mem_free(&d, a, NULL, &err), &err);
  /* Freed, the pointer may be handed out again. */
  CHECK_OK(devbuf_mem_alloc(&d, 64, 0, NULL, &b, &err), &err);
  CHECK_OK(devbuf_mem_free(&d, b, NULL, &err), &err);
}

int main(void) {
  RUN(test_device_count_int_max);
  RUN(test_props_alignment_and_memory);
  RUN(test_device_info_export_size);
  RUN(test_allocation_handed_out_twice);
  return devbuf_test_finish();
}
