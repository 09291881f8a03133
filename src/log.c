/* log.c - see log.h. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "settings.h"

static int rank_, quiet_;

void log_set_rank(int rank) { rank_ = rank; }
void log_set_quiet(int quiet) { quiet_ = quiet; }

void log_info(const char *fmt, ...) {
  if (rank_ != 0 || quiet_) return;
  /* one write per line: the frame writer's thread logs too (writer.h), and under mpirun the
   * ranks' stderr meet in one stream, where two writes of a line could take another rank's
   * line between them */
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (k < 0) return;
  if (k > (int)sizeof line - 2) k = (int)sizeof line - 2;
  line[k] = '\n';
  line[k + 1] = 0;
  fputs(line, stderr);
  fflush(stderr);
}

static double trace_t0_ = -1.0;

void log_trace(const char *fmt, ...) {
  if (!settings()->trace) return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const double ms = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  if (trace_t0_ < 0) trace_t0_ = ms;
  char line[512];
  int k = snprintf(line, sizeof line, "trace %10.3f ms r%d: ", ms - trace_t0_, rank_);
  if (k < 0 || k >= (int)sizeof line) k = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + k, sizeof line - (size_t)k, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s\n", line); /* one call: lines of threads and ranks do not interleave */
}
