/* h5rows.c - HDF5 files whose rows every rank writes by pwrite(2) (see h5rows.h).
 *
 * Invariants: between begin and end the file exists only under its temporary name, and its
 * size is already final (H5Fclose after the datasets' early allocation); the rows' bytes are the
 * only ones written after begin, each rank's at offsets no other rank writes, so the puts need no
 * coordination; every status that decides whether a rank goes on into a collective call is
 * agreed (comm_agree) first, so all ranks take the same path. */
#define _GNU_SOURCE /* fallocate */
#include "h5rows.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"

int h5rows_paths(int rank, const char *dir, const char *prefix, int number, int flags, const char *what,
                 h5rows_file *f) {
  memset(f, 0, sizeof *f);
  f->flags = flags;
  const int k = snprintf(f->tmp, sizeof f->tmp, "%s%s.%s_%05d.h5.tmp", dir, dir[0] ? "/" : "", prefix, number);
  if (k < 0 || k >= (int)sizeof f->tmp)
    return dr_fail(DR_EINPUT, "%s path too long (%zu characters): %.64s...", what, strlen(dir), dir);
  h5util_numbered_path(dir, prefix, number, f->final, sizeof f->final);
  if (rank == 0) {
    /* a clearer message than H5Fcreate's for the commonest mistake */
    struct stat sb;
    if (stat(dir[0] ? dir : ".", &sb) != 0) return dr_fail(DR_EIO, "%s %s: %s", what, dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return dr_fail(DR_EIO, "%s %s is not a folder", what, dir);
  }
  return DR_OK;
}

int h5rows_counts(MPI_Comm comm, size_t n, h5rows_file *f) {
  f->n = n;
  return h5util_counts(comm, (uint64_t)n, &f->offset, &f->total);
}

int h5rows_create(const h5rows_file *f, hid_t *file) {
  const char *path = f->tmp;
  int st = 0;
  hid_t fapl = H5I_INVALID_HID;
  *file = H5I_INVALID_HID;
  H5CK(fapl = H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate", "file access properties");
  H5CK(H5Pset_fapl_sec2(fapl), "H5Pset_fapl_sec2", "file access properties");
  /* the 1.8 format's superblock and object headers (attributes included) carry checksums, so a
   * damaged header is found when the file is read */
  if (f->flags & H5ROWS_CHECKSUMMED)
    H5CK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST), "H5Pset_libver_bounds",
         "file access properties");
  H5CK(*file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl), "H5Fcreate", "creating the file");
  H5CK(H5Pclose(fapl), "H5Pclose", "file access properties");
  return 0;
fail:
  H5_DROP(H5Pclose, fapl);
  return st;
}

int h5rows_dataset(hid_t loc, h5rows_file *f, int k, const char *name, hid_t ftype, int cols) {
  const char *path = f->tmp;
  int st = 0;
  hid_t dcpl = H5I_INVALID_HID, dset = H5I_INVALID_HID;
  if (k < 0 || k >= H5ROWS_MAX) return dr_fail(DR_EINTERNAL, "h5rows_dataset: dataset index %d (%s)", k, name);
  f->at[k] = 0;
  /* every row is written, so a fill value would only cost a second pass over the file; the space
   * is allocated at creation, so that the dataset has its offset */
  H5CK(dcpl = H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", "dataset properties");
  H5CK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time", "dataset properties");
  H5CK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time", "dataset properties");
  if ((st = h5util_create_rows(loc, name, ftype, cols, f->total, dcpl, &dset, path))) goto fail;
  const haddr_t at = H5Dget_offset(dset);
  /* an empty dataset has no storage, and no rows go there */
  if (at == HADDR_UNDEF && f->total > 0) {
    st = dr_fail(DR_EIO, "H5Dget_offset failed: %s in %s", name, path);
    goto fail;
  }
  f->at[k] = at == HADDR_UNDEF ? 0 : (uint64_t)at;
  H5CK(H5Dclose(dset), "H5Dclose", name);
  dset = H5I_INVALID_HID;
  H5CK(H5Pclose(dcpl), "H5Pclose", "dataset properties");
  return 0;
fail:
  H5_DROP(H5Dclose, dset);
  H5_DROP(H5Pclose, dcpl);
  return st;
}

int h5rows_close(h5rows_file *f, hid_t file, int st) {
  const char *path = f->tmp;
  /* the close writes the metadata and sets the file's size: the rows' space is the file's */
  if (file >= 0 && H5Fclose(file) < 0 && !st) st = h5util_fail("H5Fclose", "writing the metadata", path, __FILE__, __LINE__);
  if (st) (void)unlink(path);
  return st;
}

int h5rows_share(MPI_Comm comm, h5rows_file *f, int st) {
  DR_TRY(comm_agree(comm, st));
  DR_MPI(MPI_Bcast(f->at, H5ROWS_MAX, MPI_UINT64_T, 0, comm));
  f->begun = 1;
  return DR_OK;
}

int h5rows_open(const h5rows_file *f, int *fd) {
  if (!f->begun) return dr_fail(DR_EINTERNAL, "h5rows_open: %s was not begun", f->final);
  *fd = open(f->tmp, O_RDWR | O_CLOEXEC); /* read too: a shared mapping of it (put_mapped) needs it */
  if (*fd < 0) return dr_fail(DR_EIO, "writing %s: %s", f->final, strerror(errno));
  return DR_OK;
}

int h5rows_put(int fd, const h5rows_file *f, int k, const void *rows, size_t row_bytes, const char *name) {
  return h5rows_put_range(fd, f, k, row_bytes, 0, f->n, rows, name);
}

/* The rows' bytes [at, at + len) of fd, their space allocated first (allocate) where the
 * filesystem can: a full disk is named there, before a byte is written, and the writes that follow
 * find their blocks ready (one H200's disk: write() after fallocate 4.4-4.9 GB/s against 3.8-3.9
 * without, tools/write_probe.c). *allocated: 1, or 0 where the filesystem cannot allocate ahead
 * (the writes then allocate, as they do without). A failure names the dataset. */
static int allocate_range(int fd, off_t at, size_t len) {
  int rc;
  while ((rc = fallocate(fd, 0, at, (off_t)len)) != 0 && errno == EINTR) {}
  return rc == 0 ? 0 : errno;
}
/* allocate_range's outcome: DR_OK (*allocated 1, or 0 where the filesystem cannot allocate ahead:
 * EOPNOTSUPP, ENOSYS), else the failure's message in msg, naming the dataset. Both the puts and
 * the allocation ahead's thread, which keeps its message for the put to raise, call it. */
static int allocated_or(int err, size_t len, const h5rows_file *f, const char *name, int *allocated, char *msg,
                        size_t msg_len) {
  *allocated = err == 0;
  if (err == 0 || err == EOPNOTSUPP || err == ENOSYS) return DR_OK;
  snprintf(msg, msg_len, "writing %s of %s: %s (allocating its %zu bytes)", name, f->final, strerror(err), len);
  return DR_EIO;
}

static int allocate(int fd, off_t at, size_t len, const h5rows_file *f, const char *name, int *allocated) {
  char msg[H5UTIL_PATH_MAX + 256];
  if (allocated_or(allocate_range(fd, at, len), len, f, name, allocated, msg, sizeof msg))
    return dr_fail(DR_EIO, "%s", msg);
  return DR_OK;
}

enum { MAPPED_PIECE = 1 << 20 }; /* bytes a thread copies at a time into a mapping */

/* fd's bytes [at, at + len) mapped shared, from the page that holds byte at (m->rows: byte at);
 * 0, or -1 where the mapping cannot be made (m zeroed: the caller writes instead). */
static int map_at(int fd, off_t at, size_t len, h5rows_map *m) {
  memset(m, 0, sizeof *m);
  const long page = sysconf(_SC_PAGESIZE);
  const off_t base = at - at % (page > 0 ? page : 4096);
  const size_t lead = (size_t)(at - base);
  char *p = mmap(NULL, len + lead, PROT_READ | PROT_WRITE, MAP_SHARED, fd, base);
  if (p == MAP_FAILED) return -1;
  m->base = p;
  m->len = len + lead;
  m->rows = p + lead;
  return 0;
}

/* Copies len bytes from buf into fd at `at` through a shared mapping of those pages, by the
 * calling thread's OpenMP team (never called from inside a team: one thread faulting the pages
 * in alone is slower than write()), a piece at a time to whichever thread is free (the pages'
 * faults are the cost and scale with the threads; a thread that lacks a core for a while must
 * not hold the others' share, as a static split would). Only for space that
 * allocate has allocated: the pages exist, so no store into them can fault for want of space (an
 * unallocated page of a mapping raises SIGBUS on a full filesystem instead of an error). Returns
 * 0, or -1 where the mapping cannot be made (the caller writes instead). */
static int put_mapped(int fd, off_t at, const char *buf, size_t len) {
  h5rows_map m;
  if (map_at(fd, at, len, &m)) return -1;
  const long pieces = (long)((len + MAPPED_PIECE - 1) / MAPPED_PIECE);
#pragma omp parallel for schedule(dynamic, 1)
  for (long k = 0; k < pieces; ++k) {
    const size_t lo = (size_t)k * MAPPED_PIECE, hi = lo + MAPPED_PIECE < len ? lo + MAPPED_PIECE : len;
    memcpy(m.rows + lo, buf + lo, hi - lo);
  }
  h5rows_unmap(&m);
  return 0;
}

/* In memory (tmpfs, /dev/shm): one file takes one writer's write() at a time (its inode's lock),
 * about 2.3-3.1 GB/s on one H200's host, while a team copying into a mapping of the allocated pages
 * reaches 4.4-4.8 (tools/write_probe.c, 8 threads); on a disk write() after fallocate is the
 * faster (4.4-4.9 against 3.0-4.3 mapped). docs/performance.md, Decisions, Output. */
static int in_memory(int fd) {
  struct statfs sf;
  return fstatfs(fd, &sf) == 0 && sf.f_type == TMPFS_MAGIC;
}

/* ---- allocation ahead ---- */

/* Datasets order[from .. to - 1] of a in state, told to the waiting puts. */
static void ahead_mark(h5rows_ahead *a, int from, int to, int state) {
  pthread_mutex_lock(&a->lock);
  for (int i = from; i < to; ++i) a->state[a->order[i]] = state;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->lock);
}

/* The thread: each dataset's rows of this rank allocated in turn; no MPI, no HDF5, no error.h
 * (its message is the put's to raise, on the putting thread). */
static void *ahead_run(void *arg) {
  h5rows_ahead *a = arg;
  const h5rows_file *f = a->f;
  const int fd = open(f->tmp, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    snprintf(a->msg, sizeof a->msg, "writing %s: %s", f->final, strerror(errno));
    ahead_mark(a, 0, a->count, H5ROWS_AHEAD_FAILED);
    return NULL;
  }
  for (int i = 0; i < a->count; ++i) {
    const size_t len = f->n * a->row_bytes[i];
    const off_t at = (off_t)(f->at[a->order[i]] + f->offset * a->row_bytes[i]);
    int allocated = 0;
    if (allocated_or(len ? allocate_range(fd, at, len) : 0, len, f, a->names[i], &allocated, a->msg,
                     sizeof a->msg)) {
      ahead_mark(a, i, a->count, H5ROWS_AHEAD_FAILED);
      break;
    }
    if (!allocated) { /* the puts write as they do without */
      ahead_mark(a, i, a->count, H5ROWS_AHEAD_CANNOT);
      break;
    }
    ahead_mark(a, i, i + 1, H5ROWS_AHEAD_DONE);
  }
  close(fd);
  return NULL;
}

void h5rows_ahead_start(h5rows_file *f, h5rows_ahead *a, const int *order, const size_t *row_bytes,
                        const char *const *names, int count) {
  memset(a, 0, sizeof *a);
  f->ahead = NULL;
  if (!f->begun || f->n == 0 || count <= 0 || count > H5ROWS_MAX) return;
  a->f = f;
  a->count = count;
  for (int i = 0; i < count; ++i) {
    a->order[i] = order[i];
    a->row_bytes[i] = row_bytes[i];
    a->names[i] = names[i];
    a->state[order[i]] = H5ROWS_AHEAD_PENDING;
  }
  if (pthread_mutex_init(&a->lock, NULL) != 0) return;
  if (pthread_cond_init(&a->cv, NULL) != 0) {
    pthread_mutex_destroy(&a->lock);
    return;
  }
  if (pthread_create(&a->thread, NULL, ahead_run, a) != 0) {
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->lock);
    return;
  }
  f->ahead = a;
}

void h5rows_ahead_join(h5rows_file *f) {
  h5rows_ahead *a = f->ahead;
  if (!a) return;
  (void)pthread_join(a->thread, NULL);
  pthread_cond_destroy(&a->cv);
  pthread_mutex_destroy(&a->lock);
  f->ahead = NULL;
}

/* Dataset k's state in f's allocation ahead once it is no longer pending (NONE without one). */
static int ahead_wait(const h5rows_file *f, int k) {
  h5rows_ahead *a = f->ahead;
  if (!a) return H5ROWS_AHEAD_NONE;
  pthread_mutex_lock(&a->lock);
  while (a->state[k] == H5ROWS_AHEAD_PENDING) pthread_cond_wait(&a->cv, &a->lock);
  const int state = a->state[k];
  pthread_mutex_unlock(&a->lock);
  return state;
}

/* Whether a team of the calling thread's would store into a mapping of fd's allocated space (see
 * put_mapped and in_memory). */
static int team_maps(int fd) { return !omp_in_parallel() && omp_get_max_threads() > 1 && in_memory(fd); }

/* This rank's rows first .. first + count - 1 of dataset k: their byte offset in fd (*at), after
 * their space is allocated (ahead, or here: *allocated 1) or found unallocatable (*allocated 0).
 * A failure of the allocation names the dataset. */
static int rows_ready(int fd, const h5rows_file *f, int k, size_t row_bytes, size_t first, size_t count,
                      const char *name, off_t *at, int *allocated) {
  if (first > f->n || count > f->n - first)
    return dr_fail(DR_EINTERNAL, "h5rows_put: rows %zu..%zu of %s, but this rank has %zu", first, first + count, name,
                   f->n);
  *at = (off_t)(f->at[k] + (f->offset + first) * row_bytes);
  *allocated = 0;
  const int ahead = ahead_wait(f, k);
  if (ahead == H5ROWS_AHEAD_FAILED) return dr_fail(DR_EIO, "%s", f->ahead->msg);
  if (ahead == H5ROWS_AHEAD_DONE) *allocated = 1;
  else if (ahead == H5ROWS_AHEAD_NONE) DR_TRY(allocate(fd, *at, count * row_bytes, f, name, allocated));
  return DR_OK;
}

int h5rows_map_range(int fd, const h5rows_file *f, int k, size_t row_bytes, size_t first, size_t count,
                     const char *name, h5rows_map *m) {
  memset(m, 0, sizeof *m);
  if (count == 0) return DR_OK;
  off_t at = 0;
  int allocated = 0;
  DR_TRY(rows_ready(fd, f, k, row_bytes, first, count, name, &at, &allocated));
  if (allocated && team_maps(fd)) (void)map_at(fd, at, count * row_bytes, m); /* not mapped: the caller writes */
  return DR_OK;
}

void h5rows_unmap(h5rows_map *m) {
  if (m->base) (void)munmap(m->base, m->len); /* the pages stay the file's: munmap of a shared mapping loses nothing */
  memset(m, 0, sizeof *m);
}

int h5rows_put_range(int fd, const h5rows_file *f, int k, size_t row_bytes, size_t first, size_t count,
                     const void *rows, const char *name) {
  if (count == 0) return DR_OK;
  if (!rows) return dr_fail(DR_EINTERNAL, "h5rows_put: %zu rows of %s but a NULL array", count, name);
  const char *buf = rows;
  off_t at = 0;
  size_t left = count * row_bytes;
  int allocated = 0;
  DR_TRY(rows_ready(fd, f, k, row_bytes, first, count, name, &at, &allocated));
  if (allocated && team_maps(fd) && put_mapped(fd, at, buf, left) == 0) return DR_OK;
  const int e = h5rows_pwrite_all(fd, buf, left, at);
  if (e) return dr_fail(DR_EIO, "writing %s of %s: %s", name, f->final, e > 0 ? strerror(e) : "the write made no progress");
  return DR_OK;
}

int h5rows_pwrite_all(int fd, const void *buf, size_t len, off_t at) {
  const char *b = buf;
  while (len > 0) {
    const ssize_t w = pwrite(fd, b, len, at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : -1;
    b += w, at += w, len -= (size_t)w;
  }
  return 0;
}

int h5rows_finish(const h5rows_file *f, int fd, int st) {
  /* a full disk that a delayed allocation hides from pwrite shows up here */
  if (!st && (f->flags & H5ROWS_SYNCED) && fsync(fd) != 0)
    st = dr_fail(DR_EIO, "writing %s: %s (fsync failed)", f->final, strerror(errno));
  if (close(fd) != 0 && !st) st = dr_fail(DR_EIO, "writing %s: %s", f->final, strerror(errno));
  return st;
}

/* Rank 0: syncs the folder that holds path (the entry of a renamed file). */
static int sync_folder(const char *path) {
  char dir[H5UTIL_PATH_MAX];
  const char *slash = strrchr(path, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + 1 : 1, slash ? path : ".");
  const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return dr_fail(DR_EIO, "syncing the folder of %s: %s", path, strerror(errno));
  /* file systems that cannot sync a folder say EINVAL: their renames are as durable as they get */
  int st = DR_OK;
  if (fsync(fd) != 0 && errno != EINVAL) st = dr_fail(DR_EIO, "syncing the folder of %s: %s", path, strerror(errno));
  close(fd);
  return st;
}

int h5rows_end(MPI_Comm comm, h5rows_file *f, int put_status) {
  int rank = 0;
  DR_MPI(MPI_Comm_rank(comm, &rank));
  int st = comm_agree(comm, put_status);
  if (!st && rank == 0) {
    if (rename(f->tmp, f->final) != 0) st = dr_fail(DR_EIO, "publishing %s: %s", f->final, strerror(errno));
    else if (f->flags & H5ROWS_SYNCED) st = sync_folder(f->final);
  }
  st = comm_agree(comm, st);
  if (st && rank == 0) {
    (void)unlink(f->tmp);
    if (f->flags & H5ROWS_DROP_FINAL) (void)unlink(f->final);
  }
  f->begun = 0;
  return st;
}

void h5rows_abandon(h5rows_file *f) {
  if (f->begun) (void)unlink(f->tmp);
  f->begun = 0;
}
