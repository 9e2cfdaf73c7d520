/* The request read deadline; see conn_watch.h. */
#include "server/conn_watch.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/error.h"
#include "server/engine.h"

struct rg_watched {
	int fd;
	double start_ms;       /* when the current request began to arrive (rg_now_ms) */
	bool busy;             /* received in full, being processed: no deadline */
	bool shut;             /* the sweeper shut the socket down */
	rg_watched *prev, *next;
};

struct rg_conn_watch {
	double timeout_ms;
	pthread_mutex_t mu;
	pthread_cond_t cv;     /* CLOCK_MONOTONIC: new work for a sweeper asleep without end */
	bool sleeping;         /* the sweeper waits without a deadline */
	bool stop;
	rg_watched *head;
	pthread_t thread;
};

/* Shut down every connection past its deadline; returns the earliest deadline still ahead
 * (0 when none). Lock held. */
static double sweep(rg_conn_watch *w, double now)
{
	double next = 0;

	for (rg_watched *e = w->head; e; e = e->next) {
		double due = e->start_ms + w->timeout_ms;

		if (e->busy || e->shut)
			continue;
		if (due <= now) {
			shutdown(e->fd, SHUT_RDWR);
			e->shut = true;
		} else if (!next || due < next) {
			next = due;
		}
	}
	return next;
}

static void *sweeper(void *arg)
{
	rg_conn_watch *w = arg;

	pthread_mutex_lock(&w->mu);
	while (!w->stop) {
		double next = sweep(w, rg_now_ms());

		if (!next) {
			w->sleeping = true;
			pthread_cond_wait(&w->cv, &w->mu);
			w->sleeping = false;
		} else {
			struct timespec ts;

			next += 1; /* past the deadline, not just before it */
			ts.tv_sec = (time_t)(next / 1e3);
			ts.tv_nsec = (long)((next - (double)ts.tv_sec * 1e3) * 1e6);
			pthread_cond_timedwait(&w->cv, &w->mu, &ts);
		}
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

rg_conn_watch *rg_conn_watch_create(int read_timeout_s, rg_status *st)
{
	rg_conn_watch *w = calloc(1, sizeof(*w));
	pthread_condattr_t ca;

	if (!w) {
		*st = rg_errorf(RG_ERR_OOM, "out of memory");
		return NULL;
	}
	w->timeout_ms = read_timeout_s * 1e3;
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* rg_now_ms's clock */
	pthread_cond_init(&w->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&w->thread, NULL, sweeper, w) != 0) {
		*st = rg_errorf(RG_ERR_INTERNAL, "cannot start the connection sweeper thread");
		goto out_free;
	}
	pthread_setname_np(w->thread, "rg-conn-sweep");
	*st = RG_OK;
	return w;
out_free:
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w);
	return NULL;
}

void rg_conn_watch_free(rg_conn_watch *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	while (w->head) { /* none after MHD_stop_daemon; kept safe regardless */
		rg_watched *e = w->head;

		w->head = e->next;
		free(e);
	}
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

/* A deadline now exists: wake a sweeper that sleeps without one. Lock held. */
static void wake(rg_conn_watch *w)
{
	if (w->sleeping)
		pthread_cond_signal(&w->cv);
}

void rg_conn_watch_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	rg_conn_watch *w = cls;
	rg_watched *e = *socket_context;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

		e = calloc(1, sizeof(*e));
		if (!e || !ci) { /* unwatched: the idle timeout still applies */
			free(e);
			return;
		}
		e->fd = ci->connect_fd;
		e->start_ms = rg_now_ms();
		pthread_mutex_lock(&w->mu);
		e->next = w->head;
		if (w->head)
			w->head->prev = e;
		w->head = e;
		wake(w);
		pthread_mutex_unlock(&w->mu);
		*socket_context = e;
		return;
	}
	if (!e) /* MHD_CONNECTION_NOTIFY_CLOSED */
		return;
	pthread_mutex_lock(&w->mu);
	if (e->prev)
		e->prev->next = e->next;
	else
		w->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	pthread_mutex_unlock(&w->mu);
	free(e);
	*socket_context = NULL;
}

rg_watched *rg_conn_watch_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

void rg_conn_watch_busy(rg_conn_watch *w, rg_watched *e)
{
	if (!w || !e)
		return;
	pthread_mutex_lock(&w->mu);
	e->busy = true;
	pthread_mutex_unlock(&w->mu);
}

void rg_conn_watch_idle(rg_conn_watch *w, rg_watched *e)
{
	if (!w || !e)
		return;
	pthread_mutex_lock(&w->mu);
	e->busy = false;
	e->start_ms = rg_now_ms();
	wake(w);
	pthread_mutex_unlock(&w->mu);
}
