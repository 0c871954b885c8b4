/* spans: where the records of a batch lie in their shards' data, from the sidecars'
 * offsets, checked as gather() checks them, in one compiled pass (big batches plan this
 * before their copies are spread over threads; numpy took ~0.4 ms for 256 records of a few
 * shards, an eighth of such a batch). */
#include "native.h"

const char spans_doc[] =
"spans(bufs, offsets, indexed_ends, which, local, min_size, starts, ends) -> None | tuple\n\n"
"The spans of records local[k] of shards which[k] (int64 arrays), written to starts[k] and\n"
"ends[k] (writable int64 arrays of the same length). Shard j's data is bufs[j] (only its\n"
"length is used: a buffer, or an int that is the length), its sidecar offsets offsets[j]\n"
"(uint64 array) and the end of its last indexed record indexed_ends[j]. Returns None, or\n"
"(problem, k) for the first record k whose span is too short for min_size framing bytes or\n"
"past its indexed end (problem 1: corrupt offsets) or past the bytes of bufs[j] (problem\n"
"3); starts and ends are then partly set.";

/* What spans() holds while it runs (all released by spans_close). */
typedef struct {
    PyObject *held[3];      /* the lists' items as they are now (see snapshot3) */
    Py_ssize_t m, got;      /* shards, and how many have their offsets held in views */
    Py_buffer *views;
    int64_t *ends;          /* per shard: its indexed end, then its data's length */
    Py_buffer wv, lv, sv, ev;  /* which, local, starts, ends */
} SpansCall;

/* The data's length: bufs[j] is a buffer, or the length itself (files held as blocks).
 * 0, or -1 with an exception set. */
static int data_length(PyObject *buf, Py_ssize_t *length) {
    if (PyLong_Check(buf)) {
        *length = PyLong_AsSsize_t(buf);
        if (*length == -1 && PyErr_Occurred())
            return -1;
        if (*length < 0) {
            PyErr_SetString(PyExc_ValueError, "a length in bufs must be >= 0");
            return -1;
        }
        return 0;
    }
    Py_buffer data;
    if (PyObject_GetBuffer(buf, &data, PyBUF_SIMPLE) < 0)
        return -1;
    *length = data.len;
    PyBuffer_Release(&data);
    return 0;
}

/* Shard j's indexed end, data length and offsets (views[j], counted in got once held):
 * 0, or -1 with an exception set. */
static int hold_shard(SpansCall *sc, Py_ssize_t j) {
    int64_t iend = PyLong_AsLongLong(PyTuple_GET_ITEM(sc->held[2], j));
    if (iend == -1 && PyErr_Occurred())
        return -1;
    if (iend < 0) {
        PyErr_SetString(PyExc_ValueError, "indexed_ends must be >= 0");
        return -1;
    }
    Py_ssize_t length;
    if (data_length(PyTuple_GET_ITEM(sc->held[0], j), &length) < 0)
        return -1;
    sc->ends[2 * j] = iend;
    sc->ends[2 * j + 1] = length;
    if (get_u64(PyTuple_GET_ITEM(sc->held[1], j), &sc->views[j]) < 0)
        return -1;
    sc->got = j + 1;
    return 0;
}

/* The arrays and every shard's offsets held: 0, or -1 with an exception set. */
static int spans_hold(SpansCall *sc, PyObject *which_obj, PyObject *local_obj,
                      PyObject *starts_obj, PyObject *ends_obj) {
    if (get_i64(which_obj, &sc->wv, "which") < 0 || get_i64(local_obj, &sc->lv, "local") < 0 ||
        get_i64_out(starts_obj, &sc->sv, "starts") < 0 ||
        get_i64_out(ends_obj, &sc->ev, "ends") < 0)
        return -1;
    Py_ssize_t n = sc->wv.shape[0];
    if (sc->lv.shape[0] != n || sc->sv.shape[0] != n || sc->ev.shape[0] != n) {
        PyErr_SetString(PyExc_ValueError, "spans: which, local, starts and ends differ in "
                        "length");
        return -1;
    }
    for (Py_ssize_t j = 0; j < sc->m; j++)
        if (hold_shard(sc, j) < 0)
            return -1;
    return 0;
}

/* Each record's span into starts and ends: None, (problem, k) for the first record k with
 * one, or NULL with an exception set. */
static PyObject *spans_locate(const SpansCall *sc, Py_ssize_t min_size) {
    const int64_t *which = (const int64_t *)sc->wv.buf, *local = (const int64_t *)sc->lv.buf;
    int64_t *st = (int64_t *)sc->sv.buf, *en = (int64_t *)sc->ev.buf;
    for (Py_ssize_t k = 0; k < sc->wv.shape[0]; k++) {
        int64_t j = which[k];
        if (j < 0 || j >= sc->m) {
            PyErr_Format(PyExc_IndexError, "record %zd: shard %lld out of range", k,
                         (long long)j);
            return NULL;
        }
        int problem = span_of(&sc->views[j], sc->ends[2 * j], local[k], min_size,
                              (Py_ssize_t)sc->ends[2 * j + 1], &st[k], &en[k]);
        if (problem < 0)
            return NULL;
        if (problem)
            return Py_BuildValue("(in)", problem, k);
    }
    return Py_NewRef(Py_None);
}

static void spans_close(SpansCall *sc) {
    for (Py_ssize_t j = 0; j < sc->got; j++)
        PyBuffer_Release(&sc->views[j]);
    PyBuffer_Release(&sc->ev);  /* (buffers never acquired are empty: releasing is a no-op) */
    PyBuffer_Release(&sc->sv);
    PyBuffer_Release(&sc->lv);
    PyBuffer_Release(&sc->wv);
    PyMem_Free(sc->views);
    PyMem_Free(sc->ends);
    release3(sc->held);
}

PyObject *spans(PyObject *self, PyObject *args) {
    PyObject *bufs_in, *offs_in, *iends_in, *which_obj, *local_obj, *starts_obj, *ends_obj;
    Py_ssize_t min_size;
    if (!PyArg_ParseTuple(args, "O!O!O!OOnOO:spans", &PyList_Type, &bufs_in, &PyList_Type,
                          &offs_in, &PyList_Type, &iends_in, &which_obj, &local_obj, &min_size,
                          &starts_obj, &ends_obj))
        return NULL;
    SpansCall sc = {{NULL}};
    static const char *names[3] = {"spans: bufs", "spans: offsets", "spans: indexed_ends"};
    if (snapshot3(bufs_in, offs_in, iends_in, sc.held, names) < 0)
        return NULL;
    sc.m = PyTuple_GET_SIZE(sc.held[0]);
    if (PyTuple_GET_SIZE(sc.held[1]) != sc.m || PyTuple_GET_SIZE(sc.held[2]) != sc.m ||
        min_size < 0) {
        PyErr_SetString(PyExc_ValueError, "spans: bufs, offsets and indexed_ends differ in "
                        "length, or min_size < 0");
        release3(sc.held);
        return NULL;
    }
    PyObject *result = NULL;
    sc.views = PyMem_Calloc(sc.m ? sc.m : 1, sizeof(Py_buffer));
    sc.ends = PyMem_Calloc(sc.m ? 2 * sc.m : 2, sizeof(int64_t));  /* indexed end, length */
    if (sc.views == NULL || sc.ends == NULL)
        PyErr_NoMemory();
    else if (spans_hold(&sc, which_obj, local_obj, starts_obj, ends_obj) == 0)
        result = spans_locate(&sc, min_size);
    spans_close(&sc);
    return result;
}
