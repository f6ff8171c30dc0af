/* What the registry offers the core. Not installed.
 *
 * registry/ is libdevbuf's bottom floor: the device-identifier table, the
 * dtype-namespace registry and the format-string engine, pure data
 * structures that call only the C library. They never start the runtime,
 * load a plugin or read the core's records (the two used to call each
 * other). The direction is one way:
 *
 *   - the core tells the registry what its plugins provide: it interns and
 *     claims their identifiers at load, adds their dtype namespaces once
 *     they are published, and takes both back at unregister and at exit;
 *   - the public entry points whose answer depends on the plugins
 *     (devbuf_identifier_lookup, devbuf_dtype_lookup, devbuf_format_parse,
 *     ...) are the core's, in core/src/registry_entry.c: lazy initialisation
 *     happens there, at the core's door, and they then call the devbuf__
 *     functions below.
 *
 * tests/registry builds test_registry_alone from registry's objects and the
 * C library only, so an upward call fails the link (and registry_no_core
 * lists registry's undefined symbols with nm). */
#ifndef DEVBUF_REGISTRY_H
#define DEVBUF_REGISTRY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "devbuf/dtype.h"
#include "devbuf/error.h"
#include "devbuf/format.h"

/* ---- identifiers.c: interned device identifiers --------------------------
 * Identifiers are interned once (never freed, never moved) and compared by
 * pointer afterwards. Writers (intern, claim, release) are serialised by the
 * caller (the core holds its runtime lock); readers are lock-free over an
 * append-only array. `owner` is the caller's number for whoever claimed an
 * identifier (the core uses the plugin index). */
const char *devbuf__intern(const char *s); /* NULL when full or out of memory */
int devbuf__ident_claim(const char *interned, size_t owner, size_t *current_owner);
void devbuf__ident_release_owner(size_t owner);
int devbuf__ident_find(const char *identifier, const char **interned, size_t *owner);
size_t devbuf__ident_count(void); /* claimed identifiers only */
const char *devbuf__ident_get(size_t index, size_t *owner);  /* NULL past the end */

/* ---- dtype_registry.c: namespaces that plugins provide ---------------------
 * A provider is one plugin's NULL-terminated dtype_namespaces array. The
 * record is the caller's and must live, unmoved, until exit (the core embeds
 * it in its plugin record, which is never freed once published): adding
 * cannot fail, and a lock-free reader may still be walking a record that was
 * removed. Providers are listed and searched in the order they were added. */
typedef struct devbuf__dtype_provider {
  struct devbuf__dtype_provider *_Atomic next;
  const char *name;                             /* the plugin's, for listings */
  const devbuf_dtype_namespace *const *namespaces;
  size_t owner;
  atomic_int removed;
} devbuf__dtype_provider;

void devbuf__dtype_provider_add(devbuf__dtype_provider *p, size_t owner, const char *name,
                                const devbuf_dtype_namespace *const *namespaces);
void devbuf__dtype_provider_remove(size_t owner);

/* ---- the registry's halves of public entry points --------------------------
 * Same contracts as their public names in devbuf/format.h, minus starting
 * the runtime: they see the providers added so far. */
int devbuf__dtype_register(const devbuf_dtype_namespace *ns, devbuf_error *err);
int devbuf__dtype_lookup(const char *id, size_t len, const devbuf_dtype_namespace **out,
                         const char **source, devbuf_error *err);
int devbuf__dtype_interpret(const char *id, const char *payload, size_t len,
                            devbuf_dtype_desc *out, devbuf_error *err);
size_t devbuf__dtype_namespace_count(void);
int devbuf__dtype_namespace_get(size_t index, const devbuf_dtype_namespace **ns,
                                const char **source, devbuf_error *err);
size_t devbuf__dtype_namespace_list(devbuf_dtype_namespace_info *out, size_t capacity);
int devbuf__format_parse(const char *fmt, size_t len, uint32_t flags, devbuf_format *out,
                         devbuf_error *err);
int devbuf__format_parse_alloc(const char *fmt, size_t len, uint32_t flags, devbuf_format **out,
                               size_t *error_offset, devbuf_error *err);
int devbuf__format_itemsize(const char *fmt, size_t len, uint32_t flags, uint64_t *itemsize,
                            uint64_t *alignment, size_t *error_offset, devbuf_error *err);

#endif /* DEVBUF_REGISTRY_H */
