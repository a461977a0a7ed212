/* The fast route: convert() replays a route _route.py decided, or hands the call to the pipeline. */
#include "accel.h"

/* --- the fast route ------------------------------------------------------------------------- */

static PyObject *call_slow(PyObject *spec, PyObject *const *args) {
    PyObject *slow = PyList_GetItem(spec, T_SLOW);
    if (slow == NULL) return NULL;
    return PyObject_CallFunctionObjArgs(slow, args[1], args[2], args[3], args[4], args[5], args[6], NULL);
}

/* Whether every guard holds: getattr(x, name) (called when asked) is the expected object. */
static int guards_hold(PyObject *x, PyObject *guards) {
    Py_ssize_t n = PyTuple_Size(guards);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *guard = PyTuple_GetItem(guards, i);
        PyObject *name = PyTuple_GetItem(guard, 0);
        int call = PyObject_IsTrue(PyTuple_GetItem(guard, 1));
        PyObject *expected = PyTuple_GetItem(guard, 2);
        PyObject *value = PyObject_GetAttr(x, name);
        if (value != NULL && call) {
            PyObject *called = PyObject_CallNoArgs(value);
            Py_DECREF(value);
            value = called;
        }
        if (value == NULL) {
            PyErr_Clear();
            return 0;
        }
        int same = value == expected;
        Py_DECREF(value);
        if (!same) return 0;
    }
    return 1;
}

/* A non-Exception error (KeyboardInterrupt, SystemExit) propagates; any other is cleared so that
 * the full pipeline can run and say what went wrong. Returns 1 when it must propagate. */
static int must_propagate(void) {
    if (PyErr_Occurred() == NULL) return 0;
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static PyObject *route_for(PyObject *spec, long long key) {
    PyObject *routes = PyList_GetItem(spec, T_ROUTES);
    PyObject *pykey = PyLong_FromLongLong(key);
    if (routes == NULL || pykey == NULL) {
        Py_XDECREF(pykey);
        return NULL;
    }
    PyObject *route = PyDict_GetItemWithError(routes, pykey);
    if (route != NULL) {
        Py_INCREF(route);
        Py_DECREF(pykey);
        return route;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(pykey);
        return NULL;
    }
    PyObject *decide = PyList_GetItem(spec, T_DECIDE);
    route = decide ? PyObject_CallFunctionObjArgs(decide, pykey, NULL) : NULL;
    Py_DECREF(pykey);
    return route; /* decide() stores it in the routes itself */
}

/* convert(spec, x, fallback, dtype, device, copy, stream) */
PyObject *convert(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "convert() takes 7 positional arguments");
        return NULL;
    }
    PyObject *spec = args[0], *x = args[1], *fallback = args[2];
    if (args[3] != Py_None || args[4] != Py_None || args[5] != Py_None || args[6] != Py_None ||
        g_producers == NULL || !PyList_Check(spec) || PyList_Size(spec) != T_LEN)
        return call_slow(spec, args);
    if (PyList_GetItem(spec, T_READY) != Py_True) return call_slow(spec, args);

    /* fallback= as the index of its name; a policy block or anything unusual: the full pipeline. */
    PyObject *asked = NULL; /* a reference only when get_default_fallback() was called */
    if (fallback == g_not_given || fallback == Py_None) {
        fallback = PyList_GetItem(g_default, 0);
        if (fallback == Py_None) { /* a fallback_policy block was used in this process: ask the policy */
            asked = PyObject_CallNoArgs(g_get_default);
            if (asked == NULL) {
                if (must_propagate()) return NULL;
                return call_slow(spec, args);
            }
            fallback = asked;
        }
    }
    long fb = -1;
    Py_ssize_t count = PyTuple_Size(g_fallbacks);
    for (Py_ssize_t i = 0; i < count && fb < 0; i++) {
        if (PyTuple_GetItem(g_fallbacks, i) == fallback) fb = (long)i; /* the canonical objects (check_fallback) */
    }
    for (Py_ssize_t i = 0; i < count && fb < 0 && PyUnicode_Check(fallback); i++) {
        if (PyUnicode_Compare(PyTuple_GetItem(g_fallbacks, i), fallback) == 0) fb = (long)i;
    }
    Py_XDECREF(asked); /* the name stays alive in g_fallbacks when it matched */
    if (fb < 0) return call_slow(spec, args);

    PyObject *producer = PyDict_GetItemWithError(g_producers, (PyObject *)Py_TYPE(x));
    if (producer == NULL) {
        if (PyErr_Occurred()) return NULL;
        return call_slow(spec, args);
    }
    if (PyDict_Size(g_views) > 0) { /* x may be a view dlbridge made: its logical dtype is recorded */
        PyObject *id = PyLong_FromVoidPtr(x);
        int known = id ? PyDict_Contains(g_views, id) : -1;
        Py_XDECREF(id);
        if (known != 0) return known < 0 ? NULL : call_slow(spec, args);
    }
    PyObject *caps_fn = PyList_GetItem(spec, T_CAPS_FN);
    if (caps_fn != Py_None) { /* capabilities that vary at run time (JAX's x64 flag) */
        PyObject *caps = PyObject_CallNoArgs(caps_fn);
        if (caps == NULL) return NULL;
        int same = caps == PyList_GetItem(spec, T_CAPS);
        Py_DECREF(caps);
        if (!same) return call_slow(spec, args);
    }
    if ((PyObject *)Py_TYPE(x) == PyList_GetItem(spec, T_SELF)) { /* its own array: no capsule at all */
        PyObject *result = PyObject_CallFunctionObjArgs(PyList_GetItem(spec, T_SELF_IMPORT), x, NULL);
        if (result != NULL || must_propagate()) return result;
        return call_slow(spec, args);
    }
    if (!guards_hold(x, PyTuple_GetItem(producer, P_GUARDS))) {
        if (must_propagate()) return NULL;
        return call_slow(spec, args);
    }

    /* Export: a managed tensor (exchange API) or a capsule. */
    long pkind = PyLong_AsLong(PyTuple_GetItem(producer, P_KIND));
    long tkind = PyLong_AsLong(PyList_GetItem(spec, T_KIND));
    int want_versioned = PyList_GetItem(spec, T_VERSIONED) == Py_True;
    PyObject *alias = PyTuple_GetItem(producer, P_ALIAS);
    PyObject *relabels = PyTuple_GetItem(producer, P_RELABEL);
    long long forced = -1; /* a dtype the framework holds but cannot export: x.view(d), relabelled */
    PyObject *source = x;
    Py_INCREF(source);
    if (relabels != NULL && relabels != Py_None && PyDict_Size(relabels) > 0) {
        PyObject *dtype = PyObject_GetAttr(x, g_dtype);
        PyObject *entry = dtype ? PyDict_GetItemWithError(relabels, dtype) : NULL; /* borrowed */
        Py_XDECREF(dtype);
        if (entry != NULL) {
            forced = PyLong_AsLongLong(PyTuple_GetItem(entry, 1));
            SETREF(source, PyObject_CallMethodObjArgs(x, g_view, PyTuple_GetItem(entry, 0), NULL));
            alias = Py_None;
        }
        if (source == NULL || PyErr_Occurred()) {
            Py_XDECREF(source);
            if (must_propagate()) return NULL;
            return call_slow(spec, args);
        }
    }
    if (alias != Py_None) {
        SETREF(source, PyObject_CallMethodObjArgs(x, alias, NULL));
        if (source == NULL) {
            if (must_propagate()) return NULL;
            return call_slow(spec, args);
        }
    }
    DLManagedTensorVersioned *managed = NULL;
    PyObject *capsule = NULL;
    if (pkind == EXPORT_EXCHANGE) {
        DLPackExchangeAPI *api = PyCapsule_GetPointer(PyTuple_GetItem(producer, P_HANDLE), EXCHANGE);
        if (api == NULL || api->header.version.major != 1 ||
            api->managed_tensor_from_py_object_no_sync(source, &managed) != 0 || managed == NULL) {
            Py_DECREF(source);
            if (must_propagate()) return NULL;
            return call_slow(spec, args);
        }
        if (!want_versioned) { /* a consumer of legacy capsules: the same tensor as one */
            if (managed->version.major != 1 || (managed->flags & FLAG_READ_ONLY)) { /* legacy cannot say so */
                free_managed(managed);
                Py_DECREF(source);
                return call_slow(spec, args);
            }
            capsule = legacy_capsule(managed);
            managed = NULL;
            if (capsule == NULL) {
                Py_DECREF(source);
                return NULL;
            }
        }
    } else {
        if (pkind == EXPORT_FUNCTION) {
            capsule = PyObject_CallFunctionObjArgs(PyTuple_GetItem(producer, P_HANDLE), source, NULL);
        } else {
            PyObject *method = PyObject_GetAttr(source, g_dunder);
            int ask_versioned = want_versioned && pkind != EXPORT_METHOD_LEGACY; /* a producer before DLPack 1.0 */
            capsule = method ? PyObject_Call(method, g_empty, ask_versioned ? g_versioned_kw : NULL) : NULL;
            Py_XDECREF(method);
        }
        if (capsule == NULL || !PyCapsule_CheckExact(capsule)) {
            Py_DECREF(source);
            Py_XDECREF(capsule);
            if (must_propagate()) return NULL;
            return call_slow(spec, args);
        }
    }
    Py_DECREF(source);

    /* Probe: CPU device 0, a plain layout, flags; then the route for (consumer, dtype, fallback). */
    int versioned = 1;
    uint64_t flags_value = 0, *flags = NULL;
    DLTensor *t;
    if (managed != NULL) {
        t = managed->version.major == 1 ? &managed->dl_tensor : NULL;
        flags = &managed->flags;
    } else {
        t = capsule_tensor(capsule, &versioned, &flags);
    }
    if (flags != NULL) flags_value = *flags;
    if (t != NULL && forced >= 0) { /* our own export of x.view(d): its capsule gets x's dtype */
        t->dtype.code = (uint8_t)(forced & 0xFF);
        t->dtype.bits = (uint8_t)((forced >> 8) & 0xFF);
        t->dtype.lanes = (uint16_t)((forced >> 16) & 0xFFFF);
    }
    PyObject *route = NULL;
    if (t == NULL || t->device.device_type != 1 || t->device.device_id != 0 || !plain_layout(t) ||
        (versioned && !want_versioned) ||
        ((flags_value & FLAG_READ_ONLY) && PyList_GetItem(spec, T_READONLY_OK) != Py_True) ||
        (t->byte_offset && PyList_GetItem(spec, T_OFFSET_OK) != Py_True))
        goto decline;
    long align = PyLong_AsLong(PyList_GetItem(spec, T_ALIGN));
    uint64_t size = 1;
    for (int i = 0; i < t->ndim; i++) size *= (uint64_t)t->shape[i];
    if (align > 1 && size && ((uintptr_t)t->data + t->byte_offset) % (uint64_t)align) goto decline;
    long long triple = (long long)t->dtype.code | ((long long)t->dtype.bits << 8) | ((long long)t->dtype.lanes << 16);
    route = route_for(spec, triple | ((long long)fb << 32));
    if (route == NULL) goto fail;
    if (route == Py_None) goto decline;

    /* Relabel (reinterpret routes), import, finish. */
    long long wire = PyLong_AsLongLong(PyTuple_GetItem(route, 0));
    PyObject *finish = PyTuple_GetItem(route, 1);
    DLDataType saved = t->dtype;
    if (wire != triple) {
        t->dtype.code = (uint8_t)(wire & 0xFF);
        t->dtype.bits = (uint8_t)((wire >> 8) & 0xFF);
        t->dtype.lanes = (uint16_t)((wire >> 16) & 0xFFFF);
    }
    PyObject *result = NULL;
    if (tkind == IMPORT_EXCHANGE && versioned) {
        DLPackExchangeAPI *api = PyCapsule_GetPointer(PyList_GetItem(spec, T_API), EXCHANGE);
        if (api == NULL || api->header.version.major != 1) {
            PyErr_Clear();
            t->dtype = saved;
            goto decline;
        }
        DLManagedTensorVersioned *taken = managed;
        if (taken == NULL) taken = PyCapsule_GetPointer(capsule, VERSIONED);
        void *out = NULL;
        /* The consumer owns the tensor from here on, also if it fails (never freed twice). */
        if (capsule != NULL) PyCapsule_SetName(capsule, USED_VERSIONED);
        managed = NULL;
        if (taken == NULL || api->managed_tensor_to_py_object_no_sync(taken, &out) != 0 || out == NULL) {
            Py_XDECREF(capsule);
            Py_DECREF(route);
            if (must_propagate()) return NULL;
            return call_slow(spec, args);
        }
        result = out;
    } else {
        if (managed != NULL) { /* an exchange export for a consumer that takes capsules */
            capsule = PyCapsule_New(managed, VERSIONED, managed_capsule_destructor);
            if (capsule == NULL) {
                free_managed(managed);
                Py_DECREF(route);
                return NULL;
            }
            managed = NULL;
        }
        PyObject *importer = PyList_GetItem(spec, T_IMPORT);
        if (tkind == IMPORT_CARRIER) {
            PyObject *carrier = make_carrier(capsule, g_cpu);
            result = carrier ? PyObject_CallFunctionObjArgs(importer, carrier, NULL) : NULL;
            Py_XDECREF(carrier);
        } else {
            result = PyObject_CallFunctionObjArgs(importer, capsule, NULL);
        }
        if (result == NULL) {
            const char *name = PyCapsule_GetName(capsule);
            if (name != NULL && (strcmp(name, VERSIONED) == 0 || strcmp(name, LEGACY) == 0)) {
                t->dtype = saved; /* not consumed: left as it came */
            }
            PyErr_Clear();
            Py_DECREF(capsule);
            Py_DECREF(route);
            return call_slow(spec, args);
        }
    }
    Py_XDECREF(capsule);
    if (finish != Py_None) SETREF(result, PyObject_CallFunctionObjArgs(finish, result, NULL));
    Py_DECREF(route);
    return result;

decline:
    Py_XDECREF(route);
    free_managed(managed);
    Py_XDECREF(capsule);
    return call_slow(spec, args);
fail:
    free_managed(managed);
    Py_XDECREF(capsule);
    return NULL;
}
