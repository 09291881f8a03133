/* levelset.h - sparse narrow-band signed distance fields of triangle meshes, as the grid update
 * samples them (mesh colliders, boundary.h) and as the sampling of mesh bodies tests points.
 * Shared by the CPU and CUDA backends; built on the host by meshsdf.c.
 *
 * A level set is a regular lattice of nodes (spacing h, node (0,0,0) at origin) cut into
 * bricks of 4^3 nodes. A dense table with one int32 per brick says what the brick holds:
 * >= 0, the index of its stored values (the narrow band: bricks within band + a brick's
 * half-diagonal of a triangle); LS_OUTSIDE or LS_INSIDE, a brick farther than band from the
 * surface, all of whose nodes read +band or -band. Inside the band a node stores
 * phi = sign * min(distance to the triangles, band): negative inside, |phi| <= band. Beyond the
 * lattice everything reads +band (the lattice has a margin of more than band around the mesh).
 *
 * Between nodes phi is trilinear. Its gradient (ls_gradient) is the trilinear interpolation of
 * the nodes' central differences, not the gradient of the trilinear phi: that one jumps across
 * every cell face, and grid nodes often lie exactly on level-set nodes (h = dx / 2, origins at
 * round numbers), where the cell that floor() picks follows the last bit of the coordinate. A
 * CPU and a GPU build (FMA contraction) then took the normal from different cells, up to a
 * reversed normal at a sharp edge. This gradient is continuous, exact for a plane, and reads 32
 * nodes instead of 8, so the colliders ask for it only where they act. The table costs 4 bytes per 64 nodes
 * of the mesh's bounding box, the bricks 256 bytes (x channels) each; only the band is stored.
 *
 * Channels: 1 (phi) for a static mesh; 7 for a frame of an animated sequence: phi, then the
 * velocity of the surface point nearest to the node for the interval after this frame ("out",
 * channels 1-3) and for the interval before it ("in", channels 4-6). */
#ifndef DRIFT_PHYSICS_LEVELSET_H
#define DRIFT_PHYSICS_LEVELSET_H

#include <stdint.h>

#include "physics/common.h"

#define LS_BRICK 4        /* nodes per brick edge */
#define LS_BRICK_NODES 64
#define LS_OUTSIDE (-1)   /* table entries of bricks beyond the band */
#define LS_INSIDE (-2)
#define LS_MAX_CHANNELS 7
#define LS_VEL_OUT 1      /* first channel of the velocity for the interval after the frame */
#define LS_VEL_IN 4       /* ... and before it */

typedef struct levelset {
  float origin[3];      /* node (0,0,0) (m, in the frame the mesh was given in) */
  float h, inv_h;       /* node spacing (m) and its inverse */
  float band;           /* |phi| <= band (m) */
  int dims[3];          /* bricks along each axis */
  int channels;         /* 1 or 7 (see above) */
  int64_t table0;       /* its first entry in the pool's table */
  int64_t brick0;       /* its first float in the pool's bricks */
  float centroid[3];    /* of the mesh's vertices: the normal's fallback where phi is flat */
  float vel_mean[6];    /* sequences: mean vertex velocity out, in (the value off the band) */
} levelset;

/* The table entry of brick (bi, bj, bk): its index in the pool's bricks, LS_OUTSIDE or
 * LS_INSIDE; LS_OUTSIDE off the lattice. */
DR_HD int ls_entry(const levelset *L, const int32_t *table, int bi, int bj, int bk) {
  if (bi < 0 || bj < 0 || bk < 0 || bi >= L->dims[0] || bj >= L->dims[1] || bk >= L->dims[2]) return LS_OUTSIDE;
  return table[L->table0 + ((int64_t)bk * L->dims[1] + bj) * L->dims[0] + bi];
}

/* The values of node (i, j, k) (channels 0 .. nc - 1) into out. */
DR_HD void ls_node(const levelset *L, const int32_t *table, const float *bricks, int i, int j, int k, float *out, int nc) {
  const int e = ls_entry(L, table, i >> 2, j >> 2, k >> 2);
  if (e >= 0) {
    const int local = ((k & 3) * LS_BRICK + (j & 3)) * LS_BRICK + (i & 3);
    const float *p = bricks + L->brick0 + ((int64_t)e * LS_BRICK_NODES + local) * L->channels;
    for (int c = 0; c < nc; ++c) out[c] = p[c];
    return;
  }
  out[0] = e == LS_INSIDE ? -L->band : L->band;
  for (int c = 1; c < nc; ++c) out[c] = L->vel_mean[c - 1];
}

/* Where x (m) lies on the lattice: the cell's lowest node i0 and the fractions f; 0 when the
 * cell is off the lattice (or x is NaN), where everything reads +band. */
DR_HD int ls_cell(const levelset *L, const float x[3], int i0[3], float f[3]) {
  for (int a = 0; a < 3; ++a) {
    const float u = (x[a] - L->origin[a]) * L->inv_h;
    const float fl = floorf(u);
    if (!(fl >= 0.0f && fl < (float)(L->dims[a] * LS_BRICK - 1))) return 0;
    i0[a] = (int)fl;
    f[a] = u - fl;
  }
  return 1;
}

/* The gradient of phi at x (unnormalised; 1 for a distance field): the trilinear interpolation of the
 * eight corner nodes' central differences (phi[n + e] - phi[n - e]) / 2h. Along axis a, for
 * each of the cell's four edges in that direction (corners i0 and i0 + 1 along a), that is
 * ((1 - f) (phi[i0 + 1] - phi[i0 - 1]) + f (phi[i0 + 2] - phi[i0])) / 2h, weighted by the
 * edge's bilinear weight across. Zero off the lattice. */
DR_HD void ls_gradient(const levelset *L, const int32_t *table, const float *bricks, const float x[3], float grad[3]) {
  float f[3];
  int i0[3];
  grad[0] = grad[1] = grad[2] = 0.0f;
  if (!ls_cell(L, x, i0, f)) return;
  for (int a = 0; a < 3; ++a) {
    const int b = (a + 1) % 3, c = (a + 2) % 3;
    float sum = 0.0f;
    for (int e = 0; e < 4; ++e) {
      const int db = e & 1, dc = e >> 1;
      const float w = (db ? f[b] : 1.0f - f[b]) * (dc ? f[c] : 1.0f - f[c]);
      float n[4]; /* phi at i0 - 1 .. i0 + 2 along a */
      for (int q = 0; q < 4; ++q) {
        int id[3];
        id[a] = i0[a] + q - 1, id[b] = i0[b] + db, id[c] = i0[c] + dc;
        ls_node(L, table, bricks, id[0], id[1], id[2], &n[q], 1);
      }
      sum += w * ((1.0f - f[a]) * (n[2] - n[0]) + f[a] * (n[3] - n[1]));
    }
    grad[a] = 0.5f * L->inv_h * sum;
  }
}

/* 1 when every brick that the trilinear cell at x touches lies beyond the band outside (or off
 * the lattice), where ls_sample's phi is +band up to rounding: a particle there is not inside.
 * One table entry per brick (usually one or two) instead of the eight corners' entries and
 * values, which is what the particle collision step asks of most particles. */
DR_HD int ls_far_outside(const levelset *L, const int32_t *table, const float x[3]) {
  float f[3];
  int i0[3];
  if (!ls_cell(L, x, i0, f)) return 1;
  const int b0[3] = {i0[0] >> 2, i0[1] >> 2, i0[2] >> 2};
  const int b1[3] = {(i0[0] + 1) >> 2, (i0[1] + 1) >> 2, (i0[2] + 1) >> 2};
  for (int bk = b0[2]; bk <= b1[2]; ++bk)
    for (int bj = b0[1]; bj <= b1[1]; ++bj)
      for (int bi = b0[0]; bi <= b1[0]; ++bi)
        if (ls_entry(L, table, bi, bj, bk) != LS_OUTSIDE) return 0;
  return 1;
}

/* phi at the point x (m) and, when vel is not NULL, the velocity channels starting at vch
 * (LS_VEL_OUT or LS_VEL_IN), all trilinear; when grad is not NULL, also ls_gradient. */
DR_HD float ls_sample(const levelset *L, const int32_t *table, const float *bricks, const float x[3], float grad[3],
                      int vch, float vel[3]) {
  float f[3];
  int i0[3];
  const int nc = vel ? vch + 3 : 1;
  if (grad) ls_gradient(L, table, bricks, x, grad);
  if (vel) vel[0] = vel[1] = vel[2] = 0.0f;
  if (!ls_cell(L, x, i0, f)) return L->band;
  float phi = 0.0f;
  for (int c = 0; c < 8; ++c) {
    const int di = c & 1, dj = (c >> 1) & 1, dk = c >> 2;
    float val[LS_MAX_CHANNELS];
    ls_node(L, table, bricks, i0[0] + di, i0[1] + dj, i0[2] + dk, val, nc);
    const float w = (di ? f[0] : 1.0f - f[0]) * (dj ? f[1] : 1.0f - f[1]) * (dk ? f[2] : 1.0f - f[2]);
    phi += w * val[0];
    if (vel)
      for (int a = 0; a < 3; ++a) vel[a] += w * val[vch + a];
  }
  return phi;
}

#endif
