/* test_writer - the frame writer's threads (src/writer.h) on their own: jobs run in the order they
 * were queued; a job's mark (writer_signal) ends writer_wait_flag while the job still runs (a
 * frame's snapshot released before its rows are written); after a job's failure the jobs queued
 * behind it do not run, writer_wait_flag on one of them returns instead of waiting for a mark that
 * never comes, and writer_wait reports the failure for it. Two jobs queued beside each other run at
 * once, over different communicators, and a job queued after them without beside starts only once
 * both have ended; where one of two such jobs fails, the one beside it still runs (as on every rank)
 * and reports the failure, and the jobs after them do not run. Needs MPI_THREAD_MULTIPLE (exit 77,
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
  int *order;              /* the jobs' order of running (n_ran NULL: not recorded) */
  atomic_int *n_ran;
  int mark;                /* writer_signal's flag */
  writer *w;
  atomic_int *go;          /* the job, once marked, waits for this (NULL: not) */
  atomic_int finished;     /* the job's body ended */
  int fail;                /* the job fails (DR_EIO) */
  atomic_int started;      /* the job's body began */
  struct job_ctx *other;   /* the job waits (up to 10 s) for this one to start (NULL: not) */
  int saw_other;           /* ... and saw it start */
  struct job_ctx *after[2]; /* jobs that must have finished when this one starts (NULL: none) */
  int after_ok;            /* they had */
  MPI_Comm comm;           /* the communicator it ran with */
} job_ctx;

static void nap_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static int job(MPI_Comm comm, void *arg) {
  (void)comm;
  job_ctx *c = arg;
  atomic_store(&c->started, 1);
  c->comm = comm;
  c->after_ok = 1;
  for (int k = 0; k < 2; ++k)
    if (c->after[k] && !atomic_load(&c->after[k]->finished)) c->after_ok = 0;
  if (c->other)
    for (int k = 0; k < 10000 && !(c->saw_other = atomic_load(&c->other->started)); ++k) nap_ms(1);
  if (c->n_ran) c->order[atomic_fetch_add(c->n_ran, 1)] = c->index;
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
  int order[JOBS];
  atomic_int n_ran = 0;
  atomic_int go = 0;
  job_ctx c[JOBS];
  uint64_t t[JOBS];
  for (int i = 0; i < 3; ++i) {
    c[i] = (job_ctx){.index = i, .order = order, .n_ran = &n_ran, .w = w, .go = i == 1 ? &go : NULL};
    CHECK(writer_submit(w, job, &c[i], 0, &t[i]) == DR_OK, "writer_submit %d", i);
  }
  writer_wait_flag(w, t[1], &c[1].mark);
  CHECK(c[1].mark == 1, "writer_wait_flag returned before job 1's mark");
  nap_ms(50);
  CHECK(!atomic_load(&c[1].finished), "job 1 finished while held: writer_wait_flag waited for its end");
  CHECK(!atomic_load(&c[2].finished), "job 2 ran while job 1 was held");
  atomic_store(&go, 1);
  CHECK(writer_wait(w, t[2]) == DR_OK, "jobs 0-2: %s", dr_message());
  CHECK(atomic_load(&n_ran) == 3 && order[0] == 0 && order[1] == 1 && order[2] == 2, "jobs ran out of order (%d ran)", atomic_load(&n_ran));

  /* job 3 fails: 4 and 5 do not run; waiting for 5's mark returns, and its status is 3's failure */
  for (int i = 3; i < JOBS; ++i) {
    c[i] = (job_ctx){.index = i, .order = order, .n_ran = &n_ran, .w = w, .fail = i == 3};
    CHECK(writer_submit(w, job, &c[i], 0, &t[i]) == DR_OK, "writer_submit %d", i);
  }
  writer_wait_flag(w, t[5], &c[5].mark); /* would hang if it waited for the mark alone */
  CHECK(c[5].mark == 0 && !atomic_load(&c[5].finished), "job 5 ran after job 3 failed");
  dr_clear();
  const int rc = writer_wait(w, t[5]);
  CHECK(rc == DR_EIO && strstr(dr_message(), "job 3 fails on purpose"), "job 5's status %d: %s (want job 3's failure)",
        rc, dr_message());
  CHECK(atomic_load(&n_ran) == 4 && !atomic_load(&c[4].finished), "jobs after the failure ran (%d ran)", atomic_load(&n_ran));

  writer_destroy(&w);

  /* beside each other: A and B at once (A waits for B's start), over different communicators; C,
   * not beside, after both; then D and E beside, D failing once E has started: E runs and reports
   * D's failure, F (beside E) and G do not run */
  CHECK(writer_create(MPI_COMM_WORLD, &w) == DR_OK && w, "writer_create: %s", dr_message());
  if (!w) {
    MPI_Finalize();
    return 1;
  }
  enum { A, B, C, D, E, F, G, PAIRS };
  job_ctx p[PAIRS];
  uint64_t tp[PAIRS];
  for (int i = 0; i < PAIRS; ++i) p[i] = (job_ctx){.index = i, .w = w, .fail = i == D};
  p[A].other = &p[B], p[C].after[0] = &p[A], p[C].after[1] = &p[B], p[D].other = &p[E];
  for (int i = 0; i < PAIRS; ++i)
    CHECK(writer_submit(w, job, &p[i], i != C && i != G, &tp[i]) == DR_OK, "writer_submit %d", i);
  CHECK(writer_wait(w, tp[C]) == DR_OK, "jobs A-C: %s", dr_message());
  CHECK(p[A].saw_other, "job A never saw job B start: jobs queued beside each other did not run at once");
  CHECK(p[C].after_ok, "job C (not beside) started before jobs A and B had finished");
  CHECK(p[A].comm != p[B].comm, "jobs beside each other got the same communicator");
  int same = MPI_UNEQUAL;
  MPI_Comm_compare(p[A].comm, MPI_COMM_WORLD, &same);
  CHECK(same == MPI_CONGRUENT, "a job's communicator is not a duplicate of the writer's (%d)", same);
  dr_clear();
  CHECK(writer_wait(w, tp[E]) == DR_EIO && strstr(dr_message(), "job 3 fails on purpose"),
        "job E's status: %s (want job D's failure)", dr_message());
  CHECK(p[D].saw_other && atomic_load(&p[E].finished), "job E did not run beside job D");
  dr_clear();
  CHECK(writer_drain(w) == DR_EIO, "writer_drain after job D's failure: %s", dr_message());
  CHECK(!atomic_load(&p[F].started) && !atomic_load(&p[G].started), "jobs after D and E ran after D failed");
  writer_destroy(&w);
  printf("test_writer: %s (%d failed checks)\n", failures_ ? "FAILED" : "passed", failures_);
  MPI_Finalize();
  return failures_ ? 1 : 0;
}
