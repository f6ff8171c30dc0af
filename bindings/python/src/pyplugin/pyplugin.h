/* pyplugin.h: what the files of devbuf._pyplugin share. Not installed.
 *
 * devbuf._pyplugin turns Python callables into C function pointers with
 * libffi closures, so that a plugin table (devbuf/plugin.h), a dtype
 * namespace (devbuf/dtype.h) or a plugin extension function can be written
 * in Python and still be an ordinary C table to the runtime.
 *
 * Layers, bottom to top (scripts/layers.toml); a file calls only its own
 * layer and the layers below:
 *
 *   base.c       errors, exception -> devbuf status mapping, handles and
 *                fields, the int return of a closure, the registry.
 *   sig.c        signature strings ("i(pi*Qe)", docs/plugin-authors.md,
 *                "Extension functions"), ext-function listing and calls.
 *   closure.c    PpClosure: ONE refcounted object owns an ffi_closure, its
 *                ffi_cif, its type array, its parsed signature and the
 *                callable; the generic trampoline enters Python
 *                (base/dbp_enter.h) and counts calls in flight.
 *   table.c      PpTable: a Python object turned into a devbuf_plugin_table.
 *   namespace.c  PpNamespace: a Python dtype namespace interpreter (table.c
 *                and namespace.c, the closures' owners, are one layer).
 *   module.c     module init and functions, the in-process conformance
 *                runner and the benchmark loop.
 *
 * Lifetimes: a registered table or namespace is kept alive by the module's
 * registry (g_registry), whatever Python code drops; its closures are freed
 * only after the runtime has forgotten it and no call is in flight. */
#ifndef PYPLUGIN_H
#define PYPLUGIN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "base/dbp_compat.h"
#include "base/dbp_lock.h"
#include "base/dbp_enter.h"

#include <ffi.h>
#include <stdatomic.h>
#include <stdint.h>

#include "devbuf/runtime.h"

/* ---- signatures (sig.c) ------------------------------------------------------ */

#define PP_SIG_MAX_ARGS 16

typedef struct pp_sig {
  char ret;                      /* return letter, 'v' for void */
  int nargs;                     /* C arguments */
  char letters[PP_SIG_MAX_ARGS]; /* letter of each C argument */
  unsigned char out[PP_SIG_MAX_ARGS]; /* 1: a '*X' out-parameter (the C arg is X*) */
  int err_index;                 /* index of the 'e' argument, or -1 */
  int status_form;               /* ret 'i' with an 'e': the return is a devbuf status */
  int nin;                       /* arguments a Python caller passes */
  int nout;                      /* out-parameters */
  ffi_type *rtype;
  ffi_type *atypes[PP_SIG_MAX_ARGS];
} pp_sig;

/* Parse `text`; 0, or -1 with a ValueError naming the offending byte. */
int pp_sig_parse(const char *text, pp_sig *out);
/* Same, without Python: 0, or -1 with `why` filled. */
int pp_sig_parse_c(const char *text, pp_sig *out, char *why, size_t cap);

/* ---- closures (closure.c) ------------------------------------------------------ */

typedef struct PpClosure PpClosure;
/* Runs with the GIL held. `ret` and `args` are libffi's. */
typedef void (*pp_handler)(PpClosure *c, void *ret, void **args);
/* Runs WITHOUT the GIL when this thread can no longer enter Python (the
 * interpreter is finalizing in another thread, or is gone: dbp_enter
 * refused):
 * must answer without touching Python. */
typedef void (*pp_dead_handler)(PpClosure *c, void *ret, void **args);

struct PpClosure {
  PyObject_HEAD
  ffi_closure *closure; /* NULL once released */
  void (*code)(void);   /* the executable address handed to C */
  ffi_cif cif;
  pp_sig sig;           /* owns the type array the cif points to */
  PyObject *callable;   /* strong; NULL once released */
  pp_handler handler;
  pp_dead_handler dead;
  void *owner;          /* PpTable or PpNamespace (borrowed: it outlives us while armed) */
  _Atomic long *inflight; /* the owner's counter of calls in flight */
  int slot;             /* table slot number, or -1 */
  char name[64];        /* "mem_alloc", "ext:mapping_info", "interpret" */
  dbp_home home;        /* where the trampoline enters Python (base/dbp_enter.h) */
};

extern PyTypeObject PpClosure_Type;
/* A closure with signature `sig` calling `callable` through `handler`. New
 * reference, or NULL with an exception. */
PpClosure *pp_closure_new(const char *sig, PyObject *callable, pp_handler handler,
                          pp_dead_handler dead, void *owner, _Atomic long *inflight,
                          const char *name);
/* Free the ffi closure and drop the callable. Only once C can no longer call it. */
void pp_closure_release(PpClosure *c);
/* Closures alive (armed) in the process, for leak tests. */
extern _Atomic long pp_live_closures;

/* ---- errors and conversions (base.c) ---------------------------------------------- */

/* Write `status` as the closure's int return value. */
void pp_ret_int(void *ret, int status);
/* The registry: key -> PpTable/PpNamespace, a strong reference while registered. */
extern PyObject *g_registry;

/* Turn the pending Python exception into a devbuf status and message:
 * "<op>: <Type>: <text> (<file>:<line>)", or "<op>: <text>" for exceptions
 * carrying an explicit .status (devbuf.plugin.CallbackError, devbuf.Error).
 * Clears the exception. Returns the status. */
int pp_exception_to_error(const char *who, const char *op, devbuf_error *err);
/* Raise the devbuf exception class matching err->code (devbuf.Error,
 * devbuf.PluginError, ...) with err's message, .code and .status. NULL. */
PyObject *pp_raise(const devbuf_error *err);
/* Python int (or None) -> pointer-sized handle. 0, or -1 with an exception. */
int pp_as_handle(PyObject *o, void **out, const char *what);
/* Handle -> None (NULL) or int. New reference. */
PyObject *pp_from_handle(const void *p);
/* Read `name` from a dict, mapping or object: new reference, or NULL without
 * an exception when absent. */
PyObject *pp_get_field(PyObject *obj, const char *name);

/* ---- ext functions (sig.c) ----------------------------------------------------------- */

/* Handler of a Python-defined ext function (closure->sig is the signature). */
void pp_ext_handler(PpClosure *c, void *ret, void **args);
void pp_ext_dead(PpClosure *c, void *ret, void **args);
PyObject *pp_ext_functions(PyObject *self, PyObject *arg);
PyObject *pp_call_ext(PyObject *self, PyObject *args);
PyObject *pp_check_signature(PyObject *self, PyObject *args);
/* Find a loaded plugin by index, name or identifier. 0, or -1 with an exception. */
int pp_find_plugin(PyObject *which, size_t *index, devbuf_plugin_info *info);

/* ---- tables and namespaces ----------------------------------------------------------- */

extern PyTypeObject PpTable_Type;
extern PyTypeObject PpNamespace_Type;
int pp_table_init(PyObject *module);
int pp_namespace_init(PyObject *module);
/* Unregister every table and namespace that can be (at exit). */
PyObject *pp_shutdown_all(PyObject *self, PyObject *unused);
/* 1 if this thread is inside a callback of `owner`. */
int pp_in_callback_of(void *owner);

/* Wait, without the GIL, until *inflight drops to zero. */
void pp_quiesce(_Atomic long *inflight);

#endif /* PYPLUGIN_H */
