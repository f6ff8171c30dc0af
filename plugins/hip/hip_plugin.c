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
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devbuf/plugin.h"
#include "gpu_common.h"

#define HIP_PLUGIN_VERSION "0.1.0"
#define HIP_IDENTIFIER "devbuf.hip"
#define HIP_KFD_NODE "/dev/kfd"
/* hipMalloc returns at least 256-byte aligned memory. */
#define HIP_NATIVE_ALIGNMENT 256u

/* Tried in order when DEVBUF_HIP_LIBRARY is unset: the development symlink
 * (matches the headers we were built with) and then the runtime sonames. */
static const char *const hip_default_libraries[] = {"libamdhip64.so", "libamdhip64.so.6",
                                                    "libamdhip64.so.5", NULL};

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

#define HIP_SYMBOL(name) {GPU_STR(name), offsetof(hip_api, p_##name)},
static const gpu_symbol hip_required[] = {HIP_REQUIRED(HIP_SYMBOL)};
static const gpu_symbol hip_optional[] = {HIP_OPTIONAL(HIP_SYMBOL)};
#undef HIP_SYMBOL

typedef struct hip_device {
  hipDevice_t dev;
  atomic_int ready;  /* 1 once the pool decision is made */
  hipMemPool_t pool; /* the plugin's pool, or NULL: hipMalloc/hipFree */
} hip_device;

typedef struct hip_state {
  gpu_base base; /* first: the runtime, tried once (base.lazy.count devices) */
  hip_api api;
  int have_pool_api;
  int driver_version;
  hip_device *devs;
} hip_state;

/* ---- errors ----------------------------------------------------------- */

static const gpu_status_map hip_status[] = {
    {hipErrorOutOfMemory, DEVBUF_ENOMEM},  {hipErrorNoDevice, DEVBUF_ENODEV},
    {hipErrorInvalidDevice, DEVBUF_ENODEV}, {hipErrorInvalidValue, DEVBUF_EINVAL},
    {hipErrorInvalidHandle, DEVBUF_EINVAL}, {hipErrorNotReady, DEVBUF_EBUSY},
    {hipErrorNotSupported, DEVBUF_ENOTSUP},
};

/* "op: hipErrorName: runtime text (detail)" */
GPU_PRINTF(5, 6)
static int hip_fail(const hip_state *st, devbuf_error *err, hipError_t r, const char *op,
                    const char *fmt, ...) {
  const char *name = st->api.p_hipGetErrorName ? st->api.p_hipGetErrorName(r) : NULL;
  const char *text = st->api.p_hipGetErrorString ? st->api.p_hipGetErrorString(r) : NULL;
  va_list ap;
  int code = gpu_status_lookup(hip_status, sizeof hip_status / sizeof *hip_status, r);
  va_start(ap, fmt);
  code = gpu_fail_v(err, code, (int)r, op, name ? name : "hipErrorUnknown",
                    text ? text : "unrecognized error code", GPU_DETAIL_PAREN, fmt, ap);
  va_end(ap);
  return code;
}

/* ---- lazy runtime set-up ------------------------------------------------ */

static int hip_load(gpu_lazy *lz) {
  hip_state *st = (hip_state *)lz; /* lz is its first member */
  const char *libname = NULL;
  devbuf_error e;
  hipError_t r;
  int missing;
  /* ROCm reaches every AMD GPU through the KFD device node: without it
   * hipInit can only fail, and loading libamdhip64 and its dependencies
   * first was most of devbuf-info's time on a machine without one. Say why
   * without starting the runtime; DEVBUF_HIP_LIBRARY still loads whatever
   * runtime it names (the fake one in tests/gpu among them). */
  const char *env = secure_getenv("DEVBUF_HIP_LIBRARY");
  if ((env == NULL || env[0] == '\0') && access(HIP_KFD_NODE, F_OK) != 0) {
    int why = errno;
    return gpu_no_device(lz, DEVBUF_ENODEV,
                         "no %s (%s): no AMD GPU driver on this machine, so %s was not loaded "
                         "(DEVBUF_HIP_LIBRARY=<runtime> loads one anyway)",
                         HIP_KFD_NODE, strerror(why), hip_default_libraries[0]);
  }
  if (!gpu_dlopen(lz, "DEVBUF_HIP_LIBRARY", hip_default_libraries, &libname))
    return lz->status;
  missing = gpu_dlsym_all(lz, libname, &st->api, sizeof st->api, GPU_SYMBOLS(hip_required),
                          GPU_SYMBOLS(hip_optional), "HIP runtime too old for this plugin");
  if (missing < 0) return lz->status;
  st->have_pool_api = missing == 0; /* the optional symbols are the pool API */
  r = st->api.p_hipInit(0);
  if (r != hipSuccess) {
    /* Without a GPU, hipInit's own code is vague (hipErrorInvalidDevice);
     * the device count's (hipErrorNoDevice) says more: give both. */
    int n = 0;
    hipError_t r2 = st->api.p_hipGetDeviceCount(&n);
    const char *name2 = st->api.p_hipGetErrorName(r2);
    if (r2 != hipSuccess && r2 != r && name2 != NULL)
      hip_fail(st, &e, r, "hipInit", "hipGetDeviceCount: %s", name2);
    else
      hip_fail(st, &e, r, "hipInit", NULL);
    return gpu_no_device_err(lz, &e);
  }
  if (st->api.p_hipDriverGetVersion(&st->driver_version) != hipSuccess) st->driver_version = 0;
  r = st->api.p_hipGetDeviceCount(&lz->count);
  if (r != hipSuccess) {
    hip_fail(st, &e, r, "hipGetDeviceCount", NULL);
    return gpu_no_device_err(lz, &e);
  }
  st->devs = gpu_device_table(lz, sizeof *st->devs,
                              "hipGetDeviceCount: the runtime reports 0 HIP devices");
  if (st->devs == NULL) return lz->status;
  for (int i = 0; i < lz->count; i++) {
    if ((r = st->api.p_hipDeviceGet(&st->devs[i].dev, i)) == hipSuccess) continue;
    hip_fail(st, &e, r, "hipDeviceGet", "ordinal %d", i);
    free(st->devs);
    st->devs = NULL;
    return gpu_no_device_err(lz, &e);
  }
  return DEVBUF_OK;
}

/* First use of a device, with it current (under the lazy lock): its pool.
 * No pool is not an error: hipMalloc. Our own pool, so the default pool
 * other libraries share keeps its settings; the release threshold keeps
 * freed memory pooled. */
static int hip_device_setup(void *state, int ordinal, devbuf_error *err) {
  hip_state *st = state;
  hip_device *d = &st->devs[ordinal];
  int supported = 0;
  hipMemPoolProps props = {.allocType = hipMemAllocationTypePinned,
                           .handleTypes = hipMemHandleTypeNone,
                           .location = {.type = hipMemLocationTypeDevice, .id = ordinal}};
  uint64_t threshold = UINT64_MAX;
  (void)err;
  d->pool = NULL;
  if (!st->have_pool_api || !gpu_pool_wanted("DEVBUF_HIP_NO_POOL") ||
      st->api.p_hipDeviceGetAttribute(&supported, hipDeviceAttributeMemoryPoolsSupported,
                                      ordinal) != hipSuccess || !supported ||
      st->api.p_hipMemPoolCreate(&d->pool, &props) != hipSuccess) {
    d->pool = NULL;
    return DEVBUF_OK;
  }
  if (st->api.p_hipMemPoolSetAttribute(d->pool, hipMemPoolAttrReleaseThreshold, &threshold) !=
      hipSuccess) {
    st->api.p_hipMemPoolDestroy(d->pool);
    d->pool = NULL;
  }
  return DEVBUF_OK;
}

static void hip_leave(void *state, gpu_scope *scope);

/* Select the device on this thread for one call (its pool decided at its
 * first use); hip_leave restores the caller's choice. */
static int hip_enter(void *state, int device, gpu_scope *scope, devbuf_error *err) {
  hip_state *st = state;
  int prev = -1;
  hipError_t r;
  int rc = gpu_check_device(st ? &st->base.lazy : NULL, device, err);
  scope->restore = 0;
  if (rc != DEVBUF_OK) return rc;
  scope->dev = &st->devs[device];
  if (st->api.p_hipGetDevice(&prev) != hipSuccess) prev = -1;
  if (prev != device) {
    r = st->api.p_hipSetDevice(device);
    if (r != hipSuccess) return hip_fail(st, err, r, "hipSetDevice", "device %d", device);
    scope->saved = prev;
    scope->restore = prev >= 0;
  }
  rc = gpu_device_once(&st->base.lazy, &st->devs[device].ready, hip_device_setup, st, device,
                       err);
  if (rc != DEVBUF_OK) hip_leave(st, scope);
  return rc;
}

static void hip_leave(void *state, gpu_scope *scope) {
  hip_state *st = state;
  if (scope->restore) st->api.p_hipSetDevice((int)scope->saved);
  scope->restore = 0;
}

/* ---- lifecycle --------------------------------------------------------- */

static const gpu_vendor hip_vendor;

static int hip_init_plugin(void **state, devbuf_error *err) {
  /* Cheap by contract: no dlopen, no runtime call. */
  return gpu_base_new(state, sizeof(hip_state), HIP_IDENTIFIER, hip_load, &hip_vendor, err);
}

static void hip_shutdown(void *state) {
  hip_state *st = state;
  if (st == NULL) return;
  for (int i = 0; i < st->base.lazy.count; i++) {
    if (atomic_load(&st->devs[i].ready) && st->devs[i].pool != NULL)
      st->api.p_hipMemPoolDestroy(st->devs[i].pool);
  }
  free(st->devs);
  gpu_base_free(st);
}

/* ---- devices ------------------------------------------------------------ */

static int hip_device_props(void *state, int device, devbuf_device_props *props,
                            devbuf_error *err) {
  hip_state *st = state;
  devbuf_device_props p;
  gpu_scope scope;
  hip_device *d;
  size_t total = 0, free_b = 0, total_b = 0;
  const char *op = "hipDeviceGetName";
  int pageable = 0, rc;
  hipError_t r;
  if (props == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_props: NULL props");
  rc = hip_enter(st, device, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  d = scope.dev;
  memset(&p, 0, sizeof p);
  r = st->api.p_hipDeviceGetName(p.name, (int)sizeof p.name, d->dev);
  if (r == hipSuccess) {
    op = "hipDeviceTotalMem";
    r = st->api.p_hipDeviceTotalMem(&total, d->dev);
  }
  if (r == hipSuccess) {
    if (st->api.p_hipMemGetInfo(&free_b, &total_b) == hipSuccess) p.free_memory = free_b;
    if (st->api.p_hipDeviceGetAttribute(&pageable, hipDeviceAttributePageableMemoryAccess,
                                        device) == hipSuccess &&
        pageable)
      p.flags |= DEVBUF_DEVICE_UNIFIED;
  }
  hip_leave(st, &scope);
  if (r != hipSuccess) return hip_fail(st, err, r, op, "device %d", device);
  p.name[sizeof p.name - 1] = '\0';
  snprintf(p.vendor, sizeof p.vendor, "AMD");
  p.total_memory = total;
  p.flags |= DEVBUF_DEVICE_ASYNC;
  p.alloc_alignment = HIP_NATIVE_ALIGNMENT;
  p.dlpack_device_type = DEVBUF_DL_ROCM;
  p.dlpack_device_id = device;
  return gpu_props_copy_out(props, &p, err);
}

/* ---- the runtime call behind each slot ---------------------------------------- */

/* Entry points by gpu_call op, for messages (hip_call names the pooled
 * allocator's itself). */
static const char *const hip_names[GPU_OP_COUNT] = {
    [GPU_OP_MEM_ALLOC] = "hipMalloc",
    [GPU_OP_MEM_FREE] = "hipFree",
    [GPU_OP_HOST_ALLOC] = "hipHostMalloc",
    [GPU_OP_HOST_FREE] = "hipHostFree",
    [GPU_OP_COPY_H2D] = "hipMemcpyHtoDAsync",
    [GPU_OP_COPY_D2H] = "hipMemcpyDtoHAsync",
    [GPU_OP_COPY_D2D] = "hipMemcpyDtoDAsync",
    [GPU_OP_STREAM_CREATE] = "hipStreamCreateWithFlags",
    [GPU_OP_STREAM_DESTROY] = "hipStreamDestroy",
    [GPU_OP_STREAM_SYNCHRONIZE] = "hipStreamSynchronize",
    [GPU_OP_EVENT_CREATE] = "hipEventCreateWithFlags",
    [GPU_OP_EVENT_DESTROY] = "hipEventDestroy",
    [GPU_OP_EVENT_RECORD] = "hipEventRecord",
    [GPU_OP_STREAM_WAIT_EVENT] = "hipStreamWaitEvent",
    [GPU_OP_EVENT_SYNCHRONIZE] = "hipEventSynchronize",
    [GPU_OP_EVENT_QUERY] = "hipEventQuery",
};

/* One runtime call, with the device selected (plugins/common has checked
 * the arguments). HIP's copies all take void * (hipDeviceptr_t is one) and
 * declare the host source non-const, which they only read. */
static int hip_call(void *state, gpu_scope *scope, gpu_call *c) {
  hip_state *st = state;
  hip_device *d = scope->dev;
  hipStream_t s = (hipStream_t)c->stream;
  hipEvent_t e = (hipEvent_t)c->event;
  hipError_t r;
  switch (c->op) {
    case GPU_OP_MEM_ALLOC:
      if (d->pool == NULL) return st->api.p_hipMalloc(&c->out, c->size);
      c->name = "hipMallocFromPoolAsync";
      return st->api.p_hipMallocFromPoolAsync(&c->out, c->size, d->pool, s);
    case GPU_OP_MEM_FREE:
      if (d->pool == NULL) return st->api.p_hipFree(c->ptr);
      c->name = "hipFreeAsync";
      return st->api.p_hipFreeAsync(c->ptr, s);
    case GPU_OP_HOST_ALLOC:
      return st->api.p_hipHostMalloc(&c->out, c->size, hipHostMallocPortable);
    case GPU_OP_HOST_FREE:
      return st->api.p_hipHostFree(c->ptr);
    case GPU_OP_COPY_H2D:
      return st->api.p_hipMemcpyHtoDAsync((void *)c->dst, (void *)c->src, c->size, s);
    case GPU_OP_COPY_D2H:
      return st->api.p_hipMemcpyDtoHAsync((void *)c->dst, (void *)c->src, c->size, s);
    case GPU_OP_COPY_D2D:
      return st->api.p_hipMemcpyDtoDAsync((void *)c->dst, (void *)c->src, c->size, s);
    case GPU_OP_STREAM_CREATE:
      r = st->api.p_hipStreamCreateWithFlags(&s, hipStreamNonBlocking);
      c->out = s;
      return r;
    case GPU_OP_STREAM_DESTROY:
      return st->api.p_hipStreamDestroy(s);
    case GPU_OP_STREAM_SYNCHRONIZE:
      return st->api.p_hipStreamSynchronize(s);
    case GPU_OP_EVENT_CREATE:
      r = st->api.p_hipEventCreateWithFlags(&e, hipEventDisableTiming);
      c->out = e;
      return r;
    case GPU_OP_EVENT_DESTROY:
      return st->api.p_hipEventDestroy(e);
    case GPU_OP_EVENT_RECORD:
      return st->api.p_hipEventRecord(e, s);
    case GPU_OP_STREAM_WAIT_EVENT:
      return st->api.p_hipStreamWaitEvent(s, e, 0);
    case GPU_OP_EVENT_SYNCHRONIZE:
      return st->api.p_hipEventSynchronize(e);
    default:
      return st->api.p_hipEventQuery(e);
  }
}

static int hip_fail_detail(void *state, devbuf_error *err, int r, const char *op,
                           const char *detail) {
  return hip_fail(state, err, (hipError_t)r, op, "%s", detail);
}

static const gpu_vendor hip_vendor = {
    .enter = hip_enter,
    .leave = hip_leave,
    .call = hip_call,
    .fail = hip_fail_detail,
    .names = hip_names,
    .ok = hipSuccess,
    .not_ready = hipErrorNotReady,
    .native_alignment = HIP_NATIVE_ALIGNMENT,
};

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
    .device_props = hip_device_props,
    /* The rest: plugins/common over hip_vendor. device_info carries the
     * caller's handles as they are (event: a hipEvent_t; stream: a hipStream_t). */
    GPU_SCOPED_SLOTS,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &hip_table; }
