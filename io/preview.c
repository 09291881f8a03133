/* preview.c - PNG previews of frames (see preview.h). */
#define _POSIX_C_SOURCE 200809L
#include "preview.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "h5frame.h"
#include "h5util.h"

#ifdef DRIFT_HAVE_PNG
#include <png.h>
#endif

const unsigned char preview_background[3] = {24, 26, 32};
const unsigned char preview_outline[3] = {112, 116, 128};

/* Tableau's ten: distinct for the few materials or GPUs a scene usually has. */
static const unsigned char PALETTE[10][3] = {{78, 121, 167},  {242, 142, 43},  {225, 87, 89},  {118, 183, 178},
                                             {89, 161, 79},   {237, 201, 72},  {176, 122, 161}, {255, 157, 167},
                                             {156, 117, 95},  {186, 176, 172}};

void preview_palette(int k, unsigned char rgb[3]) {
  if (k >= 0 && k < 10) {
    memcpy(rgb, PALETTE[k], 3);
    return;
  }
  /* further colours: hues spread by the golden ratio, saturation 0.6, value 0.9 */
  const double h = fmod(0.1 + 0.618033988749895 * (double)(k < 0 ? -k : k), 1.0) * 6.0, s = 0.6, v = 0.9;
  const int i = (int)h;
  const double f = h - i, p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
  double c[3];
  switch (i) {
  case 0: c[0] = v, c[1] = t, c[2] = p; break;
  case 1: c[0] = q, c[1] = v, c[2] = p; break;
  case 2: c[0] = p, c[1] = v, c[2] = t; break;
  case 3: c[0] = p, c[1] = q, c[2] = v; break;
  case 4: c[0] = t, c[1] = p, c[2] = v; break;
  default: c[0] = v, c[1] = p, c[2] = q; break;
  }
  for (int a = 0; a < 3; ++a) rgb[a] = (unsigned char)lround(255.0 * c[a]);
}

/* The picture's axes: world axis of the horizontal (u) and vertical (v) image directions, with
 * their signs, and the axis looked along (depth counts from its max face, nearest the viewer). */
typedef struct view_axes {
  int u, v, d;
  int u_flip, v_flip; /* 1: the image axis runs along -world axis */
} view_axes;

static view_axes axes_of(int view) {
  switch (view) {
  case PREVIEW_SIDE: return (view_axes){.u = 2, .v = 1, .d = 0, .u_flip = 1, .v_flip = 0};
  case PREVIEW_TOP: return (view_axes){.u = 0, .v = 2, .d = 1, .u_flip = 0, .v_flip = 1};
  default: return (view_axes){.u = 0, .v = 1, .d = 2, .u_flip = 0, .v_flip = 0};
  }
}

void preview_dims(const preview_params *pp, int *width, int *height) {
  const view_axes ax = axes_of(pp->view);
  const double eu = pp->domain_max[ax.u] - pp->domain_min[ax.u], ev = pp->domain_max[ax.v] - pp->domain_min[ax.v];
  const double L = eu > ev ? eu : ev;
  *width = (int)lround(pp->size * eu / L);
  *height = (int)lround(pp->size * ev / L);
  if (*width < 1) *width = 1;
  if (*height < 1) *height = 1;
}

void preview_path(const char *dir, int frame, char *out, size_t len) {
  char h5[H5UTIL_PATH_MAX];
  h5frame_path(dir, frame, h5, sizeof h5);
  size_t k = strlen(h5);
  if (k >= 3 && !strcmp(h5 + k - 3, ".h5")) h5[k - 3] = 0;
  snprintf(out, len, "%s.png", h5);
}

/* A pixel's key: the depth's bits above the particle's colour source (its material, or its owner:
 * both order as their palette indices do), so that the smallest key is the nearest particle and,
 * of two at the same depth, the smaller palette index. */
static uint64_t pixel_key(float depth, uint32_t source) {
  uint32_t bits;
  memcpy(&bits, &depth, sizeof bits); /* non-negative floats order as their bits do */
  return (uint64_t)bits << 32 | source;
}

/* A particle's depth: 0 at the domain's face nearest the viewer, 1 at the far one (NaN stays). */
static double depth_of(const view_axes *ax, const preview_params *pp, const float *x) {
  return (pp->domain_max[ax->d] - x[ax->d]) / (pp->domain_max[ax->d] - pp->domain_min[ax->d]);
}

/* Draws particles into c's keys (UINT64_MAX: nothing drawn) and widens c's depth range and
 * devices per rank over them. */
static void rasterise(const preview_params *pp, const preview_data *d, preview_canvas *c) {
  const view_axes ax = axes_of(pp->view);
  const int W = c->width, H = c->height;
  const double *lo = pp->domain_min, *hi = pp->domain_max;
  const double eu = hi[ax.u] - lo[ax.u], ev = hi[ax.v] - lo[ax.v];
  const double px_per_m = W / eu; /* the same along v, up to the rounding of H */
  for (size_t i = 0; i < d->n; ++i) {
    const float *x = d->position + 3 * i;
    if (pp->color == PREVIEW_BY_OWNER && (d->owner[i] & 255) + 1 > c->ndev) c->ndev = (d->owner[i] & 255) + 1;
    double u = (x[ax.u] - lo[ax.u]) / eu, v = (x[ax.v] - lo[ax.v]) / ev;
    const double dep = depth_of(&ax, pp, x);
    if (dep == dep) { /* the shades span every particle's depth that is a number */
      const double dc = dep < 0 ? 0 : dep > 1 ? 1 : dep;
      if (dc < c->range[0]) c->range[0] = dc;
      if (dc > c->range[1]) c->range[1] = dc;
    }
    if (!(u == u) || !(v == v) || !(dep == dep)) continue; /* NaN: nothing to draw */
    if (ax.u_flip) u = 1.0 - u;
    if (!ax.v_flip) v = 1.0 - v; /* rows run downwards */
    /* the backends keep particles inside the domain; clamp anyway, so the casts below stay defined */
    const double cx = fmin(fmax(u * W, -1.0), W + 1.0), cy = fmin(fmax(v * H, -1.0), H + 1.0);
    const float depth = (float)(dep < 0 ? 0 : dep > 1 ? 1 : dep);
    const uint32_t source = (uint32_t)(pp->color == PREVIEW_BY_OWNER ? d->owner[i] : d->material[i]);
    const uint64_t key = pixel_key(depth, source);
    /* a disc of 0.6 of the particle spacing, so that neighbours' discs close the gaps */
    double r = d->vol0 ? 0.6 * cbrt((double)d->vol0[i]) * px_per_m : 0.0;
    if (!(r < 16.0)) r = r == r ? 16.0 : 0.0;
    int c0 = (int)floor(cx), r0 = (int)floor(cy);
    c0 = c0 < 0 ? 0 : c0 >= W ? W - 1 : c0;
    r0 = r0 < 0 ? 0 : r0 >= H ? H - 1 : r0;
    const int R = (int)ceil(r);
    for (int row = r0 - R; row <= r0 + R; ++row) {
      if (row < 0 || row >= H) continue;
      for (int col = c0 - R; col <= c0 + R; ++col) {
        if (col < 0 || col >= W) continue;
        const double du = col + 0.5 - cx, dv = row + 0.5 - cy;
        if ((row != r0 || col != c0) && du * du + dv * dv > r * r) continue;
        uint64_t *p = c->keys + (size_t)row * (size_t)W + (size_t)col;
        if (key < *p) *p = key;
      }
    }
  }
}

#ifdef DRIFT_HAVE_PNG
/* libpng reports errors through a callback that must not return: the message is kept and the
 * writer jumps back to png_write's setjmp. */
typedef struct png_err {
  jmp_buf jmp;
  char msg[256];
} png_err;

static void on_png_error(png_structp png, png_const_charp msg) {
  png_err *e = png_get_error_ptr(png);
  snprintf(e->msg, sizeof e->msg, "%s", msg);
  longjmp(e->jmp, 1);
}
static void on_png_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

/* Writes rgb (height rows of 3 width bytes) to tmp as an 8-bit RGB PNG. final names the file in
 * messages. */
static int png_write(const char *tmp, const char *final, const unsigned char *rgb, int W, int H) {
  FILE *volatile f = fopen(tmp, "wb");
  if (!f) return dr_fail(DR_EIO, "cannot write preview %s: %s", final, strerror(errno));
  png_err err = {.msg = ""};
  png_structp volatile png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, on_png_error, on_png_warning);
  png_infop volatile info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info) {
    png_structp p = png;
    png_infop in = info;
    if (p) png_destroy_write_struct(&p, in ? &in : NULL);
    fclose(f);
    return dr_fail(DR_ENOMEM, "cannot write preview %s: libpng could not start (out of memory)", final);
  }
  if (setjmp(err.jmp)) {
    png_structp p = png;
    png_infop in = info;
    png_destroy_write_struct(&p, &in);
    fclose(f);
    return dr_fail(DR_EIO, "cannot write preview %s: libpng: %s", final, err.msg);
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)W, (png_uint_32)H, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int row = 0; row < H; ++row) png_write_row(png, rgb + (size_t)row * 3 * (size_t)W);
  png_write_end(png, NULL);
  {
    png_structp p = png;
    png_infop in = info;
    png_destroy_write_struct(&p, &in);
  }
  /* buffered bytes reach the file system here: a full disk shows up in fflush or fclose */
  const int flushed = fflush(f) == 0 && !ferror(f);
  const int e = errno;
  if (fclose(f) != 0 || !flushed)
    return dr_fail(DR_EIO, "cannot write preview %s: %s", final, strerror(flushed ? errno : e));
  return DR_OK;
}
#else
/* A build without libpng: scene_load refuses output.preview, so this is not reached from a scene. */
static int png_write(const char *tmp, const char *final, const unsigned char *rgb, int W, int H) {
  (void)tmp, (void)rgb, (void)W, (void)H;
  return dr_fail(DR_EINPUT, "cannot write preview %s: this build of drift has no libpng (install libpng-dev and "
                 "rebuild)", final);
}
#endif

/* A drawn pixel's colour: the palette colour of its key's source (color: enum preview_color; ndev:
 * the devices per rank, which number the owner colours) times the shade of its depth within
 * range, the nearest and farthest depth of any rank's particles. */
static void pixel_colour(uint64_t key, int color, int ndev, const double range[2], unsigned char rgb[3]) {
  const uint32_t source = (uint32_t)key, bits = (uint32_t)(key >> 32);
  float depth;
  memcpy(&depth, &bits, sizeof depth);
  const int k = color == PREVIEW_BY_OWNER ? (int)(source >> 8) * ndev + (int)(source & 255) : (int)source;
  preview_palette(k, rgb);
  const double span = range[1] - range[0] > 1e-6 ? range[1] - range[0] : 1.0;
  double rel = (depth - range[0]) / span;
  rel = rel < 0 ? 0 : rel > 1 ? 1 : rel;
  const double shade = 1.0 - (1.0 - PREVIEW_SHADE_MIN) * rel;
  for (int a = 0; a < 3; ++a) rgb[a] = (unsigned char)lround(rgb[a] * shade);
}

/* Rank 0: the combined keys as colours, the domain's outline on the background, the PNG. */
static int write_picture(const char *tmp, const char *final, const uint64_t *keys, int W, int H, int color, int ndev,
                         const double range[2]) {
  unsigned char *rgb = malloc((size_t)W * (size_t)H * 3);
  if (!rgb) return dr_fail(DR_ENOMEM, "out of host memory for preview %s (%d x %d pixels)", final, W, H);
  for (int row = 0; row < H; ++row)
    for (int col = 0; col < W; ++col) {
      const size_t i = (size_t)row * (size_t)W + (size_t)col;
      unsigned char *px = rgb + 3 * i;
      if (keys[i] != UINT64_MAX) {
        pixel_colour(keys[i], color, ndev, range, px);
      } else {
        const int edge = row == 0 || col == 0 || row == H - 1 || col == W - 1;
        memcpy(px, edge ? preview_outline : preview_background, 3);
      }
    }
  int rc = png_write(tmp, final, rgb, W, H);
  free(rgb);
  if (rc == DR_OK && rename(tmp, final) != 0)
    rc = dr_fail(DR_EIO, "cannot write preview %s: %s (renaming %s)", final, strerror(errno), tmp);
  if (rc) (void)unlink(tmp);
  return rc;
}

int preview_begin(const preview_params *pp, preview_canvas *c) {
  memset(c, 0, sizeof *c);
  preview_dims(pp, &c->width, &c->height);
  const size_t npix = (size_t)c->width * (size_t)c->height;
  c->range[0] = HUGE_VAL, c->range[1] = -HUGE_VAL;
  if (!(c->keys = malloc(sizeof *c->keys * npix)))
    return dr_fail(DR_ENOMEM, "out of host memory for a preview (%d x %d pixels)", c->width, c->height);
  for (size_t i = 0; i < npix; ++i) c->keys[i] = UINT64_MAX;
  return DR_OK;
}

void preview_add(preview_canvas *c, const preview_params *pp, const preview_data *d) {
  if (c->keys) rasterise(pp, d, c);
}

int preview_end(MPI_Comm comm, const char *dir, int frame, const preview_params *pp, preview_canvas *c, int skip) {
  int rank = 0;
  const int W = c->width, H = c->height;
  DR_MPI(MPI_Comm_rank(comm, &rank));
  char final[H5UTIL_PATH_MAX + 8], tmp[H5UTIL_PATH_MAX + 32];
  preview_path(dir, frame, final, sizeof final);
  const int k = snprintf(tmp, sizeof tmp, "%s%s.frame_%05d.png.tmp", dir, dir[0] ? "/" : "", frame);
  if (k < 0 || k >= H5UTIL_PATH_MAX) {
    free(c->keys);
    c->keys = NULL;
    const int rc = dr_fail(DR_EIO, "cannot write preview in %s: the folder's path is too long", dir);
    dr_mark_agreed(); /* the same path on every rank */
    return rc;
  }
  /* a rank that skips (its frame's rows failed): no picture, on every rank */
  int any = 0;
  skip = skip != 0;
  DR_MPI(MPI_Allreduce(&skip, &any, 1, MPI_INT, MPI_MAX, comm));
  if (any) {
    free(c->keys);
    c->keys = NULL;
    return DR_OK;
  }
  const size_t npix = (size_t)W * (size_t)H;
  uint64_t *all = rank == 0 ? malloc(sizeof *all * npix) : NULL;
  int rc = c->keys && (rank != 0 || all) ? DR_OK
                                         : dr_fail(DR_ENOMEM, "out of host memory for preview %s (%d x %d pixels)", final, W, H);
  rc = comm_agree(comm, rc);
  if (rc == DR_OK) {
    /* One allreduce (MIN) for what the colours of every rank's particles depend on: the nearest
     * and farthest particle depth, which the shades span, and the devices per rank (max owner
     * device + 1), which number the owner colours. Maxima travel negated. */
    double mine[3] = {c->range[0], -c->range[1], -(double)c->ndev}, all3[3];
    int e = MPI_Allreduce(mine, all3, 3, MPI_DOUBLE, MPI_MIN, comm);
    if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Allreduce(preview depths)");
    /* the nearest particle of any rank, ties to the smaller colour: the smallest key */
    if (rc == DR_OK && (e = MPI_Reduce(c->keys, all, (int)npix, MPI_UINT64_T, MPI_MIN, 0, comm)) != MPI_SUCCESS)
      rc = comm_fail(e, __FILE__, __LINE__, "MPI_Reduce(preview pixels)");
    const double range[2] = {all3[0], -all3[1]};
    /* an MPI failure is every rank's (MPI_ERRORS_RETURN on a collective); the PNG is rank 0's */
    if (rc == DR_OK && rank == 0) rc = write_picture(tmp, final, all, W, H, pp->color, (int)-all3[2], range);
    rc = comm_agree(comm, rc);
  }
  free(c->keys);
  c->keys = NULL;
  free(all);
  return rc;
}

int preview_write(MPI_Comm comm, const char *dir, int frame, const preview_params *pp, const preview_data *d) {
  preview_canvas c;
  (void)preview_begin(pp, &c); /* its failure (out of memory) is preview_end's to agree on */
  preview_add(&c, pp, d);
  return preview_end(comm, dir, frame, pp, &c, 0);
}
