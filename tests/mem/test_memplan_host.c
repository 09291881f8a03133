/* test_memplan_host.c - the CUDA backend's host plan (memplan.c's memplan_cuda) holds at most
 * BOUND B a particle of the busiest rank on the scenes given on the command line (issue 55, item
 * 3: 64 B) wherever that rank holds MIN_N particles or more (below, the bounded buffers' fixed
 * bytes dominate: they are printed), on 1, 2, 4 and 8 ranks of 1, 2 and 4 GPUs each, with a
 * checkpoint every frame (its chunk buffers; held or fetched live) and without: the creation, the
 * frames, the checkpoints and a migration's rounds stream through bounded buffers. Expected
 * independently of the formula's terms: on one GPU a rank's host plan does not grow with its
 * particles (the same scene at 8x the particles, dx / 2, plans at most 1.05x the host bytes), and
 * on several ranks of one GPU a migration's round costs at most three buffers of
 * MEM_MIGRATION_ROUND records (with hostmem.h's headroom) more than one rank's plan. With the
 * frames' snapshot in pinned host memory (snap_host), the bound holds still, the host plans exactly
 * the snapshot's rows more and each GPU that many less but its staging chunk. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "hostmem.h"
#include "memplan.h"
#include "memsizes.h"
#include "particles.h"
#include "scene.h"
#include "sim.h"

#define MIN_N 10e6 /* the busiest rank's particles from which BOUND holds */
/* with the snapshot on the host, from this many particles a GPU: a GPU lacks room for the snapshot only
 * far above them (an H200 holds 680M particles of float storage with it, 930M of compact) */
#define MIN_N_SNAP 50e6

static double host_of(const scene *s, int ranks, int devices, int hold, double *n) {
  const memplan_config cfg = {.backend = BACKEND_CUDA, .ranks = ranks, .devices = devices, .frames = 1, .ckpt_hold = hold};
  memplan p;
  if (memplan_create(s, &cfg, &p)) {
    CHECK(0, "no plan on %d ranks of %d GPUs", ranks, devices);
    return 0;
  }
  const double h = p.host.total;
  *n = p.load.most;
  memplan_destroy(&p);
  return h;
}

static void check_scene(const char *path, double bound) {
  scene s;
  if (scene_load(path, &s)) {
    CHECK(0, "%s: does not load", path);
    return;
  }
  const int ranks[] = {1, 2, 4, 8}, devices[] = {1, 2, 4};
  for (int ck = 0; ck < 2; ++ck) {
    s.checkpoint_every = ck; /* 1: a checkpoint every frame */
    for (int hold = 0; hold <= ck; ++hold) {
      double one_rank = 0;
      for (size_t r = 0; r < sizeof ranks / sizeof *ranks; ++r)
        for (size_t d = 0; d < sizeof devices / sizeof *devices; ++d) {
          double n = 0;
          const double h = host_of(&s, ranks[r], devices[d], hold, &n);
          printf("%s, %d rank(s) of %d GPU(s)%s: host %.1f MiB for %.4g particles, %.1f B a particle\n", path,
                 ranks[r], devices[d], ck ? hold ? ", checkpoints held" : ", checkpoints fetched" : "",
                 h / 1048576.0, n, h / n);
          CHECK(n < MIN_N || h / n <= bound,
                "%s on %d rank(s) of %d GPU(s): the host plans %.1f B a particle, more than %g", path, ranks[r],
                devices[d], h / n, bound);
          if (devices[d] == 1 && ranks[r] == 1) one_rank = h;
          const double round = 3.0 * (double)hostmem_capacity(0, particles_record_bytes() * MEM_MIGRATION_ROUND);
          if (devices[d] == 1 && ranks[r] > 1)
            CHECK(h <= one_rank + round + 1.0,
                  "%s on %d ranks: the host plans %.1f MiB, more than one rank's %.1f and a migration round's %.1f",
                  path, ranks[r], h / 1048576.0, one_rank / 1048576.0, round / 1048576.0);
        }
    }
  }
  /* the frames' snapshot in pinned host memory (snap_host: where a GPU has no room for it): within the
   * bound from MIN_N_SNAP particles a GPU, the host holding the snapshot's rows (the frame's attributes
   * but the owner: with the default fields position, velocity, mass, id, material, 40 B) and at most that much more than without
   * (an island's start may hold more than its steady state), each GPU that many less but a staging
   * chunk */
  s.checkpoint_every = 0;
  double row = 0.0; /* a snapshot's bytes a particle: the frame's attributes (sim_frame_mask) but the owner */
  for (int a = 0; a < PARTICLE_ATTRS; ++a)
    if ((sim_frame_mask(&s) & ~PA_BIT(owner)) >> a & 1u) row += (double)particle_attrs[a].bytes;
  for (size_t r = 0; r < sizeof ranks / sizeof *ranks; ++r)
    for (size_t d = 0; d < sizeof devices / sizeof *devices; ++d) {
      memplan p[2];
      for (int h = 0; h < 2; ++h) {
        const memplan_config cfg = {.backend = BACKEND_CUDA, .ranks = ranks[r], .devices = devices[d], .frames = 1,
                                    .snap_host = h};
        if (memplan_create(&s, &cfg, &p[h])) CHECK(0, "no plan on %d ranks of %d GPUs", ranks[r], devices[d]);
      }
      const double n = p[1].load.most, snap = row * n, per_gpu = row * n / devices[d];
      const double stage = row * (n / devices[d] < MEM_CKPT_CHUNK ? n / devices[d] : MEM_CKPT_CHUNK);
      printf("%s, %d rank(s) of %d GPU(s), the snapshot on the host: host %.1f B a particle, a GPU %.1f MiB against "
             "%.1f\n", path, ranks[r], devices[d], p[1].host.total / n, p[1].device.total / 1048576.0,
             p[0].device.total / 1048576.0);
      CHECK(n / devices[d] < MIN_N_SNAP || p[1].host.total / n <= bound, "%s on %d rank(s) of %d GPU(s), the snapshot "
            "on the host: the host plans %.1f B a particle, more than %g", path, ranks[r], devices[d],
            p[1].host.total / n, bound);
      CHECK(p[1].host.total >= snap && p[1].host.total <= p[0].host.total + snap + 1.0,
            "%s on %d rank(s) of %d GPU(s): the host plans %.1f MiB with the snapshot, %.1f without (expected %.1f MiB "
            "more at most, and at least the snapshot's)", path, ranks[r], devices[d], p[1].host.total / 1048576.0,
            p[0].host.total / 1048576.0, snap / 1048576.0);
      CHECK(fabs(p[0].device.total - p[1].device.total - (per_gpu - stage)) <= 64.0 + 1e-6 * per_gpu,
            "%s on %d rank(s) of %d GPU(s): a GPU plans %.1f MiB with the snapshot on the host, %.1f without (expected "
            "%.1f MiB less)", path, ranks[r], devices[d], p[1].device.total / 1048576.0, p[0].device.total / 1048576.0,
            (per_gpu - stage) / 1048576.0);
      memplan_destroy(&p[0]), memplan_destroy(&p[1]);
    }
  /* 8x the particles (dx / 2) on one GPU: the host's buffers are bounded */
  s.checkpoint_every = 1;
  double n1 = 0, n8 = 0;
  const double h1 = host_of(&s, 1, 1, 0, &n1);
  s.dx *= 0.5;
  const double h8 = host_of(&s, 1, 1, 0, &n8);
  printf("%s at dx / 2: %.4g particles (%.2fx), host %.1f MiB against %.1f\n", path, n8, n8 / n1, h8 / 1048576.0,
         h1 / 1048576.0);
  CHECK(n8 > 7.0 * n1, "%s at dx / 2: %.4g particles, expected about 8x %.4g", path, n8, n1);
  CHECK(h8 <= 1.05 * h1, "%s at dx / 2: the host plans %.1f MiB against %.1f at dx: it grows with the particles", path,
        h8 / 1048576.0, h1 / 1048576.0);
  scene_destroy(&s);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: test_memplan_host BOUND SCENE...\n");
    return 2;
  }
  const double bound = atof(argv[1]);
  for (int i = 2; i < argc; ++i) check_scene(argv[i], bound);
  if (failures_) fprintf(stderr, "%d failure(s)\n", failures_);
  return failures_ ? 1 : 0;
}
