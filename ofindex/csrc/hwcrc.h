/* CRC32C of small payloads with the CPU's own instruction (x86-64 SSE4.2 `crc32`).
 *
 * The `crc32c` package computes every CRC of ofindex, but each call from C costs a Python
 * call (argument parsing, a buffer export, an int result): about four times the CRC itself
 * for a 200-byte record, and the bound of per-record loops. For payloads below HW_CRC_MAX
 * the loops use the instruction instead (one instruction per 8 bytes, no Python object);
 * bigger payloads, and CPUs without the instruction, still go through the package. Tests
 * check this path against the package. */
#ifndef OFINDEX_HWCRC_H
#define OFINDEX_HWCRC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Payloads below this size are checked with the instruction (where it exists). */
#define HW_CRC_MAX ((int64_t)4096)

/* Whether the instruction is used: set at import from the CPU's features (module.c), and
 * switched off by hw_crc(False) (tests run both paths). */
extern int hw_crc_on;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_HW_CRC 1

/* The last n < 8 bytes: at most three instructions (fewer branches than byte by byte). */
__attribute__((target("sse4.2"))) static inline uint32_t hw_crc32c_tail(
        uint32_t c, const unsigned char *p, size_t n) {
    if (n & 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        c = _mm_crc32_u32(c, v);
        p += 4;
    }
    if (n & 2) {
        uint16_t v;
        memcpy(&v, p, 2);
        c = _mm_crc32_u16(c, v);
        p += 2;
    }
    if (n & 1)
        c = _mm_crc32_u8(c, *p);
    return c;
}

/* Standard CRC32C (initial value and final xor 0xffffffff) of n bytes at p. */
__attribute__((target("sse4.2"))) static inline uint32_t hw_crc32c(const unsigned char *p,
                                                                    size_t n) {
    uint64_t c = 0xffffffffu;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
    }
    return ~hw_crc32c_tail((uint32_t)c, p, n);
}

/* CRC32Cs of three buffers at once, into c[0..2]: the instruction takes three cycles but
 * starts one per cycle, so three independent streams run about three times as fast as one
 * (the crc32c package interleaves within one buffer instead, which needs more code). */
__attribute__((target("sse4.2"))) static inline void hw_crc32c_x3(
        const unsigned char *const p[3], const size_t n[3], uint32_t c[3]) {
    size_t common = n[0] < n[1] ? n[0] : n[1];
    common = (common < n[2] ? common : n[2]) & ~(size_t)7;
    uint64_t a = 0xffffffffu, b = 0xffffffffu, d = 0xffffffffu;
    for (size_t i = 0; i < common; i += 8) {
        uint64_t va, vb, vd;
        memcpy(&va, p[0] + i, 8);
        memcpy(&vb, p[1] + i, 8);
        memcpy(&vd, p[2] + i, 8);
        a = _mm_crc32_u64(a, va);
        b = _mm_crc32_u64(b, vb);
        d = _mm_crc32_u64(d, vd);
    }
    uint64_t st[3] = {a, b, d};
    for (int j = 0; j < 3; j++) {
        const unsigned char *q = p[j] + common;
        size_t m = n[j] - common;
        uint64_t x = st[j];
        for (; m >= 8; m -= 8, q += 8) {
            uint64_t v;
            memcpy(&v, q, 8);
            x = _mm_crc32_u64(x, v);
        }
        c[j] = ~hw_crc32c_tail((uint32_t)x, q, m);
    }
}

static inline int hw_crc_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
}
#else
#define HAVE_HW_CRC 0
static inline uint32_t hw_crc32c(const unsigned char *p, size_t n) {
    (void)p;
    (void)n;
    return 0; /* never called: hw_crc_on stays 0 */
}
static inline void hw_crc32c_x3(const unsigned char *const p[3], const size_t n[3],
                                uint32_t c[3]) {
    (void)p;
    (void)n;
    c[0] = c[1] = c[2] = 0; /* never called: hw_crc_on stays 0 */
}
static inline int hw_crc_supported(void) { return 0; }
#endif

/* The TFRecord mask of a CRC. */
static inline uint32_t hw_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
