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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/plugin.h"
#include "gpu_common.h"

#define HIP_PLUGIN_VERSION "0.1.0"
#define HIP_IDENTIFIER "devbuf.hip"
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
  gpu_lazy lazy; /* first: the runtime, tried once; lazy.count devices */
  hip_api api;
  int have_pool_api;
  int driver_version;
  hip_device *devs;
  gpu_align_table align; /* over-aligned allocations */
} hip_state;

typedef hipError_t hip_result;

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
  hip_state *st = (hip_state *)lz;
  const char *libname = NULL;
  devbuf_error e;
  hipError_t r;
  if (!gpu_dlopen(lz, "DEVBUF_HIP_LIBRARY", hip_default_libraries, &libname))
    return lz->status;
  if (!gpu_dlsym_all(lz, libname, &st->api, sizeof st->api, hip_required,
                     sizeof hip_required / sizeof *hip_required, hip_optional,
                     sizeof hip_optional / sizeof *hip_optional,
                     "HIP runtime too old for this plugin"))
    return lz->status;
  st->have_pool_api = st->api.p_hipMallocFromPoolAsync && st->api.p_hipFreeAsync &&
                      st->api.p_hipMemPoolCreate && st->api.p_hipMemPoolDestroy &&
                      st->api.p_hipMemPoolSetAttribute;
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
  if (lz->count <= 0)
    return gpu_no_device(lz, DEVBUF_ENODEV, "hipGetDeviceCount: the runtime reports 0 HIP devices");
  st->devs = calloc((size_t)lz->count, sizeof *st->devs);
  if (st->devs == NULL)
    return gpu_no_device(lz, DEVBUF_ENOMEM, "hip: out of host memory for the device table");
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
typedef struct hip_setup {
  hip_state *st;
  int device;
} hip_setup;

static int hip_device_setup(void *ctx, devbuf_error *err) {
  hip_state *st = ((hip_setup *)ctx)->st;
  int ordinal = ((hip_setup *)ctx)->device, supported = 0;
  hip_device *d = &st->devs[ordinal];
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

/* Select the device on this thread for one call; hip_leave restores. */
typedef struct hip_scope {
  hip_device *dev;
  int prev;
  int switched;
} hip_scope;

static int hip_enter(hip_state *st, int device, hip_scope *scope, devbuf_error *err) {
  hip_setup setup = {st, device};
  hipError_t r;
  int rc = gpu_check_device(st ? &st->lazy : NULL, device, err);
  scope->switched = 0;
  scope->prev = -1;
  if (rc != DEVBUF_OK) return rc;
  scope->dev = &st->devs[device];
  if (st->api.p_hipGetDevice(&scope->prev) != hipSuccess) scope->prev = -1;
  if (scope->prev != device) {
    r = st->api.p_hipSetDevice(device);
    if (r != hipSuccess) return hip_fail(st, err, r, "hipSetDevice", "device %d", device);
    scope->switched = 1;
  }
  return gpu_once(&st->lazy, &scope->dev->ready, hip_device_setup, &setup, err);
}

static void hip_leave(hip_state *st, hip_scope *scope) {
  if (scope->switched && scope->prev >= 0) st->api.p_hipSetDevice(scope->prev);
  scope->switched = 0;
}

/* ---- lifecycle --------------------------------------------------------- */

static int hip_init_plugin(void **state, devbuf_error *err) {
  /* Cheap by contract: no dlopen, no runtime call. */
  hip_state *st = calloc(1, sizeof *st);
  int rc;
  if (st == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "devbuf.hip init: out of memory");
  rc = gpu_lazy_init(&st->lazy, HIP_IDENTIFIER, hip_load, err);
  if (rc == DEVBUF_OK && !gpu_align_init(&st->align)) {
    gpu_lazy_destroy(&st->lazy);
    rc = devbuf_error_set(err, DEVBUF_EINIT, "devbuf.hip init: pthread_mutex_init failed");
  }
  if (rc != DEVBUF_OK) {
    free(st);
    return rc;
  }
  *state = st;
  return DEVBUF_OK;
}

static void hip_shutdown(void *state) {
  hip_state *st = state;
  if (st == NULL) return;
  for (int i = 0; i < st->lazy.count; i++) {
    if (atomic_load(&st->devs[i].ready) && st->devs[i].pool != NULL)
      st->api.p_hipMemPoolDestroy(st->devs[i].pool);
  }
  free(st->devs);
  gpu_align_destroy(&st->align);
  gpu_lazy_destroy(&st->lazy);
  free(st);
}

/* ---- devices ------------------------------------------------------------ */

static int hip_device_props(void *state, int device, devbuf_device_props *props,
                            devbuf_error *err) {
  devbuf_device_props p;
  size_t total = 0, free_b = 0, total_b = 0;
  int pageable = 0;
  if (props == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_props: NULL props");
  memset(&p, 0, sizeof p);
  {
    const char *op = "hipDeviceGetName";
    GPU_SCOPE_BEGIN(hip);
    r = st->api.p_hipDeviceGetName(p.name, (int)sizeof p.name, scope.dev->dev);
    if (r == hipSuccess) {
      op = "hipDeviceTotalMem";
      r = st->api.p_hipDeviceTotalMem(&total, scope.dev->dev);
    }
    if (r != hipSuccess) {
      hip_leave(st, &scope);
      return hip_fail(st, err, r, op, "device %d", device);
    }
    if (st->api.p_hipMemGetInfo(&free_b, &total_b) == hipSuccess) p.free_memory = free_b;
    if (st->api.p_hipDeviceGetAttribute(&pageable, hipDeviceAttributePageableMemoryAccess,
                                        device) == hipSuccess &&
        pageable)
      p.flags |= DEVBUF_DEVICE_UNIFIED;
    hip_leave(st, &scope);
  }
  p.name[sizeof p.name - 1] = '\0';
  snprintf(p.vendor, sizeof p.vendor, "AMD");
  p.total_memory = total;
  p.flags |= DEVBUF_DEVICE_ASYNC;
  p.alloc_alignment = HIP_NATIVE_ALIGNMENT;
  p.dlpack_device_type = DEVBUF_DL_ROCM;
  p.dlpack_device_id = device;
  return gpu_props_copy_out(props, &p, err);
}

/* ---- memory ------------------------------------------------------------ */

static hipError_t hip_raw_alloc(hip_state *st, hip_device *d, void **p, size_t size,
                                hipStream_t stream, const char **op) {
  *op = d->pool != NULL ? "hipMallocFromPoolAsync" : "hipMalloc";
  return d->pool != NULL ? st->api.p_hipMallocFromPoolAsync(p, size, d->pool, stream)
                         : st->api.p_hipMalloc(p, size);
}

static hipError_t hip_raw_free(hip_state *st, hip_device *d, void *p, hipStream_t stream,
                               const char **op) {
  *op = d->pool != NULL ? "hipFreeAsync" : "hipFree";
  return d->pool != NULL ? st->api.p_hipFreeAsync(p, stream) : st->api.p_hipFree(p);
}

static int hip_mem_alloc(void *state, int device, size_t size, size_t alignment, void *stream,
                         void **ptr, devbuf_error *err) {
  void *base = NULL;
  uintptr_t aligned;
  size_t request;
  const char *op;
  int checked = gpu_alloc_request(ptr, size, alignment, HIP_NATIVE_ALIGNMENT, &request, err);
  if (checked != DEVBUF_OK) return checked;
  {
    GPU_SCOPE_BEGIN(hip);
    r = hip_raw_alloc(st, scope.dev, &base, request, (hipStream_t)stream, &op);
    if (r != hipSuccess) {
      hip_leave(st, &scope);
      return hip_fail(st, err, r, op, "%zu bytes on device %d", size, device);
    }
    aligned = gpu_align_up((uintptr_t)base, alignment, HIP_NATIVE_ALIGNMENT);
    if (aligned != (uintptr_t)base && !gpu_align_remember(&st->align, aligned, (uintptr_t)base)) {
      hip_raw_free(st, scope.dev, base, (hipStream_t)stream, &op);
      hip_leave(st, &scope);
      return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: out of host memory");
    }
    hip_leave(st, &scope);
  }
  *ptr = (void *)aligned;
  return DEVBUF_OK;
}

static int hip_mem_free(void *state, int device, void *ptr, void *stream, devbuf_error *err) {
  const char *op = "hipFree";
  GPU_SCOPE_BEGIN(hip);
  GPU_SCOPE_NEED(hip, ptr != NULL, "mem_free: NULL pointer");
  r = hip_raw_free(st, scope.dev, (void *)gpu_align_forget(&st->align, (uintptr_t)ptr),
                   (hipStream_t)stream, &op);
  GPU_SCOPE_END(hip, hipSuccess, op);
}

static int hip_host_alloc(void *state, int device, size_t size, void **ptr, devbuf_error *err) {
  void *p = NULL;
  if (gpu_check_out(ptr, "host_alloc", "ptr", err) != DEVBUF_OK) return DEVBUF_EINVAL;
  GPU_SCOPE_BEGIN(hip);
  r = st->api.p_hipHostMalloc(&p, size ? size : 1, hipHostMallocPortable);
  if (r == hipSuccess) *ptr = p;
  GPU_SCOPE_END(hip, hipSuccess, "hipHostMalloc");
}

static int hip_host_free(void *state, int device, void *ptr, devbuf_error *err) {
  GPU_SCOPE_BEGIN(hip);
  GPU_SCOPE_NEED(hip, ptr != NULL, "host_free: NULL pointer");
  r = st->api.p_hipHostFree(ptr);
  GPU_SCOPE_END(hip, hipSuccess, "hipHostFree");
}

/* ---- copies -------------------------------------------------------------- */

enum { HIP_H2D, HIP_D2H, HIP_D2D };

/* One function for the three directions: HIP's three copies have one type
 * (hipDeviceptr_t is void *), so the direction only picks the entry point. */
static int hip_copy(void *state, int device, int kind, void *dst, size_t dst_offset,
                    const void *src, size_t src_offset, size_t nbytes, void *stream,
                    devbuf_error *err) {
  static const char *const what[] = {"copy_h2d", "copy_d2h", "copy_d2d"};
  static const char *const ops[] = {"hipMemcpyHtoDAsync", "hipMemcpyDtoHAsync",
                                    "hipMemcpyDtoDAsync"};
  uintptr_t to = 0, from = 0;
  int nothing = 0;
  GPU_SCOPE_BEGIN(hip);
  __typeof__(st->api.p_hipMemcpyDtoDAsync) fns[] = {
      st->api.p_hipMemcpyHtoDAsync, st->api.p_hipMemcpyDtoHAsync, st->api.p_hipMemcpyDtoDAsync};
  rc = gpu_check_copy(what[kind], dst, dst_offset, src, src_offset, nbytes, &to, &from, &nothing,
                      err);
  if (rc != DEVBUF_OK || nothing) {
    hip_leave(st, &scope);
    return rc;
  }
  /* HIP declares the host source non-const; it only reads it. */
  r = fns[kind]((void *)to, (void *)from, nbytes, (hipStream_t)stream);
  GPU_SCOPE_END(hip, hipSuccess, ops[kind]);
}

static int hip_copy_h2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                        size_t nbytes, void *stream, devbuf_error *err) {
  return hip_copy(state, device, HIP_H2D, dst, dst_offset, src, 0, nbytes, stream, err);
}

static int hip_copy_d2h(void *state, int device, void *dst, const void *src, size_t src_offset,
                        size_t nbytes, void *stream, devbuf_error *err) {
  return hip_copy(state, device, HIP_D2H, dst, 0, src, src_offset, nbytes, stream, err);
}

static int hip_copy_d2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                        size_t src_offset, size_t nbytes, void *stream, devbuf_error *err) {
  return hip_copy(state, device, HIP_D2D, dst, dst_offset, src, src_offset, nbytes, stream, err);
}

/* ---- streams and events ------------------------------------------------ */

static int hip_stream_create(void *state, int device, void **stream, devbuf_error *err) {
  hipStream_t s = NULL;
  if (gpu_check_out(stream, "stream_create", "stream", err) != DEVBUF_OK) return DEVBUF_EINVAL;
  GPU_SCOPE_BEGIN(hip);
  r = st->api.p_hipStreamCreateWithFlags(&s, hipStreamNonBlocking);
  if (r == hipSuccess) *stream = s;
  GPU_SCOPE_END(hip, hipSuccess, "hipStreamCreateWithFlags");
}

static int hip_event_create(void *state, int device, void **event, devbuf_error *err) {
  hipEvent_t e = NULL;
  if (gpu_check_out(event, "event_create", "event", err) != DEVBUF_OK) return DEVBUF_EINVAL;
  GPU_SCOPE_BEGIN(hip);
  r = st->api.p_hipEventCreateWithFlags(&e, hipEventDisableTiming);
  if (r == hipSuccess) *event = e;
  GPU_SCOPE_END(hip, hipSuccess, "hipEventCreateWithFlags");
}

static int hip_stream_destroy(void *state, int device, void *stream, devbuf_error *err) {
  GPU_SCOPE_BEGIN(hip);
  /* The default stream was never created, so cannot be destroyed. */
  GPU_SCOPE_NEED(hip, stream != NULL, "stream_destroy: NULL is the default stream");
  r = st->api.p_hipStreamDestroy((hipStream_t)stream);
  GPU_SCOPE_END(hip, hipSuccess, "hipStreamDestroy");
}

static int hip_stream_synchronize(void *state, int device, void *stream, devbuf_error *err) {
  GPU_SCOPE_BEGIN(hip);
  r = st->api.p_hipStreamSynchronize((hipStream_t)stream);
  GPU_SCOPE_END(hip, hipSuccess, "hipStreamSynchronize");
}

static int hip_event_destroy(void *state, int device, void *event, devbuf_error *err) {
  GPU_SCOPE_BEGIN(hip);
  GPU_SCOPE_NEED(hip, event != NULL, "event_destroy: NULL event");
  r = st->api.p_hipEventDestroy((hipEvent_t)event);
  GPU_SCOPE_END(hip, hipSuccess, "hipEventDestroy");
}

static int hip_event_record(void *state, int device, void *event, void *stream,
                            devbuf_error *err) {
  GPU_SCOPE_BEGIN(hip);
  GPU_SCOPE_NEED(hip, event != NULL, "event_record: NULL event");
  r = st->api.p_hipEventRecord((hipEvent_t)event, (hipStream_t)stream);
  GPU_SCOPE_END(hip, hipSuccess, "hipEventRecord");
}

static int hip_stream_wait_event(void *state, int device, void *stream, void *event,
                                 devbuf_error *err) {
  GPU_SCOPE_BEGIN(hip);
  GPU_SCOPE_NEED(hip, event != NULL, "stream_wait_event: NULL event");
  r = st->api.p_hipStreamWaitEvent((hipStream_t)stream, (hipEvent_t)event, 0);
  GPU_SCOPE_END(hip, hipSuccess, "hipStreamWaitEvent");
}

static int hip_event_synchronize(void *state, int device, void *event, devbuf_error *err) {
  GPU_SCOPE_BEGIN(hip);
  GPU_SCOPE_NEED(hip, event != NULL, "event_synchronize: NULL event");
  r = st->api.p_hipEventSynchronize((hipEvent_t)event);
  GPU_SCOPE_END(hip, hipSuccess, "hipEventSynchronize");
}

static int hip_event_query(void *state, int device, void *event, devbuf_error *err) {
  GPU_SCOPE_BEGIN(hip);
  GPU_SCOPE_NEED(hip, event != NULL, "event_query: NULL event");
  r = st->api.p_hipEventQuery((hipEvent_t)event);
  if (r == hipErrorNotReady) { /* not an error: just not yet */
    hip_leave(st, &scope);
    return DEVBUF_EBUSY;
  }
  GPU_SCOPE_END(hip, hipSuccess, "hipEventQuery");
}

/* ---- device_info ------------------------------------------------------ */

static int hip_device_info_export(void *state, const char *identifier, int device, void *event,
                                  void *stream, uint32_t flags, void *out, size_t capacity,
                                  size_t *size, devbuf_error *err) {
  int rc = gpu_info_export_check(state, identifier, device, flags, out, capacity, size, err);
  /* event: a hipEvent_t; stream: a hipStream_t */
  if (rc == DEVBUF_OK) devbuf_device_info_write(out, size, device, flags, event, stream);
  return rc;
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
    .device_count = gpu_device_count,
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
    .device_info_import = gpu_info_import,
    .dtype_namespaces = NULL,
    .host_alloc = hip_host_alloc,
    .host_free = hip_host_free,
    .ext_functions = NULL,
    .ext_function_count = 0,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &hip_table; }
