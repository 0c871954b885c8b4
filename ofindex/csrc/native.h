/* Shared by the sources of ofindex._native (see module.c). */
#ifndef OFINDEX_NATIVE_H
#define OFINDEX_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The little-endian unsigned integer in the n bytes at p (compilers make this one load). */
static inline uint64_t load_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Checked arithmetic on non-negative sizes: 0 and the result in *out, or -1 on overflow
 * (the callers set an exception). Every size derived from caller data goes through these. */
static inline int add_size(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) {
    if (a < 0 || b < 0 || a > PY_SSIZE_T_MAX - b)
        return -1;
    *out = a + b;
    return 0;
}

static inline int mul_size(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out) {
    if (a < 0 || b < 0 || (a != 0 && b > PY_SSIZE_T_MAX / a))
        return -1;
    *out = a * b;
    return 0;
}

/* An int64 vector from a contiguous buffer (numpy int64 array); what names it in errors. */
int get_i64(PyObject *obj, Py_buffer *view, const char *what);
/* The same, writable (batches.c). */
int get_i64_out(PyObject *obj, Py_buffer *view, const char *what);
/* Acquire buf (any bytes-like) and its spans, int64 starts and ends of equal length
 * (ValueError otherwise); on failure nothing stays acquired and -1 is returned. */
int get_spans(PyObject *buf_obj, PyObject *starts_obj, PyObject *ends_obj, Py_buffer *buf,
              Py_buffer *sv, Py_buffer *ev);
/* The CRC32C of `data` (any bytes-like) by the crc32c package's function `crc_fn`, into *out;
 * -1 with an exception set, also when it does not return a 32-bit int (records.c). */
int package_crc(PyObject *crc_fn, PyObject *data, uint32_t *out);
/* The same of the n bytes at p (through a read-only memoryview of them). */
int package_crc_of(PyObject *crc_fn, const unsigned char *p, Py_ssize_t n, uint32_t *out);
/* A u64 vector (a sidecar's offsets block; records.c). */
int get_u64(PyObject *obj, Py_buffer *view);
/* The span [*start, *end) of record i from a sidecar's offsets ov whose last record ends at
 * iend: 0, 1 (too short for min framing bytes or past iend: corrupt offsets), 3 (past the
 * len bytes of data held), or -1 with IndexError set (records.c). */
int span_of(const Py_buffer *ov, int64_t iend, int64_t i, Py_ssize_t min, Py_ssize_t len,
            int64_t *start, int64_t *end);

/* snapshot.c: a caller's list held as it is when a call starts (Python code that runs in
 * the call may change the list itself) */
/* A new tuple of the items of `list` (a list), or NULL with an exception set (ValueError
 * naming `what` when a collection started by the tuple's allocation shortened the list). */
PyObject *snapshot_list(PyObject *list, const char *what);
/* 0 when list still holds held's items (the same objects), else -1 with ValueError naming
 * `what` (for a list of objects a call writes into). */
int snapshot_unchanged(PyObject *list, PyObject *held, const char *what);
/* Snapshots of three lists (`what` names each), all or none: 0, or -1 with an exception
 * set; release3 releases them. */
int snapshot3(PyObject *a, PyObject *b, PyObject *c, PyObject *out[3], const char *what[3]);
void release3(PyObject *held[3]);

/* records.c: framed records cut out of buffers, with their checks */
/* The masked CRC32C of `data` (any bytes-like) through the crc32c package's function
 * `crc_fn`, as TFRecord stores it; -1 with an exception set. */
int64_t masked_crc_of(PyObject *crc_fn, PyObject *data);
/* The masked CRC of the 8 length bytes at p (a TFRecord header of a `length`-byte payload),
 * memoised in `memo` ({length: crc}, shared with the Python side); -1 with an exception set. */
int64_t masked_length_crc(PyObject *crc_fn, PyObject *memo, const unsigned char *p,
                          int64_t length);
PyObject *cut(PyObject *self, PyObject *args);
PyObject *gather(PyObject *self, PyObject *args);
PyObject *record(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern const char cut_doc[], gather_doc[], record_doc[];

/* walk.c: the index builder's header walk, without the GIL */
PyObject *walk(PyObject *self, PyObject *args);
extern const char walk_doc[];

/* spans.c: where the records of a batch lie, from their sidecars' offsets */
PyObject *spans(PyObject *self, PyObject *args);
extern const char spans_doc[];

/* layout.c: the byte-layout check and payload gather of batched decoding */
PyObject *same_bytes(PyObject *self, PyObject *args);
PyObject *gather_bytes(PyObject *self, PyObject *args);
extern const char same_bytes_doc[], gather_bytes_doc[];

/* examples.c: asked-for features located in records laid out as writers lay them out */
PyObject *locate(PyObject *self, PyObject *args);
PyObject *gather_spans(PyObject *self, PyObject *args);
PyObject *byte_spans(PyObject *self, PyObject *args);
PyObject *span_sums(PyObject *self, PyObject *args);
extern const char locate_doc[], gather_spans_doc[], byte_spans_doc[], span_sums_doc[];
/* values.c: the values of the lists `locate` found (varints, bytes), a batch in one call */
PyObject *values(PyObject *self, PyObject *args);
extern const char values_doc[];
/* onerecord.c: one record decoded to numpy arrays by a plan made once per spec; numpy's C
 * API imported by onerecord_init (-1 with an exception set) */
extern PyTypeObject RecordPlanType;
int onerecord_init(void);
/* Adds RecordCall, the base of one-record decoders called without a Python frame; -1 with an
 * exception set. */
int onerecord_module_init(PyObject *module);
/* A new 1-d numpy array of n objects, all NULL until set, its slots in *slots (for code that
 * does not use numpy's C API); NULL with an exception set. */
PyObject *object_array(Py_ssize_t n, PyObject ***slots);
/* inflate.c: zlib's inflate with block boundaries, priming and windows (seek points) */
extern PyTypeObject InflaterType;
/* batches.c: batches without an object per record, big batches filled on threads */
PyObject *pack(PyObject *self, PyObject *args);
PyObject *slices(PyObject *self, PyObject *args);
PyObject *blank(PyObject *self, PyObject *arg);
PyObject *fill(PyObject *self, PyObject *args);
PyObject *hw_crc(PyObject *self, PyObject *args);
/* A switch of the module (hw_crc, wide_varints): with an argument (parsed by format), *flag
 * set to its truth where supported; returns *flag as a bool. */
PyObject *switch_flag(PyObject *args, const char *format, int *flag, int supported);
PyObject *hw_crc32c_py(PyObject *self, PyObject *arg);
extern const char pack_doc[], slices_doc[], blank_doc[], fill_doc[], hw_crc_doc[],
    hw_crc32c_doc[];
/* Records [0, n) of src checked (framing, stored lengths, with verify the TFRecord CRCs
 * with the CRC32C instruction); payload bytes to *total; -1 or the first failing k. */
Py_ssize_t check_all(const unsigned char *src, Py_ssize_t len, const int64_t *st,
                     const int64_t *en, Py_ssize_t n, Py_ssize_t header, Py_ssize_t footer,
                     int verify, int64_t *total);

/* checker.c: a run's TFRecords checked on a compiled thread, ahead of its reader */
extern PyTypeObject CheckerType;

/* preads.c: a batch of records read from files with preadv, without the GIL */
PyObject *preads(PyObject *self, PyObject *args);
extern const char preads_doc[];

/* guard.c: reads of memory maps whose file may shrink under them (SIGBUS) */
/* What guard_run returns when the call faulted. */
#define GUARD_FAULT (-1000)
/* Install the SIGBUS handler (again, when something replaced it); 0, or -1 (errno set). */
int guard_ensure(void);
/* memcpy in a guarded call: 0, or -1 when the source's pages are gone. */
int guard_copy(void *dst, const void *src, size_t n);
/* A framed record's header, payload and footer (back to back at src) copied to three places
 * in one guarded call: 0, or -1 when the source's pages are gone. */
int guard_copy3(unsigned char *head, unsigned char *payload, unsigned char *foot,
                const unsigned char *src, size_t header, size_t size, size_t footer);
/* fn(arg) in a guarded call: its result (never GUARD_FAULT), or GUARD_FAULT when it touched
 * pages that are gone. fn takes no lock and makes no Python call. */
Py_ssize_t guard_run(Py_ssize_t (*fn)(void *), void *arg);
/* The address this thread's last fault in a guarded call touched (NULL: unknown). */
const void *guard_last_fault(void);
/* Set StaleIndexError naming the file the buffer owner maps; returns NULL. */
PyObject *map_fault(PyObject *owner);
PyObject *guard_sigbus(PyObject *self, PyObject *unused);
PyObject *copy_out(PyObject *self, PyObject *args);
extern const char guard_sigbus_doc[], copy_out_doc[];

/* reader.c: one record by its global number in one call (the fast path of ds[i]) */
extern PyTypeObject ReaderType;
int reader_module_init(PyObject *module);

/* blocks.c: recycled memory for big decoded arrays */
/* sums.c */
PyObject *crcs(PyObject *self, PyObject *args);
extern const char crcs_doc[];
/* encode.c: records encoded from columns and framed (the writers' batch encoder) */
PyObject *encode(PyObject *self, PyObject *args);
extern const char encode_doc[];
PyObject *wide_varints(PyObject *self, PyObject *args);
extern const char wide_varints_doc[];

extern PyTypeObject BlockType;
PyObject *pool_ctl(PyObject *self, PyObject *args);
extern const char pool_doc[];

/* keysearch.c: a key index's sorted keys searched (one key, or a batch) */
PyObject *key_span(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *key_places(PyObject *self, PyObject *args);
PyObject *key_find(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *key_gather(PyObject *self, PyObject *args);
PyObject *key_lookup(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern const char key_span_doc[], key_places_doc[], key_find_doc[], key_gather_doc[],
    key_lookup_doc[];
/* ds.lookup(column, key) of one key in one call (added to the module as KeyFinder) */
extern PyTypeObject KeyFinderType;
/* numpy's C API for keysearch.c (-1 with an exception set) */
int keysearch_init(void);
/* keyrecords.c: a key index leaf's records decoded into a query's answer */
PyObject *key_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern const char key_records_doc[];
/* codehits.c: a dictionary column page's records matching a query, by their codes */
PyObject *code_hits(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
extern const char code_hits_doc[];

#endif
