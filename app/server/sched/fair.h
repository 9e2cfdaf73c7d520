/* Fair order of the server's queue: weighted fair queueing by finish tags over an emulated
 * fluid (GPS) server (Demers, Keshav, Shenker, SIGCOMM'89; Parekh and Gallager, ToN 1993),
 * self-clocked by the work actually served (the fluid server advances by the estimated time of
 * what the devices were given, not by the wall clock, so estimates that leave out a batch's
 * fixed cost, or err, cannot make it drift ahead of the real queue: Golestani, INFOCOM'94).
 * Policy only, no clock of its own: the caller passes the time (ms, any monotonic clock, or a
 * simulated one in tests).
 *
 * Each job (one request's sequences) is a flow. The fluid server serves every backlogged flow at
 * once, each getting 1/n of the service (n backlogged flows), and its virtual time V advances
 * by w/n for w ms of work served. A job arriving starts at S = V; its k-th piece (sequence) is
 * stamped with the finish tag S + (estimated time of pieces 1..k), and the flow stays backlogged
 * until V reaches its last tag. Serving the queue smallest stamp first then gives every job its
 * fair share whatever the number of others: a short job arriving behind N long ones gets the
 * tag V + (its own time), below every queued piece of the long ones once its time is below one
 * of their pieces, so it runs in the next batch (WFQ's bound: it ends no later than in the fluid
 * server, after (N+1) x its own time of service, plus about one batch). A long job keeps
 * advancing at 1/(N+1) of the service (no starvation).
 * (The stamping this replaces gave each job its arrival time as start, so a job that had waited
 * t ms in a queue of N long ones was credited t ms of its own service: a short request arriving
 * at t waited for about N x t ms of theirs.)
 *
 * Serial mode (params.serial_ms > 0, the server's `--admission count`, where nothing refuses a
 * job that cannot meet its deadline): jobs whose own work is above serial_ms form ONE flow
 * together, in arrival order: a long job starts when the one before it is done (finish what
 * was started before starting more; N long jobs under a deadline then end one after another
 * instead of all at N times their own time), while short jobs (each its own flow) still pass
 * them as above.
 *
 * When no flow is backlogged V is moved up to the clock, so stamps stay near arrival times (a
 * lazy scheduler reading them as arrival times waits about the job's own estimated time
 * longer). Not thread-safe: the caller's lock guards it. */
#ifndef RG_SERVER_SCHED_FAIR_H
#define RG_SERVER_SCHED_FAIR_H
#include <stdbool.h>
#include <stddef.h>
#include "ragged.h"

typedef struct rg_fair_params {
	double serial_ms; /* > 0: jobs whose work (sum of piece_ms) is above it form one flow in
			   * arrival order (see above); 0: every job is its own flow */
} rg_fair_params;

typedef struct rg_fair {
	rg_fair_params p;
	double v;          /* virtual time V, ms */
	double *fin;       /* (n) last finish tag of each backlogged flow, descending */
	size_t n, cap;
	double serial_end; /* last finish tag of the serial flow; -INFINITY: none yet */
} rg_fair;

/* Start with V = now_ms and no flow. RG_ERR_INVALID_INPUT when serial_ms < 0 or not finite. */
rg_status rg_fair_init(rg_fair *f, const rg_fair_params *p, double now_ms);
void rg_fair_free(rg_fair *f); /* accepts a zeroed struct */

/* Stamp a job arriving at now_ms whose n >= 1 pieces take piece_ms[0..n) (>= 0, finite) each:
 * stamps (n) gets the finish tag of each piece, non-decreasing. The caller must later report
 * each piece's piece_ms through rg_fair_served when it hands the piece to a device (or the job
 * leaves). *flow_end (may be NULL) gets the token to pass to rg_fair_leave if the job ends
 * early: its last tag, or NAN for a job of the serial flow (it cannot leave: the jobs behind it
 * are stamped after it). RG_ERR_INVALID_INPUT (n < 1, a bad piece time), RG_ERR_OOM (nothing
 * changed then). */
rg_status rg_fair_stamp(rg_fair *f, double now_ms, const double *piece_ms, int n, double *stamps,
			double *flow_end);

/* work_ms (>= 0) of stamped pieces went to the devices: advance the fluid server by it. */
void rg_fair_served(rg_fair *f, double work_ms);

/* A job ended before its pieces were all served (expired, dropped, failed): its flow stops
 * counting. flow_end: what rg_fair_stamp gave; NAN or a flow already finished: nothing to do. */
void rg_fair_leave(rg_fair *f, double flow_end);

/* The virtual time V now. */
double rg_fair_vtime(const rg_fair *f);

/* Flows backlogged in the fluid server. */
size_t rg_fair_backlogged(const rg_fair *f);
#endif
