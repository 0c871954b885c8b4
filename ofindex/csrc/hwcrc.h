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

/* The CRC32C of n bytes at p, going on from the state c (0xffffffff to start). */
__attribute__((target("sse4.2"))) static inline uint32_t hw_crc32c_from(
        uint64_t c, const unsigned char *p, size_t n) {
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
    }
    return ~hw_crc32c_tail((uint32_t)c, p, n);
}

/* Standard CRC32C (initial value and final xor 0xffffffff) of n bytes at p. */
__attribute__((target("sse4.2"))) static inline uint32_t hw_crc32c(const unsigned char *p,
                                                                    size_t n) {
    return hw_crc32c_from(0xffffffffu, p, n);
}

/* The order of three lengths, from the shortest to the longest, into s[0..2]. */
static inline void hw_by_length(const size_t n[3], int s[3]) {
    int t;
    s[0] = 0, s[1] = 1, s[2] = 2;
    if (n[s[1]] < n[s[0]]) { t = s[0]; s[0] = s[1]; s[1] = t; }
    if (n[s[2]] < n[s[1]]) { t = s[1]; s[1] = s[2]; s[2] = t; }
    if (n[s[1]] < n[s[0]]) { t = s[0]; s[0] = s[1]; s[1] = t; }
}

/* CRC32Cs of three buffers at once, into c[0..2]: the instruction takes three cycles but
 * starts one per cycle, so three independent streams run about three times as fast as one
 * (the crc32c package interleaves within one buffer instead, which needs more code). When
 * the lengths differ, the two longer buffers go on together past the end of the shortest,
 * and only the longest runs alone. */
__attribute__((target("sse4.2"))) static inline void hw_crc32c_x3(
        const unsigned char *const p[3], const size_t n[3], uint32_t c[3]) {
    int s[3];
    hw_by_length(n, s);
    const unsigned char *a = p[s[0]], *b = p[s[1]], *d = p[s[2]];
    size_t e0 = n[s[0]] & ~(size_t)7, e1 = n[s[1]] & ~(size_t)7, i = 0;
    uint64_t x = 0xffffffffu, y = 0xffffffffu, z = 0xffffffffu, v, w, u;
    for (; i < e0; i += 8) {
        memcpy(&v, a + i, 8);
        memcpy(&w, b + i, 8);
        memcpy(&u, d + i, 8);
        x = _mm_crc32_u64(x, v);
        y = _mm_crc32_u64(y, w);
        z = _mm_crc32_u64(z, u);
    }
    c[s[0]] = hw_crc32c_from(x, a + i, n[s[0]] - i);
    for (; i < e1; i += 8) {
        memcpy(&w, b + i, 8);
        memcpy(&u, d + i, 8);
        y = _mm_crc32_u64(y, w);
        z = _mm_crc32_u64(z, u);
    }
    c[s[1]] = hw_crc32c_from(y, b + i, n[s[1]] - i);
    c[s[2]] = hw_crc32c_from(z, d + i, n[s[2]] - i);
}

/* Copy n bytes from p to d, going on from the CRC32C state c (0xffffffff to start), and
 * return the final CRC32C: one pass over the source, which is read once (a copy followed
 * by a CRC of the copy reads it twice). */
__attribute__((target("sse4.2"))) static inline uint32_t hw_copy_crc32c_from(
        uint64_t c, unsigned char *d, const unsigned char *p, size_t n) {
    for (; n >= 8; n -= 8, p += 8, d += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        memcpy(d, &v, 8);
        c = _mm_crc32_u64(c, v);
    }
    memcpy(d, p, n);
    return ~hw_crc32c_tail((uint32_t)c, p, n);
}

/* Copy n bytes from p to d and return their CRC32C. */
__attribute__((target("sse4.2"))) static inline uint32_t hw_copy_crc32c(
        unsigned char *d, const unsigned char *p, size_t n) {
    return hw_copy_crc32c_from(0xffffffffu, d, p, n);
}

/* Three copies with their CRC32Cs at once, into c[0..2] (three independent CRC streams, as
 * in hw_crc32c_x3, each source read once): all three up to the end of the shortest, then
 * the two longer ones together, then the longest alone. */
__attribute__((target("sse4.2"))) static inline void hw_copy_crc32c_x3(
        unsigned char *const d[3], const unsigned char *const p[3], const size_t n[3],
        uint32_t c[3]) {
    int s[3];
    hw_by_length(n, s);
    int s0 = s[0], s1 = s[1], s2 = s[2];
    size_t e0 = n[s0] & ~(size_t)7, e1 = n[s1] & ~(size_t)7, i = 0;
    uint64_t x = 0xffffffffu, y = 0xffffffffu, z = 0xffffffffu, v, w, u;
    for (; i < e0; i += 8) {
        memcpy(&v, p[s0] + i, 8);
        memcpy(&w, p[s1] + i, 8);
        memcpy(&u, p[s2] + i, 8);
        memcpy(d[s0] + i, &v, 8);
        memcpy(d[s1] + i, &w, 8);
        memcpy(d[s2] + i, &u, 8);
        x = _mm_crc32_u64(x, v);
        y = _mm_crc32_u64(y, w);
        z = _mm_crc32_u64(z, u);
    }
    c[s0] = hw_copy_crc32c_from(x, d[s0] + i, p[s0] + i, n[s0] - i);
    for (; i < e1; i += 8) {
        memcpy(&w, p[s1] + i, 8);
        memcpy(&u, p[s2] + i, 8);
        memcpy(d[s1] + i, &w, 8);
        memcpy(d[s2] + i, &u, 8);
        y = _mm_crc32_u64(y, w);
        z = _mm_crc32_u64(z, u);
    }
    c[s1] = hw_copy_crc32c_from(y, d[s1] + i, p[s1] + i, n[s1] - i);
    c[s2] = hw_copy_crc32c_from(z, d[s2] + i, p[s2] + i, n[s2] - i);
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
static inline uint32_t hw_copy_crc32c(unsigned char *d, const unsigned char *p, size_t n) {
    memcpy(d, p, n);
    return 0; /* never called for a CRC: hw_crc_on stays 0 */
}
static inline void hw_copy_crc32c_x3(unsigned char *const d[3],
                                     const unsigned char *const p[3], const size_t n[3],
                                     uint32_t c[3]) {
    for (int j = 0; j < 3; j++)
        c[j] = hw_copy_crc32c(d[j], p[j], n[j]);
}
static inline int hw_crc_supported(void) { return 0; }
#endif

/* The TFRecord mask of a CRC. */
static inline uint32_t hw_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
