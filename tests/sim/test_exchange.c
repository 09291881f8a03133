/* test_exchange.c - the rank exchange (mpi/exchange.c, the node exchange) on two ranks with a
 * fake backend (node_masks, pack_nodes and unpack_add_nodes; 8 shared blocks of one channel):
 *   - each rank is handed the AND of both ranks' masks and adds the other's values of exactly
 *     those nodes, and bytes_sent counts the masks and the values;
 *   - where node_masks or pack_nodes fails on one rank (as a CUDA fault surfacing at a sync does,
 *     issue #8), no neighbour is left waiting: both ranks return, the failing one with its error,
 *     and the other adds nothing; and the exchange works again at the next step;
 *   - the masks in two halves (node_masks_async and node_masks_wait, queued by exchange_pack; a
 *     backend without them: exchange_pack queues nothing), and a failure of the async half;
 *   - exchange_setup refuses a backend without the node exchange, naming it. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "exchange.h"

#define NB 8

typedef struct fake {
  int rank;
  int fail_pack;     /* pack_nodes fails (and writes nothing) */
  uint64_t codes[NB];
} fake;

static char f_slot[4][256]; /* node_masks_async's masks, one slot per link */
static int f_async_calls, f_wait_calls;
/* rank r's mask of block i, and its value at node nd (one channel) */
static uint64_t f_mask_of(int r, int i) { return (0x0F0F0F0F0F0F0F0Full << ((i + 3 * r) % 8)) | (r ? 1ull << 63 : 1ull); }
static float f_value(int r, int i, int nd) { return (float)(1000 * (r + 1) + 64 * i + nd); }
static int f_fail_masks, f_fail_async;
static float f_nodes[NB][64]; /* what unpack_add_nodes added */
static int f_node_masks(void *st, const int32_t *idx, size_t n, uint64_t *out) {
  fake *f = st;
  if (f_fail_masks) return dr_fail(DR_ECUDA, "fake node_masks failure on rank %d", f->rank);
  for (size_t k = 0; k < n; ++k) out[k] = f_mask_of(f->rank, idx[k]);
  return DR_OK;
}
static int f_node_masks_async(void *st, int slot, const int32_t *idx, size_t n) {
  fake *f = st;
  ++f_async_calls;
  if (f_fail_async) return dr_fail(DR_ECUDA, "fake node_masks_async failure on rank %d", f->rank);
  if (slot < 0 || slot >= 4 || n * sizeof(uint64_t) > sizeof f_slot[0]) return dr_fail(DR_EINTERNAL, "fake: slot %d", slot);
  return f_node_masks(st, idx, n, (uint64_t *)f_slot[slot]);
}
static int f_node_masks_wait(void *st, int slot, uint64_t *out) {
  (void)st;
  ++f_wait_calls;
  memcpy(out, f_slot[slot], NB * sizeof(uint64_t));
  return DR_OK;
}
static int f_pack_nodes(void *st, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base, void *out) {
  fake *f = st;
  if (f->fail_pack) return dr_fail(DR_ECUDA, "fake pack failure on rank %d", f->rank);
  for (size_t k = 0; k < n; ++k)
    for (int nd = 0, r = 0; nd < 64; ++nd)
      if ((mask[k] >> nd) & 1u) ((float *)out)[base[k] + (uint32_t)r++] = f_value(f->rank, idx[k], nd);
  return DR_OK;
}
static int f_unpack_add_nodes(void *st, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
                              const void *in) {
  (void)st;
  for (size_t k = 0; k < n; ++k)
    for (int nd = 0, r = 0; nd < 64; ++nd)
      if ((mask[k] >> nd) & 1u) f_nodes[idx[k]][nd] += ((const float *)in)[base[k] + (uint32_t)r++];
  return DR_OK;
}
/* After a node step: the other rank's value where both masks mark the node (all: 0 everywhere). */
static int got_nodes(int rank, int all, const char *what) {
  int ok = 1;
  for (int i = 0; i < NB; ++i)
    for (int nd = 0; nd < 64; ++nd) {
      const int both = all && ((f_mask_of(0, i) & f_mask_of(1, i)) >> nd) & 1u;
      const float want = both ? f_value(1 - rank, i, nd) : 0.0f;
      if (f_nodes[i][nd] != want) {
        fprintf(stderr, "rank %d: %s: block %d node %d got %g, expected %g\n", rank, what, i, nd, f_nodes[i][nd], want);
        return 0;
      }
    }
  return ok;
}

static int f_blocks(void *st, const uint64_t **codes, size_t *n) {
  fake *f = st;
  *codes = f->codes;
  *n = NB;
  return DR_OK;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks, bad = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  if (nranks != 2) {
    if (rank == 0) fprintf(stderr, "test_exchange: run on 2 ranks\n");
    MPI_Finalize();
    return 77;
  }
  fake f;
  memset(&f, 0, sizeof f);
  f.rank = rank;
  for (int i = 0; i < NB; ++i) f.codes[i] = (uint64_t)i; /* the same 8 blocks on both ranks: all shared */
  backend b;
  memset(&b, 0, sizeof b);
  b.name = "fake";
  b.state = &f;
  b.blocks = f_blocks;
  b.block_sums = 64;
  exchange x;
  memset(&x, 0, sizeof x);
  int rs, rf;
  /* 1. a backend without the node exchange is refused, naming it */
  if (exchange_setup(&x, MPI_COMM_WORLD, &b) != DR_EINTERNAL || strstr(dr_message(), "no node exchange") == NULL) {
    fprintf(stderr, "rank %d: exchange_setup without the node exchange: %s\n", rank, dr_message());
    bad = 1;
  }
  dr_clear();
  /* 2. one channel of 64 nodes a block; each rank adds the other's values of the nodes both masks
   *    mark, and sends its masks and its values of those nodes */
  b.node_masks = f_node_masks;
  b.pack_nodes = f_pack_nodes;
  b.unpack_add_nodes = f_unpack_add_nodes;
  if (exchange_setup(&x, MPI_COMM_WORLD, &b) != DR_OK || x.nlinks != 1 || x.n_shared != NB) {
    fprintf(stderr, "rank %d: exchange_setup: %s (links %d, shared %zu)\n", rank, dr_message(), x.nlinks, x.n_shared);
    bad = 1;
  }
  size_t both = 0;
  for (int i = 0; i < NB; ++i) both += (size_t)__builtin_popcountll(f_mask_of(0, i) & f_mask_of(1, i));
  memset(f_nodes, 0, sizeof f_nodes);
  const double nsent0 = x.bytes_sent;
  if (exchange_pack(&x, &b) != 0) fprintf(stderr, "rank %d: exchange_pack queued without node_masks_async\n", rank), bad = 1;
  rs = exchange_start(&x, &b);
  rf = exchange_finish(&x, &b);
  if (rs || rf || x.bytes_sent - nsent0 != (double)(NB * sizeof(uint64_t) + both * sizeof(float))) {
    fprintf(stderr, "rank %d: node step: start %d, finish %d, sent %g (expected %zu)\n", rank, rs, rf,
            x.bytes_sent - nsent0, NB * sizeof(uint64_t) + both * sizeof(float));
    bad = 1;
  }
  bad |= !got_nodes(rank, 1, "nodes");
  /* 3. node_masks fails on rank 1, then 4. pack_nodes: both ranks return, rank 1 with the error,
   *    and rank 0 adds nothing */
  for (int what = 0; what < 2; ++what) {
    f_fail_masks = what == 0 && rank == 1;
    f.fail_pack = what == 1 && rank == 1;
    memset(f_nodes, 0, sizeof f_nodes);
    rs = exchange_start(&x, &b);
    rf = exchange_finish(&x, &b);
    const char *step = what ? "a failed pack_nodes" : "a failed node_masks";
    if (rank == 1 && (rf != DR_ECUDA || (what == 0 && rs != DR_ECUDA)))
      fprintf(stderr, "rank 1: %s: start %d, finish %d\n", step, rs, rf), bad = 1;
    if (rank == 0 && (rs || rf)) fprintf(stderr, "rank 0: after rank 1's %s: start %d, finish %d\n", step, rs, rf), bad = 1;
    if (rank == 0) bad |= !got_nodes(rank, 0, step);
  }
  f_fail_masks = 0;
  f.fail_pack = 0;
  /* 5. the exchange works again after the failures */
  memset(f_nodes, 0, sizeof f_nodes);
  rs = exchange_start(&x, &b);
  rf = exchange_finish(&x, &b);
  if (rs || rf) fprintf(stderr, "rank %d: the step after the failures: start %d, finish %d\n", rank, rs, rf), bad = 1;
  bad |= !got_nodes(rank, 1, "nodes after the failures");
  /* 6. the masks in two halves (exchange_pack queues them): the same sums */
  b.node_masks_async = f_node_masks_async;
  b.node_masks_wait = f_node_masks_wait;
  f_async_calls = f_wait_calls = 0;
  memset(f_nodes, 0, sizeof f_nodes);
  const int nq = exchange_pack(&x, &b);
  rs = exchange_start(&x, &b);
  rf = exchange_finish(&x, &b);
  if (!nq || rs || rf || f_async_calls != 1 || f_wait_calls != 1)
    fprintf(stderr, "rank %d: node masks in two halves: queued %d, start %d, finish %d, async %d, wait %d\n", rank, nq, rs,
            rf, f_async_calls, f_wait_calls), bad = 1;
  bad |= !got_nodes(rank, 1, "nodes in two halves");
  /* 7. the async half fails on rank 1: exchange_start still posts (empty masks), rank 1 gets the
   *    failure back from both calls, and rank 0 adds nothing */
  f_fail_async = rank == 1;
  memset(f_nodes, 0, sizeof f_nodes);
  exchange_pack(&x, &b);
  rs = exchange_start(&x, &b);
  rf = exchange_finish(&x, &b);
  if (rank == 1 && (rs != DR_ECUDA || rf != DR_ECUDA)) fprintf(stderr, "rank 1: failed async masks: %d %d\n", rs, rf), bad = 1;
  if (rank == 0 && (rs || rf)) fprintf(stderr, "rank 0: after rank 1's failed async masks: start %d, finish %d\n", rs, rf), bad = 1;
  if (rank == 0) bad |= !got_nodes(rank, 0, "a failed node_masks_async");
  f_fail_async = 0;
  exchange_destroy(&x);
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("test_exchange: %s\n", any ? "FAILED" : "all checks passed");
  MPI_Finalize();
  return any ? 1 : 0;
}
