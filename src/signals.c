/* signals.c - see signals.h. */
#define _POSIX_C_SOURCE 200809L /* sigaction */
#include "signals.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

static volatile sig_atomic_t got_;

static void on_signal(int sig) {
  if (sig == SIGINT && got_ == SIGINT) { /* Ctrl-C twice: stop now, as the user asks */
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
    return;
  }
  if (!got_) got_ = sig;
}

int signals_install(void) {
  static const int sigs[] = {SIGTERM, SIGINT, SIGUSR1};
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART; /* file and MPI calls in progress go on */
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; ++i)
    if (sigaction(sigs[i], &sa, NULL) != 0)
      return dr_fail_at(DR_EINTERNAL, __FILE__, __LINE__, "sigaction", "%s: %s", signals_name(sigs[i]), strerror(errno));
  return DR_OK;
}

int signals_pending(void) { return got_; }

const char *signals_name(int sig) {
  static char buf[32];
  switch (sig) {
  case SIGTERM: return "SIGTERM";
  case SIGINT: return "SIGINT";
  case SIGUSR1: return "SIGUSR1";
  default: snprintf(buf, sizeof buf, "signal %d", sig); return buf;
  }
}
