// island_particles.cu - the island's particles: split among the members along an axis (at the
// start, from a source read twice, and again after a rank's migration), new particles and arriving
// records poured into the members up to an even share, leaving ones gathered member by member, and
// the members' particles downloaded or counted one after another.

#include "cuda_state.h"

int island_download(void *state, particles *out) {
  island *I = (island *)state;
  size_t n = 0;
  for (int k = 0; k < I->nm; ++k) n += I->m[k]->n;
  DR_TRY(particles_reserve(out, n));
  out->n = 0;
  particles part = {0};
  int rc = DR_OK;
  for (int k = 0; k < I->nm && rc == DR_OK; ++k) {
    rc = use(I->m[k]);
    if (rc == DR_OK) rc = cuda_download(I->m[k], &part);
    for (size_t i = 0; rc == DR_OK && i < part.n; ++i) rc = particles_push_copy(out, &part, i);
  }
  particles_free(&part);
  return rc;
}

typedef struct coord_index {
  float x;
  size_t i;
} coord_index;

static int by_coord(const void *a, const void *b) {
  const coord_index *p = (const coord_index *)a, *q = (const coord_index *)b;
  return p->x < q->x ? -1 : p->x > q->x ? 1 : (p->i > q->i) - (p->i < q->i);
}

/* p's particles in increasing coordinate along axis (ties by index); NULL when out of memory. */
static coord_index *sorted_along(const particles *p, int axis, const char *what) {
  coord_index *ci = (coord_index *)dr_malloc(sizeof *ci * (p->n ? p->n : 1), what);
  if (!ci) return NULL;
  for (size_t i = 0; i < p->n; ++i) ci[i] = (coord_index){p->x[3 * i + axis], i};
  qsort(ci, p->n, sizeof *ci, by_coord);
  return ci;
}

/* The static split (the paper's), on the positions alone (x: 3n floats): along the longest axis
 * of the particles' bounding box, evenly by count in the order of that coordinate (ties by index):
 * member[i] receives particle i's member; I->axis and I->cut are set. The host holds a
 * (coordinate, index) pair a particle meanwhile (16 B, counted). */
static_assert(MAX_GPUS <= 256, "island_assign numbers the members in a byte");
static int island_assign(island *I, const float *x, size_t n, uint8_t *member) {
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (size_t i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a) lo[a] = fminf(lo[a], x[3 * i + a]), hi[a] = fmaxf(hi[a], x[3 * i + a]);
  I->axis = 0;
  for (int a = 1; a < 3; ++a)
    if (hi[a] - lo[a] > hi[I->axis] - lo[I->axis]) I->axis = a;
  coord_index *ci = (coord_index *)memtally_malloc(MT_SORT, sizeof *ci * (n ? n : 1), "the island's split");
  if (!ci) return DR_ENOMEM;
  for (size_t i = 0; i < n; ++i) ci[i] = (coord_index){x[3 * i + I->axis], i};
  qsort(ci, n, sizeof *ci, by_coord);
  for (int k = 0; k < I->nm; ++k) {
    const size_t b = n * (size_t)k / (size_t)I->nm, e = n * (size_t)(k + 1) / (size_t)I->nm;
    for (size_t j = b; j < e; ++j) member[ci[j].i] = (uint8_t)k;
    if (k > 0) I->cut[k - 1] = b < n ? ci[b].x : hi[I->axis];
  }
  memtally_free(ci);
  return DR_OK;
}

/* parts[k] receives member k's particles of p (island_assign's split), in their order in p, the
 * order a streamed creation gives each member too (island_create_from). */
int island_split(island *I, const particles *p, particles *parts) {
  uint8_t *member = (uint8_t *)memtally_malloc(MT_SORT, p->n ? p->n : 1, "the island's split");
  if (!member) return DR_ENOMEM;
  int rc = island_assign(I, p->x, p->n, member);
  size_t count[MAX_GPUS] = {0};
  for (size_t i = 0; rc == DR_OK && i < p->n; ++i) ++count[member[i]];
  for (int k = 0; k < I->nm && rc == DR_OK; ++k) rc = particles_reserve(&parts[k], count[k]);
  for (size_t i = 0; rc == DR_OK && i < p->n; ++i) rc = particles_push_copy(&parts[member[i]], p, i);
  memtally_free(member);
  return rc;
}

/* particle_source_chunks's use in island_assign_source: a chunk's positions into x (ctx). */
static int positions_of(void *ctx, const particles *chunk, size_t done) {
  memcpy((float *)ctx + 3 * done, chunk->x, 3 * sizeof(float) * chunk->n);
  return DR_OK;
}

/* The split of a source's particles (island_create_from), read once for their positions (12 B a
 * particle on the host, counted, a chunk of MEM_CREATE_CHUNK particles at a time): *member (n
 * bytes, memtally_malloc; NULL on failure) numbers each particle's member. */
int island_assign_source(island *I, const particle_source *src, uint8_t **member) {
  const size_t n = src->n;
  *member = NULL;
  float *x = (float *)memtally_malloc(MT_PARTICLES, 3 * sizeof(float) * (n ? n : 1), "the island's split");
  if (!x) return DR_ENOMEM;
  int rc = particle_source_chunks(src, MEM_CREATE_CHUNK, positions_of, x);
  if (rc == DR_OK && !(*member = (uint8_t *)memtally_malloc(MT_SORT, n ? n : 1, "the island's split"))) rc = DR_ENOMEM;
  if (rc == DR_OK) rc = island_assign(I, x, n, *member);
  memtally_free(x);
  if (rc) {
    memtally_free(*member);
    *member = NULL;
  }
  return rc;
}

/* member_source: a member's rows of the island's source, read again from its start (the source's
 * rewind): those island_assign gave member k, in their order. */
static int member_next(void *ctx, particles *out, size_t max) {
  member_source *m = (member_source *)ctx;
  size_t added = 0;
  while (added < max) {
    if (m->at == m->buf.n) { /* the source's next chunk */
      if (m->row == m->src->n) break;
      const size_t want = m->src->n - m->row < MEM_CREATE_CHUNK ? m->src->n - m->row : MEM_CREATE_CHUNK;
      m->buf.n = 0;
      m->at = 0;
      DR_TRY(particle_source_take(m->src, &m->buf, want));
      m->row += want;
    }
    const size_t base = m->row - m->buf.n;
    for (; m->at < m->buf.n && added < max; ++m->at)
      if (m->member[base + m->at] == m->k) {
        DR_TRY(particles_push_copy(out, &m->buf, m->at));
        ++added;
      }
  }
  return DR_OK;
}

int member_source_open(const particle_source *src, const uint8_t *member, int k, member_source *m,
                       particle_source *out) {
  memset(m, 0, sizeof *m);
  m->src = src, m->member = member, m->k = k;
  DR_TRY(particles_reserve(&m->buf, src->n < MEM_CREATE_CHUNK ? src->n : MEM_CREATE_CHUNK)); /* no growth */
  size_t n = 0;
  for (size_t i = 0; i < src->n; ++i) n += member[i] == k;
  *out = (particle_source){.n = n, .next = member_next, .ctx = m};
  if (!src->rewind) return dr_fail(DR_EINTERNAL, "cuda island: a particle source that cannot be read twice");
  return src->rewind(src->ctx);
}

void member_source_close(member_source *m) { particles_free(&m->buf); }

/* New particles (sources, backend.h cuda_add_particles) on the island: taken in order along the split
 * axis and poured into the members in that order, each filled up to an even share of the new total
 * (a member already above its share takes none), so the members stay balanced by count and each
 * receives a contiguous run along the axis; then every member rebuilds and the tags are renewed. */
/* How many of m new particles (next of them placed on members before k) member k takes: up to its
 * even share of the island's total after the addition; the last member takes the rest. */
static size_t island_give(const island *I, int k, size_t total, size_t m, size_t next) {
  const size_t share = total * (size_t)(k + 1) / (size_t)I->nm - total * (size_t)k / (size_t)I->nm;
  size_t give = share > I->m[k]->n ? share - I->m[k]->n : 0;
  if (k == I->nm - 1 || give > m - next) give = m - next;
  return give;
}

int island_add_particles(void *state, const particles *p) {
  island *I = (island *)state;
  if (p->n == 0) return DR_OK;
  coord_index *ci = sorted_along(p, I->axis, "island sources");
  if (!ci) return DR_ENOMEM;
  size_t total = p->n;
  for (int k = 0; k < I->nm; ++k) total += I->m[k]->n;
  particles part;
  memset(&part, 0, sizeof part);
  int rc = DR_OK;
  size_t next = 0;
  for (int k = 0; k < I->nm && rc == DR_OK && next < p->n; ++k) {
    const size_t give = island_give(I, k, total, p->n, next);
    if (give == 0) continue;
    part.n = 0;
    rc = particles_reserve(&part, give);
    for (size_t j = next; j < next + give && rc == DR_OK; ++j) rc = particles_push_copy(&part, p, ci[j].i);
    if (rc == DR_OK && (rc = use(I->m[k])) == DR_OK) rc = append_particles(I->m[k], &part);
    next += give;
  }
  particles_free(&part);
  free(ci);
  DR_TRY(rc);
  return island_rebuild(I);
}

int island_emigrate(void *state, const int32_t lo[3], const int32_t hi[3], particles *out) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_emigrate(I->m[k], lo, hi, out));
  }
  return DR_OK;
}

/* backend.h's emigrate_records on the island: each member packs its leaving particles on its
 * device (cuda_emigrate_records) and keeps them there; the island's records are the members'
 * in member order (island_read_records). */
int island_emigrate_records(void *state, const int32_t lo[3], const int32_t hi[3], size_t *n) {
  island *I = (island *)state;
  *n = 0;
  for (int k = 0; k < I->nm; ++k) {
    size_t m = 0;
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_emigrate_records(I->m[k], lo, hi, &m));
    *n += m;
  }
  return DR_OK;
}

/* backend.h's read_records on the island: the range's part on each member read from that member. */
int island_read_records(void *state, size_t first, size_t count, void *rec) {
  island *I = (island *)state;
  const size_t rb = particles_record_bytes();
  size_t all = 0;
  for (int k = 0; k < I->nm; ++k) all += I->m[k]->n_rec;
  if (first > all || count > all - first) /* refused before a record is copied */
    return dr_fail(DR_EINTERNAL, "island: read_records %zu..%zu of %zu emigrants", first, first + count, all);
  size_t at = 0; /* the island's index of member k's first record */
  for (int k = 0; k < I->nm && count > 0; at += I->m[k]->n_rec, ++k) {
    const size_t mine = I->m[k]->n_rec;
    if (first >= at + mine) continue;
    const size_t from = first - at, take = mine - from < count ? mine - from : count;
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_read_records(I->m[k], from, take, rec));
    rec = (char *)rec + take * rb, first += take, count -= take;
  }
  return DR_OK;
}

/* backend.h's add_records on the island: as island_add_particles (the new particles go to the
 * members along the split axis, each up to its even share), each member's share gathered into
 * pinned memory and unpacked on its device (append_records); the caller's rebuild maps them. */
int island_add_records(void *state, const void *rec, size_t m) {
  island *I = (island *)state;
  if (m == 0) return DR_OK;
  const size_t rb = particles_record_bytes();
  const unsigned char *r = (const unsigned char *)rec;
  coord_index *ci = (coord_index *)dr_malloc(sizeof *ci * m, "island arrivals");
  if (!ci) return DR_ENOMEM;
  for (size_t i = 0; i < m; ++i) {
    float x[3]; /* a record starts with the position */
    memcpy(x, r + rb * i, sizeof x);
    ci[i] = (coord_index){x[I->axis], i};
  }
  qsort(ci, m, sizeof *ci, by_coord);
  size_t total = m;
  for (int k = 0; k < I->nm; ++k) total += I->m[k]->n;
  int rc = DR_OK;
  size_t next = 0;
  for (int k = 0; k < I->nm && rc == DR_OK && next < m; ++k) {
    const size_t give = island_give(I, k, total, m, next);
    if (give == 0) continue;
    rc = cuda_host_pinned(&I->rec_in, &I->rec_in_cap, give * rb, "the particles arriving at the rank");
    for (size_t j = 0; j < give && rc == DR_OK; ++j) memcpy((char *)I->rec_in + rb * j, r + rb * ci[next + j].i, rb);
    if (rc == DR_OK && (rc = use(I->m[k])) == DR_OK) rc = append_records(I->m[k], I->rec_in, give);
    next += give;
  }
  free(ci);
  return rc;
}

/* backend.h's reserve_records for an island: every member's, each for all n emigrants (the
 * particles leaving the rank may all come from the member at one end of the island's axis) and
 * a round's arrivals, and the island's buffer of a member's share of a round. */
int island_reserve_records(void *state, size_t n, size_t round) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_reserve_records(I->m[k], n, round));
  }
  return round ? cuda_host_pinned(&I->rec_in, &I->rec_in_cap, round * particles_record_bytes(),
                                  "the particles arriving at the rank")
               : DR_OK;
}

int island_particle_blocks(void *state, int (*add)(void *ctx, const int32_t blk[3], uint64_t count),
                           void *ctx) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_particle_blocks(I->m[k], add, ctx));
  }
  return DR_OK;
}

/* Particles that migrated between ranks or a rebalance (sim.c, at a rebuild-mapping): split
 * again along the island's axis, as at the start, and every member rebuilt. */
int island_set_particles(void *state, particles *p) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    CU(cudaStreamSynchronize(I->m[k]->stream)); /* nothing queued still reads the packets */
  }
  particles parts[MAX_GPUS];
  memset(parts, 0, sizeof parts);
  int rc = island_split(I, p, parts);
  for (int k = 0; k < I->nm && rc == DR_OK; ++k) {
    if ((rc = use(I->m[k])) == DR_OK) rc = cuda_set_particles(I->m[k], &parts[k]); /* takes parts[k] over */
  }
  for (int k = 0; k < I->nm; ++k) particles_free(&parts[k]);
  DR_TRY(rc);
  particles_free(p);
  return island_tag(I);
}
