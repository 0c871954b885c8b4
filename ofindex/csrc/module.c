/* ofindex._native: the per-record loops of the hot paths, compiled.
 *
 * records.c  framed records cut and checked (dataset reads)
 * spans.c    where a batch's records lie (big batches, before they are filled on threads)
 * layout.c   layout check and payload gather (batched decoding)
 * examples.c features located in records laid out as writers lay them out (batched decoding)
 * values.c   the values of the located lists, a batch in one call (batched decoding)
 * onerecord.c one record decoded by a plan made once per spec (Decoder, decode_example)
 * batches.c  batches without an object per record; big batches filled on threads
 * checker.c  a run's CRCs checked on a compiled thread ahead of the batches made from it
 * reader.c   one record by its global number in one call (the fast path of ds[i])
 * preads.c   a batch read from files with preadv, without the GIL (mmap=False)
 * blocks.c   recycled memory for big decoded arrays
 * walk.c     the index builder's header walk (GIL released)
 * inflate.c  zlib's inflate for seek points in gzip/zlib files (GIL released)
 * sums.c     the CRC32C of many payloads (OFRecord checksums at build time)
 * encode.c   records encoded from columns and framed, for writers (GIL released)
 * guard.c    reads of memory maps whose file shrinks under them: an error, not SIGBUS
 * keysearch.c a key index's sorted keys searched (ds.lookup: one key, or a batch)
 * keyrecords.c a key index leaf's records decoded into a query's answer (ds.where)
 * codehits.c a dictionary column page's records matching a query, by their codes (ds.where)
 * snapshot.c a caller's list held as it is when a call starts (Python code may change it)
 * threads.h  its two helper threads on POSIX, Windows, or none (the inline paths)
 *
 * Pure functions over buffers the caller already holds (a memory map, a fetched range, a
 * list of records): no I/O, no error messages. Each returns its result, or the position of
 * the first record that fails a check, and the Python side (which has the same logic in
 * pure Python, used when this module is not built) builds the precise error. One error is
 * raised here, because only this side sees it: a memory map read after its file shrank
 * (StaleIndexError naming the file, see guard.c).
 *
 * CRC32C comes from the `crc32c` package (passed in as a callable), except for payloads
 * below 4 KiB, checked with the CPU's CRC32C instruction where it exists (see hwcrc.h).
 */
#include "native.h"
#include "threads.h"
#include "hwcrc.h"
#include "widevarints.h"

static PyMethodDef methods[] = {
    {"cut", cut, METH_VARARGS, cut_doc},
    {"gather", gather, METH_VARARGS, gather_doc},
    {"record", (PyCFunction)(void (*)(void))record, METH_FASTCALL, record_doc},
    {"spans", spans, METH_VARARGS, spans_doc},
    {"same_bytes", same_bytes, METH_VARARGS, same_bytes_doc},
    {"gather_bytes", gather_bytes, METH_VARARGS, gather_bytes_doc},
    {"locate", locate, METH_VARARGS, locate_doc},
    {"gather_spans", gather_spans, METH_VARARGS, gather_spans_doc},
    {"byte_spans", byte_spans, METH_VARARGS, byte_spans_doc},
    {"span_sums", span_sums, METH_VARARGS, span_sums_doc},
    {"values", values, METH_VARARGS, values_doc},
    {"pool", pool_ctl, METH_VARARGS, pool_doc},
    {"walk", walk, METH_VARARGS, walk_doc},
    {"pack", pack, METH_VARARGS, pack_doc},
    {"slices", slices, METH_VARARGS, slices_doc},
    {"blank", blank, METH_O, blank_doc},
    {"fill", fill, METH_VARARGS, fill_doc},
    {"hw_crc", hw_crc, METH_VARARGS, hw_crc_doc},
    {"hw_crc32c", hw_crc32c_py, METH_O, hw_crc32c_doc},
    {"crcs", crcs, METH_VARARGS, crcs_doc},
    {"preads", preads, METH_VARARGS, preads_doc},
    {"encode", encode, METH_VARARGS, encode_doc},
    {"wide_varints", wide_varints, METH_VARARGS, wide_varints_doc},
    {"guard_sigbus", guard_sigbus, METH_NOARGS, guard_sigbus_doc},
    {"copy_out", copy_out, METH_VARARGS, copy_out_doc},
    {"key_span", (PyCFunction)(void (*)(void))key_span, METH_FASTCALL, key_span_doc},
    {"key_places", key_places, METH_VARARGS, key_places_doc},
    {"key_find", (PyCFunction)(void (*)(void))key_find, METH_FASTCALL, key_find_doc},
    {"key_gather", key_gather, METH_VARARGS, key_gather_doc},
    {"key_lookup", (PyCFunction)(void (*)(void))key_lookup, METH_FASTCALL, key_lookup_doc},
    {"key_records", (PyCFunction)(void (*)(void))key_records, METH_FASTCALL, key_records_doc},
    {"code_hits", (PyCFunction)(void (*)(void))code_hits, METH_FASTCALL, code_hits_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "Compiled per-record loops of ofindex's hot paths.",
    -1, methods, NULL, NULL, NULL, NULL,
};

/* The module's types: each made ready before the module is made, and added to it under its
 * name (NULL: added by its file's own init, reader_module_init). */
static struct {
    const char *name;
    PyTypeObject *type;
} types[] = {
    {"Block", &BlockType},
    {"Inflater", &InflaterType},
    {"Checker", &CheckerType},
    {NULL, &ReaderType},
    {"RecordPlan", &RecordPlanType},
    {"KeyFinder", &KeyFinderType},
};

#define N_TYPES ((int)(sizeof(types) / sizeof(types[0])))

/* Every type of `types` ready; 0, or -1 with an exception set. */
static int ready_types(void) {
    for (int t = 0; t < N_TYPES; t++)
        if (PyType_Ready(types[t].type) < 0)
            return -1;
    return 0;
}

/* The named types of `types` added to module m; 0, or -1 with an exception set. */
static int add_types(PyObject *m) {
    for (int t = 0; t < N_TYPES; t++) {
        if (types[t].name == NULL)
            continue;
        Py_INCREF(types[t].type);
        if (PyModule_AddObject(m, types[t].name, (PyObject *)types[t].type) < 0) {
            Py_DECREF(types[t].type);
            return -1;
        }
    }
    return 0;
}

PyMODINIT_FUNC PyInit__native(void) {
    if (onerecord_init() < 0 || keysearch_init() < 0 || ready_types() < 0)
        return NULL;
    hw_crc_on = HAVE_HW_CRC && hw_crc_supported();
    wide_varints_on = HAVE_WIDE_VARINTS && wide_varints_supported();
    if (guard_ensure() != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    /* its types, its files' own registrations, and which thread primitives it was built with
     * (threads.h): "pthreads", "win32" or "none" */
    if (add_types(m) < 0 || reader_module_init(m) < 0 || onerecord_module_init(m) < 0
        || PyModule_AddStringConstant(m, "threads", OFINDEX_THREADS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
