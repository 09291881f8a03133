/* test_memplan_cuda.c SCENE FRAMES OUT - the CUDA backend's memory plan (memplan.h) against what a run
 * of SCENE allocates on device 0: the counted peak of its device vectors (memtally.h, counted in
 * gpu/dvec.cu) within 5% of the plan, and the device's own account, cudaMemGetInfo's drop from
 * before the backend to the end of the run, within 5% of the counted bytes held then (plus what
 * the driver keeps for itself beside them: kernels' code and local memory, graphs; reported, at
 * most DRIVER_MIB). And the host's counted peak at the creation: a chunk of the streamed particles
 * and the upload's staging (memsizes.h), not the scene's particles. The run writes its frames into
 * OUT, as `drift run` does (the plan holds the frames' device snapshot). With `host`, the snapshot in
 * pinned host memory (sim_params.snap_host; the plan's snap_host): the device holds a staging chunk
 * of it, and the host's counted peak is held to the plan's within 5% too. Exit 77 without a GPU. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gpu_query.h"
#include "memplan.h"
#include "memsizes.h"
#include "memtally.h"
#include "particles.h"
#include "scene.h"
#include "sim.h"

#define DRIVER_MIB 512.0

int main(int argc, char **argv) {
  if (argc != 4 && !(argc == 5 && !strcmp(argv[4], "host"))) {
    fprintf(stderr, "usage: test_memplan_cuda SCENE FRAMES OUT [host]\n");
    return 2;
  }
  const int snap_host = argc == 5; /* the frame's snapshot in pinned host memory (sim_params.snap_host) */
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int ngpu = 0;
  gpu_count(&ngpu, NULL, 0);
  if (ngpu == 0) {
    printf("no GPU: skipped\n");
    MPI_Finalize();
    return 77;
  }
  scene s;
  if (scene_load(argv[1], &s) || scene_build_levelsets(&s)) {
    fprintf(stderr, "%s does not load\n", argv[1]);
    return 1;
  }
  const int frames = atoi(argv[2]);
  double free0 = 0.0, total = 0.0, free1 = 0.0;
  CHECK(gpu_free_memory(0, &free0, &total) == 0, "cudaMemGetInfo");
  const memplan_config cfg = {.backend = BACKEND_CUDA, .ranks = 1, .devices = 1, .frames = frames, .snap_host = snap_host};
  memplan plan;
  CHECK(memplan_create(&s, &cfg, &plan) == 0, "no plan");
  sim_options opt = {.backend = BACKEND_CUDA, .frames = frames, .gpus = 1, .write_output = 1, .out_dir = argv[3], .force = 1,
                     .snap_host = snap_host};
  sim *S = NULL;
  int rc = sim_create(&s, &opt, MPI_COMM_WORLD, &S);
  /* the creation streams the particles (backend_create_from): the host holds a chunk of them and
   * the upload's staging, not the scene (3.1M particles, 372 MiB as one array); 8 MiB for the
   * rest of the set-up (the block codes' pinned buffer, the colliders) */
  const double rec = (double)particles_record_bytes(), host_created = (double)memtally_peak(MEMTALLY_HOST);
  const double chunk = rec * fmin((double)plan.particles, (double)MEM_CREATE_CHUNK);
  const double staging = fmin(ceil(plan.particles / (double)MEM_LANES), (double)MEM_UPLOAD_PACKETS) *
                         (MEM_PACKET_ATTRS * MEM_LANES * 4.0 + MEM_LANES * 8.0 + 8.0);
  printf("host at the creation: counted peak %.1f MiB, a chunk and the staging %.1f MiB, the particles as one array "
         "%.1f MiB\n", host_created / 1048576.0, (chunk + staging) / 1048576.0, rec * plan.particles / 1048576.0);
  CHECK(rc != 0 || host_created <= chunk + staging + 8.0 * 1048576.0,
        "the host's counted peak at the creation, %.1f MiB, exceeds a chunk and the staging (%.1f MiB) by more than 8 MiB",
        host_created / 1048576.0, (chunk + staging) / 1048576.0);
  for (int f = 0; rc == 0 && f < frames; ++f) rc = sim_advance_frame(S);
  if (rc == 0) rc = sim_flush(S); /* the frames written */
  CHECK(rc == 0, "the run failed (%d)", rc);
  CHECK(gpu_free_memory(0, &free1, NULL) == 0, "cudaMemGetInfo");
  const double peak = (double)memtally_peak(1), now = (double)memtally_now(1, MT_KINDS), drop = free0 - free1;
  const double mib = 1048576.0;
  printf("%s: %llu particles, %d frames: device plan %.1f MiB, counted peak %.1f MiB (%+.2f%%), held at the end "
         "%.1f MiB, cudaMemGetInfo's drop %.1f MiB (%.1f MiB beside the counted)\n", argv[1],
         (unsigned long long)plan.particles, frames, plan.device.total / mib, peak / mib,
         100.0 * (peak / plan.device.total - 1.0), now / mib, drop / mib, (drop - now) / mib);
  static const char *const names[MT_KINDS] = {"particles", "sort", "mapping", "grid", "transfer"};
  for (int k = 0; k < MT_KINDS; ++k)
    printf("  %-9s plan %9.1f MiB, held at the end %9.1f MiB\n", names[k], plan.device.kind[k] / mib,
           (double)memtally_now(1, k) / mib);
  if (snap_host) { /* the host holds the snapshot: its counted peak against the plan's, within 5% too */
    const double hpeak = (double)memtally_peak(MEMTALLY_HOST);
    printf("host: plan %.1f MiB, counted peak %.1f MiB (%+.2f%%)\n", plan.host.total / mib, hpeak / mib,
           100.0 * (hpeak / plan.host.total - 1.0));
    CHECK(fabs(hpeak / plan.host.total - 1.0) <= 0.05, "the counted host peak %.1f MiB is not within 5%% of the plan %.1f MiB",
          hpeak / mib, plan.host.total / mib);
  }
  CHECK(fabs(peak / plan.device.total - 1.0) <= 0.05, "the counted device peak %.1f MiB is not within 5%% of the plan %.1f MiB",
        peak / mib, plan.device.total / mib);
  CHECK(drop >= 0.95 * now && drop <= 1.05 * now + DRIVER_MIB * mib,
        "cudaMemGetInfo's drop %.1f MiB does not match the counted %.1f MiB (5%%, and %g MiB for the driver)", drop / mib,
        now / mib, DRIVER_MIB);
  sim_destroy(&S);
  memplan_destroy(&plan);
  scene_destroy(&s);
  MPI_Finalize();
  return failures_ ? 1 : 0;
}
