/* Checker: the TFRecords of a run checked on a compiled thread, ahead of the thread that
 * makes their objects.
 *
 * iter_batches reads a run of consecutive records batch by batch. Making a batch's bytes
 * objects needs the GIL; checking its CRCs does not. With a core to spare, a Checker checks
 * the run from its start, at most up to the record its reader allows (the batch being made
 * and the next one), so that a batch's checks are usually done by the time its objects are
 * made, and its records are in the shared cache when they are copied. The reader waits for
 * the checks of a batch before it returns the batch: a bad record is still reported at its
 * own batch, after the batches before it. The run is checked in chunks that whoever is free
 * claims in order: when the thread falls behind (the other core is busy), the reader checks
 * the next chunks itself rather than wait. */
#include "native.h"
#include "hwcrc.h"

#include "threads.h"

/* Records in a chunk unless told: what one thread claims and checks at a time (a bound on
 * how long a cancel waits, too). Runs of big records take fewer (the caller's `chunk`), so
 * that the thread stays just ahead of the reader, its records still in the shared cache. */
#define CHECK_CHUNK 256

/* A chunk's result: not checked yet (unclaimed, or being checked), or all whole. Otherwise
 * the result is the position of the chunk's first failing record. */
#define CHUNK_PENDING (-2)
#define CHUNK_OK (-1)

typedef struct {
    PyObject_HEAD
    Py_buffer buf, sv, ev;
    Py_ssize_t header, footer, n, chunks, chunk;  /* chunk: records per chunk */
    thread_t thread;
    int running;  /* the thread was started (and is joined at dealloc) */
    long pid;     /* the process that started it: a forked child checks inline instead */
    mutex_t mu;
    cond_t cv;
    /* under mu: */
    Py_ssize_t *result;     /* per chunk: CHUNK_PENDING, CHUNK_OK or its first bad record */
    Py_ssize_t next;        /* the first chunk nobody has claimed (claimed in order) */
    Py_ssize_t done;        /* chunks [0, done) are all whole */
    Py_ssize_t bad_chunk;   /* the first chunk found bad, or -1: none after it is claimed */
    Py_ssize_t allowed;     /* the thread claims chunks that start below this record */
    int idle, waiters, cancel, finished;  /* waiters: readers waiting for a claimed chunk */
    int faulted;  /* a chunk touched pages of the map that are gone (the file shrank) */
    Py_ssize_t inline_done;  /* without a thread (under the GIL): records [0, it) passed */
} CheckerObject;

/* The records [lo, hi) of the run checked: -1, the first failing one, or GUARD_FAULT (the
 * map's pages are gone). No GIL needed. */
static Py_ssize_t check_range(const CheckerObject *c, Py_ssize_t lo, Py_ssize_t hi) {
    int64_t total;
    Py_ssize_t k = check_all((const unsigned char *)c->buf.buf, c->buf.len,
                             (const int64_t *)c->sv.buf + lo, (const int64_t *)c->ev.buf + lo,
                             hi - lo, c->header, c->footer, 1, &total);
    return k == GUARD_FAULT ? k : k < 0 ? -1 : lo + k;
}

/* Whether chunk `next` may be claimed: it exists, and no chunk before it was found bad. */
static int claimable(const CheckerObject *c) {
    return c->next < c->chunks && (c->bad_chunk < 0 || c->next <= c->bad_chunk);
}

/* Claim the next chunk, check it without the lock, record its result and wake the readers
 * that wait. Called with mu held; returns with it held. */
static void check_next(CheckerObject *c) {
    Py_ssize_t k = c->next++;
    Py_ssize_t lo = k * c->chunk, hi = c->n - lo > c->chunk ? lo + c->chunk : c->n;
    mutex_unlock(&c->mu);
    Py_ssize_t bad = check_range(c, lo, hi);
    mutex_lock(&c->mu);
    if (bad == GUARD_FAULT) {  /* the chunk fails at its first record, and wait() raises */
        c->faulted = 1;
        bad = lo;
    }
    c->result[k] = bad;
    if (bad >= 0 && (c->bad_chunk < 0 || k < c->bad_chunk))
        c->bad_chunk = k;
    while (c->done < c->chunks && c->result[c->done] == CHUNK_OK)
        c->done++;
    if (c->waiters)  /* readers may wait for this chunk (on the thread, or another reader) */
        cond_broadcast(&c->cv);
}

static void check_loop(void *arg) {
    CheckerObject *c = (CheckerObject *)arg;
    mutex_lock(&c->mu);
    while (!c->cancel && claimable(c)) {
        if (c->next * c->chunk >= c->allowed) {
            c->idle = 1;
            cond_wait(&c->cv, &c->mu);
            c->idle = 0;
            continue;
        }
        check_next(c);
    }
    c->finished = 1;
    cond_broadcast(&c->cv);
    mutex_unlock(&c->mu);
}

static int checker_init(CheckerObject *self, PyObject *args, PyObject *kwds) {
    PyObject *buf_obj, *starts_obj, *ends_obj;
    if (self->n >= 0) {
        PyErr_SetString(PyExc_RuntimeError, "Checker is already initialized");
        return -1;
    }
    self->chunk = CHECK_CHUNK;
    if (!PyArg_ParseTuple(args, "OOOnn|n:Checker", &buf_obj, &starts_obj, &ends_obj,
                          &self->header, &self->footer, &self->chunk))
        return -1;
    if (self->chunk < 1 || self->chunk > CHECK_CHUNK) {
        PyErr_SetString(PyExc_ValueError, "chunk must be in [1, 256]");
        return -1;
    }
    if (self->header != 12 || self->footer != 4) {
        PyErr_SetString(PyExc_ValueError, "Checker checks TFRecords only (header 12, "
                        "footer 4)");
        return -1;
    }
    if (!hw_crc_on) {
        PyErr_SetString(PyExc_ValueError, "Checker needs the CRC32C instruction (see "
                        "hw_crc())");
        return -1;
    }
    if (PyObject_GetBuffer(buf_obj, &self->buf, PyBUF_SIMPLE) < 0)
        return -1;
    if (get_i64(starts_obj, &self->sv, "starts") < 0)
        goto no_starts;
    if (get_i64(ends_obj, &self->ev, "ends") < 0)
        goto no_ends;
    if (self->ev.shape[0] != self->sv.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        goto bad_shape;
    }
    self->n = self->sv.shape[0];
    self->chunks = (self->n + self->chunk - 1) / self->chunk;
    self->result = PyMem_RawMalloc(sizeof(Py_ssize_t) * (size_t)(self->chunks + 1));
    if (self->result == NULL) {
        self->n = -1;
        PyErr_NoMemory();
        goto bad_shape;
    }
    for (Py_ssize_t k = 0; k < self->chunks; k++)
        self->result[k] = CHUNK_PENDING;
    if (guard_ensure() != 0) {  /* the records are read in guarded calls (guard.c) */
        PyMem_RawFree(self->result);
        self->n = -1;
        PyErr_SetFromErrno(PyExc_OSError);
        goto bad_shape;
    }
    self->pid = process_id();
    self->running = thread_start(&self->thread, check_loop, self) == 0;
    return 0;  /* without a thread, wait() checks inline */
bad_shape:
    PyBuffer_Release(&self->ev);
no_ends:
    PyBuffer_Release(&self->sv);
no_starts:
    PyBuffer_Release(&self->buf);
    return -1;
}

static PyObject *checker_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    CheckerObject *self = (CheckerObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->n = -1;  /* not initialized: nothing to release */
    self->bad_chunk = -1;
    mutex_init(&self->mu);
    cond_init(&self->cv);
    return (PyObject *)self;
}

static void checker_dealloc(CheckerObject *self) {
    if (self->running && self->pid == process_id()) {
        mutex_lock(&self->mu);
        self->cancel = 1;
        cond_broadcast(&self->cv);
        mutex_unlock(&self->mu);
        Py_BEGIN_ALLOW_THREADS
        thread_join(&self->thread);
        Py_END_ALLOW_THREADS
    }
    if (self->n >= 0) {
        PyMem_RawFree(self->result);
        PyBuffer_Release(&self->ev);
        PyBuffer_Release(&self->sv);
        PyBuffer_Release(&self->buf);
    }
    if (self->pid == process_id() || !self->running) {  /* a fork's copy may be held locked */
        cond_destroy(&self->cv);
        mutex_destroy(&self->mu);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static const char wait_doc[] =
"wait(upto, ahead) -> int\n\n"
"Let the thread check up to record ahead (it goes no further, but for the rest of its\n"
"chunk, until told), until records [0, upto) are checked (chunks the thread has not reached\n"
"are checked in this thread meanwhile), and return -1 when they all pass, or the first\n"
"failing one. The records are numbered as in starts and ends; upto and ahead are clamped\n"
"to [0, n]. Raises StaleIndexError when buf is a memory map whose file shrank.";

/* wait() without a thread here (none started, or a forked child's copy): records [0, upto)
 * checked in this thread, from where the last inline wait stopped. */
static PyObject *wait_inline(CheckerObject *self, Py_ssize_t upto) {
    Py_ssize_t from = self->inline_done < upto ? self->inline_done : upto, bad;
    Py_BEGIN_ALLOW_THREADS
    bad = check_range(self, from, upto);
    Py_END_ALLOW_THREADS
    if (bad == GUARD_FAULT)
        return map_fault(self->buf.obj);
    if (bad < 0)
        self->inline_done = upto > self->inline_done ? upto : self->inline_done;
    return PyLong_FromSsize_t(bad);
}

/* Let the thread check up to record `ahead`, waking it when it idles. Called with mu held. */
static void let_ahead(CheckerObject *self, Py_ssize_t ahead) {
    if (ahead > self->allowed) {
        self->allowed = ahead;
        if (self->idle)
            cond_broadcast(&self->cv);
    }
}

/* Wait until records [0, upto) are checked, checking the chunks the thread has not reached
 * in this one: -1 when they all pass, or the first failing one. Called with mu held, without
 * the GIL; returns with mu held. */
static Py_ssize_t wait_checked(CheckerObject *self, Py_ssize_t upto) {
    for (;;) {
        if (self->done * self->chunk >= upto)  /* every record before upto is whole */
            return -1;
        Py_ssize_t first = self->result[self->done];
        if (first >= 0)  /* the first chunk not whole: its chunks before are */
            return first < upto ? first : -1;
        if (claimable(self) && self->next * self->chunk < upto) {
            check_next(self);  /* the thread is behind: this one checks the next chunk */
        } else {  /* the chunk asked for is being checked on the thread */
            self->waiters++;
            cond_wait(&self->cv, &self->mu);
            self->waiters--;
        }
    }
}

static PyObject *checker_wait(CheckerObject *self, PyObject *args) {
    Py_ssize_t upto, ahead;
    if (!PyArg_ParseTuple(args, "nn:wait", &upto, &ahead))
        return NULL;
    if (self->n < 0) {
        PyErr_SetString(PyExc_RuntimeError, "Checker is not initialized");
        return NULL;
    }
    upto = upto < 0 ? 0 : upto > self->n ? self->n : upto;
    ahead = ahead < upto ? upto : ahead > self->n ? self->n : ahead;
    if (!self->running || self->pid != process_id())  /* no thread here: check inline */
        return wait_inline(self, upto);
    Py_ssize_t bad;
    int faulted;
    Py_BEGIN_ALLOW_THREADS
    mutex_lock(&self->mu);
    let_ahead(self, ahead);
    bad = wait_checked(self, upto);
    faulted = self->faulted;
    mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    if (bad >= 0 && faulted)
        return map_fault(self->buf.obj);
    return PyLong_FromSsize_t(bad);
}

static PyMethodDef checker_methods[] = {
    {"wait", (PyCFunction)checker_wait, METH_VARARGS, wait_doc},
    {NULL, NULL, 0, NULL},
};

PyTypeObject CheckerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ofindex._native.Checker",
    .tp_basicsize = sizeof(CheckerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Checker(buf, starts, ends, header_size, footer_size, chunk=256)\n\n"
              "The TFRecords at buf[starts[k]:ends[k]] (int64 arrays) checked in order on a "
              "compiled thread (framing, stored length, length and data CRCs with the CRC32C "
              "instruction), `chunk` records at a time (1 to 256), as far as wait() allows.",
    .tp_new = checker_new,
    .tp_init = (initproc)checker_init,
    .tp_dealloc = (destructor)checker_dealloc,
    .tp_methods = checker_methods,
};
