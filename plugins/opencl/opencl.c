/* devbuf.opencl: OpenCL buffers, in-order command queues and events through
 * the ICD loader (libOpenCL.so.1), which this plugin dlopens itself at first
 * device use, so that it builds with only the headers and loads on machines
 * without any OpenCL installation. See docs/devices/opencl.md.
 *
 * Handles handed to the host:
 *   device pointer = a cl_mem (it has no address; copies take (cl_mem, offset))
 *   stream         = a cl_command_queue (in-order); NULL = the device's default
 *   event          = an ocl_event (below), holding the cl_event of its latest record
 * Every handle this plugin creates is kept in a table, so that an unknown or
 * already-freed handle is refused with DEVBUF_EINVAL instead of reaching the
 * ICD loader, which would dereference it. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/plugin.h"

#define OCL_IDENTIFIER "devbuf.opencl"
#define OCL_DEFAULT_LIBRARY "libOpenCL.so.1"
#define OCL_LIBRARY_ENV "DEVBUF_OPENCL_LIBRARY"

/* The entry points used, typed from the headers' own prototypes (taking their
 * type does not reference the symbols, so nothing links libOpenCL). */
#define OCL_FUNCS(X)                                                                      \
  X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo)           \
  X(clCreateContext) X(clReleaseContext) X(clCreateCommandQueue) X(clReleaseCommandQueue) \
  X(clFlush) X(clFinish) X(clCreateBuffer) X(clReleaseMemObject) X(clEnqueueWriteBuffer)  \
  X(clEnqueueReadBuffer) X(clEnqueueCopyBuffer) X(clEnqueueMarkerWithWaitList)            \
  X(clEnqueueBarrierWithWaitList) X(clWaitForEvents) X(clGetEventInfo) X(clRetainEvent)   \
  X(clReleaseEvent)

typedef struct ocl_api {
#define OCL_DECLARE(name) __typeof__(&name) name;
  OCL_FUNCS(OCL_DECLARE)
#undef OCL_DECLARE
} ocl_api;

/* ---- CL error names ------------------------------------------------------ */

static const char *cl_error_name(cl_int rc) {
  switch (rc) {
#define N(c) \
  case c:    \
    return #c;
    N(CL_SUCCESS) N(CL_DEVICE_NOT_FOUND) N(CL_DEVICE_NOT_AVAILABLE) N(CL_COMPILER_NOT_AVAILABLE)
    N(CL_MEM_OBJECT_ALLOCATION_FAILURE) N(CL_OUT_OF_RESOURCES) N(CL_OUT_OF_HOST_MEMORY)
    N(CL_PROFILING_INFO_NOT_AVAILABLE) N(CL_MEM_COPY_OVERLAP) N(CL_IMAGE_FORMAT_MISMATCH)
    N(CL_IMAGE_FORMAT_NOT_SUPPORTED) N(CL_BUILD_PROGRAM_FAILURE) N(CL_MAP_FAILURE)
    N(CL_MISALIGNED_SUB_BUFFER_OFFSET) N(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    N(CL_COMPILE_PROGRAM_FAILURE) N(CL_LINKER_NOT_AVAILABLE) N(CL_LINK_PROGRAM_FAILURE)
    N(CL_DEVICE_PARTITION_FAILED) N(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) N(CL_INVALID_VALUE)
    N(CL_INVALID_DEVICE_TYPE) N(CL_INVALID_PLATFORM) N(CL_INVALID_DEVICE) N(CL_INVALID_CONTEXT)
    N(CL_INVALID_QUEUE_PROPERTIES) N(CL_INVALID_COMMAND_QUEUE) N(CL_INVALID_HOST_PTR)
    N(CL_INVALID_MEM_OBJECT) N(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) N(CL_INVALID_IMAGE_SIZE)
    N(CL_INVALID_SAMPLER) N(CL_INVALID_BINARY) N(CL_INVALID_BUILD_OPTIONS) N(CL_INVALID_PROGRAM)
    N(CL_INVALID_PROGRAM_EXECUTABLE) N(CL_INVALID_KERNEL_NAME) N(CL_INVALID_KERNEL_DEFINITION)
    N(CL_INVALID_KERNEL) N(CL_INVALID_ARG_INDEX) N(CL_INVALID_ARG_VALUE) N(CL_INVALID_ARG_SIZE)
    N(CL_INVALID_KERNEL_ARGS) N(CL_INVALID_WORK_DIMENSION) N(CL_INVALID_WORK_GROUP_SIZE)
    N(CL_INVALID_WORK_ITEM_SIZE) N(CL_INVALID_GLOBAL_OFFSET) N(CL_INVALID_EVENT_WAIT_LIST)
    N(CL_INVALID_EVENT) N(CL_INVALID_OPERATION) N(CL_INVALID_GL_OBJECT) N(CL_INVALID_BUFFER_SIZE)
    N(CL_INVALID_MIP_LEVEL) N(CL_INVALID_GLOBAL_WORK_SIZE) N(CL_INVALID_PROPERTY)
    N(CL_INVALID_IMAGE_DESCRIPTOR) N(CL_INVALID_COMPILER_OPTIONS) N(CL_INVALID_LINKER_OPTIONS)
    N(CL_INVALID_DEVICE_PARTITION_COUNT) N(CL_PLATFORM_NOT_FOUND_KHR)
    /* OpenCL 2.x/3.0 codes by value, since CL_TARGET_OPENCL_VERSION 120 hides them. */
    case -69: return "CL_INVALID_PIPE_SIZE";
    case -70: return "CL_INVALID_DEVICE_QUEUE";
    case -71: return "CL_INVALID_SPEC_ID";
    case -72: return "CL_MAX_SIZE_RESTRICTION_EXCEEDED";
#undef N
    default:
      return "CL_UNKNOWN_ERROR";
  }
}

/* Report a failed cl* call: "call: CL_NAME (code): detail". Out-of-memory
 * codes map to DEVBUF_ENOMEM, the rest to DEVBUF_EBACKEND. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 4, 5)))
#endif
static int cl_fail(devbuf_error *err, cl_int rc, const char *call, const char *fmt, ...) {
  int code = DEVBUF_EBACKEND;
  if (rc == CL_OUT_OF_RESOURCES || rc == CL_OUT_OF_HOST_MEMORY ||
      rc == CL_MEM_OBJECT_ALLOCATION_FAILURE || rc == CL_INVALID_BUFFER_SIZE)
    code = DEVBUF_ENOMEM;
  if (err != NULL) {
    char detail[DEVBUF_ERROR_MESSAGE_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    devbuf_error_set(err, code, "%s: %s (%d): %s", call, cl_error_name(rc), (int)rc, detail);
    err->backend_code = (int)rc;
  }
  return code;
}

/* ---- handle table ------------------------------------------------------- */

enum { H_MEM = 1, H_QUEUE = 2, H_EVENT = 3 };

typedef struct ocl_handle {
  void *key;     /* the handle itself; NULL = empty slot, H_TOMB = removed */
  int kind;      /* H_* */
  int device;
  size_t size;   /* H_MEM: bytes requested (0 allowed); H_QUEUE: 1 = default queue */
} ocl_handle;

#define H_TOMB ((void *)(uintptr_t)1)

typedef struct ocl_table {
  ocl_handle *slots;
  size_t cap;  /* power of two, or 0 */
  size_t used; /* live + tombstones */
} ocl_table;

static size_t table_hash(const void *key, size_t cap) {
  uint64_t h = (uint64_t)(uintptr_t)key;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return (size_t)h & (cap - 1);
}

static ocl_handle *table_find(ocl_table *t, const void *key) {
  if (t->cap == 0 || key == NULL || key == H_TOMB) return NULL;
  for (size_t i = table_hash(key, t->cap), n = 0; n < t->cap; i = (i + 1) & (t->cap - 1), n++) {
    if (t->slots[i].key == NULL) return NULL;
    if (t->slots[i].key == key) return &t->slots[i];
  }
  return NULL;
}

static int table_insert(ocl_table *t, ocl_handle rec) {
  if ((t->used + 1) * 2 > t->cap) { /* keep the load (with tombstones) under 1/2 */
    size_t ncap = t->cap ? t->cap * 2 : 64;
    ocl_handle *ns = calloc(ncap, sizeof *ns);
    if (ns == NULL) return DEVBUF_ENOMEM;
    size_t used = 0;
    for (size_t i = 0; i < t->cap; i++) {
      void *k = t->slots[i].key;
      if (k == NULL || k == H_TOMB) continue;
      size_t j = table_hash(k, ncap);
      while (ns[j].key != NULL) j = (j + 1) & (ncap - 1);
      ns[j] = t->slots[i];
      used++;
    }
    free(t->slots);
    t->slots = ns;
    t->cap = ncap;
    t->used = used;
  }
  size_t j = table_hash(rec.key, t->cap);
  while (t->slots[j].key != NULL && t->slots[j].key != H_TOMB) j = (j + 1) & (t->cap - 1);
  if (t->slots[j].key == NULL) t->used++;
  t->slots[j] = rec;
  return DEVBUF_OK;
}

static void table_remove(ocl_handle *slot) {
  slot->key = H_TOMB;
  slot->kind = 0;
}

/* ---- state -------------------------------------------------------------- */

typedef struct ocl_device {
  cl_platform_id platform;
  cl_device_id id;
  char name[128];
  char vendor[64];
  char platform_name[128];
  cl_ulong global_mem;
  cl_ulong max_alloc;
  cl_uint base_align; /* bytes */
  cl_context ctx;           /* created at the device's first use */
  cl_command_queue queue;   /* default in-order queue (stream NULL) */
} ocl_device;

/* An event object. OpenCL events are one-shot (one per command), while a
 * devbuf event can be recorded again: it keeps the marker of its latest
 * record, replaced (and the old one released) at each record. */
typedef struct ocl_event {
  pthread_mutex_t mu;
  cl_event ev; /* NULL until first recorded */
} ocl_event;

typedef struct ocl_state {
  /* Guards discovery, lazy device set-up and the handle table. cl* calls
   * that may block (copies, waits) run outside it. */
  pthread_mutex_t mu;
  int discovered;
  int discover_code; /* DEVBUF_OK or DEVBUF_ENODEV, final after discovery */
  char discover_msg[DEVBUF_ERROR_MESSAGE_SIZE];
  void *lib; /* never dlclosed: ICDs (PoCL) keep threads and atexit handlers */
  ocl_api api;
  ocl_device *devs;
  int ndev;
  ocl_table table;
} ocl_state;

/* Copy a device string, trimming the spaces some vendors pad it with. */
static void trim_copy(char *dst, size_t cap, const char *src) {
  while (*src == ' ') src++;
  snprintf(dst, cap, "%s", src);
  size_t n = strlen(dst);
  while (n > 0 && dst[n - 1] == ' ') dst[--n] = '\0';
}

static void set_discover_failure(ocl_state *st, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void set_discover_failure(ocl_state *st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(st->discover_msg, sizeof st->discover_msg, fmt, ap);
  va_end(ap);
  st->discover_code = DEVBUF_ENODEV;
}

/* Load the ICD loader and list every device of every platform. Runs once,
 * under st->mu; its outcome is final (a later call repeats the reason). */
static void discover_locked(ocl_state *st) {
  st->discovered = 1;
  const char *libname = secure_getenv(OCL_LIBRARY_ENV);
  if (libname == NULL || libname[0] == '\0') libname = OCL_DEFAULT_LIBRARY;

  dlerror();
  st->lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
  if (st->lib == NULL) {
    const char *why = dlerror();
    if (why != NULL && strstr(why, libname) != NULL) /* dlerror names the file already */
      set_discover_failure(st, "dlopen: %s", why);
    else
      set_discover_failure(st, "dlopen %s: %s", libname, why ? why : "unknown error");
    return;
  }
#define OCL_RESOLVE(name)                                                                    \
  do {                                                                                       \
    void *sym_ = dlsym(st->lib, #name);                                                      \
    if (sym_ == NULL) {                                                                      \
      set_discover_failure(st, "dlsym %s in %s: not found (an OpenCL 1.2 ICD loader is needed)", \
                           #name, libname);                                                  \
      return;                                                                                \
    }                                                                                        \
    memcpy(&st->api.name, &sym_, sizeof sym_);                                               \
  } while (0);
  OCL_FUNCS(OCL_RESOLVE)
#undef OCL_RESOLVE

  const ocl_api *cl = &st->api;
  cl_uint nplat = 0;
  cl_int rc = cl->clGetPlatformIDs(0, NULL, &nplat);
  if (rc == CL_PLATFORM_NOT_FOUND_KHR || (rc == CL_SUCCESS && nplat == 0)) {
    set_discover_failure(st,
                         "clGetPlatformIDs: %s (%d): no OpenCL platform; is an ICD installed "
                         "(e.g. pocl-opencl-icd)?",
                         cl_error_name(rc), (int)rc);
    return;
  }
  if (rc != CL_SUCCESS) {
    set_discover_failure(st, "clGetPlatformIDs: %s (%d)", cl_error_name(rc), (int)rc);
    return;
  }
  cl_platform_id *plats = calloc(nplat, sizeof *plats);
  if (plats == NULL) {
    set_discover_failure(st, "clGetPlatformIDs: out of host memory for %u platforms", nplat);
    return;
  }
  rc = cl->clGetPlatformIDs(nplat, plats, NULL);
  if (rc != CL_SUCCESS) {
    set_discover_failure(st, "clGetPlatformIDs: %s (%d)", cl_error_name(rc), (int)rc);
    free(plats);
    return;
  }

  int skipped_old = 0; /* devices below OpenCL 1.2, which lack markers/barriers with lists */
  for (cl_uint p = 0; p < nplat; p++) {
    cl_uint ndev = 0;
    rc = cl->clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndev);
    if (rc != CL_SUCCESS || ndev == 0) continue; /* CL_DEVICE_NOT_FOUND: an empty platform */
    cl_device_id *ids = calloc(ndev, sizeof *ids);
    ocl_device *grown = realloc(st->devs, ((size_t)st->ndev + ndev) * sizeof *grown);
    if (ids == NULL || grown == NULL) {
      free(ids);
      if (grown != NULL) st->devs = grown;
      break;
    }
    st->devs = grown;
    if (cl->clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, ndev, ids, NULL) != CL_SUCCESS) {
      free(ids);
      continue;
    }
    char pname[128] = "";
    cl->clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
    for (cl_uint d = 0; d < ndev; d++) {
      char version[128] = "";
      int major = 0, minor = 0;
      cl->clGetDeviceInfo(ids[d], CL_DEVICE_VERSION, sizeof version - 1, version, NULL);
      if (sscanf(version, "OpenCL %d.%d", &major, &minor) != 2 ||
          major * 100 + minor < 102) {
        skipped_old++;
        continue;
      }
      ocl_device *dv = &st->devs[st->ndev];
      memset(dv, 0, sizeof *dv);
      dv->platform = plats[p];
      dv->id = ids[d];
      char buf[256] = "";
      cl->clGetDeviceInfo(ids[d], CL_DEVICE_NAME, sizeof buf - 1, buf, NULL);
      trim_copy(dv->name, sizeof dv->name, buf);
      memset(buf, 0, sizeof buf);
      cl->clGetDeviceInfo(ids[d], CL_DEVICE_VENDOR, sizeof buf - 1, buf, NULL);
      trim_copy(dv->vendor, sizeof dv->vendor, buf);
      trim_copy(dv->platform_name, sizeof dv->platform_name, pname);
      cl->clGetDeviceInfo(ids[d], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof dv->global_mem,
                          &dv->global_mem, NULL);
      cl->clGetDeviceInfo(ids[d], CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof dv->max_alloc,
                          &dv->max_alloc, NULL);
      cl_uint bits = 0;
      cl->clGetDeviceInfo(ids[d], CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL);
      dv->base_align = bits >= 8 ? bits / 8 : 1;
      if ((dv->base_align & (dv->base_align - 1)) != 0) dv->base_align = 1; /* distrust */
      st->ndev++;
    }
    free(ids);
  }
  if (st->ndev == 0) {
    if (skipped_old > 0)
      set_discover_failure(st,
                           "no OpenCL device of version 1.2 or later on %u platform(s) "
                           "(%d older device(s) skipped)",
                           nplat, skipped_old);
    else
      set_discover_failure(st, "clGetDeviceIDs: no OpenCL device on %u platform(s)", nplat);
  }
  free(plats);
}

static int ensure_discovered(ocl_state *st, devbuf_error *err) {
  pthread_mutex_lock(&st->mu);
  if (!st->discovered) discover_locked(st);
  int code = st->discover_code;
  pthread_mutex_unlock(&st->mu);
  if (code != DEVBUF_OK) return devbuf_error_set(err, code, "%s", st->discover_msg);
  return DEVBUF_OK;
}

static int check_ordinal(ocl_state *st, int device, const char *op, devbuf_error *err) {
  int rc = ensure_discovered(st, err);
  if (rc != DEVBUF_OK) return rc;
  if (device < 0 || device >= st->ndev)
    return devbuf_error_set(err, DEVBUF_ENODEV,
                            "%s: no device %d (" OCL_IDENTIFIER " has %d device(s))", op,
                            device, st->ndev);
  return DEVBUF_OK;
}

/* Discovery, ordinal check and the device's context and default queue,
 * created at its first use (context creation can be slow: not done for
 * devices that are only listed). */
static int get_device(ocl_state *st, int device, const char *op, ocl_device **out,
                      devbuf_error *err) {
  int rc = check_ordinal(st, device, op, err);
  if (rc != DEVBUF_OK) return rc;
  ocl_device *dv = &st->devs[device];
  const ocl_api *cl = &st->api;
  pthread_mutex_lock(&st->mu);
  if (dv->queue == NULL) {
    cl_int crc = CL_SUCCESS;
    if (dv->ctx == NULL) {
      cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)dv->platform,
                                       0};
      dv->ctx = cl->clCreateContext(props, 1, &dv->id, NULL, NULL, &crc);
      if (dv->ctx == NULL) {
        pthread_mutex_unlock(&st->mu);
        return cl_fail(err, crc, "clCreateContext", "%s: device %d (%s)", op, device, dv->name);
      }
    }
    cl_command_queue q = cl->clCreateCommandQueue(dv->ctx, dv->id, 0, &crc);
    if (q == NULL) {
      pthread_mutex_unlock(&st->mu);
      return cl_fail(err, crc, "clCreateCommandQueue", "%s: default queue of device %d", op,
                     device);
    }
    /* Registered so that the handle written into device_info is accepted
     * back as a stream (meaning the default stream). */
    ocl_handle rec = {q, H_QUEUE, device, 1};
    if (table_insert(&st->table, rec) != DEVBUF_OK) {
      cl->clReleaseCommandQueue(q);
      pthread_mutex_unlock(&st->mu);
      return devbuf_error_set(err, DEVBUF_ENOMEM, "%s: out of host memory", op);
    }
    dv->queue = q;
  }
  pthread_mutex_unlock(&st->mu);
  *out = dv;
  return DEVBUF_OK;
}

/* The queue behind `stream` on `device`: NULL = the default queue. */
static int get_queue(ocl_state *st, int device, ocl_device *dv, void *stream, const char *op,
                     cl_command_queue *q, devbuf_error *err) {
  if (stream == NULL) {
    *q = dv->queue;
    return DEVBUF_OK;
  }
  pthread_mutex_lock(&st->mu);
  ocl_handle *h = table_find(&st->table, stream);
  int kind = h ? h->kind : 0, hdev = h ? h->device : -1;
  pthread_mutex_unlock(&st->mu);
  if (kind != H_QUEUE)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: stream %p is not a live " OCL_IDENTIFIER " stream", op, stream);
  if (hdev != device)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: stream %p belongs to device %d, not %d", op,
                            stream, hdev, device);
  *q = (cl_command_queue)stream;
  return DEVBUF_OK;
}

/* The live buffer `ptr` on `device` and its requested size. */
static int get_mem(ocl_state *st, int device, const void *ptr, const char *op, const char *what,
                   size_t *size, devbuf_error *err) {
  if (ptr == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: %s is NULL", op, what);
  pthread_mutex_lock(&st->mu);
  ocl_handle *h = table_find(&st->table, ptr);
  int kind = h ? h->kind : 0, hdev = h ? h->device : -1;
  size_t sz = h ? h->size : 0;
  pthread_mutex_unlock(&st->mu);
  if (kind != H_MEM)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: %s %p is not a live " OCL_IDENTIFIER " buffer", op, what, ptr);
  if (hdev != device)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: %s %p belongs to device %d, not %d", op,
                            what, ptr, hdev, device);
  *size = sz;
  return DEVBUF_OK;
}

static int check_range(size_t offset, size_t nbytes, size_t size, const char *op,
                       const char *what, devbuf_error *err) {
  if (offset > size || nbytes > size - offset)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: %s range [%zu, %zu + %zu) is outside the %zu-byte buffer", op,
                            what, offset, offset, nbytes, size);
  return DEVBUF_OK;
}

/* ---- lifecycle ------------------------------------------------------------ */

static int ocl_init(void **state, devbuf_error *err) {
  /* Cheap on purpose: libOpenCL is opened at the first device query. */
  ocl_state *st = calloc(1, sizeof *st);
  if (st == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "init: out of host memory");
  pthread_mutex_init(&st->mu, NULL);
  *state = st;
  return DEVBUF_OK;
}

static void ocl_shutdown(void *state) {
  ocl_state *st = state;
  if (st == NULL) return;
  const ocl_api *cl = &st->api;
  /* Handles the host left behind: release them so the ICD can clean up. */
  for (size_t i = 0; i < st->table.cap; i++) {
    ocl_handle *h = &st->table.slots[i];
    if (h->key == NULL || h->key == H_TOMB) continue;
    if (h->kind == H_MEM) {
      cl->clReleaseMemObject((cl_mem)h->key);
    } else if (h->kind == H_QUEUE && h->size == 0) {
      cl->clReleaseCommandQueue((cl_command_queue)h->key);
    } else if (h->kind == H_EVENT) {
      ocl_event *e = h->key;
      if (e->ev) cl->clReleaseEvent(e->ev);
      pthread_mutex_destroy(&e->mu);
      free(e);
    }
  }
  for (int d = 0; d < st->ndev; d++) {
    if (st->devs[d].queue) {
      cl->clFinish(st->devs[d].queue);
      cl->clReleaseCommandQueue(st->devs[d].queue);
    }
    if (st->devs[d].ctx) cl->clReleaseContext(st->devs[d].ctx);
  }
  free(st->table.slots);
  free(st->devs);
  pthread_mutex_destroy(&st->mu);
  free(st);
}

/* ---- devices ---------------------------------------------------------------- */

static int ocl_device_count(void *state, int *count, devbuf_error *err) {
  ocl_state *st = state;
  if (count == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_count: count is NULL");
  *count = 0;
  int rc = ensure_discovered(st, err);
  if (rc != DEVBUF_OK) return rc;
  *count = st->ndev;
  return DEVBUF_OK;
}

static int ocl_device_props(void *state, int device, devbuf_device_props *props,
                            devbuf_error *err) {
  ocl_state *st = state;
  if (props == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "device_props: props is NULL");
  int rc = check_ordinal(st, device, "device_props", err);
  if (rc != DEVBUF_OK) return rc;
  const ocl_device *dv = &st->devs[device];
  devbuf_device_props p;
  memset(&p, 0, sizeof p);
  p.struct_size = props->struct_size;
  /* Not host-accessible: a cl_mem is a handle, not an address. */
  p.flags = DEVBUF_DEVICE_ASYNC;
  snprintf(p.name, sizeof p.name, "%s", dv->name);
  snprintf(p.vendor, sizeof p.vendor, "%s", dv->vendor);
  p.total_memory = dv->global_mem;
  p.free_memory = 0; /* OpenCL 1.2 has no portable query for it */
  p.alloc_alignment = dv->base_align;
  p.dlpack_device_type = DEVBUF_DL_OPENCL;
  p.dlpack_device_id = device;
  size_t n = props->struct_size < sizeof p ? props->struct_size : sizeof p;
  if (n > sizeof p.struct_size) memcpy(props, &p, n);
  return DEVBUF_OK;
}

/* ---- memory --------------------------------------------------------------- */

static int ocl_mem_alloc(void *state, int device, size_t size, size_t alignment, void *stream,
                         void **ptr, devbuf_error *err) {
  ocl_state *st = state;
  ocl_device *dv;
  cl_command_queue q;
  if (ptr == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "mem_alloc: ptr is NULL");
  int rc = get_device(st, device, "mem_alloc", &dv, err);
  if (rc == DEVBUF_OK) rc = get_queue(st, device, dv, stream, "mem_alloc", &q, err);
  if (rc != DEVBUF_OK) return rc;
  /* A cl_mem has no address to align: every power of two is honoured
   * vacuously (the device aligns buffers to CL_DEVICE_MEM_BASE_ADDR_ALIGN). */
  if ((alignment & (alignment - 1)) != 0)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "mem_alloc: alignment %zu is not a power of two", alignment);
  if ((cl_ulong)size > dv->max_alloc)
    return devbuf_error_set(err, DEVBUF_ENOMEM,
                            "clCreateBuffer: CL_INVALID_BUFFER_SIZE: %zu bytes exceed "
                            "CL_DEVICE_MAX_MEM_ALLOC_SIZE (%llu) of device %d (%s)",
                            size, (unsigned long long)dv->max_alloc, device, dv->name);
  /* OpenCL refuses empty buffers; a size-0 allocation holds one byte so that
   * it is a unique, valid handle. Its recorded size stays 0. */
  cl_int crc = CL_SUCCESS;
  cl_mem m = st->api.clCreateBuffer(dv->ctx, CL_MEM_READ_WRITE, size ? size : 1, NULL, &crc);
  if (m == NULL)
    return cl_fail(err, crc, "clCreateBuffer", "%zu bytes on device %d (%s)", size, device,
                   dv->name);
  ocl_handle rec = {m, H_MEM, device, size};
  pthread_mutex_lock(&st->mu);
  rc = table_insert(&st->table, rec);
  pthread_mutex_unlock(&st->mu);
  if (rc != DEVBUF_OK) {
    st->api.clReleaseMemObject(m);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: out of host memory");
  }
  *ptr = m;
  return DEVBUF_OK;
}

static int ocl_mem_free(void *state, int device, void *ptr, void *stream, devbuf_error *err) {
  ocl_state *st = state;
  ocl_device *dv;
  cl_command_queue q;
  int rc = get_device(st, device, "mem_free", &dv, err);
  if (rc == DEVBUF_OK) rc = get_queue(st, device, dv, stream, "mem_free", &q, err);
  if (rc != DEVBUF_OK) return rc;
  if (ptr == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "mem_free: ptr is NULL");
  pthread_mutex_lock(&st->mu);
  ocl_handle *h = table_find(&st->table, ptr);
  if (h == NULL || h->kind != H_MEM || h->device != device) {
    pthread_mutex_unlock(&st->mu);
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "mem_free: %p is not a live " OCL_IDENTIFIER " buffer of device %d",
                            ptr, device);
  }
  table_remove(h);
  pthread_mutex_unlock(&st->mu);
  /* Stream order comes for free: OpenCL deletes a released buffer only once
   * the commands already enqueued on it have finished. */
  cl_int crc = st->api.clReleaseMemObject((cl_mem)ptr);
  if (crc != CL_SUCCESS) return cl_fail(err, crc, "clReleaseMemObject", "buffer %p", ptr);
  return DEVBUF_OK;
}

/* ---- copies ------------------------------------------------------------------ */

/* Enqueued non-blocking, then flushed so that the work starts now (the host
 * buffer must stay valid until the stream is synchronized). */
static int ocl_copy_h2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                        size_t nbytes, void *stream, devbuf_error *err) {
  ocl_state *st = state;
  ocl_device *dv;
  cl_command_queue q;
  size_t size;
  int rc = get_device(st, device, "copy_h2d", &dv, err);
  if (rc == DEVBUF_OK) rc = get_queue(st, device, dv, stream, "copy_h2d", &q, err);
  if (rc == DEVBUF_OK) rc = get_mem(st, device, dst, "copy_h2d", "dst", &size, err);
  if (rc == DEVBUF_OK) rc = check_range(dst_offset, nbytes, size, "copy_h2d", "dst", err);
  if (rc != DEVBUF_OK) return rc;
  if (nbytes == 0) return DEVBUF_OK;
  if (src == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "copy_h2d: src is NULL");
  cl_int crc = st->api.clEnqueueWriteBuffer(q, (cl_mem)dst, CL_FALSE, dst_offset, nbytes, src,
                                            0, NULL, NULL);
  if (crc != CL_SUCCESS)
    return cl_fail(err, crc, "clEnqueueWriteBuffer", "%zu bytes to %p+%zu on device %d", nbytes,
                   dst, dst_offset, device);
  st->api.clFlush(q);
  return DEVBUF_OK;
}

static int ocl_copy_d2h(void *state, int device, void *dst, const void *src, size_t src_offset,
                        size_t nbytes, void *stream, devbuf_error *err) {
  ocl_state *st = state;
  ocl_device *dv;
  cl_command_queue q;
  size_t size;
  int rc = get_device(st, device, "copy_d2h", &dv, err);
  if (rc == DEVBUF_OK) rc = get_queue(st, device, dv, stream, "copy_d2h", &q, err);
  if (rc == DEVBUF_OK) rc = get_mem(st, device, src, "copy_d2h", "src", &size, err);
  if (rc == DEVBUF_OK) rc = check_range(src_offset, nbytes, size, "copy_d2h", "src", err);
  if (rc != DEVBUF_OK) return rc;
  if (nbytes == 0) return DEVBUF_OK;
  if (dst == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2h: dst is NULL");
  cl_int crc = st->api.clEnqueueReadBuffer(q, (cl_mem)src, CL_FALSE, src_offset, nbytes, dst, 0,
                                           NULL, NULL);
  if (crc != CL_SUCCESS)
    return cl_fail(err, crc, "clEnqueueReadBuffer", "%zu bytes from %p+%zu on device %d",
                   nbytes, src, src_offset, device);
  st->api.clFlush(q);
  return DEVBUF_OK;
}

static int ocl_copy_d2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                        size_t src_offset, size_t nbytes, void *stream, devbuf_error *err) {
  ocl_state *st = state;
  ocl_device *dv;
  cl_command_queue q;
  size_t dsize, ssize;
  int rc = get_device(st, device, "copy_d2d", &dv, err);
  if (rc == DEVBUF_OK) rc = get_queue(st, device, dv, stream, "copy_d2d", &q, err);
  if (rc == DEVBUF_OK) rc = get_mem(st, device, dst, "copy_d2d", "dst", &dsize, err);
  if (rc == DEVBUF_OK) rc = get_mem(st, device, src, "copy_d2d", "src", &ssize, err);
  if (rc == DEVBUF_OK) rc = check_range(dst_offset, nbytes, dsize, "copy_d2d", "dst", err);
  if (rc == DEVBUF_OK) rc = check_range(src_offset, nbytes, ssize, "copy_d2d", "src", err);
  if (rc != DEVBUF_OK) return rc;
  if (nbytes == 0) return DEVBUF_OK;
  if (dst == src && dst_offset < src_offset + nbytes && src_offset < dst_offset + nbytes)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "clEnqueueCopyBuffer: CL_MEM_COPY_OVERLAP: ranges at %zu and %zu of "
                            "%zu bytes overlap in buffer %p",
                            src_offset, dst_offset, nbytes, dst);
  cl_int crc = st->api.clEnqueueCopyBuffer(q, (cl_mem)src, (cl_mem)dst, src_offset, dst_offset,
                                           nbytes, 0, NULL, NULL);
  if (crc != CL_SUCCESS)
    return cl_fail(err, crc, "clEnqueueCopyBuffer", "%zu bytes %p+%zu -> %p+%zu on device %d",
                   nbytes, src, src_offset, dst, dst_offset, device);
  st->api.clFlush(q);
  return DEVBUF_OK;
}

/* ---- streams ----------------------------------------------------------------- */

static int ocl_stream_create(void *state, int device, void **stream, devbuf_error *err) {
  ocl_state *st = state;
  ocl_device *dv;
  if (stream == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "stream_create: stream is NULL");
  int rc = get_device(st, device, "stream_create", &dv, err);
  if (rc != DEVBUF_OK) return rc;
  cl_int crc = CL_SUCCESS;
  cl_command_queue q = st->api.clCreateCommandQueue(dv->ctx, dv->id, 0, &crc); /* in-order */
  if (q == NULL)
    return cl_fail(err, crc, "clCreateCommandQueue", "device %d (%s)", device, dv->name);
  ocl_handle rec = {q, H_QUEUE, device, 0};
  pthread_mutex_lock(&st->mu);
  rc = table_insert(&st->table, rec);
  pthread_mutex_unlock(&st->mu);
  if (rc != DEVBUF_OK) {
    st->api.clReleaseCommandQueue(q);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "stream_create: out of host memory");
  }
  *stream = q;
  return DEVBUF_OK;
}

static int ocl_stream_destroy(void *state, int device, void *stream, devbuf_error *err) {
  ocl_state *st = state;
  int rc = check_ordinal(st, device, "stream_destroy", err);
  if (rc != DEVBUF_OK) return rc;
  if (stream == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "stream_destroy: the default stream (NULL) cannot be destroyed");
  pthread_mutex_lock(&st->mu);
  ocl_handle *h = table_find(&st->table, stream);
  if (h == NULL || h->kind != H_QUEUE || h->device != device || h->size != 0) {
    int is_default = h != NULL && h->kind == H_QUEUE && h->size != 0;
    pthread_mutex_unlock(&st->mu);
    if (is_default)
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "stream_destroy: %p is a default queue and cannot be destroyed",
                              stream);
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "stream_destroy: %p is not a live " OCL_IDENTIFIER
                            " stream of device %d",
                            stream, device);
  }
  table_remove(h);
  pthread_mutex_unlock(&st->mu);
  /* Releasing flushes; enqueued work still completes. */
  cl_int crc = st->api.clReleaseCommandQueue((cl_command_queue)stream);
  if (crc != CL_SUCCESS) return cl_fail(err, crc, "clReleaseCommandQueue", "stream %p", stream);
  return DEVBUF_OK;
}

static int ocl_stream_synchronize(void *state, int device, void *stream, devbuf_error *err) {
  ocl_state *st = state;
  ocl_device *dv;
  cl_command_queue q;
  int rc = get_device(st, device, "stream_synchronize", &dv, err);
  if (rc == DEVBUF_OK) rc = get_queue(st, device, dv, stream, "stream_synchronize", &q, err);
  if (rc != DEVBUF_OK) return rc;
  cl_int crc = st->api.clFinish(q);
  if (crc != CL_SUCCESS)
    return cl_fail(err, crc, "clFinish", "stream %p of device %d", (void *)q, device);
  return DEVBUF_OK;
}

/* ---- events ------------------------------------------------------------------ */

static int ocl_event_create(void *state, int device, void **event, devbuf_error *err) {
  ocl_state *st = state;
  if (event == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "event_create: event is NULL");
  int rc = check_ordinal(st, device, "event_create", err);
  if (rc != DEVBUF_OK) return rc;
  ocl_event *e = calloc(1, sizeof *e);
  if (e == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "event_create: out of host memory");
  pthread_mutex_init(&e->mu, NULL);
  ocl_handle rec = {e, H_EVENT, device, 0};
  pthread_mutex_lock(&st->mu);
  rc = table_insert(&st->table, rec);
  pthread_mutex_unlock(&st->mu);
  if (rc != DEVBUF_OK) {
    pthread_mutex_destroy(&e->mu);
    free(e);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "event_create: out of host memory");
  }
  *event = e;
  return DEVBUF_OK;
}

/* The live event object `event` of `device`, or NULL with err filled. */
static ocl_event *get_event(ocl_state *st, int device, void *event, const char *op,
                            devbuf_error *err) {
  if (event == NULL) {
    devbuf_error_set(err, DEVBUF_EINVAL, "%s: event is NULL", op);
    return NULL;
  }
  pthread_mutex_lock(&st->mu);
  ocl_handle *h = table_find(&st->table, event);
  int ok = h != NULL && h->kind == H_EVENT && h->device == device;
  pthread_mutex_unlock(&st->mu);
  if (!ok) {
    devbuf_error_set(err, DEVBUF_EINVAL,
                     "%s: %p is not a live " OCL_IDENTIFIER " event of device %d", op, event,
                     device);
    return NULL;
  }
  return event;
}

static int ocl_event_destroy(void *state, int device, void *event, devbuf_error *err) {
  ocl_state *st = state;
  int rc = check_ordinal(st, device, "event_destroy", err);
  if (rc != DEVBUF_OK) return rc;
  if (event == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "event_destroy: event is NULL");
  pthread_mutex_lock(&st->mu);
  ocl_handle *h = table_find(&st->table, event);
  if (h == NULL || h->kind != H_EVENT || h->device != device) {
    pthread_mutex_unlock(&st->mu);
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "event_destroy: %p is not a live " OCL_IDENTIFIER
                            " event of device %d",
                            event, device);
  }
  table_remove(h);
  pthread_mutex_unlock(&st->mu);
  ocl_event *e = event;
  if (e->ev) st->api.clReleaseEvent(e->ev);
  pthread_mutex_destroy(&e->mu);
  free(e);
  return DEVBUF_OK;
}

static int ocl_event_record(void *state, int device, void *event, void *stream,
                            devbuf_error *err) {
  ocl_state *st = state;
  ocl_device *dv;
  cl_command_queue q;
  int rc = get_device(st, device, "event_record", &dv, err);
  if (rc == DEVBUF_OK) rc = get_queue(st, device, dv, stream, "event_record", &q, err);
  if (rc != DEVBUF_OK) return rc;
  ocl_event *e = get_event(st, device, event, "event_record", err);
  if (e == NULL) return DEVBUF_EINVAL;
  cl_event ev = NULL;
  cl_int crc = st->api.clEnqueueMarkerWithWaitList(q, 0, NULL, &ev);
  if (crc != CL_SUCCESS)
    return cl_fail(err, crc, "clEnqueueMarkerWithWaitList", "stream %p of device %d", (void *)q,
                   device);
  /* Submit now: a queue waiting on this marker from elsewhere needs it to
   * have been flushed to make progress (OpenCL 1.2, section 5.13). */
  st->api.clFlush(q);
  pthread_mutex_lock(&e->mu);
  cl_event old = e->ev;
  e->ev = ev;
  pthread_mutex_unlock(&e->mu);
  if (old) st->api.clReleaseEvent(old);
  return DEVBUF_OK;
}

/* The cl_event to wait on for `event`, retained (release it), or NULL when
 * there is nothing to wait for. `event` is a live event object of this
 * plugin, or else a raw cl_event as device_info carries it (from another
 * producer in this process). *same_device: 1 if it belongs to `device`,
 * 0 if to another device, -1 if unknown (a raw cl_event). */
static int acquire_cl_event(ocl_state *st, int device, void *event, const char *op,
                            cl_event *out, int *same_device, devbuf_error *err) {
  *out = NULL;
  *same_device = -1;
  if (event == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "%s: event is NULL", op);
  pthread_mutex_lock(&st->mu);
  ocl_handle *h = table_find(&st->table, event);
  int kind = h ? h->kind : 0, hdev = h ? h->device : -1;
  pthread_mutex_unlock(&st->mu);
  if (kind == H_EVENT) {
    ocl_event *e = event;
    pthread_mutex_lock(&e->mu);
    cl_event ev = e->ev;
    if (ev) st->api.clRetainEvent(ev);
    pthread_mutex_unlock(&e->mu);
    *out = ev;
    *same_device = hdev == device;
    return DEVBUF_OK;
  }
  if (kind != 0)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: %p is a buffer or stream, not an event",
                            op, event);
  cl_int crc = st->api.clRetainEvent((cl_event)event);
  if (crc != CL_SUCCESS) return cl_fail(err, crc, "clRetainEvent", "%s: event %p", op, event);
  *out = (cl_event)event;
  *same_device = -1;
  return DEVBUF_OK;
}

static int ocl_stream_wait_event(void *state, int device, void *stream, void *event,
                                 devbuf_error *err) {
  ocl_state *st = state;
  ocl_device *dv;
  cl_command_queue q;
  cl_event ev;
  int same;
  int rc = get_device(st, device, "stream_wait_event", &dv, err);
  if (rc == DEVBUF_OK) rc = get_queue(st, device, dv, stream, "stream_wait_event", &q, err);
  if (rc == DEVBUF_OK)
    rc = acquire_cl_event(st, device, event, "stream_wait_event", &ev, &same, err);
  if (rc != DEVBUF_OK) return rc;
  if (ev == NULL) return DEVBUF_OK; /* never recorded: nothing to wait for */
  cl_int crc;
  const char *call;
  if (same == 0) {
    /* An event of another device (another context): a barrier cannot wait
     * on it, so wait on the host, which is correct if slower. */
    call = "clWaitForEvents";
    crc = st->api.clWaitForEvents(1, &ev);
  } else {
    call = "clEnqueueBarrierWithWaitList";
    crc = st->api.clEnqueueBarrierWithWaitList(q, 1, &ev, NULL);
    if (crc == CL_INVALID_CONTEXT && same < 0) { /* a foreign cl_event, same story */
      call = "clWaitForEvents";
      crc = st->api.clWaitForEvents(1, &ev);
    }
  }
  st->api.clReleaseEvent(ev);
  if (crc != CL_SUCCESS)
    return cl_fail(err, crc, call, "stream %p of device %d waiting on event %p", (void *)q,
                   device, event);
  st->api.clFlush(q);
  return DEVBUF_OK;
}

static int ocl_event_synchronize(void *state, int device, void *event, devbuf_error *err) {
  ocl_state *st = state;
  cl_event ev;
  int same;
  int rc = check_ordinal(st, device, "event_synchronize", err);
  if (rc == DEVBUF_OK)
    rc = acquire_cl_event(st, device, event, "event_synchronize", &ev, &same, err);
  if (rc != DEVBUF_OK) return rc;
  if (ev == NULL) return DEVBUF_OK;
  cl_int crc = st->api.clWaitForEvents(1, &ev);
  st->api.clReleaseEvent(ev);
  if (crc != CL_SUCCESS)
    return cl_fail(err, crc, "clWaitForEvents", "event %p of device %d", event, device);
  return DEVBUF_OK;
}

static int ocl_event_query(void *state, int device, void *event, devbuf_error *err) {
  ocl_state *st = state;
  cl_event ev;
  int same;
  int rc = check_ordinal(st, device, "event_query", err);
  if (rc == DEVBUF_OK) rc = acquire_cl_event(st, device, event, "event_query", &ev, &same, err);
  if (rc != DEVBUF_OK) return rc;
  if (ev == NULL) return DEVBUF_OK;
  cl_int status = CL_QUEUED;
  cl_int crc = st->api.clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status,
                                      &status, NULL);
  st->api.clReleaseEvent(ev);
  if (crc != CL_SUCCESS)
    return cl_fail(err, crc, "clGetEventInfo", "event %p of device %d", event, device);
  if (status < 0) /* the command failed; its status is an error code */
    return cl_fail(err, status, "clGetEventInfo", "CL_EVENT_COMMAND_EXECUTION_STATUS of event %p",
                   event);
  if (status != CL_COMPLETE)
    return devbuf_error_set(err, DEVBUF_EBUSY, "event_query: event %p not complete yet", event);
  return DEVBUF_OK;
}

/* ---- device_info ---------------------------------------------------------------- */

static int check_identifier(const char *identifier, const char *op, devbuf_error *err) {
  if (identifier == NULL || strcmp(identifier, OCL_IDENTIFIER) != 0)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: identifier %s%s%s is not " OCL_IDENTIFIER,
                            op, identifier ? "'" : "", identifier ? identifier : "NULL",
                            identifier ? "'" : "");
  return DEVBUF_OK;
}

static int ocl_device_info_export(void *state, const char *identifier, int device, void *event,
                                  void *stream, uint32_t flags, void *out, size_t capacity,
                                  size_t *size, devbuf_error *err) {
  ocl_state *st = state;
  ocl_device *dv;
  cl_command_queue q;
  const char *op = "device_info_export";
  int rc = check_identifier(identifier, op, err);
  if (rc == DEVBUF_OK) rc = get_device(st, device, op, &dv, err);
  if (rc == DEVBUF_OK) rc = get_queue(st, device, dv, stream, op, &q, err);
  if (rc != DEVBUF_OK) return rc;
  if (out == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "%s: out is NULL", op);
  if (capacity < sizeof(devbuf_device_info))
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: capacity %zu < %zu bytes of devbuf_device_info",
                            op, capacity, sizeof(devbuf_device_info));
  if (flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: " OCL_IDENTIFIER " memory is not host-accessible", op);
  if (flags & ~(uint32_t)DEVBUF_DEVICE_INFO_READONLY)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: unknown flags 0x%x", op, (unsigned)flags);
  cl_event ev = NULL;
  if (event != NULL) {
    int same;
    rc = acquire_cl_event(st, device, event, op, &ev, &same, err);
    if (rc != DEVBUF_OK) return rc;
    /* Borrowed: the event object keeps its cl_event until it is recorded
     * again or destroyed, which the producer does not do while exported. */
    if (ev) st->api.clReleaseEvent(ev);
  }
  devbuf_device_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.version = DEVBUF_DEVICE_INFO_VERSION;
  info.device_ordinal = device;
  info.flags = flags;
  info.event = ev;
  info.stream = q;
  memcpy(out, &info, sizeof info);
  if (size) *size = sizeof info;
  return DEVBUF_OK;
}

static int ocl_device_info_import(void *state, const char *identifier, const void *info,
                                  devbuf_device_info_desc *out, devbuf_error *err) {
  ocl_state *st = state;
  const char *op = "device_info_import";
  int rc = check_identifier(identifier, op, err);
  if (rc != DEVBUF_OK) return rc;
  if (info == NULL || out == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: %s is NULL", op, info ? "out" : "info");
  uint32_t struct_size;
  memcpy(&struct_size, info, sizeof struct_size);
  if (struct_size < sizeof(devbuf_device_info))
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: struct_size %u < %zu (devbuf_device_info v1)",
                            op, (unsigned)struct_size, sizeof(devbuf_device_info));
  devbuf_device_info in;
  memcpy(&in, info, sizeof in); /* the v1 prefix; a larger writer's tail is ignored */
  if (in.version == 0 || in.version > DEVBUF_DEVICE_INFO_VERSION)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: version %u not understood (expected %d)", op,
                            (unsigned)in.version, DEVBUF_DEVICE_INFO_VERSION);
  if (in.reserved0 != 0)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: reserved0 is %u, not 0", op,
                            (unsigned)in.reserved0);
  for (size_t i = 0; i < sizeof in.reserved / sizeof in.reserved[0]; i++)
    if (in.reserved[i] != 0)
      return devbuf_error_set(err, DEVBUF_EINVAL, "%s: reserved[%zu] is nonzero", op, i);
  if (in.flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: flags claim host access, which " OCL_IDENTIFIER " never has", op);
  if (in.flags & ~(uint32_t)DEVBUF_DEVICE_INFO_READONLY)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: unknown flags 0x%x", op, (unsigned)in.flags);
  rc = ensure_discovered(st, err);
  if (rc != DEVBUF_OK) return rc;
  if (in.device_ordinal < 0 || in.device_ordinal >= st->ndev)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: device_ordinal %d out of range (" OCL_IDENTIFIER " has %d)", op,
                            (int)in.device_ordinal, st->ndev);
  if (in.stream != NULL) {
    pthread_mutex_lock(&st->mu);
    ocl_handle *h = table_find(&st->table, in.stream);
    int kind = h ? h->kind : 0, hdev = h ? h->device : -1;
    pthread_mutex_unlock(&st->mu);
    /* A queue we do not know may come from another library: accepted. */
    if (kind != 0 && (kind != H_QUEUE || hdev != in.device_ordinal))
      return devbuf_error_set(err, DEVBUF_EINVAL, "%s: stream %p is not a queue of device %d", op,
                              in.stream, (int)in.device_ordinal);
  }
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->flags = in.flags;
  out->device_ordinal = in.device_ordinal;
  out->event = in.event;
  out->stream = in.stream;
  return DEVBUF_OK;
}

/* ---- the table -------------------------------------------------------------------- */

static const char *const ocl_identifiers[] = {OCL_IDENTIFIER, NULL};

static const devbuf_plugin_table ocl_table_v1 = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "opencl",
    .version = "0.1.0",
    .description = "OpenCL buffers, queues and events through the ICD loader (libOpenCL.so.1)",
    .identifiers = ocl_identifiers,
    .init = ocl_init,
    .shutdown = ocl_shutdown,
    .device_count = ocl_device_count,
    .device_props = ocl_device_props,
    .mem_alloc = ocl_mem_alloc,
    .mem_free = ocl_mem_free,
    .copy_h2d = ocl_copy_h2d,
    .copy_d2h = ocl_copy_d2h,
    .copy_d2d = ocl_copy_d2d,
    .stream_create = ocl_stream_create,
    .stream_destroy = ocl_stream_destroy,
    .stream_synchronize = ocl_stream_synchronize,
    .event_create = ocl_event_create,
    .event_destroy = ocl_event_destroy,
    .event_record = ocl_event_record,
    .stream_wait_event = ocl_stream_wait_event,
    .event_synchronize = ocl_event_synchronize,
    .event_query = ocl_event_query,
    .device_info_export = ocl_device_info_export,
    .device_info_import = ocl_device_info_import,
    .dtype_namespaces = NULL,
    .host_alloc = NULL, /* the runtime falls back to malloc */
    .host_free = NULL,
    .ext_functions = NULL,
    .ext_function_count = 0,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &ocl_table_v1; }
