/* drift_front - the front position and the height at the wall, frame by frame, of a collapse
 * that spreads along +x from a wall at the low-x side of the domain (the validation scenes of
 * jobs/validation/: a granular column, a dam break).
 *
 *   drift_front DIR [--bin B] [--min N] [--wall W]
 *
 * Reads every DIR/frame_NNNNN.h5 in frame order (HDF5 alone, through tools/frame_read.h) and
 * prints CSV on stdout, one row per frame (lines starting with '#' before the header say how):
 *
 *   frame,time,front,height,back,bottom,beyond
 *
 * in metres and seconds. Each is the extent of the connected mass, measured frame by frame:
 *
 * front: the particles are binned along x in bins of width B (default: the frame's dx) from the
 * smallest x. Starting from the first bin that holds at least N particles (default 3), the run of
 * consecutive bins holding at least N particles each is followed. `back` is the smallest x in the
 * first bin (the mass against the wall), the end the largest x in the run's last bin or in the bin
 * just after it (the thin edge of the mass, fewer than N particles, touching it); front = end -
 * back, the length of the deposit from the wall. A grain or a droplet that flew ahead, separated
 * from the mass by an empty bin or a nearly empty one, does not count; `beyond` says how many
 * particles lie ahead of the end so measured. Resolved to about one bin.
 * height: the same along y for the particles within W (default B) of the back: from the bottom of
 * the mass there (`bottom`) to the top of the run of occupied y bins that starts at it: the
 * deposit's thickness at the wall.
 * back, bottom: how far the back and the bottom moved since the first frame (m). Walls act on the
 * grid nodes within 2.5 dx of a face, so a heavy body that starts 3 dx from a wall settles into
 * that band by up to a cell; measuring from the mass itself, not from the wall, keeps this
 * resolution effect out of the front and the height.
 *
 * Exit status: 0; 1 no frame or an empty frame; 2 bad arguments or a file that cannot be read.
 * Every HDF5 call is checked; the HDF5 error stack is silenced and the failing call named. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame_read.h"

static int fail(const char *path, const char *what) {
  fprintf(stderr, "drift_front: %s: %s\n", path, what);
  return 2;
}

/* Reads a frame's positions (malloc'ed into *x, 3n floats), time and cell size. */
static int read_frame(const char *path, float **x, size_t *n, double *time, double *dx) {
  frame_file ff;
  void *pos = NULL;
  int rc = frame_open(&ff, path);
  if (!rc) rc = frame_dataset(&ff, "position", H5T_NATIVE_FLOAT, 3, &pos, n);
  if (!rc) rc = frame_attr(&ff, "time", H5T_NATIVE_DOUBLE, time);
  if (!rc) rc = frame_attr(&ff, "dx", H5T_NATIVE_DOUBLE, dx);
  if (frame_close(&ff) < 0 && !rc) rc = -1;
  if (rc) {
    fprintf(stderr, "drift_front: %s\n", ff.err);
    free(pos);
    *x = NULL;
    return 2;
  }
  *x = pos;
  return 0;
}

/* The extent of the run of occupied bins: values v[i] (only those with keep[i], or all when keep
 * is NULL) binned from their smallest in bins of width b; bins with at least min_count values are
 * occupied; the run starts at the first occupied bin. *start: the smallest value in that bin;
 * *end_out: the largest value in the run's last bin, or in the bin after it when that one is not
 * empty. Both NAN when no bin is occupied. */
static void run_extent(const float *v, int stride, const unsigned char *keep, size_t n, double b, int min_count,
                       double *start, double *end_out) {
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < n; ++i)
    if (!keep || keep[i]) lo = fmin(lo, v[i * stride]), hi = fmax(hi, v[i * stride]);
  *start = *end_out = NAN;
  if (!(hi >= lo)) return;
  const size_t nb = (size_t)floor((hi - lo) / b) + 2;
  size_t *count = calloc(nb, sizeof *count);
  double *top = malloc(nb * sizeof *top), *bottom = malloc(nb * sizeof *bottom);
  if (!count || !top || !bottom) {
    free(count), free(top), free(bottom);
    return;
  }
  for (size_t k = 0; k < nb; ++k) top[k] = -INFINITY, bottom[k] = INFINITY;
  for (size_t i = 0; i < n; ++i) {
    if (keep && !keep[i]) continue;
    const double r = (v[i * stride] - lo) / b;
    size_t k = r <= 0 ? 0 : (size_t)r;
    if (k >= nb) k = nb - 1;
    count[k]++;
    top[k] = fmax(top[k], v[i * stride]);
    bottom[k] = fmin(bottom[k], v[i * stride]);
  }
  size_t k = 0;
  while (k < nb && count[k] < (size_t)min_count) ++k;
  if (k < nb) *start = bottom[k];
  for (; k < nb && count[k] >= (size_t)min_count; ++k) *end_out = top[k];
  /* The thin edge of the mass: particles in the bin just past the run touch it. */
  if (k < nb && count[k] > 0) *end_out = top[k];
  free(count), free(top), free(bottom);
}

int main(int argc, char **argv) {
  const char *dir = NULL;
  double bin = 0, wall = 0;
  int min_count = 3;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--bin") && i + 1 < argc) bin = atof(argv[++i]);
    else if (!strcmp(argv[i], "--wall") && i + 1 < argc) wall = atof(argv[++i]);
    else if (!strcmp(argv[i], "--min") && i + 1 < argc) min_count = atoi(argv[++i]);
    else if (argv[i][0] != '-' && !dir) dir = argv[i];
    else {
      fprintf(stderr, "usage: drift_front DIR [--bin B] [--min N] [--wall W]\n");
      return 2;
    }
  }
  if (!dir || bin < 0 || wall < 0 || min_count < 1) {
    fprintf(stderr, "usage: drift_front DIR [--bin B (m, > 0)] [--min N (>= 1)] [--wall W (m, > 0)]\n");
    return 2;
  }
  if (frame_quiet() < 0) return fail(dir, "cannot silence the HDF5 error stack (H5Eset_auto2)");

  /* The frames in DIR, in frame order. */
  int *frames = NULL, nf = 0;
  char err[4352];
  if (frame_list(dir, &frames, &nf, err, sizeof err) < 0) {
    fprintf(stderr, "drift_front: %s\n", err);
    return 2;
  }
  if (nf == 0) {
    fprintf(stderr, "drift_front: %s: no frame_NNNNN.h5 files\n", dir);
    return 1;
  }

  double x0 = 0, y0 = 0;
  int rc = 0;
  for (int k = 0; k < nf && !rc; ++k) {
    char path[4096];
    snprintf(path, sizeof path, "%s/frame_%05d.h5", dir, frames[k]);
    float *x;
    size_t n;
    double t, dx;
    if ((rc = read_frame(path, &x, &n, &t, &dx))) break;
    if (n == 0) {
      fprintf(stderr, "drift_front: %s: no particles\n", path);
      rc = 1;
      free(x);
      break;
    }
    const double b = bin > 0 ? bin : dx, w = wall > 0 ? wall : b;
    double back, end, bottom, top;
    run_extent(x, 3, NULL, n, b, min_count, &back, &end);
    unsigned char *near = malloc(n);
    if (!near) {
      free(x);
      rc = fail(path, "out of memory");
      break;
    }
    for (size_t i = 0; i < n; ++i) near[i] = x[3 * i] - back < w;
    run_extent(x + 1, 3, near, n, b, min_count, &bottom, &top);
    if (k == 0) {
      x0 = back, y0 = bottom;
      printf("# drift_front %s: bins %.6g m, at least %d particles each; height within %.6g m of the back; "
             "frame %d: back x0 = %.6f m, bottom y0 = %.6f m\n", dir, b, min_count, w, frames[0], x0, y0);
      printf("frame,time,front,height,back,bottom,beyond\n");
    }
    size_t beyond = 0;
    for (size_t i = 0; i < n; ++i) beyond += x[3 * i] > end;
    printf("%d,%.6f,%.6f,%.6f,%.6f,%.6f,%zu\n", frames[k], t, end - back, top - bottom, back - x0, bottom - y0, beyond);
    free(near);
    free(x);
  }
  free(frames);
  return rc;
}
