/* libFuzzer target for the GGUF reader (src/core/gguf.c). The input is a whole file, opened
 * through a memfd (/proc/self/fd/N: rg_gguf_open takes a path and refuses non-regular files, and
 * a memfd is a regular file). Checks the contract on every input: open either succeeds or fails
 * with a non-empty message and *out NULL; on success every getter on every key, the first and
 * last elements of every array, and rg_gguf_to_f32 on every tensor return without fault (the
 * file copy is allocated to its exact size, so AddressSanitizer sees any read past it), and
 * rg_gguf_find returns each tensor itself. Build and run: tests/fuzz/run_fuzz_gguf.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "core/gguf.h"

static void touch_array(const rg_gguf *g, const char *key, uint64_t i)
{
	const char *s;
	size_t len;
	int32_t i32;
	int64_t i64;
	float f;

	if (rg_gguf_arr_str(g, key, i, &s, &len) == RG_OK && s[len] != '\0')
		abort();
	(void)rg_gguf_arr_i32(g, key, i, &i32);
	(void)rg_gguf_arr_int(g, key, i, &i64);
	(void)rg_gguf_arr_f32(g, key, i, &f);
}

static void exercise(const rg_gguf *g)
{
	for (int i = 0; i < rg_gguf_n_kv(g); i++) {
		const char *key = rg_gguf_kv_key(g, i), *s;
		uint32_t u32, et;
		uint64_t u64, n;
		int64_t i64;
		float f;
		bool b;
		size_t len;

		if (!key || !rg_gguf_has(g, key))
			abort();
		(void)rg_gguf_get_type(g, key, &u32);
		(void)rg_gguf_get_u32(g, key, &u32);
		(void)rg_gguf_get_i64(g, key, &i64);
		(void)rg_gguf_get_u64(g, key, &u64);
		(void)rg_gguf_get_f32(g, key, &f);
		(void)rg_gguf_get_bool(g, key, &b);
		if (rg_gguf_get_str(g, key, &s, &len) == RG_OK && s[len] != '\0')
			abort();
		if (rg_gguf_get_arr(g, key, &et, &n) == RG_OK && n > 0) {
			touch_array(g, key, 0);
			touch_array(g, key, n - 1);
			touch_array(g, key, n); /* out of range: a status, not a read */
		}
	}
	for (int i = 0; i < rg_gguf_n_tensors(g); i++) {
		const rg_gguf_tensor *t = rg_gguf_tensor_at(g, i);
		float *out;

		if (!t || rg_gguf_find(g, t->name) != t)
			abort();
		if (t->numel > ((int64_t)1 << 24))
			continue;
		out = malloc((size_t)t->numel * sizeof(float));
		if (!out)
			continue;
		(void)rg_gguf_to_f32(t, out);
		free(out);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[64];
	rg_gguf *g = (rg_gguf *)0x1;
	rg_status st;
	int fd = memfd_create("fuzz.gguf", MFD_CLOEXEC);

	if (fd < 0)
		return 0;
	if (size && write(fd, data, size) != (ssize_t)size) {
		close(fd);
		return 0;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	rg_error_clear();
	st = rg_gguf_open(path, &g);
	if (st == RG_OK) {
		exercise(g);
		rg_gguf_close(g);
	} else if (g != NULL || rg_last_error()[0] == '\0') {
		abort();
	}
	close(fd);
	return 0;
}
