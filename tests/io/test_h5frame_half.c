/* test_h5frame_half - a frame at output.precision "half" written by h5frame_put over several
 * OpenMP threads holds, bit for bit, what one call of each single-thread encoder (pack16.h) gives
 * for the whole field: every floating field (the positions' fixed point, binary16, bf16) with
 * values of every class (normal, subnormal, zero of both signs, beyond each range, inf, NaN),
 * read back raw (the file's own 16-bit types, no conversion), and the integer fields unchanged
 * (material and owner in their 8 bits: one material, one rank).
 * Each case has a field larger than one block of the conversion buffer and a ragged last block
 * and chunk: a 64 KiB buffer (many blocks, a write overlapping each conversion) with 5,003
 * particles by teams of 1, 2 and 3 threads, and the run's H5FRAME_PACK_BYTES with 470,011
 * particles (F's 4.2M values: two blocks) by teams of 1 and 2. Every case into the disk (/tmp:
 * through the buffer) and into memory (/dev/shm where it is a tmpfs: each field encoded by the
 * team into a mapping of its rows, the pieces' ends inside the fields).
 *
 * With --speed N DIR it measures instead: h5frame_put of N particles of the default fields into
 * DIR at float and at half, by a team of one and of omp_get_max_threads() - 1, the best and the
 * median of 11, as ms and GB/s of the file's bytes (nothing checked). */
#define _XOPEN_SOURCE 700
#include <hdf5.h>
#include <mpi.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "check.h"
#include "error.h"
#include "h5frame.h"

static const char *const materials[] = {"sand"};
enum { FLOAT_FIELDS = 7 };
static const int float_field[FLOAT_FIELDS] = {H5FRAME_POSITION, H5FRAME_VELOCITY, H5FRAME_LOGJP, H5FRAME_J,
                                              H5FRAME_F, H5FRAME_STRESS, H5FRAME_C};
static const double extent = 2.5; /* m: the positions' fixed point */

typedef struct frame_arrays {
  size_t n;
  float *f[H5FRAME_FIELDS]; /* the floating fields' arrays (NULL for the integer ones) */
  uint64_t *id;
  int32_t *material, *owner;
} frame_arrays;

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint32_t next_u32(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 0x2545f4914f6cdd1du) >> 32);
}

static float f_of(uint32_t b) {
  float x;
  memcpy(&x, &b, sizeof x);
  return x;
}

/* One value of a floating field: mostly in the field's usual range, one in 16 of a special class. */
static float value(int q) {
  const uint32_t r = next_u32(), sign = r & 0x80000000u;
  if (q == H5FRAME_POSITION && (r & 0xf) != 0)
    return (float)((double)(r >> 4) / (double)(1u << 28) * 2 * extent - extent);
  switch (r & 0xf) {
  case 0: return f_of(sign | (next_u32() & 0x7fffffffu)); /* any bit pattern: NaN, inf, huge, tiny */
  case 1: return f_of(sign | 0x7f800000u);                /* inf */
  case 2: return f_of(sign | (next_u32() & 0x007fffffu)); /* float subnormal (binary16's 0) */
  case 3: return f_of(sign);                              /* signed zero */
  case 4: return f_of(sign | (0x33000000u + (next_u32() & 0x0bffffffu))); /* binary16's subnormals */
  case 5: return f_of(sign | (0x477fe000u + (next_u32() & 0x3fffu)));    /* around 65504 */
  default: return f_of(sign | (0x30000000u + (next_u32() & 0x1fffffffu))); /* 2^-31 .. 2^32 */
  }
}

static int alloc_frame(frame_arrays *a, size_t n) {
  memset(a, 0, sizeof *a);
  a->n = n;
  for (int k = 0; k < FLOAT_FIELDS; ++k) {
    const int q = float_field[k];
    if (!(a->f[q] = malloc(n * (size_t)h5frame_field_columns[q] * sizeof(float)))) return -1;
    for (size_t i = 0; i < n * (size_t)h5frame_field_columns[q]; ++i) a->f[q][i] = value(q);
  }
  a->id = malloc(n * sizeof *a->id);
  a->material = malloc(n * sizeof *a->material);
  a->owner = malloc(n * sizeof *a->owner);
  if (!a->id || !a->material || !a->owner) return -1;
  for (size_t i = 0; i < n; ++i) {
    a->id[i] = ((uint64_t)1 << 40) + 7u * i;
    a->material[i] = (int32_t)(i % 5);
    a->owner[i] = (int32_t)(i % 3);
  }
  return 0;
}

static void free_frame(frame_arrays *a) {
  for (int q = 0; q < H5FRAME_FIELDS; ++q) free(a->f[q]);
  free(a->id), free(a->material), free(a->owner);
}

static h5frame_data data_of(const frame_arrays *a) {
  return (h5frame_data){.n = a->n, .position = a->f[H5FRAME_POSITION], .velocity = a->f[H5FRAME_VELOCITY],
                        .id = a->id, .material = a->material, .owner = a->owner, .logjp = a->f[H5FRAME_LOGJP],
                        .J = a->f[H5FRAME_J], .F = a->f[H5FRAME_F], .stress = a->f[H5FRAME_STRESS],
                        .C = a->f[H5FRAME_C]};
}

static h5frame_meta meta_of(int frame, unsigned fields, int precision) {
  return (h5frame_meta){.frame = frame, .time = 0.5, .dx = 0.01, .n_materials = 1, .material_names = materials,
                        .fields = fields, .precision = precision, .extent = extent};
}

/* Rows first .. first + n - 1 of d. */
static h5frame_data rows_of(const h5frame_data *d, size_t first, size_t n) {
  return (h5frame_data){.n = n, .position = d->position + 3 * first, .velocity = d->velocity + 3 * first,
                        .id = d->id + first, .material = d->material + first, .owner = d->owner + first,
                        .logjp = d->logjp + first, .J = d->J + first, .F = d->F + 9 * first,
                        .stress = d->stress + 6 * first, .C = d->C + 9 * first};
}

/* Writes frame `frame` of a into dir through a buffer of pack_bytes, converted by a team of
 * `threads` (h5frame_put's team is one fewer than omp_get_max_threads(), at least one); chunk > 0:
 * put chunk rows at a time, last chunk first (as sim_output.c's writer puts a frame chunk by
 * chunk, in any order: each row lands at its own offset). */
static int write_frame(const char *dir, int frame, unsigned fields, int precision, const frame_arrays *a, void *pack,
                       size_t pack_bytes, int threads, size_t chunk, double *put_s) {
  h5frame_file f;
  const h5frame_meta meta = meta_of(frame, fields, precision);
  const h5frame_data d = data_of(a);
  omp_set_num_threads(threads + 1);
  int st = h5frame_begin(MPI_COMM_WORLD, dir, &meta, a->n, &f);
  if (st) return st;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int put = 0;
  if (chunk == 0) put = h5frame_put(&f, 0, &d, pack, pack_bytes);
  for (size_t k = chunk ? (a->n + chunk - 1) / chunk : 0; k-- > 0 && put == 0;) {
    const size_t first = k * chunk, n = a->n - first < chunk ? a->n - first : chunk;
    const h5frame_data part = rows_of(&d, first, n);
    put = h5frame_put(&f, first, &part, pack, pack_bytes);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (put_s) *put_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  return h5frame_end(MPI_COMM_WORLD, &f, put);
}

/* Dataset name of file's raw bytes into out (elems values of size bytes); -1 when it cannot. */
static int read_raw(hid_t file, const char *name, size_t size, size_t elems, void *out) {
  hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
  CHECK(d >= 0, "dataset %s missing", name);
  if (d < 0) return -1;
  hid_t t = H5Dget_type(d), s = H5Dget_space(d);
  const hssize_t got = H5Sget_simple_extent_npoints(s);
  CHECK(H5Tget_size(t) == size, "%s: %zu bytes a value, want %zu", name, H5Tget_size(t), size);
  CHECK(got == (hssize_t)elems, "%s: %lld values, want %zu", name, (long long)got, elems);
  int rc = -1;
  if (H5Tget_size(t) == size && got == (hssize_t)elems)
    rc = elems == 0 || H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) >= 0 ? 0 : -1;
  CHECK(rc == 0, "H5Dread of %s failed", name);
  H5Tclose(t), H5Sclose(s), H5Dclose(d);
  return rc;
}

/* The whole field's encoding by one call of its single-thread encoder. */
static void encode_whole(int q, const float *in, uint16_t *out, size_t n) {
  pack16_fixed fx;
  const h5frame_layout lay = h5frame_layout_of(0, H5FRAME_HALF, 1, 1);
  switch (h5frame_encoding_of(&lay, q)) {
  case H5FRAME_ENC_HALF: pack16_half_soft(in, out, n); break;
  case H5FRAME_ENC_BF16: pack16_bf16(in, out, n); break;
  case H5FRAME_ENC_FIXED:
    CHECK(pack16_fixed_for(extent, &fx) == 0, "no fixed point for %g m", extent);
    pack16_fixed_encode(&fx, in, out, n);
    break;
  default: CHECK(0, "field %s is not a 16-bit one", h5frame_field_names[q]);
  }
}

/* Whether got[i] == want[i] for every i < n. */
static int same_u8(const uint8_t *got, const int32_t *want, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if ((int32_t)got[i] != want[i]) return 0;
  return 1;
}

/* Writes every field of a at half through pack_bytes on threads threads and checks the file. */
static void check_case(const char *dir, const frame_arrays *a, size_t pack_bytes, int threads, size_t chunk) {
  unsigned all = 0;
  for (int q = 0; q < H5FRAME_FIELDS; ++q) all |= H5FRAME_BIT(q);
  void *pack = malloc(pack_bytes);
  uint16_t *want = malloc(a->n * 9 * sizeof *want), *got = malloc(a->n * 9 * sizeof *got);
  uint64_t *ids = malloc(a->n * sizeof *ids);
  uint8_t *ints = malloc(a->n);
  if (!pack || !want || !got || !ids || !ints) {
    CHECK(0, "out of memory");
    goto done;
  }
  const int st = write_frame(dir, 0, all, H5FRAME_HALF, a, pack, pack_bytes, threads, chunk, NULL);
  CHECK(st == 0, "%zu particles, buffer %zu bytes, %d threads: h5frame write failed (%d): %s", a->n, pack_bytes, threads,
        st, dr_message());
  if (st) goto done;
  char path[4096];
  h5frame_path(dir, 0, path, sizeof path);
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  CHECK(file >= 0, "cannot open %s", path);
  if (file < 0) goto done;
  for (int k = 0; k < FLOAT_FIELDS; ++k) {
    const int q = float_field[k];
    const size_t values = a->n * (size_t)h5frame_field_columns[q];
    char name[64];
    snprintf(name, sizeof name, "/particles/%s", h5frame_field_names[q]);
    encode_whole(q, a->f[q], want, values);
    if (read_raw(file, name, 2, values, got)) continue;
    size_t bad = 0;
    while (bad < values && got[bad] == want[bad]) ++bad;
    CHECK(bad == values, "%zu particles, buffer %zu bytes, %d threads: %s value %zu (of %zu) is 0x%04x, the encoder "
          "gives 0x%04x for %a", a->n, pack_bytes, threads, name, bad, values, bad < values ? got[bad] : 0,
          bad < values ? want[bad] : 0, bad < values ? (double)a->f[q][bad] : 0.0);
  }
  if (!read_raw(file, "/particles/id", 8, a->n, ids))
    CHECK(!memcmp(ids, a->id, a->n * sizeof *ids), "%d threads: ids differ", threads);
  if (!read_raw(file, "/particles/material", 1, a->n, ints))
    CHECK(same_u8(ints, a->material, a->n), "%d threads: materials differ", threads);
  if (!read_raw(file, "/particles/owner", 1, a->n, ints))
    CHECK(same_u8(ints, a->owner, a->n), "%d threads: owners differ", threads);
  H5Fclose(file);
done:
  free(pack), free(want), free(got), free(ids), free(ints);
}

/* Removes frames 0 .. count - 1 from dir. */
static void remove_frames(const char *dir, int count) {
  for (int k = 0; k < count; ++k) {
    char path[4096];
    h5frame_path(dir, k, path, sizeof path);
    unlink(path);
  }
}

/* The checks in a new folder under base; the large case only where base has the room for it
 * (a frame of 470,011 particles and the one it replaces: 70 MB). */
static void checks_in(const char *base) {
  struct statfs sf;
  const int room = statfs(base, &sf) == 0 && (double)sf.f_bavail * (double)sf.f_bsize >= 160.0 * 1048576.0;
  char dir[256];
  snprintf(dir, sizeof dir, "%s/drift_h5frame_half_XXXXXX", base);
  if (!mkdtemp(dir)) {
    CHECK(0, "mkdtemp under %s failed", base);
    return;
  }
  printf("frames into %s\n", dir);
  frame_arrays a;
  if (alloc_frame(&a, 5003) == 0)
    for (int t = 1; t <= 3; ++t) {
      check_case(dir, &a, (size_t)64 << 10, t, 0);
      check_case(dir, &a, (size_t)64 << 10, t, 1237); /* chunk by chunk: the same file */
    }
  else CHECK(0, "out of memory");
  free_frame(&a);
  if (!room) printf("%s has less than 160 MiB free: the case of 470,011 particles is not run there\n", base);
  else if (alloc_frame(&a, 470011) == 0) {
    CHECK(a.n * 9 > H5FRAME_PACK_BYTES / 4, "F fits one block of H5FRAME_PACK_BYTES: the case checks no block boundary");
    for (int t = 1; t <= 2; ++t) check_case(dir, &a, H5FRAME_PACK_BYTES, t, 0);
    check_case(dir, &a, H5FRAME_PACK_BYTES, 2, 200003);
  } else CHECK(0, "out of memory");
  free_frame(&a);
  /* a buffer too small for two halves of one row of F is refused, naming the need */
  h5frame_file f;
  frame_arrays small;
  if (alloc_frame(&small, 4) == 0) {
    const h5frame_meta meta = meta_of(1, H5FRAME_DEFAULT_FIELDS | H5FRAME_BIT(H5FRAME_F), H5FRAME_HALF);
    const h5frame_data d = data_of(&small);
    uint16_t tiny[17];
    if (h5frame_begin(MPI_COMM_WORLD, dir, &meta, small.n, &f) == 0) {
      const int put = h5frame_put(&f, 0, &d, tiny, sizeof tiny);
      CHECK(put == DR_EINTERNAL && strstr(dr_message(), "buffer"), "a 34-byte buffer: status %d, \"%s\"", put,
            dr_message());
      h5frame_end(MPI_COMM_WORLD, &f, put);
    } else CHECK(0, "h5frame_begin failed: %s", dr_message());
  }
  free_frame(&small);
  remove_frames(dir, 2);
  CHECK(rmdir(dir) == 0, "%s: not empty at the end", dir);
}

/* Into the disk (/tmp: the converted fields through the buffer and write()) and, where /dev/shm
 * is a tmpfs, into memory (encoded by the team straight into a mapping of the file). */
static int checks(void) {
  checks_in("/tmp");
  struct statfs sf;
  if (statfs("/dev/shm", &sf) == 0 && sf.f_type == TMPFS_MAGIC) checks_in("/dev/shm");
  else printf("/dev/shm is not a tmpfs here: the mapped path is not checked\n");
  return failures_ ? 1 : 0;
}

static int by_value(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { SPEED_REPS = 11 };

static int speed(size_t n, const char *dir) {
  frame_arrays a;
  void *pack = malloc(H5FRAME_PACK_BYTES);
  if (!pack || alloc_frame(&a, n)) return fprintf(stderr, "out of memory\n"), 1;
  const int threads[2] = {1, omp_get_max_threads() > 1 ? omp_get_max_threads() - 1 : 1};
  h5frame_layout lay[H5FRAME_PRECISIONS];
  for (int precision = 0; precision < H5FRAME_PRECISIONS; ++precision)
    lay[precision] = h5frame_layout_of(H5FRAME_DEFAULT_FIELDS, precision, 1, 1);
  printf("%zu particles, default fields: %.1f MiB at float, %.1f at half; h5frame_put, best and median of %d "
         "(the cases interleaved)\n", n, (double)n * h5frame_particle_bytes(&lay[H5FRAME_FLOAT]) / 1048576.0,
         (double)n * h5frame_particle_bytes(&lay[H5FRAME_HALF]) / 1048576.0, SPEED_REPS);
  double s[H5FRAME_PRECISIONS][2][SPEED_REPS];
  for (int rep = 0; rep < SPEED_REPS; ++rep)
    for (int precision = 0; precision < H5FRAME_PRECISIONS; ++precision)
      for (int k = 0; k < 2; ++k)
        if (write_frame(dir, 0, H5FRAME_DEFAULT_FIELDS, precision, &a, pack, H5FRAME_PACK_BYTES, threads[k], 0,
                        &s[precision][k][rep]))
          return fprintf(stderr, "%s\n", dr_message()), 1;
  for (int precision = 0; precision < H5FRAME_PRECISIONS; ++precision)
    for (int k = 0; k < 2; ++k) {
      qsort(s[precision][k], SPEED_REPS, sizeof(double), by_value);
      const double bytes = (double)n * h5frame_particle_bytes(&lay[precision]);
      const double best = s[precision][k][0], median = s[precision][k][SPEED_REPS / 2];
      printf("%-5s %2d thread%s %8.2f ms %8.2f ms   %5.2f %5.2f GB/s of file bytes\n", h5frame_precision_names[precision],
             threads[k], threads[k] > 1 ? "s" : " ", 1e3 * best, 1e3 * median, bytes / best * 1e-9, bytes / median * 1e-9);
    }
  remove_frames(dir, 1);
  free_frame(&a);
  free(pack);
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rc;
  if (argc == 4 && !strcmp(argv[1], "--speed")) rc = speed((size_t)strtoull(argv[2], NULL, 10), argv[3]);
  else rc = checks();
  MPI_Finalize();
  return rc;
}
