/* ragged's CPU thread pool (src/core/threadpool.c): every task runs exactly once, on a valid
 * thread index; nested runs execute inline; concurrent callers are serialised; a pool that has
 * slept (spin 0) wakes for the next run; sizes follow the affinity mask. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/threadpool.h"

#define N_TASKS 10007

struct count_job {
	_Atomic int hits[N_TASKS];
	_Atomic int bad_thread;
	int n_threads;
};

static void count_task(void *ctx, int task, int thread)
{
	struct count_job *j = ctx;

	atomic_fetch_add(&j->hits[task], 1);
	if (thread < 0 || thread >= j->n_threads)
		atomic_store(&j->bad_thread, 1);
}

static void run_and_check(rg_threadpool *p, int n_tasks)
{
	struct count_job *j = calloc(1, sizeof(*j));

	assert_non_null(j);
	j->n_threads = rg_threadpool_size(p);
	rg_threadpool_run(p, n_tasks, count_task, j);
	for (int t = 0; t < N_TASKS; t++)
		assert_int_equal(atomic_load(&j->hits[t]), t < n_tasks ? 1 : 0);
	assert_int_equal(atomic_load(&j->bad_thread), 0);
	free(j);
}

static void test_every_task_once(void **state)
{
	rg_status st;
	rg_threadpool *p = rg_threadpool_create(4, 50, &st);

	(void)state;
	assert_non_null(p);
	assert_int_equal(st, RG_OK);
	assert_int_equal(rg_threadpool_size(p), 4);
	for (int rep = 0; rep < 50; rep++)
		run_and_check(p, rep % 5 == 0 ? 1 : rep % 5 == 1 ? 0 : N_TASKS - rep);
	rg_threadpool_free(p);
	rg_threadpool_free(NULL);
}

static void test_wakes_after_sleep(void **state)
{
	rg_status st;
	/* spin 0: every worker goes to sleep on the futex between runs */
	rg_threadpool *p = rg_threadpool_create(3, 0, &st);

	(void)state;
	assert_non_null(p);
	for (int rep = 0; rep < 20; rep++) {
		usleep(2000);
		run_and_check(p, 1000 + rep);
	}
	rg_threadpool_free(p);
}

struct nest_job {
	rg_threadpool *p;
	_Atomic int inner;
};

static void inner_task(void *ctx, int task, int thread)
{
	struct nest_job *j = ctx;

	/* a nested run executes inline on the calling thread, so thread is 0 here */
	if (thread == 0)
		atomic_fetch_add(&j->inner, 1);
}

static void outer_task(void *ctx, int task, int thread)
{
	struct nest_job *j = ctx;

	rg_threadpool_run(j->p, 3, inner_task, j);
}

static void test_nested_runs_inline(void **state)
{
	rg_status st;
	struct nest_job j = {0};

	(void)state;
	j.p = rg_threadpool_create(4, 50, &st);
	assert_non_null(j.p);
	rg_threadpool_run(j.p, 64, outer_task, &j);
	assert_int_equal(atomic_load(&j.inner), 64 * 3);
	rg_threadpool_free(j.p);
}

static void *caller_main(void *arg)
{
	rg_threadpool *p = arg;

	for (int rep = 0; rep < 30; rep++)
		run_and_check(p, 500 + rep);
	return NULL;
}

static void test_concurrent_callers(void **state)
{
	rg_status st;
	rg_threadpool *p = rg_threadpool_create(3, 20, &st);
	pthread_t th[3];

	(void)state;
	assert_non_null(p);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&th[i], NULL, caller_main, p), 0);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	rg_threadpool_free(p);
}

static void test_size_follows_affinity(void **state)
{
	cpu_set_t old, one;
	int cpu;
	rg_status st;
	rg_threadpool *p;

	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof(old), &old), 0);
	assert_true(rg_cpu_usable_count() >= 1);
	assert_true(rg_cpu_usable_count() <= CPU_COUNT(&old));
	for (cpu = 0; cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &old); cpu++)
		;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	assert_int_equal(sched_setaffinity(0, sizeof(one), &one), 0);
	assert_int_equal(rg_cpu_usable_count(), 1);
	p = rg_threadpool_create(0, 10, &st); /* 0: the usable CPUs, so one thread: inline */
	assert_non_null(p);
	assert_int_equal(rg_threadpool_size(p), 1);
	run_and_check(p, 100);
	rg_threadpool_free(p);
	assert_int_equal(sched_setaffinity(0, sizeof(old), &old), 0);
}

static void test_global_pool(void **state)
{
	rg_threadpool *g = rg_threadpool_global();

	(void)state;
	assert_non_null(g);
	assert_ptr_equal(g, rg_threadpool_global());
	assert_true(rg_threadpool_size(g) >= 1);
	run_and_check(g, 777);
}

/* Many short runs back to back on more workers than cores (oversubscribed: a worker is often
 * descheduled while the caller takes its tasks and moves on): every task of every run runs
 * once, inside its own run (never after the caller has returned and started the next job). */
struct tiny_job {
	int id;
	_Atomic int hits[5];
};

static _Atomic int g_current_job, g_stray, g_total;

static void tiny_task(void *ctx, int task, int thread)
{
	struct tiny_job *j = ctx;

	(void)thread;
	if (atomic_load(&g_current_job) != j->id)
		atomic_fetch_add(&g_stray, 1);
	atomic_fetch_add(&j->hits[task], 1);
	atomic_fetch_add(&g_total, 1);
}

static void test_short_runs_oversubscribed(void **state)
{
	rg_status st;
	rg_threadpool *p = rg_threadpool_create(8, 0, &st);
	long want = 0;

	(void)state;
	assert_non_null(p);
	for (int r = 0; r < 20000; r++) {
		struct tiny_job j = {.id = r};
		const int n = 2 + r % 4;

		atomic_store(&g_current_job, r);
		rg_threadpool_run(p, n, tiny_task, &j);
		atomic_store(&g_current_job, -1);
		for (int t = 0; t < n; t++)
			assert_int_equal(atomic_load(&j.hits[t]), 1);
		want += n;
	}
	rg_threadpool_free(p);
	assert_int_equal(atomic_load(&g_stray), 0);
	assert_int_equal(atomic_load(&g_total), want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_task_once),
		cmocka_unit_test(test_wakes_after_sleep),
		cmocka_unit_test(test_nested_runs_inline),
		cmocka_unit_test(test_concurrent_callers),
		cmocka_unit_test(test_size_follows_affinity),
		cmocka_unit_test(test_global_pool),
		cmocka_unit_test(test_short_runs_oversubscribed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
