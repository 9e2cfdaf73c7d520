/* The table of tuning switches (src/core/tuning.c): every row's default is one of its allowed
 * values; read-once rows keep their first value, live rows follow the environment; a bad value
 * gives the default and one warning naming the variable and the allowed values; an int out of
 * range is clamped; rg_tuning_set overrides and clears; the JSON listing has every row. The
 * tests share one process, so each uses rows no other test reads. */
#include <json-c/json.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/error.h"
#include "core/tuning.h"
#include "ops/cpu/cpu_kern.h"

/* stderr of fn() as a malloc'd string. */
static char *capture_stderr(void (*fn)(void))
{
	FILE *tmp = tmpfile();
	int saved = dup(2);
	long n;
	char *out;

	assert_non_null(tmp);
	assert_true(saved >= 0);
	fflush(stderr);
	assert_true(dup2(fileno(tmp), 2) >= 0);
	fn();
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = ftell(tmp);
	assert_true(n >= 0);
	out = calloc(1, (size_t)n + 1);
	assert_non_null(out);
	rewind(tmp);
	assert_int_equal(fread(out, 1, (size_t)n, tmp), (size_t)n);
	fclose(tmp);
	return out;
}

static int count_of(const char *hay, const char *needle)
{
	int n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* Every row: a RAGGED_ name found by rg_tuning_find, a doc, a file, a default that parses
 * (setting it succeeds), enum constants that index the right words. */
static void test_table_rows(void **state)
{
	(void)state;
	for (int i = 0; i < RG_TUNE_COUNT; i++) {
		const rg_tuning_def *d = rg_tuning_def_of((rg_tune)i);

		assert_non_null(d);
		assert_true(!strncmp(d->name, "RAGGED_", 7));
		assert_int_equal(rg_tuning_find(d->name), i);
		assert_true(d->doc && strlen(d->doc) > 10 && !strchr(d->doc, '\n'));
		assert_true(d->where &&
			    (!strncmp(d->where, "src/", 4) || !strncmp(d->where, "tools/", 6)));
		assert_true((d->type == RG_TUNE_ENUM) == (d->values != NULL));
		if (d->flags & RG_TUNE_F_CONFIG) {
			assert_int_equal(d->type, RG_TUNE_TEXT);
			continue;
		}
		/* rg_tuning_set(default) then clear: the default is an allowed value */
		assert_int_equal(rg_tuning_set(d->name, d->def), RG_OK);
		assert_int_equal(rg_tuning_set(d->name, NULL), RG_OK);
	}
	/* the table's bound is the kernel's (ops_cpu.c caps there too) */
	assert_int_equal(rg_tuning_def_of(RG_TUNE_CPU_SMALLM)->hi, RG_CPU_SMALLM_MAX);
	assert_int_equal(rg_tuning_find("RAGGED_NOPE"), RG_TUNE_COUNT);
	assert_int_equal(rg_tuning_find(NULL), RG_TUNE_COUNT);
	assert_null(rg_tuning_def_of(RG_TUNE_COUNT));
	assert_string_equal(rg_tuning_def_of(RG_TUNE_CPU_ISA)->values[RG_CPU_ISA_GENERIC],
			    "generic");
	assert_string_equal(rg_tuning_def_of(RG_TUNE_CPU_GEMM)->values[RG_CPU_GEMM_OPENBLAS],
			    "openblas");
	assert_string_equal(rg_tuning_def_of(RG_TUNE_CPU_ATTN)->values[RG_CPU_ATTN_TILES], "tiles");
	assert_string_equal(rg_tuning_def_of(RG_TUNE_DEBERTA_TC)->values[RG_DEBERTA_TC_ATTN],
			    "attn");
	assert_string_equal(rg_tuning_def_of(RG_TUNE_DEBERTA_TC)->values[RG_DEBERTA_TC_OFF], "0");
	assert_string_equal(rg_tuning_def_of(RG_TUNE_PREFILL_TC)->values[RG_PREFILL_TC_PAGED],
			    "paged");
	assert_string_equal(rg_tuning_def_of(RG_TUNE_PREFILL_TC)->values[RG_PREFILL_TC_OFF], "0");
	assert_string_equal(rg_tuning_def_of(RG_TUNE_PREFILL_TC)->values[RG_PREFILL_TC_ON], "1");
	assert_null(rg_tuning_def_of(RG_TUNE_PREFILL_TC)->values[RG_PREFILL_TC_ON + 1]);
	assert_null(rg_tuning_def_of(RG_TUNE_DEBERTA_TC)->values[RG_DEBERTA_TC_ATTN + 1]);
	assert_null(rg_tuning_def_of(RG_TUNE_CPU_ISA)->values[RG_CPU_ISA_GENERIC + 1]);
	assert_null(rg_tuning_def_of(RG_TUNE_CPU_ATTN)->values[RG_CPU_ATTN_TILES + 1]);
	assert_null(rg_tuning_def_of(RG_TUNE_CPU_GEMM)->values[RG_CPU_GEMM_OPENBLAS + 1]);
}

/* A read-once row keeps the value of its first read; unset and empty are the default. */
static void test_read_once(void **state)
{
	(void)state;
	setenv("RAGGED_SPIN_US", "250", 1);
	assert_int_equal(rg_tuning_int(RG_TUNE_SPIN_US), 250);
	assert_int_equal(rg_tuning_source_of(RG_TUNE_SPIN_US), RG_TUNE_SRC_ENV);
	setenv("RAGGED_SPIN_US", "300", 1);
	assert_int_equal(rg_tuning_int(RG_TUNE_SPIN_US), 250);

	setenv("RAGGED_GEMM_AUTOTUNE", "", 1); /* empty: unset */
	assert_true(rg_tuning_bool(RG_TUNE_GEMM_AUTOTUNE));
	assert_int_equal(rg_tuning_source_of(RG_TUNE_GEMM_AUTOTUNE), RG_TUNE_SRC_DEFAULT);
	setenv("RAGGED_GEMM_AUTOTUNE", "0", 1);
	assert_true(rg_tuning_bool(RG_TUNE_GEMM_AUTOTUNE)); /* read once */
	unsetenv("RAGGED_GEMM_AUTOTUNE");

	unsetenv("RAGGED_PDL");
	assert_true(rg_tuning_bool(RG_TUNE_PDL));
	assert_string_equal(rg_tuning_str(RG_TUNE_PDL), "1");
	assert_null(rg_tuning_str(RG_TUNE_SPIN_US)); /* an int row: rg_tuning_int */
}

/* A live row follows every change of its variable (what a benchmark's os.environ does). */
static void test_live(void **state)
{
	(void)state;
	setenv("RAGGED_PREFILL_TC", "fresh", 1);
	assert_int_equal(rg_tuning_enum(RG_TUNE_PREFILL_TC), RG_PREFILL_TC_FRESH);
	setenv("RAGGED_PREFILL_TC", "paged", 1);
	assert_int_equal(rg_tuning_enum(RG_TUNE_PREFILL_TC), RG_PREFILL_TC_PAGED);
	assert_string_equal(rg_tuning_str(RG_TUNE_PREFILL_TC), "paged");
	setenv("RAGGED_PREFILL_TC", "0", 1);
	assert_int_equal(rg_tuning_enum(RG_TUNE_PREFILL_TC), RG_PREFILL_TC_OFF);
	unsetenv("RAGGED_PREFILL_TC");
	assert_int_equal(rg_tuning_enum(RG_TUNE_PREFILL_TC), RG_PREFILL_TC_AUTO);
	assert_int_equal(rg_tuning_source_of(RG_TUNE_PREFILL_TC), RG_TUNE_SRC_DEFAULT);

	setenv("RAGGED_CUDA_GRAPHS", "0", 1);
	assert_false(rg_tuning_bool(RG_TUNE_CUDA_GRAPHS));
	setenv("RAGGED_CUDA_GRAPHS", "1", 1);
	assert_true(rg_tuning_bool(RG_TUNE_CUDA_GRAPHS));
	unsetenv("RAGGED_CUDA_GRAPHS");
}

static void read_bad_once_row(void)
{
	setenv("RAGGED_CPU_ATTN", "bogus", 1);
	assert_int_equal(rg_tuning_enum(RG_TUNE_CPU_ATTN), RG_CPU_ATTN_AUTO);
	assert_int_equal(rg_tuning_enum(RG_TUNE_CPU_ATTN), RG_CPU_ATTN_AUTO);
	assert_int_equal(rg_tuning_source_of(RG_TUNE_CPU_ATTN), RG_TUNE_SRC_INVALID);
	unsetenv("RAGGED_CPU_ATTN");
}

static void read_bad_live_row(void)
{
	setenv("RAGGED_SAMPLE_FAST", "yes", 1);
	for (int i = 0; i < 5; i++)
		assert_true(rg_tuning_bool(RG_TUNE_SAMPLE_FAST)); /* the default, 1 */
	setenv("RAGGED_SAMPLE_FAST", "0", 1);
	assert_false(rg_tuning_bool(RG_TUNE_SAMPLE_FAST));
	setenv("RAGGED_SAMPLE_FAST", "off", 1);
	assert_true(rg_tuning_bool(RG_TUNE_SAMPLE_FAST));
	unsetenv("RAGGED_SAMPLE_FAST");
}

static void read_ints(void)
{
	setenv("RAGGED_NUM_THREADS", "9999", 1);
	assert_int_equal(rg_tuning_int(RG_TUNE_NUM_THREADS), 256); /* clamped, as the pool did */
	assert_int_equal(rg_tuning_source_of(RG_TUNE_NUM_THREADS), RG_TUNE_SRC_ENV);
	unsetenv("RAGGED_NUM_THREADS");
	setenv("RAGGED_CPU_SMALLM", "12x", 1);
	assert_int_equal(rg_tuning_int(RG_TUNE_CPU_SMALLM), -1); /* the default, auto */
	assert_int_equal(rg_tuning_source_of(RG_TUNE_CPU_SMALLM), RG_TUNE_SRC_INVALID);
	unsetenv("RAGGED_CPU_SMALLM");
}

/* A bad value: the default, and one warning that names the variable, the value and the allowed
 * values (a live row read many times still warns once per value). */
static void test_bad_values(void **state)
{
	char *err;

	(void)state;
	err = capture_stderr(read_bad_once_row);
	assert_int_equal(count_of(err, "warning"), 1);
	assert_non_null(strstr(err, "RAGGED_CPU_ATTN=bogus: expected auto|openblas|tiles; "
				    "using the default auto"));
	free(err);

	err = capture_stderr(read_bad_live_row);
	assert_int_equal(count_of(err, "warning"), 2); /* "yes" once, "off" once */
	assert_non_null(strstr(err, "RAGGED_SAMPLE_FAST=yes: expected 0|1; using the default 1"));
	assert_non_null(strstr(err, "RAGGED_SAMPLE_FAST=off"));
	free(err);

	err = capture_stderr(read_ints);
	assert_non_null(strstr(err, "RAGGED_NUM_THREADS=9999: outside 0..256; using 256"));
	assert_non_null(strstr(err, "RAGGED_CPU_SMALLM=12x: expected 0..256|auto; using the "
				    "default auto"));
	free(err);
}

/* rg_tuning_set: wins over the environment, checked strictly, cleared by NULL. */
static void test_setter(void **state)
{
	(void)state;
	setenv("RAGGED_ATTN_WGMMA", "0", 1);
	assert_false(rg_tuning_bool(RG_TUNE_ATTN_WGMMA));
	assert_int_equal(rg_tuning_set("RAGGED_ATTN_WGMMA", "1"), RG_OK);
	assert_true(rg_tuning_bool(RG_TUNE_ATTN_WGMMA));
	assert_int_equal(rg_tuning_source_of(RG_TUNE_ATTN_WGMMA), RG_TUNE_SRC_SET);
	assert_int_equal(rg_tuning_set("RAGGED_ATTN_WGMMA", NULL), RG_OK);
	assert_false(rg_tuning_bool(RG_TUNE_ATTN_WGMMA));
	unsetenv("RAGGED_ATTN_WGMMA");

	/* a read-once row: set, then cleared, reads the environment again */
	setenv("RAGGED_GEMV", "0", 1);
	assert_false(rg_tuning_bool(RG_TUNE_GEMV));
	assert_int_equal(rg_tuning_set("RAGGED_GEMV", "1"), RG_OK);
	assert_true(rg_tuning_bool(RG_TUNE_GEMV));
	unsetenv("RAGGED_GEMV");
	assert_int_equal(rg_tuning_set("RAGGED_GEMV", NULL), RG_OK);
	assert_true(rg_tuning_bool(RG_TUNE_GEMV));
	assert_int_equal(rg_tuning_source_of(RG_TUNE_GEMV), RG_TUNE_SRC_DEFAULT);

	assert_int_equal(rg_tuning_set("RAGGED_DEBERTA_TC", "tables"), RG_OK);
	assert_int_equal(rg_tuning_enum(RG_TUNE_DEBERTA_TC), RG_DEBERTA_TC_TABLES);
	assert_int_equal(rg_tuning_set("RAGGED_DEBERTA_TC", "both"), RG_ERR_INVALID_INPUT);
	assert_non_null(strstr(rg_last_error(), "1|0|tables|attn"));
	assert_int_equal(rg_tuning_enum(RG_TUNE_DEBERTA_TC), RG_DEBERTA_TC_TABLES); /* unchanged */
	assert_int_equal(rg_tuning_set("RAGGED_DEBERTA_TC", NULL), RG_OK);

	assert_int_equal(rg_tuning_set("RAGGED_CPU_SMALLM", "257"), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_tuning_set("RAGGED_CPU_SMALLM", "auto"), RG_OK);
	assert_int_equal(rg_tuning_int(RG_TUNE_CPU_SMALLM), -1);
	assert_int_equal(rg_tuning_set("RAGGED_CPU_SMALLM", "48"), RG_OK);
	assert_int_equal(rg_tuning_int(RG_TUNE_CPU_SMALLM), 48);
	assert_int_equal(rg_tuning_set("RAGGED_CPU_SMALLM", NULL), RG_OK);
	assert_int_equal(rg_tuning_set("RAGGED_NOPE", "1"), RG_ERR_INVALID_INPUT);
	assert_int_equal(rg_tuning_set("RAGGED_MODEL", "x"), RG_ERR_INVALID_INPUT);
}

/* The listing: one object per row, in table order, with value, source and (verbose) the doc. */
static void test_json(void **state)
{
	rg_buf b;
	json_object *root, *row, *v;

	(void)state;
	setenv("RAGGED_MODEL_DIR", "/models/x\xff", 1); /* not UTF-8: still JSON */
	assert_int_equal(rg_tuning_set("RAGGED_EXACT_GELU", "1"), RG_OK);
	rg_buf_init(&b);
	rg_tuning_json(&b, true);
	assert_false(b.oom);
	root = json_tokener_parse(b.data);
	assert_non_null(root);
	assert_int_equal(json_object_object_length(root), RG_TUNE_COUNT);
	for (int i = 0; i < RG_TUNE_COUNT; i++) {
		const rg_tuning_def *d = rg_tuning_def_of((rg_tune)i);

		assert_true(json_object_object_get_ex(root, d->name, &row));
		assert_true(json_object_object_get_ex(row, "doc", &v));
		assert_string_equal(json_object_get_string(v), d->doc);
		assert_true(json_object_object_get_ex(row, "source", &v));
		assert_true(json_object_object_get_ex(row, "allowed", &v));
	}
	assert_true(json_object_object_get_ex(root, "RAGGED_EXACT_GELU", &row));
	json_object_object_get_ex(row, "value", &v);
	assert_string_equal(json_object_get_string(v), "1");
	json_object_object_get_ex(row, "source", &v);
	assert_string_equal(json_object_get_string(v), "set");
	assert_true(json_object_object_get_ex(root, "RAGGED_MODEL_DIR", &row));
	json_object_object_get_ex(row, "value", &v);
	assert_string_equal(json_object_get_string(v), "/models/x\xef\xbf\xbd");
	json_object_object_get_ex(row, "kind", &v);
	assert_string_equal(json_object_get_string(v), "configuration");
	assert_true(json_object_object_get_ex(root, "RAGGED_CPU_SMALLM", &row));
	json_object_object_get_ex(row, "value", &v);
	assert_string_equal(json_object_get_string(v), "auto");
	json_object_put(root);
	rg_buf_free(&b);

	/* not verbose: value, source and default only */
	rg_buf_init(&b);
	rg_tuning_json(&b, false);
	root = json_tokener_parse(b.data);
	assert_non_null(root);
	assert_true(json_object_object_get_ex(root, "RAGGED_PDL", &row));
	assert_int_equal(json_object_object_length(row), 3);
	json_object_put(root);
	rg_buf_free(&b);
	unsetenv("RAGGED_MODEL_DIR");
	assert_int_equal(rg_tuning_set("RAGGED_EXACT_GELU", NULL), RG_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_rows), cmocka_unit_test(test_read_once),
		cmocka_unit_test(test_live),       cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_setter),     cmocka_unit_test(test_json),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
