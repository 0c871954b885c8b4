/* A dictionary column page's records matching a query, from their codes (columns/
 * shard_reader.py): which dictionary entries match is decided once per shard (a table of one
 * flag per entry); a page's records are then its codes looked up in it.
 *
 * code_hits  the global numbers of a page's records whose code's entry matches and which hold a
 *            value, into the caller's int64 array
 *
 * numpy took ~50 us a page of 16,384 labels in calls and passes (the table indexed by the codes,
 * the validity and-ed in, flatnonzero, the base added): 31 ms of a where(label=3) over 10 M
 * records read from column sidecars; this is one pass.
 */
#include "native.h"

const char code_hits_doc[] =
    "code_hits(codes, width, table, valid, base, out) -> int\n\n"
    "The records of a page whose code (codes: count unsigned integers of width 1 or 2 bytes,\n"
    "native order) names an entry set in table (one byte an entry) and whose valid byte is\n"
    "set: base + i for each such record i, ascending, into out (a writable int64 array of at\n"
    "least count items). Returns how many. ValueError for a code past the table.";

/* code_hits's buffers acquired and their sizes checked: 0, or -1 with an exception set
 * (nothing acquired). */
static int hits_args(PyObject *const *args, Py_ssize_t width, Py_buffer *views) {
    if (width != 1 && width != 2) {
        PyErr_SetString(PyExc_ValueError, "code_hits: width must be 1 or 2");
        return -1;
    }
    int held = 0;
    for (; held < 3; held++)
        if (PyObject_GetBuffer(args[held == 0 ? 0 : held + 1], &views[held], PyBUF_SIMPLE) < 0)
            break;
    if (held == 3 && get_i64_out(args[5], &views[3], "out") == 0) {
        Py_ssize_t count = views[0].len / width;
        if (views[0].len % width == 0 && views[2].len == count && views[3].len / 8 >= count)
            return 0;
        PyErr_SetString(PyExc_ValueError,
                        "code_hits: codes, valid and out disagree on the page's records");
        held = 4;
    }
    for (int k = 0; k < held; k++)
        PyBuffer_Release(&views[k]);
    return -1;
}

/* The matching records of `count` codes into out: how many, or -1 for a code past the
 * table (its `tsize` entries). */
static Py_ssize_t match_codes(const unsigned char *codes, Py_ssize_t width, Py_ssize_t count,
                              const unsigned char *table, Py_ssize_t tsize,
                              const unsigned char *valid, int64_t base, int64_t *out) {
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint16_t wide;
        Py_ssize_t code = width == 1 ? codes[i] : (memcpy(&wide, codes + 2 * i, 2), wide);
        if (code >= tsize)
            return -1;
        out[n] = base + i;
        n += (table[code] != 0) & (valid[i] != 0);
    }
    return n;
}

PyObject *code_hits(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "code_hits takes 6 arguments");
        return NULL;
    }
    Py_ssize_t width = PyLong_AsSsize_t(args[1]);
    int64_t base = width == -1 && PyErr_Occurred() ? 0 : PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer views[4]; /* codes, table, valid, out */
    if (hits_args(args, width, views) < 0)
        return NULL;
    Py_ssize_t count = views[0].len / width, found;
    if (count > 0 && (base < 0 || base > INT64_MAX - count)) {
        found = -2;
    } else {
        Py_BEGIN_ALLOW_THREADS
        found = match_codes(views[0].buf, width, count, views[1].buf, views[1].len, views[2].buf,
                            base, views[3].buf);
        Py_END_ALLOW_THREADS
    }
    for (int k = 0; k < 4; k++)
        PyBuffer_Release(&views[k]);
    if (found < 0) {
        PyErr_SetString(PyExc_ValueError, found == -1 ? "code_hits: a code past the table"
                                                      : "code_hits: base + records past int64");
        return NULL;
    }
    return PyLong_FromSsize_t(found);
}
