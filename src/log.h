/* log.h - messages for the person watching a run: rank 0 only, on stderr, one line each. */
#ifndef DRIFT_LOG_H
#define DRIFT_LOG_H

void log_set_rank(int rank);
void log_set_quiet(int quiet);
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
