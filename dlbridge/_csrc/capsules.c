/* Capsules: reading, wrapping and freeing DLPack tensors, without consuming anyone else's. */
#include "accel.h"

/* --- capsules ------------------------------------------------------------------------------ */

/* A capsule for a managed tensor from an exchange-API export: frees it unless a consumer took it. */
void managed_capsule_destructor(PyObject *capsule) {
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
PyObject *legacy_capsule(DLManagedTensorVersioned *versioned) {
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

/* A managed tensor standing for another (the same DLTensor, flags and version) that also holds a Python
 * object until it is freed: what keeps the exported memory alive where the producer's own tensor does not.
 * Its deleter may run on any thread, with or without the GIL: the held object is released with the GIL
 * taken, and left to leak once the interpreter is gone, as NumPy's own export deleter does
 * (numpy/_core/src/multiarray/dlpack.c, array_dlpack_deleter). */
typedef struct {
    DLManagedTensorVersioned outer;
    DLManagedTensorVersioned *inner;
    PyObject *held;
} Kept;

static void kept_deleter(DLManagedTensorVersioned *self) {
    Kept *kept = self->manager_ctx;
    if (kept->inner->deleter != NULL) kept->inner->deleter(kept->inner);
    if (Py_IsInitialized()) {
        PyGILState_STATE state = PyGILState_Ensure();
        Py_DECREF(kept->held);
        PyGILState_Release(state);
    }
    free(kept);
}

/* `managed` holding `held` (both stolen: freed here on failure, NULL with an error set). */
DLManagedTensorVersioned *keeping(DLManagedTensorVersioned *managed, PyObject *held) {
    Kept *kept = malloc(sizeof(Kept));
    if (kept == NULL) {
        free_managed(managed);
        Py_DECREF(held);
        PyErr_NoMemory();
        return NULL;
    }
    kept->outer = *managed;
    kept->outer.manager_ctx = kept;
    kept->outer.deleter = kept_deleter;
    kept->inner = managed;
    kept->held = held;
    return &kept->outer;
}

void free_managed(DLManagedTensorVersioned *managed) {
    if (managed != NULL && managed->deleter != NULL) managed->deleter(managed);
}

/* --- the capsule reader ----------------------------------------------------------------------- */

/* The tensor of a capsule named exactly LEGACY or VERSIONED (major 1) with ndim in 0..MAX_NDIM and a shape
 * where ndim > 0: 1 and `view` filled; else 0, no error set (_read.read says what is wrong with it). */
int view_capsule(PyObject *capsule, CapsuleView *view) {
    memset(view, 0, sizeof *view);
    const char *name = PyCapsule_GetName(capsule);
    if (name == NULL) {
        PyErr_Clear();
        return 0;
    }
    int versioned = strcmp(name, VERSIONED) == 0;
    if (!versioned && strcmp(name, LEGACY) != 0) return 0;
    void *pointer = PyCapsule_GetPointer(capsule, name);
    if (pointer == NULL) {
        PyErr_Clear();
        return 0;
    }
    DLTensor *t = pointer; /* a DLManagedTensor starts with its DLTensor */
    if (!versioned) view->has_deleter = ((DLManagedTensor *)pointer)->deleter != NULL;
    else {
        DLManagedTensorVersioned *managed = pointer;
        if (managed->version.major != 1) return 0; /* DLPack: read nothing past the version of another major */
        view->major = managed->version.major;
        view->minor = managed->version.minor;
        view->managed = managed;
        view->flags = &managed->flags;
        view->has_deleter = managed->deleter != NULL;
        t = &managed->dl_tensor;
    }
    if (t->ndim < 0 || t->ndim > MAX_NDIM || (t->ndim > 0 && t->shape == NULL)) return 0;
    view->tensor = t;
    view->versioned = versioned;
    return 1;
}

/* The layout class (the same test as _probe.py's _layout): LAYOUT_DENSE for dense C order (no strides, or
 * exactly the C strides), bits and lanes set, a data pointer and a span inside the 64-bit address space;
 * LAYOUT_EMPTY for a dense tensor of no elements; LAYOUT_OTHER for anything else. */
/* Whether a * b (both under 2**31) is under 2**62: true without a division, which the common shapes skip. */
#define SMALL(a, b) ((((a) | (b)) >> 31) == 0)

int layout_class(const DLTensor *t) {
    if (t->dtype.bits == 0 || t->dtype.lanes == 0) return LAYOUT_OTHER;
    int empty = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0) return LAYOUT_OTHER;
        empty |= t->shape[i] == 0;
    }
    if (t->strides != NULL) { /* exactly the C strides: a C stride past 2**63 equals no int64 stride */
        uint64_t step = 1;
        int past = 0;
        for (int i = t->ndim - 1; i >= 0; i--) {
            if (past || t->strides[i] != (int64_t)step) return LAYOUT_OTHER;
            uint64_t dim = (uint64_t)t->shape[i];
            if (dim && !SMALL(step, dim) && step > (UINT64_MAX >> 1) / dim) past = 1;
            else step *= dim;
        }
    }
    if (empty) return LAYOUT_EMPTY;
    uint64_t itemsize = ((uint64_t)t->dtype.bits * t->dtype.lanes + 7) / 8, span = itemsize;
    for (int i = 0; i < t->ndim; i++) {
        uint64_t dim = (uint64_t)t->shape[i];
        if (!SMALL(span, dim) && span > (UINT64_C(1) << 62) / dim) return LAYOUT_OTHER;
        span *= dim;
    }
    if (t->data == NULL || span >= (UINT64_C(1) << 62)) return LAYOUT_OTHER;
    uint64_t start = (uint64_t)(uintptr_t)t->data + t->byte_offset;
    if (start < (uint64_t)(uintptr_t)t->data || start + span < start) return LAYOUT_OTHER;
    return LAYOUT_DENSE;
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
 * lanes, shape, strides | None, byte_offset, layout, has_deleter), or None where view_capsule() reads nothing. */
PyObject *probe(PyObject *module, PyObject *capsule) {
    (void)module;
    CapsuleView view;
    if (!view_capsule(capsule, &view)) Py_RETURN_NONE;
    const DLTensor *t = view.tensor;
    PyObject *shape = int64_tuple(t->shape, t->ndim), *strides = NULL;
    if (shape != NULL && t->ndim > 0 && t->strides != NULL) {
        strides = int64_tuple(t->strides, t->ndim);
    } else if (shape != NULL) {
        strides = Py_None;
        Py_INCREF(strides);
    }
    if (strides == NULL) {
        Py_XDECREF(shape);
        return NULL;
    }
    PyObject *versioned = view.versioned ? Py_True : Py_False;
    unsigned long long flags = view.flags != NULL ? (unsigned long long)*view.flags : 0;
    PyObject *deleter = view.has_deleter ? Py_True : Py_False;
    return Py_BuildValue("(OIIKKiiiiiiNNKiO)", versioned, view.major, view.minor, flags,
                         (unsigned long long)(uintptr_t)t->data, t->device.device_type, t->device.device_id,
                         t->ndim, t->dtype.code, t->dtype.bits, t->dtype.lanes, shape, strides,
                         (unsigned long long)t->byte_offset, layout_class(t), deleter);
}

#define OFFSET(name, type, field) {name, offsetof(type, field)}

/* The struct layout as compiled, for the check against dlbridge/_capsule/_layout.py's LAYOUT. */
PyObject *layout_offsets(void) {
    const struct { const char *name; size_t value; } entries[] = {
        {"DLTensor", sizeof(DLTensor)},
        OFFSET("DLTensor.data", DLTensor, data),
        OFFSET("DLTensor.device_type", DLTensor, device.device_type),
        OFFSET("DLTensor.ndim", DLTensor, ndim),
        OFFSET("DLTensor.code", DLTensor, dtype.code),
        OFFSET("DLTensor.shape", DLTensor, shape),
        OFFSET("DLTensor.strides", DLTensor, strides),
        OFFSET("DLTensor.byte_offset", DLTensor, byte_offset),
        OFFSET("DLManagedTensorVersioned.deleter", DLManagedTensorVersioned, deleter),
        OFFSET("DLManagedTensorVersioned.flags", DLManagedTensorVersioned, flags),
        OFFSET("DLManagedTensorVersioned.dl_tensor", DLManagedTensorVersioned, dl_tensor),
        OFFSET("DLManagedTensor.deleter", DLManagedTensor, deleter),
    };
    PyObject *layout = PyDict_New();
    for (size_t i = 0; layout != NULL && i < sizeof entries / sizeof entries[0]; i++) {
        PyObject *value = PyLong_FromSize_t(entries[i].value);
        if (value == NULL || PyDict_SetItemString(layout, entries[i].name, value) < 0) Py_CLEAR(layout);
        Py_XDECREF(value);
    }
    return layout;
}
