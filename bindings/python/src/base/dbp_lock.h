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
 * One exception: DeviceBuffer's common export and release take no lock at
 * all, through four atomic words that the locked paths also respect
 * (objects/buffer.c, "the solo export", says why that is sound).
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
