/* h5_errors.c - a failed write of a rows file (io/h5rows.h, as frames and checkpoints are
 * written) says the system's reason and the file's final name.
 *
 *   h5_errors DIR REASON
 *
 * Writes DIR/probe_00000.h5 as frames and checkpoints are written (rank 0's skeleton through
 * HDF5, each rank's rows of one 4 MiB dataset by pwrite, synced, renamed), and expects it to fail:
 * DIR is a read-only mount (REASON "Read-only file system": the skeleton's H5Fcreate) or a tmpfs
 * of 1 MiB (REASON "No space left on device": the rows), which check_io_errors.sh sets up.
 * Checks: DR_EIO on every rank; the message of each rank that failed itself names
 * DIR/probe_00000.h5, says REASON, and names no temporary file and no source file (rank 0's
 * always); neither the file nor its temporary name is left. Collective: runs on any number of
 * ranks. */
#define _XOPEN_SOURCE 700
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "comm.h"
#include "h5rows.h"

enum { VALUES = 1 << 20 }; /* 4 MiB of floats */

/* begin, put, end of f with this rank's n values (io/h5rows.h); the first failure's status. */
static int write_probe(const char *dir, int rank, uint64_t n, const float *v, h5rows_file *f) {
  int st = h5rows_paths(rank, dir, "probe", 0, H5ROWS_SYNCED, "folder", f);
  st = comm_agree(MPI_COMM_WORLD, st);
  if (!st) st = h5rows_counts(MPI_COMM_WORLD, n, f);
  if (!st && rank == 0) {
    hid_t file = H5I_INVALID_HID;
    st = h5rows_create(f, &file);
    if (!st) st = h5rows_dataset(file, f, 0, "values", H5T_IEEE_F32LE, 1);
    st = h5rows_close(f, file, st);
  }
  if ((st = h5rows_share(MPI_COMM_WORLD, f, st))) return st;
  int fd = -1, put = h5rows_open(f, &fd);
  if (!put) put = h5rows_finish(f, fd, h5rows_put(fd, f, 0, v, sizeof *v, "values"));
  return h5rows_end(MPI_COMM_WORLD, f, put);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (argc != 3) {
    fprintf(stderr, "usage: %s DIR REASON\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const char *dir = argv[1], *reason = argv[2];
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  float *v = calloc(VALUES, sizeof *v);
  h5rows_file f;
  h5util_quiet();
  const int rc = write_probe(dir, rank, VALUES / (uint64_t)size, v, &f);
  const char *msg = dr_message();
  printf("h5_errors: rank %d: status %d: %s\n", rank, rc, rc ? msg : "(none)");
  CHECK(rc == DR_EIO, "status %d, expected %d (DR_EIO)", rc, DR_EIO);
  if (rc && (rank == 0 || !strstr(msg, "another rank failed"))) {
    CHECK(strstr(msg, f.final) != NULL, "the message does not name %s: %s", f.final, msg);
    CHECK(strstr(msg, reason) != NULL, "the message does not say '%s': %s", reason, msg);
    CHECK(strstr(msg, ".tmp") == NULL, "the message names the temporary file: %s", msg);
    CHECK(strstr(msg, ".c:") == NULL, "the message names a source file: %s", msg);
  }
  MPI_Barrier(MPI_COMM_WORLD); /* rank 0 has removed what it removes */
  CHECK(access(f.final, F_OK) != 0, "%s was left", f.final);
  CHECK(access(f.tmp, F_OK) != 0, "%s was left", f.tmp);
  free(v);
  MPI_Finalize();
  return failures_ ? 1 : 0;
}
