/* bench_write.h - drift bench --write DIR: a case's frames written as `drift run` writes them,
 * against its stepping time and the filesystem's own speed for the same bytes (bench_write.c). */
#ifndef DRIFT_BENCH_WRITE_H
#define DRIFT_BENCH_WRITE_H

#include "scene.h"
#include "sim.h"

typedef struct bench_write_result {
  int frames;
  double frame_mib;  /* a frame file's size, MiB (the mean over frames 0 .. frames) */
  double step_ms;    /* ms a frame without output (the caller's timed run) */
  double write_ms;   /* ms a frame of the run that writes every frame, flush included */
  double writer_s;   /* seconds the writer's jobs ran */
  double wait_s;     /* seconds the run spent capturing and waiting for the writer */
  double writer_gbs; /* the frames' bytes over writer_s */
  double fs_gbs;     /* plain writes of the same bytes, from a frame-sized buffer in memory */
  double fs_hot_gbs; /* the same from one 16 MiB buffer, as dd from /dev/zero (cache-resident) */
  double fs_node_gbs; /* the frame's pattern: every rank of rank 0's node its rows into one file at once */
  int node_ranks;     /* the ranks of rank 0's node (fs_node_gbs' writers) */
} bench_write_result;

/* Collective. Runs the scene s (options base, with output into DIR/NAME/) and measures the
 * filesystem under it; logs one line and fills r (rank 0's figures; the others' hold the times). */
int bench_write_case(const scene *s, const sim_options *base, const char *dir, const char *name, double step_ms,
                     bench_write_result *r);
void bench_write_header(void);
void bench_write_row(const char *name, const bench_write_result *r);

#endif
