/* Reader: one record by its global number in one call, the compiled fast path of ds[i].
 *
 * A Reader holds, for each shard bound to it, what a read of a record needs: its data (a
 * memory map, or an open file read with preadv), its sidecar offsets and indexed end, and
 * its payload checksums (OFRecord sidecars that have them). get(i) locates the record
 * through the cumulative counts, looks up its span, reads it, checks it (the stored length
 * against the span its index gives it; TFRecord CRCs and sidecar checksums when asked) and
 * returns its payload as bytes.
 *
 * It never raises for a record: anything it cannot serve (an index of another type or out
 * of range, a shard not bound yet, a span past the data, a record that fails a check, a
 * short read) gives None, and the caller reads the record the ordinary way, which raises
 * the precise error (and binds the shard once it has read from it). So the errors are
 * built in one place, in Python, and the fast path only ever returns a record that passed
 * every check.
 *
 * Bound shards hold their maps and file handles: close() lets go of them all (the storage
 * calls it when it is closed), as does a fork (a child opens and checks its own files), and
 * at most `max_bound` shards are held at once (each map holds a file descriptor);
 * release_held(j) lets go of one (the process's count of open files asks for it). */
#include "native.h"
#include "framing.h"
#include "hwcrc.h"

#if defined(__unix__) || defined(__APPLE__)
#include <errno.h>
#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>
#define READER_PREADV 1
#else
#define READER_PREADV 0
#endif

/* Payloads of at least this many bytes are read from files with the GIL released. */
#define READER_NOGIL_BYTES ((int64_t)64 << 10)
/* Larger payloads are left to the ordinary path, which checks the file's size first. */
#define READER_MAX_PAYLOAD ((int64_t)64 << 20)

/* Forks of this process so far: a Reader made before a fork serves nothing after it. */
static volatile long forks = 0;
static void reader_forked(void) { forks++; }

typedef struct {
    PyObject *owner;  /* the map, or the file's handle object; NULL while unbound */
    Py_buffer data;   /* mapped shards: the map's bytes (data.obj NULL for files) */
    int fd;           /* files: the descriptor, read with preadv (-1 for maps) */
    int64_t file_size;  /* files: the size seen when bound (a span past it: not served) */
    Py_buffer offsets;  /* the sidecar's record offsets (u64) */
    Py_buffer sums;     /* its payload CRC32Cs (u32), or sums.obj NULL */
    int64_t indexed_end;
} Slot;

typedef struct {
    PyObject_HEAD
    int64_t *cumulative;  /* records up to and including shard k */
    Py_ssize_t shards, bound, max_bound;
    Slot *slots;
    Py_ssize_t header, footer;
    int tf_crcs, payload_sums;
    PyObject *crc_fn, *memo;
    long forks;
    PyObject *weakrefs;
} ReaderObject;

/* Release what a slot held (a copy taken out of the Reader: releasing a buffer or the
 * owner can run arbitrary code, e.g. a finalizer, and another thread can take the GIL
 * meanwhile; it must never see a slot half released). */
static void release_slot(Slot *held) {
    if (held->data.obj != NULL)
        PyBuffer_Release(&held->data);
    PyBuffer_Release(&held->offsets);
    if (held->sums.obj != NULL)
        PyBuffer_Release(&held->sums);
    Py_XDECREF(held->owner);
}

/* Let go of a slot's map or handle; 1 when it was bound. The slot is empty before anything
 * it held is released. */
static int unbind(Slot *s) {
    if (s->owner == NULL)
        return 0;
    Slot held = *s;
    memset(s, 0, sizeof *s);
    s->fd = -1;
    release_slot(&held);
    return 1;
}

static void unbind_all(ReaderObject *self) {
    for (Py_ssize_t j = 0; self->slots != NULL && j < self->shards; j++)
        self->bound -= unbind(&self->slots[j]);  /* (another thread may bind meanwhile) */
}

static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    ReaderObject *self = (ReaderObject *)type->tp_alloc(type, 0);
    return (PyObject *)self;
}

/* The cumulative counts (an int64 array that must not decrease) copied, and an empty slot
 * per shard: 0, or -1 with an exception set (nothing kept). */
static int take_shards(ReaderObject *self, PyObject *cum_obj) {
    Py_buffer cv;
    if (get_i64(cum_obj, &cv, "cumulative") < 0)
        return -1;
    Py_ssize_t n = cv.shape[0];
    const int64_t *c = (const int64_t *)cv.buf;
    for (Py_ssize_t j = 0; j < n; j++)
        if (c[j] < (j ? c[j - 1] : 0)) {
            PyBuffer_Release(&cv);
            PyErr_SetString(PyExc_ValueError, "cumulative counts must not decrease");
            return -1;
        }
    self->cumulative = PyMem_Malloc((n ? n : 1) * sizeof(int64_t));
    self->slots = PyMem_Calloc(n ? n : 1, sizeof(Slot));
    if (self->cumulative == NULL || self->slots == NULL) {
        PyBuffer_Release(&cv);
        PyMem_Free(self->cumulative);
        PyMem_Free(self->slots);
        self->cumulative = NULL;
        self->slots = NULL;
        PyErr_NoMemory();
        return -1;
    }
    if (n)
        memcpy(self->cumulative, c, n * sizeof(int64_t));
    PyBuffer_Release(&cv);
    for (Py_ssize_t j = 0; j < n; j++)
        self->slots[j].fd = -1;
    self->shards = n;
    return 0;
}

static int reader_init(ReaderObject *self, PyObject *args, PyObject *kw) {
    PyObject *cum_obj, *crc_fn, *memo;
    Py_ssize_t header, footer, max_bound;
    int tf_crcs, payload_sums;
    if (self->slots != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Reader is initialized already");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "OnnppOO!n:Reader", &cum_obj, &header, &footer, &tf_crcs,
                          &payload_sums, &crc_fn, &PyDict_Type, &memo, &max_bound))
        return -1;
    if (framing_refused(header, footer, tf_crcs, NULL) < 0)
        return -1;
    if (max_bound < 1) {
        PyErr_SetString(PyExc_ValueError, "max_bound must be >= 1");
        return -1;
    }
    if (take_shards(self, cum_obj) < 0)
        return -1;
    self->max_bound = max_bound;
    self->header = header;
    self->footer = footer;
    self->tf_crcs = tf_crcs;
    self->payload_sums = payload_sums;
    Py_INCREF(crc_fn);
    Py_INCREF(memo);
    self->crc_fn = crc_fn;
    self->memo = memo;
    self->forks = forks;
    return 0;
}

static void reader_dealloc(ReaderObject *self) {
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    unbind_all(self);
    PyMem_Free(self->slots);
    PyMem_Free(self->cumulative);
    Py_XDECREF(self->crc_fn);
    Py_XDECREF(self->memo);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The checks of a payload read into `payload` with its framing `head` (header bytes) and
 * `foot` (footer bytes): 1 when it passes, 0 when it does not, -1 with an exception set.
 * `sum` is the payload's CRC32C from the sidecar, or -1 for none. */
static int payload_ok(ReaderObject *self, const unsigned char *head, PyObject *payload,
                      const unsigned char *foot, int64_t sum) {
    int64_t size = PyBytes_GET_SIZE(payload);
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(payload);
    if (load_le(head, 8) != (uint64_t)size)
        return 0;
    if (!self->tf_crcs && sum < 0)
        return 1;
    if (hw_crc_on && size < HW_CRC_MAX) {  /* small: the instruction, no Python call (the
                                             * package's interleaved loop wins above) */
        uint32_t crc = hw_crc32c(data, (size_t)size);
        if (sum >= 0)
            return crc == (uint32_t)sum;
        return (uint32_t)load_le(head + 8, 4) == hw_mask(hw_crc32c(head, 8)) &&
               (uint32_t)load_le(foot, 4) == hw_mask(crc);
    }
    if (sum >= 0) {  /* without the instruction: the crc32c package's function */
        uint32_t crc;
        if (package_crc(self->crc_fn, payload, &crc) < 0)
            return -1;
        return crc == (uint32_t)sum;
    }
    int64_t length_crc = masked_length_crc(self->crc_fn, self->memo, head, size);
    if (length_crc < 0)
        return -1;
    int64_t data_crc = masked_crc_of(self->crc_fn, payload);
    if (data_crc < 0)
        return -1;
    return (uint32_t)load_le(head + 8, 4) == (uint32_t)length_crc &&
           (uint32_t)load_le(foot, 4) == (uint32_t)data_crc;
}

/* The payload of the record at [start, end) of a mapped shard (inside its map), or None;
 * copied out of the map in one guarded call (StaleIndexError when its pages are gone: the
 * file shrank), then checked in the copies. */
static PyObject *from_map(ReaderObject *self, const Slot *s, int64_t start, int64_t end,
                          int64_t sum) {
    const unsigned char *p = (const unsigned char *)s->data.buf + start;
    int64_t size = end - start - self->header - self->footer;
    PyObject *owner = s->owner;  /* keeps the map alive should the slot be let go of */
    Py_INCREF(owner);
    PyObject *payload = PyBytes_FromStringAndSize(NULL, size);
    unsigned char head[12], foot[4];
    if (payload != NULL &&
        guard_copy3(head, (unsigned char *)PyBytes_AS_STRING(payload), foot, p,
                    (size_t)self->header, (size_t)size, (size_t)self->footer) < 0) {
        Py_CLEAR(payload);
        map_fault(owner);
    }
    Py_DECREF(owner);
    if (payload == NULL)
        return NULL;
    int ok = payload_ok(self, head, payload, foot, sum);
    if (ok > 0)
        return payload;
    Py_DECREF(payload);
    if (ok < 0)
        return NULL;
    Py_RETURN_NONE;
}

#if READER_PREADV
/* The framed record at [start, end) of a file, read with one preadv into its payload's own
 * bytes object (header and footer beside it), or None (a short read: the file shrank). */
static PyObject *from_file(ReaderObject *self, const Slot *s, int64_t start, int64_t end,
                           int64_t sum) {
    int64_t size = end - start - self->header - self->footer;
    if (size > READER_MAX_PAYLOAD)
        Py_RETURN_NONE;
    PyObject *payload = PyBytes_FromStringAndSize(NULL, size);
    if (payload == NULL)
        return NULL;
    unsigned char head[12], foot[4];
    struct iovec iov[3] = {{head, (size_t)self->header},
                           {PyBytes_AS_STRING(payload), (size_t)size},
                           {foot, (size_t)self->footer}};
    int parts = self->footer ? 3 : 2;
    ssize_t got;
    if (size >= READER_NOGIL_BYTES) {
        PyObject *owner = s->owner;  /* keeps the descriptor open while the GIL is away */
        int fd = s->fd;
        Py_INCREF(owner);
        Py_BEGIN_ALLOW_THREADS
        do
            got = preadv(fd, iov, parts, (off_t)start);
        while (got < 0 && errno == EINTR);
        Py_END_ALLOW_THREADS
        Py_DECREF(owner);
    } else {
        do
            got = preadv(s->fd, iov, parts, (off_t)start);
        while (got < 0 && errno == EINTR);
    }
    int ok = got == (ssize_t)(end - start) ? payload_ok(self, head, payload, foot, sum) : 0;
    if (ok > 0)
        return payload;
    Py_DECREF(payload);
    if (ok < 0)
        return NULL;
    Py_RETURN_NONE;
}
#endif

static const char get_doc[] =
"get(i) -> bytes | None\n\n"
"The checked payload of record i (an int; negative counts from the end), or None when this\n"
"Reader cannot serve it (see the type's notes): the caller then reads it otherwise.";

/* The record number key asks for, in [0, n) (negative counts from the end), or -1 when it
 * is none this Reader serves (another type, out of range, a Reader not initialized or made
 * before a fork). */
static inline int64_t record_number(const ReaderObject *self, PyObject *key) {
    if (!PyLong_CheckExact(key) || self->slots == NULL || self->forks != forks ||
        self->shards == 0)
        return -1;
    int overflow;
    long long i = PyLong_AsLongLongAndOverflow(key, &overflow);
    if (overflow || (i == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    int64_t n = self->cumulative[self->shards - 1];
    if (i < 0)
        i += n;
    return i < 0 || i >= n ? -1 : i;
}

/* The shard of record i (in [0, n)): the first whose cumulative count passes i. */
static inline Py_ssize_t shard_of(const ReaderObject *self, int64_t i) {
    Py_ssize_t lo = 0, hi = self->shards - 1;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (self->cumulative[mid] > i)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Record `local` of the bound shard s: its span and its payload sum from the sidecar (-1:
 * none); 0, or -1 when this Reader cannot serve it. */
static inline int find_record(const ReaderObject *self, const Slot *s, int64_t local,
                              int64_t *start, int64_t *end, int64_t *sum) {
    Py_ssize_t len = s->data.obj != NULL ? s->data.len : (Py_ssize_t)s->file_size;
    if (span_of(&s->offsets, s->indexed_end, local, self->header + self->footer, len, start,
                end) != 0) {
        PyErr_Clear();  /* an index past the offsets: the ordinary path says what is wrong */
        return -1;
    }
    *sum = -1;
    if (s->sums.obj != NULL) {
        if (local >= s->sums.shape[0])
            return -1;
        *sum = ((const uint32_t *)s->sums.buf)[local];
    }
    return 0;
}

static PyObject *reader_get(ReaderObject *self, PyObject *key) {
    int64_t i = record_number(self, key);
    if (i < 0)
        Py_RETURN_NONE;
    Py_ssize_t j = shard_of(self, i);
    const Slot *s = &self->slots[j];
    if (s->owner == NULL)
        Py_RETURN_NONE;
    int64_t start, end, sum;
    if (find_record(self, s, i - (j ? self->cumulative[j - 1] : 0), &start, &end, &sum) < 0)
        Py_RETURN_NONE;
    if (s->data.obj != NULL)
        return from_map(self, s, start, end, sum);
#if READER_PREADV
    return from_file(self, s, start, end, sum);
#else
    Py_RETURN_NONE;
#endif
}

/* Whether bind()'s arguments are refused (ValueError or IndexError set). */
static int bind_refused(const ReaderObject *self, Py_ssize_t j, int64_t indexed_end,
                        PyObject *sums) {
    if (self->slots == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Reader is not initialized");
        return 1;
    }
    if (j < 0 || j >= self->shards) {
        PyErr_Format(PyExc_IndexError, "shard %zd out of range", j);
        return 1;
    }
    if (indexed_end < 0) {
        PyErr_SetString(PyExc_ValueError, "indexed_end must be >= 0");
        return 1;
    }
    if (sums != Py_None && !self->payload_sums) {
        PyErr_SetString(PyExc_ValueError, "sums given to a Reader that checks none");
        return 1;
    }
    return 0;
}

/* Whether the slot holds these already. */
static int bound_to(const Slot *held, PyObject *owner, int fd, int64_t file_size,
                    PyObject *offsets, int64_t indexed_end, PyObject *sums) {
    PyObject *held_sums = held->sums.obj != NULL ? held->sums.obj : Py_None;
    return held->owner == owner && held->offsets.obj == offsets && held->fd == fd &&
           held->file_size == file_size && held->indexed_end == indexed_end &&
           held_sums == sums;
}

/* A slot's buffers acquired (its map's data when fd < 0, its offsets, its sums unless None):
 * 0, or -1 with an exception set and nothing held. */
static int fill_slot(Slot *fresh, PyObject *owner, PyObject *offsets, PyObject *sums) {
    if (fresh->fd < 0 && PyObject_GetBuffer(owner, &fresh->data, PyBUF_SIMPLE) < 0)
        return -1;
    if (get_u64(offsets, &fresh->offsets) < 0)
        goto fail_data;
    if (sums == Py_None)
        return 0;
    if (PyObject_GetBuffer(sums, &fresh->sums, PyBUF_ND | PyBUF_FORMAT) < 0)
        goto fail_offsets;
    if (fresh->sums.itemsize != 4 || fresh->sums.ndim != 1) {
        PyBuffer_Release(&fresh->sums);
        PyErr_SetString(PyExc_TypeError, "sums must be a 1-d uint32 array");
        goto fail_offsets;
    }
    return 0;
fail_offsets:
    PyBuffer_Release(&fresh->offsets);
fail_data:
    if (fresh->data.obj != NULL)
        PyBuffer_Release(&fresh->data);
    return -1;
}

/* Slot j takes `fresh` (and a reference to its owner), swapped in whole, then what it held
 * is released; at most max_bound shards stay bound. */
static void swap_in(ReaderObject *self, Py_ssize_t j, Slot *fresh, PyObject *owner) {
    if (self->slots[j].owner == NULL && self->bound >= self->max_bound)
        unbind_all(self);  /* (may run code: done before the slot is filled) */
    Py_INCREF(owner);
    fresh->owner = owner;
    Slot old = self->slots[j];
    self->slots[j] = *fresh;
    if (old.owner != NULL)
        release_slot(&old);
    else
        self->bound++;
}

/* Bind shard j: its data (a map to hold as a buffer, or a file handle and its descriptor),
 * offsets, indexed end and sums. True when it was not bound to these already. */
static PyObject *bind(ReaderObject *self, Py_ssize_t j, PyObject *owner, int fd,
                      int64_t file_size, PyObject *offsets, int64_t indexed_end,
                      PyObject *sums) {
    if (bind_refused(self, j, indexed_end, sums))
        return NULL;
    if (self->forks != forks) {  /* a child: what was bound is the parent's */
        unbind_all(self);
        self->forks = forks;
    }
    if (fd < 0 && guard_ensure() != 0)  /* maps are read in guarded calls (guard.c) */
        return PyErr_SetFromErrno(PyExc_OSError);
    if (bound_to(&self->slots[j], owner, fd, file_size, offsets, indexed_end, sums))
        Py_RETURN_FALSE;  /* bound already */
    Slot fresh = {0};
    fresh.fd = fd;
    fresh.file_size = file_size;
    fresh.indexed_end = indexed_end;
    if (fill_slot(&fresh, owner, offsets, sums) < 0)
        return NULL;
    swap_in(self, j, &fresh, owner);
    Py_RETURN_TRUE;
}

static const char bind_map_doc[] =
"bind_map(shard, buf, offsets, indexed_end, sums) -> bool\n\n"
"Serve shard `shard` from buf (its data file's memory map, held until close()), its sidecar\n"
"offsets (uint64 array) and indexed end, and sums (its payload CRC32Cs, a uint32 array, or\n"
"None). True when the shard was not bound to these already.";

static PyObject *reader_bind_map(ReaderObject *self, PyObject *args) {
    Py_ssize_t j;
    PyObject *buf, *offsets, *sums;
    long long indexed_end;
    if (!PyArg_ParseTuple(args, "nOOLO:bind_map", &j, &buf, &offsets, &indexed_end, &sums))
        return NULL;
    return bind(self, j, buf, -1, 0, offsets, indexed_end, sums);
}

static const char bind_file_doc[] =
"bind_file(shard, handle, fd, size, offsets, indexed_end, sums) -> bool\n\n"
"Serve shard `shard` by reading descriptor fd (held open by `handle`, which is kept until\n"
"close()) with preadv, up to `size` bytes (the file's size: a record past it is left to the\n"
"ordinary path); the rest as bind_map(). Raises OSError where preadv does not exist (see\n"
"reads_files).";

static PyObject *reader_bind_file(ReaderObject *self, PyObject *args) {
    Py_ssize_t j;
    PyObject *handle, *offsets, *sums;
    int fd;
    long long size, indexed_end;
    if (!PyArg_ParseTuple(args, "nOiLOLO:bind_file", &j, &handle, &fd, &size, &offsets,
                          &indexed_end, &sums))
        return NULL;
    if (!READER_PREADV) {
        PyErr_SetString(PyExc_OSError, "no preadv on this platform");
        return NULL;
    }
    if (fd < 0 || size < 0) {
        PyErr_SetString(PyExc_ValueError, "fd and size must be >= 0");
        return NULL;
    }
    return bind(self, j, handle, fd, size, offsets, indexed_end, sums);
}

static const char close_doc[] = "close()\n\nLet go of every bound shard's map and handle.";

static PyObject *reader_close(ReaderObject *self, PyObject *unused) {
    unbind_all(self);
    Py_RETURN_NONE;
}

static const char release_held_doc[] =
"release_held(shard)\n\n"
"Let go of shard `shard`'s map or handle and offsets (the process's count of open files asks\n"
"for it: ofindex.storage.openfiles); it is bound again once read the ordinary way. Anything\n"
"else than a bound shard's number is ignored.";

static PyObject *reader_release_held(ReaderObject *self, PyObject *key) {
    if (!PyLong_Check(key))
        Py_RETURN_NONE;
    Py_ssize_t j = PyLong_AsSsize_t(key);
    if (j == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (self->slots != NULL && self->forks == forks && j >= 0 && j < self->shards)
        self->bound -= unbind(&self->slots[j]);
    Py_RETURN_NONE;
}

static PyObject *reader_bound(ReaderObject *self, void *closure) {
    return PyLong_FromSsize_t(self->forks == forks ? self->bound : 0);
}

static PyMethodDef reader_methods[] = {
    {"get", (PyCFunction)reader_get, METH_O, get_doc},
    {"bind_map", (PyCFunction)reader_bind_map, METH_VARARGS, bind_map_doc},
    {"bind_file", (PyCFunction)reader_bind_file, METH_VARARGS, bind_file_doc},
    {"close", (PyCFunction)reader_close, METH_NOARGS, close_doc},
    {"release_held", (PyCFunction)reader_release_held, METH_O, release_held_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef reader_getset[] = {
    {"bound", (getter)reader_bound, NULL, "Shards bound now (in this process).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ofindex._native.Reader",
    .tp_basicsize = sizeof(ReaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Reader(cumulative, header_size, footer_size, tfrecord_crcs, payload_sums,\n"
              "       crc32c, length_crcs, max_bound)\n\n"
              "Records by their global number, read and checked in one call (get()), from the\n"
              "shards bound to it (bind_map(), bind_file()). cumulative: int64 array, the\n"
              "records up to and including each shard. tfrecord_crcs: check TFRecord CRCs;\n"
              "payload_sums: check payloads against the sums bound with their shard.",
    .tp_new = reader_new,
    .tp_init = (initproc)reader_init,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_methods = reader_methods,
    .tp_getset = reader_getset,
    .tp_weaklistoffset = offsetof(ReaderObject, weakrefs),
};

int reader_module_init(PyObject *module) {
#if READER_PREADV
    if (pthread_atfork(NULL, NULL, reader_forked) != 0) {
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        return -1;
    }
#endif
    if (PyModule_AddIntConstant(module, "reads_files", READER_PREADV) < 0)
        return -1;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(module, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        return -1;
    }
    return 0;
}
