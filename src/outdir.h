/* outdir.h - the output folder of a run: one run at a time (a lock held for the whole run), and
 * no run's output mixed with another's (a folder that holds drift's files is refused unless the
 * run resumes it, or --force clears them first). Rank 0 only; the caller agrees on the result. */
#ifndef DRIFT_OUTDIR_H
#define DRIFT_OUTDIR_H

/* What a run may do with a folder that holds an earlier run's output. */
enum { OUTDIR_NEW, OUTDIR_RESUME, OUTDIR_FORCE };

typedef struct outdir_lock {
  int fd;          /* the lock file, open and locked; -1 when none is held */
  char path[4200]; /* DIR/.drift.lock */
} outdir_lock;

/* Creates DIR (mkdir -p), takes its lock (DIR/.drift.lock: host, pid and start time; a lock of
 * a run that ended is taken over with a line saying so) and, unless mode is OUTDIR_RESUME,
 * checks that DIR holds no frame, checkpoint or frames.xdmf (OUTDIR_FORCE removes them and
 * their previews and temporary files, and nothing else). On failure nothing is held, DR_EINPUT
 * (the folder in use, or holding output) or DR_EIO. */
int outdir_claim(const char *dir, int mode, outdir_lock *lk);

/* Removes and unlocks the lock file; no-op when none is held. */
void outdir_release(outdir_lock *lk);

#endif
