/* module.c: devbuf._devbuf, the CPython extension behind the devbuf package.
 * Module-level functions that belong to no type, and module init. */
#include "api/api.h"

#include <string.h>

/* ---- plugins ------------------------------------------------------------------------- */

static const char *state_name(int s) {
  switch (s) {
    case DEVBUF_PLUGIN_LOADED: return "loaded";
    case DEVBUF_PLUGIN_FAILED: return "failed";
    case DEVBUF_PLUGIN_UNREGISTERED: return "unregistered";
    default: return "unknown";
  }
}

/* One plugin record as a dict (devbuf/_plugins.py wraps it). Probing the
 * device count may initialise the plugin's driver: that is what a listing
 * is for. */
static PyObject *plugin_dict(size_t index) {
  devbuf_plugin_info info;
  devbuf_error err;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  devbuf_error_clear(&err);
  if (devbuf_plugin_info_get(index, &info, &err) != DEVBUF_OK) return dbp_raise(&err);
  PyObject *ids = PyList_New(0);
  if (ids == NULL) return NULL;
  for (const char *const *p = info.identifiers; p && *p; p++) {
    PyObject *s = PyUnicode_FromString(*p);
    if (s == NULL || PyList_Append(ids, s) < 0) {
      Py_XDECREF(s);
      Py_DECREF(ids);
      return NULL;
    }
    Py_DECREF(s);
  }
  int count = 0;
  PyObject *why = Py_NewRef(Py_None);
  if (info.state == DEVBUF_PLUGIN_LOADED) {
    devbuf_error_clear(&err);
    int rc;
    DBP_NOGIL(rc = devbuf_plugin_device_count(index, &count, &err));
    if (rc != DEVBUF_OK) {
      Py_DECREF(why);
      why = PyUnicode_FromString(err.message);
      if (why == NULL) {
        Py_DECREF(ids);
        return NULL;
      }
    }
  }
  return Py_BuildValue("{s:n,s:s,s:z,s:z,s:z,s:z,s:z,s:(HH),s:z,s:s,s:N,s:i,s:N}", "index",
                       (Py_ssize_t)index, "state", state_name(info.state), "name", info.name,
                       "version", info.version, "description", info.description, "path",
                       info.path, "source", info.source, "abi", info.abi_major, info.abi_minor,
                       "reason", info.reason, "error", devbuf_status_name(info.error_code),
                       "identifiers", ids, "device_count", count, "device_error", why);
}

static PyObject *m_plugins(PyObject *self, PyObject *unused) {
  size_t n = devbuf_plugin_count();
  PyObject *out = PyList_New(0);
  if (out == NULL) return NULL;
  for (size_t i = 0; i < n; i++) {
    PyObject *d = plugin_dict(i);
    if (d == NULL || PyList_Append(out, d) < 0) {
      Py_XDECREF(d);
      Py_DECREF(out);
      return NULL;
    }
    Py_DECREF(d);
  }
  return out;
}

static PyObject *m_load_plugin(PyObject *self, PyObject *args) {
  PyObject *arg, *bytes = NULL;
  const char *source = NULL;
  if (!PyArg_ParseTuple(args, "O|z:_load_plugin", &arg, &source)) return NULL;
  if (!PyUnicode_FSConverter(arg, &bytes)) return NULL;
  devbuf_error err;
  size_t index = (size_t)-1;
  int rc;
  const char *path = PyBytes_AS_STRING(bytes);
  devbuf_error_clear(&err);
  if (source)
    DBP_NOGIL(rc = devbuf_plugin_load_from(path, source, &index, &err));
  else
    DBP_NOGIL(rc = devbuf_plugin_load(path, &index, &err));
  Py_DECREF(bytes);
  if (rc != DEVBUF_OK) return dbp_raise(&err);
  return plugin_dict(index);
}

/* The runtime's own secure-execution test (AT_SECURE): the Python package's
 * entry-point discovery follows the same rule as DEVBUF_PLUGINS. */
static PyObject *m_secure_execution(PyObject *self, PyObject *unused) {
  return PyBool_FromLong(devbuf_secure_execution());
}

/* Index of the plugin named `name` (or given as an int index). */
static int plugin_index(PyObject *arg, size_t *index) {
  if (PyLong_Check(arg)) {
    *index = PyLong_AsSize_t(arg);
    return *index == (size_t)-1 && PyErr_Occurred() ? -1 : 0;
  }
  const char *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
  if (name == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "plugin must be a name or an index");
    return -1;
  }
  size_t n = devbuf_plugin_count(), found = (size_t)-1;
  for (size_t i = 0; i < n; i++) {
    devbuf_plugin_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (devbuf_plugin_info_get(i, &info, NULL) != DEVBUF_OK) continue;
    /* The newest loaded record of that name wins. */
    if (info.name && strcmp(info.name, name) == 0 &&
        (found == (size_t)-1 || info.state == DEVBUF_PLUGIN_LOADED))
      found = i;
  }
  if (found == (size_t)-1) {
    PyErr_Format(dbp_PluginError, "no plugin named '%s' (devbuf.plugins() lists them)", name);
    return -1;
  }
  *index = found;
  return 0;
}

static PyObject *m_plugin_stats(PyObject *self, PyObject *arg) {
  size_t index;
  if (plugin_index(arg, &index) < 0) return NULL;
  devbuf_stats s;
  devbuf_error err;
  devbuf_error_clear(&err);
  if (devbuf_plugin_stats(index, &s, &err) != DEVBUF_OK) return dbp_raise(&err);
  return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K}", "live_allocations",
                       (unsigned long long)s.live_allocations, "live_bytes",
                       (unsigned long long)s.live_bytes, "total_allocations",
                       (unsigned long long)s.total_allocations, "live_streams",
                       (unsigned long long)s.live_streams, "live_events",
                       (unsigned long long)s.live_events, "live_host_allocations",
                       (unsigned long long)s.live_host_allocations);
}

static PyObject *m_search_path(PyObject *self, PyObject *unused) {
  size_t n = devbuf_search_path_count();
  PyObject *out = PyList_New(0);
  if (out == NULL) return NULL;
  for (size_t i = 0; i < n; i++) {
    const devbuf_search_entry *e = devbuf_search_path_get(i);
    if (e == NULL) continue;
    PyObject *d = Py_BuildValue("{s:s,s:s,s:O,s:O}", "path", e->path, "source", e->source,
                                "exists", e->exists ? Py_True : Py_False, "is_file",
                                e->is_file ? Py_True : Py_False);
    if (d == NULL || PyList_Append(out, d) < 0) {
      Py_XDECREF(d);
      Py_DECREF(out);
      return NULL;
    }
    Py_DECREF(d);
  }
  return out;
}

static PyObject *m_runtime_version(PyObject *self, PyObject *unused) {
  int major = 0, minor = 0;
  devbuf_abi_version(&major, &minor);
  return Py_BuildValue("{s:s,s:(ii)}", "version", devbuf_version(), "abi", major, minor);
}

static PyObject *m_check_buffer_supports(PyObject *self, PyObject *args) {
  PyObject *obj;
  int flags;
  if (!PyArg_ParseTuple(args, "Oi:check_buffer_supports", &obj, &flags)) return NULL;
  int r = DevbufPy_CheckBufferSupports(obj, flags);
  if (r < 0) return NULL;
  return PyBool_FromLong(r);
}

static PyMethodDef module_methods[] = {
    {"devices", dbp_devices, METH_NOARGS, "devices($module, /)\n--\n\n"
     "A list of every usable Device (the host's included)."},
    {"device", dbp_device_func, METH_O,
     "device($module, spec, /)\n--\n\n"
     "The Device for `spec`: a Device, 'identifier' (ordinal 0, e.g. 'devbuf.sim') or "
     "'identifier:N'. Raises PluginError when no plugin implements it (naming the registered "
     "identifiers it may have meant) or the device cannot be opened."},
    {"_plugins", m_plugins, METH_NOARGS, "Raw plugin records (see devbuf.plugins())."},
    {"_load_plugin", m_load_plugin, METH_VARARGS,
     "_load_plugin(path, source=None): raw load (see devbuf.load_plugin())."},
    {"_secure_execution", m_secure_execution, METH_NOARGS,
     "True in secure-execution mode (setuid/setgid), where plugin variables are ignored."},
    {"plugin_stats", m_plugin_stats, METH_O,
     "plugin_stats($module, name_or_index, /)\n--\n\n"
     "plugin_stats(name_or_index) -> dict of live allocations, bytes, streams, events and host "
     "allocations made through the runtime (for leak checks)."},
    {"search_path", m_search_path, METH_NOARGS, "search_path($module, /)\n--\n\n"
     "The plugin search path the runtime used."},
    {"runtime_version", m_runtime_version, METH_NOARGS, "runtime_version($module, /)\n--\n\n"
     "libdevbuf's version and plugin ABI."},
    {"check_buffer_supports", m_check_buffer_supports, METH_VARARGS,
     "check_buffer_supports($module, obj, flags, /)\n--\n\n"
     "True if type(obj) advertises every required flag of `flags` (an int of PyBUF_* bits, "
     "e.g. devbuf.PyBUF_DEVICE) in __buffer_supported_flags__: the backport of "
     "PyObject_CheckBufferSupports (DevbufPy_CheckBufferSupports in C)."},
    {"empty", (PyCFunction)(void (*)(void))dbp_empty, METH_VARARGS | METH_KEYWORDS,
     "empty($module, /, shape, format='B', device=None, *, readonly=False)\n--\n\n"
     "An uninitialised DeviceBuffer (the C function under devbuf.empty, which also takes "
     "NumPy dtypes). shape: an int or a sequence of ints; format: a struct/PEP 3118 format "
     "string; device: a Device, 'identifier' or 'identifier:N' (None: the host); readonly: "
     "exports refuse PyBUF_WRITABLE."},
    {"from_host", (PyCFunction)(void (*)(void))dbp_from_host, METH_VARARGS | METH_KEYWORDS,
     "from_host($module, /, obj, device=None, *, readonly=False)\n--\n\n"
     "A DeviceBuffer holding a copy of obj's buffer (shape and format kept; a non-contiguous "
     "source is packed in C order). obj: any host buffer exporter (a NumPy array, bytes, "
     "memoryview); device: a Device, 'identifier' or 'identifier:N' (None: the host); "
     "readonly: exports of the result refuse PyBUF_WRITABLE."},
    {"view", (PyCFunction)(void (*)(void))dbp_view_func, METH_FASTCALL | METH_KEYWORDS,
     "view($module, /, obj, *, writable=False)\n--\n\n"
     "A DeviceView of obj: any buffer exporter (device memory included, through PyBUF_DEVICE), "
     "or a DLPack, Arrow, CUDA Array Interface or array-interface producer. writable: ask "
     "for a writable export (BufferError if refused). Use it in a with block, or release()."},
    {"_parse_format", (PyCFunction)(void (*)(void))dbp_parse_format,
     METH_VARARGS | METH_KEYWORDS, "Raw parse (see devbuf.parse_format())."},
    {"register_dtype_namespace", (PyCFunction)(void (*)(void))dbp_register_dtype_namespace,
     METH_VARARGS | METH_KEYWORDS,
     "register_dtype_namespace($module, /, id, interpret, *, provider='python', description='')\n--\n\n"
     "Define the dtype namespace `id` in Python. interpret(payload) returns None (not "
     "understood) or a mapping with itemsize (required) and optionally kind, alignment, bits, "
     "elements_per_item, dlpack, canonical, plain_format. provider and description are shown "
     "by dtype_namespaces()."},
    {"unregister_dtype_namespace", dbp_unregister_dtype_namespace, METH_O,
     "unregister_dtype_namespace($module, id, /)\n--\n\n"
     "Remove the Python dtype namespace `id` (waits for calls still running in it)."},
    {"dtype_namespaces", dbp_dtype_namespaces, METH_NOARGS,
     "dtype_namespaces($module, /)\n--\n\n"
     "dtype_namespaces() -> list of dicts (id, provider, description, source)."},
    {NULL},
};

/* ---- module init (multi-phase) -----------------------------------------------------------
 * Why multi-phase: CPython 3.12+ refuses a module in an interpreter with its
 * own GIL (an isolated subinterpreter) before its exec runs, but only if the
 * module says what it supports. A single-phase PyInit ran first, in that
 * interpreter, and readied the static types there: their dicts came from the
 * doomed interpreter's allocator, and the next import (in a legacy
 * subinterpreter) crashed with a double free.
 *
 * What devbuf supports: several interpreters that share the main GIL (the
 * static types, the exceptions and libdevbuf's registries are process-wide),
 * not a per-interpreter GIL. The first exec makes the process-wide objects;
 * a later one (a legacy subinterpreter, a re-import) gives its new module the
 * same ones, as the single-phase m_copy did. What Python code registers
 * (format factory, pickle reducer) is kept per interpreter (dbp_interp_*). */

static PyObject *g_contents; /* the first module's contents, for later execs */

/* The module's own dunder attributes (__name__, __spec__, ...) that every
 * module gets for itself; __version__ is ours. */
static int own_dunder(PyObject *key) {
  const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
  if (k == NULL) {
    PyErr_Clear();
    return 0;
  }
  size_t n = strlen(k);
  return n > 4 && k[0] == '_' && k[1] == '_' && k[n - 1] == '_' && k[n - 2] == '_' &&
         strcmp(k, "__version__") != 0;
}

static int module_exec_first(PyObject *m) {
  devbuf_error err;
  devbuf_error_clear(&err);
  if (dbp_errors_init(m) < 0 || dbp_enter_init() < 0) return -1;
  if (devbuf_init(&err) != DEVBUF_OK) return dbp_fail(&err);
  if (dbp_device_init(m) < 0 || dbp_buffer_init(m) < 0 || dbp_view_init(m) < 0 ||
      dbp_format_init(m) < 0 || dbp_capi_init(m) < 0 || dbp_interop_init(m) < 0 ||
      dbp_pickle_init(m) < 0 || dbp_arrow_init(m) < 0)
    return -1;
  if (PyModule_AddIntConstant(m, "PyBUF_DEVICE", PyBUF_DEVICE) < 0 ||
      PyModule_AddIntConstant(m, "PyBUF_REQUIRED_FLAGS", PyBUF_REQUIRED_FLAGS) < 0 ||
      PyModule_AddIntConstant(m, "PyBUF_CLASSIC_FLAGS", DEVBUFPY_BUF_CLASSIC_FLAGS) < 0 ||
      PyModule_AddStringConstant(m, "SUPPORTED_FLAGS_ATTR", DEVBUFPY_SUPPORTED_FLAGS_ATTR) < 0 ||
      PyModule_AddStringConstant(m, "__version__", devbuf_version()) < 0)
    return -1;
  PyObject *contents = PyDict_New(), *key, *value;
  Py_ssize_t pos = 0;
  if (contents == NULL) return -1;
  while (PyDict_Next(PyModule_GetDict(m), &pos, &key, &value)) {
    if (own_dunder(key)) continue;
    if (PyDict_SetItem(contents, key, value) < 0) {
      Py_DECREF(contents);
      return -1;
    }
  }
  g_contents = contents;
  return 0;
}

static int module_exec(PyObject *m) {
  if (g_contents == NULL) return module_exec_first(m);
  PyObject *dict = PyModule_GetDict(m), *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(g_contents, &pos, &key, &value)) {
    int has = PyDict_Contains(dict, key); /* the functions of module_methods are its own */
    if (has < 0 || (!has && PyDict_SetItem(dict, key, value) < 0)) return -1;
  }
  return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, (void *)module_exec},
#ifdef Py_GIL_DISABLED /* 3.13t: safe without the GIL (dbp.h, "locking"); keep it off */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
#ifdef Py_mod_multiple_interpreters /* 3.12+; older versions have no per-interpreter GIL */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_SUPPORTED},
#endif
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "devbuf._devbuf",
    .m_doc = "The C core of the devbuf package (use `import devbuf`).",
    .m_size = 0, /* no per-module state: see above */
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__devbuf(void) { return PyModuleDef_Init(&module_def); }

int dbp_interop_init(PyObject *module) {
  if (dbp_route_init() < 0) return -1;
  if (dbp_import_init(module) < 0) return -1; /* readies ForeignArray first */
  return dbp_export_init(module);
}

