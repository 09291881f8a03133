/* drift_diff - two runs of one scene compared frame by frame, particle by particle (matched by
 * id): the runs of float and compact storage (parallel.storage), docs/validation.md.
 *
 *   drift_diff DIR_A DIR_B [GRAVITY_Y]
 *
 * Reads DIR_A/frame_NNNNN.h5 and DIR_B's of the same number (both need position and id; velocity
 * where written, else zero (no kinetic energy); mass where written, else every particle's is
 * taken as 1 kg and the energies are sums per unit mass) and prints CSV on stdout, one row a frame both hold:
 *
 *   frame,time,n,rms_dx,max_dx,rms_v,ek_a,ek_b,ep_a,ep_b,rms_dF,max_dF
 *
 * rms_dx, max_dx: the root mean square and the largest |x_A - x_B| over the particles, in cells
 * (the frame's dx); rms_v: the rms of |v_A - v_B| over that of |v_A| (0 where A is at rest);
 * ek: the kinetic energy sum m |v|^2 / 2 (J); ep: the potential energy -sum m g_y y (J, g_y
 * GRAVITY_Y, default -9.81, about y = 0); rms_dF, max_dF: the root mean square and the largest
 * |F_A - F_B| (Frobenius) where both frames hold F (output.fields), else empty. Exit 1 when the frames differ in their ids, 2 when a
 * file cannot be read. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame_read.h"

typedef struct run_frame {
  size_t n;
  float *x, *v, *m, *F; /* F: NULL where the frame holds none */
  uint64_t *id;
  size_t *order;
  double time, dx;
} run_frame;

static const uint64_t *ids_;
static int by_id(const void *a, const void *b) {
  const uint64_t x = ids_[*(const size_t *)a], y = ids_[*(const size_t *)b];
  return (x > y) - (x < y);
}

static void frame_free(run_frame *f) {
  free(f->x), free(f->v), free(f->m), free(f->F), free(f->id), free(f->order);
  memset(f, 0, sizeof *f);
}

static int load(const char *dir, int number, run_frame *f) {
  char path[4200];
  snprintf(path, sizeof path, "%s/frame_%05d.h5", dir, number);
  frame_file ff;
  size_t n[4] = {0};
  memset(f, 0, sizeof *f);
  int rc = frame_open(&ff, path);
  if (!rc) rc = frame_dataset(&ff, "position", H5T_NATIVE_FLOAT, 3, (void **)&f->x, &n[0]);
  if (!rc && frame_dataset(&ff, "velocity", H5T_NATIVE_FLOAT, 3, (void **)&f->v, &n[1])) { /* absent: 0 */
    f->v = calloc(3 * (n[0] ? n[0] : 1), sizeof(float));
    n[1] = n[0];
    if (!f->v) rc = -1, snprintf(ff.err, sizeof ff.err, "%s: out of memory", path);
  }
  if (!rc && frame_dataset(&ff, "mass", H5T_NATIVE_FLOAT, 1, (void **)&f->m, &n[2])) n[2] = n[0]; /* absent: m = 1 */
  if (!rc) rc = frame_dataset(&ff, "id", H5T_NATIVE_UINT64, 1, (void **)&f->id, &n[3]);
  size_t nF = n[0];
  if (!rc && frame_dataset(&ff, "F", H5T_NATIVE_FLOAT, 9, (void **)&f->F, &nF)) f->F = NULL, nF = n[0]; /* absent */
  if (!rc) rc = frame_attr(&ff, "time", H5T_NATIVE_DOUBLE, &f->time);
  if (!rc) rc = frame_attr(&ff, "dx", H5T_NATIVE_DOUBLE, &f->dx);
  if (rc) fprintf(stderr, "drift_diff: %s\n", ff.err);
  frame_close(&ff);
  if (rc) return -1;
  if (n[0] != n[1] || n[0] != n[2] || n[0] != n[3] || nF != n[0]) {
    fprintf(stderr, "drift_diff: %s: datasets of different lengths\n", path);
    return -1;
  }
  f->n = n[0];
  f->order = malloc(sizeof(size_t) * (f->n ? f->n : 1));
  if (!f->order) {
    fprintf(stderr, "drift_diff: out of memory for %zu particles\n", f->n);
    return -1;
  }
  for (size_t i = 0; i < f->n; ++i) f->order[i] = i;
  ids_ = f->id;
  qsort(f->order, f->n, sizeof(size_t), by_id);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: drift_diff DIR_A DIR_B [GRAVITY_Y]\n");
    return 2;
  }
  const double gy = argc == 4 ? atof(argv[3]) : -9.81;
  frame_quiet();
  int *fa = NULL, *fb = NULL, na = 0, nb = 0;
  char err[4400];
  if (frame_list(argv[1], &fa, &na, err, sizeof err) < 0 || frame_list(argv[2], &fb, &nb, err, sizeof err) < 0) {
    fprintf(stderr, "drift_diff: %s\n", err);
    return 2;
  }
  printf("frame,time,n,rms_dx,max_dx,rms_v,ek_a,ek_b,ep_a,ep_b,rms_dF,max_dF\n");
  int status = 0;
  for (int i = 0, j = 0; i < na && j < nb;) {
    if (fa[i] != fb[j]) {
      if (fa[i] < fb[j]) ++i;
      else ++j;
      continue;
    }
    run_frame A, B;
    if (load(argv[1], fa[i], &A) || load(argv[2], fb[j], &B)) return 2;
    if (A.n != B.n) {
      fprintf(stderr, "drift_diff: frame %d: %zu particles against %zu\n", fa[i], A.n, B.n);
      return 1;
    }
    double s2 = 0, mx = 0, dv2 = 0, v2 = 0, ek[2] = {0, 0}, ep[2] = {0, 0}, f2 = 0, fmx = 0;
    for (size_t k = 0; k < A.n; ++k) {
      const size_t a = A.order[k], b = B.order[k];
      if (A.id[a] != B.id[b]) {
        fprintf(stderr, "drift_diff: frame %d: the runs hold different ids\n", fa[i]);
        return 1;
      }
      double d2 = 0;
      for (int c = 0; c < 3; ++c) {
        const double d = (double)A.x[3 * a + c] - B.x[3 * b + c], dv = (double)A.v[3 * a + c] - B.v[3 * b + c];
        d2 += d * d, dv2 += dv * dv, v2 += (double)A.v[3 * a + c] * A.v[3 * a + c];
        ek[0] += 0.5 * (A.m ? A.m[a] : 1.0) * (double)A.v[3 * a + c] * A.v[3 * a + c];
        ek[1] += 0.5 * (B.m ? B.m[b] : 1.0) * (double)B.v[3 * b + c] * B.v[3 * b + c];
      }
      ep[0] -= (A.m ? A.m[a] : 1.0) * gy * A.x[3 * a + 1], ep[1] -= (B.m ? B.m[b] : 1.0) * gy * B.x[3 * b + 1];
      s2 += d2, mx = fmax(mx, sqrt(d2));
      if (A.F && B.F) {
        double e2 = 0;
        for (int c = 0; c < 9; ++c) e2 += ((double)A.F[9 * a + c] - B.F[9 * b + c]) * ((double)A.F[9 * a + c] - B.F[9 * b + c]);
        f2 += e2, fmx = fmax(fmx, sqrt(e2));
      }
    }
    const double n = A.n ? (double)A.n : 1.0;
    printf("%d,%.6g,%zu,%.4g,%.4g,%.4g,%.8g,%.8g,%.8g,%.8g,", fa[i], A.time, A.n, sqrt(s2 / n) / A.dx, mx / A.dx,
           v2 > 0 ? sqrt(dv2 / v2) : 0.0, ek[0], ek[1], ep[0], ep[1]);
    if (A.F && B.F) printf("%.4g,%.4g\n", sqrt(f2 / n), fmx);
    else printf(",\n");
    frame_free(&A), frame_free(&B);
    ++i, ++j;
  }
  free(fa), free(fb);
  return status;
}
