/* Routes: a mapping over a dict it never hands out, with a small cache in front of it for the route's lookups:
 * a State's stored routes (route key -> Replay or None; routes_get), and the Producers (exact type -> Producer;
 * table_get). Every change goes through its own methods, which empty the cache first and keep it out of use
 * until they return (a change may release a value, which may run Python code that converts), so a cached value
 * is always the one the mapping holds. Reads (get, items, keys, values, copy, len, in, iteration, [key]) are
 * the dict's.
 */
#include "accel.h"

#define ROUTE_CACHE 8
typedef struct {
    PyObject_HEAD
    PyObject *dict;                      /* route key (int) -> Replay or None; or type -> Producer */
    long long keys[ROUTE_CACHE];         /* the cached keys (an int key, or an object key's address) ... */
    PyObject *objects[ROUTE_CACHE];      /* ... an object key itself (strong: its address stays its own), NULL
                                            for an int key ... */
    PyObject *values[ROUTE_CACHE];       /* ... and their values (strong references; NULL: an empty slot) */
    int changing;                        /* changes under way: the cache is empty and not used meanwhile */
    unsigned long changes;               /* changes begun so far: a lookup that ran Python code which changed the
                                            mapping does not cache what it found */
} RoutesObject;

PyObject *g_routes_type;

static int cache_slot(long long key) { return (int)((key ^ (key >> 16) ^ (key >> 32)) & (ROUTE_CACHE - 1)); }

/* Empties the cache (before any change to the dict): the values are released after their slots are cleared,
 * as a release may run Python code. */
static void forget(RoutesObject *r) {
    PyObject *old[2 * ROUTE_CACHE];
    for (int i = 0; i < ROUTE_CACHE; i++) {
        old[i] = r->values[i];
        old[ROUTE_CACHE + i] = r->objects[i];
        r->values[i] = r->objects[i] = NULL;
    }
    for (int i = 0; i < 2 * ROUTE_CACHE; i++) Py_XDECREF(old[i]);
}

/* `value` cached under `key` (and its object key, or NULL) in `slot`, replacing what was there. */
static void remember(RoutesObject *r, int slot, long long key, PyObject *object, PyObject *value) {
    PyObject *old_value = r->values[slot], *old_object = r->objects[slot];
    r->values[slot] = Py_NewRef(value);
    r->objects[slot] = Py_XNewRef(object);
    r->keys[slot] = key;
    Py_XDECREF(old_value);
    Py_XDECREF(old_object);
}

/* The value stored under `key` in a State's routes (a Routes or a dict): a new reference; NULL with no error
 * set where none is stored (*made then holds the key as an int, a new reference), NULL with an error on failure. */
PyObject *routes_get(PyObject *routes, long long key, PyObject **made) {
    *made = NULL;
    int mapping = Py_TYPE(routes) == (PyTypeObject *)g_routes_type;
    RoutesObject *r = (RoutesObject *)routes;
    int cached = mapping && r->changing == 0;
    if (mapping && r->dict == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "dlbridge._accel.Routes: cleared");
        return NULL;
    }
    int slot = cache_slot(key);
    if (cached && r->values[slot] != NULL && r->keys[slot] == key && r->objects[slot] == NULL) {
        Py_INCREF(r->values[slot]);
        return r->values[slot];
    }
    PyObject *number = PyLong_FromLongLong(key);
    if (number == NULL) return NULL;
    PyObject *found = PyDict_GetItemWithError(mapping ? r->dict : routes, number); /* (int keys: no Python runs) */
    if (found == NULL) {
        if (PyErr_Occurred()) Py_CLEAR(number);
        *made = number;
        return NULL;
    }
    Py_DECREF(number);
    Py_INCREF(found);
    if (cached) remember(r, slot, key, NULL, found);
    return found;
}

/* The value stored under object `key` in `table` (a Routes or a dict): a new reference, or NULL (with an error
 * set where the lookup failed). The cache knows a key by its address and holds the key, so that address stays
 * its own while cached; a lookup that ran Python code (a key's __hash__ or __eq__) which changed the mapping caches
 * nothing, and the table, its dict and the key are held across it (that code may release any of them). */
PyObject *table_get(PyObject *table, PyObject *key) {
    PyObject *found = NULL;
    if (Py_TYPE(table) != (PyTypeObject *)g_routes_type) {
        found = PyDict_GetItemWithError(table, key);
        Py_XINCREF(found);
        return found;
    }
    RoutesObject *r = (RoutesObject *)table;
    if (r->dict == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "dlbridge._accel.Routes: cleared");
        return NULL;
    }
    long long address = (long long)(uintptr_t)key;
    int slot = cache_slot(address >> 4); /* (an object's address: its low bits are alignment) */
    if (r->changing == 0 && r->objects[slot] == key && r->values[slot] != NULL) {
        found = r->values[slot];
        Py_INCREF(found);
        return found;
    }
    unsigned long changes = r->changes;
    PyObject *dict = r->dict;
    Py_INCREF(table);
    Py_INCREF(dict);
    Py_INCREF(key);
    found = PyDict_GetItemWithError(dict, key);
    Py_XINCREF(found);
    if (found != NULL && r->dict == dict && r->changing == 0 && r->changes == changes)
        remember(r, slot, address, key, found);
    Py_DECREF(key);
    Py_DECREF(dict);
    Py_DECREF(table);
    return found;
}

static PyObject *routes_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (kwargs != NULL && PyDict_Size(kwargs) > 0) {
        PyErr_SetString(PyExc_TypeError, "Routes() takes no arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, ":Routes")) return NULL;
    allocfunc tp_alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    RoutesObject *r = (RoutesObject *)tp_alloc(type, 0);
    if (r == NULL) return NULL;
    r->dict = PyDict_New();
    if (r->dict == NULL) Py_CLEAR(r);
    return (PyObject *)r;
}

static int routes_traverse(PyObject *o, visitproc visit, void *arg) {
    RoutesObject *r = (RoutesObject *)o;
    Py_VISIT(Py_TYPE(o));
    Py_VISIT(r->dict);
    for (int i = 0; i < ROUTE_CACHE; i++) {
        Py_VISIT(r->objects[i]);
        Py_VISIT(r->values[i]);
    }
    return 0;
}

static int routes_clear_refs(PyObject *o) {
    RoutesObject *r = (RoutesObject *)o;
    r->changing++; /* (no cache from here on) */
    forget(r);
    Py_CLEAR(r->dict);
    return 0;
}

static void routes_dealloc(PyObject *o) {
    PyTypeObject *type = Py_TYPE(o);
    PyObject_GC_UnTrack(o);
    routes_clear_refs(o);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(o);
    Py_DECREF(type);
}

/* The dict (borrowed), or NULL with an error once the mapping was cleared (a cycle the collector breaks). */
static PyObject *dict_of(PyObject *o) {
    PyObject *dict = ((RoutesObject *)o)->dict;
    if (dict == NULL) PyErr_SetString(PyExc_RuntimeError, "dlbridge._accel.Routes: cleared");
    return dict;
}
static Py_ssize_t routes_length(PyObject *o) { return dict_of(o) ? PyDict_Size(dict_of(o)) : -1; }
static PyObject *routes_subscript(PyObject *o, PyObject *key) {
    return dict_of(o) ? PyObject_GetItem(dict_of(o), key) : NULL;
}
static int routes_contains(PyObject *o, PyObject *key) { return dict_of(o) ? PyDict_Contains(dict_of(o), key) : -1; }
static PyObject *routes_iter(PyObject *o) { return dict_of(o) ? PyObject_GetIter(dict_of(o)) : NULL; }
static PyObject *routes_repr(PyObject *o) { return dict_of(o) ? PyUnicode_FromFormat("Routes(%R)", dict_of(o)) : NULL; }

/* A change begins: the cache emptied and out of use until change_ends(); the dict, held meanwhile (a change
 * may release a value and run Python code), or NULL with an error. */
static PyObject *change_begins(RoutesObject *r) {
    PyObject *dict = r->dict;
    if (dict == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "dlbridge._accel.Routes: cleared");
        return NULL;
    }
    Py_INCREF(dict);
    r->changing++;
    r->changes++;
    forget(r);
    return dict;
}

static void change_ends(RoutesObject *r, PyObject *dict) {
    r->changing--;
    Py_DECREF(dict);
}

static int routes_ass_subscript(PyObject *o, PyObject *key, PyObject *value) {
    RoutesObject *r = (RoutesObject *)o;
    PyObject *dict = change_begins(r);
    if (dict == NULL) return -1;
    int rc = value != NULL ? PyDict_SetItem(dict, key, value) : PyDict_DelItem(dict, key);
    change_ends(r, dict);
    return rc;
}

/* A change by one of the dict's own methods (clear, pop, popitem, setdefault, update), the cache emptied first. */
static PyObject *routes_change(PyObject *o, const char *name, PyObject *args, PyObject *kwargs) {
    RoutesObject *r = (RoutesObject *)o;
    PyObject *dict = change_begins(r);
    if (dict == NULL) return NULL;
    PyObject *method = PyObject_GetAttrString(dict, name);
    PyObject *result = method != NULL ? PyObject_Call(method, args, kwargs) : NULL;
    Py_XDECREF(method);
    change_ends(r, dict);
    return result;
}

#define CHANGE(name)                                                                              \
    static PyObject *routes_##name(PyObject *o, PyObject *args, PyObject *kwargs) {             \
        return routes_change(o, #name, args, kwargs);                                             \
    }
CHANGE(clear)
CHANGE(pop)
CHANGE(popitem)
CHANGE(setdefault)
CHANGE(update)

/* The dict's read-only methods, called on it here: what they return is a value, a copy or a view (whose
 * .mapping is read-only), never the dict itself, as a bound method of it would be (its __self__), so nothing
 * changes the dict behind the cache. */
static PyObject *routes_read(PyObject *o, const char *name, PyObject *args, PyObject *kwargs) {
    PyObject *dict = dict_of(o);
    if (dict == NULL) return NULL;
    Py_INCREF(dict);
    PyObject *method = PyObject_GetAttrString(dict, name);
    PyObject *result = method != NULL ? PyObject_Call(method, args, kwargs) : NULL;
    Py_XDECREF(method);
    Py_DECREF(dict);
    return result;
}

#define READ(name)                                                                                \
    static PyObject *routes_##name(PyObject *o, PyObject *args, PyObject *kwargs) {             \
        return routes_read(o, #name, args, kwargs);                                               \
    }
static PyObject *routes_get_method(PyObject *o, PyObject *args, PyObject *kwargs) {
    return routes_read(o, "get", args, kwargs);
}
READ(items)
READ(keys)
READ(values)
READ(copy)

static PyMethodDef routes_methods[] = {
    {"clear", (PyCFunction)(void (*)(void))routes_clear, METH_VARARGS | METH_KEYWORDS, NULL},
    {"pop", (PyCFunction)(void (*)(void))routes_pop, METH_VARARGS | METH_KEYWORDS, NULL},
    {"popitem", (PyCFunction)(void (*)(void))routes_popitem, METH_VARARGS | METH_KEYWORDS, NULL},
    {"setdefault", (PyCFunction)(void (*)(void))routes_setdefault, METH_VARARGS | METH_KEYWORDS, NULL},
    {"update", (PyCFunction)(void (*)(void))routes_update, METH_VARARGS | METH_KEYWORDS, NULL},
    {"get", (PyCFunction)(void (*)(void))routes_get_method, METH_VARARGS | METH_KEYWORDS, NULL},
    {"items", (PyCFunction)(void (*)(void))routes_items, METH_VARARGS | METH_KEYWORDS, NULL},
    {"keys", (PyCFunction)(void (*)(void))routes_keys, METH_VARARGS | METH_KEYWORDS, NULL},
    {"values", (PyCFunction)(void (*)(void))routes_values, METH_VARARGS | METH_KEYWORDS, NULL},
    {"copy", (PyCFunction)(void (*)(void))routes_copy, METH_VARARGS | METH_KEYWORDS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot routes_slots[] = {
    {Py_tp_new, routes_new},
    {Py_tp_dealloc, routes_dealloc},
    {Py_tp_traverse, routes_traverse},
    {Py_tp_clear, routes_clear_refs},
    {Py_tp_methods, routes_methods},
    {Py_tp_iter, routes_iter},
    {Py_tp_repr, routes_repr},
    {Py_mp_length, routes_length},
    {Py_mp_subscript, routes_subscript},
    {Py_mp_ass_subscript, routes_ass_subscript},
    {Py_sq_contains, routes_contains},
    {Py_tp_doc, "Routes(): a State's stored routes (route key -> Replay or None), or the Producers (exact type -> "
                "Producer); a mapping whose changes go through its own methods, which keep the compiled route's cache "
                "of it current."},
    {0, NULL},
};

static PyType_Spec routes_spec = {"dlbridge._accel.Routes", sizeof(RoutesObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, routes_slots};

int routes_init(PyObject *module) {
    g_routes_type = PyType_FromSpec(&routes_spec);
    return g_routes_type != NULL ? PyModule_AddObjectRef(module, "Routes", g_routes_type) : -1;
}
