/* Beam search and group (diverse) beam search with HF transformers' semantics (beam.h). */
#include "gen/beam.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gen/topk.h"

typedef struct beam {
	int32_t *ids; /* (max_new_tokens) generated tokens */
	float *lps;   /* (max_new_tokens) */
	int n;
	double score; /* running sum of processed log-probabilities */
} beam;

typedef struct hyp_group { /* HF BeamHypotheses */
	rg_beam_hyp *h; /* (G + 1) in insertion order */
	int n;
	double worst;
	bool done;
} hyp_group;

/* One candidate of a group: processed + running score, beam * vocab + token, log-softmax. */
typedef struct cand_entry {
	double sc;
	int32_t flat;
	double raw;
} cand_entry;

struct rg_beam_search {
	rg_beam_params p;
	int G, vocab, n_prompt, step;
	int32_t *prompt; /* (n_prompt) */
	beam *cur, *next; /* (num_beams) each */
	hyp_group *groups; /* (num_beam_groups) */
	double *scores;    /* (G * vocab) processed + running score of one group */
	double *raw;       /* (G * vocab) log-softmax of one group */
	int32_t *cand, *scratch; /* (n_keep), (G * vocab) */
	int32_t *div_count;      /* (vocab) tokens chosen by earlier groups at this step */
	int32_t *hist;           /* (n_prompt + max_new_tokens) one beam's full history */
	int32_t *ban;            /* (n_prompt + max_new_tokens) tokens one beam may not take */
	cand_entry *ent;         /* (G * RG_BEAM_MAX_CAND) a group's candidates (rg_beam_step_cand) */
	bool finished;
	const rg_beam_hyp **final; /* (num_return_sequences) after finalize */
	int n_final;
};

static void beam_arrays_free(beam *bs, int n)
{
	if (!bs)
		return;
	for (int i = 0; i < n; i++) {
		free(bs[i].ids);
		free(bs[i].lps);
	}
	free(bs);
}

static void hyp_free(rg_beam_hyp *h)
{
	free(h->ids);
	free(h->logprobs);
	memset(h, 0, sizeof(*h));
}

void rg_beam_free(rg_beam_search *b)
{
	if (!b)
		return;
	beam_arrays_free(b->cur, b->p.num_beams);
	beam_arrays_free(b->next, b->p.num_beams);
	if (b->groups)
		for (int g = 0; g < b->p.num_beam_groups; g++) {
			for (int i = 0; i < b->groups[g].n; i++)
				hyp_free(&b->groups[g].h[i]);
			free(b->groups[g].h);
		}
	free(b->groups);
	free(b->prompt);
	free(b->scores);
	free(b->raw);
	free(b->cand);
	free(b->scratch);
	free(b->div_count);
	free(b->hist);
	free(b->ban);
	free(b->ent);
	free(b->final);
	free(b);
}

static int n_keep(const rg_beam_search *b)
{
	int f = 1 + b->p.n_eos;

	return (f > 2 ? f : 2) * b->G;
}

rg_status rg_beam_init(rg_beam_search **out, const rg_beam_params *p, const int32_t *prompt,
		       int n_prompt, int vocab)
{
	rg_beam_search *b;
	int nb = p->num_beams, ng = p->num_beam_groups, mx = p->max_new_tokens;

	*out = NULL;
	if (nb < 1 || ng < 1 || nb % ng != 0 || p->num_return_sequences < 1 ||
	    p->num_return_sequences > nb || mx < 1 || n_prompt < 0 || vocab < 1 ||
	    p->n_eos < 0 || !(p->diversity_penalty >= 0.f) || p->no_repeat_ngram_size < 0 ||
	    p->early_stopping < RG_EARLY_STOPPING_FALSE ||
	    p->early_stopping > RG_EARLY_STOPPING_NEVER)
		return rg_errorf(RG_ERR_INVALID_INPUT,
				 "beam search: num_beams %d, num_beam_groups %d (must divide it), "
				 "num_return_sequences %d, max_new_tokens %d out of range",
				 nb, ng, p->num_return_sequences, mx);
	if (!(b = calloc(1, sizeof(*b))))
		return rg_errorf(RG_ERR_OOM, "beam search: out of memory");
	b->p = *p;
	b->p.eos_ids = NULL; /* not kept past init: copied below */
	b->G = nb / ng;
	b->vocab = vocab;
	b->n_prompt = n_prompt;
	if (n_keep(b) > b->G * vocab)
		goto out_invalid;
	b->prompt = malloc(((size_t)n_prompt + (size_t)p->n_eos + 1) * sizeof(int32_t));
	b->cur = calloc((size_t)nb, sizeof(beam));
	b->next = calloc((size_t)nb, sizeof(beam));
	b->groups = calloc((size_t)ng, sizeof(hyp_group));
	b->scores = malloc((size_t)b->G * vocab * sizeof(double));
	b->raw = malloc((size_t)b->G * vocab * sizeof(double));
	b->cand = malloc((size_t)n_keep(b) * sizeof(int32_t));
	b->scratch = malloc((size_t)b->G * vocab * sizeof(int32_t));
	b->div_count = calloc((size_t)vocab, sizeof(int32_t));
	b->hist = malloc(((size_t)n_prompt + (size_t)mx) * sizeof(int32_t));
	b->ban = malloc(((size_t)n_prompt + (size_t)mx) * sizeof(int32_t));
	b->ent = malloc((size_t)(n_keep(b) > RG_BEAM_MAX_CAND ? n_keep(b) : RG_BEAM_MAX_CAND) *
			(size_t)b->G * sizeof(cand_entry));
	b->final = calloc((size_t)p->num_return_sequences, sizeof(*b->final));
	if (!b->prompt || !b->cur || !b->next || !b->groups || !b->scores || !b->raw ||
	    !b->cand || !b->scratch || !b->div_count || !b->hist || !b->ban || !b->ent || !b->final)
		goto out_oom;
	if (n_prompt)
		memcpy(b->prompt, prompt, (size_t)n_prompt * sizeof(int32_t));
	/* the EOS ids live after the prompt copy */
	if (p->n_eos)
		memcpy(b->prompt + n_prompt, p->eos_ids, (size_t)p->n_eos * sizeof(int32_t));
	b->p.eos_ids = b->prompt + n_prompt;
	for (int i = 0; i < nb; i++) {
		beam *bs[2] = {&b->cur[i], &b->next[i]};

		for (int k = 0; k < 2; k++) {
			bs[k]->ids = malloc((size_t)mx * sizeof(int32_t));
			bs[k]->lps = malloc((size_t)mx * sizeof(float));
			if (!bs[k]->ids || !bs[k]->lps)
				goto out_oom;
		}
		/* HF: the first beam of each group starts at 0, the others at -1e9 */
		b->cur[i].score = i % b->G == 0 ? 0.0 : -1e9;
	}
	for (int g = 0; g < ng; g++) {
		if (!(b->groups[g].h = calloc((size_t)b->G + 1, sizeof(rg_beam_hyp))))
			goto out_oom;
		b->groups[g].worst = 1e9;
	}
	*out = b;
	return RG_OK;
out_invalid:
	rg_beam_free(b);
	return rg_errorf(RG_ERR_INVALID_INPUT, "beam search: vocab %d too small for %d beams",
			 vocab, nb);
out_oom:
	rg_beam_free(b);
	return rg_errorf(RG_ERR_OOM, "beam search: out of memory");
}

int rg_beam_n_running(const rg_beam_search *b)
{
	int n = 0;

	for (int s = 0; s < b->p.num_beams; s++)
		n += rg_beam_slot_live(b, s);
	return n;
}

bool rg_beam_slot_live(const rg_beam_search *b, int slot)
{
	return !b->finished && !b->groups[slot / b->G].done;
}

static bool is_eos(const rg_beam_search *b, int32_t t)
{
	for (int i = 0; i < b->p.n_eos; i++)
		if (b->p.eos_ids[i] == t)
			return true;
	return false;
}

/* HF BeamHypotheses.add: keep the G best by score = sum_logprobs / gen_len ** length_penalty. */
static rg_status hyp_add(rg_beam_search *b, hyp_group *hg, const beam *src, double sum_logprobs,
			 int gen_len, int32_t eos_tok, float eos_lp)
{
	double score = sum_logprobs / pow((double)gen_len, (double)b->p.length_penalty);
	rg_beam_hyp *h;
	int n = src->n + (eos_tok >= 0);

	if (!(hg->n < b->G || score > hg->worst))
		return RG_OK;
	h = &hg->h[hg->n];
	h->ids = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
	h->logprobs = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
	if (!h->ids || !h->logprobs) {
		hyp_free(h);
		return rg_errorf(RG_ERR_OOM, "beam search: out of memory");
	}
	memcpy(h->ids, src->ids, (size_t)src->n * sizeof(int32_t));
	memcpy(h->logprobs, src->lps, (size_t)src->n * sizeof(float));
	if (eos_tok >= 0) {
		h->ids[src->n] = eos_tok;
		h->logprobs[src->n] = eos_lp;
	}
	h->n = n;
	h->score = score;
	h->eos = eos_tok >= 0;
	hg->n++;
	if (hg->n > b->G) {
		/* sorted((score, idx)): drop the first, the worst is then the second */
		int lo = 0, second = -1;

		for (int i = 1; i < hg->n; i++)
			if (hg->h[i].score < hg->h[lo].score)
				lo = i;
		for (int i = 0; i < hg->n; i++)
			if (i != lo && (second < 0 || hg->h[i].score < hg->h[second].score))
				second = i;
		hg->worst = hg->h[second].score;
		hyp_free(&hg->h[lo]);
		memmove(&hg->h[lo], &hg->h[lo + 1], (size_t)(hg->n - lo - 1) * sizeof(rg_beam_hyp));
		hg->n--;
		memset(&hg->h[hg->n], 0, sizeof(rg_beam_hyp));
	} else if (score < hg->worst) {
		hg->worst = score;
	}
	return RG_OK;
}

/* HF BeamHypotheses.is_done, lengths counted from the end of the prompt. */
static bool hyp_is_done(const rg_beam_search *b, const hyp_group *hg, double best_sum,
			int cur_gen_len)
{
	double lp = b->p.length_penalty, best;

	if (hg->n < b->G)
		return false;
	switch (b->p.early_stopping) {
	case RG_EARLY_STOPPING_TRUE:
		return true;
	case RG_EARLY_STOPPING_FALSE:
		best = best_sum / pow((double)cur_gen_len, lp);
		return hg->worst >= best;
	case RG_EARLY_STOPPING_NEVER:
		best = best_sum / pow((double)(lp > 0.0 ? b->p.max_new_tokens : cur_gen_len), lp);
		return hg->worst >= best;
	}
	return false;
}

/* log_softmax of row into out (vocab), float64. */
static void log_softmax(const float *row, int v, double *out)
{
	double mx = -INFINITY, sum = 0.0, lse;

	for (int i = 0; i < v; i++)
		if (row[i] > mx)
			mx = row[i];
	for (int i = 0; i < v; i++)
		sum += exp((double)row[i] - mx);
	lse = mx + log(sum);
	for (int i = 0; i < v; i++)
		out[i] = (double)row[i] - lse;
}

/* HF NoRepeatNGramLogitsProcessor over the beam's prompt + generated tokens: the tokens it bans
 * into b->ban (one entry per matching n-gram, so a token may repeat); returns their count. */
static int ban_list(rg_beam_search *b, const beam *bm)
{
	int n = b->p.no_repeat_ngram_size, len = b->n_prompt + bm->n, nb = 0;
	int32_t *h = b->hist;

	if (n <= 0 || len + 1 < n)
		return 0;
	memcpy(h, b->prompt, (size_t)b->n_prompt * sizeof(int32_t));
	memcpy(h + b->n_prompt, bm->ids, (size_t)bm->n * sizeof(int32_t));
	for (int i = 0; i + n <= len; i++)
		if (!memcmp(h + i, h + len - (n - 1), (size_t)(n - 1) * sizeof(int32_t)))
			b->ban[nb++] = h[i + n - 1];
	return nb;
}

static void ban_ngrams(rg_beam_search *b, const beam *bm, double *sc)
{
	const int nb = ban_list(b, bm);

	for (int i = 0; i < nb; i++)
		sc[b->ban[i]] = -INFINITY;
}

int rg_beam_cand_needed(rg_beam_search *b)
{
	int need = n_keep(b), most = 0;

	if (b->finished)
		return 0;
	if (b->p.num_beam_groups > 1 && b->p.diversity_penalty > 0.f)
		need += b->p.num_beams; /* tokens earlier groups (or a finished one's pad) chose */
	for (int s = 0; s < b->p.num_beams; s++) {
		int nb;

		if (!rg_beam_slot_live(b, s))
			continue;
		nb = ban_list(b, &b->cur[s]);
		most = nb > most ? nb : most;
	}
	return need + most;
}

/* (sc descending, flat ascending): rg_topk_hier_f64's order over a group's G * vocab scores */
static int cmp_entry(const void *x, const void *y)
{
	const cand_entry *a = x, *c = y;

	if (a->sc != c->sc)
		return a->sc > c->sc ? -1 : 1;
	return (a->flat > c->flat) - (a->flat < c->flat);
}

/* The group's candidates from each live row's k best (rg_beam_step_cand), processed as the full
 * rows are, sorted into b->ent; returns how many. */
static rg_status group_cands(rg_beam_search *b, int g, const int32_t *const *ids,
			     const float *const *lps, int k, int *n_out)
{
	const int G = b->G, V = b->vocab;
	int n = 0;

	for (int i = 0; i < G; i++) {
		const beam *bm = &b->cur[g * G + i];
		const int32_t *ri = ids[g * G + i];
		const float *rl = lps[g * G + i];
		const int nb = ban_list(b, bm);

		for (int e = 0; e < k; e++) {
			cand_entry *c = &b->ent[n];
			int32_t tok = ri[e];

			if (tok < 0)
				continue; /* fewer tokens than k */
			if (tok >= V || isnan(rl[e]))
				return rg_errorf(RG_ERR_INTERNAL,
						 "beam search: candidate %d (log-prob %g) of beam %d "
						 "is not a token of the vocabulary or NaN", tok,
						 (double)rl[e], g * G + i);
			c->raw = rl[e];
			c->sc = c->raw;
			for (int j = 0; j < nb; j++)
				if (b->ban[j] == tok)
					c->sc = -INFINITY;
			if (g > 0 && b->p.diversity_penalty > 0.f)
				c->sc -= (double)b->p.diversity_penalty * b->div_count[tok];
			c->sc += bm->score;
			c->flat = i * V + tok;
			n++;
		}
	}
	qsort(b->ent, (size_t)n, sizeof(cand_entry), cmp_entry);
	*n_out = n;
	return RG_OK;
}

/* One step from full rows (rows) or from each row's k best (ids, lps): rg_beam_step and
 * rg_beam_step_cand. */
static rg_status beam_step(rg_beam_search *b, const float *const *rows, const int32_t *const *ids,
			   const float *const *lps, int k, int32_t *parent, int32_t *token,
			   bool *done)
{
	int G = b->G, V = b->vocab, nk = n_keep(b);
	int gen_len = b->step + 1; /* HF cur_len - decoder_prompt_len */
	rg_status st;

	*done = b->finished;
	for (int s = 0; s < b->p.num_beams; s++)
		parent[s] = token[s] = -1;
	if (b->finished)
		return RG_OK;
	memset(b->div_count, 0, (size_t)V * sizeof(int32_t));
	for (int g = 0; g < b->p.num_beam_groups; g++) {
		hyp_group *hg = &b->groups[g];
		int nbi = 0, n_sel = nk;

		if (hg->done) { /* HF pads a finished group: G pad tokens this step */
			if (b->p.pad_id >= 0 && b->p.pad_id < V)
				b->div_count[b->p.pad_id] += G;
			continue;
		}
		if (rows) {
			for (int i = 0; i < G; i++) {
				const beam *bm = &b->cur[g * G + i];
				const float *row = rows[g * G + i];
				double *sc = b->scores + (size_t)i * V, *raw = b->raw + (size_t)i * V;

				for (int v = 0; v < V; v++)
					if (isnan(row[v]))
						return rg_errorf(RG_ERR_INTERNAL,
								 "beam search: NaN logit");
				log_softmax(row, V, raw);
				memcpy(sc, raw, (size_t)V * sizeof(double));
				ban_ngrams(b, bm, sc);
				if (g > 0 && b->p.diversity_penalty > 0.f)
					for (int v = 0; v < V; v++)
						sc[v] -= (double)b->p.diversity_penalty *
							 b->div_count[v];
				for (int v = 0; v < V; v++)
					sc[v] += bm->score;
			}
			if ((st = rg_topk_hier_f64(b->scores, G * V, nk, b->cand, b->scratch)) !=
			    RG_OK)
				return st;
			for (int r = 0; r < nk; r++)
				b->ent[r] = (cand_entry){b->scores[b->cand[r]], b->cand[r],
							 b->raw[b->cand[r]]};
		} else {
			if ((st = group_cands(b, g, ids, lps, k, &n_sel)) != RG_OK)
				return st;
			n_sel = n_sel < nk ? n_sel : nk;
		}
		for (int r = 0; r < n_sel && nbi < G; r++) {
			int32_t flat = b->ent[r].flat, bi = flat / V, tok = flat % V;
			const beam *src = &b->cur[g * G + bi];
			double s = b->ent[r].sc;

			if (is_eos(b, tok)) {
				if (r >= G)
					continue;
				if ((st = hyp_add(b, hg, src, s, gen_len, tok, (float)b->ent[r].raw)))
					return st;
			} else {
				beam *dst = &b->next[g * G + nbi];

				memcpy(dst->ids, src->ids, (size_t)src->n * sizeof(int32_t));
				memcpy(dst->lps, src->lps, (size_t)src->n * sizeof(float));
				dst->ids[src->n] = tok;
				dst->lps[src->n] = (float)b->ent[r].raw;
				dst->n = src->n + 1;
				dst->score = s;
				parent[g * G + nbi] = g * G + bi;
				token[g * G + nbi] = tok;
				nbi++;
			}
		}
		if (nbi < G)
			return rg_errorf(RG_ERR_INTERNAL, "beam search: %d of %d beams filled", nbi, G);
		for (int i = 0; i < G; i++)
			b->div_count[token[g * G + i]]++;
		hg->done = hg->done || hyp_is_done(b, hg, b->ent[0].sc, gen_len);
	}
	/* the new beams become current (also those of groups that just finished: unused) */
	{
		beam *t = b->cur;

		b->cur = b->next;
		b->next = t;
	}
	b->step++;
	{
		bool all_done = true;

		for (int g = 0; g < b->p.num_beam_groups; g++)
			all_done = all_done && b->groups[g].done;
		b->finished = all_done || b->step >= b->p.max_new_tokens;
	}
	*done = b->finished;
	return RG_OK;
}

rg_status rg_beam_step(rg_beam_search *b, const float *const *rows, int32_t *parent,
		       int32_t *token, bool *done)
{
	return beam_step(b, rows, NULL, NULL, 0, parent, token, done);
}

rg_status rg_beam_step_cand(rg_beam_search *b, const int32_t *const *ids,
			    const float *const *logprobs, int k, int32_t *parent, int32_t *token,
			    bool *done)
{
	if (k < 1 || k > RG_BEAM_MAX_CAND || !ids || !logprobs)
		return rg_errorf(RG_ERR_INVALID_INPUT, "beam search: k %d outside [1, %d] or NULL "
				 "candidates", k, RG_BEAM_MAX_CAND);
	if (!b->finished && k < rg_beam_cand_needed(b))
		return rg_errorf(RG_ERR_INVALID_INPUT, "beam search: %d candidates per beam, the "
				 "step needs %d (rg_beam_cand_needed)", k, rg_beam_cand_needed(b));
	return beam_step(b, NULL, ids, logprobs, k, parent, token, done);
}

/* the order of HF's sorted(candidates, key=score) popped from the end: score descending, and
 * among equal scores the later candidate first */
static int cmp_final(const void *x, const void *y)
{
	const rg_beam_hyp *const *a = x, *const *c = y;

	if ((*a)->score > (*c)->score)
		return -1;
	if ((*a)->score < (*c)->score)
		return 1;
	return 0;
}

rg_status rg_beam_finalize(rg_beam_search *b, int *n)
{
	int total = 0, k = 0;
	const rg_beam_hyp **all;
	rg_status st;

	*n = 0;
	if (b->n_final == 0) {
		for (int g = 0; g < b->p.num_beam_groups; g++) {
			hyp_group *hg = &b->groups[g];

			if (hg->done)
				continue;
			for (int i = 0; i < b->G; i++) {
				const beam *bm = &b->cur[g * b->G + i];

				if ((st = hyp_add(b, hg, bm, bm->score, b->step, -1, 0.f)))
					return st;
			}
			hg->done = true;
		}
		for (int g = 0; g < b->p.num_beam_groups; g++)
			total += b->groups[g].n;
		if (!(all = malloc((size_t)(total > 0 ? total : 1) * sizeof(*all))))
			return rg_errorf(RG_ERR_OOM, "beam search: out of memory");
		/* reversed insertion order, then a stable sort by score descending */
		for (int g = b->p.num_beam_groups - 1; g >= 0; g--)
			for (int i = b->groups[g].n - 1; i >= 0; i--)
				all[k++] = &b->groups[g].h[i];
		for (int i = 1; i < total; i++) { /* insertion sort: stable */
			const rg_beam_hyp *v = all[i];
			int j = i - 1;

			while (j >= 0 && cmp_final(&all[j], &v) > 0) {
				all[j + 1] = all[j];
				j--;
			}
			all[j + 1] = v;
		}
		b->n_final = total < b->p.num_return_sequences ? total : b->p.num_return_sequences;
		for (int i = 0; i < b->n_final; i++)
			b->final[i] = all[i];
		free(all);
		b->finished = true;
	}
	*n = b->n_final;
	return RG_OK;
}

const rg_beam_hyp *rg_beam_result(const rg_beam_search *b, int i) { return b->final[i]; }
