/* grid.h - the host side of the sparse block grid: an open-addressing hash table from 64-bit
 * block codes to dense block indices (physics/sparse.h has the code layout). Used by the CPU
 * reference backend; the CUDA backend has its own table on the device. */
#ifndef DRIFT_GRID_H
#define DRIFT_GRID_H

#include <stddef.h>
#include <stdint.h>

typedef struct block_table {
  size_t cap;      /* power of two, at least twice the entries */
  size_t count;
  uint64_t *keys;  /* GRID_EMPTY where free */
  int32_t *vals;
} block_table;

#define GRID_EMPTY UINT64_MAX

/* Empties the table and makes room for n entries (grows only; allocates). */
int grid_table_reset(block_table *t, size_t n);
/* Inserts code with value val if absent; returns the stored value either way. */
int32_t grid_table_insert(block_table *t, uint64_t code, int32_t val);
/* Value for code, or -1. */
int32_t grid_table_find(const block_table *t, uint64_t code);
void grid_table_free(block_table *t);

#endif
