/* Batches without a Python object per record, and big batches filled on several threads.
 *
 * pack   framed records -> their payloads back to back in one buffer + offsets (the layout
 *        of an Arrow binary column), checked, with the GIL released
 * slices framed records -> a list of payloads, checked first without the GIL
 * blank  bytes objects of given sizes, not yet filled (for fill)
 * fill   framed records checked and their payloads copied into those bytes objects with
 *        the GIL released (copy and CRC in one pass), so that a few threads fill one big
 *        batch at once
 * hw_crc, hw_crc32c   the CRC32C instruction's switch, and the instruction itself (tests) */
#include "native.h"
#include "framing.h"
#include "hwcrc.h"

#include "threads.h"

int hw_crc_on = 0;

/* A writable 1-d int64 vector (numpy int64 array). */
int get_i64_out(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_ND | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return -1;
    const char *f = view->format;
    if (view->itemsize != 8 || view->ndim != 1 || f == NULL ||
        (strcmp(f, "q") && strcmp(f, "l") && strcmp(f, "<q") && strcmp(f, "=q") &&
         strcmp(f, "<l") && strcmp(f, "=l"))) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be a writable 1-d int64 array", what);
        return -1;
    }
    return 0;
}

/* Whether the framed record at src[s:e) is whole: inside len bytes, with its framing, and
 * with the stored length of its span's payload (`size`). */
static inline int framed_ok(const unsigned char *src, Py_ssize_t len, int64_t s, int64_t e,
                            Py_ssize_t frame, int64_t *size) {
    if (s < 0 || e < s || e > (int64_t)len || e - s < frame)
        return 0;
    *size = e - s - frame;
    return load_le(src + s, 8) == (uint64_t)*size;
}

/* The first of the g (<= 3) TFRecords at p[] (payloads of sz[] bytes with computed data
 * CRCs c[]) whose length or data CRC is wrong, as k + its position; or -1. */
static Py_ssize_t crcs_wrong(const unsigned char *const p[3], const size_t sz[3],
                             const uint32_t c[3], int g, Py_ssize_t header, Py_ssize_t k) {
    for (int j = 0; j < g; j++)
        if ((uint32_t)load_le(p[j] + 8, 4) != hw_mask(hw_crc32c(p[j], 8)) ||
            (uint32_t)load_le(p[j] + header + sz[j], 4) != hw_mask(c[j]))
            return k + j;
    return -1;
}

/* The CRCs of the g (<= 3) TFRecords at p[] with payloads of sz[] bytes: -1 when they all
 * match, else the position (0..g-1) of the first that does not. */
static int crcs_bad(const unsigned char *const p[3], const size_t sz[3], int g,
                    Py_ssize_t header) {
    uint32_t c[3];
    if (g == 3) {
        const unsigned char *q[3] = {p[0] + header, p[1] + header, p[2] + header};
        hw_crc32c_x3(q, sz, c);
    } else {
        for (int i = 0; i < g; i++)
            c[i] = hw_crc32c(p[i] + header, sz[i]);
    }
    return (int)crcs_wrong(p, sz, c, g, header, 0);
}

/* check_all()'s arguments, and its total. */
typedef struct {
    const unsigned char *src;
    Py_ssize_t len;
    const int64_t *st, *en;
    Py_ssize_t n, header, footer;
    int verify;
    int64_t total;
} CheckArgs;

/* check_all() unguarded. */
static Py_ssize_t check_body(void *arg) {
    CheckArgs *a = (CheckArgs *)arg;
    const unsigned char *src = a->src;
    const int64_t *st = a->st, *en = a->en;
    Py_ssize_t len = a->len, n = a->n, header = a->header, footer = a->footer;
    int verify = a->verify;
    const unsigned char *p[3];
    size_t sz[3];
    Py_ssize_t at[3];
    int g = 0;
    a->total = 0;
    for (Py_ssize_t k = 0; k <= n; k++) {
        int64_t size = 0;
        int whole = k < n && framed_ok(src, len, st[k], en[k], header + footer, &size);
        if (whole) {
            a->total += size;
            if (!verify)
                continue;
            p[g] = src + st[k];
            sz[g] = (size_t)size;
            at[g++] = k;
            if (g < 3)
                continue;
        }
        if (g) {  /* the pending records come first: check them before reporting k */
            int bad = crcs_bad(p, sz, g, header);
            if (bad >= 0)
                return at[bad];
            g = 0;
        }
        if (!whole && k < n)
            return k;
    }
    return -1;
}

/* Check records [0, n) of src (framing, lengths, and with verify their CRCs, three records
 * at a time) in a guarded call; the total payload bytes go to *total. Returns -1, the first
 * failing k, or GUARD_FAULT (src is a map whose pages are gone). Needs no GIL. */
Py_ssize_t check_all(const unsigned char *src, Py_ssize_t len, const int64_t *st,
                     const int64_t *en, Py_ssize_t n, Py_ssize_t header, Py_ssize_t footer,
                     int verify, int64_t *total) {
    CheckArgs args = {src, len, st, en, n, header, footer, verify, 0};
    Py_ssize_t bad = guard_run(check_body, &args);
    *total = args.total;
    return bad;
}

/* The arguments pack() and slices() share; 0, or -1 with an exception set. */
typedef struct {
    Py_buffer buf, sv, ev;
    Py_ssize_t header, footer, n;
    int verify;
} Run;

static int run_open(Run *r, PyObject *buf_obj, PyObject *starts_obj, PyObject *ends_obj) {
    if (framing_refused(r->header, r->footer, r->verify, "CRCs are checked here only with "
                        "the CRC32C instruction (see hw_crc())") < 0)
        return -1;
    if (PyObject_GetBuffer(buf_obj, &r->buf, PyBUF_SIMPLE) < 0)
        return -1;
    if (get_i64(starts_obj, &r->sv, "starts") < 0) {
        PyBuffer_Release(&r->buf);
        return -1;
    }
    if (get_i64(ends_obj, &r->ev, "ends") < 0) {
        PyBuffer_Release(&r->sv);
        PyBuffer_Release(&r->buf);
        return -1;
    }
    r->n = r->sv.shape[0];
    if (r->ev.shape[0] != r->n) {
        PyErr_SetString(PyExc_ValueError, "starts and ends differ in length");
        PyBuffer_Release(&r->ev);
        PyBuffer_Release(&r->sv);
        PyBuffer_Release(&r->buf);
        return -1;
    }
    return 0;
}

static void run_close(Run *r) {
    PyBuffer_Release(&r->ev);
    PyBuffer_Release(&r->sv);
    PyBuffer_Release(&r->buf);
}

const char pack_doc[] =
"pack(buf, starts, ends, header_size, footer_size, verify, out, offsets, base) -> int\n\n"
"Payloads of the framed records at buf[starts[k]:ends[k]] (int64 arrays) copied back to back\n"
"into the writable buffer out from position base; offsets (writable int64, len(starts) + 1)\n"
"receives each payload's position in out and the end of the last. Each record is checked as\n"
"in cut(); with verify (TFRecord) its CRCs are checked with the CPU's CRC32C instruction, so\n"
"verify needs hw_crc() to be True. Returns -1, or the position k of the first record that\n"
"fails a check or lies outside buf (out then holds some of the payloads: discard it). The\n"
"GIL is released throughout.";

static Py_ssize_t first_bad(const unsigned char *const p[3], const size_t sz[3],
                            const uint32_t c[3], int g, Py_ssize_t header, int verify,
                            Py_ssize_t k);

/* pack()'s copies: its arguments and results. */
typedef struct {
    const Run *r;
    unsigned char *dst;
    int64_t *offs;
    int64_t base, room;
    int full;
} PackJob;

/* pack()'s first pass: every record's framing and place in out (cheap: its header only).
 * Returns the records before the first whose framing fails (*framing_bad set) or whose
 * payload does not fit; *pos is where the last placed payload ends. */
static Py_ssize_t pack_place(const PackJob *job, int64_t *pos, int *framing_bad) {
    const Run *r = job->r;
    const int64_t *st = (const int64_t *)r->sv.buf, *en = (const int64_t *)r->ev.buf;
    const unsigned char *src = (const unsigned char *)r->buf.buf;
    int64_t *offs = job->offs, base = job->base, at = base, room = job->room;
    Py_ssize_t frame = r->header + r->footer;
    for (Py_ssize_t k = 0; k < r->n; k++) {
        int64_t size;
        if (!framed_ok(src, r->buf.len, st[k], en[k], frame, &size)) {
            *framing_bad = 1;
            *pos = at;
            return k;
        }
        if (size > room - (at - base)) {
            *pos = at;
            return k;
        }
        offs[k] = at;
        at += size;
    }
    *pos = at;
    return r->n;
}

/* pack()'s copies of records k..k+2 (with verify, their CRCs computed as they are copied,
 * into c): -1 or the first that fails. */
static inline Py_ssize_t pack_three(const PackJob *job, Py_ssize_t k, uint32_t c[3]) {
    const Run *r = job->r;
    const int64_t *st = (const int64_t *)r->sv.buf, *en = (const int64_t *)r->ev.buf;
    const unsigned char *src = (const unsigned char *)r->buf.buf;
    const unsigned char *p[3], *q[3];
    unsigned char *d[3];
    size_t sz[3];
    for (int j = 0; j < 3; j++) {
        p[j] = src + st[k + j];
        q[j] = p[j] + r->header;
        d[j] = job->dst + job->offs[k + j];
        sz[j] = (size_t)(en[k + j] - st[k + j] - r->header - r->footer);
    }
    if (r->verify)
        hw_copy_crc32c_x3(d, q, sz, c);
    else
        for (int j = 0; j < 3; j++)
            memcpy(d[j], q[j], sz[j]);
    return first_bad(p, sz, c, 3, r->header, r->verify, k);
}

/* pack()'s copy of record k alone (the last one or two): -1 or k when it fails. */
static inline Py_ssize_t pack_one(const PackJob *job, Py_ssize_t k, uint32_t c[3]) {
    const Run *r = job->r;
    const int64_t *st = (const int64_t *)r->sv.buf, *en = (const int64_t *)r->ev.buf;
    const unsigned char *p[3] = {(const unsigned char *)r->buf.buf + st[k], NULL, NULL};
    size_t sz[3] = {(size_t)(en[k] - st[k] - r->header - r->footer), 0, 0};
    if (r->verify)
        c[0] = hw_copy_crc32c(job->dst + job->offs[k], p[0] + r->header, sz[0]);
    else
        memcpy(job->dst + job->offs[k], p[0] + r->header, sz[0]);
    return first_bad(p, sz, c, 1, r->header, r->verify, k);
}

/* pack()'s passes over the records, without the GIL (in a guarded call): -1 or the first
 * failing record. */
static Py_ssize_t pack_body(void *arg) {
    PackJob *job = (PackJob *)arg;
    const Run *r = job->r;
    /* first every record's framing and place, then the copies with their CRCs three records
     * at a time, each source read once (hw_copy_crc32c_x3: three CRC streams run about three
     * times as fast as one, which took a third of a copy's time for 100 KB payloads) */
    int64_t pos;
    int framing_bad = 0;
    Py_ssize_t end = pack_place(job, &pos, &framing_bad), bad = -1, k = 0;
    uint32_t c[3] = {0, 0, 0};
    for (; bad < 0 && k + 3 <= end; k += 3)
        bad = pack_three(job, k, c);
    for (; bad < 0 && k < end; k++)
        bad = pack_one(job, k, c);
    if (bad < 0 && end < r->n) {
        if (framing_bad)
            bad = end;
        else
            job->full = 1;
    }
    if (bad < 0 && !job->full)
        job->offs[r->n] = pos;
    return bad;
}

PyObject *pack(PyObject *self, PyObject *args) {
    PyObject *buf_obj, *starts_obj, *ends_obj, *out_obj, *offs_obj;
    Py_ssize_t base;
    Run r;
    if (!PyArg_ParseTuple(args, "OOOnnpOOn:pack", &buf_obj, &starts_obj, &ends_obj, &r.header,
                          &r.footer, &r.verify, &out_obj, &offs_obj, &base))
        return NULL;
    if (run_open(&r, buf_obj, starts_obj, ends_obj) < 0)
        return NULL;
    PyObject *result = NULL;
    Py_buffer out, ov;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_SIMPLE | PyBUF_WRITABLE) < 0)
        goto no_out;
    if (get_i64_out(offs_obj, &ov, "offsets") < 0)
        goto no_offsets;
    if (ov.shape[0] != r.n + 1 || base < 0 || base > out.len) {
        PyErr_SetString(PyExc_ValueError, "pack: offsets must hold len(starts) + 1 items and "
                        "base must lie within out");
        goto done;
    }
    if (guard_ensure() != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    PackJob job = {&r, (unsigned char *)out.buf, (int64_t *)ov.buf, base, out.len - base, 0};
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = guard_run(pack_body, &job);
    Py_END_ALLOW_THREADS
    if (bad == GUARD_FAULT) {
        map_fault(r.buf.obj);
        goto done;
    }
    if (job.full) {
        PyErr_SetString(PyExc_ValueError, "pack: out is too small for the payloads");
        goto done;
    }
    result = PyLong_FromSsize_t(bad);
done:
    PyBuffer_Release(&ov);
no_offsets:
    PyBuffer_Release(&out);
no_out:
    run_close(&r);
    return result;
}

/* Batches of at least this many records are checked on a second thread by slices(). */
#define SLICES_PARALLEL 512

const char slices_doc[] =
"slices(buf, starts, ends, header_size, footer_size, verify, parallel=False) -> list | int\n\n"
"As cut(): the payloads of the framed records at buf[starts[k]:ends[k]] as a list of bytes,\n"
"or the position k of the first record that fails a check or lies outside buf; with verify,\n"
"the CRCs are checked three at a time with the CPU's CRC32C instruction (verify needs\n"
"hw_crc() to be True). The records are checked without the GIL, then the objects made\n"
"(without verify, their framing is checked as they are made);\n"
"with parallel (for a machine with a core to spare), a big batch is checked on a second\n"
"thread while this one makes the objects, and the list is returned only once every check\n"
"passed.";

typedef struct {
    Run *r;
    Py_ssize_t bad;
} CheckJob;

/* check_all() over a whole Run (no GIL needed): -1, the first failing record, or
 * GUARD_FAULT. */
static Py_ssize_t check_run(const Run *r) {
    int64_t total;
    return check_all((const unsigned char *)r->buf.buf, r->buf.len, (const int64_t *)r->sv.buf,
                     (const int64_t *)r->ev.buf, r->n, r->header, r->footer, r->verify,
                     &total);
}

static void check_job(void *arg) {
    CheckJob *job = (CheckJob *)arg;
    job->bad = check_run(job->r);
}

static void keep_batch_memory(Py_ssize_t total);

/* make_items()'s copies: the records' spans, and the objects they go to. */
typedef struct {
    const unsigned char *src;
    const int64_t *st;
    Py_ssize_t header, n;
    PyObject **items;
} MakeJob;

/* make_items()'s copies (in one guarded call; no Python call: the objects exist): -1, or the
 * first record whose stored length is not its span's. */
static Py_ssize_t make_body(void *arg) {
    const MakeJob *job = (const MakeJob *)arg;
    for (Py_ssize_t k = 0; k < job->n; k++) {
        const unsigned char *p = job->src + job->st[k];
        Py_ssize_t size = PyBytes_GET_SIZE(job->items[k]);
        if (load_le(p, 8) != (uint64_t)size)
            return k;
        memcpy(PyBytes_AS_STRING(job->items[k]), p + job->header, (size_t)size);
    }
    return -1;
}

/* The list of payload bytes objects of the whole records, or NULL on an error (set; a map
 * whose pages are gone: StaleIndexError). *made tells how many records were whole (from the
 * first); the list is the caller's to use only when they all were (list_or_bad). Checking
 * the contents is the caller's; a record whole for its check may not be whole here if the
 * mapped file changed in between, hence *made. The objects are made first, then filled in
 * one guarded call (a guarded call per record cost 5% of slices()). */
static PyObject *make_items(Run *r, Py_ssize_t *made) {
    const int64_t *st = (const int64_t *)r->sv.buf, *en = (const int64_t *)r->ev.buf;
    Py_ssize_t frame = r->header + r->footer, len = r->buf.len, inside = 0;
    /* a run in file order: about its payload bytes (spans are compared before they are
     * subtracted: they come from corrupt files too) */
    if (r->n > 0 && st[0] >= 0 && en[r->n - 1] > st[0] && en[r->n - 1] <= (int64_t)len)
        keep_batch_memory((Py_ssize_t)(en[r->n - 1] - st[0]));
    *made = 0;
    PyObject *result = PyList_New(r->n);
    for (; result != NULL && inside < r->n; inside++) {  /* spans inside the buffer */
        int64_t s = st[inside], e = en[inside];
        if (s < 0 || e < s || e > (int64_t)len || e - s < frame)
            break;
        PyObject *item = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(e - s - frame));
        if (item == NULL)
            Py_CLEAR(result);
        else
            PyList_SET_ITEM(result, inside, item);
    }
    if (result == NULL)
        return NULL;
    MakeJob job = {(const unsigned char *)r->buf.buf, st, r->header, inside,
                   ((PyListObject *)result)->ob_item};
    Py_ssize_t bad = guard_run(make_body, &job);
    if (bad == GUARD_FAULT) {
        Py_DECREF(result);
        return map_fault(r->buf.obj);
    }
    *made = bad < 0 ? inside : bad;
    return result;
}

/* The result of slices() from its objects and the first failing record (-1: none;
 * GUARD_FAULT: the map's pages are gone). */
static PyObject *list_or_bad(Run *r, PyObject *result, Py_ssize_t made, Py_ssize_t n,
                             Py_ssize_t bad) {
    if (bad == GUARD_FAULT) {
        Py_XDECREF(result);
        return PyErr_Occurred() ? NULL : map_fault(r->buf.obj);
    }
    if (result == NULL)
        return NULL;
    if (bad < 0 && made < n)
        bad = made;
    if (bad < 0)
        return result;
    Py_DECREF(result);
    return PyLong_FromSsize_t(bad);
}

/* slices() of a big batch: checked on a second thread while this one makes the objects;
 * NULL without an exception when no thread could be started. */
static PyObject *slices_parallel(Run *r) {
    CheckJob job = {r, -1};
    thread_t thread;
    if (thread_start(&thread, check_job, &job) != 0)
        return NULL;
    Py_ssize_t made;
    PyObject *result = make_items(r, &made);
    Py_BEGIN_ALLOW_THREADS
    thread_join(&thread);
    Py_END_ALLOW_THREADS
    return list_or_bad(r, result, made, r->n, job.bad);
}

PyObject *slices(PyObject *self, PyObject *args) {
    PyObject *buf_obj, *starts_obj, *ends_obj;
    int parallel = 0;
    Run r;
    if (!PyArg_ParseTuple(args, "OOOnnp|p:slices", &buf_obj, &starts_obj, &ends_obj,
                          &r.header, &r.footer, &r.verify, &parallel))
        return NULL;
    if (run_open(&r, buf_obj, starts_obj, ends_obj) < 0)
        return NULL;
    PyObject *result = NULL;
    if (guard_ensure() != 0) {
        run_close(&r);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (parallel && r.verify && r.n >= SLICES_PARALLEL)
        result = slices_parallel(&r);
    if (!r.verify) {  /* the framing only: make_items checks it as it goes */
        Py_ssize_t made = 0;
        result = make_items(&r, &made);
        result = list_or_bad(&r, result, made, r.n, -1);
    } else if (result == NULL && !PyErr_Occurred()) {  /* serially: checked, then made */
        Py_ssize_t bad, made = 0;
        Py_BEGIN_ALLOW_THREADS
        bad = check_run(&r);
        Py_END_ALLOW_THREADS
        if (bad == GUARD_FAULT) {
            result = list_or_bad(&r, NULL, 0, r.n, bad);
        } else if (bad >= 0) {
            result = PyLong_FromSsize_t(bad);
        } else {
            result = make_items(&r, &made);  /* before reading made */
            result = list_or_bad(&r, result, made, r.n, -1);
        }
    }
    run_close(&r);
    return result;
}

const char blank_doc[] =
"blank(sizes) -> list[bytes]\n\n"
"New bytes objects of sizes[k] bytes (an int64 array) whose contents are not set yet: fill()\n"
"must fill them before anything else sees them.";

#if defined(__GLIBC__)
#include <malloc.h>
/* The biggest block whose free makes glibc raise its thresholds (DEFAULT_MMAP_THRESHOLD_MAX
 * on 64-bit systems). */
#define GLIBC_DYNAMIC_MAX ((size_t)32 << 20)

/* Let glibc keep the memory of a batch of `total` bytes after the batch is freed.
 *
 * A big batch's bytes objects (each under glibc's 128 KiB mmap threshold) come from the
 * heap, and when they are freed glibc hands the top of the heap back to the system once more
 * than its trim threshold (128 KiB until it adapts) lies free there: the next batch then
 * takes a page fault per 4 KiB. In a fresh process, 256 records of 100 KB took 6,185 faults
 * per batch and ran at 14k records/s; with this, none and 64-75k records/s. glibc raises
 * both thresholds itself when it frees a block it had mapped (its dynamic mmap threshold:
 * the trim threshold becomes twice that block), as it does in any process that frees a
 * big numpy array; here one such block of half a batch (at most 32 MiB, glibc's cap) is
 * freed, once per size. Thresholds the process set itself (mallopt, MALLOC_TRIM_THRESHOLD_)
 * stay: glibc then ignores such frees. Called with the GIL held. */
static void keep_batch_memory(Py_ssize_t total) {
    static size_t primed = 0;
    size_t want = (size_t)total / 2 + ((size_t)1 << 20);
    if (want > GLIBC_DYNAMIC_MAX)
        want = GLIBC_DYNAMIC_MAX;
    if (want <= primed || total < ((Py_ssize_t)1 << 21))
        return;
    volatile char *block = malloc(want);  /* mapped: above the threshold it has now */
    if (block != NULL) {
        block[0] = 0;  /* used, so that the pair is not optimized away */
        free((void *)block);
    }
    primed = want;
}
#else
static void keep_batch_memory(Py_ssize_t total) { (void)total; }
#endif

PyObject *blank(PyObject *self, PyObject *arg) {
    Py_buffer sv;
    if (get_i64(arg, &sv, "sizes") < 0)
        return NULL;
    const int64_t *sizes = (const int64_t *)sv.buf;
    Py_ssize_t n = sv.shape[0];
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        if (sizes[k] > 0 && add_size(total, (Py_ssize_t)sizes[k], &total) < 0)
            total = PY_SSIZE_T_MAX;
    keep_batch_memory(total);
    PyObject *list = PyList_New(n);
    for (Py_ssize_t k = 0; list != NULL && k < n; k++) {
        PyObject *item = NULL;
        if (sizes[k] < 0 || sizes[k] > PY_SSIZE_T_MAX / 2)
            PyErr_SetString(PyExc_ValueError, "blank: a size is negative or too big");
        else
            item = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizes[k]);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, k, item);
    }
    PyBuffer_Release(&sv);
    return list;
}

const char fill_doc[] =
"fill(bufs, which, starts, outs, lo, hi, header_size, footer_size, verify) -> int\n\n"
"For k in [lo, hi): the framed record at bufs[which[k]][starts[k]:] whose payload is\n"
"len(outs[k]) bytes is checked (inside its buffer, its stored length; with verify, a\n"
"TFRecord's length and data CRCs, which needs hw_crc()) and its payload copied into\n"
"outs[k], a bytes object from blank() that nothing else sees yet. Copies and CRCs are one\n"
"pass over the source, three records at a time. which and starts are int64 arrays. The GIL\n"
"is released for the pass, so threads can fill parts of one list at once. Returns -1, or\n"
"the first k whose record fails a check (outs is then partly filled: discard it).\n"
"outs may instead be an int64 array of payload sizes: the records are then checked in\n"
"place, and nothing is copied. verify=2 checks a TFRecord's length CRC but not its data\n"
"CRC (the caller checks the payload in its own pass). Raises ValueError when Python code\n"
"the call ran (a buffer's export) shortened outs.";

/* fill()'s verify that checks a TFRecord's length CRC but leaves its data CRC to the caller
 * (which sums the payload in a pass of its own: the first open of a TFDS dataset). */
#define FILL_LENGTH_CRC 2

/* The first of records k..k+g-1 (g <= 3, payloads copied with CRCs c[]) whose stored
 * length or (with verify) CRCs are wrong, or -1. */
static Py_ssize_t first_bad(const unsigned char *const p[3], const size_t sz[3],
                            const uint32_t c[3], int g, Py_ssize_t header, int verify,
                            Py_ssize_t k) {
    for (int j = 0; j < g; j++)  /* record by record: the first bad one in order */
        if (load_le(p[j], 8) != (uint64_t)sz[j] ||
            (verify == FILL_LENGTH_CRC &&
             (uint32_t)load_le(p[j] + 8, 4) != hw_mask(hw_crc32c(p[j], 8))) ||
            (verify == 1 && crcs_wrong(p + j, sz + j, c + j, 1, header, k + j) >= 0))
            return k + j;
    return -1;
}

/* fill()'s pass over records [lo, end) and what it needs. */
typedef struct {
    unsigned char **dst;
    const unsigned char **src;
    const size_t *sizes;
    Py_ssize_t lo, end, hi, header;
    int verify, copy;
} FillJob;

/* fill()'s records k..k+2 copied and checked (with verify, their CRCs computed as they are
 * copied, into c): -1 or the first that fails. */
static inline Py_ssize_t fill_three(const FillJob *job, Py_ssize_t k, uint32_t c[3]) {
    Py_ssize_t i = k - job->lo, header = job->header;
    unsigned char *d[3] = {job->dst[i], job->dst[i + 1], job->dst[i + 2]};
    const unsigned char *p[3] = {job->src[i], job->src[i + 1], job->src[i + 2]};
    const unsigned char *q[3] = {p[0] + header, p[1] + header, p[2] + header};
    if (job->verify == 1 && job->copy)
        hw_copy_crc32c_x3(d, q, job->sizes + i, c);
    else if (job->verify == 1)
        hw_crc32c_x3(q, job->sizes + i, c);
    else if (job->copy)
        for (int j = 0; j < 3; j++)
            memcpy(d[j], q[j], job->sizes[i + j]);
    return first_bad(p, job->sizes + i, c, 3, header, job->verify, k);
}

/* fill()'s record k alone (the last one or two): -1 or k when it fails. */
static inline Py_ssize_t fill_one(const FillJob *job, Py_ssize_t k, uint32_t c[3]) {
    Py_ssize_t i = k - job->lo, header = job->header;
    const unsigned char *p[3] = {job->src[i], NULL, NULL};
    size_t size = job->sizes[i];
    if (job->verify == 1 && job->copy)
        c[0] = hw_copy_crc32c(job->dst[i], p[0] + header, size);
    else if (job->verify == 1)
        c[0] = hw_crc32c(p[0] + header, size);
    else if (job->copy)
        memcpy(job->dst[i], p[0] + header, size);
    return first_bad(p, job->sizes + i, c, 1, header, job->verify, k);
}

/* fill()'s copies and checks, without the GIL (in a guarded call): -1 or the first failing
 * record. */
static Py_ssize_t fill_body(void *arg) {
    const FillJob job = *(const FillJob *)arg;  /* a local copy: copies cannot change it */
    Py_ssize_t k = job.lo, bad = -1;
    uint32_t c[3] = {0, 0, 0};
    for (; bad < 0 && k + 3 <= job.end; k += 3)
        bad = fill_three(&job, k, c);
    for (; bad < 0 && k < job.end; k++)
        bad = fill_one(&job, k, c);
    if (bad < 0 && job.end < job.hi)
        bad = job.end;
    return bad;
}

/* fill()'s arguments and what it holds while it runs (all released by fill_close). */
typedef struct {
    PyObject *bufs, *outs;
    Py_ssize_t lo, hi, header, footer;
    int verify;
    int copy;               /* outs is a list of bytes objects; else an array of sizes */
    PyObject *held_bufs;    /* bufs as it is when the call starts (snapshot.c) */
    PyObject **objs;        /* (copy) the bytes objects filled, referenced (held of them) */
    Py_ssize_t held;
    Py_buffer wv, sv, zv;   /* which, starts, and (not copy) the sizes */
    Py_ssize_t m, got;      /* buffers in bufs, and how many of them are held in views */
    Py_buffer *views;
    unsigned char **dst;    /* per record k in [lo, hi): at k - lo */
    const unsigned char **src;
    size_t *sizes;
} Fill;

/* bufs held as it is now, before any Python code runs (an array's or a buffer's export may
 * change it); outs is read after the last such code (fill_place). 0, or -1 with an
 * exception set. */
static int fill_snapshot(Fill *f) {
    f->copy = PyList_Check(f->outs);  /* else: sizes, checked in place */
    f->held_bufs = snapshot_list(f->bufs, "fill: bufs");
    return f->held_bufs == NULL ? -1 : 0;
}

/* fill()'s int64 arrays: which, starts and, when outs is not a list, the payload sizes.
 * 0, or -1 with an exception set. */
static int fill_arrays(Fill *f, PyObject *which_obj, PyObject *starts_obj) {
    if (get_i64(which_obj, &f->wv, "which") < 0)
        return -1;
    if (get_i64(starts_obj, &f->sv, "starts") < 0)
        return -1;
    if (!f->copy && get_i64(f->outs, &f->zv, "fill: outs") < 0)
        return -1;
    return 0;
}

/* fill()'s buffers held (after lo and hi are checked against the arrays) and its maps'
 * guard installed: 0, or -1 with an exception set. */
static int fill_hold(Fill *f) {
    Py_ssize_t nouts = f->copy ? PyList_GET_SIZE(f->outs) : f->zv.shape[0];
    f->m = PyTuple_GET_SIZE(f->held_bufs);
    f->views = PyMem_Calloc(f->m ? f->m : 1, sizeof(Py_buffer));
    if (f->views == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (f->lo < 0 || f->hi < f->lo || f->hi > nouts || f->hi > f->wv.shape[0] ||
        f->hi > f->sv.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "fill: lo and hi must lie within the arrays");
        return -1;
    }
    for (; f->got < f->m; f->got++)
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(f->held_bufs, f->got), &f->views[f->got],
                               PyBUF_SIMPLE) < 0)
            return -1;
    if (guard_ensure() != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

/* Room for fill()'s destinations, sources and sizes: 0, or -1 with MemoryError set. */
static int fill_alloc(Fill *f) {
    Py_ssize_t count = f->hi - f->lo ? f->hi - f->lo : 1;
    f->dst = PyMem_Malloc(count * sizeof(*f->dst));
    f->src = PyMem_Malloc(count * sizeof(*f->src));
    f->sizes = PyMem_Malloc(count * sizeof(*f->sizes));
    f->objs = f->copy ? PyMem_Malloc(count * sizeof(*f->objs)) : NULL;
    if (f->dst == NULL || f->src == NULL || f->sizes == NULL || (f->copy && f->objs == NULL)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Each record's destination, source and size, with the GIL (the objects and bounds first):
 * the first record that lies outside its buffer (hi: none), or -1 with an exception set. */
static Py_ssize_t fill_place(Fill *f) {
    const int64_t *which = (const int64_t *)f->wv.buf, *st = (const int64_t *)f->sv.buf;
    const Py_ssize_t lo = f->lo, hi = f->hi, frame = f->header + f->footer, m = f->m;
    const int copy = f->copy;
    for (Py_ssize_t k = lo; k < hi; k++) {
        PyObject *o = copy ? PyList_GET_ITEM(f->outs, k) : NULL;
        if (copy && !PyBytes_CheckExact(o)) {
            PyErr_SetString(PyExc_TypeError, "fill: outs must hold bytes from blank()");
            return -1;
        }
        int64_t j = which[k], s = st[k];
        int64_t size = copy ? PyBytes_GET_SIZE(o) : ((const int64_t *)f->zv.buf)[k];
        if (size < 0) {
            PyErr_Format(PyExc_ValueError, "fill: item %zd has a negative size", k);
            return -1;
        }
        if (j < 0 || j >= m) {
            PyErr_Format(PyExc_ValueError, "fill: item %zd names no buffer", k);
            return -1;
        }
        int64_t len = (int64_t)f->views[j].len;
        if (s < 0 || size > len || s > len - size - frame)
            return k;
        if (copy)
            f->objs[f->held++] = Py_NewRef(o);
        f->dst[k - lo] = copy ? (unsigned char *)PyBytes_AS_STRING(o) : NULL;
        f->src[k - lo] = (const unsigned char *)f->views[j].buf + s;
        f->sizes[k - lo] = (size_t)size;
    }
    return hi;
}

/* StaleIndexError naming the file of the buffer whose pages were gone in fill()'s pass. */
static void fill_fault(const Fill *f) {
    const unsigned char *at = (const unsigned char *)guard_last_fault();
    PyObject *owner = NULL;
    for (Py_ssize_t j = 0; j < f->m && owner == NULL; j++)
        if (at >= (const unsigned char *)f->views[j].buf &&
            at < (const unsigned char *)f->views[j].buf + f->views[j].len)
            owner = f->views[j].obj;
    map_fault(owner);
}

/* fill()'s pass over the records placed ([lo, end)), without the GIL: -1 or the first
 * failing record as an int, or NULL with an exception set. */
static PyObject *fill_run(const Fill *f, Py_ssize_t end) {
    FillJob job = {f->dst, f->src, f->sizes, f->lo, end, f->hi, f->header, f->verify,
                   f->copy};
    Py_ssize_t bad;
    Py_BEGIN_ALLOW_THREADS
    bad = guard_run(fill_body, &job);
    Py_END_ALLOW_THREADS
    if (bad == GUARD_FAULT) {  /* the buffer whose pages are gone names the file */
        fill_fault(f);
        return NULL;
    }
    return PyLong_FromSsize_t(bad);
}

static void fill_close(Fill *f) {
    PyMem_Free(f->sizes);
    PyMem_Free(f->src);
    PyMem_Free(f->dst);
    for (Py_ssize_t j = 0; j < f->got; j++)
        PyBuffer_Release(&f->views[j]);
    PyMem_Free(f->views);
    PyBuffer_Release(&f->zv);  /* (buffers never acquired are empty: releasing is a no-op) */
    PyBuffer_Release(&f->sv);
    PyBuffer_Release(&f->wv);
    for (Py_ssize_t k = 0; k < f->held; k++)
        Py_DECREF(f->objs[k]);
    PyMem_Free(f->objs);
    Py_XDECREF(f->held_bufs);
}

/* Everything fill() reads, held and checked, and each record placed: the records before the
 * first one outside its buffer (see fill_place), or -1 with an exception set. outs is read
 * after the last point where Python code can run (fill_hold's buffer exports), and each
 * bytes object filled is referenced while the GIL is released. */
static Py_ssize_t fill_prepare(Fill *f, PyObject *which_obj, PyObject *starts_obj) {
    if (fill_snapshot(f) < 0 || fill_arrays(f, which_obj, starts_obj) < 0 || fill_hold(f) < 0 ||
        fill_alloc(f) < 0)
        return -1;
    if (f->copy && f->hi > PyList_GET_SIZE(f->outs)) {  /* (checked before the exports) */
        PyErr_SetString(PyExc_ValueError, "fill: outs changed during the call (Python code it "
                        "ran, a buffer's export, removed items)");
        return -1;
    }
    return fill_place(f);
}

PyObject *fill(PyObject *self, PyObject *args) {
    PyObject *which_obj, *starts_obj;
    Fill f = {0};
    if (!PyArg_ParseTuple(args, "O!OOOnnnni:fill", &PyList_Type, &f.bufs, &which_obj,
                          &starts_obj, &f.outs, &f.lo, &f.hi, &f.header, &f.footer,
                          &f.verify))
        return NULL;
    if (f.verify < 0 || f.verify > FILL_LENGTH_CRC) {
        PyErr_SetString(PyExc_ValueError, "fill: verify must be 0, 1 or 2");
        return NULL;
    }
    if (framing_refused(f.header, f.footer, f.verify, "fill checks CRCs only with the "
                        "CRC32C instruction (see hw_crc())") < 0)
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t end = fill_prepare(&f, which_obj, starts_obj);
    if (end >= 0)
        result = fill_run(&f, end);
    fill_close(&f);
    return result;
}

const char hw_crc_doc[] =
"hw_crc(on=None) -> bool\n\n"
"Whether small payloads are checked with the CPU's CRC32C instruction (else through the\n"
"crc32c package); with on, switch it first (it stays off on a CPU without it).";

PyObject *switch_flag(PyObject *args, const char *format, int *flag, int supported) {
    PyObject *on = Py_None;
    if (!PyArg_ParseTuple(args, format, &on))
        return NULL;
    if (on != Py_None) {
        int v = PyObject_IsTrue(on);
        if (v < 0)
            return NULL;
        *flag = v && supported;
    }
    return PyBool_FromLong(*flag);
}

PyObject *hw_crc(PyObject *self, PyObject *args) {
    return switch_flag(args, "|O:hw_crc", &hw_crc_on, HAVE_HW_CRC && hw_crc_supported());
}

const char hw_crc32c_doc[] =
"hw_crc32c(buf) -> int | None\n\n"
"The CRC32C of buf by the CPU's instruction (None without it), for tests against the\n"
"crc32c package.";

PyObject *hw_crc32c_py(PyObject *self, PyObject *arg) {
    if (!(HAVE_HW_CRC && hw_crc_supported()))
        Py_RETURN_NONE;
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t c = hw_crc32c((const unsigned char *)b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}
