/* watchdog.c - the watchdog of the run's waits on other ranks (see watchdog.h).
 *
 * comm_wait polls (MPI_Testall) where MPI_Waitall would spin in the library's progress loop
 * anyway, so a wait costs the CPU that one would; the clock is read once a poll. Which rank a
 * collective waits for, MPI cannot say: at the limit every waiting rank calls the roll (a small
 * message to every other rank on its own tag) and listens for ROLL_SECONDS; the ranks that are
 * waiting too answer, since they reach their own limit within about a step of each other, and
 * those that do not are the ones named.
 *
 * Regions (watchdog_enter) are timed by a thread of their own, which sleeps on a condition
 * variable between looks and calls MPI only to end the job (MPI_THREAD_MULTIPLE, main.c). */
#define _POSIX_C_SOURCE 200809L
#include "watchdog.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "error.h"
#include "sanitize.h"

enum { TAG_ROLL = 901 };                  /* the roll call's messages, apart from every other tag */
static const double ROLL_SECONDS = 2.0; /* how long a roll call listens for answers */

/* The watchdog's state, under lock: the main thread sets it, the regions' thread and the frame
 * writer's waits read it. */
static pthread_mutex_t lock_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tick_ = PTHREAD_COND_INITIALIZER; /* the regions' thread sleeps on it */
static double limit_s_;                     /* the scene's limit; 0: none */
static MPI_Comm roll_comm_ = MPI_COMM_NULL; /* the roll call's: every rank calls it here, whichever wait expired */
static double longest_frame_;               /* s */
static int where_frame_ = -1;
static unsigned long long where_step_;
static const char *region_;   /* the open region's phase; NULL: none */
static double region_t0_;     /* when it opened (now_s) */
static pthread_t region_owner_; /* the thread that opened it */
static double longest_region_; /* s */
static pthread_t thread_;
static int thread_running_, thread_stop_;
static atomic_int expiring_; /* a wait expired: the first ends the job */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void expire(int n, MPI_Request *req, const int *peer, const char *phase, double waited, double limit);

/* The limit of the run's waits (the lock held): the scene's, raised to WATCHDOG_FRAMES times the
 * longest frame; 0: no watchdog. */
static double limit_locked(void) {
  const double raised = WATCHDOG_FRAMES * longest_frame_;
  return limit_s_ > 0 && raised > limit_s_ ? raised : limit_s_;
}

/* The regions' thread: four looks a second at the open region. */
static void *regions_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&lock_);
  while (!thread_stop_) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* tick_'s clock */
    ts.tv_nsec += 250000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec += 1, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&tick_, &lock_, &ts);
    if (!region_ || thread_stop_) continue;
    const double waited = now_s() - region_t0_, raised = WATCHDOG_FRAMES * longest_region_;
    const double limit = raised > limit_locked() ? raised : limit_locked();
    if (waited > limit) {
      const char *phase = region_;
      pthread_mutex_unlock(&lock_);
      expire(0, NULL, NULL, phase, waited, limit); /* does not return */
    }
  }
  pthread_mutex_unlock(&lock_);
  return NULL;
}

/* Stops the regions' thread (the lock not held). */
static void regions_stop(void) {
  pthread_mutex_lock(&lock_);
  const int running = thread_running_;
  thread_stop_ = 1;
  pthread_cond_signal(&tick_);
  pthread_mutex_unlock(&lock_);
  if (running) pthread_join(thread_, NULL);
  thread_running_ = 0;
  thread_stop_ = 0;
}

int watchdog_set(MPI_Comm comm, double seconds) {
  regions_stop();
  if (roll_comm_ != MPI_COMM_NULL) MPI_Comm_free(&roll_comm_);
  pthread_mutex_lock(&lock_);
  limit_s_ = seconds > 0 ? seconds : 0;
  longest_frame_ = longest_region_ = 0;
  where_frame_ = -1;
  region_ = NULL;
  pthread_mutex_unlock(&lock_);
  if (limit_s_ <= 0) return DR_OK;
  DR_MPI(MPI_Comm_dup(comm, &roll_comm_));
  /* the thread takes no signals: they stop the run on the main thread (signals.h) */
  sigset_t block, old;
  sigfillset(&block);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  const int pe = pthread_create(&thread_, NULL, regions_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (pe) return dr_fail(DR_EINTERNAL, "pthread_create failed (the watchdog's thread): %s", strerror(pe));
  thread_running_ = 1;
  return DR_OK;
}

void watchdog_frame(double seconds) {
  pthread_mutex_lock(&lock_);
  if (seconds > longest_frame_) longest_frame_ = seconds;
  pthread_mutex_unlock(&lock_);
}

void watchdog_where(int frame, unsigned long long step) {
  pthread_mutex_lock(&lock_);
  where_frame_ = frame;
  where_step_ = step;
  pthread_mutex_unlock(&lock_);
}

double watchdog_limit(void) {
  pthread_mutex_lock(&lock_);
  const double limit = limit_locked();
  pthread_mutex_unlock(&lock_);
  return limit;
}

void watchdog_enter(const char *phase) {
  pthread_mutex_lock(&lock_);
  if (limit_s_ > 0) {
    region_ = phase;
    region_t0_ = now_s();
    region_owner_ = pthread_self();
  }
  pthread_mutex_unlock(&lock_);
}

void watchdog_leave(void) {
  pthread_mutex_lock(&lock_);
  if (region_) {
    const double took = now_s() - region_t0_;
    if (took > longest_region_) longest_region_ = took;
  }
  region_ = NULL;
  pthread_mutex_unlock(&lock_);
}

/* Appends rank r to the list in out ("rank 3", "ranks 3, 5"); *count counts them. */
static void name_rank(char *out, size_t len, int r, int *count) {
  const size_t k = strlen(out);
  if (k + 16 < len) snprintf(out + k, len - k, "%s%d", *count ? ", " : "", r);
  ++*count;
}

/* The ranks that did not answer this rank's roll call within ROLL_SECONDS, into out. */
static void roll_call(MPI_Comm comm, char *out, size_t len, int *count) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Request *req = calloc(2 * (size_t)size, sizeof *req);
  int *got = calloc((size_t)size, sizeof *got);
  static int me_out;
  if (!req || !got) {
    free(req), free(got);
    return;
  }
  me_out = rank;
  for (int r = 0; r < size; ++r) {
    req[2 * r] = req[2 * r + 1] = MPI_REQUEST_NULL;
    if (r == rank) continue;
    MPI_Irecv(&got[r], 1, MPI_INT, r, TAG_ROLL, comm, &req[2 * r]);
    MPI_Isend(&me_out, 1, MPI_INT, r, TAG_ROLL, comm, &req[2 * r + 1]);
  }
  int *heard = calloc((size_t)size, sizeof *heard);
  const double until = MPI_Wtime() + ROLL_SECONDS;
  for (int left = size - 1; heard && left > 0 && MPI_Wtime() < until;) {
    for (int r = 0; r < size; ++r) {
      int flag = 0;
      if (r == rank || heard[r]) continue;
      if (MPI_Test(&req[2 * r], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) heard[r] = 1, --left;
    }
  }
  for (int r = 0; r < size; ++r)
    if (r != rank && (!heard || !heard[r])) name_rank(out, len, r, count);
  /* the requests stay posted: the job ends right after (MPI_Abort) */
  free(heard);
}

/* The limit passed: one line, then the job ends with DR_ESTALLED. */
static void expire(int n, MPI_Request *req, const int *peer, const char *phase, double waited, double limit) {
  if (atomic_exchange(&expiring_, 1)) /* another thread's wait expired first: its MPI_Abort ends this one */
    for (;;) pause();
  MPI_Comm comm = roll_comm_ != MPI_COMM_NULL ? roll_comm_ : MPI_COMM_WORLD;
  char who[512] = "";
  int count = 0;
  int *late = peer ? calloc((size_t)n, sizeof *late) : NULL;
  for (int k = 0; late && k < n; ++k) { /* the requests not complete name their peers, once each */
    int flag = 1;
    if (req[k] != MPI_REQUEST_NULL) MPI_Request_get_status(req[k], &flag, MPI_STATUS_IGNORE);
    late[k] = !flag;
    for (int j = 0; j < k && late[k]; ++j)
      if (late[j] && peer[j] == peer[k]) late[k] = 0;
    if (late[k]) name_rank(who, sizeof who, peer[k], &count);
  }
  free(late);
  char rolled[512] = "";
  int rolled_count = 0;
  roll_call(comm, rolled, sizeof rolled, &rolled_count); /* answers the others' roll calls too */
  if (!count) snprintf(who, sizeof who, "%s", rolled), count = rolled_count;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  char step[96] = "";
  pthread_mutex_lock(&lock_);
  const int where_frame = where_frame_;
  const unsigned long long where_step = where_step_;
  pthread_mutex_unlock(&lock_);
  if (where_frame >= 0) snprintf(step, sizeof step, " (frame %d, step %llu)", where_frame + 1, where_step + 1);
  fprintf(stderr,
          "drift: rank %d waited %.0f s (limit %.1f s) for %s %s in %s%s: %s stopped answering (stopped, hung or "
          "lost); ending the job with exit status %d (restart it from its last checkpoint; parallel.watchdog_s sets "
          "the limit)\n",
          rank, waited, limit, count == 1 ? "rank" : "ranks", count ? who : "another rank", phase, step,
          count == 1 ? "it" : count ? "they" : "a rank", DR_ESTALLED);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, DR_ESTALLED);
  exit(DR_ESTALLED); /* MPI_Abort does not return */
}

void watchdog_expire(const char *phase, double waited, double limit) {
  expire(0, NULL, NULL, phase, waited, limit);
}

int comm_wait(MPI_Comm comm, int n, MPI_Request *req, MPI_Status *st, const int *peer, const char *phase) {
  (void)comm; /* the requests know it; the roll call has its own */
  if (n <= 0) return DR_OK;
  const double limit = watchdog_limit();
  if (limit <= 0) {
    const int e = MPI_Waitall(n, req, st);
    return e == MPI_SUCCESS ? DR_OK : comm_fail(e, __FILE__, __LINE__, "MPI_Waitall");
  }
  const double t0 = MPI_Wtime();
  for (;;) {
    int flag = 0;
    const int e = MPI_Testall(n, req, &flag, st);
    if (e != MPI_SUCCESS) return comm_fail(e, __FILE__, __LINE__, "MPI_Testall");
    if (flag) return DR_OK;
    const double waited = MPI_Wtime() - t0;
    if (waited > limit) { /* a wait inside a region is named by it (the agreement in a frame's file) */
      pthread_mutex_lock(&lock_);
      const char *named = region_ && pthread_equal(region_owner_, pthread_self()) ? region_ : phase;
      pthread_mutex_unlock(&lock_);
      expire(n, req, peer, named, waited, limit);
    }
  }
}

int comm_allreduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char *phase) {
  MPI_Request req;
  if (in != MPI_IN_PLACE) dr_tsan_release(in); /* MPI's now, op's on any thread (sanitize.h) */
  dr_tsan_release(out);
  DR_MPI(MPI_Iallreduce(in, out, count, type, op, comm, &req));
  const int rc = comm_wait(comm, 1, &req, MPI_STATUSES_IGNORE, NULL, phase);
  if (rc == DR_OK) dr_tsan_acquire(out); /* what op wrote on another thread (sanitize.h) */
  return rc;
}
