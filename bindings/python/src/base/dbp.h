/* dbp.h: the base layer of devbuf._devbuf, what every other layer may use.
 * Not installed.
 *
 * base/ holds errors.c (the exception hierarchy), state.c (per-interpreter
 * state), helpers.c (small layout helpers), device.c (devbuf.Device),
 * format.c (the format engine and Python dtype namespaces) and layout.c
 * (the layout invariant). Each layer above has its own folder and header,
 * bottom to top: desc/ (the one import description), readers/ (one reader
 * per protocol), route/ (the route chooser), copies/, objects/ (DeviceBuffer,
 * DeviceView, ForeignArray, from_dlpack), exporters/ (DLPack, Arrow,
 * pickle) and api/ (the C API capsule and the module); a file calls only
 * its own layer and the layers below (scripts/layers.toml,
 * docs/architecture.md). Internal symbols are prefixed dbp_ and have hidden
 * visibility (the extension is built with -fvisibility=hidden; only
 * PyInit__devbuf is exported). See bindings/python/README.md. */
#ifndef DBP_H
#define DBP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "base/dbp_compat.h"
#include "devbuf/runtime.h"
#include "devbuf_buffer.h"
#include "base/export_ledger.h"

#include "base/dbp_lock.h"
#include "base/dbp_enter.h"

/* ---- errors.c ------------------------------------------------------------ */
extern PyObject *dbp_Error;             /* devbuf.Error (Exception) */
extern PyObject *dbp_PluginError;       /* devbuf.PluginError (Error) */
extern PyObject *dbp_FormatError;       /* devbuf.FormatError (Error, ValueError) */
extern PyObject *dbp_OutOfMemoryError;  /* devbuf.OutOfMemoryError (PluginError, MemoryError) */
int dbp_errors_init(PyObject *module);
/* Raise the exception that matches err->code with err's message; returns NULL
 * (or -1 through dbp_fail) so callers can `return dbp_raise(&err);`. */
PyObject *dbp_raise(const devbuf_error *err);
int dbp_fail(const devbuf_error *err);
/* FormatError with .offset and .format set. */
PyObject *dbp_raise_format(const char *fmt, size_t len, size_t offset, const devbuf_error *err);
/* Raise BufferError with err's message; returns -1. */
int dbp_buffer_error(const devbuf_error *err);

/* ---- state.c: per-interpreter state ------------------------------------------ */
/* Objects that Python code hands the extension (format factory, pickle
 * reducer) belong to one interpreter: kept in its state dict under `key`
 * ("devbuf.<what>"), never in a C global that another interpreter would see.
 * get: borrowed reference, or NULL (an exception is set only on error, so
 * check PyErr_Occurred). set: `value` NULL deletes; 0 or -1. */
PyObject *dbp_interp_get(const char *key);
int dbp_interp_set(const char *key, PyObject *value);

/* ---- device.c ---------------------------------------------------------------- */
typedef struct DbpDevice {
  PyObject_HEAD
  devbuf_device dev;       /* dev.backend is NULL for the built-in host device */
  PyObject *spec;          /* "identifier:N" */
  uint32_t props_flags;    /* DEVBUF_DEVICE_* */
  int is_host;             /* "cpu": plain host memory semantics */
  size_t plugin_index;     /* (size_t)-1 for the built-in host device */
} DbpDevice;

extern PyTypeObject DbpDevice_Type;
int dbp_device_init(PyObject *module);
/* Device, "identifier" or "identifier:N" -> new reference to the (cached)
 * Device. NULL with an exception. `arg` None gives the host device. */
DbpDevice *dbp_device_get(PyObject *arg);
/* The host ("cpu:0") device: the cpu plugin's when loaded, else a built-in
 * stand-in without a backend. Borrowed reference. */
DbpDevice *dbp_device_host(void);
/* Device for an opened runtime device. New reference. */
DbpDevice *dbp_device_from_devbuf(const devbuf_device *dev);
PyObject *dbp_devices(PyObject *self, PyObject *unused);
PyObject *dbp_device_func(PyObject *self, PyObject *arg);

/* ---- format.c ------------------------------------------------------------------- */
int dbp_format_init(PyObject *module);
/* Item size of a format string; -1 with FormatError (or another exception). */
int dbp_format_itemsize(const char *fmt, Py_ssize_t *itemsize);
/* The parsed description of `fmt` as Python objects (see devbuf/_format.py). */
PyObject *dbp_format_describe(const char *fmt, Py_ssize_t len);
/* The same for a producer's buffer: a description whose itemsize is
 * `itemsize` (C, else struct, else NumPy layout), or ValueError naming both
 * sizes. */
PyObject *dbp_format_describe_sized(const char *fmt, Py_ssize_t len, Py_ssize_t itemsize);
/* The format devbuf stores and exports for `itemsize`-byte items of `fmt`
 * (PyMem_Malloc'd): where struct reads `fmt`, struct.calcsize of the result
 * is itemsize (trailing padding written as 'x', F/D spelled Zf/Zd). NULL
 * with ValueError when struct's size exceeds itemsize. */
char *dbp_format_for_export(const char *fmt, Py_ssize_t itemsize);
PyObject *dbp_parse_format(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *dbp_register_dtype_namespace(PyObject *self, PyObject *args, PyObject *kwargs);
PyObject *dbp_unregister_dtype_namespace(PyObject *self, PyObject *arg);
PyObject *dbp_dtype_namespaces(PyObject *self, PyObject *unused);

/* ---- layout.c: the layout invariant --------------------------------------------------
 * itemsize agrees with the format (custom items: the namespace's itemsize),
 * len == prod(shape) * itemsize, that is at most `owned` bytes (-1: not
 * known, a foreign producer's memory), and strides stay inside `owned`.
 * ValueError (or BufferError with DBP_LAYOUT_BUFFER_ERROR) naming `what`
 * and the field; 0 or -1. */
#define DBP_LAYOUT_OWN 0x1u          /* memory devbuf allocates or rebuilds: no 'O'/pointers */
#define DBP_LAYOUT_BUFFER_ERROR 0x2u /* raise BufferError (exports, views) */
/* Every exporter's answer to PyBUF_FORMAT without PyBUF_ND (CPython's buffer rules): a
 * consumer would take len as a count of `format` items and read past the
 * end, so refuse it as memoryview does. 0, or -1 with BufferError. */
int dbp_refuse_flat_format(const char *what, const char *format, int flags);
int dbp_layout_check(const char *what, const char *format, Py_ssize_t itemsize, int ndim,
                     const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t len,
                     Py_ssize_t owned, unsigned flags);
int dbp_layout_check_view(const char *what, const Py_buffer *b, Py_ssize_t owned,
                          unsigned flags);
/* Debug and sanitizer builds check every export as well. */
#if !defined(NDEBUG) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define DBP_CHECK_EXPORTS 1
#else
#define DBP_CHECK_EXPORTS 0
#endif

/* ---- helpers.c --------------------------------------------------------------------- */
/* C-contiguous strides for shape into `strides`; returns total items or -1
 * on overflow. */
Py_ssize_t dbp_c_strides(int ndim, const Py_ssize_t *shape, Py_ssize_t itemsize,
                         Py_ssize_t *strides);
/* (a, b, ...) from n Py_ssize_t values. */
PyObject *dbp_tuple_from_ssize(int n, const Py_ssize_t *v);
/* Call `fn(args)` with the GIL released: small macro to keep sites short. */
#define DBP_NOGIL(stmt)      \
  do {                       \
    Py_BEGIN_ALLOW_THREADS   \
    stmt;                    \
    Py_END_ALLOW_THREADS     \
  } while (0)

#endif /* DBP_H */
