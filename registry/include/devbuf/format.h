/* SPDX-License-Identifier: BSD-3-Clause */
/* devbuf/format.h: the buffer-protocol format-string engine and the
 * dtype-namespace registry.
 *
 * The engine parses PEP 3118 format strings (everything CPython's struct
 * module accepts, plus `?` `g` `Z` `w` `u` `O` `&` `t` `T{}` `X{}` `:name:`
 * `(shape)` and the `@ = < > ! ^` byte-order/size/alignment state) and the
 * custom-dtype extension of the buffer-protocol draft (`[id$payload;alt$payload]`,
 * reserved `struct$` and `buffer$`). It computes item size, alignment and a
 * tree of fields. docs/format-strings.md is the user guide and records every
 * decision taken where the specifications are silent.
 *
 * Modes (flags & DEVBUF_FORMAT_MODE_MASK)
 *   DEVBUF_FORMAT_DEFAULT  full PEP 3118 + custom dtypes, C-struct layout:
 *                          under '@' every struct (the top level included)
 *                          is padded at its end to its alignment; a byte-order
 *                          character inside T{} stays inside it.
 *   DEVBUF_FORMAT_STRUCT   exactly the grammar and sizes of CPython 3.11's
 *                          struct module, plus the complex codes of 3.14
 *                          (F, D) and 3.15 (Zf, Zd): itemsize ==
 *                          struct.calcsize(fmt),
 *                          an error wherever struct raises (no trailing
 *                          padding, prefix only at the start, no T{} or [...]).
 *                          `alignment` is then what an array of items at
 *                          stride itemsize keeps: the largest power of two
 *                          dividing itemsize, at most the largest member's.
 *   DEVBUF_FORMAT_NUMPY    the layout rules of NumPy's _dtype_from_pep3118:
 *                          byte order leaks out of T{}, the final padding
 *                          depends on the byte-order state at the end of each
 *                          struct, NumPy's set of codes, no whitespace.
 *
 * Threading: every function is thread-safe. A devbuf_format is owned by one
 * caller; reading a finished one from several threads is fine.
 *
 * Errors: functions return DEVBUF_OK or a devbuf_status code and fill the
 * caller's devbuf_error (may be NULL). A malformed format gives
 * DEVBUF_EFORMAT; an unknown custom dtype id gives DEVBUF_ENOTFOUND, with a
 * message naming every alternative tried and, when known, the package that
 * defines each id. Messages read "format: byte N: what was wrong". The byte
 * offset is also returned as a number (devbuf_format.error_offset, or the
 * error_offset argument of devbuf_format_itemsize) so that
 * devbuf_format_caret can point at it. */
#ifndef DEVBUF_FORMAT_H
#define DEVBUF_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "devbuf/dtype.h"
#include "devbuf/error.h"
#include "devbuf/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parse flags -------------------------------------------------------- */
#define DEVBUF_FORMAT_DEFAULT 0x0u
#define DEVBUF_FORMAT_STRUCT 0x1u
#define DEVBUF_FORMAT_NUMPY 0x2u
#define DEVBUF_FORMAT_MODE_MASK 0x3u
/* Refuse '[' (plain PEP 3118 only; this is how buffer$ payloads are read). */
#define DEVBUF_FORMAT_NO_CUSTOM 0x10u
/* An unknown custom dtype is not an error: its field gets itemsize 0,
 * custom->chosen == -1, and the result's itemsize and alignment are 0 with
 * DEVBUF_FORMAT_HAS_UNKNOWN set. For tools that only display formats. */
#define DEVBUF_FORMAT_ALLOW_UNKNOWN 0x20u
/* Do not ask loaded plugins for dtype namespaces (registered ones only). */
#define DEVBUF_FORMAT_NO_PLUGINS 0x40u
/* Lint: refuse a space or '[' in a custom dtype id, naming the character.
 * The draft allows both (and the default parse does), but no importable
 * package name has them, so they are most likely a typo. */
#define DEVBUF_FORMAT_LINT_IDS 0x80u

/* ---- devbuf_format.info bits ------------------------------------------- */
#define DEVBUF_FORMAT_HAS_CUSTOM 0x1u    /* a [...] item appears */
#define DEVBUF_FORMAT_HAS_UNKNOWN 0x2u   /* ...and one was not understood */
#define DEVBUF_FORMAT_HAS_POINTERS 0x4u  /* P, O, & or X appear */
#define DEVBUF_FORMAT_NON_NATIVE 0x8u    /* some item is not in native byte order */

/* ---- fields ------------------------------------------------------------- */
enum devbuf_field_kind {
  DEVBUF_FIELD_SCALAR = 0,   /* a struct/PEP 3118 code: b h i q f d s w ... */
  DEVBUF_FIELD_PADDING = 1,  /* x */
  DEVBUF_FIELD_STRUCT = 2,   /* T{...}: members in `children` */
  DEVBUF_FIELD_POINTER = 3,  /* &item: the pointee in `pointee` */
  DEVBUF_FIELD_FUNCTION = 4, /* X{args->ret}: args in `children`, ret in `pointee` */
  DEVBUF_FIELD_CUSTOM = 5,   /* [id$payload;...] or Z[...]: see `custom` */
  DEVBUF_FIELD_BITS = 6      /* Nt: N bits, packed with neighbouring t fields */
};

/* One alternative of a custom dtype, in the order written. */
typedef struct devbuf_format_alt {
  const char *id;       /* NUL-terminated copy, e.g. "numpy" */
  const char *payload;  /* NUL-terminated copy, may be "" */
  uint32_t offset;      /* byte offset of the id in the format string */
  int32_t state;        /* enum devbuf_format_alt_state */
  int32_t status;       /* the interpreter's status when it was tried, else 0 */
  uint32_t reserved;
} devbuf_format_alt;

enum devbuf_format_alt_state {
  DEVBUF_ALT_NOT_TRIED = 0,   /* an earlier alternative was understood */
  DEVBUF_ALT_CHOSEN = 1,      /* this one gave the layout */
  DEVBUF_ALT_UNKNOWN_ID = 2,  /* no namespace has this id */
  DEVBUF_ALT_REFUSED = 3      /* the namespace did not understand the payload */
};

typedef struct devbuf_format_field devbuf_format_field;

typedef struct devbuf_format_custom {
  uint32_t nalts;
  int32_t chosen;                  /* index into alts, -1 if none (ALLOW_UNKNOWN) */
  const devbuf_format_alt *alts;   /* nalts entries, written order */
  int is_complex;                  /* Z[...]: two of desc per element */
  uint32_t reserved;
  /* The chosen interpretation of ONE element (before the Z doubling). For
   * struct$ and buffer$, kind is DEVBUF_KIND_STRUCT and the parsed payload's
   * fields hang under the owning field's `children`. */
  devbuf_dtype_desc desc;
} devbuf_format_custom;

struct devbuf_format_field {
  const char *name;          /* NUL-terminated, or NULL when unnamed */
  uint64_t offset;           /* bytes from the start of the enclosing struct
                              * (the item for top-level fields) */
  uint64_t size;             /* bytes the field occupies: count * shape * elem_size
                              * (BITS: bytes its bits touch) */
  uint64_t elem_size;        /* bytes of one element (BITS: 0) */
  uint64_t count;            /* the number written before the code, 1 if none.
                              * s p x: the length in bytes; t: bits */
  uint32_t alignment;        /* alignment applied to this field (1 if unaligned mode) */
  uint16_t kind;             /* enum devbuf_field_kind */
  uint8_t dtype_kind;        /* enum devbuf_dtype_kind of the elements */
  char byteorder;            /* state in force: '@' '^' '=' '<' '>' ('!' reads as '>') */
  char code[4];              /* "i", "Zd", "s", "T", "&", "X", "[", "Z[" ... NUL-terminated */
  uint8_t big_endian;        /* 1 when its multi-byte values are big-endian */
  uint8_t bit_offset;        /* BITS: first bit within the byte at `offset` (LSB = 0) */
  uint16_t ndim;             /* number of (shape) dimensions, 0 if none */
  const uint64_t *shape;     /* ndim entries, or NULL */
  const devbuf_format_field *children; /* STRUCT / FUNCTION / struct$ / buffer$ members */
  const devbuf_format_field *pointee;  /* POINTER: target; FUNCTION: return (or NULL) */
  const devbuf_format_field *next;     /* next sibling, or NULL */
  const devbuf_format_field *parent;   /* enclosing field, NULL at the top level */
  const devbuf_format_custom *custom;  /* CUSTOM only */
  uint32_t src_offset;       /* byte offset where the field starts in the format */
  uint32_t nchildren;
};

/* ---- the parse result ---------------------------------------------------
 *
 * Caller-allocated (normally on the stack) with an inline arena, so parsing
 * ordinary formats never calls malloc. Bigger formats spill into heap blocks;
 * ALWAYS call devbuf_format_release() when done, success or failure (cheap
 * when nothing spilled). Every pointer reachable from a devbuf_format (field,
 * name, shape, custom, alt, id, payload) points into the result itself and
 * lives until devbuf_format_release(); nothing points into the caller's
 * format string. The struct is not ABI-stable before devbuf 1.0: set
 * struct_size = sizeof(devbuf_format) (DEVBUF_FORMAT_INIT does it); another
 * size is refused with DEVBUF_EABI. Do not copy a devbuf_format (its
 * pointers point into itself). */
#define DEVBUF_FORMAT_ARENA_BYTES 2048

typedef struct devbuf_format {
  uint32_t struct_size;      /* in: sizeof(devbuf_format) */
  uint32_t flags;            /* the parse flags used */
  uint64_t itemsize;         /* bytes per item */
  uint64_t alignment;        /* alignment of the item (1 if no native alignment) */
  const devbuf_format_field *fields; /* first top-level field (linked by next) */
  uint32_t nfields;          /* top-level fields */
  uint32_t info;             /* DEVBUF_FORMAT_HAS_* */
  uint64_t error_offset;     /* after a failure: byte offset of the culprit */
  char end_byteorder;        /* byte-order state after the last character */
  char reserved_[7];
  /* private */
  void *heap_;
  size_t used_;
  union {
    max_align_t align_;
    unsigned char bytes[DEVBUF_FORMAT_ARENA_BYTES];
  } arena_;
} devbuf_format;

/* Zeroes the whole struct (a ~2 KiB memset); in a hot loop set struct_size
 * alone: nothing else needs initialising. */
#define DEVBUF_FORMAT_INIT {.struct_size = sizeof(devbuf_format)}

/* Parse `len` bytes of `fmt` (need not be NUL-terminated; a NUL byte inside
 * is an error). On failure *out holds error_offset and nothing to use, but
 * must still be released. */
DEVBUF_API int devbuf_format_parse(const char *fmt, size_t len, uint32_t flags,
                                   devbuf_format *out, devbuf_error *err);
/* Free what `f` spilled onto the heap; `f` may then be reused. NULL is fine. */
DEVBUF_API void devbuf_format_release(devbuf_format *f);

/* Heap-allocated variant for FFI callers (ctypes, cffi): *out is owned by the
 * caller and freed with devbuf_format_free. On failure *out is NULL and
 * *error_offset (if non-NULL) receives the byte offset. */
DEVBUF_API int devbuf_format_parse_alloc(const char *fmt, size_t len, uint32_t flags,
                                         devbuf_format **out, size_t *error_offset,
                                         devbuf_error *err);
DEVBUF_API void devbuf_format_free(devbuf_format *f);

/* Size and alignment only: the same grammar, checks and custom-dtype
 * resolution as devbuf_format_parse (it accepts exactly the same strings),
 * without building a tree. The fast path. Any out pointer may be NULL. */
DEVBUF_API int devbuf_format_itemsize(const char *fmt, size_t len, uint32_t flags,
                                      uint64_t *itemsize, uint64_t *alignment,
                                      size_t *error_offset, devbuf_error *err);

/* ---- printing -------------------------------------------------------------
 * The canonical spelling: no whitespace, '!' written '>', a byte-order
 * character only where the state changes, counts of 1 omitted, custom
 * alternatives verbatim and in their order. Parsing it with the same flags
 * gives the same layout, and printing that again gives the same string.
 * Writes at most `capacity` bytes including the NUL (truncating) and returns
 * the length the full string needs (excluding the NUL), as snprintf does. */
DEVBUF_API size_t devbuf_format_print(const devbuf_format *f, char *buf, size_t capacity);

/* Render `fmt` on one line and a '^' under byte `offset` on the next into
 * `buf` (NUL-terminated, truncating), for error reports:
 *     T{i:a:y}
 *          ^
 * Long strings are cut to a window around the offset with "..." marks;
 * bytes that are not printable ASCII show as '?'. Returns the length the full
 * rendering needs (excluding the NUL). */
DEVBUF_API size_t devbuf_format_caret(const char *fmt, size_t len, size_t offset, char *buf,
                                      size_t capacity);

/* ---- the flattened item list ---------------------------------------------
 * The leaves in memory order, as struct.unpack would walk them: structs are
 * entered and struct arrays expanded element by element; a scalar field with
 * a count or shape stays one item (field->count * shape elements, contiguous).
 * Padding is included (kind DEVBUF_FIELD_PADDING) so that gaps are explicit. */
typedef struct devbuf_format_item {
  const devbuf_format_field *field; /* the leaf (points into the devbuf_format) */
  uint64_t offset;                  /* absolute byte offset within one item */
} devbuf_format_item;

/* Fill up to `capacity` items and set *count to how many there are in all
 * (call with capacity 0 to size a buffer). Returns DEVBUF_OK, or
 * DEVBUF_EINVAL for a NULL f/count, or DEVBUF_ENOMEM when the count does not
 * fit in size_t. */
DEVBUF_API int devbuf_format_flatten(const devbuf_format *f, devbuf_format_item *items,
                                     size_t capacity, size_t *count, devbuf_error *err);

/* ---- the dtype-namespace registry -------------------------------------------
 * Lookup order for an id: the reserved `struct` and `buffer`; devbuf's own
 * `devbuf` namespace (built in, always present); namespaces registered with
 * devbuf_dtype_register (newest first); then the dtype_namespaces of loaded
 * plugins, in load order. The first namespace with the id answers; if it
 * returns DEVBUF_ENOTFOUND for a payload, the engine moves on to the next
 * *alternative* of the custom dtype, not to another namespace.
 * A plugin's namespaces stop resolving when the plugin is unregistered; a
 * call already running in one is not waited for (plugins are never
 * dlclosed and their descriptors are static, so it finishes safely as long
 * as the interpreter does not use state that the plugin's shutdown frees). */

/* Longest dtype id accepted, in bytes. */
#define DEVBUF_DTYPE_ID_MAX 63

/* Register `ns` (copied by reference: *ns, its strings and ctx must stay
 * valid until devbuf_dtype_unregister returns). Refuses a malformed id
 * (DEVBUF_EINVAL), the reserved ids "struct", "buffer", "devbuf", and an id
 * already registered or offered by a loaded plugin (DEVBUF_EEXIST). */
DEVBUF_API int devbuf_dtype_register(const devbuf_dtype_namespace *ns, devbuf_error *err);
/* Stop resolving `id`. Waits for interpret calls already running in it to
 * return, so the caller may free ns/ctx afterwards: do not call it while
 * holding a lock that the interpreter takes (a binding must release the GIL
 * around it if its interpreter calls into Python). DEVBUF_ENOTFOUND if `id`
 * was not registered (plugin namespaces go away with their plugin). The
 * registry keeps a small record per registration for the life of the process. */
DEVBUF_API int devbuf_dtype_unregister(const char *id, devbuf_error *err);
/* Find the namespace for id[0..len) (len may be (size_t)-1 for a NUL-terminated
 * id). *out points at the registrant's descriptor (see register for its
 * lifetime); *source (may be NULL) receives "builtin", "registered" or the
 * plugin's name (static or runtime-owned storage). For "struct" and "buffer"
 * *out is a devbuf-owned static descriptor whose interpret computes the
 * payload's layout. DEVBUF_ENOTFOUND with a helpful message otherwise. */
DEVBUF_API int devbuf_dtype_lookup(const char *id, size_t len, const devbuf_dtype_namespace **out,
                                   const char **source, devbuf_error *err);
/* Interpret one payload with the namespace of `id` (NUL-terminated), exactly
 * as the engine does for [id$payload]. out->struct_size is set here. */
DEVBUF_API int devbuf_dtype_interpret(const char *id, const char *payload, size_t len,
                                      devbuf_dtype_desc *out, devbuf_error *err);
/* A listing for tools, by index: the builtin, reserved, registered and plugin
 * namespaces. devbuf_dtype_namespace_get fills *ns and *source for index
 * < count; DEVBUF_ENOTFOUND past the end. *ns is the registrant's descriptor
 * (see devbuf_dtype_register for its lifetime). The set can change between
 * calls, and a namespace removed meanwhile shifts the ones after it, so that
 * one registered the whole time can be missed. While other threads may
 * register and unregister, use devbuf_dtype_namespace_list instead: it
 * copies, and misses none. */
DEVBUF_API size_t devbuf_dtype_namespace_count(void);
DEVBUF_API int devbuf_dtype_namespace_get(size_t index, const devbuf_dtype_namespace **ns,
                                          const char **source, devbuf_error *err);
/* One namespace as devbuf_dtype_namespace_list copies it: NUL-terminated
 * strings, cut at their size (provider and description are empty where the
 * registrant gave NULL, and flags says which). Its size is part of the ABI: a later version adds
 * a function rather than fields. */
#define DEVBUF_DTYPE_INFO_HAS_PROVIDER 1u    /* the descriptor's provider is not NULL */
#define DEVBUF_DTYPE_INFO_HAS_DESCRIPTION 2u /* nor its description */
typedef struct devbuf_dtype_namespace_info {
  uint32_t flags; /* DEVBUF_DTYPE_INFO_* */
  char id[DEVBUF_DTYPE_ID_MAX + 1];
  char provider[128];
  char description[512];
  char source[64];  /* "reserved", "builtin", "registered" or the plugin's name */
} devbuf_dtype_namespace_info;
/* The same listing in one pass, copied: fills out[i] for i below both
 * `capacity` and the result, and returns how many namespaces there are; if
 * that is more than capacity, call again with a larger array. Every
 * namespace registered during the whole call is listed, once; a namespace
 * is copied while its unregister waits (as for an interpret call), so the
 * copy never reads a descriptor its registrant has freed. out may be NULL
 * (then capacity is taken as 0). Owns nothing. */
DEVBUF_API size_t devbuf_dtype_namespace_list(devbuf_dtype_namespace_info *out, size_t capacity);
/* Which package defines a well-known foreign id ("numpy" -> "numpy",
 * "ml_dtypes" -> "ml_dtypes", "arrow" -> "pyarrow", ...; a dotted id such as
 * "numpy.dtypes" matches its first component). NULL if unknown. Static. */
DEVBUF_API const char *devbuf_dtype_known_provider(const char *id, size_t len);

/* ---- DLPack ------------------------------------------------------------------
 * The format of one element of DLPack dtype (code, bits, lanes): a plain code
 * where struct has one ('f', 'q', '?', 'Zd', ...), else a devbuf custom dtype
 * ("[devbuf$bfloat16]"). Sub-byte DLPack types are packed, so (17, 4, 1) gives
 * "[devbuf$float4_e2m1fn_x2]", one item per TWO elements. lanes > 1 gives a
 * count prefix ("4f"). Writes like devbuf_format_print; returns DEVBUF_OK and
 * the needed length in *needed (may be NULL), or DEVBUF_ENOTFOUND. */
DEVBUF_API int devbuf_format_from_dlpack(uint8_t code, uint8_t bits, uint16_t lanes, char *buf,
                                         size_t capacity, size_t *needed, devbuf_error *err);
/* The DLPack dtype of a parsed single-field format with native byte order
 * ("f", "<f" on little-endian hosts, "[devbuf$bfloat16]", "Ze"...). Sets
 * *code, *bits, *lanes (lanes > 1 for a count or shape) or returns
 * DEVBUF_ENOTSUP naming why (a struct, padding, no DLPack code, ...). */
DEVBUF_API int devbuf_format_to_dlpack(const devbuf_format *f, uint8_t *code, uint8_t *bits,
                                       uint16_t *lanes, devbuf_error *err);

#ifdef __cplusplus
}
#endif

#endif /* DEVBUF_FORMAT_H */
