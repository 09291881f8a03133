/* test_sparse - backend.h's pack_sparse and unpack_add_sparse (the sparse rank exchange,
 * mpi/exchange.h) on the CPU backend, against its dense pack and unpack_add, in float and in
 * deterministic mode. Three backends hold the same particles (a thrown block of elastic material,
 * stepped alike), so their grids are the same; after one P2G, every mapped block of the first is
 * packed both ways. Expected, from the dense pack's output:
 *   - the mask marks exactly the blocks whose dense sums hold a non-zero value (those the P2G
 *     touched; the mapping also holds untouched blocks around them, and some must be unmarked);
 *   - the message is the mask's SPARSE_MASK_BYTES(n) bytes and then, in order, the marked blocks'
 *     sums, bitwise the dense ones, and its length says so;
 *   - a second backend adding the dense message and a third adding the sparse one end the step
 *     (grid update, G2P) with the same particles, bitwise;
 *   - a message one byte short, one block too long, or whose mask marks a block past n is
 *     refused (DR_EINTERNAL, "does not match its mask"), and the refusal adds nothing.
 * And the node exchange (node_masks_async/_wait, pack_nodes, unpack_add_nodes), against the same
 * dense pack:
 *   - in float mode a block's mask marks exactly its nodes where some channel of the dense sums is
 *     non-zero (untouched blocks 0), and some touched blocks are marked only in part; in
 *     deterministic mode every node of the blocks the sparse pack marks as touched;
 *   - with the AND of those masks and a neighbour's (here a fixed pseudo-random pattern), the
 *     message holds, from base[k] x channels on, block k's marked nodes channel by channel,
 *     bitwise the dense sums;
 *   - adding it ends the step with the same particles, bitwise, as adding the dense message with
 *     every node outside the AND set to zero. */
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

static int refused(backend *b, const int32_t *idx, size_t n, const void *msg, size_t bytes) {
  dr_clear();
  const int rc = b->unpack_add_sparse(b->state, idx, n, msg, bytes);
  const int ok = rc == DR_EINTERNAL && strstr(dr_message(), "does not match its mask") != NULL;
  dr_clear();
  return ok;
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
  backend be[3]; /* be[0] packs; be[1] adds the dense message, be[2] the sparse one */
  size_t n;
  int32_t *idx = three(det, be, &n);
  CHECK(be[0].pack_sparse && be[0].unpack_add_sparse, "%s: the cpu backend has no sparse pack", mode);
  if (!be[0].pack_sparse) return;
  const size_t vb = (size_t)be[0].block_sums * (be[0].sums_int64 ? sizeof(int64_t) : sizeof(float));
  const size_t head = SPARSE_MASK_BYTES(n);
  char *dense = malloc(vb * n), *sparse = malloc(head + vb * n + vb);
  size_t bytes = 0;
  MUST(be[0].pack(be[0].state, idx, n, dense));
  MUST(be[0].pack_sparse(be[0].state, idx, n, sparse, &bytes));
  const uint64_t *mask = (const uint64_t *)sparse;
  size_t marked = 0, wrong_mark = 0, wrong_sums = 0;
  for (size_t k = 0; k < n; ++k) {
    int nonzero = 0;
    for (size_t j = 0; j < vb; ++j) nonzero |= dense[k * vb + j] != 0;
    const int bit = (int)((mask[k / 64] >> (k % 64)) & 1u);
    wrong_mark += bit != nonzero;
    if (bit) wrong_sums += memcmp(sparse + head + marked++ * vb, dense + k * vb, vb) != 0;
  }
  printf("%s: %zu mapped blocks, %zu touched and sent (%.1f%%), %zu bytes against %zu dense\n", mode, n, marked,
         100.0 * (double)marked / (double)n, bytes, vb * n);
  CHECK(wrong_mark == 0, "%s: %zu blocks marked otherwise than their sums say", mode, wrong_mark);
  CHECK(wrong_sums == 0, "%s: %zu marked blocks' sums differ from the dense pack's", mode, wrong_sums);
  CHECK(marked > 0 && marked < n, "%s: %zu of %zu blocks marked (expected some of each)", mode, marked, n);
  CHECK(bytes == head + marked * vb, "%s: %zu bytes, expected %zu", mode, bytes, head + marked * vb);

  /* malformed messages: refused, and nothing added (be[2] then ends its step like be[1]) */
  CHECK(refused(&be[2], idx, n, sparse, bytes - 1), "%s: a message one byte short was taken", mode);
  CHECK(refused(&be[2], idx, n, sparse, bytes + vb), "%s: a message one block too long was taken", mode);
  if (n % 64) {
    char *bad = malloc(head + vb * n + vb);
    memcpy(bad, sparse, bytes);
    ((uint64_t *)bad)[n / 64] |= 1ull << (n % 64); /* a block past the list */
    memcpy(bad + bytes, dense, vb);                 /* and its sums, so that the length fits the mask */
    CHECK(refused(&be[2], idx, n, bad, bytes + vb), "%s: a mask marking block %zu of %zu was taken", mode, n, n);
    free(bad);
  }
  MUST(be[1].unpack_add(be[1].state, idx, n, dense));
  MUST(be[2].unpack_add_sparse(be[2].state, idx, n, sparse, bytes));
  finish_step(&be[1]);
  finish_step(&be[2]);
  const size_t differ = differing(&be[1], &be[2]);
  CHECK(differ == 0, "%s: the step ended after the sparse message differs from the dense one's (%zu values differ)",
        mode, differ);
  free(idx), free(dense), free(sparse);
  for (int k = 0; k < 3; ++k) be[k].destroy(be[k].state);
}

static void run_nodes(int det) {
  const char *mode = det ? "deterministic" : "float";
  backend be[3]; /* be[0] packs; be[1] adds the masked dense message, be[2] the node message */
  size_t n;
  int32_t *idx = three(det, be, &n);
  CHECK(be[0].node_masks && be[0].node_masks_async && be[0].node_masks_wait && be[0].pack_nodes &&
        be[0].unpack_add_nodes, "%s: the cpu backend has no node exchange", mode);
  if (!be[0].pack_nodes) return;
  const size_t esz = be[0].sums_int64 ? sizeof(int64_t) : sizeof(float), ch = (size_t)be[0].block_sums / 64,
               vb = (size_t)be[0].block_sums * esz;
  char *dense = malloc(vb * n), *masked = calloc(n, vb), *msg = malloc(vb * n);
  uint64_t *mine = malloc(sizeof *mine * n), *both = malloc(sizeof *both * n);
  uint32_t *base = malloc(sizeof *base * n);
  MUST(be[0].pack(be[0].state, idx, n, dense));
  char *sparse = malloc(SPARSE_MASK_BYTES(n) + vb * n);
  size_t sbytes = 0;
  MUST(be[0].pack_sparse(be[0].state, idx, n, sparse, &sbytes));
  const uint64_t *tmask = (const uint64_t *)sparse; /* the touched blocks */
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
        for (size_t j = 0; j < esz; ++j) expect |= (uint64_t)(dense[k * vb + (c * 64 + (size_t)nd) * esz + j] != 0) << nd;
    if (det) expect = (tmask[k / 64] >> (k % 64)) & 1u ? ~0ull : 0;
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
        differ += memcmp(msg + at, dense + from, esz) != 0;
        memcpy(masked + from, dense + from, esz);
      }
      ++q;
    }
  }
  CHECK(differ == 0, "%s: %zu values of the node message differ from the dense sums", mode, differ);
  MUST(be[1].unpack_add(be[1].state, idx, n, masked));
  MUST(be[2].unpack_add_nodes(be[2].state, idx, n, both, base, msg));
  finish_step(&be[1]);
  finish_step(&be[2]);
  differ = differing(&be[1], &be[2]);
  CHECK(differ == 0, "%s: the step ended after the node message differs from the masked dense one's (%zu values "
        "differ)", mode, differ);
  free(idx), free(dense), free(sparse), free(masked), free(msg), free(mine), free(both), free(base);
  for (int k = 0; k < 3; ++k) be[k].destroy(be[k].state);
}

int main(int argc, char **argv) {
  init(&argc, &argv);
  run(0);
  run(1);
  run_nodes(0);
  run_nodes(1);
  return finish("test_sparse");
}
