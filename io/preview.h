/* preview.h - a small PNG picture of the particles beside each frame file (output.preview).
 *
 * DIR/frame_NNNNN.png next to DIR/frame_NNNNN.h5: an orthographic view of the domain along one
 * axis, every particle a small disc coloured by its material or by the rank and device that
 * computed it (its owner, as the paper's figures colour particles by GPU), the nearest particle
 * winning each pixel (a depth buffer) and darker the farther it lies (over the particles' depths), on a dark background with
 * the domain's outline. Every rank draws its own particles into a buffer of one 64-bit key per
 * pixel, (depth bits << 32) | colour source (the material or the owner, which order as their
 * palette indices), so that "the nearer particle, and of two at the same depth the smaller palette
 * index" is the smallest key: one MPI_Reduce with MPI_MIN combines the ranks, and the picture
 * does not depend on which rank held which particle. The keys hold no shade, so that a rank draws
 * its particles in chunks (preview_add) before the ranks know the depths the shades span; rank 0
 * shades the combined pixels. Rank 0 writes the PNG (libpng)
 * as DIR/.frame_NNNNN.png.tmp and renames it, so a file under its final name is always whole. */
#ifndef DRIFT_PREVIEW_H
#define DRIFT_PREVIEW_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

enum preview_view {
  PREVIEW_FRONT = 0, /* look along -z: x to the right, y up (gravity down in the default scene) */
  PREVIEW_SIDE = 1,  /* look along -x: -z to the right, y up */
  PREVIEW_TOP = 2    /* look along -y: x to the right, -z up */
};
enum preview_color { PREVIEW_BY_MATERIAL = 0, PREVIEW_BY_OWNER = 1 };

typedef struct preview_params {
  int size;                            /* pixels on the picture's longer side */
  int view;                            /* enum preview_view */
  int color;                           /* enum preview_color */
  double domain_min[3], domain_max[3]; /* m: the picture shows exactly the domain */
} preview_params;

typedef struct preview_data {
  size_t n;                /* particles on this rank (may be 0) */
  const float *position;   /* 3n, m */
  const float *vol0;       /* n, m^3: a particle's disc spans its share of the volume; NULL: one pixel */
  const int32_t *material; /* n */
  const int32_t *owner;    /* n: rank * 256 + device */
} preview_data;

/* The background and outline colours, and palette colour k (a material index, or an owner's
 * rank * devices + device) as 8-bit RGB: ten fixed distinct colours, then hues by the golden ratio.
 * A particle's pixel is its palette colour times a shade, rounded: 1 for the particle nearest the
 * viewer down to PREVIEW_SHADE_MIN for the farthest (of all ranks), linear in depth between. */
#define PREVIEW_SHADE_MIN 0.45
extern const unsigned char preview_background[3];
extern const unsigned char preview_outline[3];
void preview_palette(int k, unsigned char rgb[3]);

/* The picture's width and height in pixels for these parameters. */
void preview_dims(const preview_params *pp, int *width, int *height);

/* DIR/frame_NNNNN.png, the frame file's path with .png for .h5 (writes at most len bytes). */
void preview_path(const char *dir, int frame, char *out, size_t len);

/* A picture being drawn, chunk after chunk of this rank's particles (preview_begin, preview_add,
 * preview_end): its keys, and the depth range and devices per rank seen so far. */
typedef struct preview_canvas {
  int width, height;
  uint64_t *keys; /* [height][width], malloc; NULL: begin failed */
  double range[2]; /* nearest and farthest depth drawn (HUGE_VAL, -HUGE_VAL: none) */
  int ndev;        /* 1 + the largest owner device drawn (by owner) */
} preview_canvas;
/* Local: the canvas, empty; fails (a one-line message) only out of memory, and the canvas is then
 * to be given to preview_end all the same, which agrees on that failure. */
int preview_begin(const preview_params *pp, preview_canvas *c);
/* Local, any thread: draws the particles of d (a chunk of this rank's) on c. */
void preview_add(preview_canvas *c, const preview_params *pp, const preview_data *d);
/* Collective over comm: combines the ranks' canvases on rank 0, which writes DIR/frame_NNNNN.png
 * as preview_write does (a canvas whose preview_begin failed fails every rank, agreed); frees c's
 * keys. skip nonzero on any rank (its frame failed, so the canvas is partial): no picture, and
 * every rank returns DR_OK (the frame's failure is reported where it happened). */
int preview_end(MPI_Comm comm, const char *dir, int frame, const preview_params *pp, preview_canvas *c, int skip);

/* Collective over comm. Draws this rank's particles, combines the ranks on rank 0, which writes
 * DIR/frame_NNNNN.png (DIR must exist). On failure (a one-line message naming the file) no file is
 * left under the final or the temporary name, and every rank returns the same non-zero status. */
int preview_write(MPI_Comm comm, const char *dir, int frame, const preview_params *pp, const preview_data *d);

#endif
