/* mapguard.h - copies into a shared mapping of a file whose pages may not exist yet.
 *
 * A file in memory (tmpfs) takes a page at the first store into it; where the filesystem is full
 * that store raises SIGBUS instead of returning an error. mapguard_copy turns such a SIGBUS, raised
 * by its own stores, into a failed copy; any other SIGBUS goes to the handler that was there before
 * (MPI's, a sanitizer's, or the default: the process ends as it would have). */
#ifndef DRIFT_MAPGUARD_H
#define DRIFT_MAPGUARD_H

#include <stddef.h>

/* Installs the SIGBUS handler (once a process; later calls return at once). 0, or -1 with errno
 * (sigaction's). Thread-safe. */
int mapguard_init(void);

/* Copies len bytes from src to dst (dst in a shared mapping of a file); 0, or -1 where a store
 * into dst raised SIGBUS (the filesystem could not give the page: full), the bytes before it
 * copied. Any thread, mapguard_init called first; one copy at a time a thread. */
int mapguard_copy(void *dst, const void *src, size_t len);

#endif
