/* test_cuda_vs_cpu - the CUDA backend against the CPU reference: the same scenes (an elastic
 * drop, Drucker-Prager sand blocks, a weakly compressible dam break, sand among moving colliders
 * on a per-face floor, ASFLIP water, NACC snow, mesh colliders and a mesh body, a fountain of particle sources;
 * small, fixed dt so both take identical steps)
 * run on both, and after every frame the particles are matched by id
 * and compared.
 *
 * Tolerances. Both backends run the same float32 physics on the same layout; they differ only
 * in rounding: P2G sums on the GPU are float atomics in arbitrary order (the CPU sums in a
 * fixed order), the device build uses -use_fast_math (division, sqrt, log/exp to a few ulp)
 * and FMA contraction. A node's mass and momentum sums of ~200 terms thus differ by ~1e-6
 * relative per step; these are independent from step to step, so after N steps they add up
 * like a random walk (sqrt(500) x 1e-6 ~ 2e-5 relative), amplified where the dynamics is
 * sensitive: wall contacts (sticky/separate switch on the sign of v_n), the yield surface, the
 * free surface of the fluid. Hence
 *   - positions: max |x_cuda - x_cpu| <= 1e-4 of the largest domain extent (the brief);
 *   - velocities: max |v_cuda - v_cpu| <= 1e-2 of the frame's largest CPU speed (plus 1e-3 m/s
 *     for frames near rest) for single particles, and the RMS over all particles <= 1e-3 of it
 *     (each, or three times the difference between two GPU runs, see compare()):
 *     a velocity error of that size integrated over a frame moves a particle far less than the
 *     position tolerance, and an actual bug (a wrong wall, a lost stencil node, a stale
 *     mapping) gives errors of order the velocity itself.
 * Exits 77 (skipped) where no CUDA device is usable. */
#include "gpu_query.h"
#include "physics/constitutive.h"
#include "settings.h"
#include "sim/simtest.h"

/* Differences between two runs' particles, matched by id. */
typedef struct diffs {
  double dx, dv, rms, vscale, dF, dJp;
  size_t bad_id, bad_other, worst_i, worst_j;
} diffs;

/* fix_a: a's particles stand before the return mapping that b's (G2P2G: fused) already took at
 * the frame's end; apply it to a's copy of F and logJp, so that like is compared with like. On
 * the CPU alone, that one return mapping moves snow's logJp by up to 2.6e-3 and F by up to 2.4e-3
 * at these frame ends: the differences measured on an H100 without it. */
static diffs diff_runs(const scene *s, const particles *pa, const particles *pb, int fix_a) {
  diffs r = {0};
  size_t *oa = order_by_id(pa), *ob = order_by_id(pb);
  double dv2 = 0;
  for (size_t k = 0; k < pa->n; ++k) {
    const size_t i = oa[k], j = ob[k];
    r.bad_id += pa->id[i] != pb->id[j];
    r.bad_other += pa->mass[i] != pb->mass[j] || pa->vol0[i] != pb->vol0[j] || pa->material[i] != pb->material[j];
    double v2 = 0, d2 = 0;
    for (int a = 0; a < 3; ++a) {
      r.dx = fmax(r.dx, fabs((double)pa->x[3 * i + a] - pb->x[3 * j + a]));
      const double d = (double)pa->v[3 * i + a] - pb->v[3 * j + a];
      d2 += d * d;
      v2 += (double)pa->v[3 * i + a] * pa->v[3 * i + a];
    }
    float Fa[9], jpa = pa->logjp[i], tau[9];
    memcpy(Fa, pa->F + 9 * i, sizeof Fa);
    if (fix_a) constitutive_update_state(&s->materials[pa->material[i]].params, Fa, &jpa, tau);
    for (int q = 0; q < 9; ++q) r.dF = fmax(r.dF, fabs((double)Fa[q] - pb->F[9 * j + q]));
    r.dJp = fmax(r.dJp, fabs((double)jpa - pb->logjp[j]));
    if (sqrt(d2) > r.dv) r.worst_i = i, r.worst_j = j;
    r.dv = fmax(r.dv, sqrt(d2));
    dv2 += d2;
    r.vscale = fmax(r.vscale, sqrt(v2));
  }
  r.rms = sqrt(dv2 / (double)(pa->n ? pa->n : 1));
  free(oa);
  free(ob);
  return r;
}

/* The CUDA backend's choice (gpu/island.cu, island_advance_frame): G2P2G for fixed steps below
 * parallel.g2p2g_below particles per GPU, never in deterministic mode. */
static int fuses(const scene *s, size_t n, int gpus) {
  return s->dt > 0 && !s->deterministic && n / (size_t)gpus < (size_t)s->g2p2g_below;
}

/* A: cpu; B: cuda; C: cuda on an island of 2 (DRIFT_DEVICES=0,0 where one GPU is lent), whose
 * float atomics add in another order: B against C is the rounding noise of the GPU itself, which
 * the dynamics amplifies where it is sensitive (contacts switching between sticking and
 * sliding, the yield surface). A tolerance below is the larger of its fixed value and three
 * times that noise: the CPU must agree with the GPU as well as two GPU runs agree. */
static void compare(const char *name, const char *json) {
  scene s;
  scene_from_text(json, &s);
  sim_options oc = {.backend = BACKEND_CPU, .write_output = 0}, og = oc, o2;
  og.backend = BACKEND_CUDA;
  o2 = og;
  o2.gpus = 2;
  sim *A = NULL, *B = NULL, *C = NULL;
  MUST(sim_create(&s, &oc, MPI_COMM_WORLD, &A));
  MUST(sim_create(&s, &og, MPI_COMM_WORLD, &B));
  int ngpu = 0;
  char gname[256];
  gpu_count(&ngpu, gname, sizeof gname);
  const char *had = getenv("DRIFT_DEVICES");
  if (ngpu < 2 && !had) {
    setenv("DRIFT_DEVICES", "0,0", 1);
    MUST(settings_reload()); /* settings.h reads the environment once */
  }
  MUST(sim_create(&s, &o2, MPI_COMM_WORLD, &C));
  if (ngpu < 2 && !had) {
    unsetenv("DRIFT_DEVICES");
    MUST(settings_reload());
  }
  CHECK(!strcmp(sim_backend_name(A), "cpu") && !strcmp(sim_backend_name(B), "cuda"), "backends %s, %s",
        sim_backend_name(A), sim_backend_name(B));
  double L = 0;
  for (int a = 0; a < 3; ++a) L = fmax(L, s.domain_max[a] - s.domain_min[a]);
  particles pa = {0}, pb = {0}, pc = {0};
  double worst_x = 0, worst_v = 0, worst_rms = 0, worst_F = 0, worst_jp = 0;
  double noise_x = 0, noise_v = 0, noise_rms = 0, noise_jp = 0;
  printf("%s: %llu particles, %d frames\n", name, (unsigned long long)sim_get_status(A)->particles, s.frames);
  for (int f = 1; f <= s.frames; ++f) {
    MUST(sim_advance_frame(A));
    MUST(sim_advance_frame(B));
    MUST(sim_advance_frame(C));
    MUST(sim_particles(A, &pa));
    MUST(sim_particles(B, &pb));
    MUST(sim_particles(C, &pc));
    CHECK(pa.n == pb.n && pb.n == pc.n, "%s: %zu cpu particles, %zu cuda, %zu on 2 GPUs", name, pa.n, pb.n, pc.n);
    if (pa.n != pb.n || pb.n != pc.n) break;
    const int fb = fuses(&s, pb.n, 1), fc = fuses(&s, pc.n, 2);
    const diffs d = diff_runs(&s, &pa, &pb, fb);
    /* the unfused run's F and logJp brought to the fused one's, as for the CPU */
    const diffs n = fc && !fb ? diff_runs(&s, &pb, &pc, 1) : diff_runs(&s, &pc, &pb, fb && !fc);
    const double vref = d.vscale + 1e-3;
    printf("  frame %2d  t %.3f  steps %llu/%llu  rebuilds %llu/%llu  max|v| %.4f m/s  max|dx| %.3g m (%.3g L)  "
           "max|dv| %.3g m/s (%.3g vmax)  rms|dv| %.3g (%.3g vmax)  max|dF| %.3g  max|dlogJp| %.3g;  "
           "1 vs 2 GPUs: max|dx| %.3g L, max|dv| %.3g vmax, rms|dv| %.3g vmax, max|dlogJp| %.3g\n",
           f, sim_get_status(A)->time, (unsigned long long)sim_get_status(A)->steps,
           (unsigned long long)sim_get_status(B)->steps, (unsigned long long)sim_get_status(A)->rebuilds,
           (unsigned long long)sim_get_status(B)->rebuilds, d.vscale, d.dx, d.dx / L, d.dv, d.dv / vref, d.rms,
           d.rms / vref, d.dF, d.dJp, n.dx / L, n.dv / vref, n.rms / vref, n.dJp);
    if (d.dv > 1e-2 * vref) /* where it happens: the particle with the largest velocity difference */
      printf("    largest |dv|: id %llu material %d at (%.4f %.4f %.4f) m: cpu v (%.4f %.4f %.4f), cuda v (%.4f %.4f "
             "%.4f) m/s\n", (unsigned long long)pa.id[d.worst_i], (int)pa.material[d.worst_i], pa.x[3 * d.worst_i],
             pa.x[3 * d.worst_i + 1], pa.x[3 * d.worst_i + 2], pa.v[3 * d.worst_i], pa.v[3 * d.worst_i + 1],
             pa.v[3 * d.worst_i + 2], pb.v[3 * d.worst_j], pb.v[3 * d.worst_j + 1], pb.v[3 * d.worst_j + 2]);
    CHECK(d.bad_id == 0 && n.bad_id == 0, "%s frame %d: %zu ids differ (%zu between 1 and 2 GPUs)", name, f, d.bad_id,
          n.bad_id);
    CHECK(d.bad_other == 0, "%s frame %d: %zu masses/volumes/materials differ", name, f, d.bad_other);
    CHECK(sim_get_status(A)->steps == sim_get_status(B)->steps && sim_get_status(B)->steps == sim_get_status(C)->steps,
          "%s: step counts differ", name);
    worst_x = fmax(worst_x, d.dx / L);
    worst_v = fmax(worst_v, d.dv / vref);
    worst_rms = fmax(worst_rms, d.rms / vref);
    worst_F = fmax(worst_F, d.dF);
    worst_jp = fmax(worst_jp, d.dJp);
    noise_x = fmax(noise_x, n.dx / L);
    noise_v = fmax(noise_v, n.dv / vref);
    noise_rms = fmax(noise_rms, n.rms / vref);
    noise_jp = fmax(noise_jp, n.dJp);
  }
  printf("%s: worst max|dx| %.3g L, max|dv| %.3g vmax, rms|dv| %.3g vmax, max|dF| %.3g, max|dlogJp| %.3g; "
         "1 vs 2 GPUs: %.3g L, %.3g vmax, %.3g vmax, %.3g\n", name, worst_x, worst_v, worst_rms, worst_F, worst_jp,
         noise_x, noise_v, noise_rms, noise_jp);
  /* Fixed parts (the brief, and the reasoning at the top): positions within 1e-4 of the domain,
   * single velocities within 1e-2 of the largest speed and their RMS within 1e-3, logJp within
   * 1e-3 (a packet that lost its plastic state would differ by the whole initial_compression,
   * 0.1); each or three times the GPU's own noise, whichever is larger. A case whose material
   * yields (logJp moves) takes logJp within 0.03: the largest single-particle difference is one
   * particle on the yield surface, chaotic under float atomics; in six runs on one H100
   * 1 and 2 GPUs differed by 0.0068 to 0.0203 and CPU and CUDA by 0.0202 to 0.0203, so
   * three times one run's noise was as likely as not to fall below the CPU's difference. A lost
   * plastic state (0.1) still fails. */
  const double tx = fmax(1e-4, 3 * noise_x), tv = fmax(1e-2, 3 * noise_v), tr = fmax(1e-3, 3 * noise_rms);
  const double tj = fmax(noise_jp > 0 ? 3e-2 : 1e-3, 3 * noise_jp);
  CHECK(worst_jp <= tj, "%s: logJp differs by %.3g (tolerance %.3g)", name, worst_jp, tj);
  CHECK(worst_x <= tx, "%s: positions differ by %.3g of the domain size (tolerance %.3g)", name, worst_x, tx);
  CHECK(worst_v <= tv, "%s: velocities differ by %.3g of the largest speed (tolerance %.3g)", name, worst_v, tv);
  CHECK(worst_rms <= tr, "%s: RMS velocity difference %.3g of the largest speed (tolerance %.3g)", name, worst_rms, tr);
  particles_free(&pa);
  particles_free(&pb);
  particles_free(&pc);
  sim_destroy(&A);
  sim_destroy(&B);
  sim_destroy(&C);
  scene_destroy(&s);
}

int main(int argc, char **argv) {
  int ngpu = 0;
  char gname[256];
  gpu_count(&ngpu, gname, sizeof gname);
  if (ngpu == 0) {
    printf("no GPU: skipped\n");
    return 77;
  }
  init(&argc, &argv);
  printf("test_cuda_vs_cpu: cpu vs cuda on %s\n", gname);
  /* An elastic box and sphere dropped onto a sticky floor (c = 11.6 m/s: dt c/dx = 0.29). */
  compare("elastic",
          "{\"domain\":{\"min\":[0,0,0],\"max\":[1,1,1],\"dx\":0.02},"
          "\"time\":{\"frames\":10,\"fps\":50,\"dt\":0.0005},"
          "\"materials\":{\"jelly\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":1e5,\"poisson_ratio\":0.3}},"
          "\"bodies\":[{\"shape\":\"box\",\"min\":[0.35,0.08,0.35],\"max\":[0.6,0.33,0.6],\"material\":\"jelly\",\"ppc\":8,\"velocity\":[0.5,-2,0.3]},"
          "           {\"shape\":\"sphere\",\"center\":[0.5,0.6,0.5],\"radius\":0.1,\"material\":\"jelly\",\"ppc\":8,\"velocity\":[0,-1,0]}],"
          "\"boundary\":{\"type\":\"sticky\"}}");
  /* Two sand blocks (jobs/scenes/default.json, smaller) on a separating floor with friction
   * (c = 17 m/s: dt c/dx = 0.43). */
  compare("sand",
          "{\"domain\":{\"min\":[0,0,0],\"max\":[1,1,1],\"dx\":0.02},"
          "\"time\":{\"frames\":10,\"fps\":50,\"dt\":0.0005},"
          "\"materials\":{\"sand\":{\"model\":\"drucker_prager\",\"density\":1600,\"youngs_modulus\":3.5e5,\"poisson_ratio\":0.3,\"friction_angle\":35}},"
          "\"bodies\":[{\"shape\":\"box\",\"min\":[0.3,0.06,0.3],\"max\":[0.5,0.36,0.5],\"material\":\"sand\",\"ppc\":8,\"seed\":1},"
          "           {\"shape\":\"box\",\"min\":[0.55,0.2,0.4],\"max\":[0.75,0.4,0.6],\"material\":\"sand\",\"ppc\":8,\"seed\":2,\"velocity\":[-0.5,0,0]}],"
          "\"boundary\":{\"type\":\"separate\",\"friction\":0.4}}");
  /* The same sand with separate P2G and G2P kernels (fixed steps use the fused G2P2G kernel
   * below parallel.g2p2g_below particles, 100K by default, so the scenes above run fused). */
  compare("sand-unfused",
          "{\"domain\":{\"min\":[0,0,0],\"max\":[1,1,1],\"dx\":0.02},"
          "\"time\":{\"frames\":10,\"fps\":50,\"dt\":0.0005},"
          "\"materials\":{\"sand\":{\"model\":\"drucker_prager\",\"density\":1600,\"youngs_modulus\":3.5e5,\"poisson_ratio\":0.3,\"friction_angle\":35}},"
          "\"bodies\":[{\"shape\":\"box\",\"min\":[0.3,0.06,0.3],\"max\":[0.5,0.36,0.5],\"material\":\"sand\",\"ppc\":8,\"seed\":1},"
          "           {\"shape\":\"box\",\"min\":[0.55,0.2,0.4],\"max\":[0.75,0.4,0.6],\"material\":\"sand\",\"ppc\":8,\"seed\":2,\"velocity\":[-0.5,0,0]}],"
          "\"boundary\":{\"type\":\"separate\",\"friction\":0.4},\"parallel\":{\"g2p2g_below\":0}}");
  /* A water column breaking in a slip tank (K = 5e4 Pa, gamma 7). */
  compare("fluid",
          "{\"domain\":{\"min\":[0,0,0],\"max\":[0.8,0.6,0.4],\"dx\":0.02},"
          "\"time\":{\"frames\":10,\"fps\":50,\"dt\":0.0004},"
          "\"materials\":{\"water\":{\"model\":\"weakly_compressible\",\"density\":1000,\"bulk_modulus\":5e4,\"gamma\":7}},"
          "\"bodies\":[{\"shape\":\"box\",\"min\":[0.06,0.06,0.06],\"max\":[0.3,0.4,0.34],\"material\":\"water\",\"ppc\":8}],"
          "\"boundary\":{\"type\":\"slip\"}}");
  /* Sand pushed by a moving box piston (separate) into a static sphere, under a turning sticky
   * cylinder that comes down, on a rough floor between slip walls (per-face walls, colliders and
   * their motion: k_poses and boundary.h in k_grid; fused G2P2G). The pistons' faces start at
   * x = 0.1037, off the grid: from 0.1, at 0.5 m/s with a band of half a cell, every node layer
   * would enter the band exactly at the end of a step (t = 0.02 + 0.04 j), where the last bit of
   * the time and of phi decides, on each backend differently, whether a whole layer of nodes is
   * pushed in that step (measured: 764 particles 0.13 m/s apart at t = 0.06, equal again a step
   * later). */
  compare("colliders",
          "{\"domain\":{\"min\":[0,0,0],\"max\":[1,0.6,0.6],\"dx\":0.02},"
          "\"time\":{\"frames\":10,\"fps\":50,\"dt\":0.0005},"
          "\"materials\":{\"sand\":{\"model\":\"drucker_prager\",\"density\":1600,\"youngs_modulus\":3.5e5,\"poisson_ratio\":0.3,\"friction_angle\":35}},"
          "\"bodies\":[{\"shape\":\"box\",\"min\":[0.12,0.04,0.1],\"max\":[0.5,0.24,0.5],\"material\":\"sand\"}],"
          "\"boundary\":{\"type\":\"slip\",\"y-\":{\"type\":\"separate\",\"friction\":0.4}},"
          "\"colliders\":[{\"shape\":\"box\",\"min\":[-0.3,0,0],\"max\":[0.1037,0.3,0.55],\"type\":\"separate\","
          "\"motion\":[{\"time\":0},{\"time\":1,\"translation\":[0.5,0,0]}]},"
          "{\"shape\":\"sphere\",\"center\":[0.7,0.1,0.3],\"radius\":0.1,\"type\":\"separate\",\"friction\":0.3},"
          "{\"shape\":\"cylinder\",\"center\":[0.35,0.35,0.3],\"axis\":[0,0,1],\"radius\":0.08,\"height\":0.4,\"type\":\"sticky\","
          "\"motion\":[{\"time\":0},{\"time\":0.2,\"translation\":[0,-0.1,0],\"rotation\":{\"axis\":[0,0,1],\"angle\":90}}]}]}");
  /* The water column with ASFLIP (old grid velocity in grid0; positional adjustment held at 1:
   * its beta switch is a threshold that rounding flips, see test_ranks), unfused and fused. */
  compare("fluid-asflip",
          "{\"domain\":{\"min\":[0,0,0],\"max\":[0.8,0.6,0.4],\"dx\":0.02},"
          "\"time\":{\"frames\":10,\"fps\":50,\"dt\":0.0004},"
          "\"materials\":{\"water\":{\"model\":\"weakly_compressible\",\"density\":1000,\"bulk_modulus\":5e4,\"gamma\":7,"
          "\"transfer\":\"asflip\",\"asflip_beta_min\":1}},"
          "\"bodies\":[{\"shape\":\"box\",\"min\":[0.06,0.06,0.06],\"max\":[0.3,0.4,0.34],\"material\":\"water\",\"ppc\":8}],"
          "\"boundary\":{\"type\":\"slip\"},\"parallel\":{\"g2p2g_below\":0}}");
  compare("fluid-asflip-fused",
          "{\"domain\":{\"min\":[0,0,0],\"max\":[0.8,0.6,0.4],\"dx\":0.02},"
          "\"time\":{\"frames\":10,\"fps\":50,\"dt\":0.0004},"
          "\"materials\":{\"water\":{\"model\":\"weakly_compressible\",\"density\":1000,\"bulk_modulus\":5e4,\"gamma\":7,"
          "\"transfer\":\"asflip\",\"asflip_beta_min\":1}},"
          "\"bodies\":[{\"shape\":\"box\",\"min\":[0.06,0.06,0.06],\"max\":[0.3,0.4,0.34],\"material\":\"water\",\"ppc\":8}],"
          "\"boundary\":{\"type\":\"slip\"}}");
  /* NACC snow compacted by a slip piston (logJp in the packet's spare slot). Firm snow
   * (initial_compression -0.1, hardening 1): it yields and hardens near the piston but stays
   * comparable; soft snow (the default -0.01, xi 5) is not: its return mapping's hardening jumps
   * between the tip and the ellipse (Wolper's algorithm), so after yielding 1 and 2 CPU ranks
   * already differ by ~1% in velocity (test_ranks). */
  compare("snow",
          "{\"domain\":{\"min\":[0,0,0],\"max\":[1,0.5,0.4],\"dx\":0.02},"
          "\"time\":{\"frames\":10,\"fps\":50,\"dt\":0.0005},"
          "\"materials\":{\"snow\":{\"model\":\"nacc\",\"density\":400,\"bulk_modulus\":5e4,\"poisson_ratio\":0.3,"
          "\"hardening\":1,\"initial_compression\":-0.1}},"
          "\"bodies\":[{\"shape\":\"box\",\"min\":[0.1,0.04,0.06],\"max\":[0.6,0.2,0.34],\"material\":\"snow\"}],"
          "\"boundary\":{\"type\":\"slip\",\"y-\":{\"type\":\"separate\",\"friction\":0.3}},"
          "\"colliders\":[{\"shape\":\"box\",\"min\":[-0.2,0,-0.1],\"max\":[0.1037,0.3,0.5],\"type\":\"slip\","
          "\"motion\":[{\"time\":0},{\"time\":1,\"translation\":[0.5,0,0]}]}]}");
  /* Mesh colliders (level sets uploaded once, sampled in k_grid): sand on a static mesh ramp, a
   * mesh sphere turning by keyframes, and an OBJ sequence (three frames, the level sets blended
   * in time with the stored surface velocities) pushing the sand; a jelly icosphere body. The
   * sequence is a 0.1 m slab moving +x at 0.5 m/s, placed off the grid (x from 0.1991): from
   * 0.2, its faces x = 0.2 + 0.5 t and 0.3 + 0.5 t put whole node layers exactly at phi = band
   * (half a cell) at step ends (t = 0.02 + 0.04 j, and others at the blend's round fractions),
   * where the last bits of the blended phi (FMA contraction on the GPU) decide whether the sticky
   * slab holds the layer in that step (measured: frame 9, t = 0.18, 0.047 vmax on particle 1361
   * behind the slab, its node (0.28, 0.06, 0.14) one ulp inside the band on the CPU; gone a frame
   * later). At 0.1991 every node stays at least 2e-5 m from the band's edge in every step. */
  char mesh_json[4096];
  snprintf(mesh_json, sizeof mesh_json,
           "{\"domain\":{\"min\":[0,0,0],\"max\":[0.8,0.5,0.4],\"dx\":0.02},"
           "\"time\":{\"frames\":10,\"fps\":50,\"dt\":0.0005},"
           "\"materials\":{\"sand\":{\"model\":\"drucker_prager\",\"density\":1600,\"youngs_modulus\":3.5e5,\"poisson_ratio\":0.3,\"friction_angle\":35},"
           "\"jelly\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":1e5,\"poisson_ratio\":0.3}},"
           "\"bodies\":[{\"shape\":\"box\",\"min\":[0.06,0.3,0.08],\"max\":[0.24,0.42,0.3],\"material\":\"sand\",\"velocity\":[0,-1,0]},"
           "{\"shape\":\"box\",\"min\":[0.3,0.04,0.06],\"max\":[0.5,0.12,0.34],\"material\":\"sand\",\"seed\":3},"
           "{\"shape\":\"mesh\",\"file\":\"%s/icosphere.obj\",\"scale\":0.06,\"translation\":[0.65,0.32,0.2],\"material\":\"jelly\",\"velocity\":[0,-1.5,0]}],"
           "\"boundary\":{\"type\":\"slip\",\"y-\":{\"type\":\"separate\",\"friction\":0.4}},"
           "\"colliders\":[{\"shape\":\"mesh\",\"file\":\"%s/ramp.obj\",\"scale\":0.3,\"translation\":[0.02,0,0.02],\"type\":\"separate\",\"friction\":0.3},"
           "{\"shape\":\"mesh\",\"file\":\"%s/icosphere.obj\",\"scale\":0.08,\"translation\":[0.65,0.12,0.2],\"type\":\"separate\",\"friction\":0.5,"
           "\"motion\":[{\"time\":0},{\"time\":0.2,\"translation\":[0,0.02,0],\"rotation\":{\"axis\":[0,0,1],\"angle\":60}}]},"
           "{\"shape\":\"mesh\",\"files\":\"%s/slab_%%04d.obj\",\"fps\":10,\"scale\":0.1,\"translation\":[0.1991,0,0.1],\"type\":\"sticky\"}]}",
           MESH_DIR, MESH_DIR, MESH_DIR, MESH_DIR);
  compare("mesh-colliders", mesh_json);
  /* A small fountain (particle sources, src/emit.h): a cylindrical nozzle resampled every frame
   * at 27 per cell shoots ASFLIP water up faster than it refills (3 m/s x 0.04 s = 0.12 m > its
   * 0.04 m height: every round refills it from empty, so rounding cannot change which cells get
   * particles), and a rate source drips beside it; the counts and ids must agree exactly (new
   * particles appended on the device, add_particles, then a rebuild-mapping), fused (G2P2G after
   * every emission) and unfused. */
  static const char *fountain =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[0.6,0.8,0.6],\"dx\":0.02},"
      "\"time\":{\"frames\":4,\"fps\":25,\"dt\":0.0004},"
      "\"materials\":{\"water\":{\"model\":\"weakly_compressible\",\"density\":1000,\"bulk_modulus\":5e4,\"gamma\":7,"
      "\"transfer\":\"asflip\",\"asflip_beta_min\":1}},"
      "\"bodies\":[{\"shape\":\"cylinder\",\"center\":[0.3,0.08,0.3],\"axis\":[0,1,0],\"radius\":0.06,\"height\":0.04,"
      "\"material\":\"water\",\"ppc\":27,\"velocity\":[0,3,0],\"emit\":{\"mode\":\"resample\",\"end\":0.09}},"
      "{\"shape\":\"box\",\"min\":[0.1,0.3,0.1],\"max\":[0.2,0.4,0.2],\"material\":\"water\",\"ppc\":8,"
      "\"velocity\":[0.5,0,0],\"emit\":{\"rate\":5000,\"start\":0.03}}],"
      "\"boundary\":{\"type\":\"slip\"}%s}";
  char json[2048];
  snprintf(json, sizeof json, fountain, "");
  compare("fountain-fused", json);
  snprintf(json, sizeof json, fountain, ",\"parallel\":{\"g2p2g_below\":0}");
  compare("fountain-unfused", json);
  return finish("test_cuda_vs_cpu");
}
