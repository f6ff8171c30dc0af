/* The human forms: the full table listing and the one-line-per-fact -l list.
 *
 * Layout rules: everything fits in `width` columns (80 unless the terminal
 * says otherwise). Short cells (names, versions, file names) are truncated
 * with "..." and shown whole under -v; reasons and descriptions are never
 * cut: they wrap onto indented continuation lines. Colour is only a hint:
 * every status is also spelled out. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "info.h"

/* ---- colour ------------------------------------------------------------------ */

enum { C_RESET, C_BOLD, C_DIM, C_GREEN, C_YELLOW, C_RED };
static const char *const ansi[] = {"\033[0m", "\033[1m", "\033[2m", "\033[32m", "\033[33m",
                                   "\033[31m"};
static int g_color;
static const char *col(int c) { return g_color ? ansi[c] : ""; }

/* ---- text helpers ---------------------------------------------------------------- */

/* Display columns of a UTF-8 string: one per code point (good enough for the
 * names drivers report). */
static int dwidth(const char *s) {
  int n = 0;
  for (; *s; s++)
    if (((unsigned char)*s & 0xC0) != 0x80) n++;
  return n;
}

/* Byte length of the first `cols` code points of s. */
static size_t prefix_bytes(const char *s, int cols) {
  size_t i = 0;
  int n = 0;
  while (s[i]) {
    if (((unsigned char)s[i] & 0xC0) != 0x80) {
      if (n == cols) break;
      n++;
    }
    i++;
  }
  return i;
}

/* Print s in exactly w columns: padded, or cut with "..." at the end
 * (left = 0) or at the start (left = 1, for paths whose tail matters). */
static void cell(FILE *out, const char *s, int w, int right, int left) {
  int n = dwidth(s);
  if (n <= w) {
    if (right) fprintf(out, "%*s%s", w - n, "", s);
    else fprintf(out, "%s%*s", s, w - n, "");
    return;
  }
  if (w <= 3) {
    fprintf(out, "%.*s", (int)prefix_bytes(s, w), s);
    return;
  }
  if (left) {
    size_t skip = prefix_bytes(s, n - (w - 3));
    fprintf(out, "...%s", s + skip);
  } else {
    fprintf(out, "%.*s...", (int)prefix_bytes(s, w - 3), s);
  }
}

void info_wrap(FILE *out, const char *text, int used, int indent, int width) {
  int avail = width - used;
  if (avail < 20) { /* no room left on this line: start below */
    fprintf(out, "\n%*s", indent, "");
    avail = width - indent;
  }
  if (avail < 20) avail = 20;
  const char *s = text;
  while (*s == ' ') s++;
  for (;;) {
    int n = dwidth(s);
    if (n <= avail) {
      fprintf(out, "%s\n", s);
      return;
    }
    /* The last break opportunity within `avail` columns: a space (dropped)
     * or just after a '/' (kept), so long paths break at components. */
    size_t lim = prefix_bytes(s, avail);
    size_t brk = 0, next = 0;
    for (size_t i = 1; i <= lim; i++) {
      if (s[i] == ' ' && i <= lim) { brk = i; next = i + 1; }
      else if ((s[i - 1] == '/' || s[i - 1] == ':') && i < lim) { brk = i; next = i; }
    }
    if (brk == 0) { brk = lim; next = lim; } /* one unbreakable run: cut it */
    fprintf(out, "%.*s\n%*s", (int)brk, s, indent, "");
    s += next;
    while (*s == ' ') s++;
    avail = width - indent;
    if (avail < 20) avail = 20;
  }
}

void info_human_bytes(uint64_t n, char *buf, size_t cap) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (n == 0) { snprintf(buf, cap, "-"); return; }
  double v = (double)n;
  int u = 0;
  while (v >= 1024.0 && u < 6) { v /= 1024.0; u++; }
  if (u == 0) snprintf(buf, cap, "%llu B", (unsigned long long)n);
  else snprintf(buf, cap, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, units[u]);
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* "(wrong_major)" from ".../devbuf_plugin_wrong_major.so" when the table gave
 * no name: the file still identifies it. */
static const char *display_name(const info_plugin *p, char *buf, size_t cap) {
  if (p->pi.name) return p->pi.name;
  const char *b = base_name(INFO_STR(p->pi.path));
  size_t len = strlen(b);
  if (strncmp(b, "devbuf_plugin_", 14) == 0) { b += 14; len -= 14; }
  if (len > 3 && strcmp(b + len - 3, ".so") == 0) len -= 3;
  snprintf(buf, cap, "(%.*s)", (int)len, b);
  return buf;
}

static const char *status_text(const info_plugin *p, int *color) {
  if (p->pi.state == DEVBUF_PLUGIN_FAILED) { *color = C_RED; return "failed"; }
  if (p->pi.state == DEVBUF_PLUGIN_UNREGISTERED) { *color = C_DIM; return "removed"; }
  switch (p->probe) {
    case INFO_PROBE_OK: *color = C_GREEN; return "ok";
    case INFO_PROBE_NO_DEVICE: *color = C_YELLOW; return "no device";
    case INFO_PROBE_ERROR: *color = C_RED; return "probe err";
    case INFO_PROBE_CRASHED: *color = C_RED; return "crashed";
    case INFO_PROBE_TIMED_OUT: *color = C_RED; return "timed out";
    case INFO_PROBE_CHILD_FAILED: *color = C_RED; return "probe err";
    default: *color = C_DIM; return "loaded";
  }
}

const char *info_plugin_reason(const info_plugin *p, char *buf, size_t cap) {
  if (p->pi.state == DEVBUF_PLUGIN_FAILED) {
    snprintf(buf, cap, "failed to load (%s): %s", devbuf_status_name(p->pi.error_code),
             INFO_STR(p->pi.reason));
    return buf;
  }
  if (p->pi.state == DEVBUF_PLUGIN_UNREGISTERED) return "unregistered";
  switch (p->probe) {
    case INFO_PROBE_NO_DEVICE:
      snprintf(buf, cap, "no device: %s", p->probe_reason);
      return buf;
    case INFO_PROBE_ERROR:
      /* device_count failed, or every device refused device_props (whose
       * reason says so: collect.c). */
      snprintf(buf, cap, "%s failed (%s): %s",
               strncmp(p->probe_reason, "device_props ", 13) == 0 ? "probe" : "device_count",
               devbuf_status_name(p->probe_status), p->probe_reason);
      return buf;
    case INFO_PROBE_CRASHED:
    case INFO_PROBE_TIMED_OUT:
    case INFO_PROBE_CHILD_FAILED:
      return p->probe_reason;
    default:
      return "";
  }
}

static void section(FILE *out, const char *title) {
  fprintf(out, "\n%s%s%s\n", col(C_BOLD), title, col(C_RESET));
}

/* A labelled block of wrapped text under a row: "    LABEL: text...". */
static void note(FILE *out, const char *label, const char *text, int width) {
  int used = fprintf(out, "    %s: ", label);
  info_wrap(out, text, used, used, width);
}

/* Does `path` lie directly in directory `dir`? */
static int in_dir(const char *path, const char *dir) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  return strncmp(path, dir, n) == 0 && path[n] == '/' && strchr(path + n + 1, '/') == NULL;
}

/* Plugins recorded from search entry `e`. The loader records real paths, so
 * compare against the directory's real path too. */
static size_t plugins_from(const info_model *m, const devbuf_search_entry *e, size_t *which,
                           size_t cap) {
  char real[4096];
  const char *rdir = realpath(e->path, real) ? real : e->path;
  size_t n = 0;
  for (size_t i = 0; i < m->nplugins; i++) {
    const info_plugin *p = &m->plugins[i];
    if (strcmp(INFO_STR(p->pi.source), e->source) != 0) continue;
    const char *path = INFO_STR(p->pi.path);
    int match = e->is_file ? (strcmp(path, e->path) == 0 || strcmp(path, rdir) == 0)
                           : (in_dir(path, e->path) || in_dir(path, rdir));
    if (match) {
      if (which && n < cap) which[n] = i;
      n++;
    }
  }
  return n;
}

/* ---- the full listing ------------------------------------------------------------ */

static void print_header(FILE *out, const info_model *m, const info_options *o) {
  fprintf(out, "%sdevbuf-info %s%s: devbuf runtime %s, plugin ABI %d.%d\n", col(C_BOLD),
          DEVBUF_VERSION_STRING, col(C_RESET), m->version, m->abi_major, m->abi_minor);
  if (m->abi_major != m->abi_header_major || m->abi_minor != m->abi_header_minor)
    fprintf(out, "  note: this tool was built against plugin ABI %d.%d\n", m->abi_header_major,
            m->abi_header_minor);
  if (m->isolate)
    fprintf(out, "  devices probed in separate processes (timeout %g s)\n", m->timeout_s);
  else if (!m->no_probe)
    fprintf(out, "  devices probed in this process (--in-process, no time limit)\n");
  if (m->no_probe)
    fprintf(out, "  devices not probed (--no-probe): no driver was started\n");
}

static void print_search(FILE *out, const info_model *m, const info_options *o) {
  section(out, "Plugin search path");
  if (m->secure)
    fprintf(out, "  secure-execution mode (setuid/setgid or capabilities): DEVBUF_PLUGINS, "
                 "DEVBUF_PLUGIN_PATH and every other DEVBUF_* variable are ignored\n");
  for (int i = 0; i < 3; i++) {
    const info_env *e = &m->env[i];
    int used = fprintf(out, "  %-26s ", e->name);
    char buf[INFO_REASON_MAX + 64];
    if (e->value == NULL) snprintf(buf, sizeof buf, "(not set)");
    else if (i == 2)
      snprintf(buf, sizeof buf, "%s%s", e->value,
               m->default_plugins ? " (default directory still searched)"
                                  : " (default directory skipped)");
    else snprintf(buf, sizeof buf, "%s", e->value[0] ? e->value : "(set, empty)");
    info_wrap(out, buf, used, used, o->width);
  }
  if (m->nsearch == 0 && o->nextra == 0) {
    fprintf(out, "  (no entry: nothing was searched)\n");
    return;
  }
  int sw = 8;
  for (size_t i = 0; i < m->nsearch; i++)
    if (dwidth(m->search[i]->source) > sw) sw = dwidth(m->search[i]->source);
  for (size_t i = 0; i < m->nsearch; i++) {
    const devbuf_search_entry *e = m->search[i];
    size_t which[64];
    size_t n = plugins_from(m, e, which, 64);
    char what[64];
    if (!e->exists) snprintf(what, sizeof what, "(missing)");
    else if (e->is_file) snprintf(what, sizeof what, "(file)");
    else if (n == 0) snprintf(what, sizeof what, "(no devbuf_plugin_*.so in it)");
    else snprintf(what, sizeof what, "(%zu plugin%s)", n, n == 1 ? "" : "s");
    int used = fprintf(out, "  %zu. %-*s ", i + 1, sw, e->source);
    char line[4200];
    snprintf(line, sizeof line, "%s %s", e->path, what);
    info_wrap(out, line, used, used + 2, o->width);
    if (o->verbose && !e->is_file)
      for (size_t k = 0; k < n && k < 64; k++)
        fprintf(out, "%*s  tried %s\n", used, "", base_name(m->plugins[which[k]].pi.path));
  }
  /* --plugin files are loaded after the search path, in the order given. */
  for (size_t i = 0; i < o->nextra; i++) {
    const char *label = o->extra_sources && o->extra_sources[i] ? o->extra_sources[i] : "--plugin";
    int used = fprintf(out, "  +  %-*s ", sw, label);
    info_wrap(out, o->extra_plugins[i], used, used + 2, o->width);
  }
}

/* "PATH (NAME): why" -> "why": the loader starts most reasons that way. */
static const char *strip_path(const info_plugin *p, const char *r) {
  const char *path = INFO_STR(p->pi.path);
  size_t n = strlen(path);
  if (n == 0 || strncmp(r, path, n) != 0) return r;
  const char *s = r + n;
  if (p->pi.name && s[0] == ' ' && s[1] == '(') {
    size_t k = strlen(p->pi.name);
    if (strncmp(s + 2, p->pi.name, k) == 0 && s[2 + k] == ')') s += 3 + k;
  }
  if (s[0] == ':' && s[1] == ' ') return s + 2;
  return r;
}

static void print_plugins(FILE *out, const info_model *m, const info_options *o) {
  size_t loaded = 0;
  for (size_t i = 0; i < m->nplugins; i++)
    if (m->plugins[i].pi.state == DEVBUF_PLUGIN_LOADED) loaded++;
  char title[128];
  snprintf(title, sizeof title, "Plugins: %zu found, %zu loaded, %zu failed", m->nplugins,
           loaded, m->nplugins - loaded);
  section(out, title);
  if (m->nplugins == 0) return;
  /* Fixed columns; the file column takes what is left. */
  const int vw = 8, aw = 4, sw = 9, dw = 4;
  int nw = 6;
  for (size_t i = 0; i < m->nplugins; i++) {
    char nbuf[80];
    int w = dwidth(display_name(&m->plugins[i], nbuf, sizeof nbuf));
    if (w > nw) nw = w;
  }
  if (nw > 16) nw = 16;
  int fw = o->width - (2 + nw + 1 + vw + 1 + aw + 1 + sw + 1 + dw + 2);
  if (fw < 12) fw = 12;
  fprintf(out, "  %s%-*s %-*s %-*s %-*s %*s  %s%s\n", col(C_DIM), nw, "NAME", vw, "VERSION", aw,
          "ABI", sw, "STATUS", dw, "DEVS", "FILE", col(C_RESET));
  for (size_t i = 0; i < m->nplugins; i++) {
    const info_plugin *p = &m->plugins[i];
    char nbuf[80], abi[16], devs[16], rbuf[INFO_REASON_MAX + 80];
    int c;
    const char *st = status_text(p, &c);
    fputs("  ", out);
    cell(out, display_name(p, nbuf, sizeof nbuf), nw, 0, 0);
    fputc(' ', out);
    cell(out, p->pi.version ? p->pi.version : "-", vw, 0, 0);
    fputc(' ', out);
    if (p->pi.abi_major || p->pi.abi_minor)
      snprintf(abi, sizeof abi, "%u.%u", p->pi.abi_major, p->pi.abi_minor);
    else snprintf(abi, sizeof abi, "-");
    cell(out, abi, aw, 0, 0);
    fprintf(out, " %s", col(c));
    cell(out, st, sw, 0, 0);
    fprintf(out, "%s ", col(C_RESET));
    if (p->probe == INFO_PROBE_OK) snprintf(devs, sizeof devs, "%d", p->device_count);
    else if (p->probe == INFO_PROBE_NO_DEVICE) snprintf(devs, sizeof devs, "0");
    else snprintf(devs, sizeof devs, "-");
    cell(out, devs, dw, 1, 0);
    fputs("  ", out);
    /* The search path above already shows where a file came from, so its
     * name says enough; a --plugin file (and every file under -v) shows its
     * whole path, on a line of its own when it does not fit. */
    const char *path = INFO_STR(p->pi.path);
    int whole = o->verbose || strcmp(INFO_STR(p->pi.source), "explicit") == 0;
    const char *shown = whole ? path : base_name(path);
    if (dwidth(shown) <= fw) {
      fprintf(out, "%s\n", shown);
    } else {
      const char *bn = base_name(path);
      if (dwidth(bn) > fw) cell(out, bn, fw, 0, 0);
      else fputs(bn, out);
      fputc('\n', out);
      if (whole) note(out, "file", path, o->width);
    }
    /* The row already shows the status and the file: the reason need not
     * repeat them (-v and --json keep the runtime's full text). */
    const char *why;
    if (p->pi.state == DEVBUF_PLUGIN_FAILED && !o->verbose) {
      snprintf(rbuf, sizeof rbuf, "%s: %s", devbuf_status_name(p->pi.error_code),
               strip_path(p, INFO_STR(p->pi.reason)));
      why = rbuf;
    } else if (p->probe == INFO_PROBE_NO_DEVICE) {
      why = p->probe_reason;
    } else {
      why = info_plugin_reason(p, rbuf, sizeof rbuf);
    }
    if (why[0]) note(out, "reason", why, o->width);
    /* A loaded plugin can carry a remark too (e.g. a newer ABI minor). */
    if (p->pi.state == DEVBUF_PLUGIN_LOADED && p->pi.reason && p->pi.reason[0])
      note(out, "note", p->pi.reason, o->width);
    /* A label the runtime did not give itself (the launcher's "entry point
     * <package> <version>", from devbuf_plugin_load_from) is where the plugin
     * came from and appears in no search path: always shown. */
    static const char *const own_sources[] = {"install", "build tree", "DEVBUF_PLUGINS",
                                              "DEVBUF_PLUGIN_PATH", "explicit", "registered"};
    int own_source = 0;
    for (size_t k = 0; k < sizeof own_sources / sizeof own_sources[0]; k++)
      if (strcmp(INFO_STR(p->pi.source), own_sources[k]) == 0) own_source = 1;
    if (!o->verbose && !own_source) note(out, "source", INFO_STR(p->pi.source), o->width);
    if (o->verbose) {
      note(out, "source", INFO_STR(p->pi.source), o->width);
      if (p->probe != INFO_PROBE_NOT_LOADED)
        fprintf(out, "    probe: %.1f ms%s\n", p->probe_ms,
                m->isolate ? " (in its own process)" : "");
      if (p->pi.description && p->pi.description[0])
        note(out, "about", p->pi.description, o->width);
      if (p->pi.identifiers && p->pi.identifiers[0]) {
        char ids[1024] = "";
        size_t len = 0;
        for (size_t k = 0; p->pi.identifiers[k] && len < sizeof ids; k++)
          len += (size_t)snprintf(ids + len, sizeof ids - len, "%s%s", k ? " " : "",
                                  p->pi.identifiers[k]);
        note(out, "identifiers", ids, o->width);
      }
      const devbuf_plugin_table *t = p->pi.table;
      if (t != NULL && t->dtype_namespaces) {
        char ns[1024] = "";
        size_t len = 0;
        for (size_t k = 0; t->dtype_namespaces[k] && len < sizeof ns; k++)
          len += (size_t)snprintf(ns + len, sizeof ns - len, "%s%s", k ? " " : "",
                                  INFO_STR(t->dtype_namespaces[k]->id));
        if (len) note(out, "dtype namespaces", ns, o->width);
      }
      if (t != NULL && t->ext_function_count) {
        char ex[1024] = "";
        size_t len = 0;
        for (size_t k = 0; t->ext_functions && k < t->ext_function_count && len < sizeof ex; k++)
          len += (size_t)snprintf(ex + len, sizeof ex - len, "%s%s:%s", k ? " " : "",
                                  INFO_STR(t->ext_functions[k].name),
                                  INFO_STR(t->ext_functions[k].signature));
        note(out, "ext functions", ex, o->width);
        /* Listed as callers see them: a malformed entry is never called. */
        for (size_t k = 0; t->ext_functions && k < t->ext_function_count; k++) {
          devbuf_error e;
          if (devbuf_ext_function_check(&t->ext_functions[k], &e) == DEVBUF_OK) continue;
          char line[DEVBUF_ERROR_MESSAGE_SIZE + 32];
          snprintf(line, sizeof line, "#%zu: %s", k, e.message);
          note(out, "invalid ext function", line, o->width);
        }
      }
      const char *cut = info_table_cut(t);
      if (cut != NULL) {
        char line[256];
        snprintf(line, sizeof line,
                 "struct_size %u ends before '%s': that field and those after it read as NULL "
                 "(rebuild the plugin against this devbuf's plugin.h)",
                 (unsigned)t->struct_size, cut);
        note(out, "table", line, o->width);
      }
    }
  }
}

static const char *plugin_name_at(const info_model *m, size_t index) {
  return index < m->nplugins && m->plugins[index].pi.name ? m->plugins[index].pi.name : "?";
}

static void print_identifiers(FILE *out, const info_model *m, const info_options *o) {
  char title[64];
  snprintf(title, sizeof title, "Device identifiers: %zu", m->nidents);
  section(out, title);
  if (m->nidents == 0) {
    fprintf(out, "  (none: no plugin is loaded)\n");
    return;
  }
  int iw = 10;
  for (size_t i = 0; i < m->nidents; i++)
    if (dwidth(m->idents[i]) > iw) iw = dwidth(m->idents[i]);
  if (iw > o->width - 30) iw = o->width - 30;
  fprintf(out, "  %s%-*s  %-12s %s%s\n", col(C_DIM), iw, "IDENTIFIER", "PLUGIN", "DEVICES",
          col(C_RESET));
  for (size_t i = 0; i < m->nidents; i++) {
    size_t pi = m->ident_plugin[i];
    const info_plugin *p = pi < m->nplugins ? &m->plugins[pi] : NULL;
    char devs[32];
    if (p && p->probe == INFO_PROBE_OK) snprintf(devs, sizeof devs, "%d", p->device_count);
    else if (p && p->probe == INFO_PROBE_NO_DEVICE) snprintf(devs, sizeof devs, "0");
    else snprintf(devs, sizeof devs, "-");
    fputs("  ", out);
    cell(out, m->idents[i], iw, 0, 0);
    fputs("  ", out);
    cell(out, plugin_name_at(m, pi), 12, 0, 0);
    fprintf(out, " %7s\n", devs);
  }
}

static void print_devices(FILE *out, const info_model *m, const info_options *o) {
  size_t total = 0;
  for (size_t i = 0; i < m->nplugins; i++) total += m->plugins[i].ndevices;
  char title[64];
  snprintf(title, sizeof title, "Devices: %zu", total);
  section(out, title);
  if (total == 0) {
    fprintf(out, m->no_probe ? "  (not probed: run without --no-probe to list devices)\n"
                             : "  (none: the plugins above say why)\n");
    return;
  }
  int dw = 8;
  for (size_t i = 0; i < m->nplugins; i++) {
    const info_plugin *p = &m->plugins[i];
    for (size_t d = 0; d < p->ndevices; d++) {
      char id[96];
      int n = snprintf(id, sizeof id, "%s:%d", INFO_STR(p->primary_id), p->devices[d].ordinal);
      if (n > dw) dw = n;
    }
  }
  if (dw > 24) dw = 24;
  const int tw = 9, fw = 9, hw = 4;
  int rest = o->width - (2 + dw + 2 + 2 + tw + 1 + fw + 2 + hw);
  if (rest < 20) rest = 20;
  int vw = 6;
  for (size_t i = 0; i < m->nplugins; i++)
    for (size_t d = 0; d < m->plugins[i].ndevices; d++)
      if (dwidth(m->plugins[i].devices[d].props.vendor) > vw)
        vw = dwidth(m->plugins[i].devices[d].props.vendor);
  if (vw > 14) vw = 14;
  if (vw > rest / 2) vw = rest / 2;
  int nw = rest - vw - 1;
  fprintf(out, "  %s%-*s  %-*s %-*s  %*s %*s  %s%s\n", col(C_DIM), dw, "DEVICE", nw, "NAME", vw,
          "VENDOR", tw, "TOTAL", fw, "FREE", "HOST", col(C_RESET));
  for (size_t i = 0; i < m->nplugins; i++) {
    const info_plugin *p = &m->plugins[i];
    for (size_t d = 0; d < p->ndevices; d++) {
      const info_device *dv = &p->devices[d];
      char id[96], tot[32], fre[32];
      snprintf(id, sizeof id, "%s:%d", INFO_STR(p->primary_id), dv->ordinal);
      fputs("  ", out);
      cell(out, id, dw, 0, 0);
      fputs("  ", out);
      if (dv->status != DEVBUF_OK) {
        fprintf(out, "%s(properties unavailable)%s\n", col(C_RED), col(C_RESET));
        note(out, "reason", dv->error, o->width);
        continue;
      }
      info_human_bytes(dv->props.total_memory, tot, sizeof tot);
      info_human_bytes(dv->props.free_memory, fre, sizeof fre);
      cell(out, dv->props.name[0] ? dv->props.name : "-", nw, 0, 0);
      fputc(' ', out);
      cell(out, dv->props.vendor[0] ? dv->props.vendor : "-", vw, 0, 0);
      fputs("  ", out);
      cell(out, tot, tw, 1, 0);
      fputc(' ', out);
      cell(out, fre, fw, 1, 0);
      fprintf(out, "  %s\n", dv->props.flags & DEVBUF_DEVICE_HOST_ACCESSIBLE ? "yes" : "no");
      if (o->verbose) {
        char line[512];
        if (dwidth(dv->props.name) > nw) note(out, "name", dv->props.name, o->width);
        if (dwidth(dv->props.vendor) > vw) note(out, "vendor", dv->props.vendor, o->width);
        snprintf(line, sizeof line,
                 "plugin %s; alloc alignment %u B; DLPack device (%d, %d); host-accessible %s; "
                 "unified %s; async streams %s; total %llu B; free %llu B",
                 plugin_name_at(m, p->index), dv->props.alloc_alignment,
                 dv->props.dlpack_device_type, dv->props.dlpack_device_id,
                 dv->props.flags & DEVBUF_DEVICE_HOST_ACCESSIBLE ? "yes" : "no",
                 dv->props.flags & DEVBUF_DEVICE_UNIFIED ? "yes" : "no",
                 dv->props.flags & DEVBUF_DEVICE_ASYNC ? "yes" : "no",
                 (unsigned long long)dv->props.total_memory,
                 (unsigned long long)dv->props.free_memory);
        note(out, "details", line, o->width);
        for (size_t k = 1; p->pi.identifiers && p->pi.identifiers[k]; k++)
          fprintf(out, "    also %s:%d\n", p->pi.identifiers[k], dv->ordinal);
      }
    }
    if ((size_t)p->device_count > p->ndevices)
      fprintf(out, "  ... and %zu more %s device(s) not listed\n",
              (size_t)p->device_count - p->ndevices, INFO_STR(p->primary_id));
  }
}

static void print_dtypes(FILE *out, const info_model *m, const info_options *o) {
  char title[96];
  snprintf(title, sizeof title, "Dtype namespaces: %zu", m->ndtypes);
  section(out, title);
  if (!m->have_dtypes) {
    fputs("  ", out);
    info_wrap(out, "(this devbuf-info was built without the format engine: only the namespaces "
                   "that plugins offer are listed)", 2, 3, o->width);
  }
  if (m->ndtypes == 0) {
    fprintf(out, "  (none)\n");
    return;
  }
  int iw = 6, pw = 8, sw = 6;
  for (size_t i = 0; i < m->ndtypes; i++) {
    if (dwidth(m->dtypes[i].id) > iw) iw = dwidth(m->dtypes[i].id);
    if (dwidth(m->dtypes[i].provider) > pw) pw = dwidth(m->dtypes[i].provider);
    if (dwidth(m->dtypes[i].source) > sw) sw = dwidth(m->dtypes[i].source);
  }
  if (iw > 16) iw = 16;
  if (pw > 12) pw = 12;
  if (sw > 10) sw = 10;
  fprintf(out, "  %s%-*s  %-*s  %-*s  %s%s\n", col(C_DIM), iw, "ID", pw, "PROVIDER", sw, "SOURCE",
          "DESCRIPTION", col(C_RESET));
  for (size_t i = 0; i < m->ndtypes; i++) {
    const info_dtype *d = &m->dtypes[i];
    fputs("  ", out);
    cell(out, d->id, iw, 0, 0);
    fputs("  ", out);
    cell(out, d->provider, pw, 0, 0);
    fputs("  ", out);
    cell(out, d->source, sw, 0, 0);
    fputs("  ", out);
    int used = 2 + iw + 2 + pw + 2 + sw + 2;
    info_wrap(out, d->description[0] ? d->description : "-", used, used, o->width);
    if (o->verbose && dwidth(d->id) > iw) note(out, "id", d->id, o->width);
    if (d->file) note(out, "file", d->file, o->width);
  }
}

static void bullet(FILE *out, const char *text, int width) {
  fputs("  - ", out);
  info_wrap(out, text, 4, 4, width);
}

/* Why nothing was found, in as many words as it takes. */
static void explain_empty(FILE *out, const info_model *m, const info_options *o) {
  section(out, "Why no plugin was found");
  char line[INFO_REASON_MAX + 256];
  if (!m->default_plugins) {
    snprintf(line, sizeof line,
             "DEVBUF_NO_DEFAULT_PLUGINS=%s turned off the default plugin directory.",
             m->env[2].value);
    bullet(out, line, o->width);
  }
  if (m->env[0].value == NULL || !m->env[0].value[0])
    bullet(out, "DEVBUF_PLUGINS names no plugin file.", o->width);
  if (m->env[1].value == NULL || !m->env[1].value[0])
    bullet(out, "DEVBUF_PLUGIN_PATH names no directory.", o->width);
  for (size_t i = 0; i < m->nsearch; i++) {
    const devbuf_search_entry *e = m->search[i];
    if (!e->exists)
      snprintf(line, sizeof line, "%s (from %s) does not exist.", e->path, e->source);
    else
      snprintf(line, sizeof line, "%s (from %s) holds no file named devbuf_plugin_*.so.",
               e->path, e->source);
    bullet(out, line, o->width);
  }
  fputs("  hint: ", out);
  info_wrap(out, "set DEVBUF_PLUGIN_PATH to a directory of devbuf_plugin_*.so files, or pass "
                 "--plugin FILE.", 8, 8, o->width);
}

void info_print_table(FILE *out, const info_model *m, const info_options *o) {
  g_color = o->color;
  print_header(out, m, o);
  print_search(out, m, o);
  print_plugins(out, m, o);
  if (m->nplugins == 0) explain_empty(out, m, o);
  print_identifiers(out, m, o);
  print_devices(out, m, o);
  print_dtypes(out, m, o);
  if (o->verbose)
    fprintf(out, "\n%sdevice probing took %.1f ms%s\n", col(C_DIM), m->probe_ms, col(C_RESET));
}

/* ---- -l: one line per fact ----------------------------------------------------------- */

void info_print_list(FILE *out, const info_model *m, const info_options *o) {
  g_color = o->color;
  if (m->nplugins == 0) {
    fprintf(out, "no plugins found (searched %zu location%s%s; run devbuf-info for why)\n",
            m->nsearch, m->nsearch == 1 ? "" : "s",
            m->default_plugins ? "" : ", default directory off");
    return;
  }
  for (size_t i = 0; i < m->nplugins; i++) {
    const info_plugin *p = &m->plugins[i];
    char nbuf[80], rbuf[INFO_REASON_MAX + 80];
    int c;
    status_text(p, &c);
    fprintf(out, "%s%s%s %s: ", col(C_BOLD), display_name(p, nbuf, sizeof nbuf), col(C_RESET),
            p->pi.version ? p->pi.version : "-");
    if (p->probe == INFO_PROBE_NOT_LOADED && p->pi.state == DEVBUF_PLUGIN_LOADED) {
      fprintf(out, "loaded, devices not probed\n");
    } else if (p->probe == INFO_PROBE_OK) {
      fprintf(out, "%s%d device%s%s\n", col(c), p->device_count, p->device_count == 1 ? "" : "s",
              col(C_RESET));
      for (size_t d = 0; d < p->ndevices; d++) {
        const info_device *dv = &p->devices[d];
        if (dv->status != DEVBUF_OK) {
          fprintf(out, "  %s:%d: %s\n", INFO_STR(p->primary_id), dv->ordinal, dv->error);
          continue;
        }
        char tot[32];
        info_human_bytes(dv->props.total_memory, tot, sizeof tot);
        fprintf(out, "  %s:%d: %s (%s, %s)\n", INFO_STR(p->primary_id), dv->ordinal,
                dv->props.name[0] ? dv->props.name : "-",
                dv->props.vendor[0] ? dv->props.vendor : "-", tot);
      }
    } else {
      fprintf(out, "%s%s%s\n", col(c), info_plugin_reason(p, rbuf, sizeof rbuf), col(C_RESET));
    }
  }
}
