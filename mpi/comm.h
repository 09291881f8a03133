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

/* The end of an agreement whose statuses the caller gathered in a collective of its own (worst:
 * the largest of them): comm_agree's outcome and message. Local. */
int comm_agreed(int status, int worst);

/* Whether MPI takes device pointers (--cuda-aware-mpi, settings.h): auto, the default, asks the
 * library (MPIX_Query_cuda_support, Open MPI's extension; no where it cannot be asked); on and
 * off say so without asking. */
int comm_cuda_aware(void);

/* This rank's index among the ranks of comm on its node, and their number (so that ranks
 * sharing a node take different GPUs). */
int comm_local(MPI_Comm comm, int *local_rank, int *local_size);

#endif
