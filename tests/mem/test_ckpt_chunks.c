/* test_ckpt_chunks - a checkpoint's rows go from the backend to the disk through two chunk buffers
 * (sim_checkpoint.c, backend.h's fetch_rows), not through a host copy of the particles. A box of
 * 108,000 particles runs one frame twice, with a checkpoint (output.checkpoint_every 1) and
 * without, its chunks of 1000 particles (DRIFT_FRAME_CHUNK=1000, which CMake sets):
 *   - the run with the checkpoint holds at its end exactly the two chunk buffers more host memory
 *     of kind transfer (memtally.h) than the other: 2 x 1000 x 124 B (every attribute of
 *     particles.h), and its counted host peak is at most that above the other's and at least the
 *     other's (a host copy of the particles would be 124 B x 108,000 = 13 MB more);
 *   - the memory plan (memplan.h) holds, for the scene with checkpoints, the buffers of a run's
 *     MEM_CKPT_CHUNK more transfer memory (108,000 particles are one chunk there: one buffer of
 *     them, 124 B a particle), and the same particle memory;
 *   - the checkpoint reads back whole (ckpt_read: every check, the rows' checksum included) and
 *     its rows are those download gives of the particles at the run's end (sim_particles), row
 *     for row and bit for bit: fetch_rows keeps download's order, chunk after chunk.
 *
 *   test_ckpt_chunks [cpu|cuda] (the island: cuda with DRIFT_DEVICES=0,0) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "memplan.h"
#include "memsizes.h"
#include "memtally.h"
#include "settings.h"
#include "sim/simtest.h"

enum { CHUNK = 1000, COUNT = 108000 }; /* 30 x 30 x 15 cells of 8 particles */

static const char *const SCENE =
    "{ \"domain\": { \"min\": [0, 0, 0], \"max\": [1, 1, 1], \"dx\": 0.02 },"
    "  \"time\": { \"frames\": 1, \"fps\": 480, \"cfl\": 0.5 },"
    "  \"materials\": { \"sand\": { \"model\": \"drucker_prager\", \"density\": 1600, \"youngs_modulus\": 3.5e5,"
    "                             \"poisson_ratio\": 0.3, \"friction_angle\": 35 } },"
    "  \"bodies\": [ { \"shape\": \"box\", \"min\": [0.2, 0.2, 0.2], \"max\": [0.8, 0.8, 0.5], \"material\": \"sand\","
    "                \"ppc\": 8, \"velocity\": [0.5, 0, 0] } ],"
    "  \"output\": { \"dir\": \"%s\", \"checkpoint_every\": %d } }";

typedef struct outcome {
  int64_t transfer_end; /* host bytes of kind transfer held after the run, before sim_destroy */
  int64_t peak;         /* the counted host peak over the run */
  double plan_transfer, plan_particles, plan_total;
  uint64_t most;        /* the plan's particles at most */
} outcome;

/* Runs the scene (checkpoints every `every` frames, 0: none) into dir; with a checkpoint, *end
 * receives the particles at the run's end (download's rows). */
static outcome run(const char *dir, int every, particles *end) {
  char json[2048];
  snprintf(json, sizeof json, SCENE, dir, every);
  scene s;
  scene_from_text(json, &s);
  outcome o = {0};
  const memplan_config cfg = {.backend = test_backend_ == BACKEND_CUDA ? BACKEND_CUDA : BACKEND_CPU, .ranks = 1,
                              .devices = 1, .frames = 0};
  memplan plan;
  MUST(memplan_create(&s, &cfg, &plan));
  o.plan_transfer = plan.host.kind[MT_TRANSFER];
  o.plan_particles = plan.host.kind[MT_PARTICLES];
  o.plan_total = plan.host.total;
  o.most = plan.most;
  memplan_destroy(&plan);
  memtally_reset_peaks();
  const int64_t before = memtally_now(MEMTALLY_HOST, MT_KINDS);
  sim_options opt = {.backend = test_backend_, .write_output = 1, .out_dir = dir};
  sim *S = NULL;
  MUST(sim_create(&s, &opt, MPI_COMM_WORLD, &S));
  MUST(sim_run(S));
  o.transfer_end = memtally_now(MEMTALLY_HOST, MT_TRANSFER);
  o.peak = memtally_peak(MEMTALLY_HOST) - before;
  if (end) MUST(sim_particles(S, end));
  sim_destroy(&S);
  scene_destroy(&s);
  return o;
}

/* Attribute a of rows i of p and j of q: the same bytes. */
static int same_row(const particles *p, size_t i, const particles *q, size_t j) {
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    const size_t b = particle_attrs[a].bytes;
    if (memcmp((const char *)particles_attr(p, a) + b * i, (const char *)particles_attr(q, a) + b * j, b)) return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  choose_backend(argc, argv);
  CHECK(settings()->frame_chunk == CHUNK, "DRIFT_FRAME_CHUNK is %d, the test wants %d (CMake sets it)",
        settings()->frame_chunk, CHUNK);
  char base[] = "/tmp/drift-ckpt-chunks-XXXXXX", with[4200], without[4200];
  if (!mkdtemp(base)) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(with, sizeof with, "%s/with", base);
  snprintf(without, sizeof without, "%s/without", base);

  particles end = {0};
  const outcome w = run(with, 1, &end), n = run(without, 0, NULL);
  CHECK(end.n == COUNT, "%zu particles, want %d", end.n, COUNT);

  /* 1. the counted host memory: the two chunk buffers, no copy of the particles */
  const int64_t buffers = 2 * (int64_t)CHUNK * (int64_t)particles_record_bytes();
  printf("host transfer at the end: %lld B with the checkpoint, %lld B without (two chunks: %lld B)\n",
         (long long)w.transfer_end, (long long)n.transfer_end, (long long)buffers);
  printf("host peak: %lld B with the checkpoint, %lld B without\n", (long long)w.peak, (long long)n.peak);
  CHECK(w.transfer_end - n.transfer_end == buffers, "the checkpoint holds %lld B of transfer memory, want %lld",
        (long long)(w.transfer_end - n.transfer_end), (long long)buffers);
  CHECK(w.peak >= n.peak && w.peak - n.peak <= buffers,
        "the checkpoint raised the host peak by %lld B, want 0 .. %lld (a copy of the particles: %lld)",
        (long long)(w.peak - n.peak), (long long)buffers, (long long)COUNT * (long long)particles_record_bytes());

  /* 2. the plan: a run's MEM_CKPT_CHUNK holds the scene in one chunk, no particle memory more */
  CHECK(w.most == COUNT && COUNT < MEM_CKPT_CHUNK, "the plan's %llu particles, want %d, below MEM_CKPT_CHUNK",
        (unsigned long long)w.most, COUNT);
  const double want = (double)COUNT * (double)particles_record_bytes(); /* one buffer of every row */
  printf("plan: transfer %.0f B with, %.0f B without (one chunk of %d rows: %.0f B)\n", w.plan_transfer,
         n.plan_transfer, COUNT, want);
  /* the plan's host figure is its larger phase: the run's, which holds the chunk (the CPU
   * backend here), or the creation's (a GPU's upload staging), which the chunk does not outgrow */
  const double grew = w.plan_total - n.plan_total;
  CHECK(w.plan_transfer - n.plan_transfer == want || (grew == 0.0 && w.plan_transfer == n.plan_transfer),
        "the plan adds %.0f B of transfer memory (%.0f B in all), want %.0f, or none where the creation is the "
        "larger phase", w.plan_transfer - n.plan_transfer, grew, want);
  CHECK(grew >= 0.0 && grew <= want, "the plan grows by %.0f B, want 0 .. %.0f", grew, want);
  CHECK(w.plan_particles == n.plan_particles, "the plan adds %.0f B of particle memory for the checkpoint, want 0",
        w.plan_particles - n.plan_particles);

  /* 3. the checkpoint: whole, and download's rows */
  char path[4400];
  ckpt_path(with, 1, path, sizeof path);
  ckpt_state st;
  particles back = {0};
  const int rc = ckpt_read(MPI_COMM_WORLD, path, &st, &back);
  CHECK(rc == DR_OK, "%s does not read back: %s", path, dr_message());
  if (rc == DR_OK) {
    CHECK(back.n == end.n, "%s holds %zu particles, the run %zu", path, back.n, end.n);
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < back.n && i < end.n; ++i)
      if (!same_row(&back, i, &end, i) && bad++ == 0) first_bad = i;
    CHECK(bad == 0, "%zu rows of %s differ from download's (the first: row %zu)", bad, path, first_bad);
    free(st.emitted);
  }
  particles_free(&back);
  particles_free(&end);
  char cmd[4400];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  if (system(cmd) != 0) fprintf(stderr, "warning: cannot remove %s\n", base);
  printf("test_ckpt_chunks: %s\n", failures_ ? "FAILED" : "all checks passed");
  MPI_Finalize();
  return failures_ ? 1 : 0;
}
