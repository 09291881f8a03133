/* frame_read - drift's frame files read with HDF5 alone (see frame_read.h). */
#define _POSIX_C_SOURCE 200809L
#include "frame_read.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failf(frame_file *ff, const char *fmt, ...) {
  int k = snprintf(ff->err, sizeof ff->err, "%s: ", ff->path);
  if (k < 0 || (size_t)k >= sizeof ff->err) k = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ff->err + k, sizeof ff->err - (size_t)k, fmt, ap);
  va_end(ap);
  return -1;
}

int frame_quiet(void) { return H5Eset_auto2(H5E_DEFAULT, NULL, NULL) < 0 ? -1 : 0; }

int frame_open(frame_file *ff, const char *path) {
  snprintf(ff->path, sizeof ff->path, "%s", path);
  ff->err[0] = 0;
  ff->f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (ff->f < 0) {
    ff->f = H5I_INVALID_HID;
    return failf(ff, "cannot open (H5Fopen)");
  }
  return 0;
}

int frame_close(frame_file *ff) {
  if (ff->f < 0) return 0;
  const herr_t e = H5Fclose(ff->f);
  ff->f = H5I_INVALID_HID;
  return e < 0 ? failf(ff, "H5Fclose") : 0;
}

int frame_dataset(frame_file *ff, const char *name, hid_t type, int cols, void **out, size_t *n) {
  *out = NULL;
  *n = 0;
  char ds[256];
  snprintf(ds, sizeof ds, "/particles/%s", name);
  const htri_t there = H5Lexists(ff->f, "/particles", H5P_DEFAULT) > 0 ? H5Lexists(ff->f, ds, H5P_DEFAULT) : 0;
  if (there <= 0) return failf(ff, "no %s (H5Lexists)", ds);
  hid_t d = H5Dopen2(ff->f, ds, H5P_DEFAULT);
  if (d < 0) return failf(ff, "%s: cannot open (H5Dopen2)", ds);
  int rc = 0;
  hid_t sp = H5Dget_space(d);
  hsize_t dims[2] = {0, 0};
  const int want_rank = cols > 1 ? 2 : 1;
  const int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
  if (sp < 0 || rank != want_rank || H5Sget_simple_extent_dims(sp, dims, NULL) < 0 ||
      (cols > 1 && dims[1] != (hsize_t)cols)) {
    if (cols > 1) rc = failf(ff, "%s: not [N][%d] (H5Sget_simple_extent_dims)", ds, cols);
    else rc = failf(ff, "%s: not [N] (H5Sget_simple_extent_dims)", ds);
  }
  const size_t elem = H5Tget_size(type);
  if (!rc && elem == 0) rc = failf(ff, "%s: memory type of no size (H5Tget_size)", ds);
  if (!rc) {
    *n = (size_t)dims[0];
    *out = malloc(elem * (size_t)cols * *n + 1);
    if (!*out) rc = failf(ff, "%s: out of memory for %zu rows", ds, *n);
    else if (*n > 0 && H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0)
      rc = failf(ff, "%s: cannot read (H5Dread)", ds);
  }
  if (sp >= 0 && H5Sclose(sp) < 0 && !rc) rc = failf(ff, "%s: H5Sclose", ds);
  if (H5Dclose(d) < 0 && !rc) rc = failf(ff, "%s: H5Dclose", ds);
  if (rc) {
    free(*out);
    *out = NULL;
    *n = 0;
  }
  return rc;
}

int frame_attr(frame_file *ff, const char *name, hid_t type, void *out) {
  const htri_t there = H5Aexists(ff->f, name);
  if (there <= 0) return failf(ff, "no attribute %s (H5Aexists)", name);
  hid_t a = H5Aopen(ff->f, name, H5P_DEFAULT);
  if (a < 0) return failf(ff, "attribute %s: cannot open (H5Aopen)", name);
  int rc = 0;
  if (H5Aread(a, type, out) < 0) rc = failf(ff, "attribute %s: cannot read (H5Aread)", name);
  if (H5Aclose(a) < 0 && !rc) rc = failf(ff, "attribute %s: H5Aclose", name);
  return rc;
}

static int by_number(const void *a, const void *b) {
  const int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

int frame_list(const char *dir, int **frames, int *count, char *err, size_t err_cap) {
  *frames = NULL;
  *count = 0;
  DIR *dh = opendir(dir);
  if (!dh) {
    snprintf(err, err_cap, "%s: cannot open the folder (opendir)", dir);
    return -1;
  }
  int *list = NULL, n = 0, cap = 0;
  for (struct dirent *e; (e = readdir(dh));) {
    int num;
    char tail;
    if (sscanf(e->d_name, "frame_%d.h%c", &num, &tail) != 2 || tail != '5' || strlen(e->d_name) != 14) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      int *grown = realloc(list, sizeof *list * (size_t)cap);
      if (!grown) {
        closedir(dh);
        free(list);
        snprintf(err, err_cap, "%s: out of memory listing the frames", dir);
        return -1;
      }
      list = grown;
    }
    list[n++] = num;
  }
  closedir(dh);
  if (n > 0) qsort(list, (size_t)n, sizeof *list, by_number);
  *frames = list;
  *count = n;
  return 0;
}
