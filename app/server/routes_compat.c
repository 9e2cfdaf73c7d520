/* `ragged serve`'s TEI and OpenAI compatibility routes and shapes (the request flow is in
 * routes.c): /tokenize's token objects, /decode, /embed_all's per-token vectors, /similarity's
 * cosines, /info, GET /v1/models, /openapi.json, the served model's name and the prompts of
 * config_sentence_transformers.json. Shapes follow text-embeddings-inference's router
 * (router/src/http/types.rs) and OpenAI's API reference. */
#include "server/server_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "server/sched/sched.h"

/* ---- prompts -------------------------------------------------------------------------------- */

bool rg_request_prompt(conn_ctx *c, const char **prompt, enum MHD_Result *ret)
{
	const rg_prompts *p = &c->srv->prompts;
	int k;

	*prompt = NULL;
	if (!c->req.prompt_name) {
		if (p->dflt >= 0)
			*prompt = p->texts[p->dflt];
		else
			*prompt = c->srv->o.default_prompt; /* TEI's --default-prompt, or NULL */
		return false;
	}
	if ((k = rg_prompts_find(p, c->req.prompt_name)) >= 0) {
		*prompt = p->texts[k];
		return false;
	}
	if (!p->n) {
		*ret = rg_conn_error(c, 400, "validation", "prompt_name",
				     "\"prompt_name\" \"%.100s\": the model has no prompts "
				     "(config_sentence_transformers.json)",
				     c->req.prompt_name);
	} else {
		char names[256];
		size_t w = 0;

		names[0] = '\0';
		for (size_t i = 0; i < p->n && w + 4 < sizeof(names); i++)
			w += (size_t)snprintf(names + w, sizeof(names) - w, "%s%s", i ? ", " : "",
					      p->names[i]);
		*ret = rg_conn_error(c, 400, "validation", "prompt_name",
				     "\"prompt_name\" \"%.100s\" is not one of the model's prompts "
				     "(%s)",
				     c->req.prompt_name, names);
	}
	return true;
}

/* ---- /tokenize -------------------------------------------------------------------------------- */

/* s[0..n) as a JSON string, invalid UTF-8 replaced by U+FFFD (an offset may fall inside a char,
 * as TEI's text slices do; they are made with from_utf8_lossy). */
static void json_str_lossy(rg_buf *b, const char *s, size_t n)
{
	rg_buf t;

	if (rg_utf8_valid(s, n)) {
		rg_buf_json_str(b, s, n);
		return;
	}
	rg_buf_init(&t);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = rg_utf8_next(s, n, i, &cp);

		if (k) {
			rg_buf_put(&t, s + i, k);
			i += k;
		} else {
			rg_buf_puts(&t, "\xEF\xBF\xBD");
			i++;
			while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
				i++;
		}
	}
	rg_buf_json_str(b, t.data ? t.data : "", t.len);
	if (t.oom)
		b->oom = true;
	rg_buf_free(&t);
}

/* TEI's SimpleToken per token: {"id", "text", "special", "start", "stop"}; a special token's
 * text is its vocabulary string and its offsets null, another's text is the slice of the input
 * (the prompted input when a prompt applies) between its byte offsets. Always a list per input. */
enum MHD_Result rg_answer_tokenize(conn_ctx *c)
{
	rg_buf b;

	rg_buf_init(&b);
	rg_buf_put(&b, "[", 1);
	for (size_t i = 0; i < c->req.n_inputs; i++) {
		const rg_encoding *e = &c->embed.encs[i];
		const char *text = c->embed.texts[i] ? c->embed.texts[i] : c->req.inputs[i].text;
		size_t len = c->embed.texts[i] ? c->embed.text_lens[i] : c->req.inputs[i].len;

		rg_buf_puts(&b, i ? ",[" : "[");
		for (size_t k = 0; k < e->n; k++) {
			rg_buf_printf(&b, "%s{\"id\":%d,\"text\":", k ? "," : "", e->ids[k]);
			if (e->special[k]) {
				size_t tl = 0;
				const char *tok = rg_model_token(c->srv->model, e->ids[k], &tl);

				json_str_lossy(&b, tok ? tok : "", tl);
				rg_buf_puts(&b, ",\"special\":true,\"start\":null,\"stop\":null}");
			} else {
				size_t a = e->start[k] < len ? e->start[k] : len;
				size_t z = e->stop[k] < len ? e->stop[k] : len;

				json_str_lossy(&b, text + a, z > a ? z - a : 0);
				rg_buf_printf(&b, ",\"special\":false,\"start\":%u,\"stop\":%u}",
					       e->start[k], e->stop[k]);
			}
		}
		rg_buf_put(&b, "]", 1);
	}
	rg_buf_put(&b, "]", 1);
	return rg_conn_send(c, 200, &b, "application/json", 0, 0, 0);
}

/* ---- /decode ---------------------------------------------------------------------------------- */

/* TEI: a list of strings, one per id array. */
enum MHD_Result rg_answer_decode(conn_ctx *c)
{
	rg_buf b;

	rg_buf_init(&b);
	rg_buf_put(&b, "[", 1);
	for (size_t i = 0; i < c->req.n_inputs; i++) {
		const rg_req_input *in = &c->req.inputs[i];
		char *text = NULL;
		size_t len = 0;
		rg_status st = rg_model_decode(c->srv->model, in->ids, in->n_ids,
					       c->req.skip_special_tokens, &text, &len);

		if (st != RG_OK) {
			rg_buf_free(&b);
			if (st == RG_ERR_UNSUPPORTED)
				return rg_conn_error(c, 501, "not_implemented", NULL, "%s",
						     rg_last_error());
			if (st == RG_ERR_INVALID_INPUT)
				return rg_conn_error(c, 400, "validation", "ids", "%s",
						     rg_last_error());
			return rg_conn_error(c, 500, "backend", NULL, "decode: %s: %s",
					     rg_status_name(st), rg_last_error());
		}
		if (i)
			rg_buf_put(&b, ",", 1);
		json_str_lossy(&b, text, len);
		free(text);
	}
	rg_buf_put(&b, "]", 1);
	return rg_conn_send(c, 200, &b, "application/json", 0, 0, 0);
}

/* ---- /embed_all, /similarity ------------------------------------------------------------------ */

/* The JSON text of an /embed_all answer, at most: per token "[" 16 bytes a float (15 of "%.9g",
 * a comma) "]," and per input "[],", the outer "[]"; counted at the 17 a float that
 * rg_buf_float_array reserves, so that its reservation never grows the buffer. */
static size_t embed_all_json_bound(size_t rows, size_t n_inputs, size_t hidden)
{
	return rows * (hidden * 17 + 3) + n_inputs * 3 + 2;
}

size_t rg_embed_all_answer_bytes(size_t rows, size_t n_inputs, size_t hidden)
{
	size_t json = embed_all_json_bound(rows, n_inputs, hidden), cap = 256;

	while (cap < json + 1) /* rg_buf_reserve's growth */
		cap *= 2;
	return rows * hidden * sizeof(float) + cap;
}

/* TEI: [[[float] per token] per input], the encoder's last hidden states, no pooling. The buffer
 * is reserved once at its bound, the size rg_embed_all_answer_bytes counted. */
enum MHD_Result rg_answer_embed_all(conn_ctx *c, double queue_ms, double infer_ms, int bs)
{
	const size_t H = (size_t)c->srv->info->hidden_size;
	const float *v = c->embed.hidden;
	rg_buf b;

	rg_buf_init(&b);
	rg_buf_reserve(&b, embed_all_json_bound(c->embed.prompt_tokens, c->req.n_inputs, H));
	rg_buf_put(&b, "[", 1);
	for (size_t i = 0; i < c->req.n_inputs; i++) {
		rg_buf_puts(&b, i ? ",[" : "[");
		for (size_t k = 0; k < c->embed.n_ids[i]; k++, v += H) {
			if (k)
				rg_buf_put(&b, ",", 1);
			rg_buf_float_array(&b, v, H);
		}
		rg_buf_put(&b, "]", 1);
	}
	rg_buf_put(&b, "]", 1);
	return rg_conn_send(c, 200, &b, "application/json", queue_ms, infer_ms, bs);
}

/* TEI: the cosine similarity of the source sentence's embedding (input 0) with each sentence's,
 * from the raw pooled vectors (TEI embeds with normalize false; cosine ignores scale). A zero
 * vector has similarity 0. */
enum MHD_Result rg_answer_similarity(conn_ctx *c, double queue_ms, double infer_ms, int bs)
{
	const size_t H = (size_t)c->srv->info->output_dim; /* the embedding (Dense applied) */
	const float *src = c->embed.emb;
	double ns = 0;
	rg_buf b;

	for (size_t k = 0; k < H; k++)
		ns += (double)src[k] * src[k];
	rg_buf_init(&b);
	rg_buf_put(&b, "[", 1);
	for (size_t i = 1; i < c->req.n_inputs; i++) {
		const float *v = c->embed.emb + i * H;
		double dot = 0, nv = 0;

		for (size_t k = 0; k < H; k++) {
			dot += (double)src[k] * v[k];
			nv += (double)v[k] * v[k];
		}
		if (i > 1)
			rg_buf_put(&b, ",", 1);
		rg_buf_float(&b, ns > 0 && nv > 0 ? (float)(dot / sqrt(ns * nv)) : 0.0f);
	}
	rg_buf_put(&b, "]", 1);
	return rg_conn_send(c, 200, &b, "application/json", queue_ms, infer_ms, bs);
}

/* ---- /info, /v1/models, /openapi.json --------------------------------------------------------- */

/* TEI's model_dtype names. */
static const char *tei_dtype(rg_dtype d)
{
	switch (d) {
	case RG_DTYPE_F32: return "float32";
	case RG_DTYPE_F16: return "float16";
	case RG_DTYPE_BF16: return "bfloat16";
	case RG_DTYPE_AUTO: break;
	}
	return "auto";
}

void rg_info_put_model_sha(rg_buf *b, const rg_server *s)
{
	const char *dir = s->info->model_dir, *p = dir ? strstr(dir, "/snapshots/") : NULL;

	if (s->o.revision) {
		rg_buf_json_str(b, s->o.revision, strlen(s->o.revision));
	} else if (p && dir && strstr(dir, "models--") && strstr(dir, "models--") < p) {
		p += strlen("/snapshots/");
		if (p[0] && p[0] != '/')
			rg_buf_json_str(b, p, strcspn(p, "/"));
		else
			rg_buf_puts(b, "null");
	} else {
		rg_buf_puts(b, "null");
	}
}

/* TEI's Info fields (model_id as a name, model_sha, model_dtype, max_client_batch_size, max_input_length,
 * auto_truncate, version, served_model_name, max_batch_tokens...) and ragged's own. */
enum MHD_Result rg_answer_info(conn_ctx *c)
{
	rg_server *s = c->srv;
	const rg_model_info *i = s->info;
	char sched[64];
	rg_buf b;

	if (s->gen)
		return rg_answer_gen_info(c);
	/* "dp", or "token (dp measuring 12/40)" while the DP cost table is measured */
	rg_engine_sched_state(s->engine, sched, sizeof(sched), NULL, NULL);
	rg_buf_init(&b);
	rg_buf_puts(&b, "{\"version\":\"" RAGGED_VERSION "\",\"model_id\":");
	rg_buf_json_str(&b, s->model_id, strlen(s->model_id));
	rg_buf_puts(&b, ",\"served_model_name\":");
	rg_buf_json_str(&b, s->model_name, strlen(s->model_name));
	rg_buf_puts(&b, ",\"model_sha\":");
	rg_info_put_model_sha(&b, s);
	rg_buf_puts(&b, ",\"model_dir\":");
	json_str_lossy(&b, i->model_dir, strlen(i->model_dir));
	rg_buf_printf(&b, ",\"model_dtype\":\"%s\",\"max_client_batch_size\":%d,"
		       "\"auto_truncate\":%s,\"prompts\":[",
		       tei_dtype(i->dtype), s->o.max_inputs, s->o.auto_truncate ? "true" : "false");
	for (size_t k = 0; k < s->prompts.n; k++) {
		rg_buf_puts(&b, k ? "," : "");
		rg_buf_json_str(&b, s->prompts.names[k], strlen(s->prompts.names[k]));
	}
	rg_buf_puts(&b, "],\"default_prompt_name\":");
	if (s->prompts.dflt >= 0)
		rg_buf_json_str(&b, s->prompts.names[s->prompts.dflt],
				strlen(s->prompts.names[s->prompts.dflt]));
	else
		rg_buf_puts(&b, "null");
	/* TEI's model_type: {"embedding": {"pooling"}} | {"classifier" | "reranker": {"id2label",
	 * "label2id"}}; the architecture (config.json's model_type) is "architecture" */
	if (!i->num_labels) {
		rg_buf_printf(&b, ",\"model_type\":{\"embedding\":{\"pooling\":\"%s\"}}",
			       rg_pooling_name(i->pooling));
	} else {
		rg_buf_printf(&b, ",\"model_type\":{\"%s\":{\"id2label\":{",
			       i->num_labels == 1 ? "reranker" : "classifier");
		for (int k = 0; k < i->num_labels; k++) {
			rg_buf_printf(&b, "%s\"%d\":", k ? "," : "", k);
			rg_buf_json_str(&b, i->labels[k], strlen(i->labels[k]));
		}
		rg_buf_puts(&b, "},\"label2id\":{");
		for (int k = 0; k < i->num_labels; k++) {
			rg_buf_puts(&b, k ? "," : "");
			rg_buf_json_str(&b, i->labels[k], strlen(i->labels[k]));
			rg_buf_printf(&b, ":%d", k);
		}
		rg_buf_puts(&b, "}}}");
	}
	/* TEI's numbers that ragged has no twin for: what they would be here, never null */
	rg_buf_printf(&b, ",\"max_concurrent_requests\":%d,\"tokenization_workers\":%d,"
		       "\"output_dim\":%d",
		       s->o.max_concurrent_requests ? s->o.max_concurrent_requests : s->o.max_queue,
		       s->o.http_threads, i->output_dim);
	rg_buf_printf(&b, ",\"architecture\":\"%s\",\"vocab_size\":%d,\"hidden_size\":%d,"
		       "\"num_attention_heads\":%d,\"num_hidden_layers\":%d,"
		       "\"intermediate_size\":%d,\"max_position_embeddings\":%d,\"max_seq_len\":%d,"
		       "\"type_vocab_size\":%d,\"hidden_act\":\"%s\",\"layer_norm_eps\":%g,"
		       "\"pooling\":\"%s\",\"normalize\":%s,\"device\":\"%s\",\"dtype\":\"%s\","
		       "\"scheduler\":\"%s\",\"max_batch_tokens\":%d,\"max_batch_requests\":%d,"
		       "\"max_queue\":%d,\"max_inputs\":%d,\"max_body_bytes\":%zu,"
		       "\"max_input_length\":%d,\"request_timeout_ms\":%d,\"cache_entries\":%d,"
		       "\"build_cuda\":%s,\"model_kind\":\"%s\",\"num_labels\":%d,\"labels\":[",
		       i->model_type, i->vocab_size, i->hidden_size, i->num_attention_heads,
		       i->num_hidden_layers, i->intermediate_size, i->max_position_embeddings,
		       i->max_seq_len, i->type_vocab_size, i->hidden_act, i->layer_norm_eps,
		       rg_pooling_name(i->pooling), i->normalize ? "true" : "false",
		       rg_device_name(i->device), rg_dtype_name(i->dtype), sched,
		       s->o.max_batch_tokens, s->o.max_batch_requests, s->o.max_queue,
		       s->o.max_inputs, s->o.max_body_bytes, s->max_len, s->o.request_timeout_ms,
		       s->o.cache_entries, rg_build_has_cuda() ? "true" : "false",
		       !i->num_labels ? "embedding" : i->num_labels == 1 ? "reranker" : "classifier",
		       i->num_labels);
	for (int k = 0; k < i->num_labels; k++) {
		rg_buf_puts(&b, k ? "," : "");
		rg_buf_json_str(&b, i->labels[k], strlen(i->labels[k]));
	}
	rg_buf_puts(&b, "],\"devices\":[");
	for (int k = 0; k < s->n_models; k++)
		rg_buf_printf(&b, "%s\"%s\"", k ? "," : "", s->device_names[k]);
	/* the RAGGED_* tuning switches: name -> value, source, default (`ragged info`: with docs) */
	rg_buf_puts(&b, "],\"models\":");
	rg_info_put_models(&b, s);
	rg_buf_puts(&b, ",\"tuning\":");
	rg_info_put_tuning(&b);
	rg_buf_puts(&b, "}");
	return rg_conn_send(c, 200, &b, "application/json", 0, 0, 0);
}

void rg_info_put_tuning(rg_buf *b)
{
	char *t;

	if (rg_tuning_describe(false, &t) != RG_OK) {
		b->oom = true; /* the answer becomes the out-of-memory error */
		return;
	}
	rg_buf_puts(b, t);
	free(t);
}

/* The names x answers to as /v1/models lists them: each --served-model-name name, else its id;
 * f(name, n, arg) for each. */
static void for_each_name(const rg_server *x, void (*f)(const char *, size_t, void *), void *arg)
{
	const char *a = x->o.served_model_name ? x->o.served_model_name : x->model_name;

	while (*a) {
		size_t k = x->o.served_model_name ? strcspn(a, ",") : strlen(a);

		if (k)
			f(a, k, arg);
		a += k + (a[k] == ',');
	}
}

typedef struct {
	rg_buf *b;
	const rg_server *x;
	bool first;
} model_list;

/* One OpenAI model object of l->x under the name (name, n). */
static void put_model_object(const char *name, size_t n, void *arg)
{
	model_list *l = arg;

	rg_buf_puts(l->b, l->first ? "{\"id\":" : ",{\"id\":");
	rg_buf_json_str(l->b, name, n);
	rg_buf_printf(l->b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"ragged\"",
		      l->x->created_s);
	if (l->x->decoder) /* vLLM's field: the context of a decoder */
		rg_buf_printf(l->b, ",\"max_model_len\":%d", l->x->max_len);
	rg_buf_puts(l->b, "}");
	l->first = false;
}

/* OpenAI's model list: every model served (--model repeated: in their order), once per
 * --served-model-name name (vLLM lists each), else under its id. */
enum MHD_Result rg_answer_models(conn_ctx *c)
{
	const rg_server *front = c->srv->front;
	model_list l = {.first = true};
	rg_buf b;

	rg_buf_init(&b);
	l.b = &b;
	rg_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
	for (int k = 0; k < front->n_served; k++) {
		l.x = front->served[k];
		for_each_name(l.x, put_model_object, &l);
	}
	rg_buf_puts(&b, "]}");
	return rg_conn_send(c, 200, &b, "application/json", 0, 0, 0);
}

/* An element of /info's "models" "aliases" list. */
static void put_alias(const char *name, size_t n, void *arg)
{
	model_list *l = arg;

	rg_buf_puts(l->b, l->first ? "" : ",");
	rg_buf_json_str(l->b, name, n);
	l->first = false;
}

void rg_info_put_models(rg_buf *b, const rg_server *s)
{
	const rg_server *front = s->front;

	rg_buf_puts(b, "[");
	for (int k = 0; k < front->n_served; k++) {
		const rg_server *x = front->served[k];
		unsigned kind = x->info ? rg_route_kind_of_model(x->info) : 0;
		model_list l = {.b = b, .x = x, .first = true};

		rg_buf_puts(b, k ? ",{\"id\":" : "{\"id\":");
		rg_buf_json_str(b, x->model_name, strlen(x->model_name));
		rg_buf_puts(b, ",\"aliases\":[");
		for_each_name(x, put_alias, &l);
		rg_buf_puts(b, "],\"model_id\":");
		rg_buf_json_str(b, x->model_id, strlen(x->model_id));
		rg_buf_printf(b, ",\"kind\":\"%s\",\"max_input_length\":%d",
			      kind == RG_KIND_GENERATOR ? "generator"
			      : kind == RG_KIND_TRANSLATOR ? "translator"
			      : kind == RG_KIND_RERANKER ? "reranker"
			      : kind == RG_KIND_CLASSIFIER ? "classifier" : "embedding", x->max_len);
		/* the model's own budgets: its engine's batch limits, a decoder's KV cache */
		if (x->gen) {
			rg_kv_info kv;

			memset(&kv, 0, sizeof(kv));
			(void)rg_model_kv_info(x->model, &kv);
			rg_buf_printf(b, ",\"max_num_seqs\":%d,\"max_num_batched_tokens\":%d,"
				      "\"kv_cache_bytes\":%zu}", x->o.max_num_seqs,
				      x->o.max_num_batched_tokens, kv.bytes);
		} else {
			rg_buf_printf(b, ",\"max_batch_tokens\":%d,\"max_batch_requests\":%d,"
				      "\"max_inputs\":%d}", x->o.max_batch_tokens,
				      x->o.max_batch_requests, x->o.max_inputs);
		}
	}
	rg_buf_puts(b, "]");
}

rg_server *rg_served_find(rg_server *front, const char *name)
{
	for (int k = 0; k < front->n_served; k++)
		if (rg_model_served(front->served[k], name))
			return front->served[k];
	return NULL;
}

bool rg_model_served(const rg_server *s, const char *name)
{
	const char *a = s->o.served_model_name;
	size_t n;

	/* huggingface_hub's InferenceClient(URL).chat_completion sends "dummy" (older versions
	 * "tgi") as the model of a URL, which TGI ignores: a placeholder, not a model's name */
	if (!name || !strcmp(name, "dummy") || !strcmp(name, "tgi"))
		return true;
	if (!strcmp(name, s->model_name) || !strcmp(name, s->model_id) ||
	    (s->o.model[0] && !strcmp(name, s->o.model)) ||
	    (s->info && s->info->model_dir && !strcmp(name, s->info->model_dir)))
		return true;
	n = strlen(name);
	while (a && *a) {
		size_t k = strcspn(a, ",");

		if (k == n && !strncmp(a, name, n))
			return true;
		a += k + (a[k] == ',');
	}
	return false;
}

bool rg_refuse_model(conn_ctx *c, const char *name, enum MHD_Result *ret)
{
	const rg_server *front = c->srv->front;
	char list[1024];
	size_t w = 0;

	if (rg_model_served(c->srv, name))
		return false;
	/* the names of every model served: 'a', 'b' */
	list[0] = '\0';
	for (int k = 0; k < front->n_served && w < sizeof(list); k++)
		w += (size_t)snprintf(list + w, sizeof(list) - w, "%s'%s'", k ? ", " : "",
				      front->served[k]->model_name);
	*ret = rg_conn_error(c, 404, "model_not_found", "model",
			     "The model '%.200s' does not exist (this server serves %.700s)", name,
			     list);
	return true;
}

/* The model object of GET /v1/models/{id}: id as asked when it names a model served
 * (rg_model_served; the first of them when several would). */
enum MHD_Result rg_answer_model(conn_ctx *c, const char *id)
{
	rg_server *s = rg_served_find(c->srv->front, id);
	enum MHD_Result ret;
	rg_buf b;

	if (!s) { /* no model answers to id (c->srv, the first, neither): 404 */
		rg_refuse_model(c, id, &ret);
		return ret;
	}
	rg_buf_init(&b);
	rg_buf_puts(&b, "{\"id\":");
	rg_buf_json_str(&b, id, strlen(id));
	rg_buf_printf(&b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"ragged\"",
		       s->created_s);
	if (s->decoder)
		rg_buf_printf(&b, ",\"max_model_len\":%d", s->max_len);
	rg_buf_puts(&b, "}");
	return rg_conn_send(c, 200, &b, "application/json", 0, 0, 0);
}

enum MHD_Result rg_answer_openapi(conn_ctx *c)
{
	rg_buf b;

	rg_buf_init(&b);
	rg_openapi_write(&b);
	return rg_conn_send(c, 200, &b, "application/json", 0, 0, 0);
}
