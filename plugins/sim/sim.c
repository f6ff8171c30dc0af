/* sim.c: the `devbuf.sim` plugin, devbuf's strict test device.
 *
 * - Memory is not host-accessible: see sim_arena.h.
 * - Streams run asynchronously, in order, each on its own worker thread
 *   (started at the first operation queued on it). The default stream
 *   (NULL) of each device is created lazily and does not synchronize with
 *   other streams.
 * - Events are generation counters: event_record bumps the event's
 *   generation and queues a RECORD op; the event is complete when the op of
 *   the newest generation has run. stream_wait_event queues a WAIT op for
 *   the generation current at the call, so waits only ever point at work
 *   already queued (no cycles, no deadlock).
 * - Streams and events are validated through a registry of live handles,
 *   so a stale or foreign handle is refused without being dereferenced.
 *   Both are reference-counted: ops and in-flight calls hold references, so
 *   destroying one while work still uses it is safe (as in CUDA).
 *
 * Configuration is read from the environment once, at init (see
 * docs/devices/sim.md). No thread is started and no memory is mapped until
 * a device is used. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devbuf/plugin.h"
#include "sim_arena.h"

#define SIM_IDENTIFIER "devbuf.sim"
#define SIM_MAX_DEVICES 64
#define SIM_DEFAULT_MEMORY_MB 1024
#define SIM_MAX_MEMORY_MB (1024 * 1024)
#define SIM_MAX_LATENCY_US 10000000L

/* ---- objects ------------------------------------------------------------- */

typedef struct sim_state sim_state;

/* host_alloc blocks carry a one-page header holding their size, so that the
 * pointer handed out stays page-aligned and host_free can cache by size. */
#define SIM_STAGE_HDR ((size_t)4096)
#define SIM_STAGE_SLOTS 8
#define SIM_STAGE_MIN ((size_t)64 * 1024)
#define SIM_STAGE_MAX_BYTES ((size_t)512 * 1024 * 1024)
typedef struct sim_device sim_device;

typedef struct sim_event {
  int device;
  atomic_int refs;         /* the host's (until event_destroy) + queued ops + calls */
  pthread_mutex_t lock;
  pthread_cond_t cond;     /* broadcast when done_gen grows */
  uint64_t record_gen;     /* generation of the newest event_record */
  uint64_t done_gen;       /* newest generation whose RECORD op has run */
} sim_event;

enum sim_op_kind { OP_H2D, OP_D2H, OP_D2D, OP_FREE, OP_RECORD, OP_WAIT };

typedef struct sim_op {
  struct sim_op *next;
  int kind;
  uint64_t seq;
  void *dst;            /* host or read-write device address */
  const void *src;
  size_t n;
  sim_block *block;     /* OP_FREE */
  sim_event *event;     /* OP_RECORD, OP_WAIT: holds a reference */
  uint64_t gen;
} sim_op;

typedef struct sim_stream {
  sim_device *dev;
  atomic_int refs;         /* the owner's (host or device) + in-flight calls */
  pthread_mutex_t lock;
  pthread_cond_t work;     /* the worker waits here for ops */
  pthread_cond_t done;     /* the host waits here for completion */
  sim_op *head, *tail;
  uint64_t submitted;      /* seq of the last op queued */
  uint64_t completed;      /* seq of the last op finished */
  int has_thread;
  int stop;
  pthread_t thread;
} sim_stream;

struct sim_device {
  sim_state *st;
  int ordinal;
  pthread_mutex_t lock;    /* lazy arena and default stream */
  atomic_int ready;        /* arena mapped */
  sim_arena arena;
  sim_stream *default_stream;
};

enum { REG_STREAM = 1, REG_EVENT = 2, REG_HOST = 3 };
typedef struct reg_slot {
  void *key;               /* NULL: empty; REG_TOMB: deleted */
  int kind;
} reg_slot;
#define REG_TOMB ((void *)(uintptr_t)1)

struct sim_state {
  /* configuration, fixed at init */
  int ndev;
  int config_status;            /* DEVBUF_OK, or why there is no device */
  char config_error[256];
  size_t memory_bytes;
  long latency_us;
  long fail_after;              /* -1: no injection */
  atomic_long alloc_calls;
  sim_device *devs;

  /* live handles */
  pthread_mutex_t reg_lock;
  reg_slot *slots;
  size_t cap, count, tombs;

  /* Freed staging blocks kept for reuse (guarded by reg_lock), as real
   * runtimes cache pinned memory: fresh host memory costs a page fault per
   * page, several times the copy itself. */
  void *stage_cache[SIM_STAGE_SLOTS]; /* block bases (header first), or NULL */
  size_t stage_bytes;                 /* sum of the cached blocks' sizes */
};

/* ---- registry: an open-addressing set of live handles ----------------- */

static size_t reg_hash(const void *p, size_t cap) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x & (cap - 1);
}

static reg_slot *reg_find(sim_state *st, const void *key) {
  if (st->cap == 0 || key == NULL || key == REG_TOMB) return NULL;
  for (size_t i = reg_hash(key, st->cap), k = 0; k < st->cap; k++, i = (i + 1) & (st->cap - 1)) {
    if (st->slots[i].key == NULL) return NULL;
    if (st->slots[i].key == key) return &st->slots[i];
  }
  return NULL;
}

/* Caller holds reg_lock. Returns 0 on success, -1 when out of memory. */
static int reg_insert(sim_state *st, void *key, int kind) {
  if ((st->count + st->tombs + 1) * 2 > st->cap) {
    size_t cap = st->cap ? st->cap : 64;
    while ((st->count + 1) * 4 > cap) cap *= 2; /* at most 1/4 full after a rehash */
    reg_slot *ns = calloc(cap, sizeof *ns);
    if (ns == NULL) return -1;
    for (size_t j = 0; j < st->cap; j++) {
      void *k = st->slots[j].key;
      if (k == NULL || k == REG_TOMB) continue;
      size_t i = reg_hash(k, cap);
      while (ns[i].key != NULL) i = (i + 1) & (cap - 1);
      ns[i] = st->slots[j];
    }
    free(st->slots);
    st->slots = ns;
    st->cap = cap;
    st->tombs = 0;
  }
  size_t i = reg_hash(key, st->cap);
  while (st->slots[i].key != NULL && st->slots[i].key != REG_TOMB) i = (i + 1) & (st->cap - 1);
  if (st->slots[i].key == REG_TOMB) st->tombs--;
  st->slots[i].key = key;
  st->slots[i].kind = kind;
  st->count++;
  return 0;
}

static void reg_remove(sim_state *st, reg_slot *s) {
  s->key = REG_TOMB;
  s->kind = 0;
  st->count--;
  st->tombs++;
}

static const char *kind_name(int kind) {
  switch (kind) {
    case REG_STREAM: return "a sim stream";
    case REG_EVENT: return "a sim event";
    case REG_HOST: return "sim host memory";
    default: return "?";
  }
}

/* ---- configuration --------------------------------------------------------- */

/* Parse env var `name` as an integer in [lo, hi]; unset or empty gives
 * `dflt`. Returns 0, or -1 after writing the reason into st->config_error. */
static int env_long(sim_state *st, const char *name, long lo, long hi, long dflt, long *out) {
  const char *v = secure_getenv(name); /* DEVBUF_* variables: never in secure-execution mode */
  *out = dflt;
  if (v == NULL || *v == '\0') return 0;
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    snprintf(st->config_error, sizeof st->config_error,
             "%s='%.64s' is not an integer in %ld..%ld", name, v, lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

static void read_config(sim_state *st) {
  long ndev = 1, mb = SIM_DEFAULT_MEMORY_MB, lat = 0, fail = -1;
  st->config_status = DEVBUF_OK;
  if (env_long(st, "DEVBUF_SIM_DEVICES", 0, SIM_MAX_DEVICES, 1, &ndev) != 0 ||
      env_long(st, "DEVBUF_SIM_MEMORY_MB", 1, SIM_MAX_MEMORY_MB, SIM_DEFAULT_MEMORY_MB, &mb) != 0 ||
      env_long(st, "DEVBUF_SIM_LATENCY_US", 0, SIM_MAX_LATENCY_US, 0, &lat) != 0 ||
      env_long(st, "DEVBUF_SIM_FAIL_ALLOC_AFTER", 0, LONG_MAX, -1, &fail) != 0) {
    st->config_status = DEVBUF_ENODEV;
    st->ndev = 0;
    return;
  }
  st->ndev = (int)ndev;
  st->memory_bytes = (size_t)mb * 1024 * 1024;
  st->latency_us = lat;
  st->fail_after = fail;
  if (ndev == 0) {
    st->config_status = DEVBUF_ENODEV;
    snprintf(st->config_error, sizeof st->config_error, "DEVBUF_SIM_DEVICES=0");
  }
}

/* ---- devices ----------------------------------------------------------- */

static int check_device(sim_state *st, int device, const char *op, devbuf_error *err) {
  if (st->config_status != DEVBUF_OK)
    return devbuf_error_set(err, st->config_status, "%s: SIM_NO_DEVICE: %s", op,
                            st->config_error);
  if (device < 0 || device >= st->ndev)
    return devbuf_error_set(err, DEVBUF_ENODEV,
                            "%s: SIM_INVALID_DEVICE: device %d does not exist "
                            "(DEVBUF_SIM_DEVICES=%d)", op, device, st->ndev);
  return DEVBUF_OK;
}

/* The device, with its arena mapped (first use maps it). */
static int get_device(sim_state *st, int device, const char *op, sim_device **out,
                      devbuf_error *err) {
  int rc = check_device(st, device, op, err);
  if (rc != DEVBUF_OK) return rc;
  sim_device *d = &st->devs[device];
  if (!atomic_load_explicit(&d->ready, memory_order_acquire)) {
    pthread_mutex_lock(&d->lock);
    if (!atomic_load_explicit(&d->ready, memory_order_relaxed)) {
      rc = sim_arena_open(&d->arena, st->memory_bytes, device, err);
      if (rc == DEVBUF_OK) atomic_store_explicit(&d->ready, 1, memory_order_release);
    }
    pthread_mutex_unlock(&d->lock);
    if (rc != DEVBUF_OK) {
      devbuf_error_prefix(err, op);
      return rc;
    }
  }
  *out = d;
  return DEVBUF_OK;
}

/* ---- streams and their workers ----------------------------------------- */

static void event_put(sim_event *e);

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000L, (us % 1000000L) * 1000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void run_op(sim_stream *s, sim_op *op) {
  long lat = s->dev->st->latency_us;
  switch (op->kind) {
    case OP_H2D:
    case OP_D2H:
    case OP_D2D:
      if (lat > 0) sleep_us(lat);
      if (op->n > 0) memmove(op->dst, op->src, op->n);
      break;
    case OP_FREE:
      sim_arena_release(&s->dev->arena, op->block);
      break;
    case OP_RECORD:
      pthread_mutex_lock(&op->event->lock);
      if (op->gen > op->event->done_gen) op->event->done_gen = op->gen;
      pthread_cond_broadcast(&op->event->cond);
      pthread_mutex_unlock(&op->event->lock);
      break;
    case OP_WAIT:
      pthread_mutex_lock(&op->event->lock);
      while (op->event->done_gen < op->gen) pthread_cond_wait(&op->event->cond, &op->event->lock);
      pthread_mutex_unlock(&op->event->lock);
      break;
  }
  if (op->event != NULL) event_put(op->event);
}

static void *worker_main(void *arg) {
  sim_stream *s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (s->head == NULL && !s->stop) pthread_cond_wait(&s->work, &s->lock);
    sim_op *op = s->head;
    if (op == NULL) break; /* stopping, and drained */
    s->head = op->next;
    if (s->head == NULL) s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    run_op(s, op);
    pthread_mutex_lock(&s->lock);
    s->completed = op->seq;
    pthread_cond_broadcast(&s->done);
    free(op);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static sim_stream *stream_new(sim_device *d) {
  sim_stream *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->dev = d;
  atomic_init(&s->refs, 1);
  if (pthread_mutex_init(&s->lock, NULL) != 0) goto fail0;
  if (pthread_cond_init(&s->work, NULL) != 0) goto fail1;
  if (pthread_cond_init(&s->done, NULL) != 0) goto fail2;
  return s;
fail2:
  pthread_cond_destroy(&s->work);
fail1:
  pthread_mutex_destroy(&s->lock);
fail0:
  free(s);
  return NULL;
}

/* Stop the worker once it has drained the queue, join it, free. */
static void stream_finalize(sim_stream *s) {
  pthread_mutex_lock(&s->lock);
  s->stop = 1;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->lock);
  if (s->has_thread) pthread_join(s->thread, NULL);
  pthread_cond_destroy(&s->done);
  pthread_cond_destroy(&s->work);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

static void stream_put(sim_stream *s) {
  if (atomic_fetch_sub(&s->refs, 1) == 1) stream_finalize(s);
}

/* Start the stream's worker if it has none (caller holds s->lock). */
static int stream_start_locked(sim_stream *s, const char *opname, devbuf_error *err) {
  if (s->has_thread) return DEVBUF_OK;
  /* Workers take no signals: those belong to the host's threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int e = pthread_create(&s->thread, NULL, worker_main, s);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (e != 0)
    return devbuf_error_set(err, DEVBUF_EBACKEND,
                            "%s: SIM_THREAD_ERROR: pthread_create for a stream worker: %s",
                            opname, strerror(e));
  s->has_thread = 1;
  return DEVBUF_OK;
}

/* Queue `op` (caller holds s->lock and has started the worker). */
static void stream_append_locked(sim_stream *s, sim_op *op) {
  op->seq = ++s->submitted;
  op->next = NULL;
  if (s->tail) s->tail->next = op; else s->head = op;
  s->tail = op;
  pthread_cond_signal(&s->work);
}

/* Queue `op` (caller holds s->lock), starting the worker if needed. */
static int stream_push_locked(sim_stream *s, sim_op *op, const char *opname, devbuf_error *err) {
  int rc = stream_start_locked(s, opname, err);
  if (rc == DEVBUF_OK) stream_append_locked(s, op);
  return rc;
}

static int stream_push(sim_stream *s, sim_op *op, const char *opname, devbuf_error *err) {
  pthread_mutex_lock(&s->lock);
  int rc = stream_push_locked(s, op, opname, err);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

static void stream_wait_idle(sim_stream *s) {
  pthread_mutex_lock(&s->lock);
  uint64_t target = s->submitted;
  while (s->completed < target) pthread_cond_wait(&s->done, &s->lock);
  pthread_mutex_unlock(&s->lock);
}

/* Resolve a stream handle for `device` with a reference the caller drops
 * with stream_put. NULL is the default stream: created when `create`, else
 * *out may come back NULL (it has never been used). */
static int get_stream(sim_state *st, sim_device *d, void *handle, int create, const char *op,
                      sim_stream **out, devbuf_error *err) {
  *out = NULL;
  if (handle == NULL) {
    pthread_mutex_lock(&d->lock);
    if (d->default_stream == NULL && create) {
      d->default_stream = stream_new(d);
      if (d->default_stream == NULL) {
        pthread_mutex_unlock(&d->lock);
        return devbuf_error_set(err, DEVBUF_ENOMEM, "%s: out of host memory", op);
      }
    }
    if (d->default_stream != NULL) {
      atomic_fetch_add(&d->default_stream->refs, 1);
      *out = d->default_stream;
    }
    pthread_mutex_unlock(&d->lock);
    return DEVBUF_OK;
  }
  int rc = DEVBUF_OK;
  pthread_mutex_lock(&st->reg_lock);
  reg_slot *slot = reg_find(st, handle);
  if (slot == NULL || slot->kind != REG_STREAM) {
    rc = devbuf_error_set(err, DEVBUF_EINVAL,
                          "%s: SIM_INVALID_HANDLE: stream %p is not a live sim stream%s%s", op,
                          handle, slot ? "; it is " : " (destroyed, or never created here)",
                          slot ? kind_name(slot->kind) : "");
  } else {
    sim_stream *s = handle;
    if (s->dev != d) {
      rc = devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: SIM_INVALID_HANDLE: stream %p belongs to sim device %d, not %d",
                            op, handle, s->dev->ordinal, d->ordinal);
    } else {
      atomic_fetch_add(&s->refs, 1);
      *out = s;
    }
  }
  pthread_mutex_unlock(&st->reg_lock);
  return rc;
}

/* ---- events --------------------------------------------------------------- */

static void event_put(sim_event *e) {
  if (atomic_fetch_sub(&e->refs, 1) == 1) {
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e);
  }
}

/* Resolve an event handle with a reference the caller drops with
 * event_put. `device` < 0 accepts an event of any device. */
static int get_event(sim_state *st, int device, void *handle, const char *op, sim_event **out,
                     devbuf_error *err) {
  int rc = DEVBUF_OK;
  *out = NULL;
  pthread_mutex_lock(&st->reg_lock);
  reg_slot *slot = reg_find(st, handle);
  if (slot == NULL || slot->kind != REG_EVENT) {
    rc = devbuf_error_set(err, DEVBUF_EINVAL,
                          "%s: SIM_INVALID_HANDLE: event %p is not a live sim event%s%s", op,
                          handle, slot ? "; it is " : " (destroyed, or never created here)",
                          slot ? kind_name(slot->kind) : "");
  } else {
    sim_event *e = handle;
    if (device >= 0 && e->device != device) {
      rc = devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: SIM_INVALID_HANDLE: event %p belongs to sim device %d, not %d",
                            op, handle, e->device, device);
    } else {
      atomic_fetch_add(&e->refs, 1);
      *out = e;
    }
  }
  pthread_mutex_unlock(&st->reg_lock);
  return rc;
}

/* ---- the table's functions ----------------------------------------------- */

static int sim_init(void **state, devbuf_error *err) {
  sim_state *st = calloc(1, sizeof *st);
  if (st == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "init: out of host memory");
  read_config(st);
  atomic_init(&st->alloc_calls, 0);
  if (pthread_mutex_init(&st->reg_lock, NULL) != 0) {
    free(st);
    return devbuf_error_set(err, DEVBUF_EINIT, "init: pthread_mutex_init failed");
  }
  if (st->ndev > 0) {
    st->devs = calloc((size_t)st->ndev, sizeof *st->devs);
    if (st->devs == NULL) {
      pthread_mutex_destroy(&st->reg_lock);
      free(st);
      return devbuf_error_set(err, DEVBUF_ENOMEM, "init: out of host memory");
    }
    for (int i = 0; i < st->ndev; i++) {
      st->devs[i].st = st;
      st->devs[i].ordinal = i;
      st->devs[i].arena.fd = -1;
      atomic_init(&st->devs[i].ready, 0);
      pthread_mutex_init(&st->devs[i].lock, NULL);
    }
  }
  *state = st;
  return DEVBUF_OK;
}

static void sim_shutdown(void *state) {
  sim_state *st = state;
  if (st == NULL) return;
  /* Streams first: draining them may still complete events. */
  for (size_t i = 0; i < st->cap; i++)
    if (st->slots[i].key != NULL && st->slots[i].key != REG_TOMB &&
        st->slots[i].kind == REG_STREAM)
      stream_finalize(st->slots[i].key);
  for (int i = 0; i < st->ndev; i++)
    if (st->devs[i].default_stream) stream_finalize(st->devs[i].default_stream);
  for (size_t i = 0; i < st->cap; i++) {
    void *k = st->slots[i].key;
    if (k == NULL || k == REG_TOMB) continue;
    if (st->slots[i].kind == REG_EVENT) {
      sim_event *e = k;
      pthread_cond_destroy(&e->cond);
      pthread_mutex_destroy(&e->lock);
      free(e);
    } else if (st->slots[i].kind == REG_HOST) {
      free((char *)k - SIM_STAGE_HDR);
    }
  }
  for (int i = 0; i < SIM_STAGE_SLOTS; i++) free(st->stage_cache[i]);
  for (int i = 0; i < st->ndev; i++) {
    sim_arena_close(&st->devs[i].arena);
    pthread_mutex_destroy(&st->devs[i].lock);
  }
  free(st->devs);
  free(st->slots);
  pthread_mutex_destroy(&st->reg_lock);
  free(st);
}

static int sim_device_count(void *state, int *count, devbuf_error *err) {
  sim_state *st = state;
  if (count == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "device_count: SIM_INVALID_VALUE: count is NULL");
  *count = 0;
  if (st->config_status != DEVBUF_OK)
    return devbuf_error_set(err, st->config_status, "device_count: SIM_NO_DEVICE: %s",
                            st->config_error);
  *count = st->ndev;
  return DEVBUF_OK;
}

static int sim_device_props(void *state, int device, devbuf_device_props *props,
                            devbuf_error *err) {
  sim_state *st = state;
  int rc = check_device(st, device, "device_props", err);
  if (rc != DEVBUF_OK) return rc;
  if (props == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "device_props: SIM_INVALID_VALUE: props is NULL");
  sim_device *d = &st->devs[device];
  devbuf_device_props p;
  memset(&p, 0, sizeof p);
  p.struct_size = props->struct_size;
  p.flags = DEVBUF_DEVICE_ASYNC; /* never HOST_ACCESSIBLE, never UNIFIED */
  snprintf(p.name, sizeof p.name, "devbuf simulated device %d", device);
  snprintf(p.vendor, sizeof p.vendor, "devbuf");
  p.total_memory = st->memory_bytes;
  p.free_memory = atomic_load_explicit(&d->ready, memory_order_acquire)
                      ? sim_arena_free_bytes(&d->arena) : st->memory_bytes;
  p.alloc_alignment = (uint32_t)SIM_GRANULE;
  p.dlpack_device_type = DEVBUF_DL_EXT_DEV;
  p.dlpack_device_id = device;
  size_t n = props->struct_size < sizeof p ? props->struct_size : sizeof p;
  if (n < sizeof p.struct_size)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "device_props: SIM_INVALID_VALUE: props->struct_size is %u",
                            props->struct_size);
  memcpy(props, &p, n);
  return DEVBUF_OK;
}

static int is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

static int sim_mem_alloc(void *state, int device, size_t size, size_t alignment, void *stream,
                         void **ptr, devbuf_error *err) {
  sim_state *st = state;
  sim_device *d;
  sim_stream *s;
  if (ptr == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "mem_alloc: SIM_INVALID_VALUE: ptr is NULL");
  *ptr = NULL;
  if (alignment != 0 && !is_pow2(alignment))
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "mem_alloc: SIM_INVALID_VALUE: alignment %zu is not a power of two",
                            alignment);
  int rc = get_device(st, device, "mem_alloc", &d, err);
  if (rc != DEVBUF_OK) return rc;
  /* Validate the stream; the allocation itself is immediate, so usable on
   * any stream at once. */
  rc = get_stream(st, d, stream, 0, "mem_alloc", &s, err);
  if (rc != DEVBUF_OK) return rc;
  if (s) stream_put(s);
  long nth = atomic_fetch_add(&st->alloc_calls, 1) + 1;
  if (st->fail_after >= 0 && nth > st->fail_after)
    return devbuf_error_set(err, DEVBUF_ENOMEM,
                            "mem_alloc: SIM_INJECTED_FAILURE: allocation #%ld (%zu bytes, device "
                            "%d) failed on purpose: DEVBUF_SIM_FAIL_ALLOC_AFTER=%ld",
                            nth, size, device, st->fail_after);
  return sim_arena_alloc(&d->arena, size, alignment, device, ptr, err);
}

static int sim_mem_free(void *state, int device, void *ptr, void *stream, devbuf_error *err) {
  sim_state *st = state;
  sim_device *d;
  sim_stream *s;
  sim_block *b;
  int rc = get_device(st, device, "mem_free", &d, err);
  if (rc != DEVBUF_OK) return rc;
  if (ptr == NULL) return DEVBUF_OK; /* as free(NULL) */
  rc = get_stream(st, d, stream, 0, "mem_free", &s, err);
  if (rc != DEVBUF_OK) return rc;
  rc = sim_arena_begin_free(&d->arena, ptr, device, &b, err);
  if (rc != DEVBUF_OK) {
    if (s) stream_put(s);
    return rc;
  }
  if (s == NULL) { /* a default stream never used: nothing to wait for */
    sim_arena_release(&d->arena, b);
    return DEVBUF_OK;
  }
  pthread_mutex_lock(&s->lock);
  if (s->completed == s->submitted) {
    /* Idle stream: release now, so no worker is needed. */
    sim_arena_release(&d->arena, b);
  } else {
    sim_op *op = calloc(1, sizeof *op);
    if (op != NULL) {
      op->kind = OP_FREE;
      op->block = b;
      if (stream_push_locked(s, op, "mem_free", err) != DEVBUF_OK) {
        free(op);
        op = NULL;
      }
    }
    if (op == NULL) {
      /* Cannot queue it: wait for the stream instead, then release. */
      uint64_t target = s->submitted;
      while (s->completed < target) pthread_cond_wait(&s->done, &s->lock);
      sim_arena_release(&d->arena, b);
    }
  }
  pthread_mutex_unlock(&s->lock);
  stream_put(s);
  return DEVBUF_OK;
}

/* Resolve a device range for a copy: `ptr` + `offset`, `n` bytes, inside a
 * live allocation of `d`. *rw receives the plugin's read-write address. */
static int resolve_range(sim_device *d, const char *op, const char *role, const void *ptr,
                         size_t offset, size_t n, unsigned char **rw, devbuf_error *err) {
  const unsigned char *start;
  size_t size;
  int r = sim_arena_resolve(&d->arena, ptr, &start, &size);
  if (r == SIM_RESOLVE_NOT_FOUND)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: SIM_INVALID_POINTER: %s %p is not inside a live allocation of "
                            "sim device %d", op, role, ptr, d->ordinal);
  if (r == SIM_RESOLVE_FREED)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: SIM_INVALID_POINTER: %s %p is in the allocation at %p of sim "
                            "device %d, which was freed", op, role, ptr, (const void *)start,
                            d->ordinal);
  size_t delta = (size_t)((const unsigned char *)ptr - start);
  if (offset > size - delta || n > size - delta - offset)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: SIM_OUT_OF_BOUNDS: %s %p + offset %zu + %zu bytes overruns its "
                            "allocation (%zu bytes at %p, sim device %d)", op, role, ptr, offset,
                            n, size, (const void *)start, d->ordinal);
  *rw = sim_arena_rw(&d->arena, ptr) + offset;
  return DEVBUF_OK;
}

/* A host range must be real host memory: a sim device address there would
 * fault inside a worker thread, so refuse it here. */
static int check_host_range(sim_state *st, const char *op, const char *role, const void *p,
                            size_t n, devbuf_error *err) {
  if (n > 0 && p == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: SIM_INVALID_VALUE: %s is NULL (%zu bytes)",
                            op, role, n);
  for (int i = 0; i < st->ndev; i++) {
    sim_device *d = &st->devs[i];
    if (n > 0 && atomic_load_explicit(&d->ready, memory_order_acquire) &&
        sim_arena_overlaps(&d->arena, p, n))
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "%s: SIM_INVALID_POINTER: %s %p is an address of sim device %d, "
                              "not host memory", op, role, p, i);
  }
  return DEVBUF_OK;
}

static int submit_copy(sim_state *st, sim_device *d, void *stream, int kind, void *dst,
                       const void *src, size_t n, const char *opname, devbuf_error *err) {
  sim_stream *s;
  int rc = get_stream(st, d, stream, n > 0, opname, &s, err);
  if (rc != DEVBUF_OK || n == 0) {
    if (s) stream_put(s);
    return rc;
  }
  sim_op *op = calloc(1, sizeof *op);
  if (op == NULL) {
    stream_put(s);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "%s: out of host memory", opname);
  }
  op->kind = kind;
  op->dst = dst;
  op->src = src;
  op->n = n;
  rc = stream_push(s, op, opname, err);
  if (rc != DEVBUF_OK) free(op);
  stream_put(s);
  return rc;
}

static int sim_copy_h2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                        size_t nbytes, void *stream, devbuf_error *err) {
  sim_state *st = state;
  sim_device *d;
  unsigned char *rw;
  int rc = get_device(st, device, "copy_h2d", &d, err);
  if (rc == DEVBUF_OK) rc = check_host_range(st, "copy_h2d", "source", src, nbytes, err);
  if (rc == DEVBUF_OK)
    rc = resolve_range(d, "copy_h2d", "destination", dst, dst_offset, nbytes, &rw, err);
  if (rc == DEVBUF_OK)
    rc = submit_copy(st, d, stream, OP_H2D, rw, src, nbytes, "copy_h2d", err);
  return rc;
}

static int sim_copy_d2h(void *state, int device, void *dst, const void *src, size_t src_offset,
                        size_t nbytes, void *stream, devbuf_error *err) {
  sim_state *st = state;
  sim_device *d;
  unsigned char *rw;
  int rc = get_device(st, device, "copy_d2h", &d, err);
  if (rc == DEVBUF_OK) rc = check_host_range(st, "copy_d2h", "destination", dst, nbytes, err);
  if (rc == DEVBUF_OK)
    rc = resolve_range(d, "copy_d2h", "source", src, src_offset, nbytes, &rw, err);
  if (rc == DEVBUF_OK)
    rc = submit_copy(st, d, stream, OP_D2H, dst, rw, nbytes, "copy_d2h", err);
  return rc;
}

static int sim_copy_d2d(void *state, int device, void *dst, size_t dst_offset, const void *src,
                        size_t src_offset, size_t nbytes, void *stream, devbuf_error *err) {
  sim_state *st = state;
  sim_device *d;
  unsigned char *rwd, *rws;
  int rc = get_device(st, device, "copy_d2d", &d, err);
  if (rc == DEVBUF_OK)
    rc = resolve_range(d, "copy_d2d", "destination", dst, dst_offset, nbytes, &rwd, err);
  if (rc == DEVBUF_OK)
    rc = resolve_range(d, "copy_d2d", "source", src, src_offset, nbytes, &rws, err);
  if (rc == DEVBUF_OK)
    rc = submit_copy(st, d, stream, OP_D2D, rwd, rws, nbytes, "copy_d2d", err);
  return rc;
}

static int sim_stream_create(void *state, int device, void **stream, devbuf_error *err) {
  sim_state *st = state;
  int rc = check_device(st, device, "stream_create", err);
  if (rc != DEVBUF_OK) return rc;
  if (stream == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "stream_create: SIM_INVALID_VALUE: stream is NULL");
  *stream = NULL;
  sim_stream *s = stream_new(&st->devs[device]);
  if (s == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "stream_create: out of host memory");
  pthread_mutex_lock(&st->reg_lock);
  int bad = reg_insert(st, s, REG_STREAM);
  pthread_mutex_unlock(&st->reg_lock);
  if (bad) {
    stream_finalize(s);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "stream_create: out of host memory");
  }
  *stream = s;
  return DEVBUF_OK;
}

static int sim_stream_destroy(void *state, int device, void *stream, devbuf_error *err) {
  sim_state *st = state;
  int rc = check_device(st, device, "stream_destroy", err);
  if (rc != DEVBUF_OK) return rc;
  if (stream == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "stream_destroy: SIM_INVALID_HANDLE: the default stream (NULL) "
                            "cannot be destroyed");
  sim_stream *s = NULL;
  pthread_mutex_lock(&st->reg_lock);
  reg_slot *slot = reg_find(st, stream);
  if (slot == NULL || slot->kind != REG_STREAM) {
    rc = devbuf_error_set(err, DEVBUF_EINVAL,
                          "stream_destroy: SIM_INVALID_HANDLE: stream %p is not a live sim "
                          "stream (destroyed twice, or never created here)", stream);
  } else if (((sim_stream *)stream)->dev->ordinal != device) {
    rc = devbuf_error_set(err, DEVBUF_EINVAL,
                          "stream_destroy: SIM_INVALID_HANDLE: stream %p belongs to sim device "
                          "%d, not %d", stream, ((sim_stream *)stream)->dev->ordinal, device);
  } else {
    s = stream;
    reg_remove(st, slot); /* the registry's reference is now ours */
  }
  pthread_mutex_unlock(&st->reg_lock);
  if (s == NULL) return rc;
  stream_wait_idle(s); /* destroying a stream drains it first */
  stream_put(s);
  return DEVBUF_OK;
}

static int sim_stream_synchronize(void *state, int device, void *stream, devbuf_error *err) {
  sim_state *st = state;
  sim_stream *s;
  int rc = check_device(st, device, "stream_synchronize", err);
  if (rc != DEVBUF_OK) return rc;
  rc = get_stream(st, &st->devs[device], stream, 0, "stream_synchronize", &s, err);
  if (rc != DEVBUF_OK || s == NULL) return rc;
  stream_wait_idle(s);
  stream_put(s);
  return DEVBUF_OK;
}

static int sim_event_create(void *state, int device, void **event, devbuf_error *err) {
  sim_state *st = state;
  int rc = check_device(st, device, "event_create", err);
  if (rc != DEVBUF_OK) return rc;
  if (event == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "event_create: SIM_INVALID_VALUE: event is NULL");
  *event = NULL;
  sim_event *e = calloc(1, sizeof *e);
  if (e == NULL) return devbuf_error_set(err, DEVBUF_ENOMEM, "event_create: out of host memory");
  e->device = device;
  atomic_init(&e->refs, 1);
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->cond, NULL);
  pthread_mutex_lock(&st->reg_lock);
  int bad = reg_insert(st, e, REG_EVENT);
  pthread_mutex_unlock(&st->reg_lock);
  if (bad) {
    event_put(e);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "event_create: out of host memory");
  }
  *event = e;
  return DEVBUF_OK;
}

static int sim_event_destroy(void *state, int device, void *event, devbuf_error *err) {
  sim_state *st = state;
  int rc = check_device(st, device, "event_destroy", err);
  if (rc != DEVBUF_OK) return rc;
  sim_event *e = NULL;
  pthread_mutex_lock(&st->reg_lock);
  reg_slot *slot = reg_find(st, event);
  if (slot == NULL || slot->kind != REG_EVENT) {
    rc = devbuf_error_set(err, DEVBUF_EINVAL,
                          "event_destroy: SIM_INVALID_HANDLE: event %p is not a live sim event "
                          "(destroyed twice, or never created here)", event);
  } else if (((sim_event *)event)->device != device) {
    rc = devbuf_error_set(err, DEVBUF_EINVAL,
                          "event_destroy: SIM_INVALID_HANDLE: event %p belongs to sim device %d, "
                          "not %d", event, ((sim_event *)event)->device, device);
  } else {
    e = event;
    reg_remove(st, slot);
  }
  pthread_mutex_unlock(&st->reg_lock);
  if (e == NULL) return rc;
  /* Queued ops keep their own references: the event goes when they are done. */
  event_put(e);
  return DEVBUF_OK;
}

static int sim_event_record(void *state, int device, void *event, void *stream,
                            devbuf_error *err) {
  sim_state *st = state;
  sim_event *e;
  sim_stream *s;
  int rc = check_device(st, device, "event_record", err);
  if (rc != DEVBUF_OK) return rc;
  rc = get_event(st, device, event, "event_record", &e, err);
  if (rc != DEVBUF_OK) return rc;
  rc = get_stream(st, &st->devs[device], stream, 1, "event_record", &s, err);
  if (rc != DEVBUF_OK) {
    event_put(e);
    return rc;
  }
  sim_op *op = calloc(1, sizeof *op);
  if (op == NULL) {
    stream_put(s);
    event_put(e);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "event_record: out of host memory");
  }
  op->kind = OP_RECORD;
  op->event = e; /* the op takes over our reference */
  /* The generation is taken under the stream lock once the worker exists,
   * so every generation has its op queued, in generation order. */
  pthread_mutex_lock(&s->lock);
  rc = stream_start_locked(s, "event_record", err);
  if (rc == DEVBUF_OK) {
    pthread_mutex_lock(&e->lock);
    op->gen = ++e->record_gen;
    pthread_mutex_unlock(&e->lock);
    stream_append_locked(s, op);
  }
  pthread_mutex_unlock(&s->lock);
  if (rc != DEVBUF_OK) {
    free(op);
    event_put(e);
  }
  stream_put(s);
  return rc;
}

static int sim_stream_wait_event(void *state, int device, void *stream, void *event,
                                 devbuf_error *err) {
  sim_state *st = state;
  sim_event *e;
  sim_stream *s;
  int rc = check_device(st, device, "stream_wait_event", err);
  if (rc != DEVBUF_OK) return rc;
  /* An event of another sim device is fine: all of them share the host. */
  rc = get_event(st, -1, event, "stream_wait_event", &e, err);
  if (rc != DEVBUF_OK) return rc;
  pthread_mutex_lock(&e->lock);
  uint64_t gen = e->record_gen;
  int done = e->done_gen >= gen;
  pthread_mutex_unlock(&e->lock);
  if (done) { /* nothing to wait for; still validate the stream */
    event_put(e);
    rc = get_stream(st, &st->devs[device], stream, 0, "stream_wait_event", &s, err);
    if (s) stream_put(s);
    return rc;
  }
  rc = get_stream(st, &st->devs[device], stream, 1, "stream_wait_event", &s, err);
  if (rc != DEVBUF_OK) {
    event_put(e);
    return rc;
  }
  sim_op *op = calloc(1, sizeof *op);
  if (op == NULL) {
    rc = devbuf_error_set(err, DEVBUF_ENOMEM, "stream_wait_event: out of host memory");
  } else {
    op->kind = OP_WAIT;
    op->event = e;
    op->gen = gen;
    rc = stream_push(s, op, "stream_wait_event", err);
    if (rc != DEVBUF_OK) free(op);
  }
  if (rc != DEVBUF_OK) event_put(e);
  stream_put(s);
  return rc;
}

static int sim_event_synchronize(void *state, int device, void *event, devbuf_error *err) {
  sim_state *st = state;
  sim_event *e;
  int rc = check_device(st, device, "event_synchronize", err);
  if (rc != DEVBUF_OK) return rc;
  rc = get_event(st, device, event, "event_synchronize", &e, err);
  if (rc != DEVBUF_OK) return rc;
  pthread_mutex_lock(&e->lock);
  uint64_t target = e->record_gen;
  while (e->done_gen < target) pthread_cond_wait(&e->cond, &e->lock);
  pthread_mutex_unlock(&e->lock);
  event_put(e);
  return DEVBUF_OK;
}

static int sim_event_query(void *state, int device, void *event, devbuf_error *err) {
  sim_state *st = state;
  sim_event *e;
  int rc = check_device(st, device, "event_query", err);
  if (rc != DEVBUF_OK) return rc;
  rc = get_event(st, device, event, "event_query", &e, err);
  if (rc != DEVBUF_OK) return rc;
  pthread_mutex_lock(&e->lock);
  int done = e->done_gen >= e->record_gen;
  pthread_mutex_unlock(&e->lock);
  event_put(e);
  if (!done)
    return devbuf_error_set(err, DEVBUF_EBUSY, "event_query: SIM_NOT_READY: event %p", event);
  return DEVBUF_OK;
}

/* ---- device_info ---------------------------------------------------------- */

static int check_identifier(const char *identifier, const char *op, devbuf_error *err) {
  if (identifier == NULL || strcmp(identifier, SIM_IDENTIFIER) != 0)
    return devbuf_error_set(err, DEVBUF_ENOTFOUND,
                            "%s: SIM_INVALID_VALUE: identifier '%.80s' is not implemented by "
                            "the sim plugin (only '" SIM_IDENTIFIER "')", op,
                            identifier ? identifier : "(null)");
  return DEVBUF_OK;
}

static int sim_device_info_export(void *state, const char *identifier, int device, void *event,
                                  void *stream, uint32_t flags, void *out, size_t capacity,
                                  size_t *size, devbuf_error *err) {
  sim_state *st = state;
  const char *op = "device_info_export";
  int rc = check_identifier(identifier, op, err);
  if (rc == DEVBUF_OK) rc = check_device(st, device, op, err);
  if (rc != DEVBUF_OK) return rc;
  if (out == NULL || size == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: SIM_INVALID_VALUE: %s is NULL", op,
                            out == NULL ? "out" : "size");
  if (capacity < sizeof(devbuf_device_info))
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: SIM_INVALID_VALUE: capacity %zu < %zu bytes of devbuf_device_info",
                            op, capacity, sizeof(devbuf_device_info));
  if (flags & ~(uint32_t)DEVBUF_DEVICE_INFO_READONLY)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: SIM_INVALID_VALUE: flags 0x%x: sim memory is never "
                            "host-accessible; only DEVBUF_DEVICE_INFO_READONLY is allowed",
                            op, flags);
  if (event != NULL) {
    sim_event *e;
    rc = get_event(st, device, event, op, &e, err);
    if (rc != DEVBUF_OK) return rc;
    event_put(e);
  }
  if (stream != NULL) {
    sim_stream *s;
    rc = get_stream(st, &st->devs[device], stream, 0, op, &s, err);
    if (rc != DEVBUF_OK) return rc;
    stream_put(s);
  }
  devbuf_device_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = (uint32_t)sizeof info;
  info.version = DEVBUF_DEVICE_INFO_VERSION;
  info.device_ordinal = device;
  info.flags = flags;
  info.event = event;
  info.stream = stream;
  memcpy(out, &info, sizeof info);
  *size = sizeof info;
  return DEVBUF_OK;
}

static int sim_device_info_import(void *state, const char *identifier, const void *info,
                                  devbuf_device_info_desc *out, devbuf_error *err) {
  sim_state *st = state;
  const char *op = "device_info_import";
  int rc = check_identifier(identifier, op, err);
  if (rc != DEVBUF_OK) return rc;
  if (info == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: SIM_INVALID_VALUE: device_info is NULL", op);
  if (out == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: SIM_INVALID_VALUE: out is NULL", op);
  devbuf_device_info in;
  memcpy(&in.struct_size, info, sizeof in.struct_size);
  if (in.struct_size < sizeof in)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: SIM_INVALID_VALUE: struct_size %u is smaller than the %zu bytes "
                            "of devbuf_device_info v1", op, in.struct_size, sizeof in);
  memcpy(&in, info, sizeof in); /* ignore what a newer writer appended */
  if (in.version != DEVBUF_DEVICE_INFO_VERSION)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: SIM_INVALID_VALUE: version %u, expected %d", op, in.version,
                            DEVBUF_DEVICE_INFO_VERSION);
  if (in.reserved0 != 0)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: SIM_INVALID_VALUE: reserved0 is 0x%x, must be zero", op,
                            in.reserved0);
  for (int i = 0; i < 6; i++)
    if (in.reserved[i] != 0)
      return devbuf_error_set(err, DEVBUF_EINVAL,
                              "%s: SIM_INVALID_VALUE: reserved[%d] is 0x%llx, must be zero", op, i,
                              (unsigned long long)in.reserved[i]);
  if (st->config_status != DEVBUF_OK)
    return devbuf_error_set(err, st->config_status, "%s: SIM_NO_DEVICE: %s", op,
                            st->config_error);
  if (in.device_ordinal < 0 || in.device_ordinal >= st->ndev)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: SIM_INVALID_DEVICE: device_ordinal %d out of range (%d sim "
                            "device%s)", op, in.device_ordinal, st->ndev, st->ndev == 1 ? "" : "s");
  if (in.flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "%s: SIM_INVALID_VALUE: flags claim HOST_ACCESSIBLE, but sim memory "
                            "never is", op);
  if (in.flags & ~(uint32_t)DEVBUF_DEVICE_INFO_READONLY)
    return devbuf_error_set(err, DEVBUF_EINVAL, "%s: SIM_INVALID_VALUE: unknown flags 0x%x", op,
                            in.flags & ~(uint32_t)DEVBUF_DEVICE_INFO_READONLY);
  if (in.event != NULL) {
    sim_event *e;
    rc = get_event(st, in.device_ordinal, in.event, op, &e, err);
    if (rc != DEVBUF_OK) return rc;
    event_put(e);
  }
  if (in.stream != NULL) {
    sim_stream *s;
    rc = get_stream(st, &st->devs[in.device_ordinal], in.stream, 0, op, &s, err);
    if (rc != DEVBUF_OK) return rc;
    stream_put(s);
  }
  devbuf_device_info_desc desc;
  memset(&desc, 0, sizeof desc);
  size_t n = out->struct_size == 0 || out->struct_size > sizeof desc ? sizeof desc
                                                                     : out->struct_size;
  desc.struct_size = (uint32_t)n;
  desc.flags = in.flags;
  desc.device_ordinal = in.device_ordinal;
  desc.event = in.event;
  desc.stream = in.stream;
  memcpy(out, &desc, n);
  return DEVBUF_OK;
}

/* ---- host staging memory ------------------------------------------------- */

static int sim_host_alloc(void *state, int device, size_t size, void **ptr, devbuf_error *err) {
  sim_state *st = state;
  int rc = check_device(st, device, "host_alloc", err);
  if (rc != DEVBUF_OK) return rc;
  if (ptr == NULL)
    return devbuf_error_set(err, DEVBUF_EINVAL, "host_alloc: SIM_INVALID_VALUE: ptr is NULL");
  *ptr = NULL;
  if (size > SIZE_MAX - 2 * SIM_STAGE_HDR)
    return devbuf_error_set(err, DEVBUF_ENOMEM, "host_alloc: out of host memory (%zu bytes)", size);
  size_t rounded = (size + SIM_STAGE_HDR - 1) / SIM_STAGE_HDR * SIM_STAGE_HDR;
  if (rounded == 0) rounded = SIM_STAGE_HDR;
  void *base = NULL;
  pthread_mutex_lock(&st->reg_lock);
  for (int i = 0; i < SIM_STAGE_SLOTS && base == NULL; i++) {
    if (st->stage_cache[i] != NULL && *(size_t *)st->stage_cache[i] == rounded) {
      base = st->stage_cache[i];
      st->stage_cache[i] = NULL;
      st->stage_bytes -= rounded;
    }
  }
  pthread_mutex_unlock(&st->reg_lock);
  if (base == NULL) {
    if (posix_memalign(&base, SIM_STAGE_HDR, rounded + SIM_STAGE_HDR) != 0)
      return devbuf_error_set(err, DEVBUF_ENOMEM, "host_alloc: out of host memory (%zu bytes)",
                              size);
    *(size_t *)base = rounded;
  }
  void *p = (char *)base + SIM_STAGE_HDR;
  pthread_mutex_lock(&st->reg_lock);
  int bad = reg_insert(st, p, REG_HOST);
  pthread_mutex_unlock(&st->reg_lock);
  if (bad) {
    free(base);
    return devbuf_error_set(err, DEVBUF_ENOMEM, "host_alloc: out of host memory");
  }
  *ptr = p;
  return DEVBUF_OK;
}

static int sim_host_free(void *state, int device, void *ptr, devbuf_error *err) {
  sim_state *st = state;
  int rc = check_device(st, device, "host_free", err);
  if (rc != DEVBUF_OK) return rc;
  if (ptr == NULL) return DEVBUF_OK;
  void *base = NULL;
  pthread_mutex_lock(&st->reg_lock);
  reg_slot *slot = reg_find(st, ptr);
  int ok = slot != NULL && slot->kind == REG_HOST;
  if (ok) {
    reg_remove(st, slot);
    base = (char *)ptr - SIM_STAGE_HDR; /* only now known to be ours */
    size_t size = *(size_t *)base;
    if (size >= SIM_STAGE_MIN && st->stage_bytes + size <= SIM_STAGE_MAX_BYTES) {
      for (int i = 0; i < SIM_STAGE_SLOTS; i++) {
        if (st->stage_cache[i] == NULL) {
          st->stage_cache[i] = base;
          st->stage_bytes += size;
          base = NULL; /* kept for reuse */
          break;
        }
      }
    }
  }
  pthread_mutex_unlock(&st->reg_lock);
  if (!ok)
    return devbuf_error_set(err, DEVBUF_EINVAL,
                            "host_free: SIM_INVALID_POINTER: %p is not live sim host memory "
                            "(never allocated by host_alloc, or already freed)", ptr);
  free(base);
  return DEVBUF_OK;
}

/* ---- the table ---------------------------------------------------------------- */

static const char *const sim_identifiers[] = {SIM_IDENTIFIER, NULL};

static const devbuf_plugin_table sim_table = {
    .struct_size = sizeof(devbuf_plugin_table),
    .abi_major = DEVBUF_ABI_MAJOR,
    .abi_minor = DEVBUF_ABI_MINOR,
    .name = "sim",
    .version = "0.1.0",
    .description = "simulated device: memory the host cannot touch, asynchronous streams",
    .identifiers = sim_identifiers,
    .init = sim_init,
    .shutdown = sim_shutdown,
    .device_count = sim_device_count,
    .device_props = sim_device_props,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .copy_h2d = sim_copy_h2d,
    .copy_d2h = sim_copy_d2h,
    .copy_d2d = sim_copy_d2d,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .stream_synchronize = sim_stream_synchronize,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .stream_wait_event = sim_stream_wait_event,
    .event_synchronize = sim_event_synchronize,
    .event_query = sim_event_query,
    .device_info_export = sim_device_info_export,
    .device_info_import = sim_device_info_import,
    .dtype_namespaces = NULL,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .ext_functions = NULL,
    .ext_function_count = 0,
};

DEVBUF_PLUGIN_EXPORT const devbuf_plugin_table *devbuf_plugin_entry(void) { return &sim_table; }
