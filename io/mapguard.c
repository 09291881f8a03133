/* mapguard.c - copies into a file's mapping that may fault for want of space (see mapguard.h).
 *
 * Invariants: a thread's guard is armed only while its memcpy runs, over exactly the bytes it
 * stores; the handler leaves (siglongjmp) only for a fault inside the armed range of the thread
 * that faulted (SIGBUS from a store is delivered to that thread), and hands every other SIGBUS to
 * the action installed before it. */
#define _GNU_SOURCE
#include "mapguard.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

typedef struct guard {
  sigjmp_buf at;
  const char *lo, *hi;
  volatile sig_atomic_t armed;
} guard;

static _Thread_local guard mine;
static struct sigaction before;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int install_rc = -1;

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
  const char *a = si ? (const char *)si->si_addr : NULL;
  if (mine.armed && a >= mine.lo && a < mine.hi) {
    mine.armed = 0;
    siglongjmp(mine.at, 1);
  }
  /* not a store of a guarded copy: as the action before would */
  if ((before.sa_flags & SA_SIGINFO) && before.sa_sigaction) {
    before.sa_sigaction(sig, si, uc);
    return;
  }
  if (!(before.sa_flags & SA_SIGINFO) && before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
    before.sa_handler(sig);
    return;
  }
  /* the default (a fault's SIGBUS cannot be ignored): the faulting store runs again on return and
   * ends the process as it would have without this handler */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  (void)sigaction(sig, &dfl, NULL);
}

static void install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  install_rc = sigaction(SIGBUS, &sa, &before);
}

int mapguard_init(void) {
  (void)pthread_once(&once, install);
  return install_rc;
}

int mapguard_copy(void *dst, const void *src, size_t len) {
  /* the mask saved (1) and restored by siglongjmp: SIGBUS is not left blocked */
  if (sigsetjmp(mine.at, 1)) return -1;
  mine.lo = dst;
  mine.hi = (const char *)dst + len;
  atomic_signal_fence(memory_order_seq_cst);
  mine.armed = 1;
  atomic_signal_fence(memory_order_seq_cst);
  memcpy(dst, src, len);
  atomic_signal_fence(memory_order_seq_cst);
  mine.armed = 0;
  return 0;
}
