/* comm.h - drift's view of MPI: one rank per node, checked calls, and the few collectives the
 * time loop needs. The rank exchange (decomposition, shared blocks, migration) builds on this. */
#ifndef DRIFT_COMM_H
#define DRIFT_COMM_H

#include <mpi.h>

#include "error.h"

/* Wraps an MPI call: on failure records "MPI_Xxx failed (file:line): <MPI_Error_string>" and
 * returns DR_EMPI from the enclosing function. */
#define DR_MPI(call)                                                                               \
  do {                                                                                             \
    int dr_mpi_rc_ = (call);                                                                       \
    if (dr_mpi_rc_ != MPI_SUCCESS) return comm_fail(dr_mpi_rc_, __FILE__, __LINE__, #call);        \
  } while (0)

int comm_fail(int mpi_rc, const char *file, int line, const char *call);

/* Agrees on a status across comm: returns the first non-zero status of any rank (all ranks get
 * the same value, and ranks that succeeded get a message saying another rank failed). */
int comm_agree(MPI_Comm comm, int status);

/* The watchdog. The step loop's waits on other ranks (the rank exchange, the step vote, the
 * migration, a frame's status) go through comm_wait, which polls instead of blocking: a rank
 * that waits on another for longer than the limit prints one line naming the rank(s) it waited
 * for, the phase and the step, and ends the whole job with MPI_Abort(DR_ESTALLED), so that a
 * batch job restarts it from its last checkpoint (published frames and checkpoints are whole:
 * they are renamed into place when complete; only temporary files may be left).
 * The limit is the scene's parallel.watchdog_s, raised to COMM_WATCHDOG_FRAMES times the longest
 * frame this rank has seen (comm_watchdog_frame), so that slow frames never trip it. */
enum { COMM_WATCHDOG_FRAMES = 4 };
/* Collective over comm (duplicated for the roll call). Sets the limit (s; 0: no watchdog:
 * comm_wait blocks as MPI_Waitall does); comm_watchdog_set(MPI_COMM_NULL, 0) lets go of it. */
int comm_watchdog_set(MPI_Comm comm, double seconds);
/* A frame took this long (wall-clock s, this rank): the limit becomes at least
 * COMM_WATCHDOG_FRAMES times the longest. */
void comm_watchdog_frame(double seconds);
/* The frame and step the waits belong to, for the watchdog's line. */
void comm_watchdog_where(int frame, unsigned long long step);
/* The limit now (s). */
double comm_watchdog_limit(void);

/* MPI_Waitall with the watchdog: waits for the n requests (statuses into st, or
 * MPI_STATUSES_IGNORE); peer[k] is the rank request k exchanges with, or NULL for a collective's
 * request (then the ranks that did not answer a roll call are named). phase names the wait in
 * the watchdog's line ("the step vote"). Returns 0 or comm_fail's status; never returns after the
 * limit. */
int comm_wait(MPI_Comm comm, int n, MPI_Request *req, MPI_Status *st, const int *peer, const char *phase);

/* A wait outside comm_wait passed the limit (the frame writer's, whose collective write another
 * rank never joins): the roll call, the line, MPI_Abort(DR_ESTALLED). Does not return. */
void comm_watchdog_expire(const char *phase, double waited);

/* MPI_Allreduce through comm_wait (MPI_Iallreduce). */
int comm_allreduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char *phase);

/* Whether MPI takes device pointers (--cuda-aware-mpi, settings.h): auto, the default, asks the
 * library (MPIX_Query_cuda_support, Open MPI's extension; no where it cannot be asked); on and
 * off say so without asking. */
int comm_cuda_aware(void);

/* This rank's index among the ranks of comm on its node, and their number (so that ranks
 * sharing a node take different GPUs). */
int comm_local(MPI_Comm comm, int *local_rank, int *local_size);

#endif
