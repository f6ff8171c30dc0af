/* The device-identifier registry: identifier -> plugin, with interning.
 *
 * Identifiers are interned once (never freed, never moved) so that, after one
 * lookup, code compares them by pointer, as the buffer-protocol draft intends
 * for `Py_buffer.device`. The table is append-only: writers hold
 * devbuf__rt.lock, readers scan without it up to the published count. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define DEVBUF_MAX_IDENTIFIERS 8192

typedef struct ident_entry {
  const char *name;       /* interned, immutable */
  _Atomic size_t owner;   /* backend index + 1, or 0 when unclaimed */
} ident_entry;

static ident_entry g_idents[DEVBUF_MAX_IDENTIFIERS];
static _Atomic size_t g_nidents;

static ident_entry *find_entry(const char *s) {
  size_t n = atomic_load_explicit(&g_nidents, memory_order_acquire);
  for (size_t i = 0; i < n; i++) {
    if (g_idents[i].name == s || strcmp(g_idents[i].name, s) == 0) return &g_idents[i];
  }
  return NULL;
}

const char *devbuf__intern(const char *s) {
  ident_entry *e = find_entry(s);
  if (e != NULL) return e->name;
  size_t n = atomic_load_explicit(&g_nidents, memory_order_relaxed);
  if (n >= DEVBUF_MAX_IDENTIFIERS) return NULL;
  char *copy = devbuf__strdup(s);
  if (copy == NULL) return NULL;
  g_idents[n].name = copy;
  atomic_store_explicit(&g_idents[n].owner, 0, memory_order_relaxed);
  atomic_store_explicit(&g_nidents, n + 1, memory_order_release);
  return copy;
}

int devbuf__ident_claim(const char *interned, size_t backend_index, size_t *owner) {
  ident_entry *e = find_entry(interned);
  if (e == NULL) return DEVBUF_EINTERNAL;
  size_t cur = atomic_load(&e->owner);
  if (cur != 0) {
    if (owner) *owner = cur - 1;
    return DEVBUF_EEXIST;
  }
  atomic_store(&e->owner, backend_index + 1);
  return DEVBUF_OK;
}

void devbuf__ident_release_backend(size_t backend_index) {
  size_t n = atomic_load_explicit(&g_nidents, memory_order_acquire);
  for (size_t i = 0; i < n; i++) {
    size_t expected = backend_index + 1;
    atomic_compare_exchange_strong(&g_idents[i].owner, &expected, 0);
  }
}

int devbuf__ident_find(const char *identifier, const char **interned, size_t *backend_index) {
  ident_entry *e = find_entry(identifier);
  if (e == NULL) return DEVBUF_ENOTFOUND;
  size_t owner = atomic_load(&e->owner);
  if (owner == 0) return DEVBUF_ENOTFOUND;
  if (interned) *interned = e->name;
  if (backend_index) *backend_index = owner - 1;
  return DEVBUF_OK;
}

int devbuf_identifier_check(const char *identifier, devbuf_error *err) {
  if (identifier == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "device identifier is NULL");
  size_t len = strnlen(identifier, DEVBUF_IDENTIFIER_MAX + 1);
  if (len == 0) return devbuf_error_set(err, DEVBUF_EINVAL, "device identifier is empty");
  if (len > DEVBUF_IDENTIFIER_MAX)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "device identifier '%.*s...' is longer than %d bytes", 32,
                            identifier, DEVBUF_IDENTIFIER_MAX);
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)identifier[i];
    if (c < 0x21 || c > 0x7e)
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "device identifier has a non-printable or space byte 0x%02x at "
                              "offset %zu (identifiers are printable ASCII)", c, i);
    if (c == ':')
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "device identifier '%s' contains ':' at offset %zu (':' separates "
                              "the device ordinal, as in 'devbuf.sim:1')", identifier, i);
  }
  return DEVBUF_OK;
}

static size_t count_failed(void) {
  size_t n = atomic_load_explicit(&devbuf__rt.nbackends, memory_order_acquire), k = 0;
  for (size_t i = 0; i < n; i++) k += devbuf__rt.backends[i]->state == DEVBUF_PLUGIN_FAILED;
  return k;
}

/* The failed plugin most likely meant to implement `identifier`: one whose
 * reason names it, else one whose file is devbuf_plugin_<last part>.so, else
 * the first that failed. NULL when none failed. */
static const devbuf_backend *failed_candidate(const char *identifier) {
  size_t n = atomic_load_explicit(&devbuf__rt.nbackends, memory_order_acquire);
  const devbuf_backend *first = NULL, *by_file = NULL;
  char quoted[DEVBUF_IDENTIFIER_MAX + 3], file[DEVBUF_IDENTIFIER_MAX + 32];
  const char *dot = strrchr(identifier, '.');
  snprintf(quoted, sizeof quoted, "'%s'", identifier);
  snprintf(file, sizeof file, "/devbuf_plugin_%s.so", dot ? dot + 1 : identifier);
  for (size_t i = 0; i < n; i++) {
    const devbuf_backend *b = devbuf__rt.backends[i];
    if (b->state != DEVBUF_PLUGIN_FAILED || b->reason == NULL) continue;
    if (strstr(b->reason, quoted) != NULL) return b;
    size_t lp = strlen(b->path), lf = strlen(file);
    if (by_file == NULL && lp >= lf && strcmp(b->path + lp - lf, file) == 0) by_file = b;
    if (first == NULL) first = b;
  }
  return by_file ? by_file : first;
}

int devbuf_identifier_lookup(const char *identifier, const char **interned,
                             size_t *plugin_index, devbuf_error *err) {
  int rc = devbuf_init(err);
  if (rc) return rc;
  rc = devbuf_identifier_check(identifier, err);
  if (rc) return rc;
  if (devbuf__ident_find(identifier, interned, plugin_index) != DEVBUF_OK) {
    /* A plugin that failed to load is the likely reason: say which and why,
     * rather than leave the caller to find it in a listing (issue 22). */
    const devbuf_backend *why = failed_candidate(identifier);
    size_t nfailed = count_failed();
    if (why != NULL)
      return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                              "no plugin implements device identifier '%s'; %zu plugin%s failed "
                              "to load, e.g. %s: %s (devbuf-info lists them all)",
                              identifier, nfailed, nfailed == 1 ? "" : "s", why->path, why->reason);
    return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                            "no plugin implements device identifier '%s' (devbuf-info lists "
                            "the registered ones and why a plugin did not load)", identifier);
  }
  return DEVBUF_OK;
}

size_t devbuf_identifier_count(void) {
  devbuf_init(NULL);
  size_t n = atomic_load_explicit(&g_nidents, memory_order_acquire), k = 0;
  for (size_t i = 0; i < n; i++)
    if (atomic_load(&g_idents[i].owner) != 0) k++;
  return k;
}

const char *devbuf_identifier_get(size_t index, size_t *plugin_index) {
  devbuf_init(NULL);
  size_t n = atomic_load_explicit(&g_nidents, memory_order_acquire), k = 0;
  for (size_t i = 0; i < n; i++) {
    size_t owner = atomic_load(&g_idents[i].owner);
    if (owner == 0) continue;
    if (k++ == index) {
      if (plugin_index) *plugin_index = owner - 1;
      return g_idents[i].name;
    }
  }
  return NULL;
}
