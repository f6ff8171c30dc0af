/* The device-identifier registry: identifier -> owner (the core's plugin
 * index), with interning. A pure data structure: it calls only the C library
 * (registry.h says who does the rest).
 *
 * Identifiers are interned once (never freed, never moved) so that, after one
 * lookup, code compares them by pointer, as the buffer-protocol draft intends
 * for `Py_buffer.device`. The table is append-only: the caller serialises
 * writers (the core holds its runtime lock), readers scan without a lock up
 * to the published count. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/runtime.h"
#include "registry.h"

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
  size_t len = strlen(s) + 1;
  char *copy = malloc(len);
  if (copy == NULL) return NULL;
  memcpy(copy, s, len);
  g_idents[n].name = copy;
  atomic_store_explicit(&g_idents[n].owner, 0, memory_order_relaxed);
  atomic_store_explicit(&g_nidents, n + 1, memory_order_release);
  return copy;
}

int devbuf__ident_claim(const char *interned, size_t owner, size_t *current_owner) {
  ident_entry *e = find_entry(interned);
  if (e == NULL) return DEVBUF_EINTERNAL;
  size_t cur = atomic_load(&e->owner);
  if (cur != 0) {
    if (current_owner) *current_owner = cur - 1;
    return DEVBUF_EEXIST;
  }
  atomic_store(&e->owner, owner + 1);
  return DEVBUF_OK;
}

void devbuf__ident_release_owner(size_t owner) {
  size_t n = atomic_load_explicit(&g_nidents, memory_order_acquire);
  for (size_t i = 0; i < n; i++) {
    size_t expected = owner + 1;
    atomic_compare_exchange_strong(&g_idents[i].owner, &expected, 0);
  }
}

int devbuf__ident_find(const char *identifier, const char **interned, size_t *owner) {
  ident_entry *e = find_entry(identifier);
  if (e == NULL) return DEVBUF_ENOTFOUND;
  size_t o = atomic_load(&e->owner);
  if (o == 0) return DEVBUF_ENOTFOUND;
  if (interned) *interned = e->name;
  if (owner) *owner = o - 1;
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

size_t devbuf__ident_count(void) {
  size_t n = atomic_load_explicit(&g_nidents, memory_order_acquire), k = 0;
  for (size_t i = 0; i < n; i++)
    if (atomic_load(&g_idents[i].owner) != 0) k++;
  return k;
}

const char *devbuf__ident_get(size_t index, size_t *owner) {
  size_t n = atomic_load_explicit(&g_nidents, memory_order_acquire), k = 0;
  for (size_t i = 0; i < n; i++) {
    size_t o = atomic_load(&g_idents[i].owner);
    if (o == 0) continue;
    if (k++ == index) {
      if (owner) *owner = o - 1;
      return g_idents[i].name;
    }
  }
  return NULL;
}
