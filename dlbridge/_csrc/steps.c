/* The steps the route's two halves share (route.c's CPU half, gpu.c's GPU half): the guards, the export of
 * host memory, reading an export with the capsule reader, finding its stored route and checking its
 * admission, and the finish. See route.c for the ownership and error rules they follow. */
#include "route.h"

/* After the producer's __dlpack__ (or export function) raised: an Exception (not MemoryError) is kept
 * for the pipeline, which handles it as its own export's without asking the producer again (its side
 * effects run once); anything else as settle() says. */
int export_failed(Call *c) {
    if (PyErr_Occurred() == NULL || !PyErr_ExceptionMatches(PyExc_Exception) ||
        PyErr_ExceptionMatches(PyExc_MemoryError))
        return settle();
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL) PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    XSETREF(c->failed, value); /* (NULL: nothing to hand over, the pipeline exports again) */
    return STEP_DECLINE;
}

/* One guard: getattr(x, name) (or `name` itself where it is not an attribute name: a function of the
 * process's state), called where asked, is `expected` (by identity); or else, where the guard has one,
 * unless() is True (asked only then). STEP_OK, STEP_DECLINE, or settle()'s answer to an error. */
static int guard_holds(Call *c, int named, PyObject *name, int call, PyObject *expected, PyObject *unless) {
    PyObject *value;
    if (named && call) { /* x.name(): the method called unbound where it is one (no bound method made) */
        value = PyObject_CallMethodObjArgs(c->args[1], name, NULL);
    } else if (named) {
        value = PyObject_GetAttr(c->args[1], name);
    } else if (call) {
        Py_INCREF(name); /* owned across the call into Python */
        value = PyObject_CallNoArgs(name);
        Py_DECREF(name);
    } else {
        value = Py_NewRef(name);
    }
    if (value == NULL) return settle();
    int same = value == expected;
    Py_DECREF(value);
    if (!same && unless != NULL) { /* its second chance, asked only where the first answer fails */
        PyObject *answer;
        Py_INCREF(unless); /* owned across the call into Python */
        answer = PyObject_CallNoArgs(unless);
        Py_DECREF(unless);
        if (answer == NULL) return settle();
        same = answer == Py_True;
        Py_DECREF(answer);
    }
    return same ? STEP_OK : STEP_DECLINE;
}

/* Whether every guard holds (guard_holds), in order: from the Producer's Guards read once (records.c), or
 * from the tuple itself where they were not (a guard that is not a plain tuple). */
int check_guards(Call *c, PyObject *guards) {
    const Guard *g = guards == c->producer->guards       ? c->producer->checks
                     : guards == c->producer->gpu_guards ? c->producer->gpu_checks
                                                         : NULL;
    int step = STEP_OK;
    if (g != NULL) {
        for (; step == STEP_OK; g++) {
            step = guard_holds(c, g->named, g->name, g->call, g->expected, g->unless);
            if (g->last) break;
        }
        return step;
    }
    Py_ssize_t n = PyTuple_Size(guards); /* a tuple (records.c) */
    for (Py_ssize_t i = 0; i < n && step == STEP_OK; i++) {
        PyObject *guard = PyTuple_GetItem(guards, i);
        Py_ssize_t size = guard != NULL && PyTuple_Check(guard) ? PyTuple_Size(guard) : 0;
        if (size != 3 && size != 4) return settle();
        int call = PyObject_IsTrue(PyTuple_GetItem(guard, 1));
        if (call < 0) return settle();
        PyObject *name = PyTuple_GetItem(guard, 0);
        step = guard_holds(c, PyUnicode_Check(name), name, call, PyTuple_GetItem(guard, 2),
                           size == 4 ? PyTuple_GetItem(guard, 3) : NULL);
    }
    return step;
}

/* What is exported: x, its alias (x.<alias>: torch's x.data) unless the export is the exchange API's and the
 * Producer keeps something instead (export_managed), or x.view(d) for a dtype the framework cannot export;
 * for a relabelled dtype *forced is the dtype triple its capsule gets (its export labels it wrongly, or it is
 * the view's). A new reference, or NULL with an error. */
PyObject *export_source(Call *c, long long *forced, int exchange) {
    ProducerRecord *p = c->producer;
    PyObject *x = c->args[1], *relabels = p->relabels, *alias = p->alias;
    if (p->relabel_kind_count != 0) { /* relabels: a non-empty dict (records.c) */
        PyObject *dtype = read_dtype(c, x), *entry = NULL;
        PyObject *kind = dtype != NULL ? (PyObject *)Py_TYPE(dtype) : NULL, *const *kinds = p->relabel_kinds;
        int count = kind != NULL && kind != p->plain_kind ? p->relabel_kind_count : 0, maybe = count < 0;
        for (int i = 0; i < count; i++) maybe |= kinds[i] == kind;
        if (count > 0 && !maybe) XSETREF(p->plain_kind, Py_NewRef(kind)); /* none of theirs: next time, one compare */
        if (maybe) entry = PyDict_GetItemWithError(relabels, dtype);
        Py_XINCREF(entry);
        Py_XDECREF(dtype);
        if (entry != NULL) {
            PyObject *view = NULL, *as = PyTuple_Check(entry) && PyTuple_Size(entry) == 2 ? PyTuple_GetItem(entry, 0) : NULL;
            *forced = as != NULL ? PyLong_AsLongLong(PyTuple_GetItem(entry, 1)) : -1;
            if (*forced >= 0 && as != Py_None) view = PyObject_CallMethodObjArgs(x, g_view, as, NULL);
            Py_DECREF(entry);
            if (*forced < 0 || as != Py_None) return view;
        }
        if (PyErr_Occurred()) return NULL;
    }
    if (alias != Py_None && !(exchange && p->keep != Py_None)) return PyObject_GetAttr(x, alias);
    Py_INCREF(x);
    return x;
}

/* The exchange-API export of `source` (no synchronisation) into c->managed, or as a legacy capsule where
 * the consumer reads those only. Where `source` is x itself and the Producer names a method to keep, the
 * tensor holds x.<keep>() until it is freed (torch's holds x's TensorImpl, not its storage, which a later
 * x.set_(y) would free: keep="untyped_storage", where otherwise its alias x.data would be exported). */
int export_managed(Call *c, PyObject *source, int want_versioned) {
    DLPackExchangeAPI *api = exchange_table(c->producer->handle, c->producer->handle_table);
    if (api == NULL || api->header.version.major != 1) return settle();
    PyObject *keep = c->producer->keep, *held = NULL;
    if (keep != Py_None && source == c->args[1] && (held = PyObject_CallMethodObjArgs(source, keep, NULL)) == NULL)
        return settle();
    if (api->managed_tensor_from_py_object_no_sync(source, &c->managed) != 0 || c->managed == NULL) {
        c->managed = NULL;
        Py_XDECREF(held);
        return settle();
    }
    if (c->managed->version.major != 1) {
        Py_XDECREF(held);
        return STEP_DECLINE;
    }
    if (held != NULL && (c->managed = keeping(c->managed, held)) == NULL) return settle(); /* (no memory) */
    if (want_versioned) return STEP_OK;
    if (c->managed->flags & FLAG_READ_ONLY) return STEP_DECLINE; /* a legacy capsule cannot say so */
    DLManagedTensorVersioned *managed = c->managed;
    c->managed = NULL;
    c->capsule = legacy_capsule(managed); /* owns managed from here, also on failure */
    return c->capsule != NULL ? STEP_OK : settle();
}

typedef PyObject *(*FastWithKeywords)(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

/* The class's own method called as CPython's method descriptor calls it (methodobject.c's
 * cfunction_vectorcall_FASTCALL_KEYWORDS): the recursion check, the C function with the keyword names,
 * and a result without an error turned into one (as _Py_CheckFunctionResult does). */
PyObject *call_fast(void *function, PyObject *source, int versioned) {
    PyObject *args[1] = {g_version};
    if (Py_EnterRecursiveCall(" while calling a Python object")) return NULL;
    PyObject *capsule = ((FastWithKeywords)function)(source, args, 0, versioned ? g_versioned_names : NULL);
    Py_LeaveRecursiveCall();
    if (capsule == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_SystemError, "__dlpack__ returned NULL without setting an exception");
    return capsule;
}

/* The producer's export of host memory `source` into c->managed (exchange API) or c->capsule. */
static int export_tensor(Call *c, PyObject *source) {
    int kind = c->producer->kind, want_versioned = c->state->versioned;
    if (kind == EXPORT_EXCHANGE) return export_managed(c, source, want_versioned);
    if (kind == EXPORT_FUNCTION) {
        c->capsule = PyObject_CallFunctionObjArgs(c->producer->handle, source, NULL);
    } else {
        int ask_versioned = want_versioned && kind != EXPORT_METHOD_LEGACY; /* a producer before DLPack 1.0 */
        ProducerRecord *p = c->producer; /* the class's own C method, where attributes.c finds one: */
        if (p->method_type == NULL && learn_method(p, source) < 0) return export_failed(c);
        c->capsule = p->method_type == (PyObject *)Py_TYPE(source) && p->fastcall != NULL
                         ? call_fast(p->fastcall, source, ask_versioned)
                         : call_dunder(c, source, ask_versioned);
    }
    return c->capsule != NULL ? STEP_OK : export_failed(c);
}

static void write_dtype(DLTensor *t, long long triple) {
    t->dtype.code = (uint8_t)(triple & 0xFF);
    t->dtype.bits = (uint8_t)((triple >> 8) & 0xFF);
    t->dtype.lanes = (uint16_t)((triple >> 16) & 0xFFFF);
}

/* The export's tensor, read by the capsule reader (c->tensor, versioned, flags, triple). */
int read_export(Call *c, long long forced) {
    CapsuleView view = {.major = 1, .versioned = 1, .has_deleter = 1};
    if (c->managed != NULL) {
        view.tensor = &c->managed->dl_tensor;
        view.flags = &c->managed->flags;
    } else if (!PyCapsule_CheckExact(c->capsule) || !view_capsule(c->capsule, &view)) {
        return STEP_DECLINE; /* a capsule the reader does not describe: the pipeline says what is wrong */
    }
    c->tensor = view.tensor;
    c->in_capsule = view.managed;
    c->versioned = view.versioned;
    c->flags_at = view.flags;
    c->flags = view.flags != NULL ? *view.flags : 0;
    if (c->producer->readonly) c->flags |= FLAG_READ_ONLY; /* its arrays are read-only whatever it says (JAX) */
    if (forced >= 0) write_dtype(c->tensor, forced); /* our own export of x.view(d): x's dtype */
    c->triple = (long long)c->tensor->dtype.code | ((long long)c->tensor->dtype.bits << 8) |
                ((long long)c->tensor->dtype.lanes << 16);
    return STEP_OK;
}

/* The export of host memory (the CPU half, or a GPU-capable producer's array found on the CPU). */
int export_x(Call *c) {
    long long forced = -1;
    PyObject *source = export_source(c, &forced, c->producer->kind == EXPORT_EXCHANGE);
    if (source == NULL) return settle();
    int step = export_tensor(c, source);
    Py_DECREF(source);
    return step == STEP_OK ? read_export(c, forced) : step;
}

/* Whether the export is a capsule the stored route's record holds for: its Admission, compared field by
 * field (decide() made them; nothing is decided here). c->flags: READ_ONLY ORed in where its Producer's
 * arrays are read-only (read_export). */
static int aligned(const DLTensor *t, int layout, const ReplayRecord *r) {
    uint64_t address = (uint64_t)(uintptr_t)t->data + t->byte_offset, align = (uint64_t)r->align;
    /* (a power of two, as alignments are, without a division) */
    return layout == LAYOUT_EMPTY || ((align & (align - 1)) == 0 ? address & (align - 1) : address % align) == 0;
}
static int admitted(const Call *c, const ReplayRecord *r, int layout) {
    const DLTensor *t = c->tensor;
    if (layout == LAYOUT_OTHER || c->triple != r->triple) return 0;
    if (t->device.device_type != r->device_type || t->device.device_id != r->device_id) return 0;
    if (!(r->kinds & (c->versioned ? KIND_VERSIONED : KIND_LEGACY))) return 0;
    if (((c->flags & FLAG_READ_ONLY) && !r->readonly_ok) || (t->byte_offset && !r->offset_ok)) return 0;
    return aligned(t, layout, r) != r->misaligned;
}

/* The stored route for the export's (dtype, fallback, device), if its admission holds; a decline otherwise. */
int find_route(Call *c) {
    const DLTensor *t = c->tensor;
    if (c->versioned && !c->state->versioned) return STEP_DECLINE; /* not the capsule kind the pipeline asks for */
    /* From here on a decline leaves the export unseen by any consumer: it is handed to the pipeline where
     * it is on the device it was made for (a GPU capsule: with the handshake for it), or host memory. */
    int here = t->device.device_type == c->device_type && t->device.device_id == c->device_id;
    c->handover = here || t->device.device_type == 1;
    if (!here || t->device.device_id < 0 || t->device.device_id > 0x7FFF) return STEP_DECLINE;
    /* options: fallback | readonly= << 4 | read-only memory << 5 (dlbridge/_route/_learn.py) */
    long long options = c->fallback | (c->readonly << 4) | ((c->flags & FLAG_READ_ONLY) ? 1 << 5 : 0);
    PyObject *key = NULL, *replay = routes_get(c->state->routes, c->triple | (options << 32) |
                                               ((long long)t->device.device_type << 40) |
                                               ((long long)t->device.device_id << 48), &key);
    if (replay == NULL && key != NULL) {
        c->in_capsule = NULL; /* Python runs: the import reads the capsule again (another thread may take it) */
        replay = PyObject_CallFunctionObjArgs(c->state->decide, key, NULL);
    }
    Py_XDECREF(key);
    if (replay == NULL) return settle();
    if (Py_TYPE(replay) != (PyTypeObject *)g_replay_type) { /* None: the pipeline decides each time */
        Py_DECREF(replay);
        return STEP_DECLINE;
    }
    c->replay = (ReplayRecord *)replay;
    /* Data on the other side of the record's alignment has a record of its own (the consumer copies it),
     * admitted the same way. */
    PyObject *other = c->replay->unaligned; /* a Replay or None (records.c) */
    int layout = layout_class(t); /* (dense C order, empty, or other: the admission's layout class) */
    if (layout != LAYOUT_OTHER && other != Py_None && aligned(t, layout, c->replay) == c->replay->misaligned) {
        Py_INCREF(other); /* first: the Replay it replaces may hold its last other reference */
        Py_DECREF(c->replay);
        c->replay = (ReplayRecord *)other;
    }
    if (!admitted(c, c->replay, layout)) return STEP_DECLINE;
    if (c->replay->wire != c->triple) write_dtype(c->tensor, c->replay->wire); /* a reinterpret route */
    if (c->replay->clear_readonly && c->flags_at != NULL && (*c->flags_at & FLAG_READ_ONLY)) { /* readonly="drop" */
        *c->flags_at &= ~(uint64_t)FLAG_READ_ONLY;
        c->cleared = 1;
    }
    return STEP_OK;
}

/* What turns the import into the result, as the stored route says (a zero-copy view), if anything. */
int finish(Call *c) {
    PyObject *finish = c->replay != NULL ? c->replay->finish : Py_None;
    if (finish == Py_None) return STEP_OK;
    SETREF(c->result, PyObject_CallFunctionObjArgs(finish, c->result, NULL));
    return c->result != NULL ? STEP_OK : STEP_ERROR; /* the result exists: a failed finish is an error */
}
