/* sdf.h - analytic signed distance functions of the collider shapes, and the quaternion and
 * small-vector helpers that the collider motion needs. Shared by the CPU and CUDA backends
 * (common.h gives the host+device qualifier) and by the sampling of rotated bodies.
 *
 * Every shape is described in its own local frame, centred on its reference point (the plane's
 * point, the box's, sphere's and cylinder's centre). sdf_eval() returns phi < 0 inside the
 * solid, phi > 0 outside, |phi| the Euclidean distance to the surface (exact for the plane, the
 * sphere and the box; the capped cylinder is exact outside and on the faces, and inside it takes
 * the nearer of the side and the caps, which is exact too), and the outward unit normal n, the
 * gradient of phi where it is defined. Where the gradient is not defined (the centre of a
 * sphere, the axis of a cylinder, the medial planes of a box) a valid unit normal of one of the
 * nearest faces is returned, never a NaN.
 *
 * Quaternions are float[4] = (w, x, y, z), unit length for rotations; a rotation by angle a
 * about the unit axis u is (cos(a/2), u sin(a/2)). */
#ifndef DRIFT_PHYSICS_SDF_H
#define DRIFT_PHYSICS_SDF_H

#include "physics/common.h"

enum sdf_shape {
  SDF_PLANE = 0,    /* half-space behind the plane: phi = n . x */
  SDF_BOX = 1,      /* box of half extents half[3] */
  SDF_SPHERE = 2,   /* ball of radius r */
  SDF_CYLINDER = 3, /* capped cylinder along axis, radius r, length 2 half_height */
  SDF_MESH = 4      /* a triangle mesh's narrow-band level set (levelset.h): boundary.h evaluates it,
                     * since it needs the level sets of boundary_params; sdf_eval does not */
};

/* A shape in its local frame. Which fields count depends on shape. */
typedef struct sdf_geom {
  int shape;          /* enum sdf_shape */
  float n[3];         /* plane: unit normal pointing out of the solid; cylinder: unit axis */
  float half[3];      /* box: half extents (m) */
  float r;            /* sphere, cylinder: radius (m) */
  float half_height;  /* cylinder: half of the length along the axis (m) */
  int levelset;       /* mesh: index of its (first) level set in boundary_params.levelsets */
} sdf_geom;

DR_HD float v3_dot(const float a[3], const float b[3]) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }

DR_HD void v3_cross(const float a[3], const float b[3], float out[3]) {
  out[0] = a[1] * b[2] - a[2] * b[1];
  out[1] = a[2] * b[0] - a[0] * b[2];
  out[2] = a[0] * b[1] - a[1] * b[0];
}

/* out = R a, out = R^T a (row-major R) */
DR_HD void m3_apply(const float R[9], const float a[3], float out[3]) {
  for (int i = 0; i < 3; ++i) out[i] = R[3 * i] * a[0] + R[3 * i + 1] * a[1] + R[3 * i + 2] * a[2];
}
DR_HD void m3_apply_t(const float R[9], const float a[3], float out[3]) {
  for (int i = 0; i < 3; ++i) out[i] = R[i] * a[0] + R[3 + i] * a[1] + R[6 + i] * a[2];
}

/* Rotation matrix (row-major) of a unit quaternion. */
DR_HD void quat_to_matrix(const float q[4], float R[9]) {
  const float w = q[0], x = q[1], y = q[2], z = q[3];
  R[0] = 1.0f - 2.0f * (y * y + z * z);
  R[1] = 2.0f * (x * y - w * z);
  R[2] = 2.0f * (x * z + w * y);
  R[3] = 2.0f * (x * y + w * z);
  R[4] = 1.0f - 2.0f * (x * x + z * z);
  R[5] = 2.0f * (y * z - w * x);
  R[6] = 2.0f * (x * z - w * y);
  R[7] = 2.0f * (y * z + w * x);
  R[8] = 1.0f - 2.0f * (x * x + y * y);
}

/* out = a b (the rotation b first, then a); out may not alias a or b. */
DR_HD void quat_mul(const float a[4], const float b[4], float out[4]) {
  out[0] = a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3];
  out[1] = a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2];
  out[2] = a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1];
  out[3] = a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0];
}

/* Euclidean norm of a 2-vector without overflow for the magnitudes a scene can hold. */
DR_HD float sdf_len2_(float a, float b) { return sqrtf(a * a + b * b); }

/* A unit vector perpendicular to the unit vector a. */
DR_HD void sdf_perpendicular_(const float a[3], float out[3]) {
  const float e[3] = {fabsf(a[0]) < 0.57f ? 1.0f : 0.0f, fabsf(a[0]) < 0.57f ? 0.0f : 1.0f, 0.0f};
  v3_cross(a, e, out);
  const float l = sqrtf(v3_dot(out, out));
  for (int i = 0; i < 3; ++i) out[i] /= l;
}

/* phi and the outward unit normal n of the shape at the local point x. */
DR_HD float sdf_eval(const sdf_geom *g, const float x[3], float n[3]) {
  switch (g->shape) {
  case SDF_PLANE:
    for (int i = 0; i < 3; ++i) n[i] = g->n[i];
    return v3_dot(x, g->n);
  case SDF_SPHERE: {
    const float l = sqrtf(v3_dot(x, x));
    if (l > 0.0f) {
      for (int i = 0; i < 3; ++i) n[i] = x[i] / l;
    } else {
      n[0] = 0.0f, n[1] = 1.0f, n[2] = 0.0f;
    }
    return l - g->r;
  }
  case SDF_BOX: {
    float d[3], o2 = 0.0f, dmax = -INFINITY;
    int k = 0;
    for (int i = 0; i < 3; ++i) {
      d[i] = fabsf(x[i]) - g->half[i];
      if (d[i] > 0.0f) o2 += d[i] * d[i];
      if (d[i] > dmax) dmax = d[i], k = i;
    }
    if (dmax > 0.0f) { /* outside: distance to the nearest point of the box */
      const float o = sqrtf(o2);
      for (int i = 0; i < 3; ++i) n[i] = d[i] > 0.0f ? copysignf(d[i] / o, x[i]) : 0.0f;
      return o;
    }
    for (int i = 0; i < 3; ++i) n[i] = 0.0f; /* inside: the nearest face */
    n[k] = x[k] < 0.0f ? -1.0f : 1.0f;
    return dmax;
  }
  case SDF_CYLINDER: {
    const float a = v3_dot(x, g->n);
    float rad[3];
    for (int i = 0; i < 3; ++i) rad[i] = x[i] - a * g->n[i];
    const float rho = sqrtf(v3_dot(rad, rad));
    if (rho > 0.0f) {
      for (int i = 0; i < 3; ++i) rad[i] /= rho;
    } else {
      sdf_perpendicular_(g->n, rad);
    }
    const float ax = a < 0.0f ? -1.0f : 1.0f;
    const float dr = rho - g->r, da = fabsf(a) - g->half_height;
    if (dr > 0.0f || da > 0.0f) {
      const float pr = fmaxf(dr, 0.0f), pa = fmaxf(da, 0.0f), o = sdf_len2_(pr, pa);
      for (int i = 0; i < 3; ++i) n[i] = (pr * rad[i] + pa * ax * g->n[i]) / o;
      return o;
    }
    if (dr > da) {
      for (int i = 0; i < 3; ++i) n[i] = rad[i];
      return dr;
    }
    for (int i = 0; i < 3; ++i) n[i] = ax * g->n[i];
    return da;
  }
  default: /* not a shape this build evaluates: never inside */
    n[0] = 0.0f, n[1] = 1.0f, n[2] = 0.0f;
    return INFINITY;
  }
}

#endif
