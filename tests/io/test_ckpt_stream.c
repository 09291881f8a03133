/* test_ckpt_stream - a resume's stream of a checkpoint (ckpt_open, a particle_source of
 * particles.h), run on one rank and on two (each rank writes its share of the particles, and
 * every rank reads):
 *   - through chunks of 333 rows (ckpt_open's parameter) and asked for in sizes that cut them
 *     anywhere (1, 100, 1000, 7, the rest), the stream gives every rank the particles of a
 *     checkpoint of 5000 bitwise, and those are the particles written (each value a formula of the
 *     particle's index, rebuilt here); the rank's slice source gives its even slice, as ckpt_read
 *     does; the state reads back the same; past its n the stream gives nothing; rewound, it gives
 *     the same rows again (twice);
 *   - what the first pass saw (ckpt_rows_seen, over every rank's slice) is the formulas' least
 *     and largest material and largest mass;
 *   - a byte flipped in a particle dataset (in rank 0's slice) is refused by ckpt_open on every
 *     rank (DR_EINPUT, one line naming the file), before any row is handed out, and
 *     ckpt_open_latest then takes the older whole one;
 *   - the host's counted peak (memtally.h) of opening and draining a checkpoint through one
 *     consumer chunk of the reader's chunk size (2048 rows), as the CUDA backend's upload takes it,
 *     is at most a chunk's bytes on every rank and the same for 20,000 and 60,000 particles. */
#define _XOPEN_SOURCE 700
#include <mpi.h>

#include "checkpoint.h"
#include "error.h"
#pragma GCC diagnostic ignored "-Wunused-function" /* io_check.h's readers of frame files */
#include "io_check.h"
#include "log.h"
#include "memtally.h"

/* Value j of attribute `name` of particle i: multiples of 1/8, exact in every attribute type. */
static double value_of(uint64_t i, const char *name, int j) {
  uint64_t h = 1469598103934665603ULL;
  for (const char *c = name; *c; ++c) h = (h ^ (unsigned char)*c) * 1099511628211ULL;
  return (double)((i * 7919 + h % 1000 + (uint64_t)j * 131) % 100000) * 0.125;
}

/* Particle i's material: -1 .. 3 (-1 a material no scene defines). */
static int32_t material_of(uint64_t i) { return (int32_t)((i * 7) % 5) - 1; }
/* Particle i's mass: 0.5 .. 1.499 kg. */
static float mass_of(uint64_t i) { return 0.5f + (float)(i % 1000) / 1000.0f; }

static int rank_, nranks_ = 1;

/* Particles first .. first + n - 1 (of the formulas) into p[0 .. n). */
static void make(particles *p, size_t first, size_t n) {
  memset(p, 0, sizeof *p);
  particles_reserve(p, n + 1);
  p->n = n;
  for (size_t q = 0; q < n; ++q) {
    const uint64_t i = first + q;
#define FILL_AT_(field, type, k, what)                                                             \
  for (int j = 0; j < (k); ++j) p->field[(size_t)(k) * q + j] = (type)value_of(i, #field, j);
    PARTICLE_ATTRIBUTES(FILL_AT_)
#undef FILL_AT_
    p->id[q] = ((uint64_t)1 << 40) + i;
    p->material[q] = material_of(i);
    p->mass[q] = mass_of(i);
  }
}

/* This rank's even share of N rows: [*first, *first + *n). */
static void share(size_t N, size_t *first, size_t *n) {
  const size_t R = (size_t)nranks_, r = (size_t)rank_;
  *first = N / R * r + N % R * r / R;
  *n = N / R * (r + 1) + N % R * (r + 1) / R - *first;
}

static const char SCENE[] = "{ \"a scene\": \"its bytes\" }\n";
static uint64_t emitted_[2] = {12, 345};

static ckpt_state state_of(int frame) {
  uint64_t h = 0xcbf29ce484222325ULL; /* the scene text's FNV-1a, as scene_load computes it */
  for (size_t i = 0; i < sizeof SCENE - 1; ++i) h = (h ^ (unsigned char)SCENE[i]) * 0x100000001b3ULL;
  return (ckpt_state){.frame = frame, .step_in_frame = 2, .time = 0.04 * frame + 1e-3, .steps = 1000u + (uint64_t)frame,
                      .rebuilds = 17, .last_dt = 1.25e-4, .vmax = 2.5, .scene_hash = h, .emit_frame = frame,
                      .n_sources = 2, .emitted = emitted_, .projected = 1};
}

/* A checkpoint of particles 0 .. N - 1, each rank writing its share (rows in rank order). */
static int write_frame(const char *dir, int frame, size_t N) {
  particles p;
  size_t first, n;
  share(N, &first, &n);
  make(&p, first, n);
  const ckpt_state st = state_of(frame);
  const ckpt_scene sc = {.text = SCENE, .len = sizeof SCENE - 1, .path = "scene.json"};
  dr_clear();
  const int rc = ckpt_write(MPI_COMM_WORLD, dir, &st, &sc, &p, 8);
  particles_free(&p);
  return rc;
}

/* Whether a and b hold the same particles, bitwise, every attribute. */
static int same(const particles *a, const particles *b) {
  if (a->n != b->n) return 0;
  for (int k = 0; k < PARTICLE_ATTRS; ++k)
    if (a->n && memcmp(particles_attr(a, k), particles_attr(b, k), a->n * particle_attrs[k].bytes)) return 0;
  return 1;
}

static int same_state(const ckpt_state *a, const ckpt_state *b) {
  return a->frame == b->frame && a->step_in_frame == b->step_in_frame && a->time == b->time && a->steps == b->steps &&
         a->rebuilds == b->rebuilds && a->last_dt == b->last_dt && a->vmax == b->vmax && a->scene_hash == b->scene_hash &&
         a->emit_frame == b->emit_frame && a->n_sources == b->n_sources && a->projected == b->projected &&
         a->emitted && b->emitted && a->emitted[0] == b->emitted[0] && a->emitted[1] == b->emitted[1];
}

static void check_stream(const char *dir) {
  const size_t N = 5000;
  CHECK(write_frame(dir, 2, N) == DR_OK, "writing frame 2: %s", dr_message());
  char path[4096];
  ckpt_path(dir, 2, path, sizeof path);
  particles whole, mine, slice = {0}, streamed = {0};
  size_t first, n;
  share(N, &first, &n);
  make(&whole, 0, N);
  make(&mine, first, n);
  ckpt_state st_whole, st_stream;
  CHECK(ckpt_read(MPI_COMM_WORLD, path, &st_whole, &slice) == DR_OK, "ckpt_read: %s", dr_message());
  CHECK(same(&slice, &mine), "rank %d: ckpt_read's %zu particles differ from its slice's %zu written", rank_, slice.n,
        mine.n);

  ckpt_reader *r = NULL;
  CHECK(ckpt_open(MPI_COMM_WORLD, path, 333, &st_stream, &r) == DR_OK && r, "ckpt_open: %s", dr_message());
  if (!r) return;
  const ckpt_state want = state_of(2);
  CHECK(same_state(&st_stream, &want) && same_state(&st_whole, &want) && st_stream.n_particles == N,
        "the state read back differs (%llu particles)", (unsigned long long)st_stream.n_particles);
  const particle_source src = ckpt_reader_source(r);
  CHECK(src.n == N, "the source gives %zu particles, want %zu", src.n, N);
  const size_t sizes[] = {1, 100, 1000, 7, 4096};
  for (int k = 0; streamed.n < src.n; ++k) {
    const size_t before = streamed.n, ask = sizes[k < 5 ? k : 4];
    const size_t expect = src.n - before < ask ? src.n - before : ask;
    if (src.next(src.ctx, &streamed, ask) != DR_OK || streamed.n - before != expect) {
      CHECK(0, "chunk %d: %zu particles where %zu were asked (%s)", k, streamed.n - before, expect, dr_message());
      break;
    }
  }
  const size_t before = streamed.n;
  CHECK(src.next(src.ctx, &streamed, 5) == DR_OK && streamed.n == before, "the stream gave particles past its n");
  CHECK(same(&streamed, &whole), "rank %d: the stream's %zu particles differ from the %zu written", rank_, streamed.n,
        whole.n);
  /* rewound (an island reads it once for the split, then once for each member): the same rows */
  CHECK(src.rewind != NULL, "the reader's source does not rewind");
  for (int pass = 0; src.rewind && pass < 2; ++pass) {
    particles again = {0};
    int rc = src.rewind(src.ctx);
    while (rc == DR_OK && again.n < src.n) rc = src.next(src.ctx, &again, pass ? 4096 : 999);
    CHECK(rc == DR_OK && same(&again, &whole), "pass %d after a rewind: %zu particles, not those written (%s)", pass,
          again.n, rc ? dr_message() : "they differ");
    particles_free(&again);
  }
  /* this rank's slice, as ckpt_read gives it, then all the rows again */
  const particle_source sl = ckpt_reader_slice(r);
  particles part = {0};
  int rc = DR_OK;
  while (rc == DR_OK && part.n < sl.n) rc = sl.next(sl.ctx, &part, 333);
  CHECK(rc == DR_OK && sl.n == n && same(&part, &mine), "rank %d: the slice source gave %zu particles, not its slice's %zu",
        rank_, part.n, n);
  particles_free(&part);
  const particle_source all = ckpt_reader_source(r);
  particles again = {0};
  rc = DR_OK;
  while (rc == DR_OK && again.n < all.n) rc = all.next(all.ctx, &again, 4096);
  CHECK(rc == DR_OK && same(&again, &whole), "rank %d: the rows after the slice differ from those written", rank_);
  particles_free(&again);

  /* the first pass's view against the formulas */
  int32_t lo = INT32_MAX, hi = INT32_MIN;
  float m = 0.0f;
  for (size_t i = 0; i < N; ++i) {
    lo = material_of(i) < lo ? material_of(i) : lo;
    hi = material_of(i) > hi ? material_of(i) : hi;
    m = mass_of(i) > m ? mass_of(i) : m;
  }
  const ckpt_rows_seen *seen = ckpt_reader_seen(r);
  CHECK(seen->material_min == lo && seen->material_max == hi && seen->mass_max == m && lo == -1 && hi == 3,
        "seen: materials %d .. %d, mass %g; want %d .. %d, %g", seen->material_min, seen->material_max,
        (double)seen->mass_max, lo, hi, (double)m);
  ckpt_close(&r);
  CHECK(r == NULL, "ckpt_close leaves the reader");
  free(st_whole.emitted), free(st_stream.emitted);
  particles_free(&whole), particles_free(&mine), particles_free(&slice), particles_free(&streamed);
  check_no_open_handles("after streaming");
}

static void check_damaged(const char *dir) {
  CHECK(write_frame(dir, 5, 5000) == DR_OK, "writing frame 5: %s", dr_message());
  char path[4096], found[4096], older[4096];
  ckpt_path(dir, 5, path, sizeof path);
  ckpt_path(dir, 2, older, sizeof older);
  /* a row in the fourth chunk of 333, in rank 0's slice: every rank refuses it */
  if (rank_ == 0) flip(path, data_offset(path, "/particles/F") + 4 * 9 * 1200 + 6);
  MPI_Barrier(MPI_COMM_WORLD);
  ckpt_state st;
  ckpt_reader *r = NULL;
  dr_clear();
  const int rc = ckpt_open(MPI_COMM_WORLD, path, 333, &st, &r);
  const char *m = dr_message();
  CHECK(rc == DR_EINPUT && !r && !st.emitted, "a flipped byte: ckpt_open returned %d (%s)", rc, m);
  CHECK(strstr(m, path) && strstr(m, "does not match its checksum") && !strchr(m, '\n'),
        "a flipped byte: the message '%s' does not name %s and its checksum in one line", m, path);
  check_no_open_handles("after a refusal");
  dr_clear();
  CHECK(ckpt_open_latest(MPI_COMM_WORLD, dir, 333, &st, &r, found, sizeof found) == DR_OK && r, "ckpt_open_latest: %s",
        dr_message());
  CHECK(!strcmp(found, older), "ckpt_open_latest took %s, want the older whole %s", found, older);
  CHECK(st.frame == 2, "ckpt_open_latest's state is frame %d, want 2", st.frame);
  ckpt_close(&r);
  free(st.emitted);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_ == 0) unlink(path);
}

/* The host's counted peak above what was held before, opening the checkpoint of frame and
 * draining it through one consumer chunk of `chunk` particles (reserved once, emptied each time);
 * *n: the particles drained. */
static double chunked_peak(const char *dir, int frame, size_t chunk, size_t *n) {
  char path[4096];
  ckpt_path(dir, frame, path, sizeof path);
  memtally_reset_peaks();
  const double held = (double)memtally_now(MEMTALLY_HOST, MT_KINDS);
  ckpt_state st;
  ckpt_reader *r = NULL;
  *n = 0;
  if (ckpt_open(MPI_COMM_WORLD, path, chunk, &st, &r) != DR_OK) {
    CHECK(0, "ckpt_open: %s", dr_message());
    return 0.0;
  }
  const particle_source src = ckpt_reader_source(r);
  particles buf = {0};
  CHECK(particles_reserve(&buf, chunk) == DR_OK, "out of memory");
  while (*n < src.n) {
    buf.n = 0;
    const size_t want = src.n - *n < chunk ? src.n - *n : chunk;
    if (src.next(src.ctx, &buf, want) != DR_OK || buf.n != want) {
      CHECK(0, "chunk at %zu: %zu of %zu particles (%s)", *n, buf.n, want, dr_message());
      break;
    }
    *n += want;
  }
  const double peak = (double)memtally_peak(MEMTALLY_HOST) - held;
  particles_free(&buf);
  ckpt_close(&r);
  free(st.emitted);
  return peak;
}

static void check_bounded(const char *dir) {
  const size_t chunk = 2048;
  CHECK(write_frame(dir, 7, 20000) == DR_OK && write_frame(dir, 8, 60000) == DR_OK, "writing: %s", dr_message());
  size_t n_small = 0, n_large = 0;
  const double p_small = chunked_peak(dir, 7, chunk, &n_small), p_large = chunked_peak(dir, 8, chunk, &n_large);
  const double chunk_bytes = (double)chunk * (double)particles_record_bytes();
  printf("host peak while streaming a checkpoint: %zu particles %.1f KiB, %zu particles %.1f KiB (a chunk: %.1f KiB; "
         "the larger as one array: %.1f KiB)\n",
         n_small, p_small / 1024.0, n_large, p_large / 1024.0, chunk_bytes / 1024.0,
         (double)n_large * (double)particles_record_bytes() / 1024.0);
  CHECK(n_small == 20000 && n_large == 60000, "drained %zu and %zu particles", n_small, n_large);
  /* (the counted blocks' headers aside: memtally.h) */
  CHECK(p_small >= chunk_bytes && p_small <= chunk_bytes + 4096 && p_large <= chunk_bytes + 4096,
        "the peaks %.0f and %.0f B, a chunk is %.0f B", p_small, p_large, chunk_bytes);
  CHECK(p_large <= p_small, "the larger checkpoint peaks at %.0f B, the smaller at %.0f B", p_large, p_small);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks_);
  log_set_quiet(1);
  const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/drift-ckpt-stream-XXXXXX", base);
  int ok = rank_ != 0 || mkdtemp(dir);
  if (!ok) perror("mkdtemp");
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Bcast(dir, (int)sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (!ok) {
    MPI_Finalize();
    return 1;
  }
  check_stream(dir);
  check_damaged(dir);
  check_bounded(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_ == 0) rm_rf(dir);
  if (failures_) fprintf(stderr, "rank %d: %d check(s) failed\n", rank_, failures_);
  MPI_Finalize();
  return failures_ ? 1 : 0;
}
