/* x86 helpers the AVX2 and AVX-512 quantized kernels share (kern_avx2.c, kern_avx512.c):
 * included after each file's target pragma (AVX2 + F16C at least), not on its own. */
#ifndef RG_OPS_CPU_QKERN_X86_H
#define RG_OPS_CPU_QKERN_X86_H
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The little-endian binary16 at p as a float (a block's scale). */
static inline float f16(const uint8_t *p)
{
	return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8));
}

/* The 32 nibbles of 16 bytes as bytes 0..15 (low nibbles: values 0..15) and 16..31 (high). */
static inline __m256i nibbles(const uint8_t *qs)
{
	const __m128i b = _mm_loadu_si128((const __m128i *)qs);
	const __m256i v = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);

	return _mm256_and_si256(v, _mm256_set1_epi8(15));
}

/* Q5_0 / Q5_1's fifth bits: byte j = 0x10 when bit j of the little-endian u32 at p is set
 * (the u32's byte j / 8 shuffled into byte j, then bit j % 8 tested). */
static inline __m256i q5_high(const uint8_t *p)
{
	uint32_t x;
	__m256i v;
	const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ull);

	memcpy(&x, p, 4);
	v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x),
				_mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2,
						 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
	v = _mm256_cmpeq_epi8(_mm256_and_si256(v, sel), sel);
	return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}
#endif
