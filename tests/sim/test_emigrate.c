/* test_emigrate - backend.h's emigrate, the particles that leave a rank at a rebuild-mapping
 * (sim.c's redistribute), on the backend of argv[1] (cpu, or cuda: exit 77 without a GPU).
 *
 * A block of elastic material, thrown sideways and falling, steps a while (so that the
 * backend's own order of its particles is not the order they were given in); then a box of
 * particle blocks that cuts through it is applied. Expected, from a download taken just before
 * and sim.c's rule for a particle's block (bspline_base((x - origin) / dx) >> 2, in float, with
 * origin = domain_min - GRID_PAD dx):
 *   - emigrate returns exactly the particles whose block lies outside the box, each with every
 *     attribute bitwise as the download had it (id, x, v, C, F, mass, volume, logJp, material);
 *     a second emigrate before the rebuild-mapping (a smaller box) returns only those the first
 *     did not;
 *   - after the rebuild-mapping the caller forces, the backend holds exactly the others,
 *     bitwise unchanged;
 *   - given back with add_particles, and stepped on, the set matches a backend that never let them
 *     go, bitwise: both run in deterministic mode, whose fixed-point sums do not depend on the
 *     order of the particles;
 *   - a box holding every particle lets none go (and changes nothing); a box holding none lets
 *     every particle go and leaves the backend empty, and it takes them all back;
 *   - where the backend has emigrate_records and add_records (cuda), the same with the particles
 *     as records: exactly the particles outside, bitwise, with this GPU as their owner, the rest
 *     unchanged, and given back, stepped on, bitwise the reference's;
 *   - count, where the backend has it, agrees with the download after every change;
 *   - particle_blocks (the load balance's counts) right after a rebuild-mapping: exactly the
 *     particle blocks of the downloaded particles (sparse_particle_block of each one's base node)
 *     with their counts, every block once; none for an empty backend; an add that fails ends the
 *     walk with its status. */
#include "simtest.h"

#include "jelly_block.h"

#include "physics/bspline.h"
#include "physics/sparse.h"

static int backend_kind(void) { return test_backend_ >= 0 ? test_backend_ : BACKEND_CPU; }

static void block_of(const sim_params *prm, const float x[3], int32_t blk[3]) {
  const float inv_dx = 1.0f / (float)prm->dx;
  for (int a = 0; a < 3; ++a) {
    const float origin = (float)(prm->domain_min[a] - GRID_PAD * prm->dx);
    blk[a] = bspline_base((x[a] - origin) * inv_dx) >> 2;
  }
}

static int outside(const sim_params *prm, const particles *p, size_t i, const int32_t lo[3], const int32_t hi[3]) {
  int32_t b[3];
  block_of(prm, p->x + 3 * i, b);
  return b[0] < lo[0] || b[0] >= hi[0] || b[1] < lo[1] || b[1] >= hi[1] || b[2] < lo[2] || b[2] >= hi[2];
}

/* Every attribute but owner (the device that computed it) bitwise equal, particle i of a and j of b. */
static int same_state(const particles *a, size_t i, const particles *b, size_t j) {
  return a->id[i] == b->id[j] && !memcmp(a->x + 3 * i, b->x + 3 * j, 3 * sizeof(float)) &&
         !memcmp(a->v + 3 * i, b->v + 3 * j, 3 * sizeof(float)) && !memcmp(a->C + 9 * i, b->C + 9 * j, 9 * sizeof(float)) &&
         !memcmp(a->F + 9 * i, b->F + 9 * j, 9 * sizeof(float)) && !memcmp(&a->mass[i], &b->mass[j], sizeof(float)) &&
         !memcmp(&a->vol0[i], &b->vol0[j], sizeof(float)) && !memcmp(&a->logjp[i], &b->logjp[j], sizeof(float)) &&
         a->material[i] == b->material[j];
}

/* b holds exactly the particles of a (those outside [lo, hi) where want_outside, those inside
 * where not; all of them where lo is NULL), bitwise by id. Returns the mismatches. */
static size_t compare_subset(const char *what, const sim_params *prm, const particles *a, const int32_t *lo,
                             const int32_t *hi, int want_outside, const particles *b) {
  size_t *ia = order_by_id(a), *ib = order_by_id(b), bad = 0, j = 0, expected = 0;
  for (size_t q = 0; q < a->n; ++q) {
    const size_t i = ia[q];
    if (lo && outside(prm, a, i, lo, hi) != want_outside) continue;
    ++expected;
    if (j >= b->n || !same_state(a, i, b, ib[j])) {
      if (bad++ < 3)
        fprintf(stderr, "  %s: particle %llu: %s\n", what, (unsigned long long)a->id[i],
                j >= b->n ? "missing" : b->id[ib[j]] != a->id[i] ? "another id in its place" : "its state changed");
    }
    ++j;
  }
  CHECK(b->n == expected, "%s: %zu particles, expected %zu", what, b->n, expected);
  CHECK(bad == 0, "%s: %zu particles differ from the expectation", what, bad);
  free(ia);
  free(ib);
  return bad;
}

/* particle_blocks' pairs, as (block code, count), in the order given. */
typedef struct pairs {
  uint64_t (*v)[2];
  size_t n, cap;
} pairs;

static int add_pair(void *ctx, const int32_t blk[3], uint64_t count) {
  pairs *P = ctx;
  if (P->n == P->cap) {
    P->cap = P->cap ? 2 * P->cap : 256;
    P->v = realloc(P->v, P->cap * sizeof *P->v);
    if (!P->v) return DR_ENOMEM;
  }
  P->v[P->n][0] = sparse_block_code(blk[0], blk[1], blk[2]);
  P->v[P->n][1] = count;
  ++P->n;
  return DR_OK;
}

static int fail_second(void *ctx, const int32_t blk[3], uint64_t count) {
  (void)blk, (void)count;
  return ++*(int *)ctx >= 2 ? DR_EINTERNAL : DR_OK;
}

static int cmp_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* particle_blocks of b against the blocks of its particles (downloaded), right after a
 * rebuild-mapping: the same (code, count) pairs, each block once. */
static void check_particle_blocks(const char *what, const sim_params *prm, backend *b) {
  particles p = {0};
  MUST(b->download(b->state, &p));
  uint64_t *code = malloc((p.n ? p.n : 1) * sizeof *code);
  MUST(code ? DR_OK : DR_ENOMEM);
  const float inv_dx = 1.0f / (float)prm->dx;
  for (size_t i = 0; i < p.n; ++i) {
    int32_t c[3];
    for (int a = 0; a < 3; ++a) {
      const float origin = (float)(prm->domain_min[a] - GRID_PAD * prm->dx);
      c[a] = sparse_particle_block(bspline_base((p.x[3 * i + a] - origin) * inv_dx));
    }
    code[i] = sparse_block_code(c[0], c[1], c[2]);
  }
  qsort(code, p.n, sizeof *code, cmp_u64);
  pairs got = {0};
  MUST(b->particle_blocks(b->state, add_pair, &got));
  qsort(got.v, got.n, sizeof *got.v, cmp_u64); /* by code (the first of each pair) */
  size_t k = 0, bad = 0, sum = 0;
  for (size_t i = 0; i < p.n; ++k) {
    size_t j = i;
    while (j < p.n && code[j] == code[i]) ++j;
    if (k >= got.n || got.v[k][0] != code[i] || got.v[k][1] != j - i) ++bad;
    i = j;
  }
  for (size_t q = 0; q < got.n; ++q) sum += got.v[q][1];
  printf("%s: %zu particle blocks from the backend, %zu from the particles, %zu particles counted of %zu\n", what,
         got.n, k, sum, p.n);
  CHECK(got.n == k && bad == 0 && sum == p.n, "%s: particle_blocks gives %zu blocks (%zu particles), the particles "
        "fill %zu; %zu differ", what, got.n, sum, k, bad);
  free(got.v), free(code);
  particles_free(&p);
}

/* backend.h's count (the particles held, from the host's own count) where the backend has one:
 * the same as the particles a download gives. */
static void check_count(const char *what, backend *b, size_t want) {
  if (!b->count) return;
  const size_t got = b->count(b->state);
  CHECK(got == want, "%s: count says %zu particles, the download %zu", what, got, want);
}

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  const material_params m = jelly();
  const sim_params prm = params(&m, 1);
  particles p0 = {0}, copy = {0}, before = {0}, out = {0}, kept = {0}, a = {0}, b = {0};
  block(&m, &p0);
  for (size_t i = 0; i < p0.n; ++i) MUST(particles_push_copy(&copy, &p0, i));
  backend A, R; /* A lets particles go and takes them back; R, the reference, never does */
  MUST(backend_create(backend_kind(), &prm, &p0, &A));
  MUST(backend_create(backend_kind(), &prm, &copy, &R));
  CHECK(A.emigrate != NULL, "the %s backend has no emigrate", A.name);
  if (!A.emigrate) return finish("test_emigrate");
  for (int s = 0; s < 30; ++s) step(&A), step(&R);

  /* a box of blocks that cuts the block along x and z */
  MUST(A.download(A.state, &before));
  int32_t lo[3] = {INT32_MAX, INT32_MAX, INT32_MAX}, hi[3] = {INT32_MIN, INT32_MIN, INT32_MIN};
  for (size_t i = 0; i < before.n; ++i) {
    int32_t bl[3];
    block_of(&prm, before.x + 3 * i, bl);
    for (int a3 = 0; a3 < 3; ++a3) {
      if (bl[a3] < lo[a3]) lo[a3] = bl[a3];
      if (bl[a3] + 1 > hi[a3]) hi[a3] = bl[a3] + 1;
    }
  }
  const int32_t all_lo[3] = {lo[0], lo[1], lo[2]}, all_hi[3] = {hi[0], hi[1], hi[2]};
  const int32_t cut_lo[3] = {lo[0], lo[1], (lo[2] + hi[2]) / 2}, cut_hi[3] = {(lo[0] + hi[0]) / 2 + 1, hi[1], hi[2]};
  size_t leaving = 0;
  for (size_t i = 0; i < before.n; ++i) leaving += (size_t)outside(&prm, &before, i, cut_lo, cut_hi);
  printf("%s backend: %zu particles; box x [%d, %d) y [%d, %d) z [%d, %d) of blocks: %zu outside\n", A.name, before.n,
         cut_lo[0], cut_hi[0], cut_lo[1], cut_hi[1], cut_lo[2], cut_hi[2], leaving);
  CHECK(leaving > before.n / 10 && leaving < before.n * 9 / 10, "the cut lets %zu of %zu go: it tests little", leaving,
        before.n);

  /* the load balance's counts, on a fresh mapping; an add that fails ends the walk */
  CHECK(A.particle_blocks != NULL, "the %s backend has no particle_blocks", A.name);
  int rebuilt;
  MUST(A.rebuild(A.state, 1, &rebuilt));
  if (A.particle_blocks) {
    check_particle_blocks("particle_blocks", &prm, &A);
    int calls = 0;
    CHECK(A.particle_blocks(A.state, fail_second, &calls) == DR_EINTERNAL && calls == 2,
          "particle_blocks went on after its add failed (%d calls)", calls);
  }

  /* a box holding every particle: none leaves, and nothing changes */
  MUST(A.emigrate(A.state, all_lo, all_hi, &out));
  CHECK(out.n == 0, "a box around every particle: %zu emigrated", out.n);
  MUST(A.rebuild(A.state, 1, &rebuilt));
  MUST(A.download(A.state, &kept));
  compare_subset("nobody leaves", &prm, &before, NULL, NULL, 0, &kept);
  check_count("nobody leaves", &A, kept.n);

  /* the cut, in two emigrates before one rebuild-mapping (first along x only, then along z
   * too): together exactly the particles outside, bitwise, none twice; the rest stays, bitwise */
  const int32_t x_hi[3] = {cut_hi[0], hi[1], hi[2]};
  particles out2 = {0};
  MUST(A.emigrate(A.state, lo, x_hi, &out));
  compare_subset("emigrated, x cut", &prm, &before, lo, x_hi, 1, &out);
  MUST(A.emigrate(A.state, cut_lo, cut_hi, &out2));
  CHECK(out2.n > 0, "the z cut let none go: the second emigrate tests nothing");
  for (size_t i = 0; i < out2.n; ++i) MUST(particles_push_copy(&out, &out2, i));
  particles_free(&out2);
  compare_subset("emigrated, both cuts", &prm, &before, cut_lo, cut_hi, 1, &out);
  MUST(A.rebuild(A.state, 1, &rebuilt));
  MUST(A.download(A.state, &kept));
  compare_subset("stayed", &prm, &before, cut_lo, cut_hi, 0, &kept);
  check_count("stayed", &A, kept.n);
  if (A.particle_blocks) check_particle_blocks("particle_blocks after the cut", &prm, &A);

  /* back in, and on: bitwise the reference's (deterministic sums) */
  MUST(A.add_particles(A.state, &out));
  for (int s = 0; s < 20; ++s) step(&A), step(&R);
  MUST(A.download(A.state, &a));
  MUST(R.download(R.state, &b));
  compare_subset("given back, 20 steps on", &prm, &b, NULL, NULL, 0, &a);

  /* a box far from every particle: all leave, the backend steps empty, then takes them back */
  const int32_t far_lo[3] = {all_hi[0] + 8, all_hi[1] + 8, all_hi[2] + 8};
  const int32_t far_hi[3] = {far_lo[0] + 1, far_lo[1] + 1, far_lo[2] + 1};
  out.n = 0;
  MUST(A.emigrate(A.state, far_lo, far_hi, &out));
  CHECK(out.n == a.n, "a box away from the material: %zu of %zu emigrated", out.n, a.n);
  MUST(A.rebuild(A.state, 1, &rebuilt));
  backend_stats st;
  MUST(A.stats(A.state, &st));
  CHECK(st.n_particles == 0, "after every particle left, the backend holds %llu", (unsigned long long)st.n_particles);
  check_count("every particle left", &A, 0);
  if (A.particle_blocks) {
    pairs none = {0};
    MUST(A.particle_blocks(A.state, add_pair, &none));
    CHECK(none.n == 0, "an empty backend: particle_blocks gives %zu blocks", none.n);
    free(none.v);
  }
  MUST(A.add_particles(A.state, &out));
  for (int s = 0; s < 5; ++s) step(&A), step(&R);
  MUST(A.download(A.state, &a));
  MUST(R.download(R.state, &b));
  compare_subset("all given back, 5 steps on", &prm, &b, NULL, NULL, 0, &a);
  check_count("all given back", &A, a.n);

  /* the records calls (backend.h: emigrate_records, read_records, add_records; the cuda backend packs and
   * unpacks on the device) where the backend has them: the same cut, the same expectations, with
   * the records read back through particles_push_record (particles_pack's layout) */
  if (A.emigrate_records && A.read_records && A.add_records) {
    MUST(A.rebuild(A.state, 1, &rebuilt));
    MUST(A.download(A.state, &before));
    size_t nrec = 0;
    MUST(A.emigrate_records(A.state, cut_lo, cut_hi, &nrec));
    /* read back in two pieces (a migration's rounds read a range at a time), the second first */
    const size_t rb = particles_record_bytes(), half = nrec / 2;
    unsigned char *rec = malloc(rb * (nrec ? nrec : 1));
    CHECK(rec != NULL, "out of memory");
    if (!rec) return finish("test_emigrate");
    MUST(A.read_records(A.state, half, nrec - half, rec + rb * half));
    MUST(A.read_records(A.state, 0, half, rec));
    CHECK(A.read_records(A.state, half, nrec - half + 1, rec) != DR_OK, "read_records past the emigrants succeeded");
    /* (refused before writing: rec still holds both halves, as the comparison below checks) */
    out.n = 0;
    for (size_t k = 0; k < nrec; ++k) MUST(particles_push_record(&out, rec + rb * k));
    CHECK(nrec > 0, "emigrate_records: the cut let none go");
    compare_subset("emigrate_records", &prm, &before, cut_lo, cut_hi, 1, &out);
    /* each record's owner is the GPU that held it: the download's owner of the same id (an island
     * of several GPUs gives its members' indices) */
    size_t *ia = order_by_id(&before), *ib = order_by_id(&out), owner_bad = 0;
    for (size_t q = 0, j = 0; q < before.n && j < out.n; ++q) {
      const size_t i = ia[q];
      if (before.id[i] != out.id[ib[j]]) continue;
      if (out.owner[ib[j]] != before.owner[i] && owner_bad++ < 3)
        fprintf(stderr, "  emigrate_records: particle %llu: owner %d, the download says %d\n",
                (unsigned long long)before.id[i], out.owner[ib[j]], before.owner[i]);
      ++j;
    }
    CHECK(owner_bad == 0, "emigrate_records: %zu records name another owner than the download", owner_bad);
    free(ia), free(ib);
    MUST(A.rebuild(A.state, 1, &rebuilt));
    MUST(A.download(A.state, &kept));
    compare_subset("stayed (records)", &prm, &before, cut_lo, cut_hi, 0, &kept);
    check_count("stayed (records)", &A, kept.n);
    /* given back in two calls (a migration's rounds), mapped by the forced rebuild that follows */
    MUST(A.add_records(A.state, rec, half));
    MUST(A.add_records(A.state, rec + rb * half, nrec - half));
    free(rec);
    MUST(A.rebuild(A.state, 1, &rebuilt));
    check_count("given back as records", &A, before.n);
    for (int s = 0; s < 5; ++s) step(&A), step(&R);
    MUST(A.download(A.state, &a));
    MUST(R.download(R.state, &b));
    compare_subset("given back as records, 5 steps on", &prm, &b, NULL, NULL, 0, &a);
  } else {
    printf("%s backend: no records calls (sim.c packs the particles emigrate gives)\n", A.name);
  }

  particles_free(&before), particles_free(&out), particles_free(&kept), particles_free(&a), particles_free(&b);
  particles_free(&copy);
  backend_destroy(&A);
  backend_destroy(&R);
  return finish("test_emigrate");
}
