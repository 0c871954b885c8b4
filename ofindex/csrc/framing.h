/* The framing sizes the compiled loops read, decided in one place. */
#ifndef OFINDEX_FRAMING_H
#define OFINDEX_FRAMING_H

#include "native.h"
#include "hwcrc.h"

/* Whether a call's framing is refused: anything but a TFRecord's (header 12, footer 4) or an
 * OFRecord's (8, 0: it has no CRCs to verify) sets ValueError and returns -1. `no_hw_crc` is
 * the message for verify without the CPU's CRC32C instruction where a loop checks CRCs with
 * it alone, or NULL where the crc32c package stands in for it. 0: accepted. */
static inline int framing_refused(Py_ssize_t header, Py_ssize_t footer, int verify,
                                  const char *no_hw_crc) {
    if (!((header == 12 && footer == 4) || (header == 8 && footer == 0 && !verify))) {
        PyErr_SetString(PyExc_ValueError, "bad framing sizes");
        return -1;
    }
    if (verify && no_hw_crc != NULL && !hw_crc_on) {
        PyErr_SetString(PyExc_ValueError, no_hw_crc);
        return -1;
    }
    return 0;
}

#endif
