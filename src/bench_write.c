/* bench_write.c - drift bench --write DIR: the main job's figures (see bench.h). A case runs once
 * more with its frames written into DIR/CASE/ every frame, as `drift run` writes them, and the
 * filesystem under DIR writes the same bytes on its own, so that three figures stand side by side:
 *   stepping   ms a frame without output (bench's timed run);
 *   writing    ms a frame of the run that writes its frames: from the first step to the last
 *              frame's file closed (sim_flush), frame 0 included, as a user's shot runs;
 *   filesystem GB/s of plain writes of the same bytes: as many files as frames, each of a frame's
 *              size, in 16 MiB write() calls, closed, not synced (drift does not sync its frames
 *              either), then removed; twice, the faster kept. The bytes come from a buffer of a
 *              frame's size, as a frame's rows come from memory; the same from one 16 MiB buffer,
 *              which stays in the CPU's cache as dd's source /dev/zero does, is printed beside it
 *              (fs hot): the page cache's copy is faster from a cached source than any writer of
 *              a frame can be;
 *   fs node    GB/s of the frame's own pattern on one node: every rank of rank 0's node writes its
 *              share of each of a frame's datasets into one file at once (the file made at its
 *              size first, as a frame's skeleton is; each rank's rows of a dataset one pwrite at
 *              the dataset's offset plus the rows before its own), as many files as frames. With
 *              one rank it is the pattern from one process; with several it is what the
 *              filesystem gives several writers of one file, the reference for the run's writers
 *              on several ranks (whose frames are written so).
 * The writer's own speed is the frames' bytes over the seconds its jobs ran (sim_status
 * write_seconds); where the disk is slower than the steps, it is what bounds the run. "main" is
 * the main thread's time a frame in the output (sim_status io_seconds: the snapshot, the file's
 * skeleton, the completion, and the waits for the writer). */
#define _POSIX_C_SOURCE 200809L
#include "bench_write.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "frame_fields.h"
#include "error.h"
#include "h5frame.h"
#include "log.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The bytes of the frames 0 .. frames in dir (rank 0). */
static double frame_bytes(const char *dir, int frames) {
  double sum = 0;
  for (int f = 0; f <= frames; ++f) {
    char path[4400];
    h5frame_path(dir, f, path, sizeof path);
    struct stat sb;
    if (stat(path, &sb) == 0) sum += (double)sb.st_size;
  }
  return sum;
}

/* Writes files files of bytes each into dir in 16 MiB calls (rank 0) from a buffer of a file's
 * size (hot = 0) or from one 16 MiB buffer (hot = 1); *gbs: GB/s. */
static int filesystem_speed(const char *dir, int files, double bytes, int hot, double *gbs) {
  const size_t chunk = (size_t)16 << 20;
  const size_t size = hot ? chunk : (size_t)bytes + 1;
  char *buf = dr_malloc(size, "the filesystem's speed test");
  if (!buf) return DR_ENOMEM;
  memset(buf, 0x5a, size);
  int rc = DR_OK;
  const double t0 = now_s();
  for (int k = 0; k < files && rc == DR_OK; ++k) {
    char path[4400];
    snprintf(path, sizeof path, "%s/.fs_speed_%05d", dir, k);
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
      rc = dr_fail(DR_EIO, "bench --write: cannot create %s: %s", path, strerror(errno));
      break;
    }
    size_t at = 0;
    for (double left = bytes; left > 0 && rc == DR_OK;) {
      const size_t n = left < (double)chunk ? (size_t)left : chunk;
      const ssize_t w = write(fd, buf + (hot ? 0 : at), n);
      if (w < 0) rc = dr_fail(DR_EIO, "bench --write: writing %s: %s", path, strerror(errno));
      else left -= (double)w, at += (size_t)w;
    }
    if (close(fd) != 0 && rc == DR_OK) rc = dr_fail(DR_EIO, "bench --write: closing %s: %s", path, strerror(errno));
  }
  const double t = now_s() - t0;
  for (int k = 0; k < files; ++k) {
    char path[4400];
    snprintf(path, sizeof path, "%s/.fs_speed_%05d", dir, k);
    (void)unlink(path);
  }
  free(buf);
  *gbs = t > 0 ? (double)files * bytes / t / 1e9 : 0;
  return rc;
}

/* The faster of two runs of filesystem_speed: the page cache's write-back of the run's frames
 * slows the first. */
static int filesystem_best(const char *dir, int files, double bytes, int hot, double *gbs) {
  double again = 0;
  DR_TRY(filesystem_speed(dir, files, bytes, hot, gbs));
  DR_TRY(filesystem_speed(dir, files, bytes, hot, &again));
  if (again > *gbs) *gbs = again;
  return DR_OK;
}

/* The name of file k of node_pass (the node's leader: its rank in the world). */
static void node_file(char *out, size_t len, const char *dir, int leader, int k) {
  snprintf(out, len, "%s/.fs_node_%d_%05d", dir, leader, k);
}

/* One timed pass of the frame's pattern (see fs node above) over files files of bytes each, on
 * the node's ranks. The node's rank 0 makes every file at its size first, as a frame's skeleton
 * is made by the main thread, not the writers; *seconds: from the barrier after that to the
 * barrier after every rank has written its rows of every file. */
static int node_pass(MPI_Comm node, int leader, const char *dir, int files, double bytes, const h5frame_layout *lay,
                     const char *buf, double *seconds) {
  int r = 0, R = 1;
  DR_MPI(MPI_Comm_rank(node, &r));
  DR_MPI(MPI_Comm_size(node, &R));
  double per = 0;
  for (int q = 0; q < H5FRAME_FIELDS; ++q)
    if (lay->fields & H5FRAME_BIT(q)) per += h5frame_row_bytes(lay, q);
  const double rows = per > 0 ? floor(bytes / per) : 0;
  const uint64_t mine_first = (uint64_t)(rows * r / R), mine_end = (uint64_t)(rows * (r + 1) / R);
  char path[4400];
  int rc = DR_OK;
  for (int k = 0; k < files && rc == DR_OK && r == 0; ++k) {
    node_file(path, sizeof path, dir, leader, k);
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)(rows * per)) != 0)
      rc = dr_fail(DR_EIO, "bench --write: cannot make %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
  }
  rc = comm_agree(node, rc);
  DR_MPI(MPI_Barrier(node));
  const double t0 = now_s();
  for (int k = 0; k < files && rc == DR_OK; ++k) {
    node_file(path, sizeof path, dir, leader, k);
    const int fd = open(path, O_WRONLY);
    if (fd < 0) rc = dr_fail(DR_EIO, "bench --write: cannot open %s: %s", path, strerror(errno));
    double at = 0;
    for (int q = 0; q < H5FRAME_FIELDS && rc == DR_OK; ++q) {
      if (!(lay->fields & H5FRAME_BIT(q))) continue;
      const double row = h5frame_row_bytes(lay, q);
      const int e = h5rows_pwrite_all(fd, buf, (size_t)(row * (double)(mine_end - mine_first)),
                                      (off_t)(at + row * (double)mine_first));
      if (e) rc = dr_fail(DR_EIO, "bench --write: writing %s: %s", path, e > 0 ? strerror(e) : "no progress");
      at += row * rows;
    }
    if (fd >= 0 && close(fd) != 0 && rc == DR_OK) rc = dr_fail(DR_EIO, "bench --write: closing %s: %s", path, strerror(errno));
  }
  DR_MPI(MPI_Barrier(node));
  *seconds = now_s() - t0;
  for (int k = 0; k < files && r == 0; ++k) {
    node_file(path, sizeof path, dir, leader, k);
    (void)unlink(path);
  }
  return comm_agree(node, rc);
}

/* The frame's pattern on rank 0's node (fs node above): the faster of two passes; *gbs and *ranks
 * (the node's) on every rank. Collective over the world. */
static int filesystem_node(const char *dir, int files, double bytes, const h5frame_layout *lay, double *gbs,
                           int *ranks) {
  MPI_Comm node = MPI_COMM_NULL;
  int world = 0, leader = 0, R = 1;
  DR_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world));
  DR_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world, MPI_INFO_NULL, &node));
  int rc = MPI_Comm_size(node, &R);
  leader = world;
  if (rc == MPI_SUCCESS) rc = MPI_Bcast(&leader, 1, MPI_INT, 0, node);
  if (rc != MPI_SUCCESS) {
    (void)MPI_Comm_free(&node); /* the failure reported is the one before */
    return comm_fail(rc, __FILE__, __LINE__, "MPI_Comm_size/MPI_Bcast(the node's ranks)");
  }
  /* a rank's share of the rows, in one buffer that each dataset's rows are written from */
  const size_t share = (size_t)(bytes / R) + 64;
  char *buf = dr_malloc(share, "the filesystem's speed test");
  if (buf) memset(buf, 0x5a, share);
  rc = comm_agree(node, buf ? DR_OK : DR_ENOMEM);
  double best = 0;
  for (int pass = 0; pass < 2 && rc == DR_OK; ++pass) {
    double t = 0;
    rc = node_pass(node, leader, dir, files, bytes, lay, buf, &t);
    if (rc == DR_OK && t > 0 && (double)files * bytes / t / 1e9 > best) best = (double)files * bytes / t / 1e9;
  }
  free(buf);
  const int freed = MPI_Comm_free(&node);
  DR_TRY(rc);
  if (freed != MPI_SUCCESS) return comm_fail(freed, __FILE__, __LINE__, "MPI_Comm_free(the node's ranks)");
  /* rank 0's node */
  double b[2] = {best, (double)R};
  DR_MPI(MPI_Bcast(b, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  *gbs = b[0];
  *ranks = (int)b[1];
  return DR_OK;
}

int bench_write_case(const scene *s, const sim_options *base, const char *dir, const char *name, double step_ms,
                     bench_write_result *r) {
  memset(r, 0, sizeof *r);
  r->step_ms = step_ms;
  int rank = 0;
  DR_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  char out[4096];
  if (snprintf(out, sizeof out, "%s/%s", dir, name) >= (int)sizeof out)
    return dr_fail(DR_EINPUT, "bench --write %s: the folder name is too long", dir);
  sim_options opt = *base;
  opt.write_output = 1;
  opt.out_dir = out;
  opt.force = 1; /* bench's own folder: an earlier bench's frames there go (outdir.h) */
  opt.profile = 0;
  sim *S = NULL;
  DR_TRY(sim_create(s, &opt, MPI_COMM_WORLD, &S));
  const sim_status *st = sim_get_status(S);
  r->frames = st->frames;
  DR_MPI(MPI_Barrier(MPI_COMM_WORLD));
  const double t0 = MPI_Wtime();
  int rc = sim_run(S); /* frame 0, every frame, the flush: as drift run */
  const double t = MPI_Wtime() - t0;
  r->write_ms = r->frames > 0 ? 1e3 * t / r->frames : 0;
  r->writer_s = st->write_seconds;
  r->wait_s = st->io_seconds;
  sim_destroy(&S);
  DR_TRY(rc);
  double bytes = rank == 0 ? frame_bytes(out, r->frames) : 0;
  DR_MPI(MPI_Bcast(&bytes, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  const double per = bytes / (r->frames + 1);
  int ranks = 1;
  DR_MPI(MPI_Comm_size(MPI_COMM_WORLD, &ranks));
  const h5frame_layout lay = h5frame_layout_of(s->output_fields ? s->output_fields : H5FRAME_DEFAULT_FIELDS,
                                               s->output_precision, s->n_materials, ranks);
  DR_TRY(filesystem_node(out, r->frames + 1, per, &lay, &r->fs_node_gbs, &r->node_ranks));
  if (rank == 0) {
    r->frame_mib = bytes / (r->frames + 1) / 1048576.0;
    r->writer_gbs = r->writer_s > 0 ? bytes / r->writer_s / 1e9 : 0;
    rc = filesystem_best(out, r->frames + 1, per, 0, &r->fs_gbs);
    if (rc == DR_OK) rc = filesystem_best(out, r->frames + 1, per, 1, &r->fs_hot_gbs);
  }
  DR_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (rc) {
    if (rank != 0) dr_fail(rc, "bench --write: rank 0 failed; see its message");
    dr_mark_agreed();
    return rc;
  }
  log_info("bench %s: frames written into %s/: %.1f MiB a frame; stepping %.2f ms a frame, writing %.2f ms (%.2fx); "
           "the writer at %.2f GB/s, the filesystem at %.2f GB/s (%.2f from a cached buffer, %.2f from %d rank%s "
           "into one file)",
           name, out, r->frame_mib, r->step_ms, r->write_ms, r->step_ms > 0 ? r->write_ms / r->step_ms : 0,
           r->writer_gbs, r->fs_gbs, r->fs_hot_gbs, r->fs_node_gbs, r->node_ranks, r->node_ranks == 1 ? "" : "s");
  return DR_OK;
}

void bench_write_header(void) {
  printf("%-20s %6s %10s %12s %12s %9s %12s %12s %10s %12s %11s %13s %13s\n", "case", "frames", "MiB/frame",
         "step ms/fr", "write ms/fr", "write/step", "writer GB/s", "fs GB/s", "writer/fs", "fs hot GB/s", "main ms/fr",
         "fs node GB/s", "writer/node");
}

void bench_write_row(const char *name, const bench_write_result *r) {
  char node[32];
  snprintf(node, sizeof node, "%.2f (%d)", r->fs_node_gbs, r->node_ranks);
  printf("%-20s %6d %10.1f %12.2f %12.2f %9.2f %12.2f %12.2f %9.0f%% %12.2f %11.2f %13s %12.0f%%\n", name, r->frames,
         r->frame_mib, r->step_ms, r->write_ms, r->step_ms > 0 ? r->write_ms / r->step_ms : 0, r->writer_gbs, r->fs_gbs,
         r->fs_gbs > 0 ? 100.0 * r->writer_gbs / r->fs_gbs : 0, r->fs_hot_gbs,
         r->frames > 0 ? 1e3 * r->wait_s / (r->frames + 1) : 0, node,
         r->fs_node_gbs > 0 ? 100.0 * r->writer_gbs / r->fs_node_gbs : 0);
  fflush(stdout);
}
