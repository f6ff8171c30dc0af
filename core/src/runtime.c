/* The runtime: one-time initialisation (plugin discovery through the
 * loader), the public plugin API over the records, and the device-count
 * probe. Device resolution by identifier sits above, in device.c, since it
 * goes through the identifier lookup of registry_entry.c. */
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* The process whose exit runs the plugins' shutdown: a forked child has
 * copies of the plugins' state but not their threads, and must leave the
 * parent's OS-wide resources (shm names, files) alone. */
static pid_t g_exit_pid;

/* At exit, every loaded plugin's `shutdown` runs once, in the reverse of
 * load order, after which the runtime never calls it again (its records
 * read "unregistered"; calls through them fail with DEVBUF_ENODEV). What a
 * program leaked (memory, streams, events) may still be live: shutdown
 * releases what it must and must not expect those to be freed first.
 * Registered with atexit() after discovery, so it runs before the
 * destructors of every shared object, plugins included (docs/plugin-authors.md). */
static void exit_shutdown(void) {
  if (getpid() != g_exit_pid) return;
  for (size_t i = atomic_load_explicit(&devbuf__rt.nbackends, memory_order_acquire); i-- > 0;) {
    devbuf_backend *b = devbuf__rt.backends[i];
    pthread_mutex_lock(&devbuf__rt.lock);
    int live = b->state == DEVBUF_PLUGIN_LOADED;
    if (live) {
      devbuf__ident_release_owner(i);
      devbuf__dtype_provider_remove(i);
      b->state = DEVBUF_PLUGIN_UNREGISTERED;
    }
    pthread_mutex_unlock(&devbuf__rt.lock);
    if (live && b->table.shutdown) b->table.shutdown(b->plugin_state);
    if (live) b->plugin_state = NULL;
  }
}

static void init_once(void) {
  devbuf__discover();
  g_exit_pid = getpid();
  atexit(exit_shutdown); /* fails only without memory: then no shutdown at exit */
}

int devbuf_init(devbuf_error *err) {
  (void)err;
  pthread_once(&g_once, init_once);
  return DEVBUF_OK;
}

size_t devbuf_search_path_count(void) {
  devbuf_init(NULL);
  return devbuf__rt.nsearch;
}

const devbuf_search_entry *devbuf_search_path_get(size_t index) {
  devbuf_init(NULL);
  return index < devbuf__rt.nsearch ? &devbuf__rt.search[index] : NULL;
}

size_t devbuf_plugin_count(void) {
  devbuf_init(NULL);
  return atomic_load_explicit(&devbuf__rt.nbackends, memory_order_acquire);
}

int devbuf_plugin_info_get(size_t index, devbuf_plugin_info *out, devbuf_error *err) {
  devbuf_init(NULL);
  devbuf_backend *b = devbuf__backend_get(index);
  if (b == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "devbuf_plugin_info_get: no plugin #%zu (%zu loaded)",
                            index, devbuf_plugin_count());
  if (out == NULL || out->struct_size < offsetof(devbuf_plugin_info, table) + sizeof(void *))
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "devbuf_plugin_info_get: out is NULL or out->struct_size not set");
  out->state = b->state;
  out->error_code = b->error_code;
  out->path = b->path;
  out->source = b->source;
  out->name = b->name;
  out->version = b->version;
  out->description = b->description;
  out->abi_major = b->abi_major;
  out->abi_minor = b->abi_minor;
  out->reason = b->state == DEVBUF_PLUGIN_UNREGISTERED ? "unregistered" : b->reason;
  out->identifiers = b->identifiers;
  out->table = b->state == DEVBUF_PLUGIN_LOADED ? &b->table : NULL;
  return DEVBUF_OK;
}

int devbuf_plugin_load(const char *path, size_t *index, devbuf_error *err) {
  devbuf_init(NULL);
  return devbuf__load_file(path, "explicit", index, err);
}

int devbuf_plugin_load_from(const char *path, const char *source, size_t *index,
                            devbuf_error *err) {
  static const char *const own[] = {"install", "build tree", "DEVBUF_PLUGINS",
                                    "DEVBUF_PLUGIN_PATH", "registered", "explicit"};
  size_t n = source ? strlen(source) : 0;
  if (n == 0 || n > 200)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "devbuf_plugin_load_from: the source label must be 1 to 200 bytes, "
                            "got %zu", n);
  for (size_t i = 0; i < n; i++)
    if (source[i] < 0x20 || source[i] > 0x7e)
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "devbuf_plugin_load_from: the source label has a non-printable "
                              "byte at offset %zu; use printable ASCII", i);
  for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
    if (strcmp(source, own[i]) == 0)
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "devbuf_plugin_load_from: '%s' is a label the runtime gives its own "
                              "discovery; choose another (e.g. \"entry point <package>\")", source);
  devbuf_init(NULL);
  return devbuf__load_file(path, source, index, err);
}

int devbuf_plugin_register(const devbuf_plugin_table *table, const char *origin, size_t *index,
                           devbuf_error *err) {
  devbuf_init(NULL);
  char *path = devbuf__printf("<registered: %s>", origin ? origin : "?");
  if (path == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "out of memory");
  int rc = devbuf__add_table(table, path, "registered", NULL, index, err);
  free(path);
  return rc;
}

/* The plugin whose device_count this thread is inside, if any. */
static _Thread_local devbuf_backend *t_probing;

int devbuf_plugin_unregister(size_t index, devbuf_error *err) {
  devbuf_init(NULL);
  devbuf_backend *b = devbuf__backend_get(index);
  if (b == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "devbuf_plugin_unregister: no plugin #%zu", index);
  pthread_mutex_lock(&devbuf__rt.lock);
  if (b->state != DEVBUF_PLUGIN_LOADED) {
    pthread_mutex_unlock(&devbuf__rt.lock);
    return devbuf_error_set(err, DEVBUF_EINVAL, "devbuf_plugin_unregister: plugin '%s' (%s) is not loaded",
                            b->name ? b->name : "?", b->path);
  }
  uint64_t a = atomic_load(&b->live_allocations), s = atomic_load(&b->live_streams),
           e = atomic_load(&b->live_events), h = atomic_load(&b->live_host_allocations);
  if (a || s || e || h) {
    pthread_mutex_unlock(&devbuf__rt.lock);
    return devbuf_error_set(err, DEVBUF_EBUSY,
                            "devbuf_plugin_unregister: plugin '%s' still has %llu allocation(s), "
                            "%llu stream(s), %llu event(s), %llu host allocation(s) alive",
                            b->name, (unsigned long long)a, (unsigned long long)s,
                            (unsigned long long)e, (unsigned long long)h);
  }
  if (t_probing == b) {
    /* Waiting below for our own probe would never end. */
    pthread_mutex_unlock(&devbuf__rt.lock);
    return devbuf_error_set(err, DEVBUF_EBUSY,
                            "devbuf_plugin_unregister: plugin '%s' cannot be unregistered from "
                            "inside its own device_count", b->name);
  }
  devbuf__ident_release_owner(index);
  devbuf__dtype_provider_remove(index);
  /* b->reason stays: a reader may hold it (strings handed out live until
   * exit); devbuf_plugin_info_get says "unregistered" instead. */
  b->state = DEVBUF_PLUGIN_UNREGISTERED;
  pthread_mutex_unlock(&devbuf__rt.lock);
  /* No new probe can enter now; wait for those already inside the plugin
   * (they hold no devbuf lock, so they finish) before `shutdown` frees what
   * they use. */
  while (atomic_load(&b->calls_in_flight) != 0) {
    struct timespec ts = {0, 100000}; /* 0.1 ms */
    nanosleep(&ts, NULL);
  }
  if (b->table.shutdown) b->table.shutdown(b->plugin_state);
  b->plugin_state = NULL;
  return DEVBUF_OK;
}

int devbuf_plugin_device_count(size_t index, int *count, devbuf_error *err) {
  devbuf_init(NULL);
  devbuf_backend *b = devbuf__backend_get(index);
  if (b == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "no plugin #%zu", index);
  return devbuf__backend_device_count(b, count, err);
}

int devbuf__backend_device_count(devbuf_backend *b, int *count, devbuf_error *err) {
  if (count) *count = 0;
  if (b->state != DEVBUF_PLUGIN_LOADED)
    return devbuf_error_set(err, DEVBUF_ENODEV, "plugin %s is not loaded: %s",
                            b->name ? b->name : b->path, b->reason);
  /* No identifier, no device: a dtype-only table (ABI 1.1) may still fill
   * device slots, but nothing can name its devices, so they are not called. */
  if (b->table.device_count == NULL || b->identifiers == NULL || b->identifiers[0] == NULL)
    return devbuf_error_set(err, DEVBUF_ENODEV,
                            "plugin %s provides dtype namespaces only: it has no devices",
                            b->name ? b->name : b->path);
  /* The probe runs with no runtime lock held: a plugin may block on
   * something the caller's thread holds (a Python plugin's device_count
   * takes the GIL, and a thread that opens one of its devices holds the GIL
   * while it waits here), so holding b->lock across the call deadlocked two
   * threads probing one Python plugin (found by the free-threading stress
   * suite, on the GIL build). Two threads may both probe a plugin the first
   * time; the first answer published is the one everybody gets. */
  pthread_mutex_lock(&b->lock);
  int probed = b->count_probed;
  pthread_mutex_unlock(&b->lock);
  if (!probed) {
    /* Enter only while LOADED, counted under the runtime lock: an
     * unregister between the check above and the call would otherwise run
     * `shutdown` and free the plugin's state under it (a Python plugin
     * listed on one thread while another unregistered it crashed on 3.13t). */
    pthread_mutex_lock(&devbuf__rt.lock);
    int loaded = b->state == DEVBUF_PLUGIN_LOADED;
    if (loaded) atomic_fetch_add(&b->calls_in_flight, 1);
    pthread_mutex_unlock(&devbuf__rt.lock);
    if (!loaded)
      return devbuf_error_set(err, DEVBUF_ENODEV, "plugin %s is not loaded: it was unregistered",
                              b->name ? b->name : b->path);
    devbuf_error e;
    devbuf_error_clear(&e);
    int n = 0;
    devbuf_backend *outer = t_probing;
    t_probing = b;
    int rc = b->table.device_count(b->plugin_state, &n, &e);
    t_probing = outer;
    atomic_fetch_sub(&b->calls_in_flight, 1);
    /* Name what the plugin answered: "0 devices" or "DEVBUF_E?" would hide
     * a broken plugin behind a missing device. */
    if (rc == DEVBUF_OK && n < 0) {
      rc = DEVBUF_EABI;
      snprintf(e.message, sizeof e.message,
               "plugin '%s': device_count returned DEVBUF_OK with *count = %d (a count must be "
               ">= 0; with no device return DEVBUF_ENODEV and the reason)",
               b->name ? b->name : "?", n);
    } else if (rc == DEVBUF_OK && n == 0) {
      rc = DEVBUF_ENODEV;
      if (!e.message[0])
        snprintf(e.message, sizeof e.message,
                 "the plugin reports 0 devices and gives no reason (device_count should return "
                 "DEVBUF_ENODEV with one)");
    } else if (rc != DEVBUF_OK && !devbuf__status_known(rc)) {
      char m[DEVBUF_ERROR_MESSAGE_SIZE];
      snprintf(m, sizeof m,
               "plugin '%s': device_count returned %d, which is not a devbuf_status%s%s",
               b->name ? b->name : "?", rc, e.message[0] ? ": " : "", e.message);
      snprintf(e.message, sizeof e.message, "%s", m);
    }
    /* Checked, not trusted: INT_MAX devices made callers loop
     * 2^31 times. */
    if (rc == DEVBUF_OK && n > DEVBUF_MAX_DEVICES_PER_PLUGIN) {
      rc = DEVBUF_EABI;
      snprintf(e.message, sizeof e.message,
               "plugin '%s' reports %d devices, more than devbuf's limit of %d (a broken answer)",
               b->name ? b->name : "?", n, DEVBUF_MAX_DEVICES_PER_PLUGIN);
    }
    /* A known code with no message still says what happened: "no device: "
     * with nothing after it left the author guessing. */
    if (rc != DEVBUF_OK && !e.message[0])
      snprintf(e.message, sizeof e.message, "device_count failed with %s (no message)",
               devbuf_status_name(rc));
    pthread_mutex_lock(&b->lock);
    if (!b->count_probed) {
      /* A negative code breaks the plugin contract: keep statuses positive. */
      b->count_status =
          rc == DEVBUF_OK ? DEVBUF_OK : (devbuf__status_known(rc) ? rc : DEVBUF_EBACKEND);
      b->count = rc == DEVBUF_OK ? n : 0;
      snprintf(b->count_reason, sizeof b->count_reason, "%s", rc == DEVBUF_OK ? "" : e.message);
      b->count_probed = 1;
    }
    pthread_mutex_unlock(&b->lock);
  }
  pthread_mutex_lock(&b->lock);
  int rc = b->count_status;
  if (count) *count = b->count;
  pthread_mutex_unlock(&b->lock);
  if (rc != DEVBUF_OK)
    return devbuf_error_set(err, rc, "%s: no device: %s", b->name, b->count_reason);
  return DEVBUF_OK;
}

int devbuf_plugin_stats(size_t index, devbuf_stats *out, devbuf_error *err) {
  devbuf_init(NULL);
  devbuf_backend *b = devbuf__backend_get(index);
  if (b == NULL || out == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "devbuf_plugin_stats: no plugin #%zu or out is NULL", index);
  out->live_allocations = atomic_load(&b->live_allocations);
  out->live_bytes = atomic_load(&b->live_bytes);
  out->total_allocations = atomic_load(&b->total_allocations);
  out->live_streams = atomic_load(&b->live_streams);
  out->live_events = atomic_load(&b->live_events);
  out->live_host_allocations = atomic_load(&b->live_host_allocations);
  return DEVBUF_OK;
}
