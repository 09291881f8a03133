/* h5util.h - what the HDF5 files of io/ share: checked HDF5 calls and their messages,
 * attributes, datasets written as one hyperslab, row selections, numbered paths, the counts over
 * ranks and the free-space check. Frames and checkpoints are written as h5rows.h says. */
#ifndef DRIFT_H5UTIL_H
#define DRIFT_H5UTIL_H

#include <hdf5.h>
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

enum { H5UTIL_PATH_MAX = 4096 };

/* Checks an HDF5 call (negative return = failure) inside a function that has a local `int st`, a
 * `const char *path` naming the file being written or read and a `fail:` label. The message
 * (h5util_fail) names the file by its final name and gives the system's reason. */
#define H5CK(expr, call, what)                                                                     \
  do {                                                                                             \
    if ((expr) < 0) {                                                                              \
      st = h5util_fail(call, what, path, __FILE__, __LINE__);                                      \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

/* Records (DR_EIO) "FILE: REASON (CALL failed: WHAT)" for an HDF5 call that just failed on the
 * file at path. FILE is the name the user will look for: a temporary DIR/.NAME.tmp is named
 * DIR/NAME. REASON is the system's (h5util_reason). */
int h5util_fail(const char *call, const char *what, const char *path, const char *file, int line);

/* The system's reason for the HDF5 call that just failed on the file at path, into out: the
 * errno text that HDF5's error stack carries (the sec2 driver's "error message = '...'");
 * else, through the MPI-IO driver, which keeps no errno, the cause tried directly: for a call
 * that creates or opens the file, opening path for writing (errno; a folder in the way of a
 * temporary name is named with it), for one that writes, the
 * folder's free space (statvfs: under 1 MiB is "No space left on device"); else MPI's error
 * string from the stack; else "HDF5 gave no reason". */
const char *h5util_reason(const char *call, const char *path, char *out, size_t len);

/* The name of the file a temporary path stands for: DIR/.NAME.tmp -> DIR/NAME (others as they are). */
const char *h5util_final_name(const char *path, char *out, size_t len);

/* Closes a handle on an error path (the first failure's message is the one kept). */
#define H5_DROP(closer, h)                                                                         \
  do {                                                                                             \
    if ((h) >= 0) (void)closer(h);                                                                 \
    (h) = H5I_INVALID_HID;                                                                         \
  } while (0)

/* HDF5 prints its own error stack to stderr by default; drift reports one message instead. */
void h5util_quiet(void);

/* A scalar attribute. */
int h5util_attr_scalar(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *value, const char *path);
/* A fixed-length, null-terminated ASCII string attribute (size strlen + 1, so "" is valid too). */
int h5util_attr_string(hid_t loc, const char *name, const char *value, const char *path);

/* Creates NAME in loc with `total` rows of `cols` values (cols = 1: a 1-D dataset) with the
 * creation properties dcpl; *dset is its open handle. */
int h5util_create_rows(hid_t loc, const char *name, hid_t ftype, int cols, uint64_t total, hid_t dcpl, hid_t *dset,
                       const char *path);
/* h5util_create_rows, then `n` rows written at row `offset` with the transfer properties dxpl
 * (n = 0 selects nothing), and the dataset closed. */
int h5util_write_rows(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int cols, uint64_t total,
                      uint64_t offset, uint64_t n, const void *buf, hid_t dcpl, hid_t dxpl, const char *path);

/* Selects this rank's rows [offset, offset + n) of `cols` values in the file space and the
 * whole memory space; with n = 0 both select nothing (the rank still takes part in a collective
 * transfer) and *buf becomes a non-NULL dummy. */
int h5util_select_rows(hid_t fspace, hid_t mspace, uint64_t offset, uint64_t n, int cols, const void **buf,
                       const char *name, const char *path);

/* DIR/PREFIX_NNNNN.h5 (frame NNNNN), or PREFIX_NNNNN.h5 without a DIR; writes at most len bytes. */
void h5util_numbered_path(const char *dir, const char *prefix, int frame, char *out, size_t len);

/* Rows before this rank's (exclusive scan) and in all (64-bit: N may pass 2^31). Collective. */
int h5util_counts(MPI_Comm comm, uint64_t n, uint64_t *offset, uint64_t *total);

/* "12 KiB", "3.4 MiB", "1.2 GiB". */
const char *h5util_human_bytes(double bytes, char *out, size_t len);

/* Fails early (DR_EIO, naming `final`, the bytes needed and free; `what` is added after the
 * figure, e.g. ", the checkpoint due with it included") when the folder's file system has less
 * room than `need` bytes. Best effort: quotas and other writers are not seen. */
int h5util_check_space(const char *dir, const char *final, double need, const char *what);

#endif
