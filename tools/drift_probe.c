/* drift_probe - the displacement of a material point, frame by frame: the K particles nearest to a
 * point P in the first frame, followed by their ids through the run (the tip of the elastic beam
 * of jobs/validation/: Turek & Hron's point A).
 *
 *   drift_probe DIR X Y Z [--k K]
 *
 * Reads every DIR/frame_NNNNN.h5 in frame order (tools/frame_read.h; the frames must hold the
 * fields position and id) and prints CSV on stdout, one row per frame (lines starting with '#'
 * before the header say which particles):
 *
 *   frame,time,ux,uy,uz,x,y,z
 *
 * in metres and seconds: x, y, z the mean position of the K particles (default 8), ux, uy, uz its
 * displacement since the first frame. The mean of a few particles rather than the one nearest to
 * P: particles are sampled at random inside their cells, so the nearest one stands up to about a
 * quarter cell from P, and the mean of the nearest 8 (the particles of about one cell) stands
 * closer to P on average and moves with the material around it.
 *
 * Exit status: 0; 1 no frame, fewer than K particles, or a followed particle missing from a
 * frame; 2 bad arguments or a file that cannot be read. Every HDF5 call is checked; the failing
 * call is named. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame_read.h"

enum { K_MAX = 1024 };

/* Reads a frame's positions (3n floats), ids (n) and time; both arrays allocated. 0, or 2 after
 * printing the failure. */
static int read_frame(const char *path, float **x, uint64_t **id, size_t *n, double *time) {
  frame_file ff;
  void *px = NULL, *pid = NULL;
  size_t nid = 0;
  int rc = frame_open(&ff, path);
  if (!rc) rc = frame_dataset(&ff, "position", H5T_NATIVE_FLOAT, 3, &px, n);
  if (!rc) rc = frame_dataset(&ff, "id", H5T_NATIVE_UINT64, 1, &pid, &nid);
  if (!rc) rc = frame_attr(&ff, "time", H5T_NATIVE_DOUBLE, time);
  if (frame_close(&ff) < 0 && !rc) rc = -1;
  if (!rc && nid != *n) {
    snprintf(ff.err, sizeof ff.err, "%s: %zu ids for %zu positions", path, nid, *n);
    rc = -1;
  }
  if (rc) {
    fprintf(stderr, "drift_probe: %s\n", ff.err);
    free(px), free(pid);
    *x = NULL, *id = NULL;
    return 2;
  }
  *x = px, *id = pid;
  return 0;
}

static int usage(void) {
  fprintf(stderr, "usage: drift_probe DIR X Y Z [--k K (1 to %d particles, default 8)]\n", K_MAX);
  return 2;
}

int main(int argc, char **argv) {
  const char *dir = NULL;
  double p[3];
  int np = 0, k = 8;
  for (int i = 1; i < argc; ++i) {
    char *end;
    if (!strcmp(argv[i], "--k") && i + 1 < argc) {
      k = (int)strtol(argv[++i], &end, 10);
      if (*end) return usage();
    } else if (!dir && argv[i][0] != '-') {
      dir = argv[i];
    } else if (np < 3) {
      p[np++] = strtod(argv[i], &end);
      if (*end || !isfinite(p[np - 1])) return usage();
    } else {
      return usage();
    }
  }
  if (!dir || np != 3 || k < 1 || k > K_MAX) return usage();
  if (frame_quiet() < 0) {
    fprintf(stderr, "drift_probe: cannot silence the HDF5 error stack (H5Eset_auto2)\n");
    return 2;
  }
  int *frames = NULL, nf = 0;
  char err[4352];
  if (frame_list(dir, &frames, &nf, err, sizeof err) < 0) {
    fprintf(stderr, "drift_probe: %s\n", err);
    return 2;
  }
  if (nf == 0) {
    fprintf(stderr, "drift_probe: %s: no frame_NNNNN.h5 files\n", dir);
    return 1;
  }

  uint64_t follow[K_MAX];
  double x0[3] = {0, 0, 0};
  int rc = 0;
  for (int f = 0; f < nf && !rc; ++f) {
    char path[4200];
    snprintf(path, sizeof path, "%s/frame_%05d.h5", dir, frames[f]);
    float *x;
    uint64_t *id;
    size_t n;
    double t;
    if ((rc = read_frame(path, &x, &id, &n, &t))) break;
    if (f == 0) {
      /* The k nearest to P: a partial insertion sort of (distance, index), k small. */
      if (n < (size_t)k) {
        fprintf(stderr, "drift_probe: %s: %zu particles, fewer than --k %d\n", path, n, k);
        rc = 1;
      }
      double best_d[K_MAX];
      size_t best_i[K_MAX];
      int have = 0;
      for (size_t i = 0; i < n && !rc; ++i) {
        const double dx = x[3 * i] - p[0], dy = x[3 * i + 1] - p[1], dz = x[3 * i + 2] - p[2];
        const double d = dx * dx + dy * dy + dz * dz;
        if (have == k && d >= best_d[k - 1]) continue;
        int j = have < k ? have++ : k - 1;
        for (; j > 0 && best_d[j - 1] > d; --j) best_d[j] = best_d[j - 1], best_i[j] = best_i[j - 1];
        best_d[j] = d, best_i[j] = i;
      }
      for (int j = 0; j < k && !rc; ++j) {
        follow[j] = id[best_i[j]];
        for (int c = 0; c < 3; ++c) x0[c] += x[3 * best_i[j] + c] / k;
      }
      if (!rc) {
        printf("# drift_probe %s: the %d particles nearest to (%.6g, %.6g, %.6g) in frame %d, farthest %.3g m; "
               "their mean at (%.6f, %.6f, %.6f)\n", dir, k, p[0], p[1], p[2], frames[0], sqrt(best_d[k - 1]), x0[0],
               x0[1], x0[2]);
        printf("frame,time,ux,uy,uz,x,y,z\n");
      }
    }
    double m[3] = {0, 0, 0};
    int found = 0;
    for (size_t i = 0; i < n && !rc; ++i)
      for (int j = 0; j < k; ++j)
        if (id[i] == follow[j]) {
          for (int c = 0; c < 3; ++c) m[c] += x[3 * i + c] / k;
          ++found;
          break;
        }
    if (!rc && found != k) {
      fprintf(stderr, "drift_probe: %s: %d of the %d followed particles present\n", path, found, k);
      rc = 1;
    }
    if (!rc)
      printf("%d,%.6f,%.7f,%.7f,%.7f,%.7f,%.7f,%.7f\n", frames[f], t, m[0] - x0[0], m[1] - x0[1], m[2] - x0[2], m[0],
             m[1], m[2]);
    free(x), free(id);
  }
  free(frames);
  return rc;
}
