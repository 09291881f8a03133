/* h5rows.h - an HDF5 file whose large datasets every rank fills with its own rows by pwrite(2),
 * the way frames (h5frame.c) and checkpoints (checkpoint.c) are written.
 *
 * The write is split so that the bulk of the bytes goes out from a thread that makes no MPI and
 * no HDF5 call (the run's writer, src/writer.h) while the main thread steps on with MPI:
 *   begin (main thread, collective): the caller's checks and counts; rank 0 creates
 *     DIR/.NAME_NNNNN.h5.tmp through HDF5's POSIX driver (sec2) with everything but the rows:
 *     attributes, small datasets written whole, and each rows dataset contiguous and allocated
 *     at creation, not written (no fill); the file is closed (its metadata written, its size
 *     set), the datasets' byte offsets broadcast, and the ranks agree on the outcome;
 *   put (any thread, local): this rank's rows of each dataset written at the dataset's offset
 *     plus the rows before this rank's, straight from the caller's arrays (the file's types are
 *     the memory's: little-endian hosts only); for a file that must survive a crash, the file is
 *     then synced (fsync: every rank syncs what it wrote, rank 0 the metadata too);
 *   end (main thread, collective): the ranks agree on their puts; rank 0 renames the file to
 *     DIR/NAME_NNNNN.h5 (and, for a synced file, syncs the folder, so that the rename is on the
 *     disk as well), or after a failure removes the temporary file.
 * A file under its final name is therefore always whole; a truncated one does not open (HDF5
 * compares the file's end with the size its superblock records). */
#ifndef DRIFT_H5ROWS_H
#define DRIFT_H5ROWS_H

#include <hdf5.h>
#include <mpi.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "h5util.h"

enum { H5ROWS_MAX = 16 }; /* rows datasets in one file */

/* How a file is written. */
enum {
  H5ROWS_CHECKSUMMED = 1, /* the 1.8 file format: checksummed superblock and object headers */
  H5ROWS_SYNCED = 2,      /* put syncs the file, end syncs the folder after the rename */
  H5ROWS_DROP_FINAL = 4   /* after a failure end removes the final name too (a frame written
                           * again that fails does not exist, not even in an older version) */
};

struct h5rows_ahead;

/* A file being written (begin .. end). */
typedef struct h5rows_file {
  char tmp[H5UTIL_PATH_MAX], final[H5UTIL_PATH_MAX];
  int flags;              /* H5ROWS_* */
  uint64_t total, offset; /* rows in all; rows before this rank's */
  size_t n;               /* this rank's rows */
  uint64_t at[H5ROWS_MAX]; /* each rows dataset's byte offset in the file (0: none, or empty) */
  int begun;
  struct h5rows_ahead *ahead; /* between h5rows_ahead_start and h5rows_ahead_join: the allocation ahead */
} h5rows_file;

/* Allocation ahead: a thread of its own allocates this rank's rows of the datasets in `order`, one
 * after the other, while the caller fetches and copies rows; a put of one of them waits until
 * its rows are allocated instead of allocating them itself (or returns the allocation's failure).
 * In memory (tmpfs) the allocation is the pages' zeroing (one H200: fallocate of 119 MiB 12-13
 * ms), which then overlaps the copy of the datasets before (the inode's lock that fallocate
 * takes is not one a page fault of a mapping takes): the writer's rows of a Sand Blocks l = 46
 * frame into /dev/shm 35.1 against 43.2 ms (docs/performance.md, Decisions, Output). */
typedef struct h5rows_ahead {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cv;
  const h5rows_file *f;
  int count, order[H5ROWS_MAX];
  size_t row_bytes[H5ROWS_MAX];
  const char *names[H5ROWS_MAX];
  int state[H5ROWS_MAX]; /* H5ROWS_AHEAD_*, by dataset index */
  char msg[H5UTIL_PATH_MAX + 256]; /* the failure's message */
} h5rows_ahead;
enum { H5ROWS_AHEAD_NONE = 0, H5ROWS_AHEAD_PENDING, H5ROWS_AHEAD_DONE, H5ROWS_AHEAD_CANNOT, H5ROWS_AHEAD_FAILED };

/* Local, by the putting thread, before its puts. Starts a's thread over f's datasets order[0 ..
 * count - 1] (row_bytes and names by position in order); f->ahead = a. Where no thread can be
 * started, the puts allocate as they do without (f->ahead stays NULL). */
void h5rows_ahead_start(h5rows_file *f, h5rows_ahead *a, const int *order, const size_t *row_bytes,
                        const char *const *names, int count);
/* Local. Waits for f's allocation ahead to end (the puts' thread, after its last put); f->ahead = NULL. */
void h5rows_ahead_join(h5rows_file *f);

/* Local. f's paths DIR/.PREFIX_NNNNN.h5.tmp and DIR/PREFIX_NNNNN.h5 and flags; rank 0 checks that
 * DIR is a folder (`what` names it in the message: "output folder", "checkpoint folder"). */
int h5rows_paths(int rank, const char *dir, const char *prefix, int number, int flags, const char *what,
                 h5rows_file *f);

/* Collective. f->n = n (this rank's rows), and f->offset and f->total from every rank's (an
 * exclusive scan and a sum). */
int h5rows_counts(MPI_Comm comm, size_t n, h5rows_file *f);

/* Rank 0. Creates f's temporary file through sec2 (the 1.8 format where f is checksummed). */
int h5rows_create(const h5rows_file *f, hid_t *file);
/* Rank 0. Creates dataset `name` in loc: f->total rows of cols values of ftype, contiguous,
 * allocated now and never filled; records its byte offset in f->at[k]. */
int h5rows_dataset(hid_t loc, h5rows_file *f, int k, const char *name, hid_t ftype, int cols);
/* Rank 0. Closes the file (HDF5 writes the metadata and sets the file's size); st: the status of
 * what the caller did since h5rows_create; on any failure the temporary file goes. Returns the
 * first failure's status. */
int h5rows_close(h5rows_file *f, hid_t file, int st);
/* Collective. Agrees on st (rank 0's skeleton and every rank's checks), shares rank 0's offsets
 * and marks f begun; on failure no file is left and every rank returns the same status. */
int h5rows_share(MPI_Comm comm, h5rows_file *f, int st);

/* Local, any thread: no MPI and no HDF5 call. Writes this rank's rows of dataset k (row_bytes
 * each, f->n of them, from rows; `name` for messages) into the open descriptor fd. */
int h5rows_put(int fd, const h5rows_file *f, int k, const void *rows, size_t row_bytes, const char *name);
/* The same for `count` of this rank's rows from row `first` on (rows holds those rows only): a
 * field converted a buffer at a time (h5frame.c's converted fields where they are not mapped). */
int h5rows_put_range(int fd, const h5rows_file *f, int k, size_t row_bytes, size_t first, size_t count,
                     const void *rows, const char *name);
/* A range of this rank's rows mapped for the caller's stores (h5rows_map_range .. h5rows_unmap). */
typedef struct h5rows_map {
  char *rows;  /* the first row's bytes; NULL: not mapped (the caller writes them instead) */
  void *base;  /* the mapping (from the page that holds the first row) */
  size_t len;
} h5rows_map;
/* Local, any thread outside an OpenMP team: rows first .. first + count - 1 of dataset k mapped,
 * where put_range would copy into a mapping (a file in memory, its space allocated, a team of
 * several threads): the caller's team then stores the rows straight into m->rows (h5frame.c
 * encodes converted fields there instead of writing them through a buffer); elsewhere m->rows is
 * NULL and the caller writes them. Returns a failure of the rows' allocation (naming the
 * dataset), else DR_OK. */
int h5rows_map_range(int fd, const h5rows_file *f, int k, size_t row_bytes, size_t first, size_t count,
                     const char *name, h5rows_map *m);
void h5rows_unmap(h5rows_map *m);
/* Writes all len bytes of buf at byte `at` of fd (pwrite again after a short write or EINTR).
 * Returns 0, the errno of the write that failed, or -1 for a write that made no progress. */
int h5rows_pwrite_all(int fd, const void *buf, size_t len, off_t at);
/* Local, any thread. Opens f's temporary file for h5rows_put. */
int h5rows_open(const h5rows_file *f, int *fd);
/* Local, any thread. Syncs (a synced file) and closes fd; st: the status of the puts. Returns the
 * first failure's status. */
int h5rows_finish(const h5rows_file *f, int fd, int st);

/* Collective. Agrees on every rank's put status, publishes the file under its final name, or
 * after a failure removes it (see the flags). Every rank returns the same status. */
int h5rows_end(MPI_Comm comm, h5rows_file *f, int put_status);

/* Rank 0, after a run stopped between begin and end: removes the temporary file. */
void h5rows_abandon(h5rows_file *f);

#endif
