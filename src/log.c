/* log.c - see log.h. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>

static int rank_, quiet_;

void log_set_rank(int rank) { rank_ = rank; }
void log_set_quiet(int quiet) { quiet_ = quiet; }

void log_info(const char *fmt, ...) {
  if (rank_ != 0 || quiet_) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
}
