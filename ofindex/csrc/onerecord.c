/* One serialized Example or OFRecord decoded to numpy arrays in one call (Decoder(spec)(data),
 * decode_example(data)), by a plan made once per spec: the features asked for (or every
 * feature), their list kinds, counts and shapes. Records laid out the way writers lay them
 * out are decoded here (see examples.c); for anything else, and for every feature that does
 * not match its spec (a missing feature without a default, another value type or count),
 * the plan returns None and the caller decodes the record on the careful path, which gives
 * protobuf's answer or words the error. Nothing is allocated from a count before the values
 * it counts were found in the record.
 *
 * The arrays are made with numpy's C API: through numpy's Python functions (numpy.empty,
 * numpy.array, the buffer protocol to fill them) the three arrays of a record of three
 * features took ~0.45 us, as long as protobuf's whole Example.FromString of the record. */
#include "protowire.h"
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

/* numpy's C API, imported with the module (module.c); -1 with an exception set. */
int onerecord_init(void) {
    return _import_array();
}

PyObject *object_array(Py_ssize_t n, PyObject ***slots) {
    npy_intp dims[1] = {(npy_intp)n};
    PyObject *arr = PyArray_SimpleNew(1, dims, NPY_OBJECT);
    if (arr != NULL)
        *slots = (PyObject **)PyArray_DATA((PyArrayObject *)arr);
    return arr;
}

/* Dimensions a FixedLen shape may have here (numpy 1.x's limit; more: the careful path). */
#define MAX_DIMS 32

/* One asked-for feature: its name in the record and its key in the result, its list kind
 * (0: whichever it is stored as, 1-d), its number of values (-1: any, VarLen), its shape
 * (ndim -1 for VarLen: 1-d) and the value it takes when missing (NULL: none, the careful
 * path words the error). */
typedef struct {
    PyObject *name, *key, *fallback;
    int kind, ndim;
    Py_ssize_t count;
    npy_intp dims[MAX_DIMS];
} Want;

typedef struct {
    PyObject_HEAD
    PyObject *kinds_obj;  /* bytes: how each list kind stores its values (protowire.h) */
    Family fam;
    int wrapped;
    PyObject *names;  /* tuple of the asked-for names (bytes); NULL: every feature */
    Names wanted;     /* the same, read by read_map */
    Want *wants;
    Py_ssize_t k;
    PyArray_Descr *descrs[16];  /* the dtype of each list kind (0: an empty Feature's) */
    /* the name each map entry matched in the record before (read_map): records of one writer
     * hold their features in one order, so each entry's name is found at the first try */
    Py_ssize_t guesses[GUESSES];
    /* every feature as stored: the name (str) each map entry had in the record before, used
     * again while the record holds the same (a str made, hashed and freed per feature took
     * ~0.05 us of a record's ~0.4 us) */
    PyObject *keys[GUESSES];
} PlanObject;

/* What a step returns besides an array: not handled here (the careful path decides). */
#define NOT_HERE Py_None

static void plan_dealloc(PlanObject *self) {
    for (Py_ssize_t j = 0; self->wants != NULL && j < self->k; j++) {
        Py_XDECREF(self->wants[j].name);
        Py_XDECREF(self->wants[j].key);
        Py_XDECREF(self->wants[j].fallback);
    }
    PyMem_Free(self->wants);
    for (int j = 0; j < 16; j++)
        Py_XDECREF(self->descrs[j]);
    for (int e = 0; e < GUESSES; e++)
        Py_XDECREF(self->keys[e]);
    release_names(&self->wanted);
    Py_XDECREF(self->kinds_obj);
    Py_XDECREF(self->names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A FixedLen shape (a tuple of ints >= 0 whose product is want->count) into want->dims;
 * 0, or -1 with an exception set. */
static int parse_shape(PyObject *shape, Want *want) {
    Py_ssize_t ndim = PyTuple_GET_SIZE(shape), size = 1;
    if (ndim > MAX_DIMS) {
        PyErr_SetString(PyExc_ValueError, "RecordPlan: a shape of more than 32 dimensions");
        return -1;
    }
    for (Py_ssize_t d = 0; d < ndim; d++) {
        Py_ssize_t dim = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d));
        if (dim == -1 && PyErr_Occurred())
            return -1;
        if (dim < 0 || mul_size(size, dim, &size) < 0) {
            PyErr_SetString(PyExc_ValueError, "RecordPlan: a shape of negative or too many "
                                              "values");
            return -1;
        }
        want->dims[d] = (npy_intp)dim;
    }
    if (size != want->count) {
        PyErr_SetString(PyExc_ValueError, "RecordPlan: a shape of another number of values");
        return -1;
    }
    want->ndim = (int)ndim;
    return 0;
}

/* Whether a feature's parsed fields fit together: a list kind of the plan's (0: as stored,
 * then of any count), a count of -1 (any: VarLen) exactly when there is no shape, a shape
 * that is a tuple, a default that is a numpy array or None. */
static int want_fits(const PlanObject *self, int kind, Py_ssize_t count, PyObject *shape,
                     PyObject *fallback) {
    return kind >= 0 && kind <= self->fam.max_kind && count >= -1
           && (kind != 0 || count == -1) && (count == -1) == (shape == Py_None)
           && (shape == Py_None || PyTuple_Check(shape))
           && (fallback == Py_None || PyArray_Check(fallback));
}

/* features[j] = (name: bytes, key, kind: int, count: int, shape: tuple | None, default) into
 * want; 0, or -1 with an exception set. */
static int parse_want(PlanObject *self, PyObject *item, Want *want) {
    PyObject *name, *key, *shape, *fallback;
    int kind;
    Py_ssize_t count;
    if (!PyTuple_Check(item)
        || !PyArg_ParseTuple(item, "O!OinOO:RecordPlan feature", &PyBytes_Type, &name, &key,
                             &kind, &count, &shape, &fallback)
        || !want_fits(self, kind, count, shape, fallback)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "RecordPlan: a feature must be (name: bytes, "
                                              "key, kind, count, shape: tuple | None, "
                                              "default: array | None)");
        return -1;
    }
    want->count = count;
    want->ndim = -1;
    if (shape != Py_None && parse_shape(shape, want) < 0)
        return -1;
    want->name = Py_NewRef(name);
    want->key = Py_NewRef(key);
    want->fallback = fallback == Py_None ? NULL : Py_NewRef(fallback);
    want->kind = kind;
    return 0;
}

/* Whether values stored as `how` are copied into arrays of dtype `descr` as they are: the
 * dtype of their values, in the machine's byte order, and floats (stored little-endian)
 * only on a little-endian machine. */
static int kind_fits(char how, const PyArray_Descr *descr) {
    const uint16_t one = 1;
    int little = *(const unsigned char *)&one == 1;
    if (!PyArray_ISNBO(descr->byteorder))
        return 0;
    switch (how) {
    case 'b':
        return descr->type_num == NPY_OBJECT;
    case '4':
        return little && descr->type_num == NPY_FLOAT32;
    case '8':
        return little && descr->type_num == NPY_FLOAT64;
    case 'v':
        return descr->type_num == NPY_INT64;
    case 'i':
        return descr->type_num == NPY_INT32;
    default:
        return 0;
    }
}

/* One numpy dtype per list kind of `kinds` (and for an empty Feature), each the dtype of
 * the kind's values; 0, or -1 with an exception set. */
static int check_dtypes(PyObject *kinds, PyObject *dtypes) {
    Py_ssize_t nk = PyBytes_GET_SIZE(kinds);
    if (nk < 2 || nk > 16 || PyTuple_GET_SIZE(dtypes) != nk) {
        PyErr_SetString(PyExc_ValueError, "RecordPlan: kinds of 1 to 15 list kinds, and one "
                                          "dtype per kind and for an empty Feature");
        return -1;
    }
    for (Py_ssize_t j = 0; j < nk; j++) {
        PyObject *dtype = PyTuple_GET_ITEM(dtypes, j);
        if (!PyArray_DescrCheck(dtype)) {
            PyErr_SetString(PyExc_TypeError, "RecordPlan: dtypes must be numpy dtypes");
            return -1;
        }
        /* an empty Feature (kind 0) has no values: any dtype */
        if (j > 0 && !kind_fits(PyBytes_AS_STRING(kinds)[j], (PyArray_Descr *)dtype)) {
            PyErr_SetString(PyExc_ValueError, "RecordPlan: each list kind is stored as one "
                                              "of 'b', '4', '8', 'v', 'i' and decoded to the "
                                              "dtype of its values (in native byte order)");
            return -1;
        }
    }
    return 0;
}

static PyObject *plan_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *kinds, *features, *dtypes;
    int wrapped;
    static char *keywords[] = {"kinds", "wrapped", "features", "dtypes", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!pOO!:RecordPlan", keywords, &PyBytes_Type,
                                     &kinds, &wrapped, &features, &PyTuple_Type, &dtypes))
        return NULL;
    Py_ssize_t nk = PyBytes_GET_SIZE(kinds);
    if (check_dtypes(kinds, dtypes) < 0)
        return NULL;
    if (features != Py_None && !PyTuple_Check(features)) {
        PyErr_SetString(PyExc_TypeError, "RecordPlan: features must be a tuple or None");
        return NULL;
    }
    PlanObject *self = (PlanObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->kinds_obj = Py_NewRef(kinds);
    self->fam.kinds = PyBytes_AS_STRING(kinds);
    self->fam.max_kind = nk - 1;
    self->wrapped = wrapped;
    for (Py_ssize_t e = 0; e < GUESSES; e++)
        self->guesses[e] = -1;
    for (Py_ssize_t j = 0; j < nk; j++)
        self->descrs[j] = (PyArray_Descr *)Py_NewRef(PyTuple_GET_ITEM(dtypes, j));
    if (features == Py_None)
        return (PyObject *)self;
    Py_ssize_t k = PyTuple_GET_SIZE(features);
    self->wants = PyMem_Calloc(k ? (size_t)k : 1, sizeof(Want));
    self->names = PyTuple_New(k);
    if (self->wants == NULL || self->names == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        if (parse_want(self, PyTuple_GET_ITEM(features, j), &self->wants[j]) < 0) {
            Py_DECREF(self);
            return NULL;
        }
        self->k = j + 1;
        PyTuple_SET_ITEM(self->names, j, Py_NewRef(self->wants[j].name));
    }
    if (get_names(self->names, &self->wanted, "RecordPlan") < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* A new C-contiguous array of list kind `kind`'s dtype and `ndim` dims (-1: one of `count`). */
static PyObject *new_array(PlanObject *self, int kind, int ndim, const npy_intp *dims,
                           Py_ssize_t count) {
    npy_intp flat = (npy_intp)count;
    PyArray_Descr *descr = self->descrs[kind];
    Py_INCREF(descr);  /* stolen */
    return PyArray_NewFromDescr(&PyArray_Type, descr, ndim < 0 ? 1 : ndim,
                                ndim < 0 ? &flat : dims, NULL, NULL, 0, NULL);
}

/* A bytes list's `count` values as bytes objects into items (an object array numpy made of
 * NULLs, each set once), read from the list message [p, e); 0, or -1 with an exception set. */
static int fill_bytes(PyObject **items, const unsigned char *p, const unsigned char *e,
                      Py_ssize_t count) {
    const unsigned char *vs, *ve;
    for (Py_ssize_t i = 0; i < count; i++) {
        /* read_list counted exactly `count` entries laid out so in this region */
        if (!(p < e && *p++ == 0x0A && read_body(&p, e, &vs, &ve) == 0)) {
            PyErr_SetString(PyExc_ValueError, "RecordPlan: a bytes list changed");
            return -1;
        }
        PyObject *value = PyBytes_FromStringAndSize((const char *)vs, ve - vs);
        if (value == NULL)
            return -1;
        Py_XSETREF(items[i], value);
    }
    return 0;
}

/* A packed varint run [p, e) of exactly `count` values into dst, as int64 (how 'v') or as
 * int32 (how 'i': the low 32 bits, as protobuf's int32); whether it held them. */
static int fill_varints(char *dst, const unsigned char *p, const unsigned char *e,
                        Py_ssize_t count, char how) {
    int ok = 1;
    for (Py_ssize_t i = 0; i < count && ok; i++) {
        uint64_t v = 0;
        ok = next_varint(&p, e, &v) == 0;
        if (how == 'v') {
            int64_t x = (int64_t)v;
            memcpy(dst + i * 8, &x, 8);
        } else {
            int32_t x = (int32_t)(uint32_t)v;
            memcpy(dst + i * 4, &x, 4);
        }
    }
    return ok && p == e;
}

/* The array of the located list `row` of kind `kind`: its `count` values in `ndim` dims. */
static PyObject *list_array(PlanObject *self, const unsigned char *base, const int64_t *row,
                            int kind, int ndim, const npy_intp *dims) {
    Py_ssize_t count = (Py_ssize_t)row[COUNT];
    PyObject *arr = new_array(self, kind, ndim, dims, count);
    if (arr == NULL)
        return NULL;
    char how = self->fam.kinds[kind];
    char *dst = PyArray_BYTES((PyArrayObject *)arr);
    const unsigned char *p = base + row[START], *e = base + row[END];
    int ok;
    if (how == 'b' && count) {
        if (fill_bytes((PyObject **)dst, base + row[LIST_START], base + row[LIST_END],
                       count) < 0) {
            Py_DECREF(arr);
            return NULL;
        }
        return arr;
    }
    if (how == '4' || how == '8') {
        ok = e - p == (Py_ssize_t)PyArray_NBYTES((PyArrayObject *)arr);
        if (ok)
            memcpy(dst, p, (size_t)(e - p));
    } else if (how == 'v' || how == 'i') {
        ok = fill_varints(dst, p, e, count, how);
    } else {
        ok = count == 0;  /* an empty Feature (kind 0) */
    }
    if (!ok) {
        Py_DECREF(arr);
        PyErr_SetString(PyExc_ValueError, "RecordPlan: a list does not hold its values");
        return NULL;
    }
    return arr;
}

/* The value of asked-for feature `want` from its located row; NOT_HERE when it does not
 * match (the careful path words the error). */
static PyObject *wanted(PlanObject *self, const unsigned char *base, const int64_t *row,
                        const Want *want) {
    if (want->kind == 0)  /* as stored (missing: the careful path words the error) */
        return row[KIND] ? list_array(self, base, row, (int)row[KIND], -1, NULL) : NOT_HERE;
    if (row[KIND] == 0) {  /* missing */
        if (want->count < 0)
            return new_array(self, want->kind, -1, NULL, 0);
        if (want->fallback == NULL)
            return NOT_HERE;
        return PyArray_NewCopy((PyArrayObject *)want->fallback, NPY_CORDER);
    }
    if (row[KIND] != want->kind || (want->count >= 0 && row[COUNT] != want->count))
        return NOT_HERE;
    return list_array(self, base, row, want->kind, want->ndim, want->dims);
}

/* The asked-for features of the feature map [ms, me) as a dict; NOT_HERE when not handled. */
static PyObject *decode_wanted(PlanObject *self, const unsigned char *base,
                               const unsigned char *ms, const unsigned char *me) {
    int64_t local[8 * SLOTS];
    int64_t *rows = local;
    if (self->k > 8 && (rows = PyMem_Malloc((size_t)self->k * SLOTS * sizeof(int64_t))) == NULL)
        return PyErr_NoMemory();
    memset(rows, 0, (size_t)self->k * SLOTS * sizeof(int64_t));
    PyObject *out = NOT_HERE;
    if (read_map(base, ms, me, &self->fam, &self->wanted, rows, self->guesses) == 0
        && (out = PyDict_New())) {
        for (Py_ssize_t j = 0; j < self->k; j++) {
            PyObject *value = wanted(self, base, rows + j * SLOTS, &self->wants[j]);
            if (value == NULL || value == NOT_HERE
                || PyDict_SetItem(out, self->wants[j].key, value) < 0) {
                Py_DECREF(out);
                out = value == NOT_HERE ? NOT_HERE : NULL;
                if (value != NOT_HERE)
                    Py_XDECREF(value);
                break;
            }
            Py_DECREF(value);
        }
    }
    if (rows != local)
        PyMem_Free(rows);
    return out;
}

/* The name [ks, ke) (ASCII) of map entry `entry` as a str: the one it had before when the
 * same; a new reference, or NULL with an exception set. */
static PyObject *entry_key(PlanObject *self, Py_ssize_t entry, const unsigned char *ks,
                           const unsigned char *ke) {
    Py_ssize_t n = ke - ks;
    PyObject *key = entry < GUESSES ? self->keys[entry] : NULL;
    if (key != NULL && PyUnicode_GET_LENGTH(key) == n
        && !memcmp(PyUnicode_1BYTE_DATA(key), ks, (size_t)n))
        return Py_NewRef(key);
    key = PyUnicode_DecodeASCII((const char *)ks, n, NULL);
    if (key != NULL && entry < GUESSES)
        Py_XSETREF(self->keys[entry], Py_NewRef(key));
    return key;
}

/* Map entry `entry` (key [ks, ke), its list located in `row`, of kind `kind`; kind 0: an
 * empty Feature, no values, of kind 0's dtype as on the careful path) stored in out as
 * {name: 1-d array}; 0, 1 when its name was stored already (a name twice: the last wins,
 * the careful path checks), or -1 with an exception set. */
static int store_entry(PlanObject *self, PyObject *out, const unsigned char *base,
                       Py_ssize_t entry, const unsigned char *ks, const unsigned char *ke,
                       const int64_t *row, int kind) {
    PyObject *key = entry_key(self, entry, ks, ke);
    if (key == NULL)
        return -1;
    PyObject *value = list_array(self, base, row, kind, -1, NULL);
    Py_ssize_t had = PyDict_GET_SIZE(out);
    int stored = value == NULL ? -1 : PyDict_SetItem(out, key, value);
    Py_DECREF(key);
    Py_XDECREF(value);
    if (stored < 0)
        return -1;
    return PyDict_GET_SIZE(out) == had;
}

/* Every feature of the feature map [p, end) as stored, as a dict {name: 1-d array}, in the
 * record's order; NOT_HERE when not handled (a layout other than the writers', a non-ASCII
 * name, a name twice). */
static PyObject *decode_every(PlanObject *self, const unsigned char *base,
                              const unsigned char *p, const unsigned char *end) {
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (Py_ssize_t entry = 0; p < end; entry++) {
        const unsigned char *ks, *ke, *vs, *ve, *ls, *le;
        int64_t row[SLOTS] = {0};
        Py_ssize_t kind = 0;
        if (read_entry(&p, end, &ks, &ke, &vs, &ve) < 0)
            goto not_here;
        if (vs < ve && (read_feature(vs, ve, self->fam.max_kind, &kind, &ls, &le) < 0
                        || read_list(base, ls, le, self->fam.kinds[kind], row) < 0))
            goto not_here;
        int stored = store_entry(self, out, base, entry, ks, ke, row, (int)kind);
        if (stored < 0)
            goto fail;
        if (stored > 0)
            goto not_here;
    }
    return out;
not_here:
    Py_DECREF(out);
    return NOT_HERE;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *plan_decode(PlanObject *self, PyObject *data) {
    if (!PyBytes_CheckExact(data))
        Py_RETURN_NONE;  /* bytes-like objects are made bytes by the caller, on its path */
    const unsigned char *base = (const unsigned char *)PyBytes_AS_STRING(data), *ms, *me;
    if (feature_map(base, base + PyBytes_GET_SIZE(data), self->wrapped, &ms, &me) < 0)
        Py_RETURN_NONE;
    PyObject *out = self->names == NULL ? decode_every(self, base, ms, me)
                                        : decode_wanted(self, base, ms, me);
    if (out == NOT_HERE)
        Py_RETURN_NONE;
    return out;
}

/* plan(data): plan.decode(data) (decode_one's call of a record made bytes there). */
static PyObject *plan_call(PyObject *self, PyObject *args, PyObject *kwds) {
    PyObject *data;
    if ((kwds != NULL && PyDict_GET_SIZE(kwds)) || !PyArg_UnpackTuple(args, "RecordPlan", 1, 1,
                                                                       &data)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "RecordPlan: called with one record");
        return NULL;
    }
    return plan_decode((PlanObject *)self, data);
}

static PyMethodDef plan_methods[] = {
    {"decode", (PyCFunction)plan_decode, METH_O,
     "decode(data) -> dict | None\n\nThe record's features as numpy arrays, or None when it "
     "is not decoded here (data not bytes, another layout, a feature not matching its spec):\n"
     "the careful path then decodes it or words the error. plan(data) is the same."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject RecordPlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ofindex._native.RecordPlan",
    .tp_basicsize = sizeof(PlanObject),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_call = plan_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RecordPlan(kinds, wrapped, features, dtypes)\n\n"
              "How to decode one serialized Example (wrapped) or OFRecord: kinds says how each\n"
              "list kind stores its values (b'.b4v'; 'i': varints as int32); features is a\n"
              "tuple of (name: bytes, key, kind (0: as stored), count (-1: any), shape (None:\n"
              "1-d), default: array | None), or None for every feature as stored; dtypes the\n"
              "numpy dtype of each kind (index 0: of an empty Feature's values).",
    .tp_methods = plan_methods,
    .tp_new = plan_new,
};

/* ---- RecordCall: a one-record decoder called without a Python frame ------------------------
 *
 * Decoder(spec)(data) and decode_example(data) went through a Python __call__ (slot_tp_call:
 * a bound method and a frame, ~0.15 us of a record's ~0.5 us, against ~0.45 us for protobuf's
 * whole Example.FromString). A class deriving from RecordCall is called here: its `_plan`
 * (a RecordPlan, any callable, or None) first, and when that gives None its own
 * `_careful(data)` method (the careful path, which decodes the record or words the error). */
typedef struct {
    PyObject_HEAD
    PyObject *plan;
} CallObject;

/* The interned name of the careful path's method. */
static PyObject *careful_name;

static PyObject *record_call(PyObject *self, PyObject *args, PyObject *kwds) {
    if ((kwds != NULL && PyDict_GET_SIZE(kwds)) || PyTuple_GET_SIZE(args) != 1) {
        PyErr_Format(PyExc_TypeError, "%.200s() takes one record (its bytes)",
                     Py_TYPE(self)->tp_name);
        return NULL;
    }
    PyObject *data = PyTuple_GET_ITEM(args, 0), *plan = ((CallObject *)self)->plan, *got;
    if (plan == NULL || plan == Py_None) {
        got = Py_NewRef(Py_None);
    } else {
        Py_INCREF(plan);  /* (a Python plan may replace it meanwhile) */
        got = Py_IS_TYPE(plan, &RecordPlanType) ? plan_decode((PlanObject *)plan, data)
                                                : PyObject_CallOneArg(plan, data);
        Py_DECREF(plan);
    }
    if (got != Py_None)
        return got;  /* the decoded record, or NULL with an exception set */
    Py_DECREF(got);
    return PyObject_CallMethodOneArg(self, careful_name, data);
}

static int call_traverse(CallObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->plan);
    return 0;
}

static int call_clear(CallObject *self) {
    Py_CLEAR(self->plan);
    return 0;
}

static void call_dealloc(CallObject *self) {
    PyObject_GC_UnTrack(self);
    call_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *call_get_plan(CallObject *self, void *closure) {
    return Py_NewRef(self->plan != NULL ? self->plan : Py_None);
}

static int call_set_plan(CallObject *self, PyObject *value, void *closure) {
    Py_XSETREF(self->plan, Py_XNewRef(value));  /* (deleted: NULL, as None) */
    return 0;
}

static PyGetSetDef call_getset[] = {
    {"_plan", (getter)call_get_plan, (setter)call_set_plan,
     "the compiled decoder tried first (a RecordPlan, any callable, or None)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject RecordCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ofindex._native.RecordCall",
    .tp_basicsize = sizeof(CallObject),
    .tp_dealloc = (destructor)call_dealloc,
    .tp_call = record_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)call_traverse,
    .tp_clear = (inquiry)call_clear,
    .tp_doc = "RecordCall()\n\n"
              "Base of one-record decoders: calling one with a record's bytes returns\n"
              "self._plan(data) (a RecordPlan, any callable, or None) unless that is None, and\n"
              "then self._careful(data).",
    .tp_getset = call_getset,
    .tp_new = PyType_GenericNew,
};

int onerecord_module_init(PyObject *module) {
    careful_name = PyUnicode_InternFromString("_careful");
    if (careful_name == NULL || PyType_Ready(&RecordCallType) < 0)
        return -1;
    Py_INCREF(&RecordCallType);
    if (PyModule_AddObject(module, "RecordCall", (PyObject *)&RecordCallType) < 0) {
        Py_DECREF(&RecordCallType);
        return -1;
    }
    return 0;
}
