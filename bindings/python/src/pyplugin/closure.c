/* closure.c: PpClosure, one refcounted object per C function pointer made
 * from a Python callable (the ctypes-callback rule: the object owns the
 * ffi_closure, its ffi_cif, the type array the cif points to, and the
 * callable; nothing else does).
 *
 * The trampoline is the only code C ever enters. It counts the call in the
 * owner's in-flight counter (so an owner being unregistered waits for it),
 * enters Python through base/dbp_enter.h (callers may be threads Python has
 * never seen: PyThreadState_EnsureFromView on the closure's interpreter view
 * from 3.15, PyGILState_Ensure before), saves and restores any exception
 * the thread already had pending, and hands over to the owner's handler,
 * which turns every Python exception into a devbuf status before returning:
 * nothing crosses into C. Once the interpreter is finalizing, threads other
 * than the finalizing one do not enter Python, nor does any thread once it
 * is gone: the `dead` handler answers instead. */
#include "pyplugin.h"

#include <sched.h>
#include <time.h>

_Atomic long pp_live_closures;

/* Owners whose callbacks this thread is inside, innermost last: an owner may
 * not be unregistered from inside its own callback (unregistering waits for
 * calls in flight, which would then wait for itself). */
#define PP_MAX_NESTING 32
static _Thread_local void *tl_owners[PP_MAX_NESTING];
static _Thread_local int tl_depth;

int pp_in_callback_of(void *owner) {
  for (int i = 0; i < tl_depth && i < PP_MAX_NESTING; i++)
    if (tl_owners[i] == owner) return 1;
  return 0;
}

static void trampoline(ffi_cif *cif, void *ret, void **args, void *user_data) {
  (void)cif;
  PpClosure *c = user_data;
  _Atomic long *inflight = c->inflight;
  atomic_fetch_add(inflight, 1);
  /* Once the interpreter finalizes, only the finalizing thread (the main
   * thread, e.g. freeing a buffer during module teardown) may still run
   * Python; any other thread would block forever or be terminated inside
   * PyGILState_Ensure, with the caller's C locks held. dbp_enter refuses
   * those (atomically from 3.15, PEP 788). */
  dbp_entered g;
  if (dbp_enter(&c->home, &g) < 0) {
    c->dead(c, ret, args);
  } else {
    PyObject *st, *sv, *stb;
    PyErr_Fetch(&st, &sv, &stb);
    if (tl_depth < PP_MAX_NESTING) tl_owners[tl_depth] = c->owner;
    tl_depth++;
    c->handler(c, ret, args);
    tl_depth--;
    if (PyErr_Occurred()) /* a handler bug: report it rather than leak it into the caller */
      PyErr_WriteUnraisable(c->callable ? c->callable : Py_None);
    PyErr_Restore(st, sv, stb);
    dbp_leave(&g);
  }
  /* Last touch of anything the owner may free. */
  atomic_fetch_sub(inflight, 1);
}

PpClosure *pp_closure_new(const char *sig, PyObject *callable, pp_handler handler,
                          pp_dead_handler dead, void *owner, _Atomic long *inflight,
                          const char *name) {
  if (!PyCallable_Check(callable)) {
    PyErr_Format(PyExc_TypeError, "%s: %R is not callable", name, callable);
    return NULL;
  }
  PpClosure *c = PyObject_GC_New(PpClosure, &PpClosure_Type);
  if (c == NULL) return NULL;
  c->closure = NULL;
  c->code = NULL;
  c->callable = NULL;
  c->handler = handler;
  c->dead = dead;
  c->owner = owner;
  c->inflight = inflight;
  c->slot = -1;
  snprintf(c->name, sizeof c->name, "%s", name);
  memset(&c->home, 0, sizeof c->home); /* dropping an untaken home is a no-op */
  PyObject_GC_Track(c);
  if (dbp_home_take(&c->home) < 0) {
    Py_DECREF(c);
    return NULL;
  }
  if (pp_sig_parse(sig, &c->sig) < 0) {
    Py_DECREF(c);
    return NULL;
  }
  ffi_status st = ffi_prep_cif(&c->cif, FFI_DEFAULT_ABI, (unsigned)c->sig.nargs, c->sig.rtype,
                               c->sig.atypes);
  if (st != FFI_OK) {
    PyErr_Format(PyExc_RuntimeError, "%s: ffi_prep_cif failed (%d) for signature '%s'", name,
                 (int)st, sig);
    Py_DECREF(c);
    return NULL;
  }
  void *code = NULL;
  c->closure = ffi_closure_alloc(sizeof(ffi_closure), &code);
  if (c->closure == NULL) {
    Py_DECREF(c);
    PyErr_NoMemory();
    return NULL;
  }
  st = ffi_prep_closure_loc(c->closure, &c->cif, trampoline, c, code);
  if (st != FFI_OK) {
    ffi_closure_free(c->closure);
    c->closure = NULL;
    PyErr_Format(PyExc_RuntimeError, "%s: ffi_prep_closure_loc failed (%d)", name, (int)st);
    Py_DECREF(c);
    return NULL;
  }
  /* The executable address is data to libffi; store it as the function
   * pointer type every table slot is converted from. */
  memcpy(&c->code, &code, sizeof code);
  c->callable = Py_NewRef(callable);
  atomic_fetch_add(&pp_live_closures, 1);
  return c;
}

void pp_closure_release(PpClosure *c) {
  if (c->closure != NULL) {
    ffi_closure_free(c->closure);
    c->closure = NULL;
    c->code = NULL;
    atomic_fetch_sub(&pp_live_closures, 1);
  }
  Py_CLEAR(c->callable);
  dbp_home_drop(&c->home); /* no call can be in flight: the closure is gone */
}

void pp_quiesce(_Atomic long *inflight) {
  /* Calls in flight hold no lock we hold; they need the GIL, which the
   * caller has released. Short sleeps: this only waits for calls already
   * inside a trampoline. */
  while (atomic_load(inflight) != 0) {
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  }
}

static int closure_traverse(PpClosure *c, visitproc visit, void *arg) {
  Py_VISIT(c->callable);
  return 0;
}

static int closure_clear(PpClosure *c) {
  /* Only an unarmed closure may lose its callable: an armed one can still
   * be entered from C. Armed closures are owned by a registered table or
   * namespace, which the module's registry keeps reachable, so the
   * collector never asks for them. */
  if (c->closure == NULL) Py_CLEAR(c->callable);
  return 0;
}

static void closure_dealloc(PpClosure *c) {
  PyObject_GC_UnTrack(c);
  pp_closure_release(c);
  PyObject_GC_Del(c);
}

static PyObject *closure_repr(PpClosure *c) {
  return PyUnicode_FromFormat("<devbuf._pyplugin.Closure %s %s at %p>", c->name,
                              c->closure ? "armed" : "released", (void *)c->code);
}

static PyObject *get_address(PpClosure *c, void *unused) {
  void *p;
  memcpy(&p, &c->code, sizeof p);
  return pp_from_handle(p);
}

static PyObject *get_callable(PpClosure *c, void *unused) {
  return Py_NewRef(c->callable ? c->callable : Py_None);
}

static PyObject *get_name(PpClosure *c, void *unused) { return PyUnicode_FromString(c->name); }

static PyGetSetDef closure_getset[] = {
    {"address", (getter)get_address, NULL, "the C function pointer (int), None once released",
     NULL},
    {"callable", (getter)get_callable, NULL, "the Python callable it calls", NULL},
    {"name", (getter)get_name, NULL, "what it implements", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject PpClosure_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf._pyplugin.Closure",
    .tp_basicsize = sizeof(PpClosure),
    .tp_dealloc = (destructor)closure_dealloc,
    .tp_repr = (reprfunc)closure_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A C function pointer made from a Python callable with a libffi closure. "
              "Made by devbuf.plugin; not constructible from Python.",
    .tp_traverse = (traverseproc)closure_traverse,
    .tp_clear = (inquiry)closure_clear,
    .tp_getset = closure_getset,
};
