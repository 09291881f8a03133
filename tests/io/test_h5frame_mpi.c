/* test_h5frame_mpi - several ranks (run with 3) write one frame collectively; rank 0 reads it
 * back and checks that the rows are the ranks' particles concatenated in rank order, with every
 * value. Counts differ per rank and one rank (rank 1) has none; a second frame has rank 0 empty,
 * a third has no particles at all; the first's counts again at output.precision half. Failures seen by one rank or by all must give every rank the
 * same non-zero status and leave no file. All of it into the disk (/tmp) and, where /dev/shm is
 * a tmpfs, into memory, where every rank copies and encodes its rows into mappings of the file. */
#define _XOPEN_SOURCE 700
#include <linux/magic.h>
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "error.h"
#include "h5frame.h"
#include "io_check.h"

typedef struct rank_buf {
  size_t n;
  float *pos, *vel;
  uint64_t *id;
  int32_t *mat, *own;
} rank_buf;

/* The particles of rank r in frame `frame`: values that tell rank, particle and component. */
static void fill(rank_buf *b, size_t n, int r, int frame) {
  b->n = n;
  b->pos = malloc(3 * n * sizeof(float) + 1);
  b->vel = malloc(3 * n * sizeof(float) + 1);
  b->id = malloc(n * sizeof(uint64_t) + 1);
  b->mat = malloc(n * sizeof(int32_t) + 1);
  b->own = malloc(n * sizeof(int32_t) + 1);
  if (!b->pos || !b->vel || !b->id || !b->mat || !b->own) MPI_Abort(MPI_COMM_WORLD, 2);
  for (size_t i = 0; i < n; i++) {
    for (int c = 0; c < 3; c++) {
      b->pos[3 * i + c] = 1000.0f * (float)r + 10.0f * (float)i + (float)c + 0.5f * (float)frame;
      b->vel[3 * i + c] = -1000.0f * (float)r - 10.0f * (float)i - (float)c;
    }
    b->id[i] = ((uint64_t)(r + 1) << 36) + ((uint64_t)frame << 20) + i;
    b->mat[i] = (int32_t)((size_t)r + i) % 4;
    b->own[i] = r * 256 + (int32_t)(i % 4); /* rank * 256 + device */
  }
}

static void release(rank_buf *b) {
  free(b->pos), free(b->vel), free(b->id), free(b->mat), free(b->own);
  memset(b, 0, sizeof *b);
}

static h5frame_data data_of(const rank_buf *b) {
  return (h5frame_data){.n = b->n, .position = b->pos, .velocity = b->vel, .id = b->id,
                        .material = b->mat, .owner = b->own};
}

/* Rank 0: reads DIR/frame_NNNNN.h5 and compares it with what every rank wrote (rebuilt here
 * from the same formula), in rank order. */
static void check_file(const char *dir, int frame, double time, const size_t *counts, int size) {
  char path[4096];
  h5frame_path(dir, frame, path, sizeof path);
  size_t total = 0;
  for (int r = 0; r < size; r++) total += counts[r];
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  CHECK(f >= 0, "cannot open %s", path);
  if (f < 0) return;
  hsize_t d3[2] = {total, 3}, d1[2] = {total, 0};
  float *pos = malloc(3 * total * sizeof(float) + 1), *vel = malloc(3 * total * sizeof(float) + 1);
  uint64_t *id = malloc(total * sizeof(uint64_t) + 1);
  int32_t *mat = malloc(total * sizeof(int32_t) + 1), *own = malloc(total * sizeof(int32_t) + 1);
  int ok = !read_dataset(f, "/particles/position", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d3, pos);
  ok &= !read_dataset(f, "/particles/velocity", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d3, vel);
  ok &= !read_dataset(f, "/particles/id", H5T_STD_U64LE, H5T_NATIVE_UINT64, 1, d1, id);
  /* two materials: 8 bits; the owners of several ranks (rank * 256 + device): 16 bits */
  ok &= !read_dataset(f, "/particles/material", H5T_STD_U8LE, H5T_NATIVE_INT32, 1, d1, mat);
  ok &= !read_dataset(f, "/particles/owner", H5T_STD_U16LE, H5T_NATIVE_INT32, 1, d1, own);
  if (ok) {
    size_t row = 0;
    int bad = 0;
    for (int r = 0; r < size; r++) {
      rank_buf b;
      fill(&b, counts[r], r, frame);
      for (size_t i = 0; i < b.n && bad < 5; i++, row++) {
        int same = !memcmp(pos + 3 * row, b.pos + 3 * i, 3 * sizeof(float)) &&
                   !memcmp(vel + 3 * row, b.vel + 3 * i, 3 * sizeof(float)) &&
                   id[row] == b.id[i] && mat[row] == b.mat[i] && own[row] == b.own[i];
        CHECK(same, "%s: row %zu should be particle %zu of rank %d (id %llu), is id %llu", path,
              row, i, r, (unsigned long long)b.id[i], (unsigned long long)id[row]);
        bad += !same;
      }
      release(&b);
    }
  }
  double t = -1;
  int32_t fr = -1;
  uint64_t np = 0;
  if (!read_attr(f, "time", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &t))
    CHECK(t == time, "%s: time %g, want %g", path, t, time);
  if (!read_attr(f, "frame", H5T_STD_I32LE, H5T_NATIVE_INT32, &fr))
    CHECK(fr == frame, "%s: frame %d, want %d", path, (int)fr, frame);
  if (!read_attr(f, "n_particles", H5T_STD_U64LE, H5T_NATIVE_UINT64, &np))
    CHECK(np == total, "%s: n_particles %llu, want %zu", path, (unsigned long long)np, total);
  check_attr_string(f, "materials", "sand,water");
  check_attr_string(f, "owner_encoding", "rank*256+device");
  H5Fclose(f);
  free(pos), free(vel), free(id), free(mat), free(own);
}

/* All ranks write frame `frame` with counts[rank] particles; rank 0 checks the file. */
static void write_and_check(const char *dir, int frame, const size_t *counts, int rank, int size) {
  static const char *const names[] = {"sand", "water"};
  rank_buf b;
  fill(&b, counts[rank], rank, frame);
  h5frame_meta meta = {.frame = frame, .time = 0.5 * frame, .dx = 0.02, .n_materials = 2,
                       .material_names = names};
  h5frame_data d = data_of(&b);
  dr_clear();
  int st = h5frame_write(MPI_COMM_WORLD, dir, &meta, &d);
  CHECK(st == 0, "rank %d: h5frame_write frame %d: %s", rank, frame, dr_message());
  check_no_open_handles("after h5frame_write");
  release(&b);
  if (rank == 0) check_file(dir, frame, meta.time, counts, size);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* output.precision half on several ranks: all ranks write frame `frame` at half with the
 * positions' extent 2500 m (a fixed point of spacing 2 m); rank 0 reads it through HDF5's
 * conversion and finds each rank's rows in rank order: positions within 1 m (half the spacing),
 * velocities within 2^-11 of the value (binary16) and ids equal; then removes the file (the
 * checks below count the float frames). */
static void write_and_check_half(const char *dir, int frame, const size_t *counts, int rank, int size) {
  static const char *const names[] = {"sand", "water"};
  rank_buf b;
  fill(&b, counts[rank], rank, frame);
  h5frame_meta meta = {.frame = frame, .time = 0.5 * frame, .dx = 0.02, .n_materials = 2, .material_names = names,
                       .precision = H5FRAME_HALF, .extent = 2500.0};
  h5frame_data d = data_of(&b);
  dr_clear();
  int st = h5frame_write(MPI_COMM_WORLD, dir, &meta, &d);
  CHECK(st == 0, "rank %d: h5frame_write frame %d at half: %s", rank, frame, dr_message());
  release(&b);
  if (rank == 0 && st == 0) {
    char path[4096];
    h5frame_path(dir, frame, path, sizeof path);
    size_t total = 0;
    for (int r = 0; r < size; r++) total += counts[r];
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t dp = H5Dopen2(f, "/particles/position", H5P_DEFAULT), dv = H5Dopen2(f, "/particles/velocity", H5P_DEFAULT);
    hid_t di = H5Dopen2(f, "/particles/id", H5P_DEFAULT);
    float *pos = malloc(3 * total * sizeof(float) + 1), *vel = malloc(3 * total * sizeof(float) + 1);
    uint64_t *id = malloc(total * sizeof(uint64_t) + 1);
    CHECK(f >= 0 && dp >= 0 && dv >= 0 && di >= 0 &&
              H5Dread(dp, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, pos) >= 0 &&
              H5Dread(dv, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, vel) >= 0 &&
              H5Dread(di, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, id) >= 0,
          "%s: reading position, velocity and id", path);
    size_t row = 0, bad = 0;
    for (int r = 0; r < size; r++) {
      rank_buf e;
      fill(&e, counts[r], r, frame);
      for (size_t i = 0; i < e.n; i++, row++) {
        int same = id[row] == e.id[i];
        for (int c = 0; c < 3; c++)
          same &= fabsf(pos[3 * row + c] - e.pos[3 * i + c]) <= 1.0f &&
                  fabsf(vel[3 * row + c] - e.vel[3 * i + c]) <= 0x1p-11f * fabsf(e.vel[3 * i + c]);
        if (!same && bad++ < 3)
          CHECK(0, "%s: row %zu: position (%g, %g, %g) velocity %g id %llu, want particle %zu of rank %d (%g, %g, %g), %g",
                path, row, pos[3 * row], pos[3 * row + 1], pos[3 * row + 2], vel[3 * row], (unsigned long long)id[row],
                i, r, e.pos[3 * i], e.pos[3 * i + 1], e.pos[3 * i + 2], e.vel[3 * i]);
      }
      release(&e);
    }
    CHECK(bad == 0, "%s: %zu rows wrong", path, bad);
    H5Dclose(dp), H5Dclose(dv), H5Dclose(di), H5Fclose(f);
    free(pos), free(vel), free(id);
    CHECK(unlink(path) == 0, "removing %s", path);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Every rank must get the same non-zero status, and frame `frame` must not exist. */
static void expect_failure(const char *dir, int frame, int fail_rank, int rank, const char *want) {
  static const char *const names[] = {"sand", "water"};
  rank_buf b;
  fill(&b, 2, rank, frame);
  h5frame_data d = data_of(&b);
  if (rank == fail_rank) d.velocity = NULL; /* a local failure on one rank only */
  h5frame_meta meta = {.frame = frame, .time = 1.0, .dx = 0.02, .n_materials = 2,
                       .material_names = names};
  dr_clear();
  int st = h5frame_write(MPI_COMM_WORLD, dir, &meta, &d);
  release(&b);
  check_no_open_handles("after a failed write");
  int lo = 0, hi = 0;
  MPI_Allreduce(&st, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&st, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lo == hi && st != 0, "rank %d: status %d, statuses range %d..%d", rank, st, lo, hi);
  const char *msg = dr_message();
  if (rank == fail_rank || fail_rank < 0)
    CHECK(strstr(msg, want) != NULL, "rank %d: message \"%s\" should contain \"%s\"", rank, msg,
          want);
  else
    CHECK(strstr(msg, "another rank failed") != NULL, "rank %d: message \"%s\"", rank, msg);
  if (rank == 0) {
    char final[4096], tmp[4096];
    h5frame_path(dir, frame, final, sizeof final);
    char name[32];
    snprintf(name, sizeof name, ".frame_%05d.h5.tmp", frame);
    join_path(tmp, sizeof tmp, dir, name);
    CHECK(!exists(final) && !exists(tmp), "frame %d left a file behind", frame);
    printf("expected failure (rank 0): %s\n", msg);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* The checks in a new folder under base. */
static void checks_in(const char *base, int rank, int size) {
  char dir[128];
  snprintf(dir, sizeof dir, "%s/drift_test_h5frame_mpi_XXXXXX", base);
  if (rank == 0 && !mkdtemp(dir)) {
    perror("mkdtemp");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("frames into %s\n", dir);

  size_t *counts = calloc((size_t)size, sizeof *counts);
  if (!counts) MPI_Abort(MPI_COMM_WORLD, 2);
  /* Rank 1 empty, the others 4 + 3 * rank (4, 10, ...). */
  for (int r = 0; r < size; r++) counts[r] = r == 1 ? 0 : (size_t)(4 + 3 * r);
  write_and_check(dir, 1, counts, rank, size);
  write_and_check_half(dir, 11, counts, rank, size);
  /* Rank 0 empty. */
  for (int r = 0; r < size; r++) counts[r] = r == 0 ? 0 : (size_t)(2 + r);
  write_and_check(dir, 2, counts, rank, size);
  /* No particles anywhere. */
  for (int r = 0; r < size; r++) counts[r] = 0;
  write_and_check(dir, 3, counts, rank, size);

  /* Only the last rank fails (a NULL array): all ranks fail alike. */
  expect_failure(dir, 8, size - 1, rank, "NULL array");
  /* All ranks fail: the folder is below a regular file. */
  char bad[128];
  join_path(bad, sizeof bad, dir, "frame_00001.h5/x");
  expect_failure(bad, 9, -1, rank, rank == 0 ? "frame_00001.h5/x" : "another rank failed");

  if (rank == 0) {
    int tmp = 0;
    CHECK(count_entries(dir, &tmp) == 3 && tmp == 0, "%s should hold 3 frames", dir);
  }
  int failures = 0;
  MPI_Allreduce(&failures_, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    if (failures == 0) rm_rf(dir);
    else fprintf(stderr, "files kept in %s\n", dir);
  }
  free(counts);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* a team of two, so that in memory every rank's rows go through mappings (h5rows.c) */
  omp_set_num_threads(2);
  checks_in("/tmp", rank, size);
  struct statfs sf;
  int shm = rank == 0 && statfs("/dev/shm", &sf) == 0 && sf.f_type == TMPFS_MAGIC;
  MPI_Bcast(&shm, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (shm) checks_in("/dev/shm", rank, size);
  else if (rank == 0) printf("/dev/shm is not a tmpfs here: the mapped path is not checked\n");
  int failures = 0;
  MPI_Allreduce(&failures_, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("test_h5frame_mpi (%d ranks): %s (%d failed checks)\n", size, failures ? "FAILED" : "passed", failures);
  MPI_Finalize();
  return failures ? 1 : 0;
}
