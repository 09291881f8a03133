/* io_check.h - helpers shared by the io tests: checks that count failures (check.h), reading a frame file
 * back with the HDF5 API, listing and removing test folders, damaging a file at a dataset's data. Include after defining
 * _XOPEN_SOURCE 700. */
#ifndef DRIFT_TESTS_IO_CHECK_H
#define DRIFT_TESTS_IO_CHECK_H

#include <dirent.h>
#include <ftw.h>
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h" /* CHECK, failures_ */

/* Reads dataset `name` of `file` into buf (memory type mtype) after checking its file type and its
 * shape (rank dims, dims[1] ignored for rank 1). Returns 0 when it could be read. */
static int read_dataset(hid_t file, const char *name, hid_t ftype, hid_t mtype, int rank,
                        const hsize_t *dims, void *buf) {
  int ok = 0;
  hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
  CHECK(d >= 0, "dataset %s missing", name);
  if (d < 0) return -1;
  hid_t t = H5Dget_type(d), s = H5Dget_space(d);
  CHECK(H5Tequal(t, ftype) > 0, "dataset %s has the wrong type", name);
  hsize_t got[2] = {0, 0};
  int r = H5Sget_simple_extent_dims(s, got, NULL);
  CHECK(r == rank, "dataset %s has rank %d, want %d", name, r, rank);
  CHECK(got[0] == dims[0], "dataset %s has %llu rows, want %llu", name, (unsigned long long)got[0],
        (unsigned long long)dims[0]);
  if (rank == 2)
    CHECK(got[1] == dims[1], "dataset %s has %llu columns, want %llu", name,
          (unsigned long long)got[1], (unsigned long long)dims[1]);
  if (r == rank && got[0] == dims[0] && (rank == 1 || got[1] == dims[1])) {
    if (dims[0] == 0) {
      ok = 1;
    } else {
      herr_t e = H5Dread(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
      CHECK(e >= 0, "H5Dread of %s failed", name);
      ok = e >= 0;
    }
  }
  H5Sclose(s);
  H5Tclose(t);
  H5Dclose(d);
  return ok ? 0 : -1;
}

/* A scalar attribute of the root group, after checking its stored type. */
static int read_attr(hid_t file, const char *name, hid_t ftype, hid_t mtype, void *value) {
  hid_t a = H5Aopen(file, name, H5P_DEFAULT);
  CHECK(a >= 0, "attribute %s missing", name);
  if (a < 0) return -1;
  hid_t t = H5Aget_type(a);
  CHECK(H5Tequal(t, ftype) > 0, "attribute %s has the wrong type", name);
  herr_t e = H5Aread(a, mtype, value);
  CHECK(e >= 0, "H5Aread of %s failed", name);
  H5Tclose(t);
  H5Aclose(a);
  return e >= 0 ? 0 : -1;
}

/* Checks that string attribute `name` of the root group equals want. */
static void check_attr_string(hid_t file, const char *name, const char *want) {
  hid_t a = H5Aopen(file, name, H5P_DEFAULT);
  CHECK(a >= 0, "attribute %s missing", name);
  if (a < 0) return;
  hid_t t = H5Aget_type(a);
  CHECK(H5Tget_class(t) == H5T_STRING, "attribute %s is not a string", name);
  CHECK(H5Tis_variable_str(t) == 0, "attribute %s is a variable-length string", name);
  size_t size = H5Tget_size(t);
  char *buf = calloc(size + 1, 1);
  if (buf && H5Aread(a, t, buf) >= 0)
    CHECK(strcmp(buf, want) == 0, "attribute %s is \"%s\", want \"%s\"", name, buf, want);
  else
    CHECK(0, "reading attribute %s failed", name);
  free(buf);
  H5Tclose(t);
  H5Aclose(a);
}

/* After a write, successful or not, no HDF5 file, group, dataset, datatype or attribute may be
 * left open. */
static void check_no_open_handles(const char *when) {
  ssize_t n = H5Fget_obj_count((hid_t)H5F_OBJ_ALL, H5F_OBJ_ALL);
  CHECK(n == 0, "%zd HDF5 objects left open %s", n, when);
}

/* Number of entries of dir (without . and ..); *tmp_files gets those whose name ends in .tmp. */
static int count_entries(const char *dir, int *tmp_files) {
  int n = 0;
  *tmp_files = 0;
  DIR *d = opendir(dir);
  if (!d) return -1;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    n++;
    size_t l = strlen(e->d_name);
    if (l >= 4 && !strcmp(e->d_name + l - 4, ".tmp")) {
      (*tmp_files)++;
      fprintf(stderr, "leftover temporary file %s/%s\n", dir, e->d_name);
    }
  }
  closedir(d);
  return n;
}

/* out = a/b (aborts if it does not fit). */
static void join_path(char *out, size_t len, const char *a, const char *b) {
  int k = snprintf(out, len, "%s/%s", a, b);
  if (k < 0 || (size_t)k >= len) {
    fprintf(stderr, "path too long: %s/%s\n", a, b);
    abort();
  }
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

static void rm_rf(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* Damages a file: inverts the byte at offset. */
static inline void flip(const char *path, long offset) {
  FILE *f = fopen(path, "r+b");
  if (!f) return;
  fseek(f, offset, SEEK_SET);
  int c = fgetc(f);
  fseek(f, offset, SEEK_SET);
  fputc(c ^ 0xff, f);
  fclose(f);
}

/* The file offset of a contiguous dataset's first value (serial HDF5). */
static inline long data_offset(const char *path, const char *dset) {
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(f, dset, H5P_DEFAULT);
  haddr_t a = H5Dget_offset(d);
  H5Dclose(d);
  H5Fclose(f);
  CHECK(a != HADDR_UNDEF, "%s has no contiguous storage for %s", path, dset);
  return (long)a;
}

#endif
