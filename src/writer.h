/* writer.h - output written behind the compute: a thread of this rank that runs the run's write
 * jobs (frames, checkpoints) in the order they were queued, while the main thread steps on.
 *
 * Jobs are collective: every rank queues the same jobs in the same order, and a job's MPI calls
 * (a frame's preview) go over the writer's own communicator (a duplicate of the run's), so that
 * they never meet the step's messages. Jobs make no HDF5 call (HDF5 is not thread-safe): the main
 * thread begins and ends the files, the jobs write their rows (h5rows.h).
 *
 * Bounds: the writer holds no buffers of its own; each job's data belongs to its caller, who
 * waits for the job (writer_wait) before reusing them, so the caller's buffers bound what is in
 * flight and a disk slower than the GPU makes the run wait (back-pressure). At most WRITER_QUEUE
 * jobs are queued; writer_submit waits for room beyond that.
 *
 * Stalls: with the watchdog (watchdog.h: several ranks), a wait on the writer has its limit too
 * (the watchdog's, or 4 times the longest job so far): a job stuck in a collective write that a
 * stopped rank never joins ends the job with exit status 10 rather than hanging.
 *
 * Failures: the first job that fails stops the writer: it and every job queued after it report
 * that failure (its message, and whether the ranks agreed on it), and none of them runs, so the
 * files written before it stay as they are and nothing after it is written.
 *
 * Where MPI does not give MPI_THREAD_MULTIPLE (MPI_Query_thread), or DRIFT_WRITER_INLINE is set
 * (a test hook), there is no thread: writer_submit runs the job at once, in the caller's thread,
 * with the same files as a result. */
#ifndef DRIFT_WRITER_H
#define DRIFT_WRITER_H

#include <mpi.h>
#include <stdint.h>

enum { WRITER_QUEUE = 8 };

typedef struct writer writer;

/* A job: writes ctx's data, collectively over comm; returns a status (error.h). */
typedef int (*writer_fn)(MPI_Comm comm, void *ctx);

/* Collective over comm (duplicated). Starts the thread where MPI allows it. */
int writer_create(MPI_Comm comm, writer **out);
/* Queues fn(comm, ctx); *ticket names it for writer_wait. Tickets count up from 0. */
int writer_submit(writer *w, writer_fn fn, void *ctx, uint64_t *ticket);
/* Waits until job ticket has run; returns its status. On failure the message is recorded in
 * this thread (dr_fail), marked agreed where the ranks agreed on it in the writer. */
int writer_wait(writer *w, uint64_t ticket);
/* A job's mark that part of its work is done (a frame's snapshot fetched, which the next frame
 * may then take): sets *flag under the writer's lock and wakes its waiters. From a job. */
void writer_signal(writer *w, int *flag);
/* Waits until *flag is set (writer_signal) or job ticket has ended (run, or not run after an
 * earlier job's failure), with writer_wait's limit where the watchdog runs. */
void writer_wait_flag(writer *w, uint64_t ticket, const int *flag);
/* Waits for every job queued; returns the first failure's status, as writer_wait. */
int writer_drain(writer *w);
/* Whether jobs run behind the caller (1) or in writer_submit (0). */
int writer_threaded(const writer *w);
/* Seconds the jobs ran, and seconds callers spent in writer_wait, writer_drain and
 * writer_submit waiting for the writer. */
double writer_busy_seconds(const writer *w);
double writer_wait_seconds(const writer *w);
/* Waits for the jobs queued (their failures are dropped: call writer_drain first to see them),
 * ends the thread, frees the communicator. Collective. */
void writer_destroy(writer **w);

#endif
