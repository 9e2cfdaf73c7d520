/* ragged's one CPU thread pool: a parallel-for whose wait policy ragged controls.
 *
 * Every CPU kernel (src/ops/cpu/) runs its work through the process-wide pool returned by
 * rg_threadpool_global(); the BLAS library is kept single-threaded and is called from inside the
 * pool's tasks, so the process has one set of math threads, never two that fight (OpenMP teams
 * next to OpenBLAS's own pthreads was the cause of issue 7's 30 GFLOP/s on 16 cores).
 *
 * Wait policy: after a parallel-for a worker spins for spin_us microseconds (the next op of the
 * same forward pass usually arrives within a few) and then sleeps on a futex, so an idle server
 * leaves its cores to the HTTP threads. Sizes come from the CPUs this process may use
 * (sched_getaffinity and the cgroup CPU quota), not from the host's core count. */
#ifndef RG_CORE_THREADPOOL_H
#define RG_CORE_THREADPOOL_H
#include "ragged.h"

typedef struct rg_threadpool rg_threadpool;

/* A task body: runs task index `task` in [0, n_tasks) on pool thread `thread` in
 * [0, rg_threadpool_size(pool)) (0 is the calling thread). Tasks of one run are independent. */
typedef void (*rg_threadpool_fn)(void *ctx, int task, int thread);

/* CPUs this process may use: the affinity mask's count, capped by a cgroup v2 cpu.max or v1
 * cfs quota (rounded up), at least 1. */
int rg_cpu_usable_count(void);

/* Create a pool of n_threads threads in all (the caller of rg_threadpool_run counts as one, so
 * n_threads - 1 workers are started). n_threads <= 0: rg_cpu_usable_count(). spin_us < 0: the
 * default (RAGGED_SPIN_US, else 100). Returns NULL with *st = RG_ERR_OOM (or RG_ERR_INTERNAL
 * when a thread cannot start) and the reason in rg_last_error(). Free with
 * rg_threadpool_free. */
rg_threadpool *rg_threadpool_create(int n_threads, int spin_us, rg_status *st);

/* Stop and join the workers, then free. Accepts NULL. No run may be in progress. */
void rg_threadpool_free(rg_threadpool *pool);

/* Threads in the pool, the caller included (>= 1). */
int rg_threadpool_size(const rg_threadpool *pool);

/* Run fn(ctx, t, thread) for every t in [0, n_tasks), spread dynamically over the pool's
 * threads; returns when all have finished. Concurrent runs from different threads are
 * serialised; a run started from inside a task (nested) executes inline on that thread. Cheap
 * cases (n_tasks <= 1, a one-thread pool) execute inline without waking anyone. */
void rg_threadpool_run(rg_threadpool *pool, int n_tasks, rg_threadpool_fn fn, void *ctx);

/* The process-wide pool used by the CPU kernels, created on first use with
 * RAGGED_NUM_THREADS threads (else rg_cpu_usable_count()) and RAGGED_SPIN_US. It also sets the
 * BLAS library to one thread. Never NULL: if the pool cannot be created, a one-thread pool that
 * runs everything inline is returned. Lives until the process exits. */
rg_threadpool *rg_threadpool_global(void);
#endif
