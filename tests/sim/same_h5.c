/* same_h5 - two HDF5 files hold the same objects with the same values, bit for bit.
 *
 *   same_h5 A.h5 B.h5
 *
 * Every dataset and every attribute (of the root group, of groups and of datasets) of A must be
 * in B, and B must hold no other, with the same type class and size, the same shape and the same
 * bytes in file order. Object header times and the files' layout are not compared: two writes of
 * the same frame at different moments, or through another path, are the same. Exit 0 when they
 * are the same, 1 with the first difference printed, 2 when a file cannot be read. Used by
 * check_writer.sh (the writer's thread against the main thread's writes). */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hid_t other_; /* the file the walk compares against */
static int diff_;    /* the first difference was printed */

/* The bytes of a dataset or attribute (read as stored: the file type's native equivalent). */
static void *read_all(hid_t obj, int is_attr, hid_t *type_out, hsize_t *n_out, size_t *size_out) {
  hid_t space = is_attr ? H5Aget_space(obj) : H5Dget_space(obj);
  hid_t ftype = is_attr ? H5Aget_type(obj) : H5Dget_type(obj);
  if (space < 0 || ftype < 0) return NULL;
  hsize_t n = (hsize_t)H5Sget_simple_extent_npoints(space);
  size_t size = H5Tget_size(ftype);
  void *buf = calloc(n ? n : 1, size ? size : 1);
  herr_t e = is_attr ? H5Aread(obj, ftype, buf) : H5Dread(obj, ftype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
  H5Sclose(space);
  if (e < 0) {
    free(buf);
    H5Tclose(ftype);
    return NULL;
  }
  *type_out = ftype;
  *n_out = n;
  *size_out = size;
  return buf;
}

/* a and b hold the same values (name: for the message). */
static int same_values(const char *name, hid_t a, hid_t b, int is_attr) {
  hid_t ta, tb;
  hsize_t na, nb;
  size_t sa, sb;
  void *va = read_all(a, is_attr, &ta, &na, &sa), *vb = read_all(b, is_attr, &tb, &nb, &sb);
  int same = va && vb && H5Tequal(ta, tb) > 0 && na == nb && sa == sb && !memcmp(va, vb, na * sa);
  if (!same && !diff_) {
    printf("%s differs", name);
    if (va && vb && na == nb && sa == sb)
      for (hsize_t i = 0; i < na; ++i)
        if (memcmp((char *)va + i * sa, (char *)vb + i * sa, sa)) {
          printf(" (first at element %llu of %llu)", (unsigned long long)i, (unsigned long long)na);
          break;
        }
    printf("\n");
    diff_ = 1;
  }
  if (va) free(va), H5Tclose(ta);
  if (vb) free(vb), H5Tclose(tb);
  return same;
}

typedef struct attr_walk {
  hid_t other;      /* the object of the other file that holds the same attributes */
  const char *path; /* the object's path, for messages */
} attr_walk;

static herr_t each_attr(hid_t loc, const char *name, const H5A_info_t *info, void *ctx) {
  (void)info;
  const attr_walk *w = ctx;
  char full[1024];
  snprintf(full, sizeof full, "attribute %s of %s", name, w->path);
  if (H5Aexists(w->other, name) <= 0) {
    if (!diff_) printf("%s is in one file only\n", full), diff_ = 1;
    return 1;
  }
  hid_t a = H5Aopen(loc, name, H5P_DEFAULT), b = H5Aopen(w->other, name, H5P_DEFAULT);
  int same = a >= 0 && b >= 0 && same_values(full, a, b, 1);
  H5Aclose(a), H5Aclose(b);
  return same ? 0 : 1;
}

/* The attributes of a and b (objects at path): the same names and values. */
static int same_attrs(hid_t a, hid_t b, const char *path) {
  H5O_info_t ia, ib;
  if (H5Oget_info(a, &ia) < 0 || H5Oget_info(b, &ib) < 0) return 0;
  if (ia.num_attrs != ib.num_attrs) {
    if (!diff_) printf("%s: %d attributes in one file, %d in the other\n", path, (int)ia.num_attrs, (int)ib.num_attrs), diff_ = 1;
    return 0;
  }
  attr_walk w = {b, path};
  hsize_t idx = 0;
  return H5Aiterate2(a, H5_INDEX_NAME, H5_ITER_INC, &idx, each_attr, &w) == 0;
}

static herr_t each_object(hid_t root, const char *name, const H5O_info_t *info, void *ctx) {
  (void)ctx;
  if (H5Oexists_by_name(other_, name, H5P_DEFAULT) <= 0) {
    if (!diff_) printf("%s is in one file only\n", name), diff_ = 1;
    return 1;
  }
  hid_t a = H5Oopen(root, name, H5P_DEFAULT), b = H5Oopen(other_, name, H5P_DEFAULT);
  int same = a >= 0 && b >= 0 && same_attrs(a, b, name);
  if (same && info->type == H5O_TYPE_DATASET) same = same_values(name, a, b, 0);
  H5Oclose(a), H5Oclose(b);
  return same ? 0 : 1;
}

/* Every object of a is in b with the same attributes and values. */
static int covers(hid_t a, hid_t b) {
  other_ = b;
  return H5Ovisit(a, H5_INDEX_NAME, H5_ITER_INC, each_object, NULL) == 0;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: same_h5 A.h5 B.h5\n");
    return 2;
  }
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  hid_t a = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT), b = H5Fopen(argv[2], H5F_ACC_RDONLY, H5P_DEFAULT);
  if (a < 0 || b < 0) {
    printf("cannot open %s\n", a < 0 ? argv[1] : argv[2]);
    return 2;
  }
  const int same = covers(a, b) && covers(b, a);
  H5Fclose(a), H5Fclose(b);
  return same ? 0 : 1;
}
