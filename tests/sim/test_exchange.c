/* test_exchange.c - the rank exchange (mpi/exchange.c) on two ranks with a fake backend: the
 * sums of the shared blocks cross, and a pack that fails on one rank (as a CUDA fault surfacing at
 * pack's sync does, issue #8) leaves no neighbour waiting: exchange_start still posts the
 * messages, both exchange_finish calls return, and the failing rank gets its error back. */
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
} fake;

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
  exchange_destroy(&x);
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("test_exchange: %s\n", any ? "FAILED" : "all checks passed");
  MPI_Finalize();
  return any ? 1 : 0;
}
