/* preads: a batch of records read from files with preadv, each payload straight into its own
 * bytes object, with the GIL released (datasets opened with mmap=False).
 *
 * The records of a share of the batch are taken in file order; neighbours in one file (gaps
 * of at most max_gap bytes between them, read into a scratch buffer) are read by one preadv
 * whose vectors put each record's header and footer aside and its payload in its object, so
 * that a run of neighbours costs one system call and one copy. Each record is then checked
 * (its stored length against the span its index gives it; with verify, a TFRecord's length
 * and data CRCs with the CPU's CRC32C instruction, three records at a time once the share is
 * read). Threads can fill shares of one batch at once. The caller reads a batch in which a record fails (or a file came up short) again the
 * ordinary way, which raises the precise error. */
#include "native.h"
#include "framing.h"
#include "hwcrc.h"

#if defined(__unix__) || defined(__APPLE__)
#include <errno.h>
#include <limits.h>
#include <sys/uio.h>
#include <unistd.h>
#define PREADS_AVAILABLE 1
#ifndef IOV_MAX
#define IOV_MAX 1024
#endif
/* Vectors per preadv: three per record, and one per gap. */
#define PREADS_IOV (IOV_MAX < 1024 ? IOV_MAX : 1024)
#else
#define PREADS_AVAILABLE 0
#endif

/* Bytes of gap read through between two neighbours, at most (a scratch buffer holds them). */
#define PREADS_MAX_GAP ((int64_t)1 << 16)

const char preads_doc[] =
"preads(fds, which, starts, outs, order, lo, hi, header_size, footer_size, verify, max_gap)\n"
"    -> int\n\n"
"For the records order[lo:hi] (positions into which, starts and outs, taken in that order,\n"
"which should be file order): record k is the framed record at byte starts[k] of file\n"
"descriptor fds[which[k]] whose payload is len(outs[k]) bytes; its payload is read into\n"
"outs[k] (a bytes object from blank() that nothing else sees yet) and checked (its stored\n"
"length; with verify, a TFRecord's CRCs, which needs hw_crc()). Neighbours in one file no\n"
"more than max_gap bytes apart (at most 65536) are read by one preadv. which, starts and\n"
"order are int64 arrays. The GIL is released for the reads and checks. Returns -1, or the\n"
"smallest k among the records that fail a check or could not be read whole (a file\n"
"shorter than its index says); outs is then partly filled: discard it. Raises OSError for a\n"
"read that fails, and where there is no preadv; ValueError when Python code the call ran\n"
"(an fd's __index__, a buffer's export) changed outs.";

/* preads()'s arguments. */
typedef struct {
    PyObject *fds, *which, *starts, *outs, *order;
    Py_ssize_t lo, hi, header, footer;
    int verify;
    long long max_gap;
} PreadsArgs;

#if PREADS_AVAILABLE
typedef struct {
    int fd;
    int64_t start;            /* the framed record's first byte */
    int64_t size;             /* its payload's bytes */
    unsigned char *payload;   /* its bytes object's buffer */
    Py_ssize_t k;             /* its position in the batch */
} Item;

/* The TFRecord CRCs of the g (<= 3) items at[] read whole (headers and footers in
 * frames): the smallest k of those that fail into *bad. Three payloads' CRCs are computed at
 * once (three independent streams of the CRC32C instruction: about three times one). */
static void check_crcs(const Item *items, const Py_ssize_t at[3], int g,
                       const unsigned char *frames, Py_ssize_t header, Py_ssize_t *bad) {
    const unsigned char *p[3];
    size_t sz[3];
    uint32_t c[3];
    for (int i = 0; i < g; i++) {
        p[i] = items[at[i]].payload;
        sz[i] = (size_t)items[at[i]].size;
    }
    if (g == 3)
        hw_crc32c_x3(p, sz, c);
    else
        for (int i = 0; i < g; i++)
            c[i] = hw_crc32c(p[i], sz[i]);
    for (int i = 0; i < g; i++) {
        const unsigned char *fr = frames + 16 * at[i];
        if (((uint32_t)load_le(fr + 8, 4) != hw_mask(hw_crc32c(fr, 8)) ||
             (uint32_t)load_le(fr + header, 4) != hw_mask(c[i])) &&
            (*bad < 0 || items[at[i]].k < *bad))
            *bad = items[at[i]].k;
    }
}

/* A share of a batch and what reading it needs, without the GIL: items[0..n) in file order;
 * frames holds 16 bytes per item (header and footer), failed one byte per item (zeroed),
 * gap_buf max_gap bytes. */
typedef struct {
    const Item *items;
    Py_ssize_t n, header, footer;
    int verify;
    int64_t max_gap;
    unsigned char *frames, *failed, *gap_buf;
} Share;

/* The vectors of one preadv for the run of neighbours from item a (one file, gaps of at most
 * max_gap, as many as iov holds), into iov: their count; *b is the item after the run. */
static int run_vectors(const Share *sh, Py_ssize_t a, struct iovec *iov, Py_ssize_t *b) {
    const Item *items = sh->items;
    int cnt = 0;
    Py_ssize_t k = a;
    int64_t pos = items[a].start;
    while (k < sh->n && cnt + 4 <= PREADS_IOV) {
        const Item *it = &items[k];
        if (k > a && (it->fd != items[a].fd || it->start < pos || it->start - pos > sh->max_gap))
            break;
        if (it->start > pos) {  /* a gap read through */
            iov[cnt].iov_base = sh->gap_buf;
            iov[cnt++].iov_len = (size_t)(it->start - pos);
        }
        unsigned char *fr = sh->frames + 16 * k;
        iov[cnt].iov_base = fr;
        iov[cnt++].iov_len = (size_t)sh->header;
        iov[cnt].iov_base = it->payload;
        iov[cnt++].iov_len = (size_t)it->size;
        if (sh->footer) {
            iov[cnt].iov_base = fr + sh->header;
            iov[cnt++].iov_len = (size_t)sh->footer;
        }
        pos = it->start + sh->header + sh->footer + it->size;
        k++;
    }
    *b = k;
    return cnt;
}

/* The cnt vectors at iov read from fd at offset start; short reads go on where they stopped
 * (signals). The bytes read into *got (fewer at the end of the file); -1 with errno set when
 * a read failed, else 0. */
static int read_vectors(int fd, int64_t start, struct iovec *iov, int cnt, int64_t *got) {
    *got = 0;
    for (int v = 0; v < cnt;) {
        ssize_t r;
        do
            r = preadv(fd, iov + v, cnt - v, (off_t)(start + *got));
        while (r < 0 && errno == EINTR);
        if (r < 0)
            return -1;
        if (r == 0)
            break;  /* end of file: the records past it were not read */
        *got += r;
        while (v < cnt && (size_t)r >= iov[v].iov_len)
            r -= (ssize_t)iov[v++].iov_len;
        if (v < cnt) {
            iov[v].iov_base = (unsigned char *)iov[v].iov_base + r;
            iov[v].iov_len -= (size_t)r;
        }
    }
    return 0;
}

/* Items [a, b) read up to byte `end` of their file: each one whole, with its stored length,
 * or failed (and the smallest failing k to *bad). */
static void check_run(const Share *sh, Py_ssize_t a, Py_ssize_t b, int64_t end,
                      Py_ssize_t *bad) {
    Py_ssize_t frame = sh->header + sh->footer;
    for (Py_ssize_t j = a; j < b; j++) {
        const Item *it = &sh->items[j];
        if ((it->start + frame + it->size > end ||
             load_le(sh->frames + 16 * j, 8) != (uint64_t)it->size)) {
            sh->failed[j] = 1;
            if (*bad < 0 || it->k < *bad)
                *bad = it->k;
        }
    }
}

/* The CRCs of the items read whole (the share is in the cache still), three at once. */
static void check_share_crcs(const Share *sh, Py_ssize_t *bad) {
    Py_ssize_t at[3];
    int g = 0;
    for (Py_ssize_t j = 0; j < sh->n; j++) {
        if (sh->failed[j])
            continue;
        at[g++] = j;
        if (g == 3) {
            check_crcs(sh->items, at, g, sh->frames, sh->header, bad);
            g = 0;
        }
    }
    check_crcs(sh->items, at, g, sh->frames, sh->header, bad);
}

/* Read and check a share, no GIL: the smallest failing k (or -1) to *bad; -1 with errno set
 * when a read failed, else 0. */
static int read_items(const Share *share, Py_ssize_t *bad) {
    const Share sh = *share;  /* a local copy: the stores into frames and iov cannot change it */
    struct iovec iov[PREADS_IOV];
    *bad = -1;
    for (Py_ssize_t a = 0; a < sh.n;) {
        Py_ssize_t b;
        int64_t got;
        int cnt = run_vectors(&sh, a, iov, &b);
        if (read_vectors(sh.items[a].fd, sh.items[a].start, iov, cnt, &got) < 0)
            return -1;
        check_run(&sh, a, b, sh.items[a].start + got, bad);  /* bytes read up to its end */
        a = b;
    }
    if (sh.verify)
        check_share_crcs(&sh, bad);
    return 0;
}

/* What preads() holds while it runs (all released by batch_close). */
typedef struct {
    PyObject *held_fds, *held_outs;  /* the lists as they are when the call starts */
    Py_buffer wv, sv, ov;  /* which, starts, order */
    Py_ssize_t n, m;       /* records (outs), files (fds) */
    int *fds;
    Item *items;           /* per position j of order[lo:hi] */
    unsigned char *frames, *failed, *gap_buf;
} Batch;

/* The int64 arrays which, starts and order, and their lengths checked: 0, or -1 with an
 * exception set. */
static int batch_arrays(Batch *bt, const PreadsArgs *a) {
    if (get_i64(a->which, &bt->wv, "which") < 0 || get_i64(a->starts, &bt->sv, "starts") < 0 ||
        get_i64(a->order, &bt->ov, "order") < 0)
        return -1;
    bt->n = PyTuple_GET_SIZE(bt->held_outs);
    bt->m = PyTuple_GET_SIZE(bt->held_fds);
    bt->fds = PyMem_Calloc(bt->m ? bt->m : 1, sizeof(int));
    if (bt->fds == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (bt->wv.shape[0] != bt->n || bt->sv.shape[0] != bt->n || a->lo < 0 || a->hi < a->lo ||
        a->hi > bt->ov.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "preads: which, starts and outs must be as long, "
                        "and lo and hi within order");
        return -1;
    }
    return 0;
}

/* The file descriptors of fds, each checked to be one: 0, or -1 with an exception set. */
static int batch_fds(Batch *bt) {
    for (Py_ssize_t j = 0; j < bt->m; j++) {
        long fd = PyLong_AsLong(PyTuple_GET_ITEM(bt->held_fds, j));
        if (fd == -1 && PyErr_Occurred())
            return -1;
        if (fd < 0 || fd > INT_MAX) {
            PyErr_SetString(PyExc_ValueError, "preads: a file descriptor is out of range");
            return -1;
        }
        bt->fds[j] = (int)fd;
    }
    return 0;
}

/* Room for the share's items, frames, failures and gaps: 0, or -1 with MemoryError set. */
static int batch_alloc(Batch *bt, Py_ssize_t count, long long max_gap) {
    bt->items = PyMem_Malloc((count ? count : 1) * sizeof(Item));
    bt->frames = PyMem_Malloc((count ? count : 1) * 16);
    bt->failed = PyMem_Calloc(count ? count : 1, 1);
    bt->gap_buf = PyMem_Malloc(max_gap ? (size_t)max_gap : 1);
    if (bt->items == NULL || bt->frames == NULL || bt->failed == NULL || bt->gap_buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* The items of order[lo:hi], with the GIL (the objects and bounds): 0, or -1 with an
 * exception set. */
static int batch_place(Batch *bt, const PreadsArgs *a) {
    const int64_t *which = (const int64_t *)bt->wv.buf, *st = (const int64_t *)bt->sv.buf;
    const int64_t *order = (const int64_t *)bt->ov.buf + a->lo;
    const Py_ssize_t frame = a->header + a->footer, count = a->hi - a->lo, n = bt->n, m = bt->m;
    const int *fds = bt->fds;
    Item *items = bt->items;
    PyObject *outs = bt->held_outs;
    for (Py_ssize_t j = 0; j < count; j++) {
        int64_t k = order[j];
        if (k < 0 || k >= n) {
            PyErr_Format(PyExc_ValueError, "preads: order[%zd] is out of range", a->lo + j);
            return -1;
        }
        PyObject *o = PyTuple_GET_ITEM(outs, k);
        if (!PyBytes_CheckExact(o)) {
            PyErr_SetString(PyExc_TypeError, "preads: outs must hold bytes from blank()");
            return -1;
        }
        int64_t w = which[k], s = st[k], size = PyBytes_GET_SIZE(o);
        if (w < 0 || w >= m) {
            PyErr_Format(PyExc_ValueError, "preads: item %lld names no file", (long long)k);
            return -1;
        }
        /* compared before any arithmetic: spans come from corrupt files too */
        if (s < 0 || size > INT64_MAX - frame || s > INT64_MAX - frame - size) {
            PyErr_Format(PyExc_ValueError, "preads: item %lld lies past any file",
                         (long long)k);
            return -1;
        }
        items[j] = (Item){fds[w], s, size, (unsigned char *)PyBytes_AS_STRING(o), k};
    }
    return 0;
}

/* The share read and checked with the GIL released: -1 or the smallest failing k as an int,
 * or NULL with OSError set. */
static PyObject *batch_read(const Batch *bt, const PreadsArgs *a) {
    Share sh = {bt->items, a->hi - a->lo, a->header, a->footer, a->verify, a->max_gap,
                bt->frames, bt->failed, bt->gap_buf};
    Py_ssize_t bad;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = read_items(&sh, &bad);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromSsize_t(bad);
}

static void batch_close(Batch *bt) {
    PyMem_Free(bt->gap_buf);
    PyMem_Free(bt->failed);
    PyMem_Free(bt->frames);
    PyMem_Free(bt->items);
    PyMem_Free(bt->fds);
    PyBuffer_Release(&bt->ov);  /* (buffers never acquired are empty: releasing is a no-op) */
    PyBuffer_Release(&bt->sv);
    PyBuffer_Release(&bt->wv);
    Py_XDECREF(bt->held_outs);
    Py_XDECREF(bt->held_fds);
}

/* Everything preads() reads, held and checked, and each record placed: 0, or -1 with an
 * exception set. The lists are held first: an fd's __index__ or an array's buffer export
 * runs Python code, which may change them. The records are read into the bytes objects
 * held; outs must still hold them, or its caller would not see what was read. */
static int batch_prepare(Batch *bt, const PreadsArgs *a) {
    if ((bt->held_fds = snapshot_list(a->fds, "preads: fds")) == NULL ||
        (bt->held_outs = snapshot_list(a->outs, "preads: outs")) == NULL)
        return -1;
    if (batch_arrays(bt, a) < 0 || batch_fds(bt) < 0 ||
        batch_alloc(bt, a->hi - a->lo, a->max_gap) < 0 || batch_place(bt, a) < 0)
        return -1;
    return snapshot_unchanged(a->outs, bt->held_outs, "preads: outs");
}

/* preads() past its argument parsing. */
static PyObject *preads_run(const PreadsArgs *a) {
    if (framing_refused(a->header, a->footer, a->verify, "preads checks CRCs only with the "
                        "CRC32C instruction (see hw_crc())") < 0)
        return NULL;
    if (a->max_gap < 0 || a->max_gap > PREADS_MAX_GAP) {
        PyErr_SetString(PyExc_ValueError, "max_gap must be in [0, 65536]");
        return NULL;
    }
    Batch bt = {0};
    PyObject *result = NULL;
    if (batch_prepare(&bt, a) == 0)
        result = batch_read(&bt, a);
    batch_close(&bt);
    return result;
}
#endif

PyObject *preads(PyObject *self, PyObject *args) {
    PreadsArgs a;
    if (!PyArg_ParseTuple(args, "O!OOO!OnnnnpL:preads", &PyList_Type, &a.fds, &a.which,
                          &a.starts, &PyList_Type, &a.outs, &a.order, &a.lo, &a.hi, &a.header,
                          &a.footer, &a.verify, &a.max_gap))
        return NULL;
#if PREADS_AVAILABLE
    return preads_run(&a);
#else
    PyErr_SetString(PyExc_OSError, "no preadv on this platform");
    return NULL;
#endif
}
