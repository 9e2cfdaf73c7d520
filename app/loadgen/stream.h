/* The load generator's incremental response readers: an HTTP/1.1 response reader, a
 * server-sent-events reader, and the observer that turns an OpenAI completions stream into
 * timings. Each takes bytes in whatever pieces the socket delivers (a boundary may fall anywhere:
 * inside a chunk-size line, between CR and LF, inside a `data:` field) and keeps only what it
 * must (the response head, the current SSE line and event); none ever reads past its input, and
 * a malformed input is a verdict (LG_RX_BAD, -1), never a crash.
 *
 * Sources: RFC 9112 sec. 6-7 (HTTP/1.1 message body length, chunked transfer coding with chunk
 * extensions and trailers); WHATWG HTML sec. 9.2.6 "Interpreting an event stream" (SSE lines end
 * in CRLF, LF or CR; `data:` lines join with LF; an event is dispatched at a blank line; `:`
 * starts a comment); OpenAI's completions streaming (`data: {json}` chunks, a final usage chunk
 * when stream_options.include_usage is set, then `data: [DONE]`); TTFT / TPOT / ITL as vLLM's
 * benchmarks/benchmark_serving.py computes them.
 */
#ifndef RG_LOADGEN_STREAM_H
#define RG_LOADGEN_STREAM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

#define LG_RX_MAX_HEAD 65536	/* response head (status line + headers) cap, bytes */
#define LG_RX_MAX_LINE 4096	/* chunk-size line (with extensions) and trailer line cap */

enum lg_rx_result {
	LG_RX_MORE,		/* need more bytes */
	LG_RX_DONE,		/* the response is complete */
	LG_RX_BAD,		/* not a valid HTTP/1.x response, or a sink refused its bytes */
};

/* Called once per header field of the head, name and value not NUL-terminated (value without
 * surrounding whitespace). */
typedef void (*lg_rx_header_fn)(void *ctx, const char *name, size_t name_len, const char *value,
				size_t value_len);
/* Called with each run of decoded body bytes (chunk framing removed), in order. Returns 0, or
 * non-zero to make the response bad (a body the caller cannot take). */
typedef int (*lg_rx_body_fn)(void *ctx, const char *data, size_t n);

/* Incremental reader of one HTTP/1.x response (reset between responses). */
struct lg_http_rx {
	int state;		/* internal (enum in stream.c) */
	int status;		/* status code once the head is in; 0 before */
	bool close;		/* server asked to close (Connection: close, HTTP/1.0 without
				 * keep-alive, or a body delimited by the end of the stream) */
	bool chunked;
	bool until_eof;		/* neither Content-Length nor chunked: the body ends at EOF */
	bool trailing;		/* bytes followed the end of the response (the socket is unusable) */
	uint64_t remain;	/* bytes left in the current chunk or Content-Length body */
	uint64_t n_in;		/* bytes fed so far */
	rg_buf head;		/* (head.len) head bytes until the blank line, then the current
				 * chunk-size or trailer line */
	int cr;			/* chunk data's CRLF: bytes of it seen */
	lg_rx_header_fn on_header;
	lg_rx_body_fn on_body;
	void *ctx;
};

/* Set up rx (buffers empty) with the callbacks (either may be NULL) and their context. */
void lg_http_rx_init(struct lg_http_rx *rx, lg_rx_header_fn on_header, lg_rx_body_fn on_body,
		     void *ctx);
/* Ready rx for the next response on the same connection, keeping its buffers. */
void lg_http_rx_reset(struct lg_http_rx *rx);
void lg_http_rx_free(struct lg_http_rx *rx);
/* Feed n received bytes. Returns LG_RX_MORE, LG_RX_DONE (bytes after the end set rx->trailing
 * and are dropped) or LG_RX_BAD (and stays BAD). A 1xx, 204 or 304 response has no body. */
enum lg_rx_result lg_http_rx_feed(struct lg_http_rx *rx, const char *data, size_t n);
/* The peer closed the connection: LG_RX_DONE when that ends the response (a body delimited by
 * EOF, or one already complete), else LG_RX_BAD. */
enum lg_rx_result lg_http_rx_eof(struct lg_http_rx *rx);

/* Called for each dispatched SSE event with its data buffer (data lines joined by LF, no final
 * LF; NUL-terminated at data[n]). Returns 0, or non-zero to stop (lg_sse_feed returns -1). */
typedef int (*lg_sse_event_fn)(void *ctx, const char *data, size_t n);

/* Incremental server-sent-events reader (WHATWG HTML 9.2.6); only the `data` field is kept. */
struct lg_sse {
	rg_buf line;		/* the current line, without its terminator */
	rg_buf data;		/* the data buffer of the current event */
	bool skip_lf;		/* the last byte was a CR: a following LF ends no new line */
	bool started;		/* a first line was seen (a leading BOM is dropped from it) */
	size_t max_line;	/* cap on a line and on an event's data, bytes */
};

/* Set up sse; max_line caps one line and one event's data (bytes). */
void lg_sse_init(struct lg_sse *sse, size_t max_line);
void lg_sse_reset(struct lg_sse *sse);
void lg_sse_free(struct lg_sse *sse);
/* Feed n bytes of the event stream; calls on_event for each event completed by them. Returns 0,
 * or -1 when a line or an event exceeds max_line, on OOM, or when on_event refused an event.
 * An event the stream ends inside is never dispatched (as the standard says). */
int lg_sse_feed(struct lg_sse *sse, const char *data, size_t n, lg_sse_event_fn on_event,
		void *ctx);

/* What one generation request showed: timings of its content chunks, its usage, how it ended.
 * Times are ns on the caller's clock. */
struct lg_gen_obs {
	int64_t first_ns;	/* first chunk with non-empty text; -1 when none */
	int64_t last_ns;	/* last chunk with non-empty text; -1 when none */
	long n_chunks;		/* chunks with non-empty text */
	long usage_prompt;	/* usage.prompt_tokens; -1 when no usage was seen */
	long usage_completion;	/* usage.completion_tokens; -1 when no usage was seen */
	bool done;		/* `data: [DONE]` seen */
	bool error;		/* an event (or body) carried a non-null "error" */
	float *itl_ms;		/* (n_itl) gaps between consecutive content chunks, ms */
	size_t n_itl, cap_itl;
};

void lg_gen_obs_init(struct lg_gen_obs *g);
/* Forget the last request (the gap array keeps its memory). */
void lg_gen_obs_reset(struct lg_gen_obs *g);
void lg_gen_obs_free(struct lg_gen_obs *g);
/* One SSE event's data of a completions stream, received at now_ns: "[DONE]", or a JSON object
 * whose choices[].text (or choices[].delta.content, the chat shape) is the new text, whose
 * "usage" holds the token counts and whose non-null "error" fails the request. Returns 0, or -1
 * when the data is not a JSON object, on OOM, or when an event follows [DONE]. */
int lg_gen_obs_event(struct lg_gen_obs *g, const char *data, size_t n, int64_t now_ns);
/* A non-streamed completions body: the JSON object's usage and error. Returns 0 or -1 (not a
 * JSON object). */
int lg_gen_obs_body(struct lg_gen_obs *g, const char *data, size_t n);
/* Output tokens of the request: usage.completion_tokens when the server sent usage, else the
 * number of content chunks. */
long lg_gen_obs_tokens(const struct lg_gen_obs *g);
/* Time per output token after the first, ms: (last - first) / (tokens - 1); 0 for one token
 * (vLLM's convention), NaN when no content chunk was seen. */
double lg_gen_obs_tpot_ms(const struct lg_gen_obs *g);
#endif
