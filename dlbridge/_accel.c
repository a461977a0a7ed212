/* dlbridge._accel: the compiled fast route.
 *
 * One function, convert(), replays a conversion that dlbridge/_route.py has already decided:
 * a CPU array of a framework's own type, dense C order, no keyword but fallback=. Everything
 * else, and anything unexpected on the way, goes to the full Python pipeline (the spec's "slow"
 * callable), which makes the same decision with every check and message. So this file holds no
 * framework knowledge and no error messages: it reads what _route.py hands it (see the T_ and P_
 * indexes there, mirrored below) and declines whatever it does not recognise.
 *
 * Also here: probe(), the capsule reader's compact form, and Carrier, a single-use object that
 * hands a ready capsule to consumers that only take objects with __dlpack__.
 *
 * CPython limited API 3.10 (abi3): one build serves every supported Python. Struct layouts are
 * DLPack's (dlpack.h, v1.3): DLTensor, DLManagedTensorVersioned and the DLPackExchangeAPI table.
 */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ACCEL_ABI 2

/* Py_SETREF / Py_XSETREF are not in the limited API before 3.12. */
#define SETREF(dst, src) do { PyObject *_old = (PyObject *)(dst); (dst) = (src); Py_DECREF(_old); } while (0)
#define XSETREF(dst, src) do { PyObject *_old = (PyObject *)(dst); (dst) = (src); Py_XDECREF(_old); } while (0)

/* --- DLPack structs (dlpack.h v1.3) -------------------------------------------------------- */
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;
typedef struct {
    DLPackExchangeAPIHeader header;
    void *managed_tensor_allocator;
    int (*managed_tensor_from_py_object_no_sync)(void *py_object, DLManagedTensorVersioned **out);
    int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *tensor, void **out_py_object);
    void *dltensor_from_py_object_no_sync;
    void *current_work_stream;
} DLPackExchangeAPI;

#define FLAG_READ_ONLY 1u
#define MAX_NDIM 64
static const char LEGACY[] = "dltensor";
static const char VERSIONED[] = "dltensor_versioned";
static const char USED_VERSIONED[] = "used_dltensor_versioned";
static const char EXCHANGE[] = "dlpack_exchange_api";

/* --- the spec layout (dlbridge/_route.py) -------------------------------------------------- */
enum { T_SLOW, T_READY, T_KIND, T_IMPORT, T_API, T_VERSIONED, T_ALIGN, T_READONLY_OK, T_OFFSET_OK,
       T_ROUTES, T_CAPS_FN, T_CAPS, T_DECIDE, T_SELF, T_SELF_IMPORT, T_LEN };
enum { IMPORT_CAPSULE = 0, IMPORT_CARRIER = 1, IMPORT_EXCHANGE = 2 };
enum { P_KIND, P_HANDLE, P_GUARDS, P_ALIAS, P_RELABEL, P_LEN };
enum { EXPORT_METHOD = 0, EXPORT_EXCHANGE = 1, EXPORT_FUNCTION = 2, EXPORT_METHOD_LEGACY = 3 };

/* Set once by configure(). */
static PyObject *g_producers;     /* dict: exact type -> producer spec tuple */
static PyObject *g_views;         /* dict: id(view) -> record (_logical._entries) */
static PyObject *g_default;       /* list [fallback name or None]: the default when no scope is open */
static PyObject *g_fallbacks;     /* tuple of the fallback names, index = route key bits 32.. */
static PyObject *g_not_given;     /* the NOT_GIVEN sentinel */
static PyObject *g_get_default;   /* get_default_fallback(): when the cell is None */
static PyObject *g_versioned_kw;  /* {"max_version": (1, 3)} */
static PyObject *g_empty;         /* () */
static PyObject *g_dunder;        /* "__dlpack__" */
static PyObject *g_dtype;         /* "dtype" */
static PyObject *g_view;          /* "view" */
static PyObject *g_cpu;           /* (1, 0) */
static PyObject *g_carrier_type;

/* --- Carrier ---------------------------------------------------------------------------- */
typedef struct { PyObject_HEAD PyObject *capsule; PyObject *device; } Carrier;

static PyObject *carrier_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *capsule, *device;
    static char *names[] = {"capsule", "device", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO", names, &capsule, &device)) return NULL;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    Carrier *self = (Carrier *)alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(capsule);
    Py_INCREF(device);
    self->capsule = capsule;
    self->device = device;
    return (PyObject *)self;
}

static void carrier_dealloc(PyObject *obj) {
    Carrier *self = (Carrier *)obj;
    PyTypeObject *type = Py_TYPE(obj);
    Py_CLEAR(self->capsule);
    Py_CLEAR(self->device);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(obj);
    Py_DECREF(type);
}

static PyObject *carrier_dlpack(PyObject *obj, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    /* The handshake with the real producer is done: the consumer's keywords are not needed. */
    Carrier *self = (Carrier *)obj;
    PyObject *capsule = self->capsule;
    (void)args;
    (void)nargs;
    (void)kwnames;
    if (capsule == NULL || capsule == Py_None) {
        PyObject *errors = PyImport_ImportModule("dlbridge._errors");
        PyObject *cls = errors ? PyObject_GetAttrString(errors, "CapsuleError") : NULL;
        Py_XDECREF(errors);
        if (cls != NULL) {
            PyErr_SetString(cls, "this capsule was already handed to a consumer");
            Py_DECREF(cls);
        }
        return NULL;
    }
    self->capsule = NULL;
    return capsule; /* the reference moves to the caller */
}

static PyObject *carrier_device(PyObject *obj, PyObject *unused) {
    (void)unused;
    PyObject *device = ((Carrier *)obj)->device;
    Py_INCREF(device);
    return device;
}

static PyMethodDef carrier_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))carrier_dlpack, METH_FASTCALL | METH_KEYWORDS,
     "The capsule, once."},
    {"__dlpack_device__", carrier_device, METH_NOARGS, "The capsule's device."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot carrier_slots[] = {
    {Py_tp_new, carrier_new},
    {Py_tp_dealloc, carrier_dealloc},
    {Py_tp_methods, carrier_methods},
    {Py_tp_doc, "Carrier(capsule, device): hands a ready capsule to a consumer that only takes "
                "objects with __dlpack__. Single use, like the capsule."},
    {0, NULL},
};

static PyType_Spec carrier_spec = {
    "dlbridge._accel.Carrier", sizeof(Carrier), 0, Py_TPFLAGS_DEFAULT, carrier_slots,
};

static PyObject *make_carrier(PyObject *capsule, PyObject *device) {
    PyTypeObject *type = (PyTypeObject *)g_carrier_type;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    Carrier *self = (Carrier *)alloc(type, 0);
    if (self == NULL) return NULL;
    Py_INCREF(capsule);
    Py_INCREF(device);
    self->capsule = capsule;
    self->device = device;
    return (PyObject *)self;
}

/* --- capsules ------------------------------------------------------------------------------ */

/* A capsule for a managed tensor from an exchange-API export: frees it unless a consumer took it. */
static void managed_capsule_destructor(PyObject *capsule) {
    if (PyCapsule_IsValid(capsule, VERSIONED)) {
        DLManagedTensorVersioned *managed = PyCapsule_GetPointer(capsule, VERSIONED);
        if (managed != NULL && managed->deleter != NULL) managed->deleter(managed);
    }
}

/* A legacy DLManagedTensor standing for a versioned one (for consumers that read 'dltensor' only):
 * the same DLTensor (its shape and strides stay owned by the versioned tensor), freed through it.
 * The deleter may run on any thread, without the GIL: plain malloc/free. */
static void legacy_deleter(DLManagedTensor *self) {
    DLManagedTensorVersioned *versioned = self->manager_ctx;
    if (versioned != NULL && versioned->deleter != NULL) versioned->deleter(versioned);
    free(self);
}

static void legacy_capsule_destructor(PyObject *capsule) {
    if (PyCapsule_IsValid(capsule, LEGACY)) {
        DLManagedTensor *managed = PyCapsule_GetPointer(capsule, LEGACY);
        if (managed != NULL && managed->deleter != NULL) managed->deleter(managed);
    }
}

/* A 'dltensor' capsule owning `versioned` (freed here on failure); NULL with an error set on failure. */
static PyObject *legacy_capsule(DLManagedTensorVersioned *versioned) {
    DLManagedTensor *legacy = malloc(sizeof(DLManagedTensor));
    if (legacy == NULL) {
        if (versioned->deleter != NULL) versioned->deleter(versioned);
        return PyErr_NoMemory();
    }
    legacy->dl_tensor = versioned->dl_tensor;
    legacy->manager_ctx = versioned;
    legacy->deleter = legacy_deleter;
    PyObject *capsule = PyCapsule_New(legacy, LEGACY, legacy_capsule_destructor);
    if (capsule == NULL) legacy_deleter(legacy);
    return capsule;
}

static void free_managed(DLManagedTensorVersioned *managed) {
    if (managed != NULL && managed->deleter != NULL) managed->deleter(managed);
}

/* The tensor of a capsule named exactly LEGACY or VERSIONED (major 1); NULL otherwise, no error set. */
static DLTensor *capsule_tensor(PyObject *capsule, int *versioned, uint64_t **flags) {
    const char *name = PyCapsule_GetName(capsule);
    if (name == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (strcmp(name, VERSIONED) == 0) {
        DLManagedTensorVersioned *managed = PyCapsule_GetPointer(capsule, VERSIONED);
        if (managed == NULL) {
            PyErr_Clear();
            return NULL;
        }
        if (managed->version.major != 1) return NULL;
        *versioned = 1;
        *flags = &managed->flags;
        return &managed->dl_tensor;
    }
    if (strcmp(name, LEGACY) == 0) {
        DLTensor *tensor = PyCapsule_GetPointer(capsule, LEGACY); /* DLManagedTensor starts with it */
        if (tensor == NULL) PyErr_Clear();
        *versioned = 0;
        *flags = NULL;
        return tensor;
    }
    return NULL;
}

/* Dense C order (strides absent or exactly the C strides), a sane shape and a span inside the
 * 64-bit address space: the only layout the fast route takes. */
static int plain_layout(const DLTensor *t) {
    if (t->ndim < 0 || t->ndim > MAX_NDIM) return 0;
    if (t->ndim > 0 && t->shape == NULL) return 0;
    if (t->dtype.bits == 0 || t->dtype.lanes == 0) return 0;
    uint64_t size = 1, step = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        int64_t dim = t->shape[i];
        if (dim < 0) return 0;
        if (t->strides != NULL && t->strides[i] != (int64_t)step) return 0;
        if (dim && step > (UINT64_MAX >> 1) / (uint64_t)dim) return 0;
        step *= (uint64_t)dim;
    }
    size = step;
    if (size == 0) return 1;
    if (t->data == NULL) return 0;
    uint64_t itemsize = ((uint64_t)t->dtype.bits * t->dtype.lanes + 7) / 8;
    if (size > (UINT64_MAX >> 2) / itemsize) return 0;
    uint64_t start = (uint64_t)(uintptr_t)t->data + t->byte_offset;
    if (start < (uint64_t)(uintptr_t)t->data) return 0;
    if (start + size * itemsize < start) return 0;
    return 1;
}

/* --- probe ---------------------------------------------------------------------------------- */

static PyObject *int64_tuple(const int64_t *values, int n) {
    PyObject *tuple = PyTuple_New(n);
    if (tuple == NULL) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(values[i]);
        if (v == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SetItem(tuple, i, v);
    }
    return tuple;
}

/* probe(capsule) -> (versioned, major, minor, flags, data, device_type, device_id, ndim, code, bits,
 * lanes, shape, strides | None, byte_offset), or None for anything the Python reader must judge
 * (a wrong name, a NULL pointer, another major version, ndim out of range, a NULL shape). */
static PyObject *probe(PyObject *module, PyObject *capsule) {
    (void)module;
    const char *name = PyCapsule_GetName(capsule);
    if (name == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int versioned = strcmp(name, VERSIONED) == 0;
    if (!versioned && strcmp(name, LEGACY) != 0) Py_RETURN_NONE;
    void *pointer = PyCapsule_GetPointer(capsule, name);
    if (pointer == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    uint32_t major = 0, minor = 0;
    uint64_t flags = 0;
    DLTensor *t = pointer;
    if (versioned) {
        DLManagedTensorVersioned *managed = pointer;
        if (managed->version.major != 1) Py_RETURN_NONE;
        major = managed->version.major;
        minor = managed->version.minor;
        flags = managed->flags;
        t = &managed->dl_tensor;
    }
    if (t->ndim < 0 || t->ndim > MAX_NDIM || (t->ndim > 0 && t->shape == NULL)) Py_RETURN_NONE;
    PyObject *shape = int64_tuple(t->shape, t->ndim);
    if (shape == NULL) return NULL;
    PyObject *strides;
    if (t->ndim > 0 && t->strides != NULL) {
        strides = int64_tuple(t->strides, t->ndim);
        if (strides == NULL) {
            Py_DECREF(shape);
            return NULL;
        }
    } else {
        strides = Py_None;
        Py_INCREF(strides);
    }
    PyObject *version = versioned ? Py_True : Py_False;
    return Py_BuildValue("(OIIKKiiiiiiNNK)", version, major, minor, (unsigned long long)flags,
                         (unsigned long long)(uintptr_t)t->data, t->device.device_type, t->device.device_id,
                         t->ndim, t->dtype.code, t->dtype.bits, t->dtype.lanes, shape, strides,
                         (unsigned long long)t->byte_offset);
}

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
static PyObject *convert(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
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

/* --- Route: a public conversion function (to_numpy, ...) whose call enters convert() directly ---- */
typedef struct { PyObject_HEAD PyObject *spec; PyObject *wrapped; PyObject *doc; } Route;

static PyObject *g_keywords[5]; /* fallback, dtype, device, copy, stream: args[2..6] of convert() */

static PyObject *route_call(PyObject *obj, PyObject *args, PyObject *kwargs) {
    Route *self = (Route *)obj;
    PyObject *argv[7] = {self->spec, NULL, g_not_given ? g_not_given : Py_None, Py_None, Py_None, Py_None, Py_None};
    if (PyTuple_Size(args) != 1) return PyObject_Call(self->wrapped, args, kwargs); /* its TypeError */
    argv[1] = PyTuple_GetItem(args, 0);
    if (kwargs != NULL) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            int found = 0;
            for (int i = 0; i < 5 && !found; i++) {
                if (key == g_keywords[i] || PyUnicode_Compare(key, g_keywords[i]) == 0) {
                    argv[2 + i] = value;
                    found = 1;
                }
            }
            if (PyErr_Occurred()) return NULL;
            if (!found) return PyObject_Call(self->wrapped, args, kwargs); /* its TypeError */
        }
    }
    return convert(NULL, argv, 7);
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
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot route_slots[] = {
    {Py_tp_members, route_members},
    {Py_tp_new, route_new},
    {Py_tp_dealloc, route_dealloc},
    {Py_tp_call, route_call},
    {Py_tp_getattro, route_getattro},
    {Py_tp_repr, route_repr},
    {Py_tp_descr_get, route_get},
    {0, NULL},
};

static PyType_Spec route_spec = {"dlbridge._accel.Route", sizeof(Route), 0, Py_TPFLAGS_DEFAULT, route_slots};

/* configure(producers, views, default_cell, fallbacks, not_given, get_default) */
static PyObject *configure(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *producers, *views, *cell, *fallbacks, *not_given, *get_default;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OO", &PyDict_Type, &producers, &PyDict_Type, &views, &PyList_Type, &cell,
                          &PyTuple_Type, &fallbacks, &not_given, &get_default))
        return NULL;
    if (PyList_Size(cell) != 1) {
        PyErr_SetString(PyExc_ValueError, "default_cell must hold one item");
        return NULL;
    }
    Py_INCREF(producers);
    Py_INCREF(views);
    Py_INCREF(cell);
    Py_INCREF(fallbacks);
    Py_INCREF(not_given);
    Py_INCREF(get_default);
    XSETREF(g_get_default, get_default);
    XSETREF(g_producers, producers);
    XSETREF(g_views, views);
    XSETREF(g_default, cell);
    XSETREF(g_fallbacks, fallbacks);
    XSETREF(g_not_given, not_given);
    Py_RETURN_NONE;
}

static PyMethodDef accel_methods[] = {
    {"convert", (PyCFunction)(void (*)(void))convert, METH_FASTCALL,
     "convert(spec, x, fallback, dtype, device, copy, stream): the fast route, else spec's slow callable."},
    {"probe", probe, METH_O, "probe(capsule): the capsule's raw fields, or None for the Python reader to judge."},
    {"configure", configure, METH_VARARGS, "configure(producers, views, default_cell, fallbacks, not_given, get_default)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef accel_module = {
    PyModuleDef_HEAD_INIT, "dlbridge._accel", "dlbridge's compiled fast route", -1, accel_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__accel(void) {
    PyObject *m = PyModule_Create(&accel_module);
    if (m == NULL) return NULL;
    g_carrier_type = PyType_FromSpec(&carrier_spec);
    PyObject *route_type = PyType_FromSpec(&route_spec);
    const char *keywords[5] = {"fallback", "dtype", "device", "copy", "stream"};
    for (int i = 0; i < 5; i++) {
        g_keywords[i] = PyUnicode_InternFromString(keywords[i]);
        if (g_keywords[i] == NULL) return NULL;
    }
    if (route_type == NULL || PyModule_AddObject(m, "Route", route_type) < 0) {
        Py_XDECREF(route_type);
        Py_DECREF(m);
        return NULL;
    }
    g_empty = PyTuple_New(0);
    g_dunder = PyUnicode_InternFromString("__dlpack__");
    g_dtype = PyUnicode_InternFromString("dtype");
    g_view = PyUnicode_InternFromString("view");
    if (g_dtype == NULL || g_view == NULL) return NULL;
    g_cpu = Py_BuildValue("(ii)", 1, 0);
    PyObject *version = Py_BuildValue("(ii)", 1, 3);
    g_versioned_kw = PyDict_New();
    if (g_carrier_type == NULL || g_empty == NULL || g_dunder == NULL || g_cpu == NULL || version == NULL ||
        g_versioned_kw == NULL || PyDict_SetItemString(g_versioned_kw, "max_version", version) < 0 ||
        PyModule_AddIntConstant(m, "ABI", ACCEL_ABI) < 0 ||
        PyModule_AddObjectRef(m, "Carrier", g_carrier_type) < 0) {
        Py_XDECREF(version);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(version);
    return m;
}
