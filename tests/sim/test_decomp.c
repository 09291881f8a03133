/* test_decomp - mpi/decomp.c's recursive coordinate bisection against a brute-force oracle.
 *
 * Random histograms of block counts (a fixed seed; dense clouds, thin slabs, a single column, and
 * a few blocks far apart, whose coordinate range is far larger than their number, so that the cut
 * is searched by sorting instead of by counts per coordinate), cut among 1 to 9 ranks. Expected:
 *   - the boxes tile the block range: every counted block lies in exactly one box, and
 *     decomp_owner names that box's rank;
 *   - the first cut is the best one: along the longest axis of the counted blocks' bounding box
 *     (the first such axis on a tie), the count left of it is as near to the left half's share
 *     (total x floor(n / 2) / n) as at any block boundary that some block starts at, strictly
 *     inside the bounding box, found by trying every one;
 *   - the same counts inserted in another order (another hash-table layout) give the same boxes,
 *     and so do the same counts as (code, count) pairs with every block split in two entries, not
 *     merged (decomp_rcb_pairs, the load balance's path);
 *   - two piles with empty columns between them are cut in the middle of the gap (both searches:
 *     counts per coordinate, and sorting where the piles lie far apart), not at the edge of one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decomp.h"
#include "physics/sparse.h"

#include "check.h"

typedef struct blk {
  int c[3];
  uint64_t count;
} blk;

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* n distinct blocks of the kind asked for */
static size_t make(int kind, blk *b, size_t n) {
  size_t m = 0;
  for (size_t t = 0; m < n && t < 100 * n; ++t) {
    int c[3];
    switch (kind) {
    case 0: for (int a = 0; a < 3; ++a) c[a] = 100 + (int)(next() % 40); break;           /* a cloud */
    case 1: c[0] = 50 + (int)(next() % 200), c[1] = 7, c[2] = 20 + (int)(next() % 60); break; /* a slab */
    case 2: c[0] = 3, c[1] = 4, c[2] = 10 + (int)(next() % 500); break;                 /* one column */
    default: for (int a = 0; a < 3; ++a) c[a] = (int)(next() % 2000000); break;          /* far apart */
    }
    int dup = 0;
    for (size_t k = 0; k < m && !dup; ++k) dup = !memcmp(b[k].c, c, sizeof c);
    if (dup) continue;
    memcpy(b[m].c, c, sizeof c);
    b[m].count = kind == 2 && m == 0 ? 0 : 1 + next() % 1000; /* (a block counted with nothing in it) */
    ++m;
  }
  return m;
}

static int inside(const int32_t *box, const int c[3]) {
  return c[0] >= box[0] && c[0] < box[3] && c[1] >= box[1] && c[1] < box[4] && c[2] >= box[2] && c[2] < box[5];
}

/* the oracle of the first cut: the least |left - want| over every candidate boundary */
static double best_error(const blk *b, size_t n, int nranks, int *axis_out) {
  int lo[3] = {INT32_MAX, INT32_MAX, INT32_MAX}, hi[3] = {INT32_MIN, INT32_MIN, INT32_MIN};
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    total += b[i].count;
    for (int a = 0; a < 3; ++a) {
      if (b[i].c[a] < lo[a]) lo[a] = b[i].c[a];
      if (b[i].c[a] + 1 > hi[a]) hi[a] = b[i].c[a] + 1;
    }
  }
  int axis = 0;
  for (int a = 1; a < 3; ++a)
    if (hi[a] - lo[a] > hi[axis] - lo[axis]) axis = a;
  *axis_out = axis;
  const double want = (double)total * (nranks / 2) / nranks;
  double best = -1;
  for (size_t j = 0; j < n; ++j) {
    const int c = b[j].c[axis];
    if (c <= lo[axis]) continue;
    uint64_t left = 0;
    for (size_t i = 0; i < n; ++i) left += b[i].c[axis] < c ? b[i].count : 0;
    const double err = fabs((double)left - want);
    if (best < 0 || err < best) best = err;
  }
  return best;
}

int main(void) {
  static blk b[3000];
  int cases = 0;
  for (int kind = 0; kind < 4; ++kind)
    for (int round = 0; round < 3; ++round) {
      const size_t want_n = kind == 3 ? 12 : 300 + 900 * (size_t)round;
      const size_t n = make(kind, b, want_n);
      block_hist h = {0}, h2 = {0};
      for (size_t i = 0; i < n; ++i) hist_add(&h, sparse_block_code(b[i].c[0], b[i].c[1], b[i].c[2]), b[i].count);
      /* pairs (decomp_rcb_pairs, as the load balance gathers them): the other order, every
       * block twice (two ranks' counts of a block they share), not merged */
      uint64_t *pairs = malloc(sizeof *pairs * 4 * (n ? n : 1));
      size_t np = 0;
      for (size_t i = n; i-- > 0;) { /* the other order, in two adds each */
        const uint64_t code = sparse_block_code(b[i].c[0], b[i].c[1], b[i].c[2]);
        hist_add(&h2, code, b[i].count / 2);
        hist_add(&h2, code, b[i].count - b[i].count / 2);
        pairs[2 * np] = code, pairs[2 * np + 1] = b[i].count - b[i].count / 3, ++np;
        pairs[2 * np] = code, pairs[2 * np + 1] = b[i].count / 3, ++np;
      }
      for (int nr = 1; nr <= 9; ++nr, ++cases) {
        decomp d = {0}, d2 = {0}, d3 = {0};
        if (decomp_rcb(&h, nr, &d) || decomp_rcb(&h2, nr, &d2) || decomp_rcb_pairs(pairs, np, nr, &d3)) {
          CHECK(0, "kind %d: decomp_rcb failed", kind);
          continue;
        }
        CHECK(!memcmp(d.box, d2.box, sizeof *d.box * (size_t)nr), "kind %d, %d ranks: another insertion order gave other boxes", kind, nr);
        CHECK(!memcmp(d.box, d3.box, sizeof *d.box * (size_t)nr), "kind %d, %d ranks: the same counts as unmerged pairs gave other boxes", kind, nr);
        uint64_t *per = calloc((size_t)nr, sizeof *per);
        for (size_t i = 0; i < n; ++i) {
          int holders = 0, which = -1;
          for (int r = 0; r < nr; ++r)
            if (inside(d.box[r], b[i].c)) ++holders, which = r;
          CHECK(holders == 1, "kind %d, %d ranks: block (%d %d %d) lies in %d boxes", kind, nr, b[i].c[0], b[i].c[1], b[i].c[2], holders);
          CHECK(decomp_owner(&d, b[i].c) == which, "kind %d, %d ranks: decomp_owner disagrees with the boxes", kind, nr);
          if (which >= 0) per[which] += b[i].count;
        }
        if (nr >= 2) {
          int axis = 0;
          const double best = best_error(b, n, nr, &axis);
          /* the first cut: ranks [0, nr / 2) lie left of it */
          uint64_t left = 0;
          for (int r = 0; r < nr / 2; ++r) left += per[r];
          uint64_t total = 0;
          for (int r = 0; r < nr; ++r) total += per[r];
          const double want = (double)total * (nr / 2) / nr;
          if (best >= 0)
            CHECK(fabs(fabs((double)left - want) - best) < 1e-6, "kind %d, %d ranks: the first cut leaves %llu of %llu left (want %.1f), the best boundary %.1f off",
                  kind, nr, (unsigned long long)left, (unsigned long long)total, want, best);
          /* along that axis: the left ranks' boxes end at or before it, the right ones' start at or after */
          const int32_t cut = d.box[nr / 2][axis];
          int along = 1;
          for (int r = 0; r < nr; ++r) along &= r < nr / 2 ? d.box[r][3 + axis] <= cut : d.box[r][axis] >= cut;
          CHECK(along || best < 0, "kind %d, %d ranks: the first cut is not along axis %d", kind, nr, axis);
        }
        free(per);
        decomp_free(&d), decomp_free(&d2), decomp_free(&d3);
      }
      hist_free(&h), hist_free(&h2);
      free(pairs);
    }
  /* two piles of equal counts, columns [0, 10) and [g, g + 10) along x: the cut lies mid-gap, at the
   * boundary g - (g - 10) / 2 (columns 10 .. g - 1 empty); g = 30 is searched by counts, g = 4000
   * by sorting (a range far beyond 4 n) */
  const int gaps[2] = {30, 4000};
  for (int t = 0; t < 2; ++t, ++cases) {
    const int g = gaps[t];
    block_hist h = {0};
    for (int x = 0; x < 10; ++x)
      for (int z = 0; z < 3; ++z) {
        hist_add(&h, sparse_block_code(x, 0, z), 5);
        hist_add(&h, sparse_block_code(g + x, 0, z), 5);
      }
    decomp d = {0};
    if (decomp_rcb(&h, 2, &d)) {
      CHECK(0, "gap %d: decomp_rcb failed", g);
    } else {
      const int32_t want = g - (g - 10) / 2;
      CHECK(d.box[0][3] == want && d.box[1][0] == want, "two piles %d columns apart: cut at %d / %d, not mid-gap at %d", g - 10,
            d.box[0][3], d.box[1][0], want);
    }
    decomp_free(&d);
    hist_free(&h);
  }
  printf("test_decomp: %d cases, %s\n", cases, failures_ ? "FAILED" : "all checks passed");
  return failures_ ? 1 : 0;
}
