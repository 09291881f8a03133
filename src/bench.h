/* bench.h - drift bench: times whole frames of benchmark scenes (by default the paper's Sand
 * Blocks family in jobs/bench/) without writing frames (--write: and with), and reports one row per scene: time per
 * frame, particle-steps per second, rebuild-mappings per frame and the share of each phase. */
#ifndef DRIFT_BENCH_H
#define DRIFT_BENCH_H

/* drift bench [SCENE.json ...] [--frames N] [--backend auto|cpu|cuda] [--csv FILE]
 * [--profile-frames K] [--gpus LIST] [--deterministic] [--island-barrier B] [--island-reduce R]
 * [--write DIR]; --write: every case once more with its frames written into DIR/CASE/ and the
 * filesystem's own speed for the same bytes, in a second table (bench_write.h);
 * argv[1] is "bench". --deterministic: every case in
 * float and in deterministic mode (parallel.deterministic), with the cost of the latter. Needs MPI initialised. Prints the table on stdout
 * (rank 0); on failure records the message (error.h) and returns its code. */
int bench_main(int argc, char **argv);

#endif
