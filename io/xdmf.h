/* xdmf.h - DIR/frames.xdmf, the file a user opens in ParaView: a temporal collection of the
 * frames written so far, each a Polyvertex grid whose geometry and attributes point into the
 * frame's HDF5 file (relative paths, so the folder can be moved). Rewritten after every frame
 * through a temporary file and a rename, so it always describes complete frames only.
 * Beside it, DIR/frames_vertices.bin holds the vertex connectivity 0, 1, ..., N-1 (int64) that
 * ParaView's Xdmf3 reader needs to make one vertex cell per particle (see xdmf.c). */
#ifndef DRIFT_XDMF_H
#define DRIFT_XDMF_H

#include <stdint.h>

typedef struct xdmf_frame {
  int frame;
  double time;   /* s */
  uint64_t n;    /* particles in the frame (all ranks) */
  unsigned fields; /* the datasets the frame holds: H5FRAME_BIT of each (h5frame.h); 0: the default set */
} xdmf_frame;

/* Called by one rank only. */
int xdmf_write(const char *dir, const xdmf_frame *frames, int n_frames);

#endif
