/* Shared between the format engine (format_parse.c) and the dtype-namespace
 * registry (dtype_registry.c). Not installed. */
#ifndef DEVBUF_FORMAT_INTERNAL_H
#define DEVBUF_FORMAT_INTERNAL_H

/* What an unknown-dtype-id message adds: the three ways a namespace is
 * provided. */
#define DEVBUF_DTYPE_PROVIDE_HINT                                                      \
  "a namespace is provided by a plugin's dtype_namespaces (a plugin may provide only " \
  "those), devbuf_dtype_register() in C, or devbuf.register_dtype_namespace() in Python"

#include <stddef.h>
#include <stdint.h>

#include "devbuf/format.h"

/* How an id resolved. */
enum devbuf__resolve_result {
  DEVBUF__RESOLVED = 0,     /* desc filled */
  DEVBUF__UNKNOWN_ID = 1,   /* no namespace has the id */
  DEVBUF__REFUSED = 2       /* the namespace returned an error; *status holds it */
};

/* Resolve a non-reserved id (builtin "devbuf", registered, plugins) and
 * interpret payload[0..plen). Fills *desc (struct_size set here) on success.
 * On REFUSED, *status is the interpreter's code and err its message. */
int devbuf__dtype_resolve(const char *id, size_t idlen, const char *payload, size_t plen,
                          uint32_t flags, devbuf_dtype_desc *desc, int *status,
                          devbuf_error *err);

/* dtype_registry.c's halves of the namespace entry points: every namespace
 * but the reserved struct$ and buffer$, which dtype_reserved.c adds in front
 * (listing index 0 here is the builtin "devbuf"). */
int devbuf__dtype_ns_lookup(const char *id, size_t len, const devbuf_dtype_namespace **out,
                            const char **source, devbuf_error *err);
int devbuf__dtype_ns_interpret(const char *id, const char *payload, size_t len,
                               devbuf_dtype_desc *out, devbuf_error *err);
size_t devbuf__dtype_ns_count(void);
int devbuf__dtype_ns_get(size_t index, const devbuf_dtype_namespace **ns, const char **source,
                         devbuf_error *err);
/* One pass: copies into out[at..] while below capacity, and returns `at`
 * plus how many namespaces there are. */
size_t devbuf__dtype_ns_list(devbuf_dtype_namespace_info *out, size_t capacity, size_t at);
/* Copy one namespace into *out (strings cut at their size). */
void devbuf__dtype_info_fill(devbuf_dtype_namespace_info *out, const devbuf_dtype_namespace *ns,
                             const char *source);

/* True for the characters the draft allows in an id: printable ASCII
 * (space included) without ] ; $. A reader must accept them all, since the
 * draft promises that skipping an unknown id up to the next ']' is safe. */
static inline int devbuf__id_char(unsigned char c) {
  return c >= 0x20 && c < 0x7f && c != ']' && c != ';' && c != '$';
}

/* The stricter rule devbuf holds its own ids to (registration, and the
 * DEVBUF_FORMAT_LINT_IDS check): no space and no '[' either, since neither
 * fits the importable package names the draft asks ids to be. */
static inline int devbuf__id_char_strict(unsigned char c) {
  return devbuf__id_char(c) && c != ' ' && c != '[';
}

#endif /* DEVBUF_FORMAT_INTERNAL_H */
