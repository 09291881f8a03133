/* h5frame.c - one frame of particles in one HDF5 file, written collectively (see h5frame.h).
 *
 * The write goes in phases; the ranks agree on the outcome (comm_agree) after each phase that
 * can fail, so that a failure seen by one rank makes every rank take the same path: no rank goes
 * on into a collective HDF5 call that the others skip, and all return the same status. (A
 * failure inside a phase that only some ranks see could still leave the others waiting in a
 * collective HDF5 call; HDF5's collective calls fail alike on all ranks in practice.)
 *   1. local checks (arguments, paths, the output folder on rank 0), the counts (MPI_Exscan,
 *      MPI_Allreduce), the materials string, free space on rank 0;
 *   2. H5Fcreate of DIR/.frame_NNNNN.h5.tmp through the MPI-IO driver;
 *   3. group, datasets, root attributes, the collective hyperslab writes and an H5Fflush (a
 *      full disk shows up here, where a failure is still harmless);
 *   4. closing everything; after a failure, the file is emptied first so that closing it finds
 *      room for HDF5's last metadata writes (a failing H5Fclose leaves HDF5 1.10.8 with a
 *      half-closed file that crashes it at MPI_Finalize);
 *   5. rank 0 renames the temporary file to DIR/frame_NNNNN.h5.
 * On failure every handle is closed and, once the file was being created, rank 0 removes the
 * temporary file and any file under the final name (after a failed write, the frame this call
 * was to write does not exist, not even an older version of it). */
#define _POSIX_C_SOURCE 200809L /* stat, truncate, unlink */
#include "h5frame.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"

enum { H5FRAME_PATH_MAX = 4096 };

/* HDF5 prints its own error stack to stderr by default; drift reports one message instead. */
static void h5_quiet(void) {
  static int done;
  if (!done) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    done = 1;
  }
}

/* Checks an HDF5 call (negative return = failure) inside a function that has a local `int st`, a
 * `const char *path` naming the file being written and a `fail:` label. */
#define H5CK(expr, call, what)                                                                     \
  do {                                                                                             \
    if ((expr) < 0) {                                                                              \
      st = dr_fail_at(DR_EIO, __FILE__, __LINE__, call, "%s in %s", what, path);                   \
      goto fail;                                                                                   \
    }                                                                                              \
  } while (0)

/* Closes a handle on an error path (the first failure's message is the one kept). */
#define H5_DROP(closer, h)                                                                         \
  do {                                                                                             \
    if ((h) >= 0) (void)closer(h);                                                                 \
    (h) = H5I_INVALID_HID;                                                                         \
  } while (0)

void h5frame_path(const char *dir, int frame, char *out, size_t len) {
  if (!out || len == 0) return;
  if (!dir || !dir[0])
    snprintf(out, len, "frame_%05d.h5", frame);
  else
    snprintf(out, len, "%s/frame_%05d.h5", dir, frame);
}

/* ---- attributes (identical values on every rank: attribute writes are collective) ---- */

static int attr_scalar(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *value,
                       const char *path) {
  int st = 0;
  hid_t space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
  H5CK(space = H5Screate(H5S_SCALAR), "H5Screate", name);
  H5CK(attr = H5Acreate2(loc, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT), "H5Acreate2", name);
  H5CK(H5Awrite(attr, mtype, value), "H5Awrite", name);
  H5CK(H5Aclose(attr), "H5Aclose", name);
  attr = H5I_INVALID_HID;
  H5CK(H5Sclose(space), "H5Sclose", name);
  return 0;
fail:
  H5_DROP(H5Aclose, attr);
  H5_DROP(H5Sclose, space);
  return st;
}

/* A fixed-length, null-terminated ASCII string (size strlen + 1, so "" is valid too). */
static int attr_string(hid_t loc, const char *name, const char *value, const char *path) {
  int st = 0;
  hid_t type = H5I_INVALID_HID, space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
  H5CK(type = H5Tcopy(H5T_C_S1), "H5Tcopy", name);
  H5CK(H5Tset_size(type, strlen(value) + 1), "H5Tset_size", name);
  H5CK(H5Tset_strpad(type, H5T_STR_NULLTERM), "H5Tset_strpad", name);
  H5CK(H5Tset_cset(type, H5T_CSET_ASCII), "H5Tset_cset", name);
  H5CK(space = H5Screate(H5S_SCALAR), "H5Screate", name);
  H5CK(attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT), "H5Acreate2", name);
  H5CK(H5Awrite(attr, type, value), "H5Awrite", name);
  H5CK(H5Aclose(attr), "H5Aclose", name);
  attr = H5I_INVALID_HID;
  H5CK(H5Sclose(space), "H5Sclose", name);
  space = H5I_INVALID_HID;
  H5CK(H5Tclose(type), "H5Tclose", name);
  return 0;
fail:
  H5_DROP(H5Aclose, attr);
  H5_DROP(H5Sclose, space);
  H5_DROP(H5Tclose, type);
  return st;
}

/* ---- datasets ---- */

/* Creates /particles/NAME of `total` rows of `cols` values (cols = 1: a 1-D dataset) and writes
 * this rank's `n` rows at row `offset` with a collective transfer. Ranks with n = 0 select
 * nothing but still take part. */
static int write_dataset(hid_t group, const char *name, hid_t ftype, hid_t mtype, int cols,
                         uint64_t total, uint64_t offset, uint64_t n, const void *buf, hid_t dcpl,
                         hid_t dxpl, const char *path) {
  static const uint64_t dummy[3]; /* a non-NULL buffer for ranks that write nothing */
  int st = 0;
  int rank = cols > 1 ? 2 : 1;
  hid_t fspace = H5I_INVALID_HID, mspace = H5I_INVALID_HID, dset = H5I_INVALID_HID;
  hsize_t dims[2] = {(hsize_t)total, (hsize_t)cols};
  hsize_t start[2] = {(hsize_t)offset, 0}, count[2] = {(hsize_t)n, (hsize_t)cols};
  hsize_t mdims[2] = {(hsize_t)(n > 0 ? n : 1), (hsize_t)cols};

  H5CK(fspace = H5Screate_simple(rank, dims, NULL), "H5Screate_simple", name);
  H5CK(dset = H5Dcreate2(group, name, ftype, fspace, H5P_DEFAULT, dcpl, H5P_DEFAULT), "H5Dcreate2",
       name);
  H5CK(mspace = H5Screate_simple(rank, mdims, NULL), "H5Screate_simple", name);
  if (n > 0) {
    H5CK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL),
         "H5Sselect_hyperslab", name);
  } else {
    H5CK(H5Sselect_none(fspace), "H5Sselect_none", name);
    H5CK(H5Sselect_none(mspace), "H5Sselect_none", name);
    buf = dummy;
  }
  /* A zero-sized contiguous dataset has no storage address, and HDF5 1.10's collective write
   * fails on it ("addr overflow"); every rank knows total, so all skip the write alike. */
  if (total > 0) H5CK(H5Dwrite(dset, mtype, mspace, fspace, dxpl, buf), "H5Dwrite", name);
  H5CK(H5Sclose(mspace), "H5Sclose", name);
  mspace = H5I_INVALID_HID;
  H5CK(H5Dclose(dset), "H5Dclose", name);
  dset = H5I_INVALID_HID;
  H5CK(H5Sclose(fspace), "H5Sclose", name);
  return 0;
fail:
  H5_DROP(H5Sclose, mspace);
  H5_DROP(H5Dclose, dset);
  H5_DROP(H5Sclose, fspace);
  return st;
}

/* Everything between H5Fcreate and H5Fclose: group, attributes, datasets. */
static int write_contents(hid_t file, const h5frame_meta *meta, const h5frame_data *d,
                          const char *materials, uint64_t total, uint64_t offset,
                          const char *path) {
  int st = 0;
  hid_t group = H5I_INVALID_HID, dcpl = H5I_INVALID_HID, dxpl = H5I_INVALID_HID;
  uint64_t n = (uint64_t)d->n;
  int32_t frame = (int32_t)meta->frame;

  H5CK(dxpl = H5Pcreate(H5P_DATASET_XFER), "H5Pcreate", "transfer properties");
  H5CK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio", "transfer properties");
  /* Every element is written, so the fill value would only cost a second pass over the file. */
  H5CK(dcpl = H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", "dataset properties");
  H5CK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time", "dataset properties");

  st = attr_scalar(file, "time", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &meta->time, path);
  if (!st) st = attr_scalar(file, "frame", H5T_STD_I32LE, H5T_NATIVE_INT32, &frame, path);
  if (!st) st = attr_scalar(file, "dx", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &meta->dx, path);
  if (!st) st = attr_scalar(file, "n_particles", H5T_STD_U64LE, H5T_NATIVE_UINT64, &total, path);
  if (!st) st = attr_string(file, "units", "SI: m, s, kg", path);
  if (!st) st = attr_string(file, "materials", materials, path);
  if (!st) st = attr_string(file, "owner_encoding", "rank*256+device", path);
  if (st) goto fail;

  H5CK(group = H5Gcreate2(file, "particles", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "H5Gcreate2",
       "group /particles");
  st = write_dataset(group, "position", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, total, offset, n,
                     d->position, dcpl, dxpl, path);
  if (!st)
    st = write_dataset(group, "velocity", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, total, offset, n,
                       d->velocity, dcpl, dxpl, path);
  if (!st)
    st = write_dataset(group, "id", H5T_STD_U64LE, H5T_NATIVE_UINT64, 1, total, offset, n, d->id,
                       dcpl, dxpl, path);
  if (!st)
    st = write_dataset(group, "material", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, total, offset, n,
                       d->material, dcpl, dxpl, path);
  if (!st)
    st = write_dataset(group, "owner", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, total, offset, n,
                       d->owner, dcpl, dxpl, path);
  if (st) goto fail;
  H5CK(H5Gclose(group), "H5Gclose", "group /particles");
  group = H5I_INVALID_HID;
  H5CK(H5Pclose(dcpl), "H5Pclose", "dataset properties");
  dcpl = H5I_INVALID_HID;
  H5CK(H5Pclose(dxpl), "H5Pclose", "transfer properties");
  dxpl = H5I_INVALID_HID;
  /* Write the metadata now, while a failure (a full disk) is still harmless: a failing H5Fclose
   * leaves HDF5 1.10 with a half-closed file that crashes it at MPI_Finalize. */
  H5CK(H5Fflush(file, H5F_SCOPE_GLOBAL), "H5Fflush", "writing the metadata");
  return 0;
fail:
  H5_DROP(H5Gclose, group);
  H5_DROP(H5Pclose, dcpl);
  H5_DROP(H5Pclose, dxpl);
  return st;
}

/* ---- phase 1: local checks ---- */

static int check_args(int rank, const char *dir, const h5frame_meta *meta, const h5frame_data *d) {
  if (!dir || !meta || !d)
    return dr_fail(DR_EINTERNAL, "h5frame_write: %s is NULL",
                   !dir ? "the output folder" : !meta ? "the frame metadata" : "the particle data");
  if (meta->frame < 0)
    return dr_fail(DR_EINTERNAL, "h5frame_write: negative frame number %d", meta->frame);
  if (meta->n_materials < 0 || (meta->n_materials > 0 && !meta->material_names))
    return dr_fail(DR_EINTERNAL, "h5frame_write: bad material list (%d names)", meta->n_materials);
  for (int i = 0; i < meta->n_materials; i++)
    if (!meta->material_names[i])
      return dr_fail(DR_EINTERNAL, "h5frame_write: material name %d is NULL", i);
  if (d->n > 0 && (!d->position || !d->velocity || !d->id || !d->material || !d->owner))
    return dr_fail(DR_EINTERNAL, "h5frame_write: rank %d has %zu particles but a NULL array", rank,
                   d->n);
  return 0;
}

/* Names joined by ','. */
static int join_materials(const h5frame_meta *meta, char **out) {
  size_t len = 1;
  for (int i = 0; i < meta->n_materials; i++) len += strlen(meta->material_names[i]) + 1;
  char *s = dr_malloc(len, "the materials attribute");
  if (!s) return DR_ENOMEM;
  s[0] = 0;
  size_t k = 0;
  for (int i = 0; i < meta->n_materials; i++) {
    size_t l = strlen(meta->material_names[i]);
    if (i > 0) s[k++] = ',';
    memcpy(s + k, meta->material_names[i], l);
    k += l;
  }
  s[k] = 0;
  *out = s;
  return 0;
}

static int phase1(int rank, const char *dir, const h5frame_meta *meta, const h5frame_data *d,
                  char *tmp, char *final, char **materials) {
  DR_TRY(check_args(rank, dir, meta, d));
  char name[64];
  snprintf(name, sizeof name, ".frame_%05d.h5.tmp", meta->frame);
  int k = snprintf(tmp, H5FRAME_PATH_MAX, "%s%s%s", dir, dir[0] ? "/" : "", name);
  if (k < 0 || k >= H5FRAME_PATH_MAX)
    return dr_fail(DR_EINPUT, "output folder path too long (%zu characters): %.64s...",
                   strlen(dir), dir);
  h5frame_path(dir, meta->frame, final, H5FRAME_PATH_MAX);
  if (rank == 0) {
    /* A clearer message than H5Fcreate's for the commonest mistake. */
    struct stat sb;
    if (stat(dir[0] ? dir : ".", &sb) != 0)
      return dr_fail_at(DR_EIO, __FILE__, __LINE__, "stat", "output folder %s: %s", dir,
                        strerror(errno));
    if (dir[0] && !S_ISDIR(sb.st_mode))
      return dr_fail(DR_EIO, "output folder %s is not a folder", dir);
  }
  return join_materials(meta, materials);
}

/* Rows before this rank's (exclusive scan) and in all (64-bit: N may pass 2^31). */
static int counts(MPI_Comm comm, int rank, uint64_t n, uint64_t *offset, uint64_t *total) {
  *offset = 0;
  *total = 0;
  DR_MPI(MPI_Exscan(&n, offset, 1, MPI_UINT64_T, MPI_SUM, comm));
  if (rank == 0) *offset = 0; /* MPI_Exscan leaves rank 0's result undefined */
  DR_MPI(MPI_Allreduce(&n, total, 1, MPI_UINT64_T, MPI_SUM, comm));
  return 0;
}

static const char *human_bytes(double bytes, char *out, size_t len) {
  if (bytes < 1048576.0)
    snprintf(out, len, "%.0f KiB", bytes / 1024.0);
  else if (bytes < 1073741824.0)
    snprintf(out, len, "%.1f MiB", bytes / 1048576.0);
  else
    snprintf(out, len, "%.1f GiB", bytes / 1073741824.0);
  return out;
}

/* Rank 0: fails early when the folder's file system has clearly too little room for the frame
 * (its data plus a margin for the metadata). Starting on a full disk is the one way a frame
 * write can leave HDF5 1.10 unable to close the file, which crashes it later (see the H5Fflush
 * in write_contents). Best effort: quotas and other writers are not seen. */
static int check_space(const char *dir, const char *final, uint64_t total, size_t materials_len) {
  struct statvfs fs;
  if (statvfs(dir[0] ? dir : ".", &fs) != 0) return 0; /* no answer: let HDF5 find out */
  const double need = (double)total * (2 * 3 * sizeof(float) + sizeof(uint64_t) +
                                       2 * sizeof(int32_t)) +
                      16384.0 + (double)materials_len;
  const double avail = (double)fs.f_bavail * (double)fs.f_frsize;
  if (avail < need) {
    char a[32], b[32];
    return dr_fail(DR_EIO, "no room for %s: it needs about %s, %s are free", final,
                   human_bytes(need, a, sizeof a), human_bytes(avail, b, sizeof b));
  }
  return 0;
}

/* Creates the temporary file through the MPI-IO driver (collective). */
static int create_file(MPI_Comm comm, const char *path, hid_t *fapl, hid_t *file) {
  int st = 0;
  H5CK(*fapl = H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", "file access properties");
  H5CK(H5Pset_fapl_mpio(*fapl, comm, MPI_INFO_NULL), "H5Pset_fapl_mpio", "file access properties");
  H5CK(*file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, *fapl), "H5Fcreate",
       "creating the file");
  return 0;
fail:
  return st;
}

/* Closes the file and its access properties (collective; H5Fclose flushes, so a full disk is
 * seen here). Called after a failure too, without overwriting the first message. */
static int close_file(const char *path, hid_t *fapl, hid_t *file) {
  int st = 0;
  if (*file >= 0 && H5Fclose(*file) < 0)
    st = dr_fail_at(DR_EIO, __FILE__, __LINE__, "H5Fclose", "closing %s", path);
  *file = H5I_INVALID_HID;
  if (*fapl >= 0 && H5Pclose(*fapl) < 0 && !st)
    st = dr_fail_at(DR_EIO, __FILE__, __LINE__, "H5Pclose", "file access properties in %s", path);
  *fapl = H5I_INVALID_HID;
  return st;
}

int h5frame_write(MPI_Comm comm, const char *dir, const h5frame_meta *meta, const h5frame_data *d) {
  int rank = 0, st = 0;
  char tmp[H5FRAME_PATH_MAX], final[H5FRAME_PATH_MAX];
  char *materials = NULL;
  hid_t fapl = H5I_INVALID_HID, file = H5I_INVALID_HID;
  uint64_t offset = 0, total = 0;
  int touched = 0; /* whether this call may have left something under tmp or final */

  tmp[0] = final[0] = 0;
  h5_quiet();
  DR_MPI(MPI_Comm_rank(comm, &rank));

  /* 1. local checks, agreed before any collective HDF5 call; the counts */
  st = comm_agree(comm, phase1(rank, dir, meta, d, tmp, final, &materials));
  if (!st) st = counts(comm, rank, (uint64_t)d->n, &offset, &total);
  if (!st) st = comm_agree(comm, rank == 0 ? check_space(dir, final, total, strlen(materials)) : 0);
  if (st) goto out;

  /* 2. the temporary file */
  touched = 1;
  st = comm_agree(comm, create_file(comm, tmp, &fapl, &file));
  int opened = !st; /* the same on every rank */
  /* 3. contents */
  if (!st) st = comm_agree(comm, write_contents(file, meta, d, materials, total, offset, tmp));
  /* 4. close, after a failure too, so that every rank has let go of the file before it goes */
  if (!st) {
    st = comm_agree(comm, close_file(tmp, &fapl, &file));
  } else {
    /* The file is garbage now. Emptying it first gives its blocks back, so that H5Fclose finds
     * room for the metadata it still has to write even when the disk is full (see the H5Fflush
     * in write_contents). */
    if (opened) {
      if (rank == 0 && truncate(tmp, 0) != 0) { /* best effort: the close below may still find room */
      }
      (void)comm_agree(comm, st); /* nobody writes before the truncation */
    }
    (void)close_file(tmp, &fapl, &file);
    (void)comm_agree(comm, st);
  }
  /* 5. publish under the final name */
  if (!st) {
    if (rank == 0 && rename(tmp, final) != 0)
      st = dr_fail_at(DR_EIO, __FILE__, __LINE__, "rename", "%s -> %s: %s", tmp, final,
                      strerror(errno));
    st = comm_agree(comm, st);
  }

out:
  free(materials);
  if (st && touched && rank == 0) {
    (void)unlink(tmp);
    (void)unlink(final);
  }
  return st;
}
