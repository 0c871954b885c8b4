/* A buffer exporter that runs Python code when its buffer is asked for, as a class with
 * __buffer__ does from Python 3.12 (tests/native/test_native_mutation.py; built by the test, the
 * interpreter there may be older).
 *
 * Hooked(data, hook): asking for its buffer calls hook() first, then exports data's buffer
 * (the view's owner is data). The object holds itself while hook runs, so that code which
 * drops the last other reference to it (clearing the list it came from) cannot free it
 * here: any crash is in the code that asked for the buffer. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyObject_HEAD
    PyObject *data, *hook;
} Hooked;

static int hooked_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Hooked *hooked = (Hooked *)self;
    Py_INCREF(self);
    PyObject *got = PyObject_CallNoArgs(hooked->hook);
    int rc = -1;
    if (got != NULL) {
        Py_DECREF(got);
        rc = PyObject_GetBuffer(hooked->data, view, flags);
    }
    Py_DECREF(self);
    return rc;
}

static PyObject *hooked_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *data, *hook;
    if (!PyArg_ParseTuple(args, "OO:Hooked", &data, &hook))
        return NULL;
    Hooked *self = (Hooked *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->data = Py_NewRef(data);
        self->hook = Py_NewRef(hook);
    }
    return (PyObject *)self;
}

static void hooked_dealloc(PyObject *self) {
    Hooked *hooked = (Hooked *)self;
    Py_XDECREF(hooked->data);
    Py_XDECREF(hooked->hook);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs hooked_as_buffer = {hooked_getbuffer, NULL};

static PyTypeObject HookedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hooked_buffer.Hooked",
    .tp_basicsize = sizeof(Hooked),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Hooked(data, hook): data's buffer, exported after hook() runs.",
    .tp_new = hooked_new,
    .tp_dealloc = hooked_dealloc,
    .tp_as_buffer = &hooked_as_buffer,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "hooked_buffer", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_hooked_buffer(void) {
    if (PyType_Ready(&HookedType) < 0)
        return NULL;
    PyObject *mod = PyModule_Create(&module);
    if (mod != NULL && PyModule_AddObjectRef(mod, "Hooked", (PyObject *)&HookedType) < 0)
        Py_CLEAR(mod);
    return mod;
}
