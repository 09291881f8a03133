/* error.c - the one recorded failure message (see error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char msg_[1024];
static _Thread_local int has_msg_;
static _Thread_local int agreed_;
static _Thread_local char where_[256];

int dr_fail(int code, const char *fmt, ...) {
  if (!has_msg_) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg_, sizeof msg_, fmt, ap);
    va_end(ap);
    has_msg_ = 1;
  }
  return code;
}

int dr_fail_at(int code, const char *file, int line, const char *call, const char *fmt, ...) {
  if (!has_msg_) {
    int k = snprintf(msg_, sizeof msg_, "%s failed: ", call);
    if (k < 0 || (size_t)k >= sizeof msg_) k = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg_ + k, sizeof msg_ - (size_t)k, fmt, ap);
    va_end(ap);
    snprintf(where_, sizeof where_, "%s:%d", file, line);
    has_msg_ = 1;
  }
  return code;
}

int dr_fail_place(int code, const char *file, int line, const char *fmt, ...) {
  if (!has_msg_) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg_, sizeof msg_, fmt, ap);
    va_end(ap);
    snprintf(where_, sizeof where_, "%s:%d", file, line);
    has_msg_ = 1;
  }
  return code;
}

const char *dr_message(void) { return has_msg_ ? msg_ : "unknown error"; }
const char *dr_where(void) { return has_msg_ ? where_ : ""; }

void dr_clear(void) {
  has_msg_ = 0;
  agreed_ = 0;
  msg_[0] = 0;
  where_[0] = 0;
}

void dr_mark_agreed(void) { agreed_ = 1; }
int dr_agreed(void) { return agreed_; }

void *dr_malloc(size_t bytes, const char *what) {
  if (bytes == 0) return NULL;
  void *p = malloc(bytes);
  if (!p) dr_fail(DR_ENOMEM, "out of host memory: %s needs %.1f MiB", what, bytes / 1048576.0);
  return p;
}

void *dr_calloc(size_t n, size_t size, const char *what) {
  if (n == 0 || size == 0) return NULL;
  void *p = calloc(n, size);
  if (!p) dr_fail(DR_ENOMEM, "out of host memory: %s needs %.1f MiB", what, (double)n * size / 1048576.0);
  return p;
}
