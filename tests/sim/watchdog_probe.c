/* watchdog_probe.c - the watchdog's region (mpi/watchdog.h) around a collective that cannot be
 * polled, on two ranks: rank 1 stops itself (SIGSTOP, as a hung node) and rank 0 waits for it in
 * MPI_Barrier inside a region named "the probe's barrier". The watchdog's thread must end the job
 * after the limit (argv[1] s) with exit status 10 and rank 0's line naming rank 1 and the region
 * (check_watchdog.sh). Exits 1 if the barrier ever returns. */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "watchdog.h"

int main(int argc, char **argv) {
  int provided = 0, rank = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return 2;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (provided < MPI_THREAD_MULTIPLE || argc != 2) {
    fprintf(stderr, "watchdog_probe: %s\n", argc != 2 ? "usage: watchdog_probe LIMIT_S" : "no MPI_THREAD_MULTIPLE");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  if (watchdog_set(MPI_COMM_WORLD, atof(argv[1])) != 0) MPI_Abort(MPI_COMM_WORLD, 2);
  watchdog_where(0, 0);
  if (rank == 1) raise(SIGSTOP);
  watchdog_enter("the probe's barrier");
  MPI_Barrier(MPI_COMM_WORLD);
  watchdog_leave();
  fprintf(stderr, "watchdog_probe: rank %d passed the barrier\n", rank);
  MPI_Finalize();
  return 1;
}
