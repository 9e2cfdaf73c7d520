/* See spm.h. C++ because libsentencepiece is a C++ library: this unit is the C shim over its
 * SentencePieceProcessor. Unlike f32_shortest.cc it calls the C++ runtime (std::string,
 * std::vector: the library's interface) and is built with exceptions (the Makefile's
 * EXTRA_CXXFLAGS for this file), so that a std::bad_alloc thrown inside the library comes back as
 * RG_ERR_OOM instead of terminating the process; nothing thrown crosses into C. The file is read
 * here (rg_file_read: regular files only, bounded) and handed to the library as bytes: the
 * library's own Load(path) throws std::ios_base::failure on a directory. */
#include "tokenizer/spm.h"

#include <stdlib.h>
#include <string.h>

extern "C" {
#include "core/file.h"
#include "core/utf8.h"
}

#ifdef RG_WITH_SENTENCEPIECE
#include <new>
#include <sentencepiece_processor.h>
#include <string>
#include <vector>

#define RG_SPM_MAX_FILE ((off_t)512 << 20)

struct rg_spm {
	sentencepiece::SentencePieceProcessor sp;
};

/* RG_ERR_INVALID_UTF8 naming the first invalid byte, or RG_OK. */
static rg_status check_utf8(const char *text, size_t len)
{
	uint32_t c;
	for (size_t i = 0, k; i < len; i += k)
		if ((k = rg_utf8_next(text, len, i, &c)) == 0)
			return rg_errorf(RG_ERR_INVALID_UTF8,
					 "sentencepiece: invalid UTF-8 at byte offset %zu (byte 0x%02x)",
					 i, (unsigned char)text[i]);
	return RG_OK;
}

/* The library's reason, without the source location it puts before a failed protobuf parse. */
static const char *load_reason(const sentencepiece::util::Status &st)
{
	const char *m = st.error_message();
	if (!m || !*m)
		return "rejected by libsentencepiece";
	if (strstr(m, "ParseFromArray"))
		return "the protobuf ModelProto does not parse";
	return m;
}

extern "C" rg_status rg_spm_load(const char *path, rg_spm **out)
{
	char *buf = NULL;
	size_t len = 0;
	rg_spm *s = NULL;
	rg_status st;

	if (!out)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_spm_load: out is NULL");
	*out = NULL;
	if (!path)
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_spm_load: path is NULL");
	if ((st = rg_file_read(path, RG_SPM_MAX_FILE, &buf, &len)) != RG_OK)
		return rg_error_wrap(st, "SentencePiece model");
	if (len == 0) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: not a SentencePiece model (empty file)", path);
		goto out_free_buf;
	}
	s = new (std::nothrow) rg_spm;
	if (!s) {
		st = rg_errorf(RG_ERR_OOM, "%s: out of memory (SentencePiece model)", path);
		goto out_free_buf;
	}
	try {
		sentencepiece::util::Status ls =
			s->sp.LoadFromSerializedProto(absl::string_view(buf, len));
		if (!ls.ok()) {
			st = rg_errorf(RG_ERR_FORMAT, "%s: not a SentencePiece model (%s)", path,
				       load_reason(ls));
			goto out_free_model;
		}
	} catch (const std::bad_alloc &) {
		st = rg_errorf(RG_ERR_OOM, "%s: out of memory (SentencePiece model)", path);
		goto out_free_model;
	} catch (...) {
		st = rg_errorf(RG_ERR_FORMAT, "%s: not a SentencePiece model (libsentencepiece threw)",
			       path);
		goto out_free_model;
	}
	free(buf);
	*out = s;
	return RG_OK;

out_free_model:
	delete s;
out_free_buf:
	free(buf);
	return st;
}

extern "C" void rg_spm_free(rg_spm *s)
{
	delete s;
}

extern "C" int32_t rg_spm_vocab_size(const rg_spm *s)
{
	return s ? s->sp.GetPieceSize() : 0;
}

extern "C" int32_t rg_spm_piece_to_id(const rg_spm *s, const char *p, size_t len)
{
	if (!s || (!p && len))
		return -1;
	try {
		absl::string_view piece(p ? p : "", len);
		int id = s->sp.PieceToId(piece);
		/* PieceToId answers unk_id for a string that is no piece */
		if (id < 0 || (id == s->sp.unk_id() && s->sp.IdToPiece(id) != piece))
			return -1;
		return id;
	} catch (...) {
		return -1;
	}
}

extern "C" const char *rg_spm_id_to_piece(const rg_spm *s, int32_t id, size_t *len)
{
	if (len)
		*len = 0;
	if (!s || id < 0 || id >= s->sp.GetPieceSize())
		return NULL;
	const std::string &p = s->sp.IdToPiece(id);
	if (len)
		*len = p.size();
	return p.c_str();
}

extern "C" rg_status rg_spm_encode_ids(const rg_spm *s, const char *text, size_t len,
				       int32_t **ids, size_t *n_ids)
{
	rg_status st;

	if (ids)
		*ids = NULL;
	if (n_ids)
		*n_ids = 0;
	if (!s || !ids || !n_ids || (!text && len))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_spm_encode_ids: NULL argument");
	if ((st = check_utf8(text, len)) != RG_OK)
		return st;
	try {
		std::vector<int> v;
		sentencepiece::util::Status es =
			s->sp.Encode(absl::string_view(text ? text : "", len), &v);
		if (!es.ok())
			return rg_errorf(RG_ERR_INTERNAL, "sentencepiece: encode failed: %s",
					 es.error_message());
		int32_t *o = (int32_t *)malloc(v.size() ? v.size() * sizeof(int32_t) : 1);
		if (!o)
			return rg_errorf(RG_ERR_OOM, "sentencepiece: out of memory (ids)");
		for (size_t i = 0; i < v.size(); i++)
			o[i] = v[i];
		*ids = o;
		*n_ids = v.size();
		return RG_OK;
	} catch (const std::bad_alloc &) {
		return rg_errorf(RG_ERR_OOM, "sentencepiece: out of memory (encode)");
	} catch (...) {
		return rg_errorf(RG_ERR_INTERNAL, "sentencepiece: encode threw");
	}
}

extern "C" rg_status rg_spm_encode_pieces(const rg_spm *s, const char *text, size_t len,
					  char **pieces, size_t **starts, size_t *n)
{
	rg_status st;

	if (pieces)
		*pieces = NULL;
	if (starts)
		*starts = NULL;
	if (n)
		*n = 0;
	if (!s || !pieces || !starts || !n || (!text && len))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_spm_encode_pieces: NULL argument");
	if ((st = check_utf8(text, len)) != RG_OK)
		return st;
	try {
		std::vector<std::string> v;
		sentencepiece::util::Status es =
			s->sp.Encode(absl::string_view(text ? text : "", len), &v);
		if (!es.ok())
			return rg_errorf(RG_ERR_INTERNAL, "sentencepiece: encode failed: %s",
					 es.error_message());
		size_t total = 0;
		for (const std::string &p : v)
			total += p.size() + 1;
		char *b = (char *)malloc(total ? total : 1);
		size_t *o = (size_t *)malloc((v.size() + 1) * sizeof(size_t));
		if (!b || !o) {
			free(b);
			free(o);
			return rg_errorf(RG_ERR_OOM, "sentencepiece: out of memory (pieces)");
		}
		size_t at = 0;
		o[0] = 0;
		for (size_t i = 0; i < v.size(); i++) {
			memcpy(b + at, v[i].data(), v[i].size());
			at += v[i].size();
			b[at++] = '\0';
			o[i + 1] = at;
		}
		if (!total)
			b[0] = '\0';
		*pieces = b;
		*starts = o;
		*n = v.size();
		return RG_OK;
	} catch (const std::bad_alloc &) {
		return rg_errorf(RG_ERR_OOM, "sentencepiece: out of memory (encode)");
	} catch (...) {
		return rg_errorf(RG_ERR_INTERNAL, "sentencepiece: encode threw");
	}
}

/* The decoded string as a malloc'd C string. */
static rg_status give_text(const std::string &d, char **text, size_t *len)
{
	char *o = (char *)malloc(d.size() + 1);
	if (!o)
		return rg_errorf(RG_ERR_OOM, "sentencepiece: out of memory (decode)");
	memcpy(o, d.data(), d.size());
	o[d.size()] = '\0';
	*text = o;
	*len = d.size();
	return RG_OK;
}

extern "C" rg_status rg_spm_decode_ids(const rg_spm *s, const int32_t *ids, size_t n, char **text,
				       size_t *len)
{
	if (text)
		*text = NULL;
	if (len)
		*len = 0;
	if (!s || !text || !len || (!ids && n))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_spm_decode_ids: NULL argument");
	int32_t size = s->sp.GetPieceSize();
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= size)
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "sentencepiece: id %d at index %zu is outside [0, %d)",
					 (int)ids[i], i, (int)size);
	try {
		std::vector<int> v(ids, ids + n);
		std::string d;
		sentencepiece::util::Status ds = s->sp.Decode(v, &d);
		if (!ds.ok())
			return rg_errorf(RG_ERR_INTERNAL, "sentencepiece: decode failed: %s",
					 ds.error_message());
		return give_text(d, text, len);
	} catch (const std::bad_alloc &) {
		return rg_errorf(RG_ERR_OOM, "sentencepiece: out of memory (decode)");
	} catch (...) {
		return rg_errorf(RG_ERR_INTERNAL, "sentencepiece: decode threw");
	}
}

extern "C" rg_status rg_spm_decode_pieces(const rg_spm *s, const char *const *pieces,
					  const size_t *lens, size_t n, char **text, size_t *len)
{
	if (text)
		*text = NULL;
	if (len)
		*len = 0;
	if (!s || !text || !len || (!pieces && n))
		return rg_errorf(RG_ERR_INVALID_INPUT, "rg_spm_decode_pieces: NULL argument");
	for (size_t i = 0; i < n; i++)
		if (!pieces[i])
			return rg_errorf(RG_ERR_INVALID_INPUT,
					 "rg_spm_decode_pieces: piece %zu is NULL", i);
	try {
		std::vector<absl::string_view> v;
		v.reserve(n);
		for (size_t i = 0; i < n; i++)
			v.emplace_back(pieces[i], lens ? lens[i] : strlen(pieces[i]));
		std::string d;
		sentencepiece::util::Status ds = s->sp.Decode(v, &d);
		if (!ds.ok())
			return rg_errorf(RG_ERR_INTERNAL, "sentencepiece: decode failed: %s",
					 ds.error_message());
		return give_text(d, text, len);
	} catch (const std::bad_alloc &) {
		return rg_errorf(RG_ERR_OOM, "sentencepiece: out of memory (decode)");
	} catch (...) {
		return rg_errorf(RG_ERR_INTERNAL, "sentencepiece: decode threw");
	}
}

#else /* !RG_WITH_SENTENCEPIECE: every entry point says what is missing */

#define RG_SPM_MISSING                                                                            \
	"ragged was built without SentencePiece: install libsentencepiece-dev "                  \
	"(scripts/install-deps.sh) and rebuild"

extern "C" rg_status rg_spm_load(const char *path, rg_spm **out)
{
	if (out)
		*out = NULL;
	return rg_errorf(RG_ERR_UNSUPPORTED, "%s: %s", path ? path : "(null)", RG_SPM_MISSING);
}

extern "C" void rg_spm_free(rg_spm *s)
{
	(void)s;
}

extern "C" int32_t rg_spm_vocab_size(const rg_spm *s)
{
	return 0;
}

extern "C" int32_t rg_spm_piece_to_id(const rg_spm *s, const char *p, size_t len)
{
	return -1;
}

extern "C" const char *rg_spm_id_to_piece(const rg_spm *s, int32_t id, size_t *len)
{
	if (len)
		*len = 0;
	return NULL;
}

extern "C" rg_status rg_spm_encode_ids(const rg_spm *s, const char *text, size_t len,
				       int32_t **ids, size_t *n_ids)
{
	if (ids)
		*ids = NULL;
	if (n_ids)
		*n_ids = 0;
	return rg_errorf(RG_ERR_UNSUPPORTED, "%s", RG_SPM_MISSING);
}

extern "C" rg_status rg_spm_encode_pieces(const rg_spm *s, const char *text, size_t len,
					  char **pieces, size_t **starts, size_t *n)
{
	if (pieces)
		*pieces = NULL;
	if (starts)
		*starts = NULL;
	if (n)
		*n = 0;
	return rg_errorf(RG_ERR_UNSUPPORTED, "%s", RG_SPM_MISSING);
}

extern "C" rg_status rg_spm_decode_ids(const rg_spm *s, const int32_t *ids, size_t n, char **text,
				       size_t *len)
{
	if (text)
		*text = NULL;
	if (len)
		*len = 0;
	return rg_errorf(RG_ERR_UNSUPPORTED, "%s", RG_SPM_MISSING);
}

extern "C" rg_status rg_spm_decode_pieces(const rg_spm *s, const char *const *pieces,
					  const size_t *lens, size_t n, char **text, size_t *len)
{
	if (text)
		*text = NULL;
	if (len)
		*len = 0;
	return rg_errorf(RG_ERR_UNSUPPORTED, "%s", RG_SPM_MISSING);
}
#endif
