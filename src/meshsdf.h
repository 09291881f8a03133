/* meshsdf.h - turns triangle meshes into the sparse narrow-band level sets of physics/levelset.h
 * and keeps them in one pool (three arrays: headers, brick table, brick values) that the
 * backends borrow (the CPU backend) or upload once (the CUDA backend).
 *
 * Construction (meshsdf_build):
 *   1. the lattice covers the mesh's bounding box with a margin of band + one brick, so its
 *      outer layer of bricks lies beyond the band (and reads +band, outside);
 *   2. a brick is in the band when its centre is within band + its half-diagonal of a triangle
 *      (exact point-triangle distance); for every node of such a brick the distance to the
 *      triangles that marked the brick is computed (closest points, Ericson's region test), the
 *      nearest triangle and the barycentric coordinates of the nearest point kept (a brick at a
 *      time in parallel, its triangles in increasing order: the first at the least distance);
 *   3. the sign of every band node comes from the generalised winding number of the mesh at the
 *      node (Jacobson et al. 2013: the sum of the triangles' solid angles / 4 pi; inside where
 *      |w| > 1/2, which is robust to small gaps, duplicated faces and either orientation). It
 *      costs one solid angle per band node and triangle (OpenMP over bricks): seconds for
 *      meshes of thousands of triangles at a few hundred cells across. A mesh of several closed
 *      components that overlap (a figure whose limbs overlap at the joints) is their union: a
 *      node inside holds minus its depth in the component it is deepest in (min over the
 *      components' signed distances), not its distance to the nearest triangle, which may be
 *      a face buried in another component (phi about 0 deep inside a joint). Outside, the two
 *      agree. Components are told apart by shared vertices; a mesh with an open component keeps
 *      the distance to the nearest triangle everywhere;
 *   4. the bricks beyond the band take their sign by a flood fill of the brick table from the
 *      lattice's corner (outside) through bricks beyond the band: the band bricks enclose the
 *      surface, so what the fill does not reach is inside.
 * Sequences: vel_out / vel_in, when given, are per-vertex velocities (m/s); each band node then
 * stores the velocity at its nearest surface point (barycentric), channels 1-6. */
#ifndef DRIFT_MESHSDF_H
#define DRIFT_MESHSDF_H

#include <stddef.h>
#include <stdint.h>

#include "mesh.h"
#include "physics/levelset.h"

typedef struct levelset_pool {
  int n, cap;
  levelset *sets;        /* [n] */
  int32_t *table;        /* every level set's brick table, one after the other */
  int64_t table_n, table_cap;
  float *bricks;         /* every level set's brick values */
  int64_t bricks_n, bricks_cap; /* floats */
} levelset_pool;

/* The sizes meshsdf_build appends to a pool for the same arguments (channels: 7 with vel_out,
 * else 1), exactly: *table_n brick-table entries (int32) and *floats_n brick values, from steps 1
 * and 2's marking alone (milliseconds where the build takes seconds). Fails as meshsdf_build does
 * where the lattice or the band is too large. */
int meshsdf_size(const mesh *m, const double shift[3], double h, double band, int channels, const char *what,
                 int64_t *table_n, int64_t *floats_n);
/* Room for sets level sets of table_n table entries and floats_n brick values in all, allocated
 * exactly (a pool reserved so never grows); the pool's arrays are counted host memory (memtally.h,
 * kind MT_TRANSFER). */
int levelset_pool_reserve(levelset_pool *pool, int sets, int64_t table_n, int64_t floats_n);

/* Appends the level set of mesh m to the pool: vertices shifted by -shift (the collider's local
 * frame), lattice spacing h, band half-width band (m). vel_out, vel_in: [3 n_verts] or NULL.
 * *index: its position in pool->sets. Fails (DR_EINPUT, message naming what) when the lattice
 * would be too large; what names the mesh in messages. */
int meshsdf_build(levelset_pool *pool, const mesh *m, const double shift[3], double h, double band,
                  const double *vel_out, const double *vel_in, const char *what, int *index);
void levelset_pool_free(levelset_pool *pool);

/* phi of level set index at x (m, in its own frame), on the host. */
float levelset_phi(const levelset_pool *pool, int index, const double x[3]);

/* The exact unsigned distance from x to triangle (a, b, c), and the barycentric coordinates of
 * the nearest point (for tests and the builder). */
double meshsdf_point_triangle(const double x[3], const double a[3], const double b[3], const double c[3],
                              double bary[3]);

#endif
