/* dlbridge._accel: shared declarations of the compiled fast route (see module.c for the overview).
 *
 * CPython limited API 3.10 (abi3): one build serves every supported Python. Struct layouts are
 * DLPack's (dlpack.h, v1.3): DLTensor, DLManagedTensor(Versioned) and the DLPackExchangeAPI table.
 */
#ifndef DLBRIDGE_ACCEL_H
#define DLBRIDGE_ACCEL_H
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <structmember.h>

#define ACCEL_ABI 3

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
#define LEGACY "dltensor"
#define VERSIONED "dltensor_versioned"
#define USED_VERSIONED "used_dltensor_versioned"
#define EXCHANGE "dlpack_exchange_api"

/* --- the state layout (dlbridge/_route.py; tests/test_route_reentrancy.py checks they agree) ---- */
/* A spec is a one-item list holding the target's state, an immutable tuple read by these indexes. */
enum { S_SLOW, S_READY, S_KIND, S_IMPORT, S_API, S_VERSIONED, S_ALIGN, S_READONLY_OK, S_OFFSET_OK,
       S_ROUTES, S_CAPS_FN, S_CAPS, S_DECIDE, S_SELF, S_SELF_IMPORT, S_SELF_DTYPES, S_LEN };
enum { IMPORT_CAPSULE = 0, IMPORT_CARRIER = 1, IMPORT_EXCHANGE = 2 };
enum { P_KIND, P_HANDLE, P_GUARDS, P_ALIAS, P_RELABEL, P_LEN };
enum { EXPORT_METHOD = 0, EXPORT_EXCHANGE = 1, EXPORT_FUNCTION = 2, EXPORT_METHOD_LEGACY = 3 };

/* Set once by configure(). */
extern PyObject *g_producers;     /* dict: exact type -> producer spec tuple */
extern PyObject *g_views;         /* dict: id(view) -> record (_logical._entries) */
extern PyObject *g_default;       /* list [fallback name or None]: the default when no scope is open */
extern PyObject *g_fallbacks;     /* tuple of the fallback names, index = route key bits 32.. */
extern PyObject *g_not_given;     /* the NOT_GIVEN sentinel */
extern PyObject *g_get_default;   /* get_default_fallback(): when the cell is None */
extern PyObject *g_versioned_kw;  /* {"max_version": (1, 3)} */
extern PyObject *g_empty;         /* () */
extern PyObject *g_dunder;        /* "__dlpack__" */
extern PyObject *g_dtype;         /* "dtype" */
extern PyObject *g_view;          /* "view" */
extern PyObject *g_cpu;           /* (1, 0) */
extern PyObject *g_carrier_type;

/* capsules.c */
void managed_capsule_destructor(PyObject *capsule);
PyObject *legacy_capsule(DLManagedTensorVersioned *versioned);
void free_managed(DLManagedTensorVersioned *managed);
DLTensor *capsule_tensor(PyObject *capsule, int *versioned, uint64_t **flags);
int plain_layout(const DLTensor *t);
PyObject *probe(PyObject *module, PyObject *capsule);

/* objects.c: Carrier and Route */
extern PyType_Spec carrier_spec, route_spec;
PyObject *make_carrier(PyObject *capsule, PyObject *device);
int objects_init(void);

/* route.c */
PyObject *convert(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif
