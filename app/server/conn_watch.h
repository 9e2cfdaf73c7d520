/* The overall deadline for receiving a request (--request-read-timeout-s), headers and body
 * together. libmicrohttpd's MHD_OPTION_CONNECTION_TIMEOUT is an idle timeout: every byte
 * restarts it, so a client sending one byte a second holds a connection for ever (4,200 such
 * clients denied all service, issue 9). The watch keeps, per connection, when its current request
 * began to arrive: at accept for the first, when the previous answer was sent for the next one on
 * a keep-alive connection. A sweeper thread shuts down (shutdown(2), SHUT_RDWR) the socket of a
 * connection whose request is still arriving at the deadline; libmicrohttpd then sees the end of
 * the stream and closes the connection as if the client had gone. While a request is processed
 * (queued in the engine, answer being sent) it has no deadline here: --request-timeout-ms and the
 * idle timeout govern it.
 *
 * Consequence for keep-alive: a connection idle between requests for longer than the read
 * timeout is closed too (with the defaults the 10 s idle timeout closes it first).
 *
 * Thread safety: the notify callback and rg_conn_watch_busy/idle run on libmicrohttpd's threads,
 * the sweeper on its own; one mutex guards the list. An entry leaves the list in the
 * MHD_CONNECTION_NOTIFY_CLOSED callback, which libmicrohttpd calls before it closes the socket,
 * so the sweeper never shuts down a descriptor number that was already reused. */
#ifndef RG_SERVER_CONN_WATCH_H
#define RG_SERVER_CONN_WATCH_H
#include <microhttpd.h>

#include "ragged.h"

typedef struct rg_conn_watch rg_conn_watch;
typedef struct rg_watched rg_watched; /* one connection; the MHD socket context */

/* Start the sweeper thread; read_timeout_s >= 1. NULL with *st (RG_ERR_OOM, RG_ERR_INTERNAL)
 * and rg_last_error set on failure. */
rg_conn_watch *rg_conn_watch_create(int read_timeout_s, rg_status *st);

/* Stop and join the sweeper and free the watch; call after MHD_stop_daemon (which reports every
 * connection closed). Accepts NULL. */
void rg_conn_watch_free(rg_conn_watch *w);

/* MHD_OPTION_NOTIFY_CONNECTION callback (cls: the watch): adds a connection at
 * MHD_CONNECTION_NOTIFY_STARTED (its socket context is its rg_watched), removes it at
 * MHD_CONNECTION_NOTIFY_CLOSED. */
void rg_conn_watch_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode code);

/* The connection's rg_watched (NULL when it has none, e.g. added while out of memory). */
rg_watched *rg_conn_watch_of(struct MHD_Connection *conn);

/* The request on e has arrived in full: no read deadline until rg_conn_watch_idle. */
void rg_conn_watch_busy(rg_conn_watch *w, rg_watched *e);

/* The answer on e has been sent: the next request's deadline counts from now. */
void rg_conn_watch_idle(rg_conn_watch *w, rg_watched *e);
#endif
