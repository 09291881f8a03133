/* exchange.h - the grid blocks that several ranks touch, and the per-step exchange of their
 * nodal sums (docs/architecture.md). Discovery at rebuild-mapping: ranks swap the
 * bounding boxes of their blocks (one allgather), then sorted block-code lists only with ranks
 * whose boxes come within one block; the intersections are the shared blocks. Every step, after
 * P2G, the node exchange (non-blocking point-to-point with every rank that shares blocks), in two
 * rounds: first every rank sends the mask of the shared blocks' nodes its own P2G reached (8
 * bytes a shared block, backend.h's node_masks); then only the sums of the nodes both masks mark
 * travel, both ways, in the order both sides know from the masks (pack_nodes), and each rank adds
 * what it receives (unpack_add_nodes). A rank's G2P reads only the nodes its own particles
 * reached, so a node reached by one side needs no message: afterwards every node of a shared
 * block that the rank's particles reach holds the sum over all ranks before the grid update.
 * Deterministic mode marks every node of a touched block (backend_cpu.c's node_mask says why). */
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
  void *send, *recv; /* room for block_sums values per block: floats, or int64 (sums_int64); inside
                      * the arenas; a step's message holds the values of the nodes mask_both marks */
  size_t send_bytes; /* what this step's message holds */
  /* Host memory, n words each: the masks of the nodes this rank's P2G reached (sent), the
   * neighbour's (received), their AND (the nodes whose sums travel both ways), and the AND's
   * prefix sums (backend.h's base) */
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
  MPI_Request *req;
  MPI_Status *status;     /* the requests' (a message's length) */
  int *peer;              /* [2 nlinks] the rank of each request (the watchdog's line) */
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
  int start_rc;           /* this step's failure (masks or pack), returned again by exchange_finish */
  int packed;             /* exchange_pack queued this step's masks (node_masks_async) */
  double bytes_sent;      /* since the last exchange_take_stats */
  double wait_seconds;
} exchange;

/* Finds the shared blocks of the backend's current mapping (collective over comm). */
int exchange_setup(exchange *x, MPI_Comm comm, backend *b);
/* The first round: sends this rank's node masks of the shared blocks and posts the receives
 * (non-blocking). The messages are posted even when node_masks fails (its error is returned, and
 * the masks go out empty), so that no neighbour waits for ever: exchange_finish must follow every
 * exchange_start. */
int exchange_start(exchange *x, backend *b);
/* Optional, before exchange_start: queues every link's masks where the backend makes them in two
 * halves (node_masks_async), so that the caller can queue more work before exchange_start waits
 * for them and sends. Returns 1 when it queued them, 0 when exchange_start makes them as usual.
 * A failure is kept for exchange_start, which posts the messages all the same. */
int exchange_pack(exchange *x, backend *b);
/* Forgets the masks exchange_pack queued (the caller voided them: backend.h's gate_open(0)),
 * so that the next exchange_start makes them afresh. */
void exchange_drop_packs(exchange *x);
/* The second round: waits for the others' masks, sends this rank's sums of the nodes both sides
 * mark, and adds the others' to the shared blocks (not after a failure: then it only waits, and
 * returns the error). */
int exchange_finish(exchange *x, backend *b);
/* Releases the links (not the arenas: a later exchange_setup reuses them). */
void exchange_free(exchange *x);
/* Releases everything. */
void exchange_destroy(exchange *x);

#endif
