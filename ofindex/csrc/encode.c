/* encode.c: a batch of records encoded from columns and framed in one pass, the write side's
 * mirror of batches.c.
 *
 * ofindex.encode.framed lays the columns out first (numbers checked and converted by numpy,
 * values that need Python encoded there as whole map entries); this writes, record by record,
 * each column's map entry of an Example's Features (or an OFRecord), the framing (TFRecord's
 * length, its CRC and the payload's CRC; OFRecord's length; or none) and the payload CRC32Cs,
 * into the caller's buffer: no object per record, the GIL released while bytes are copied.
 * The bytes equal what the pure-Python twin (ofindex.encode.framed.encode_block_py) writes,
 * which equals what protobuf serializes for the same values.
 */
#include "native.h"
#include "hwcrc.h"
#include "widevarints.h"

int wide_varints_on = 0;

/* Rows encode_rows sizes, writes and checksums at a time (a chunk): their varints are made
 * once, into a scratch of the chunk's size, and the rows' values and bytes are still in the
 * CPU's cache when they are written and checksummed. */
#define CHUNK_ROWS 256

/* How a column's values become a record's map entry (ofindex.encode.framed names the same). */
enum {
    MODE_PACKED = 0,  /* a packed list of fixed-size numbers: each row's bytes as they are */
    MODE_VARINT = 1,  /* a packed list of varints: int64 values (negative: ten bytes) */
    MODE_BYTES = 2,   /* a bytes list holding one value: each row's bytes object */
    MODE_ENTRIES = 3, /* the whole map entry made in Python (b"": the feature is absent) */
    MODE_SPANS = 4,   /* a bytes list of one value: spans of one buffer (Arrow binary) */
    MODE_PACKED_SPANS = 5, /* a packed list whose bytes are spans of one buffer (rows of any
                            * length: floats as they are, integers as varints) */
    MODE_LIST_SPANS = 6,   /* the value list's whole content cut from one buffer (a bytes
                            * list of any number of values, each with its key and length) */
    MODE_VARINT_SPANS = 7, /* a packed list of varints of any length: int64 values, row r's
                            * values[bounds[r]:bounds[r + 1]] */
    MODE_GATHER = 8,       /* whole map entries made once per distinct value (a dictionary
                            * column's): row r's is entry index[r], values[bounds[i]:bounds[i + 1]] */
    MODE_BYTES_LISTS = 9   /* a bytes list of any number of values cut from one buffer (an Arrow
                            * list of binary): row r's values are items index[r] to
                            * index[r + 1], item i values[bounds[i]:bounds[i + 1]] */
};

/* The modes whose data is (index, bounds, values): items of one buffer, chosen by index. */
static inline int indexed_mode(int mode) {
    return mode == MODE_GATHER || mode == MODE_BYTES_LISTS;
}

/* The modes whose data is (bounds, values): spans of one buffer. */
static inline int spans_mode(int mode) {
    return mode == MODE_SPANS || mode == MODE_PACKED_SPANS || mode == MODE_LIST_SPANS ||
           mode == MODE_VARINT_SPANS;
}

typedef struct {
    int mode;
    unsigned char tag;          /* the Feature's field as a key byte: (field << 3) | 2 */
    PyObject *key;              /* a new reference to the feature name (bytes) */
    Py_buffer view;             /* PACKED: uint8 (rows, width); VARINT: int64 (rows, count);
                                 * the span and indexed modes: their int64 bounds */
    int held;                   /* view acquired */
    Py_ssize_t per_row;         /* PACKED: bytes per row; VARINT: values per row */
    Py_buffer values;           /* SPANS: the bytes the spans cut (view: their int64 bounds) */
    int held_values;
    Py_buffer index;            /* GATHER, BYTES_LISTS: their int64 index */
    int held_index;
    unsigned char *scratch;     /* VARINT, VARINT_SPANS, BYTES_LISTS: the value lists of a
                                 * chunk's rows, made once as the rows are sized and copied
                                 * when they are written (varints sized, then made in place,
                                 * cost 1.3 ns a value more: 21 ms of encoding 500k rows of
                                 * token lists) */
    size_t scratch_cap;
    int64_t scratch_at[CHUNK_ROWS]; /* where row k of the chunk has its list in scratch */
    Py_ssize_t value_bytes[CHUNK_ROWS]; /* row k's value bytes, sized once (value_size, or
                                         * the bytes made into scratch) */
    PyObject *items;            /* BYTES, ENTRIES: a new reference to the list of bytes */
    PyObject **objs;            /* ... the rows written, each referenced (nobjs of them) */
    Py_ssize_t nobjs;
    const unsigned char **ptrs; /* ... and their bytes (sizes: value_bytes) */
    Py_buffer present_view;     /* one byte per row, 0: the feature is absent from the row */
    int held_present;
    const unsigned char *present; /* its bytes, or NULL: present in every row */
    /* The parts of each row's map entry that do not change from row to row, made once a
     * call (working them out for each row and column, and sizing each row again to write it,
     * made encoding 500k rows of six columns take 152 ms CPU where it takes 135 ms): */
    unsigned char head[16];     /* the entry's key field up to the key: 0x0a, its length */
    Py_ssize_t kpre;            /* bytes of head */
    Py_ssize_t klen;            /* the key's bytes */
    Py_ssize_t key_part;        /* bytes of the entry's content before the Feature's length */
    int one;                    /* a bytes list of one value: its list is written if empty */
    int whole_list;             /* the values are the value list's whole content */
    int whole_entry;            /* the values are the whole map entry (ENTRIES, GATHER) */
} Column;

/* Column c holds no entry in row r (a null cell: the feature is absent). */
static inline int absent(const Column *c, Py_ssize_t r) {
    return c->present != NULL && !c->present[r];
}

typedef struct {
    Column *cols;
    Py_ssize_t ncols;
    int wrap;                   /* an Example: the entries inside Features (field 1) */
    Py_ssize_t header, footer;  /* framing: 12 + 4 (TFRecord), 8 + 0 (OFRecord), 0 + 0 */
} Plan;

/* The bits of v (v > 0). */
#if defined(__GNUC__) || defined(__clang__)
static inline unsigned bit_length(uint64_t v) {
    return 64u - (unsigned)__builtin_clzll(v);
}
#else
static inline unsigned bit_length(uint64_t v) {
    unsigned n = 0;
    for (; v; v >>= 1)
        n++;
    return n;
}
#endif

/* Bytes of the varint of v, without a branch: 7 bits a byte, ceil(bits / 7) as
 * (bits * 9 + 64) / 64 for 1 to 64 bits (a loop's unpredictable exit cost more than the
 * encoding itself on token ids of 1 to 3 bytes). */
static inline Py_ssize_t varint_size(uint64_t v) {
    return (Py_ssize_t)((bit_length(v | 1) * 9 + 64) >> 6);
}

static inline unsigned char *put_varint(unsigned char *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

static inline int64_t load_i64(const unsigned char *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* n bytes from src at p, a short span (a tag's bytes, a key, a dictionary's entry) by two
 * loads and two stores that overlap rather than a call to memcpy (500k rows of six columns
 * copy 4M short spans: 135 ms CPU through memcpy, 129 ms so). */
static inline unsigned char *put_bytes(unsigned char *p, const unsigned char *src, size_t n) {
    if (n >= 8 && n <= 16) {
        uint64_t head, tail;
        memcpy(&head, src, 8);
        memcpy(&tail, src + n - 8, 8);
        memcpy(p, &head, 8);
        memcpy(p + n - 8, &tail, 8);
    } else if (n >= 4 && n < 8) {
        uint32_t head, tail;
        memcpy(&head, src, 4);
        memcpy(&tail, src + n - 4, 4);
        memcpy(p, &head, 4);
        memcpy(p + n - 4, &tail, 4);
    } else if (n > 16) {
        memcpy(p, src, n);
    } else {
        for (size_t i = 0; i < n; i++)
            p[i] = src[i];
    }
    return p + n;
}

static inline void put_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++, v >>= 8)
        p[i] = (unsigned char)v;
}

/* v as 8 little-endian bytes at p. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline void store_le64(unsigned char *p, uint64_t v) {
    memcpy(p, &v, 8);
}
#else
static inline void store_le64(unsigned char *p, uint64_t v) {
    put_le(p, v, 8);
}
#endif

/* The 7-bit groups of v (below 2^56) one to a byte, low group first. */
static inline uint64_t spread7(uint64_t v) {
    return (v & 0x7fULL) | ((v << 1) & 0x7f00ULL) | ((v << 2) & 0x7f0000ULL) |
           ((v << 3) & 0x7f000000ULL) | ((v << 4) & 0x7f00000000ULL) |
           ((v << 5) & 0x7f0000000000ULL) | ((v << 6) & 0x7f000000000000ULL) |
           ((v << 7) & 0x7f00000000000000ULL);
}

/* The varint of v at p as one 8-byte store (8 bytes at p must be writable; those past the
 * varint are overwritten by what follows it): no branch per byte. */
static inline unsigned char *put_varint8(unsigned char *p, uint64_t v) {
    if (v < (1u << 21)) {
        /* most ids and counts take 3 bytes at most: their continuation bits and length from
         * two comparisons, no bit scan or shifted mask (16M token ids of 1 to 3 bytes, the
         * column encoded: 84 ms CPU through the general path below, 78 ms here) */
        uint64_t two = v >= (1u << 7), three = v >= (1u << 14);
        store_le64(p, (v & 0x7fULL) | ((v << 1) & 0x7f00ULL) | ((v << 2) & 0x7f0000ULL) |
                          (two << 7) | (three << 15));
        return p + 1 + two + three;
    }
    if (v >> 56)
        return put_varint(p, v);
    Py_ssize_t n = varint_size(v);
    uint64_t more = 0x8080808080808080ULL & ((1ULL << (8 * (n - 1))) - 1);
    store_le64(p, spread7(v) | more);
    return p + n;
}

/* The varints of n int64 values at ints, back to back at p (eight at a time where the CPU
 * can, see widevarints.h; then 8-byte stores while 8 bytes before end remain). */
static unsigned char *put_varints(unsigned char *p, const unsigned char *end,
                                  const unsigned char *ints, int64_t n) {
    int64_t j = 0;
    if (wide_varints_on)
        p = put_varints_wide(p, end, ints, n, &j);
    for (; j < n && end - p >= 8; j++)
        p = put_varint8(p, (uint64_t)load_i64(ints + 8 * j));
    for (; j < n; j++)
        p = put_varint(p, (uint64_t)load_i64(ints + 8 * j));
    return p;
}

/* Bytes of the value list's content of column c at row r (its list items checked to be
 * bytes by check_items first); not for the columns made into scratch, whose rows
 * size_rows_of sizes as it makes them. */
static Py_ssize_t value_size(const Column *c, Py_ssize_t r) {
    if (c->mode == MODE_PACKED)
        return c->per_row;
    if (c->mode == MODE_GATHER) {
        const int64_t *at = (const int64_t *)c->view.buf;
        int64_t i = ((const int64_t *)c->index.buf)[r];  /* checked by get_indexed_column */
        return (Py_ssize_t)(at[i + 1] - at[i]);
    }
    if (spans_mode(c->mode)) {
        const int64_t *at = (const int64_t *)c->view.buf;
        return (Py_ssize_t)(at[r + 1] - at[r]);  /* checked by get_spans_column */
    }
    return PyBytes_GET_SIZE(PyList_GET_ITEM(c->items, r));
}

/* The nested sizes of a map entry holding v bytes of values: its value list (0: no list,
 * an empty packed list), the Feature, and the entry's own content. Sizes are bounded by the
 * buffers they come from, far below PY_SSIZE_T_MAX / 2: no sum here can wrap. */
typedef struct {
    Py_ssize_t list, feature, entry;
} EntrySizes;

static inline EntrySizes entry_sizes(const Column *c, Py_ssize_t v) {
    EntrySizes e;
    if (c->whole_list)
        e.list = v;  /* the span is the list's content */
    else
        e.list = (v || c->one) ? 1 + varint_size((uint64_t)v) + v : 0;
    e.feature = 1 + varint_size((uint64_t)e.list) + e.list;
    e.entry = c->key_part + varint_size((uint64_t)e.feature) + e.feature;
    return e;
}

/* Bytes of the map entry holding v bytes of values. */
static inline Py_ssize_t entry_size(const Column *c, Py_ssize_t v) {
    if (c->whole_entry)
        return v;
    EntrySizes e = entry_sizes(c, v);
    return 1 + varint_size((uint64_t)e.entry) + e.entry;
}

/* The map entries' bytes of row r, the chunk's row k (without Features around them); each
 * entry's value bytes kept for writing it. */
static Py_ssize_t entries_size(Plan *pl, Py_ssize_t r, Py_ssize_t k) {
    Py_ssize_t n = 0;
    for (Py_ssize_t j = 0; j < pl->ncols; j++) {
        Column *c = &pl->cols[j];
        if (!absent(c, r)) {
            if (c->scratch == NULL)  /* else made into scratch by size_rows_of */
                c->value_bytes[k] = value_size(c, r);
            n += entry_size(c, c->value_bytes[k]);
        }
    }
    return n;
}

static Py_ssize_t payload_size(const Plan *pl, Py_ssize_t entries) {
    return pl->wrap ? 1 + varint_size((uint64_t)entries) + entries : entries;
}

/* The entries' bytes of a payload of `payload` bytes (payload_size's inverse: e + 1 +
 * varint_size(e) grows with e, so the largest e it does not take past the payload is the
 * one; at most ten steps down from payload - 2), so that writing a row does not size its
 * entries again. */
static Py_ssize_t entries_of(const Plan *pl, Py_ssize_t payload) {
    if (!pl->wrap)
        return payload;
    Py_ssize_t e = payload - 2;
    while (e > 0 && e + 1 + varint_size((uint64_t)e) > payload)
        e--;
    return e;
}

/* Row r's BYTES_LISTS values at p: each item with its key and length. An item of 14 bytes
 * or fewer (tags, words, ids) is its key, its one-byte length and 14 bytes stored at once
 * where 16 bytes remain before end and 14 after it in the values: 500k rows of two short
 * tags took 20 ms byte by byte. */
static unsigned char *put_bytes_list(unsigned char *p, const unsigned char *end, const Column *c,
                                     Py_ssize_t r) {
    const int64_t *items = (const int64_t *)c->index.buf;
    const int64_t *at = (const int64_t *)c->view.buf;
    const unsigned char *values = (const unsigned char *)c->values.buf;
    const int64_t last = (int64_t)c->values.len - 14;  /* the last item start read whole */
    for (int64_t i = items[r]; i < items[r + 1]; i++) {
        int64_t n = at[i + 1] - at[i];
        if (n <= 14 && at[i] <= last && end - p >= 16) {
            uint64_t head, tail;
            memcpy(&head, values + at[i], 8);
            memcpy(&tail, values + at[i] + 6, 8);
            p[0] = 0x0a;
            p[1] = (unsigned char)n;
            memcpy(p + 2, &head, 8);
            memcpy(p + 8, &tail, 8);
            p += 2 + n;
            continue;
        }
        *p++ = 0x0a;
        p = put_varint(p, (uint64_t)n);
        p = put_bytes(p, values + at[i], (size_t)n);
    }
    return p;
}

/* Row r's value list content (v bytes) of column c at p (k: the row's place in the slice). */
static unsigned char *put_values(unsigned char *p, const Column *c, Py_ssize_t r, Py_ssize_t k,
                                 Py_ssize_t v) {
    const int64_t *at = (const int64_t *)c->view.buf;
    switch (c->mode) {
    case MODE_PACKED:
        memcpy(p, (const unsigned char *)c->view.buf + r * c->per_row, (size_t)v);
        return p + v;
    case MODE_BYTES:
        memcpy(p, c->ptrs[k], (size_t)v);
        return p + v;
    case MODE_VARINT:
    case MODE_VARINT_SPANS:
    case MODE_BYTES_LISTS:  /* made by size_rows_of (scratch_row) */
        return put_bytes(p, c->scratch + c->scratch_at[k], (size_t)v);
    default:  /* SPANS, PACKED_SPANS, LIST_SPANS */
        return put_bytes(p, (const unsigned char *)c->values.buf + at[r], (size_t)v);
    }
}

/* Row r's whole map entry of a GATHER or ENTRIES column at p. */
static unsigned char *put_whole_entry(unsigned char *p, const Column *c, Py_ssize_t r,
                                      Py_ssize_t k, Py_ssize_t v) {
    if (c->mode == MODE_ENTRIES) {
        memcpy(p, c->ptrs[k], (size_t)v);
        return p + v;
    }
    const int64_t *at = (const int64_t *)c->view.buf;
    int64_t i = ((const int64_t *)c->index.buf)[r];
    return put_bytes(p, (const unsigned char *)c->values.buf + at[i], (size_t)v);
}

static unsigned char *put_entry(unsigned char *p, const Column *c, Py_ssize_t r,
                                Py_ssize_t k) {
    Py_ssize_t v = c->value_bytes[k];  /* sized by entries_size */
    if (c->whole_entry)
        return put_whole_entry(p, c, r, k, v);
    EntrySizes e = entry_sizes(c, v);
    *p++ = 0x0a;
    p = put_varint(p, (uint64_t)e.entry);
    p = put_bytes(p, c->head, (size_t)c->kpre);
    p = put_bytes(p, (const unsigned char *)PyBytes_AS_STRING(c->key), (size_t)c->klen);
    *p++ = 0x12;
    p = put_varint(p, (uint64_t)e.feature);
    *p++ = c->tag;
    p = put_varint(p, (uint64_t)e.list);
    if (e.list && !c->whole_list) {
        *p++ = 0x0a;
        p = put_varint(p, (uint64_t)v);
    }
    return put_values(p, c, r, k, v);
}

/* Row r framed at p (its payload's CRCs are filled in later). */
static void put_record(const Plan *pl, unsigned char *p, Py_ssize_t r, Py_ssize_t k,
                       Py_ssize_t framed) {
    Py_ssize_t payload = framed - pl->header - pl->footer;
    Py_ssize_t entries = entries_of(pl, payload);
    if (pl->header)
        put_le(p, (uint64_t)payload, 8);
    p += pl->header;
    if (pl->wrap) {
        *p++ = 0x0a;
        p = put_varint(p, (uint64_t)entries);
    }
    for (Py_ssize_t j = 0; j < pl->ncols; j++)
        if (!absent(&pl->cols[j], r))
            p = put_entry(p, &pl->cols[j], r, k);
}

/* The rows held by hold_rows let go (their references dropped, their arrays freed). */
static void release_rows(Plan *pl) {
    for (Py_ssize_t j = 0; j < pl->ncols; j++) {
        Column *c = &pl->cols[j];
        for (Py_ssize_t k = 0; k < c->nobjs; k++)
            Py_DECREF(c->objs[k]);
        PyMem_Free(c->objs);
        PyMem_Free(c->ptrs);
        c->objs = NULL;
        c->ptrs = NULL;
        c->nobjs = 0;
    }
}

static void release_plan(Plan *pl) {
    for (Py_ssize_t j = 0; j < pl->ncols; j++) {
        Column *c = &pl->cols[j];
        if (c->held)
            PyBuffer_Release(&c->view);
        if (c->held_values)
            PyBuffer_Release(&c->values);
        if (c->held_index)
            PyBuffer_Release(&c->index);
        if (c->held_present)
            PyBuffer_Release(&c->present_view);
        Py_XDECREF(c->key);
        Py_XDECREF(c->items);
        PyMem_Free(c->scratch);
    }
    release_rows(pl);
    PyMem_Free(pl->cols);
}

/* The n bounds of column j each inside [0, limit] and none before the previous one: 0, or -1
 * with ValueError set. */
static int check_bounds(const int64_t *at, Py_ssize_t n, Py_ssize_t limit, Py_ssize_t j) {
    for (Py_ssize_t r = 0; r < n; r++) {
        if (at[r] < 0 || at[r] > (int64_t)limit || (r && at[r] < at[r - 1])) {
            PyErr_Format(PyExc_ValueError, "column %zd: bound %zd (%lld) outside the values "
                         "or before the previous one", j, r, (long long)at[r]);
            return -1;
        }
    }
    return 0;
}

/* The int64 values of row r of a VARINT or VARINT_SPANS column, and their count. */
static const unsigned char *varint_row(const Column *c, Py_ssize_t r, int64_t *count) {
    if (c->mode == MODE_VARINT) {
        *count = c->per_row;
        return (const unsigned char *)c->view.buf + 8 * r * c->per_row;
    }
    const int64_t *at = (const int64_t *)c->view.buf;
    *count = at[r + 1] - at[r];
    return (const unsigned char *)c->values.buf + 8 * at[r];
}

/* Bytes the value lists of rows [from, to) of a VARINT, VARINT_SPANS or BYTES_LISTS column
 * take at most (ten a varint; an item's key, length and bytes), and room for the last
 * store of put_varints or put_bytes_list; 0 for the other modes. */
static size_t scratch_need(const Column *c, Py_ssize_t from, Py_ssize_t to) {
    const int64_t *at = (const int64_t *)c->view.buf;
    if (c->mode == MODE_VARINT)
        return (size_t)c->per_row * (size_t)(to - from) * 10 + WIDE_VARINTS_SLACK;
    if (c->mode == MODE_VARINT_SPANS)
        return (size_t)(at[to] - at[from]) * 10 + WIDE_VARINTS_SLACK;
    if (c->mode != MODE_BYTES_LISTS)
        return 0;
    const int64_t *items = (const int64_t *)c->index.buf;
    return (size_t)(items[to] - items[from]) * 11 +
           (size_t)(at[items[to]] - at[items[from]]) + WIDE_VARINTS_SLACK;
}

/* Row r's value list of a VARINT, VARINT_SPANS or BYTES_LISTS column at p (end: the end of
 * the scratch); returns the end of what it wrote. */
static unsigned char *scratch_row(const Column *c, Py_ssize_t r, unsigned char *p,
                                  const unsigned char *end) {
    if (c->mode == MODE_BYTES_LISTS)
        return put_bytes_list(p, end, c, r);
    int64_t count;
    const unsigned char *ints = varint_row(c, r, &count);
    return put_varints(p, end, ints, count);
}

/* Room in each VARINT, VARINT_SPANS and BYTES_LISTS column's scratch for the value lists of
 * rows [from, to): 0, or -1 with MemoryError set. */
static int reserve_scratch(Plan *pl, Py_ssize_t from, Py_ssize_t to) {
    for (Py_ssize_t j = 0; j < pl->ncols; j++) {
        Column *c = &pl->cols[j];
        size_t need = scratch_need(c, from, to);
        if (need <= c->scratch_cap)
            continue;
        unsigned char *grown = PyMem_Realloc(c->scratch, need);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->scratch = grown;
        c->scratch_cap = need;
    }
    return 0;
}

/* A SPANS, PACKED_SPANS, LIST_SPANS or VARINT_SPANS column's data: (bounds, values), rows + 1
 * int64 bounds, each row's value values[bounds[r]:bounds[r + 1]]; every span checked inside
 * values here. */
static int get_spans_column(PyObject *data, Column *c, Py_ssize_t j, Py_ssize_t *rows) {
    if (!PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2) {
        PyErr_Format(PyExc_TypeError, "column %zd: its data is (bounds, values)", j);
        return -1;
    }
    if (get_i64(PyTuple_GET_ITEM(data, 0), &c->view, "bounds") < 0)
        return -1;
    c->held = 1;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(data, 1), &c->values, PyBUF_SIMPLE) < 0)
        return -1;
    c->held_values = 1;
    Py_ssize_t n = c->view.shape[0];
    /* VARINT_SPANS bounds count int64 values, the others bytes */
    Py_ssize_t limit = c->mode == MODE_VARINT_SPANS ? c->values.len / 8 : c->values.len;
    if (n < 1) {
        PyErr_Format(PyExc_ValueError, "column %zd: no bounds (rows + 1 of them)", j);
        return -1;
    }
    if (check_bounds((const int64_t *)c->view.buf, n, limit, j) < 0)
        return -1;
    *rows = n - 1;
    return 0;
}

/* Every one of the n entries of index below limit and not negative: 0, or -1 with ValueError
 * set. */
static int check_index(const int64_t *index, Py_ssize_t n, Py_ssize_t limit, Py_ssize_t j) {
    for (Py_ssize_t r = 0; r < n; r++) {
        if (index[r] < 0 || index[r] >= (int64_t)limit) {
            PyErr_Format(PyExc_ValueError, "column %zd: index %zd (%lld) outside its %zd "
                         "entries", j, r, (long long)index[r], limit);
            return -1;
        }
    }
    return 0;
}

/* A GATHER or BYTES_LISTS column's data: (index, bounds, values), int64 index and bounds, the
 * bounds inside values (as a SPANS column's), a GATHER index naming one of the bounds' spans
 * a row, a BYTES_LISTS index each row's first item and the last's end (rows + 1 of them, as a
 * VARINT_SPANS column's bounds); all checked here. */
static int get_indexed_column(PyObject *data, Column *c, Py_ssize_t j, Py_ssize_t *rows) {
    if (!PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 3) {
        PyErr_Format(PyExc_TypeError, "column %zd: its data is (index, bounds, values)", j);
        return -1;
    }
    if (get_i64(PyTuple_GET_ITEM(data, 0), &c->index, "index") < 0)
        return -1;
    c->held_index = 1;
    PyObject *spans = PyTuple_GetSlice(data, 1, 3);
    if (spans == NULL)
        return -1;
    Py_ssize_t spans_count;
    int got = get_spans_column(spans, c, j, &spans_count);
    Py_DECREF(spans);
    if (got < 0)
        return -1;
    const int64_t *index = (const int64_t *)c->index.buf;
    Py_ssize_t n = c->index.shape[0];
    if (c->mode == MODE_GATHER) {
        *rows = n;
        return check_index(index, n, spans_count, j);
    }
    if (n < 1) {
        PyErr_Format(PyExc_ValueError, "column %zd: no index (rows + 1 of it)", j);
        return -1;
    }
    if (check_bounds(index, n, spans_count, j) < 0)
        return -1;
    *rows = n - 1;
    return 0;
}

/* A column's rows present (None: every one), as one byte per row. */
static int get_present(PyObject *present, Column *c, Py_ssize_t j, Py_ssize_t rows) {
    if (present == NULL || present == Py_None)
        return 0;
    if (PyObject_GetBuffer(present, &c->present_view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    c->held_present = 1;
    if (c->present_view.ndim != 1 || c->present_view.itemsize != 1 ||
        c->present_view.shape[0] != rows) {
        PyErr_Format(PyExc_ValueError, "column %zd: present is one byte per row (%zd rows)", j,
                     rows);
        return -1;
    }
    c->present = (const unsigned char *)c->present_view.buf;
    return 0;
}

static int get_data(PyObject *data, Column *c, Py_ssize_t j, Py_ssize_t *rows);

/* The parts of column c's map entries that every row shares (its key and mode set). */
static void set_entry_parts(Column *c) {
    c->klen = PyBytes_GET_SIZE(c->key);
    c->head[0] = 0x0a;
    c->kpre = put_varint(c->head + 1, (uint64_t)c->klen) - c->head;
    c->key_part = c->kpre + c->klen + 1;
    c->one = c->mode == MODE_BYTES || c->mode == MODE_SPANS;
    c->whole_list = c->mode == MODE_LIST_SPANS || c->mode == MODE_BYTES_LISTS;
    c->whole_entry = c->mode == MODE_ENTRIES || c->mode == MODE_GATHER;
}

/* Column j of the plan from its (key, field, mode, data[, present]) tuple; its rows into
 * *rows. */
static int get_column(PyObject *spec, Column *c, Py_ssize_t j, Py_ssize_t *rows) {
    PyObject *key, *data, *present = NULL;
    int field, mode;
    if (!PyTuple_Check(spec) ||
        !PyArg_ParseTuple(spec, "SiiO|O:column", &key, &field, &mode, &data, &present)) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "column %zd is not a (bytes key, int field, int "
                         "mode, data[, present]) tuple", j);
        }
        return -1;
    }
    if (field < 1 || field > 15 || mode < MODE_PACKED || mode > MODE_BYTES_LISTS) {
        PyErr_Format(PyExc_ValueError, "column %zd: field %d or mode %d out of range", j,
                     field, mode);
        return -1;
    }
    c->mode = mode;
    c->tag = (unsigned char)((field << 3) | 2);
    Py_INCREF(key);
    c->key = key;
    set_entry_parts(c);
    if (get_data(data, c, j, rows) < 0)
        return -1;
    return get_present(present, c, j, *rows);
}

/* Whether a buffer's format is int64's. */
static int int64_format(const char *f) {
    return !strcmp(f, "q") || !strcmp(f, "l") || !strcmp(f, "<q") || !strcmp(f, "=q") ||
           !strcmp(f, "<l") || !strcmp(f, "=l");
}

/* A BYTES or ENTRIES column's data: a list of bytes (each checked when its row is sized). */
static int get_list_column(PyObject *data, Column *c, Py_ssize_t j, Py_ssize_t *rows) {
    if (!PyList_Check(data)) {
        PyErr_Format(PyExc_TypeError, "column %zd: its values are a list of bytes", j);
        return -1;
    }
    Py_INCREF(data);
    c->items = data;
    *rows = PyList_GET_SIZE(data);
    return 0;
}

/* A PACKED (uint8) or VARINT (int64) column's data: a 2-d C-contiguous array, a row each. */
static int get_array_column(PyObject *data, Column *c, Py_ssize_t j, Py_ssize_t *rows) {
    int mode = c->mode;
    if (PyObject_GetBuffer(data, &c->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    c->held = 1;
    Py_ssize_t want = mode == MODE_PACKED ? 1 : 8;
    int int64 = int64_format(c->view.format ? c->view.format : "B");
    if (c->view.ndim != 2 || c->view.itemsize != want || (mode == MODE_VARINT && !int64)) {
        PyErr_Format(PyExc_TypeError, "column %zd: a 2-d C-contiguous array of %s", j,
                     mode == MODE_PACKED ? "uint8" : "int64");
        return -1;
    }
    *rows = c->view.shape[0];
    c->per_row = c->view.shape[1];
    return 0;
}

/* A column's data, by its mode; its rows into *rows. */
static int get_data(PyObject *data, Column *c, Py_ssize_t j, Py_ssize_t *rows) {
    if (c->mode == MODE_BYTES || c->mode == MODE_ENTRIES)
        return get_list_column(data, c, j, rows);
    if (spans_mode(c->mode))
        return get_spans_column(data, c, j, rows);
    if (indexed_mode(c->mode))
        return get_indexed_column(data, c, j, rows);
    return get_array_column(data, c, j, rows);
}

static int get_plan(PyObject *columns, int wrap, Py_ssize_t header, Py_ssize_t footer,
                    Plan *pl, Py_ssize_t *rows) {
    memset(pl, 0, sizeof(*pl));
    if (!((header == 12 && footer == 4) || (header == 8 && footer == 0) ||
          (header == 0 && footer == 0))) {
        PyErr_SetString(PyExc_ValueError, "framing is (12, 4), (8, 0) or (0, 0)");
        return -1;
    }
    pl->wrap = wrap;
    pl->header = header;
    pl->footer = footer;
    if (!PyTuple_Check(columns)) {
        PyErr_SetString(PyExc_TypeError, "columns is a tuple of column tuples");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(columns);
    pl->cols = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Column));
    if (pl->cols == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *rows = -1;
    for (Py_ssize_t j = 0; j < n; j++) {
        Py_ssize_t r;
        pl->ncols = j + 1;
        if (get_column(PyTuple_GET_ITEM(columns, j), &pl->cols[j], j, &r) < 0)
            return -1;
        if (*rows >= 0 && r != *rows) {
            PyErr_Format(PyExc_ValueError, "column %zd has %zd rows, column 0 %zd", j, r,
                         *rows);
            return -1;
        }
        *rows = r;
    }
    return 0;
}

/* Row r's list items checked to be bytes (the caller's lists may have changed since the
 * plan was read): 0, or -1 with an exception set. */
static int check_items(const Plan *pl, Py_ssize_t r) {
    for (Py_ssize_t j = 0; j < pl->ncols; j++) {
        const Column *c = &pl->cols[j];
        if (c->items == NULL)
            continue;
        if (r >= PyList_GET_SIZE(c->items)) {  /* changed by a buffer export's code */
            PyErr_Format(PyExc_ValueError, "column %zd changed during the call", j);
            return -1;
        }
        if (!PyBytes_Check(PyList_GET_ITEM(c->items, r))) {
            PyErr_Format(PyExc_TypeError, "column %zd, row %zd: not bytes", j, r);
            return -1;
        }
    }
    return 0;
}

/* Rows [start, stop) that fit in room bytes, their value lists made into the scratches
 * (scratch_row) and their framed sizes into sz. Returns the rows, *used their bytes; 0 rows with *used the first row's
 * size when it does not fit; -1 on a bad item. lists: a column holds Python lists, whose
 * items are checked with the GIL held; without them the GIL is released (the plan's buffers
 * are held), so that the source's next batch is read meanwhile. */
static Py_ssize_t size_rows_of(Plan *pl, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t room,
                               int64_t *sz, Py_ssize_t *used, int lists) {
    Py_ssize_t total = 0, k = 0;
    for (Py_ssize_t r = start; r < stop; r++, k++) {
        if (lists && check_items(pl, r) < 0)
            return -1;
        for (Py_ssize_t j = 0; j < pl->ncols; j++) {
            Column *c = &pl->cols[j];
            if (c->scratch != NULL) {  /* VARINT, VARINT_SPANS, BYTES_LISTS: made here */
                int64_t from = k ? c->scratch_at[k - 1] + c->value_bytes[k - 1] : 0;
                c->scratch_at[k] = from;
                c->value_bytes[k] = absent(c, r) ? 0 : scratch_row(
                    c, r, c->scratch + from, c->scratch + c->scratch_cap) - (c->scratch + from);
            }
        }
        Py_ssize_t size = pl->header + payload_size(pl, entries_size(pl, r, k)) + pl->footer;
        if (size > room - total) {
            if (k == 0)
                total = size;
            break;
        }
        sz[k] = size;
        total += size;
    }
    *used = total;
    return k;
}

static Py_ssize_t size_rows(Plan *pl, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t room,
                            int64_t *sz, Py_ssize_t *used) {
    int lists = 0;
    for (Py_ssize_t j = 0; j < pl->ncols; j++)
        lists |= pl->cols[j].items != NULL;
    if (lists)
        return size_rows_of(pl, start, stop, room, sz, used, 1);
    Py_ssize_t n;
    Py_BEGIN_ALLOW_THREADS
    n = size_rows_of(pl, start, stop, room, sz, used, 0);
    Py_END_ALLOW_THREADS
    return n;
}

/* The bytes and sizes of the rows written, each object referenced while the GIL is
 * released (the caller's lists may change meanwhile). They are the objects size_rows has
 * just checked and sized: nothing between the two runs Python code, and nothing here
 * allocates a Python object, whose allocation can start a collection, and so run a
 * finalizer or a gc callback that changes the lists. (Only the rows written are held: a
 * writer encodes a long list in many calls, and holding all of it each time would cost as
 * much as the encoding.) 0, or -1 with MemoryError set. */
static int hold_rows(Plan *pl, Py_ssize_t start, Py_ssize_t n) {
    for (Py_ssize_t j = 0; j < pl->ncols; j++) {
        Column *c = &pl->cols[j];
        if (c->items == NULL)
            continue;
        c->objs = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(*c->objs));
        c->ptrs = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(*c->ptrs));
        if (c->objs == NULL || c->ptrs == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t k = 0; k < n; k++, c->nobjs++) {
            PyObject *item = PyList_GET_ITEM(c->items, start + k);
            c->objs[k] = Py_NewRef(item);
            c->ptrs[k] = (const unsigned char *)PyBytes_AS_STRING(item);
        }
    }
    return 0;
}

/* The payload CRC32Cs of rows by the CPU's instruction, three at a time. */
static void hw_payload_crcs(const unsigned char *base, const int64_t *at, const int64_t *sz,
                            Py_ssize_t n, Py_ssize_t header, Py_ssize_t footer, uint32_t *crc) {
    Py_ssize_t k = 0;
    for (; k + 3 <= n; k += 3) {
        const unsigned char *p[3];
        size_t len[3];
        for (int i = 0; i < 3; i++) {
            p[i] = base + at[k + i] + header;
            len[i] = (size_t)(sz[k + i] - header - footer);
        }
        hw_crc32c_x3(p, len, crc + k);
    }
    for (; k < n; k++)
        crc[k] = hw_crc32c(base + at[k] + header, (size_t)(sz[k] - header - footer));
}

/* The CRCs the framing holds, and the payloads' CRC32Cs into crc (when not NULL). */
static int put_crcs(const Plan *pl, unsigned char *base, const int64_t *at, const int64_t *sz,
                    Py_ssize_t n, uint32_t *crc, PyObject *crc_fn) {
    int tf = pl->footer == 4;
    if (crc == NULL && !tf)
        return 0;
    if (hw_crc_on) {
        Py_BEGIN_ALLOW_THREADS
        hw_payload_crcs(base, at, sz, n, pl->header, pl->footer, crc);
        if (tf) {
            for (Py_ssize_t k = 0; k < n; k++) {
                unsigned char *p = base + at[k];
                put_le(p + 8, hw_mask(hw_crc32c(p, 8)), 4);
                put_le(p + sz[k] - 4, hw_mask(crc[k]), 4);
            }
        }
        Py_END_ALLOW_THREADS
        return 0;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        unsigned char *p = base + at[k];
        uint32_t length_crc;
        if (package_crc_of(crc_fn, p + pl->header, sz[k] - pl->header - pl->footer, &crc[k]) < 0)
            return -1;
        if (tf) {
            if (package_crc_of(crc_fn, p, 8, &length_crc) < 0)
                return -1;
            put_le(p + 8, hw_mask(length_crc), 4);
            put_le(p + sz[k] - 4, hw_mask(crc[k]), 4);
        }
    }
    return 0;
}

const char encode_doc[] =
"encode(columns, wrap, header, footer, start, stop, limit, out, sizes, crcs, crc32c)\n"
"    -> (rows, used)\n\n"
"Rows [start, stop) of columns (a tuple of (key, field, mode, data): see encode.c) as\n"
"records, each framed (header, footer: (12, 4) TFRecord, (8, 0) OFRecord, (0, 0) none; wrap:\n"
"the entries inside an Example's Features), back to back into out, as many as fit in\n"
"min(limit, len(out)) bytes. sizes (int64) gets each record's framed size, crcs (uint32, or\n"
"None) its payload's CRC32C. Returns the rows written and the bytes used; (0, n) when the\n"
"first record, of n bytes, does not fit.";

/* encode()'s output buffers: out, sizes, and crcs when given (crcs_given). */
typedef struct {
    Py_buffer out, sv, cv;
    int crcs_given;
} Outputs;

/* Rows [start, stop) of `rows` and limit in range: 0, or -1 with ValueError set. */
static int rows_in_range(Py_ssize_t rows, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t limit) {
    if (rows < 0) {
        PyErr_SetString(PyExc_ValueError, "no columns");
        return -1;
    }
    if (start < 0 || stop < start || stop > rows || limit < 0) {
        PyErr_Format(PyExc_ValueError, "rows [%zd, %zd) or limit %zd out of range (%zd rows)",
                     start, stop, limit, rows);
        return -1;
    }
    return 0;
}

/* out (writable), sizes (int64) and crcs (uint32, or None) for n rows: 0, or -1 with an
 * exception set (what was acquired is released by release_outputs). */
static int get_outputs(Outputs *o, PyObject *out_obj, PyObject *sizes_obj, PyObject *crcs_obj,
                       Py_ssize_t n) {
    if (PyObject_GetBuffer(out_obj, &o->out, PyBUF_WRITABLE) < 0)
        return -1;
    if (get_i64_out(sizes_obj, &o->sv, "sizes") < 0)
        return -1;
    if (o->sv.shape[0] < n) {
        PyErr_SetString(PyExc_ValueError, "sizes is shorter than the rows");
        return -1;
    }
    o->crcs_given = crcs_obj != Py_None;
    if (!o->crcs_given)
        return 0;
    if (PyObject_GetBuffer(crcs_obj, &o->cv, PyBUF_WRITABLE | PyBUF_ND) < 0)
        return -1;
    if (o->cv.itemsize != 4 || o->cv.ndim != 1 || o->cv.shape[0] < n) {
        PyErr_SetString(PyExc_ValueError, "crcs is a uint32 array as long as the rows");
        return -1;
    }
    return 0;
}

static void release_outputs(Outputs *o) {
    if (o->cv.obj)
        PyBuffer_Release(&o->cv);
    if (o->sv.obj)
        PyBuffer_Release(&o->sv);
    if (o->out.obj)
        PyBuffer_Release(&o->out);
}

/* Rows [start, start + n) framed back to back at base (framed sizes sz; each one's place into
 * at), with the GIL released (the lists' bytes are held by hold_rows). */
static void write_records(const Plan *pl, unsigned char *base, int64_t *at, const int64_t *sz,
                          Py_ssize_t start, Py_ssize_t n) {
    Py_BEGIN_ALLOW_THREADS
    int64_t pos = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        at[k] = pos;
        put_record(pl, base + pos, start + k, k, (Py_ssize_t)sz[k]);
        pos += sz[k];
    }
    Py_END_ALLOW_THREADS
}

/* Rows [start, stop) that fit in room bytes from base: sized, written and checksummed
 * (payload CRC32Cs into crc when not NULL); their framed sizes into sz, their places into at.
 * Returns the rows, *used their bytes (the first row's size and 0 rows when it does not
 * fit); -1 with an exception set. */
static Py_ssize_t encode_chunk(Plan *pl, unsigned char *base, Py_ssize_t start, Py_ssize_t stop,
                               Py_ssize_t room, int64_t *sz, int64_t *at, uint32_t *crc,
                               Py_ssize_t *used, PyObject *crc_fn) {
    if (reserve_scratch(pl, start, stop) < 0)
        return -1;
    Py_ssize_t n = size_rows(pl, start, stop, room, sz, used);
    if (n <= 0)
        return n;
    if (hold_rows(pl, start, n) < 0)
        return -1;
    write_records(pl, base, at, sz, start, n);
    int failed = put_crcs(pl, base, at, sz, n, crc, crc_fn);
    release_rows(pl);
    return failed ? -1 : n;
}

/* The arrays a call's chunks share: each row's place in its chunk, and the payload CRCs
 * (the caller's crcs, or, for TFRecord's framing when the caller takes none, a chunk's own). */
typedef struct {
    int64_t *at;
    uint32_t *crc;
    int own_crc;
} ChunkArrays;

static void free_chunk_arrays(ChunkArrays *a) {
    PyMem_Free(a->at);
    if (a->own_crc)
        PyMem_Free(a->crc);
}

/* The arrays for the chunks of a call of rows rows: 0, or -1 with MemoryError set. */
static int get_chunk_arrays(const Plan *pl, const Outputs *o, Py_ssize_t rows, ChunkArrays *a) {
    size_t most = (size_t)(rows < 1 ? 1 : rows < CHUNK_ROWS ? rows : CHUNK_ROWS);
    a->own_crc = !o->crcs_given && pl->footer;
    a->at = PyMem_Malloc(most * sizeof(int64_t));
    a->crc = o->crcs_given ? (uint32_t *)o->cv.buf
                           : a->own_crc ? PyMem_Malloc(most * sizeof(uint32_t)) : NULL;
    if (a->at == NULL || (a->own_crc && a->crc == NULL)) {
        free_chunk_arrays(a);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Where the payload CRCs of the chunk starting at the call's row done go (NULL: none). */
static uint32_t *chunk_crcs(const ChunkArrays *a, Py_ssize_t done) {
    return a->crc == NULL || a->own_crc ? a->crc : a->crc + done;
}

/* encode() once its arguments are checked: the rows that fit written, framed, with their
 * CRCs, a chunk of CHUNK_ROWS at a time; (rows, used) or NULL with an exception set. */
static PyObject *encode_rows(Plan *pl, const Outputs *o, Py_ssize_t start, Py_ssize_t stop,
                             Py_ssize_t limit, PyObject *crc_fn) {
    Py_ssize_t room = limit < o->out.len ? limit : o->out.len, used = 0, done = 0, n = 0;
    int64_t *sz = (int64_t *)o->sv.buf;
    unsigned char *base = (unsigned char *)o->out.buf;
    ChunkArrays a;
    if (get_chunk_arrays(pl, o, stop - start, &a) < 0)
        return NULL;
    while (start + done < stop) {
        Py_ssize_t from = start + done, part;
        Py_ssize_t to = stop - from < CHUNK_ROWS ? stop : from + CHUNK_ROWS;
        n = encode_chunk(pl, base + used, from, to, room - used, sz + done, a.at,
                         chunk_crcs(&a, done), &part, crc_fn);
        if (n <= 0) {  /* failed, or the next row does not fit */
            if (done == 0)
                used = part;  /* the first row's size */
            break;
        }
        done += n;
        used += part;
        if (n < to - from)  /* the block is full */
            break;
    }
    free_chunk_arrays(&a);
    return n < 0 ? NULL : Py_BuildValue("nn", done, used);
}

PyObject *encode(PyObject *self, PyObject *args) {
    PyObject *columns, *out_obj, *sizes_obj, *crcs_obj, *crc_fn;
    int wrap;
    Py_ssize_t header, footer, start, stop, limit;
    if (!PyArg_ParseTuple(args, "OpnnnnnOOOO:encode", &columns, &wrap, &header, &footer, &start,
                          &stop, &limit, &out_obj, &sizes_obj, &crcs_obj, &crc_fn))
        return NULL;
    Plan pl;
    Py_ssize_t rows;
    Outputs o = {{0}};
    PyObject *result = NULL;
    if (get_plan(columns, wrap, header, footer, &pl, &rows) == 0 &&
        rows_in_range(rows, start, stop, limit) == 0 &&
        get_outputs(&o, out_obj, sizes_obj, crcs_obj, stop - start) == 0)
        result = encode_rows(&pl, &o, start, stop, limit, crc_fn);
    release_outputs(&o);
    release_plan(&pl);
    return result;
}

const char wide_varints_doc[] =
"wide_varints(on=None) -> bool\n\n"
"Whether encode() writes varints eight at a time with the CPU's AVX-512 instructions (else\n"
"one at a time); with on, switch it first (it stays off on a CPU without them).";

PyObject *wide_varints(PyObject *self, PyObject *args) {
    return switch_flag(args, "|O:wide_varints", &wide_varints_on,
                       HAVE_WIDE_VARINTS && wide_varints_supported());
}
