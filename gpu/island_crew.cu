// island_crew.cu - the island's host threads (the crew): one thread per member runs that
// member's host work (rebuild-mapping, graph capture, step launches), island_each hands a job to
// every member and waits for all, island_sync waits for every member's stream.
//
// Host work of the members runs one thread per member (member 0's on
// the caller's thread), so that the island pays one member's host time instead of the sum:
//  - the rebuild-mapping (three reads of a count, each a synchronisation of the member's stream,
//    between short kernels) and the capture of the member's step graphs;
//  - every step: the launch of the member's step graph, and the wait for the step whose flags
//    the host reads next (island_advance_frame).
// A job touches its own member's state only; what needs the peers (the tags, the merge of the
// flags) runs on the caller's thread after island_each has seen every job end. A thread waits
// for the next job spinning for CREW_SPIN_NS (the next step's launch comes within a step), then
// on a condition variable (between frames). A rank with fewer usable cores than GPUs runs the
// members' jobs one after another on the caller's thread instead (crew_start).

#include "cuda_state.h"

/* A spinning thread's pause (x86: lets the core's other hardware thread run). */
static inline void crew_pause(void) {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

static void *crew_main(void *arg) {
  const crew_seat *seat = (const crew_seat *)arg;
  struct island *I = seat->I;
  crew *c = &I->crew;
  unsigned seen = 0;
  for (;;) {
    /* the next job: spin a while, then sleep (the dispatch bumps gen under the mutex) */
    const double t0 = now_ns();
    int n = 0;
    while (__atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) == seen && !__atomic_load_n(&c->quit, __ATOMIC_ACQUIRE)) {
      crew_pause();
      if ((++n & 1023) == 0 && now_ns() - t0 > CREW_SPIN_NS) {
        pthread_mutex_lock(&c->mu);
        while (__atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) == seen && !c->quit) pthread_cond_wait(&c->go, &c->mu);
        pthread_mutex_unlock(&c->mu);
        break;
      }
    }
    if (__atomic_load_n(&c->quit, __ATOMIC_ACQUIRE)) break;
    seen = __atomic_load_n(&c->gen, __ATOMIC_ACQUIRE);
    int rc = use(I->m[seat->k]);
    if (rc == DR_OK) rc = c->job(I, seat->k);
    if (rc != DR_OK) {
      snprintf(c->msg[seat->k], sizeof c->msg[seat->k], "%s", dr_message());
      dr_clear();
    }
    c->rc[seat->k] = rc;
    __atomic_sub_fetch(&c->busy, 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

/* The host cores this process may run on (its affinity; 0 where it cannot tell). */
static int usable_cores(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

int crew_start(island *I) {
  crew *c = &I->crew;
  if (I->nm < 2) return DR_OK;
  /* A thread per member only where they can run side by side: on fewer cores the members'
   * threads (and CUDA's spinning waits) take turns on them, and an island under mpirun's
   * default binding to one core runs many times slower than with a core each (see
   * docs/performance.md (decisions)). One thread then drives every member. */
  const int cores = usable_cores();
  if (cores > 0 && cores < I->nm) {
    log_info("cuda island: rank %d may run on %d host core%s (its CPU affinity), fewer than its %d GPUs: one host "
             "thread drives them all (give the rank a core per GPU: mpirun --bind-to none, or srun --cpus-per-task)",
             I->m[0]->prm.rank, cores, cores == 1 ? "" : "s", I->nm);
    return DR_OK;
  }
  int e = pthread_mutex_init(&c->mu, NULL);
  if (e == 0) {
    e = pthread_cond_init(&c->go, NULL);
    if (e) pthread_mutex_destroy(&c->mu);
  }
  if (e) return dr_fail(DR_ENOMEM, "cuda island: pthread_mutex_init/pthread_cond_init failed: %s", strerror(e));
  c->started = -1;
  for (int k = 1; k < I->nm; ++k) {
    c->seat[k].I = I;
    c->seat[k].k = k;
    e = pthread_create(&c->th[k], NULL, crew_main, &c->seat[k]);
    if (e) {
      crew_stop(I);
      return dr_fail(DR_ENOMEM, "cuda island: pthread_create for GPU %d's host thread failed: %s", k, strerror(e));
    }
    c->started = k;
  }
  return DR_OK;
}

void crew_stop(island *I) {
  crew *c = &I->crew;
  if (c->started == 0) return;
  pthread_mutex_lock(&c->mu);
  __atomic_store_n(&c->quit, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&c->go);
  pthread_mutex_unlock(&c->mu);
  for (int k = 1; k <= c->started; ++k) pthread_join(c->th[k], NULL);
  pthread_cond_destroy(&c->go);
  pthread_mutex_destroy(&c->mu);
  c->started = 0;
}

int island_each(island *I, member_job job) {
  crew *c = &I->crew;
  if (c->started != I->nm - 1 || I->nm < 2) {
    for (int k = 0; k < I->nm; ++k) {
      DR_TRY(use(I->m[k]));
      DR_TRY(job(I, k));
    }
    return DR_OK;
  }
  c->job = job;
  __atomic_store_n(&c->busy, I->nm - 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&c->mu);
  __atomic_add_fetch(&c->gen, 1, __ATOMIC_RELEASE); /* publishes job, busy and the step's arguments */
  pthread_cond_broadcast(&c->go);
  pthread_mutex_unlock(&c->mu);
  int rc = use(I->m[0]);
  if (rc == DR_OK) rc = job(I, 0);
  while (__atomic_load_n(&c->busy, __ATOMIC_ACQUIRE) > 0) crew_pause();
  if (rc != DR_OK) return rc;
  for (int k = 1; k < I->nm; ++k)
    if (c->rc[k] != DR_OK) return dr_fail(c->rc[k], "%s", c->msg[k]);
  return DR_OK;
}

int island_sync(island *I) {
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    CU(cudaStreamSynchronize(I->m[k]->stream));
  }
  return DR_OK;
}
