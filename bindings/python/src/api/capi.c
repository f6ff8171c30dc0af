/* capi.c: the table behind the `devbuf._devbuf._C_API` capsule (layout and
 * rules in include/devbuf_capi.h). The table is static and filled once, at
 * module init. */
#include "api/api.h"
#include "readers/readers.h"

#include "devbuf/format.h"
#include "devbuf_capi.h"

static int capi_get_buffer_ex(PyObject *obj, DevbufPy_buffer_ext *view, int flags) {
  return DevbufPy_GetBufferEx(obj, view, flags);
}

static int capi_check_supports(PyObject *obj, int flags) {
  return DevbufPy_CheckBufferSupports(obj, flags);
}

static PyObject *capi_device_get(PyObject *spec) { return (PyObject *)dbp_device_get(spec); }

static int capi_device_as_devbuf(PyObject *device, devbuf_device *out) {
  if (!PyObject_TypeCheck(device, &DbpDevice_Type)) {
    PyErr_Format(PyExc_TypeError, "expected a devbuf.Device, not %.100s", Py_TYPE(device)->tp_name);
    return -1;
  }
  *out = ((DbpDevice *)device)->dev;
  return 0;
}

static DbpView *as_view(PyObject *v) {
  if (!PyObject_TypeCheck(v, &DbpView_Type)) {
    PyErr_Format(PyExc_TypeError, "expected a devbuf.DeviceView, not %.100s", Py_TYPE(v)->tp_name);
    return NULL;
  }
  return (DbpView *)v;
}

static PyObject *capi_view_from_object(PyObject *obj, int flags) {
  return (PyObject *)dbp_view_new(obj, flags & PyBUF_WRITABLE);
}

static int view_get_info_locked(DbpView *v, DevbufPy_ViewInfo *out);

/* The C API's view entries lock the view as its Python methods do (dbp.h). */
static int capi_view_get_info(PyObject *view, DevbufPy_ViewInfo *out) {
  DbpView *v = as_view(view);
  if (v == NULL) return -1;
  DBP_RETURN_LOCKED(int, v, view_get_info_locked(v, out));
}

static int view_get_info_locked(DbpView *v, DevbufPy_ViewInfo *out) {
  if (out == NULL || out->struct_size < offsetof(DevbufPy_ViewInfo, buffer) + sizeof(void *)) {
    PyErr_SetString(PyExc_ValueError, "DevbufPy_ViewInfo: struct_size not set or too small");
    return -1;
  }
  if (dbp_view_resolve(v) < 0) return -1;
  const Py_buffer *b = &v->buf.view;
  DevbufPy_ViewInfo info;
  memset(&info, 0, sizeof info);
  info.struct_size = out->struct_size < sizeof info ? out->struct_size : sizeof info;
  info.ptr = b->buf;
  info.nbytes = b->len;
  info.itemsize = b->itemsize;
  info.ndim = b->ndim;
  info.readonly = b->readonly;
  info.shape = b->shape;
  info.strides = b->strides;
  info.format = b->format ? b->format : "B";
  info.device = v->is_device ? v->buf.device : NULL;
  info.device_info = v->is_device ? v->buf.device_info : NULL;
  info.is_device = v->is_device;
  info.host_accessible = !v->is_device || (v->desc.flags & DEVBUF_DEVICE_INFO_HOST_ACCESSIBLE);
  info.dev = v->dev;
  info.event = v->is_device ? v->desc.event : NULL;
  info.stream = v->is_device ? v->desc.stream : NULL;
  info.buffer = &v->buf;
  memcpy(out, &info, info.struct_size);
  return 0;
}

static int capi_view_synchronize(PyObject *view) {
  DbpView *v = as_view(view);
  if (v == NULL) return -1;
  DBP_RETURN_LOCKED(int, v, dbp_view_synchronize(v));
}

static int capi_view_release(PyObject *view) {
  DbpView *v = as_view(view);
  if (v == NULL) return -1;
  DBP_RETURN_LOCKED(int, v, dbp_view_release(v));
}

static PyObject *capi_view_to_host(PyObject *view) {
  DbpView *v = as_view(view);
  if (v == NULL) return NULL;
  DBP_RETURN_LOCKED(PyObject *, v, dbp_view_to_host(v));
}

static PyObject *capi_buffer_empty(PyObject *shape, const char *format, PyObject *device) {
  PyObject *args = Py_BuildValue("(OsO)", shape, format ? format : "B", device ? device : Py_None);
  if (args == NULL) return NULL;
  PyObject *r = dbp_empty(NULL, args, NULL);
  Py_DECREF(args);
  return r;
}

static PyObject *capi_buffer_from_host(PyObject *obj, PyObject *device) {
  PyObject *args = Py_BuildValue("(OO)", obj, device ? device : Py_None);
  if (args == NULL) return NULL;
  PyObject *r = dbp_from_host(NULL, args, NULL);
  Py_DECREF(args);
  return r;
}

static PyObject *capi_buffer_copy_to(PyObject *buffer, PyObject *device) {
  if (!PyObject_TypeCheck(buffer, &DbpBuffer_Type)) {
    PyErr_Format(PyExc_TypeError, "expected a devbuf.DeviceBuffer, not %.100s",
                 Py_TYPE(buffer)->tp_name);
    return NULL;
  }
  DbpDevice *d = dbp_device_get(device);
  if (d == NULL) return NULL;
  PyObject *r = dbp_buffer_copy_to((DbpBuffer *)buffer, d);
  Py_DECREF(d);
  return r;
}

static PyObject *capi_set_error(const devbuf_error *err) { return dbp_raise(err); }

/* The DeviceView's own route (view.c) without the view: the reader fills
 * the one description, and the caller's struct points into it. */
static int capi_import_from_object(PyObject *obj, int flags, DevbufPy_Import *out) {
  if (out == NULL || out->struct_size < sizeof(DevbufPy_Import)) {
    PyErr_SetString(PyExc_ValueError, "DevbufPy_Import: struct_size not set or too small");
    return -1;
  }
  size_t size = out->struct_size;
  memset(out, 0, sizeof *out);
  out->struct_size = size;
  /* The routes and their order are devbuf.view's (import_routes.c): one
   * that refuses hands over to the next; if all refuse, the error names
   * each and why. */
  PyObject *notes = NULL;
  int arrow = 0;
  dbp_desc *d = dbp_import_routes(obj, &notes, &arrow);
  if (d == NULL) {
    if (notes != NULL && !PyErr_Occurred()) dbp_route_raise(PyExc_BufferError, notes, obj);
    Py_XDECREF(notes);
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_TypeError,
                   "devbuf C API Import_FromObject: %.100s speaks no protocol devbuf imports "
                   "(the DLPack exchange table, Arrow, __dlpack__, __cuda_array_interface__, "
                   "__array_interface__); use GetBufferEx for buffer exporters",
                   Py_TYPE(obj)->tp_name);
    return -1;
  }
  Py_XDECREF(notes);
  int rflags = PyBUF_RECORDS_RO | PyBUF_DEVICE | (flags & PyBUF_WRITABLE);
  if ((arrow ? dbp_arrow_desc_export(d, &out->buffer.view, rflags)
             : dbp_desc_export(d, &out->buffer.view, rflags)) < 0 ||
      /* Arrow's description was not made by dbp_desc_describe: it gets the
       * check a buffer export gets, as in devbuf.view. */
      (arrow && dbp_layout_check_view("devbuf C API Import_FromObject: the producer's buffer",
                                      &out->buffer.view, -1, DBP_LAYOUT_BUFFER_ERROR) < 0)) {
    dbp_desc_free(d);
    memset(&out->buffer, 0, sizeof out->buffer);
    return -1;
  }
  out->is_device = DevbufPy_BufferIsDevice(&out->buffer);
  out->host_accessible = d->is_host || (d->desc.flags & DEVBUF_DLPACK_HOST_ACCESSIBLE);
  out->event = d->event;
  out->stream = d->event ? d->stream : NULL;
  out->owner_ = d;
  return 0;
}

static void capi_import_release(DevbufPy_Import *imp) {
  if (imp == NULL || imp->owner_ == NULL) return;
  dbp_desc *d = imp->owner_;
  size_t size = imp->struct_size;
  memset(imp, 0, sizeof *imp);
  imp->struct_size = size;
  dbp_desc_free(d);
}

static DevbufPy_CAPI g_capi;

int dbp_capi_init(PyObject *module) {
  DevbufPy_CAPI *c = &g_capi;
  memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
  c->version_major = DEVBUFPY_CAPI_VERSION_MAJOR;
  c->version_minor = DEVBUFPY_CAPI_VERSION_MINOR;
  c->Device_Type = &DbpDevice_Type;
  c->DeviceBuffer_Type = &DbpBuffer_Type;
  c->DeviceView_Type = &DbpView_Type;
  c->Error = dbp_Error;
  c->PluginError = dbp_PluginError;
  c->FormatError = dbp_FormatError;
  c->GetBufferEx = capi_get_buffer_ex;
  c->CheckBufferSupports = capi_check_supports;
  c->Device_Get = capi_device_get;
  c->Device_AsDevbuf = capi_device_as_devbuf;
  c->View_FromObject = capi_view_from_object;
  c->View_GetInfo = capi_view_get_info;
  c->View_Synchronize = capi_view_synchronize;
  c->View_Release = capi_view_release;
  c->View_ToHost = capi_view_to_host;
  c->Buffer_Empty = capi_buffer_empty;
  c->Buffer_FromHost = capi_buffer_from_host;
  c->Buffer_CopyTo = capi_buffer_copy_to;
  c->SetError = capi_set_error;
  c->rt_device_open = devbuf_device_open;
  c->rt_device_props_get = devbuf_device_props_get;
  c->rt_identifier_lookup = devbuf_identifier_lookup;
  c->rt_mem_alloc = devbuf_mem_alloc;
  c->rt_mem_free = devbuf_mem_free;
  c->rt_stream_create = devbuf_stream_create;
  c->rt_stream_destroy = devbuf_stream_destroy;
  c->rt_stream_synchronize = devbuf_stream_synchronize;
  c->rt_event_create = devbuf_event_create;
  c->rt_event_destroy = devbuf_event_destroy;
  c->rt_event_record = devbuf_event_record;
  c->rt_stream_wait_event = devbuf_stream_wait_event;
  c->rt_event_synchronize = devbuf_event_synchronize;
  c->rt_event_query = devbuf_event_query;
  c->rt_copy_h2d = devbuf_copy_h2d;
  c->rt_copy_d2h = devbuf_copy_d2h;
  c->rt_copy_d2d = devbuf_copy_d2d;
  c->rt_copy_to_host_sync = devbuf_copy_to_host_sync;
  c->rt_copy_from_host_sync = devbuf_copy_from_host_sync;
  c->rt_device_info_export = devbuf_device_info_export;
  c->rt_device_info_import = devbuf_device_info_import;
  c->fmt_parse = devbuf_format_parse;
  c->fmt_release = devbuf_format_release;
  c->fmt_itemsize = devbuf_format_itemsize;
  c->dtype_register = devbuf_dtype_register;
  c->dtype_unregister = devbuf_dtype_unregister;
  c->dtype_lookup = devbuf_dtype_lookup;
  c->dtype_interpret = devbuf_dtype_interpret;
  c->Import_FromObject = capi_import_from_object;
  c->Import_Release = capi_import_release;
  PyObject *cap = PyCapsule_New(c, DEVBUFPY_CAPI_NAME, NULL);
  if (cap == NULL) return -1;
  int rc = PyModule_AddObjectRef(module, "_C_API", cap);
  Py_DECREF(cap);
  return rc;
}
