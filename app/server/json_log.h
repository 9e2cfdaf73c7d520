/* TEI's --json-output: the server's log lines as JSON objects, one a line, for log collectors.
 * Every line written to stderr (ragged's messages and any library's) is rewritten as
 *   {"timestamp":"2026-11-25T15:04:05.123456Z","level":"INFO","message":"...","target":"ragged"}
 * on the original stderr. level: "ERROR" for a line naming an error or a failure ("error",
 * "cannot", "BUG"), "WARN" for a warning, else "INFO". It works below the code that logs: fd 2
 * becomes a pipe read by one thread, so no message is left in the old format. */
#ifndef RG_SERVER_JSON_LOG_H
#define RG_SERVER_JSON_LOG_H
#include "ragged.h"

/* Start rewriting. RG_ERR_OOM / RG_ERR_IO (pipe, dup, thread) with rg_last_error set; stderr is
 * unchanged then. Not thread-safe: call before other threads log. */
rg_status rg_json_log_start(void);
/* Flush every line written so far, restore stderr and join the thread. Accepts not started. */
void rg_json_log_stop(void);

/* One log line (without its newline) as the JSON object above, appended to b with a newline;
 * invalid UTF-8 bytes become U+FFFD. ts_s / ts_ns: the wall-clock time (CLOCK_REALTIME). */
struct rg_buf;
void rg_json_log_format(struct rg_buf *b, const char *line, size_t n, long long ts_s, long ts_ns);
#endif
