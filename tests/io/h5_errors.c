/* h5_errors.c - a failed HDF5 write says the system's reason and the file's final name.
 *
 *   h5_errors DIR REASON
 *
 * Writes DIR/probe.h5 through h5util_write_file (the MPI-IO driver, as frames and checkpoints
 * are) with one 4 MiB dataset, and expects it to fail: DIR is a read-only mount (REASON "Read-only
 * file system") or a tmpfs of 1 MiB (REASON "No space left on device"), which check_h5_errors.sh
 * sets up. Checks: DR_EIO; the message names DIR/probe.h5, says REASON, and names no temporary
 * file and no source file; neither DIR/probe.h5 nor DIR/.probe.h5.tmp is left. Collective: runs on
 * any number of ranks, every rank checks its own message. */
#define _XOPEN_SOURCE 700
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "h5util.h"

enum { VALUES = 1 << 20 }; /* 4 MiB of floats */

typedef struct job {
  const float *v;
  const char *path; /* for H5CK */
} job;

static int contents(hid_t file, void *ctx) {
  const job *j = ctx;
  const char *path = j->path;
  int st = 0;
  hid_t dxpl = H5I_INVALID_HID;
  H5CK(dxpl = H5Pcreate(H5P_DATASET_XFER), "H5Pcreate", "transfer properties");
  H5CK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio", "transfer properties");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const uint64_t n = VALUES / (uint64_t)size, offset = n * (uint64_t)rank;
  st = h5util_write_rows(file, "values", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, n * (uint64_t)size, offset, n, j->v,
                         H5P_DEFAULT, dxpl, path);
fail:
  H5_DROP(H5Pclose, dxpl);
  return st;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (argc != 3) {
    fprintf(stderr, "usage: %s DIR REASON\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const char *dir = argv[1], *reason = argv[2];
  char tmp[H5UTIL_PATH_MAX], final[H5UTIL_PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/.probe.h5.tmp", dir);
  snprintf(final, sizeof final, "%s/probe.h5", dir);
  float *v = calloc(VALUES, sizeof *v);
  job j = {.v = v, .path = tmp};
  const int rc = h5util_write_file(MPI_COMM_WORLD, tmp, final, 0, contents, &j);
  const char *msg = dr_message();
  printf("h5_errors: status %d: %s\n", rc, rc ? msg : "(none)");
  CHECK(rc == DR_EIO, "status %d, expected %d (DR_EIO)", rc, DR_EIO);
  if (rc) {
    CHECK(strstr(msg, final) != NULL, "the message does not name %s: %s", final, msg);
    CHECK(strstr(msg, reason) != NULL, "the message does not say '%s': %s", reason, msg);
    CHECK(strstr(msg, ".tmp") == NULL, "the message names the temporary file: %s", msg);
    CHECK(strstr(msg, ".c:") == NULL, "the message names a source file: %s", msg);
  }
  MPI_Barrier(MPI_COMM_WORLD); /* rank 0 has removed what it removes */
  CHECK(access(final, F_OK) != 0, "%s was left", final);
  CHECK(access(tmp, F_OK) != 0, "%s was left", tmp);
  free(v);
  MPI_Finalize();
  return failures_ ? 1 : 0;
}
