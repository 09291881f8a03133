// island_barrier.cu - the island's barrier (k_barrier) and its reduction of the grid between
// members: double-buffered P2P reads (k_grid reads the peers' copies) or, with p2p_atomics, the
// owners' sums (k_tag, k_owner, k_push, k_pull); the host's side of the barrier for the "events"
// variant, and the failure report of a barrier that timed out. Why this is race-free follows.
//
// Several GPUs of one rank run as one island (the paper, section 5; docs/architecture.md):
// each member holds a static share of the particles and its own sparse grid; a grid block that
// several members touch has a copy on each. Every step:
//
//   k_begin; P2G into P[par] (own copy); barrier; k_grid: for each own touched block, own P[par]
//   plus the peers' P[par] copies of the same block (read by P2P, skipped where the peer did
//   not touch it), the grid update and boundary conditions, written to vel (own); clears own
//   P[1 - par] (the next step's target); G2P from vel.
//
// Why there is no race, with one barrier per step (n, parity par = n mod 2):
//  - Peers read my P[par] and touched[par] only in their k_grid of step n, after barrier n,
//    which I pass only after my P2G of step n (stream order), so they read complete sums.
//  - I write P[par] again only in step n + 1 (k_grid clears it as "next") and step n + 2 (P2G).
//    Both come after barrier n + 1, which no member passes before every member has arrived,
//    and a member arrives only after its k_grid of step n (stream order). So no peer is still
//    reading P[par] when I clear or refill it. The same holds for P[1 - par], shifted by a step.
//  - My k_grid writes velocities to vel, never to P[par], so it does not disturb peers reading
//    P[par] in their own k_grid of the same step; vel is read only by my own G2P.
//  - G2P2G: the P2G of step n + 1 into P[1 - par] runs at the end of my step n, after my k_grid
//    of step n cleared that buffer and after barrier n, so every peer has finished its k_grid of
//    step n - 1, the last reader of P[1 - par] before; peers read it next after barrier n + 1,
//    which I reach only after that P2G. The two points above hold as they are.
//  - Rebuild-mapping: every member's queued steps have finished before any member rebuilds, so
//    nothing reads the old buffers while they are swapped out. Each member records rebuilt_ev
//    after its rebuild, and a member's k_tag waits on its GPU for every peer's event
//    (job_rebuild, island_tag_member), so the hash tables k_tag reads are complete; the primed sums
//    that a member's rebuild moves to its new blocks (keep_primed) are read by the peers only in
//    their k_grid after the next barrier, which the member reaches after its rebuild in stream
//    order (p2p_atomics: a member's k_push comes after its k_tag, so after the owners' clears of
//    their rebuilt buffers). The host captures the next graphs meanwhile: the peers' buffers are
//    allocated when island_each(job_rebuild) returns. The first
//    unfused step after G2P2G frames is launched without its P2G outside the graph, with the
//    same barrier and k_grid, so the order above is unchanged.
// Adaptive steps need the island's largest speed before P2G: k_begin publishes the member's
// last vmax in vmax_pub[step_seq & 1], passes a barrier and takes the maximum over the peers'
// slots; a slot is rewritten two steps later, after another barrier that every reader of it has
// passed. Fixed steps need no such barrier.
// The barrier: each member counts its barriers (bar_seq, the same sequence on every member),
// stores the count in its own device memory with a system-scope fence, and spins until every
// peer's count (read by P2P) has reached it. One thread per GPU publishes; the polling is spread
// over a warp, lane q reading peer q (island_barrier_warp). Where nothing runs between a step's
// k_begin and its barrier, one kernel does both (k_begin_barrier). The host is not involved.
// A barrier that waits longer than --barrier-timeout seconds (default 120; a step takes
// milliseconds) gives up, records where it stood in the step record, and lets the step finish;
// the host reads the record with the step's flags and fails the run naming the members and
// counts, so a member falling out of step (a bug) ends the job with an explanation, not a hang.
//
// The paper's two alternatives, as switches for drift bench (its section "Ablation study on
// multiple GPUs"; scene keys parallel.island_barrier and parallel.island_reduce):
//
// island_barrier "events": at every barrier the host records an event on each member's stream
// and makes each member's stream wait for every other member's event (cudaStreamWaitEvent,
// m (m - 1) waits; the waits snapshot the events when issued, so one event per member serves
// every barrier). Both barriers of a step are host-issued: the adaptive step's vmax exchange
// becomes k_publish (the member's last vmax into vmax_pub[step_seq & 1]), a barrier, and k_begin
// reading the peers' slots without spinning (iv.spin = 0); the slot argument above holds with the
// host's barriers in place of the spin locks. A member's captured graph holds no dependency on
// another member's stream (only external event nodes, or one multi-device graph, could carry
// one), so in this mode the step's kernels are launched directly, stage by stage over the
// members (island_step_events). We chose that over one multi-device graph: the paper's comparison is
// of the host's latency of cudaStreamWaitEvent per barrier, and a graph would turn the waits into
// edges resolved by the driver, without those host calls, i.e. compare something else. The
// price is a host launch per kernel instead of one graph launch per step, which the
// comparison includes (docs/performance.md).
//
// island_reduce "p2p_atomics": one P2G buffer per parity and no vel: every shared block has one
// owner, the lowest member index that holds it (k_owner, at tagging: tags are symmetric, so all
// holders agree). Step n, parity par:
//
//   k_begin; P2G into P[par] (own copy); k_push: for each block this member touched and another
//   member o owns, its P[par] values added into o's P[par] copy by system-scope atomics through
//   P2P pointers, and o's touched[par] set; barrier A; k_grid: the blocks this member owns or
//   holds alone, updated in place in P[par] as on one GPU (blocks owned elsewhere skipped; the
//   clear of P[1 - par] as before); barrier B; k_pull: for each block this member touched and
//   another member owns, the owner's updated block (velocities, and grid0 with ASFLIP) copied
//   by P2P into its own P[par]; G2P from P[par]. Every member's G2P reads the owner's numbers.
//
// Why two barriers per step, and no race (the adaptive vmax barrier comes on top, as above):
//  - A: the owner reads a block's sum in k_grid(n) only after every pusher's k_push(n), which
//    precedes the pusher's arrival at A(n) in stream order: complete sums.
//  - B: a non-owner reads the owner's block in k_pull(n) after B(n), which the owner reaches
//    after its k_grid(n): no half-updated block. Without B a puller could read momenta not yet
//    turned into velocities; dropping B would need the owner to keep its sums and write the
//    velocities elsewhere, which is the second buffer this variant does without.
//  - Reuse of the owner's P[par]: the owner clears it next in k_grid(n + 1), after A(n + 1),
//    which a puller reaches only after its k_pull(n); pushers write it next in step n + 2 after
//    B(n + 1), which the owner reaches after k_grid(n + 1), after its own G2P(n). Pushes of step
//    n + 1 go to P[1 - par], which the owner cleared (with its touched flags) in k_grid(n),
//    before B(n), and which pushers reach after B(n). So B also orders every reuse of a buffer
//    after the last peer access of it; the grid-buffer parity removes the need for a third.
//  - A non-owner's own copy of a block owned elsewhere is read and written only by itself
//    (P2G, k_push reading it, k_pull overwriting it, G2P, the clear), in stream order.
//  - Pushes may overlap the owner's own P2G(n) into the same nodes (no barrier between them,
//    as in the paper's scheme): both are atomic additions at the owner's memory. On one device
//    (--devices 0,0) they are that device's atomics; between two devices, island_peers
//    demands native P2P atomics (cudaDevP2PAttrNativeAtomicSupported, NVLink), which the
//    owner's memory performs like its own. The sums' order varies (float rounding), as with
//    double buffering; deterministic mode pushes its int64 sums, so the result stays exact.
//  - A host-side clear of a primed P2G buffer (G2P2G frames, step_clear_grid) is not ordered before
//    the peers' next pushes by any barrier; in this mode the host waits for it (island_sync).
//  Pushes are scalar system-scope atomics (4 per node, 3 more with ASFLIP, the int64 sums in
//  deterministic mode), zeros skipped, once per touched block: the block-level form of the
//  paper's scheme, whose P2G wrote each contribution to the owner directly.

#include "cuda_state.h"
#include "barrier.cuh"
#include "block_table.cuh"

/* The barrier as a kernel between P2G and the grid update, one warp (island_launch_barrier). */
__global__ static void k_barrier(step_ctl *c, island_view iv) {
  stamp(c, ST_BAR_IN);
  island_barrier_warp(c, iv);
  stamp(c, ST_BAR_OUT);
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

/* The island's barrier between P2G (into P[par]) and the grid update (nothing on one GPU). */
int island_launch_barrier(cuda_state *s, int par) {
  if (s->nm == 1) return DR_OK;
  k_barrier<<<1, 32, 0, s->stream>>>(dp<step_ctl>(s->ctl), step_view_of(s, par));
  LAUNCHED("k_barrier");
  return DR_OK;
}
/* p2p_atomics: this member's parts of blocks owned by peers, into the owners' copies (k_push). */
int island_launch_push(cuda_state *s, int par) {
  if (!s->atomics || s->n_blocks == 0) return DR_OK;
  const size_t n = s->n_blocks * BLOCK_NODES;
  (s->det ? k_push<true> : k_push<false>)<<<blocks_for(n, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
      dp<step_ctl>(s->ctl), s->n_blocks, dp<uint8_t>(s->touched[par]), dp<int8_t>(s->own), dp<int32_t>(s->tags),
      s->nm - 1, dp<float>(s->grid[par]), s->det ? NULL : grid0_of(s, par), fix_of(s, par).ig,
      (int)(int_floats(s) / BLOCK_NODES), step_peers_of(s, par));
  LAUNCHED("k_push");
  return DR_OK;
}

/* p2p_atomics: the owners' updated blocks over this member's parts (k_pull). */
int island_launch_pull(cuda_state *s, int par) {
  if (!s->atomics || s->n_blocks == 0) return DR_OK;
  const size_t n = s->n_blocks * BLOCK_NODES;
  k_pull<<<blocks_for(n, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->stream>>>(
      dp<step_ctl>(s->ctl), s->n_blocks, dp<uint8_t>(s->touched[par]), dp<int8_t>(s->own), dp<int32_t>(s->tags),
      s->nm - 1, dp<float>(s->grid[par]), grid0_of(s, par), step_peers_of(s, par));
  LAUNCHED("k_pull");
  return DR_OK;
}

/* Tagging (after every member's rebuild-mapping, complete on every GPU): member k looks its
 * blocks up in its peers' hash tables by P2P. Only k's own kernels read its tags, after these
 * launches in its stream. */
int island_tag_member(island *I, int k) {
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

/* Tagging where the members' set-up left work queued (island_create, cuda_set_particles): every
 * member synchronised first, and after, as those callers expect. */
int island_tag(island *I) {
  if (I->nm == 1) return DR_OK;
  DR_TRY(island_sync(I));
  for (int k = 0; k < I->nm; ++k) DR_TRY(island_tag_member(I, k));
  return island_sync(I);
}
/* A member's barrier gave up (island_barrier): the members fell out of step. */
int island_fail_barrier(const island *I, int k, const step_ctl *c) {
  const cuda_state *s = I->m[k];
  const int peer = c->bar_peer < s->me ? c->bar_peer : c->bar_peer + 1;
  return dr_fail(DR_EINTERNAL, "cuda island: GPU %d (device %d) waited %.0f s at island barrier %u for GPU %d (device %d), "
                 "which stood at barrier %u: the island's members fell out of step (a bug in drift; the time limit is "
                 "--barrier-timeout)", k, s->device, s->barrier_timeout_ns * 1e-9, c->bar_stuck, peer,
                 I->m[peer]->device, c->bar_peer_seen);
}

/* The island_barrier "events" barrier (see the island): every member records its event, then
 * every member's stream waits for every other member's. Issued by the host, waits on nothing. */
int island_event_barrier(island *I) {
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
int island_barrier_all(island *I) {
  if (I->nm == 1) return DR_OK;
  if (I->m[0]->events) return island_event_barrier(I);
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(island_launch_barrier(I->m[k], I->m[k]->par));
  }
  return DR_OK;
}
