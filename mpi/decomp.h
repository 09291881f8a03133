/* decomp.h - spatial subdomains of the ranks (docs/architecture.md): recursive coordinate
 * bisection on particle counts gives every rank a box of whole grid blocks. Boxes tile the
 * whole block range, so every position has exactly one owner. Block coordinates are those of
 * physics/sparse.h (block I holds nodes 4I..4I+3; a particle belongs to the block of its base
 * node, i.e. its particle block). */
#ifndef DRIFT_DECOMP_H
#define DRIFT_DECOMP_H

#include <stddef.h>
#include <stdint.h>

/* Particle counts per block: a growable hash map from block code to count. */
typedef struct block_hist {
  size_t cap, n;
  uint64_t *code; /* UINT64_MAX where free */
  uint64_t *count;
} block_hist;

int hist_add(block_hist *h, uint64_t code, uint64_t count);
void hist_free(block_hist *h);

typedef struct decomp {
  int nranks;
  int32_t (*box)[6]; /* per rank: lo[3], hi[3] in blocks, half-open */
} decomp;

/* Cuts the blocks of h among nranks: at each level the longest axis of the counted blocks'
 * bounding box is cut at the block boundary that splits the counts nearest to the share of
 * each half (ranks split as evenly as the halves' rank counts). Deterministic: every rank that
 * calls it with the same histogram gets the same boxes. Allocates out->box. */
int decomp_rcb(const block_hist *h, int nranks, decomp *out);
/* The same cuts from (code, count) pairs, pairs[2k] a block code and pairs[2k + 1] its count, n
 * pairs: a block may come several times (every rank's count of a block it shares), and its
 * counts add, since each cut depends on the counts per coordinate alone. Saves merging the
 * ranks' histograms into one (sim.c's load balance). */
int decomp_rcb_pairs(const uint64_t *pairs, size_t n, int nranks, decomp *out);
/* The rank whose box holds block (i, j, k). */
int decomp_owner(const decomp *d, const int32_t blk[3]);
void decomp_free(decomp *d);

#endif
