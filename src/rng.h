/* rng.h - counter-based random numbers for sampling. A stream is a pure function of
 * (seed, stream index), so any rank can sample any cell of a body and get the same particles
 * that a single rank would: results do not depend on how the domain is cut. */
#ifndef DRIFT_RNG_H
#define DRIFT_RNG_H

#include <stdint.h>

typedef struct rng {
  uint64_t s;
} rng;

/* splitmix64's finalizer: a bijective 64-bit mix. */
static inline uint64_t rng_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline rng rng_stream(uint64_t seed, uint64_t stream) {
  rng r = {rng_mix(seed * 0x9e3779b97f4a7c15ULL + rng_mix(stream + 0x632be59bd9b4e019ULL))};
  return r;
}

static inline uint64_t rng_next(rng *r) {
  r->s += 0x9e3779b97f4a7c15ULL;
  return rng_mix(r->s);
}

/* Uniform in [0, 1) with 24 random bits. */
static inline float rng_uniform(rng *r) { return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f); }

/* Uniform integer in [0, n). */
static inline uint32_t rng_below(rng *r, uint32_t n) {
  return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

#endif
