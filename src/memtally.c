/* memtally.c - the counted allocator (see memtally.h). */
#include "memtally.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

static _Atomic int64_t held_[MEMTALLY_PLACES][MT_KINDS];
static _Atomic int64_t total_[MEMTALLY_PLACES];
static _Atomic int64_t peak_[MEMTALLY_PLACES];

/* The header before each host block: its size and kind; 16 bytes keep malloc's alignment. */
typedef struct header {
  size_t bytes;
  int64_t kind;
} header;

const char *memtally_kind_name(int kind) {
  static const char *const names[MT_KINDS] = {"particles", "sort", "mapping", "grid", "transfer"};
  return kind >= 0 && kind < MT_KINDS ? names[kind] : "?";
}

void memtally_count(int place, int kind, int64_t bytes) {
  if (place < 0 || place >= MEMTALLY_PLACES || kind < 0 || kind >= MT_KINDS || bytes == 0) return;
  atomic_fetch_add_explicit(&held_[place][kind], bytes, memory_order_relaxed);
  const int64_t t = atomic_fetch_add_explicit(&total_[place], bytes, memory_order_relaxed) + bytes;
  int64_t p = atomic_load_explicit(&peak_[place], memory_order_relaxed);
  while (t > p && !atomic_compare_exchange_weak_explicit(&peak_[place], &p, t, memory_order_relaxed,
                                                         memory_order_relaxed)) {
  }
}

int64_t memtally_now(int place, int kind) {
  if (place < 0 || place >= MEMTALLY_PLACES) return 0;
  if (kind == MT_KINDS) return atomic_load(&total_[place]);
  return kind >= 0 && kind < MT_KINDS ? atomic_load(&held_[place][kind]) : 0;
}

int64_t memtally_peak(int place) { return place >= 0 && place < MEMTALLY_PLACES ? atomic_load(&peak_[place]) : 0; }

void memtally_reset_peaks(void) {
  for (int p = 0; p < MEMTALLY_PLACES; ++p) atomic_store(&peak_[p], atomic_load(&total_[p]));
}

void *memtally_malloc(int kind, size_t bytes, const char *what) {
  header *h = malloc(sizeof *h + bytes);
  if (!h) {
    dr_fail(DR_ENOMEM, "out of host memory: %s needs %.1f MiB", what, bytes / 1048576.0);
    return NULL;
  }
  h->bytes = bytes;
  h->kind = kind;
  memtally_count(MEMTALLY_HOST, kind, (int64_t)bytes);
  return h + 1;
}

void *memtally_calloc(int kind, size_t n, size_t size, const char *what) {
  if (size && n > (SIZE_MAX - sizeof(header)) / size) {
    dr_fail(DR_ENOMEM, "out of host memory: %s needs %zu x %zu bytes", what, n, size);
    return NULL;
  }
  void *p = memtally_malloc(kind, n * size, what);
  if (p) memset(p, 0, n * size);
  return p;
}

void *memtally_realloc(int kind, void *p, size_t bytes, const char *what) {
  if (!p) return memtally_malloc(kind, bytes, what);
  header *h = (header *)p - 1;
  const size_t old = h->bytes;
  const int old_kind = (int)h->kind;
  header *q = realloc(h, sizeof *q + bytes);
  if (!q) {
    dr_fail(DR_ENOMEM, "out of host memory: %s needs %.1f MiB", what, bytes / 1048576.0);
    return NULL;
  }
  q->bytes = bytes;
  q->kind = kind;
  memtally_count(MEMTALLY_HOST, old_kind, -(int64_t)old);
  memtally_count(MEMTALLY_HOST, kind, (int64_t)bytes);
  return q + 1;
}

void memtally_free(void *p) {
  if (!p) return;
  header *h = (header *)p - 1;
  memtally_count(MEMTALLY_HOST, (int)h->kind, -(int64_t)h->bytes);
  free(h);
}
