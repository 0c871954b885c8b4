/* The values of lists that `locate` (examples.c) found, read out of a batch of records in one
 * call: packed varints into an int64 or int32 array, or the values of bytes lists as bytes
 * objects. The lists were checked by `locate`; they are read again with the same bounds
 * here, and whatever does not hold exactly the number of values the caller counted is
 * refused (ValueError) before anything is written past what the caller gave. */
#include "protowire.h"

/* The packed varints [p, e) into out (room for `room` values of `width` bytes); the number
 * of values, or -1 when they are malformed or more than `room`. */
static Py_ssize_t read_varints(const unsigned char *p, const unsigned char *e, char *out,
                               Py_ssize_t room, int width) {
    Py_ssize_t count = 0;
    while (p < e) {
        uint64_t v;
        if (count >= room || next_varint(&p, e, &v) < 0)
            return -1;
        if (width == 8) {
            int64_t x = (int64_t)v;
            memcpy(out + count * 8, &x, 8);
        } else {
            int32_t x = (int32_t)(uint32_t)v;  /* the low 32 bits, as protobuf's int32 */
            memcpy(out + count * 4, &x, 4);
        }
        count++;
    }
    return count;
}

/* The bytes list [p, e) stored into slots[*at...] (`room` of them); 0, or -1 when it is
 * malformed or holds more values than the room (no exception set), or when a bytes object
 * cannot be made (exception set, *made = 0). */
static int read_bytes(const unsigned char *p, const unsigned char *e, PyObject **slots,
                      Py_ssize_t room, Py_ssize_t *at, int *made) {
    const unsigned char *vs, *ve;
    while (p < e) {
        if (*at >= room || *p++ != 0x0A || read_body(&p, e, &vs, &ve) < 0)
            return -1;
        PyObject *value = PyBytes_FromStringAndSize((const char *)vs, ve - vs);
        if (value == NULL) {
            *made = 0;
            return -1;
        }
        slots[(*at)++] = value;
    }
    return 0;
}

const char values_doc[] =
    "values(records, starts, ends, how, out) -> list | None\n\n"
    "The values of one list per record: bytes [starts[i], ends[i]) of records[i] (a list of\n"
    "bytes). how 'v' / 'i': packed varints (a list's packed run, as `locate` gives it) into\n"
    "`out`, a writable buffer of exactly the values as int64 / int32 (the low 32 bits);\n"
    "returns None. how 'b': bytes list messages; `out` is their number of values in all;\n"
    "returns them as a 1-d numpy array of bytes objects. ValueError when a span lies outside\n"
    "its record, or the lists are malformed or hold another number of values.";

/* The spans [s[i], e[i]) of the n records of `recs`, checked to lie in their records; their
 * bytes in all, or -1 with an exception set. */
static Py_ssize_t span_bytes(const Records *recs, const int64_t *s, const int64_t *e) {
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < recs->n; i++)
        if (s[i] < 0 || e[i] < s[i] || e[i] > recs->len[i]
            || add_size(total, (Py_ssize_t)(e[i] - s[i]), &total) < 0) {
            PyErr_SetString(PyExc_ValueError, "values: a span lies outside its record");
            return -1;
        }
    return total;
}

/* values(..., 'b', count): the bytes values of the lists, as a 1-d object array. */
static PyObject *bytes_values(const Records *recs, const int64_t *s, const int64_t *e,
                              Py_ssize_t total, PyObject *count_obj) {
    Py_ssize_t count = PyLong_AsSsize_t(count_obj);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    /* a bytes value takes two bytes at least: no list longer than the spans can hold */
    if (count < 0 || count > total / 2) {
        PyErr_SetString(PyExc_ValueError, "values: more values than the lists can hold");
        return NULL;
    }
    /* straight into the array: through a list, each value was stored twice */
    PyObject **slots;
    PyObject *arr = object_array(count, &slots);
    if (arr == NULL)
        return NULL;
    Py_ssize_t at = 0;
    int made = 1;
    for (Py_ssize_t i = 0; i < recs->n; i++)
        if (read_bytes(recs->ptr[i] + s[i], recs->ptr[i] + e[i], slots, count, &at, &made) < 0)
            break;
    if (!made || at != count || PyErr_Occurred()) {
        Py_DECREF(arr);  /* the slots not filled are NULL: numpy skips them */
        if (made)
            PyErr_SetString(PyExc_ValueError, "values: the lists hold another number of values");
        return NULL;
    }
    return arr;
}

/* values(..., 'v' or 'i', out): the packed varints of the lists into `out`; None. */
static PyObject *varint_values(const Records *recs, const int64_t *s, const int64_t *e,
                               int how, PyObject *out_obj) {
    Py_buffer ov;
    if (PyObject_GetBuffer(out_obj, &ov, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    int width = how == 'v' ? 8 : 4;
    if (ov.len % width) {
        PyBuffer_Release(&ov);
        PyErr_SetString(PyExc_ValueError, "values: out is not a whole number of values");
        return NULL;
    }
    Py_ssize_t room = ov.len / width, written = 0, bad = 0;
    char *dst = (char *)ov.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < recs->n && !bad; i++) {
        Py_ssize_t got = read_varints(recs->ptr[i] + s[i], recs->ptr[i] + e[i],
                                      dst + written * width, room - written, width);
        if (got < 0)
            bad = 1;
        else
            written += got;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ov);
    if (bad || written != room) {
        PyErr_SetString(PyExc_ValueError, "values: the lists hold another number of values");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyObject *values(PyObject *self, PyObject *args) {
    PyObject *bufs, *s_obj, *e_obj, *out_obj;
    int how;
    if (!PyArg_ParseTuple(args, "OOOCO:values", &bufs, &s_obj, &e_obj, &how, &out_obj))
        return NULL;
    if (how != 'v' && how != 'i' && how != 'b') {
        PyErr_SetString(PyExc_ValueError, "values: how must be 'v', 'i' or 'b'");
        return NULL;
    }
    Records recs;
    if (get_records(bufs, Py_None, &recs, "values") < 0)
        return NULL;
    Py_buffer sv, ev;
    PyObject *result = NULL;
    if (get_i64(s_obj, &sv, "values: starts") < 0) {
        release_records(&recs);
        return NULL;
    }
    if (get_i64(e_obj, &ev, "values: ends") == 0) {
        const int64_t *s = (const int64_t *)sv.buf, *e = (const int64_t *)ev.buf;
        Py_ssize_t total = -1;
        if (sv.shape[0] != recs.n || ev.shape[0] != recs.n)
            PyErr_SetString(PyExc_ValueError, "values: one start and one end per record");
        else
            total = span_bytes(&recs, s, e);
        if (total >= 0)
            result = how == 'b' ? bytes_values(&recs, s, e, total, out_obj)
                                : varint_values(&recs, s, e, how, out_obj);
        PyBuffer_Release(&ev);
    }
    PyBuffer_Release(&sv);
    release_records(&recs);
    return result;
}
