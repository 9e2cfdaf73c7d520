/* The server's route table (app/server/routes.h): dispatch by path, method and model kind as TEI
 * routes (POST / by the model's kind), the {name} path segment, the Allow and 404 texts derived
 * from the rows, the metrics names and TEI metric groups, and the /openapi.json document
 * generated from the rows: valid JSON (json-c), OpenAPI 3, every row's path and method
 * described, every $ref resolving. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <json-c/json.h>

#include "server/routes.h"

static const rg_route_def *find(const char *path, const char *method, unsigned kind,
				const char **arg)
{
	const char *a;

	return rg_route_find(path, method, kind, arg ? arg : &a);
}

static void test_find_exact_and_methods(void **state)
{
	const rg_route_def *r;

	(void)state;
	r = find("/embed", "POST", RG_KIND_EMBEDDING, NULL);
	assert_non_null(r);
	assert_int_equal(r->id, RG_ROUTE_EMBED);
	assert_non_null(r->schema);
	/* a wrong method still finds the row (405 with its Allow) */
	r = find("/embed", "GET", RG_KIND_EMBEDDING, NULL);
	assert_non_null(r);
	assert_false(r->methods & RG_METHOD_GET);
	assert_string_equal(rg_route_allow(r), "POST");
	r = find("/health", "HEAD", 0, NULL);
	assert_int_equal(r->id, RG_ROUTE_HEALTH);
	assert_string_equal(rg_route_allow(r), "GET, HEAD");
	assert_true(r->public_route);
	assert_int_equal(find("/ping", "GET", 0, NULL)->id, RG_ROUTE_HEALTH);
	assert_int_equal(find("/embeddings", "POST", 0, NULL)->id, RG_ROUTE_OPENAI);
	assert_true(find("/v1/embeddings", "POST", 0, NULL)->openai);
	assert_false(find("/embed", "POST", 0, NULL)->openai);
	assert_true(find("/metrics", "GET", 0, NULL)->before_ready);
	assert_false(find("/info", "GET", 0, NULL)->before_ready);
	assert_null(find("/nope", "GET", 0, NULL));
	assert_null(find("/embed/", "POST", 0, NULL));
	assert_null(find("", "GET", 0, NULL));
}

static void test_root_by_kind(void **state)
{
	(void)state;
	/* TEI: GET / is a health check; POST / and /invocations go by what the model computes */
	assert_int_equal(find("/", "GET", RG_KIND_EMBEDDING, NULL)->id, RG_ROUTE_HEALTH);
	assert_int_equal(find("/", "POST", RG_KIND_EMBEDDING, NULL)->id, RG_ROUTE_EMBED);
	assert_int_equal(find("/", "POST", 0, NULL)->id, RG_ROUTE_EMBED); /* not loaded yet */
	assert_int_equal(find("/", "POST", RG_KIND_RERANKER, NULL)->id, RG_ROUTE_RERANK);
	assert_int_equal(find("/", "POST", RG_KIND_CLASSIFIER, NULL)->id, RG_ROUTE_PREDICT);
	assert_int_equal(find("/invocations", "POST", RG_KIND_RERANKER, NULL)->id,
			 RG_ROUTE_RERANK);
	/* the resolved row is the served route's: its handler and path */
	assert_string_equal(find("/invocations", "POST", RG_KIND_CLASSIFIER, NULL)->path,
			    "/predict");
	/* another method on /invocations: the POST route, answered 405 with Allow: POST */
	assert_string_equal(rg_route_allow(find("/invocations", "PUT", 0, NULL)), "POST");
	assert_int_equal(rg_route_kind_of(0), RG_KIND_EMBEDDING);
	assert_int_equal(rg_route_kind_of(1), RG_KIND_RERANKER);
	assert_int_equal(rg_route_kind_of(3), RG_KIND_CLASSIFIER);
}

static void test_path_argument(void **state)
{
	const char *arg = NULL;
	const rg_route_def *r = find("/v1/models/my-model", "GET", 0, &arg);

	(void)state;
	assert_non_null(r);
	assert_int_equal(r->id, RG_ROUTE_MODEL);
	assert_string_equal(arg, "my-model");
	r = find("/v1/models", "GET", 0, &arg);
	assert_int_equal(r->id, RG_ROUTE_MODELS);
	assert_null(arg);
	assert_null(find("/v1/models/", "GET", 0, NULL)); /* an empty id is no route */
}

static void test_names_and_list(void **state)
{
	size_t n;
	const rg_route_def *t = rg_routes(&n);
	char list[1024];

	(void)state;
	assert_true(n > 0);
	assert_string_equal(rg_route_name(RG_ROUTE_EMBED), "embed");
	assert_string_equal(rg_route_name(RG_ROUTE_OPENAI), "v1_embeddings");
	assert_string_equal(rg_route_name(RG_ROUTE_MODELS), "v1_models");
	assert_string_equal(rg_route_name(RG_ROUTE_OTHER), "other");
	rg_routes_list(list, sizeof(list));
	for (size_t i = 0; i < n; i++) {
		/* rows of one route agree on its metrics name; each row can be served */
		assert_string_equal(t[i].name, rg_route_name(t[i].id));
		assert_true(t[i].by_kind || t[i].handle);
		assert_true(!t[i].schema || (t[i].methods & RG_METHOD_POST));
		assert_non_null(t[i].summary);
		assert_non_null(t[i].ok_schema);
		assert_non_null(strstr(list, t[i].path));
	}
	/* every route id below OTHER has a row (the metrics render them all) */
	for (int id = 0; id < RG_ROUTE_OTHER; id++)
		assert_string_not_equal(rg_route_name((rg_route)id), "other");
}

static void test_metrics_from_rows(void **state)
{
	static const rg_route runs[] = {RG_ROUTE_EMBED, RG_ROUTE_OPENAI, RG_ROUTE_PREDICT,
					RG_ROUTE_RERANK, RG_ROUTE_EMBED_ALL, RG_ROUTE_SIMILARITY};
	static const rg_route no_run[] = {RG_ROUTE_TOKENIZE, RG_ROUTE_DECODE, RG_ROUTE_HEALTH,
					  RG_ROUTE_INFO, RG_ROUTE_METRICS, RG_ROUTE_MODELS,
					  RG_ROUTE_OPENAPI, RG_ROUTE_MODEL, RG_ROUTE_OTHER};

	(void)state;
	/* the routes that run the model have latency histograms; TEI's router names their counts
	 * te_embed (both embedding shapes), te_embed_all, te_predict, te_rerank, te_similarity */
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		assert_true(rg_route_runs_model(runs[i]));
		assert_non_null(rg_route_tei_metric(runs[i]));
	}
	for (size_t i = 0; i < sizeof(no_run) / sizeof(no_run[0]); i++) {
		assert_false(rg_route_runs_model(no_run[i]));
		assert_null(rg_route_tei_metric(no_run[i]));
	}
	assert_string_equal(rg_route_tei_metric(RG_ROUTE_EMBED), "te_embed");
	assert_string_equal(rg_route_tei_metric(RG_ROUTE_OPENAI), "te_embed");
	assert_string_equal(rg_route_tei_metric(RG_ROUTE_EMBED_ALL), "te_embed_all");
	assert_string_equal(rg_route_tei_metric(RG_ROUTE_PREDICT), "te_predict");
	assert_string_equal(rg_route_tei_metric(RG_ROUTE_RERANK), "te_rerank");
	assert_string_equal(rg_route_tei_metric(RG_ROUTE_SIMILARITY), "te_similarity");
}

/* Whether the JSON pointer ref ("#/components/schemas/X") names a member of doc. */
static bool ref_resolves(json_object *doc, const char *ref)
{
	char buf[256], *save = NULL, *part;
	json_object *o = doc;

	if (strncmp(ref, "#/", 2) || strlen(ref) >= sizeof(buf))
		return false;
	strcpy(buf, ref + 2);
	for (part = strtok_r(buf, "/", &save); part; part = strtok_r(NULL, "/", &save))
		if (!json_object_object_get_ex(o, part, &o))
			return false;
	return true;
}

/* Every "$ref" anywhere under o resolves in doc; counts them. */
static int check_refs(json_object *doc, json_object *o)
{
	int n = 0;

	if (json_object_is_type(o, json_type_array)) {
		for (size_t i = 0; i < json_object_array_length(o); i++)
			n += check_refs(doc, json_object_array_get_idx(o, i));
	} else if (json_object_is_type(o, json_type_object)) {
		json_object_object_foreach(o, key, val) {
			if (!strcmp(key, "$ref")) {
				assert_true(json_object_is_type(val, json_type_string));
				if (!ref_resolves(doc, json_object_get_string(val)))
					fail_msg("unresolved $ref %s", json_object_get_string(val));
				n++;
			} else {
				n += check_refs(doc, val);
			}
		}
	}
	return n;
}

static void test_openapi_from_table(void **state)
{
	rg_buf b;
	json_object *doc, *paths, *v, *op;
	size_t n, n_paths = 0;
	const rg_route_def *t = rg_routes(&n);

	(void)state;
	rg_buf_init(&b);
	rg_openapi_write(&b);
	assert_false(b.oom);
	doc = json_tokener_parse(b.data);
	assert_non_null(doc);
	assert_true(json_object_object_get_ex(doc, "openapi", &v));
	assert_memory_equal(json_object_get_string(v), "3.", 2);
	assert_true(json_object_object_get_ex(doc, "paths", &paths));
	for (size_t i = 0; i < n; i++) {
		json_object *item;

		n_paths += !i || strcmp(t[i].path, t[i - 1].path);
		assert_true(json_object_object_get_ex(paths, t[i].path, &item));
		if (t[i].methods & RG_METHOD_GET)
			assert_true(json_object_object_get_ex(item, "get", &op));
		if (t[i].methods & RG_METHOD_POST) {
			assert_true(json_object_object_get_ex(item, "post", &op));
			if (t[i].schema) {
				char ref[128];

				snprintf(ref, sizeof(ref), "#/components/schemas/%s", t[i].schema);
				assert_true(ref_resolves(doc, ref));
			}
		}
		assert_true(json_object_object_get_ex(op, "responses", &v));
		assert_true(json_object_object_get_ex(v, "200", &v));
		if (t[i].openai && t[i].errors)
			assert_non_null(strstr(json_object_to_json_string(op), "OpenAIE"));
	}
	/* one path item per path, none else */
	assert_int_equal(json_object_object_length(paths), n_paths);
	assert_true(check_refs(doc, doc) > (int)n);
	json_object_put(doc);
	rg_buf_free(&b);
}

/* Issue 20: rows of one path and method serve different kinds (/tokenize: vLLM's shape for a
 * decoder, TEI's for an encoder); TEI's POST / of a decoder is /generate; a wrong method still
 * finds a row (405). */
static void test_find_by_kind(void **state)
{
	const rg_route_def *r;

	(void)state;
	r = find("/tokenize", "POST", RG_KIND_GENERATOR, NULL);
	assert_non_null(r);
	assert_true(r->gen);
	assert_true(r->kinds & RG_KIND_GENERATOR);
	r = find("/tokenize", "POST", RG_KIND_EMBEDDING, NULL);
	assert_non_null(r);
	assert_false(r->gen);
	assert_true(r->kinds & RG_KIND_EMBEDDING);
	r = find("/", "POST", RG_KIND_GENERATOR, NULL);
	assert_non_null(r);
	assert_string_equal(r->path, "/generate");
	r = find("/", "POST", RG_KIND_EMBEDDING, NULL);
	assert_string_equal(r->path, "/embed");
	r = find("/v1/chat/completions", "GET", RG_KIND_GENERATOR, NULL);
	assert_non_null(r);
	assert_string_equal(rg_route_allow(r), "POST");
	r = find("/v1/completions", "POST", RG_KIND_EMBEDDING, NULL);
	assert_non_null(r); /* found; dispatch answers 400 for the model's kind */
	assert_false(r->kinds & RG_KIND_EMBEDDING);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_find_exact_and_methods),
		cmocka_unit_test(test_find_by_kind),
		cmocka_unit_test(test_root_by_kind),
		cmocka_unit_test(test_path_argument),
		cmocka_unit_test(test_names_and_list),
		cmocka_unit_test(test_metrics_from_rows),
		cmocka_unit_test(test_openapi_from_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
