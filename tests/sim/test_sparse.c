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
 *     refused (DR_EINTERNAL, "does not match its mask"), and the refusal adds nothing. */
#include "simtest.h"

#include "jelly_block.h"

/* The rest of a step after P2G and the sums added. */
static void finish_step(backend *b) {
  MUST(b->grid_update(b->state, DT));
  MUST(b->g2p(b->state, DT));
}

static int refused(backend *b, const int32_t *idx, size_t n, const void *msg, size_t bytes) {
  dr_clear();
  const int rc = b->unpack_add_sparse(b->state, idx, n, msg, bytes);
  const int ok = rc == DR_EINTERNAL && strstr(dr_message(), "does not match its mask") != NULL;
  dr_clear();
  return ok;
}

static void run(int det) {
  const char *mode = det ? "deterministic" : "float";
  const material_params m = jelly();
  const sim_params prm = params(&m, det);
  backend be[3]; /* be[0] packs; be[1] adds the dense message, be[2] the sparse one */
  for (int k = 0; k < 3; ++k) {
    particles p = {0};
    block(&m, &p);
    MUST(backend_create(BACKEND_CPU, &prm, &p, &be[k]));
    particles_free(&p);
  }
  CHECK(be[0].pack_sparse && be[0].unpack_add_sparse, "%s: the cpu backend has no sparse pack", mode);
  if (!be[0].pack_sparse) return;
  for (int s = 0; s < 20; ++s)
    for (int k = 0; k < 3; ++k) step(&be[k]);
  for (int k = 0; k < 3; ++k) {
    int rebuilt;
    MUST(be[k].rebuild(be[k].state, 0, &rebuilt));
    MUST(be[k].p2g(be[k].state, DT));
  }
  const uint64_t *codes;
  size_t n;
  MUST(be[0].blocks(be[0].state, &codes, &n));
  int32_t *idx = malloc(sizeof *idx * n);
  for (size_t k = 0; k < n; ++k) idx[k] = (int32_t)k;
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
  particles a = {0}, b = {0};
  MUST(be[1].download(be[1].state, &a));
  MUST(be[2].download(be[2].state, &b));
  size_t differ = a.n != b.n;
  for (size_t i = 0; i < a.n && !differ; ++i) {
    differ += a.id[i] != b.id[i];
    for (int c = 0; c < 3; ++c) differ += a.x[3 * i + c] != b.x[3 * i + c] || a.v[3 * i + c] != b.v[3 * i + c];
    for (int c = 0; c < 9; ++c) differ += a.C[9 * i + c] != b.C[9 * i + c] || a.F[9 * i + c] != b.F[9 * i + c];
  }
  CHECK(differ == 0, "%s: the step ended after the sparse message differs from the dense one's (%zu particles, %zu "
        "values differ)", mode, a.n, differ);
  particles_free(&a), particles_free(&b);
  free(idx), free(dense), free(sparse);
  for (int k = 0; k < 3; ++k) be[k].destroy(be[k].state);
}

int main(int argc, char **argv) {
  init(&argc, &argv);
  run(0);
  run(1);
  return finish("test_sparse");
}
