/* Model fingerprint (SHA-256 of configs, tokenizer and weights). See fingerprint.h. */
#include "server/fingerprint.h"

#include <errno.h>
#include <glob.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/file.h"

static const char *const SMALL_FILES[] = {
	"config.json", "tokenizer.json", "vocab.txt", "tokenizer_config.json",
	"special_tokens_map.json", "modules.json", "sentence_bert_config.json",
	"config_sentence_transformers.json", "1_Pooling/config.json",
	"model.safetensors.index.json",
};

/* Hash (name, NUL, size, bytes) of dir/name, or (name, NUL, "absent") when it does not exist. */
static rg_status hash_file(EVP_MD_CTX *md, const char *dir, const char *name)
{
	enum { CHUNK = 1 << 20 };
	char path[4200];
	struct stat sb;
	unsigned char *buf, size_le[8];
	uint64_t size, done = 0;
	rg_status s = RG_OK;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	EVP_DigestUpdate(md, name, strlen(name) + 1);
	if (stat(path, &sb) != 0 && errno == ENOENT) {
		EVP_DigestUpdate(md, "absent", 6);
		return RG_OK;
	}
	fd = rg_file_open_regular(path, &sb);
	if (fd < 0)
		return rg_error_wrap(RG_ERR_IO, "model fingerprint");
	size = (uint64_t)sb.st_size;
	for (int i = 0; i < 8; i++)
		size_le[i] = (unsigned char)(size >> (8 * i));
	EVP_DigestUpdate(md, size_le, 8);
	buf = malloc(CHUNK);
	if (!buf) {
		s = rg_errorf(RG_ERR_OOM, "model fingerprint: out of memory");
		goto out_close;
	}
	while (done < size) {
		ssize_t r = pread(fd, buf, CHUNK, (off_t)done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			s = rg_errorf(RG_ERR_IO, "model fingerprint: %s: %s", path,
				      r < 0 ? strerror(errno) : "file shrank while read");
			break;
		}
		EVP_DigestUpdate(md, buf, (size_t)r);
		done += (uint64_t)r;
	}
	free(buf);
out_close:
	close(fd);
	return s;
}

rg_status rg_model_fingerprint(const char *dir, char out[65])
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	unsigned char digest[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	char pat[4200];
	glob_t g;
	rg_status s = RG_OK;

	out[0] = '\0';
	if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(md);
		return rg_errorf(RG_ERR_OOM, "model fingerprint: cannot start SHA-256");
	}
	for (size_t i = 0; i < sizeof(SMALL_FILES) / sizeof(SMALL_FILES[0]) && s == RG_OK; i++)
		s = hash_file(md, dir, SMALL_FILES[i]);
	snprintf(pat, sizeof(pat), "%s/*.safetensors", dir);
	if (s == RG_OK && glob(pat, 0, NULL, &g) == 0) { /* sorted by name */
		size_t skip = strlen(dir) + 1;

		for (size_t i = 0; i < g.gl_pathc && s == RG_OK; i++)
			s = hash_file(md, dir, g.gl_pathv[i] + skip);
		globfree(&g);
	}
	if (s == RG_OK && EVP_DigestFinal_ex(md, digest, &n) != 1)
		s = rg_errorf(RG_ERR_IO, "model fingerprint: SHA-256 failed");
	EVP_MD_CTX_free(md);
	if (s != RG_OK)
		return s;
	for (unsigned int i = 0; i < n && i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", digest[i]);
	return RG_OK;
}
