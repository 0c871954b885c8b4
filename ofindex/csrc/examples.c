/* Locating asked-for features in a batch of serialized Examples or OFRecords laid out the
 * way their writers lay them out (TensorFlow, OneFlow, protobuf's own serializer): one
 * map entry after the other, each `key, value{one list}`, each list packed. This is the
 * fast path of batched decoding for records whose layouts differ (a JPEG of another size
 * changes every enclosing length). Anything else (unknown fields, a list stored unpacked,
 * a non-ASCII key, an asked-for name twice, a length past its message) marks the record as
 * not handled here; the caller then decodes it on the careful path, which gives the answer
 * protobuf gives or words the error. Lists of features not asked for are not looked into,
 * as on the careful path. */
#include "protowire.h"
#include "hwcrc.h"

/* A bytes list [s, e): one length-delimited value per entry, each counted, the first one's
 * bytes in row[START, END); 0, or -1 when an entry is laid out otherwise. */
static int read_bytes_list(const unsigned char *base, const unsigned char *s,
                           const unsigned char *e, int64_t *row) {
    const unsigned char *p = s, *vs, *ve;
    int64_t count = 0;
    while (p < e) {
        if (*p++ != 0x0A || read_body(&p, e, &vs, &ve) < 0)
            return -1;
        if (!count) {
            row[START] = (int64_t)(vs - base);
            row[END] = (int64_t)(ve - base);
        }
        count++;
    }
    row[COUNT] = count;
    return 0;
}

/* The count of a packed run [vs, ve) of fixed-width values (how: '4' or '8'); 0, or -1 when
 * the run is not a whole number of them. */
static int count_fixed(const unsigned char *vs, const unsigned char *ve, char how,
                       int64_t *row) {
    Py_ssize_t width = how == '4' ? 4 : 8;
    if ((ve - vs) % width)
        return -1;
    row[COUNT] = (int64_t)((ve - vs) / width);
    return 0;
}

/* The count and first value of a packed run [vs, ve) of varints; 0, or -1 when the run does
 * not end on a varint's last byte. */
static int count_varint_run(const unsigned char *vs, const unsigned char *ve, int64_t *row) {
    uint64_t first = 0;
    const unsigned char *q = vs;
    int64_t count = count_varints(vs, ve);
    if (count < 0 || (count && read_varint(&q, ve, &first) < 0))
        return -1;
    row[VALUE] = (int64_t)first;
    row[COUNT] = count;
    return 0;
}

/* A numeric list [s, e): empty, or one packed run of fixed-width values or of varints; 0,
 * or -1 when laid out otherwise (unpacked, or in more than one run). */
static int read_packed_list(const unsigned char *base, const unsigned char *s,
                            const unsigned char *e, char how, int64_t *row) {
    const unsigned char *p = s, *vs, *ve;
    if (p == e)
        return 0;  /* an empty list */
    if (*p++ != 0x0A || read_body(&p, e, &vs, &ve) < 0 || p != e)
        return -1;  /* one packed run only */
    row[START] = (int64_t)(vs - base);
    row[END] = (int64_t)(ve - base);
    if (how == '4' || how == '8')
        return count_fixed(vs, ve, how, row);
    return count_varint_run(vs, ve, row);
}

int read_list(const unsigned char *base, const unsigned char *s, const unsigned char *e,
              char how, int64_t *row) {
    if (how != 'b' && how != '4' && how != '8' && how != 'v' && how != 'i')
        return -1;  /* a kind not known */
    row[START] = row[END] = row[LIST_START] = (int64_t)(s - base);
    row[LIST_END] = (int64_t)(e - base);
    row[COUNT] = row[VALUE] = 0;
    if (how == 'b')
        return read_bytes_list(base, s, e, row);
    return read_packed_list(base, s, e, how, row);
}

int get_names(PyObject *tuple, Names *names, const char *what) {
    Py_ssize_t k = PyTuple_GET_SIZE(tuple);
    names->k = k;
    names->ptr = PyMem_Malloc((k ? (size_t)k : 1) * sizeof(*names->ptr));
    names->len = PyMem_Malloc((k ? (size_t)k : 1) * sizeof(*names->len));
    if (names->ptr == NULL || names->len == NULL) {
        release_names(names);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *name = PyTuple_GET_ITEM(tuple, j);
        if (!PyBytes_Check(name)) {
            release_names(names);
            PyErr_Format(PyExc_TypeError, "%s: names must be bytes", what);
            return -1;
        }
        names->ptr[j] = PyBytes_AS_STRING(name);
        names->len[j] = PyBytes_GET_SIZE(name);
    }
    return 0;
}

void release_names(Names *names) {
    PyMem_Free(names->ptr);
    PyMem_Free(names->len);
    names->ptr = NULL;
    names->len = NULL;
    names->k = 0;
}

/* Whether name j holds the key [ks, ke). */
static inline int same_name(const Names *names, Py_ssize_t j, const unsigned char *ks,
                            const unsigned char *ke) {
    return names->len[j] == ke - ks && !memcmp(names->ptr[j], ks, (size_t)(ke - ks));
}

/* The name that the key [ks, ke) of map entry `entry` is: the index of the asked-for name
 * it holds, or names->k for none. The name matched by the same entry of the record before
 * (`guesses`, or NULL) is tried first, and the match is remembered for the next record. */
static inline Py_ssize_t match_name(const Names *names, const unsigned char *ks,
                                    const unsigned char *ke, Py_ssize_t *guesses,
                                    Py_ssize_t entry) {
    Py_ssize_t k = names->k;
    int remembered = guesses != NULL && entry < GUESSES;
    Py_ssize_t j = remembered ? guesses[entry] : k;
    if (j >= 0 && j < k && same_name(names, j, ks, ke))
        return j;
    for (j = 0; j < k; j++)
        if (same_name(names, j, ks, ke))
            break;
    if (remembered)
        guesses[entry] = j;
    return j;
}

int read_map(const unsigned char *base, const unsigned char *p, const unsigned char *end,
             const Family *fam, const Names *names, int64_t *rows, Py_ssize_t *guesses) {
    Py_ssize_t k = names->k;
    for (Py_ssize_t entry = 0; p < end; entry++) {
        const unsigned char *ks, *ke, *vs, *ve, *ls, *le;
        Py_ssize_t kind;
        if (read_entry(&p, end, &ks, &ke, &vs, &ve) < 0)
            return -1;
        Py_ssize_t j = match_name(names, ks, ke, guesses, entry);
        if (vs == ve) {  /* a Feature with no list set */
            if (j < k)
                return -1;
            continue;
        }
        if (read_feature(vs, ve, fam->max_kind, &kind, &ls, &le) < 0)
            return -1;
        if (j == k)
            continue;  /* not asked for: not looked into */
        int64_t *row = rows + j * SLOTS;
        if (row[KIND])
            return -1;  /* asked for twice: protobuf merges, the careful path too */
        row[KIND] = kind;
        if (read_list(base, ls, le, fam->kinds[kind], row) < 0)
            return -1;
    }
    return 0;
}

void release_records(Records *r) {
    for (Py_ssize_t j = 0; j < r->held; j++)
        PyBuffer_Release(&r->views[j]);
    Py_XDECREF(r->items);
    PyMem_Free(r->views);
    PyMem_Free(r->ptr);
    PyMem_Free(r->len);
    memset(r, 0, sizeof(*r));
}

/* The records as the bytes objects of the list, referenced (by the snapshot) while they
 * are read, which keeps them alive as a buffer would (holding 10,000 records: 64 us, 128 us
 * acquiring and releasing a buffer of each, on the loaded 2-core VM; a batch of 8 features
 * makes about 7 such calls); 0, or -1 with an exception set (the caller releases). */
static int hold_bytes(Records *r, const char *what) {
    for (Py_ssize_t i = 0; i < r->n; i++) {
        PyObject *b = PyTuple_GET_ITEM(r->items, i);
        if (!PyBytes_Check(b)) {
            PyErr_Format(PyExc_TypeError, "%s: records must be bytes", what);
            return -1;
        }
        r->ptr[i] = (const unsigned char *)PyBytes_AS_STRING(b);
        r->len[i] = PyBytes_GET_SIZE(b);
    }
    return 0;
}

/* The records as spans (which, starts, ends: int64 vectors of r->n) of the buffers of the
 * list, each acquired while they are read; 0, or -1 with an exception set (the caller
 * releases). */
static int hold_spans(const int64_t *which, const int64_t *starts, const int64_t *ends,
                      Records *r, const char *what) {
    Py_ssize_t m = PyTuple_GET_SIZE(r->items);
    r->views = PyMem_Calloc(m ? m : 1, sizeof(Py_buffer));
    if (r->views == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (; r->held < m; r->held++)
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(r->items, r->held), &r->views[r->held],
                               PyBUF_SIMPLE) < 0)
            return -1;
    for (Py_ssize_t i = 0; i < r->n; i++) {
        int64_t j = which[i], a = starts[i], b = ends[i];
        if (j < 0 || j >= m || a < 0 || b < a || b > (int64_t)r->views[j].len) {
            PyErr_Format(PyExc_ValueError, "%s: span %zd lies outside its buffer", what, i);
            return -1;
        }
        r->ptr[i] = (const unsigned char *)r->views[j].buf + a;
        r->len[i] = (Py_ssize_t)(b - a);
    }
    return 0;
}

/* The number of records of `spans` (a tuple of three int64 vectors of one length, acquired
 * into v[3]), or -1 with an exception set and nothing acquired. */
static Py_ssize_t get_spans3(PyObject *spans, Py_buffer v[3], const char *what) {
    static const char *names[3] = {"spans: which", "spans: starts", "spans: ends"};
    if (!PyTuple_Check(spans) || PyTuple_GET_SIZE(spans) != 3) {
        PyErr_Format(PyExc_TypeError, "%s: spans must be (which, starts, ends)", what);
        return -1;
    }
    for (int k = 0; k < 3; k++)
        if (get_i64(PyTuple_GET_ITEM(spans, k), &v[k], names[k]) < 0) {
            while (k-- > 0)
                PyBuffer_Release(&v[k]);
            return -1;
        }
    if (v[1].shape[0] != v[0].shape[0] || v[2].shape[0] != v[0].shape[0]) {
        PyErr_Format(PyExc_ValueError, "%s: spans of different lengths", what);
        for (int k = 0; k < 3; k++)
            PyBuffer_Release(&v[k]);
        return -1;
    }
    return v[0].shape[0];
}

/* The list `records` held as it is now, before any Python code runs (the spans' and the
 * records' buffer exports may change it): 0, or -1 with an exception set. */
static int snapshot_records(PyObject *records, Records *r, const char *what) {
    char name[64];
    if (!PyList_Check(records)) {
        PyErr_Format(PyExc_TypeError, "%s: records must be a list", what);
        return -1;
    }
    snprintf(name, sizeof(name), "%s: records", what);
    r->items = snapshot_list(records, name);
    return r->items == NULL ? -1 : 0;
}

int get_records(PyObject *records, PyObject *spans, Records *r, const char *what) {
    memset(r, 0, sizeof(*r));
    if (snapshot_records(records, r, what) < 0)
        return -1;
    Py_buffer v[3];
    r->n = spans == Py_None ? PyTuple_GET_SIZE(r->items) : get_spans3(spans, v, what);
    if (r->n < 0) {
        release_records(r);
        return -1;
    }
    r->ptr = PyMem_Malloc((r->n ? r->n : 1) * sizeof(*r->ptr));
    r->len = PyMem_Malloc((r->n ? r->n : 1) * sizeof(*r->len));
    int failed = r->ptr == NULL || r->len == NULL;
    if (failed)
        PyErr_NoMemory();
    else if (spans == Py_None)
        failed = hold_bytes(r, what) < 0;
    else
        failed = hold_spans((const int64_t *)v[0].buf, (const int64_t *)v[1].buf,
                            (const int64_t *)v[2].buf, r, what) < 0;
    if (spans != Py_None)
        for (int k = 0; k < 3; k++)
            PyBuffer_Release(&v[k]);
    if (failed)
        release_records(r);
    return failed ? -1 : 0;
}

/* The owner of the buffer of `r` holding the address of this thread's last fault in a
 * guarded call (NULL: none of them). */
static PyObject *faulted_owner(const Records *r) {
    const unsigned char *at = (const unsigned char *)guard_last_fault();
    for (Py_ssize_t j = 0; r->views != NULL && j < r->held; j++)
        if (at >= (const unsigned char *)r->views[j].buf &&
            at < (const unsigned char *)r->views[j].buf + r->views[j].len)
            return r->views[j].obj;
    return NULL;
}

/* locate()'s walk over the records and what it needs. */
typedef struct {
    const Records *recs;
    const Family *fam;
    const Names *names;
    int64_t *rows;
    int wrapped;
} LocateJob;

/* locate()'s walk, without the GIL (in a guarded call: the records may lie in memory maps):
 * how many records were handled. */
static Py_ssize_t locate_body(void *arg) {
    const LocateJob *job = (const LocateJob *)arg;
    const Records *recs = job->recs;
    Py_ssize_t k = job->names->k, handled = 0, guesses[GUESSES];
    for (Py_ssize_t e = 0; e < GUESSES; e++)
        guesses[e] = -1;
    int64_t *rows = job->rows;
    for (Py_ssize_t i = 0; i < recs->n; i++, rows += k * SLOTS) {
        const unsigned char *base = recs->ptr[i];
        const unsigned char *ms, *me;
        int bad = feature_map(base, base + recs->len[i], job->wrapped, &ms, &me) < 0
                  || read_map(base, ms, me, job->fam, job->names, rows, guesses) < 0;
        if (bad)
            for (Py_ssize_t j = 0; j < k; j++)
                rows[j * SLOTS + KIND] = -1;
        else
            handled++;
    }
    return handled;
}

const char locate_doc[] =
    "locate(records, names, kinds, wrapped, out, spans=None) -> int\n\n"
    "Locate the features `names` (a tuple of bytes) in each record (a list of bytes; with\n"
    "spans = (which, starts, ends), int64 arrays, record i is bytes [starts[i], ends[i]) of\n"
    "the buffer records[which[i]], e.g. a memory map): an\n"
    "Example when `wrapped` (its feature map in field 1), else an OFRecord (the map itself).\n"
    "`kinds` says how each list kind stores its values (b'.b4v' for Example: index = the\n"
    "oneof field number; 'b' bytes, '4'/'8' packed fixed width, 'v'/'i' packed varints).\n"
    "out: int64 array of shape (records, names, 7), filled with (kind, count, start, end,\n"
    "value, list start, list end): the list kind (0: absent), its number of values, where\n"
    "its values lie (the first value for bytes), the first value of a varint list, and where\n"
    "the list message lies. A record laid out otherwise gets kind -1 for every name.\n"
    "Returns how many records were handled.";

PyObject *locate(PyObject *self, PyObject *args) {
    PyObject *bufs, *names, *out_obj, *spans = Py_None;
    const char *kinds;
    Py_ssize_t kinds_len;
    int wrapped;
    if (!PyArg_ParseTuple(args, "OO!y#pO|O:locate", &bufs, &PyTuple_Type, &names,
                          &kinds, &kinds_len, &wrapped, &out_obj, &spans))
        return NULL;
    Names wanted;
    if (get_names(names, &wanted, "locate") < 0)
        return NULL;
    Py_ssize_t k = wanted.k;
    Records recs;
    if (get_records(bufs, spans, &recs, "locate") < 0) {
        release_names(&wanted);
        return NULL;
    }
    Py_ssize_t n = recs.n;
    Py_buffer out;
    if (get_i64(out_obj, &out, "locate: out") < 0) {
        release_records(&recs);
        release_names(&wanted);
        return NULL;
    }
    Py_ssize_t cells;
    if (out.readonly || !PyBuffer_IsContiguous(&out, 'C') || mul_size(n, k, &cells) < 0
        || mul_size(cells, SLOTS, &cells) < 0 || out.len / 8 != cells) {
        PyBuffer_Release(&out);
        release_records(&recs);
        release_names(&wanted);
        PyErr_SetString(PyExc_ValueError, "locate: out must be a writable int64 array of "
                                          "shape (records, names, 7)");
        return NULL;
    }
    Family fam = {kinds, kinds_len - 1};
    memset(out.buf, 0, (size_t)out.len);
    LocateJob job = {&recs, &fam, &wanted, (int64_t *)out.buf, wrapped};
    PyObject *result = NULL;
    if (guard_ensure() != 0) {
        PyErr_SetFromErrno(PyExc_OSError);
    } else {
        Py_ssize_t handled;
        /* without the GIL: big batches are located on a few threads, a slice of records each */
        Py_BEGIN_ALLOW_THREADS
        handled = guard_run(locate_body, &job);
        Py_END_ALLOW_THREADS
        result = handled == GUARD_FAULT ? map_fault(faulted_owner(&recs))
                                         : PyLong_FromSsize_t(handled);
    }
    PyBuffer_Release(&out);
    release_records(&recs);
    release_names(&wanted);
    return result;
}

const char gather_spans_doc[] =
    "gather_spans(records, starts, ends, out, spans=None) -> None\n\n"
    "Copy bytes [starts[i], ends[i]) of record i (records and spans as for locate) for every\n"
    "i, back to back, into the writable buffer out, which must be exactly that long. The\n"
    "GIL is released for the copy.";

/* gather_spans()'s copies and what they need. */
typedef struct {
    const Records *recs;
    const int64_t *s, *e;
    char *dst;
} SpansJob;

/* gather_spans()'s copies, without the GIL (in a guarded call). */
static Py_ssize_t gather_spans_body(void *arg) {
    const SpansJob *job = (const SpansJob *)arg;
    char *dst = job->dst;
    for (Py_ssize_t i = 0; i < job->recs->n; i++) {
        size_t size = (size_t)(job->e[i] - job->s[i]);
        memcpy(dst, job->recs->ptr[i] + job->s[i], size);
        dst += size;
    }
    return 0;
}

/* gather_spans()'s buffers: starts, ends and out, `have` of them acquired. */
typedef struct {
    Py_buffer starts, ends, out;
    int have;
} SpansArgs;

/* starts and ends (int64 vectors) and out (a writable C-contiguous buffer) acquired into
 * `a`; 0, or -1 with an exception set (the caller releases what `have` says). */
static int hold_spans_args(PyObject *s_obj, PyObject *e_obj, PyObject *out_obj, SpansArgs *a) {
    a->have = 0;
    if (get_i64(s_obj, &a->starts, "gather_spans: starts") < 0)
        return -1;
    a->have = 1;
    if (get_i64(e_obj, &a->ends, "gather_spans: ends") < 0)
        return -1;
    a->have = 2;
    if (PyObject_GetBuffer(out_obj, &a->out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    a->have = 3;
    return 0;
}

static void release_spans_args(SpansArgs *a) {
    if (a->have >= 3)
        PyBuffer_Release(&a->out);
    if (a->have >= 2)
        PyBuffer_Release(&a->ends);
    if (a->have >= 1)
        PyBuffer_Release(&a->starts);
}

/* One start and one end per record, each span inside its record, and out exactly their
 * bytes long (summed with checks: never wrap to a match); 0, or -1 with ValueError set. */
static int check_spans(const Records *recs, const SpansArgs *a) {
    Py_ssize_t n = recs->n, total = 0;
    const int64_t *s = (const int64_t *)a->starts.buf, *e = (const int64_t *)a->ends.buf;
    if (a->starts.shape[0] != n || a->ends.shape[0] != n) {
        PyErr_SetString(PyExc_ValueError, "gather_spans: one start and one end per record");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < 0 || e[i] < s[i] || e[i] > recs->len[i]
            || add_size(total, (Py_ssize_t)(e[i] - s[i]), &total) < 0) {
            PyErr_SetString(PyExc_ValueError, "gather_spans: a span lies outside its record");
            return -1;
        }
    if (total != a->out.len) {
        PyErr_SetString(PyExc_ValueError, "gather_spans: out does not hold exactly the spans");
        return -1;
    }
    return 0;
}

/* The checked spans copied into out without the GIL, in a guarded call (the records may lie
 * in memory maps): None, or NULL with an exception set. */
static PyObject *copy_spans(const Records *recs, const SpansArgs *a) {
    if (guard_ensure() != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    SpansJob job = {recs, (const int64_t *)a->starts.buf, (const int64_t *)a->ends.buf,
                    (char *)a->out.buf};
    Py_ssize_t copied;
    Py_BEGIN_ALLOW_THREADS
    copied = guard_run(gather_spans_body, &job);
    Py_END_ALLOW_THREADS
    return copied == GUARD_FAULT ? map_fault(faulted_owner(recs)) : Py_NewRef(Py_None);
}

PyObject *gather_spans(PyObject *self, PyObject *args) {
    PyObject *bufs, *s_obj, *e_obj, *out_obj, *spans = Py_None;
    if (!PyArg_ParseTuple(args, "OOOO|O:gather_spans", &bufs, &s_obj, &e_obj, &out_obj,
                          &spans))
        return NULL;
    Records recs;
    if (get_records(bufs, spans, &recs, "gather_spans") < 0)
        return NULL;
    SpansArgs held;
    PyObject *result = NULL;
    if (hold_spans_args(s_obj, e_obj, out_obj, &held) == 0 && check_spans(&recs, &held) == 0)
        result = copy_spans(&recs, &held);
    release_spans_args(&held);
    release_records(&recs);
    return result;
}

const char byte_spans_doc[] =
    "byte_spans(records, starts, ends, counts, value_starts, value_lengths, spans=None) -> bool\n"
    "\n"
    "Where each value of one bytes list lies in each record (records and spans as for\n"
    "locate: a list of bytes, or buffers such as memory maps with spans): record i's\n"
    "list message is bytes [starts[i], ends[i]) of records[i] and holds counts[i] values\n"
    "(int64 arrays, one item per record). Each value's start in its record and its length go\n"
    "back to back into value_starts and value_lengths (writable int64, sum(counts) long).\n"
    "False when a list is laid out otherwise than `0x0A, length, bytes` per value or holds\n"
    "another count (the outputs are then not to be used). The GIL is released for the walk.";

/* byte_spans()'s walk and what it needs. */
typedef struct {
    const Records *recs;
    const int64_t *s, *e, *counts;
    int64_t *starts, *lengths;
} ByteSpansJob;

/* byte_spans()'s walk, without the GIL (in a guarded call): 1 when every list is laid out
 * as writers lay bytes lists out with its count of values, else 0. */
static Py_ssize_t byte_spans_body(void *arg) {
    const ByteSpansJob *job = (const ByteSpansJob *)arg;
    int64_t *starts = job->starts, *lengths = job->lengths;
    for (Py_ssize_t i = 0; i < job->recs->n; i++) {
        const unsigned char *base = job->recs->ptr[i], *vs, *ve;
        const unsigned char *p = base + job->s[i], *end = base + job->e[i];
        int64_t count = 0;
        while (p < end) {
            if (*p++ != 0x0A || read_body(&p, end, &vs, &ve) < 0 || count == job->counts[i])
                return 0;
            *starts++ = (int64_t)(vs - base);
            *lengths++ = (int64_t)(ve - vs);
            count++;
        }
        if (count != job->counts[i])
            return 0;
    }
    return 1;
}

/* One start, end and count per record, each span inside its record, each count at least 0,
 * and both outputs exactly sum(counts) long (summed with checks); 0, or -1 with ValueError
 * set. */
static int check_byte_spans(const Records *recs, const Py_buffer *s, const Py_buffer *e,
                            const Py_buffer *c, const Py_buffer *starts,
                            const Py_buffer *lengths) {
    Py_ssize_t n = recs->n, total = 0;
    const int64_t *sv = (const int64_t *)s->buf, *ev = (const int64_t *)e->buf,
                  *cv = (const int64_t *)c->buf;
    if (s->shape[0] != n || e->shape[0] != n || c->shape[0] != n) {
        PyErr_SetString(PyExc_ValueError, "byte_spans: one start, end and count per record");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (sv[i] < 0 || ev[i] < sv[i] || ev[i] > recs->len[i] || cv[i] < 0
            || add_size(total, (Py_ssize_t)cv[i], &total) < 0) {
            PyErr_Format(PyExc_ValueError, "byte_spans: record %zd's list [%lld, %lld) or "
                         "count %lld lies outside it", i, (long long)sv[i], (long long)ev[i],
                         (long long)cv[i]);
            return -1;
        }
    if (starts->shape[0] != total || lengths->shape[0] != total) {
        PyErr_SetString(PyExc_ValueError, "byte_spans: value_starts and value_lengths must be "
                                          "sum(counts) long");
        return -1;
    }
    return 0;
}

PyObject *byte_spans(PyObject *self, PyObject *args) {
    PyObject *bufs, *objs[5], *spans = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOOO|O:byte_spans", &bufs, &objs[0], &objs[1], &objs[2],
                          &objs[3], &objs[4], &spans))
        return NULL;
    static const char *const what[5] = {"byte_spans: starts", "byte_spans: ends",
                                        "byte_spans: counts", "byte_spans: value_starts",
                                        "byte_spans: value_lengths"};
    Records recs;
    if (get_records(bufs, spans, &recs, "byte_spans") < 0)
        return NULL;
    Py_buffer views[5];
    int held = 0;
    PyObject *result = NULL;
    while (held < 5 && (held < 3 ? get_i64(objs[held], &views[held], what[held])
                                  : get_i64_out(objs[held], &views[held], what[held])) == 0)
        held++;
    if (held == 5 && check_byte_spans(&recs, &views[0], &views[1], &views[2], &views[3],
                                      &views[4]) == 0) {
        ByteSpansJob job = {&recs, (const int64_t *)views[0].buf,
                            (const int64_t *)views[1].buf, (const int64_t *)views[2].buf,
                            (int64_t *)views[3].buf, (int64_t *)views[4].buf};
        if (guard_ensure() != 0) {
            PyErr_SetFromErrno(PyExc_OSError);
        } else {
            Py_ssize_t laid_out;
            Py_BEGIN_ALLOW_THREADS
            laid_out = guard_run(byte_spans_body, &job);
            Py_END_ALLOW_THREADS
            result = laid_out == GUARD_FAULT ? map_fault(faulted_owner(&recs))
                                             : PyBool_FromLong((long)laid_out);
        }
    }
    while (held > 0)
        PyBuffer_Release(&views[--held]);
    release_records(&recs);
    return result;
}

const char span_sums_doc[] =
    "span_sums(records, counts, starts, ends, out, spans=None, whole=None) -> bool\n"
    "\n"
    "The CRC32C of many spans of a batch of records in one call (records and spans as for\n"
    "locate: a list of bytes, or buffers such as memory maps with spans): record i holds the\n"
    "next counts[i] spans, span k being bytes [starts[k], ends[k]) of its record (int64;\n"
    "counts one per record, starts and ends sum(counts) long); out (writable uint32, as long)\n"
    "gets their CRC32Cs. Every span is checked against its record first (ValueError). False,\n"
    "with nothing computed, without the CPU's CRC32C instruction (the caller sums them with\n"
    "the crc32c package). The GIL is released for the sums.\n"
    "With whole (writable uint32, one per record), each record's spans must lie in order\n"
    "without overlapping (ValueError), and whole[i] gets the CRC32C of all of record i, in\n"
    "the same pass: its gaps summed, its spans' CRCs joined in (a short span summed again).";

/* CRC-32C's polynomial, bit-reflected. */
#define CRC32C_POLY 0x82f63b78u
/* Powers x^(2^k) of the polynomial arithmetic kept: enough for any int64 length in bytes
 * (x^(8n): k from 3 to 66). */
#define CRC_POWERS 67
/* Spans shorter than this are summed again (from cache) into their record's CRC rather than
 * joined by their own: joining costs three products of 32 steps each (crc_join), about
 * what summing 256 bytes costs at one CRC instruction per 8 bytes. */
#define JOIN_MIN ((int64_t)256)

/* a * b modulo CRC-32C's polynomial (bit-reflected, as zlib's multmodp), without branches
 * on the data (a branch a bit mispredicted half the time: 3x slower). */
static uint32_t crc_multiply(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (int bit = 31; bit >= 0; bit--) {
        product ^= b & (0u - ((a >> bit) & 1u));
        b = (b >> 1) ^ (CRC32C_POLY & (0u - (b & 1u)));
    }
    return product;
}

/* power[k] = x^(2^k) modulo the polynomial. */
static void crc_powers(uint32_t power[CRC_POWERS]) {
    uint32_t p = (uint32_t)1 << 30;  /* x^1 */
    power[0] = p;
    for (int k = 1; k < CRC_POWERS; k++)
        power[k] = p = crc_multiply(p, p);
}

/* x^(8 n) modulo the polynomial, from the powers x^(2^k). */
static uint32_t crc_shift(const uint32_t power[CRC_POWERS], uint64_t n) {
    uint32_t shift = (uint32_t)1 << 31;  /* x^0 */
    for (int k = 3; n; n >>= 1, k++)
        if (n & 1u)
            shift = crc_multiply(power[k], shift);
    return shift;
}

/* What joining CRCs needs: the powers x^(2^k), and x^(8 n) for n below 2^24 by its three
 * bytes (digit[d][v] = x^(8 v 256^d)): two products make any such shift, where the powers
 * take one per bit set (about seven for a 10 KB image). */
typedef struct {
    uint32_t power[CRC_POWERS];
    uint32_t digit[3][256];
} CrcJoin;

static void crc_join_tables(CrcJoin *join) {
    crc_powers(join->power);
    for (int d = 0; d < 3; d++) {
        uint32_t step = crc_shift(join->power, (uint64_t)1 << (8 * d));
        join->digit[d][0] = (uint32_t)1 << 31;
        for (int v = 1; v < 256; v++)
            join->digit[d][v] = crc_multiply(join->digit[d][v - 1], step);
    }
}

/* The CRC32C of A followed by B from the CRC32Cs of A and B and the length of B (zlib's
 * crc32_combine: A's CRC times x^(8 len_b)). */
static uint32_t crc_join(const CrcJoin *join, uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
    uint32_t shift = len_b >> 24 ? crc_shift(join->power, len_b) :
        crc_multiply(crc_multiply(join->digit[0][len_b & 255], join->digit[1][(len_b >> 8) & 255]),
                     join->digit[2][len_b >> 16]);
    return crc_multiply(shift, crc_a) ^ crc_b;
}

/* span_sums()'s sums and what they need. */
typedef struct {
    const Records *recs;
    const int64_t *counts, *s, *e;
    uint32_t *out;
    uint32_t *whole;        /* NULL: no records' CRCs asked for */
    CrcJoin join;
} SumsJob;

/* The span of record i numbered k, for hw_crc32c_x3. */
static inline void sums_span(const SumsJob *job, Py_ssize_t i, Py_ssize_t k,
                             const unsigned char **p, size_t *n) {
    *p = job->recs->ptr[i] + job->s[k];
    *n = (size_t)(job->e[k] - job->s[k]);
}

#ifdef HAVE_HW_CRC
/* The CRC32C of all of record i whose spans k..stop-1 (in order, not overlapping) were
 * summed into out: the gaps summed, each span joined by its CRC (a short one summed again).
 * The state of a CRC going on is the complement of the CRC so far. */
static uint32_t whole_sum(const SumsJob *job, Py_ssize_t i, Py_ssize_t k, Py_ssize_t stop) {
    const unsigned char *rec = job->recs->ptr[i];
    uint32_t crc = 0;  /* the CRC32C of nothing */
    int64_t at = 0;
    for (; k < stop; k++) {
        int64_t start = job->s[k], end = job->e[k];
        crc = hw_crc32c_from(~crc, rec + at, (size_t)(start - at));
        if (end - start < JOIN_MIN)
            crc = hw_crc32c_from(~crc, rec + start, (size_t)(end - start));
        else
            crc = crc_join(&job->join, crc, job->out[k], (uint64_t)(end - start));
        at = end;
    }
    return hw_crc32c_from(~crc, rec + at, (size_t)((int64_t)job->recs->len[i] - at));
}
#endif

/* span_sums()'s sums, without the GIL (in a guarded call): three spans at a time (three
 * independent CRC streams run about three times as fast as one), the rest one by one; then,
 * when asked, the record's whole CRC from them (its spans still in cache). */
static Py_ssize_t span_sums_body(void *arg) {
#ifdef HAVE_HW_CRC
    const SumsJob *job = (const SumsJob *)arg;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < job->recs->n; i++) {
        Py_ssize_t first = k, stop = k + (Py_ssize_t)job->counts[i];
        for (; k + 3 <= stop; k += 3) {
            const unsigned char *p[3];
            size_t n[3];
            for (int j = 0; j < 3; j++)
                sums_span(job, i, k + j, &p[j], &n[j]);
            hw_crc32c_x3(p, n, job->out + k);
        }
        for (; k < stop; k++)
            job->out[k] = hw_crc32c(job->recs->ptr[i] + job->s[k],
                                    (size_t)(job->e[k] - job->s[k]));
        if (job->whole != NULL)
            job->whole[i] = whole_sum(job, i, first, stop);
    }
#else
    (void)arg;
#endif
    return 0;
}

/* One count per record, at least 0; starts, ends and out sum(counts) long (summed with
 * checks), out uint32; every span inside its record; 0, or -1 with ValueError set. */
static int check_span_sums(const Records *recs, const Py_buffer *c, const Py_buffer *s,
                           const Py_buffer *e, const Py_buffer *out) {
    Py_ssize_t n = recs->n, total = 0, k = 0;
    const int64_t *cv = (const int64_t *)c->buf, *sv = (const int64_t *)s->buf,
                  *ev = (const int64_t *)e->buf;
    if (c->shape[0] != n) {
        PyErr_SetString(PyExc_ValueError, "span_sums: one count per record");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (cv[i] < 0 || add_size(total, (Py_ssize_t)cv[i], &total) < 0) {
            PyErr_Format(PyExc_ValueError, "span_sums: record %zd's count %lld", i,
                         (long long)cv[i]);
            return -1;
        }
    if (s->shape[0] != total || e->shape[0] != total || out->itemsize != 4
        || out->ndim != 1 || out->shape[0] != total) {
        PyErr_SetString(PyExc_ValueError, "span_sums: starts, ends and out (uint32) must be "
                                          "sum(counts) long");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        for (int64_t j = 0; j < cv[i]; j++, k++)  /* no arithmetic that can wrap */
            if (sv[k] < 0 || ev[k] < sv[k] || ev[k] > (int64_t)recs->len[i]) {
                PyErr_Format(PyExc_ValueError, "span_sums: span %zd [%lld, %lld) lies "
                             "outside record %zd", k, (long long)sv[k], (long long)ev[k], i);
                return -1;
            }
    return 0;
}

/* With whole: one uint32 per record, and each record's spans in order without overlapping
 * (whole_sum sums the gaps between them); 0, or -1 with ValueError set. */
static int check_span_order(const Records *recs, const int64_t *counts, const int64_t *s,
                            const int64_t *e, const Py_buffer *whole) {
    if (whole->itemsize != 4 || whole->ndim != 1 || whole->shape[0] != recs->n) {
        PyErr_SetString(PyExc_ValueError, "span_sums: whole (uint32) must hold one CRC per "
                                          "record");
        return -1;
    }
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < recs->n; i++) {
        for (int64_t j = 1; j < counts[i]; j++)
            if (s[k + j] < e[k + j - 1]) {
                PyErr_Format(PyExc_ValueError, "span_sums: span %zd of record %zd starts "
                             "before the one before it ends", (Py_ssize_t)(k + j), i);
                return -1;
            }
        k += (Py_ssize_t)counts[i];
    }
    return 0;
}

/* The checked spans summed without the GIL, in a guarded call (the records may lie in
 * memory maps): True, or NULL with an exception set. */
static PyObject *run_span_sums(const SumsJob *job) {
    if (guard_ensure() != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_ssize_t done;
    Py_BEGIN_ALLOW_THREADS
    done = guard_run(span_sums_body, (void *)job);
    Py_END_ALLOW_THREADS
    return done == GUARD_FAULT ? map_fault(faulted_owner(job->recs)) : Py_NewRef(Py_True);
}

/* span_sums()'s job on its checked arguments (views: counts, starts, ends, out; whole
 * when asked for): True, False (no CRC instruction), or NULL with an exception set. */
static PyObject *sums_of(const Records *recs, const Py_buffer views[4],
                         const Py_buffer *whole) {
    SumsJob job = {recs, (const int64_t *)views[0].buf, (const int64_t *)views[1].buf,
                   (const int64_t *)views[2].buf, (uint32_t *)views[3].buf,
                   whole != NULL ? (uint32_t *)whole->buf : NULL, {{0}, {{0}}}};
    if (whole != NULL && check_span_order(recs, job.counts, job.s, job.e, whole) < 0)
        return NULL;
    if (!hw_crc_on)
        return Py_NewRef(Py_False);
    if (whole != NULL)
        crc_join_tables(&job.join);
    return run_span_sums(&job);
}

PyObject *span_sums(PyObject *self, PyObject *args) {
    PyObject *bufs, *objs[4], *spans = Py_None, *whole_obj = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOO|OO:span_sums", &bufs, &objs[0], &objs[1], &objs[2],
                          &objs[3], &spans, &whole_obj))
        return NULL;
    static const char *const what[3] = {"span_sums: counts", "span_sums: starts",
                                        "span_sums: ends"};
    Records recs;
    if (get_records(bufs, spans, &recs, "span_sums") < 0)
        return NULL;
    Py_buffer whole;
    if (whole_obj != Py_None &&
        PyObject_GetBuffer(whole_obj, &whole, PyBUF_WRITABLE | PyBUF_ND) < 0) {
        release_records(&recs);
        return NULL;
    }
    Py_buffer views[4];
    int held = 0;
    PyObject *result = NULL;
    while (held < 3 && get_i64(objs[held], &views[held], what[held]) == 0)
        held++;
    if (held == 3 && PyObject_GetBuffer(objs[3], &views[3], PyBUF_WRITABLE | PyBUF_ND) == 0)
        held++;
    if (held == 4 && check_span_sums(&recs, &views[0], &views[1], &views[2], &views[3]) == 0)
        result = sums_of(&recs, views, whole_obj != Py_None ? &whole : NULL);
    while (held > 0)
        PyBuffer_Release(&views[--held]);
    release_records(&recs);
    if (whole_obj != Py_None)
        PyBuffer_Release(&whole);
    return result;
}
