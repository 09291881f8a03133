// test_p2g_warp.cc - the CUDA backend's P2G of one warp's packet (gpu/p2g.cuh) run on the host,
// the warp's built-ins emulated lane by lane (warp_emu.h), so that its warp logic is tested
// where there is no GPU: the lanes' sort by cell, the segments of equal cells, the reduction
// (p2g_gather's records in shared memory, in float and in deterministic mode's fixed point, with
// and without the box sums), which physical block and node each sum lands in, the touched marks
// and the lost-particle flag. The expectation is written here from the definitions (MLS-MPM's
// scatter of w (m, m v + A (x_i - x_p)) with the quadratic B-spline of the distance, nodes
// counted in global coordinates), not from the kernel's free-zone offsets, and the grid's totals
// are checked against the particles' (mass, and momentum: sum_i w_i (x_i - x_p) = 0).
// Packets: cells of mixed counts in shuffled lanes, a sorted full packet, one cell of 32 lanes,
// 32 cells of one lane, and a packet with a particle outside its free zone; APIC and ASFLIP
// (grid0), three materials (sand's return mapping, elasticity, NACC's logJp).
#include "gpu/warp_emu.h"

#include "p2g.cuh"
#include "physics/check.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <vector>

namespace {

const float DX = 0.01f, INV_DX = 100.0f, DT = 2e-4f;
const float3 ORIGIN = {0.1f, -0.2f, 0.05f};
const int PB[3] = {2, 3, 1}; /* the packet's particle block */
const int NBLK = 27;         /* the grid: the particle block's 27 physical blocks, in a shuffled order */

struct packet {
  const char *name;
  int valid;                      /* lanes holding a particle (hdr.y) */
  std::vector<float> pk;          /* PK_FLOATS */
  std::vector<uint64_t> id;       /* LANES */
  std::vector<int> base;          /* 3 per lane: the base node, global node coordinates */
  int lost = -1;                  /* a lane whose particle lies outside the free zone */
  std::vector<int> hot;           /* lanes moving beyond deterministic mode's range */
};

/* The quadratic B-spline of t = (x_p - x_i) / dx. */
double bspline(double t) {
  t = std::fabs(t);
  return t < 0.5 ? 0.75 - t * t : t < 1.5 ? 0.5 * (1.5 - t) * (1.5 - t) : 0.0;
}

/* A packet of particles in the given free-zone cells (one per lane; -1: no particle), lanes in
 * the order given. */
packet make_packet(const char *name, check_rng *rng, const std::vector<std::array<int, 3>> &cells, int lost_lane,
                   std::vector<int> hot = {}) {
  packet P;
  P.name = name;
  P.pk.assign(PK_FLOATS, 0.0f);
  P.id.assign(LANES, 0);
  P.base.assign(3 * LANES, 0);
  P.valid = (int)cells.size();
  P.lost = lost_lane;
  P.hot = hot;
  for (int l = 0; l < P.valid; ++l) {
    float *q = P.pk.data() + l;
    const float o[3] = {ORIGIN.x, ORIGIN.y, ORIGIN.z};
    for (int a = 0; a < 3; ++a) {
      const int d = l == lost_lane && a == 1 ? ZONE + 2 : cells[l][a]; /* lost: beyond the zone along y */
      const int b = BLOCK_EDGE * PB[a] + FREE_ZONE_LO + d;
      P.base[3 * l + a] = b;
      q[(A_X + a) * LANES] = o[a] + ((float)b + (float)check_rng_range(rng, 0.55, 1.45)) * DX;
      q[(A_V + a) * LANES] = (float)check_rng_range(rng, -2.0, 2.0);
    }
    for (int k = 0; k < 9; ++k) {
      q[(A_C + k) * LANES] = (float)check_rng_range(rng, -30.0, 30.0);
      q[(A_F + k) * LANES] = (k % 4 == 0 ? 0.97f + 0.01f * (float)(k / 4) : 0.0f) + (float)check_rng_range(rng, -0.01, 0.01);
    }
    q[A_M * LANES] = (float)check_rng_range(rng, 1e-4, 3e-4);
    q[A_VOL * LANES] = q[A_M * LANES] / 1500.0f;
    const int mat = l % 3;
    std::memcpy(&q[A_MAT * LANES], &mat, sizeof mat);
    q[A_JP * LANES] = mat == 2 ? -0.02f : 0.0f;
    P.id[l] = 1000 + (uint64_t)((l * 11) % 32) * 7; /* not in lane order */
  }
  /* the first beyond range at every node of its stencil (so that a reduction that kept the first
   * bad record it met would name it), the others only near their centre */
  for (size_t k = 0; k < hot.size(); ++k) P.pk[A_V * LANES + hot[k]] = k == 0 ? 1e14f : 1e6f;
  return P;
}

std::vector<std::array<int, 3>> shuffled(std::vector<std::array<int, 3>> v, check_rng *rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[check_rng_u32(rng) % i]);
  return v;
}

struct sums {
  std::vector<double> g, g0;  /* [blk][node][4], [blk][node][3] */
  std::vector<int> touched;   /* [blk] */
  std::vector<float> pk;      /* the packet after P2G (F and logJp projected) */
  double mass = 0, mom[3] = {0, 0, 0}, mom_scale = 0;
};

/* The expectation, from the definitions. */
sums reference(const packet &P, const material_params *mats, const int *nbr) {
  sums R;
  R.g.assign((size_t)NBLK * BLOCK_NODES * 4, 0.0);
  R.g0.assign((size_t)NBLK * BLOCK_NODES * 3, 0.0);
  R.touched.assign(NBLK, 0);
  R.pk = P.pk;
  const double o[3] = {ORIGIN.x, ORIGIN.y, ORIGIN.z};
  for (int l = 0; l < P.valid; ++l) {
    if (l == P.lost) continue;
    float *q = R.pk.data() + l;
    float F[9], tau[9];
    for (int k = 0; k < 9; ++k) F[k] = q[(A_F + k) * LANES];
    int mat;
    std::memcpy(&mat, &q[A_MAT * LANES], sizeof mat);
    float logjp = mats[mat].model == MODEL_NACC ? q[A_JP * LANES] : 0.0f;
    constitutive_apply(&mats[mat], F, &logjp, tau, 1);
    for (int k = 0; k < 9; ++k) q[(A_F + k) * LANES] = F[k];
    if (mats[mat].model == MODEL_NACC) q[A_JP * LANES] = logjp;
    const double m = q[A_M * LANES], vol = q[A_VOL * LANES];
    double x[3], v[3], A[9], mC[9];
    for (int a = 0; a < 3; ++a) x[a] = q[(A_X + a) * LANES], v[a] = q[(A_V + a) * LANES];
    for (int k = 0; k < 9; ++k) {
      mC[k] = m * q[(A_C + k) * LANES];
      A[k] = -(double)DT * vol * 4.0 / ((double)DX * DX) * tau[k] + mC[k];
      R.mom_scale += std::fabs(A[k]) * 2.0 * DX;
    }
    R.mass += m;
    for (int a = 0; a < 3; ++a) R.mom[a] += m * v[a], R.mom_scale += std::fabs(m * v[a]);
    for (int e0 = 0; e0 < 3; ++e0)
      for (int e1 = 0; e1 < 3; ++e1)
        for (int e2 = 0; e2 < 3; ++e2) {
          const int g[3] = {P.base[3 * l] + e0, P.base[3 * l + 1] + e1, P.base[3 * l + 2] + e2};
          double r[3], w = 1.0;
          int blk3[3], nd3[3];
          for (int a = 0; a < 3; ++a) {
            r[a] = o[a] + g[a] * (double)DX - x[a];
            w *= bspline(-r[a] / DX);
            blk3[a] = g[a] / BLOCK_EDGE - (PB[a] - 1); /* 0..2: which of the 27 */
            nd3[a] = g[a] % BLOCK_EDGE;
          }
          const int blk = nbr[(blk3[0] * 3 + blk3[1]) * 3 + blk3[2]];
          const int node = (nd3[0] * BLOCK_EDGE + nd3[1]) * BLOCK_EDGE + nd3[2];
          double *gn = &R.g[((size_t)blk * BLOCK_NODES + node) * 4];
          double *go = &R.g0[((size_t)blk * BLOCK_NODES + node) * 3];
          gn[0] += w * m;
          for (int k = 0; k < 3; ++k) {
            gn[1 + k] += w * (m * v[k] + A[3 * k] * r[0] + A[3 * k + 1] * r[1] + A[3 * k + 2] * r[2]);
            go[k] += w * (m * v[k] + mC[3 * k] * r[0] + mC[3 * k + 1] * r[1] + mC[3 * k + 2] * r[2]);
          }
          R.touched[blk] = 1;
        }
  }
  return R;
}

/* GATHER: p2g_gather without the box sums (k_p2g's P2G_NODESUM = 0). NODES: its box sums
 * (k_g2p2g's) where a packet's box holds at most 96 nodes and the walk would issue more atomics
 * than the box has nodes, the per-cell walk's global atomics elsewhere; NODES_ALL: the same with
 * boxes of up to 2000 nodes (12^3 and more). Deterministic mode keeps the global atomics: the same
 * sums, bitwise. */
enum variant { GATHER, GATHER_FIXED, NODES, NODES_FIXED, NODES_ALL, NODES_ALL_FIXED };
const char *variant_name[] = {"p2g_gather", "p2g_gather (deterministic)", "p2g_gather, box <= 96",
                              "p2g_gather, box <= 96 (deterministic)", "p2g_gather, box",
                              "p2g_gather, box (deterministic)"};
bool is_fixed(variant v) { return v == GATHER_FIXED || v == NODES_FIXED || v == NODES_ALL_FIXED; }

/* Runs one reduction over the packet; returns the grid as doubles, in the reference's layout. */
template <bool OLD>
sums run(const packet &P, variant var, const material_params *mats, const int *nbr, step_ctl *ctl) {
  sums S;
  S.pk = P.pk;
  std::vector<uint64_t> id = P.id;
  std::vector<float> grid((size_t)NBLK * BLOCK_FLOATS, 0.0f), grid0((size_t)NBLK * OLD_FLOATS, 0.0f);
  std::vector<uint8_t> touched(NBLK, 0);
  const int ich = OLD ? 7 : 4;
  std::vector<long long> ig((size_t)NBLK * ich * BLOCK_NODES, 0);
  float scale[2];
  fix_scales(3e-4, 50.0, scale);
  const fixp fp = {ig.data(), scale[0], scale[1]};
  const int2 hdr = {0, P.valid};
  /* the records, then (NODES, NODES_ALL) the box of up to 2000 nodes of 7 floats */
  alignas(16) static float s_p2g[GREC_FLOATS(true) * LANES + 2000 * 7];
  unsigned s_sort[LANES];
  std::memset(ctl, 0, sizeof *ctl);
  ctl->bad_id = ~0ULL;
  ctl->fix_bad_id = ~0ULL;
  emu_run_warp([&](int) {
    if (var == NODES)
      p2g_gather<OLD, false, 96>(ctl, DT, 0, &hdr, PB, nbr, S.pk.data(), id.data(), mats, ORIGIN, DX, INV_DX,
                                 grid.data(), touched.data(), grid0.data(), s_p2g, s_sort, fp, 1);
    else if (var == NODES_FIXED)
      p2g_gather<OLD, true, 96>(ctl, DT, 0, &hdr, PB, nbr, S.pk.data(), id.data(), mats, ORIGIN, DX, INV_DX,
                                grid.data(), touched.data(), grid0.data(), s_p2g, s_sort, fp, 1);
    else if (var == NODES_ALL)
      p2g_gather<OLD, false, 2000>(ctl, DT, 0, &hdr, PB, nbr, S.pk.data(), id.data(), mats, ORIGIN, DX, INV_DX,
                                   grid.data(), touched.data(), grid0.data(), s_p2g, s_sort, fp, 1);
    else if (var == NODES_ALL_FIXED)
      p2g_gather<OLD, true, 2000>(ctl, DT, 0, &hdr, PB, nbr, S.pk.data(), id.data(), mats, ORIGIN, DX, INV_DX,
                                  grid.data(), touched.data(), grid0.data(), s_p2g, s_sort, fp, 1);
    else if (var == GATHER)
      p2g_gather<OLD, false>(ctl, DT, 0, &hdr, PB, nbr, S.pk.data(), id.data(), mats, ORIGIN, DX, INV_DX, grid.data(),
                             touched.data(), grid0.data(), s_p2g, s_sort, fp, 1);
    else
      p2g_gather<OLD, true>(ctl, DT, 0, &hdr, PB, nbr, S.pk.data(), id.data(), mats, ORIGIN, DX, INV_DX, grid.data(),
                            touched.data(), grid0.data(), s_p2g, s_sort, fp, 1);
  });
  const bool fixed = is_fixed(var);
  S.g.assign((size_t)NBLK * BLOCK_NODES * 4, 0.0);
  S.g0.assign((size_t)NBLK * BLOCK_NODES * 3, 0.0);
  S.touched.assign(touched.begin(), touched.end());
  for (int b = 0; b < NBLK; ++b)
    for (int n = 0; n < BLOCK_NODES; ++n) {
      for (int c = 0; c < 4; ++c)
        S.g[((size_t)b * BLOCK_NODES + n) * 4 + c] =
            fixed ? (double)ig[((size_t)b * ich + c) * BLOCK_NODES + n] / scale[c == 0 ? 0 : 1]
                         : grid[(size_t)b * BLOCK_FLOATS + gidx(n, c)];
      if (OLD)
        for (int c = 0; c < 3; ++c)
          S.g0[((size_t)b * BLOCK_NODES + n) * 3 + c] =
              fixed ? (double)ig[((size_t)b * ich + 4 + c) * BLOCK_NODES + n] / scale[1]
                           : grid0[(size_t)b * OLD_FLOATS + c * BLOCK_NODES + n];
    }
  for (size_t i = 0; i < S.g.size(); i += 4) {
    S.mass += S.g[i];
    for (int a = 0; a < 3; ++a) S.mom[a] += S.g[i + 1 + a];
  }
  return S;
}

/* Largest |value| of channel c (of nc) over the grid. */
double channel_max(const std::vector<double> &g, int nc, int c) {
  double m = 0;
  for (size_t i = c; i < g.size(); i += nc) m = std::max(m, std::fabs(g[i]));
  return m;
}

template <bool OLD> void check_packet(const packet &P, const material_params *mats, const int *nbr) {
  const sums R = reference(P, mats, nbr);
  for (variant var : {GATHER, GATHER_FIXED, NODES, NODES_FIXED, NODES_ALL, NODES_ALL_FIXED}) {
    step_ctl ctl;
    const sums S = run<OLD>(P, var, mats, nbr, &ctl);
    const char *v = variant_name[var];
    const char *t = OLD ? "ASFLIP" : "APIC";
    const bool fixed = is_fixed(var);
    if (fixed && !P.hot.empty()) { /* out of range: the run stops, naming the smallest id */
      unsigned long long want = ~0ULL;
      for (int l : P.hot) want = std::min<unsigned long long>(want, P.id[l]);
      CHECK(ctl.fix_bad == 1 && ctl.fix_bad_id == want, "%s, %s, %s: fix_bad %u, fix_bad_id %llu, expected 1, %llu",
            P.name, v, t, ctl.fix_bad, ctl.fix_bad_id, want);
      continue;
    }
    /* every node, every channel, against the definitions (float sums of at most 32 terms) */
    int worst_c = 0;
    double worst = 0;
    for (int c = 0; c < 4; ++c) {
      const double tol = 2e-5 * channel_max(R.g, 4, c) + 1e-12;
      for (size_t i = c; i < R.g.size(); i += 4) {
        const double e = std::fabs(S.g[i] - R.g[i]) / tol;
        if (e > worst) worst = e, worst_c = c;
      }
    }
    CHECK(worst <= 1.0, "%s, %s, %s: a node's channel %d is off by %.3g of its tolerance", P.name, v, t, worst_c, worst);
    if (OLD) {
      double w0 = 0;
      for (int c = 0; c < 3; ++c) {
        const double tol = 2e-5 * channel_max(R.g0, 3, c) + 1e-12;
        for (size_t i = c; i < R.g0.size(); i += 3) w0 = std::max(w0, std::fabs(S.g0[i] - R.g0[i]) / tol);
      }
      CHECK(w0 <= 1.0, "%s, %s: grid0 (ASFLIP's momentum without the stress) off by %.3g of its tolerance", P.name, v,
            w0);
    }
    CHECK(S.touched == R.touched, "%s, %s, %s: the touched blocks differ from the blocks the stencils reach", P.name,
          v, t);
    /* the projected state written back: the same function, so bitwise */
    CHECK(S.pk == R.pk, "%s, %s, %s: the packet after P2G (F, logJp) differs from the return mapping's", P.name, v,
          t);
    /* conservation, independent of the layout */
    CHECK(std::fabs(S.mass - R.mass) <= 1e-5 * R.mass, "%s, %s, %s: grid mass %.9g, particles %.9g", P.name, v, t,
          S.mass, R.mass);
    for (int a = 0; a < 3; ++a)
      CHECK(std::fabs(S.mom[a] - R.mom[a]) <= 1e-5 * R.mom_scale, "%s, %s, %s: grid momentum[%d] %.9g, particles %.9g",
            P.name, v, t, a, S.mom[a], R.mom[a]);
    const unsigned long long want = P.lost >= 0 ? P.id[P.lost] : ~0ULL;
    CHECK(ctl.bad_id == want, "%s, %s, %s: bad_id %llu, expected %llu", P.name, v, t, ctl.bad_id, want);
    CHECK(ctl.fix_bad == 0, "%s, %s, %s: a fixed-point contribution out of range", P.name, v, t);
  }
}

} // namespace

int main() {
  check_rng rng = {20261125};
  material_params mats[3];
  material_from_user(&mats[0], MODEL_DRUCKER_PRAGER, 1500.0f, 3e5f, 0.3f, 30.0f, 0.0f, 0.0f);
  material_from_user(&mats[1], MODEL_FIXED_COROTATED, 1000.0f, 1e5f, 0.3f, 0.0f, 0.0f, 0.0f);
  material_nacc_from_user(&mats[2], 400.0f, 5e5f, 0.3f, 0.8f, 0.9f, 5.0f, -0.02f);
  int nbr[27];
  for (int i = 0; i < 27; ++i) nbr[i] = i;
  for (int i = 26; i > 0; --i) std::swap(nbr[i], nbr[check_rng_u32(&rng) % (i + 1)]);

  /* free-zone cells (0..9 per axis) on both sides of block edges (stencils of d = 2, 3 cross one) */
  const std::array<int, 3> c0 = {3, 4, 5}, c1 = {3, 4, 6}, c2 = {4, 4, 5}, c3 = {6, 7, 2}, c4 = {0, 9, 3};
  std::vector<packet> packets;
  {
    std::vector<std::array<int, 3>> cells;
    for (int k = 0; k < 9; ++k) cells.push_back(c0);
    for (int k = 0; k < 7; ++k) cells.push_back(c1);
    for (int k = 0; k < 11; ++k) cells.push_back(c2);
    for (int k = 0; k < 3; ++k) cells.push_back(c3);
    packets.push_back(make_packet("4 cells of 9, 7, 11, 3 lanes, shuffled, 30 lanes", &rng, shuffled(cells, &rng), -1));
  }
  {
    std::vector<std::array<int, 3>> cells;
    const std::array<int, 3> cs[5] = {c4, c0, c1, c2, c3}; /* ascending keys */
    const int n[5] = {5, 8, 6, 9, 4};
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < n[j]; ++k) cells.push_back(cs[j]);
    packets.push_back(make_packet("5 cells in order, 32 lanes", &rng, cells, -1));
  }
  packets.push_back(make_packet("1 cell of 32 lanes", &rng, std::vector<std::array<int, 3>>(32, c3), -1));
  {
    std::vector<std::array<int, 3>> cells;
    for (int k = 0; k < 32; ++k) cells.push_back({k % 10, (k * 7 + 3) % 10, (k * 3 + k / 10) % 10});
    std::sort(cells.begin(), cells.end());
    cells.erase(std::unique(cells.begin(), cells.end()), cells.end());
    CHECK(cells.size() == 32, "the 32 distinct cells are %zu", cells.size());
    packets.push_back(make_packet("32 cells of 1 lane, shuffled", &rng, shuffled(cells, &rng), -1));
  }
  {
    std::vector<std::array<int, 3>> cells;
    for (int k = 0; k < 20; ++k) cells.push_back(k % 2 ? c0 : c2);
    packets.push_back(make_packet("20 lanes, one outside the free zone", &rng, cells, 13));
    /* lane 17 (cell c0, walked first; id 1189) everywhere, lane 4 (c2; id 1084) near its centre */
    packets.push_back(make_packet("20 lanes, two beyond the fixed-point range", &rng, cells, -1, {17, 4}));
  }
  {
    /* a packet as Sand Blocks' are some steps after their sort (tools/packet_drift.py): 8 cells of
     * a 2 x 2 x 2 cube whose stencils share nodes (64 in its box against 216 atomics in the walk:
     * the box sums take it) */
    std::vector<std::array<int, 3>> cells;
    for (int k = 0; k < 32; ++k) cells.push_back({3 + (k & 1), 3 + (k >> 1 & 1), 3 + (k >> 2 & 1)});
    packets.push_back(make_packet("8 cells of a cube, 4 lanes each, shuffled", &rng, shuffled(cells, &rng), -1));
  }
  for (const packet &P : packets) {
    check_packet<false>(P, mats, nbr);
    check_packet<true>(P, mats, nbr);
  }
  return check_summary("test_p2g_warp");
}
