/* dlbridge._accel: the compiled fast route. This file: the module (its globals, configure(), init).
 *
 * convert() (route.c) replays a conversion that dlbridge/_route/_replay.py has already decided: a CPU array
 * of a framework's own type, dense C order, no keyword but fallback= and readonly=. Everything else, and anything
 * unexpected on the way, goes to the full Python pipeline (_route._pipeline), which makes the same
 * decision with every check and message. So this code holds no framework knowledge and no error
 * messages: it reads what _route.py hands it (State, Producer and Replay records, records.c) and
 * declines whatever it does not recognise.
 *
 * Also: probe() (capsules.c), the capsule reader's Python form; Carrier (carrier.c), a single-use
 * object that hands a ready capsule to consumers that only take objects with __dlpack__; Route
 * (objects.c), the public to_<framework> functions' compiled form; State, Producer and Replay (records.c);
 * Routes, a mapping with the route's cache of it: a State's stored routes, and the Producers (routes.c);
 * Remember (views.c), the record of a view the route replays.
 *
 * CPython limited API 3.10 (abi3): one build serves every supported Python.
 */
#include "accel.h"

/* Set once by configure(). */
PyObject *g_producers;     /* Routes (or a dict): exact type -> Producer */
PyObject *g_pipeline;      /* _route._pipeline(spec, x, fallback, dtype, device, copy, stream, readonly) */
PyObject *g_views;         /* dict: id(view) -> record (_logical._entries) */
PyObject *g_default;       /* list [fallback name or None]: the default when no scope is open */
PyObject *g_fallbacks;     /* tuple of the fallback names, index = route key bits 32..35 */
PyObject *g_readonly;      /* tuple of the readonly= names ("keep", "drop"), index = route key bit 36 */
PyObject *g_fallback_names[15]; /* g_fallbacks' items (borrowed from it), read without a call */
Py_ssize_t g_fallback_count;
PyObject *g_readonly_names[2];  /* g_readonly's items (borrowed from it) */
PyObject *g_not_given;     /* the NOT_GIVEN sentinel */
PyObject *g_get_default;   /* get_default_fallback(): when the cell is None */
PyObject *g_versioned_kw;  /* {"max_version": (1, 3)} */
PyObject *g_versioned_names; /* ("max_version",) */
PyObject *g_version;       /* (1, 3) */
PyObject *g_empty;         /* () */
PyObject *g_dunder;        /* "__dlpack__" */
PyObject *g_stream;        /* "stream" */
PyObject *g_dtype;         /* "dtype" */
PyObject *g_view;          /* "view" */
PyObject *g_cpu;           /* (1, 0) */
PyObject *g_carrier_type;

/* configure(producers, views, default_cell, fallbacks, not_given, get_default, pipeline, readonly) */
static PyObject *configure(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *producers, *views, *cell, *fallbacks, *not_given, *get_default, *pipeline, *readonly;
    if (!PyArg_ParseTuple(args, "OO!O!O!OOOO!", &producers, &PyDict_Type, &views, &PyList_Type, &cell, &PyTuple_Type,
                          &fallbacks, &not_given, &get_default, &pipeline, &PyTuple_Type, &readonly))
        return NULL;
    if (!PyDict_Check(producers) && Py_TYPE(producers) != (PyTypeObject *)g_routes_type) {
        PyErr_SetString(PyExc_TypeError, "producers must be a dict or a dlbridge._accel.Routes");
        return NULL;
    }
    if (PyList_Size(cell) != 1) {
        PyErr_SetString(PyExc_ValueError, "default_cell must hold one item");
        return NULL;
    }
    if (PyTuple_Size(fallbacks) > 15 || PyTuple_Size(readonly) != 2) { /* the route key's bits (route.h) */
        PyErr_SetString(PyExc_ValueError, "fallbacks must be at most 15 names, readonly two");
        return NULL;
    }
    Py_INCREF(producers);
    Py_INCREF(views);
    Py_INCREF(cell);
    Py_INCREF(fallbacks);
    Py_INCREF(not_given);
    Py_INCREF(get_default);
    Py_INCREF(pipeline);
    Py_INCREF(readonly);
    XSETREF(g_pipeline, pipeline);
    XSETREF(g_readonly, readonly);
    XSETREF(g_get_default, get_default);
    XSETREF(g_producers, producers);
    XSETREF(g_views, views);
    XSETREF(g_default, cell);
    XSETREF(g_fallbacks, fallbacks);
    g_fallback_count = PyTuple_Size(fallbacks);
    for (Py_ssize_t i = 0; i < g_fallback_count; i++) g_fallback_names[i] = PyTuple_GetItem(fallbacks, i);
    for (Py_ssize_t i = 0; i < 2; i++) g_readonly_names[i] = PyTuple_GetItem(readonly, i);
    XSETREF(g_not_given, not_given);
    Py_RETURN_NONE;
}

static PyMethodDef accel_methods[] = {
    {"convert", (PyCFunction)(void (*)(void))convert, METH_FASTCALL,
     "convert(spec, x, fallback, dtype, device, copy, stream[, readonly]): the fast route, else _route._pipeline."},
    {"probe", probe, METH_O, "probe(capsule): the capsule's raw fields, or None for the Python reader to judge."},
    {"configure", configure, METH_VARARGS,
     "configure(producers, views, default_cell, fallbacks, not_given, get_default, pipeline, readonly)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef accel_module = {
    PyModuleDef_HEAD_INIT, "dlbridge._accel", "dlbridge's compiled fast route", -1, accel_methods, NULL, NULL, NULL, NULL,
};

/* LAYOUT: the DLPack struct offsets as compiled (tests compare them with dlbridge/_capsule/_layout.py). */
static int add_layout(PyObject *m) {
    PyObject *layout = layout_offsets();
    if (layout == NULL) return -1;
    int rc = PyModule_AddObjectRef(m, "LAYOUT", layout);
    Py_DECREF(layout);
    return rc;
}

PyMODINIT_FUNC PyInit__accel(void) {
    PyObject *m = PyModule_Create(&accel_module);
    if (m == NULL) return NULL;
    g_carrier_type = PyType_FromSpec(&carrier_spec);
    PyObject *route_type = PyType_FromSpec(&route_spec);
    if (objects_init() < 0 || records_init(m) < 0 || views_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    /* (the vectorcall member has set the type's offset: out of the namespace, so that a Route does not show
     * its function pointer as an attribute) */
    if (route_type == NULL || PyObject_DelAttrString(route_type, "__vectorcalloffset__") < 0 ||
        PyModule_AddObject(m, "Route", route_type) < 0) {
        Py_XDECREF(route_type);
        Py_DECREF(m);
        return NULL;
    }
    g_empty = PyTuple_New(0);
    g_dunder = PyUnicode_InternFromString("__dlpack__");
    g_stream = PyUnicode_InternFromString("stream");
    g_deferred_type = PyType_FromSpec(&deferred_spec);
    g_declined = PyErr_NewException("dlbridge._accel.Declined", PyExc_Exception, NULL);
    g_dtype = PyUnicode_InternFromString("dtype");
    g_view = PyUnicode_InternFromString("view");
    if (g_dtype == NULL || g_view == NULL) return NULL;
    g_cpu = Py_BuildValue("(ii)", 1, 0);
    PyObject *version = Py_BuildValue("(ii)", 1, 3);
    g_version = Py_XNewRef(version);
    /* interned: a producer's keyword parser compares names by identity first (NumPy's npy_parse_arguments) */
    PyObject *name = PyUnicode_InternFromString("max_version");
    g_versioned_names = name != NULL ? PyTuple_Pack(1, name) : NULL;
    Py_XDECREF(name);
    g_versioned_kw = PyDict_New();
    if (g_carrier_type == NULL || g_empty == NULL || g_dunder == NULL || g_cpu == NULL || version == NULL ||
        g_stream == NULL || g_deferred_type == NULL || g_declined == NULL || g_versioned_names == NULL ||
        PyModule_AddObjectRef(m, "Deferred", g_deferred_type) < 0 || PyModule_AddObjectRef(m, "Declined", g_declined) < 0 ||
        g_versioned_kw == NULL || PyDict_SetItem(g_versioned_kw, PyTuple_GetItem(g_versioned_names, 0), version) < 0 ||
        PyModule_AddIntConstant(m, "ABI", ACCEL_ABI) < 0 || add_layout(m) < 0 ||
        PyModule_AddObjectRef(m, "Carrier", g_carrier_type) < 0) {
        Py_XDECREF(version);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(version);
    return m;
}
