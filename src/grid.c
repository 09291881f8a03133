/* grid.c - host hash table of block codes (see grid.h). Linear probing on a mixed code. */
#include "grid.h"

#include <stdlib.h>

#include "error.h"
#include "rng.h"

int grid_table_reset(block_table *t, size_t n) {
  size_t cap = 64;
  while (cap < 2 * n) cap <<= 1;
  if (cap > t->cap) {
    free(t->keys);
    free(t->vals);
    t->keys = NULL;
    t->vals = NULL;
    t->cap = 0;
    DR_ALLOC(t->keys, cap, "block hash table");
    DR_ALLOC(t->vals, cap, "block hash table");
    t->cap = cap;
  }
  for (size_t i = 0; i < t->cap; ++i) t->keys[i] = GRID_EMPTY;
  t->count = 0;
  return DR_OK;
}

int32_t grid_table_insert(block_table *t, uint64_t code, int32_t val) {
  size_t mask = t->cap - 1;
  for (size_t i = rng_mix(code) & mask;; i = (i + 1) & mask) {
    if (t->keys[i] == code) return t->vals[i];
    if (t->keys[i] == GRID_EMPTY) {
      t->keys[i] = code;
      t->vals[i] = val;
      ++t->count;
      return val;
    }
  }
}

int32_t grid_table_find(const block_table *t, uint64_t code) {
  if (!t->cap) return -1;
  size_t mask = t->cap - 1;
  for (size_t i = rng_mix(code) & mask;; i = (i + 1) & mask) {
    if (t->keys[i] == code) return t->vals[i];
    if (t->keys[i] == GRID_EMPTY) return -1;
  }
}

void grid_table_free(block_table *t) {
  free(t->keys);
  free(t->vals);
  t->keys = NULL;
  t->vals = NULL;
  t->cap = t->count = 0;
}
