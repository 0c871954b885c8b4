/* Varints of int64 values eight at a time, with AVX-512 (VBMI2: a byte compress).
 *
 * encode.c writes a packed list's varints one value at a time: ~13 instructions a value,
 * 1.9 ns, most of converting token lists (16M token ids of 500k rows: 30 ms of the
 * encoder's 116). Here each group of eight values below 2^56 is spread into 7-bit groups
 * by one multishift, sized by one leading-zero count, marked with its continuation bits
 * and packed by one compress: ~22 instructions for eight values (the same 16M ids: 9 ms).
 * A group holding a value of 2^56 or more (nine or ten bytes, negatives among them) is
 * left to the caller's one-at-a-time loop, as are the last values short of a group.
 * Tests compare both paths, switched by wide_varints(False). */
#ifndef OFINDEX_WIDEVARINTS_H
#define OFINDEX_WIDEVARINTS_H

#include <stddef.h>
#include <stdint.h>

/* Whether put_varints_wide is used: set at import from the CPU's features (module.c), and
 * switched off by wide_varints(False). */
extern int wide_varints_on;

/* Bytes a group may store past its varints: put_varints_wide stores 64 at a time. */
#define WIDE_VARINTS_SLACK 64

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_WIDE_VARINTS 1
#define WIDE_TARGET \
    __attribute__((target("avx512f,avx512bw,avx512cd,avx512vbmi,avx512vbmi2,popcnt")))

/* The varints of the int64 values at ints, a group of eight at a time, at p while 64 bytes
 * remain before end; stops at the first group holding a value of 2^56 or more. Returns the
 * end of what it wrote, and the values it took into *done. */
WIDE_TARGET static inline unsigned char *put_varints_wide(unsigned char *p,
                                                          const unsigned char *end,
                                                          const unsigned char *ints, int64_t n,
                                                          int64_t *done) {
    /* byte k of each value: bits 7k to 7k + 7 (a multishift control per byte) */
    const __m512i groups = _mm512_set1_epi64(0x312A231C150E0700LL);
    const __m512i low7 = _mm512_set1_epi8(0x7f);
    const __m512i one = _mm512_set1_epi64(1);
    const __m512i big = _mm512_set1_epi64((int64_t)1 << 56);
    const __m512i place = _mm512_set1_epi64(0x0706050403020100LL); /* a byte's place */
    const __m512i first = _mm512_set_epi64(8 * 0x0101010101010101LL, 0, 8 * 0x0101010101010101LL,
                                           0, 8 * 0x0101010101010101LL, 0,
                                           8 * 0x0101010101010101LL, 0); /* a value's byte 0 */
    int64_t j = 0;
    for (; j + 8 <= n && end - p >= WIDE_VARINTS_SLACK; j += 8) {
        __m512i v = _mm512_loadu_si512((const void *)(ints + 8 * j));
        if (_mm512_cmpge_epu64_mask(v, big))
            break;
        __m512i bits = _mm512_sub_epi64(_mm512_set1_epi64(64),
                                        _mm512_lzcnt_epi64(_mm512_or_si512(v, one)));
        /* bytes: ceil(bits / 7) as (bits * 9 + 64) >> 6, as varint_size */
        __m512i len = _mm512_srli_epi64(
            _mm512_add_epi64(_mm512_add_epi64(_mm512_slli_epi64(bits, 3), bits),
                             _mm512_set1_epi64(64)), 6);
        __m512i lens = _mm512_shuffle_epi8(len, first); /* each byte: its value's length */
        __mmask64 keep = _mm512_cmplt_epu8_mask(place, lens);
        __mmask64 more = _mm512_cmplt_epu8_mask(place, _mm512_sub_epi8(lens,
                                                                      _mm512_set1_epi8(1)));
        __m512i bytes = _mm512_or_si512(
            _mm512_and_si512(_mm512_multishift_epi64_epi8(groups, v), low7),
            _mm512_maskz_set1_epi8(more, (char)0x80));
        _mm512_storeu_si512((void *)p, _mm512_maskz_compress_epi8(keep, bytes));
        p += _mm_popcnt_u64(_cvtmask64_u64(keep));
    }
    *done = j;
    return p;
}

static inline int wide_varints_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512vbmi") &&
           __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("popcnt");
}
#else
#define HAVE_WIDE_VARINTS 0
static inline unsigned char *put_varints_wide(unsigned char *p, const unsigned char *end,
                                              const unsigned char *ints, int64_t n,
                                              int64_t *done) {
    (void)end;
    (void)ints;
    (void)n;
    *done = 0; /* never called: wide_varints_on stays 0 */
    return p;
}
static inline int wide_varints_supported(void) {
    return 0;
}
#endif

#endif
