/* writer.c - output written behind the compute (see writer.h).
 *
 * Invariants: jobs run one at a time, in ticket order, on the writer's thread (or in
 * writer_submit's caller where there is none); done counts the jobs that have run or were
 * skipped after a failure; failed_at is the first failed ticket (UINT64_MAX: none), and its
 * message and agreement are kept for every later writer_wait. The thread blocks the signals
 * the run handles (signals.h), so that they reach the main thread, which decides the stop. */
#define _GNU_SOURCE /* sched_getaffinity */
#include "writer.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "watchdog.h"
#include "error.h"
#include "log.h"
#include "settings.h"

typedef struct job {
  writer_fn fn;
  void *ctx;
} job;

struct writer {
  MPI_Comm comm;
  int threaded;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t wake; /* the thread: a job was queued, or stop */
  pthread_cond_t done_cv; /* waiters: a job is done */
  job queue[WRITER_QUEUE];
  uint64_t queued, done; /* tickets handed out; jobs done (run or skipped) */
  int stop;
  uint64_t failed_at;    /* the first failed ticket, UINT64_MAX while none failed */
  int fail_rc, fail_agreed;
  char fail_msg[1024];
  double busy_s, wait_s;
  int team; /* the thread's OpenMP team (writer_cores) */
  double longest_s; /* the longest job so far (the watchdog's limit for waits on the writer) */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs job ticket t (the lock not held); records a failure. */
static void run_job(writer *w, uint64_t t, job j) {
  const double t_start = now_s();
  int rc = DR_OK, agreed = 0;
  char msg[sizeof w->fail_msg] = "";
  if (w->failed_at == UINT64_MAX) { /* read without the lock: only this thread writes it */
    const double t0 = now_s();
    dr_clear();
    rc = j.fn(w->comm, j.ctx);
    if (rc) {
      agreed = dr_agreed();
      snprintf(msg, sizeof msg, "%s", dr_message());
      dr_clear();
    }
    w->busy_s += now_s() - t0;
  }
  const double took = now_s() - t_start;
  pthread_mutex_lock(&w->lock);
  if (took > w->longest_s) w->longest_s = took;
  if (rc && w->failed_at == UINT64_MAX) {
    w->failed_at = t;
    w->fail_rc = rc;
    w->fail_agreed = agreed;
    snprintf(w->fail_msg, sizeof w->fail_msg, "%s", msg);
  }
  w->done = t + 1;
  pthread_cond_broadcast(&w->done_cv);
  pthread_mutex_unlock(&w->lock);
}

static void *thread_main(void *arg) {
  writer *w = arg;
  omp_set_num_threads(w->team); /* this thread's teams (writer_cores) */
  pthread_mutex_lock(&w->lock);
  for (;;) {
    while (w->done == w->queued && !w->stop) pthread_cond_wait(&w->wake, &w->lock);
    if (w->done == w->queued) break; /* stop, and nothing left */
    const uint64_t t = w->done;
    const job j = w->queue[t % WRITER_QUEUE];
    pthread_mutex_unlock(&w->lock);
    run_job(w, t, j);
    pthread_mutex_lock(&w->lock);
  }
  pthread_mutex_unlock(&w->lock);
  return NULL;
}

/* One wait on done_cv (the lock held) for a caller that began waiting at t0. With the watchdog
 * (watchdog.h) the wait has a limit: a job stuck in a collective write that another rank never joins
 * ends the job as a step's wait on a stalled rank does. The limit is the watchdog's, or
 * WATCHDOG_FRAMES times the longest job so far where that is longer. */
static void wait_done(writer *w, double t0) {
  const double limit = watchdog_limit();
  if (limit <= 0) {
    pthread_cond_wait(&w->done_cv, &w->lock);
    return;
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts); /* done_cv's clock */
  ts.tv_sec += 1;
  pthread_cond_timedwait(&w->done_cv, &w->lock, &ts);
  const double waited = now_s() - t0;
  const double jobs = WATCHDOG_FRAMES * w->longest_s;
  if (waited > limit && waited > jobs) {
    pthread_mutex_unlock(&w->lock);
    watchdog_expire("the frame writer (a frame or checkpoint written by all ranks together)", waited,
                    limit > jobs ? limit : jobs);
  }
}

/* The writer's OpenMP team (its jobs' loops: the totals, the half precision's conversion, the
 * copies into a file in memory): half the cores this rank may use, shared with the node's other
 * ranks where they may use the same ones (mpirun --bind-to none: every rank sees every core; two
 * teams of all of them, each spinning for work, took two ranks' totals from 6 to 12 ms a frame and
 * their half frames' writers from 2.3 to 1.4 GB/s on one H200), capped by OMP_NUM_THREADS, at
 * least 1. Half: the others run the main thread (which waits on the GPU and MPI by spinning), the
 * frame's fetch thread, the CUDA driver's and MPI's; a team of every core loses its loops' barriers
 * to them (one H200, 16 cores, Sand Blocks l46's frames: 55.5 ms a frame into the disk with a team
 * of 16, 34.9 with 8, the copies' loops then static; docs/performance.md). DRIFT_WRITER_TEAM sets
 * another size.
 *
 * A rank confined to one core of several (Open MPI binds each of one or two ranks to a core unless
 * told --bind-to none) leaves the writer that core's share with the main thread, which waits on
 * the GPU and MPI by spinning: on one H200, two ranks of Sand Blocks l46 wrote their frames at
 * 1.65 GB/s so bound and at 2.19 GB/s unbound (docs/performance.md). Rank 0 says so, once, for
 * all ranks so bound. Collective. */
static int writer_cores(MPI_Comm comm, int *team) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  int local_rank = 0, local = 1;
  DR_TRY(comm_local(comm, &local_rank, &local));
  const int share = (long)mine * local > online ? mine / local : mine; /* cores shared: a rank's part */
  *team = share / 2 < omp_get_max_threads() ? share / 2 : omp_get_max_threads();
  if (settings()->writer_team > 0) *team = settings()->writer_team; /* DRIFT_WRITER_TEAM: a team measured */
  if (*team < 1) *team = 1;
  int bound = mine == 1 && online > 1, ranks = 0, nranks = 1;
  int e = MPI_Allreduce(&bound, &ranks, 1, MPI_INT, MPI_SUM, comm);
  if (e == MPI_SUCCESS) e = MPI_Comm_size(comm, &nranks);
  if (e != MPI_SUCCESS) return comm_fail(e, __FILE__, __LINE__, "MPI_Allreduce(the ranks bound to one core)");
  if (ranks > 0)
    log_info("%d of %d rank(s) may run on one core only: the frame writer shares it with the steps and writes "
             "slower; give each rank several cores (mpirun --bind-to none, srun --cpus-per-task=N)",
             ranks, nranks);
  return DR_OK;
}

int writer_create(MPI_Comm comm, writer **out) {
  *out = NULL;
  writer *w = dr_calloc(1, sizeof *w, "the frame writer");
  if (!w) return DR_ENOMEM;
  w->failed_at = UINT64_MAX;
  w->comm = MPI_COMM_NULL;
  int e = MPI_Comm_dup(comm, &w->comm);
  if (e != MPI_SUCCESS) {
    free(w);
    return comm_fail(e, __FILE__, __LINE__, "MPI_Comm_dup(the frame writer's communicator)");
  }
  int level = MPI_THREAD_SINGLE;
  e = MPI_Query_thread(&level);
  if (e != MPI_SUCCESS) {
    MPI_Comm_free(&w->comm);
    free(w);
    return comm_fail(e, __FILE__, __LINE__, "MPI_Query_thread");
  }
  /* every rank of one job gets the same level and settings: all take the same path */
  w->threaded = level >= MPI_THREAD_MULTIPLE && !settings()->writer_inline;
  if (w->threaded && (e = writer_cores(w->comm, &w->team)) != DR_OK) {
    MPI_Comm_free(&w->comm);
    free(w);
    return e;
  }
  if (w->threaded) {
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->done_cv, NULL);
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM), sigaddset(&block, SIGINT), sigaddset(&block, SIGUSR1), sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old); /* the thread inherits the mask */
    const int pe = pthread_create(&w->thread, NULL, thread_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pe != 0) {
      pthread_cond_destroy(&w->done_cv);
      pthread_cond_destroy(&w->wake);
      pthread_mutex_destroy(&w->lock);
      MPI_Comm_free(&w->comm);
      free(w);
      return dr_fail(DR_EINTERNAL, "pthread_create failed (the frame writer): %s", strerror(pe));
    }
  }
  *out = w;
  return DR_OK;
}

int writer_submit(writer *w, writer_fn fn, void *ctx, uint64_t *ticket) {
  if (!w->threaded) {
    const uint64_t t = w->queued++;
    *ticket = t;
    run_job(w, t, (job){fn, ctx});
    return DR_OK;
  }
  const double t0 = now_s();
  pthread_mutex_lock(&w->lock);
  while (w->queued - w->done >= WRITER_QUEUE) wait_done(w, t0);
  const uint64_t t = w->queued++;
  w->queue[t % WRITER_QUEUE] = (job){fn, ctx};
  *ticket = t;
  pthread_cond_signal(&w->wake);
  pthread_mutex_unlock(&w->lock);
  w->wait_s += now_s() - t0;
  return DR_OK;
}

/* The status of ticket t, once done > t (the lock held where threaded). */
static int status_of(writer *w, uint64_t t) {
  if (w->failed_at > t) return DR_OK;
  const int rc = dr_fail(w->fail_rc, "%s", w->fail_msg);
  if (w->fail_agreed) dr_mark_agreed();
  return rc;
}

int writer_wait(writer *w, uint64_t ticket) {
  if (!w->threaded) return ticket < w->done ? status_of(w, ticket) : DR_OK;
  const double t0 = now_s();
  pthread_mutex_lock(&w->lock);
  while (w->done <= ticket && ticket < w->queued) wait_done(w, t0);
  const int rc = ticket < w->done ? status_of(w, ticket) : DR_OK;
  pthread_mutex_unlock(&w->lock);
  w->wait_s += now_s() - t0;
  return rc;
}

void writer_signal(writer *w, int *flag) {
  if (!w->threaded) {
    *flag = 1;
    return;
  }
  pthread_mutex_lock(&w->lock);
  *flag = 1;
  pthread_cond_broadcast(&w->done_cv);
  pthread_mutex_unlock(&w->lock);
}

void writer_wait_flag(writer *w, uint64_t ticket, const int *flag) {
  if (!w->threaded) return; /* the job ran in writer_submit */
  const double t0 = now_s();
  pthread_mutex_lock(&w->lock);
  while (!*flag && w->done <= ticket && ticket < w->queued) wait_done(w, t0);
  pthread_mutex_unlock(&w->lock);
  w->wait_s += now_s() - t0;
}

int writer_drain(writer *w) { return w->queued ? writer_wait(w, w->queued - 1) : DR_OK; }

int writer_threaded(const writer *w) { return w->threaded; }
double writer_busy_seconds(const writer *w) { return w->busy_s; }
double writer_wait_seconds(const writer *w) { return w->wait_s; }

void writer_destroy(writer **wp) {
  writer *w = *wp;
  if (!w) return;
  if (w->threaded) {
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->done_cv);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
  }
  if (w->comm != MPI_COMM_NULL) MPI_Comm_free(&w->comm);
  free(w);
  *wp = NULL;
}
