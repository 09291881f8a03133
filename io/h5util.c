/* h5util.c - shared pieces of the collective HDF5 files (see h5util.h).
 *
 * h5util_write_file goes in phases; the ranks agree on the outcome (comm_agree) after each phase
 * that can fail, so that a failure seen by one rank makes every rank take the same path. (A
 * failure inside a phase that only some ranks see could still leave the others waiting in a
 * collective HDF5 call; HDF5's collective calls fail alike on all ranks in practice.)
 *   1. H5Fcreate of the temporary file: through the MPI-IO driver where several ranks share it,
 *      through the POSIX (sec2) driver where one rank writes it alone;
 *   2. the caller's contents, then a flush and a sync to the disk (H5Fflush: the MPI-IO
 *      driver's flush is an MPI_File_sync; fsync with sec2): a checkpoint is on the disk before
 *      it takes its final name, and a full disk shows up here, where a failure is still harmless;
 *   3. closing everything; after a failure, the file is emptied first so that closing it finds
 *      room for HDF5's last metadata writes (a failing H5Fclose leaves HDF5 1.10.8 with a
 *      half-closed file that crashes it at MPI_Finalize);
 *   4. rank 0 renames the temporary file to its final name.
 * A failure before phase 1 (arguments, paths, counts) is the caller's to agree on. */
#define _POSIX_C_SOURCE 200809L /* truncate, unlink */
#include "h5util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "comm.h"

void h5util_quiet(void) {
  static int done;
  if (!done) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    done = 1;
  }
}

const char *h5util_final_name(const char *path, char *out, size_t len) {
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  const size_t n = strlen(base);
  if (base[0] == '.' && n > 5 && !strcmp(base + n - 4, ".tmp"))
    snprintf(out, len, "%.*s%.*s", (int)(base - path), path, (int)(n - 5), base + 1);
  else
    snprintf(out, len, "%s", path);
  return out;
}

/* Copies the quoted text after `key` in one of the error stack's descriptions. */
typedef struct stack_find {
  const char *key;
  char *out;
  size_t len;
  int found;
} stack_find;

static herr_t find_in_entry(unsigned n, const H5E_error2_t *e, void *ctx) {
  (void)n;
  stack_find *f = ctx;
  const char *at = e->desc ? strstr(e->desc, f->key) : NULL;
  if (f->found || !at) return 0;
  at += strlen(f->key);
  const char *end = strchr(at, '\'');
  const int k = end ? (int)(end - at) : (int)strlen(at);
  snprintf(f->out, f->len, "%.*s", k, at);
  f->found = 1;
  return 0;
}

static int from_stack(const char *key, char *out, size_t len) {
  stack_find f = {.key = key, .out = out, .len = len, .found = 0};
  /* innermost entry first: it is nearest to the cause */
  if (H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, find_in_entry, &f) < 0) return 0;
  return f.found && out[0];
}

/* out = "PATH: REASON" where a folder stands in the way of path itself (the temporary name: the
 * published name is not the one in the way), else REASON. */
static const char *with_folder_in_the_way(const char *path, const char *reason, char *out, size_t len) {
  char r[256];
  struct stat sb;
  snprintf(r, sizeof r, "%s", reason);
  if (!strcmp(r, strerror(EISDIR)) && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
    snprintf(out, len, "%s: %s", path, r);
  else
    snprintf(out, len, "%s", r);
  return out;
}

const char *h5util_reason(const char *call, const char *path, char *out, size_t len) {
  /* 1. the errno text the sec2 driver (and others) leave in the stack */
  if (from_stack("error message = '", out, len)) return with_folder_in_the_way(path, out, out, len);
  /* 2. the MPI-IO driver keeps no errno: try the operation's precondition directly */
  if (!strcmp(call, "H5Fcreate") || !strcmp(call, "H5Fopen")) {
    const int fd = open(path, !strcmp(call, "H5Fcreate") ? O_WRONLY | O_CREAT | O_CLOEXEC : O_RDONLY | O_CLOEXEC, 0644);
    if (fd < 0) return with_folder_in_the_way(path, strerror(errno), out, len);
    close(fd); /* a file created here is the temporary one, which the failed write removes */
  }
  char dir[H5UTIL_PATH_MAX];
  const char *slash = strrchr(path, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + 1 : 1, slash ? path : ".");
  struct statvfs fs;
  if (statvfs(dir, &fs) == 0 && (double)fs.f_bavail * (double)fs.f_frsize < 1048576.0) {
    snprintf(out, len, "%s", strerror(ENOSPC));
    return out;
  }
  /* 3. what MPI said */
  if (from_stack("MPI error string is '", out, len)) return out;
  return NULL;
}

int h5util_fail(const char *call, const char *what, const char *path, const char *file, int line) {
  char name[H5UTIL_PATH_MAX], why[256];
  h5util_final_name(path, name, sizeof name);
  const char *reason = h5util_reason(call, path, why, sizeof why);
  if (reason) return dr_fail_place(DR_EIO, file, line, "%s: %s (%s failed: %s)", name, reason, call, what);
  return dr_fail_place(DR_EIO, file, line, "%s: %s failed: %s", name, call, what);
}

int h5util_attr_scalar(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *value, const char *path) {
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

int h5util_attr_string(hid_t loc, const char *name, const char *value, const char *path) {
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

/* 1 where file goes through the MPI-IO driver, 0 where not, -1 on failure. */
static int uses_mpio(hid_t file) {
  const hid_t fapl = H5Fget_access_plist(file);
  if (fapl < 0) return -1;
  const hid_t driver = H5Pget_driver(fapl);
  (void)H5Pclose(fapl);
  return driver < 0 ? -1 : driver == H5FD_MPIO;
}

int h5util_transfer(hid_t file, hid_t *dxpl, const char *path) {
  int st = 0, mpio = uses_mpio(file);
  H5CK(mpio, "H5Fget_access_plist", "file access properties");
  H5CK(*dxpl = H5Pcreate(H5P_DATASET_XFER), "H5Pcreate", "transfer properties");
  if (mpio) H5CK(H5Pset_dxpl_mpio(*dxpl, H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio", "transfer properties");
  return 0;
fail:
  H5_DROP(H5Pclose, *dxpl);
  return st;
}

int h5util_create_rows(hid_t loc, const char *name, hid_t ftype, int cols, uint64_t total, hid_t dcpl, hid_t *dset,
                       const char *path) {
  int st = 0;
  hid_t fspace = H5I_INVALID_HID;
  hsize_t dims[2] = {(hsize_t)total, (hsize_t)cols};
  *dset = H5I_INVALID_HID;
  H5CK(fspace = H5Screate_simple(cols > 1 ? 2 : 1, dims, NULL), "H5Screate_simple", name);
  H5CK(*dset = H5Dcreate2(loc, name, ftype, fspace, H5P_DEFAULT, dcpl, H5P_DEFAULT), "H5Dcreate2", name);
  H5CK(H5Sclose(fspace), "H5Sclose", name);
  return 0;
fail:
  H5_DROP(H5Sclose, fspace);
  return st;
}

/* This rank's `n` rows at row `offset` of dset (`total` rows of `cols` values), collective. */
static int put_rows(hid_t dset, hid_t mtype, int cols, uint64_t total, uint64_t offset, uint64_t n, const void *buf,
                    hid_t dxpl, const char *name, const char *path) {
  int st = 0;
  hid_t fspace = H5I_INVALID_HID, mspace = H5I_INVALID_HID;
  hsize_t mdims[2] = {(hsize_t)(n > 0 ? n : 1), (hsize_t)cols};
  H5CK(fspace = H5Dget_space(dset), "H5Dget_space", name);
  H5CK(mspace = H5Screate_simple(cols > 1 ? 2 : 1, mdims, NULL), "H5Screate_simple", name);
  if ((st = h5util_select_rows(fspace, mspace, offset, n, cols, &buf, name, path))) goto fail;
  /* A zero-sized contiguous dataset has no storage address, and HDF5 1.10's collective write
   * fails on it ("addr overflow"); every rank knows total, so all skip the write alike. */
  if (total > 0) H5CK(H5Dwrite(dset, mtype, mspace, fspace, dxpl, buf), "H5Dwrite", name);
  H5CK(H5Sclose(mspace), "H5Sclose", name);
  mspace = H5I_INVALID_HID;
  H5CK(H5Sclose(fspace), "H5Sclose", name);
  return 0;
fail:
  H5_DROP(H5Sclose, mspace);
  H5_DROP(H5Sclose, fspace);
  return st;
}

int h5util_write_rows(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int cols, uint64_t total,
                      uint64_t offset, uint64_t n, const void *buf, hid_t dcpl, hid_t dxpl, const char *path) {
  int st = 0;
  hid_t dset = H5I_INVALID_HID;
  if ((st = h5util_create_rows(loc, name, ftype, cols, total, dcpl, &dset, path))) return st;
  if ((st = put_rows(dset, mtype, cols, total, offset, n, buf, dxpl, name, path))) goto fail;
  H5CK(H5Dclose(dset), "H5Dclose", name);
  return 0;
fail:
  H5_DROP(H5Dclose, dset);
  return st;
}

int h5util_select_rows(hid_t fspace, hid_t mspace, uint64_t offset, uint64_t n, int cols, const void **buf,
                       const char *name, const char *path) {
  static const uint64_t dummy[3]; /* a non-NULL buffer for ranks that move nothing */
  int st = 0;
  hsize_t start[2] = {(hsize_t)offset, 0}, count[2] = {(hsize_t)n, (hsize_t)cols};
  if (n > 0) {
    H5CK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL), "H5Sselect_hyperslab", name);
  } else {
    H5CK(H5Sselect_none(fspace), "H5Sselect_none", name);
    H5CK(H5Sselect_none(mspace), "H5Sselect_none", name);
    *buf = dummy;
  }
  return 0;
fail:
  return st;
}

void h5util_numbered_path(const char *dir, const char *prefix, int frame, char *out, size_t len) {
  if (!out || len == 0) return;
  if (!dir || !dir[0])
    snprintf(out, len, "%s_%05d.h5", prefix, frame);
  else
    snprintf(out, len, "%s/%s_%05d.h5", dir, prefix, frame);
}

int h5util_counts(MPI_Comm comm, uint64_t n, uint64_t *offset, uint64_t *total) {
  int rank = 0;
  *offset = 0;
  *total = 0;
  DR_MPI(MPI_Comm_rank(comm, &rank));
  DR_MPI(MPI_Exscan(&n, offset, 1, MPI_UINT64_T, MPI_SUM, comm));
  if (rank == 0) *offset = 0; /* MPI_Exscan leaves rank 0's result undefined */
  DR_MPI(MPI_Allreduce(&n, total, 1, MPI_UINT64_T, MPI_SUM, comm));
  return 0;
}

const char *h5util_human_bytes(double bytes, char *out, size_t len) {
  if (bytes < 1048576.0)
    snprintf(out, len, "%.0f KiB", bytes / 1024.0);
  else if (bytes < 1073741824.0)
    snprintf(out, len, "%.1f MiB", bytes / 1048576.0);
  else
    snprintf(out, len, "%.1f GiB", bytes / 1073741824.0);
  return out;
}

int h5util_check_space(const char *dir, const char *final, double need, const char *what) {
  struct statvfs fs;
  if (statvfs(dir[0] ? dir : ".", &fs) != 0) return 0; /* no answer: let HDF5 find out */
  const double avail = (double)fs.f_bavail * (double)fs.f_frsize;
  if (avail < need) {
    char a[32], b[32];
    return dr_fail(DR_EIO, "no room for %s: %s: it needs about %s (%.0f bytes%s), %s (%.0f bytes) are free", final,
                   strerror(ENOSPC), h5util_human_bytes(need, a, sizeof a), need, what,
                   h5util_human_bytes(avail, b, sizeof b), avail);
  }
  return 0;
}

/* Creates the temporary file (collective): through the MPI-IO driver where several ranks write
 * it, else through sec2, whose writes go straight to write(2) (the MPI-IO layer adds nothing for
 * one writer). */
static int create_file(MPI_Comm comm, const char *path, int checksummed, hid_t *fapl, hid_t *file) {
  int st = 0, nranks = 1;
  DR_MPI(MPI_Comm_size(comm, &nranks));
  H5CK(*fapl = H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", "file access properties");
  if (nranks > 1)
    H5CK(H5Pset_fapl_mpio(*fapl, comm, MPI_INFO_NULL), "H5Pset_fapl_mpio", "file access properties");
  else
    H5CK(H5Pset_fapl_sec2(*fapl), "H5Pset_fapl_sec2", "file access properties");
  /* The 1.8 format's superblock and object headers (attributes included) carry checksums, so a
   * damaged header is found when the file is read. */
  if (checksummed)
    H5CK(H5Pset_libver_bounds(*fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST), "H5Pset_libver_bounds",
         "file access properties");
  H5CK(*file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, *fapl), "H5Fcreate", "creating the file");
  return 0;
fail:
  return st;
}

/* Closes the file and its access properties (collective; H5Fclose flushes, so a full disk is
 * seen here). Called after a failure too, without overwriting the first message. */
static int close_file(const char *path, hid_t *fapl, hid_t *file) {
  int st = 0;
  if (*file >= 0 && H5Fclose(*file) < 0) st = h5util_fail("H5Fclose", "closing the file", path, __FILE__, __LINE__);
  *file = H5I_INVALID_HID;
  if (*fapl >= 0 && H5Pclose(*fapl) < 0 && !st)
    st = h5util_fail("H5Pclose", "file access properties", path, __FILE__, __LINE__);
  *fapl = H5I_INVALID_HID;
  return st;
}

/* The contents, then on the disk (see the phases above). */
static int fill_file(hid_t file, int (*contents)(hid_t, void *), void *ctx, const char *path) {
  int st = contents(file, ctx);
  if (st) return st;
  H5CK(H5Fflush(file, H5F_SCOPE_GLOBAL), "H5Fflush", "writing the metadata");
  const int mpio = uses_mpio(file);
  H5CK(mpio, "H5Fget_access_plist", "file access properties");
  if (!mpio) { /* the MPI-IO driver's flush synced it already */
    int *fd = NULL;
    H5CK(H5Fget_vfd_handle(file, H5P_DEFAULT, (void **)&fd), "H5Fget_vfd_handle", "syncing the file");
    if (fsync(*fd) != 0) {
      char name[H5UTIL_PATH_MAX];
      return dr_fail(DR_EIO, "%s: %s (fsync failed)", h5util_final_name(path, name, sizeof name), strerror(errno));
    }
  }
  return 0;
fail:
  return st;
}

int h5util_write_file(MPI_Comm comm, const char *tmp, const char *final, int flags,
                      int (*contents)(hid_t file, void *ctx), void *ctx) {
  int rank = 0;
  hid_t fapl = H5I_INVALID_HID, file = H5I_INVALID_HID;
  h5util_quiet();
  DR_MPI(MPI_Comm_rank(comm, &rank));
  /* 1. the temporary file */
  int st = comm_agree(comm, create_file(comm, tmp, flags & H5UTIL_CHECKSUMMED, &fapl, &file));
  int opened = !st; /* the same on every rank */
  /* 2. contents */
  if (!st) st = comm_agree(comm, fill_file(file, contents, ctx, tmp));
  /* 3. close, after a failure too, so that every rank has let go of the file before it goes */
  if (!st) {
    st = comm_agree(comm, close_file(tmp, &fapl, &file));
  } else {
    /* The file is garbage now. Emptying it first gives its blocks back, so that H5Fclose finds
     * room for the metadata it still has to write even when the disk is full. */
    if (opened) {
      if (rank == 0 && truncate(tmp, 0) != 0) { /* best effort: the close below may still find room */
      }
      (void)comm_agree(comm, st); /* nobody writes before the truncation */
    }
    (void)close_file(tmp, &fapl, &file);
    (void)comm_agree(comm, st);
  }
  /* 4. publish under the final name */
  if (!st) {
    if (rank == 0 && rename(tmp, final) != 0)
      st = dr_fail_at(DR_EIO, __FILE__, __LINE__, "rename", "%s: %s (from %s)", final, strerror(errno), tmp);
    st = comm_agree(comm, st);
  }
  if (st && rank == 0) {
    (void)unlink(tmp);
  }
  return st;
}
