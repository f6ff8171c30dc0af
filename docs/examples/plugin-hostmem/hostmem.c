/* hostmem.c: an example devbuf device plugin, built outside the devbuf tree.
 *
 * Device identifier "example.hostmem": one device whose memory is ordinary
 * host memory (malloc), but whose streams are real: each stream is a FIFO of
 * operations run, in order, by its own worker thread. So a copy returns at
 * once and is complete only after the stream (or an event recorded after it)
 * is synchronized, exactly the contract devbuf/plugin.h asks of a GPU plugin.
 *
 * What it shows a plugin author:
 *  - one exported symbol, devbuf_plugin_entry, returning a static table;
 *  - a cheap init (no thread is started until a stream is used);
 *  - every mandatory slot, with errors that name the operation;
 *  - stream-ordered free, events as generation counters, cross-stream waits.
 *
 * Kept short on purpose: handles are checked by a magic number only (the
 * devbuf.sim plugin keeps a registry of live handles instead), and
 * event_destroy / stream_destroy block until the work that uses them is done
 * rather than reference-counting them. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "devbuf/plugin.h"

#define HM_ALIGN 64
#define HM_STREAM_MAGIC 0x686d7374u /* "hmst" */
#define HM_EVENT_MAGIC 0x686d6576u  /* "hmev" */

/* ---- objects ---------------------------------------------------------- */

typedef struct hm_event {
  uint32_t magic;
  pthread_mutex_t lock;
  pthread_cond_t cond;  /* broadcast when done_gen grows or a waiter leaves */
  uint64_t record_gen;  /* bumped by every event_record */
  uint64_t done_gen;    /* newest generation whose RECORD op has run */
  int waiters;          /* WAIT ops currently blocked on this event */
} hm_event;

enum hm_op_kind { OP_COPY, OP_FREE, OP_RECORD, OP_WAIT };

typedef struct hm_op {
  struct hm_op *next;
  enum hm_op_kind kind;
  void *dst;
  const void *src;
  size_t n;
  hm_event *event;
  uint64_t gen;
} hm_op;

typedef struct hm_stream {
  uint32_t magic;
  pthread_mutex_t lock;
  pthread_cond_t work;  /* the worker waits here for ops */
  pthread_cond_t idle;  /* the host waits here for completion */
  hm_op *head, *tail;
  uint64_t submitted, completed;
  int stop;
  pthread_t thread;
} hm_stream;

typedef struct hm_state {
  pthread_mutex_t lock;     /* guards default_stream creation */
  hm_stream *default_stream; /* stream NULL; created at first use */
} hm_state;

/* ---- helpers ---------------------------------------------------------- */

static int check_device(int device, const char *op, devbuf_error *err) {
  if (device != 0)
    return devbuf_error_set(err, DEVBUF_ENODEV, "%s: example.hostmem has one device (0), not %d",
                            op, device);
  return DEVBUF_OK;
}

static int check_event(void *event, const char *op, devbuf_error *err) {
  if (event == NULL || ((hm_event *)event)->magic != HM_EVENT_MAGIC)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: %p is not an example.hostmem event", op, event);
  return DEVBUF_OK;
}

static void run_op(hm_op *op) {
  switch (op->kind) {
    case OP_COPY:
      if (op->n) memmove(op->dst, op->src, op->n);
      break;
    case OP_FREE:
      free(op->dst);
      break;
    case OP_RECORD:
      pthread_mutex_lock(&op->event->lock);
      if (op->gen > op->event->done_gen) op->event->done_gen = op->gen;
      pthread_cond_broadcast(&op->event->cond);
      pthread_mutex_unlock(&op->event->lock);
      break;
    case OP_WAIT: {
      hm_event *e = op->event;
      pthread_mutex_lock(&e->lock);
      while (e->done_gen < op->gen) pthread_cond_wait(&e->cond, &e->lock);
      e->waiters--;
      pthread_cond_broadcast(&e->cond); /* event_destroy may be waiting for us */
      pthread_mutex_unlock(&e->lock);
      break;
    }
  }
}

static void *worker(void *arg) {
  hm_stream *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (s->head == NULL && !s->stop) pthread_cond_wait(&s->work, &s->lock);
    if (s->head == NULL) break; /* stop requested and queue drained */
    hm_op *op = s->head;
    s->head = op->next;
    if (s->head == NULL) s->tail = NULL;
    pthread_mutex_unlock(&s->lock); /* run without the lock: the host may queue more */
    run_op(op);
    free(op);
    pthread_mutex_lock(&s->lock);
    s->completed++;
    pthread_cond_broadcast(&s->idle);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static int stream_new(hm_stream **out, const char *op, devbuf_error *err) {
  hm_stream *s = calloc(1, sizeof *s);
  if (s == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "%s: out of memory", op);
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->idle, NULL);
  int rc = pthread_create(&s->thread, NULL, worker, s);
  if (rc != 0) {
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return devbuf_error_set(err, DEVBUF_EBACKEND, "%s: pthread_create: %s", op, strerror(rc));
  }
  s->magic = HM_STREAM_MAGIC;
  *out = s;
  return DEVBUF_OK;
}

/* Drain the queue, stop the worker and free the stream. */
static void stream_delete(hm_stream *s) {
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  s->magic = 0;
  pthread_cond_destroy(&s->idle);
  pthread_cond_destroy(&s->work);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* Map a stream handle to a stream; NULL is the device's default stream. */
static int resolve(hm_state *st, void *handle, hm_stream **out, const char *op, devbuf_error *err) {
  if (handle != NULL) {
    if (((hm_stream *)handle)->magic != HM_STREAM_MAGIC)
      return devbuf_error_set(err, DEVBUF_EINVAL, "%s: %p is not an example.hostmem stream", op,
                              handle);
    *out = handle;
    return DEVBUF_OK;
  }
  int rc = DEVBUF_OK;
  pthread_mutex_lock(&st->lock);
  if (st->default_stream == NULL) rc = stream_new(&st->default_stream, op, err);
  *out = st->default_stream;
  pthread_mutex_unlock(&st->lock);
  return rc;
}

static void push(hm_stream *s, hm_op *o) {
  o->next = NULL;
  pthread_mutex_lock(&s->lock);
  if (s->tail) s->tail->next = o;
  else s->head = o;
  s->tail = o;
  s->submitted++;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->lock);
}

/* Queue one op on a stream (handle NULL = default stream). Everything that
 * can fail happens before the op is queued. */
static int enqueue(hm_state *st, void *handle, hm_op tmpl, const char *op, devbuf_error *err) {
  hm_stream *s;
  int rc = resolve(st, handle, &s, op, err);
  if (rc) return rc;
  hm_op *o = malloc(sizeof *o);
  if (o == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "%s: out of memory queuing work", op);
  *o = tmpl;
  push(s, o);
  return DEVBUF_OK;
}

/* ---- lifecycle -------------------------------------------------------- */

/* Cheap on purpose: no thread until the first stream operation. */
static int hm_init(void **state, devbuf_error *err) {
  hm_state *st = calloc(1, sizeof *st);
  if (st == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "init: out of memory");
  pthread_mutex_init(&st->lock, NULL);
  *state = st;
  return DEVBUF_OK;
}

static void hm_shutdown(void *state) {
  hm_state *st = state;
  if (st == NULL) return;
  if (st->default_stream) stream_delete(st->default_stream);
  pthread_mutex_destroy(&st->lock);
  free(st);
}

/* ---- devices ---------------------------------------------------------- */

static int hm_device_count(void *state, int *count, devbuf_error *err) {
  *count = 1;
  return DEVBUF_OK;
}

static int hm_device_props(void *state, int device, devbuf_device_props *p, devbuf_error *err) {
  int rc = check_device(device, "device_props", err);
  if (rc) return rc;
  snprintf(p->name, sizeof p->name, "example host-memory device");
  snprintf(p->vendor, sizeof p->vendor, "devbuf example");
  p->flags = DEVBUF_DEVICE_HOST_ACCESSIBLE | DEVBUF_DEVICE_UNIFIED | DEVBUF_DEVICE_ASYNC;
  p->alloc_alignment = HM_ALIGN;
  p->dlpack_device_type = DEVBUF_DL_CPU; /* it is host memory */
  p->dlpack_device_id = 0;
  return DEVBUF_OK;
}

/* ---- memory ----------------------------------------------------------- */

static int hm_mem_alloc(void *state, int device, size_t size, size_t alignment, void *stream,
                        void **ptr, devbuf_error *err) {
  int rc = check_device(device, "mem_alloc", err);
  if (rc) return rc;
  if (alignment < HM_ALIGN) alignment = HM_ALIGN;
  if (alignment & (alignment - 1))
    return devbuf_error_set(err, DEVBUF_EINVAL, "mem_alloc: alignment %zu is not a power of two",
                            alignment);
  /* Size 0 still gets a unique pointer. Ready at once: nothing to order. */
  if (posix_memalign(ptr, alignment, size ? size : 1) != 0) {
    *ptr = NULL;
    return devbuf_error_set(err, DEVBUF_ENOMEM, "mem_alloc: posix_memalign: cannot allocate %zu bytes",
                            size);
  }
  return DEVBUF_OK;
}

/* Stream-ordered: the memory goes back only after the work queued before it. */
static int hm_mem_free(void *state, int device, void *ptr, void *stream, devbuf_error *err) {
  int rc = check_device(device, "mem_free", err);
  if (rc) return rc;
  if (ptr == NULL) return devbuf_error_set(err, DEVBUF_EINVAL, "mem_free: NULL pointer");
  return enqueue(state, stream, (hm_op){.kind = OP_FREE, .dst = ptr}, "mem_free", err);
}

/* ---- copies: queued, complete after the stream is synchronized -------- */

static int hm_copy_h2d(void *state, int device, void *dst, size_t dst_off, const void *src,
                       size_t n, void *stream, devbuf_error *err) {
  int rc = check_device(device, "copy_h2d", err);
  if (rc) return rc;
  if (n && (dst == NULL || src == NULL))
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_h2d: NULL pointer with %zu bytes", n);
  return enqueue(state, stream, (hm_op){.kind = OP_COPY, .dst = (char *)dst + dst_off, .src = src, .n = n},
                 "copy_h2d", err);
}

static int hm_copy_d2h(void *state, int device, void *dst, const void *src, size_t src_off,
                       size_t n, void *stream, devbuf_error *err) {
  int rc = check_device(device, "copy_d2h", err);
  if (rc) return rc;
  if (n && (dst == NULL || src == NULL))
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2h: NULL pointer with %zu bytes", n);
  return enqueue(state, stream,
                 (hm_op){.kind = OP_COPY, .dst = dst, .src = (const char *)src + src_off, .n = n},
                 "copy_d2h", err);
}

static int hm_copy_d2d(void *state, int device, void *dst, size_t dst_off, const void *src,
                       size_t src_off, size_t n, void *stream, devbuf_error *err) {
  int rc = check_device(device, "copy_d2d", err);
  if (rc) return rc;
  if (n && (dst == NULL || src == NULL))
    return devbuf_error_set(err, DEVBUF_EINVAL, "copy_d2d: NULL pointer with %zu bytes", n);
  return enqueue(state, stream,
                 (hm_op){.kind = OP_COPY, .dst = (char *)dst + dst_off,
                         .src = (const char *)src + src_off, .n = n},
                 "copy_d2d", err);
}

/* ---- streams ---------------------------------------------------------- */

static int hm_stream_create(void *state, int device, void **stream, devbuf_error *err) {
  int rc = check_device(device, "stream_create", err);
  if (rc) return rc;
  hm_stream *s;
  rc = stream_new(&s, "stream_create", err);
  if (rc) return rc;
  *stream = s;
  return DEVBUF_OK;
}

/* Waits for the queued work, then frees the stream. */
static int hm_stream_destroy(void *state, int device, void *stream, devbuf_error *err) {
  int rc = check_device(device, "stream_destroy", err);
  if (rc) return rc;
  if (stream == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "stream_destroy: the default stream (NULL) is not "
                                                "destroyed by the caller");
  hm_stream *s;
  rc = resolve(state, stream, &s, "stream_destroy", err);
  if (rc) return rc;
  stream_delete(s);
  return DEVBUF_OK;
}

static int hm_stream_synchronize(void *state, int device, void *stream, devbuf_error *err) {
  int rc = check_device(device, "stream_synchronize", err);
  if (rc) return rc;
  hm_stream *s;
  rc = resolve(state, stream, &s, "stream_synchronize", err);
  if (rc) return rc;
  pthread_mutex_lock(&s->lock);
  uint64_t target = s->submitted; /* only what was queued before this call */
  while (s->completed < target) pthread_cond_wait(&s->idle, &s->lock);
  pthread_mutex_unlock(&s->lock);
  return DEVBUF_OK;
}

/* ---- events: generation counters -------------------------------------- */

static int hm_event_create(void *state, int device, void **event, devbuf_error *err) {
  int rc = check_device(device, "event_create", err);
  if (rc) return rc;
  hm_event *e = calloc(1, sizeof *e);
  if (e == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "event_create: out of memory");
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->cond, NULL);
  e->magic = HM_EVENT_MAGIC;
  *event = e; /* never recorded: complete */
  return DEVBUF_OK;
}

/* Waits until no queued op still refers to the event, then frees it. */
static int hm_event_destroy(void *state, int device, void *event, devbuf_error *err) {
  int rc = check_event(event, "event_destroy", err);
  if (rc) return rc;
  hm_event *e = event;
  pthread_mutex_lock(&e->lock);
  while (e->done_gen < e->record_gen || e->waiters > 0) pthread_cond_wait(&e->cond, &e->lock);
  e->magic = 0;
  pthread_mutex_unlock(&e->lock);
  pthread_cond_destroy(&e->cond);
  pthread_mutex_destroy(&e->lock);
  free(e);
  return DEVBUF_OK;
}

/* The stream and the op are obtained first, so that once the generation is
 * taken nothing can fail and every generation is eventually completed. */
static int hm_event_record(void *state, int device, void *event, void *stream, devbuf_error *err) {
  int rc = check_device(device, "event_record", err);
  if (!rc) rc = check_event(event, "event_record", err);
  hm_stream *s = NULL;
  if (!rc) rc = resolve(state, stream, &s, "event_record", err);
  if (rc) return rc;
  hm_op *o = malloc(sizeof *o);
  if (o == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "event_record: out of memory");
  hm_event *e = event;
  pthread_mutex_lock(&e->lock);
  *o = (hm_op){.kind = OP_RECORD, .event = e, .gen = ++e->record_gen};
  pthread_mutex_unlock(&e->lock);
  push(s, o);
  return DEVBUF_OK;
}

/* Waits only for the generation current now, i.e. for work already queued:
 * no cycles are possible. */
static int hm_stream_wait_event(void *state, int device, void *stream, void *event,
                                devbuf_error *err) {
  int rc = check_device(device, "stream_wait_event", err);
  if (!rc) rc = check_event(event, "stream_wait_event", err);
  hm_stream *s = NULL;
  if (!rc) rc = resolve(state, stream, &s, "stream_wait_event", err);
  if (rc) return rc;
  hm_op *o = malloc(sizeof *o);
  if (o == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "stream_wait_event: out of memory");
  hm_event *e = event;
  pthread_mutex_lock(&e->lock);
  *o = (hm_op){.kind = OP_WAIT, .event = e, .gen = e->record_gen};
  int pending = e->done_gen < o->gen;
  if (pending) e->waiters++; /* keeps event_destroy from freeing it under the op */
  pthread_mutex_unlock(&e->lock);
  if (!pending) { /* already complete: nothing to wait for */
    free(o);
    return DEVBUF_OK;
  }
  push(s, o);
  return DEVBUF_OK;
}

static int hm_event_synchronize(void *state, int device, void *event, devbuf_error *err) {
  int rc = check_event(event, "event_synchronize", err);
  if (rc) return rc;
  hm_event *e = event;
  pthread_mutex_lock(&e->lock);
  uint64_t gen = e->record_gen;
  while (e->done_gen < gen) pthread_cond_wait(&e->cond, &e->lock);
  pthread_mutex_unlock(&e->lock);
  return DEVBUF_OK;
}

static int hm_event_query(void *state, int device, void *event, devbuf_error *err) {
  int rc = check_event(event, "event_query", err);
  if (rc) return rc;
  hm_event *e = event;
  pthread_mutex_lock(&e->lock);
  int done = e->done_gen >= e->record_gen;
  pthread_mutex_unlock(&e->lock);
  return done ? DEVBUF_OK : DEVBUF_EBUSY;
}

/* ---- the table and the entry symbol ----------------------------------- */

static const char *const hm_identifiers[] = {"example.hostmem", NULL};

/* Optional slots (device_info_*, dtype_namespaces, host_alloc, ...) stay
 * NULL: the runtime then uses the devbuf_device_info layout and malloc. */
static const devbuf_plugin_table hm_table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "hostmem",
    .version = "0.1.0",
    .description = "example out-of-tree plugin: host memory behind asynchronous worker-thread streams",
    .identifiers = hm_identifiers,
    .init = hm_init,
    .shutdown = hm_shutdown,
    .device_count = hm_device_count,
    .device_props = hm_device_props,
    .mem_alloc = hm_mem_alloc,
    .mem_free = hm_mem_free,
    .copy_h2d = hm_copy_h2d,
    .copy_d2h = hm_copy_d2h,
    .copy_d2d = hm_copy_d2d,
    .stream_create = hm_stream_create,
    .stream_destroy = hm_stream_destroy,
    .stream_synchronize = hm_stream_synchronize,
    .event_create = hm_event_create,
    .event_destroy = hm_event_destroy,
    .event_record = hm_event_record,
    .stream_wait_event = hm_stream_wait_event,
    .event_synchronize = hm_event_synchronize,
    .event_query = hm_event_query,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &hm_table; }
