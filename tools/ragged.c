/* The `ragged` command: embed, tokenize, info, serve, loadgen.
 *
 *   ragged embed    [--model DIR] [--device cpu|cuda] [--dtype fp32|fp16|bf16]
 *                   [--max-batch-tokens N] [--truncate] [--input FILE] [--output FILE]
 *   ragged tokenize [--model DIR] [--truncate] [--input FILE] [--output FILE]
 *   ragged info     [--model DIR]
 *   ragged serve    ...   (see `ragged serve --help`)
 *   ragged loadgen  ...   (see `ragged loadgen --help`)
 *
 * embed/tokenize read one UTF-8 text per input line (stdin by default; a trailing "\r" is dropped) and
 * write one JSON array per line, in input order. Every input line is read and tokenized before any
 * output is written, so an error (invalid UTF-8 on line N, a text too long) leaves no partial output.
 * Every error prints one line to stderr and exits non-zero: 2 for usage, 1 otherwise. */
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loadgen/loadgen.h"
#include "ops/cpu/ops_cpu.h"
#include "ragged.h"
#include "server/serve.h"

#define EXIT_USAGE 2

typedef struct cli_opts {
	const char *model;
	const char *input;
	const char *output;
	rg_device device;
	bool device_set;
	rg_dtype dtype;
	int max_batch_tokens;
	bool truncate;
} cli_opts;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ragged <command> [options]\n"
		"commands:\n"
		"  embed     one UTF-8 text per input line -> one JSON array of floats per line\n"
		"  tokenize  one UTF-8 text per input line -> one JSON array of token ids per line\n"
		"  info      JSON: version, build features, resolved model_dir, model config\n"
		"  serve     HTTP server (TEI /embed, OpenAI /v1/embeddings, /metrics); serve --help\n"
		"  loadgen   open-loop load generator for a ragged server; loadgen --help\n"
		"options (embed, tokenize, info):\n"
		"  --model DIR            Hugging Face model directory (default: all-MiniLM-L6-v2)\n"
		"  --device cpu|cuda      (default: cuda when a GPU is present, else cpu)\n"
		"  --dtype fp32|fp16|bf16 compute dtype (fp16/bf16 need cuda; default: fp32 on cpu, fp16 on\n"
		"                         cuda, bf16 for a bf16 checkpoint)\n"
		"  --max-batch-tokens N   tokens packed per batch (default 16384)\n"
		"  --truncate             cut texts longer than the model's max_seq_len\n"
		"  --input FILE           read texts from FILE (default stdin)\n"
		"  --output FILE          write results to FILE (default stdout)\n");
}

static int fail(const char *what)
{
	fprintf(stderr, "ragged: %s: %s\n", what, rg_last_error());
	return EXIT_FAILURE;
}

static int parse_opts(int argc, char **argv, cli_opts *o)
{
	o->device = RG_DEVICE_CPU;
	o->dtype = RG_DTYPE_AUTO;
	o->max_batch_tokens = 16384;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		bool takes = true;

		if (!strcmp(a, "--truncate")) {
			o->truncate = true;
			continue;
		}
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			exit(0);
		}
		if (strcmp(a, "--model") && strcmp(a, "--input") && strcmp(a, "--output") &&
		    strcmp(a, "--device") && strcmp(a, "--dtype") && strcmp(a, "--max-batch-tokens"))
			takes = false;
		if (!takes) {
			fprintf(stderr, "ragged %s: unknown option '%s' (see ragged --help)\n", argv[0],
				a);
			return EXIT_USAGE;
		}
		if (!v) {
			fprintf(stderr, "ragged %s: option %s needs a value\n", argv[0], a);
			return EXIT_USAGE;
		}
		i++;
		if (!strcmp(a, "--model")) {
			o->model = v;
		} else if (!strcmp(a, "--input")) {
			o->input = v;
		} else if (!strcmp(a, "--output")) {
			o->output = v;
		} else if (!strcmp(a, "--device")) {
			if (rg_device_parse(v, &o->device) != RG_OK) {
				fprintf(stderr, "ragged %s: --device must be cpu or cuda, not '%s'\n",
					argv[0], v);
				return EXIT_USAGE;
			}
			o->device_set = true;
		} else if (!strcmp(a, "--dtype")) {
			if (rg_dtype_parse(v, &o->dtype) != RG_OK) {
				fprintf(stderr,
					"ragged %s: --dtype must be fp32, fp16, bf16 or auto, not '%s'\n",
					argv[0], v);
				return EXIT_USAGE;
			}
		} else {
			char *end;
			long n;

			errno = 0;
			n = strtol(v, &end, 10);
			if (errno || *end || n < 1 || n > (1L << 24)) {
				fprintf(stderr,
					"ragged %s: --max-batch-tokens must be an integer in [1, 16777216], "
					"not '%s'\n",
					argv[0], v);
				return EXIT_USAGE;
			}
			o->max_batch_tokens = (int)n;
		}
	}
	if (!o->device_set && rg_cuda_device_count() > 0)
		o->device = RG_DEVICE_CUDA;
	return 0;
}

/* Resolve --model or the default model into buf. */
static int resolve_model(const cli_opts *o, char *buf, size_t buflen)
{
	if (o->model) {
		if (strlen(o->model) + 1 > buflen) {
			fprintf(stderr, "ragged: --model path is too long\n");
			return EXIT_USAGE;
		}
		strcpy(buf, o->model);
		return 0;
	}
	if (rg_default_model_dir(buf, buflen) != RG_OK)
		return fail("default model");
	return 0;
}

typedef struct text_list {
	char **text;
	size_t *len;
	size_t n, cap;
} text_list;

static void text_list_free(text_list *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->text[i]);
	free(t->text);
	free(t->len);
}

/* Reads every line of f. Returns 0, or prints an error and returns non-zero. */
static int read_lines(FILE *f, const char *name, text_list *t)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t got;

	while ((got = getline(&line, &cap, f)) >= 0) {
		size_t len = (size_t)got;

		if (len && line[len - 1] == '\n')
			len--;
		if (len && line[len - 1] == '\r')
			len--;
		if (t->n == t->cap) {
			size_t nc = t->cap ? 2 * t->cap : 1024;
			char **nt = realloc(t->text, nc * sizeof(*nt));
			size_t *nl;

			if (!nt)
				goto out_oom;
			t->text = nt;
			nl = realloc(t->len, nc * sizeof(*nl));
			if (!nl)
				goto out_oom;
			t->len = nl;
			t->cap = nc;
		}
		t->text[t->n] = malloc(len + 1);
		if (!t->text[t->n])
			goto out_oom;
		memcpy(t->text[t->n], line, len);
		t->text[t->n][len] = '\0';
		t->len[t->n] = len;
		t->n++;
	}
	free(line);
	if (ferror(f)) {
		fprintf(stderr, "ragged: cannot read %s: %s\n", name, strerror(errno));
		return EXIT_FAILURE;
	}
	return 0;
out_oom:
	free(line);
	fprintf(stderr, "ragged: out of memory reading %s\n", name);
	return EXIT_FAILURE;
}

/* Tokenize every text; on failure name the 1-based line. ids[i] malloc'd. */
static int tokenize_all(const rg_model *m, const text_list *t, bool truncate, int32_t ***ids_out,
			size_t **n_out)
{
	int32_t **ids = calloc(t->n ? t->n : 1, sizeof(*ids));
	size_t *n = calloc(t->n ? t->n : 1, sizeof(*n));

	if (!ids || !n) {
		free(ids);
		free(n);
		fprintf(stderr, "ragged: out of memory\n");
		return EXIT_FAILURE;
	}
	for (size_t i = 0; i < t->n; i++) {
		if (rg_model_tokenize(m, t->text[i], t->len[i], truncate, &ids[i], &n[i]) !=
		    RG_OK) {
			fprintf(stderr, "ragged: input line %zu: %s\n", i + 1, rg_last_error());
			for (size_t j = 0; j < i; j++)
				free(ids[j]);
			free(ids);
			free(n);
			return EXIT_FAILURE;
		}
	}
	*ids_out = ids;
	*n_out = n;
	return 0;
}

static int open_io(const cli_opts *o, FILE **in, FILE **out)
{
	*in = stdin;
	*out = stdout;
	if (o->input && !(*in = fopen(o->input, "rb"))) {
		fprintf(stderr, "ragged: cannot open --input %s: %s\n", o->input, strerror(errno));
		return EXIT_FAILURE;
	}
	if (o->output && !(*out = fopen(o->output, "wb"))) {
		fprintf(stderr, "ragged: cannot open --output %s: %s\n", o->output, strerror(errno));
		if (*in != stdin)
			fclose(*in);
		return EXIT_FAILURE;
	}
	return 0;
}

static int close_io(FILE *in, FILE *out, int rc)
{
	if (in != stdin)
		fclose(in);
	if (fflush(out) != 0 && rc == 0) {
		fprintf(stderr, "ragged: cannot write output: %s\n", strerror(errno));
		rc = EXIT_FAILURE;
	}
	if (out != stdout && fclose(out) != 0 && rc == 0)
		rc = EXIT_FAILURE;
	return rc;
}

/* Pack consecutive texts into batches of at most max_batch_tokens tokens, embed, print. */
static int embed_batches(rg_model *m, int32_t **ids, const size_t *n, size_t n_text, int max_tokens,
			 FILE *out)
{
	const rg_model_info *info = rg_model_get_info(m);
	int H = info->output_dim; /* an embedding, or a classifier's raw scores */
	int32_t *tokens = malloc((size_t)max_tokens * sizeof(*tokens));
	int32_t *cu = malloc(((size_t)max_tokens + 1) * sizeof(*cu));
	float *emb = malloc((size_t)max_tokens * (size_t)H * sizeof(*emb));
	int rc = EXIT_FAILURE;
	size_t i = 0;

	if (!tokens || !cu || !emb) {
		fprintf(stderr, "ragged: out of memory for a batch of %d tokens\n", max_tokens);
		goto out_free;
	}
	while (i < n_text) {
		size_t first = i;
		int n_seq = 0, n_tok = 0;

		if (n[i] > (size_t)max_tokens) {
			fprintf(stderr,
				"ragged: input line %zu has %zu tokens, more than --max-batch-tokens "
				"%d\n",
				i + 1, n[i], max_tokens);
			goto out_free;
		}
		cu[0] = 0;
		while (i < n_text && n_tok + (int)n[i] <= max_tokens) {
			memcpy(tokens + n_tok, ids[i], n[i] * sizeof(*tokens));
			n_tok += (int)n[i];
			cu[++n_seq] = n_tok;
			i++;
		}
		if (rg_model_embed(m, tokens, cu, n_seq, emb) != RG_OK) {
			fprintf(stderr, "ragged: embedding lines %zu-%zu: %s\n", first + 1, i,
				rg_last_error());
			goto out_free;
		}
		for (int s = 0; s < n_seq; s++) {
			const float *row = emb + (size_t)s * (size_t)H;

			fputc('[', out);
			for (int h = 0; h < H; h++)
				fprintf(out, h ? ",%.9g" : "%.9g", row[h]);
			fputs("]\n", out);
		}
	}
	rc = 0;
out_free:
	free(tokens);
	free(cu);
	free(emb);
	return rc;
}

static int cmd_embed_or_tokenize(int argc, char **argv, bool embed)
{
	cli_opts o = {0};
	char dir[4096];
	rg_model_params p;
	rg_model *m;
	text_list t = {0};
	int32_t **ids = NULL;
	size_t *n = NULL;
	FILE *in, *out;
	int rc;

	if ((rc = parse_opts(argc, argv, &o)) != 0)
		return rc;
	if ((rc = resolve_model(&o, dir, sizeof(dir))) != 0)
		return rc;
	p = rg_model_params_default();
	p.device = embed ? o.device : RG_DEVICE_CPU;
	p.dtype = embed ? o.dtype : RG_DTYPE_AUTO;
	p.max_batch_tokens = o.max_batch_tokens;
	if ((rc = open_io(&o, &in, &out)) != 0)
		return rc;
	m = rg_model_load(dir, &p, NULL);
	if (!m) {
		rc = fail("cannot load model");
		goto out_close;
	}
	if ((rc = read_lines(in, o.input ? o.input : "stdin", &t)) != 0)
		goto out_free_model;
	if (t.n == 0) {
		fprintf(stderr, "ragged: empty input: expected one text per line\n");
		rc = EXIT_FAILURE;
		goto out_free_text;
	}
	if ((rc = tokenize_all(m, &t, o.truncate, &ids, &n)) != 0)
		goto out_free_text;
	if (embed) {
		rc = embed_batches(m, ids, n, t.n, o.max_batch_tokens, out);
	} else {
		for (size_t i = 0; i < t.n; i++) {
			fputc('[', out);
			for (size_t k = 0; k < n[i]; k++)
				fprintf(out, k ? ",%d" : "%d", ids[i][k]);
			fputs("]\n", out);
		}
	}
	for (size_t i = 0; i < t.n; i++)
		free(ids[i]);
	free(ids);
	free(n);
out_free_text:
	text_list_free(&t);
out_free_model:
	rg_model_free(m);
out_close:
	return close_io(in, out, rc);
}

/* `ragged info`: the build, and the model as the library loads it (public API only). */
static int cmd_info(int argc, char **argv)
{
	cli_opts o = {0};
	char dir[4096];
	rg_model_params p = rg_model_params_default();
	const rg_model_info *i;
	json_object *root, *build, *archs, *model;
	rg_model *m;
	rg_status st;
	int rc;

	if ((rc = parse_opts(argc, argv, &o)) != 0)
		return rc;
	if ((rc = resolve_model(&o, dir, sizeof(dir))) != 0)
		return rc;
	p.device = o.device;
	p.dtype = o.dtype;
	p.max_batch_tokens = 512; /* only the weights are wanted: a small activation arena */
	m = rg_model_load(dir, &p, &st);
	if (!m)
		return fail("cannot load the model");
	i = rg_model_get_info(m);

	root = json_object_new_object();
	json_object_object_add(root, "version", json_object_new_string(RAGGED_VERSION));
	build = json_object_new_object();
	json_object_object_add(build, "cuda", json_object_new_boolean(rg_build_has_cuda()));
	archs = json_object_new_array();
	{
		char tmp[128];
		char *save = NULL, *tok;

		snprintf(tmp, sizeof(tmp), "%s", rg_build_cuda_archs());
		for (tok = strtok_r(tmp, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			json_object_array_add(archs, json_object_new_string(tok));
	}
	json_object_object_add(build, "cuda_archs", archs);
	json_object_object_add(build, "cuda_devices", json_object_new_int(rg_cuda_device_count()));
	json_object_object_add(build, "default_device",
			       json_object_new_string(rg_device_name(o.device)));
	json_object_object_add(root, "build", build);
	json_object_object_add(root, "model_dir", json_object_new_string(i->model_dir));
	model = json_object_new_object();
	json_object_object_add(model, "model_type", json_object_new_string(i->model_type));
	json_object_object_add(model, "vocab_size", json_object_new_int(i->vocab_size));
	json_object_object_add(model, "hidden_size", json_object_new_int(i->hidden_size));
	json_object_object_add(model, "output_dim", json_object_new_int(i->output_dim));
	json_object_object_add(model, "num_labels", json_object_new_int(i->num_labels));
	json_object_object_add(model, "num_attention_heads",
			       json_object_new_int(i->num_attention_heads));
	json_object_object_add(model, "num_hidden_layers",
			       json_object_new_int(i->num_hidden_layers));
	json_object_object_add(model, "intermediate_size",
			       json_object_new_int(i->intermediate_size));
	json_object_object_add(model, "max_position_embeddings",
			       json_object_new_int(i->max_position_embeddings));
	json_object_object_add(model, "max_seq_len", json_object_new_int(i->max_seq_len));
	json_object_object_add(model, "type_vocab_size", json_object_new_int(i->type_vocab_size));
	json_object_object_add(model, "hidden_act", json_object_new_string(i->hidden_act));
	json_object_object_add(model, "layer_norm_eps", json_object_new_double(i->layer_norm_eps));
	json_object_object_add(model, "pooling", json_object_new_string(rg_pooling_name(i->pooling)));
	json_object_object_add(model, "normalize", json_object_new_boolean(i->normalize));
	json_object_object_add(model, "device", json_object_new_string(rg_device_name(i->device)));
	json_object_object_add(model, "dtype", json_object_new_string(rg_dtype_name(i->dtype)));
	json_object_object_add(root, "model", model);
	puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
							  JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(root);
	rg_model_free(m);
	return 0;
}

/* Debian 12's OpenBLAS (0.3.21) does not recognise some AVX-512 CPUs (Sapphire Rapids) and runs
 * its SSE kernels there, 6x slower per core. It reads OPENBLAS_CORETYPE only at load time, so when
 * the variable is unset and the kernels are the wrong ones, re-execute once with it set. */
static void maybe_fix_blas_coretype(char **argv)
{
	const char *fix;

	if (getenv("OPENBLAS_CORETYPE") || getenv("RAGGED_NO_REEXEC"))
		return;
	fix = rg_cpu_blas_coretype_fix();
	if (!fix)
		return;
	fprintf(stderr, "ragged: OpenBLAS chose its %s kernels on this %s CPU; restarting with "
		"OPENBLAS_CORETYPE=%s\n", rg_cpu_blas_core(), rg_cpu_isa(), fix);
	setenv("OPENBLAS_CORETYPE", fix, 1);
	setenv("RAGGED_NO_REEXEC", "1", 1);
	fflush(NULL);
	execv("/proc/self/exe", argv);
	/* exec failed: go on with the slow kernels */
}

int main(int argc, char **argv)
{
	maybe_fix_blas_coretype(argv);
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_USAGE : 0;
	}
	if (!strcmp(argv[1], "--version")) {
		puts(RAGGED_VERSION);
		return 0;
	}
	if (!strcmp(argv[1], "embed"))
		return cmd_embed_or_tokenize(argc - 1, argv + 1, true);
	if (!strcmp(argv[1], "tokenize"))
		return cmd_embed_or_tokenize(argc - 1, argv + 1, false);
	if (!strcmp(argv[1], "info"))
		return cmd_info(argc - 1, argv + 1);
	if (!strcmp(argv[1], "serve"))
		return rg_serve_main(argc - 1, argv + 1);
	if (!strcmp(argv[1], "loadgen"))
		return rg_loadgen_main(argc - 1, argv + 1);
	fprintf(stderr, "ragged: unknown command '%s' (see ragged --help)\n", argv[1]);
	return EXIT_USAGE;
}
