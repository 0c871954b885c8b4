#include "native.h"
#ifdef __linux__
#include <sys/mman.h>
#endif

/* ---- Block: memory for big decoded arrays, recycled once the arrays are gone ----------
 *
 * A fresh 150 MB array costs the kernel ~37,000 page faults and zeroing on first touch; a
 * decoding loop that makes one per batch pays that every step. A Block exposes its memory
 * through the buffer protocol (numpy.frombuffer makes the array); when the last array or
 * view on it dies, the memory goes to a small pool instead of back to the system, and the
 * next Block of the same size takes it, already mapped. Only dead blocks are reused. */

#define POOL_SLOTS 8
/* stamp: when the block came (pool_clock), so that the one that waited longest goes first */
static struct { char *data; Py_ssize_t size; unsigned long long stamp; } pool[POOL_SLOTS];
static Py_ssize_t pool_bytes = 0, pool_limit = (Py_ssize_t)1 << 30;
static unsigned long long pool_clock = 0;

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t size;
} Block;

/* Big blocks are mapped directly and asked to use huge pages (as numpy does for its big
 * arrays): 512x fewer page faults on first touch. */
#define MAPPED_BYTES ((Py_ssize_t)4 << 20)

static char *block_alloc(Py_ssize_t size) {
#if defined(__linux__) && defined(MAP_ANONYMOUS)
    if (size >= MAPPED_BYTES) {
        void *p = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (p == MAP_FAILED)
            return NULL;
#ifdef MADV_HUGEPAGE
        madvise(p, (size_t)size, MADV_HUGEPAGE);  /* a hint: failure is harmless */
#endif
        return (char *)p;
    }
#endif
    return PyMem_RawMalloc(size ? (size_t)size : 1);
}

static void block_free(char *data, Py_ssize_t size) {
#if defined(__linux__) && defined(MAP_ANONYMOUS)
    if (size >= MAPPED_BYTES) {
        munmap(data, (size_t)size);
        return;
    }
#endif
    PyMem_RawFree(data);
}

static void pool_drop(int slot) {
    block_free(pool[slot].data, pool[slot].size);
    pool_bytes -= pool[slot].size;
    pool[slot].data = NULL;
    pool[slot].size = 0;
}

/* The slot of the block that has waited longest in the pool, or -1 when it is empty. */
static int oldest_slot(void) {
    int oldest = -1;
    for (int i = 0; i < POOL_SLOTS; i++)
        if (pool[i].data != NULL && (oldest < 0 || pool[i].stamp < pool[oldest].stamp))
            oldest = i;
    return oldest;
}

/* A dead block's memory waits in the pool for the next Block of its size: in a free slot, or
 * in place of the block that has waited longest (the newest is the likeliest to be asked for
 * again, by a loop's next step; a slot is never held by a stale size for good), the oldest
 * others dropped first while the pool would pass its bound. Called with the GIL held. */
static void block_dealloc(Block *self) {
    if (self->data != NULL) {
        if (pool_limit > 0 && self->size <= pool_limit) {
            int slot;
            while (pool_bytes > pool_limit - self->size && (slot = oldest_slot()) >= 0)
                pool_drop(slot);
            slot = -1;
            for (int i = 0; i < POOL_SLOTS && slot < 0; i++)
                if (pool[i].data == NULL)
                    slot = i;
            if (slot < 0) {
                slot = oldest_slot();
                pool_drop(slot);
            }
            pool[slot].data = self->data;
            pool[slot].size = self->size;
            pool[slot].stamp = ++pool_clock;
            pool_bytes += self->size;
        } else {
            block_free(self->data, self->size);
        }
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *block_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Py_ssize_t size;
    static char *kwlist[] = {"size", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n:Block", kwlist, &size))
        return NULL;
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "size must be >= 0");
        return NULL;
    }
    char *data = NULL;
    for (int i = 0; i < POOL_SLOTS; i++)
        if (pool[i].data != NULL && pool[i].size == size) {
            data = pool[i].data;
            pool[i].data = NULL;
            pool[i].size = 0;
            pool_bytes -= size;
            break;
        }
    if (data == NULL) {
        data = block_alloc(size);
        if (data == NULL)
            return PyErr_NoMemory();
    }
    Block *self = (Block *)type->tp_alloc(type, 0);
    if (self == NULL) {
        block_free(data, size);
        return NULL;
    }
    self->data = data;
    self->size = size;
    return (PyObject *)self;
}

static int block_getbuffer(Block *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->size, 0, flags);
}

static PyBufferProcs block_as_buffer = {(getbufferproc)block_getbuffer, NULL};

PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ofindex._native.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = (destructor)block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("Block(size): writable memory for a big decoded array; recycled\n"
                        "through a small pool when nothing uses it any more."),
    .tp_new = block_new,
};

const char pool_doc[] =
"pool(limit=None) -> (bytes held, limit)\n\n"
"The memory pool of dead Blocks (8 at most; when it is full, the one that waited longest\n"
"makes room): with limit, set its bound in bytes first (0 empties it and turns it off).";

PyObject *pool_ctl(PyObject *self, PyObject *args) {
    PyObject *limit = Py_None;
    if (!PyArg_ParseTuple(args, "|O:pool", &limit))
        return NULL;
    if (limit != Py_None) {
        Py_ssize_t v = PyLong_AsSsize_t(limit);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        if (v < 0) {
            PyErr_SetString(PyExc_ValueError, "limit must be >= 0");
            return NULL;
        }
        pool_limit = v;
        int slot;
        while ((pool_bytes > pool_limit || pool_limit == 0)
               && (slot = oldest_slot()) >= 0)
            pool_drop(slot);
    }
    return Py_BuildValue("(nn)", pool_bytes, pool_limit);
}
