/* The route's three records: State (a consumer's state), Producer (how a type is exported) and Replay
 * (a stored route). Immutable, built by keyword (dlbridge/_route/_replay.py builds them), read by name: route.c
 * reads their C fields after an exact type check; Python reads the same fields as read-only members,
 * and each type's `_fields` names them in order (the pure-Python classes in _route.py have the same).
 * Integer fields are C ints, converted once here, and so are what route.c would otherwise read again on
 * every call: an exchange API capsule's table, a Producer's guards (as Guard structs over its own tuple) and,
 * on first use, its type's own __dlpack__ (steps.c). The objects they hold never hold a record back, so
 * the records need no cycle collection; dealloc releases every reference. The State's stored routes (Routes,
 * with the route's cache in front of them) are in routes.c.
 */
#include "accel.h"

PyObject *g_state_type, *g_producer_type, *g_replay_type;

#define OBJ(type, field) {#field, T_OBJECT, offsetof(type, field), READONLY, NULL}

static PyMemberDef state_members[] = {
    OBJ(StateRecord, target),
    {"ready", T_BOOL, offsetof(StateRecord, ready), READONLY, NULL},
    {"kind", T_INT, offsetof(StateRecord, kind), READONLY, NULL},
    OBJ(StateRecord, importer),
    OBJ(StateRecord, api),
    {"versioned", T_BOOL, offsetof(StateRecord, versioned), READONLY, NULL},
    OBJ(StateRecord, routes),
    OBJ(StateRecord, caps_guard),
    OBJ(StateRecord, caps),
    OBJ(StateRecord, decide),
    OBJ(StateRecord, self_type),
    OBJ(StateRecord, self_import),
    OBJ(StateRecord, self_dtypes),
    OBJ(StateRecord, stream_query),
    {"deferred", T_BOOL, offsetof(StateRecord, deferred), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyMemberDef producer_members[] = {
    {"kind", T_INT, offsetof(ProducerRecord, kind), READONLY, NULL},
    OBJ(ProducerRecord, handle),
    OBJ(ProducerRecord, guards),
    OBJ(ProducerRecord, alias),
    OBJ(ProducerRecord, keep),
    OBJ(ProducerRecord, relabels),
    OBJ(ProducerRecord, gpu_guards),
    OBJ(ProducerRecord, device_method),
    {"device_type", T_INT, offsetof(ProducerRecord, device_type), READONLY, NULL},
    {"gpu_kind", T_INT, offsetof(ProducerRecord, gpu_kind), READONLY, NULL},
    OBJ(ProducerRecord, current_device),
    {"readonly", T_BOOL, offsetof(ProducerRecord, readonly), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyMemberDef replay_members[] = {
    OBJ(ReplayRecord, record),
    OBJ(ReplayRecord, finish),
    OBJ(ReplayRecord, importer),
    OBJ(ReplayRecord, unaligned),
    {"wire", T_LONGLONG, offsetof(ReplayRecord, wire), READONLY, NULL},
    {"triple", T_LONGLONG, offsetof(ReplayRecord, triple), READONLY, NULL},
    {"device_type", T_INT, offsetof(ReplayRecord, device_type), READONLY, NULL},
    {"device_id", T_INT, offsetof(ReplayRecord, device_id), READONLY, NULL},
    {"kinds", T_INT, offsetof(ReplayRecord, kinds), READONLY, NULL},
    {"readonly_ok", T_BOOL, offsetof(ReplayRecord, readonly_ok), READONLY, NULL},
    {"offset_ok", T_BOOL, offsetof(ReplayRecord, offset_ok), READONLY, NULL},
    {"align", T_LONG, offsetof(ReplayRecord, align), READONLY, NULL},
    {"clear_readonly", T_BOOL, offsetof(ReplayRecord, clear_readonly), READONLY, NULL},
    {"misaligned", T_BOOL, offsetof(ReplayRecord, misaligned), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* Every object field of a record holds a reference (None where not given). */
static void hold(PyObject *record, PyMemberDef *members) {
    for (PyMemberDef *m = members; m->name != NULL; m++) {
        if (m->type != T_OBJECT) continue;
        PyObject **slot = (PyObject **)((char *)record + m->offset);
        *slot = *slot != NULL ? *slot : Py_None;
        Py_INCREF(*slot);
    }
}

static void release(PyObject *record, PyMemberDef *members) {
    for (PyMemberDef *m = members; m->name != NULL; m++)
        if (m->type == T_OBJECT) Py_CLEAR(*(PyObject **)((char *)record + m->offset));
    PyTypeObject *type = Py_TYPE(record);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(record);
    Py_DECREF(type);
}

static void state_dealloc(PyObject *o) { release(o, state_members); }
static void producer_dealloc(PyObject *o) {
    ProducerRecord *p = (ProducerRecord *)o;
    PyMem_Free(p->checks);
    PyMem_Free(p->gpu_checks);
    p->checks = p->gpu_checks = NULL;
    Py_CLEAR(p->method_type);
    Py_CLEAR(p->method);
    p->fastcall = NULL;
    Py_CLEAR(p->dtype_type);
    Py_CLEAR(p->dtype_getset);
    p->dtype_get = NULL;
    Py_CLEAR(p->plain_kind);
    release(o, producer_members);
}
static void replay_dealloc(PyObject *o) { release(o, replay_members); }

/* A new record of `type` (its object fields NULL), or NULL with an error. */
static PyObject *alloc(PyTypeObject *type) {
    allocfunc tp_alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    return tp_alloc(type, 0);
}

/* A record whose arguments did not parse: its fields are borrowed (or NULL), so forget them first. */
static PyObject *discard(PyObject *record, PyMemberDef *members) {
    for (PyMemberDef *m = members; m->name != NULL; m++)
        if (m->type == T_OBJECT) *(PyObject **)((char *)record + m->offset) = NULL;
    Py_DECREF(record);
    return NULL;
}

static PyObject *refuse(PyObject *record, const char *what) {
    PyErr_Format(PyExc_TypeError, "dlbridge._accel.%s", what);
    Py_DECREF(record); /* its fields are held: released here */
    return NULL;
}

/* What route.c relies on without checking again. */
static PyObject *state_checked(StateRecord *s) {
    if (s->caps_guard != Py_None && (!PyTuple_Check(s->caps_guard) || PyTuple_Size(s->caps_guard) != 3 ||
                                     !PyUnicode_Check(PyTuple_GetItem(s->caps_guard, 1))))
        return refuse((PyObject *)s, "State(caps_guard=) must be (object, attribute name, value) or None");
    if (!s->ready) return (PyObject *)s;
    int routes = PyDict_Check(s->routes) || Py_TYPE(s->routes) == (PyTypeObject *)g_routes_type;
    if (!routes || !PyList_Check(s->self_dtypes))
        return refuse((PyObject *)s, "State: a ready state needs routes= a Routes or dict and self_dtypes= a list");
    if (!PyCallable_Check(s->importer) || !PyCallable_Check(s->decide))
        return refuse((PyObject *)s, "State: a ready state needs importer= and decide= callables");
    return (PyObject *)s;
}

/* An exchange API capsule's table, read once when its record is made. */
static void *table_of(PyObject *capsule) {
    return PyCapsule_IsValid(capsule, EXCHANGE) ? PyCapsule_GetPointer(capsule, EXCHANGE) : NULL;
}

/* A record's table of `capsule` (read when it was made), or the capsule's own, as PyCapsule_GetPointer. */
void *exchange_table(PyObject *capsule, void *table) {
    return table != NULL ? table : PyCapsule_GetPointer(capsule, EXCHANGE);
}

static PyObject *state_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"target", "ready", "kind", "importer", "api", "versioned", "routes", "caps_guard", "caps",
                            "decide", "self_type", "self_import", "self_dtypes", "stream_query", "deferred", NULL};
    StateRecord *s = (StateRecord *)alloc(type);
    if (s == NULL) return NULL;
    int ready = 0, versioned = 0, deferred = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OpiOOpOOOOOOOOp:State", names, &s->target, &ready, &s->kind,
                                     &s->importer, &s->api, &versioned, &s->routes, &s->caps_guard, &s->caps, &s->decide,
                                     &s->self_type, &s->self_import, &s->self_dtypes, &s->stream_query, &deferred))
        return discard((PyObject *)s, state_members);
    s->ready = (char)ready, s->versioned = (char)versioned, s->deferred = (char)deferred;
    hold((PyObject *)s, state_members);
    s->api_table = table_of(s->api);
    return state_checked(s);
}

/* The guards tuple read once into Guards (an empty tuple: one that never fails is not needed, NULL too), or
 * NULL where any guard is not a plain (attribute or object, True or False, expected[, unless]) tuple: then
 * check_guards reads the tuple each time, as it always did. -1 with an error (no memory). */
static int prepare(PyObject *guards, Guard **out) {
    *out = NULL;
    Py_ssize_t n = guards != Py_None ? PyTuple_Size(guards) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *guard = PyTuple_GetItem(guards, i);
        Py_ssize_t size = PyTuple_Check(guard) ? PyTuple_Size(guard) : 0;
        PyObject *call = size == 3 || size == 4 ? PyTuple_GetItem(guard, 1) : NULL;
        if (call != Py_True && call != Py_False) return 0;
    }
    if (n == 0) return 0;
    Guard *checks = PyMem_Calloc((size_t)n, sizeof(Guard));
    if (checks == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *guard = PyTuple_GetItem(guards, i);
        checks[i].name = PyTuple_GetItem(guard, 0);
        checks[i].call = PyTuple_GetItem(guard, 1) == Py_True;
        checks[i].expected = PyTuple_GetItem(guard, 2);
        checks[i].unless = PyTuple_Size(guard) == 4 ? PyTuple_GetItem(guard, 3) : NULL;
        checks[i].named = (char)PyUnicode_Check(checks[i].name);
        checks[i].last = i == n - 1;
    }
    *out = checks;
    return 0;
}

/* The classes of the relabels' keys (borrowed: each key holds its class), at most RELABEL_KINDS of them;
 * else -1, and the route looks every dtype up. Read once: the route matches a dtype's class against them
 * before it hashes the dtype. */
static void relabel_kinds(ProducerRecord *p) {
    PyObject *key, *value;
    Py_ssize_t at = 0;
    p->relabel_kind_count = 0;
    while (p->relabels != Py_None && p->relabel_kind_count >= 0 && PyDict_Next(p->relabels, &at, &key, &value)) {
        int n = p->relabel_kind_count, known = 0;
        for (int i = 0; i < n && !known; i++) known = p->relabel_kinds[i] == (PyObject *)Py_TYPE(key);
        if (!known && n == RELABEL_KINDS) p->relabel_kind_count = -1;
        if (!known && n < RELABEL_KINDS) p->relabel_kinds[p->relabel_kind_count++] = (PyObject *)Py_TYPE(key);
    }
}

static PyObject *producer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"kind", "handle", "guards", "alias", "relabels", "gpu_guards", "device_method",
                            "device_type", "gpu_kind", "current_device", "readonly", "keep", NULL};
    ProducerRecord *p = (ProducerRecord *)alloc(type);
    if (p == NULL) return NULL;
    p->gpu_kind = EXPORT_METHOD;
    int readonly = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$iOOOOOOiiOpO:Producer", names, &p->kind, &p->handle, &p->guards,
                                     &p->alias, &p->relabels, &p->gpu_guards, &p->device_method, &p->device_type,
                                     &p->gpu_kind, &p->current_device, &readonly, &p->keep))
        return discard((PyObject *)p, producer_members);
    p->readonly = (char)readonly;
    if (p->guards == NULL) p->guards = g_empty;
    hold((PyObject *)p, producer_members);
    p->handle_table = table_of(p->handle);
    if ((p->guards != Py_None && !PyTuple_Check(p->guards)) || (p->gpu_guards != Py_None && !PyTuple_Check(p->gpu_guards)))
        return refuse((PyObject *)p, "Producer(guards=, gpu_guards=) must be tuples or None");
    if (p->gpu_guards != Py_None && !PyUnicode_Check(p->device_method))
        return refuse((PyObject *)p, "Producer(device_method=) must be a str where gpu_guards is given");
    if (p->current_device != Py_None && !PyCallable_Check(p->current_device))
        return refuse((PyObject *)p, "Producer(current_device=) must be callable or None");
    if ((p->alias != Py_None && !PyUnicode_Check(p->alias)) || (p->keep != Py_None && !PyUnicode_Check(p->keep)))
        return refuse((PyObject *)p, "Producer(alias=, keep=) must be str or None");
    if (p->relabels != Py_None && !PyDict_Check(p->relabels))
        return refuse((PyObject *)p, "Producer(relabels=) must be a dict or None");
    relabel_kinds(p);
    if (prepare(p->guards, &p->checks) < 0 || prepare(p->gpu_guards, &p->gpu_checks) < 0) {
        Py_DECREF(p);
        return NULL;
    }
    return (PyObject *)p;
}

/* An integer field of the record's Admission into *out, within [low, high]; -1 with an error set otherwise. */
static int admission_field(PyObject *admits, const char *name, long long low, long long high, long long *out) {
    PyObject *value = PyObject_GetAttrString(admits, name);
    if (value == NULL) return -1;
    *out = PyLong_AsLongLong(value); /* bools are ints */
    Py_DECREF(value);
    if (*out == -1 && PyErr_Occurred()) return -1;
    if (*out < low || *out > high) {
        PyErr_Format(PyExc_TypeError, "dlbridge._accel.Replay: the record's admits.%s=%lld is out of range", name,
                     *out);
        return -1;
    }
    return 0;
}

/* Replay(*, record, ...): the record's Admission (record.admits) read into C fields, once. */
static int read_admission(ReplayRecord *r) {
    PyObject *admits = PyObject_GetAttrString(r->record, "admits");
    if (admits == NULL) return -1;
    long long v[10];
    int ok = admits != Py_None && admission_field(admits, "wire", 0, 0xFFFFFFFFLL, &v[0]) == 0 &&
             admission_field(admits, "triple", 0, 0xFFFFFFFFLL, &v[1]) == 0 &&
             admission_field(admits, "device_type", 0, 255, &v[2]) == 0 &&
             admission_field(admits, "device_id", 0, 0x7FFF, &v[3]) == 0 &&
             admission_field(admits, "kinds", 1, KIND_LEGACY | KIND_VERSIONED, &v[4]) == 0 &&
             admission_field(admits, "readonly_ok", 0, 1, &v[5]) == 0 &&
             admission_field(admits, "offset_ok", 0, 1, &v[6]) == 0 &&
             admission_field(admits, "align", 1, 1 << 20, &v[7]) == 0 &&
             admission_field(admits, "clear_readonly", 0, 1, &v[8]) == 0 &&
             admission_field(admits, "misaligned", 0, 1, &v[9]) == 0;
    if (!ok && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "dlbridge._accel.Replay(record=) needs a record whose admits is set");
    Py_DECREF(admits);
    if (!ok) return -1;
    r->wire = v[0], r->triple = v[1], r->device_type = (int)v[2], r->device_id = (int)v[3], r->kinds = (int)v[4];
    r->readonly_ok = (char)v[5], r->offset_ok = (char)v[6], r->align = (long)v[7], r->clear_readonly = (char)v[8];
    r->misaligned = (char)v[9];
    return 0;
}

static PyObject *replay_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"record", "finish", "importer", "unaligned", NULL};
    ReplayRecord *r = (ReplayRecord *)alloc(type);
    if (r == NULL) return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO:Replay", names, &r->record, &r->finish, &r->importer,
                                     &r->unaligned))
        return discard((PyObject *)r, replay_members);
    hold((PyObject *)r, replay_members);
    if ((r->finish != Py_None && !PyCallable_Check(r->finish)) ||
        (r->importer != Py_None && !PyCallable_Check(r->importer)))
        return refuse((PyObject *)r, "Replay(finish=, importer=) must be callable or None");
    if (r->unaligned != Py_None && Py_TYPE(r->unaligned) != type) /* (route.c follows it after this check) */
        return refuse((PyObject *)r, "Replay(unaligned=) must be a Replay or None");
    if (read_admission(r) < 0) {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

#define SLOTS(name, doc)                                                                                      \
    static PyType_Slot name##_slots[] = {                                                                     \
        {Py_tp_new, name##_new}, {Py_tp_dealloc, name##_dealloc}, {Py_tp_members, name##_members},            \
        {Py_tp_doc, doc},        {0, NULL},                                                                   \
    }
SLOTS(state, "State(*, target, ready, kind, importer, api, versioned, routes, caps_guard, caps, decide, self_type, "
             "self_import, self_dtypes, stream_query, deferred): a consumer's fast-route state.");
SLOTS(producer, "Producer(*, kind, handle, guards, alias, relabels, gpu_guards, device_method, device_type, gpu_kind, "
                "current_device, readonly, keep): how arrays of one type are exported.");
SLOTS(replay, "Replay(*, record, finish, importer, unaligned): a stored route: the decision record it replays, "
              "whose admission (record.admits) it reads once into its fields, what turns the import into the result, "
              "the consumer's import for it (None: the State's), and the Replay for data its alignment turns away.");

static PyType_Spec specs[3] = {
    {"dlbridge._accel.State", sizeof(StateRecord), 0, Py_TPFLAGS_DEFAULT, state_slots},
    {"dlbridge._accel.Producer", sizeof(ProducerRecord), 0, Py_TPFLAGS_DEFAULT, producer_slots},
    {"dlbridge._accel.Replay", sizeof(ReplayRecord), 0, Py_TPFLAGS_DEFAULT, replay_slots},
};

/* A type from its spec, with `_fields` (its members' names, in order), added to the module. */
static PyObject *make_type(PyObject *module, PyType_Spec *spec, PyMemberDef *members, const char *name) {
    PyObject *type = PyType_FromSpec(spec), *fields = PyList_New(0);
    int ok = type != NULL && fields != NULL;
    for (PyMemberDef *m = members; ok && m->name != NULL; m++) {
        PyObject *field = PyUnicode_FromString(m->name);
        ok = field != NULL && PyList_Append(fields, field) == 0;
        Py_XDECREF(field);
    }
    PyObject *names = ok ? PyList_AsTuple(fields) : NULL;
    ok = names != NULL && PyObject_SetAttrString(type, "_fields", names) == 0 &&
         PyModule_AddObjectRef(module, name, type) == 0;
    Py_XDECREF(names);
    Py_XDECREF(fields);
    if (!ok) Py_CLEAR(type);
    return type; /* the module holds one reference, this global the other */
}

int records_init(PyObject *module) {
    if (routes_init(module) < 0) return -1;
    g_state_type = make_type(module, &specs[0], state_members, "State");
    g_producer_type = g_state_type ? make_type(module, &specs[1], producer_members, "Producer") : NULL;
    g_replay_type = g_producer_type ? make_type(module, &specs[2], replay_members, "Replay") : NULL;
    return g_replay_type != NULL ? 0 : -1;
}
