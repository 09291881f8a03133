/* h5frame.c - one frame of particles in one HDF5 file, written by all ranks (see h5frame.h).
 *
 * The write goes as h5rows.h describes: h5frame_begin in the main thread (the counts, rank 0's
 * free-space check and the file's skeleton, the offsets shared), h5frame_put in the run's writer
 * thread (this rank's rows by pwrite, no MPI, no HDF5: the fields stored as in memory straight
 * from the caller's arrays, no copy and no conversion; the converted ones (precision half's
 * floating fields by pack16.h's encoders, material and owner narrowed) into a file in memory
 * encoded over the cores into a mapping of their rows (put_mapped_fields), elsewhere a
 * block at a time into one half of the caller's buffer (bounded and reused: h5frame_pack_bytes)
 * while the block before is written from the other half, put_converted below), h5frame_end in the
 * main thread (agreed, renamed; after a failure the frame does not exist, not even an older
 * version of it). Nothing is synced: a frame goes to the page cache at the speed of memory, as
 * any file a program writes; checkpoints, which a restart needs, are synced (checkpoint.c).
 * Measured: collective MPI-IO from a writer thread crawled while the main thread's steps used
 * MPI (two ranks on one H200: 0.48 GB/s against 2.42 written between the steps, in the
 * decisions table of docs/performance.md). */
#define _POSIX_C_SOURCE 200809L
#include "h5frame.h"

#include <hdf5.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "error.h"
#include "h5util.h"

void h5frame_path(const char *dir, int frame, char *out, size_t len) {
  h5util_numbered_path(dir, "frame", frame, out, len);
}

/* A field's type in the file (little-endian) and in memory, stored as in memory. */
typedef struct field_type {
  hid_t file, mem;
} field_type;

/* Field f's types (a function: the predefined types are the library's variables, set once it is
 * open). */
static field_type field_type_of(int f) {
  switch (f) {
  case H5FRAME_ID: return (field_type){H5T_STD_U64LE, H5T_NATIVE_UINT64};
  case H5FRAME_MATERIAL:
  case H5FRAME_OWNER: return (field_type){H5T_STD_I32LE, H5T_NATIVE_INT32};
  default: return (field_type){H5T_IEEE_F32LE, H5T_NATIVE_FLOAT};
  }
}

/* A 16-bit little-endian HDF5 float: sign bit 15, the exponent above the mantissa (H5Tset_fields
 * while the type is still 32 bits wide, then the precision and size: HDF5's order). */
static hid_t float16_type(size_t esize, size_t msize, size_t bias, H5T_norm_t norm) {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  if (t < 0) return t;
  if (H5Tset_fields(t, 15, msize, esize, 0, msize) < 0 || H5Tset_precision(t, 16) < 0 || H5Tset_size(t, 2) < 0 ||
      H5Tset_ebias(t, bias) < 0 || H5Tset_norm(t, norm) < 0) {
    H5Tclose(t);
    return H5I_INVALID_HID;
  }
  return t;
}

/* The file's types of the 16-bit float encodings (precision half; closed with close_half_types). */
typedef struct half_types {
  hid_t half, bf16, fixed;
} half_types;

static int make_half_types(const h5frame_file *f, half_types *t) {
  const pack16_fixed *x = &f->fixed;
  t->half = float16_type(5, 10, 15, H5T_NORM_IMPLIED);
  t->bf16 = float16_type(8, 7, 127, H5T_NORM_IMPLIED);
  t->fixed = float16_type((size_t)x->exp_bits, (size_t)x->mant_bits, (size_t)x->bias, H5T_NORM_NONE);
  if (t->half < 0 || t->bf16 < 0 || t->fixed < 0)
    return dr_fail(DR_EIO, "H5Tcopy or H5Tset_fields, _precision, _size, _ebias, _norm failed: the 16-bit types of %s "
                   "(precision half)", f->rows.final);
  return 0;
}

/* Closes the types made (the others are H5I_INVALID_HID); the first failure is reported. */
static int close_half_types(half_types *t, const char *path) {
  hid_t *h[3] = {&t->half, &t->bf16, &t->fixed};
  int st = 0;
  for (int k = 0; k < 3; ++k) {
    if (*h[k] >= 0 && H5Tclose(*h[k]) < 0 && !st)
      st = dr_fail(DR_EIO, "H5Tclose failed: the 16-bit types of %s (precision half)", path);
    *h[k] = H5I_INVALID_HID;
  }
  return st;
}

/* Field q's type in file f. */
static hid_t file_type(const h5frame_file *f, const half_types *t, int q) {
  switch (h5frame_encoding_of(&f->lay, q)) {
  case H5FRAME_ENC_HALF: return t->half;
  case H5FRAME_ENC_BF16: return t->bf16;
  case H5FRAME_ENC_FIXED: return t->fixed;
  case H5FRAME_ENC_U8: return H5T_STD_U8LE;
  case H5FRAME_ENC_U16: return H5T_STD_U16LE;
  default: return field_type_of(q).file;
  }
}

/* Field f's array in d. */
static const void *field_array(const h5frame_data *d, int f) {
  switch (f) {
  case H5FRAME_POSITION: return d->position;
  case H5FRAME_VELOCITY: return d->velocity;
  case H5FRAME_ID: return d->id;
  case H5FRAME_MATERIAL: return d->material;
  case H5FRAME_OWNER: return d->owner;
  case H5FRAME_LOGJP: return d->logjp;
  case H5FRAME_J: return d->J;
  case H5FRAME_F: return d->F;
  case H5FRAME_STRESS: return d->stress;
  case H5FRAME_C: return d->C;
  default: return NULL;
  }
}

/* ---- h5frame_begin ---- */

static int check_meta(const char *dir, const h5frame_meta *meta) {
  if (!dir || !meta)
    return dr_fail(DR_EINTERNAL, "h5frame_begin: %s is NULL", !dir ? "the output folder" : "the frame metadata");
  if (meta->frame < 0) return dr_fail(DR_EINTERNAL, "h5frame_begin: negative frame number %d", meta->frame);
  if (meta->n_materials < 0 || (meta->n_materials > 0 && !meta->material_names))
    return dr_fail(DR_EINTERNAL, "h5frame_begin: bad material list (%d names)", meta->n_materials);
  for (int i = 0; i < meta->n_materials; i++)
    if (!meta->material_names[i]) return dr_fail(DR_EINTERNAL, "h5frame_begin: material name %d is NULL", i);
  if (!(meta->fields & H5FRAME_BIT(H5FRAME_POSITION)) || (meta->fields >> H5FRAME_FIELDS))
    return dr_fail(DR_EINTERNAL, "h5frame_begin: bad field set 0x%x (position is always written)", meta->fields);
  if (meta->precision < 0 || meta->precision >= H5FRAME_PRECISIONS)
    return dr_fail(DR_EINTERNAL, "h5frame_begin: bad precision %d", meta->precision);
  return 0;
}

/* Names joined by ','. */
static int join_materials(const h5frame_meta *meta, char **out) {
  size_t len = 1;
  for (int i = 0; i < meta->n_materials; i++) len += strlen(meta->material_names[i]) + 1;
  char *s = dr_malloc(len, "the materials attribute");
  if (!s) return DR_ENOMEM;
  s[0] = 0;
  size_t k = 0;
  for (int i = 0; i < meta->n_materials; i++) {
    size_t l = strlen(meta->material_names[i]);
    if (i > 0) s[k++] = ',';
    memcpy(s + k, meta->material_names[i], l);
    k += l;
  }
  s[k] = 0;
  *out = s;
  return 0;
}

/* The names of the fields asked for, joined by ',' (the root attribute fields). */
static void join_fields(unsigned fields, char *out, size_t cap) {
  size_t k = 0;
  out[0] = 0;
  for (int f = 0; f < H5FRAME_FIELDS; ++f)
    if (fields & H5FRAME_BIT(f)) {
      int w = snprintf(out + k, cap - k, "%s%s", k ? "," : "", h5frame_field_names[f]);
      if (w > 0 && (size_t)w < cap - k) k += (size_t)w;
    }
}

/* The paths of file f, the folder checked (rank 0), the types (little-endian host). */
static int paths(int rank, const char *dir, int frame, h5frame_file *f) {
  DR_TRY(h5rows_paths(rank, dir, "frame", frame, H5ROWS_DROP_FINAL, "output folder", &f->rows));
  for (int q = 0; q < H5FRAME_FIELDS; ++q)
    if ((f->lay.fields & H5FRAME_BIT(q)) && H5Tequal(field_type_of(q).file, field_type_of(q).mem) <= 0)
      return dr_fail(DR_EINTERNAL, "frames need a little-endian host (%s)", h5frame_field_names[q]);
  return 0;
}

/* Rank 0: fails early when the folder's file system has too little room for the frame (its rows,
 * a margin for the metadata, and the file due right after it: meta's after_*). Best effort:
 * quotas and other writers are not seen; a full disk met by the rows is reported by
 * h5frame_put. */
static int check_space(const h5frame_file *f, const h5frame_meta *meta, const char *dir, size_t materials_len) {
  const double per = h5frame_particle_bytes(&f->lay);
  const double total = (double)f->rows.total, after = total * meta->after_per_particle + meta->after_bytes;
  const double need = total * per + 16384.0 + (double)materials_len + after;
  return h5util_check_space(dir, f->rows.final, need, after > 0 ? ", the checkpoint due with it included" : "");
}

/* Rank 0: the file with everything but the rows; f->rows.at: the datasets' offsets. */
static int create_skeleton(const h5frame_meta *meta, const char *materials, h5frame_file *f) {
  const char *path = f->rows.tmp;
  hid_t file = H5I_INVALID_HID, group = H5I_INVALID_HID;
  half_types types = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
  const int32_t frame = (int32_t)meta->frame;
  char fields[128];
  join_fields(f->lay.fields, fields, sizeof fields);
  int st = h5rows_create(&f->rows, &file);
  if (!st) st = h5util_attr_scalar(file, "time", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &meta->time, path);
  if (!st) st = h5util_attr_scalar(file, "frame", H5T_STD_I32LE, H5T_NATIVE_INT32, &frame, path);
  if (!st) st = h5util_attr_scalar(file, "dx", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &meta->dx, path);
  if (!st) st = h5util_attr_scalar(file, "n_particles", H5T_STD_U64LE, H5T_NATIVE_UINT64, &f->rows.total, path);
  if (!st) st = h5util_attr_string(file, "units", "SI: m, s, kg", path);
  if (!st) st = h5util_attr_string(file, "materials", materials, path);
  if (!st) st = h5util_attr_string(file, "owner_encoding", "rank*256+device", path);
  if (!st) st = h5util_attr_string(file, "fields", fields, path);
  if (!st && f->lay.precision == H5FRAME_HALF) { /* float: the attributes above only, as ever */
    const double spacing = pack16_fixed_spacing(&f->fixed);
    st = h5util_attr_string(file, "precision", h5frame_precision_names[H5FRAME_HALF], path);
    if (!st) st = h5util_attr_scalar(file, "position_spacing", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &spacing, path);
  }
  if (!st && f->lay.precision == H5FRAME_HALF) st = make_half_types(f, &types);
  if (st) goto fail;
  H5CK(group = H5Gcreate2(file, "particles", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "H5Gcreate2",
       "group /particles");
  for (int q = 0; q < H5FRAME_FIELDS && !st; ++q)
    if (f->lay.fields & H5FRAME_BIT(q))
      st = h5rows_dataset(group, &f->rows, q, h5frame_field_names[q], file_type(f, &types, q),
                          h5frame_field_columns[q]);
  if (st) goto fail;
  H5CK(H5Gclose(group), "H5Gclose", "group /particles");
  group = H5I_INVALID_HID;
  if ((st = close_half_types(&types, path))) goto fail;
  return h5rows_close(&f->rows, file, 0);
fail:
  (void)close_half_types(&types, path);
  H5_DROP(H5Gclose, group);
  return h5rows_close(&f->rows, file, st);
}

int h5frame_begin(MPI_Comm comm, const char *dir, const h5frame_meta *meta, size_t n, h5frame_file *f) {
  int rank = 0, ranks = 1;
  char *materials = NULL;
  h5frame_meta m; /* fields 0: the default set */
  if (meta && !meta->fields) {
    m = *meta;
    m.fields = H5FRAME_DEFAULT_FIELDS;
    meta = &m;
  }
  memset(f, 0, sizeof *f);
  h5util_quiet();
  DR_MPI(MPI_Comm_rank(comm, &rank));
  DR_MPI(MPI_Comm_size(comm, &ranks));
  int st = check_meta(dir, meta);
  if (!st) {
    f->lay = h5frame_layout_of(meta->fields, meta->precision, meta->n_materials, ranks);
    f->frame = meta->frame;
    st = paths(rank, dir, meta->frame, f);
  }
  if (!st && f->lay.precision == H5FRAME_HALF && pack16_fixed_for(meta->extent, &f->fixed) != 0)
    st = dr_fail(DR_EINPUT, "precision half: no 16-bit fixed point reaches the positions' extent %g m (expected from "
                 "2^-60 to 1.07e9 m)", meta->extent);
  if (!st) st = join_materials(meta, &materials);
  st = comm_agree(comm, st);
  if (!st) st = h5rows_counts(comm, n, &f->rows);
  if (!st && rank == 0) {
    st = check_space(f, meta, dir, strlen(materials));
    if (!st) st = create_skeleton(meta, materials, f);
  }
  free(materials);
  return h5rows_share(comm, &f->rows, st);
}

/* ---- h5frame_put ---- */

/* The converted fields go through pack, split into two halves, a block of a field's whole rows
 * at a time, in steps: in step k thread 0 of an OpenMP team (the caller's thread) queues block
 * k's conversion into one half as tasks, writes block k - 1 from the other half while the team's
 * other threads run the tasks, then runs what is left of them itself and waits for the rest
 * (taskwait); the last step writes the last block alone. The fields stored as in memory are
 * written before, outside the team (so that in memory h5rows' team copies them into a mapping).
 * Tasks rather than a loop shared by the team: a thread that gets no core in time leaves its
 * share to thread 0 instead of holding every step at a barrier. The writes stay on the caller's
 * thread, so that a failure's message is the caller's (error.h keeps it per thread). The
 * encoders work value by value, so a block split into tasks gives the bits of one call over the
 * whole field. The team is one thread fewer than omp_get_max_threads() of the calling thread (in
 * a run, the writer's team: its rank's share of the node's cores, writer.c), at least one: the
 * run's main thread keeps a core to drive the device meanwhile, and threads beyond the free cores
 * spin for work they rarely get (on the 2-core CPU machine under load a team of two took 1.1-2x
 * one thread's time). With one thread the tasks wait for the taskwait: write, then convert. */
enum {
  PACK_CHUNK = 8192, /* values a task converts at least: 32 KiB read, 16 KiB written */
  PACK_TASKS = 16    /* tasks a block at most, per thread (libgomp runs a task at once in its
                      * creator beyond 64 queued a thread, which would convert before writing) */
};

/* Rows first .. first + rows - 1 of field q (q < 0: none), converted into buf. */
typedef struct pack_block {
  int q;
  size_t first, rows;
  unsigned char *buf;
} pack_block;

/* The block after b (b->q < 0: the first) of d's n rows of the fields in todo, of at most cap
 * values, to be converted into buf; its q is negative when none is left. */
static pack_block next_block(unsigned todo, const h5frame_data *d, const pack_block *b, size_t cap,
                             unsigned char *buf) {
  int q = b->q < 0 ? 0 : b->q;
  size_t first = b->q < 0 ? 0 : b->first + b->rows;
  for (; q < H5FRAME_FIELDS; ++q, first = 0)
    if ((todo & H5FRAME_BIT(q)) && first < d->n) {
      const size_t rows = cap / (size_t)h5frame_field_columns[q], left = d->n - first;
      return (pack_block){q, first, left < rows ? left : rows, buf};
    }
  return (pack_block){-1, 0, 0, buf};
}

/* The values of in[0 .. n) narrowed into out, `bytes` (1 or 2) each; returns how many did not fit
 * (they are stored cut to their low bits). */
static size_t narrow(const int32_t *in, unsigned char *out, size_t n, int bytes) {
  uint32_t high = 0;
  if (bytes == 1)
    for (size_t i = 0; i < n; ++i) {
      high |= (uint32_t)in[i] >> 8;
      out[i] = (uint8_t)in[i];
    }
  else
    for (size_t i = 0; i < n; ++i) {
      high |= (uint32_t)in[i] >> 16;
      ((uint16_t *)out)[i] = (uint16_t)in[i];
    }
  size_t bad = 0;
  if (high)
    for (size_t i = 0; i < n; ++i) bad += (uint32_t)in[i] >> (8 * bytes) != 0;
  return bad;
}

/* Values at .. at + n - 1 of field q of d converted into out (aligned for the file's values);
 * returns how many integers did not fit their width. */
static size_t encode(const h5frame_file *f, const h5frame_data *d, int q, size_t at, size_t n, void *out) {
  const float *in = (const float *)field_array(d, q) + at;
  const int32_t *ints = (const int32_t *)field_array(d, q) + at;
  switch (h5frame_encoding_of(&f->lay, q)) {
  case H5FRAME_ENC_HALF: pack16_half(in, out, n); return 0;
  case H5FRAME_ENC_BF16: pack16_bf16(in, out, n); return 0;
  case H5FRAME_ENC_U8: return narrow(ints, out, n, 1);
  case H5FRAME_ENC_U16: return narrow(ints, out, n, 2);
  default: pack16_fixed_encode(&f->fixed, in, out, n); return 0;
  }
}

/* The failure of bad integers of field q that did not fit its width in the file (a bug upstream:
 * the layout holds every value the run can give). */
static int too_wide(const h5frame_file *f, int q, size_t bad) {
  return dr_fail(DR_EINTERNAL, "frame %d: %zu values of %s beyond its %u-bit width in the file", f->frame, bad,
                 h5frame_field_names[q], 8u * h5frame_row_bytes(&f->lay, q));
}

/* Bytes of one value of converted field q in the file. */
static size_t value_bytes(const h5frame_file *f, int q) {
  return h5frame_row_bytes(&f->lay, q) / (unsigned)h5frame_field_columns[q];
}

/* Writes block b (none: nothing) at the rows of d, which start at this rank's row `at`. */
static int put_block(int fd, const h5frame_file *f, size_t at, const pack_block *b) {
  if (b->q < 0) return DR_OK;
  return h5rows_put_range(fd, &f->rows, b->q, h5frame_row_bytes(&f->lay, b->q), at + b->first, b->rows, b->buf,
                          h5frame_field_names[b->q]);
}

/* Writes the fields stored as they are in memory: d's rows at this rank's rows at .. at + d->n - 1. */
static int put_raw(int fd, const h5frame_file *f, size_t at, const h5frame_data *d) {
  for (int q = 0; q < H5FRAME_FIELDS; ++q)
    if ((f->lay.fields & H5FRAME_BIT(q)) && h5frame_encoding_of(&f->lay, q) == H5FRAME_ENC_RAW)
      DR_TRY(h5rows_put_range(fd, &f->rows, q, h5frame_row_bytes(&f->lay, q), at, d->n, field_array(d, q),
                              h5frame_field_names[q]));
  return DR_OK;
}

/* The fields the layout converts (H5FRAME_BIT of each). */
static unsigned converted_fields(const h5frame_file *f) {
  unsigned c = 0;
  for (int q = 0; q < H5FRAME_FIELDS; ++q)
    if ((f->lay.fields & H5FRAME_BIT(q)) && h5frame_encoding_of(&f->lay, q) != H5FRAME_ENC_RAW) c |= H5FRAME_BIT(q);
  return c;
}

enum {
  MAP_PIECE = 1 << 18,   /* values a thread encodes at a time into a mapping */
  LOCAL_VALUES = 1 << 13 /* of them at a time into the thread's own buffer, then copied there */
};

/* In memory (h5rows_map_range: a file in memory, its space allocated, a team): each field in
 * *todo encoded by the team into a mapping of its rows of d (at this rank's row at), a piece at a
 * time to whichever thread is free, each through the thread's own 16 KiB (a dataset's rows start
 * at any byte of the file, so the mapping's values need not be aligned), no shared buffer and no
 * write() (which one file takes from one thread at a time in memory); the fields so put leave
 * *todo. Elsewhere nothing is done. */
static int put_mapped_fields(int fd, const h5frame_file *f, size_t at, const h5frame_data *d, unsigned *todo) {
  for (int q = 0; q < H5FRAME_FIELDS; ++q) {
    if (!(*todo & H5FRAME_BIT(q))) continue;
    h5rows_map m;
    DR_TRY(h5rows_map_range(fd, &f->rows, q, h5frame_row_bytes(&f->lay, q), at, d->n, h5frame_field_names[q], &m));
    if (!m.rows) return DR_OK; /* through the buffer */
    const size_t vb = value_bytes(f, q);
    const size_t values = d->n * (size_t)h5frame_field_columns[q];
    const long pieces = (long)((values + MAP_PIECE - 1) / MAP_PIECE);
    size_t bad = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : bad)
    for (long k = 0; k < pieces; ++k) {
      const size_t lo = (size_t)k * MAP_PIECE, hi = lo + MAP_PIECE < values ? lo + MAP_PIECE : values;
      uint16_t local[LOCAL_VALUES]; /* aligned: a dataset's rows start at any byte of the file */
      for (size_t s = lo; s < hi; s += LOCAL_VALUES) {
        const size_t n = hi - s < LOCAL_VALUES ? hi - s : LOCAL_VALUES;
        bad += encode(f, d, q, s, n, local);
        memcpy(m.rows + s * vb, local, n * vb);
      }
    }
    h5rows_unmap(&m);
    if (bad) return too_wide(f, q, bad);
    *todo &= ~H5FRAME_BIT(q);
  }
  return DR_OK;
}

/* The fields of d in todo (at this rank's row at), converted through pack (two halves of cap
 * 16-bit values) and written. */
static int put_converted(int fd, const h5frame_file *f, unsigned todo, size_t at, const h5frame_data *d,
                         uint16_t *pack, size_t cap) {
  const int threads = omp_get_max_threads() > 1 ? omp_get_max_threads() - 1 : 1;
  int st = DR_OK;
  size_t bad = 0;
#pragma omp parallel num_threads(threads)
#pragma omp master
  {
    pack_block prev = {.q = -1}, cur = {.q = -1};
    for (int step = 0; !st; ++step) {
      cur = next_block(todo, d, &cur, cap, (unsigned char *)(pack + (size_t)(step & 1) * cap));
      const size_t values = cur.q < 0 ? 0 : cur.rows * (size_t)h5frame_field_columns[cur.q];
      const size_t per_task = (values + PACK_TASKS * (size_t)threads - 1) / (PACK_TASKS * (size_t)threads);
      const size_t chunk = per_task > PACK_CHUNK ? per_task : PACK_CHUNK;
      for (size_t lo = 0; lo < values; lo += chunk) {
        const size_t hi = lo + chunk < values ? lo + chunk : values;
#pragma omp task firstprivate(lo, hi, cur) shared(bad)
        {
          const size_t b = encode(f, d, cur.q, cur.first * (size_t)h5frame_field_columns[cur.q] + lo, hi - lo,
                                  cur.buf + lo * value_bytes(f, cur.q));
          if (b) {
#pragma omp atomic
            bad += b;
          }
        }
      }
      st = put_block(fd, f, at, &prev);
#pragma omp taskwait
      if (!st && bad) st = too_wide(f, cur.q, bad);
      if (cur.q < 0) break;
      prev = cur;
    }
  }
  return st;
}

int h5frame_put(const h5frame_file *f, size_t first, const h5frame_data *d, void *pack, size_t pack_bytes) {
  if (!f->rows.begun) return dr_fail(DR_EINTERNAL, "h5frame_put: frame %d was not begun", f->frame);
  if (!d || first > f->rows.n || d->n > f->rows.n - first)
    return dr_fail(DR_EINTERNAL, "h5frame_put: frame %d: rows %zu .. %zu of %zu particles begun with", f->frame, first,
                   first + (d ? d->n : 0), f->rows.n);
  for (int q = 0; q < H5FRAME_FIELDS; ++q)
    if ((f->lay.fields & H5FRAME_BIT(q)) && d->n > 0 && !field_array(d, q))
      return dr_fail(DR_EINTERNAL, "h5frame_put: %zu particles but a NULL array (%s)", d->n, h5frame_field_names[q]);
  /* each half of the buffer holds a row of the widest converted field */
  const size_t cap = pack ? pack_bytes / (2 * sizeof(uint16_t)) : 0;
  size_t widest = 0;
  for (int q = 0; q < H5FRAME_FIELDS; ++q)
    if ((f->lay.fields & H5FRAME_BIT(q)) && h5frame_encoding_of(&f->lay, q) != H5FRAME_ENC_RAW &&
        (size_t)h5frame_field_columns[q] > widest)
      widest = (size_t)h5frame_field_columns[q];
  if (cap < widest)
    return dr_fail(DR_EINTERNAL, "h5frame_put: frame %d converts fields and needs a buffer of at least %zu bytes (got "
                   "%zu; the run's is h5frame_pack_bytes)", f->frame, 2 * widest * sizeof(uint16_t), pack ? pack_bytes : 0);
  if (d->n == 0) return DR_OK;
  int fd = -1;
  DR_TRY(h5rows_open(&f->rows, &fd));
  unsigned todo = converted_fields(f);
  int st = put_raw(fd, f, first, d);
  if (!st && todo) st = put_mapped_fields(fd, f, first, d, &todo);
  if (!st && todo) st = put_converted(fd, f, todo, first, d, pack, cap);
  return h5rows_finish(&f->rows, fd, st);
}

void h5frame_ahead_start(h5frame_file *f, h5rows_ahead *a) {
  int order[H5FRAME_FIELDS], count = 0;
  size_t row_bytes[H5FRAME_FIELDS];
  const char *names[H5FRAME_FIELDS];
  /* the puts' order: the fields stored as they are first (put_raw), then the converted ones */
  for (int pass = 0; pass < 2; ++pass)
    for (int q = 0; q < H5FRAME_FIELDS; ++q) {
      const int raw = h5frame_encoding_of(&f->lay, q) == H5FRAME_ENC_RAW;
      if (!(f->lay.fields & H5FRAME_BIT(q)) || raw != (pass == 0)) continue;
      order[count] = q;
      row_bytes[count] = h5frame_row_bytes(&f->lay, q);
      names[count++] = h5frame_field_names[q];
    }
  h5rows_ahead_start(&f->rows, a, order, row_bytes, names, count);
}

void h5frame_ahead_join(h5frame_file *f) { h5rows_ahead_join(&f->rows); }

/* ---- h5frame_end ---- */

int h5frame_end(MPI_Comm comm, h5frame_file *f, int put_status) { return h5rows_end(comm, &f->rows, put_status); }

int h5frame_write(MPI_Comm comm, const char *dir, const h5frame_meta *meta, const h5frame_data *d) {
  if (!d) return dr_fail(DR_EINTERNAL, "h5frame_write: the particle data is NULL");
  h5frame_file *f = dr_malloc(sizeof *f, "a frame's file");
  int st = f ? DR_OK : DR_ENOMEM;
  st = comm_agree(comm, st);
  void *pack = NULL; /* one frame: a buffer of its own */
  const size_t pack_bytes = meta ? h5frame_pack_bytes(meta->fields, meta->precision) : 0;
  if (!st && pack_bytes && !(pack = dr_malloc(pack_bytes, "a frame's conversion")))
    st = DR_ENOMEM;
  st = comm_agree(comm, st);
  if (!st) st = h5frame_begin(comm, dir, meta, d->n, f);
  if (!st) st = h5frame_end(comm, f, h5frame_put(f, 0, d, pack, pack_bytes));
  free(pack);
  free(f);
  return st;
}
int h5frame_count(const char *path, uint64_t *n, unsigned *fields) {
  h5util_quiet();
  *n = 0;
  if (fields) *fields = 0;
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), a = H5I_INVALID_HID;
  if (file < 0) return dr_fail(DR_EIO, "frame %s cannot be opened", path);
  int rc = DR_OK;
  if (H5Aexists(file, "n_particles") <= 0 || (a = H5Aopen(file, "n_particles", H5P_DEFAULT)) < 0 ||
      H5Aread(a, H5T_NATIVE_UINT64, n) < 0)
    rc = dr_fail(DR_EIO, "frame %s: attribute n_particles cannot be read", path);
  if (rc == DR_OK && fields && H5Lexists(file, "/particles", H5P_DEFAULT) > 0)
    for (int f = 0; f < H5FRAME_FIELDS; ++f) {
      char name[64];
      snprintf(name, sizeof name, "/particles/%s", h5frame_field_names[f]);
      if (H5Lexists(file, name, H5P_DEFAULT) > 0) *fields |= H5FRAME_BIT(f);
    }
  if (a >= 0) H5Aclose(a);
  H5Fclose(file);
  return rc;
}
