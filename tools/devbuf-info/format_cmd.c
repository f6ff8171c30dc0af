/* `devbuf-info format STRING`: explain a buffer format string with the
 * format-string engine of libdevbuf (devbuf/format.h): every field with its
 * absolute offset, size and alignment, each custom dtype's alternatives and
 * which one was chosen, and on error the message with a caret under the
 * offending byte. With --json, the same as schema "devbuf-info-format/1". */
#include <stdlib.h>
#include <string.h>

#include "info.h"

#ifndef DEVBUF_INFO_HAVE_FORMAT

int info_format_command(FILE *out, FILE *errout, const char *fmt, const char *mode,
                        const info_options *o) {
  fprintf(errout, "devbuf-info: format: this build has no format-string engine "
                  "(registry/include/devbuf/format.h was missing at configure time)\n");
  return INFO_EXIT_INTERNAL;
}

#else

#include "devbuf/format.h"

static const char *kind_name(unsigned k) {
  static const char *const names[] = {"opaque", "bool",     "int",       "uint",
                                      "float",  "complex",  "datetime",  "timedelta",
                                      "string", "struct",   "pointer"};
  return k < sizeof names / sizeof names[0] ? names[k] : "?";
}

static const char *alt_state(int s) {
  switch (s) {
    case DEVBUF_ALT_CHOSEN: return "chosen";
    case DEVBUF_ALT_UNKNOWN_ID: return "unknown_id";
    case DEVBUF_ALT_REFUSED: return "refused";
    default: return "not_tried";
  }
}

/* What one field is, in words: "int32 little-endian", "char[16]", ... */
static void describe(const devbuf_format_field *f, char *buf, size_t cap) {
  const char *order = f->elem_size > 1 && f->kind == DEVBUF_FIELD_SCALAR
                          ? (f->big_endian ? " big-endian" : " little-endian")
                          : "";
  switch (f->kind) {
    case DEVBUF_FIELD_PADDING:
      snprintf(buf, cap, "padding, %llu byte%s", (unsigned long long)f->size,
               f->size == 1 ? "" : "s");
      return;
    case DEVBUF_FIELD_STRUCT:
      snprintf(buf, cap, "struct of %u member%s, %llu byte%s each", f->nchildren,
               f->nchildren == 1 ? "" : "s", (unsigned long long)f->elem_size,
               f->elem_size == 1 ? "" : "s");
      return;
    case DEVBUF_FIELD_POINTER: snprintf(buf, cap, "pointer"); return;
    case DEVBUF_FIELD_FUNCTION: snprintf(buf, cap, "function pointer"); return;
    case DEVBUF_FIELD_BITS:
      snprintf(buf, cap, "%llu bit%s from bit %u", (unsigned long long)f->count,
               f->count == 1 ? "" : "s", f->bit_offset);
      return;
    case DEVBUF_FIELD_CUSTOM: {
      const devbuf_format_custom *c = f->custom;
      if (c == NULL || c->chosen < 0) {
        snprintf(buf, cap, "custom dtype, not understood");
        return;
      }
      snprintf(buf, cap, "%s%s (%s, %u bit%s%s%s)", c->is_complex ? "complex of " : "",
               c->desc.canonical[0] ? c->desc.canonical : "custom dtype",
               kind_name(c->desc.kind), c->desc.bits, c->desc.bits == 1 ? "" : "s",
               c->desc.elements_per_item > 1 ? ", packed" : "",
               c->desc.plain_format[0] ? ", like a plain format" : "");
      return;
    }
    default: break;
  }
  const char *code = f->code;
  if (strcmp(code, "s") == 0 || strcmp(code, "p") == 0) {
    snprintf(buf, cap, "%s[%llu]", code[0] == 's' ? "char" : "pascal string",
             (unsigned long long)f->count);
    return;
  }
  if (strcmp(code, "c") == 0) { snprintf(buf, cap, "char"); return; }
  if (strcmp(code, "u") == 0 || strcmp(code, "w") == 0) {
    snprintf(buf, cap, "UCS-%d character%s", code[0] == 'u' ? 2 : 4, order);
    return;
  }
  if (strcmp(code, "P") == 0) { snprintf(buf, cap, "void *"); return; }
  if (strcmp(code, "O") == 0) { snprintf(buf, cap, "PyObject *"); return; }
  if (f->dtype_kind == DEVBUF_KIND_BOOL) { snprintf(buf, cap, "bool"); return; }
  snprintf(buf, cap, "%s%llu%s", kind_name(f->dtype_kind),
           (unsigned long long)f->elem_size * 8, order);
}

static uint64_t abs_offset(const devbuf_format_field *f) {
  uint64_t off = 0;
  for (const devbuf_format_field *p = f; p; p = p->parent) off += p->offset;
  return off;
}

static void code_text(const devbuf_format_field *f, char *buf, size_t cap) {
  size_t n = 0;
  if (f->ndim) {
    n += (size_t)snprintf(buf + n, cap - n, "(");
    for (uint16_t d = 0; d < f->ndim && n < cap; d++)
      n += (size_t)snprintf(buf + n, cap - n, "%s%llu", d ? "," : "",
                            (unsigned long long)f->shape[d]);
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, ")");
  }
  if (n < cap && f->count != 1 && f->kind != DEVBUF_FIELD_BITS)
    n += (size_t)snprintf(buf + n, cap - n, "%llu", (unsigned long long)f->count);
  if (n < cap)
    snprintf(buf + n, cap - n, "%s%s", f->code,
             f->kind == DEVBUF_FIELD_STRUCT ? "{}" : f->kind == DEVBUF_FIELD_CUSTOM ? "...]" : "");
  if (f->kind == DEVBUF_FIELD_BITS)
    snprintf(buf, cap, "%llut", (unsigned long long)f->count);
}

/* `deref`: f describes memory behind a pointer (a pointee or a function's
 * signature), not bytes of the item, so it has no offset in the item. */
static void text_field(FILE *out, const devbuf_format_field *f, int depth, int width, int deref) {
  for (; f; f = f->next) {
    char code[64], what[256], off[32];
    code_text(f, code, sizeof code);
    describe(f, what, sizeof what);
    if (deref) snprintf(off, sizeof off, "*");
    else snprintf(off, sizeof off, "%llu", (unsigned long long)abs_offset(f));
    int used = fprintf(out, "  %8s %6llu %5u  %*s%-6s %-8s ", off, (unsigned long long)f->size,
                       f->alignment, depth * 2, "", code, f->name ? f->name : "-");
    info_wrap(out, what, used, 2 + 8 + 1 + 6 + 1 + 5 + 2 + depth * 2 + 4, width);
    if (f->kind == DEVBUF_FIELD_CUSTOM && f->custom) {
      const devbuf_format_custom *c = f->custom;
      for (uint32_t a = 0; a < c->nalts; a++) {
        const devbuf_format_alt *al = &c->alts[a];
        char line[512];
        const char *prov = NULL;
        if (al->state == DEVBUF_ALT_UNKNOWN_ID)
          prov = devbuf_dtype_known_provider(al->id, strlen(al->id));
        int n = snprintf(line, sizeof line, "[%s$%s] (byte %u): ", al->id, al->payload,
                         al->offset);
        if (al->state == DEVBUF_ALT_CHOSEN)
          snprintf(line + n, sizeof line - n,
                   "chosen: %s, itemsize %u, alignment %u%s%s", c->desc.canonical,
                   c->desc.itemsize, c->desc.alignment,
                   c->desc.plain_format[0] ? ", plain format " : "", c->desc.plain_format);
        else if (al->state == DEVBUF_ALT_UNKNOWN_ID)
          snprintf(line + n, sizeof line - n, "no namespace '%s' is registered%s%s%s", al->id,
                   prov ? " (it is defined by the package '" : "", prov ? prov : "",
                   prov ? "')" : "");
        else if (al->state == DEVBUF_ALT_REFUSED)
          snprintf(line + n, sizeof line - n, "namespace '%s' did not understand the payload (%s)",
                   al->id, devbuf_status_name(al->status));
        else
          snprintf(line + n, sizeof line - n, "not tried (an earlier alternative was chosen)");
        int u = fprintf(out, "%*s alt %u ", 2 + 8 + 1 + 6 + 1 + 5 + 2 + depth * 2, "", a + 1);
        info_wrap(out, line, u, u + 2, width);
      }
    }
    int inner = deref || f->kind == DEVBUF_FIELD_FUNCTION;
    if (f->children) text_field(out, f->children, depth + 1, width, inner);
    if (f->pointee) text_field(out, f->pointee, depth + 1, width, 1);
  }
}

/* ---- JSON ------------------------------------------------------------------- */

static void json_fields(FILE *out, const devbuf_format_field *f, int deref);

static void json_field(FILE *out, const devbuf_format_field *f, int deref) {
  char what[256];
  describe(f, what, sizeof what);
  static const char *const kinds[] = {"scalar", "padding", "struct", "pointer",
                                      "function", "custom", "bits"};
  fputs("{\"name\": ", out);
  info_json_string(out, f->name);
  fprintf(out, ", \"kind\": \"%s\", \"code\": ", f->kind < 7 ? kinds[f->kind] : "?");
  info_json_string(out, f->code);
  char abs[32];
  if (deref) snprintf(abs, sizeof abs, "null");
  else snprintf(abs, sizeof abs, "%llu", (unsigned long long)abs_offset(f));
  fprintf(out,
          ", \"offset\": %llu, \"absolute_offset\": %s, \"size\": %llu, \"elem_size\": %llu, "
          "\"count\": %llu, \"alignment\": %u, \"byteorder\": \"%c\", \"big_endian\": %s, "
          "\"shape\": [",
          (unsigned long long)f->offset, abs, (unsigned long long)f->size, (unsigned long long)f->elem_size,
          (unsigned long long)f->count, f->alignment, f->byteorder ? f->byteorder : '@',
          f->big_endian ? "true" : "false");
  for (uint16_t d = 0; d < f->ndim; d++)
    fprintf(out, "%s%llu", d ? ", " : "", (unsigned long long)f->shape[d]);
  fprintf(out, "], \"source_offset\": %u, \"description\": ", f->src_offset);
  info_json_string(out, what);
  fputs(", \"custom\": ", out);
  if (f->kind == DEVBUF_FIELD_CUSTOM && f->custom) {
    const devbuf_format_custom *c = f->custom;
    fprintf(out, "{\"chosen\": %d, \"is_complex\": %s, \"alternatives\": [", c->chosen,
            c->is_complex ? "true" : "false");
    for (uint32_t a = 0; a < c->nalts; a++) {
      const devbuf_format_alt *al = &c->alts[a];
      fputs(a ? ", {\"id\": " : "{\"id\": ", out);
      info_json_string(out, al->id);
      fputs(", \"payload\": ", out);
      info_json_string(out, al->payload);
      fprintf(out, ", \"source_offset\": %u, \"state\": \"%s\", \"status\": ", al->offset,
              alt_state(al->state));
      if (al->state == DEVBUF_ALT_REFUSED) fprintf(out, "\"%s\"", devbuf_status_name(al->status));
      else fputs("null", out);
      fputs(", \"provider\": ", out);
      info_json_string(out, al->state == DEVBUF_ALT_UNKNOWN_ID
                                ? devbuf_dtype_known_provider(al->id, strlen(al->id))
                                : NULL);
      fputc('}', out);
    }
    fputs("], \"dtype\": ", out);
    if (c->chosen >= 0) {
      const devbuf_dtype_desc *d = &c->desc;
      fprintf(out, "{\"kind\": \"%s\", \"itemsize\": %u, \"alignment\": %u, \"bits\": %u, "
                   "\"elements_per_item\": %u, \"dlpack_code\": %d, \"dlpack_bits\": %u, "
                   "\"canonical\": ",
              kind_name(d->kind), d->itemsize, d->alignment, d->bits, d->elements_per_item,
              d->dlpack_code, d->dlpack_bits);
      info_json_string(out, d->canonical);
      fputs(", \"plain_format\": ", out);
      info_json_string(out, d->plain_format[0] ? d->plain_format : NULL);
      fputs("}}", out);
    } else {
      fputs("null}", out);
    }
  } else {
    fputs("null", out);
  }
  fputs(", \"children\": ", out);
  json_fields(out, f->children, deref || f->kind == DEVBUF_FIELD_FUNCTION);
  fputs(", \"pointee\": ", out);
  if (f->pointee) json_field(out, f->pointee, 1);
  else fputs("null", out);
  fputc('}', out);
}

static void json_fields(FILE *out, const devbuf_format_field *f, int deref) {
  fputc('[', out);
  for (int first = 1; f; f = f->next, first = 0) {
    if (!first) fputs(", ", out);
    json_field(out, f, deref);
  }
  fputc(']', out);
}

/* ---- the command ------------------------------------------------------------ */

int info_format_command(FILE *out, FILE *errout, const char *fmt, const char *mode,
                        const info_options *o) {
  uint32_t flags = strcmp(mode, "struct") == 0  ? DEVBUF_FORMAT_STRUCT
                   : strcmp(mode, "numpy") == 0 ? DEVBUF_FORMAT_NUMPY
                                                : DEVBUF_FORMAT_DEFAULT;
  size_t len = strlen(fmt);
  devbuf_format f = DEVBUF_FORMAT_INIT;
  devbuf_error err;
  devbuf_error_clear(&err);
  int rc = devbuf_format_parse(fmt, len, flags, &f, &err);
  if (rc != DEVBUF_OK) {
    char caret[1024];
    devbuf_format_caret(fmt, len, (size_t)f.error_offset, caret, sizeof caret);
    if (o->json) {
      fputs("{\n  \"schema\": \"devbuf-info-format/1\",\n  \"format\": ", out);
      info_json_string(out, fmt);
      fprintf(out, ",\n  \"mode\": \"%s\",\n  \"ok\": false,\n  \"error\": {\"code\": \"%s\", "
                   "\"offset\": %llu, \"message\": ",
              mode, devbuf_status_name(rc), (unsigned long long)f.error_offset);
      info_json_string(out, err.message);
      fputs(", \"caret\": ", out);
      info_json_string(out, caret);
      fputs("}\n}\n", out);
    } else {
      fprintf(errout, "devbuf-info: %s (%s)\n", err.message, devbuf_status_name(rc));
      /* The caret rendering is two lines; indent both the same. */
      fputs("  ", errout);
      for (const char *p = caret; *p; p++) {
        fputc(*p, errout);
        if (*p == '\n' && p[1]) fputs("  ", errout);
      }
      if (caret[0] && caret[strlen(caret) - 1] != '\n') fputc('\n', errout);
    }
    devbuf_format_release(&f);
    return INFO_EXIT_BAD_FORMAT;
  }

  size_t need = devbuf_format_print(&f, NULL, 0);
  char canon_small[512];
  char *canon = canon_small;
  if (need + 1 > sizeof canon_small) {
    canon = malloc(need + 1);
    if (canon == NULL) canon = canon_small;
  }
  devbuf_format_print(&f, canon, canon == canon_small ? sizeof canon_small : need + 1);
  size_t nitems = 0;
  devbuf_format_flatten(&f, NULL, 0, &nitems, NULL);

  if (o->json) {
    fputs("{\n  \"schema\": \"devbuf-info-format/1\",\n  \"format\": ", out);
    info_json_string(out, fmt);
    fprintf(out, ",\n  \"mode\": \"%s\",\n  \"ok\": true,\n  \"canonical\": ", mode);
    info_json_string(out, canon);
    fprintf(out,
            ",\n  \"itemsize\": %llu,\n  \"alignment\": %llu,\n  \"items\": %zu,\n"
            "  \"has_custom\": %s,\n  \"has_pointers\": %s,\n  \"non_native\": %s,\n"
            "  \"fields\": ",
            (unsigned long long)f.itemsize, (unsigned long long)f.alignment, nitems,
            f.info & DEVBUF_FORMAT_HAS_CUSTOM ? "true" : "false",
            f.info & DEVBUF_FORMAT_HAS_POINTERS ? "true" : "false",
            f.info & DEVBUF_FORMAT_NON_NATIVE ? "true" : "false");
    json_fields(out, f.fields, 0);
    fputs(",\n  \"error\": null\n}\n", out);
  } else {
    int used = fprintf(out, "format     ");
    info_wrap(out, fmt, used, used, o->width);
    used = fprintf(out, "canonical  ");
    info_wrap(out, canon, used, used, o->width);
    fprintf(out, "mode       %s\n", mode);
    fprintf(out, "itemsize   %llu byte%s, alignment %llu, %zu leaf item%s%s\n",
            (unsigned long long)f.itemsize, f.itemsize == 1 ? "" : "s",
            (unsigned long long)f.alignment, nitems, nitems == 1 ? "" : "s",
            f.info & DEVBUF_FORMAT_NON_NATIVE ? ", not native byte order" : "");
    fprintf(out, "\n    OFFSET   SIZE ALIGN  CODE   NAME     MEANING\n");
    if (f.fields == NULL) fprintf(out, "  (no fields)\n");
    text_field(out, f.fields, 0, o->width, 0);
  }
  if (canon != canon_small) free(canon);
  devbuf_format_release(&f);
  return INFO_EXIT_OK;
}

#endif /* DEVBUF_INFO_HAVE_FORMAT */
