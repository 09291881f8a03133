/* test_block_codes - the block codes' addressing (src/physics/sparse.h) against plain arithmetic:
 *   - sparse_block_coords inverts sparse_block_code over the whole 21-bit range of every axis;
 *   - the masked bits of an axis (SPARSE_AXIS_MASK, sparse_axis_bits) order codes as their
 *     coordinates do, and a box test on masked bits selects exactly the codes whose decoded
 *     coordinates lie in the box (mpi/exchange.c's neighbour lists);
 *   - sparse_codes_box gives the box of the decoded coordinates, and an empty box for no codes. */
#include <stdlib.h>

#include "check.h"
#include "physics/sparse.h"

static int random_coord(check_rng *r) {
  /* small coordinates most of the time (a scene's blocks), the whole range sometimes */
  return (check_rng_u32(r) & 3) ? (int)(check_rng_u32(r) % 300) : (int)(check_rng_u32(r) & 0x1fffff);
}

int main(void) {
  check_rng rng = {12345};
  enum { N = 20000 };
  uint64_t *code = malloc(sizeof *code * N);
  int(*c)[3] = malloc(sizeof *c * N);
  if (!code || !c) return 1;
  for (int i = 0; i < N; ++i) {
    for (int a = 0; a < 3; ++a) c[i][a] = random_coord(&rng);
    code[i] = sparse_block_code(c[i][0], c[i][1], c[i][2]);
    int back[3];
    sparse_block_coords(code[i], back);
    CHECK(back[0] == c[i][0] && back[1] == c[i][1] && back[2] == c[i][2], "(%d %d %d) decodes to (%d %d %d)",
          c[i][0], c[i][1], c[i][2], back[0], back[1], back[2]);
    for (int a = 0; a < 3; ++a)
      CHECK((code[i] & SPARSE_AXIS_MASK(a)) == sparse_axis_bits(c[i][a], a), "axis %d of (%d %d %d)", a, c[i][0],
            c[i][1], c[i][2]);
  }
  /* the extremes of the range */
  const int top = 0x1fffff;
  int back[3];
  sparse_block_coords(sparse_block_code(top, 0, top), back);
  CHECK(back[0] == top && back[1] == 0 && back[2] == top, "the largest coordinates decode to (%d %d %d)", back[0],
        back[1], back[2]);

  /* order: masked bits compare as the coordinates */
  for (int i = 0; i + 1 < N; ++i)
    for (int a = 0; a < 3; ++a) {
      const uint64_t x = code[i] & SPARSE_AXIS_MASK(a), y = code[i + 1] & SPARSE_AXIS_MASK(a);
      CHECK((x < y) == (c[i][a] < c[i + 1][a]) && (x == y) == (c[i][a] == c[i + 1][a]),
            "axis %d: %d against %d compare otherwise as masked bits", a, c[i][a], c[i + 1][a]);
    }

  /* a box test on masked bits against one on coordinates, for boxes of every size */
  for (int t = 0; t < 200; ++t) {
    int lo[3], hi[3];
    for (int a = 0; a < 3; ++a) {
      const int p = random_coord(&rng), q = random_coord(&rng);
      lo[a] = p < q ? p : q, hi[a] = p < q ? q : p;
    }
    uint64_t blo[3], bhi[3];
    for (int a = 0; a < 3; ++a) blo[a] = sparse_axis_bits(lo[a], a), bhi[a] = sparse_axis_bits(hi[a], a);
    int bad = 0, inside = 0;
    for (int i = 0; i < N; ++i) {
      int want = 1, got = 1;
      for (int a = 0; a < 3; ++a) {
        const uint64_t v = code[i] & SPARSE_AXIS_MASK(a);
        want &= c[i][a] >= lo[a] && c[i][a] <= hi[a];
        got &= v >= blo[a] && v <= bhi[a];
      }
      bad += want != got;
      inside += want;
    }
    CHECK(bad == 0, "box (%d %d %d)-(%d %d %d): %d of %d codes tested otherwise (%d inside)", lo[0], lo[1], lo[2], hi[0],
          hi[1], hi[2], bad, N, inside);
  }

  /* sparse_codes_box against the decoded box, for prefixes of every length */
  for (int n = 1; n <= N; n = n * 3 + 1) {
    int32_t lo[3], hi[3], wlo[3] = {INT32_MAX, INT32_MAX, INT32_MAX}, whi[3] = {INT32_MIN, INT32_MIN, INT32_MIN};
    for (int i = 0; i < n; ++i)
      for (int a = 0; a < 3; ++a) {
        if (c[i][a] < wlo[a]) wlo[a] = c[i][a];
        if (c[i][a] > whi[a]) whi[a] = c[i][a];
      }
    sparse_codes_box(code, (size_t)n, lo, hi);
    for (int a = 0; a < 3; ++a)
      CHECK(lo[a] == wlo[a] && hi[a] == whi[a], "%d codes, axis %d: box [%d, %d], decoded [%d, %d]", n, a, lo[a], hi[a],
            wlo[a], whi[a]);
  }
  int32_t lo[3], hi[3];
  sparse_codes_box(code, 0, lo, hi);
  CHECK(lo[0] > hi[0] && lo[1] > hi[1] && lo[2] > hi[2], "no codes: box [%d, %d] is not empty", lo[0], hi[0]);
  free(code), free(c);
  return check_summary("test_block_codes");
}
