/* h5util.c - shared pieces of the HDF5 files of io/ (see h5util.h). */
#define _POSIX_C_SOURCE 200809L /* open, stat */
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
  hid_t type = H5I_INVALID_HID;
  H5CK(type = H5Tcopy(H5T_C_S1), "H5Tcopy", name);
  H5CK(H5Tset_size(type, strlen(value) + 1), "H5Tset_size", name);
  H5CK(H5Tset_strpad(type, H5T_STR_NULLTERM), "H5Tset_strpad", name);
  H5CK(H5Tset_cset(type, H5T_CSET_ASCII), "H5Tset_cset", name);
  if ((st = h5util_attr_scalar(loc, name, type, type, value, path))) goto fail;
  H5CK(H5Tclose(type), "H5Tclose", name);
  return 0;
fail:
  H5_DROP(H5Tclose, type);
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

/* `n` rows at row `offset` of dset (`total` rows of `cols` values). */
static int put_rows(hid_t dset, hid_t mtype, int cols, uint64_t total, uint64_t offset, uint64_t n, const void *buf,
                    hid_t dxpl, const char *name, const char *path) {
  int st = 0;
  hid_t fspace = H5I_INVALID_HID, mspace = H5I_INVALID_HID;
  hsize_t mdims[2] = {(hsize_t)(n > 0 ? n : 1), (hsize_t)cols};
  H5CK(fspace = H5Dget_space(dset), "H5Dget_space", name);
  H5CK(mspace = H5Screate_simple(cols > 1 ? 2 : 1, mdims, NULL), "H5Screate_simple", name);
  if ((st = h5util_select_rows(fspace, mspace, offset, n, cols, &buf, name, path))) goto fail;
  /* a zero-sized contiguous dataset has no storage address: nothing to write */
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
