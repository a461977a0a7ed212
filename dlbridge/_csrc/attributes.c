/* The two attributes the route reads from x on every call, read without the generic attribute lookup where
 * x's class makes that safe: its __dlpack__ (called as the class's own C method) and its dtype (read through
 * the class's own getset). Each is looked up once per Producer, for the first exact type it meets, and kept
 * in the Producer (records.c releases it). See route.c for the ownership and error rules. */
#include "route.h"

/* A method descriptor (a C method of a class), as `type(str.join)` is; a getset descriptor (a C attribute of
 * a class), as `type(type.__dict__["__name__"])` is. Read once. */
static PyObject *g_method_descriptor, *g_getset_descriptor;

static int descriptor_types(void) {
    if (g_method_descriptor != NULL) return 0;
    PyObject *join = PyObject_GetAttrString((PyObject *)&PyUnicode_Type, "join");
    PyObject *space = PyObject_GetAttrString((PyObject *)&PyType_Type, "__dict__");
    PyObject *name = space != NULL ? PyMapping_GetItemString(space, "__name__") : NULL;
    if (join != NULL && name != NULL) {
        g_getset_descriptor = Py_NewRef((PyObject *)Py_TYPE(name));
        g_method_descriptor = Py_NewRef((PyObject *)Py_TYPE(join)); /* (set last: the guard above) */
    }
    Py_XDECREF(join);
    Py_XDECREF(space);
    Py_XDECREF(name);
    return g_method_descriptor != NULL ? 0 : -1;
}

/* `type`'s own namespace entry `name`, of type `kind`, where getattr(x, name) is that entry's binding to x
 * for every x of exactly `type`, and always will be: an immutable class (nothing can be set on it) whose own
 * namespace holds it (so the lookup through the class's bases finds it first), instances without a
 * __dict__, the generic attribute lookup, and the metaclass `type`. A new reference, Py_None where not so,
 * NULL with an error. */
static PyObject *own_entry(PyObject *type, const char *name, PyObject *const *kind) {
    PyTypeObject *t = (PyTypeObject *)type;
    if (Py_TYPE(type) != &PyType_Type || !(PyType_GetFlags(t) & Py_TPFLAGS_IMMUTABLETYPE) ||
        PyType_GetSlot(t, Py_tp_getattro) != (void *)PyObject_GenericGetAttr)
        Py_RETURN_NONE;
    if (descriptor_types() < 0) return NULL;
    PyObject *offset = PyObject_GetAttrString(type, "__dictoffset__");
    long dict_offset = offset != NULL ? PyLong_AsLong(offset) : -1;
    Py_XDECREF(offset);
    if (dict_offset == -1 && PyErr_Occurred()) return NULL;
    PyObject *space = dict_offset == 0 ? PyObject_GetAttrString(type, "__dict__") : NULL;
    PyObject *entry = space != NULL ? PyMapping_GetItemString(space, name) : NULL;
    Py_XDECREF(space);
    if (entry == NULL && PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_KeyError)) PyErr_Clear();
    if (entry == NULL) return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    if ((PyObject *)Py_TYPE(entry) != *kind) SETREF(entry, Py_NewRef(Py_None));
    return entry;
}

/* The C function of `method` (own_entry()'s) where it takes METH_FASTCALL | METH_KEYWORDS, read from its
 * binding to `source` (a builtin method of the same method definition); NULL where not so, or with an error. */
static void *fastcall_of(PyObject *source) {
    PyObject *bound = PyObject_GetAttr(source, g_dunder);
    void *function = NULL;
    if (bound != NULL && PyCFunction_Check(bound) && PyCFunction_GetSelf(bound) == source &&
        PyCFunction_GetFlags(bound) == (METH_FASTCALL | METH_KEYWORDS))
        function = (void *)PyCFunction_GetFunction(bound);
    Py_XDECREF(bound);
    return function;
}

/* Remember type(source)'s own __dlpack__ in the Producer (its first export). 0, or -1 with an error. */
int learn_method(ProducerRecord *p, PyObject *source) {
    PyObject *type = (PyObject *)Py_TYPE(source);
    PyObject *method = own_entry(type, "__dlpack__", &g_method_descriptor);
    void *function = method != NULL && method != Py_None ? fastcall_of(source) : NULL;
    if ((method == NULL || PyErr_Occurred()) && settle() == STEP_ERROR) { /* (an Exception: getattr) */
        Py_XDECREF(method);
        return -1;
    }
    if (method != NULL && p->method_type == NULL) { /* (not set meanwhile by a call the lookup ran) */
        p->method_type = Py_NewRef(type);
        p->method = method;
        p->fastcall = function;
    } else {
        Py_XDECREF(method);
    }
    return 0;
}

/* x.__dlpack__(**kwargs) for the Producer's EXPORT_METHOD kinds where its C function is not called directly
 * (steps.c's export_tensor calls that, with call_fast, where it takes keywords by vector: NumPy's): through
 * the class's own method where learn_method() found one for x's exact type, else getattr. */
PyObject *call_dunder(Call *c, PyObject *source, int versioned) {
    ProducerRecord *p = c->producer;
    PyObject *type = (PyObject *)Py_TYPE(source), *kwargs = versioned ? g_versioned_kw : NULL;
    if (p->method_type == type && p->method != Py_None) {
        PyObject *method = p->method, *args = PyTuple_Pack(1, source), *capsule = NULL;
        Py_INCREF(method); /* owned across the call into Python */
        if (args != NULL) capsule = PyObject_Call(method, args, kwargs);
        Py_XDECREF(args);
        Py_DECREF(method);
        return capsule;
    }
    PyObject *method = PyObject_GetAttr(source, g_dunder);
    PyObject *capsule = method ? PyObject_Call(method, g_empty, kwargs) : NULL;
    Py_XDECREF(method);
    return capsule;
}

/* x.dtype: through the getset x's exact type defines itself where own_entry() found one (remembered in the
 * Producer the first time: NumPy's ndarray), as the generic lookup would call it; else getattr. A new
 * reference, or NULL with an error. */
PyObject *read_dtype(Call *c, PyObject *x) {
    ProducerRecord *p = c->producer;
    PyObject *type = (PyObject *)Py_TYPE(x);
    if (p->dtype_type == NULL) {
        PyObject *getset = own_entry(type, "dtype", &g_getset_descriptor);
        if ((getset == NULL || PyErr_Occurred()) && settle() == STEP_ERROR) {
            Py_XDECREF(getset);
            return NULL;
        }
        if (getset != NULL && p->dtype_type == NULL) { /* (not set meanwhile by a call the lookup ran) */
            p->dtype_type = Py_NewRef(type);
            p->dtype_getset = getset;
            p->dtype_get = getset != Py_None ? (descrgetfunc)PyType_GetSlot(Py_TYPE(getset), Py_tp_descr_get) : NULL;
        } else {
            Py_XDECREF(getset);
        }
    }
    if (p->dtype_type == type && p->dtype_get != NULL) return p->dtype_get(p->dtype_getset, x, type);
    return PyObject_GetAttr(x, g_dtype);
}
