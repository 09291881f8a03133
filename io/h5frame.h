/* h5frame.h - one frame of particles in one HDF5 file, written collectively by all ranks.
 *
 * Layout of DIR/frame_NNNNN.h5 (NNNNN = frame number, 00000 = the initial state):
 *   /particles/position  float32 [N][3]  m
 *   /particles/velocity  float32 [N][3]  m/s
 *   /particles/id        uint64  [N]     stable over the run
 *   /particles/material  uint8   [N]     index into the scene's materials, in file order (uint16
 *                                        beyond 256 materials, int32 beyond 65,536)
 *   /particles/owner     uint8   [N]     rank * 256 + device that computed the particle (uint16 on
 *                                        2 to 256 ranks, int32 beyond: h5frame_layout_of)
 *   /particles/logjp     float32 [N]     log Jp, the plastic volume change of NACC snow (0 for other
 *                                        materials)
 *   /particles/J         float32 [N]     det F
 *   /particles/F         float32 [N][9]  deformation gradient (elastic part), row-major
 *   /particles/stress    float32 [N][6]  Cauchy stress, Pa: xx yy zz xy yz zx
 *   /particles/C         float32 [N][9]  APIC affine velocity matrix, 1/s, row-major
 *   root attributes: time (double, s), frame (int), dx (double, m), n_particles (uint64),
 *                    units (string), materials (string: names separated by ','),
 *                    owner_encoding (string), fields (string: the datasets written, separated by
 *                    ',', in the order above); with precision half also precision ("half") and
 *                    position_spacing (double, m)
 * With h5frame_meta.precision H5FRAME_HALF the floating datasets hold 16 bits a value instead, in
 * HDF5 float types that any reader converts to float32 or double (frame_fields.h's
 * h5frame_encoding_of: position a fixed point of the domain's extent, velocity, logjp, J and F
 * IEEE binary16, stress and C a 16-bit float with float32's exponent; pack16.h).
 * Which datasets a frame holds is the scene's output.fields (h5frame_meta.fields); position is
 * always among them (the XDMF geometry). The datasets present keep this order and these types.
 * N is the sum over ranks; each rank's particles are the rows at the offset given by an exclusive
 * scan of the counts. The datasets are contiguous (no chunks, no filters), so any HDF5 reader
 * reads them as usual. The file is written as DIR/.frame_NNNNN.h5.tmp and renamed when complete,
 * so a file under its final name is always whole. The writing is split as h5rows.h describes. */
#ifndef DRIFT_H5FRAME_H
#define DRIFT_H5FRAME_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "frame_fields.h"
#include "h5rows.h"
#include "pack16.h"

typedef struct h5frame_data {
  size_t n;                /* particles on this rank (may be 0) */
  const float *position;   /* 3n */
  const float *velocity;   /* 3n */
  const uint64_t *id;      /* n */
  const int32_t *material; /* n */
  const int32_t *owner;    /* n */
  const float *logjp;      /* n */
  const float *J;          /* n */
  const float *F;          /* 9n */
  const float *stress;     /* 6n */
  const float *C;          /* 9n */
} h5frame_data;
/* Only the arrays of the fields asked for are read (the others may be NULL). */

typedef struct h5frame_meta {
  int frame;
  double time; /* s */
  double dx;   /* m */
  int n_materials;
  const char *const *material_names;
  unsigned fields; /* H5FRAME_BIT of each dataset to write, position included (the same on every
                    * rank); 0: H5FRAME_DEFAULT_FIELDS */
  int precision;    /* enum h5frame_precision (the same on every rank) */
  double extent;    /* precision half: the largest |coordinate| a position may have, m (the
                     * domain's, the same on every rank); larger ones are stored as the largest */
  /* room the free-space check keeps for a file written right after the frame (the checkpoint
   * due with it): bytes a particle and in all; 0: none */
  double after_per_particle, after_bytes;
} h5frame_meta;

/* A frame being written (h5frame_begin .. h5frame_end). */
typedef struct h5frame_file {
  h5rows_file rows; /* the file: paths, counts, the datasets' offsets (at[H5FRAME_*]) */
  int frame;
  h5frame_layout lay; /* the fields, their precision and widths */
  pack16_fixed fixed; /* precision half: the positions' fixed point */
} h5frame_file;

/* Collective over comm. Creates DIR/.frame_NNNNN.h5.tmp with everything but the rows, for n
 * particles on this rank (DIR must exist); on failure no file is left and every rank returns the
 * same non-zero status. */
int h5frame_begin(MPI_Comm comm, const char *dir, const h5frame_meta *meta, size_t n, h5frame_file *f);
/* d->n of this rank's rows, from its row `first` on (first + d->n at most h5frame_begin's n: a
 * frame is put whole in one call or chunk by chunk, each row once); no MPI and no HDF5 call, so
 * any thread may call it while the caller's other threads use both. The fields a layout converts
 * (precision half's floating fields, the narrowed integers) go into a file in memory straight
 * into a mapping of their rows, encoded by the calling thread's OpenMP team; elsewhere through
 * pack (the caller's; pack_bytes: h5frame_pack_bytes of the frame's fields and precision, or at
 * least 4 bytes a value of the widest row; where nothing is converted it may be NULL) by a team
 * of omp_get_max_threads() - 1 (at least 1), and are written from there. An integer value beyond its
 * narrowed width (a material index of n_materials or more, an owner of another rank count) fails
 * as an internal error naming the field. Returns this rank's status only. */
int h5frame_put(const h5frame_file *f, size_t first, const h5frame_data *d, void *pack, size_t pack_bytes);
/* Local, the thread that puts the frame's rows: this rank's rows of every field allocated ahead of
 * the puts, in their order, by a thread of its own (h5rows.h's allocation ahead); h5frame_ahead_join
 * after the last put. */
void h5frame_ahead_start(h5frame_file *f, h5rows_ahead *a);
void h5frame_ahead_join(h5frame_file *f);
/* Collective over comm. Agrees on every rank's put_status (h5frame_put's); publishes the file
 * under DIR/frame_NNNNN.h5, or after a failure removes it and any file under that name. */
int h5frame_end(MPI_Comm comm, h5frame_file *f, int put_status);
/* Collective over comm: h5frame_begin, h5frame_put (with a conversion buffer of its own at
 * precision half) and h5frame_end. */
int h5frame_write(MPI_Comm comm, const char *dir, const h5frame_meta *meta, const h5frame_data *d);

/* Reads the particle count (root attribute n_particles) of the frame file at path, and the fields
 * it holds (H5FRAME_BIT of each dataset present; fields may be NULL); one rank. */
int h5frame_count(const char *path, uint64_t *n, unsigned *fields);

/* The final path of a frame: DIR/frame_NNNNN.h5 (writes at most len bytes). */
void h5frame_path(const char *dir, int frame, char *out, size_t len);

#endif
