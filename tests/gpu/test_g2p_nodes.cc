// test_g2p_nodes.cc - G2P's gather of a warp's stencil nodes (gpu/p2g.cuh) on the host, the
// warp's built-ins emulated lane by lane (warp_emu.h): g2p_nodes_direct (each node read from the
// grid through its block) and g2p_nodes with a tile (the union of the warp's stencils loaded once
// into shared memory, k_g2p's own; the direct gather serves ASFLIP and boxes too large for the
// tile), after locate() and the B-spline weights, as k_g2p runs them. Expected:
//  - the direct gather is v = sum_i w_i v_i and B = sum_i w_i v_i (x_i - x_p)^T over the 27
//    nodes of the particle's stencil, written here from the definitions in global node
//    coordinates (which block and node hold node i; the quadratic B-spline of the distance);
//  - the tiled gather gives the direct one's v and B bit for bit (the same values in the same
//    order), whatever the shape of the warp's box of stencils;
//  - the tile serves where the box fits G2P_TILE_NODES and falls back to the direct gather where
//    it does not (a warp spread over the free zone), and lanes without a particle (past the
//    packet's count, or outside the free zone) neither add nor stall the warp.
#include "gpu/warp_emu.h"

#include "p2g.cuh"
#include "physics/check.h"

#include <array>
#include <cstdio>
#include <cstring>
#include <vector>

namespace {

const float DX = 0.01f, INV_DX = 100.0f;
const float3 ORIGIN = {0.1f, -0.2f, 0.05f};
const int PB[3] = {2, 3, 1}; /* the packet's particle block */
const int NBLK = 27;

double bspline(double t) {
  t = std::fabs(t);
  return t < 0.5 ? 0.75 - t * t : t < 1.5 ? 0.5 * (1.5 - t) * (1.5 - t) : 0.0;
}

struct lane_out {
  float v[3], B[9];
};

struct warp_case {
  const char *name;
  std::vector<std::array<int, 3>> cells; /* free-zone offsets d of the valid lanes */
  int lost;                              /* a lane outside the free zone, or -1 */
  int tiled;                             /* whether the tile must serve */
};

/* x of each lane (3 per lane) in the given free-zone cells, at random places inside them. */
std::vector<float> positions(const warp_case &c, check_rng *rng) {
  std::vector<float> x(3 * LANES, 0.0f);
  const float o[3] = {ORIGIN.x, ORIGIN.y, ORIGIN.z};
  for (size_t l = 0; l < c.cells.size(); ++l)
    for (int a = 0; a < 3; ++a) {
      const int d = (int)l == c.lost && a == 0 ? ZONE + 3 : c.cells[l][a];
      const int b = BLOCK_EDGE * PB[a] + FREE_ZONE_LO + d;
      x[3 * l + a] = o[a] + ((float)b + (float)check_rng_range(rng, 0.52, 1.48)) * DX;
    }
  return x;
}

/* The warp's gather, tiled or direct; returns what each lane got and whether the tile served. */
std::vector<lane_out> gather(const warp_case &c, const std::vector<float> &x, const std::vector<float> &grid,
                             const int *nbr, bool tiled, int *served) {
  std::vector<lane_out> out(LANES);
  std::vector<float4> tile(G2P_TILE_NODES, float4{-1e30f, -1e30f, -1e30f, -1e30f});
  std::vector<int> flag(LANES, -1);
  const int valid = (int)c.cells.size();
  emu_run_warp([&](int lane) {
    const int P[3] = {PB[0], PB[1], PB[2]};
    const int my_nbr = lane < 27 ? nbr[lane] : 0;
    float xp[3] = {x[3 * lane], x[3 * lane + 1], x[3 * lane + 2]}, fx[3] = {1, 1, 1};
    int d[3] = {0, 0, 0}, ok = 0;
    if (lane < valid) ok = locate(xp, ORIGIN, INV_DX, P, d, fx);
    float w[3][3];
    for (int a = 0; a < 3; ++a) {
      float dw[3];
      bspline_weights(fx[a], w[a], dw);
    }
    float v[3] = {0, 0, 0}, B[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    if (tiled) {
      flag[lane] = g2p_nodes<false>(ok, d, fx, w, DX, my_nbr, grid.data(), nullptr, 0, v, B, nullptr, tile.data());
    } else {
      g2p_nodes_direct<false>(ok, d, fx, w, DX, my_nbr, grid.data(), nullptr, 0, v, B, nullptr);
      flag[lane] = 0;
    }
    std::memcpy(out[lane].v, v, sizeof v);
    std::memcpy(out[lane].B, B, sizeof B);
  });
  *served = flag[0];
  for (int l = 1; l < LANES; ++l) CHECK(flag[l] == flag[0], "%s: lane %d says %d, lane 0 %d", c.name, l, flag[l], flag[0]);
  return out;
}

/* v and B of lane l from the definitions, in double; *sabs = sum_i w_i |v_i| (the largest channel),
 * the scale of float32's rounding of the sums. */
void reference(const std::vector<float> &x, int l, const std::vector<float> &grid, const int *nbr, double v[3],
               double B[9], double *sabs) {
  double abs_sum[3] = {0, 0, 0};
  const double o[3] = {ORIGIN.x, ORIGIN.y, ORIGIN.z};
  int base[3];
  for (int a = 0; a < 3; ++a) base[a] = bspline_base((x[3 * l + a] - (float)o[a]) * INV_DX);
  for (int k = 0; k < 3; ++k) v[k] = 0.0;
  for (int k = 0; k < 9; ++k) B[k] = 0.0;
  for (int e0 = 0; e0 < 3; ++e0)
    for (int e1 = 0; e1 < 3; ++e1)
      for (int e2 = 0; e2 < 3; ++e2) {
        const int g[3] = {base[0] + e0, base[1] + e1, base[2] + e2};
        double r[3], w = 1.0;
        int blk3[3], nd3[3];
        for (int a = 0; a < 3; ++a) {
          r[a] = o[a] + g[a] * (double)DX - x[3 * l + a];
          w *= bspline(r[a] / DX);
          blk3[a] = g[a] / BLOCK_EDGE - (PB[a] - 1);
          nd3[a] = g[a] % BLOCK_EDGE;
        }
        const int blk = nbr[(blk3[0] * 3 + blk3[1]) * 3 + blk3[2]];
        const int node = (nd3[0] * BLOCK_EDGE + nd3[1]) * BLOCK_EDGE + nd3[2];
        for (int a = 0; a < 3; ++a) {
          const double vi = w * grid[(size_t)blk * BLOCK_FLOATS + gidx(node, 1 + a)];
          v[a] += vi;
          abs_sum[a] += std::fabs(vi);
          for (int e = 0; e < 3; ++e) B[3 * a + e] += vi * r[e];
        }
      }
  *sabs = std::fmax(abs_sum[0], std::fmax(abs_sum[1], abs_sum[2]));
}

void check_case(const warp_case &c, check_rng *rng, const std::vector<float> &grid, const int *nbr) {
  const std::vector<float> x = positions(c, rng);
  int served_direct = 0, served = 0;
  const std::vector<lane_out> direct = gather(c, x, grid, nbr, false, &served_direct);
  const std::vector<lane_out> tiled = gather(c, x, grid, nbr, true, &served);
  CHECK(served == c.tiled, "%s: the tile %s, expected it %s", c.name, served ? "served" : "did not serve",
        c.tiled ? "to" : "not to");
  double worst = 0.0;
  int bitwise = 1;
  for (int l = 0; l < LANES; ++l) {
    const bool particle = l < (int)c.cells.size() && l != c.lost;
    bitwise &= !std::memcmp(&direct[l], &tiled[l], sizeof(lane_out));
    if (!particle) {
      double any = 0.0;
      for (int k = 0; k < 3; ++k) any += std::fabs(direct[l].v[k]) + std::fabs(tiled[l].v[k]);
      for (int k = 0; k < 9; ++k) any += std::fabs(direct[l].B[k]) + std::fabs(tiled[l].B[k]);
      CHECK(any == 0.0, "%s: lane %d has no particle but gathered %g", c.name, l, any);
      continue;
    }
    /* float32 sums of 27 terms: within 27 float epsilons of the sum of the terms' sizes */
    double v[3], B[9], sabs = 0.0;
    reference(x, l, grid, nbr, v, B, &sabs);
    const double tol = 27 * 1.2e-7 * sabs + 1e-30;
    for (int k = 0; k < 3; ++k) worst = std::fmax(worst, std::fabs(direct[l].v[k] - v[k]) / tol);
    for (int k = 0; k < 9; ++k) worst = std::fmax(worst, std::fabs(direct[l].B[k] - B[k]) / (tol * 1.5 * DX));
  }
  CHECK(bitwise, "%s: the tiled gather differs from the direct one", c.name);
  CHECK(worst <= 1.0, "%s: the direct gather is off the definitions by %.3g of the tolerance", c.name, worst);
  printf("  %-48s tile %s, %s, %.2g of the tolerance\n", c.name, served ? "served" : "fell back",
         bitwise ? "bitwise the direct gather" : "NOT the direct gather", worst);
}

} // namespace

int main() {
  check_rng rng = {20261126};
  int nbr[27];
  for (int i = 0; i < 27; ++i) nbr[i] = i;
  for (int i = 26; i > 0; --i) std::swap(nbr[i], nbr[check_rng_u32(&rng) % (i + 1)]);
  std::vector<float> grid((size_t)NBLK * BLOCK_FLOATS);
  for (float &g : grid) g = (float)check_rng_range(&rng, -3.0, 3.0);

  std::vector<warp_case> cases;
  auto random_cells = [&](int n, int lo, int hi) {
    std::vector<std::array<int, 3>> v;
    for (int l = 0; l < n; ++l) {
      std::array<int, 3> d;
      for (int a = 0; a < 3; ++a) d[a] = lo + (int)(check_rng_u32(&rng) % (unsigned)(hi - lo + 1));
      v.push_back(d);
    }
    return v;
  };
  cases.push_back({"32 lanes in the cells of a fresh mapping (6^3 box)", random_cells(32, 3, 6), -1, 1});
  {
    std::vector<std::array<int, 3>> v = random_cells(32, 3, 6);
    v[0] = {3, 3, 3}, v[1] = {6, 6, 6}; /* the box is exactly 6 x 6 x 6 = G2P_TILE_NODES */
    cases.push_back({"32 lanes spanning exactly 216 nodes", v, -1, 1});
  }
  cases.push_back({"1 cell of 32 lanes", std::vector<std::array<int, 3>>(32, {4, 5, 2}), -1, 1});
  {
    std::vector<std::array<int, 3>> v = random_cells(32, 4, 5);
    v[3] = {0, 4, 5}, v[9] = {9, 5, 4}; /* 12 x 4 x 4 = 192 nodes: long along x */
    cases.push_back({"a box long along x (12 x 4 x 4)", v, -1, 1});
  }
  {
    std::vector<std::array<int, 3>> v = random_cells(32, 3, 6);
    v[5] = {2, 3, 3}; /* 7 x 6 x 6: past the tile */
    cases.push_back({"a box one node too wide (7 x 6 x 6)", v, -1, 0});
  }
  cases.push_back({"32 lanes over the whole free zone", random_cells(32, 0, 9), -1, 0});
  cases.push_back({"13 lanes of 32", random_cells(13, 3, 5), -1, 1});
  cases.push_back({"20 lanes, one outside the free zone", random_cells(20, 3, 6), 7, 1});
  cases.push_back({"1 lane", random_cells(1, 0, 9), -1, 1});
  cases.push_back({"no particle, one lane outside the free zone", random_cells(1, 4, 4), 0, 1});
  for (const warp_case &c : cases) check_case(c, &rng, grid, nbr);
  return check_summary("test_g2p_nodes");
}
