/* Framed TFRecord / OFRecord records cut out of buffers the caller holds (a memory map, a
 * fetched range), each checked: the stored length against the index and, when asked, the
 * TFRecord length and data CRCs. CRC32C comes from the `crc32c` package (passed in as a
 * callable): this module has no CRC code of its own. */
#include "native.h"
#include "framing.h"
#include "hwcrc.h"

#define MASK_DELTA 0xa282ead8u

static inline uint32_t mask_crc(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + MASK_DELTA;
}

/* An int64 vector from a contiguous buffer (numpy int64 array). */
int get_i64(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_ND | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != 8 || view->ndim != 1 || view->format == NULL ||
        (strcmp(view->format, "q") && strcmp(view->format, "l") &&
         strcmp(view->format, "<q") && strcmp(view->format, "=q") &&
         strcmp(view->format, "<l") && strcmp(view->format, "=l"))) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be a 1-d int64 array", what);
        return -1;
    }
    return 0;
}

int get_spans(PyObject *buf_obj, PyObject *starts_obj, PyObject *ends_obj, Py_buffer *buf,
              Py_buffer *sv, Py_buffer *ev) {
    if (PyObject_GetBuffer(buf_obj, buf, PyBUF_SIMPLE) < 0)
        return -1;
    if (get_i64(starts_obj, sv, "starts") < 0)
        goto no_starts;
    if (get_i64(ends_obj, ev, "ends") < 0)
        goto no_ends;
    if (ev->shape[0] == sv->shape[0])
        return 0;
    PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
    PyBuffer_Release(ev);
no_ends:
    PyBuffer_Release(sv);
no_starts:
    PyBuffer_Release(buf);
    return -1;
}

int package_crc(PyObject *crc_fn, PyObject *data, uint32_t *out) {
    PyObject *r = PyObject_CallOneArg(crc_fn, data);
    if (r == NULL)
        return -1;
    unsigned long long v = PyLong_Check(r) ? PyLong_AsUnsignedLongLong(r) : ~0ULL;
    Py_DECREF(r);
    if (v > 0xffffffffULL) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "crc32c did not return a 32-bit CRC");
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

int package_crc_of(PyObject *crc_fn, const unsigned char *p, Py_ssize_t n, uint32_t *out) {
    PyObject *view = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    if (view == NULL)
        return -1;
    int failed = package_crc(crc_fn, view, out);
    Py_DECREF(view);
    return failed;
}

int64_t masked_crc_of(PyObject *crc_fn, PyObject *data) {
    uint32_t crc;
    if (package_crc(crc_fn, data, &crc) < 0)
        return -1;
    return mask_crc(crc);
}

/* Expected masked CRC of the 8 length bytes at `p`, memoised in `memo` ({length: crc},
 * shared with the Python side, at most MEMO_MAX entries). */
#define MEMO_MAX 65536
int64_t masked_length_crc(PyObject *crc_fn, PyObject *memo, const unsigned char *p,
                                 int64_t length) {
    PyObject *key = PyLong_FromLongLong(length);
    if (key == NULL)
        return -1;
    PyObject *hit = PyDict_GetItemWithError(memo, key);  /* borrowed */
    if (hit != NULL) {
        Py_DECREF(key);
        /* a memo shared with Python code: refuse anything but a 32-bit CRC, never pass on
         * a value that reads as "failed" without an exception set */
        unsigned long long v = PyLong_Check(hit) ? PyLong_AsUnsignedLongLong(hit) : ~0ULL;
        if (v > 0xffffffffULL) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "length_crcs[%lld] is not a 32-bit CRC", (long long)length);
            return -1;
        }
        return (int64_t)v;
    }
    int64_t r = -1;
    if (!PyErr_Occurred()) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)p, 8);
        if (b != NULL) {
            r = masked_crc_of(crc_fn, b);
            Py_DECREF(b);
        }
        if (r >= 0 && PyDict_GET_SIZE(memo) < MEMO_MAX) {
            PyObject *v = PyLong_FromLongLong(r);
            if (v == NULL || PyDict_SetItem(memo, key, v) < 0)
                r = -1;
            Py_XDECREF(v);
        }
    }
    Py_DECREF(key);
    return r;
}

/* How the records of one call are checked, and the length CRC of the last length seen. */
typedef struct {
    Py_ssize_t header, footer;
    int verify;               /* check the TFRecord CRCs (footer 4) */
    PyObject *crc_fn, *memo;  /* the crc32c package's function; {length: masked CRC} */
    int64_t last_len, last_len_crc;  /* runs of equal lengths are common: one CRC per run */
} Checks;

#define CHECKS(header, footer, verify, crc_fn, memo) \
    {(header), (footer), (verify), (crc_fn), (memo), -1, 0}

/* The TFRecord CRCs of a payload of `size` bytes copied out with its framing (head, foot): 1
 * when they match, 0 when not, -1 with an exception set. */
static int record_crcs_ok(Checks *ck, const unsigned char *head, PyObject *payload,
                          const unsigned char *foot, int64_t size) {
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(payload);
    if (hw_crc_on && size < HW_CRC_MAX)  /* small: the CPU's instruction, no Python call */
        return (uint32_t)load_le(head + 8, 4) == hw_mask(hw_crc32c(head, 8)) &&
               (uint32_t)load_le(foot, 4) == hw_mask(hw_crc32c(data, (size_t)size));
    if (size != ck->last_len) {
        int64_t c = masked_length_crc(ck->crc_fn, ck->memo, head, size);
        if (c < 0)
            return -1;
        ck->last_len = size;
        ck->last_len_crc = c;
    }
    int64_t data_crc = masked_crc_of(ck->crc_fn, payload);
    if (data_crc < 0)
        return -1;
    return (uint32_t)load_le(head + 8, 4) == (uint32_t)ck->last_len_crc &&
           (uint32_t)load_le(foot, 4) == (uint32_t)data_crc;
}

/* One framed record at buf[start:end) of the buffer `owner` exports: its payload as bytes,
 * Py_None when a check fails, NULL with an exception set (StaleIndexError when the buffer is
 * a map whose pages are gone). */
static PyObject *cut_record(PyObject *owner, const unsigned char *base, Py_ssize_t len,
                            int64_t start, int64_t end, Checks *ck) {
    Py_ssize_t header = ck->header, footer = ck->footer;
    /* compared without arithmetic that can wrap: start and end come from corrupt data too */
    if (start < 0 || end < start || end > (int64_t)len || end - start < header + footer)
        Py_RETURN_NONE;
    int64_t size = end - start - header - footer;
    /* the payload's object first (its size is the span's, inside the buffer): its bytes and
     * the framing's then come out of the buffer in one guarded copy, and every check reads
     * the copies */
    PyObject *payload = PyBytes_FromStringAndSize(NULL, size);
    if (payload == NULL)
        return NULL;
    unsigned char head[12], foot[4];
    if (guard_copy3(head, (unsigned char *)PyBytes_AS_STRING(payload), foot, base + start,
                    (size_t)header, (size_t)size, (size_t)footer) < 0) {
        Py_DECREF(payload);
        return map_fault(owner);
    }
    int ok = load_le(head, 8) != (uint64_t)size ? 0
             : !ck->verify ? 1 : record_crcs_ok(ck, head, payload, foot, size);
    if (ok > 0)
        return payload;
    Py_DECREF(payload);
    if (ok < 0)
        return NULL;
    Py_RETURN_NONE;
}

const char cut_doc[] =
"cut(buf, starts, ends, header_size, footer_size, verify, crc32c, length_crcs) -> list | int\n\n"
"Payloads of the framed records at buf[starts[k]:ends[k]] (int64 arrays), each checked:\n"
"the stored length must equal the span's payload size and, with verify (TFRecord), the\n"
"length and data CRCs must match. Returns the list, or the position k of the first record\n"
"that fails a check (or lies outside buf).";

PyObject *cut(PyObject *self, PyObject *args) {
    PyObject *buf_obj, *starts_obj, *ends_obj, *crc_fn, *memo;
    Py_ssize_t header, footer;
    int verify;
    if (!PyArg_ParseTuple(args, "OOOnnpOO!:cut", &buf_obj, &starts_obj, &ends_obj,
                          &header, &footer, &verify, &crc_fn, &PyDict_Type, &memo))
        return NULL;
    Py_buffer buf, sv, ev;
    if (get_spans(buf_obj, starts_obj, ends_obj, &buf, &sv, &ev) < 0)
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = sv.shape[0];
    if (framing_refused(header, footer, verify, NULL) < 0)
        goto done;
    if (guard_ensure() != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    const int64_t *st = (const int64_t *)sv.buf, *en = (const int64_t *)ev.buf;
    PyObject *list = PyList_New(n);
    if (list == NULL)
        goto done;
    Checks ck = CHECKS(header, footer, verify, crc_fn, memo);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = cut_record(buf.obj, (const unsigned char *)buf.buf, buf.len, st[k],
                                    en[k], &ck);
        if (item == NULL) {
            Py_DECREF(list);
            goto done;
        }
        if (item == Py_None) {
            Py_DECREF(item);
            Py_DECREF(list);
            result = PyLong_FromSsize_t(k);
            goto done;
        }
        PyList_SET_ITEM(list, k, item);
    }
    result = list;
done:
    PyBuffer_Release(&ev);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&buf);
    return result;
}

/* A u64 offsets vector from a contiguous buffer (a sidecar's offsets block). */
int get_u64(PyObject *obj, Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_ND | PyBUF_FORMAT) < 0)
        return -1;
    const char *f = view->format;
    if (view->itemsize != 8 || view->ndim != 1 || f == NULL ||
        (strcmp(f, "Q") && strcmp(f, "<Q") && strcmp(f, "=Q") && strcmp(f, "L") &&
         strcmp(f, "<L") && strcmp(f, "=L"))) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "offsets must be 1-d uint64 arrays");
        return -1;
    }
    return 0;
}

/* Problem codes (named in ofindex/_accel.py): 1 span too short, 2 record fails a check,
 * 3 span past the data held.
 *
 * The span [*start, *end) of record i from a sidecar's offsets (the last record ends at
 * iend >= 0). Returns 0, a problem code (1: too short for `min` framing bytes or past the
 * indexed end, so the offsets are corrupt; 3: past the `len` bytes of data held), or -1 with
 * IndexError set. Compared as unsigned, without arithmetic that can wrap. */
int span_of(const Py_buffer *ov, int64_t iend, int64_t i, Py_ssize_t min,
                   Py_ssize_t len, int64_t *start, int64_t *end) {
    Py_ssize_t count = ov->shape[0];
    if (i < 0 || i >= count) {
        PyErr_Format(PyExc_IndexError, "local index %lld out of range", (long long)i);
        return -1;
    }
    const uint64_t *o = (const uint64_t *)ov->buf;
    uint64_t s = o[i], e = i + 1 < count ? o[i + 1] : (uint64_t)iend;
    if (e < s || e - s < (uint64_t)min || e > (uint64_t)iend)
        return 1;
    if (e > (uint64_t)len)
        return 3;
    *start = (int64_t)s;
    *end = (int64_t)e;
    return 0;
}

const char gather_doc[] =
"gather(bufs, offsets, indexed_ends, which, local, header_size, footer_size, verify,\n"
"       crc32c, length_crcs) -> list | tuple\n\n"
"Payloads of records local[k] of shards which[k] (int64 arrays), in that order. Shard j's\n"
"data is bufs[j] (a buffer), its sidecar offsets offsets[j] (uint64 array) and the end of\n"
"its last indexed record indexed_ends[j]. Each record's span must hold its framing and its\n"
"header and CRCs must check as in cut(). Returns the list, or (problem, k) for the first\n"
"record k that does not: problem 1 = span too short (corrupt offsets), 2 = record fails a\n"
"check, 3 = span lies beyond the buffer (the file grew since it was mapped).";

/* What gather() holds while it runs (all released by gather_close). */
typedef struct {
    PyObject *held[3];    /* the lists' items as they are now (see snapshot3) */
    Py_buffer wv, lv;     /* which, local */
    Py_ssize_t m, got;    /* shards, and how many have their buffers held in views */
    Py_buffer *views;     /* per shard j: its data at 2j, its offsets at 2j + 1 */
    int64_t *ends;        /* per shard: its indexed end */
} GatherCall;

/* Shard j's indexed end, data and offsets held (counted in got): 0, or -1 with an exception
 * set. */
static int gather_shard(GatherCall *gc, Py_ssize_t j) {
    gc->ends[j] = PyLong_AsLongLong(PyTuple_GET_ITEM(gc->held[2], j));
    if (gc->ends[j] == -1 && PyErr_Occurred())
        return -1;
    if (gc->ends[j] < 0) {
        PyErr_SetString(PyExc_ValueError, "indexed_ends must be >= 0");
        return -1;
    }
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(gc->held[0], j), &gc->views[2 * j],
                           PyBUF_SIMPLE) < 0)
        return -1;
    if (get_u64(PyTuple_GET_ITEM(gc->held[1], j), &gc->views[2 * j + 1]) < 0) {
        PyBuffer_Release(&gc->views[2 * j]);
        return -1;
    }
    gc->got = j + 1;
    return 0;
}

/* The arrays and every shard held: 0, or -1 with an exception set. */
static int gather_hold(GatherCall *gc, PyObject *which_obj, PyObject *local_obj) {
    gc->m = PyTuple_GET_SIZE(gc->held[0]);
    if (PyTuple_GET_SIZE(gc->held[1]) != gc->m || PyTuple_GET_SIZE(gc->held[2]) != gc->m) {
        PyErr_SetString(PyExc_ValueError, "bufs, offsets and indexed_ends differ in length");
        return -1;
    }
    if (get_i64(which_obj, &gc->wv, "which") < 0 || get_i64(local_obj, &gc->lv, "local") < 0)
        return -1;
    gc->views = PyMem_Calloc(gc->m ? 2 * gc->m : 1, sizeof(Py_buffer));
    gc->ends = PyMem_Calloc(gc->m ? gc->m : 1, sizeof(int64_t));
    if (gc->views == NULL || gc->ends == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < gc->m; j++)
        if (gather_shard(gc, j) < 0)
            return -1;
    if (gc->lv.shape[0] != gc->wv.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "which and local differ in length");
        return -1;
    }
    return 0;
}

/* Record k's payload (it is local[k] of shard which[k]) into *item: 0, a problem code as
 * gather() returns it, or -1 with an exception set. */
static int gather_one(const GatherCall *gc, Py_ssize_t k, Checks *ck, PyObject **item) {
    int64_t j = ((const int64_t *)gc->wv.buf)[k], i = ((const int64_t *)gc->lv.buf)[k];
    if (j < 0 || j >= gc->m) {
        PyErr_Format(PyExc_IndexError, "record %zd: shard %lld out of range", k, (long long)j);
        return -1;
    }
    const Py_buffer *data = &gc->views[2 * j];
    int64_t start, end;
    int problem = span_of(&gc->views[2 * j + 1], gc->ends[j], i, ck->header + ck->footer,
                          data->len, &start, &end);
    if (problem)
        return problem;
    *item = cut_record(data->obj, (const unsigned char *)data->buf, data->len, start, end, ck);
    if (*item == NULL)
        return -1;
    if (*item != Py_None)
        return 0;
    Py_CLEAR(*item);
    return 2;
}

/* Every record's payload: the list, (problem, k) for the first record k with one, or NULL
 * with an exception set. */
static PyObject *gather_records(const GatherCall *gc, Checks *ck) {
    Py_ssize_t n = gc->wv.shape[0];
    PyObject *list = PyList_New(n);
    if (list == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = NULL;
        int problem = gather_one(gc, k, ck, &item);
        if (problem == 0) {
            PyList_SET_ITEM(list, k, item);
            continue;
        }
        Py_DECREF(list);
        return problem < 0 ? NULL : Py_BuildValue("(in)", problem, k);
    }
    return list;
}

static void gather_close(GatherCall *gc) {
    for (Py_ssize_t j = 0; j < gc->got; j++) {
        PyBuffer_Release(&gc->views[2 * j]);
        PyBuffer_Release(&gc->views[2 * j + 1]);
    }
    PyMem_Free(gc->views);
    PyMem_Free(gc->ends);
    PyBuffer_Release(&gc->lv);  /* (buffers never acquired are empty: releasing is a no-op) */
    PyBuffer_Release(&gc->wv);
    release3(gc->held);
}

PyObject *gather(PyObject *self, PyObject *args) {
    PyObject *bufs_in, *offs_in, *iends_in, *which_obj, *local_obj, *crc_fn, *memo;
    Py_ssize_t header, footer;
    int verify;
    if (!PyArg_ParseTuple(args, "O!O!O!OOnnpOO!:gather", &PyList_Type, &bufs_in,
                          &PyList_Type, &offs_in, &PyList_Type, &iends_in, &which_obj,
                          &local_obj, &header, &footer, &verify, &crc_fn, &PyDict_Type, &memo))
        return NULL;
    if (framing_refused(header, footer, verify, NULL) < 0)
        return NULL;
    if (guard_ensure() != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    GatherCall gc = {{NULL}};
    static const char *names[3] = {"gather: bufs", "gather: offsets", "gather: indexed_ends"};
    if (snapshot3(bufs_in, offs_in, iends_in, gc.held, names) < 0)
        return NULL;
    PyObject *result = NULL;
    Checks ck = CHECKS(header, footer, verify, crc_fn, memo);
    if (gather_hold(&gc, which_obj, local_obj) == 0)
        result = gather_records(&gc, &ck);
    gather_close(&gc);
    return result;
}

const char record_doc[] =
"record(buf, offsets, indexed_end, i, header_size, footer_size, verify, crc32c, length_crcs)\n"
"    -> bytes | int\n\n"
"The checked payload of record i of one shard (its data buf, its sidecar offsets, the end of\n"
"its last indexed record), or a problem code as in gather().";

/* record()'s numbers: args[2..6] as the indexed end, the record, the framing sizes and
 * verify, each conversion checked before the next runs (no C-API call with an error set);
 * 0, or -1 with an exception set. */
static int record_args(PyObject *const *args, int64_t *iend, int64_t *i, Py_ssize_t *header,
                       Py_ssize_t *footer, int *verify) {
    if ((*iend = PyLong_AsLongLong(args[2])) == -1 && PyErr_Occurred())
        return -1;
    if ((*i = PyLong_AsLongLong(args[3])) == -1 && PyErr_Occurred())
        return -1;
    if ((*header = PyLong_AsSsize_t(args[4])) == -1 && PyErr_Occurred())
        return -1;
    if ((*footer = PyLong_AsSsize_t(args[5])) == -1 && PyErr_Occurred())
        return -1;
    if ((*verify = PyObject_IsTrue(args[6])) < 0)
        return -1;
    return 0;
}

PyObject *record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9 || !PyDict_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "record takes 9 arguments, the last a dict");
        return NULL;
    }
    int64_t iend, i;
    Py_ssize_t header, footer;
    int verify;
    if (record_args(args, &iend, &i, &header, &footer, &verify) < 0)
        return NULL;
    if (framing_refused(header, footer, verify, NULL) < 0)
        return NULL;
    if (iend < 0) {
        PyErr_SetString(PyExc_ValueError, "indexed_end must be >= 0");
        return NULL;
    }
    Py_buffer buf, ov;
    if (get_u64(args[1], &ov) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[0], &buf, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&ov);
        return NULL;
    }
    PyObject *r = NULL;
    int64_t start, end;
    int problem = span_of(&ov, iend, i, header + footer, buf.len, &start, &end);
    if (problem) {
        r = problem < 0 ? NULL : PyLong_FromLong(problem);
        goto done;
    }
    Checks ck = CHECKS(header, footer, verify, args[7], args[8]);
    r = cut_record(buf.obj, (const unsigned char *)buf.buf, buf.len, start, end, &ck);
    if (r == Py_None) {
        Py_DECREF(r);
        r = PyLong_FromLong(2);
    }
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&ov);
    return r;
}
