/* The route's one rule for errors on the way (see route.c): which errors send a call to the pipeline. */
#include "route.h"

/* After a failure: STEP_DECLINE for an Exception the pipeline will meet again (cleared), STEP_ERROR
 * for anything else (left set); with no error set, STEP_DECLINE. */
int settle(void) {
    if (PyErr_Occurred() == NULL) return STEP_DECLINE;
    if (PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyErr_Clear();
        return STEP_DECLINE;
    }
    return STEP_ERROR;
}
