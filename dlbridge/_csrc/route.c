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
#include "route.h"

/* The full pipeline (_route._pipeline), which converts x and learns from it, handed the export the route
 * declined (`given`; NULL: it exports x itself). */
static PyObject *call_pipeline(PyObject *const *args, PyObject *given) {
    if (g_pipeline == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "dlbridge._accel.convert(): configure() was not called");
        return NULL;
    }
    /* (a NULL `given` ends the argument list there: eight arguments) */
    return PyObject_CallFunctionObjArgs(g_pipeline, args[0], args[1], args[2], args[3], args[4], args[5], args[6],
                                        args[7], given, NULL);
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

/* `given`'s index among `names` (the canonical name objects, then an equal exact str: two str always
 * compare), or -1. */
static long name_index(PyObject *given, PyObject *const *names, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++)
        if (names[i] == given) return (long)i;
    for (Py_ssize_t i = 0; i < count && PyUnicode_CheckExact(given); i++)
        if (PyUnicode_Compare(names[i], given) == 0) return (long)i;
    return -1;
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
    c->fallback = name_index(fallback, g_fallback_names, g_fallback_count);
    Py_XDECREF(asked);
    return c->fallback < 0 ? STEP_DECLINE : STEP_OK;
}

/* readonly= as the index of its canonical name ("keep" is the default); anything else: decline (the
 * pipeline says what is valid). */
static int find_readonly(Call *c) {
    c->readonly = name_index(c->args[7], g_readonly_names, 2);
    return c->readonly < 0 ? STEP_DECLINE : STEP_OK;
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
    if (step == STEP_OK) step = find_readonly(c);
    if (step != STEP_OK) return step;
    PyObject *producer = table_get(g_producers, (PyObject *)Py_TYPE(args[1]));
    if (producer == NULL) return PyErr_Occurred() ? STEP_ERROR : STEP_DECLINE;
    if (Py_TYPE(producer) != (PyTypeObject *)g_producer_type) {
        Py_DECREF(producer);
        return STEP_DECLINE;
    }
    c->producer = (ProducerRecord *)producer;
    if (PyDict_Size(g_views) > 0) { /* x may be a view dlbridge made: its logical dtype is recorded */
        PyObject *id = PyLong_FromVoidPtr(args[1]);
        int known = id ? PyDict_Contains(g_views, id) : -1;
        Py_XDECREF(id);
        if (known != 0) return known < 0 ? STEP_ERROR : STEP_DECLINE;
    }
    PyObject *guard = c->state->caps_guard; /* capabilities that vary at run time (JAX's x64 flag) */
    if (guard != Py_None) {
        PyObject *value = PyObject_GetAttr(PyTuple_GetItem(guard, 0), PyTuple_GetItem(guard, 1));
        if (value == NULL) return settle();
        int same = value == PyTuple_GetItem(guard, 2);
        Py_DECREF(value);
        if (!same) return STEP_DECLINE;
    }
    return STEP_OK;
}

/* x of the target's own array type: its alias, for dtypes the pipeline took as they are. */
static int self_import(Call *c) {
    PyObject *x = c->args[1];
    PyObject *dtype = read_dtype(c, x);
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

/* The exchange-API import: the consumer owns the tensor from here on, also if it fails. */
static int import_exchange(Call *c) {
    DLPackExchangeAPI *api = exchange_table(c->state->api, c->state->api_table);
    if (api == NULL || api->header.version.major != 1) return settle();
    DLManagedTensorVersioned *taken = c->managed;
    if (taken == NULL) { /* the capsule's tensor as the reader found it, unless Python ran since (find_route) */
        taken = c->in_capsule != NULL ? c->in_capsule : PyCapsule_GetPointer(c->capsule, VERSIONED);
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
    PyObject *importer = c->replay->importer != Py_None ? c->replay->importer : c->state->importer;
    if (c->state->kind == IMPORT_CARRIER) {
        PyObject *device = c->device_type == 1 && c->device_id == 0 ? g_cpu : NULL;
        PyObject *made = device == NULL ? Py_BuildValue("(ii)", c->device_type, c->device_id) : NULL;
        PyObject *carrier = device != NULL || made != NULL ? make_carrier(c->capsule, device ? device : made) : NULL;
        c->result = carrier ? PyObject_CallFunctionObjArgs(importer, carrier, NULL) : NULL;
        Py_XDECREF(carrier);
        Py_XDECREF(made);
    } else {
        c->result = PyObject_CallFunctionObjArgs(importer, c->capsule, NULL);
    }
    if (c->result != NULL) return STEP_OK;
    PyObject *type = NULL, *raised = NULL, *tb = NULL;
    PyErr_Fetch(&type, &raised, &tb); /* (kept while the capsule's name is read) */
    const char *name = PyCapsule_GetName(c->capsule);
    if (name != NULL && (strcmp(name, VERSIONED) == 0 || strcmp(name, LEGACY) == 0)) {
        c->tensor->dtype = saved;
        if (c->cleared) *c->flags_at |= FLAG_READ_ONLY;
        c->handover = 1; /* refused without taking it: the pipeline decides on this capsule, no second export */
    }
    if (name == NULL) PyErr_Clear(); /* (the consumer's error is the one that counts) */
    PyErr_Restore(type, raised, tb);
    return settle();
}

/* Import (the capsule relabelled by find_route where its route says so), then finish. */
static int import_x(Call *c) {
    c->handover = 0; /* the consumer may take the capsule from here on */
    DLDataType saved = {(uint8_t)(c->triple & 0xFF), (uint8_t)((c->triple >> 8) & 0xFF),
                        (uint16_t)((c->triple >> 16) & 0xFFFF)};
    int exchange = c->state->kind == IMPORT_EXCHANGE && c->versioned && c->replay->importer == Py_None;
    int step = exchange ? import_exchange(c) : import_capsule(c, saved);
    return step == STEP_OK ? finish(c) : step;
}

/* The CPU half (the producer's guards say host memory), or the GPU half (gpu.c): one export, its stored
 * route, the import; a GPU half that imports itself (a deferred export) leaves nothing more to do. */
static int replay(Call *c) {
    int step = begin(c);
    if (step != STEP_OK) return step;
    if ((PyObject *)Py_TYPE(c->args[1]) == c->state->self_type) return self_import(c);
    PyObject *guards = c->producer->guards;
    step = guards != Py_None ? check_guards(c, guards) : STEP_DECLINE;
    if (step == STEP_OK) {
        c->device_type = 1; /* host memory, the CPU's device 0 */
        step = export_x(c);
    } else if (step == STEP_DECLINE && c->producer->gpu_guards != Py_None) {
        step = gpu_half(c);
    }
    if (step == STEP_OK && c->result == NULL) step = find_route(c);
    if (step == STEP_OK && c->result == NULL) step = import_x(c);
    return step;
}

/* convert(spec, x, fallback, dtype, device, copy, stream[, readonly]): readonly="keep" where not given */
PyObject *convert(PyObject *module, PyObject *const *given_args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7 && nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "convert() takes 7 or 8 positional arguments");
        return NULL;
    }
    PyObject *full[8];
    PyObject *const *args = given_args;
    if (nargs == 7) {
        memcpy(full, given_args, 7 * sizeof(PyObject *));
        full[7] = g_readonly != NULL ? g_readonly_names[0] : Py_None; /* "keep" */
        args = full;
    }
    static const Call nothing_read; /* (copied, not memset: vector stores, where memset's rep stos stalls) */
    Call c = nothing_read;
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
