/* One source, many broken plugins: compiled once per BROKEN_KIND, each a
 * distinct way a plugin can be wrong. The loader must give each its own clear
 * error and keep every other plugin working. A few kinds are *valid* test
 * doubles (GOOD, DUP_A/DUP_B share an identifier, MINOR_NEWER, SIZE_HUGE). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devbuf/plugin.h"

#define DEVBUF_TEST_STR2(x) #x
#define DEVBUF_TEST_STR(x) DEVBUF_TEST_STR2(x)

#ifndef BROKEN_KIND
#error "define BROKEN_KIND"
#endif

#define K_NO_ENTRY 1
#define K_WRONG_MAJOR 2
#define K_MINOR_NEWER 3
#define K_SIZE_ZERO 4
#define K_SIZE_SHORT 5
#define K_SIZE_HUGE 6
#define K_NULL_SLOT 7
#define K_NULL_TABLE 8
#define K_ID_EMPTY 9
#define K_ID_NONPRINT 10
#define K_ID_OVERLONG 11
#define K_ID_CPU 12
#define K_DUP_A 13
#define K_DUP_B 14
#define K_INIT_FAIL 15
#define K_NO_IDS 16
#define K_GOOD 17
#define K_CRASH_PROBE 18
#define K_HANG_PROBE 19
#define K_ID_COLON 20
#define K_NULL_NAME 21
/* Mistakes a first-time author (often outside C) makes. */
#define K_COUNT_NOMSG 22      /* device_count: DEVBUF_ENODEV and no message */
#define K_NOT_REPR_C 23       /* fields in another order: a pointer first (Rust, no #[repr(C)]) */
#define K_ID_UNTERMINATED 24  /* identifier without its NUL, running into the version */
#define K_DANGLING_VERSION 25 /* version freed before the entry returned */
#define K_MISALIGNED_ALLOC 26 /* mem_alloc returns ptr+1 */
#define K_PROPS_REFUSED 27    /* device_props refuses every device */
/* Crashes inside slots, for the conformance runner's isolation:
 * the process dies in the middle of a check. */
#define K_SLOT_ABORT 28       /* copy_h2d aborts, as a Rust panic across extern "C" does */
#define K_SLOT_SEGV 29        /* event_record dereferences a bad pointer */
#define K_SLOT_HANG 30        /* event_synchronize never returns */
/* A failing allocation and a props struct in another field order. */
#define K_ALLOC_1M_FAILS 31   /* mem_alloc refuses 1 MiB and more: out of device memory */
#define K_PROPS_NOT_REPR_C 32 /* device_props written through another field order (Rust, no #[repr(C)]) */

static int count_fn(void *s, int *count, devbuf_error *err) {
#if BROKEN_KIND == K_COUNT_NOMSG
  (void)err;
  *count = 0;
  return DEVBUF_ENODEV; /* and nothing in err */
#endif
#if BROKEN_KIND == K_CRASH_PROBE
  raise(SIGSEGV); /* a driver that crashes when probed */
#elif BROKEN_KIND == K_HANG_PROBE
  for (;;) pause(); /* a driver that never answers */
#endif
  *count = 1;
  return DEVBUF_OK;
}
static int props_fn(void *s, int d, devbuf_device_props *p, devbuf_error *err) {
#if BROKEN_KIND == K_PROPS_REFUSED
  return devbuf_error_set(err, DEVBUF_EBACKEND, "props: simulated refusal of device %d", d);
#endif
#if BROKEN_KIND == K_PROPS_NOT_REPR_C
  /* The fields as rustc may order a struct without #[repr(C)]: the 64-bit
   * fields first, so the host's "name" starts inside total_memory and its
   * alloc_alignment and dlpack_device_type fall in the vendor's zeros. */
  struct {
    uint64_t total_memory, free_memory;
    uint32_t struct_size, flags, alloc_alignment;
    int32_t dlpack_device_type, dlpack_device_id;
    char name[128], vendor[64];
  } rust;
  memset(&rust, 0, sizeof rust);
  rust.total_memory = (uint64_t)8 << 30; /* 8 GiB: the "name" begins with byte 0x02 */
  rust.free_memory = (uint64_t)6 << 30;
  rust.struct_size = (uint32_t)sizeof *p;
  rust.flags = DEVBUF_DEVICE_HOST_ACCESSIBLE;
  rust.alloc_alignment = 16;
  rust.dlpack_device_type = -1;
  strcpy(rust.name, "test double");
  strcpy(rust.vendor, "devbuf tests");
  memcpy((char *)p + sizeof p->struct_size, &rust,
         sizeof *p - sizeof p->struct_size < sizeof rust ? sizeof *p - sizeof p->struct_size
                                                          : sizeof rust);
  return DEVBUF_OK;
#endif
  strcpy(p->name, "test double");
  strcpy(p->vendor, "devbuf tests");
  p->flags = DEVBUF_DEVICE_HOST_ACCESSIBLE;
  p->alloc_alignment = 16;
  return DEVBUF_OK;
}
#if BROKEN_KIND == K_MISALIGNED_ALLOC
/* Off by one byte: what pointer arithmetic on a byte buffer gets wrong. */
static int alloc_fn(void *s, int d, size_t n, size_t a, void *st, void **p, devbuf_error *err) {
  char *m = malloc(n + 1);
  *p = m ? m + 1 : NULL;
  return *p ? DEVBUF_OK : devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: malloc failed");
}
static int free_fn(void *s, int d, void *p, void *st, devbuf_error *err) {
  free((char *)p - 1);
  return DEVBUF_OK;
}
#else
static int alloc_fn(void *s, int d, size_t n, size_t a, void *st, void **p, devbuf_error *err) {
#if BROKEN_KIND == K_ALLOC_1M_FAILS
  if (n >= (size_t)1 << 20)
    return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: %zu bytes: out of device memory", n);
#endif
  *p = malloc(n ? n : 1);
  return *p ? DEVBUF_OK : devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: malloc failed");
}
static int free_fn(void *s, int d, void *p, void *st, devbuf_error *err) { free(p); return DEVBUF_OK; }
#endif
static int h2d_fn(void *s, int d, void *dst, size_t o, const void *src, size_t n, void *st, devbuf_error *e) {
#if BROKEN_KIND == K_SLOT_ABORT
  abort();
#endif
  memcpy((char *)dst + o, src, n); return DEVBUF_OK;
}
static int d2h_fn(void *s, int d, void *dst, const void *src, size_t o, size_t n, void *st, devbuf_error *e) {
  memcpy(dst, (const char *)src + o, n); return DEVBUF_OK;
}
static int d2d_fn(void *s, int d, void *dst, size_t doff, const void *src, size_t soff, size_t n, void *st, devbuf_error *e) {
  memmove((char *)dst + doff, (const char *)src + soff, n); return DEVBUF_OK;
}
static int screate(void *s, int d, void **st, devbuf_error *e) { *st = NULL; return DEVBUF_OK; }
static int sop(void *s, int d, void *st, devbuf_error *e) { return DEVBUF_OK; }
static int ecreate(void *s, int d, void **ev, devbuf_error *e) { *ev = malloc(1); return *ev ? DEVBUF_OK : DEVBUF_ENOMEM; }
static int edestroy(void *s, int d, void *ev, devbuf_error *e) { free(ev); return DEVBUF_OK; }
static int erecord(void *s, int d, void *ev, void *st, devbuf_error *e) {
#if BROKEN_KIND == K_SLOT_SEGV
  raise(SIGSEGV); /* a slot with the wrong signature reads garbage as a pointer */
#endif
  return DEVBUF_OK;
}
static int ewait(void *s, int d, void *st, void *ev, devbuf_error *e) { return DEVBUF_OK; }
static int eop(void *s, int d, void *ev, devbuf_error *e) { return DEVBUF_OK; }
static int esync(void *s, int d, void *ev, devbuf_error *e) {
#if BROKEN_KIND == K_SLOT_HANG
  for (;;) pause(); /* waits for an event nothing will ever complete */
#endif
  return DEVBUF_OK;
}

static int init_fn(void **state, devbuf_error *err) {
#if BROKEN_KIND == K_INIT_FAIL
  return devbuf_error_set(err, DEVBUF_EBACKEND, "broken_init: simulated driver refusal");
#else
  *state = NULL;
  return DEVBUF_OK;
#endif
}

#if BROKEN_KIND == K_ID_EMPTY
static const char *const ids[] = {"", NULL};
#elif BROKEN_KIND == K_ID_NONPRINT
static const char *const ids[] = {"test.bad\x01id", NULL};
#elif BROKEN_KIND == K_ID_OVERLONG
static const char *const ids[] = {"test.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL};
#elif BROKEN_KIND == K_ID_CPU
static const char *const ids[] = {"cpu", NULL};
#elif BROKEN_KIND == K_ID_COLON
static const char *const ids[] = {"test.has:colon", NULL};
#elif BROKEN_KIND == K_DUP_A || BROKEN_KIND == K_DUP_B
static const char *const ids[] = {"test.dup", NULL};
#elif BROKEN_KIND == K_NO_IDS
static const char *const ids[] = {NULL};
#elif BROKEN_KIND == K_ID_UNTERMINATED
/* How a Rust "test.unterm" literal (no NUL) sits before the next literal. */
static const char strings[] = {'t', 'e', 's', 't', '.', 'u', 'n', 't', 'e', 'r', 'm',
                               '0', '.', '1', '.', '0', '\0'};
static const char *const ids[] = {strings, NULL};
#else
static const char *const ids[] = {"test.kind" DEVBUF_TEST_STR(BROKEN_KIND), NULL};
#endif

/* Room for a "huge" table: the plugin claims more than the host knows. */
static struct {
  devbuf_plugin_table t;
  char future_fields[4096];
} table = {
    .t = {
        .struct_size = sizeof(devbuf_plugin_table),
        .abi_major = DEVBUF_ABI_MAJOR,
        .abi_minor = DEVBUF_ABI_MINOR,
#if BROKEN_KIND == K_NULL_NAME
        .name = NULL,
#else
        .name = "broken" DEVBUF_TEST_STR(BROKEN_KIND),
#endif
        .version = "0.0.1",
        .description = "a test plugin from tests/broken",
        .identifiers = ids,
        .init = init_fn,
        .device_count = count_fn,
        .device_props = props_fn,
        .mem_alloc = alloc_fn,
        .mem_free = free_fn,
        .copy_h2d = h2d_fn,
        .copy_d2h = d2h_fn,
        .copy_d2d = d2d_fn,
        .stream_create = screate,
        .stream_destroy = sop,
        .stream_synchronize = sop,
        .event_create = ecreate,
        .event_destroy = edestroy,
        .event_record = erecord,
        .stream_wait_event = ewait,
        .event_synchronize = esync,
        .event_query = eop,
    }};

#if BROKEN_KIND != K_NO_ENTRY
DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) {
#if BROKEN_KIND == K_NULL_TABLE
  (void)table;
  return NULL;
#elif BROKEN_KIND == K_NOT_REPR_C
  /* The same fields, pointers first, as rustc may order a struct without
   * #[repr(C)]: the "struct_size" and "abi_major" read are half a pointer. */
  static struct {
    const char *name;
    uint32_t struct_size;
    uint16_t abi_major, abi_minor;
  } reordered = {"broken23", sizeof(devbuf_plugin_table), DEVBUF_ABI_MAJOR, DEVBUF_ABI_MINOR};
  (void)table;
  return (const devbuf_plugin_table *)(const void *)&reordered;
#else
#if BROKEN_KIND == K_ID_UNTERMINATED
  table.t.version = strings + 11; /* "0.1.0" */
#elif BROKEN_KIND == K_DANGLING_VERSION
  /* A temporary's buffer, freed before the table is read (a Rust
   * CString::new("0.1.0").unwrap().as_ptr()). */
  char *v = malloc(8);
  if (v != NULL) {
    memcpy(v, "0.1.0", 6);
    table.t.version = v;
    free(v);
  }
#endif
#if BROKEN_KIND == K_WRONG_MAJOR
  table.t.abi_major = DEVBUF_ABI_MAJOR + 1;
  table.t.abi_minor = 0; /* a plugin of the next major's first release */
#elif BROKEN_KIND == K_MINOR_NEWER
  table.t.abi_minor = DEVBUF_ABI_MINOR + 7;
#elif BROKEN_KIND == K_SIZE_ZERO
  table.t.struct_size = 0;
#elif BROKEN_KIND == K_SIZE_SHORT
  table.t.struct_size = (uint32_t)offsetof(devbuf_plugin_table, copy_d2h);
#elif BROKEN_KIND == K_SIZE_HUGE
  table.t.struct_size = (uint32_t)sizeof table;
#elif BROKEN_KIND == K_NULL_SLOT
  table.t.mem_alloc = NULL;
#endif
  return &table.t;
#endif
}
#else
/* No entry symbol: export something else (that uses the table, so the
 * compiler keeps it) so the file is still a valid shared object. */
DEVBUF_PLUGIN_EXPORT const void *not_a_devbuf_plugin(void) { return &table; }
#endif
