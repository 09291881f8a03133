// backend_cuda.cu - the CUDA backend: the single-GPU pipeline of the paper (sections 3-4;
// DESIGN.md, "One time step on one device") behind backend.h, on the shared header-only physics.
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
// launches the kernels directly, see the island below): dt (fixed or adaptive) is computed on the device
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
// (g2p_nodes, gpu/p2g.cuh; 1-2.5% faster on one H100 than reading each node from the grid; ASFLIP
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
// phase-by-phase p2g() uses them when its dt is the one they took (primed_dt), and the first
// unfused step after fused frames skips its P2G (island_advance_frame). P2G runs again over
// projected particles only where the sums cannot serve: new particles (add_particles), or
// another dt (not expected: fixed steps keep one dt per run). A checkpoint written while primed
// says so (backend.projected, ckpt_state.projected), and the run resumed from it takes its first
// P2G without the mapping (set_projected: step_ctl.projected, which k_p2g reads and k_grid
// clears). k_g2p2g's P2G also adds each cell group's 27 nodes into a box in the warp's shared
// memory and issues one global atomic a node the packet reached (the box sums, gpu/p2g.cuh,
// G2P2G_NODESUM): where P2G is latency-bound, as in these small scenes, each warp's chain of
// global atomics is the step's critical path (Sand Blocks l = 12 12% faster on one H200); k_p2g,
// throughput-bound, keeps its atomics (P2G_NODESUM = 0; the box costs it 17% at l = 46).
//
// Ranks (sim.c drives the phases step by step, one vote a step): with fixed steps the next step's
// P2G is queued with this step's G2P, before the vote, behind a gate (g2p_ahead): its first kernel,
// k_begin_gated, spins until the host writes the vote's outcome into mapped memory (gate_open),
// then begins the step or voids it (a rebuild-mapping comes first; its kernels return at once), so
// that the device starts the step as the ranks agree instead of after the host's launches. A rank's
// island gates every member and opens them alike (island_g2p_ahead). Not where the node's ranks
// share GPUs (DRIFT_STEP_AHEAD): a spinning kernel holds its GPU against the other process's time
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
#include <cuda_runtime.h>

#include <cub/cub.cuh>

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <tuple>
#include <type_traits>

extern "C" {
#include "backend.h"
#include "error.h"
#include "hostmem.h"
#include "log.h"
#include "scene.h"
}
#include "backend_cuda.h"
#include "p2g.cuh"
#include "physics/boundary.h"
#include "physics/bspline.h"
#include "physics/constitutive.h"
#include "physics/fixed.h"
#include "physics/sparse.h"
#include "physics/transfer.h"

/* ---- layout ------------------------------------------------------------------------------- */

/* The packet layout (A_*, LANES, PK_FLOATS), the grid block's (BLOCK_FLOATS, gidx), the step's control
 * record and the P2G of one warp's packet: gpu/p2g.cuh. */
#define WARPS 4 /* warps per CUDA block in the particle kernels (the paper's choice; docs/performance.md) */
enum { SKEW_PRE = 1, SKEW_POST = 2 }; /* DRIFT_ISLAND_SKEW (launch_skew) */
#define THREADS (WARPS * LANES)
#define SIMPLE_THREADS 256            /* one-thread-per-item kernels of the rebuild */
#define GRID_BLOCKS_PER_CTA 4 /* grid update: grid blocks of 64 nodes per CUDA block (docs/performance.md) */
/* Steps queued ahead of the host's reading of a step's flags: with one the device never waits for
 * the host (a wait would cost a few microseconds between graph launches). Where the queued step
 * cannot be voided (see the top of this file) it eats a cell of the free zone's slack. */
#define STEP_LAG 1

/* The particle kernels' launch bounds (the compiler chooses the registers). */
#define PARTICLE_BOUNDS __launch_bounds__(THREADS)

/* ---- errors ------------------------------------------------------------------------------- */

static int cuda_fail(cudaError_t e, const char *call, const char *file, int line) {
  cudaGetLastError(); /* clear a non-sticky error so that later calls start clean */
  return dr_fail_at(DR_ECUDA, file, line, call, "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Every CUDA runtime call: on failure records "call failed (file:line): error" and returns. */
#define CU(call)                                                                                   \
  do {                                                                                             \
    cudaError_t cu_e_ = (call);                                                                    \
    if (cu_e_ != cudaSuccess) return cuda_fail(cu_e_, #call, __FILE__, __LINE__);                  \
  } while (0)

/* After every kernel launch (launch errors; faults inside a kernel surface at the next
 * synchronising call, which CU checks). */
#define LAUNCHED(kernel)                                                                           \
  do {                                                                                             \
    cudaError_t cu_e_ = cudaGetLastError();                                                        \
    if (cu_e_ != cudaSuccess) return cuda_fail(cu_e_, "kernel " kernel, __FILE__, __LINE__);       \
  } while (0)

static unsigned blocks_for(size_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

/* ---- device vectors ----------------------------------------------------------------------- */

/* A device buffer that grows to 4x its capacity when a request needs more than half of it, so
 * that the steady state allocates nothing (DESIGN.md). */
typedef struct dvec {
  void *ptr;
  size_t bytes;
  cudaMemPool_t pool;       /* an island member's stream-ordered pool (dvec_pools), else NULL: cudaMalloc */
  cudaStream_t st;          /* ... and the stream its growths are ordered on */
  int pooled;               /* ptr came from pool (it travels with ptr through dvec_swap) */
} dvec;

static int dvec_fail(size_t need, const char *what, const char *file, int line) {
  cudaGetLastError();
  size_t freeb = 0, total = 0;
  cudaMemGetInfo(&freeb, &total);
  cudaGetLastError();
  return dr_fail_at(DR_ENOMEM, file, line, "cudaMalloc",
                    "out of device memory: %s needs %.1f MiB more; the device has %.1f MiB free of %.1f MiB "
                    "(fewer particles per GPU, a coarser dx, or more GPUs)",
                    what, need / 1048576.0, freeb / 1048576.0, total / 1048576.0);
}

/* Device allocations made (every member's; DRIFT_GPU_STAMPS tells the rebuild-mappings that made
 * some). The first allocation of a vector sized by the grid's blocks (DVEC_GRID) is DVEC_HEADROOM
 * times what it needs then (half full like the others: it grows with the first rebuild-mapping
 * that needs more; the grid of falling material does, and cudaFree waits for the device). One
 * sized by the particles' packets (packets, ids, headers, sort keys, CUB's storage; DVEC_PK) is
 * DVEC_PACKET_HEADROOM times its need: packets fill less as material spreads, so a first
 * allocation at 2x grows at one of the first rebuild-mappings of nearly every scene that moves;
 * on an island the growth maps the new memory for every member and each member grows at its own
 * rebuild-mapping, which the others wait for (docs/performance.md). */
static unsigned long g_dvec_allocs;
#define DVEC_HEADROOM 2
#define DVEC_PACKET_HEADROOM 4
static int g_dvec_log;      /* DRIFT_GPU_STAMPS=1: each growth logged, with the host's time in cudaFree and cudaMalloc */

/* The host's monotonic clock (ns): the growths' log here, the island's crew below. */
static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}
static double now_ms(void) { return now_ns() * 1e-6; }

/* The growth's release of the old buffer: back to its pool in stream order, or cudaFree (which
 * waits for the device). */
static cudaError_t dvec_release(dvec *v) {
  if (!v->ptr) return cudaSuccess;
  if (v->pooled) return cudaFreeAsync(v->ptr, v->st); /* back to the pool once the stream gets there */
  return cudaFree(v->ptr);
}

static void dvec_logged(const char *what, size_t from, size_t to, double free_ms, double malloc_ms, const char *file,
                        int line) {
  fprintf(stderr, "gpu alloc: %s: %.2f -> %.2f MiB: free %.3f ms, malloc %.3f ms (%s:%d)\n", what, from / 1048576.0,
          to / 1048576.0, free_ms, malloc_ms, file, line);
}

/* A new buffer of cap bytes for v: from v's pool in its stream's order (where the pool has not
 * the room, the pool's unused memory is returned first and the allocation tried once more), else
 * cudaMalloc. */
static cudaError_t dvec_alloc(dvec *v, void **p, size_t cap) {
  if (!v->pool) return cudaMalloc(p, cap);
  cudaError_t e = cudaMallocFromPoolAsync(p, cap, v->pool, v->st);
  if (e != cudaErrorMemoryAllocation) return e;
  (void)cudaGetLastError();
  if ((e = cudaStreamSynchronize(v->st)) != cudaSuccess) return e;
  if ((e = cudaMemPoolTrimTo(v->pool, 0)) != cudaSuccess) return e;
  return cudaMallocFromPoolAsync(p, cap, v->pool, v->st);
}

/* Room for need bytes: none if exact, else growing 4x when half full, the first time first x need. */
static int dvec_reserve_at(dvec *v, size_t need, int exact, size_t first, const char *what, const char *file,
                           int line) {
  if (exact ? need <= v->bytes : 2 * need <= v->bytes) return DR_OK;
  /* a first allocation above 2x its need only where it takes at most an eighth of the device's
   * free memory: a scene near the device's size starts at 2x */
  if (!exact && !v->bytes && first > 2) {
    size_t freeb = 0, total = 0;
    if (cudaMemGetInfo(&freeb, &total) != cudaSuccess || first * need > freeb / 8) first = 2;
    (void)cudaGetLastError();
  }
  size_t cap = exact ? need : v->bytes ? (4 * v->bytes > 2 * need ? 4 * v->bytes : 2 * need) : first * need;
  if (cap < 256) cap = 256;
  __atomic_add_fetch(&g_dvec_allocs, 1, __ATOMIC_RELAXED);
  const size_t from = v->bytes;
  const double t0 = g_dvec_log ? now_ms() : 0.0;
  CU(dvec_release(v)); /* contents are never kept across a growth */
  v->ptr = NULL;
  v->bytes = 0;
  const double t1 = g_dvec_log ? now_ms() : 0.0;
  if (dvec_alloc(v, &v->ptr, cap) != cudaSuccess) {
    v->ptr = NULL;
    return dvec_fail(cap, what, file, line);
  }
  v->bytes = cap;
  v->pooled = v->pool != NULL;
  if (g_dvec_log) dvec_logged(what, from, cap, t1 - t0, now_ms() - t1, file, line);
  return DR_OK;
}
#define DVEC(v, need, what) DR_TRY(dvec_reserve_at(&(v), (need), 0, 2, (what), __FILE__, __LINE__))
#define DVEC_EXACT(v, need, what) DR_TRY(dvec_reserve_at(&(v), (need), 1, 1, (what), __FILE__, __LINE__))
#define DVEC_GRID(v, need, what) DR_TRY(dvec_reserve_at(&(v), (need), 0, DVEC_HEADROOM, (what), __FILE__, __LINE__))
#define DVEC_PK(v, need, what)                                                                                   \
  DR_TRY(dvec_reserve_at(&(v), (need), 0, DVEC_PACKET_HEADROOM, (what), __FILE__, __LINE__))

/* The same growth rule, keeping the first `keep` bytes (copied on the stream into the new
 * buffer; the old one is freed after the copy). For appending particles (add_particles). */
static int dvec_grow_keep_at(dvec *v, size_t need, size_t keep, cudaStream_t st, const char *what, const char *file,
                             int line) {
  if (2 * need <= v->bytes) return DR_OK;
  size_t cap = 4 * v->bytes > 2 * need ? 4 * v->bytes : 2 * need;
  if (cap < 256) cap = 256;
  __atomic_add_fetch(&g_dvec_allocs, 1, __ATOMIC_RELAXED);
  void *q = NULL;
  const double t0 = g_dvec_log ? now_ms() : 0.0;
  if (dvec_alloc(v, &q, cap) != cudaSuccess) return dvec_fail(cap, what, file, line);
  const double t1 = g_dvec_log ? now_ms() : 0.0;
  if (keep > 0) {
    cudaError_t e = cudaMemcpyAsync(q, v->ptr, keep, cudaMemcpyDeviceToDevice, st); /* a pooled v's stream is st */
    if (e == cudaSuccess && !v->pool) e = cudaStreamSynchronize(st); /* a pool's free waits in stream order */
    if (e != cudaSuccess) {
      cudaFree(q);
      return cuda_fail(e, "cudaMemcpyAsync(keep on growth)", file, line);
    }
  }
  const size_t from = v->bytes;
  CU(dvec_release(v));
  v->ptr = q;
  v->bytes = cap;
  v->pooled = v->pool != NULL;
  if (g_dvec_log) dvec_logged(what, from, cap, now_ms() - t1, t1 - t0, file, line); /* free: with the copy */
  return DR_OK;
}
#define DVEC_KEEP(v, need, keep, st, what) DR_TRY(dvec_grow_keep_at(&(v), (need), (keep), (st), (what), __FILE__, __LINE__))

static void dvec_free(dvec *v) {
  if (v->ptr) cudaFree(v->ptr); /* also a pool's buffer (cudaFree waits for the device) */
  v->ptr = NULL;
  v->bytes = 0;
  v->pooled = 0;
}

template <typename T> static T *dp(const dvec &v) { return (T *)v.ptr; }

/* ---- the island: what a member's kernels see of its peers --------------------------------- */

/* Several GPUs of one rank run as one island (the paper, section 5; DESIGN.md, "The island"):
 * each member holds a static share of the particles and its own sparse grid; a grid block that
 * several members touch has a copy on each. Every step:
 *
 *   k_begin; P2G into P[par] (own copy); barrier; k_grid: for each own touched block, own P[par]
 *   plus the peers' P[par] copies of the same block (read by P2P, skipped where the peer did
 *   not touch it), the grid update and boundary conditions, written to vel (own); clears own
 *   P[1 - par] (the next step's target); G2P from vel.
 *
 * Why there is no race, with one barrier per step (n, parity par = n mod 2):
 *  - Peers read my P[par] and touched[par] only in their k_grid of step n, after barrier n,
 *    which I pass only after my P2G of step n (stream order), so they read complete sums.
 *  - I write P[par] again only in step n + 1 (k_grid clears it as "next") and step n + 2 (P2G).
 *    Both come after barrier n + 1, which no member passes before every member has arrived,
 *    and a member arrives only after its k_grid of step n (stream order). So no peer is still
 *    reading P[par] when I clear or refill it. The same holds for P[1 - par], shifted by a step.
 *  - My k_grid writes velocities to vel, never to P[par], so it does not disturb peers reading
 *    P[par] in their own k_grid of the same step; vel is read only by my own G2P.
 *  - G2P2G: the P2G of step n + 1 into P[1 - par] runs at the end of my step n, after my k_grid
 *    of step n cleared that buffer and after barrier n, so every peer has finished its k_grid of
 *    step n - 1, the last reader of P[1 - par] before; peers read it next after barrier n + 1,
 *    which I reach only after that P2G. The two points above hold as they are.
 *  - Rebuild-mapping: every member's queued steps have finished before any member rebuilds, so
 *    nothing reads the old buffers while they are swapped out. Each member records rebuilt_ev
 *    after its rebuild, and a member's k_tag waits on its GPU for every peer's event
 *    (job_rebuild, tag_member), so the hash tables k_tag reads are complete; the primed sums
 *    that a member's rebuild moves to its new blocks (keep_primed) are read by the peers only in
 *    their k_grid after the next barrier, which the member reaches after its rebuild in stream
 *    order (p2p_atomics: a member's k_push comes after its k_tag, so after the owners' clears of
 *    their rebuilt buffers). The host captures the next graphs meanwhile: the peers' buffers are
 *    allocated when island_each(job_rebuild) returns. The first
 *    unfused step after G2P2G frames is launched without its P2G outside the graph, with the
 *    same barrier and k_grid, so the order above is unchanged.
 * Adaptive steps need the island's largest speed before P2G: k_begin publishes the member's
 * last vmax in vmax_pub[step_seq & 1], passes a barrier and takes the maximum over the peers'
 * slots; a slot is rewritten two steps later, after another barrier that every reader of it has
 * passed. Fixed steps need no such barrier.
 * The barrier: each member counts its barriers (bar_seq, the same sequence on every member),
 * stores the count in its own device memory with a system-scope fence, and spins until every
 * peer's count (read by P2P) has reached it. One thread per GPU publishes; the polling is spread
 * over a warp, lane q reading peer q (island_barrier_warp). Where nothing runs between a step's
 * k_begin and its barrier, one kernel does both (k_begin_barrier). The host is not involved.
 * A barrier that waits longer than DRIFT_BARRIER_TIMEOUT seconds (default 120; a step takes
 * milliseconds) gives up, records where it stood in the step record, and lets the step finish;
 * the host reads the record with the step's flags and fails the run naming the members and
 * counts, so a member falling out of step (a bug) ends the job with an explanation, not a hang.
 *
 * The paper's two alternatives, as switches for drift bench (its section "Ablation study on
 * multiple GPUs"; scene keys parallel.island_barrier and parallel.island_reduce):
 *
 * island_barrier "events": at every barrier the host records an event on each member's stream
 * and makes each member's stream wait for every other member's event (cudaStreamWaitEvent,
 * m (m - 1) waits; the waits snapshot the events when issued, so one event per member serves
 * every barrier). Both barriers of a step are host-issued: the adaptive step's vmax exchange
 * becomes k_publish (the member's last vmax into vmax_pub[step_seq & 1]), a barrier, and k_begin
 * reading the peers' slots without spinning (iv.spin = 0); the slot argument above holds with the
 * host's barriers in place of the spin locks. A member's captured graph holds no dependency on
 * another member's stream (only external event nodes, or one multi-device graph, could carry
 * one), so in this mode the step's kernels are launched directly, stage by stage over the
 * members (island_step_events). We chose that over one multi-device graph: the paper measured
 * the host's latency of cudaStreamWaitEvent per barrier, and a graph would turn the waits into
 * edges resolved by the driver, without those host calls, i.e. measure something else. The
 * price is a host launch per kernel instead of one graph launch per step, which the
 * comparison includes (docs/performance.md).
 *
 * island_reduce "p2p_atomics": one P2G buffer per parity and no vel: every shared block has one
 * owner, the lowest member index that holds it (k_owner, at tagging: tags are symmetric, so all
 * holders agree). Step n, parity par:
 *
 *   k_begin; P2G into P[par] (own copy); k_push: for each block this member touched and another
 *   member o owns, its P[par] values added into o's P[par] copy by system-scope atomics through
 *   P2P pointers, and o's touched[par] set; barrier A; k_grid: the blocks this member owns or
 *   holds alone, updated in place in P[par] as on one GPU (blocks owned elsewhere skipped; the
 *   clear of P[1 - par] as before); barrier B; k_pull: for each block this member touched and
 *   another member owns, the owner's updated block (velocities, and grid0 with ASFLIP) copied
 *   by P2P into its own P[par]; G2P from P[par]. Every member's G2P reads the owner's numbers.
 *
 * Why two barriers per step, and no race (the adaptive vmax barrier comes on top, as above):
 *  - A: the owner reads a block's sum in k_grid(n) only after every pusher's k_push(n), which
 *    precedes the pusher's arrival at A(n) in stream order: complete sums.
 *  - B: a non-owner reads the owner's block in k_pull(n) after B(n), which the owner reaches
 *    after its k_grid(n): no half-updated block. Without B a puller could read momenta not yet
 *    turned into velocities; dropping B would need the owner to keep its sums and write the
 *    velocities elsewhere, which is the second buffer this variant does without.
 *  - Reuse of the owner's P[par]: the owner clears it next in k_grid(n + 1), after A(n + 1),
 *    which a puller reaches only after its k_pull(n); pushers write it next in step n + 2 after
 *    B(n + 1), which the owner reaches after k_grid(n + 1), after its own G2P(n). Pushes of step
 *    n + 1 go to P[1 - par], which the owner cleared (with its touched flags) in k_grid(n),
 *    before B(n), and which pushers reach after B(n). So B also orders every reuse of a buffer
 *    after the last peer access of it; the grid-buffer parity removes the need for a third.
 *  - A non-owner's own copy of a block owned elsewhere is read and written only by itself
 *    (P2G, k_push reading it, k_pull overwriting it, G2P, the clear), in stream order.
 *  - Pushes may overlap the owner's own P2G(n) into the same nodes (no barrier between them,
 *    as in the paper's scheme): both are atomic additions at the owner's memory. On one device
 *    (DRIFT_DEVICES=0,0) they are that device's atomics; between two devices, island_peers
 *    demands native P2P atomics (cudaDevP2PAttrNativeAtomicSupported, NVLink), which the
 *    owner's memory performs like its own. The sums' order varies (float rounding), as with
 *    double buffering; deterministic mode pushes its int64 sums, so the result stays exact.
 *  - A host-side clear of a primed P2G buffer (G2P2G frames, clear_grid) is not ordered before
 *    the peers' next pushes by any barrier; in this mode the host waits for it (island_sync).
 *  Pushes are scalar system-scope atomics (4 per node, 3 more with ASFLIP, the int64 sums in
 *  deterministic mode), zeros skipped, once per touched block: the block-level form of the
 *  paper's scheme, whose P2G wrote each contribution to the owner directly. */
#define MAX_GPUS 8
typedef struct island_view {
  int np;                                   /* peers (members - 1); 0 for one GPU */
  unsigned long long timeout_ns;            /* a barrier gives up after this long (see above) */
  int spin;                                 /* 1: barriers are spin locks (k_begin spins for vmax); 0: events */
  const int8_t *own;                        /* p2p_atomics: [n_blocks] the owner's peer slot, -1 for this member; else NULL */
  unsigned *bar;                            /* this member's barrier count */
  const unsigned *peer_bar[MAX_GPUS - 1];
  const step_ctl *peer_ctl[MAX_GPUS - 1];
  const float *peer_grid[MAX_GPUS - 1];     /* the peers' P[par] of the step being launched */
  const float *peer_grid0[MAX_GPUS - 1];    /* ... and their ASFLIP buffers */
  const uint8_t *peer_touched[MAX_GPUS - 1];
  const long long *peer_ig[MAX_GPUS - 1];   /* deterministic mode: the peers' fixed-point sums of par */
} island_view;

/* p2p_atomics: the peers' buffers of parity par that k_push adds into and k_pull copies from. */
typedef struct peer_blocks {
  float *grid[MAX_GPUS - 1];
  float *grid0[MAX_GPUS - 1];               /* ASFLIP, else NULL */
  uint8_t *touched[MAX_GPUS - 1];
  long long *ig[MAX_GPUS - 1];              /* deterministic mode, else NULL */
} peer_blocks;

__device__ static inline unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* DRIFT_GPU_STAMPS: where a step's kernels stamp the device's clock into step_ctl.stamp (the first
 * thread of the first CTA, as the kernel begins; k_barrier also as its own count is published
 * and as it leaves; k_begin_gated, ranks, as it reaches the gate: gate > begin is the device's wait
 * for the step vote). In the order a step runs them; island_take, and island_g2p_collect where
 * ranks drive the phases, sum the time from each stamp to the next per member (stamps_take). */
enum stamp_at { ST_GATE, ST_BEGIN, ST_P2G, ST_BAR_IN, ST_BAR_SET, ST_BAR_OUT, ST_GRID, ST_G2P, ST_COUNT };
static_assert(ST_COUNT <= (int)(sizeof(((step_ctl *)0)->stamp) / sizeof(unsigned long long)), "step_ctl.stamp");
__device__ __forceinline__ void stamp(step_ctl *c, int at) {
  if (c->stamps && blockIdx.x == 0 && threadIdx.x == 0) c->stamp[at] = global_ns();
}

/* This member's arrival: its count, after everything it wrote before (visible to the peers first). */
__device__ __forceinline__ unsigned island_publish(step_ctl *c, const island_view &iv) {
  const unsigned seq = ++c->bar_seq;
  __threadfence_system();
  atomicExch_system(iv.bar, seq);
  return seq;
}

/* Waits until peer q has published count seq, or gives up after iv.timeout_ns from t0 and
 * records the first barrier given up on (bar_stuck, with the peer and the count it saw). */
__device__ __forceinline__ void spin_on_peer(step_ctl *c, const island_view &iv, int q, unsigned seq,
                                             unsigned long long t0) {
  for (unsigned spins = 0;; ++spins) {
    const unsigned seen = *(volatile const unsigned *)iv.peer_bar[q];
    if ((int)(seen - seq) >= 0) return;
    __nanosleep(64);
    if ((spins & 1023u) == 1023u && global_ns() - t0 > iv.timeout_ns) {
      if (atomicCAS(&c->bar_stuck, 0u, seq) == 0u) c->bar_peer = q, c->bar_peer_seen = seen;
      return;
    }
  }
}

/* The barrier, by one warp: lane 0 publishes the count, lane q < np spins on peer q, so the
 * peers' counts are read side by side, not one NVLink round trip after another. */
__device__ static void island_barrier_warp(step_ctl *c, const island_view &iv) {
  const int lane = threadIdx.x;
  unsigned seq = lane == 0 ? island_publish(c, iv) : 0u;
  seq = __shfl_sync(0xffffffffu, seq, 0);
  stamp(c, ST_BAR_SET);
  const unsigned long long t0 = global_ns();
  if (lane < iv.np) spin_on_peer(c, iv, lane, seq, t0);
  __syncwarp();
  __threadfence_system();
}

/* The barrier as a kernel between P2G and the grid update, one warp (launch_barrier). */
__global__ static void k_barrier(step_ctl *c, island_view iv) {
  stamp(c, ST_BAR_IN);
  island_barrier_warp(c, iv);
  stamp(c, ST_BAR_OUT);
}

/* ---- state -------------------------------------------------------------------------------- */

typedef struct xlist {
  const int32_t *host; /* exchange_setup's list */
  size_t n, off;       /* its length, and where it starts in xidx */
  uint64_t mapping;    /* s->rebuilds when it was registered: its indices number that mapping's blocks */
} xlist;

typedef struct col_box {
  float lo[3], hi[3];
} col_box;

/* The collider cache: at most COLCACHE_MAX mesh colliders of a scene keep their samples. */
#define COLCACHE_MAX 4
#define CC_FILL_CTAS 1024 /* k_cc_fill's grid (grid-stride): enough for a refill, cheap without one */
typedef struct cc_cols {
  int k[COLCACHE_MAX];
} cc_cols;

typedef struct cuda_state {
  sim_params prm;
  material_params *mats; /* host copy, borrowed by prm.materials */
  int device;
  char device_name[256];
  cudaStream_t stream;
  cudaMemPool_t pool[2];        /* an island member's stream-ordered pools (dvec_pools): private, peers' */
  /* xstream, the exchange's stream (high priority), one GPU's alone (nm = 1; an island member runs
   * all on its step's stream): the boundary's P2G, the node masks, the packs and unpacks and the
   * copies of the messages, the shared blocks' update and the boundary's G2P go there, beside the
   * interior's work on the step's stream */
  cudaStream_t xstream;
  int head_on;                  /* this step: p2g_part queued the boundary's P2G there; xhead_ev follows it */
  int interior_on;              /* ... and node_masks_async the interior's P2G; p2g_part(P2G_INTERIOR) only joins */
  int tail_armed;               /* ... this step: g2p_interior recorded xint_ev; the unpacks leave the join to
                                 * grid_update_part(GRID_SHARED), which may queue them there */
  int tail_on;                  /* ... this step: grid_update_part queued the shared update there; g2p follows */
  cudaEvent_t xint_ev, xtail_ev; /* ... after the interior's grid update (step's stream); after the boundary's G2P */
  cudaEvent_t xhead_ev, xbeg_ev; /* after the boundary's P2G (xstream); the step's start (step's stream) */
  cudaEvent_t xp2g_ev;          /* ... after the boundary's P2G, which the masks wait for */
  struct pslot *pslot;          /* node_masks_async's buffers, one per rank link */
  int n_pslot;
  float origin[3], inv_dx;
  boundary_params bnd;          /* faces (wall nodes below lo / above hi) and colliders, device pointers */
  dvec d_colliders, d_keys;     /* the colliders and their keyframes (boundary.h) */
  dvec d_poses;                 /* [n_colliders] where they are in this step's grid update (k_poses) */
  bool push;                    /* a slip or separate collider: particles take the particle collision step */
  dvec d_colbox;                /* [n_colliders] col_box: where each collider can hold a particle, in its own frame */
  /* The collider cache (COLCACHE below): mesh colliders without keyframes keep, per grid node
   * near them, their level-set samples (mesh_samples) while their frame stays. */
  int n_cc;                     /* cached colliders (0: none) */
  int cc_every;                 /* DRIFT_COLLIDER_CACHE=2: refill at every step (the test of staleness) */
  cc_cols cc_col;               /* their collider indices */
  col_box cc_box[COLCACHE_MAX]; /* where each can act, in the world, over all its frames */
  size_t cc_total;              /* grid blocks with samples, over every cached collider */
  dvec cc_index;                /* [n_colliders] int: the collider's cache q, or -1 */
  dvec cc_state;                /* [2 n_cc] int: the frame key the samples are of (-1: none), refill now */
  dvec cc_slot;                 /* [n_cc n_blocks] int32: block's samples (slot), or -1 */
  dvec cc_blocks;               /* [cc_total] int2: (block, q) of each slot */
  dvec cc_vals;                 /* [cc_total x 64] mesh_samples */
  dvec cc_scratch;              /* [2 n_blocks] uint32: flags and their scan, at rebuild-mapping */
  dvec d_wbox;                  /* [n_colliders] col_box: the same in the world at the step's end, widened (k_poses) */
  dvec push_mask;               /* [n_packets] lanes that G2P left to k_collide (k_g2p's COL variant) */
  dvec push_room;               /* [slots] how far k_collide may move each of those particles */
  dvec d_ls, d_ls_table, d_ls_bricks; /* mesh colliders' level sets (levelset.h), every frame, uploaded once */
  double t_next;                /* set_time: start of the next step the host drives phase by phase */
  float dmin[3], dmax[3];       /* the domain as floats (the advection clamp) */
  int code_bits;                /* bits of a block code that can be non-zero */

  size_t n;                     /* particles */
  size_t n_packets;             /* packets of the current mapping */
  dvec pk[2];                   /* packets; pk[cur] is current, the other the target of a rebuild */
  dvec pid[2];                  /* [slots] uint64 ids */
  dvec hdr;                     /* [n_packets] int2: particle block, valid lanes */
  int cur;
  dvec d_mats;

  dvec keys[2], vals[2];        /* [slots] sort keys and slot indices */
  dvec gone;                    /* [n_gone] slots whose particles emigrate took (dropped by the next rebuild) */
  size_t n_gone;                /* slots gone covers (0: none) */
  dvec xrec;                    /* emigrate_records, add_records: particle records on the device */
  uint32_t *h_rec;              /* emigrate_records: the records on the host (pinned, grow-only) */
  size_t h_rec_cap;             /* bytes */
  dvec pblock;                  /* [n] particle block of each sorted particle (an inclusive scan first) */
  dvec head;                    /* [n] 1 where a particle block starts */
  size_t n_pb;
  dvec pb_coord;                /* [3 n_pb] int32 */
  dvec pb_start;                /* [n_pb + 1] first sorted particle of each particle block */
  dvec pb_packets;              /* [n_pb + 1] packets of each particle block, then their exclusive scan */
  dvec pb_nbr;                  /* [27 n_pb] physical block indices, sparse_neighbor() order */
  dvec nbr_codes[2];            /* [27 n_pb] neighbour codes, then sorted */

  size_t n_blocks;
  dvec block_code;              /* [n_blocks] uint64, sorted */
  dvec grid[2];                 /* [n_blocks][256] float, the two alternating buffers */
  dvec grid0[2];                /* ASFLIP only (else unallocated): [n_blocks][192] float beside grid[k]: P2G's
                                 * momentum without the stress impulse, then the velocity before the update */
  int asflip;                   /* a material uses ASFLIP (physics/transfer.h) */
  int g2p_mat;                  /* G2P reads the material: ASFLIP or a weakly compressible one */
  dvec touched[2];              /* [n_blocks] uint8 */
  int det;                      /* deterministic mode (prm.deterministic) */
  dvec igrid[2];                /* deterministic mode only: [n_blocks][ich][64] int64 fixed-point P2G sums */
  dvec shared;                  /* [n_blocks] uint8: shared with another rank (mark_shared) */
  dvec shared_idx, shared_n;    /* ... the shared blocks' indices and their count (shared_list; device) */
  size_t shared_bound;          /* ... at least that count: the marked lists' lengths summed (mark_shared) */
  int shared_stale;             /* shared_idx is not the marks' (mark_shared, rebuild) */
  dvec pk_order;                /* [n_packets] int32 (p2g_part): boundary packets first, then the rest */
  size_t n_boundary;            /* ... how many are boundary packets */
  int order_stale;              /* pk_order is not this mapping's and marks' (rebuild, mark_shared) */
  int part_skip;                /* p2g_part: the boundary call found the step's P2G primed, whole */
  int g2p_rest;                 /* g2p_interior queued the G2P of pk_order's interior packets: g2p does the rest */
  dvec xidx, xbuf;              /* the rank exchange: block indices and a message on the device */
  xlist *xl;                    /* the exchange's block lists in xidx (register_indices); owned here */
  int n_xl, xl_cap;
  int *h_xbad, *d_xbad;         /* [2] mapped pinned: an exchange kernel's out-of-range block index (index_ok) */
  /* backend.h's gate (g2p_ahead, gate_open; ranks, one GPU each): the next step's k_begin_gated waits on
   * the device until the host writes (gate_seq << 1) | go into *h_gate (mapped pinned) */
  unsigned *h_gate, *d_gate;
  unsigned gate_seq;
  int ahead_on;                 /* DRIFT_STEP_AHEAD (default 1): g2p_ahead arms the gate */
  int gate_armed;               /* g2p_ahead armed it; gate_open not yet called */
  int gate_queued;              /* ... and a k_begin_gated waits on it */
  double vote_wait_s;           /* the steps' waits at the gate so far (step_ctl.gate_ns; backend_stats) */
  cudaEvent_t g2p_ev;           /* after the armed step's G2P and its record (g2p_collect waits for it alone) */
  size_t unpack_check_n;        /* unpack_add_nodes' check of h_xbad, left to the next g2p (list length; 0: none) */
  dvec xrecv;                   /* unpack_add_nodes: the step's received messages, one after another */
  dvec xnodes;                  /* pack_nodes: the AND of the node masks and its prefix sums, on the device */
  size_t xrecv_used;            /* bytes of xrecv this step's unpacks took (reset by g2p) */
  cudaEvent_t xrecv_ev;         /* after an unpack's copies and its kernel on xstream */
  uint64_t *h_codes;            /* host copy of block_code (blocks()) */
  size_t h_codes_cap;           /* bytes (host_pinned) */
  uint64_t h_codes_of;          /* h_codes holds the codes of mapping h_codes_of - 1 (s->rebuilds); 0: none */
  int want_codes;               /* blocks() has been called (ranks): each rebuild-mapping copies the codes early */
  int codes_pending;            /* ... that copy is queued on xstream, codes_ev after it, not yet waited for */
  cudaEvent_t codes_ev;
  size_t table_cap;             /* power of two, at least twice n_blocks */
  dvec table_keys, table_vals;

  dvec temp;                    /* CUB temporary storage: grown when a call needs more, else reused */
  dvec ctl;                     /* step_ctl */
  dvec count;                   /* rebuild_count: counts read back at rebuild */
  struct rebuild_count *h_rc;   /* pinned: rebuild_now's read of count, and read_count's landing place */
  step_ctl *h_slot;             /* [2] pinned: the flags of the last step of each parity */
  step_ctl *d_slot;             /* h_slot mapped into the device (k_ctl_out) */
  cudaEvent_t done_ev[2];       /* recorded after each parity's step */
  cudaEvent_t ph_ev[2];         /* phase timing */

  cudaGraphExec_t graph[2];     /* the step on grid buffer 0 and 1 */
  int graphs_valid;
  int graph_fused;              /* the graphs hold the G2P2G step */
  int primed;                   /* G2P2G: grid[par] already holds the next step's P2G */
  unsigned long long barrier_timeout_ns; /* island_barrier gives up after this long */
  int skew_member, skew_where;  /* DRIFT_ISLAND_SKEW (a test hook): member, SKEW_PRE / SKEW_POST (0: none) */
  unsigned long long skew_ns;   /* ... and the delay it adds to that member's every step */
  float primed_dt;              /* ... taken with this dt (its stress impulse -dt V0 (4/dx^2) tau) */
  /* rebuild-mapping while primed (keep_primed): the old mapping's codes and primed sums, swapped
   * out of block_code, touched[par], grid[par] / grid0[par] (or igrid[par]) so that nothing is
   * copied; after the rebuild they are scratch, swapped back in at the next one */
  dvec old_code, old_touched, old_grid, old_grid0, old_igrid;
  dvec old_to_new;              /* [old blocks] int32: a touched old block's new index, else -1 */
  size_t g2p2g_below;           /* G2P2G for fixed steps and fewer particles than this */
  int par;                      /* the grid buffer the next step uses */
  int last_par;                 /* the buffer of the last completed step (its record: island_g2p's checks) */

  /* the island (see "the island" above); nm = 1: this GPU alone */
  int nm, me;                   /* members, and this member's index (the device in owner) */
  struct cuda_state *peer[MAX_GPUS - 1];
  dvec tags;                    /* [n_blocks][nm - 1] int32: the peers' indices of each block (k_tag) */
  dvec vel, vel0;               /* [n_blocks][256] / [n_blocks][192] float: k_grid's output, G2P's input */
  dvec bar;                     /* unsigned: this member's barrier count, read by the peers */
  int events;                   /* parallel.island_barrier "events" on an island: host-issued barriers, no graphs */
  int atomics;                  /* parallel.island_reduce "p2p_atomics" on an island: no vel, owners (k_owner) */
  int begin_barrier;            /* k_begin_barrier where it can serve (launch_step): the barrier on a device */
  int keys64;                   /* DRIFT_SORT_KEYS64=1 (a test switch): 64-bit sort keys where 32 would do, so that
                                   the path of domains beyond 1024 blocks a side runs on the test scenes */
  int n_sm;                     /* the device's multiprocessors */
  cudaEvent_t bar_ev;           /* events: recorded at each of this member's arrivals at a barrier */
  cudaEvent_t rebuilt_ev;       /* the island: recorded after each rebuild-mapping; the peers' k_tag waits for it */
  dvec own;                     /* p2p_atomics: [n_blocks] int8, the owner's peer slot or -1 (k_owner) */
  float *h_add;                 /* add_particles: host packets of the new particles (grow-only) */
  uint64_t *h_add_id;
  int2 *h_add_hdr;
  size_t h_add_cap;             /* packets */
  int need_rebuild;
  int unprimed;                 /* the last step queued took the primed sums (primed cleared): a voided step gives them back */
  int void_steps;               /* the frame loop: a step after a leave is voided (not with events; lag_of) */
  uint64_t rebuilds;
  float vmax;
  struct gpu_marks *marks;      /* DRIFT_GPU_MARKS=1: the stream's timeline between entries (gpu_marks) */
  struct gpu_stamps *stamps;    /* DRIFT_GPU_STAMPS=1: the device's time between a step's kernels (gpu_stamps) */
} cuda_state;

/* ---- hash table --------------------------------------------------------------------------- */

#define TABLE_EMPTY 0xffffffffffffffffULL /* cudaMemset 0xff makes every key empty */

/* splitmix64's finalizer. */
__device__ static inline uint64_t table_hash(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Linear probing; a slot is claimed with atomicCAS on the 64-bit key, so concurrent inserts of
 * different codes never share a slot. */
__global__ static void k_table_insert(size_t nb, const uint64_t *codes, unsigned long long *keys, int32_t *vals,
                                      size_t mask) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= nb) return;
  const unsigned long long code = codes[i];
  for (size_t h = table_hash(code) & mask;; h = (h + 1) & mask) {
    const unsigned long long old = atomicCAS(keys + h, TABLE_EMPTY, code);
    if (old == TABLE_EMPTY || old == code) {
      vals[h] = (int32_t)i;
      return;
    }
  }
}

__device__ static inline int32_t table_find(const unsigned long long *keys, const int32_t *vals, size_t mask,
                                            uint64_t code) {
  for (size_t h = table_hash(code) & mask;; h = (h + 1) & mask) {
    const unsigned long long k = keys[h];
    if (k == code) return vals[h];
    if (k == TABLE_EMPTY) return -1;
  }
}

/* ---- rebuild-mapping kernels -------------------------------------------------------------- */

/* Keys of every slot: particle block code (high bits) and cell inside it (low 6 bits); slots
 * beyond a packet's valid lanes get ~0 and sort last. K: 32 bits where the code and the cell fit
 * (6 + code_bits <= 32: a domain of up to 1024 blocks a side), which moves a third fewer bytes
 * through each pass of the sort and through k_heads and k_pblocks; else 64. */
template <typename K>
__global__ static void k_keys(size_t n_slots, const float *pk, const int2 *hdr, float3 origin, float inv_dx,
                              const uint8_t *gone, size_t n_gone, K *keys, uint32_t *vals) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_slots) return;
  const size_t p = i / LANES;
  const int lane = (int)(i % LANES);
  vals[i] = (uint32_t)i;
  if (lane >= hdr[p].y || (i < n_gone && gone[i])) {
    keys[i] = ~(K)0;
    return;
  }
  const float *q = pk + p * PK_FLOATS + lane;
  const int b0 = bspline_base((q[(A_X + 0) * LANES] - origin.x) * inv_dx);
  const int b1 = bspline_base((q[(A_X + 1) * LANES] - origin.y) * inv_dx);
  const int b2 = bspline_base((q[(A_X + 2) * LANES] - origin.z) * inv_dx);
  const uint64_t code = sparse_block_code(sparse_particle_block(b0), sparse_particle_block(b1), sparse_particle_block(b2));
  keys[i] = (K)((code << 6) | (uint64_t)sparse_node_in_block(sparse_cell_in_particle_block(b0),
                                                             sparse_cell_in_particle_block(b1),
                                                             sparse_cell_in_particle_block(b2)));
}

/* emigrate: flag[i] = 1 where slot i holds a particle whose particle block (as sim.c's
 * particle_block computes it) lies outside [lo, hi) on some axis. */
__global__ static void k_leave(size_t n_slots, const float *pk, const int2 *hdr, float3 origin, float inv_dx, int3 lo,
                               int3 hi, const uint8_t *gone, size_t n_gone, uint32_t *flag) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_slots) return;
  const size_t p = i / LANES;
  const int lane = (int)(i % LANES);
  uint32_t out = 0;
  if (lane < hdr[p].y && !(i < n_gone && gone[i])) { /* (a particle an earlier emigrate took is gone) */
    const float *q = pk + p * PK_FLOATS + lane;
    const int b0 = bspline_base((q[(A_X + 0) * LANES] - origin.x) * inv_dx) >> 2;
    const int b1 = bspline_base((q[(A_X + 1) * LANES] - origin.y) * inv_dx) >> 2;
    const int b2 = bspline_base((q[(A_X + 2) * LANES] - origin.z) * inv_dx) >> 2;
    out = b0 < lo.x || b0 >= hi.x || b1 < lo.y || b1 >= hi.y || b2 < lo.z || b2 >= hi.z;
  }
  flag[i] = out;
}

/* Particle records (particles.h: particles_pack's layout, what travels between ranks) as 32-bit
 * words: where each attribute starts, from the same list, so that the offsets follow it. */
#define REC_WORDS_(field, type, k, what) REC_##field, REC_##field##_last_ = REC_##field + (int)(sizeof(type) * (k) / 4) - 1,
enum { PARTICLE_ATTRIBUTES(REC_WORDS_) REC_WORDS };
#undef REC_WORDS_
static_assert(REC_WORDS == 31 && REC_x == 0 && REC_id == 27 && REC_owner == 30,
              "particles.h's attributes changed: k_leave_records and k_records_in carry each one by name");

/* emigrate_records: the flagged particles as records, in slot order (upto: the inclusive scan of
 * the flags), and their slots marked gone. owner: this GPU's rank * 256 + its index. */
__global__ static void k_leave_records(size_t n_slots, const uint32_t *flag, const uint32_t *upto, const float *pk,
                                       const uint64_t *pid, int32_t owner, uint32_t *rec, uint8_t *gone) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_slots || !flag[i]) return;
  gone[i] = 1;
  const float *q = pk + (i / LANES) * PK_FLOATS + i % LANES;
  uint32_t *r = rec + (size_t)(upto[i] - 1) * REC_WORDS;
  for (int a = 0; a < 3; ++a)
    r[REC_x + a] = __float_as_uint(q[(A_X + a) * LANES]), r[REC_v + a] = __float_as_uint(q[(A_V + a) * LANES]);
  for (int a = 0; a < 9; ++a)
    r[REC_C + a] = __float_as_uint(q[(A_C + a) * LANES]), r[REC_F + a] = __float_as_uint(q[(A_F + a) * LANES]);
  r[REC_mass] = __float_as_uint(q[A_M * LANES]);
  r[REC_vol0] = __float_as_uint(q[A_VOL * LANES]);
  r[REC_logjp] = __float_as_uint(q[A_JP * LANES]);
  const uint64_t id = pid[i]; /* little-endian, as particles_pack's memcpy leaves it */
  r[REC_id] = (uint32_t)id;
  r[REC_id + 1] = (uint32_t)(id >> 32);
  r[REC_material] = __float_as_uint(q[A_MAT * LANES]); /* the int's bits, as the packets hold them */
  r[REC_owner] = (uint32_t)owner;
}

/* add_records: m records into add_packets new packets (pk, pid and hdr point at the first new
 * one), one thread per slot; the last packet's empty lanes zeroed, as append_particles leaves
 * them. A record's owner is not kept (download sets it). */
__global__ static void k_records_in(size_t m, size_t add_packets, const uint32_t *rec, float *pk, uint64_t *pid,
                                    int2 *hdr) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= add_packets * LANES) return;
  const size_t p = i / LANES;
  const int lane = (int)(i % LANES);
  float *q = pk + p * PK_FLOATS + lane;
  if (lane == 0) hdr[p] = make_int2(-1, (int)(m - p * LANES < (size_t)LANES ? m - p * LANES : LANES));
  if (i >= m) {
    for (int a = 0; a < PK_ATTRS; ++a) q[a * LANES] = 0.0f;
    pid[i] = 0;
    return;
  }
  const uint32_t *r = rec + i * REC_WORDS;
  for (int a = 0; a < 3; ++a)
    q[(A_X + a) * LANES] = __uint_as_float(r[REC_x + a]), q[(A_V + a) * LANES] = __uint_as_float(r[REC_v + a]);
  for (int a = 0; a < 9; ++a)
    q[(A_C + a) * LANES] = __uint_as_float(r[REC_C + a]), q[(A_F + a) * LANES] = __uint_as_float(r[REC_F + a]);
  q[A_M * LANES] = __uint_as_float(r[REC_mass]);
  q[A_VOL * LANES] = __uint_as_float(r[REC_vol0]);
  q[A_JP * LANES] = __uint_as_float(r[REC_logjp]);
  q[A_MAT * LANES] = __uint_as_float(r[REC_material]);
  pid[i] = (uint64_t)r[REC_id] | (uint64_t)r[REC_id + 1] << 32;
}

/* p2g_part: flag[p] = 1 where packet p's particle block has a block shared with another rank
 * among its 27 physical blocks (its particles' stencils lie in them); iota[p] = p. */
__global__ static void k_pk_boundary(size_t n_packets, const int2 *hdr, const int32_t *pb_nbr, const uint8_t *shared,
                                     uint8_t *flag, int32_t *iota) {
  const size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (p >= n_packets) return;
  const int32_t *nb = pb_nbr + 27 * (size_t)hdr[p].x;
  uint8_t f = 0;
  for (int j = 0; j < 27; ++j) f |= nb[j] >= 0 && shared[nb[j]];
  flag[p] = f;
  iota[p] = (int32_t)p;
}

template <typename K> __device__ static inline int is_head(size_t i, const K *keys) {
  return i == 0 || (keys[i] >> 6) != (keys[i - 1] >> 6);
}

template <typename K> __global__ static void k_heads(size_t n, const K *keys, int32_t *head) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) head[i] = is_head(i, keys);
}

/* scan = inclusive sum of the heads: sorted particle i is in particle block scan[i] - 1. Each
 * head records its block's start, coordinates and 27 neighbour codes. In place on pblock. */
template <typename K>
__global__ static void k_pblocks(size_t n, const K *keys, int32_t *pblock, int32_t *pb_start,
                                 int32_t *pb_coord, uint64_t *nbr_codes) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t q = pblock[i] - 1;
  pblock[i] = q;
  if (i == n - 1) pb_start[q + 1] = (int32_t)n;
  if (!is_head(i, keys)) return;
  pb_start[q] = (int32_t)i;
  int c[3];
  sparse_block_coords((uint64_t)(keys[i] >> 6), c);
  for (int a = 0; a < 3; ++a) pb_coord[3 * q + a] = c[a];
  for (int di = -1; di <= 1; ++di)
    for (int dj = -1; dj <= 1; ++dj)
      for (int dk = -1; dk <= 1; ++dk)
        nbr_codes[27 * (size_t)q + sparse_neighbor(di, dj, dk)] = sparse_block_code(c[0] + di, c[1] + dj, c[2] + dk);
}

/* Packets of each particle block: fill (LANES: full packets) particles a packet at most. */
__global__ static void k_pb_packets(size_t n_pb, const int32_t *pb_start, int fill, int32_t *pb_packets) {
  const size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (q < n_pb) pb_packets[q] = (pb_start[q + 1] - pb_start[q] + fill - 1) / fill;
  if (q == n_pb) pb_packets[q] = 0;
}

/* Packet headers of each particle block (pb_packets now holds the exclusive scan). */
__global__ static void k_headers(size_t n_pb, const int32_t *pb_start, const int32_t *pb_packets, int fill,
                                 int2 *hdr) {
  const size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (q >= n_pb) return;
  const int count = pb_start[q + 1] - pb_start[q];
  for (int j = 0, p = pb_packets[q]; j * fill < count; ++j, ++p)
    hdr[p] = make_int2((int)q, min(fill, count - j * fill));
}

/* Moves sorted particle i (from slot perm[i] of the old packets) to its new packet and lane. The
 * old and new packets are distinct buffers (__restrict__), so that a thread's loads of its
 * particle's attributes are all in flight at once: without it the compiler orders each load
 * after the store before it, and a thread waits for one gathered load after another. */
__global__ static void k_scatter(size_t n, const uint32_t *__restrict__ perm, const int32_t *__restrict__ pblock,
                                 const int32_t *__restrict__ pb_start, const int32_t *__restrict__ pb_packets, int fill,
                                 const float *__restrict__ src, const uint64_t *__restrict__ src_id,
                                 float *__restrict__ dst, uint64_t *__restrict__ dst_id) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t from = perm[i];
  const int32_t q = pblock[i];
  const int r = (int)i - pb_start[q];
  const size_t p = (size_t)pb_packets[q] + r / fill;
  const int lane = r % fill;
  const float *s = src + (size_t)(from / LANES) * PK_FLOATS + from % LANES;
  float *d = dst + p * PK_FLOATS + lane;
  for (int a = 0; a < PK_ATTRS; ++a) d[a * LANES] = s[a * LANES];
  dst_id[p * LANES + lane] = src_id[from];
}

__global__ static void k_pb_nbr(size_t m, const uint64_t *nbr_codes, const unsigned long long *keys,
                                const int32_t *vals, size_t mask, int32_t *pb_nbr) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < m) pb_nbr[i] = table_find(keys, vals, mask, nbr_codes[i]);
}

/* Counts that the rebuild reads back (s->count): CUB's outputs in n; keep_primed's check rides on
 * the read of the block count. */
typedef struct rebuild_count {
  int n;                        /* a CUB reduction's or selection's result */
  int packets;                  /* rebuild_now: the new mapping's packets (read with n) */
  int lost;                     /* k_remap_find: a touched old block is not in the new mapping */
  unsigned long long lost_code; /* ... its code (any one, when several are) */
} rebuild_count;

/* G2P2G keeps its primed sums across a rebuild-mapping (keep_primed; the argument that every
 * touched old block is in the new mapping is there). The new dense index of a touched old block
 * is its position among the new mapping's sorted unique codes (what k_table_insert stores), found
 * by binary search; this runs before the host reads the new block count (rc->n, on the device
 * until then), so that a missing block comes back with that read, without a sync of its own. */
__global__ static void k_remap_find(size_t n_old, const uint64_t *__restrict__ old_code,
                                    const uint8_t *__restrict__ old_touched, const uint64_t *__restrict__ code,
                                    rebuild_count *rc, int32_t *__restrict__ to_new) {
  const size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (b >= n_old) return;
  int32_t j = -1;
  if (old_touched[b]) {
    const uint64_t c = old_code[b];
    const int n = rc->n;
    int lo = 0, hi = n; /* the first position whose code is >= c */
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (code[mid] < c) lo = mid + 1;
      else hi = mid;
    }
    if (lo < n && code[lo] == c) {
      j = lo;
    } else { /* plain stores, every writer stores 1 to lost; any one code is reported */
      rc->lost_code = c;
      rc->lost = 1;
    }
  }
  to_new[b] = j;
}

/* Moves the primed sums of every touched old block to its new index and marks it touched there
 * (the new buffers are cleared before). One thread per (old block, node); a node's words of a
 * block are copied whatever the channel layout: the 4 floats nd + 64 k of grid, the 3 of grid0
 * (ASFLIP), or the ich int64 of igrid (deterministic mode, where P2G writes only those). Distinct
 * old codes have distinct new indices, so no two threads write one place. */
__global__ static void k_remap_move(size_t n_old, const int32_t *__restrict__ to_new, const float *__restrict__ old_g,
                                    float *__restrict__ g, const float *__restrict__ old_g0, float *__restrict__ g0,
                                    const long long *__restrict__ old_ig, long long *__restrict__ ig, int ich,
                                    uint8_t *__restrict__ touched) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_old * BLOCK_NODES) return;
  const size_t b = i / BLOCK_NODES;
  const int nd = (int)(i % BLOCK_NODES);
  const int32_t j = to_new[b];
  if (j < 0) return; /* untouched: its sums are zeros (k_grid cleared it before the primed P2G) */
  if (old_g)
    for (int w = nd; w < BLOCK_FLOATS; w += BLOCK_NODES) g[(size_t)j * BLOCK_FLOATS + w] = old_g[b * BLOCK_FLOATS + w];
  if (old_g0)
    for (int w = nd; w < OLD_FLOATS; w += BLOCK_NODES) g0[(size_t)j * OLD_FLOATS + w] = old_g0[b * OLD_FLOATS + w];
  if (old_ig)
    for (int ch = 0; ch < ich; ++ch)
      ig[((size_t)j * ich + ch) * BLOCK_NODES + nd] = old_ig[(b * ich + ch) * BLOCK_NODES + nd];
  if (nd == 0) touched[j] = 1;
}

/* ---- the step ----------------------------------------------------------------------------- */

/* Whether an island's members share values at a step's beginning: adaptive steps the largest
 * speed (each takes the island's for its dt), voiding steps whether any member's particles left
 * the free zone (they void the step together: a member that ran it would wait at its barrier for
 * one that did not). */
__device__ static bool begin_shares(const step_ctl *c, const island_view &iv) {
  return iv.np > 0 && (c->mode == DT_ADAPTIVE || c->void_on);
}

/* A step's first stamp (DRIFT_GPU_STAMPS), the others zeroed. */
__device__ __forceinline__ void stamps_begin(step_ctl *c) {
  if (!c->stamps) return;
  for (int i = 0; i < ST_COUNT; ++i) c->stamp[i] = 0;
  c->stamp[ST_BEGIN] = global_ns();
}

/* The step's beginning before the island's barrier, by one thread: the stamps, and this
 * member's values for the peers in the slot of this step (spin barriers; events: k_publish
 * stored the speed before the host's barrier). */
__device__ static void begin_publish(step_ctl *c, const island_view &iv) {
  c->gate_ns = 0; /* no gate: the frame loop's steps */
  stamps_begin(c);
  if (!begin_shares(c, iv) || !iv.spin) return;
  const unsigned slot = c->step_seq & 1u;
  c->vmax_pub[slot] = c->vmax_bits;
  c->leave_pub[slot] = c->leave;
}

/* The step's beginning after the island's barrier (or with no island), by one thread (k_begin,
 * or k_begin_barrier's first lane): sets this step's dt (fixed, or adaptive from the island's
 * last largest speed, the last two steps of a frame sharing what is left, exactly as sim.c does
 * on the host) and resets the step's flags. A step queued after the frame ended does nothing; so
 * does one voided (void_on) after a step whose particles, on any member, left the free zone. */
__device__ static void begin_step(step_ctl *c, const island_view &iv) {
  c->performed = 0;
  unsigned vmax_bits = c->vmax_bits, leave = c->leave;
  if (begin_shares(c, iv)) { /* the island's values (see the island above) */
    const unsigned slot = c->step_seq++ & 1u;
    for (int q = 0; q < iv.np; ++q) {
      const volatile step_ctl *p = iv.peer_ctl[q];
      vmax_bits = max(vmax_bits, p->vmax_pub[slot]);
      leave |= p->leave_pub[slot];
    }
  }
  if (c->done) return;
  if (c->void_on && leave) { /* a particle left the free zone: this step waits for a rebuild-mapping
                              * (the host queues it again); t, k, dt and vmax stay */
    c->voided = 1;
    c->done = 1;
    return;
  }
  double dt, t_start;
  if (c->mode == DT_FIXED) {
    dt = c->dt_fixed;
    /* the step's start from the step count, as sim.c computes it (no contraction into an FMA) */
    t_start = __dadd_rn(c->t0, __dmul_rn((double)c->k, c->dt_fixed));
  } else {
    t_start = c->t;
    const double rem = c->t1 - c->t;
    if (rem <= 1e-9 * c->frame_dt) {
      c->done = 1;
      return;
    }
    dt = c->cfl_dx / (c->wave_speed + (double)__uint_as_float(vmax_bits));
    if (dt >= rem) dt = rem;
    else if (dt > 0.5 * rem) dt = 0.5 * rem;
  }
  c->dt = (float)dt;
  /* where the host's phase-by-phase path puts the colliders (k_begin_fixed: the step's start
   * plus the float dt), so that both paths take bitwise the same steps */
  c->t_pose = __dadd_rn(t_start, (double)c->dt);
  c->t = __dadd_rn(t_start, dt);
  ++c->k;
  c->performed = 1;
  c->leave = 0;
  c->vmax_bits = 0;
}

/* One warp on an island (its barrier by warp, as k_barrier), else one thread (nothing shared:
 * begin_shares). */
__global__ static void k_begin(step_ctl *c, island_view iv) {
  if (threadIdx.x == 0) begin_publish(c, iv);
  if (begin_shares(c, iv) && iv.spin) { /* the same on every lane */
    __syncwarp();
    island_barrier_warp(c, iv);
  }
  if (threadIdx.x == 0) begin_step(c, iv);
}

/* A rebuild-mapping's start: every particle is in its block again, so the flag goes, and a
 * voided step (begin_step) is no longer held back. A frame's own end (done, not voided) stays. */
__global__ static void k_unvoid(step_ctl *c) {
  c->leave = 0;
  if (c->voided) c->done = 0;
  c->voided = 0;
}

/* An island step with nothing between its beginning and its barrier (G2P2G, whose P2G the last
 * step did; the first step after G2P2G frames) begins and passes the barrier in one kernel: one
 * launch less a step (launch_step), and the one barrier
 * serves the values the members share at the beginning. */
__global__ static void k_begin_barrier(step_ctl *c, island_view iv) {
  if (threadIdx.x == 0) begin_publish(c, iv);
  __syncwarp();
  stamp(c, ST_BAR_IN);
  island_barrier_warp(c, iv);
  stamp(c, ST_BAR_OUT);
  if (threadIdx.x == 0) begin_step(c, iv);
}

/* Events barrier, adaptive steps: the member's last vmax for the peers, before the host's barrier
 * and k_begin (which takes the slot step_seq & 1 and advances step_seq). */
__global__ static void k_publish(step_ctl *c) {
  if (c->mode == DT_ADAPTIVE) c->vmax_pub[c->step_seq & 1u] = c->vmax_bits;
}

/* set_projected: the next P2G leaves out the return mapping (step_ctl.projected). */
__global__ static void k_set_projected(step_ctl *c) { c->projected = 1; }

/* A fixed step given by the host (the phase-by-phase path of backend.h). */
__device__ static void begin_fixed(step_ctl *c, float dt, double t_end) {
  c->t = c->t_pose = t_end; /* as k_begin leaves it: the colliders stand where they are at the step's end */
  c->done = 0;
  c->performed = 1;
  c->dt = dt;
  c->leave = 0;
  c->vmax_bits = 0;
  c->gate_ns = 0;
  stamps_begin(c);
}
__global__ static void k_begin_fixed(step_ctl *c, float dt, double t_end) { begin_fixed(c, dt, t_end); }

/* The phases' step begin behind backend.h's gate (ranks: the step queued before the step vote):
 * waits until the host's gate_open writes this gate's number into *gate, then begins the step as
 * k_begin_fixed does (go) or voids it (its kernels return at once, as the frame loop's voided
 * steps do; rebuild_now's k_unvoid or the next begin ends that). A gate the host never opens (a
 * bug; the host's own exits void it) gives up after timeout_ns, voids the step and says so in
 * gate_stuck, which the next step's record carries to the host. */
__global__ static void k_begin_gated(step_ctl *c, const volatile unsigned *gate, unsigned seq, float dt, double t_end,
                                     unsigned long long timeout_ns) {
  const unsigned long long t0 = global_ns();
  unsigned w;
  for (unsigned spins = 0;; ++spins) {
    w = *gate;
    if ((w >> 1) == (seq & 0x7fffffffu)) break;
    __nanosleep(100);
    if ((spins & 255u) == 255u && global_ns() - t0 > timeout_ns) {
      c->gate_stuck = 1;
      w = 0;
      break;
    }
  }
  __threadfence_system();
  if (w & 1u) {
    begin_fixed(c, dt, t_end);
    c->gate_ns = global_ns() - t0; /* the record after this step's G2P carries it (island_g2p_collect) */
    if (c->stamps) c->stamp[ST_GATE] = t0;
  } else {
    c->done = 1;
    c->voided = 1;
    c->performed = 0;
  }
}

/* A frame's start: its steps are k0, k0 + 1, ... from t_start (k0 > 0: resumed part-way); vmax0
 * >= 0 replaces the last step's speed for the first dt (frame_plan). */
__global__ static void k_frame_begin(step_ctl *c, double t0, double t_start, int k0, float vmax0, double t1, int mode,
                                     double dt_fixed, double cfl_dx, double wave_speed, int void_on) {
  c->void_on = void_on;
  c->t0 = t0;
  c->t = t_start;
  c->k = k0;
  if (vmax0 >= 0.0f) c->vmax_bits = __float_as_uint(vmax0);
  c->t1 = t1;
  c->frame_dt = t1 - t0;
  c->mode = mode;
  c->dt_fixed = dt_fixed;
  c->cfl_dx = cfl_dx;
  c->wave_speed = wave_speed;
  c->done = 0;
  if (mode == DT_FIXED) c->dt = (float)dt_fixed; /* the priming P2G of G2P2G reads it */
}

/* k_p2g's order of packets (spread_of: packet i x m mod n; m = 0: the list's order). magic is
 * floor((2^64 - 1) / n), so that the remainder takes a multiply-high and one correction instead
 * of a 64-bit division (a subroutine of some sixty instructions at every warp's start, 3.5% of
 * k_p2g's stall samples at l = 46): with x = i m < 2^62, q = floor(x magic / 2^64) is floor(x / n)
 * or one less, so x - q n lies in [0, 2n). */
typedef struct p2g_order {
  unsigned long long m, magic;
} p2g_order;

__device__ __forceinline__ int p2g_order_index(p2g_order o, int i, int n) {
  if (!o.m) return i;
  const unsigned long long x = (unsigned long long)i * o.m;
  unsigned long long r = x - __umul64hi(x, o.magic) * (unsigned long long)n;
  if (r >= (unsigned long long)n) r -= (unsigned long long)n;
  return (int)r;
}

/* P2G with plasticity, stress and forces fused in (MLS-MPM, Hu et al. 2018: the stress enters
 * as -dt V0 (4/dx^2) tau next to APIC's m C). One warp per packet, taken in spread_of's order. */
template <bool OLD, bool DET>
__global__ static void PARTICLE_BOUNDS
k_p2g(step_ctl *ctl, size_t n_packets, const int2 *__restrict__ hdr, const int32_t *__restrict__ pb_coord,
      const int32_t *__restrict__ pb_nbr, float *__restrict__ pk, const uint64_t *__restrict__ pid,
      const material_params *__restrict__ mats, float3 origin, float dx, float inv_dx, float *__restrict__ grid,
      uint8_t *__restrict__ touched, float *__restrict__ grid0, fixp fp, const int32_t *__restrict__ order,
      p2g_order spread) {
  __shared__ __align__(16) float s_p2g[WARPS][P2G_SMEM(OLD, DET, P2G_NODESUM)];
  __shared__ unsigned s_sort[WARPS][LANES];
  if (ctl->done) return;
  stamp(ctl, ST_P2G);
  const int warp = threadIdx.x >> 5;
  const int n = (int)n_packets; /* below 2^31: append_room's limit of particles a GPU */
  const int i = (int)blockIdx.x * WARPS + warp;
  if (i >= n) return; /* the whole warp */
  const int j = p2g_order_index(spread, i, n); /* spread_of: the packets in work at once lie far apart */
  p2g_any<OLD, DET, P2G_NODESUM>(ctl, ctl->dt, order ? (size_t)order[j] : (size_t)j, hdr, pb_coord, pb_nbr, pk, pid,
                                 mats, origin, dx, inv_dx, grid, touched, grid0, s_p2g[warp], s_sort[warp], fp,
                                 !ctl->projected);
}

/* Where a collider can hold a particle (phi < 0, physics/boundary.h: collider_push), as an
 * axis-aligned box: in the collider's own frame (col_box_local, on the host, once) and in the
 * world at the step's pose, widened by a margin (k_poses). G2P tests its particles against these
 * boxes and leaves the few inside one to k_collide, so that G2P itself carries none of the
 * collision step's registers; the grid update evaluates a collider only at the nodes inside its
 * box (docs/performance.md). A collider acts on a node where phi < half a cell (a mesh's lattice
 * holds phi up to two cells, and off it phi is that band), on a particle where phi < 0 and then
 * moves it by at most half a cell (boundary.h), so a margin of a cell covers both. An empty box
 * (lo > hi) holds nothing (a sticky collider's box for particles: it keeps what it holds); an
 * unbounded one (a plane) holds everything. */
__device__ __forceinline__ bool in_box(const col_box &b, const float x[3]) {
  return x[0] >= b.lo[0] && x[0] <= b.hi[0] && x[1] >= b.lo[1] && x[1] <= b.hi[1] && x[2] >= b.lo[2] &&
         x[2] <= b.hi[2];
}

static col_box col_box_local(const collider *c) {
  col_box b;
  float e = 0.0f;
  int all = 0;
  switch (c->geom.shape) {
  case SDF_SPHERE: e = c->geom.r; break;
  case SDF_CYLINDER: e = sqrtf(c->geom.r * c->geom.r + c->geom.half_height * c->geom.half_height); break;
  case SDF_BOX: break;
  case SDF_MESH: break; /* k_poses: the lattices of the frames at the pose (mesh_box) */
  default: all = 1; break; /* a plane: a half-space */
  }
  for (int i = 0; i < 3; ++i) {
    b.lo[i] = all ? -FLT_MAX : c->geom.shape == SDF_BOX ? -c->geom.half[i] : -e;
    b.hi[i] = all ? FLT_MAX : c->geom.shape == SDF_BOX ? c->geom.half[i] : e;
  }
  return b;
}

/* A mesh collider's box at pose P: the lattice of the frame (and of the next one where the pose
 * blends two): off its lattice a level set is +band (levelset.h). Of one frame or two, not of
 * the whole sequence: an animated figure sweeps much more than it covers at any time. */
__device__ static void mesh_box(const boundary_params &bp, const collider *c, const collider_pose &P, col_box *b) {
  for (int i = 0; i < 3; ++i) b->lo[i] = FLT_MAX, b->hi[i] = -FLT_MAX;
  const int last = P.deforming && P.frac > 0.0f ? 1 : 0;
  for (int f = 0; f <= last; ++f) {
    const levelset &L = bp.levelsets[c->geom.levelset + P.frame + f];
    for (int i = 0; i < 3; ++i) {
      b->lo[i] = fminf(b->lo[i], L.origin[i]);
      b->hi[i] = fmaxf(b->hi[i], L.origin[i] + (float)(L.dims[i] * LS_BRICK) * L.h);
    }
  }
}

/* Where the colliders are at the step's end (ctl->t_pose), for k_grid and the particle collision step
 * of k_g2p / k_collide / k_g2p2g (physics/boundary.h): one thread per collider. Also the world box
 * of each collider at that pose, widened by margin (m): wbox[k] for the grid update, and
 * wbox[n_colliders + k] for the particle collision step (empty for a sticky collider). */
__global__ static void k_poses(const step_ctl *__restrict__ ctl, boundary_params bp, collider_pose *__restrict__ poses,
                               const col_box *__restrict__ box, col_box *__restrict__ wbox, float margin,
                               const int *__restrict__ cc_index, int *__restrict__ cc_state, int cc_every) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (ctl->done || k >= bp.n_colliders) return;
  collider_pose P;
  collider_pose_at(&bp.colliders[k], bp.keys, ctl->t_pose, &P);
  poses[k] = P;
  /* the collider cache: samples of another frame (or none since the rebuild-mapping) are taken
   * anew by k_cc_fill, right after; the pose of a cached collider never changes (no keys).
   * cc_every (DRIFT_COLLIDER_CACHE=2) refills at every step: the same arithmetic on samples that
   * cannot be stale, against which tests check that a refill is never missed */
  const int q = cc_index ? cc_index[k] : -1;
  if (q >= 0) {
    const int key = 2 * P.frame + (P.deforming ? 1 : 0), need = cc_every || cc_state[2 * q] != key;
    cc_state[2 * q + 1] = need;
    if (need) cc_state[2 * q] = key;
  }
  col_box b = box[k];
  if (bp.colliders[k].geom.shape == SDF_MESH && !(b.lo[0] > b.hi[0])) mesh_box(bp, &bp.colliders[k], P, &b);
  col_box w;
  int empty = 0, all = 0;
  for (int i = 0; i < 3; ++i) {
    empty |= b.lo[i] > b.hi[i];
    all |= !(b.hi[i] - b.lo[i] < 1e30f);
  }
  for (int i = 0; i < 3; ++i) {
    if (empty || all) {
      w.lo[i] = empty ? FLT_MAX : -FLT_MAX;
      w.hi[i] = empty ? -FLT_MAX : FLT_MAX;
      continue;
    }
    float c = P.center[i], h = margin;
    for (int j = 0; j < 3; ++j) {
      c += P.R[3 * i + j] * 0.5f * (b.lo[j] + b.hi[j]);
      h += fabsf(P.R[3 * i + j]) * 0.5f * (b.hi[j] - b.lo[j]);
    }
    w.lo[i] = c - h, w.hi[i] = c + h;
  }
  wbox[k] = w;
  if (bp.colliders[k].type == BOUNDARY_STICKY)
    for (int i = 0; i < 3; ++i) w.lo[i] = FLT_MAX, w.hi[i] = -FLT_MAX;
  wbox[bp.n_colliders + k] = w;
}

/* The collider cache (DRIFT_COLLIDER_CACHE=2, a test hook, refills at every step): a mesh
 * collider without keyframes stands still, so a grid node's local point in it stays until the
 * next rebuild-mapping, and its level-set samples (collider_mesh_samples: phi, surface velocity and gradient of the frame
 * and of the next one) change only when the frame does (Crawling in Snow: every 62 steps at the
 * paper's step). The grid update blends them by the step's frac (collider_apply_cached, the same
 * arithmetic as collider_apply) instead of sampling two frames' lattices at each node near the
 * figure, the latency-bound part of its step (docs/performance.md). Slots: the grid blocks
 * within the union of the collider's lattices over its frames (cc_box), numbered at each
 * rebuild-mapping (k_cc_flag, a scan, k_cc_place); k_poses flags a refill when the frame
 * changes or after a rebuild-mapping (cc_state), and k_cc_fill refills every slot then. A node
 * outside the slots, or a collider with keys, takes collider_apply as before. */
__global__ static void k_cc_flag(size_t n_blocks, const uint64_t *__restrict__ block_code, float3 origin, float dx,
                                 col_box box, uint32_t *__restrict__ flag) {
  const size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  int c[3];
  sparse_block_coords(block_code[b], c);
  const float o[3] = {origin.x, origin.y, origin.z};
  int hit = 1;
  for (int a = 0; a < 3; ++a) {
    const float lo = o[a] + (float)(4 * c[a]) * dx, hi = o[a] + (float)(4 * c[a] + 3) * dx;
    hit &= hi >= box.lo[a] && lo <= box.hi[a];
  }
  flag[b] = (uint32_t)hit;
}

/* Slots base + scan - 1 of the flagged blocks, for cached collider q (scan: inclusive). */
__global__ static void k_cc_place(size_t n_blocks, const uint32_t *__restrict__ flag, const uint32_t *__restrict__ scan,
                                  int base, int q, int32_t *__restrict__ slot, int2 *__restrict__ blocks) {
  const size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  const int32_t k = flag[b] ? base + (int32_t)scan[b] - 1 : -1;
  slot[(size_t)q * n_blocks + b] = k;
  if (k >= 0) blocks[k] = make_int2((int)b, q);
}

/* Every slot's 64 nodes' samples, for the cached colliders k_poses flagged (a grid-stride loop:
 * a step without a refill returns after reading the flags). */
__global__ static void k_cc_fill(const step_ctl *__restrict__ ctl, size_t total, const int2 *__restrict__ blocks,
                                 int n_cc, const int *__restrict__ cc_state, cc_cols cols,
                                 const uint64_t *__restrict__ block_code, float3 origin, float dx,
                                 const __grid_constant__ boundary_params bp, const collider_pose *__restrict__ poses,
                                 mesh_samples *__restrict__ vals) {
  if (ctl->done) return;
  int any = 0;
  for (int q = 0; q < n_cc; ++q) any |= cc_state[2 * q + 1];
  if (!any) return; /* the usual step: no collider changed frame */
  const size_t n = total * BLOCK_NODES, stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) {
    const int2 b = blocks[i / BLOCK_NODES];
    if (!cc_state[2 * b.y + 1]) continue;
    const int nd = (int)(i % BLOCK_NODES), k = cols.k[b.y];
    int c[3];
    sparse_block_coords(block_code[b.x], c);
    /* the node as k_grid places it, and its local point as collider_apply finds it */
    const int idx[3] = {4 * c[0] + nd / 16, 4 * c[1] + (nd / 4) % 4, 4 * c[2] + nd % 4};
    const float o[3] = {origin.x, origin.y, origin.z};
    float xn[3], r[3], xl[3];
    for (int a = 0; a < 3; ++a) xn[a] = o[a] + (float)idx[a] * dx;
    const collider_pose P = poses[k];
    for (int a = 0; a < 3; ++a) r[a] = xn[a] - P.center[a];
    m3_apply_t(P.R, r, xl);
    mesh_samples m;
    collider_mesh_samples(&bp, &bp.colliders[k], &P, xl, &m);
    vals[i] = m;
  }
}

/* Grid update of buffer g (velocity from momentum, gravity, walls; untouched blocks skipped)
 * fused with clearing the other buffer where the step before touched it. One thread per node;
 * a node's channels read and written as one vector (node_load, node_store).
 * COL: the scene has colliders. The collider code (a mesh's level-set stencils) is compiled only
 * into the kernel of scenes that have them: 40 registers without (CUDA 13, sm_90), with them 80,
 * capped at 64 by GRID_MIN_CTAS (56 bytes spilled, on the collider path). */
#define PEER_BATCH 3    /* island peers whose copies of a block k_grid loads at once (3: every peer of 4 GPUs) */
#define GRID_MIN_CTAS 4 /* CUDA blocks of k_grid an SM must hold at once */
template <bool DET, bool COL>
__global__ static void __launch_bounds__(GRID_BLOCKS_PER_CTA * BLOCK_NODES, GRID_MIN_CTAS)
k_grid(step_ctl *__restrict__ ctl, size_t n_blocks, float dx, float3 origin, float3 gravity, boundary_params bp,
       const collider_pose *__restrict__ poses, const col_box *__restrict__ wbox,
       const uint64_t *__restrict__ block_code, uint8_t *__restrict__ touched, float *__restrict__ g,
       uint8_t *__restrict__ touched_next, float *__restrict__ g_next, const uint8_t *__restrict__ shared,
       int part, float *__restrict__ g0, float *__restrict__ g0_next, const int32_t *__restrict__ tags,
       island_view iv, float *__restrict__ vel, float *__restrict__ vel0, const long long *__restrict__ ig,
       long long *__restrict__ ig_next, double inv_sm, double inv_sp, const int *__restrict__ cc_index,
       const int32_t *__restrict__ cc_slot, const mesh_samples *__restrict__ cc_vals,
       const int32_t *__restrict__ list, const int *__restrict__ list_n) {
  if (ctl->done) return; /* uniform over the CUDA block */
  stamp(ctl, ST_GRID);
  if (blockIdx.x == 0 && threadIdx.x == 0 && ctl->projected) ctl->projected = 0; /* the P2G before took it */
  /* the j-th block, or with list (GRID_SHARED: the shared blocks, shared_list) the list's j-th of
   * *list_n; past either end none (n_blocks) */
  const size_t j = (size_t)blockIdx.x * GRID_BLOCKS_PER_CTA + threadIdx.x / BLOCK_NODES;
  const size_t blk = !list ? j : j < (size_t)*list_n ? (size_t)list[j] : n_blocks;
  const int nd = threadIdx.x % BLOCK_NODES; /* = sparse_node_in_block(li, lj, lk) */
  /* part (enum grid_part): blocks shared with other ranks, the others, or all */
  const int inside = blk < n_blocks && (part == GRID_ALL || (part & (shared[blk] ? GRID_SHARED : GRID_INTERIOR)));
  const int clear = inside && touched_next[blk];
  __syncthreads(); /* every thread has read its block's flag before one of them clears it */
  if (!inside) return;
  const int ich = g0 ? 7 : 4; /* DET: int channels per node */
  if (clear) {
    if (DET) { /* P2G writes only the int sums; the float grid is rewritten below where touched */
      for (int ch = 0; ch < ich; ++ch) ig_next[(blk * ich + ch) * BLOCK_NODES + nd] = 0;
    } else {
      node_store(g_next + blk * BLOCK_FLOATS, nd, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
      if (g0_next)
        for (int ch = 0; ch < 3; ++ch) g0_next[blk * OLD_FLOATS + ch * BLOCK_NODES + nd] = 0.0f;
    }
    if (nd == 0) touched_next[blk] = 0;
  }
  if (!touched[blk]) return;
  /* p2p_atomics: a block another member owns holds only this member's part; k_pull copies the
   * owner's result, and the owner's copy already holds every part (k_push): no peer sums */
  if (iv.own && iv.own[blk] >= 0) return;
  const int peers = iv.own ? 0 : iv.np;
  float *gd = g + blk * BLOCK_FLOATS;
  float sum[4], sum0[3] = {0.0f, 0.0f, 0.0f};
  if (DET) {
    /* the fixed-point sums, own and the peers' copies (P2P, where they touched the block this
     * step), added as integers, so that the result does not depend on the split; then as floats,
     * once; a node without mass gets zeros */
    long long acc[7];
    const long long *ib = ig + blk * ich * BLOCK_NODES + nd;
    for (int ch = 0; ch < ich; ++ch) acc[ch] = ib[ch * BLOCK_NODES];
    for (int q = 0; q < peers; ++q) {
      const int32_t t = tags[blk * iv.np + q];
      if (t < 0 || !iv.peer_touched[q][t]) continue;
      const long long *pb = iv.peer_ig[q] + (size_t)t * ich * BLOCK_NODES + nd;
      for (int ch = 0; ch < ich; ++ch) acc[ch] += pb[ch * BLOCK_NODES];
    }
    const int empty = acc[0] == 0;
    sum[0] = empty ? 0.0f : fix_from(acc[0], inv_sm);
    for (int a = 1; a < 4; ++a) sum[a] = empty ? 0.0f : fix_from(acc[a], inv_sp);
    if (g0)
      for (int a = 0; a < 3; ++a) sum0[a] = empty ? 0.0f : fix_from(acc[4 + a], inv_sp);
  } else {
    const float4 own = node_load(gd, nd);
    sum[0] = own.x, sum[1] = own.y, sum[2] = own.z, sum[3] = own.w;
    if (g0)
      for (int a = 0; a < 3; ++a) sum0[a] = g0[blk * OLD_FLOATS + a * BLOCK_NODES + nd];
    /* island: the peers' copies of this block (P2P), where they touched it this step; PEER_BATCH
     * peers at a time, their flags and then their sums loaded side by side (one NVLink round trip
     * each instead of one per peer), added in peer order as one at a time would */
    for (int q0 = 0; q0 < peers; q0 += PEER_BATCH) {
      int32_t t[PEER_BATCH];
      float4 pv[PEER_BATCH];
#pragma unroll
      for (int j = 0; j < PEER_BATCH; ++j) t[j] = q0 + j < peers ? tags[blk * iv.np + q0 + j] : -1;
#pragma unroll
      for (int j = 0; j < PEER_BATCH; ++j)
        if (t[j] >= 0 && !iv.peer_touched[q0 + j][t[j]]) t[j] = -1;
#pragma unroll
      for (int j = 0; j < PEER_BATCH; ++j)
        if (t[j] >= 0) pv[j] = node_load(iv.peer_grid[q0 + j] + (size_t)t[j] * BLOCK_FLOATS, nd);
#pragma unroll
      for (int j = 0; j < PEER_BATCH; ++j) {
        if (t[j] < 0) continue;
        sum[0] += pv[j].x, sum[1] += pv[j].y, sum[2] += pv[j].z, sum[3] += pv[j].w;
        if (g0)
          for (int a = 0; a < 3; ++a)
            sum0[a] += iv.peer_grid0[q0 + j][(size_t)t[j] * OLD_FLOATS + a * BLOCK_NODES + nd];
      }
    }
  }
  /* one GPU and p2p_atomics: velocities in place; island: to vel, since peers read P[par] (see the island).
   * DET: the float buffers hold no sums (P2G writes only ig), so every channel is written. */
  float *out = vel ? vel + blk * BLOCK_FLOATS : gd;
  float *out0 = vel0 ? vel0 : g0;
  const float m = sum[0];
  if (m <= 0.0f) {
    if (vel || DET) node_store(out, nd, make_float4(0.0f, 0.0f, 0.0f, 0.0f));
    if (vel0 || (DET && g0))
      for (int a = 0; a < 3; ++a) out0[blk * OLD_FLOATS + a * BLOCK_NODES + nd] = 0.0f;
    return;
  }
  const float dt = ctl->dt;
  int c[3];
  sparse_block_coords(block_code[blk], c);
  const float gr[3] = {gravity.x, gravity.y, gravity.z}, o[3] = {origin.x, origin.y, origin.z};
  const float inv_m = 1.0f / m;
  float v[3];
  for (int a = 0; a < 3; ++a) v[a] = sum[a + 1] * inv_m + gr[a] * dt;
  if (g0) /* ASFLIP: the velocity before the update */
    for (int a = 0; a < 3; ++a) out0[blk * OLD_FLOATS + a * BLOCK_NODES + nd] = sum0[a] * inv_m;
  const int idx[3] = {4 * c[0] + nd / 16, 4 * c[1] + (nd / 4) % 4, 4 * c[2] + nd % 4};
  float xn[3];
  for (int a = 0; a < 3; ++a) xn[a] = o[a] + (float)idx[a] * dx;
  /* boundary_apply_posed, each collider only inside its box; poses at ctl->t_pose, the step's end (k_poses) */
  if (COL)
    for (int k = 0; k < bp.n_colliders; ++k) {
      if (!in_box(wbox[k], xn)) continue;
      const int q = cc_index ? cc_index[k] : -1;
      const int32_t slot = q >= 0 ? cc_slot[(size_t)q * n_blocks + blk] : -1;
      if (slot >= 0) collider_apply_cached(&bp, &bp.colliders[k], &poses[k], xn, &cc_vals[(size_t)slot * BLOCK_NODES + nd], v);
      else collider_apply(&bp, &bp.colliders[k], &poses[k], xn, v);
    }
  boundary_apply_faces(&bp, xn, v);
  node_store(out, nd, make_float4(m, v[0], v[1], v[2])); /* in place (one GPU), m is the mass read */
}

/* Island tagging, at rebuild-mapping: for each of this member's blocks and each peer, the
 * peer's dense index of the same block (its hash table, read by P2P), or -1. */
typedef struct peer_tables {
  int np;
  const unsigned long long *keys[MAX_GPUS - 1]; /* NULL: the peer holds no blocks */
  const int32_t *vals[MAX_GPUS - 1];
  size_t mask[MAX_GPUS - 1];
} peer_tables;

__global__ static void k_tag(size_t n_blocks, const uint64_t *__restrict__ codes, peer_tables pt,
                             int32_t *__restrict__ tags) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_blocks * pt.np) return;
  const size_t b = i / pt.np;
  const int q = (int)(i % pt.np);
  tags[i] = pt.keys[q] ? table_find(pt.keys[q], pt.vals[q], pt.mask[q], codes[b]) : -1;
}

/* The particle collision step (physics/boundary.h) of one particle. Only the COL variants of
 * k_g2p and k_g2p2g call it (scenes with a slip or separate collider). Out of line, CUDA 13 for
 * sm_90 gives k_g2p 80 registers (ASFLIP: 80; without it 56 and 72) and k_g2p2g 96 instead of
 * 80 (ASFLIP: about 128 either way); inlined, every variant took about 128.
 * Scenes whose colliders are all sticky skip it too (boundary.h: sticky colliders keep what they
 * hold). Position and velocity travel by value. */
struct pushed {
  float x[3], v[3];
};
__device__ __noinline__ static pushed push_particle(const boundary_params *bp, const collider_pose *poses, pushed p,
                                                    float room) {
  boundary_push_posed(bp, poses, p.x, p.v, room);
  return p;
}

/* p2p_atomics, after k_tag: each block's owner, the lowest member index holding it, as this
 * member's peer slot (the peers below this member, me of them, come first in slot order), or -1
 * when this member is the lowest. */
__global__ static void k_owner(size_t n_blocks, int np, int me, const int32_t *__restrict__ tags,
                               int8_t *__restrict__ own) {
  const size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (b >= n_blocks) return;
  int o = -1;
  for (int q = 0; q < me && q < np; ++q)
    if (tags[b * np + q] >= 0) {
      o = q;
      break;
    }
  own[b] = (int8_t)o;
}

/* k_push and k_pull, one thread per node: this thread's node nd of block blk, where another
 * member q owns the block (own) and this member touched it, and t the block's index on q (its
 * tag, >= 0 since the owner holds the block: k_owner). 0: nothing to move for this thread. */
__device__ __forceinline__ int peer_node(size_t n_blocks, const uint8_t *__restrict__ touched,
                                         const int8_t *__restrict__ own, const int32_t *__restrict__ tags, int np,
                                         size_t *blk, int *nd, int *q, size_t *t) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_blocks * BLOCK_NODES) return 0;
  *blk = i / BLOCK_NODES;
  *nd = (int)(i % BLOCK_NODES);
  *q = own[*blk];
  if (*q < 0 || !touched[*blk]) return 0;
  *t = (size_t)tags[*blk * np + *q];
  return 1;
}

/* p2p_atomics (see the island): this member's part of each block it touched and another member
 * owns, added into the owner's copy of grid buffer par (system-scope atomics through P2P
 * pointers; zeros skipped), and the owner's touched flag set. DET: the int64 sums (ich channels;
 * the float buffers hold no P2G sums). One thread per node. */
template <bool DET>
__global__ static void k_push(const step_ctl *__restrict__ ctl, size_t n_blocks, const uint8_t *__restrict__ touched,
                              const int8_t *__restrict__ own, const int32_t *__restrict__ tags, int np,
                              const float *__restrict__ g, const float *__restrict__ g0,
                              const long long *__restrict__ ig, int ich, peer_blocks pb) {
  if (ctl->done) return;
  size_t blk, t;
  int nd, q;
  if (!peer_node(n_blocks, touched, own, tags, np, &blk, &nd, &q, &t)) return;
  if (DET) {
    unsigned long long *dst = reinterpret_cast<unsigned long long *>(pb.ig[q]) + t * ich * BLOCK_NODES + nd;
    for (int ch = 0; ch < ich; ++ch) {
      const long long v = ig[(blk * ich + ch) * BLOCK_NODES + nd];
      if (v != 0) atomicAdd_system(dst + ch * BLOCK_NODES, (unsigned long long)v); /* two's complement */
    }
  } else {
    float *dst = pb.grid[q] + t * BLOCK_FLOATS;
    for (int ch = 0; ch < 4; ++ch) {
      const float v = g[blk * BLOCK_FLOATS + gidx(nd, ch)];
      if (v != 0.0f) atomicAdd_system(dst + gidx(nd, ch), v);
    }
    if (g0)
      for (int a = 0; a < 3; ++a) {
        const float v = g0[blk * OLD_FLOATS + a * BLOCK_NODES + nd];
        if (v != 0.0f) atomicAdd_system(pb.grid0[q] + t * OLD_FLOATS + a * BLOCK_NODES + nd, v);
      }
  }
  if (nd == 0) pb.touched[q][t] = 1; /* the owner's P2G may store the same 1 */
  __threadfence_system(); /* the additions are performed before the barrier that follows this kernel */
}

/* p2p_atomics, after the barrier that follows the owners' grid update: each block this member
 * touched and another member owns, copied from the owner (P2P reads) over this member's part, so
 * that G2P reads the owner's velocities (and, with ASFLIP, grid0's). One thread per node. */
__global__ static void k_pull(const step_ctl *__restrict__ ctl, size_t n_blocks, const uint8_t *__restrict__ touched,
                              const int8_t *__restrict__ own, const int32_t *__restrict__ tags, int np,
                              float *__restrict__ g, float *__restrict__ g0, peer_blocks pb) {
  if (ctl->done) return;
  size_t blk, t;
  int nd, q;
  if (!peer_node(n_blocks, touched, own, tags, np, &blk, &nd, &q, &t)) return;
  const float *src = pb.grid[q] + t * BLOCK_FLOATS;
  float *dst = g + blk * BLOCK_FLOATS;
#if GRID_VEC4
  *reinterpret_cast<float4 *>(dst + gidx(nd, 0)) = *reinterpret_cast<const float4 *>(src + gidx(nd, 0));
#else
  for (int ch = 0; ch < 4; ++ch) dst[gidx(nd, ch)] = src[gidx(nd, ch)];
#endif
  if (g0)
    for (int a = 0; a < 3; ++a)
      g0[blk * OLD_FLOATS + a * BLOCK_NODES + nd] = pb.grid0[q][t * OLD_FLOATS + a * BLOCK_NODES + nd];
}

/* G2P: APIC velocity and affine matrix C = (4/dx^2) sum w v (x_i - x_p)^T, the deformation
 * update (constitutive_advance_F), advection clamped to the domain, the particle collision step,
 * the inner-free-zone check, largest speed, and the non-finite / runaway check. One warp per
 * packet; flags reduced over the warp first.
 * The G2P of one warp's packet p (all 32 lanes call it). OLD (ASFLIP): the velocity before the
 * update from grid0 (g2p_mats is then never NULL). MAT: G2P may read the material, where
 * g2p_mats is not NULL (false: the load and the fluid's branch of constitutive_advance_F are
 * compiled out: k_g2p without colliders 56 registers instead of 63, CUDA 13, sm_90). COL: the
 * scene has a slip or separate collider (cuda_state.push): COL_INLINE (k_g2p2g) takes the
 * particle collision step here; COL_DEFER (k_g2p) only tests each particle against the
 * colliders' world boxes (wbox, k_poses) and leaves those inside one to k_collide, which pushes
 * them and ends their G2P as here (push_mask: the lanes left; push_room: how far each may
 * move). So k_g2p keeps the registers of a G2P without colliders, and the
 * collision step's code runs only for particles near a collider. */
enum { COL_NONE = 0, COL_INLINE = 1, COL_DEFER = 2 };

/* The warp's flags: its largest speed, and from leave (leave_bits) whether a particle left the
 * inner free zone. */
__device__ __forceinline__ void warp_flags(step_ctl *ctl, unsigned speed_bits, unsigned leave) {
  speed_bits = __reduce_max_sync(FULL, speed_bits);
  leave = __reduce_or_sync(FULL, leave);
  if ((threadIdx.x & 31) == 0) {
    if (speed_bits) atomicMax(&ctl->vmax_bits, speed_bits);
    if (leave & 1u) atomicOr(&ctl->leave, 1u);
  }
}

/* A particle's flag along an axis from its base node b: 1 where it lies outside the inner free
 * zone [zone_lo, zone_hi] of its particle block P. */
__device__ __forceinline__ unsigned leave_bits(int b, int P, int zone_lo, int zone_hi) {
  const int off = b - BLOCK_EDGE * P;
  return off < zone_lo || off > zone_hi;
}

template <bool OLD, int COL, bool MAT>
__device__ __forceinline__ void g2p_warp(step_ctl *ctl, float dt, size_t p, const int2 *__restrict__ hdr,
                                         const int32_t *__restrict__ pb_coord, const int32_t *__restrict__ pb_nbr,
                                         float *__restrict__ pk, const uint64_t *__restrict__ pid, float3 origin,
                                         float3 dmin, float3 dmax, float dx, float inv_dx,
                                         const float *__restrict__ grid, int inner_lo, int inner_hi,
                                         const material_params *__restrict__ g2p_mats,
                                         const float *__restrict__ grid0, const boundary_params &bp,
                                         const collider_pose *__restrict__ poses, const col_box *__restrict__ wbox,
                                         unsigned *__restrict__ push_mask, float *__restrict__ push_room,
                                         float4 *tile) {
  const int lane = threadIdx.x & 31;
  const int2 h = hdr[p];
  const int P[3] = {pb_coord[3 * h.x], pb_coord[3 * h.x + 1], pb_coord[3 * h.x + 2]};
  const int my_nbr = lane < 27 ? pb_nbr[27 * (size_t)h.x + lane] : 0;
  float *base = pk + p * PK_FLOATS + lane;
  const int valid = lane < h.y;
  float x[3] = {0, 0, 0};
  int d[3] = {0, 0, 0}, ok = 0;
  float fx[3] = {1, 1, 1};
  if (valid) {
    for (int a = 0; a < 3; ++a) x[a] = base[(A_X + a) * LANES];
    ok = locate(x, origin, inv_dx, P, d, fx);
    if (!ok) flag_bad(ctl, pid[p * LANES + lane]);
  }
  float w[3][3];
  for (int a = 0; a < 3; ++a) {
    float dw[3];
    bspline_weights(fx[a], w[a], dw);
  }
  float v[3] = {0, 0, 0}, B[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0}, vold[3] = {0, 0, 0};
  /* The material, read only where G2P needs it (g2p_mats not NULL: a material uses ASFLIP or is
   * weakly compressible): other scenes skip the load and advance F <- (I + dt C) F. */
  material_params mat;
  mat.transfer = TRANSFER_APIC;
  mat.model = -1;
  if (MAT && ok && g2p_mats) mat = g2p_mats[__float_as_int(base[A_MAT * LANES])];
  const int flip = OLD && mat.transfer == TRANSFER_ASFLIP; /* OLD: APIC variants compile no ASFLIP */
  (void)g2p_nodes<OLD>(ok, d, fx, w, dx, my_nbr, grid, grid0, flip, v, B, vold, tile); /* gpu/p2g.cuh */
  unsigned speed_bits = 0, leave = 0;
  int defer = 0; /* COL_DEFER: inside a collider's box, left to k_collide */
  if (ok) {
    const float k = 4.0f * inv_dx * inv_dx;
    float F[9], Fn[9], C[9];
    for (int q = 0; q < 9; ++q) {
      F[q] = Fn[q] = base[(A_F + q) * LANES];
      C[q] = k * B[q];
    }
    /* APIC moves with v; ASFLIP keeps vnew and moves with vmove (physics/transfer.h) */
    float vmove[3] = {v[0], v[1], v[2]};
    if (flip) {
      float vp[3], vnew[3];
      for (int a = 0; a < 3; ++a) vp[a] = base[(A_V + a) * LANES];
      transfer_velocity(&mat, dt, vp, v, vold, m3_trace(C), m3_det(F), vnew, vmove);
      for (int a = 0; a < 3; ++a) v[a] = vnew[a];
    }
    constitutive_advance_F(&mat, dt, C, Fn); /* F before the update stays in F for transfer_velocity */
    const float detF = m3_det(Fn);
    for (int q = 0; q < 9; ++q) base[(A_C + q) * LANES] = C[q], base[(A_F + q) * LANES] = Fn[q];
    for (int a = 0; a < 3; ++a) x[a] += dt * vmove[a];
    const float moved = dt * fmaxf(fabsf(vmove[0]), fmaxf(fabsf(vmove[1]), fabsf(vmove[2])));
    if (COL == COL_INLINE) { /* the particle collision step (physics/boundary.h), poses of k_poses */
      pushed q = {{x[0], x[1], x[2]}, {v[0], v[1], v[2]}};
      q = push_particle(&bp, poses, q, boundary_push_room(dx, moved));
      for (int a = 0; a < 3; ++a) x[a] = q.x[a], v[a] = q.v[a];
    }
    if (COL == COL_DEFER)
      for (int c = 0; c < bp.n_colliders; ++c) defer |= in_box(wbox[bp.n_colliders + c], x);
    if (defer) { /* k_collide pushes it and finishes it; a non-finite F is flagged here */
      for (int a = 0; a < 3; ++a) base[(A_V + a) * LANES] = v[a], base[(A_X + a) * LANES] = x[a];
      push_room[p * LANES + lane] = boundary_push_room(dx, moved);
      if (!isfinite(detF)) flag_bad(ctl, pid[p * LANES + lane]);
    } else { /* (k_collide ends its particles with the same lines) */
      const float lo[3] = {dmin.x, dmin.y, dmin.z}, hi[3] = {dmax.x, dmax.y, dmax.z};
      float sp2 = 0.0f;
      for (int a = 0; a < 3; ++a) {
        sp2 += v[a] * v[a];
        x[a] = fminf(fmaxf(x[a], lo[a]), hi[a]);
      }
      for (int a = 0; a < 3; ++a) base[(A_V + a) * LANES] = v[a], base[(A_X + a) * LANES] = x[a];
      const float runaway = DR_RUNAWAY_CELLS * dx / dt;
      if (!isfinite(sp2) || !isfinite(x[0] + x[1] + x[2]) || !isfinite(detF) || sp2 > runaway * runaway) {
        flag_bad(ctl, pid[p * LANES + lane]);
      } else {
        speed_bits = __float_as_uint(sqrtf(sp2));
        for (int a = 0; a < 3; ++a) {
          const int b = bspline_base((x[a] - (a == 0 ? origin.x : a == 1 ? origin.y : origin.z)) * inv_dx);
          leave |= leave_bits(b, P[a], inner_lo, inner_hi);
        }
      }
    }
  }
  if (COL == COL_DEFER) {
    const unsigned mask = __ballot_sync(FULL, defer);
    if (lane == 0) push_mask[p] = mask;
  }
  warp_flags(ctl, speed_bits, leave);
}

/* The particle collision step of the particles k_g2p left (push_mask), then the rest of their
 * G2P (as g2p_warp ends it). One warp per packet; a packet with no such lane returns at once. */
__global__ static void PARTICLE_BOUNDS
k_collide(step_ctl *ctl, size_t n_packets, const int2 *__restrict__ hdr, const int32_t *__restrict__ pb_coord,
          float *__restrict__ pk, const uint64_t *__restrict__ pid, float3 origin, float3 dmin, float3 dmax, float dx,
          float inv_dx, const unsigned *__restrict__ push_mask, const float *__restrict__ push_room,
          const __grid_constant__ boundary_params bp, const collider_pose *__restrict__ poses, int zone_lo,
          int zone_hi) {
  if (ctl->done) return;
  const size_t p = (size_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
  if (p >= n_packets) return;
  const unsigned mask = push_mask[p];
  if (!mask) return; /* the whole warp */
  const int lane = threadIdx.x & 31;
  unsigned speed_bits = 0, leave = 0;
  if ((mask >> lane) & 1u) {
    const int2 h = hdr[p];
    const int P[3] = {pb_coord[3 * h.x], pb_coord[3 * h.x + 1], pb_coord[3 * h.x + 2]};
    float *base = pk + p * PK_FLOATS + lane;
    float x[3], v[3];
    for (int a = 0; a < 3; ++a) x[a] = base[(A_X + a) * LANES], v[a] = base[(A_V + a) * LANES];
    boundary_push_posed(&bp, poses, x, v, push_room[p * LANES + lane]);
    /* the end of g2p_warp, as there (a function shared by both gave k_g2p 71 registers, not 56) */
    const float lo[3] = {dmin.x, dmin.y, dmin.z}, hi[3] = {dmax.x, dmax.y, dmax.z};
    float sp2 = 0.0f;
    for (int a = 0; a < 3; ++a) {
      sp2 += v[a] * v[a];
      x[a] = fminf(fmaxf(x[a], lo[a]), hi[a]);
    }
    for (int a = 0; a < 3; ++a) base[(A_V + a) * LANES] = v[a], base[(A_X + a) * LANES] = x[a];
    const float runaway = DR_RUNAWAY_CELLS * dx / ctl->dt;
    if (!isfinite(sp2) || !isfinite(x[0] + x[1] + x[2]) || sp2 > runaway * runaway) {
      flag_bad(ctl, pid[p * LANES + lane]);
    } else {
      speed_bits = __float_as_uint(sqrtf(sp2));
      for (int a = 0; a < 3; ++a) {
        const int b = bspline_base((x[a] - (a == 0 ? origin.x : a == 1 ? origin.y : origin.z)) * inv_dx);
        leave |= leave_bits(b, P[a], zone_lo, zone_hi);
      }
    }
  }
  warp_flags(ctl, speed_bits, leave);
}

/* G2P: APIC velocity and affine matrix C = (4/dx^2) sum w v (x_i - x_p)^T, F <- (I + dt C) F,
 * advection clamped to the domain, the inner-free-zone check, largest speed, and the non-finite /
 * runaway check. One warp per packet; flags reduced over the warp first. COL: particles inside a
 * collider's world box are left to k_collide (the particle collision step), which k_g2p's launch
 * queues after it. (CUDA 13, sm_90: every COL variant now has the registers of its variant
 * without colliders, 56 / 63 / 72, where the collision step inline took 80. Crawling in Snow
 * moved within its run-to-run noise: docs/performance.md.) */
template <bool OLD, bool COL, bool MAT>
__global__ static void PARTICLE_BOUNDS
k_g2p(step_ctl *ctl, size_t n_packets, const int2 *__restrict__ hdr, const int32_t *__restrict__ pb_coord,
      const int32_t *__restrict__ pb_nbr, float *__restrict__ pk, const uint64_t *__restrict__ pid, float3 origin,
      float3 dmin, float3 dmax, float dx, float inv_dx, const float *__restrict__ grid,
      const material_params *__restrict__ g2p_mats, const float *__restrict__ grid0,
      const __grid_constant__ boundary_params bp, const collider_pose *__restrict__ poses,
      const col_box *__restrict__ wbox, unsigned *__restrict__ push_mask, float *__restrict__ push_room, int zone_lo,
      int zone_hi, const int32_t *__restrict__ order) {
  __shared__ __align__(16) float4 s_tile[WARPS][G2P_TILE_FLOAT4S(OLD)];
  if (ctl->done) return;
  stamp(ctl, ST_G2P);
  const int warp = threadIdx.x >> 5;
  const size_t i = (size_t)blockIdx.x * WARPS + warp;
  if (i >= n_packets) return;
  const size_t p = order ? (size_t)order[i] : i; /* g2p_interior: n_packets of the list order */
  g2p_warp<OLD, COL ? COL_DEFER : COL_NONE, MAT>(ctl, ctl->dt, p, hdr, pb_coord, pb_nbr, pk, pid, origin, dmin, dmax,
                                           dx, inv_dx, grid, zone_lo, zone_hi, g2p_mats, grid0, bp, poses, wbox,
                                           push_mask, push_room, G2P_TILE_OF(OLD, s_tile[warp]));
}

/* G2P2G (small counts, fixed steps): this step's G2P from grid buffer g, then, in the same
 * kernel, the next step's P2G into the other buffer. A particle scatters once after moving (less
 * than a cell) before the host can react to its flag, plus once per step that still runs on this
 * mapping (lag_of): the zone [zone_lo, zone_hi] (the free zone less lag_of + 1 cells a side)
 * leaves that much slack, so every scattered stencil stays inside the physical blocks. The
 * warp's own writes to its packet are visible to its lanes after __syncwarp. */
template <bool OLD, bool DET, bool COL>
__global__ static void PARTICLE_BOUNDS
k_g2p2g(step_ctl *ctl, size_t n_packets, const int2 *__restrict__ hdr, const int32_t *__restrict__ pb_coord,
        const int32_t *__restrict__ pb_nbr, float *__restrict__ pk, const uint64_t *__restrict__ pid,
        const material_params *__restrict__ mats, float3 origin, float3 dmin, float3 dmax, float dx, float inv_dx,
        const float *__restrict__ grid, float *__restrict__ grid_next, uint8_t *__restrict__ touched_next,
        const float *__restrict__ grid0, float *__restrict__ grid0_next, fixp fp,
        const __grid_constant__ boundary_params bp, const collider_pose *__restrict__ poses, int g2p_mat, int zone_lo,
        int zone_hi) {
  __shared__ __align__(16) float s_p2g[WARPS][P2G_SMEM(OLD, DET, G2P2G_NODESUM)];
  __shared__ unsigned s_sort[WARPS][LANES];
  __shared__ __align__(16) float4 s_tile[WARPS][G2P_TILE_FLOAT4S(OLD)];
  if (ctl->done) return;
  stamp(ctl, ST_G2P);
  const int warp = threadIdx.x >> 5;
  const size_t p = (size_t)blockIdx.x * WARPS + warp;
  if (p >= n_packets) return;
  const float dt = ctl->dt;
  g2p_warp<OLD, COL ? COL_INLINE : COL_NONE, true>(ctl, dt, p, hdr, pb_coord, pb_nbr, pk, pid, origin, dmin, dmax, dx,
                                             inv_dx, grid, zone_lo, zone_hi, g2p_mat ? mats : nullptr, grid0, bp,
                                             poses, nullptr, nullptr, nullptr, G2P_TILE_OF(OLD, s_tile[warp]));
  __syncwarp();
  p2g_any<OLD, DET, G2P2G_NODESUM>(ctl, dt, p, hdr, pb_coord, pb_nbr, pk, pid, mats, origin, dx, inv_dx,
                                         grid_next, touched_next, grid0_next, s_p2g[warp], s_sort[warp], fp, 1);
}

/* Material of the particle with the given id (for the message about a bad particle). */
__global__ static void k_find_material(size_t n_slots, const uint64_t *pid, const int2 *hdr, const float *pk,
                                       uint64_t want, step_ctl *ctl) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_slots) return;
  const size_t p = i / LANES;
  const int lane = (int)(i % LANES);
  if (lane < hdr[p].y && pid[i] == want) ctl->bad_material = __float_as_int(pk[p * PK_FLOATS + A_MAT * LANES + lane]);
}

/* ---- rebuild-mapping ---------------------------------------------------------------------- */

/* CUB calls: query the scratch size, grow the one scratch buffer if needed, run. */
#define CUB_RUN(call_with_temp)                                                                    \
  do {                                                                                             \
    size_t temp_bytes = 0;                                                                         \
    void *temp_ptr = NULL;                                                                         \
    CU(call_with_temp);                                                                            \
    DVEC_PK(s->temp, temp_bytes, "CUB temporary storage");                                         \
    temp_bytes = s->temp.bytes;                                                                    \
    temp_ptr = s->temp.ptr;                                                                        \
    CU(call_with_temp);                                                                            \
  } while (0)

/* DRIFT_TRACE=1 in the environment: one line per host-side event (log.h). */
#define TRACE(...) log_trace(__VA_ARGS__)

/* The buffers through which k_g2p leaves particles to k_collide, for n_packets packets (only in
 * scenes with a slip or separate collider). */
static int push_buffers(cuda_state *s, size_t n_packets) {
  if (!s->push) return DR_OK;
  DVEC(s->push_mask, n_packets * sizeof(unsigned), "particle collision step");
  DVEC(s->push_room, n_packets * LANES * sizeof(float), "particle collision step");
  return DR_OK;
}

/* One int from the device, through pinned memory (a pageable destination makes the copy wait
 * for a staging buffer besides the stream). */
static int read_count(cuda_state *s, const void *dev, int *out) {
  CU(cudaMemcpyAsync(&s->h_rc->n, dev, sizeof *out, cudaMemcpyDeviceToHost, s->stream));
  CU(cudaStreamSynchronize(s->stream));
  *out = s->h_rc->n;
  TRACE("count %d", *out);
  return DR_OK;
}

/* Deterministic mode: int64 values per grid block (4 channels, 7 with ASFLIP, x 64 nodes). */
static size_t int_floats(const cuda_state *s) { return (size_t)(s->asflip ? 7 : 4) * BLOCK_NODES; }

/* Deterministic mode's P2G target for grid buffer par (unused in float mode). */
static fixp fix_of(const cuda_state *s, int par) {
  fixp f = {s->det ? dp<long long>(s->igrid[par]) : NULL, s->prm.fix_scale[0], s->prm.fix_scale[1]};
  return f;
}

static void dvec_swap(dvec *a, dvec *b) {
  const dvec t = *a;
  *a = *b;
  *b = t;
}

/* G2P2G across a rebuild-mapping. While primed, grid[par] holds the next step's P2G, and that
 * P2G already applied the step's plastic return mapping to the particles' F and logJp; running
 * P2G again on the new mapping would apply it twice (NACC: hardening twice, since the hardened
 * p0 moves the yield surface). So the sums are kept: before the rebuild replaces them, the old
 * block codes, touched[par] and the sums of par (grid and, with ASFLIP, grid0; igrid in
 * deterministic mode) are swapped into the old_* buffers (no copy; the buffers that come in are
 * resized and cleared by the rebuild like any other), k_remap_find gives each touched old block
 * its new index, and after the new mapping is built k_remap_move puts its sums there, in buffer
 * 0 (the rebuild restarts at parity 0), with buffer 1 cleared and untouched, as a step expects
 * its next buffer.
 *
 * Every touched old block is in the new mapping. A block is touched only where the primed P2G
 * wrote (the mark goes with the write, p2g_warp; k_grid cleared the buffer's other marks before
 * it), i.e. at the stencil nodes b..b+2 of some particle's base node b, and that scatter is
 * complete: the G2P2G zone test (k_g2p2g's zone) leaves a cell of slack for the move before
 * it and one per queued step (the top of this file), so each stencil lay inside the particle's
 * old physical blocks (a particle faster than DR_RUNAWAY_CELLS, or one whose stencil left them,
 * is flagged, fail_bad, and the run stops). Nothing moves the particles between that scatter
 * and this rebuild, which assigns each to the particle block P = (b + 1) >> 2 of the same base
 * node (k_keys computes b as locate() does), so b - 4P is in [-1, 2] and the stencil in [-1, 4]
 * from 4P, inside the 3x3x3 physical blocks of P (nodes -4..7 from 4P), all of which the new
 * mapping holds. k_remap_find checks it anyway: a missing block fails the run (remap_lost). */
static int keep_primed(cuda_state *s, size_t old_nb) {
  const int q = s->par;
  dvec_swap(&s->block_code, &s->old_code);
  dvec_swap(&s->touched[q], &s->old_touched);
  if (s->det) { /* P2G wrote only the int sums */
    dvec_swap(&s->igrid[q], &s->old_igrid);
  } else {
    dvec_swap(&s->grid[q], &s->old_grid);
    if (s->asflip) dvec_swap(&s->grid0[q], &s->old_grid0);
  }
  DVEC(s->old_to_new, old_nb * sizeof(int32_t), "grid blocks (G2P2G across a rebuild)");
  return DR_OK;
}

static int remap_lost(const cuda_state *s, const rebuild_count *rc) {
  int c[3];
  sparse_block_coords(rc->lost_code, c);
  return dr_fail(DR_EINTERNAL,
                 "cuda backend: rebuild-mapping %llu under G2P2G: grid block %llu (block coordinates %d %d %d) holds "
                 "primed P2G sums but is not among the %d blocks of the new mapping, which holds the 3x3x3 physical "
                 "blocks of every particle's block (keep_primed): a particle scattered outside them",
                 (unsigned long long)s->rebuilds, rc->lost_code, c[0], c[1], c[2], rc->n);
}

/* The collider cache's slots for the new mapping (see k_cc_flag): the blocks within each cached
 * collider's box, numbered; their samples are taken at the next grid update (cc_state: none). */
static int cc_slots(cuda_state *s) {
  s->cc_total = 0;
  if (s->n_cc == 0 || s->n_blocks == 0) return DR_OK;
  cudaStream_t st = s->stream;
  const size_t nb = s->n_blocks;
  DVEC(s->cc_slot, (size_t)s->n_cc * nb * sizeof(int32_t), "collider cache");
  DVEC(s->cc_scratch, 2 * (size_t)s->n_cc * nb * sizeof(uint32_t), "collider cache");
  int count[COLCACHE_MAX];
  for (int q = 0; q < s->n_cc; ++q) {
    uint32_t *flag = dp<uint32_t>(s->cc_scratch) + 2 * (size_t)q * nb, *scan = flag + nb;
    k_cc_flag<<<blocks_for(nb, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        nb, dp<uint64_t>(s->block_code), make_float3(s->origin[0], s->origin[1], s->origin[2]), s->prm.dx,
        s->cc_box[q], flag);
    LAUNCHED("k_cc_flag");
    CUB_RUN(cub::DeviceScan::InclusiveSum(temp_ptr, temp_bytes, flag, scan, (int)nb, st));
    DR_TRY(read_count(s, scan + nb - 1, &count[q]));
    s->cc_total += (size_t)count[q];
  }
  if (s->cc_total == 0) return DR_OK;
  DVEC(s->cc_blocks, s->cc_total * sizeof(int2), "collider cache");
  DVEC(s->cc_vals, s->cc_total * BLOCK_NODES * sizeof(mesh_samples), "collider cache");
  int base = 0;
  for (int q = 0; q < s->n_cc; ++q) {
    const uint32_t *flag = dp<uint32_t>(s->cc_scratch) + 2 * (size_t)q * nb, *scan = flag + nb;
    k_cc_place<<<blocks_for(nb, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(nb, flag, scan, base, q,
                                                                          dp<int32_t>(s->cc_slot), dp<int2>(s->cc_blocks));
    LAUNCHED("k_cc_place");
    base += count[q];
  }
  CU(cudaMemsetAsync(s->cc_state.ptr, 0xff, 2 * (size_t)s->n_cc * sizeof(int), st)); /* no samples yet */
  TRACE("collider cache: %zu grid blocks of %zu", s->cc_total, nb);
  return DR_OK;
}

/* Steps 1 and 2 of a rebuild-mapping (rebuild_now) with sort keys of K bits (k_keys). */
template <typename K> static int sort_particles(cuda_state *s, int end_bit) {
  const size_t n = s->n, n_slots = s->n_packets * LANES;
  cudaStream_t st = s->stream;
  const float3 origin = make_float3(s->origin[0], s->origin[1], s->origin[2]);
  const int ns = (int)n_slots, ni = (int)n;
  TRACE("rebuild: %d-bit sort keys", (int)(8 * sizeof(K)));

  /* 1. Keys of every slot and a stable radix sort: valid particles first, by block and cell. */
  k_keys<K><<<blocks_for(n_slots, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      n_slots, dp<float>(s->pk[s->cur]), dp<int2>(s->hdr), origin, s->inv_dx, dp<uint8_t>(s->gone), s->n_gone,
      dp<K>(s->keys[0]), dp<uint32_t>(s->vals[0]));
  LAUNCHED("k_keys");
  s->n_gone = 0; /* the sort drops them: they are the slots past the n valid particles */
  CUB_RUN(cub::DeviceRadixSort::SortPairs(temp_ptr, temp_bytes, dp<K>(s->keys[0]), dp<K>(s->keys[1]),
                                          dp<uint32_t>(s->vals[0]), dp<uint32_t>(s->vals[1]), ns, 0, end_bit, st));
  const K *keys = dp<K>(s->keys[1]);

  /* 2. Particle blocks: runs of equal block code, numbered by an inclusive scan of the heads. */
  k_heads<K><<<blocks_for(n, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(n, keys, dp<int32_t>(s->head));
  LAUNCHED("k_heads");
  CUB_RUN(cub::DeviceScan::InclusiveSum(temp_ptr, temp_bytes, dp<int32_t>(s->head), dp<int32_t>(s->pblock), ni, st));
  int n_pb = 0;
  DR_TRY(read_count(s, dp<int32_t>(s->pblock) + (n - 1), &n_pb));
  s->n_pb = (size_t)n_pb;
  DVEC_GRID(s->pb_coord, 3 * s->n_pb * sizeof(int32_t), "particle blocks");
  DVEC_GRID(s->pb_start, (s->n_pb + 1) * sizeof(int32_t), "particle blocks");
  DVEC_GRID(s->pb_packets, (s->n_pb + 1) * sizeof(int32_t), "particle blocks");
  DVEC_GRID(s->pb_nbr, 27 * s->n_pb * sizeof(int32_t), "particle blocks");
  DVEC_GRID(s->nbr_codes[0], 27 * s->n_pb * sizeof(uint64_t), "physical block codes");
  DVEC_GRID(s->nbr_codes[1], 27 * s->n_pb * sizeof(uint64_t), "physical block codes");
  k_pblocks<K><<<blocks_for(n, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      n, keys, dp<int32_t>(s->pblock), dp<int32_t>(s->pb_start), dp<int32_t>(s->pb_coord),
      dp<uint64_t>(s->nbr_codes[0]));
  LAUNCHED("k_pblocks");
  return DR_OK;
}

/* The block codes of a rebuild-mapping on the host, early (ranks: blocks() asked for them once):
 * once the rebuild-mapping's count read has found them final, a copy on xstream beside the rest
 * of the rebuild-mapping (the particles' move, the hash table), so that blocks() waits for that
 * copy only and sim.c sets the rank exchange up while the device still moves the particles and
 * runs the next P2G (setup_exchange_during_p2g). Nothing writes block_code until the next
 * rebuild-mapping, which waits for the copy first (codes_wait). */
static int xstream_get(cuda_state *s);
static int host_pinned(void **p, size_t *cap, size_t need, const char *what);

static int codes_wait(cuda_state *s) {
  if (!s->codes_pending) return DR_OK;
  s->codes_pending = 0;
  CU(cudaEventSynchronize(s->codes_ev));
  return DR_OK;
}

static int codes_early(cuda_state *s, size_t nb) {
  if (!s->want_codes || nb == 0) return DR_OK;
  DR_TRY(codes_wait(s));
  DR_TRY(host_pinned((void **)&s->h_codes, &s->h_codes_cap, sizeof(uint64_t) * nb, "the block codes"));
  DR_TRY(xstream_get(s));
  if (!s->codes_ev) CU(cudaEventCreateWithFlags(&s->codes_ev, cudaEventDisableTiming));
  CU(cudaMemcpyAsync(s->h_codes, s->block_code.ptr, nb * sizeof(uint64_t), cudaMemcpyDeviceToHost, s->xstream));
  CU(cudaEventRecord(s->codes_ev, s->xstream));
  s->codes_pending = 1;
  s->h_codes_of = s->rebuilds + 1;
  return DR_OK;
}

static int rebuild_now(cuda_state *s) {
  const size_t n = s->n;
  cudaStream_t st = s->stream;
  s->graphs_valid = 0;
  const size_t old_nb = s->n_blocks;
  const int keep = s->primed && n > 0 && old_nb > 0; /* else the frame loop primes again */
  s->primed = keep;
  DR_TRY(codes_wait(s)); /* the early copy reads block_code, which this rebuild-mapping rewrites */
  if (keep) DR_TRY(keep_primed(s, old_nb));
  ++s->rebuilds;
  s->need_rebuild = 0;
  s->order_stale = 1;
  s->shared_stale = 1;
  k_unvoid<<<1, 1, 0, st>>>(dp<step_ctl>(s->ctl)); /* every particle in its block again */
  LAUNCHED("k_unvoid");
  if (n == 0) {
    s->n_pb = s->n_blocks = s->n_packets = 0;
    s->n_gone = 0; /* emigrate took every particle: the slots it marked are gone with the packets */
    s->cc_total = 0;
    return DR_OK;
  }
  const int end_bit = 6 + s->code_bits;
  DR_TRY(end_bit <= 32 && !s->keys64 ? sort_particles<uint32_t>(s, end_bit) : sort_particles<uint64_t>(s, end_bit));
  const int n_pb = (int)s->n_pb;

  /* 3. Packets: each particle block starts a packet (the particles move in step 5). */
  const int fill = LANES; /* full packets: fewer particles a packet were slower everywhere (docs/performance.md) */
  k_pb_packets<<<blocks_for(s->n_pb + 1, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      s->n_pb, dp<int32_t>(s->pb_start), fill, dp<int32_t>(s->pb_packets));
  LAUNCHED("k_pb_packets");
  if (s->det) { /* physics/fixed.h: at most FIX_PB_MAX particles per particle block, so no node sum overflows */
    CUB_RUN(cub::DeviceReduce::Max(temp_ptr, temp_bytes, dp<int32_t>(s->pb_packets), dp<int>(s->count), n_pb, st));
    int most = 0;
    DR_TRY(read_count(s, s->count.ptr, &most));
    if (most > FIX_PB_MAX / fill)
      return dr_fail(DR_EPHYSICS,
                     "deterministic mode: more than %d particles in one block of 4x4x4 cells (%d packets of %d), beyond "
                     "what keeps the fixed-point node sums from overflowing (physics/fixed.h); the material is "
                     "compressed far beyond its sampling",
                     FIX_PB_MAX, most, fill);
  }
  CUB_RUN(cub::DeviceScan::ExclusiveSum(temp_ptr, temp_bytes, dp<int32_t>(s->pb_packets),
                                        dp<int32_t>(s->pb_packets), n_pb + 1, st));

  /* 4. Physical blocks: the 3x3x3 neighbourhoods of all particle blocks, sorted and unique, so
   *    that dense block indices follow Morton order. Before the move, so that one read brings
   *    both counts and the move (the longest kernel of the rebuild) runs while the host captures
   *    the step's graphs. */
  const int m = 27 * n_pb;
  CUB_RUN(cub::DeviceRadixSort::SortKeys(temp_ptr, temp_bytes, dp<uint64_t>(s->nbr_codes[0]),
                                         dp<uint64_t>(s->nbr_codes[1]), m, 0, s->code_bits, st));
  DVEC_GRID(s->block_code, (size_t)m * sizeof(uint64_t), "grid blocks");
  rebuild_count *drc = dp<rebuild_count>(s->count);
  CUB_RUN(cub::DeviceSelect::Unique(temp_ptr, temp_bytes, dp<uint64_t>(s->nbr_codes[1]), dp<uint64_t>(s->block_code),
                                    &drc->n, m, st));
  if (keep) { /* the new indices of the primed blocks, checked with this read (keep_primed) */
    CU(cudaMemsetAsync(&drc->lost, 0, sizeof(rebuild_count) - offsetof(rebuild_count, lost), st));
    k_remap_find<<<blocks_for(old_nb, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        old_nb, dp<uint64_t>(s->old_code), dp<uint8_t>(s->old_touched), dp<uint64_t>(s->block_code), drc,
        dp<int32_t>(s->old_to_new));
    LAUNCHED("k_remap_find");
  }
  CU(cudaMemcpyAsync(&drc->packets, dp<int32_t>(s->pb_packets) + s->n_pb, sizeof(int), cudaMemcpyDeviceToDevice, st));
  CU(cudaMemcpyAsync(s->h_rc, drc, sizeof(rebuild_count), cudaMemcpyDeviceToHost, st));
  CU(cudaStreamSynchronize(st));
  const rebuild_count rc = *s->h_rc;
  TRACE("count %d packets, %d grid blocks%s", rc.packets, rc.n,
        keep ? (rc.lost ? " (G2P2G: primed blocks lost)" : " (G2P2G: primed blocks kept)") : "");
  if (keep && rc.lost) return remap_lost(s, &rc);
  const int nb = rc.n, n_packets = rc.packets;
  DR_TRY(codes_early(s, (size_t)nb)); /* the stream is idle here: block_code is final */

  /* 5. Move the particles into their packets. */
  const int nxt = 1 - s->cur;
  DVEC_PK(s->pk[nxt], (size_t)n_packets * PK_FLOATS * sizeof(float), "particle packets");
  DVEC_PK(s->pid[nxt], (size_t)n_packets * LANES * sizeof(uint64_t), "particle ids");
  k_scatter<<<blocks_for(n, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      n, dp<uint32_t>(s->vals[1]), dp<int32_t>(s->pblock), dp<int32_t>(s->pb_start), dp<int32_t>(s->pb_packets), fill,
      dp<float>(s->pk[s->cur]), dp<uint64_t>(s->pid[s->cur]), dp<float>(s->pk[nxt]), dp<uint64_t>(s->pid[nxt]));
  LAUNCHED("k_scatter");
  s->cur = nxt;
  s->n_packets = (size_t)n_packets;
  DVEC_PK(s->hdr, s->n_packets * sizeof(int2), "packet headers");
  DR_TRY(push_buffers(s, s->n_packets));
  k_headers<<<blocks_for(s->n_pb, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      s->n_pb, dp<int32_t>(s->pb_start), dp<int32_t>(s->pb_packets), fill, dp<int2>(s->hdr));
  LAUNCHED("k_headers");
  /* the sort buffers cover every slot of the next rebuild */
  for (int k = 0; k < 2; ++k) {
    DVEC_PK(s->keys[k], s->n_packets * LANES * sizeof(uint64_t), "particle sort keys");
    DVEC_PK(s->vals[k], s->n_packets * LANES * sizeof(uint32_t), "particle sort keys");
  }

  s->n_blocks = (size_t)nb;
  for (int k = 0; k < 2; ++k) {
    DVEC_GRID(s->grid[k], s->n_blocks * BLOCK_FLOATS * sizeof(float), "grid blocks");
    DVEC_GRID(s->touched[k], s->n_blocks, "grid blocks");
    CU(cudaMemsetAsync(s->grid[k].ptr, 0, s->n_blocks * BLOCK_FLOATS * sizeof(float), st));
    CU(cudaMemsetAsync(s->touched[k].ptr, 0, s->n_blocks, st));
    if (s->asflip) {
      DVEC_GRID(s->grid0[k], s->n_blocks * OLD_FLOATS * sizeof(float), "grid blocks (ASFLIP)");
      CU(cudaMemsetAsync(s->grid0[k].ptr, 0, s->n_blocks * OLD_FLOATS * sizeof(float), st));
    }
    if (s->det) {
      DVEC_GRID(s->igrid[k], s->n_blocks * int_floats(s) * sizeof(long long), "grid blocks (fixed point)");
      CU(cudaMemsetAsync(s->igrid[k].ptr, 0, s->n_blocks * int_floats(s) * sizeof(long long), st));
    }
  }
  s->par = 0;
  if (keep) { /* the primed sums into buffer 0, buffer 1 left cleared (keep_primed) */
    k_remap_move<<<blocks_for(old_nb * BLOCK_NODES, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        old_nb, dp<int32_t>(s->old_to_new), s->det ? NULL : dp<float>(s->old_grid), dp<float>(s->grid[0]),
        !s->det && s->asflip ? dp<float>(s->old_grid0) : NULL, s->asflip ? dp<float>(s->grid0[0]) : NULL,
        s->det ? dp<long long>(s->old_igrid) : NULL,
        fix_of(s, 0).ig, (int)(int_floats(s) / BLOCK_NODES), dp<uint8_t>(s->touched[0]));
    LAUNCHED("k_remap_move");
  }
  if (s->nm > 1) { /* the island: the grid update's output (or the owners) and the peers' block indices (k_tag) */
    if (s->atomics) {
      DVEC_GRID(s->own, s->n_blocks, "grid blocks (island owners)");
    } else {
      DVEC_GRID(s->vel, s->n_blocks * BLOCK_FLOATS * sizeof(float), "grid blocks (island velocities)");
      if (s->asflip) DVEC_GRID(s->vel0, s->n_blocks * OLD_FLOATS * sizeof(float), "grid blocks (island, ASFLIP)");
    }
    DVEC_GRID(s->tags, s->n_blocks * (size_t)(s->nm - 1) * sizeof(int32_t), "grid blocks (island tags)");
  }
  DVEC_GRID(s->shared, s->n_blocks, "grid blocks");
  CU(cudaMemsetAsync(s->shared.ptr, 0, s->n_blocks, st));

  /* 6. Hash table code -> dense index, then each particle block's 27 physical blocks. */
  size_t cap = 64;
  while (cap < 2 * s->n_blocks) cap <<= 1;
  if (cap > s->table_cap) {
    DVEC_EXACT(s->table_keys, 2 * cap * sizeof(uint64_t), "block hash table");
    DVEC_EXACT(s->table_vals, 2 * cap * sizeof(int32_t), "block hash table");
    s->table_cap = 2 * cap; /* room to grow 4x before the next allocation */
  }
  const size_t mask = s->table_cap - 1;
  CU(cudaMemsetAsync(s->table_keys.ptr, 0xff, s->table_cap * sizeof(uint64_t), st));
  k_table_insert<<<blocks_for(s->n_blocks, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      s->n_blocks, dp<uint64_t>(s->block_code), dp<unsigned long long>(s->table_keys), dp<int32_t>(s->table_vals),
      mask);
  LAUNCHED("k_table_insert");
  k_pb_nbr<<<blocks_for((size_t)m, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      (size_t)m, dp<uint64_t>(s->nbr_codes[0]), dp<unsigned long long>(s->table_keys), dp<int32_t>(s->table_vals),
      mask, dp<int32_t>(s->pb_nbr));
  LAUNCHED("k_pb_nbr");
  return cc_slots(s);
}

/* ---- launching a step --------------------------------------------------------------------- */

/* The ASFLIP buffer beside grid[par], or NULL when no material uses ASFLIP. */
static float *grid0_of(cuda_state *s, int par) { return s->asflip ? dp<float>(s->grid0[par]) : NULL; }

/* The island's view of the peers for a step on buffer par (pointers change only at rebuild-mapping,
 * after which the graphs are captured again). */
static island_view view_of(cuda_state *s, int par) {
  island_view v;
  memset(&v, 0, sizeof v);
  v.np = s->nm - 1;
  v.timeout_ns = s->barrier_timeout_ns;
  v.spin = !s->events;
  v.own = s->atomics ? dp<int8_t>(s->own) : NULL;
  v.bar = dp<unsigned>(s->bar);
  for (int q = 0; q < v.np; ++q) {
    const cuda_state *o = s->peer[q];
    v.peer_bar[q] = dp<unsigned>(o->bar);
    v.peer_ctl[q] = dp<step_ctl>(o->ctl);
    v.peer_grid[q] = dp<float>(o->grid[par]);
    v.peer_grid0[q] = o->asflip ? dp<float>(o->grid0[par]) : NULL;
    v.peer_touched[q] = dp<uint8_t>(o->touched[par]);
    v.peer_ig[q] = o->det ? dp<long long>(o->igrid[par]) : NULL;
  }
  return v;
}

/* p2p_atomics: the peers' buffers of parity par (k_push, k_pull). */
static peer_blocks peers_of(cuda_state *s, int par) {
  peer_blocks b;
  memset(&b, 0, sizeof b);
  for (int q = 0; q < s->nm - 1; ++q) {
    const cuda_state *o = s->peer[q];
    b.grid[q] = dp<float>(o->grid[par]);
    b.grid0[q] = o->asflip ? dp<float>(o->grid0[par]) : NULL;
    b.touched[q] = dp<uint8_t>(o->touched[par]);
    b.ig[q] = o->det ? dp<long long>(o->igrid[par]) : NULL;
  }
  return b;
}

/* The grid update writes to vel (an island reduced by double buffering), else in place. */
static int separate_vel(const cuda_state *s) { return s->nm > 1 && !s->atomics; }

/* Where G2P reads the grid velocities. */
static const float *vel_of(cuda_state *s, int par) { return separate_vel(s) ? dp<float>(s->vel) : dp<float>(s->grid[par]); }
static const float *vel0_of(cuda_state *s, int par) {
  return !s->asflip ? NULL : separate_vel(s) ? dp<float>(s->vel0) : dp<float>(s->grid0[par]);
}

/* Clears grid buffer par (and its ASFLIP buffer and touched flags) outside the fused clear of
 * k_grid. */
static int clear_grid(cuda_state *s, int par) {
  if (s->n_blocks == 0) return DR_OK;
  if (s->det) CU(cudaMemsetAsync(s->igrid[par].ptr, 0, s->n_blocks * int_floats(s) * sizeof(long long), s->stream));
  CU(cudaMemsetAsync(s->grid[par].ptr, 0, s->n_blocks * BLOCK_FLOATS * sizeof(float), s->stream));
  if (s->asflip) CU(cudaMemsetAsync(s->grid0[par].ptr, 0, s->n_blocks * OLD_FLOATS * sizeof(float), s->stream));
  CU(cudaMemsetAsync(s->touched[par].ptr, 0, s->n_blocks, s->stream));
  return DR_OK;
}

/* The island's barrier between P2G (into P[par]) and the grid update (nothing on one GPU). */
static int launch_barrier(cuda_state *s, int par) {
  if (s->nm == 1) return DR_OK;
  k_barrier<<<1, 32, 0, s->stream>>>(dp<step_ctl>(s->ctl), view_of(s, par));
  LAUNCHED("k_barrier");
  return DR_OK;
}

typedef void (*p2g_fn)(step_ctl *, size_t, const int2 *, const int32_t *, const int32_t *, float *, const uint64_t *,
                       const material_params *, float3, float, float, float *, uint8_t *, float *, fixp,
                       const int32_t *, p2g_order);

/* k_p2g's order of packets: the i-th packet taken is packet i x m
 * mod n, m coprime with n and near n / phi, so that packets taken one after another lie about
 * 0.38 n apart and the packets in work at one time spread evenly over the list (three-distance
 * theorem). The list is sorted by grid block, so in order the few thousand warps in flight work
 * on a few thousand neighbouring packets, whose particles scatter to the same grid nodes: their
 * global atomics (a lane group's reduced sums, one a node) queue at the same L2 addresses. Spread,
 * the atomics, loads and instructions are the same and their addresses differ; measured on one
 * H100 (docs/performance.md, 2026-11-27 fifth): Sand Blocks l = 46 36.1 -> 30.0 ms a frame,
 * l = 23 6.3 -> 5.4, 16 x l = 46 122.2 -> 115.0. m = 0 (in order) where n < 3. */
static p2g_order spread_of(const cuda_state *s, size_t n) {
  p2g_order o = {0, 0};
  if (n < 3) return o;
  unsigned long long m = (unsigned long long)(0.6180339887498949 * (double)n) | 1ull;
  for (;; m += 2) { /* the next odd m with gcd(m, n) = 1: a few steps at most */
    unsigned long long a = m, b = n;
    while (b) {
      const unsigned long long t = a % b;
      a = b, b = t;
    }
    if (a == 1) {
      o.m = m % n;
      o.magic = ~0ull / (unsigned long long)n;
      return o;
    }
  }
}

/* The instantiation of k_p2g for the member's transfer and mode. */
static p2g_fn p2g_kernel(const cuda_state *s) {
  return s->asflip ? (s->det ? k_p2g<true, true> : k_p2g<true, false>)
                   : (s->det ? k_p2g<false, true> : k_p2g<false, false>);
}

/* P2G of every packet, or (order non-NULL) of the n packets listed at order, in spread_of's
 * order, one packet a warp. */
static int launch_p2g_on(cuda_state *s, int par, const int32_t *order, size_t n, cudaStream_t st) {
  if (n == 0) return DR_OK;
  const p2g_fn k = p2g_kernel(s);
  k<<<blocks_for(n, WARPS), THREADS, 0, st>>>(
      dp<step_ctl>(s->ctl), n, dp<int2>(s->hdr), dp<int32_t>(s->pb_coord), dp<int32_t>(s->pb_nbr),
      dp<float>(s->pk[s->cur]), dp<uint64_t>(s->pid[s->cur]), dp<material_params>(s->d_mats),
      make_float3(s->origin[0], s->origin[1], s->origin[2]), s->prm.dx, s->inv_dx, dp<float>(s->grid[par]),
      dp<uint8_t>(s->touched[par]), grid0_of(s, par), fix_of(s, par), order, spread_of(s, n));
  LAUNCHED("k_p2g");
  return DR_OK;
}

static int launch_p2g_of(cuda_state *s, int par, const int32_t *order, size_t n) {
  return launch_p2g_on(s, par, order, n, s->stream);
}

static int launch_p2g(cuda_state *s, int par) { return launch_p2g_of(s, par, NULL, s->n_packets); }

/* The interior packets (ranks): boundary_order's list after its n_boundary boundary packets, and
 * how many they are; launch_p2g_interior and g2p_interior take them. */
static const int32_t *interior_list(const cuda_state *s) { return dp<int32_t>(s->pk_order) + s->n_boundary; }
static size_t interior_count(const cuda_state *s) { return s->n_packets - s->n_boundary; }

/* The interior packets' P2G, on the step's stream */
static int launch_p2g_interior(cuda_state *s) {
  return launch_p2g_of(s, s->par, interior_list(s), interior_count(s));
}

static int shared_list(cuda_state *s, cudaStream_t st);

static int launch_grid_on(cuda_state *s, int par, int part, cudaStream_t st) {
  if (s->n_blocks == 0) return DR_OK;
  /* GRID_SHARED on one GPU: over the shared blocks' list instead of every block, as many CUDA
   * blocks as the list's bound (an island member's pass covers every block, the others returning
   * at once) */
  const int listed = part == GRID_SHARED && s->nm == 1;
  if (listed) DR_TRY(shared_list(s, st));
  const size_t n_launch = listed ? s->shared_bound : s->n_blocks;
  if (n_launch == 0) return DR_OK;
  if (s->bnd.n_colliders > 0) {
    const bool cc = s->n_cc > 0 && s->cc_total > 0;
    k_poses<<<blocks_for((size_t)s->bnd.n_colliders, 64), 64, 0, st>>>(
        dp<step_ctl>(s->ctl), s->bnd, dp<collider_pose>(s->d_poses), dp<col_box>(s->d_colbox),
        dp<col_box>(s->d_wbox), s->prm.dx, cc ? dp<int>(s->cc_index) : NULL, cc ? dp<int>(s->cc_state) : NULL,
        s->cc_every);
    LAUNCHED("k_poses");
    if (cc) {
      const size_t want = blocks_for(s->cc_total * BLOCK_NODES, SIMPLE_THREADS);
      const unsigned ctas = (unsigned)(want < (size_t)CC_FILL_CTAS ? want : (size_t)CC_FILL_CTAS);
      k_cc_fill<<<ctas, SIMPLE_THREADS, 0, st>>>(
          dp<step_ctl>(s->ctl), s->cc_total, dp<int2>(s->cc_blocks), s->n_cc, dp<int>(s->cc_state), s->cc_col,
          dp<uint64_t>(s->block_code), make_float3(s->origin[0], s->origin[1], s->origin[2]), s->prm.dx, s->bnd,
          dp<collider_pose>(s->d_poses), dp<mesh_samples>(s->cc_vals));
      LAUNCHED("k_cc_fill");
    }
  }
  const bool col = s->bnd.n_colliders > 0;
  (s->det ? (col ? k_grid<true, true> : k_grid<true, false>) : (col ? k_grid<false, true> : k_grid<false, false>))
      <<<blocks_for(n_launch, GRID_BLOCKS_PER_CTA),
                                            GRID_BLOCKS_PER_CTA * BLOCK_NODES, 0, st>>>(
      dp<step_ctl>(s->ctl), s->n_blocks, s->prm.dx, make_float3(s->origin[0], s->origin[1], s->origin[2]),
      make_float3(s->prm.gravity[0], s->prm.gravity[1], s->prm.gravity[2]), s->bnd, dp<collider_pose>(s->d_poses),
      dp<col_box>(s->d_wbox), dp<uint64_t>(s->block_code),
      dp<uint8_t>(s->touched[par]), dp<float>(s->grid[par]), dp<uint8_t>(s->touched[1 - par]),
      dp<float>(s->grid[1 - par]), dp<uint8_t>(s->shared), part, grid0_of(s, par), s->det ? NULL : grid0_of(s, 1 - par),
      dp<int32_t>(s->tags), view_of(s, par), separate_vel(s) ? dp<float>(s->vel) : NULL,
      separate_vel(s) && s->asflip ? dp<float>(s->vel0) : NULL, fix_of(s, par).ig, fix_of(s, 1 - par).ig,
      1.0 / (double)s->prm.fix_scale[0], 1.0 / (double)s->prm.fix_scale[1],
      s->n_cc > 0 && s->cc_total > 0 ? dp<int>(s->cc_index) : NULL, dp<int32_t>(s->cc_slot),
      dp<mesh_samples>(s->cc_vals), listed ? dp<int32_t>(s->shared_idx) : NULL, listed ? dp<int>(s->shared_n) : NULL);
  LAUNCHED("k_grid");
  return DR_OK;
}

static int launch_grid(cuda_state *s, int par, int part) { return launch_grid_on(s, par, part, s->stream); }

/* The steps that run on this mapping after the one whose particles leave the zone G2P checks: 0
 * where the next step is voided, else STEP_LAG (the events barrier; the top of this file). */
static int lag_of(const cuda_state *s) { return s->void_steps ? 0 : STEP_LAG; }

/* G2P of the n packets order lists (all of them in their order where order is NULL), then, with
 * collide, the particle collision step of every packet (k_collide reads push_mask, which each
 * packet's G2P wrote: after a g2p_interior, the last part's launch collides both parts).
 * lag: the steps queued before the host reads this step's flags. G2P flags the particles that
 * leave the free zone shrunk by a cell per such step (lag_of): a particle moves less than a cell
 * a step. The phases of backend.h (several ranks) read the flags before the next step (lag 0),
 * and the frame loop voids the step after a leave (lag 0 too, except with the events barrier):
 * both keep the whole free zone, a third more room per axis, fewer
 * rebuild-mappings. */
static decltype(&k_g2p<false, false, false>) g2p_kernel(const cuda_state *s, bool col) {
  return s->asflip     ? (col ? k_g2p<true, true, true> : k_g2p<true, false, true>)
         : s->g2p_mat ? (col ? k_g2p<false, true, true> : k_g2p<false, false, true>)
                      : (col ? k_g2p<false, true, false> : k_g2p<false, false, false>);
}

static int launch_g2p_on(cuda_state *s, int par, int lag, const int32_t *order, size_t n, int collide,
                         cudaStream_t st) {
  const bool col = s->push;
  const int zone_lo = FREE_ZONE_LO + lag, zone_hi = FREE_ZONE_HI - lag;
  if (n > 0) {
    g2p_kernel(s, col)<<<blocks_for(n, WARPS), THREADS, 0, st>>>(
        dp<step_ctl>(s->ctl), n, dp<int2>(s->hdr), dp<int32_t>(s->pb_coord), dp<int32_t>(s->pb_nbr),
        dp<float>(s->pk[s->cur]), dp<uint64_t>(s->pid[s->cur]), make_float3(s->origin[0], s->origin[1], s->origin[2]),
        make_float3(s->dmin[0], s->dmin[1], s->dmin[2]), make_float3(s->dmax[0], s->dmax[1], s->dmax[2]), s->prm.dx,
        s->inv_dx, vel_of(s, par), s->g2p_mat ? dp<material_params>(s->d_mats) : nullptr, vel0_of(s, par), s->bnd,
        dp<collider_pose>(s->d_poses), dp<col_box>(s->d_wbox), dp<unsigned>(s->push_mask), dp<float>(s->push_room),
        zone_lo, zone_hi, order);
    LAUNCHED("k_g2p");
  }
  if (col && collide && s->n_packets > 0) {
    k_collide<<<blocks_for(s->n_packets, WARPS), THREADS, 0, st>>>(
        dp<step_ctl>(s->ctl), s->n_packets, dp<int2>(s->hdr), dp<int32_t>(s->pb_coord), dp<float>(s->pk[s->cur]),
        dp<uint64_t>(s->pid[s->cur]), make_float3(s->origin[0], s->origin[1], s->origin[2]),
        make_float3(s->dmin[0], s->dmin[1], s->dmin[2]), make_float3(s->dmax[0], s->dmax[1], s->dmax[2]), s->prm.dx,
        s->inv_dx, dp<unsigned>(s->push_mask), dp<float>(s->push_room), s->bnd, dp<collider_pose>(s->d_poses), zone_lo,
        zone_hi);
    LAUNCHED("k_collide");
  }
  return DR_OK;
}

static int launch_g2p_of(cuda_state *s, int par, int lag, const int32_t *order, size_t n, int collide) {
  return launch_g2p_on(s, par, lag, order, n, collide, s->stream);
}

static int launch_g2p(cuda_state *s, int par, int lag) { return launch_g2p_of(s, par, lag, NULL, s->n_packets, 1); }

/* The G2P2G variant for the scene: ASFLIP, deterministic sums, colliders. */
template <bool OLD, bool DET>
static decltype(&k_g2p2g<OLD, DET, false>) g2p2g_kernel(bool col) {
  return col ? k_g2p2g<OLD, DET, true> : k_g2p2g<OLD, DET, false>;
}

static int launch_g2p2g(cuda_state *s, int par) {
  if (s->n_packets == 0) return DR_OK;
  const bool col = s->push;
  (s->asflip ? (s->det ? g2p2g_kernel<true, true>(col) : g2p2g_kernel<true, false>(col))
             : (s->det ? g2p2g_kernel<false, true>(col) : g2p2g_kernel<false, false>(col)))
      <<<blocks_for(s->n_packets, WARPS), THREADS, 0, s->stream>>>(
      dp<step_ctl>(s->ctl), s->n_packets, dp<int2>(s->hdr), dp<int32_t>(s->pb_coord), dp<int32_t>(s->pb_nbr),
      dp<float>(s->pk[s->cur]), dp<uint64_t>(s->pid[s->cur]), dp<material_params>(s->d_mats),
      make_float3(s->origin[0], s->origin[1], s->origin[2]), make_float3(s->dmin[0], s->dmin[1], s->dmin[2]),
      make_float3(s->dmax[0], s->dmax[1], s->dmax[2]), s->prm.dx, s->inv_dx, vel_of(s, par),
      dp<float>(s->grid[1 - par]), dp<uint8_t>(s->touched[1 - par]), vel0_of(s, par), grid0_of(s, 1 - par),
      fix_of(s, 1 - par), s->bnd, dp<collider_pose>(s->d_poses), s->g2p_mat, FREE_ZONE_LO + lag_of(s) + 1,
      FREE_ZONE_HI - lag_of(s) - 1);
  LAUNCHED("k_g2p2g");
  return DR_OK;
}

/* p2p_atomics: this member's parts of blocks owned by peers, into the owners' copies (k_push). */
static int launch_push(cuda_state *s, int par) {
  if (!s->atomics || s->n_blocks == 0) return DR_OK;
  const size_t n = s->n_blocks * BLOCK_NODES;
  (s->det ? k_push<true> : k_push<false>)<<<blocks_for(n, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
      dp<step_ctl>(s->ctl), s->n_blocks, dp<uint8_t>(s->touched[par]), dp<int8_t>(s->own), dp<int32_t>(s->tags),
      s->nm - 1, dp<float>(s->grid[par]), s->det ? NULL : grid0_of(s, par), fix_of(s, par).ig,
      (int)(int_floats(s) / BLOCK_NODES), peers_of(s, par));
  LAUNCHED("k_push");
  return DR_OK;
}

/* p2p_atomics: the owners' updated blocks over this member's parts (k_pull). */
static int launch_pull(cuda_state *s, int par) {
  if (!s->atomics || s->n_blocks == 0) return DR_OK;
  const size_t n = s->n_blocks * BLOCK_NODES;
  k_pull<<<blocks_for(n, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
      dp<step_ctl>(s->ctl), s->n_blocks, dp<uint8_t>(s->touched[par]), dp<int8_t>(s->own), dp<int32_t>(s->tags),
      s->nm - 1, dp<float>(s->grid[par]), grid0_of(s, par), peers_of(s, par));
  LAUNCHED("k_pull");
  return DR_OK;
}

/* A step on grid buffer par in three stages, split where the island's barriers go:
 *   head (k_begin, P2G unless fused, k_push) | barrier | grid update | [p2p_atomics: barrier] |
 *   tail (k_pull, G2P or G2P2G, the flags copied to h_slot[par]).
 * Fused: grid[par] already holds this step's P2G (the last G2P2G, or the priming P2G). Unfused
 * without with_p2g: grid[par] holds this step's P2G too (the first step after G2P2G frames,
 * island_advance_frame). */
static int launch_head(cuda_state *s, int par, int with_p2g) {
  k_begin<<<1, s->nm > 1 ? 32 : 1, 0, s->stream>>>(dp<step_ctl>(s->ctl), view_of(s, par));
  LAUNCHED("k_begin");
  if (!s->graph_fused && with_p2g) DR_TRY(launch_p2g(s, par));
  return launch_push(s, par);
}

/* The step's record written by one warp straight into the host's mapped copy (h_slot), which the
 * host reads after the step's event: a kernel after the step's last kernel costs less than a
 * device-to-host copy node after it (docs/performance.md). */
__global__ static void k_ctl_out(const step_ctl *__restrict__ c, step_ctl *out) {
  static_assert(sizeof(step_ctl) % sizeof(unsigned) == 0, "step_ctl in words");
  const unsigned *src = (const unsigned *)c;
  volatile unsigned *dst = (volatile unsigned *)out;
  for (unsigned i = threadIdx.x; i < sizeof(step_ctl) / sizeof(unsigned); i += blockDim.x) dst[i] = src[i];
  __threadfence_system();
}

/* The step's record into the host's h_slot[par] (k_ctl_out). Both the frame loop's steps and the
 * phases' g2p (ranks) end with it. */
static int record_out(cuda_state *s, int par) {
  k_ctl_out<<<1, 32, 0, s->stream>>>(dp<step_ctl>(s->ctl), s->d_slot + par);
  LAUNCHED("k_ctl_out");
  return DR_OK;
}

static int launch_tail(cuda_state *s, int par) {
  DR_TRY(launch_pull(s, par));
  DR_TRY(s->graph_fused ? launch_g2p2g(s, par) : launch_g2p(s, par, lag_of(s)));
  return record_out(s, par);
}

/* DRIFT_ISLAND_SKEW=MEMBER:pre|post:US, a test hook for the island's race-freedom under uneven
 * load (tests/gpu): that member's every step waits US microseconds on its GPU, before its barrier
 * (pre: it arrives late, the others wait) or after it (post: it reads its peers' sums late, while
 * they run on through their grid update, G2P and the next P2G into the other buffer, which the
 * double buffering must keep apart from what it still reads). One GPU ignores it. */
__global__ static void k_delay(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

static int launch_skew(cuda_state *s, int where) {
  if (s->skew_where != where || s->nm < 2 || s->me != s->skew_member) return DR_OK;
  k_delay<<<1, 1, 0, s->stream>>>(s->skew_ns);
  LAUNCHED("k_delay");
  return DR_OK;
}

/* The whole step on one member with spin-lock barriers (what a graph captures). */
static int launch_step(cuda_state *s, int par, int with_p2g) {
  if (s->begin_barrier && (s->graph_fused || !with_p2g) && s->skew_where != SKEW_PRE) {
    k_begin_barrier<<<1, 32, 0, s->stream>>>(dp<step_ctl>(s->ctl), view_of(s, par));
    LAUNCHED("k_begin_barrier");
  } else {
    DR_TRY(launch_head(s, par, with_p2g));
    DR_TRY(launch_skew(s, SKEW_PRE));
    DR_TRY(launch_barrier(s, par));
  }
  DR_TRY(launch_skew(s, SKEW_POST));
  DR_TRY(launch_grid(s, par, GRID_ALL));
  if (s->atomics) DR_TRY(launch_barrier(s, par));
  return launch_tail(s, par);
}

static void drop_graphs(cuda_state *s) {
  for (int k = 0; k < 2; ++k)
    if (s->graph[k]) cudaGraphExecDestroy(s->graph[k]), s->graph[k] = NULL;
  s->graphs_valid = 0;
}

/* A switch of the environment (a test hook: DRIFT_SORT_KEYS64), read once at setup: NAME=0 turns
 * it off, NAME=1 on, unset leaves dflt. */
static int env_flag(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) != 0 : dflt;
}

/* Captures the step of each parity as a CUDA graph (after every rebuild: sizes and buffers
 * change with the mapping). */
static int capture_graphs(cuda_state *s) {
  s->graphs_valid = 0;
  for (int k = 0; k < 2; ++k) {
    cudaGraph_t g = NULL;
    CU(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
    int rc = launch_step(s, k, 1);
    cudaError_t e = cudaStreamEndCapture(s->stream, &g);
    if (rc) {
      if (g) cudaGraphDestroy(g);
      return rc;
    }
    if (e != cudaSuccess) return cuda_fail(e, "cudaStreamEndCapture(s->stream, &g)", __FILE__, __LINE__);
    /* The same kernels with new sizes and buffers (a rebuild-mapping): updating the executable
     * graph in place costs far less than instantiating it again. Where the update is refused (the
     * graph's shape changed: fused and unfused steps, say), it is instantiated anew. */
    if (s->graph[k]) {
      cudaGraphExecUpdateResultInfo info;
      if (cudaGraphExecUpdate(s->graph[k], g, &info) == cudaSuccess) {
        cudaGraphDestroy(g);
        continue;
      }
      (void)cudaGetLastError(); /* the refusal is not an error of the next launch */
      cudaGraphExecDestroy(s->graph[k]);
      s->graph[k] = NULL;
    }
    e = cudaGraphInstantiate(&s->graph[k], g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return cuda_fail(e, "cudaGraphInstantiate(&s->graph[k], g, 0)", __FILE__, __LINE__);
  }
  s->graphs_valid = 1;
  return DR_OK;
}

static int fail_bad(cuda_state *s, unsigned long long id);

/* Deterministic mode: a P2G contribution out of the fixed-point range (physics/fixed.h). */
static int fail_fix(cuda_state *s, unsigned long long id) {
  k_find_material<<<blocks_for(s->n_packets * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
      s->n_packets * LANES, dp<uint64_t>(s->pid[s->cur]), dp<int2>(s->hdr), dp<float>(s->pk[s->cur]), id,
      dp<step_ctl>(s->ctl));
  LAUNCHED("k_find_material");
  step_ctl c;
  CU(cudaMemcpyAsync(&c, s->ctl.ptr, sizeof c, cudaMemcpyDeviceToHost, s->stream));
  CU(cudaStreamSynchronize(s->stream));
  const int mat = c.bad_material;
  return dr_fail(DR_EPHYSICS,
                 "deterministic mode: particle %llu (body %llu, material %s) brings a non-finite momentum or one "
                 "beyond the fixed-point range (2^%d units at %g units per kg m/s, i.e. %.3g kg m/s; "
                 "physics/fixed.h): the run is unstable or faster than 256 times the scene's speed bound",
                 id, id >> 48,
                 s->prm.material_names && mat >= 0 && mat < s->prm.n_materials ? s->prm.material_names[mat] : "?",
                 FIX_LIMIT_BITS, (double)s->prm.fix_scale[1], (double)FIX_LIMIT / (double)s->prm.fix_scale[1]);
}

static int fail_bad(cuda_state *s, unsigned long long id) {
  k_find_material<<<blocks_for(s->n_packets * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
      s->n_packets * LANES, dp<uint64_t>(s->pid[s->cur]), dp<int2>(s->hdr), dp<float>(s->pk[s->cur]), id,
      dp<step_ctl>(s->ctl));
  LAUNCHED("k_find_material");
  step_ctl c;
  CU(cudaMemcpyAsync(&c, s->ctl.ptr, sizeof c, cudaMemcpyDeviceToHost, s->stream));
  CU(cudaStreamSynchronize(s->stream));
  return backend_fail_particle(&s->prm, id, c.bad_material);
}

/* ---- the rank exchange (mpi/exchange.c) --------------------------------------------------- */

static int upload(cuda_state *s, const particles *p);

/* Sums of the listed blocks, block after block, bs floats each (backend.h's block_sums): the 4
 * channels of grid buffer g x 64 nodes, channel-major, then with ASFLIP (g0) the 3 channels of
 * the momentum without the stress impulse. One thread per value. */
/* An exchange kernel's block index must lie in [0, nb) of the current mapping. One that does not
 * (a stale or corrupted list: issue #8) is not used; it goes to bad[1] and bad[0] is set (mapped
 * pinned host memory, plain stores: no atomics over PCIe; with several bad indices any one is
 * reported), and the host turns it into an error after its sync (xbad_check). Always on: one
 * compare per value. */
__device__ __forceinline__ bool index_ok(int32_t blk, int32_t nb, volatile int *bad) {
  if (blk >= 0 && blk < nb) return true;
  bad[1] = blk;
  bad[0] = 1;
  return false;
}

__device__ __forceinline__ float *sum_slot(size_t i, int bs, int32_t blk, float *g, float *g0) {
  const int ch = (int)(i % bs) / BLOCK_NODES, node = (int)(i % BLOCK_NODES);
  return ch < 4 ? g + (size_t)blk * BLOCK_FLOATS + gidx(node, ch)
                : g0 + (size_t)blk * OLD_FLOATS + (ch - 4) * BLOCK_NODES + node;
}

__global__ static void k_mark(size_t n, const int32_t *idx, int32_t nb, int *bad, uint8_t *flags) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n && index_ok(idx[i], nb, bad)) flags[idx[i]] = 1;
}

/* The node exchange (backend.h's node_masks, pack_nodes, unpack_add_nodes; mpi/exchange.h):
 * one warp per listed block, a lane for nodes lane and lane + 32. k_node_masks writes the block's
 * mask of nodes where some channel of this step's sums is non-zero (0 for an untouched block);
 * the pack and the unpack move the values of the nodes the mask marks, block k's from
 * base[k] x channels on, channel by channel, a node's place among them the marked nodes below it
 * (k_move_nodes does both). The host made base (a prefix sum of the masks' popcounts), so no scan
 * runs on the device. In
 * deterministic mode (T = long long) every node of a touched block is marked: a tiny w m rounds to
 * a fixed-point 0 at a node that G2P still reads with weight w (backend_cpu.c's node_mask). */
template <typename T> __device__ __forceinline__ T node_value(int bs, int32_t blk, int c, int nd, const T *src, float *g0) {
  if constexpr (sizeof(T) == sizeof(float)) return *sum_slot((size_t)(c * BLOCK_NODES + nd), bs, blk, (float *)src, g0);
  else return src[(size_t)blk * bs + c * BLOCK_NODES + nd];
}

template <typename T>
__global__ static void k_node_masks(size_t n, int bs, const int32_t *idx, int32_t nb, int *bad, const uint8_t *touched,
                                    const T *src, float *g0, unsigned long long *mask) {
  const size_t k = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (k >= n) return; /* the whole warp */
  const int32_t blk = idx[k];
  const bool on = index_ok(blk, nb, bad) && touched[blk];
  unsigned half[2];
  for (int h = 0; h < 2; ++h) {
    bool any = false;
    if constexpr (sizeof(T) == sizeof(long long)) any = on;
    else
      for (int c = 0; on && c < bs / BLOCK_NODES; ++c) any |= node_value(bs, blk, c, 32 * h + lane, src, g0) != (T)0;
    half[h] = __ballot_sync(0xffffffffu, any);
  }
  if (lane == 0) mask[k] = (unsigned long long)half[0] | (unsigned long long)half[1] << 32;
}

/* The pack (ADD false: the marked nodes' values into msg; a block index out of range packs zeros)
 * and the unpack (ADD: msg's values added into the grid; the blocks a received message marks are
 * this rank's own touched ones, as the AND holds its mask). */
template <typename T, bool ADD>
__global__ static void k_move_nodes(size_t n, int bs, const int32_t *idx, int32_t nb, int *bad,
                                    const unsigned long long *mask, const unsigned *base, T *grid, float *g0, T *msg) {
  const size_t k = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (k >= n) return;
  const unsigned long long m = mask[k];
  if (!m) return;
  const int32_t blk = idx[k];
  const bool ok = index_ok(blk, nb, bad);
  if (ADD && !ok) return;
  const int ch = bs / BLOCK_NODES, cnt = __popcll(m);
  T *v = msg + (size_t)base[k] * ch;
  for (int h = 0; h < 2; ++h) {
    const int nd = 32 * h + lane;
    if (!((m >> nd) & 1ull)) continue;
    const int r = __popcll(m & ((1ull << nd) - 1ull));
    for (int c = 0; c < ch; ++c) { /* one thread per node and channel: no race */
      if constexpr (!ADD) v[c * cnt + r] = ok ? node_value(bs, blk, c, nd, (const T *)grid, g0) : (T)0;
      else if constexpr (sizeof(T) == sizeof(float))
        *sum_slot((size_t)(c * BLOCK_NODES + nd), bs, blk, (float *)grid, g0) += v[c * cnt + r];
      else grid[(size_t)blk * bs + c * BLOCK_NODES + nd] += v[c * cnt + r]; /* integers: any order of the ranks */
    }
  }
}

/* An island's rank exchange runs on member 0 alone: link_map[j * nm + k] is member k's block
 * index of the link's block j (-1 where k does not hold it), and island_bufs every member's
 * buffers of the step's parity (member 0's own, the others' by P2P). */
typedef struct island_bufs {
  float *grid[MAX_GPUS];
  float *grid0[MAX_GPUS];     /* ASFLIP, else NULL */
  long long *ig[MAX_GPUS];    /* deterministic mode, else NULL */
  uint8_t *touched[MAX_GPUS];
  int32_t nb[MAX_GPUS];       /* each member's grid blocks */
  int nm;
} island_bufs;

/* Member k's index of link block j, or -1 (also where it is out of range, marked in bad). */
__device__ __forceinline__ int32_t island_block(const int32_t *link_map, const island_bufs &b, size_t j, int k,
                                                int *bad) {
  const int32_t t = link_map[j * b.nm + k];
  if (t < 0) return -1;
  return index_ok(t, b.nb[k], bad) ? t : -1;
}

/* An island's node exchange (island_node_masks, island_pack_nodes, island_unpack_add_nodes), on
 * member 0, a warp per link block j and a lane for nodes lane and lane + 32
 * (the message of one GPU: k_node_masks, k_move_nodes). The island's mask is the OR of the members'
 * (each member's copy read where it touched the block this step; deterministic mode: every node
 * of a touched block); the values are the island's sums, in member order; a received value is
 * added into the block's owner (the lowest member holding it), which is then touched, so that the
 * shared update's reduction reads it. */
template <typename T>
__device__ __forceinline__ T island_value(const island_bufs &b, int k, int bs, int32_t t, int c, int nd) {
  if constexpr (sizeof(T) == sizeof(float)) return *sum_slot((size_t)(c * BLOCK_NODES + nd), bs, t, b.grid[k], b.grid0[k]);
  else return b.ig[k][(size_t)t * bs + c * BLOCK_NODES + nd];
}

template <typename T>
__global__ static void k_island_node_masks(size_t n, int bs, const int32_t *link_map, island_bufs b, int *bad,
                                           unsigned long long *mask) {
  const size_t j = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (j >= n) return; /* the whole warp */
  unsigned half[2];
  for (int h = 0; h < 2; ++h) {
    bool any = false;
    for (int k = 0; k < b.nm; ++k) {
      const int32_t t = island_block(link_map, b, j, k, bad);
      if (t < 0 || !b.touched[k][t]) continue;
      if constexpr (sizeof(T) == sizeof(long long)) any = true;
      else
        for (int c = 0; c < bs / BLOCK_NODES; ++c) any |= island_value<T>(b, k, bs, t, c, 32 * h + lane) != (T)0;
    }
    half[h] = __ballot_sync(0xffffffffu, any);
  }
  if (lane == 0) mask[j] = (unsigned long long)half[0] | (unsigned long long)half[1] << 32;
}

template <typename T>
__global__ static void k_island_pack_nodes(size_t n, int bs, const int32_t *link_map, island_bufs b, int *bad,
                                           const unsigned long long *mask, const unsigned *base, T *out) {
  const size_t j = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (j >= n) return;
  const unsigned long long m = mask[j];
  if (!m) return;
  const int ch = bs / BLOCK_NODES, cnt = __popcll(m);
  T *o = out + (size_t)base[j] * ch;
  for (int h = 0; h < 2; ++h) {
    const int nd = 32 * h + lane;
    if (!((m >> nd) & 1ull)) continue;
    const int r = __popcll(m & ((1ull << nd) - 1ull));
    for (int c = 0; c < ch; ++c) {
      T acc = 0;
      for (int k = 0; k < b.nm; ++k) { /* member order: the same sums on every step */
        const int32_t t = island_block(link_map, b, j, k, bad);
        if (t >= 0 && b.touched[k][t]) acc += island_value<T>(b, k, bs, t, c, nd);
      }
      o[c * cnt + r] = acc;
    }
  }
}

template <typename T>
__global__ static void k_island_unpack_nodes(size_t n, int bs, const int32_t *link_map, island_bufs b, int *bad,
                                             const unsigned long long *mask, const unsigned *base, const T *in) {
  const size_t j = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (j >= n) return;
  const unsigned long long m = mask[j];
  if (!m) return;
  int k = 0;
  int32_t t = -1;
  for (; k < b.nm && t < 0; ++k) t = island_block(link_map, b, j, k, bad);
  if (t < 0) return;
  --k;
  const int ch = bs / BLOCK_NODES, cnt = __popcll(m);
  const T *v = in + (size_t)base[j] * ch;
  bool any = false;
  for (int h = 0; h < 2; ++h) {
    const int nd = 32 * h + lane;
    if (!((m >> nd) & 1ull)) continue;
    const int r = __popcll(m & ((1ull << nd) - 1ull));
    for (int c = 0; c < ch; ++c) { /* one thread per node and channel: no race */
      const T x = v[c * cnt + r];
      if constexpr (sizeof(T) == sizeof(float)) *sum_slot((size_t)(c * BLOCK_NODES + nd), bs, t, b.grid[k], b.grid0[k]) += x;
      else b.ig[k][(size_t)t * bs + c * BLOCK_NODES + nd] += x;
      any |= x != (T)0;
    }
  }
  if (any) b.touched[k][t] = 1; /* every writer stores the same value */
}

/* The exchange's block-index lists stay the same from one rebuild-mapping to the next
 * (exchange_setup hands each link's list to mark_shared once), so they are uploaded there, once,
 * side by side in xidx; the node exchange finds each by the host pointer and length. */
static int sums_floats(const cuda_state *s) { return BLOCK_FLOATS + (s->asflip ? OLD_FLOATS : 0); }

/* The registered entry of a list, or NULL. */
static const xlist *find_indices(const cuda_state *s, const int32_t *idx, size_t n) {
  for (int k = s->n_xl - 1; k >= 0; --k)
    if (s->xl[k].host == idx && s->xl[k].n == n) return &s->xl[k];
  return NULL;
}

static const int32_t *device_indices(cuda_state *s, const int32_t *idx, size_t n) {
  const xlist *e = find_indices(s, idx, n);
  return e ? dp<int32_t>(s->xidx) + e->off : NULL;
}

/* After the sync that follows an exchange kernel: an index that kernel found outside the
 * mapping's blocks (index_ok) becomes an error naming the call. */
static int xbad_check(cuda_state *s, const char *call, size_t n) {
  if (!s->h_xbad[0]) return DR_OK;
  const int blk = s->h_xbad[1];
  s->h_xbad[0] = s->h_xbad[1] = 0;
  return dr_fail(DR_EINTERNAL,
                 "cuda backend: %s: block index %d of a shared-block list (%zu blocks) is outside the %zu grid blocks "
                 "of the current mapping (rebuild %llu): a stale or corrupted exchange list (issue #8)",
                 call, blk, n, s->n_blocks, (unsigned long long)s->rebuilds);
}

/* Registers the list (and uploads every registered list again: growing xidx loses its contents).
 * Its indices are checked against the current mapping on the host first (once per list). */
static int register_indices(cuda_state *s, const int32_t *idx, size_t n, const char *call) {
  for (size_t k = 0; k < n; ++k)
    if (idx[k] < 0 || (size_t)idx[k] >= s->n_blocks)
      return dr_fail(DR_EINTERNAL,
                     "cuda backend: %s: entry %zu of a shared-block list of %zu is block %d, outside the %zu grid "
                     "blocks of the current mapping (rebuild %llu): a stale or corrupted exchange list (issue #8)",
                     call, k, n, (int)idx[k], s->n_blocks, (unsigned long long)s->rebuilds);
  if (s->n_xl == s->xl_cap) {
    const int cap = s->xl_cap ? 2 * s->xl_cap : 16;
    void *q = realloc(s->xl, sizeof *s->xl * (size_t)cap);
    if (!q) return dr_fail(DR_ENOMEM, "out of host memory for the exchange's block lists");
    s->xl = (xlist *)q, s->xl_cap = cap;
  }
  const size_t off = s->n_xl ? s->xl[s->n_xl - 1].off + s->xl[s->n_xl - 1].n : 0;
  s->xl[s->n_xl++] = (xlist){idx, n, off, s->rebuilds};
  DVEC(s->xidx, (off + n) * sizeof(int32_t), "exchange block indices");
  for (int k = 0; k < s->n_xl; ++k)
    if (s->xl[k].n)
      CU(cudaMemcpyAsync(dp<int32_t>(s->xidx) + s->xl[k].off, s->xl[k].host, s->xl[k].n * sizeof(int32_t),
                         cudaMemcpyHostToDevice, s->stream));
  return DR_OK;
}

/* The device copy of a list mark_shared did not see (not in the steady state): uploaded now,
 * after the registered ones. */
static int indices_for(cuda_state *s, const int32_t *idx, size_t n, const int32_t **out, const char *call) {
  const xlist *e = find_indices(s, idx, n);
  if (e && e->mapping != s->rebuilds) /* every rebuild-mapping must be followed by exchange_setup */
    return dr_fail(DR_EINTERNAL,
                   "cuda backend: %s: a shared-block list registered at rebuild %llu is used after rebuild %llu "
                   "(%zu grid blocks now): exchange_setup did not follow the rebuild-mapping (issue #8)",
                   call, (unsigned long long)e->mapping, (unsigned long long)s->rebuilds, s->n_blocks);
  if (!e) DR_TRY(register_indices(s, idx, n, call));
  *out = device_indices(s, idx, n);
  return DR_OK;
}

static int host_pinned(void **p, size_t *cap, size_t need, const char *what);

/* The codes in pinned memory: the exchange set-up reads them at every rebuild-mapping of a rank.
 * Copied once a mapping (only rebuild_now changes them): a second call returns at once, without
 * waiting for the work queued since (sim.c asks first, then queues the step's P2G and sets up
 * the exchange while the device runs it). */
static int blocks(void *state, const uint64_t **codes, size_t *n) {
  cuda_state *s = (cuda_state *)state;
  *codes = s->h_codes; /* sorted; the position is the dense index (k_table_insert) */
  *n = s->n_blocks;
  s->want_codes = s->nm == 1; /* from the next rebuild-mapping on, codes_early */
  DR_TRY(codes_wait(s));
  if (s->h_codes && s->h_codes_of == s->rebuilds + 1) return DR_OK;
  DR_TRY(host_pinned((void **)&s->h_codes, &s->h_codes_cap, sizeof(uint64_t) * s->n_blocks, "the block codes"));
  if (s->n_blocks)
    CU(cudaMemcpyAsync(s->h_codes, s->block_code.ptr, s->n_blocks * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                       s->stream));
  CU(cudaStreamSynchronize(s->stream));
  s->h_codes_of = s->rebuilds + 1;
  *codes = s->h_codes;
  return DR_OK;
}

static int recv_join(cuda_state *s);

/* The exchange's device buffer for one message (pack_nodes, island_node_masks, island_pack_nodes). */
static int message_buffer(cuda_state *s, size_t bytes, char **msg) {
  DVEC(s->xbuf, bytes, "exchange buffer");
  *msg = dp<char>(s->xbuf);
  return DR_OK;
}

/* node_masks in two halves (backend.h): one link's buffers, and the event after its masks were
 * copied to pinned memory in stream order. */
static void host_release(void *p);

typedef struct pslot {
  dvec msg;        /* the masks on the device (k_node_masks) */
  cudaEvent_t ev;
  size_t n;
  void *h_masks;   /* ... copied here (pinned) */
  size_t h_masks_cap;
} pslot;

/* The exchange's stream, at the device's highest priority: its kernels take the SMs as the
 * interior's P2G and G2P free them, instead of queueing behind every CTA of those. */
static int xstream_get(cuda_state *s) {
  if (s->xstream) return DR_OK;
  int least = 0, greatest = 0;
  CU(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CU(cudaStreamCreateWithPriority(&s->xstream, cudaStreamNonBlocking, greatest));
  return DR_OK;
}

static int pslot_get(cuda_state *s, int slot, pslot **out) {
  if (slot < 0) return dr_fail(DR_EINTERNAL, "cuda backend: pack slot %d", slot);
  if (slot >= s->n_pslot) {
    const int cap = slot + 1 > 2 * s->n_pslot ? slot + 1 : 2 * s->n_pslot;
    pslot *q = (pslot *)realloc(s->pslot, sizeof *q * (size_t)cap);
    if (!q) return dr_fail(DR_ENOMEM, "out of host memory for the exchange's pack buffers");
    memset(q + s->n_pslot, 0, sizeof *q * (size_t)(cap - s->n_pslot));
    s->pslot = q;
    s->n_pslot = cap;
  }
  pslot *x = &s->pslot[slot];
  if (!x->ev) CU(cudaEventCreateWithFlags(&x->ev, cudaEventDisableTiming));
  DR_TRY(xstream_get(s));
  *out = x;
  return DR_OK;
}

static void pslots_free(cuda_state *s) {
  for (int k = 0; k < s->n_pslot; ++k) {
    pslot *x = &s->pslot[k];
    dvec_free(&x->msg);
    host_release(x->h_masks);
    if (x->ev) cudaEventDestroy(x->ev);
  }
  free(s->pslot);
  s->pslot = NULL;
  s->n_pslot = 0;
  if (s->xstream) cudaStreamDestroy(s->xstream);
  s->xstream = NULL;
}

/* The start of the masks in two halves (node_masks_async): with the boundary's P2G on xstream
 * (head_on), the interior's P2G goes on the step's stream now, before the exchange's host work
 * (the device held only the boundary's short launch meanwhile); sim.c's p2g_part(P2G_INTERIOR)
 * then only joins the two streams. */
static int masks_begin(cuda_state *s) {
  if (s->head_on && !s->interior_on) {
    DR_TRY(launch_p2g_interior(s));
    s->interior_on = 1;
  }
  return DR_OK;
}

/* The stream of the masks: xstream, after the boundary's P2G; the interior's P2G, queued on the
 * step's stream, runs beside it (it writes no shared block, which is all the masks read). With
 * head_on they follow the boundary's P2G in xstream's own order, and wait for the step's stream
 * (which may hold the interior's P2G already) only after fresh: a list uploaded or a buffer grown
 * just now (not in the steady state), ordered on the step's stream. */
static int masks_stream(cuda_state *s, int fresh, cudaStream_t *st) {
  if (!s->head_on || fresh) {
    if (!s->xp2g_ev) CU(cudaEventCreateWithFlags(&s->xp2g_ev, cudaEventDisableTiming));
    CU(cudaEventRecord(s->xp2g_ev, s->stream));
    CU(cudaStreamWaitEvent(s->xstream, s->xp2g_ev, 0));
  }
  *st = s->xstream;
  return DR_OK;
}

/* ... with its slot holding the list's length; *x NULL where the list is empty (nothing to queue). */
static int masks_slot(cuda_state *s, int slot, size_t n, pslot **x) {
  DR_TRY(masks_begin(s));
  DR_TRY(pslot_get(s, slot, x));
  (*x)->n = n;
  if (n == 0) *x = NULL;
  return DR_OK;
}

/* A received message's copy to s's device (*msg), queued on xstream at once, so that it overlaps
 * what the step's stream still runs; recv_join makes the step's stream wait for it. Each link's
 * message of the step has its own place in xrecv (the kernels of an earlier link may still read
 * theirs); g2p starts the places again. */
static int recv_place(cuda_state *s, size_t bytes, char **msg) {
  size_t at = (s->xrecv_used + 255) & ~(size_t)255;
  DR_TRY(xstream_get(s));
  if (at + bytes > s->xrecv.bytes) {
    if (at > 0) { /* the step's earlier unpacks read the old buffer */
      CU(cudaStreamSynchronize(s->stream));
      CU(cudaStreamSynchronize(s->xstream));
    }
    DVEC(s->xrecv, at + bytes, "exchange receive buffer");
  }
  s->xrecv_used = at + bytes;
  *msg = dp<char>(s->xrecv) + at;
  return DR_OK;
}

/* The step's stream waits for what xstream has queued (the received copies, the unpacks): the
 * shared blocks' update and the boundary's G2P come after. */
static int recv_join(cuda_state *s) {
  if (!s->xrecv_ev) CU(cudaEventCreateWithFlags(&s->xrecv_ev, cudaEventDisableTiming));
  CU(cudaEventRecord(s->xrecv_ev, s->xstream));
  CU(cudaStreamWaitEvent(s->stream, s->xrecv_ev, 0));
  return DR_OK;
}

/* The node exchange (backend.h): the masks as a pack in two halves (k_node_masks into the slot's
 * device buffer, then copied to its pinned host buffer in the same stream's order). */
static int node_masks_async(void *state, int slot, const int32_t *idx, size_t n) {
  cuda_state *s = (cuda_state *)state;
  pslot *x = NULL;
  DR_TRY(masks_slot(s, slot, n, &x));
  if (!x) return DR_OK;
  const int32_t *didx;
  const int n_xl = s->n_xl;
  const void *msg = x->msg.ptr;
  DR_TRY(indices_for(s, idx, n, &didx, "node_masks_async"));
  DVEC(x->msg, n * sizeof(unsigned long long), "exchange buffer");
  DR_TRY(host_pinned(&x->h_masks, &x->h_masks_cap, n * sizeof(unsigned long long), "the exchange's node masks"));
  cudaStream_t st;
  DR_TRY(masks_stream(s, s->n_xl != n_xl || x->msg.ptr != msg, &st));
  const int bs = sums_floats(s);
  const int32_t nb = (int32_t)s->n_blocks;
  unsigned long long *mask = dp<unsigned long long>(x->msg);
  if (s->det)
    k_node_masks<long long><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n, bs, didx, nb, s->d_xbad, dp<uint8_t>(s->touched[s->par]), dp<long long>(s->igrid[s->par]), NULL, mask);
  else
    k_node_masks<float><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n, bs, didx, nb, s->d_xbad, dp<uint8_t>(s->touched[s->par]), dp<float>(s->grid[s->par]), grid0_of(s, s->par),
        mask);
  LAUNCHED("k_node_masks");
  CU(cudaMemcpyAsync(x->h_masks, mask, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost, st));
  CU(cudaEventRecord(x->ev, st));
  return DR_OK;
}

static int node_masks_wait(void *state, int slot, uint64_t *out) {
  cuda_state *s = (cuda_state *)state;
  if (slot < 0 || slot >= s->n_pslot)
    return dr_fail(DR_EINTERNAL, "cuda backend: node_masks_wait(%d) without its node_masks_async", slot);
  pslot *x = &s->pslot[slot];
  if (x->n == 0) return DR_OK;
  CU(cudaEventSynchronize(x->ev));
  DR_TRY(xbad_check(s, "node_masks_async (k_node_masks)", x->n));
  memcpy(out, x->h_masks, x->n * sizeof(uint64_t));
  return DR_OK;
}

/* node_masks in one call: the two halves in slot 0 (exchange.c calls it for one link after
 * another, each waited for, with no pack in two halves queued). */
static int node_masks(void *state, const int32_t *idx, size_t n, uint64_t *out) {
  DR_TRY(node_masks_async(state, 0, idx, n));
  return node_masks_wait(state, 0, out);
}

/* Nodes marked in the last of n masks with their prefix sums base: the message's nodes. */
static size_t nodes_marked(const uint64_t *mask, const uint32_t *base, size_t n) {
  return n ? (size_t)base[n - 1] + (size_t)__builtin_popcountll(mask[n - 1]) : 0;
}

/* The start of a node pack on s (pack_nodes, island_pack_nodes): the AND of the masks and its
 * prefix sums uploaded on xstream into xnodes, the message's device buffer (bytes, xbuf). */
static int nodes_pack_begin(cuda_state *s, size_t n, const uint64_t *mask, const uint32_t *base, size_t bytes,
                            const unsigned long long **dmask, const unsigned **dbase, char **msg) {
  const size_t mb = (n * sizeof(uint64_t) + 255) & ~(size_t)255;
  DR_TRY(xstream_get(s));
  DVEC(s->xnodes, mb + n * sizeof(uint32_t), "exchange node masks");
  DR_TRY(message_buffer(s, bytes, msg));
  *dmask = dp<unsigned long long>(s->xnodes);
  *dbase = reinterpret_cast<const unsigned *>(dp<char>(s->xnodes) + mb);
  CU(cudaMemcpyAsync((void *)*dmask, mask, n * sizeof(uint64_t), cudaMemcpyHostToDevice, s->xstream));
  CU(cudaMemcpyAsync((void *)*dbase, base, n * sizeof(uint32_t), cudaMemcpyHostToDevice, s->xstream));
  return DR_OK;
}

/* ... and its end: the message copied to out and waited for; the pack kernel's index marks. */
static int nodes_pack_end(cuda_state *s, void *out, const char *msg, size_t bytes, size_t n, const char *call) {
  CU(cudaMemcpyAsync(out, msg, bytes, cudaMemcpyDefault, s->xstream));
  CU(cudaStreamSynchronize(s->xstream));
  return xbad_check(s, call, n);
}

/* The bytes of a node message of s's channels. */
static size_t nodes_bytes(const cuda_state *s, size_t total) {
  return total * (size_t)(sums_floats(s) / BLOCK_NODES) * (s->det ? sizeof(long long) : sizeof(float));
}

/* On xstream (high priority, beside the interior's work on the step's stream): node_masks_wait
 * saw the boundary's P2G complete, and the interior writes no shared block. */
static int pack_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base, void *out) {
  cuda_state *s = (cuda_state *)state;
  const size_t bytes = nodes_bytes(s, nodes_marked(mask, base, n));
  if (bytes == 0) return DR_OK;
  const int32_t *didx;
  DR_TRY(indices_for(s, idx, n, &didx, "pack_nodes"));
  const unsigned long long *dmask;
  const unsigned *dbase;
  char *msg;
  DR_TRY(nodes_pack_begin(s, n, mask, base, bytes, &dmask, &dbase, &msg));
  const int bs = sums_floats(s);
  const int32_t nb = (int32_t)s->n_blocks;
  if (s->det)
    k_move_nodes<long long, false><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->xstream>>>(
        n, bs, didx, nb, s->d_xbad, dmask, dbase, dp<long long>(s->igrid[s->par]), NULL,
        reinterpret_cast<long long *>(msg));
  else
    k_move_nodes<float, false><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->xstream>>>(
        n, bs, didx, nb, s->d_xbad, dmask, dbase, dp<float>(s->grid[s->par]), grid0_of(s, s->par),
        reinterpret_cast<float *>(msg));
  LAUNCHED("k_move_nodes (pack)");
  return nodes_pack_end(s, out, msg, bytes, n, "pack_nodes (k_move_nodes)");
}

/* A received node message, its masks and their prefix sums copied to s's device on xstream at once,
 * in one place (a second recv_place could grow the buffer under the first copy). */
static int nodes_recv(cuda_state *s, const void *in, size_t bytes, size_t n, const uint64_t *mask, const uint32_t *base,
                      char **msg, const unsigned long long **dmask, const unsigned **dbase) {
  const size_t va = (bytes + 255) & ~(size_t)255, ma = (n * sizeof(uint64_t) + 255) & ~(size_t)255;
  DR_TRY(recv_place(s, va + ma + n * sizeof(uint32_t), msg));
  *dmask = reinterpret_cast<const unsigned long long *>(*msg + va);
  *dbase = reinterpret_cast<const unsigned *>(*msg + va + ma);
  CU(cudaMemcpyAsync(*msg, in, bytes, cudaMemcpyDefault, s->xstream));
  CU(cudaMemcpyAsync((void *)*dmask, mask, n * sizeof(uint64_t), cudaMemcpyHostToDevice, s->xstream));
  CU(cudaMemcpyAsync((void *)*dbase, base, n * sizeof(uint32_t), cudaMemcpyHostToDevice, s->xstream));
  return DR_OK;
}

/* The copies on xstream at once (nodes_recv), so that they overlap what the step's stream still
 * runs, and the unpack on xstream too: the interior's grid update and G2P beside it touch no shared
 * block, which is all it writes. No wait here: the host queues the shared blocks' grid update and
 * G2P behind the unpacks at once (recv_join, or with tail_armed grid_update_part, which waits for
 * them on xstream itself). in stays unchanged until the next g2p returns (backend.h), which waits
 * for the stream, and its check of h_xbad names this call (unpack_check_n). */
static int unpack_add_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
                            const void *in) {
  cuda_state *s = (cuda_state *)state;
  const size_t bytes = nodes_bytes(s, nodes_marked(mask, base, n));
  if (bytes == 0) return DR_OK;
  const int32_t *didx;
  DR_TRY(indices_for(s, idx, n, &didx, "unpack_add_nodes"));
  char *msg;
  const unsigned long long *m;
  const unsigned *b;
  DR_TRY(nodes_recv(s, in, bytes, n, mask, base, &msg, &m, &b));
  cudaStream_t st = s->xstream;
  const int bs = sums_floats(s);
  const int32_t nb = (int32_t)s->n_blocks;
  if (s->det)
    k_move_nodes<long long, true><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n, bs, didx, nb, s->d_xbad, m, b, dp<long long>(s->igrid[s->par]), NULL, reinterpret_cast<long long *>(msg));
  else
    k_move_nodes<float, true><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n, bs, didx, nb, s->d_xbad, m, b, dp<float>(s->grid[s->par]), grid0_of(s, s->par), reinterpret_cast<float *>(msg));
  LAUNCHED("k_move_nodes (unpack)");
  if (!s->tail_armed) DR_TRY(recv_join(s));
  s->unpack_check_n = n; /* the next g2p checks the index marks and waits for the stream */
  return DR_OK;
}

/* The rank exchange's buffers: pinned host memory, or device memory for a CUDA-aware MPI. */
static int alloc_sums(void *state, size_t bytes, int device, void **ptr) {
  cuda_state *s = (cuda_state *)state;
  *ptr = NULL;
  CU(cudaSetDevice(s->device));
  cudaError_t e = device ? cudaMalloc(ptr, bytes ? bytes : 1) : cudaHostAlloc(ptr, bytes ? bytes : 1, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    *ptr = NULL;
    (void)cudaGetLastError();
    return dr_fail(DR_ENOMEM, "%s failed (%s:%d): %s: %zu bytes for the shared-block sums between ranks",
                   device ? "cudaMalloc" : "cudaHostAlloc", __FILE__, __LINE__, cudaGetErrorString(e), bytes);
  }
  return DR_OK;
}

static void free_sums(void *ptr, int device) {
  if (device) (void)cudaFree(ptr);
  else (void)cudaFreeHost(ptr);
}

static int mark_shared(void *state, const int32_t *idx, size_t n) {
  cuda_state *s = (cuda_state *)state;
  s->order_stale = 1;
  s->shared_stale = 1;
  if (!idx) { /* a new exchange_setup: the lists given before are freed (their host addresses may come back) */
    s->n_xl = 0;
    s->shared_bound = 0;
    if (s->n_blocks) CU(cudaMemsetAsync(s->shared.ptr, 0, s->n_blocks, s->stream));
    return DR_OK;
  }
  if (n == 0) return DR_OK;
  s->shared_bound += n; /* a block two links share counts twice: a bound */
  DR_TRY(register_indices(s, idx, n, "mark_shared"));
  k_mark<<<blocks_for(n, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
      n, device_indices(s, idx, n), (int32_t)s->n_blocks, s->d_xbad, dp<uint8_t>(s->shared));
  LAUNCHED("k_mark");
  CU(cudaStreamSynchronize(s->stream));
  return xbad_check(s, "mark_shared (k_mark)", n);
}

/* shared_list: the marked blocks' indices, in no particular order (each block's update is its
 * own), and their count. */
__global__ static void k_shared_list(size_t n_blocks, const uint8_t *__restrict__ shared, int32_t *__restrict__ list,
                                     int *__restrict__ count) {
  const size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (b < n_blocks && shared[b]) list[atomicAdd(count, 1)] = (int32_t)b;
}

/* The shared blocks' list from the marks, on the device (the count stays there: k_grid reads it;
 * the launch takes shared_bound), once per marks. */
static int shared_list(cuda_state *s, cudaStream_t st) {
  if (!s->shared_stale) return DR_OK;
  DVEC(s->shared_idx, (s->n_blocks ? s->n_blocks : 1) * sizeof(int32_t), "shared blocks' list");
  DVEC(s->shared_n, sizeof(int), "shared blocks' count");
  CU(cudaMemsetAsync(s->shared_n.ptr, 0, sizeof(int), st));
  if (s->n_blocks > 0) {
    k_shared_list<<<blocks_for(s->n_blocks, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        s->n_blocks, dp<uint8_t>(s->shared), dp<int32_t>(s->shared_idx), dp<int>(s->shared_n));
    LAUNCHED("k_shared_list");
  }
  s->shared_stale = 0;
  return DR_OK;
}

/* The tail on xstream (one GPU, with g2p_interior, no colliders): the shared blocks' update
 * and then the boundary's G2P (g2p) go on xstream, behind the unpacks there and behind xint_ev
 * (the step's stream up to the interior's grid update), so that they run beside the interior's
 * G2P instead of after it: both are short launches of few packets whose time is their warps'
 * latency, which the interior's G2P now hides. No race: the shared update writes only shared
 * blocks (their velocities, and their other-parity sums, which it clears), which the interior's
 * G2P never reads (its stencils reach no shared block: boundary_order); the boundary's G2P reads
 * interior blocks that xint_ev ordered finished and shared blocks that xstream just updated, and
 * writes only its own packets; the flags of both G2Ps meet in step_ctl by atomics (any order gives
 * the same flags). g2p joins xstream into the step's stream before the step record. */
static int grid_update_part(void *state, float dt, int part) {
  (void)dt; /* k_begin_fixed stored it */
  cuda_state *s = (cuda_state *)state;
  if (part == GRID_SHARED && s->tail_armed) {
    s->tail_armed = 0;
    CU(cudaStreamWaitEvent(s->xstream, s->xint_ev, 0));
    DR_TRY(launch_grid_on(s, s->par, part, s->xstream));
    s->tail_on = 1;
    return DR_OK;
  }
  return launch_grid(s, s->par, part);
}

static int wants_rebuild(void *state) { return ((cuda_state *)state)->need_rebuild; }

static int set_particles(void *state, particles *p) {
  cuda_state *s = (cuda_state *)state;
  if (p->n > (size_t)INT32_MAX / 2)
    return dr_fail(DR_EINPUT, "%zu particles on one GPU: the cuda backend holds at most %d per GPU", p->n,
                   INT32_MAX / 2);
  CU(cudaStreamSynchronize(s->stream)); /* nothing queued still reads the packets */
  DR_TRY(upload(s, p));
  particles_free(p);
  DR_TRY(rebuild_now(s));
  CU(cudaStreamSynchronize(s->stream));
  return DR_OK;
}

/* Appends p's particles in new packets after the current ones (the packets of the last mapping
 * keep their partly filled lanes; k_keys sorts empty lanes last); the caller's rebuild-mapping
 * then sorts everything. Device buffers grow 4x when more than half full (contents kept), so a source
 * emitting frame after frame allocates only now and then; the host staging packets grow only. A
 * G2P2G frame after this starts from an unprimed P2G: the primed sums (keep_primed) lack the new
 * particles, and the P2G that adds them runs again over the old ones too, applying their return
 * mapping a second time (not exact for NACC; a P2G of the new particles alone would be). */
/* The host's staging packets (h_add, h_add_id, h_add_hdr) for at least n packets: grown 2x,
 * kept between calls (particles added, and those that emigrate). */
static int host_packets(cuda_state *s, size_t n) {
  if (n <= s->h_add_cap) return DR_OK;
  free(s->h_add), free(s->h_add_id), free(s->h_add_hdr);
  size_t cap = s->h_add_cap ? s->h_add_cap : 64;
  while (cap < n) cap *= 2;
  s->h_add = (float *)dr_malloc(cap * PK_FLOATS * sizeof(float), "particle staging");
  s->h_add_id = (uint64_t *)dr_malloc(cap * LANES * sizeof(uint64_t), "particle staging");
  s->h_add_hdr = (int2 *)dr_malloc(cap * sizeof(int2), "particle staging");
  s->h_add_cap = s->h_add && s->h_add_id && s->h_add_hdr ? cap : 0;
  return s->h_add_cap ? DR_OK : DR_ENOMEM;
}

/* Frees what host_pinned gave: pinned, or pageable past DRIFT_PINNED_MAX_MB (hostmem.h). */
static void host_release(void *p) {
  if (!p) return;
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost) {
    (void)cudaFreeHost(p);
  } else {
    (void)cudaGetLastError();
    free(p);
  }
}

/* Pinned host memory of at least need bytes in *p (capacity *cap, grown 2x; contents not kept),
 * portable: any GPU of the island copies from it without a bounce. Past DRIFT_PINNED_MAX_MB,
 * pageable memory instead (hostmem.h); host_release frees either. */
static int host_pinned(void **p, size_t *cap, size_t need, const char *what) {
  if (need <= *cap && *p) return DR_OK;
  const size_t c = hostmem_capacity(*cap, need); /* weak_2's rebalance: pinning 128 MiB took about 60 ms */
  host_release(*p);
  *p = NULL;
  *cap = 0;
  if (c > hostmem_pinned_max()) {
    *p = hostmem_pageable(c);
    if (!*p) return dr_fail(DR_ENOMEM, "out of host memory: %zu bytes for %s", c, what);
    *cap = c;
    return DR_OK;
  }
  const cudaError_t e = cudaHostAlloc(p, c, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    *p = NULL;
    (void)cudaGetLastError();
    return dr_fail(DR_ENOMEM, "cudaHostAlloc failed (%s:%d): %s: %zu bytes for %s", __FILE__, __LINE__,
                   cudaGetErrorString(e), c, what);
  }
  *cap = c;
  return DR_OK;
}

/* Room for m more particles in new packets after the current ones (device buffers grown, their
 * contents kept): *old_packets is where the new ones start, *add_packets how many. */
static int append_room(cuda_state *s, size_t m, size_t *old_packets_out, size_t *add_packets_out) {
  if (s->n + m > (size_t)INT32_MAX / 2)
    return dr_fail(DR_EINPUT, "%zu particles on one GPU: the cuda backend holds at most %d per GPU", s->n + m,
                   INT32_MAX / 2);
  CU(cudaStreamSynchronize(s->stream)); /* nothing queued still reads the packets */
  s->primed = 0;
  const size_t old_packets = s->n_packets, add_packets = (m + LANES - 1) / LANES;
  const size_t packets = old_packets + add_packets, slots = packets * LANES;
  cudaStream_t st = s->stream;
  DVEC_KEEP(s->pk[s->cur], packets * PK_FLOATS * sizeof(float), old_packets * PK_FLOATS * sizeof(float), st,
            "particle packets");
  DVEC_KEEP(s->pid[s->cur], slots * sizeof(uint64_t), old_packets * LANES * sizeof(uint64_t), st, "particle ids");
  DVEC_KEEP(s->hdr, packets * sizeof(int2), old_packets * sizeof(int2), st, "packet headers");
  DR_TRY(push_buffers(s, packets));
  for (int k = 0; k < 2; ++k) {
    DVEC_PK(s->keys[k], slots * sizeof(uint64_t), "particle sort keys");
    DVEC_PK(s->vals[k], slots * sizeof(uint32_t), "particle sort keys");
  }
  DVEC(s->pblock, (s->n + m) * sizeof(int32_t), "particle block indices");
  DVEC(s->head, (s->n + m) * sizeof(int32_t), "particle block indices");
  *old_packets_out = old_packets;
  *add_packets_out = add_packets;
  return DR_OK;
}

/* Particles [0, n) of p into the host's packets (pk, id) and headers (hdr), packets of them,
 * in order: packet k holds particles [32k, 32k + 32), its free lanes zero. */
static void packets_from_particles(const particles *p, size_t n, size_t packets, float *pk, uint64_t *id, int2 *hdr) {
  memset(pk, 0, packets * PK_FLOATS * sizeof(float));
  memset(id, 0, packets * LANES * sizeof(uint64_t));
  for (size_t i = 0; i < n; ++i) {
    float *q = pk + (i / LANES) * PK_FLOATS + i % LANES;
    for (int a = 0; a < 3; ++a) q[(A_X + a) * LANES] = p->x[3 * i + a], q[(A_V + a) * LANES] = p->v[3 * i + a];
    for (int a = 0; a < 9; ++a) q[(A_C + a) * LANES] = p->C[9 * i + a], q[(A_F + a) * LANES] = p->F[9 * i + a];
    q[A_M * LANES] = p->mass[i];
    q[A_VOL * LANES] = p->vol0[i];
    q[A_JP * LANES] = p->logjp[i];
    memcpy(&q[A_MAT * LANES], &p->material[i], sizeof(int32_t));
    id[i] = p->id[i];
  }
  for (size_t k = 0; k < packets; ++k) hdr[k] = make_int2(-1, (int)(n - k * LANES < LANES ? n - k * LANES : LANES));
}

static int append_particles(cuda_state *s, const particles *p) {
  const size_t m = p->n;
  if (m == 0) return DR_OK;
  size_t old_packets = 0, add_packets = 0;
  DR_TRY(append_room(s, m, &old_packets, &add_packets));
  const size_t packets = old_packets + add_packets;
  cudaStream_t st = s->stream;
  DR_TRY(host_packets(s, add_packets));
  float *pk = s->h_add;
  uint64_t *id = s->h_add_id;
  packets_from_particles(p, m, add_packets, pk, id, s->h_add_hdr);
  CU(cudaMemcpyAsync(dp<float>(s->pk[s->cur]) + old_packets * PK_FLOATS, pk, add_packets * PK_FLOATS * sizeof(float),
                     cudaMemcpyHostToDevice, st));
  CU(cudaMemcpyAsync(dp<uint64_t>(s->pid[s->cur]) + old_packets * LANES, id, add_packets * LANES * sizeof(uint64_t),
                     cudaMemcpyHostToDevice, st));
  CU(cudaMemcpyAsync(dp<int2>(s->hdr) + old_packets, s->h_add_hdr, add_packets * sizeof(int2), cudaMemcpyHostToDevice,
                     st));
  s->n += m;
  s->n_packets = packets;
  CU(cudaStreamSynchronize(st)); /* the staging packets are reused by the next call */
  return DR_OK;
}

static int add_particles(void *state, const particles *p) {
  cuda_state *s = (cuda_state *)state;
  if (p->n == 0) return DR_OK;
  DR_TRY(append_particles(s, p));
  DR_TRY(rebuild_now(s));
  CU(cudaStreamSynchronize(s->stream));
  return DR_OK;
}

/* m records (host memory; pinned copies fastest) appended as new packets: one copy to the device
 * and k_records_in there, instead of the host filling staging packets attribute by attribute.
 * rec may change once this returns. A record's owner is not kept (download sets it). */
static int append_records(cuda_state *s, const void *rec, size_t m) {
  if (m == 0) return DR_OK;
  size_t old_packets = 0, add_packets = 0;
  DR_TRY(append_room(s, m, &old_packets, &add_packets));
  cudaStream_t st = s->stream;
  DVEC(s->xrec, m * REC_WORDS * sizeof(uint32_t), "arriving particles");
  CU(cudaMemcpyAsync(s->xrec.ptr, rec, m * REC_WORDS * sizeof(uint32_t), cudaMemcpyHostToDevice, st));
  k_records_in<<<blocks_for(add_packets * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      m, add_packets, dp<uint32_t>(s->xrec), dp<float>(s->pk[s->cur]) + old_packets * PK_FLOATS,
      dp<uint64_t>(s->pid[s->cur]) + old_packets * LANES, dp<int2>(s->hdr) + old_packets);
  LAUNCHED("k_records_in");
  s->n += m;
  s->n_packets = old_packets + add_packets;
  CU(cudaStreamSynchronize(st)); /* rec may change once this returns */
  return DR_OK;
}

/* backend.h's add_records (sim.c's buffers are pinned by alloc_sums): append_records, then the
 * rebuild-mapping, as add_particles. */
static int add_records(void *state, const void *rec, size_t m) {
  cuda_state *s = (cuda_state *)state;
  if (m == 0) return DR_OK;
  DR_TRY(append_records(s, rec, m)); /* done with rec (it waits for its copy) */
  /* no wait for the rebuild-mapping's end, as rebuild(): the next step's blocks() waits only for
   * the codes (codes_early), and its P2G queues behind the move */
  return rebuild_now(s);
}

/* ---- backend.h: the phases ---------------------------------------------------------------- */

static int rebuild(void *state, int force, int *rebuilt) {
  cuda_state *s = (cuda_state *)state;
  *rebuilt = 0;
  if (!force && !s->need_rebuild) return DR_OK;
  DR_TRY(rebuild_now(s));
  *rebuilt = 1;
  return DR_OK;
}

static void marks_gate(cuda_state *s, int shut);

/* Opens the armed gate for the spinning k_begin_gated (go), or voids its step: the gate's number and
 * the outcome in one word of mapped memory. */
static void gate_write(cuda_state *s, int go) {
  __atomic_store_n(s->h_gate, (s->gate_seq << 1) | (go ? 1u : 0u), __ATOMIC_RELEASE);
  s->gate_armed = 0;
  marks_gate(s, 0); /* the marks behind it complete now */
}

/* The phases' step begin: k_begin_fixed, or behind the gate that g2p_ahead armed (k_begin_gated). */
static int launch_begin(cuda_state *s, float dt) {
  if (s->gate_armed && s->primed) return dr_fail(DR_EINTERNAL, "cuda backend: a primed P2G behind a gate");
  if (s->gate_armed && !s->gate_queued) {
    k_begin_gated<<<1, 1, 0, s->stream>>>(dp<step_ctl>(s->ctl), s->d_gate, s->gate_seq, dt, s->t_next + (double)dt,
                                          s->barrier_timeout_ns);
    LAUNCHED("k_begin_gated");
    s->gate_queued = 1;
    marks_gate(s, 1); /* the marks a fold may wait for: those recorded so far */
    return DR_OK;
  }
  if (s->gate_armed) return dr_fail(DR_EINTERNAL, "cuda backend: a second step begun behind one gate");
  k_begin_fixed<<<1, 1, 0, s->stream>>>(dp<step_ctl>(s->ctl), dt, s->t_next + (double)dt);
  LAUNCHED("k_begin_fixed");
  return DR_OK;
}

static int p2g(void *state, float dt) {
  cuda_state *s = (cuda_state *)state;
  s->g2p_rest = s->tail_on = s->tail_armed = s->head_on = s->interior_on = 0;
  DR_TRY(launch_begin(s, dt));
  if (s->primed) { /* after G2P2G frames: the last G2P2G (or the rebuild's keep_primed) did this P2G */
    s->primed = 0;
    if (dt == s->primed_dt) return DR_OK;
    /* Another dt: the primed sums hold the stress impulse -dt V0 (4/dx^2) tau of the old dt,
     * summed with the dt-free mass and APIC momentum, so they cannot be rescaled; P2G runs again.
     * Not exact: that P2G already applied the return mapping to F and logJp, so it is applied a
     * second time (NACC hardens twice). Fixed steps keep one dt per run, so a change of dt
     * between G2P2G frames and this step is not expected. */
    DR_TRY(clear_grid(s, s->par));
  }
  return launch_p2g(s, s->par);
}

/* p2g_part's order: the boundary packets (k_pk_boundary) first, the others after them (in
 * reverse order: cub's partition), computed once per mapping and marks (one read of the count). */
static int boundary_order(cuda_state *s) {
  if (!s->order_stale) return DR_OK;
  cudaStream_t st = s->stream;
  const size_t n = s->n_packets;
  s->n_boundary = 0;
  if (n > 0) {
    DVEC(s->pk_order, n * sizeof(int32_t), "packet order (p2g_part)");
    uint8_t *flag = dp<uint8_t>(s->keys[0]); /* the sort's scratch (>= n_packets * LANES * 8 bytes) */
    int32_t *iota = dp<int32_t>(s->vals[0]);
    k_pk_boundary<<<blocks_for(n, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
        n, dp<int2>(s->hdr), dp<int32_t>(s->pb_nbr), dp<uint8_t>(s->shared), flag, iota);
    LAUNCHED("k_pk_boundary");
    CUB_RUN(cub::DevicePartition::Flagged(temp_ptr, temp_bytes, iota, flag, dp<int32_t>(s->pk_order),
                                          dp<int>(s->count), (int)n, st));
    int nb = 0;
    DR_TRY(read_count(s, s->count.ptr, &nb));
    s->n_boundary = (size_t)nb;
    TRACE("p2g_part: %d of %zu packets on device %d reach shared blocks", nb, n, s->device);
  }
  s->order_stale = 0;
  return DR_OK;
}

/* backend.h's p2g_part (ranks: sim.c sends the boundary's sums while the interior scatters). The
 * boundary call does what p2g does before its P2G (the step's dt, primed sums), then scatters the
 * boundary packets; the interior call scatters the rest, on the same stream. */
static int p2g_part(void *state, float dt, int part) {
  cuda_state *s = (cuda_state *)state;
  if (part == P2G_INTERIOR) {
    if (s->part_skip) return DR_OK;
    if (!s->interior_on) /* else node_masks_async queued it (masks_begin) */
      DR_TRY(launch_p2g_interior(s));
    s->interior_on = 0;
    /* head_on: the interior's grid update (next on this stream) reads blocks both parts scatter into */
    if (s->head_on) CU(cudaStreamWaitEvent(s->stream, s->xhead_ev, 0));
    s->head_on = 0;
    return DR_OK;
  }
  s->part_skip = 0;
  s->g2p_rest = s->tail_on = s->tail_armed = s->head_on = s->interior_on = 0;
  /* behind a gate, the order's count read (a host wait) comes before the gated begin */
  if (s->gate_armed) DR_TRY(boundary_order(s));
  DR_TRY(launch_begin(s, dt));
  if (s->primed) { /* as in p2g() */
    s->primed = 0;
    if (dt == s->primed_dt) {
      s->part_skip = 1;
      return DR_OK;
    }
    DR_TRY(clear_grid(s, s->par));
  }
  DR_TRY(boundary_order(s));
  /* One GPU: the boundary's P2G on xstream (high priority), where the pack
   * follows it, beside the interior's P2G on the step's stream instead of before it: a short
   * launch whose time is its warps' latency. Both scatter by atomic additions (float or, in
   * deterministic mode, fixed-point: the same sums in any order) and into interior blocks alike;
   * the pack reads only shared blocks, which only boundary packets reach; the interior's grid
   * update waits for xhead_ev (p2g_part(P2G_INTERIOR)). */
  if (s->nm == 1 && s->n_boundary > 0) {
    DR_TRY(xstream_get(s));
    if (!s->xbeg_ev) CU(cudaEventCreateWithFlags(&s->xbeg_ev, cudaEventDisableTiming));
    if (!s->xhead_ev) CU(cudaEventCreateWithFlags(&s->xhead_ev, cudaEventDisableTiming));
    CU(cudaEventRecord(s->xbeg_ev, s->stream));
    CU(cudaStreamWaitEvent(s->xstream, s->xbeg_ev, 0));
    DR_TRY(launch_p2g_on(s, s->par, dp<int32_t>(s->pk_order), s->n_boundary, s->xstream));
    CU(cudaEventRecord(s->xhead_ev, s->xstream));
    s->head_on = 1;
    return DR_OK;
  }
  return launch_p2g_of(s, s->par, dp<int32_t>(s->pk_order), s->n_boundary);
}

/* backend.h's g2p_interior (ranks): the G2P of the packets whose stencils reach no block shared
 * with another rank (boundary_order's interior list), queued behind grid_update_part(GRID_INTERIOR)
 * while the shared blocks' sums are in flight. Those packets read only interior blocks, which that
 * update has finished, and no later kernel of the step writes them (the unpack and the shared
 * blocks' update touch shared blocks only). g2p then runs the boundary packets and the collision
 * step of all (launch_g2p_of); the flags of both parts meet in the step's ctl. */
static int g2p_interior(void *state, float dt) {
  (void)dt; /* k_begin_fixed stored it */
  cuda_state *s = (cuda_state *)state;
  s->g2p_rest = 0;
  if (s->n_packets == 0) return DR_OK;
  DR_TRY(boundary_order(s)); /* once per mapping and marks; a setup step's comes here */
  /* one GPU: the step's stream so far (the boundary's and the interior's P2G, the interior's grid
   * update), for the shared blocks' update on xstream (grid_update_part) */
  if (s->nm == 1 && !s->push && s->bnd.n_colliders == 0) {
    DR_TRY(xstream_get(s));
    if (!s->xint_ev) CU(cudaEventCreateWithFlags(&s->xint_ev, cudaEventDisableTiming));
    CU(cudaEventRecord(s->xint_ev, s->stream));
    s->tail_armed = 1;
  }
  DR_TRY(launch_g2p_of(s, s->par, 0, interior_list(s), interior_count(s), 0));
  s->g2p_rest = 1;
  return DR_OK;
}

static int grid_update(void *state, float dt) {
  (void)dt; /* k_begin_fixed stored it */
  cuda_state *s = (cuda_state *)state;
  return launch_grid(s, s->par, GRID_ALL);
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

/* backend.set_projected, in stream order before the next P2G. */
static int set_projected(void *state) {
  cuda_state *s = (cuda_state *)state;
  k_set_projected<<<1, 1, 0, s->stream>>>(dp<step_ctl>(s->ctl));
  LAUNCHED("k_set_projected");
  return DR_OK;
}

/* Packets copied to the host into out's particles [at, at + count): the valid lanes of each packet
 * (hdr[p].y; all lanes where hdr is NULL), in order. Returns how many it wrote. */
static size_t unpack_host(const cuda_state *s, const float *pk, const uint64_t *id, const int2 *hdr, size_t np,
                          size_t count, particles *out, size_t at) {
  const int32_t owner = s->prm.rank * 256 + s->me; /* the GPU's index in the rank's island */
  size_t i = 0;
  for (size_t p = 0; p < np; ++p)
    for (int l = 0; l < (hdr ? hdr[p].y : LANES) && i < count; ++l, ++i) {
      const float *q = pk + p * PK_FLOATS + l;
      const size_t o = at + i;
      for (int a = 0; a < 3; ++a) out->x[3 * o + a] = q[(A_X + a) * LANES], out->v[3 * o + a] = q[(A_V + a) * LANES];
      for (int a = 0; a < 9; ++a) out->C[9 * o + a] = q[(A_C + a) * LANES], out->F[9 * o + a] = q[(A_F + a) * LANES];
      out->mass[o] = q[A_M * LANES];
      out->vol0[o] = q[A_VOL * LANES];
      out->logjp[o] = q[A_JP * LANES];
      memcpy(&out->material[o], &q[A_MAT * LANES], sizeof(int32_t));
      out->id[o] = id[p * LANES + l];
      out->owner[o] = owner;
    }
  return i;
}

/* backend.h's emigrate and emigrate_records: the particles whose block lies outside [lo, hi) leave
 * the device. Only they cross to the host (k_leave flags them, a scan numbers them in slot order,
 * k_leave_records packs them); their slots are marked gone, and the caller's next rebuild-mapping
 * (add_particles, add_records or rebuild) sorts them out of the mapping. Until then the device
 * holds no step's sums for them: primed G2P2G sums are dropped (the next frame primes again). */
/* Their first half: flags the particles whose block lies outside [lo, hi) (k_leave), numbers
 * them (*upto, an inclusive scan in slot order) and counts them (*m); where there are some, the
 * gone marks are ready for the gather that marks their slots. */
static int leave_flags(cuda_state *s, const int32_t lo[3], const int32_t hi[3], int *m, uint32_t **flag_out,
                       uint32_t **upto_out) {
  *m = 0;
  if (s->n == 0) return DR_OK;
  cudaStream_t st = s->stream;
  const size_t n_slots = s->n_packets * LANES;
  uint32_t *flag = dp<uint32_t>(s->vals[0]), *upto = dp<uint32_t>(s->vals[1]); /* the sort's scratch, >= n_slots */
  k_leave<<<blocks_for(n_slots, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      n_slots, dp<float>(s->pk[s->cur]), dp<int2>(s->hdr), make_float3(s->origin[0], s->origin[1], s->origin[2]),
      s->inv_dx, make_int3(lo[0], lo[1], lo[2]), make_int3(hi[0], hi[1], hi[2]), dp<uint8_t>(s->gone), s->n_gone, flag);
  LAUNCHED("k_leave");
  CUB_RUN(cub::DeviceScan::InclusiveSum(temp_ptr, temp_bytes, flag, upto, (int)n_slots, st));
  DR_TRY(read_count(s, upto + n_slots - 1, m));
  if (*m == 0) return DR_OK;
  if (s->n_gone != 0 && s->n_gone != n_slots)
    return dr_fail(DR_EINTERNAL, "cuda backend: emigrate: particles were added after an emigrate without a "
                   "rebuild-mapping between them (%zu marked slots, %zu slots)", s->n_gone, n_slots);
  if (s->n_gone == 0) { /* the first emigrate since the last rebuild-mapping; a second one adds to its marks */
    DVEC(s->gone, n_slots, "emigrating particles");
    CU(cudaMemsetAsync(s->gone.ptr, 0, n_slots, st));
  }
  *flag_out = flag;
  *upto_out = upto;
  return DR_OK;
}

/* Their second half, after the gather: m particles are gone from the device. */
static int left(cuda_state *s, int m) {
  s->n -= (size_t)m;
  s->n_gone = s->n_packets * LANES;
  TRACE("emigrate: %d particles leave device %d", m, s->device);
  if (s->primed) {
    DR_TRY(clear_grid(s, s->par));
    s->primed = 0;
  }
  return DR_OK;
}

/* backend.h's emigrate_records: the leaving particles packed as records on the device
 * (k_leave_records) and copied once into pinned host memory, which sim.c sends as it is; no
 * attribute-by-attribute unpacking on the host. */
static int emigrate_records(void *state, const int32_t lo[3], const int32_t hi[3], const void **rec, size_t *n) {
  cuda_state *s = (cuda_state *)state;
  *rec = NULL;
  *n = 0;
  int m = 0;
  uint32_t *flag = NULL, *upto = NULL;
  DR_TRY(leave_flags(s, lo, hi, &m, &flag, &upto));
  if (m == 0) return DR_OK;
  cudaStream_t st = s->stream;
  const size_t n_slots = s->n_packets * LANES, bytes = (size_t)m * REC_WORDS * sizeof(uint32_t);
  DVEC(s->xrec, bytes, "emigrating particles");
  k_leave_records<<<blocks_for(n_slots, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      n_slots, flag, upto, dp<float>(s->pk[s->cur]), dp<uint64_t>(s->pid[s->cur]), s->prm.rank * 256 + s->me,
      dp<uint32_t>(s->xrec), dp<uint8_t>(s->gone));
  LAUNCHED("k_leave_records");
  if (s->h_rec_cap < bytes) CU(cudaStreamSynchronize(st)); /* nothing queued copies into the old buffer */
  DR_TRY(host_pinned((void **)&s->h_rec, &s->h_rec_cap, bytes, "the particles leaving the rank"));
  CU(cudaMemcpyAsync(s->h_rec, s->xrec.ptr, bytes, cudaMemcpyDeviceToHost, st));
  CU(cudaStreamSynchronize(st));
  *rec = s->h_rec;
  *n = (size_t)m;
  return left(s, m);
}

/* backend.h's reserve_records: the device and host buffers of emigrate_records for n records.
 * add_records reads sim.c's buffer, which sim.c reserves. */
static int reserve_records(void *state, size_t n) {
  cuda_state *s = (cuda_state *)state;
  const size_t bytes = n * REC_WORDS * sizeof(uint32_t);
  if (bytes == 0) return DR_OK;
  DVEC(s->xrec, bytes, "emigrating particles");
  CU(cudaStreamSynchronize(s->stream)); /* nothing queued copies into the old buffer */
  return host_pinned((void **)&s->h_rec, &s->h_rec_cap, bytes, "the particles leaving the rank");
}

/* backend.h's emigrate: emigrate_records, the records read on the host. */
static int emigrate(void *state, const int32_t lo[3], const int32_t hi[3], particles *out) {
  const void *rec = NULL;
  size_t m = 0;
  DR_TRY(emigrate_records(state, lo, hi, &rec, &m));
  DR_TRY(particles_reserve(out, out->n + m));
  for (size_t k = 0; k < m; ++k) DR_TRY(particles_push_record(out, (const unsigned char *)rec + REC_WORDS * sizeof(uint32_t) * k));
  return DR_OK;
}

static int download(void *state, particles *out) {
  cuda_state *s = (cuda_state *)state;
  DR_TRY(particles_reserve(out, s->n));
  out->n = s->n;
  if (s->n == 0) return DR_OK;
  const size_t np = s->n_packets;
  float *pk = (float *)dr_malloc(np * PK_FLOATS * sizeof(float), "particle download");
  uint64_t *id = (uint64_t *)dr_malloc(np * LANES * sizeof(uint64_t), "particle download");
  int2 *hdr = (int2 *)dr_malloc(np * sizeof(int2), "particle download");
  int rc = DR_OK;
  if (!pk || !id || !hdr) rc = DR_ENOMEM;
#define DL(dst, src, bytes)                                                                        \
  if (!rc) {                                                                                       \
    cudaError_t e_ = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->stream);          \
    if (e_ != cudaSuccess) rc = cuda_fail(e_, "cudaMemcpyAsync(" #dst ")", __FILE__, __LINE__);    \
  }
  DL(pk, s->pk[s->cur].ptr, np * PK_FLOATS * sizeof(float));
  DL(id, s->pid[s->cur].ptr, np * LANES * sizeof(uint64_t));
  DL(hdr, s->hdr.ptr, np * sizeof(int2));
#undef DL
  if (!rc) {
    cudaError_t e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) rc = cuda_fail(e, "cudaStreamSynchronize(s->stream)", __FILE__, __LINE__);
  }
  if (!rc) {
    const size_t i = unpack_host(s, pk, id, hdr, np, s->n, out, 0);
    if (i != s->n) rc = dr_fail(DR_EINTERNAL, "cuda backend: %zu particles in the packets, %zu expected", i, s->n);
  }
  free(pk);
  free(id);
  free(hdr);
  return rc;
}

/* backend.h's particle_blocks: the mapping's particle blocks (pb_coord) and their counts
 * (pb_start's differences), copied to the host; the particles stay on the device. */
static int particle_blocks(void *state, int (*add)(void *ctx, const int32_t blk[3], uint64_t count), void *ctx) {
  cuda_state *s = (cuda_state *)state;
  if (s->n == 0 || s->n_pb == 0) return DR_OK;
  const size_t npb = s->n_pb;
  int32_t *coord = (int32_t *)dr_malloc(3 * npb * sizeof(int32_t), "particle block counts");
  int32_t *start = (int32_t *)dr_malloc((npb + 1) * sizeof(int32_t), "particle block counts");
  int rc = coord && start ? DR_OK : DR_ENOMEM;
  cudaError_t e = cudaSuccess;
  if (!rc && (e = cudaMemcpyAsync(coord, s->pb_coord.ptr, 3 * npb * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                  s->stream)) != cudaSuccess)
    rc = cuda_fail(e, "cudaMemcpyAsync(particle block coordinates)", __FILE__, __LINE__);
  if (!rc && (e = cudaMemcpyAsync(start, s->pb_start.ptr, (npb + 1) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                  s->stream)) != cudaSuccess)
    rc = cuda_fail(e, "cudaMemcpyAsync(particle block starts)", __FILE__, __LINE__);
  if (!rc && (e = cudaStreamSynchronize(s->stream)) != cudaSuccess)
    rc = cuda_fail(e, "cudaStreamSynchronize(s->stream)", __FILE__, __LINE__);
  for (size_t q = 0; rc == DR_OK && q < npb; ++q) {
    const int32_t count = start[q + 1] - start[q];
    if (count < 0) rc = dr_fail(DR_EINTERNAL, "cuda backend: particle block %zu holds %d particles", q, (int)count);
    else if (count > 0) rc = add(ctx, coord + 3 * q, (uint64_t)count);
  }
  free(coord);
  free(start);
  return rc;
}

static double held_bytes(const cuda_state *s) {
  double b = 0;
  const dvec *all[] = {&s->pk[0], &s->pk[1], &s->pid[0], &s->pid[1], &s->hdr, &s->d_mats, &s->keys[0], &s->keys[1],
                       &s->vals[0], &s->vals[1], &s->pblock, &s->head, &s->pb_coord, &s->pb_start, &s->pb_packets,
                       &s->pb_nbr, &s->nbr_codes[0], &s->nbr_codes[1], &s->block_code, &s->grid[0], &s->grid[1],
                       &s->grid0[0], &s->grid0[1], &s->touched[0], &s->touched[1], &s->table_keys, &s->table_vals, &s->temp, &s->ctl,
                       &s->igrid[0], &s->igrid[1], &s->count, &s->shared, &s->xidx, &s->xbuf, &s->xrecv, &s->xnodes, &s->d_colliders,
                       &s->d_keys, &s->d_poses, &s->d_ls, &s->d_ls_table, &s->d_ls_bricks, &s->tags, &s->vel, &s->vel0,
                       &s->bar, &s->old_code, &s->old_touched, &s->old_grid, &s->old_grid0, &s->old_igrid,
                       &s->old_to_new, &s->own, &s->d_colbox, &s->d_wbox, &s->push_mask, &s->push_room, &s->gone, &s->xrec, &s->pk_order,
                       &s->shared_idx, &s->shared_n,
                       &s->cc_index, &s->cc_state, &s->cc_slot, &s->cc_blocks, &s->cc_vals, &s->cc_scratch};
  for (size_t k = 0; k < sizeof all / sizeof *all; ++k) b += (double)all[k]->bytes;
  return b;
}

static size_t count(void *state) { return ((cuda_state *)state)->n; }

static int stats(void *state, backend_stats *out) {
  cuda_state *s = (cuda_state *)state;
  out->rebuilds = s->rebuilds;
  out->n_particles = s->n;
  out->n_blocks = s->n_blocks;
  out->bytes = held_bytes(s);
  out->vote_wait_s = s->vote_wait_s;
  return DR_OK;
}

/* ---- the stream's timeline (DRIFT_GPU_MARKS) ------------------------------------------------
 * A diagnostic for the phases that several ranks drive: every backend entry (on_device) records an
 * event on the member's stream as it begins and as it ends, and the time from each mark to the
 * next is summed by the pair of marks. Between an entry's end and the next entry's begin nothing
 * of this stream runs, so that pair's time is the device waiting for the host (the vote, MPI);
 * between an entry's begin and its end, the device runs what the entry queued (and waits where
 * the entry waited). DRIFT_GPU_MARKS=1 logs the sums when the backend ends; =N (above 1) also
 * logs the largest pairs of every N steps (g2p calls). Off by default: recording costs the host
 * about 2 us a mark. */
enum { MARKS_POOL = 512, MARKS_PAIRS = 96 };
typedef struct marks_table {
  struct {
    const char *a, *b;
    int ta, tb;
    char ea, eb;
    long count;
    double ms;
  } pair[MARKS_PAIRS];
  int npairs;
} marks_table;
typedef struct gpu_marks {
  cudaEvent_t ev[MARKS_POOL];
  const char *name[MARKS_POOL]; /* an entry's __PRETTY_FUNCTION__ */
  int tag[MARKS_POOL];          /* the part of p2g_part and grid_update_part, else -1 */
  char end[MARKS_POOL];
  int n;                        /* marks recorded since the last fold; ev[0] holds the last one folded */
  int gate_at;                  /* with a step queued behind a shut gate (k_begin_gated): the marks recorded
                                 * before it, the only ones a fold may wait for; else -1 */
  marks_table total, win;       /* the whole run, and the steps since the last window's log */
  long period, steps;           /* DRIFT_GPU_MARKS's N; g2p calls so far */
} gpu_marks;

/* The entry's name out of its wrapper's __PRETTY_FUNCTION__. */
static void marks_entry(const char *pretty, int tag, char *out, size_t cap) {
  const char *f = pretty; /* the last " = " names F ("[with A = {float}; int (* F)(void*, A ...) = g2p]") */
  for (const char *q = strstr(pretty, " = "); q; q = strstr(q + 3, " = ")) f = q + 3;
  if (*f == '&') ++f;
  size_t k = 0;
  while (f[k] && f[k] != ']' && f[k] != ';' && k + 1 < cap) out[k] = f[k], ++k;
  out[k] = 0;
  if (tag >= 0) snprintf(out + k, cap - k, "(%d)", tag);
}

static void marks_add(marks_table *t, const gpu_marks *m, int i, double ms) {
  int j = 0;
  while (j < t->npairs && !(t->pair[j].a == m->name[i - 1] && t->pair[j].ta == m->tag[i - 1] &&
                            t->pair[j].ea == m->end[i - 1] && t->pair[j].b == m->name[i] &&
                            t->pair[j].tb == m->tag[i] && t->pair[j].eb == m->end[i]))
    ++j;
  if (j == t->npairs) {
    if (j == MARKS_PAIRS) return;
    ++t->npairs;
    t->pair[j].a = m->name[i - 1], t->pair[j].ta = m->tag[i - 1], t->pair[j].ea = m->end[i - 1];
    t->pair[j].b = m->name[i], t->pair[j].tb = m->tag[i], t->pair[j].eb = m->end[i];
    t->pair[j].count = 0, t->pair[j].ms = 0.0;
  }
  t->pair[j].count += 1;
  t->pair[j].ms += ms;
}

/* Sums the time between consecutive marks up to the upto-th (waits for it), keeping that one as
 * the next window's first and the later ones after it. */
static int marks_fold_to(gpu_marks *m, int upto) {
  if (upto < 2) return DR_OK;
  CU(cudaEventSynchronize(m->ev[upto - 1]));
  for (int i = 1; i < upto; ++i) {
    float ms = 0.0f;
    CU(cudaEventElapsedTime(&ms, m->ev[i - 1], m->ev[i]));
    marks_add(&m->total, m, i, ms);
    marks_add(&m->win, m, i, ms);
  }
  const int first = upto - 1, keep = m->n - first;
  cudaEvent_t spare[MARKS_POOL];
  for (int i = 0; i < first; ++i) spare[i] = m->ev[i]; /* the folded marks' events, for reuse */
  for (int i = 0; i < keep; ++i) {
    m->ev[i] = m->ev[first + i], m->name[i] = m->name[first + i], m->tag[i] = m->tag[first + i];
    m->end[i] = m->end[first + i];
  }
  for (int i = 0; i < first; ++i) m->ev[keep + i] = spare[i];
  m->n = keep;
  if (m->gate_at >= 0) m->gate_at -= first;
  return DR_OK;
}

/* Every mark folded, or with a step queued behind a shut gate, those before it: a mark behind the
 * gate completes only once the host opens it, after the step vote (a wait for it here, before the
 * vote, would hold the gate shut until it times out). */
static int marks_fold(gpu_marks *m) { return marks_fold_to(m, m->gate_at >= 0 ? m->gate_at : m->n); }

/* Logs a table's pairs (at most limit), largest first, on stderr: every rank's. */
static void marks_log(const cuda_state *s, marks_table *t, const char *what, int limit) {
  for (int i = 0; i < t->npairs; ++i)
    for (int j = i + 1; j < t->npairs; ++j)
      if (t->pair[j].ms > t->pair[i].ms) {
        const auto x = t->pair[i];
        t->pair[i] = t->pair[j], t->pair[j] = x;
      }
  fprintf(stderr, "gpu marks, rank %d, device %d: %s: the stream's time between consecutive entry marks, by pair "
          "(ms in all, count, us each)\n", s->prm.rank, s->device, what);
  for (int i = 0; i < t->npairs && i < limit; ++i) {
    char a[64], b[64];
    marks_entry(t->pair[i].a, t->pair[i].ta, a, sizeof a), marks_entry(t->pair[i].b, t->pair[i].tb, b, sizeof b);
    fprintf(stderr, "gpu marks, rank %d, device %d: %9.2f ms %7ld x %8.1f us  %s.%s -> %s.%s\n", s->prm.rank, s->device,
            t->pair[i].ms, t->pair[i].count, 1e3 * t->pair[i].ms / (double)t->pair[i].count, a,
            t->pair[i].ea ? "end" : "begin", b, t->pair[i].eb ? "end" : "begin");
  }
}

/* DRIFT_GPU_MARKS beside the step vote's gate: shut (k_begin_gated queued), the marks so far are
 * the ones a fold may wait for; open, every one again. */
static void marks_gate(cuda_state *s, int shut) {
  gpu_marks *m = s->marks;
  if (!m) return;
  if (!shut) m->gate_at = -1;
  else if (m->gate_at < 0) m->gate_at = m->n;
}

/* One mark on the member's stream; an end mark of an entry that waited for its stream folds, and
 * the end of every period-th g2p logs the window. */
static int marks_record(cuda_state *s, const char *name, int tag, int end, int step_end) {
  gpu_marks *m = s->marks;
  if (m->n == MARKS_POOL) DR_TRY(marks_fold(m));
  if (m->n == MARKS_POOL) return DR_OK; /* every mark behind a shut gate (not in a step of ~20 entries): this one lost */
  if (!m->ev[m->n]) CU(cudaEventCreate(&m->ev[m->n]));
  CU(cudaEventRecord(m->ev[m->n], s->stream));
  m->name[m->n] = name, m->tag[m->n] = tag, m->end[m->n] = (char)end;
  ++m->n;
  if (end && step_end && m->period > 1 && ++m->steps % m->period == 0) {
    DR_TRY(marks_fold(m));
    char what[64];
    snprintf(what, sizeof what, "steps %ld-%ld", m->steps - m->period + 1, m->steps);
    marks_log(s, &m->win, what, 12);
    m->win.npairs = 0;
    return DR_OK;
  }
  return end && cudaEventQuery(m->ev[m->n - 1]) == cudaSuccess ? marks_fold_to(m, m->n) : DR_OK;
}

/* DRIFT_GPU_STAMPS=1: the time from each stamp of an island step (enum stamp_at) to the next, per
 * member, kept as samples (the first STAMP_SAMPLES steps) for a median and a mean, logged when the
 * backend ends. What the marks above cannot show inside a graph: the step's kernels one by one
 * (from one kernel's start to the next one's, i.e. a kernel and the gap after it). The pair
 * g2p > begin spans two steps: G2P (or G2P2G), the flags' copy, and the wait for the next step,
 * which is the host's after a rebuild-mapping or at a frame's end (the median leaves those out). */
#define STAMP_SAMPLES 65536
/* from: the last G2P before a rebuild-mapping (to the next step's first stamp), without and with
 * device allocations (g_dvec_allocs) since */
enum { ST_REBUILT = ST_COUNT, ST_REBUILT_ALLOC, ST_FROM };
typedef struct gpu_stamps {
  float *v[ST_FROM][ST_COUNT]; /* [from][to]: us */
  size_t n[ST_FROM][ST_COUNT];
  unsigned long long last_g2p; /* the last step's G2P stamp (0: none) */
  uint64_t last_rebuilds;      /* the member's rebuild-mappings at that step */
  unsigned long last_allocs;   /* g_dvec_allocs then */
  long steps;
} gpu_stamps;

static const char *const stamp_names[ST_FROM] = {
    "gate", "begin", "p2g", "barrier", "published", "passed", "grid", "g2p", "g2p, rebuild-mapping,",
    "g2p, rebuild-mapping with allocations,"};

static void stamps_add(gpu_stamps *g, int a, int b, unsigned long long t0, unsigned long long t1) {
  if (t1 < t0) return;
  if (!g->v[a][b] && !(g->v[a][b] = (float *)malloc(STAMP_SAMPLES * sizeof(float)))) return;
  if (g->n[a][b] < STAMP_SAMPLES) g->v[a][b][g->n[a][b]++] = (float)((double)(t1 - t0) * 1e-3);
}

/* A performed step's stamps (its flags' copy in the host's slot). */
static void stamps_take(cuda_state *s, const step_ctl *c) {
  gpu_stamps *g = s->stamps;
  if (!g || !c->performed) return;
  ++g->steps;
  int last = -1;
  for (int i = 0; i < ST_COUNT; ++i) {
    if (!c->stamp[i]) continue;
    if (last >= 0) stamps_add(g, last, i, c->stamp[last], c->stamp[i]);
    else if (g->last_g2p) {
      const unsigned long allocs = __atomic_load_n(&g_dvec_allocs, __ATOMIC_RELAXED);
      const int from = s->rebuilds == g->last_rebuilds ? (int)ST_G2P
                       : allocs == g->last_allocs     ? (int)ST_REBUILT
                                                      : (int)ST_REBUILT_ALLOC;
      stamps_add(g, from, i, g->last_g2p, c->stamp[i]);
    }
    last = i;
  }
  g->last_g2p = c->stamp[ST_G2P];
  g->last_rebuilds = s->rebuilds;
  g->last_allocs = __atomic_load_n(&g_dvec_allocs, __ATOMIC_RELAXED);
}

static int by_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Logs the stamps' medians, means and 10th percentiles (one write: the ranks of a node share stderr), and frees them. */
static void stamps_free(cuda_state *s) {
  gpu_stamps *g = s->stamps;
  if (!g) return;
  char line[4096];
  size_t at = 0;
#define STAMPS_PUT(...) \
  (void)(at < sizeof line && (at += (size_t)snprintf(line + at, sizeof line - at, __VA_ARGS__)))
  STAMPS_PUT("gpu stamps, device %d (member %d of %d): %ld steps; median (mean, count; 10th percentile) us from a stamp to the next:", s->device,
             s->me, s->nm, g->steps);
  for (int a = 0; a < ST_FROM; ++a)
    for (int b = 0; b < ST_COUNT; ++b) {
      const size_t n = g->n[a][b];
      if (n == 0) continue;
      double sum = 0.0;
      for (size_t i = 0; i < n; ++i) sum += g->v[a][b][i];
      qsort(g->v[a][b], n, sizeof(float), by_float);
      STAMPS_PUT("  %s>%s %.2f (%.2f, %zu; p10 %.2f)", stamp_names[a], stamp_names[b], (double)g->v[a][b][n / 2],
                 sum / (double)n, n, (double)g->v[a][b][n / 10]);
    }
  STAMPS_PUT("  device allocations %lu", __atomic_load_n(&g_dvec_allocs, __ATOMIC_RELAXED));
#undef STAMPS_PUT
  fprintf(stderr, "%.*s\n", (int)(at < sizeof line ? at : sizeof line - 1), line);
  for (int a = 0; a < ST_FROM; ++a)
    for (int b = 0; b < ST_COUNT; ++b) free(g->v[a][b]);
  free(g);
  s->stamps = NULL;
}

/* Logs the run's sums and frees the marks. */
static void marks_free(cuda_state *s) {
  gpu_marks *m = s->marks;
  if (!m) return;
  if (marks_fold(m) != DR_OK) dr_clear();
  marks_log(s, &m->total, "the run", MARKS_PAIRS);
  for (int i = 0; i < MARKS_POOL; ++i)
    if (m->ev[i]) cudaEventDestroy(m->ev[i]);
  free(m);
  s->marks = NULL;
}

static void destroy(void *state) {
  cuda_state *s = (cuda_state *)state;
  if (!s) return;
  if (s->stream) cudaSetDevice(s->device);
  if (s->h_gate && s->gate_armed) gate_write(s, 0); /* a gate left shut (an exit between g2p_ahead and the vote) */
  marks_free(s);
  stamps_free(s);
  drop_graphs(s);
  dvec *all[] = {&s->pk[0], &s->pk[1], &s->pid[0], &s->pid[1], &s->hdr, &s->d_mats, &s->keys[0], &s->keys[1],
                 &s->vals[0], &s->vals[1], &s->pblock, &s->head, &s->pb_coord, &s->pb_start, &s->pb_packets,
                 &s->pb_nbr, &s->nbr_codes[0], &s->nbr_codes[1], &s->block_code, &s->grid[0], &s->grid[1],
                 &s->grid0[0], &s->grid0[1], &s->touched[0], &s->touched[1], &s->table_keys, &s->table_vals, &s->temp, &s->ctl, &s->count,
                 &s->igrid[0], &s->igrid[1], &s->shared, &s->xidx, &s->xbuf, &s->xrecv, &s->xnodes, &s->d_colliders, &s->d_keys, &s->d_poses,
                 &s->d_ls, &s->d_ls_table, &s->d_ls_bricks, &s->tags, &s->vel, &s->vel0, &s->bar, &s->old_code,
                 &s->old_touched, &s->old_grid, &s->old_grid0, &s->old_igrid, &s->old_to_new, &s->own, &s->d_colbox, &s->d_wbox, &s->push_mask, &s->push_room, &s->gone, &s->xrec, &s->pk_order,
                       &s->shared_idx, &s->shared_n,
                       &s->cc_index, &s->cc_state, &s->cc_slot, &s->cc_blocks, &s->cc_vals, &s->cc_scratch};
  if (s->stream) cudaSetDevice(s->device);
  for (size_t k = 0; k < sizeof all / sizeof *all; ++k) dvec_free(all[k]);
  pslots_free(s);
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
  host_release(s->h_rec);
  for (int k = 0; k < 2; ++k)
    if (s->pool[k]) cudaMemPoolDestroy(s->pool[k]);
  if (s->stream) cudaStreamDestroy(s->stream);
  cudaGetLastError();
  free(s->h_add), free(s->h_add_id), free(s->h_add_hdr);
  host_release(s->h_codes);
  free(s->xl);
  free(s->mats);
  free(s);
}

/* Puts particles on the device in packets of 32, in their given order (the next
 * rebuild-mapping sorts them); buffers grow as needed. */
static int upload(cuda_state *s, const particles *p) {
  const size_t n = p->n;
  s->n = n;
  s->primed = 0; /* other particles: the sums are not theirs */
  s->n_gone = 0; /* and no slot of theirs was emigrate's */
  s->n_packets = (n + LANES - 1) / LANES;
  const size_t slots = s->n_packets * LANES;
  DVEC_PK(s->pk[0], s->n_packets * PK_FLOATS * sizeof(float), "particle packets");
  DVEC_PK(s->pid[0], slots * sizeof(uint64_t), "particle ids");
  DVEC_PK(s->hdr, s->n_packets * sizeof(int2), "packet headers");
  DR_TRY(push_buffers(s, s->n_packets));
  for (int k = 0; k < 2; ++k) {
    DVEC_PK(s->keys[k], slots * sizeof(uint64_t), "particle sort keys");
    DVEC_PK(s->vals[k], slots * sizeof(uint32_t), "particle sort keys");
  }
  DVEC(s->pblock, n * sizeof(int32_t), "particle block indices");
  DVEC(s->head, n * sizeof(int32_t), "particle block indices");
  if (n > 0) {
    float *pk = (float *)dr_malloc(s->n_packets * PK_FLOATS * sizeof(float), "particle upload");
    uint64_t *id = (uint64_t *)dr_malloc(slots * sizeof(uint64_t), "particle upload");
    int2 *hdr = (int2 *)dr_malloc(s->n_packets * sizeof(int2), "particle upload");
    if (!pk || !id || !hdr) {
      free(pk), free(id), free(hdr);
      return DR_ENOMEM;
    }
    packets_from_particles(p, n, s->n_packets, pk, id, hdr);
    /* On s->stream, which the rebuild-mapping's kernels use next: s->stream is non-blocking, so
     * a plain cudaMemcpy (the legacy default stream) would not be ordered before them, and a
     * pageable cudaMemcpy may return before its DMA lands: k_keys could then read headers or
     * packets that an earlier run left in reused device memory (test_preview's second run in
     * one process failed at its first step). The synchronisation lets the host buffers go. */
    cudaError_t e = cudaMemcpyAsync(s->pk[0].ptr, pk, s->n_packets * PK_FLOATS * sizeof(float), cudaMemcpyHostToDevice,
                                    s->stream);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(s->pid[0].ptr, id, slots * sizeof(uint64_t), cudaMemcpyHostToDevice, s->stream);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(s->hdr.ptr, hdr, s->n_packets * sizeof(int2), cudaMemcpyHostToDevice, s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    free(pk), free(id), free(hdr);
    if (e != cudaSuccess) return cuda_fail(e, "cudaMemcpyAsync(particle upload)", __FILE__, __LINE__);
  }
  s->cur = 0;
  return DR_OK;
}

/* An island member's device vectors from stream-ordered pools.
 * With peer access enabled, every cudaMalloc maps the buffer into each peer and every cudaFree
 * waits for the device and unmaps it: a rebuild-mapping whose grid grew paid 10-20x what one GPU
 * pays (docs/performance.md, session of 2026-11-27). The vectors that no peer reads (particles,
 * particle blocks, block codes, the island's velocities and tags, ...) come from pool[0], which
 * grants no peer access; a growth frees the old buffer in the stream's order and never waits.
 * The vectors the peers read (P2G buffers, touched flags, the hash table) come from pool[1],
 * mapped into every peer (cudaMemPoolSetAccess) and kept
 * mapped as buffers are freed and reused. The pools keep what is freed (release threshold: all;
 * a growth the device cannot hold returns the pool's unused memory and tries again, dvec_alloc),
 * so the steady state allocates nothing from the driver; the old buffers of a growth are last read before the
 * rebuild-mapping, which every member's finished step precedes (see the island), so their reuse
 * in the member's stream order is safe. The old_* vectors of keep_primed trade places with the
 * peers' buffers (dvec_swap), so they are in the same pool as those. One GPU, and ranks of one
 * GPU each, keep cudaMalloc. */
static int dvec_pools(cuda_state *s) {
  if (s->nm < 2) return DR_OK;
  for (int k = 0; k < 2; ++k) {
    cudaMemPoolProps pp;
    memset(&pp, 0, sizeof pp);
    pp.allocType = cudaMemAllocationTypePinned;
    pp.handleTypes = cudaMemHandleTypeNone;
    pp.location.type = cudaMemLocationTypeDevice;
    pp.location.id = s->device;
    CU(cudaMemPoolCreate(&s->pool[k], &pp));
    uint64_t keep_all = UINT64_MAX;
    CU(cudaMemPoolSetAttribute(s->pool[k], cudaMemPoolAttrReleaseThreshold, &keep_all));
  }
  { /* every other device of the island once (DRIFT_DEVICES may name one several times) */
    cudaMemAccessDesc acc[MAX_GPUS - 1];
    memset(acc, 0, sizeof acc);
    size_t n = 0;
    for (int q = 0; q < s->nm - 1; ++q) {
      const int dev = s->peer[q]->device;
      int seen = dev == s->device;
      for (size_t j = 0; j < n; ++j) seen |= acc[j].location.id == dev;
      if (seen) continue;
      acc[n].location.type = cudaMemLocationTypeDevice;
      acc[n].location.id = dev;
      acc[n].flags = cudaMemAccessFlagsProtReadWrite;
      ++n;
    }
    if (n > 0) CU(cudaMemPoolSetAccess(s->pool[1], acc, n));
  }
  dvec *priv[] = {&s->pk[0], &s->pk[1], &s->pid[0], &s->pid[1], &s->hdr, &s->keys[0], &s->keys[1], &s->vals[0],
                  &s->vals[1], &s->pblock, &s->head, &s->pb_coord, &s->pb_start, &s->pb_packets, &s->pb_nbr,
                  &s->nbr_codes[0], &s->nbr_codes[1], &s->block_code, &s->old_code, &s->shared, &s->tags,
                  &s->vel, &s->vel0, &s->own, &s->old_to_new, &s->pk_order, &s->push_mask, &s->push_room,
                  &s->shared_idx, &s->shared_n, &s->cc_slot, &s->cc_blocks, &s->cc_vals, &s->cc_scratch};
  dvec *peers[] = {&s->grid[0], &s->grid[1], &s->grid0[0], &s->grid0[1], &s->touched[0], &s->touched[1],
                   &s->igrid[0], &s->igrid[1], &s->old_grid, &s->old_grid0, &s->old_touched, &s->old_igrid,
                   &s->table_keys, &s->table_vals};
  for (size_t k = 0; k < sizeof priv / sizeof *priv; ++k) priv[k]->pool = s->pool[0], priv[k]->st = s->stream;
  for (size_t k = 0; k < sizeof peers / sizeof *peers; ++k) peers[k]->pool = s->pool[1], peers[k]->st = s->stream;
  return DR_OK;
}

/* Allocation and upload (particles in packets of 32 in their given order, then a first
 * rebuild-mapping sorts them); on failure the caller destroys s. */
static int setup(cuda_state *s, const particles *p) {
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
    for (int k = 0; k < hb->n_colliders; ++k) cb[k] = col_box_local(&hb->colliders[k]);
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
  {
    const char *e = getenv("DRIFT_COLLIDER_CACHE");
    s->cc_every = e && atoi(e) == 2;
  }
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
  DR_TRY(upload(s, p));
  DR_TRY(rebuild_now(s));
  CU(cudaStreamSynchronize(s->stream));
  return DR_OK;
}

/* A member's state before setup: parameters, materials, the grid's origin and code bits. */
static int member_new(const sim_params *prm, int device, cuda_state **out) {
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
  s->keys64 = env_flag("DRIFT_SORT_KEYS64", 0);
  s->void_steps = 1; /* the top of this file; island_create: not with events */
  s->barrier_timeout_ns = 120ULL * 1000000000ULL;
  const char *bt = getenv("DRIFT_BARRIER_TIMEOUT");
  if (bt && *bt) {
    char *end = NULL;
    const double sec = strtod(bt, &end);
    if (end == bt || *end || !(sec > 0.0) || sec > 1e6) {
      free(s->mats);
      free(s);
      return dr_fail(DR_EINPUT, "DRIFT_BARRIER_TIMEOUT='%s': expected seconds, above 0", bt);
    }
    s->barrier_timeout_ns = (unsigned long long)(sec * 1e9);
  }
  const char *sk = getenv("DRIFT_ISLAND_SKEW");
  if (sk && *sk) {
    char where[8] = "";
    double us = 0.0;
    int member = -1, used = 0;
    if (sscanf(sk, "%d:%7[a-z]:%lf%n", &member, where, &us, &used) != 3 || sk[used] || member < 0 ||
        (strcmp(where, "pre") && strcmp(where, "post")) || !(us > 0.0) || us > 1e6) {
      free(s->mats);
      free(s);
      return dr_fail(DR_EINPUT, "DRIFT_ISLAND_SKEW='%s': expected MEMBER:pre|post:MICROSECONDS (a test hook)", sk);
    }
    s->skew_member = member;
    s->skew_where = strcmp(where, "pre") ? SKEW_POST : SKEW_PRE;
    s->skew_ns = (unsigned long long)(us * 1e3);
  }
  const char *gm = getenv("DRIFT_GPU_MARKS");
  if (gm && atol(gm) > 0) { /* freed by destroy, which logs them */
    s->marks = (gpu_marks *)calloc(1, sizeof *s->marks);
    if (!s->marks) fprintf(stderr, "DRIFT_GPU_MARKS: out of host memory for the marks; none are kept\n");
    else s->marks->period = atol(gm), s->marks->gate_at = -1;
  }
  const char *gs = getenv("DRIFT_GPU_STAMPS");
  g_dvec_log = gs && atol(gs) > 0;
  if (g_dvec_log && !(s->stamps = (gpu_stamps *)calloc(1, sizeof *s->stamps)))
    fprintf(stderr, "DRIFT_GPU_STAMPS: out of host memory for the stamps; none are kept\n");
  s->g2p2g_below = prm->g2p2g_below > 0 ? (size_t)prm->g2p2g_below : 0;
  /* Deterministic mode: no fused G2P2G. Inside one kernel the compiler may contract G2P's and
   * P2G's arithmetic into other FMAs than across two kernels, so the fused path would not be
   * bitwise the path that several ranks take (phase by phase). */
  if (prm->deterministic) s->g2p2g_below = 0;
  s->inv_dx = 1.0f / prm->dx;
  s->bnd = prm->boundary; /* the pointers become device pointers in setup() */
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

/* ---- the island on the host --------------------------------------------------------------- */

/* The rank exchange on an island (island_blocks .. island_unpack_add_nodes): one list of
 * exchange_setup (the rank-level block indices it shares with one other rank), as each member
 * sees it. */
typedef struct island_xlist {
  const int32_t *host;            /* exchange_setup's list (rank-level indices), and its length */
  size_t n;
  int32_t *idx[MAX_GPUS];         /* member k's block indices of the listed blocks it holds (its marks), */
  size_t cnt[MAX_GPUS];           /* ... and how many */
  dvec link_map;                  /* on member 0: [n][nm] every member's index of each listed block, or -1 */
} island_xlist;

/* The island's host threads. Host work of the members runs one thread per member (member 0's on
 * the caller's thread), so that the island pays one member's host time instead of the sum:
 *  - the rebuild-mapping (three reads of a count, each a synchronisation of the member's stream,
 *    between short kernels) and the capture of the member's step graphs;
 *  - every step: the launch of the member's step graph, and the wait for the step whose flags
 *    the host reads next (island_advance_frame).
 * A job touches its own member's state only; what needs the peers (the tags, the merge of the
 * flags) runs on the caller's thread after island_each has seen every job end. A thread waits
 * for the next job spinning for CREW_SPIN_NS (the next step's launch comes within a step), then
 * on a condition variable (between frames). A rank with fewer usable cores than GPUs runs the
 * members' jobs one after another on the caller's thread instead (crew_start). */
#define CREW_SPIN_NS 2000000
struct island;
typedef int (*member_job)(struct island *I, int k);
typedef struct crew_seat {
  struct island *I;
  int k;
} crew_seat;
typedef struct crew {
  int started;            /* threads running, for members 1 .. started (-1: none, the mutex exists) */
  pthread_t th[MAX_GPUS];
  crew_seat seat[MAX_GPUS];
  pthread_mutex_t mu;
  pthread_cond_t go;
  unsigned gen;           /* job number (atomic): a thread runs each job once */
  int busy;               /* threads still working on the job (atomic) */
  int quit;
  member_job job;
  int rc[MAX_GPUS];
  char msg[MAX_GPUS][1024]; /* a thread's error message (error.c keeps one per thread) */
  /* the step job's arguments (island_advance_frame) */
  int par, take, fused;
  double dt_fixed;
  int capture; /* island_rebuild's: capture the member's graphs after tagging */
} crew;

typedef struct island {
  int nm;                   /* members (GPUs) */
  crew crew;
  cuda_state *m[MAX_GPUS];
  int axis;                 /* the static split: along this axis, */
  double cut[MAX_GPUS - 1]; /* member k holds particles between cut[k - 1] and cut[k] at the start */
  float vmax;
  /* several ranks (island_blocks): the union of the members' blocks, sorted, and where each is on
   * every member (its block index there, or -1) */
  uint64_t *codes;
  int32_t *where[MAX_GPUS];
  size_t n_codes, cap_codes;
  island_xlist *xl;         /* mark_shared's lists since the last exchange_setup */
  int n_xl, cap_xl;
  void *rec;                /* island_emigrate_records: every member's records (pinned) */
  size_t rec_cap;
  void *rec_in;             /* island_add_records: one member's share (pinned) */
  size_t rec_in_cap;
} island;

/* Makes s's device current before launching on it (one GPU: it already is, since setup). */
static int use(const cuda_state *s) {
  if (s->nm > 1) CU(cudaSetDevice(s->device));
  return DR_OK;
}

/* A spinning thread's pause (x86: lets the core's other hardware thread run). */
static inline void crew_pause(void) {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

static void *crew_main(void *arg) {
  const crew_seat *seat = (const crew_seat *)arg;
  struct island *I = seat->I;
  crew *c = &I->crew;
  unsigned seen = 0;
  for (;;) {
    /* the next job: spin a while, then sleep (the dispatch bumps gen under the mutex) */
    const double t0 = now_ns();
    int n = 0;
    while (__atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) == seen && !__atomic_load_n(&c->quit, __ATOMIC_ACQUIRE)) {
      crew_pause();
      if ((++n & 1023) == 0 && now_ns() - t0 > CREW_SPIN_NS) {
        pthread_mutex_lock(&c->mu);
        while (__atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) == seen && !c->quit) pthread_cond_wait(&c->go, &c->mu);
        pthread_mutex_unlock(&c->mu);
        break;
      }
    }
    if (__atomic_load_n(&c->quit, __ATOMIC_ACQUIRE)) break;
    seen = __atomic_load_n(&c->gen, __ATOMIC_ACQUIRE);
    int rc = use(I->m[seat->k]);
    if (rc == DR_OK) rc = c->job(I, seat->k);
    if (rc != DR_OK) {
      snprintf(c->msg[seat->k], sizeof c->msg[seat->k], "%s", dr_message());
      dr_clear();
    }
    c->rc[seat->k] = rc;
    __atomic_sub_fetch(&c->busy, 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

/* Starts the threads of members 1 .. nm - 1 (none for one GPU, or with fewer cores than GPUs). */
static int crew_start(struct island *I);
static void crew_stop(struct island *I);

/* Runs job on every member, each on its thread, and returns the first member's error in member
 * order, with that thread's message. */
static int island_each(struct island *I, member_job job);

/* Which devices this rank drives: DRIFT_DEVICES (a list, for tests: the same device may appear
 * twice, so that the island's code runs on one GPU), else parallel.gpus_per_rank GPUs (0: the
 * visible GPUs shared evenly among the ranks of the node), starting after those of the node's
 * lower ranks. */
/* DRIFT_STEP_AHEAD (g2p_ahead): 1 or 0 as set; by default on where this node's ranks have GPUs of
 * their own (n each), off where they share them: a step waiting at its gate holds its GPU, and
 * two processes on one GPU (no MPS) take turns by time slices, so the other rank's G2P, which the
 * vote waits for, would wait for the gate's slice to end. */
static int ahead_default(const sim_params *prm, int n) {
  const char *e = getenv("DRIFT_STEP_AHEAD");
  if (e && *e) return strcmp(e, "0") != 0;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  const char *list = getenv("DRIFT_DEVICES");
  const int local = prm->local_size > 0 ? prm->local_size : 1;
  return !(list && *list && local > 1) && local * n <= count;
}

static int island_devices(const sim_params *prm, int *dev, int *n) {
  int count = 0;
  CU(cudaGetDeviceCount(&count));
  const char *list = getenv("DRIFT_DEVICES");
  if (list && *list) {
    *n = 0;
    const char *c = list;
    while (*c) {
      char *end = NULL;
      const long d = strtol(c, &end, 10);
      if (end == c || d < 0 || d >= count || *n == MAX_GPUS || (*end && *end != ','))
        return dr_fail(DR_EINPUT, "DRIFT_DEVICES='%s': expected a comma-separated list of at most %d device numbers "
                       "below %d (the visible devices)", list, MAX_GPUS, count);
      dev[(*n)++] = (int)d;
      c = *end ? end + 1 : end;
    }
    return DR_OK;
  }
  const int local = prm->local_size > 0 ? prm->local_size : 1;
  const int want = prm->gpus > 0 ? prm->gpus : (count / local > 0 ? count / local : 1);
  if (want > count) {
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    return dr_fail(DR_EINPUT, "parallel.gpus_per_rank %d: only %d GPU%s visible%s%s%s", want, count,
                   count == 1 ? " is" : "s are", cvd ? " (CUDA_VISIBLE_DEVICES=" : "", cvd ? cvd : "", cvd ? ")" : "");
  }
  if (want > MAX_GPUS)
    return dr_fail(DR_EINPUT, "parallel.gpus_per_rank %d: an island has at most %d GPUs", want, MAX_GPUS);
  const int first = (prm->local_rank * want) % count;
  for (int k = 0; k < want; ++k) dev[k] = (first + k) % count;
  *n = want;
  return DR_OK;
}

/* Peer access between every two distinct devices of the island, or a clear error; with
 * p2p_atomics also native atomics over their link (see the island). */
static int island_peers(const int *dev, int n, int atomics) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (dev[i] == dev[j]) continue;
      int ok = 0;
      CU(cudaDeviceCanAccessPeer(&ok, dev[i], dev[j]));
      if (!ok)
        return dr_fail(DR_EINPUT, "GPUs %d and %d of the island cannot reach each other (no peer access between "
                       "them): choose GPUs of one NVLink island with CUDA_VISIBLE_DEVICES or use fewer "
                       "(parallel.gpus_per_rank)", dev[i], dev[j]);
      if (atomics) {
        int native = 0;
        CU(cudaDeviceGetP2PAttribute(&native, cudaDevP2PAttrNativeAtomicSupported, dev[i], dev[j]));
        if (!native)
          return dr_fail(DR_EINPUT, "parallel.island_reduce \"p2p_atomics\": GPUs %d and %d have no native atomics "
                         "over their link (PCIe?): use \"double_buffer\" or GPUs of one NVLink island", dev[i], dev[j]);
      }
      CU(cudaSetDevice(dev[i]));
      const cudaError_t e = cudaDeviceEnablePeerAccess(dev[j], 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
      else if (e != cudaSuccess) return cuda_fail(e, "cudaDeviceEnablePeerAccess(dev[j], 0)", __FILE__, __LINE__);
    }
  return DR_OK;
}

/* The host cores this process may run on (its affinity; 0 where it cannot tell). */
static int usable_cores(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

static int crew_start(island *I) {
  crew *c = &I->crew;
  if (I->nm < 2) return DR_OK;
  /* A thread per member only where they can run side by side: on fewer cores the members'
   * threads (and CUDA's spinning waits) take turns on them, and an island of 4 under mpirun's
   * default binding to one core ran 16 x l = 46 ten times slower than with a core each (4 x
   * H200, docs/performance.md). One thread then drives every member. */
  const int cores = usable_cores();
  if (cores > 0 && cores < I->nm) {
    log_info("cuda island: rank %d may run on %d host core%s (its CPU affinity), fewer than its %d GPUs: one host "
             "thread drives them all (give the rank a core per GPU: mpirun --bind-to none, or srun --cpus-per-task)",
             I->m[0]->prm.rank, cores, cores == 1 ? "" : "s", I->nm);
    return DR_OK;
  }
  int e = pthread_mutex_init(&c->mu, NULL);
  if (e == 0) {
    e = pthread_cond_init(&c->go, NULL);
    if (e) pthread_mutex_destroy(&c->mu);
  }
  if (e) return dr_fail(DR_ENOMEM, "cuda island: pthread_mutex_init/pthread_cond_init failed: %s", strerror(e));
  c->started = -1;
  for (int k = 1; k < I->nm; ++k) {
    c->seat[k].I = I;
    c->seat[k].k = k;
    e = pthread_create(&c->th[k], NULL, crew_main, &c->seat[k]);
    if (e) {
      crew_stop(I);
      return dr_fail(DR_ENOMEM, "cuda island: pthread_create for GPU %d's host thread failed: %s", k, strerror(e));
    }
    c->started = k;
  }
  return DR_OK;
}

static void crew_stop(island *I) {
  crew *c = &I->crew;
  if (c->started == 0) return;
  pthread_mutex_lock(&c->mu);
  __atomic_store_n(&c->quit, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&c->go);
  pthread_mutex_unlock(&c->mu);
  for (int k = 1; k <= c->started; ++k) pthread_join(c->th[k], NULL);
  pthread_cond_destroy(&c->go);
  pthread_mutex_destroy(&c->mu);
  c->started = 0;
}

static int island_each(island *I, member_job job) {
  crew *c = &I->crew;
  if (c->started != I->nm - 1 || I->nm < 2) {
    for (int k = 0; k < I->nm; ++k) {
      DR_TRY(use(I->m[k]));
      DR_TRY(job(I, k));
    }
    return DR_OK;
  }
  c->job = job;
  __atomic_store_n(&c->busy, I->nm - 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&c->mu);
  __atomic_add_fetch(&c->gen, 1, __ATOMIC_RELEASE); /* publishes job, busy and the step's arguments */
  pthread_cond_broadcast(&c->go);
  pthread_mutex_unlock(&c->mu);
  int rc = use(I->m[0]);
  if (rc == DR_OK) rc = job(I, 0);
  while (__atomic_load_n(&c->busy, __ATOMIC_ACQUIRE) > 0) crew_pause();
  if (rc != DR_OK) return rc;
  for (int k = 1; k < I->nm; ++k)
    if (c->rc[k] != DR_OK) return dr_fail(c->rc[k], "%s", c->msg[k]);
  return DR_OK;
}

static int island_sync(island *I) {
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    CU(cudaStreamSynchronize(I->m[k]->stream));
  }
  return DR_OK;
}

/* Tagging (after every member's rebuild-mapping, complete on every GPU): member k looks its
 * blocks up in its peers' hash tables by P2P. Only k's own kernels read its tags, after these
 * launches in its stream. */
static int tag_member(island *I, int k) {
  cuda_state *s = I->m[k];
  peer_tables pt;
  memset(&pt, 0, sizeof pt);
  pt.np = s->nm - 1;
  for (int q = 0; q < pt.np; ++q) {
    const cuda_state *o = s->peer[q];
    pt.keys[q] = o->n_blocks ? dp<unsigned long long>(o->table_keys) : NULL;
    pt.vals[q] = dp<int32_t>(o->table_vals);
    pt.mask[q] = o->table_cap ? o->table_cap - 1 : 0;
  }
  if (s->n_blocks == 0) return DR_OK;
  DR_TRY(use(s));
  /* the peers' tables complete (job_rebuild); a no-op for an event not yet recorded (island_tag) */
  for (int q = 0; q < pt.np; ++q) CU(cudaStreamWaitEvent(s->stream, s->peer[q]->rebuilt_ev, 0));
  k_tag<<<blocks_for(s->n_blocks * pt.np, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
      s->n_blocks, dp<uint64_t>(s->block_code), pt, dp<int32_t>(s->tags));
  LAUNCHED("k_tag");
  if (s->atomics) {
    k_owner<<<blocks_for(s->n_blocks, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
        s->n_blocks, pt.np, s->me, dp<int32_t>(s->tags), dp<int8_t>(s->own));
    LAUNCHED("k_owner");
  }
  return DR_OK;
}

/* Tagging where the members' set-up left work queued (island_create, set_particles): every
 * member synchronised first, and after, as those callers expect. */
static int island_tag(island *I) {
  if (I->nm == 1) return DR_OK;
  DR_TRY(island_sync(I));
  for (int k = 0; k < I->nm; ++k) DR_TRY(tag_member(I, k));
  return island_sync(I);
}

/* A member's rebuild-mapping, on its own thread. When island_each returns, every member's host
 * side of it is done (sizes known, buffers allocated: what the peers' graphs capture), and its
 * device side is queued, ending with rebuilt_ev. The peers' k_tag, which reads the member's
 * table by P2P, waits for that event on the device (tag_member); their next k_grid reads its
 * moved primed sums (keep_primed) only after the step's barrier, which the member reaches after
 * its rebuild in stream order. So the host goes on to tag and capture while the devices rebuild
 * (a wait here would idle the devices through the tagging, the capture and the next launch). */
static int job_rebuild(island *I, int k) {
  cuda_state *s = I->m[k];
  DR_TRY(rebuild_now(s));
  if (I->nm > 1) CU(cudaEventRecord(s->rebuilt_ev, s->stream));
  return DR_OK;
}

/* Then, on the same threads: the member's tags, and its graphs where the frame loop asks
 * (crew.capture; the stream order puts k_tag before the first graph launch). No second
 * synchronisation: nothing but the member's own kernels reads its tags. */
static int job_tag(island *I, int k) {
  if (I->nm > 1) DR_TRY(tag_member(I, k));
  if (I->crew.capture && !I->m[k]->events && !I->m[k]->graphs_valid) DR_TRY(capture_graphs(I->m[k]));
  return DR_OK;
}

static int job_capture(island *I, int k) { return I->m[k]->graphs_valid ? DR_OK : capture_graphs(I->m[k]); }

/* Every member's rebuild-mapping and tagging (capture: and its graphs, for the frame loop). */
static int island_rebuild_for(island *I, int capture) {
  log_trace("island: rebuild-mapping of %d GPUs", I->nm);
  DR_TRY(island_each(I, job_rebuild));
  log_trace("island: rebuilt, tagging%s", capture ? " and capturing" : "");
  I->crew.capture = capture;
  const int rc = island_each(I, job_tag);
  I->crew.capture = 0;
  DR_TRY(rc);
  log_trace("island: tagged");
  return DR_OK;
}

static int island_rebuild(island *I) { return island_rebuild_for(I, 0); }

static int island_wants_rebuild(const island *I) {
  int any = 0;
  for (int k = 0; k < I->nm; ++k) any |= I->m[k]->need_rebuild;
  return any;
}

/* A member's barrier gave up (island_barrier): the members fell out of step. */
static int fail_barrier(const island *I, int k, const step_ctl *c) {
  const cuda_state *s = I->m[k];
  const int peer = c->bar_peer < s->me ? c->bar_peer : c->bar_peer + 1;
  return dr_fail(DR_EINTERNAL, "cuda island: GPU %d (device %d) waited %.0f s at island barrier %u for GPU %d (device %d), "
                 "which stood at barrier %u: the island's members fell out of step (a bug in drift; the time limit is "
                 "DRIFT_BARRIER_TIMEOUT)", k, s->device, s->barrier_timeout_ns * 1e-9, c->bar_stuck, peer,
                 I->m[peer]->device, c->bar_peer_seen);
}

/* The island_barrier "events" barrier (see the island): every member records its event, then
 * every member's stream waits for every other member's. Issued by the host, waits on nothing. */
static int island_event_barrier(island *I) {
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    CU(cudaEventRecord(I->m[k]->bar_ev, I->m[k]->stream));
  }
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    for (int j = 0; j < I->nm; ++j)
      if (j != k) CU(cudaStreamWaitEvent(I->m[k]->stream, I->m[j]->bar_ev, 0));
  }
  return DR_OK;
}

/* One barrier of every member (the phase-by-phase path): spin kernels, or the host's events. */
static int island_barrier_all(island *I) {
  if (I->nm == 1) return DR_OK;
  if (I->m[0]->events) return island_event_barrier(I);
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(launch_barrier(I->m[k], I->m[k]->par));
  }
  return DR_OK;
}

/* island_barrier "events": one step on grid buffer par on every member, the kernels launched
 * directly stage by stage (launch_step's stages), the host's barriers in between; adaptive
 * steps first exchange the last vmax (k_publish, barrier, then k_begin reads the peers'). */
static int island_step_events(island *I, int par, int adaptive) {
  if (adaptive) {
    for (int k = 0; k < I->nm; ++k) {
      DR_TRY(use(I->m[k]));
      k_publish<<<1, 1, 0, I->m[k]->stream>>>(dp<step_ctl>(I->m[k]->ctl));
      LAUNCHED("k_publish");
    }
    DR_TRY(island_event_barrier(I));
  }
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *s = I->m[k];
    const int reuse = !s->graph_fused && s->primed; /* the first step after G2P2G frames (one GPU) */
    DR_TRY(use(s));
    DR_TRY(launch_head(s, par, !reuse));
    s->unprimed = reuse;
    if (reuse) s->primed = 0;
  }
  DR_TRY(island_event_barrier(I));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(launch_grid(I->m[k], par, GRID_ALL));
  }
  if (I->m[0]->atomics) DR_TRY(island_event_barrier(I));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(launch_tail(I->m[k], par));
  }
  return DR_OK;
}

/* Reads the flags of a completed step on every member. Returns an error for a bad particle; sets
 * *stop when an adaptive frame has ended. A voided step (begin_step: the step before it needs a
 * rebuild-mapping, which that step's flags asked for) is taken back: *launched one less, each
 * member's grid buffer parity and primed sums as before it was queued (it was the last). */
static int island_take(island *I, int par, frame_report *rep, int *stop, int synced, long *launched) {
  for (int k = 0; k < I->nm && !synced; ++k) {
    DR_TRY(use(I->m[k]));
    CU(cudaEventSynchronize(I->m[k]->done_ev[par]));
  }
  for (int k = 0; k < I->nm; ++k)
    if (I->m[k]->h_slot[par].bar_stuck) return fail_barrier(I, k, &I->m[k]->h_slot[par]);
  for (int k = 0; k < I->nm; ++k) {
    const step_ctl *c = &I->m[k]->h_slot[par];
    if (c->fix_bad) return fail_fix(I->m[k], c->fix_bad_id);
    if (c->bad_id != ~0ULL) return fail_bad(I->m[k], c->bad_id);
  }
  const step_ctl *c0 = &I->m[0]->h_slot[par];
  for (int k = 1; k < I->nm; ++k)
    if (I->m[k]->h_slot[par].performed != c0->performed || I->m[k]->h_slot[par].dt != c0->dt ||
        I->m[k]->h_slot[par].voided != c0->voided)
      return dr_fail(DR_EINTERNAL, "cuda island: GPU %d took a different step (dt %g) from GPU 0 (dt %g)", k,
                     (double)I->m[k]->h_slot[par].dt, (double)c0->dt);
  if (c0->voided) {
    if (!island_wants_rebuild(I))
      return dr_fail(DR_EINTERNAL, "cuda backend: a step was voided (begin_step) though no step before it left the "
                     "free zone (a bug in drift)");
    for (int k = 0; k < I->nm; ++k) {
      cuda_state *s = I->m[k];
      s->par ^= 1;
      if (s->unprimed) s->primed = 1, s->unprimed = 0;
    }
    --*launched;
    log_trace("step voided: the rebuild-mapping first");
    return DR_OK;
  }
  if (!c0->performed) {
    *stop = 1;
    return DR_OK;
  }
  ++rep->steps;
  rep->last_dt = c0->dt;
  rep->t = c0->t; /* k_begin: t + dt in double, as sim.c sums it */
  float vmax = 0.0f;
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *s = I->m[k];
    const step_ctl *c = &s->h_slot[par];
    s->last_par = par;
    stamps_take(s, c);
    memcpy(&s->vmax, &c->vmax_bits, sizeof s->vmax);
    if (s->vmax > vmax) vmax = s->vmax;
    s->need_rebuild |= c->leave != 0;
  }
  I->vmax = vmax;
  return DR_OK;
}

/* One step of member k (the crew's arguments: grid buffer par, fused or not, the fixed dt): the
 * priming P2G where G2P2G frames begin, the step (its graph, or the first unfused step after
 * G2P2G frames without its P2G, outside the graph), the step's event; then, where take >= 0,
 * the wait for step take's event, so that the caller reads its flags at once. */
static int job_step(island *I, int k) {
  const crew *c = &I->crew;
  cuda_state *s = I->m[k];
  const int par = c->par;
  if (k == 0) TRACE("island step: launch"); /* GPU 0's host thread: launch, wait, and the gaps between steps */
  if (c->fused && !s->primed) {
    DR_TRY(launch_p2g(s, par));
    s->primed = 1;
  }
  if (c->fused) s->primed_dt = (float)c->dt_fixed; /* the priming P2G and every G2P2G take k_begin's dt */
  s->unprimed = !c->fused && s->primed;
  if (s->unprimed) {
    DR_TRY(launch_step(s, par, 0));
    s->primed = 0;
  } else {
    CU(cudaGraphLaunch(s->graph[par], s->stream));
  }
  CU(cudaEventRecord(s->done_ev[par], s->stream));
  s->par ^= 1;
  if (k == 0) TRACE("island step: wait for the step before");
  if (c->take >= 0) CU(cudaEventSynchronize(s->done_ev[c->take]));
  if (k == 0) TRACE("island step: host bookkeeping");
  return DR_OK;
}

/* A whole frame on the device(s): steps queued as graph launches, each on every member (the
 * barriers inside the graphs keep the members together), the flags of a step read STEP_LAG
 * steps later, and every member rebuilding when one must. One GPU is an island of one.
 * plan->stop (a signal, sim.c) is asked before every step is queued, i.e. right after the host
 * has read a step's flags (at most STEP_LAG + 1 steps are in flight): when it says stop, the
 * queued steps finish and their flags are read as usual, nothing more is queued (not even a
 * pending rebuild-mapping: the next frame's loop, or a resumed run's new backend, does it), and
 * rep says how far the frame got, so that sim.c checkpoints at that step's boundary. */
static int island_advance_frame(void *state, const frame_plan *plan, frame_report *rep) {
  island *I = (island *)state;
  rep->steps = 0;
  rep->last_dt = 0;
  rep->stopped = 0;
  rep->t = plan->t_start;
  const long todo = plan->fixed_steps - plan->k0; /* fixed steps left in the frame */
  const int adaptive = plan->fixed_steps <= 0;
  const double dt_fixed = adaptive ? 0.0 : plan->dt_fixed;
  size_t nmax = 0;
  for (int k = 0; k < I->nm; ++k) nmax = I->m[k]->n > nmax ? I->m[k]->n : nmax;
  const int fused = !adaptive && nmax < I->m[0]->g2p2g_below; /* the same choice on every member */
  const int events = I->m[0]->events;
  int cleared = 0;
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *s = I->m[k];
    DR_TRY(use(s));
    k_frame_begin<<<1, 1, 0, s->stream>>>(dp<step_ctl>(s->ctl), plan->t0, plan->t_start, plan->k0, plan->vmax0,
                                          plan->t1, adaptive ? DT_ADAPTIVE : DT_FIXED, dt_fixed, plan->cfl_dx,
                                          plan->wave_speed, s->void_steps);
    LAUNCHED("k_frame_begin");
    /* Primed sums (the last G2P2G's P2G of this frame's first step) serve a fused or an
     * unfused first step alike, if they took this frame's dt. Else P2G runs again, as p2g()
     * does for another dt, and applies the return mapping a second time: not exact, but fixed
     * steps keep one dt per run and an adaptive frame never follows a fused one. */
    if (s->primed && (adaptive || s->primed_dt != (float)dt_fixed)) {
      DR_TRY(clear_grid(s, s->par));
      s->primed = 0;
      cleared = 1;
    }
    if (fused != s->graph_fused) {
      if (!fused && s->primed && I->nm > 1) {
        /* An island with spin-lock barriers launches only graphs: kernels launched one by one
         * behind a member's barrier could keep the next member's barrier from starting where
         * members share a device (island_grid_update). So P2G runs again: not exact (the return
         * mapping a second time), and only after an emission moved an island past g2p2g_below.
         * The events barrier shares the choice, which keeps the two modes comparable. */
        DR_TRY(clear_grid(s, s->par));
        s->primed = 0;
        cleared = 1;
      }
      s->graph_fused = fused;
      s->graphs_valid = 0;
    }
  }
  /* p2p_atomics: no barrier orders that clear before the peers' next pushes (see the island) */
  if (cleared && I->m[0]->atomics) DR_TRY(island_sync(I));
  int pending[2] = {0, 0}, np = 0, stop = 0, asked = 0;
  long launched = 0;
  for (;;) {
    if (plan->stop && plan->stop(plan->stop_ctx, (uint64_t)launched)) {
      asked = 1;
      break;
    }
    if (island_wants_rebuild(I)) {
      while (np > 0) {
        DR_TRY(island_take(I, pending[0], rep, &stop, 0, &launched));
        pending[0] = pending[1];
        --np;
      }
      if (stop) break;
      if (plan->stop && plan->stop(plan->stop_ctx, (uint64_t)launched)) { /* came while draining */
        asked = 1;
        break;
      }
      DR_TRY(island_rebuild_for(I, !events));
    }
    if (!adaptive && launched >= todo) break;
    /* after the rebuild of every member: a graph holds its peers' buffers (events: no graphs) */
    if (!events) {
      int stale = 0;
      for (int k = 0; k < I->nm; ++k) stale |= !I->m[k]->graphs_valid;
      if (stale) {
        log_trace("island: capturing graphs");
        DR_TRY(island_each(I, job_capture));
        log_trace("island: captured");
      }
    }
    const int par = I->m[0]->par;
    const int take = np == STEP_LAG ? (np ? pending[0] : par) : -1; /* the step read once this one is queued */
    if (events) {
      for (int k = 0; k < I->nm; ++k) {
        cuda_state *s = I->m[k];
        if (fused && !s->primed) {
          DR_TRY(use(s));
          DR_TRY(launch_p2g(s, par));
          s->primed = 1;
        }
        if (fused) s->primed_dt = (float)dt_fixed;
      }
      DR_TRY(island_step_events(I, par, adaptive));
      for (int k = 0; k < I->nm; ++k) {
        cuda_state *s = I->m[k];
        DR_TRY(use(s));
        CU(cudaEventRecord(s->done_ev[par], s->stream));
        s->par ^= 1;
      }
    } else {
      crew *c = &I->crew;
      c->par = par;
      c->take = take;
      c->fused = fused;
      c->dt_fixed = dt_fixed;
      DR_TRY(island_each(I, job_step));
    }
    ++launched;
    pending[np++] = par;
    if (np == STEP_LAG + 1) {
      DR_TRY(island_take(I, pending[0], rep, &stop, !events, &launched));
      pending[0] = pending[1];
      np = STEP_LAG;
      if (stop) break;
    }
  }
  for (int k = 0; k < np; ++k) DR_TRY(island_take(I, pending[k], rep, &stop, 0, &launched));
  if (asked) { /* stopped early, unless the steps in flight ended the frame (k_begin's test) */
    const int ended = adaptive ? stop || plan->t1 - rep->t <= 1e-9 * (plan->t1 - plan->t0)
                               : launched >= todo;
    rep->stopped = !ended;
  }
  return DR_OK;
}

/* The phases of backend.h on the island (a fixed step driven by the host). */
static int island_rebuild_phase(void *state, int force, int *rebuilt) {
  island *I = (island *)state;
  *rebuilt = 0;
  if (!force && !island_wants_rebuild(I)) return DR_OK;
  DR_TRY(island_rebuild(I));
  *rebuilt = 1;
  return DR_OK;
}

/* p2p_atomics: a primed P2G that p2g() would drop is dropped before any peer can push (see the island). */
static int island_drop_primed(island *I, float dt) {
  if (I->nm == 1 || !I->m[0]->atomics) return DR_OK;
  int cleared = 0;
  for (int k = 0; k < I->nm; ++k)
    if (I->m[k]->primed && I->m[k]->primed_dt != dt) {
      DR_TRY(use(I->m[k]));
      DR_TRY(clear_grid(I->m[k], I->m[k]->par));
      I->m[k]->primed = 0;
      cleared = 1;
    }
  return cleared ? island_sync(I) : DR_OK;
}

static int island_p2g(void *state, float dt) {
  island *I = (island *)state;
  DR_TRY(island_drop_primed(I, dt));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(p2g(I->m[k], dt));
  }
  return DR_OK;
}

/* backend.h's p2g_part on the island: each member's (its boundary: blocks it shares with other
 * ranks, island_mark_shared); the boundary call first does island_p2g's care of primed sums. */
static int island_p2g_part(void *state, float dt, int part) {
  island *I = (island *)state;
  if (part == P2G_BOUNDARY) DR_TRY(island_drop_primed(I, dt));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(p2g_part(I->m[k], dt, part));
  }
  return DR_OK;
}

/* The stages of launch_step between P2G and G2P, member by member between the barriers. Every
 * member's barrier is launched before any member's grid update (island_barrier_all): where
 * members share a device (DRIFT_DEVICES=0,0) their streams may share a hardware queue, in which
 * a grid update queued behind its member's spinning barrier would keep the next member's barrier
 * from starting (a deadlock the launch order avoids). */
static int island_grid_update(void *state, float dt) {
  (void)dt;
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(launch_push(I->m[k], I->m[k]->par));
  }
  DR_TRY(island_barrier_all(I));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(launch_grid(I->m[k], I->m[k]->par, GRID_ALL));
  }
  if (!I->m[0]->atomics) return DR_OK;
  DR_TRY(island_barrier_all(I));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(launch_pull(I->m[k], I->m[k]->par));
  }
  return DR_OK;
}

/* The grid update of the blocks not shared with other ranks (GRID_INTERIOR, while their sums are
 * in flight: sim.c's advance_frame_ranks) or shared with them (GRID_SHARED, once unpack_add_nodes
 * has added the other ranks' sums into each block's owner member). Every member holding a block shared
 * with another rank marked it (island_mark_shared), so the interior pass leaves it on every member.
 * Each pass starts with a barrier of all members: the first orders every member's P2G before its
 * peers read it (as island_grid_update's), the second orders the unpack (queued on member 0's
 * stream before this call, adding into the owners' copies by P2P) before the other members read
 * the owner's sums. A block's
 * reduction reads only P2G buffers, which neither pass writes (the velocities go to the separate
 * buffer and each pass clears only its own blocks of the other parity), so the two passes are the
 * whole update of island_grid_update split by blocks, with one barrier more. p2p_atomics pushes
 * into the owners before its barrier and pulls after a second one: it is not split, and the whole
 * update runs at GRID_SHARED. */
static int island_grid_update_part(void *state, float dt, int part) {
  island *I = (island *)state;
  if (I->m[0]->atomics) {
    if (part == GRID_INTERIOR) return DR_OK;
    /* the unpack into the owners' copies (plain additions) before any peer's k_push adds into
     * them with atomics */
    DR_TRY(island_barrier_all(I));
    return island_grid_update(state, dt);
  }
  DR_TRY(island_barrier_all(I));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(launch_grid(I->m[k], I->m[k]->par, part));
  }
  return DR_OK;
}

/* backend.h's g2p_interior on the island: each member's G2P of its packets whose stencils reach no
 * block shared with another rank (its boundary_order), queued behind its grid update of the
 * interior (island_grid_update_part(GRID_INTERIOR)) while the shared sums are in flight. A member's
 * G2P reads only its own copies of the blocks, which that member's interior update has finished
 * (the island's sums of them were read from the peers' P2G buffers, which no later kernel of the
 * step writes); member 0's unpack (island_unpack_add_nodes, by P2P into the owners' copies) and
 * the shared update after it touch only blocks shared with other ranks, which these packets never
 * read. island_g2p_queue then runs each member's boundary packets (g2p_rest). Members have no
 * xstream (one GPU's alone), so nothing here goes beside the step's stream. */
static int island_g2p_interior(void *state, float dt) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(g2p_interior(I->m[k], dt));
  }
  return DR_OK;
}

/* island_g2p's first half: each member's G2P and its step record queued; the members' buffers
 * change parity (last_par: the record island_g2p_collect reads). */
static int island_g2p_queue(island *I) {
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *s = I->m[k];
    DR_TRY(use(s));
    /* the flags are read below, before the next step; after g2p_interior, the boundary packets */
    if (s->tail_on) { /* the boundary's G2P behind the shared update on xstream (grid_update_part) */
      if (!s->xtail_ev) CU(cudaEventCreateWithFlags(&s->xtail_ev, cudaEventDisableTiming));
      DR_TRY(launch_g2p_on(s, s->par, 0, dp<int32_t>(s->pk_order), s->n_boundary, 1, s->xstream));
      CU(cudaEventRecord(s->xtail_ev, s->xstream));
      CU(cudaStreamWaitEvent(s->stream, s->xtail_ev, 0));
    } else {
      DR_TRY(s->g2p_rest ? launch_g2p_of(s, s->par, 0, dp<int32_t>(s->pk_order), s->n_boundary, 1)
                         : launch_g2p(s, s->par, 0));
    }
    s->g2p_rest = s->tail_on = s->tail_armed = 0;
    DR_TRY(record_out(s, s->par));
    s->last_par = s->par;
    s->par ^= 1;
  }
  return DR_OK;
}

/* island_g2p's second half: waits for each member's G2P (with a gate armed, for its G2P alone:
 * g2p_ev, not the step queued behind the gate) and reads its flags. */
static int island_g2p_collect(island *I) {
  float vmax = 0.0f;
  int bad = -1, fix = -1;
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *s = I->m[k];
    DR_TRY(use(s));
    if (s->gate_armed) CU(cudaEventSynchronize(s->g2p_ev));
    else CU(cudaStreamSynchronize(s->stream));
    s->xrecv_used = 0; /* the step's unpacks are done with their messages */
    const step_ctl *c = &s->h_slot[s->last_par];
    stamps_take(s, c);
    s->vote_wait_s += 1e-9 * (double)c->gate_ns;
    if (c->gate_stuck)
      return dr_fail(DR_EINTERNAL, "cuda backend: device %d: a step queued behind a gate waited %.0f s for the host "
                     "to open it, and was voided (DRIFT_BARRIER_TIMEOUT)", s->device, s->barrier_timeout_ns * 1e-9);
    if (c->fix_bad && fix < 0) fix = k;
    if (c->bad_id != ~0ULL && bad < 0) bad = k;
    memcpy(&s->vmax, &c->vmax_bits, sizeof s->vmax);
    if (s->vmax > vmax) vmax = s->vmax;
    s->need_rebuild |= c->leave != 0;
  }
  for (int k = 0; k < I->nm; ++k)
    if (I->m[k]->h_slot[I->m[k]->last_par].bar_stuck) return fail_barrier(I, k, &I->m[k]->h_slot[I->m[k]->last_par]);
  for (int k = 0; k < I->nm; ++k) /* the unpacks queued before this G2P (unpack_add_nodes) */
    if (I->m[k]->unpack_check_n) {
      const size_t n = I->m[k]->unpack_check_n;
      I->m[k]->unpack_check_n = 0;
      DR_TRY(xbad_check(I->m[k], "unpack_add_nodes", n));
    }
  if (fix >= 0) return fail_fix(I->m[fix], I->m[fix]->h_slot[I->m[fix]->last_par].fix_bad_id);
  if (bad >= 0) return fail_bad(I->m[bad], I->m[bad]->h_slot[I->m[bad]->last_par].bad_id);
  I->vmax = vmax;
  return DR_OK;
}

static int island_g2p(void *state, float dt) {
  (void)dt;
  island *I = (island *)state;
  DR_TRY(island_g2p_queue(I));
  return island_g2p_collect(I);
}

static int island_set_time(void *state, double t) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) I->m[k]->t_next = t;
  return DR_OK;
}

static int island_finish(void *state) { return island_sync((island *)state); }

static int island_max_speed(void *state, float *vmax) {
  *vmax = ((island *)state)->vmax;
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
 * next p2g or p2g_part begins the step with k_begin_gated, which the device holds until gate_open.
 * Not where the next P2G is primed (G2P2G frames: a frame loop of one rank), which p2g would take
 * instead. */
static int island_g2p_ahead(void *state, float dt, int *armed);
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
static int gate_open_one(cuda_state *s, int go) {
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
  return gate_open_one(s, go);
}

/* The same for an island driven by a rank: every member's G2P and record, and a gate on each,
 * which the next island_p2g (or island_p2g_part) begins its step behind; gate_open opens or voids
 * them all alike, so that the members' barriers of the step, queued after the vote, find every
 * member in the same step. Not where a member's next P2G is primed. */
static int island_g2p_ahead(void *state, float dt, int *armed) {
  island *I = (island *)state;
  *armed = 0;
  int ok = 1;
  for (int k = 0; k < I->nm; ++k) ok &= I->m[k]->ahead_on && !I->m[k]->primed && !I->m[k]->gate_armed;
  if (!ok) return island_g2p(state, dt);
  DR_TRY(island_g2p_queue(I));
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *s = I->m[k];
    DR_TRY(use(s));
    if (!s->g2p_ev) CU(cudaEventCreateWithFlags(&s->g2p_ev, cudaEventDisableTiming));
    CU(cudaEventRecord(s->g2p_ev, s->stream));
    s->gate_seq = (s->gate_seq + 1) & 0x7fffffffu;
    s->gate_armed = 1;
    s->gate_queued = 0;
  }
  *armed = 1;
  return DR_OK;
}

static int island_g2p_collect_be(void *state) { return island_g2p_collect((island *)state); }

/* Every member's gate, whatever one of them returns (none may stay shut). */
static int island_gate_open(void *state, int go) {
  island *I = (island *)state;
  int rc = DR_OK;
  for (int k = 0; k < I->nm; ++k) {
    if (!I->m[k]->gate_armed) {
      if (rc == DR_OK) rc = dr_fail(DR_EINTERNAL, "cuda backend: gate_open without g2p_ahead (member %d)", k);
      continue;
    }
    int r = use(I->m[k]);
    if (r == DR_OK) r = gate_open_one(I->m[k], go);
    else (void)gate_open_one(I->m[k], 0);
    if (rc == DR_OK) rc = r;
  }
  return rc;
}

static int island_download(void *state, particles *out) {
  island *I = (island *)state;
  size_t n = 0;
  for (int k = 0; k < I->nm; ++k) n += I->m[k]->n;
  DR_TRY(particles_reserve(out, n));
  out->n = 0;
  particles part = {0};
  int rc = DR_OK;
  for (int k = 0; k < I->nm && rc == DR_OK; ++k) {
    rc = use(I->m[k]);
    if (rc == DR_OK) rc = download(I->m[k], &part);
    for (size_t i = 0; rc == DR_OK && i < part.n; ++i) rc = particles_push_copy(out, &part, i);
  }
  particles_free(&part);
  return rc;
}

/* Every member primes together (G2P2G is chosen for the whole island). */
static int island_projected(void *state) {
  island *I = (island *)state;
  int any = 0;
  for (int k = 0; k < I->nm; ++k) any |= I->m[k]->primed;
  return any;
}

static int island_set_projected(void *state) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(set_projected(I->m[k]));
  }
  return DR_OK;
}

static size_t island_count(void *state) {
  const island *I = (const island *)state;
  size_t n = 0;
  for (int k = 0; k < I->nm; ++k) n += I->m[k]->n;
  return n;
}

static int island_stats(void *state, backend_stats *out) {
  island *I = (island *)state;
  memset(out, 0, sizeof *out);
  for (int k = 0; k < I->nm; ++k) {
    backend_stats one;
    DR_TRY(use(I->m[k]));
    DR_TRY(stats(I->m[k], &one));
    out->rebuilds = one.rebuilds; /* every member rebuilds together */
    out->n_particles += one.n_particles;
    out->n_blocks += one.n_blocks; /* a block shared by the GPUs counts once per GPU */
    out->bytes += one.bytes;
    if (one.vote_wait_s > out->vote_wait_s) out->vote_wait_s = one.vote_wait_s; /* the members open together */
  }
  return DR_OK;
}

static void island_xl_free(island *I) {
  for (int j = 0; j < I->n_xl; ++j)
    for (int k = 0; k < I->nm; ++k) free(I->xl[j].idx[k]);
  for (int j = 0; j < I->n_xl; ++j) {
    if (I->xl[j].link_map.ptr) (void)use(I->m[0]);
    dvec_free(&I->xl[j].link_map);
  }
  I->n_xl = 0;
}

static void island_destroy(void *state) {
  island *I = (island *)state;
  if (!I) return;
  crew_stop(I);
  for (int k = 0; k < I->nm; ++k) destroy(I->m[k]);
  island_xl_free(I);
  free(I->xl);
  free(I->codes);
  for (int k = 0; k < I->nm; ++k) free(I->where[k]);
  host_release(I->rec);
  host_release(I->rec_in);
  free(I);
}

typedef struct coord_index {
  float x;
  size_t i;
} coord_index;

static int by_coord(const void *a, const void *b) {
  const coord_index *p = (const coord_index *)a, *q = (const coord_index *)b;
  return p->x < q->x ? -1 : p->x > q->x ? 1 : (p->i > q->i) - (p->i < q->i);
}

/* p's particles in increasing coordinate along axis (ties by index); NULL when out of memory. */
static coord_index *sorted_along(const particles *p, int axis, const char *what) {
  coord_index *ci = (coord_index *)dr_malloc(sizeof *ci * (p->n ? p->n : 1), what);
  if (!ci) return NULL;
  for (size_t i = 0; i < p->n; ++i) ci[i] = (coord_index){p->x[3 * i + axis], i};
  qsort(ci, p->n, sizeof *ci, by_coord);
  return ci;
}

/* The static split (the paper's): along the longest axis of the particles' bounding box, evenly
 * by count. parts[k] receives member k's particles. */
static int island_split(island *I, const particles *p, particles *parts) {
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (size_t i = 0; i < p->n; ++i)
    for (int a = 0; a < 3; ++a) lo[a] = fminf(lo[a], p->x[3 * i + a]), hi[a] = fmaxf(hi[a], p->x[3 * i + a]);
  I->axis = 0;
  for (int a = 1; a < 3; ++a)
    if (hi[a] - lo[a] > hi[I->axis] - lo[I->axis]) I->axis = a;
  coord_index *ci = sorted_along(p, I->axis, "island split");
  if (!ci) return DR_ENOMEM;
  int rc = DR_OK;
  for (int k = 0; k < I->nm && rc == DR_OK; ++k) {
    const size_t b = p->n * (size_t)k / (size_t)I->nm, e = p->n * (size_t)(k + 1) / (size_t)I->nm;
    rc = particles_reserve(&parts[k], e - b);
    for (size_t j = b; j < e && rc == DR_OK; ++j) rc = particles_push_copy(&parts[k], p, ci[j].i);
    if (k > 0) I->cut[k - 1] = b < p->n ? ci[b].x : hi[I->axis];
  }
  free(ci);
  return rc;
}

/* New particles (sources, backend.h add_particles) on the island: taken in order along the split
 * axis and poured into the members in that order, each filled up to an even share of the new total
 * (a member already above its share takes none), so the members stay balanced by count and each
 * receives a contiguous run along the axis; then every member rebuilds and the tags are renewed. */
/* How many of m new particles (next of them placed on members before k) member k takes: up to its
 * even share of the island's total after the addition; the last member takes the rest. */
static size_t island_give(const island *I, int k, size_t total, size_t m, size_t next) {
  const size_t share = total * (size_t)(k + 1) / (size_t)I->nm - total * (size_t)k / (size_t)I->nm;
  size_t give = share > I->m[k]->n ? share - I->m[k]->n : 0;
  if (k == I->nm - 1 || give > m - next) give = m - next;
  return give;
}

static int island_add_particles(void *state, const particles *p) {
  island *I = (island *)state;
  if (p->n == 0) return DR_OK;
  coord_index *ci = sorted_along(p, I->axis, "island sources");
  if (!ci) return DR_ENOMEM;
  size_t total = p->n;
  for (int k = 0; k < I->nm; ++k) total += I->m[k]->n;
  particles part;
  memset(&part, 0, sizeof part);
  int rc = DR_OK;
  size_t next = 0;
  for (int k = 0; k < I->nm && rc == DR_OK && next < p->n; ++k) {
    const size_t give = island_give(I, k, total, p->n, next);
    if (give == 0) continue;
    part.n = 0;
    rc = particles_reserve(&part, give);
    for (size_t j = next; j < next + give && rc == DR_OK; ++j) rc = particles_push_copy(&part, p, ci[j].i);
    if (rc == DR_OK && (rc = use(I->m[k])) == DR_OK) rc = append_particles(I->m[k], &part);
    next += give;
  }
  particles_free(&part);
  free(ci);
  DR_TRY(rc);
  return island_rebuild(I);
}

/* ---- several ranks, each driving an island (mpi/exchange.c through backend.h) ----------------
 * The rank's grid blocks are the union of its members' (island_blocks). For a block shared with
 * another rank, the node exchange sends the sum of the members' P2G sums of it (member 0 adds
 * them in member order, so that deterministic mode's int64 sums stay exact and the float sums do
 * not depend on timing), and adds what the other ranks sent into its owner's sums only (the
 * lowest member holding it, as k_owner): the island's own
 * reduction in the grid update then brings the whole to every member holding the block
 * (double_buffer: each member's k_grid adds its peers' sums; p2p_atomics: k_push into the
 * owner's). island_grid_update_part updates the blocks not shared with other ranks while their
 * sums are in flight, and the shared ones once they are in (not with p2p_atomics: there the whole
 * update waits for the sums). */

static int island_blocks(void *state, const uint64_t **codes, size_t *n) {
  island *I = (island *)state;
  const uint64_t *mc[MAX_GPUS];
  size_t mn[MAX_GPUS], at[MAX_GPUS], total = 0;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(blocks(I->m[k], &mc[k], &mn[k]));
    total += mn[k];
    at[k] = 0;
  }
  if (I->cap_codes < total || !I->codes) {
    const size_t cap = total ? total : 1;
    free(I->codes);
    I->codes = (uint64_t *)dr_malloc(cap * sizeof(uint64_t), "island block codes");
    for (int k = 0; k < I->nm; ++k) {
      free(I->where[k]);
      I->where[k] = (int32_t *)dr_malloc(cap * sizeof(int32_t), "island block codes");
      if (!I->where[k]) I->codes = (free(I->codes), (uint64_t *)NULL);
    }
    I->cap_codes = I->codes ? cap : 0;
    if (!I->codes) return DR_ENOMEM;
  }
  I->n_codes = 0;
  for (;;) { /* merge the members' sorted lists */
    uint64_t c = 0;
    int any = 0;
    for (int k = 0; k < I->nm; ++k)
      if (at[k] < mn[k] && (!any || mc[k][at[k]] < c)) c = mc[k][at[k]], any = 1;
    if (!any) break;
    const size_t u = I->n_codes++;
    I->codes[u] = c;
    for (int k = 0; k < I->nm; ++k) I->where[k][u] = at[k] < mn[k] && mc[k][at[k]] == c ? (int32_t)at[k]++ : -1;
  }
  *codes = I->codes;
  *n = I->n_codes;
  return DR_OK;
}

static const island_xlist *island_find(const island *I, const int32_t *idx, size_t n, const char *call) {
  for (int j = I->n_xl - 1; j >= 0; --j)
    if (I->xl[j].host == idx && I->xl[j].n == n) return &I->xl[j];
  dr_fail(DR_EINTERNAL, "cuda island: %s: a shared-block list of %zu blocks that mark_shared did not see (issue #8)",
          call, n);
  return NULL;
}

static int island_mark_shared(void *state, const int32_t *idx, size_t n) {
  island *I = (island *)state;
  if (!idx) { /* a new exchange_setup */
    island_xl_free(I);
    for (int k = 0; k < I->nm; ++k) {
      DR_TRY(use(I->m[k]));
      DR_TRY(mark_shared(I->m[k], NULL, 0));
    }
    return DR_OK;
  }
  if (I->n_xl == I->cap_xl) {
    const int cap = I->cap_xl ? 2 * I->cap_xl : 8;
    island_xlist *xl = (island_xlist *)realloc(I->xl, (size_t)cap * sizeof *xl);
    if (!xl) return dr_fail(DR_ENOMEM, "out of host memory for the island's shared-block lists");
    I->xl = xl;
    I->cap_xl = cap;
  }
  island_xlist *e = &I->xl[I->n_xl++];
  memset(e, 0, sizeof *e);
  e->host = idx;
  e->n = n;
  const size_t m = n ? n : 1;
  for (int k = 0; k < I->nm; ++k) {
    e->idx[k] = (int32_t *)dr_malloc(m * sizeof(int32_t), "island shared-block lists");
    if (!e->idx[k]) return DR_ENOMEM;
  }
  for (size_t j = 0; j < n; ++j) {
    const int32_t u = idx[j];
    if (u < 0 || (size_t)u >= I->n_codes)
      return dr_fail(DR_EINTERNAL, "cuda island: mark_shared: block %d of a list is not among the rank's %zu blocks",
                     (int)u, I->n_codes);
    for (int k = 0; k < I->nm; ++k) {
      const int32_t w = I->where[k][u];
      if (w >= 0) e->idx[k][e->cnt[k]++] = w;
    }
  }
  for (int k = 0; k < I->nm; ++k) { /* each member's marks (its interior and shared blocks) */
    DR_TRY(use(I->m[k]));
    DR_TRY(mark_shared(I->m[k], e->idx[k], e->cnt[k]));
  }
  /* every member's index of each listed block, on member 0 (the node exchange) */
  int32_t *lm = (int32_t *)dr_malloc(m * (size_t)I->nm * sizeof(int32_t), "island shared-block lists");
  if (!lm) return DR_ENOMEM;
  int rc = DR_OK;
  if (n > 0) {
    for (size_t j = 0; j < n; ++j)
      for (int k = 0; k < I->nm; ++k) lm[j * (size_t)I->nm + k] = I->where[k][idx[j]];
    rc = use(I->m[0]);
    if (rc == DR_OK) rc = dvec_reserve_at(&e->link_map, n * (size_t)I->nm * sizeof(int32_t), 1, 1,
                                          "island shared-block lists", __FILE__, __LINE__);
    if (rc == DR_OK) {
      const cudaError_t ce = cudaMemcpy(e->link_map.ptr, lm, n * (size_t)I->nm * sizeof(int32_t), cudaMemcpyHostToDevice);
      if (ce != cudaSuccess) rc = dr_fail(DR_EINTERNAL, "cudaMemcpy failed (%s:%d): %s (island shared-block lists)",
                                          __FILE__, __LINE__, cudaGetErrorString(ce));
    }
  }
  free(lm);
  return rc;
}

/* Every member's buffers of the step's parity, as member 0's kernels see them (island_bufs). */
static island_bufs island_bufs_of(island *I) {
  island_bufs b;
  memset(&b, 0, sizeof b);
  b.nm = I->nm;
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *m = I->m[k];
    const int par = m->par;
    b.grid[k] = dp<float>(m->grid[par]);
    b.grid0[k] = grid0_of(m, par);
    b.ig[k] = m->det ? dp<long long>(m->igrid[par]) : NULL;
    b.touched[k] = dp<uint8_t>(m->touched[par]);
    b.nb[k] = (int32_t)m->n_blocks;
  }
  return b;
}

/* backend.h's node exchange on an island (k_island_node_masks ...), on member 0. The masks follow
 * a barrier that orders every member's (boundary) P2G first; the values
 * are packed on member 0's xstream, beside the interior's work that the host queued since on every
 * member (it writes no block shared with another rank, and no member writes one before the shared
 * update's barrier); the unpack is queued on member 0's step stream without a wait: the shared
 * blocks' grid update starts with a barrier, which orders it before any member reads an owner's
 * copy (and, with p2p_atomics, before the pushes into it). */
static int island_node_masks(void *state, const int32_t *idx, size_t n, uint64_t *out) {
  island *I = (island *)state;
  const island_xlist *e = island_find(I, idx, n, "node_masks");
  if (!e) return DR_EINTERNAL;
  if (n == 0) return DR_OK;
  cuda_state *s = I->m[0];
  DR_TRY(island_barrier_all(I));
  DR_TRY(use(s));
  char *msg;
  DR_TRY(message_buffer(s, n * sizeof(uint64_t), &msg));
  const island_bufs b = island_bufs_of(I);
  const int32_t *lm = dp<int32_t>(e->link_map);
  const int bs = sums_floats(s);
  unsigned long long *mask = reinterpret_cast<unsigned long long *>(msg);
  if (s->det)
    k_island_node_masks<long long><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
        n, bs, lm, b, s->d_xbad, mask);
  else
    k_island_node_masks<float><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
        n, bs, lm, b, s->d_xbad, mask);
  LAUNCHED("k_island_node_masks");
  CU(cudaMemcpyAsync(out, mask, n * sizeof(uint64_t), cudaMemcpyDeviceToHost, s->stream));
  CU(cudaStreamSynchronize(s->stream));
  return xbad_check(s, "node_masks (k_island_node_masks)", n);
}

static int island_pack_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
                             void *out) {
  island *I = (island *)state;
  const island_xlist *e = island_find(I, idx, n, "pack_nodes");
  if (!e) return DR_EINTERNAL;
  cuda_state *s = I->m[0];
  const size_t bytes = nodes_bytes(s, nodes_marked(mask, base, n));
  if (bytes == 0) return DR_OK;
  DR_TRY(use(s));
  const unsigned long long *dmask;
  const unsigned *dbase;
  char *msg;
  DR_TRY(nodes_pack_begin(s, n, mask, base, bytes, &dmask, &dbase, &msg));
  const island_bufs b = island_bufs_of(I);
  const int32_t *lm = dp<int32_t>(e->link_map);
  const int bs = sums_floats(s);
  if (s->det)
    k_island_pack_nodes<long long><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->xstream>>>(
        n, bs, lm, b, s->d_xbad, dmask, dbase, reinterpret_cast<long long *>(msg));
  else
    k_island_pack_nodes<float><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->xstream>>>(
        n, bs, lm, b, s->d_xbad, dmask, dbase, reinterpret_cast<float *>(msg));
  LAUNCHED("k_island_pack_nodes");
  return nodes_pack_end(s, out, msg, bytes, n, "pack_nodes (k_island_pack_nodes)");
}

static int island_unpack_add_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
                                   const void *in) {
  island *I = (island *)state;
  const island_xlist *e = island_find(I, idx, n, "unpack_add_nodes");
  if (!e) return DR_EINTERNAL;
  cuda_state *s = I->m[0];
  const size_t bytes = nodes_bytes(s, nodes_marked(mask, base, n));
  if (bytes == 0) return DR_OK;
  DR_TRY(use(s));
  char *msg;
  const unsigned long long *m;
  const unsigned *bb;
  DR_TRY(nodes_recv(s, in, bytes, n, mask, base, &msg, &m, &bb));
  DR_TRY(recv_join(s)); /* the unpack below, on the step's stream, after the copies */
  const island_bufs b = island_bufs_of(I);
  const int32_t *lm = dp<int32_t>(e->link_map);
  const int bs = sums_floats(s);
  if (s->det)
    k_island_unpack_nodes<long long><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
        n, bs, lm, b, s->d_xbad, m, bb, reinterpret_cast<const long long *>(msg));
  else
    k_island_unpack_nodes<float><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
        n, bs, lm, b, s->d_xbad, m, bb, reinterpret_cast<const float *>(msg));
  LAUNCHED("k_island_unpack_nodes");
  s->unpack_check_n = n; /* island_g2p checks the index marks */
  return DR_OK;
}

/* The rank exchange's buffers of an island: pinned host memory, portable and mapped for every
 * member (member 0's copies of the node exchange's messages read and write it), or, for a
 * CUDA-aware MPI, member 0's device memory. sim.c's migration buffers come from here too
 * (pinned). */
static int island_alloc_sums(void *state, size_t bytes, int device, void **ptr) {
  island *I = (island *)state;
  *ptr = NULL;
  DR_TRY(use(I->m[0]));
  CU(cudaSetDevice(I->m[0]->device));
  cudaError_t e = device ? cudaMalloc(ptr, bytes ? bytes : 1)
                         : cudaHostAlloc(ptr, bytes ? bytes : 1, cudaHostAllocPortable | cudaHostAllocMapped);
  if (e != cudaSuccess) {
    *ptr = NULL;
    (void)cudaGetLastError();
    return dr_fail(DR_ENOMEM, "%s failed (%s:%d): %s: %zu bytes for the shared-block sums between ranks",
                   device ? "cudaMalloc" : "cudaHostAlloc", __FILE__, __LINE__, cudaGetErrorString(e), bytes);
  }
  return DR_OK;
}

static int island_emigrate(void *state, const int32_t lo[3], const int32_t hi[3], particles *out) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(emigrate(I->m[k], lo, hi, out));
  }
  return DR_OK;
}

/* backend.h's emigrate_records on the island: each member packs its leaving particles on its
 * device (emigrate_records), and the island's buffer holds them all, member by member. */
static int island_emigrate_records(void *state, const int32_t lo[3], const int32_t hi[3], const void **rec,
                                   size_t *n) {
  island *I = (island *)state;
  const size_t rb = REC_WORDS * sizeof(uint32_t);
  *rec = NULL;
  *n = 0;
  /* every member's records first (each stays valid until that member's next call), then the
   * island's buffer grown once for all of them */
  const void *r[MAX_GPUS] = {NULL};
  size_t m[MAX_GPUS] = {0}, total = 0;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(emigrate_records(I->m[k], lo, hi, &r[k], &m[k]));
    total += m[k];
  }
  if (total == 0) return DR_OK;
  DR_TRY(host_pinned(&I->rec, &I->rec_cap, total * rb, "the particles leaving the rank"));
  for (int k = 0, at = 0; k < I->nm; at += (int)m[k], ++k)
    if (m[k]) memcpy((char *)I->rec + (size_t)at * rb, r[k], m[k] * rb);
  *rec = I->rec;
  *n = total;
  return DR_OK;
}

/* backend.h's add_records on the island: as island_add_particles (the new particles go to the
 * members along the split axis, each up to its even share), each member's share gathered into
 * pinned memory and unpacked on its device (append_records); then every member rebuilds. */
static int island_add_records(void *state, const void *rec, size_t m) {
  island *I = (island *)state;
  if (m == 0) return DR_OK;
  const size_t rb = REC_WORDS * sizeof(uint32_t);
  const unsigned char *r = (const unsigned char *)rec;
  coord_index *ci = (coord_index *)dr_malloc(sizeof *ci * m, "island arrivals");
  if (!ci) return DR_ENOMEM;
  for (size_t i = 0; i < m; ++i) {
    float x[3]; /* a record starts with the position */
    memcpy(x, r + rb * i, sizeof x);
    ci[i] = (coord_index){x[I->axis], i};
  }
  qsort(ci, m, sizeof *ci, by_coord);
  size_t total = m;
  for (int k = 0; k < I->nm; ++k) total += I->m[k]->n;
  int rc = DR_OK;
  size_t next = 0;
  for (int k = 0; k < I->nm && rc == DR_OK && next < m; ++k) {
    const size_t give = island_give(I, k, total, m, next);
    if (give == 0) continue;
    rc = host_pinned(&I->rec_in, &I->rec_in_cap, give * rb, "the particles arriving at the rank");
    for (size_t j = 0; j < give && rc == DR_OK; ++j) memcpy((char *)I->rec_in + rb * j, r + rb * ci[next + j].i, rb);
    if (rc == DR_OK && (rc = use(I->m[k])) == DR_OK) rc = append_records(I->m[k], I->rec_in, give);
    next += give;
  }
  free(ci);
  DR_TRY(rc);
  return island_rebuild(I);
}

/* backend.h's reserve_records for an island: its own buffers (the records of all members, and a
 * member's share of the arrivals), and every member's, each for all n: the particles leaving
 * the rank may all come from the member at one end of the island's axis. */
static int island_reserve_records(void *state, size_t n) {
  island *I = (island *)state;
  const size_t rb = REC_WORDS * sizeof(uint32_t);
  if (n == 0) return DR_OK;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(reserve_records(I->m[k], n));
  }
  DR_TRY(host_pinned(&I->rec, &I->rec_cap, n * rb, "the particles leaving the rank"));
  return host_pinned(&I->rec_in, &I->rec_in_cap, n * rb, "the particles arriving at the rank");
}

static int island_particle_blocks(void *state, int (*add)(void *ctx, const int32_t blk[3], uint64_t count),
                                  void *ctx) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(particle_blocks(I->m[k], add, ctx));
  }
  return DR_OK;
}

static int island_wants_rebuild_be(void *state) { return island_wants_rebuild((const island *)state); }

/* Particles that migrated between ranks or a rebalance (sim.c, at a rebuild-mapping): split
 * again along the island's axis, as at the start, and every member rebuilt. */
static int island_set_particles(void *state, particles *p) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    CU(cudaStreamSynchronize(I->m[k]->stream)); /* nothing queued still reads the packets */
  }
  particles parts[MAX_GPUS];
  memset(parts, 0, sizeof parts);
  int rc = island_split(I, p, parts);
  for (int k = 0; k < I->nm && rc == DR_OK; ++k) {
    if ((rc = use(I->m[k])) == DR_OK) rc = set_particles(I->m[k], &parts[k]); /* takes parts[k] over */
  }
  for (int k = 0; k < I->nm; ++k) particles_free(&parts[k]);
  DR_TRY(rc);
  particles_free(p);
  return island_tag(I);
}

/* The zone G2P checks in the frame loop's graphs (lag_of), in the trace. */
static void log_zone(const cuda_state *s) {
  log_trace("%d GPU%s: G2P checks %s", s->nm, s->nm > 1 ? "s" : "",
            s->void_steps ? "the whole free zone (a step after a leave is voided)"
                          : "the free zone less a cell a queued step");
}

static int island_create(const sim_params *prm, const int *dev, int nm, particles *p, backend *out) {
  DR_TRY(island_peers(dev, nm, prm->island_reduce == ISLAND_REDUCE_P2P_ATOMICS));
  island *I = (island *)dr_calloc(1, sizeof *I, "cuda island");
  if (!I) return DR_ENOMEM;
  I->nm = nm;
  particles parts[MAX_GPUS];
  memset(parts, 0, sizeof parts);
  int rc = DR_OK;
  for (int k = 0; k < nm && rc == DR_OK; ++k) rc = member_new(prm, dev[k], &I->m[k]);
  if (rc == DR_OK) rc = island_split(I, p, parts);
  for (int k = 0; k < nm && rc == DR_OK; ++k) {
    cuda_state *s = I->m[k];
    s->nm = nm;
    s->me = k;
    s->events = prm->island_barrier == ISLAND_BARRIER_EVENTS;
    s->atomics = prm->island_reduce == ISLAND_REDUCE_P2P_ATOMICS;
    s->begin_barrier = !s->events && !s->atomics;
    s->void_steps &= !s->events; /* no device barrier at the beginning to share the flag */
    for (int q = 0, j = 0; j < nm; ++j)
      if (j != k) s->peer[q++] = I->m[j];
  }
  if (rc == DR_OK) log_zone(I->m[0]);
  for (int k = 0; k < nm && rc == DR_OK; ++k) rc = setup(I->m[k], &parts[k]);
  if (rc == DR_OK) rc = island_tag(I);
  if (rc == DR_OK) rc = crew_start(I);
  for (int k = 0; k < nm; ++k) particles_free(&parts[k]);
  if (rc) {
    island_destroy(I);
    return rc;
  }
  particles_free(p);
  out->name = "cuda";
  out->n_devices = nm;
  out->state = I;
  out->rebuild = island_rebuild_phase;
  out->p2g = island_p2g;
  out->grid_update = island_grid_update;
  out->g2p = island_g2p;
  out->finish = island_finish;
  out->set_time = island_set_time;
  out->advance_frame = island_advance_frame;
  out->max_speed = island_max_speed;
  out->download = island_download;
  out->projected = island_projected;
  out->set_projected = island_set_projected;
  out->stats = island_stats;
  out->count = island_count;
  out->destroy = island_destroy;
  out->add_particles = island_add_particles;
  /* several ranks, each with its island */
  out->blocks = island_blocks;
  out->mark_shared = island_mark_shared;
  out->grid_update_part = island_grid_update_part;
  out->wants_rebuild = island_wants_rebuild_be;
  out->set_particles = island_set_particles;
  out->emigrate = island_emigrate;
  out->emigrate_records = island_emigrate_records;
  out->add_records = island_add_records;
  out->reserve_records = island_reserve_records;
  out->particle_blocks = island_particle_blocks;
  /* as for one GPU: the boundary's P2G first, its sums sent while the interior scatters; the
   * interior's G2P while they are in flight (docs/performance.md). p2p_atomics keeps the whole
   * step (its grid update is not split: island_grid_update_part). */
  const int split = !I->m[0]->atomics;
  out->p2g_part = split ? island_p2g_part : NULL;
  out->g2p_interior = split ? island_g2p_interior : NULL;
  /* each step's P2G queued ahead of the ranks' vote, behind a gate on every member (as one GPU's;
   * DRIFT_STEP_AHEAD, by default on where the node's ranks have GPUs of their own) */
  for (int k = 0; k < nm; ++k) I->m[k]->ahead_on = ahead_default(prm, nm);
  out->g2p_ahead = island_g2p_ahead;
  out->g2p_collect = island_g2p_collect_be;
  out->gate_open = island_gate_open;
  out->alloc_sums = island_alloc_sums;
  out->free_sums = free_sums;
  /* the node exchange of one GPU, packed and unpacked by member 0 over P2P; the masks in one call
   * (a barrier: not queued behind the step vote's gate) */
  out->node_masks = island_node_masks;
  out->pack_nodes = island_pack_nodes;
  out->unpack_add_nodes = island_unpack_add_nodes;
  out->block_sums = sums_floats(I->m[0]);
  out->sums_int64 = I->m[0]->det;
  size_t held = 0;
  char line[512];
  int len = 0;
  for (int k = 0; k < nm; ++k) {
    held += (size_t)held_bytes(I->m[k]);
    len += snprintf(line + len, sizeof line - (size_t)len, "%s%d: %zu (packets of up to %d)", k ? ", " : "", dev[k],
                    I->m[k]->n, LANES);
    if (len >= (int)sizeof line) len = (int)sizeof line - 1;
  }
  log_info("cuda island: %d GPUs (%s), %s; particles split along %c, %zu grid blocks on GPU 0, %.1f MiB of device "
           "memory in all; barrier %s, reduction %s", nm, I->m[0]->device_name, line, "xyz"[I->axis],
           I->m[0]->n_blocks, held / 1048576.0, scene_island_barrier_names[I->m[0]->events],
           scene_island_reduce_names[I->m[0]->atomics]);
  return DR_OK;
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
    int tag = -1; /* p2g_part's and grid_update_part's part */
    if constexpr (std::is_same_v<std::tuple<A...>, std::tuple<float, int>>) tag = std::get<1>(std::make_tuple(a...));
    const int step_end = (const void *)F == (const void *)&g2p;
    DR_TRY(marks_record(s, __PRETTY_FUNCTION__, tag, 0, 0));
    const int rc = F(state, a...);
    if (rc == DR_OK) DR_TRY(marks_record(s, __PRETTY_FUNCTION__, tag, 1, step_end));
    return rc;
  }
};
#define ON_DEVICE(f) on_device<f>::call

extern "C" int backend_cuda_create(const sim_params *prm, particles *p, backend *out) {
  memset(out, 0, sizeof *out);
  int dev[MAX_GPUS], nm = 0;
  DR_TRY(island_devices(prm, dev, &nm));
  if (p->n / (size_t)nm > (size_t)INT32_MAX / 2)
    return dr_fail(DR_EINPUT, "%zu particles on %d GPU%s: the cuda backend holds at most %d per GPU", p->n, nm,
                   nm > 1 ? "s" : "", INT32_MAX / 2);
  if (nm > 1) return island_create(prm, dev, nm, p, out);
  cuda_state *s = NULL;
  DR_TRY(member_new(prm, dev[0], &s));
  log_zone(s);
  const size_t n = p->n;
  int rc = setup(s, p);
  if (rc) {
    destroy(s);
    return rc;
  }
  particles_free(p);
  out->name = "cuda";
  out->n_devices = 1;
  out->state = s;
  out->rebuild = ON_DEVICE(rebuild);
  out->p2g = ON_DEVICE(p2g);
  out->grid_update = ON_DEVICE(grid_update);
  out->g2p = ON_DEVICE(g2p);
  out->finish = ON_DEVICE(finish);
  out->set_time = ON_DEVICE(set_time);
  out->advance_frame = ON_DEVICE(advance_frame);
  out->max_speed = ON_DEVICE(max_speed);
  out->download = ON_DEVICE(download);
  out->projected = projected;
  out->set_projected = ON_DEVICE(set_projected);
  out->stats = ON_DEVICE(stats);
  out->count = count;
  out->destroy = destroy;
  /* several ranks: the shared blocks' sums travel through pinned host buffers (sim.c) */
  out->blocks = ON_DEVICE(blocks);
  /* the node exchange (mpi/exchange.h): the masks in two halves, the interior's P2G queued
   * between them */
  out->node_masks = ON_DEVICE(node_masks);
  out->node_masks_async = ON_DEVICE(node_masks_async);
  out->node_masks_wait = ON_DEVICE(node_masks_wait);
  out->pack_nodes = ON_DEVICE(pack_nodes);
  out->unpack_add_nodes = ON_DEVICE(unpack_add_nodes);
  out->mark_shared = ON_DEVICE(mark_shared);
  out->grid_update_part = ON_DEVICE(grid_update_part);
  out->wants_rebuild = wants_rebuild;
  out->set_particles = ON_DEVICE(set_particles);
  out->add_particles = ON_DEVICE(add_particles);
  out->emigrate = ON_DEVICE(emigrate);
  /* the same with the particles as records packed and unpacked on the device */
  out->emigrate_records = ON_DEVICE(emigrate_records);
  out->add_records = ON_DEVICE(add_records);
  out->reserve_records = ON_DEVICE(reserve_records);
  out->particle_blocks = ON_DEVICE(particle_blocks);
  /* the boundary's P2G first, its sums sent while the interior scatters; the interior's G2P
   * while they are in flight (docs/performance.md) */
  out->p2g_part = ON_DEVICE(p2g_part);
  out->g2p_interior = ON_DEVICE(g2p_interior);
  /* the next step queued before the step vote, behind a gate on the device (DRIFT_STEP_AHEAD=0: after
   * the vote; docs/performance.md) */
  s->ahead_on = ahead_default(prm, 1);
  out->g2p_ahead = ON_DEVICE(g2p_ahead);
  out->g2p_collect = ON_DEVICE(g2p_collect);
  out->gate_open = ON_DEVICE(gate_open);
  out->block_sums = sums_floats(s); /* = int_floats(s) */
  out->sums_int64 = s->det;
  out->alloc_sums = alloc_sums;
  out->free_sums = free_sums;
  log_info("cuda backend: device %d (%s), %zu particles in %zu packets of up to %d, %zu grid blocks, %.1f MiB of "
           "device memory%s",
           s->device, s->device_name, n, s->n_packets, LANES, s->n_blocks, held_bytes(s) / 1048576.0,
           s->det ? " (deterministic: int64 P2G sums)" : "");
  return DR_OK;
}
