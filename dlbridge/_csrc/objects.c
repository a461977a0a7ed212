/* Route: a public to_<framework> function whose call enters convert() (route.c) directly. */
#include "accel.h"

/* --- Route: a public conversion function (to_numpy, ...) whose call enters convert() directly ---- */
typedef struct { PyObject_HEAD PyObject *spec; PyObject *wrapped; PyObject *doc; } Route;

static PyObject *g_keywords[6]; /* fallback, dtype, device, copy, stream, readonly: args[2..7] of convert() */

static PyObject *route_call(PyObject *obj, PyObject *args, PyObject *kwargs) {
    Route *self = (Route *)obj;
    PyObject *argv[8] = {self->spec, NULL, g_not_given ? g_not_given : Py_None, Py_None, Py_None, Py_None, Py_None,
                         NULL};
    /* Not configured yet: the route's Python side loads with the first conversion (dlbridge/_api.py), which
     * the function does; its TypeError for a call it cannot read. */
    if (g_pipeline == NULL || PyTuple_Size(args) != 1) return PyObject_Call(self->wrapped, args, kwargs);
    argv[1] = PyTuple_GetItem(args, 0);
    argv[7] = PyTuple_GetItem(g_readonly, 0); /* "keep" */
    if (kwargs != NULL) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            int found = 0;
            for (int i = 0; i < 6 && !found; i++) {
                if (key == g_keywords[i] || PyUnicode_Compare(key, g_keywords[i]) == 0) {
                    argv[2 + i] = value;
                    found = 1;
                }
            }
            if (PyErr_Occurred()) return NULL;
            if (!found) return PyObject_Call(self->wrapped, args, kwargs); /* its TypeError */
        }
    }
    return convert(NULL, argv, 8);
}

static PyObject *route_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *spec, *wrapped;
    static char *names[] = {"spec", "wrapped", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O", names, &PyList_Type, &spec, &wrapped)) return NULL;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    Route *self = (Route *)alloc(type, 0);
    if (self == NULL) return NULL;
    self->doc = PyObject_GetAttrString(wrapped, "__doc__");
    if (self->doc == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(spec);
    Py_INCREF(wrapped);
    self->spec = spec;
    self->wrapped = wrapped;
    return (PyObject *)self;
}

static void route_dealloc(PyObject *obj) {
    Route *self = (Route *)obj;
    PyTypeObject *type = Py_TYPE(obj);
    Py_CLEAR(self->spec);
    Py_CLEAR(self->wrapped);
    Py_CLEAR(self->doc);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(obj);
    Py_DECREF(type);
}

/* Introspection comes from the Python function it stands for (name, docstring, signature). */
static PyObject *route_getattro(PyObject *obj, PyObject *name) {
    Route *self = (Route *)obj;
    if (PyUnicode_CompareWithASCIIString(name, "__wrapped__") == 0) {
        Py_INCREF(self->wrapped);
        return self->wrapped;
    }
    if (PyUnicode_CompareWithASCIIString(name, "__doc__") == 0 ||
        PyUnicode_CompareWithASCIIString(name, "__module__") == 0)
        return PyObject_GetAttr(self->wrapped, name);
    PyObject *found = PyObject_GenericGetAttr(obj, name);
    if (found != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError)) return found;
    PyErr_Clear();
    return PyObject_GetAttr(self->wrapped, name);
}

static PyObject *route_repr(PyObject *obj) { return PyObject_Repr(((Route *)obj)->wrapped); }

/* Pickled and copied by reference, as the function it stands for: its qualified name, which pickle looks
 * up in its __module__ ("dlbridge": the same Route comes back); copy and deepcopy return it as it is. */
static PyObject *route_reduce(PyObject *obj, PyObject *unused) {
    (void)unused;
    return PyObject_GetAttrString(((Route *)obj)->wrapped, "__qualname__");
}

static PyMethodDef route_methods[] = {
    {"__reduce__", route_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

/* Not bound when stored on a class, like a builtin function; and so a routine to inspect and pydoc,
 * which then show the signature and docstring (help(dlbridge.to_numpy)). */
static PyObject *route_get(PyObject *obj, PyObject *instance, PyObject *owner) {
    (void)instance;
    (void)owner;
    Py_INCREF(obj);
    return obj;
}

/* __doc__ as an instance member, so that lookups bypassing getattro (pydoc) find the function's. */
static PyMemberDef route_members[] = {
    {"__doc__", T_OBJECT, offsetof(Route, doc), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot route_slots[] = {
    {Py_tp_members, route_members},
    {Py_tp_methods, route_methods},
    {Py_tp_new, route_new},
    {Py_tp_dealloc, route_dealloc},
    {Py_tp_call, route_call},
    {Py_tp_getattro, route_getattro},
    {Py_tp_repr, route_repr},
    {Py_tp_descr_get, route_get},
    {0, NULL},
};

PyType_Spec route_spec = {"dlbridge._accel.Route", sizeof(Route), 0, Py_TPFLAGS_DEFAULT, route_slots};

int objects_init(void) {
    const char *keywords[6] = {"fallback", "dtype", "device", "copy", "stream", "readonly"};
    for (int i = 0; i < 6; i++) {
        g_keywords[i] = PyUnicode_InternFromString(keywords[i]);
        if (g_keywords[i] == NULL) return -1;
    }
    return 0;
}
