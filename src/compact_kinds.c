/* compact_kinds.c - the table of distinct particle kinds of compact storage (compact_kinds.h). */
#include "compact_kinds.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

/* Kinds are equal where their bits are (a float mass compares as its bits: -0 and NaN included). */
static int same(const compact_kind *a, const compact_kind *b) { return memcmp(a, b, sizeof *a) == 0; }

static uint64_t hash(const compact_kind *k) {
  unsigned char b[sizeof *k];
  memcpy(b, k, sizeof b);
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
  for (size_t i = 0; i < sizeof b; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

/* The slot of k: where its index is, or the empty slot where it would go. */
static size_t probe(const compact_kinds *t, const compact_kind *k) {
  size_t s = (size_t)hash(k) & (t->slots - 1);
  while (t->slot[s] && !same(&t->kind[t->slot[s] - 1], k)) s = (s + 1) & (t->slots - 1);
  return s;
}

/* Room for one more kind: the array and, at half full, the slots doubled and refilled. */
static int grow(compact_kinds *t) {
  if (t->n == t->cap) {
    const size_t cap = t->cap ? 2 * t->cap : 64;
    compact_kind *k = realloc(t->kind, cap * sizeof *k);
    if (!k) return dr_fail(DR_ENOMEM, "out of host memory for the compact storage's %zu particle kinds", cap);
    t->kind = k;
    t->cap = cap;
  }
  if (2 * (t->n + 1) <= t->slots) return DR_OK;
  const size_t slots = t->slots ? 2 * t->slots : 128;
  uint32_t *old = t->slot;
  const size_t old_slots = t->slots;
  t->slot = calloc(slots, sizeof *t->slot);
  if (!t->slot) {
    t->slot = old;
    return dr_fail(DR_ENOMEM, "out of host memory for the compact storage's particle kinds");
  }
  t->slots = slots;
  for (size_t s = 0; s < old_slots; ++s)
    if (old[s]) t->slot[probe(t, &t->kind[old[s] - 1])] = old[s];
  free(old);
  return DR_OK;
}

int compact_kinds_index(compact_kinds *t, const compact_kind *k, uint32_t *index) {
  if (t->n > 0 && same(&t->kind[t->last], k)) {
    *index = t->last;
    return DR_OK;
  }
  if (t->slots > 0) {
    const size_t s = probe(t, k);
    if (t->slot[s]) {
      *index = t->last = t->slot[s] - 1;
      return DR_OK;
    }
  }
  if (t->n >= COMPACT_KINDS_MAX)
    return dr_fail(DR_EINPUT,
                   "parallel.storage \"compact\": more than %d distinct particle kinds (mass, volume, material, body) "
                   "on one device; a body's particles share one, so the scene's bodies and materials give more than "
                   "the record's 16 bits hold: use \"storage\": \"float\"",
                   COMPACT_KINDS_MAX);
  DR_TRY(grow(t));
  t->kind[t->n] = *k;
  t->slot[probe(t, k)] = (uint32_t)t->n + 1;
  *index = t->last = (uint32_t)t->n++;
  return DR_OK;
}

void compact_kinds_free(compact_kinds *t) {
  free(t->kind);
  free(t->slot);
  memset(t, 0, sizeof *t);
}
