/* The route's GPU half: where a framework's own GPU array is, which stream its consumer reads on, and
 * its export with the stream handshake done right or not at all. The twin of dlbridge/_route/_gpu.py,
 * whose docstring gives the stream rule and its sources; the same steps in the same order:
 *
 *   the array's device (Producer.device_method) -> host memory: the CPU export; CUDA/ROCm: on;
 *   a consumer that asks for the capsule itself with its own stream (State.deferred, JAX): a Deferred
 *   carrier exports inside its import; else the consumer's current stream (State.stream_query), then
 *   an exchange-API producer whose own current stream is that one is exported without synchronising
 *   (no event needed); otherwise, where x is on the producer's current device (Producer.current_device:
 *   torch refuses other devices' tensors, CuPy records its event on the current device's stream), the
 *   producer is handed the stream in __dlpack__(stream=) and makes the consumer wait itself; else declined.
 */
#include "route.h"

PyObject *g_deferred_type, *g_declined;

/* A stream handle as DLPack's __dlpack__(stream=) spells it: on CUDA the legacy default stream (handle 0)
 * is 1; ROCm's default stream is 0 (_capsule/_abi.py's dlpack_stream). */
static long long dlpack_stream(long long handle, int device_type) {
    return device_type == 10 ? handle : (handle ? handle : 1);
}

/* Where x is, into c->device_type / c->device_id, asked as its Producer says. */
static int query_device(Call *c) {
    ProducerRecord *p = c->producer;
    if (!PyUnicode_Check(p->device_method)) return STEP_DECLINE;
    PyObject *found = PyObject_CallMethodObjArgs(c->args[1], p->device_method, NULL);
    if (found == NULL) return settle();
    long type = p->device_type, id = -1;
    if (type != 0) {
        id = PyLong_AsLong(found);
    } else if (PyTuple_Check(found) && PyTuple_Size(found) == 2) {
        type = PyLong_AsLong(PyTuple_GetItem(found, 0));
        PyObject *index = PyTuple_GetItem(found, 1);
        id = index == Py_None ? 0 : PyLong_AsLong(index); /* some producers say None for 0 */
    }
    Py_DECREF(found);
    if (PyErr_Occurred()) return settle();
    if (type < 1 || type > 255 || id < 0 || id > 0x7FFF) return STEP_DECLINE;
    c->device_type = (int)type;
    c->device_id = (int)id;
    return STEP_OK;
}

/* A framework's current stream on x's device, through its DLPack C exchange API. */
static int work_stream(PyObject *api_capsule, const Call *c, long long *stream) {
    DLPackExchangeAPI *api = PyCapsule_GetPointer(api_capsule, EXCHANGE);
    if (api == NULL) return settle();
    if (api->header.version.major != 1 || api->current_work_stream == NULL) return STEP_DECLINE;
    void *found = NULL;
    if (((CurrentWorkStream)api->current_work_stream)(c->device_type, c->device_id, &found) != 0)
        return PyErr_Occurred() ? settle() : STEP_DECLINE;
    *stream = dlpack_stream((long long)(uintptr_t)found, c->device_type);
    return STEP_OK;
}

/* The consumer's current stream on x's device, asked once: its exchange API, or ask(device id).attribute. */
static int consumer_stream(Call *c, long long *stream) {
    PyObject *query = c->state->stream_query;
    if (query == Py_None) return STEP_DECLINE;
    if (!PyTuple_Check(query)) return work_stream(query, c, stream);
    if (PyTuple_Size(query) != 2) return STEP_DECLINE;
    PyObject *id = PyLong_FromLong(c->device_id);
    PyObject *current = id != NULL ? PyObject_CallFunctionObjArgs(PyTuple_GetItem(query, 0), id, NULL) : NULL;
    Py_XDECREF(id);
    PyObject *handle = current != NULL ? PyObject_GetAttr(current, PyTuple_GetItem(query, 1)) : NULL;
    Py_XDECREF(current);
    long long value = handle != NULL ? PyLong_AsLongLong(handle) : -1;
    Py_XDECREF(handle);
    if (value == -1 && PyErr_Occurred()) return settle();
    *stream = dlpack_stream(value, c->device_type);
    return STEP_OK;
}

/* Whether x is on the producer's current device, where its own handshake needs it to be. */
static int on_current_device(Call *c) {
    PyObject *current = c->producer->current_device;
    if (current == Py_None) return STEP_OK;
    PyObject *found = PyObject_CallNoArgs(current);
    long id = found != NULL ? PyLong_AsLong(found) : -1;
    Py_XDECREF(found);
    if (id == -1 && PyErr_Occurred()) return settle();
    return id == c->device_id ? STEP_OK : STEP_DECLINE;
}

/* source.__dlpack__(stream=stream[, max_version=(1, 3)]) into c->capsule: the producer's own handshake.
 * An Exception the call raised is kept for the pipeline (export_failed()), which does not ask again. */
static int export_with_stream(Call *c, PyObject *source, PyObject *stream) {
    int versioned = c->state->versioned && c->producer->gpu_kind != EXPORT_METHOD_LEGACY; /* before DLPack 1.0 */
    PyObject *kwargs = versioned ? PyDict_Copy(g_versioned_kw) : PyDict_New();
    PyObject *method = PyObject_GetAttr(source, g_dunder);
    int ok = kwargs != NULL && method != NULL && PyDict_SetItem(kwargs, g_stream, stream) == 0;
    c->capsule = ok ? PyObject_Call(method, g_empty, kwargs) : NULL;
    Py_XDECREF(kwargs);
    Py_XDECREF(method);
    if (c->capsule != NULL) return STEP_OK;
    return ok ? export_failed(c) : settle();
}

/* x's export for a consumer reading on `stream`, the handshake done (see the top of this file). */
static int export_gpu(Call *c, long long stream) {
    long long forced = -1;
    int step = STEP_OK, same = 0;
    if (c->producer->gpu_kind == EXPORT_EXCHANGE) {
        long long mine = 0;
        step = work_stream(c->producer->handle, c, &mine);
        same = step == STEP_OK && mine == stream;
    }
    if (step != STEP_OK) return step;
    PyObject *source = export_source(c, &forced, same); /* x, or its alias */
    if (source == NULL) return settle();
    if (!same) step = on_current_device(c); /* its handshake is made on the current device */
    if (step == STEP_OK && same) {
        step = export_managed(c, source, c->state->versioned); /* the same stream: no event to record */
    } else if (step == STEP_OK) { /* the producer's own handshake */
        PyObject *value = PyLong_FromLongLong(stream);
        step = value != NULL ? export_with_stream(c, source, value) : settle();
        Py_XDECREF(value);
    }
    Py_DECREF(source);
    return step == STEP_OK ? read_export(c, forced) : step;
}

/* --- Deferred: the export inside the consumer's import, with the stream it passes ---------------- */
typedef struct {
    PyObject_HEAD
    Call *call;       /* the conversion in progress, until its one __dlpack__ call (borrowed) */
    PyObject *device; /* (type, id) */
} Deferred;

/* __dlpack__(*, stream=None, max_version=None, ...): x exported with the consumer's stream, checked
 * against its stored route and relabelled as it says; Declined where the route does not replay it. */
static PyObject *deferred_dlpack(PyObject *obj, PyObject *args, PyObject *kwargs) {
    Deferred *self = (Deferred *)obj;
    Call *c = self->call;
    (void)args;
    self->call = NULL; /* single use, and never after its conversion returned */
    if (c == NULL) {
        PyErr_SetString(PyExc_BufferError, "this dlbridge carrier was already used");
        return NULL;
    }
    PyObject *stream = kwargs != NULL ? PyDict_GetItemWithError(kwargs, g_stream) : NULL;
    if (stream == NULL && PyErr_Occurred()) return NULL;
    long long forced = -1;
    PyObject *source = export_source(c, &forced, 0);
    int step = source != NULL ? export_with_stream(c, source, stream != NULL ? stream : Py_None) : settle();
    Py_XDECREF(source);
    if (step == STEP_OK) step = read_export(c, forced);
    if (step == STEP_OK) step = find_route(c);
    c->handover = 0; /* exported for the consumer's own stream: never handed to the pipeline */
    if (step == STEP_OK) {
        Py_INCREF(c->capsule);
        return c->capsule;
    }
    if (step == STEP_DECLINE && !PyErr_Occurred()) PyErr_SetString(g_declined, "declined: the pipeline converts it");
    return NULL;
}

static PyObject *deferred_device(PyObject *obj, PyObject *unused) {
    (void)unused;
    PyObject *device = ((Deferred *)obj)->device;
    Py_INCREF(device);
    return device;
}

static void deferred_dealloc(PyObject *obj) {
    PyTypeObject *type = Py_TYPE(obj);
    Py_CLEAR(((Deferred *)obj)->device);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(obj);
    Py_DECREF(type);
}

static PyMethodDef deferred_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))deferred_dlpack, METH_VARARGS | METH_KEYWORDS,
     "The array's capsule, exported with the consumer's stream, once."},
    {"__dlpack_device__", deferred_device, METH_NOARGS, "The array's device."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot deferred_slots[] = {
    {Py_tp_dealloc, deferred_dealloc},
    {Py_tp_methods, deferred_methods},
    {Py_tp_doc, "A GPU array for a consumer that asks for its capsule with its own stream (made by the route)."},
    {0, NULL},
};

PyType_Spec deferred_spec = {"dlbridge._accel.Deferred", sizeof(Deferred), 0, Py_TPFLAGS_DEFAULT, deferred_slots};

/* The consumer's import of a Deferred carrier for x, then the finish of the route it chose. */
static int import_deferred(Call *c) {
    PyTypeObject *type = (PyTypeObject *)g_deferred_type;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    Deferred *carrier = (Deferred *)alloc(type, 0);
    if (carrier == NULL) return settle();
    carrier->device = Py_BuildValue("(ii)", c->device_type, c->device_id);
    carrier->call = carrier->device != NULL ? c : NULL;
    c->result = carrier->call != NULL ? PyObject_CallFunctionObjArgs(c->state->importer, carrier, NULL) : NULL;
    carrier->call = NULL; /* a consumer that kept it cannot reach this call any more */
    Py_DECREF(carrier);
    if (c->result == NULL) return settle();
    return finish(c);
}

/* The GPU half: the array's device, then a deferred import, or the export with the stream handshake. */
int gpu_half(Call *c) {
    int step = check_guards(c, c->producer->gpu_guards);
    if (step == STEP_OK) step = query_device(c);
    if (step != STEP_OK) return step;
    if (c->device_type == 1) return export_x(c); /* host memory (JAX's CPU arrays where JAX has a GPU) */
    if (c->device_type != 2 && c->device_type != 10) return STEP_DECLINE;
    if (c->state->deferred) return import_deferred(c);
    long long stream = 0;
    step = consumer_stream(c, &stream);
    return step == STEP_OK ? export_gpu(c, stream) : step;
}
