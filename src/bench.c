/* bench.c - drift bench (see bench.h).
 *
 * Each case is one scene. A first simulation, without profiling, gives the honest time: the
 * frames are timed with MPI_Wtime from the first substep to the end of the last frame, so
 * sampling and the upload to the device (sim_create) are left out, and no frame is written.
 * A second, short simulation with sim_options.profile (the backend then waits at the end of
 * every phase, which slows it down) gives only the share of each phase. The paper reports the
 * same quantity: the mean time per frame over all frames of Sand Blocks (Fei, Huang and Gao,
 * section "Sand Blocks").
 * --deterministic runs every case twice, in the default float mode and in deterministic mode
 * (parallel.deterministic: fixed-point P2G sums), and reports the cost of the latter as the
 * ratio of the times per frame.
 * --island-barrier and --island-reduce choose the island's variants (parallel.island_barrier,
 * parallel.island_reduce: the paper's multi-GPU ablations); the column "island" (CSV:
 * island_barrier, island_reduce) says which ran, on runs of several GPUs. */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#include <errno.h>
#include <mpi.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_write.h"
#include "comm.h"
#include "error.h"
#include "gpu_query.h"
#include "log.h"
#include "scene.h"
#include "sim.h"

#ifndef DRIFT_SOURCE_DIR
#define DRIFT_SOURCE_DIR "."
#endif

/* The cases run when no scene is named, in this order (jobs/bench/README.md). */
static const char *const default_cases[] = {"sand_blocks_l12", "sand_blocks_l23", "sand_blocks_l46",
                                            "sand_blocks_l46x16"};
#define N_DEFAULT_CASES (int)(sizeof default_cases / sizeof default_cases[0])

static const char *const phase_names[PHASE_COUNT] = {"rebuild", "p2g", "grid", "g2p"};

/* The paper's own figures for the scenes it reports in frames per second, by case name: the
 * mean over the run on four Tesla V100 (Fei, Huang and Gao, sections "Fountain" and "Crawling
 * in Snow"; each frame 1/60 s). Printed beside drift's fps (table column "paper", CSV column
 * paper_fps); empty for other cases. */
static const struct {
  const char *name;
  double fps;
} paper_fps[] = {{"fountain", 55.9}, {"crawling_snow", 68.5}};

typedef struct bench_args {
  const char **scenes; /* borrowed from argv, or default_paths */
  int n_scenes;
  int frames;          /* > 0: overrides time.frames of every case */
  int backend;         /* enum backend_kind, or -1: the scene's parallel.backend */
  const char *csv;     /* NULL: no CSV */
  int profile_frames;  /* frames of the profiled run; 0: no phase shares */
  int profile_from;    /* frames the profiled run simulates unprofiled before them (--profile-from) */
  int gpus[8], n_gpus; /* --gpus LIST: each case on each of these GPU counts (cuda); none: the scene's */
  int deterministic;   /* 1: every case in float and in deterministic mode */
  int island[2];       /* --island-barrier, --island-reduce (enum island_*_kind), or -1: the scene's */
  const char *write_dir; /* --write DIR: each case once more with its frames written there (bench_write.c) */
} bench_args;

typedef struct bench_result {
  char name[256];        /* the scene file's name without folder and .json */
  const char *path;      /* borrowed */
  char backend[16];
  char device[256];
  int gpus;              /* GPUs per rank asked for (0: the scene's parallel.gpus_per_rank) */
  double efficiency;     /* t1 / (n tn) against the same case on 1 GPU; < 0 when not measured */
  uint64_t particles;     /* at the end of the timed run (scenes with sources grow) */
  double particle_steps;  /* the sum over steps of the particles they moved */
  int frames;
  uint64_t steps, rebuilds;
  double seconds;        /* wall time of all frames */
  int have_phases;       /* 0 when not profiled, or the backend reported no phase times */
  double phase_pct[PHASE_COUNT];
  double phase_us[PHASE_COUNT]; /* wall time of each phase per profiled step (us, phases waited for) */
  int profile_from;      /* frames before the profiled ones (--profile-from) */
  int det;               /* ran in deterministic mode */
  double cost;           /* deterministic, after the float run of the case: time per frame over the float one; else 0 */
  int devices;           /* GPUs the run used (sim_gpus; 0 on the cpu backend) */
  int island_barrier;    /* enum island_barrier_kind, enum island_reduce_kind: the variants (several GPUs) */
  int island_reduce;
  int ranks;             /* MPI ranks; on several, the timed run's exchange (the ranks lines, summed): */
  double rank_bytes;     /* bytes sent between ranks, all ranks */
  double mpi_wait_s;     /* the largest rank's host time waiting on MPI, frame by frame */
  double vote_wait_s;    /* the largest rank's device time waiting at the step vote, frame by frame */
  uint64_t migrated;     /* particles moved between ranks */
  uint64_t rebalances;   /* times the cuts moved */
  int wrote;             /* --write: w holds the run that wrote its frames */
  bench_write_result w;
} bench_result;

static int parse_int(const char *flag, const char *v, long lo, long hi, const char *what, int *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi) return dr_fail(DR_EINPUT, "%s: '%s' is not %s", flag, v, what);
  *out = (int)x;
  return DR_OK;
}

static int parse_args(int argc, char **argv, bench_args *a) {
  *a = (bench_args){.backend = -1, .profile_frames = 2, .island = {-1, -1}};
  a->scenes = calloc((size_t)argc, sizeof *a->scenes);
  if (!a->scenes) return dr_fail(DR_ENOMEM, "out of host memory");
  for (int i = 2; i < argc; ++i) {
    const char *f = argv[i];
    int has_value = !strcmp(f, "--frames") || !strcmp(f, "--backend") || !strcmp(f, "--csv") ||
                    !strcmp(f, "--profile-frames") || !strcmp(f, "--profile-from") || !strcmp(f, "--gpus") ||
                    !strcmp(f, "--island-barrier") ||
                    !strcmp(f, "--island-reduce") || !strcmp(f, "--write");
    if (has_value && i + 1 >= argc) return dr_fail(DR_EINPUT, "%s needs a value (see drift --help)", f);
    if (!strcmp(f, "--frames")) {
      DR_TRY(parse_int(f, argv[++i], 1, 100000000, "a whole number of frames >= 1", &a->frames));
    } else if (!strcmp(f, "--profile-frames")) {
      DR_TRY(parse_int(f, argv[++i], 0, 100000000, "a whole number of frames >= 0", &a->profile_frames));
    } else if (!strcmp(f, "--profile-from")) {
      DR_TRY(parse_int(f, argv[++i], 0, 100000000, "a whole number of frames >= 0", &a->profile_from));
    } else if (!strcmp(f, "--backend")) {
      const char *v = argv[++i];
      if (!strcmp(v, "auto")) a->backend = BACKEND_AUTO;
      else if (!strcmp(v, "cpu")) a->backend = BACKEND_CPU;
      else if (!strcmp(v, "cuda")) a->backend = BACKEND_CUDA;
      else return dr_fail(DR_EINPUT, "--backend: '%s' is not one of auto, cpu, cuda", v);
    } else if (!strcmp(f, "--gpus")) {
      const char *v = argv[++i];
      for (const char *c = v; *c;) {
        char *end;
        long g = strtol(c, &end, 10);
        if (end == c || g < 1 || g > 8 || a->n_gpus == 8 || (*end && *end != ','))
          return dr_fail(DR_EINPUT, "--gpus: '%s' is not a comma-separated list of GPU counts from 1 to 8", v);
        a->gpus[a->n_gpus++] = (int)g;
        c = *end ? end + 1 : end;
      }
    } else if (!strcmp(f, "--island-barrier") || !strcmp(f, "--island-reduce")) {
      DR_TRY(scene_island_flag(f, argv[++i], a->island));
    } else if (!strcmp(f, "--deterministic")) {
      a->deterministic = 1;
    } else if (!strcmp(f, "--write")) {
      a->write_dir = argv[++i];
      if (!*a->write_dir) return dr_fail(DR_EINPUT, "--write: the folder name is empty");
    } else if (!strcmp(f, "--csv")) {
      a->csv = argv[++i];
      if (!*a->csv) return dr_fail(DR_EINPUT, "--csv: the file name is empty");
    } else if (f[0] == '-') {
      return dr_fail(DR_EINPUT, "unknown option '%s' (see drift --help)", f);
    } else {
      a->scenes[a->n_scenes++] = f;
    }
  }
  if (a->profile_from > 0 && a->profile_frames == 0)
    return dr_fail(DR_EINPUT, "--profile-from %d: there is no profiled run to start late (--profile-frames is 0)",
                   a->profile_from);
  return DR_OK;
}

/* "jobs/bench/sand_blocks_l12.json" -> "sand_blocks_l12". */
static void case_name(const char *path, char *out, size_t len) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  size_t n = strlen(base);
  if (n > 5 && !strcmp(base + n - 5, ".json")) n -= 5;
  snprintf(out, len, "%.*s", (int)n, base);
}

static void describe_device(const char *backend_name, int gpus, char *out, size_t len) {
  if (!strcmp(backend_name, "cpu")) {
    snprintf(out, len, "cpu (%d threads)", omp_get_max_threads());
    return;
  }
  int n = 0;
  char name[256] = "";
  gpu_count(&n, name, sizeof name);
  if (gpus > 1) snprintf(out, len, "%d x %s", gpus, n > 0 && name[0] ? name : "unknown GPU");
  else snprintf(out, len, "%s", n > 0 && name[0] ? name : "unknown GPU");
}

/* Runs the next n frames of S; a failure names the case, the frame and the step. particle_steps
 * (may be NULL) adds up the particles of every step: sources emit only at frame starts, so each
 * step of a frame moves the count the frame ends with. */
static int run_frames(sim *S, const char *name, int n, double *particle_steps) {
  const sim_status *st = sim_get_status(S);
  for (int f = st->frame + 1, last = st->frame + n; f <= last; ++f) {
    const uint64_t steps0 = st->steps;
    int rc = sim_advance_frame(S);
    if (particle_steps) *particle_steps += (double)(st->steps - steps0) * (double)st->particles;
    if (rc) {
      char cause[1024];
      snprintf(cause, sizeof cause, "%s", dr_message());
      dr_clear();
      return dr_fail(rc, "bench %s: frame %d, step %llu: %s", name, f, (unsigned long long)st->steps + 1, cause);
    }
  }
  return DR_OK;
}

static int run_case(const scene *s, const bench_args *a, bench_result *r) {
  sim_options opt = {.frames = a->frames, .backend = a->backend, .write_output = 0, .gpus = r->gpus};
  sim *S = NULL;
  DR_TRY(sim_create(s, &opt, MPI_COMM_WORLD, &S));
  const sim_status *st = sim_get_status(S);
  snprintf(r->backend, sizeof r->backend, "%s", sim_backend_name(S));
  r->devices = sim_gpus(S);
  describe_device(r->backend, r->devices, r->device, sizeof r->device);
  r->particles = st->particles;
  r->frames = st->frames;
  log_info("bench %s: %llu particles, %s backend on %s, %d frames%s%s%s%s", r->name, (unsigned long long)r->particles,
           r->backend, r->device, r->frames, r->devices > 1 ? "; island barrier " : "",
           r->devices > 1 ? scene_island_barrier_names[r->island_barrier] : "", r->devices > 1 ? ", reduction " : "",
           r->devices > 1 ? scene_island_reduce_names[r->island_reduce] : "");
  /* Counted from the status that sim_create leaves. It reports no rebuild today, so the first
   * mapping, which the backend builds inside sim_create, is counted: one per case at most. */
  uint64_t steps0 = st->steps, rebuilds0 = st->rebuilds, migrated0 = st->migrated, rebalances0 = st->rebalances;
  const double bytes0 = st->rank_bytes, mpi0 = st->mpi_wait_seconds, vote0 = st->vote_wait_seconds;
  double t0 = MPI_Wtime();
  int rc = run_frames(S, r->name, st->frames, &r->particle_steps);
  r->seconds = MPI_Wtime() - t0;
  r->particles = st->particles;
  r->steps = st->steps - steps0;
  r->rebuilds = st->rebuilds - rebuilds0;
  r->rank_bytes = st->rank_bytes - bytes0;
  r->mpi_wait_s = st->mpi_wait_seconds - mpi0;
  r->vote_wait_s = st->vote_wait_seconds - vote0;
  r->migrated = st->migrated - migrated0;
  r->rebalances = st->rebalances - rebalances0;
  sim_destroy(&S);
  DR_TRY(rc);
  DR_MPI(MPI_Comm_size(MPI_COMM_WORLD, &r->ranks));
  if (a->write_dir) {
    DR_TRY(bench_write_case(s, &opt, a->write_dir, r->name, r->frames > 0 ? 1e3 * r->seconds / r->frames : 0, &r->w));
    r->wrote = 1;
  }

  if (a->profile_frames > 0) {
    /* --profile-from F: the first F frames run as in the timed run (fused frames on the device,
     * nothing waited for), so that the profiled frames are those of a late stage of the scene */
    opt.frames = a->profile_from + a->profile_frames;
    opt.profile = a->profile_from == 0;
    DR_TRY(sim_create(s, &opt, MPI_COMM_WORLD, &S));
    st = sim_get_status(S);
    rc = run_frames(S, r->name, a->profile_from, NULL);
    sim_set_profile(S, 1);
    const uint64_t steps0 = st->steps;
    if (!rc) rc = run_frames(S, r->name, a->profile_frames, NULL);
    double sum = 0;
    for (int p = 0; p < PHASE_COUNT; ++p) sum += st->phase_seconds[p];
    r->have_phases = !rc && sum > 0 && st->steps > steps0;
    for (int p = 0; p < PHASE_COUNT && r->have_phases; ++p) {
      r->phase_pct[p] = 100.0 * st->phase_seconds[p] / sum;
      r->phase_us[p] = 1e6 * st->phase_seconds[p] / (double)(st->steps - steps0);
    }
    r->profile_from = a->profile_from;
    if (r->have_phases)
      log_info("bench %s: profiled frames %d-%d, per step: %s %.1f us, %s %.1f us, %s %.1f us, %s %.1f us", r->name,
               a->profile_from + 1, a->profile_from + a->profile_frames, phase_names[0], r->phase_us[0],
               phase_names[1], r->phase_us[1], phase_names[2], r->phase_us[2], phase_names[3], r->phase_us[3]);
    sim_destroy(&S);
    DR_TRY(rc);
  }
  return DR_OK;
}

static double per_frame_ms(const bench_result *r) { return r->frames > 0 ? 1e3 * r->seconds / r->frames : 0; }
static double steps_per_s(const bench_result *r) { return r->seconds > 0 ? (double)r->steps / r->seconds : 0; }
static double particle_steps_per_s(const bench_result *r) { return r->seconds > 0 ? r->particle_steps / r->seconds : 0; }
static double rebuilds_per_frame(const bench_result *r) {
  return r->frames > 0 ? (double)r->rebuilds / r->frames : 0;
}
/* Simulated frames per wall-clock second: 1000 / (ms per frame). */
static double frames_per_s(const bench_result *r) { return r->seconds > 0 ? r->frames / r->seconds : 0; }
/* Substeps per rebuild-mapping (the first mapping counted); 0 when there was none. */
static double steps_per_rebuild(const bench_result *r) {
  return r->rebuilds > 0 ? (double)r->steps / (double)r->rebuilds : 0;
}
/* The paper's fps for this case, or 0. */
static double paper_fps_of(const bench_result *r) {
  for (size_t i = 0; i < sizeof paper_fps / sizeof paper_fps[0]; ++i)
    if (!strcmp(r->name, paper_fps[i].name)) return paper_fps[i].fps;
  return 0;
}

#define DEVICE_WIDTH 24

/* The island's variants, "barrier/reduction" (e.g. "spin/double_buffer"), or "-" on one GPU or the cpu. */
static void island_label(const bench_result *r, char *out, size_t len) {
  if (r->devices > 1)
    snprintf(out, len, "%s/%s", scene_island_barrier_names[r->island_barrier], scene_island_reduce_names[r->island_reduce]);
  else
    snprintf(out, len, "-");
}

static void print_header(void) {
  printf("%-20s %-7s %-*s %10s %6s %10s %8s %6s %16s %8s %14s %13s %6s", "case", "backend", DEVICE_WIDTH, "device",
         "particles", "frames", "ms/frame", "fps", "paper", "particle-steps/s", "steps/s", "rebuilds/frame",
         "steps/rebuild", "eff%");
  for (int p = 0; p < PHASE_COUNT; ++p) printf(" %7s%%", phase_names[p]);
  printf(" %-6s %6s %s\n", "mode", "cost", "island");
  fflush(stdout);
}

static void print_row(const bench_result *r) {
  printf("%-20s %-7s %-*s %10llu %6d %10.2f %8.2f", r->name, r->backend, DEVICE_WIDTH, r->device,
         (unsigned long long)r->particles, r->frames, per_frame_ms(r), frames_per_s(r));
  if (paper_fps_of(r) > 0) printf(" %6.1f", paper_fps_of(r));
  else printf(" %6s", "-");
  printf(" %16.3e %8.1f %14.2f", particle_steps_per_s(r), steps_per_s(r), rebuilds_per_frame(r));
  if (r->rebuilds > 0) printf(" %13.1f", steps_per_rebuild(r));
  else printf(" %13s", "-");
  if (r->efficiency >= 0) printf(" %6.1f", 100.0 * r->efficiency);
  else printf(" %6s", "-");
  for (int p = 0; p < PHASE_COUNT; ++p) {
    if (r->have_phases) printf(" %8.1f", r->phase_pct[p]);
    else printf(" %8s", "-");
  }
  printf(" %-6s", r->det ? "det" : "float");
  if (r->cost > 0) printf(" %5.2fx", r->cost);
  else printf(" %6s", "-");
  char island[64];
  island_label(r, island, sizeof island);
  printf(" %s\n", island);
  fflush(stdout);
}

/* A CSV field, quoted (RFC 4180) when it holds a comma, a quote or a line break. */
static void csv_field(FILE *f, const char *s) {
  if (!strpbrk(s, ",\"\r\n")) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; ++s) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static void csv_header(FILE *f) {
  fputs("case,scene,backend,device,particles,frames,steps,seconds,ms_per_frame,particle_steps_per_s,steps_per_s,"
        "rebuilds_per_frame,efficiency",
        f);
  for (int p = 0; p < PHASE_COUNT; ++p) fprintf(f, ",%s_pct", phase_names[p]);
  fputs(",mode,deterministic_cost,fps,steps_per_rebuild,paper_fps,island_barrier,island_reduce,profile_from", f);
  for (int p = 0; p < PHASE_COUNT; ++p) fprintf(f, ",%s_us", phase_names[p]);
  fputs(",rank_kb_per_step,mpi_wait_pct,vote_wait_pct,migrated,rebalances", f);
  fputc('\n', f);
}

static void csv_row(FILE *f, const bench_result *r) {
  csv_field(f, r->name);
  fputc(',', f);
  csv_field(f, r->path);
  fputc(',', f);
  csv_field(f, r->backend);
  fputc(',', f);
  csv_field(f, r->device);
  fprintf(f, ",%llu,%d,%llu,%.6f,%.6g,%.6g,%.6g,%.6g", (unsigned long long)r->particles, r->frames,
          (unsigned long long)r->steps, r->seconds, per_frame_ms(r), particle_steps_per_s(r), steps_per_s(r),
          rebuilds_per_frame(r));
  if (r->efficiency >= 0) fprintf(f, ",%.4f", r->efficiency);
  else fputc(',', f);
  for (int p = 0; p < PHASE_COUNT; ++p) {
    if (r->have_phases) fprintf(f, ",%.2f", r->phase_pct[p]);
    else fputc(',', f);
  }
  fprintf(f, ",%s,", r->det ? "deterministic" : "float");
  if (r->cost > 0) fprintf(f, "%.4f", r->cost);
  fprintf(f, ",%.6g,", frames_per_s(r));
  if (r->rebuilds > 0) fprintf(f, "%.6g", steps_per_rebuild(r));
  fputc(',', f);
  if (paper_fps_of(r) > 0) fprintf(f, "%.1f", paper_fps_of(r));
  /* the island's variants: empty on one GPU or the cpu, where neither runs */
  if (r->devices > 1)
    fprintf(f, ",%s,%s", scene_island_barrier_names[r->island_barrier], scene_island_reduce_names[r->island_reduce]);
  else
    fputs(",,", f);
  /* the profiled run: its first profiled frame - 1, and each phase's time per step */
  if (r->have_phases) fprintf(f, ",%d", r->profile_from);
  else fputc(',', f);
  for (int p = 0; p < PHASE_COUNT; ++p) {
    if (r->have_phases) fprintf(f, ",%.2f", r->phase_us[p]);
    else fputc(',', f);
  }
  /* several ranks: the exchange over the timed frames (empty on one rank, where nothing crosses);
   * the waits as shares of the frames' time, the device's only where a device waits at the vote */
  if (r->ranks > 1 && r->seconds > 0) {
    fprintf(f, ",%.6g,%.2f,", r->steps ? r->rank_bytes / 1e3 / (double)r->steps : 0.0, 100.0 * r->mpi_wait_s / r->seconds);
    if (r->vote_wait_s > 0) fprintf(f, "%.2f", 100.0 * r->vote_wait_s / r->seconds);
    fprintf(f, ",%llu,%llu", (unsigned long long)r->migrated, (unsigned long long)r->rebalances);
  } else {
    fputs(",,,,,", f);
  }
  fputc('\n', f);
}

/* The CSV is written under FILE.tmp and renamed once every case has run, so FILE never holds a
 * partial table. The temporary file is opened before the first case, so an unwritable path
 * fails at once, not after hours of simulation. */
static int csv_open(const char *path, char *tmp, size_t len, FILE **out) {
  *out = NULL;
  if (snprintf(tmp, len, "%s.tmp", path) >= (int)len) return dr_fail(DR_EINPUT, "--csv: the file name is too long");
  FILE *f = fopen(tmp, "w");
  if (!f) return dr_fail(DR_EIO, "cannot write %s: %s", tmp, strerror(errno));
  csv_header(f);
  *out = f;
  return DR_OK;
}

static int csv_finish(FILE *f, const char *tmp, const char *path) {
  int bad = ferror(f);
  if (fclose(f) != 0 || bad) {
    remove(tmp);
    return dr_fail(DR_EIO, "cannot write %s: %s", tmp, strerror(errno));
  }
  if (rename(tmp, path) != 0) {
    int e = errno;
    remove(tmp);
    return dr_fail(DR_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(e));
  }
  return DR_OK;
}

int bench_main(int argc, char **argv) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  log_set_rank(rank);
  bench_args a;
  static char default_paths[N_DEFAULT_CASES][4096];
  int rc = parse_args(argc, argv, &a);
  if (!rc && a.n_scenes == 0) {
    for (int i = 0; i < N_DEFAULT_CASES; ++i) {
      snprintf(default_paths[i], sizeof default_paths[i], "%s/jobs/bench/%s.json", DRIFT_SOURCE_DIR, default_cases[i]);
      a.scenes[a.n_scenes++] = default_paths[i];
    }
  }
  /* Every scene is read before the first case runs: a typo in the last one fails at once. */
  scene *scenes = rc ? NULL : calloc((size_t)a.n_scenes, sizeof *scenes);
  if (!rc && !scenes) rc = dr_fail(DR_ENOMEM, "out of host memory");
  int loaded = 0;
  for (; !rc && loaded < a.n_scenes; ++loaded) {
    rc = scene_load(a.scenes[loaded], &scenes[loaded]);
    if (!rc) rc = scene_build_levelsets(&scenes[loaded]);
    if (rc) scene_destroy(&scenes[loaded]);
  }
  if (rc && loaded > 0) --loaded; /* the one that failed holds nothing */

  char tmp[4096 + 8];
  FILE *csv = NULL;
  if (!rc && a.csv && rank == 0) rc = csv_open(a.csv, tmp, sizeof tmp, &csv);
  if (!rc && rank == 0) print_header();
  const int n_counts = a.n_gpus > 0 ? a.n_gpus : 1;
  bench_result *wrote = NULL; /* --write: the cases' rows, for the table after the main one */
  int n_wrote = 0;
  for (int i = 0; !rc && i < a.n_scenes; ++i) {
    /* --gpus: the case on each GPU count; --deterministic: in float mode, then in deterministic
     * mode (a shallow copy of the scene with the key set); else as the scene says */
    double t1[2] = {-1, -1}; /* seconds per frame on one GPU per mode, for the efficiency e = t1 / (n tn) */
    for (int g = 0; !rc && g < n_counts; ++g) {
      double float_ms = 0;
      for (int mode = a.deterministic ? 0 : -1; !rc && mode <= (a.deterministic ? 1 : -1); ++mode) {
        scene sc = scenes[i];
        if (mode >= 0) sc.deterministic = mode;
        scene_set_island(&sc, a.island);
        bench_result r = {.path = a.scenes[i], .gpus = a.n_gpus > 0 ? a.gpus[g] : 0, .efficiency = -1,
                          .det = sc.deterministic, .island_barrier = sc.island_barrier,
                          .island_reduce = sc.island_reduce};
        case_name(a.scenes[i], r.name, sizeof r.name);
        rc = run_case(&sc, &a, &r);
        if (rc) break;
        if (mode == 0) float_ms = per_frame_ms(&r);
        if (mode == 1 && float_ms > 0) r.cost = per_frame_ms(&r) / float_ms;
        const double tn = r.frames > 0 ? r.seconds / r.frames : 0;
        if (r.gpus == 1) t1[r.det] = tn;
        if (r.gpus >= 1 && t1[r.det] > 0 && tn > 0) r.efficiency = t1[r.det] / (r.gpus * tn);
        if (rank == 0) {
          print_row(&r);
          if (csv) csv_row(csv, &r);
        }
        if (r.wrote) {
          bench_result *w = realloc(wrote, sizeof *w * (size_t)(n_wrote + 1));
          if (!w) rc = dr_fail(DR_ENOMEM, "out of host memory");
          else wrote = w, wrote[n_wrote++] = r;
        }
      }
    }
  }
  if (!rc && n_wrote > 0 && rank == 0) {
    printf("\nframes written every frame into %s (stepping: the table above; fs: plain writes of the same bytes)\n",
           a.write_dir);
    bench_write_header();
    for (int i = 0; i < n_wrote; ++i) bench_write_row(wrote[i].name, &wrote[i].w);
  }
  free(wrote);
  if (csv) {
    if (!rc) rc = csv_finish(csv, tmp, a.csv);
    else fclose(csv), remove(tmp);
  }
  for (int i = 0; i < loaded; ++i) scene_destroy(&scenes[i]);
  free(scenes);
  free(a.scenes);
  return rc;
}
