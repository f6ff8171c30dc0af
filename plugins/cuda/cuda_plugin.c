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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/plugin.h"
#include "gpu_common.h"

#define CUDA_PLUGIN_VERSION "0.1.0"
#define CUDA_IDENTIFIER "devbuf.cuda"
/* cuMemAlloc and the pool allocator return at least 256-byte aligned memory. */
#define CUDA_NATIVE_ALIGNMENT 256u

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
 * unexpanded name; `&name` and GPU_STR(name) expand to the versioned symbol. */
#define CUDA_FIELD(name) __typeof__(&name) p_##name;
typedef struct cuda_api {
  CUDA_REQUIRED(CUDA_FIELD)
  CUDA_OPTIONAL(CUDA_FIELD)
} cuda_api;
#undef CUDA_FIELD

#define CUDA_SYMBOL(name) {GPU_STR(name), offsetof(cuda_api, p_##name)},
static const gpu_symbol cuda_required[] = {CUDA_REQUIRED(CUDA_SYMBOL)};
static const gpu_symbol cuda_optional[] = {CUDA_OPTIONAL(CUDA_SYMBOL)};
#undef CUDA_SYMBOL

typedef struct cuda_device {
  CUdevice dev;
  atomic_int ready;   /* 1 once ctx (and pool) are set up */
  CUcontext ctx;      /* retained primary context */
  CUmemoryPool pool;  /* the plugin's pool, or NULL: cuMemAlloc/cuMemFree */
} cuda_device;

typedef struct cuda_state {
  gpu_base base; /* first: the driver, tried once (base.lazy.count devices) */
  cuda_api api;
  int have_pool_api;
  int driver_version;
  cuda_device *devs;
} cuda_state;

/* ---- errors ----------------------------------------------------------- */

static const gpu_status_map cuda_status[] = {
    {CUDA_ERROR_OUT_OF_MEMORY, DEVBUF_ENOMEM},   {CUDA_ERROR_NO_DEVICE, DEVBUF_ENODEV},
    {CUDA_ERROR_INVALID_DEVICE, DEVBUF_ENODEV},  {CUDA_ERROR_INVALID_VALUE, DEVBUF_EINVAL},
    {CUDA_ERROR_INVALID_HANDLE, DEVBUF_EINVAL},  {CUDA_ERROR_NOT_READY, DEVBUF_EBUSY},
    {CUDA_ERROR_NOT_SUPPORTED, DEVBUF_ENOTSUP},
};

/* "op: CUDA_ERROR_NAME: driver text (detail)" */
GPU_PRINTF(5, 6)
static int cuda_fail(const cuda_state *st, devbuf_error *err, CUresult r, const char *op,
                     const char *fmt, ...) {
  const char *name = NULL, *text = NULL;
  va_list ap;
  int code;
  if (st->api.p_cuGetErrorName == NULL || st->api.p_cuGetErrorName(r, &name) != CUDA_SUCCESS ||
      name == NULL)
    name = "CUDA_ERROR_UNKNOWN";
  if (st->api.p_cuGetErrorString == NULL ||
      st->api.p_cuGetErrorString(r, &text) != CUDA_SUCCESS || text == NULL)
    text = "unrecognized error code";
  va_start(ap, fmt);
  code = gpu_status_lookup(cuda_status, sizeof cuda_status / sizeof *cuda_status, r);
  code = gpu_fail_v(err, code, (int)r, op, name, text, GPU_DETAIL_PAREN, fmt, ap);
  va_end(ap);
  return code;
}

/* ---- lazy driver set-up ------------------------------------------------ */

/* A failed driver call during set-up: no device, and the driver's words. */
static int cuda_load_failed(cuda_state *st, CUresult r, const char *op) {
  devbuf_error e;
  cuda_fail(st, &e, r, op, NULL);
  return gpu_no_device_err(&st->base.lazy, &e);
}

static int cuda_load(gpu_lazy *lz) {
  static const char *const defaults[] = {"libcuda.so.1", NULL};
  cuda_state *st = (cuda_state *)lz; /* lz is its first member */
  const char *libname = NULL;
  int missing;
  CUresult r;
  if (!gpu_dlopen(lz, "DEVBUF_CUDA_LIBRARY", defaults, &libname)) return lz->status;
  missing = gpu_dlsym_all(lz, libname, &st->api, sizeof st->api, GPU_SYMBOLS(cuda_required),
                          GPU_SYMBOLS(cuda_optional), "driver too old for this plugin");
  if (missing < 0) return lz->status;
  st->have_pool_api = missing == 0; /* the optional symbols are the pool API */
  if ((r = st->api.p_cuInit(0)) != CUDA_SUCCESS) return cuda_load_failed(st, r, "cuInit");
  if (st->api.p_cuDriverGetVersion(&st->driver_version) != CUDA_SUCCESS) st->driver_version = 0;
  if ((r = st->api.p_cuDeviceGetCount(&lz->count)) != CUDA_SUCCESS)
    return cuda_load_failed(st, r, "cuDeviceGetCount");
  st->devs = gpu_device_table(lz, sizeof *st->devs,
                              "cuDeviceGetCount: the driver reports 0 CUDA devices");
  if (st->devs == NULL) return lz->status;
  for (int i = 0; i < lz->count; i++) {
    r = st->api.p_cuDeviceGet(&st->devs[i].dev, i);
    if (r != CUDA_SUCCESS) {
      devbuf_error e;
      cuda_fail(st, &e, r, "cuDeviceGet", "ordinal %d", i);
      free(st->devs);
      st->devs = NULL;
      return gpu_no_device_err(lz, &e);
    }
  }
  return DEVBUF_OK;
}

/* Set up the device's pool once its context is current. A pool that cannot
 * be made is not an error: allocation falls back to cuMemAlloc. */
static void cuda_make_pool(cuda_state *st, cuda_device *d) {
  int supported = 0;
  CUmemPoolProps props;
  cuuint64_t threshold = UINT64_MAX;
  d->pool = NULL;
  if (!st->have_pool_api || !gpu_pool_wanted("DEVBUF_CUDA_NO_POOL")) return;
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

/* First use of a device (under the lazy lock): retain its primary context
 * and make its pool there. */
static int cuda_device_setup(void *state, int device, devbuf_error *err) {
  cuda_state *st = state;
  cuda_device *d = &st->devs[device];
  CUcontext prev = NULL;
  CUresult r = st->api.p_cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
  if (r != CUDA_SUCCESS)
    return cuda_fail(st, err, r, "cuDevicePrimaryCtxRetain", "device %d", device);
  r = st->api.p_cuCtxPushCurrent(d->ctx);
  if (r != CUDA_SUCCESS) {
    st->api.p_cuDevicePrimaryCtxRelease(d->dev);
    return cuda_fail(st, err, r, "cuCtxPushCurrent", "device %d", device);
  }
  cuda_make_pool(st, d);
  st->api.p_cuCtxPopCurrent(&prev);
  return DEVBUF_OK;
}

/* Make the device's context current for the duration of a call (set up at
 * its first use), restoring the caller's afterwards. */
static int cuda_enter(void *state, int device, gpu_scope *scope, devbuf_error *err) {
  cuda_state *st = state;
  CUcontext cur = NULL;
  CUresult r;
  cuda_device *d;
  int rc = gpu_check_device(st ? &st->base.lazy : NULL, device, err);
  scope->restore = 0;
  if (rc == DEVBUF_OK)
    rc = gpu_device_once(&st->base.lazy, &st->devs[device].ready, cuda_device_setup, st, device,
                         err);
  if (rc != DEVBUF_OK) return rc;
  d = scope->dev = &st->devs[device];
  if (st->api.p_cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == d->ctx) return DEVBUF_OK;
  r = st->api.p_cuCtxPushCurrent(d->ctx);
  if (r != CUDA_SUCCESS) return cuda_fail(st, err, r, "cuCtxPushCurrent", "device %d", device);
  scope->restore = 1;
  return DEVBUF_OK;
}

static void cuda_leave(void *state, gpu_scope *scope) {
  cuda_state *st = state;
  if (scope->restore) {
    CUcontext popped = NULL;
    st->api.p_cuCtxPopCurrent(&popped);
    scope->restore = 0;
  }
}

/* ---- lifecycle --------------------------------------------------------- */

static const gpu_vendor cuda_vendor;

static int cuda_init(void **state, devbuf_error *err) {
  /* Cheap by contract: no dlopen, no driver call. */
  return gpu_base_new(state, sizeof(cuda_state), CUDA_IDENTIFIER, cuda_load, &cuda_vendor, err);
}

static void cuda_shutdown(void *state) {
  cuda_state *st = state;
  if (st == NULL) return;
  for (int i = 0; i < st->base.lazy.count; i++) {
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
  free(st->devs);
  gpu_base_free(st);
}

/* ---- devices ------------------------------------------------------------ */

static int cuda_device_props(void *state, int device, devbuf_device_props *props,
                             devbuf_error *err) {
  cuda_state *st = state;
  devbuf_device_props p;
  size_t total = 0;
  int pageable = 0, rc, ctx_active = 0;
  unsigned int ctx_flags = 0;
  CUresult r;
  cuda_device *d;
  if (props == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_props: NULL props");
  rc = gpu_check_device(st ? &st->base.lazy : NULL, device, err);
  if (rc != DEVBUF_OK) return rc;
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
    gpu_scope scope;
    if (cuda_enter(st, device, &scope, NULL) == DEVBUF_OK) {
      size_t free_b = 0, total_b = 0;
      if (st->api.p_cuMemGetInfo(&free_b, &total_b) == CUDA_SUCCESS) p.free_memory = free_b;
      cuda_leave(st, &scope);
    }
  }
  return gpu_props_copy_out(props, &p, err);
}

/* ---- the driver call behind each slot --------------------------------------- */

/* Entry points by gpu_call op, for messages (cuda_call names the pooled
 * allocator's itself). */
static const char *const cuda_names[GPU_OP_COUNT] = {
    [GPU_OP_MEM_ALLOC] = "cuMemAlloc",
    [GPU_OP_MEM_FREE] = "cuMemFree",
    [GPU_OP_HOST_ALLOC] = "cuMemHostAlloc",
    [GPU_OP_HOST_FREE] = "cuMemFreeHost",
    [GPU_OP_COPY_H2D] = "cuMemcpyHtoDAsync",
    [GPU_OP_COPY_D2H] = "cuMemcpyDtoHAsync",
    [GPU_OP_COPY_D2D] = "cuMemcpyDtoDAsync",
    [GPU_OP_STREAM_CREATE] = "cuStreamCreate",
    [GPU_OP_STREAM_DESTROY] = "cuStreamDestroy",
    [GPU_OP_STREAM_SYNCHRONIZE] = "cuStreamSynchronize",
    [GPU_OP_EVENT_CREATE] = "cuEventCreate",
    [GPU_OP_EVENT_DESTROY] = "cuEventDestroy",
    [GPU_OP_EVENT_RECORD] = "cuEventRecord",
    [GPU_OP_STREAM_WAIT_EVENT] = "cuStreamWaitEvent",
    [GPU_OP_EVENT_SYNCHRONIZE] = "cuEventSynchronize",
    [GPU_OP_EVENT_QUERY] = "cuEventQuery",
};

/* One driver call, with the device's context current (plugins/common has
 * checked the arguments). Allocation is stream-ordered from the device's
 * pool when it has one. */
static int cuda_call(void *state, gpu_scope *scope, gpu_call *c) {
  cuda_state *st = state;
  cuda_device *d = scope->dev;
  CUstream s = (CUstream)c->stream;
  CUevent e = (CUevent)c->event;
  CUdeviceptr p = 0;
  CUresult r;
  switch (c->op) {
    case GPU_OP_MEM_ALLOC:
      if (d->pool == NULL) {
        r = st->api.p_cuMemAlloc(&p, c->size);
      } else {
        c->name = "cuMemAllocFromPoolAsync";
        r = st->api.p_cuMemAllocFromPoolAsync(&p, c->size, d->pool, s);
      }
      c->out = (void *)(uintptr_t)p;
      return r;
    case GPU_OP_MEM_FREE:
      if (d->pool == NULL) return st->api.p_cuMemFree((CUdeviceptr)(uintptr_t)c->ptr);
      c->name = "cuMemFreeAsync";
      return st->api.p_cuMemFreeAsync((CUdeviceptr)(uintptr_t)c->ptr, s);
    case GPU_OP_HOST_ALLOC:
      /* PORTABLE: pinned for every context, so any device may use it. */
      return st->api.p_cuMemHostAlloc(&c->out, c->size, CU_MEMHOSTALLOC_PORTABLE);
    case GPU_OP_HOST_FREE:
      return st->api.p_cuMemFreeHost(c->ptr);
    case GPU_OP_COPY_H2D:
      return st->api.p_cuMemcpyHtoDAsync((CUdeviceptr)c->dst, (const void *)c->src, c->size, s);
    case GPU_OP_COPY_D2H:
      return st->api.p_cuMemcpyDtoHAsync((void *)c->dst, (CUdeviceptr)c->src, c->size, s);
    case GPU_OP_COPY_D2D:
      return st->api.p_cuMemcpyDtoDAsync((CUdeviceptr)c->dst, (CUdeviceptr)c->src, c->size, s);
    case GPU_OP_STREAM_CREATE:
      /* Non-blocking: does not serialise with the legacy default stream,
       * which other libraries' synchronous calls use. */
      r = st->api.p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
      c->out = s;
      return r;
    case GPU_OP_STREAM_DESTROY:
      return st->api.p_cuStreamDestroy(s);
    case GPU_OP_STREAM_SYNCHRONIZE:
      return st->api.p_cuStreamSynchronize(s);
    case GPU_OP_EVENT_CREATE:
      /* Timing costs a timestamp write per record; sync events never need it. */
      r = st->api.p_cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
      c->out = e;
      return r;
    case GPU_OP_EVENT_DESTROY:
      return st->api.p_cuEventDestroy(e);
    case GPU_OP_EVENT_RECORD:
      return st->api.p_cuEventRecord(e, s);
    case GPU_OP_STREAM_WAIT_EVENT:
      return st->api.p_cuStreamWaitEvent(s, e, 0);
    case GPU_OP_EVENT_SYNCHRONIZE:
      return st->api.p_cuEventSynchronize(e);
    default:
      return st->api.p_cuEventQuery(e);
  }
}

static int cuda_fail_detail(void *state, devbuf_error *err, int r, const char *op,
                            const char *detail) {
  return cuda_fail(state, err, (CUresult)r, op, "%s", detail);
}

static const gpu_vendor cuda_vendor = {
    .enter = cuda_enter,
    .leave = cuda_leave,
    .call = cuda_call,
    .fail = cuda_fail_detail,
    .names = cuda_names,
    .ok = CUDA_SUCCESS,
    .not_ready = CUDA_ERROR_NOT_READY,
    .native_alignment = CUDA_NATIVE_ALIGNMENT,
};

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
    .device_props = cuda_device_props,
    /* The rest: plugins/common over cuda_vendor. device_info carries the
     * caller's handles as they are (event: a CUevent; stream: a CUstream). */
    GPU_SCOPED_SLOTS,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &cuda_table; }
