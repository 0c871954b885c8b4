/* Inflater: zlib's inflate as a small Python type, for random access into gzip and zlib
 * files (the design of zlib's examples/zran.c).
 *
 * What Python's zlib module does not offer and seek points need: stopping at deflate block
 * boundaries (Z_BLOCK) and reading the bit position there (data_type), starting in the
 * middle of a byte (inflatePrime), and giving a raw stream its 32 KiB window
 * (inflateSetDictionary). The builder inflates with `track` set, so the last 32 KiB of output
 * is kept for the windows of its seek points; readers start an Inflater at a seek point.
 *
 * No inflate code of our own: every byte goes through zlib. Each inflate loop runs with the
 * GIL released; an Inflater used from two threads at once refuses the second (it is not
 * shared in ofindex). Data errors are returned as a status with zlib's message, so that the
 * Python side names the file, the record and the compressed offset. */
#include "native.h"
#include <limits.h>
#include <zlib.h>

#define WINDOW 32768

typedef struct {
    PyObject_HEAD
    z_stream strm;
    int ready;              /* inflateInit2 succeeded: inflateEnd is owed */
    int busy;               /* a call is running without the GIL */
    int track;              /* keep the last WINDOW bytes of output in hist */
    unsigned char *hist;    /* WINDOW bytes when track: the most recent output at the end */
    Py_ssize_t hist_len;    /* valid bytes at the end of hist */
    Py_ssize_t every;       /* > 0: note (input used, output made) every `every` output bytes */
    long long *marks;       /* those pairs for the last inflate call */
    Py_ssize_t marks_len;   /* pairs in marks */
    Py_ssize_t marks_cap;   /* pairs marks has room for */
    int marks_lost;         /* the last call made more pairs than there was room for */
    char message[128];      /* zlib's message for the last data error */
} Inflater;

static int valid_wbits(int wbits) {
    return wbits == -15 || wbits == 15 || wbits == 31;
}

static int inflater_init(Inflater *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"wbits", "track", "every", NULL};
    int wbits, track = 0;
    Py_ssize_t every = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|pn:Inflater", kwlist, &wbits, &track,
                                     &every))
        return -1;
    if (every < 0) {
        PyErr_SetString(PyExc_ValueError, "Inflater: every must be 0 or more");
        return -1;
    }
    if (!valid_wbits(wbits)) {
        PyErr_SetString(PyExc_ValueError, "Inflater: wbits must be -15 (raw), 15 (zlib) or 31 "
                        "(gzip)");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Inflater is in use by another thread");
        return -1;
    }
    if (self->ready) {  /* __init__ called again: start afresh */
        inflateEnd(&self->strm);
        self->ready = 0;
    }
    memset(&self->strm, 0, sizeof(self->strm));
    int ret = inflateInit2(&self->strm, wbits);
    if (ret != Z_OK) {
        if (ret == Z_MEM_ERROR)
            PyErr_NoMemory();
        else
            PyErr_Format(PyExc_RuntimeError, "inflateInit2 failed (%d)", ret);
        return -1;
    }
    self->ready = 1;
    self->track = track;
    self->hist_len = 0;
    self->every = every;
    self->marks_len = 0;
    self->marks_lost = 0;
    if (track && self->hist == NULL) {
        self->hist = PyMem_Malloc(WINDOW);
        if (self->hist == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    self->message[0] = '\0';
    return 0;
}

static void inflater_dealloc(Inflater *self) {
    if (self->ready)
        inflateEnd(&self->strm);
    PyMem_Free(self->hist);
    PyMem_Free(self->marks);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Refuse a call on an Inflater that is not initialised or is busy in another thread. */
static int unusable(Inflater *self) {
    if (!self->ready) {
        PyErr_SetString(PyExc_ValueError, "Inflater is not initialised");
        return 1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Inflater is in use by another thread");
        return 1;
    }
    return 0;
}

/* Append n bytes of fresh output at p to the history window. */
static void remember(Inflater *self, const unsigned char *p, size_t n) {
    if (n >= WINDOW) {
        memcpy(self->hist, p + (n - WINDOW), WINDOW);
        self->hist_len = WINDOW;
        return;
    }
    size_t keep = WINDOW - n;  /* bytes of older history that stay */
    memmove(self->hist, self->hist + n, keep);
    memcpy(self->hist + keep, p, n);
    self->hist_len = self->hist_len + (Py_ssize_t)n > WINDOW ? WINDOW
                     : self->hist_len + (Py_ssize_t)n;
}

static const char inflate_doc_[] =
    "inflate(src, dst, block=False) -> (used, produced, status, data_type)\n\n"
    "Inflate bytes of `src` into the writable buffer `dst` until `dst` is full, `src` is used\n"
    "up, the stream ends or the data is bad; with `block`, also stop at the end of the\n"
    "gzip/zlib header or of a deflate block (Z_BLOCK). `status` is 0 (more to do), 1 (end of\n"
    "stream), 2 (a preset dictionary is needed) or -3 (bad data: see `message`); `data_type`\n"
    "is zlib's: unused bits of the last input byte, +64 inside the last block, +128 at a\n"
    "block boundary. With `every`, the call also notes where it was (see `marks`) after\n"
    "each `every` bytes of output, and at its end.";

/* What an inflate call has used of its input and made of its output so far. */
typedef struct {
    const unsigned char *in;
    unsigned char *out;
    size_t in_left, out_left, used, produced;
} Flow;

/* Reset the marks of the last call, and make room for a pair per `every` bytes of the
 * dst_len bytes of output and a few short steps: 0, or -1 with MemoryError set. */
static int start_marks(Inflater *self, Py_ssize_t dst_len) {
    self->marks_len = 0;
    self->marks_lost = 0;
    if (!self->every)
        return 0;
    Py_ssize_t need = dst_len / self->every + 8;
    if (need <= self->marks_cap)
        return 0;
    long long *grown = PyMem_Realloc(self->marks, (size_t)need * 2 * sizeof(long long));
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->marks = grown;
    self->marks_cap = need;
    return 0;
}

/* Note where the call is (input used, output made): a pair in marks, or marks_lost when
 * they are full. */
static inline void note_mark(Inflater *self, size_t used, size_t produced) {
    if (self->marks_len < self->marks_cap) {
        self->marks[2 * self->marks_len] = (long long)used;
        self->marks[2 * self->marks_len + 1] = (long long)produced;
        self->marks_len++;
    } else {
        self->marks_lost = 1;
    }
}

/* One inflate over the rest of the input and output (avail_in/avail_out are 32-bit: buffers
 * over 4 GiB are fed in slices; with `every`, at most that much output), its progress added
 * to the flow and noted in the marks. zlib's code, Z_BUF_ERROR (no progress possible) as
 * Z_OK: not an error, the caller decides. */
static inline int inflate_step(Inflater *self, Flow *f, int flush, size_t every,
                               size_t *got_in, size_t *got_out) {
    uInt ai = f->in_left > UINT_MAX ? UINT_MAX : (uInt)f->in_left;
    uInt ao = f->out_left > UINT_MAX ? UINT_MAX : (uInt)f->out_left;
    if (every && ao > every)
        ao = (uInt)every;
    self->strm.next_in = (Bytef *)(f->in + f->used);
    self->strm.avail_in = ai;
    self->strm.next_out = f->out + f->produced;
    self->strm.avail_out = ao;
    int ret = inflate(&self->strm, flush);
    *got_in = ai - self->strm.avail_in;
    *got_out = ao - self->strm.avail_out;
    f->used += *got_in;
    f->produced += *got_out;
    f->in_left -= *got_in;
    f->out_left -= *got_out;
    if (every && *got_out)
        note_mark(self, f->used, f->produced);
    return ret == Z_BUF_ERROR ? Z_OK : ret;
}

/* inflate()'s steps, without the GIL, until the output is full, the input used up, the
 * stream ends, the data is bad or (block) a block boundary: zlib's last code. */
static int inflate_loop(Inflater *self, Flow *f, int block) {
    const int flush = block ? Z_BLOCK : Z_NO_FLUSH;
    const size_t every = (size_t)self->every;
    for (;;) {
        size_t got_in, got_out;
        int ret = inflate_step(self, f, flush, every, &got_in, &got_out);
        if (ret != Z_OK || (got_in == 0 && got_out == 0) || f->out_left == 0)
            return ret;
        /* stopped by the output step alone: go on (zlib may hold input it has not turned
         * into output yet), unless it also reached the block boundary asked for */
        if (every && self->strm.avail_out == 0 && !(block && (self->strm.data_type & 128)))
            continue;
        if (block || f->in_left == 0)
            return ret;
    }
}

/* What inflate() returns for zlib's code; bad data keeps zlib's message. */
#define STATUS_FAILED (-100) /* an exception is set */
static int inflate_status(Inflater *self, int ret) {
    switch (ret) {
    case Z_OK:
        return 0;
    case Z_STREAM_END:
        return 1;
    case Z_NEED_DICT:
        return 2;
    case Z_DATA_ERROR:
        snprintf(self->message, sizeof(self->message), "%s",
                 self->strm.msg != NULL ? self->strm.msg : "invalid compressed data");
        return -3;
    case Z_MEM_ERROR:
        PyErr_NoMemory();
        return STATUS_FAILED;
    default:
        PyErr_Format(PyExc_RuntimeError, "inflate failed (%d)", ret);
        return STATUS_FAILED;
    }
}

static PyObject *inflater_inflate(Inflater *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"src", "dst", "block", NULL};
    Py_buffer src, dst;
    int block = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*w*|p:inflate", kwlist, &src, &dst, &block))
        return NULL;
    if (unusable(self) || start_marks(self, dst.len) < 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    Flow f = {(const unsigned char *)src.buf, (unsigned char *)dst.buf, (size_t)src.len,
              (size_t)dst.len, 0, 0};
    int ret;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    ret = inflate_loop(self, &f, block);
    if (self->track && f.produced)  /* the output of the whole call is contiguous */
        remember(self, f.out, f.produced);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    int data_type = self->strm.data_type;
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    int status = inflate_status(self, ret);
    if (status == STATUS_FAILED)
        return NULL;
    return Py_BuildValue("nnii", (Py_ssize_t)f.used, (Py_ssize_t)f.produced, status,
                         data_type);
}

static const char reset_doc[] =
    "reset(wbits)\n\nStart a new stream (another gzip member or zlib stream, or raw deflate)\n"
    "with the same Inflater; the output history is kept.";

static PyObject *inflater_reset(Inflater *self, PyObject *args) {
    int wbits;
    if (!PyArg_ParseTuple(args, "i:reset", &wbits))
        return NULL;
    if (unusable(self))
        return NULL;
    if (!valid_wbits(wbits)) {
        PyErr_SetString(PyExc_ValueError, "reset: wbits must be -15, 15 or 31");
        return NULL;
    }
    if (inflateReset2(&self->strm, wbits) != Z_OK) {
        PyErr_SetString(PyExc_RuntimeError, "inflateReset2 failed");
        return NULL;
    }
    Py_RETURN_NONE;
}

static const char prime_doc[] =
    "prime(bits, value)\n\nInsert the low `bits` bits (0..16) of `value` before the next\n"
    "input (inflatePrime): a seek point that starts inside a byte.";

static PyObject *inflater_prime(Inflater *self, PyObject *args) {
    int bits, value;
    if (!PyArg_ParseTuple(args, "ii:prime", &bits, &value))
        return NULL;
    if (unusable(self))
        return NULL;
    if (bits < 0 || bits > 16 || value < 0 || (bits < 16 && value >= (1 << bits))) {
        PyErr_SetString(PyExc_ValueError, "prime: bits must be 0..16 and value fit in them");
        return NULL;
    }
    if (bits && inflatePrime(&self->strm, bits, value) != Z_OK) {
        PyErr_SetString(PyExc_ValueError, "inflatePrime failed (prime a raw stream only)");
        return NULL;
    }
    Py_RETURN_NONE;
}

static const char set_dictionary_doc[] =
    "set_dictionary(window)\n\nGive a raw stream the (up to 32 KiB) output that precedes it.";

static PyObject *inflater_set_dictionary(Inflater *self, PyObject *args) {
    Py_buffer win;
    if (!PyArg_ParseTuple(args, "y*:set_dictionary", &win))
        return NULL;
    if (unusable(self)) {
        PyBuffer_Release(&win);
        return NULL;
    }
    if (win.len > WINDOW) {
        PyBuffer_Release(&win);
        PyErr_SetString(PyExc_ValueError, "set_dictionary: a window holds at most 32768 bytes");
        return NULL;
    }
    int ret = win.len ? inflateSetDictionary(&self->strm, (const Bytef *)win.buf, (uInt)win.len)
                      : Z_OK;
    PyBuffer_Release(&win);
    if (ret != Z_OK) {
        PyErr_SetString(PyExc_ValueError, "inflateSetDictionary failed (set it on a raw stream "
                        "before inflating)");
        return NULL;
    }
    Py_RETURN_NONE;
}

static const char window_doc[] =
    "window(n) -> bytes\n\nThe last `n` bytes of output (needs track=True; n <= 32768 and no\n"
    "more than were produced).";

static PyObject *inflater_window(Inflater *self, PyObject *args) {
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "n:window", &n))
        return NULL;
    if (unusable(self))
        return NULL;
    if (!self->track || n < 0 || n > self->hist_len) {
        PyErr_SetString(PyExc_ValueError, "window: n exceeds the output kept (track=True?)");
        return NULL;
    }
    return PyBytes_FromStringAndSize((const char *)self->hist + (WINDOW - n), n);
}

static const char marks_doc[] =
    "marks() -> bytes | None\n\nWhere the last `inflate` call was after each `every` bytes of\n"
    "output and at its end: int64 pairs (input used, output made), counted from the call's\n"
    "start; None if it made more than it kept room for.";

static PyObject *inflater_marks(Inflater *self, PyObject *Py_UNUSED(ignored)) {
    if (unusable(self))
        return NULL;
    if (self->marks_lost)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)self->marks,
                                     self->marks_len * 2 * (Py_ssize_t)sizeof(long long));
}

static PyObject *inflater_message(Inflater *self, void *closure) {
    (void)closure;
    return PyUnicode_DecodeLatin1(self->message, (Py_ssize_t)strlen(self->message), "replace");
}

static PyMethodDef inflater_methods[] = {
    {"inflate", (PyCFunction)(void (*)(void))inflater_inflate, METH_VARARGS | METH_KEYWORDS,
     inflate_doc_},
    {"reset", (PyCFunction)inflater_reset, METH_VARARGS, reset_doc},
    {"prime", (PyCFunction)inflater_prime, METH_VARARGS, prime_doc},
    {"set_dictionary", (PyCFunction)inflater_set_dictionary, METH_VARARGS, set_dictionary_doc},
    {"window", (PyCFunction)inflater_window, METH_VARARGS, window_doc},
    {"marks", (PyCFunction)inflater_marks, METH_NOARGS, marks_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef inflater_getset[] = {
    {"message", (getter)inflater_message, NULL, "zlib's message for the last data error", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject InflaterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ofindex._native.Inflater",
    .tp_basicsize = sizeof(Inflater),
    .tp_dealloc = (destructor)inflater_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Inflater(wbits, track=False, every=0): zlib inflate with Z_BLOCK, inflatePrime\n"
              "and inflateSetDictionary (wbits -15 raw, 15 zlib, 31 gzip).",
    .tp_methods = inflater_methods,
    .tp_getset = inflater_getset,
    .tp_init = (initproc)inflater_init,
    .tp_new = PyType_GenericNew,
};
