/* backend_cpu_particles.c - the CPU backend's particles in and out (backend.h): the download, the
 * frame's snapshot and its fetches, a checkpoint's fetch_rows, the counts and stats, the particles
 * set or added (a rank's arrivals, a source's), those that leave a rank's box (emigrate) and the
 * mapping's particle blocks. */
#include <stdlib.h>
#include <string.h>

#include "backend_cpu_internal.h"
#include "error.h"
#include "memsizes.h"
#include "memtally.h"
#include "physics/constitutive.h"

static int download(void *state, particles *out) {
  cpu_state *s = state;
  size_t n = s->p.n;
  DR_TRY(particles_reserve(out, n));
  out->n = n;
  for (int a = 0; a < PARTICLE_ATTRS && n > 0; ++a) /* none yet (sources only): no arrays either */
    memcpy(particles_attr(out, a), particles_attr(&s->p, a), n * particle_attrs[a].bytes);
  for (size_t i = 0; i < n; ++i) out->owner[i] = s->prm.rank * 256;
  return DR_OK;
}

/* Copies attribute a of rows [0, n) of src to dst (owner: this rank's value), in slices over the
 * threads. */
static void copy_attr(const cpu_state *s, int a, char *dst, const char *src, size_t n) {
  const int32_t owner = s->prm.rank * 256;
  const size_t bytes = n * particle_attrs[a].bytes, slice = (size_t)1 << 22;
  const long slices = (long)((bytes + slice - 1) / slice);
#pragma omp parallel for schedule(static)
  for (long k = 0; k < slices; ++k) {
    const size_t b = (size_t)k * slice, e = b + slice < bytes ? b + slice : bytes;
    if (a == PA_owner)
      for (size_t i = b / sizeof(int32_t); i < e / sizeof(int32_t); ++i) ((int32_t *)dst)[i] = owner;
    else
      memcpy(dst + b, src + b, e - b);
  }
}

void cpu_snap_release(cpu_state *s) {
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    void **arr = (void **)((char *)&s->snap + particle_attrs[a].offset);
    memtally_free(*arr);
    *arr = NULL;
  }
  s->snap.n = s->snap_cap = 0;
  s->snap_mask = 0;
}

/* backend.h's snapshot: the host is this backend's device, so the snapshot is a host copy of the
 * mask's arrays, a quarter past the need (mem_frame_capacity, the memory plan's rule), kept; the
 * owner left out (this rank's one value, which fetch writes). */
static int snapshot(void *state, unsigned mask, size_t *n) {
  cpu_state *s = state;
  const size_t m = s->p.n;
  if (m > s->snap_cap || mask != s->snap_mask) {
    cpu_snap_release(s);
    const size_t cap = mem_frame_capacity(m);
    for (int a = 0; a < PARTICLE_ATTRS; ++a) {
      if (!((mask & ~PA_BIT(owner)) >> a & 1u)) continue;
      void **arr = (void **)((char *)&s->snap + particle_attrs[a].offset);
      if (!(*arr = memtally_malloc(MT_TRANSFER, cap * particle_attrs[a].bytes, "the frame's snapshot"))) {
        cpu_snap_release(s);
        return DR_ENOMEM;
      }
    }
    s->snap_cap = cap, s->snap_mask = mask;
  }
  for (int a = 0; a < PARTICLE_ATTRS && m > 0; ++a)
    if ((mask & ~PA_BIT(owner)) >> a & 1u) copy_attr(s, a, particles_attr(&s->snap, a), particles_attr(&s->p, a), m);
  if (s->compact && (mask & PA_BIT(F))) /* F at the frame's time: the last G2P's update (physics/compact.h) */
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)m; ++i)
      constitutive_advance_F(&s->mats[s->p.material[i]], s->dt_g2p, s->p.C + 9 * (size_t)i, s->snap.F + 9 * (size_t)i);
  s->snap.n = m;
  *n = m;
  return DR_OK;
}

/* backend.h's fetch: rows of the snapshot, copied (any thread: the snapshot is not the particles). */
static int fetch(void *state, unsigned mask, size_t first, size_t count, particles *dst) {
  cpu_state *s = state;
  if ((mask & s->snap_mask) != mask || first > s->snap.n || count > s->snap.n - first)
    return dr_fail(DR_EINTERNAL, "cpu backend: fetch of rows %zu .. %zu (mask 0x%x) from a snapshot of %zu (mask 0x%x)",
                   first, first + count, mask, s->snap.n, s->snap_mask);
  for (int a = 0; a < PARTICLE_ATTRS && count > 0; ++a)
    if (a == PA_owner && (mask & PA_BIT(owner)))
      copy_attr(s, a, particles_attr(dst, a), NULL, count);
    else if (mask >> a & 1u)
      memcpy(particles_attr(dst, a), (const char *)particles_attr(&s->snap, a) + first * particle_attrs[a].bytes,
             count * particle_attrs[a].bytes);
  dst->n = count;
  return DR_OK;
}

/* backend.h's fetch_rows: rows of the particles themselves, or of their held copy, copied (the
 * owner: this rank's). */
static int fetch_rows(void *state, size_t first, size_t count, particles *dst) {
  cpu_state *s = state;
  const particles *from = s->holding ? &s->held : &s->p;
  if (first > from->n || count > from->n - first)
    return dr_fail(DR_EINTERNAL, "cpu backend: fetch_rows of rows %zu .. %zu of %zu particles", first, first + count,
                   from->n);
  for (int a = 0; a < PARTICLE_ATTRS && count > 0; ++a)
    if (a == PA_owner)
      copy_attr(s, a, particles_attr(dst, a), NULL, count);
    else
      memcpy(particles_attr(dst, a), (const char *)particles_attr(from, a) + first * particle_attrs[a].bytes,
             count * particle_attrs[a].bytes);
  dst->n = count;
  return DR_OK;
}

/* backend.h's hold_rows: every attribute but the owner copied into s->held, whose capacity is the
 * particles' own (cap_n: memplan.c counts 124 B x cap(n)). */
static int hold_rows(void *state) {
  cpu_state *s = state;
  DR_TRY(particles_reserve(&s->held, s->cap_n > s->p.n ? s->cap_n : s->p.n));
  for (int a = 0; a < PARTICLE_ATTRS; ++a)
    if (a != PA_owner && s->p.n > 0) copy_attr(s, a, particles_attr(&s->held, a), particles_attr(&s->p, a), s->p.n);
  s->held.n = s->p.n;
  s->holding = 1;
  return DR_OK;
}

static size_t count(void *state) { return ((cpu_state *)state)->p.n; }

static int stats(void *state, backend_stats *out) {
  cpu_state *s = state;
  out->rebuilds = s->rebuilds;
  out->n_particles = s->p.n;
  out->n_blocks = s->n_blocks;
  out->vote_wait_s = 0.0; /* the host steps: no device waits for the vote */
  out->bytes = (double)s->cap_n * (2 * particles_record_bytes() + sizeof(int32_t) + 2 * sizeof(uint64_t)) +
               (double)s->cap_blocks * (s->bf * (sizeof(float) + (s->det ? sizeof(int64_t) : 0)) + sizeof(uint64_t) + 1) +
               (double)s->cap_pb * (3 + 27 + 1) * sizeof(int32_t) + (double)s->table.cap * 12;
  out->bytes += (double)s->held.cap * particles_record_bytes(); /* the checkpoint's copy */
  for (int a = 0; a < PARTICLE_ATTRS; ++a) /* the frame's snapshot */
    if (particles_attr(&s->snap, a)) out->bytes += (double)s->snap_cap * particle_attrs[a].bytes;
  return DR_OK;
}

static int set_particles(void *state, particles *p) {
  cpu_state *s = state;
  particles_free(&s->p);
  s->p = *p;
  memset(p, 0, sizeof *p);
  cpu_compact_round_from(s, 0);
  int rebuilt;
  return cpu_rebuild(s, 1, &rebuilt);
}

static int add_particles(void *state, const particles *p) {
  cpu_state *s = state;
  const size_t n = s->p.n;
  if (n + p->n > s->p.cap) {
    size_t cap = s->p.cap ? s->p.cap : 1024;
    while (cap < n + p->n) cap *= 2;
    DR_TRY(particles_reserve(&s->p, cap));
  }
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    const size_t b = particle_attrs[a].bytes;
    memcpy((char *)particles_attr(&s->p, a) + b * n, particles_attr(p, a), b * p->n);
  }
  s->p.n = n + p->n;
  cpu_compact_round_from(s, n);
  int rebuilt;
  return cpu_rebuild(s, 1, &rebuilt);
}

/* backend.h's emigrate: the leaving particles are appended to out in index order, the others
 * close ranks in theirs; the caller's rebuild-mapping sorts what is left. */
static int emigrate(void *state, const int32_t lo[3], const int32_t hi[3], particles *out) {
  cpu_state *s = state;
  size_t keep = 0;
  for (size_t i = 0; i < s->p.n; ++i) {
    int b[3], leave = 0;
    cpu_base_node(s, s->p.x + 3 * i, b);
    for (int a = 0; a < 3; ++a) leave |= (b[a] >> 2) < lo[a] || (b[a] >> 2) >= hi[a];
    if (leave) {
      DR_TRY(particles_push_copy(out, &s->p, i));
      out->owner[out->n - 1] = s->prm.rank * 256;
      continue;
    }
    if (keep != i)
      for (int a = 0; a < PARTICLE_ATTRS; ++a) {
        const size_t b = particle_attrs[a].bytes;
        memcpy((char *)particles_attr(&s->p, a) + b * keep, (char *)particles_attr(&s->p, a) + b * i, b);
      }
    ++keep;
  }
  s->p.n = keep;
  return DR_OK;
}

/* backend.h's particle_blocks: the mapping's particle blocks and their counts. */
static int particle_blocks(void *state, int (*add)(void *ctx, const int32_t blk[3], uint64_t count), void *ctx) {
  cpu_state *s = state;
  for (size_t q = 0; q < s->n_pb; ++q)
    if (s->pb_start[q + 1] > s->pb_start[q]) DR_TRY(add(ctx, s->pb_coord + 3 * q, s->pb_start[q + 1] - s->pb_start[q]));
  return DR_OK;
}

void cpu_particles_ops(backend *b) {
  b->download = download, b->snapshot = snapshot, b->fetch = fetch, b->fetch_rows = fetch_rows, b->hold_rows = hold_rows, b->count = count;
  b->stats = stats, b->set_particles = set_particles, b->add_particles = add_particles, b->emigrate = emigrate;
  b->particle_blocks = particle_blocks;
}
