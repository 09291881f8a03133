/* fill_fs.h - the full-disk tests' filler: what another file written meanwhile would do. */
#ifndef DRIFT_TESTS_FILL_FS_H
#define DRIFT_TESTS_FILL_FS_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* Fills dir's filesystem with dir/filler until it has no room left, down to the last page. */
static inline void fill_filesystem(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/filler", dir);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0, "cannot create %s: %s", path, strerror(errno));
  if (fd < 0) return;
  static char block[65536];
  memset(block, 0x33, sizeof block);
  for (size_t size = sizeof block; size > 0;)
    if (write(fd, block, size) < 0) size /= 2;
  close(fd);
}

#endif
