/* A key index leaf's records decoded (columns/key_file.py): the byte planes of their deltas
 * (docs/format.md, "Key index") summed into a caller's int64 array, in one call a leaf.
 *
 * key_records  a leaf page's records into out[at:at + count], each checked within the dataset
 *
 * A leaf page ends with 8 planes of `count` bytes, byte b of every delta in plane b (lowest
 * first); record i is the sum of deltas 0..i (two's complement, wrapping as numpy's int64
 * cumsum does). Planes of zeros are skipped: a where(label=3) leaf's deltas fit in 1-3 bytes.
 * numpy took ~25 us a leaf of 4,096 records in calls (a copy per plane, the sum, its least and
 * greatest record); this is ~3 us, written where the caller wants the records (a query's
 * answer) rather than into an array of its own.
 */
#include "native.h"

/* Whether the n bytes at p are all zero. */
static int all_zero(const unsigned char *p, Py_ssize_t n) {
    unsigned char seen = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        seen |= p[i];
    return seen == 0;
}

/* The deltas of `count` records from their 8 planes into out (not yet summed). */
static void interleave(const unsigned char *planes, Py_ssize_t count, uint64_t *out) {
    memset(out, 0, (size_t)count * 8);
    for (int b = 0; b < 8; b++) {
        const unsigned char *plane = planes + (Py_ssize_t)b * count;
        if (all_zero(plane, count))
            continue;
        for (Py_ssize_t i = 0; i < count; i++)
            out[i] |= (uint64_t)plane[i] << (8 * b);
    }
}

/* The deltas at out summed in place: 1 when every record is in [0, limit), else 0. */
static int summed(uint64_t *out, Py_ssize_t count, int64_t limit) {
    uint64_t sum = 0, outside = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        sum += out[i];
        out[i] = sum;
        outside |= sum >= (uint64_t)limit; /* a negative record is a huge unsigned one */
    }
    return outside == 0;
}

const char key_records_doc[] =
    "key_records(page, count, out, at, limit) -> bool\n\n"
    "The records of a key index leaf page (a buffer ending with 8 byte planes of count int64\n"
    "deltas, lowest bytes first) summed into out[at:at + count] (a writable int64 array).\n"
    "True when every record is in [0, limit); False otherwise (out[at:at + count] then holds\n"
    "the sums all the same).";

/* key_records's arguments: the page, count, out and at checked and out acquired; -1 with an
 * exception set. */
static int records_args(PyObject *const *args, Py_buffer *page, Py_buffer *ov, Py_ssize_t *count,
                        Py_ssize_t *at, int64_t *limit) {
    *count = PyLong_AsSsize_t(args[1]);
    *at = *count < 0 ? -1 : PyLong_AsSsize_t(args[3]);
    *limit = *at < 0 ? -1 : PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return -1;
    if (*count < 0 || *at < 0 || *limit < 0) {
        PyErr_SetString(PyExc_ValueError, "key_records: count, at and limit must be >= 0");
        return -1;
    }
    if (PyObject_GetBuffer(args[0], page, PyBUF_SIMPLE) < 0)
        return -1;
    if (get_i64_out(args[2], ov, "out") < 0) {
        PyBuffer_Release(page);
        return -1;
    }
    if (*count > page->len / 8 || *count > ov->len / 8 - *at || *at > ov->len / 8) {
        PyErr_Format(PyExc_ValueError, "key_records: %zd records do not fit a page of %zd bytes "
                     "or out[%zd:] of %zd", *count, page->len, *at, ov->len / 8);
        PyBuffer_Release(ov);
        PyBuffer_Release(page);
        return -1;
    }
    return 0;
}

PyObject *key_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "key_records takes 5 arguments");
        return NULL;
    }
    Py_buffer page, ov;
    Py_ssize_t count, at;
    int64_t limit;
    if (records_args(args, &page, &ov, &count, &at, &limit) < 0)
        return NULL;
    const unsigned char *planes = (const unsigned char *)page.buf + page.len - 8 * count;
    uint64_t *out = (uint64_t *)ov.buf + at;
    int inside;
    Py_BEGIN_ALLOW_THREADS
    interleave(planes, count, out);
    inside = summed(out, count, limit);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ov);
    PyBuffer_Release(&page);
    return PyBool_FromLong(inside);
}
