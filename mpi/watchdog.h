/* watchdog.h - a rank that stops answering ends the job (exit status 10) instead of hanging it.
 *
 * The run's waits on other ranks (the rank exchange, the step vote, the migration, a frame's and
 * a checkpoint's agreements) go through comm_wait, which polls instead of blocking; the calls that
 * block in a collective that cannot be polled (HDF5's collective file calls, on the main thread)
 * run inside a region (watchdog_enter, watchdog_leave) that a thread of the watchdog's times; the
 * frame writer's waits time themselves (writer.c). A rank that waits on another for longer than
 * the limit prints one line naming the rank(s) it waited for, the phase and the step, and ends the
 * whole job with MPI_Abort(DR_ESTALLED), so that a batch job restarts it from its last checkpoint
 * (published frames and checkpoints are whole: they are renamed into place when complete; only
 * temporary files may be left).
 *
 * The limit is the scene's parallel.watchdog_s, raised to WATCHDOG_FRAMES times the longest frame
 * this rank has seen (watchdog_frame), so that slow frames never trip it; a region's is raised to
 * WATCHDOG_FRAMES times the longest region too. */
#ifndef DRIFT_WATCHDOG_H
#define DRIFT_WATCHDOG_H

#include <mpi.h>

enum { WATCHDOG_FRAMES = 4 };

/* Collective over comm (duplicated for the roll call). Sets the limit (s; 0: no watchdog: comm_wait
 * blocks as MPI_Waitall does, regions are not timed) and starts the regions' thread;
 * watchdog_set(MPI_COMM_NULL, 0) stops it and lets go of the communicator. */
int watchdog_set(MPI_Comm comm, double seconds);
/* A frame took this long (wall-clock s, this rank): the limit becomes at least WATCHDOG_FRAMES
 * times the longest. */
void watchdog_frame(double seconds);
/* The frame and step the waits belong to, for the watchdog's line. */
void watchdog_where(int frame, unsigned long long step);
/* The limit now (s; 0: no watchdog). */
double watchdog_limit(void);

/* A region of the main thread that blocks in collective calls it cannot poll; phase names it in
 * the watchdog's line ("the checkpoint's file, created by all ranks together"), also where a
 * comm_wait inside it expires first. Regions do not nest; the thread looks at the open one four
 * times a second. */
void watchdog_enter(const char *phase);
void watchdog_leave(void);

/* A wait outside comm_wait passed its limit (s; the frame writer's, whose collective write another
 * rank never joins): the roll call, the line, MPI_Abort(DR_ESTALLED). Does not return; a second
 * caller (another thread's wait, expiring meanwhile) waits for the first's MPI_Abort. */
void watchdog_expire(const char *phase, double waited, double limit);

/* MPI_Waitall with the watchdog: waits for the n requests (statuses into st, or
 * MPI_STATUSES_IGNORE); peer[k] is the rank request k exchanges with, or NULL for a collective's
 * request (then the ranks that did not answer a roll call are named). phase names the wait in
 * the watchdog's line ("the step vote"). Returns 0 or comm_fail's status; never returns after the
 * limit. */
int comm_wait(MPI_Comm comm, int n, MPI_Request *req, MPI_Status *st, const int *peer, const char *phase);

/* MPI_Allreduce through comm_wait (MPI_Iallreduce). */
int comm_allreduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char *phase);

#endif
