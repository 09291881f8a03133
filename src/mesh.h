/* mesh.h - triangle meshes from Wavefront OBJ files, for mesh colliders and mesh bodies.
 *
 * mesh_read_obj() reads the `v` and `f` lines of an OBJ file and ignores every other statement
 * (vt, vn, o, g, s, usemtl, mtllib, l, p, comments). A `v` line holds at least three numbers
 * (x y z; further numbers, a w or a vertex colour, are ignored). An `f` line holds three or more
 * vertex references, each `i`, `i/t`, `i//n` or `i/t/n` where only i counts; i is 1-based, or
 * negative to count back from the last vertex defined so far (-1 the last). A face of k > 3
 * vertices becomes the fan (0, j, j+1), j = 1 .. k-2. A face must refer to vertices defined
 * above it. Anything else malformed is an error "PATH:LINE: what is wrong". */
#ifndef DRIFT_MESH_H
#define DRIFT_MESH_H

#include <stddef.h>

typedef struct mesh {
  int n_verts, n_tris;
  double *v; /* [3 n_verts] positions, as the file gives them */
  int *tri;  /* [3 n_tris] 0-based vertex indices */
} mesh;

/* Reads path into *out (owned: free with mesh_destroy). On failure returns DR_EINPUT (or
 * DR_ENOMEM) and writes a one-line message "PATH:LINE: what" (or "PATH: what") into err. */
int mesh_read_obj(const char *path, mesh *out, char *err, size_t errcap);
void mesh_destroy(mesh *m);

/* The axis-aligned bounding box of the vertices that faces use. */
void mesh_bounds(const mesh *m, double lo[3], double hi[3]);
/* The enclosed volume (m^3) by the divergence theorem: positive for outward-facing triangles
 * (counter-clockwise seen from outside), negative for inward-facing ones. */
double mesh_volume(const mesh *m);

#endif
