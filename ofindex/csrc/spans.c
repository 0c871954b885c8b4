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

PyObject *spans(PyObject *self, PyObject *args) {
    PyObject *bufs_in, *offs_in, *iends_in, *which_obj, *local_obj, *starts_obj, *ends_obj;
    Py_ssize_t min_size;
    if (!PyArg_ParseTuple(args, "O!O!O!OOnOO:spans", &PyList_Type, &bufs_in, &PyList_Type,
                          &offs_in, &PyList_Type, &iends_in, &which_obj, &local_obj, &min_size,
                          &starts_obj, &ends_obj))
        return NULL;
    PyObject *held[3];  /* the lists' items as they are now (see snapshot3) */
    if (snapshot3(bufs_in, offs_in, iends_in, held) < 0)
        return NULL;
    PyObject *bufs = held[0], *offs = held[1], *iends = held[2];
    Py_ssize_t m = PyTuple_GET_SIZE(bufs);
    if (PyTuple_GET_SIZE(offs) != m || PyTuple_GET_SIZE(iends) != m || min_size < 0) {
        PyErr_SetString(PyExc_ValueError, "spans: bufs, offsets and indexed_ends differ in "
                        "length, or min_size < 0");
        release3(held);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t got = 0;  /* shards whose offsets are held */
    Py_buffer wv, lv, sv, ev;
    Py_buffer *views = PyMem_Calloc(m ? m : 1, sizeof(Py_buffer));
    int64_t *ends = PyMem_Calloc(m ? 2 * m : 2, sizeof(int64_t));  /* indexed end, length */
    if (views == NULL || ends == NULL) {
        PyMem_Free(views);
        PyMem_Free(ends);
        release3(held);
        return PyErr_NoMemory();
    }
    if (get_i64(which_obj, &wv, "which") < 0)
        goto no_which;
    if (get_i64(local_obj, &lv, "local") < 0)
        goto no_local;
    if (get_i64_out(starts_obj, &sv, "starts") < 0)
        goto no_starts;
    if (get_i64_out(ends_obj, &ev, "ends") < 0)
        goto no_ends;
    Py_ssize_t n = wv.shape[0];
    if (lv.shape[0] != n || sv.shape[0] != n || ev.shape[0] != n) {
        PyErr_SetString(PyExc_ValueError, "spans: which, local, starts and ends differ in "
                        "length");
        goto done;
    }
    for (; got < m; got++) {
        int64_t iend = PyLong_AsLongLong(PyTuple_GET_ITEM(iends, got));
        if (iend == -1 && PyErr_Occurred())
            goto done;
        if (iend < 0) {
            PyErr_SetString(PyExc_ValueError, "indexed_ends must be >= 0");
            goto done;
        }
        PyObject *buf = PyTuple_GET_ITEM(bufs, got);
        Py_ssize_t length;
        if (PyLong_Check(buf)) {  /* the data's length itself (files held as blocks) */
            length = PyLong_AsSsize_t(buf);
            if (length == -1 && PyErr_Occurred())
                goto done;
            if (length < 0) {
                PyErr_SetString(PyExc_ValueError, "a length in bufs must be >= 0");
                goto done;
            }
        } else {
            Py_buffer data;
            if (PyObject_GetBuffer(buf, &data, PyBUF_SIMPLE) < 0)
                goto done;
            length = data.len;
            PyBuffer_Release(&data);
        }
        ends[2 * got] = iend;
        ends[2 * got + 1] = length;
        if (get_u64(PyTuple_GET_ITEM(offs, got), &views[got]) < 0)
            goto done;
    }
    const int64_t *which = (const int64_t *)wv.buf, *local = (const int64_t *)lv.buf;
    int64_t *st = (int64_t *)sv.buf, *en = (int64_t *)ev.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t j = which[k];
        if (j < 0 || j >= m) {
            PyErr_Format(PyExc_IndexError, "record %zd: shard %lld out of range", k,
                         (long long)j);
            goto done;
        }
        int problem = span_of(&views[j], ends[2 * j], local[k], min_size,
                              (Py_ssize_t)ends[2 * j + 1], &st[k], &en[k]);
        if (problem < 0)
            goto done;
        if (problem) {
            result = Py_BuildValue("(in)", problem, k);
            goto done;
        }
    }
    result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t j = 0; j < got; j++)
        PyBuffer_Release(&views[j]);
    PyBuffer_Release(&ev);
no_ends:
    PyBuffer_Release(&sv);
no_starts:
    PyBuffer_Release(&lv);
no_local:
    PyBuffer_Release(&wv);
no_which:
    PyMem_Free(views);
    PyMem_Free(ends);
    release3(held);
    return result;
}
