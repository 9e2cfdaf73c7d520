/* The table of tuning switches and its accessors (contract in tuning.h). */
#include "core/tuning.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/utf8.h"

static const char *const isa_values[] = {"auto", "avx512", "avx2", "generic", NULL};
static const char *const cpu_gemm_values[] = {"onednn", "openblas", NULL};
static const char *const cpu_attn_values[] = {"auto", "openblas", "tiles", NULL};
static const char *const deberta_tc_values[] = {"1", "0", "tables", "attn", NULL};
static const char *const prefill_tc_values[] = {"auto", "0", "fresh", "paged", "1", NULL};

#define BOOL_ROW(id, nm, d, fl, wh, doc) \
	[id] = {nm, RG_TUNE_BOOL, d, NULL, 0, 1, fl, wh, doc}
#define INT_ROW(id, nm, d, l, h, fl, wh, doc) \
	[id] = {nm, RG_TUNE_INT, d, NULL, l, h, fl, wh, doc}
#define ENUM_ROW(id, nm, d, vals, fl, wh, doc) \
	[id] = {nm, RG_TUNE_ENUM, d, vals, 0, 0, fl, wh, doc}
#define TEXT_ROW(id, nm, wh, doc) \
	[id] = {nm, RG_TUNE_TEXT, "", NULL, 0, 0, RG_TUNE_F_LIVE | RG_TUNE_F_CONFIG, wh, doc}

/* Every switch. The docs are what `ragged info` prints and README's "Tuning switches" repeats;
 * keep them one line each, saying what a non-default value does. */
static const rg_tuning_def g_rows[RG_TUNE_COUNT] = {
	/* 256 = RG_POOL_MAX_THREADS (threadpool.c caps a pool there too) */
	INT_ROW(RG_TUNE_NUM_THREADS, "RAGGED_NUM_THREADS", "0", 0, 256, 0, "src/core/threadpool.c",
		"threads of the process-wide CPU pool, the caller included; 0: the CPUs this "
		"process may use (affinity mask, cgroup quota)"),
	INT_ROW(RG_TUNE_SPIN_US, "RAGGED_SPIN_US", "100", 0, 1000000, 0, "src/core/threadpool.c",
		"microseconds a CPU pool worker spins for the next op before it sleeps"),
	ENUM_ROW(RG_TUNE_CPU_ISA, "RAGGED_CPU_ISA", "auto", isa_values, 0, "src/ops/cpu/ops_cpu.c",
		 "CPU kernel table: auto is the widest this CPU runs; avx2 / generic ask for a "
		 "narrower one (never a wider one than the CPU runs)"),
	ENUM_ROW(RG_TUNE_CPU_GEMM, "RAGGED_CPU_GEMM", "onednn", cpu_gemm_values, 0,
		 "src/ops/cpu/gemm_dnnl.c",
		 "CPU linear layers: oneDNN on prepared weights (when the build has it), or "
		 "OpenBLAS on the row-major weights"),
	/* 256 = RG_CPU_SMALLM_MAX (ops/cpu/cpu_kern.h; ops_cpu.c caps there too) */
	INT_ROW(RG_TUNE_CPU_SMALLM, "RAGGED_CPU_SMALLM", "auto", 0, 256, RG_TUNE_F_AUTO,
		"src/ops/cpu/ops_cpu.c",
		"most rows of a CPU GEMM that gemm_blk takes instead of oneDNN; auto: 192 on a pool "
		"of 1-2 threads, 32 on more; 0: off"),
	ENUM_ROW(RG_TUNE_CPU_ATTN, "RAGGED_CPU_ATTN", "auto", cpu_attn_values, 0,
		 "src/ops/cpu/ops_cpu.c",
		 "CPU attention's two products: auto runs the register tiles from head_dim 64 and "
		 "OpenBLAS below; openblas / tiles force one"),
	BOOL_ROW(RG_TUNE_CUDA_GRAPHS, "RAGGED_CUDA_GRAPHS", "1", RG_TUNE_F_LIVE,
		 "src/model/model.c, src/model/decoder.c",
		 "0: run every CUDA forward and decode step eagerly, without CUDA graphs (read at "
		 "each model load)"),
	BOOL_ROW(RG_TUNE_GEMM_AUTOTUNE, "RAGGED_GEMM_AUTOTUNE", "1", 0,
		 "src/ops/cuda/backend.cu, src/ops/cuda/gemm.cu",
		 "0: take cuBLASLt's first heuristic instead of timing its top candidates per GEMM "
		 "shape"),
	BOOL_ROW(RG_TUNE_PDL, "RAGGED_PDL", "1", 0, "src/ops/cuda/backend.cu",
		 "0: launch kernels without programmatic dependent launch (on by default on sm_90+)"),
	BOOL_ROW(RG_TUNE_GEMV, "RAGGED_GEMV", "1", 0, "src/ops/cuda/gemv.cu",
		 "0: decode-sized GEMMs (M <= 16 rows, fp16/bf16) on cuBLASLt instead of ragged's "
		 "small-M tensor-core kernel"),
	BOOL_ROW(RG_TUNE_QMV, "RAGGED_QMV", "1", RG_TUNE_F_LIVE, "src/ops/cuda/qgemv.cu",
		 "0: GGUF-quantized decode GEMMs of M <= 4 rows on the tensor-core dequantizing "
		 "kernel instead of the int8 dp4a kernel (read at every call)"),
	BOOL_ROW(RG_TUNE_GLU_GEMV, "RAGGED_GLU_GEMV", "0", RG_TUNE_F_LIVE, "src/ops/cuda/gemm.cu",
		 "1: a gated MLP's act_mul folded into the loads of the down projection's decode "
		 "GEMM instead of its own kernel (not yet run on a GPU; read at every call)"),
	BOOL_ROW(RG_TUNE_EXACT_GELU, "RAGGED_EXACT_GELU", "0", 0, "src/model/model.c",
		 "1: exact erf GELU as its own pass after a bias-only GEMM instead of cuBLASLt's "
		 "tanh-form epilogue (CUDA fp16/bf16)"),
	BOOL_ROW(RG_TUNE_ATTN_WGMMA, "RAGGED_ATTN_WGMMA", "1", RG_TUNE_F_LIVE,
		 "src/ops/cuda/attention_wgmma.cu",
		 "0: encoder attention on the mma.sync kernel instead of Hopper's wgmma one "
		 "(sm_90a; read at every call)"),
	ENUM_ROW(RG_TUNE_DEBERTA_TC, "RAGGED_DEBERTA_TC", "1", deberta_tc_values, RG_TUNE_F_LIVE,
		 "src/ops/cuda/attention.cu",
		 "DeBERTa on CUDA: 1 both fast paths (cuBLASLt c2p/p2c tables, tensor-core "
		 "attention), 0 neither, tables / attn only that one (read at every call)"),
	ENUM_ROW(RG_TUNE_PREFILL_TC, "RAGGED_PREFILL_TC", "auto", prefill_tc_values, RG_TUNE_F_LIVE,
		 "src/ops/cuda/paged_attention.cu",
		 "decoder prefill attention on tensor cores: auto or 1 (block-table form when a chunk "
		 "has cached keys), 0 off, fresh / paged force a form (read at every call)"),
	BOOL_ROW(RG_TUNE_SAMPLE_FAST, "RAGGED_SAMPLE_FAST", "1", RG_TUNE_F_LIVE,
		 "src/ops/cuda/sample.cu",
		 "0: every sampled row through the one-CTA-per-row sampler instead of the two-stage "
		 "path (greedy rows, top-k <= 64; read at every call)"),
	/* read with getenv in src/gen/engine.c until its rewrite wires these accessors */
	BOOL_ROW(RG_TUNE_GEN_ARGMAX, "RAGGED_GEN_ARGMAX", "1", RG_TUNE_F_LIVE, "src/gen/engine.c",
		 "0: the generation engine's plain greedy rows choose on the host from the logits "
		 "instead of the device argmax"),
	BOOL_ROW(RG_TUNE_GEN_DEVICE_SAMPLE, "RAGGED_GEN_DEVICE_SAMPLE", "1", RG_TUNE_F_LIVE,
		 "src/gen/engine.c",
		 "0: the generation engine's sampled rows and beam searches read whole logits rows "
		 "on the host instead of sampling on the device"),
	BOOL_ROW(RG_TUNE_NO_REEXEC, "RAGGED_NO_REEXEC", "0", 0, "tools/ragged.c",
		 "1: the ragged command does not restart itself with OPENBLAS_CORETYPE set when "
		 "OpenBLAS chose pre-AVX2 kernels (that restart sets it)"),
	TEXT_ROW(RG_TUNE_MODEL, "RAGGED_MODEL", "src/core/model_dir.c, tools/ragged.c",
		 "configuration: the model to load without --model (a directory or a Hugging Face "
		 "id, as --model)"),
	TEXT_ROW(RG_TUNE_MODEL_DIR, "RAGGED_MODEL_DIR", "src/core/model_dir.c",
		 "configuration: the default model's directory, instead of the pip package's"),
};

/* A row's state. loaded / set / value / source are read without the lock (atomics); the first
 * read, an override and a warning take it. */
typedef struct row_state {
	int loaded;      /* read-once rows: the environment has been read */
	int set;         /* rg_tuning_set's override is in force */
	int set_value;
	int value;       /* read-once rows: the value read */
	int source;      /* read-once rows: its rg_tune_source */
	char warned[64]; /* the last bad value warned about (live rows warn once per value) */
} row_state;

static row_state g_state[RG_TUNE_COUNT];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

const rg_tuning_def *rg_tuning_def_of(rg_tune id)
{
	return id >= 0 && id < RG_TUNE_COUNT ? &g_rows[id] : NULL;
}

rg_tune rg_tuning_find(const char *name)
{
	for (int i = 0; name && i < RG_TUNE_COUNT; i++)
		if (!strcmp(g_rows[i].name, name))
			return (rg_tune)i;
	return RG_TUNE_COUNT;
}

const char *rg_tuning_allowed(rg_tune id, char *buf, size_t n)
{
	const rg_tuning_def *d = rg_tuning_def_of(id);
	size_t k = 0;

	if (!n)
		return buf;
	buf[0] = '\0';
	if (!d)
		return buf;
	switch (d->type) {
	case RG_TUNE_BOOL:
		snprintf(buf, n, "0|1");
		break;
	case RG_TUNE_INT:
		snprintf(buf, n, "%d..%d%s", d->lo, d->hi,
			 d->flags & RG_TUNE_F_AUTO ? "|auto" : "");
		break;
	case RG_TUNE_ENUM:
		for (int i = 0; d->values[i] && k < n; i++) {
			int w = snprintf(buf + k, n - k, "%s%s", i ? "|" : "", d->values[i]);

			k += w < 0 ? 0 : (size_t)w;
		}
		break;
	case RG_TUNE_TEXT:
		snprintf(buf, n, "any");
		break;
	}
	return buf;
}

enum parse_result { PARSE_OK, PARSE_CLAMPED, PARSE_BAD };

/* text as a value of row d into *v (a bool's 0/1, an int, -1 for "auto", an enum's index). An
 * int outside [lo, hi] is clamped (PARSE_CLAMPED); anything the row does not allow: PARSE_BAD,
 * *v untouched. */
static enum parse_result parse_value(const rg_tuning_def *d, const char *text, int *v)
{
	char *end;
	long x;

	switch (d->type) {
	case RG_TUNE_BOOL:
		if (!strcmp(text, "0") || !strcmp(text, "1")) {
			*v = text[0] == '1';
			return PARSE_OK;
		}
		return PARSE_BAD;
	case RG_TUNE_INT:
		if ((d->flags & RG_TUNE_F_AUTO) && !strcmp(text, "auto")) {
			*v = -1;
			return PARSE_OK;
		}
		errno = 0;
		x = strtol(text, &end, 10);
		if (end == text || *end)
			return PARSE_BAD;
		if (errno == ERANGE || x < d->lo || x > d->hi) {
			*v = x < d->lo ? d->lo : d->hi;
			return PARSE_CLAMPED;
		}
		*v = (int)x;
		return PARSE_OK;
	case RG_TUNE_ENUM:
		for (int i = 0; d->values[i]; i++)
			if (!strcmp(text, d->values[i])) {
				*v = i;
				return PARSE_OK;
			}
		return PARSE_BAD;
	case RG_TUNE_TEXT:
		*v = 0;
		return PARSE_OK;
	}
	return PARSE_BAD;
}

static int default_value(const rg_tuning_def *d)
{
	int v = 0;

	(void)parse_value(d, d->def, &v); /* the table's defaults parse (test_tuning checks) */
	return v;
}

/* One warning per distinct bad value of a row (under g_lock). */
static void warn_locked(rg_tune id, const char *text, enum parse_result r, int v)
{
	const rg_tuning_def *d = &g_rows[id];
	row_state *s = &g_state[id];
	char allowed[96];

	if (!strncmp(s->warned, text, sizeof(s->warned) - 1) &&
	    strlen(text) == strlen(s->warned))
		return;
	snprintf(s->warned, sizeof(s->warned), "%s", text);
	rg_tuning_allowed(id, allowed, sizeof(allowed));
	if (r == PARSE_CLAMPED)
		fprintf(stderr, "ragged: warning: %s=%s: outside %s; using %d\n", d->name, text,
			allowed, v);
	else
		fprintf(stderr, "ragged: warning: %s=%s: expected %s; using the default %s\n",
			d->name, text, allowed, d->def[0] ? d->def : "(unset)");
}

/* The environment's value of row id and its source, warning about a bad one. */
static int read_env(rg_tune id, rg_tune_source *src)
{
	const rg_tuning_def *d = &g_rows[id];
	const char *e = getenv(d->name);
	int v = default_value(d);
	enum parse_result r;

	if (!e || !*e) {
		*src = RG_TUNE_SRC_DEFAULT;
		return v;
	}
	r = parse_value(d, e, &v);
	*src = r == PARSE_BAD ? RG_TUNE_SRC_INVALID : RG_TUNE_SRC_ENV;
	if (r != PARSE_OK) {
		pthread_mutex_lock(&g_lock);
		warn_locked(id, e, r, v);
		pthread_mutex_unlock(&g_lock);
	}
	return v;
}

/* Row id's current value and source: the override, else the environment (now for live rows,
 * at the first read for the others). */
static int read_row(rg_tune id, rg_tune_source *src)
{
	row_state *s;
	rg_tune_source dummy;
	int v;

	if (!src)
		src = &dummy;
	if (id < 0 || id >= RG_TUNE_COUNT) {
		*src = RG_TUNE_SRC_DEFAULT;
		return 0;
	}
	s = &g_state[id];
	if (__atomic_load_n(&s->set, __ATOMIC_ACQUIRE)) {
		*src = RG_TUNE_SRC_SET;
		return __atomic_load_n(&s->set_value, __ATOMIC_RELAXED);
	}
	if (g_rows[id].flags & RG_TUNE_F_LIVE)
		return read_env(id, src);
	if (!__atomic_load_n(&s->loaded, __ATOMIC_ACQUIRE)) {
		rg_tune_source from;

		v = read_env(id, &from); /* outside the lock: a warning takes it */
		pthread_mutex_lock(&g_lock);
		if (!s->loaded) {
			__atomic_store_n(&s->value, v, __ATOMIC_RELAXED);
			__atomic_store_n(&s->source, (int)from, __ATOMIC_RELAXED);
			__atomic_store_n(&s->loaded, 1, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&g_lock);
	}
	*src = (rg_tune_source)__atomic_load_n(&s->source, __ATOMIC_RELAXED);
	return __atomic_load_n(&s->value, __ATOMIC_RELAXED);
}

bool rg_tuning_bool(rg_tune id)
{
	return read_row(id, NULL) != 0;
}

int rg_tuning_int(rg_tune id)
{
	return read_row(id, NULL);
}

int rg_tuning_enum(rg_tune id)
{
	return read_row(id, NULL);
}

const char *rg_tuning_str(rg_tune id)
{
	const rg_tuning_def *d = rg_tuning_def_of(id);
	const char *e;
	int v;

	if (!d || d->type == RG_TUNE_INT)
		return NULL;
	if (d->type == RG_TUNE_TEXT) {
		e = getenv(d->name);
		return e && *e ? e : NULL;
	}
	v = read_row(id, NULL);
	return d->type == RG_TUNE_BOOL ? (v ? "1" : "0") : d->values[v];
}

rg_tune_source rg_tuning_source_of(rg_tune id)
{
	const rg_tuning_def *d = rg_tuning_def_of(id);
	rg_tune_source src = RG_TUNE_SRC_DEFAULT;
	const char *e;

	if (!d)
		return src;
	if (d->type == RG_TUNE_TEXT) {
		e = getenv(d->name);
		return e && *e ? RG_TUNE_SRC_ENV : RG_TUNE_SRC_DEFAULT;
	}
	(void)read_row(id, &src);
	return src;
}

rg_status rg_tuning_set(const char *name, const char *value)
{
	rg_tune id = rg_tuning_find(name);
	const rg_tuning_def *d = rg_tuning_def_of(id);
	row_state *s;
	char allowed[96];
	int v = 0;

	if (!d)
		return rg_errorf(RG_ERR_INVALID_INPUT, "tuning: no switch named %s",
				 name ? name : "(null)");
	if (d->flags & RG_TUNE_F_CONFIG)
		return rg_errorf(RG_ERR_INVALID_INPUT, "tuning: %s is configuration, not a switch; "
				 "set the environment variable", d->name);
	s = &g_state[id];
	if (!value) {
		pthread_mutex_lock(&g_lock);
		__atomic_store_n(&s->set, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&s->loaded, 0, __ATOMIC_RELEASE); /* the environment again */
		pthread_mutex_unlock(&g_lock);
		return RG_OK;
	}
	if (parse_value(d, value, &v) != PARSE_OK)
		return rg_errorf(RG_ERR_INVALID_INPUT, "tuning: %s=%s: expected %s", d->name, value,
				 rg_tuning_allowed(id, allowed, sizeof(allowed)));
	pthread_mutex_lock(&g_lock);
	__atomic_store_n(&s->set_value, v, __ATOMIC_RELAXED);
	__atomic_store_n(&s->set, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&g_lock);
	return RG_OK;
}

static const char *source_name(rg_tune_source s)
{
	switch (s) {
	case RG_TUNE_SRC_DEFAULT: return "default";
	case RG_TUNE_SRC_ENV: return "env";
	case RG_TUNE_SRC_INVALID: return "invalid";
	case RG_TUNE_SRC_SET: return "set";
	}
	return "default";
}

static const char *type_name(rg_tune_type t)
{
	switch (t) {
	case RG_TUNE_BOOL: return "bool";
	case RG_TUNE_INT: return "int";
	case RG_TUNE_ENUM: return "enum";
	case RG_TUNE_TEXT: return "text";
	}
	return "text";
}

/* A JSON string of s, or null; bytes that are not UTF-8 (a path in a text row's variable) as
 * U+FFFD, so that the answer stays JSON. */
static void put_str(rg_buf *b, const char *s)
{
	const size_t n = s ? strlen(s) : 0;
	rg_buf t;

	if (!s) {
		rg_buf_puts(b, "null");
		return;
	}
	if (rg_utf8_valid(s, n)) {
		rg_buf_json_str(b, s, n);
		return;
	}
	rg_buf_init(&t);
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		size_t k = rg_utf8_next(s, n, i, &cp);

		rg_buf_put(&t, k ? s + i : "\xef\xbf\xbd", k ? k : 3);
		i += k ? k : 1;
	}
	rg_buf_json_str(b, t.data ? t.data : "", t.len);
	rg_buf_free(&t);
}

static void put_field(rg_buf *b, const char *key, const char *val)
{
	rg_buf_printf(b, ",\"%s\":", key);
	put_str(b, val);
}

/* A row's current value as it would be written in its variable: an int's number (in num, 16
 * bytes) or "auto", a bool's or an enum's word, a text row's value (NULL when unset). */
static const char *row_value(rg_tune id, char *num, size_t n)
{
	const rg_tuning_def *d = &g_rows[id];
	int v;

	if (d->type != RG_TUNE_INT)
		return rg_tuning_str(id);
	v = rg_tuning_int(id);
	if (v < 0 && (d->flags & RG_TUNE_F_AUTO))
		return "auto";
	snprintf(num, n, "%d", v);
	return num;
}

void rg_tuning_json(rg_buf *b, bool verbose)
{
	rg_buf_puts(b, "{");
	for (int i = 0; i < RG_TUNE_COUNT; i++) {
		const rg_tuning_def *d = &g_rows[i];
		rg_tune_source src = rg_tuning_source_of((rg_tune)i);
		char num[16], allowed[96];
		const char *val = row_value((rg_tune)i, num, sizeof(num));

		rg_buf_puts(b, i ? "," : "");
		rg_buf_json_str(b, d->name, strlen(d->name));
		rg_buf_puts(b, ":{\"value\":");
		put_str(b, val);
		put_field(b, "source", source_name(src));
		put_field(b, "default", d->def[0] ? d->def : NULL);
		if (verbose) {
			put_field(b, "type", type_name(d->type));
			put_field(b, "allowed", rg_tuning_allowed((rg_tune)i, allowed,
								  sizeof(allowed)));
			put_field(b, "read", d->flags & RG_TUNE_F_LIVE ? "each use" : "once");
			put_field(b, "kind",
				  d->flags & RG_TUNE_F_CONFIG ? "configuration" : "tuning");
			put_field(b, "where", d->where);
			put_field(b, "doc", d->doc);
		}
		rg_buf_puts(b, "}");
	}
	rg_buf_puts(b, "}");
}

rg_status rg_tuning_describe(bool verbose, char **out)
{
	rg_buf b;

	if (!out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_tuning_describe: out is NULL");
	*out = NULL;
	rg_buf_init(&b);
	rg_tuning_json(&b, verbose);
	if (b.oom || !b.data) {
		rg_buf_free(&b);
		return rg_errorf(RG_ERR_OOM, "rg_tuning_describe: out of memory");
	}
	*out = b.data; /* the buffer's malloc'd, NUL-terminated text, taken */
	return RG_OK;
}

rg_status rg_tuning_get(const char *name, char *buf, size_t n)
{
	const rg_tune id = rg_tuning_find(name);
	const rg_tuning_def *d = rg_tuning_def_of(id);
	char num[16];
	const char *val;
	int k;

	if (!buf || n == 0)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_tuning_get: no buffer");
	buf[0] = '\0';
	if (!d)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_tuning_get: no tuning switch named %s",
				 name ? name : "(null)");
	val = row_value(id, num, sizeof(num));
	k = snprintf(buf, n, "%s", val ? val : "");
	if (k < 0 || (size_t)k >= n) {
		buf[0] = '\0';
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_tuning_get: %s's value is longer than %zu "
				 "bytes", d->name, n - 1);
	}
	return RG_OK;
}
