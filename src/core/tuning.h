/* ragged's tuning switches: one table (tuning.c) of every RAGGED_* environment variable that picks
 * how the library computes -- a kernel, a code path, a thread count -- rather than what a caller
 * asked for (the server's RAGGED_* options are app/server/options.c's table, not these).
 *
 * Each row has a name, a type (bool "0"/"1", an int in a range, one of a list of words, or free
 * text for the configuration rows), a default, the values it allows, the file that reads it and
 * a one-line doc. `ragged info` and the server's /info list every row with its current value and
 * where that value came from; README's "Tuning switches" section lists the same rows
 * (tests/py/test_tuning.py compares the two).
 *
 * Reading. A row is read from the environment either once, at its first access (the CPU kernel
 * and thread switches, the CUDA backend's), or at every access (RG_TUNE_F_LIVE: the ones that
 * tests and benchmarks flip inside one process with setenv / os.environ, and that the code read
 * per call or per model load before this table existed: RAGGED_ATTN_WGMMA, RAGGED_DEBERTA_TC,
 * RAGGED_PREFILL_TC, RAGGED_SAMPLE_FAST, RAGGED_CUDA_GRAPHS, RAGGED_GEN_*). An empty variable
 * counts as unset. A value the row does not allow prints one warning on stderr naming the
 * variable and the allowed values ("ragged: warning: RAGGED_X=v: expected ...; using the
 * default d"), once per distinct bad value, and the default is used; an int outside its range
 * is clamped to it, with a warning, as the code did before the table.
 *
 * Overriding. rg_tuning_set replaces a row's environment with a value for the rest of the process
 * (or until it is cleared): for C tests and benchmarks, and for the test hooks that predate the
 * table (rg_cuda_gemv_set, rg_cuda_attention_wgmma_set). It takes effect at the row's next read by
 * its consumer: every call for the per-call switches, the next model load for RAGGED_CUDA_GRAPHS
 * and RAGGED_EXACT_GELU, the next backend for RAGGED_GEMM_AUTOTUNE / RAGGED_PDL, and never for
 * what is fixed at the first use in a process (the thread pool, the CPU kernel table, the CPU
 * GEMM library).
 *
 * Outside the library. These accessors are the library's own (hidden in libragged.so, and the
 * table's state must be one per process): the ragged binary and other programs read the rows
 * through ragged.h's rg_tuning_describe (the listing) and rg_tuning_get (one row's value).
 *
 * Thread safety: the accessors may be called from any thread; a row's first read takes a mutex,
 * later reads of a read-once row are one atomic load. Live rows call getenv, which races with a
 * concurrent setenv exactly as the direct getenv calls did. */
#ifndef RG_CORE_TUNING_H
#define RG_CORE_TUNING_H
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" { /* the CUDA files include it */
#endif
#include "core/buf.h"
#include "core/export.h"
#include "ragged.h"

/* The rows, in the table's (and the listings') order. */
typedef enum rg_tune {
	/* CPU backend */
	RG_TUNE_NUM_THREADS,
	RG_TUNE_SPIN_US,
	RG_TUNE_CPU_ISA,
	RG_TUNE_CPU_GEMM,
	RG_TUNE_CPU_SMALLM,
	RG_TUNE_CPU_ATTN,
	/* CUDA backend */
	RG_TUNE_CUDA_GRAPHS,
	RG_TUNE_GEMM_AUTOTUNE,
	RG_TUNE_PDL,
	RG_TUNE_GEMV,
	RG_TUNE_QMV,
	RG_TUNE_GLU_GEMV,
	RG_TUNE_EXACT_GELU,
	RG_TUNE_ATTN_WGMMA,
	RG_TUNE_DEBERTA_TC,
	RG_TUNE_PREFILL_TC,
	RG_TUNE_SAMPLE_FAST,
	/* generation */
	RG_TUNE_GEN_ARGMAX,
	RG_TUNE_GEN_DEVICE_SAMPLE,
	/* the ragged command */
	RG_TUNE_NO_REEXEC,
	/* configuration, listed only: src/core/model_dir.c resolves them (README "Models") */
	RG_TUNE_MODEL,
	RG_TUNE_MODEL_DIR,
	RG_TUNE_COUNT
} rg_tune;

/* The words of the enum rows, in the order of their table rows' values (rg_tuning_enum's
 * answer). */
enum { RG_CPU_ISA_AUTO, RG_CPU_ISA_AVX512, RG_CPU_ISA_AVX2, RG_CPU_ISA_GENERIC };
enum { RG_CPU_GEMM_ONEDNN, RG_CPU_GEMM_OPENBLAS };
enum { RG_CPU_ATTN_AUTO, RG_CPU_ATTN_OPENBLAS, RG_CPU_ATTN_TILES };
enum { RG_DEBERTA_TC_ON, RG_DEBERTA_TC_OFF, RG_DEBERTA_TC_TABLES, RG_DEBERTA_TC_ATTN };
enum { RG_PREFILL_TC_AUTO, RG_PREFILL_TC_OFF, RG_PREFILL_TC_FRESH, RG_PREFILL_TC_PAGED,
       RG_PREFILL_TC_ON /* "1": the same as auto (bench/peer/decode_trace.py writes it) */ };

typedef enum rg_tune_type {
	RG_TUNE_BOOL, /* "0" or "1" */
	RG_TUNE_INT,  /* a decimal integer in [lo, hi]; "auto" too with RG_TUNE_F_AUTO */
	RG_TUNE_ENUM, /* one of values[] */
	RG_TUNE_TEXT  /* any text (configuration rows: listed, not parsed) */
} rg_tune_type;

#define RG_TUNE_F_LIVE 1u   /* re-read from the environment at every access */
#define RG_TUNE_F_AUTO 2u   /* an int row that also takes "auto" (rg_tuning_int: -1) */
#define RG_TUNE_F_CONFIG 4u /* configuration, not a tuning switch: listed only */

/* One row. Strings are static. */
typedef struct rg_tuning_def {
	const char *name;           /* "RAGGED_CUDA_GRAPHS" */
	rg_tune_type type;
	const char *def;            /* the default as it would be written: "1", "100", "auto" */
	const char *const *values;  /* RG_TUNE_ENUM: the words, NULL-terminated; else NULL */
	int lo, hi;                 /* RG_TUNE_INT: the range */
	unsigned flags;             /* RG_TUNE_F_* */
	const char *where;          /* the source file(s) that act on it */
	const char *doc;            /* one line: what "0" / the values do */
} rg_tuning_def;

/* Where a row's current value came from. */
typedef enum rg_tune_source {
	RG_TUNE_SRC_DEFAULT, /* the variable is unset (or empty): the default */
	RG_TUNE_SRC_ENV,     /* the variable's value (an out-of-range int: clamped) */
	RG_TUNE_SRC_INVALID, /* set to a value the row does not allow: the default is used */
	RG_TUNE_SRC_SET      /* rg_tuning_set */
} rg_tune_source;

/* The row of id (id in [0, RG_TUNE_COUNT)). */
const rg_tuning_def *rg_tuning_def_of(rg_tune id);

/* The id of the row named name ("RAGGED_PDL"), or RG_TUNE_COUNT when there is none. */
RG_TEST_API rg_tune rg_tuning_find(const char *name);

/* A bool row's value. */
bool rg_tuning_bool(rg_tune id);

/* An int row's value, in [lo, hi], or -1 for "auto"; a bool row's as 0 / 1; an enum row's
 * index into its values (the RG_<ROW>_* constants above). */
int rg_tuning_int(rg_tune id);

/* An enum row's value: the index of its word in values[] (as rg_tuning_int). */
int rg_tuning_enum(rg_tune id);

/* A row's value as text: an enum row's word and a bool's "0" / "1" (static strings); for an int
 * row NULL (use rg_tuning_int); for a text row the variable's value, or NULL when unset (the
 * environment's storage: valid until the variable changes). */
const char *rg_tuning_str(rg_tune id);

/* Where id's current value came from (reads the row, as an accessor does). */
rg_tune_source rg_tuning_source_of(rg_tune id);

/* Tests and benchmarks: make the row named name take value for the rest of the process, whatever
 * the environment says; value NULL drops the override (the environment is read again at the next
 * access). value is checked as an environment value would be, but strictly: a value the row does
 * not allow (or an int out of its range) returns RG_ERR_INVALID_INPUT with the allowed values in
 * rg_last_error() and changes nothing. An unknown name or a configuration row:
 * RG_ERR_INVALID_INPUT. When the override reaches the code is the row's consumer's business (the
 * header comment says which rows read when). */
RG_TEST_API rg_status rg_tuning_set(const char *name, const char *value);

/* Append to b a JSON object of every row, in table order:
 * {"RAGGED_X": {"value": "...", "source": "default|env|invalid|set", "default": "..."}, ...}
 * value is the row's current value as it would be written in the variable (an int's number, an
 * enum's word; a text row's value or null); with verbose, each row also has "type"
 * (bool|int|enum|text), "allowed" ("0|1", "0..256", "auto|0|fresh|paged", "any"), "read"
 * ("once" | "each use"), "kind" ("tuning" | "configuration"), "where" and "doc". */
void rg_tuning_json(rg_buf *b, bool verbose);

/* The allowed values of a row as rg_tuning_json's "allowed" writes them, into buf (n bytes,
 * truncated, always terminated); returns buf. */
const char *rg_tuning_allowed(rg_tune id, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
