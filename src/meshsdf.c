/* meshsdf.c - narrow-band level sets of triangle meshes (see meshsdf.h). */
#include "meshsdf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "memtally.h"

#define PI 3.14159265358979323846
#define MAX_BRICKS_TABLE (1LL << 28) /* 1 GiB of table: a mesh this large for its dx is a mistake */

static double dot3(const double a[3], const double b[3]) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }

/* Ericson, Real-Time Collision Detection, 5.1.5: the nearest point of triangle abc to x by the
 * Voronoi region of x; exact zeros in the barycentric coordinates on edges and vertices. */
double meshsdf_point_triangle(const double x[3], const double a[3], const double b[3], const double c[3],
                              double bary[3]) {
  double ab[3], ac[3], ap[3], bp[3], cp[3], q[3];
  for (int i = 0; i < 3; ++i) ab[i] = b[i] - a[i], ac[i] = c[i] - a[i], ap[i] = x[i] - a[i];
  const double d1 = dot3(ab, ap), d2 = dot3(ac, ap);
  double u = 1, v = 0, w = 0; /* weights of a, b, c */
  if (d1 <= 0 && d2 <= 0) goto done;
  for (int i = 0; i < 3; ++i) bp[i] = x[i] - b[i];
  const double d3 = dot3(ab, bp), d4 = dot3(ac, bp);
  if (d3 >= 0 && d4 <= d3) {
    u = 0, v = 1;
    goto done;
  }
  const double vc = d1 * d4 - d3 * d2;
  if (vc <= 0 && d1 >= 0 && d3 <= 0) {
    const double t = d1 / (d1 - d3);
    u = 1 - t, v = t;
    goto done;
  }
  for (int i = 0; i < 3; ++i) cp[i] = x[i] - c[i];
  const double d5 = dot3(ab, cp), d6 = dot3(ac, cp);
  if (d6 >= 0 && d5 <= d6) {
    u = 0, w = 1;
    goto done;
  }
  const double vb = d5 * d2 - d1 * d6;
  if (vb <= 0 && d2 >= 0 && d6 <= 0) {
    const double t = d2 / (d2 - d6);
    u = 1 - t, w = t;
    goto done;
  }
  const double va = d3 * d6 - d5 * d4;
  if (va <= 0 && (d4 - d3) >= 0 && (d5 - d6) >= 0) {
    const double t = (d4 - d3) / ((d4 - d3) + (d5 - d6));
    u = 0, v = 1 - t, w = t;
    goto done;
  }
  {
    const double den = 1 / (va + vb + vc);
    v = vb * den, w = vc * den, u = 1 - v - w;
  }
done:
  for (int i = 0; i < 3; ++i) q[i] = x[i] - (u * a[i] + v * b[i] + w * c[i]);
  bary[0] = u, bary[1] = v, bary[2] = w;
  return sqrt(dot3(q, q));
}

/* The solid angle of triangle abc seen from x (Van Oosterom and Strackee 1983), signed by the
 * triangle's orientation. */
static double solid_angle(const double x[3], const double *A, const double *B, const double *C) {
  double a[3], b[3], c[3];
  for (int i = 0; i < 3; ++i) a[i] = A[i] - x[i], b[i] = B[i] - x[i], c[i] = C[i] - x[i];
  const double la = sqrt(dot3(a, a)), lb = sqrt(dot3(b, b)), lc = sqrt(dot3(c, c));
  const double det = a[0] * (b[1] * c[2] - b[2] * c[1]) - a[1] * (b[0] * c[2] - b[2] * c[0]) + a[2] * (b[0] * c[1] - b[1] * c[0]);
  const double den = la * lb * lc + dot3(a, b) * lc + dot3(a, c) * lb + dot3(b, c) * la;
  if (det == 0 && den == 0) return 0; /* x on the triangle: its sign does not matter there */
  return 2 * atan2(det, den);
}

/* Grows a pool array (counted: memtally.h, kind MT_TRANSFER) to hold need elements: to exactly
 * need where exact, else to the next power of two from 1024 (a pool built without a reservation). */
static int grow64(void **p, int64_t *cap, int64_t need, size_t sz, int exact) {
  if (need <= *cap) return 0;
  int64_t nc = *cap ? *cap : 1024;
  while (nc < need) nc *= 2;
  if (exact) nc = need;
  void *q = memtally_realloc(MT_TRANSFER, *p, (size_t)nc * sz, "mesh level sets");
  if (!q) return 1;
  *p = q;
  *cap = nc;
  return 0;
}

int levelset_pool_reserve(levelset_pool *pool, int sets, int64_t table_n, int64_t floats_n) {
  int64_t set_cap = pool->cap;
  if (grow64((void **)&pool->bricks, &pool->bricks_cap, floats_n, sizeof(float), 1) ||
      grow64((void **)&pool->table, &pool->table_cap, table_n, sizeof(int32_t), 1) ||
      grow64((void **)&pool->sets, &set_cap, sets, sizeof(levelset), 1))
    return DR_ENOMEM;
  pool->cap = (int)set_cap;
  return DR_OK;
}

/* The winding number's groups of triangles: the connected components of the mesh (triangles
 * that share vertices), each with its bounding box and whether it is closed and consistently
 * oriented (every directed edge once, and its reverse once). Such a component's winding number
 * is an integer, locally constant off its surface and 0 at infinity, hence exactly 0 everywhere
 * outside its bounding box: step 3 skips it there, which for a figure made of many closed parts
 * (the crawler of jobs/scenes/crawling_snow.json: ten capsules) divides the cost several
 * times. Components that are not closed (cracks, soups) are summed at every node, as before.
 * order[nt]: triangle indices grouped by component, component c at order[start[c] .. start[c+1]);
 * box[6 c]: lo, hi. Allocates *order, *start, *box, *closed; returns the count, or -1 (no memory). */
static int cmp_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static int uf_root(int *parent, int i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

static int winding_groups(const mesh *m, const double *p, int **order, int **start, double **box, char **closed) {
  const int nv = m->n_verts, nt = m->n_tris;
  int *parent = malloc(sizeof(int) * (size_t)(nv ? nv : 1)), *comp = malloc(sizeof(int) * (size_t)(nv ? nv : 1));
  uint64_t *edges = malloc(sizeof(uint64_t) * 3 * (size_t)(nt ? nt : 1));
  *order = malloc(sizeof(int) * (size_t)(nt ? nt : 1));
  *start = NULL, *box = NULL, *closed = NULL;
  int nc = 0;
  if (!parent || !comp || !edges || !*order) goto fail;
  for (int i = 0; i < nv; ++i) parent[i] = i, comp[i] = -1;
  for (int t = 0; t < nt; ++t)
    for (int k = 1; k < 3; ++k) {
      const int a = uf_root(parent, m->tri[3 * t]), b = uf_root(parent, m->tri[3 * t + k]);
      if (a != b) parent[a] = b;
    }
  for (int t = 0; t < nt; ++t) {
    const int r = uf_root(parent, m->tri[3 * t]);
    if (comp[r] < 0) comp[r] = nc++;
  }
  *start = calloc((size_t)nc + 1, sizeof(int));
  *box = malloc(sizeof(double) * 6 * (size_t)(nc ? nc : 1));
  *closed = malloc((size_t)(nc ? nc : 1));
  if (!*start || !*box || !*closed) goto fail;
  for (int c = 0; c < nc; ++c) {
    (*closed)[c] = 1;
    for (int a = 0; a < 3; ++a) (*box)[6 * c + a] = INFINITY, (*box)[6 * c + 3 + a] = -INFINITY;
  }
  for (int t = 0; t < nt; ++t) ++(*start)[comp[uf_root(parent, m->tri[3 * t])] + 1];
  for (int c = 0; c < nc; ++c) (*start)[c + 1] += (*start)[c];
  int *fill = parent; /* the roots are no longer needed once every vertex's component is known */
  for (int i = 0; i < nv; ++i) comp[i] = comp[uf_root(parent, i)];
  for (int c = 0; c < nc; ++c) fill[c] = (*start)[c]; /* nc <= nv */
  for (int t = 0; t < nt; ++t) {
    const int c = comp[m->tri[3 * t]];
    (*order)[fill[c]++] = t;
    for (int k = 0; k < 3; ++k) {
      const int a = m->tri[3 * t + k], b = m->tri[3 * t + (k + 1) % 3];
      edges[3 * t + k] = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
      if (a == b) (*closed)[c] = 0;
      for (int d = 0; d < 3; ++d) {
        (*box)[6 * c + d] = fmin((*box)[6 * c + d], p[3 * a + d]);
        (*box)[6 * c + 3 + d] = fmax((*box)[6 * c + 3 + d], p[3 * a + d]);
      }
    }
  }
  qsort(edges, 3 * (size_t)nt, sizeof *edges, cmp_u64);
  for (size_t e = 0; e < 3 * (size_t)nt; ++e) {
    const uint32_t a = (uint32_t)(edges[e] >> 32), b = (uint32_t)edges[e];
    const uint64_t rev = (uint64_t)b << 32 | a;
    const int dup = (e > 0 && edges[e - 1] == edges[e]) || (e + 1 < 3 * (size_t)nt && edges[e + 1] == edges[e]);
    if (dup || !bsearch(&rev, edges, 3 * (size_t)nt, sizeof *edges, cmp_u64)) (*closed)[comp[a]] = 0;
  }
  free(parent), free(comp), free(edges);
  return nc;
fail:
  free(parent), free(comp), free(edges), free(*order), free(*start), free(*box), free(*closed);
  *order = *start = NULL, *box = NULL, *closed = NULL;
  return -1;
}

/* The bricks [b0, b1] (inclusive) that the bounding box of triangle ABC grown by reach meets. */
static void brick_range(const double *A, const double *B, const double *C, const double origin[3], double bh,
                        double reach, const int dims[3], int b0[3], int b1[3]) {
  for (int a = 0; a < 3; ++a) {
    const double tl = fmin(A[a], fmin(B[a], C[a])) - reach, th = fmax(A[a], fmax(B[a], C[a])) + reach;
    b0[a] = (int)fmax(0.0, floor((tl - origin[a]) / bh));
    b1[a] = (int)fmin((double)(dims[a] - 1), floor((th - origin[a]) / bh));
  }
}

/* The unit normal of triangle ABC (nrm[0..2]) and whether it has one (nrm[3]: 1, or 0 where the
 * triangle is degenerate). */
static void triangle_plane(const double *A, const double *B, const double *C, double nrm[4]) {
  const double u[3] = {B[0] - A[0], B[1] - A[1], B[2] - A[2]}, v[3] = {C[0] - A[0], C[1] - A[1], C[2] - A[2]};
  nrm[0] = u[1] * v[2] - u[2] * v[1], nrm[1] = u[2] * v[0] - u[0] * v[2], nrm[2] = u[0] * v[1] - u[1] * v[0];
  const double len = sqrt(dot3(nrm, nrm));
  nrm[3] = len > 0;
  for (int a = 0; a < 3 && len > 0; ++a) nrm[a] /= len;
}

/* Whether a brick's centre lies within reach of triangle ABC: the exact distance, unless the
 * centre is farther than reach from the triangle's plane (then farther from the triangle: the
 * answer at a dot product's cost; the margin covers rounding). */
static int within_reach(const double ctr[3], const double *A, const double *B, const double *C, const double nrm[4],
                        double reach) {
  const double off[3] = {ctr[0] - A[0], ctr[1] - A[1], ctr[2] - A[2]};
  if (nrm[3] > 0 && fabs(dot3(nrm, off)) > reach * (1 + 1e-12)) return 0;
  double bary[3];
  return meshsdf_point_triangle(ctr, A, B, C, bary) <= reach;
}

/* The lattice of a mesh's level set and its band's bricks (construction steps 1 and 2's marking):
 * what meshsdf_size counts and meshsdf_build fills. */
typedef struct band_lattice {
  double origin[3], centroid[3];
  int dims[3];
  int64_t nb;      /* bricks in the lattice: the brick table's entries */
  int32_t nmarked; /* bricks in the band */
  double *p;       /* [3 n_verts] the vertices in the level set's frame */
  int32_t *tab;    /* [nb] a band brick's index in the band, else LS_INSIDE */
} band_lattice;

static void lattice_free(band_lattice *L) {
  free(L->p), free(L->tab);
  L->p = NULL, L->tab = NULL;
}

static int mark_band(const mesh *m, const double shift[3], double h, double band, const char *what, band_lattice *L) {
  const int nv = m->n_verts, nt = m->n_tris;
  double lo[3], hi[3];
  memset(L, 0, sizeof *L);
  mesh_bounds(m, lo, hi);
  const double margin = band + LS_BRICK * h;
  int64_t nb = 1;
  for (int a = 0; a < 3; ++a) {
    lo[a] -= shift[a], hi[a] -= shift[a];
    L->origin[a] = lo[a] - margin;
    const double nodes = ceil((hi[a] + margin - L->origin[a]) / h) + 1;
    if (!(nodes < 4.0 * (1 << 20)))
      return dr_fail(DR_EINPUT, "%s: the mesh spans %.3g m along %c, %.3g level-set cells of %.3g m: too many (expected a mesh within 2^22 cells; is the scale or dx wrong?)",
                     what, hi[a] - lo[a], "xyz"[a], nodes, h);
    L->dims[a] = ((int)nodes + LS_BRICK - 1) / LS_BRICK;
    nb *= L->dims[a];
  }
  if (nb > MAX_BRICKS_TABLE)
    return dr_fail(DR_EINPUT, "%s: the mesh's bounding box holds %lld bricks of 4^3 level-set cells of %.3g m (expected at most %lld; is the scale or dx wrong?)",
                   what, (long long)nb, h, (long long)MAX_BRICKS_TABLE);
  L->nb = nb;
  const double *origin = L->origin;
  const int *dims = L->dims;
  double *p = L->p = dr_malloc(sizeof(double) * 3 * (size_t)(nv ? nv : 1), "mesh vertices");
  int32_t *tab = L->tab = dr_malloc(sizeof(int32_t) * (size_t)nb, "level-set brick table");
  if (!p || !tab) {
    lattice_free(L);
    return DR_ENOMEM;
  }
  for (int i = 0; i < nv; ++i)
    for (int a = 0; a < 3; ++a) p[3 * i + a] = m->v[3 * i + a] - shift[a], L->centroid[a] += p[3 * i + a] / nv;
  for (int64_t b = 0; b < nb; ++b) tab[b] = LS_INSIDE; /* beyond the band until marked */

  /* 1. bricks of the band; a brick covers nodes [4b, 4b + 4) h (the last cell reaching into the
   * next brick), centre (4b + 2) h, half-diagonal 2 sqrt(3) h */
  const double bh = LS_BRICK * h, reach = band + 2 * sqrt(3.0) * h;
  /* the triangles in parallel: a brick's mark is a relaxed atomic store of one value, so the marked
   * set is the same whatever the threads; a centre farther than reach from a triangle's plane is
   * farther from the triangle (the exact test's answer, at a dot product's cost) */
#pragma omp parallel for schedule(dynamic, 64)
  for (int t = 0; t < nt; ++t) {
    const double *A = p + 3 * m->tri[3 * t], *B = p + 3 * m->tri[3 * t + 1], *C = p + 3 * m->tri[3 * t + 2];
    double nrm[4];
    triangle_plane(A, B, C, nrm);
    int b0[3], b1[3];
    brick_range(A, B, C, origin, bh, reach, dims, b0, b1);
    for (int k = b0[2]; k <= b1[2]; ++k)
      for (int j = b0[1]; j <= b1[1]; ++j)
        for (int i = b0[0]; i <= b1[0]; ++i) {
          const int64_t e = ((int64_t)k * dims[1] + j) * dims[0] + i;
          int32_t mark;
#pragma omp atomic read relaxed
          mark = tab[e];
          if (mark == LS_OUTSIDE) continue; /* marked already */
          const double ctr[3] = {origin[0] + (4 * i + 2) * h, origin[1] + (4 * j + 2) * h, origin[2] + (4 * k + 2) * h};
          if (within_reach(ctr, A, B, C, nrm, reach)) {
#pragma omp atomic write relaxed
            tab[e] = LS_OUTSIDE; /* marked */
          }
        }
  }
  int32_t nmarked = 0;
  for (int64_t e = 0; e < nb; ++e)
    if (tab[e] == LS_OUTSIDE) {
      if (nmarked == INT32_MAX / LS_BRICK_NODES) {
        lattice_free(L);
        return dr_fail(DR_EINPUT, "%s: the mesh's narrow band holds too many bricks at %.3g m (is the scale or dx wrong?)", what, h);
      }
      tab[e] = nmarked++;
    }
  L->nmarked = nmarked;
  return DR_OK;
}

int meshsdf_size(const mesh *m, const double shift[3], double h, double band, int channels, const char *what,
                 int64_t *table_n, int64_t *floats_n) {
  band_lattice L;
  DR_TRY(mark_band(m, shift, h, band, what, &L));
  *table_n = L.nb;
  *floats_n = (int64_t)L.nmarked * LS_BRICK_NODES * channels;
  lattice_free(&L);
  return DR_OK;
}

int meshsdf_build(levelset_pool *pool, const mesh *m, const double shift[3], double h, double band,
                  const double *vel_out, const double *vel_in, const char *what, int *index) {
  const int nv = m->n_verts, nt = m->n_tris, nc = vel_out ? 7 : 1;
  band_lattice lat;
  DR_TRY(mark_band(m, shift, h, band, what, &lat));
  const double *origin = lat.origin, *centroid = lat.centroid;
  const int *dims = lat.dims;
  const int64_t nb = lat.nb;
  const int32_t nmarked = lat.nmarked;
  double *p = lat.p;
  int32_t *tab = lat.tab;
  const double bh = LS_BRICK * h, reach = band + 2 * sqrt(3.0) * h;
  const size_t nodes = (size_t)nmarked * LS_BRICK_NODES;
  double *dist = dr_malloc(sizeof(double) * (nodes ? nodes : 1), "level-set distances");
  int *near = dr_malloc(sizeof(int) * (nodes ? nodes : 1), "level-set nearest triangles");
  float *near_b = dr_malloc(sizeof(float) * 3 * (nodes ? nodes : 1), "level-set nearest points");
  int64_t *coords = dr_malloc(sizeof(int64_t) * (size_t)(nmarked ? nmarked : 1), "level-set bricks");
  if (!dist || !near || !near_b || !coords) {
    free(p), free(tab), free(dist), free(near), free(near_b), free(coords);
    return DR_ENOMEM;
  }
  for (size_t q = 0; q < nodes; ++q) dist[q] = INFINITY, near[q] = -1;
  for (int64_t e = 0; e < nb; ++e)
    if (tab[e] >= 0) coords[tab[e]] = e;

  /* 2. distances of the band nodes to the triangles near their brick, a brick at a time in
   * parallel: each brick's triangles (those whose reach holds its centre, as step 1 marked it)
   * listed in increasing order (CSR: bstart, btri), so that a node keeps the first triangle at its
   * least distance, whatever the threads */
  int64_t *tcount = dr_calloc((size_t)nt + 1, sizeof(int64_t), "level-set triangle counts");
  int64_t *bstart = dr_calloc((size_t)nmarked + 1, sizeof(int64_t), "level-set brick lists");
  if (!tcount || !bstart) {
    free(p), free(tab), free(dist), free(near), free(near_b), free(coords), free(tcount), free(bstart);
    return DR_ENOMEM;
  }
#pragma omp parallel for schedule(dynamic, 64)
  for (int t = 0; t < nt; ++t) { /* each triangle's bricks */
    const double *A = p + 3 * m->tri[3 * t], *B = p + 3 * m->tri[3 * t + 1], *C = p + 3 * m->tri[3 * t + 2];
    double nrm[4];
    triangle_plane(A, B, C, nrm);
    int b0[3], b1[3];
    brick_range(A, B, C, origin, bh, reach, dims, b0, b1);
    int64_t c = 0;
    for (int k = b0[2]; k <= b1[2]; ++k)
      for (int j = b0[1]; j <= b1[1]; ++j)
        for (int i = b0[0]; i <= b1[0]; ++i) {
          const double ctr[3] = {origin[0] + (4 * i + 2) * h, origin[1] + (4 * j + 2) * h, origin[2] + (4 * k + 2) * h};
          c += tab[((int64_t)k * dims[1] + j) * dims[0] + i] >= 0 && within_reach(ctr, A, B, C, nrm, reach);
        }
    tcount[t + 1] = c;
  }
  for (int t = 0; t < nt; ++t) tcount[t + 1] += tcount[t];
  const int64_t npairs = tcount[nt];
  int32_t *pair_b = dr_malloc(sizeof(int32_t) * (size_t)(npairs ? npairs : 1), "level-set brick pairs");
  int32_t *btri = dr_malloc(sizeof(int32_t) * (size_t)(npairs ? npairs : 1), "level-set brick lists");
  if (!pair_b || !btri) {
    free(p), free(tab), free(dist), free(near), free(near_b), free(coords), free(tcount), free(bstart), free(pair_b),
        free(btri);
    return DR_ENOMEM;
  }
#pragma omp parallel for schedule(dynamic, 64)
  for (int t = 0; t < nt; ++t) {
    const double *A = p + 3 * m->tri[3 * t], *B = p + 3 * m->tri[3 * t + 1], *C = p + 3 * m->tri[3 * t + 2];
    double nrm[4];
    triangle_plane(A, B, C, nrm);
    int b0[3], b1[3];
    brick_range(A, B, C, origin, bh, reach, dims, b0, b1);
    int64_t c = tcount[t];
    for (int k = b0[2]; k <= b1[2]; ++k)
      for (int j = b0[1]; j <= b1[1]; ++j)
        for (int i = b0[0]; i <= b1[0]; ++i) {
          const int32_t id = tab[((int64_t)k * dims[1] + j) * dims[0] + i];
          const double ctr[3] = {origin[0] + (4 * i + 2) * h, origin[1] + (4 * j + 2) * h, origin[2] + (4 * k + 2) * h};
          if (id >= 0 && within_reach(ctr, A, B, C, nrm, reach)) pair_b[c++] = id;
        }
  }
  for (int64_t e = 0; e < npairs; ++e) ++bstart[pair_b[e] + 1];
  for (int32_t b = 0; b < nmarked; ++b) bstart[b + 1] += bstart[b];
  for (int t = 0; t < nt; ++t) /* in increasing t: each brick's list is sorted */
    for (int64_t e = tcount[t]; e < tcount[t + 1]; ++e) btri[bstart[pair_b[e]]++] = t;
  for (int32_t b = nmarked; b > 0; --b) bstart[b] = bstart[b - 1]; /* the fill moved each start to its end */
  bstart[0] = 0;
  free(tcount), free(pair_b);
#pragma omp parallel for schedule(dynamic, 16)
  for (int32_t id = 0; id < nmarked; ++id) {
    const int64_t e = coords[id];
    const int i = (int)(e % dims[0]), j = (int)((e / dims[0]) % dims[1]), k = (int)(e / ((int64_t)dims[0] * dims[1]));
    for (int64_t u = bstart[id]; u < bstart[id + 1]; ++u) {
      const int t = btri[u];
      const double *A = p + 3 * m->tri[3 * t], *B = p + 3 * m->tri[3 * t + 1], *C = p + 3 * m->tri[3 * t + 2];
      for (int l = 0; l < LS_BRICK_NODES; ++l) {
        const double x[3] = {origin[0] + (4 * i + (l & 3)) * h, origin[1] + (4 * j + ((l >> 2) & 3)) * h,
                             origin[2] + (4 * k + (l >> 4)) * h};
        const size_t q = (size_t)id * LS_BRICK_NODES + (size_t)l;
        double bary[3];
        const double d = meshsdf_point_triangle(x, A, B, C, bary);
        if (d < dist[q]) {
          dist[q] = d, near[q] = t;
          for (int a = 0; a < 3; ++a) near_b[3 * q + a] = (float)bary[a];
        }
      }
    }
  }
  free(bstart), free(btri);

  /* 3. signs by the winding number; values and velocities into the pool */
  int *order = NULL, *cstart = NULL;
  double *cbox = NULL;
  char *cclosed = NULL;
  const int ncomp = winding_groups(m, p, &order, &cstart, &cbox, &cclosed);
  if (ncomp < 0) {
    free(p), free(tab), free(dist), free(near), free(near_b), free(coords);
    return dr_fail(DR_ENOMEM, "out of host memory for the level set of %s", what);
  }
  int64_t set_cap = pool->cap;
  if (grow64((void **)&pool->bricks, &pool->bricks_cap, pool->bricks_n + (int64_t)nodes * nc, sizeof(float), 0) ||
      grow64((void **)&pool->table, &pool->table_cap, pool->table_n + nb, sizeof(int32_t), 0) ||
      grow64((void **)&pool->sets, &set_cap, pool->n + 1, sizeof(levelset), 0)) {
    free(p), free(tab), free(dist), free(near), free(near_b), free(coords);
    free(order), free(cstart), free(cbox), free(cclosed);
    return dr_fail(DR_ENOMEM, "out of host memory for the level set of %s", what);
  }
  pool->cap = (int)set_cap;
  float *out = pool->bricks + pool->bricks_n;
  /* With every component closed and consistently oriented the winding number is an integer that
   * changes only across the surface, so a node y within a computed node z's distance to the
   * surface (a ball that no triangle enters) has z's sign: each brick computes the winding number
   * at its node farthest from the surface first, then only at nodes outside the balls of the
   * nodes computed so far. The safe radius is min(distance, band): a triangle not within reach of
   * the brick is farther than band from all its nodes. */
  int all_closed = 1;
  for (int c = 0; c < ncomp; ++c) all_closed &= cclosed[c];
  /* A union of closed components (overlapping parts, like the crawler's limbs at the joints):
   * the distance to the nearest triangle is the distance to the union's surface outside, but not
   * inside, where a part's triangles that lie inside another part are near and the true depth
   * is not (phi would read about 0 deep inside a joint, and its gradient would point across the
   * buried face). Inside, phi is -(the depth in the part that x is deepest in): the union's
   * signed distance min_c phi_c, whose zero set is the union's surface. tcomp: each triangle's
   * component. */
  int *tcomp = NULL;
  if (all_closed && ncomp > 1) {
    tcomp = dr_malloc(sizeof(int) * (size_t)(nt ? nt : 1), "level-set components");
    if (!tcomp) {
      free(p), free(tab), free(dist), free(near), free(near_b), free(coords);
      free(order), free(cstart), free(cbox), free(cclosed);
      return DR_ENOMEM;
    }
    for (int c = 0; c < ncomp; ++c)
      for (int t = cstart[c]; t < cstart[c + 1]; ++t) tcomp[order[t]] = c;
  }
  const int masked = tcomp && ncomp <= 64; /* the parts that hold a node fit a 64-bit mask */
#pragma omp parallel for schedule(dynamic, 4)
  for (int32_t id = 0; id < nmarked; ++id) {
    const int64_t e = coords[id];
    const int i = (int)(e % dims[0]), j = (int)((e / dims[0]) % dims[1]), k = (int)(e / ((int64_t)dims[0] * dims[1]));
    double ball[LS_BRICK_NODES][4]; /* computed nodes: x, y, z, radius^2 (signed by their sign) */
    uint64_t ball_parts[LS_BRICK_NODES]; /* masked: the parts that hold the ball */
    int nball = 0, lfar = 0;
    for (int l = 1; l < LS_BRICK_NODES; ++l)
      if (dist[(size_t)id * LS_BRICK_NODES + (size_t)l] > dist[(size_t)id * LS_BRICK_NODES + (size_t)lfar]) lfar = l;
    for (int l0 = 0; l0 < LS_BRICK_NODES; ++l0) {
      const int l = (l0 + lfar) % LS_BRICK_NODES;
      const double x[3] = {origin[0] + (4 * i + (l & 3)) * h, origin[1] + (4 * j + ((l >> 2) & 3)) * h,
                           origin[2] + (4 * k + (l >> 4)) * h};
      const size_t q = (size_t)id * LS_BRICK_NODES + (size_t)l;
      double sign = 0;
      uint64_t parts = 0; /* masked: bit c set when part c holds x (its own winding number) */
      for (int b = 0; b < nball && all_closed; ++b) {
        const double d0 = x[0] - ball[b][0], d1 = x[1] - ball[b][1], d2 = x[2] - ball[b][2];
        if (d0 * d0 + d1 * d1 + d2 * d2 < 0.999 * fabs(ball[b][3])) {
          sign = ball[b][3] < 0 ? -1.0 : 1.0;
          parts = ball_parts[b];
          break;
        }
      }
      if (sign == 0) {
        double w = 0;
        for (int c = 0; c < ncomp; ++c) {
          const double *b = cbox + 6 * c; /* a closed component adds 0 outside its box (grown by h) */
          if (cclosed[c] && (x[0] < b[0] - h || x[1] < b[1] - h || x[2] < b[2] - h || x[0] > b[3] + h ||
                             x[1] > b[4] + h || x[2] > b[5] + h))
            continue;
          double wc = 0;
          for (int t = cstart[c]; t < cstart[c + 1]; ++t) {
            const int *tr = m->tri + 3 * order[t];
            const double a = solid_angle(x, p + 3 * tr[0], p + 3 * tr[1], p + 3 * tr[2]);
            w += a, wc += a;
          }
          if (masked && fabs(wc) > 2 * PI) parts |= (uint64_t)1 << c;
        }
        sign = fabs(w) > 2 * PI ? -1.0 : 1.0; /* |w / 4 pi| > 1/2 */
        const double r = fmin(dist[q], band);
        if (all_closed && r > 0) {
          for (int a = 0; a < 3; ++a) ball[nball][a] = x[a];
          ball_parts[nball] = parts;
          ball[nball++][3] = sign * r * r;
        }
      }
      double d = dist[q];
      int t = near[q];
      float bw[3] = {near_b[3 * q], near_b[3 * q + 1], near_b[3 * q + 2]};
      if (sign < 0 && tcomp) {
        /* inside the union: unless x lies in its nearest triangle's part alone (then that part's
         * depth is dist), the deepest of the parts that hold x. Without the mask (more than 64
         * parts), the parts whose boxes hold x are tested by their own winding numbers. */
        const int c0 = t >= 0 ? tcomp[t] : -1;
        int others = 0;
        if (masked) others = (parts & ~(c0 >= 0 ? (uint64_t)1 << c0 : 0)) != 0;
        for (int c = 0; c < ncomp && !masked && !others; ++c) {
          const double *b = cbox + 6 * c;
          others = c != c0 && x[0] >= b[0] - h && x[1] >= b[1] - h && x[2] >= b[2] - h && x[0] <= b[3] + h &&
                   x[1] <= b[4] + h && x[2] <= b[5] + h;
        }
        double deepest = -1; /* a part's depth counts only if it is deeper (and x inside it) */
        for (int c = 0; c < ncomp && others && deepest < band; ++c) {
          if (masked && !((parts >> c) & 1)) continue;
          /* x inside part c lies at least d_c inside c's box (the ball of radius d_c about x is in
           * c), and d_c >= dist: a part whose box x is not that deep in cannot hold x deeper */
          const double *b = cbox + 6 * c;
          double room = INFINITY;
          for (int a = 0; a < 3; ++a) room = fmin(room, fmin(x[a] - b[a], b[3 + a] - x[a]));
          if (room + 1e-9 * h < d || room <= deepest) continue;
          double dc = INFINITY, bc[3] = {0, 0, 0};
          int tc = -1;
          for (int u = cstart[c]; u < cstart[c + 1]; ++u) {
            const int *tr = m->tri + 3 * order[u];
            double bary[3];
            const double du = meshsdf_point_triangle(x, p + 3 * tr[0], p + 3 * tr[1], p + 3 * tr[2], bary);
            if (du < dc) dc = du, tc = order[u], bc[0] = bary[0], bc[1] = bary[1], bc[2] = bary[2];
          }
          if (!(dc > deepest)) continue;
          if (!masked) {
            double w = 0;
            for (int u = cstart[c]; u < cstart[c + 1]; ++u) {
              const int *tr = m->tri + 3 * order[u];
              w += solid_angle(x, p + 3 * tr[0], p + 3 * tr[1], p + 3 * tr[2]);
            }
            if (!(fabs(w) > 2 * PI)) continue;
          }
          deepest = dc, t = tc;
          for (int a = 0; a < 3; ++a) bw[a] = (float)bc[a];
        }
        if (deepest >= 0) d = deepest;
      }
      float *o = out + q * (size_t)nc;
      o[0] = (float)(sign * fmin(d, band));
      if (nc > 1) {
        for (int a = 0; a < 6; ++a) o[1 + a] = 0.0f;
        if (t >= 0)
          for (int c = 0; c < 3; ++c)
            for (int a = 0; a < 3; ++a) {
              const int vi = m->tri[3 * t + c];
              o[LS_VEL_OUT + a] += bw[c] * (float)vel_out[3 * vi + a];
              o[LS_VEL_IN + a] += bw[c] * (float)vel_in[3 * vi + a];
            }
      }
    }
  }

  free(order), free(cstart), free(cbox), free(cclosed), free(tcomp);

  /* 4. bricks beyond the band: outside where a flood fill from the corner brick reaches */
  int64_t *stack = dr_malloc(sizeof(int64_t) * (size_t)nb, "level-set flood fill");
  if (!stack) {
    free(p), free(tab), free(dist), free(near), free(near_b), free(coords);
    return DR_ENOMEM;
  }
  int64_t top = 0;
  if (tab[0] == LS_INSIDE) tab[0] = LS_OUTSIDE, stack[top++] = 0;
  while (top > 0) {
    const int64_t e = stack[--top];
    const int i = (int)(e % dims[0]), j = (int)((e / dims[0]) % dims[1]), k = (int)(e / ((int64_t)dims[0] * dims[1]));
    const int nbr[6][3] = {{i - 1, j, k}, {i + 1, j, k}, {i, j - 1, k}, {i, j + 1, k}, {i, j, k - 1}, {i, j, k + 1}};
    for (int s = 0; s < 6; ++s) {
      const int *c = nbr[s];
      if (c[0] < 0 || c[1] < 0 || c[2] < 0 || c[0] >= dims[0] || c[1] >= dims[1] || c[2] >= dims[2]) continue;
      const int64_t f = ((int64_t)c[2] * dims[1] + c[1]) * dims[0] + c[0];
      if (tab[f] == LS_INSIDE) tab[f] = LS_OUTSIDE, stack[top++] = f;
    }
  }
  free(stack);

  levelset *L = &pool->sets[pool->n];
  memset(L, 0, sizeof *L);
  for (int a = 0; a < 3; ++a) L->origin[a] = (float)origin[a], L->dims[a] = dims[a], L->centroid[a] = (float)centroid[a];
  L->h = (float)h;
  L->inv_h = (float)(1.0 / h);
  L->band = (float)band;
  L->channels = nc;
  L->table0 = pool->table_n;
  L->brick0 = pool->bricks_n;
  if (nc > 1 && nv > 0)
    for (int i = 0; i < nv; ++i)
      for (int a = 0; a < 3; ++a) {
        L->vel_mean[a] += (float)(vel_out[3 * i + a] / nv);
        L->vel_mean[3 + a] += (float)(vel_in[3 * i + a] / nv);
      }
  memcpy(pool->table + pool->table_n, tab, sizeof(int32_t) * (size_t)nb);
  pool->table_n += nb;
  pool->bricks_n += (int64_t)nodes * nc;
  *index = pool->n++;
  free(p), free(tab), free(dist), free(near), free(near_b), free(coords);
  return DR_OK;
}

void levelset_pool_free(levelset_pool *pool) {
  if (!pool) return;
  memtally_free(pool->sets), memtally_free(pool->table), memtally_free(pool->bricks);
  memset(pool, 0, sizeof *pool);
}

float levelset_phi(const levelset_pool *pool, int index, const double x[3]) {
  const float xf[3] = {(float)x[0], (float)x[1], (float)x[2]};
  return ls_sample(&pool->sets[index], pool->table, pool->bricks, xf, NULL, 0, NULL); /* phi only */
}
