/* ragged's CPU thread pool (see threadpool.h): persistent workers, a generation counter they
 * wait on (bounded spin, then futex), an atomic claim word (job, next task) for dynamic
 * scheduling, and a count of finished tasks the caller spins on. One run at a time per pool (a
 * mutex serialises callers); nested runs execute inline.
 *
 * A run ends when its tasks are done, not when every worker has looked at it: on a shared or
 * oversubscribed host a descheduled worker used to hold up every run (a decode step is ~300
 * runs) until the scheduler gave it a slice; now the caller takes the tasks it does not.
 * A late worker may still hold the claim word of an older job: the caller first closes the word
 * ((new job, CLOSED)), then writes the job's fields, then opens it ((new job, 0)); the fences
 * make a worker that read any new field see the closed word, so its claim of the old job fails.
 * A claim never succeeds for a task index past the job's own count. */
#include "core/threadpool.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/tuning.h"

#define RG_POOL_MAX_THREADS 256 /* RAGGED_NUM_THREADS's upper bound in core/tuning.c too */

struct rg_threadpool {
	int spin_us;
	pthread_t *workers;
	int n_started;
	pthread_mutex_t run_lock; /* one run at a time */

	/* the current job, written by the caller between closing and opening the claim word */
	_Atomic(rg_threadpool_fn) fn;
	void *_Atomic ctx;
	_Atomic int n_tasks;
	_Atomic uint64_t claim;	   /* (job << 32) | next task index; CLOSED while fields change */
	_Atomic unsigned gen;	   /* bumped once per job; workers wait for it to change */
	_Atomic int finished;	   /* tasks of the current job run to completion */
	_Atomic int sleepers;	   /* workers in (or about to enter) futex_wait */
	_Atomic int stop;
};

static _Thread_local int tls_in_pool; /* this thread is executing a pool task */

static void futex_wait(_Atomic unsigned *addr, unsigned val)
{
	syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic unsigned *addr)
{
	syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

#define CLAIM_CLOSED 0xffffffffu

/* Claim and run tasks of the current job until none is left (or the word is closed). */
static void drain(rg_threadpool *p, int thread)
{
	for (;;) {
		uint64_t v = atomic_load_explicit(&p->claim, memory_order_acquire);
		const uint32_t t = (uint32_t)v;
		rg_threadpool_fn fn;
		void *ctx;
		int n;

		if (t == CLAIM_CLOSED)
			return;
		fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
		ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
		n = atomic_load_explicit(&p->n_tasks, memory_order_relaxed);
		/* pairs with the caller's release fence: fields of a newer job => the CAS sees its
		 * closed word and fails */
		atomic_thread_fence(memory_order_acquire);
		if (t >= (uint32_t)n)
			return;
		if (!atomic_compare_exchange_weak_explicit(&p->claim, &v, v + 1, memory_order_acq_rel,
							   memory_order_relaxed))
			continue;
		fn(ctx, (int)t, thread);
		atomic_fetch_add_explicit(&p->finished, 1, memory_order_release);
	}
}

struct worker_arg {
	rg_threadpool *pool;
	int thread;
};

static void *worker_main(void *arg)
{
	struct worker_arg *wa = arg;
	rg_threadpool *p = wa->pool;
	const int thread = wa->thread;
	/* gen was 0 when the pool was created: a run that starts before this thread does is seen */
	unsigned seen = 0;

	free(wa);
	tls_in_pool = 1;
	for (;;) {
		unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);

		if (g == seen) {
			/* bounded spin, then sleep until the generation changes */
			double t0 = now_us();
			int k = 0;

			while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
				cpu_relax();
				if ((++k & 255) == 0 && now_us() - t0 > (double)p->spin_us) {
					/* seq_cst pairs with the caller's gen bump + sleepers
					 * load: either it sees us and wakes us, or the futex
					 * sees the new generation and returns at once */
					atomic_fetch_add(&p->sleepers, 1);
					futex_wait(&p->gen, seen);
					atomic_fetch_sub(&p->sleepers, 1);
					t0 = now_us();
				}
			}
		}
		seen = g;
		if (atomic_load_explicit(&p->stop, memory_order_acquire))
			return NULL;
		drain(p, thread);
	}
}

static int cgroup_quota_cpus(void)
{
	FILE *f;
	long long quota = -1, period = 0;
	char buf[128];

	/* cgroup v2: "max 100000" or "200000 100000" */
	f = fopen("/sys/fs/cgroup/cpu.max", "r");
	if (f) {
		if (fgets(buf, sizeof(buf), f) && strncmp(buf, "max", 3) != 0)
			sscanf(buf, "%lld %lld", &quota, &period);
		fclose(f);
	} else {
		f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
		if (f) {
			if (fscanf(f, "%lld", &quota) != 1)
				quota = -1;
			fclose(f);
		}
		f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
		if (f) {
			if (fscanf(f, "%lld", &period) != 1)
				period = 0;
			fclose(f);
		}
	}
	if (quota <= 0 || period <= 0)
		return 0;
	return (int)((quota + period - 1) / period);
}

int rg_cpu_usable_count(void)
{
	cpu_set_t set;
	int n = 0, q;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = CPU_COUNT(&set);
	if (n <= 0) {
		long c = sysconf(_SC_NPROCESSORS_ONLN);
		n = c > 0 ? (int)c : 1;
	}
	q = cgroup_quota_cpus();
	if (q > 0 && q < n)
		n = q;
	return n < 1 ? 1 : n;
}

rg_threadpool *rg_threadpool_create(int n_threads, int spin_us, rg_status *st)
{
	rg_threadpool *p;
	rg_status dummy;

	if (!st)
		st = &dummy;
	if (n_threads <= 0)
		n_threads = rg_cpu_usable_count();
	if (n_threads > RG_POOL_MAX_THREADS)
		n_threads = RG_POOL_MAX_THREADS;
	if (spin_us < 0)
		spin_us = rg_tuning_int(RG_TUNE_SPIN_US); /* RAGGED_SPIN_US, default 100 */
	p = calloc(1, sizeof(*p));
	if (!p || !(p->workers = calloc((size_t)n_threads, sizeof(pthread_t)))) {
		free(p);
		*st = rg_errorf(RG_ERR_OOM, "thread pool: out of memory");
		return NULL;
	}
	p->spin_us = spin_us;
	pthread_mutex_init(&p->run_lock, NULL);
	for (int i = 1; i < n_threads; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));
		int rc;

		if (!wa) {
			*st = rg_errorf(RG_ERR_OOM, "thread pool: out of memory");
			goto out_free;
		}
		wa->pool = p;
		wa->thread = i;
		rc = pthread_create(&p->workers[i - 1], NULL, worker_main, wa);
		if (rc != 0) {
			free(wa);
			*st = rg_errorf(RG_ERR_INTERNAL, "thread pool: cannot start thread %d of %d: %s",
					i, n_threads, strerror(rc));
			goto out_free;
		}
		p->n_started++;
		{
			char name[24]; /* for per-thread CPU accounting (top -H) */

			snprintf(name, sizeof(name), "rg-pool-%d", i);
			name[15] = '\0'; /* the kernel's limit */
			pthread_setname_np(p->workers[i - 1], name);
		}
	}
	*st = RG_OK;
	return p;
out_free:
	rg_threadpool_free(p);
	return NULL;
}

void rg_threadpool_free(rg_threadpool *p)
{
	if (!p)
		return;
	atomic_store_explicit(&p->stop, 1, memory_order_release);
	atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
	futex_wake_all(&p->gen);
	for (int i = 0; i < p->n_started; i++)
		pthread_join(p->workers[i], NULL);
	pthread_mutex_destroy(&p->run_lock);
	free(p->workers);
	free(p);
}

int rg_threadpool_size(const rg_threadpool *p)
{
	return p ? p->n_started + 1 : 1;
}

static void run_inline(int n_tasks, rg_threadpool_fn fn, void *ctx)
{
	for (int t = 0; t < n_tasks; t++)
		fn(ctx, t, 0);
}

void rg_threadpool_run(rg_threadpool *p, int n_tasks, rg_threadpool_fn fn, void *ctx)
{
	uint64_t job;

	if (n_tasks <= 0)
		return;
	if (!p || p->n_started == 0 || n_tasks == 1 || tls_in_pool) {
		run_inline(n_tasks, fn, ctx);
		return;
	}
	pthread_mutex_lock(&p->run_lock);
	job = (uint64_t)(atomic_load_explicit(&p->gen, memory_order_relaxed) + 1u) << 32;
	atomic_store_explicit(&p->claim, job | CLAIM_CLOSED, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
	atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
	atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_relaxed);
	atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
	atomic_store_explicit(&p->claim, job, memory_order_release);
	atomic_fetch_add(&p->gen, 1);
	/* a worker that is still spinning sees the new generation itself */
	if (atomic_load(&p->sleepers) > 0)
		futex_wake_all(&p->gen);
	tls_in_pool = 1;
	drain(p, 0);
	tls_in_pool = 0;
	/* the stragglers are finishing their last task: spin, then yield the core (on an
	 * oversubscribed machine a descheduled worker needs it more than we do) */
	for (int k = 0; atomic_load_explicit(&p->finished, memory_order_acquire) < n_tasks; k++) {
		if (k < 4096)
			cpu_relax();
		else
			sched_yield();
	}
	pthread_mutex_unlock(&p->run_lock);
}

static rg_threadpool *g_pool;
static rg_threadpool g_inline_pool; /* no workers: every run inline */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void global_init(void)
{
	const int n = rg_tuning_int(RG_TUNE_NUM_THREADS); /* 0: rg_cpu_usable_count() */
	rg_status st;

	/* The BLAS runs inside our tasks, one call per tile: it must not start threads of its own. */
	openblas_set_num_threads(1);
	/* Never freed: a thread may still be inside a run when the process exits. */
	g_pool = rg_threadpool_create(n, -1, &st);
}

rg_threadpool *rg_threadpool_global(void)
{
	pthread_once(&g_once, global_init);
	return g_pool ? g_pool : &g_inline_pool;
}
