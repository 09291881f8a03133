/* checkpoint_format.h - what io/checkpoint.c (writing) and io/checkpoint_read.c (reading) share
 * of the checkpoint file (io/ only): the two tables that drive it (PARTICLE_ATTRIBUTES, particles.h:
 * one dataset per particle attribute; STATE: one root attribute per field of ckpt_state), the
 * hashes of the state and of the rows, and the listing of a folder's numbered files. */
#ifndef DRIFT_IO_CHECKPOINT_FORMAT_H
#define DRIFT_IO_CHECKPOINT_FORMAT_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "checkpoint.h"

enum kind { K_F32, K_U64, K_I32, K_F64 };

static inline hid_t file_type(int kind) {
  return kind == K_F32 ? H5T_IEEE_F32LE : kind == K_U64 ? H5T_STD_U64LE : kind == K_I32 ? H5T_STD_I32LE : H5T_IEEE_F64LE;
}
static inline hid_t mem_type(int kind) {
  return kind == K_F32 ? H5T_NATIVE_FLOAT : kind == K_U64 ? H5T_NATIVE_UINT64 : kind == K_I32 ? H5T_NATIVE_INT32 : H5T_NATIVE_DOUBLE;
}
static inline const char *kind_name(int kind) {
  return kind == K_F32 ? "float32" : kind == K_U64 ? "uint64" : kind == K_I32 ? "int32" : "float64";
}

/* One dataset per particle attribute. */
typedef struct pattr {
  const char *name;
  size_t offset; /* of the array pointer in struct particles */
  int kind, k;   /* element kind, values per particle */
  size_t size;   /* bytes per value */
} pattr;

#define KIND_OF_(type) _Generic((type *)0, float *: K_F32, uint64_t *: K_U64, int32_t *: K_I32)
#define PATTR_ROW_(field, type, k, what) {#field, offsetof(particles, field), KIND_OF_(type), k, sizeof(type)},
static const pattr PATTRS[] = {PARTICLE_ATTRIBUTES(PATTR_ROW_)};
#undef PATTR_ROW_
enum { N_PATTRS = sizeof PATTRS / sizeof PATTRS[0] };

static inline void *pattr_data(const particles *p, const pattr *a) {
  void *ptr;
  memcpy(&ptr, (const char *)p + a->offset, sizeof ptr);
  return ptr;
}

/* One root attribute per field of ckpt_state. */
typedef struct sattr {
  const char *name;
  size_t offset;
  int kind; /* K_I32 (int), K_U64 (uint64_t), K_F64 (double) */
} sattr;

#define SATTR_(field, kind) {#field, offsetof(ckpt_state, field), kind}
static const sattr STATE[] = {SATTR_(frame, K_I32),    SATTR_(step_in_frame, K_I32), SATTR_(time, K_F64),
                              SATTR_(steps, K_U64),    SATTR_(rebuilds, K_U64),      SATTR_(last_dt, K_F64),
                              SATTR_(vmax, K_F64),     SATTR_(scene_hash, K_U64),    SATTR_(n_particles, K_U64),
                              SATTR_(ranks, K_I32),    SATTR_(emit_frame, K_I32),    SATTR_(n_sources, K_I32),
                              SATTR_(projected, K_I32)};
#undef SATTR_
enum { N_STATE = sizeof STATE / sizeof STATE[0] };

/* FNV-1a of len bytes: the scene text's hash (the root attribute scene_hash). */
uint64_t ckpt_bytes_hash(const void *bytes, size_t len);
/* The state's values in table order, each widened to 8 bytes, and the sources' counts: the
 * root attribute state_hash. */
uint64_t ckpt_state_hash(const ckpt_state *st);
/* The sum (mod 2^64) over p's particles [from, from + count), rows first_row on of the file, of
 * a hash of the row's index and its bytes in every attribute (the root attribute particle_sum). */
uint64_t ckpt_row_sum(const particles *p, size_t from, size_t count, uint64_t first_row);
/* Frame numbers of the files in dir named prefixNNNNNsuffix, newest first (allocates *frames). */
int ckpt_list_frames(const char *dir, const char *prefix, const char *suffix, int **frames, int *n);

#endif
