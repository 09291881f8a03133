/* outdir.c - see outdir.h: the output folder's lock and the check for an earlier run's output.
 *
 * Invariants: the lock is a POSIX record lock (fcntl, which NFS's lock manager also serves) on
 * DIR/.drift.lock, held by rank 0 from before sampling until the run ends; the kernel drops it
 * when the process dies, so a lock file that can be locked belongs to a run that ended (stale)
 * and is taken over. The file names the holder (host, pid, start time) for the refusal's message.
 * A lock file removed by its ending holder while another run opened it is detected (the inode
 * at the path is not the one locked) and opened again. Only drift's own file names (OUTPUT_NAMES,
 * TEMP_NAMES) are ever removed. */
#define _POSIX_C_SOURCE 200809L
#include "outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "log.h"

#define LOCK_NAME ".drift.lock"

/* What a run writes (docs/output.md): their presence means the folder holds a run's output. */
static const char *const OUTPUT_NAMES[] = {"frame_[0-9]*.h5", "frame_[0-9]*.png", "checkpoint_[0-9]*.h5",
                                           "frames.xdmf", "frames_vertices.bin"};
/* What an interrupted write leaves: removed by --force, never a reason to refuse. */
static const char *const TEMP_NAMES[] = {".frame_[0-9]*.tmp", ".checkpoint_[0-9]*.tmp", ".frames.xdmf.tmp",
                                         ".frames_vertices.bin.tmp"};

static int matches(const char *name, const char *const *patterns, int n) {
  for (int i = 0; i < n; ++i)
    if (fnmatch(patterns[i], name, FNM_PERIOD) == 0) return 1;
  return 0;
}

/* The holder's line as written by write_holder: "host H pid P started T". */
typedef struct holder {
  char host[256], started[64];
  long pid;
} holder;

static int read_holder(int fd, holder *h) {
  char buf[512];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  memset(h, 0, sizeof *h);
  if (n <= 0) return 0;
  buf[n] = 0;
  return sscanf(buf, "host %255s pid %ld started %63s", h->host, &h->pid, h->started) == 3;
}

static int write_holder(int fd, const char *path) {
  char host[256] = "unknown", started[64] = "unknown", line[512];
  if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "unknown");
  host[sizeof host - 1] = 0;
  for (char *p = host; *p; ++p)
    if (*p == ' ' || *p == '\n') *p = '_';
  const time_t now = time(NULL);
  struct tm tm;
  if (gmtime_r(&now, &tm)) strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", &tm);
  const int k = snprintf(line, sizeof line, "host %s pid %ld started %s\n", host, (long)getpid(), started);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)k, 0) != k)
    return dr_fail(DR_EIO, "cannot write the lock file %s: %s", path, strerror(errno));
  return DR_OK;
}

/* Whether the holder named in the file still runs: only knowable on this host (the fallback
 * where the file system has no record locks). */
static int holder_alive(const holder *h) {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0 || strcmp(host, h->host) != 0) return 1; /* another host: assume so */
  if (h->pid <= 0 || h->pid == (long)getpid()) return 0;
  return kill((pid_t)h->pid, 0) == 0 || errno == EPERM;
}

static int take_lock(const char *dir, outdir_lock *lk) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    int fd = open(lk->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return dr_fail(DR_EIO, "output folder %s: cannot create its lock file %s: %s", dir, lk->path, strerror(errno));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    holder h;
    int busy = 0;
    if (fcntl(fd, F_SETLK, &fl) != 0) {
      const int e = errno;
      if (e == EACCES || e == EAGAIN) busy = 1;
      else if (e == ENOLCK || e == EOPNOTSUPP || e == EINVAL) busy = read_holder(fd, &h) && holder_alive(&h);
      else {
        close(fd);
        return dr_fail(DR_EIO, "output folder %s: cannot lock %s: %s", dir, lk->path, strerror(e));
      }
    }
    const int known = read_holder(fd, &h);
    if (busy) {
      close(fd);
      if (!known) snprintf(h.host, sizeof h.host, "unknown"), snprintf(h.started, sizeof h.started, "unknown");
      return dr_fail(DR_EINPUT, "output folder %s is in use by another run (host %s, pid %ld, started %s; lock %s): wait "
                     "for it to end, or choose another --out", dir, h.host, h.pid, h.started, lk->path);
    }
    /* the file locked must still be the one at the path: its holder may have removed it meanwhile */
    struct stat a, b;
    if (fstat(fd, &a) != 0 || stat(lk->path, &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
      close(fd);
      continue;
    }
    if (known)
      log_info("output folder %s: taking over the lock of a run that ended (host %s, pid %ld, started %s)", dir, h.host,
               h.pid, h.started);
    int rc = write_holder(fd, lk->path);
    if (rc) {
      close(fd);
      return rc;
    }
    lk->fd = fd;
    return DR_OK;
  }
  return dr_fail(DR_EIO, "output folder %s: its lock file %s keeps changing under this run", dir, lk->path);
}

/* The folder's output files: counts them (the first named in first), and with remove set
 * removes them and the temporary files. */
static int scan_output(const char *dir, int remove, int *count, char first[256]) {
  *count = 0;
  first[0] = 0;
  DIR *d = opendir(dir);
  if (!d) return dr_fail(DR_EIO, "output folder %s: cannot list it: %s", dir, strerror(errno));
  int rc = DR_OK;
  for (struct dirent *e; rc == DR_OK && (e = readdir(d));) {
    const int out = matches(e->d_name, OUTPUT_NAMES, (int)(sizeof OUTPUT_NAMES / sizeof *OUTPUT_NAMES));
    const int tmp = matches(e->d_name, TEMP_NAMES, (int)(sizeof TEMP_NAMES / sizeof *TEMP_NAMES));
    if (!out && !tmp) continue;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue; /* drift writes plain files only */
    if (out) {
      if (!*count || strcmp(e->d_name, first) < 0) snprintf(first, 256, "%s", e->d_name);
      ++*count;
    }
    if (remove && unlink(path) != 0)
      rc = dr_fail(DR_EIO, "--force: cannot remove %s: %s", path, strerror(errno));
  }
  closedir(d);
  return rc;
}

int outdir_claim(const char *dir, int mode, outdir_lock *lk) {
  lk->fd = -1;
  if (snprintf(lk->path, sizeof lk->path, "%s/%s", dir, LOCK_NAME) >= (int)sizeof lk->path)
    return dr_fail(DR_EIO, "%s: output folder path too long", dir);
  DR_TRY(take_lock(dir, lk));
  if (mode == OUTDIR_RESUME) return DR_OK;
  int n = 0, rc;
  char first[256];
  rc = scan_output(dir, 0, &n, first);
  if (rc == DR_OK && n > 0 && mode == OUTDIR_FORCE) {
    rc = scan_output(dir, 1, &n, first);
    if (rc == DR_OK) log_info("--force: removed %d file(s) of an earlier run from %s/", n, dir);
  } else if (rc == DR_OK && n > 0) {
    rc = dr_fail(DR_EINPUT, "output folder %s holds another run's output (%s%s): --resume continues it, --force "
                 "deletes it first, or choose another --out", dir, first, n > 1 ? " and more" : "");
  }
  if (rc) outdir_release(lk);
  return rc;
}

void outdir_release(outdir_lock *lk) {
  if (!lk || lk->fd < 0) return;
  unlink(lk->path); /* while locked: a run that opened it meanwhile sees another inode and opens again */
  close(lk->fd);
  lk->fd = -1;
}
