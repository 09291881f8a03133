/* ckpt_full.c - a disk that fills while a checkpoint's rows are written leaves the previous
 * checkpoint intact.
 *
 *   ckpt_full DIR
 *
 * DIR is a small empty tmpfs (check_io_errors.sh mounts one). Writes checkpoint 1 (200 particles a
 * rank), begins checkpoint 2 (its free-space check passes), then fills DIR with another file, as
 * frames written meanwhile would, and writes checkpoint 2's rows (ckpt_put, as the run's writer
 * does) and ends it. Checks: DR_EIO on every rank; the message of each rank that failed itself
 * names DIR/checkpoint_00002.h5 and says "No space left on device" (rank 0's, or the agreed one
 * naming another rank); no checkpoint 2 and no temporary file; checkpoint 1 reads back whole with
 * every value it was written with (ckpt_read on all ranks); and once the room is back, checkpoint 2
 * is written and checkpoint 1 pruned (keep 1). Collective: runs on any number of ranks. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fill_fs.h"
#include "checkpoint.h"
#include "error.h"

enum { PER_RANK = 200 };

static const char SCENE[] = "{ \"a scene\": 1 }\n";

/* Value j of attribute `field` of the particle of row `row`, in checkpoint `frame`: exact in
 * every attribute type. */
static double value_of(uint64_t row, int frame, int field, int j) {
  return (double)((row * 31 + (uint64_t)frame * 1009 + (uint64_t)field * 97 + (uint64_t)j * 7) % 4096) * 0.25;
}

/* The particles of rows [first, first + n) in checkpoint frame. */
#define FILL_(field, type, k, what)                                                                \
  ++a;                                                                                             \
  for (int j = 0; j < (k); ++j) p->field[(size_t)(k) * i + j] = (type)value_of(row, frame, a, j);
static void make(particles *p, uint64_t first, size_t n, int frame) {
  memset(p, 0, sizeof *p);
  particles_reserve(p, n + 1);
  p->n = n;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t row = first + i;
    int a = 0;
    PARTICLE_ATTRIBUTES(FILL_)
    p->id[i] = row;
  }
}
#undef FILL_

static ckpt_state state_of(int frame) {
  uint64_t h = 0xcbf29ce484222325ULL; /* the scene's hash as scene_load computes it (FNV-1a) */
  for (size_t i = 0; i < sizeof SCENE - 1; ++i) h = (h ^ (unsigned char)SCENE[i]) * 0x100000001b3ULL;
  return (ckpt_state){.frame = frame, .time = 0.5 * frame, .steps = 10u * (uint64_t)frame, .last_dt = 1e-3,
                      .vmax = 1.5, .scene_hash = h};
}

static const ckpt_scene SC = {.text = SCENE, .len = sizeof SCENE - 1, .path = "scene.json"};

/* Checkpoint frame read back on every rank: each value against value_of, ids each row once. */
static void check_intact(const char *path, int frame, uint64_t total) {
  particles slice = {0}, *p = &slice;
  ckpt_state st;
  dr_clear();
  const int rc = ckpt_read(MPI_COMM_WORLD, path, &st, p);
  CHECK(rc == DR_OK, "%s does not read back: %s", path, dr_message());
  if (rc) return;
  CHECK(st.frame == frame && st.n_particles == total, "%s: frame %d, %llu particles; want %d, %llu", path, st.frame,
        (unsigned long long)st.n_particles, frame, (unsigned long long)total);
  size_t bad = 0;
#define SAME_(field, type, k, what)                                                                \
  ++a;                                                                                             \
  for (int j = 0; j < (k) && strcmp(#field, "id"); ++j)                                            \
    bad += p->field[(size_t)(k) * i + j] != (type)value_of(p->id[i], frame, a, j);
  for (size_t i = 0; i < p->n; ++i) {
    int a = 0;
    PARTICLE_ATTRIBUTES(SAME_)
  }
#undef SAME_
  double mine[2] = {(double)p->n, 0}, all[2];
  for (size_t i = 0; i < p->n; ++i) mine[1] += (double)p->id[i];
  MPI_Allreduce(mine, all, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  CHECK(bad == 0, "%s: %zu values differ from those written", path, bad);
  CHECK(all[0] == (double)total && all[1] == (double)total * (double)(total - 1) / 2,
        "%s: the rows read are not each row once", path);
  particles_free(p);
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
  const uint64_t total = (uint64_t)PER_RANK * (uint64_t)size, first = (uint64_t)PER_RANK * (uint64_t)rank;
  char one[4200], two[4200], tmp[4200], filler[4200];
  ckpt_path(dir, 1, one, sizeof one);
  ckpt_path(dir, 2, two, sizeof two);
  snprintf(tmp, sizeof tmp, "%s/.checkpoint_00002.h5.tmp", dir);
  snprintf(filler, sizeof filler, "%s/filler", dir);

  /* 1. checkpoint 1, with room */
  particles p1, p2;
  make(&p1, first, PER_RANK, 1);
  make(&p2, first, PER_RANK, 2);
  ckpt_state s1 = state_of(1), s2 = state_of(2);
  dr_clear();
  CHECK(ckpt_write(MPI_COMM_WORLD, dir, &s1, &SC, &p1, 1) == DR_OK, "checkpoint 1: %s", dr_message());

  /* 2. checkpoint 2 begun with room, its rows written once the disk is full */
  ckpt_file *f = calloc(1, sizeof *f);
  dr_clear();
  int rc = ckpt_begin(MPI_COMM_WORLD, dir, &s2, &SC, p2.n, 1, f);
  CHECK(rc == DR_OK, "checkpoint 2 begun: %s", dr_message());
  if (rc == DR_OK) {
    if (rank == 0) fill_filesystem(dir);
    MPI_Barrier(MPI_COMM_WORLD);
    const int put = ckpt_put(f, &p2);
    rc = ckpt_end(MPI_COMM_WORLD, f, put);
    const char *msg = dr_message();
    printf("ckpt_full: rank %d: put %d, end %d: %s\n", rank, put, rc, rc ? msg : "(none)");
    CHECK(rc == DR_EIO, "rank %d: checkpoint 2 on a full disk: status %d, want %d (DR_EIO)", rank, rc, DR_EIO);
    if (put || rank == 0) {
      CHECK(strstr(msg, two) || strstr(msg, "another rank failed"), "the message does not name %s: %s", two, msg);
      CHECK(!put || strstr(msg, "No space left on device"), "the message does not say 'No space left on device': %s",
            msg);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(access(two, F_OK) != 0, "%s exists after the failed write", two);
  CHECK(access(tmp, F_OK) != 0, "%s was left", tmp);
  if (rank == 0) unlink(filler);
  MPI_Barrier(MPI_COMM_WORLD);
  check_intact(one, 1, total);

  /* 3. with room again: checkpoint 2 written, checkpoint 1 pruned (keep 1) */
  dr_clear();
  CHECK(ckpt_write(MPI_COMM_WORLD, dir, &s2, &SC, &p2, 1) == DR_OK, "checkpoint 2 with room: %s", dr_message());
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(access(one, F_OK) != 0, "%s was not pruned (keep 1)", one);
  check_intact(two, 2, total);

  particles_free(&p1);
  particles_free(&p2);
  free(f);
  int mine = failures_, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("ckpt_full on %d rank(s): %s\n", size, all ? "FAILED" : "all checks passed");
  MPI_Finalize();
  return all ? 1 : 0;
}
