/* test_writer - the frame writer's thread (src/writer.h) on its own: jobs run in the order they
 * were queued; a job's mark (writer_signal) ends writer_wait_flag while the job still runs (a
 * frame's snapshot released before its rows are written); after a job's failure the jobs queued
 * behind it do not run, writer_wait_flag on one of them returns instead of waiting for a mark that
 * never comes, and writer_wait reports the failure for it. Needs MPI_THREAD_MULTIPLE (exit 77,
 * skipped, where the MPI library does not give it). */
#include <mpi.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "error.h"
#include "writer.h"

enum { JOBS = 6 };

typedef struct job_ctx {
  int index;
  int *order, *n_ran;      /* the jobs' order of running (only the writer's thread writes) */
  int mark;                /* writer_signal's flag */
  writer *w;
  atomic_int *go;          /* the job, once marked, waits for this (NULL: not) */
  atomic_int finished;     /* the job's body ended */
  int fail;                /* the job fails (DR_EIO) */
} job_ctx;

static void nap_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static int job(MPI_Comm comm, void *arg) {
  (void)comm;
  job_ctx *c = arg;
  c->order[(*c->n_ran)++] = c->index;
  writer_signal(c->w, &c->mark);
  if (c->go)
    while (!atomic_load(c->go)) nap_ms(1);
  atomic_store(&c->finished, 1);
  return c->fail ? dr_fail(DR_EIO, "job %d fails on purpose", c->index) : DR_OK;
}

int main(int argc, char **argv) {
  int level = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
  if (level < MPI_THREAD_MULTIPLE) {
    printf("test_writer: skipped (no MPI_THREAD_MULTIPLE)\n");
    MPI_Finalize();
    return 77;
  }
  writer *w = NULL;
  CHECK(writer_create(MPI_COMM_WORLD, &w) == DR_OK && w, "writer_create: %s", dr_message());
  if (!w) {
    MPI_Finalize();
    return 1;
  }
  CHECK(writer_threaded(w), "the writer has no thread of its own");

  /* in order; job 1 marked, then held until main lets it go */
  int order[JOBS], n_ran = 0;
  atomic_int go = 0;
  job_ctx c[JOBS];
  uint64_t t[JOBS];
  for (int i = 0; i < 3; ++i) {
    c[i] = (job_ctx){.index = i, .order = order, .n_ran = &n_ran, .w = w, .go = i == 1 ? &go : NULL};
    CHECK(writer_submit(w, job, &c[i], &t[i]) == DR_OK, "writer_submit %d", i);
  }
  writer_wait_flag(w, t[1], &c[1].mark);
  CHECK(c[1].mark == 1, "writer_wait_flag returned before job 1's mark");
  nap_ms(50);
  CHECK(!atomic_load(&c[1].finished), "job 1 finished while held: writer_wait_flag waited for its end");
  CHECK(!atomic_load(&c[2].finished), "job 2 ran while job 1 was held");
  atomic_store(&go, 1);
  CHECK(writer_wait(w, t[2]) == DR_OK, "jobs 0-2: %s", dr_message());
  CHECK(n_ran == 3 && order[0] == 0 && order[1] == 1 && order[2] == 2, "jobs ran out of order (%d ran)", n_ran);

  /* job 3 fails: 4 and 5 do not run; waiting for 5's mark returns, and its status is 3's failure */
  for (int i = 3; i < JOBS; ++i) {
    c[i] = (job_ctx){.index = i, .order = order, .n_ran = &n_ran, .w = w, .fail = i == 3};
    CHECK(writer_submit(w, job, &c[i], &t[i]) == DR_OK, "writer_submit %d", i);
  }
  writer_wait_flag(w, t[5], &c[5].mark); /* would hang if it waited for the mark alone */
  CHECK(c[5].mark == 0 && !atomic_load(&c[5].finished), "job 5 ran after job 3 failed");
  dr_clear();
  const int rc = writer_wait(w, t[5]);
  CHECK(rc == DR_EIO && strstr(dr_message(), "job 3 fails on purpose"), "job 5's status %d: %s (want job 3's failure)",
        rc, dr_message());
  CHECK(n_ran == 4 && !atomic_load(&c[4].finished), "jobs after the failure ran (%d ran)", n_ran);

  writer_destroy(&w);
  printf("test_writer: %s (%d failed checks)\n", failures_ ? "FAILED" : "passed", failures_);
  MPI_Finalize();
  return failures_ ? 1 : 0;
}
