/* devbuf.cuda: NVIDIA GPUs through the CUDA driver API.
 *
 * libcuda.so.1 is dlopen'd at the first call that needs a device (never in
 * the entry symbol or init), so the plugin builds wherever cuda.h is and loads
 * on machines without a driver. cuda.h is used only for types, constants and
 * the names of the versioned entry points (cuda.h maps cuMemAlloc to
 * cuMemAlloc_v2 and so on; the X-macros below resolve exactly the symbol a
 * program compiled against the same header would link).
 *
 * Each device uses its primary context, retained at the first use of that
 * device and made current around every driver call (and restored after), so
 * any thread may call any slot. Allocation is stream-ordered from a pool the
 * plugin creates per device when the driver supports memory pools, with a
 * release threshold that keeps freed memory in the pool; otherwise it falls
 * back to cuMemAlloc/cuMemFree. See docs/devices/cuda.md. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/plugin.h"

#define CUDA_PLUGIN_VERSION "0.1.0"
#define CUDA_DEFAULT_LIBRARY "libcuda.so.1"
#define CUDA_IDENTIFIER "devbuf.cuda"
/* cuMemAlloc and the pool allocator return at least 256-byte aligned memory. */
#define CUDA_NATIVE_ALIGNMENT 256u

#define CUDA_STR_(x) #x
#define CUDA_STR(x) CUDA_STR_(x)

/* Entry points the plugin cannot work without. */
#define CUDA_REQUIRED(X)          \
  X(cuInit)                       \
  X(cuDriverGetVersion)           \
  X(cuGetErrorName)               \
  X(cuGetErrorString)             \
  X(cuDeviceGetCount)             \
  X(cuDeviceGet)                  \
  X(cuDeviceGetName)              \
  X(cuDeviceTotalMem)             \
  X(cuDeviceGetAttribute)         \
  X(cuDevicePrimaryCtxRetain)     \
  X(cuDevicePrimaryCtxRelease)    \
  X(cuDevicePrimaryCtxGetState)   \
  X(cuCtxGetCurrent)              \
  X(cuCtxPushCurrent)             \
  X(cuCtxPopCurrent)              \
  X(cuMemGetInfo)                 \
  X(cuMemAlloc)                   \
  X(cuMemFree)                    \
  X(cuMemHostAlloc)               \
  X(cuMemFreeHost)                \
  X(cuMemcpyHtoDAsync)            \
  X(cuMemcpyDtoHAsync)            \
  X(cuMemcpyDtoDAsync)            \
  X(cuStreamCreate)               \
  X(cuStreamDestroy)              \
  X(cuStreamSynchronize)          \
  X(cuStreamWaitEvent)            \
  X(cuEventCreate)                \
  X(cuEventDestroy)               \
  X(cuEventRecord)                \
  X(cuEventQuery)                 \
  X(cuEventSynchronize)

/* Stream-ordered allocation (CUDA 11.2+): used when present and supported. */
#define CUDA_OPTIONAL(X)          \
  X(cuMemAllocFromPoolAsync)      \
  X(cuMemFreeAsync)               \
  X(cuMemPoolCreate)              \
  X(cuMemPoolDestroy)             \
  X(cuMemPoolSetAttribute)

/* One function pointer per entry point, typed from cuda.h's own declaration
 * (so a signature mismatch is a compile error). `p_##name` pastes the
 * unexpanded name; `&name` expands to the versioned symbol. */
#define CUDA_FIELD(name) __typeof__(&name) p_##name;
typedef struct cuda_api {
  CUDA_REQUIRED(CUDA_FIELD)
  CUDA_OPTIONAL(CUDA_FIELD)
} cuda_api;
#undef CUDA_FIELD

/* An over-aligned allocation: mem_free must hand the base back to CUDA. */
typedef struct cuda_aligned {
  CUdeviceptr aligned;
  CUdeviceptr base;
} cuda_aligned;

typedef struct cuda_device {
  CUdevice dev;
  atomic_int ready;   /* 1 once ctx (and pool) are set up */
  CUcontext ctx;      /* retained primary context */
  CUmemoryPool pool;  /* the plugin's pool, or NULL: cuMemAlloc/cuMemFree */
} cuda_device;

typedef struct cuda_state {
  pthread_mutex_t lock;  /* guards lazy set-up (driver and devices) */
  atomic_int loaded;     /* 1 once the driver was tried (status says how it went) */
  int status;            /* DEVBUF_OK, or why there is no device */
  char reason[DEVBUF_ERROR_MESSAGE_SIZE];
  void *lib;
  cuda_api api;
  int have_pool_api;
  int driver_version;
  int count;
  cuda_device *devs;

  pthread_mutex_t align_lock;  /* guards the over-aligned table */
  atomic_size_t align_count;   /* lets mem_free skip the lock when empty */
  cuda_aligned *align;
  size_t align_cap;
} cuda_state;

/* ---- errors ----------------------------------------------------------- */

static int cuda_status_of(CUresult r) {
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return DEVBUF_ENOMEM;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_INVALID_DEVICE:
      return DEVBUF_ENODEV;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
      return DEVBUF_EINVAL;
    case CUDA_ERROR_NOT_READY:
      return DEVBUF_EBUSY;
    case CUDA_ERROR_NOT_SUPPORTED:
      return DEVBUF_ENOTSUP;
    default:
      return DEVBUF_EBACKEND;
  }
}

/* "op: CUDA_ERROR_NAME: driver text (detail)" */
#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static int cuda_fail(const cuda_state *st, devbuf_error *err, CUresult r, const char *op,
                     const char *fmt, ...) {
  const char *name = NULL, *text = NULL;
  char detail[256] = "";
  int code = cuda_status_of(r);
  if (st->api.p_cuGetErrorName == NULL || st->api.p_cuGetErrorName(r, &name) != CUDA_SUCCESS ||
      name == NULL)
    name = "CUDA_ERROR_UNKNOWN";
  if (st->api.p_cuGetErrorString == NULL ||
      st->api.p_cuGetErrorString(r, &text) != CUDA_SUCCESS || text == NULL)
    text = "unrecognized error code";
  if (fmt != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
  }
  devbuf_error_set(err, code, "%s: %s: %s%s%s%s", op, name, text, detail[0] ? " (" : "", detail,
                   detail[0] ? ")" : "");
  if (err != NULL) err->backend_code = (int)r;
  return code;
}

/* ---- lazy driver set-up ------------------------------------------------ */

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void cuda_no_device(cuda_state *st, int code, const char *fmt, ...) {
  va_list ap;
  st->status = code;
  va_start(ap, fmt);
  vsnprintf(st->reason, sizeof st->reason, fmt, ap);
  va_end(ap);
}

static void cuda_load(cuda_state *st) {
  const char *libname = secure_getenv("DEVBUF_CUDA_LIBRARY");
  const char *missing = NULL;
  CUresult r;
  if (libname == NULL || libname[0] == '\0') libname = CUDA_DEFAULT_LIBRARY;

  dlerror();
  st->lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
  if (st->lib == NULL) {
    const char *why = dlerror();
    cuda_no_device(st, DEVBUF_ENODEV, "dlopen %s: %s", libname, why ? why : "unknown error");
    return;
  }

#define CUDA_LOAD_REQUIRED(name)                                                   \
  if (missing == NULL) {                                                           \
    *(void **)(&st->api.p_##name) = dlsym(st->lib, CUDA_STR(name));                \
    if (st->api.p_##name == NULL) missing = CUDA_STR(name);                        \
  }
#define CUDA_LOAD_OPTIONAL(name) *(void **)(&st->api.p_##name) = dlsym(st->lib, CUDA_STR(name));
  CUDA_REQUIRED(CUDA_LOAD_REQUIRED)
  CUDA_OPTIONAL(CUDA_LOAD_OPTIONAL)
#undef CUDA_LOAD_REQUIRED
#undef CUDA_LOAD_OPTIONAL
  if (missing != NULL) {
    cuda_no_device(st, DEVBUF_ENODEV,
                   "dlsym %s in %s: symbol not found (driver too old for this plugin)", missing,
                   libname);
    memset(&st->api, 0, sizeof st->api);
    return;
  }
  st->have_pool_api = st->api.p_cuMemAllocFromPoolAsync && st->api.p_cuMemFreeAsync &&
                      st->api.p_cuMemPoolCreate && st->api.p_cuMemPoolDestroy &&
                      st->api.p_cuMemPoolSetAttribute;

  r = st->api.p_cuInit(0);
  if (r != CUDA_SUCCESS) {
    devbuf_error e;
    cuda_fail(st, &e, r, "cuInit", NULL);
    cuda_no_device(st, DEVBUF_ENODEV, "%s", e.message);
    return;
  }
  if (st->api.p_cuDriverGetVersion(&st->driver_version) != CUDA_SUCCESS) st->driver_version = 0;
  r = st->api.p_cuDeviceGetCount(&st->count);
  if (r != CUDA_SUCCESS) {
    devbuf_error e;
    cuda_fail(st, &e, r, "cuDeviceGetCount", NULL);
    cuda_no_device(st, DEVBUF_ENODEV, "%s", e.message);
    st->count = 0;
    return;
  }
  if (st->count <= 0) {
    st->count = 0;
    cuda_no_device(st, DEVBUF_ENODEV, "cuDeviceGetCount: the driver reports 0 CUDA devices");
    return;
  }
  st->devs = calloc((size_t)st->count, sizeof *st->devs);
  if (st->devs == NULL) {
    st->count = 0;
    cuda_no_device(st, DEVBUF_ENOMEM, "cuda: out of host memory for the device table");
    return;
  }
  for (int i = 0; i < st->count; i++) {
    r = st->api.p_cuDeviceGet(&st->devs[i].dev, i);
    if (r != CUDA_SUCCESS) {
      devbuf_error e;
      cuda_fail(st, &e, r, "cuDeviceGet", "ordinal %d", i);
      cuda_no_device(st, DEVBUF_ENODEV, "%s", e.message);
      free(st->devs);
      st->devs = NULL;
      st->count = 0;
      return;
    }
  }
  st->status = DEVBUF_OK;
  st->reason[0] = '\0';
}

/* The driver is tried once; the outcome (devices, or why none) is kept. */
static int cuda_ensure(cuda_state *st, devbuf_error *err) {
  if (st == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "devbuf.cuda: NULL plugin state");
  if (!atomic_load_explicit(&st->loaded, memory_order_acquire)) {
    pthread_mutex_lock(&st->lock);
    if (!atomic_load_explicit(&st->loaded, memory_order_relaxed)) {
      cuda_load(st);
      atomic_store_explicit(&st->loaded, 1, memory_order_release);
    }
    pthread_mutex_unlock(&st->lock);
  }
  if (st->status != DEVBUF_OK) return devbuf_error_set(err, st->status, "%s", st->reason);
  return DEVBUF_OK;
}

/* Set up the device's pool once its context is current. A pool that cannot
 * be made is not an error: allocation falls back to cuMemAlloc. */
static void cuda_make_pool(cuda_state *st, cuda_device *d) {
  int supported = 0;
  const char *off = secure_getenv("DEVBUF_CUDA_NO_POOL");
  CUmemPoolProps props;
  cuuint64_t threshold = UINT64_MAX;
  d->pool = NULL;
  if (!st->have_pool_api || (off != NULL && off[0] != '\0' && strcmp(off, "0") != 0)) return;
  if (st->api.p_cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
                                     d->dev) != CUDA_SUCCESS ||
      !supported)
    return;
  /* A pool of our own rather than the device's default one, so that raising
   * the release threshold does not change how other libraries in the process
   * (CuPy, PyTorch, RMM) see the default pool. */
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = (int)d->dev;
  if (st->api.p_cuMemPoolCreate(&d->pool, &props) != CUDA_SUCCESS) {
    d->pool = NULL;
    return;
  }
  /* Keep freed memory in the pool across synchronizations: this is what
   * makes a pooled allocate+free pair cost a few hundred nanoseconds. */
  if (st->api.p_cuMemPoolSetAttribute(d->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold) !=
      CUDA_SUCCESS) {
    st->api.p_cuMemPoolDestroy(d->pool);
    d->pool = NULL;
  }
}

/* The device, with its primary context retained (first use only). */
static int cuda_device_get(cuda_state *st, int device, cuda_device **out, devbuf_error *err) {
  cuda_device *d;
  int rc = cuda_ensure(st, err);
  if (rc != DEVBUF_OK) return rc;
  if (device < 0 || device >= st->count)
    return devbuf_error_set(err, DEVBUF_ENODEV, "devbuf.cuda: no device %d (%d device%s)", device,
                            st->count, st->count == 1 ? "" : "s");
  d = &st->devs[device];
  if (!atomic_load_explicit(&d->ready, memory_order_acquire)) {
    pthread_mutex_lock(&st->lock);
    if (!atomic_load_explicit(&d->ready, memory_order_relaxed)) {
      CUcontext prev = NULL;
      CUresult r = st->api.p_cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
      if (r != CUDA_SUCCESS) {
        pthread_mutex_unlock(&st->lock);
        return cuda_fail(st, err, r, "cuDevicePrimaryCtxRetain", "device %d", device);
      }
      r = st->api.p_cuCtxPushCurrent(d->ctx);
      if (r != CUDA_SUCCESS) {
        st->api.p_cuDevicePrimaryCtxRelease(d->dev);
        pthread_mutex_unlock(&st->lock);
        return cuda_fail(st, err, r, "cuCtxPushCurrent", "device %d", device);
      }
      cuda_make_pool(st, d);
      st->api.p_cuCtxPopCurrent(&prev);
      atomic_store_explicit(&d->ready, 1, memory_order_release);
    }
    pthread_mutex_unlock(&st->lock);
  }
  *out = d;
  return DEVBUF_OK;
}

/* Make the device's context current for the duration of a call, restoring
 * the caller's afterwards. */
typedef struct cuda_scope {
  int pushed;
} cuda_scope;

static int cuda_enter(cuda_state *st, int device, cuda_device **dev, cuda_scope *scope,
                      devbuf_error *err) {
  CUcontext cur = NULL;
  CUresult r;
  int rc = cuda_device_get(st, device, dev, err);
  scope->pushed = 0;
  if (rc != DEVBUF_OK) return rc;
  if (st->api.p_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == (*dev)->ctx) return DEVBUF_OK;
  r = st->api.p_cuCtxPushCurrent((*dev)->ctx);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuCtxPushCurrent", "device %d", device);
  scope->pushed = 1;
  return DEVBUF_OK;
}

static void cuda_leave(cuda_state *st, cuda_scope *scope) {
  if (scope->pushed) {
    CUcontext popped = NULL;
    st->api.p_cuCtxPopCurrent(&popped);
    scope->pushed = 0;
  }
}

/* ---- lifecycle --------------------------------------------------------- */

static int cuda_init(void **state, devbuf_error *err) {
  /* Cheap by contract: no dlopen, no driver call. */
  cuda_state *st = calloc(1, sizeof *st);
  if (st == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "devbuf.cuda init: out of memory");
  if (pthread_mutex_init(&st->lock, NULL) != 0) {
    free(st);
    return devbuf_error_set(err, DEVBUF_EINIT, "devbuf.cuda init: pthread_mutex_init failed");
  }
  if (pthread_mutex_init(&st->align_lock, NULL) != 0) {
    pthread_mutex_destroy(&st->lock);
    free(st);
    return devbuf_error_set(err, DEVBUF_EINIT, "devbuf.cuda init: pthread_mutex_init failed");
  }
  atomic_init(&st->loaded, 0);
  atomic_init(&st->align_count, 0);
  *state = st;
  return DEVBUF_OK;
}

static void cuda_shutdown(void *state) {
  cuda_state *st = state;
  if (st == NULL) return;
  for (int i = 0; i < st->count; i++) {
    cuda_device *d = &st->devs[i];
    if (!atomic_load(&d->ready)) continue;
    if (d->pool != NULL && st->api.p_cuCtxPushCurrent(d->ctx) == CUDA_SUCCESS) {
      CUcontext prev = NULL;
      /* Memory still allocated from the pool keeps it alive in the driver. */
      st->api.p_cuMemPoolDestroy(d->pool);
      st->api.p_cuCtxPopCurrent(&prev);
    }
    st->api.p_cuDevicePrimaryCtxRelease(d->dev);
  }
  /* libcuda.so.1 stays loaded: the driver keeps threads and exit handlers
   * that must not outlive its code, and other users may share the handle. */
  free(st->devs);
  free(st->align);
  pthread_mutex_destroy(&st->align_lock);
  pthread_mutex_destroy(&st->lock);
  free(st);
}

/* ---- devices ------------------------------------------------------------ */

static int cuda_device_count(void *state, int *count, devbuf_error *err) {
  cuda_state *st = state;
  int rc;
  if (count == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_count: NULL count");
  rc = cuda_ensure(st, err);
  *count = rc == DEVBUF_OK ? st->count : 0;
  return rc;
}

static int cuda_device_props(void *state, int device, devbuf_device_props *props,
                             devbuf_error *err) {
  cuda_state *st = state;
  devbuf_device_props p;
  size_t n;
  size_t total = 0;
  int pageable = 0, rc;
  unsigned int ctx_flags = 0;
  int ctx_active = 0;
  CUresult r;
  cuda_device *d;
  if (props == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_props: NULL props");
  rc = cuda_ensure(st, err);
  if (rc != DEVBUF_OK) return rc;
  if (device < 0 || device >= st->count)
    return devbuf_error_set(err, DEVBUF_ENODEV, "devbuf.cuda: no device %d (%d device%s)", device,
                            st->count, st->count == 1 ? "" : "s");
  d = &st->devs[device];
  memset(&p, 0, sizeof p);
  r = st->api.p_cuDeviceGetName(p.name, (int)sizeof p.name, d->dev);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuDeviceGetName", "device %d", device);
  p.name[sizeof p.name - 1] = '\0';
  r = st->api.p_cuDeviceTotalMem(&total, d->dev);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuDeviceTotalMem", "device %d", device);
  snprintf(p.vendor, sizeof p.vendor, "NVIDIA");
  p.total_memory = total;
  p.flags = DEVBUF_DEVICE_ASYNC;
  if (st->api.p_cuDeviceGetAttribute(&pageable, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS,
                                     d->dev) == CUDA_SUCCESS &&
      pageable)
    p.flags |= DEVBUF_DEVICE_UNIFIED;
  p.alloc_alignment = CUDA_NATIVE_ALIGNMENT;
  p.dlpack_device_type = DEVBUF_DL_CUDA;
  p.dlpack_device_id = device;
  /* Free memory needs a context. Listing devices must not create one (a
   * primary context costs hundreds of MB per GPU), so it is only reported
   * when the context is already active, in this plugin or elsewhere. */
  if (st->api.p_cuDevicePrimaryCtxGetState(d->dev, &ctx_flags, &ctx_active) == CUDA_SUCCESS &&
      ctx_active) {
    cuda_scope scope;
    if (cuda_enter(st, device, &d, &scope, NULL) == DEVBUF_OK) {
      size_t free_b = 0, total_b = 0;
      if (st->api.p_cuMemGetInfo(&free_b, &total_b) == CUDA_SUCCESS) p.free_memory = free_b;
      cuda_leave(st, &scope);
    }
  }
  /* Never write past the caller's struct_size. */
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

static int cuda_align_remember(cuda_state *st, CUdeviceptr aligned, CUdeviceptr base) {
  int ok = 1;
  pthread_mutex_lock(&st->align_lock);
  size_t n = atomic_load(&st->align_count);
  if (n == st->align_cap) {
    size_t cap = st->align_cap ? st->align_cap * 2 : 16;
    cuda_aligned *grown = realloc(st->align, cap * sizeof *grown);
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

/* The base to free for `ptr` (ptr itself unless over-aligned). */
static CUdeviceptr cuda_align_forget(cuda_state *st, CUdeviceptr ptr) {
  CUdeviceptr base = ptr;
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

static CUresult cuda_raw_alloc(cuda_state *st, cuda_device *d, CUdeviceptr *p, size_t size,
                               CUstream stream, const char **op) {
  if (d->pool != NULL) {
    *op = "cuMemAllocFromPoolAsync";
    return st->api.p_cuMemAllocFromPoolAsync(p, size, d->pool, stream);
  }
  *op = "cuMemAlloc";
  return st->api.p_cuMemAlloc(p, size);
}

static CUresult cuda_raw_free(cuda_state *st, cuda_device *d, CUdeviceptr p, CUstream stream,
                              const char **op) {
  if (d->pool != NULL) {
    *op = "cuMemFreeAsync";
    return st->api.p_cuMemFreeAsync(p, stream);
  }
  *op = "cuMemFree";
  return st->api.p_cuMemFree(p);
}

static int cuda_mem_alloc(void *state, int device, size_t size, size_t alignment, void *stream,
                          void **ptr, devbuf_error *err) {
  cuda_state *st = state;
  cuda_device *d;
  cuda_scope scope;
  CUdeviceptr base = 0, aligned;
  size_t request = size ? size : 1; /* size 0 still yields a unique pointer */
  const char *op = "cuMemAlloc";
  CUresult r;
  int rc;
  if (ptr == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "mem_alloc: NULL ptr");
  *ptr = NULL;
  if (alignment & (alignment - 1))
    return devbuf_error_set(err, DEVBUF_EINVAL, "mem_alloc: alignment %zu is not a power of two",
                            alignment);
  if (alignment > CUDA_NATIVE_ALIGNMENT) {
    if (request > SIZE_MAX - alignment)
      return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: %zu bytes aligned to %zu overflows",
                              size, alignment);
    request += alignment;
  }
  rc = cuda_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  r = cuda_raw_alloc(st, d, &base, request, (CUstream)stream, &op);
  if (r != CUDA_SUCCESS) {
    cuda_leave(st, &scope);
    return cuda_fail(st, err, r, op, "%zu bytes on device %d", size, device);
  }
  aligned = base;
  if (alignment > CUDA_NATIVE_ALIGNMENT) {
    aligned = (base + (CUdeviceptr)alignment - 1) & ~(CUdeviceptr)(alignment - 1);
    if (aligned != base && !cuda_align_remember(st, aligned, base)) {
      const char *fop;
      cuda_raw_free(st, d, base, (CUstream)stream, &fop);
      cuda_leave(st, &scope);
      return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: out of host memory");
    }
  }
  cuda_leave(st, &scope);
  *ptr = (void *)(uintptr_t)aligned;
  return DEVBUF_OK;
}

static int cuda_mem_free(void *state, int device, void *ptr, void *stream, devbuf_error *err) {
  cuda_state *st = state;
  cuda_device *d;
  cuda_scope scope;
  CUdeviceptr base;
  const char *op;
  CUresult r;
  int rc = cuda_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (ptr == NULL) {
    cuda_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "mem_free: NULL pointer");
  }
  base = cuda_align_forget(st, (CUdeviceptr)(uintptr_t)ptr);
  r = cuda_raw_free(st, d, base, (CUstream)stream, &op);
  cuda_leave(st, &scope);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, op, "%p on device %d", ptr, device);
  return DEVBUF_OK;
}

static int cuda_host_alloc(void *state, int device, size_t size, void **ptr, devbuf_error *err) {
  cuda_state *st = state;
  cuda_device *d;
  cuda_scope scope;
  CUresult r;
  int rc;
  if (ptr == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "host_alloc: NULL ptr");
  *ptr = NULL;
  rc = cuda_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  /* PORTABLE: pinned for every context, so any device may use it. */
  r = st->api.p_cuMemHostAlloc(ptr, size ? size : 1, CU_MEMHOSTALLOC_PORTABLE);
  cuda_leave(st, &scope);
  if (r != CUDA_SUCCESS) {
    *ptr = NULL;
    return cuda_fail(st, err, r, "cuMemHostAlloc", "%zu bytes", size);
  }
  return DEVBUF_OK;
}

static int cuda_host_free(void *state, int device, void *ptr, devbuf_error *err) {
  cuda_state *st = state;
  cuda_device *d;
  cuda_scope scope;
  CUresult r;
  int rc = cuda_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (ptr == NULL) {
    cuda_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "host_free: NULL pointer");
  }
  r = st->api.p_cuMemFreeHost(ptr);
  cuda_leave(st, &scope);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuMemFreeHost", "%p", ptr);
  return DEVBUF_OK;
}

/* ---- copies -------------------------------------------------------------- */

static int cuda_offset(CUdeviceptr base, size_t offset, CUdeviceptr *out) {
  if (offset > (CUdeviceptr)-1 - base) return 0;
  *out = base + offset;
  return 1;
}

static int cuda_copy_h2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                         size_t nbytes, void *stream, devbuf_error *err) {
  cuda_state *st = state;
  cuda_device *d;
  cuda_scope scope;
  CUdeviceptr to;
  CUresult r;
  int rc = cuda_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (nbytes == 0) goto done;
  if (dst == NULL || src == NULL) {
    cuda_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_h2d: NULL %s", dst ? "src" : "dst");
  }
  if (!cuda_offset((CUdeviceptr)(uintptr_t)dst, dst_offset, &to)) {
    cuda_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_h2d: offset %zu overflows", dst_offset);
  }
  r = st->api.p_cuMemcpyHtoDAsync(to, src, nbytes, (CUstream)stream);
  if (r != CUDA_SUCCESS) {
    cuda_leave(st, &scope);
    return cuda_fail(st, err, r, "cuMemcpyHtoDAsync", "%zu bytes to %p+%zu on device %d", nbytes,
                     dst, dst_offset, device);
  }
done:
  cuda_leave(st, &scope);
  return DEVBUF_OK;
}

static int cuda_copy_d2h(void *state, int device, void *dst, const void *src, size_t src_offset,
                         size_t nbytes, void *stream, devbuf_error *err) {
  cuda_state *st = state;
  cuda_device *d;
  cuda_scope scope;
  CUdeviceptr from;
  CUresult r;
  int rc = cuda_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (nbytes == 0) goto done;
  if (dst == NULL || src == NULL) {
    cuda_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2h: NULL %s", dst ? "src" : "dst");
  }
  if (!cuda_offset((CUdeviceptr)(uintptr_t)src, src_offset, &from)) {
    cuda_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2h: offset %zu overflows", src_offset);
  }
  r = st->api.p_cuMemcpyDtoHAsync(dst, from, nbytes, (CUstream)stream);
  if (r != CUDA_SUCCESS) {
    cuda_leave(st, &scope);
    return cuda_fail(st, err, r, "cuMemcpyDtoHAsync", "%zu bytes from %p+%zu on device %d",
                     nbytes, src, src_offset, device);
  }
done:
  cuda_leave(st, &scope);
  return DEVBUF_OK;
}

static int cuda_copy_d2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                         size_t src_offset, size_t nbytes, void *stream, devbuf_error *err) {
  cuda_state *st = state;
  cuda_device *d;
  cuda_scope scope;
  CUdeviceptr to, from;
  CUresult r;
  int rc = cuda_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (nbytes == 0) goto done;
  if (dst == NULL || src == NULL) {
    cuda_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2d: NULL %s", dst ? "src" : "dst");
  }
  if (!cuda_offset((CUdeviceptr)(uintptr_t)dst, dst_offset, &to) ||
      !cuda_offset((CUdeviceptr)(uintptr_t)src, src_offset, &from)) {
    cuda_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2d: offset overflows");
  }
  r = st->api.p_cuMemcpyDtoDAsync(to, from, nbytes, (CUstream)stream);
  if (r != CUDA_SUCCESS) {
    cuda_leave(st, &scope);
    return cuda_fail(st, err, r, "cuMemcpyDtoDAsync", "%zu bytes on device %d", nbytes, device);
  }
done:
  cuda_leave(st, &scope);
  return DEVBUF_OK;
}

/* ---- streams ---------------------------------------------------------- */

static int cuda_stream_create(void *state, int device, void **stream, devbuf_error *err) {
  cuda_state *st = state;
  cuda_device *d;
  cuda_scope scope;
  CUstream s = NULL;
  CUresult r;
  int rc;
  if (stream == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "stream_create: NULL stream");
  *stream = NULL;
  rc = cuda_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  /* Non-blocking: does not serialise with the legacy default stream, which
   * other libraries' synchronous calls use. */
  r = st->api.p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  cuda_leave(st, &scope);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuStreamCreate", "device %d", device);
  *stream = s;
  return DEVBUF_OK;
}

static int cuda_stream_destroy(void *state, int device, void *stream, devbuf_error *err) {
  cuda_state *st = state;
  cuda_device *d;
  cuda_scope scope;
  CUresult r;
  int rc = cuda_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (stream == NULL) { /* the default stream was never created, so cannot be destroyed */
    cuda_leave(st, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "stream_destroy: NULL is the default stream");
  }
  r = st->api.p_cuStreamDestroy((CUstream)stream);
  cuda_leave(st, &scope);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuStreamDestroy", "device %d", device);
  return DEVBUF_OK;
}

static int cuda_stream_synchronize(void *state, int device, void *stream, devbuf_error *err) {
  cuda_state *st = state;
  cuda_device *d;
  cuda_scope scope;
  CUresult r;
  int rc = cuda_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  r = st->api.p_cuStreamSynchronize((CUstream)stream);
  cuda_leave(st, &scope);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuStreamSynchronize", "device %d", device);
  return DEVBUF_OK;
}

/* ---- events --------------------------------------------------------- */

static int cuda_event_create(void *state, int device, void **event, devbuf_error *err) {
  cuda_state *st = state;
  cuda_device *d;
  cuda_scope scope;
  CUevent e = NULL;
  CUresult r;
  int rc;
  if (event == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "event_create: NULL event");
  *event = NULL;
  rc = cuda_enter(st, device, &d, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  /* Timing costs a timestamp write per record; sync events never need it. */
  r = st->api.p_cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
  cuda_leave(st, &scope);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuEventCreate", "device %d", device);
  *event = e;
  return DEVBUF_OK;
}

/* Shared shape of the event calls: enter, check the event, one driver call. */
#define CUDA_EVENT_CALL(op, call)                                                    \
  cuda_state *st = state;                                                            \
  cuda_device *d;                                                                    \
  cuda_scope scope;                                                                  \
  CUresult r;                                                                        \
  int rc = cuda_enter(st, device, &d, &scope, err);                                  \
  if (rc != DEVBUF_OK) return rc;                                                    \
  if (event == NULL) {                                                               \
    cuda_leave(st, &scope);                                                          \
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: NULL event", op);               \
  }                                                                                  \
  r = (call);                                                                        \
  cuda_leave(st, &scope);

static int cuda_event_destroy(void *state, int device, void *event, devbuf_error *err) {
  CUDA_EVENT_CALL("event_destroy", st->api.p_cuEventDestroy((CUevent)event))
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuEventDestroy", "device %d", device);
  return DEVBUF_OK;
}

static int cuda_event_record(void *state, int device, void *event, void *stream,
                             devbuf_error *err) {
  CUDA_EVENT_CALL("event_record", st->api.p_cuEventRecord((CUevent)event, (CUstream)stream))
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuEventRecord", "device %d", device);
  return DEVBUF_OK;
}

static int cuda_stream_wait_event(void *state, int device, void *stream, void *event,
                                  devbuf_error *err) {
  CUDA_EVENT_CALL("stream_wait_event",
                  st->api.p_cuStreamWaitEvent((CUstream)stream, (CUevent)event, 0))
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuStreamWaitEvent", "device %d", device);
  return DEVBUF_OK;
}

static int cuda_event_synchronize(void *state, int device, void *event, devbuf_error *err) {
  CUDA_EVENT_CALL("event_synchronize", st->api.p_cuEventSynchronize((CUevent)event))
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuEventSynchronize", "device %d", device);
  return DEVBUF_OK;
}

static int cuda_event_query(void *state, int device, void *event, devbuf_error *err) {
  CUDA_EVENT_CALL("event_query", st->api.p_cuEventQuery((CUevent)event))
  if (r == CUDA_SUCCESS) return DEVBUF_OK;
  if (r == CUDA_ERROR_NOT_READY) return DEVBUF_EBUSY; /* not an error: just not yet */
  return cuda_fail(st, err, r, "cuEventQuery", "device %d", device);
}
#undef CUDA_EVENT_CALL

/* ---- device_info ------------------------------------------------------ */

#define CUDA_INFO_FLAGS (DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE | DEVBUF_DEVICE_INFO_READONLY)

static int cuda_device_info_export(void *state, const char *identifier, int device, void *event,
                                   void *stream, uint32_t flags, void *out, size_t capacity,
                                   size_t *size, devbuf_error *err) {
  cuda_state *st = state;
  int rc;
  if (identifier == NULL || strcmp(identifier, CUDA_IDENTIFIER) != 0)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                            "device_info_export: devbuf.cuda does not implement \"%s\"",
                            identifier ? identifier : "(null)");
  rc = devbuf_device_info_check_out(out, capacity, size, flags, CUDA_INFO_FLAGS, "device_info_export", err);
  if (rc != DEVBUF_OK) return rc;
  rc = cuda_ensure(st, err);
  if (rc != DEVBUF_OK) return rc;
  if (device < 0 || device >= st->count)
    return devbuf_error_set(err, DEVBUF_ENODEV, "device_info_export: no device %d (%d devices)",
                            device, st->count);
  /* event: a CUevent; stream: a CUstream */
  devbuf_device_info_write(out, size, device, flags, event, stream);
  return DEVBUF_OK;
}

static int cuda_device_info_import(void *state, const char *identifier, const void *info,
                                   devbuf_device_info_desc *out, devbuf_error *err) {
  cuda_state *st = state;
  int rc;
  if (identifier == NULL || strcmp(identifier, CUDA_IDENTIFIER) != 0)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                            "device_info_import: devbuf.cuda does not implement \"%s\"",
                            identifier ? identifier : "(null)");
  rc = devbuf_device_info_read(info, CUDA_INFO_FLAGS, out, "device_info_import", err);
  if (rc != DEVBUF_OK) return rc;
  rc = cuda_ensure(st, err);
  if (rc != DEVBUF_OK) return rc;
  if (out->device_ordinal >= st->count)
    return devbuf_error_set(err, DEVBUF_ENODEV,
                            "device_info_import: device_ordinal %d out of range (%d devices)",
                            (int)out->device_ordinal, st->count);
  return DEVBUF_OK;
}

/* ---- the table --------------------------------------------------------- */

static const char *const cuda_identifiers[] = {CUDA_IDENTIFIER, NULL};

static const devbuf_plugin_table cuda_table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "cuda",
    .version = CUDA_PLUGIN_VERSION,
    .description = "NVIDIA GPUs through the CUDA driver API (libcuda.so.1, loaded at first use)",
    .identifiers = cuda_identifiers,
    .init = cuda_init,
    .shutdown = cuda_shutdown,
    .device_count = cuda_device_count,
    .device_props = cuda_device_props,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .copy_h2d = cuda_copy_h2d,
    .copy_d2h = cuda_copy_d2h,
    .copy_d2d = cuda_copy_d2d,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_synchronize = cuda_stream_synchronize,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_synchronize = cuda_event_synchronize,
    .event_query = cuda_event_query,
    .device_info_export = cuda_device_info_export,
    .device_info_import = cuda_device_info_import,
    .dtype_namespaces = NULL,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .ext_functions = NULL,
    .ext_function_count = 0,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &cuda_table; }
