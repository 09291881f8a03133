// backend_cuda.cu - the CUDA backend: the single-GPU pipeline of the paper (sections 3-4;
// docs/architecture.md) behind backend.h, on the shared header-only physics.
//
// Particles. AoSoA: packets of 32 particles, one per warp, attribute a of lane l of packet p at
// pk[p * PK_FLOATS + a * 32 + l] (PK_ATTRS attributes: x, v, C, F, mass, volume, material, logJp); ids
// in a slot array beside them. At rebuild-mapping the particles are sorted by (particle block,
// cell) and every particle block starts a new packet, so that a warp's particles share one
// particle block (a CUDA block of 4 warps may mix particle blocks); packet headers give the
// particle block and the number of valid lanes.
//
// Grid. Blocks of 4x4x4 nodes with 64-bit Morton codes (physics/sparse.h), a device hash table
// from code to dense index, the 3x3x3 physical blocks of every particle block (its free zone is
// (10 dx)^3, so rebuild-mapping is rare). A block holds 4 channels (mass, momentum, which the
// grid update turns into velocity in place) of 64 nodes, a node's 4 side by side:
// grid[blk * 256 + node * 4 + channel] (GRID_VEC4, gpu/p2g.cuh: one vector atomic per node in
// P2G, one vector load or store per node in the grid update and G2P; -DGRID_VEC4=0 keeps the
// two 32-wide packets of nodes, grid[blk * 256 + (node >> 5) * 128 + channel * 32 + (node & 31)]).
// Two grid buffers alternate step by step: the grid update of buffer c clears buffer 1 - c (the
// next P2G's target) in the same pass, only where that buffer was touched. Untouched blocks
// (P2G marks the blocks it writes) are skipped.
//
// One step (k_begin, k_p2g, k_grid, k_g2p) is one CUDA graph launch (one graph per grid-buffer
// parity, re-instantiated after each rebuild; an island with parallel.island_barrier "events"
// launches the kernels directly, see gpu/island_barrier.cu): dt (fixed or adaptive) is computed on the device
// from the last step's largest speed, and the step's flags (left the free zone, largest speed, a
// non-finite particle) are copied to pinned host memory. The host reads a step's flags after
// STEP_LAG (one) more step is queued, so the device never waits for the host. The step queued
// behind a step whose particles left the free zone ([-4, 5] for base node - 4P) is voided: its
// k_begin sees the flag and sets done, so its kernels return at once and it takes no time, no dt
// and no grid buffer (begin_step); the host, reading both steps' flags, rebuilds the mapping
// (k_unvoid) and queues that step again. G2P thus checks the whole free zone: a particle moves
// less than one cell per step (a faster one fails the run, DR_RUNAWAY_CELLS), so the step after
// the flag is the first whose stencils could leave the physical blocks. An island's members void
// a step together: each publishes its flag at k_begin, and after a barrier each takes the OR of
// all (begin_shares; k_begin_barrier's barrier serves, else k_begin holds one), so that no member
// waits at a barrier for one that voided. With the "events" barrier (no device barrier at the
// beginning) every queued step runs, so G2P flags particles that leave an *inner* zone, the free
// zone less a cell of slack a queued step (lag_of).
//
// P2G. One thread per particle; plasticity and stress fused in; B-spline weights in shared
// memory. The lanes of a warp are sorted by their cell inside the free zone (10 bits, a split
// radix sort on ballots, skipped when the lanes are already in order, as right after a
// rebuild); lanes of one cell share all 27 stencil nodes, so their contributions are summed
// (p2g_gather: from records in shared memory, without shuffles; gpu/p2g.cuh says how) and one
// native global float atomic a node and channel is issued per cell. No atomics on shared memory.
//
// G2P. One thread per particle. The warp first loads the box of its lanes' stencils (6^3 nodes
// right after a rebuild-mapping) into shared memory once, then each lane reads its 27 nodes there
// (g2p_nodes, gpu/p2g.cuh; faster than reading each node from the grid, see docs/performance.md
// (decisions); ASFLIP
// and a box too large for the tile do that). Particles inside a collider's box are left to
// k_collide (the particle collision step).
//
// G2P2G (fixed steps below g2p2g_below particles per GPU; the paper, section 4): the step is
// k_begin, k_grid, k_g2p2g, whose G2P is followed in the same kernel by the next step's P2G into
// the other buffer; primed says that grid[par] already holds the P2G of the step about to run (a
// frame's first step gets a P2G of its own when nothing is primed). That P2G also applied the
// next step's plastic return mapping to F and logJp in the packets, so the primed sums are never
// thrown away and recomputed from the projected particles, which would apply the mapping twice
// (NACC would harden twice, since the hardened p0 moves the yield surface; the CPU backend never
// fuses): a rebuild-mapping moves them to the new block indices (keep_primed), the
// phase-by-phase cuda_p2g() uses them when its dt is the one they took (primed_dt), and the first
// unfused step after fused frames skips its P2G (island_advance_frame). P2G runs again over
// projected particles only where the sums cannot serve: new particles (cuda_add_particles), or
// another dt (not expected: fixed steps keep one dt per run). A checkpoint written while primed
// says so (backend.projected, ckpt_state.projected), and the run resumed from it takes its first
// P2G without the mapping (cuda_set_projected: step_ctl.projected, which k_p2g reads and k_grid
// clears). k_g2p2g's P2G also adds each cell group's 27 nodes into a box in the warp's shared
// memory and issues one global atomic a node the packet reached (the box sums, gpu/p2g.cuh,
// G2P2G_NODESUM): where P2G is latency-bound, as in these small scenes, each warp's chain of
// global atomics is the step's critical path; k_p2g, throughput-bound, keeps its atomics
// (P2G_NODESUM = 0; the box would cost it time; see docs/performance.md (decisions)).
//
// Ranks (sim.c drives the phases step by step, one vote a step): with fixed steps the next step's
// P2G is queued with this step's G2P, before the vote, behind a gate (g2p_ahead): its first kernel,
// k_begin_gated, spins until the host writes the vote's outcome into mapped memory (gate_open),
// then begins the step or voids it (a rebuild-mapping comes first; its kernels return at once), so
// that the device starts the step as the ranks agree instead of after the host's launches. A rank's
// island gates every member and opens them alike (island_g2p_ahead). Not where the node's ranks
// share GPUs (--steps-ahead): a spinning kernel holds its GPU against the other process's time
// slices.
//
// Deterministic mode (parallel.deterministic, physics/fixed.h): every lane turns its
// contributions into int64 fixed point *before* the warp's segmented reduction (whose float
// order would follow the sort), the reduction adds integers, and the segment heads add them with
// 64-bit integer atomics into igrid[par] ([n_blocks][4 or 7 channels][64 nodes], allocated only in
// this mode); k_grid turns a touched block's sums into the float grid (mass, momentum, and the
// ASFLIP channels of grid0) before the usual update, and clears the other int buffer. The P2G
// kernels and k_grid are templates on DET, so the float path compiles as before. A contribution
// out of range sets step_ctl.fix_bad, read with the step's other flags (no extra host sync).
//
// Every CUDA call and launch is checked (CU, LAUNCHED): the message names the call, file, line.
//
// The backend's files (gpu/cuda_state.h declares what they share):
//   backend_cuda.cu      this overview; setup and member creation, one GPU's phases (backend.h) and
//                        its ops table (backend_cuda_create)
//   dvec.cu              device vectors and an island member's stream-ordered pools
//   rebuild.cu           rebuild-mapping (sort, particle blocks, packets, grid blocks, hash table)
//   step.cu              the step's kernels and launches, the CUDA graphs (P2G: p2g.cuh; the grid
//                        update: grid.cuh; G2P and G2P2G: g2p.cuh; the views they take: views.cuh)
//   colliders.cu         collider poses and boxes, the collider cache
//   island_barrier.cu    the island's barrier and reduction between members, and why they are race-free
//   island_crew.cu       the island's host threads
//   island.cu            the island's ops and its creation
//   exchange_device.cu   the rank exchange on the device (node masks, packs, unpacks)
//   particles_io.cu      upload, download, adding and emigrating particles and records (one GPU)
//   capture.cu           the frame's snapshot and fetch, the checkpoint's rows (one GPU, the island)
//   island_particles.cu  the island's particles: the split among members, adding, emigrating
//   timeline.cu          the GPU marks and stamps (debugging aids)

#include "cuda_state.h"

/* One int from the device, through pinned memory (a pageable destination makes the copy wait
 * for a staging buffer besides the stream). */
int cuda_read_count(cuda_state *s, const void *dev, int *out) {
  CU(cudaMemcpyAsync(&s->h_rc->n, dev, sizeof *out, cudaMemcpyDeviceToHost, s->stream));
  CU(cudaStreamSynchronize(s->stream));
  *out = s->h_rc->n;
  TRACE("count %d", *out);
  return DR_OK;
}
/* The tail on xstream (one GPU, with cuda_g2p_interior, no colliders): the shared blocks' update
 * and then the boundary's G2P (g2p) go on xstream, behind the unpacks there and behind xint_ev
 * (the step's stream up to the interior's grid update), so that they run beside the interior's
 * G2P instead of after it: both are short launches of few packets whose time is their warps'
 * latency, which the interior's G2P now hides. No race: the shared update writes only shared
 * blocks (their velocities, and their other-parity sums, which it clears), which the interior's
 * G2P never reads (its stencils reach no shared block: xdev_boundary_order); the boundary's G2P reads
 * interior blocks that xint_ev ordered finished and shared blocks that xstream just updated, and
 * writes only its own packets; the flags of both G2Ps meet in step_ctl by atomics (any order gives
 * the same flags). g2p joins xstream into the step's stream before the step record. */
static int grid_update_part(void *state, float dt, int part) {
  (void)dt; /* k_begin_fixed stored it */
  cuda_state *s = (cuda_state *)state;
  if (part == GRID_SHARED && s->tail_armed) {
    s->tail_armed = 0;
    CU(cudaStreamWaitEvent(s->xstream, s->xint_ev, 0));
    DR_TRY(step_grid_on(s, s->par, part, s->xstream));
    s->tail_on = 1;
    return DR_OK;
  }
  return step_grid(s, s->par, part);
}

static int wants_rebuild(void *state) { return ((cuda_state *)state)->need_rebuild; }

/* ---- backend.h: the phases ---------------------------------------------------------------- */

static int rebuild(void *state, int force, int *rebuilt) {
  cuda_state *s = (cuda_state *)state;
  *rebuilt = 0;
  if (!force && !s->need_rebuild) return DR_OK;
  DR_TRY(rebuild_now(s));
  *rebuilt = 1;
  return DR_OK;
}

/* Opens the armed gate for the spinning k_begin_gated (go), or voids its step: the gate's number and
 * the outcome in one word of mapped memory. */
static void gate_write(cuda_state *s, int go) {
  __atomic_store_n(s->h_gate, (s->gate_seq << 1) | (go ? 1u : 0u), __ATOMIC_RELEASE);
  s->gate_armed = 0;
  timeline_marks_gate(s, 0); /* the marks behind it complete now */
}

int cuda_p2g(void *state, float dt) {
  cuda_state *s = (cuda_state *)state;
  s->g2p_rest = s->tail_on = s->tail_armed = s->head_on = s->interior_on = 0;
  DR_TRY(step_begin(s, dt));
  if (s->primed) { /* after G2P2G frames: the last G2P2G (or the rebuild's keep_primed) did this P2G */
    s->primed = 0;
    if (dt == s->primed_dt) return DR_OK;
    /* Another dt: the primed sums hold the stress impulse -dt V0 (4/dx^2) tau of the old dt,
     * summed with the dt-free mass and APIC momentum, so they cannot be rescaled; P2G runs again.
     * Not exact: that P2G already applied the return mapping to F and logJp, so it is applied a
     * second time (NACC hardens twice). Fixed steps keep one dt per run, so a change of dt
     * between G2P2G frames and this step is not expected. */
    DR_TRY(step_clear_grid(s, s->par));
  }
  return step_p2g(s, s->par);
}

/* backend.h's p2g_part (ranks: sim.c sends the boundary's sums while the interior scatters). The
 * boundary call does what p2g does before its P2G (the step's dt, primed sums), then scatters the
 * boundary packets; the interior call scatters the rest, on the same stream. */
int cuda_p2g_part(void *state, float dt, int part) {
  cuda_state *s = (cuda_state *)state;
  if (part == P2G_INTERIOR) {
    if (s->part_skip) return DR_OK;
    if (!s->interior_on) /* else cuda_node_masks_async queued it (masks_begin) */
      DR_TRY(step_p2g_interior(s));
    s->interior_on = 0;
    /* head_on: the interior's grid update (next on this stream) reads blocks both parts scatter into */
    if (s->head_on) CU(cudaStreamWaitEvent(s->stream, s->xhead_ev, 0));
    s->head_on = 0;
    return DR_OK;
  }
  s->part_skip = 0;
  s->g2p_rest = s->tail_on = s->tail_armed = s->head_on = s->interior_on = 0;
  /* behind a gate, the order's count read (a host wait) comes before the gated begin */
  if (s->gate_armed) DR_TRY(xdev_boundary_order(s));
  DR_TRY(step_begin(s, dt));
  if (s->primed) { /* as in cuda_p2g() */
    s->primed = 0;
    if (dt == s->primed_dt) {
      s->part_skip = 1;
      return DR_OK;
    }
    DR_TRY(step_clear_grid(s, s->par));
  }
  DR_TRY(xdev_boundary_order(s));
  /* One GPU: the boundary's P2G on xstream (high priority), where the pack
   * follows it, beside the interior's P2G on the step's stream instead of before it: a short
   * launch whose time is its warps' latency. Both scatter by atomic additions (float or, in
   * deterministic mode, fixed-point: the same sums in any order) and into interior blocks alike;
   * the pack reads only shared blocks, which only boundary packets reach; the interior's grid
   * update waits for xhead_ev (cuda_p2g_part(P2G_INTERIOR)). */
  if (s->nm == 1 && s->n_boundary > 0) {
    DR_TRY(xdev_xstream_get(s));
    if (!s->xbeg_ev) CU(cudaEventCreateWithFlags(&s->xbeg_ev, cudaEventDisableTiming));
    if (!s->xhead_ev) CU(cudaEventCreateWithFlags(&s->xhead_ev, cudaEventDisableTiming));
    CU(cudaEventRecord(s->xbeg_ev, s->stream));
    CU(cudaStreamWaitEvent(s->xstream, s->xbeg_ev, 0));
    DR_TRY(step_p2g_on(s, s->par, dp<int32_t>(s->pk_order), s->n_boundary, s->xstream));
    CU(cudaEventRecord(s->xhead_ev, s->xstream));
    s->head_on = 1;
    return DR_OK;
  }
  return step_p2g_of(s, s->par, dp<int32_t>(s->pk_order), s->n_boundary);
}

/* backend.h's g2p_interior (ranks): the G2P of the packets whose stencils reach no block shared
 * with another rank (xdev_boundary_order's interior list), queued behind grid_update_part(GRID_INTERIOR)
 * while the shared blocks' sums are in flight. Those packets read only interior blocks, which that
 * update has finished, and no later kernel of the step writes them (the unpack and the shared
 * blocks' update touch shared blocks only). g2p then runs the boundary packets and the collision
 * step of all (step_g2p_of); the flags of both parts meet in the step's ctl. */
int cuda_g2p_interior(void *state, float dt) {
  (void)dt; /* k_begin_fixed stored it */
  cuda_state *s = (cuda_state *)state;
  s->g2p_rest = 0;
  if (s->n_packets == 0) return DR_OK;
  DR_TRY(xdev_boundary_order(s)); /* once per mapping and marks; a setup step's comes here */
  /* one GPU: the step's stream so far (the boundary's and the interior's P2G, the interior's grid
   * update), for the shared blocks' update on xstream (grid_update_part) */
  if (s->nm == 1 && !s->push && s->bnd.n_colliders == 0) {
    DR_TRY(xdev_xstream_get(s));
    if (!s->xint_ev) CU(cudaEventCreateWithFlags(&s->xint_ev, cudaEventDisableTiming));
    CU(cudaEventRecord(s->xint_ev, s->stream));
    s->tail_armed = 1;
  }
  DR_TRY(step_g2p_of(s, s->par, 0, step_interior_list(s), step_interior_count(s), 0));
  s->g2p_rest = 1;
  return DR_OK;
}

static int grid_update(void *state, float dt) {
  (void)dt; /* k_begin_fixed stored it */
  cuda_state *s = (cuda_state *)state;
  return step_grid(s, s->par, GRID_ALL);
}

static int set_time(void *state, double t) {
  ((cuda_state *)state)->t_next = t;
  return DR_OK;
}

static int finish(void *state) {
  CU(cudaStreamSynchronize(((cuda_state *)state)->stream));
  return DR_OK;
}

static int max_speed(void *state, float *vmax) {
  *vmax = ((cuda_state *)state)->vmax;
  return DR_OK;
}

/* ---- the rest of the interface ------------------------------------------------------------ */

/* backend.projected: the packets hold the return mapping of the primed P2G (G2P2G). */
static int projected(void *state) { return ((cuda_state *)state)->primed; }

/* Every device vector of s but the snapshot's (one list, for the bytes held and for destroy). */
#define CUDA_DVECS(s)                                                                                          \
  {&s->pk, &s->pid, &s->hdr, &s->d_mats, &s->d_kinds, &s->keys[0], &s->keys[1], &s->vals[0], &s->vals[1],        \
   &s->pblock, &s->head, &s->pb_coord, &s->pb_start, &s->pb_packets, &s->pb_nbr, &s->nbr_codes[0], &s->nbr_codes[1],       \
   &s->block_code, &s->grid[0], &s->grid[1], &s->grid0[0], &s->grid0[1], &s->touched[0], &s->touched[1],       \
   &s->table_keys, &s->table_vals, &s->temp, &s->ctl, &s->igrid[0], &s->igrid[1], &s->count, &s->shared,       \
   &s->xidx, &s->xbuf, &s->xrecv, &s->xnodes, &s->d_colliders, &s->d_keys, &s->d_poses, &s->d_ls,              \
   &s->d_ls_table, &s->d_ls_bricks, &s->tags, &s->vel, &s->vel0, &s->bar, &s->old_code, &s->old_touched,       \
   &s->old_grid, &s->old_grid0, &s->old_igrid, &s->old_to_new, &s->own, &s->d_colbox, &s->d_wbox,              \
   &s->push_mask, &s->push_room, &s->gone, &s->xrec, &s->xin, &s->pk_order, &s->shared_idx, &s->shared_n,      \
   &s->rows, &s->snap_stage, &s->cc_index, &s->cc_state, &s->cc_slot, &s->cc_blocks, &s->cc_vals, &s->cc_scratch}

double cuda_held_bytes(const cuda_state *s) {
  double b = 0;
  const dvec *all[] = CUDA_DVECS(s);
  for (size_t k = 0; k < sizeof all / sizeof *all; ++k) b += (double)all[k]->bytes;
  for (int a = 0; a < PARTICLE_ATTRS; ++a) b += (double)s->snap[a].bytes; /* the frame's snapshot */
  return b;
}

static size_t count(void *state) { return ((cuda_state *)state)->n; }

int cuda_stats(void *state, backend_stats *out) {
  cuda_state *s = (cuda_state *)state;
  out->rebuilds = s->rebuilds;
  out->n_particles = s->n;
  out->n_blocks = s->n_blocks;
  out->bytes = cuda_held_bytes(s);
  out->vote_wait_s = s->vote_wait_s;
  return DR_OK;
}

void cuda_destroy(void *state) {
  cuda_state *s = (cuda_state *)state;
  if (!s) return;
  if (s->stream) cudaSetDevice(s->device);
  if (s->h_gate && s->gate_armed) gate_write(s, 0); /* a gate left shut (an exit between g2p_ahead and the vote) */
  timeline_marks_free(s);
  timeline_stamps_free(s);
  step_drop_graphs(s);
  dvec *all[] = CUDA_DVECS(s);
  if (s->stream) cudaSetDevice(s->device);
  for (size_t k = 0; k < sizeof all / sizeof *all; ++k) dvec_free(all[k]);
  for (int a = 0; a < PARTICLE_ATTRS; ++a) dvec_free(&s->snap[a]), (void)cuda_snap_host_free(s, a);
  xdev_pslots_free(s);
  for (int k = 0; k < 2; ++k) {
    if (s->done_ev[k]) cudaEventDestroy(s->done_ev[k]);
    if (s->ph_ev[k]) cudaEventDestroy(s->ph_ev[k]);
  }
  if (s->bar_ev) cudaEventDestroy(s->bar_ev);
  if (s->rebuilt_ev) cudaEventDestroy(s->rebuilt_ev);
  if (s->xrecv_ev) cudaEventDestroy(s->xrecv_ev);
  if (s->xp2g_ev) cudaEventDestroy(s->xp2g_ev);
  if (s->xint_ev) cudaEventDestroy(s->xint_ev);
  if (s->xtail_ev) cudaEventDestroy(s->xtail_ev);
  if (s->xhead_ev) cudaEventDestroy(s->xhead_ev);
  if (s->xbeg_ev) cudaEventDestroy(s->xbeg_ev);
  if (s->codes_ev) cudaEventDestroy(s->codes_ev);
  if (s->h_slot) cudaFreeHost(s->h_slot);
  if (s->h_rc) cudaFreeHost(s->h_rc);
  if (s->h_xbad) cudaFreeHost(s->h_xbad);
  if (s->h_gate) cudaFreeHost(s->h_gate);
  if (s->g2p_ev) cudaEventDestroy(s->g2p_ev);
  for (int k = 0; k < 2; ++k)
    if (s->pool[k]) cudaMemPoolDestroy(s->pool[k]);
  if (s->stream) cudaStreamDestroy(s->stream);
  cudaGetLastError();
  memtally_free(s->h_add), memtally_free(s->h_add_id), memtally_free(s->h_add_hdr);
  cuda_host_release(s->h_codes);
  cuda_host_release(s->h_crec);
  compact_kinds_free(&s->kinds);
  free(s->xl);
  free(s->mats);
  free(s);
}

/* Allocation and upload (particles in packets of 32 in their given order, then a first
 * rebuild-mapping sorts them): p's, or src's chunk by chunk where src is not NULL; on failure the
 * caller destroys s. */
int cuda_setup(cuda_state *s, const particles *p, const particle_source *src) {
  CU(cudaSetDevice(s->device));
  cudaDeviceProp prop;
  CU(cudaGetDeviceProperties(&prop, s->device));
  snprintf(s->device_name, sizeof s->device_name, "%s", prop.name);
  s->n_sm = prop.multiProcessorCount;
  CU(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  DR_TRY(dvec_pools(s));
  for (int k = 0; k < 2; ++k) {
    CU(cudaEventCreateWithFlags(&s->done_ev[k], cudaEventDisableTiming));
    CU(cudaEventCreate(&s->ph_ev[k]));
  }
  CU(cudaEventCreateWithFlags(&s->bar_ev, cudaEventDisableTiming)); /* island_barrier "events" */
  CU(cudaEventCreateWithFlags(&s->rebuilt_ev, cudaEventDisableTiming));
  CU(cudaHostAlloc((void **)&s->h_slot, 2 * sizeof(step_ctl), cudaHostAllocMapped));
  memset(s->h_slot, 0, 2 * sizeof(step_ctl));
  CU(cudaHostAlloc((void **)&s->h_rc, sizeof(rebuild_count), cudaHostAllocDefault));
  CU(cudaHostGetDevicePointer((void **)&s->d_slot, s->h_slot, 0));
  CU(cudaHostAlloc((void **)&s->h_xbad, 2 * sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
  s->h_xbad[0] = s->h_xbad[1] = 0;
  CU(cudaHostGetDevicePointer((void **)&s->d_xbad, s->h_xbad, 0));
  CU(cudaHostAlloc((void **)&s->h_gate, sizeof(unsigned), cudaHostAllocMapped | cudaHostAllocPortable));
  *s->h_gate = 0;
  CU(cudaHostGetDevicePointer((void **)&s->d_gate, s->h_gate, 0));
  DVEC_EXACT(s->d_mats, (size_t)s->prm.n_materials * sizeof(material_params), "materials");
  DVEC_EXACT(s->ctl, sizeof(step_ctl), "step control");
  DVEC_EXACT(s->count, sizeof(rebuild_count), "counters");
  DVEC_EXACT(s->bar, sizeof(unsigned), "island barrier");
  CU(cudaMemsetAsync(s->bar.ptr, 0, sizeof(unsigned), s->stream));
  CU(cudaMemcpyAsync(s->d_mats.ptr, s->mats, (size_t)s->prm.n_materials * sizeof(material_params),
                     cudaMemcpyHostToDevice, s->stream));
  step_ctl c0;
  memset(&c0, 0, sizeof c0);
  c0.bad_id = ~0ULL;
  c0.fix_bad_id = ~0ULL;
  c0.done = 1;
  c0.stamps = s->stamps != NULL;
  CU(cudaMemcpyAsync(s->ctl.ptr, &c0, sizeof c0, cudaMemcpyHostToDevice, s->stream));
  /* the colliders on the device (boundary.h); the faces' types and frictions travel by value */
  const boundary_params *hb = &s->prm.boundary;
  DVEC_EXACT(s->d_colliders, (size_t)(hb->n_colliders + 1) * sizeof(collider), "colliders");
  DVEC_EXACT(s->d_keys, (size_t)(hb->n_keys + 1) * sizeof(collider_key), "collider keyframes");
  DVEC_EXACT(s->d_poses, (size_t)(hb->n_colliders + 1) * sizeof(collider_pose), "collider poses");
  DVEC_EXACT(s->d_wbox, (size_t)(2 * hb->n_colliders + 1) * sizeof(col_box), "collider boxes");
  DVEC_EXACT(s->d_colbox, (size_t)(hb->n_colliders + 1) * sizeof(col_box), "collider boxes");
  if (hb->n_colliders > 0) { /* pageable: the copy has finished when cudaMemcpy returns */
    col_box *cb = (col_box *)malloc((size_t)hb->n_colliders * sizeof(col_box));
    if (!cb) return dr_fail(DR_ENOMEM, "collider boxes: out of host memory");
    for (int k = 0; k < hb->n_colliders; ++k) cb[k] = colliders_box_local(&hb->colliders[k]);
    const cudaError_t e = cudaMemcpy(s->d_colbox.ptr, cb, (size_t)hb->n_colliders * sizeof(col_box),
                                     cudaMemcpyHostToDevice);
    free(cb);
    if (e != cudaSuccess) return cuda_fail(e, "cudaMemcpy(collider boxes)", __FILE__, __LINE__);
  }
  if (hb->n_colliders > 0)
    CU(cudaMemcpyAsync(s->d_colliders.ptr, hb->colliders, (size_t)hb->n_colliders * sizeof(collider),
                       cudaMemcpyHostToDevice, s->stream));
  if (hb->n_keys > 0)
    CU(cudaMemcpyAsync(s->d_keys.ptr, hb->keys, (size_t)hb->n_keys * sizeof(collider_key), cudaMemcpyHostToDevice,
                       s->stream));
  s->bnd.colliders = dp<collider>(s->d_colliders);
  s->bnd.keys = dp<collider_key>(s->d_keys);
  /* mesh colliders: every level set (all frames of a sequence) once, for the run; k_grid picks
   * the frames by the time, so nothing moves between host and device as the sequence plays */
  if (hb->n_levelsets > 0) {
    const int64_t n_table = hb->ls_table_n, n_bricks = hb->ls_bricks_n;
    DVEC_EXACT(s->d_ls, (size_t)hb->n_levelsets * sizeof(levelset), "mesh level sets");
    DVEC_EXACT(s->d_ls_table, (size_t)n_table * sizeof(int32_t), "mesh level-set tables");
    DVEC_EXACT(s->d_ls_bricks, (size_t)(n_bricks + 1) * sizeof(float), "mesh level-set bricks");
    CU(cudaMemcpyAsync(s->d_ls.ptr, hb->levelsets, (size_t)hb->n_levelsets * sizeof(levelset), cudaMemcpyHostToDevice,
                       s->stream));
    CU(cudaMemcpyAsync(s->d_ls_table.ptr, hb->ls_table, (size_t)n_table * sizeof(int32_t), cudaMemcpyHostToDevice,
                       s->stream));
    if (n_bricks > 0)
      CU(cudaMemcpyAsync(s->d_ls_bricks.ptr, hb->ls_bricks, (size_t)n_bricks * sizeof(float), cudaMemcpyHostToDevice,
                         s->stream));
    s->bnd.levelsets = dp<levelset>(s->d_ls);
    s->bnd.ls_table = dp<int32_t>(s->d_ls_table);
    s->bnd.ls_bricks = dp<float>(s->d_ls_bricks);
  }
  /* the collider cache (k_cc_fill): mesh colliders without keyframes; each one's box: its frames'
   * lattices, placed by its (constant) pose, widened by a cell */
  s->n_cc = 0;
  s->cc_every = settings()->collider_cache == 2;
  if (hb->n_colliders > 0) {
    int idx[64];
    int *index = hb->n_colliders <= 64 ? idx : (int *)malloc((size_t)hb->n_colliders * sizeof(int));
    if (!index) return dr_fail(DR_ENOMEM, "collider cache: out of host memory");
    for (int k = 0; k < hb->n_colliders; ++k) {
      const collider *c = &hb->colliders[k];
      index[k] = -1;
      if (c->geom.shape != SDF_MESH || c->n_keys != 0 || s->n_cc == COLCACHE_MAX) continue;
      const int q = s->n_cc++;
      index[k] = q;
      s->cc_col.k[q] = k;
      collider_pose P;
      collider_pose_at(c, hb->keys, 0.0, &P);
      col_box w;
      for (int a = 0; a < 3; ++a) w.lo[a] = FLT_MAX, w.hi[a] = -FLT_MAX;
      for (int f = 0; f < (c->n_frames > 0 ? c->n_frames : 1); ++f) {
        const levelset *L = &hb->levelsets[c->geom.levelset + f];
        for (int corner = 0; corner < 8; ++corner) {
          float xl[3], x[3];
          for (int a = 0; a < 3; ++a)
            xl[a] = L->origin[a] + ((corner >> a) & 1 ? (float)(L->dims[a] * LS_BRICK - 1) * L->h : 0.0f);
          m3_apply(P.R, xl, x);
          for (int a = 0; a < 3; ++a) {
            x[a] += P.center[a];
            w.lo[a] = fminf(w.lo[a], x[a] - (float)s->prm.dx);
            w.hi[a] = fmaxf(w.hi[a], x[a] + (float)s->prm.dx);
          }
        }
      }
      s->cc_box[q] = w;
    }
    if (s->n_cc > 0) {
      DVEC_EXACT(s->cc_index, (size_t)hb->n_colliders * sizeof(int), "collider cache");
      DVEC_EXACT(s->cc_state, 2 * (size_t)s->n_cc * sizeof(int), "collider cache");
      const cudaError_t e = cudaMemcpy(s->cc_index.ptr, index, (size_t)hb->n_colliders * sizeof(int),
                                       cudaMemcpyHostToDevice); /* pageable: done when it returns */
      if (index != idx) free(index);
      if (e != cudaSuccess) return cuda_fail(e, "cudaMemcpy(collider cache index)", __FILE__, __LINE__);
      CU(cudaMemsetAsync(s->cc_state.ptr, 0xff, 2 * (size_t)s->n_cc * sizeof(int), s->stream));
    } else if (index != idx) {
      free(index);
    }
  }
  DR_TRY(src ? cuda_upload_from(s, src) : cuda_upload(s, p));
  DR_TRY(rebuild_now(s));
  CU(cudaStreamSynchronize(s->stream));
  return DR_OK;
}

/* A member's state before setup: parameters, materials, the grid's origin and code bits. */
int cuda_member_new(const sim_params *prm, int device, cuda_state **out) {
  *out = NULL;
  cuda_state *s = (cuda_state *)dr_calloc(1, sizeof *s, "cuda backend");
  if (!s) return DR_ENOMEM;
  s->prm = *prm;
  s->mats = (material_params *)dr_malloc(sizeof(material_params) * (size_t)prm->n_materials, "materials");
  if (!s->mats) {
    free(s);
    return DR_ENOMEM;
  }
  memcpy(s->mats, prm->materials, sizeof(material_params) * (size_t)prm->n_materials);
  s->prm.materials = s->mats;
  s->device = device;
  s->nm = 1;
  s->keys64 = settings()->sort_keys64;
  s->void_steps = 1; /* the top of this file; island_create: not with events */
  s->barrier_timeout_ns = (unsigned long long)(settings()->barrier_timeout * 1e9); /* settings.c checks it */
  const char *sk = settings()->island_skew;
  if (*sk) {
    char where[8] = "";
    double us = 0.0;
    int member = -1, used = 0;
    if (sscanf(sk, "%d:%7[a-z]:%lf%n", &member, where, &us, &used) != 3 || sk[used] || member < 0 ||
        (strcmp(where, "pre") && strcmp(where, "post")) || !(us > 0.0) || us > 1e6) {
      free(s->mats);
      free(s);
      char src[SETTINGS_TEXT_MAX + 64];
      return dr_fail(DR_EINPUT, "%s: expected MEMBER:pre|post:MICROSECONDS (a test hook)",
                     settings_source(SET_ISLAND_SKEW, src, sizeof src));
    }
    s->skew_member = member;
    s->skew_where = strcmp(where, "pre") ? SKEW_POST : SKEW_PRE;
    s->skew_ns = (unsigned long long)(us * 1e3);
  }
  timeline_new(s);
  s->g2p2g_below = prm->g2p2g_below > 0 ? (size_t)prm->g2p2g_below : 0;
  /* Deterministic mode: no fused G2P2G. Inside one kernel the compiler may contract G2P's and
   * P2G's arithmetic into other FMAs than across two kernels, so the fused path would not be
   * bitwise the path that several ranks take (phase by phase). */
  if (prm->deterministic) s->g2p2g_below = 0;
  /* Compact storage (compact_packets.cuh): records on the positions' lattice of the CPU backend's
   * (the grid origin and dx as doubles); P2G and G2P in kernels of their own, no fused G2P2G. */
  s->compact = prm->storage == STORAGE_COMPACT;
  if (s->compact) {
    double origin[3];
    for (int a = 0; a < 3; ++a) origin[a] = prm->domain_min[a] - GRID_PAD * (double)prm->dx;
    s->cframe = compact_frame_make(origin, (double)prm->dx);
    s->g2p2g_below = 0;
  }
  s->inv_dx = 1.0f / prm->dx;
  s->bnd = prm->boundary; /* the pointers become device pointers in cuda_setup() */
  for (int k = 0; k < prm->boundary.n_colliders; ++k) s->push |= prm->boundary.colliders[k].type != BOUNDARY_STICKY;
  for (int m = 0; m < prm->n_materials; ++m) {
    s->asflip |= prm->materials[m].transfer == TRANSFER_ASFLIP;
    s->g2p_mat |= prm->materials[m].transfer == TRANSFER_ASFLIP ||
                  prm->materials[m].model == MODEL_WEAKLY_COMPRESSIBLE;
  }
  s->det = prm->deterministic != 0;
  s->bnd.colliders = NULL;
  s->bnd.keys = NULL;
  s->bnd.levelsets = NULL;
  s->bnd.ls_table = NULL;
  s->bnd.ls_bricks = NULL;
  s->bnd.band = 0.5f * prm->dx; /* colliders: nodes within half a cell (boundary.h) */
  int max_block = 0;
  for (int a = 0; a < 3; ++a) {
    s->origin[a] = (float)(prm->domain_min[a] - GRID_PAD * (double)prm->dx);
    /* Wall nodes: the three node layers nearest to each face (within 2.5 dx of it). */
    s->bnd.lo[a] = (float)(prm->domain_min[a] + 2.5 * prm->dx);
    s->bnd.hi[a] = (float)(prm->domain_max[a] - 2.5 * prm->dx);
    s->dmin[a] = (float)prm->domain_min[a];
    s->dmax[a] = (float)prm->domain_max[a];
    /* Highest block a physical block can have: particles stay in the domain, their stencils
     * reach 2 nodes beyond the base node and the neighbourhood one block beyond that. */
    const int top_node = (int)ceil((prm->domain_max[a] - prm->domain_min[a]) / prm->dx) + GRID_PAD + 3;
    const int top_block = ((top_node + 1) >> 2) + 2;
    if (top_block > max_block) max_block = top_block;
  }
  int bits = 1;
  while ((1 << bits) <= max_block + 1 && bits < BLOCK_CODE_BITS) ++bits;
  s->code_bits = 3 * bits; /* radix sorts look at these bits only (6 more for the cell) */
  *out = s;
  return DR_OK;
}

/* One GPU through the island's loop and phases (an island of one member). */
static island solo(void *state) {
  island one;
  memset(&one, 0, sizeof one);
  one.nm = 1;
  one.m[0] = (cuda_state *)state;
  return one;
}

static int advance_frame(void *state, const frame_plan *plan, frame_report *rep) {
  island one = solo(state);
  return island_advance_frame(&one, plan, rep);
}

static int g2p(void *state, float dt) {
  island one = solo(state);
  return island_g2p(&one, dt);
}

/* backend.h's g2p_ahead, g2p_collect and gate_open (ranks, one GPU each): an island of one's
 * (island_g2p_ahead): g2p's G2P and record, an event after them, and the gate armed, so that the
 * next p2g or cuda_p2g_part begins the step with k_begin_gated, which the device holds until gate_open.
 * Not where the next P2G is primed (G2P2G frames: a frame loop of one rank), which p2g would take
 * instead. */
static int g2p_ahead(void *state, float dt, int *armed) {
  island one = solo(state);
  return island_g2p_ahead(&one, dt, armed);
}

static int g2p_collect(void *state) {
  island one = solo(state);
  return island_g2p_collect(&one);
}

/* Lets the step behind the gate run (go) or voids it: the host's store reaches the spinning
 * k_begin_gated through mapped memory. A voided step's kernels return at once; the host waits for
 * them (both streams) so that a rebuild-mapping after it finds the device idle, and forgets what
 * its queueing noted (the next begin starts afresh). */
int cuda_gate_open_one(cuda_state *s, int go) {
  if (!s->gate_armed) return DR_OK;
  gate_write(s, go);
  const int queued = s->gate_queued;
  s->gate_queued = 0;
  if (go || !queued) return DR_OK;
  CU(cudaStreamSynchronize(s->stream));
  if (s->xstream) CU(cudaStreamSynchronize(s->xstream));
  s->head_on = s->interior_on = s->part_skip = s->tail_on = s->tail_armed = s->g2p_rest = 0;
  return DR_OK;
}

static int gate_open(void *state, int go) {
  cuda_state *s = (cuda_state *)state;
  if (!s->gate_armed) return dr_fail(DR_EINTERNAL, "cuda backend: gate_open without g2p_ahead");
  return cuda_gate_open_one(s, go);
}

/* A one-GPU backend's entry: its device made current, then the call. One process may hold
 * backends on several devices (a rank's and a reference's, test_ranks; an island of 2 beside
 * one of 1), and a stream, an event or an allocation made lazily on another device's context
 * fails (cudaEventRecord: invalid resource handle) or silently lands on the wrong GPU. */
template <auto F> struct on_device;
template <typename... A, int (*F)(void *, A...)> struct on_device<F> {
  static int call(void *state, A... a) {
    const int dev = ((cuda_state *)state)->device;
    int cur = -1;
    CU(cudaGetDevice(&cur)); /* a read of the thread's state: cudaSetDevice itself costs more */
    if (cur != dev) CU(cudaSetDevice(dev));
    cuda_state *s = (cuda_state *)state;
    if (!s->marks || !s->stream) return F(state, a...);
    int tag = -1; /* cuda_p2g_part's and grid_update_part's part */
    if constexpr (std::is_same_v<std::tuple<A...>, std::tuple<float, int>>) tag = std::get<1>(std::make_tuple(a...));
    const int step_end = (const void *)F == (const void *)&g2p;
    DR_TRY(timeline_marks_record(s, __PRETTY_FUNCTION__, tag, 0, 0));
    const int rc = F(state, a...);
    if (rc == DR_OK) DR_TRY(timeline_marks_record(s, __PRETTY_FUNCTION__, tag, 1, step_end));
    return rc;
  }
};
#define ON_DEVICE(f) on_device<f>::call

/* The devices of the backend (dev, nm); fails where n particles are more than they hold. */
static int backend_devices(const sim_params *prm, size_t n, int *dev, int *nm) {
  DR_TRY(island_devices(prm, dev, nm));
  if (n / (size_t)*nm > (size_t)INT32_MAX / 2)
    return dr_fail(DR_EINPUT, "%zu particles on %d GPU%s: the cuda backend holds at most %d per GPU", n, *nm,
                   *nm > 1 ? "s" : "", INT32_MAX / 2);
  return DR_OK;
}

static int create_one(const sim_params *prm, int device, const particles *p, const particle_source *src, backend *out);

extern "C" int backend_cuda_create(const sim_params *prm, particles *p, backend *out) {
  memset(out, 0, sizeof *out);
  int dev[MAX_GPUS], nm = 0;
  DR_TRY(backend_devices(prm, p->n, dev, &nm));
  if (nm > 1) return island_create(prm, dev, nm, p, out);
  DR_TRY(create_one(prm, dev[0], p, NULL, out));
  particles_free(p);
  return DR_OK;
}

extern "C" int backend_cuda_create_from(const sim_params *prm, const particle_source *src, backend *out) {
  memset(out, 0, sizeof *out);
  int dev[MAX_GPUS], nm = 0;
  DR_TRY(backend_devices(prm, src->n, dev, &nm));
  if (nm == 1) return create_one(prm, dev[0], NULL, src, out);
  /* an island splits its particles along an axis of their bounding box, evenly by count: it reads
   * a source that can be read again once for the split, then once for each member; another it
   * gathers on the host first */
  if (src->rewind) return island_create_from(prm, dev, nm, src, out);
  particles p;
  memset(&p, 0, sizeof p);
  int rc = backend_source_drain(src, &p, MEM_CREATE_CHUNK);
  if (rc == DR_OK) rc = island_create(prm, dev, nm, &p, out);
  particles_free(&p);
  return rc;
}

/* One device's backend with p's particles, or src's chunk by chunk where src is not NULL. */
static int create_one(const sim_params *prm, int device, const particles *p, const particle_source *src, backend *out) {
  cuda_state *s = NULL;
  DR_TRY(cuda_member_new(prm, device, &s));
  island_log_zone(s);
  const size_t n = src ? src->n : p->n;
  int rc = cuda_setup(s, p, src);
  if (rc) {
    cuda_destroy(s);
    return rc;
  }
  /* the next step queued before the step vote, behind a gate on the device (--steps-ahead off:
   * after the vote; docs/performance.md) */
  s->ahead_on = island_ahead_default(prm, 1);
  *out = backend{
      .name = "cuda",
      .n_devices = 1,
      .state = s,
      .set_time = ON_DEVICE(set_time),
      .rebuild = ON_DEVICE(rebuild),
      .p2g = ON_DEVICE(cuda_p2g),
      /* the boundary's P2G first, its sums sent while the interior scatters; the interior's G2P
       * while they are in flight (docs/performance.md) */
      .p2g_part = ON_DEVICE(cuda_p2g_part),
      .grid_update = ON_DEVICE(grid_update),
      .g2p = ON_DEVICE(g2p),
      .g2p_ahead = ON_DEVICE(g2p_ahead),
      .g2p_collect = ON_DEVICE(g2p_collect),
      .gate_open = ON_DEVICE(gate_open),
      .max_speed = ON_DEVICE(max_speed),
      .finish = ON_DEVICE(finish),
      .advance_frame = ON_DEVICE(advance_frame),
      .download = ON_DEVICE(cuda_download),
      .snapshot = ON_DEVICE(cuda_snapshot),
      .fetch = cuda_fetch, /* the writer's thread: sets its device itself */
      .fetch_rows = cuda_fetch_rows, /* held: the writer's thread; sets its device itself */
      .hold_rows = ON_DEVICE(cuda_hold_rows),
      /* several ranks: the shared blocks' sums travel through pinned host buffers (sim.c) */
      .blocks = ON_DEVICE(cuda_blocks),
      .block_sums = xdev_sums_floats(s), /* = int_floats(s) */
      .sums_int64 = s->det,
      /* the node exchange (mpi/exchange.h): the masks in two halves, the interior's P2G queued
       * between them */
      .node_masks = ON_DEVICE(cuda_node_masks),
      .node_masks_async = ON_DEVICE(cuda_node_masks_async),
      .node_masks_wait = ON_DEVICE(cuda_node_masks_wait),
      .pack_nodes = ON_DEVICE(cuda_pack_nodes),
      .unpack_add_nodes = ON_DEVICE(cuda_unpack_add_nodes),
      .mark_shared = ON_DEVICE(cuda_mark_shared),
      .grid_update_part = ON_DEVICE(grid_update_part),
      .g2p_interior = ON_DEVICE(cuda_g2p_interior),
      .alloc_sums = cuda_alloc_sums,
      .free_sums = cuda_free_sums,
      .wants_rebuild = wants_rebuild,
      .set_particles = ON_DEVICE(cuda_set_particles),
      .add_particles = ON_DEVICE(cuda_add_particles),
      .emigrate = ON_DEVICE(cuda_emigrate),
      /* the same with the particles as records packed and unpacked on the device */
      .emigrate_records = ON_DEVICE(cuda_emigrate_records),
      .read_records = ON_DEVICE(cuda_read_records),
      .add_records = ON_DEVICE(cuda_add_records),
      .reserve_records = ON_DEVICE(cuda_reserve_records),
      .particle_blocks = ON_DEVICE(cuda_particle_blocks),
      .projected = projected,
      .set_projected = ON_DEVICE(cuda_set_projected),
      .set_last_dt = ON_DEVICE(cuda_set_last_dt),
      .stats = ON_DEVICE(cuda_stats),
      .count = count,
      .destroy = cuda_destroy,
  };
  log_info("cuda backend: device %d (%s), %zu particles in %zu packets of up to %d, %zu grid blocks, %.1f MiB of "
           "device memory%s",
           s->device, s->device_name, n, s->n_packets, LANES, s->n_blocks, cuda_held_bytes(s) / 1048576.0,
           s->det ? " (deterministic: int64 P2G sums)" : "");
  return DR_OK;
}
