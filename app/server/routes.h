/* The route table of `ragged serve`: one row per path and method set. Everything the server
 * knows about a route is its row (Redis's command table): dispatch and the 404 / 405 answers
 * (rg_route_find, rg_route_allow, rg_routes_list), whether a body is read and which parser reads
 * it, the model kinds it serves, whether it needs the API key, its metrics (rg_route_name,
 * rg_route_runs_model, rg_route_tei_metric) and its /openapi.json entry (openapi.c rg_openapi_write). A new route is one row in routes.c
 * plus its handler. Not a public header. */
#ifndef RG_SERVER_ROUTES_H
#define RG_SERVER_ROUTES_H
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"
#include "ragged.h"
#include "server/request.h"

struct conn_ctx;

/* Methods a row answers (a bit set). GET includes HEAD. */
enum { RG_METHOD_GET = 1u, RG_METHOD_POST = 2u };

/* What a model computes (a bit set): rows list the kinds they serve. */
enum {
	RG_KIND_EMBEDDING = 1u,  /* pooled embeddings (num_labels 0) */
	RG_KIND_RERANKER = 2u,   /* one score per pair (num_labels 1) */
	RG_KIND_CLASSIFIER = 4u, /* several labels (num_labels > 1) */
	RG_KIND_GENERATOR = 8u,  /* a decoder: generates text (issue 20) */
	RG_KIND_TRANSLATOR = 16u, /* an encoder-decoder: generates text from a source (issue 29) */
	RG_KIND_ENCODER = 7u,    /* every encoder kind */
	RG_KIND_GENERATIVE = 24u, /* both generation kinds: the generation engine serves them */
	RG_KIND_ANY = 31u,
};

typedef struct rg_route_def {
	const char *path;       /* "/embed"; a last segment "{name}" matches any non-empty rest
				 * ("/v1/models/{model}": c->path_arg is the rest) */
	unsigned methods;       /* RG_METHOD_* */
	rg_route id;            /* the route: metrics slot, rg_request_parse's route */
	const char *name;       /* metrics label ("embed", "v1_embeddings"); rows of one id agree */
	/* Answer the request: runs after the checks below, with c->req parsed when schema. */
	enum MHD_Result (*handle)(struct conn_ctx *c);
	/* Answer a request whose model run ended DONE (routes that queue a job), else NULL. */
	enum MHD_Result (*answer)(struct conn_ctx *c, double queue_ms, double infer_ms, int bs);
	const char *schema;     /* POST rows: the JSON body's schema (components/schemas), parsed by
				 * rg_request_parse(id); NULL: no body (one sent is dropped) */
	unsigned kinds;         /* RG_KIND_* the route serves; another kind is answered 400 */
	bool by_kind;           /* served as the kind_default row of the model's kind (TEI's POST /
				 * and SageMaker's /invocations); handle unused */
	bool kind_default;      /* the row a by_kind row resolves to for the kinds it serves (the
				 * first such row in table order: /rerank before /predict) */
	bool public_route;      /* answered without the API key (health checks) */
	bool openai;            /* errors in OpenAI's shape */
	bool gen;               /* a generation row: the handler parses the body itself
				 * (gen_request.h, by gen_api); schema only names it in /openapi.json */
	int gen_api;            /* rg_gen_api of a gen row */
	bool before_ready;      /* answered while the model loads or the server stops (/metrics) */
	const char *tei_metric; /* TEI's metric prefix counting the route ("te_embed"), or NULL */
	/* its /openapi.json entry */
	const char *summary;
	const char *ok_desc;    /* the 200 answer's description; NULL: "OK" */
	const char *ok_type;    /* its media type; NULL: application/json */
	const char *ok_schema;  /* its JSON schema (JSON text) */
	const char *responses;  /* other answers described in place (JSON members), or NULL */
	const char *errors;     /* error statuses described by components/responses ("400 413"),
				 * TEI's or OpenAI's (openai) shape; NULL: none */
	const char *params;     /* the operation's "parameters" (a JSON array), or NULL */
} rg_route_def;

/* The table, *n rows. */
const rg_route_def *rg_routes(size_t *n);
/* The row answering method on path (absolute-form targets already reduced to their path): of
 * the rows with that path and method, the first that serves kind (else the first), after
 * TEI's routing by model kind (kind: RG_KIND_*, 0 before the model is loaded: embedding); when
 * rows match the path but none the method, the last of them (answered 405). *arg: the rest of a
 * "{name}" path, else NULL. NULL: no row (404). */
const rg_route_def *rg_route_find(const char *path, const char *method, unsigned kind,
				  const char **arg);
/* The Allow header value of row ("GET, HEAD", "POST", "GET, HEAD, POST"). */
const char *rg_route_allow(const rg_route_def *row);
/* Every path of the table, space-separated, in table order (the 404 text), into buf[n]. */
void rg_routes_list(char *buf, size_t n);
/* Whether route id runs the model (a row of it has an answer): metrics.c observes its queue,
 * inference and total times. */
bool rg_route_runs_model(rg_route id);
/* TEI's metric prefix of route id (metrics.c's te_* series), NULL for none. */
const char *rg_route_tei_metric(rg_route id);
/* The model kind (RG_KIND_*) of an encoder with num_labels labels. */
unsigned rg_route_kind_of(int num_labels);
/* The model kind of a loaded model: RG_KIND_GENERATOR for a decoder, RG_KIND_TRANSLATOR for an
 * encoder-decoder, else by its labels. */
unsigned rg_route_kind_of_model(const rg_model_info *info);
/* The OpenAPI 3 document of every row (openapi.c), appended to b. */
void rg_openapi_write(rg_buf *b);
#endif
