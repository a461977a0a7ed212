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

void free_managed(DLManagedTensorVersioned *managed) {
    if (managed != NULL && managed->deleter != NULL) managed->deleter(managed);
}

/* The tensor of a capsule named exactly LEGACY or VERSIONED (major 1); NULL otherwise, no error set. */
DLTensor *capsule_tensor(PyObject *capsule, int *versioned, uint64_t **flags) {
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
int plain_layout(const DLTensor *t) {
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
PyObject *probe(PyObject *module, PyObject *capsule) {
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
