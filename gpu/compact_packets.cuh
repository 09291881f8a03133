// compact_packets.cuh - parallel.storage "compact" on the CUDA backend: a packet of records
// (physics/compact.h) instead of floats, and the reads and writes of a lane's record that the
// kernels share. Layout: [packet][word][lane], COMPACT_WORDS words a lane, so that a warp's
// accesses of one word of its 32 lanes are one 128-byte line, as the float packets' attributes.
//
// A record's positions are offsets from a particle block (physics/compact.h): a packet of the
// mapping measures them from its own particle block (hdr[p].x, its coordinates pb_coord); the
// packets appended since the mapping (hdr[p].x == -1: an upload, arrivals, a source's particles)
// from each particle's own block, whose code (sparse.h) the slot's own[] holds until the next
// rebuild-mapping, whose k_keys measures every position from the particle's new block (exact:
// compact_rebase_x) before the sort moves the words untouched.
#ifndef DRIFT_GPU_COMPACT_PACKETS_CUH
#define DRIFT_GPU_COMPACT_PACKETS_CUH

#include <stdint.h>

#include "compact_kinds.h"
#include "physics/compact.h"
#include "physics/sparse.h"

#define CPK_WORDS (COMPACT_WORDS * 32) /* 32-bit words a packet */

/* Lane `lane`'s record in packet p; cpk_write writes its words [w0, w1) back. */
__device__ __forceinline__ void cpk_read(const uint32_t *__restrict__ pk, size_t p, int lane, compact_record *r) {
  const uint32_t *q = pk + p * CPK_WORDS + lane;
#pragma unroll
  for (int w = 0; w < COMPACT_WORDS; ++w) r->w[w] = q[w * 32];
}
__device__ __forceinline__ void cpk_write(uint32_t *__restrict__ pk, size_t p, int lane, const compact_record *r, int w0,
                                          int w1) {
  uint32_t *q = pk + p * CPK_WORDS + lane;
#pragma unroll
  for (int w = 0; w < COMPACT_WORDS; ++w)
    if (w >= w0 && w < w1) q[w * 32] = r->w[w];
}

/* The words a field's bits [lo, hi) lie in: [cpk_w0(lo), cpk_w1(hi)). */
#define CPK_W0(lo) ((lo) >> 5)
#define CPK_W1(hi) ((((hi) - 1) >> 5) + 1)

/* The particle block that lane `lane` of packet p measures its position from: the packet's, or
 * (appended since the mapping) the slot's own. */
__device__ __forceinline__ void cpk_block(const int2 *__restrict__ hdr, const int32_t *__restrict__ pb_coord,
                                          const uint64_t *__restrict__ own, size_t p, int lane, int32_t blk[3]) {
  const int q = hdr[p].x;
  if (q >= 0) {
    for (int a = 0; a < 3; ++a) blk[a] = pb_coord[3 * q + a];
  } else {
    int c[3];
    sparse_block_coords(own[p * 32 + lane], c);
    for (int a = 0; a < 3; ++a) blk[a] = c[a];
  }
}

/* What the kernels of the step take to read and write compact packets. */
typedef struct cpk_view {
  const compact_kind *kinds;
  compact_frame f;
} cpk_view;

/* A lane's whole state: the floats, and its kind's mass, volume and material. */
typedef struct cpk_particle {
  compact_state s;
  float mass, vol0;
  int32_t material;
  uint64_t id48; /* the id's low 48 bits (the body: the kind's) */
  uint32_t kind;
} cpk_particle;

__device__ __forceinline__ void cpk_decode(const compact_frame *f, const int32_t blk[3], const compact_record *r,
                                           const compact_kind *__restrict__ kinds, cpk_particle *o) {
  compact_decode(f, blk, r, &o->s, &o->kind, &o->id48);
  const compact_kind k = kinds[o->kind];
  o->mass = k.mass, o->vol0 = k.vol0, o->material = k.material;
}

/* What G2P reads of record r (positions measured from blk): x, v and the kind's mass, volume and
 * material; F where with_f (ASFLIP reads its determinant), else the identity (P2G advances F: the
 * record's F is not G2P's). */
__device__ __forceinline__ void cpk_decode_moving(const compact_frame *f, const int32_t blk[3], const compact_record *r,
                                                  const compact_kind *__restrict__ kinds, bool with_f, cpk_particle *o) {
  compact_decode_x(f, blk, r->w, o->s.x);
  compact_decode_v(r, o->s.v);
  if (with_f) {
    int pos = COMPACT_AT_F;
    compact_f_code fc;
    compact_f_get_(r->w, &pos, &fc);
    compact_f_decode_(&fc, o->s.F);
  } else {
    for (int q = 0; q < 9; ++q) o->s.F[q] = q % 4 == 0 ? 1.0f : 0.0f;
  }
  int pos = COMPACT_AT_KIND;
  o->kind = compact_get_(r->w, &pos, COMPACT_BITS_KIND);
  const compact_kind k = kinds[o->kind];
  o->mass = k.mass, o->vol0 = k.vol0, o->material = k.material;
}

/* Slot (p, lane)'s record r, the block blk it is measured from (cpk_block) and its positions. */
__device__ __forceinline__ void cpk_load_x(const uint32_t *__restrict__ pk, const int2 *__restrict__ hdr,
                                           const int32_t *__restrict__ pb_coord, const uint64_t *__restrict__ own,
                                           const compact_frame *f, size_t p, int lane, compact_record *r,
                                           int32_t blk[3], float x[3]) {
  cpk_read(pk, p, lane, r);
  cpk_block(hdr, pb_coord, own, p, lane, blk);
  compact_decode_x(f, blk, r->w, x);
}

/* Slot (p, lane)'s whole state, measured from its block (cpk_block). */
__device__ __forceinline__ void cpk_load(const uint32_t *__restrict__ pk, const int2 *__restrict__ hdr,
                                         const int32_t *__restrict__ pb_coord, const uint64_t *__restrict__ own,
                                         const compact_kind *__restrict__ kinds, const compact_frame *f, size_t p,
                                         int lane, cpk_particle *o) {
  compact_record r;
  cpk_read(pk, p, lane, &r);
  int32_t blk[3];
  cpk_block(hdr, pb_coord, own, p, lane, blk);
  cpk_decode(f, blk, &r, kinds, o);
}

/* compact_io.cu's kernels: records into packets and back (their comments there). */
__global__ void k_compact_records_in(size_t m, size_t add_packets, const uint32_t *__restrict__ rec, compact_frame f,
                                     uint32_t *__restrict__ pk, uint64_t *__restrict__ pid, int2 *__restrict__ hdr,
                                     uint64_t *__restrict__ own);
__global__ void k_compact_records_out(size_t n_slots, const uint32_t *__restrict__ flag,
                                      const uint32_t *__restrict__ upto, const uint32_t *__restrict__ pk,
                                      const int2 *__restrict__ hdr, const int32_t *__restrict__ pb_coord,
                                      const uint64_t *__restrict__ own, const uint64_t *__restrict__ pid,
                                      const compact_kind *__restrict__ kinds, compact_frame f, int32_t owner,
                                      uint32_t *__restrict__ rec, uint8_t *__restrict__ gone);

#endif
