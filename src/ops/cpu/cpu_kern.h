/* The table of vectorised CPU kernel bodies (kern.h), one per instruction set, and the run-time
 * choice between them. Internal to src/ops/cpu/. */
#ifndef RG_OPS_CPU_KERN_H
#define RG_OPS_CPU_KERN_H
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ragged.h"
#include "ops/act.h"
#include "ops/cpu/qweight.h"

/* Activation rows per call of a multi-row dot (rg_cpu_kern.qdotr_* / qdotp_*), at most: a
 * table's own count is its qrows (AVX2 and generic 4: 4 rows x 2 float accumulators fill half
 * of AVX2's 16 vector registers, the unpacked weights the rest; AVX-512 8, of 32 registers). */
#define RG_QDOT_ROWS 8
/* Activation rows per F16 register tile (hdot_tile_f16). */
#define RG_HDOT_R 4
/* Weight rows per F16 register tile (hdot_tile_f16): 3 x 4 accumulators, 3 widened weight
 * vectors and one activation vector fill AVX2's 16 registers. */
#define RG_HDOT_W 3
typedef void (*rg_qdotr_fn)(const void *w, const rg_q8a *a, size_t lda, int nb, int R,
			    float *out);
/* Two activation blocks side by side, as the AVX-512 dots read them (one 512-bit vector each):
 * the 64 int8 quantities of blocks 2i and 2i + 1 and their scales as [d0 x 8 | d1 x 8]; a block
 * past the row's end (odd nb): zeros. 128 bytes a pair; a row of nb blocks has (nb + 1) / 2. */
typedef struct rg_q8p {
	int8_t q[2 * RG_QK];
	float d[16];
} rg_q8p;
/* A multi-row dot over packed activations: as rg_qdotr_fn, with ap the same R rows packed
 * (ldp pairs apart) beside a (whose s terms the offsets read). */
typedef void (*rg_qdotp_fn)(const void *w, const rg_q8a *a, const rg_q8p *ap, size_t lda,
			    size_t ldp, int nb, int R, float *out);

typedef struct rg_cpu_kern {
	const char *isa; /* "avx512", "avx2" or "generic" */
	int vw;		 /* float32 lanes per vector */
	int qrows;	 /* rows per multi-row quantized dot call, <= RG_QDOT_ROWS */
	/* x (rows, cols), row stride ldx, in place: act(x + bias); bias (cols) or NULL */
	void (*bias_act_rows)(float *x, size_t ldx, const float *bias, int rows, int cols,
			      rg_act act);
	/* out (n) = LayerNorm(a + b + c) with gamma, beta (n); b, c may be NULL; out may alias a
	 * or c */
	void (*add_ln_row)(const float *a, const float *b, const float *c, const float *gamma,
			   const float *beta, float eps, int n, float *out);
	/* o (H) = pool of L >= 1 rows of x (row stride H), then L2-normalised when asked */
	void (*pool_seq)(const float *x, int L, int H, rg_pooling mode, bool normalize, float *o);
	/* attention probabilities in place: s (Lp, a multiple of vw) = softmax of keys [0, L)
	 * (masked past L and, with seg, outside segment me); all zeros when no key is visible */
	void (*softmax_row)(float *s, int L, int Lp, const int32_t *seg, int32_t me);
	/* out (n) = x (n) rounded to bf16, nearest even (NaN stays NaN): the bf16 GEMMs' input */
	void (*f32_to_bf16)(const float *x, uint16_t *out, size_t n);
	/* attention scores S (nq, Lp) = scale * Q (nq, hd; row stride ldq) K (L, hd; stride ldk)^T,
	 * columns past L zero; kt is scratch of hd * Lp floats; Lp a multiple of vw */
	void (*attn_qk)(const float *Q, size_t ldq, const float *K, size_t ldk, int nq, int L,
			int Lp, int hd, float scale, float *kt, float *S);
	/* O (nq, hd; row stride ldo) = P (nq, keys [0, L); row stride Lp) V (L, hd; stride ldv);
	 * hd a multiple of vw */
	void (*attn_pv)(const float *P, int Lp, const float *V, size_t ldv, int nq, int L, int hd,
			float *O, size_t ldo);
	/* small-M GEMV (decode steps), 1 <= M <= 4: out[m * ldo + n] = A[m * lda :] . W[n * ldw :]
	 * over K, for W (N, K) row-major and n in [n0, n1) */
	void (*gemv_rm)(const float *A, size_t lda, int M, const float *W, size_t ldw, int K,
			int n0, int n1, float *out, size_t ldo);
	/* small-M GEMV over one 64-column block of a K-blocked weight, 1 <= M <= 4: W(k, c) at
	 * Wb[(k / kb) * kstride + (k % kb) * 64 + c]; out[m * ldo + c] for c < 64 */
	void (*gemv_blk)(const float *A, size_t lda, int M, const float *Wb, int K, int kb,
			 size_t kstride, float *out, size_t ldo);
	/* the same product for any M >= 1 (a short sentence's rows), the block read from memory
	 * once: K in L1-sized chunks that every register tile of rows runs over, the next chunk
	 * prefetched meanwhile (when kstride == kb * 64) */
	void (*gemm_blk)(const float *A, size_t lda, int M, const float *Wb, int K, int kb,
			 size_t kstride, float *out, size_t ldo);
	/* paged attention over one cache block for nq query heads sharing a KV head: scores
	 * s[g * lds + j] = scale * q_g . k_j (q (nq, hd) contiguous, keys (nk, hd) of stride ldk) */
	void (*attn_dec_qk)(const float *q, int nq, int hd, const float *k, size_t ldk, int nk,
			    float scale, float *s, size_t lds);
	/* ... and o (nq, hd) += p (nq rows of stride ldp, nk columns) v (nk, hd; stride ldv) */
	void (*attn_dec_pv)(const float *p, size_t ldp, int nq, const float *v, size_t ldv, int nk,
			    int hd, float *o);
	/* quantized weights (qweight.h): out (K / 32 blocks) = x (K) f32 in rg_q8a blocks,
	 * K a multiple of 32; round half to even, so every table gives the same blocks */
	void (*q8_quant_row)(const float *x, int K, rg_q8a *out);
	/* sum over nb blocks of one weight row w (ggml Q8_0 / Q4_0 / Q4_1 blocks) times the
	 * activation blocks a: per block an integer dot product, scaled by d_w * d_a (Q4_1: plus
	 * m_w * s_a) and accumulated in f32 (llama.cpp's ggml_vec_dot_q*_q8 scheme) */
	float (*qdot_q8_0)(const void *w, const rg_q8a *a, int nb);
	float (*qdot_q4_0)(const void *w, const rg_q8a *a, int nb);
	float (*qdot_q4_1)(const void *w, const rg_q8a *a, int nb);
	/* ... Q5_0 / Q5_1 blocks (Q5_1: plus m_w s_a) */
	float (*qdot_q5_0)(const void *w, const rg_q8a *a, int nb);
	float (*qdot_q5_1)(const void *w, const rg_q8a *a, int nb);
	/* the same over K-quant super-blocks (Q4_K / Q5_K / Q6_K): nb activation blocks, a
	 * multiple of 8, against nb / 8 super-blocks of w; per activation block one integer sum
	 * (Q6_K: two, one per 16-value scale) scaled by d sc d_a, and Q4_K / Q5_K's minimum
	 * term dmin mn s_a (qweight.h) */
	float (*qdot_q4_k)(const void *w, const rg_q8a *a, int nb);
	float (*qdot_q5_k)(const void *w, const rg_q8a *a, int nb);
	float (*qdot_q6_k)(const void *w, const rg_q8a *a, int nb);
	/* Multi-row twins of the eight dots above (same type order), for a GEMM of M > 1 rows:
	 * out[r] = qdot_<type>(w, a + r * lda, nb) for r < R, 1 <= R <= qrows, each weight
	 * block unpacked (nibbles to bytes, scales) once for the R activation rows instead of once
	 * per row. a: R rows of nb rg_q8a blocks, lda blocks apart; out: R floats, caller-owned.
	 * Bit-identical per row to the table's single-row dot (the same operations in the same
	 * order), so a row gives the same output alone and inside a batch. */
	rg_qdotr_fn qdotr_q8_0, qdotr_q4_0, qdotr_q4_1, qdotr_q5_0, qdotr_q5_1;
	rg_qdotr_fn qdotr_q4_k, qdotr_q5_k, qdotr_q6_k;
	/* Packed-activation twins (NULL where the table has none: the GEMM then runs qdot /
	 * qdotr): q8_pack_row (a row's nb blocks into (nb + 1) / 2 pairs), and per type the
	 * multi-row dot over them, bit-identical per row to that table's qdotr on the same blocks
	 * (the same values in the same order, read with one load each). The GEMM packs A once per
	 * call, so every weight row of the call reads each activation pair with one load. */
	void (*q8_pack_row)(const rg_q8a *a, int nb, rg_q8p *out);
	rg_qdotp_fn qdotp_q8_0, qdotp_q4_0, qdotp_q4_1, qdotp_q5_0, qdotp_q5_1;
	rg_qdotp_fn qdotp_q4_k, qdotp_q5_k, qdotp_q6_k;
	/* F16 weights kept as a GGUF file stores them (binary16, issue 30), one register tile:
	 * out[r * ldo + i] = sum over k < K of w[i * ldw + k] * a[r * lda + k] for 1 <= NW <=
	 * RG_HDOT_W weight rows i and 1 <= R <= RG_HDOT_R activation rows r in f32 (the halves
	 * widened exactly; no quantized copy of a: the weights' 11-bit mantissas are the only
	 * rounding before f32), K a multiple of 32. Each half is widened once for the R rows and
	 * each activation vector loaded once for the NW rows (llamafile's tinyBLAS tiling); every
	 * (i, r) sums its products in one fixed order, so an entry gets the same bits whatever the
	 * tile's NW and R (a row alone or inside a batch) */
	void (*hdot_tile_f16)(const uint16_t *w, size_t ldw, int NW, const float *a, size_t lda,
			      int K, int R, float *out, size_t ldo);
	/* out (n) = the binary16 values h (n) widened to f32 (exact), for the F16 weights of a
	 * prefill-sized GEMM (qgemm.c) */
	void (*f16_to_f32)(const uint16_t *h, float *out, size_t n);
} rg_cpu_kern;

/* The quantized kernels of each instruction set (kern_generic.c, kern_avx2.c, kern_avx512.c):
 * the AVX-512 table uses the AVX2 activation quantizer and Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1
 * kernels, and its own K-quant ones (RG_QISA and RG_KQISA of kern.h). */
#define RG_QKERN_DECL(isa)                                                                    \
	void rg_q8_quant_row_##isa(const float *x, int K, rg_q8a *out);                       \
	float rg_qdot_q8_0_##isa(const void *w, const rg_q8a *a, int nb);                     \
	float rg_qdot_q4_0_##isa(const void *w, const rg_q8a *a, int nb);                     \
	float rg_qdot_q4_1_##isa(const void *w, const rg_q8a *a, int nb);                     \
	float rg_qdot_q5_0_##isa(const void *w, const rg_q8a *a, int nb);                     \
	float rg_qdot_q5_1_##isa(const void *w, const rg_q8a *a, int nb);                     \
	void rg_qdotr_q8_0_##isa(const void *w, const rg_q8a *a, size_t lda, int nb, int R,   \
				 float *out);                                                  \
	void rg_qdotr_q4_0_##isa(const void *w, const rg_q8a *a, size_t lda, int nb, int R,   \
				 float *out);                                                  \
	void rg_qdotr_q4_1_##isa(const void *w, const rg_q8a *a, size_t lda, int nb, int R,   \
				 float *out);                                                  \
	void rg_qdotr_q5_0_##isa(const void *w, const rg_q8a *a, size_t lda, int nb, int R,   \
				 float *out);                                                  \
	void rg_qdotr_q5_1_##isa(const void *w, const rg_q8a *a, size_t lda, int nb, int R,   \
				 float *out);
#define RG_KQKERN_DECL(isa)                                                                   \
	float rg_qdot_q4_k_##isa(const void *w, const rg_q8a *a, int nb);                     \
	float rg_qdot_q5_k_##isa(const void *w, const rg_q8a *a, int nb);                     \
	float rg_qdot_q6_k_##isa(const void *w, const rg_q8a *a, int nb);                     \
	void rg_qdotr_q4_k_##isa(const void *w, const rg_q8a *a, size_t lda, int nb, int R,   \
				 float *out);                                                  \
	void rg_qdotr_q5_k_##isa(const void *w, const rg_q8a *a, size_t lda, int nb, int R,   \
				 float *out);                                                  \
	void rg_qdotr_q6_k_##isa(const void *w, const rg_q8a *a, size_t lda, int nb, int R,   \
				 float *out);
#define RG_HKERN_DECL(isa)                                                                    \
	void rg_hdot_tile_f16_##isa(const uint16_t *w, size_t ldw, int NW, const float *a,    \
				    size_t lda, int K, int R, float *out, size_t ldo);         \
	void rg_f16_to_f32_##isa(const uint16_t *h, float *out, size_t n);
RG_QKERN_DECL(generic)
RG_KQKERN_DECL(generic)
RG_HKERN_DECL(generic)
#if defined(__x86_64__) || defined(__i386__)
RG_QKERN_DECL(avx2)
RG_KQKERN_DECL(avx2)
RG_KQKERN_DECL(avx512)
RG_QKERN_DECL(avx512) /* the 32-value dots (its quantizer is the AVX2 one) */
void rg_q8_pack_row_avx512(const rg_q8a *a, int nb, rg_q8p *out);
#define RG_QPKERN_DECL(t)                                                                     \
	void rg_qdotp_##t##_avx512(const void *w, const rg_q8a *a, const rg_q8p *ap, size_t lda, \
				   size_t ldp, int nb, int R, float *out);
RG_QPKERN_DECL(q8_0)
RG_QPKERN_DECL(q4_0)
RG_QPKERN_DECL(q4_1)
RG_QPKERN_DECL(q5_0)
RG_QPKERN_DECL(q5_1)
RG_QPKERN_DECL(q4_k)
RG_QPKERN_DECL(q5_k)
RG_QPKERN_DECL(q6_k)
#undef RG_QPKERN_DECL
/* Whether the AVX-512 table's quantized dots use AVX512-VNNI (vpdpbusd): on < 0 asks; 0 / 1
 * turns it off / on (on only where the CPU has it) and returns the state. Probed once at load;
 * a test hook (both flavours on one CPU), not thread-safe against running GEMMs. */
bool rg_cpu_avx512_vnni(int on);
RG_HKERN_DECL(avx2)
RG_HKERN_DECL(avx512)
#endif

extern const rg_cpu_kern rg_cpu_kern_avx512, rg_cpu_kern_avx2, rg_cpu_kern_generic;

/* Rows of A up to which the fp32 GEMMs run as GEMV kernels (gemv_rm over row-major weights,
 * gemv_blk over oneDNN-blocked ones): a decode step's 1..4 sequences. */
#define RG_CPU_GEMV_MAX 4

/* The most rows of A that RAGGED_CPU_SMALLM may send to gemm_blk (see rg_cpu_smallm_max). */
#define RG_CPU_SMALLM_MAX 256

/* Rows of A up to which a prepared f32 weight runs gemm_blk (above RG_CPU_GEMV_MAX) rather than
 * oneDNN primitives: RAGGED_CPU_SMALLM (capped at RG_CPU_SMALLM_MAX; 0 turns the path off, and
 * with it gemm_blk for the remainder rows of larger products, see gemm_dnnl.c; read once), else
 * 192 on a pool of 1 or 2 threads and 32 on a larger one (the pool's size at the call).
 * - 1-2 threads: up to about 30 rows (one short sentence) the weights stream from memory and
 *   gemm_blk streams them faster; past that both are compute-bound and gemm_blk wins where
 *   oneDNN's tiles end in a remainder primitive of a few rows (130 = 128 + 2), and loses 2-4% at
 *   256 (one exact 256-row primitive): measured on the 2-core EPYC at 1 and 2 threads,
 *   bench/results/single_sentence_cpu_2core-amd-epyc_20261125-2217.md.
 * - 4-16 threads: oneDNN's tiles beat gemm_blk's small tasks past one short sentence: BERT-base
 *   at 64 / 130 tokens, 1.25 / 1.06 (4 threads), 1.24 / 1.26 (8) and 2.06 / 1.69 (16) times
 *   faster with the limit at 32 on the lent 16-core Xeon
 *   (bench/results/single_sentence_cpu_16core-xeon_20261126-0425.md). It was off by default at first because
 * `ragged serve`'s RSS grew 5-10 MB after warm-up with it on: not a leak but oneDNN primitives
 * made lazily for the row counts of batches past 192 rows (a remainder of r & 15 rows, a short
 * last tile), each met first long after start-up; those rows now run gemm_blk too, and the
 * growth converges (same file, "RSS"). */
int rg_cpu_smallm_max(void);

/* The widest table this CPU runs (cpuid), unless RAGGED_CPU_ISA=avx512|avx2|generic asks for
 * a narrower one (tests use it to check every table against the same reference). Never NULL. */
const rg_cpu_kern *rg_cpu_kern_select(void);

#endif
