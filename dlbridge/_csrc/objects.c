/* Route: a public to_<framework> function whose call enters convert() (route.c) directly. */
#include "accel.h"

/* --- Route: a public conversion function (to_numpy, ...) whose call enters convert() directly ---- */

/* The vectorcall protocol (PEP 590) for a heap type: a "__vectorcalloffset__" member and this flag, as the
 * limited API spells them from Python 3.12 on ("What's New In Python 3.12": Py_TPFLAGS_HAVE_VECTORCALL and
 * vectorcallfunc added to the limited API). CPython 3.10 and 3.11 read the same member and flag (dlbridge's
 * tests check that a Route takes vector calls on each Python it supports); their limited headers do not
 * name them, so this 3.10 abi3 build does. A call then hands the route its arguments as they lie on the
 * caller's stack, with no tuple or dict made for them. */
#define ROUTE_HAVE_VECTORCALL (1UL << 11)
#define ROUTE_ARGUMENTS_OFFSET ((size_t)1 << (8 * sizeof(size_t) - 1))
typedef PyObject *(*RouteVectorcall)(PyObject *, PyObject *const *, size_t, PyObject *);

typedef struct { PyObject_HEAD RouteVectorcall vectorcall; PyObject *spec; PyObject *wrapped; PyObject *doc; } Route;

static PyObject *g_keywords[6]; /* fallback, dtype, device, copy, stream, readonly: args[2..7] of convert() */

/* convert()'s arguments for a call of x alone; keyword values are placed by place_keyword(). */
static void route_args(Route *self, PyObject *x, PyObject *argv[8]) {
    argv[0] = self->spec;
    argv[1] = x;
    argv[2] = g_not_given ? g_not_given : Py_None;
    argv[3] = argv[4] = argv[5] = argv[6] = Py_None;
    argv[7] = g_readonly_names[0]; /* "keep" */
}

/* A keyword argument into argv: 1, or 0 where it is not one of the route's keywords. */
static int place_keyword(PyObject *argv[8], PyObject *key, PyObject *value) {
    for (int i = 0; i < 6; i++) {
        if (key == g_keywords[i] || (PyUnicode_Check(key) && PyUnicode_Compare(key, g_keywords[i]) == 0)) {
            argv[2 + i] = value;
            return 1;
        }
    }
    return 0;
}

/* Not configured yet: the route's Python side loads with the first conversion (dlbridge/_api.py), which
 * the function does; so does a call the route cannot read (the function's TypeError). */
static PyObject *route_call(PyObject *obj, PyObject *args, PyObject *kwargs) {
    Route *self = (Route *)obj;
    if (g_pipeline == NULL || PyTuple_Size(args) != 1) return PyObject_Call(self->wrapped, args, kwargs);
    PyObject *argv[8];
    route_args(self, PyTuple_GetItem(args, 0), argv);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (kwargs != NULL && PyDict_Next(kwargs, &pos, &key, &value))
        if (!place_keyword(argv, key, value)) return PyObject_Call(self->wrapped, args, kwargs);
    return convert(NULL, argv, 8);
}

/* The same call from a vector of arguments (positional, then the values of the keywords named in
 * `kwnames`); anything it does not read goes to route_call as a tuple and a dict. */
static PyObject *route_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Route *self = (Route *)obj;
    Py_ssize_t nargs = (Py_ssize_t)(nargsf & ~ROUTE_ARGUMENTS_OFFSET);
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_Size(kwnames) : 0;
    PyObject *argv[8];
    int read = g_pipeline != NULL && nargs == 1 && nkw >= 0;
    if (read) route_args(self, args[0], argv);
    for (Py_ssize_t i = 0; read && i < nkw; i++) read = place_keyword(argv, PyTuple_GetItem(kwnames, i), args[1 + i]);
    if (read) return convert(NULL, argv, 8);
    PyObject *tuple = nargs >= 0 ? PyTuple_New(nargs) : NULL, *dict = nkw > 0 ? PyDict_New() : NULL, *result = NULL;
    int ok = tuple != NULL && (nkw == 0 || dict != NULL);
    for (Py_ssize_t i = 0; ok && i < nargs; i++) {
        Py_INCREF(args[i]);
        ok = PyTuple_SetItem(tuple, i, args[i]) == 0;
    }
    for (Py_ssize_t i = 0; ok && i < nkw; i++) ok = PyDict_SetItem(dict, PyTuple_GetItem(kwnames, i), args[nargs + i]) == 0;
    if (ok) result = route_call(obj, tuple, dict);
    Py_XDECREF(tuple);
    Py_XDECREF(dict);
    return result;
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
    self->vectorcall = route_vectorcall;
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
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Route, vectorcall), READONLY, NULL},
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

PyType_Spec route_spec = {"dlbridge._accel.Route", sizeof(Route), 0, Py_TPFLAGS_DEFAULT | ROUTE_HAVE_VECTORCALL,
                          route_slots};

int objects_init(void) {
    const char *keywords[6] = {"fallback", "dtype", "device", "copy", "stream", "readonly"};
    for (int i = 0; i < 6; i++) {
        g_keywords[i] = PyUnicode_InternFromString(keywords[i]);
        if (g_keywords[i] == NULL) return -1;
    }
    return 0;
}
