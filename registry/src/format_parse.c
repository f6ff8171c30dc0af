/* The format-string engine: PEP 3118 + the custom-dtype extension.
 *
 * One recursive-descent parser serves every entry point. With p->out set it
 * builds the field tree in the result's arena; without it (the itemsize fast
 * path) fields live on the stack and only sizes flow back, so both accept
 * exactly the same strings. Offsets in errors are always relative to the
 * caller's string: reserved payloads (struct$, buffer$) are parsed in place
 * by narrowing p->end instead of copying. */
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/format.h"
#include "format_internal.h"
#include "registry.h"

#define MAX_DEPTH 64
#define MAX_NDIM 64
#define MAX_SIZE ((uint64_t)INT64_MAX) /* Py_ssize_t */

/* ---- the code table ------------------------------------------------------ */
#define W_STRUCT 0x01      /* CPython struct accepts it */
#define W_NATIVE_ONLY 0x02 /* struct: only without a standard-size prefix */
#define W_NUMPY 0x04       /* in NumPy's native map */
#define W_NUMPY_STD 0x08   /* in NumPy's standard map */
#define W_NO_STD 0x10      /* no standard size at all (default mode too) */

typedef struct code_info {
  uint8_t valid;
  uint8_t nsize, nalign, ssize; /* native size/alignment, standard size */
  uint8_t dkind;                /* enum devbuf_dtype_kind */
  uint8_t fkind;                /* enum devbuf_field_kind */
  uint8_t where;                /* W_* */
} code_info;

#define NAT(T) (uint8_t)sizeof(T), (uint8_t)_Alignof(T)
static const code_info CODES[128] = {
    ['x'] = {1, 1, 1, 1, DEVBUF_KIND_OPAQUE, DEVBUF_FIELD_PADDING, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['c'] = {1, 1, 1, 1, DEVBUF_KIND_STRING, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['b'] = {1, NAT(signed char), 1, DEVBUF_KIND_INT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['B'] = {1, NAT(unsigned char), 1, DEVBUF_KIND_UINT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['?'] = {1, NAT(_Bool), 1, DEVBUF_KIND_BOOL, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['h'] = {1, NAT(short), 2, DEVBUF_KIND_INT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['H'] = {1, NAT(unsigned short), 2, DEVBUF_KIND_UINT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['i'] = {1, NAT(int), 4, DEVBUF_KIND_INT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['I'] = {1, NAT(unsigned int), 4, DEVBUF_KIND_UINT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['l'] = {1, NAT(long), 4, DEVBUF_KIND_INT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['L'] = {1, NAT(unsigned long), 4, DEVBUF_KIND_UINT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['q'] = {1, NAT(long long), 8, DEVBUF_KIND_INT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['Q'] = {1, NAT(unsigned long long), 8, DEVBUF_KIND_UINT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['n'] = {1, NAT(ptrdiff_t), 0, DEVBUF_KIND_INT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NATIVE_ONLY | W_NO_STD},
    ['N'] = {1, NAT(size_t), 0, DEVBUF_KIND_UINT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NATIVE_ONLY | W_NO_STD},
    ['e'] = {1, 2, 2, 2, DEVBUF_KIND_FLOAT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['f'] = {1, NAT(float), 4, DEVBUF_KIND_FLOAT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['d'] = {1, NAT(double), 8, DEVBUF_KIND_FLOAT, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['g'] = {1, NAT(long double), 0, DEVBUF_KIND_FLOAT, DEVBUF_FIELD_SCALAR, W_NUMPY | W_NO_STD},
    ['s'] = {1, 1, 1, 1, DEVBUF_KIND_STRING, DEVBUF_FIELD_SCALAR, W_STRUCT | W_NUMPY | W_NUMPY_STD},
    ['p'] = {1, 1, 1, 1, DEVBUF_KIND_STRING, DEVBUF_FIELD_SCALAR, W_STRUCT},
    ['P'] = {1, NAT(void *), (uint8_t)sizeof(void *), DEVBUF_KIND_POINTER, DEVBUF_FIELD_SCALAR,
             W_STRUCT | W_NATIVE_ONLY},
    ['O'] = {1, NAT(void *), (uint8_t)sizeof(void *), DEVBUF_KIND_POINTER, DEVBUF_FIELD_SCALAR,
             W_NUMPY | W_NUMPY_STD},
    ['u'] = {1, 2, 2, 2, DEVBUF_KIND_STRING, DEVBUF_FIELD_SCALAR, 0},
    ['w'] = {1, 4, 4, 4, DEVBUF_KIND_STRING, DEVBUF_FIELD_SCALAR, W_NUMPY | W_NUMPY_STD},
    /* CPython 3.14's struct codes for float/double complex (soft-deprecated
     * in 3.15 for 'Zf'/'Zd'). NumPy's PEP 3118 parser does not know them. */
    ['F'] = {1, 2 * sizeof(float), _Alignof(float), 8, DEVBUF_KIND_COMPLEX, DEVBUF_FIELD_SCALAR,
             W_STRUCT},
    ['D'] = {1, 2 * sizeof(double), _Alignof(double), 16, DEVBUF_KIND_COMPLEX,
             DEVBUF_FIELD_SCALAR, W_STRUCT},
};

/* Which plain codes each [mode][native sizes?] takes without further checks
 * (the rest go through parse_type, which also words the errors). */
static const uint8_t PLAIN_REQ[3][2] = {{0, 0}, {W_STRUCT, W_STRUCT}, {W_NUMPY_STD, W_NUMPY}};
static const uint8_t PLAIN_FORBID[3][2] = {{W_NO_STD, 0}, {W_NATIVE_ONLY, 0}, {0, 0}};

static bool host_big_endian(void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 0;
}

/* ---- parser state -------------------------------------------------------- */
typedef struct name_ent {
  uint32_t level, off, len;
} name_ent;

typedef struct fp {
  const char *s;
  size_t end;   /* current limit (narrowed for reserved payloads) */
  size_t pos;
  unsigned mode;
  uint32_t flags;
  devbuf_format *out; /* NULL: size only */
  devbuf_error *err;
  size_t err_off;
  int depth;
  uint32_t info;
  char np_bo;          /* NumPy mode: the one, leaking, byte-order state */
  uint32_t level_seq;
  name_ent names_local[32];
  name_ent *names;
  size_t nnames, names_cap;
  bool oom;
  const uint32_t *omap; /* NumPy mode, whitespace stripped: offset -> caller's offset */
  size_t olen;          /* the caller's length, when omap is set */
  size_t slen;          /* the stripped copy's length (p->end narrows in payloads) */
} fp;

typedef struct lvl {
  uint64_t off;
  uint64_t align;
  char bo;
  uint32_t id;
  bool bitrun;
  uint64_t bit_base, bit_pos;
  devbuf_format_field *parent;
  devbuf_format_field *first, *last;
  uint32_t n;
} lvl;

/* An offset in the caller's string (NumPy mode parses a stripped copy). */
static size_t orig_off(const fp *p, size_t off) {
  if (p->omap == NULL) return off;
  return off < p->slen ? p->omap[off] : p->olen;
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 4, 5)))
#endif
static int fail(fp *p, size_t off, int code, const char *fmt, ...) {
  off = orig_off(p, off);
  p->err_off = off;
  if (p->err != NULL) {
    char tmp[DEVBUF_ERROR_MESSAGE_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    devbuf_error_set(p->err, code, "format: byte %zu: %s", off, tmp);
  }
  return code;
}

/* A printable rendering of the byte at `off` for messages. */
static const char *show(const fp *p, size_t off, char buf[8]) {
  if (off >= p->end) return "end of string";
  unsigned char c = (unsigned char)p->s[off];
  if (c >= 0x20 && c < 0x7f) snprintf(buf, 8, "'%c'", c);
  else snprintf(buf, 8, "0x%02x", c);
  return buf;
}

/* ---- arena --------------------------------------------------------------- */
typedef struct heap_block {
  struct heap_block *next;
  size_t cap, used;
  max_align_t data[];
} heap_block;

static void *arena_alloc(fp *p, size_t size) {
  devbuf_format *o = p->out;
  size = (size + 15u) & ~(size_t)15u;
  if (o->used_ + size <= sizeof o->arena_.bytes) {
    void *r = o->arena_.bytes + o->used_;
    o->used_ += size;
    return r;
  }
  heap_block *b = (heap_block *)o->heap_;
  if (b == NULL || b->cap - b->used < size) {
    size_t cap = size > 16384 ? size : 16384;
    heap_block *nb = (heap_block *)malloc(sizeof *nb + cap);
    if (nb == NULL) {
      p->oom = true;
      return NULL;
    }
    nb->next = b;
    nb->cap = cap;
    nb->used = 0;
    o->heap_ = nb;
    b = nb;
  }
  void *r = (unsigned char *)b->data + b->used;
  b->used += size;
  return r;
}

static int oom(fp *p, size_t off) {
  return fail(p, off, DEVBUF_ENOMEM, "out of memory building the field tree");
}

static char *arena_str(fp *p, const char *src, size_t len) {
  char *d = (char *)arena_alloc(p, len + 1);
  if (d != NULL) {
    memcpy(d, src, len);
    d[len] = '\0';
  }
  return d;
}

static devbuf_format_field *new_field(fp *p) {
  devbuf_format_field *f = (devbuf_format_field *)arena_alloc(p, sizeof *f);
  if (f != NULL) memset(f, 0, sizeof *f);
  return f;
}

/* ---- small helpers ------------------------------------------------------- */
static inline bool is_ws(char c) {
  /* ' ' \t \n \v \f \r, as CPython's Py_ISSPACE */
  return c == ' ' || (c >= '\t' && c <= '\r');
}
static inline bool is_bo(char c) {
  return c == '@' || c == '=' || c == '<' || c == '>' || c == '!' || c == '^';
}
static inline bool is_digit(char c) { return c >= '0' && c <= '9'; }
static inline char norm_bo(char c) { return c == '!' ? '>' : c; }
static inline bool native_sizes(char bo) { return bo == '@' || bo == '^'; }

static void skip_ws(fp *p) {
  if (p->mode == DEVBUF_FORMAT_NUMPY) return;
  while (p->pos < p->end && is_ws(p->s[p->pos])) p->pos++;
}

static int parse_uint(fp *p, uint64_t *v) {
  size_t start = p->pos;
  uint64_t x = 0;
  while (p->pos < p->end && is_digit(p->s[p->pos])) {
    unsigned d = (unsigned)(p->s[p->pos] - '0');
    if (x > (MAX_SIZE - d) / 10) return fail(p, start, DEVBUF_EFORMAT, "number too large");
    x = x * 10 + d;
    p->pos++;
  }
  *v = x;
  return DEVBUF_OK;
}

/* Checked arithmetic without divisions (they dominated the per-item cost). */
static int mul_ck(fp *p, size_t off, uint64_t a, uint64_t b, uint64_t *r) {
  uint64_t x;
#if defined(__GNUC__) || defined(__clang__)
  if (__builtin_mul_overflow(a, b, &x) || x > MAX_SIZE)
#else
  x = a * b;
  if ((b != 0 && a > MAX_SIZE / b) || x > MAX_SIZE)
#endif
    return fail(p, off, DEVBUF_EFORMAT, "item size overflows");
  *r = x;
  return DEVBUF_OK;
}
static int add_ck(fp *p, size_t off, uint64_t a, uint64_t b, uint64_t *r) {
  if (a > MAX_SIZE - b) return fail(p, off, DEVBUF_EFORMAT, "item size overflows");
  *r = a + b;
  return DEVBUF_OK;
}
/* `align` is always a power of two. */
static int round_ck(fp *p, size_t off, uint64_t a, uint64_t align, uint64_t *r) {
  uint64_t pad = (0 - a) & (align - 1);
  if (pad == 0) {
    *r = a;
    return DEVBUF_OK;
  }
  return add_ck(p, off, a, pad, r);
}

/* Duplicate field names within one struct are refused (C and NumPy agree). */
static int check_name(fp *p, uint32_t level, size_t off, size_t len, size_t item_off) {
  for (size_t i = 0; i < p->nnames; i++) {
    const name_ent *e = &p->names[i];
    if (e->level == level && e->len == len && memcmp(p->s + e->off, p->s + off, len) == 0)
      return fail(p, off, DEVBUF_EFORMAT, "duplicate field name '%.*s'", (int)(len > 64 ? 64 : len),
                  p->s + off);
  }
  if (p->nnames == p->names_cap) {
    size_t cap = p->names_cap * 2;
    name_ent *nn = (name_ent *)malloc(cap * sizeof *nn);
    if (nn == NULL) return fail(p, item_off, DEVBUF_ENOMEM, "out of memory checking field names");
    memcpy(nn, p->names, p->nnames * sizeof *nn);
    if (p->names != p->names_local) free(p->names);
    p->names = nn;
    p->names_cap = cap;
  }
  p->names[p->nnames++] = (name_ent){level, (uint32_t)off, (uint32_t)len};
  return DEVBUF_OK;
}

/* ---- forward declarations ---------------------------------------------- */
static int parse_seq(fp *p, lvl *L, int term);
static int parse_type(fp *p, char bo, devbuf_format_field *f, uint64_t *esize, uint64_t *ealign);
static int finish_level(fp *p, lvl *L, bool top, uint64_t *size, uint64_t *align);

static void link_field(lvl *L, devbuf_format_field *f) {
  f->parent = L->parent;
  if (L->last != NULL) L->last->next = f;
  else L->first = f;
  L->last = f;
  L->n++;
}

/* (d1,d2,...) */
static int parse_shape(fp *p, devbuf_format_field *f, uint64_t *prod) {
  size_t open = p->pos;
  uint64_t dims[MAX_NDIM];
  unsigned nd = 0;
  uint64_t pr = 1;
  p->pos++;
  for (;;) {
    while (p->pos < p->end && is_ws(p->s[p->pos])) p->pos++;
    if (p->pos >= p->end || !is_digit(p->s[p->pos])) {
      char b[8];
      if (p->pos >= p->end) return fail(p, open, DEVBUF_EFORMAT, "unterminated shape: missing ')'");
      return fail(p, p->pos, DEVBUF_EFORMAT, "expected a dimension in the shape, found %s",
                  show(p, p->pos, b));
    }
    if (nd == MAX_NDIM)
      return fail(p, p->pos, DEVBUF_EFORMAT, "shape has more than %d dimensions", MAX_NDIM);
    size_t at = p->pos;
    int r = parse_uint(p, &dims[nd]);
    if (r) return r;
    if ((r = mul_ck(p, at, pr, dims[nd], &pr))) return r;
    nd++;
    while (p->pos < p->end && is_ws(p->s[p->pos])) p->pos++;
    if (p->pos < p->end && p->s[p->pos] == ',') {
      p->pos++;
      continue;
    }
    if (p->pos < p->end && p->s[p->pos] == ')') {
      p->pos++;
      break;
    }
    char b[8];
    if (p->pos >= p->end) return fail(p, open, DEVBUF_EFORMAT, "unterminated shape: missing ')'");
    return fail(p, p->pos, DEVBUF_EFORMAT, "expected ',' or ')' in the shape, found %s",
                show(p, p->pos, b));
  }
  *prod = pr;
  if (p->out != NULL) {
    uint64_t *sh = (uint64_t *)arena_alloc(p, nd * sizeof *sh);
    if (sh == NULL) return oom(p, open);
    memcpy(sh, dims, nd * sizeof *sh);
    f->shape = sh;
  }
  f->ndim = (uint16_t)nd;
  return DEVBUF_OK;
}

/* ---- custom dtypes --------------------------------------------------------- */

/* A reserved payload (struct$ or buffer$), parsed in place as its own format. */
static int parse_reserved(fp *p, size_t a, size_t b, bool is_struct, char bo,
                          devbuf_format_field *owner, devbuf_dtype_desc *desc) {
  size_t save_pos = p->pos, save_end = p->end;
  unsigned save_mode = p->mode;
  uint32_t save_flags = p->flags;
  char save_np = p->np_bo;
  lvl sub;
  memset(&sub, 0, sizeof sub);
  sub.bo = bo;
  sub.align = 1;
  sub.id = ++p->level_seq;
  sub.parent = p->out != NULL ? owner : NULL;
  p->pos = a;
  p->end = b;
  p->flags |= DEVBUF_FORMAT_NO_CUSTOM;
  if (is_struct) p->mode = DEVBUF_FORMAT_STRUCT;
  else if (p->mode == DEVBUF_FORMAT_STRUCT) p->mode = DEVBUF_FORMAT_DEFAULT;
  p->np_bo = bo;
  p->depth++;
  int r = DEVBUF_OK;
  uint64_t size = 0, align = 1;
  if (p->depth > MAX_DEPTH) {
    r = fail(p, a, DEVBUF_EFORMAT, "nested deeper than %d levels", MAX_DEPTH);
  } else {
    if (is_struct && p->pos < p->end && is_bo(p->s[p->pos]) && p->s[p->pos] != '^') {
      sub.bo = norm_bo(p->s[p->pos]);
      p->pos++;
    }
    r = parse_seq(p, &sub, 0);
    if (r == DEVBUF_OK) r = finish_level(p, &sub, true, &size, &align);
  }
  p->depth--;
  p->pos = save_pos;
  p->end = save_end;
  p->mode = save_mode;
  p->flags = save_flags;
  p->np_bo = save_np;
  if (r != DEVBUF_OK) return r;
  if (size > UINT32_MAX) return fail(p, a, DEVBUF_EFORMAT, "reserved payload larger than 4 GiB");
  if (owner != NULL && p->out != NULL) {
    owner->children = sub.first;
    owner->nchildren = sub.n;
  }
  memset(desc, 0, sizeof *desc);
  desc->struct_size = sizeof *desc;
  desc->kind = DEVBUF_KIND_STRUCT;
  desc->itemsize = (uint32_t)size;
  desc->alignment = (uint32_t)align;
  desc->bits = (uint32_t)(size * 8 > UINT32_MAX ? 0 : size * 8);
  desc->elements_per_item = 1;
  desc->dlpack_code = -1;
  size_t plen = b - a, cl = plen > 56 ? 56 : plen;
  memcpy(desc->canonical, is_struct ? "struct$" : "buffer$", 7);
  memcpy(desc->canonical + 7, p->s + a, cl);
  desc->canonical[7 + cl] = '\0';
  if (!is_struct && plen < sizeof desc->plain_format) {
    memcpy(desc->plain_format, p->s + a, plen);
    desc->plain_format[plen] = '\0';
  }
  return DEVBUF_OK;
}

/* Append to the combined "why no alternative worked" message. */
static void why_add(char *why, size_t cap, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void why_add(char *why, size_t cap, const char *fmt, ...) {
  size_t len = strlen(why);
  if (len + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why + len, cap - len, fmt, ap);
  va_end(ap);
}

/* Replace the "\x01<k+1>" markers of parse_custom by the words for an
 * unknown id, naming the package that defines it when we know one. */
static void expand_unknown(const fp *p, size_t open, char *why, size_t cap) {
  char out[DEVBUF_ERROR_MESSAGE_SIZE];
  size_t o = 0;
  int unknown = 0;
  for (const char *w = why; *w != '\0' && o + 1 < sizeof out; w++) {
    if (*w != '\x01') {
      out[o++] = *w;
      continue;
    }
    if (w[1] == '\0') break; /* a marker cut by truncation */
    unsigned k = (unsigned char)*++w - 1u;
    /* find alternative k's id */
    size_t q = open + 1;
    for (unsigned i = 0; i < k; i++) {
      while (p->s[q] != ';') q++;
      q++;
    }
    size_t ids = q;
    while (p->s[q] != '$') q++;
    int idl = (int)(q - ids > 64 ? 64 : q - ids);
    const char *prov = devbuf_dtype_known_provider(p->s + ids, q - ids);
    int n;
    if (prov != NULL)
      n = snprintf(out + o, sizeof out - o,
                   "'%.*s' is not registered (it is defined by the '%s' package; load a devbuf "
                   "plugin or register a namespace for it)",
                   idl, p->s + ids, prov);
    else
      n = snprintf(out + o, sizeof out - o, "'%.*s' is not a known dtype id", idl, p->s + ids);
    unknown |= prov == NULL;
    if (n < 0) break;
    o += (size_t)n;
    if (o >= sizeof out) o = sizeof out - 1;
  }
  /* Once, after every alternative: how a namespace comes to be known. */
  if (unknown && o + 1 < sizeof out) {
    int n = snprintf(out + o, sizeof out - o, " (%s)", DEVBUF_DTYPE_PROVIDE_HINT);
    if (n > 0) o += (size_t)n;
    if (o >= sizeof out) o = sizeof out - 1;
  }
  out[o] = '\0';
  snprintf(why, cap, "%s", out);
}

/* [id$payload;id$payload...] at p->pos. Validates every alternative's
 * characters first (the draft guarantees a reader may always skip to the
 * next ']'), then resolves them in order; the first one understood wins. */
static int parse_custom(fp *p, char bo, devbuf_format_field *f, bool is_complex, uint64_t *esize,
                        uint64_t *ealign) {
  const char *s = p->s;
  size_t open = p->pos;
  size_t q = open + 1;
  uint32_t nalts = 0;
  p->info |= DEVBUF_FORMAT_HAS_CUSTOM;
  for (;;) {
    size_t ids = q;
    while (q < p->end && devbuf__id_char((unsigned char)s[q])) q++;
    if (q >= p->end)
      return fail(p, open, DEVBUF_EFORMAT, "unterminated custom dtype: missing ']'");
    if (s[q] != '$') {
      char b[8];
      if (q == ids && s[q] == ']' && nalts == 0)
        return fail(p, q, DEVBUF_EFORMAT, "empty custom dtype '[]': expected id$payload");
      if (q == ids && (s[q] == ']' || s[q] == ';'))
        return fail(p, q, DEVBUF_EFORMAT, "empty alternative: expected id$payload");
      if (q == ids)
        return fail(p, q, DEVBUF_EFORMAT, "expected a dtype id, found %s", show(p, q, b));
      if (s[q] == ']' || s[q] == ';')
        return fail(p, q, DEVBUF_EFORMAT, "expected '$' after the dtype id '%.*s'",
                    (int)(q - ids > 64 ? 64 : q - ids), s + ids);
      return fail(p, q, DEVBUF_EFORMAT, "%s cannot appear in a dtype id (expected '$')",
                  show(p, q, b));
    }
    if (q == ids) return fail(p, q, DEVBUF_EFORMAT, "empty dtype id before '$'");
    if (p->flags & DEVBUF_FORMAT_LINT_IDS) {
      for (size_t j = ids; j < q; j++)
        if (!devbuf__id_char_strict((unsigned char)s[j]))
          return fail(p, j, DEVBUF_EFORMAT,
                      "lint: %s in the dtype id '%.*s' (allowed by the draft, but no "
                      "package name has one)",
                      s[j] == ' ' ? "a space" : "'['", (int)(q - ids > 64 ? 64 : q - ids),
                      s + ids);
    }
    if (q - ids > DEVBUF_DTYPE_ID_MAX)
      return fail(p, ids, DEVBUF_EFORMAT, "dtype id longer than %d bytes", DEVBUF_DTYPE_ID_MAX);
    q++;
    while (q < p->end) {
      unsigned char c = (unsigned char)s[q];
      if (c < 0x20 || c >= 0x7f || c == ']' || c == ';' || c == '$') break;
      q++;
    }
    if (q >= p->end)
      return fail(p, open, DEVBUF_EFORMAT, "unterminated custom dtype: missing ']'");
    if (s[q] == '$')
      return fail(p, q, DEVBUF_EFORMAT, "'$' cannot appear in a payload (it ends the id)");
    if (s[q] != ']' && s[q] != ';')
      return fail(p, q, DEVBUF_EFORMAT, "byte 0x%02x in a payload is not printable ASCII",
                  (unsigned char)s[q]);
    nalts++;
    if (s[q] == ']') break;
    q++;
  }
  size_t close = q;

  devbuf_format_custom *cu = NULL;
  devbuf_format_alt *alts = NULL;
  devbuf_dtype_desc local_desc;
  devbuf_dtype_desc *desc = &local_desc;
  if (p->out != NULL) {
    cu = (devbuf_format_custom *)arena_alloc(p, sizeof *cu);
    alts = (devbuf_format_alt *)arena_alloc(p, nalts * sizeof *alts);
    if (cu == NULL || alts == NULL) return oom(p, open);
    memset(cu, 0, sizeof *cu);
    cu->nalts = nalts;
    cu->alts = alts;
    cu->is_complex = is_complex;
    desc = &cu->desc;
  }
  int chosen = -1;
  char why[DEVBUF_ERROR_MESSAGE_SIZE];
  why[0] = '\0';
  int first_fmt_code = 0;
  size_t first_fmt_off = 0;
  char first_fmt_msg[DEVBUF_ERROR_MESSAGE_SIZE];
  first_fmt_msg[0] = '\0';
  bool all_reserved_fmt = true;
  q = open + 1;
  for (uint32_t k = 0; k < nalts; k++) {
    size_t ids = q;
    while (s[q] != '$') q++;
    size_t idl = q - ids;
    size_t pa = ++q;
    while (s[q] != ';' && s[q] != ']') q++;
    size_t pl = q - pa;
    q++;
    int state = DEVBUF_ALT_NOT_TRIED, status = 0;
    if (chosen < 0) {
      bool rs = idl == 6 && memcmp(s + ids, "struct", 6) == 0;
      bool rb = idl == 6 && memcmp(s + ids, "buffer", 6) == 0;
      if (rs || rb) {
        devbuf_error sub_err;
        devbuf_error *save_err = p->err;
        p->err = &sub_err;
        devbuf_error_clear(&sub_err);
        int r = parse_reserved(p, pa, pa + pl, rs, bo, f, desc);
        p->err = save_err;
        if (r == DEVBUF_OK) {
          state = DEVBUF_ALT_CHOSEN;
          chosen = (int)k;
        } else if (r == DEVBUF_ENOMEM) {
          if (p->err) *p->err = sub_err;
          return r;
        } else {
          state = DEVBUF_ALT_REFUSED;
          status = r;
          if (first_fmt_code == 0) {
            first_fmt_code = r;
            first_fmt_off = p->err_off;
            snprintf(first_fmt_msg, sizeof first_fmt_msg, "%s", sub_err.message);
          }
          if (p->err != NULL)
            why_add(why, sizeof why, "%s'%.*s' payload is not a valid %s format (%s)",
                  why[0] ? "; " : "", (int)idl, s + ids, rs ? "struct" : "buffer",
                  sub_err.message + (strncmp(sub_err.message, "format: ", 8) == 0 ? 8 : 0));
        }
      } else {
        all_reserved_fmt = false;
        devbuf_error sub_err;
        devbuf_error_clear(&sub_err);
        int st = 0;
        int res = devbuf__dtype_resolve(s + ids, idl, s + pa, pl, p->flags, desc, &st, &sub_err);
        if (res == DEVBUF__RESOLVED) {
          state = DEVBUF_ALT_CHOSEN;
          chosen = (int)k;
        } else if (res == DEVBUF__UNKNOWN_ID) {
          state = DEVBUF_ALT_UNKNOWN_ID;
          status = DEVBUF_ENOTFOUND;
          /* Worded only if no alternative works (the common case is a
           * preferred-but-unknown spelling before one we know): a marker
           * byte and the alternative's number stand in for the text. */
          if (p->err != NULL && k < 250) why_add(why, sizeof why, "%s\x01%c", why[0] ? "; " : "", (char)(k + 1));
        } else {
          state = DEVBUF_ALT_REFUSED;
          status = st;
          if (p->err != NULL)
            why_add(why, sizeof why, "%s'%.*s' did not understand payload '%.*s' (%s)",
                  why[0] ? "; " : "", (int)(idl > 64 ? 64 : idl), s + ids,
                  (int)(pl > 64 ? 64 : pl), s + pa, sub_err.message);
        }
      }
    }
    if (alts != NULL) {
      alts[k].id = arena_str(p, s + ids, idl);
      alts[k].payload = arena_str(p, s + pa, pl);
      if (alts[k].id == NULL || alts[k].payload == NULL) return oom(p, open);
      alts[k].offset = (uint32_t)orig_off(p, ids);
      alts[k].state = state;
      alts[k].status = status;
      alts[k].reserved = 0;
    }
  }
  p->pos = close + 1;
  f->kind = DEVBUF_FIELD_CUSTOM;
  f->custom = cu;
  if (cu != NULL) cu->chosen = chosen;
  if (chosen < 0) {
    if (p->flags & DEVBUF_FORMAT_ALLOW_UNKNOWN) {
      p->info |= DEVBUF_FORMAT_HAS_UNKNOWN;
      f->dtype_kind = DEVBUF_KIND_OPAQUE;
      *esize = 0;
      *ealign = 1;
      return DEVBUF_OK;
    }
    if (all_reserved_fmt && first_fmt_code != 0) {
      p->err_off = first_fmt_off;
      if (p->err) devbuf_error_set(p->err, first_fmt_code, "%s", first_fmt_msg);
      return first_fmt_code;
    }
    if (p->err != NULL) expand_unknown(p, open, why, sizeof why);
    return fail(p, open, DEVBUF_ENOTFOUND, "no alternative of the custom dtype is understood: %s",
                why);
  }
  uint64_t sz = desc->itemsize, al = desc->alignment ? desc->alignment : 1;
  f->dtype_kind = (uint8_t)desc->kind;
  if (is_complex) {
    if (desc->kind != DEVBUF_KIND_FLOAT)
      return fail(p, open - 1, DEVBUF_EFORMAT,
                  "'Z' needs a real floating-point type, and '%s' is not one", desc->canonical);
    sz *= 2;
    f->dtype_kind = DEVBUF_KIND_COMPLEX;
  }
  *esize = sz;
  *ealign = al;
  return DEVBUF_OK;
}

/* ---- items ------------------------------------------------------------------ */

/* A standalone item (the pointee of '&', the return of X{}): [bo] [shape]
 * [count] type. Its byte-order state is its own. */
static int parse_single(fp *p, char bo, devbuf_format_field *f) {
  skip_ws(p);
  f->src_offset = (uint32_t)orig_off(p, p->pos);
  while (p->pos < p->end && is_bo(p->s[p->pos])) {
    bo = norm_bo(p->s[p->pos++]);
    skip_ws(p);
  }
  uint64_t prod = 1, count = 1;
  int r;
  if (p->pos < p->end && p->s[p->pos] == '(') {
    if ((r = parse_shape(p, f, &prod))) return r;
    skip_ws(p);
  }
  bool has_count = p->pos < p->end && is_digit(p->s[p->pos]);
  if (has_count && (r = parse_uint(p, &count))) return r;
  f->count = count;
  f->byteorder = bo;
  uint64_t es = 0, ea = 1;
  size_t at = p->pos;
  if ((r = parse_type(p, bo, f, &es, &ea))) return r;
  if (f->kind == DEVBUF_FIELD_BITS) {
    f->elem_size = 0;
    f->size = (count * prod + 7) / 8;
    return DEVBUF_OK;
  }
  uint64_t tot = 0;
  if ((r = mul_ck(p, at, count, prod, &tot)) || (r = mul_ck(p, at, tot, es, &tot))) return r;
  f->elem_size = es;
  f->size = tot;
  f->alignment = bo == '@' ? (uint32_t)ea : 1;
  return DEVBUF_OK;
}

static void set_code(devbuf_format_field *f, const char *c) {
  size_t n = strlen(c);
  memcpy(f->code, c, n + 1);
}

/* The type at p->pos (after any count). Fills kind/code/children and the
 * size and natural alignment of ONE element. */
static int parse_type(fp *p, char bo, devbuf_format_field *f, uint64_t *esize, uint64_t *ealign) {
  const char *s = p->s;
  size_t at = p->pos;
  char b[8];
  if (at >= p->end) return fail(p, at, DEVBUF_EFORMAT, "expected a type code, found end of string");
  char c = s[at];
  unsigned mode = p->mode;
  bool nat = native_sizes(bo);
  int r;

  /* CPython 3.15's struct reads 'Zf' and 'Zd' (gh-148675); no other Z. */
  bool struct_z = mode == DEVBUF_FORMAT_STRUCT && c == 'Z' && at + 1 < p->end &&
                  (s[at + 1] == 'f' || s[at + 1] == 'd');
  if (mode == DEVBUF_FORMAT_STRUCT && !struct_z) {
    unsigned char uc = (unsigned char)c;
    if (c == 'Z')
      return fail(p, at + 1, DEVBUF_EFORMAT,
                  "struct (CPython 3.15) knows only 'Zf' and 'Zd' after 'Z', found %s",
                  show(p, at + 1, b));
    if (uc >= 128 || !CODES[uc].valid || !(CODES[uc].where & W_STRUCT)) {
      return fail(p, at, DEVBUF_EFORMAT, "%s is not a struct format code", show(p, at, b));
    }
    if ((CODES[uc].where & W_NATIVE_ONLY) && !nat)
      return fail(p, at, DEVBUF_EFORMAT, "'%c' is only allowed with native size ('@' or no prefix)", c);
  }

  switch (c) {
    case 'T': {
      if (mode == DEVBUF_FORMAT_STRUCT) break;
      if (at + 1 >= p->end || s[at + 1] != '{')
        return fail(p, at + 1, DEVBUF_EFORMAT, "expected '{' after 'T', found %s",
                    show(p, at + 1, b));
      if (p->depth + 1 > MAX_DEPTH)
        return fail(p, at, DEVBUF_EFORMAT, "nested deeper than %d levels", MAX_DEPTH);
      p->pos = at + 2;
      lvl sub;
      memset(&sub, 0, sizeof sub);
      sub.bo = bo;
      sub.align = 1;
      sub.id = ++p->level_seq;
      sub.parent = p->out != NULL ? f : NULL;
      p->depth++;
      r = parse_seq(p, &sub, '}');
      p->depth--;
      if (r) return r;
      p->pos++; /* '}' */
      uint64_t sz, al;
      if ((r = finish_level(p, &sub, false, &sz, &al))) return r;
      f->kind = DEVBUF_FIELD_STRUCT;
      f->dtype_kind = DEVBUF_KIND_STRUCT;
      set_code(f, "T");
      f->children = sub.first;
      f->nchildren = sub.n;
      *esize = sz;
      *ealign = al;
      return DEVBUF_OK;
    }
    case '&': {
      if (mode != DEVBUF_FORMAT_DEFAULT) break;
      if (p->depth + 1 > MAX_DEPTH)
        return fail(p, at, DEVBUF_EFORMAT, "nested deeper than %d levels", MAX_DEPTH);
      p->pos = at + 1;
      devbuf_format_field tmp, *pt = &tmp;
      if (p->out != NULL && (pt = new_field(p)) == NULL) return oom(p, at);
      memset(&tmp, 0, sizeof tmp);
      p->depth++;
      r = parse_single(p, bo, pt);
      p->depth--;
      if (r) return r;
      if (p->out != NULL) {
        pt->parent = f;
        f->pointee = pt;
      }
      f->kind = DEVBUF_FIELD_POINTER;
      f->dtype_kind = DEVBUF_KIND_POINTER;
      set_code(f, "&");
      p->info |= DEVBUF_FORMAT_HAS_POINTERS;
      *esize = sizeof(void *);
      *ealign = _Alignof(void *);
      return DEVBUF_OK;
    }
    case 'X': {
      if (mode != DEVBUF_FORMAT_DEFAULT) break;
      if (at + 1 >= p->end || s[at + 1] != '{')
        return fail(p, at + 1, DEVBUF_EFORMAT, "expected '{' after 'X', found %s",
                    show(p, at + 1, b));
      if (p->depth + 1 > MAX_DEPTH)
        return fail(p, at, DEVBUF_EFORMAT, "nested deeper than %d levels", MAX_DEPTH);
      p->pos = at + 2;
      lvl sub;
      memset(&sub, 0, sizeof sub);
      sub.bo = bo;
      sub.align = 1;
      sub.id = ++p->level_seq;
      sub.parent = p->out != NULL ? f : NULL;
      p->depth++;
      r = parse_seq(p, &sub, 'X');
      if (r == DEVBUF_OK && p->pos + 1 < p->end && s[p->pos] == '-' && s[p->pos + 1] == '>') {
        p->pos += 2;
        devbuf_format_field tmp, *rt = &tmp;
        memset(&tmp, 0, sizeof tmp);
        if (p->out != NULL && (rt = new_field(p)) == NULL) r = oom(p, at);
        if (r == DEVBUF_OK) r = parse_single(p, bo, rt);
        if (r == DEVBUF_OK) {
          skip_ws(p);
          if (p->pos >= p->end || s[p->pos] != '}')
            r = fail(p, p->pos, DEVBUF_EFORMAT,
                     "expected '}' after the return type of X{}, found %s", show(p, p->pos, b));
          else if (p->out != NULL) {
            rt->parent = f;
            f->pointee = rt;
          }
        }
      }
      p->depth--;
      if (r) return r;
      p->pos++; /* '}' */
      f->kind = DEVBUF_FIELD_FUNCTION;
      f->dtype_kind = DEVBUF_KIND_POINTER;
      set_code(f, "X");
      f->children = sub.first;
      f->nchildren = sub.n;
      p->info |= DEVBUF_FORMAT_HAS_POINTERS;
      *esize = sizeof(void (*)(void));
      *ealign = _Alignof(void (*)(void));
      return DEVBUF_OK;
    }
    case '[': {
      if (mode == DEVBUF_FORMAT_STRUCT) break;
      if (p->flags & DEVBUF_FORMAT_NO_CUSTOM)
        return fail(p, at, DEVBUF_EFORMAT,
                    "custom dtypes '[...]' are not allowed here (plain PEP 3118 only)");
      set_code(f, "[");
      return parse_custom(p, bo, f, false, esize, ealign);
    }
    case 'Z': {
      char z = at + 1 < p->end ? s[at + 1] : '\0';
      if (z == '[') {
        if (p->flags & DEVBUF_FORMAT_NO_CUSTOM)
          return fail(p, at + 1, DEVBUF_EFORMAT,
                      "custom dtypes '[...]' are not allowed here (plain PEP 3118 only)");
        p->pos = at + 1;
        set_code(f, "Z[");
        return parse_custom(p, bo, f, true, esize, ealign);
      }
      uint64_t base, al;
      switch (z) {
        case 'e':
          if (mode == DEVBUF_FORMAT_NUMPY)
            return fail(p, at, DEVBUF_EFORMAT, "'Ze' (complex of half) is not supported in NumPy mode");
          base = 2, al = 2;
          break;
        case 'f': base = 4, al = _Alignof(float); break;
        case 'd': base = 8, al = _Alignof(double); break;
        case 'g':
          if (!nat)
            return fail(p, at, DEVBUF_EFORMAT,
                        "'Zg' (long double complex) has no standard size: use it with "
                        "'@' or '^' only");
          base = sizeof(long double), al = _Alignof(long double);
          break;
        default:
          return fail(p, at + 1, DEVBUF_EFORMAT,
                      "expected 'e', 'f', 'd', 'g' or '[' after 'Z', found %s",
                      show(p, at + 1, b));
      }
      p->pos = at + 2;
      f->kind = DEVBUF_FIELD_SCALAR;
      f->dtype_kind = DEVBUF_KIND_COMPLEX;
      f->code[0] = 'Z';
      f->code[1] = z;
      f->code[2] = '\0';
      *esize = 2 * base;
      *ealign = al;
      return DEVBUF_OK;
    }
    case 't': {
      if (mode != DEVBUF_FORMAT_DEFAULT) break;
      p->pos = at + 1;
      f->kind = DEVBUF_FIELD_BITS;
      f->dtype_kind = DEVBUF_KIND_UINT;
      set_code(f, "t");
      *esize = 0;
      *ealign = 1;
      return DEVBUF_OK;
    }
    default: {
      unsigned char uc = (unsigned char)c;
      if (uc >= 128 || !CODES[uc].valid) break;
      const code_info *ci = &CODES[uc];
      if (mode == DEVBUF_FORMAT_NUMPY) {
        if (!(ci->where & (nat ? W_NUMPY : W_NUMPY_STD))) {
          if (ci->where & W_NUMPY)
            return fail(p, at, DEVBUF_EFORMAT,
                        "'%c' has no standard size in NumPy mode: use it with '@' or '^'", c);
          if (c == 'F' || c == 'D')
            return fail(p, at, DEVBUF_EFORMAT,
                        "'%c' is not supported in NumPy mode: NumPy writes complex as '%s'", c,
                        c == 'F' ? "Zf" : "Zd");
          return fail(p, at, DEVBUF_EFORMAT, "'%c' is not supported in NumPy mode", c);
        }
      } else if (!nat && (ci->where & W_NO_STD)) {
        return fail(p, at, DEVBUF_EFORMAT,
                    "'%c' has no standard size: use it with '@' or '^' only", c);
      }
      p->pos = at + 1;
      f->kind = ci->fkind;
      f->dtype_kind = ci->dkind;
      f->code[0] = c;
      f->code[1] = '\0';
      if (ci->dkind == DEVBUF_KIND_POINTER) p->info |= DEVBUF_FORMAT_HAS_POINTERS;
      *esize = nat || ci->ssize == 0 ? ci->nsize : ci->ssize;
      *ealign = ci->nalign;
      return DEVBUF_OK;
    }
  }
  /* Not a code in this mode. */
  if (c == '}' || c == ']')
    return fail(p, at, DEVBUF_EFORMAT, "unexpected '%c'%s", c,
                c == ']' ? " (a custom-dtype payload ends at the first ']')" : "");
  if (mode == DEVBUF_FORMAT_STRUCT)
    return fail(p, at, DEVBUF_EFORMAT, "%s is not a struct format code", show(p, at, b));
  if (mode == DEVBUF_FORMAT_NUMPY && (c == '&' || c == 'X' || c == 't' || c == 'u'))
    return fail(p, at, DEVBUF_EFORMAT, "'%c' is not supported in NumPy mode", c);
  if (mode == DEVBUF_FORMAT_NUMPY && (is_ws(c) || is_bo(c)))
    return fail(p, at, DEVBUF_EFORMAT, "%s is not allowed here in NumPy mode", show(p, at, b));
  if (c == 'G') /* CPython 3.14's ctypes writes c_longdouble_complex as '<G' */
    return fail(p, at, DEVBUF_EFORMAT,
                "'G' (long double complex, as CPython 3.14's ctypes writes it) is not "
                "supported: its layout is the platform's (no standard size); write it 'Zg' "
                "with native sizes ('@Zg', %u bytes here)",
                (unsigned)(2 * sizeof(long double)));
  return fail(p, at, DEVBUF_EFORMAT, "unknown type code %s", show(p, at, b));
}

/* The size-only fast path: consume a run of plain codes (with counts, no
 * shape, name or byte-order change) at p->pos. Stops, leaving p->pos at the
 * first thing it does not handle, for the general path to take over; so it
 * accepts and rejects exactly what the general path would. */
static int plain_run(fp *p, lvl *L) {
  const char *s = p->s;
  const size_t end = p->end;
  const unsigned mode = p->mode;
  char bo = mode == DEVBUF_FORMAT_NUMPY ? p->np_bo : L->bo;
  const bool nat = native_sizes(bo), aligned = bo == '@';
  const uint8_t req = PLAIN_REQ[mode][nat], forbid = PLAIN_FORBID[mode][nat];
  const bool ws_ok = mode != DEVBUF_FORMAT_NUMPY;
  uint64_t off = L->off, align = L->align;
  uint32_t n = 0;
  size_t q = p->pos;
  int r = DEVBUF_OK;
  for (;;) {
    size_t item = q;
    uint64_t count = 1;
    if (q < end && is_digit(s[q])) {
      count = 0;
      while (q < end && is_digit(s[q])) {
        unsigned d = (unsigned)(s[q] - '0');
        if (count > (MAX_SIZE - d) / 10) goto stop; /* the general path words it */
        count = count * 10 + d;
        q++;
      }
    }
    if (q >= end) goto stop;
    unsigned char uc = (unsigned char)s[q];
    if (uc >= 128 || !CODES[uc].valid || (CODES[uc].where & req) != req ||
        (CODES[uc].where & forbid) != 0)
      goto stop;
    size_t nx = q + 1;
    if (ws_ok)
      while (nx < end && is_ws(s[nx])) nx++;
    if (nx < end && s[nx] == ':' && mode != DEVBUF_FORMAT_STRUCT) goto stop; /* a name */
    const code_info *ci = &CODES[uc];
    uint64_t es = nat || ci->ssize == 0 ? ci->nsize : ci->ssize, tot = 0;
    if (aligned) {
      uint64_t a = ci->nalign;
      if ((r = round_ck(p, item, off, a, &off))) break;
      if (a > align) align = a;
    }
    if ((r = mul_ck(p, q, count, es, &tot))) break;
    if ((r = add_ck(p, item, off, tot, &off))) break;
    if (ci->dkind == DEVBUF_KIND_POINTER) p->info |= DEVBUF_FORMAT_HAS_POINTERS;
    n++;
    q = nx;
    continue;
  stop:
    q = item;
    break;
  }
  if (n > 0) {
    if (bo == '>' ? !host_big_endian() : bo == '<' ? host_big_endian() : false)
      p->info |= DEVBUF_FORMAT_NON_NATIVE;
    L->bitrun = false;
    L->n += n;
  }
  L->off = off;
  L->align = align;
  p->pos = q;
  return r;
}

/* Items until the end of the region, or '}' (term '}'), or '}' / "->"
 * (term 'X'). The terminator is left for the caller. */
static int parse_seq(fp *p, lvl *L, int term) {
  const char *s = p->s;
  unsigned mode = p->mode;
  int r;
  char b[8];
  for (;;) {
    if (mode != DEVBUF_FORMAT_NUMPY) skip_ws(p);
    if (p->out == NULL && (r = plain_run(p, L))) return r;
    if (p->pos >= p->end) {
      if (term) {
        size_t o = p->pos;
        return fail(p, o, DEVBUF_EFORMAT, "missing '}'");
      }
      return DEVBUF_OK;
    }
    char c = s[p->pos];
    if (term && c == '}') return DEVBUF_OK;
    if (term == 'X' && c == '-' && p->pos + 1 < p->end && s[p->pos + 1] == '>') return DEVBUF_OK;

    size_t item = p->pos;
    /* Without a tree, fields are scratch: only what is read back (kind,
     * ndim) needs a value; a full memset cost more than parsing the item. */
    devbuf_format_field tmp, *f = &tmp;
    if (p->out != NULL) {
      if ((f = new_field(p)) == NULL) return oom(p, item);
    } else {
      tmp.kind = DEVBUF_FIELD_SCALAR;
      tmp.ndim = 0;
      tmp.shape = NULL;
    }
    uint64_t prod = 1, count = 1;
    bool np_shape = false; /* NumPy mode: a shape precedes this item */
    char *bop = mode == DEVBUF_FORMAT_NUMPY ? &p->np_bo : &L->bo;

    if (mode == DEVBUF_FORMAT_DEFAULT) {
      bool any = false;
      while (p->pos < p->end && is_bo(s[p->pos])) {
        *bop = norm_bo(s[p->pos++]);
        any = true;
        skip_ws(p);
      }
      if (any) {
        /* A trailing byte-order character is harmless here. */
        if (p->pos >= p->end) continue;
        if (term && s[p->pos] == '}') continue;
        if (term == 'X' && s[p->pos] == '-' && p->pos + 1 < p->end && s[p->pos + 1] == '>') continue;
      }
      item = p->pos;
      if (p->pos < p->end && s[p->pos] == '(') {
        if ((r = parse_shape(p, f, &prod))) return r;
        skip_ws(p);
        while (p->pos < p->end && is_bo(s[p->pos])) {
          *bop = norm_bo(s[p->pos++]);
          skip_ws(p);
        }
      }
    } else if (mode == DEVBUF_FORMAT_NUMPY) {
      if (s[p->pos] == '(') {
        if ((r = parse_shape(p, f, &prod))) return r;
        np_shape = true;
      }
      if (p->pos < p->end && is_bo(s[p->pos])) {
        *bop = norm_bo(s[p->pos++]);
        if (p->pos >= p->end)
          return fail(p, p->pos, DEVBUF_EFORMAT,
                      "a byte-order character must be followed by a type in NumPy mode");
      }
    } else if (c == '^') {
      return fail(p, p->pos, DEVBUF_EFORMAT,
                  "'^' is not a struct-module prefix (struct mode knows @ = < > !)");
    } else if (is_bo(c)) {
      return fail(p, p->pos, DEVBUF_EFORMAT,
                  "byte-order character '%c' is only allowed at the start in struct mode", c);
    }

    if (p->pos < p->end && is_digit(s[p->pos])) {
      if ((r = parse_uint(p, &count))) return r;
      if (p->pos >= p->end || is_ws(s[p->pos]))
        return fail(p, p->pos, DEVBUF_EFORMAT, "expected a type code after the count, found %s",
                    show(p, p->pos, b));
    }
    char bo = *bop;
    f->count = count;
    f->byteorder = bo;
    f->src_offset = (uint32_t)orig_off(p, item);
    uint64_t es = 0, ea = 1;
    size_t tat = p->pos;
    unsigned char uc = tat < p->end ? (unsigned char)s[tat] : 0;
    bool nat = native_sizes(bo);
    if (uc < 128 && CODES[uc].valid &&
        (CODES[uc].where & PLAIN_REQ[mode][nat]) == PLAIN_REQ[mode][nat] &&
        (CODES[uc].where & PLAIN_FORBID[mode][nat]) == 0) {
      /* Fast path: a plain code allowed in this mode and size state. */
      const code_info *ci = &CODES[uc];
      p->pos = tat + 1;
      es = nat || ci->ssize == 0 ? ci->nsize : ci->ssize;
      ea = ci->nalign;
      f->kind = ci->fkind;
      if (p->out != NULL) {
        f->dtype_kind = ci->dkind;
        f->code[0] = (char)uc;
        f->code[1] = '\0';
      }
      if (ci->dkind == DEVBUF_KIND_POINTER) p->info |= DEVBUF_FORMAT_HAS_POINTERS;
    } else if ((r = parse_type(p, bo, f, &es, &ea))) {
      return r;
    }
    /* np.dtype((base, shape)) refuses an unsized base: one of itemsize 0
     * that is not a struct ('(2)0i', '(0)0c', '(2)0x', '(2)0T{i}'), while
     * '(0)i' and '(2)T{}' are fine. Match it rather than invent a layout. */
    if (np_shape && f->kind != DEVBUF_FIELD_BITS && (count == 0 || es == 0) &&
        !(f->kind == DEVBUF_FIELD_STRUCT && count == 1))
      return fail(p, item, DEVBUF_EFORMAT,
                  "a shape over an item of size 0 (count 0 or an empty type) is refused in "
                  "NumPy mode, as np.dtype refuses an unsized base with a shape");
    /* NumPy decides alignment with the state after the type (a T{} may
     * have changed it); elsewhere the state cannot change inside a type. */
    char abo = *bop;
    bool aligned = abo == '@';
    if (abo == '>' ? !host_big_endian() : abo == '<' ? host_big_endian() : false)
      p->info |= DEVBUF_FORMAT_NON_NATIVE;
    f->big_endian = (uint8_t)(bo == '>' ? 1 : bo == '<' ? 0 : host_big_endian());

    if (f->kind == DEVBUF_FIELD_BITS) {
      uint64_t bits = 0;
      if (count == 0) return fail(p, item, DEVBUF_EFORMAT, "a bit field needs a width of at least 1");
      if ((r = mul_ck(p, item, count, prod, &bits))) return r;
      if (!L->bitrun) {
        L->bitrun = true;
        L->bit_base = L->off;
        L->bit_pos = 0;
      }
      uint64_t end_bits = 0;
      if ((r = add_ck(p, item, L->bit_pos, bits, &end_bits))) return r;
      f->offset = L->bit_base + L->bit_pos / 8;
      f->bit_offset = (uint8_t)(L->bit_pos % 8);
      f->size = (f->bit_offset + bits + 7) / 8;
      f->elem_size = 0;
      f->alignment = 1;
      L->bit_pos = end_bits;
      if ((r = add_ck(p, item, L->bit_base, (end_bits + 7) / 8, &L->off))) return r;
    } else {
      L->bitrun = false;
      uint64_t mult = 0, extra = 0;
      if ((r = mul_ck(p, tat, count, prod, &mult))) return r;
      if (aligned) {
        if ((r = round_ck(p, item, L->off, ea, &L->off))) return r;
        if (mode == DEVBUF_FORMAT_NUMPY) {
          uint64_t intra = (0 - es) & (ea - 1);
          if (intra != 0) {
            if (mult > 1) es += intra;
            else extra = intra;
          }
        }
        if (ea > L->align) L->align = ea;
      }
      uint64_t tot = 0;
      if ((r = mul_ck(p, tat, mult, es, &tot))) return r;
      f->offset = L->off;
      f->elem_size = es;
      f->size = tot;
      f->alignment = aligned ? (uint32_t)ea : 1;
      if ((r = add_ck(p, item, L->off, tot, &L->off))) return r;
      if ((r = add_ck(p, item, L->off, extra, &L->off))) return r;
    }

    /* :name: */
    if (mode == DEVBUF_FORMAT_DEFAULT) skip_ws(p);
    if (mode != DEVBUF_FORMAT_STRUCT && p->pos < p->end && s[p->pos] == ':') {
      size_t ns = ++p->pos;
      if (mode == DEVBUF_FORMAT_NUMPY) {
        /* NumPy takes anything up to the next ':'; we keep to printable
         * ASCII (spaces included) so that a name survives as a C string. */
        while (p->pos < p->end && s[p->pos] != ':' && s[p->pos] >= 0x20 && s[p->pos] < 0x7f)
          p->pos++;
      } else {
        while (p->pos < p->end && s[p->pos] != ':' && s[p->pos] > 0x20 && s[p->pos] < 0x7f)
          p->pos++;
      }
      if (p->pos >= p->end)
        return fail(p, ns - 1, DEVBUF_EFORMAT, "unterminated field name: missing ':'");
      if (s[p->pos] != ':')
        return fail(p, p->pos, DEVBUF_EFORMAT, "%s cannot appear in a field name",
                    show(p, p->pos, b));
      size_t nl = p->pos - ns;
      p->pos++;
      if (nl == 0 && mode == DEVBUF_FORMAT_DEFAULT)
        return fail(p, ns - 1, DEVBUF_EFORMAT, "empty field name '::'");
      if ((r = check_name(p, L->id, ns, nl, item))) return r;
      if (p->out != NULL && (f->name = arena_str(p, s + ns, nl)) == NULL) return oom(p, item);
    }
    if (p->out != NULL) link_field(L, f);
    else L->n++;
  }
}

static int finish_level(fp *p, lvl *L, bool top, uint64_t *size, uint64_t *align) {
  uint64_t sz = L->off;
  int r;
  switch (p->mode) {
    case DEVBUF_FORMAT_STRUCT:
      /* struct.calcsize never pads the end, so an array of such items (stride
       * = itemsize) only keeps the alignment that divides the size. */
      while (sz != 0 && sz % L->align != 0) L->align /= 2;
      break;
    case DEVBUF_FORMAT_NUMPY:
      if (p->np_bo == '@' && (r = round_ck(p, p->pos, sz, L->align, &sz))) return r;
      break;
    default:
      if ((r = round_ck(p, p->pos, sz, L->align, &sz))) return r;
      break;
  }
  (void)top;
  *size = sz;
  *align = L->align;
  return DEVBUF_OK;
}

/* ---- entry points ------------------------------------------------------------ */
static void fp_init(fp *p, const char *s, size_t len, uint32_t flags, devbuf_format *out,
                    devbuf_error *err) {
  p->s = s;
  p->end = len;
  p->pos = 0;
  p->mode = flags & DEVBUF_FORMAT_MODE_MASK;
  p->flags = flags;
  p->out = out;
  p->err = err;
  p->err_off = 0;
  p->depth = 0;
  p->info = 0;
  p->np_bo = '@';
  p->level_seq = 0;
  p->names = p->names_local;
  p->nnames = 0;
  p->names_cap = sizeof p->names_local / sizeof p->names_local[0];
  p->oom = false;
  p->omap = NULL;
  p->olen = len;
}

/* NumPy's buffer import (np.asarray) strips whitespace outside ':name:'
 * before its PEP 3118 reader sees the string: NumPy mode does the same, on a
 * copy, keeping a map back to the caller's offsets for errors and fields.
 * 0 when there is nothing to strip (p untouched), 1 when stripped (free
 * *buf), -1 when out of memory. */
static int np_strip(fp *p, char **buf, uint32_t **map) {
  const char *s = p->s;
  size_t n = p->end, i;
  for (i = 0; i < n && !is_ws(s[i]); i++) {
  }
  if (i == n) return 0;
  char *b = (char *)malloc(n ? n : 1);
  uint32_t *m = (uint32_t *)malloc((n ? n : 1) * sizeof *m);
  if (b == NULL || m == NULL) {
    free(b);
    free(m);
    return -1;
  }
  size_t o = 0;
  bool in_name = false;
  for (i = 0; i < n; i++) {
    if (s[i] == ':') in_name = !in_name;
    else if (!in_name && is_ws(s[i])) continue;
    b[o] = s[i];
    m[o] = (uint32_t)i;
    o++;
  }
  p->s = b;
  p->end = o;
  p->slen = o;
  p->omap = m;
  *buf = b;
  *map = m;
  return 1;
}

static int run(fp *p, uint64_t *size, uint64_t *align, char *end_bo, uint32_t *nfields,
               const devbuf_format_field **first) {
  if (p->mode == DEVBUF_FORMAT_MODE_MASK)
    return fail(p, 0, DEVBUF_EINVAL, "invalid mode bits in flags 0x%x", (unsigned)p->flags);
  if (p->end > UINT32_MAX) return fail(p, 0, DEVBUF_EINVAL, "format string longer than 4 GiB");
  if (p->mode == DEVBUF_FORMAT_NUMPY && p->omap == NULL) {
    char *buf = NULL;
    uint32_t *map = NULL;
    int st = np_strip(p, &buf, &map);
    if (st < 0) return fail(p, 0, DEVBUF_ENOMEM, "out of memory stripping whitespace");
    if (st > 0) {
      int r = run(p, size, align, end_bo, nfields, first);
      free(buf);
      free(map);
      return r;
    }
  }
  lvl top;
  memset(&top, 0, sizeof top);
  top.bo = '@';
  top.align = 1;
  if (p->mode == DEVBUF_FORMAT_STRUCT && p->end > 0 && is_bo(p->s[0]) && p->s[0] != '^') {
    top.bo = norm_bo(p->s[0]);
    p->pos = 1;
  }
  int r = parse_seq(p, &top, 0);
  if (r == DEVBUF_OK) r = finish_level(p, &top, true, size, align);
  if (p->names != p->names_local) free(p->names);
  p->names = p->names_local;
  if (r != DEVBUF_OK) return r;
  if ((p->info & DEVBUF_FORMAT_HAS_UNKNOWN) != 0) {
    *size = 0;
    *align = 0;
  }
  if (end_bo) *end_bo = p->mode == DEVBUF_FORMAT_NUMPY ? p->np_bo : top.bo;
  if (nfields) *nfields = top.n;
  if (first) *first = top.first;
  return DEVBUF_OK;
}

int devbuf__format_itemsize(const char *fmt, size_t len, uint32_t flags,
                                      uint64_t *itemsize, uint64_t *alignment,
                                      size_t *error_offset, devbuf_error *err) {
  if (fmt == NULL && len != 0) {
    if (error_offset) *error_offset = 0;
    return devbuf_error_set(err, DEVBUF_EINVAL, "format: NULL string");
  }
  fp p;
  fp_init(&p, fmt, len, flags, NULL, err);
  uint64_t sz = 0, al = 1;
  int r = run(&p, &sz, &al, NULL, NULL, NULL);
  if (r != DEVBUF_OK) {
    if (error_offset) *error_offset = p.err_off;
    return r;
  }
  if (itemsize) *itemsize = sz;
  if (alignment) *alignment = al;
  if (error_offset) *error_offset = 0;
  return DEVBUF_OK;
}

DEVBUF_API void devbuf_format_release(devbuf_format *f) {
  if (f == NULL) return;
  heap_block *b = (heap_block *)f->heap_;
  while (b != NULL) {
    heap_block *n = b->next;
    free(b);
    b = n;
  }
  f->heap_ = NULL;
  f->used_ = 0;
  f->fields = NULL;
  f->nfields = 0;
}

int devbuf__format_parse(const char *fmt, size_t len, uint32_t flags, devbuf_format *out,
                                   devbuf_error *err) {
  if (out == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "format: NULL result");
  if (out->struct_size != sizeof *out)
    return devbuf_error_set(err, DEVBUF_EABI,
                            "format: devbuf_format.struct_size is %u, this libdevbuf expects %zu "
                            "(rebuild against this version's devbuf/format.h)",
                            (unsigned)out->struct_size, sizeof *out);
  out->heap_ = NULL;
  out->used_ = 0;
  out->flags = flags;
  out->itemsize = 0;
  out->alignment = 0;
  out->fields = NULL;
  out->nfields = 0;
  out->info = 0;
  out->error_offset = 0;
  out->end_byteorder = '@';
  if (fmt == NULL && len != 0) return devbuf_error_set(err, DEVBUF_EINVAL, "format: NULL string");
  fp p;
  fp_init(&p, fmt, len, flags, out, err);
  uint64_t sz = 0, al = 1;
  int r = run(&p, &sz, &al, &out->end_byteorder, &out->nfields, &out->fields);
  out->info = p.info;
  if (r != DEVBUF_OK) {
    out->error_offset = p.err_off;
    out->fields = NULL;
    out->nfields = 0;
    return r;
  }
  out->itemsize = sz;
  out->alignment = al;
  return DEVBUF_OK;
}

int devbuf__format_parse_alloc(const char *fmt, size_t len, uint32_t flags,
                                         devbuf_format **out, size_t *error_offset,
                                         devbuf_error *err) {
  if (out == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "format: NULL result pointer");
  *out = NULL;
  devbuf_format *f = (devbuf_format *)malloc(sizeof *f);
  if (f == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "format: out of memory");
  f->struct_size = sizeof *f;
  int r = devbuf__format_parse(fmt, len, flags, f, err);
  if (r != DEVBUF_OK) {
    if (error_offset) *error_offset = (size_t)f->error_offset;
    devbuf_format_release(f);
    free(f);
    return r;
  }
  if (error_offset) *error_offset = 0;
  *out = f;
  return DEVBUF_OK;
}

DEVBUF_API void devbuf_format_free(devbuf_format *f) {
  if (f == NULL) return;
  devbuf_format_release(f);
  free(f);
}

/* ---- printer ------------------------------------------------------------------ */
typedef struct pbuf {
  char *buf;
  size_t cap, len;
} pbuf;

static void put(pbuf *b, const char *s, size_t n) {
  if (b->len < b->cap) {
    size_t room = b->cap - b->len;
    memcpy(b->buf + b->len, s, n < room ? n : room);
  }
  b->len += n;
}
static void putc_(pbuf *b, char c) { put(b, &c, 1); }
static void put_u(pbuf *b, uint64_t v) {
  char t[24];
  int n = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
  put(b, t, (size_t)n);
}

static void print_list(pbuf *b, const devbuf_format_field *f, char *state, unsigned mode);

static void print_field(pbuf *b, const devbuf_format_field *f, char *state, unsigned mode) {
  bool numpy = mode == DEVBUF_FORMAT_NUMPY;
  if (!numpy && f->byteorder != *state) {
    putc_(b, f->byteorder);
    *state = f->byteorder;
  }
  if (f->ndim > 0 && f->shape != NULL) {
    putc_(b, '(');
    for (unsigned i = 0; i < f->ndim; i++) {
      if (i) putc_(b, ',');
      put_u(b, f->shape[i]);
    }
    putc_(b, ')');
  }
  if (numpy && f->byteorder != *state) {
    putc_(b, f->byteorder);
    *state = f->byteorder;
  }
  if (f->count != 1) put_u(b, f->count);
  switch (f->kind) {
    case DEVBUF_FIELD_STRUCT: {
      put(b, "T{", 2);
      char inner = *state;
      print_list(b, f->children, numpy ? state : &inner, mode);
      putc_(b, '}');
      break;
    }
    case DEVBUF_FIELD_POINTER: {
      putc_(b, '&');
      char inner = *state;
      if (f->pointee) print_field(b, f->pointee, &inner, mode);
      break;
    }
    case DEVBUF_FIELD_FUNCTION: {
      put(b, "X{", 2);
      char inner = *state;
      print_list(b, f->children, &inner, mode);
      if (f->pointee) {
        put(b, "->", 2);
        char rs = *state;
        print_field(b, f->pointee, &rs, mode);
      }
      putc_(b, '}');
      break;
    }
    case DEVBUF_FIELD_CUSTOM: {
      const devbuf_format_custom *cu = f->custom;
      if (cu != NULL && cu->is_complex) putc_(b, 'Z');
      putc_(b, '[');
      for (uint32_t i = 0; cu != NULL && i < cu->nalts; i++) {
        if (i) putc_(b, ';');
        put(b, cu->alts[i].id, strlen(cu->alts[i].id));
        putc_(b, '$');
        put(b, cu->alts[i].payload, strlen(cu->alts[i].payload));
      }
      putc_(b, ']');
      break;
    }
    default:
      put(b, f->code, strlen(f->code));
      break;
  }
  if (f->name != NULL) {
    putc_(b, ':');
    put(b, f->name, strlen(f->name));
    putc_(b, ':');
  }
}

static void print_list(pbuf *b, const devbuf_format_field *f, char *state, unsigned mode) {
  for (; f != NULL; f = f->next) print_field(b, f, state, mode);
}

DEVBUF_API size_t devbuf_format_print(const devbuf_format *f, char *buf, size_t capacity) {
  pbuf b = {buf, capacity ? capacity - 1 : 0, 0};
  if (f != NULL) {
    char state = '@';
    unsigned mode = f->flags & DEVBUF_FORMAT_MODE_MASK;
    print_list(&b, f->fields, &state, mode);
    /* struct mode: an empty format keeps its prefix only for show; harmless */
  }
  if (capacity > 0) buf[b.len < b.cap ? b.len : b.cap] = '\0';
  return b.len;
}

/* ---- caret --------------------------------------------------------------------- */
DEVBUF_API size_t devbuf_format_caret(const char *fmt, size_t len, size_t offset, char *buf,
                                      size_t capacity) {
  enum { WINDOW = 72 };
  pbuf b = {buf, capacity ? capacity - 1 : 0, 0};
  if (fmt == NULL) len = 0;
  if (offset > len) offset = len;
  size_t start = 0, stop = len;
  bool pre = false, post = false;
  if (len > WINDOW) {
    start = offset > WINDOW / 2 ? offset - WINDOW / 2 : 0;
    stop = start + WINDOW;
    if (stop > len) {
      stop = len;
      start = len - WINDOW;
    }
    pre = start > 0;
    post = stop < len;
  }
  if (pre) put(&b, "...", 3);
  for (size_t i = start; i < stop; i++) {
    unsigned char c = (unsigned char)fmt[i];
    putc_(&b, c >= 0x20 && c < 0x7f ? (char)c : '?');
  }
  if (post) put(&b, "...", 3);
  putc_(&b, '\n');
  size_t col = (pre ? 3 : 0) + (offset - start);
  for (size_t i = 0; i < col; i++) putc_(&b, ' ');
  putc_(&b, '^');
  if (capacity > 0) buf[b.len < b.cap ? b.len : b.cap] = '\0';
  return b.len;
}

/* ---- flatten --------------------------------------------------------------------- */
static uint64_t mult_of(const devbuf_format_field *f) {
  uint64_t m = f->count;
  for (unsigned i = 0; i < f->ndim && f->shape; i++) m *= f->shape[i];
  return m;
}

static bool expands(const devbuf_format_field *f) {
  return f->kind == DEVBUF_FIELD_STRUCT ||
         (f->kind == DEVBUF_FIELD_CUSTOM && f->children != NULL);
}

/* Number of items in a list; false on overflow. */
static bool count_list(const devbuf_format_field *f, uint64_t *n) {
  uint64_t total = 0;
  for (; f != NULL; f = f->next) {
    uint64_t c = 1;
    if (expands(f)) {
      uint64_t inner;
      if (!count_list(f->children, &inner)) return false;
      uint64_t m = mult_of(f);
      if (m != 0 && inner > UINT64_MAX / m) return false;
      c = inner * m;
    }
    if (total > UINT64_MAX - c) return false;
    total += c;
  }
  *n = total;
  return true;
}

static void fill_list(const devbuf_format_field *f, uint64_t base, devbuf_format_item *items,
                      size_t cap, size_t *n) {
  for (; f != NULL && *n < cap; f = f->next) {
    if (expands(f)) {
      uint64_t m = mult_of(f), inner = 0;
      /* Elements without items would spin m times without progress. */
      if (!count_list(f->children, &inner) || inner == 0) continue;
      for (uint64_t k = 0; k < m && *n < cap; k++)
        fill_list(f->children, base + f->offset + k * f->elem_size, items, cap, n);
    } else {
      items[*n].field = f;
      items[*n].offset = base + f->offset;
      (*n)++;
    }
  }
}

DEVBUF_API int devbuf_format_flatten(const devbuf_format *f, devbuf_format_item *items,
                                     size_t capacity, size_t *count, devbuf_error *err) {
  if (f == NULL || count == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "format_flatten: NULL argument");
  uint64_t total;
  if (!count_list(f->fields, &total) || total > SIZE_MAX)
    return devbuf_error_set(err, DEVBUF_ENOMEM, "format_flatten: the item count overflows");
  *count = (size_t)total;
  size_t n = 0;
  if (items != NULL && capacity > 0) fill_list(f->fields, 0, items, capacity, &n);
  return DEVBUF_OK;
}

/* ---- DLPack: parsed format -> DLPack dtype --------------------------------------- */
DEVBUF_API int devbuf_format_to_dlpack(const devbuf_format *f, uint8_t *code, uint8_t *bits,
                                       uint16_t *lanes, devbuf_error *err) {
  if (f == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "format_to_dlpack: NULL format");
  const devbuf_format_field *x = f->fields;
  if (x == NULL || x->next != NULL)
    return devbuf_error_set(err, DEVBUF_ENOTSUP,
                            "format_to_dlpack: DLPack describes one element type, not %s",
                            x == NULL ? "an empty format" : "several fields");
  if (x->big_endian != host_big_endian())
    return devbuf_error_set(err, DEVBUF_ENOTSUP,
                            "format_to_dlpack: DLPack data is in native byte order only");
  uint64_t m = mult_of(x);
  if (m == 0 || m > UINT16_MAX)
    return devbuf_error_set(err, DEVBUF_ENOTSUP, "format_to_dlpack: %llu lanes do not fit DLPack",
                            (unsigned long long)m);
  int c = -1;
  uint64_t bt = 0;
  if (x->kind == DEVBUF_FIELD_CUSTOM) {
    const devbuf_format_custom *cu = x->custom;
    if (cu == NULL || cu->chosen < 0 || cu->is_complex || cu->desc.dlpack_code < 0)
      return devbuf_error_set(err, DEVBUF_ENOTSUP,
                              "format_to_dlpack: the custom dtype has no DLPack code");
    /* DLPack has no lanes of packed sub-byte elements: (4)[mypkg$int4x2]
     * would read as 4 lanes of 4 bits (2 bytes) for a 4-byte item. The
     * buffer export refuses the same. */
    if (cu->desc.elements_per_item > 1 && m != 1) {
      const devbuf_format_alt *a = cu->alts ? &cu->alts[cu->chosen] : NULL;
      return devbuf_error_set(err, DEVBUF_ENOTSUP,
                              "format_to_dlpack: packed [%s$%s] (%u elements per item) with a "
                              "count of %llu is not supported: DLPack has no lanes of packed "
                              "elements", a && a->id ? a->id : "?", a && a->payload ? a->payload : "",
                              (unsigned)cu->desc.elements_per_item, (unsigned long long)m);
    }
    c = cu->desc.dlpack_code;
    bt = cu->desc.dlpack_bits;
  } else if (x->kind == DEVBUF_FIELD_SCALAR) {
    const char *k = x->code;
    bt = x->elem_size * 8;
    switch (k[0]) {
      case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': c = DEVBUF_DLDT_INT; break;
      case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': c = DEVBUF_DLDT_UINT; break;
      case 'e': case 'f': case 'd': c = DEVBUF_DLDT_FLOAT; break;
      case '?': c = DEVBUF_DLDT_BOOL; break;
      case 'Z': c = k[1] == 'g' ? -1 : DEVBUF_DLDT_COMPLEX; break;
      case 'F': case 'D': c = DEVBUF_DLDT_COMPLEX; break;
      default: c = -1; break;
    }
    if (x->code[0] == 's' || x->code[0] == 'p' || x->code[0] == 'c') c = -1;
  }
  if (c < 0 || bt == 0 || bt > 255)
    return devbuf_error_set(err, DEVBUF_ENOTSUP, "format_to_dlpack: '%s' has no DLPack dtype",
                            x->code);
  if (code) *code = (uint8_t)c;
  if (bits) *bits = (uint8_t)bt;
  if (lanes) *lanes = (uint16_t)m;
  return DEVBUF_OK;
}
