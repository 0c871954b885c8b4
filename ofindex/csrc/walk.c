/* The index builder's header walk: record after record, read the length at each header and
 * jump to the next one. Pure arithmetic over a buffer the caller holds, run with the GIL
 * released so that several files are scanned at once on threads. Nothing is checked here:
 * the caller checks the lengths (and the TFRecord length CRCs) it gets back in bulk. */
#include "native.h"

/* Positions where walking stops instead of overflowing: any larger end is as good as
 * "past the end of the file" to the caller, who caps the last span the same way. */
#define WALK_CAP ((uint64_t)1 << 62)

const char walk_doc[] =
    "walk(buffer, n, header_size, overhead, out) -> (count, end)\n\n"
    "Walk the records framed in buffer[0:n]: a record starts at 0, the next one at\n"
    "p + length(p) + overhead, where length(p) is the little-endian uint64 at p. Every start\n"
    "p with p + header_size <= n is written to `out` (an int64 array of at least\n"
    "n // overhead + 1 items); returns how many, and where the walk stopped (capped at 2**62).";

/* The walk over base[0:lim), without the GIL: each start p with p + hs <= lim into pos (at
 * most cap of them); how many, and where the walk stopped (*end, capped at WALK_CAP). */
static Py_ssize_t walk_starts(const unsigned char *base, uint64_t lim, uint64_t hs,
                              uint64_t ov, int64_t *pos, Py_ssize_t cap, uint64_t *end) {
    Py_ssize_t count = 0;
    uint64_t p = 0;
    while (p + hs <= lim && count < cap) {
        pos[count++] = (int64_t)p;
        uint64_t length = load_le(base + p, 8);
        if (length > WALK_CAP - p - ov) {  /* p < n <= 2**62: no wrap on the right */
            p = WALK_CAP;
            break;
        }
        p += length + ov;
    }
    *end = p;
    return count;
}

PyObject *walk(PyObject *self, PyObject *args) {
    PyObject *buf_obj, *out_obj;
    Py_ssize_t n, header, overhead;
    if (!PyArg_ParseTuple(args, "OnnnO:walk", &buf_obj, &n, &header, &overhead, &out_obj))
        return NULL;
    /* framing sizes are a few bytes: bounding them keeps every sum below far from wrapping */
    if (header < 8 || overhead < header || overhead > (1 << 20) || n < 0) {
        PyErr_SetString(PyExc_ValueError, "walk: bad sizes");
        return NULL;
    }
    Py_buffer buf, out;
    if (PyObject_GetBuffer(buf_obj, &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    if (get_i64(out_obj, &out, "walk: out") < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (!PyBuffer_IsContiguous(&out, 'C') || out.readonly) {
        PyErr_SetString(PyExc_ValueError, "walk: out must be a writable contiguous array");
        goto fail;
    }
    if (n > buf.len || (uint64_t)n >= WALK_CAP / 2) {
        PyErr_SetString(PyExc_ValueError, "walk: n is larger than the buffer");
        goto fail;
    }
    Py_ssize_t cap = out.len / 8;
    if (cap < n / overhead + 1) {
        PyErr_SetString(PyExc_ValueError, "walk: out is too small");
        goto fail;
    }
    uint64_t p;
    Py_ssize_t count;
    Py_BEGIN_ALLOW_THREADS
    count = walk_starts((const unsigned char *)buf.buf, (uint64_t)n, (uint64_t)header,
                        (uint64_t)overhead, (int64_t *)out.buf, cap, &p);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyBuffer_Release(&out);
    return Py_BuildValue("nK", count, (unsigned long long)p);
fail:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&out);
    return NULL;
}
