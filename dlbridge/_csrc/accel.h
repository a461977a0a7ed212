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

#define ACCEL_ABI 8

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
typedef int (*CurrentWorkStream)(int32_t device_type, int32_t device_id, void **out_stream);
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

/* --- the route's records (records.c; built by dlbridge/_route/_replay.py, read here by field) ---------- */
/* A spec is a one-item list holding the target's State, replaced whole when it changes. */
typedef struct {
    PyObject_HEAD
    PyObject *target;       /* the consumer's adapter (for the pipeline) */
    PyObject *importer;     /* the consumer's import: importer(capsule or carrier) */
    PyObject *api;          /* the consumer's exchange API capsule, or None */
    PyObject *routes;       /* Routes (records.c) or dict: route key -> Replay or None */
    PyObject *caps_guard;   /* (object, attribute, value) the capability row was read under, else None */
    PyObject *caps;         /* the capability row the routes were decided for */
    PyObject *decide;       /* decide(key): the Replay (stored), or None */
    PyObject *self_type;    /* the consumer's own array type, or None */
    PyObject *self_import;  /* f(x) for x of self_type */
    PyObject *self_dtypes;  /* list: the dtypes of self_type the pipeline took as they are */
    PyObject *stream_query; /* its current stream: an exchange API capsule, (ask, attribute), or None */
    int kind;               /* IMPORT_* */
    char ready, versioned;  /* versioned: the capsule kind the consumer's producer is asked for */
    char deferred;          /* it asks a GPU producer for the capsule itself, with its own stream */
    void *api_table;        /* (C only) api's DLPackExchangeAPI, read once (NULL: not such a capsule) */
} StateRecord;
#define RELABEL_KINDS 16
typedef struct {
    PyObject_HEAD
    PyObject *handle;         /* the exchange API capsule, or the export function */
    PyObject *guards;         /* tuple of (attribute, call, expected): CPU memory; None: never on the CPU half */
    PyObject *alias;          /* an attribute name whose value is exported instead of x, or None */
    PyObject *keep;           /* a method name: an exchange-API export of x holds x.<keep>() instead (or None) */
    PyObject *relabels;       /* dict: dtype -> (view dtype, triple), or None */
    PyObject *gpu_guards;     /* tuple: the GPU half's guards; None: no GPU half */
    PyObject *device_method;  /* x.<device_method>() says where x is (a str), or None */
    PyObject *current_device; /* current_device() -> id where the handshake needs x's device current, or None */
    int kind;                 /* EXPORT_*: how CPU arrays are exported */
    int device_type;          /* the device type device_method's id is of; 0: it gives (type, id) */
    int gpu_kind;             /* EXPORT_EXCHANGE (no sync: equal streams only) or EXPORT_METHOD (stream=) */
    char readonly;            /* its arrays are read-only whatever their capsules say (JAX): READ_ONLY ORed in */
    /* (C only, set on first use: attributes.c's learn_method) the type whose __dlpack__ was looked up, and that
     * method as its own class defines it where getattr(x, "__dlpack__") is always it bound to x (else None) */
    PyObject *method_type, *method;
    /* (C only, with method) its C function where it takes METH_FASTCALL | METH_KEYWORDS, else NULL */
    void *fastcall;
    /* (C only, set on first use: attributes.c's read_dtype) the type whose dtype was looked up, and the getset
     * its class defines for it where getattr(x, "dtype") always calls that (else None), with its getter */
    PyObject *dtype_type, *dtype_getset;
    descrgetfunc dtype_get;
    /* (C only, made with the record) the classes of relabels' keys: the route looks up only a dtype of one of
     * these classes (the keys are ml_dtypes' NumPy dtypes, which equal no dtype of another class; one that
     * did would be exported as it is, labelled or refused by its producer); -1: more than RELABEL_KINDS
     * classes, every dtype is looked up */
    PyObject *relabel_kinds[RELABEL_KINDS];
    int relabel_kind_count;
    PyObject *plain_kind; /* (C only, set by the route) the last dtype class found to be none of them, or NULL */
    /* (C only, made with the record) its guards and gpu_guards read once, each where every guard is a tuple
     * (attribute or object, True or False, expected[, unless]); NULL: check_guards reads the tuple itself */
    struct Guard *checks, *gpu_checks;
    void *handle_table;       /* (C only) handle's DLPackExchangeAPI, read once (NULL: not such a capsule) */
} ProducerRecord;
/* A guard read once (records.c): its items are the guards tuple's, which the Producer holds (borrowed) */
typedef struct Guard {
    PyObject *name;     /* an attribute name (a str), or an object to call */
    PyObject *expected;
    PyObject *unless;   /* NULL: none */
    char call, named;   /* call the value; name is a str */
    char last;          /* the last guard of the list */
} Guard;
/* A stored route: the record decide() made (dlbridge/_pipeline/_handoff.py), read once when the Replay is
 * made: its Admission (the capsule facts under which the record holds) as C fields, compared as they are. */
typedef struct {
    PyObject_HEAD
    PyObject *finish;       /* f(imported) -> result, or None */
    PyObject *record;       /* the Handoff this route replays */
    PyObject *importer;     /* the consumer's import for this record (None: the State's importer) */
    PyObject *unaligned;    /* the Replay for the capsules this one's alignment turns away, or None */
    long long wire;         /* the dtype triple the consumer is handed: code | bits << 8 | lanes << 16 */
    long long triple;       /* the capsule's dtype triple */
    long align;             /* (data + byte_offset) % align == 0 (>= 1), or != 0 where misaligned */
    int device_type, device_id;
    int kinds;              /* capsule kinds admitted: KIND_LEGACY | KIND_VERSIONED */
    char readonly_ok;       /* a READ_ONLY capsule admitted */
    char offset_ok;         /* a byte_offset admitted */
    char clear_readonly;    /* READ_ONLY cleared before the import (Admission.clear_readonly) */
    char misaligned;        /* (data + byte_offset) % align != 0 admitted instead (Admission.misaligned) */
} ReplayRecord;
enum { KIND_LEGACY = 1, KIND_VERSIONED = 2 };
enum { IMPORT_CAPSULE = 0, IMPORT_CARRIER = 1, IMPORT_EXCHANGE = 2 };
enum { EXPORT_METHOD = 0, EXPORT_EXCHANGE = 1, EXPORT_FUNCTION = 2, EXPORT_METHOD_LEGACY = 3 };
extern PyObject *g_state_type, *g_producer_type, *g_replay_type, *g_routes_type;
int records_init(PyObject *module);
/* routes.c: Routes, a mapping with the route's cache in front of it (a State's stored routes, the Producers) */
int routes_init(PyObject *module);
PyObject *routes_get(PyObject *routes, long long key, PyObject **made);
PyObject *table_get(PyObject *table, PyObject *key);
void *exchange_table(PyObject *capsule, void *table);

/* Set once by configure(). */
extern PyObject *g_producers;     /* Routes (or a dict): exact type -> Producer */
extern PyObject *g_pipeline;      /* _route._pipeline(spec, x, fallback, dtype, device, copy, stream, readonly) */
extern PyObject *g_views;         /* dict: id(view) -> record (_logical._entries) */
extern PyObject *g_default;       /* list [fallback name or None]: the default when no scope is open */
extern PyObject *g_fallbacks;     /* tuple of the fallback names, index = route key bits 32..35 */
extern PyObject *g_readonly;      /* tuple of the readonly= names ("keep", "drop"), index = route key bit 36 */
extern PyObject *g_fallback_names[15]; /* g_fallbacks' items (borrowed from it), read without a call */
extern Py_ssize_t g_fallback_count;
extern PyObject *g_readonly_names[2];  /* g_readonly's items (borrowed from it) */
extern PyObject *g_not_given;     /* the NOT_GIVEN sentinel */
extern PyObject *g_get_default;   /* get_default_fallback(): when the cell is None */
extern PyObject *g_versioned_kw;  /* {"max_version": (1, 3)} */
extern PyObject *g_versioned_names; /* ("max_version",): g_versioned_kw's keys, for a vector call */
extern PyObject *g_version;       /* (1, 3): g_versioned_kw's value */
extern PyObject *g_empty;         /* () */
extern PyObject *g_dunder;        /* "__dlpack__" */
extern PyObject *g_stream;        /* "stream" */
extern PyObject *g_dtype;         /* "dtype" */
extern PyObject *g_view;          /* "view" */
extern PyObject *g_cpu;           /* (1, 0) */
extern PyObject *g_carrier_type;

/* capsules.c: the one capsule reader (view_capsule, layout_class; probe() is its Python form, the
 * twin of dlbridge/_capsule/_probe.py), and capsules around exchange-API exports */
typedef struct { /* (tensor and managed apart: a reader copying both reads them as they were written, 8 bytes
                  * each, where a 16-byte read of two 8-byte writes stalls until they are stored) */
    DLTensor *tensor;       /* inside the capsule's struct */
    uint64_t *flags;        /* NULL for a legacy capsule */
    DLManagedTensorVersioned *managed; /* the capsule's struct where versioned, else NULL */
    uint32_t major, minor;  /* 0, 0 for a legacy capsule */
    int versioned;
    int has_deleter;        /* the managed tensor names a deleter (DLPack allows NULL) */
} CapsuleView;
enum { LAYOUT_OTHER = 0, LAYOUT_DENSE = 1, LAYOUT_EMPTY = 2 };
int view_capsule(PyObject *capsule, CapsuleView *view);
int layout_class(const DLTensor *t);
void managed_capsule_destructor(PyObject *capsule);
PyObject *legacy_capsule(DLManagedTensorVersioned *versioned);
DLManagedTensorVersioned *keeping(DLManagedTensorVersioned *managed, PyObject *held);
void free_managed(DLManagedTensorVersioned *managed);
PyObject *probe(PyObject *module, PyObject *capsule);
PyObject *layout_offsets(void);

/* carrier.c: Carrier */
extern PyType_Spec carrier_spec;
PyObject *make_carrier(PyObject *capsule, PyObject *device);

/* objects.c: Route */
extern PyType_Spec route_spec;
int objects_init(void);

/* route.c */
PyObject *convert(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* gpu.c: the route's GPU steps (the twin of dlbridge/_route/_gpu.py) */
typedef struct Call Call;
int gpu_half(Call *c);
extern PyType_Spec deferred_spec;

/* views.c: Remember, the route's record of a view it replays */
int views_init(PyObject *module);
extern PyObject *g_deferred_type, *g_declined;

#endif
