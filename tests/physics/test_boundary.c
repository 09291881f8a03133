/* test_boundary - the boundary conditions of src/physics/boundary.h and the signed distance
 * functions of src/physics/sdf.h against expectations derived here:
 *   - each shape's phi equals the Euclidean distance to its surface computed another way
 *     (closest points by clamping, in double), negative inside; the normal is a unit vector
 *     and phi grows at rate 1 along it (a distance field's gradient);
 *   - the wall types: sticky stops, slip removes the normal part only, separate lets go and
 *     shortens the tangential part by friction |v_n| (Coulomb); the axis-aligned form used by
 *     the domain faces equals the general one;
 *   - keyframed motion: constant before the first and after the last key, linear translation,
 *     slerp at a constant angular velocity, and the collider velocity equal to the time
 *     derivative (central differences) of where a point of the collider goes;
 *   - collider_apply and boundary_apply: nodes outside a collider untouched, the relative
 *     velocity projected inside, a sticky moving collider imposing its own velocity (rotation
 *     included), and each face of the domain acting with its own type;
 *   - the particle collision step (collider_push, boundary_push_posed): a particle outside is
 *     untouched, one inside a separate or slip collider moves out to the surface along the
 *     normal (at most by the room it is given, which several colliders share) and takes the
 *     collider's normal speed; a sticky collider keeps what it holds. */
#include <math.h>
#include <string.h>

#include "physics/boundary.h"
#include "physics/check.h"

static double len3(const double a[3]) { return sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]); }

/* Exact signed distances in double, written as closest-point problems. */
static double ref_box(const double h[3], const double x[3]) {
  double q[3], out = 0, in = INFINITY;
  int inside = 1;
  for (int i = 0; i < 3; ++i) {
    double c = fmin(fmax(x[i], -h[i]), h[i]); /* the closest point of the solid box */
    q[i] = x[i] - c;
    inside &= fabs(x[i]) <= h[i];
    in = fmin(in, h[i] - fabs(x[i])); /* distance to the nearest face from inside */
  }
  out = len3(q);
  return inside ? -in : out;
}

static double ref_cylinder(const double axis[3], double r, double hh, const double x[3]) {
  double a = x[0] * axis[0] + x[1] * axis[1] + x[2] * axis[2];
  double rad[3] = {x[0] - a * axis[0], x[1] - a * axis[1], x[2] - a * axis[2]};
  double rho = len3(rad);
  if (rho <= r && fabs(a) <= hh) return -fmin(r - rho, hh - fabs(a));
  double cr = fmin(rho, r), ca = fmin(fmax(a, -hh), hh); /* closest point in the (rho, a) half-plane */
  return sqrt((rho - cr) * (rho - cr) + (a - ca) * (a - ca));
}

static void test_sdf(void) {
  check_rng rng = {12345};
  sdf_geom box = {.shape = SDF_BOX, .half = {0.3f, 0.1f, 0.2f}};
  sdf_geom sph = {.shape = SDF_SPHERE, .r = 0.25f};
  sdf_geom pl = {.shape = SDF_PLANE, .n = {0.0f, 0.6f, 0.8f}};
  sdf_geom cyl = {.shape = SDF_CYLINDER, .n = {0.0f, 0.0f, 1.0f}, .r = 0.15f, .half_height = 0.25f};
  const double hb[3] = {0.3, 0.1, 0.2}, ax[3] = {0, 0, 1};
  double worst[4] = {0, 0, 0, 0}, worst_rate = 0, worst_unit = 0;
  int n_in[4] = {0, 0, 0, 0};
  for (int k = 0; k < 20000; ++k) {
    double xd[3];
    float x[3];
    for (int i = 0; i < 3; ++i) xd[i] = check_rng_range(&rng, -0.6, 0.6), x[i] = (float)xd[i];
    for (int i = 0; i < 3; ++i) xd[i] = x[i]; /* the float point exactly */
    const sdf_geom *g[4] = {&box, &sph, &pl, &cyl};
    double ref[4] = {ref_box(hb, xd), len3(xd) - 0.25, 0.6 * xd[1] + 0.8 * xd[2], ref_cylinder(ax, 0.15, 0.25, xd)};
    for (int s = 0; s < 4; ++s) {
      float n[3];
      float phi = sdf_eval(g[s], x, n);
      worst[s] = fmax(worst[s], fabs(phi - ref[s]));
      n_in[s] += phi < 0;
      worst_unit = fmax(worst_unit, fabs(sqrt((double)n[0] * n[0] + (double)n[1] * n[1] + (double)n[2] * n[2]) - 1));
      /* phi grows at rate 1 along n (a small step does not cross a crease but in rare cases) */
      const float h = 1e-3f;
      float y[3] = {x[0] + h * n[0], x[1] + h * n[1], x[2] + h * n[2]}, m[3];
      double rate = (sdf_eval(g[s], y, m) - phi) / h;
      if (fabs(rate - 1) > 0.01) {
        /* allowed only next to a crease: the step's end is nearer another face */
        CHECK(fabs(phi) < 2e-3 || s == 0 || s == 3, "shape %d: phi grows at rate %g along n at (%g %g %g)", s, rate,
              xd[0], xd[1], xd[2]);
      } else {
        worst_rate = fmax(worst_rate, fabs(rate - 1));
      }
    }
  }
  for (int s = 0; s < 4; ++s) {
    CHECK(worst[s] < 2e-6, "shape %d: phi differs from the exact distance by %g", s, worst[s]);
    CHECK(n_in[s] > 100 && n_in[s] < 19900, "shape %d: %d of 20000 points inside", s, n_in[s]);
  }
  CHECK(worst_unit < 1e-6, "normals are off unit length by %g", worst_unit);
  CHECK(worst_rate < 0.01, "phi grows along n at a rate off 1 by %g", worst_rate);
  /* degenerate points still give unit normals, no NaN */
  const float o[3] = {0, 0, 0}, on_axis[3] = {0, 0, 0.1f};
  float n[3];
  CHECK(sdf_eval(&sph, o, n) == -0.25f && fabsf(v3_dot(n, n) - 1) < 1e-6f, "sphere centre");
  CHECK(sdf_eval(&cyl, on_axis, n) == -0.15f && fabsf(v3_dot(n, n) - 1) < 1e-6f, "cylinder axis");
  CHECK(sdf_eval(&box, o, n) == -0.1f && n[1] != 0, "box centre: nearest face is y");
}

static void test_wall_types(void) {
  check_rng rng = {777};
  for (int k = 0; k < 2000; ++k) {
    float n[3], v[3], w[3];
    double l = 0;
    for (int i = 0; i < 3; ++i) n[i] = (float)check_rng_range(&rng, -1, 1), l += (double)n[i] * n[i];
    for (int i = 0; i < 3; ++i) n[i] = (float)(n[i] / sqrt(l)), v[i] = (float)check_rng_range(&rng, -2, 2);
    const float mu = (float)check_rng_range(&rng, 0, 1.5);
    const float vn = v3_dot(v, n);
    float vt[3];
    for (int i = 0; i < 3; ++i) vt[i] = v[i] - vn * n[i];
    const float t = sqrtf(v3_dot(vt, vt));

    memcpy(w, v, sizeof w);
    bc_project(BOUNDARY_STICKY, mu, n, w);
    CHECK(w[0] == 0 && w[1] == 0 && w[2] == 0, "sticky leaves a velocity");

    memcpy(w, v, sizeof w);
    bc_project(BOUNDARY_SLIP, 0, n, w);
    CHECK(fabsf(v3_dot(w, n)) < 1e-6f, "slip leaves a normal velocity %g", v3_dot(w, n));
    for (int i = 0; i < 3; ++i) CHECK(fabsf(w[i] - vt[i]) < 1e-6f, "slip changes the tangential velocity");

    memcpy(w, v, sizeof w);
    bc_project(BOUNDARY_SEPARATE, mu, n, w);
    if (vn >= 0) {
      CHECK(!memcmp(w, v, sizeof w), "separate holds back material that leaves the wall");
    } else {
      const float want = fmaxf(0.0f, t - mu * -vn); /* Coulomb: |v_t| shrinks by mu |v_n| */
      const float got = sqrtf(v3_dot(w, w));
      CHECK(fabsf(v3_dot(w, n)) < 1e-6f, "separate leaves motion into the wall");
      CHECK(fabsf(got - want) < 1e-5f, "separate: |v_t| %g, expected %g", got, want);
      if (want > 1e-3f) CHECK(v3_dot(w, vt) > 0.999f * got * t, "separate turns the tangential velocity");
    }
  }
  /* the domain faces' axis-aligned form is the general one with n = +-e_axis */
  for (int k = 0; k < 2000; ++k) {
    float v[3], w[3], u[3], n[3] = {0, 0, 0};
    for (int i = 0; i < 3; ++i) v[i] = (float)check_rng_range(&rng, -2, 2);
    const int axis = k % 3, type = (k / 3) % 3;
    const float inward = (k / 9) % 2 ? 1.0f : -1.0f, mu = (float)check_rng_range(&rng, 0, 1);
    n[axis] = inward;
    memcpy(w, v, sizeof w);
    memcpy(u, v, sizeof u);
    bc_project_axis(type, mu, axis, inward, w);
    bc_project(type, mu, n, u);
    for (int i = 0; i < 3; ++i) CHECK(fabsf(w[i] - u[i]) < 1e-6f, "axis form differs (type %d axis %d)", type, axis);
  }
}

/* Where the collider point X (rest pose) is at time t. */
static void carry(const collider *c, const collider_key *keys, double t, const float X[3], double out[3]) {
  collider_pose P;
  collider_pose_at(c, keys, t, &P);
  float r[3], x[3];
  for (int i = 0; i < 3; ++i) r[i] = X[i] - c->center[i];
  m3_apply(P.R, r, x);
  for (int i = 0; i < 3; ++i) out[i] = (double)P.center[i] + x[i];
}

static void quat(float axis_x, float axis_y, float axis_z, float deg, float q[4]) {
  const float l = sqrtf(axis_x * axis_x + axis_y * axis_y + axis_z * axis_z), h = 0.5f * deg * 3.14159265f / 180;
  q[0] = cosf(h), q[1] = axis_x / l * sinf(h), q[2] = axis_y / l * sinf(h), q[3] = axis_z / l * sinf(h);
}

static void test_motion(void) {
  collider c = {.geom = {.shape = SDF_SPHERE, .r = 0.1f}, .center = {1, 2, 3}, .type = BOUNDARY_STICKY};
  collider_pose P;
  /* static */
  collider_pose_at(&c, NULL, 5.0, &P);
  CHECK(P.center[0] == 1 && P.center[1] == 2 && P.center[2] == 3 && P.R[0] == 1 && P.R[4] == 1 && P.R[8] == 1,
        "a collider without keys moves");
  CHECK(P.vel[0] == 0 && P.omega[2] == 0, "a static collider has a velocity");

  /* two keys: 0.5 m along x and a quarter turn about z between t = 1 and t = 3 */
  collider_key k[3];
  memset(k, 0, sizeof k);
  k[0].time = 1;
  quat(0, 0, 1, 0, k[0].rotation);
  k[1].time = 3;
  k[1].translation[0] = 0.5f;
  quat(0, 0, 1, 90, k[1].rotation);
  c.key0 = 0;
  c.n_keys = 2;
  collider_pose_at(&c, k, 0.0, &P);
  CHECK(P.center[0] == 1 && P.vel[0] == 0 && fabsf(P.R[0] - 1) < 1e-7f, "before the first key: the first pose, at rest");
  collider_pose_at(&c, k, 10.0, &P);
  CHECK(fabsf(P.center[0] - 1.5f) < 1e-6f && P.vel[0] == 0 && P.omega[2] == 0, "after the last key: the last pose, at rest");
  CHECK(fabsf(P.R[1] + 1) < 1e-6f && fabsf(P.R[3] - 1) < 1e-6f, "after the last key: a quarter turn about z");
  collider_pose_at(&c, k, 1.5, &P); /* a quarter of the way: 22.5 degrees */
  const double a = 22.5 * 3.14159265358979 / 180;
  CHECK(fabsf(P.center[0] - 1.125f) < 1e-6f, "translation at a quarter: %g", P.center[0]);
  CHECK(fabs(P.R[0] - cos(a)) < 1e-6 && fabs(P.R[1] + sin(a)) < 1e-6 && fabs(P.R[3] - sin(a)) < 1e-6,
        "rotation at a quarter of the interval is not 22.5 degrees");
  CHECK(fabsf(P.vel[0] - 0.25f) < 1e-6f && fabsf(P.omega[2] - 0.785398f) < 1e-5f && fabsf(P.omega[0]) < 1e-7f,
        "velocity (%g) or angular velocity (%g) off", P.vel[0], P.omega[2]);

  /* random keys: the velocity a pose gives at a point is the derivative of where it goes */
  check_rng rng = {99};
  for (int trial = 0; trial < 200; ++trial) {
    collider_key kk[3];
    memset(kk, 0, sizeof kk);
    float q0[4] = {1, 0, 0, 0};
    for (int j = 0; j < 3; ++j) {
      kk[j].time = j == 0 ? check_rng_range(&rng, -1, 1) : kk[j - 1].time + check_rng_range(&rng, 0.2, 2);
      for (int i = 0; i < 3; ++i) kk[j].translation[i] = (float)check_rng_range(&rng, -1, 1);
      float dq[4];
      quat((float)check_rng_range(&rng, -1, 1), (float)check_rng_range(&rng, -1, 1), (float)check_rng_range(&rng, -1, 1),
           (float)check_rng_range(&rng, -170, 170), dq);
      quat_mul(dq, q0, kk[j].rotation);
      memcpy(q0, kk[j].rotation, sizeof q0);
    }
    collider cc = c;
    cc.n_keys = 3;
    const double t = check_rng_range(&rng, kk[0].time + 0.01, kk[2].time - 0.01), h = 1e-3;
    if (fabs(t - kk[1].time) < 2 * h) continue; /* the velocity jumps at a key */
    const float X[3] = {(float)check_rng_range(&rng, 0, 2), (float)check_rng_range(&rng, 1, 3),
                        (float)check_rng_range(&rng, 2, 4)};
    double xa[3], xb[3], x0[3];
    carry(&cc, kk, t - h, X, xa);
    carry(&cc, kk, t + h, X, xb);
    carry(&cc, kk, t, X, x0);
    collider_pose_at(&cc, kk, t, &P);
    float r[3] = {(float)x0[0] - P.center[0], (float)x0[1] - P.center[1], (float)x0[2] - P.center[2]}, v[3];
    v3_cross(P.omega, r, v);
    double err = 0, mag = 0;
    for (int i = 0; i < 3; ++i) {
      const double fd = (xb[i] - xa[i]) / (2 * h);
      err = fmax(err, fabs(v[i] + P.vel[i] - fd));
      mag = fmax(mag, fabs(fd));
    }
    CHECK(err < 2e-2 * (1 + mag), "trial %d: collider velocity off the derivative of its motion by %g (|v| %g)", trial,
          err, mag);
  }
}

/* boundary params with only the band set (the analytic colliders need nothing else) */
static const boundary_params *band_(float band) {
  static boundary_params bp;
  memset(&bp, 0, sizeof bp);
  bp.band = band;
  return &bp;
}

static void test_apply(void) {
  /* a box 0.5 x 0.5 x 0.5 around (0, 0, 0) moving at (1, 0, 0) and turning about y at 2 rad/s */
  collider c = {.geom = {.shape = SDF_BOX, .half = {0.25f, 0.25f, 0.25f}}, .center = {0, 0, 0}, .type = BOUNDARY_STICKY,
                .n_keys = 2};
  collider_key k[2];
  memset(k, 0, sizeof k);
  k[0].time = 0;
  quat(0, 1, 0, 0, k[0].rotation);
  k[1].time = 0.5;
  k[1].translation[0] = 0.5f;
  quat(0, 1, 0, 57.29578f, k[1].rotation); /* 1 rad in 0.5 s */
  collider_pose P;
  collider_pose_at(&c, k, 0.25, &P);
  const float in[3] = {0.25f + 0.1f, 0, 0.1f}, out[3] = {0.25f + 0.4f, 0, 0};
  float v[3] = {3, -2, 1};
  CHECK(collider_apply(band_(0.0f), &c, &P, out, v) == 0 && v[0] == 3 && v[1] == -2 && v[2] == 1, "a node outside is changed");
  CHECK(collider_apply(band_(0.0f), &c, &P, in, v) == 1, "a node inside is not seen");
  /* sticky: the collider's velocity at the node, (1, 0, 0) + (0, 2, 0) x (0.1, 0, 0.1) = (1.2, 0, -0.2) */
  CHECK(fabsf(v[0] - 1.2f) < 1e-5f && fabsf(v[1]) < 1e-6f && fabsf(v[2] + 0.2f) < 1e-5f,
        "sticky moving collider gives (%g %g %g), expected (1.2 0 -0.2)", v[0], v[1], v[2]);
  /* separate: material leaving the collider faster than it moves is let go; material pushed is
   * carried at the collider's normal speed (the nearest face here is +x, normal (cos 0.5, 0, -sin 0.5)) */
  c.type = BOUNDARY_SEPARATE;
  const float p[3] = {0.25f + 0.2f, 0, 0};
  float fast[3] = {3, 0, 0}, slow[3] = {0, 0, 0};
  collider_apply(band_(0.0f), &c, &P, p, fast);
  CHECK(fast[0] == 3 && fast[1] == 0 && fast[2] == 0, "separate holds back material moving away");
  collider_apply(band_(0.0f), &c, &P, p, slow);
  float n[3] = {cosf(0.5f), 0, -sinf(0.5f)}, vc[3] = {1, 0, -0.4f}; /* (1,0,0) + (0,2,0) x (0.2,0,0) */
  CHECK(fabsf(v3_dot(slow, n) - v3_dot(vc, n)) < 1e-5f, "separate: normal speed %g, the collider's %g",
        v3_dot(slow, n), v3_dot(vc, n));

  /* the band: a node outside the collider but closer than band is held too */
  const float near[3] = {0.25f + 0.28f * cosf(0.5f), 0, -0.28f * sinf(0.5f)}; /* 0.03 m outside the +x face */
  float vn2[3] = {-1, 0, 0};
  CHECK(collider_apply(band_(0.02f), &c, &P, near, vn2) == 0, "a node 0.03 m away is held by a band of 0.02 m");
  float rn[3] = {near[0] - 0.25f, 0, near[2]}, vcn[3];
  v3_cross(P.omega, rn, vcn);
  vcn[0] += 1.0f; /* the collider's velocity there */
  CHECK(collider_apply(band_(0.05f), &c, &P, near, vn2) == 1 && fabsf(v3_dot(vn2, n) - v3_dot(vcn, n)) < 1e-5f,
        "a node 0.03 m away is not held by a band of 0.05 m");

  /* boundary_apply: each face its own type; the colliders first */
  boundary_params bp;
  memset(&bp, 0, sizeof bp);
  for (int f = 0; f < DR_FACES; ++f) bp.type[f] = BOUNDARY_SLIP;
  bp.type[FACE_YMIN] = BOUNDARY_SEPARATE;
  bp.friction[FACE_YMIN] = 0.5f;
  bp.type[FACE_XMAX] = BOUNDARY_STICKY;
  for (int a = 0; a < 3; ++a) bp.lo[a] = 0.1f, bp.hi[a] = 0.9f;
  const float floor_node[3] = {0.5f, 0.05f, 0.5f}, xmin_node[3] = {0.05f, 0.5f, 0.5f}, xmax_node[3] = {0.95f, 0.5f, 0.5f};
  float w[3] = {2, -1, 0};
  boundary_apply(&bp, 0, floor_node, w); /* rough floor: v_y removed, |v_t| 2 - 0.5 * 1 */
  CHECK(w[1] == 0 && fabsf(w[0] - 1.5f) < 1e-6f, "rough floor gives (%g %g %g)", w[0], w[1], w[2]);
  float u[3] = {-1, 2, 3};
  boundary_apply(&bp, 0, xmin_node, u); /* slip side wall: only v_x removed */
  CHECK(u[0] == 0 && u[1] == 2 && u[2] == 3, "slip side wall gives (%g %g %g)", u[0], u[1], u[2]);
  float z[3] = {1, 2, 3};
  boundary_apply(&bp, 0, xmax_node, z);
  CHECK(z[0] == 0 && z[1] == 0 && z[2] == 0, "sticky face x+ leaves (%g %g %g)", z[0], z[1], z[2]);
  /* a sticky sphere collider over the floor node: colliders first, then the floor lets it be */
  collider sph = {.geom = {.shape = SDF_SPHERE, .r = 0.1f}, .center = {0.5f, 0.05f, 0.5f}, .type = BOUNDARY_STICKY};
  bp.n_colliders = 1;
  bp.colliders = &sph;
  float s2[3] = {2, -1, 0};
  boundary_apply(&bp, 0, floor_node, s2);
  CHECK(s2[0] == 0 && s2[1] == 0 && s2[2] == 0, "sticky collider over the floor gives (%g %g %g)", s2[0], s2[1], s2[2]);
}

/* The particle collision step: a separate sphere of radius 0.1 m moving at (1, 0, 0). */
static void test_push(void) {
  collider c = {.geom = {.shape = SDF_SPHERE, .r = 0.1f}, .center = {0, 0, 0}, .type = BOUNDARY_SEPARATE, .n_keys = 2};
  collider_key k[2];
  memset(k, 0, sizeof k);
  quat(0, 1, 0, 0, k[0].rotation);
  quat(0, 1, 0, 0, k[1].rotation);
  k[1].time = 1;
  k[1].translation[0] = 1;
  collider_pose P;
  collider_pose_at(&c, k, 0.5, &P); /* centre (0.5, 0, 0), velocity (1, 0, 0) */
  /* outside: untouched, bit for bit */
  float x[3] = {0.5f, 0.12f, 0}, v[3] = {0.3f, -2, 0.1f}, room = 0.05f;
  CHECK(collider_push(band_(0.0f), &c, &P, x, v, &room) == 0 && x[0] == 0.5f && x[1] == 0.12f && x[2] == 0 &&
            v[0] == 0.3f && v[1] == -2 && v[2] == 0.1f && room == 0.05f,
        "a particle outside is changed");
  /* 3 cm deep below the top, moving down at 2 m/s: out to the surface, the normal motion into the
   * sphere removed, the rest kept (no friction) */
  x[1] = 0.07f;
  CHECK(collider_push(band_(0.0f), &c, &P, x, v, &room) == 1, "a particle 3 cm inside is not seen");
  CHECK(fabsf(x[0] - 0.5f) < 1e-6f && fabsf(x[1] - 0.1f) < 1e-6f && x[2] == 0 && fabsf(room - 0.02f) < 1e-6f,
        "pushed to (%g %g %g), room left %g; expected (0.5 0.1 0) and 0.02", x[0], x[1], x[2], room);
  CHECK(fabsf(v[0] - 0.3f) < 1e-6f && fabsf(v[1]) < 1e-6f && fabsf(v[2] - 0.1f) < 1e-6f,
        "velocity (%g %g %g) after the push, expected (0.3 0 0.1)", v[0], v[1], v[2]);
  /* deeper than the room: moved by the room only, along the normal */
  float y[3] = {0.5f, 0.05f, 0}, w[3] = {0, 0, 0};
  room = 0.02f;
  collider_push(band_(0.0f), &c, &P, y, w, &room);
  CHECK(fabsf(y[1] - 0.07f) < 1e-6f && room == 0.0f, "a particle 5 cm deep with 2 cm of room went to y = %g (room %g)",
        y[1], room);
  /* on the leading side, at rest: it takes the sphere's normal speed, (1, 0, 0) . n = 1 */
  float z[3] = {0.59f, 0, 0}, u[3] = {0, 0, 0};
  room = 0.05f;
  collider_push(band_(0.0f), &c, &P, z, u, &room);
  CHECK(fabsf(z[0] - 0.6f) < 1e-6f && fabsf(u[0] - 1) < 1e-6f && u[1] == 0 && u[2] == 0,
        "on the leading side: x %g, velocity (%g %g %g), expected 0.6 and (1 0 0)", z[0], u[0], u[1], u[2]);
  /* a sticky collider keeps what it holds */
  c.type = BOUNDARY_STICKY;
  float s1[3] = {0.5f, 0.07f, 0}, s2[3] = {0, -2, 0};
  room = 0.05f;
  CHECK(collider_push(band_(0.0f), &c, &P, s1, s2, &room) == 0 && s1[1] == 0.07f && s2[1] == -2,
        "a sticky collider pushed a particle out");
  /* the room: half a cell, less what advection moved along an axis, never a whole cell in all */
  CHECK(boundary_push_room(0.1f, 0) == 0.05f && fabsf(boundary_push_room(0.1f, 0.07f) - 0.029f) < 1e-6f &&
            boundary_push_room(0.1f, 0.2f) == 0.0f,
        "boundary_push_room: %g %g %g", boundary_push_room(0.1f, 0), boundary_push_room(0.1f, 0.07f),
        boundary_push_room(0.1f, 0.2f));
  /* boundary_push_posed: the colliders share the room */
  c.type = BOUNDARY_SLIP;
  collider two[2] = {c, c};
  two[1].center[0] = 0.15f; /* a second sphere 15 cm further along x */
  collider_pose poses[2];
  for (int i = 0; i < 2; ++i) collider_pose_at(&two[i], k, 0.5, &poses[i]);
  boundary_params bp;
  memset(&bp, 0, sizeof bp);
  bp.n_colliders = 2;
  bp.colliders = two;
  float q[3] = {0.575f, 0, 0}, qv[3] = {0, 0, 0}; /* 2.5 cm inside both */
  CHECK(boundary_push_posed(&bp, poses, q, qv, 0.01f) == 1, "boundary_push_posed did not act");
  CHECK(fabsf(q[0] - 0.585f) < 1e-6f && q[1] == 0 && q[2] == 0,
        "two colliders sharing 1 cm of room moved the particle to (%g %g %g), expected (0.585 0 0)", q[0], q[1], q[2]);
}

int main(void) {
  test_sdf();
  test_wall_types();
  test_motion();
  test_apply();
  test_push();
  return check_summary("test_boundary");
}
