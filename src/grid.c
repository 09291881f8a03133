/* grid.c - host hash table of block codes (see grid.h). Linear probing on a mixed code. */
#include "grid.h"

#include <stdlib.h>

#include "error.h"
#include "memsizes.h"
#include "memtally.h"
#include "rng.h"

int grid_table_reset(block_table *t, size_t n) {
  const size_t cap = mem_table_capacity(n);
  if (cap > t->cap) {
    memtally_free(t->keys);
    memtally_free(t->vals);
    t->keys = NULL;
    t->vals = NULL;
    t->cap = 0;
    if (!(t->keys = memtally_malloc(MT_MAPPING, sizeof *t->keys * cap, "block hash table"))) return DR_ENOMEM;
    if (!(t->vals = memtally_malloc(MT_MAPPING, sizeof *t->vals * cap, "block hash table"))) return DR_ENOMEM;
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
  memtally_free(t->keys);
  memtally_free(t->vals);
  t->keys = NULL;
  t->vals = NULL;
  t->cap = t->count = 0;
}
