/* plugins/common: the slots of vendors that make a device current for each
 * call (CUDA, HIP), written once over the plugin's gpu_vendor. See
 * gpu_common.h. */
#include <stdio.h>
#include <string.h>

#include "gpu_common.h"

/* Make the call c on `device`: enter (or the reason there is no device),
 * refuse a NULL `need` with DEVBUF_EINVAL "refusal", make the vendor call,
 * leave. On a vendor failure the message names the entry point and says
 * `detail` (printf-style, formatted only then). */
static int gpu_run(void *state, int device, gpu_call *c, const void *need, const char *refusal,
                   devbuf_error *err, const char *detail, ...) GPU_PRINTF(7, 8);

static int gpu_run(void *state, int device, gpu_call *c, const void *need, const char *refusal,
                   devbuf_error *err, const char *detail, ...) {
  gpu_base *b = state;
  const gpu_vendor *v;
  gpu_scope scope;
  int rc, r;
  if (b == NULL) return gpu_lazy_ensure(NULL, err);
  v = b->vendor;
  memset(&scope, 0, sizeof scope);
  rc = v->enter(state, device, &scope, err);
  if (rc != DEVBUF_OK) return rc;
  if (refusal != NULL && need == NULL) {
    v->leave(state, &scope);
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s", refusal);
  }
  c->name = v->names[c->op];
  r = v->call(state, &scope, c);
  v->leave(state, &scope);
  if (r == v->ok) return DEVBUF_OK;
  if (c->op == GPU_OP_EVENT_QUERY && r == v->not_ready) return DEVBUF_EBUSY; /* not yet */
  {
    char text[256];
    va_list ap;
    va_start(ap, detail);
    vsnprintf(text, sizeof text, detail, ap);
    va_end(ap);
    return v->fail(state, err, r, c->name, text);
  }
}

/* ---- memory ------------------------------------------------------------ */

int gpu_scoped_mem_alloc(void *state, int device, size_t size, size_t alignment, void *stream,
                         void **ptr, devbuf_error *err) {
  gpu_base *b = state;
  gpu_call c = {.op = GPU_OP_MEM_ALLOC, .stream = stream};
  size_t native = b && b->vendor ? b->vendor->native_alignment : 1;
  uintptr_t base, aligned;
  int rc = gpu_alloc_request(ptr, size, alignment, native, &c.size, err);
  if (rc == DEVBUF_OK)
    rc = gpu_run(state, device, &c, NULL, NULL, err, "%zu bytes on device %d", size, device);
  if (rc != DEVBUF_OK) return rc;
  base = (uintptr_t)c.out;
  aligned = gpu_align_up(base, alignment, native);
  if (aligned != base && !gpu_align_remember(&b->align, aligned, base)) {
    gpu_call f = {.op = GPU_OP_MEM_FREE, .stream = stream, .ptr = c.out};
    gpu_run(state, device, &f, NULL, NULL, NULL, "%p", c.out);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: out of host memory");
  }
  *ptr = (void *)aligned;
  return DEVBUF_OK;
}

int gpu_scoped_mem_free(void *state, int device, void *ptr, void *stream, devbuf_error *err) {
  gpu_base *b = state;
  gpu_call c = {.op = GPU_OP_MEM_FREE, .stream = stream};
  /* The base is looked up once the device is known to exist, and forgotten
   * only once it is freed: a free that fails can be tried again. */
  int rc = gpu_check_device(b ? &b->lazy : NULL, device, err);
  if (rc != DEVBUF_OK) return rc;
  if (ptr != NULL) c.ptr = (void *)gpu_align_base(&b->align, (uintptr_t)ptr, 0);
  rc = gpu_run(state, device, &c, ptr, "mem_free: NULL pointer", err, "%p on device %d", ptr,
               device);
  if (rc == DEVBUF_OK && c.ptr != ptr) gpu_align_base(&b->align, (uintptr_t)ptr, 1);
  return rc;
}

int gpu_scoped_host_alloc(void *state, int device, size_t size, void **ptr, devbuf_error *err) {
  gpu_call c = {.op = GPU_OP_HOST_ALLOC, .size = size ? size : 1};
  int rc = gpu_check_out(ptr, "host_alloc", "ptr", err);
  if (rc == DEVBUF_OK) rc = gpu_run(state, device, &c, NULL, NULL, err, "%zu bytes", size);
  if (rc == DEVBUF_OK) *ptr = c.out;
  return rc;
}

int gpu_scoped_host_free(void *state, int device, void *ptr, devbuf_error *err) {
  gpu_call c = {.op = GPU_OP_HOST_FREE, .ptr = ptr};
  return gpu_run(state, device, &c, ptr, "host_free: NULL pointer", err, "%p", ptr);
}

/* ---- copies -------------------------------------------------------------- */

static int gpu_scoped_copy(void *state, int device, int op, void *dst, size_t dst_offset,
                           const void *src, size_t src_offset, size_t nbytes, void *stream,
                           devbuf_error *err) {
  static const char *const what[] = {"copy_h2d", "copy_d2h", "copy_d2d"};
  gpu_base *b = state;
  gpu_call c = {.op = op, .stream = stream, .size = nbytes};
  int nothing = 0;
  /* Arguments are checked after the device, so that a plugin without one
   * says why before anything else. */
  int rc = gpu_check_device(b ? &b->lazy : NULL, device, err);
  if (rc == DEVBUF_OK)
    rc = gpu_check_copy(what[op - GPU_OP_COPY_H2D], dst, dst_offset, src, src_offset, nbytes,
                        &c.dst, &c.src, &nothing, err);
  if (rc != DEVBUF_OK || nothing) return rc;
  if (op == GPU_OP_COPY_H2D)
    return gpu_run(state, device, &c, NULL, NULL, err, "%zu bytes to %p+%zu on device %d", nbytes,
                   dst, dst_offset, device);
  if (op == GPU_OP_COPY_D2H)
    return gpu_run(state, device, &c, NULL, NULL, err, "%zu bytes from %p+%zu on device %d",
                   nbytes, src, src_offset, device);
  return gpu_run(state, device, &c, NULL, NULL, err, "%zu bytes on device %d", nbytes, device);
}

int gpu_scoped_copy_h2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                        size_t nbytes, void *stream, devbuf_error *err) {
  return gpu_scoped_copy(state, device, GPU_OP_COPY_H2D, dst, dst_offset, src, 0, nbytes, stream,
                         err);
}

int gpu_scoped_copy_d2h(void *state, int device, void *dst, const void *src, size_t src_offset,
                        size_t nbytes, void *stream, devbuf_error *err) {
  return gpu_scoped_copy(state, device, GPU_OP_COPY_D2H, dst, 0, src, src_offset, nbytes, stream,
                         err);
}

int gpu_scoped_copy_d2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                        size_t src_offset, size_t nbytes, void *stream, devbuf_error *err) {
  return gpu_scoped_copy(state, device, GPU_OP_COPY_D2D, dst, dst_offset, src, src_offset, nbytes,
                         stream, err);
}

/* ---- streams and events ------------------------------------------------- */

static int gpu_scoped_create(void *state, int device, int op, void **out, const char *what,
                             const char *name, devbuf_error *err) {
  gpu_call c = {.op = op};
  int rc = gpu_check_out(out, what, name, err);
  if (rc == DEVBUF_OK) rc = gpu_run(state, device, &c, NULL, NULL, err, "device %d", device);
  if (rc == DEVBUF_OK) *out = c.out;
  return rc;
}

int gpu_scoped_stream_create(void *state, int device, void **stream, devbuf_error *err) {
  return gpu_scoped_create(state, device, GPU_OP_STREAM_CREATE, stream, "stream_create", "stream",
                           err);
}

int gpu_scoped_event_create(void *state, int device, void **event, devbuf_error *err) {
  return gpu_scoped_create(state, device, GPU_OP_EVENT_CREATE, event, "event_create", "event",
                           err);
}

/* A stream or event slot: `need` (when refusal is not NULL) must not be
 * NULL once the device is known. */
static int gpu_scoped_handle(void *state, int device, int op, void *stream, void *event,
                             const void *need, const char *refusal, devbuf_error *err) {
  gpu_call c = {.op = op, .stream = stream, .event = event};
  return gpu_run(state, device, &c, need, refusal, err, "device %d", device);
}

int gpu_scoped_stream_destroy(void *state, int device, void *stream, devbuf_error *err) {
  /* The default stream was never created, so cannot be destroyed. */
  return gpu_scoped_handle(state, device, GPU_OP_STREAM_DESTROY, stream, NULL, stream,
                           "stream_destroy: NULL is the default stream", err);
}

int gpu_scoped_stream_synchronize(void *state, int device, void *stream, devbuf_error *err) {
  return gpu_scoped_handle(state, device, GPU_OP_STREAM_SYNCHRONIZE, stream, NULL, NULL, NULL,
                           err);
}

int gpu_scoped_event_destroy(void *state, int device, void *event, devbuf_error *err) {
  return gpu_scoped_handle(state, device, GPU_OP_EVENT_DESTROY, NULL, event, event,
                           "event_destroy: NULL event", err);
}

int gpu_scoped_event_record(void *state, int device, void *event, void *stream,
                            devbuf_error *err) {
  return gpu_scoped_handle(state, device, GPU_OP_EVENT_RECORD, stream, event, event,
                           "event_record: NULL event", err);
}

int gpu_scoped_stream_wait_event(void *state, int device, void *stream, void *event,
                                 devbuf_error *err) {
  return gpu_scoped_handle(state, device, GPU_OP_STREAM_WAIT_EVENT, stream, event, event,
                           "stream_wait_event: NULL event", err);
}

int gpu_scoped_event_synchronize(void *state, int device, void *event, devbuf_error *err) {
  return gpu_scoped_handle(state, device, GPU_OP_EVENT_SYNCHRONIZE, NULL, event, event,
                           "event_synchronize: NULL event", err);
}

int gpu_scoped_event_query(void *state, int device, void *event, devbuf_error *err) {
  return gpu_scoped_handle(state, device, GPU_OP_EVENT_QUERY, NULL, event, event,
                           "event_query: NULL event", err);
}
