/* The sequence classifier head on the host (model.h, rg_cls_head): transformers'
 * BertForSequenceClassification (pooler dense + tanh, classifier),
 * RobertaForSequenceClassification (classifier.dense + tanh, out_proj) and
 * DistilBertForSequenceClassification (pre_classifier + ReLU, classifier), eval mode (dropout
 * off), on the first token's last hidden state. In float32 on the host whatever the model's
 * device and dtype: 2 n H (H + L) FLOPs, about 0.1% of the encoder for BERT-base, and the rows
 * are already on the host after pooling. */
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "model/model.h"

void rg_cls_head_apply(const rg_cls_head *h, int H, int num_labels, int n, const float *x,
		       float *mid, float *out)
{
	const int L = num_labels;

	for (int i = 0; i < n; i++)
		memcpy(mid + (size_t)i * H, h->b1, (size_t)H * sizeof(float));
	/* mid (n, H) += x (n, H) W1^T, W1 stored (H, H) row-major as nn.Linear keeps it */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, H, H, 1.f, x, H, h->w1, H, 1.f, mid,
		    H);
	for (size_t i = 0; i < (size_t)n * H; i++)
		mid[i] = h->act == RG_HEAD_RELU	 ? (mid[i] > 0.f ? mid[i] : 0.f)
			 : h->act == RG_HEAD_GELU ? 0.5f * mid[i] * (1.f + erff(mid[i] * 0.70710678f))
						  : tanhf(mid[i]);
	for (int i = 0; i < n; i++)
		memcpy(out + (size_t)i * L, h->b2, (size_t)L * sizeof(float));
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, L, H, 1.f, mid, H, h->w2, H, 1.f,
		    out, L);
}

void rg_host_linear(const float *x, int n, int K, const float *W, const float *b, int N,
		    float *out)
{
	for (int i = 0; i < n; i++) {
		if (b)
			memcpy(out + (size_t)i * N, b, (size_t)N * sizeof(float));
		else
			memset(out + (size_t)i * N, 0, (size_t)N * sizeof(float));
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, N, K, 1.f, x, K, W, K, 1.f, out, N);
}
