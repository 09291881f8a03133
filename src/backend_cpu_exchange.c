/* backend_cpu_exchange.c - the CPU backend's part of the rank exchange (backend.h, mpi/exchange.c):
 * its blocks, the node masks of the shared blocks (at once, or in two halves through a slot a
 * link), the marked nodes' sums packed and added, the shared blocks marked; and the gate of the
 * step queued ahead (g2p_ahead, gate_open), which defers the next step's P2G and masks as a GPU
 * would queue them. */
#include <stdlib.h>
#include <string.h>

#include "backend_cpu_internal.h"
#include "error.h"
#include "physics/sparse.h"

/* ---- the rank exchange (mpi/exchange.c) --------------------------------------------------- */

static int blocks(void *state, const uint64_t **codes, size_t *n) {
  cpu_state *s = state;
  *codes = s->block_code; /* sorted by code; the position is the dense index */
  *n = s->n_blocks;
  return DR_OK;
}

/* node_masks_async deferred behind the gate, after the p2g deferred before it (gate_open runs
 * them in order). */
static int gate_defer(cpu_state *s, int slot, const int32_t *idx, size_t n) {
  if (s->n_gate_masks == s->cap_gate_masks) {
    const int cap = s->cap_gate_masks ? 2 * s->cap_gate_masks : 4;
    struct gate_masks *q = realloc(s->gate_masks, sizeof *q * (size_t)cap);
    if (!q) return dr_fail(DR_ENOMEM, "out of host memory for the node masks queued behind the gate");
    s->gate_masks = q, s->cap_gate_masks = cap;
  }
  s->gate_masks[s->n_gate_masks++] = (struct gate_masks){slot, idx, n};
  return DR_OK;
}

/* The slot's mask buffer, of at least need bytes. */
static int xslot_get(cpu_state *s, int slot, size_t need, xslot **out) {
  if (slot < 0) return dr_fail(DR_EINTERNAL, "cpu backend: node mask slot %d", slot);
  if (slot >= s->n_xslot) {
    const int cap = slot + 1 > 2 * s->n_xslot ? slot + 1 : 2 * s->n_xslot;
    xslot *q = realloc(s->xslot, sizeof *q * (size_t)cap);
    if (!q) return dr_fail(DR_ENOMEM, "out of host memory for the exchange's mask buffers");
    memset(q + s->n_xslot, 0, sizeof *q * (size_t)(cap - s->n_xslot));
    s->xslot = q, s->n_xslot = cap;
  }
  xslot *x = &s->xslot[slot];
  if (x->cap < need) {
    free(x->msg);
    x->msg = malloc(need ? need : 1);
    x->cap = x->msg ? need : 0;
    if (!x->msg) return dr_fail(DR_ENOMEM, "out of host memory for the exchange's mask buffers (%zu bytes)", need);
  }
  *out = x;
  return DR_OK;
}

/* The node exchange (backend.h): a block's mask marks the nodes where any channel of this step's
 * sums is non-zero (an untouched block holds none): every node a particle weighs with w > 0 gets
 * mass w m > 0. Not so in deterministic mode, where a tiny w m rounds to a fixed-point 0 while G2P
 * still reads the node with that w: there every node of a touched block is marked (the blocks a
 * particle's stencil reaches, as P2G marks them), so that only the blocks both ranks reach
 * travel, whole. */
static uint64_t node_mask(const cpu_state *s, int32_t blk) {
  uint64_t m = 0;
  if (!s->touched[blk]) return 0;
  if (s->det) return ~0ull;
  const size_t ch = s->bf / BLOCK_NODES;
  for (int nd = 0; nd < BLOCK_NODES; ++nd) {
    int any = 0;
    for (size_t c = 0; c < ch; ++c) any |= s->grid[(size_t)blk * s->bf + c * BLOCK_NODES + nd] != 0.0f;
    m |= (uint64_t)any << nd;
  }
  return m;
}

static int node_masks(void *state, const int32_t *idx, size_t n, uint64_t *out) {
  cpu_state *s = state;
  for (size_t k = 0; k < n; ++k) out[k] = node_mask(s, idx[k]);
  return DR_OK;
}

/* Into the slot's buffer at once (behind the gate: when it opens); node_masks_wait hands it over. */
static int node_masks_async(void *state, int slot, const int32_t *idx, size_t n) {
  cpu_state *s = state;
  if (s->gate_armed) return gate_defer(s, slot, idx, n);
  xslot *x = NULL;
  DR_TRY(xslot_get(s, slot, n * sizeof(uint64_t), &x));
  x->bytes = n * sizeof(uint64_t);
  return node_masks(state, idx, n, x->msg);
}

static int node_masks_wait(void *state, int slot, uint64_t *out) {
  cpu_state *s = state;
  if (slot < 0 || slot >= s->n_xslot)
    return dr_fail(DR_EINTERNAL, "cpu backend: node_masks_wait(%d) without its node_masks_async", slot);
  memcpy(out, s->xslot[slot].msg, s->xslot[slot].bytes);
  return DR_OK;
}

/* The values of the nodes mask marks, between the grid and a node message (block k's from base[k]
 * x channels on, channel by channel, the marked nodes in order): into msg (pack_nodes), or added
 * to the grid (unpack_add_nodes; every block the mask marks is one this rank's P2G touched, as the
 * AND holds its own mask). */
static void move_nodes(cpu_state *s, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base, void *msg,
                       int add) {
  const size_t ch = s->bf / BLOCK_NODES;
  for (size_t k = 0; k < n; ++k) {
    const size_t cnt = (size_t)__builtin_popcountll(mask[k]), at = (size_t)base[k] * ch;
    size_t r = 0;
    for (int nd = 0; nd < BLOCK_NODES && r < cnt; ++nd) {
      if (!((mask[k] >> nd) & 1u)) continue;
      for (size_t c = 0; c < ch; ++c) {
        const size_t g = (size_t)idx[k] * s->bf + c * BLOCK_NODES + nd, q = at + c * cnt + r;
        if (s->det) { /* integer sums: the order of the ranks' additions does not matter */
          if (add) s->igrid[g] += ((const int64_t *)msg)[q];
          else ((int64_t *)msg)[q] = s->igrid[g];
        } else {
          if (add) s->grid[g] += ((const float *)msg)[q];
          else ((float *)msg)[q] = s->grid[g];
        }
      }
      ++r;
    }
  }
}

static int pack_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base, void *out) {
  move_nodes(state, idx, n, mask, base, out, 0);
  return DR_OK;
}

static int unpack_add_nodes(void *state, const int32_t *idx, size_t n, const uint64_t *mask, const uint32_t *base,
                            const void *in) {
  move_nodes(state, idx, n, mask, base, (void *)in, 1);
  return DR_OK;
}

static int mark_shared(void *state, const int32_t *idx, size_t n) {
  cpu_state *s = state;
  if (!idx) { /* a new exchange_setup */
    if (s->n_blocks) memset(s->shared, 0, s->n_blocks);
    return DR_OK;
  }
  for (size_t k = 0; k < n; ++k) s->shared[idx[k]] = 1;
  return DR_OK;
}

/* backend.h's p2g_part: the CPU backend runs its phases to completion, so nothing would overlap
 * the exchange; the boundary part is the whole P2G and the interior part is empty. */
static int p2g_part(void *state, float dt, int part) { return part == P2G_BOUNDARY ? cpu_p2g(state, dt) : DR_OK; }

/* backend.h's g2p_ahead, g2p_collect and gate_open: g2p at once, then the gate defers the next
 * step's p2g and node masks (p2g, node_masks_async) until it opens, in their order; a voided gate
 * drops them. Nothing to gain on a CPU, but the ranks' loop runs the same order of calls as on
 * a GPU, so that the tests check it here (--steps-ahead off: off). */
static int g2p_ahead(void *state, float dt, int *armed) {
  cpu_state *s = state;
  *armed = 0;
  DR_TRY(cpu_g2p(state, dt));
  if (!s->ahead_on) return DR_OK;
  s->gate_armed = 1;
  s->gate_p2g = 0;
  s->n_gate_masks = 0;
  *armed = 1;
  return DR_OK;
}

static int g2p_collect(void *state) {
  (void)state; /* g2p_ahead's g2p is complete */
  return DR_OK;
}

static int gate_open(void *state, int go) {
  cpu_state *s = state;
  if (!s->gate_armed) return dr_fail(DR_EINTERNAL, "cpu backend: gate_open without g2p_ahead");
  s->gate_armed = 0;
  const int n = s->n_gate_masks;
  s->n_gate_masks = 0;
  if (!go) {
    s->gate_p2g = 0;
    return DR_OK;
  }
  if (s->gate_p2g) {
    s->gate_p2g = 0;
    DR_TRY(cpu_p2g(state, s->gate_dt));
  }
  for (int k = 0; k < n; ++k) {
    const struct gate_masks *q = &s->gate_masks[k];
    DR_TRY(node_masks_async(state, q->slot, q->idx, q->n));
  }
  return DR_OK;
}

void cpu_exchange_ops(backend *b) {
  b->blocks = blocks, b->node_masks = node_masks, b->node_masks_async = node_masks_async;
  b->node_masks_wait = node_masks_wait, b->pack_nodes = pack_nodes, b->unpack_add_nodes = unpack_add_nodes;
  b->mark_shared = mark_shared, b->p2g_part = p2g_part;
  b->g2p_ahead = g2p_ahead, b->g2p_collect = g2p_collect, b->gate_open = gate_open;
}

void cpu_exchange_free(cpu_state *s) {
  for (int k = 0; k < s->n_xslot; ++k) free(s->xslot[k].msg);
  free(s->xslot);
  free(s->gate_masks);
}
