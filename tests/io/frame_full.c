/* frame_full.c - a disk that fills while a frame's rows are written: the allocation ahead of the
 * rows (h5rows.h) names the frame, the field and the system's reason, and nothing is left.
 *
 *   frame_full DIR
 *
 * DIR is a small empty tmpfs (check_io_errors.sh mounts one). Writes frame 1 (20,000 particles a
 * rank), begins frame 2 (its free-space check passes), then fills DIR with another file, as a
 * checkpoint written meanwhile would, and puts frame 2's rows as the run's writer does (the
 * allocation ahead started, the rows put in two chunks, joined) and ends it. Checks: DR_EIO on
 * every rank; the message of each rank that failed itself names DIR/frame_00002.h5, a field and
 * "No space left on device"; no frame 2 and no temporary file; frame 1 whole (the same bytes as
 * before); and once the room is back, frame 2 written the same way. With OMP_NUM_THREADS of two or
 * more the rows go through a mapping of their allocated space in memory. Collective: any number of
 * ranks. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "fill_fs.h"
#include "error.h"
#include "h5frame.h"

enum { PER_RANK = 20000 };

typedef struct rows {
  float x[3 * PER_RANK], v[3 * PER_RANK];
  uint64_t id[PER_RANK];
  int32_t material[PER_RANK], owner[PER_RANK];
} rows;

static void make(rows *r, int rank, int frame) {
  for (int i = 0; i < PER_RANK; ++i) {
    for (int a = 0; a < 3; ++a) r->x[3 * i + a] = 0.001f * (float)(i % 997) + (float)a, r->v[3 * i + a] = (float)frame;
    r->id[i] = (uint64_t)rank * PER_RANK + (uint64_t)i;
    r->material[i] = 0;
    r->owner[i] = rank * 256;
  }
}

/* Frame `frame` of r, as the run's writer puts it: begun, its allocation ahead, two chunks, end. */
static int write_frame(const char *dir, int frame, const rows *r, int fill_first) {
  static const char *const names[] = {"sand"};
  const h5frame_meta meta = {.frame = frame, .time = 1.0, .dx = 0.1, .n_materials = 1, .material_names = names};
  h5frame_file *f = calloc(1, sizeof *f);
  dr_clear();
  int rc = h5frame_begin(MPI_COMM_WORLD, dir, &meta, PER_RANK, f);
  CHECK(rc == DR_OK, "frame %d begun: %s", frame, dr_message());
  if (rc) {
    free(f);
    return rc;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (fill_first && rank == 0) fill_filesystem(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  h5rows_ahead ahead;
  static char pack[H5FRAME_NARROW_PACK_BYTES];
  h5frame_ahead_start(f, &ahead);
  int put = DR_OK;
  for (size_t first = 0; first < PER_RANK && put == DR_OK; first += PER_RANK / 2) {
    const h5frame_data d = {.n = PER_RANK / 2, .position = r->x + 3 * first, .velocity = r->v + 3 * first,
                            .id = r->id + first, .material = r->material + first, .owner = r->owner + first};
    put = h5frame_put(f, first, &d, pack, sizeof pack); /* material and owner narrowed through it, as in a run */
  }
  h5frame_ahead_join(f);
  rc = h5frame_end(MPI_COMM_WORLD, f, put);
  if (fill_first) {
    char two[4200];
    h5frame_path(dir, frame, two, sizeof two);
    const char *msg = dr_message();
    printf("frame_full: rank %d: put %d, end %d: %s\n", rank, put, rc, rc ? msg : "(none)");
    CHECK(rc == DR_EIO, "rank %d: frame %d on a full disk: status %d, want %d (DR_EIO)", rank, frame, rc, DR_EIO);
    if (put || rank == 0)
      CHECK(strstr(msg, two) || strstr(msg, "another rank failed"), "the message does not name %s: %s", two, msg);
    if (put) {
      CHECK(strstr(msg, "No space left on device"), "the message does not say 'No space left on device': %s", msg);
      CHECK(strstr(msg, "position of") || strstr(msg, "velocity of") || strstr(msg, "id of") ||
                strstr(msg, "material of") || strstr(msg, "owner of"),
            "the message names no field: %s", msg);
    }
  }
  free(f);
  return rc;
}

/* The bytes of path, read whole (NULL: unreadable); *len their count. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc(*len + 1);
  if (b && fread(b, 1, *len, f) != *len) free(b), b = NULL;
  fclose(f);
  return b;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 2) {
    if (rank == 0) fprintf(stderr, "usage: %s DIR\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  const char *dir = argv[1];
  char one[4200], two[4200], tmp[4200], filler[4200];
  h5frame_path(dir, 1, one, sizeof one);
  h5frame_path(dir, 2, two, sizeof two);
  snprintf(tmp, sizeof tmp, "%s/.frame_00002.h5.tmp", dir);
  snprintf(filler, sizeof filler, "%s/filler", dir);
  static rows r1, r2;
  make(&r1, rank, 1);
  make(&r2, rank, 2);

  CHECK(write_frame(dir, 1, &r1, 0) == DR_OK, "frame 1 with room: %s", dr_message());
  MPI_Barrier(MPI_COMM_WORLD);
  size_t n1 = 0, n1b = 0;
  char *before = rank == 0 ? slurp(one, &n1) : NULL;

  (void)write_frame(dir, 2, &r2, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(access(two, F_OK) != 0, "%s exists after the failed write", two);
  CHECK(access(tmp, F_OK) != 0, "%s was left", tmp);
  if (rank == 0) {
    char *after = slurp(one, &n1b);
    CHECK(before && after && n1 == n1b && memcmp(before, after, n1) == 0, "%s changed after the failed write", one);
    free(after);
    unlink(filler);
  }
  free(before);
  MPI_Barrier(MPI_COMM_WORLD);

  CHECK(write_frame(dir, 2, &r2, 0) == DR_OK, "frame 2 with room again: %s", dr_message());
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(access(two, F_OK) == 0, "%s was not written with room again", two);

  int mine = failures_, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("frame_full on %d rank(s): %s\n", size, all ? "FAILED" : "all checks passed");
  MPI_Finalize();
  return all ? 1 : 0;
}
