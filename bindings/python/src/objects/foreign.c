/* foreign.c: devbuf.ForeignArray, an import's description (desc.h) behind a
 * public Python type.
 *
 * No import route makes one: a DeviceView owns the description itself, and
 * its .obj is the producer. The one public API that makes a ForeignArray is
 * ForeignArray's own DLPack exchange table: its
 * managed_tensor_to_py_object_no_sync wraps a C caller's tensor in one, and
 * its dltensor_from_py_object_no_sync lends the DLTensor kept in it (the
 * borrowed-tensor fast path a DeviceView's table cannot offer). It
 * re-exports the description through the extended buffer protocol, so a
 * third-party consumer built on devbuf_buffer.h accepts it like any other
 * exporter. */
#include "objects/objects.h"

#include <string.h>

DbpForeign *dbp_foreign_wrap(dbp_desc *d) {
  DbpForeign *f = PyObject_New(DbpForeign, &DbpForeign_Type);
  if (f == NULL) return NULL;
  dbp_desc_own_tensor(d); /* its DLTensor is handed out by the exchange table */
  f->d = d;
  f->exports = 0;
  f->weakreflist = NULL;
  return f;
}

DbpForeign *dbp_foreign_from_versioned(DLManagedTensorVersioned *m, PyObject *producer) {
  dbp_desc *d = dbp_desc_from_versioned(m, producer);
  if (d == NULL) return NULL;
  DbpForeign *f = dbp_foreign_wrap(d);
  if (f == NULL) {
    d->managed = NULL; /* on failure the caller still owns m */
    dbp_desc_free(d);
  }
  return f;
}

static int foreign_getbuffer_locked(DbpForeign *f, Py_buffer *view, int flags) {
  if (dbp_desc_export(f->d, view, flags) < 0) return -1;
  view->obj = Py_NewRef((PyObject *)f);
  f->exports++;
  return 0;
}

static void foreign_releasebuffer_locked(DbpForeign *f, Py_buffer *view) { f->exports--; }
/* Locked (dbp.h): the export count, the event and the lazily made device_info. */
DBP_LOCKED_GETBUFFER(DbpForeign, foreign_getbuffer)
DBP_LOCKED_RELEASEBUFFER(DbpForeign, foreign_releasebuffer)

static PyBufferProcs foreign_as_buffer = {
    .bf_getbuffer = (getbufferproc)foreign_getbuffer,
    .bf_releasebuffer = (releasebufferproc)foreign_releasebuffer,
};

static void foreign_dealloc(DbpForeign *f) {
  if (f->weakreflist) PyObject_ClearWeakRefs((PyObject *)f);
  dbp_desc_free(f->d);
  f->d = NULL;
  PyObject_Free(f);
}

static PyObject *fget_kind(DbpForeign *f, void *c) {
  return PyUnicode_FromString(dbp_desc_kind_name(f->d->kind));
}
static PyObject *fget_obj(DbpForeign *f, void *c) {
  return Py_NewRef(f->d->source ? f->d->source : Py_None);
}
static PyObject *fget_identifier(DbpForeign *f, void *c) {
  return PyUnicode_FromString(f->d->desc.identifier);
}
static PyObject *fget_ordinal(DbpForeign *f, void *c) { return PyLong_FromLong(f->d->desc.ordinal); }
static PyObject *fget_shape(DbpForeign *f, void *c) {
  return dbp_tuple_from_ssize(f->d->desc.ndim, (const Py_ssize_t *)f->d->desc.shape);
}
static PyObject *fget_strides(DbpForeign *f, void *c) {
  return dbp_tuple_from_ssize(f->d->desc.ndim, (const Py_ssize_t *)f->d->desc.strides);
}
static PyObject *fget_format(DbpForeign *f, void *c) { return PyUnicode_FromString(f->d->desc.format); }
static PyObject *fget_readonly(DbpForeign *f, void *c) {
  return PyBool_FromLong((f->d->desc.flags & DEVBUF_DLPACK_READONLY) != 0);
}
static PyObject *fget_is_copied(DbpForeign *f, void *c) {
  return PyBool_FromLong((f->d->desc.flags & DEVBUF_DLPACK_IS_COPIED) != 0);
}
static PyObject *fget_ptr(DbpForeign *f, void *c) {
  return PyLong_FromVoidPtr((void *)((uintptr_t)f->d->desc.data + (uintptr_t)f->d->desc.byte_offset));
}
static PyObject *fget_dl_device(DbpForeign *f, void *c) {
  return Py_BuildValue("(ii)", (int)f->d->desc.dl_device_type, (int)f->d->desc.dl_device_id);
}
static PyObject *fget_dl_dtype(DbpForeign *f, void *c) {
  return Py_BuildValue("(iii)", (int)f->d->desc.dtype.code, (int)f->d->desc.dtype.bits,
                       (int)f->d->desc.dtype.lanes);
}
static PyObject *fget_version(DbpForeign *f, void *c) {
  if (f->d->kind != DBP_DESC_DLPACK) Py_RETURN_NONE;
  return Py_BuildValue("(II)", f->d->desc.version.major, f->d->desc.version.minor);
}
static PyObject *fget_exports_locked(DbpForeign *f, void *c) { return PyLong_FromSsize_t(f->exports); }
DBP_LOCKED_GETTER(DbpForeign, fget_exports)
static PyObject *fget_event_locked(DbpForeign *f, void *c) {
  if (f->d->event == NULL) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(f->d->event);
}
DBP_LOCKED_GETTER(DbpForeign, fget_event)

static PyGetSetDef foreign_getset[] = {
    {"kind", (getter)fget_kind, NULL,
     "how it was imported: 'dlpack', 'dlpack_legacy', 'cuda_array_interface', 'array_interface'",
     NULL},
    {"obj", (getter)fget_obj, NULL, "the producer (kept alive), or None", NULL},
    {"identifier", (getter)fget_identifier, NULL, "devbuf device identifier", NULL},
    {"ordinal", (getter)fget_ordinal, NULL, "device ordinal", NULL},
    {"shape", (getter)fget_shape, NULL, "items per dimension", NULL},
    {"strides", (getter)fget_strides, NULL, "byte strides", NULL},
    {"format", (getter)fget_format, NULL, "buffer-protocol format of one item", NULL},
    {"readonly", (getter)fget_readonly, NULL, "True if the producer forbids writes", NULL},
    {"is_copied", (getter)fget_is_copied, NULL, "True if the producer made a copy for us", NULL},
    {"ptr", (getter)fget_ptr, NULL, "address of the first item (data + byte_offset)", NULL},
    {"dl_device", (getter)fget_dl_device, NULL, "(device_type, device_id) as received", NULL},
    {"dl_dtype", (getter)fget_dl_dtype, NULL, "(code, bits, lanes) as received", NULL},
    {"dlpack_version", (getter)fget_version, NULL, "(major, minor) of a versioned tensor", NULL},
    {"exports", (getter)fget_exports, NULL, "live buffer exports", NULL},
    {"event", (getter)fget_event, NULL, "the event readers wait on (int handle), or None", NULL},
    {NULL},
};

static PyObject *foreign_repr(DbpForeign *f) {
  PyObject *shape = fget_shape(f, NULL);
  if (shape == NULL) return NULL;
  const devbuf_dlpack_desc *d = &f->d->desc;
  PyObject *r = PyUnicode_FromFormat("<devbuf.ForeignArray %s %s:%d shape=%R format='%s'%s>",
                                     dbp_desc_kind_name(f->d->kind), d->identifier,
                                     (int)d->ordinal, shape, d->format,
                                     (d->flags & DEVBUF_DLPACK_READONLY) ? " readonly" : "");
  Py_DECREF(shape);
  return r;
}

PyTypeObject DbpForeign_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf.ForeignArray",
    .tp_basicsize = sizeof(DbpForeign),
    .tp_dealloc = (destructor)foreign_dealloc,
    .tp_repr = (reprfunc)foreign_repr,
    .tp_as_buffer = &foreign_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A DLPack tensor a C caller handed to devbuf, validated and re-exported through "
              "the extended buffer protocol: what the managed_tensor_to_py_object_no_sync of "
              "ForeignArray.__dlpack_c_exchange_api__ returns (devbuf's imports give a "
              "DeviceView, whose .obj is the producer).",
    .tp_weaklistoffset = offsetof(DbpForeign, weakreflist),
    .tp_getset = foreign_getset,
};

int dbp_foreign_init(PyObject *module) {
  if (PyType_Ready(&DbpForeign_Type) < 0) return -1;
  if (DevbufPy_SetBufferSupportedFlags(&DbpForeign_Type, DEVBUFPY_BUF_CLASSIC_FLAGS | PyBUF_DEVICE) < 0)
    return -1;
  return PyModule_AddObjectRef(module, "ForeignArray", (PyObject *)&DbpForeign_Type);
}
