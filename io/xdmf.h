/* xdmf.h - DIR/frames.xdmf, the file a user opens in ParaView: a temporal collection of the
 * frames written so far, each a Polyvertex grid whose geometry and attributes point into the
 * frame's HDF5 file (relative paths, so the folder can be moved). Rewritten after every frame
 * through a temporary file and a rename, so it always describes complete frames only.
 * Beside it, DIR/frames_vertices.bin holds the vertex connectivity 0, 1, ..., N-1 (int64) that
 * ParaView's Xdmf3 reader needs to make one vertex cell per particle (see xdmf.c). */
#ifndef DRIFT_XDMF_H
#define DRIFT_XDMF_H

#include <stddef.h>
#include <stdint.h>

typedef struct xdmf_frame {
  int frame;
  double time;   /* s */
  uint64_t n;    /* particles in the frame (all ranks) */
  unsigned fields; /* the datasets the frame holds: H5FRAME_BIT of each (h5frame.h); 0: the default set */
} xdmf_frame;

/* Called by one rank only. */
int xdmf_write(const char *dir, const xdmf_frame *frames, int n_frames);

/* The same for a run, which rewrites the file after every frame: the entries' text is kept in l
 * (zeroed at first; xdmf_list_free at the end), and each write formats only the entries that
 * differ from the last write's (the new frame's; a frame written again, after a resume, and the
 * ones after it), so that a write costs the copy of the text, not its formatting: at 5000 frames
 * 12-19 ms a write formatting every entry on the CPU machine. The file is the same. */
typedef struct xdmf_list {
  char *text;          /* the entries, one after the other */
  size_t len, cap;
  size_t *ends;        /* where entry i ends in text */
  xdmf_frame *frames;  /* the frames the entries are of */
  int n, cap_n;
} xdmf_list;
int xdmf_list_write(xdmf_list *l, const char *dir, const xdmf_frame *frames, int n_frames);
void xdmf_list_free(xdmf_list *l);

#endif
