/* pyplugin_extfn_plugin.c: a test-double plugin whose only purpose is its
 * extension functions, one or more per signature letter
 * (docs/plugin-authors.md, "Extension functions"), so that
 * tests/python/test_pyplugin_ext.py can call real C functions through
 * devbuf.plugin.call_ext (libffi's ffi_call) and check every conversion.
 *
 * It has no device: device_count says so, and every other mandatory slot
 * refuses with ENODEV. Built by bindings/python/pyplugin.cmake into
 * <build>/lib/devbuf/test-plugins/, where no plugin search looks. */
#include <string.h>

#include "devbuf/plugin.h"

#define NODEV(op) devbuf_error_set(err, DEVBUF_ENODEV, op ": test.extfn has no device")

static int x_device_count(void *s, int *count, devbuf_error *err) {
  *count = 0;
  return devbuf_error_set(err, DEVBUF_ENODEV, "test double: extension functions only");
}
static int x_device_props(void *s, int d, devbuf_device_props *p, devbuf_error *err) { return NODEV("device_props"); }
static int x_mem_alloc(void *s, int d, size_t n, size_t a, void *st, void **p, devbuf_error *err) { return NODEV("mem_alloc"); }
static int x_mem_free(void *s, int d, void *p, void *st, devbuf_error *err) { return NODEV("mem_free"); }
static int x_copy_h2d(void *s, int d, void *dst, size_t o, const void *src, size_t n, void *st, devbuf_error *err) { return NODEV("copy_h2d"); }
static int x_copy_d2h(void *s, int d, void *dst, const void *src, size_t o, size_t n, void *st, devbuf_error *err) { return NODEV("copy_d2h"); }
static int x_copy_d2d(void *s, int d, void *dst, size_t o, const void *src, size_t so, size_t n, void *st, devbuf_error *err) { return NODEV("copy_d2d"); }
static int x_handle_out(void *s, int d, void **h, devbuf_error *err) { return NODEV("create"); }
static int x_handle(void *s, int d, void *h, devbuf_error *err) { return NODEV("handle"); }
static int x_two(void *s, int d, void *a, void *b, devbuf_error *err) { return NODEV("handles"); }

/* ---- the extension functions --------------------------------------------------- */

static double add_all(int8_t b, uint8_t B, int16_t h, uint16_t H, int32_t i, uint32_t I, int64_t q,
                      uint64_t Q, ssize_t n, size_t N, float f, double d) {
  return (double)b + B + h + H + i + I + (double)q + (double)Q + (double)n + (double)N + f + d;
}

#define ECHO(name, T) static T name(T v) { return v; }
ECHO(echo_b, int8_t)
ECHO(echo_B, uint8_t)
ECHO(echo_h, int16_t)
ECHO(echo_H, uint16_t)
ECHO(echo_i, int32_t)
ECHO(echo_I, uint32_t)
ECHO(echo_q, int64_t)
ECHO(echo_Q, uint64_t)
ECHO(echo_n, ssize_t)
ECHO(echo_N, size_t)
ECHO(echo_f, float)
ECHO(echo_d, double)
ECHO(echo_p, void *)

static size_t length(const char *s) { return s ? strlen(s) : (size_t)-1; }
static const char *greeting(void) { return "hello from C"; }
static const char *nothing(void) { return NULL; }
static void fill(void *p, size_t n, uint8_t v) { memset(p, v, n); }

static uint64_t sum_bytes(const void *p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; i++) s += ((const unsigned char *)p)[i];
  return s;
}

/* Status form with an out-parameter. */
static int divide(int32_t a, int32_t b, int32_t *q, devbuf_error *err) {
  if (b == 0) return devbuf_error_set(err, DEVBUF_EINVAL, "divide: division of %d by zero", a);
  *q = a / b;
  return DEVBUF_OK;
}

/* Several out-parameters and a void return. */
static void minmax(const int32_t *v, size_t n, int32_t *lo, int32_t *hi) {
  *lo = *hi = n ? v[0] : 0;
  for (size_t i = 1; i < n; i++) {
    if (v[i] < *lo) *lo = v[i];
    if (v[i] > *hi) *hi = v[i];
  }
}

/* An out-parameter of every width, and the return. */
static int32_t split(uint64_t x, uint8_t *b0, uint16_t *w1, double *half, const char **name) {
  *b0 = (uint8_t)(x & 0xff);
  *w1 = (uint16_t)((x >> 8) & 0xffff);
  *half = (double)x / 2;
  *name = x % 2 ? "odd" : "even";
  return (int32_t)(x % 7);
}

#define FN(f) ((void (*)(void))(f))

static const devbuf_ext_function ext[] = {
    {"add_all", "d(bBhHiIqQnNfd)", "sum of one argument of every numeric letter", FN(add_all)},
    {"echo_b", "b(b)", "", FN(echo_b)},
    {"echo_B", "B(B)", "", FN(echo_B)},
    {"echo_h", "h(h)", "", FN(echo_h)},
    {"echo_H", "H(H)", "", FN(echo_H)},
    {"echo_i", "i(i)", "", FN(echo_i)},
    {"echo_I", "I(I)", "", FN(echo_I)},
    {"echo_q", "q(q)", "", FN(echo_q)},
    {"echo_Q", "Q(Q)", "", FN(echo_Q)},
    {"echo_n", "n(n)", "", FN(echo_n)},
    {"echo_N", "N(N)", "", FN(echo_N)},
    {"echo_f", "f(f)", "", FN(echo_f)},
    {"echo_d", "d(d)", "", FN(echo_d)},
    {"echo_p", "p(p)", "", FN(echo_p)},
    {"length", "N(s)", "strlen, or SIZE_MAX for NULL", FN(length)},
    {"greeting", "s()", "a static string", FN(greeting)},
    {"nothing", "s()", "NULL", FN(nothing)},
    {"fill", "v(pNB)", "memset(p, v, n)", FN(fill)},
    {"sum_bytes", "Q(pN)", "sum of n bytes at p", FN(sum_bytes)},
    {"divide", "i(ii*ie)", "a / b; EINVAL when b is 0", FN(divide)},
    {"minmax", "v(pN*i*i)", "min and max of n int32 at p", FN(minmax)},
    {"split", "i(Q*B*H*d*s)", "x%7, low byte, next 16 bits, x/2, parity", FN(split)},
    {"bad_signature", "i(ix", "a malformed signature: listed as invalid, never called", FN(echo_i)},
    {"null_fn", "v()", "a NULL function: listed as invalid", NULL},
};

static const char *const ids[] = {"test.extfn", NULL};

static const devbuf_plugin_table table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "extfn_test",
    .version = "0.1.0",
    .description = "test double: extension functions of every signature letter",
    .identifiers = ids,
    .device_count = x_device_count,
    .device_props = x_device_props,
    .mem_alloc = x_mem_alloc,
    .mem_free = x_mem_free,
    .copy_h2d = x_copy_h2d,
    .copy_d2h = x_copy_d2h,
    .copy_d2d = x_copy_d2d,
    .stream_create = x_handle_out,
    .stream_destroy = x_handle,
    .stream_synchronize = x_handle,
    .event_create = x_handle_out,
    .event_destroy = x_handle,
    .event_record = x_two,
    .stream_wait_event = x_two,
    .event_synchronize = x_handle,
    .event_query = x_handle,
    .ext_functions = ext,
    .ext_function_count = sizeof ext / sizeof ext[0],
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &table; }
