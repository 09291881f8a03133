// exchange_device.cu - the rank exchange (mpi/exchange.c through backend.h) on the device: the
// shared blocks' node masks, packing and unpacking of their nodes into messages, the pinned host
// slots, the boundary packets' order (p2g_part), for one GPU and for an island (member 0 packs
// and unpacks every member's copies over P2P). The packs and unpacks run on xstream (one GPU) or
// the step's stream (an island member), ordered after the P2G whose sums they read by events;
// an out-of-range block index is reported through mapped memory (h_xbad), checked by the host.

#include "cuda_state.h"

/* cuda_p2g_part: flag[p] = 1 where packet p's particle block has a block shared with another rank
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

/* ---- the rank exchange (mpi/exchange.c) --------------------------------------------------- */

/* Sums of the listed blocks, block after block, bs floats each (backend.h's block_sums): the 4
 * channels of grid buffer g x 64 nodes, channel-major, then with ASFLIP (g0) the 3 channels of
 * the momentum without the stress impulse. One thread per value. */
/* An exchange kernel's block index must lie in [0, nb) of the current mapping. One that does not
 * (a stale or corrupted list) is not used; it goes to bad[1] and bad[0] is set (mapped
 * pinned host memory, plain stores: no atomics over PCIe; with several bad indices any one is
 * reported), and the host turns it into an error after its sync (xdev_xbad_check). Always on: one
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
 * (exchange_setup hands each link's list to cuda_mark_shared once), so they are uploaded there, once,
 * side by side in xidx; the node exchange finds each by the host pointer and length. */
int xdev_sums_floats(const cuda_state *s) { return BLOCK_FLOATS + (s->asflip ? OLD_FLOATS : 0); }

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
int xdev_xbad_check(cuda_state *s, const char *call, size_t n) {
  if (!s->h_xbad[0]) return DR_OK;
  const int blk = s->h_xbad[1];
  s->h_xbad[0] = s->h_xbad[1] = 0;
  return dr_fail(DR_EINTERNAL,
                 "cuda backend: %s: block index %d of a shared-block list (%zu blocks) is outside the %zu grid blocks "
                 "of the current mapping (rebuild %llu): a stale or corrupted exchange list",
                 call, blk, n, s->n_blocks, (unsigned long long)s->rebuilds);
}

/* Registers the list (and uploads every registered list again: growing xidx loses its contents).
 * Its indices are checked against the current mapping on the host first (once per list). */
static int register_indices(cuda_state *s, const int32_t *idx, size_t n, const char *call) {
  for (size_t k = 0; k < n; ++k)
    if (idx[k] < 0 || (size_t)idx[k] >= s->n_blocks)
      return dr_fail(DR_EINTERNAL,
                     "cuda backend: %s: entry %zu of a shared-block list of %zu is block %d, outside the %zu grid "
                     "blocks of the current mapping (rebuild %llu): a stale or corrupted exchange list",
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

/* The device copy of a list cuda_mark_shared did not see (not in the steady state): uploaded now,
 * after the registered ones. */
static int indices_for(cuda_state *s, const int32_t *idx, size_t n, const int32_t **out, const char *call) {
  const xlist *e = find_indices(s, idx, n);
  if (e && e->mapping != s->rebuilds) /* every rebuild-mapping must be followed by exchange_setup */
    return dr_fail(DR_EINTERNAL,
                   "cuda backend: %s: a shared-block list registered at rebuild %llu is used after rebuild %llu "
                   "(%zu grid blocks now): exchange_setup did not follow the rebuild-mapping",
                   call, (unsigned long long)e->mapping, (unsigned long long)s->rebuilds, s->n_blocks);
  if (!e) DR_TRY(register_indices(s, idx, n, call));
  *out = device_indices(s, idx, n);
  return DR_OK;
}

/* The codes in pinned memory: the exchange set-up reads them at every rebuild-mapping of a rank.
 * Copied once a mapping (only rebuild_now changes them): a second call returns at once, without
 * waiting for the work queued since (sim.c asks first, then queues the step's P2G and sets up
 * the exchange while the device runs it). */
int cuda_blocks(void *state, const uint64_t **codes, size_t *n) {
  cuda_state *s = (cuda_state *)state;
  *codes = s->h_codes; /* sorted; the position is the dense index (k_table_insert) */
  *n = s->n_blocks;
  s->want_codes = s->nm == 1; /* from the next rebuild-mapping on, codes_early */
  DR_TRY(rebuild_codes_wait(s));
  if (s->h_codes && s->h_codes_of == s->rebuilds + 1) return DR_OK;
  DR_TRY(cuda_host_pinned((void **)&s->h_codes, &s->h_codes_cap, sizeof(uint64_t) * s->n_blocks, "the block codes"));
  if (s->n_blocks)
    CU(cudaMemcpyAsync(s->h_codes, s->block_code.ptr, s->n_blocks * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                       s->stream));
  CU(cudaStreamSynchronize(s->stream));
  s->h_codes_of = s->rebuilds + 1;
  *codes = s->h_codes;
  return DR_OK;
}

static int recv_join(cuda_state *s);

/* The exchange's device buffer for one message (cuda_pack_nodes, island_node_masks, island_pack_nodes). */
static int message_buffer(cuda_state *s, size_t bytes, char **msg) {
  DVEC(s->xbuf, bytes, "exchange buffer");
  *msg = dp<char>(s->xbuf);
  return DR_OK;
}

/* cuda_node_masks in two halves (backend.h): one link's buffers, and the event after its masks were
 * copied to pinned memory in stream order. */

typedef struct pslot {
  dvec msg;        /* the masks on the device (k_node_masks) */
  cudaEvent_t ev;
  size_t n;
  void *h_masks;   /* ... copied here (pinned) */
  size_t h_masks_cap;
} pslot;

/* The exchange's stream, at the device's highest priority: its kernels take the SMs as the
 * interior's P2G and G2P free them, instead of queueing behind every CTA of those. */
int xdev_xstream_get(cuda_state *s) {
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
  DR_TRY(xdev_xstream_get(s));
  *out = x;
  return DR_OK;
}

void xdev_pslots_free(cuda_state *s) {
  for (int k = 0; k < s->n_pslot; ++k) {
    pslot *x = &s->pslot[k];
    dvec_free(&x->msg);
    cuda_host_release(x->h_masks);
    if (x->ev) cudaEventDestroy(x->ev);
  }
  free(s->pslot);
  s->pslot = NULL;
  s->n_pslot = 0;
  if (s->xstream) cudaStreamDestroy(s->xstream);
  s->xstream = NULL;
}

/* The start of the masks in two halves (cuda_node_masks_async): with the boundary's P2G on xstream
 * (head_on), the interior's P2G goes on the step's stream now, before the exchange's host work
 * (the device held only the boundary's short launch meanwhile); sim.c's cuda_p2g_part(P2G_INTERIOR)
 * then only joins the two streams. */
static int masks_begin(cuda_state *s) {
  if (s->head_on && !s->interior_on) {
    DR_TRY(step_p2g_interior(s));
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
  DR_TRY(xdev_xstream_get(s));
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
int cuda_node_masks_async(void *state, int slot, const int32_t *idx, size_t n) {
  cuda_state *s = (cuda_state *)state;
  pslot *x = NULL;
  DR_TRY(masks_slot(s, slot, n, &x));
  if (!x) return DR_OK;
  const int32_t *didx;
  const int n_xl = s->n_xl;
  const void *msg = x->msg.ptr;
  DR_TRY(indices_for(s, idx, n, &didx, "node_masks_async"));
  DVEC(x->msg, n * sizeof(unsigned long long), "exchange buffer");
  DR_TRY(cuda_host_pinned(&x->h_masks, &x->h_masks_cap, n * sizeof(unsigned long long), "the exchange's node masks"));
  cudaStream_t st;
  DR_TRY(masks_stream(s, s->n_xl != n_xl || x->msg.ptr != msg, &st));
  const int bs = xdev_sums_floats(s);
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

int cuda_node_masks_wait(void *state, int slot, uint64_t *out) {
  cuda_state *s = (cuda_state *)state;
  if (slot < 0 || slot >= s->n_pslot)
    return dr_fail(DR_EINTERNAL, "cuda backend: node_masks_wait(%d) without its node_masks_async", slot);
  pslot *x = &s->pslot[slot];
  if (x->n == 0) return DR_OK;
  CU(cudaEventSynchronize(x->ev));
  DR_TRY(xdev_xbad_check(s, "node_masks_async (k_node_masks)", x->n));
  memcpy(out, x->h_masks, x->n * sizeof(uint64_t));
  return DR_OK;
}

/* cuda_node_masks in one call: the two halves in slot 0 (exchange.c calls it for one link after
 * another, each waited for, with no pack in two halves queued). */
int cuda_node_masks(void *state, const int32_t *idx, size_t n, uint64_t *out) {
  DR_TRY(cuda_node_masks_async(state, 0, idx, n));
  return cuda_node_masks_wait(state, 0, out);
}

/* Nodes marked in the last of n masks with their prefix sums base: the message's nodes. */
static size_t nodes_marked(const uint64_t *mask, const uint32_t *base, size_t n) {
  return n ? (size_t)base[n - 1] + (size_t)__builtin_popcountll(mask[n - 1]) : 0;
}

/* The start of a node pack on s (cuda_pack_nodes, island_pack_nodes): the AND of the masks and its
 * prefix sums uploaded on xstream into xnodes, the message's device buffer (bytes, xbuf). */
static int nodes_pack_begin(cuda_state *s, size_t n, const uint64_t *mask, const uint32_t *base, size_t bytes,
                            const unsigned long long **dmask, const unsigned **dbase, char **msg) {
  const size_t mb = (n * sizeof(uint64_t) + 255) & ~(size_t)255;
  DR_TRY(xdev_xstream_get(s));
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
  return xdev_xbad_check(s, call, n);
}

/* The bytes of a node message of s's channels. */
static size_t nodes_bytes(const cuda_state *s, size_t total) {
  return total * (size_t)(xdev_sums_floats(s) / BLOCK_NODES) * (s->det ? sizeof(long long) : sizeof(float));
}

/* On xstream (high priority, beside the interior's work on the step's stream): cuda_node_masks_wait
 * saw the boundary's P2G complete, and the interior writes no shared block. */
int cuda_pack_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base, void *out) {
  cuda_state *s = (cuda_state *)state;
  const size_t bytes = nodes_bytes(s, nodes_marked(mask, base, n));
  if (bytes == 0) return DR_OK;
  const int32_t *didx;
  DR_TRY(indices_for(s, idx, n, &didx, "pack_nodes"));
  const unsigned long long *dmask;
  const unsigned *dbase;
  char *msg;
  DR_TRY(nodes_pack_begin(s, n, mask, base, bytes, &dmask, &dbase, &msg));
  const int bs = xdev_sums_floats(s);
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
int cuda_unpack_add_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
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
  const int bs = xdev_sums_floats(s);
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
int cuda_alloc_sums(void *state, size_t bytes, int device, void **ptr) {
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

void cuda_free_sums(void *ptr, int device) {
  if (device) (void)cudaFree(ptr);
  else (void)cudaFreeHost(ptr);
}

int cuda_mark_shared(void *state, const int32_t *idx, size_t n) {
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
  return xdev_xbad_check(s, "mark_shared (k_mark)", n);
}

/* xdev_shared_list: the marked blocks' indices, in no particular order (each block's update is its
 * own), and their count. */
__global__ static void k_shared_list(size_t n_blocks, const uint8_t *__restrict__ shared, int32_t *__restrict__ list,
                                     int *__restrict__ count) {
  const size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (b < n_blocks && shared[b]) list[atomicAdd(count, 1)] = (int32_t)b;
}

/* The shared blocks' list from the marks, on the device (the count stays there: k_grid reads it;
 * the launch takes shared_bound), once per marks. */
int xdev_shared_list(cuda_state *s, cudaStream_t st) {
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

/* cuda_p2g_part's order: the boundary packets (k_pk_boundary) first, the others after them (in
 * reverse order: cub's partition), computed once per mapping and marks (one read of the count). */
int xdev_boundary_order(cuda_state *s) {
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
    DR_TRY(cuda_read_count(s, s->count.ptr, &nb));
    s->n_boundary = (size_t)nb;
    TRACE("p2g_part: %d of %zu packets on device %d reach shared blocks", nb, n, s->device);
  }
  s->order_stale = 0;
  return DR_OK;
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

int island_blocks(void *state, const uint64_t **codes, size_t *n) {
  island *I = (island *)state;
  const uint64_t *mc[MAX_GPUS];
  size_t mn[MAX_GPUS], at[MAX_GPUS], total = 0;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_blocks(I->m[k], &mc[k], &mn[k]));
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
  dr_fail(DR_EINTERNAL, "cuda island: %s: a shared-block list of %zu blocks that mark_shared did not see",
          call, n);
  return NULL;
}

int island_mark_shared(void *state, const int32_t *idx, size_t n) {
  island *I = (island *)state;
  if (!idx) { /* a new exchange_setup */
    island_xl_free(I);
    for (int k = 0; k < I->nm; ++k) {
      DR_TRY(use(I->m[k]));
      DR_TRY(cuda_mark_shared(I->m[k], NULL, 0));
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
    DR_TRY(cuda_mark_shared(I->m[k], e->idx[k], e->cnt[k]));
  }
  /* every member's index of each listed block, on member 0 (the node exchange) */
  int32_t *lm = (int32_t *)dr_malloc(m * (size_t)I->nm * sizeof(int32_t), "island shared-block lists");
  if (!lm) return DR_ENOMEM;
  int rc = DR_OK;
  if (n > 0) {
    for (size_t j = 0; j < n; ++j)
      for (int k = 0; k < I->nm; ++k) lm[j * (size_t)I->nm + k] = I->where[k][idx[j]];
    rc = use(I->m[0]);
    if (rc == DR_OK) rc = dvec_reserve_at(&e->link_map, n * (size_t)I->nm * sizeof(int32_t), 1,
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
int island_node_masks(void *state, const int32_t *idx, size_t n, uint64_t *out) {
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
  const int bs = xdev_sums_floats(s);
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
  return xdev_xbad_check(s, "node_masks (k_island_node_masks)", n);
}

int island_pack_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
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
  const int bs = xdev_sums_floats(s);
  if (s->det)
    k_island_pack_nodes<long long><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->xstream>>>(
        n, bs, lm, b, s->d_xbad, dmask, dbase, reinterpret_cast<long long *>(msg));
  else
    k_island_pack_nodes<float><<<blocks_for(n * 32, SIMPLE_THREADS), SIMPLE_THREADS, 0, s->xstream>>>(
        n, bs, lm, b, s->d_xbad, dmask, dbase, reinterpret_cast<float *>(msg));
  LAUNCHED("k_island_pack_nodes");
  return nodes_pack_end(s, out, msg, bytes, n, "pack_nodes (k_island_pack_nodes)");
}

int island_unpack_add_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
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
  const int bs = xdev_sums_floats(s);
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
int island_alloc_sums(void *state, size_t bytes, int device, void **ptr) {
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
