/* Locating asked-for features in a batch of serialized Examples or OFRecords laid out the
 * way their writers lay them out (TensorFlow, OneFlow, protobuf's own serializer): one
 * map entry after the other, each `key, value{one list}`, each list packed. This is the
 * fast path of batched decoding for records whose layouts differ (a JPEG of another size
 * changes every enclosing length). Anything else (unknown fields, a list stored unpacked,
 * a non-ASCII key, an asked-for name twice, a length past its message) marks the record as
 * not handled here; the caller then decodes it on the careful path, which gives the answer
 * protobuf gives or words the error. Lists of features not asked for are not looked into,
 * as on the careful path. */
#include "native.h"

/* A varint at *p (before end) into *v; 0, or -1 when it is cut short or longer than
 * protobuf's 10 bytes, or its 10th byte holds more than the 64th bit. */
static int read_varint(const unsigned char **p, const unsigned char *end, uint64_t *v) {
    const unsigned char *q = *p;
    uint64_t x = 0;
    for (int shift = 0; shift < 70 && q < end; shift += 7) {
        unsigned char b = *q++;
        if (shift == 63 && b > 1)
            return -1;
        x |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *p = q;
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* A length-delimited field's body: the length varint at *p, checked to end by `end`.
 * Sets [*s, *e) and moves *p past the body; 0, or -1 when it does not fit. */
static int read_body(const unsigned char **p, const unsigned char *end,
                     const unsigned char **s, const unsigned char **e) {
    uint64_t n;
    if (read_varint(p, end, &n) < 0 || n > (uint64_t)(end - *p))
        return -1;
    *s = *p;
    *e = *p + n;
    *p = *e;
    return 0;
}

/* How each list kind (oneof field number) stores its values: 'b' bytes, '4' / '8' packed
 * fixed-width numbers, 'v' packed varints; any other character: a kind not known. */
typedef struct {
    const char *kinds;
    Py_ssize_t max_kind;
} Family;

/* Field order of one output row: kind, number of values, value bytes start, end, value. */
enum { KIND, COUNT, START, END, VALUE, SLOTS };

/* One list message [s, e) of kind `kind` into row[]; 0, or -1 when not handled here. */
static int read_list(const unsigned char *base, const unsigned char *s, const unsigned char *e,
                     char how, int64_t *row) {
    const unsigned char *p = s, *vs, *ve;
    if (how != 'b' && how != '4' && how != '8' && how != 'v')
        return -1;  /* a kind not known */
    row[START] = row[END] = (int64_t)(s - base);
    row[COUNT] = row[VALUE] = 0;
    if (how == 'b') {
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
    if (p == e)
        return 0;  /* an empty list */
    if (*p++ != 0x0A || read_body(&p, e, &vs, &ve) < 0 || p != e)
        return -1;  /* one packed run only */
    row[START] = (int64_t)(vs - base);
    row[END] = (int64_t)(ve - base);
    if (how == '4' || how == '8') {
        Py_ssize_t width = how == '4' ? 4 : 8;
        if ((ve - vs) % width)
            return -1;
        row[COUNT] = (int64_t)((ve - vs) / width);
        return 0;
    }
    int64_t count = 0;
    while (vs < ve) {
        uint64_t v;
        if (read_varint(&vs, ve, &v) < 0)
            return -1;
        if (!count)
            row[VALUE] = (int64_t)v;
        count++;
    }
    row[COUNT] = count;
    return 0;
}

/* The feature map [p, end) of one record into rows[k * SLOTS] for the k asked-for names;
 * 0, or -1 when the record is not handled here. */
static int read_map(const unsigned char *base, const unsigned char *p, const unsigned char *end,
                    const Family *fam, PyObject *names, int64_t *rows) {
    Py_ssize_t k = PyTuple_GET_SIZE(names);
    while (p < end) {
        const unsigned char *es, *ee, *ks, *ke, *vs, *ve, *ls, *le;
        if (*p++ != 0x0A || read_body(&p, end, &es, &ee) < 0)
            return -1;
        const unsigned char *q = es;
        if (q >= ee || *q++ != 0x0A || read_body(&q, ee, &ks, &ke) < 0)
            return -1;
        if (q >= ee || *q++ != 0x12 || read_body(&q, ee, &vs, &ve) < 0 || q != ee)
            return -1;
        for (const unsigned char *c = ks; c < ke; c++)
            if (*c >= 0x80)
                return -1;  /* UTF-8 rules: the careful path */
        Py_ssize_t j = 0;
        for (; j < k; j++) {
            PyObject *name = PyTuple_GET_ITEM(names, j);
            if (PyBytes_GET_SIZE(name) == ke - ks
                && !memcmp(PyBytes_AS_STRING(name), ks, (size_t)(ke - ks)))
                break;
        }
        if (vs == ve) {  /* a Feature with no list set */
            if (j < k)
                return -1;
            continue;
        }
        q = vs;
        unsigned char tag = *q++;
        Py_ssize_t kind = tag >> 3;
        if ((tag & 7) != 2 || kind < 1 || kind > fam->max_kind
            || read_body(&q, ve, &ls, &le) < 0 || q != ve)
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

const char locate_doc[] =
    "locate(records, names, kinds, wrapped, out) -> int\n\n"
    "Locate the features `names` (a tuple of bytes) in each record (a list of bytes): an\n"
    "Example when `wrapped` (its feature map in field 1), else an OFRecord (the map itself).\n"
    "`kinds` says how each list kind stores its values (b'.b4v' for Example: index = the\n"
    "oneof field number; 'b' bytes, '4'/'8' packed fixed width, 'v' packed varints).\n"
    "out: int64 array of shape (records, names, 5), filled with (kind, count, start, end,\n"
    "value): the list kind (0: absent), its number of values, where its values lie (the\n"
    "first value for bytes), and the first value of a varint list. A record laid out\n"
    "otherwise gets kind -1 for every name. Returns how many records were handled.";

PyObject *locate(PyObject *self, PyObject *args) {
    PyObject *bufs, *names, *out_obj;
    const char *kinds;
    Py_ssize_t kinds_len;
    int wrapped;
    if (!PyArg_ParseTuple(args, "O!O!y#pO:locate", &PyList_Type, &bufs, &PyTuple_Type, &names,
                          &kinds, &kinds_len, &wrapped, &out_obj))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(bufs), k = PyTuple_GET_SIZE(names);
    for (Py_ssize_t j = 0; j < k; j++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(names, j))) {
            PyErr_SetString(PyExc_TypeError, "locate: names must be bytes");
            return NULL;
        }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyBytes_Check(PyList_GET_ITEM(bufs, i))) {
            PyErr_SetString(PyExc_TypeError, "locate: records must be bytes");
            return NULL;
        }
    Py_buffer out;
    if (get_i64(out_obj, &out, "locate: out") < 0)
        return NULL;
    Py_ssize_t cells;
    if (out.readonly || !PyBuffer_IsContiguous(&out, 'C') || mul_size(n, k, &cells) < 0
        || mul_size(cells, SLOTS, &cells) < 0 || out.len / 8 != cells) {
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "locate: out must be a writable int64 array of "
                                          "shape (records, names, 5)");
        return NULL;
    }
    Family fam = {kinds, kinds_len - 1};
    int64_t *rows = (int64_t *)out.buf;
    Py_ssize_t handled = 0;
    memset(rows, 0, (size_t)out.len);
    for (Py_ssize_t i = 0; i < n; i++, rows += k * SLOTS) {
        PyObject *b = PyList_GET_ITEM(bufs, i);
        const unsigned char *base = (const unsigned char *)PyBytes_AS_STRING(b);
        const unsigned char *p = base, *end = base + PyBytes_GET_SIZE(b), *ms = p, *me = end;
        int bad = 0;
        if (wrapped && p < end)  /* an Example: exactly one field, its features */
            bad = *p++ != 0x0A || read_body(&p, end, &ms, &me) < 0 || p != end;
        if (!bad)
            bad = read_map(base, ms, me, &fam, names, rows) < 0;
        if (bad)
            for (Py_ssize_t j = 0; j < k; j++)
                rows[j * SLOTS + KIND] = -1;
        else
            handled++;
    }
    PyBuffer_Release(&out);
    return PyLong_FromSsize_t(handled);
}

const char gather_spans_doc[] =
    "gather_spans(records, starts, ends, out) -> None\n\n"
    "Copy bytes [starts[i], ends[i]) of record i (a list of bytes) for every i, back to\n"
    "back, into the writable buffer out, which must be exactly that long.";

PyObject *gather_spans(PyObject *self, PyObject *args) {
    PyObject *bufs, *s_obj, *e_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "O!OOO:gather_spans", &PyList_Type, &bufs, &s_obj, &e_obj,
                          &out_obj))
        return NULL;
    Py_buffer sv, ev, ov;
    if (get_i64(s_obj, &sv, "gather_spans: starts") < 0)
        return NULL;
    if (get_i64(e_obj, &ev, "gather_spans: ends") < 0) {
        PyBuffer_Release(&sv);
        return NULL;
    }
    if (PyObject_GetBuffer(out_obj, &ov, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&ev);
        return NULL;
    }
    PyObject *result = NULL, *held = NULL;
    const char **src = NULL;
    Py_ssize_t n = PyList_GET_SIZE(bufs), total = 0;
    const int64_t *s = (const int64_t *)sv.buf, *e = (const int64_t *)ev.buf;
    if (sv.len / 8 != n || ev.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "gather_spans: one start and one end per record");
        goto done;
    }
    held = PyList_AsTuple(bufs);  /* the records stay alive without the GIL */
    src = PyMem_Malloc((n ? n : 1) * sizeof(char *));
    if (held == NULL || src == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyTuple_GET_ITEM(held, i);
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "gather_spans: records must be bytes");
            goto done;
        }
        if (s[i] < 0 || e[i] < s[i] || e[i] > PyBytes_GET_SIZE(b)
            || add_size(total, (Py_ssize_t)(e[i] - s[i]), &total) < 0) {
            PyErr_SetString(PyExc_ValueError, "gather_spans: a span lies outside its record");
            goto done;
        }
        src[i] = PyBytes_AS_STRING(b);
    }
    if (total != ov.len) {
        PyErr_SetString(PyExc_ValueError, "gather_spans: out does not hold exactly the spans");
        goto done;
    }
    char *dst = (char *)ov.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t size = (size_t)(e[i] - s[i]);
        memcpy(dst, src[i] + s[i], size);
        dst += size;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(src);
    Py_XDECREF(held);
    PyBuffer_Release(&ov);
    PyBuffer_Release(&ev);
    PyBuffer_Release(&sv);
    return result;
}
