/* snapshot.c: the items of a caller's list held as they are when a call starts.
 *
 * Python code can run in the middle of a compiled call: an item's __index__, a buffer's
 * export (a class's __buffer__ from Python 3.12), a finalizer or gc callback run by a
 * collection that allocating an object starts (up to Python 3.11), or another thread while
 * the GIL is released. That code can clear, shrink or refill a list the call was given: a
 * length read before it and an item read after it would be out of bounds, or an object
 * already freed. A call reads a list's items in one of two ways. From a snapshot taken here
 * before any such code runs: a tuple, which no Python code can change, holding a reference
 * to each item for as long as the call runs. Or, where the snapshot's cost would show,
 * straight from the list after the last point where Python code can run, with no such point
 * (not even an object's allocation) until the last use, referencing only what must outlive
 * a release of the GIL: layout.c's small rows (a snapshot of 1,000 records cost a third of
 * a 5 us call) and fill()'s outs (1.7 us of a 6.6 us call; 0.7 us referencing the bytes
 * objects filled). */
#include "native.h"

PyObject *snapshot_list(PyObject *list, const char *what) {
    Py_ssize_t n = PyList_GET_SIZE(list);
    /* allocated before the items are read: the allocation can start a collection */
    PyObject *held = PyTuple_New(n);
    if (held == NULL)
        return NULL;
    if (PyList_GET_SIZE(list) < n) {
        Py_DECREF(held);
        PyErr_Format(PyExc_ValueError, "%s changed during the call (it holds %zd items, "
                     "%zd were asked for)", what, PyList_GET_SIZE(list), n);
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++)
        PyTuple_SET_ITEM(held, k, Py_NewRef(PyList_GET_ITEM(list, k)));
    return held;
}

int snapshot_unchanged(PyObject *list, PyObject *held, const char *what) {
    Py_ssize_t n = PyTuple_GET_SIZE(held);
    int same = PyList_GET_SIZE(list) == n;
    for (Py_ssize_t k = 0; same && k < n; k++)
        same = PyList_GET_ITEM(list, k) == PyTuple_GET_ITEM(held, k);
    if (same)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s changed during the call (Python code it ran, such as "
                 "an __index__ or a buffer's export, replaced or removed its items): its "
                 "results would not reach it; pass a list that nothing changes", what);
    return -1;
}

int snapshot3(PyObject *a, PyObject *b, PyObject *c, PyObject *out[3], const char *what[3]) {
    out[0] = snapshot_list(a, what[0]);
    out[1] = out[0] ? snapshot_list(b, what[1]) : NULL;
    out[2] = out[1] ? snapshot_list(c, what[2]) : NULL;
    if (out[2] == NULL) {
        Py_XDECREF(out[0]);
        Py_XDECREF(out[1]);
        return -1;
    }
    return 0;
}

void release3(PyObject *held[3]) {
    for (int i = 0; i < 3; i++)
        Py_XDECREF(held[i]);
}
