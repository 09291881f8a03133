/* decomp.c - recursive coordinate bisection on block counts (see decomp.h). */
#include "decomp.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "physics/sparse.h"

#define HIST_FREE UINT64_MAX

static size_t hist_slot(uint64_t code, size_t cap) {
  uint64_t z = code * 0x9e3779b97f4a7c15ULL;
  return (size_t)(z ^ (z >> 29)) & (cap - 1);
}

int hist_add(block_hist *h, uint64_t code, uint64_t count) {
  if (2 * (h->n + 1) > h->cap) { /* grow to keep the load under one half */
    size_t cap = h->cap ? 2 * h->cap : 1024;
    uint64_t *code2 = malloc(cap * sizeof *code2), *count2 = malloc(cap * sizeof *count2);
    if (!code2 || !count2) {
      free(code2), free(count2);
      return dr_fail(DR_ENOMEM, "out of host memory for the block histogram (%zu blocks)", h->n);
    }
    for (size_t i = 0; i < cap; ++i) code2[i] = HIST_FREE;
    for (size_t i = 0; i < h->cap; ++i)
      if (h->code[i] != HIST_FREE) {
        size_t j = hist_slot(h->code[i], cap);
        while (code2[j] != HIST_FREE) j = (j + 1) & (cap - 1);
        code2[j] = h->code[i];
        count2[j] = h->count[i];
      }
    free(h->code), free(h->count);
    h->code = code2, h->count = count2, h->cap = cap;
  }
  size_t j = hist_slot(code, h->cap);
  while (h->code[j] != HIST_FREE && h->code[j] != code) j = (j + 1) & (h->cap - 1);
  if (h->code[j] == HIST_FREE) {
    h->code[j] = code;
    h->count[j] = 0;
    ++h->n;
  }
  h->count[j] += count;
  return DR_OK;
}

void hist_free(block_hist *h) {
  free(h->code), free(h->count);
  memset(h, 0, sizeof *h);
}

typedef struct item {
  int32_t c[3];
  uint64_t count;
} item;

static int sort_axis;
static int cmp_item(const void *a, const void *b) {
  const item *x = a, *y = b;
  for (int k = 0; k < 3; ++k) { /* the cut axis first, then the others: a total order */
    int ax = (sort_axis + k) % 3;
    if (x->c[ax] != y->c[ax]) return x->c[ax] < y->c[ax] ? -1 : 1;
  }
  return 0;
}

/* The cut along axis of items[0..n) (coordinates in [bmin, bmax)): the block boundary c, among
 * the coordinates some item has, strictly inside (bmin, bmax), whose count below is nearest to
 * want (the lowest such c on a tie); *found = 0 where there is none (one column of blocks). Where
 * empty columns lie below that c, every boundary among them leaves the same counts: the cut moves
 * to the middle of the gap (mid_gap), as far from the material on either side as it can be, so
 * that two piles apart take longest to reach it (and to migrate, and to share blocks). By a count
 * per coordinate along the axis, O(n + range), where the range is at most 4 n; else by sorting,
 * O(n log n). Either way the same cut, and independent of the items' order. */
/* The block boundary in the middle of the empty columns [last + 1, c) below the occupied column c
 * (last: the occupied column before it), rounded up: a boundary there leaves what c leaves. */
static int32_t mid_gap(int32_t last, int32_t c) { return c - (c - (last + 1)) / 2; }

static int32_t best_cut(item *items, size_t n, int axis, int32_t bmin, int32_t bmax, double want, int *found) {
  *found = 0;
  int32_t cut = bmin, last = bmin; /* last: the occupied column before the one looked at */
  double best = -1;
  const size_t range = (size_t)(bmax - bmin);
  uint64_t *per = range <= 4 * n + 64 ? calloc(range ? range : 1, sizeof *per) : NULL;
  unsigned char *some = per ? calloc(range ? range : 1, 1) : NULL; /* an item has this coordinate */
  if (per && some) {
    for (size_t i = 0; i < n; ++i) {
      const size_t k = (size_t)(items[i].c[axis] - bmin);
      per[k] += items[i].count;
      some[k] = 1;
    }
    uint64_t below = 0;
    for (size_t k = 0; k < range; ++k) {
      if (!some[k]) continue;
      const int32_t c = bmin + (int32_t)k;
      if (c > bmin) {
        const double err = (double)below > want ? (double)below - want : want - (double)below;
        if (best < 0 || err < best) best = err, cut = mid_gap(last, c);
      }
      below += per[k];
      last = c;
    }
  } else { /* a huge, sparse range (or no memory for the counts): sort */
    sort_axis = axis;
    qsort(items, n, sizeof *items, cmp_item);
    uint64_t below = 0;
    for (size_t i = 0; i < n; ++i) {
      if (i == 0 || items[i].c[axis] != items[i - 1].c[axis]) {
        const int32_t c = items[i].c[axis];
        if (c > bmin) {
          const double err = (double)below > want ? (double)below - want : want - (double)below;
          if (best < 0 || err < best) best = err, cut = mid_gap(last, c);
        }
        last = c;
      }
      below += items[i].count;
    }
  }
  free(per);
  free(some);
  *found = best >= 0;
  return cut;
}

/* Assigns ranks [r0, r0 + nr) to the box lo..hi holding items[0..n). */
static void bisect(item *items, size_t n, int r0, int nr, const int32_t lo[3], const int32_t hi[3], decomp *d) {
  if (nr == 1) {
    for (int a = 0; a < 3; ++a) d->box[r0][a] = lo[a], d->box[r0][3 + a] = hi[a];
    return;
  }
  int32_t bmin[3], bmax[3];
  uint64_t total = 0;
  for (int a = 0; a < 3; ++a) bmin[a] = hi[a], bmax[a] = lo[a];
  for (size_t i = 0; i < n; ++i) {
    total += items[i].count;
    for (int a = 0; a < 3; ++a) {
      if (items[i].c[a] < bmin[a]) bmin[a] = items[i].c[a];
      if (items[i].c[a] + 1 > bmax[a]) bmax[a] = items[i].c[a] + 1;
    }
  }
  int axis = 0;
  if (n == 0) { /* no particles: cut the box itself in the middle of its longest axis */
    for (int a = 0; a < 3; ++a) bmin[a] = lo[a], bmax[a] = hi[a];
  }
  for (int a = 1; a < 3; ++a)
    if (bmax[a] - bmin[a] > bmax[axis] - bmin[axis]) axis = a;
  const int n1 = nr / 2;
  const double want = (double)total * n1 / nr;
  /* the cut: a block boundary c in (bmin, bmax); items with c[axis] < c go left (one column of
   * blocks: the cut stays mid-axis, and the counts decide nothing) */
  int found = 0;
  int32_t cut = n > 0 ? best_cut(items, n, axis, bmin[axis], bmax[axis], want, &found) : 0;
  if (!found) cut = bmin[axis] + (bmax[axis] - bmin[axis]) / 2;
  size_t split = 0; /* partition: the items left of the cut first */
  for (size_t i = 0; i < n; ++i)
    if (items[i].c[axis] < cut) {
      const item t = items[i];
      items[i] = items[split];
      items[split++] = t;
    }
  int32_t hi1[3], lo2[3];
  memcpy(hi1, hi, sizeof hi1);
  memcpy(lo2, lo, sizeof lo2);
  hi1[axis] = cut;
  lo2[axis] = cut;
  bisect(items, split, r0, n1, lo, hi1, d);
  bisect(items + split, n - split, r0 + n1, nr - n1, lo2, hi, d);
}

/* The boxes of items[0..n) (taken over and freed) among nranks. */
static int rcb_items(item *items, size_t n, int nranks, decomp *out) {
  out->nranks = nranks;
  out->box = malloc(sizeof *out->box * (size_t)nranks);
  if (!out->box || !items) {
    free(items);
    free(out->box);
    out->box = NULL;
    return dr_fail(DR_ENOMEM, "out of host memory for the decomposition");
  }
  /* (no order needed: each cut depends on the counts per coordinate alone) */
  const int32_t lo[3] = {0, 0, 0}, hi[3] = {1 << BLOCK_CODE_BITS, 1 << BLOCK_CODE_BITS, 1 << BLOCK_CODE_BITS};
  bisect(items, n, 0, nranks, lo, hi, out);
  free(items);
  return DR_OK;
}

static item item_of(uint64_t code, uint64_t count) {
  int c[3];
  sparse_block_coords(code, c);
  return (item){{c[0], c[1], c[2]}, count};
}

int decomp_rcb(const block_hist *h, int nranks, decomp *out) {
  item *items = malloc(sizeof *items * (h->n ? h->n : 1));
  size_t n = 0;
  for (size_t i = 0; items && i < h->cap; ++i)
    if (h->code[i] != HIST_FREE) items[n++] = item_of(h->code[i], h->count[i]);
  return rcb_items(items, n, nranks, out);
}

int decomp_rcb_pairs(const uint64_t *pairs, size_t n, int nranks, decomp *out) {
  item *items = malloc(sizeof *items * (n ? n : 1));
  for (size_t i = 0; items && i < n; ++i) items[i] = item_of(pairs[2 * i], pairs[2 * i + 1]);
  return rcb_items(items, n, nranks, out);
}

int decomp_owner(const decomp *d, const int32_t blk[3]) {
  for (int r = 0; r < d->nranks; ++r) {
    const int32_t *b = d->box[r];
    if (blk[0] >= b[0] && blk[0] < b[3] && blk[1] >= b[1] && blk[1] < b[4] && blk[2] >= b[2] && blk[2] < b[5])
      return r;
  }
  return 0; /* unreachable: the boxes tile the block range */
}

void decomp_free(decomp *d) {
  free(d->box);
  d->box = NULL;
}
