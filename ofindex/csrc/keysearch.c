/* A key index's sorted keys searched (columns/sorted_keys.py, columns/key_file.py): the
 * places of one key, or of a batch of keys, in a page's keys held as a fixed-width table.
 *
 * key_span    one key's places in a table (a node's first keys, a leaf's keys)
 * key_find    one key's records in a leaf
 * key_lookup  one key from a node whose children are leaves to its records (ds.lookup(col, k)
 *             of an index of one level: one call once the leaf is held)
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

/* The table's buffer checked against kind and width: its key count, or -1 with ValueError
 * set (the view is released then). */
static Py_ssize_t table_count(PyObject *obj, Py_buffer *view, int kind, Py_ssize_t width) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
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

/* The records of the keys equal to the probe in a table of `count` keys, as a new int64
 * array: records_obj must hold one int64 a key. NULL with an exception set. */
static PyObject *equal_records(const Py_buffer *view, Py_ssize_t width, Py_ssize_t count,
                               const probe_t *q, PyObject *records_obj, const char *name) {
    Py_buffer rv;
    if (get_i64(records_obj, &rv, "records") < 0)
        return NULL;
    PyObject *out = NULL;
    if (rv.len / 8 != count) {
        PyErr_Format(PyExc_ValueError, "%s: %zd records for %zd keys", name, rv.len / 8, count);
    } else {
        Py_ssize_t left, right;
        span_of_probe(view, width, count, q, 1, &left, &right);
        npy_intp dims[1] = {(npy_intp)(right - left)};
        out = PyArray_SimpleNew(1, dims, NPY_INT64);
        if (out != NULL && right > left)
            memcpy(PyArray_DATA((PyArrayObject *)out), (const int64_t *)rv.buf + left,
                   (size_t)(right - left) * 8);
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
    PyObject *out = equal_records(&view, width, count, &q, args[4], "key_find");
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
    "per child a slot, (table, width, records) of a leaf held or anything else. The records\n"
    "(int64, a new array) of the keys equal to key when one child may hold it and its slot\n"
    "holds its leaf; else -1 (no child may hold it), -2 (several may) or the child's number\n"
    "(its leaf is not held: the caller reads it and calls again).";

/* The records of the keys equal to the probe in a leaf slot (table, width, records); NULL
 * with an exception set. */
static PyObject *find_in_slot(PyObject *slot, int kind, const probe_t *q) {
    Py_ssize_t width;
    if (PyTuple_GET_SIZE(slot) != 3 || parse_size(PyTuple_GET_ITEM(slot, 1), &width) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "key_lookup: a slot is (table, width, records)");
        return NULL;
    }
    Py_buffer view;
    Py_ssize_t count = table_count(PyTuple_GET_ITEM(slot, 0), &view, kind, width);
    if (count < 0)
        return NULL;
    PyObject *out = equal_records(&view, width, count, q, PyTuple_GET_ITEM(slot, 2),
                                  "key_lookup");
    PyBuffer_Release(&view);
    return out;
}

PyObject *key_lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    Py_buffer view, keep;
    Py_ssize_t width, count, left, right;
    probe_t q;
    if (nargs == 5 && !PyList_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "key_lookup: slots must be a list");
        return NULL;
    }
    if (span_args(args, nargs, "key_lookup", &view, &width, &count, &q, &keep, NULL) < 0)
        return NULL;
    PyObject *slots = args[4], *out = NULL;
    span_of_probe(&view, width, count, &q, 0, &left, &right);
    PyBuffer_Release(&view);
    Py_ssize_t start = left > 0 ? left - 1 : 0;
    if (PyList_GET_SIZE(slots) != count) {
        PyErr_Format(PyExc_ValueError, "key_lookup: %zd slots for %zd children",
                     PyList_GET_SIZE(slots), count);
    } else if (right <= start) {
        out = PyLong_FromLong(-1);
    } else if (right - start > 1) {
        out = PyLong_FromLong(-2);
    } else {
        PyObject *slot = PyList_GET_ITEM(slots, start);
        if (!PyTuple_Check(slot)) {
            out = PyLong_FromSsize_t(start);
        } else {
            Py_INCREF(slot);
            out = find_in_slot(slot, q.kind, &q);
            Py_DECREF(slot);
        }
    }
    if (keep.obj != NULL)
        PyBuffer_Release(&keep);
    return out;
}
