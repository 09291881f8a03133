/* checkpoint_read.c - checkpoints read collectively (see checkpoint.h): whole (ckpt_read), or a
 * chunk at a time through a reader (ckpt_open), each rank its even slice or every row, and the
 * newest whole checkpoint of a folder. Reading checks, in order: the file opens as HDF5 (a
 * truncated file does not: HDF5 compares its end with the size the superblock records), the
 * format number, every state attribute and their hash, the scene bytes against the scene hash,
 * every dataset's type and shape, then the sum of the row hashes over all ranks, so that a flipped
 * bit anywhere in the particle data is found whatever the number of ranks that reads it. */
#define _POSIX_C_SOURCE 200809L
#include "checkpoint.h"

#include <errno.h>
#include <hdf5.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint_format.h"
#include "comm.h"
#include "error.h"
#include "h5util.h"
#include "log.h"
#include "watchdog.h"

/* ---- reading -------------------------------------------------------------------------------- */

/* A refusal: the file is not a whole, undamaged checkpoint. */
#define BAD(...)                                                                                   \
  do {                                                                                             \
    char what_[512];                                                                               \
    snprintf(what_, sizeof what_, __VA_ARGS__);                                                    \
    st = dr_fail(DR_EINPUT, "checkpoint %s: %s", path, what_);                                     \
    goto fail;                                                                                     \
  } while (0)

/* Reads root attribute name (native type mtype) into out; a missing or unreadable one is a
 * refusal. */
static int read_attr(hid_t file, const char *name, hid_t mtype, void *out, const char *path) {
  int st = 0;
  hid_t a = H5I_INVALID_HID;
  if (H5Aexists(file, name) <= 0) BAD("not a drift checkpoint, or damaged (no attribute '%s')", name);
  if ((a = H5Aopen(file, name, H5P_DEFAULT)) < 0 || H5Aread(a, mtype, out) < 0)
    BAD("damaged (attribute '%s' cannot be read)", name);
  H5Aclose(a);
  return 0;
fail:
  H5_DROP(H5Aclose, a);
  return st;
}

/* Opens dataset name and checks its element type (class and size of kind) and shape
 * ([total] or [total][cols]). */
static int open_rows(hid_t loc, const char *name, int kind, int cols, uint64_t total, hid_t *dset, const char *path) {
  int st = 0;
  hid_t type = H5I_INVALID_HID, space = H5I_INVALID_HID;
  *dset = H5I_INVALID_HID;
  if (H5Lexists(loc, name, H5P_DEFAULT) <= 0 || (*dset = H5Dopen2(loc, name, H5P_DEFAULT)) < 0)
    BAD("damaged or not a drift checkpoint (no dataset '%s')", name);
  type = H5Dget_type(*dset);
  space = H5Dget_space(*dset);
  if (type < 0 || space < 0) BAD("damaged (dataset '%s' cannot be read)", name);
  const hid_t want = file_type(kind);
  if (H5Tget_class(type) != H5Tget_class(want) || H5Tget_size(type) != H5Tget_size(want))
    BAD("damaged (dataset '%s' is not %s)", name, kind_name(kind));
  hsize_t dims[2] = {0, 0};
  const int nd = H5Sget_simple_extent_ndims(space), want_nd = cols > 1 ? 2 : 1;
  if (nd != want_nd || H5Sget_simple_extent_dims(space, dims, NULL) != want_nd || dims[0] != total ||
      (cols > 1 && dims[1] != (hsize_t)cols))
    BAD("damaged (dataset '%s' does not hold %llu x %d values)", name, (unsigned long long)total, cols);
  H5Tclose(type);
  H5Sclose(space);
  return 0;
fail:
  H5_DROP(H5Tclose, type);
  H5_DROP(H5Sclose, space);
  H5_DROP(H5Dclose, *dset);
  return st;
}

/* Reads rows [offset, offset + n) of an opened dataset into buf (dxpl: collective transfers; every
 * rank takes part, those with n = 0 select nothing). */
static int read_rows(hid_t dset, const char *name, hid_t mtype, int cols, uint64_t total, uint64_t offset, uint64_t n,
                     void *buf, hid_t dxpl, const char *path) {
  int st = 0;
  hid_t fspace = H5I_INVALID_HID, mspace = H5I_INVALID_HID;
  const int nd = cols > 1 ? 2 : 1;
  hsize_t mdims[2] = {n > 0 ? n : 1, (hsize_t)cols};
  H5CK(fspace = H5Dget_space(dset), "H5Dget_space", name);
  H5CK(mspace = H5Screate_simple(nd, mdims, NULL), "H5Screate_simple", name);
  const void *rbuf = buf;
  if ((st = h5util_select_rows(fspace, mspace, offset, n, cols, &rbuf, name, path))) goto fail;
  if (total > 0 && H5Dread(dset, mtype, mspace, fspace, dxpl, (void *)rbuf) < 0)
    BAD("damaged or truncated (the values of dataset '%s' cannot be read)", name);
  H5Sclose(mspace);
  H5Sclose(fspace);
  return 0;
fail:
  H5_DROP(H5Sclose, mspace);
  H5_DROP(H5Sclose, fspace);
  return st;
}

/* Rank 0's checks before HDF5 is asked: the file is there, a regular file, readable. */
static int read_checks(const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return dr_fail(DR_EINPUT, "checkpoint %s: no such file", path);
    return dr_fail_at(DR_EIO, __FILE__, __LINE__, "stat", "checkpoint %s: %s", path, strerror(errno));
  }
  if (!S_ISREG(sb.st_mode)) return dr_fail(DR_EINPUT, "checkpoint %s: not a regular file", path);
  FILE *f = fopen(path, "rb");
  if (!f) return dr_fail_at(DR_EIO, __FILE__, __LINE__, "fopen", "checkpoint %s: %s", path, strerror(errno));
  fclose(f);
  return DR_OK;
}

/* The state attributes, their hash and the format (the same on every rank). */
static int read_state(hid_t file, ckpt_state *out, uint64_t *particle_sum, uint64_t *state_hash_out, const char *path) {
  int st = 0;
  int32_t format = 0;
  uint64_t hash = 0;
  DR_TRY(read_attr(file, "format", H5T_NATIVE_INT32, &format, path));
  if (format != CKPT_FORMAT)
    BAD("format %d, this drift reads format %d (written by another version of drift)", (int)format, CKPT_FORMAT);
  memset(out, 0, sizeof *out);
  for (int i = 0; i < N_STATE; ++i)
    DR_TRY(read_attr(file, STATE[i].name, mem_type(STATE[i].kind), (char *)out + STATE[i].offset, path));
  DR_TRY(read_attr(file, "state_hash", H5T_NATIVE_UINT64, &hash, path));
  DR_TRY(read_attr(file, "particle_sum", H5T_NATIVE_UINT64, particle_sum, path));
  *state_hash_out = hash;
  if (out->n_sources < 0) BAD("damaged (%d particle sources)", out->n_sources);
  if (out->projected != 0 && out->projected != 1) BAD("damaged (projected %d)", out->projected);
  if (out->frame < 0 || out->step_in_frame < 0 || out->ranks < 1 || !(out->time >= 0))
    BAD("damaged (frame %d, step %d of the next frame, time %g, %d ranks)", out->frame, out->step_in_frame, out->time,
        out->ranks);
  return 0;
fail:
  return st;
}

/* The scene bytes must hash to the recorded scene hash (every rank reads them: they are small). */
static int check_scene(hid_t file, const ckpt_state *s, hid_t dxpl, const char *path) {
  int st = 0;
  hid_t d = H5I_INVALID_HID, space = H5I_INVALID_HID;
  unsigned char *bytes = NULL;
  hsize_t len = 0;
  if (H5Lexists(file, "scene", H5P_DEFAULT) <= 0 || (d = H5Dopen2(file, "scene", H5P_DEFAULT)) < 0 ||
      (space = H5Dget_space(d)) < 0 || H5Sget_simple_extent_ndims(space) != 1 ||
      H5Sget_simple_extent_dims(space, &len, NULL) != 1)
    BAD("damaged or not a drift checkpoint (no scene text)");
  H5Sclose(space);
  space = H5I_INVALID_HID;
  if (!(bytes = malloc(len ? len : 1))) {
    st = dr_fail(DR_ENOMEM, "out of host memory for the scene text of %s", path);
    goto fail;
  }
  DR_TRY(read_rows(d, "scene", H5T_NATIVE_UINT8, 1, len, 0, len, bytes, dxpl, path));
  if (ckpt_bytes_hash(bytes, len) != s->scene_hash) BAD("damaged (the scene text does not match its hash)");
  free(bytes);
  H5Dclose(d);
  return 0;
fail:
  free(bytes);
  H5_DROP(H5Sclose, space);
  H5_DROP(H5Dclose, d);
  return st;
}

/* An open checkpoint that passed every check but the rows' sum: the state, its hash, the scene,
 * the sources, the particle datasets' types and shapes (dset: open, in PATTRS order). */
typedef struct rfile {
  hid_t fapl, file, dxpl, group, dset[N_PATTRS];
  uint64_t particle_sum; /* the recorded sum of the row hashes */
} rfile;

static void rfile_close(rfile *f) {
  for (int a = 0; a < N_PATTRS; ++a) H5_DROP(H5Dclose, f->dset[a]);
  H5_DROP(H5Gclose, f->group);
  H5_DROP(H5Pclose, f->dxpl);
  H5_DROP(H5Fclose, f->file);
  H5_DROP(H5Pclose, f->fapl);
}

/* Collective over comm: opens path and checks it in the order the comment at the top gives, up
 * to the rows themselves; allocates out->emitted (NULL again on failure). Every rank returns the
 * same status; on failure f holds nothing open. */
static int rfile_open(MPI_Comm comm, const char *path, ckpt_state *out, rfile *f) {
  int rank = 0, st = 0;
  f->fapl = f->file = f->dxpl = f->group = H5I_INVALID_HID;
  for (int a = 0; a < N_PATTRS; ++a) f->dset[a] = H5I_INVALID_HID;
  h5util_quiet();
  out->emitted = NULL;
  out->n_sources = 0;
  DR_MPI(MPI_Comm_rank(comm, &rank));
  DR_TRY(comm_agree(comm, rank == 0 ? read_checks(path) : DR_OK));
  /* Opening is collective; a truncated file fails here (its end is before the recorded one). */
  st = DR_OK;
  if ((f->fapl = H5Pcreate(H5P_FILE_ACCESS)) < 0 || H5Pset_fapl_mpio(f->fapl, comm, MPI_INFO_NULL) < 0)
    st = dr_fail_at(DR_EIO, __FILE__, __LINE__, "H5Pset_fapl_mpio", "file access properties for %s", path);
  else if ((f->file = H5Fopen(path, H5F_ACC_RDONLY, f->fapl)) < 0)
    st = dr_fail(DR_EINPUT, "checkpoint %s: not a whole HDF5 file (truncated, damaged, or not a checkpoint)", path);
  if ((st = comm_agree(comm, st))) goto fail;
  uint64_t hash = 0;
  if ((st = comm_agree(comm, read_state(f->file, out, &f->particle_sum, &hash, path)))) goto fail;
  H5CK(f->dxpl = H5Pcreate(H5P_DATASET_XFER), "H5Pcreate", "transfer properties");
  H5CK(H5Pset_dxpl_mpio(f->dxpl, H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio", "transfer properties");
  if ((st = comm_agree(comm, check_scene(f->file, out, f->dxpl, path)))) goto fail;
  /* the sources' counts (every rank reads them all), then the state's hash over everything */
  if (out->n_sources > 0 && !(out->emitted = malloc(sizeof *out->emitted * (size_t)out->n_sources)))
    st = dr_fail(DR_ENOMEM, "out of host memory for the particle sources of %s", path);
  if ((st = comm_agree(comm, st))) goto fail;
  {
    hid_t d = H5I_INVALID_HID;
    if ((st = comm_agree(comm, open_rows(f->file, "sources", K_U64, 1, (uint64_t)out->n_sources, &d, path)))) {
      H5_DROP(H5Dclose, d);
      goto fail;
    }
    st = read_rows(d, "sources", H5T_NATIVE_UINT64, 1, (uint64_t)out->n_sources, 0, (uint64_t)out->n_sources,
                   out->emitted, f->dxpl, path);
    H5Dclose(d);
    if (!st && hash != ckpt_state_hash(out)) st = dr_fail(DR_EINPUT, "checkpoint %s: damaged (the run's state does not match its hash)", path);
    if ((st = comm_agree(comm, st))) goto fail;
  }
  if (H5Lexists(f->file, "particles", H5P_DEFAULT) <= 0)
    st = dr_fail(DR_EINPUT, "checkpoint %s: damaged or not a drift checkpoint (no group 'particles')", path);
  else if ((f->group = H5Gopen2(f->file, "particles", H5P_DEFAULT)) < 0)
    st = dr_fail(DR_EINPUT, "checkpoint %s: damaged (group 'particles' cannot be opened)", path);
  if ((st = comm_agree(comm, st))) goto fail;
  for (int a = 0; a < N_PATTRS; ++a)
    if ((st = comm_agree(comm, open_rows(f->group, PATTRS[a].name, PATTRS[a].kind, PATTRS[a].k, out->n_particles,
                                         &f->dset[a], path))))
      goto fail;
  return DR_OK;
fail:
  free(out->emitted);
  out->emitted = NULL;
  rfile_close(f);
  return st;
}

/* Rows [first, first + n) of particle attribute a into dst's array at particle dst->n (dst has
 * room; dst->n unchanged). Collective transfers: every rank of the file's comm takes part, a rank
 * with n = 0 too. */
static int rfile_attr_rows(const rfile *f, int a, uint64_t first, uint64_t n, particles *dst, uint64_t total,
                           const char *path) {
  const pattr *A = &PATTRS[a];
  void *at = n > 0 ? (char *)pattr_data(dst, A) + A->size * (size_t)A->k * dst->n : NULL;
  return read_rows(f->dset[a], A->name, mem_type(A->kind), A->k, total, first, n, at, f->dxpl, path);
}

/* ---- reading a chunk at a time -------------------------------------------------------------- */

enum { CKPT_READ_CHUNK = 1 << 16 }; /* ckpt_read's hyperslabs, rows */

struct ckpt_reader {
  rfile f;
  char path[H5UTIL_PATH_MAX];
  uint64_t n;          /* rows in the file */
  uint64_t first, end; /* this rank's even slice of them */
  uint64_t lo, hi;     /* the rows the stream gives (the slice, or all) */
  uint64_t next_row;   /* the next row to give */
  uint64_t sum;        /* the row hashes' sum over rows [lo, next_row) */
  size_t chunk;        /* the most rows one hyperslab reads */
  ckpt_rows_seen seen;
};

/* The next n rows appended to out (grown where it lacks room), hyperslabs of at most r->chunk
 * rows; their hashes added to r->sum. */
static int reader_rows(ckpt_reader *r, particles *out, uint64_t n) {
  DR_TRY(particles_reserve(out, out->n + (size_t)n));
  while (n > 0) {
    const uint64_t k = n < r->chunk ? n : r->chunk;
    for (int a = 0; a < N_PATTRS; ++a) DR_TRY(rfile_attr_rows(&r->f, a, r->next_row, k, out, r->n, r->path));
    r->sum += ckpt_row_sum(out, out->n, (size_t)k, r->next_row);
    out->n += (size_t)k;
    r->next_row += k;
    n -= k;
  }
  return DR_OK;
}

/* The first pass, over this rank's slice: a chunk at a time into one buffer of r->chunk
 * particles, the chunk's values folded into r->seen; the slice's sum into *sum. Local. */
static int reader_verify(ckpt_reader *r, uint64_t *sum) {
  particles buf = {0};
  const uint64_t rows = r->end - r->first;
  int st = particles_reserve(&buf, (size_t)(rows < r->chunk ? rows : r->chunk));
  r->seen = (ckpt_rows_seen){.material_min = INT32_MAX, .material_max = INT32_MIN, .mass_max = 0.0f};
  r->next_row = r->first;
  r->sum = 0;
  while (!st && r->next_row < r->end) {
    const uint64_t left = r->end - r->next_row, k = left < r->chunk ? left : r->chunk;
    buf.n = 0;
    if ((st = reader_rows(r, &buf, k))) break;
    for (size_t i = 0; i < buf.n; ++i) {
      if (buf.material[i] < r->seen.material_min) r->seen.material_min = buf.material[i];
      if (buf.material[i] > r->seen.material_max) r->seen.material_max = buf.material[i];
      if (buf.mass[i] > r->seen.mass_max) r->seen.mass_max = buf.mass[i];
    }
  }
  particles_free(&buf);
  *sum = r->sum;
  return st;
}

/* particle_source.next: the next min(max, left) rows of the stream; with the last row of all
 * given, their sum again against the recorded one (a file replaced between the passes is refused
 * too). */
static int reader_next(void *ctx, particles *out, size_t max) {
  ckpt_reader *r = ctx;
  const uint64_t left = r->hi - r->next_row, k = left < (uint64_t)max ? left : (uint64_t)max;
  DR_TRY(reader_rows(r, out, k));
  if (k > 0 && r->lo == 0 && r->next_row == r->n && r->sum != r->f.particle_sum)
    return dr_fail(DR_EINPUT, "checkpoint %s: changed while it was read (the particle data no longer matches its checksum)",
                   r->path);
  return DR_OK;
}

/* particle_source.rewind: the stream's rows again from its first (their sum held against the
 * recorded one again with the last row of all). */
static int reader_rewind(void *ctx) {
  ckpt_reader *r = ctx;
  r->next_row = r->lo;
  r->sum = 0;
  return DR_OK;
}

/* What every rank of comm agrees on after the first pass (st: this rank's): the slices' sums,
 * added, against the recorded one, so that a flipped bit anywhere is found whatever the number of
 * ranks; and what the slices saw, over all rows. */
static int reader_agree(MPI_Comm comm, ckpt_reader *r, int st, uint64_t sum) {
  DR_TRY(comm_agree(comm, st));
  uint64_t all = 0;
  DR_TRY(comm_allreduce(&sum, &all, 1, MPI_UINT64_T, MPI_SUM, comm, "a checkpoint's checksum"));
  if (all != r->f.particle_sum) {
    dr_fail(DR_EINPUT, "checkpoint %s: damaged (the particle data does not match its checksum)", r->path);
    dr_mark_agreed(); /* every rank compares the same sums */
    return DR_EINPUT;
  }
  /* the least material (negated), the largest, the largest mass: one MAX */
  double mine[3] = {-(double)r->seen.material_min, (double)r->seen.material_max, (double)r->seen.mass_max}, max[3];
  DR_TRY(comm_allreduce(mine, max, 3, MPI_DOUBLE, MPI_MAX, comm, "what a checkpoint's rows hold"));
  r->seen = (ckpt_rows_seen){.material_min = (int32_t)-max[0], .material_max = (int32_t)max[1], .mass_max = (float)max[2]};
  return DR_OK;
}

int ckpt_open(MPI_Comm comm, const char *path, size_t chunk, ckpt_state *st, ckpt_reader **out) {
  *out = NULL;
  if (chunk == 0) return dr_fail(DR_EINTERNAL, "ckpt_open: a chunk of 0 rows");
  int rank = 0, nranks = 1;
  DR_MPI(MPI_Comm_rank(comm, &rank));
  DR_MPI(MPI_Comm_size(comm, &nranks));
  ckpt_reader *r = dr_malloc(sizeof *r, "a checkpoint's reader");
  int rc = comm_agree(comm, r ? DR_OK : DR_ENOMEM);
  if (rc) {
    free(r);
    return rc;
  }
  memset(r, 0, sizeof *r);
  snprintf(r->path, sizeof r->path, "%s", path);
  r->chunk = chunk;
  /* each rank opens it alone (the stream reads at its own pace) and checks it the same way */
  rc = comm_agree(comm, rfile_open(MPI_COMM_SELF, path, st, &r->f));
  if (rc) {
    free(st->emitted);
    st->emitted = NULL;
    rfile_close(&r->f);
    free(r);
    return rc;
  }
  r->n = st->n_particles;
  const uint64_t N = r->n, R = (uint64_t)nranks, q = (uint64_t)rank;
  r->first = N / R * q + N % R * q / R;
  r->end = N / R * (q + 1) + N % R * (q + 1) / R;
  uint64_t sum = 0;
  rc = reader_verify(r, &sum);
  if ((rc = reader_agree(comm, r, rc, sum))) {
    ckpt_close(&r);
    free(st->emitted);
    st->emitted = NULL;
    return rc;
  }
  (void)ckpt_reader_source(r);
  *out = r;
  return DR_OK;
}

particle_source ckpt_reader_source(ckpt_reader *r) {
  r->lo = 0, r->hi = r->n;
  (void)reader_rewind(r);
  return (particle_source){.n = (size_t)r->n, .next = reader_next, .ctx = r, .rewind = reader_rewind};
}

particle_source ckpt_reader_slice(ckpt_reader *r) {
  r->lo = r->first, r->hi = r->end;
  (void)reader_rewind(r);
  return (particle_source){.n = (size_t)(r->end - r->first), .next = reader_next, .ctx = r, .rewind = reader_rewind};
}

void ckpt_reader_slice_rows(const ckpt_reader *r, uint64_t *first, uint64_t *end) {
  *first = r->first;
  *end = r->end;
}

int ckpt_reader_rows(ckpt_reader *r, uint64_t first, uint64_t count, particles *out) {
  if (first > r->n || count > r->n - first)
    return dr_fail(DR_EINTERNAL, "checkpoint %s: rows %llu .. %llu of %llu asked", r->path, (unsigned long long)first,
                   (unsigned long long)(first + count), (unsigned long long)r->n);
  r->next_row = first;
  r->sum = 0;
  const int rc = reader_rows(r, out, count);
  (void)reader_rewind(r); /* a source of the reader starts again from its first row */
  return rc;
}

const ckpt_rows_seen *ckpt_reader_seen(const ckpt_reader *r) { return &r->seen; }

void ckpt_close(ckpt_reader **r) {
  if (!*r) return;
  rfile_close(&(*r)->f);
  free(*r);
  *r = NULL;
}

int ckpt_read(MPI_Comm comm, const char *path, ckpt_state *st, particles *slice) {
  slice->n = 0;
  ckpt_reader *r = NULL;
  DR_TRY(ckpt_open(comm, path, CKPT_READ_CHUNK, st, &r));
  const particle_source src = ckpt_reader_slice(r);
  int rc = particles_reserve(slice, src.n);
  if (rc == DR_OK) rc = src.next(src.ctx, slice, src.n);
  ckpt_close(&r);
  if ((rc = comm_agree(comm, rc))) {
    slice->n = 0;
    free(st->emitted);
    st->emitted = NULL;
  }
  return rc;
}

/* ---- the newest whole checkpoint of a folder ------------------------------------------------- */

/* Reads (or opens) one checkpoint; DR_EINPUT: not whole, the one before it is tried. */
typedef int (*try_fn)(void *ctx, const char *path);

/* Collective over comm: try on the checkpoints of dir, newest first, until one is whole. */
static int read_latest(MPI_Comm comm, const char *dir, try_fn try, void *ctx, char *found, size_t len) {
  int rank = 0, *frames = NULL, n = 0;
  DR_MPI(MPI_Comm_rank(comm, &rank));
  int rc = DR_OK;
  if (rank == 0) {
    struct stat sb;
    if (stat(dir[0] ? dir : ".", &sb) != 0 || !S_ISDIR(sb.st_mode))
      rc = dr_fail(DR_EINPUT, "--resume: %s is not a folder (give a checkpoint file or the folder that holds them)", dir);
    else
      rc = ckpt_list_frames(dir, "checkpoint_", ".h5", &frames, &n);
  }
  rc = comm_agree(comm, rc);
  if (rc == DR_OK) {
    int e = MPI_Bcast(&n, 1, MPI_INT, 0, comm);
    if (e == MPI_SUCCESS && rank != 0 && n > 0 && !(frames = malloc(sizeof *frames * (size_t)n))) e = MPI_ERR_NO_MEM;
    if (e == MPI_SUCCESS && n > 0) e = MPI_Bcast(frames, n, MPI_INT, 0, comm);
    if (e != MPI_SUCCESS) rc = comm_fail(e, __FILE__, __LINE__, "MPI_Bcast(checkpoint list)");
    rc = comm_agree(comm, rc);
  }
  if (rc == DR_OK && n == 0) rc = dr_fail(DR_EINPUT, "--resume: no checkpoint_NNNNN.h5 in %s", dir);
  for (int i = 0; rc == DR_OK && i < n; ++i) {
    ckpt_path(dir, frames[i], found, len);
    int r = try(ctx, found);
    if (r == DR_OK) break;
    if (r != DR_EINPUT) {
      rc = r;
      break;
    }
    /* not whole: say why, try the one before it */
    log_info("passing over %s: %s", found, dr_message());
    dr_clear();
    if (i == n - 1)
      rc = dr_fail(DR_EINPUT, "--resume: none of the %d checkpoint(s) in %s reads back whole (see the lines above)", n,
                   dir);
  }
  free(frames);
  return rc;
}

typedef struct read_try {
  MPI_Comm comm;
  ckpt_state *st;
  particles *slice;
} read_try;

static int try_read(void *ctx, const char *path) {
  read_try *t = ctx;
  return ckpt_read(t->comm, path, t->st, t->slice);
}

int ckpt_read_latest(MPI_Comm comm, const char *dir, ckpt_state *st, particles *slice, char *found, size_t len) {
  read_try t = {.comm = comm, .st = st, .slice = slice};
  return read_latest(comm, dir, try_read, &t, found, len);
}

typedef struct open_try {
  MPI_Comm comm;
  size_t chunk;
  ckpt_state *st;
  ckpt_reader **r;
} open_try;

static int try_open(void *ctx, const char *path) {
  open_try *t = ctx;
  return ckpt_open(t->comm, path, t->chunk, t->st, t->r);
}

int ckpt_open_latest(MPI_Comm comm, const char *dir, size_t chunk, ckpt_state *st, ckpt_reader **r, char *found,
                     size_t len) {
  open_try t = {.comm = comm, .chunk = chunk, .st = st, .r = r};
  return read_latest(comm, dir, try_open, &t, found, len);
}
