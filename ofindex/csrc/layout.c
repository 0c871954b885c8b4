/* The two loops of batched decoding over records that share one byte layout: checking
 * that every record has the first one's bytes outside its payloads, and copying the payloads
 * of all records back to back into one array. */
#include "native.h"

/* The byte ranges [r[2k], r[2k+1]) of a flat int64 array, checked against `len`. */
static int get_ranges(PyObject *obj, Py_buffer *view, Py_ssize_t len) {
    if (get_i64(obj, view, "ranges") < 0)
        return -1;
    const int64_t *r = (const int64_t *)view->buf;
    Py_ssize_t n = view->shape[0];
    for (Py_ssize_t k = 0; k + 1 < n; k += 2)
        if (r[k] < 0 || r[k + 1] < r[k] || r[k + 1] > len) {
            PyBuffer_Release(view);
            PyErr_SetString(PyExc_ValueError, "a range lies outside the records");
            return -1;
        }
    if (n % 2) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "ranges must hold (start, end) pairs");
        return -1;
    }
    return 0;
}

/* The shortest length of a list of bytes objects, or -1 with TypeError set. */
static Py_ssize_t min_bytes_len(PyObject *bufs) {
    Py_ssize_t g = PyList_GET_SIZE(bufs), least = PY_SSIZE_T_MAX;
    for (Py_ssize_t i = 0; i < g; i++) {
        PyObject *b = PyList_GET_ITEM(bufs, i);
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "records must be bytes");
            return -1;
        }
        if (PyBytes_GET_SIZE(b) < least)
            least = PyBytes_GET_SIZE(b);
    }
    return g ? least : 0;
}

const char same_bytes_doc[] =
"same_bytes(records, ranges) -> bool\n\n"
"Whether every record (a list of bytes) has record 0's bytes in each range\n"
"[ranges[2k], ranges[2k+1]) (a flat int64 array).";

PyObject *same_bytes(PyObject *self, PyObject *args) {
    PyObject *bufs, *ranges_obj;
    if (!PyArg_ParseTuple(args, "O!O:same_bytes", &PyList_Type, &bufs, &ranges_obj))
        return NULL;
    Py_ssize_t least = min_bytes_len(bufs);
    Py_buffer rv;
    if (least < 0 || get_ranges(ranges_obj, &rv, least) < 0)
        return NULL;
    const int64_t *r = (const int64_t *)rv.buf;
    Py_ssize_t g = PyList_GET_SIZE(bufs), n = rv.shape[0];
    int same = 1;
    if (g) {
        const char *first = PyBytes_AS_STRING(PyList_GET_ITEM(bufs, 0));
        for (Py_ssize_t i = 1; i < g && same; i++) {
            const char *b = PyBytes_AS_STRING(PyList_GET_ITEM(bufs, i));
            for (Py_ssize_t k = 0; k < n; k += 2)
                if (memcmp(first + r[k], b + r[k], (size_t)(r[k + 1] - r[k]))) {
                    same = 0;
                    break;
                }
        }
    }
    PyBuffer_Release(&rv);
    return PyBool_FromLong(same);
}

const char gather_bytes_doc[] =
"gather_bytes(records, ranges, out) -> None\n\n"
"Copy the ranges [ranges[2k], ranges[2k+1]) of every record (a list of bytes), record after\n"
"record, into the writable buffer out, which must be exactly that long.";

PyObject *gather_bytes(PyObject *self, PyObject *args) {
    PyObject *bufs, *ranges_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "O!OO:gather_bytes", &PyList_Type, &bufs, &ranges_obj,
                          &out_obj))
        return NULL;
    Py_ssize_t least = min_bytes_len(bufs);
    Py_buffer rv, ov;
    if (least < 0 || get_ranges(ranges_obj, &rv, least) < 0)
        return NULL;
    if (PyObject_GetBuffer(out_obj, &ov, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&rv);
        return NULL;
    }
    const int64_t *r = (const int64_t *)rv.buf;
    Py_ssize_t g = PyList_GET_SIZE(bufs), n = rv.shape[0], row = 0;
    for (Py_ssize_t k = 0; k < n; k += 2)
        row += r[k + 1] - r[k];
    PyObject *result = NULL;
    if (row * g != ov.len) {
        PyErr_SetString(PyExc_ValueError, "out does not hold exactly the gathered bytes");
        goto done;
    }
    char *dst = (char *)ov.buf;
    for (Py_ssize_t i = 0; i < g; i++) {
        const char *b = PyBytes_AS_STRING(PyList_GET_ITEM(bufs, i));
        for (Py_ssize_t k = 0; k < n; k += 2) {
            size_t size = (size_t)(r[k + 1] - r[k]);
            memcpy(dst, b + r[k], size);
            dst += size;
        }
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&ov);
    PyBuffer_Release(&rv);
    return result;
}
