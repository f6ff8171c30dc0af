/* arrow_array.c: devbuf.ArrowArray and devbuf.from_arrow(): the Arrow
 * reader's description (readers/arrow_import.c) behind a public read-only
 * exporter of the extended buffer protocol, exported with the checks and
 * messages of dbp_arrow_desc_export. See docs/arrow.md. */
#include "objects/objects.h"
#include "readers/readers.h"

/* ---- devbuf.ArrowArray: devbuf.from_arrow()'s result ------------------------------------ */

typedef struct DbpArrowImport {
  PyObject_HEAD
  dbp_desc *d;           /* kind DBP_DESC_ARROW, owned: released at deallocation */
  Py_ssize_t exports;
  PyObject *weakreflist;
} DbpArrowImport;

static PyTypeObject DbpArrowImport_Type;

#define OWNER(a) ((const dbp_arrow_owner *)(a)->d->managed)

static int import_getbuffer_locked(DbpArrowImport *a, Py_buffer *view, int flags) {
  if (dbp_arrow_desc_export(a->d, view, flags) < 0) return -1;
  view->obj = Py_NewRef(a);
  a->exports++;
  return 0;
}

static void import_releasebuffer_locked(DbpArrowImport *a, Py_buffer *view) {
  (void)view;
  a->exports--; /* nothing to free early: the array goes at deallocation */
}
/* Locked (dbp.h): the export count and the lazily opened device_info. */
DBP_LOCKED_GETBUFFER(DbpArrowImport, import_getbuffer)
DBP_LOCKED_RELEASEBUFFER(DbpArrowImport, import_releasebuffer)

static PyBufferProcs import_as_buffer = {
    .bf_getbuffer = (getbufferproc)import_getbuffer,
    .bf_releasebuffer = (releasebufferproc)import_releasebuffer,
};

static void import_dealloc(DbpArrowImport *a) {
  if (a->weakreflist) PyObject_ClearWeakRefs((PyObject *)a);
  dbp_desc_free(a->d); /* the producer's release, once, any pending exception kept */
  PyObject_Free(a);
}

static PyObject *imp_obj(DbpArrowImport *a, void *c) { return Py_NewRef(a->d->source); }
static PyObject *imp_format(DbpArrowImport *a, void *c) {
  return PyUnicode_FromString(OWNER(a)->format);
}
static PyObject *imp_arrow_format(DbpArrowImport *a, void *c) {
  return PyUnicode_FromString(OWNER(a)->arrow_format);
}
static PyObject *imp_device_type(DbpArrowImport *a, void *c) {
  return PyLong_FromLong(OWNER(a)->arr.device_type);
}
static PyObject *imp_device_id(DbpArrowImport *a, void *c) {
  return PyLong_FromLongLong(OWNER(a)->arr.device_id);
}
static PyObject *imp_identifier(DbpArrowImport *a, void *c) {
  if (a->d->is_host) Py_RETURN_NONE;
  return PyUnicode_FromString(a->d->desc.identifier);
}
static PyObject *imp_sync_event(DbpArrowImport *a, void *c) {
  if (a->d->event == NULL) Py_RETURN_NONE;
  return PyLong_FromVoidPtr(a->d->event);
}
static Py_ssize_t imp_len(DbpArrowImport *a) { return (Py_ssize_t)a->d->desc.shape[0]; }

static PyGetSetDef import_getset[] = {
    {"obj", (getter)imp_obj, NULL, "the Arrow producer", NULL},
    {"format", (getter)imp_format, NULL, "the devbuf format of one item", NULL},
    {"arrow_format", (getter)imp_arrow_format, NULL, "the Arrow format string as received", NULL},
    {"device_type", (getter)imp_device_type, NULL, "the ArrowDeviceType (1: CPU)", NULL},
    {"device_id", (getter)imp_device_id, NULL, "the Arrow device_id", NULL},
    {"identifier", (getter)imp_identifier, NULL,
     "the devbuf device identifier of the values, None for host memory", NULL},
    {"sync_event", (getter)imp_sync_event, NULL,
     "the producer's event (the handle sync_event pointed at), or None", NULL},
    {NULL},
};

static PySequenceMethods import_as_sequence = {.sq_length = (lenfunc)imp_len};

static PyObject *import_repr(DbpArrowImport *a) {
  return PyUnicode_FromFormat("<devbuf.ArrowArray %s length=%zd format='%s' arrow='%s'>",
                              a->d->is_host ? "host" : a->d->desc.identifier,
                              (Py_ssize_t)a->d->desc.shape[0], OWNER(a)->format,
                              OWNER(a)->arrow_format);
}

static PyTypeObject DbpArrowImport_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "devbuf.ArrowArray",
    .tp_basicsize = sizeof(DbpArrowImport),
    .tp_dealloc = (destructor)import_dealloc,
    .tp_repr = (reprfunc)import_repr,
    .tp_as_buffer = &import_as_buffer,
    .tp_as_sequence = &import_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A primitive, null-free Arrow array moved out of an Arrow producer by "
              "devbuf.from_arrow(); read-only, exported through the extended buffer protocol "
              "(device memory with the producer's sync_event in device_info). The producer's "
              "release runs when this object goes. devbuf.view(producer) does not make one: "
              "the view holds the array itself.",
    .tp_weaklistoffset = offsetof(DbpArrowImport, weakreflist),
    .tp_getset = import_getset,
};

static PyObject *from_arrow(PyObject *self, PyObject *obj) {
  dbp_desc *d = dbp_arrow_import(obj, 1);
  if (d == NULL) return NULL;
  DbpArrowImport *a = PyObject_New(DbpArrowImport, &DbpArrowImport_Type);
  if (a == NULL) {
    dbp_desc_free(d);
    return NULL;
  }
  a->d = d;
  a->exports = 0;
  a->weakreflist = NULL;
  return (PyObject *)a;
}

static PyMethodDef arrow_functions[] = {
    {"from_arrow", (PyCFunction)from_arrow, METH_O,
     "from_arrow($module, obj, /)\n--\n\n"
     "from_arrow(obj) -> devbuf.ArrowArray: import a primitive, null-free, flat array from any "
     "object with __arrow_c_device_array__ or __arrow_c_array__ (pyarrow, nanoarrow, ...). "
     "Refuses nulls, children, dictionaries, offsets buffers and non-primitive types with "
     "BufferError."},
    {NULL},
};

int dbp_arrow_import_init(PyObject *module) {
  if (dbp_arrow_reader_init() < 0) return -1;
  if (PyType_Ready(&DbpArrowImport_Type) < 0) return -1;
  if (DevbufPy_SetBufferSupportedFlags(&DbpArrowImport_Type,
                                       DEVBUFPY_BUF_CLASSIC_FLAGS | PyBUF_DEVICE) < 0)
    return -1;
  if (PyModule_AddObjectRef(module, "ArrowArray", (PyObject *)&DbpArrowImport_Type) < 0)
    return -1;
  return PyModule_AddFunctions(module, arrow_functions);
}
