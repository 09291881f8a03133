/* exchange.h - the grid blocks that several ranks touch, and the per-step exchange of their
 * nodal sums (DESIGN.md, "Between ranks"). Discovery at rebuild-mapping: ranks swap the
 * bounding boxes of their blocks (one allgather), then sorted block-code lists only with ranks
 * whose boxes come within one block; the intersections are the shared blocks. Every step, after
 * P2G, each rank sends its own sums of the shared blocks to every rank that shares them
 * (non-blocking point-to-point) and adds what it receives, so every copy of a shared block holds
 * the sum over all ranks before the grid update (with the node exchange, below: every node of it
 * that the rank's own particles reach, which are all that its G2P reads). */
#ifndef DRIFT_EXCHANGE_H
#define DRIFT_EXCHANGE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef struct rank_link {
  int rank;
  size_t n;          /* blocks shared with that rank */
  int32_t *idx;      /* their dense indices in this rank's mapping, in code order */
  void *send, *recv; /* block_sums values per block: floats, or int64 (sums_int64); inside the arenas.
                      * Sparse: a mask of the blocks that travel, then their values (backend.h) */
  size_t send_bytes; /* what this step's message holds */
  /* The node exchange (host memory, n words each): the masks of the nodes this rank's P2G reached
   * (sent), the neighbour's (received), their AND (the nodes whose sums travel both ways), and the
   * AND's prefix sums (backend.h's base) */
  uint64_t *mask_mine, *mask_theirs, *mask_both;
  uint32_t *base;
  size_t node_bytes; /* this step's value message, each way */
} rank_link;

typedef struct exchange {
  MPI_Comm comm;
  int nlinks;
  rank_link *links;
  size_t n_shared;        /* distinct local blocks shared with some rank */
  size_t block_sums;      /* values per shared block (the backend's block_sums) */
  size_t sum_bytes;       /* bytes per value: 4 (float) or 8 (int64 fixed point, deterministic mode) */
  MPI_Datatype sum_type;  /* MPI_FLOAT or MPI_INT64_T */
  MPI_Request *req;
  MPI_Status *status;     /* the requests' (a sparse message's length) */
  /* Sparse exchange (the default where the backend has pack_sparse; DRIFT_SPARSE_EXCHANGE=0 on any
   * rank turns it off on all, agreed at exchange_setup): a rank sends only the shared blocks its P2G touched this step, behind a mask of one
   * bit per shared block, and a receive takes up to all of them. Where a rank's particles come
   * near the cut, the blocks mapped on both sides include a band that one side maps but does not
   * reach: on the CPU backend, Sand Blocks spreading across the cut of two ranks touched 37-49%
   * of the shared blocks it sent each step (jobs/bench/weak_2.json at 4 dx, docs/performance.md). */
  int sparse;
  int sparse_agreed;      /* 0, or what sparse was agreed for: 1 + whether the backend can pack sparse (+ 2: nodes) */
  /* Node exchange (the default where the backend has node_masks and the rest, on every rank:
   * the cpu backend, and the cuda one of a GPU a rank under DRIFT_NODE_EXCHANGE=1; DRIFT_NODE_EXCHANGE=0
   * or DRIFT_SPARSE_EXCHANGE=0 on any rank turns it off on all, agreed with sparse): each step in two
   * rounds. First every rank sends the mask of the shared blocks' nodes its own P2G reached (8
   * bytes a shared block); then only the sums of the nodes both masks mark travel, both ways, in
   * the order both sides know from the masks. A rank's G2P reads only the nodes its own particles
   * reached, so a node reached by one side needs no message. On the CPU backend, Sand Blocks
   * spreading across the cut of two ranks (jobs/bench/weak_2.json at 4 dx, 60 frames) sent 57%
   * of the nodes of the touched blocks that the sparse exchange sends whole, and 32% of those
   * nodes were reached by the other rank too; jobs/bench/cut_surface.json sends 94.6 kB a step
   * on 2 ranks against 459 kB (docs/performance.md). Deterministic mode marks every node of a
   * touched block (backend_cpu.c's node_mask says why). */
  int nodes;
  void *zero_mask;        /* host memory: the empty mask sent after a failed pack */
  int device_sums;        /* send and recv are device memory (CUDA-aware MPI) */
  void (*free_sums)(void *ptr, int device); /* the backend's, or NULL for free() */
  /* Every link's send and recv buffers lie in two arenas that only grow (2x), kept from one
   * exchange_setup to the next: pinned memory is slow to allocate, and an MPI library may cache
   * its registration of a buffer (CUDA-aware Open MPI does), so freeing pinned memory and
   * allocating it again at every rebuild-mapping is both slow and unsafe. */
  void *arena[2];
  size_t arena_cap;       /* bytes of each */
  int arena_device;       /* the arenas are device memory */
  /* Arenas outgrown during the run, freed only by exchange_destroy: a CUDA-aware MPI caches the
   * IPC mapping of device buffers by address, and a freed buffer whose address came back in a new
   * allocation would be read through the stale mapping. Their sizes double, so they hold less
   * than the live arenas. */
  void **retired;
  int n_retired, retired_cap;
  int start_rc;           /* exchange_start's pack failure, returned again by exchange_finish */
  int packed;             /* exchange_pack queued this step's packs (pack_sparse_async) */
  double bytes_sent;      /* since the last exchange_take_stats */
  double wait_seconds;
} exchange;

/* Finds the shared blocks of the backend's current mapping (collective over comm). */
int exchange_setup(exchange *x, MPI_Comm comm, backend *b);
/* Sends this rank's sums of the shared blocks and posts the receives (non-blocking). The
 * messages are posted even when a pack fails (its error is returned), so that no neighbour waits
 * for ever: exchange_finish must follow every exchange_start. */
int exchange_start(exchange *x, backend *b);
/* Optional, before exchange_start: queues every link's pack where the backend packs in two halves
 * (pack_sparse_async), so that the caller can queue more work before exchange_start waits for
 * the packs and sends. Returns 1 when it queued them, 0 when exchange_start packs as usual. A
 * failure is kept for exchange_start, which posts the messages all the same. */
int exchange_pack(exchange *x, backend *b);
/* Forgets the packs exchange_pack queued (the caller voided them: backend.h's gate_open(0)),
 * so that the next exchange_start packs afresh. */
void exchange_drop_packs(exchange *x);
/* Waits for the others' sums and adds them to the shared blocks (not after a failed pack:
 * then it only waits, and returns exchange_start's error). */
int exchange_finish(exchange *x, backend *b);
/* Releases the links (not the arenas: a later exchange_setup reuses them). */
void exchange_free(exchange *x);
/* Releases everything. */
void exchange_destroy(exchange *x);

#endif
