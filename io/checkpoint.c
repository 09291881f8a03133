/* checkpoint.c - checkpoints written collectively (see checkpoint.h); read by checkpoint_read.c,
 * the format both share in checkpoint_format.h (its tables: one dataset per particle attribute,
 * one root attribute per field of ckpt_state).
 *
 * Writing goes as h5rows.h says: ckpt_begin (rank 0's skeleton: the attributes, the scene and the
 * sources written whole, the particle datasets allocated, particle_sum 0), ckpt_put_rows (each
 * rank's rows, a chunk at a time, their hashes summed), ckpt_put_finish (fsync), ckpt_end (agreed;
 * the ranks' sums added and written into particle_sum by rank 0, synced; renamed, the folder
 * synced, old checkpoints pruned). */
#define _POSIX_C_SOURCE 200809L /* stat, unlink */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "watchdog.h"
#include "error.h"
#include "h5util.h"
#include "log.h"
#include "checkpoint_format.h"

/* ---- hashes --------------------------------------------------------------------------------- */

#define FNV_BASIS 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv_bytes(uint64_t h, const void *bytes, size_t len) {
  const unsigned char *b = bytes;
  for (size_t i = 0; i < len; ++i) h = (h ^ b[i]) * FNV_PRIME;
  return h;
}

uint64_t ckpt_bytes_hash(const void *bytes, size_t len) { return fnv_bytes(FNV_BASIS, bytes, len); }

/* The state's values in table order, each widened to 8 bytes. */
uint64_t ckpt_state_hash(const ckpt_state *st) {
  uint64_t h = FNV_BASIS;
  for (int i = 0; i < N_STATE; ++i) {
    const char *f = (const char *)st + STATE[i].offset;
    uint64_t w = 0;
    if (STATE[i].kind == K_I32) {
      int v;
      memcpy(&v, f, sizeof v);
      w = (uint64_t)(int64_t)v;
    } else {
      memcpy(&w, f, sizeof w); /* uint64_t or the bits of a double */
    }
    h = fnv_bytes(h, &w, sizeof w);
  }
  for (int i = 0; i < st->n_sources && st->emitted; ++i) h = fnv_bytes(h, &st->emitted[i], sizeof st->emitted[i]);
  return h;
}

/* splitmix64's finalizer: spreads a row's FNV hash over all bits before the rows are summed. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* The sum (mod 2^64) over p's particles [from, from + count), rows first_row on of the file, of
 * a hash of the row's index in the file and its bytes in every attribute: a sum, so that any
 * split of the rows among ranks or chunks adds up the same; the index inside, so that rows
 * swapped or moved are found too. Values go in as 32-bit words (every attribute's values are 4
 * or 8 bytes). */
uint64_t ckpt_row_sum(const particles *p, size_t from, size_t count, uint64_t first_row) {
  uint64_t sum = 0;
  const long n = (long)count;
  /* threads: a sum, whose order does not matter (ckpt_put_rows runs it on the writer's thread) */
#pragma omp parallel for schedule(static) reduction(+ : sum)
  for (long i = 0; i < n; ++i) {
    const uint64_t row = first_row + (uint64_t)i;
    const size_t at = from + (size_t)i;
    uint64_t h = FNV_BASIS;
    h = (h ^ (uint32_t)row) * FNV_PRIME;
    h = (h ^ (uint32_t)(row >> 32)) * FNV_PRIME;
    for (int a = 0; a < N_PATTRS; ++a) {
      const size_t bytes = PATTRS[a].size * (size_t)PATTRS[a].k;
      const unsigned char *b = (const unsigned char *)pattr_data(p, &PATTRS[a]) + bytes * at;
      for (size_t o = 0; o < bytes; o += 4) {
        uint32_t w;
        memcpy(&w, b + o, 4);
        h = (h ^ w) * FNV_PRIME;
      }
    }
    sum += mix64(h);
  }
  return sum;
}

/* ---- paths and listing -------------------------------------------------------------------- */

void ckpt_path(const char *dir, int frame, char *out, size_t len) {
  h5util_numbered_path(dir, "checkpoint", frame, out, len);
}

/* The frame number of "checkpoint_NNNNN.h5" (prefix "checkpoint_", suffix ".h5"), else -1. */
static int parse_name(const char *name, const char *prefix, const char *suffix) {
  const size_t lp = strlen(prefix), ls = strlen(suffix), ln = strlen(name);
  if (ln <= lp + ls || strncmp(name, prefix, lp) || strcmp(name + ln - ls, suffix)) return -1;
  long f = 0;
  for (const char *c = name + lp; c < name + ln - ls; ++c) {
    if (*c < '0' || *c > '9' || f > 100000000) return -1;
    f = 10 * f + (*c - '0');
  }
  return (int)f;
}

static int cmp_desc(const void *a, const void *b) {
  const int x = *(const int *)a, y = *(const int *)b;
  return (x < y) - (x > y);
}

int ckpt_list_frames(const char *dir, const char *prefix, const char *suffix, int **frames, int *n) {
  *frames = NULL;
  *n = 0;
  DIR *d = opendir(dir[0] ? dir : ".");
  if (!d) return dr_fail_at(DR_EIO, __FILE__, __LINE__, "opendir", "%s: %s", dir, strerror(errno));
  int cap = 0, rc = DR_OK;
  for (struct dirent *e; (e = readdir(d));) {
    const int f = parse_name(e->d_name, prefix, suffix);
    if (f < 0) continue;
    if (*n == cap) {
      int *g = realloc(*frames, sizeof *g * (size_t)(cap = cap ? 2 * cap : 16));
      if (!g) {
        rc = dr_fail(DR_ENOMEM, "out of host memory listing %s", dir);
        break;
      }
      *frames = g;
    }
    (*frames)[(*n)++] = f;
  }
  closedir(d);
  if (rc == DR_OK && *n > 1) qsort(*frames, (size_t)*n, sizeof **frames, cmp_desc);
  return rc;
}

/* Rank 0, after checkpoint `frame` is complete: keeps it and the keep - 1 newest before it,
 * removes the others, those numbered after it (an earlier run's) included, and temporary files
 * that a killed writer left. Best effort: a file that cannot be removed is reported, the run
 * goes on. */
static void prune(const char *dir, int frame, int keep) {
  int *f = NULL, n = 0;
  char path[H5UTIL_PATH_MAX];
  if (ckpt_list_frames(dir, "checkpoint_", ".h5", &f, &n) != DR_OK) {
    log_info("warning: cannot list %s to remove old checkpoints: %s", dir, dr_message());
    dr_clear();
    return;
  }
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    const int mine = f[i] <= frame && kept < keep;
    if (mine) {
      ++kept;
      continue;
    }
    ckpt_path(dir, f[i], path, sizeof path);
    if (f[i] > frame)
      log_info("removing %s: an earlier run's, newer than this run's checkpoint of frame %d", path, frame);
    if (unlink(path) != 0 && errno != ENOENT)
      log_info("warning: cannot remove the old checkpoint %s: %s", path, strerror(errno));
  }
  free(f);
  if (ckpt_list_frames(dir, ".checkpoint_", ".h5.tmp", &f, &n) == DR_OK) {
    for (int i = 0; i < n; ++i) {
      snprintf(path, sizeof path, "%s%s.checkpoint_%05d.h5.tmp", dir, dir[0] ? "/" : "", f[i]);
      struct stat sb;
      if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) (void)unlink(path);
    }
  }
  free(f);
  dr_clear();
}

/* ---- writing -------------------------------------------------------------------------------- */

_Static_assert((int)N_PATTRS <= (int)H5ROWS_MAX, "every particle dataset needs its slot in h5rows_file.at");

/* What rank 0's skeleton holds beside the rows. */
typedef struct skeleton {
  const ckpt_state *st; /* with n_particles and ranks set */
  const ckpt_scene *sc;
  uint64_t state_hash, particle_sum;
} skeleton;

/* Rank 0: the file with everything but the particle rows (the scene and the sources, small,
 * written whole); f->rows.at: the particle datasets' offsets. */
static int create_skeleton(const skeleton *k, ckpt_file *f) {
  const char *path = f->rows.tmp;
  const int32_t format = CKPT_FORMAT;
  hid_t file = H5I_INVALID_HID, group = H5I_INVALID_HID, dcpl = H5I_INVALID_HID;
  int st = h5rows_create(&f->rows, &file);
  if (st) goto fail;
  H5CK(dcpl = H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", "dataset properties");
  H5CK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time", "dataset properties");
  st = h5util_attr_scalar(file, "format", H5T_STD_I32LE, H5T_NATIVE_INT32, &format, path);
  for (int i = 0; !st && i < N_STATE; ++i)
    st = h5util_attr_scalar(file, STATE[i].name, file_type(STATE[i].kind), mem_type(STATE[i].kind),
                            (const char *)k->st + STATE[i].offset, path);
  if (!st) st = h5util_attr_scalar(file, "state_hash", H5T_STD_U64LE, H5T_NATIVE_UINT64, &k->state_hash, path);
  if (!st) st = h5util_attr_scalar(file, "particle_sum", H5T_STD_U64LE, H5T_NATIVE_UINT64, &k->particle_sum, path);
  if (!st) st = h5util_attr_string(file, "drift_version", DRIFT_VERSION, path);
  if (!st) st = h5util_attr_string(file, "scene_path", k->sc->path ? k->sc->path : "", path);
  if (!st)
    st = h5util_write_rows(file, "scene", H5T_STD_U8LE, H5T_NATIVE_UINT8, 1, k->sc->len, 0, k->sc->len, k->sc->text,
                           dcpl, H5P_DEFAULT, path);
  if (!st)
    st = h5util_write_rows(file, "sources", H5T_STD_U64LE, H5T_NATIVE_UINT64, 1, (uint64_t)k->st->n_sources, 0,
                           (uint64_t)k->st->n_sources, k->st->emitted, dcpl, H5P_DEFAULT, path);
  if (st) goto fail;
  H5CK(group = H5Gcreate2(file, "particles", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "H5Gcreate2", "group /particles");
  for (int a = 0; !st && a < N_PATTRS; ++a)
    st = h5rows_dataset(group, &f->rows, a, PATTRS[a].name, file_type(PATTRS[a].kind), PATTRS[a].k);
  if (st) goto fail;
  H5CK(H5Gclose(group), "H5Gclose", "group /particles");
  group = H5I_INVALID_HID;
  H5CK(H5Pclose(dcpl), "H5Pclose", "dataset properties");
  return h5rows_close(&f->rows, file, 0);
fail:
  H5_DROP(H5Gclose, group);
  H5_DROP(H5Pclose, dcpl);
  return h5rows_close(&f->rows, file, st);
}

/* Local checks of ckpt_begin: arguments, the paths, the folder (rank 0), the types. */
static int write_checks(int rank, const char *dir, const ckpt_state *st, const ckpt_scene *sc, ckpt_file *f) {
  if (!dir || !st || !sc || (sc->len && !sc->text) || (st->n_sources > 0 && !st->emitted))
    return dr_fail(DR_EINTERNAL, "ckpt_begin: an argument is NULL");
  if (st->frame < 0) return dr_fail(DR_EINTERNAL, "ckpt_begin: negative frame number %d", st->frame);
  DR_TRY(h5rows_paths(rank, dir, "checkpoint", st->frame, H5ROWS_CHECKSUMMED | H5ROWS_SYNCED, "checkpoint folder",
                      &f->rows));
  /* the rows go out as they are in memory */
  for (int a = 0; a < N_PATTRS; ++a)
    if (H5Tequal(file_type(PATTRS[a].kind), mem_type(PATTRS[a].kind)) <= 0)
      return dr_fail(DR_EINTERNAL, "checkpoints need a little-endian host (%s)", PATTRS[a].name);
  if (snprintf(f->dir, sizeof f->dir, "%s", dir) >= (int)sizeof f->dir)
    return dr_fail(DR_EINPUT, "checkpoint folder path too long (%zu characters): %.64s...", strlen(dir), dir);
  return DR_OK;
}

void ckpt_size(size_t scene_len, double *per_particle, double *fixed) {
  *per_particle = (double)particles_record_bytes();
  *fixed = (double)scene_len + 65536.0;
}

int ckpt_begin(MPI_Comm comm, const char *dir, const ckpt_state *st, const ckpt_scene *sc, size_t n, int keep,
               ckpt_file *f) {
  int rank = 0, nranks = 1;
  h5util_quiet();
  memset(f, 0, sizeof *f);
  f->fd = -1;
  DR_MPI(MPI_Comm_rank(comm, &rank));
  DR_MPI(MPI_Comm_size(comm, &nranks));
  /* 1. local checks, the counts, free space; agreed before any collective call */
  DR_TRY(comm_agree(comm, write_checks(rank, dir, st, sc, f)));
  f->frame = st->frame;
  f->keep = keep < 1 ? 1 : keep;
  DR_TRY(h5rows_counts(comm, n, &f->rows));
  /* the particles' checksum is known once every row is put: the skeleton holds 0 in its place,
   * and ckpt_end writes the sum before the file is published */
  skeleton k = {.sc = sc, .particle_sum = 0};
  ckpt_state full = *st;
  full.n_particles = f->rows.total;
  full.ranks = nranks;
  k.st = &full;
  k.state_hash = ckpt_state_hash(&full);
  int rc = DR_OK;
  if (rank == 0) {
    double per = 0, fixed = 0;
    ckpt_size(sc->len, &per, &fixed);
    rc = h5util_check_space(dir, f->rows.final, (double)f->rows.total * per + fixed, "");
    /* 2. the skeleton, under the temporary name; an older file of the same name (a checkpoint of
     * the same frame) stays until the rename replaces it */
    if (!rc) rc = create_skeleton(&k, f);
  }
  return h5rows_share(comm, &f->rows, rc);
}

int ckpt_put_rows(ckpt_file *f, size_t first, const particles *rows) {
  if (!f->rows.begun) return dr_fail(DR_EINTERNAL, "ckpt_put_rows: checkpoint %d was not begun", f->frame);
  if (first != f->put || rows->n > f->rows.n - first)
    return dr_fail(DR_EINTERNAL, "ckpt_put_rows: checkpoint %d: rows %zu .. %zu, %zu put of %zu begun", f->frame, first,
                   first + rows->n, f->put, f->rows.n);
  if (f->fd < 0) DR_TRY(h5rows_open(&f->rows, &f->fd));
  for (int a = 0; a < N_PATTRS; ++a)
    DR_TRY(h5rows_put_range(f->fd, &f->rows, a, PATTRS[a].size * (size_t)PATTRS[a].k, first, rows->n,
                            pattr_data(rows, &PATTRS[a]), PATTRS[a].name));
  f->sum += ckpt_row_sum(rows, 0, rows->n, f->rows.offset + first);
  f->put += rows->n;
  return DR_OK;
}

int ckpt_put_finish(ckpt_file *f, int st) {
  if (!st && f->put != f->rows.n)
    st = dr_fail(DR_EINTERNAL, "ckpt_put_finish: checkpoint %d: %zu rows put of %zu begun", f->frame, f->put,
                 f->rows.n);
  /* every rank syncs, those without rows too: rank 0's sync covers the metadata */
  if (!st && f->fd < 0) st = h5rows_open(&f->rows, &f->fd);
  if (f->fd < 0) return st;
  st = h5rows_finish(&f->rows, f->fd, st);
  f->fd = -1;
  return st;
}

int ckpt_put(ckpt_file *f, const particles *p) {
  if (p->n != f->rows.n)
    return ckpt_put_finish(f, dr_fail(DR_EINTERNAL, "ckpt_put: checkpoint %d: %zu particles, begun with %zu", f->frame,
                                      p->n, f->rows.n));
  return ckpt_put_finish(f, ckpt_put_rows(f, 0, p));
}

/* Rank 0: the particles' checksum (every rank's rows summed) into the temporary file's attribute,
 * which the skeleton created with 0 (the same size: HDF5 rewrites it in place, and the file's
 * size stays), then the file synced again. */
static int write_sum(const ckpt_file *f, uint64_t sum) {
  const char *path = f->rows.tmp;
  int st = 0, fd = -1;
  hid_t fapl = H5I_INVALID_HID, file = H5I_INVALID_HID, attr = H5I_INVALID_HID;
  H5CK(fapl = H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", "file access properties");
  H5CK(H5Pset_fapl_sec2(fapl), "H5Pset_fapl_sec2", "file access properties");
  H5CK(file = H5Fopen(path, H5F_ACC_RDWR, fapl), "H5Fopen", "writing the particles' checksum");
  H5CK(attr = H5Aopen(file, "particle_sum", H5P_DEFAULT), "H5Aopen", "attribute particle_sum");
  H5CK(H5Awrite(attr, H5T_NATIVE_UINT64, &sum), "H5Awrite", "attribute particle_sum");
  H5CK(H5Aclose(attr), "H5Aclose", "attribute particle_sum");
  attr = H5I_INVALID_HID;
  H5CK(H5Fclose(file), "H5Fclose", "writing the particles' checksum");
  file = H5I_INVALID_HID;
  H5CK(H5Pclose(fapl), "H5Pclose", "file access properties");
  fapl = H5I_INVALID_HID;
  if ((st = h5rows_open(&f->rows, &fd))) goto fail;
  return h5rows_finish(&f->rows, fd, DR_OK); /* synced: the checksum is on the disk before the rename */
fail:
  H5_DROP(H5Aclose, attr);
  H5_DROP(H5Fclose, file);
  H5_DROP(H5Pclose, fapl);
  return st;
}

int ckpt_end(MPI_Comm comm, ckpt_file *f, int put_status) {
  int rank = 0;
  DR_MPI(MPI_Comm_rank(comm, &rank));
  if (f->fd >= 0) { /* a put left unfinished (the caller's failure): its descriptor goes */
    (void)close(f->fd);
    f->fd = -1;
  }
  int st = comm_agree(comm, put_status);
  if (!st) {
    uint64_t all = 0;
    const int e = MPI_Allreduce(&f->sum, &all, 1, MPI_UINT64_T, MPI_SUM, comm);
    if (e != MPI_SUCCESS) st = comm_fail(e, __FILE__, __LINE__, "MPI_Allreduce(checkpoint checksum)");
    else if (rank == 0) st = write_sum(f, all);
  }
  DR_TRY(h5rows_end(comm, &f->rows, st));
  /* 3. old checkpoints go only now that the new one is complete */
  if (rank == 0) prune(f->dir, f->frame, f->keep);
  return DR_OK;
}

int ckpt_write(MPI_Comm comm, const char *dir, const ckpt_state *st, const ckpt_scene *sc, const particles *p,
               int keep) {
  ckpt_file *f = dr_malloc(sizeof *f, "a checkpoint's file");
  int rc = comm_agree(comm, f ? DR_OK : DR_ENOMEM);
  if (!rc) rc = ckpt_begin(comm, dir, st, sc, p->n, keep, f);
  if (!rc) rc = ckpt_end(comm, f, ckpt_put(f, p));
  free(f);
  return rc;
}
