/* memplan.c - the memory plan (see memplan.h): particle and block counts from the scene, the
 * CPU and CUDA backends' formulas, the particles that fit, and the host's free memory. */
#define _GNU_SOURCE
#include "memplan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "error.h"
#include "frame_fields.h"
#include "hostmem.h"
#include "memsizes.h"
#include "particles.h"
#include "physics/compact.h"
#include "physics/levelset.h"
#include "physics/sparse.h"
#include "sample.h"
#include "sim.h"

/* ---- particles and blocks from the scene -------------------------------------------------- */

uint64_t memplan_body_particles(const scene *s, int b) {
  const scene_body *B = &s->bodies[b];
  if (B->emit.mode != EMIT_NONE) return 0;
  return (uint64_t)llround(sample_shape_volume(s, b) * B->ppc / (s->dx * s->dx * s->dx));
}

uint64_t memplan_source_particles(const scene *s, int b, int frames) {
  const scene_body *B = &s->bodies[b];
  const scene_emit *e = &B->emit;
  if (e->mode == EMIT_NONE) return 0;
  const double t_end = frames / s->fps, until = fmin(t_end, e->end);
  double n = 0.0;
  if (until >= e->start) {
    if (e->mode == EMIT_RATE) {
      n = floor(e->rate * (until - e->start));
    } else { /* a full shape at every frame start in [start, end) */
      const double shape = round(sample_shape_volume(s, b) * B->ppc / (s->dx * s->dx * s->dx));
      const double first = ceil(e->start * s->fps - 1e-9), last = fmin(frames, ceil(until * s->fps - 1e-9) - 1);
      n = last >= first ? shape * (last - first + 1) : 0.0;
    }
  }
  return n >= (double)e->max_particles ? e->max_particles : (uint64_t)n;
}

/* A particle's block coordinate along axis a at position x (sparse.h: P = (b + 1) >> 2). */
static int64_t pblock_of(const scene *s, int a, double x) {
  const double u = (x - s->domain_min[a]) / s->dx + GRID_PAD;
  const int64_t b = (int64_t)floor(u - 0.5);
  return (b + 1) >> 2;
}

/* Particle blocks and physical blocks of body b: its bounding box's, scaled by the shape's share
 * of the box; a shell of physical blocks around them as around the box. */
static void body_blocks(const scene *s, int b, double *pb, double *phys) {
  double lo[3], hi[3];
  scene_body_bounds(&s->bodies[b], lo, hi);
  double n_pb = 1.0, n_phys = 1.0, box = 1.0;
  for (int a = 0; a < 3; ++a) {
    const double span = (double)(pblock_of(s, a, hi[a] - 1e-9 * s->dx) - pblock_of(s, a, lo[a]) + 1);
    n_pb *= span;
    n_phys *= span + 2.0;
    box *= hi[a] - lo[a];
  }
  const double share = box > 0 ? fmin(1.0, sample_shape_volume(s, b) / box) : 1.0;
  *pb = ceil(n_pb * share);
  *phys = ceil(n_pb * share + (n_phys - n_pb));
}

/* ---- the formulas ------------------------------------------------------------------------- */

static void add(memplan_bytes *m, int kind, double bytes) {
  m->kind[kind] += bytes;
  m->total += bytes;
}

/* The larger of the two phases (the host's peak is one of them). */
static memplan_bytes larger(const memplan_bytes *a, const memplan_bytes *b) { return a->total >= b->total ? *a : *b; }

/* Bytes a frame's snapshot holds for each particle (backend.h: the mask's attributes), and the
 * frame slot's chunk for each of its particles (sim_output.c: those, J and stress). */
static double mask_bytes(unsigned mask) {
  double b = 0.0;
  for (int a = 0; a < PARTICLE_ATTRS; ++a)
    if (mask >> a & 1u) b += (double)particle_attrs[a].bytes;
  return b;
}

/* the snapshot leaves the owner out (one value a device: fetch writes it) */
static double snapshot_bytes(const scene *s) { return mask_bytes(sim_frame_mask(s) & ~PA_BIT(owner)); }

/* a chunk's fields derived on the host (one set: the chunk being written) */
static double derived_bytes(const scene *s) {
  double b = 0.0;
  if (s->output_fields & H5FRAME_BIT(H5FRAME_J)) b += sizeof(float);
  if (s->output_fields & H5FRAME_BIT(H5FRAME_STRESS)) b += 6 * sizeof(float);
  return b;
}

/* Whether the run writes a checkpoint along the way (one at a signal's stop is not planned). */
static int writes_checkpoints(const scene *s, const memplan_load *l) {
  return s->checkpoint_every > 0 && l->frames >= s->checkpoint_every;
}

/* The rows of a checkpoint's chunk for n particles (sim_checkpoint.c's buffers, and a device's
 * staging of one: capture.cu's fetch_rows). */
static double ckpt_chunk_rows(double n) { return (double)mem_ckpt_rows((size_t)n, MEM_CKPT_CHUNK); }

/* What every backend's run holds on the host once it steps: the frame slot's chunk buffers (at
 * most two of MEM_FRAME_CHUNK particles: the frame itself stays in the backend's snapshot; and the
 * writer's conversion buffer, h5frame_pack_bytes), a migration round's buffers (several ranks; `buffers` of them:
 * they depend on the backend) and the checkpoint's chunk buffers (one of its n rows
 * where they fit MEM_CKPT_CHUNK, else two of MEM_CKPT_CHUNK: the rows go from the backend to the
 * disk a chunk at a time). */
static void host_steady(const scene *s, const memplan_load *l, int buffers, memplan_bytes *m) {
  const double rec = (double)particles_record_bytes();
  const size_t chunk = mem_frame_chunk_capacity((size_t)l->most, MEM_FRAME_CHUNK);
  const int bufs = mem_frame_buffers((size_t)l->most, chunk);
  add(m, MT_TRANSFER, (double)chunk * (bufs * mask_bytes(sim_frame_mask(s)) + derived_bytes(s)));
  add(m, MT_TRANSFER, (double)h5frame_pack_bytes(s->output_fields, s->output_precision)); /* the writer's */
  if (l->ranks > 1) { /* buffers of a migration's round */
    const size_t n = mem_migration_round(s->balance_threshold, (size_t)l->start, MEM_MIGRATION_ROUND);
    add(m, MT_TRANSFER, buffers * (double)hostmem_capacity(0, (size_t)rec * n));
  }
  if (writes_checkpoints(s, l))
    add(m, MT_TRANSFER, mem_ckpt_buffers((size_t)l->most, MEM_CKPT_CHUNK) * rec * ckpt_chunk_rows(l->most));
}

/* The mesh level sets, held from the run's start to its end (scene.h plans them exactly): on the
 * host every pool (headers, brick tables and bricks, allocated exactly: levelset_pool_reserve),
 * and on each device the colliders' (gpu/backend_cuda.cu: the same, the bricks with a float more). */
static double levelset_bytes(const scene *s, int pool) {
  const scene_levelset_sizes *z = &s->levelset_plan[pool];
  if (z->sets == 0) return 0.0;
  return (double)z->sets * sizeof(levelset) + scene_levelset_data_bytes(z);
}

static void add_levelsets_host(const scene *s, memplan_bytes *host) {
  add(host, MT_TRANSFER, levelset_bytes(s, 0) + levelset_bytes(s, 1));
}

void memplan_cpu(const scene *s, const memplan_load *l, memplan_bytes *host) {
  const double rec = (double)particles_record_bytes();
  /* the start: the sampled slice, which the backend then takes over */
  memplan_bytes start = {{0}, 0};
  add(&start, MT_PARTICLES, rec * (double)mem_doubled(MEM_FIRST_PARTICLES, (size_t)l->start));
  /* stepping: backend_cpu.c's buffers */
  memplan_bytes run = {{0}, 0};
  const double cap = (double)mem_doubled(MEM_FIRST_PARTICLES, (size_t)l->most);
  add(&run, MT_PARTICLES, 2.0 * rec * cap); /* the particles and the sort's permutation target */
  add(&run, MT_SORT, cap * (sizeof(int32_t) + 2 * sizeof(uint64_t))); /* particle blocks, (key, index) pairs */
  const double cap_pb = (double)mem_doubled(MEM_FIRST_PBLOCKS, (size_t)l->pblocks);
  add(&run, MT_MAPPING, cap_pb * ((3 + 27 + 1) * sizeof(int32_t) + 27 * sizeof(uint64_t)) + sizeof(size_t) * (cap_pb + 1));
  add(&run, MT_MAPPING, (double)mem_table_capacity((size_t)l->blocks) * (sizeof(uint64_t) + sizeof(int32_t)));
  int asflip = 0;
  for (int m = 0; m < s->n_materials; ++m) asflip |= s->materials[m].params.transfer == TRANSFER_ASFLIP;
  const double bf = (asflip ? 7.0 : 4.0) * BLOCK_NODES; /* channels x nodes */
  const double cap_b = (double)mem_doubled(MEM_FIRST_BLOCKS, (size_t)l->blocks);
  add(&run, MT_GRID, cap_b * (bf * sizeof(float) + (s->deterministic ? bf * sizeof(int64_t) : 0) + sizeof(uint64_t) + 2));
  /* a migration's round (sim_migrate.c, sim_reserve_migration): the records staged, those
   * received and, past two ranks, those grouped by destination (the particles emigrate gives and
   * those that arrive, in the backend's own arrays, are not planned apart) */
  host_steady(s, l, l->ranks > 2 ? 3 : 2, &run);
  /* the frame's snapshot: the host is this backend's device (backend_cpu.c) */
  add(&run, MT_TRANSFER, (double)mem_frame_capacity((size_t)l->most) * snapshot_bytes(s));
  /* the checkpoint's copy of the rows (hold_rows: the particles' capacity) */
  if (l->ckpt_hold && writes_checkpoints(s, l)) add(&run, MT_PARTICLES, rec * cap);
  *host = larger(&start, &run);
  add_levelsets_host(s, host);
}

/* One device vector's capacity after its needs in turn (gpu/dvec.cu's rule, memsizes.h). */
static double dvec_after(const double *need, int n) {
  size_t bytes = 0;
  for (int k = 0; k < n; ++k) bytes = mem_dvec_capacity(bytes, (size_t)need[k], 0);
  return (double)bytes;
}

void memplan_cuda(const scene *s, const memplan_load *l, memplan_bytes *host, memplan_bytes *device) {
  const double rec = (double)particles_record_bytes();
  const int nd = l->devices > 0 ? l->devices : 1;
  const double n = l->most / nd, n0 = l->start / nd, pb = l->pblocks / nd, nb = l->blocks / nd;
  /* compact storage (parallel.storage): packets of COMPACT_WORDS words a lane (gpu/compact_io.cu),
   * every other buffer float storage's; the particles go onto the device as particle records,
   * a chunk of the upload at a time: staged on the host, copied into a pinned buffer beside their
   * kinds (kept, grow-only), and into the arrivals' vector on the device (docs/performance.md's
   * Memory) */
  const int compact = s->storage == STORAGE_COMPACT;
  const double pk = (compact ? (double)COMPACT_WORDS * sizeof(uint32_t) : (double)MEM_PACKET_ATTRS * sizeof(float)) * MEM_LANES,
               lanes = MEM_LANES;
  /* packets: ceil(n / 32) as uploaded, then one a particle block more than full ones at most
   * (a rebuild starts a packet at every particle block): half a packet a block on average */
  const double up = ceil(n0 / lanes), sorted = ceil(n / lanes) + ceil(pb / 2.0);
  /* the host: the creation's chunk of sampled particles (sim.c streams them: memsizes.h's
   * MEM_CREATE_CHUNK, or fewer) and the upload's bounded staging (particles_io.cu), then the
   * frames. An island of several devices reads its source once for the split (the positions,
   * 12 B a particle, beside a chunk; then a (coordinate, index) pair of 16 B and the member's
   * byte), then once for each member (the member's byte held, and a chunk of the source beside
   * the upload's chunk and staging): island_assign_source, member_source. */
  memplan_bytes start = {{0}, 0}, run = {{0}, 0};
  const double chunk = fmin(l->start, (double)MEM_CREATE_CHUNK);
  add(&start, MT_PARTICLES, rec * chunk * (nd > 1 ? 2.0 : 1.0));
  const double up_chunk = fmin(up, MEM_UPLOAD_PACKETS); /* packets a chunk of the upload */
  if (compact) add(&start, MT_TRANSFER, up_chunk * lanes * rec * 2.0);
  else add(&start, MT_TRANSFER, up_chunk * (pk + lanes * sizeof(uint64_t) + 2 * sizeof(int32_t)));
  if (nd > 1) {
    add(&start, MT_SORT, l->start); /* the members' bytes */
    /* the positions, with the chunk they come through, then with the pairs and the bytes */
    const double pos = 12.0 * l->start, pairs = 17.0 * l->start, stream = rec * chunk;
    memplan_bytes split = {{0}, 0};
    add(&split, MT_PARTICLES, pos + (stream >= pairs ? stream : 0.0));
    add(&split, MT_SORT, stream >= pairs ? 0.0 : pairs);
    start = larger(&start, &split);
  }
  /* a migration's round (sim_migrate.c): the records staged from the device, those received and,
   * past two ranks, those grouped by destination; an island's share of a round's arrivals for
   * one member (island_add_records) */
  host_steady(s, l, 2 + (l->ranks > 2) + (nd > 1), &run);
  if (compact) add(&run, MT_TRANSFER, up_chunk * lanes * rec); /* the pinned records, kept */
  if (l->snap_host) /* the frame's snapshot: every row of the rank's devices, the owner left out */
    add(&run, MT_TRANSFER, nd * n * snapshot_bytes(s));
  *host = larger(&start, &run);
  add_levelsets_host(s, host);

  /* a device, in the order its buffers are first allocated: the upload, then the rebuilds */
  memset(device, 0, sizeof *device);
  const double pk_seq[2] = {up * pk, sorted * pk}, id_seq[2] = {up * lanes * 8, sorted * lanes * 8};
  const double hdr_seq[2] = {up * 8, sorted * 8}, key_b = 8;
  const double key_seq[2] = {up * lanes * key_b, sorted * lanes * key_b}, val_seq[2] = {up * lanes * 4, sorted * lanes * 4};
  /* the packets and ids: one buffer each, which a rebuild reorders in place; where the sorted
   * packets outgrow the upload's buffer, the move goes into a new one and both are held while it
   * runs (gpu/rebuild.cu, reorder), counted here as if held to the end */
  for (int k = 0; k < 2; ++k) {
    const double *seq = k ? id_seq : pk_seq;
    const double first = dvec_after(seq, 1), last = dvec_after(seq, 2);
    add(device, MT_PARTICLES, last + (last > first ? first : 0.0));
  }
  add(device, MT_PARTICLES, dvec_after(hdr_seq, 2));
  for (int k = 0; k < 2; ++k) {
    add(device, MT_SORT, dvec_after(key_seq, 2));
    add(device, MT_SORT, dvec_after(val_seq, 2));
  }
  const double idx_seq[2] = {n0 * sizeof(int32_t), n * sizeof(int32_t)};
  for (int k = 0; k < 2; ++k) add(device, MT_SORT, dvec_after(idx_seq, 2)); /* pblock, head */
  /* CUB's temporary storage, the most of its calls: the particles' sort through its double buffer
   * holds its look-back, 1 KiB a tile of at least 4,096 slots, up to 2^28 slots (a portion); the
   * block codes' sort a copy of its 27 pb codes */
  const double look = 0.25 * fmin(sorted * lanes, 268435456.0), codes = 27.0 * pb * sizeof(uint64_t);
  const double tmp_seq[2] = {fmax(0.25 * fmin(up * lanes, 268435456.0), codes), fmax(look, codes)};
  add(device, MT_SORT, dvec_after(tmp_seq, 2));
  int push = 0; /* a slip or separate collider: G2P leaves particles to the collision step */
  for (int c = 0; c < s->n_colliders; ++c) push |= s->colliders[c].type != BOUNDARY_STICKY;
  if (push) {
    const double mask_seq[2] = {up * sizeof(unsigned), sorted * sizeof(unsigned)};
    const double room_seq[2] = {up * lanes * sizeof(float), sorted * lanes * sizeof(float)};
    add(device, MT_TRANSFER, dvec_after(mask_seq, 2));
    add(device, MT_TRANSFER, dvec_after(room_seq, 2));
  }
  /* particle blocks and their neighbours */
  const double pb_seq[5][1] = {{3 * pb * 4}, {(pb + 1) * 4}, {(pb + 1) * 4}, {27 * pb * 4}, {27 * pb * 8}};
  for (int k = 0; k < 5; ++k) add(device, MT_MAPPING, dvec_after(pb_seq[k], 1));
  add(device, MT_MAPPING, dvec_after(pb_seq[4], 1)); /* nbr_codes[1] */
  /* the hash table: exact, the power of two of twice the blocks (rebuild.cu) */
  add(device, MT_MAPPING, (double)mem_table_capacity((size_t)nb) * (sizeof(uint64_t) + sizeof(int32_t)));
  /* grid blocks: codes (sized by the 27 neighbours before they are made unique), two buffers */
  int asflip = 0;
  for (int m = 0; m < s->n_materials; ++m) asflip |= s->materials[m].params.transfer == TRANSFER_ASFLIP;
  const double code_seq[1] = {27 * pb * sizeof(uint64_t)};
  add(device, MT_GRID, dvec_after(code_seq, 1));
  const double g_seq[1] = {nb * MEM_BLOCK_FLOATS * sizeof(float)}, t_seq[1] = {nb};
  const double g0_seq[1] = {nb * MEM_OLD_FLOATS * sizeof(float)};
  const double ig_seq[1] = {nb * (asflip ? 7.0 : 4.0) * BLOCK_NODES * sizeof(int64_t)};
  for (int k = 0; k < 2; ++k) {
    add(device, MT_GRID, dvec_after(g_seq, 1));
    add(device, MT_GRID, dvec_after(t_seq, 1));
    if (asflip) add(device, MT_GRID, dvec_after(g0_seq, 1));
    if (s->deterministic) add(device, MT_GRID, dvec_after(ig_seq, 1));
  }
  if (nd > 1) { /* the island: the grid update's output and the peers' block indices */
    add(device, MT_GRID, dvec_after(g_seq, 1));
    if (asflip) add(device, MT_GRID, dvec_after(g0_seq, 1));
    const double tag_seq[1] = {nb * (nd - 1) * sizeof(int32_t)};
    add(device, MT_GRID, dvec_after(tag_seq, 1));
  }
  add(device, MT_GRID, dvec_after(t_seq, 1)); /* shared */
  if (s->levelset_plan[1].sets > 0) /* mesh colliders' level sets, uploaded once */
    add(device, MT_TRANSFER, levelset_bytes(s, 1) + 4.0);
  { /* the frame's snapshot: an exact vector an attribute but the owner (capture.cu, snapshot_queue); with
     * snap_host, exact pinned host buffers of every row of the rank's devices instead, and on each
     * device one staging chunk (cuda_state.snap_stage: rows_layout's, each attribute from a multiple of 8 B) */
    const unsigned mask = sim_frame_mask(s) & ~PA_BIT(owner);
    const double stage = ckpt_chunk_rows(n);
    double stage_bytes = 0.0;
    for (int a = 0; a < PARTICLE_ATTRS; ++a) {
      if (!(mask >> a & 1u)) continue;
      const double b = (double)particle_attrs[a].bytes;
      if (!l->snap_host) add(device, MT_TRANSFER, (double)mem_dvec_capacity(0, (size_t)(n * b), 1));
      else stage_bytes += ceil(stage * b / 8.0) * 8.0;
    }
    if (l->snap_host) add(device, MT_TRANSFER, (double)mem_dvec_capacity(0, (size_t)stage_bytes, 1));
  }
  if (writes_checkpoints(s, l)) { /* a checkpoint's chunk gathered on the device, the owner left out, each
                                   * attribute from a multiple of 8 bytes (capture.cu, fetch_rows) */
    const double rows = l->ckpt_hold ? ceil(n) : fmin(ckpt_chunk_rows(l->most), ceil(n)); /* held: all of them */
    double bytes = 0.0;
    for (int a = 0; a < PARTICLE_ATTRS; ++a)
      if (a != PA_owner) bytes += ceil(rows * (double)particle_attrs[a].bytes / 8.0) * 8.0;
    add(device, MT_TRANSFER, (double)mem_dvec_capacity(0, (size_t)bytes, 1));
  }
  /* the records on the device: the migration's (reserve_records: the emigrants, a round's
   * arrivals); compact storage's upload chunk among the arrivals, and its download's pieces
   * (2,048 packets) among the emigrants */
  double r_seq[2] = {0, 0}, in_seq[2] = {0, 0};
  if (compact) {
    in_seq[0] = fmin(up_chunk * lanes, n0) * rec;
    r_seq[0] = fmin(2048.0, sorted) * lanes * rec;
  }
  if (l->ranks > 1) {
    r_seq[1] = (mem_migration_share(s->balance_threshold) * l->start + MEM_MIGRATION_EXTRA) * rec;
    in_seq[1] = (double)mem_migration_round(s->balance_threshold, (size_t)l->start, MEM_MIGRATION_ROUND) * rec;
  }
  add(device, MT_TRANSFER, dvec_after(r_seq, 2) + dvec_after(in_seq, 2));
}

/* The plan's bytes for load l (host and one device). */
static void bytes_for(const scene *s, const memplan_config *c, const memplan_load *l, memplan_bytes *host,
                      memplan_bytes *device) {
  memset(device, 0, sizeof *device);
  if (c->backend == BACKEND_CUDA) memplan_cuda(s, l, host, device);
  else memplan_cpu(s, l, host);
}

/* The busiest rank's load when the scene holds a share f of its particles (and of its blocks:
 * fewer particles of the same ppc fill a smaller volume). */
static memplan_load load_of(const memplan *p, double f) {
  const int R = p->cfg.ranks > 0 ? p->cfg.ranks : 1;
  const double share = 1.0 / R + (R > 1 ? p->slab : 0.0); /* the busiest rank's, at most 1 */
  const double busiest = share < 1.0 ? share : 1.0;
  memplan_load l = {.start = ceil(f * (double)p->particles * busiest), .most = ceil(f * (double)p->most * busiest),
                    .pblocks = ceil(f * p->pblocks / R), .blocks = ceil(f * p->blocks / R),
                    .ranks = R,
                    .devices = p->cfg.devices > 0 ? p->cfg.devices : 1,
                    .frames = p->cfg.frames > 0 ? p->cfg.frames : p->frames, .ckpt_hold = p->cfg.ckpt_hold,
                    .snap_host = p->cfg.snap_host};
  return l;
}

int memplan_create(const scene *s, const memplan_config *c, memplan *out) {
  memset(out, 0, sizeof *out);
  out->cfg = *c;
  const int frames = c->frames > 0 ? c->frames : s->frames;
  out->frames = s->frames;
  out->n_bodies = s->n_bodies;
  out->n_materials = s->n_materials;
  out->body = calloc((size_t)(s->n_bodies ? s->n_bodies : 1), sizeof *out->body);
  out->source = calloc((size_t)(s->n_bodies ? s->n_bodies : 1), sizeof *out->source);
  out->material = calloc((size_t)(s->n_materials ? s->n_materials : 1), sizeof *out->material);
  if (!out->body || !out->source || !out->material) {
    memplan_destroy(out);
    return dr_fail(DR_ENOMEM, "out of host memory for the memory plan");
  }
  double pb_all = 0.0, blocks_all = 0.0, cells = 1.0, lo_all[3], hi_all[3];
  for (int a = 0; a < 3; ++a) lo_all[a] = s->domain_max[a], hi_all[a] = s->domain_min[a];
  for (int a = 0; a < 3; ++a) cells *= ceil((s->domain_max[a] - s->domain_min[a]) / (4 * s->dx)) + 3;
  for (int b = 0; b < s->n_bodies; ++b) {
    out->body[b] = memplan_body_particles(s, b);
    out->source[b] = memplan_source_particles(s, b, frames);
    out->material[s->bodies[b].material] += out->body[b];
    out->particles += out->body[b];
    out->most += out->body[b] + out->source[b];
    double pb, phys, lo[3], hi[3];
    body_blocks(s, b, &pb, &phys);
    scene_body_bounds(&s->bodies[b], lo, hi);
    for (int a = 0; a < 3; ++a) lo_all[a] = fmin(lo_all[a], lo[a]), hi_all[a] = fmax(hi_all[a], hi[a]);
    pb_all += pb;
    blocks_all += phys;
  }
  /* the cuts between ranks fall on block faces (mpi/decomp.h): the busiest rank may hold a slab of
   * blocks more than its share, a block thick across the bodies' longest extent */
  double extent = 0.0;
  for (int a = 0; a < 3; ++a) extent = fmax(extent, hi_all[a] - lo_all[a]);
  out->slab = extent > 0 ? fmin(1.0, 4.0 * s->dx / extent) : 1.0;
  out->pblocks = fmin(pb_all, cells); /* never more than the domain holds */
  out->blocks = fmin(blocks_all, cells);
  out->load = load_of(out, 1.0);
  bytes_for(s, c, &out->load, &out->host, &out->device);
  return DR_OK;
}

void memplan_destroy(memplan *p) {
  free(p->body), free(p->source), free(p->material);
  p->body = p->source = p->material = NULL;
}

uint64_t memplan_fitting(const scene *s, const memplan *p, double host_free, double device_free) {
  if (p->most == 0) return 0;
  /* bisection on the share of the scene's particles (the formulas step with the capacities) */
  double lo = 0.0, hi = 1.0;
  for (int it = 0; it < 60; ++it) {
    const double f = 0.5 * (lo + hi);
    const memplan_load l = load_of(p, f);
    memplan_bytes h, d;
    bytes_for(s, &p->cfg, &l, &h, &d);
    const int fits = (host_free <= 0 || h.total <= host_free) && (device_free <= 0 || d.total <= device_free);
    if (fits) lo = f;
    else hi = f;
  }
  return (uint64_t)floor(lo * (double)p->most);
}

/* ---- the host's free memory --------------------------------------------------------------- */

/* A "Key: value kB" line of a /proc file, in bytes; -1 where absent. */
static double proc_kib(const char *path, const char *key) {
  FILE *f = fopen(path, "r");
  if (!f) return -1.0;
  char line[256];
  double v = -1.0;
  const size_t k = strlen(key);
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, key, k) && line[k] == ':') {
      v = 1024.0 * strtod(line + k + 1, NULL);
      break;
    }
  fclose(f);
  return v;
}

/* A cgroup v2 file of this process's group as a number; -1 where absent or "max". */
static double cgroup_value(const char *name) {
  FILE *f = fopen("/proc/self/cgroup", "r");
  if (!f) return -1.0;
  char line[4096], dir[4096] = "";
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "0::", 3)) {
      line[strcspn(line, "\n")] = 0;
      snprintf(dir, sizeof dir, "%s", line + 3);
      break;
    }
  fclose(f);
  char path[8300];
  snprintf(path, sizeof path, "/sys/fs/cgroup%s/%s", strcmp(dir, "/") ? dir : "", name);
  FILE *g = fopen(path, "r");
  if (!g) return -1.0;
  char v[64] = "";
  const int ok = fgets(v, sizeof v, g) != NULL;
  fclose(g);
  if (!ok || !strncmp(v, "max", 3)) return -1.0;
  return strtod(v, NULL);
}

void memplan_host_free(double *bytes, const char **limit) {
  double best = -1.0;
  const char *why = "unknown";
  const double avail = proc_kib("/proc/meminfo", "MemAvailable");
  if (avail >= 0) best = avail, why = "MemAvailable in /proc/meminfo";
  const double max = cgroup_value("memory.max"), cur = cgroup_value("memory.current");
  if (max >= 0 && cur >= 0 && (best < 0 || max - cur < best)) best = fmax(0.0, max - cur), why = "the cgroup's memory.max";
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const double used = proc_kib("/proc/self/status", "VmSize");
    const double left = (double)rl.rlim_cur - (used > 0 ? used : 0.0);
    if (best < 0 || left < best) best = fmax(0.0, left), why = "RLIMIT_AS (ulimit -v)";
  }
  *bytes = best < 0 ? 0.0 : best;
  *limit = why;
}
