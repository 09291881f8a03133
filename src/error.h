/* error.h - how failures travel up in drift.
 *
 * Every function that can fail returns an int status (0 = success). The place that detects a
 * failure records one user-facing message with dr_fail() and returns a non-zero status; callers
 * pass it up with DR_TRY(). Only main() prints the message and chooses the exit code.
 * Messages for bad input name the file and key; messages for failed library calls (MPI, HDF5,
 * CUDA, the C library) name the call and the system's reason. The source file and line of a
 * failure are kept apart (dr_where), for the trace (DRIFT_TRACE), not for the user's line. */
#ifndef DRIFT_ERROR_H
#define DRIFT_ERROR_H

#include <stddef.h>

enum {
  DR_OK = 0,
  DR_EINPUT = 2,    /* bad scene file or command line */
  DR_EIO = 3,       /* file system, HDF5 */
  DR_ENOMEM = 4,    /* host or device memory */
  DR_EMPI = 5,      /* MPI */
  DR_ECUDA = 6,     /* CUDA runtime or kernel */
  DR_EPHYSICS = 7,  /* NaN, Inf, runaway velocity */
  DR_EINTERNAL = 8, /* a bug in drift */
  DR_ESTOPPED = 9,  /* stopped by a signal (SIGTERM, SIGINT, SIGUSR1) after writing a checkpoint */
  DR_ESTALLED = 10  /* a rank stopped answering (comm.h's watchdog): restart from the last checkpoint */
};

/* Records the message (printf format) and returns code. The first message recorded since the
 * last dr_clear() wins: it is the one nearest to the cause. */
int dr_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same, prefixed with "call failed: "; file:line is kept for dr_where. */
int dr_fail_at(int code, const char *file, int line, const char *call, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* dr_fail, recording where in drift's source the failure was found (for dr_where). */
int dr_fail_place(int code, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
const char *dr_message(void);
/* "file:line" of the recorded failure where it was given (dr_fail_at, dr_fail_place), else "". */
const char *dr_where(void);
/* Forgets the message, and that it was agreed. */
void dr_clear(void);

/* Whether every rank knows of the failure recorded: set when the ranks agreed on a failure
 * (comm_agree, the per-step allreduce). main() ends a failure that only some ranks know of with
 * MPI_Abort, since the others may be waiting in a collective call. */
void dr_mark_agreed(void);
int dr_agreed(void);

/* Propagates a non-zero status from expr. */
#define DR_TRY(expr)                                                                               \
  do {                                                                                             \
    int dr_rc_ = (expr);                                                                           \
    if (dr_rc_) return dr_rc_;                                                                     \
  } while (0)

/* Allocation that fails with a message naming what was being allocated and how much. */
void *dr_malloc(size_t bytes, const char *what);
void *dr_calloc(size_t n, size_t size, const char *what);
#define DR_ALLOC(ptr, count, what)                                                                 \
  do {                                                                                             \
    (ptr) = dr_malloc(sizeof(*(ptr)) * (size_t)(count), (what));                                   \
    if (!(ptr) && (count) > 0) return DR_ENOMEM;                                                   \
  } while (0)
#define DR_ALLOC0(ptr, count, what)                                                                \
  do {                                                                                             \
    (ptr) = dr_calloc((size_t)(count), sizeof(*(ptr)), (what));                                    \
    if (!(ptr) && (count) > 0) return DR_ENOMEM;                                                   \
  } while (0)

#endif
