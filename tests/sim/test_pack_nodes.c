/* test_pack_nodes - backend.h's node exchange calls (node_masks, node_masks_async/_wait,
 * pack_nodes, unpack_add_nodes; the rank exchange of mpi/exchange.h) on the CPU backend, in float
 * and in deterministic mode. Three backends hold the same particles (a thrown block of elastic
 * material, stepped alike), so their grids are the same; after one P2G, every mapped block of the
 * first is read whole (pack_nodes with every node marked: every value of every block, the grid's
 * layout) and through the node messages. Expected:
 *   - node_masks in one call and in two halves give the same masks;
 *   - in float mode a block's mask marks exactly its nodes where some channel of the whole sums is
 *     non-zero (untouched blocks 0), and some touched blocks are marked only in part; in
 *     deterministic mode a mask marks every node or none, and every block with a non-zero sum;
 *   - some mapped blocks are untouched (the mapping holds blocks around the touched ones);
 *   - with the AND of those masks and a neighbour's (here a fixed pseudo-random pattern), the
 *     message holds, from base[k] x channels on, block k's marked nodes channel by channel,
 *     bitwise the whole sums;
 *   - adding it ends the step with the same particles, bitwise, as adding, with every node
 *     marked, the whole sums with every node outside the AND set to zero. */
#include "simtest.h"

#include "jelly_block.h"

/* The rest of a step after P2G and the sums added. */
static void finish_step(backend *b) {
  MUST(b->grid_update(b->state, DT));
  MUST(b->g2p(b->state, DT));
}

/* Values of the particles that differ between two backends (their order and ids included), after
 * both ended a step: 0 where they hold the same particles bitwise. */
static size_t differing(backend *x, backend *y) {
  particles a = {0}, b = {0};
  MUST(x->download(x->state, &a));
  MUST(y->download(y->state, &b));
  size_t differ = a.n != b.n;
  for (size_t i = 0; i < a.n && !differ; ++i) {
    differ += a.id[i] != b.id[i];
    for (int c = 0; c < 3; ++c) differ += a.x[3 * i + c] != b.x[3 * i + c] || a.v[3 * i + c] != b.v[3 * i + c];
    for (int c = 0; c < 9; ++c) differ += a.C[9 * i + c] != b.C[9 * i + c] || a.F[9 * i + c] != b.F[9 * i + c];
  }
  particles_free(&a), particles_free(&b);
  return differ;
}

/* Three CPU backends holding the same particles, stepped alike, each after a rebuild and one more
 * P2G; returns the list of every mapped block of the first (*n of them). */
static int32_t *three(int det, backend be[3], size_t *n) {
  const material_params m = jelly();
  const sim_params prm = params(&m, det);
  for (int k = 0; k < 3; ++k) {
    particles p = {0};
    block(&m, &p);
    MUST(backend_create(BACKEND_CPU, &prm, &p, &be[k]));
    particles_free(&p);
  }
  for (int s = 0; s < 20; ++s)
    for (int k = 0; k < 3; ++k) step(&be[k]);
  for (int k = 0; k < 3; ++k) {
    int rebuilt;
    MUST(be[k].rebuild(be[k].state, 0, &rebuilt));
    MUST(be[k].p2g(be[k].state, DT));
  }
  const uint64_t *codes;
  MUST(be[0].blocks(be[0].state, &codes, n));
  int32_t *idx = malloc(sizeof *idx * (*n ? *n : 1));
  for (size_t k = 0; k < *n; ++k) idx[k] = (int32_t)k;
  return idx;
}

static void run(int det) {
  const char *mode = det ? "deterministic" : "float";
  backend be[3]; /* be[0] packs; be[1] adds the masked whole sums, be[2] the node message */
  size_t n;
  int32_t *idx = three(det, be, &n);
  CHECK(be[0].node_masks && be[0].node_masks_async && be[0].node_masks_wait && be[0].pack_nodes &&
        be[0].unpack_add_nodes, "%s: the cpu backend has no node exchange", mode);
  if (!be[0].pack_nodes) return;
  const size_t esz = be[0].sums_int64 ? sizeof(int64_t) : sizeof(float), ch = (size_t)be[0].block_sums / 64,
               vb = (size_t)be[0].block_sums * esz;
  char *whole = malloc(vb * n), *masked = calloc(n, vb), *msg = malloc(vb * n);
  uint64_t *mine = malloc(sizeof *mine * n), *both = malloc(sizeof *both * n), *all = malloc(sizeof *all * n);
  uint32_t *base = malloc(sizeof *base * n), *all_base = malloc(sizeof *all_base * n);
  /* the whole sums: every node of every block marked, so that block k starts at 64 k nodes */
  for (size_t k = 0; k < n; ++k) all[k] = ~0ull, all_base[k] = (uint32_t)(64 * k);
  MUST(be[0].pack_nodes(be[0].state, idx, n, all, all_base, whole));
  MUST(be[0].node_masks_async(be[0].state, 0, idx, n));
  MUST(be[0].node_masks_wait(be[0].state, 0, mine));
  uint64_t *once = malloc(sizeof *once * n);
  MUST(be[0].node_masks(be[0].state, idx, n, once));
  CHECK(memcmp(once, mine, sizeof *once * n) == 0, "%s: node_masks in one call differs from its two halves", mode);
  free(once);
  size_t wrong = 0, touched = 0, partial = 0, nodes = 0;
  for (size_t k = 0; k < n; ++k) {
    uint64_t expect = 0;
    for (int nd = 0; nd < 64; ++nd)
      for (size_t c = 0; c < ch; ++c)
        for (size_t j = 0; j < esz; ++j) expect |= (uint64_t)(whole[k * vb + (c * 64 + (size_t)nd) * esz + j] != 0) << nd;
    if (det) /* all or nothing, and all where some node holds a sum (a touched block may round to 0) */
      wrong += (mine[k] != 0 && mine[k] != ~0ull) || (expect && mine[k] != ~0ull);
    else
      wrong += mine[k] != expect;
    touched += mine[k] != 0;
    partial += mine[k] != 0 && mine[k] != ~0ull;
    nodes += (size_t)__builtin_popcountll(mine[k]);
  }
  printf("%s: %zu blocks, %zu touched, %zu of them in part; %zu nodes marked (%.1f%% of the touched blocks' nodes)\n",
         mode, n, touched, partial, nodes, 100.0 * (double)nodes / (64.0 * (double)(touched ? touched : 1)));
  CHECK(wrong == 0, "%s: %zu blocks' node masks differ from their non-zero sums", mode, wrong);
  CHECK((det ? partial == 0 : partial > 0) && touched < n, "%s: %zu blocks marked in part, %zu of %zu untouched "
        "(expected %s, and some untouched)", mode, partial, n - touched, n, det ? "none" : "some");
  /* the neighbour's mask: a fixed pattern; the AND and its prefix sums, as exchange.c makes them */
  uint32_t total = 0;
  uint64_t r = 0x9e3779b97f4a7c15ull;
  for (size_t k = 0; k < n; ++k) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    both[k] = mine[k] & r;
    base[k] = total;
    total += (uint32_t)__builtin_popcountll(both[k]);
  }
  CHECK(total > 0 && total < nodes, "%s: %u of %zu nodes in the AND (expected some, not all)", mode, total, nodes);
  MUST(be[0].pack_nodes(be[0].state, idx, n, both, base, msg));
  size_t differ = 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t cnt = (size_t)__builtin_popcountll(both[k]);
    size_t q = 0;
    for (int nd = 0; nd < 64; ++nd) {
      if (!((both[k] >> nd) & 1u)) continue;
      for (size_t c = 0; c < ch; ++c) {
        const size_t from = k * vb + (c * 64 + (size_t)nd) * esz, at = ((size_t)base[k] * ch + c * cnt + q) * esz;
        differ += memcmp(msg + at, whole + from, esz) != 0;
        memcpy(masked + from, whole + from, esz);
      }
      ++q;
    }
  }
  CHECK(differ == 0, "%s: %zu values of the node message differ from the whole sums", mode, differ);
  MUST(be[1].unpack_add_nodes(be[1].state, idx, n, all, all_base, masked));
  MUST(be[2].unpack_add_nodes(be[2].state, idx, n, both, base, msg));
  finish_step(&be[1]);
  finish_step(&be[2]);
  differ = differing(&be[1], &be[2]);
  CHECK(differ == 0, "%s: the step ended after the node message differs from the masked whole sums' (%zu values "
        "differ)", mode, differ);
  free(idx), free(whole), free(masked), free(msg), free(mine), free(both), free(base), free(all), free(all_base);
  for (int k = 0; k < 3; ++k) be[k].destroy(be[k].state);
}

int main(int argc, char **argv) {
  init(&argc, &argv);
  run(0);
  run(1);
  return finish("test_pack_nodes");
}
