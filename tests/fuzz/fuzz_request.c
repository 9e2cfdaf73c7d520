/* libFuzzer target for the JSON request parser of `ragged serve` (app/server/request.c).
 * The first input byte picks the route (embed / v1/embeddings / tokenize / predict / rerank /
 * embed_all / similarity / decode) and the limits; the rest
 * is the body. Checks the parser's contract on every input: RG_OK leaves a well-formed request
 * (n_inputs in [1, max_inputs] for arrays, every text valid UTF-8 and non-empty, every id in
 * range), an error leaves a zeroed request and a 400/413/500 status with a message; and the
 * response formatters accept what the parser produced. Build and run: tests/fuzz/run_fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const rg_route routes[8] = { RG_ROUTE_EMBED,	 RG_ROUTE_OPENAI, RG_ROUTE_TOKENIZE,
					    RG_ROUTE_PREDICT,	 RG_ROUTE_RERANK, RG_ROUTE_EMBED_ALL,
					    RG_ROUTE_SIMILARITY, RG_ROUTE_DECODE };
	rg_req_limits lim = { 8, 30522, 16 };
	rg_request req;
	rg_req_error err;
	rg_status st;
	rg_route route;

	if (size < 1)
		return 0;
	route = routes[data[0] % 8];
	lim.max_inputs = 1 + (data[0] >> 3) % 16;
	st = rg_request_parse(route, (const char *)data + 1, size - 1, &lim, &req, &err);
	if (st != RG_OK) {
		if (req.inputs || req.n_inputs || req.model || req.prompt_name)
			abort();
		if (err.http_status != 400 && err.http_status != 413 && err.http_status != 500)
			abort();
		if (!err.msg[0] || !err.type)
			abort();
		return 0;
	}
	if (req.n_inputs < 1 || !req.inputs)
		abort();
	for (size_t i = 0; i < req.n_inputs; i++) {
		const rg_req_input *in = &req.inputs[i];

		if (!in->text == !in->ids) /* exactly one of them */
			abort();
		if (route == RG_ROUTE_DECODE && !in->ids)
			abort();
		if (in->text && (in->len == 0 || !rg_utf8_valid(in->text, in->len) ||
				 in->text[in->len] != '\0'))
			abort();
		if (in->text_b && (route != RG_ROUTE_PREDICT && route != RG_ROUTE_RERANK))
			abort();
		if (route == RG_ROUTE_RERANK && !in->text_b)
			abort();
		if (in->text_b && (in->len_b == 0 || !rg_utf8_valid(in->text_b, in->len_b) ||
				   in->text_b[in->len_b] != '\0'))
			abort();
		if (in->ids) {
			/* token arrays: OpenAI's, /embed's and /embed_all's (TEI's Input::Ids;
			 * non-empty) and /decode's (possibly empty) */
			if ((route != RG_ROUTE_OPENAI && route != RG_ROUTE_EMBED &&
			     route != RG_ROUTE_EMBED_ALL && route != RG_ROUTE_DECODE) ||
			    (route != RG_ROUTE_DECODE && in->n_ids == 0))
				abort();
			for (size_t k = 0; k < in->n_ids; k++)
				if (in->ids[k] < 0 || in->ids[k] >= lim.vocab_size)
					abort();
		}
	}
	if (req.n_inputs > lim.max_inputs && req.n_inputs != 1) /* one [int] array is one input */
		abort();
	if (route == RG_ROUTE_SIMILARITY && req.n_inputs < 2) /* the source and a sentence */
		abort();
	if (req.dimensions < 0 || (req.dimensions && route != RG_ROUTE_EMBED &&
				   route != RG_ROUTE_OPENAI))
		abort();
	if (req.prompt_name && (!req.prompt_name[0] ||
				!rg_utf8_valid(req.prompt_name, strlen(req.prompt_name))))
		abort();
	/* The formatters must take what the parser accepted. */
	{
		rg_buf b;
		float v[4] = { 1.5f, -0.0f, 3e-38f, 1e30f };
		char *msg = malloc(size);

		if (!msg)
			return 0;
		memcpy(msg, data + 1, size - 1);
		msg[size - 1] = '\0';
		rg_buf_init(&b);
		for (size_t i = 0; i < req.n_inputs; i++)
			if (req.inputs[i].text)
				rg_buf_json_str(&b, req.inputs[i].text, req.inputs[i].len);
		if (req.model)
			rg_buf_json_str(&b, req.model, strlen(req.model));
		rg_buf_float_array(&b, v, 4);
		rg_buf_base64(&b, data, size);
		rg_json_error_body(&b, msg, "validation"); /* arbitrary bytes: must stay valid JSON */
		rg_json_openai_error_body(&b, msg, "invalid_request_error", msg, "validation");
		if (b.oom || !rg_utf8_valid(b.data, b.len))
			abort();
		rg_buf_free(&b);
		free(msg);
	}
	rg_request_free(&req);
	return 0;
}
