/* test_checkpoint_mpi - checkpoints written by several ranks (run with 3; uneven counts, rank 1
 * holds none) and read back on 3, 2 and 1 ranks: the state, and every attribute of every particle
 * (each value is a formula of the particle's id and the attribute, rebuilt here, so a reader
 * checks its slice without knowing who wrote what); every id read exactly once; even slices.
 * Then what must be refused (DR_EINPUT, one line naming the file): a truncated file, a flipped
 * byte in each particle dataset and in the scene text, a changed state attribute, another
 * format, a file that is not a checkpoint, a missing file; ckpt_read_latest passing over a
 * damaged newest checkpoint; keep and pruning (older ones go only after the new one is
 * complete; an earlier run's newer ones go; leftover temporary files go); and a failed write
 * (a folder in the way of the temporary name, which blocks root too) that leaves the older
 * checkpoints readable and no new file. */
#define _XOPEN_SOURCE 700
#include <mpi.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "error.h"
#pragma GCC diagnostic ignored "-Wunused-function" /* io_check.h's readers of frame files */
#include "io_check.h"
#include "log.h"

static int rank, nranks;

/* The value j of attribute `name` of particle id: multiples of 1/8 below 12500, exact in every
 * attribute type (the id attribute holds the id itself). */
static double value_of(uint64_t id, const char *name, int j) {
  uint64_t h = 1469598103934665603ULL;
  for (const char *c = name; *c; ++c) h = (h ^ (unsigned char)*c) * 1099511628211ULL;
  return (double)((id * 7919 + h % 1000 + (uint64_t)j * 131) % 100000) * 0.125;
}

#define FILL_(field, type, k, what)                                                                \
  for (int j = 0; j < (k); ++j) p->field[(size_t)(k) * i + j] = (type)value_of(id, #field, j);
#define SAME_(field, type, k, what)                                                                \
  for (int j = 0; j < (k) && strcmp(#field, "id"); ++j) bad += p->field[(size_t)(k) * i + j] != (type)value_of(p->id[i], #field, j);

/* Rank r's particles: ids r * 1000 + 0 .. n - 1 (ids above 2^32 too). */
static void make(particles *p, size_t n, int r) {
  memset(p, 0, sizeof *p);
  particles_reserve(p, n + 1);
  p->n = n;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t id = ((uint64_t)1 << 33) + (uint64_t)r * 1000 + i;
    PARTICLE_ATTRIBUTES(FILL_)
    p->id[i] = id;
  }
}

static const char SCENE[] = "{ \"a scene\": \"its bytes\" }\n";

static ckpt_state state_of(int frame) {
  return (ckpt_state){.frame = frame, .step_in_frame = frame % 3, .time = 0.04 * frame + 1e-3, .steps = 1000u + (uint64_t)frame,
                      .rebuilds = 17, .last_dt = 1.25e-4, .vmax = 2.5 + frame, .scene_hash = 0x0123456789abcdefULL,
                      .projected = frame % 2};
}

static const size_t COUNTS[3] = {37, 0, 58}; /* rank r writes COUNTS[r] */

static int write_frame(MPI_Comm comm, const char *dir, int frame, int keep) {
  particles p;
  make(&p, COUNTS[rank], rank);
  ckpt_state st = state_of(frame);
  /* the scene text's hash as scene_load computes it (FNV-1a) */
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < sizeof SCENE - 1; ++i) h = (h ^ (unsigned char)SCENE[i]) * 0x100000001b3ULL;
  st.scene_hash = h;
  ckpt_scene sc = {.text = SCENE, .len = sizeof SCENE - 1, .path = "scene.json"};
  dr_clear();
  int rc = ckpt_write(comm, dir, &st, &sc, &p, keep);
  particles_free(&p);
  return rc;
}

/* Reads path on comm and checks everything against the formulas. */
static void check_read(MPI_Comm comm, const char *path, int frame) {
  int r, R;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &R);
  particles slice = {0}, *p = &slice;
  ckpt_state st;
  dr_clear();
  int rc = ckpt_read(comm, path, &st, p);
  CHECK(rc == 0, "reading %s on %d ranks: %s", path, R, dr_message());
  if (rc) return;
  const ckpt_state want = state_of(frame);
  CHECK(st.frame == frame && st.step_in_frame == want.step_in_frame && st.time == want.time && st.steps == want.steps &&
            st.rebuilds == want.rebuilds && st.last_dt == want.last_dt && st.vmax == want.vmax &&
            st.projected == want.projected,
        "%s: the state read back differs", path);
  CHECK(st.n_particles == 95 && st.ranks == 3, "%s: %llu particles from %d ranks, want 95 from 3", path,
        (unsigned long long)st.n_particles, st.ranks);
  /* even slices: 95 / R rounded down or up */
  CHECK(p->n == 95 / (size_t)R || p->n == 95 / (size_t)R + 1, "%s on %d ranks: rank %d got %zu rows", path, R, r, p->n);
  size_t bad = 0;
  for (size_t i = 0; i < p->n; ++i) {
    PARTICLE_ATTRIBUTES(SAME_)
  }
  CHECK(bad == 0, "%s on %d ranks: %zu values differ from what was written", path, R, bad);
  /* every id once: count and the sum of ids and of their squares over all ranks */
  double mine[3] = {(double)p->n, 0, 0}, all[3];
  for (size_t i = 0; i < p->n; ++i) {
    const double k = (double)(p->id[i] - ((uint64_t)1 << 33));
    mine[1] += k, mine[2] += k * k;
  }
  MPI_Allreduce(mine, all, 3, MPI_DOUBLE, MPI_SUM, comm);
  double want_sum = 0, want_sq = 0;
  for (int w = 0; w < 3; ++w)
    for (size_t i = 0; i < COUNTS[w]; ++i) want_sum += w * 1000.0 + (double)i, want_sq += (w * 1000.0 + (double)i) * (w * 1000.0 + (double)i);
  CHECK(all[0] == 95 && all[1] == want_sum && all[2] == want_sq, "%s on %d ranks: the ids read are not each id once", path, R);
  particles_free(p);
}

/* Expects ckpt_read to refuse path with DR_EINPUT and a message naming it and containing text. */
static void check_refused(const char *path, const char *text, const char *label) {
  particles p = {0};
  ckpt_state st;
  dr_clear();
  int rc = ckpt_read(MPI_COMM_WORLD, path, &st, &p);
  const char *m = dr_message();
  if (rank == 0) {
    CHECK(rc == DR_EINPUT, "%s: ckpt_read returned %d, want %d (%s)", label, rc, DR_EINPUT, m);
    CHECK(strstr(m, path) && strstr(m, text), "%s: message '%s' does not name %s and say '%s'", label, m, path, text);
    CHECK(!strchr(m, '\n'), "%s: the message is more than one line", label);
  } else {
    CHECK(rc != 0, "%s: rank %d accepted the file", label, rank);
  }
  particles_free(&p);
  check_no_open_handles(label);
}

/* Rank 0: copies src to dst. */
static void copy_file(const char *src, const char *dst) {
  FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
  char buf[65536];
  size_t k;
  while (a && b && (k = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, k, b);
  if (a) fclose(a);
  if (b) fclose(b);
}

static void test_refusals(const char *dir) {
  char good[4096], bad[4096];
  ckpt_path(dir, 3, good, sizeof good);
  join_path(bad, sizeof bad, dir, "bad.h5");
  struct stat sb;
  stat(good, &sb);

  /* truncated to half, and to all but its last byte */
  const long sizes[2] = {(long)sb.st_size / 2, (long)sb.st_size - 1};
  for (int t = 0; t < 2; ++t) {
    if (rank == 0) {
      copy_file(good, bad);
      CHECK(truncate(bad, sizes[t]) == 0, "truncate");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    check_refused(bad, "not a whole HDF5 file", "truncated");
    MPI_Barrier(MPI_COMM_WORLD);
  }
  /* one flipped byte inside each particle dataset and inside the scene text */
  char names[32][64];
  int n = 0;
#define NAME_(field, type, k, what) snprintf(names[n++], sizeof names[0], "/particles/%s", #field);
  PARTICLE_ATTRIBUTES(NAME_)
#undef NAME_
  snprintf(names[n++], sizeof names[0], "/scene");
  for (int i = 0; i < n; ++i) {
    if (rank == 0) {
      copy_file(good, bad);
      flip(bad, data_offset(bad, names[i]) + 5);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    char label[2200];
    snprintf(label, sizeof label, "a byte of %s flipped", names[i]);
    check_refused(bad, "damaged", label);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  /* a state value changed through HDF5 (its own checksums stay right): the state hash sees it */
  if (rank == 0) {
    copy_file(good, bad);
    hid_t f = H5Fopen(bad, H5F_ACC_RDWR, H5P_DEFAULT), a = H5Aopen(f, "time", H5P_DEFAULT);
    double t = 99.0;
    H5Awrite(a, H5T_NATIVE_DOUBLE, &t);
    H5Aclose(a);
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  check_refused(bad, "the run's state does not match its hash", "time changed");
  MPI_Barrier(MPI_COMM_WORLD);
  /* another format number */
  if (rank == 0) {
    copy_file(good, bad);
    hid_t f = H5Fopen(bad, H5F_ACC_RDWR, H5P_DEFAULT), a = H5Aopen(f, "format", H5P_DEFAULT);
    int32_t v = CKPT_FORMAT + 1;
    H5Awrite(a, H5T_NATIVE_INT32, &v);
    H5Aclose(a);
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  check_refused(bad, "written by another version", "another format");
  MPI_Barrier(MPI_COMM_WORLD);
  /* an HDF5 file that is not a checkpoint, a text file, no file */
  if (rank == 0) {
    hid_t f = H5Fcreate(bad, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  check_refused(bad, "not a drift checkpoint", "an empty HDF5 file");
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    FILE *f = fopen(bad, "w");
    fputs("{ \"not\": \"hdf5\" }\n", f);
    fclose(f);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  check_refused(bad, "not a whole HDF5 file", "a text file");
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) unlink(bad);
  MPI_Barrier(MPI_COMM_WORLD);
  check_refused(bad, "no such file", "no file");
}

/* The checkpoint numbers present in dir, as "1,3," (rank 0). */
static void present(const char *dir, char *out, size_t len) {
  out[0] = 0;
  for (int f = 0; f < 20; ++f) {
    char p[4096];
    ckpt_path(dir, f, p, sizeof p);
    if (exists(p)) snprintf(out + strlen(out), len - strlen(out), "%d,", f);
  }
}

static void test_keep_and_failures(const char *dir) {
  char got[128], p[4096], tmp[4096];
  for (int f = 1; f <= 4; ++f) CHECK(write_frame(MPI_COMM_WORLD, dir, f, 2) == 0, "writing frame %d: %s", f, dr_message());
  if (rank == 0) {
    present(dir, got, sizeof got);
    CHECK(!strcmp(got, "3,4,"), "keep 2 after frames 1-4: %s left, want 3,4,", got);
  }
  /* a write that fails: a folder where the temporary file goes */
  join_path(tmp, sizeof tmp, dir, ".checkpoint_00005.h5.tmp");
  if (rank == 0) CHECK(mkdir(tmp, 0755) == 0, "mkdir %s", tmp);
  MPI_Barrier(MPI_COMM_WORLD);
  int rc = write_frame(MPI_COMM_WORLD, dir, 5, 1);
  CHECK(rc == DR_EIO, "rank %d: a blocked write returned %d, want %d (%s)", rank, rc, DR_EIO, dr_message());
  if (rank == 0) {
    CHECK(strstr(dr_message(), ".checkpoint_00005.h5.tmp") != NULL, "the failure does not name the file: %s", dr_message());
    present(dir, got, sizeof got);
    CHECK(!strcmp(got, "3,4,"), "after a failed write of frame 5 with keep 1: %s left, want 3,4,", got);
    rmdir(tmp);
  }
  check_no_open_handles("after a failed write");
  MPI_Barrier(MPI_COMM_WORLD);
  ckpt_path(dir, 4, p, sizeof p);
  check_read(MPI_COMM_WORLD, p, 4);
  /* a leftover temporary file goes at the next complete write */
  join_path(tmp, sizeof tmp, dir, ".checkpoint_00009.h5.tmp");
  if (rank == 0) fclose(fopen(tmp, "w"));
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(write_frame(MPI_COMM_WORLD, dir, 5, 2) == 0, "writing frame 5: %s", dr_message());
  if (rank == 0) {
    present(dir, got, sizeof got);
    CHECK(!strcmp(got, "4,5,"), "keep 2 after frame 5: %s left, want 4,5,", got);
    CHECK(!exists(tmp), "the leftover %s is still there", tmp);
  }
  /* a run that restarted from frame 2 writes frame 3: the earlier run's 4 and 5 go */
  CHECK(write_frame(MPI_COMM_WORLD, dir, 3, 2) == 0, "writing frame 3 again: %s", dr_message());
  if (rank == 0) {
    present(dir, got, sizeof got);
    CHECK(!strcmp(got, "3,"), "after frame 3 of a new run: %s left, want 3,", got);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

static void test_latest(const char *dir) {
  char p4[4096], p6[4096], found[4096];
  CHECK(write_frame(MPI_COMM_WORLD, dir, 4, 3) == 0, "writing frame 4: %s", dr_message());
  CHECK(write_frame(MPI_COMM_WORLD, dir, 6, 3) == 0, "writing frame 6: %s", dr_message());
  ckpt_path(dir, 4, p4, sizeof p4);
  ckpt_path(dir, 6, p6, sizeof p6);
  particles p = {0};
  ckpt_state st;
  dr_clear();
  CHECK(ckpt_read_latest(MPI_COMM_WORLD, dir, &st, &p, found, sizeof found) == 0 && !strcmp(found, p6) && st.frame == 6,
        "the newest of 3, 4, 6 is not 6: %s (%s)", found, dr_message());
  /* the newest damaged (truncated): the one before it */
  if (rank == 0) {
    struct stat sb;
    stat(p6, &sb);
    truncate(p6, sb.st_size / 3);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  dr_clear();
  CHECK(ckpt_read_latest(MPI_COMM_WORLD, dir, &st, &p, found, sizeof found) == 0 && !strcmp(found, p4) && st.frame == 4,
        "with 6 truncated, the newest whole one is not 4: %s (%s)", found, dr_message());
  CHECK(p.n == 95 / 3 || p.n == 95 / 3 + 1, "a slice of %zu rows", p.n);
  /* none whole, none at all */
  char empty[4096];
  join_path(empty, sizeof empty, dir, "empty");
  if (rank == 0) mkdir(empty, 0755);
  MPI_Barrier(MPI_COMM_WORLD);
  dr_clear();
  int rc = ckpt_read_latest(MPI_COMM_WORLD, empty, &st, &p, found, sizeof found);
  CHECK(rc == DR_EINPUT && (rank != 0 || strstr(dr_message(), "no checkpoint_NNNNN.h5 in")), "an empty folder: %d %s", rc,
        dr_message());
  particles_free(&p);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  log_set_rank(rank);
  log_set_quiet(1);
  if (nranks != 3) {
    if (rank == 0) fprintf(stderr, "run with 3 ranks\n");
    MPI_Finalize();
    return 2;
  }
  char dir[4096] = "";
  if (rank == 0) {
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(dir, sizeof dir, "%s/drift-ckpt-XXXXXX", base);
    if (!mkdtemp(dir)) {
      perror("mkdtemp");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);

  /* written on 3 ranks, read on 3, 2 and 1 */
  CHECK(write_frame(MPI_COMM_WORLD, dir, 3, 2) == 0, "writing: %s", dr_message());
  char path[4096];
  ckpt_path(dir, 3, path, sizeof path);
  check_read(MPI_COMM_WORLD, path, 3);
  MPI_Comm two;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &two);
  if (two != MPI_COMM_NULL) {
    check_read(two, path, 3);
    MPI_Comm_free(&two);
  }
  if (rank == 0) check_read(MPI_COMM_SELF, path, 3);
  check_no_open_handles("after reading");
  MPI_Barrier(MPI_COMM_WORLD);

  test_refusals(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  test_keep_and_failures(dir);
  test_latest(dir);

  int mine = failures_, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    if (!all) rm_rf(dir);
    if (all) printf("test_checkpoint_mpi: %d check(s) failed (files kept in %s)\n", all, dir);
    else printf("test_checkpoint_mpi: all checks passed\n");
  }
  MPI_Finalize();
  return all ? 1 : 0;
}
