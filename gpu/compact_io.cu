// compact_io.cu - parallel.storage "compact" on the CUDA backend: particle records (records.cuh)
// into compact packets and back (gpu/compact_packets.cuh). Records come in from the host
// (creation, a resume, arrivals from other ranks, sources) with their kind's index in the owner's
// word, which a record that arrives does not keep (the host sets it from its compact_kinds table);
// they go out (emigrants, a checkpoint's rows, downloads) with their kind's mass, volume and
// material, and this GPU's owner.

#include "compact_packets.cuh"
#include "cuda_state.h"
#include "records.cuh"

/* m records into add_packets new packets (pk, pid, hdr and own point at the first new one's), one
 * thread a slot, each position measured from its particle's own block (own: that block's code,
 * for the next rebuild-mapping, compact_packets.cuh); the last packet's empty lanes zeroed. */
__global__ void k_compact_records_in(size_t m, size_t add_packets, const uint32_t *__restrict__ rec, compact_frame f,
                                     uint32_t *__restrict__ pk, uint64_t *__restrict__ pid, int2 *__restrict__ hdr,
                                     uint64_t *__restrict__ own) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= add_packets * 32) return;
  const size_t p = i / 32;
  const int lane = (int)(i % 32);
  if (lane == 0) hdr[p] = make_int2(-1, (int)(m - p * 32 < (size_t)32 ? m - p * 32 : 32));
  compact_record r;
  if (i >= m) {
    for (int w = 0; w < COMPACT_WORDS; ++w) r.w[w] = 0;
    cpk_write(pk, p, lane, &r, 0, COMPACT_WORDS);
    pid[i] = 0;
    own[i] = 0;
    return;
  }
  const uint32_t *q = rec + i * REC_WORDS;
  compact_state c;
  for (int a = 0; a < 3; ++a) c.x[a] = __uint_as_float(q[REC_x + a]), c.v[a] = __uint_as_float(q[REC_v + a]);
  for (int a = 0; a < 9; ++a) c.C[a] = __uint_as_float(q[REC_C + a]), c.F[a] = __uint_as_float(q[REC_F + a]);
  c.logjp = __uint_as_float(q[REC_logjp]);
  const uint64_t id = (uint64_t)q[REC_id] | (uint64_t)q[REC_id + 1] << 32;
  int32_t blk[3];
  compact_x_block(&f, c.x, blk);
  compact_encode(&f, blk, &c, q[REC_owner], id, &r);
  cpk_write(pk, p, lane, &r, 0, COMPACT_WORDS);
  pid[i] = id;
  own[i] = sparse_block_code(blk[0], blk[1], blk[2]);
}

/* The flagged slots' particles as records (emigrants: in slot order, upto the inclusive scan of
 * the flags; flag NULL: every valid slot i to record i, a download), their slots marked gone
 * where gone is given. owner: this GPU's rank * 256 + its index. */
__global__ void k_compact_records_out(size_t n_slots, const uint32_t *__restrict__ flag,
                                      const uint32_t *__restrict__ upto, const uint32_t *__restrict__ pk,
                                      const int2 *__restrict__ hdr, const int32_t *__restrict__ pb_coord,
                                      const uint64_t *__restrict__ own, const uint64_t *__restrict__ pid,
                                      const compact_kind *__restrict__ kinds, compact_frame f, int32_t owner,
                                      uint32_t *__restrict__ rec, uint8_t *__restrict__ gone) {
  const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n_slots || (flag && !flag[i])) return;
  const size_t p = i / 32;
  const int lane = (int)(i % 32);
  if (!flag && lane >= hdr[p].y) return;
  if (gone) gone[i] = 1;
  cpk_particle c;
  cpk_load(pk, hdr, pb_coord, own, kinds, &f, p, lane, &c);
  uint32_t *q = rec + (size_t)(flag ? upto[i] - 1 : i) * REC_WORDS;
  for (int a = 0; a < 3; ++a) q[REC_x + a] = __float_as_uint(c.s.x[a]), q[REC_v + a] = __float_as_uint(c.s.v[a]);
  for (int a = 0; a < 9; ++a) q[REC_C + a] = __float_as_uint(c.s.C[a]), q[REC_F + a] = __float_as_uint(c.s.F[a]);
  q[REC_mass] = __float_as_uint(c.mass);
  q[REC_vol0] = __float_as_uint(c.vol0);
  q[REC_logjp] = __float_as_uint(c.s.logjp);
  const uint64_t id = pid[i];
  q[REC_id] = (uint32_t)id;
  q[REC_id + 1] = (uint32_t)(id >> 32);
  q[REC_material] = (uint32_t)c.material;
  q[REC_owner] = (uint32_t)owner;
}

/* rec's m records copied into out with each one's kind (its index in s->kinds) in the owner's
 * word; kinds met for the first time are added, and the device's table copied again. */
static int kinds_of_records(cuda_state *s, const uint32_t *rec, size_t m, uint32_t *out) {
  const size_t before = s->kinds.n;
  for (size_t i = 0; i < m; ++i) {
    const uint32_t *q = rec + i * REC_WORDS;
    uint32_t *o = out + i * REC_WORDS;
    memcpy(o, q, REC_WORDS * sizeof(uint32_t));
    compact_kind k;
    memcpy(&k.mass, q + REC_mass, sizeof(float));
    memcpy(&k.vol0, q + REC_vol0, sizeof(float));
    k.material = (int32_t)q[REC_material];
    k.body = (int32_t)particle_id_body((uint64_t)q[REC_id] | (uint64_t)q[REC_id + 1] << 32);
    uint32_t index = 0;
    DR_TRY(compact_kinds_index(&s->kinds, &k, &index));
    o[REC_owner] = index;
  }
  if (s->kinds.n != before) {
    DVEC(s->d_kinds, s->kinds.n * sizeof(compact_kind), "particle kinds (compact storage)");
    CU(cudaMemcpyAsync(s->d_kinds.ptr, s->kinds.kind, s->kinds.n * sizeof(compact_kind), cudaMemcpyHostToDevice,
                       s->stream));
  }
  return DR_OK;
}

int compact_append_records(cuda_state *s, const uint32_t *rec, size_t m, size_t old_packets, size_t add_packets) {
  if (m == 0) return DR_OK;
  cudaStream_t st = s->stream;
  const size_t bytes = m * REC_WORDS * sizeof(uint32_t);
  DR_TRY(cuda_host_pinned((void **)&s->h_crec, &s->h_crec_cap, bytes, "arriving particles (compact storage)"));
  DR_TRY(kinds_of_records(s, rec, m, s->h_crec));
  DVEC(s->xin, bytes, "arriving particles");
  CU(cudaMemcpyAsync(s->xin.ptr, s->h_crec, bytes, cudaMemcpyHostToDevice, st));
  k_compact_records_in<<<blocks_for(add_packets * LANES, SIMPLE_THREADS), SIMPLE_THREADS, 0, st>>>(
      m, add_packets, dp<uint32_t>(s->xin), s->cframe, dp<uint32_t>(s->pk) + old_packets * CPK_WORDS,
      dp<uint64_t>(s->pid) + old_packets * LANES, dp<int2>(s->hdr) + old_packets,
      dp<uint64_t>(s->keys[1]) + old_packets * LANES);
  LAUNCHED("k_compact_records_in");
  CU(cudaStreamSynchronize(st)); /* h_crec is reused by the next call */
  return DR_OK;
}
