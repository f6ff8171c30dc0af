/* dbp_enter.h: entering Python from a thread that may have no thread state
 * (a DLPack deleter, an Arrow release callback, the dtype trampoline, a
 * libffi closure: C code that any thread of the process may call, at any
 * time, including while the interpreter finalizes or after it is gone).
 * Not installed. Include after <Python.h>.
 *
 *   dbp_home h;                  kept by the owner (the export, the closure):
 *   dbp_home_take(&h)            when the owner is made, GIL held;
 *   dbp_home_drop(&h)            when the owner is done, any thread, with or
 *                                without a thread state, before or after
 *                                finalization;
 *   dbp_entered e;
 *   if (dbp_enter(&h, &e) == 0) { ...Python...; dbp_leave(&e); }
 *   else { the interpreter is finalizing or gone: touch nothing of Python }
 *
 * dbp_enter(NULL, ...) enters the main interpreter (what PyGILState_Ensure
 * always did), for callers that have no owner (the DLPack exchange table).
 *
 * CPython 3.15 and later (PEP 788): a home is a PyInterpreterView of the
 * owner's interpreter, and dbp_enter is PyThreadState_EnsureFromView, which
 * returns NULL, instead of blocking or ending the thread, once that
 * interpreter has begun to finalize or has been deleted. The answer is
 * atomic: if it says yes, the interpreter cannot finalize until dbp_leave.
 *
 * Before 3.15: a home is nothing, and dbp_enter is PyGILState_Ensure, behind
 * a check of Py_IsFinalizing and Py_IsInitialized. That check narrows the
 * window but cannot close it: a thread that passes it just before the main
 * thread begins to finalize then waits for the GIL, and is ended inside
 * PyGILState_Ensure (3.9-3.13: PyThread_exit_thread) or blocks there until
 * the process exits (3.14), with whatever C locks its caller holds. That is
 * the problem PEP 788 solves; only 3.15 closes it.
 *
 * On every version, a thread that already has an attached thread state of
 * the right interpreter uses it (nothing to take, nothing to release), and
 * while the interpreter finalizes, the finalizing thread (the main thread:
 * module teardown freeing a buffer whose plugin calls back into Python with
 * the GIL released) may still enter through PyGILState_Ensure, as before:
 * it cannot wait for itself. Every other thread is refused then.
 *
 * dbp_enter_main_thread is defined once per extension (base/state.c for
 * devbuf._devbuf, pyplugin/base.c for devbuf._pyplugin) and set by
 * dbp_enter_init() in the module's exec. */
#ifndef DBP_ENTER_H
#define DBP_ENTER_H

#ifndef Py_PYTHON_H
#error "include <Python.h> before dbp_enter.h"
#endif

#include "base/dbp_compat.h"

/* PEP 788's API: the headers of 3.15 declare it (Include/pystate.h). A build
 * may set DBP_NO_PEP788 to use the older path on 3.15 too (a comparison). */
#if PY_VERSION_HEX >= 0x030F0000 && !defined(DBP_NO_PEP788)
#define DBP_PEP788 1
#else
#define DBP_PEP788 0
#endif

extern unsigned long dbp_enter_main_thread;

typedef struct dbp_home {
#if DBP_PEP788
  PyInterpreterView *view;   /* NULL: dropped (or never taken) */
  PyInterpreterState *interp; /* the view's interpreter: compared, never dereferenced */
#else
  char unused;
#endif
} dbp_home;

enum { DBP_ENTERED_NOTHING, DBP_ENTERED_GILSTATE, DBP_ENTERED_TOKEN };

typedef struct dbp_entered {
  int how; /* DBP_ENTERED_*: what dbp_leave undoes */
  PyGILState_STATE gil;
#if DBP_PEP788
  PyThreadStateToken *token;
#endif
} dbp_entered;

/* The calling thread's attached thread state, or NULL. Before 3.12,
 * _PyThreadState_UncheckedGet() is the interpreter's current thread state,
 * i.e. the GIL holder's, whichever thread that is: it is this thread's only
 * if its thread id is ours. */
static inline PyThreadState *dbp_enter_current_tstate_(void) {
#if PY_VERSION_HEX >= 0x030D0000
  return PyThreadState_GetUnchecked();
#else
  PyThreadState *ts = _PyThreadState_UncheckedGet();
  return ts != NULL && ts->thread_id == PyThread_get_thread_ident() ? ts : NULL;
#endif
}

/* Record the main thread (the thread that finalizes the interpreter): once,
 * from the module's exec, GIL held. 0 or -1 with an exception. */
static inline int dbp_enter_init(void) {
  if (dbp_enter_main_thread != 0) return 0;
  PyObject *threading = PyImport_ImportModule("threading");
  PyObject *main = threading ? PyObject_CallMethod(threading, "main_thread", NULL) : NULL;
  PyObject *ident = main ? PyObject_GetAttrString(main, "ident") : NULL;
  unsigned long v = ident ? PyLong_AsUnsignedLong(ident) : 0;
  Py_XDECREF(threading);
  Py_XDECREF(main);
  Py_XDECREF(ident);
  if (PyErr_Occurred()) return -1;
  dbp_enter_main_thread = v;
  return 0;
}

/* The owner's home: its interpreter, the current one. GIL held. 0, or -1
 * with MemoryError set. */
static inline int dbp_home_take(dbp_home *h) {
#if DBP_PEP788
  h->interp = PyInterpreterState_Get();
  h->view = PyInterpreterView_FromCurrent();
  if (h->view == NULL) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return -1;
  }
#else
  (void)h;
#endif
  return 0;
}

/* Give the home back. Any thread, thread state or not, also after the
 * interpreter is gone (a view outlives its interpreter); idempotent. */
static inline void dbp_home_drop(dbp_home *h) {
#if DBP_PEP788
  if (h->view != NULL) PyInterpreterView_Close(h->view);
  h->view = NULL;
#else
  (void)h;
#endif
}

/* While the interpreter finalizes: is this the thread that finalizes it
 * (the main thread, while it still has its thread state)? */
static inline int dbp_enter_is_finalizing_thread_(void) {
  return PyThread_get_thread_ident() == dbp_enter_main_thread &&
         PyGILState_GetThisThreadState() != NULL;
}

/* Make the calling thread able to run Python in h's interpreter (NULL: the
 * main one). 0: done, call dbp_leave(e) when finished. -1: the interpreter
 * is finalizing or gone and this thread may not enter it; nothing was
 * taken, no exception is set, and the caller must not touch any Python
 * object (it leaks what it would have released). */
static inline int dbp_enter(const dbp_home *h, dbp_entered *e) {
  e->how = DBP_ENTERED_NOTHING;
  PyThreadState *ts = dbp_enter_current_tstate_();
  if (ts != NULL) {
#if DBP_PEP788
    PyInterpreterState *want = h != NULL ? h->interp : PyInterpreterState_Main();
    if (PyThreadState_GetInterpreter(ts) == want) return 0;
#else
    return 0;
#endif
  }
#if DBP_PEP788
  if (h == NULL || h->view != NULL) { /* a dropped home: a caller bug, refused */
    PyInterpreterView *v = h != NULL ? h->view : PyInterpreterView_FromMain();
    if (v != NULL) {
      e->token = PyThreadState_EnsureFromView(v);
      if (h == NULL) PyInterpreterView_Close(v); /* the token holds its own guard */
      if (e->token != NULL) {
        e->how = DBP_ENTERED_TOKEN;
        return 0;
      }
    }
  }
  /* Refused: finalizing or gone. Only the finalizing thread may go on. */
  if (!dbp_compat_IsFinalizing() || !dbp_enter_is_finalizing_thread_()) return -1;
#else
  if (dbp_compat_IsFinalizing()) {
    if (!dbp_enter_is_finalizing_thread_()) return -1;
  } else if (!Py_IsInitialized()) {
    return -1;
  }
#endif
  e->gil = PyGILState_Ensure();
  e->how = DBP_ENTERED_GILSTATE;
  return 0;
}

/* Undo a successful dbp_enter. */
static inline void dbp_leave(dbp_entered *e) {
  if (e->how == DBP_ENTERED_GILSTATE) PyGILState_Release(e->gil);
#if DBP_PEP788
  else if (e->how == DBP_ENTERED_TOKEN) PyThreadState_Release(e->token);
#endif
  e->how = DBP_ENTERED_NOTHING;
}

#endif /* DBP_ENTER_H */
