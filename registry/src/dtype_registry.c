/* The dtype-namespace registry and devbuf's own `devbuf` namespace.
 *
 * A pure data structure, like the rest of registry/: the namespaces of
 * plugins are the ones the core has added as providers (registry.h); nothing
 * here starts the runtime or reads the core's plugin records.
 *
 * Reads are lock-free: registered namespaces sit in a prepend-only linked
 * list of records that are never freed. Each record counts the interpret
 * calls running in it, so that unregister can wait for them (the reader
 * bumps the count BEFORE checking `removed`, the writer sets `removed`
 * BEFORE reading the count; with sequentially consistent atomics one of the
 * two always sees the other). Writers serialise on a mutex. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/format.h"
#include "format_internal.h"
#include "registry.h"

/* ---- the builtin `devbuf` namespace ---------------------------------------- */
typedef struct builtin_type {
  const char *name; /* NUL-terminated; its length is compared first */
  uint8_t kind, itemsize, align, bits;
  int8_t dl_code;
  const char *plain;
} builtin_type;

#define K_F DEVBUF_KIND_FLOAT
#define K_I DEVBUF_KIND_INT
#define K_U DEVBUF_KIND_UINT
#define K_C DEVBUF_KIND_COMPLEX
#define K_B DEVBUF_KIND_BOOL

/* Names as DLPack 1.1 and ml_dtypes spell them. Sub-byte types are stored
 * one element per byte (ml_dtypes' layout) unless a _xN suffix packs N. */
static const builtin_type BUILTIN[] = {
    {"bfloat16", K_F, 2, 2, 16, DEVBUF_DLDT_BFLOAT, ""},
    {"float8_e3m4", K_F, 1, 1, 8, DEVBUF_DLDT_FLOAT8_E3M4, ""},
    {"float8_e4m3", K_F, 1, 1, 8, DEVBUF_DLDT_FLOAT8_E4M3, ""},
    {"float8_e4m3b11fnuz", K_F, 1, 1, 8, DEVBUF_DLDT_FLOAT8_E4M3B11FNUZ, ""},
    {"float8_e4m3fn", K_F, 1, 1, 8, DEVBUF_DLDT_FLOAT8_E4M3FN, ""},
    {"float8_e4m3fnuz", K_F, 1, 1, 8, DEVBUF_DLDT_FLOAT8_E4M3FNUZ, ""},
    {"float8_e5m2", K_F, 1, 1, 8, DEVBUF_DLDT_FLOAT8_E5M2, ""},
    {"float8_e5m2fnuz", K_F, 1, 1, 8, DEVBUF_DLDT_FLOAT8_E5M2FNUZ, ""},
    {"float8_e8m0fnu", K_F, 1, 1, 8, DEVBUF_DLDT_FLOAT8_E8M0FNU, ""},
    {"float6_e2m3fn", K_F, 1, 1, 6, DEVBUF_DLDT_FLOAT6_E2M3FN, ""},
    {"float6_e3m2fn", K_F, 1, 1, 6, DEVBUF_DLDT_FLOAT6_E3M2FN, ""},
    {"float4_e2m1fn", K_F, 1, 1, 4, DEVBUF_DLDT_FLOAT4_E2M1FN, ""},
    {"int4", K_I, 1, 1, 4, DEVBUF_DLDT_INT, ""},
    {"uint4", K_U, 1, 1, 4, DEVBUF_DLDT_UINT, ""},
    {"int2", K_I, 1, 1, 2, DEVBUF_DLDT_INT, ""},
    {"uint2", K_U, 1, 1, 2, DEVBUF_DLDT_UINT, ""},
    {"complex32", K_C, 4, 2, 32, DEVBUF_DLDT_COMPLEX, ""},
    {"bcomplex32", K_C, 4, 2, 32, DEVBUF_DLDT_BCOMPLEX, ""}, /* two bfloat16 (ml_dtypes 0.6) */
    {"int1", K_I, 1, 1, 1, DEVBUF_DLDT_INT, ""},              /* ml_dtypes 0.6 */
    {"uint1", K_U, 1, 1, 1, DEVBUF_DLDT_UINT, ""},
    /* Aliases with an exact plain equivalent, so that every DLPack type has
     * a spelling in this namespace. */
    {"bool", K_B, 1, 1, 8, DEVBUF_DLDT_BOOL, "?"},
    {"int8", K_I, 1, 1, 8, DEVBUF_DLDT_INT, "b"},
    {"uint8", K_U, 1, 1, 8, DEVBUF_DLDT_UINT, "B"},
    {"int16", K_I, 2, _Alignof(int16_t), 16, DEVBUF_DLDT_INT, "h"},
    {"uint16", K_U, 2, _Alignof(uint16_t), 16, DEVBUF_DLDT_UINT, "H"},
    {"int32", K_I, 4, _Alignof(int32_t), 32, DEVBUF_DLDT_INT, "i"},
    {"uint32", K_U, 4, _Alignof(uint32_t), 32, DEVBUF_DLDT_UINT, "I"},
    {"int64", K_I, 8, _Alignof(int64_t), 64, DEVBUF_DLDT_INT, "q"},
    {"uint64", K_U, 8, _Alignof(uint64_t), 64, DEVBUF_DLDT_UINT, "Q"},
    {"float16", K_F, 2, 2, 16, DEVBUF_DLDT_FLOAT, "e"},
    {"float32", K_F, 4, _Alignof(float), 32, DEVBUF_DLDT_FLOAT, "f"},
    {"float64", K_F, 8, _Alignof(double), 64, DEVBUF_DLDT_FLOAT, "d"},
    {"complex64", K_C, 8, _Alignof(float), 64, DEVBUF_DLDT_COMPLEX, "Zf"},
    {"complex128", K_C, 16, _Alignof(double), 128, DEVBUF_DLDT_COMPLEX, "Zd"},
};
#define NBUILTIN (sizeof BUILTIN / sizeof BUILTIN[0])

static const builtin_type *builtin_find(const char *s, size_t n) {
  if (n == 0 || n >= sizeof(((devbuf_dtype_desc *)0)->canonical)) return NULL;
  for (size_t i = 0; i < NBUILTIN; i++) {
    const char *nm = BUILTIN[i].name;
    if (nm[0] == s[0] && strncmp(nm, s, n) == 0 && nm[n] == '\0') return &BUILTIN[i];
  }
  return NULL;
}

/* strcpy into a fixed field whose size the caller knows to be enough
 * (the builtin names are short); snprintf was a third of the hot path. */
static void copy_name(char *dst, size_t cap, const char *src) {
  size_t n = strlen(src);
  if (n >= cap) n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static void desc_fill(devbuf_dtype_desc *d, uint32_t kind, uint32_t itemsize, uint32_t align,
                      uint32_t bits, uint32_t per_item, int32_t dl, uint32_t dlbits) {
  d->kind = kind;
  d->itemsize = itemsize;
  d->alignment = align;
  d->bits = bits;
  d->elements_per_item = per_item;
  d->dlpack_code = dl;
  d->dlpack_bits = dlbits;
}

/* datetime64(unit) / timedelta64(unit); unit = [multiplier] Y M W D h m s ms us ns ps fs as. */
static int parse_time(const char *p, size_t n, const char *base, uint32_t kind,
                      devbuf_dtype_desc *out, devbuf_error *err) {
  static const char *const units[] = {"Y", "M", "W", "D", "h", "m", "s",
                                      "ms", "us", "ns", "ps", "fs", "as"};
  size_t bl = strlen(base);
  if (n == bl)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                            "devbuf: %s needs a unit, e.g. %s(ns) ('[...]' cannot be used inside a format)",
                            base, base);
  if (p[bl] != '(' || p[n - 1] != ')')
    return devbuf_error_set(err, DEVBUF_ENOTFOUND, "devbuf: write the unit as %s(unit), e.g. %s(ns)",
                            base, base);
  const char *u = p + bl + 1;
  size_t ul = n - bl - 2;
  uint64_t mult = 0;
  size_t i = 0;
  while (i < ul && u[i] >= '0' && u[i] <= '9') {
    mult = mult * 10 + (uint64_t)(u[i] - '0');
    if (mult > INT32_MAX) return devbuf_error_set(err, DEVBUF_ENOTFOUND, "devbuf: %s multiplier too large", base);
    i++;
  }
  if (i > 0 && mult == 0)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND, "devbuf: %s multiplier must be at least 1", base);
  if (i == 0) mult = 1;
  const char *unit = NULL;
  for (size_t k = 0; k < sizeof units / sizeof units[0]; k++)
    if (strlen(units[k]) == ul - i && memcmp(units[k], u + i, ul - i) == 0) unit = units[k];
  if (unit == NULL)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                            "devbuf: unknown %s unit '%.*s' (Y M W D h m s ms us ns ps fs as)",
                            base, (int)(ul > 16 ? 16 : ul), u);
  desc_fill(out, kind, 8, _Alignof(int64_t), 64, 1, -1, 0);
  if (mult == 1) snprintf(out->canonical, sizeof out->canonical, "%s(%s)", base, unit);
  else snprintf(out->canonical, sizeof out->canonical, "%s(%llu%s)", base, (unsigned long long)mult, unit);
  return DEVBUF_OK;
}

static int builtin_interpret(void *ctx, const char *payload, size_t len, devbuf_dtype_desc *out,
                             devbuf_error *err) {
  (void)ctx;
  if (len == 0)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND, "devbuf: empty payload (expected a type name such as bfloat16)");
  if (len >= 10 && memcmp(payload, "datetime64", 10) == 0)
    return parse_time(payload, len, "datetime64", DEVBUF_KIND_DATETIME, out, err);
  if (len >= 11 && memcmp(payload, "timedelta64", 11) == 0)
    return parse_time(payload, len, "timedelta64", DEVBUF_KIND_TIMEDELTA, out, err);
  const builtin_type *t = builtin_find(payload, len);
  uint32_t pack = 1;
  if (t == NULL) {
    /* name_xN: N sub-byte elements packed into one item, LSB first. */
    size_t i = len;
    while (i > 0 && payload[i - 1] >= '0' && payload[i - 1] <= '9') i--;
    if (i >= 2 && i < len && len - i <= 2 && payload[i - 1] == 'x' && payload[i - 2] == '_') {
      t = builtin_find(payload, i - 2);
      pack = 0;
      for (size_t k = i; k < len; k++) pack = pack * 10 + (uint32_t)(payload[k] - '0');
      if (t != NULL && t->bits >= 8)
        return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                                "devbuf: only sub-byte types can be packed, not '%s'", t->name);
      if (t != NULL && (pack < 2 || pack > 64 || (pack * t->bits) % 8 != 0))
        return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                                "devbuf: '%s' packs %u elements of %u bits, which is not a whole "
                                "number of bytes (or not 2..64 elements)",
                                t->name, pack, t->bits);
    }
  }
  if (t == NULL)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                            "devbuf: unknown type '%.*s' (known: bfloat16, float8_e4m3fn, "
                            "float8_e5m2, ..., float6_e2m3fn, float4_e2m1fn, int4, uint4, int2, "
                            "uint2, int1, uint1, complex32, bcomplex32, datetime64(ns), "
                            "timedelta64(ns); see "
                            "docs/format-strings.md)",
                            (int)(len > 64 ? 64 : len), payload);
  if (pack == 1) {
    desc_fill(out, t->kind, t->itemsize, t->align, t->bits, 1, t->dl_code, t->bits);
    copy_name(out->canonical, sizeof out->canonical, t->name);
    copy_name(out->plain_format, sizeof out->plain_format, t->plain);
  } else {
    desc_fill(out, t->kind, pack * t->bits / 8, 1, t->bits, pack, t->dl_code, t->bits);
    snprintf(out->canonical, sizeof out->canonical, "%s_x%u", t->name, pack);
  }
  return DEVBUF_OK;
}

static const devbuf_dtype_namespace BUILTIN_NS = {
    sizeof(devbuf_dtype_namespace), 0, "devbuf", "devbuf",
    "devbuf's well-known types: bfloat16, float8/6/4 families, int4/int2, complex32, "
    "datetime64/timedelta64, DLPack-named aliases",
    builtin_interpret, NULL};

/* ---- well-known foreign ids ----------------------------------------------- */
static const struct {
  const char *id, *package;
} KNOWN[] = {
    {"numpy", "numpy"},   {"ml_dtypes", "ml_dtypes"}, {"arrow", "pyarrow"},
    {"pyarrow", "pyarrow"}, {"torch", "torch"},       {"jax", "jax"},
    {"cupy", "cupy"},     {"pandas", "pandas"},       {"tensorflow", "tensorflow"},
    {"mlx", "mlx"},       {"xarray", "xarray"},       {"polars", "polars"},
};

DEVBUF_API const char *devbuf_dtype_known_provider(const char *id, size_t len) {
  if (id == NULL) return NULL;
  if (len == (size_t)-1) len = strlen(id);
  for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++) {
    size_t kl = strlen(KNOWN[i].id);
    if (len >= kl && memcmp(id, KNOWN[i].id, kl) == 0 &&
        (len == kl || id[kl] == '.' || id[kl] == ':'))
      return KNOWN[i].package;
  }
  return NULL;
}

/* ---- runtime-registered namespaces -------------------------------------------- */
typedef struct reg_entry {
  struct reg_entry *next; /* immutable once published */
  const devbuf_dtype_namespace *ns;
  size_t idlen;
  char id[DEVBUF_DTYPE_ID_MAX + 1];
  atomic_int removed;
  atomic_long inflight;
} reg_entry;

static _Atomic(reg_entry *) g_head;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static bool ns_readable(const devbuf_dtype_namespace *ns) {
  return ns != NULL &&
         ns->struct_size >= offsetof(devbuf_dtype_namespace, ctx) + sizeof(void *) &&
         ns->id != NULL && ns->interpret != NULL;
}

/* Plugins' namespaces, as the core adds them: an append-only list in the
 * order added (the plugins' load order), walked without a lock. */
static devbuf__dtype_provider *_Atomic g_prov_head;
static devbuf__dtype_provider *g_prov_tail; /* guarded by g_lock */

void devbuf__dtype_provider_add(devbuf__dtype_provider *p, size_t owner, const char *name,
                                const devbuf_dtype_namespace *const *namespaces) {
  p->name = name;
  p->namespaces = namespaces;
  p->owner = owner;
  atomic_init(&p->removed, 0);
  atomic_init(&p->next, NULL);
  pthread_mutex_lock(&g_lock);
  if (g_prov_tail == NULL) atomic_store(&g_prov_head, p);
  else atomic_store(&g_prov_tail->next, p);
  g_prov_tail = p;
  pthread_mutex_unlock(&g_lock);
}

void devbuf__dtype_provider_remove(size_t owner) {
  pthread_mutex_lock(&g_lock);
  for (devbuf__dtype_provider *p = atomic_load(&g_prov_head); p != NULL; p = atomic_load(&p->next))
    if (p->owner == owner) atomic_store(&p->removed, 1);
  pthread_mutex_unlock(&g_lock);
}

/* Walk the namespaces of the providers; stop when fn returns true. */
typedef bool (*plugin_ns_fn)(const devbuf_dtype_namespace *ns, const char *plugin, void *arg);
static void each_plugin_ns(plugin_ns_fn fn, void *arg) {
  for (devbuf__dtype_provider *p = atomic_load(&g_prov_head); p != NULL;
       p = atomic_load(&p->next)) {
    if (atomic_load(&p->removed) || p->namespaces == NULL) continue;
    for (const devbuf_dtype_namespace *const *pp = p->namespaces; *pp != NULL; pp++) {
      if (!ns_readable(*pp)) continue;
      if (fn(*pp, p->name ? p->name : "?", arg)) return;
    }
  }
}

static bool id_eq(const char *a, size_t al, const char *b) {
  return strlen(b) == al && memcmp(a, b, al) == 0;
}

/* Check what an interpreter returned, so that a buggy plugin cannot make
 * the engine divide by zero or misalign. */
static int desc_check(const char *id, size_t idl, devbuf_dtype_desc *d, devbuf_error *err) {
  d->canonical[sizeof d->canonical - 1] = '\0';
  d->plain_format[sizeof d->plain_format - 1] = '\0';
  if (d->elements_per_item == 0) d->elements_per_item = 1;
  if (d->itemsize == 0 || d->itemsize > (1u << 30))
    return devbuf_error_set(err, DEVBUF_EABI,
                            "namespace '%.*s' returned an invalid itemsize %u", (int)idl, id,
                            (unsigned)d->itemsize);
  if (d->alignment == 0 || (d->alignment & (d->alignment - 1)) != 0 || d->alignment > 4096)
    return devbuf_error_set(err, DEVBUF_EABI,
                            "namespace '%.*s' returned alignment %u, not a power of two <= 4096",
                            (int)idl, id, (unsigned)d->alignment);
  /* The fields must tell one story: consumers size memory by some of them
   * and exporters (DLPack, the buffer protocol) by others, so a mismatch
   * hands out more memory than an item holds. */
  uint64_t item_bits = (uint64_t)d->itemsize * 8, epi = d->elements_per_item;
  if (d->itemsize % d->alignment != 0)
    return devbuf_error_set(err, DEVBUF_EABI,
                            "namespace '%.*s' returned itemsize %u that is not a multiple of its "
                            "alignment %u (arrays of it would misalign)",
                            (int)idl, id, (unsigned)d->itemsize, (unsigned)d->alignment);
  if (epi > item_bits || (uint64_t)d->bits * epi > item_bits)
    return devbuf_error_set(err, DEVBUF_EABI,
                            "namespace '%.*s' returned %u elements of %u bits per item, more than "
                            "its itemsize %u holds",
                            (int)idl, id, (unsigned)epi, (unsigned)d->bits, (unsigned)d->itemsize);
  if (d->dlpack_code >= 0) {
    uint64_t dl = (uint64_t)d->dlpack_bits * epi;
    if (d->dlpack_bits == 0 || dl > item_bits || (d->dlpack_bits >= 8 && dl != item_bits))
      return devbuf_error_set(err, DEVBUF_EABI,
                              "namespace '%.*s' returned DLPack dtype (code %d, %u bits) x %u "
                              "elements, which does not fill its itemsize %u (%llu bits)",
                              (int)idl, id, (int)d->dlpack_code, (unsigned)d->dlpack_bits,
                              (unsigned)epi, (unsigned)d->itemsize,
                              (unsigned long long)item_bits);
  }
  return DEVBUF_OK;
}

static void desc_reset(devbuf_dtype_desc *d) {
  memset(d, 0, sizeof *d);
  d->struct_size = sizeof *d;
  d->elements_per_item = 1;
  d->dlpack_code = -1;
}

typedef struct plugin_find {
  const char *id;
  size_t idl;
  const devbuf_dtype_namespace *found;
  const char *plugin;
} plugin_find;

static bool plugin_find_fn(const devbuf_dtype_namespace *ns, const char *plugin, void *arg) {
  plugin_find *pf = (plugin_find *)arg;
  if (!id_eq(pf->id, pf->idl, ns->id)) return false;
  pf->found = ns;
  pf->plugin = plugin;
  return true;
}

static int call_ns(const devbuf_dtype_namespace *ns, const char *id, size_t idl,
                   const char *payload, size_t plen, devbuf_dtype_desc *desc, int *status,
                   devbuf_error *err) {
  desc_reset(desc);
  int r = ns->interpret(ns->ctx, payload, plen, desc, err);
  if (r == DEVBUF_OK) r = desc_check(id, idl, desc, err);
  if (r == DEVBUF_OK) return DEVBUF__RESOLVED;
  if (err != NULL && err->message[0] == '\0')
    devbuf_error_set(err, r, "%.*s: interpreter returned status %d without a message", (int)idl,
                     id, r);
  *status = r;
  return DEVBUF__REFUSED;
}

int devbuf__dtype_resolve(const char *id, size_t idl, const char *payload, size_t plen,
                          uint32_t flags, devbuf_dtype_desc *desc, int *status,
                          devbuf_error *err) {
  *status = 0;
  if (idl == 6 && memcmp(id, "devbuf", 6) == 0)
    return call_ns(&BUILTIN_NS, id, idl, payload, plen, desc, status, err);
  for (reg_entry *e = atomic_load(&g_head); e != NULL; e = e->next) {
    if (e->idlen != idl || memcmp(e->id, id, idl) != 0) continue;
    atomic_fetch_add(&e->inflight, 1);
    if (atomic_load(&e->removed)) {
      atomic_fetch_sub(&e->inflight, 1);
      continue;
    }
    int r = call_ns(e->ns, id, idl, payload, plen, desc, status, err);
    atomic_fetch_sub(&e->inflight, 1);
    return r;
  }
  if (!(flags & DEVBUF_FORMAT_NO_PLUGINS)) {
    plugin_find pf = {id, idl, NULL, NULL};
    each_plugin_ns(plugin_find_fn, &pf);
    if (pf.found != NULL) return call_ns(pf.found, id, idl, payload, plen, desc, status, err);
  }
  return DEVBUF__UNKNOWN_ID;
}

static int id_check(const char *id, devbuf_error *err) {
  size_t n = 0;
  if (id == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "dtype_register: NULL id");
  for (; id[n] != '\0'; n++) {
    if (!devbuf__id_char_strict((unsigned char)id[n]))
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "dtype_register: id '%s' contains byte 0x%02x (ids are printable "
                              "ASCII without spaces, '[', ']', ';' or '$')",
                              id, (unsigned char)id[n]);
    if (n >= DEVBUF_DTYPE_ID_MAX)
      return devbuf_error_set(err, DEVBUF_EINVAL, "dtype_register: id longer than %d bytes",
                              DEVBUF_DTYPE_ID_MAX);
  }
  if (n == 0) return devbuf_error_set(err, DEVBUF_EINVAL, "dtype_register: empty id");
  return DEVBUF_OK;
}

int devbuf__dtype_register(const devbuf_dtype_namespace *ns, devbuf_error *err) {
  if (!ns_readable(ns))
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "dtype_register: namespace is NULL, has struct_size %u too small, or "
                            "lacks id/interpret",
                            ns ? (unsigned)ns->struct_size : 0u);
  int r = id_check(ns->id, err);
  if (r) return r;
  if (strcmp(ns->id, "struct") == 0 || strcmp(ns->id, "buffer") == 0 ||
      strcmp(ns->id, "devbuf") == 0)
    return devbuf_error_set(err, DEVBUF_EEXIST, "dtype_register: '%s' is reserved", ns->id);
  size_t idl = strlen(ns->id);
  /* Plugins first, outside our lock (the provider list is read without one). */
  plugin_find pf = {ns->id, idl, NULL, NULL};
  each_plugin_ns(plugin_find_fn, &pf);
  if (pf.found != NULL)
    return devbuf_error_set(err, DEVBUF_EEXIST,
                            "dtype_register: '%s' is already provided by plugin '%s'", ns->id,
                            pf.plugin);
  reg_entry *e = (reg_entry *)calloc(1, sizeof *e);
  if (e == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "dtype_register: out of memory");
  memcpy(e->id, ns->id, idl + 1);
  e->idlen = idl;
  e->ns = ns;
  atomic_init(&e->removed, 0);
  atomic_init(&e->inflight, 0);
  pthread_mutex_lock(&g_lock);
  for (reg_entry *x = atomic_load(&g_head); x != NULL; x = x->next) {
    if (!atomic_load(&x->removed) && x->idlen == idl && memcmp(x->id, ns->id, idl) == 0) {
      pthread_mutex_unlock(&g_lock);
      free(e);
      return devbuf_error_set(err, DEVBUF_EEXIST, "dtype_register: '%s' is already registered",
                              ns->id);
    }
  }
  e->next = atomic_load(&g_head);
  atomic_store(&g_head, e);
  pthread_mutex_unlock(&g_lock);
  return DEVBUF_OK;
}

DEVBUF_API int devbuf_dtype_unregister(const char *id, devbuf_error *err) {
  if (id == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "dtype_unregister: NULL id");
  size_t idl = strlen(id);
  reg_entry *hit = NULL;
  pthread_mutex_lock(&g_lock);
  for (reg_entry *x = atomic_load(&g_head); x != NULL; x = x->next) {
    if (!atomic_load(&x->removed) && x->idlen == idl && memcmp(x->id, id, idl) == 0) {
      atomic_store(&x->removed, 1);
      hit = x;
      break;
    }
  }
  pthread_mutex_unlock(&g_lock);
  if (hit == NULL)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND, "dtype_unregister: '%s' is not registered", id);
  while (atomic_load(&hit->inflight) != 0) sched_yield();
  return DEVBUF_OK;
}

int devbuf__dtype_ns_lookup(const char *id, size_t len, const devbuf_dtype_namespace **out,
                                   const char **source, devbuf_error *err) {
  if (id == NULL || out == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "dtype_lookup: NULL argument");
  if (len == (size_t)-1) len = strlen(id);
  if (id_eq(id, len, BUILTIN_NS.id)) {
    *out = &BUILTIN_NS;
    if (source) *source = "builtin";
    return DEVBUF_OK;
  }
  for (reg_entry *e = atomic_load(&g_head); e != NULL; e = e->next) {
    if (!atomic_load(&e->removed) && e->idlen == len && memcmp(e->id, id, len) == 0) {
      *out = e->ns;
      if (source) *source = "registered";
      return DEVBUF_OK;
    }
  }
  plugin_find pf = {id, len, NULL, NULL};
  each_plugin_ns(plugin_find_fn, &pf);
  if (pf.found != NULL) {
    *out = pf.found;
    if (source) *source = pf.plugin;
    return DEVBUF_OK;
  }
  const char *prov = devbuf_dtype_known_provider(id, len);
  if (prov != NULL)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                            "dtype_lookup: '%.*s' is not registered (it is defined by the '%s' "
                            "package; load a devbuf plugin or register a namespace for it)",
                            (int)(len > 64 ? 64 : len), id, prov);
  return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                          "dtype_lookup: '%.*s' is not a known dtype id (" DEVBUF_DTYPE_PROVIDE_HINT ")",
                          (int)(len > 64 ? 64 : len), id);
}

int devbuf__dtype_ns_interpret(const char *id, const char *payload, size_t len,
                                      devbuf_dtype_desc *out, devbuf_error *err) {
  if (id == NULL || out == NULL || (payload == NULL && len != 0))
    return devbuf_error_set(err, DEVBUF_EINVAL, "dtype_interpret: NULL argument");
  if (payload == NULL) payload = "";
  size_t idl = strlen(id);
  int st = 0;
  int r = devbuf__dtype_resolve(id, idl, payload, len, 0, out, &st, err);
  if (r == DEVBUF__RESOLVED) return DEVBUF_OK;
  if (r == DEVBUF__REFUSED) return st;
  const devbuf_dtype_namespace *ns;
  return devbuf__dtype_ns_lookup(id, idl, &ns, NULL, err);
}

/* ---- listing ------------------------------------------------------------------- */
typedef struct plugin_nth {
  size_t want, seen;
  const devbuf_dtype_namespace *found;
  const char *plugin;
} plugin_nth;

static bool plugin_nth_fn(const devbuf_dtype_namespace *ns, const char *plugin, void *arg) {
  plugin_nth *pn = (plugin_nth *)arg;
  if (pn->seen++ == pn->want) {
    pn->found = ns;
    pn->plugin = plugin;
    return true;
  }
  return false;
}

static size_t registered_count(void) {
  size_t n = 0;
  for (reg_entry *e = atomic_load(&g_head); e != NULL; e = e->next)
    if (!atomic_load(&e->removed)) n++;
  return n;
}

size_t devbuf__dtype_ns_count(void) {
  plugin_nth pn = {(size_t)-1, 0, NULL, NULL};
  each_plugin_ns(plugin_nth_fn, &pn);
  return 1 + registered_count() + pn.seen;
}

/* The one-pass listing. Both lists are append-only (a removal only marks its
 * record), so a single walk sees every namespace that stays registered while
 * it runs; listing by index cannot promise that, since a removal between two
 * calls shifts the indices after it. A registered namespace is copied under
 * its in-flight count, as an interpret call runs: devbuf_dtype_unregister
 * waits for it, so the registrant frees nothing the copy still reads. */
static void copy_str(char *dst, size_t size, const char *src) {
  size_t n = src ? strlen(src) : 0;
  if (n >= size) n = size - 1;
  if (n) memcpy(dst, src, n);
  dst[n] = '\0';
}

void devbuf__dtype_info_fill(devbuf_dtype_namespace_info *out, const devbuf_dtype_namespace *ns,
                             const char *source) {
  out->flags = (ns->provider ? DEVBUF_DTYPE_INFO_HAS_PROVIDER : 0u) |
               (ns->description ? DEVBUF_DTYPE_INFO_HAS_DESCRIPTION : 0u);
  copy_str(out->id, sizeof out->id, ns->id);
  copy_str(out->provider, sizeof out->provider, ns->provider);
  copy_str(out->description, sizeof out->description, ns->description);
  copy_str(out->source, sizeof out->source, source);
}

typedef struct ns_fill {
  devbuf_dtype_namespace_info *out;
  size_t capacity, n;
} ns_fill;

static bool plugin_fill_fn(const devbuf_dtype_namespace *ns, const char *plugin, void *arg) {
  ns_fill *f = (ns_fill *)arg;
  if (f->n < f->capacity) devbuf__dtype_info_fill(&f->out[f->n], ns, plugin);
  f->n++;
  return false;
}

size_t devbuf__dtype_ns_list(devbuf_dtype_namespace_info *out, size_t capacity, size_t at) {
  ns_fill f = {out, out == NULL ? 0 : capacity, at};
  if (f.n < f.capacity) devbuf__dtype_info_fill(&f.out[f.n], &BUILTIN_NS, "builtin");
  f.n++;
  for (reg_entry *e = atomic_load(&g_head); e != NULL; e = e->next) {
    if (atomic_load(&e->removed)) continue;
    if (f.n >= f.capacity) {  /* counting only: nothing is read from the descriptor */
      f.n++;
      continue;
    }
    atomic_fetch_add(&e->inflight, 1);
    if (!atomic_load(&e->removed)) devbuf__dtype_info_fill(&f.out[f.n++], e->ns, "registered");
    atomic_fetch_sub(&e->inflight, 1);
  }
  each_plugin_ns(plugin_fill_fn, &f);
  return f.n;
}

int devbuf__dtype_ns_get(size_t index, const devbuf_dtype_namespace **ns,
                                          const char **source, devbuf_error *err) {
  if (ns == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "dtype_namespace_get: NULL ns");
  if (index == 0) {
    *ns = &BUILTIN_NS;
    if (source) *source = "builtin";
    return DEVBUF_OK;
  }
  size_t i = index - 1;
  for (reg_entry *e = atomic_load(&g_head); e != NULL; e = e->next) {
    if (atomic_load(&e->removed)) continue;
    if (i-- == 0) {
      *ns = e->ns;
      if (source) *source = "registered";
      return DEVBUF_OK;
    }
  }
  plugin_nth pn = {i, 0, NULL, NULL};
  each_plugin_ns(plugin_nth_fn, &pn);
  if (pn.found != NULL) {
    *ns = pn.found;
    if (source) *source = pn.plugin;
    return DEVBUF_OK;
  }
  return devbuf_error_set(err, DEVBUF_ENOTFOUND, "dtype_namespace_get: no namespace #%zu", index);
}

/* ---- DLPack dtype -> format --------------------------------------------------------- */
DEVBUF_API int devbuf_format_from_dlpack(uint8_t code, uint8_t bits, uint16_t lanes, char *buf,
                                         size_t capacity, size_t *needed, devbuf_error *err) {
  const char *plain = NULL, *custom = NULL;
  static const char *const f8[] = {"float8_e3m4",     "float8_e4m3",   "float8_e4m3b11fnuz",
                                   "float8_e4m3fn",   "float8_e4m3fnuz", "float8_e5m2",
                                   "float8_e5m2fnuz", "float8_e8m0fnu"};
  switch (code) {
    case DEVBUF_DLDT_INT:
      plain = bits == 8 ? "b" : bits == 16 ? "h" : bits == 32 ? "i" : bits == 64 ? "q" : NULL;
      custom = bits == 4 ? "int4_x2" : bits == 2 ? "int2_x4" : bits == 1 ? "int1_x8" : NULL;
      break;
    case DEVBUF_DLDT_UINT:
      plain = bits == 8 ? "B" : bits == 16 ? "H" : bits == 32 ? "I" : bits == 64 ? "Q" : NULL;
      custom = bits == 4 ? "uint4_x2" : bits == 2 ? "uint2_x4" : bits == 1 ? "uint1_x8" : NULL;
      break;
    case DEVBUF_DLDT_FLOAT:
      plain = bits == 16 ? "e" : bits == 32 ? "f" : bits == 64 ? "d" : NULL;
      break;
    case DEVBUF_DLDT_BFLOAT:
      custom = bits == 16 ? "bfloat16" : NULL;
      break;
    case DEVBUF_DLDT_COMPLEX:
      plain = bits == 64 ? "Zf" : bits == 128 ? "Zd" : NULL;
      custom = bits == 32 ? "complex32" : NULL;
      break;
    case DEVBUF_DLDT_BCOMPLEX:
      custom = bits == 32 ? "bcomplex32" : NULL;
      break;
    case DEVBUF_DLDT_BOOL:
      plain = bits == 8 ? "?" : NULL;
      break;
    case DEVBUF_DLDT_FLOAT6_E2M3FN:
      custom = bits == 6 ? "float6_e2m3fn_x4" : NULL;
      break;
    case DEVBUF_DLDT_FLOAT6_E3M2FN:
      custom = bits == 6 ? "float6_e3m2fn_x4" : NULL;
      break;
    case DEVBUF_DLDT_FLOAT4_E2M1FN:
      custom = bits == 4 ? "float4_e2m1fn_x2" : NULL;
      break;
    default:
      if (code >= DEVBUF_DLDT_FLOAT8_E3M4 && code <= DEVBUF_DLDT_FLOAT8_E8M0FNU && bits == 8)
        custom = f8[code - DEVBUF_DLDT_FLOAT8_E3M4];
      break;
  }
  if (plain == NULL && custom == NULL)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                            "format_from_dlpack: no format for DLPack dtype code %u bits %u",
                            (unsigned)code, (unsigned)bits);
  char tmp[64];
  int n;
  char cnt[8] = "";
  if (lanes > 1) snprintf(cnt, sizeof cnt, "%u", (unsigned)lanes);
  if (plain != NULL) n = snprintf(tmp, sizeof tmp, "%s%s", cnt, plain);
  else n = snprintf(tmp, sizeof tmp, "%s[devbuf$%s]", cnt, custom);
  if (needed) *needed = (size_t)n;
  if (buf != NULL && capacity > 0) snprintf(buf, capacity, "%s", tmp);
  return DEVBUF_OK;
}
