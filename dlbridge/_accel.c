/* dlbridge._accel: the compiled hot path (placeholder while the real one is written). */
#define Py_LIMITED_API 0x030A0000
#include <Python.h>

static struct PyModuleDef accel_module = {
    PyModuleDef_HEAD_INIT, "dlbridge._accel", "dlbridge's compiled hot path", 0, NULL,
};

PyMODINIT_FUNC PyInit__accel(void) {
    PyObject *m = PyModule_Create(&accel_module);
    if (m != NULL && PyModule_AddIntConstant(m, "ABI", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
