/* sanitize.h - what ThreadSanitizer must be told, where synchronisation it cannot see orders
 * drift's own memory accesses (sanitize.c holds the runtime's defaults).
 *
 * Open MPI is not instrumented: TSan sees none of the synchronisation inside it. A nonblocking
 * collective with a reduction of drift's own (the step vote's, sim_ranks.c) runs that function on
 * whichever thread drives MPI's progress, the writer's included, and its result is the main
 * thread's once the request completes (MPI's guarantee). So comm_allreduce releases its buffers
 * (dr_tsan_release) before it hands them to MPI and acquires the result (dr_tsan_acquire) once the
 * request completes, and the reduction acquires the buffers it is given and releases what it
 * wrote: the order MPI guarantees, told; TSan then checks everything else. Without
 * ThreadSanitizer both are nothing. */
#ifndef DRIFT_SANITIZE_H
#define DRIFT_SANITIZE_H

#if defined(__SANITIZE_THREAD__)
#define DRIFT_TSAN_ON 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DRIFT_TSAN_ON 1
#endif
#endif

#ifdef DRIFT_TSAN_ON
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define dr_tsan_acquire(p) __tsan_acquire((void *)(p))
#define dr_tsan_release(p) __tsan_release((void *)(p))
#else
#define dr_tsan_acquire(p) ((void)(p))
#define dr_tsan_release(p) ((void)(p))
#endif

#endif
