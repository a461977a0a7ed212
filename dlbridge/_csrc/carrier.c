/* Carrier: hands a ready capsule to a consumer that only takes objects with __dlpack__ (the route's own
 * handshake with the producer is done, so the consumer's keywords are not needed). Single use. */
#include "accel.h"

typedef struct { PyObject_HEAD PyObject *capsule; PyObject *device; } Carrier;

PyObject *make_carrier(PyObject *capsule, PyObject *device) {
    PyTypeObject *type = (PyTypeObject *)g_carrier_type;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    Carrier *self = (Carrier *)alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(capsule);
    Py_INCREF(device);
    self->capsule = capsule;
    self->device = device;
    return (PyObject *)self;
}

static PyObject *carrier_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *capsule, *device;
    static char *names[] = {"capsule", "device", NULL};
    (void)type; /* not subclassable: always g_carrier_type */
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO", names, &capsule, &device)) return NULL;
    return make_carrier(capsule, device);
}

static void carrier_dealloc(PyObject *obj) {
    Carrier *self = (Carrier *)obj;
    PyTypeObject *type = Py_TYPE(obj);
    Py_CLEAR(self->capsule);
    Py_CLEAR(self->device);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(obj);
    Py_DECREF(type);
}

static PyObject *carrier_dlpack(PyObject *obj, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    /* The handshake with the real producer is done: the consumer's keywords are not needed. */
    Carrier *self = (Carrier *)obj;
    PyObject *capsule = self->capsule;
    (void)args;
    (void)nargs;
    (void)kwnames;
    if (capsule == NULL || capsule == Py_None) {
        PyObject *errors = PyImport_ImportModule("dlbridge._errors");
        PyObject *cls = errors ? PyObject_GetAttrString(errors, "CapsuleError") : NULL;
        Py_XDECREF(errors);
        if (cls != NULL) {
            PyErr_SetString(cls, "this capsule was already handed to a consumer");
            Py_DECREF(cls);
        }
        return NULL;
    }
    self->capsule = NULL;
    return capsule; /* the reference moves to the caller */
}

static PyObject *carrier_device(PyObject *obj, PyObject *unused) {
    (void)unused;
    PyObject *device = ((Carrier *)obj)->device;
    Py_INCREF(device);
    return device;
}

static PyMethodDef carrier_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))carrier_dlpack, METH_FASTCALL | METH_KEYWORDS,
     "The capsule, once."},
    {"__dlpack_device__", carrier_device, METH_NOARGS, "The capsule's device."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot carrier_slots[] = {
    {Py_tp_new, carrier_new},
    {Py_tp_dealloc, carrier_dealloc},
    {Py_tp_methods, carrier_methods},
    {Py_tp_doc, "Carrier(capsule, device): hands a ready capsule to a consumer that only takes "
                "objects with __dlpack__. Single use, like the capsule."},
    {0, NULL},
};

PyType_Spec carrier_spec = {
    "dlbridge._accel.Carrier", sizeof(Carrier), 0, Py_TPFLAGS_DEFAULT, carrier_slots,
};


