/* --json: the same facts as the table, as schema "devbuf-info/1"
 * (docs/devbuf-info.schema.json). Rules of the schema: every key is always
 * present (null when unknown), numbers are raw (bytes, not GiB), strings are
 * the runtime's own, and a change that removes or renames a key bumps the
 * schema's number; adding keys does not. */
#include <string.h>

#include "info.h"

/* JSON string with escapes; bytes that are not valid UTF-8 (a driver's name
 * may be anything) become U+FFFD so that the document stays valid. */
void info_json_string(FILE *out, const char *s) {
  if (s == NULL) {
    fputs("null", out);
    return;
  }
  const unsigned char *p = (const unsigned char *)s;
  fputc('"', out);
  while (*p) {
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      fputc('\\', out);
      fputc(c, out);
      p++;
    } else if (c < 0x20 || c == 0x7f) {
      switch (c) {
        case '\n': fputs("\\n", out); break;
        case '\t': fputs("\\t", out); break;
        case '\r': fputs("\\r", out); break;
        default: fprintf(out, "\\u%04x", c);
      }
      p++;
    } else if (c < 0x80) {
      fputc(c, out);
      p++;
    } else {
      int n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
      int ok = n > 0;
      for (int k = 1; ok && k < n; k++) ok = (p[k] & 0xC0) == 0x80;
      if (ok) {
        fwrite(p, 1, (size_t)n, out);
        p += n;
      } else {
        fputs("\\ufffd", out);
        p++;
      }
    }
  }
  fputc('"', out);
}

static void kv_str(FILE *out, const char *key, const char *v, int comma) {
  fprintf(out, "\"%s\": ", key);
  info_json_string(out, v);
  if (comma) fputs(", ", out);
}

static const char *probe_word(int probe) {
  switch (probe) {
    case INFO_PROBE_OK: return "ok";
    case INFO_PROBE_NO_DEVICE: return "no_device";
    case INFO_PROBE_ERROR: return "error";
    case INFO_PROBE_CRASHED: return "crashed";
    case INFO_PROBE_TIMED_OUT: return "timed_out";
    case INFO_PROBE_CHILD_FAILED: return "child_failed";
    default: return "not_probed";
  }
}

static const char *bool_str(int b) { return b ? "true" : "false"; }

static void print_plugin(FILE *out, const info_model *m, const info_plugin *p) {
  const devbuf_plugin_info *pi = &p->pi;
  fprintf(out, "    {\"index\": %zu, ", p->index);
  kv_str(out, "name", pi->name, 1);
  kv_str(out, "version", pi->version, 1);
  kv_str(out, "description", pi->description, 1);
  kv_str(out, "path", pi->path, 1);
  kv_str(out, "source", pi->source, 1);
  if (pi->abi_major || pi->abi_minor)
    fprintf(out, "\"abi\": {\"major\": %u, \"minor\": %u}, ", pi->abi_major, pi->abi_minor);
  else
    fputs("\"abi\": null, ", out);
  fprintf(out, "\"status\": \"%s\", ", info_status_word(p));
  if (pi->state == DEVBUF_PLUGIN_FAILED) {
    fprintf(out, "\"load_error\": {\"code\": \"%s\", \"code_number\": %d, ",
            devbuf_status_name(pi->error_code), pi->error_code);
    kv_str(out, "message", pi->reason, 0);
    fputs("}, ", out);
  } else {
    fputs("\"load_error\": null, ", out);
  }
  kv_str(out, "note",
         pi->state == DEVBUF_PLUGIN_LOADED && pi->reason && pi->reason[0] ? pi->reason : NULL, 1);
  fputs("\"identifiers\": [", out);
  for (size_t k = 0; pi->identifiers && pi->identifiers[k]; k++) {
    if (k) fputs(", ", out);
    info_json_string(out, pi->identifiers[k]);
  }
  fputs("], ", out);

  fprintf(out, "\"probe\": {\"status\": \"%s\", ", probe_word(p->probe));
  int probed = p->probe != INFO_PROBE_NOT_LOADED;
  if (probed && p->probe != INFO_PROBE_OK) {
    fprintf(out, "\"code\": \"%s\", ", devbuf_status_name(p->probe_status));
    kv_str(out, "message", p->probe_reason, 1);
  } else {
    fputs("\"code\": null, \"message\": null, ", out);
  }
  const char *sig = p->probe == INFO_PROBE_CRASHED ? info_signal_name(p->term_signal) : NULL;
  if (p->probe == INFO_PROBE_CRASHED) {
    kv_str(out, "signal", sig, 1);
    fprintf(out, "\"signal_number\": %d, ", p->term_signal);
  } else {
    fputs("\"signal\": null, \"signal_number\": null, ", out);
  }
  if (p->probe == INFO_PROBE_TIMED_OUT) fprintf(out, "\"timeout_s\": %g, ", m->timeout_s);
  else fputs("\"timeout_s\": null, ", out);
  if (probed) fprintf(out, "\"time_ms\": %.3f}, ", p->probe_ms);
  else fputs("\"time_ms\": null}, ", out);

  if (p->probe == INFO_PROBE_OK) fprintf(out, "\"device_count\": %d, ", p->device_count);
  else if (p->probe == INFO_PROBE_NO_DEVICE) fputs("\"device_count\": 0, ", out);
  else fputs("\"device_count\": null, ", out);

  const devbuf_plugin_table *t = pi->table;
  fputs("\"dtype_namespaces\": [", out);
  for (size_t k = 0; t && t->dtype_namespaces && t->dtype_namespaces[k]; k++) {
    if (k) fputs(", ", out);
    info_json_string(out, t->dtype_namespaces[k]->id);
  }
  fputs("], \"ext_functions\": [", out);
  for (size_t k = 0; t && t->ext_functions && k < t->ext_function_count; k++) {
    if (k) fputs(", ", out);
    fputc('{', out);
    kv_str(out, "name", t->ext_functions[k].name, 1);
    kv_str(out, "signature", t->ext_functions[k].signature, 1);
    devbuf_error e;
    int ok = devbuf_ext_function_check(&t->ext_functions[k], &e) == DEVBUF_OK;
    fprintf(out, "\"valid\": %s, ", ok ? "true" : "false");
    kv_str(out, "reason", ok ? NULL : e.message, 0);
    fputc('}', out);
  }
  fputs("], \"table_cut_at\": ", out);
  info_json_string(out, info_table_cut(t));
  fputs("}", out);
}

static void print_device(FILE *out, const info_plugin *p, const info_device *dv) {
  char id[96];
  snprintf(id, sizeof id, "%s:%d", INFO_STR(p->primary_id), dv->ordinal);
  fputs("    {", out);
  kv_str(out, "device", id, 1);
  kv_str(out, "identifier", p->primary_id, 1);
  fprintf(out, "\"ordinal\": %d, ", dv->ordinal);
  kv_str(out, "plugin", p->pi.name, 1);
  fprintf(out, "\"plugin_index\": %zu, \"aliases\": [", p->index);
  for (size_t k = 1; p->pi.identifiers && p->pi.identifiers[k]; k++) {
    snprintf(id, sizeof id, "%s:%d", p->pi.identifiers[k], dv->ordinal);
    if (k > 1) fputs(", ", out);
    info_json_string(out, id);
  }
  fputs("], ", out);
  if (dv->status != DEVBUF_OK) {
    fputs("\"name\": null, \"vendor\": null, \"total_memory\": null, \"free_memory\": null, "
          "\"host_accessible\": null, \"unified\": null, \"async_streams\": null, "
          "\"alloc_alignment\": null, \"dlpack\": null, ", out);
    fprintf(out, "\"error\": {\"code\": \"%s\", ", devbuf_status_name(dv->status));
    kv_str(out, "message", dv->error, 0);
    fputs("}}", out);
    return;
  }
  const devbuf_device_props *pr = &dv->props;
  kv_str(out, "name", pr->name, 1);
  kv_str(out, "vendor", pr->vendor, 1);
  /* 0 means "unknown" in devbuf_device_props. */
  if (pr->total_memory) fprintf(out, "\"total_memory\": %llu, ", (unsigned long long)pr->total_memory);
  else fputs("\"total_memory\": null, ", out);
  if (pr->free_memory) fprintf(out, "\"free_memory\": %llu, ", (unsigned long long)pr->free_memory);
  else fputs("\"free_memory\": null, ", out);
  fprintf(out,
          "\"host_accessible\": %s, \"unified\": %s, \"async_streams\": %s, "
          "\"alloc_alignment\": %u, \"dlpack\": {\"device_type\": %d, \"device_id\": %d}, "
          "\"error\": null}",
          bool_str(pr->flags & DEVBUF_DEVICE_HOST_ACCESSIBLE),
          bool_str(pr->flags & DEVBUF_DEVICE_UNIFIED), bool_str(pr->flags & DEVBUF_DEVICE_ASYNC),
          pr->alloc_alignment, pr->dlpack_device_type, pr->dlpack_device_id);
}

void info_print_json(FILE *out, const info_model *m, const info_options *o, int exit_code) {
  fputs("{\n  \"schema\": \"devbuf-info/1\",\n", out);
  fprintf(out, "  \"tool_version\": \"%s\",\n", DEVBUF_VERSION_STRING);
  fputs("  \"runtime\": {", out);
  kv_str(out, "version", m->version, 1);
  fprintf(out, "\"abi\": {\"major\": %d, \"minor\": %d}},\n", m->abi_major, m->abi_minor);
  fprintf(out,
          "  \"options\": {\"isolate\": %s, \"probe\": %s, \"timeout_s\": %g, "
          "\"extra_plugins\": [",
          bool_str(m->isolate), bool_str(!m->no_probe), m->timeout_s);
  for (size_t i = 0; i < o->nextra; i++) {
    if (i) fputs(", ", out);
    info_json_string(out, o->extra_plugins[i]);
  }
  fputs("]},\n  \"environment\": {", out);
  for (int i = 0; i < 3; i++) kv_str(out, m->env[i].name, m->env[i].value, i < 2);
  fprintf(out, "},\n  \"secure_execution\": %s,\n", bool_str(m->secure));
  fprintf(out, "  \"default_directory_searched\": %s,\n", bool_str(m->default_plugins));

  fputs("  \"search_path\": [", out);
  for (size_t i = 0; i < m->nsearch; i++) {
    const devbuf_search_entry *e = m->search[i];
    fputs(i ? ",\n    {" : "\n    {", out);
    kv_str(out, "path", e->path, 1);
    kv_str(out, "source", e->source, 1);
    fprintf(out, "\"kind\": \"%s\", \"exists\": %s}", e->is_file ? "file" : "directory",
            bool_str(e->exists));
  }
  fputs(m->nsearch ? "\n  ],\n" : "],\n", out);

  fputs("  \"plugins\": [", out);
  for (size_t i = 0; i < m->nplugins; i++) {
    fputs(i ? ",\n" : "\n", out);
    print_plugin(out, m, &m->plugins[i]);
  }
  fputs(m->nplugins ? "\n  ],\n" : "],\n", out);

  fputs("  \"identifiers\": [", out);
  for (size_t i = 0; i < m->nidents; i++) {
    size_t pi = m->ident_plugin[i];
    fputs(i ? ",\n    {" : "\n    {", out);
    kv_str(out, "identifier", m->idents[i], 1);
    kv_str(out, "plugin", pi < m->nplugins ? m->plugins[pi].pi.name : NULL, 1);
    fprintf(out, "\"plugin_index\": %zu}", pi);
  }
  fputs(m->nidents ? "\n  ],\n" : "],\n", out);

  fputs("  \"devices\": [", out);
  int first = 1;
  for (size_t i = 0; i < m->nplugins; i++)
    for (size_t d = 0; d < m->plugins[i].ndevices; d++) {
      fputs(first ? "\n" : ",\n", out);
      first = 0;
      print_device(out, &m->plugins[i], &m->plugins[i].devices[d]);
    }
  fputs(first ? "],\n" : "\n  ],\n", out);

  fputs("  \"dtype_namespaces\": [", out);
  for (size_t i = 0; i < m->ndtypes; i++) {
    const info_dtype *d = &m->dtypes[i];
    fputs(i ? ",\n    {" : "\n    {", out);
    kv_str(out, "id", d->id, 1);
    kv_str(out, "provider", d->provider, 1);
    kv_str(out, "description", d->description, 1);
    kv_str(out, "source", d->source, 1);
    fputs("\"file\": ", out);
    if (d->file) info_json_string(out, d->file);
    else fputs("null", out);
    fputc('}', out);
  }
  fputs(m->ndtypes ? "\n  ],\n" : "],\n", out);
  fprintf(out, "  \"probe_time_ms\": %.3f,\n", m->probe_ms);
  fprintf(out, "  \"exit_code\": %d\n}\n", exit_code);
}
