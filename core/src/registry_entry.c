/* The public entry points whose answer depends on the plugins: identifier
 * lookups, and the dtype-namespace and format functions that may meet a
 * namespace a plugin provides.
 *
 * Lazy initialisation lives here, at the core's door: each entry
 * starts the runtime (plugin discovery, once, devbuf_init) and then asks the
 * registry, a pure data structure below the core that never calls up
 * (registry/src/registry.h). The registry's functions that cannot depend on a
 * plugin (devbuf_identifier_check, devbuf_format_print, devbuf_dtype_unregister,
 * ...) are public as they are. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* ---- identifiers ---------------------------------------------------------- */

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
     * rather than leave the caller to find it in a listing. */
    const devbuf_backend *why = failed_candidate(identifier);
    size_t nfailed = count_failed();
    /* A near miss among the registered identifiers (suggest.c). */
    const char *known[64];
    size_t nk = 0;
    for (size_t i = 0, total = devbuf__ident_count(); i < total && nk < 64; i++) {
      size_t owner;
      const char *id = devbuf__ident_get(i, &owner);
      if (id != NULL) known[nk++] = id;
    }
    char hint[DEVBUF_IDENTIFIER_MAX * 2 + 160];
    devbuf__suggest(identifier, known, nk, hint, sizeof hint);
    if (why != NULL)
      return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                              "no plugin implements device identifier '%s'%s; %zu plugin%s failed "
                              "to load, e.g. %s: %s (devbuf-info lists them all)",
                              identifier, hint, nfailed, nfailed == 1 ? "" : "s", why->path,
                              why->reason);
    return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                            "no plugin implements device identifier '%s'%s (devbuf-info lists "
                            "the registered ones and why a plugin did not load)", identifier, hint);
  }
  return DEVBUF_OK;
}

size_t devbuf_identifier_count(void) {
  devbuf_init(NULL);
  return devbuf__ident_count();
}

const char *devbuf_identifier_get(size_t index, size_t *plugin_index) {
  devbuf_init(NULL);
  return devbuf__ident_get(index, plugin_index);
}

/* ---- dtype namespaces --------------------------------------------------------- */

int devbuf_dtype_register(const devbuf_dtype_namespace *ns, devbuf_error *err) {
  /* Started first, so that a plugin's namespace of the same id is refused
   * now rather than shadowed later. */
  devbuf_init(NULL);
  return devbuf__dtype_register(ns, err);
}

int devbuf_dtype_lookup(const char *id, size_t len, const devbuf_dtype_namespace **out,
                        const char **source, devbuf_error *err) {
  devbuf_init(NULL);
  return devbuf__dtype_lookup(id, len, out, source, err);
}

int devbuf_dtype_interpret(const char *id, const char *payload, size_t len,
                           devbuf_dtype_desc *out, devbuf_error *err) {
  devbuf_init(NULL);
  return devbuf__dtype_interpret(id, payload, len, out, err);
}

size_t devbuf_dtype_namespace_count(void) {
  devbuf_init(NULL);
  return devbuf__dtype_namespace_count();
}

int devbuf_dtype_namespace_get(size_t index, const devbuf_dtype_namespace **ns,
                               const char **source, devbuf_error *err) {
  devbuf_init(NULL);
  return devbuf__dtype_namespace_get(index, ns, source, err);
}

size_t devbuf_dtype_namespace_list(devbuf_dtype_namespace_info *out, size_t capacity) {
  devbuf_init(NULL);
  return devbuf__dtype_namespace_list(out, capacity);
}

/* ---- format strings --------------------------------------------------------- */

/* Only a '[' can bring in a custom dtype id, and so a plugin's namespace:
 * plain PEP 3118 formats (the common case) parse without starting the
 * runtime, as they always have. */
static void start_if_custom(const char *fmt, size_t len, uint32_t flags) {
  if (fmt == NULL || (flags & (DEVBUF_FORMAT_NO_PLUGINS | DEVBUF_FORMAT_NO_CUSTOM))) return;
  if (memchr(fmt, '[', len) != NULL) devbuf_init(NULL);
}

int devbuf_format_parse(const char *fmt, size_t len, uint32_t flags, devbuf_format *out,
                        devbuf_error *err) {
  start_if_custom(fmt, len, flags);
  return devbuf__format_parse(fmt, len, flags, out, err);
}

int devbuf_format_parse_alloc(const char *fmt, size_t len, uint32_t flags, devbuf_format **out,
                              size_t *error_offset, devbuf_error *err) {
  start_if_custom(fmt, len, flags);
  return devbuf__format_parse_alloc(fmt, len, flags, out, error_offset, err);
}

int devbuf_format_itemsize(const char *fmt, size_t len, uint32_t flags, uint64_t *itemsize,
                           uint64_t *alignment, size_t *error_offset, devbuf_error *err) {
  start_if_custom(fmt, len, flags);
  return devbuf__format_itemsize(fmt, len, flags, itemsize, alignment, error_offset, err);
}
