/* The route's call (route.c) and the steps its GPU half (gpu.c) shares with it (steps.c, attributes.c).
 * Private to those. */
#ifndef DLBRIDGE_ROUTE_H
#define DLBRIDGE_ROUTE_H
#include "accel.h"

enum { STEP_OK = 0, STEP_DECLINE = 1, STEP_ERROR = -1 };

struct Call {
    PyObject *const *args;              /* spec, x, fallback, dtype, device, copy, stream, readonly (the caller's) */
    StateRecord *state;                 /* the target's State (spec[0] when the call began) */
    ProducerRecord *producer;           /* the Producer of type(x) */
    PyObject *capsule;                  /* the export, as a capsule */
    ReplayRecord *replay;               /* the stored route: wire triple, finish */
    PyObject *result;                   /* what the caller gets */
    DLManagedTensorVersioned *managed;  /* an exchange-API export, until a capsule or consumer owns it */
    DLTensor *tensor;                   /* the exported tensor (inside capsule or managed) */
    DLManagedTensorVersioned *in_capsule; /* the versioned tensor the capsule holds, as the reader found it */
    long long triple;                   /* the exported dtype: code | bits << 8 | lanes << 16 */
    uint64_t flags;                     /* the export's DLPack flags (0 for a legacy capsule), READ_ONLY ORed in
                                           where its Producer's arrays are read-only */
    uint64_t *flags_at;                 /* the export's own flags word (NULL for a legacy capsule) */
    long fallback;                      /* the fallback's index in g_fallbacks */
    long readonly;                      /* readonly='s index in g_readonly */
    int cleared;                        /* READ_ONLY cleared for the import (readonly="drop") */
    int device_type, device_id;         /* the device x is on, which its export was made for */
    int versioned;                      /* whether the export is a versioned tensor */
    int handover;                       /* declined after the export, before any consumer took it */
    PyObject *failed;                   /* the Exception the producer's export raised (handed to the pipeline) */
};

int settle(void);
int export_failed(Call *c);
int check_guards(Call *c, PyObject *guards);
int export_x(Call *c);
int read_export(Call *c, long long forced);
int export_managed(Call *c, PyObject *source, int want_versioned);
int find_route(Call *c);
int finish(Call *c);
PyObject *export_source(Call *c, long long *forced, int exchange);
int learn_method(ProducerRecord *p, PyObject *source);
PyObject *call_dunder(Call *c, PyObject *source, int versioned);
PyObject *call_fast(void *function, PyObject *source, int versioned);
PyObject *read_dtype(Call *c, PyObject *x);

#endif
