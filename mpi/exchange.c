/* exchange.c - shared blocks between ranks and the exchange of their nodal sums (exchange.h). */
#include "exchange.h"

#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "watchdog.h"
#include "error.h"
#include "log.h"
#include "physics/sparse.h"

#define BLOCK_SUMS (4 * BLOCK_NODES) /* mass and momentum of 64 nodes, unless the backend says more */
#define TAG_CODES 102
#define TAG_MASKS 104 /* the node exchange's first round */
#define TAG_NODES 105 /* ... and its second */

static double wtime(void) { return MPI_Wtime(); }

static void sums_free(const exchange *x, void *p, int device) {
  if (!p) return;
  if (x->free_sums) x->free_sums(p, device);
  else free(p);
}

/* The buffers of one link's sums: the backend's (pinned host or device memory) or malloc. */
static int sums_alloc(exchange *x, backend *b, size_t bytes, void **out) {
  *out = NULL;
  if (!b->alloc_sums) {
    *out = malloc(bytes);
    return *out ? DR_OK : dr_fail(DR_ENOMEM, "out of host memory for the exchange buffers (%zu bytes)", bytes);
  }
  void *p = NULL;
  DR_TRY(b->alloc_sums(b->state, bytes, x->device_sums, &p));
  *out = p;
  return DR_OK;
}

void exchange_free(exchange *x) {
  for (int k = 0; k < x->nlinks; ++k) {
    rank_link *L = &x->links[k];
    free(L->idx), free(L->mask_mine); /* mask_mine holds the other masks and base too */
  }
  free(x->links);
  free(x->req);
  free(x->status);
  free(x->peer);
  x->links = NULL;
  x->req = NULL;
  x->status = NULL;
  x->peer = NULL;
  x->nlinks = 0;
  x->n_shared = 0;
}

void exchange_destroy(exchange *x) {
  exchange_free(x);
  for (int k = 0; k < 2; ++k) sums_free(x, x->arena[k], x->arena_device), x->arena[k] = NULL;
  for (int k = 0; k < x->n_retired; ++k) sums_free(x, x->retired[k], x->arena_device);
  free(x->retired);
  x->retired = NULL;
  x->n_retired = x->retired_cap = 0;
  x->arena_cap = 0;
}

/* Keeps an outgrown arena until exchange_destroy (see exchange.h). */
static int retire(exchange *x, void *p) {
  if (!p) return DR_OK;
  if (x->n_retired == x->retired_cap) {
    const int cap = x->retired_cap ? 2 * x->retired_cap : 8;
    void **q = realloc(x->retired, sizeof *q * (size_t)cap);
    if (!q) return dr_fail(DR_ENOMEM, "out of host memory for the exchange's buffer list");
    x->retired = q, x->retired_cap = cap;
  }
  x->retired[x->n_retired++] = p;
  return DR_OK;
}

#define ARENA_ALIGN 256 /* bytes: each link's buffer starts on a boundary a GPU copy likes */

static size_t link_bytes(const exchange *x, const rank_link *L) {
  const size_t b = x->sum_bytes * x->block_sums * L->n; /* every node of every shared block, at most */
  return (b + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
}

/* Places every link's buffers in the arenas, growing them (2x) when they are too small. */
static int arena_place(exchange *x, backend *b) {
  size_t need = 0;
  for (int k = 0; k < x->nlinks; ++k) need += link_bytes(x, &x->links[k]);
  if (need > x->arena_cap || (x->arena[0] && x->arena_device != x->device_sums)) {
    for (int k = 0; k < 2; ++k) {
      DR_TRY(retire(x, x->arena[k]));
      x->arena[k] = NULL;
    }
    size_t cap = x->arena_cap ? 2 * x->arena_cap : need;
    if (cap < need) cap = need;
    x->arena_cap = 0;
    x->arena_device = x->device_sums;
    for (int k = 0; k < 2; ++k) DR_TRY(sums_alloc(x, b, cap, &x->arena[k]));
    x->arena_cap = cap;
  }
  size_t off = 0;
  for (int k = 0; k < x->nlinks; ++k) {
    x->links[k].send = (char *)x->arena[0] + off;
    x->links[k].recv = (char *)x->arena[1] + off;
    off += link_bytes(x, &x->links[k]);
  }
  return DR_OK;
}

int exchange_setup(exchange *x, MPI_Comm comm, backend *b) {
  exchange_free(x);
  x->comm = comm;
  if (!(b->blocks && b->node_masks && b->pack_nodes && b->unpack_add_nodes))
    return dr_fail(DR_EINTERNAL, "the %s backend has no node exchange (blocks, node_masks, pack_nodes, unpack_add_nodes)",
                   b->name);
  /* where the sums live: device memory for a CUDA-aware MPI, else (pinned) host memory */
  x->free_sums = b->alloc_sums ? b->free_sums : NULL;
  x->device_sums = b->alloc_sums && comm_cuda_aware();
  x->block_sums = b->block_sums > 0 ? (size_t)b->block_sums : BLOCK_SUMS;
  if (x->block_sums % BLOCK_NODES)
    return dr_fail(DR_EINTERNAL, "the %s backend's block_sums is %zu, not a multiple of %d nodes", b->name, x->block_sums,
                   BLOCK_NODES);
  x->sum_bytes = b->sums_int64 ? sizeof(int64_t) : sizeof(float);
  int rank, nranks;
  DR_MPI(MPI_Comm_rank(comm, &rank));
  DR_MPI(MPI_Comm_size(comm, &nranks));
  const uint64_t *codes;
  size_t n;
  DR_TRY(b->blocks(b->state, &codes, &n));
  log_trace("exchange setup: %zu block codes on the host", n);
  /* 1. bounding boxes of the blocks, one allgather */
  int32_t box[6];
  sparse_codes_box(codes, n, box, box + 3);
  int32_t *boxes = malloc(sizeof *boxes * 6 * (size_t)nranks);
  if (!boxes) return dr_fail(DR_ENOMEM, "out of host memory for the rank boxes");
  int rc = MPI_Allgather(box, 6, MPI_INT32_T, boxes, 6, MPI_INT32_T, comm);
  if (rc != MPI_SUCCESS) {
    free(boxes);
    return comm_fail(rc, __FILE__, __LINE__, "MPI_Allgather(box)");
  }
  log_trace("exchange setup: boxes gathered");
  /* 2. neighbours: boxes within one block (the relation is symmetric, so both sides agree) */
  int *nbr = malloc(sizeof *nbr * (size_t)nranks);
  int nn = 0;
  if (!nbr) {
    free(boxes);
    return dr_fail(DR_ENOMEM, "out of host memory for the rank links");
  }
  for (int r = 0; r < nranks; ++r) {
    if (r == rank || n == 0) continue;
    const int32_t *o = boxes + 6 * r;
    if (o[0] > o[3]) continue; /* that rank holds no block */
    int near = 1;
    for (int a = 0; a < 3; ++a) near &= o[a] <= box[3 + a] + 1 && box[a] <= o[3 + a] + 1;
    if (near) nbr[nn++] = r;
  }
  /* 3. swap code lists with the neighbours and intersect. A block both ranks map lies in both
   * boxes, so each rank sends a neighbour only its codes inside that neighbour's box (still
   * sorted): a slab along the cut instead of the whole mapping. One message each way, its length
   * taken by a matched probe. */
  uint64_t *their_n = calloc((size_t)(nn ? nn : 1), sizeof *their_n);
  uint64_t **their = calloc((size_t)(nn ? nn : 1), sizeof *their);
  uint64_t **near_codes = calloc((size_t)(nn ? nn : 1), sizeof *near_codes); /* what each neighbour is sent */
  MPI_Request *req = malloc(sizeof *req * (size_t)(nn ? nn : 1));
  x->links = calloc((size_t)(nn ? nn : 1), sizeof *x->links);
  x->req = malloc(sizeof *x->req * 2 * (size_t)(nn ? nn : 1));
  x->status = malloc(sizeof *x->status * 2 * (size_t)(nn ? nn : 1));
  x->peer = malloc(sizeof *x->peer * 2 * (size_t)(nn ? nn : 1));
  if (!their_n || !their || !near_codes || !req || !x->links || !x->req || !x->status || !x->peer) {
    free(their_n), free(their), free(near_codes), free(req), free(nbr), free(boxes);
    return dr_fail(DR_ENOMEM, "out of host memory for the rank links");
  }
  rc = MPI_SUCCESS;
  int posted = 0;
  for (int k = 0; k < nn && rc == MPI_SUCCESS; ++k) {
    const int32_t *o = boxes + 6 * nbr[k];
    size_t m = 0;
    near_codes[k] = malloc(sizeof **near_codes * (n ? n : 1));
    if (!near_codes[k]) {
      rc = -1;
      break;
    }
    uint64_t lo[3], hi[3]; /* o in the codes' own bits: no decoding (sparse.h) */
    for (int a = 0; a < 3; ++a) lo[a] = sparse_axis_bits(o[a], a), hi[a] = sparse_axis_bits(o[3 + a], a);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t c = codes[i], x = c & SPARSE_AXIS_MASK(0), y = c & SPARSE_AXIS_MASK(1), z = c & SPARSE_AXIS_MASK(2);
      if (x >= lo[0] && x <= hi[0] && y >= lo[1] && y <= hi[1] && z >= lo[2] && z <= hi[2]) near_codes[k][m++] = c;
    }
    rc = MPI_Isend(near_codes[k], (int)m, MPI_UINT64_T, nbr[k], TAG_CODES, comm, &req[k]);
    if (rc == MPI_SUCCESS) ++posted;
  }
  free(boxes);
  log_trace("exchange setup: lists sent");
  for (int k = 0; k < nn && rc == MPI_SUCCESS; ++k) {
    MPI_Message msg;
    MPI_Status st;
    int count = 0;
    rc = MPI_Mprobe(nbr[k], TAG_CODES, comm, &msg, &st);
    if (rc == MPI_SUCCESS) rc = MPI_Get_count(&st, MPI_UINT64_T, &count);
    if (rc != MPI_SUCCESS) break;
    their_n[k] = (uint64_t)count;
    their[k] = malloc(sizeof **their * (size_t)(count ? count : 1));
    if (!their[k]) { /* the message is matched: take it, then fail */
      uint64_t sink;
      MPI_Mrecv(&sink, 0, MPI_UINT64_T, &msg, MPI_STATUS_IGNORE);
      rc = -1;
      break;
    }
    rc = MPI_Mrecv(their[k], count, MPI_UINT64_T, &msg, MPI_STATUS_IGNORE);
  }
  /* the sends complete whatever happened above (their buffers are freed below) */
  const int wrc = posted ? MPI_Waitall(posted, req, MPI_STATUSES_IGNORE) : MPI_SUCCESS;
  if (rc == MPI_SUCCESS) rc = wrc;
  log_trace("exchange setup: block lists swapped with %d neighbours", nn);
  int err = DR_OK;
  if (rc == -1) err = dr_fail(DR_ENOMEM, "out of host memory for the block lists swapped with a neighbour");
  else if (rc != MPI_SUCCESS) err = comm_fail(rc, __FILE__, __LINE__, "MPI exchange of block lists");
  uint8_t *shared = err ? NULL : calloc(n ? n : 1, 1);
  if (!err && !shared) err = dr_fail(DR_ENOMEM, "out of host memory for the shared-block flags");
  for (int k = 0; k < nn && !err; ++k) {
    rank_link *L = &x->links[x->nlinks];
    L->rank = nbr[k];
    L->idx = malloc(sizeof *L->idx * (n ? n : 1));
    if (!L->idx) {
      err = dr_fail(DR_ENOMEM, "out of host memory for the shared-block list");
      break;
    }
    size_t i = 0, j = 0;
    while (i < n && j < their_n[k]) { /* both lists are sorted */
      if (codes[i] < their[k][j]) ++i;
      else if (codes[i] > their[k][j]) ++j;
      else {
        shared[i] = 1;
        L->idx[L->n++] = (int32_t)i;
        ++i, ++j;
      }
    }
    if (L->n == 0) {
      free(L->idx);
      L->idx = NULL;
      continue;
    }
    ++x->nlinks; /* from here exchange_free releases the link */
    /* one allocation: three masks of n words, then base */
    L->mask_mine = malloc((3 * sizeof(uint64_t) + sizeof(uint32_t)) * L->n);
    if (!L->mask_mine) {
      err = dr_fail(DR_ENOMEM, "out of host memory for the node masks of %zu shared blocks", L->n);
      break;
    }
    L->mask_theirs = L->mask_mine + L->n;
    L->mask_both = L->mask_theirs + L->n;
    L->base = (uint32_t *)(L->mask_both + L->n);
  }
  log_trace("exchange setup: lists intersected");
  if (!err) err = arena_place(x, b);
  for (size_t i = 0; shared && i < n; ++i) x->n_shared += shared[i];
  log_trace("exchange setup: buffers placed");
  if (!err && b->mark_shared) err = b->mark_shared(b->state, NULL, 0);
  for (int k = 0; k < x->nlinks && !err && b->mark_shared; ++k)
    err = b->mark_shared(b->state, x->links[k].idx, x->links[k].n);
  free(shared);
  for (int k = 0; k < nn; ++k) free(their[k]), free(near_codes[k]);
  free(their), free(near_codes), free(their_n), free(req), free(nbr);
  log_trace("exchange setup: %zu shared blocks marked, node exchange", x->n_shared);
  return err;
}

/* A mask or pack that fails (a CUDA fault surfacing at its sync, say) must not leave the
 * neighbours waiting for messages that never come: the messages go out (empty), the failure is
 * kept for exchange_finish, and the ranks agree on it at the next vote. */
int exchange_pack(exchange *x, backend *b) {
  x->packed = 0;
  if (x->nlinks == 0 || !b->node_masks_async || !b->node_masks_wait) return 0;
  x->start_rc = DR_OK; /* the first round's masks */
  for (int k = 0; k < x->nlinks && x->start_rc == DR_OK; ++k)
    x->start_rc = b->node_masks_async(b->state, k, x->links[k].idx, x->links[k].n);
  x->packed = 1;
  return 1;
}

void exchange_drop_packs(exchange *x) {
  x->packed = 0;
  x->start_rc = DR_OK;
}

/* The first round (exchange.h): every link's masks, then their messages. After a failure a
 * link's masks are sent empty, and this rank's own masks count as empty too, so that both sides
 * agree that no sums travel (the ranks agree at the next vote that the step is lost). */
int exchange_start(exchange *x, backend *b) {
  const int packed = x->packed;
  x->packed = 0;
  if (!packed) x->start_rc = DR_OK; /* else exchange_pack's outcome */
  if (x->nlinks == 0) return DR_OK;
  for (int k = 0; k < 2 * x->nlinks; ++k) x->req[k] = MPI_REQUEST_NULL;
  for (int k = 0; k < x->nlinks; ++k) {
    rank_link *L = &x->links[k];
    if (x->start_rc != DR_OK) continue;
    x->start_rc = packed ? b->node_masks_wait(b->state, k, L->mask_mine) : b->node_masks(b->state, L->idx, L->n, L->mask_mine);
  }
  for (int k = 0; k < x->nlinks; ++k) {
    rank_link *L = &x->links[k];
    if (x->start_rc != DR_OK) memset(L->mask_mine, 0, sizeof *L->mask_mine * L->n);
    int rc = MPI_Irecv(L->mask_theirs, (int)L->n, MPI_UINT64_T, L->rank, TAG_MASKS, x->comm, &x->req[2 * k]);
    if (rc == MPI_SUCCESS) rc = MPI_Isend(L->mask_mine, (int)L->n, MPI_UINT64_T, L->rank, TAG_MASKS, x->comm, &x->req[2 * k + 1]);
    if (rc != MPI_SUCCESS) {
      if (!x->start_rc) x->start_rc = comm_fail(rc, __FILE__, __LINE__, "MPI_Irecv/MPI_Isend(shared-node masks)");
      break;
    }
    x->bytes_sent += (double)(sizeof *L->mask_mine * L->n);
  }
  return x->start_rc;
}

/* The second round: the masks' AND on every link, then the sums of the nodes it marks both ways,
 * then their addition in rank order (the same order of additions at every step). Every link
 * carries one message each way whatever happened (of no bytes where the AND is empty, or after a
 * failure on the sending side: the receiver adds nothing and the vote stops the step), and a
 * receive takes up to the link's whole buffer, so that no rank waits for a message that its
 * neighbour does not send, even if the two disagreed on the masks. */
int exchange_finish(exchange *x, backend *b) {
  if (x->nlinks == 0) return x->start_rc;
  double t0 = wtime();
  for (int k = 0; k < 2 * x->nlinks; ++k) x->peer[k] = x->links[k / 2].rank;
  DR_TRY(comm_wait(x->comm, 2 * x->nlinks, x->req, x->status, x->peer, "the rank exchange's node masks"));
  x->wait_seconds += wtime() - t0;
  const size_t vals = x->block_sums / BLOCK_NODES; /* per node */
  for (int k = 0; k < x->nlinks; ++k) {
    rank_link *L = &x->links[k];
    int got = 0;
    DR_MPI(MPI_Get_count(&x->status[2 * k], MPI_UINT64_T, &got));
    if (!x->start_rc && (size_t)got != L->n)
      x->start_rc = dr_fail(DR_EINTERNAL, "rank exchange: rank %d sent %d node masks for %zu shared blocks", L->rank, got, L->n);
  }
  for (int k = 0; k < x->nlinks; ++k) {
    rank_link *L = &x->links[k];
    uint32_t m = 0;
    for (size_t j = 0; j < L->n; ++j) {
      L->mask_both[j] = x->start_rc ? 0 : L->mask_mine[j] & L->mask_theirs[j];
      L->base[j] = m;
      m += (uint32_t)__builtin_popcountll(L->mask_both[j]);
    }
    L->node_bytes = (size_t)m * vals * x->sum_bytes;
  }
  for (int k = 0; k < 2 * x->nlinks; ++k) x->req[k] = MPI_REQUEST_NULL;
  for (int k = 0; k < x->nlinks; ++k) {
    rank_link *L = &x->links[k];
    L->send_bytes = L->node_bytes;
    if (x->start_rc == DR_OK && L->node_bytes)
      x->start_rc = b->pack_nodes(b->state, L->idx, L->n, L->mask_both, L->base, L->send);
    if (x->start_rc != DR_OK) L->send_bytes = 0;
    int rc = MPI_Irecv(L->recv, (int)link_bytes(x, L), MPI_BYTE, L->rank, TAG_NODES, x->comm, &x->req[2 * k]);
    if (rc == MPI_SUCCESS) rc = MPI_Isend(L->send, (int)L->send_bytes, MPI_BYTE, L->rank, TAG_NODES, x->comm, &x->req[2 * k + 1]);
    if (rc != MPI_SUCCESS) {
      if (!x->start_rc) x->start_rc = comm_fail(rc, __FILE__, __LINE__, "MPI_Irecv/MPI_Isend(shared-node sums)");
      break;
    }
    x->bytes_sent += (double)L->send_bytes;
  }
  t0 = wtime();
  DR_TRY(comm_wait(x->comm, 2 * x->nlinks, x->req, x->status, x->peer, "the rank exchange's node sums"));
  x->wait_seconds += wtime() - t0;
  if (x->start_rc) return x->start_rc;
  for (int k = 0; k < x->nlinks; ++k) {
    rank_link *L = &x->links[k];
    int got = 0;
    DR_MPI(MPI_Get_count(&x->status[2 * k], MPI_BYTE, &got));
    if (got == 0) continue; /* nothing to add, or that rank's step failed */
    if ((size_t)got != L->node_bytes)
      return dr_fail(DR_EINTERNAL, "rank exchange: rank %d sent %d bytes of node sums where the masks say %zu", L->rank, got,
                     L->node_bytes);
    DR_TRY(b->unpack_add_nodes(b->state, L->idx, L->n, L->mask_both, L->base, L->recv));
  }
  return DR_OK;
}
