/* A key index's sorted keys searched (columns/sorted_keys.py, columns/key_file.py): the
 * places of one key, or of a batch of keys, in a page's keys held as a fixed-width table.
 *
 * key_span    one key's places in a table (a node's first keys, a leaf's keys)
 * key_find    one key's records in a leaf
 * key_lookup  one key from a node whose children are leaves to its records (ds.lookup(col, k)
 *             of an index of one level: one call once the leaf is held)
 * KeyFinder   key_lookup as a callable made once per key index: ds.lookup(col, k) calls it
 *             with the caller's key (a str, bytes, int or float) and no Python step between
 * key_places  a batch's places in a table
 * key_gather  a batch's places and records in all the leaves it was routed to, in one call
 *
 * The table is a contiguous buffer of `count` keys of `width` bytes each, of a kind named by
 * its ValueType code: 1 int64, 2 float32, 3 float64 (native byte order), 4 bytes (each key
 * zero-padded to `width`, none ending with a zero byte). Keys compare as numpy compares them:
 * numbers with NaN after every number, bytes as zero-padded strings. A bytes key searched for
 * that ends with a zero byte has no equal in such a table: both its places are the right
 * place of its stripped form (what SortedKeys.left does in Python).
 *
 * One numpy searchsorted call costs 1-2 us of setup whatever it searches; a one-key lookup
 * made two of them and a batch two per leaf page. A binary search over 4,096 keys here is
 * 12 comparisons: about 0.1 us.
 */
#include "native.h"
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <float.h>
#include <stddef.h>
#include <math.h>

/* numpy's C API for this file's arrays (key_find, key_lookup), imported with the module (module.c); -1
 * with an exception set. */
int keysearch_init(void) {
    return _import_array();
}

enum { KIND_INT64 = 1, KIND_FLOAT32 = 2, KIND_FLOAT64 = 3, KIND_BYTES = 4 };

/* A key searched for: a number, or bytes with their length. */
typedef struct {
    int kind;
    int64_t i;
    double f;
    const unsigned char *p;
    Py_ssize_t n;
} probe_t;

/* numpy's order of floats: NaN after every number, NaNs equal. */
static inline int float_cmp(double a, double b) {
    if (a < b || (b != b && a == a))
        return -1;
    if (b < a || (a != a && b == b))
        return 1;
    return 0;
}

/* Two zero-padded strings compared as numpy compares them. */
static inline int padded_cmp(const unsigned char *a, Py_ssize_t an, const unsigned char *b,
                             Py_ssize_t bn) {
    Py_ssize_t common = an < bn ? an : bn;
    int c = common ? memcmp(a, b, (size_t)common) : 0;
    if (c)
        return c < 0 ? -1 : 1;
    for (Py_ssize_t k = common; k < an; k++)
        if (a[k])
            return 1;
    for (Py_ssize_t k = common; k < bn; k++)
        if (b[k])
            return -1;
    return 0;
}

/* Key `at` of the table against the probe: <0, 0 or >0. */
static inline int entry_cmp(const unsigned char *table, Py_ssize_t width, Py_ssize_t at,
                            const probe_t *q) {
    const unsigned char *e = table + at * width;
    switch (q->kind) {
    case KIND_INT64: {
        int64_t v;
        memcpy(&v, e, 8);
        return v < q->i ? -1 : v > q->i;
    }
    case KIND_FLOAT32: {
        float v;
        memcpy(&v, e, 4);
        return float_cmp((double)v, q->f);
    }
    case KIND_FLOAT64: {
        double v;
        memcpy(&v, e, 8);
        return float_cmp(v, q->f);
    }
    default:
        return padded_cmp(e, width, q->p, q->n);
    }
}

/* The first place in [lo, count) whose key is more than the probe (right) or at least the
 * probe (left). */
static Py_ssize_t bound(const unsigned char *table, Py_ssize_t width, Py_ssize_t lo,
                        Py_ssize_t count, const probe_t *q, int right) {
    Py_ssize_t hi = count;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        int c = entry_cmp(table, width, mid, q);
        if (c < 0 || (right && c == 0))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Whether the probe ends with a zero byte (bytes only): no key of the table equals it. */
static inline int trailing_zero(const probe_t *q) {
    return q->kind == KIND_BYTES && q->n > 0 && q->p[q->n - 1] == 0;
}

/* A table's view checked against kind and width: its key count, or -1 with ValueError set
 * (the view is released then). */
static Py_ssize_t checked_count(Py_buffer *view, int kind, Py_ssize_t width) {
    int fits = (kind == KIND_INT64 || kind == KIND_FLOAT64) ? width == 8
               : kind == KIND_FLOAT32                       ? width == 4
               : kind == KIND_BYTES                         ? width > 0
                                                            : 0;
    if (!fits || view->len % width) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError,
                     "a key table of kind %d and width %zd cannot hold %zd bytes", kind, width,
                     view->len);
        return -1;
    }
    return view->len / width;
}

/* The table's buffer checked against kind and width: its key count, or -1 with ValueError
 * set (the view is released then). */
static Py_ssize_t table_count(PyObject *obj, Py_buffer *view, int kind, Py_ssize_t width) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    return checked_count(view, kind, width);
}

/* table_count() of a table a one-key lookup reads: a C-contiguous numpy array's data in place,
 * without the buffer protocol (view->obj is NULL then: PyBuffer_Release does nothing), whose
 * per-array bookkeeping is more memory a random key's lookup misses. An export would not keep
 * the array from being resized either: numpy resizes an array referred to elsewhere only when
 * told not to check (resize(refcheck=False), which numpy documents as unsafe). */
static Py_ssize_t table_in_place(PyObject *obj, Py_buffer *view, int kind, Py_ssize_t width) {
    if (!PyArray_CheckExact(obj) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)obj))
        return table_count(obj, view, kind, width);
    view->obj = NULL;
    view->buf = PyArray_DATA((PyArrayObject *)obj);
    view->len = PyArray_NBYTES((PyArrayObject *)obj);
    return checked_count(view, kind, width);
}

/* A C-contiguous 1-d numpy array of int64 in native byte order: its data in place and its
 * length in *n; else NULL. */
static const int64_t *i64_in_place(PyObject *obj, Py_ssize_t *n) {
    if (!PyArray_CheckExact(obj))
        return NULL;
    PyArrayObject *array = (PyArrayObject *)obj;
    if (PyArray_NDIM(array) != 1 || !PyArray_IS_C_CONTIGUOUS(array) ||
        PyArray_DESCR(array)->kind != 'i' || PyArray_ITEMSIZE(array) != 8 ||
        !PyArray_ISNOTSWAPPED(array))
        return NULL;
    *n = PyArray_DIM(array, 0);
    return PyArray_DATA(array);
}

/* The probe from a Python key of the table's kind (bytes-like for bytes: its view is held in
 * *keep, to release); 0, or -1 with an exception set. */
static int probe_of(PyObject *key, int kind, probe_t *q, Py_buffer *keep) {
    q->kind = kind;
    keep->obj = NULL;
    if (kind == KIND_INT64) {
        q->i = PyLong_AsLongLong(key);
        return q->i == -1 && PyErr_Occurred() ? -1 : 0;
    }
    if (kind == KIND_FLOAT32 || kind == KIND_FLOAT64) {
        q->f = PyFloat_AsDouble(key);
        if (q->f == -1.0 && PyErr_Occurred())
            return -1;
        if (kind == KIND_FLOAT32)
            q->f = (double)(float)q->f; /* compared as numpy compares a float32 array */
        return 0;
    }
    if (PyBytes_CheckExact(key)) {
        q->p = (const unsigned char *)PyBytes_AS_STRING(key);
        q->n = PyBytes_GET_SIZE(key);
        return 0;
    }
    if (PyObject_GetBuffer(key, keep, PyBUF_SIMPLE) < 0)
        return -1;
    q->p = keep->buf;
    q->n = keep->len;
    return 0;
}

/* A size argument: 0, or -1 with an exception set. */
static int parse_size(PyObject *obj, Py_ssize_t *out) {
    *out = PyLong_AsSsize_t(obj);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

const char key_span_doc[] =
    "key_span(table, width, kind, key, equal) -> (left, right)\n\n"
    "The places of key in a page's sorted keys (see keysearch.c): with equal, the span of the\n"
    "keys equal to it (each place searched at most once); else its left and right places.";

/* The arguments of key_span and key_find: the table's view (to release), its key count, the
 * probe (its view in *keep, to release when keep->obj is set) and `equal`; 0, or -1 with an
 * exception set and nothing held. */
static int span_args(PyObject *const *args, Py_ssize_t nargs, const char *name,
                     Py_buffer *view, Py_ssize_t *width_out, Py_ssize_t *count, probe_t *q,
                     Py_buffer *keep, int *equal) {
    Py_ssize_t width, kind_arg;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "%s takes 5 arguments", name);
        return -1;
    }
    if (parse_size(args[1], &width) < 0 || parse_size(args[2], &kind_arg) < 0)
        return -1;
    if (equal != NULL && (*equal = PyObject_IsTrue(args[4])) < 0)
        return -1;
    int kind = kind_arg >= KIND_INT64 && kind_arg <= KIND_BYTES ? (int)kind_arg : 0;
    if ((*count = table_count(args[0], view, kind, width)) < 0)
        return -1;
    *width_out = width;
    if (probe_of(args[3], kind, q, keep) < 0) {
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The places of the probe in the table (with equal: the span of its equals). */
static void span_of_probe(const Py_buffer *view, Py_ssize_t width, Py_ssize_t count,
                          const probe_t *q, int equal, Py_ssize_t *left, Py_ssize_t *right) {
    const unsigned char *table = view->buf;
    if (trailing_zero(q)) {
        *left = *right = bound(table, width, 0, count, q, 1);
    } else if (!equal) {
        *left = bound(table, width, 0, count, q, 0);
        *right = bound(table, width, *left, count, q, 1);
    } else {
        *left = bound(table, width, 0, count, q, 0);
        if (*left == count || entry_cmp(table, width, *left, q) != 0)
            *right = *left;
        else if (*left + 1 == count || entry_cmp(table, width, *left + 1, q) != 0)
            *right = *left + 1; /* an id: held once */
        else
            *right = bound(table, width, *left + 2, count, q, 1);
    }
}

PyObject *key_span(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Py_buffer view, keep;
    Py_ssize_t width, count, left, right;
    probe_t q;
    int equal;
    if (span_args(args, nargs, "key_span", &view, &width, &count, &q, &keep, &equal) < 0)
        return NULL;
    span_of_probe(&view, width, count, &q, equal, &left, &right);
    if (keep.obj != NULL)
        PyBuffer_Release(&keep);
    PyBuffer_Release(&view);
    return Py_BuildValue("(nn)", left, right);
}

const char key_find_doc[] =
    "key_find(table, width, kind, key, records) -> numpy.ndarray\n\n"
    "The records (int64, one per key of the table) of the keys equal to key: a new array.";

/* The right place of a probe from its left place: the next key read first (an id is held
 * once: its right place is the next one, in the same cache line). */
static Py_ssize_t right_from_left(const unsigned char *table, Py_ssize_t width,
                                  Py_ssize_t count, const probe_t *q, Py_ssize_t left) {
    if (left == count || entry_cmp(table, width, left, q) != 0)
        return left;
    if (left + 1 == count || entry_cmp(table, width, left + 1, q) != 0)
        return left + 1;
    return bound(table, width, left + 2, count, q, 1);
}

/* Prefetch hints: the lines of a leaf's part its search reads, asked for at once so that their
 * misses overlap instead of following one another (a no-op where the compiler has none). */
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

/* Every cache line of the n bytes at p asked for ahead. */
static inline void prefetch_span(const unsigned char *p, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k += 64)
        PREFETCH(p + k);
    if (n > 0)
        PREFETCH(p + n - 1);
}

/* A leaf's keys as a one-key search reads them: its table of `count` keys and, when fences is
 * not NULL, its fences: the key at every `step`-th place (nf of them), a compact copy kept hot
 * in the caches. A leaf of 4,096 13-byte ids is 53 kB: a binary search over it takes 12 steps,
 * most of them a cache miss waited for in turn (random keys of a million: 0.66 us a call where
 * one key looked up again and again takes 0.27). Through fences of every 64th key (832 bytes a
 * leaf, 200 kB for a million keys) it searches the fences, then one part of 64 keys (13 lines)
 * and their records, all asked for at once: 0.70 us a call against 0.85 without fences, and
 * 1.15 against 1.38 with the caches flushed between rounds of 2,000 keys when the part is
 * asked for at once against not (medians, a loaded 2-core VM). Fences every 32 or 128 keys did
 * no better. */
typedef struct {
    const unsigned char *table;
    Py_ssize_t width, count;
    const unsigned char *fences;
    Py_ssize_t nf, step;
    const int64_t *records;
} leaf_t;

/* bound() over a leaf: its fences first when it has them. */
static Py_ssize_t leaf_bound(const leaf_t *leaf, const probe_t *q, int right) {
    if (leaf->fences == NULL)
        return bound(leaf->table, leaf->width, 0, leaf->count, q, right);
    /* fences [0, g) are below the place: it lies after fence g - 1 and at fence g at most */
    Py_ssize_t g = bound(leaf->fences, leaf->width, 0, leaf->nf, q, right);
    Py_ssize_t lo = g > 0 ? (g - 1) * leaf->step + 1 : 0;
    Py_ssize_t hi = g < leaf->nf ? g * leaf->step : leaf->count;
    Py_ssize_t read = (hi < leaf->count ? hi + 1 : hi) - lo; /* the key after: an id's end */
    prefetch_span(leaf->table + lo * leaf->width, read * leaf->width);
    if (leaf->records != NULL)
        prefetch_span((const unsigned char *)(leaf->records + lo), read * 8);
    return bound(leaf->table, leaf->width, lo, hi, q, right);
}

/* The places of the keys of a leaf equal to the probe (span_of_probe's equal span). */
static void leaf_span(const leaf_t *leaf, const probe_t *q, Py_ssize_t *left,
                      Py_ssize_t *right) {
    if (trailing_zero(q)) {
        *left = *right = leaf_bound(leaf, q, 1);
        return;
    }
    *left = leaf_bound(leaf, q, 0);
    *right = right_from_left(leaf->table, leaf->width, leaf->count, q, *left);
}

/* The records of the keys equal to the probe in a leaf, as a new int64 array: records_obj
 * must hold one int64 a key (an int64 array's are read in place, see table_in_place). NULL
 * with an exception set. */
static PyObject *equal_records(leaf_t *leaf, const probe_t *q, PyObject *records_obj,
                               const char *name) {
    Py_buffer rv;
    Py_ssize_t n, left, right;
    rv.obj = NULL;
    const int64_t *records = i64_in_place(records_obj, &n);
    if (records == NULL) {
        if (get_i64(records_obj, &rv, "records") < 0)
            return NULL;
        records = rv.buf;
        n = rv.len / 8;
    }
    PyObject *out = NULL;
    if (n == leaf->count) {
        leaf->records = records;
        leaf_span(leaf, q, &left, &right);
        npy_intp dims[1] = {(npy_intp)(right - left)};
        out = PyArray_SimpleNew(1, dims, NPY_INT64);
        if (out != NULL && rv.obj == NULL) /* again, after an allocation: nothing held them */
            records = i64_in_place(records_obj, &n);
    }
    if (n != leaf->count || records == NULL) {
        Py_CLEAR(out);
        PyErr_Format(PyExc_ValueError, "%s: %zd records for %zd keys", name, n, leaf->count);
    } else if (out != NULL && right > left) {
        memcpy(PyArray_DATA((PyArrayObject *)out), records + left, (size_t)(right - left) * 8);
    }
    PyBuffer_Release(&rv);
    return out;
}

PyObject *key_find(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Py_buffer view, keep;
    Py_ssize_t width, count;
    probe_t q;
    if (span_args(args, nargs, "key_find", &view, &width, &count, &q, &keep, NULL) < 0)
        return NULL;
    leaf_t leaf = {view.buf, width, count, NULL, 0, 0, NULL};
    PyObject *out = equal_records(&leaf, &q, args[4], "key_find");
    if (keep.obj != NULL)
        PyBuffer_Release(&keep);
    PyBuffer_Release(&view);
    return out;
}

/* Probes searched together by key_places: their binary searches take their steps in lockstep,
 * so that the memory reads of one step (a leaf of 4,096 13-byte keys is 53 kB, a batch's
 * leaves many MB: most reads miss the caches) overlap instead of waiting one after another. */
#define LOCKSTEP 16

/* The left places of k probes (first key at least the probe), into out. */
static void lower_bounds(const unsigned char *table, Py_ssize_t width, Py_ssize_t count,
                         const probe_t *q, Py_ssize_t k, int64_t *out) {
    Py_ssize_t base[LOCKSTEP] = {0};
    Py_ssize_t left = count;
    if (count == 0) {
        for (Py_ssize_t m = 0; m < k; m++)
            out[m] = 0;
        return;
    }
    while (left > 1) {
        Py_ssize_t half = left / 2;
        for (Py_ssize_t m = 0; m < k; m++)
            if (entry_cmp(table, width, base[m] + half, &q[m]) < 0)
                base[m] += half;
        left -= half;
    }
    for (Py_ssize_t m = 0; m < k; m++)
        out[m] = base[m] + (entry_cmp(table, width, base[m], &q[m]) < 0);
}

const char key_places_doc[] =
    "key_places(table, width, kind, queries, query_width, members, lefts, rights) -> None\n\n"
    "The left and right places in a page's sorted keys of the queries members (int64 indexes\n"
    "into queries, a table of the same kind, bytes zero-padded to query_width), into the int64\n"
    "arrays lefts and rights (as long as members).";

/* The probe of query k of a query table. */
static inline void probe_at(const unsigned char *queries, Py_ssize_t qwidth, int kind,
                            Py_ssize_t k, probe_t *q) {
    const unsigned char *p = queries + k * qwidth;
    q->kind = kind;
    if (kind == KIND_INT64) {
        memcpy(&q->i, p, 8);
    } else if (kind == KIND_FLOAT32) {
        float v;
        memcpy(&v, p, 4);
        q->f = v;
    } else if (kind == KIND_FLOAT64) {
        memcpy(&q->f, p, 8);
    } else {
        q->p = p;
        q->n = qwidth; /* zero-padded: compared as its stripped form */
    }
}

/* Each member query's left and right places in a sorted table of count keys, LOCKSTEP
 * binary searches at a time; with records (else NULL), into hits its record when exactly one
 * key equals it, else -1. */
static void search_members(const unsigned char *table, Py_ssize_t width, Py_ssize_t count,
                           const unsigned char *queries, Py_ssize_t qwidth, int kind,
                           const int64_t *members, Py_ssize_t n, int64_t *lefts,
                           int64_t *rights, const int64_t *records, int64_t *hits) {
    for (Py_ssize_t j = 0; j < n; j += LOCKSTEP) {
        Py_ssize_t k = n - j < LOCKSTEP ? n - j : LOCKSTEP;
        probe_t q[LOCKSTEP];
        for (Py_ssize_t m = 0; m < k; m++)
            probe_at(queries, qwidth, kind, (Py_ssize_t)members[j + m], &q[m]);
        lower_bounds(table, width, count, q, k, lefts + j);
        for (Py_ssize_t m = 0; m < k; m++) {
            Py_ssize_t left = (Py_ssize_t)lefts[j + m];
            Py_ssize_t right = right_from_left(table, width, count, &q[m], left);
            rights[j + m] = right;
            if (records != NULL)
                hits[j + m] = right - left == 1 ? records[left] : -1;
        }
    }
}

/* Every member a place among qcount queries: 0, or -1 with IndexError set (naming `who`). */
static int members_inside(const int64_t *members, Py_ssize_t n, Py_ssize_t qcount,
                          const char *who) {
    for (Py_ssize_t j = 0; j < n; j++)
        if (members[j] < 0 || members[j] >= qcount) {
            PyErr_Format(PyExc_IndexError, "%s: member %lld of %zd queries", who,
                         (long long)members[j], qcount);
            return -1;
        }
    return 0;
}

PyObject *key_places(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *table_obj, *queries_obj, *members_obj, *lefts_obj, *rights_obj;
    Py_ssize_t width, qwidth;
    int kind;
    if (!PyArg_ParseTuple(args, "OniOnOOO", &table_obj, &width, &kind, &queries_obj, &qwidth,
                          &members_obj, &lefts_obj, &rights_obj))
        return NULL;
    Py_buffer view, qview, mv, lv, rv;
    Py_ssize_t count = table_count(table_obj, &view, kind, width);
    if (count < 0)
        return NULL;
    Py_ssize_t qcount = table_count(queries_obj, &qview, kind, qwidth);
    if (qcount < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (get_i64(members_obj, &mv, "members") < 0)
        goto fail2;
    if (get_i64_out(lefts_obj, &lv, "lefts") < 0)
        goto fail3;
    if (get_i64_out(rights_obj, &rv, "rights") < 0)
        goto fail4;
    Py_ssize_t n = mv.len / 8;
    if (lv.len / 8 != n || rv.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "key_places: lefts and rights must be as long as "
                                          "members");
        goto fail5;
    }
    if (members_inside(mv.buf, n, qcount, "key_places") < 0)
        goto fail5;
    search_members(view.buf, width, count, qview.buf, qwidth, kind, mv.buf, n, lv.buf, rv.buf,
                   NULL, NULL);
    PyBuffer_Release(&rv);
    PyBuffer_Release(&lv);
    PyBuffer_Release(&mv);
    PyBuffer_Release(&qview);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
fail5:
    PyBuffer_Release(&rv);
fail4:
    PyBuffer_Release(&lv);
fail3:
    PyBuffer_Release(&mv);
fail2:
    PyBuffer_Release(&qview);
    PyBuffer_Release(&view);
    return NULL;
}

const char key_gather_doc[] =
    "key_gather(tables, widths, records, kind, queries, query_width, members, cuts, lefts,\n"
    "           rights, hits) -> None\n\n"
    "A batch's keys searched in the leaves they were routed to, in one call: the queries\n"
    "members[cuts[g]:cuts[g + 1]] in tables[g] (keys widths[g] bytes wide, of kind, their\n"
    "records records[g]). Into the int64 arrays lefts, rights and hits (as long as members):\n"
    "each query's left and right places, and its record when exactly one key equals it (else\n"
    "-1).";

/* One leaf's group of key_gather: 0, or -1 with an exception set. */
static int gather_group(PyObject *table_obj, Py_ssize_t width, PyObject *records_obj, int kind,
                        const unsigned char *queries, Py_ssize_t qwidth, const int64_t *members,
                        Py_ssize_t n, int64_t *lefts, int64_t *rights, int64_t *hits) {
    Py_buffer view, rv;
    Py_ssize_t count = table_count(table_obj, &view, kind, width);
    if (count < 0)
        return -1;
    if (get_i64(records_obj, &rv, "records") < 0) {
        PyBuffer_Release(&view);
        return -1;
    }
    int status = 0;
    if (rv.len / 8 != count) {
        PyErr_Format(PyExc_ValueError, "key_gather: %zd records for %zd keys", rv.len / 8,
                     count);
        status = -1;
    } else {
        search_members(view.buf, width, count, queries, qwidth, kind, members, n, lefts, rights,
                       rv.buf, hits);
    }
    PyBuffer_Release(&rv);
    PyBuffer_Release(&view);
    return status;
}

/* key_gather's arguments of one length each: the three outputs one item per member, one
 * record array and width per leaf, cuts one more than the leaves, from 0 to every member. */
static int gather_lengths_agree(const Py_buffer *ov, Py_ssize_t n, Py_ssize_t record_lists,
                                Py_ssize_t groups, const Py_buffer *wv, const Py_buffer *cv) {
    const int64_t *cuts = cv->buf;
    for (int k = 0; k < 3; k++)
        if (ov[k].len / 8 != n)
            return 0;
    return record_lists == groups && wv->len / 8 == groups && cv->len / 8 == groups + 1 &&
           cuts[0] == 0 && cuts[groups] == n;
}

/* key_gather's groups, each leaf's queries searched in it: 0, or -1 with an exception set. */
static int gather_groups(PyObject *tables, PyObject *records, const int64_t *widths,
                         const int64_t *cuts, Py_ssize_t groups, int kind,
                         const unsigned char *queries, Py_ssize_t qwidth,
                         const int64_t *members, Py_ssize_t n, const Py_buffer *ov) {
    for (Py_ssize_t g = 0; g < groups; g++) {
        int64_t a = cuts[g], b = cuts[g + 1];
        if (g >= PyList_GET_SIZE(tables) || g >= PyList_GET_SIZE(records)) {
            PyErr_SetString(PyExc_ValueError, "key_gather: its lists changed during the call");
            return -1;
        }
        if (a > b || b > n) {
            PyErr_SetString(PyExc_ValueError, "key_gather: cuts must not decrease");
            return -1;
        }
        /* the lists are the caller's: each item held while it is searched */
        PyObject *table = PyList_GET_ITEM(tables, g), *rec = PyList_GET_ITEM(records, g);
        Py_INCREF(table);
        Py_INCREF(rec);
        int status = gather_group(table, (Py_ssize_t)widths[g], rec, kind, queries, qwidth,
                                  members + a, (Py_ssize_t)(b - a), (int64_t *)ov[0].buf + a,
                                  (int64_t *)ov[1].buf + a, (int64_t *)ov[2].buf + a);
        Py_DECREF(table);
        Py_DECREF(rec);
        if (status < 0)
            return -1;
    }
    return 0;
}

PyObject *key_gather(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *tables, *widths_obj, *records, *queries_obj, *members_obj, *cuts_obj;
    PyObject *outs[3];
    Py_ssize_t qwidth;
    int kind;
    if (!PyArg_ParseTuple(args, "O!OO!iOnOOOOO", &PyList_Type, &tables, &widths_obj,
                          &PyList_Type, &records, &kind, &queries_obj, &qwidth, &members_obj,
                          &cuts_obj, &outs[0], &outs[1], &outs[2]))
        return NULL;
    Py_buffer qview, wv, mv, cv, ov[3];
    int held = 0; /* how many of ov are held */
    PyObject *result = NULL;
    Py_ssize_t qcount = table_count(queries_obj, &qview, kind, qwidth);
    if (qcount < 0)
        return NULL;
    if (get_i64(widths_obj, &wv, "widths") < 0)
        goto no_widths;
    if (get_i64(members_obj, &mv, "members") < 0)
        goto no_members;
    if (get_i64(cuts_obj, &cv, "cuts") < 0)
        goto no_cuts;
    for (; held < 3; held++)
        if (get_i64_out(outs[held], &ov[held], "lefts, rights and hits") < 0)
            goto done;
    Py_ssize_t n = mv.len / 8, groups = PyList_GET_SIZE(tables);
    const int64_t *members = mv.buf, *cuts = cv.buf, *widths = wv.buf;
    if (!gather_lengths_agree(ov, n, PyList_GET_SIZE(records), groups, &wv, &cv)) {
        PyErr_SetString(PyExc_ValueError, "key_gather: the lengths of its arguments disagree");
        goto done;
    }
    if (members_inside(members, n, qcount, "key_gather") < 0 ||
        gather_groups(tables, records, widths, cuts, groups, kind, qview.buf, qwidth, members,
                      n, ov) < 0)
        goto done;
    Py_INCREF(Py_None);
    result = Py_None;
done:
    while (held > 0)
        PyBuffer_Release(&ov[--held]);
    PyBuffer_Release(&cv);
no_cuts:
    PyBuffer_Release(&mv);
no_members:
    PyBuffer_Release(&wv);
no_widths:
    PyBuffer_Release(&qview);
    return result;
}

const char key_lookup_doc[] =
    "key_lookup(table, width, kind, key, slots) -> numpy.ndarray | int\n\n"
    "One key through a node whose children are leaves: the node's first keys `table`, and\n"
    "per child a slot, (table, width, records) or (table, width, records, fences, step) of a\n"
    "leaf held (fences: its keys at every step-th place, a table of the same width), or\n"
    "anything else. The records (int64, a new array) of the keys equal to key when one child\n"
    "may hold it and its slot holds its leaf; else -1 (no child may hold it), -2 (several\n"
    "may) or the child's number (its leaf is not held: the caller reads it and calls again).";

/* A leaf's fences (the keys at every step-th place of its `count` keys) into leaf, their view
 * held in *fv: 0, or -1 with ValueError set and nothing held. */
static int fences_of(PyObject *obj, Py_ssize_t step, int kind, leaf_t *leaf, Py_buffer *fv) {
    Py_ssize_t nf = table_in_place(obj, fv, kind, leaf->width);
    if (nf < 0)
        return -1;
    if (step < 1 || nf != (leaf->count + step - 1) / step) {
        PyBuffer_Release(fv);
        PyErr_Format(PyExc_ValueError, "key_lookup: %zd fences every %zd keys of %zd", nf,
                     step, leaf->count);
        return -1;
    }
    leaf->fences = fv->buf;
    leaf->nf = nf;
    leaf->step = step;
    return 0;
}

/* The records of the keys equal to the probe in a leaf slot, (table, width, records) or
 * (table, width, records, fences, step); NULL with an exception set. */
static PyObject *find_in_slot(PyObject *slot, int kind, const probe_t *q) {
    Py_ssize_t size = PyTuple_GET_SIZE(slot), width, step = 0;
    if ((size != 3 && size != 5) || parse_size(PyTuple_GET_ITEM(slot, 1), &width) < 0 ||
        (size == 5 && parse_size(PyTuple_GET_ITEM(slot, 4), &step) < 0)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "key_lookup: a slot is (table, width, records) "
                                              "or (table, width, records, fences, step)");
        return NULL;
    }
    Py_buffer view, fv;
    Py_ssize_t count = table_in_place(PyTuple_GET_ITEM(slot, 0), &view, kind, width);
    if (count < 0)
        return NULL;
    leaf_t leaf = {view.buf, width, count, NULL, 0, 0, NULL};
    fv.obj = NULL;
    PyObject *out = NULL;
    if (size == 3 || fences_of(PyTuple_GET_ITEM(slot, 3), step, kind, &leaf, &fv) == 0)
        out = equal_records(&leaf, q, PyTuple_GET_ITEM(slot, 2), "key_lookup");
    if (fv.obj != NULL)
        PyBuffer_Release(&fv);
    PyBuffer_Release(&view);
    return out;
}

/* The child of a node (its first keys' view: count keys of width) that may hold the probe,
 * its slots `slots` (a list): the records when its slot holds its leaf (a new reference, NULL
 * with an exception set); else NULL with *child set, -1 (no child may hold it), -2 (several
 * may) or the child's number (its leaf is not held). */
static PyObject *through_node(const Py_buffer *view, Py_ssize_t width, Py_ssize_t count,
                              const probe_t *q, PyObject *slots, Py_ssize_t *child) {
    Py_ssize_t left, right;
    *child = -3;
    if (PyList_GET_SIZE(slots) != count) {
        PyErr_Format(PyExc_ValueError, "key_lookup: %zd slots for %zd children",
                     PyList_GET_SIZE(slots), count);
        return NULL;
    }
    span_of_probe(view, width, count, q, 1, &left, &right); /* (its right place: the same) */
    Py_ssize_t start = left > 0 ? left - 1 : 0;
    if (right - start != 1) {
        *child = right <= start ? -1 : -2;
        return NULL;
    }
    PyObject *slot = PyList_GET_ITEM(slots, start);
    if (!PyTuple_Check(slot)) {
        *child = start;
        return NULL;
    }
    Py_INCREF(slot);
    PyObject *out = find_in_slot(slot, q->kind, q);
    Py_DECREF(slot);
    return out;
}

PyObject *key_lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Py_buffer view, keep;
    Py_ssize_t width, count, child;
    probe_t q;
    if (nargs == 5 && !PyList_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "key_lookup: slots must be a list");
        return NULL;
    }
    if (span_args(args, nargs, "key_lookup", &view, &width, &count, &q, &keep, NULL) < 0)
        return NULL;
    PyObject *out = through_node(&view, width, count, &q, args[4], &child);
    PyBuffer_Release(&view);
    if (out == NULL && child != -3)
        out = PyLong_FromSsize_t(child);
    if (keep.obj != NULL)
        PyBuffer_Release(&keep);
    return out;
}

/* ---- KeyFinder: ds.lookup(column, key) of one key in one call -------------------------------
 *
 * ds.lookup(col, k) went through three Python calls before key_lookup (the dataset's, its
 * column queries', the key index's: type checks, the str encoded, the compiled module looked
 * up), ~0.7 us of a ~1.5 us lookup. A KeyFinder, made once per key index of one level, takes
 * the caller's key itself: a str (its UTF-8 bytes, as str.encode gives them) or bytes for a
 * bytes index, an int in int64's range for an int64 index, a float for a float index. It
 * answers when the root and a held leaf do (key_lookup's records, or no records when no child
 * may hold the key), and otherwise calls its `fallback` with the key: another type of key (to
 * be converted or refused with the precise error), a leaf not held yet (read, then held in its
 * slot), keys over several leaves. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *table; /* the root's first keys */
    PyObject *slots;
    PyObject *fallback;
    Py_ssize_t width;
    int kind;
} FinderObject;

/* The probe of a caller's key for a bytes index: bytes, or a str's UTF-8 bytes (held by the
 * str). 1, or 0 (the fallback answers: another type, or a str that is not UTF-8 as
 * str.encode raises for it). */
static int bytes_probe(PyObject *key, probe_t *q) {
    if (PyBytes_CheckExact(key)) {
        q->p = (const unsigned char *)PyBytes_AS_STRING(key);
        q->n = PyBytes_GET_SIZE(key);
        return 1;
    }
    if (!PyUnicode_CheckExact(key))
        return 0;
    q->p = (const unsigned char *)PyUnicode_AsUTF8AndSize(key, &q->n);
    if (q->p == NULL)
        PyErr_Clear(); /* (surrogates) the fallback raises what encode raises */
    return q->p != NULL;
}

/* The probe of a caller's key for a number index: an int in int64's range, a float (one
 * float32 holds for a float32 index: numpy's cast of a bigger one warns, as the fallback
 * does). 1, 0 (the fallback answers), or -1 with an exception set. */
static int number_probe(PyObject *key, int kind, probe_t *q) {
    if (kind == KIND_INT64) {
        int overflow;
        if (!PyLong_CheckExact(key))
            return 0;
        q->i = PyLong_AsLongLongAndOverflow(key, &overflow);
        return overflow ? 0 : (q->i == -1 && PyErr_Occurred()) ? -1 : 1;
    }
    if (!PyFloat_CheckExact(key))
        return 0;
    q->f = PyFloat_AS_DOUBLE(key);
    if (kind == KIND_FLOAT32) {
        if (fabs(q->f) > FLT_MAX && !isinf(q->f))
            return 0;
        q->f = (double)(float)q->f;
    }
    return 1;
}

/* The probe of a caller's key when the finder answers for its type: 1, 0 (the fallback
 * answers), or -1 with an exception set. */
static int finder_probe(const FinderObject *self, PyObject *key, probe_t *q) {
    q->kind = self->kind;
    return self->kind == KIND_BYTES ? bytes_probe(key, q) : number_probe(key, self->kind, q);
}

/* A new empty int64 array: no records. */
static PyObject *no_records(void) {
    npy_intp dims[1] = {0};
    return PyArray_SimpleNew(1, dims, NPY_INT64);
}

static PyObject *finder_call(PyObject *obj, PyObject *const *args, size_t nargsf,
                             PyObject *kwnames) {
    FinderObject *self = (FinderObject *)obj;
    if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "a KeyFinder takes one key");
        return NULL;
    }
    PyObject *key = args[0];
    probe_t q;
    int answers = finder_probe(self, key, &q);
    if (answers <= 0)
        return answers < 0 ? NULL : PyObject_CallOneArg(self->fallback, key);
    Py_buffer view;
    Py_ssize_t count = table_in_place(self->table, &view, self->kind, self->width), child;
    if (count < 0)
        return NULL;
    PyObject *out = through_node(&view, self->width, count, &q, self->slots, &child);
    PyBuffer_Release(&view);
    if (out != NULL || child == -3)
        return out;
    return child == -1 ? no_records() : PyObject_CallOneArg(self->fallback, key);
}

static PyObject *finder_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"table", "width", "kind", "slots", "fallback", NULL};
    PyObject *table, *slots, *fallback;
    Py_ssize_t width;
    int kind;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OniO!O:KeyFinder", names, &table, &width,
                                     &kind, &PyList_Type, &slots, &fallback))
        return NULL;
    Py_buffer view;
    if (table_count(table, &view, kind, width) < 0) /* checked once here, and at each call */
        return NULL;
    PyBuffer_Release(&view);
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "KeyFinder: fallback must be callable");
        return NULL;
    }
    FinderObject *self = (FinderObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = finder_call;
    self->table = Py_NewRef(table);
    self->slots = Py_NewRef(slots);
    self->fallback = Py_NewRef(fallback);
    self->width = width;
    self->kind = kind;
    return (PyObject *)self;
}

static int finder_traverse(FinderObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->table);
    Py_VISIT(self->slots);
    Py_VISIT(self->fallback);
    return 0;
}

static int finder_clear(FinderObject *self) {
    Py_CLEAR(self->table);
    Py_CLEAR(self->slots);
    Py_CLEAR(self->fallback);
    return 0;
}

static void finder_dealloc(FinderObject *self) {
    PyObject_GC_UnTrack(self);
    finder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyTypeObject KeyFinderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ofindex._native.KeyFinder",
    .tp_basicsize = sizeof(FinderObject),
    .tp_dealloc = (destructor)finder_dealloc,
    .tp_vectorcall_offset = offsetof(FinderObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)finder_traverse,
    .tp_clear = (inquiry)finder_clear,
    .tp_doc = "KeyFinder(table, width, kind, slots, fallback)\n\n"
              "key_lookup(table, width, kind, key, slots) as a callable of the key alone: a\n"
              "str (its UTF-8 bytes) or bytes for kind 4, an int for kind 1, a float for kinds\n"
              "2 and 3. Calling it returns the records key_lookup finds (no records when no\n"
              "child may hold the key), and fallback(key) for any other key or answer.",
    .tp_new = finder_new,
};
