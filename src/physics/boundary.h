/* boundary.h - the boundary conditions of the grid update, shared by the CPU and CUDA backends:
 * the six faces of the domain (each its own wall type and friction) and colliders (analytic
 * shapes of sdf.h, or triangle meshes as narrow-band level sets of levelset.h, static or animated
 * by a sequence of meshes, all moved by keyframed translations and rotations).
 *
 * Entry points, called for every grid node with mass after v = p/m + g dt (and, for particles,
 * boundary_push_posed below):
 *   boundary_apply_posed(bp, poses, x, v): x the node's position (m), v the node velocity,
 *   changed in place; poses[k] = collider_pose_at(colliders[k], keys, t), computed once per grid
 *   update at the time t where the colliders stand (the backends use the end of the step: the
 *   CPU backend on the host, the CUDA backend in k_poses). boundary_apply(bp, t, x, v) is the same
 *   computing the poses itself. Colliders act first, in their order in the scene, then the domain
 *   faces, so that the faces always keep material inside the domain.
 *
 * Wall types (bc_project, on the velocity relative to the wall, n the wall's unit normal
 * pointing out of the wall into the material):
 *   sticky:   v_rel = 0.
 *   slip:     the normal component of v_rel is removed (both signs); the tangential part kept.
 *   separate: only motion into the wall (v_rel . n < 0) is removed; then Coulomb friction
 *             shortens the tangential part by friction * |v_rel . n| (to zero at most).
 *
 * Domain faces act on the three node layers nearest to each face (nodes closer than 2.5 dx to
 * it: bp->lo and bp->hi). A collider acts on the nodes inside it or closer to it than
 * bp->band (phi < band; the backends use half a cell): their velocity relative to the
 * collider's own velocity at the node is projected as its type says, then the collider velocity
 * is added back. The band of half a cell means that a collider of any thickness holds at least
 * one layer of nodes, and that material pressed against a collider rests within about half a
 * cell of its surface (with phi < 0 alone it sinks in by more than half a cell under load).
 *
 * Particle collision step (boundary_push_posed, called by G2P after advection, the colliders at
 * the same poses as the grid update): a particle that ends a step inside a slip or separate
 * collider (phi < 0 at its position) moves out along the collider's normal by its depth, and its
 * velocity relative to the collider is projected as for a node. The grid condition alone cannot
 * keep material out everywhere: it only stops motion into the collider, so a particle that got
 * in stays in; and in a concave crease (where two parts of a mesh meet: the crawler's knees in
 * jobs/scenes/crawling_snow.json) nodes that slide along one face carry material into
 * the other part, which ended 1.15 cells deep even with the union's level set right (meshsdf.h).
 * The move is at most half a cell per step and never makes a particle travel a whole cell along
 * an axis in one step (boundary_push_room: the free zone's slack), so a particle deeper than
 * that comes out over several steps. Sticky colliders keep the material they hold (it moves
 * with them). Only particles inside a collider are touched; scenes without colliders skip it.
 *
 * Collider motion: keyframes (time, translation T, rotation q), sorted by time. Between two keys
 * T is interpolated linearly and q by slerp along the shorter arc (at most 180 degrees between
 * consecutive keys); before the first key and after the last the collider stands still at that
 * key. A point X of the collider as the scene describes it (its rest pose) is at
 *     x(t) = c + T(t) + R(q(t)) (X - c)
 * where c is the collider's reference point (sdf.h); its velocity is
 *     v(x) = dT/dt + omega x (x - c - T(t)),
 * with dT/dt and omega constant over each interval between keys (slerp turns at a constant rate
 * about a fixed axis) and zero outside the keyed time range. A collider without keys is static.
 *
 * Everything is float except the time, which is double so that a keyframe interval is resolved
 * to the step even late in a long run. */
#ifndef DRIFT_PHYSICS_BOUNDARY_H
#define DRIFT_PHYSICS_BOUNDARY_H

#include "physics/common.h"
#include "physics/levelset.h"
#include "physics/sdf.h"

enum boundary_kind { BOUNDARY_STICKY = 0, BOUNDARY_SLIP = 1, BOUNDARY_SEPARATE = 2 };

/* The six faces of the domain: face 2 a is the lower face along axis a, 2 a + 1 the upper. */
enum boundary_face { FACE_XMIN = 0, FACE_XMAX = 1, FACE_YMIN = 2, FACE_YMAX = 3, FACE_ZMIN = 4, FACE_ZMAX = 5 };
#define DR_FACES 6

/* One keyframe of a collider's motion. */
typedef struct collider_key {
  double time;          /* s */
  float translation[3]; /* m, from the rest pose */
  float rotation[4];    /* unit quaternion (w, x, y, z) about the reference point */
} collider_key;

typedef struct collider {
  sdf_geom geom;        /* the shape in its local frame */
  float center[3];      /* reference point c in the rest pose (m): the local frame's origin */
  int type;             /* enum boundary_kind */
  float friction;       /* Coulomb coefficient (separate) */
  int key0, n_keys;     /* its keyframes: keys[key0 .. key0 + n_keys) of boundary_params.keys */
  int n_frames;         /* mesh: level sets geom.levelset .. + n_frames - 1 (1: a static mesh) */
  float fps;            /* mesh sequence: frame k of the sequence stands at time k / fps */
} collider;

/* Where a collider is at time t, and how fast it moves. */
typedef struct collider_pose {
  float center[3];      /* c + T(t) */
  float R[9];           /* R(q(t)) */
  float vel[3];         /* dT/dt */
  float omega[3];       /* angular velocity (rad/s, world frame) */
  int frame;            /* mesh sequence: phi = (1 - frac) phi[frame] + frac phi[frame + 1] */
  float frac;
  int deforming;        /* mesh sequence: 1 between its first and last frame (surface velocity on) */
} collider_pose;

/* What the grid update needs. The pointers are host or device memory as the backend runs. */
typedef struct boundary_params {
  int type[DR_FACES];       /* enum boundary_kind of each face */
  float friction[DR_FACES]; /* Coulomb coefficient of each face (separate) */
  float lo[3], hi[3];       /* nodes below lo / above hi along an axis are wall nodes of that face */
  float band;               /* colliders act on nodes with phi < band (m) */
  int n_colliders, n_keys;
  const collider *colliders;  /* [n_colliders] */
  const collider_key *keys;   /* [n_keys], every collider's keyframes one after the other */
  /* Mesh colliders (SDF_MESH): their sparse narrow-band level sets (physics/levelset.h, built
   * by meshsdf.c), indexed by sdf_geom.levelset (+ the frame for sequences). */
  int n_levelsets;
  const levelset *levelsets;  /* [n_levelsets] */
  const int32_t *ls_table;    /* the level sets' brick tables */
  const float *ls_bricks;     /* the level sets' brick values */
  int64_t ls_table_n, ls_bricks_n; /* their lengths (entries, floats) */
} boundary_params;

/* The wall condition on v (relative to the wall; n its unit normal, out of the wall). */
DR_HD void bc_project(int type, float friction, const float n[3], float v[3]) {
  if (type == BOUNDARY_STICKY) {
    v[0] = v[1] = v[2] = 0.0f;
    return;
  }
  const float vn = v3_dot(v, n);
  if (type == BOUNDARY_SEPARATE && vn >= 0.0f) return;
  for (int i = 0; i < 3; ++i) v[i] -= vn * n[i];
  if (type != BOUNDARY_SEPARATE || friction == 0.0f) return;
  const float t2 = v3_dot(v, v);
  if (t2 > 0.0f) {
    const float scale = fmaxf(0.0f, 1.0f - friction * (-vn) / sqrtf(t2));
    for (int i = 0; i < 3; ++i) v[i] *= scale;
  }
}

/* The same for a wall whose normal is the axis `axis` (inward = +1 for a lower face, -1 for an
 * upper one): bc_project with n = inward e_axis, written so that the other components are
 * untouched bit for bit. */
DR_HD void bc_project_axis(int type, float friction, int axis, float inward, float v[3]) {
  if (type == BOUNDARY_STICKY) {
    v[0] = v[1] = v[2] = 0.0f;
    return;
  }
  const float vn = v[axis] * inward;
  if (type == BOUNDARY_SEPARATE && vn >= 0.0f) return;
  v[axis] = 0.0f;
  if (type != BOUNDARY_SEPARATE || friction == 0.0f) return;
  const float t2 = v3_dot(v, v);
  if (t2 > 0.0f) {
    const float scale = fmaxf(0.0f, 1.0f - friction * (-vn) / sqrtf(t2));
    for (int i = 0; i < 3; ++i) v[i] *= scale;
  }
}

/* The collider's pose at time t (keys: its own keyframes, n of them, sorted by time). */
DR_HD void collider_pose_at(const collider *c, const collider_key *keys, double t, collider_pose *P) {
  float q[4] = {1.0f, 0.0f, 0.0f, 0.0f}, T[3] = {0.0f, 0.0f, 0.0f};
  for (int i = 0; i < 3; ++i) P->vel[i] = P->omega[i] = 0.0f;
  const int n = c->n_keys;
  if (n > 0) {
    const collider_key *k = keys + c->key0;
    int j = -1; /* the interval [k[j], k[j+1]) holding t, -1 outside the keyed range */
    if (t <= k[0].time) {
      for (int i = 0; i < 3; ++i) T[i] = k[0].translation[i];
      for (int i = 0; i < 4; ++i) q[i] = k[0].rotation[i];
    } else if (t >= k[n - 1].time) {
      for (int i = 0; i < 3; ++i) T[i] = k[n - 1].translation[i];
      for (int i = 0; i < 4; ++i) q[i] = k[n - 1].rotation[i];
    } else {
      j = 0;
      while (j + 2 < n && t >= k[j + 1].time) ++j;
    }
    if (j >= 0) {
      const collider_key *a = k + j, *b = k + j + 1;
      const double span = b->time - a->time;
      const float s = (float)((t - a->time) / span), inv = (float)(1.0 / span);
      for (int i = 0; i < 3; ++i) {
        T[i] = a->translation[i] + s * (b->translation[i] - a->translation[i]);
        P->vel[i] = (b->translation[i] - a->translation[i]) * inv;
      }
      /* d = conj(qa) qb along the shorter arc: the turn from a to b, in a's frame */
      const float sign = v3_dot(a->rotation + 1, b->rotation + 1) + a->rotation[0] * b->rotation[0] < 0.0f ? -1.0f : 1.0f;
      const float ca[4] = {a->rotation[0], -a->rotation[1], -a->rotation[2], -a->rotation[3]};
      const float qb[4] = {sign * b->rotation[0], sign * b->rotation[1], sign * b->rotation[2], sign * b->rotation[3]};
      float d[4];
      quat_mul(ca, qb, d);
      const float sn = sqrtf(d[1] * d[1] + d[2] * d[2] + d[3] * d[3]);
      const float angle = 2.0f * atan2f(sn, d[0]); /* in [0, pi] since d[0] >= 0 */
      float u[3] = {0.0f, 0.0f, 0.0f};
      if (sn > 0.0f)
        for (int i = 0; i < 3; ++i) u[i] = d[i + 1] / sn;
      /* q(s) = qa (cos(s angle / 2), u sin(s angle / 2)) */
      const float h = 0.5f * s * angle;
      const float part[4] = {cosf(h), u[0] * sinf(h), u[1] * sinf(h), u[2] * sinf(h)};
      quat_mul(a->rotation, part, q);
      /* omega = R(qa) u angle / span: constant over the interval */
      float Ra[9], w[3];
      quat_to_matrix(a->rotation, Ra);
      for (int i = 0; i < 3; ++i) w[i] = u[i] * angle * inv;
      m3_apply(Ra, w, P->omega);
    }
  }
  /* a mesh sequence: the two frames around t (before the first and after the last: static) */
  P->frame = 0, P->frac = 0.0f, P->deforming = 0;
  if (c->geom.shape == SDF_MESH && c->n_frames > 1) {
    const double ft = t * (double)c->fps;
    if (ft >= (double)(c->n_frames - 1)) {
      P->frame = c->n_frames - 1;
    } else if (ft > 0.0) {
      P->frame = (int)floor(ft);
      P->frac = (float)(ft - (double)P->frame);
      P->deforming = 1;
    }
  }
  const float l = sqrtf(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  for (int i = 0; i < 4; ++i) q[i] /= l;
  quat_to_matrix(q, P->R);
  for (int i = 0; i < 3; ++i) P->center[i] = c->center[i] + T[i];
}

/* phi of mesh collider c at pose P at the local point xl, alone (no normal, no velocity): the
 * same value as collider_mesh_eval's, except that where every brick around xl lies beyond the
 * band outside (ls_far_outside) it is +band exactly, without reading the eight corners: the
 * particle collision step only asks phi < 0, and most particles are far from any collider. */
DR_HD float collider_mesh_phi(const boundary_params *bp, const collider *c, const collider_pose *P, const float xl[3]) {
  const levelset *A = &bp->levelsets[c->geom.levelset + P->frame];
  const int blend = P->deforming && P->frac > 0.0f;
  const int far_a = ls_far_outside(A, bp->ls_table, xl);
  const int far_b = blend ? ls_far_outside(A + 1, bp->ls_table, xl) : 1;
  if (far_a && far_b) return blend ? (1.0f - P->frac) * A->band + P->frac * A[1].band : A->band;
  float phi = far_a ? A->band : ls_sample(A, bp->ls_table, bp->ls_bricks, xl, NULL, 0, NULL);
  if (blend) {
    const float pb = far_b ? A[1].band : ls_sample(A + 1, bp->ls_table, bp->ls_bricks, xl, NULL, 0, NULL);
    phi = (1.0f - P->frac) * phi + P->frac * pb;
  }
  return phi;
}

/* The outward unit normal nl from the level set's gradient g (in place) at the local point xl of
 * frame A: where phi is flat (deep inside, |phi| clamped to the band) it points away from the
 * mesh's vertex centroid, the shortest way out for a convex shape, and never a NaN. */
DR_HD void mesh_normal(const levelset *A, float g[3], const float xl[3], float nl[3]) {
  float l = sqrtf(v3_dot(g, g));
  if (!(l > 1e-3f)) {
    for (int i = 0; i < 3; ++i) g[i] = xl[i] - A->centroid[i];
    l = sqrtf(v3_dot(g, g));
    if (!(l > 0.0f)) g[0] = 0.0f, g[1] = 1.0f, g[2] = 0.0f, l = 1.0f;
  }
  for (int i = 0; i < 3; ++i) nl[i] = g[i] / l;
}

/* phi, the outward unit normal nl and the surface velocity vl (m/s; zero for a static mesh) of
 * mesh collider c at pose P at the local point xl: the level set of the frame, or the linear
 * blend of the two frames around the pose's time, and the blend of their stored surface
 * velocities (the interval's per-vertex velocity at each frame's nearest surface point). The
 * normal is the continuous gradient of levelset.h (ls_gradient), computed only where the
 * collider acts (phi < act: bp->band for grid nodes, 0 for particles; elsewhere nl is (0, 1, 0)).
 * Where phi is flat (deep inside, |phi| clamped to the band) the normal points away from the
 * mesh's vertex centroid: the shortest way out for a convex shape, and never a NaN. */
DR_HD float collider_mesh_eval(const boundary_params *bp, const collider *c, const collider_pose *P, const float xl[3],
                               float act, float nl[3], float vl[3]) {
  const levelset *A = &bp->levelsets[c->geom.levelset + P->frame];
  float va[3];
  const int moving = P->deforming, blend = moving && P->frac > 0.0f;
  const float s = P->frac;
  float phi = ls_sample(A, bp->ls_table, bp->ls_bricks, xl, NULL, LS_VEL_OUT, moving ? va : NULL);
  for (int i = 0; i < 3; ++i) vl[i] = moving ? va[i] : 0.0f;
  if (blend) {
    float vb[3];
    const float pb = ls_sample(A + 1, bp->ls_table, bp->ls_bricks, xl, NULL, LS_VEL_IN, vb);
    phi = (1.0f - s) * phi + s * pb;
    for (int i = 0; i < 3; ++i) vl[i] = (1.0f - s) * vl[i] + s * vb[i];
  }
  nl[0] = 0.0f, nl[1] = 1.0f, nl[2] = 0.0f;
  if (!(phi < act)) return phi; /* the collider does not act here: no normal needed */
  float g[3];
  ls_gradient(A, bp->ls_table, bp->ls_bricks, xl, g);
  if (blend) {
    float gb[3];
    ls_gradient(A + 1, bp->ls_table, bp->ls_bricks, xl, gb);
    for (int i = 0; i < 3; ++i) g[i] = (1.0f - s) * g[i] + s * gb[i];
  }
  mesh_normal(A, g, xl, nl);
  return phi;
}

/* phi of collider c at pose P at the world point x and, where phi < act, its outward unit normal
 * n and its velocity vc at x (world frame; elsewhere n and vc are not set). The collider's
 * velocity is its rigid motion (keyframes) plus, for a mesh sequence, the surface's own velocity
 * turned into the world frame. */
DR_HD float collider_eval(const boundary_params *bp, const collider *c, const collider_pose *P, const float x[3],
                          float act, float n[3], float vc[3]) {
  float r[3], xl[3], nl[3], vl[3] = {0.0f, 0.0f, 0.0f};
  for (int i = 0; i < 3; ++i) r[i] = x[i] - P->center[i];
  m3_apply_t(P->R, r, xl);
  const float phi =
      c->geom.shape == SDF_MESH ? collider_mesh_eval(bp, c, P, xl, act, nl, vl) : sdf_eval(&c->geom, xl, nl);
  if (!(phi < act)) return phi;
  m3_apply(P->R, nl, n);
  float vs[3];
  v3_cross(P->omega, r, vc);
  m3_apply(P->R, vl, vs);
  for (int i = 0; i < 3; ++i) vc[i] += P->vel[i] + vs[i];
  return phi;
}

/* phi of collider c at pose P at the world point x, alone (cheap: no normal, no velocity). */
DR_HD float collider_phi(const boundary_params *bp, const collider *c, const collider_pose *P, const float x[3]) {
  float r[3], xl[3], nl[3];
  for (int i = 0; i < 3; ++i) r[i] = x[i] - P->center[i];
  m3_apply_t(P->R, r, xl);
  return c->geom.shape == SDF_MESH ? collider_mesh_phi(bp, c, P, xl) : sdf_eval(&c->geom, xl, nl);
}

/* 1 when mesh collider c at pose P cannot act on a node at the local point xl: every brick
 * around xl, in the frame (and the next one where the pose blends two), lies beyond the band
 * outside, where phi reads that level set's band, which is wider than the grid's act distance
 * bp->band (scene.c: 2 cells against half a cell). collider_mesh_eval would return a phi of at
 * least bp->band there after sampling 8 corners of up to 7 channels in each frame; this reads one
 * or two table entries a frame. Most nodes of the mesh's box are such nodes. */
DR_HD int collider_mesh_idle(const boundary_params *bp, const collider *c, const collider_pose *P, const float xl[3]) {
  const levelset *A = &bp->levelsets[c->geom.levelset + P->frame];
  if (!(A->band > bp->band) || !ls_far_outside(A, bp->ls_table, xl)) return 0;
  if (!(P->deforming && P->frac > 0.0f)) return 1;
  return A[1].band > bp->band && ls_far_outside(A + 1, bp->ls_table, xl);
}

/* A collider at pose P acting on a node at r from its centre (world frame) with velocity v (in
 * place): the local normal nl and surface velocity vl turned into the world, the collider's
 * velocity there taken out, the projection of its type, and put back. */
DR_HD void collider_act(const collider *c, const collider_pose *P, const float r[3], const float nl[3],
                        const float vl[3], float v[3]) {
  float n[3], vc[3], vs[3];
  m3_apply(P->R, nl, n);
  v3_cross(P->omega, r, vc);
  m3_apply(P->R, vl, vs);
  for (int i = 0; i < 3; ++i) {
    vc[i] += P->vel[i] + vs[i];
    v[i] -= vc[i];
  }
  bc_project(c->type, c->friction, n, v);
  for (int i = 0; i < 3; ++i) v[i] += vc[i];
}

/* A collider at pose P acting on the node at x with velocity v (in place) when phi(x) < band.
 * Returns 1 when it did. (collider_eval written out: through it, nvcc gave the grid update 98
 * registers instead of 80.) */
DR_HD int collider_apply(const boundary_params *bp, const collider *c, const collider_pose *P, const float x[3],
                         float v[3]) {
  float r[3], xl[3], nl[3], vl[3] = {0.0f, 0.0f, 0.0f};
  for (int i = 0; i < 3; ++i) r[i] = x[i] - P->center[i];
  m3_apply_t(P->R, r, xl);
  if (c->geom.shape == SDF_MESH && collider_mesh_idle(bp, c, P, xl)) return 0;
  const float phi =
      c->geom.shape == SDF_MESH ? collider_mesh_eval(bp, c, P, xl, bp->band, nl, vl) : sdf_eval(&c->geom, xl, nl);
  if (!(phi < bp->band)) return 0;
  collider_act(c, P, r, nl, vl, v);
  return 1;
}

/* A mesh collider's level-set samples at one local point, of the frame (k = 0) and of the next
 * one (k = 1): phi, the surface velocity (LS_VEL_OUT of the frame, LS_VEL_IN of the next) and
 * ls_gradient. collider_mesh_eval reads the same; a backend may keep them per grid node for as
 * long as the collider's pose and frame stay (the CUDA grid update does, for colliders without
 * keyframes), and collider_apply_cached then gives collider_apply's result from them. */
typedef struct mesh_samples {
  float phi[2], vel[2][3], grad[2][3];
} mesh_samples;

/* The samples of mesh collider c at pose P (its frame and whether it deforms; not its frac, which
 * collider_apply_cached blends with) at the local point xl. The next frame's are zero where the
 * pose cannot blend (a static mesh, or the last frame). */
DR_HD void collider_mesh_samples(const boundary_params *bp, const collider *c, const collider_pose *P,
                                 const float xl[3], mesh_samples *m) {
  const levelset *A = &bp->levelsets[c->geom.levelset + P->frame];
  const int moving = P->deforming, two = moving && P->frame + 1 < c->n_frames;
  for (int k = 0; k < 2; ++k) {
    m->phi[k] = 0.0f;
    for (int i = 0; i < 3; ++i) m->vel[k][i] = m->grad[k][i] = 0.0f;
  }
  m->phi[0] = ls_sample(A, bp->ls_table, bp->ls_bricks, xl, NULL, LS_VEL_OUT, moving ? m->vel[0] : NULL);
  ls_gradient(A, bp->ls_table, bp->ls_bricks, xl, m->grad[0]);
  if (two) {
    m->phi[1] = ls_sample(A + 1, bp->ls_table, bp->ls_bricks, xl, NULL, LS_VEL_IN, m->vel[1]);
    ls_gradient(A + 1, bp->ls_table, bp->ls_bricks, xl, m->grad[1]);
  }
}

/* collider_apply for mesh collider c at pose P on the node at x, from its samples m (taken at the
 * same local point, the same frame and whether it deforms): collider_mesh_eval's blend of the
 * two frames by P's frac, the same arithmetic, so the same result. */
DR_HD int collider_apply_cached(const boundary_params *bp, const collider *c, const collider_pose *P, const float x[3],
                                const mesh_samples *m, float v[3]) {
  float r[3], xl[3];
  for (int i = 0; i < 3; ++i) r[i] = x[i] - P->center[i];
  m3_apply_t(P->R, r, xl);
  const int moving = P->deforming, blend = moving && P->frac > 0.0f;
  const float s = P->frac;
  float phi = m->phi[0], vl[3];
  for (int i = 0; i < 3; ++i) vl[i] = moving ? m->vel[0][i] : 0.0f;
  if (blend) {
    phi = (1.0f - s) * phi + s * m->phi[1];
    for (int i = 0; i < 3; ++i) vl[i] = (1.0f - s) * vl[i] + s * m->vel[1][i];
  }
  if (!(phi < bp->band)) return 0;
  float g[3], nl[3];
  for (int i = 0; i < 3; ++i) g[i] = m->grad[0][i];
  if (blend)
    for (int i = 0; i < 3; ++i) g[i] = (1.0f - s) * g[i] + s * m->grad[1][i];
  mesh_normal(&bp->levelsets[c->geom.levelset + P->frame], g, xl, nl);
  collider_act(c, P, r, nl, vl, v);
  return 1;
}

/* The particle collision step (G2P, after advection; see the top of this file): a particle at x
 * (m) with velocity v inside a slip or separate collider c at pose P (phi(x) < 0) moves out along
 * the collider's normal by its depth, at most *room (m, which the move uses up), and its
 * velocity relative to the collider is projected as the collider's type says, as for a grid
 * node. A sticky collider keeps the material it holds. x and v in place; returns 1 when the
 * particle was inside. */
DR_HD int collider_push(const boundary_params *bp, const collider *c, const collider_pose *P, float x[3], float v[3],
                        float *room) {
  if (c->type == BOUNDARY_STICKY || !(collider_phi(bp, c, P, x) < 0.0f)) return 0;
  float n[3] = {0.0f, 1.0f, 0.0f}, vc[3] = {0.0f, 0.0f, 0.0f}; /* (set by collider_eval where phi < 0) */
  const float phi = collider_eval(bp, c, P, x, 0.0f, n, vc);
  if (!(phi < 0.0f)) return 0;
  const float move = fminf(-phi, *room);
  *room -= move;
  for (int i = 0; i < 3; ++i) {
    x[i] += move * n[i];
    v[i] -= vc[i];
  }
  bc_project(c->type, c->friction, n, v);
  for (int i = 0; i < 3; ++i) v[i] += vc[i];
  return 1;
}

/* The domain faces on the node at x with velocity v (in place). */
DR_HD void boundary_apply_faces(const boundary_params *bp, const float x[3], float v[3]) {
  for (int a = 0; a < 3; ++a) {
    if (x[a] < bp->lo[a]) bc_project_axis(bp->type[2 * a], bp->friction[2 * a], a, 1.0f, v);
    else if (x[a] > bp->hi[a]) bc_project_axis(bp->type[2 * a + 1], bp->friction[2 * a + 1], a, -1.0f, v);
  }
}

/* Every boundary condition on the node at x with velocity v (in place), the colliders at the
 * poses given (poses[k] = collider_pose_at(colliders[k], keys, t), computed once per grid
 * update where that is cheaper, as the CPU backend does). */
DR_HD void boundary_apply_posed(const boundary_params *bp, const collider_pose *poses, const float x[3], float v[3]) {
  for (int k = 0; k < bp->n_colliders; ++k) collider_apply(bp, &bp->colliders[k], &poses[k], x, v);
  boundary_apply_faces(bp, x, v);
}

/* The particle collision step of every collider on the particle at x with velocity v (in place,
 * after advection; poses at the step's end, as for the grid update). room (m): how far the
 * colliders may move the particle in all (boundary_push_room). Returns 1 when a collider held
 * the particle. */
DR_HD int boundary_push_posed(const boundary_params *bp, const collider_pose *poses, float x[3], float v[3],
                              float room) {
  int any = 0;
  for (int k = 0; k < bp->n_colliders; ++k) any |= collider_push(bp, &bp->colliders[k], &poses[k], x, v, &room);
  return any;
}

/* How far the particle collision step may move a particle that advection moved by at most
 * `moved` (m) along any axis this step: half a cell, and never so far that the particle moves a
 * whole cell along an axis in one step (the free zone's slack, backend.h's runaway speed). */
DR_HD float boundary_push_room(float dx, float moved) { return fmaxf(0.0f, fminf(0.5f * dx, 0.99f * dx - moved)); }

/* The same with the poses computed here at time t (the CUDA grid update: one node per thread). */
DR_HD void boundary_apply(const boundary_params *bp, double t, const float x[3], float v[3]) {
  for (int k = 0; k < bp->n_colliders; ++k) {
    collider_pose P;
    collider_pose_at(&bp->colliders[k], bp->keys, t, &P);
    collider_apply(bp, &bp->colliders[k], &P, x, v);
  }
  boundary_apply_faces(bp, x, v);
}

#endif
