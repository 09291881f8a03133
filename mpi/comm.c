/* comm.c - checked MPI helpers and the watchdog of the step loop's waits (see comm.h).
 *
 * The watchdog polls (MPI_Testall) where MPI_Waitall would spin in the library's progress loop
 * anyway, so a wait costs the same CPU as before; the clock is read once a poll. Which rank a
 * collective waits for, MPI cannot say: at the limit every waiting rank calls the roll (a small
 * message to every other rank on its own tag) and listens for COMM_ROLL_SECONDS; the ranks that
 * are waiting too answer, since they reach their own limit within about a step of each other,
 * and those that do not are the ones named. */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "settings.h"

#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* Open MPI: MPIX_CUDA_AWARE_SUPPORT, MPIX_Query_cuda_support */
#endif
#endif

int comm_fail(int mpi_rc, const char *file, int line, const char *call) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(mpi_rc, text, &len) != MPI_SUCCESS) strcpy(text, "unknown MPI error");
  const char *paren = strchr(call, '(');
  int name_len = paren ? (int)(paren - call) : (int)strlen(call);
  char name[128];
  snprintf(name, sizeof name, "%.*s", name_len < 127 ? name_len : 127, call);
  return dr_fail_at(DR_EMPI, file, line, name, "%s", text);
}

int comm_agree(MPI_Comm comm, int status) {
  int worst = status ? status : 0, out = 0;
  /* MAX picks a failing code if any rank failed; codes are small positive ints. */
  if (MPI_Allreduce(&worst, &out, 1, MPI_INT, MPI_MAX, comm) != MPI_SUCCESS) return DR_EMPI;
  if (out && !status) dr_fail(out, "another rank failed (status %d); see its message", out);
  if (out) dr_mark_agreed();
  return out;
}

int comm_cuda_aware(void) {
  const int mode = settings()->cuda_aware_mpi;
  if (mode != SETTING_AUTO) return mode == SETTING_ON;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return 0;
#endif
}

int comm_local(MPI_Comm comm, int *local_rank, int *local_size) {
  MPI_Comm node;
  DR_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int e = MPI_Comm_rank(node, local_rank);
  if (e == MPI_SUCCESS) e = MPI_Comm_size(node, local_size);
  const int freed = MPI_Comm_free(&node);
  if (e != MPI_SUCCESS) return comm_fail(e, __FILE__, __LINE__, "MPI_Comm_rank/size(node communicator)");
  if (freed != MPI_SUCCESS) return comm_fail(freed, __FILE__, __LINE__, "MPI_Comm_free(node communicator)");
  return DR_OK;
}

/* ---- the watchdog ---------------------------------------------------------------------------- */

enum { TAG_ROLL = 901 };                  /* the roll call's messages, apart from every other tag */
static const double COMM_ROLL_SECONDS = 2.0; /* how long a roll call listens for answers */

static double limit_s_;      /* the scene's limit; 0: none */
static MPI_Comm roll_comm_ = MPI_COMM_NULL; /* the roll call's: every rank calls it here, whichever wait expired */
static double longest_frame_; /* s */
static int where_frame_ = -1;
static unsigned long long where_step_;

int comm_watchdog_set(MPI_Comm comm, double seconds) {
  if (roll_comm_ != MPI_COMM_NULL) MPI_Comm_free(&roll_comm_);
  limit_s_ = seconds > 0 ? seconds : 0;
  longest_frame_ = 0;
  where_frame_ = -1;
  if (limit_s_ > 0) DR_MPI(MPI_Comm_dup(comm, &roll_comm_));
  return DR_OK;
}

void comm_watchdog_frame(double seconds) {
  if (seconds > longest_frame_) longest_frame_ = seconds;
}

void comm_watchdog_where(int frame, unsigned long long step) {
  where_frame_ = frame;
  where_step_ = step;
}

double comm_watchdog_limit(void) {
  const double raised = COMM_WATCHDOG_FRAMES * longest_frame_;
  return limit_s_ > 0 && raised > limit_s_ ? raised : limit_s_;
}

/* Appends rank r to the list in out ("rank 3", "ranks 3, 5"); *count counts them. */
static void name_rank(char *out, size_t len, int r, int *count) {
  const size_t k = strlen(out);
  if (k + 16 < len) snprintf(out + k, len - k, "%s%d", *count ? ", " : "", r);
  ++*count;
}

/* The ranks that did not answer this rank's roll call within COMM_ROLL_SECONDS, into out. */
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
  const double until = MPI_Wtime() + COMM_ROLL_SECONDS;
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
static void expire(int n, MPI_Request *req, const int *peer, const char *phase, double waited) {
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
  if (where_frame_ >= 0) snprintf(step, sizeof step, " (frame %d, step %llu)", where_frame_ + 1, where_step_ + 1);
  fprintf(stderr,
          "drift: rank %d waited %.0f s for %s %s in %s%s: %s stopped answering (stopped, hung or lost); ending "
          "the job with exit status %d (restart it from its last checkpoint; parallel.watchdog_s sets the limit)\n",
          rank, waited, count == 1 ? "rank" : "ranks", count ? who : "another rank", phase, step,
          count == 1 ? "it" : count ? "they" : "a rank", DR_ESTALLED);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, DR_ESTALLED);
  exit(DR_ESTALLED); /* MPI_Abort does not return */
}

void comm_watchdog_expire(const char *phase, double waited) { expire(0, NULL, NULL, phase, waited); }

int comm_wait(MPI_Comm comm, int n, MPI_Request *req, MPI_Status *st, const int *peer, const char *phase) {
  (void)comm; /* the requests know it; the roll call has its own */
  if (n <= 0) return DR_OK;
  const double limit = comm_watchdog_limit();
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
    if (waited > limit) expire(n, req, peer, phase, waited);
  }
}

int comm_allreduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char *phase) {
  MPI_Request req;
  DR_MPI(MPI_Iallreduce(in, out, count, type, op, comm, &req));
  return comm_wait(comm, 1, &req, MPI_STATUSES_IGNORE, NULL, phase);
}
