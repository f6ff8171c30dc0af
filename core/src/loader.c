/* The plugin loader: discovery, dlopen, table validation, registration.
 *
 * Every plugin file found gets a record, loaded or not, so that devbuf-info
 * can say why something is missing. A broken plugin never stops the others
 * and never crashes the host: the table is read only up to the struct_size
 * it declares, every mandatory slot and string is checked before use. */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>

#include "internal.h"

#define HEADER_SIZE (offsetof(devbuf_plugin_table, abi_minor) + sizeof(uint16_t))
#define MAX_NAME 64
#define MAX_TEXT 256
/* Beyond these, the first bytes are not a devbuf table header at all. */
#define DEVBUF_PLUGIN_TABLE_PLAUSIBLE_MAX (1u << 20)
#define DEVBUF_PLUGIN_ABI_PLAUSIBLE_MAX 255

static devbuf_backend *new_record(const char *path, const char *source) {
  devbuf_backend *b = calloc(1, sizeof *b);
  if (b == NULL) return NULL;
  b->path = devbuf__strdup(path ? path : "");
  b->source = devbuf__strdup(source ? source : "explicit");
  b->reason = devbuf__strdup("");
  b->identifiers = calloc(1, sizeof(char *));
  pthread_mutex_init(&b->lock, NULL);
  if (!b->path || !b->source || !b->reason || !b->identifiers) {
    free(b->path); free(b->source); free(b->reason); free(b->identifiers); free(b);
    return NULL;
  }
  return b;
}

/* Publish a record; caller holds devbuf__rt.lock. */
static int publish(devbuf_backend *b, size_t *index, devbuf_error *err) {
  size_t n = atomic_load(&devbuf__rt.nbackends);
  if (n >= DEVBUF_MAX_PLUGINS)
    return devbuf_error_set(err, DEVBUF_ENOMEM, "too many plugins (limit %d)", DEVBUF_MAX_PLUGINS);
  b->index = n;
  devbuf__rt.backends[n] = b;
  atomic_store_explicit(&devbuf__rt.nbackends, n + 1, memory_order_release);
  if (index) *index = n;
  return DEVBUF_OK;
}

static int fail_record(devbuf_backend *b, int code, size_t *index, devbuf_error *err,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Mark `b` failed with a reason, publish it, and report the same error. */
static int fail_record(devbuf_backend *b, int code, size_t *index, devbuf_error *err,
                       const char *fmt, ...) {
  char msg[DEVBUF_ERROR_MESSAGE_SIZE];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  b->state = DEVBUF_PLUGIN_FAILED;
  b->error_code = code;
  free(b->reason);
  b->reason = devbuf__strdup(msg);
  /* Records are never freed, and there are DEVBUF_MAX_PLUGINS of them, so a
   * failure adds one only when a listing needs it: a table registered in
   * memory gets its error back and leaves no record, and a file that fails
   * again exactly as before reuses its record (a program retrying a broken
   * plugin in a loop must not exhaust the table; found by fuzzing). */
  int rc = DEVBUF_EEXIST;
  pthread_mutex_lock(&devbuf__rt.lock);
  if (strcmp(b->source, "registered") == 0) {
    if (index) *index = (size_t)-1;
  } else {
    size_t n = atomic_load(&devbuf__rt.nbackends);
    for (size_t i = 0; i < n; i++) {
      const devbuf_backend *o = devbuf__rt.backends[i];
      if (o->state == DEVBUF_PLUGIN_FAILED && o->error_code == code &&
          strcmp(o->path, b->path) == 0 && strcmp(o->source, b->source) == 0 &&
          o->reason && b->reason && strcmp(o->reason, b->reason) == 0) {
        if (index) *index = i;
        break;
      }
      if (i + 1 == n) rc = DEVBUF_OK;
    }
    if (n == 0) rc = DEVBUF_OK;
    if (rc == DEVBUF_OK) rc = publish(b, index, NULL);
  }
  pthread_mutex_unlock(&devbuf__rt.lock);
  if (rc != DEVBUF_OK) { /* not recorded (or could not be): free it */
    free(b->path); free(b->source); free(b->reason); free(b->identifiers);
    free(b->name); free(b->version); free(b->description); free(b);
  }
  return devbuf_error_set(err, code, "%s", msg);
}

static const char *slot_names[] = {"device_count", "device_props", "mem_alloc", "mem_free",
                                   "copy_h2d", "copy_d2h", "copy_d2d", "stream_create",
                                   "stream_destroy", "stream_synchronize", "event_create",
                                   "event_destroy", "event_record", "stream_wait_event",
                                   "event_synchronize", "event_query"};

/* copy_h2d and every slot after it may be NULL from ABI 1.1 on. */
#define FIRST_DEFAULTED_SLOT 4
/* stream_create and every slot after it: the handles the defaults make. */
#define FIRST_STREAM_SLOT 7

static const void *slot_value(const devbuf_plugin_table *t, size_t i) {
  const void *v[] = {(const void *)t->device_count,      (const void *)t->device_props,
                     (const void *)t->mem_alloc,         (const void *)t->mem_free,
                     (const void *)t->copy_h2d,          (const void *)t->copy_d2h,
                     (const void *)t->copy_d2d,          (const void *)t->stream_create,
                     (const void *)t->stream_destroy,    (const void *)t->stream_synchronize,
                     (const void *)t->event_create,      (const void *)t->event_destroy,
                     (const void *)t->event_record,      (const void *)t->stream_wait_event,
                     (const void *)t->event_synchronize, (const void *)t->event_query};
  return v[i];
}

static int is_own_plugin(const char *path);

/* A table string that lies inside memory this record allocated after the
 * table was handed over was freed by then (a Rust CString dropped when the
 * entry function returned, a C buffer on the entry's stack): the allocator
 * gave its bytes to the loader, and the plugin's "version" read
 * "DEVBUF_PLUGINS", the loader's own copy of the record's source.
 * Pointer comparisons only: nothing is read through `p`. Returns what the
 * memory belongs to, or NULL. */
static const char *record_alias(const devbuf_backend *b, const void *p) {
  const char *q = p;
  const char *const mine[] = {b->path, b->source, b->reason, b->name};
  const char *const what[] = {"its file path", "its source", "its reason", "its name"};
  for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
    if (mine[i] != NULL && q >= mine[i] && q <= mine[i] + strlen(mine[i])) return what[i];
  if (b->identifiers != NULL && q >= (const char *)b->identifiers &&
      q < (const char *)(b->identifiers + 1))
    return "its identifier list";
  return NULL;
}

static int fail_dangling(devbuf_backend *b, size_t *index, devbuf_error *err, const char *path,
                         const char *field, const char *p, const char *owner) {
  return fail_record(b, DEVBUF_EABI, index, err,
                     "%s: table '%s' points at memory devbuf allocated after the plugin handed "
                     "over its table (it now reads '%.40s', devbuf's copy of %s): the string was "
                     "freed, a dangling pointer; table strings must stay valid until shutdown "
                     "(static storage: a C string literal, a Rust c\"...\" literal, not "
                     "CString::new(...).as_ptr() of a temporary)",
                     path, field, p, owner);
}

/* Does the string `s` (len bytes, already read) run into another of the
 * table's strings? A string missing its terminating NUL (a Rust "x" literal
 * is not NUL-terminated) reads on into whatever the linker placed after it,
 * typically the next literal: an identifier "rustdev.host" became
 * "rustdev.host0.1.0". A linker may also share a string's tail
 * legitimately ("sim" inside "devbuf.sim"), so only a string that starts
 * inside `s` after a letter or digit counts. Pointer comparisons only. */
static const char *runs_into(const char *s, size_t len, const char *const *others,
                             const char *const *names, size_t n, size_t *at) {
  for (size_t i = 0; i < n; i++) {
    const char *o = others[i];
    if (o == NULL || o == s || o <= s || o >= s + len) continue;
    unsigned char before = (unsigned char)o[-1];
    int joined = (before >= '0' && before <= '9') || (before >= 'a' && before <= 'z') ||
                 (before >= 'A' && before <= 'Z');
    if (!joined || s + len - o < 3) continue; /* "1" may well end "cuda1" */
    *at = (size_t)(o - s);
    return names[i];
  }
  return NULL;
}

/* Is this plugin allowed to claim the reserved identifier "cpu"? Only devbuf's
 * own cpu plugin, found in devbuf's own plugin directory. */
static int may_claim_cpu(const devbuf_backend *b) {
  return b->name && strcmp(b->name, "cpu") == 0 &&
         (strcmp(b->source, "install") == 0 || strcmp(b->source, "build tree") == 0);
}

int devbuf__add_table(const devbuf_plugin_table *table, const char *path, const char *source,
                      void *dl_handle, size_t *index, devbuf_error *err) {
  devbuf_backend *b = new_record(path, source);
  if (b == NULL) {
    if (dl_handle) dlclose(dl_handle);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "out of memory recording plugin %s", path);
  }
  int rc;
  if (table == NULL) {
    rc = fail_record(b, DEVBUF_EABI, index, err, "%s: %s() returned NULL", path,
                     DEVBUF_PLUGIN_ENTRY_NAME);
    goto fail;
  }
  /* Read the size before anything else, and nothing past it. */
  uint32_t size = table->struct_size;
  /* A table laid out otherwise than plugin.h (a Rust struct without
   * #[repr(C)] puts a pointer first) reads as half a pointer: "ABI 32762.0,
   * rebuild" would send the author the wrong way. Real tables are
   * a few hundred bytes (a future one, a few KiB) and real majors small. */
  if (size > DEVBUF_PLUGIN_TABLE_PLAUSIBLE_MAX || table->abi_major == 0 ||
      table->abi_major > DEVBUF_PLUGIN_ABI_PLAUSIBLE_MAX) {
    /* Not a table: its "ABI" is garbage, not recorded (0.0 = unknown). */
    char what[96];
    if (size > DEVBUF_PLUGIN_TABLE_PLAUSIBLE_MAX)
      snprintf(what, sizeof what, "struct_size %u is implausible", (unsigned)size);
    else
      snprintf(what, sizeof what, "abi_major %u is implausible", (unsigned)table->abi_major);
    rc = fail_record(b, DEVBUF_EABI, index, err,
                     "%s: this is not a devbuf plugin table (%s; is the table laid out as in "
                     "plugin.h, e.g. #[repr(C)]? it must start with uint32_t struct_size, "
                     "uint16_t abi_major = %d, uint16_t abi_minor)",
                     path, what, DEVBUF_ABI_MAJOR);
    goto fail;
  }
  if (size < HEADER_SIZE) {
    rc = fail_record(b, DEVBUF_EABI, index, err,
                     "%s: table struct_size %u is too small to hold even the ABI header "
                     "(%zu bytes)", path, size, (size_t)HEADER_SIZE);
    goto fail;
  }
  b->abi_major = table->abi_major;
  b->abi_minor = table->abi_minor;
  if (table->abi_major != DEVBUF_ABI_MAJOR) {
    rc = fail_record(b, DEVBUF_EABI, index, err,
                     "%s: plugin was built for devbuf plugin ABI %u.%u, this runtime speaks "
                     "ABI %d.%d (major versions must match; rebuild the plugin against this "
                     "devbuf)", path, table->abi_major, table->abi_minor, DEVBUF_ABI_MAJOR,
                     DEVBUF_ABI_MINOR);
    goto fail;
  }
  if (size < DEVBUF_PLUGIN_TABLE_V1_SIZE) {
    rc = fail_record(b, DEVBUF_EABI, index, err,
                     "%s: short table: struct_size %u is less than the %zu bytes that ABI %d.0 "
                     "requires", path, size, (size_t)DEVBUF_PLUGIN_TABLE_V1_SIZE,
                     DEVBUF_ABI_MAJOR);
    goto fail;
  }
  /* Zero-padded host copy: fields the plugin did not declare read as NULL.
   * Whole fields only: a struct_size ending inside a pointer must not leave
   * half a pointer behind (found by fuzz_plugin_table). Every field after
   * the 8-byte header is pointer-sized. */
  _Static_assert(offsetof(devbuf_plugin_table, name) == sizeof(void *) &&
                     sizeof(devbuf_plugin_table) % sizeof(void *) == 0,
                 "plugin table fields after the header are pointer-sized");
  size_t keep = size < sizeof b->table ? size : sizeof b->table;
  keep -= keep % sizeof(void *);
  memset(&b->table, 0, sizeof b->table);
  memcpy(&b->table, table, keep);
  b->table.struct_size = (uint32_t)keep;
  const devbuf_plugin_table *t = &b->table;

  const char *alias = record_alias(b, t->name);
  if (alias != NULL) {
    rc = fail_dangling(b, index, err, path, "name", t->name, alias);
    goto fail;
  }
  if (!devbuf__printable(t->name, MAX_NAME) || t->name[0] == '\0') {
    rc = fail_record(b, DEVBUF_EABI, index, err,
                     "%s: table 'name' is NULL, empty, non-printable or longer than %d bytes",
                     path, MAX_NAME);
    goto fail;
  }
  b->name = devbuf__strdup(t->name);
  if ((alias = record_alias(b, t->version)) != NULL) {
    rc = fail_dangling(b, index, err, path, "version", t->version, alias);
    goto fail;
  }
  if (!devbuf__printable(t->version, MAX_NAME)) {
    rc = fail_record(b, DEVBUF_EABI, index, err,
                     "%s (%s): table 'version' is NULL, non-printable or too long", path, b->name);
    goto fail;
  }
  {
    /* name or version missing its NUL, read into the other (see runs_into). */
    const char *const strs[2] = {t->name, t->version};
    const char *const snames[2] = {"name", "version"};
    for (int k = 0; k < 2; k++) {
      const char *others[2] = {strs[1 - k], t->description};
      const char *onames[2] = {snames[1 - k], "description"};
      size_t at = 0;
      const char *into = runs_into(strs[k], strlen(strs[k]), others, onames, 2, &at);
      if (into != NULL) {
        rc = fail_record(b, DEVBUF_EABI, index, err,
                         "%s: table '%s' reads '%s', which runs into the table's %s ('%s') at "
                         "byte %zu: it is missing its terminating NUL (C strings end in \\0; in "
                         "Rust write c\"%.*s\")",
                         path, snames[k], strs[k], into, strs[k] + at, at, (int)at, strs[k]);
        goto fail;
      }
    }
  }
  b->version = devbuf__strdup(t->version);
  b->description = devbuf__strdup(devbuf__printable(t->description, MAX_TEXT) ? t->description : "");
  /* A table with no identifier serves only dtype namespaces (ABI 1.1): it
   * has no device, so no device slot is asked of it. */
  int no_ids = t->identifiers == NULL || t->identifiers[0] == NULL;
  int dtype_only = no_ids && t->dtype_namespaces != NULL && t->abi_minor >= 1;
  if (no_ids && t->dtype_namespaces != NULL && !dtype_only) {
    rc = fail_record(b, DEVBUF_EABI, index, err,
                     "%s (%s): the table declares no device identifiers (a plugin that only "
                     "provides dtype namespaces sets dtype_namespaces and ABI minor >= 1; this "
                     "one was built for ABI %u.%u)", path, b->name, t->abi_major, t->abi_minor);
    goto fail;
  }
  for (size_t i = 0; i < sizeof slot_names / sizeof slot_names[0] && !dtype_only; i++) {
    /* From ABI 1.1, the copy, stream and event slots may be NULL: the
     * runtime then runs synchronous defaults, for host-accessible devices
     * only (checked at the call). A 1.0 table is held to 1.0's rules. */
    if (slot_value(t, i) == NULL && !(t->abi_minor >= 1 && i >= FIRST_DEFAULTED_SLOT)) {
      rc = fail_record(b, DEVBUF_EABI, index, err,
                       "%s (%s): mandatory slot '%s' is NULL%s", path, b->name, slot_names[i],
                       i >= FIRST_DEFAULTED_SLOT
                           ? " (a plugin built for ABI 1.1 or later may leave it NULL when its "
                             "device is host-accessible)"
                           : "");
      goto fail;
    }
  }
  /* The defaults' stream and event handles mean nothing to a plugin's own
   * slots, nor theirs to the defaults: those nine are NULL together or set
   * together. */
  if (!dtype_only) {
    size_t first_null = 0, first_set = 0, nulls = 0, nstream = 0;
    for (size_t i = FIRST_STREAM_SLOT; i < sizeof slot_names / sizeof slot_names[0]; i++, nstream++) {
      if (slot_value(t, i) == NULL) {
        if (nulls++ == 0) first_null = i;
      } else if (first_set == 0) {
        first_set = i;
      }
    }
    if (nulls != 0 && nulls != nstream) {
      rc = fail_record(b, DEVBUF_EABI, index, err,
                       "%s (%s): slot '%s' is NULL but '%s' is not: the stream and event slots "
                       "(stream_create to event_query) are all set, or all NULL for the "
                       "runtime's synchronous defaults", path, b->name, slot_names[first_null],
                       slot_names[first_set]);
      goto fail;
    }
  }
  if (!dtype_only && (t->identifiers == NULL || t->identifiers[0] == NULL)) {
    rc = fail_record(b, DEVBUF_EABI, index, err,
                     "%s (%s): the table declares no device identifiers (a plugin that only "
                     "provides dtype namespaces sets dtype_namespaces and ABI minor >= 1)",
                     path, b->name);
    goto fail;
  }
  size_t nids = 0;
  for (; !dtype_only && t->identifiers[nids] != NULL; nids++) {
    devbuf_error e;
    if (nids >= 64) {
      rc = fail_record(b, DEVBUF_EABI, index, err,
                       "%s (%s): more than 64 identifiers (is the list NULL-terminated?)", path,
                       b->name);
      goto fail;
    }
    if ((alias = record_alias(b, t->identifiers[nids])) != NULL) {
      char field[32];
      snprintf(field, sizeof field, "identifiers[%zu]", nids);
      rc = fail_dangling(b, index, err, path, field, t->identifiers[nids], alias);
      goto fail;
    }
    if (devbuf_identifier_check(t->identifiers[nids], &e) != DEVBUF_OK) {
      rc = fail_record(b, DEVBUF_EABI, index, err, "%s (%s): invalid identifier #%zu: %s",
                       path, b->name, nids, e.message);
      goto fail;
    }
    {
      const char *id = t->identifiers[nids];
      const char *others[3 + 64];
      const char *onames[3 + 64];
      char idname[64][24];
      size_t no = 0, at = 0;
      others[no] = t->name, onames[no++] = "name";
      others[no] = t->version, onames[no++] = "version";
      others[no] = t->description, onames[no++] = "description";
      for (size_t j = 0; j < nids; j++) {
        snprintf(idname[j], sizeof idname[j], "identifier #%zu", j);
        others[no] = t->identifiers[j], onames[no++] = idname[j];
      }
      const char *into = runs_into(id, strlen(id), others, onames, no, &at);
      if (into != NULL) {
        rc = fail_record(b, DEVBUF_EABI, index, err,
                         "%s (%s): identifier #%zu reads '%s', which runs into the table's %s "
                         "('%s') at byte %zu: the identifier is missing its terminating NUL "
                         "(C strings end in \\0; in Rust write c\"%.*s\" or b\"%.*s\\0\")",
                         path, b->name, nids, id, into, id + at, at, (int)at, id, (int)at, id);
        goto fail;
      }
    }
    for (size_t j = 0; j < nids; j++) {
      if (strcmp(t->identifiers[j], t->identifiers[nids]) == 0) {
        rc = fail_record(b, DEVBUF_EABI, index, err,
                         "%s (%s): identifier '%s' is listed twice (#%zu and #%zu)", path,
                         b->name, t->identifiers[nids], j, nids);
        goto fail;
      }
    }
    if (strcmp(t->identifiers[nids], "cpu") == 0 && !may_claim_cpu(b)) {
      rc = fail_record(b, DEVBUF_EABI, index, err,
                       "%s (%s): identifier 'cpu' is reserved (by the buffer-protocol draft, for "
                       "host memory; only devbuf's own cpu plugin implements it)", path, b->name);
      goto fail;
    }
  }
  if (t->abi_minor > DEVBUF_ABI_MINOR) {
    free(b->reason);
    b->reason = devbuf__printf("plugin ABI %u.%u is newer than this runtime's %d.%d: slots "
                               "added after %d.%d are ignored", t->abi_major, t->abi_minor,
                               DEVBUF_ABI_MAJOR, DEVBUF_ABI_MINOR, DEVBUF_ABI_MAJOR,
                               DEVBUF_ABI_MINOR);
  }

  /* init runs outside the lock: it may call back into foreign code. */
  if (t->init != NULL) {
    devbuf_error e;
    devbuf_error_clear(&e);
    int irc = t->init(&b->plugin_state, &e);
    if (irc != DEVBUF_OK) {
      char num[48];
      rc = fail_record(b, DEVBUF_EINIT, index, err, "%s (%s): init failed: %s: %s", path,
                       b->name, devbuf__status_text(irc, num, sizeof num),
                       e.message[0] ? e.message : "(no message)");
      goto fail;
    }
  }

  /* Claim identifiers atomically: all or none. */
  const char **ids = calloc(nids + 1, sizeof *ids);
  if (ids == NULL) {
    if (t->shutdown) t->shutdown(b->plugin_state);
    rc = fail_record(b, DEVBUF_ENOMEM, index, err, "%s: out of memory", path);
    goto fail;
  }
  pthread_mutex_lock(&devbuf__rt.lock);
  size_t n = atomic_load(&devbuf__rt.nbackends);
  size_t bad = 0, owner = 0;
  int crc = DEVBUF_OK;
  /* Look before interning: a refused table must not use up interned
   * entries (there are 1024 and they are never freed). */
  for (size_t i = 0; i < nids && crc == DEVBUF_OK; i++)
    if (devbuf__ident_find(t->identifiers[i], NULL, &owner) == DEVBUF_OK) {
      crc = DEVBUF_EEXIST;
      bad = i;
    }
  for (size_t i = 0; i < nids && crc == DEVBUF_OK; i++) {
    ids[i] = devbuf__intern(t->identifiers[i]);
    crc = ids[i] ? devbuf__ident_claim(ids[i], n, &owner) : DEVBUF_ENOMEM;
    bad = i;
  }
  if (crc != DEVBUF_OK) {
    devbuf__ident_release_owner(n);
    pthread_mutex_unlock(&devbuf__rt.lock);
    free(ids);
    if (t->shutdown) t->shutdown(b->plugin_state);
    b->plugin_state = NULL;
    if (crc == DEVBUF_EEXIST) {
      /* The owner is a published record: duplicates within this table were
       * refused above, so it is never this one. */
      const devbuf_backend *o = owner < n ? devbuf__rt.backends[owner] : NULL;
      int reserved = strncmp(t->identifiers[bad], "devbuf.", 7) == 0 && o && is_own_plugin(o->path);
      rc = fail_record(b, DEVBUF_EEXIST, index, err,
                       "%s (%s): identifier '%s' is already implemented by plugin '%s' from %s%s",
                       path, b->name, t->identifiers[bad], o && o->name ? o->name : "?",
                       o ? o->path : "?",
                       reserved ? " (devbuf.* identifiers belong to devbuf's own plugins, which "
                                  "load first; name yours after your own package)"
                                : "");
    } else {
      rc = fail_record(b, DEVBUF_ENOMEM, index, err,
                       "%s (%s): cannot intern identifier '%s' (registry full)", path, b->name,
                       t->identifiers[bad]);
    }
    goto fail;
  }
  /* Serving a devbuf.* identifier from outside devbuf's own directory is
   * possible only where devbuf's own plugin is absent (not built, or
   * DEVBUF_NO_DEFAULT_PLUGINS): never silently. */
  for (size_t i = 0; i < nids && !is_own_plugin(path); i++) {
    if (strncmp(ids[i], "devbuf.", 7) != 0) continue;
    char *remark = devbuf__printf("%s%sserves '%s', an identifier reserved for devbuf's own "
                                  "plugins (none of them provides it in this process)",
                                  b->reason, b->reason[0] ? "; " : "", ids[i]);
    if (remark) {
      free(b->reason);
      b->reason = remark;
    }
    break;
  }
  free(b->identifiers);
  b->identifiers = ids;
  b->dl_handle = dl_handle;
  b->state = DEVBUF_PLUGIN_LOADED;
  rc = publish(b, index, err);
  /* Published records are never freed, so the registry may keep the
   * provider record and the plugin's name. */
  if (rc == DEVBUF_OK && b->table.dtype_namespaces != NULL)
    devbuf__dtype_provider_add(&b->dtype_provider, n, b->name, b->table.dtype_namespaces);
  pthread_mutex_unlock(&devbuf__rt.lock);
  if (rc != DEVBUF_OK) {
    devbuf__ident_release_owner(n);
    if (t->shutdown) t->shutdown(b->plugin_state);
    free(ids); free(b->path); free(b->source); free(b->reason);
    free(b->name); free(b->version); free(b->description); free(b);
  }
  return rc;

fail:
  if (dl_handle) dlclose(dl_handle);
  return rc;
}

static int already_loaded(const char *real, size_t *index) {
  size_t n = atomic_load_explicit(&devbuf__rt.nbackends, memory_order_acquire);
  for (size_t i = 0; i < n; i++) {
    devbuf_backend *b = devbuf__rt.backends[i];
    if (b->dl_handle && strcmp(b->path, real) == 0 && b->state == DEVBUF_PLUGIN_LOADED) {
      if (index) *index = i;
      return 1;
    }
  }
  return 0;
}

static int load_file_locked(const char *p, const char *source, size_t *index, devbuf_error *err);

/* File loads are serialized: two threads loading the same file must get the
 * same record, not one success and one "identifier already implemented by
 * <itself>" (found by tests/stress). Recursive, in case a plugin's init loads
 * another plugin. Lookups and registrations of tables do not take it. */
static pthread_mutex_t g_load_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

int devbuf__load_file(const char *path, const char *source, size_t *index, devbuf_error *err) {
  char real[PATH_MAX];
  if (path == NULL || path[0] == '\0')
    return devbuf_error_set(err, DEVBUF_EINVAL, "plugin path is NULL or empty");
  if (strchr(path, '/') == NULL) {
    /* dlopen would search LD_LIBRARY_PATH, the cache and the system
     * directories for a bare name, and load something other than what a
     * listing says is missing. */
    devbuf_backend *b = new_record(path, source);
    if (b == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "out of memory");
    return fail_record(b, DEVBUF_ELOAD, index, err,
                       "'%s' is a bare file name: devbuf loads plugins by path only (give "
                       "./%s or an absolute path), never through the dynamic linker's search",
                       path, path);
  }
  const char *p = realpath(path, real) ? real : path;
  pthread_mutex_lock(&g_load_lock);
  int rc = load_file_locked(p, source, index, err);
  pthread_mutex_unlock(&g_load_lock);
  return rc;
}

static int load_file_locked(const char *p, const char *source, size_t *index, devbuf_error *err) {
  if (already_loaded(p, index)) return DEVBUF_OK;
  dlerror();
  void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    devbuf_backend *b = new_record(p, source);
    if (b == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "out of memory");
    return fail_record(b, DEVBUF_ELOAD, index, err, "dlopen %s: %s", p, e ? e : "unknown error");
  }
  dlerror();
  void *sym = dlsym(h, DEVBUF_PLUGIN_ENTRY_NAME);
  if (sym == NULL) {
    /* dlclose resets dlerror's buffer: copy the text first. */
    const char *e = dlerror();
    char why[256];
    snprintf(why, sizeof why, "%s", e ? e : "symbol not found");
    devbuf_backend *b = new_record(p, source);
    dlclose(h);
    if (b == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "out of memory");
    return fail_record(b, DEVBUF_ELOAD, index, err,
                       "%s: no entry symbol '%s' (is this a devbuf plugin?): %s", p,
                       DEVBUF_PLUGIN_ENTRY_NAME, why);
  }
  devbuf_plugin_entry_fn entry;
  memcpy(&entry, &sym, sizeof entry); /* object -> function pointer, as POSIX allows */
  return devbuf__add_table(entry(), p, source, h, index, err);
}

/* ---- discovery ------------------------------------------------------------- */

static void add_search(const char *path, const char *source, int is_file) {
  if (devbuf__rt.nsearch >= DEVBUF_MAX_SEARCH || path == NULL || path[0] == '\0') return;
  struct stat st;
  devbuf_search_entry *e = &devbuf__rt.search[devbuf__rt.nsearch++];
  e->path = devbuf__strdup(path);
  e->source = source;
  e->is_file = is_file;
  e->exists = stat(path, &st) == 0 && (is_file ? S_ISREG(st.st_mode) : S_ISDIR(st.st_mode));
}

static int is_plugin_name(const char *name) {
  size_t n = strlen(name);
  return strncmp(name, "devbuf_plugin_", 14) == 0 && n > 17 && strcmp(name + n - 3, ".so") == 0;
}

/* cargo names a cdylib crate `devbuf_plugin_x` libdevbuf_plugin_x.so (and
 * CMake a library without PREFIX ""): so near the plugin name that skipping
 * it without a word left authors looking at an empty listing. */
static int plugin_name_filter(const struct dirent *d) {
  return is_plugin_name(d->d_name) ||
         (strncmp(d->d_name, "lib", 3) == 0 && is_plugin_name(d->d_name + 3));
}

static void load_dir(const devbuf_search_entry *e) {
  struct dirent **list = NULL;
  int n = scandir(e->path, &list, plugin_name_filter, alphasort);
  if (n < 0) return;
  for (int i = 0; i < n; i++) {
    char *full = devbuf__printf("%s/%s", e->path, list[i]->d_name);
    if (full && !is_plugin_name(list[i]->d_name)) {
      devbuf_backend *b = new_record(full, e->source);
      if (b != NULL)
        fail_record(b, DEVBUF_ELOAD, NULL, NULL,
                    "%s: not loaded: a plugin file in a search directory is named "
                    "devbuf_plugin_*.so, without the 'lib' prefix (cargo and most build systems "
                    "add it to a shared library): rename or copy it to %s/%s, or list the file "
                    "itself in DEVBUF_PLUGINS",
                    full, e->path, list[i]->d_name + 3);
    } else if (full) {
      devbuf__load_file(full, e->source, NULL, NULL);
    }
    free(full);
    free(list[i]);
  }
  free(list);
}

/* Secure-execution mode (setuid/setgid, file capabilities: AT_SECURE), in
 * which glibc drops LD_PRELOAD and LD_LIBRARY_PATH. devbuf is as careful:
 * the plugin-path variables are ignored there, since they name code that
 * would run with the program's privileges, not the user's. */
int devbuf_secure_execution(void) { return getauxval(AT_SECURE) != 0; }

const char *devbuf__getenv(const char *name) { return secure_getenv(name); }

/* Refuse a relative entry: it would resolve against whatever the current
 * directory is when discovery runs. Recorded, so devbuf-info says why. */
static void refuse_relative(const char *entry, const char *source) {
  devbuf_backend *b = new_record(entry, source);
  if (b == NULL) return;
  fail_record(b, DEVBUF_EINVAL, NULL, NULL,
              "%s entry '%s' is a relative path: refused (it would resolve against the current "
              "directory at start-up); give an absolute path",
              source, entry);
}

static void split_env(const char *var, const char *source, int is_file) {
  const char *v = devbuf__getenv(var);
  if (v == NULL) return;
  char *copy = devbuf__strdup(v);
  if (copy == NULL) return;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
    if (tok[0] != '/') refuse_relative(tok, source);
    else add_search(tok, source, is_file);
  }
  free(copy);
}

/* Directory of libdevbuf itself, via dladdr on one of our own functions,
 * resolved ONCE when the library is loaded (a constructor): dladdr gives
 * the name it was loaded by, which may be relative, and the process may
 * change directory before devbuf_init. */
static char g_libdir[PATH_MAX];
static int g_libdir_ok;

__attribute__((constructor)) static void devbuf__resolve_library_dir(void) {
  Dl_info info;
  if (dladdr((void *)&devbuf__discover, &info) == 0 || info.dli_fname == NULL) return;
  char real[PATH_MAX];
  if (realpath(info.dli_fname, real) == NULL) return;
  char *slash = strrchr(real, '/');
  if (slash == NULL || real[0] != '/') return;
  *slash = '\0';
  snprintf(g_libdir, sizeof g_libdir, "%s", real);
  g_libdir_ok = 1;
}

static int library_dir(char *out, size_t cap) {
  if (!g_libdir_ok) return 0;
  snprintf(out, cap, "%s", g_libdir);
  return 1;
}

/* devbuf's own plugin directory (realpath), once discovery has found it. */
static char g_own_dir[PATH_MAX];

/* Is `path` a file in devbuf's own plugin directory? */
static int is_own_plugin(const char *path) {
  const char *slash = strrchr(path, '/');
  size_t n = slash ? (size_t)(slash - path) : 0;
  return g_own_dir[0] != '\0' && n == strlen(g_own_dir) && strncmp(path, g_own_dir, n) == 0;
}

void devbuf__discover(void) {
  split_env("DEVBUF_PLUGINS", "DEVBUF_PLUGINS", 1);
  split_env("DEVBUF_PLUGIN_PATH", "DEVBUF_PLUGIN_PATH", 0);
  const char *nodef = devbuf__getenv("DEVBUF_NO_DEFAULT_PLUGINS");
  size_t own = (size_t)-1;
  if (!(nodef && nodef[0] && strcmp(nodef, "0") != 0)) {
    char libdir[PATH_MAX];
    if (library_dir(libdir, sizeof libdir)) {
      char build_real[PATH_MAX];
      int in_build = realpath(DEVBUF_BUILD_LIB_DIR, build_real) != NULL &&
                     strcmp(build_real, libdir) == 0;
      char *dir = devbuf__printf("%s/%s", libdir, DEVBUF_PLUGIN_INSTALL_REL);
      if (dir) {
        own = devbuf__rt.nsearch;
        add_search(dir, in_build ? "build tree" : "install", 0);
        if (own == devbuf__rt.nsearch || realpath(dir, g_own_dir) == NULL) {
          own = (size_t)-1;
          g_own_dir[0] = '\0'; /* realpath leaves it undefined on failure */
        }
      }
      free(dir);
    }
  }
  /* devbuf's own directory loads first: its plugins own the devbuf.*
   * identifiers (and cpu), so a third-party plugin claiming one of them is
   * the one refused, with both files named, whatever the search order. The
   * search path keeps its documented order for listings. */
  if (own != (size_t)-1 && devbuf__rt.search[own].exists) load_dir(&devbuf__rt.search[own]);
  for (size_t i = 0; i < devbuf__rt.nsearch; i++) {
    const devbuf_search_entry *e = &devbuf__rt.search[i];
    if (i == own) continue;
    if (e->is_file) /* even a missing file: its record says so */
      devbuf__load_file(e->path, e->source, NULL, NULL);
    else if (e->exists)
      load_dir(e);
  }
}
