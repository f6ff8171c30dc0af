/* Format-string vectors: format -> item size, alignment, top-level offsets
 * and canonical spelling, or the exact error (code, byte offset, message).
 * Every success vector is also checked for: the itemsize fast path agreeing
 * with the full parse, print -> parse giving the same layout, and print being
 * idempotent. Every error vector is checked on both paths.
 *
 * Sizes assume an LP64 host with a 16-byte long double (x86-64, aarch64
 * Linux); vectors marked LP64 are skipped elsewhere. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/format.h"
#include "devbuf_test.h"

#define D DEVBUF_FORMAT_DEFAULT
#define S DEVBUF_FORMAT_STRUCT
#define N DEVBUF_FORMAT_NUMPY
#define A DEVBUF_FORMAT_ALLOW_UNKNOWN
#define NC DEVBUF_FORMAT_NO_CUSTOM
#define L DEVBUF_FORMAT_LINT_IDS
#define EF DEVBUF_EFORMAT
#define NF DEVBUF_ENOTFOUND

typedef struct vec {
  const char *fmt;
  size_t len;         /* 0: strlen(fmt) */
  unsigned flags;
  long long size;     /* expected itemsize, -1 for an error */
  unsigned align;
  const char *offs;   /* top-level offsets "0,4", or NULL */
  const char *canon;  /* canonical print, or NULL to skip */
  int code;           /* error code */
  long off;           /* error offset */
  const char *msg;    /* exact message; a leading '~' means "contains" */
} vec;

#define OK(f, fl, sz, al, offs, canon) {f, 0, fl, sz, al, offs, canon, 0, 0, NULL}
#define ER(f, fl, code, off, msg) {f, 0, fl, -1, 0, NULL, NULL, code, off, msg}

static const vec VECS[] = {
    /* ---- every single code, native ----------------------------------------- */
    OK("b", D, 1, 1, "0", "b"),
    OK("B", D, 1, 1, "0", "B"),
    OK("c", D, 1, 1, "0", "c"),
    OK("?", D, 1, 1, "0", "?"),
    OK("h", D, 2, 2, "0", "h"),
    OK("H", D, 2, 2, "0", "H"),
    OK("i", D, 4, 4, "0", "i"),
    OK("I", D, 4, 4, "0", "I"),
    OK("l", D, 8, 8, "0", "l"),
    OK("L", D, 8, 8, "0", "L"),
    OK("q", D, 8, 8, "0", "q"),
    OK("Q", D, 8, 8, "0", "Q"),
    OK("n", D, 8, 8, "0", "n"),
    OK("N", D, 8, 8, "0", "N"),
    OK("e", D, 2, 2, "0", "e"),
    OK("f", D, 4, 4, "0", "f"),
    OK("d", D, 8, 8, "0", "d"),
    OK("g", D, 16, 16, "0", "g"),
    OK("s", D, 1, 1, "0", "s"),
    OK("p", D, 1, 1, "0", "p"),
    OK("P", D, 8, 8, "0", "P"),
    OK("O", D, 8, 8, "0", "O"),
    OK("u", D, 2, 2, "0", "u"),
    OK("w", D, 4, 4, "0", "w"),
    OK("x", D, 1, 1, "0", "x"),
    OK("Ze", D, 4, 2, "0", "Ze"),
    OK("Zf", D, 8, 4, "0", "Zf"),
    OK("Zd", D, 16, 8, "0", "Zd"),
    OK("Zg", D, 32, 16, "0", "Zg"),
    OK("", D, 0, 1, "", ""),
    OK("   ", D, 0, 1, "", ""),
    /* ---- standard sizes and byte order ------------------------------------------ */
    OK("<l", D, 4, 1, "0", "<l"),
    OK("=L", D, 4, 1, "0", "=L"),
    OK(">q", D, 8, 1, "0", ">q"),
    OK("!h", D, 2, 1, "0", ">h"),
    OK("<e", D, 2, 1, "0", "<e"),
    OK("^l", D, 8, 1, "0", "^l"),
    OK("^id", D, 12, 1, "0,4", "^id"),
    OK("<P", D, 8, 1, "0", "<P"),
    OK("<Zd", D, 16, 1, "0", "<Zd"),
    ER("<n", D, EF, 1, "format: byte 1: 'n' has no standard size: use it with '@' or '^' only"),
    ER("=g", D, EF, 1, "format: byte 1: 'g' has no standard size: use it with '@' or '^' only"),
    ER(">Zg", D, EF, 1, "format: byte 1: 'Zg' (long double complex) has no standard size: use it with '@' or '^' only"),
    OK("<ih", D, 6, 1, "0,4", "<ih"),
    OK("<i@h", D, 6, 2, "0,4", "<i@h"),
    OK("@i<h>q", D, 16, 4, "0,4,6", "i<h>q"),
    OK("<i!i", D, 8, 1, "0,4", "<i>i"),
    OK("=i=i", D, 8, 1, "0,4", "=ii"),
    OK("<>i", D, 4, 1, "0", ">i"),
    OK("i<", D, 4, 4, "0", "i"),
    /* PEP 3118: mixed endian (weird but possible) */
    OK(">i:big: <i:little:", D, 8, 1, "0,4", ">i:big:<i:little:"),
    /* ---- native alignment and the trailing padding of a struct ---------------------- */
    OK("ib", D, 8, 4, "0,4", "ib"),
    OK("bi", D, 8, 4, "0,4", "bi"),
    OK("bd", D, 16, 8, "0,8", "bd"),
    OK("hbi", D, 8, 4, "0,2,4", "hbi"),
    OK("llh0l", D, 24, 8, "0,8,16,24", "llh0l"),
    OK("3s", D, 3, 1, "0", "3s"),
    OK("3sd", D, 16, 8, "0,8", "3sd"),
    OK("0s", D, 0, 1, "0", "0s"),
    OK("xi", D, 8, 4, "0,4", "xi"),
    OK("3x", D, 3, 1, "0", "3x"),
    OK("b0i", D, 4, 4, "0,4", "b0i"),
    OK("4i", D, 16, 4, "0", "4i"),
    OK("1i", D, 4, 4, "0", "i"),
    OK("0i", D, 0, 4, "0", "0i"),
    OK("10c", D, 10, 1, "0", "10c"),
    OK("2e3d", D, 32, 8, "0,8", "2e3d"),
    OK("007i", D, 28, 4, "0", "7i"),
    /* ---- whitespace ---------------------------------------------------------------- */
    OK(" i ", D, 4, 4, "0", "i"),
    OK("i\tb\n", D, 8, 4, "0,4", "ib"),
    OK("\v\fi\r", D, 4, 4, "0", "i"),
    ER("3 i", D, EF, 1, "format: byte 1: expected a type code after the count, found ' '"),
    ER("T {i}", D, EF, 1, "format: byte 1: expected '{' after 'T', found ' '"),
    ER("Z f", D, EF, 1, "format: byte 1: expected 'e', 'f', 'd', 'g' or '[' after 'Z', found ' '"),
    /* ---- PEP 3118's own examples -------------------------------------------------- */
    OK("d", D, 8, 8, "0", "d"),
    OK("Zd", D, 16, 8, "0", "Zd"),
    OK("BBB", D, 3, 1, "0,1,2", "BBB"),
    OK("B:r: B:g: B:b:", D, 3, 1, "0,1,2", "B:r:B:g:B:b:"),
    OK("T{H:sval:B:bval:B:cval:}", D, 4, 2, "0", "T{H:sval:B:bval:B:cval:}"),
    OK("i:ival:\n   T{\n      H:sval:\n      B:bval:\n      B:cval:\n    }:sub:\n", D, 8, 4,
       "0,4", "i:ival:T{H:sval:B:bval:B:cval:}:sub:"),
    OK("i:ival:\n   (16,4)d:data:\n", D, 520, 8, "0,8", "i:ival:(16,4)d:data:"),
    OK("X{}", D, 8, 8, "0", "X{}"),
    OK("&d", D, 8, 8, "0", "&d"),
    /* ---- structs --------------------------------------------------------------------- */
    OK("T{ib}", D, 8, 4, "0", "T{ib}"),
    OK("T{ib}b", D, 12, 4, "0,8", "T{ib}b"),
    OK("2T{ib}", D, 16, 4, "0", "2T{ib}"),
    OK("(2)T{ib}", D, 16, 4, "0", "(2)T{ib}"),
    OK("T{}", D, 0, 1, "0", "T{}"),
    OK("T{T{T{d}}}", D, 8, 8, "0", "T{T{T{d}}}"),
    OK("T{<i}b", D, 5, 1, "0,4", "T{<i}b"),
    OK("T{>i}i", D, 8, 4, "0,4", "T{>i}i"),
    OK("<T{i}", D, 4, 1, "0", "<T{i}"),
    OK("T{ i :a: }", D, 4, 4, "0", "T{i:a:}"),
    ER("i : a :", D, EF, 3, "format: byte 3: ' ' cannot appear in a field name"),
    OK("bT{bd}", D, 24, 8, "0,8", "bT{bd}"),
    OK("T{i:a:}i:a:", D, 8, 4, "0,4", "T{i:a:}i:a:"),
    ER("T{i", D, EF, 3, "format: byte 3: missing '}'"),
    ER("i}", D, EF, 1, "format: byte 1: unexpected '}'"),
    /* ---- names ------------------------------------------------------------------------ */
    ER("i:a:i:a:", D, EF, 6, "format: byte 6: duplicate field name 'a'"),
    ER("i::", D, EF, 1, "format: byte 1: empty field name '::'"),
    ER("i:abc", D, EF, 1, "format: byte 1: unterminated field name: missing ':'"),
    ER("i:a b:", D, EF, 3, "format: byte 3: ' ' cannot appear in a field name"),
    OK("i:x.y-z[0]:", D, 4, 4, "0", "i:x.y-z[0]:"),
    /* ---- shapes --------------------------------------------------------------------------- */
    OK("(2,3)i", D, 24, 4, "0", "(2,3)i"),
    OK("( 2 , 3 )i", D, 24, 4, "0", "(2,3)i"),
    OK("(0)i", D, 0, 4, "0", "(0)i"),
    OK("(2)3i", D, 24, 4, "0", "(2)3i"),
    OK("(2)>i", D, 8, 1, "0", ">(2)i"),
    OK("b(3)h", D, 8, 2, "0,2", "b(3)h"),
    ER("()i", D, EF, 1, "format: byte 1: expected a dimension in the shape, found ')'"),
    ER("(2,)i", D, EF, 3, "format: byte 3: expected a dimension in the shape, found ')'"),
    ER("(2", D, EF, 0, "format: byte 0: unterminated shape: missing ')'"),
    ER("(2;3)i", D, EF, 2, "format: byte 2: expected ',' or ')' in the shape, found ';'"),
    ER("(-1)i", D, EF, 1, "format: byte 1: expected a dimension in the shape, found '-'"),
    ER("3(2)i", D, EF, 1, "format: byte 1: unknown type code '('"),
    /* ---- bit fields ------------------------------------------------------------------------- */
    OK("t", D, 1, 1, "0", "t"),
    OK("1t2t5t", D, 1, 1, "0,0,0", "t2t5t"),
    OK("3t:a:7t:b:", D, 2, 1, "0,0", "3t:a:7t:b:"),
    OK("4ti", D, 8, 4, "0,4", "4ti"),
    OK("9t", D, 2, 1, "0", "9t"),
    OK("t b t", D, 3, 1, "0,1,2", "tbt"),
    ER("0t", D, EF, 0, "format: byte 0: a bit field needs a width of at least 1"),
    /* ---- pointers and functions ------------------------------------------------------------ */
    OK("&i", D, 8, 8, "0", "&i"),
    OK("&&d", D, 8, 8, "0", "&&d"),
    OK("b&T{ii}", D, 16, 8, "0,8", "b&T{ii}"),
    OK("2&i", D, 16, 8, "0", "2&i"),
    OK("&(2)i", D, 8, 8, "0", "&(2)i"),
    OK("<&i", D, 8, 1, "0", "<&i"),
    OK("&>i", D, 8, 8, "0", "&>i"),
    OK("X{ii->d}", D, 8, 8, "0", "X{ii->d}"),
    OK("X{->i}", D, 8, 8, "0", "X{->i}"),
    OK("X{ i:a: d:b: -> T{ii} }", D, 8, 8, "0", "X{i:a:d:b:->T{ii}}"),
    ER("X{i", D, EF, 3, "format: byte 3: missing '}'"),
    ER("X{->i", D, EF, 5, "format: byte 5: expected '}' after the return type of X{}, found end of string"),
    ER("X", D, EF, 1, "format: byte 1: expected '{' after 'X', found end of string"),
    ER("&", D, EF, 1, "format: byte 1: expected a type code, found end of string"),
    /* ---- the devbuf namespace --------------------------------------------------------------- */
    OK("[devbuf$bfloat16]", D, 2, 2, "0", "[devbuf$bfloat16]"),
    OK("3[devbuf$bfloat16]", D, 6, 2, "0", "3[devbuf$bfloat16]"),
    OK("(2,2)[devbuf$bfloat16]", D, 8, 2, "0", "(2,2)[devbuf$bfloat16]"),
    OK("b[devbuf$bfloat16]", D, 4, 2, "0,2", "b[devbuf$bfloat16]"),
    OK("<b[devbuf$bfloat16]", D, 3, 1, "0,1", "<b[devbuf$bfloat16]"),
    OK(">[devbuf$bfloat16]", D, 2, 1, "0", ">[devbuf$bfloat16]"),
    OK("[devbuf$float8_e3m4]", D, 1, 1, "0", NULL),
    OK("[devbuf$float8_e4m3]", D, 1, 1, "0", NULL),
    OK("[devbuf$float8_e4m3b11fnuz]", D, 1, 1, "0", NULL),
    OK("[devbuf$float8_e4m3fn]", D, 1, 1, "0", NULL),
    OK("[devbuf$float8_e4m3fnuz]", D, 1, 1, "0", NULL),
    OK("[devbuf$float8_e5m2]", D, 1, 1, "0", NULL),
    OK("[devbuf$float8_e5m2fnuz]", D, 1, 1, "0", NULL),
    OK("[devbuf$float8_e8m0fnu]", D, 1, 1, "0", NULL),
    OK("[devbuf$float6_e2m3fn]", D, 1, 1, "0", NULL),
    OK("[devbuf$float6_e3m2fn]", D, 1, 1, "0", NULL),
    OK("[devbuf$float4_e2m1fn]", D, 1, 1, "0", NULL),
    OK("[devbuf$float4_e2m1fn_x2]", D, 1, 1, "0", NULL),
    OK("[devbuf$float6_e3m2fn_x4]", D, 3, 1, "0", NULL),
    OK("[devbuf$int4]", D, 1, 1, "0", NULL),
    OK("[devbuf$uint4_x2]", D, 1, 1, "0", NULL),
    OK("[devbuf$int2_x4]", D, 1, 1, "0", NULL),
    OK("[devbuf$uint2_x8]", D, 2, 1, "0", NULL),
    OK("[devbuf$complex32]", D, 4, 2, "0", NULL),
    OK("[devbuf$datetime64(ns)]", D, 8, 8, "0", NULL),
    OK("[devbuf$timedelta64(10ms)]", D, 8, 8, "0", NULL),
    OK("[devbuf$float16]", D, 2, 2, "0", NULL),
    OK("[devbuf$int32]", D, 4, 4, "0", NULL),
    OK("[devbuf$complex128]", D, 16, 8, "0", NULL),
    OK("Z[devbuf$bfloat16]", D, 4, 2, "0", "Z[devbuf$bfloat16]"),
    OK("T{[devbuf$bfloat16]:w:i:x:}", D, 8, 4, "0", "T{[devbuf$bfloat16]:w:i:x:}"),
    ER("[devbuf$int4_x3]", D, NF, 0,
       "~'devbuf' did not understand payload 'int4_x3' (devbuf: 'int4' packs 3 elements of 4 bits"),
    ER("[devbuf$bfloat16_x2]", D, NF, 0, "~only sub-byte types can be packed, not 'bfloat16'"),
    ER("[devbuf$datetime64]", D, NF, 0, "~devbuf: datetime64 needs a unit, e.g. datetime64(ns)"),
    ER("[devbuf$datetime64(xs)]", D, NF, 0, "~unknown datetime64 unit 'xs'"),
    ER("[devbuf$datetime64[ns]]", D, NF, 0, "~write the unit as datetime64(unit)"),
    ER("[devbuf$float7]", D, NF, 0, "~devbuf: unknown type 'float7'"),
    ER("[devbuf$]", D, NF, 0, "~devbuf: empty payload"),
    ER("Z[devbuf$int4]", D, EF, 0,
       "format: byte 0: 'Z' needs a real floating-point type, and 'int4' is not one"),
    ER("[devbuf$bfloat16]]", D, EF, 17,
       "format: byte 17: unexpected ']' (a custom-dtype payload ends at the first ']')"),
    /* ---- alternatives ------------------------------------------------------------------------ */
    OK("[numpy$x;devbuf$bfloat16]", D, 2, 2, "0", "[numpy$x;devbuf$bfloat16]"),
    OK("[torch$x;devbuf$bfloat16]", D, 2, 2, "0", "[torch$x;devbuf$bfloat16]"),
    OK("[devbuf$bfloat16;torch$x]", D, 2, 2, "0", "[devbuf$bfloat16;torch$x]"),
    OK("[devbuf$nope;devbuf$int4]", D, 1, 1, "0", "[devbuf$nope;devbuf$int4]"),
    ER("[torch$x]", D, NF, 0,
       "format: byte 0: no alternative of the custom dtype is understood: 'torch' is not registered "
       "(it is defined by the 'torch' package; load a devbuf plugin or register a namespace for it)"),
    ER("[foo$x]", D, NF, 0,
       "format: byte 0: no alternative of the custom dtype is understood: 'foo' is not a known dtype id "
       "(a namespace is provided by a plugin's dtype_namespaces (a plugin may provide only those), "
       "devbuf_dtype_register() in C, or devbuf.register_dtype_namespace() in Python)"),
    ER("[foo$x;arrow.ext$y]", D, NF, 0,
       "format: byte 0: no alternative of the custom dtype is understood: 'foo' is not a known dtype "
       "id; 'arrow.ext' is not registered (it is defined by the 'pyarrow' package; load a devbuf "
       "plugin or register a namespace for it) (a namespace is provided by a plugin's "
       "dtype_namespaces (a plugin may provide only those), devbuf_dtype_register() in C, or "
       "devbuf.register_dtype_namespace() in Python)"),
    /* ---- the custom-dtype grammar ------------------------------------------------------------- */
    ER("[]", D, EF, 1, "format: byte 1: empty custom dtype '[]': expected id$payload"),
    ER("[a]", D, EF, 2, "format: byte 2: expected '$' after the dtype id 'a'"),
    ER("[$b]", D, EF, 1, "format: byte 1: empty dtype id before '$'"),
    ER("[a$b", D, EF, 0, "format: byte 0: unterminated custom dtype: missing ']'"),
    ER("[a$b;]", D, EF, 5, "format: byte 5: empty alternative: expected id$payload"),
    ER("[a$b;;c$d]", D, EF, 5, "format: byte 5: empty alternative: expected id$payload"),
    /* The draft allows a space and '[' in an id: an unknown id, not a syntax
     * error; DEVBUF_FORMAT_LINT_IDS refuses them, naming the character. */
    ER("[a b$c]", D, NF, 0, "~'a b' is not a known dtype id"),
    OK("[a b$c]i", A, 0, 0, NULL, NULL),
    ER("[a b$c]", L, EF, 2,
       "format: byte 2: lint: a space in the dtype id 'a b' (allowed by the draft, but no "
       "package name has one)"),
    ER("[a\tb$c]", D, EF, 2, "format: byte 2: 0x09 cannot appear in a dtype id (expected '$')"),
    ER("[a$b$c]", D, EF, 4, "format: byte 4: '$' cannot appear in a payload (it ends the id)"),
    ER("[a$b\x01]", D, EF, 4, "format: byte 4: byte 0x01 in a payload is not printable ASCII"),
    ER("[a$b\x80]", D, EF, 4, "format: byte 4: byte 0x80 in a payload is not printable ASCII"),
    ER("[a[b$c]", D, NF, 0, "~'a[b' is not a known dtype id"),
    ER("[devbuf$bfloat16;a[b$c]", L, EF, 18,
       "format: byte 18: lint: '[' in the dtype id 'a[b' (allowed by the draft, but no package "
       "name has one)"),
    ER("[aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa$x]", D, EF, 1,
       "format: byte 1: dtype id longer than 63 bytes"),
    /* payload characters: spaces and '[' are kept verbatim (testns: itemsize = length) */
    OK("[testns$ a b ]", D, 5, 1, "0", "[testns$ a b ]"),
    OK("[testns$a[b]", D, 3, 1, "0", "[testns$a[b]"),
    OK("[testns$a(b)c{d}:e:!]", D, 12, 1, "0", "[testns$a(b)c{d}:e:!]"),
    ER("[testns$]", D, NF, 0, "~'testns' did not understand payload '' (testns: empty payload)"),
    OK("[testns$]", A, 0, 0, "0", "[testns$]"),
    /* ---- struct$ and buffer$ --------------------------------------------------------------------- */
    OK("[struct$ib]", D, 5, 1, "0", "[struct$ib]"),
    OK("[struct$<ib]", D, 5, 1, "0", "[struct$<ib]"),
    OK("[struct$ii]i", D, 12, 4, "0,8", "[struct$ii]i"),
    OK(">[struct$ih]", D, 6, 1, "0", ">[struct$ih]"),
    OK("[struct$i i]", D, 8, 4, "0", "[struct$i i]"),
    OK("[struct$]", D, 0, 1, "0", "[struct$]"),
    ER("[struct$T{i}]", D, EF, 8, "format: byte 8: 'T' is not a struct format code"),
    ER("[struct$3 i]", D, EF, 9, "format: byte 9: expected a type code after the count, found ' '"),
    ER("[struct$^i]", D, EF, 8, "~'^' is not a struct-module prefix"),
    OK("[buffer$ib]", D, 8, 4, "0", "[buffer$ib]"),
    OK("[buffer$T{d:X:d:Y:}]", D, 16, 8, "0", "[buffer$T{d:X:d:Y:}]"),
    OK("[struct$x;buffer$i]", D, 1, 1, "0", "[struct$x;buffer$i]"),
    OK("[struct$T;buffer$i]", D, 4, 4, "0", "[struct$T;buffer$i]"),
    ER("[struct$T;buffer$y]", D, EF, 8, "format: byte 8: 'T' is not a struct format code"),
    ER("[buffer$i[devbuf$x]", D, EF, 16, "format: byte 16: '$' cannot appear in a payload (it ends the id)"),
    ER("[buffer$i[]", D, EF, 9,
       "format: byte 9: custom dtypes '[...]' are not allowed here (plain PEP 3118 only)"),
    ER("[buffer$T{i]", D, EF, 11, "format: byte 11: missing '}'"),
    ER("[struct$T;torch$y]", D, NF, 0,
       "~'struct' payload is not a valid struct format (byte 8: 'T' is not a struct format code); "
       "'torch' is not registered"),
    /* ---- the draft's own examples ---------------------------------------------------------------- */
    OK("[mymodule$coords2d;buffer$T{d:X:d:Y:}]", D, 16, 8, "0", "[mymodule$coords2d;buffer$T{d:X:d:Y:}]"),
    OK("[numpy$numpy.dtypes:TimeDelta64:...]", D, 8, 8, "0", NULL),
    OK(">[numpy$numpy.dtypes:TimeDelta64:...]", D, 8, 1, "0", NULL),
    OK("[numpy$numpy.dtypes:StringDType:<hex-encoded-pointer-to-dtype-instance>]", D, 16, 8, "0", NULL),
    ER("[numpy$]", D, NF, 0, "~'numpy' did not understand payload ''"),
    ER("[numpy$module:DTypeClass:<dtype specific>]", D, NF, 0,
       "~'numpy' did not understand payload 'module:DTypeClass:<dtype specific>'"),
    ER("[numpy$...;torch$...]", D, NF, 0, "~'numpy' did not understand payload '...'"),
    ER("[cpp$std::bfloat16_t]", D, NF, 0, "~'cpp' is not a known dtype id"),
    OK("Z[numpy$numpy.dtypes:Float16DType:]", D, 4, 2, "0", NULL),
    /* ---- ALLOW_UNKNOWN ---------------------------------------------------------------------------- */
    OK("[torch$x]", A, 0, 0, "0", "[torch$x]"),
    OK("i[torch$x;foo$]", A, 0, 0, "0,4", "i[torch$x;foo$]"),
    /* ---- NO_CUSTOM -------------------------------------------------------------------------------- */
    ER("[devbuf$bfloat16]", NC, EF, 0,
       "format: byte 0: custom dtypes '[...]' are not allowed here (plain PEP 3118 only)"),
    ER("Z[devbuf$bfloat16]", NC, EF, 1,
       "format: byte 1: custom dtypes '[...]' are not allowed here (plain PEP 3118 only)"),
    /* ---- other errors -------------------------------------------------------------------------------- */
    ER("y", D, EF, 0, "format: byte 0: unknown type code 'y'"),
    ER("\x01", D, EF, 0, "format: byte 0: unknown type code 0x01"),
    ER("Zx", D, EF, 1, "format: byte 1: expected 'e', 'f', 'd', 'g' or '[' after 'Z', found 'x'"),
    ER("Z", D, EF, 1, "format: byte 1: expected 'e', 'f', 'd', 'g' or '[' after 'Z', found end of string"),
    ER("99999999999999999999i", D, EF, 0, "format: byte 0: number too large"),
    ER("9223372036854775807d", D, EF, 19, "format: byte 19: item size overflows"),
    ER("(4294967296,4294967296)i", D, EF, 12, "format: byte 12: item size overflows"),
    ER("4611686018427387904b4611686018427387904b", D, EF, 20, "format: byte 20: item size overflows"),
    {"i\0i", 3, D, -1, 0, NULL, NULL, EF, 1, "format: byte 1: unknown type code 0x00"},
    /* ---- struct mode: CPython's struct module -------------------------------------------------------- */
    OK("ib", S, 5, 1, "0,4", "ib"),
    OK("llh0l", S, 24, 8, "0,8,16,24", "llh0l"),
    OK("<ib", S, 5, 1, "0,4", "<ib"),
    OK("@ib", S, 5, 1, "0,4", "ib"),
    OK("!I", S, 4, 1, "0", ">I"),
    OK("=q", S, 8, 1, "0", "=q"),
    OK("", S, 0, 1, "", ""),
    OK("<", S, 0, 1, "", ""),
    OK(" i", S, 4, 4, "0", "i"),
    OK("i ", S, 4, 4, "0", "i"),
    OK("<  i", S, 4, 1, "0", "<i"),
    OK("i\tb", S, 5, 1, "0,4", "ib"),
    OK("3sd", S, 16, 8, "0,8", "3sd"),
    OK("0s", S, 0, 1, "0", "0s"),
    OK("5p", S, 5, 1, "0", "5p"),
    OK("be", S, 4, 2, "0,2", "be"),
    OK("xi", S, 8, 4, "0,4", "xi"),
    OK("b0i", S, 4, 4, "0,4", "b0i"),
    OK("ii0l", S, 8, 8, "0,4,8", "ii0l"),
    OK("03i", S, 12, 4, "0", "3i"),
    OK("nNP", S, 24, 8, "0,8,16", "nNP"),
    OK("<?", S, 1, 1, "0", "<?"),
    ER(" <i", S, EF, 1, "format: byte 1: byte-order character '<' is only allowed at the start in struct mode"),
    ER("i<", S, EF, 1, "format: byte 1: byte-order character '<' is only allowed at the start in struct mode"),
    ER("^i", S, EF, 0, "format: byte 0: '^' is not a struct-module prefix (struct mode knows @ = < > !)"),
    ER("<n", S, EF, 1, "format: byte 1: 'n' is only allowed with native size ('@' or no prefix)"),
    ER("<P", S, EF, 1, "format: byte 1: 'P' is only allowed with native size ('@' or no prefix)"),
    ER("g", S, EF, 0, "format: byte 0: 'g' is not a struct format code"),
    /* Complex: CPython 3.14's F/D and 3.15's Zf/Zd (gh-148675), nothing else after Z. */
    OK("Zd", S, 16, 8, "0", "Zd"),
    OK("Zf", S, 8, 4, "0", "Zf"),
    OK("F", S, 8, 4, "0", "F"),
    OK("D", S, 16, 8, "0", "D"),
    OK("bD", S, 24, 8, "0,8", "bD"),
    OK("bZf", S, 12, 4, "0,4", "bZf"),
    OK("<bD", S, 17, 1, "0,1", "<bD"),
    OK(">2Zf", S, 16, 1, "0", ">2Zf"),
    OK("!F", S, 8, 1, "0", ">F"),
    ER("Zg", S, EF, 1, "format: byte 1: struct (CPython 3.15) knows only 'Zf' and 'Zd' after 'Z', found 'g'"),
    ER("Ze", S, EF, 1, "format: byte 1: struct (CPython 3.15) knows only 'Zf' and 'Zd' after 'Z', found 'e'"),
    ER("Z", S, EF, 1, "format: byte 1: struct (CPython 3.15) knows only 'Zf' and 'Zd' after 'Z', found end of string"),
    ER("Z[devbuf$bfloat16]", S, EF, 1, "format: byte 1: struct (CPython 3.15) knows only 'Zf' and 'Zd' after 'Z', found '['"),
    OK("F", D, 8, 4, "0", "F"),
    OK("D", D, 16, 8, "0", "D"),
    OK("bF", D, 12, 4, "0,4", "bF"),
    OK("<D", D, 16, 1, "0", "<D"),
    OK("Zf", N, 8, 4, "0", "Zf"),
    OK("Zg", N, 32, 16, "0", "Zg"),
    OK(">Zf", N, 8, 1, "0", ">Zf"),
    ER("F", N, EF, 0, "format: byte 0: 'F' is not supported in NumPy mode: NumPy writes complex as 'Zf'"),
    ER("<D", N, EF, 1, "format: byte 1: 'D' is not supported in NumPy mode: NumPy writes complex as 'Zd'"),
    ER("T{i}", S, EF, 0, "format: byte 0: 'T' is not a struct format code"),
    ER("i:a:", S, EF, 1, "format: byte 1: ':' is not a struct format code"),
    ER("(2)i", S, EF, 0, "format: byte 0: '(' is not a struct format code"),
    ER("[devbuf$bfloat16]", S, EF, 0, "format: byte 0: '[' is not a struct format code"),
    ER("3", S, EF, 1, "format: byte 1: expected a type code after the count, found end of string"),
    ER("3 i", S, EF, 1, "format: byte 1: expected a type code after the count, found ' '"),
    ER("+3i", S, EF, 0, "format: byte 0: '+' is not a struct format code"),
    {"i\0", 2, S, -1, 0, NULL, NULL, EF, 1, "format: byte 1: 0x00 is not a struct format code"},
    /* ---- NumPy mode: _dtype_from_pep3118's layout ------------------------------------------------------ */
    OK("ib", N, 8, 4, "0,4", "ib"),
    OK("<ib", N, 5, 1, "0,4", "<ib"),
    OK("^ib", N, 5, 1, "0,4", "^ib"),
    OK("T{ib}b", N, 12, 4, "0,8", "T{ib}b"),
    OK("T{i=b}b", N, 6, 1, "0,5", "T{i=b}b"),
    OK("T{>i}i", N, 8, 1, "0,4", "T{>i}i"),
    OK("2T{ib}", N, 16, 4, "0", "2T{ib}"),
    OK("3x", N, 3, 1, "0", "3x"),
    OK("xi", N, 8, 4, "0,4", "xi"),
    OK("(2)>i", N, 8, 1, "0", "(2)>i"),
    OK("i::", N, 4, 4, "0", NULL),
    OK("i:a:i:b:", N, 8, 4, "0,4", "i:a:i:b:"),
    OK("3w", N, 12, 4, "0", "3w"),
    OK("<Zd", N, 16, 1, "0", "<Zd"),
    OK("[devbuf$bfloat16]b", N, 4, 2, "0,2", "[devbuf$bfloat16]b"),
    ER(">(2)i", N, EF, 1, "format: byte 1: unknown type code '('"),
    /* NumPy mode: whitespace outside :name: is stripped first, as NumPy's
     * buffer import does; error offsets and src_offset stay the caller's. */
    OK("i ", N, 4, 4, NULL, NULL),
    OK("3 i", N, 12, 4, NULL, NULL),
    OK("1 2 b", N, 12, 1, NULL, NULL),
    OK("T {i :a b: Z f}", N, 12, 4, NULL, NULL),
    ER("i  y", N, EF, 3, "format: byte 3: unknown type code 'y'"),
    ER("( 2 ) 0i", N, EF, 0,
       "format: byte 0: a shape over an item of size 0 (count 0 or an empty type) is refused in "
       "NumPy mode, as np.dtype refuses an unsized base with a shape"),
    /* np.dtype((base, shape)) refuses a base of size 0 that is not a struct */
    ER("(0)0c", N, EF, 0, "~np.dtype refuses an unsized base"),
    ER("(2)0x", N, EF, 0, "~np.dtype refuses an unsized base"),
    ER("(2)0s", N, EF, 0, "~np.dtype refuses an unsized base"),
    ER("(2)0T{i}", N, EF, 0, "~np.dtype refuses an unsized base"),
    OK("(0)i", N, 0, 4, NULL, NULL),
    OK("(2)T{}", N, 0, 1, NULL, NULL),
    OK("(2)T{0i}", N, 0, 4, NULL, NULL),
    OK("(0)0c", D, 0, 1, NULL, NULL),
    ER("u", N, EF, 0, "format: byte 0: 'u' is not supported in NumPy mode"),
    ER("P", N, EF, 0, "format: byte 0: 'P' is not supported in NumPy mode"),
    ER("&i", N, EF, 0, "format: byte 0: '&' is not supported in NumPy mode"),
    ER("t", N, EF, 0, "format: byte 0: 't' is not supported in NumPy mode"),
    ER("Ze", N, EF, 0, "format: byte 0: 'Ze' (complex of half) is not supported in NumPy mode"),
    ER("<g", N, EF, 1, "format: byte 1: 'g' has no standard size in NumPy mode: use it with '@' or '^'"),
    ER("i<", N, EF, 2, "format: byte 2: a byte-order character must be followed by a type in NumPy mode"),
    ER("<>i", N, EF, 1, "format: byte 1: '>' is not allowed here in NumPy mode"),
    ER("i:a:i:a:", N, EF, 6, "format: byte 6: duplicate field name 'a'"),
};

/* ---- test namespaces --------------------------------------------------------- */
/* testns: itemsize = payload length, alignment 1; refuses an empty payload. */
static int testns_interpret(void *ctx, const char *payload, size_t len, devbuf_dtype_desc *out,
                            devbuf_error *err) {
  (void)ctx;
  (void)payload;
  if (len == 0) return devbuf_error_set(err, DEVBUF_ENOTFOUND, "testns: empty payload");
  out->kind = DEVBUF_KIND_OPAQUE;
  out->itemsize = (uint32_t)len;
  out->alignment = 1;
  out->bits = (uint32_t)(8 * len);
  snprintf(out->canonical, sizeof out->canonical, "testns");
  return DEVBUF_OK;
}
static const devbuf_dtype_namespace TESTNS = {sizeof(devbuf_dtype_namespace), 0, "testns",
                                              "devbuf-tests", "payload length", testns_interpret,
                                              NULL};

/* A stand-in for NumPy's namespace, understanding the draft's examples. */
static int fake_numpy(void *ctx, const char *p, size_t n, devbuf_dtype_desc *out,
                      devbuf_error *err) {
  (void)ctx;
  static const char td[] = "numpy.dtypes:TimeDelta64:";
  static const char sd[] = "numpy.dtypes:StringDType:";
  static const char hf[] = "numpy.dtypes:Float16DType:";
  if (n >= sizeof td - 1 && memcmp(p, td, sizeof td - 1) == 0) {
    out->kind = DEVBUF_KIND_TIMEDELTA, out->itemsize = 8, out->alignment = 8, out->bits = 64;
    return DEVBUF_OK;
  }
  if (n >= sizeof sd - 1 && memcmp(p, sd, sizeof sd - 1) == 0) {
    out->kind = DEVBUF_KIND_STRING, out->itemsize = 16, out->alignment = 8, out->bits = 128;
    return DEVBUF_OK;
  }
  if (n >= sizeof hf - 1 && memcmp(p, hf, sizeof hf - 1) == 0) {
    out->kind = DEVBUF_KIND_FLOAT, out->itemsize = 2, out->alignment = 2, out->bits = 16;
    return DEVBUF_OK;
  }
  return devbuf_error_set(err, DEVBUF_ENOTFOUND, "fake numpy: no such dtype");
}
static const devbuf_dtype_namespace FAKE_NUMPY = {sizeof(devbuf_dtype_namespace), 0, "numpy",
                                                  "numpy", "test double", fake_numpy, NULL};

/* ---- checks -------------------------------------------------------------------- */
static size_t vlen(const vec *v) { return v->len ? v->len : strlen(v->fmt); }

static void offsets_of(const devbuf_format *f, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = '\0';
  for (const devbuf_format_field *x = f->fields; x != NULL; x = x->next)
    n += (size_t)snprintf(buf + n, cap - n, "%s%llu", x == f->fields ? "" : ",",
                          (unsigned long long)x->offset);
}

static int nvec_checked;

static void check_vec(const vec *v) {
  size_t len = vlen(v);
  devbuf_format f;
  f.struct_size = sizeof f;
  devbuf_error err;
  devbuf_error_clear(&err);
  int rc = devbuf_format_parse(v->fmt, len, v->flags, &f, &err);
  uint64_t fs = 0, fa = 0;
  size_t foff = 0;
  devbuf_error ferr;
  devbuf_error_clear(&ferr);
  int frc = devbuf_format_itemsize(v->fmt, len, v->flags, &fs, &fa, &foff, &ferr);
  CHECK(rc == frc, "[%s] parse rc %d but itemsize rc %d (%s | %s)", v->fmt, rc, frc, err.message,
        ferr.message);
  if (v->size < 0) {
    CHECK(rc == v->code, "[%s] flags %u: expected error %d, got %d (%s)", v->fmt, v->flags, v->code,
          rc, err.message);
    CHECK((long)f.error_offset == v->off, "[%s] error offset %llu, expected %ld (%s)", v->fmt,
          (unsigned long long)f.error_offset, v->off, err.message);
    CHECK((long)foff == v->off, "[%s] fast-path error offset %zu, expected %ld", v->fmt, foff, v->off);
    if (v->msg && v->msg[0] == '~') {
      CHECK_HAS(err.message, v->msg + 1);
    } else if (v->msg) {
      CHECK(strcmp(err.message, v->msg) == 0, "[%s]\n    got      '%s'\n    expected '%s'", v->fmt,
            err.message, v->msg);
    }
    CHECK(strcmp(err.message, ferr.message) == 0, "[%s] messages differ: '%s' vs '%s'", v->fmt,
          err.message, ferr.message);
    devbuf_format_release(&f);
    return;
  }
  CHECK(rc == DEVBUF_OK, "[%s] flags %u: parse failed: %s", v->fmt, v->flags, err.message);
  if (rc != DEVBUF_OK) {
    devbuf_format_release(&f);
    return;
  }
  CHECK(f.itemsize == (uint64_t)v->size, "[%s] itemsize %llu, expected %lld", v->fmt,
        (unsigned long long)f.itemsize, v->size);
  CHECK(f.alignment == v->align, "[%s] alignment %llu, expected %u", v->fmt,
        (unsigned long long)f.alignment, v->align);
  CHECK(fs == f.itemsize && fa == f.alignment, "[%s] fast path %llu/%llu vs parse %llu/%llu",
        v->fmt, (unsigned long long)fs, (unsigned long long)fa, (unsigned long long)f.itemsize,
        (unsigned long long)f.alignment);
  if (v->offs) {
    char got[256];
    offsets_of(&f, got, sizeof got);
    CHECK(strcmp(got, v->offs) == 0, "[%s] offsets '%s', expected '%s'", v->fmt, got, v->offs);
  }
  char canon[512];
  size_t need = devbuf_format_print(&f, canon, sizeof canon);
  CHECK(need < sizeof canon, "[%s] canonical too long", v->fmt);
  if (v->canon)
    CHECK(strcmp(canon, v->canon) == 0, "[%s] canonical '%s', expected '%s'", v->fmt, canon,
          v->canon);
  /* Round trip: the canonical spelling means the same thing and is a fixed point. */
  devbuf_format g;
  g.struct_size = sizeof g;
  rc = devbuf_format_parse(canon, strlen(canon), v->flags, &g, &err);
  CHECK(rc == DEVBUF_OK, "[%s] canonical '%s' does not parse: %s", v->fmt, canon, err.message);
  if (rc == DEVBUF_OK) {
    CHECK(g.itemsize == f.itemsize && g.alignment == f.alignment,
          "[%s] canonical '%s' gives %llu/%llu instead of %llu/%llu", v->fmt, canon,
          (unsigned long long)g.itemsize, (unsigned long long)g.alignment,
          (unsigned long long)f.itemsize, (unsigned long long)f.alignment);
    char a[256], b[256];
    offsets_of(&f, a, sizeof a);
    offsets_of(&g, b, sizeof b);
    CHECK(strcmp(a, b) == 0, "[%s] canonical offsets '%s' vs '%s'", v->fmt, b, a);
    char again[512];
    devbuf_format_print(&g, again, sizeof again);
    CHECK(strcmp(again, canon) == 0, "[%s] print not idempotent: '%s' then '%s'", v->fmt, canon,
          again);
  }
  devbuf_format_release(&g);
  /* The flattened list covers the item without overlaps and in order. */
  size_t count = 0;
  CHECK_OK(devbuf_format_flatten(&f, NULL, 0, &count, &err), &err);
  if (count > 0 && count < 100000) {
    devbuf_format_item *items = (devbuf_format_item *)calloc(count, sizeof *items);
    size_t c2 = 0;
    CHECK_OK(devbuf_format_flatten(&f, items, count, &c2, &err), &err);
    CHECK(c2 == count, "[%s] flatten count changed", v->fmt);
    for (size_t i = 0; i < count; i++) {
      CHECK(items[i].field != NULL, "[%s] item %zu has no field", v->fmt, i);
      CHECK(items[i].offset + items[i].field->size <= f.itemsize || (f.info & DEVBUF_FORMAT_HAS_UNKNOWN),
            "[%s] item %zu at %llu+%llu overruns %llu", v->fmt, i,
            (unsigned long long)items[i].offset, (unsigned long long)items[i].field->size,
            (unsigned long long)f.itemsize);
      if (i > 0 && items[i].field->kind != DEVBUF_FIELD_BITS)
        CHECK(items[i].offset >= items[i - 1].offset, "[%s] items out of order", v->fmt);
    }
    free(items);
  }
  devbuf_format_release(&f);
}

static void test_vectors(void) {
  for (size_t i = 0; i < sizeof VECS / sizeof VECS[0]; i++) {
    check_vec(&VECS[i]);
    nvec_checked++;
  }
  CHECK(nvec_checked >= 150, "only %d vectors", nvec_checked);
  printf("     %d vectors\n", nvec_checked);
}

/* Depth limit: 64 nested structs parse, 65 do not. */
static void test_depth(void) {
  char buf[1024];
  for (int depth = 64; depth <= 65; depth++) {
    size_t n = 0;
    for (int i = 0; i < depth; i++) buf[n++] = 'T', buf[n++] = '{';
    buf[n++] = 'i';
    for (int i = 0; i < depth; i++) buf[n++] = '}';
    uint64_t sz = 0;
    devbuf_error err;
    int rc = devbuf_format_itemsize(buf, n, 0, &sz, NULL, NULL, &err);
    if (depth == 64) {
      CHECK(rc == DEVBUF_OK && sz == 4, "64 levels: rc %d %s", rc, err.message);
    } else {
      CHECK(rc == DEVBUF_EFORMAT, "65 levels accepted");
      CHECK_HAS(err.message, "nested deeper than 64 levels");
    }
  }
  /* Deep pointers too. */
  memset(buf, '&', 200);
  buf[200] = 'i';
  devbuf_error err;
  CHECK(devbuf_format_itemsize(buf, 201, 0, NULL, NULL, NULL, &err) == DEVBUF_EFORMAT,
        "200 nested pointers accepted");
}

/* A format too big for the inline arena spills to the heap and still works. */
static void test_big(void) {
  size_t cap = 20000 * 12;
  char *buf = (char *)malloc(cap);
  size_t n = 0;
  for (int i = 0; i < 20000; i++) n += (size_t)snprintf(buf + n, cap - n, "i:f%d:", i);
  devbuf_format f = DEVBUF_FORMAT_INIT;
  devbuf_error err;
  CHECK_OK(devbuf_format_parse(buf, n, 0, &f, &err), &err);
  CHECK(f.itemsize == 80000 && f.nfields == 20000, "itemsize %llu nfields %u",
        (unsigned long long)f.itemsize, f.nfields);
  CHECK(f.heap_ != NULL, "expected a heap spill");
  size_t need = devbuf_format_print(&f, NULL, 0);
  CHECK(need == n, "print length %zu vs %zu", need, n);
  devbuf_format_release(&f);
  CHECK(f.heap_ == NULL, "release left heap");
  free(buf);
}

/* The tree: names, offsets, shapes, children, custom alternatives. */
static void test_tree(void) {
  devbuf_format f = DEVBUF_FORMAT_INIT;
  devbuf_error err;
  const char *s = "i:ival: T{H:sval:B:bval:B:cval:}:sub: (4)T{H:a:}:subs: "
                  "[torch$t;devbuf$bfloat16]:bf: [mymodule$c2;buffer$T{d:X:d:Y:}]:pt:";
  CHECK_OK(devbuf_format_parse(s, strlen(s), 0, &f, &err), &err);
  CHECK(f.nfields == 5, "nfields %u", f.nfields);
  const devbuf_format_field *x = f.fields;
  CHECK(strcmp(x->name, "ival") == 0 && x->offset == 0 && x->kind == DEVBUF_FIELD_SCALAR &&
            x->dtype_kind == DEVBUF_KIND_INT && strcmp(x->code, "i") == 0,
        "ival");
  x = x->next;
  CHECK(strcmp(x->name, "sub") == 0 && x->offset == 4 && x->kind == DEVBUF_FIELD_STRUCT &&
            x->nchildren == 3 && x->size == 4,
        "sub");
  const devbuf_format_field *c = x->children;
  CHECK(c && strcmp(c->name, "sval") == 0 && c->offset == 0 && c->parent == x, "sval");
  c = c->next;
  CHECK(c && strcmp(c->name, "bval") == 0 && c->offset == 2, "bval");
  c = c->next;
  CHECK(c && strcmp(c->name, "cval") == 0 && c->offset == 3 && c->next == NULL, "cval");
  x = x->next;
  CHECK(strcmp(x->name, "subs") == 0 && x->offset == 8 && x->ndim == 1 && x->shape[0] == 4 &&
            x->elem_size == 2 && x->size == 8,
        "subs");
  x = x->next;
  CHECK(strcmp(x->name, "bf") == 0 && x->offset == 16 && x->kind == DEVBUF_FIELD_CUSTOM, "bf");
  const devbuf_format_custom *cu = x->custom;
  CHECK(cu && cu->nalts == 2 && cu->chosen == 1, "alts");
  if (cu && cu->nalts == 2) {
    CHECK(strcmp(cu->alts[0].id, "torch") == 0 && strcmp(cu->alts[0].payload, "t") == 0 &&
              cu->alts[0].state == DEVBUF_ALT_UNKNOWN_ID,
          "alt0 state %d", cu->alts[0].state);
    CHECK(strcmp(cu->alts[1].id, "devbuf") == 0 && cu->alts[1].state == DEVBUF_ALT_CHOSEN &&
              cu->alts[1].offset == (uint32_t)(strstr(s, "devbuf$") - s),
          "alt1");
    CHECK(strcmp(cu->desc.canonical, "bfloat16") == 0 && cu->desc.dlpack_code == DEVBUF_DLDT_BFLOAT &&
              cu->desc.dlpack_bits == 16 && cu->desc.kind == DEVBUF_KIND_FLOAT,
          "bfloat16 desc");
  }
  x = x->next;
  CHECK(strcmp(x->name, "pt") == 0 && x->offset == 24 && x->size == 16, "pt at %llu",
        (unsigned long long)x->offset);
  CHECK(x->custom && x->custom->chosen == 1 && x->custom->alts[1].state == DEVBUF_ALT_CHOSEN &&
            x->custom->alts[0].state == DEVBUF_ALT_UNKNOWN_ID,
        "pt alts");
  CHECK(x->nchildren == 1 && x->children && x->children->kind == DEVBUF_FIELD_STRUCT &&
            x->children->nchildren == 2 && strcmp(x->children->children->name, "X") == 0 &&
            strcmp(x->children->children->next->name, "Y") == 0 &&
            x->children->children->next->offset == 8,
        "buffer$ children");
  CHECK(f.itemsize == 40 && f.alignment == 8, "total %llu", (unsigned long long)f.itemsize);
  CHECK(f.info & DEVBUF_FORMAT_HAS_CUSTOM, "info");
  /* Flattened: ival, sval, bval, cval, subs[0..3].a, bf, X, Y */
  devbuf_format_item items[16];
  size_t n = 0;
  CHECK_OK(devbuf_format_flatten(&f, items, 16, &n, &err), &err);
  CHECK(n == 11, "flat count %zu", n);
  uint64_t want[] = {0, 4, 6, 7, 8, 10, 12, 14, 16, 24, 32};
  for (size_t i = 0; i < 11 && i < n; i++)
    CHECK(items[i].offset == want[i], "item %zu at %llu, want %llu", i,
          (unsigned long long)items[i].offset, (unsigned long long)want[i]);
  /* buffer$ children are expanded inside the custom field: X at 24, Y at 32. */
  devbuf_format_release(&f);

  /* Bit fields and byte order records. */
  CHECK_OK(devbuf_format_parse(">3t:a:7t:b:i:c:", 15, 0, &f, &err), &err);
  x = f.fields;
  CHECK(x->kind == DEVBUF_FIELD_BITS && x->offset == 0 && x->bit_offset == 0 && x->count == 3 &&
            x->big_endian == 1 && x->byteorder == '>',
        "a");
  x = x->next;
  CHECK(x->offset == 0 && x->bit_offset == 3 && x->count == 7 && x->size == 2, "b %llu/%u/%llu",
        (unsigned long long)x->offset, x->bit_offset, (unsigned long long)x->size);
  x = x->next;
  CHECK(x->offset == 2 && x->size == 4, "c at %llu", (unsigned long long)x->offset);
  CHECK(f.info & DEVBUF_FORMAT_NON_NATIVE, "non-native flag");
  devbuf_format_release(&f);

  /* Pointers and functions. */
  CHECK_OK(devbuf_format_parse("&(2)d:p:X{i:a:->d}:fn:", 22, 0, &f, &err), &err);
  x = f.fields;
  CHECK(x->kind == DEVBUF_FIELD_POINTER && x->pointee && x->pointee->ndim == 1 &&
            x->pointee->size == 16 && strcmp(x->pointee->code, "d") == 0 && x->pointee->parent == x,
        "pointer");
  x = x->next;
  CHECK(x->kind == DEVBUF_FIELD_FUNCTION && x->nchildren == 1 &&
            strcmp(x->children->name, "a") == 0 && x->pointee && strcmp(x->pointee->code, "d") == 0,
        "function");
  CHECK(f.info & DEVBUF_FORMAT_HAS_POINTERS, "pointer flag");
  devbuf_format_release(&f);
}

static void test_caret(void) {
  char buf[256];
  size_t n = devbuf_format_caret("T{i:a:y}", 8, 6, buf, sizeof buf);
  CHECK(strcmp(buf, "T{i:a:y}\n      ^") == 0, "got '%s'", buf);
  CHECK(n == strlen(buf), "length %zu", n);
  n = devbuf_format_caret("ab\x01", 3, 2, buf, sizeof buf);
  CHECK(strcmp(buf, "ab?\n  ^") == 0, "got '%s'", buf);
  n = devbuf_format_caret("abc", 3, 3, buf, sizeof buf);
  CHECK(strcmp(buf, "abc\n   ^") == 0, "end-of-string caret '%s'", buf);
  /* Truncation behaves like snprintf. */
  n = devbuf_format_caret("T{i:a:y}", 8, 6, buf, 5);
  CHECK(strcmp(buf, "T{i:") == 0 && n == 16, "truncated '%s' %zu", buf, n);
  /* A long string is windowed around the offset. */
  char longf[300];
  memset(longf, 'i', sizeof longf);
  longf[200] = 'y';
  n = devbuf_format_caret(longf, 300, 200, buf, sizeof buf);
  const char *nl = strchr(buf, '\n');
  CHECK(nl != NULL && strncmp(buf, "...", 3) == 0 && strncmp(nl - 3, "...", 3) == 0,
        "window marks '%s'", buf);
  if (nl) {
    const char *caret = strchr(nl, '^');
    CHECK(caret && buf[caret - nl - 1] == 'y', "caret not under 'y': '%s'", buf);
  }
  /* Through a real error. */
  devbuf_format f = DEVBUF_FORMAT_INIT;
  devbuf_error err;
  const char *bad = "T{i:a:[devbuf$nope]}";
  CHECK(devbuf_format_parse(bad, strlen(bad), 0, &f, &err) == DEVBUF_ENOTFOUND, "nope");
  devbuf_format_caret(bad, strlen(bad), (size_t)f.error_offset, buf, sizeof buf);
  CHECK(strcmp(buf, "T{i:a:[devbuf$nope]}\n      ^") == 0, "got '%s'", buf);
  devbuf_format_release(&f);
}

static void test_print_truncation(void) {
  devbuf_format f = DEVBUF_FORMAT_INIT;
  devbuf_error err;
  CHECK_OK(devbuf_format_parse("<i:abc:", 7, 0, &f, &err), &err);
  char b[4];
  size_t n = devbuf_format_print(&f, b, sizeof b);
  CHECK(n == 7 && strcmp(b, "<i:") == 0, "'%s' %zu", b, n);
  CHECK(devbuf_format_print(&f, NULL, 0) == 7, "NULL buffer");
  devbuf_format_release(&f);
}

static void test_abi_and_alloc(void) {
  devbuf_format f;
  f.struct_size = 12;
  devbuf_error err;
  CHECK(devbuf_format_parse("i", 1, 0, &f, &err) == DEVBUF_EABI, "struct_size not checked");
  CHECK_HAS(err.message, "struct_size is 12");
  devbuf_format *h = NULL;
  size_t off = 99;
  CHECK_OK(devbuf_format_parse_alloc("T{ii}:p:", 8, 0, &h, &off, &err), &err);
  CHECK(h && h->itemsize == 8 && off == 0, "alloc");
  devbuf_format_free(h);
  CHECK(devbuf_format_parse_alloc("ii}", 3, 0, &h, &off, &err) == DEVBUF_EFORMAT && h == NULL &&
            off == 2,
        "alloc error off %zu", off);
  CHECK(devbuf_format_itemsize("i", 1, 3, NULL, NULL, NULL, &err) == DEVBUF_EINVAL, "bad mode");
  devbuf_format_free(NULL);
  devbuf_format_release(NULL);
}

static void test_dlpack(void) {
  static const struct {
    uint8_t code, bits;
    const char *fmt;
  } T[] = {
      {0, 8, "b"},    {0, 16, "h"},   {0, 32, "i"},   {0, 64, "q"},   {1, 8, "B"},
      {1, 16, "H"},   {1, 32, "I"},   {1, 64, "Q"},   {2, 16, "e"},   {2, 32, "f"},
      {2, 64, "d"},   {6, 8, "?"},    {5, 64, "Zf"},  {5, 128, "Zd"},
      {4, 16, "[devbuf$bfloat16]"},   {5, 32, "[devbuf$complex32]"},
      {7, 8, "[devbuf$float8_e3m4]"}, {8, 8, "[devbuf$float8_e4m3]"},
      {9, 8, "[devbuf$float8_e4m3b11fnuz]"}, {10, 8, "[devbuf$float8_e4m3fn]"},
      {11, 8, "[devbuf$float8_e4m3fnuz]"}, {12, 8, "[devbuf$float8_e5m2]"},
      {13, 8, "[devbuf$float8_e5m2fnuz]"}, {14, 8, "[devbuf$float8_e8m0fnu]"},
      {15, 6, "[devbuf$float6_e2m3fn_x4]"}, {16, 6, "[devbuf$float6_e3m2fn_x4]"},
      {17, 4, "[devbuf$float4_e2m1fn_x2]"}, {0, 4, "[devbuf$int4_x2]"},
      {1, 4, "[devbuf$uint4_x2]"}, {0, 2, "[devbuf$int2_x4]"}, {1, 2, "[devbuf$uint2_x4]"},
  };
  devbuf_error err;
  for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
    char buf[64];
    size_t need = 0;
    CHECK_OK(devbuf_format_from_dlpack(T[i].code, T[i].bits, 1, buf, sizeof buf, &need, &err), &err);
    CHECK(strcmp(buf, T[i].fmt) == 0 && need == strlen(buf), "(%u,%u) -> '%s', want '%s'",
          T[i].code, T[i].bits, buf, T[i].fmt);
    /* and back */
    devbuf_format f = DEVBUF_FORMAT_INIT;
    CHECK_OK(devbuf_format_parse(buf, strlen(buf), 0, &f, &err), &err);
    uint8_t c = 0, b = 0;
    uint16_t l = 0;
    CHECK_OK(devbuf_format_to_dlpack(&f, &c, &b, &l, &err), &err);
    CHECK(c == T[i].code && b == T[i].bits && l == 1, "'%s' -> (%u,%u,%u)", buf, c, b, l);
    devbuf_format_release(&f);
  }
  /* Every complex spelling maps to DLPack complex64/complex128, in every mode
   * that takes it (CPython 3.14 F/D, 3.15 and NumPy Zf/Zd). */
  static const struct {
    const char *fmt;
    unsigned mode;
    uint8_t bits;
  } CX[] = {{"F", 0, 64},   {"D", 0, 128},  {"Zf", 0, 64},  {"Zd", 0, 128},
            {"F", 1, 64},   {"D", 1, 128},  {"Zf", 1, 64},  {"Zd", 1, 128},
            {"=D", 1, 128}, {"Zf", 2, 64},  {"Zd", 2, 128}, {"@Zd", 2, 128}};
  for (size_t i = 0; i < sizeof CX / sizeof CX[0]; i++) {
    devbuf_format f = DEVBUF_FORMAT_INIT;
    CHECK_OK(devbuf_format_parse(CX[i].fmt, strlen(CX[i].fmt), CX[i].mode, &f, &err), &err);
    uint8_t c = 0, b = 0;
    uint16_t l = 0;
    CHECK_OK(devbuf_format_to_dlpack(&f, &c, &b, &l, &err), &err);
    CHECK(c == 5 && b == CX[i].bits && l == 1 && f.itemsize * 8 == CX[i].bits,
          "'%s' mode %u -> (%u,%u,%u)", CX[i].fmt, CX[i].mode, c, b, l);
    devbuf_format_release(&f);
  }
  char buf[16];
  CHECK_OK(devbuf_format_from_dlpack(2, 32, 4, buf, sizeof buf, NULL, &err), &err);
  CHECK(strcmp(buf, "4f") == 0, "lanes '%s'", buf);
  CHECK(devbuf_format_from_dlpack(2, 8, 1, buf, sizeof buf, NULL, &err) == DEVBUF_ENOTFOUND, "float8?");
  CHECK(devbuf_format_from_dlpack(99, 8, 1, buf, sizeof buf, NULL, &err) == DEVBUF_ENOTFOUND, "99");
  /* Unpacked sub-byte: element type known, layout not DLPack's (bits*n != 8*itemsize). */
  devbuf_dtype_desc d;
  CHECK_OK(devbuf_dtype_interpret("devbuf", "int4", 4, &d, &err), &err);
  CHECK(d.dlpack_code == 0 && d.dlpack_bits == 4 && d.itemsize == 1 && d.elements_per_item == 1 &&
            d.bits * d.elements_per_item != 8 * d.itemsize,
        "int4 desc");
  CHECK_OK(devbuf_dtype_interpret("devbuf", "int4_x2", 7, &d, &err), &err);
  CHECK(d.bits * d.elements_per_item == 8 * d.itemsize && strcmp(d.canonical, "int4_x2") == 0,
        "int4_x2 desc");
  /* Refusals of to_dlpack. */
  static const char *const no[] = {"ii", "T{i}", ">i", "x", "3s", "Zg", "[devbuf$datetime64(ns)]",
                                   "Z[devbuf$bfloat16]", ""};
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
    devbuf_format f = DEVBUF_FORMAT_INIT;
    CHECK_OK(devbuf_format_parse(no[i], strlen(no[i]), 0, &f, &err), &err);
    uint8_t c, b;
    uint16_t l;
    CHECK(devbuf_format_to_dlpack(&f, &c, &b, &l, &err) == DEVBUF_ENOTSUP, "'%s' accepted", no[i]);
    devbuf_format_release(&f);
  }
  devbuf_format f = DEVBUF_FORMAT_INIT;
  CHECK_OK(devbuf_format_parse("(2,2)f", 6, 0, &f, &err), &err);
  uint8_t c, b;
  uint16_t l;
  CHECK_OK(devbuf_format_to_dlpack(&f, &c, &b, &l, &err), &err);
  CHECK(c == 2 && b == 32 && l == 4, "lanes %u", l);
  devbuf_format_release(&f);
}

static void test_interpret_api(void) {
  devbuf_dtype_desc d;
  devbuf_error err;
  CHECK_OK(devbuf_dtype_interpret("struct", "<ih", 3, &d, &err), &err);
  CHECK(d.itemsize == 6 && d.alignment == 1 && d.kind == DEVBUF_KIND_STRUCT, "struct$");
  CHECK_OK(devbuf_dtype_interpret("buffer", "ib", 2, &d, &err), &err);
  CHECK(d.itemsize == 8 && d.alignment == 4 && strcmp(d.plain_format, "ib") == 0, "buffer$");
  CHECK(devbuf_dtype_interpret("buffer", "i[a$b]", 6, &d, &err) == DEVBUF_EFORMAT, "buffer$ nested");
  CHECK_OK(devbuf_dtype_interpret("devbuf", "float16", 7, &d, &err), &err);
  CHECK(strcmp(d.plain_format, "e") == 0 && d.dlpack_code == 2, "float16 plain");
  CHECK_OK(devbuf_dtype_interpret("devbuf", "datetime64(25us)", 16, &d, &err), &err);
  CHECK(strcmp(d.canonical, "datetime64(25us)") == 0 && d.kind == DEVBUF_KIND_DATETIME &&
            d.dlpack_code == -1,
        "datetime canonical '%s'", d.canonical);
  CHECK(devbuf_dtype_interpret("torch", "x", 1, &d, &err) == DEVBUF_ENOTFOUND, "torch");
  CHECK_HAS(err.message, "'torch' package");
  CHECK(strcmp(devbuf_dtype_known_provider("numpy.dtypes", (size_t)-1), "numpy") == 0, "numpy.x");
  CHECK(strcmp(devbuf_dtype_known_provider("arrow", 5), "pyarrow") == 0, "arrow");
  CHECK(devbuf_dtype_known_provider("numpyx", 6) == NULL, "numpyx");
}

int main(void) {
  devbuf_error err;
  if (sizeof(long) != 8 || sizeof(long double) != 16 || sizeof(void *) != 8) {
    printf("skipped: the vectors assume LP64 with a 16-byte long double\n");
    return 77;
  }
  if (devbuf_dtype_register(&TESTNS, &err) != DEVBUF_OK ||
      devbuf_dtype_register(&FAKE_NUMPY, &err) != DEVBUF_OK) {
    fprintf(stderr, "cannot register test namespaces: %s\n", err.message);
    return 1;
  }
  RUN(test_vectors);
  RUN(test_depth);
  RUN(test_big);
  RUN(test_tree);
  RUN(test_caret);
  RUN(test_print_truncation);
  RUN(test_abi_and_alloc);
  RUN(test_dlpack);
  RUN(test_interpret_api);
  printf("%d passed, %d failed\n", devbuf_test_passed, devbuf_test_failed);
  return devbuf_test_failed ? 1 : 0;
}
