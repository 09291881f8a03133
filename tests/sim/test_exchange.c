/* test_exchange.c - the rank exchange (mpi/exchange.c) on two ranks with a fake backend: the
 * sums of the shared blocks cross, and a pack that fails on one rank (as a CUDA fault surfacing at
 * pack's sync does, issue #8) leaves no neighbour waiting: exchange_start still posts the
 * messages, both exchange_finish calls return, and the failing rank gets its error back. Then the
 * same with the sparse exchange (a backend with pack_sparse): only the blocks a rank marks
 * travel, the receiver is handed the message's exact length, bytes_sent counts what was sent, and
 * after a failed pack the neighbour receives an empty mask and adds nothing; and the same again
 * with the pack in two halves (exchange_pack, pack_sparse_async and pack_sparse_wait). Then the
 * node exchange (a backend with node_masks, pack_nodes and unpack_add_nodes): each rank is handed
 * the AND of both ranks' masks and adds the other's values of exactly those nodes, bytes_sent
 * counts the masks and the values; where node_masks or pack_nodes fails on one rank, both ranks
 * return, the failing one with its error, and the other adds nothing; and the masks in two halves
 * (node_masks_async and node_masks_wait through exchange_pack). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "exchange.h"

#define NB 8

typedef struct fake {
  int rank;
  int fail_pack;     /* pack fails (and writes nothing) */
  float got[NB];     /* what unpack_add added, by block index */
  uint64_t codes[NB];
  size_t got_bytes;  /* the length unpack_add_sparse was handed */
} fake;

/* sparse: rank r touches the blocks i with (i + r) % 3 != 0 */
static int touches(int rank, int i) { return (i + rank) % 3 != 0; }

static int f_pack_sparse(void *st, const int32_t *idx, size_t n, void *out, size_t *bytes) {
  fake *f = st;
  if (f->fail_pack) return dr_fail(DR_ECUDA, "fake pack failure on rank %d", f->rank);
  uint64_t *mask = out;
  float *v = (float *)((char *)out + SPARSE_MASK_BYTES(n));
  size_t m = 0;
  memset(mask, 0, SPARSE_MASK_BYTES(n));
  for (size_t k = 0; k < n; ++k)
    if (touches(f->rank, idx[k])) mask[k / 64] |= 1ull << (k % 64), v[m++] = (float)(100 * (f->rank + 1) + idx[k]);
  *bytes = SPARSE_MASK_BYTES(n) + m * sizeof(float);
  return DR_OK;
}

/* pack_sparse in two halves (backend.h): the async half packs into the slot, the wait hands it over */
static char f_slot[4][256];
static size_t f_slot_bytes[4];
static int f_async_calls, f_wait_calls;
static int f_pack_sparse_async(void *st, int slot, const int32_t *idx, size_t n) {
  ++f_async_calls;
  if (slot < 0 || slot >= 4) return dr_fail(DR_EINTERNAL, "fake: slot %d", slot);
  return f_pack_sparse(st, idx, n, f_slot[slot], &f_slot_bytes[slot]);
}
static int f_pack_sparse_wait(void *st, int slot, void *out, size_t *bytes) {
  (void)st;
  ++f_wait_calls;
  memcpy(out, f_slot[slot], f_slot_bytes[slot]);
  *bytes = f_slot_bytes[slot];
  return DR_OK;
}

static int f_unpack_add_sparse(void *st, const int32_t *idx, size_t n, const void *in, size_t bytes) {
  fake *f = st;
  const uint64_t *mask = in;
  const float *v = (const float *)((const char *)in + SPARSE_MASK_BYTES(n));
  f->got_bytes = bytes;
  size_t m = 0;
  for (size_t k = 0; k < n; ++k)
    if ((mask[k / 64] >> (k % 64)) & 1u) f->got[idx[k]] += v[m++];
  return bytes == SPARSE_MASK_BYTES(n) + m * sizeof(float) ? DR_OK : dr_fail(DR_EINTERNAL, "fake: bad length");
}

/* After a sparse step: each block holds the other rank's sum where that rank touched it, else 0. */
static int got_marked(const fake *f, int rank, const char *what) {
  int ok = 1;
  for (int i = 0; i < NB; ++i) {
    const float want = touches(1 - rank, i) ? (float)(100 * (2 - rank) + i) : 0.0f;
    if (f->got[i] != want) fprintf(stderr, "rank %d: %s: block %d got %g, expected %g\n", rank, what, i, f->got[i], want), ok = 0;
  }
  return ok;
}

/* The node exchange: rank r's mask of block i, and its value at node nd (one channel). */
static uint64_t f_mask_of(int r, int i) { return (0x0F0F0F0F0F0F0F0Full << ((i + 3 * r) % 8)) | (r ? 1ull << 63 : 1ull); }
static float f_value(int r, int i, int nd) { return (float)(1000 * (r + 1) + 64 * i + nd); }
static int f_fail_masks;
static float f_nodes[NB][64]; /* what unpack_add_nodes added */
static int f_node_masks(void *st, const int32_t *idx, size_t n, uint64_t *out) {
  fake *f = st;
  if (f_fail_masks) return dr_fail(DR_ECUDA, "fake node_masks failure on rank %d", f->rank);
  for (size_t k = 0; k < n; ++k) out[k] = f_mask_of(f->rank, idx[k]);
  return DR_OK;
}
static int f_node_masks_async(void *st, int slot, const int32_t *idx, size_t n) {
  ++f_async_calls;
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

static int f_pack(void *st, const int32_t *idx, size_t n, void *out) {
  fake *f = st;
  if (f->fail_pack) return dr_fail(DR_ECUDA, "fake pack failure on rank %d", f->rank);
  for (size_t k = 0; k < n; ++k) ((float *)out)[k] = (float)(100 * (f->rank + 1) + idx[k]);
  return DR_OK;
}

static int f_unpack_add(void *st, const int32_t *idx, size_t n, const void *in) {
  fake *f = st;
  for (size_t k = 0; k < n; ++k) f->got[idx[k]] += ((const float *)in)[k];
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
  b.block_sums = 1;
  b.pack = f_pack;
  b.unpack_add = f_unpack_add;
  exchange x;
  memset(&x, 0, sizeof x);
  if (exchange_setup(&x, MPI_COMM_WORLD, &b) != DR_OK || x.nlinks != 1 || x.n_shared != NB) {
    fprintf(stderr, "rank %d: exchange_setup: %s (links %d, shared %zu)\n", rank, dr_message(), x.nlinks, x.n_shared);
    bad = 1;
  }
  /* 1. a normal step: each rank adds the other's sums */
  int rs = exchange_start(&x, &b), rf = exchange_finish(&x, &b);
  for (int i = 0; i < NB && !bad; ++i)
    if (rs || rf || f.got[i] != (float)(100 * (2 - rank) + i)) {
      fprintf(stderr, "rank %d: block %d got %g (start %d, finish %d)\n", rank, i, f.got[i], rs, rf);
      bad = 1;
    }
  /* 2. pack fails on rank 1: both ranks return (this step would hang rank 0 if rank 1 posted
   *    nothing), rank 1 with the pack's error, and rank 1 adds nothing */
  f.fail_pack = rank == 1;
  memset(f.got, 0, sizeof f.got);
  rs = exchange_start(&x, &b);
  rf = exchange_finish(&x, &b);
  if (rank == 1 && (rs != DR_ECUDA || rf != DR_ECUDA || strstr(dr_message(), "fake pack failure") == NULL)) {
    fprintf(stderr, "rank 1: a failed pack gave start %d, finish %d (%s)\n", rs, rf, dr_message());
    bad = 1;
  }
  if (rank == 1 && f.got[0] != 0.0f) fprintf(stderr, "rank 1: added sums after a failed pack\n"), bad = 1;
  if (rank == 0 && (rs || rf)) fprintf(stderr, "rank 0: start %d, finish %d\n", rs, rf), bad = 1;
  /* 3. and the exchange still works afterwards */
  f.fail_pack = 0;
  memset(f.got, 0, sizeof f.got);
  rs = exchange_start(&x, &b);
  rf = exchange_finish(&x, &b);
  if (rs || rf || f.got[NB - 1] != (float)(100 * (2 - rank) + NB - 1)) {
    fprintf(stderr, "rank %d: the step after a failed pack: start %d, finish %d, got %g\n", rank, rs, rf, f.got[NB - 1]);
    bad = 1;
  }
  /* 4. sparse: each rank adds the other's marked blocks only, and is handed the message's length */
  b.pack_sparse = f_pack_sparse;
  b.unpack_add_sparse = f_unpack_add_sparse;
  if (exchange_setup(&x, MPI_COMM_WORLD, &b) != DR_OK || !x.sparse) {
    fprintf(stderr, "rank %d: sparse exchange_setup: %s (sparse %d)\n", rank, dr_message(), x.sparse);
    bad = 1;
  }
  size_t mine = 0, theirs = 0;
  for (int i = 0; i < NB; ++i) mine += touches(rank, i), theirs += touches(1 - rank, i);
  memset(f.got, 0, sizeof f.got);
  const double sent0 = x.bytes_sent;
  rs = exchange_start(&x, &b);
  rf = exchange_finish(&x, &b);
  if (rs || rf || f.got_bytes != SPARSE_MASK_BYTES(NB) + theirs * sizeof(float) ||
      x.bytes_sent - sent0 != (double)(SPARSE_MASK_BYTES(NB) + mine * sizeof(float))) {
    fprintf(stderr, "rank %d: sparse step: start %d, finish %d, handed %zu bytes, sent %g\n", rank, rs, rf, f.got_bytes,
            x.bytes_sent - sent0);
    bad = 1;
  }
  bad |= !got_marked(&f, rank, "sparse");
  /* 5. sparse, pack fails on rank 1: rank 0 is handed an empty mask and adds nothing */
  f.fail_pack = rank == 1;
  memset(f.got, 0, sizeof f.got);
  f.got_bytes = 0;
  rs = exchange_start(&x, &b);
  rf = exchange_finish(&x, &b);
  if (rank == 1 && (rs != DR_ECUDA || rf != DR_ECUDA)) fprintf(stderr, "rank 1: sparse failed pack: %d %d\n", rs, rf), bad = 1;
  if (rank == 0) {
    float sum = 0;
    for (int i = 0; i < NB; ++i) sum += f.got[i];
    if (rs || rf || f.got_bytes != SPARSE_MASK_BYTES(NB) || sum != 0.0f) {
      fprintf(stderr, "rank 0: after rank 1's failed sparse pack: start %d, finish %d, handed %zu bytes, added %g\n", rs,
              rf, f.got_bytes, sum);
      bad = 1;
    }
  }
  f.fail_pack = 0;
  /* 6. sparse in two halves (exchange_pack, then exchange_start): the same sums, through the
   *    backend's async and wait; a backend without them: exchange_pack queues nothing */
  if (exchange_pack(&x, &b) != 0) fprintf(stderr, "rank %d: exchange_pack queued without pack_sparse_async\n", rank), bad = 1;
  exchange_start(&x, &b), exchange_finish(&x, &b); /* (that step's messages, to keep the ranks in step) */
  b.pack_sparse_async = f_pack_sparse_async;
  b.pack_sparse_wait = f_pack_sparse_wait;
  memset(f.got, 0, sizeof f.got);
  const int queued = exchange_pack(&x, &b);
  rs = exchange_start(&x, &b);
  rf = exchange_finish(&x, &b);
  if (!queued || rs || rf || f_async_calls != 1 || f_wait_calls != 1 ||
      f.got_bytes != SPARSE_MASK_BYTES(NB) + theirs * sizeof(float)) {
    fprintf(stderr, "rank %d: two halves: queued %d, start %d, finish %d, async %d, wait %d, handed %zu bytes\n", rank,
            queued, rs, rf, f_async_calls, f_wait_calls, f.got_bytes);
    bad = 1;
  }
  bad |= !got_marked(&f, rank, "two halves");
  /* 7. the async half fails on rank 1: exchange_start still posts (rank 0 is handed an empty
   *    mask), and rank 1 gets the failure back from both calls */
  f.fail_pack = rank == 1;
  memset(f.got, 0, sizeof f.got);
  f.got_bytes = 0;
  exchange_pack(&x, &b);
  rs = exchange_start(&x, &b);
  rf = exchange_finish(&x, &b);
  if (rank == 1 && (rs != DR_ECUDA || rf != DR_ECUDA)) fprintf(stderr, "rank 1: failed async pack: %d %d\n", rs, rf), bad = 1;
  if (rank == 0 && (rs || rf || f.got_bytes != SPARSE_MASK_BYTES(NB)))
    fprintf(stderr, "rank 0: after rank 1's failed async pack: start %d, finish %d, handed %zu\n", rs, rf, f.got_bytes), bad = 1;
  f.fail_pack = 0;
  /* 8. the node exchange: one channel of 64 nodes a block; each rank adds the other's values of
   *    the nodes both masks mark, and sends its masks and its values of those nodes */
  b.block_sums = 64;
  b.node_masks = f_node_masks;
  b.pack_nodes = f_pack_nodes;
  b.unpack_add_nodes = f_unpack_add_nodes;
  if (exchange_setup(&x, MPI_COMM_WORLD, &b) != DR_OK || !x.nodes) {
    fprintf(stderr, "rank %d: node exchange_setup: %s (nodes %d)\n", rank, dr_message(), x.nodes);
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
  /* 9. node_masks fails on rank 1, then 10. pack_nodes: both ranks return, rank 1 with the error,
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
  /* 11. the masks in two halves (exchange_pack queues them): the same sums */
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
  exchange_destroy(&x);
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("test_exchange: %s\n", any ? "FAILED" : "all checks passed");
  MPI_Finalize();
  return any ? 1 : 0;
}
