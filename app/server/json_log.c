/* --json-output: stderr lines as JSON objects; see json_log.h. */
#include "server/json_log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/error.h"
#include "core/utf8.h"

#define LINE_MAX_BYTES 65536 /* a longer line is cut into several messages */

static struct {
	bool on;
	int orig_fd;   /* the original stderr */
	int read_fd;   /* the pipe's read end; its write end is fd 2 */
	pthread_t thread;
} g_log = {false, -1, -1, 0};

static const char *level_of(const char *line, size_t n)
{
	char buf[512];
	size_t k = n < sizeof(buf) - 1 ? n : sizeof(buf) - 1;

	memcpy(buf, line, k);
	buf[k] = '\0';
	if (strcasestr(buf, "error") || strstr(buf, "cannot") || strstr(buf, "BUG"))
		return "ERROR";
	if (strcasestr(buf, "warning"))
		return "WARN";
	return "INFO";
}

void rg_json_log_format(rg_buf *b, const char *line, size_t n, long long ts_s, long ts_ns)
{
	time_t t = (time_t)ts_s;
	struct tm tm;
	char when[40];
	rg_buf msg;

	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	/* the message as valid UTF-8: each byte that starts no valid sequence becomes U+FFFD */
	rg_buf_init(&msg);
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)line[i];
		size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;

		if (i + len <= n && rg_utf8_valid(line + i, len)) {
			rg_buf_put(&msg, line + i, len);
			i += len;
		} else {
			rg_buf_puts(&msg, "\xEF\xBF\xBD");
			i++;
		}
	}
	rg_buf_printf(b, "{\"timestamp\":\"%s.%06ldZ\",\"level\":\"%s\",\"message\":", when,
		      ts_ns / 1000, level_of(line, n));
	rg_buf_json_str(b, msg.data ? msg.data : "", msg.len);
	rg_buf_puts(b, ",\"target\":\"ragged\"}\n");
	rg_buf_free(&msg);
}

static void emit(const char *line, size_t n)
{
	struct timespec ts;
	rg_buf b;

	clock_gettime(CLOCK_REALTIME, &ts);
	rg_buf_init(&b);
	rg_json_log_format(&b, line, n, (long long)ts.tv_sec, ts.tv_nsec);
	for (size_t off = 0; !b.oom && off < b.len;) {
		ssize_t w = write(g_log.orig_fd, b.data + off, b.len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	rg_buf_free(&b);
}

/* The reader: split the pipe's bytes into lines until every writer has closed it. */
static void *reader(void *arg)
{
	static char line[LINE_MAX_BYTES];
	size_t n = 0;
	(void)arg;

	for (;;) {
		char buf[4096];
		ssize_t r = read(g_log.read_fd, buf, sizeof(buf));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		for (ssize_t i = 0; i < r; i++) {
			if (buf[i] == '\n' || n == sizeof(line)) {
				emit(line, n);
				n = 0;
				if (buf[i] == '\n')
					continue;
			}
			line[n++] = buf[i];
		}
	}
	if (n)
		emit(line, n);
	return NULL;
}

rg_status rg_json_log_start(void)
{
	int p[2];

	if (g_log.on)
		return RG_OK;
	if (pipe(p) != 0)
		return rg_errorf(RG_ERR_IO, "pipe: %s", strerror(errno));
	g_log.orig_fd = dup(STDERR_FILENO);
	if (g_log.orig_fd < 0) {
		close(p[0]);
		close(p[1]);
		return rg_errorf(RG_ERR_IO, "dup: %s", strerror(errno));
	}
	g_log.read_fd = p[0];
	fflush(stderr);
	if (dup2(p[1], STDERR_FILENO) < 0)
		goto out_close;
	close(p[1]);
	p[1] = -1;
	if (pthread_create(&g_log.thread, NULL, reader, NULL) != 0) {
		dup2(g_log.orig_fd, STDERR_FILENO);
		goto out_close;
	}
	g_log.on = true;
	return RG_OK;
out_close:
	if (p[1] >= 0)
		close(p[1]);
	close(p[0]);
	close(g_log.orig_fd);
	g_log.orig_fd = g_log.read_fd = -1;
	return rg_errorf(RG_ERR_IO, "cannot redirect stderr for --json-output");
}

void rg_json_log_stop(void)
{
	if (!g_log.on)
		return;
	fflush(stderr);
	/* fd 2 was the pipe's only write end: pointing it back at the original closes the pipe,
	 * and the reader ends after the last line */
	dup2(g_log.orig_fd, STDERR_FILENO);
	pthread_join(g_log.thread, NULL);
	close(g_log.read_fd);
	close(g_log.orig_fd);
	g_log.orig_fd = g_log.read_fd = -1;
	g_log.on = false;
}
