/* main.c - the drift command line: run a scene, check a scene, benchmark (bench.c), help,
 * version. The only place that prints an error and picks the exit code (error.h lists the codes). */
#include <hdf5.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "comm.h"
#include "error.h"
#include "frame_fields.h"
#include "gpu_query.h"
#include "log.h"
#include "memplan.h"
#include "memtally.h"
#include "pack16.h"
#include "particles.h"
#include "preview.h"
#include "sample.h"
#include "scene.h"
#include "settings.h"
#include "signals.h"
#include "sim.h"

static const char *usage =
    "usage: drift run SCENE.json [--out DIR] [--frames N] [--backend auto|cpu|cuda] [--gpus N] [--quiet]\n"
    "                 [--resume [FILE|DIR]] [--force] [--island-barrier B] [--island-reduce R]\n"
    "       drift check SCENE.json\n"
    "       drift bench [SCENE.json ...] [--frames N] [--backend auto|cpu|cuda] [--csv FILE]\n"
    "                   [--profile-frames K] [--profile-from F] [--gpus LIST] [--deterministic]\n"
    "                   [--island-barrier B] [--island-reduce R] [--write DIR]\n"
    "       drift --help | --help-debug | --version\n"
    "\n"
    "  run     simulate the scene; writes DIR/frame_NNNNN.h5 and DIR/frames.xdmf (open it in\n"
    "          ParaView). Progress goes to stderr, one line per frame.\n"
    "  check   validate the scene and print particles per body and material, the memory the\n"
    "          run needs and the step size; writes nothing.\n"
    "  bench   time the frames of each scene (default: the Sand Blocks scenes of jobs/bench/)\n"
    "          without writing frames; one table row per scene on stdout: ms per frame,\n"
    "          particle-steps/s, steps/s, rebuilds per frame, share of each phase.\n"
    "\n"
    "  --out DIR        output folder (default: the scene's output.dir, else ./frames)\n"
    "  --frames N       simulate N frames instead of the scene's time.frames\n"
    "  --backend B      auto (cuda where a GPU is present, else cpu), cpu or cuda\n"
    "  --gpus N         cuda: GPUs per rank (the island), instead of parallel.gpus_per_rank;\n"
    "                   bench: a list (--gpus 1,2,4) runs every case on each count and reports\n"
    "                   the multi-GPU efficiency t1 / (n tn)\n"
    "  --island-barrier B\n"
    "                   cuda, several GPUs: spin (spin lock on the GPUs, the default) or events\n"
    "                   (cudaStreamWaitEvent issued by the host), instead of parallel.island_barrier\n"
    "  --island-reduce R\n"
    "                   cuda, several GPUs: double_buffer (P2P reads, the default) or p2p_atomics\n"
    "                   (one owner per shared block, P2P atomics), instead of parallel.island_reduce\n"
    "  --quiet          no progress lines\n"
    "  --resume [FILE|DIR]\n"
    "                   continue from a checkpoint: FILE, or the newest whole\n"
    "                   checkpoint_NNNNN.h5 in DIR (default: the output folder), on any\n"
    "                   number of ranks. The scene file must be the one it came from.\n"
    "  --force          an output folder that holds an earlier run's output: delete drift's\n"
    "                   files there first (with --resume: continue from a checkpoint of another\n"
    "                   scene file)\n"
    "  --csv FILE       bench: also write the table as CSV to FILE\n"
    "  --profile-frames K\n"
    "                   bench: frames of a second, profiled run that measures the share of\n"
    "                   each phase (default 2; 0 skips it)\n"
    "  --profile-from F\n"
    "                   bench: the profiled run first simulates F frames unprofiled, so that\n"
    "                   its --profile-frames frames are frames F+1.. of the scene (default 0)\n"
    "  --deterministic  bench: run every scene in float and in deterministic mode\n"
    "                   (parallel.deterministic) and report the cost of the latter\n"
    "  --write DIR      bench: run every scene once more writing its frames into DIR/CASE/,\n"
    "                   and write the same bytes plainly; a second table puts the run's time\n"
    "                   beside the stepping time and the writer's speed beside the filesystem's\n"
    "\n"
    "Settings of run and bench, each also read from its environment variable (the option wins):\n";

static const char *usage_end =
    "\n"
    "SIGTERM, SIGINT or SIGUSR1 stop a run before its next step with a checkpoint.\n"
    "Exit status: 0 success, 2 bad input, 3 I/O, 4 out of memory, 5 MPI, 6 CUDA,\n"
    "7 the simulation became unstable, 8 internal error, 9 stopped by a signal after\n"
    "writing a checkpoint (continue with --resume), 10 a rank stopped answering for\n"
    "longer than parallel.watchdog_s (continue with --resume from the last checkpoint).\n"
    "Scene format: docs/scene-format.md. Output layout: docs/output.md.\n"
    "Debugging aids: drift --help-debug.\n";

static void print_usage(FILE *f) {
  fputs(usage, f);
  settings_print_help(f, SETTING_USER);
  fputs(usage_end, f);
}

static void print_debug_help(void) {
  printf("Debugging aids, read from the environment only (docs/debugging.md):\n");
  settings_print_help(stdout, SETTING_DEBUG);
}

static int fail(int code) {
  fprintf(stderr, "drift: %s\n", dr_message()); /* one write: stderr is unbuffered */
  if (dr_where()[0]) log_trace("the failure above was found at %s", dr_where());
  return code;
}

static int usage_error(const char *fmt, const char *arg) {
  fprintf(stderr, "drift: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, " (see drift --help)\n");
  return DR_EINPUT;
}

static void print_version(void) {
  unsigned maj, min, rel;
  H5get_libversion(&maj, &min, &rel);
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(lib, &len);
  char *nl = strchr(lib, '\n');
  if (nl) *nl = 0;
  char *comma = strchr(lib, ',');
  if (comma) *comma = 0;
  printf("drift %s\nbackends: cpu (OpenMP)%s\nMPI: %s\nHDF5: %u.%u.%u (parallel)\n", DRIFT_VERSION,
         gpu_backend_built() ? ", cuda" : "; cuda not built yet", lib, maj, min, rel);
}

static const char *model_name(int m) {
  return m == MODEL_FIXED_COROTATED ? "fixed_corotated"
         : m == MODEL_DRUCKER_PRAGER ? "drucker_prager"
         : m == MODEL_NACC           ? "nacc"
                                     : "weakly_compressible";
}

static double mib(double b) { return b / 1048576.0; }

static const char *const SHAPE_NAMES_CHECK[] = {"box", "sphere", "cylinder"};

static double gib(double b) { return b / 1073741824.0; }

/* "particles 1.2, sort 0.3, ... MiB": a plan's bytes by kind. */
static void print_kinds(const memplan_bytes *m) {
  const char *sep = "";
  for (int k = 0; k < MT_KINDS; ++k) {
    if (m->kind[k] <= 0) continue;
    printf("%s%s %.1f", sep, memtally_kind_name(k), mib(m->kind[k]));
    sep = ", ";
  }
  printf(" MiB");
}

/* Whether a run of frames frames plans its checkpoints from the backend's copy of the particles
 * (memplan_config.ckpt_hold): it writes some along the way and DRIFT_CKPT_HOLD leaves it. drift run
 * then falls back to the plan without the copy where that plan does not fit (refuse_unless_fits). */
static int plans_ckpt_hold(const scene *s, int frames) {
  return settings()->ckpt_hold && s->checkpoint_every > 0 && frames >= s->checkpoint_every;
}

/* drift check's memory lines: the plan of each backend, the free memory now, and a warning
 * where the plan does not fit here (check may run elsewhere than the run: it warns; run refuses). */
static void print_plan(const scene *s, const memplan *cpu, const memplan *cuda, int ngpu, double dev_free) {
  const double n = cpu->most > 0 ? (double)cpu->most : 1.0;
  if (cpu->most > cpu->particles)
    printf("particles at most: %llu (the sources' most over %d frames)\n", (unsigned long long)cpu->most, s->frames);
  printf("grid: about %.0f blocks of 4^3 nodes around %.0f particle blocks\n", cpu->blocks, cpu->pblocks);
  printf("memory plan, cpu backend: host %.1f MiB at its peak (%.0f B a particle): ", mib(cpu->host.total),
         cpu->host.total / n);
  print_kinds(&cpu->host);
  printf("\n");
  if (gpu_backend_built()) {
    printf("memory plan, cuda backend%s: each of %d GPU(s) %.1f MiB (%.0f B a particle): ",
           s->storage == STORAGE_COMPACT ? ", compact storage" : "",
           cuda->cfg.devices, mib(cuda->device.total), cuda->device.total * cuda->cfg.devices / n);
    print_kinds(&cuda->device);
    printf("; host %.1f MiB (%.0f B a particle)\n", mib(cuda->host.total), cuda->host.total / n);
    memplan_config c = cuda->cfg;
    c.snap_host = 1;
    memplan h;
    if (memplan_create(s, &c, &h) == DR_OK) {
      printf("frames' snapshot: on the GPUs, counted above; where a GPU has no room for it (--snapshot-host), in "
             "pinned host memory: each GPU %.1f MiB (%.0f B a particle), host %.1f MiB (%.0f B a particle)\n",
             mib(h.device.total), h.device.total * c.devices / n, mib(h.host.total), h.host.total / n);
      memplan_destroy(&h);
    }
  }
  double host_free = 0.0;
  const char *limit = "unknown";
  memplan_host_free(&host_free, &limit);
  if (cpu->cfg.ckpt_hold)
    printf("checkpoints: written from a copy of the particles behind the steps, counted above; a run whose free "
           "memory does not hold it fetches them from the particles while the steps wait\n");
  printf("free here: host %.2f GiB (%s)", gib(host_free), limit);
  if (ngpu > 0) printf(", device 0 %.2f GiB", gib(dev_free));
  printf("\n");
  if (host_free > 0 && cpu->host.total > host_free)
    printf("warning: the cpu backend's plan (%.2f GiB) does not fit in this host's free memory (%.2f GiB, %s); about "
           "%llu particles would fit\n", gib(cpu->host.total), gib(host_free), limit,
           (unsigned long long)memplan_fitting(s, cpu, host_free, 0.0));
  if (ngpu > 0 && gpu_backend_built() && (cuda->device.total > dev_free || (host_free > 0 && cuda->host.total > host_free)))
    printf("warning: the cuda backend's plan (%.2f GiB a GPU, host %.2f GiB) does not fit in this machine's free memory "
           "(device 0 %.2f GiB, host %.2f GiB); about %llu particles would fit\n", gib(cuda->device.total),
           gib(cuda->host.total), gib(dev_free), gib(host_free),
           (unsigned long long)memplan_fitting(s, cuda, host_free, dev_free));
}

static int cmd_check(const char *path) {
  scene s;
  DR_TRY(scene_load(path, &s));
  printf("scene %s\n", path);
  int n[3];
  for (int a = 0; a < 3; ++a) n[a] = (int)((s.domain_max[a] - s.domain_min[a]) / s.dx + 0.5);
  printf("domain [%g, %g, %g] - [%g, %g, %g] m, dx %g m (%d x %d x %d cells)\n", s.domain_min[0], s.domain_min[1],
         s.domain_min[2], s.domain_max[0], s.domain_max[1], s.domain_max[2], s.dx, n[0], n[1], n[2]);
  /* the particles and the memory from the plan in closed form (memplan.h): nothing is sampled */
  memplan plan, plan_cuda;
  const int hold = plans_ckpt_hold(&s, s.frames);
  const memplan_config cpu_cfg = {.backend = BACKEND_CPU, .ranks = 1, .devices = 1, .ckpt_hold = hold};
  memplan_config cuda_cfg = {.backend = BACKEND_CUDA, .ranks = 1, .devices = s.gpus_per_rank > 0 ? s.gpus_per_rank : 1,
                             .ckpt_hold = hold};
  int ngpu = 0;
  gpu_count(&ngpu, NULL, 0);
  double dev_free = 0.0;
  if (ngpu > 0) (void)gpu_free_memory(0, &dev_free, NULL);
  DR_TRY(memplan_create(&s, &cpu_cfg, &plan));
  int rc_plan = memplan_create(&s, &cuda_cfg, &plan_cuda);
  if (rc_plan) {
    memplan_destroy(&plan);
    scene_destroy(&s);
    return rc_plan;
  }
  uint64_t total = 0;
  uint64_t *per_mat = calloc((size_t)s.n_materials, sizeof *per_mat);
  double *mass = calloc((size_t)s.n_materials, sizeof *mass);
  if (!per_mat || !mass) {
    free(per_mat), free(mass), memplan_destroy(&plan), memplan_destroy(&plan_cuda), scene_destroy(&s);
    return dr_fail(DR_ENOMEM, "out of host memory");
  }
  printf("bodies:\n");
  for (int b = 0; b < s.n_bodies; ++b) {
    const scene_body *B = &s.bodies[b];
    if (B->emit.mode != EMIT_NONE) {
      const scene_emit *e = &B->emit;
      char until[64] = "the end of the run", cap[64] = "";
      if (isfinite(e->end)) snprintf(until, sizeof until, "%g s", e->end);
      if (e->max_particles < EMIT_MAX_PARTICLES)
        snprintf(cap, sizeof cap, ", at most %llu particles", (unsigned long long)e->max_particles);
      if (e->mode == EMIT_RATE)
        printf("  [%d] source (%s)  material %s  ppc %d  -> %g particles/s from %g s to %s%s\n", b,
               SHAPE_NAMES_CHECK[B->shape], s.materials[B->material].name, B->ppc, e->rate, e->start, until, cap);
      else
        printf("  [%d] source (%s)  material %s  ppc %d  -> resampled every frame from %g s to %s%s\n", b,
               SHAPE_NAMES_CHECK[B->shape], s.materials[B->material].name, B->ppc, e->start, until, cap);
      continue;
    }
    const uint64_t c = plan.body[b];
    if (c == 0) {
      free(per_mat), free(mass), memplan_destroy(&plan), memplan_destroy(&plan_cuda), scene_destroy(&s);
      return dr_fail(DR_EINPUT, "%s: bodies[%d]: the body holds no particle (raise ppc or make it larger than dx)", path, b);
    }
    total += c;
    per_mat[B->material] += c;
    mass[B->material] += sample_shape_volume(&s, b) * s.materials[B->material].density;
    if (B->shape == SHAPE_BOX)
      printf("  [%d] box [%g, %g, %g] - [%g, %g, %g]%s  material %s  ppc %d  -> %llu particles\n", b, B->min[0],
             B->min[1], B->min[2], B->max[0], B->max[1], B->max[2], B->rotated ? " (rotated)" : "",
             s.materials[B->material].name, B->ppc, (unsigned long long)c);
    else if (B->shape == SHAPE_CYLINDER)
      printf("  [%d] cylinder center [%g, %g, %g] axis [%g, %g, %g] radius %g height %g  material %s  ppc %d  -> %llu "
             "particles\n", b, B->center[0], B->center[1], B->center[2], B->axis[0], B->axis[1], B->axis[2], B->radius,
             B->height, s.materials[B->material].name, B->ppc, (unsigned long long)c);
    else if (B->shape == SHAPE_MESH)
      printf("  [%d] mesh [%g, %g, %g] - [%g, %g, %g], volume %.4g m^3  material %s  ppc %d  -> %llu particles\n", b,
             B->mesh_lo[0], B->mesh_lo[1], B->mesh_lo[2], B->mesh_hi[0], B->mesh_hi[1], B->mesh_hi[2], B->volume,
             s.materials[B->material].name, B->ppc, (unsigned long long)c);
    else
      printf("  [%d] sphere center [%g, %g, %g] radius %g  material %s  ppc %d  -> %llu particles\n", b, B->center[0],
             B->center[1], B->center[2], B->radius, s.materials[B->material].name, B->ppc, (unsigned long long)c);
  }
  if (s.n_colliders > 0) {
    static const char *const shapes[] = {"plane", "box", "sphere", "cylinder", "mesh"};
    static const char *const types[] = {"sticky", "slip", "separate"};
    printf("colliders:\n");
    for (int k = 0; k < s.n_colliders; ++k) {
      const scene_collider *C = &s.colliders[k];
      printf("  [%d] %s, %s", k, shapes[C->shape], types[C->type]);
      if (C->type == BOUNDARY_SEPARATE) printf(" (friction %g)", C->friction);
      if (C->shape == SDF_MESH && C->n_frames > 1)
        printf(", a sequence of %d meshes at %g fps (%g s)", C->n_frames, C->fps, (C->n_frames - 1) / C->fps);
      if (C->n_keys > 0)
        printf(", %d keyframes from %g s to %g s\n", C->n_keys, C->keys[0].time, C->keys[C->n_keys - 1].time);
      else
        printf(C->shape == SDF_MESH && C->n_frames > 1 ? ", no keyframes\n" : ", static\n");
    }
  }
  printf("materials:\n");
  for (int m = 0; m < s.n_materials; ++m)
    printf("  [%d] %s (%s): %llu particles, %.4g kg\n", m, s.materials[m].name, model_name(s.materials[m].params.model),
           (unsigned long long)per_mat[m], mass[m]);
  printf("total: %llu particles\n", (unsigned long long)total);
  /* the level sets' sizes as planned (scene.h: check never builds them; the plan holds them) */
  const scene_levelset_sizes *lc = &s.levelset_plan[1], *lb = &s.levelset_plan[0];
  if (lc->sets > 0) /* mesh colliders: every frame's level set, on the host and on each GPU */
    printf("mesh level sets: %d, %.1f MiB (brick tables %.1f MiB, bricks %.1f MiB), on the host and on each GPU\n",
           lc->sets, mib(scene_levelset_data_bytes(lc)), mib(4.0 * (double)lc->table_n),
           mib(4.0 * (double)lc->floats_n));
  if (lb->sets > 0) /* mesh bodies: sampled through their level sets, on the host */
    printf("mesh bodies' level sets: %d, %.1f MiB, on the host\n", lb->sets,
           mib(scene_levelset_data_bytes(lb)));
  print_plan(&s, &plan, &plan_cuda, ngpu, dev_free);
  double fdt = 1.0 / s.fps, dt = scene_initial_dt(&s);
  if (s.dt > 0)
  {
    printf("step: fixed dt %.4g s, %d substeps per frame\n", dt, (int)ceil(fdt / s.dt - 1e-9));
    double limit = s.dx / scene_wave_speed(&s);
    if (dt > limit)
      printf("warning: dt is larger than dx / c = %.4g s (c = %.4g m/s, the fastest elastic wave): the run is likely to blow up\n",
             limit, scene_wave_speed(&s));
  }
  else
    printf("step: adaptive, cfl %g: initial dt %.4g s (wave speed %.4g m/s), about %.0f substeps per frame at rest "
           "(at most %d: time.max_substeps)\n", s.cfl, dt, scene_wave_speed(&s), scene_substeps_at_rest(&s),
           s.max_substeps);
  int written = s.frames / s.output_every + 1;
  const h5frame_layout lay = h5frame_layout_of(s.output_fields, s.output_precision, s.n_materials, 1);
  const h5frame_layout lay_ranks = h5frame_layout_of(s.output_fields, s.output_precision, s.n_materials, 2);
  const unsigned per = h5frame_particle_bytes(&lay), per_ranks = h5frame_particle_bytes(&lay_ranks);
  printf("frames: %d at %g fps (%.4g s), %d files of %.1f MiB in %s/ (%u bytes a particle: output.fields at "
         "precision %s", s.frames, s.fps, s.frames * fdt, written, mib((double)total * per + 4096), s.output_dir, per,
         h5frame_precision_names[s.output_precision]);
  if (per_ranks != per) printf(" on one rank, %u on 2 to 256 ranks: the owner in 16 bits", per_ranks);
  printf(")\n");
  pack16_fixed fx;
  if (s.output_precision == H5FRAME_HALF && pack16_fixed_for(sim_position_extent(&s), &fx) == 0)
    printf("half precision: positions to within %.3g m (a fixed point of spacing 2^%d m = dx / %.4g over |x| <= %.4g "
           "m)\n", 0.5 * pack16_fixed_spacing(&fx), fx.shift, s.dx / pack16_fixed_spacing(&fx), sim_position_extent(&s));
  if (s.output_precision == H5FRAME_HALF && pack16_fixed_spacing(&fx) > s.dx / 8)
    printf("warning: half precision's positions are coarser than dx / 8: the fixed point counts from 0, and the domain "
           "reaches %.4g m from the origin; moving the scene near the origin makes them finer\n",
           sim_position_extent(&s));
  if (s.preview) {
    static const char *const views[] = {"front (along -z)", "side (along -x)", "top (along -y)"};
    preview_params pp = {.size = s.preview_size, .view = s.preview_view};
    for (int a = 0; a < 3; ++a) pp.domain_min[a] = s.domain_min[a], pp.domain_max[a] = s.domain_max[a];
    int w = 0, h = 0;
    preview_dims(&pp, &w, &h);
    printf("previews: %d x %d px PNG beside each frame, %s view, coloured by %s\n", w, h, views[s.preview_view],
           s.preview_color == PREVIEW_BY_OWNER ? "owner (rank and device)" : "material");
  }
  /* a checkpoint: every particle attribute (particles.h) and the scene's bytes */
  const double ckpt = (double)total * (double)particles_record_bytes() + (double)s.text_len + 16384.0;
  if (s.checkpoint_every > 0)
    printf("checkpoints: every %d frames, the newest %d kept, %.1f MiB each, in %s/\n", s.checkpoint_every,
           s.checkpoint_keep, mib(ckpt), s.output_dir);
  else
    printf("checkpoints: none along the way (output.checkpoint_every); one of %.1f MiB if a signal stops the run\n",
           mib(ckpt));
  free(per_mat), free(mass);
  memplan_destroy(&plan), memplan_destroy(&plan_cuda);
  scene_destroy(&s);
  return DR_OK;
}

static int parse_backend(const char *v, int *out) {
  if (!strcmp(v, "auto")) *out = BACKEND_AUTO;
  else if (!strcmp(v, "cpu")) *out = BACKEND_CPU;
  else if (!strcmp(v, "cuda")) *out = BACKEND_CUDA;
  else return dr_fail(DR_EINPUT, "--backend: '%s' is not one of auto, cpu, cuda", v);
  return DR_OK;
}

/* drift run's arguments. */
/* drift run's arguments. island[0], island[1]: --island-barrier and --island-reduce, or -1 (the scene's). */
static int parse_run_args(int argc, char **argv, const char **scene_path, sim_options *opt_out, int *quiet_out,
                          int island[2]) {
  const char *path = NULL;
  sim_options opt = {.backend = -1, .write_output = 1};
  int quiet = 0;
  island[0] = island[1] = -1;
  for (int i = 2; i < argc; ++i) {
    const char *a = argv[i];
    int has_value = !strcmp(a, "--out") || !strcmp(a, "--frames") || !strcmp(a, "--backend") || !strcmp(a, "--gpus") ||
                    !strcmp(a, "--island-barrier") || !strcmp(a, "--island-reduce");
    if (has_value && i + 1 >= argc) return dr_fail(DR_EINPUT, "%s needs a value (see drift --help)", a);
    if (!strcmp(a, "--out")) {
      opt.out_dir = argv[++i];
      if (!*opt.out_dir) return dr_fail(DR_EINPUT, "--out: the folder name is empty");
    } else if (!strcmp(a, "--frames")) {
      char *end;
      long f = strtol(argv[++i], &end, 10);
      if (*end || f < 1 || f > 100000000)
        return dr_fail(DR_EINPUT, "--frames: '%s' is not a whole number of frames >= 1", argv[i]);
      opt.frames = (int)f;
    } else if (!strcmp(a, "--backend")) {
      DR_TRY(parse_backend(argv[++i], &opt.backend));
    } else if (!strcmp(a, "--gpus")) {
      char *end;
      long g = strtol(argv[++i], &end, 10);
      if (*end || g < 1 || g > 8) return dr_fail(DR_EINPUT, "--gpus: '%s' is not a number of GPUs from 1 to 8", argv[i]);
      opt.gpus = (int)g;
    } else if (!strcmp(a, "--island-barrier") || !strcmp(a, "--island-reduce")) {
      DR_TRY(scene_island_flag(a, argv[++i], island));
    } else if (!strcmp(a, "--quiet")) {
      quiet = 1;
    } else if (!strcmp(a, "--resume") || !strncmp(a, "--resume=", 9)) {
      /* an optional value: --resume=PATH, or the next argument unless it is an option */
      if (a[8] == '=') opt.resume = a + 9;
      else if (i + 1 < argc && argv[i + 1][0] != '-') opt.resume = argv[++i];
      else opt.resume = "";
    } else if (!strcmp(a, "--force")) {
      opt.force = 1;
    } else if (a[0] == '-') {
      return dr_fail(DR_EINPUT, "unknown option '%s' (see drift --help)", a);
    } else if (path) {
      return dr_fail(DR_EINPUT, "one scene file at a time ('%s' and '%s')", path, a);
    } else {
      path = a;
    }
  }
  if (!path) return dr_fail(DR_EINPUT, "run needs a scene file (see drift --help)");
  *scene_path = path;
  *opt_out = opt;
  *quiet_out = quiet;
  return DR_OK;
}

/* drift run's command line as given, settings' options included (settings_init takes those out of
 * argv): the resume hint after a signal carries them. */
static char **run_argv_;
static int run_argc_;

/* Appends s to buf (cap bytes) as one shell word: as it is when it holds only characters no shell
 * treats specially, else in single quotes. Returns 0 when it does not fit. */
static int append_word(char *buf, size_t cap, const char *s) {
  size_t n = strlen(buf);
  const int plain = *s && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./,:=+@%^-") == strlen(s);
  if (n + 2 >= cap) return 0;
  if (n) buf[n++] = ' ';
  if (!plain) buf[n++] = '\'';
  for (; *s; ++s) {
    const char *piece = *s == '\'' ? "'\\''" : NULL;
    const size_t k = piece ? 4 : 1;
    if (n + k + 2 >= cap) return 0;
    if (piece) memcpy(buf + n, piece, k);
    else buf[n] = *s;
    n += k;
  }
  if (!plain) buf[n++] = '\'';
  buf[n] = 0;
  return 1;
}

/* The command that continues this run from its output folder after a signal: drift run SCENE
 * --out DIR --resume and the other options as given (--frames, --backend, --gpus, the settings'
 * --devices ...), without the earlier --out, --resume and --force. NULL when it does not fit. */
static const char *continue_command(const char *path, const char *out_dir, const sim_options *opt) {
  static char cmd[900];
  cmd[0] = 0;
  int ok = append_word(cmd, sizeof cmd, "drift") && append_word(cmd, sizeof cmd, "run") &&
           append_word(cmd, sizeof cmd, path) && append_word(cmd, sizeof cmd, "--out") &&
           append_word(cmd, sizeof cmd, out_dir) && append_word(cmd, sizeof cmd, "--resume");
  for (int i = 2; ok && i < run_argc_; ++i) {
    const char *a = run_argv_[i];
    if (a == path || !strcmp(a, "--force") || !strncmp(a, "--resume=", 9)) continue;
    if (!strcmp(a, "--out")) {
      ++i;
      continue;
    }
    if (!strcmp(a, "--resume")) {
      if (i + 1 < run_argc_ && run_argv_[i + 1] == opt->resume) ++i;
      continue;
    }
    ok = append_word(cmd, sizeof cmd, a);
  }
  return ok ? cmd : NULL;
}

/* Where `ok` does not hold on every rank (collective): *field = value in cfg and the plan made again
 * (the plan destroyed where that fails; what: the choice, for an MPI error's message). */
static int replan_unless_all(const scene *s, int ok, int *field, int value, memplan_config *cfg, memplan *plan,
                             const char *what) {
  int all = ok;
  const int e = MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (e != MPI_SUCCESS) {
    memplan_destroy(plan);
    char call[96];
    snprintf(call, sizeof call, "MPI_Allreduce(%s)", what);
    return comm_fail(e, __FILE__, __LINE__, call);
  }
  if (all) return DR_OK;
  memplan_destroy(plan);
  *field = value;
  return memplan_create(s, cfg, plan);
}

/* Refuses a run whose memory plan (memplan.h) does not fit in the free memory of this host (the
 * plan times the ranks of this node) or of a device it will use (the plan times the members
 * sharing it), before anything is sampled, allocated or written: DR_ENOMEM naming what does not
 * fit, the plan, the free bytes and the particles that would fit. Every rank checks its node and
 * its devices; the ranks agree on the outcome. *plan: the busiest rank's plan (memplan_destroy it).
 * A run that writes checkpoints writes them from the backend's copy of the particles, behind the
 * steps (opt->ckpt_hold), where the plan with that copy fits on every rank; else from the live
 * particles, the steps waiting (the plan without it). The frame's snapshot is on each GPU where the
 * plan with it there fits every rank's devices, else in pinned host memory (opt->snap_host;
 * --snapshot-host on or off decides it instead). */
static int refuse_unless_fits(const scene *s, sim_options *opt, memplan *plan) {
  int ranks = 1, local_rank = 0, local = 1, ngpu = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  DR_TRY(comm_agree(MPI_COMM_WORLD, comm_local(MPI_COMM_WORLD, &local_rank, &local)));
  gpu_count(&ngpu, NULL, 0);
  const int kind = opt->backend >= 0 ? opt->backend : s->backend;
  const int cuda = gpu_backend_built() && ngpu > 0 && (kind == BACKEND_CUDA || kind == BACKEND_AUTO);
  /* the devices this rank drives, as gpu/island.c's island_devices picks them, and how many
   * members (of this rank and the node's others) each carries */
  int dev[SETTINGS_MAX_DEVICES], nd = 0, share = 1;
  if (cuda) {
    const drift_settings *set = settings();
    if (set->n_devices > 0) {
      for (int k = 0; k < set->n_devices; ++k) dev[nd++] = set->devices[k] < ngpu ? set->devices[k] : 0;
      for (int k = 0; k < nd; ++k) {
        int same = 0;
        for (int j = 0; j < nd; ++j) same += dev[j] == dev[k];
        share = same > share ? same : share;
      }
      share *= local; /* the node's ranks take the same list */
    } else {
      const int g = opt->gpus > 0 ? opt->gpus : s->gpus_per_rank;
      const int want = g > 0 ? g : (ngpu / local > 0 ? ngpu / local : 1);
      for (int k = 0; k < want && k < SETTINGS_MAX_DEVICES; ++k) dev[nd++] = (local_rank * want + k) % ngpu;
      share = (local * want + ngpu - 1) / ngpu;
    }
  }
  double dev_free = 0.0;
  int worst = -1;
  for (int k = 0; k < nd; ++k) {
    double f = 0.0;
    DR_TRY(comm_agree(MPI_COMM_WORLD, gpu_free_memory(dev[k], &f, NULL)));
    if (worst < 0 || f < dev_free) dev_free = f, worst = dev[k];
  }
  const int frames = opt->frames > 0 ? opt->frames : s->frames;
  memplan_config cfg = {.backend = cuda ? BACKEND_CUDA : BACKEND_CPU, .ranks = ranks, .devices = nd > 0 ? nd : 1,
                        .frames = opt->frames,
                        .ckpt_hold = plans_ckpt_hold(s, frames),
                        .snap_host = cuda && settings()->snapshot_host == SETTING_ON};
  DR_TRY(memplan_create(s, &cfg, plan));
  double host_free = 0.0;
  const char *limit = "unknown";
  memplan_host_free(&host_free, &limit);
  /* the checkpoints' copy where the plan with it fits every rank */
  if (cfg.ckpt_hold) {
    const int fits = !(host_free > 0 && plan->host.total * local > host_free) &&
                     !(cuda && plan->device.total * share > dev_free);
    DR_TRY(replan_unless_all(s, fits, &cfg.ckpt_hold, 0, &cfg, plan, "the checkpoints' copy"));
  }
  opt->ckpt_hold = cfg.ckpt_hold;
  /* the frame's snapshot on the host where a device has no room for it (--snapshot-host auto), after the
   * checkpoints' copy has given way: a frame's capture then crosses PCIe while the steps wait */
  if (cuda && settings()->snapshot_host == SETTING_AUTO) {
    DR_TRY(replan_unless_all(s, !(plan->device.total * share > dev_free), &cfg.snap_host, 1, &cfg, plan,
                             "the frame snapshot's place"));
    if (cfg.snap_host)
      log_info("memory: the frames' snapshot in pinned host memory (a GPU has no room for it: %.2f GiB free)",
               gib(dev_free));
  }
  opt->snap_host = cfg.snap_host;
  const double host_need = plan->host.total * local, dev_need = plan->device.total * share;
  int rc = DR_OK;
  const double n = (double)plan->load.most;
  if (host_free > 0 && host_need > host_free) {
    const uint64_t fit = memplan_fitting(s, plan, host_free / local, cuda ? dev_free / share : 0.0);
    rc = dr_fail(DR_ENOMEM, "%s: the run does not fit in host memory: its plan needs %.2f GiB (%d rank(s) here, "
                 "%.0f particles on the busiest, %.0f B a particle) and %.2f GiB are free (%s); about %llu particles "
                 "would fit (drift check prints the plan)", s->path, gib(host_need), local, n,
                 plan->host.total / (n > 0 ? n : 1.0), gib(host_free), limit, (unsigned long long)fit);
  } else if (cuda && dev_need > dev_free) {
    const uint64_t fit = memplan_fitting(s, plan, host_free > 0 ? host_free / local : 0.0, dev_free / share);
    rc = dr_fail(DR_ENOMEM, "%s: the run does not fit in device memory: its plan needs %.2f GiB on GPU %d (%d "
                 "member(s) there, %.0f particles on each, %.0f B a particle) and %.2f GiB are free (cudaMemGetInfo); "
                 "about %llu particles would fit (drift check prints the plan)", s->path, gib(dev_need), worst, share,
                 n / (nd > 0 ? nd : 1), plan->device.total * (nd > 0 ? nd : 1) / (n > 0 ? n : 1.0), gib(dev_free),
                 (unsigned long long)fit);
  }
  rc = comm_agree(MPI_COMM_WORLD, rc);
  if (rc) memplan_destroy(plan);
  else
    log_trace("memory plan: host %.1f MiB, %.1f MiB a device; free: host %.1f MiB (%s), device %.1f MiB",
              mib(plan->host.total), mib(plan->device.total), mib(host_free), limit, mib(dev_free));
  return rc;
}

/* The run's last lines: the busiest rank's counted peaks (memtally.h) against the plan, which is
 * the busiest rank's. Collective. */
static void log_memory(const memplan *plan) {
  double peak[MEMTALLY_PLACES];
  for (int p = 0; p < MEMTALLY_PLACES; ++p) peak[p] = (double)memtally_peak(p);
  if (MPI_Allreduce(MPI_IN_PLACE, peak, MEMTALLY_PLACES, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS) return;
  const double host = peak[MEMTALLY_HOST];
  log_info("memory: host peak %.1f MiB counted, plan %.1f MiB (%+.1f%%)", mib(host), mib(plan->host.total),
           plan->host.total > 0 ? 100.0 * (host / plan->host.total - 1.0) : 0.0);
  for (int k = 0; k < MT_KINDS; ++k)
    log_trace("memory: host %s: plan %.2f MiB, held at the end %.2f MiB", memtally_kind_name(k), mib(plan->host.kind[k]),
              mib((double)memtally_now(MEMTALLY_HOST, k)));
  if (plan->cfg.backend != BACKEND_CUDA) return;
  for (int p = 1; p < MEMTALLY_PLACES; ++p) {
    const double d = peak[p];
    if (d > 0)
      log_info("memory: device %d peak %.1f MiB counted, plan %.1f MiB (%+.1f%%)", p - 1, mib(d), mib(plan->device.total),
               plan->device.total > 0 ? 100.0 * (d / plan->device.total - 1.0) : 0.0);
  }
}

static int cmd_run(int argc, char **argv) {
  const char *path = NULL;
  sim_options opt;
  int quiet = 0;
  scene s;
  int island[2];
  int rc = parse_run_args(argc, argv, &path, &opt, &quiet, island);
  if (!rc) rc = scene_load(path, &s);
  if (rc) {
    dr_mark_agreed(); /* every rank reads the same arguments and the same file */
    return rc;
  }
  /* the command line's island variants replace the scene's keys (they change no result beyond rounding) */
  scene_set_island(&s, island);
  opt.continue_with = continue_command(path, opt.out_dir ? opt.out_dir : s.output_dir, &opt);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  log_set_rank(rank);
  log_set_quiet(quiet);
  int rc0 = signals_install();
  if (rc0) {
    scene_destroy(&s);
    return rc0;
  }
  memplan plan;
  rc = refuse_unless_fits(&s, &opt, &plan);
  if (rc) {
    scene_destroy(&s);
    return rc;
  }
  sim *S = NULL;
  const int n_ls = s.n_levelset_jobs;
  const double t_ls = MPI_Wtime();
  rc = scene_build_levelsets(&s); /* once the plan, which holds them, fits */
  rc = comm_agree(MPI_COMM_WORLD, rc);
  if (!rc && n_ls > 0) log_info("mesh level sets: %d built in %.1f s", n_ls, MPI_Wtime() - t_ls);
  if (!rc) rc = sim_create(&s, &opt, MPI_COMM_WORLD, &S);
  if (!rc) rc = sim_run(S);
  if (!rc) log_memory(&plan);
  sim_destroy(&S);
  memplan_destroy(&plan);
  scene_destroy(&s);
  return rc;
}

/* Runs a command that needs MPI. Bad input and a stop by a signal are reported by rank 0 only,
 * since every rank has the same message. A failure that the ranks did not agree on (dr_agreed)
 * may leave other ranks waiting in a collective call for this one, which would never come:
 * MPI_Abort ends the whole job instead of MPI_Finalize, which would wait with them. */
static int with_mpi(int (*command)(int, char **), int argc, char **argv, int abort_alone, int settings_rc) {
  int provided;
  /* MPI_THREAD_MULTIPLE: frames are written by a thread of their own (writer.h), which runs
   * without it (writes in the main thread) where the library does not give it */
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "drift: MPI_Init_thread failed\n");
    return DR_EMPI;
  }
  int rc = settings_rc;
  if (rc) dr_mark_agreed(); /* every rank reads the same command line and environment */
  else rc = command(argc, argv);
  if (rc) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int alone = abort_alone && size > 1 && !dr_agreed();
    if (rank == 0 || alone || (rc != DR_EINPUT && rc != DR_ESTOPPED)) fail(rc);
    if (alone) {
      fprintf(stderr, "drift: rank %d failed alone; ending all %d ranks\n", rank, size);
      fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, rc);
    }
  }
  MPI_Finalize();
  return rc;
}

int main(int argc, char **argv) {
  /* the settings' options leave argv here, wherever they stand; a bad value (or a bad
   * environment) fails the commands below, not --help */
  run_argc_ = argc;
  run_argv_ = malloc(sizeof *run_argv_ * (size_t)(argc + 1));
  if (run_argv_) memcpy(run_argv_, argv, sizeof *run_argv_ * (size_t)(argc + 1));
  else run_argc_ = 0;
  const int settings_rc = settings_init(&argc, argv);
  if (argc < 2) {
    print_usage(stderr);
    return settings_rc ? fail(settings_rc) : DR_EINPUT;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    print_usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "--help-debug")) {
    print_debug_help();
    return 0;
  }
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
    print_version();
    return 0;
  }
  if (!strcmp(cmd, "check")) {
    if (settings_rc) return fail(settings_rc);
    if (argc != 3) return usage_error("check takes exactly one scene file%s", "");
    int rc = cmd_check(argv[2]);
    return rc ? fail(rc) : 0;
  }
  if (!strcmp(cmd, "run")) return with_mpi(cmd_run, argc, argv, 1, settings_rc);
  if (!strcmp(cmd, "bench")) return with_mpi(bench_main, argc, argv, 0, settings_rc);
  return usage_error("unknown command '%s'", cmd);
}
