/* devbuf.hip: AMD GPUs through the HIP runtime (libamdhip64).
 *
 * libamdhip64 is dlopen'd at the first call that needs a device (never in the
 * entry symbol or init), so the plugin builds wherever the HIP headers are
 * and loads on machines without ROCm. The header is used only for types,
 * constants and the names of the entry points.
 *
 * HIP keeps a current device per host thread: every call selects the plugin's
 * device on the calling thread (hipSetDevice) and restores the caller's
 * choice afterwards, so any thread may call any slot. Allocation is
 * stream-ordered from a pool the plugin creates per device when the runtime
 * supports memory pools, else hipMalloc/hipFree. hipGetDeviceProperties is
 * deliberately not used: hipDeviceProp_t changed layout between ROCm 5 and 6.
 * See docs/devices/hip.md. */
#include <hip/hip_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devbuf/plugin.h"

#define HIP_PLUGIN_VERSION "0.1.0"
#define HIP_IDENTIFIER "devbuf.hip"
/* hipMalloc returns at least 256-byte aligned memory. */
#define HIP_NATIVE_ALIGNMENT 256u

/* Tried in order when DEVBUF_HIP_LIBRARY is unset: the development symlink
 * (matches the headers we were built with) and then the runtime sonames. */
/* The device node of AMD's kernel driver (amdgpu KFD) that ROCm opens. */
#define HIP_KFD_NODE "/dev/kfd"

static const char *const hip_default_libraries[] = {"libamdhip64.so", "libamdhip64.so.6",
                                                    "libamdhip64.so.5", NULL};

#define HIP_STR_(x) #x
#define HIP_STR(x) HIP_STR_(x)

#define HIP_REQUIRED(X)        \
  X(hipInit)                   \
  X(hipDriverGetVersion)       \
  X(hipGetErrorName)           \
  X(hipGetErrorString)         \
  X(hipGetDeviceCount)         \
  X(hipGetDevice)              \
  X(hipSetDevice)              \
  X(hipDeviceGet)              \
  X(hipDeviceGetName)          \
  X(hipDeviceTotalMem)         \
  X(hipDeviceGetAttribute)     \
  X(hipMemGetInfo)             \
  X(hipMalloc)                 \
  X(hipFree)                   \
  X(hipHostMalloc)             \
  X(hipHostFree)               \
  X(hipMemcpyHtoDAsync)        \
  X(hipMemcpyDtoHAsync)        \
  X(hipMemcpyDtoDAsync)        \
  X(hipStreamCreateWithFlags)  \
  X(hipStreamDestroy)          \
  X(hipStreamSynchronize)      \
  X(hipStreamWaitEvent)        \
  X(hipEventCreateWithFlags)   \
  X(hipEventDestroy)           \
  X(hipEventRecord)            \
  X(hipEventQuery)             \
  X(hipEventSynchronize)

/* Stream-ordered allocation (ROCm 5.2+): used when present and supported. */
#define HIP_OPTIONAL(X)        \
  X(hipMallocFromPoolAsync)    \
  X(hipFreeAsync)              \
  X(hipMemPoolCreate)          \
  X(hipMemPoolDestroy)         \
  X(hipMemPoolSetAttribute)

#define HIP_FIELD(name) __typeof__(&name) p_##name;
typedef struct hip_api {
  HIP_REQUIRED(HIP_FIELD)
  HIP_OPTIONAL(HIP_FIELD)
} hip_api;
#undef HIP_FIELD

typedef struct hip_aligned {
  uintptr_t aligned;
  uintptr_t base;
} hip_aligned;

typedef struct hip_device {
  hipDevice_t dev;
  atomic_int ready;  /* 1 once the pool decision is made */
  hipMemPool_t pool; /* the plugin's pool, or NULL: hipMalloc/hipFree */
} hip_device;

typedef struct hip_state {
  pthread_mutex_t lock;
  atomic_int loaded;
  int status;
  char reason[DEVBUF_ERROR_MESSAGE_SIZE];
  void *lib;
  hip_api api;
  int have_pool_api;
  int driver_version;
  int count;
  hip_device *devs;

  pthread_mutex_t align_lock;
  atomic_size_t align_count;
  hip_aligned *align;
  size_t align_cap;
} hip_state;

/* ---- errors ----------------------------------------------------------- */

static int hip_status_of(hipError_t r) {
  switch (r) {
    case hipErrorOutOfMemory:
      return DEVBUF_ENOMEM;
    case hipErrorNoDevice:
    case hipErrorInvalidDevice:
      return DEVBUF_ENODEV;
    case hipErrorInvalidValue:
    case hipErrorInvalidHandle:
      return DEVBUF_EINVAL;
    case hipErrorNotReady:
      return DEVBUF_EBUSY;
    case hipErrorNotSupported:
      return DEVBUF_ENOTSUP;
    default:
      return DEVBUF_EBACKEND;
  }
}

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static int hip_fail(const hip_state *st, devbuf_error *err, hipError_t r, const char *op,
                    const char *fmt, ...) {
  const char *name = st->api.p_hipGetErrorName ? st->api.p_hipGetErrorName(r) : NULL;
  const char *text = st->api.p_hipGetErrorString ? st->api.p_hipGetErrorString(r) : NULL;
  char detail[256] = "";
  int code = hip_status_of(r);
  if (name == NULL) name = "hipErrorUnknown";
  if (text == NULL) text = "unrecognized error code";
  if (fmt != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
  }
  /* Some HIP versions return the name as the description: say it once. */
  if (strcmp(text, name) == 0)
    devbuf_error_set(err, code, "%s: %s%s%s%s", op, name, detail[0] ? " (" : "", detail,
                     detail[0] ? ")" : "");
  else
    devbuf_error_set(err, code, "%s: %s: %s%s%s%s", op, name, text, detail[0] ? " (" : "",
                     detail, detail[0] ? ")" : "");
  if (err != NULL) err->backend_code = (int)r;
  return code;
}

/* ---- lazy runtime set-up ------------------------------------------------ */

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void hip_no_device(hip_state *st, int code, const char *fmt, ...) {
  va_list ap;
  st->status = code;
  va_start(ap, fmt);
  vsnprintf(st->reason, sizeof st->reason, fmt, ap);
  va_end(ap);
}

static void hip_open(hip_state *st, const char **used) {
  const char *env = secure_getenv("DEVBUF_HIP_LIBRARY");
  char first[DEVBUF_ERROR_MESSAGE_SIZE] = "";
  if (env != NULL && env[0] != '\0') {
    const char *why;
    dlerror();
    *used = env;
    st->lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (st->lib == NULL) {
      why = dlerror();
      hip_no_device(st, DEVBUF_ENODEV, "dlopen %s: %s", env, why ? why : "unknown error");
    }
    return;
  }
  /* ROCm reaches every AMD GPU through the KFD device node: without it
   * hipInit can only fail, and loading libamdhip64 and its dependencies
   * first was most of devbuf-info's time on a machine without one. Say why
   * without starting the runtime. (DEVBUF_HIP_LIBRARY, above, still loads
   * whatever runtime it names.) */
  if (access(HIP_KFD_NODE, F_OK) != 0) {
    int e = errno;
    *used = NULL;
    hip_no_device(st, DEVBUF_ENODEV,
                  "no %s (%s): no AMD GPU driver on this machine, so %s was not loaded "
                  "(DEVBUF_HIP_LIBRARY=<runtime> loads one anyway)",
                  HIP_KFD_NODE, strerror(e), hip_default_libraries[0]);
    return;
  }
  for (int i = 0; hip_default_libraries[i] != NULL; i++) {
    dlerror();
    *used = hip_default_libraries[i];
    st->lib = dlopen(hip_default_libraries[i], RTLD_NOW | RTLD_LOCAL);
    if (st->lib != NULL) return;
    if (i == 0) {
      const char *why = dlerror();
      snprintf(first, sizeof first, "%s", why ? why : "unknown error");
    }
  }
  hip_no_device(st, DEVBUF_ENODEV, "dlopen %s: %s (also tried %s, %s)", hip_default_libraries[0],
                first, hip_default_libraries[1], hip_default_libraries[2]);
}

static void hip_load(hip_state *st) {
  const char *libname = NULL, *missing = NULL;
  hipError_t r;
  hip_open(st, &libname);
  if (st->lib == NULL) return;

#define HIP_LOAD_REQUIRED(name)                                       \
  if (missing == NULL) {                                              \
    *(void **)(&st->api.p_##name) = dlsym(st->lib, HIP_STR(name));    \
    if (st->api.p_##name == NULL) missing = HIP_STR(name);            \
  }
#define HIP_LOAD_OPTIONAL(name) *(void **)(&st->api.p_##name) = dlsym(st->lib, HIP_STR(name));
  HIP_REQUIRED(HIP_LOAD_REQUIRED)
  HIP_OPTIONAL(HIP_LOAD_OPTIONAL)
#undef HIP_LOAD_REQUIRED
#undef HIP_LOAD_OPTIONAL
  if (missing != NULL) {
    hip_no_device(st, DEVBUF_ENODEV,
                  "dlsym %s in %s: symbol not found (HIP runtime too old for this plugin)",
                  missing, libname);
    memset(&st->api, 0, sizeof st->api);
    return;
  }
  st->have_pool_api = st->api.p_hipMallocFromPoolAsync && st->api.p_hipFreeAsync &&
                      st->api.p_hipMemPoolCreate && st->api.p_hipMemPoolDestroy &&
                      st->api.p_hipMemPoolSetAttribute;

  r = st->api.p_hipInit(0);
  if (r != hipSuccess) {
    /* Without a GPU, hipInit's own code is vague (hipErrorInvalidDevice);
     * the device count's (hipErrorNoDevice) says more: give both. */
    devbuf_error e;
    int n = 0;
    hipError_t r2 = st->api.p_hipGetDeviceCount(&n);
    const char *name2 = st->api.p_hipGetErrorName(r2);
    if (r2 != hipSuccess && r2 != r && name2 != NULL)
      hip_fail(st, &e, r, "hipInit", "hipGetDeviceCount: %s", name2);
    else
      hip_fail(st, &e, r, "hipInit", NULL);
    hip_no_device(st, DEVBUF_ENODEV, "%s", e.message);
    return;
  }
  if (st->api.p_hipDriverGetVersion(&st->driver_version) != hipSuccess) st->driver_version = 0;
  r = st->api.p_hipGetDeviceCount(&st->count);
  if (r != hipSuccess) {
    devbuf_error e;
    hip_fail(st, &e, r, "hipGetDeviceCount", NULL);
    hip_no_device(st, DEVBUF_ENODEV, "%s", e.message);
    st->count = 0;
    return;
  }
  if (st->count <= 0) {
    st->count = 0;
    hip_no_device(st, DEVBUF_ENODEV, "hipGetDeviceCount: the runtime reports 0 HIP devices");
    return;
  }
  st->devs = calloc((size_t)st->count, sizeof *st->devs);
  if (st->devs == NULL) {
    st->count = 0;
    hip_no_device(st, DEVBUF_ENOMEM, "hip: out of host memory for the device table");
    return;
  }
  for (int i = 0; i < st->count; i++) {
    r = st->api.p_hipDeviceGet(&st->devs[i].dev, i);
    if (r != hipSuccess) {
      devbuf_error e;
      hip_fail(st, &e, r, "hipDeviceGet", "ordinal %d", i);
      hip_no_device(st, DEVBUF_ENODEV, "%s", e.message);
      free(st->devs);
      st->devs = NULL;
      st->count = 0;
      return;
    }
  }
  st->status = DEVBUF_OK;
  st->reason[0] = '\0';
}

static int hip_ensure(hip_state *st, devbuf_error *err) {
  if (st == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "devbuf.hip: NULL plugin state");
  if (!atomic_load_explicit(&st->loaded, memory_order_acquire)) {
    pthread_mutex_lock(&st->lock);
    if (!atomic_load_explicit(&st->loaded, memory_order_relaxed)) {
      hip_load(st);
      atomic_store_explicit(&st->loaded, 1, memory_order_release);
    }
    pthread_mutex_unlock(&st->lock);
  }
  if (st->status != DEVBUF_OK) return devbuf_error_set(err, st->status, "%s", st->reason);
  return DEVBUF_OK;
}

/* Called with the device current. No pool is not an error: hipMalloc. */
static void hip_make_pool(hip_state *st, int ordinal, hip_device *d) {
  int supported = 0;
  const char *off = secure_getenv("DEVBUF_HIP_NO_POOL");
  hipMemPoolProps props;
  uint64_t threshold = UINT64_MAX;
  d->pool = NULL;
  if (!st->have_pool_api || (off != NULL && off[0] != '\0' && strcmp(off, "0") != 0)) return;
  if (st->api.p_hipDeviceGetAttribute(&supported, hipDeviceAttributeMemoryPoolsSupported,
                                      ordinal) != hipSuccess ||
      !supported)
    return;
  /* Our own pool, so the default pool other libraries share keeps its
   * settings; the release threshold keeps freed memory pooled. */
  memset(&props, 0, sizeof props);
  props.allocType = hipMemAllocationTypePinned;
  props.handleTypes = hipMemHandleTypeNone;
  props.location.type = hipMemLocationTypeDevice;
  props.location.id = ordinal;
  if (st->api.p_hipMemPoolCreate(&d->pool, &props) != hipSuccess) {
    d->pool = NULL;
    return;
  }
  if (st->api.p_hipMemPoolSetAttribute(d->pool, hipMemPoolAttrReleaseThreshold, &threshold) !=
      hipSuccess) {
    st->api.p_hipMemPoolDestroy(d->pool);
    d->pool = NULL;
  }
}

/* Select the device on this thread for one call; hip_leave restores. */
typedef struct hip_scope {
  int prev;
  int switched;
} hip_scope;

static int hip_enter(hip_state *st, int device, hip_device **out, hip_scope *scope,
                     devbuf_error *err) {
  hip_device *d;
  hipError_t r;
  int rc = hip_ensure(st, err);
  scope->switched = 0;
  scope->prev = -1;
  if (rc != DEVBUF_OK) return rc;
  if (device < 0 || device >= st->count)
    return devbuf_error_set(err, DEVBUF_ENODEV, "devbuf.hip: no device %d (%d device%s)", device,
                            st->count, st->count == 1 ? "" : "s");
  d = &st->devs[device];
  if (st->api.p_hipGetDevice(&scope->prev) != hipSuccess) scope->prev = -1;
  if (scope->prev != device) {
    r = st->api.p_hipSetDevice(device);
    if (r != hipSuccess) return hip_fail(st, err, r, "hipSetDevice", "device %d", device);
    scope->switched = 1;
  }
  if (!atomic_load_explicit(&d->ready, memory_order_acquire)) {
    pthread_mutex_lock(&st->lock);
    if (!atomic_load_explicit(&d->ready, memory_order_relaxed)) {
      hip_make_pool(st, device, d);
      atomic_store_explicit(&d->ready, 1, memory_order_release);
    }
    pthread_mutex_unlock(&st->lock);
  }
  *out = d;
  return DEVBUF_OK;
}

static void hip_leave(hip_state *st, hip_scope *scope) {
  if (scope->switched && scope->prev >= 0) st->api.p_hipSetDevice(scope->prev);
  scope->switched = 0;
}

/* ---- lifecycle --------------------------------------------------------- */

static int hip_init_plugin(void **state, devbuf_error *err) {
  /* Cheap by contract: no dlopen, no runtime call. */
  hip_state *st = calloc(1, sizeof *st);
  if (st == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "devbuf.hip init: out of memory");
  if (pthread_mutex_init(&st->lock, NULL) != 0) {
    free(st);
    return devbuf_error_set(err, DEVBUF_EINIT, "devbuf.hip init: pthread_mutex_init failed");
  }
  if (pthread_mutex_init(&st->align_lock, NULL) != 0) {
    pthread_mutex_destroy(&st->lock);
    free(st);
    return devbuf_error_set(err, DEVBUF_EINIT, "devbuf.hip init: pthread_mutex_init failed");
  }
  atomic_init(&st->loaded, 0);
  atomic_init(&st->align_count, 0);
  *state = st;
  return DEVBUF_OK;
}

static void hip_shutdown(void *state) {
  hip_state *st = state;
  if (st == NULL) return;
  for (int i = 0; i < st->count; i++) {
    if (atomic_load(&st->devs[i].ready) && st->devs[i].pool != NULL)
      st->api.p_hipMemPoolDestroy(st->devs[i].pool);
  }
  /* The HIP runtime stays loaded: it keeps threads and exit handlers. */
  free(st->devs);
  free(st->align);
  pthread_mutex_destroy(&st->align_lock);
  pthread_mutex_destroy(&st->lock);
  free(st);
}

/* ---- devices ------------------------------------------------------------ */

static int hip_device_count(void *state, int *count, devbuf_error *err) {
  hip_state *st = state;
  int rc;
  if (count == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_count: NULL count");
  rc = hip_ensure(st, err);
  *count = rc == DEVBUF_OK ? st->count : 0;
  return rc;
}

static int hip_device_props(void *state, int device, devbuf_device_props *props,
                            devbuf_error *err) {
  hip_state *st = state;
  devbuf_device_props p;
  hip_device *d;
  hip_scope scope;
  size_t n, total = 0, free_b = 0, total_b = 0;
  int pageable = 0, rc;
  hipError_t r;
  if (props == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_props: NULL props");
  rc = hip_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  memset(&p, 0, sizeof p);
  r = st->api.p_hipDeviceGetName(p.name, (int)sizeof p.name, d->dev);
  if (r != hipSuccess) {
    hip_leave(st, &scope);
    return hip_fail(st, err, r, "hipDeviceGetName", "device %d", device);
  }
  p.name[sizeof p.name - 1] = '\0';
  r = st->api.p_hipDeviceTotalMem(&total, d->dev);
  if (r != hipSuccess) {
    hip_leave(st, &scope);
    return hip_fail(st, err, r, "hipDeviceTotalMem", "device %d", device);
  }
  if (st->api.p_hipMemGetInfo(&free_b, &total_b) == hipSuccess) p.free_memory = free_b;
  if (st->api.p_hipDeviceGetAttribute(&pageable, hipDeviceAttributePageableMemoryAccess,
                                      device) == hipSuccess &&
      pageable)
    p.flags |= DEVBUF_DEVICE_UNIFIED;
  hip_leave(st, &scope);
  snprintf(p.vendor, sizeof p.vendor, "AMD");
  p.total_memory = total;
  p.flags |= DEVBUF_DEVICE_ASYNC;
  p.alloc_alignment = HIP_NATIVE_ALIGNMENT;
  p.dlpack_device_type = DEVBUF_DL_ROCM;
  p.dlpack_device_id = device;
  n = props->struct_size ? props->struct_size : sizeof p;
  if (n > sizeof p) n = sizeof p;
  if (n < offsetof(devbuf_device_props, flags) + sizeof p.flags)
    return devbuf_error_set(err, DEVBUF_EINVAL, "device_props: struct_size %u is too small",
                            (unsigned)props->struct_size);
  p.struct_size = (uint32_t)n;
  memcpy(props, &p, n);
  return DEVBUF_OK;
}

/* ---- memory ------------------------------------------------------------ */

static int hip_align_remember(hip_state *st, uintptr_t aligned, uintptr_t base) {
  int ok = 1;
  pthread_mutex_lock(&st->align_lock);
  size_t n = atomic_load(&st->align_count);
  if (n == st->align_cap) {
    size_t cap = st->align_cap ? st->align_cap * 2 : 16;
    hip_aligned *grown = realloc(st->align, cap * sizeof *grown);
    if (grown == NULL) {
      ok = 0;
    } else {
      st->align = grown;
      st->align_cap = cap;
    }
  }
  if (ok) {
    st->align[n].aligned = aligned;
    st->align[n].base = base;
    atomic_store(&st->align_count, n + 1);
  }
  pthread_mutex_unlock(&st->align_lock);
  return ok;
}

static uintptr_t hip_align_forget(hip_state *st, uintptr_t ptr) {
  uintptr_t base = ptr;
  if (atomic_load_explicit(&st->align_count, memory_order_relaxed) == 0) return base;
  pthread_mutex_lock(&st->align_lock);
  size_t n = atomic_load(&st->align_count);
  for (size_t i = 0; i < n; i++) {
    if (st->align[i].aligned == ptr) {
      base = st->align[i].base;
      st->align[i] = st->align[n - 1];
      atomic_store(&st->align_count, n - 1);
      break;
    }
  }
  pthread_mutex_unlock(&st->align_lock);
  return base;
}

static hipError_t hip_raw_alloc(hip_state *st, hip_device *d, void **p, size_t size,
                                hipStream_t stream, const char **op) {
  if (d->pool != NULL) {
    *op = "hipMallocFromPoolAsync";
    return st->api.p_hipMallocFromPoolAsync(p, size, d->pool, stream);
  }
  *op = "hipMalloc";
  return st->api.p_hipMalloc(p, size);
}

static hipError_t hip_raw_free(hip_state *st, hip_device *d, void *p, hipStream_t stream,
                               const char **op) {
  if (d->pool != NULL) {
    *op = "hipFreeAsync";
    return st->api.p_hipFreeAsync(p, stream);
  }
  *op = "hipFree";
  return st->api.p_hipFree(p);
}

static int hip_mem_alloc(void *state, int device, size_t size, size_t alignment, void *stream,
                         void **ptr, devbuf_error *err) {
  hip_state *st = state;
  hip_device *d;
  hip_scope scope;
  void *base = NULL;
  uintptr_t aligned;
  size_t request = size ? size : 1; /* size 0 still yields a unique pointer */
  const char *op = "hipMalloc";
  hipError_t r;
  int rc;
  if (ptr == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "mem_alloc: NULL ptr");
  *ptr = NULL;
  if (alignment & (alignment - 1))
    return devbuf_error_set(err, DEVBUF_EINVAL, "mem_alloc: alignment %zu is not a power of two",
                            alignment);
  if (alignment > HIP_NATIVE_ALIGNMENT) {
    if (request > SIZE_MAX - alignment)
      return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: %zu bytes aligned to %zu overflows",
                              size, alignment);
    request += alignment;
  }
  rc = hip_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  r = hip_raw_alloc(st, d, &base, request, (hipStream_t)stream, &op);
  if (r != hipSuccess) {
    hip_leave(st, &scope);
    return hip_fail(st, err, r, op, "%zu bytes on device %d", size, device);
  }
  aligned = (uintptr_t)base;
  if (alignment > HIP_NATIVE_ALIGNMENT) {
    aligned = ((uintptr_t)base + alignment - 1) & ~(uintptr_t)(alignment - 1);
    if (aligned != (uintptr_t)base && !hip_align_remember(st, aligned, (uintptr_t)base)) {
      const char *fop;
      hip_raw_free(st, d, base, (hipStream_t)stream, &fop);
      hip_leave(st, &scope);
      return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: out of host memory");
    }
  }
  hip_leave(st, &scope);
  *ptr = (void *)aligned;
  return DEVBUF_OK;
}

static int hip_mem_free(void *state, int device, void *ptr, void *stream, devbuf_error *err) {
  hip_state *st = state;
  hip_device *d;
  hip_scope scope;
  const char *op;
  hipError_t r;
  int rc = hip_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (ptr == NULL) {
    hip_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "mem_free: NULL pointer");
  }
  r = hip_raw_free(st, d, (void *)hip_align_forget(st, (uintptr_t)ptr), (hipStream_t)stream, &op);
  hip_leave(st, &scope);
  if (r != hipSuccess) return hip_fail(st, err, r, op, "%p on device %d", ptr, device);
  return DEVBUF_OK;
}

static int hip_host_alloc(void *state, int device, size_t size, void **ptr, devbuf_error *err) {
  hip_state *st = state;
  hip_device *d;
  hip_scope scope;
  hipError_t r;
  int rc;
  if (ptr == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "host_alloc: NULL ptr");
  *ptr = NULL;
  rc = hip_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  r = st->api.p_hipHostMalloc(ptr, size ? size : 1, hipHostMallocPortable);
  hip_leave(st, &scope);
  if (r != hipSuccess) {
    *ptr = NULL;
    return hip_fail(st, err, r, "hipHostMalloc", "%zu bytes", size);
  }
  return DEVBUF_OK;
}

static int hip_host_free(void *state, int device, void *ptr, devbuf_error *err) {
  hip_state *st = state;
  hip_device *d;
  hip_scope scope;
  hipError_t r;
  int rc = hip_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (ptr == NULL) {
    hip_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "host_free: NULL pointer");
  }
  r = st->api.p_hipHostFree(ptr);
  hip_leave(st, &scope);
  if (r != hipSuccess) return hip_fail(st, err, r, "hipHostFree", "%p", ptr);
  return DEVBUF_OK;
}

/* ---- copies -------------------------------------------------------------- */

static int hip_offset(const void *base, size_t offset, void **out) {
  if (offset > UINTPTR_MAX - (uintptr_t)base) return 0;
  *out = (void *)((uintptr_t)base + offset);
  return 1;
}

static int hip_copy_h2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                        size_t nbytes, void *stream, devbuf_error *err) {
  hip_state *st = state;
  hip_device *d;
  hip_scope scope;
  void *to;
  hipError_t r;
  int rc = hip_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (nbytes == 0) goto done;
  if (dst == NULL || src == NULL) {
    hip_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_h2d: NULL %s", dst ? "src" : "dst");
  }
  if (!hip_offset(dst, dst_offset, &to)) {
    hip_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_h2d: offset %zu overflows", dst_offset);
  }
  /* HIP declares the source non-const; it only reads it. */
  r = st->api.p_hipMemcpyHtoDAsync(to, (void *)(uintptr_t)src, nbytes, (hipStream_t)stream);
  if (r != hipSuccess) {
    hip_leave(st, &scope);
    return hip_fail(st, err, r, "hipMemcpyHtoDAsync", "%zu bytes to %p+%zu on device %d", nbytes,
                    dst, dst_offset, device);
  }
done:
  hip_leave(st, &scope);
  return DEVBUF_OK;
}

static int hip_copy_d2h(void *state, int device, void *dst, const void *src, size_t src_offset,
                        size_t nbytes, void *stream, devbuf_error *err) {
  hip_state *st = state;
  hip_device *d;
  hip_scope scope;
  void *from;
  hipError_t r;
  int rc = hip_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (nbytes == 0) goto done;
  if (dst == NULL || src == NULL) {
    hip_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2h: NULL %s", dst ? "src" : "dst");
  }
  if (!hip_offset(src, src_offset, &from)) {
    hip_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2h: offset %zu overflows", src_offset);
  }
  r = st->api.p_hipMemcpyDtoHAsync(dst, from, nbytes, (hipStream_t)stream);
  if (r != hipSuccess) {
    hip_leave(st, &scope);
    return hip_fail(st, err, r, "hipMemcpyDtoHAsync", "%zu bytes from %p+%zu on device %d",
                    nbytes, src, src_offset, device);
  }
done:
  hip_leave(st, &scope);
  return DEVBUF_OK;
}

static int hip_copy_d2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                        size_t src_offset, size_t nbytes, void *stream, devbuf_error *err) {
  hip_state *st = state;
  hip_device *d;
  hip_scope scope;
  void *to, *from;
  hipError_t r;
  int rc = hip_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (nbytes == 0) goto done;
  if (dst == NULL || src == NULL) {
    hip_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2d: NULL %s", dst ? "src" : "dst");
  }
  if (!hip_offset(dst, dst_offset, &to) || !hip_offset(src, src_offset, &from)) {
    hip_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2d: offset overflows");
  }
  r = st->api.p_hipMemcpyDtoDAsync(to, from, nbytes, (hipStream_t)stream);
  if (r != hipSuccess) {
    hip_leave(st, &scope);
    return hip_fail(st, err, r, "hipMemcpyDtoDAsync", "%zu bytes on device %d", nbytes, device);
  }
done:
  hip_leave(st, &scope);
  return DEVBUF_OK;
}

/* ---- streams ---------------------------------------------------------- */

static int hip_stream_create(void *state, int device, void **stream, devbuf_error *err) {
  hip_state *st = state;
  hip_device *d;
  hip_scope scope;
  hipStream_t s = NULL;
  hipError_t r;
  int rc;
  if (stream == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "stream_create: NULL stream");
  *stream = NULL;
  rc = hip_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  r = st->api.p_hipStreamCreateWithFlags(&s, hipStreamNonBlocking);
  hip_leave(st, &scope);
  if (r != hipSuccess) return hip_fail(st, err, r, "hipStreamCreateWithFlags", "device %d", device);
  *stream = s;
  return DEVBUF_OK;
}

static int hip_stream_destroy(void *state, int device, void *stream, devbuf_error *err) {
  hip_state *st = state;
  hip_device *d;
  hip_scope scope;
  hipError_t r;
  int rc = hip_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (stream == NULL) { /* the default stream was never created, so cannot be destroyed */
    hip_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "stream_destroy: NULL is the default stream");
  }
  r = st->api.p_hipStreamDestroy((hipStream_t)stream);
  hip_leave(st, &scope);
  if (r != hipSuccess) return hip_fail(st, err, r, "hipStreamDestroy", "device %d", device);
  return DEVBUF_OK;
}

static int hip_stream_synchronize(void *state, int device, void *stream, devbuf_error *err) {
  hip_state *st = state;
  hip_device *d;
  hip_scope scope;
  hipError_t r;
  int rc = hip_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  r = st->api.p_hipStreamSynchronize((hipStream_t)stream);
  hip_leave(st, &scope);
  if (r != hipSuccess) return hip_fail(st, err, r, "hipStreamSynchronize", "device %d", device);
  return DEVBUF_OK;
}

/* ---- events --------------------------------------------------------- */

static int hip_event_create(void *state, int device, void **event, devbuf_error *err) {
  hip_state *st = state;
  hip_device *d;
  hip_scope scope;
  hipEvent_t e = NULL;
  hipError_t r;
  int rc;
  if (event == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "event_create: NULL event");
  *event = NULL;
  rc = hip_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  r = st->api.p_hipEventCreateWithFlags(&e, hipEventDisableTiming);
  hip_leave(st, &scope);
  if (r != hipSuccess) return hip_fail(st, err, r, "hipEventCreateWithFlags", "device %d", device);
  *event = e;
  return DEVBUF_OK;
}

#define HIP_EVENT_CALL(op, call)                                                     \
  hip_state *st = state;                                                             \
  hip_device *d;                                                                     \
  hip_scope scope;                                                                   \
  hipError_t r;                                                                      \
  int rc = hip_enter(st, device, &d, &scope, err);                                   \
  if (rc != DEVBUF_OK) return rc;                                                    \
  if (event == NULL) {                                                               \
    hip_leave(st, &scope);                                                           \
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: NULL event", op);               \
  }                                                                                  \
  r = (call);                                                                        \
  hip_leave(st, &scope);

static int hip_event_destroy(void *state, int device, void *event, devbuf_error *err) {
  HIP_EVENT_CALL("event_destroy", st->api.p_hipEventDestroy((hipEvent_t)event))
  if (r != hipSuccess) return hip_fail(st, err, r, "hipEventDestroy", "device %d", device);
  return DEVBUF_OK;
}

static int hip_event_record(void *state, int device, void *event, void *stream,
                            devbuf_error *err) {
  HIP_EVENT_CALL("event_record", st->api.p_hipEventRecord((hipEvent_t)event, (hipStream_t)stream))
  if (r != hipSuccess) return hip_fail(st, err, r, "hipEventRecord", "device %d", device);
  return DEVBUF_OK;
}

static int hip_stream_wait_event(void *state, int device, void *stream, void *event,
                                 devbuf_error *err) {
  HIP_EVENT_CALL("stream_wait_event",
                 st->api.p_hipStreamWaitEvent((hipStream_t)stream, (hipEvent_t)event, 0))
  if (r != hipSuccess) return hip_fail(st, err, r, "hipStreamWaitEvent", "device %d", device);
  return DEVBUF_OK;
}

static int hip_event_synchronize(void *state, int device, void *event, devbuf_error *err) {
  HIP_EVENT_CALL("event_synchronize", st->api.p_hipEventSynchronize((hipEvent_t)event))
  if (r != hipSuccess) return hip_fail(st, err, r, "hipEventSynchronize", "device %d", device);
  return DEVBUF_OK;
}

static int hip_event_query(void *state, int device, void *event, devbuf_error *err) {
  HIP_EVENT_CALL("event_query", st->api.p_hipEventQuery((hipEvent_t)event))
  if (r == hipSuccess) return DEVBUF_OK;
  if (r == hipErrorNotReady) return DEVBUF_EBUSY;
  return hip_fail(st, err, r, "hipEventQuery", "device %d", device);
}
#undef HIP_EVENT_CALL

/* ---- device_info ------------------------------------------------------ */

#define HIP_INFO_FLAGS (DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE | DEVBUF_DEVICE_INFO_READONLY)

static int hip_device_info_export(void *state, const char *identifier, int device, void *event,
                                  void *stream, uint32_t flags, void *out, size_t capacity,
                                  size_t *size, devbuf_error *err) {
  hip_state *st = state;
  int rc;
  if (identifier == NULL || strcmp(identifier, HIP_IDENTIFIER) != 0)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                            "device_info_export: devbuf.hip does not implement \"%s\"",
                            identifier ? identifier : "(null)");
  rc = devbuf_device_info_check_out(out, capacity, size, flags, HIP_INFO_FLAGS, "device_info_export", err);
  if (rc != DEVBUF_OK) return rc;
  rc = hip_ensure(st, err);
  if (rc != DEVBUF_OK) return rc;
  if (device < 0 || device >= st->count)
    return devbuf_error_set(err, DEVBUF_ENODEV, "device_info_export: no device %d (%d devices)",
                            device, st->count);
  /* event: a hipEvent_t; stream: a hipStream_t */
  devbuf_device_info_write(out, size, device, flags, event, stream);
  return DEVBUF_OK;
}

static int hip_device_info_import(void *state, const char *identifier, const void *info,
                                  devbuf_device_info_desc *out, devbuf_error *err) {
  hip_state *st = state;
  int rc;
  if (identifier == NULL || strcmp(identifier, HIP_IDENTIFIER) != 0)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                            "device_info_import: devbuf.hip does not implement \"%s\"",
                            identifier ? identifier : "(null)");
  rc = devbuf_device_info_read(info, HIP_INFO_FLAGS, out, "device_info_import", err);
  if (rc != DEVBUF_OK) return rc;
  rc = hip_ensure(st, err);
  if (rc != DEVBUF_OK) return rc;
  if (out->device_ordinal >= st->count)
    return devbuf_error_set(err, DEVBUF_ENODEV,
                            "device_info_import: device_ordinal %d out of range (%d devices)",
                            (int)out->device_ordinal, st->count);
  return DEVBUF_OK;
}

/* ---- the table --------------------------------------------------------- */

static const char *const hip_identifiers[] = {HIP_IDENTIFIER, NULL};

static const devbuf_plugin_table hip_table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "hip",
    .version = HIP_PLUGIN_VERSION,
    .description = "AMD GPUs through the HIP runtime (libamdhip64, loaded at first use)",
    .identifiers = hip_identifiers,
    .init = hip_init_plugin,
    .shutdown = hip_shutdown,
    .device_count = hip_device_count,
    .device_props = hip_device_props,
    .mem_alloc = hip_mem_alloc,
    .mem_free = hip_mem_free,
    .copy_h2d = hip_copy_h2d,
    .copy_d2h = hip_copy_d2h,
    .copy_d2d = hip_copy_d2d,
    .stream_create = hip_stream_create,
    .stream_destroy = hip_stream_destroy,
    .stream_synchronize = hip_stream_synchronize,
    .event_create = hip_event_create,
    .event_destroy = hip_event_destroy,
    .event_record = hip_event_record,
    .stream_wait_event = hip_stream_wait_event,
    .event_synchronize = hip_event_synchronize,
    .event_query = hip_event_query,
    .device_info_export = hip_device_info_export,
    .device_info_import = hip_device_info_import,
    .dtype_namespaces = NULL,
    .host_alloc = hip_host_alloc,
    .host_free = hip_host_free,
    .ext_functions = NULL,
    .ext_function_count = 0,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &hip_table; }
