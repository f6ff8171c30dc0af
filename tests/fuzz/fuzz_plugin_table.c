/* libFuzzer target: plugin-table validation (devbuf_plugin_register).
 *
 * Structure-aware: the input bytes choose how a plugin table is wrong, and
 * the harness builds it in a large backing buffer (so that a table claiming
 * a huge struct_size is still readable memory, as it would be in a real
 * plugin whose table is followed by other data):
 *   struct_size   the exact size, 0, inside the header, just short of the v1
 *                 size, mid-field past v1, huge, or raw
 *   abi           major (mostly 1) and minor (raw)
 *   slots         a bitmask of which of the 16 mandatory slots are NULL, and
 *                 which optional ones (init, shutdown, device_info_export/
 *                 import, host_alloc/free, dtype_namespaces) are present
 *   strings       name, version, description: NULL, empty, long,
 *                 non-printable, "cpu", or bytes from the input
 *   identifiers   NULL list, empty list, up to 70 entries picked from a small
 *                 pool (so duplicates happen), reserved and invalid spellings,
 *                 or bytes from the input
 *   behaviour     what init and device_count answer
 * The table is registered. Whatever happens, the runtime must answer with a
 * status and a message, never crash, and keep its promises:
 *   - a failure returns a code in range with a non-empty message and leaves
 *     no identifier resolving to the failed table;
 *   - a success resolves every declared identifier to the new record, the
 *     record lists exactly the table's identifiers, devices open and the
 *     checked wrappers (including the optional slots) work; unregistering
 *     makes every identifier stop resolving and calls shutdown once.
 * Exhausting the runtime's plugin records or interned identifiers is an
 * expected, clean error (ENOMEM with its message). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/format.h"
#include "devbuf/runtime.h"

#define REQUIRE(c)                                                              \
  do {                                                                          \
    if (!(c)) {                                                                 \
      fprintf(stderr, "fuzz_plugin_table: property failed: %s (line %d)\n", #c, \
              __LINE__);                                                        \
      abort();                                                                  \
    }                                                                           \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct reader {
  const uint8_t *p;
  size_t n, at;
} reader;

static uint64_t take(reader *r, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; i++) {
    uint64_t b = r->at < r->n ? r->p[r->at] : 0;
    r->at++;
    v |= b << (8 * i);
  }
  return v;
}

/* ---- the fake plugin's slots ---------------------------------------------- */

/* What this input's plugin does; read by the slots below. Inputs run one at
 * a time, so a global is fine. */
static struct {
  int init_mode;   /* 0 ok, 1 fail with message, 2 fail without, 3 negative code */
  int count_mode;  /* 0: 1 device, 1: 3 devices, 2: 0 devices, 3: ENODEV+msg,
                      4: ENODEV no msg, 5: negative count, 6: EBACKEND, 7: -5 */
  int shutdowns;   /* shutdown calls seen */
  int inits;
  int state_token;
} g_mode;

static int f_init(void **state, devbuf_error *err) {
  g_mode.inits++;
  *state = &g_mode.state_token;
  switch (g_mode.init_mode) {
    case 1: return devbuf_error_set(err, DEVBUF_EBACKEND, "fuzz init: refused");
    case 2: return DEVBUF_EINIT;
    case 3: return -7;
    default: return DEVBUF_OK;
  }
}
static void f_shutdown(void *state) {
  (void)state;
  g_mode.shutdowns++;
}
static int f_count(void *s, int *count, devbuf_error *err) {
  switch (g_mode.count_mode) {
    case 0: *count = 1; return DEVBUF_OK;
    case 1: *count = 3; return DEVBUF_OK;
    case 2: *count = 0; return DEVBUF_OK;
    case 3: *count = 0; return devbuf_error_set(err, DEVBUF_ENODEV, "fuzz: no hardware");
    case 4: return DEVBUF_ENODEV;
    case 5: *count = -4; return DEVBUF_OK;
    case 6: return devbuf_error_set(err, DEVBUF_EBACKEND, "fuzz: driver error");
    default: return -5;
  }
}
static int f_props(void *s, int d, devbuf_device_props *p, devbuf_error *err) {
  /* Filled to the last byte; one more (no NUL) is refused, which
   * tests/hardening/test_registration.c covers. */
  memset(p->name, 'n', sizeof p->name - 1);
  memset(p->vendor, 'v', sizeof p->vendor - 1);
  p->alloc_alignment = 16;
  /* Its memory is malloc'd: from ABI 1.1 the runtime's synchronous defaults
   * stand in for the copy, stream and event slots an input leaves NULL. */
  p->flags = DEVBUF_DEVICE_HOST_ACCESSIBLE;
  return DEVBUF_OK;
}
static int f_alloc(void *s, int d, size_t n, size_t a, void *st, void **p, devbuf_error *err) {
  *p = malloc(n ? n : 1);
  return *p ? DEVBUF_OK : DEVBUF_ENOMEM;
}
static int f_free(void *s, int d, void *p, void *st, devbuf_error *err) {
  free(p);
  return DEVBUF_OK;
}
static int f_h2d(void *s, int d, void *dst, size_t o, const void *src, size_t n, void *st,
                 devbuf_error *e) {
  memcpy((char *)dst + o, src, n);
  return DEVBUF_OK;
}
static int f_d2h(void *s, int d, void *dst, const void *src, size_t o, size_t n, void *st,
                 devbuf_error *e) {
  memcpy(dst, (const char *)src + o, n);
  return DEVBUF_OK;
}
static int f_d2d(void *s, int d, void *dst, size_t doff, const void *src, size_t soff, size_t n,
                 void *st, devbuf_error *e) {
  memmove((char *)dst + doff, (const char *)src + soff, n);
  return DEVBUF_OK;
}
static int f_screate(void *s, int d, void **st, devbuf_error *e) {
  *st = NULL;
  return DEVBUF_OK;
}
static int f_sop(void *s, int d, void *st, devbuf_error *e) { return DEVBUF_OK; }
static int f_ecreate(void *s, int d, void **ev, devbuf_error *e) {
  *ev = malloc(1);
  return *ev ? DEVBUF_OK : DEVBUF_ENOMEM;
}
static int f_edestroy(void *s, int d, void *ev, devbuf_error *e) {
  free(ev);
  return DEVBUF_OK;
}
static int f_erecord(void *s, int d, void *ev, void *st, devbuf_error *e) { return DEVBUF_OK; }
static int f_ewait(void *s, int d, void *st, void *ev, devbuf_error *e) { return DEVBUF_OK; }
static int f_eop(void *s, int d, void *ev, devbuf_error *e) { return DEVBUF_OK; }
static int f_info_export(void *state, const char *identifier, int device, void *event,
                         void *stream, uint32_t flags, void *out, size_t capacity, size_t *size,
                         devbuf_error *err) {
  REQUIRE(state == &g_mode.state_token || state == NULL);
  if (capacity < sizeof(devbuf_device_info))
    return devbuf_error_set(err, DEVBUF_EINVAL, "fuzz export: capacity %zu", capacity);
  devbuf_device_info di;
  memset(&di, 0, sizeof di);
  di.struct_size = sizeof di;
  di.version = DEVBUF_DEVICE_INFO_VERSION;
  di.device_ordinal = device;
  memcpy(out, &di, sizeof di);
  *size = sizeof di;
  return DEVBUF_OK;
}
static int f_info_import(void *state, const char *identifier, const void *info,
                         devbuf_device_info_desc *out, devbuf_error *err) {
  devbuf_device_info di;
  memcpy(&di, info, sizeof di);
  if (di.struct_size < sizeof di || di.version != DEVBUF_DEVICE_INFO_VERSION)
    return devbuf_error_set(err, DEVBUF_EINVAL, "fuzz import: bad header");
  out->device_ordinal = di.device_ordinal;
  return DEVBUF_OK;
}
static int f_host_alloc(void *s, int d, size_t n, void **p, devbuf_error *e) {
  *p = malloc(n ? n : 1);
  return *p ? DEVBUF_OK : DEVBUF_ENOMEM;
}
static int f_host_free(void *s, int d, void *p, devbuf_error *e) {
  free(p);
  return DEVBUF_OK;
}

/* A dtype namespace whose interpreter answers a fixed, valid description. */
static int f_interpret(void *ctx, const char *payload, size_t len, devbuf_dtype_desc *out,
                       devbuf_error *err) {
  if (len == 0) return DEVBUF_ENOTFOUND;
  out->kind = DEVBUF_KIND_OPAQUE;
  out->itemsize = (uint32_t)(len % 8) + 1;
  out->alignment = 1;
  out->bits = 8 * out->itemsize;
  return DEVBUF_OK;
}

typedef void (*fnptr)(void);
#define FN(f) ((fnptr)(f))

static const fnptr g_mandatory[16] = {
    FN(f_count),   FN(f_props),    FN(f_alloc),    FN(f_free),      FN(f_h2d),
    FN(f_d2h),     FN(f_d2d),      FN(f_screate),  FN(f_sop),       FN(f_sop),
    FN(f_ecreate), FN(f_edestroy), FN(f_erecord),  FN(f_ewait),     FN(f_eop),
    FN(f_eop)};

/* ---- strings ---------------------------------------------------------------- */

#define POOL_IDS 8
static char g_text[8][400]; /* room for strings built from the input */

/* A string chosen by the input; `slot` picks the scratch buffer. */
static const char *pick_string(reader *r, int slot, const char *normal) {
  uint8_t c = (uint8_t)take(r, 1);
  char *t = g_text[slot];
  switch (c % 12) {
    case 0: return NULL;
    case 1: return "";
    case 2: memset(t, 'L', 300); t[300] = '\0'; return t; /* overlong */
    case 3: return "bad\x01name";
    case 4: return "cpu";
    case 5: return "with space";
    case 6: return "caf\xc3\xa9"; /* UTF-8, not ASCII */
    case 7: { /* bytes from the input, length-prefixed */
      size_t len = (size_t)take(r, 1);
      for (size_t i = 0; i < len; i++) t[i] = (char)take(r, 1);
      t[len] = '\0';
      return t;
    }
    default: return normal;
  }
}

/* Identifiers: a small pool (duplicates across and within tables), the
 * reserved and invalid spellings, ids other plugins own, or input bytes. */
static char g_idtext[80][80];

static const char *pick_identifier(reader *r, size_t k) {
  static const char *const pool[POOL_IDS] = {"fz.a", "fz.b", "fz.c", "fz.d",
                                             "fz.e", "fz.f", "fz.g", "fz.h"};
  uint8_t c = (uint8_t)take(r, 1);
  char *t = g_idtext[k];
  switch (c % 16) {
    case 0: return "";
    case 1: return "cpu";
    case 2: return "devbuf.sim"; /* owned by the sim plugin when it loaded */
    case 3: return "a:b";
    case 4: return "has space";
    case 5: return "bad\x7f";
    case 6: memset(t, 'x', 64); t[64] = '\0'; return t; /* one byte too long */
    case 7: memset(t, 'y', 63); t[63] = '\0'; return t; /* exactly the maximum */
    case 8: { /* input bytes */
      size_t len = (size_t)take(r, 1) % 72;
      for (size_t i = 0; i < len; i++) t[i] = (char)take(r, 1);
      t[len] = '\0';
      return t;
    }
    default: return pool[c % POOL_IDS];
  }
}

/* ---- the harness ------------------------------------------------------------- */

static unsigned char g_backing[8192] __attribute__((aligned(64)));
static const char *g_idlist[80];
static const devbuf_dtype_namespace *g_nslist[4];
static devbuf_dtype_namespace g_ns[3];

/* A status a caller can switch on: positive (codes a newer plugin invents
 * are allowed through, the enum is append-only). */
static int code_ok(int rc) { return rc > 0; }

static int message_ok(const devbuf_error *e) {
  return memchr(e->message, '\0', sizeof e->message) != NULL && e->message[0] != '\0';
}

/* Which record owns `id` now, or (size_t)-1. */
static size_t owner_of(const char *id) {
  size_t idx = 0;
  if (devbuf_identifier_lookup(id, NULL, &idx, NULL) != DEVBUF_OK) return (size_t)-1;
  return idx;
}

static void exercise(size_t index, const devbuf_plugin_table *t, int have_optional) {
  devbuf_plugin_info info = {.struct_size = sizeof info};
  REQUIRE(devbuf_plugin_info_get(index, &info, NULL) == DEVBUF_OK);
  REQUIRE(info.state == DEVBUF_PLUGIN_LOADED && info.table != NULL);
  REQUIRE(info.reason != NULL && info.name != NULL && info.version != NULL);
  /* The record lists exactly the table's identifiers, each owned by it. */
  size_t n = 0;
  for (; info.identifiers[n] != NULL; n++) {
    REQUIRE(strcmp(info.identifiers[n], t->identifiers[n]) == 0);
    REQUIRE(owner_of(info.identifiers[n]) == index);
  }
  /* No identifier: a dtype-only table (ABI 1.1), which has no device. */
  if (n == 0) {
    REQUIRE(t->abi_minor >= 1 && t->dtype_namespaces != NULL);
    devbuf_error e0;
    int c0 = -1;
    REQUIRE(devbuf_plugin_device_count(index, &c0, &e0) == DEVBUF_ENODEV && c0 == 0);
    REQUIRE(message_ok(&e0));
    return;
  }
  REQUIRE(t->identifiers[n] == NULL);

  devbuf_error err;
  int count = -1;
  int rc = devbuf_plugin_device_count(index, &count, &err);
  if (rc != DEVBUF_OK) {
    REQUIRE(code_ok(rc) && message_ok(&err) && count == 0);
    devbuf_device d;
    REQUIRE(devbuf_device_open(info.identifiers[0], &d, &err) == rc);
    REQUIRE(message_ok(&err) && strstr(err.message, info.identifiers[0]) != NULL);
    return;
  }
  REQUIRE(count >= 1);
  devbuf_device d;
  rc = devbuf_device_open_ordinal(info.identifiers[n - 1], count - 1, &d, &err);
  REQUIRE(rc == DEVBUF_OK);
  REQUIRE(devbuf_device_open_ordinal(info.identifiers[0], count, NULL, &err) == DEVBUF_ENODEV);
  devbuf_device_props props;
  REQUIRE(devbuf_device_props_get(&d, &props, &err) == DEVBUF_OK);
  REQUIRE(memchr(props.name, '\0', sizeof props.name) != NULL);
  REQUIRE(memchr(props.vendor, '\0', sizeof props.vendor) != NULL);

  void *p = NULL, *ev = NULL, *hp = NULL;
  REQUIRE(devbuf_mem_alloc(&d, 32, 0, NULL, &p, &err) == DEVBUF_OK);
  char buf[32] = "fuzz";
  REQUIRE(devbuf_copy_from_host_sync(&d, p, 0, buf, sizeof buf, &err) == DEVBUF_OK);
  REQUIRE(devbuf_copy_h2d(&d, p, 16, buf, 17, NULL, &err) == DEVBUF_EINVAL);
  REQUIRE(devbuf_event_create(&d, &ev, &err) == DEVBUF_OK);
  REQUIRE(devbuf_event_record(&d, ev, NULL, &err) == DEVBUF_OK);
  /* Busy: unregister must refuse while things are alive. */
  REQUIRE(devbuf_plugin_unregister(index, &err) == DEVBUF_EBUSY);
  unsigned char di[256];
  size_t disz = 0;
  rc = devbuf_device_info_export(&d, ev, NULL, 0, di, sizeof di, &disz, &err);
  REQUIRE(rc == DEVBUF_OK && disz <= sizeof di);
  devbuf_device_info_desc desc;
  devbuf_device d2;
  rc = devbuf_device_info_import(d.identifier, di, &desc, &d2, &err);
  REQUIRE(rc == DEVBUF_OK || (code_ok(rc) && message_ok(&err)));
  if (rc == DEVBUF_OK) REQUIRE(d2.backend == d.backend);
  REQUIRE(devbuf_host_alloc(&d, 8, &hp, &err) == DEVBUF_OK);
  REQUIRE(devbuf_host_free(&d, hp, &err) == DEVBUF_OK);
  REQUIRE(devbuf_event_destroy(&d, ev, &err) == DEVBUF_OK);
  REQUIRE(devbuf_mem_free(&d, p, NULL, &err) == DEVBUF_OK);
  REQUIRE(devbuf_mem_free(&d, p, NULL, &err) == DEVBUF_EINVAL); /* double free caught */

  if (have_optional && t->dtype_namespaces) {
    /* Parse a custom dtype of each namespace the plugin declared. */
    for (size_t k = 0; g_nslist[k] != NULL; k++) {
      const char *id = g_nslist[k]->id;
      if (id == NULL || strlen(id) > 40) continue;
      char fmt[64];
      int len = snprintf(fmt, sizeof fmt, "[%s$abc]", id);
      devbuf_format f = DEVBUF_FORMAT_INIT;
      rc = devbuf_format_parse(fmt, (size_t)len, 0, &f, &err);
      REQUIRE(rc == DEVBUF_OK || (code_ok(rc) && message_ok(&err)));
      devbuf_format_release(&f);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  reader r = {data, size, 0};
  uint8_t mode = (uint8_t)take(&r, 1);
  uint8_t size_mode = (uint8_t)take(&r, 1);
  uint8_t delta = (uint8_t)take(&r, 1);
  uint32_t raw_size = (uint32_t)take(&r, 4);
  uint8_t major_sel = (uint8_t)take(&r, 1);
  uint16_t raw_major = (uint16_t)take(&r, 2);
  uint16_t minor = (uint16_t)take(&r, 2);
  uint16_t null_mask = (uint16_t)take(&r, 2);
  uint8_t optional = (uint8_t)take(&r, 1);
  uint8_t behaviour = (uint8_t)take(&r, 1);

  memset(&g_mode, 0, sizeof g_mode);
  g_mode.init_mode = behaviour & 3;
  g_mode.count_mode = (behaviour >> 2) & 7;

  /* Mostly valid slots, so that the other checks are reached too. */
  if (!(mode & 0x01)) null_mask = 0;

  devbuf_plugin_table t;
  memset(&t, 0, sizeof t);
  t.abi_major = major_sel < 200 ? DEVBUF_ABI_MAJOR : raw_major;
  t.abi_minor = (mode & 0x02) ? minor : DEVBUF_ABI_MINOR;
  t.name = pick_string(&r, 0, "fuzzplugin");
  t.version = pick_string(&r, 1, "1.0");
  t.description = pick_string(&r, 2, "a table built by fuzz_plugin_table");
  fnptr *slots = (fnptr *)(void *)&t.device_count;
  for (int i = 0; i < 16; i++) slots[i] = (null_mask >> i) & 1 ? NULL : g_mandatory[i];
  if (optional & 0x01) t.init = f_init;
  if (optional & 0x02) t.shutdown = f_shutdown;
  if (optional & 0x04) t.device_info_export = f_info_export;
  if (optional & 0x08) t.device_info_import = f_info_import;
  if (optional & 0x10) {
    t.host_alloc = f_host_alloc;
    t.host_free = f_host_free;
  }
  if (optional & 0x20) {
    /* Namespaces: fuzzed struct_size, ids (possibly NULL, odd), interpreter. */
    size_t nns = (size_t)take(&r, 1) % 4;
    for (size_t k = 0; k < nns && k < 3; k++) {
      memset(&g_ns[k], 0, sizeof g_ns[k]);
      uint8_t s = (uint8_t)take(&r, 1);
      g_ns[k].struct_size = s & 0x80 ? (uint32_t)(s & 0x3f) : (uint32_t)sizeof g_ns[k];
      g_ns[k].id = pick_string(&r, 3 + (int)k, k == 0 ? "fzns" : "fzns2");
      g_ns[k].interpret = s & 0x40 ? NULL : f_interpret;
      g_nslist[k] = &g_ns[k];
    }
    g_nslist[nns < 3 ? nns : 3] = NULL;
    t.dtype_namespaces = g_nslist;
  }
  if (optional & 0x40) {
    /* An extension function list whose count says more than NULL holds. */
    t.ext_functions = NULL;
    t.ext_function_count = (size_t)take(&r, 1);
  }

  /* Identifiers. */
  uint8_t nid_sel = (uint8_t)take(&r, 1);
  const char *const *ids = NULL;
  if (nid_sel != 0) {
    size_t nids = nid_sel == 255 ? 70 : (size_t)(nid_sel % 5);
    for (size_t k = 0; k < nids; k++) g_idlist[k] = pick_identifier(&r, k);
    g_idlist[nids] = NULL;
    ids = g_idlist;
  }
  t.identifiers = ids;

  /* struct_size, and the table placed at the start of the backing buffer
   * whose tail holds junk a careless host would read as slots. */
  size_t v1 = DEVBUF_PLUGIN_TABLE_V1_SIZE;
  uint32_t ss;
  switch (size_mode % 10) {
    case 0: ss = 0; break;
    case 1: ss = (uint32_t)(delta % 8); break;                   /* inside the header */
    case 2: ss = (uint32_t)(v1 - 1 - delta % 8); break;          /* just short of v1 */
    case 3: ss = (uint32_t)(v1 + delta % (sizeof t - v1 + 1)); break; /* any split past v1 */
    case 4: ss = (uint32_t)(sizeof t + delta); break;            /* a newer, larger table */
    case 5: ss = raw_size; break;                                /* anything */
    case 6: ss = (uint32_t)sizeof g_backing; break;
    default: ss = (uint32_t)sizeof t; break;
  }
  t.struct_size = ss;
  memset(g_backing, 0xA5, sizeof g_backing); /* junk past the table */
  memcpy(g_backing, &t, sizeof t);
  const devbuf_plugin_table *table = (const devbuf_plugin_table *)(void *)g_backing;
  if (mode & 0x04) table = NULL;

  /* Who owned each identifier before. */
  size_t before[80];
  size_t nids = 0;
  if (ids)
    for (; ids[nids] != NULL; nids++) before[nids] = owner_of(ids[nids]);

  devbuf_error err;
  memset(&err, 0x5a, sizeof err);
  size_t index = (size_t)-1;
  size_t nplugins = devbuf_plugin_count();
  int rc = devbuf_plugin_register(table, (mode & 0x08) ? NULL : "fuzz", &index, &err);
  if (rc != DEVBUF_OK) {
    REQUIRE(code_ok(rc));
    REQUIRE(err.code == rc);
    REQUIRE(message_ok(&err));
    /* Nobody's identifiers changed hands. */
    for (size_t k = 0; k < nids; k++) REQUIRE(owner_of(ids[k]) == before[k]);
    /* A successful init is matched by exactly one shutdown, a failed one by
     * none (a table without init may get its shutdown: it was "loaded"). */
    REQUIRE(g_mode.shutdowns <= 1);
    if (g_mode.inits && g_mode.init_mode != 0) REQUIRE(g_mode.shutdowns == 0);
    if (g_mode.inits && g_mode.init_mode == 0 && t.shutdown) REQUIRE(g_mode.shutdowns == 1);
    if (index != (size_t)-1 && index < devbuf_plugin_count()) {
      devbuf_plugin_info info = {.struct_size = sizeof info};
      REQUIRE(devbuf_plugin_info_get(index, &info, NULL) == DEVBUF_OK);
      REQUIRE(info.state == DEVBUF_PLUGIN_FAILED && info.table == NULL);
      REQUIRE(info.error_code == rc);
      REQUIRE(info.identifiers != NULL && info.identifiers[0] == NULL);
    }
    (void)nplugins;
    return 0;
  }
  REQUIRE(table != NULL && ss >= v1 && t.abi_major == DEVBUF_ABI_MAJOR);
  REQUIRE(index < devbuf_plugin_count());
  /* Optional slots count only when the declared size holds them whole. */
  int have_optional = ss >= sizeof t;
  exercise(index, &t, have_optional);
  REQUIRE(devbuf_plugin_unregister(index, &err) == DEVBUF_OK);
  for (size_t k = 0; k < nids; k++) REQUIRE(owner_of(ids[k]) != index);
  REQUIRE(devbuf_plugin_unregister(index, &err) == DEVBUF_EINVAL);
  if (t.shutdown && (size_t)ss >= offsetof(devbuf_plugin_table, shutdown) + sizeof(void *))
    REQUIRE(g_mode.shutdowns == 1);
  return 0;
}
