/* `ragged serve`'s route table (routes.h) and what is derived from it: dispatch, the 404 / 405
 * answers, the model kind check, the metrics names; and the small GET routes (/health, /metrics).
 * The request flow is described in server.c; the HTTP glue is http.c, the embedding routes
 * routes_embed.c, TEI's and OpenAI's other routes routes_compat.c. */
#include "server/server_internal.h"
#include "server/engine_gen.h"
#include "server/gen_request.h"

#include <json-c/json.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small routes ----------------------------------------------------------------------- */

/* Several models: the series per model (label model, its served name): requests dispatched to
 * it, sequences waiting in its engine. */
static void render_models(const rg_server *front, rg_buf *b)
{
	char lab[320];

	rg_buf_puts(b, "# HELP ragged_model_requests_total Requests dispatched to the model (by "
		    "the request's \"model\").\n# TYPE ragged_model_requests_total counter\n");
	for (int k = 0; k < front->n_served; k++) {
		rg_metrics_label(lab, sizeof(lab), "model", front->served[k]->model_name);
		rg_buf_printf(b, "ragged_model_requests_total{%.*s} %llu\n", (int)strlen(lab) - 1,
			      lab, (unsigned long long)atomic_load(&front->served[k]->routed));
	}
	rg_buf_puts(b, "# HELP ragged_model_queue_depth Sequences waiting in the model's engine.\n"
		    "# TYPE ragged_model_queue_depth gauge\n");
	for (int k = 0; k < front->n_served; k++) {
		const rg_server *x = front->served[k];

		rg_metrics_label(lab, sizeof(lab), "model", x->model_name);
		rg_buf_printf(b, "ragged_model_queue_depth{%.*s} %d\n", (int)strlen(lab) - 1, lab,
			      x->gen ? rg_gen_srv_queue_depth(x->gen)
			      : x->engine ? rg_engine_queue_depth(x->engine) : 0);
	}
}

/* GET /metrics: TEI's and ragged's series over every model's requests and batches (one
 * rg_metrics, the front's), the generation series of each decoder (ragged's and TGI's
 * unlabeled and vLLM's labeled by model_name with one decoder; with several, every sample of
 * them also labeled model="<its name>", rg_metrics_merge_parts) and, with several models, the
 * series per model (render_models). */
static enum MHD_Result handle_metrics(conn_ctx *c)
{
	rg_server *s = c->srv, *g = NULL;
	size_t used = 0, total = 0, cached = 0;
	int depth = 0, n_gen = 0;
	rg_buf b;
	bool ready = atomic_load(&s->ready);

	/* every GPU's memory together; on the CPU the process's RSS, counted once */
	for (int i = 0; ready && i < (s->info->device == RG_DEVICE_CUDA ? s->n_models : 1); i++) {
		size_t u, t;

		if (rg_model_memory(s->models[i], &u, &t) != RG_OK) {
			used = total = 0;
			break;
		}
		used += u;
		total += t;
	}
	rg_buf_init(&b);
	for (int k = 0; ready && k < s->n_served; k++) { /* every model's queue and cache */
		const rg_server *x = s->served[k];

		depth += x->gen ? rg_gen_srv_queue_depth(x->gen) : rg_engine_queue_depth(x->engine);
		cached += x->cache ? rg_cache_size(x->cache) : 0;
	}
	rg_metrics_render(&s->metrics, &b, depth, used, total, cached);
	for (int k = 0; ready && k < s->n_served; k++)
		if (s->served[k]->gen) {
			g = g ? g : s->served[k];
			n_gen++;
		}
	if (n_gen == 1) {
		rg_gen_srv_metrics(g->gen, &b, g->model_name);
	} else if (n_gen > 1) {
		/* several decoders: each one's families rendered apart, then merged family by
		 * family with a model label on every sample (a family's lines must stand together) */
		rg_buf parts[RG_SERVE_MAX_MODELS];
		char labels[RG_SERVE_MAX_MODELS][160];
		const char *lab[RG_SERVE_MAX_MODELS];
		int n = 0;

		for (int k = 0; k < s->n_served && n < RG_SERVE_MAX_MODELS; k++) {
			const rg_server *x = s->served[k];

			if (!x->gen)
				continue;
			rg_buf_init(&parts[n]);
			rg_gen_srv_metrics(x->gen, &parts[n], x->model_name);
			rg_metrics_label(labels[n], sizeof(labels[n]), "model", x->model_name);
			lab[n] = labels[n];
			n++;
		}
		rg_metrics_merge_parts(&b, parts, lab, n);
		for (int k = 0; k < n; k++)
			rg_buf_free(&parts[k]);
	}
	if (g)
		rg_metrics_render_tgi_requests(&s->metrics, &b);
	if (ready && s->n_served > 1)
		render_models(s, &b);
	if (ready && !s->gen && s->kind == RG_SCHED_DP) {
		/* the background DP measurement (engine.h): cells done / in all, and whether the
		 * dp scheduler is in use yet */
		char sched[64];
		int done, total_cells;

		rg_engine_sched_state(s->engine, sched, sizeof(sched), &done, &total_cells);
		rg_buf_printf(&b, "# HELP ragged_dp_cost_cells_measured Cells of the DP cost table "
			      "measured at this start (of ragged_dp_cost_cells_total).\n"
			      "# TYPE ragged_dp_cost_cells_measured gauge\n"
			      "ragged_dp_cost_cells_measured %d\n"
			      "# HELP ragged_dp_cost_cells_total Cells of the DP cost table to "
			      "measure at this start (0: it was loaded).\n"
			      "# TYPE ragged_dp_cost_cells_total gauge\n"
			      "ragged_dp_cost_cells_total %d\n"
			      "# HELP ragged_dp_scheduler_active 1 when the dp scheduler is in use, 0 "
			      "while the token scheduler serves.\n"
			      "# TYPE ragged_dp_scheduler_active gauge\n"
			      "ragged_dp_scheduler_active %d\n",
			      done, total_cells, !strcmp(sched, "dp"));
	}
	return rg_conn_send(c, 200, &b, "text/plain; version=0.0.4; charset=utf-8", 0, 0, 0);
}

/* GET /health, /ping and GET /: 200 once the model is loaded (the 503 before is dispatch's). */
static enum MHD_Result handle_health(conn_ctx *c)
{
	rg_buf b;

	rg_buf_init(&b);
	rg_buf_puts(&b, "{\"status\":\"ok\"}");
	return rg_conn_send(c, 200, &b, "application/json", 0, 0, 0);
}

static enum MHD_Result handle_model(conn_ctx *c)
{
	return rg_answer_model(c, c->path_arg ? c->path_arg : "");
}

/* ---- the route table -------------------------------------------------------------------- */

/* OpenAPI fragments the rows share (JSON text). */
#define J_FLOAT "{\"type\":\"number\",\"format\":\"float\"}"
#define S_VECTORS "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":" J_FLOAT "}}"
#define S_READY "{\"type\":\"object\",\"properties\":{\"status\":{\"type\":\"string\"}}}"
#define R_NOT_READY                                                                         \
	"\"503\":{\"description\":\"Not ready (Retry-After)\",\"content\":{\"application/json\":" \
	"{\"schema\":{\"$ref\":\"#/components/schemas/ErrorResponse\"}}}}"
#define S_MODEL                                                                             \
	"{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},\"object\":{\"type\":" \
	"\"string\"},\"created\":{\"type\":\"integer\"},\"owned_by\":{\"type\":\"string\"}}}"
#define E_RUN "400 413 422 429 503 504" /* the errors of a route that runs the model */
#define SUMMARY_READY "Ready: 200 once the model is loaded, 503 before and while stopping."
#define SUMMARY_OPENAI "OpenAI-compatible embeddings; errors in OpenAI's shape."
#define KIND_SCORES (RG_KIND_RERANKER | RG_KIND_CLASSIFIER)
#define E_GEN "400 413 429 503"
#define S_OBJECT "{\"type\":\"object\"}"
#define SUMMARY_COMPLETIONS                                                                  \
	"OpenAI-compatible text completions (decoder models; on an encoder-decoder the prompt " \
	"is the source and the completion its translation, no echo); stream: true for "        \
	"server-sent events; errors in OpenAI's shape."
#define SUMMARY_CHAT                                                                         \
	"OpenAI-compatible chat completions, the messages rendered by the model's chat "      \
	"template; stream: true for server-sent events; errors in OpenAI's shape."

/* One row per path and method set, in the order of the 404 text and /openapi.json. */
static const rg_route_def routes[] = {
	{.path = "/", .methods = RG_METHOD_GET, .id = RG_ROUTE_HEALTH, .name = "health",
	 .handle = handle_health, .kinds = RG_KIND_ANY, .public_route = true,
	 .summary = SUMMARY_READY, .ok_desc = "Ready", .ok_schema = S_READY,
	 .responses = R_NOT_READY},
	{.path = "/", .methods = RG_METHOD_POST, .id = RG_ROUTE_EMBED, .name = "embed",
	 .by_kind = true, .schema = "EmbedRequest", .kinds = RG_KIND_ANY,
	 .summary = "TEI's default route (huggingface_hub posts here), by the model's kind: /embed "
		    "for an embedding model (/similarity when \"inputs\" is {\"source_sentence\", "
		    "\"sentences\"}), /predict for a classifier, /rerank for a reranker (the "
		    "bodies of those routes; the schema shows /embed's).",
	 .ok_schema = S_VECTORS, .errors = E_RUN},
	{.path = "/invocations", .methods = RG_METHOD_POST, .id = RG_ROUTE_EMBED, .name = "embed",
	 .by_kind = true, .schema = "EmbedRequest", .kinds = RG_KIND_ANY,
	 .summary = "SageMaker's route, as POST /: /embed, /predict or /rerank by the model's kind "
		    "(the schema shows /embed's).",
	 .ok_schema = S_VECTORS, .errors = E_RUN},
	{.path = "/embed", .methods = RG_METHOD_POST, .id = RG_ROUTE_EMBED, .name = "embed",
	 .handle = rg_handle_embed, .answer = rg_answer_embeddings, .schema = "EmbedRequest",
	 .kinds = RG_KIND_EMBEDDING, .kind_default = true,
	 .tei_metric = "te_embed",
	 .summary = "Pooled embeddings (TEI).", .ok_schema = S_VECTORS, .errors = E_RUN},
	{.path = "/embed_all", .methods = RG_METHOD_POST, .id = RG_ROUTE_EMBED_ALL,
	 .name = "embed_all", .handle = rg_handle_embed, .answer = rg_answer_embed_all,
	 .schema = "EmbedAllRequest", .kinds = RG_KIND_EMBEDDING,
	 .tei_metric = "te_embed_all",
	 .summary = "Every token's last hidden state, no pooling (TEI).",
	 .ok_schema = "{\"type\":\"array\",\"items\":" S_VECTORS "}", .errors = E_RUN},
	{.path = "/v1/embeddings", .methods = RG_METHOD_POST, .id = RG_ROUTE_OPENAI,
	 .name = "v1_embeddings", .handle = rg_handle_embed, .answer = rg_answer_embeddings,
	 .schema = "OpenAIRequest", .kinds = RG_KIND_EMBEDDING, .openai = true,
	 .tei_metric = "te_embed",
	 .summary = SUMMARY_OPENAI,
	 .ok_schema = "{\"$ref\":\"#/components/schemas/OpenAIResponse\"}", .errors = E_RUN},
	{.path = "/embeddings", .methods = RG_METHOD_POST, .id = RG_ROUTE_OPENAI,
	 .name = "v1_embeddings", .handle = rg_handle_embed, .answer = rg_answer_embeddings,
	 .schema = "OpenAIRequest", .kinds = RG_KIND_EMBEDDING, .openai = true,
	 .tei_metric = "te_embed",
	 .summary = SUMMARY_OPENAI,
	 .ok_schema = "{\"$ref\":\"#/components/schemas/OpenAIResponse\"}", .errors = E_RUN},
	{.path = "/similarity", .methods = RG_METHOD_POST, .id = RG_ROUTE_SIMILARITY,
	 .name = "similarity", .handle = rg_handle_embed, .answer = rg_answer_similarity,
	 .schema = "SimilarityRequest", .kinds = RG_KIND_EMBEDDING,
	 .tei_metric = "te_similarity",
	 .summary = "Cosine similarity of the source sentence with each sentence (TEI).",
	 .ok_schema = "{\"type\":\"array\",\"items\":" J_FLOAT "}", .errors = E_RUN},
	{.path = "/rerank", .methods = RG_METHOD_POST, .id = RG_ROUTE_RERANK, .name = "rerank",
	 .handle = rg_handle_embed, .answer = rg_answer_scores, .schema = "RerankRequest",
	 .kinds = RG_KIND_RERANKER, .kind_default = true,
	 .tei_metric = "te_rerank",
	 .summary = "Cross-encoder relevance of each text to the query, best first (TEI).",
	 .ok_schema = "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"index\":"
		      "{\"type\":\"integer\"},\"score\":" J_FLOAT ",\"text\":{\"type\":\"string\"}}}}",
	 .errors = E_RUN},
	{.path = "/predict", .methods = RG_METHOD_POST, .id = RG_ROUTE_PREDICT, .name = "predict",
	 .handle = rg_handle_embed, .answer = rg_answer_scores, .schema = "PredictRequest",
	 .kinds = KIND_SCORES, .kind_default = true,
	 .tei_metric = "te_predict",
	 .summary = "Sequence classification scores (TEI).",
	 .ok_schema = "{\"type\":\"array\",\"items\":{}}", .errors = E_RUN},
	{.path = "/generate", .methods = RG_METHOD_POST, .id = RG_ROUTE_GENERATE, .name = "generate",
	 .handle = rg_handle_generate, .schema = "GenerateRequest", .kinds = RG_KIND_GENERATIVE,
	 .kind_default = true, .gen = true, .gen_api = RG_GEN_API_TGI,
	 .summary = "Text generation (TGI's /generate; also TGI's POST /, which streams when the "
		    "body says \"stream\": true).",
	 .ok_schema = "{\"type\":\"object\",\"properties\":{\"generated_text\":{\"type\":"
		      "\"string\"},\"details\":{\"type\":\"object\",\"nullable\":true}}}",
	 .errors = E_GEN},
	{.path = "/generate_stream", .methods = RG_METHOD_POST, .id = RG_ROUTE_GENERATE,
	 .name = "generate", .handle = rg_handle_generate, .schema = "GenerateRequest",
	 .kinds = RG_KIND_GENERATIVE, .gen = true, .gen_api = RG_GEN_API_TGI_STREAM,
	 .summary = "Text generation as server-sent events, one per token (TGI's "
		    "/generate_stream).",
	 .ok_desc = "Server-sent events", .ok_type = "text/event-stream",
	 .ok_schema = "{\"type\":\"string\"}", .errors = E_GEN},
	{.path = "/translate", .methods = RG_METHOD_POST, .id = RG_ROUTE_TRANSLATE,
	 .name = "translate", .handle = rg_handle_generate, .schema = "TranslateRequest",
	 .kinds = RG_KIND_TRANSLATOR, .gen = true, .gen_api = RG_GEN_API_TRANSLATE,
	 .summary = "Translation by an encoder-decoder model (MarianMT), HF's translation pipeline "
		    "naming: one input -> {\"translation_text\", \"generated_tokens\", "
		    "\"finish_reason\", \"details\"}, a list -> a list of those in order; "
		    "\"stream\": true (one input, no beams) -> server-sent events in "
		    "/generate_stream's shape (one per token, the last with generated_text and "
		    "details). Another model kind: 400.",
	 .ok_schema = "{\"oneOf\":[{\"$ref\":\"#/components/schemas/TranslateResponse\"},"
		      "{\"type\":\"array\",\"items\":{\"$ref\":\"#/components/schemas/"
		      "TranslateResponse\"}}]}",
	 .errors = E_GEN},
	{.path = "/v1/completions", .methods = RG_METHOD_POST, .id = RG_ROUTE_COMPLETIONS,
	 .name = "v1_completions", .handle = rg_handle_generate, .schema = "CompletionRequest",
	 .kinds = RG_KIND_GENERATIVE, .openai = true, .gen = true,
	 .gen_api = RG_GEN_API_COMPLETIONS, .summary = SUMMARY_COMPLETIONS,
	 .ok_schema = S_OBJECT, .errors = E_GEN},
	{.path = "/completions", .methods = RG_METHOD_POST, .id = RG_ROUTE_COMPLETIONS,
	 .name = "v1_completions", .handle = rg_handle_generate, .schema = "CompletionRequest",
	 .kinds = RG_KIND_GENERATIVE, .openai = true, .gen = true,
	 .gen_api = RG_GEN_API_COMPLETIONS, .summary = SUMMARY_COMPLETIONS,
	 .ok_schema = S_OBJECT, .errors = E_GEN},
	{.path = "/v1/chat/completions", .methods = RG_METHOD_POST, .id = RG_ROUTE_CHAT,
	 .name = "v1_chat_completions", .handle = rg_handle_generate,
	 .schema = "ChatCompletionRequest", .kinds = RG_KIND_GENERATOR, .openai = true,
	 .gen = true, .gen_api = RG_GEN_API_CHAT, .summary = SUMMARY_CHAT,
	 .ok_schema = S_OBJECT, .errors = E_GEN},
	{.path = "/chat/completions", .methods = RG_METHOD_POST, .id = RG_ROUTE_CHAT,
	 .name = "v1_chat_completions", .handle = rg_handle_generate,
	 .schema = "ChatCompletionRequest", .kinds = RG_KIND_GENERATOR, .openai = true,
	 .gen = true, .gen_api = RG_GEN_API_CHAT, .summary = SUMMARY_CHAT,
	 .ok_schema = S_OBJECT, .errors = E_GEN},
	{.path = "/tokenize", .methods = RG_METHOD_POST, .id = RG_ROUTE_TOKENIZE,
	 .name = "tokenize", .handle = rg_handle_gen_tokenize, .schema = "GenTokenizeRequest",
	 .kinds = RG_KIND_GENERATIVE, .gen = true, .gen_api = -1,
	 .summary = "A decoder's tokens (vLLM's shape: {\"prompt\"} or {\"messages\"} -> "
		    "{\"count\", \"max_model_len\", \"tokens\"}; TEI's {\"inputs\"} as for "
		    "encoders).",
	 .ok_schema = S_OBJECT, .errors = "400 413 503"},
	{.path = "/tokenize", .methods = RG_METHOD_POST, .id = RG_ROUTE_TOKENIZE,
	 .name = "tokenize", .handle = rg_handle_tokenize, .schema = "TokenizeRequest",
	 .kinds = RG_KIND_ANY, .summary = "Token objects per input (TEI).",
	 .ok_schema = "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"$ref\":"
		      "\"#/components/schemas/SimpleToken\"}}}",
	 .errors = "400 413 422 503"},
	{.path = "/detokenize", .methods = RG_METHOD_POST, .id = RG_ROUTE_DETOKENIZE,
	 .name = "detokenize", .handle = rg_handle_detokenize, .schema = "DetokenizeRequest",
	 .kinds = RG_KIND_GENERATIVE, .gen = true, .gen_api = -1,
	 .summary = "Token ids back to text (vLLM's: {\"tokens\"} -> {\"prompt\"}).",
	 .ok_schema = S_OBJECT, .errors = "400 413 503"},
	{.path = "/decode", .methods = RG_METHOD_POST, .id = RG_ROUTE_DECODE, .name = "decode",
	 .handle = rg_answer_decode, .schema = "DecodeRequest", .kinds = RG_KIND_ANY,
	 .summary = "Token ids back to text (TEI).",
	 .ok_schema = "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}",
	 .errors = "400 413 501 503"},
	{.path = "/health", .methods = RG_METHOD_GET, .id = RG_ROUTE_HEALTH, .name = "health",
	 .handle = handle_health, .kinds = RG_KIND_ANY, .public_route = true,
	 .summary = SUMMARY_READY, .ok_desc = "Ready", .ok_schema = S_READY,
	 .responses = R_NOT_READY},
	{.path = "/ping", .methods = RG_METHOD_GET, .id = RG_ROUTE_HEALTH, .name = "health",
	 .handle = handle_health, .kinds = RG_KIND_ANY, .public_route = true,
	 .summary = "SageMaker health check, as /health.", .ok_desc = "Ready",
	 .ok_schema = S_READY, .responses = R_NOT_READY},
	{.path = "/info", .methods = RG_METHOD_GET, .id = RG_ROUTE_INFO, .name = "info",
	 .handle = rg_answer_info, .kinds = RG_KIND_ANY,
	 .summary = "Model and server settings (TEI's Info fields and ragged's).",
	 .ok_schema = "{\"type\":\"object\"}", .errors = "503"},
	{.path = "/metrics", .methods = RG_METHOD_GET, .id = RG_ROUTE_METRICS, .name = "metrics",
	 .handle = handle_metrics, .kinds = RG_KIND_ANY, .before_ready = true,
	 .summary = "Prometheus metrics.", .ok_desc = "Text exposition format 0.0.4",
	 .ok_type = "text/plain", .ok_schema = "{\"type\":\"string\"}"},
	{.path = "/v1/models", .methods = RG_METHOD_GET, .id = RG_ROUTE_MODELS, .name = "v1_models",
	 .handle = rg_answer_models, .kinds = RG_KIND_ANY, .openai = true,
	 .summary = "The served model (OpenAI's list).",
	 .ok_schema = "{\"type\":\"object\",\"properties\":{\"object\":{\"type\":\"string\"},"
		      "\"data\":{\"type\":\"array\",\"items\":" S_MODEL "}}}",
	 .errors = "503"},
	{.path = "/v1/models/{model}", .methods = RG_METHOD_GET, .id = RG_ROUTE_MODEL,
	 .name = "v1_model", .handle = handle_model, .kinds = RG_KIND_ANY, .openai = true,
	 .summary = "The served model (OpenAI's model object); 404 in OpenAI's error shape for "
		    "another id.",
	 .ok_schema = S_MODEL,
	 .responses = "\"404\":{\"description\":\"Not the served model (OpenAI's error shape)\"}",
	 .params = "[{\"name\":\"model\",\"in\":\"path\",\"required\":true,\"schema\":{\"type\":"
		   "\"string\"}}]"},
	{.path = "/openapi.json", .methods = RG_METHOD_GET, .id = RG_ROUTE_OPENAPI,
	 .name = "openapi", .handle = rg_answer_openapi, .kinds = RG_KIND_ANY,
	 .summary = "This document.", .ok_desc = "OpenAPI 3", .ok_schema = "{\"type\":\"object\"}"},
};

const rg_route_def *rg_routes(size_t *n)
{
	*n = sizeof(routes) / sizeof(routes[0]);
	return routes;
}

const char *rg_route_name(rg_route r)
{
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (routes[i].id == r)
			return routes[i].name;
	return "other";
}

bool rg_route_runs_model(rg_route id)
{
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (routes[i].id == id && routes[i].answer)
			return true;
	return false;
}

const char *rg_route_tei_metric(rg_route id)
{
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (routes[i].id == id && routes[i].tei_metric)
			return routes[i].tei_metric;
	return NULL;
}

unsigned rg_route_kind_of(int num_labels)
{
	return !num_labels ? RG_KIND_EMBEDDING : num_labels == 1 ? RG_KIND_RERANKER
								  : RG_KIND_CLASSIFIER;
}

unsigned rg_route_kind_of_model(const rg_model_info *info)
{
	return info->kind == RG_MODEL_DECODER ? RG_KIND_GENERATOR
	       : info->kind == RG_MODEL_ENC_DEC ? RG_KIND_TRANSLATOR
					       : rg_route_kind_of(info->num_labels);
}

/* Whether path matches row's path: equal, or its prefix before a last "{name}" segment followed
 * by a non-empty rest (*arg). */
static bool path_matches(const rg_route_def *row, const char *path, const char **arg)
{
	const char *brace = strchr(row->path, '{');
	size_t n;

	if (!brace)
		return !strcmp(row->path, path);
	n = (size_t)(brace - row->path);
	if (strncmp(row->path, path, n) || !path[n])
		return false;
	*arg = path + n;
	return true;
}

static unsigned method_bit(const char *method)
{
	if (!strcmp(method, "GET") || !strcmp(method, "HEAD"))
		return RG_METHOD_GET;
	if (!strcmp(method, "POST"))
		return RG_METHOD_POST;
	return 0;
}

const rg_route_def *rg_route_find(const char *path, const char *method, unsigned kind,
				  const char **arg)
{
	const size_t n = sizeof(routes) / sizeof(routes[0]);
	const rg_route_def *row = NULL;
	unsigned m = method_bit(method);
	const char *a = NULL;

	const rg_route_def *first_m = NULL;
	const char *a_m = NULL;

	*arg = NULL;
	kind = kind ? kind : RG_KIND_EMBEDDING;
	for (size_t i = 0; i < n; i++) {
		const char *ai = NULL;

		if (!path_matches(&routes[i], path, &ai))
			continue;
		if (!(routes[i].methods & m)) {
			if (!first_m) { /* no row of the method yet: the last one answers 405 */
				row = &routes[i];
				a = ai;
			}
			continue;
		}
		if (!first_m) {
			first_m = &routes[i];
			a_m = ai;
		}
		if (routes[i].kinds & kind) {
			first_m = &routes[i];
			a_m = ai;
			break;
		}
	}
	if (first_m) {
		row = first_m;
		a = a_m;
	}
	if (row && row->by_kind) {
		for (size_t i = 0; i < n; i++)
			if (routes[i].kind_default && (routes[i].kinds & kind))
				return &routes[i];
	}
	*arg = a;
	return row;
}

const char *rg_route_allow(const rg_route_def *row)
{
	switch (row->methods) {
	case RG_METHOD_GET: return "GET, HEAD";
	case RG_METHOD_POST: return "POST";
	default: return "GET, HEAD, POST";
	}
}

void rg_routes_list(char *buf, size_t n)
{
	size_t w = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]) && w < n; i++) {
		if (i && !strcmp(routes[i].path, routes[i - 1].path))
			continue;
		w += (size_t)snprintf(buf + w, n - w, "%s%s", w ? " " : "", routes[i].path);
	}
}

/* 400 when the model's kind is not one the row serves (TEI: an embedding model has no /predict,
 * a classifier no /embed; /rerank needs a single-score cross-encoder; /translate an
 * encoder-decoder; an encoder-decoder has no chat template); *ret set and true then. */
static bool refuse_kind(conn_ctx *c, enum MHD_Result *ret)
{
	rg_server *s = c->srv;
	unsigned kind = rg_route_kind_of_model(s->info);

	if (c->row->kinds & kind)
		return false;
	if (c->row->kinds == RG_KIND_TRANSLATOR)
		*ret = rg_conn_error(c, 400, "validation", NULL,
				     "%s needs an encoder-decoder (translation) model; %s is %s",
				     c->row->name, s->model_name,
				     kind == RG_KIND_GENERATOR ? "a decoder-only text generation "
								 "model (use /v1/completions or "
								 "/generate)"
								: "an encoder");
	else if (kind == RG_KIND_TRANSLATOR && c->row->id == RG_ROUTE_CHAT)
		*ret = rg_conn_error(c, 400, "validation", "messages",
				     "%s is an encoder-decoder (translation) model: it has no chat "
				     "template; use /translate, /v1/completions or /generate with "
				     "the source text", s->model_name);
	else if (kind == RG_KIND_TRANSLATOR)
		*ret = rg_conn_error(c, 400, "validation", NULL,
				     "%s is an encoder-decoder (translation) model; %s needs an "
				     "encoder (use /translate, /v1/completions or /generate)",
				     s->model_name, c->row->name);
	else if (kind == RG_KIND_GENERATOR)
		*ret = rg_conn_error(c, 400, "validation", NULL,
				     "%s is a text generation model; %s needs an encoder (use "
				     "/v1/completions, /v1/chat/completions or /generate)",
				     s->model_name, c->row->name);
	else if (c->row->kinds & RG_KIND_GENERATOR)
		*ret = rg_conn_error(c, 400, "validation", NULL,
				     "%s needs a text generation (decoder) model; %s is %s",
				     c->row->name, s->model_name,
				     s->info == &s->embed_info
					     ? "a decoder served as an embedding model (its "
					       "sentence-transformers pooling files): use /embed or "
					       "/v1/embeddings"
					     : "an encoder");
	else if (kind == RG_KIND_EMBEDDING)
		*ret = rg_conn_error(c, 400, "validation", NULL,
				     "%s needs a sequence classification model; %s is an embedding "
				     "model (use /embed or /v1/embeddings)",
				     c->row->name, s->model_name);
	else if (c->row->kinds & RG_KIND_EMBEDDING)
		*ret = rg_conn_error(c, 400, "validation", NULL,
				     "%s is a sequence classification model; use /predict%s",
				     s->model_name, kind == RG_KIND_RERANKER ? " or /rerank" : "");
	else
		*ret = rg_conn_error(c, 400, "validation", NULL,
				     "%s needs a cross-encoder with one score; this classifier has %d "
				     "labels (use /predict)",
				     c->row->name, s->info->num_labels);
	return true;
}

/* TEI's POST / (and /invocations) on an embedding model is /similarity when "inputs" is an
 * object ({"source_sentence", "sentences"}: huggingface_hub's InferenceClient(URL)
 * .sentence_similarity), else /embed: the row that answers, switched in c. A body that does not
 * parse stays /embed's, whose parser words the error. */
static void route_by_body(conn_ctx *c, const char *url)
{
	rg_server *s = c->srv;
	const rg_route_def *row = c->row, *sim;
	json_object *o = NULL, *in;
	rg_req_error err;
	const char *arg;

	if (row->id != RG_ROUTE_EMBED || !strcmp(url, row->path) ||
	    rg_route_kind_of_model(s->info) != RG_KIND_EMBEDDING)
		return;
	if (rg_req_parse_object(c->http.body.data ? c->http.body.data : "", c->http.body.len,
				s->lim.max_depth, &o, &err) != RG_OK)
		return;
	if (json_object_object_get_ex(o, "inputs", &in) && json_object_is_type(in, json_type_object) &&
	    (sim = rg_route_find("/similarity", "POST", RG_KIND_EMBEDDING, &arg)) &&
	    sim->id == RG_ROUTE_SIMILARITY) {
		c->row = sim;
		c->route = RG_ROUTE_SIMILARITY;
	}
	json_object_put(o);
}

/* Several models (issue 31 item 4): point c->srv at the model that the body's "model" names (the
 * first model when it names none) and find the row again by that model's kind (POST / and
 * /tokenize have a row per kind). A name that no model answers to gets 404 model_not_found on
 * every route, as vLLM answers it (*ret set, true). A body that does not parse, or a "model"
 * that is no string, stays with the first model, whose parser words the error. */
/* The first served model whose kind the route (url, method) serves, else the first model. */
static rg_server *first_fitting(rg_server *front, const char *url, const char *method)
{
	for (int k = 0; k < front->n_served; k++) {
		rg_server *m = front->served[k];
		const unsigned kind = rg_route_kind_of_model(m->info);
		const char *arg;
		const rg_route_def *row = rg_route_find(url, method, kind, &arg);

		if (row && (row->kinds == RG_KIND_ANY || (row->kinds & kind)))
			return m;
	}
	return front;
}

static bool route_to_model(conn_ctx *c, const char *url, const char *method,
			   enum MHD_Result *ret)
{
	rg_server *front = c->srv, *m;
	const rg_route_def *row;
	json_object *o = NULL, *v;
	const char *arg, *name = NULL;
	rg_req_error err;

	if (front->n_served < 2 || !c->http.post || !c->http.body.len)
		return false;
	if (rg_req_parse_object(c->http.body.data, c->http.body.len, front->lim.max_depth, &o,
				&err) != RG_OK)
		return false;
	if (json_object_object_get_ex(o, "model", &v) && json_object_is_type(v, json_type_string))
		name = json_object_get_string(v);
	/* no name (or huggingface_hub's placeholder): the first model whose kind serves the route,
	 * as a TEI client posting /rerank without a model expects in a server whose first model
	 * embeds; the first model when none does (its kind check answers the 400) */
	m = !name || !strcmp(name, "dummy") || !strcmp(name, "tgi")
		    ? first_fitting(front, url, method)
		    : rg_served_find(front, name);
	if (!m) {
		rg_refuse_model(c, name, ret);
		json_object_put(o);
		return true;
	}
	json_object_put(o);
	if (m == front)
		return false;
	c->srv = m;
	row = rg_route_find(url, method, rg_route_kind_of_model(m->info), &arg);
	if (row) {
		c->row = row;
		c->route = row->id;
		if (!path_matches(row, url, &c->path_arg))
			c->path_arg = NULL;
	}
	return false;
}

/* The request has arrived in full: 404 / 405 / 503, the model chosen by the body's "model"
 * (route_to_model), the body parsed by the row's schema, the model kind checked, then the row's
 * handler. */
enum MHD_Result rg_route_dispatch(conn_ctx *c, const char *url, const char *method)
{
	rg_server *s = c->srv;
	const rg_route_def *row = c->row;
	enum MHD_Result ret;
	rg_req_error err;
	rg_status st;

	if (!row) {
		char list[512];

		rg_routes_list(list, sizeof(list));
		return rg_conn_error(c, 404, "not_found", NULL,
				     "no route %.200s (routes: %s)", url, list);
	}
	if (!(row->methods & method_bit(method)))
		return rg_conn_error(c, 405, "method_not_allowed", NULL,
				     "method %s not allowed on %s",
				     method, row->name);
	if (!path_matches(row, url, &c->path_arg)) /* this callback's url: MHD's, valid now */
		c->path_arg = NULL;
	if (!row->before_ready && (!atomic_load(&s->ready) || atomic_load(&s->stopping)))
		return rg_conn_error(c, 503, "unhealthy", NULL, "model is %s",
				     atomic_load(&s->stopping) ? "shutting down" : "loading");
	if (route_to_model(c, url, method, &ret))
		return ret;
	s = c->srv;
	route_by_body(c, url);
	row = c->row;
	if (row->schema)
		atomic_fetch_add(&s->routed, 1);
	if (row->schema && !row->gen) {
		st = rg_request_parse(row->id, c->http.body.data, c->http.body.len, &s->lim, &c->req, &err);
		rg_conn_release_body(c);
		if (st != RG_OK)
			return rg_conn_error(c, err.http_status, err.type, err.param, "%s", err.msg);
		if (rg_refuse_model(c, c->req.model, &ret))
			return ret;
	}
	if (row->kinds != RG_KIND_ANY && refuse_kind(c, &ret))
		return ret;
	return row->handle(c);
}
