/* device.c: devbuf.Device, one object per (identifier, ordinal), cached.
 *
 * Everywhere the API takes a device it accepts a Device, "identifier"
 * (ordinal 0) or "identifier:N" (dbp_device_get). Devices are cached in a
 * dict keyed by every spelling seen, so that the common case (the same
 * string again) is one dict lookup and Devices compare by identity. */
#include "base/dbp.h"

#include <string.h>

static PyObject *g_cache;       /* spelling (str) -> Device */
static DbpDevice *g_host;       /* the host device, created on first use */
/* Without the GIL: makes "look up, else create and cache" one step, so that
 * one spelling never gets two Devices, and guards g_host's first use. */
static dbp_mutex g_dev_lock;

static void device_dealloc(DbpDevice *self) {
  Py_XDECREF(self->spec);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static DbpDevice *device_alloc(void) {
  DbpDevice *d = PyObject_New(DbpDevice, &DbpDevice_Type);
  if (d == NULL) return NULL;
  memset(&d->dev, 0, sizeof d->dev);
  d->spec = NULL;
  d->props_flags = 0;
  d->is_host = 0;
  d->plugin_index = (size_t)-1;
  return d;
}

static int cache_put(PyObject *key, DbpDevice *d) {
  return PyDict_SetItem(g_cache, key, (PyObject *)d);
}

/* A new reference to the cached Device for `key`, or NULL (with an
 * exception only on error). A Device whose plugin was unregistered is
 * dropped, so that a plugin registered later under the same identifier gets
 * a fresh Device. */
static PyObject *cache_get(PyObject *key) {
  PyObject *hit = NULL;
  if (dbp_compat_DictGetItemRef(g_cache, key, &hit) <= 0) return NULL;
  DbpDevice *d = (DbpDevice *)hit;
  if (d->dev.backend == NULL || devbuf_device_is_live(&d->dev)) return hit;
  Py_DECREF(hit);
  if (PyDict_DelItem(g_cache, key) < 0) return NULL;
  return NULL;
}

static DbpDevice *device_from_devbuf_locked(const devbuf_device *dev);

DbpDevice *dbp_device_from_devbuf(const devbuf_device *dev) {
  DBP_MUTEX_LOCK(&g_dev_lock);
  DbpDevice *d = device_from_devbuf_locked(dev);
  DBP_MUTEX_UNLOCK(&g_dev_lock);
  return d;
}

static DbpDevice *device_from_devbuf_locked(const devbuf_device *dev) {
  PyObject *spec = PyUnicode_FromFormat("%s:%d", dev->identifier, dev->ordinal);
  if (spec == NULL) return NULL;
  PyObject *hit = cache_get(spec);
  if (hit != NULL) {
    Py_DECREF(spec);
    return (DbpDevice *)hit;
  }
  if (PyErr_Occurred()) {
    Py_DECREF(spec);
    return NULL;
  }
  DbpDevice *d = device_alloc();
  if (d == NULL) {
    Py_DECREF(spec);
    return NULL;
  }
  d->dev = *dev;
  d->spec = spec;
  d->plugin_index = devbuf_device_plugin_index(dev);
  d->is_host = strcmp(dev->identifier, "cpu") == 0;
  devbuf_device_props props;
  devbuf_error err;
  devbuf_error_clear(&err);
  if (devbuf_device_props_get(dev, &props, &err) == DEVBUF_OK) d->props_flags = props.flags;
  if (d->is_host) d->props_flags |= DEVBUF_DEVICE_HOST_ACCESSIBLE;
  if (cache_put(spec, d) < 0) {
    Py_DECREF(d);
    return NULL;
  }
  return d;
}

static DbpDevice *device_host_locked(void);

DbpDevice *dbp_device_host(void) {
#if defined(Py_GIL_DISABLED)
  /* Set once and never changed (it lives as long as the module): after the
   * first call an acquire load is all it costs. */
  DbpDevice *h = (DbpDevice *)_Py_atomic_load_ptr_acquire(&g_host);
  if (h != NULL) return h;
#else
  if (g_host != NULL) return g_host;
#endif
  DBP_MUTEX_LOCK(&g_dev_lock);
  DbpDevice *d = device_host_locked();
  DBP_MUTEX_UNLOCK(&g_dev_lock);
  return d;
}

static void set_host(DbpDevice *d) {
#if defined(Py_GIL_DISABLED)
  _Py_atomic_store_ptr_release(&g_host, d);
#else
  g_host = d;
#endif
}

static DbpDevice *device_host_locked(void) {
  if (g_host != NULL) return g_host;
  devbuf_device dev;
  devbuf_error err;
  devbuf_error_clear(&err);
  if (devbuf_device_open_ordinal("cpu", 0, &dev, &err) == DEVBUF_OK) {
    set_host(device_from_devbuf_locked(&dev));
    return g_host;
  }
  /* No cpu plugin (DEVBUF_NO_DEFAULT_PLUGINS, say): a stand-in that only
   * labels host memory the bindings allocate themselves. */
  DbpDevice *d = device_alloc();
  if (d == NULL) return NULL;
  d->dev.identifier = "cpu";
  d->dev.ordinal = 0;
  d->dev.backend = NULL;
  d->is_host = 1;
  d->props_flags = DEVBUF_DEVICE_HOST_ACCESSIBLE | DEVBUF_DEVICE_UNIFIED;
  d->spec = PyUnicode_FromString("cpu:0");
  if (d->spec == NULL || cache_put(d->spec, d) < 0) {
    Py_DECREF(d);
    return NULL;
  }
  set_host(d);
  return g_host;
}

DbpDevice *dbp_device_get(PyObject *arg) {
  if (arg == NULL || arg == Py_None) {
    DbpDevice *h = dbp_device_host();
    Py_XINCREF(h);
    return h;
  }
  if (Py_IS_TYPE(arg, &DbpDevice_Type)) {
    Py_INCREF(arg);
    return (DbpDevice *)arg;
  }
  if (!PyUnicode_Check(arg)) {
    PyErr_Format(PyExc_TypeError,
                 "device must be a devbuf.Device, 'identifier' or 'identifier:N', not %.100s",
                 Py_TYPE(arg)->tp_name);
    return NULL;
  }
  PyObject *hit = cache_get(arg); /* a new reference */
  if (hit != NULL) return (DbpDevice *)hit;
  if (PyErr_Occurred()) return NULL;
  const char *spec = PyUnicode_AsUTF8(arg);
  if (spec == NULL) return NULL;
  if (strcmp(spec, "cpu") == 0 || strcmp(spec, "cpu:0") == 0) {
    DbpDevice *h = dbp_device_host();
    if (h == NULL || cache_put(arg, h) < 0) return NULL;
    Py_INCREF(h);
    return h;
  }
  devbuf_device dev;
  devbuf_error err;
  devbuf_error_clear(&err);
  if (devbuf_device_open(spec, &dev, &err) != DEVBUF_OK) {
    void dbp_device_hint(PyObject *spec); /* hints.c: "did you mean 'devbuf.cuda'?" */
    dbp_raise(&err);
    dbp_device_hint(arg);
    return NULL;
  }
  DbpDevice *d = dbp_device_from_devbuf(&dev);
  if (d == NULL) return NULL;
  if (cache_put(arg, d) < 0) {
    Py_DECREF(d);
    return NULL;
  }
  return d;
}

/* ---- module functions ------------------------------------------------------------ */

PyObject *dbp_device_func(PyObject *self, PyObject *arg) { return (PyObject *)dbp_device_get(arg); }

PyObject *dbp_devices(PyObject *self, PyObject *unused) {
  PyObject *out = PyList_New(0);
  if (out == NULL) return NULL;
  size_t nid = devbuf_identifier_count();
  for (size_t i = 0; i < nid; i++) {
    size_t plugin = 0;
    const char *id = devbuf_identifier_get(i, &plugin);
    if (id == NULL) continue;
    int count = 0;
    if (devbuf_device_count(id, &count, NULL) != DEVBUF_OK) continue; /* no device: skipped */
    for (int k = 0; k < count; k++) {
      devbuf_device dev;
      if (devbuf_device_open_ordinal(id, k, &dev, NULL) != DEVBUF_OK) continue;
      DbpDevice *d = dbp_device_from_devbuf(&dev);
      if (d == NULL || PyList_Append(out, (PyObject *)d) < 0) {
        Py_XDECREF(d);
        Py_DECREF(out);
        return NULL;
      }
      Py_DECREF(d);
    }
  }
  return out;
}

/* ---- the type --------------------------------------------------------------------- */

static PyObject *device_repr(DbpDevice *self) {
  return PyUnicode_FromFormat("devbuf.Device('%U')", self->spec);
}

static PyObject *device_str(DbpDevice *self) { return Py_NewRef(self->spec); }

static PyObject *get_identifier(DbpDevice *self, void *c) {
  return PyUnicode_FromString(self->dev.identifier);
}
static PyObject *get_ordinal(DbpDevice *self, void *c) { return PyLong_FromLong(self->dev.ordinal); }
static PyObject *get_host_accessible(DbpDevice *self, void *c) {
  return PyBool_FromLong((self->props_flags & DEVBUF_DEVICE_HOST_ACCESSIBLE) != 0);
}
static PyObject *get_is_async(DbpDevice *self, void *c) {
  return PyBool_FromLong((self->props_flags & DEVBUF_DEVICE_ASYNC) != 0);
}

static int props(DbpDevice *self, devbuf_device_props *p) {
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->dlpack_device_type = DEVBUF_DL_CPU;
  if (self->dev.backend == NULL) { /* the stand-in host device */
    snprintf(p->name, sizeof p->name, "host memory");
    snprintf(p->vendor, sizeof p->vendor, "system");
    p->flags = self->props_flags;
    return 0;
  }
  devbuf_error err;
  devbuf_error_clear(&err);
  if (devbuf_device_props_get(&self->dev, p, &err) != DEVBUF_OK) return dbp_fail(&err);
  return 0;
}

static PyObject *get_props(DbpDevice *self, void *which) {
  devbuf_device_props p;
  if (props(self, &p) < 0) return NULL;
  switch ((int)(intptr_t)which) {
    case 0: return PyUnicode_FromString(p.name);
    case 1: return PyUnicode_FromString(p.vendor);
    case 2: return PyLong_FromUnsignedLongLong(p.total_memory);
    case 3: return PyLong_FromUnsignedLongLong(p.free_memory);
    case 4: return PyLong_FromUnsignedLong(p.alloc_alignment);
    default: return Py_BuildValue("(ii)", p.dlpack_device_type, p.dlpack_device_id);
  }
}

static PyObject *get_plugin(DbpDevice *self, void *c) {
  if (self->dev.backend == NULL) Py_RETURN_NONE;
  devbuf_plugin_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  devbuf_error err;
  devbuf_error_clear(&err);
  if (devbuf_plugin_info_get(self->plugin_index, &info, &err) != DEVBUF_OK) return dbp_raise(&err);
  return PyUnicode_FromString(info.name ? info.name : "?");
}

static PyObject *device_synchronize(DbpDevice *self, PyObject *unused) {
  if (self->dev.backend == NULL) Py_RETURN_NONE;
  devbuf_error err;
  devbuf_error_clear(&err);
  int rc;
  DBP_NOGIL(rc = devbuf_stream_synchronize(&self->dev, NULL, &err));
  if (rc != DEVBUF_OK) return dbp_raise(&err);
  Py_RETURN_NONE;
}

static PyObject *device_reduce(DbpDevice *self, PyObject *unused) {
  /* Pickles as the spelling, so that it resolves again where unpickled. */
  PyObject *mod = PyImport_ImportModule("devbuf");
  if (mod == NULL) return NULL;
  PyObject *fn = PyObject_GetAttrString(mod, "device");
  Py_DECREF(mod);
  if (fn == NULL) return NULL;
  return Py_BuildValue("(N(O))", fn, self->spec);
}

static PyGetSetDef device_getset[] = {
    {"identifier", (getter)get_identifier, NULL, "the device identifier, e.g. 'devbuf.sim'", NULL},
    {"ordinal", (getter)get_ordinal, NULL, "the device number within its identifier", NULL},
    {"host_accessible", (getter)get_host_accessible, NULL,
     "True if the host may dereference this device's memory", NULL},
    {"is_async", (getter)get_is_async, NULL, "True if its streams run asynchronously", NULL},
    {"name", (getter)get_props, NULL, "the device's name", (void *)0},
    {"vendor", (getter)get_props, NULL, "the device's vendor", (void *)1},
    {"total_memory", (getter)get_props, NULL, "bytes, 0 if unknown", (void *)2},
    {"free_memory", (getter)get_props, NULL, "bytes now free, 0 if unknown", (void *)3},
    {"alignment", (getter)get_props, NULL, "alignment allocations get, bytes", (void *)4},
    {"dlpack_device", (getter)get_props, NULL, "(DLDeviceType, device_id)", (void *)5},
    {"plugin", (getter)get_plugin, NULL, "name of the plugin behind it (None: built in)", NULL},
    {NULL},
};

static PyMethodDef device_methods[] = {
    {"synchronize", (PyCFunction)device_synchronize, METH_NOARGS,
     "synchronize($self, /)\n--\n\n"
     "Block until all work on the device's default stream is done."},
    {"__reduce__", (PyCFunction)device_reduce, METH_NOARGS, NULL},
    {NULL},
};

PyTypeObject DbpDevice_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf.Device",
    .tp_basicsize = sizeof(DbpDevice),
    .tp_dealloc = (destructor)device_dealloc,
    .tp_repr = (reprfunc)device_repr,
    .tp_str = (reprfunc)device_str,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A device: an identifier and an ordinal. Get one with devbuf.device(spec) or "
              "devbuf.devices(); equal devices are the same object.",
    .tp_getset = device_getset,
    .tp_methods = device_methods,
};

int dbp_device_init(PyObject *module) {
  if (PyType_Ready(&DbpDevice_Type) < 0) return -1;
  if (PyModule_AddObjectRef(module, "Device", (PyObject *)&DbpDevice_Type) < 0) return -1;
  g_cache = PyDict_New();
  if (g_cache == NULL) return -1;
  return 0;
}
