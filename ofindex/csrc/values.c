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
    Py_buffer sv, ev, ov;
    int have = 0;
    PyObject *result = NULL;
    if (get_i64(s_obj, &sv, "values: starts") < 0)
        goto done;
    have = 1;
    if (get_i64(e_obj, &ev, "values: ends") < 0)
        goto done;
    have = 2;
    Py_ssize_t n = recs.n, total = 0;
    const int64_t *s = (const int64_t *)sv.buf, *e = (const int64_t *)ev.buf;
    if (sv.shape[0] != n || ev.shape[0] != n) {
        PyErr_SetString(PyExc_ValueError, "values: one start and one end per record");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < 0 || e[i] < s[i] || e[i] > recs.len[i]
            || add_size(total, (Py_ssize_t)(e[i] - s[i]), &total) < 0) {
            PyErr_SetString(PyExc_ValueError, "values: a span lies outside its record");
            goto done;
        }
    if (how == 'b') {
        Py_ssize_t count = PyLong_AsSsize_t(out_obj);
        if (count == -1 && PyErr_Occurred())
            goto done;
        /* a bytes value takes two bytes at least: no list longer than the spans can hold */
        if (count < 0 || count > total / 2) {
            PyErr_SetString(PyExc_ValueError, "values: more values than the lists can hold");
            goto done;
        }
        /* straight into the array: through a list, each value was stored twice */
        PyObject **slots;
        PyObject *arr = object_array(count, &slots);
        if (arr == NULL)
            goto done;
        Py_ssize_t at = 0;
        int made = 1;
        for (Py_ssize_t i = 0; i < n; i++)
            if (read_bytes(recs.ptr[i] + s[i], recs.ptr[i] + e[i], slots, count, &at, &made) < 0)
                break;
        if (!made || at != count || PyErr_Occurred()) {
            Py_DECREF(arr);  /* the slots not filled are NULL: numpy skips them */
            if (made)
                PyErr_SetString(PyExc_ValueError,
                                "values: the lists hold another number of values");
            goto done;
        }
        result = arr;
        goto done;
    }
    if (PyObject_GetBuffer(out_obj, &ov, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        goto done;
    have = 3;
    int width = how == 'v' ? 8 : 4;
    if (ov.len % width) {
        PyErr_SetString(PyExc_ValueError, "values: out is not a whole number of values");
        goto done;
    }
    Py_ssize_t room = ov.len / width, written = 0, bad = 0;
    char *dst = (char *)ov.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        Py_ssize_t got = read_varints(recs.ptr[i] + s[i], recs.ptr[i] + e[i],
                                      dst + written * width, room - written, width);
        if (got < 0)
            bad = 1;
        else
            written += got;
    }
    Py_END_ALLOW_THREADS
    if (bad || written != room) {
        PyErr_SetString(PyExc_ValueError, "values: the lists hold another number of values");
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    if (have >= 3)
        PyBuffer_Release(&ov);
    if (have >= 2)
        PyBuffer_Release(&ev);
    if (have >= 1)
        PyBuffer_Release(&sv);
    release_records(&recs);
    return result;
}
