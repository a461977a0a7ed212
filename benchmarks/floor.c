/* The cheapest NumPy -> torch handoff through torch's DLPack C exchange API, for benchmarks/bench_floor.py: NumPy's
 * own __dlpack__(max_version=) called through its C function, the capsule's tensor taken, torch's import
 * (managed_tensor_to_py_object_no_sync). No check at all (not the dtype, the layout, the device, the flags, nor
 * whether an error was raised on the way): a floor to measure dlbridge's route against, never a way to convert.
 * Built by bench_floor.py with the C compiler, against this interpreter's headers. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef struct Header {
    uint32_t major, minor;
    struct Header *prev_api;
} Header;
typedef struct { /* DLPackExchangeAPI (dlpack.h 1.3), up to the import */
    Header header;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    int (*managed_tensor_to_py_object_no_sync)(void *tensor, void **out_py_object);
} ExchangeAPI;
typedef PyObject *(*FastWithKeywords)(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

static FastWithKeywords g_export;
static PyTypeObject *g_type; /* the class whose __dlpack__ g_export is: to_torch takes exactly its instances */
static PyObject *g_names, *g_version;
static ExchangeAPI *g_api;

/* setup(numpy.ndarray.__dict__["__dlpack__"], torch.Tensor.__dlpack_c_exchange_api__); everything read first, kept
 * only where all of it is as the floor needs it (else an error, and the earlier setup stays) */
static PyObject *setup(PyObject *module, PyObject *args) {
    PyObject *method, *api;
    if (!PyArg_ParseTuple(args, "O!O", &PyMethodDescr_Type, &method, &api)) return NULL;
    PyMethodDef *def = ((PyMethodDescrObject *)method)->d_method;
    if (def->ml_flags != (METH_FASTCALL | METH_KEYWORDS)) {
        PyErr_SetString(PyExc_TypeError, "__dlpack__ is not a METH_FASTCALL | METH_KEYWORDS method");
        return NULL;
    }
    ExchangeAPI *table = PyCapsule_GetPointer(api, "dlpack_exchange_api");
    if (table == NULL) return NULL;
    if (table->header.major != 1) {
        PyErr_Format(PyExc_TypeError, "an exchange API of major version %u, not 1", table->header.major);
        return NULL;
    }
    PyObject *name = PyUnicode_InternFromString("max_version"); /* interned, as a keyword argument is */
    PyObject *names = name != NULL ? PyTuple_Pack(1, name) : NULL, *version = Py_BuildValue("(ii)", 1, 3);
    Py_XDECREF(name);
    if (names == NULL || version == NULL) {
        Py_XDECREF(names);
        Py_XDECREF(version);
        return NULL;
    }
    Py_XSETREF(g_names, names);
    Py_XSETREF(g_version, version);
    g_api = table;
    g_type = PyDescr_TYPE(method);
    g_export = (FastWithKeywords)(void (*)(void))def->ml_meth;
    Py_RETURN_NONE;
}

/* to_torch(x): x (a numpy.ndarray) as a torch.Tensor, the floor */
static PyObject *to_torch(PyObject *module, PyObject *x) {
    if (g_export == NULL || Py_TYPE(x) != g_type) {
        PyErr_SetString(PyExc_TypeError, "to_torch() takes the setup() class's own arrays, after setup()");
        return NULL;
    }
    PyObject *args[1] = {g_version};
    PyObject *capsule = g_export(x, args, 0, g_names);
    if (capsule == NULL) return NULL;
    void *tensor = PyCapsule_GetPointer(capsule, "dltensor_versioned"), *out = NULL;
    if (tensor != NULL && PyCapsule_SetName(capsule, "used_dltensor_versioned") == 0)
        g_api->managed_tensor_to_py_object_no_sync(tensor, &out);
    Py_DECREF(capsule);
    if (out == NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "torch's import failed");
    return out;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_VARARGS, NULL},
    {"to_torch", to_torch, METH_O, NULL},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "dlbridge_floor", NULL, -1, methods};
PyMODINIT_FUNC PyInit_dlbridge_floor(void) { return PyModule_Create(&module); }
