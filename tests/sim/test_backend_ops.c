/* test_backend_ops - backend.h's operations one by one, the same checks on every backend (the
 * conformance test of the interface, as SUNDIALS and libCEED test each backend from one source):
 * argv[1] cpu or cuda (exit 77 where no GPU is usable; DRIFT_DEVICES=0,0 makes the cuda backend an
 * island of two members on one GPU). Particles compare as sets (a backend's order is its own), by
 * id, every attribute bitwise but owner (the device that computed it). Expected:
 *   - create takes the particles over (leaves them empty), and download gives them back;
 *   - snapshot, then fetch in chunks of 7 rows (which span an island's members), gives download's
 *     rows in its order, bitwise (owner included); fetch writes only the attributes asked for, and
 *     refuses rows past the snapshot's end and attributes it does not hold; fetch_rows (a
 *     checkpoint's chunks of the particles themselves) in chunks of 7 from row 0 gives download's
 *     rows too, bitwise, and refuses rows past the end;
 *   - set_particles takes its particles over and the backend holds exactly them; add_particles
 *     leaves its own unchanged and the backend holds both sets;
 *   - after each of those, stats' n_particles and count (where present) give the download's count,
 *     and after a rebuild-mapping particle_blocks' counts add up to it;
 *   - emigrate removes exactly the particles whose particle block lies outside [lo, hi) and
 *     returns them bitwise; what stays (after the rebuild-mapping the caller forces) and what left
 *     together are the set before it;
 *   - after a P2G (float and deterministic mode), node_masks marks exactly the nodes that hold a
 *     non-zero sum (deterministic: every node of a touched block), the marked nodes hold all the
 *     mass, and pack_nodes of the touched blocks with every node marked, added into a second backend
 *     holding the same particles (unpack_add_nodes), leaves there its own sums plus the message,
 *     value by value: the sums doubled (bitwise in deterministic mode, within rounding in float
 *     mode, whose atomics add in any order). */
#include "simtest.h"

#include "jelly_block.h"

#include "physics/bspline.h"
#include "physics/sparse.h"

static int kind(void) { return test_backend_ >= 0 ? test_backend_ : BACKEND_CPU; }

/* n particles, ids from id0, in a slab above the block of jelly_block.h; every attribute that
 * particles_push leaves at its rest value (C, F, logJp) given one of its own, so that a backend
 * that dropped or mixed one up shows. */
static void slab(const material_params *m, uint64_t id0, size_t n, particles *p) {
  const float h = 0.5f * DX, vol = h * h * h;
  for (size_t i = 0; i < n; ++i) {
    const float x[3] = {0.2f + h * (float)(i % 40), 0.75f + h * (float)(i / 40 % 6), 0.3f + h * (float)(i / 240)};
    const float v[3] = {0.1f * (float)(i % 7), -0.2f, 0.03f * (float)(i % 5)};
    MUST(particles_push(p, x, v, m->density * vol, vol, id0 + i, 0));
    const size_t k = p->n - 1;
    for (int c = 0; c < 9; ++c) p->C[9 * k + c] = 0.01f * (float)((int)(i + (size_t)c) % 11 - 5);
    p->F[9 * k + 1] = 1e-3f * (float)(i % 3);
    p->logjp[k] = -1e-3f * (float)(i % 4);
  }
}

static void copy_all(const particles *from, particles *to) {
  for (size_t i = 0; i < from->n; ++i) MUST(particles_push_copy(to, from, i));
}

/* Every attribute but owner bitwise equal: particle i of a and j of b. */
static int same_particle(const particles *a, size_t i, const particles *b, size_t j) {
  return a->id[i] == b->id[j] && !memcmp(a->x + 3 * i, b->x + 3 * j, 3 * sizeof(float)) &&
         !memcmp(a->v + 3 * i, b->v + 3 * j, 3 * sizeof(float)) && !memcmp(a->C + 9 * i, b->C + 9 * j, 9 * sizeof(float)) &&
         !memcmp(a->F + 9 * i, b->F + 9 * j, 9 * sizeof(float)) && !memcmp(&a->mass[i], &b->mass[j], sizeof(float)) &&
         !memcmp(&a->vol0[i], &b->vol0[j], sizeof(float)) && !memcmp(&a->logjp[i], &b->logjp[j], sizeof(float)) &&
         a->material[i] == b->material[j];
}

/* got holds exactly the particles of want, by id, bitwise. */
static void same_set(const char *what, const particles *want, const particles *got) {
  CHECK(got->n == want->n, "%s: %zu particles, expected %zu", what, got->n, want->n);
  size_t *iw = order_by_id(want), *ig = order_by_id(got), bad = 0;
  for (size_t q = 0; q < want->n && q < got->n; ++q) {
    if (same_particle(want, iw[q], got, ig[q])) continue;
    if (bad++ < 3)
      fprintf(stderr, "  %s: particle %llu: %s\n", what, (unsigned long long)want->id[iw[q]],
              want->id[iw[q]] != got->id[ig[q]] ? "another id in its place" : "its state differs");
  }
  CHECK(bad == 0, "%s: %zu particles differ from the expected set", what, bad);
  free(iw);
  free(ig);
}

static int add_count(void *ctx, const int32_t blk[3], uint64_t count) {
  (void)blk;
  *(uint64_t *)ctx += count;
  return DR_OK;
}

/* A snapshot of every attribute fetched 7 rows at a time (into the backend's alloc_sums memory, as
 * sim_output.c does) gives download's rows in download's order, bitwise, owner included; a
 * snapshot of some attributes: fetch writes those and the count only, and no row past its end. */
static void snapshots_as_download(const char *what, backend *b, const particles *down) {
  enum { CHUNK = 7 };
  particles c = {0};
  const size_t cap = down->n + 1;
  void *mem[PARTICLE_ATTRS] = {0}, *all[PARTICLE_ATTRS] = {0};
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    if (b->alloc_sums) MUST(b->alloc_sums(b->state, CHUNK * particle_attrs[a].bytes, 0, &mem[a]));
    else mem[a] = malloc(CHUNK * particle_attrs[a].bytes);
    all[a] = malloc(cap * particle_attrs[a].bytes);
    *(void **)((char *)&c + particle_attrs[a].offset) = mem[a];
  }
  const unsigned every = (1u << PARTICLE_ATTRS) - 1;
  size_t n = 0;
  MUST(b->snapshot(b->state, every, &n));
  CHECK(n == down->n, "%s: snapshot of %zu particles, download %zu", what, n, down->n);
  for (size_t first = 0; first < n && n == down->n; first += CHUNK) {
    const size_t count = n - first < CHUNK ? n - first : CHUNK;
    c.n = 0;
    MUST(b->fetch(b->state, every, first, count, &c));
    CHECK(c.n == count, "%s: fetch of %zu rows gives %zu", what, count, c.n);
    for (int a = 0; a < PARTICLE_ATTRS; ++a)
      memcpy((char *)all[a] + first * particle_attrs[a].bytes, mem[a], count * particle_attrs[a].bytes);
  }
  for (int a = 0; a < PARTICLE_ATTRS && n == down->n; ++a)
    CHECK(!memcmp(all[a], particles_attr(down, a), down->n * particle_attrs[a].bytes),
          "%s: the snapshot's %s differs from download's", what, particle_attrs[a].name);
  CHECK(b->fetch(b->state, every, n, 1, &c) != 0, "%s: fetch of row %zu of a snapshot of %zu succeeds", what, n, n);
  dr_clear();
  /* positions and ids only: the other arrays keep what they hold */
  MUST(b->snapshot(b->state, PA_BIT(x) | PA_BIT(id), &n));
  CHECK(n == down->n, "%s: snapshot of x and id of %zu particles, download %zu", what, n, down->n);
  memset(mem[PA_v], 0x7f, CHUNK * particle_attrs[PA_v].bytes);
  const size_t count = n < CHUNK ? n : CHUNK;
  c.n = 0;
  MUST(b->fetch(b->state, PA_BIT(x) | PA_BIT(id), 0, count, &c));
  int untouched = 1;
  for (size_t i = 0; i < 3 * CHUNK; ++i) untouched &= ((uint32_t *)mem[PA_v])[i] == 0x7f7f7f7fu;
  CHECK(untouched, "%s: fetch of x and id wrote the velocities", what);
  CHECK(c.n == count && !memcmp(c.x, down->x, count * 3 * sizeof(float)), "%s: fetch of x and id: x differs", what);
  CHECK(b->fetch(b->state, PA_BIT(v), 0, count, &c) != 0, "%s: fetch of v from a snapshot of x and id succeeds", what);
  dr_clear();
  /* a checkpoint's way: fetch_rows of the particles themselves, 7 rows at a time from row 0 */
  CHECK(b->fetch_rows != NULL, "%s: the backend has no fetch_rows", what);
  for (size_t first = 0; b->fetch_rows && first < down->n; first += CHUNK) {
    const size_t rows = down->n - first < CHUNK ? down->n - first : CHUNK;
    c.n = 0;
    MUST(b->fetch_rows(b->state, first, rows, &c));
    CHECK(c.n == rows, "%s: fetch_rows of %zu rows gives %zu", what, rows, c.n);
    for (int a = 0; a < PARTICLE_ATTRS; ++a)
      memcpy((char *)all[a] + first * particle_attrs[a].bytes, mem[a], rows * particle_attrs[a].bytes);
  }
  for (int a = 0; a < PARTICLE_ATTRS && b->fetch_rows; ++a)
    CHECK(!memcmp(all[a], particles_attr(down, a), down->n * particle_attrs[a].bytes),
          "%s: fetch_rows' %s differs from download's", what, particle_attrs[a].name);
  if (b->fetch_rows)
    CHECK(b->fetch_rows(b->state, down->n, 1, &c) != 0, "%s: fetch_rows of row %zu of %zu succeeds", what, down->n,
          down->n);
  dr_clear();
  for (int a = 0; a < PARTICLE_ATTRS; ++a) {
    if (b->free_sums) b->free_sums(mem[a], 0);
    else free(mem[a]);
    free(all[a]);
  }
}

/* b holds exactly want: download, snapshot and fetch, stats, count, and particle_blocks after a
 * rebuild-mapping. */
static void holds(const char *what, backend *b, const particles *want) {
  particles got = {0};
  MUST(b->download(b->state, &got));
  same_set(what, want, &got);
  snapshots_as_download(what, b, &got);
  backend_stats st;
  MUST(b->stats(b->state, &st));
  CHECK(st.n_particles == want->n, "%s: stats says %llu particles, expected %zu", what,
        (unsigned long long)st.n_particles, want->n);
  if (b->count) CHECK(b->count(b->state) == want->n, "%s: count says %zu, expected %zu", what, b->count(b->state), want->n);
  int rebuilt;
  MUST(b->rebuild(b->state, 1, &rebuilt));
  uint64_t counted = 0;
  MUST(b->particle_blocks(b->state, add_count, &counted));
  CHECK(counted == want->n, "%s: particle_blocks counts %llu particles, expected %zu", what,
        (unsigned long long)counted, want->n);
  particles_free(&got);
}

/* create, set_particles, add_particles. */
static void particles_in_and_out(void) {
  const material_params m = jelly();
  const sim_params prm = params(&m, 0);
  particles p = {0}, want = {0};
  block(&m, &p);
  copy_all(&p, &want);
  backend b;
  MUST(backend_create(kind(), &prm, &p, &b));
  CHECK(p.n == 0, "create left %zu particles in the caller's slice (it takes them over)", p.n);
  holds("create", &b, &want);

  particles q = {0}, r = {0};
  want.n = 0;
  slab(&m, 100000, 2000, &q);
  copy_all(&q, &want);
  MUST(b.set_particles(b.state, &q));
  CHECK(q.n == 0, "set_particles left %zu particles in the caller's slice (it takes them over)", q.n);
  holds("set_particles", &b, &want);

  if (b.add_particles) {
    slab(&m, 200000, 1234, &r);
    particles r0 = {0};
    copy_all(&r, &r0);
    MUST(b.add_particles(b.state, &r));
    same_set("add_particles' own particles", &r0, &r);
    copy_all(&r, &want);
    holds("add_particles", &b, &want);
    particles_free(&r0);
  } else {
    printf("  the %s backend has no add_particles\n", b.name);
  }
  backend_destroy(&b);
  particles_free(&p), particles_free(&q), particles_free(&r), particles_free(&want);
}

static int outside(const sim_params *prm, const float x[3], const int32_t lo[3], const int32_t hi[3]) {
  const float inv_dx = 1.0f / (float)prm->dx;
  for (int a = 0; a < 3; ++a) { /* sim.c's particle_block */
    const float origin = (float)(prm->domain_min[a] - GRID_PAD * prm->dx);
    const int32_t b = bspline_base((x[a] - origin) * inv_dx) >> 2;
    if (b < lo[a] || b >= hi[a]) return 1;
  }
  return 0;
}

/* emigrate: a box that cuts the block and the slab of particles in two along x. */
static void emigrate(void) {
  const material_params m = jelly();
  const sim_params prm = params(&m, 0);
  particles p = {0}, before = {0};
  block(&m, &p);
  slab(&m, 100000, 2000, &p);
  backend b;
  MUST(backend_create(kind(), &prm, &p, &b));
  for (int s = 0; s < 10; ++s) step(&b); /* the backend's own order, not the one given */
  MUST(b.download(b.state, &before));
  const int32_t lo[3] = {-1000, -1000, -1000}, hi[3] = {(int32_t)((0.4 / DX + GRID_PAD) / 4), 1000, 1000};
  particles left = {0}, stay = {0}, got = {0}, back = {0};
  for (size_t i = 0; i < before.n; ++i)
    MUST(particles_push_copy(outside(&prm, before.x + 3 * i, lo, hi) ? &left : &stay, &before, i));
  CHECK(left.n > 0 && stay.n > 0, "emigrate's box: %zu particles outside, %zu inside (expected some of each)", left.n,
        stay.n);
  MUST(b.emigrate(b.state, lo, hi, &got));
  same_set("emigrate's particles", &left, &got);
  int rebuilt;
  MUST(b.rebuild(b.state, 1, &rebuilt));
  holds("after emigrate", &b, &stay);
  MUST(b.download(b.state, &back));
  copy_all(&got, &back);
  same_set("what stayed and what left", &before, &back);
  printf("emigrate: %zu particles, %zu left, %zu stayed\n", before.n, got.n, stay.n);
  backend_destroy(&b);
  particles_free(&p), particles_free(&before), particles_free(&left), particles_free(&stay), particles_free(&got);
  particles_free(&back);
}

/* A backend holding the jelly block, its mapping rebuilt and one P2G done; the list of its mapped
 * blocks (*n of them). */
static backend scattered(const sim_params *prm, int32_t **idx, size_t *n) {
  particles p = {0};
  block(&prm->materials[0], &p);
  backend b;
  MUST(backend_create(kind(), prm, &p, &b));
  int rebuilt;
  MUST(b.rebuild(b.state, 1, &rebuilt));
  MUST(b.p2g(b.state, DT));
  const uint64_t *codes;
  MUST(b.blocks(b.state, &codes, n));
  *idx = malloc(sizeof **idx * (*n ? *n : 1));
  for (size_t k = 0; k < *n; ++k) (*idx)[k] = (int32_t)k;
  /* every block shared, as exchange_setup marks its lists: the node exchange's calls take only lists
   * that mark_shared has seen (an island keeps its members' parts of each) */
  MUST(b.mark_shared(b.state, NULL, 0));
  MUST(b.mark_shared(b.state, *idx, *n));
  particles_free(&p);
  return b;
}

/* The node exchange's calls after one P2G, in float (det 0) or deterministic mode. */
static void node_exchange(int det) {
  const char *mode = det ? "deterministic" : "float";
  const material_params m = jelly();
  const sim_params prm = params(&m, det);
  int32_t *idx, *idx_b;
  size_t n, n_b;
  backend A = scattered(&prm, &idx, &n), B = scattered(&prm, &idx_b, &n_b);
  if (!A.node_masks || !A.pack_nodes || !A.unpack_add_nodes || !A.blocks) {
    CHECK(0, "%s: the %s backend has no node exchange", mode, A.name);
    return;
  }
  const uint64_t *ca, *cb;
  MUST(A.blocks(A.state, &ca, &n));
  MUST(B.blocks(B.state, &cb, &n_b));
  CHECK(n == n_b && !memcmp(ca, cb, n * sizeof *ca), "%s: two backends of the same particles map different blocks",
        mode);
  const int ints = A.sums_int64;
  CHECK(ints == det, "%s: sums_int64 %d", mode, ints);
  /* values per block: block_sums, or where it is 0 mass and momentum (4 channels), as exchange.c reads it */
  const size_t bsums = A.block_sums > 0 ? (size_t)A.block_sums : 4 * BLOCK_NODES;
  const size_t esz = ints ? sizeof(int64_t) : sizeof(float), ch = bsums / BLOCK_NODES, vb = bsums * esz;
  CHECK(bsums % BLOCK_NODES == 0, "%s: block_sums %d is not a multiple of %d nodes", mode, A.block_sums, BLOCK_NODES);
  uint64_t *mask = malloc(sizeof *mask * n), *mask_b = malloc(sizeof *mask_b * n), *ones = malloc(sizeof *ones * n);
  uint32_t *base = malloc(sizeof *base * n);
  char *whole = malloc(vb * n);
  for (size_t k = 0; k < n; ++k) ones[k] = ~0ull, base[k] = (uint32_t)(64 * k);
  MUST(A.node_masks(A.state, idx, n, mask));
  MUST(A.pack_nodes(A.state, idx, n, ones, base, whole));
  MUST(B.node_masks(B.state, idx_b, n, mask_b));
  CHECK(!memcmp(mask, mask_b, sizeof *mask * n), "%s: two backends of the same particles mark different nodes", mode);

  /* the masks against the sums; channel 0 is the mass */
  size_t wrong = 0, touched = 0;
  double mass = 0, particles_mass = 0;
  for (size_t k = 0; k < n; ++k) {
    uint64_t nonzero = 0;
    for (int nd = 0; nd < 64; ++nd)
      for (size_t c = 0; c < ch; ++c)
        for (size_t j = 0; j < esz; ++j) nonzero |= (uint64_t)(whole[k * vb + (c * 64 + (size_t)nd) * esz + j] != 0) << nd;
    if (det)
      wrong += (mask[k] != 0 && mask[k] != ~0ull) || (nonzero && mask[k] != ~0ull);
    else
      wrong += mask[k] != nonzero;
    touched += mask[k] != 0;
    for (int nd = 0; nd < 64; ++nd) {
      if (!((mask[k] >> nd) & 1u)) continue;
      const char *v = whole + k * vb + (size_t)nd * esz;
      if (ints) {
        int64_t q;
        memcpy(&q, v, sizeof q);
        mass += (double)q / prm.fix_scale[0];
      } else {
        float f;
        memcpy(&f, v, sizeof f);
        mass += f;
      }
    }
  }
  particles all = {0};
  MUST(A.download(A.state, &all));
  for (size_t i = 0; i < all.n; ++i) particles_mass += all.mass[i];
  printf("%s: %zu blocks mapped, %zu touched; mass on the marked nodes %.9g kg, of the particles %.9g kg\n", mode, n,
         touched, mass, particles_mass);
  CHECK(wrong == 0, "%s: %zu blocks' node masks differ from their non-zero sums", mode, wrong);
  CHECK(touched > 0, "%s: no block touched", mode);
  CHECK(fabs(mass - particles_mass) <= 1e-5 * particles_mass, "%s: the marked nodes hold %.9g kg, the particles %.9g kg",
        mode, mass, particles_mass);

  /* the touched blocks, every node marked, from A into B */
  int32_t *t = malloc(sizeof *t * (touched ? touched : 1));
  size_t nt = 0;
  for (size_t k = 0; k < n; ++k)
    if (mask[k]) t[nt++] = (int32_t)k;
  MUST(A.mark_shared(A.state, t, nt));
  MUST(B.mark_shared(B.state, t, nt));
  char *msg = malloc(vb * (nt ? nt : 1)), *own = malloc(vb * (nt ? nt : 1)), *sum = malloc(vb * (nt ? nt : 1));
  MUST(A.pack_nodes(A.state, t, nt, ones, base, msg));
  MUST(B.pack_nodes(B.state, t, nt, ones, base, own));
  MUST(B.unpack_add_nodes(B.state, t, nt, ones, base, msg));
  MUST(B.node_masks(B.state, t, nt, mask_b));
  MUST(B.pack_nodes(B.state, t, nt, ones, base, sum));
  size_t not_sum = 0, not_double = 0;
  double vmax = 0, dmax = 0, emax = 0;
  for (size_t v = 0; v < nt * bsums; ++v) {
    if (ints) {
      int64_t a, o, s;
      memcpy(&a, msg + v * esz, esz), memcpy(&o, own + v * esz, esz), memcpy(&s, sum + v * esz, esz);
      not_sum += s != o + a;
      not_double += o != a;
    } else {
      float a, o, s;
      memcpy(&a, msg + v * esz, esz), memcpy(&o, own + v * esz, esz), memcpy(&s, sum + v * esz, esz);
      const float expect = o + a;
      not_sum += memcmp(&s, &expect, sizeof s) != 0;
      emax = fmax(emax, fabs((double)s - expect));
      vmax = fmax(vmax, fabs(a));
      dmax = fmax(dmax, fabs((double)o - a));
    }
  }
  if (!ints) not_double = dmax > 1e-5 * vmax;
  /* Float sums: the CPU and one GPU add the message to the very sums pack_nodes read (bitwise
   * o + a); an island's pack_nodes adds its members' partial sums, and the message lands in one
   * member's, so the sum read back is the same three terms added in another order: within rounding. */
  if (!ints && A.n_devices > 1) {
    printf("%s: island of %d: %zu values differ from o + a in the last bits, at most %g of %g\n", mode, A.n_devices,
           not_sum, emax, vmax);
    not_sum = emax > 1e-6 * vmax;
  }
  if (ints)
    printf("%s: %zu touched blocks sent, %zu values; own sums against the message: %zu differ\n", mode, nt,
           nt * bsums, not_double);
  else
    printf("%s: %zu touched blocks sent, %zu values; own sums against the message: largest difference %g of %g\n",
           mode, nt, nt * bsums, dmax, vmax);
  CHECK(not_sum == 0, "%s: %zu values after unpack_add_nodes are not the backend's own sums plus the message", mode,
        not_sum);
  CHECK(not_double == 0, "%s: the two backends' sums differ (%s)", mode, ints ? "values" : "beyond rounding");
  /* the step ends as the protocol does (the message stays alive until the next g2p returns) */
  MUST(A.grid_update(A.state, DT));
  MUST(A.g2p(A.state, DT));
  MUST(B.grid_update(B.state, DT));
  MUST(B.g2p(B.state, DT));
  backend_destroy(&A);
  backend_destroy(&B);
  free(idx), free(idx_b), free(mask), free(mask_b), free(ones), free(base), free(whole), free(t), free(msg), free(own);
  free(sum);
  particles_free(&all);
}

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  particles_in_and_out();
  emigrate();
  node_exchange(0);
  node_exchange(1);
  return finish("test_backend_ops");
}
