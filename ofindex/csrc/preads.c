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
"read that fails, and where there is no preadv.";

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

/* Read and check items[0..n) (file order), no GIL: the smallest failing k (or -1) to *bad;
 * -1 with errno set when a read failed, else 0. frames holds 16 bytes per item (header and
 * footer), failed one byte per item (zeroed). */
static int read_items(const Item *items, Py_ssize_t n, Py_ssize_t header, Py_ssize_t footer,
                      int verify, int64_t max_gap, unsigned char *frames,
                      unsigned char *failed, unsigned char *gap_buf, Py_ssize_t *bad) {
    struct iovec iov[PREADS_IOV];
    Py_ssize_t frame = header + footer;
    *bad = -1;
    for (Py_ssize_t a = 0; a < n;) {
        /* the run of neighbours a..b-1: one file, gaps of at most max_gap */
        int cnt = 0;
        Py_ssize_t b = a;
        int64_t pos = items[a].start;
        while (b < n && cnt + 4 <= PREADS_IOV) {
            const Item *it = &items[b];
            if (b > a && (it->fd != items[a].fd || it->start < pos || it->start - pos > max_gap))
                break;
            if (it->start > pos) {  /* a gap read through */
                iov[cnt].iov_base = gap_buf;
                iov[cnt++].iov_len = (size_t)(it->start - pos);
            }
            unsigned char *fr = frames + 16 * b;
            iov[cnt].iov_base = fr;
            iov[cnt++].iov_len = (size_t)header;
            iov[cnt].iov_base = it->payload;
            iov[cnt++].iov_len = (size_t)it->size;
            if (footer) {
                iov[cnt].iov_base = fr + header;
                iov[cnt++].iov_len = (size_t)footer;
            }
            pos = it->start + frame + it->size;
            b++;
        }
        int64_t got = 0;
        for (int v = 0; v < cnt;) {  /* short reads go on where they stopped (signals) */
            ssize_t r;
            do
                r = preadv(items[a].fd, iov + v, cnt - v, (off_t)(items[a].start + got));
            while (r < 0 && errno == EINTR);
            if (r < 0)
                return -1;
            if (r == 0)
                break;  /* end of file: the records past it were not read */
            got += r;
            while (v < cnt && (size_t)r >= iov[v].iov_len)
                r -= (ssize_t)iov[v++].iov_len;
            if (v < cnt) {
                iov[v].iov_base = (unsigned char *)iov[v].iov_base + r;
                iov[v].iov_len -= (size_t)r;
            }
        }
        int64_t end = items[a].start + got;  /* bytes read up to here */
        for (Py_ssize_t j = a; j < b; j++) {  /* whole, and its stored length */
            const Item *it = &items[j];
            if ((it->start + frame + it->size > end ||
                 load_le(frames + 16 * j, 8) != (uint64_t)it->size)) {
                failed[j] = 1;
                if (*bad < 0 || it->k < *bad)
                    *bad = it->k;
            }
        }
        a = b;
    }
    if (!verify)
        return 0;
    /* the CRCs of the records read whole (the share is in the cache still), three at once */
    Py_ssize_t at[3];
    int g = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        if (failed[j])
            continue;
        at[g++] = j;
        if (g == 3) {
            check_crcs(items, at, g, frames, header, bad);
            g = 0;
        }
    }
    check_crcs(items, at, g, frames, header, bad);
    return 0;
}
#endif

PyObject *preads(PyObject *self, PyObject *args) {
    PyObject *fds_obj, *which_obj, *starts_obj, *outs, *order_obj;
    Py_ssize_t lo, hi, header, footer;
    int verify;
    long long max_gap;
    if (!PyArg_ParseTuple(args, "O!OOO!OnnnnpL:preads", &PyList_Type, &fds_obj, &which_obj,
                          &starts_obj, &PyList_Type, &outs, &order_obj, &lo, &hi, &header,
                          &footer, &verify, &max_gap))
        return NULL;
#if !PREADS_AVAILABLE
    PyErr_SetString(PyExc_OSError, "no preadv on this platform");
    return NULL;
#else
    if (!((header == 12 && footer == 4) || (header == 8 && footer == 0 && !verify))) {
        PyErr_SetString(PyExc_ValueError, "bad framing sizes");
        return NULL;
    }
    if (verify && !hw_crc_on) {
        PyErr_SetString(PyExc_ValueError, "preads checks CRCs only with the CRC32C "
                        "instruction (see hw_crc())");
        return NULL;
    }
    if (max_gap < 0 || max_gap > PREADS_MAX_GAP) {
        PyErr_SetString(PyExc_ValueError, "max_gap must be in [0, 65536]");
        return NULL;
    }
    Py_buffer wv, sv, ov;
    if (get_i64(which_obj, &wv, "which") < 0)
        return NULL;
    if (get_i64(starts_obj, &sv, "starts") < 0) {
        PyBuffer_Release(&wv);
        return NULL;
    }
    if (get_i64(order_obj, &ov, "order") < 0) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&wv);
        return NULL;
    }
    PyObject *result = NULL;
    Item *items = NULL;
    unsigned char *frames = NULL, *failed = NULL, *gap_buf = NULL;
    Py_ssize_t n = PyList_GET_SIZE(outs), m = PyList_GET_SIZE(fds_obj);
    int *fds = PyMem_Calloc(m ? m : 1, sizeof(int));
    if (fds == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (wv.shape[0] != n || sv.shape[0] != n || lo < 0 || hi < lo || hi > ov.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "preads: which, starts and outs must be as long, "
                        "and lo and hi within order");
        goto done;
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        long fd = PyLong_AsLong(PyList_GET_ITEM(fds_obj, j));
        if (fd == -1 && PyErr_Occurred())
            goto done;
        if (fd < 0 || fd > INT_MAX) {
            PyErr_SetString(PyExc_ValueError, "preads: a file descriptor is out of range");
            goto done;
        }
        fds[j] = (int)fd;
    }
    Py_ssize_t count = hi - lo;
    items = PyMem_Malloc((count ? count : 1) * sizeof(Item));
    frames = PyMem_Malloc((count ? count : 1) * 16);
    failed = PyMem_Calloc(count ? count : 1, 1);
    gap_buf = PyMem_Malloc(max_gap ? (size_t)max_gap : 1);
    if (items == NULL || frames == NULL || failed == NULL || gap_buf == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *which = (const int64_t *)wv.buf, *st = (const int64_t *)sv.buf;
    const int64_t *order = (const int64_t *)ov.buf;
    Py_ssize_t frame = header + footer;
    for (Py_ssize_t j = 0; j < count; j++) {  /* the objects and bounds, with the GIL */
        int64_t k = order[lo + j];
        if (k < 0 || k >= n) {
            PyErr_Format(PyExc_ValueError, "preads: order[%zd] is out of range", lo + j);
            goto done;
        }
        PyObject *o = PyList_GET_ITEM(outs, k);
        if (!PyBytes_CheckExact(o)) {
            PyErr_SetString(PyExc_TypeError, "preads: outs must hold bytes from blank()");
            goto done;
        }
        int64_t w = which[k], s = st[k], size = PyBytes_GET_SIZE(o);
        if (w < 0 || w >= m) {
            PyErr_Format(PyExc_ValueError, "preads: item %lld names no file", (long long)k);
            goto done;
        }
        /* compared before any arithmetic: spans come from corrupt files too */
        if (s < 0 || size > INT64_MAX - frame || s > INT64_MAX - frame - size) {
            PyErr_Format(PyExc_ValueError, "preads: item %lld lies past any file",
                         (long long)k);
            goto done;
        }
        items[j] = (Item){fds[w], s, size, (unsigned char *)PyBytes_AS_STRING(o), k};
    }
    Py_ssize_t bad;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = read_items(items, count, header, footer, verify, max_gap, frames, failed, gap_buf,
                    &bad);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        PyErr_SetFromErrno(PyExc_OSError);
    else
        result = PyLong_FromSsize_t(bad);
done:
    PyMem_Free(gap_buf);
    PyMem_Free(failed);
    PyMem_Free(frames);
    PyMem_Free(items);
    PyMem_Free(fds);
    PyBuffer_Release(&ov);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&wv);
    return result;
#endif
}
