/* Remember: the fast route's last step for a view it replays (Replay.finish), in C. It records the logical
 * dtype of the array the consumer imported exactly as dlbridge/_pipeline/_logical.py's `remembering` does
 * (its Python twin, used where this module is not built): the view's data address (read through an
 * attribute path the consumer's adapter gives: FastRoute.fast_view_address) and shape, the fingerprint of
 * dense C-order memory, and a record in the view registry, laid out as _logical.py's docstring says:
 *
 *   entries[id(view)] = ref, ref = View(view, forget), ref.key = id(view), ref.logical, ref.memory
 *
 * The sweep is _logical.py's `_sweep`: the dead references waiting are popped one at a time and removed
 * with _weakref._remove_dead_weakref (a builtin) here; the full scan, at the registry's scan size, is
 * the Python function's. Errors propagate (the route's finish: the result
 * exists, so a failed finish is an error); a view that cannot be weakly referenced is not recorded. */
#include "accel.h"

typedef struct {
    PyObject_HEAD
    PyObject *path;     /* tuple of (attribute name, call?): view -> its data address */
    PyObject *logical;  /* the logical dtype's name */
    PyObject *bits;     /* the wire dtype's bits * lanes */
    PyObject *registry; /* (entries, View, forget, dead, scan_at, sweep, remove_dead_weakref) */
} Remember;

enum { REG_ENTRIES, REG_VIEW, REG_FORGET, REG_DEAD, REG_SCAN_AT, REG_SWEEP, REG_REMOVE, REG_SIZE };

static PyObject *g_shape, *g_key, *g_logical, *g_memory;

static PyObject *remember_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *path, *logical, *bits, *registry;
    static char *names[] = {"path", "logical", "bits", "registry", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!UO!O!", names, &PyTuple_Type, &path, &logical, &PyLong_Type,
                                     &bits, &PyTuple_Type, &registry))
        return NULL;
    int ok = PyTuple_Size(registry) == REG_SIZE && PyTuple_Size(path) > 0;
    for (Py_ssize_t i = 0; ok && i < PyTuple_Size(path); i++) {
        PyObject *step = PyTuple_GetItem(path, i);
        ok = PyTuple_Check(step) && PyTuple_Size(step) == 2 && PyUnicode_Check(PyTuple_GetItem(step, 0));
    }
    if (ok) {
        PyObject *entries = PyTuple_GetItem(registry, REG_ENTRIES), *dead = PyTuple_GetItem(registry, REG_DEAD);
        PyObject *scan_at = PyTuple_GetItem(registry, REG_SCAN_AT);
        ok = PyDict_Check(entries) && PyList_Check(dead) && PyList_Check(scan_at) && PyList_Size(scan_at) == 1;
    }
    if (!ok) {
        PyErr_SetString(PyExc_TypeError, "Remember(path, logical, bits, registry): path is a non-empty tuple of "
                        "(name, call) pairs; registry is (entries, View, forget, dead, scan_at, sweep, "
                        "remove_dead_weakref)");
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    Remember *self = (Remember *)alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(path);
    Py_INCREF(logical);
    Py_INCREF(bits);
    Py_INCREF(registry);
    self->path = path;
    self->logical = logical;
    self->bits = bits;
    self->registry = registry;
    return (PyObject *)self;
}

static void remember_dealloc(PyObject *obj) {
    Remember *self = (Remember *)obj;
    PyTypeObject *type = Py_TYPE(obj);
    Py_CLEAR(self->path);
    Py_CLEAR(self->logical);
    Py_CLEAR(self->bits);
    Py_CLEAR(self->registry);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(obj);
    Py_DECREF(type);
}

/* The view's data address: each (name, call) step of the path in turn, the last value as an int. */
static PyObject *address_of(const Remember *self, PyObject *view) {
    PyObject *value = view;
    Py_INCREF(value);
    for (Py_ssize_t i = 0, n = PyTuple_Size(self->path); value != NULL && i < n; i++) {
        PyObject *step = PyTuple_GetItem(self->path, i);
        PyObject *next = PyObject_GetAttr(value, PyTuple_GetItem(step, 0));
        int call = next != NULL ? PyObject_IsTrue(PyTuple_GetItem(step, 1)) : 0;
        if (next != NULL && call) SETREF(next, PyObject_CallNoArgs(next));
        if (call < 0) Py_CLEAR(next);
        SETREF(value, next); /* (NULL on an error: the loop ends) */
    }
    if (value != NULL) SETREF(value, PyNumber_Index(value));
    return value;
}

/* (address, shape, strides, bits): dense C order, size-1 dimensions' strides 0; an empty array (0, shape, (), bits)
 * (_logical.py's _fingerprint with strides None). */
static PyObject *fingerprint(PyObject *address, PyObject *shape, PyObject *bits) {
    Py_ssize_t ndim = PyTuple_Size(shape);
    long long dims[MAX_NDIM];
    int empty = 0;
    if (ndim > MAX_NDIM) {
        PyErr_SetString(PyExc_ValueError, "a view with more dimensions than DLPack capsules dlbridge reads");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < ndim; i++) {
        dims[i] = PyLong_AsLongLong(PyTuple_GetItem(shape, i));
        if (dims[i] == -1 && PyErr_Occurred()) return NULL;
        empty |= dims[i] == 0;
    }
    PyObject *strides = PyTuple_New(empty ? 0 : ndim), *zero = NULL, *memory = NULL;
    long long step = 1;
    for (Py_ssize_t i = ndim - 1; strides != NULL && !empty && i >= 0; i--) {
        PyObject *stride = PyLong_FromLongLong(dims[i] == 1 ? 0 : step);
        if (stride == NULL || PyTuple_SetItem(strides, i, stride) < 0) Py_CLEAR(strides); /* (SetItem steals) */
        step *= dims[i];
    }
    if (strides != NULL && empty) zero = PyLong_FromLong(0);
    if (strides != NULL && (zero != NULL || !empty)) memory = PyTuple_Pack(4, empty ? zero : address, shape, strides, bits);
    Py_XDECREF(zero);
    Py_XDECREF(strides);
    return memory;
}

/* _sweep's first part: each dead reference popped (one list operation) and its key removed while its value is
 * a dead reference (a newer record under a reused id is never removed). */
static int sweep_dead(PyObject *registry) {
    PyObject *dead = PyTuple_GetItem(registry, REG_DEAD), *entries = PyTuple_GetItem(registry, REG_ENTRIES);
    PyObject *remove = PyTuple_GetItem(registry, REG_REMOVE);
    int rc = 0;
    for (Py_ssize_t n = PyList_Size(dead); rc == 0 && n > 0; n = PyList_Size(dead)) {
        PyObject *ref = PyList_GetItem(dead, n - 1);
        Py_XINCREF(ref);
        if (ref == NULL || PyList_SetSlice(dead, n - 1, n, NULL) < 0) {
            rc = -1;
        } else {
            PyObject *key = PyObject_GetAttr(ref, g_key);
            PyObject *done = key != NULL ? PyObject_CallFunctionObjArgs(remove, entries, key, NULL) : NULL;
            rc = done != NULL ? 0 : -1;
            Py_XDECREF(done);
            Py_XDECREF(key);
        }
        Py_XDECREF(ref);
    }
    return rc;
}

/* The record: swept first where _record sweeps, then View(view, forget) with its key, logical and memory,
 * complete before it is stored. 1 recorded, 0 not (no weak reference to it), -1 an error. */
static int record(const Remember *self, PyObject *view, PyObject *memory) {
    PyObject *entries = PyTuple_GetItem(self->registry, REG_ENTRIES);
    Py_ssize_t scan_at = PyLong_AsSsize_t(PyList_GetItem(PyTuple_GetItem(self->registry, REG_SCAN_AT), 0));
    if (scan_at == -1 && PyErr_Occurred()) return -1;
    if (sweep_dead(self->registry) < 0) return -1;
    if (PyDict_Size(entries) >= scan_at) {
        PyObject *sweep = PyTuple_GetItem(self->registry, REG_SWEEP), *done;
        Py_INCREF(sweep); /* owned across the call into Python */
        done = PyObject_CallNoArgs(sweep);
        Py_DECREF(sweep);
        if (done == NULL) return -1;
        Py_DECREF(done);
    }
    PyObject *ref = PyObject_CallFunctionObjArgs(PyTuple_GetItem(self->registry, REG_VIEW), view,
                                                 PyTuple_GetItem(self->registry, REG_FORGET), NULL);
    if (ref == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
        PyErr_Clear(); /* cannot be weakly referenced: not recorded, as _record says */
        return 0;
    }
    PyObject *key = PyLong_FromVoidPtr(view);
    int rc = key != NULL && PyObject_SetAttr(ref, g_key, key) == 0 && PyObject_SetAttr(ref, g_logical, self->logical) == 0 &&
                     PyObject_SetAttr(ref, g_memory, memory) == 0 && PyDict_SetItem(entries, key, ref) == 0
                 ? 1
                 : -1;
    Py_XDECREF(key);
    Py_DECREF(ref);
    return rc;
}

/* Remember(path, logical, bits, registry)(view): view, its logical dtype recorded. */
static PyObject *remember_call(PyObject *obj, PyObject *args, PyObject *kwargs) {
    Remember *self = (Remember *)obj;
    if (kwargs != NULL || PyTuple_Size(args) != 1) {
        PyErr_SetString(PyExc_TypeError, "Remember(...)(view) takes the view only");
        return NULL;
    }
    PyObject *view = PyTuple_GetItem(args, 0), *shape = NULL, *memory = NULL, *result = NULL;
    Py_INCREF(self); /* (its fields are read across calls into Python) */
    PyObject *address = address_of(self, view);
    PyObject *dims = address != NULL ? PyObject_GetAttr(view, g_shape) : NULL;
    if (dims != NULL) shape = PySequence_Tuple(dims);
    if (shape != NULL) memory = fingerprint(address, shape, self->bits);
    if (memory != NULL && record(self, view, memory) >= 0) {
        Py_INCREF(view);
        result = view;
    }
    Py_XDECREF(memory);
    Py_XDECREF(shape);
    Py_XDECREF(dims);
    Py_XDECREF(address);
    Py_DECREF(self);
    return result;
}

static PyType_Slot remember_slots[] = {
    {Py_tp_new, remember_new},
    {Py_tp_dealloc, remember_dealloc},
    {Py_tp_call, remember_call},
    {Py_tp_doc, "Remember(path, logical, bits, registry): called with a view the route imported, records its "
                "logical dtype in the view registry (dlbridge/_pipeline/_logical.py) and returns it."},
    {0, NULL},
};

PyType_Spec remember_spec = {"dlbridge._accel.Remember", sizeof(Remember), 0, Py_TPFLAGS_DEFAULT, remember_slots};

int views_init(PyObject *module) {
    g_shape = PyUnicode_InternFromString("shape");
    g_key = PyUnicode_InternFromString("key");
    g_logical = PyUnicode_InternFromString("logical");
    g_memory = PyUnicode_InternFromString("memory");
    PyObject *type = PyType_FromSpec(&remember_spec);
    int rc = g_shape && g_key && g_logical && g_memory && type ? PyModule_AddObjectRef(module, "Remember", type) : -1;
    Py_XDECREF(type);
    return rc;
}
