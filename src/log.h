/* log.h - messages for the person watching a run: rank 0 only, on stderr, one line each. */
#ifndef DRIFT_LOG_H
#define DRIFT_LOG_H

void log_set_rank(int rank);
void log_set_quiet(int quiet);
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* DRIFT_TRACE=1 in the environment (settings.h): one line per host-side event, from every rank
 * and thread, on stderr, stamped with the milliseconds since the first trace line and the rank.
 * For finding where the host's time goes; costs one load of a flag otherwise. */
void log_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
