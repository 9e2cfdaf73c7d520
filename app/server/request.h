/* JSON request parsing and response formatting for `ragged serve` (pure functions, no I/O).
 *
 * Parsing is factored out of the HTTP layer so that it can be fuzzed on its own
 * (tests/fuzz/fuzz_request.c): every byte string either parses into an rg_request or yields an
 * rg_req_error with the HTTP status to answer; nothing else can happen.
 */
#ifndef RG_SERVER_REQUEST_H
#define RG_SERVER_REQUEST_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <json-c/json.h>
#include "core/buf.h"
#include "core/utf8.h"
#include "ragged.h"

typedef enum rg_route {
	RG_ROUTE_EMBED = 0,   /* POST /embed; POST / and /invocations of an embedding model (TEI,
			       * which routes those two by the model's kind: /predict for a
			       * classifier, /rerank for a reranker) */
	RG_ROUTE_OPENAI,      /* POST /v1/embeddings  (OpenAI shape) */
	RG_ROUTE_TOKENIZE,    /* POST /tokenize       (TEI: token objects) */
	RG_ROUTE_PREDICT,     /* POST /predict        (TEI shape: sequence classification) */
	RG_ROUTE_RERANK,      /* POST /rerank         (TEI shape: cross-encoder scores) */
	RG_ROUTE_HEALTH,      /* GET /health (and GET /, as TEI; GET /ping, SageMaker's) */
	RG_ROUTE_INFO,        /* GET /info */
	RG_ROUTE_METRICS,     /* GET /metrics */
	RG_ROUTE_EMBED_ALL,   /* POST /embed_all      (TEI: per-token vectors) */
	RG_ROUTE_SIMILARITY,  /* POST /similarity     (TEI: cosine similarities) */
	RG_ROUTE_DECODE,      /* POST /decode         (TEI: ids -> text) */
	RG_ROUTE_MODELS,      /* GET /v1/models       (OpenAI list) */
	RG_ROUTE_OPENAPI,     /* GET /openapi.json */
	RG_ROUTE_MODEL,       /* GET /v1/models/{id}  (OpenAI model object) */
	RG_ROUTE_COMPLETIONS, /* POST /v1/completions (OpenAI; decoders) */
	RG_ROUTE_CHAT,        /* POST /v1/chat/completions (OpenAI; decoders) */
	RG_ROUTE_GENERATE,    /* POST /generate, /generate_stream (TGI; decoders; POST / too) */
	RG_ROUTE_DETOKENIZE,  /* POST /detokenize (vLLM; decoders) */
	RG_ROUTE_TRANSLATE,   /* POST /translate  (encoder-decoders, issue 29) */
	RG_ROUTE_OTHER,       /* anything else (404) */
	RG_ROUTE_COUNT,
} rg_route;

/* Name used in metrics labels ("embed", "v1_embeddings", ...): the route table's (routes.c). */
const char *rg_route_name(rg_route r);

/* One input of a request: either a text (text != NULL) or a token-id array (ids != NULL). */
typedef struct rg_req_input {
	char *text;     /* (len + 1) bytes, valid UTF-8, NUL-terminated copy (may hold inner NULs) */
	size_t len;     /* bytes of text, not counting the terminator */
	int32_t *ids;   /* (n_ids) token ids in [0, vocab_size), used as is (no [CLS]/[SEP] added) */
	size_t n_ids;
	char *text_b;   /* second text of a pair (/predict pairs, /rerank), or NULL; as text */
	size_t len_b;
} rg_req_input;

typedef struct rg_request {
	rg_route route;
	rg_req_input *inputs;  /* (n_inputs), n_inputs >= 1; /similarity: the source sentence
				* first, then the sentences; /decode: id arrays (may be empty) */
	size_t n_inputs;
	bool normalize;        /* default true: L2-normalize the output (see server.c for semantics) */
	bool truncate;         /* default false: cut over-long inputs instead of answering 422 */
	bool truncate_left;    /* "truncation_direction": "left" / "Left" (default right) */
	char *prompt_name;     /* "prompt_name" (TEI; /similarity: parameters.prompt_name), or NULL */
	int dimensions;        /* "dimensions" (Matryoshka truncation), 0 when absent */
	bool base64;           /* OpenAI encoding_format "base64" */
	char *model;           /* OpenAI "model" string (echoed), NULL when absent */
	bool raw_scores;       /* /predict, /rerank: logits instead of softmax / sigmoid */
	bool return_text;      /* /rerank: echo each text */
	bool batch;            /* /predict: inputs was a list of inputs (answer a list of lists) */
	bool add_special_tokens;  /* /tokenize, default true */
	bool skip_special_tokens; /* /decode, default true */
} rg_request;

typedef struct rg_req_limits {
	size_t max_inputs;     /* more inputs -> 413 */
	int vocab_size;        /* token ids must be in [0, vocab_size) */
	int max_depth;         /* JSON nesting limit (json-c tokener depth) */
	bool auto_truncate;    /* "truncate" when a request does not say (TEI's --auto-truncate) */
} rg_req_limits;

typedef struct rg_req_error {
	int http_status;       /* 400, 413 */
	const char *type;      /* "validation", "payload_too_large" (static strings) */
	char msg[256];
	char param[64];        /* the offending field ("input", "dimensions"...), "" when none
				* (OpenAI's error "param") */
} rg_req_error;

/* Parse a JSON body for route EMBED, OPENAI, TOKENIZE, PREDICT, RERANK, EMBED_ALL, SIMILARITY or
 * DECODE. Common fields where the route has them (TEI): "truncate": bool, "truncation_direction":
 * "left" | "right" (or "Left" / "Right"), "prompt_name": str (a name; the server resolves it).
 * EMBED adds "normalize": bool, "dimensions": int >= 1 (the server checks the upper bound), and
 * "encoding_format": "float" only ("base64" is /v1/embeddings'). EMBED_ALL refuses "normalize"
 * and "dimensions" (its vectors are neither). TOKENIZE adds "add_special_tokens": bool.
 * SIMILARITY (TEI): {"inputs": {"source_sentence": str, "sentences": [str]}, "parameters":
 *          {"truncate", "truncation_direction", "prompt_name"} | null}.
 * DECODE (TEI): {"ids": [int] | [[int], ...], "skip_special_tokens": bool}; [int] is one input;
 *          id arrays may be empty; batch = true for a list of lists.
 * The routes below as before; on error err->param names the offending field when there is one.
 * PREDICT (TEI): {"inputs": str | [str] | [str, str] | [[str] | [str, str], ...], "raw_scores":
 *          bool, "truncate": bool}: a string or a list of one or two strings is one input (two:
 *          a sentence pair); a list of such lists is a batch (batch = true).
 * RERANK (TEI): {"query": str, "texts": [str], "raw_scores": bool, "return_text": bool,
 *          "truncate": bool}: one input per text, the pair (query, text).
 * EMBED/EMBED_ALL: {"inputs": str | [str] | [int] | [[int] | str, ...], "normalize": bool,
 *          "truncate": bool}: token-id arrays are inputs as TEI's Input::Ids (used as is).
 * TOKENIZE: {"inputs": str | [str], "add_special_tokens": bool, ...}.
 * OPENAI: {"input": str | [str] | [int] | [[int]], "model": str, "encoding_format": "float"|"base64",
 *          "normalize": bool, "truncate": bool, "user": str, "dimensions": (rejected)}.
 * Unknown keys: a 400 naming the key on OPENAI (OpenAI answers an unknown argument so); ignored on
 * TEI's routes, as TEI's serde structs ignore them. Known keys with a wrong type are a 400. Texts must be valid UTF-8 (after JSON unescaping); empty strings, empty arrays and empty
 * token arrays are a 400; more than lim->max_inputs inputs is a 413.
 * On RG_OK *out owns copies of everything (free with rg_request_free); the body is not retained.
 * On error returns RG_ERR_INVALID_INPUT (or RG_ERR_OOM) and fills *err; *out is left empty. */
rg_status rg_request_parse(rg_route route, const char *body, size_t len, const rg_req_limits *lim,
			   rg_request *out, rg_req_error *err);

/* Free everything rg_request_parse allocated; leaves *r zeroed. Accepts a zeroed request. */
void rg_request_free(rg_request *r);


/* Fill err (HTTP status http, error type, printf message) and return RG_ERR_INVALID_INPUT, or
 * RG_ERR_OOM for status 500: the parsers' one way to fail. rg_req_failp also names the
 * offending field (OpenAI's "param"). */
rg_status rg_req_fail(rg_req_error *err, int http, const char *type, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
rg_status rg_req_failp(rg_req_error *err, const char *param, int http, const char *type,
		       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The checks every JSON body passes before a route's parser reads it: not empty, at most
 * INT32_MAX bytes (413), no \u escape of an unpaired surrogate, one JSON value parsed strictly
 * at most max_depth deep (0: 32), only whitespace after it, and an object. On RG_OK *root is a
 * new reference (json_object_put); on error it is NULL and err says why (400, 413, 500). */
rg_status rg_req_parse_object(const char *body, size_t len, int max_depth,
			      json_object **root, rg_req_error *err);

/* {"error": msg, "error_type": type} (TEI) */
void rg_json_error_body(rg_buf *b, const char *msg, const char *type);
/* {"error": {"message": msg, "type": type, "param": param | null, "code": code | null}}
 * (OpenAI; param / code NULL or "" -> null). */
void rg_json_openai_error_body(rg_buf *b, const char *msg, const char *type, const char *param,
			       const char *code);

#endif
