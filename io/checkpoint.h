/* checkpoint.h - everything a run needs to continue exactly, in one HDF5 file, written
 * collectively by all ranks (like the frames: each rank one hyperslab at the offset of an
 * exclusive scan) and read back on any number of ranks (each an even slice; sim.c then moves the
 * particles to the ranks that own them), or on one rank a chunk of rows at a time (ckpt_open).
 *
 * Layout of DIR/checkpoint_NNNNN.h5 (NNNNN = the last frame completed; a checkpoint written on
 * a signal may hold a state part-way into the next frame, see step_in_frame):
 *   /particles/NAME   one dataset per attribute of particles.h (PARTICLE_ATTRIBUTES, same names,
 *                     x v C F mass vol0 id material owner): [N] or [N][k], float32, uint64, int32
 *   /scene            uint8 [bytes]: the scene file exactly as it was read
 *   /sources          uint64 [n_sources]: particles each particle source has emitted (emit.h)
 *   root attributes:  the fields of ckpt_state (format, frame, step_in_frame, time, steps,
 *                     rebuilds, last_dt, vmax, scene_hash, n_particles, ranks, emit_frame,
 *                     n_sources, projected), then state_hash (FNV-1a of those values and /sources), particle_sum (the sum over rows of a
 *                     hash of the row's index and bytes), drift_version and scene_path (strings).
 * The file is written as DIR/.checkpoint_NNNNN.h5.tmp with checksummed HDF5 metadata (the 1.8
 * format), synced, and renamed when complete (the folder synced after the rename); the write is
 * split as h5rows.h describes (ckpt_begin, ckpt_put_rows, ckpt_end), so that the rows go out
 * from the run's writer thread a chunk at a time as the run fetches them from its backend; the
 * particles' checksum (particle_sum), known once every row is put, is written into the temporary
 * file by ckpt_end before it is published. Reading checks the metadata checksums (HDF5), the shapes,
 * state_hash, particle_sum and the scene bytes against scene_hash, so a truncated or damaged
 * file is refused rather than continued from. */
#ifndef DRIFT_CHECKPOINT_H
#define DRIFT_CHECKPOINT_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "h5rows.h"
#include "particles.h"

#define CKPT_FORMAT 3 /* raised when the layout changes; older files are refused (2: particle sources; 3: projected) */

/* The run's state beside the particles. */
typedef struct ckpt_state {
  int frame;            /* last completed frame */
  int step_in_frame;    /* substeps already done in frame + 1 (0: the state is at the end of frame) */
  double time;          /* s */
  uint64_t steps;       /* substeps so far */
  uint64_t rebuilds;    /* rebuild-mappings so far */
  double last_dt;       /* s, the last substep's */
  double vmax;          /* m/s: the largest particle speed over all ranks after the last substep, from
                         * which the next adaptive step is computed (the step-size controller's state) */
  uint64_t scene_hash;  /* scene_hash_bytes of the scene file */
  uint64_t n_particles; /* all ranks (set by ckpt_write) */
  int ranks;            /* ranks that wrote it (set by ckpt_write) */
  int emit_frame;       /* particle sources: the last frame whose emission is done (-1: none) */
  int n_sources;        /* particle sources (bodies with emit) */
  uint64_t *emitted;    /* [n_sources] particles each source has emitted; ckpt_write borrows it, ckpt_read
                         * allocates it (free it; NULL when n_sources is 0 or on failure) */
  int projected;        /* 1: F and logJp already hold the return mapping of the next step's P2G (the
                         * CUDA backend after fused G2P2G steps, backend.projected): the resumed run's
                         * first P2G leaves it out (backend.set_projected) */
} ckpt_state;

/* The scene a checkpoint comes from: its bytes and the path they were read from. */
typedef struct ckpt_scene {
  const char *text;
  size_t len;
  const char *path;
} ckpt_scene;

/* The room a checkpoint takes (the free-space checks': it needs at most per_particle bytes a
 * particle plus fixed, a scene text of scene_len bytes and a margin for the metadata). */
void ckpt_size(size_t scene_len, double *per_particle, double *fixed);

/* DIR/checkpoint_NNNNN.h5. */
void ckpt_path(const char *dir, int frame, char *out, size_t len);

/* A checkpoint being written (ckpt_begin .. ckpt_end). */
typedef struct ckpt_file {
  h5rows_file rows; /* the file: paths, counts, the particle datasets' offsets */
  char dir[H5UTIL_PATH_MAX];
  int frame, keep;
  /* the puts' (one thread at a time, in row order) */
  int fd;           /* the temporary file, open for the puts (-1: not open) */
  size_t put;       /* this rank's rows put so far */
  uint64_t sum;     /* their row hashes' sum (the file's particle_sum, over every rank's, at ckpt_end) */
} ckpt_file;

/* Collective over comm. Begins DIR/checkpoint_NNNNN.h5 (NNNNN = st->frame; DIR must exist) for
 * n particles of this rank: the counts, the free-space check, and rank 0's
 * DIR/.checkpoint_NNNNN.h5.tmp with everything but the particle rows and their checksum. On
 * failure no file is left and every rank returns the same status. st and sc are not kept. */
int ckpt_begin(MPI_Comm comm, const char *dir, const ckpt_state *st, const ckpt_scene *sc, size_t n, int keep,
               ckpt_file *f);
/* This rank's rows first .. first + rows->n - 1 (every attribute of rows), written at their
 * place in the file, their hashes added to f->sum. Puts come in row order (first: the rows put so
 * far), from one thread at a time; no MPI and no HDF5 call, so any thread may make them while the
 * caller's other threads use both. Returns this rank's status only. */
int ckpt_put_rows(ckpt_file *f, size_t first, const particles *rows);
/* After the puts (st: their status; a failure is passed through): checks that every row of this
 * rank was put, syncs the file and closes it (a rank without rows syncs too). Local, any thread. */
int ckpt_put_finish(ckpt_file *f, int st);
/* ckpt_put_rows of all this rank's rows at once (p->n as begun), then ckpt_put_finish. */
int ckpt_put(ckpt_file *f, const particles *p);
/* Collective over comm. Agrees on every rank's put_status (ckpt_put_finish's); sums the ranks'
 * row hashes into the file's particle_sum (rank 0, synced), publishes the file under
 * DIR/checkpoint_NNNNN.h5, then (rank 0) deletes the checkpoints of DIR beyond the newest `keep`
 * and any numbered after this one (left by an earlier run that this one replaces; a resume would
 * otherwise pick them). On failure nothing is left under the temporary name, the checkpoints
 * that were there are all kept, and every rank returns the same status. */
int ckpt_end(MPI_Comm comm, ckpt_file *f, int put_status);
/* Collective over comm: ckpt_begin, ckpt_put and ckpt_end. */
int ckpt_write(MPI_Comm comm, const char *dir, const ckpt_state *st, const ckpt_scene *sc, const particles *p,
               int keep);

/* A checkpoint read a chunk of rows at a time, as a particle_source (particles.h): a resume
 * streams it into the backend (backend_create_from), so the host never holds all its particles.
 *
 * Collective over comm (MPI_COMM_SELF: one rank). Each rank opens the file alone and checks
 * everything the top of checkpoint_read.c lists, the sum of the row hashes included: each reads its
 * even slice of the rows (rows [N r / R, N (r + 1) / R) of R ranks) in a first pass (one buffer of
 * `chunk` rows), and the slices' sums, added over the ranks, must give the recorded one. So a
 * damaged file is refused before a backend is made from it, and a folder's older checkpoint can
 * still be taken instead (ckpt_open_latest). That pass also gathers what the resume checks of
 * every particle (ckpt_rows_seen, over all ranks). The streams then read the rows again, in
 * hyperslabs of at most `chunk` rows straight into the consumer's particles, each rank at its own
 * pace (no collective call): all of them (ckpt_reader_source, whose last row holds the sum against
 * the recorded one once more) or the rank's slice (ckpt_reader_slice). The host holds at most
 * `chunk` rows at a time. */
typedef struct ckpt_reader ckpt_reader;

/* What the first pass saw over every row (material_min > material_max: no rows). */
typedef struct ckpt_rows_seen {
  int32_t material_min, material_max;
  float mass_max; /* kg, 0 for no rows */
} ckpt_rows_seen;

/* Opens path and reads its state into *st (st->emitted allocated), on every rank of comm; *r: the
 * reader (NULL on failure). chunk: the most rows read at once (MEM_CREATE_CHUNK in a run; the
 * tests take less). A file that is missing or not a whole, undamaged checkpoint fails with
 * DR_EINPUT and one line naming the file and what is wrong; a file that cannot be read with
 * DR_EIO; every rank returns the same status. */
int ckpt_open(MPI_Comm comm, const char *path, size_t chunk, ckpt_state *st, ckpt_reader **r);
/* Collective over comm. ckpt_open on the newest checkpoint of DIR that reads back whole: tries
 * them newest first, and says (log_info) why it passes over any that does not. Writes the chosen
 * file's path to found. DR_EINPUT when DIR holds none that is usable. */
int ckpt_open_latest(MPI_Comm comm, const char *dir, size_t chunk, ckpt_state *st, ckpt_reader **r, char *found,
                     size_t len);
/* The rows as a source, from the first: all of them (n = st->n_particles), or this rank's slice.
 * The reader must outlive it; one source at a time. It rewinds (an island's creation reads it once
 * for the split, then once for each member). */
particle_source ckpt_reader_source(ckpt_reader *r);
particle_source ckpt_reader_slice(ckpt_reader *r);
/* This rank's even slice: rows [*first, *end). */
void ckpt_reader_slice_rows(const ckpt_reader *r, uint64_t *first, uint64_t *end);
/* Rows [first, first + count) appended to out (grown where it lacks room), in hyperslabs of at
 * most the reader's chunk, on the calling rank alone; a source of the reader starts again from its
 * first row after it. */
int ckpt_reader_rows(ckpt_reader *r, uint64_t first, uint64_t count, particles *out);
const ckpt_rows_seen *ckpt_reader_seen(const ckpt_reader *r);
void ckpt_close(ckpt_reader **r);

/* ckpt_open, then this rank's slice read whole into *slice (resized; allocates), the reader
 * closed: for the tests and tools that compare a checkpoint's particles. */
int ckpt_read(MPI_Comm comm, const char *path, ckpt_state *st, particles *slice);
/* ckpt_read on the checkpoint ckpt_open_latest picks. */
int ckpt_read_latest(MPI_Comm comm, const char *dir, ckpt_state *st, particles *slice, char *found, size_t len);

#endif
