/* plugins/common: the vendor library opened once at first use, and errors.
 * See gpu_common.h. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_common.h"

int gpu_lazy_init(gpu_lazy *lz, const char *plugin, int (*load)(gpu_lazy *), devbuf_error *err) {
  memset(lz, 0, sizeof *lz);
  if (pthread_mutex_init(&lz->lock, NULL) != 0)
    return devbuf_error_set(err, DEVBUF_EINIT, "%s init: pthread_mutex_init failed", plugin);
  atomic_init(&lz->loaded, 0);
  lz->plugin = plugin;
  lz->load = load;
  return DEVBUF_OK;
}

void gpu_lazy_destroy(gpu_lazy *lz) {
  /* The library stays loaded: vendor runtimes keep threads and exit
   * handlers that must not outlive their code, and other users in the
   * process may share the handle. */
  pthread_mutex_destroy(&lz->lock);
}

int gpu_lazy_ensure(gpu_lazy *lz, devbuf_error *err) {
  if (lz == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "devbuf: NULL plugin state");
  if (!atomic_load_explicit(&lz->loaded, memory_order_acquire)) {
    pthread_mutex_lock(&lz->lock);
    if (!atomic_load_explicit(&lz->loaded, memory_order_relaxed)) {
      lz->status = lz->load(lz);
      if (lz->status != DEVBUF_OK) lz->count = 0;
      atomic_store_explicit(&lz->loaded, 1, memory_order_release);
    }
    pthread_mutex_unlock(&lz->lock);
  }
  if (lz->status != DEVBUF_OK) return devbuf_error_set(err, lz->status, "%s", lz->reason);
  return DEVBUF_OK;
}

int gpu_no_device(gpu_lazy *lz, int code, const char *fmt, ...) {
  va_list ap;
  lz->status = code;
  va_start(ap, fmt);
  vsnprintf(lz->reason, sizeof lz->reason, fmt, ap);
  va_end(ap);
  return code;
}

int gpu_no_device_err(gpu_lazy *lz, const devbuf_error *e) {
  return gpu_no_device(lz, DEVBUF_ENODEV, "%s", e->message);
}

void *gpu_device_table(gpu_lazy *lz, size_t size, const char *none) {
  void *t;
  if (lz->count <= 0) {
    gpu_no_device(lz, DEVBUF_ENODEV, "%s", none);
    return NULL;
  }
  t = calloc((size_t)lz->count, size);
  if (t == NULL)
    gpu_no_device(lz, DEVBUF_ENOMEM, "%s: out of host memory for the device table", lz->plugin);
  return t;
}

int gpu_check_device(gpu_lazy *lz, int device, devbuf_error *err) {
  int rc = gpu_lazy_ensure(lz, err);
  if (rc != DEVBUF_OK) return rc;
  if (device < 0 || device >= lz->count)
    return devbuf_error_set(err, DEVBUF_ENODEV, "%s: no device %d (%d device%s)", lz->plugin,
                            device, lz->count, lz->count == 1 ? "" : "s");
  return DEVBUF_OK;
}

int gpu_device_once(gpu_lazy *lz, atomic_int *ready,
                    int (*setup)(void *state, int device, devbuf_error *err), void *state,
                    int device, devbuf_error *err) {
  int rc = DEVBUF_OK;
  if (atomic_load_explicit(ready, memory_order_acquire)) return DEVBUF_OK;
  pthread_mutex_lock(&lz->lock);
  if (!atomic_load_explicit(ready, memory_order_relaxed)) {
    rc = setup(state, device, err);
    if (rc == DEVBUF_OK) atomic_store_explicit(ready, 1, memory_order_release);
  }
  pthread_mutex_unlock(&lz->lock);
  return rc;
}

static void *gpu_try_open(const char *name, char *why, size_t why_size) {
  void *h;
  dlerror();
  h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    snprintf(why, why_size, "%s", e ? e : "unknown error");
  }
  return h;
}

int gpu_dlopen(gpu_lazy *lz, const char *env_var, const char *const *defaults, const char **used) {
  const char *env = secure_getenv(env_var);
  char first[DEVBUF_ERROR_MESSAGE_SIZE] = "", why[DEVBUF_ERROR_MESSAGE_SIZE];
  char also[DEVBUF_ERROR_MESSAGE_SIZE] = "";
  size_t n = 0;
  if (env != NULL && env[0] != '\0') {
    *used = env;
    lz->lib = gpu_try_open(env, first, sizeof first);
    if (lz->lib == NULL) gpu_no_device(lz, DEVBUF_ENODEV, "dlopen %s: %s", env, first);
    return lz->lib != NULL;
  }
  for (; defaults[n] != NULL; n++) {
    *used = defaults[n];
    lz->lib = gpu_try_open(defaults[n], n == 0 ? first : why, n == 0 ? sizeof first : sizeof why);
    if (lz->lib != NULL) return 1;
    if (n > 0) {
      size_t len = strlen(also);
      snprintf(also + len, sizeof also - len, "%s%s", n == 1 ? " (also tried " : ", ",
               defaults[n]);
    }
  }
  /* The first default's error says most (the others are older sonames). */
  gpu_no_device(lz, DEVBUF_ENODEV, "dlopen %s: %s%s%s", defaults[0], first, also,
                n > 1 ? ")" : "");
  return 0;
}

int gpu_dlsym_all(gpu_lazy *lz, const char *libname, void *api, size_t api_size,
                  const gpu_symbol *required, size_t nrequired, const gpu_symbol *optional,
                  size_t noptional, const char *too_old) {
  int missing = 0;
  for (size_t i = 0; i < nrequired + noptional; i++) {
    const gpu_symbol *s = i < nrequired ? &required[i] : &optional[i - nrequired];
    void *p = dlsym(lz->lib, s->name);
    if (p == NULL && i < nrequired) {
      gpu_no_device(lz, DEVBUF_ENODEV, "dlsym %s in %s: symbol not found (%s)", s->name, libname,
                    too_old);
      memset(api, 0, api_size);
      return -1;
    }
    missing += p == NULL;
    /* POSIX: a function's address round-trips through void *. */
    memcpy((char *)api + s->offset, &p, sizeof p);
  }
  return missing;
}

/* ---- errors ------------------------------------------------------------- */

int gpu_status_lookup(const gpu_status_map *map, size_t n, long long vendor) {
  for (size_t i = 0; i < n; i++)
    if (map[i].vendor == vendor) return map[i].code;
  return DEVBUF_EBACKEND;
}

int gpu_fail_v(devbuf_error *err, int code, int backend_code, const char *op, const char *name,
               const char *text, int style, const char *fmt, va_list ap) {
  char detail[256] = "";
  int colon = style == GPU_DETAIL_COLON;
  const char *open = colon ? ": " : " (", *close = colon ? "" : ")";
  if (fmt != NULL) vsnprintf(detail, sizeof detail, fmt, ap);
  if (!detail[0]) open = close = "";
  /* Some runtimes return the name as the description: say it once. */
  if (text == NULL || strcmp(text, name) == 0)
    devbuf_error_set(err, code, "%s: %s%s%s%s", op, name, open, detail, close);
  else
    devbuf_error_set(err, code, "%s: %s: %s%s%s%s", op, name, text, open, detail, close);
  if (err != NULL) err->backend_code = backend_code;
  return code;
}
