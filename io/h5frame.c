/* h5frame.c - one frame of particles in one HDF5 file, written collectively (see h5frame.h).
 *
 * The write goes in phases; the ranks agree on the outcome (comm_agree) after each phase that
 * can fail, so that a failure seen by one rank makes every rank take the same path:
 *   1. local checks (arguments, paths, the output folder on rank 0), the counts (MPI_Exscan,
 *      MPI_Allreduce), the materials string, free space on rank 0;
 *   2. h5util_write_file (io/h5util.c): DIR/.frame_NNNNN.h5.tmp created through the MPI-IO
 *      driver, the group, datasets, root attributes and collective hyperslab writes, a flush,
 *      the close, and rank 0's rename to DIR/frame_NNNNN.h5.
 * On failure every handle is closed and, once the file was being created, rank 0 removes the
 * temporary file and any file under the final name (after a failed write, the frame this call
 * was to write does not exist, not even an older version of it). */
#define _POSIX_C_SOURCE 200809L /* stat */
#include "h5frame.h"

#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comm.h"
#include "error.h"
#include "h5util.h"

enum { H5FRAME_PATH_MAX = H5UTIL_PATH_MAX };

void h5frame_path(const char *dir, int frame, char *out, size_t len) {
  h5util_numbered_path(dir, "frame", frame, out, len);
}


/* A field's type in the file (little-endian) and in memory. */
typedef struct field_type {
  hid_t file, mem;
} field_type;

/* Field f's types (a function: the predefined types are the library's variables, set once it is
 * open). */
static field_type field_type_of(int f) {
  switch (f) {
  case H5FRAME_ID: return (field_type){H5T_STD_U64LE, H5T_NATIVE_UINT64};
  case H5FRAME_MATERIAL:
  case H5FRAME_OWNER: return (field_type){H5T_STD_I32LE, H5T_NATIVE_INT32};
  default: return (field_type){H5T_IEEE_F32LE, H5T_NATIVE_FLOAT};
  }
}

/* Field f's array in d. */
static const void *field_array(const h5frame_data *d, int f) {
  switch (f) {
  case H5FRAME_POSITION: return d->position;
  case H5FRAME_VELOCITY: return d->velocity;
  case H5FRAME_ID: return d->id;
  case H5FRAME_MATERIAL: return d->material;
  case H5FRAME_OWNER: return d->owner;
  case H5FRAME_LOGJP: return d->logjp;
  case H5FRAME_J: return d->J;
  case H5FRAME_F: return d->F;
  case H5FRAME_STRESS: return d->stress;
  case H5FRAME_C: return d->C;
  default: return NULL;
  }
}

/* What write_contents needs (h5util_write_file's ctx). */
typedef struct frame_job {
  const h5frame_meta *meta;
  const h5frame_data *d;
  const char *materials;
  const char *fields; /* the names of meta->fields joined by ',' */
  uint64_t total, offset;
  const char *path; /* the temporary file, for messages */
} frame_job;

/* Everything between H5Fcreate and H5Fclose: group, attributes, datasets. */
static int write_contents(hid_t file, void *ctx) {
  const frame_job *job = ctx;
  const h5frame_meta *meta = job->meta;
  const h5frame_data *d = job->d;
  const char *materials = job->materials, *path = job->path;
  const uint64_t total = job->total, offset = job->offset;
  int st = 0;
  hid_t group = H5I_INVALID_HID, dcpl = H5I_INVALID_HID, dxpl = H5I_INVALID_HID;
  uint64_t n = (uint64_t)d->n;
  int32_t frame = (int32_t)meta->frame;

  H5CK(dxpl = H5Pcreate(H5P_DATASET_XFER), "H5Pcreate", "transfer properties");
  H5CK(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio", "transfer properties");
  /* Every element is written, so the fill value would only cost a second pass over the file. */
  H5CK(dcpl = H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", "dataset properties");
  H5CK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time", "dataset properties");

  st = h5util_attr_scalar(file, "time", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &meta->time, path);
  if (!st) st = h5util_attr_scalar(file, "frame", H5T_STD_I32LE, H5T_NATIVE_INT32, &frame, path);
  if (!st) st = h5util_attr_scalar(file, "dx", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &meta->dx, path);
  if (!st) st = h5util_attr_scalar(file, "n_particles", H5T_STD_U64LE, H5T_NATIVE_UINT64, &total, path);
  if (!st) st = h5util_attr_string(file, "units", "SI: m, s, kg", path);
  if (!st) st = h5util_attr_string(file, "materials", materials, path);
  if (!st) st = h5util_attr_string(file, "owner_encoding", "rank*256+device", path);
  if (!st) st = h5util_attr_string(file, "fields", job->fields, path);
  if (st) goto fail;

  H5CK(group = H5Gcreate2(file, "particles", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "H5Gcreate2",
       "group /particles");
  for (int f = 0; f < H5FRAME_FIELDS && !st; ++f) {
    if (!(meta->fields & H5FRAME_BIT(f))) continue;
    const field_type t = field_type_of(f);
    st = h5util_write_rows(group, h5frame_field_names[f], t.file, t.mem, h5frame_field_columns[f], total, offset,
                           n, field_array(d, f), dcpl, dxpl, path);
  }
  if (st) goto fail;
  H5CK(H5Gclose(group), "H5Gclose", "group /particles");
  group = H5I_INVALID_HID;
  H5CK(H5Pclose(dcpl), "H5Pclose", "dataset properties");
  dcpl = H5I_INVALID_HID;
  H5CK(H5Pclose(dxpl), "H5Pclose", "transfer properties");
  dxpl = H5I_INVALID_HID;
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
  if (!(meta->fields & H5FRAME_BIT(H5FRAME_POSITION)) || (meta->fields >> H5FRAME_FIELDS))
    return dr_fail(DR_EINTERNAL, "h5frame_write: bad field set 0x%x (position is always written)", meta->fields);
  for (int f = 0; f < H5FRAME_FIELDS && d->n > 0; ++f)
    if ((meta->fields & H5FRAME_BIT(f)) && !field_array(d, f))
      return dr_fail(DR_EINTERNAL, "h5frame_write: rank %d has %zu particles but a NULL array (%s)", rank, d->n,
                     h5frame_field_names[f]);
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

/* The names of the fields asked for, joined by ',' (the root attribute fields). */
static void join_fields(unsigned fields, char *out, size_t cap) {
  size_t k = 0;
  out[0] = 0;
  for (int f = 0; f < H5FRAME_FIELDS; ++f)
    if (fields & H5FRAME_BIT(f)) {
      int w = snprintf(out + k, cap - k, "%s%s", k ? "," : "", h5frame_field_names[f]);
      if (w > 0 && (size_t)w < cap - k) k += (size_t)w;
    }
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

/* Rank 0: fails early when the folder's file system has too little room for the frame (every
 * field's data, a margin for the metadata, and the file due right after it: meta's after_*).
 * Starting on a full disk is the one way a frame write can leave HDF5 1.10 unable to close the
 * file, which crashes it later (see the H5Fflush in h5util.c). Best effort: quotas and other
 * writers are not seen. */
static int check_space(const char *dir, const char *final, const h5frame_meta *meta, uint64_t total,
                       size_t materials_len) {
  double per = 0; /* bytes per particle: each field's values at their file type's size */
  for (int f = 0; f < H5FRAME_FIELDS; ++f)
    if (meta->fields & H5FRAME_BIT(f)) per += (double)H5Tget_size(field_type_of(f).file) * h5frame_field_columns[f];
  const double after = (double)total * meta->after_per_particle + meta->after_bytes;
  const double need = (double)total * per + 16384.0 + (double)materials_len + after;
  return h5util_check_space(dir, final, need, after > 0 ? ", the checkpoint due with it included" : "");
}

int h5frame_write(MPI_Comm comm, const char *dir, const h5frame_meta *meta, const h5frame_data *d) {
  int rank = 0, st = 0;
  char tmp[H5FRAME_PATH_MAX], final[H5FRAME_PATH_MAX];
  char *materials = NULL;
  uint64_t offset = 0, total = 0;

  tmp[0] = final[0] = 0;
  char fields[128];
  h5frame_meta m; /* fields 0: the default set */
  if (meta && !meta->fields) {
    m = *meta;
    m.fields = H5FRAME_DEFAULT_FIELDS;
    meta = &m;
  }
  h5util_quiet();
  DR_MPI(MPI_Comm_rank(comm, &rank));

  /* 1. local checks, agreed before any collective HDF5 call; the counts */
  st = comm_agree(comm, phase1(rank, dir, meta, d, tmp, final, &materials));
  if (!st) st = h5util_counts(comm, (uint64_t)d->n, &offset, &total);
  if (!st) st = comm_agree(comm, rank == 0 ? check_space(dir, final, meta, total, strlen(materials)) : 0);
  /* 2. the file, under a temporary name until complete */
  if (!st) {
    join_fields(meta->fields, fields, sizeof fields);
    frame_job job = {.meta = meta, .d = d, .materials = materials, .fields = fields, .total = total, .offset = offset, .path = tmp};
    st = h5util_write_file(comm, tmp, final, H5UTIL_REMOVE_FINAL, write_contents, &job);
  }
  free(materials);
  return st;
}

int h5frame_count(const char *path, uint64_t *n, unsigned *fields) {
  h5util_quiet();
  *n = 0;
  if (fields) *fields = 0;
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), a = H5I_INVALID_HID;
  if (file < 0) return dr_fail(DR_EIO, "frame %s cannot be opened", path);
  int rc = DR_OK;
  if (H5Aexists(file, "n_particles") <= 0 || (a = H5Aopen(file, "n_particles", H5P_DEFAULT)) < 0 ||
      H5Aread(a, H5T_NATIVE_UINT64, n) < 0)
    rc = dr_fail(DR_EIO, "frame %s: attribute n_particles cannot be read", path);
  if (rc == DR_OK && fields && H5Lexists(file, "/particles", H5P_DEFAULT) > 0)
    for (int f = 0; f < H5FRAME_FIELDS; ++f) {
      char name[64];
      snprintf(name, sizeof name, "/particles/%s", h5frame_field_names[f]);
      if (H5Lexists(file, name, H5P_DEFAULT) > 0) *fields |= H5FRAME_BIT(f);
    }
  if (a >= 0) H5Aclose(a);
  H5Fclose(file);
  return rc;
}
