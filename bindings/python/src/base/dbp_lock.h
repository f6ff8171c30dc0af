/* dbp_lock.h: how the extensions lock without the GIL. Not installed.
 * Include after <Python.h> (dbp.h and pyplugin.h do). */
#ifndef DBP_LOCK_H
#define DBP_LOCK_H

#ifndef Py_PYTHON_H
#error "include <Python.h> before dbp_lock.h"
#endif

/* ---- locking without the GIL (free-threaded builds) ----------------------
 * The rule: every function that reads or writes an object's mutable state
 * (export ledgers and counts, freed/released, pins, events, lazily filled
 * device_info, cached members) runs inside that object's critical section,
 * taken at the Python entry point (slot, method, getter) by the wrappers
 * below. CPython suspends a critical section whenever its thread detaches
 * (Py_BEGIN_ALLOW_THREADS, a blocking lock), exactly where the GIL used to
 * be dropped, so the invariants written for the GIL ("state changes only
 * between detaches"; `pins` guards work in flight) hold unchanged, and two
 * objects' sections cannot deadlock. With the GIL these are plain braces.
 * No process-wide lock is taken on an export, release or view path; the
 * few module-wide ones (dbp_mutex below) guard statistics, the staging
 * cache, the Device cache and the Python namespace strings. The C registries
 * below have their own (core/, registry/). */
#if defined(Py_GIL_DISABLED)
#define DBP_BEGIN_LOCKED(op) Py_BEGIN_CRITICAL_SECTION(op)
#define DBP_END_LOCKED() Py_END_CRITICAL_SECTION()
#else
#define DBP_BEGIN_LOCKED(op) {
#define DBP_END_LOCKED() }
#endif
/* A try-lock of an object's own critical-section mutex (free-threaded
 * builds only), for the few hot entry points whose common case is a handful
 * of loads and stores (DeviceBuffer's buffer export and release): on 3.13
 * PyCriticalSection_Begin/End are exported functions that also link the
 * section into the thread state, about as costly as the work they guard.
 *
 *   if (DBP_TRY_LOCK(op)) { ...no call at all...; DBP_UNLOCK(op); }
 *   else: the entry point's ordinary DBP_BEGIN_LOCKED path.
 *
 * Why this is sound (CPython 3.13 and 3.14, Include/cpython/lock.h,
 * critical_section.h, Python/critical_section.c):
 *  - It is the mutex a critical section on `op` takes (op->ob_mutex), taken
 *    the way a critical section's own fast path takes it (one
 *    compare-exchange, 0 -> locked, acquire), so it excludes every
 *    DBP_BEGIN_LOCKED entry point of any thread, and they exclude it.
 *  - A critical section gives its mutex up only when its own thread
 *    detaches (the mutex is then unlocked, so the try-lock may win, exactly
 *    as another thread's critical section may). The code between
 *    DBP_TRY_LOCK and DBP_UNLOCK makes no call: it cannot detach, raise,
 *    allocate, run the GC or any Python code, so it never needs suspending,
 *    and nothing can re-enter `op` on this thread while the mutex is held
 *    outside the thread's list of critical sections (which would deadlock).
 *    Anything that may call out (an error, a wait, an upload) unlocks and
 *    redoes the request on the locked path from the start.
 *  - The try-lock fails whenever the mutex is held, also by this thread's
 *    own enclosing critical section, and whenever waiters are flagged; the
 *    locked path then behaves as before (3.13 suspends the outer section
 *    while it waits; 3.14 sees the mutex held by the top-most section and
 *    does not lock again).
 *  - Unlocking is PyMutex_Unlock (inline: a compare-exchange, release, and
 *    the exported slow path only if a thread parked on the mutex meanwhile,
 *    which it wakes or hands the mutex to), as a critical section's end does. */
#if defined(Py_GIL_DISABLED)
static inline int dbp_try_lock_(PyObject *op) {
  uint8_t unlocked = 0; /* _Py_UNLOCKED; 1 is _Py_LOCKED (cpython/lock.h) */
  return _Py_atomic_compare_exchange_uint8(&op->ob_mutex._bits, &unlocked, 1);
}
static inline int dbp_try_unlock_(PyObject *op) {
  uint8_t locked = 1;
  return _Py_atomic_compare_exchange_uint8(&op->ob_mutex._bits, &locked, 0);
}
#define DBP_TRY_LOCK(op) dbp_try_lock_((PyObject *)(op))
#define DBP_UNLOCK(op) PyMutex_Unlock(&((PyObject *)(op))->ob_mutex)
/* PyMutex_Unlock's inline half alone: 0 if a thread parked meanwhile, and
 * then DBP_UNLOCK must still be called (out of line, where the caller wants
 * no stack frame on its common path). */
#define DBP_TRY_UNLOCK(op) dbp_try_unlock_((PyObject *)(op))
#endif
/* Module-global state that is not an object's (statistics, a cache): a
 * PyMutex without the GIL, nothing with it. Taken only off the hot paths. */
#if defined(Py_GIL_DISABLED)
typedef PyMutex dbp_mutex;
#define DBP_MUTEX_LOCK(m) PyMutex_Lock(m)
#define DBP_MUTEX_UNLOCK(m) PyMutex_Unlock(m)
#else
typedef char dbp_mutex;
#define DBP_MUTEX_LOCK(m) ((void)(m))
#define DBP_MUTEX_UNLOCK(m) ((void)(m))
#endif
/* A value computed once and idempotently (every thread would store the same):
 * relaxed atomics without the GIL, so that the race is defined. */
#if defined(Py_GIL_DISABLED)
#define DBP_LOAD_INT(p) _Py_atomic_load_int_relaxed(p)
#define DBP_STORE_INT(p, v) _Py_atomic_store_int_relaxed((p), (v))
#define DBP_LOAD_PTR(p) _Py_atomic_load_ptr_relaxed(p)
#define DBP_STORE_PTR(p, v) _Py_atomic_store_ptr_relaxed((p), (v))
#else
#define DBP_LOAD_INT(p) (*(p))
#define DBP_STORE_INT(p, v) (void)(*(p) = (v))
#define DBP_LOAD_PTR(p) (*(p))
#define DBP_STORE_PTR(p, v) (void)(*(p) = (v))
#endif
/* `return call;` with `self` locked around the call (call yields `rtype`). */
#define DBP_RETURN_LOCKED(rtype, self, call) \
  do {                                       \
    rtype dbp_r_;                            \
    DBP_BEGIN_LOCKED(self);                  \
    dbp_r_ = (call);                         \
    DBP_END_LOCKED();                        \
    return dbp_r_;                           \
  } while (0)
/* Entry points that lock their object: NAME##_locked(T *, ...) is the body. */
#define DBP_LOCKED_METH(T, name)                                     \
  static PyObject *name(PyObject *self, PyObject *arg) {             \
    DBP_RETURN_LOCKED(PyObject *, self, name##_locked((T *)self, arg)); \
  }
#define DBP_LOCKED_FASTMETH(T, name)                                                     \
  static PyObject *name(PyObject *self, PyObject *const *args, Py_ssize_t nargs,          \
                        PyObject *kwnames) {                                              \
    DBP_RETURN_LOCKED(PyObject *, self, name##_locked((T *)self, args, nargs, kwnames));  \
  }
#define DBP_LOCKED_GETTER(T, name)                                   \
  static PyObject *name(PyObject *self, void *closure) {             \
    DBP_RETURN_LOCKED(PyObject *, self, name##_locked((T *)self, closure)); \
  }
#define DBP_LOCKED_GETBUFFER(T, name)                                        \
  static int name(PyObject *self, Py_buffer *view, int flags) {              \
    DBP_RETURN_LOCKED(int, self, name##_locked((T *)self, view, flags));     \
  }
#define DBP_LOCKED_RELEASEBUFFER(T, name)                  \
  static void name(PyObject *self, Py_buffer *view) {      \
    DBP_BEGIN_LOCKED(self);                                \
    name##_locked((T *)self, view);                        \
    DBP_END_LOCKED();                                      \
  }

#endif /* DBP_LOCK_H */
