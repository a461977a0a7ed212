/* The fast route: convert() replays a route _route.py decided, or hands the call to the pipeline.
 *
 * Ownership: everything a call reads from dlbridge's tables (the target's State, the Producer of
 * type(x), a relabel entry, a Replay) is held by a strong reference in `Call` from the moment it is read
 * until the call ends, because any call into Python on the way (a guard under a TorchFunctionMode, a
 * producer's Python __dlpack__, the consumer's import, another thread) may make dlbridge learn again,
 * which replaces those objects. Each step returns STEP_OK, STEP_DECLINE (the pipeline converts x) or
 * STEP_ERROR (an error propagates); convert() releases everything in one place, then declines.
 *
 * One rule for errors on the way (settle()): an Exception sends the call to the pipeline, which
 * meets it again and says what went wrong; MemoryError, KeyboardInterrupt, SystemExit and every
 * other BaseException propagate. The producer is asked once per conversion: an Exception its export
 * raised is handed to the pipeline (export_failed()), and so is a capsule the consumer refused
 * without taking it (import_capsule()).
 */
#include "accel.h"

enum { STEP_OK = 0, STEP_DECLINE = 1, STEP_ERROR = -1 };

typedef struct {
    PyObject *const *args;              /* spec, x, fallback, dtype, device, copy, stream (the caller's) */
    StateRecord *state;                 /* the target's State (spec[0] when the call began) */
    ProducerRecord *producer;           /* the Producer of type(x) */
    PyObject *capsule;                  /* the export, as a capsule */
    ReplayRecord *replay;               /* the stored route: wire triple, finish */
    PyObject *result;                   /* what the caller gets */
    DLManagedTensorVersioned *managed;  /* an exchange-API export, until a capsule or consumer owns it */
    DLTensor *tensor;                   /* the exported tensor (inside capsule or managed) */
    long long triple;                   /* the exported dtype: code | bits << 8 | lanes << 16 */
    uint64_t flags;                     /* the export's DLPack flags (0 for a legacy capsule) */
    long fallback;                      /* the fallback's index in g_fallbacks */
    int versioned;                      /* whether the export is a versioned tensor */
    int handover;                       /* declined after the export, before any consumer took it */
    PyObject *failed;                   /* the Exception the producer's export raised (handed to the pipeline) */
} Call;

/* After a failure: STEP_DECLINE for an Exception the pipeline will meet again (cleared), STEP_ERROR
 * for anything else (left set); with no error set, STEP_DECLINE. */
static int settle(void) {
    if (PyErr_Occurred() == NULL) return STEP_DECLINE;
    if (PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyErr_Clear();
        return STEP_DECLINE;
    }
    return STEP_ERROR;
}

/* The full pipeline (_route._pipeline), which converts x and learns from it, handed the export the route
 * declined (`given`; NULL: it exports x itself). */
static PyObject *call_pipeline(PyObject *const *args, PyObject *given) {
    if (g_pipeline == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "dlbridge._accel.convert(): configure() was not called");
        return NULL;
    }
    /* (a NULL `given` ends the argument list there: seven arguments) */
    return PyObject_CallFunctionObjArgs(g_pipeline, args[0], args[1], args[2], args[3], args[4], args[5], args[6],
                                        given, NULL);
}

/* The export a decline hands the pipeline: the capsule, an exchange-API export wrapped as one, or NULL
 * (none made, or not since the route's checks). -1 with an error set where wrapping it failed. */
static int handover(Call *c, PyObject **given) {
    *given = NULL;
    if (c->failed != NULL) { /* the export failed: the pipeline handles its error as its own export's */
        *given = c->failed;
        c->failed = NULL;
        return 0;
    }
    if (!c->handover) return 0;
    if (c->managed != NULL) {
        c->capsule = PyCapsule_New(c->managed, VERSIONED, managed_capsule_destructor);
        if (c->capsule == NULL) return -1;
        c->managed = NULL;
    }
    Py_XINCREF(c->capsule);
    *given = c->capsule;
    return 0;
}

/* fallback= as the index of its canonical name; anything else (a str subclass, an array): decline. */
static int find_fallback(Call *c) {
    PyObject *fallback = c->args[2], *asked = NULL;
    if (fallback == g_not_given || fallback == Py_None) {
        fallback = PyList_GetItem(g_default, 0);
        if (fallback == NULL) return STEP_ERROR;
        if (fallback == Py_None) { /* a fallback_policy block was used in this process: ask the policy */
            asked = PyObject_CallNoArgs(g_get_default);
            if (asked == NULL) return settle();
            fallback = asked;
        }
    }
    c->fallback = -1;
    Py_ssize_t count = PyTuple_Size(g_fallbacks);
    for (Py_ssize_t i = 0; i < count && c->fallback < 0; i++) {
        PyObject *name = PyTuple_GetItem(g_fallbacks, i);
        if (name == fallback) c->fallback = (long)i;
        else if (PyUnicode_CheckExact(fallback) && PyUnicode_Compare(name, fallback) == 0) c->fallback = (long)i;
    }
    Py_XDECREF(asked);
    return c->fallback < 0 ? STEP_DECLINE : STEP_OK;
}

/* The spec's State (a strong reference), or an error: a spec is a one-item list holding a State. */
static int take_state(Call *c) {
    PyObject *spec = c->args[0];
    PyObject *state = PyList_Check(spec) && PyList_Size(spec) == 1 ? PyList_GetItem(spec, 0) : NULL;
    if (state == NULL || Py_TYPE(state) != (PyTypeObject *)g_state_type) {
        PyErr_Format(PyExc_TypeError, "dlbridge._accel.convert(): spec must be a one-item list holding a "
                     "dlbridge._accel.State, not %R", spec);
        return STEP_ERROR;
    }
    Py_INCREF(state);
    c->state = (StateRecord *)state;
    return STEP_OK;
}

/* The call's shape, the target's state and x's Producer, or a decline. */
static int begin(Call *c) {
    PyObject *const *args = c->args;
    int step = take_state(c);
    if (step != STEP_OK) return step;
    if (args[3] != Py_None || args[4] != Py_None || args[5] != Py_None || args[6] != Py_None ||
        g_producers == NULL || !c->state->ready)
        return STEP_DECLINE;
    step = find_fallback(c);
    if (step != STEP_OK) return step;
    PyObject *producer = PyDict_GetItemWithError(g_producers, (PyObject *)Py_TYPE(args[1]));
    if (producer == NULL) return PyErr_Occurred() ? STEP_ERROR : STEP_DECLINE;
    if (Py_TYPE(producer) != (PyTypeObject *)g_producer_type) return STEP_DECLINE;
    Py_INCREF(producer);
    c->producer = (ProducerRecord *)producer;
    if (PyDict_Size(g_views) > 0) { /* x may be a view dlbridge made: its logical dtype is recorded */
        PyObject *id = PyLong_FromVoidPtr(args[1]);
        int known = id ? PyDict_Contains(g_views, id) : -1;
        Py_XDECREF(id);
        if (known != 0) return known < 0 ? STEP_ERROR : STEP_DECLINE;
    }
    if (c->state->caps_fn != Py_None) { /* capabilities that vary at run time (JAX's x64 flag) */
        PyObject *caps = PyObject_CallNoArgs(c->state->caps_fn);
        if (caps == NULL) return settle();
        int same = caps == c->state->caps;
        Py_DECREF(caps);
        if (!same) return STEP_DECLINE;
    }
    return STEP_OK;
}

/* x of the target's own array type: its alias, for dtypes the pipeline took as they are. */
static int self_import(Call *c) {
    PyObject *x = c->args[1];
    PyObject *dtype = PyObject_GetAttr(x, g_dtype);
    if (dtype == NULL) return settle();
    PyObject *dtypes = c->state->self_dtypes; /* a list (records.c); matched by identity, as _route.py does */
    int known = 0;
    for (Py_ssize_t i = 0, n = PyList_Size(dtypes); i < n && !known; i++)
        known = PyList_GetItem(dtypes, i) == dtype;
    Py_DECREF(dtype);
    if (!known) return STEP_DECLINE;
    c->result = PyObject_CallFunctionObjArgs(c->state->self_import, x, NULL);
    return c->result != NULL ? STEP_OK : settle();
}

/* Whether every guard holds: getattr(x, name) (called when asked) is the expected object. */
static int check_guards(Call *c) {
    PyObject *guards = c->producer->guards; /* a tuple (records.c) */
    Py_ssize_t n = PyTuple_Size(guards);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *guard = PyTuple_GetItem(guards, i);
        if (guard == NULL || !PyTuple_Check(guard) || PyTuple_Size(guard) != 3) return settle();
        int call = PyObject_IsTrue(PyTuple_GetItem(guard, 1));
        if (call < 0) return settle();
        PyObject *value = PyObject_GetAttr(c->args[1], PyTuple_GetItem(guard, 0));
        if (value != NULL && call) SETREF(value, PyObject_CallNoArgs(value));
        if (value == NULL) return settle();
        int same = value == PyTuple_GetItem(guard, 2);
        Py_DECREF(value);
        if (!same) return STEP_DECLINE;
    }
    return STEP_OK;
}

/* What is exported: x, its alias (x.detach()), or x.view(d) for a dtype the framework cannot export
 * (then *forced is the dtype triple its capsule gets). A new reference, or NULL with an error. */
static PyObject *export_source(Call *c, long long *forced) {
    PyObject *x = c->args[1], *relabels = c->producer->relabels, *alias = c->producer->alias;
    if (relabels != Py_None && PyDict_Size(relabels) > 0) { /* a dict or None (records.c) */
        PyObject *dtype = PyObject_GetAttr(x, g_dtype);
        PyObject *entry = dtype ? PyDict_GetItemWithError(relabels, dtype) : NULL;
        Py_XINCREF(entry);
        Py_XDECREF(dtype);
        if (entry != NULL) {
            PyObject *view = NULL;
            if (PyTuple_Check(entry) && PyTuple_Size(entry) == 2) {
                *forced = PyLong_AsLongLong(PyTuple_GetItem(entry, 1));
                view = *forced < 0 ? NULL : PyObject_CallMethodObjArgs(x, g_view, PyTuple_GetItem(entry, 0), NULL);
            }
            Py_DECREF(entry);
            return view;
        }
        if (PyErr_Occurred()) return NULL;
    }
    if (alias != Py_None) return PyObject_CallMethodObjArgs(x, alias, NULL);
    Py_INCREF(x);
    return x;
}

/* After the producer's __dlpack__ (or export function) raised: an Exception (not MemoryError) is kept
 * for the pipeline, which handles it as its own export's without asking the producer again (its side
 * effects run once); anything else as settle() says. */
static int export_failed(Call *c) {
    if (PyErr_Occurred() == NULL || !PyErr_ExceptionMatches(PyExc_Exception) ||
        PyErr_ExceptionMatches(PyExc_MemoryError))
        return settle();
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL) PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    c->failed = value; /* (NULL: nothing to hand over, the pipeline exports again) */
    return STEP_DECLINE;
}

/* The producer's export of `source` into c->managed (exchange API) or c->capsule. */
static int export_tensor(Call *c, PyObject *source) {
    int kind = c->producer->kind, want_versioned = c->state->versioned;
    if (kind == EXPORT_EXCHANGE) {
        DLPackExchangeAPI *api = PyCapsule_GetPointer(c->producer->handle, EXCHANGE);
        if (api == NULL || api->header.version.major != 1) return settle();
        if (api->managed_tensor_from_py_object_no_sync(source, &c->managed) != 0 || c->managed == NULL) {
            c->managed = NULL;
            return settle();
        }
        if (c->managed->version.major != 1) return STEP_DECLINE;
        if (want_versioned) return STEP_OK;
        if (c->managed->flags & FLAG_READ_ONLY) return STEP_DECLINE; /* a legacy capsule cannot say so */
        DLManagedTensorVersioned *managed = c->managed;
        c->managed = NULL;
        c->capsule = legacy_capsule(managed); /* owns managed from here, also on failure */
        return c->capsule != NULL ? STEP_OK : settle();
    }
    if (kind == EXPORT_FUNCTION) {
        c->capsule = PyObject_CallFunctionObjArgs(c->producer->handle, source, NULL);
    } else {
        PyObject *method = PyObject_GetAttr(source, g_dunder);
        int ask_versioned = want_versioned && kind != EXPORT_METHOD_LEGACY; /* a producer before DLPack 1.0 */
        c->capsule = method ? PyObject_Call(method, g_empty, ask_versioned ? g_versioned_kw : NULL) : NULL;
        Py_XDECREF(method);
    }
    if (c->capsule == NULL) return export_failed(c);
    return PyCapsule_CheckExact(c->capsule) ? STEP_OK : STEP_DECLINE;
}

static void write_dtype(DLTensor *t, long long triple) {
    t->dtype.code = (uint8_t)(triple & 0xFF);
    t->dtype.bits = (uint8_t)((triple >> 8) & 0xFF);
    t->dtype.lanes = (uint16_t)((triple >> 16) & 0xFFFF);
}

static int export_x(Call *c) {
    long long forced = -1;
    PyObject *source = export_source(c, &forced);
    if (source == NULL) return settle();
    int step = export_tensor(c, source);
    Py_DECREF(source);
    if (step != STEP_OK) return step;
    uint64_t *flags = NULL;
    c->versioned = 1;
    if (c->managed != NULL) {
        c->tensor = &c->managed->dl_tensor;
        flags = &c->managed->flags;
    } else {
        c->tensor = capsule_tensor(c->capsule, &c->versioned, &flags);
    }
    if (c->tensor == NULL) return STEP_DECLINE;
    c->flags = flags != NULL ? *flags : 0;
    if (forced >= 0) write_dtype(c->tensor, forced); /* our own export of x.view(d): x's dtype */
    c->triple = (long long)c->tensor->dtype.code | ((long long)c->tensor->dtype.bits << 8) |
                ((long long)c->tensor->dtype.lanes << 16);
    return STEP_OK;
}

/* CPU device 0, a plain layout, flags and alignment the consumer takes; then the stored route. */
static int find_route(Call *c) {
    const DLTensor *t = c->tensor;
    if (c->versioned && !c->state->versioned) return STEP_DECLINE; /* not the capsule kind the pipeline asks for */
    /* Every decline from here on leaves the export unseen by any consumer; handed on if it is host memory
     * (a GPU capsule here was exported without the stream handshake the pipeline does). */
    c->handover = t->device.device_type == 1;
    if (t->device.device_type != 1 || t->device.device_id != 0 || !plain_layout(t) ||
        ((c->flags & FLAG_READ_ONLY) && !c->state->readonly_ok) || (t->byte_offset && !c->state->offset_ok))
        return STEP_DECLINE;
    long align = c->state->align; /* >= 1 (records.c) */
    uint64_t size = 1;
    for (int i = 0; i < t->ndim; i++) size *= (uint64_t)t->shape[i];
    if (align > 1 && size && ((uintptr_t)t->data + t->byte_offset) % (uint64_t)align) return STEP_DECLINE;
    PyObject *key = PyLong_FromLongLong(c->triple | ((long long)c->fallback << 32));
    if (key == NULL) return settle();
    PyObject *replay = PyDict_GetItemWithError(c->state->routes, key); /* a dict (records.c) */
    Py_XINCREF(replay);
    if (replay == NULL && !PyErr_Occurred()) replay = PyObject_CallFunctionObjArgs(c->state->decide, key, NULL);
    Py_DECREF(key);
    if (replay == NULL) return settle();
    if (Py_TYPE(replay) != (PyTypeObject *)g_replay_type) { /* None: the pipeline decides each time */
        Py_DECREF(replay);
        return STEP_DECLINE;
    }
    c->replay = (ReplayRecord *)replay;
    return STEP_OK;
}

/* The exchange-API import: the consumer owns the tensor from here on, also if it fails. */
static int import_exchange(Call *c) {
    DLPackExchangeAPI *api = PyCapsule_GetPointer(c->state->api, EXCHANGE);
    if (api == NULL || api->header.version.major != 1) return settle();
    DLManagedTensorVersioned *taken = c->managed;
    if (taken == NULL) {
        taken = PyCapsule_GetPointer(c->capsule, VERSIONED);
        if (taken == NULL) return settle();
        if (PyCapsule_SetName(c->capsule, USED_VERSIONED) < 0) return settle();
    }
    c->managed = NULL;
    c->tensor = NULL;
    void *out = NULL;
    if (api->managed_tensor_to_py_object_no_sync(taken, &out) != 0 || out == NULL) return settle();
    c->result = out;
    return STEP_OK;
}

/* A capsule (or a Carrier holding it) to the consumer's importer; a refused capsule keeps its dtype. */
static int import_capsule(Call *c, DLDataType saved) {
    if (c->managed != NULL) { /* an exchange export for a consumer that takes capsules */
        c->capsule = PyCapsule_New(c->managed, VERSIONED, managed_capsule_destructor);
        if (c->capsule == NULL) return settle();
        c->managed = NULL;
    }
    PyObject *importer = c->state->importer;
    if (c->state->kind == IMPORT_CARRIER) {
        PyObject *carrier = make_carrier(c->capsule, g_cpu);
        c->result = carrier ? PyObject_CallFunctionObjArgs(importer, carrier, NULL) : NULL;
        Py_XDECREF(carrier);
    } else {
        c->result = PyObject_CallFunctionObjArgs(importer, c->capsule, NULL);
    }
    if (c->result != NULL) return STEP_OK;
    PyObject *type = NULL, *raised = NULL, *tb = NULL;
    PyErr_Fetch(&type, &raised, &tb); /* (kept while the capsule's name is read) */
    const char *name = PyCapsule_GetName(c->capsule);
    if (name != NULL && (strcmp(name, VERSIONED) == 0 || strcmp(name, LEGACY) == 0)) {
        c->tensor->dtype = saved;
        c->handover = 1; /* refused without taking it: the pipeline decides on this capsule, no second export */
    }
    if (name == NULL) PyErr_Clear(); /* (the consumer's error is the one that counts) */
    PyErr_Restore(type, raised, tb);
    return settle();
}

/* Relabel (reinterpret routes), import, finish. */
static int import_x(Call *c) {
    c->handover = 0; /* the consumer may take the capsule from here on */
    long long wire = c->replay->wire; /* 0 .. 2**32 - 1 (records.c) */
    PyObject *finish = c->replay->finish;
    DLDataType saved = c->tensor->dtype;
    if (wire != c->triple) write_dtype(c->tensor, wire);
    int step = c->state->kind == IMPORT_EXCHANGE && c->versioned ? import_exchange(c) : import_capsule(c, saved);
    if (step != STEP_OK || finish == Py_None) return step;
    SETREF(c->result, PyObject_CallFunctionObjArgs(finish, c->result, NULL));
    return c->result != NULL ? STEP_OK : STEP_ERROR; /* the result exists: a failed finish is an error */
}

static int replay(Call *c) {
    int step = begin(c);
    if (step != STEP_OK) return step;
    if ((PyObject *)Py_TYPE(c->args[1]) == c->state->self_type) return self_import(c);
    step = check_guards(c);
    if (step == STEP_OK) step = export_x(c);
    if (step == STEP_OK) step = find_route(c);
    if (step == STEP_OK) step = import_x(c);
    return step;
}

/* convert(spec, x, fallback, dtype, device, copy, stream) */
PyObject *convert(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "convert() takes 7 positional arguments");
        return NULL;
    }
    Call c;
    memset(&c, 0, sizeof c);
    c.args = args;
    int step = replay(&c);
    PyObject *result = step == STEP_OK ? c.result : NULL, *given = NULL;
    if (step != STEP_OK) Py_XDECREF(c.result);
    if (step == STEP_DECLINE && handover(&c, &given) < 0) step = STEP_ERROR; /* no memory for a capsule */
    free_managed(c.managed);
    Py_XDECREF(c.failed);
    Py_XDECREF(c.capsule);
    Py_XDECREF(c.replay);
    Py_XDECREF(c.producer);
    Py_XDECREF(c.state);
    if (step == STEP_DECLINE) result = call_pipeline(args, given);
    Py_XDECREF(given);
    return result;
}
