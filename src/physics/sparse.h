/* sparse.h - the sparse block grid's addressing, shared by the CPU and CUDA backends (the
 * paper, section 4; docs/architecture.md).
 *
 * Nodes: node (i,j,k) sits at origin + (i,j,k) dx, where origin = domain_min - GRID_PAD dx, so
 * that every index touched by a particle inside the domain is positive.
 * Blocks: 4x4x4 nodes; block (I,J,K) holds nodes [4I, 4I+4) x ... A block code interleaves the
 * bits of I, J, K (21 bits each, Morton order): nearby blocks get nearby codes.
 * Particle blocks: a particle's base node b = floor(x/dx - 1/2) (the lowest node of its
 * quadratic B-spline stencil b..b+2) and its particle block P = (b + 1) >> 2, i.e. b in
 * [4P-1, 4P+2]: particle blocks are grid blocks shifted by -dx/2 in position (x/dx in
 * [4P-1/2, 4P+7/2)), as in the paper. At rebuild-mapping the 3x3x3 grid blocks around P become
 * the particle's physical blocks (nodes [4P-4, 4P+8)); it may then move while b stays in
 * [4P-4, 4P+5] on every axis (the (10 dx)^3 free zone) without any new mapping. The particle
 * block sits in the middle of its free zone: 3 cells of slack on every side, so a particle
 * moving at the CFL limit of one cell per step triggers a rebuild-mapping at most every fourth
 * step (the paper's section 4.1). (P = b >> 2 would leave 4 cells behind and only 2 ahead.) */
#ifndef DRIFT_PHYSICS_SPARSE_H
#define DRIFT_PHYSICS_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

#define GRID_PAD 8              /* nodes of padding below domain_min */
#define BLOCK_EDGE 4            /* nodes per block edge */
#define BLOCK_NODES 64          /* nodes per block */
#define BLOCK_CODE_BITS 21      /* bits per axis in a block code */
#define FREE_ZONE_LO (-4)       /* b - 4P may go down to this ... */
#define FREE_ZONE_HI 5          /* ... and up to this without a rebuild */

DR_HD uint64_t sparse_spread3(uint64_t v) {
  v &= 0x1fffffULL;
  v = (v | (v << 32)) & 0x1f00000000ffffULL;
  v = (v | (v << 16)) & 0x1f0000ff0000ffULL;
  v = (v | (v << 8)) & 0x100f00f00f00f00fULL;
  v = (v | (v << 4)) & 0x10c30c30c30c30c3ULL;
  v = (v | (v << 2)) & 0x1249249249249249ULL;
  return v;
}

DR_HD uint64_t sparse_compact3(uint64_t v) {
  v &= 0x1249249249249249ULL;
  v = (v | (v >> 2)) & 0x10c30c30c30c30c3ULL;
  v = (v | (v >> 4)) & 0x100f00f00f00f00fULL;
  v = (v | (v >> 8)) & 0x1f0000ff0000ffULL;
  v = (v | (v >> 16)) & 0x1f00000000ffffULL;
  v = (v | (v >> 32)) & 0x1fffffULL;
  return v;
}

DR_HD uint64_t sparse_block_code(int bi, int bj, int bk) {
  return sparse_spread3((uint64_t)bi) | (sparse_spread3((uint64_t)bj) << 1) |
         (sparse_spread3((uint64_t)bk) << 2);
}

DR_HD void sparse_block_coords(uint64_t code, int c[3]) {
  c[0] = (int)sparse_compact3(code);
  c[1] = (int)sparse_compact3(code >> 1);
  c[2] = (int)sparse_compact3(code >> 2);
}

/* The bits of a block code that hold axis a (0: I, 1: J, 2: K). Spreading keeps the order of a
 * coordinate, so (code & SPARSE_AXIS_MASK(a)) compares between codes as their coordinates do:
 * a bounding box, or a test against one, needs no decoding (mpi/exchange.c: a rank's tens of
 * thousands of codes at every rebuild-mapping, 9 ns a code decoded against about 1 masked). */
#define SPARSE_AXIS_MASK(a) (0x1249249249249249ULL << (a))

/* Coordinate c of axis a where it sits in a code (c >= 0, 21 bits). */
DR_HD uint64_t sparse_axis_bits(int c, int a) { return sparse_spread3((uint64_t)c) << a; }

/* The bounding box of n codes, lo[a] <= coordinate <= hi[a]; lo > hi where n == 0. */
DR_HD void sparse_codes_box(const uint64_t *code, size_t n, int32_t lo[3], int32_t hi[3]) {
  uint64_t mn[3] = {~0ULL, ~0ULL, ~0ULL}, mx[3] = {0, 0, 0};
  for (size_t i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a) {
      const uint64_t v = code[i] & SPARSE_AXIS_MASK(a);
      mn[a] = v < mn[a] ? v : mn[a];
      mx[a] = v > mx[a] ? v : mx[a];
    }
  for (int a = 0; a < 3; ++a) {
    lo[a] = n ? (int32_t)sparse_compact3(mn[a] >> a) : INT32_MAX;
    hi[a] = n ? (int32_t)sparse_compact3(mx[a] >> a) : INT32_MIN;
  }
}

/* Index of node (li,lj,lk) inside its block, 0..63. */
DR_HD int sparse_node_in_block(int li, int lj, int lk) { return (li * BLOCK_EDGE + lj) * BLOCK_EDGE + lk; }

/* Index of the physical block P + d, d in {-1,0,1}^3, among a particle block's 27. */
DR_HD int sparse_neighbor(int di, int dj, int dk) { return ((di + 1) * 3 + (dj + 1)) * 3 + (dk + 1); }

/* Base node of a coordinate already in node units relative to the grid origin. */
DR_HD int sparse_base_node(float x_over_dx) { return (int)floorf(x_over_dx - 0.5f); }

/* The particle block of base node b (b >= -1: GRID_PAD keeps it positive). */
DR_HD int sparse_particle_block(int b) { return (b + 1) >> 2; }
/* The cell of base node b inside its particle block, 0..3. */
DR_HD int sparse_cell_in_particle_block(int b) { return (b + 1) & 3; }

/* Whether base node b is still inside the free zone of particle block P (one axis). */
DR_HD int sparse_in_free_zone(int b, int P) {
  int d = b - BLOCK_EDGE * P;
  return d >= FREE_ZONE_LO && d <= FREE_ZONE_HI;
}

#endif
