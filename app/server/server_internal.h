/* What the server's modules share (server.c: start-up and shutdown; http.c: the libmicrohttpd
 * glue and the per-connection life cycle; routes.c: the route table and dispatch; routes_embed.c
 * and routes_compat.c: the handlers): the server and per-connection state. Not a public header. */
#ifndef RG_SERVER_INTERNAL_H
#define RG_SERVER_INTERNAL_H
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "ragged.h"
#include "core/buf.h"
#include "server/sched/cost_table.h"
#include "server/sched/sched.h"
#include "server/cache.h"
#include "server/engine.h"
#include "server/http_status.h"
#include "server/metrics.h"
#include "server/options.h"
#include "server/prompts.h"
#include "server/request.h"
#include "server/routes.h"

#define EXIT_USAGE RG_SERVE_EXIT_USAGE

/* (routes_gen.c) The fill-in-the-middle tokens of m's vocabulary (ids [0, vocab)) into fim[0..2]: prefix,
 * suffix, middle, by their text as StarCoder / SantaCoder / SmolLM ("<fim_prefix>",
 * "<fim_suffix>", "<fim_middle>") and Qwen2.5-Coder ("<|fim_prefix|>", ...) name them; -1 each
 * when the vocabulary lacks one of the three (all three are then -1). A completion with a
 * "suffix" is the prompt prefix-suffix-middle (PSM, Bavarian et al. 2022, "Efficient Training
 * of Language Models to Fill in the Middle"): fim[0] prompt fim[1] suffix fim[2]. */
void rg_fim_tokens(const rg_model *m, int vocab, int32_t fim[3]);

/* One rg_server per model served (issue 31 item 4: --model repeated). The first owns the HTTP
 * daemon and what every request shares (the listening socket, the buffered-bytes budget, the
 * read deadlines, the metrics: front fields below); each holds its own model, engine, cache,
 * names and limits. Dispatch (routes.c) points a request's conn_ctx.srv at the model its "model"
 * field names, so that the handlers read that model's state; the shared fields are read through
 * ->front. */
typedef struct rg_server {
	rg_serve_opts o;
	struct rg_server *front; /* the first model's, which owns the daemon (itself for the
				  * first) */
	struct rg_server *served[RG_SERVE_MAX_MODELS]; /* (n_served) front only: every model, [0]
				  * the front itself, in --model order */
	int n_served;            /* front only: models served (1 unless --model is repeated) */
	atomic_ullong routed;    /* requests dispatched to this model (/metrics, by model) */
	char model_dir[4096];    /* --model resolved (rg_model_dir_resolve) */
	rg_model *model;         /* models[0]: /info, tokenizers, the DP measurement */
	rg_model *models[RG_SERVE_MAX_DEVICES]; /* (n_models) one per device, the engine's */
	rg_model *draft;         /* --draft-model: models[0]'s speculative drafts' model, or NULL */
	int n_models;
	char device_names[RG_SERVE_MAX_DEVICES][16]; /* (n_models) "cuda:1", "cpu:0": /info, metrics */
	const rg_model_info *info; /* the model's, or embed_info */
	rg_model_info embed_info; /* a decoder with sentence-transformers pooling (rg_model_embeds,
				   * issue 31) is served as an embedding model: its info with kind
				   * RG_MODEL_ENCODER, so that the routes, the prompts and the batch
				   * engine treat it as one (generation routes answer 400) */
	rg_engine *engine;       /* encoders: the batch engine; NULL for a decoder */
	struct rg_gen_srv *gen; /* decoders: the generation engine (engine_gen.h), else NULL */
	bool decoder;            /* the model generates: a decoder or an encoder-decoder (rg_model_info
				  * .kind RG_MODEL_DECODER / RG_MODEL_ENC_DEC), served by the generation
				  * engine */
	const char *chat_family; /* decoders: the chat template's family ("chatml", ...), NULL when
				  * none or unknown (the chat route answers 400 then) */
	char chat_unknown[160];  /* why chat_family is NULL (rg_model_chat_family's error) */
	int32_t fim[3];          /* decoders: the vocabulary's fill-in-the-middle tokens (prefix,
				  * suffix, middle: StarCoder / SmolLM's <fim_prefix>..., Qwen2.5-Coder's
				  * <|fim_prefix|>...), -1 each when it has none (rg_fim_tokens) */
	rg_cache *cache;
	rg_cost_table *cost;     /* DP: the stored table loaded at start, else NULL */
	struct rg_cost_measure *measure; /* DP without a stored table: measured in the
				  * background by the engine (warmup.h); freed after it */
	rg_metrics metrics;      /* front's: every model's requests and batches (the others'
				  * unused) */
	rg_sched_kind kind;
	rg_req_limits lim;
	int max_len;             /* longest sequence accepted (model and scheduler) */
	atomic_bool ready;
	atomic_bool stopping;
	atomic_int n_suspended;  /* connections suspended and not yet answered */
	int port;
	/* --accept balanced: the listening socket is ragged's, accepted by one thread that hands
	 * each connection to libmicrohttpd (MHD_add_connection deals them to the HTTP threads by
	 * descriptor, so a burst spreads evenly); -1 with --accept mhd */
	int listen_fd;
	int idle_pair[2];        /* the daemon's own listening socket ([0]) and its silent peer */
	pthread_t acceptor;
	bool acceptor_started;
	atomic_bool accept_stop;
	struct MHD_Daemon *mhd;
	atomic_size_t buffered;  /* front's: request body bytes held by all connections
				  * (--max-buffered-bytes) */
	struct rg_conn_watch *watch; /* the request read deadline (conn_watch.c); the front's,
				  * shared (freed by the front) */
	char fingerprint[65];    /* rg_model_fingerprint hex; "" unless --cache-db or --scheduler dp */
	char model_name[256];    /* /info served_model_name, /v1/models id: --served-model-name,
				  * else model_id */
	char model_id[256];      /* /info model_id: the HF id when known, else the directory's
				  * name (rg_model_id) */
	rg_prompts prompts;      /* config_sentence_transformers.json prompts */
	long long created_s;     /* start time, Unix seconds (/v1/models "created") */
	char allowed_hosts[1024]; /* --allowed-hosts, or its default for --host
				  * (rg_allowed_hosts_default): "*" lets any Host in */
	int max_connections;     /* --max-connections, lowered to fit RLIMIT_NOFILE (server.c) */
	int max_per_ip;          /* the per-address connection limit (rg_serve_per_ip_limit), 0: none */
	bool mhd_layout;         /* libmicrohttpd 0.9.70-0.9.76: its read buffer's layout is known,
				  * rg_header_layout_check and the raw target NUL check apply */
} rg_server;

/* The HTTP side of one request (http.c): the raw target's checks, framing, the body being read
 * against the buffered-bytes budget, an early refusal, and the answer's extra headers. */
typedef struct rg_conn_http {
	bool started;            /* on_headers ran (the URI log callback creates the context) */
	bool target_seen;        /* the URI log callback saw the raw target: the fields below hold */
	const char *target_end;  /* where the raw target's NUL is (its first NUL byte) in MHD's pool;
				  * the version follows one byte later unless the target held a NUL */
	char target_err[96];     /* rg_target_bad's reason, "" when the raw target is fine */
	bool post;
	double t0;               /* first call (headers received), rg_now_ms() */
	rg_buf body;
	bool wants_body;         /* a POST to a route that reads JSON: buffered, else dropped */
	size_t received;         /* body bytes received so far */
	size_t reserved;         /* bytes of srv->buffered this request holds */
	bool reserved_all;       /* reserved by Content-Length before the body came */
	unsigned long long content_length; /* -1 (ULLONG_MAX): none or chunked */
	bool expect_continue;    /* Expect: 100-continue: refusals go out before the body */
	int refused;             /* status decided before the body was read in full; 0: none */
	const char *refused_type;
	char refused_msg[256];
	size_t discarded;        /* body bytes read and dropped after the refusal */
	bool close_after;        /* broken framing: answer with Connection: close */
	int retry_after_s;       /* Retry-After of the answer; a 429/503 sends at least 1 */
	const char *cors_origin; /* Access-Control-Allow-Origin of the answer; NULL: none */
} rg_conn_http;

/* What the embedding routes hold for one request (routes_embed.c, routes_compat.c): the inputs
 * as token ids, the engine job and its outputs. All zero until a handler fills them; freed by
 * rg_embed_conn_free. */
typedef struct rg_embed_state {
	int32_t **ids;           /* (n_inputs) token ids per input; owned unless it is req's */
	size_t *n_ids;           /* (n_inputs) */
	int32_t **types;         /* (n_inputs) token types of pair inputs (owned), NULL entries else */
	float *emb;              /* (n_inputs, output_dim) model outputs (embeddings or scores) */
	rg_job_seq *seqs;        /* (n_inputs) uncached inputs */
	rg_job job;
	size_t prompt_tokens;
	float *hidden;           /* /embed_all: (sum of n_ids, hidden_size) per-token outputs */
	size_t answer_reserved;  /* bytes of srv->buffered this request's answer holds (/embed_all) */
	char **texts;            /* (n_inputs) prompted texts (owned), NULL entries when unprompted */
	size_t *text_lens;       /* (n_inputs) */
	rg_encoding *encs;       /* (n_inputs) /tokenize: the encodings (owned) */
	rg_http_error submit_error; /* the answer after a failed submit; code 0 when none */
	char submit_err[256];
} rg_embed_state;

/* Per-connection (per HTTP request) state, MHD's *con_cls: the HTTP framing (http), the route
 * and its parsed request (row, req), and the route's own state (embed). */
typedef struct conn_ctx {
	rg_server *srv;
	struct MHD_Connection *conn;
	rg_conn_http http;
	const rg_route_def *row; /* the route table's row (routes.h); NULL: none (404) */
	const char *path_arg;    /* dispatch: the rest of a "{name}" path (MHD's url), else NULL */
	rg_route route;          /* row->id, RG_ROUTE_OTHER without a row */
	bool openai;             /* OpenAI error shape: /v1/... and the OpenAI route */
	bool suspended;          /* queued in the engine (or resuming to report a submit error) */
	atomic_bool released;    /* the engine made its last access (job_done ran / submit failed) */
	/* called for a suspended connection once resumed (its job ended): the answer */
	enum MHD_Result (*resume)(struct conn_ctx *c);
	rg_request req;          /* the parsed body (rows with a schema) */
	rg_embed_state embed;
	struct rg_gen_conn *gen; /* the generation routes' state (routes_gen.c), NULL else */
} conn_ctx;

/* ---- http.c: the HTTP glue ---- */
/* Answer c with body (taken over) and the content type; the one place answers are queued (adds
 * the timing headers, Allow on 405 and Retry-After on 429 / 503, counts the metrics). */
enum MHD_Result rg_conn_send(conn_ctx *c, int status, rg_buf *body, const char *ctype,
			     double queue_ms, double infer_ms, int batch_size);
/* An error answer: TEI's {"error", "error_type"}, or OpenAI's {"error": {"message", "type",
 * "param", "code"}} when c->openai. param: the offending request field or NULL. */
enum MHD_Result rg_conn_error(conn_ctx *c, int status, const char *type, const char *param,
			      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Answer c with a streamed body (chunked transfer encoding) of media type ctype, produced by
 * reader (MHD's content reader; cls its closure): server-sent events. The status is 200, the
 * guard headers are added; the request's metrics are counted by the caller when it ends. */
enum MHD_Result rg_conn_send_stream(conn_ctx *c, const char *ctype,
				    MHD_ContentReaderCallback reader, void *cls);

/* Give back the request's share of the buffered-bytes budget and its body (read in full). */
void rg_conn_release_body(conn_ctx *c);

/* ---- routes.c: the route table's dispatch ---- */
/* The request has arrived in full (c->row found at the headers, url its path): 404 / 405 / 503,
 * the body parsed by the row's schema (c->req), the model kind checked, then the row's handler. */
enum MHD_Result rg_route_dispatch(conn_ctx *c, const char *url, const char *method);

/* ---- routes_embed.c: the embedding routes ---- */
/* Tokenize, look up the cache, queue the rest in the engine (the connection is suspended and
 * answered by c->row->answer when the job ends): /embed, /v1/embeddings, /embed_all,
 * /similarity, /predict, /rerank. */
enum MHD_Result rg_handle_embed(conn_ctx *c);
/* /tokenize: TEI's token objects, no model run. */
enum MHD_Result rg_handle_tokenize(conn_ctx *c);
/* The answers from c->embed.emb: pooled vectors (TEI's list or OpenAI's object), scores
 * (/predict, /rerank). */
enum MHD_Result rg_answer_embeddings(conn_ctx *c, double queue_ms, double infer_ms, int bs);
enum MHD_Result rg_answer_scores(conn_ctx *c, double queue_ms, double infer_ms, int bs);
/* Free what the embedding routes hold in c (token ids, texts, encodings, outputs); not c. */
void rg_embed_conn_free(conn_ctx *c);

/* ---- routes_compat.c: TEI's and OpenAI's other routes and shapes ---- */
/* The prompt text a request asks for (its prompt_name, else the file's default), NULL for none;
 * *ret set and true when an unknown name was answered 400. */
bool rg_request_prompt(conn_ctx *c, const char **prompt, enum MHD_Result *ret);
enum MHD_Result rg_answer_tokenize(conn_ctx *c);
enum MHD_Result rg_answer_decode(conn_ctx *c);
enum MHD_Result rg_answer_embed_all(conn_ctx *c, double queue_ms, double infer_ms, int bs);
/* The memory an /embed_all answer holds until it is sent: the (rows, hidden) float32 vectors and
 * the JSON buffer rg_answer_embed_all reserves for n_inputs inputs of rows tokens in all (17
 * bytes a float: "%.9g", a comma, rg_buf_float_array's slack; rounded up as rg_buf grows). */
size_t rg_embed_all_answer_bytes(size_t rows, size_t n_inputs, size_t hidden);
enum MHD_Result rg_answer_similarity(conn_ctx *c, double queue_ms, double infer_ms, int bs);
enum MHD_Result rg_answer_info(conn_ctx *c);
/* Append the RAGGED_* tuning switches (the library's rows: rg_tuning_describe, not verbose) to
 * an /info answer as one JSON object; b->oom when that cannot be had. */
void rg_info_put_tuning(rg_buf *b);
enum MHD_Result rg_answer_models(conn_ctx *c);
/* GET /v1/models/{id}: the model object when id is the served name, else OpenAI's 404. */
enum MHD_Result rg_answer_model(conn_ctx *c, const char *id);
/* Whether a request's "model" names the served model, as vLLM checks it: one of
 * --served-model-name's comma-separated names, the model id (/info model_id), --model as given,
 * or the model's directory. NULL (no "model" field) is accepted, and so are "dummy" and "tgi",
 * the placeholders huggingface_hub's InferenceClient sends when it is given a URL. */
bool rg_model_served(const rg_server *s, const char *name);
/* /info's model_sha (TEI's and TGI's): --revision when given (TEI reports its argument), else
 * the revision of a hub cache snapshot served (.../models--org--name/snapshots/<sha>), else
 * null; as JSON into b. */
void rg_info_put_model_sha(rg_buf *b, const rg_server *s);
/* rg_model_served, else the 404 model_not_found answer in *ret (OpenAI's error shape on the
 * OpenAI routes) and true. */
bool rg_refuse_model(conn_ctx *c, const char *name, enum MHD_Result *ret);
/* The model (of front's served ones) that name names (rg_model_served, in --model order), NULL
 * when none; NULL name: the first model. */
rg_server *rg_served_find(rg_server *front, const char *name);
/* /info's "models": every model served, as [{"id", "aliases", "model_id", "kind",
 * "max_input_length", and its budgets: "max_batch_tokens", "max_batch_requests", "max_inputs"
 * (encoders) or "max_num_seqs", "max_num_batched_tokens", "kv_cache_bytes" (decoders)}], into b. */
void rg_info_put_models(rg_buf *b, const rg_server *s);
enum MHD_Result rg_answer_openapi(conn_ctx *c);

/* ---- routes_gen.c: the generation routes (decoder models) ---- */
/* OpenAI's /v1/completions and /v1/chat/completions, TGI's /generate and /generate_stream (and
 * TGI's POST / by the model's kind): parse, tokenize (chat: the model's template), submit to
 * the generation engine, answer whole or as server-sent events. */
enum MHD_Result rg_handle_generate(conn_ctx *c);
/* /tokenize of a decoder (vLLM's {"prompt" | "messages"} shape; TEI's {"inputs"} as for
 * encoders) and /detokenize (vLLM's {"tokens"}). */
enum MHD_Result rg_handle_gen_tokenize(conn_ctx *c);
enum MHD_Result rg_handle_detokenize(conn_ctx *c);
/* /info of a decoder model (TGI's Info fields and ragged's). */
enum MHD_Result rg_answer_gen_info(conn_ctx *c);
/* Free what the generation routes hold in c (its jobs are released, not waited for). */
void rg_gen_conn_free(conn_ctx *c);

/* MHD's access handler (MHD_start_daemon's dh; cls is the rg_server) and its
 * MHD_OPTION_NOTIFY_COMPLETED callback, which frees the per-connection state. */
enum MHD_Result rg_server_on_request(void *cls, struct MHD_Connection *conn, const char *url,
				     const char *method, const char *version,
				     const char *upload_data, size_t *upload_data_size,
				     void **con_cls);
/* MHD_OPTION_URI_LOG_CALLBACK (cls: the rg_server): creates the per-request context, which
 * MHD passes on as *con_cls, with the raw target's checks (rg_target_bad, where its NUL is). */
void *rg_server_on_uri(void *cls, const char *uri, struct MHD_Connection *conn);
void rg_server_on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			    enum MHD_RequestTerminationCode toe);
#endif
