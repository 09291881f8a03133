/* run_tool.h - the validation tools' tests run a tool (drift_front, drift_probe) as users do and
 * read what it prints. */
#ifndef DRIFT_TESTS_RUN_TOOL_H
#define DRIFT_TESTS_RUN_TOOL_H

#include <stdio.h>
#include <sys/wait.h>

/* Runs CMD, returns its exit status, its stdout in out (up to len bytes). */
static int run_tool(const char *cmd, char *out, size_t len) {
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t n = fread(out, 1, len - 1, p);
  out[n] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
