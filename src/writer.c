/* writer.c - output written behind the compute (see writer.h).
 *
 * Invariants: jobs start in ticket order on the writer's WRITER_THREADS threads (or run in
 * writer_submit's caller where there are none); `started` is the next ticket to start; every
 * ticket below `done` has ended (run, or skipped after a failure), and ended[t % WRITER_QUEUE]
 * says so for the tickets from done to started - 1. A job starts once every job before it has
 * ended, or every job but the one just before it where both may run beside each other
 * (writer_submit's beside): at most two run at once, and they are consecutive tickets, so that
 * ticket t's collectives go over comm[t & 1] and never meet those of the job beside it.
 * failed_at is the lowest failed ticket (UINT64_MAX: none), its message and agreement kept for
 * every later writer_wait; a job is skipped where a job it started after (every one before it,
 * or every one but the one beside it) failed: the same jobs run on every rank, whatever the
 * timing. The threads block the signals the run handles (signals.h), so that they reach the main
 * thread, which decides the stop. */
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

enum { WRITER_THREADS = 2 }; /* at most two jobs run at once (writer_submit's beside) */

typedef struct job {
  writer_fn fn;
  void *ctx;
  int beside; /* may run beside the job before it, where that one may too */
} job;

struct writer {
  MPI_Comm comm[2]; /* ticket t's: comm[t & 1] */
  int threaded;
  int threads;      /* started */
  pthread_t thread[WRITER_THREADS];
  pthread_mutex_t lock;
  pthread_cond_t wake; /* the threads: a job was queued or ended, or stop */
  pthread_cond_t done_cv; /* waiters: a job ended */
  job queue[WRITER_QUEUE];
  int ended[WRITER_QUEUE]; /* tickets done .. started - 1: ended */
  uint64_t queued, started, done; /* tickets handed out; the next to start; every one below done ended */
  int stop;
  uint64_t failed_at;    /* the lowest failed ticket, UINT64_MAX while none failed */
  int fail_rc, fail_agreed;
  char fail_msg[1024];
  int running;           /* jobs running now */
  double busy_s, busy_since, wait_s;
  int team; /* each thread's OpenMP team (writer_cores) */
  double longest_s; /* the longest job so far (the watchdog's limit for waits on the writer) */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether ticket t starts beside the job before it (both may: writer_submit's beside). */
static int beside_before(const writer *w, uint64_t t) {
  return w->threaded && t > 0 && w->queue[t % WRITER_QUEUE].beside && w->queue[(t - 1) % WRITER_QUEUE].beside;
}

/* Whether ticket t has ended (the lock held where threaded). */
static int has_ended(const writer *w, uint64_t t) { return t < w->done || (t < w->started && w->ended[t % WRITER_QUEUE]); }

/* Runs job ticket t, taken from the queue under the lock (held on entry and on return where
 * threaded); records a failure and the end. */
static void run_job(writer *w, uint64_t t) {
  const job j = w->queue[t % WRITER_QUEUE];
  /* the jobs it starts after have ended: the same decision on every rank */
  const int skip = w->failed_at < t - (uint64_t)beside_before(w, t);
  const double t_start = now_s();
  const int beside = !skip && w->running > 0; /* the job before it runs still */
  if (!skip && w->running++ == 0) w->busy_since = t_start;
  if (w->threaded) pthread_mutex_unlock(&w->lock);
  if (beside) log_trace("writer: job %llu starts beside job %llu", (unsigned long long)t, (unsigned long long)(t - 1));
  int rc = DR_OK, agreed = 0;
  char msg[sizeof w->fail_msg] = "";
  if (!skip) {
    dr_clear();
    rc = j.fn(w->comm[t & 1], j.ctx);
    if (rc) {
      agreed = dr_agreed();
      snprintf(msg, sizeof msg, "%s", dr_message());
      dr_clear();
    }
  }
  const double t_end = now_s();
  if (w->threaded) pthread_mutex_lock(&w->lock);
  if (!skip && --w->running == 0) w->busy_s += t_end - w->busy_since;
  if (t_end - t_start > w->longest_s) w->longest_s = t_end - t_start;
  if (rc && t < w->failed_at) {
    w->failed_at = t;
    w->fail_rc = rc;
    w->fail_agreed = agreed;
    snprintf(w->fail_msg, sizeof w->fail_msg, "%s", msg);
  }
  w->ended[t % WRITER_QUEUE] = 1;
  while (w->done < w->started && w->ended[w->done % WRITER_QUEUE]) ++w->done;
  if (w->threaded) {
    pthread_cond_broadcast(&w->done_cv);
    pthread_cond_broadcast(&w->wake); /* the next job may start now */
  }
}

/* Whether the next ticket may start now (the lock held). */
static int may_start(const writer *w) {
  const uint64_t t = w->started;
  return t < w->queued && (t == w->done || (t == w->done + 1 && beside_before(w, t)));
}

static void *thread_main(void *arg) {
  writer *w = arg;
  omp_set_num_threads(w->team); /* this thread's teams (writer_cores) */
  pthread_mutex_lock(&w->lock);
  for (;;) {
    while (!may_start(w) && !(w->stop && w->started == w->queued)) pthread_cond_wait(&w->wake, &w->lock);
    if (!may_start(w)) break; /* stop, and nothing left to start */
    const uint64_t t = w->started++;
    w->ended[t % WRITER_QUEUE] = 0;
    run_job(w, t);
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
 * another size. Each of the writer's threads has a team of this size; two jobs copying at once
 * share it (h5rows_team).
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

/* Frees what writer_create made before its failure (the threads not started). */
static void free_writer(writer *w) {
  for (int c = 0; c < 2; ++c)
    if (w->comm[c] != MPI_COMM_NULL) MPI_Comm_free(&w->comm[c]);
  free(w);
}

int writer_create(MPI_Comm comm, writer **out) {
  *out = NULL;
  writer *w = dr_calloc(1, sizeof *w, "the frame writer");
  if (!w) return DR_ENOMEM;
  w->failed_at = UINT64_MAX;
  w->comm[0] = w->comm[1] = MPI_COMM_NULL;
  for (int c = 0; c < 2; ++c) {
    const int e = MPI_Comm_dup(comm, &w->comm[c]);
    if (e != MPI_SUCCESS) {
      w->comm[c] = MPI_COMM_NULL;
      free_writer(w);
      return comm_fail(e, __FILE__, __LINE__, "MPI_Comm_dup(the frame writer's communicators)");
    }
  }
  int level = MPI_THREAD_SINGLE;
  int e = MPI_Query_thread(&level);
  if (e != MPI_SUCCESS) {
    free_writer(w);
    return comm_fail(e, __FILE__, __LINE__, "MPI_Query_thread");
  }
  /* every rank of one job gets the same level and settings: all take the same path */
  w->threaded = level >= MPI_THREAD_MULTIPLE && !settings()->writer_inline;
  if (w->threaded && (e = writer_cores(w->comm[0], &w->team)) != DR_OK) {
    free_writer(w);
    return e;
  }
  if (w->threaded) {
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    pthread_cond_init(&w->done_cv, NULL);
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM), sigaddset(&block, SIGINT), sigaddset(&block, SIGUSR1), sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old); /* the threads inherit the mask */
    int pe = 0;
    while (w->threads < WRITER_THREADS && (pe = pthread_create(&w->thread[w->threads], NULL, thread_main, w)) == 0)
      ++w->threads;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pe != 0) {
      writer_destroy(&w);
      return dr_fail(DR_EINTERNAL, "pthread_create failed (the frame writer): %s", strerror(pe));
    }
  }
  *out = w;
  return DR_OK;
}

int writer_submit(writer *w, writer_fn fn, void *ctx, int beside, uint64_t *ticket) {
  if (!w->threaded) {
    const uint64_t t = w->queued++;
    *ticket = t;
    w->queue[t % WRITER_QUEUE] = (job){fn, ctx, beside};
    w->started = t + 1;
    w->ended[t % WRITER_QUEUE] = 0;
    run_job(w, t);
    return DR_OK;
  }
  const double t0 = now_s();
  pthread_mutex_lock(&w->lock);
  while (w->queued - w->done >= WRITER_QUEUE) wait_done(w, t0);
  const uint64_t t = w->queued++;
  w->queue[t % WRITER_QUEUE] = (job){fn, ctx, beside};
  *ticket = t;
  pthread_cond_broadcast(&w->wake);
  pthread_mutex_unlock(&w->lock);
  w->wait_s += now_s() - t0;
  return DR_OK;
}

/* The status of ticket t, once it has ended (the lock held where threaded): a failure of it or
 * of a job before it. */
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
  while (w->done <= ticket && ticket < w->queued) wait_done(w, t0); /* and the job beside it, before it */
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
  while (!*flag && !has_ended(w, ticket) && ticket < w->queued) wait_done(w, t0);
  pthread_mutex_unlock(&w->lock);
  w->wait_s += now_s() - t0;
}

int writer_drain(writer *w) { return w->queued ? writer_wait(w, w->queued - 1) : DR_OK; }

int writer_running(writer *w) {
  if (!w->threaded) return w->running;
  pthread_mutex_lock(&w->lock);
  const int n = w->running;
  pthread_mutex_unlock(&w->lock);
  return n;
}

int writer_threaded(const writer *w) { return w->threaded; }
double writer_busy_seconds(const writer *w) { return w->busy_s; }
double writer_wait_seconds(const writer *w) { return w->wait_s; }

void writer_destroy(writer **wp) {
  writer *w = *wp;
  if (!w) return;
  if (w->threaded) {
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->lock);
    for (int i = 0; i < w->threads; ++i) pthread_join(w->thread[i], NULL);
    pthread_cond_destroy(&w->done_cv);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
  }
  free_writer(w);
  *wp = NULL;
}
