/* memsizes.h - how the buffers that grow with a scene are sized: the first capacity and the
 * growth of each, shared by the code that allocates them (particles.c, grid.c, backend_cpu.c,
 * sim_output.c, sim_migrate.c through hostmem.h) and the memory plan (memplan.c), so that the
 * plan's bytes are the allocations' own rule and not a copy of it. */
#ifndef DRIFT_MEMSIZES_H
#define DRIFT_MEMSIZES_H

#include <stddef.h>

#define MEM_FIRST_PARTICLES 1024 /* a particle slice's first capacity (particles.c, backend_cpu.c) */
#define MEM_FIRST_PBLOCKS 256    /* the CPU backend's first capacity of particle blocks */
#define MEM_FIRST_BLOCKS 1024    /* the CPU backend's first capacity of grid blocks */
#define MEM_FIRST_TABLE 64       /* the host block hash table's first capacity (grid.c) */

/* The capacity a buffer that starts at first and doubles when full has once it holds n. */
static inline size_t mem_doubled(size_t first, size_t n) {
  size_t c = first;
  while (c < n) c *= 2;
  return c;
}

/* The host block hash table's capacity for n blocks: a power of two, at least twice n (grid.c). */
static inline size_t mem_table_capacity(size_t n) { return mem_doubled(MEM_FIRST_TABLE, 2 * n); }

/* A frame snapshot's capacity for n particles: a quarter past the need, kept frame after frame
 * (the CPU backend's snapshot, backend_cpu.c). */
static inline size_t mem_frame_capacity(size_t n) { return n + n / 4 + 1024; }

/* The writer takes a frame from the backend's snapshot (backend.h) at most this many particles
 * at a time (sim_output.c): the host's frame buffers hold two chunks, not the frame (4M particles:
 * about 180 MiB with the default fields, 400 MiB with every field and its derived ones). */
#define MEM_FRAME_CHUNK ((size_t)1 << 22)
/* A frame of more than this many particles goes in about MEM_FRAME_PIECES chunks at least, so
 * that the fetch of one overlaps the rows of the one before (sim_output.c frame_job). */
#define MEM_FRAME_PIECE_MIN ((size_t)1 << 18)
#define MEM_FRAME_PIECES 4

/* The frame slot's chunk capacity for n particles: the snapshot's rule (a quarter past the need),
 * split in MEM_FRAME_PIECES above MEM_FRAME_PIECE_MIN particles and capped at chunk
 * (MEM_FRAME_CHUNK; sim_output.c: DRIFT_FRAME_CHUNK's fewer where a test sets it). */
static inline size_t mem_frame_chunk_capacity(size_t n, size_t chunk) {
  const size_t all = mem_frame_capacity(n), piece = all / MEM_FRAME_PIECES;
  const size_t c = piece > MEM_FRAME_PIECE_MIN ? piece : all < MEM_FRAME_PIECE_MIN ? all : MEM_FRAME_PIECE_MIN;
  return c < chunk ? c : chunk;
}

/* The chunk buffers the writer holds for a frame of n particles in chunks of cap: two where it
 * has more than one chunk (one fetched while the other is written), else one. */
static inline int mem_frame_buffers(size_t n, size_t cap) { return n > cap ? 2 : 1; }

/* A checkpoint's rows go from the backend to the disk in chunks of at most this many particles
 * (every attribute: 124 B a particle), one fetched while the writer writes the one before
 * (sim_checkpoint.c); the backend's device stages one chunk too (cuda: its rows gathered from the
 * packets). For n particles: one buffer of n rows where they fit one chunk (no more than a copy
 * of them), else two of MEM_CKPT_CHUNK (2 x 124 MiB): mem_ckpt_rows, mem_ckpt_buffers. */
#define MEM_CKPT_CHUNK ((size_t)1 << 20)
static inline size_t mem_ckpt_rows(size_t n, size_t chunk) { return n < chunk ? n : chunk; }
static inline int mem_ckpt_buffers(size_t n, size_t chunk) { return n > chunk ? 2 : 1; }

/* The share of a rank's particles for which several ranks reserve migration records at the
 * start (sim_migrate.c, sim_reserve_migration): the balance threshold within [0.1, 0.5], and
 * MEM_MIGRATION_EXTRA records more. */
#define MEM_MIGRATION_EXTRA 4096
static inline double mem_migration_share(double threshold) {
  return threshold < 0.1 ? 0.1 : threshold > 0.5 ? 0.5 : threshold;
}

/* A migration goes in rounds (sim_migrate.c): in each, a rank sends at most this many records and
 * receives at most as many, so that its host holds three buffers of them at most (the records read
 * from the backend, those grouped by destination, those received: 3 x 31 MiB, with hostmem.h's
 * headroom 117 MiB) however many particles move; fewer where a rebalance's share of the rank's
 * particles is fewer. A round's messages stay large enough to go at the network's bandwidth, and a
 * rank of 10M particles keeps its host within 64 B a particle (test_memplan_host). */
#define MEM_MIGRATION_ROUND ((size_t)1 << 18)
static inline size_t mem_migration_round(double threshold, size_t n, size_t round) {
  const size_t want = (size_t)(mem_migration_share(threshold) * (double)n) + MEM_MIGRATION_EXTRA;
  return want < round ? want : round;
}

/* ---- the CUDA backend's device vectors (gpu/dvec.cu) ---------------------------------------- */

/* A device vector's headroom: an eighth of its need, or MEM_DVEC_SLACK where that is more (but at
 * most 3x the need): the small buffers of a scene (grid-sized vectors, a small scene's packets)
 * keep room to grow for a while at a cost that does not matter (at most MEM_DVEC_SLACK a vector,
 * a few hundred MiB a device in all), while the particles' buffers of a large scene carry an
 * eighth more than they need, not 2x-8x: the headroom bounds the device's bytes a particle
 * (docs/performance.md, Memory). */
#define MEM_DVEC_SLACK ((size_t)8 << 20)
#define MEM_DVEC_MIN 256 /* the smallest allocation, bytes */
/* A packet: MEM_PACKET_ATTRS floats for each of its MEM_LANES particles (gpu/p2g.cuh's PK_ATTRS,
 * LANES); a grid block: MEM_BLOCK_FLOATS floats (4 channels x 64 nodes), and ASFLIP's
 * MEM_OLD_FLOATS beside them. */
#define MEM_PACKET_ATTRS 28
#define MEM_LANES 32
#define MEM_BLOCK_FLOATS 256
#define MEM_OLD_FLOATS 192

/* The CUDA backend's upload stages at most this many packets (32 particles each: 1M particles,
 * 120 MiB) on the host at a time (gpu/particles_io.cu, cuda_upload). */
#define MEM_UPLOAD_PACKETS 32768

/* A run's creation samples its particles and hands them to the backend this many at a time
 * (sim.c, backend.h's particle_source): the host holds one chunk, not the scene (the CUDA backend's
 * upload stages one chunk's packets at a time: MEM_UPLOAD_PACKETS of them). A multiple of 32. */
#define MEM_CREATE_CHUNK ((size_t)MEM_UPLOAD_PACKETS * MEM_LANES)

/* A device vector's capacity (bytes) after a request for need bytes, holding bytes now: unchanged
 * where it fits (need <= bytes), else exact: need; not exact (a first allocation or a growth
 * alike): need plus its headroom (MEM_DVEC_SLACK's rule above); at least MEM_DVEC_MIN. */
static inline size_t mem_dvec_capacity(size_t bytes, size_t need, int exact) {
  if (need <= bytes) return bytes;
  size_t room = 0;
  if (!exact) {
    const size_t small = need < MEM_DVEC_SLACK / 3 ? 3 * need : MEM_DVEC_SLACK;
    room = need / 8 > small ? need / 8 : small;
  }
  const size_t cap = need + room;
  return cap < MEM_DVEC_MIN ? MEM_DVEC_MIN : cap;
}

#endif
