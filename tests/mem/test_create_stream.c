/* test_create_stream - the run's creation streams its particles (sample.h's sample_stream, a
 * particle_source of particles.h) instead of sampling the scene into one host array:
 *   - the stream's chunks, asked for in sizes that cut cells and bodies anywhere (1, 7, 1000, the
 *     rest), are bitwise the particles sample_scene_where gives in one go, and so are those of the
 *     stream rewound (after a part-way read, and after a whole one), with and without a
 *     rank's keep function, over a box, a rotated box, a sphere of a NACC material (its initial
 *     plastic state) and a source (never sampled);
 *   - independent of the stream: each body's count is sample_count's, its particles' volumes sum
 *     to its shape's volume, its ids rise (cell * ppc + stratum), and the keep function's
 *     particles are exactly the whole scene's that it accepts, in order;
 *   - the host memory (memtally.h's counted peak) of draining a source through one chunk of
 *     MEM_CREATE_CHUNK particles, as the CUDA backend's upload does (particles_io.cu), does not grow
 *     with the scene: a scene of 1.7M and one of 4.1M particles peak at most MEM_CREATE_CHUNK
 *     particles' bytes above what was held before, and the larger not above the smaller;
 *   - the memory plan's host figure at the CUDA backend's start (memplan_cuda) is that chunk and the
 *     staging, the same for both scenes, not a figure per particle. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "error.h"
#include "memplan.h"
#include "memsizes.h"
#include "memtally.h"
#include "particles.h"
#include "sample.h"
#include "scene.h"

static const char *const MIXED =
    "{ \"domain\": { \"min\": [0, 0, 0], \"max\": [1, 1, 1], \"dx\": 0.025 },"
    "  \"time\": { \"frames\": 1, \"fps\": 24, \"cfl\": 0.5 },"
    "  \"materials\": {"
    "    \"sand\": { \"model\": \"drucker_prager\", \"density\": 1600, \"youngs_modulus\": 3.5e5, \"poisson_ratio\": 0.3,"
    "              \"friction_angle\": 35 },"
    "    \"snow\": { \"model\": \"nacc\", \"density\": 400, \"bulk_modulus\": 5e4, \"poisson_ratio\": 0.3, \"friction\": 0.8,"
    "              \"cohesion\": 0.9, \"hardening\": 5.0, \"initial_compression\": -0.01 } },"
    "  \"bodies\": ["
    "    { \"shape\": \"box\", \"min\": [0.1, 0.1, 0.1], \"max\": [0.4, 0.3, 0.45], \"material\": \"sand\", \"ppc\": 8, \"seed\": 3 },"
    "    { \"shape\": \"sphere\", \"center\": [0.5, 0.6, 0.5], \"radius\": 0.12, \"material\": \"snow\", \"ppc\": 5 },"
    "    { \"shape\": \"sphere\", \"center\": [0.8, 0.8, 0.8], \"radius\": 0.05, \"material\": \"sand\", \"ppc\": 8,"
    "      \"emit\": { \"mode\": \"resample\" } },"
    "    { \"shape\": \"box\", \"min\": [0.55, 0.1, 0.2], \"max\": [0.9, 0.25, 0.5], \"rotation\": { \"axis\": [0, 0, 1], \"angle\": 20 },"
    "      \"material\": \"sand\", \"ppc\": 27, \"seed\": 9 } ] }";

/* A box of ppc 8 at dx 1/64 from 0.25 (binary fractions: cell faces exact): n^3 cells, about 8 n^3
 * particles. */
static int box_scene(int n, scene *s) {
  char text[1024];
  const double hi = 0.25 + n / 64.0;
  snprintf(text, sizeof text,
           "{ \"domain\": { \"min\": [0, 0, 0], \"max\": [2, 2, 2], \"dx\": 0.015625 },"
           "  \"time\": { \"frames\": 1, \"fps\": 24, \"cfl\": 0.5 },"
           "  \"materials\": { \"sand\": { \"model\": \"drucker_prager\", \"density\": 1600, \"youngs_modulus\": 3.5e5,"
           "    \"poisson_ratio\": 0.3, \"friction_angle\": 35 } },"
           "  \"bodies\": [ { \"shape\": \"box\", \"min\": [0.25, 0.25, 0.25], \"max\": [%.8f, %.8f, %.8f], \"material\": "
           "\"sand\", \"ppc\": 8 } ] }",
           hi, hi, hi);
  return scene_parse("box", text, strlen(text), s);
}

static int keep_low_x(void *ctx, const double x[3]) {
  (void)ctx;
  return x[0] < 0.52;
}

/* Whether a and b hold the same particles, bitwise, every attribute. */
static int same(const particles *a, const particles *b) {
  if (a->n != b->n) return 0;
  for (int k = 0; k < PARTICLE_ATTRS; ++k)
    if (a->n && memcmp(particles_attr(a, k), particles_attr(b, k), a->n * particle_attrs[k].bytes)) return 0;
  return 1;
}

/* The stream of s (keep) drained in chunks of the sizes given in turn (the last repeats) into out. */
static int drain(const scene *s, sample_keep_fn keep, const size_t *sizes, int n_sizes, particles *out) {
  sample_stream *st = NULL;
  DR_TRY(sample_stream_open(s, keep, NULL, &st));
  const particle_source src = sample_stream_source(st);
  int rc = DR_OK;
  for (int k = 0; rc == DR_OK && out->n < src.n; ++k) {
    const size_t before = out->n, want = sizes[k < n_sizes ? k : n_sizes - 1];
    const size_t expect = src.n - before < want ? src.n - before : want;
    rc = src.next(src.ctx, out, want);
    CHECK(rc != DR_OK || out->n - before == expect, "chunk %d: %zu particles where %zu were asked", k,
          out->n - before, expect);
    if (out->n == before) break;
  }
  const size_t before = out->n;
  if (rc == DR_OK) rc = src.next(src.ctx, out, 5); /* at the end: nothing more */
  CHECK(out->n == before, "the stream gave %zu particles past its n", out->n - before);
  CHECK(out->n == src.n, "the stream gave %zu particles, its n is %zu", out->n, src.n);
  sample_stream_close(&st);
  return rc;
}

/* The stream read part-way (7 particles), rewound, read whole (chunks of 1000), rewound and read
 * whole again: each whole read is `expect`, bitwise (an island's creation reads its source once
 * for the split and once for each member, which may stop before the end). */
static void check_rewind(const scene *s, sample_keep_fn keep, const particles *expect) {
  sample_stream *st = NULL;
  if (sample_stream_open(s, keep, NULL, &st)) {
    CHECK(0, "the stream: %s", dr_message());
    return;
  }
  const particle_source src = sample_stream_source(st);
  CHECK(src.rewind != NULL, "the sampling stream does not rewind");
  particles part = {0}, again = {0};
  int rc = src.next(src.ctx, &part, 7);
  for (int pass = 0; rc == DR_OK && src.rewind && pass < 2; ++pass) {
    again.n = 0;
    rc = src.rewind(src.ctx);
    while (rc == DR_OK && again.n < src.n) {
      const size_t before = again.n;
      rc = src.next(src.ctx, &again, 1000);
      if (again.n == before) break;
    }
    CHECK(rc == DR_OK && same(expect, &again), "pass %d after a rewind differs (%zu particles, want %zu): %s", pass,
          again.n, expect->n, rc ? dr_message() : "");
  }
  particles_free(&part);
  particles_free(&again);
  sample_stream_close(&st);
}

static void check_mixed(void) {
  scene s;
  if (scene_parse("mixed", MIXED, strlen(MIXED), &s)) {
    CHECK(0, "the mixed scene: %s", dr_message());
    return;
  }
  particles whole = {0}, chunked = {0}, kept = {0}, kept_chunked = {0};
  const size_t sizes[] = {1, 7, 1000, 31, 4096};
  CHECK(sample_scene(&s, &whole) == DR_OK, "sample_scene: %s", dr_message());
  CHECK(drain(&s, NULL, sizes, 5, &chunked) == DR_OK, "the stream: %s", dr_message());
  CHECK(same(&whole, &chunked), "the chunked stream differs from sample_scene (%zu and %zu particles)", chunked.n,
        whole.n);
  CHECK(sample_scene_where(&s, keep_low_x, NULL, &kept) == DR_OK, "sample_scene_where: %s", dr_message());
  CHECK(drain(&s, keep_low_x, sizes + 2, 3, &kept_chunked) == DR_OK, "the kept stream: %s", dr_message());
  CHECK(same(&kept, &kept_chunked), "the chunked kept stream differs from sample_scene_where");
  CHECK(kept.n > 0 && kept.n < whole.n, "keep took %zu of %zu particles", kept.n, whole.n);
  check_rewind(&s, NULL, &whole);
  check_rewind(&s, keep_low_x, &kept);

  /* independent expectations: counts, volumes, ids, and keep's particles the whole's it accepts */
  size_t at = 0;
  for (int b = 0; b < s.n_bodies; ++b) {
    const uint64_t n = sample_count(&s, b);
    CHECK((n == 0) == (s.bodies[b].emit.mode != EMIT_NONE), "bodies[%d]: %llu particles", b, (unsigned long long)n);
    double vol = 0.0;
    for (size_t i = at; i < at + n && i < whole.n; ++i) {
      vol += whole.vol0[i];
      CHECK(particle_id_body(whole.id[i]) == b, "particle %zu: body %d, expected %d", i, particle_id_body(whole.id[i]), b);
      CHECK(i == at || whole.id[i] > whole.id[i - 1], "particle %zu: ids do not rise", i);
      const float jp = s.materials[s.bodies[b].material].params.model == MODEL_NACC ? -0.01f : 0.0f;
      if (i == at) CHECK(fabsf(whole.logjp[i] - jp) < 1e-7f, "bodies[%d]: logjp %g, expected %g", b, whole.logjp[i], jp);
    }
    if (n) CHECK(fabs(vol / sample_shape_volume(&s, b) - 1.0) < 1e-4, "bodies[%d]: volumes sum to %.6g, shape %.6g", b, vol,
                 sample_shape_volume(&s, b));
    at += n;
  }
  CHECK(at == whole.n, "the bodies count %zu particles, sampled %zu", at, whole.n);
  size_t j = 0; /* keep's particles: the whole's with x below 0.52 (a float's rounding aside), in order */
  for (size_t i = 0; i < whole.n; ++i) {
    if (j < kept.n && kept.id[j] == whole.id[i]) {
      CHECK(memcmp(kept.x + 3 * j, whole.x + 3 * i, 3 * sizeof(float)) == 0 && kept.vol0[j] == whole.vol0[i] &&
                kept.mass[j] == whole.mass[i] && whole.x[3 * i] <= 0.5201f,
            "kept particle %zu differs from the whole scene's", j);
      ++j;
    } else {
      CHECK(whole.x[3 * i] >= 0.5199f, "particle id %llu at x %g is not kept", (unsigned long long)whole.id[i],
            whole.x[3 * i]);
    }
  }
  CHECK(j == kept.n, "%zu of the %zu kept particles are the whole scene's, in order", j, kept.n);
  particles_free(&whole), particles_free(&chunked), particles_free(&kept), particles_free(&kept_chunked);
  scene_destroy(&s);
}

/* The host's counted peak above what was held before, draining scene s through one chunk of
 * MEM_CREATE_CHUNK particles (what particles_io.cu's cuda_upload_from holds); *n: its particles. */
static double chunked_peak(const scene *s, size_t *n) {
  memtally_reset_peaks();
  const double held = (double)memtally_now(MEMTALLY_HOST, MT_KINDS);
  sample_stream *st = NULL;
  *n = 0;
  if (sample_stream_open(s, NULL, NULL, &st)) {
    CHECK(0, "the stream: %s", dr_message());
    return 0.0;
  }
  const particle_source src = sample_stream_source(st);
  particles chunk = {0};
  CHECK(particles_reserve(&chunk, src.n < MEM_CREATE_CHUNK ? src.n : MEM_CREATE_CHUNK) == DR_OK, "out of memory");
  while (*n < src.n) {
    chunk.n = 0;
    const size_t want = src.n - *n < MEM_CREATE_CHUNK ? src.n - *n : MEM_CREATE_CHUNK;
    if (src.next(src.ctx, &chunk, want) || chunk.n != want) {
      CHECK(0, "chunk at %zu: %zu of %zu particles (%s)", *n, chunk.n, want, dr_message());
      break;
    }
    *n += want;
  }
  const double peak = (double)memtally_peak(MEMTALLY_HOST) - held;
  particles_free(&chunk);
  sample_stream_close(&st);
  return peak;
}

static void check_bounded(void) {
  scene small, large;
  if (box_scene(60, &small) || box_scene(80, &large)) {
    CHECK(0, "the box scenes: %s", dr_message());
    return;
  }
  size_t n_small = 0, n_large = 0;
  const double p_small = chunked_peak(&small, &n_small), p_large = chunked_peak(&large, &n_large);
  const double chunk_bytes = (double)MEM_CREATE_CHUNK * (double)particles_record_bytes();
  printf("host peak while streaming: %zu particles %.1f MiB, %zu particles %.1f MiB (a chunk: %.1f MiB; the whole "
         "larger scene as one array: %.1f MiB)\n",
         n_small, p_small / 1048576.0, n_large, p_large / 1048576.0, chunk_bytes / 1048576.0,
         (double)n_large * (double)particles_record_bytes() / 1048576.0);
  CHECK(fabs(n_small / (8.0 * 60 * 60 * 60) - 1.0) < 1e-3 && fabs(n_large / (8.0 * 80 * 80 * 80) - 1.0) < 1e-3,
        "the boxes hold %zu and %zu particles", n_small, n_large);
  CHECK(n_small > MEM_CREATE_CHUNK, "the smaller scene (%zu particles) is not larger than a chunk", n_small);
  /* (a counted block's header aside: memtally.h) */
  CHECK(p_small <= chunk_bytes + 4096 && p_large <= chunk_bytes + 4096, "the peaks %.0f and %.0f B exceed a chunk's %.0f B",
        p_small, p_large, chunk_bytes);
  CHECK(p_large <= p_small, "the larger scene peaks at %.0f B, the smaller at %.0f B", p_large, p_small);

  /* the plan: the CUDA backend's host at the start is the chunk and the staging for both */
  const memplan_config cfg = {.backend = BACKEND_CUDA, .ranks = 1, .devices = 1, .frames = 1};
  memplan a, b;
  CHECK(memplan_create(&small, &cfg, &a) == DR_OK && memplan_create(&large, &cfg, &b) == DR_OK, "no plan");
  memplan_bytes ha, hb, d;
  memplan_load la = a.load, lb = b.load;
  la.frames = lb.frames = 0, la.most = lb.most = 1; /* the start only: no checkpoint copy, no frame slots */
  memplan_cuda(&small, &la, &ha, &d);
  memplan_cuda(&large, &lb, &hb, &d);
  const double staging = (double)MEM_UPLOAD_PACKETS * (MEM_PACKET_ATTRS * MEM_LANES * 4.0 + MEM_LANES * 8.0 + 8.0);
  printf("plan, host at the start: %.1f MiB and %.1f MiB (a chunk and the staging: %.1f MiB)\n",
         ha.kind[MT_PARTICLES] / 1048576.0, hb.kind[MT_PARTICLES] / 1048576.0, (chunk_bytes + staging) / 1048576.0);
  CHECK(ha.kind[MT_PARTICLES] == chunk_bytes && hb.kind[MT_PARTICLES] == chunk_bytes,
        "the plan's host particles at the start: %.0f and %.0f B, a chunk is %.0f B", ha.kind[MT_PARTICLES],
        hb.kind[MT_PARTICLES], chunk_bytes);
  CHECK(ha.total == chunk_bytes + staging && hb.total == ha.total, "the plan's host at the start: %.0f and %.0f B, "
        "expected %.0f B", ha.total, hb.total, chunk_bytes + staging);
  memplan_destroy(&a), memplan_destroy(&b);
  scene_destroy(&small), scene_destroy(&large);
}

int main(void) {
  check_mixed();
  check_bounded();
  if (failures_) fprintf(stderr, "%d check(s) failed\n", failures_);
  return failures_ ? 1 : 0;
}
