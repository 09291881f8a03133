/* frame_read - reads drift's frame files (DIR/frame_NNNNN.h5, the layout of io/h5frame.h and
 * docs/output.md) with HDF5 alone: the measuring tools (tools/drift_front.c, tools/drift_probe.c,
 * tests/validation/check_poiseuille.c) and the tests that read a run's frames back
 * (tests/sim/test_frames.c, tests/sim/test_fields.c).
 *
 * Every HDF5 call is checked; a failure returns -1 and leaves one line in ff->err naming the file,
 * the dataset or attribute and the failing call ("frames/frame_00003.h5: /particles/id: not
 * [N] (H5Sget_simple_extent_dims)"). The caller decides whether to print it and exit. */
#ifndef DRIFT_FRAME_READ_H
#define DRIFT_FRAME_READ_H

#include <hdf5.h>
#include <stddef.h>

typedef struct frame_file {
  hid_t f;             /* the open file; H5I_INVALID_HID when closed */
  char path[4096];     /* as given to frame_open */
  char err[4096 + 256]; /* the last failure, one line */
} frame_file;

/* Turns off HDF5's own error printing (its stack on stderr), so that a failure is reported once,
 * by the caller, from ff->err. 0, or -1 when H5Eset_auto2 fails. */
int frame_quiet(void);

/* Opens path read-only. 0, or -1 with ff->err set; ff->f is H5I_INVALID_HID after a failure. */
int frame_open(frame_file *ff, const char *path);

/* Closes the file (a closed or never opened one is left alone). 0, or -1 with ff->err set. */
int frame_close(frame_file *ff);

/* Reads /particles/NAME into *out (allocated here, the caller frees; NULL after a failure): *n
 * rows of cols values, converted to the memory type type (H5T_NATIVE_FLOAT, H5T_NATIVE_DOUBLE,
 * H5T_NATIVE_UINT64, H5T_NATIVE_INT32, ...). cols 1 wants a 1-D dataset [N], cols > 1 a 2-D one
 * [N][cols]; another shape, a missing dataset or a failed read is an error. */
int frame_dataset(frame_file *ff, const char *name, hid_t type, int cols, void **out, size_t *n);

/* Reads the scalar root attribute NAME (time, dx, frame, n_particles, ...) as type into *out. */
int frame_attr(frame_file *ff, const char *name, hid_t type, void *out);

/* The frame numbers of the files DIR/frame_NNNNN.h5 (five digits), ascending, in *frames
 * (allocated here, the caller frees), their count in *count (0: none, *frames NULL). 0, or -1
 * with one line in err (err_cap bytes) when DIR cannot be read. */
int frame_list(const char *dir, int **frames, int *count, char *err, size_t err_cap);

#endif
