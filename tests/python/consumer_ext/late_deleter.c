/* devbuf_late_deleter: a consumer that gives devbuf's exports back from a C
 * thread Python has never seen, DURING and AFTER the interpreter's
 * finalization, for tests/python/test_pep788.py (run in a subprocess).
 * Python.h and libdevbuf's registry API (for interpret()); the DLPack and
 * Arrow structs are the public ABI, declared here.
 *
 *   take_dlpack(capsule, when)   consume a DLPack capsule ("dltensor" or
 *                                "dltensor_versioned"); a thread calls its
 *                                deleter at `when`
 *   take_arrow(capsule, when)    move an "arrow_array" capsule's ArrowArray
 *                                out; a thread calls its release at `when`
 *   interpret(id, when)          a thread interprets "[id$x]" through the
 *                                registry (libdevbuf) at `when`: a namespace
 *                                registered by devbuf.register_dtype_namespace
 *                                runs devbuf's C trampoline
 *   sync_device(spec, when)      opens device `spec` now; a thread calls
 *                                devbuf_stream_synchronize on its default
 *                                stream at `when`: for a plugin written in
 *                                Python (devbuf.plugin), a libffi closure
 *   raw_gilstate(when)           a thread calls PyGILState_Ensure itself at
 *                                `when` (what CPython does, without devbuf)
 *   set_refused_counter(capsule) devbuf._devbuf._dlpack_deleters_refused
 *   arm()                        once, after the takes: the threads start
 *
 * `when`: "during" (the thread waits until Py_IsFinalizing() is true; the
 * finalizing main thread waits for it, at most 5 s, from the dealloc of an
 * object this module holds, which module teardown frees) or "after" (the
 * thread waits for a Py_AtExit callback, which runs once Py_FinalizeEx is
 * done, and which waits for it, at most 5 s).
 *
 * Every outcome is one line on stderr (write(2): no stdio, no Python):
 *   late: <what> <when>: returned refused=<n>    the call came back (n:
 *                                                 devbuf's refused count
 *                                                 after it, -1 unknown)
 *   late: interpret <when>: returned status=<s> <message>   (interpret(),
 *                                                 and sync_device() as "sync")
 *   late: <what> <when>: ended                   the thread was ended inside
 *                                                 the call (never returned)
 *   late: <what> <when>: still blocked after N s  the call has not returned
 *                                                 (N: 5, times DEVBUF_TEST_TIME_SCALE) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devbuf/format.h"
#include "devbuf/runtime.h"

#if PY_VERSION_HEX >= 0x030D0000
#define LATE_IS_FINALIZING() Py_IsFinalizing()
#else
#define LATE_IS_FINALIZING() _Py_IsFinalizing()
#endif

/* ---- the public ABIs ----------------------------------------------------------- */

typedef struct {
  int32_t device_type, device_id;
} late_DLDevice;
typedef struct {
  void *data;
  late_DLDevice device;
  int32_t ndim;
  uint8_t code, bits;
  uint16_t lanes;
  int64_t *shape, *strides;
  uint64_t byte_offset;
} late_DLTensor;
typedef struct late_DLManagedTensor {
  late_DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct late_DLManagedTensor *self);
} late_DLManagedTensor;
typedef struct late_DLManagedTensorVersioned {
  uint32_t major, minor;
  void *manager_ctx;
  void (*deleter)(struct late_DLManagedTensorVersioned *self);
  uint64_t flags;
  late_DLTensor dl_tensor;
} late_DLManagedTensorVersioned;

typedef struct late_ArrowArray {
  int64_t length, null_count, offset, n_buffers, n_children;
  const void **buffers;
  struct late_ArrowArray **children;
  struct late_ArrowArray *dictionary;
  void (*release)(struct late_ArrowArray *);
  void *private_data;
} late_ArrowArray;

/* ---- the threads ------------------------------------------------------------------- */

enum { K_DLPACK, K_DLPACK_V, K_ARROW, K_RAW, K_INTERPRET, K_SYNC };
enum { W_DURING, W_AFTER };
#define MAX_JOBS 16

typedef struct job {
  int kind, when;
  void *obj;            /* the managed tensor, or the moved ArrowArray */
  pthread_t thread;
  int started;
  _Atomic int state;    /* 0 waiting, 1 calling, 2 returned */
  _Atomic long refused; /* devbuf's counter after the call */
  char id[64];          /* K_INTERPRET: the namespace */
  devbuf_device dev;    /* K_SYNC: the device */
  devbuf_error err;     /* K_INTERPRET, K_SYNC: the answer */
  int status;
} job;

static job g_jobs[MAX_JOBS];
static int g_njobs;
static _Atomic long *g_refused; /* devbuf's counter, or NULL */
static _Atomic int g_after;     /* set by the Py_AtExit callback */
static _Atomic int g_ended_key_ok;
static pthread_key_t g_ended_key;

static const char *kind_name(int k) {
  return k == K_DLPACK ? "dlpack" : k == K_DLPACK_V ? "dlpack_versioned"
                                    : k == K_ARROW   ? "arrow"
                                    : k == K_RAW     ? "raw_gilstate"
                                    : k == K_SYNC    ? "sync"
                                                     : "interpret";
}

static void say(const char *line) {
  ssize_t n = write(2, line, strlen(line));
  (void)n;
}

/* A thread ended inside the call (pthread_exit) runs this destructor. */
static void on_thread_end(void *p) {
  job *j = p;
  if (atomic_load(&j->state) == 1) atomic_store(&j->state, 3); /* ended */
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void *run_job(void *p) {
  job *j = p;
  if (atomic_load(&g_ended_key_ok)) pthread_setspecific(g_ended_key, j);
  if (j->when == W_DURING) {
    while (!LATE_IS_FINALIZING()) sleep_ms(1);
  } else {
    while (!atomic_load(&g_after)) sleep_ms(1);
  }
  atomic_store(&j->state, 1);
  switch (j->kind) {
    case K_DLPACK: {
      late_DLManagedTensor *m = j->obj;
      m->deleter(m);
      break;
    }
    case K_DLPACK_V: {
      late_DLManagedTensorVersioned *m = j->obj;
      m->deleter(m);
      break;
    }
    case K_ARROW: {
      late_ArrowArray *a = j->obj;
      a->release(a);
      break;
    }
    case K_RAW: {
      PyGILState_STATE g = PyGILState_Ensure();
      PyGILState_Release(g);
      break;
    }
    case K_INTERPRET: {
      devbuf_dtype_desc desc;
      memset(&desc, 0, sizeof desc);
      devbuf_error_clear(&j->err);
      j->status = devbuf_dtype_interpret(j->id, "x", 1, &desc, &j->err);
      break;
    }
    case K_SYNC:
      devbuf_error_clear(&j->err);
      j->status = devbuf_stream_synchronize(&j->dev, NULL, &j->err);
      break;
  }
  atomic_store(&j->refused, g_refused ? atomic_load(g_refused) : -1);
  atomic_store(&j->state, 2);
  if (atomic_load(&g_ended_key_ok)) pthread_setspecific(g_ended_key, NULL);
  return NULL;
}

/* Wait (at most 5 s, times DEVBUF_TEST_TIME_SCALE on a loaded machine) for
 * the jobs of `when`, and say how each ended. */
static void finish(int when) {
  const char *scale_env = getenv("DEVBUF_TEST_TIME_SCALE");
  int scale = scale_env ? atoi(scale_env) : 1;
  if (scale < 1) scale = 1;
  if (scale > 20) scale = 20;
  for (int i = 0; i < g_njobs; i++) {
    job *j = &g_jobs[i];
    if (j->when != when || !j->started) continue;
    int state = 0;
    for (int t = 0; t < 5000 * scale; t++) {
      state = atomic_load(&j->state);
      if (state >= 2) break;
      sleep_ms(1);
    }
    char line[400];
    const char *w = when == W_DURING ? "during" : "after";
    if (state == 2 && (j->kind == K_INTERPRET || j->kind == K_SYNC))
      snprintf(line, sizeof line, "late: %s %s: returned status=%d %.200s\n", kind_name(j->kind),
               w, j->status, j->err.message);
    else if (state == 2)
      snprintf(line, sizeof line, "late: %s %s: returned refused=%ld\n", kind_name(j->kind), w,
               (long)atomic_load(&j->refused));
    else if (state == 3)
      snprintf(line, sizeof line, "late: %s %s: ended\n", kind_name(j->kind), w);
    else
      snprintf(line, sizeof line, "late: %s %s: still blocked after %d s\n", kind_name(j->kind),
               w, 5 * scale);
    say(line);
    if (state >= 2) pthread_join(j->thread, NULL);
    j->started = 0;
  }
}

static void at_exit(void) {
  atomic_store(&g_after, 1);
  finish(W_AFTER);
}

/* The object whose dealloc, in module teardown (the interpreter finalizing,
 * on the main thread), waits for the "during" jobs. It holds the GIL
 * meanwhile: a deleter that waited for it would show as blocked. */
typedef struct {
  PyObject_HEAD
} Waiter;
static void waiter_dealloc(PyObject *self) {
  say(LATE_IS_FINALIZING() ? "late: waiter: finalizing\n" : "late: waiter: not finalizing\n");
  finish(W_DURING);
  PyObject_Free(self);
}
static PyTypeObject Waiter_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf_late_deleter.Waiter",
    .tp_basicsize = sizeof(Waiter),
    .tp_dealloc = waiter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

/* ---- the functions ----------------------------------------------------------------- */

static int parse_when(const char *s) {
  if (strcmp(s, "during") == 0) return W_DURING;
  if (strcmp(s, "after") == 0) return W_AFTER;
  PyErr_Format(PyExc_ValueError, "when must be 'during' or 'after', not %R", s);
  return -1;
}

static job *add_job(int kind, const char *when_s) {
  int when = parse_when(when_s);
  if (when < 0) return NULL;
  if (g_njobs == MAX_JOBS) {
    PyErr_SetString(PyExc_RuntimeError, "devbuf_late_deleter: too many jobs");
    return NULL;
  }
  job *j = &g_jobs[g_njobs++];
  memset(j, 0, sizeof *j);
  j->kind = kind;
  j->when = when;
  return j;
}

static PyObject *take_dlpack(PyObject *self, PyObject *args) {
  PyObject *cap;
  const char *when;
  if (!PyArg_ParseTuple(args, "Os:take_dlpack", &cap, &when)) return NULL;
  int versioned = PyCapsule_IsValid(cap, "dltensor_versioned");
  if (!versioned && !PyCapsule_IsValid(cap, "dltensor")) {
    PyErr_SetString(PyExc_TypeError, "take_dlpack: not an unconsumed DLPack capsule");
    return NULL;
  }
  job *j = add_job(versioned ? K_DLPACK_V : K_DLPACK, when);
  if (j == NULL) return NULL;
  j->obj = PyCapsule_GetPointer(cap, versioned ? "dltensor_versioned" : "dltensor");
  if (j->obj == NULL ||
      PyCapsule_SetName(cap, versioned ? "used_dltensor_versioned" : "used_dltensor") < 0) {
    g_njobs--;
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyObject *take_arrow(PyObject *self, PyObject *args) {
  PyObject *cap;
  const char *when;
  if (!PyArg_ParseTuple(args, "Os:take_arrow", &cap, &when)) return NULL;
  late_ArrowArray *src = PyCapsule_GetPointer(cap, "arrow_array");
  if (src == NULL) return NULL;
  if (src->release == NULL) {
    PyErr_SetString(PyExc_ValueError, "take_arrow: the ArrowArray is released already");
    return NULL;
  }
  late_ArrowArray *moved = malloc(sizeof *moved);
  if (moved == NULL) return PyErr_NoMemory();
  job *j = add_job(K_ARROW, when);
  if (j == NULL) {
    free(moved);
    return NULL;
  }
  *moved = *src; /* Arrow's move: the capsule keeps a released struct */
  src->release = NULL;
  j->obj = moved; /* leaked: the test process ends */
  Py_RETURN_NONE;
}

static PyObject *raw_gilstate(PyObject *self, PyObject *args) {
  const char *when;
  if (!PyArg_ParseTuple(args, "s:raw_gilstate", &when)) return NULL;
  if (add_job(K_RAW, when) == NULL) return NULL;
  Py_RETURN_NONE;
}

static PyObject *interpret(PyObject *self, PyObject *args) {
  const char *id, *when;
  if (!PyArg_ParseTuple(args, "ss:interpret", &id, &when)) return NULL;
  job *j = add_job(K_INTERPRET, when);
  if (j == NULL) return NULL;
  snprintf(j->id, sizeof j->id, "%s", id);
  Py_RETURN_NONE;
}

static PyObject *sync_device(PyObject *self, PyObject *args) {
  const char *spec, *when;
  if (!PyArg_ParseTuple(args, "ss:sync_device", &spec, &when)) return NULL;
  job *j = add_job(K_SYNC, when);
  if (j == NULL) return NULL;
  devbuf_error err;
  devbuf_error_clear(&err);
  if (devbuf_device_open(spec, &j->dev, &err) != DEVBUF_OK) {
    g_njobs--;
    return PyErr_Format(PyExc_RuntimeError, "sync_device: %s", err.message);
  }
  Py_RETURN_NONE;
}

static PyObject *set_refused_counter(PyObject *self, PyObject *cap) {
  void *p = PyCapsule_GetPointer(cap, "devbuf._devbuf._dlpack_deleters_refused");
  if (p == NULL) return NULL;
  g_refused = p;
  Py_RETURN_NONE;
}

static PyObject *arm(PyObject *self, PyObject *unused) {
  static int armed;
  if (armed) {
    PyErr_SetString(PyExc_RuntimeError, "arm: once per process");
    return NULL;
  }
  armed = 1;
  if (pthread_key_create(&g_ended_key, on_thread_end) == 0) atomic_store(&g_ended_key_ok, 1);
  if (Py_AtExit(at_exit) < 0) {
    PyErr_SetString(PyExc_RuntimeError, "arm: Py_AtExit is full");
    return NULL;
  }
  Waiter *w = PyObject_New(Waiter, &Waiter_Type);
  if (w == NULL || PyObject_SetAttrString(self, "_waiter", (PyObject *)w) < 0) {
    Py_XDECREF(w);
    return NULL;
  }
  Py_DECREF(w);
  for (int i = 0; i < g_njobs; i++) {
    int rc = pthread_create(&g_jobs[i].thread, NULL, run_job, &g_jobs[i]);
    if (rc != 0) return PyErr_Format(PyExc_OSError, "pthread_create: %s", strerror(rc));
    g_jobs[i].started = 1;
  }
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"take_dlpack", take_dlpack, METH_VARARGS, "take_dlpack(capsule, when)"},
    {"take_arrow", take_arrow, METH_VARARGS, "take_arrow(capsule, when)"},
    {"raw_gilstate", raw_gilstate, METH_VARARGS, "raw_gilstate(when)"},
    {"interpret", interpret, METH_VARARGS, "interpret(id, when)"},
    {"sync_device", sync_device, METH_VARARGS, "sync_device(spec, when)"},
    {"set_refused_counter", set_refused_counter, METH_O, "set_refused_counter(capsule)"},
    {"arm", arm, METH_NOARGS, "arm(): start the threads"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "devbuf_late_deleter",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit_devbuf_late_deleter(void) {
  if (PyType_Ready(&Waiter_Type) < 0) return NULL;
  return PyModule_Create(&moddef);
}
