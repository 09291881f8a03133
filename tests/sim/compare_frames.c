/* compare_frames - two frame files of the same scene agree particle by particle (matched by id).
 *
 *   compare_frames A.h5 B.h5 XTOL VTOL
 *
 * Passes (exit 0) when both hold the same set of ids, the same frame and time, and for every
 * particle |xA - xB| <= XTOL (m, per component) and |vA - vB| <= VTOL * (max |v| + 1e-3 m/s).
 * Prints the largest differences; exit 1 when they are out of tolerance, 2 when a file cannot be
 * read. Used by check_resume.sh: a run resumed from a checkpoint against one run straight through
 * (the same float32 physics; only the order of the P2G sums may differ, i.e. rounding). */
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct frame {
  size_t n;
  float *x, *v;
  uint64_t *id;
  size_t *order;
  int number;
  double time;
} frame;

static const uint64_t *ids_;
static int by_id(const void *a, const void *b) {
  const uint64_t x = ids_[*(const size_t *)a], y = ids_[*(const size_t *)b];
  return (x > y) - (x < y);
}

static int read_set(hid_t f, const char *name, hid_t type, void *buf) {
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  if (d < 0) return -1;
  herr_t e = H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
  H5Dclose(d);
  return e < 0 ? -1 : 0;
}

static int load(const char *path, frame *fr) {
  memset(fr, 0, sizeof *fr);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return -1;
  hid_t d = H5Dopen2(f, "/particles/id", H5P_DEFAULT), sp = d >= 0 ? H5Dget_space(d) : -1;
  hsize_t n = 0;
  if (sp >= 0) H5Sget_simple_extent_dims(sp, &n, NULL);
  if (sp >= 0) H5Sclose(sp);
  if (d >= 0) H5Dclose(d);
  fr->n = (size_t)n;
  fr->x = malloc(sizeof(float) * 3 * n + 1);
  fr->v = malloc(sizeof(float) * 3 * n + 1);
  fr->id = malloc(sizeof(uint64_t) * n + 1);
  fr->order = malloc(sizeof(size_t) * n + 1);
  int bad = !fr->x || !fr->v || !fr->id || !fr->order;
  bad = bad || read_set(f, "/particles/position", H5T_NATIVE_FLOAT, fr->x) || read_set(f, "/particles/velocity", H5T_NATIVE_FLOAT, fr->v) ||
        read_set(f, "/particles/id", H5T_NATIVE_UINT64, fr->id);
  hid_t a = H5Aopen(f, "frame", H5P_DEFAULT);
  bad = bad || a < 0 || H5Aread(a, H5T_NATIVE_INT, &fr->number) < 0;
  if (a >= 0) H5Aclose(a);
  a = H5Aopen(f, "time", H5P_DEFAULT);
  bad = bad || a < 0 || H5Aread(a, H5T_NATIVE_DOUBLE, &fr->time) < 0;
  if (a >= 0) H5Aclose(a);
  H5Fclose(f);
  if (bad) return -1;
  for (size_t i = 0; i < fr->n; ++i) fr->order[i] = i;
  ids_ = fr->id;
  qsort(fr->order, fr->n, sizeof *fr->order, by_id);
  return 0;
}

static void release(frame *fr) {
  free(fr->x);
  free(fr->v);
  free(fr->id);
  free(fr->order);
  memset(fr, 0, sizeof *fr);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s A.h5 B.h5 XTOL VTOL\n", argv[0]);
    return 2;
  }
  const double xtol = atof(argv[3]), vtol = atof(argv[4]);
  frame A = {0}, B = {0};
  int rc = 1;
  if (load(argv[1], &A) || load(argv[2], &B)) {
    fprintf(stderr, "compare_frames: cannot read %s or %s\n", argv[1], argv[2]);
    rc = 2;
    goto done;
  }
  if (A.n != B.n || A.number != B.number || fabs(A.time - B.time) > 1e-9) {
    printf("FAIL: %s holds frame %d (t %.6f s, %zu particles), %s frame %d (t %.6f s, %zu particles)\n", argv[1], A.number,
           A.time, A.n, argv[2], B.number, B.time, B.n);
    goto done;
  }
  size_t bad_id = 0;
  double dx = 0, dv = 0, vmax = 0;
  for (size_t k = 0; k < A.n; ++k) {
    const size_t i = A.order[k], j = B.order[k];
    bad_id += A.id[i] != B.id[j];
    double d2 = 0, v2 = 0;
    for (int c = 0; c < 3; ++c) {
      dx = fmax(dx, fabs((double)A.x[3 * i + c] - B.x[3 * j + c]));
      const double d = (double)A.v[3 * i + c] - B.v[3 * j + c];
      d2 += d * d;
      v2 += (double)A.v[3 * i + c] * A.v[3 * i + c];
    }
    dv = fmax(dv, sqrt(d2));
    vmax = fmax(vmax, sqrt(v2));
  }
  const int ok = bad_id == 0 && dx <= xtol && dv <= vtol * (vmax + 1e-3);
  printf("%s: frame %d, %zu particles, %zu ids differ, max |dx| %.3g m (tolerance %.3g), max |dv| %.3g m/s = %.3g vmax "
         "(tolerance %.3g, vmax %.3f m/s)\n",
         ok ? "ok" : "FAIL", A.number, A.n, bad_id, dx, xtol, dv, dv / (vmax + 1e-3), vtol, vmax);
  rc = ok ? 0 : 1;
done:
  release(&A);
  release(&B);
  return rc;
}
