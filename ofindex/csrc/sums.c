/* The CRC32C of many payloads of one buffer: the per-record checksums the index builder
 * stores for OFRecord files (which carry none of their own), computed in the pass that
 * already holds the bytes (a compressed file's inflated stream, a remote file's blocks).
 * The CPU's CRC32C instruction runs without the GIL; without it, the crc32c package's
 * function is called per payload (it releases the GIL itself for large ones). */
#include "native.h"
#include "hwcrc.h"

const char crcs_doc[] =
"crcs(buf, starts, ends, out, crc32c) -> None\n\n"
"out[k] = CRC32C of buf[starts[k]:ends[k]] (int64 starts and ends, uint32 out). Every\n"
"span is checked against buf first (ValueError), before anything is computed.";

PyObject *crcs(PyObject *self, PyObject *args) {
    PyObject *buf_obj, *starts_obj, *ends_obj, *out_obj, *crc_fn;
    if (!PyArg_ParseTuple(args, "OOOOO:crcs", &buf_obj, &starts_obj, &ends_obj, &out_obj,
                          &crc_fn))
        return NULL;
    Py_buffer buf, sv, ev, ov;
    if (get_spans(buf_obj, starts_obj, ends_obj, &buf, &sv, &ev) < 0)
        return NULL;
    if (PyObject_GetBuffer(out_obj, &ov, PyBUF_WRITABLE | PyBUF_ND) < 0) {
        PyBuffer_Release(&ev);
        PyBuffer_Release(&sv);
        PyBuffer_Release(&buf);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = sv.shape[0];
    const int64_t *st = (const int64_t *)sv.buf, *en = (const int64_t *)ev.buf;
    uint32_t *out = (uint32_t *)ov.buf;
    if (ov.itemsize != 4 || ov.ndim != 1 || ov.shape[0] != n) {
        PyErr_SetString(PyExc_ValueError, "out (uint32) and the spans differ in length");
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {  /* no arithmetic that can wrap: spans come from data */
        if (st[k] < 0 || en[k] < st[k] || en[k] > (int64_t)buf.len) {
            PyErr_Format(PyExc_ValueError, "span %zd [%lld, %lld) is outside the buffer", k,
                         (long long)st[k], (long long)en[k]);
            goto done;
        }
    }
    const unsigned char *base = (const unsigned char *)buf.buf;
    if (hw_crc_on) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < n; k++)
            out[k] = hw_crc32c(base + st[k], (size_t)(en[k] - st[k]));
        Py_END_ALLOW_THREADS
    } else {
        for (Py_ssize_t k = 0; k < n; k++)
            if (package_crc_of(crc_fn, base + st[k], en[k] - st[k], &out[k]) < 0)
                goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&ov);
    PyBuffer_Release(&ev);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&buf);
    return result;
}
