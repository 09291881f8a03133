// island.cu - several GPUs of one rank as one backend (the island): its backend ops (island_*),
// which run each member's one-GPU work through the crew and merge the members' flags, the choice of
// its devices and their P2P access, and its creation (island_create). What the members' kernels
// share and why it is race-free: gpu/island_barrier.cu. A member's state is touched only by its
// own crew thread while a job runs; what needs the peers runs on the caller's thread after
// island_each has seen every job end.

#include "cuda_state.h"

/* Events barrier, adaptive steps: the member's last vmax for the peers, before the host's barrier
 * and k_begin (which takes the slot step_seq & 1 and advances step_seq). */
__global__ static void k_publish(step_ctl *c) {
  if (c->mode == DT_ADAPTIVE) c->vmax_pub[c->step_seq & 1u] = c->vmax_bits;
}

/* A frame's start: its steps are k0, k0 + 1, ... from t_start (k0 > 0: resumed part-way); vmax0
 * >= 0 replaces the last step's speed for the first dt (frame_plan). */
__global__ static void k_frame_begin(step_ctl *c, double t0, double t_start, int k0, float vmax0, double t1, int mode,
                                     double dt_fixed, double cfl_dx, double wave_speed, double dt_max,
                                     int void_on) {
  c->void_on = void_on;
  c->t0 = t0;
  c->t = t_start;
  c->k = k0;
  if (vmax0 >= 0.0f) c->vmax_bits = __float_as_uint(vmax0);
  c->t1 = t1;
  c->frame_dt = t1 - t0;
  c->mode = mode;
  c->dt_fixed = dt_fixed;
  c->cfl_dx = cfl_dx;
  c->wave_speed = wave_speed;
  c->dt_max = dt_max;
  c->done = 0;
  if (mode == DT_FIXED) c->dt = (float)dt_fixed; /* the priming P2G of G2P2G reads it */
}

/* --steps-ahead (g2p_ahead): on or off as set; by default on where this node's ranks have GPUs of
 * their own (n each), off where they share them: a step waiting at its gate holds its GPU, and
 * two processes on one GPU (no MPS) take turns by time slices, so the other rank's G2P, which the
 * vote waits for, would wait for the gate's slice to end. */
int island_ahead_default(const sim_params *prm, int n) {
  const int sa = settings()->steps_ahead;
  if (sa != SETTING_AUTO) return sa == SETTING_ON;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  const int local = prm->local_size > 0 ? prm->local_size : 1;
  return !(settings()->n_devices > 0 && local > 1) && local * n <= count;
}

/* Which devices this rank drives: --devices (a list, for tests: the same device may appear
 * twice, so that the island's code runs on one GPU), else parallel.gpus_per_rank GPUs (0: the
 * visible GPUs shared evenly among the ranks of the node), starting after those of the node's
 * lower ranks. */
int island_devices(const sim_params *prm, int *dev, int *n) {
  int count = 0;
  CU(cudaGetDeviceCount(&count));
  static_assert(MAX_GPUS == SETTINGS_MAX_DEVICES, "settings.h's list of devices is an island's");
  const drift_settings *set = settings();
  if (set->n_devices > 0) { /* settings.c checked the list's length and that each is >= 0 */
    for (int k = 0; k < set->n_devices; ++k) {
      if (set->devices[k] >= count) {
        char buf[SETTINGS_TEXT_MAX + 64];
        return dr_fail(DR_EINPUT, "%s: expected GPU numbers below %d (the visible devices)",
                       settings_source(SET_DEVICES, buf, sizeof buf), count);
      }
      dev[k] = set->devices[k];
    }
    *n = set->n_devices;
    return DR_OK;
  }
  const int local = prm->local_size > 0 ? prm->local_size : 1;
  const int want = prm->gpus > 0 ? prm->gpus : (count / local > 0 ? count / local : 1);
  if (want > count) {
    const char *cvd = settings_cuda_visible_devices();
    return dr_fail(DR_EINPUT, "parallel.gpus_per_rank %d: only %d GPU%s visible%s%s%s", want, count,
                   count == 1 ? " is" : "s are", cvd ? " (CUDA_VISIBLE_DEVICES=" : "", cvd ? cvd : "", cvd ? ")" : "");
  }
  if (want > MAX_GPUS)
    return dr_fail(DR_EINPUT, "parallel.gpus_per_rank %d: an island has at most %d GPUs", want, MAX_GPUS);
  const int first = (prm->local_rank * want) % count;
  for (int k = 0; k < want; ++k) dev[k] = (first + k) % count;
  *n = want;
  return DR_OK;
}

/* Peer access between every two distinct devices of the island, or a clear error; with
 * p2p_atomics also native atomics over their link (see the island). */
static int island_peers(const int *dev, int n, int atomics) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (dev[i] == dev[j]) continue;
      int ok = 0;
      CU(cudaDeviceCanAccessPeer(&ok, dev[i], dev[j]));
      if (!ok)
        return dr_fail(DR_EINPUT, "GPUs %d and %d of the island cannot reach each other (no peer access between "
                       "them): choose GPUs of one NVLink island with CUDA_VISIBLE_DEVICES or use fewer "
                       "(parallel.gpus_per_rank)", dev[i], dev[j]);
      if (atomics) {
        int native = 0;
        CU(cudaDeviceGetP2PAttribute(&native, cudaDevP2PAttrNativeAtomicSupported, dev[i], dev[j]));
        if (!native)
          return dr_fail(DR_EINPUT, "parallel.island_reduce \"p2p_atomics\": GPUs %d and %d have no native atomics "
                         "over their link (PCIe?): use \"double_buffer\" or GPUs of one NVLink island", dev[i], dev[j]);
      }
      CU(cudaSetDevice(dev[i]));
      const cudaError_t e = cudaDeviceEnablePeerAccess(dev[j], 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
      else if (e != cudaSuccess) return cuda_fail(e, "cudaDeviceEnablePeerAccess(dev[j], 0)", __FILE__, __LINE__);
    }
  return DR_OK;
}

/* A member's rebuild-mapping, on its own thread. When island_each returns, every member's host
 * side of it is done (sizes known, buffers allocated: what the peers' graphs capture), and its
 * device side is queued, ending with rebuilt_ev. The peers' k_tag, which reads the member's
 * table by P2P, waits for that event on the device (island_tag_member); their next k_grid reads its
 * moved primed sums (keep_primed) only after the step's barrier, which the member reaches after
 * its rebuild in stream order. So the host goes on to tag and capture while the devices rebuild
 * (a wait here would idle the devices through the tagging, the capture and the next launch). */
static int job_rebuild(island *I, int k) {
  cuda_state *s = I->m[k];
  DR_TRY(rebuild_now(s));
  if (I->nm > 1) CU(cudaEventRecord(s->rebuilt_ev, s->stream));
  return DR_OK;
}

/* Then, on the same threads: the member's tags, and its graphs where the frame loop asks
 * (crew.capture; the stream order puts k_tag before the first graph launch). No second
 * synchronisation: nothing but the member's own kernels reads its tags. */
static int job_tag(island *I, int k) {
  if (I->nm > 1) DR_TRY(island_tag_member(I, k));
  if (I->crew.capture && !I->m[k]->events && !I->m[k]->graphs_valid) DR_TRY(step_capture_graphs(I->m[k]));
  return DR_OK;
}

static int job_capture(island *I, int k) { return I->m[k]->graphs_valid ? DR_OK : step_capture_graphs(I->m[k]); }

/* Every member's rebuild-mapping and tagging (capture: and its graphs, for the frame loop). */
static int island_rebuild_for(island *I, int capture) {
  log_trace("island: rebuild-mapping of %d GPUs", I->nm);
  DR_TRY(island_each(I, job_rebuild));
  log_trace("island: rebuilt, tagging%s", capture ? " and capturing" : "");
  I->crew.capture = capture;
  const int rc = island_each(I, job_tag);
  I->crew.capture = 0;
  DR_TRY(rc);
  log_trace("island: tagged");
  return DR_OK;
}

int island_rebuild(island *I) { return island_rebuild_for(I, 0); }

static int island_wants_rebuild(const island *I) {
  int any = 0;
  for (int k = 0; k < I->nm; ++k) any |= I->m[k]->need_rebuild;
  return any;
}

/* island_barrier "events": one step on grid buffer par on every member, the kernels launched
 * directly stage by stage (step_launch's stages), the host's barriers in between; adaptive
 * steps first exchange the last vmax (k_publish, barrier, then k_begin reads the peers'). */
static int island_step_events(island *I, int par, int adaptive) {
  if (adaptive) {
    for (int k = 0; k < I->nm; ++k) {
      DR_TRY(use(I->m[k]));
      k_publish<<<1, 1, 0, I->m[k]->stream>>>(dp<step_ctl>(I->m[k]->ctl));
      LAUNCHED("k_publish");
    }
    DR_TRY(island_event_barrier(I));
  }
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *s = I->m[k];
    const int reuse = !s->graph_fused && s->primed; /* the first step after G2P2G frames (one GPU) */
    DR_TRY(use(s));
    DR_TRY(step_head(s, par, !reuse));
    s->unprimed = reuse;
    if (reuse) s->primed = 0;
  }
  DR_TRY(island_event_barrier(I));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(step_grid(I->m[k], par, GRID_ALL));
  }
  if (I->m[0]->atomics) DR_TRY(island_event_barrier(I));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(step_tail(I->m[k], par));
  }
  return DR_OK;
}

/* Reads the flags of a completed step on every member. Returns an error for a bad particle; sets
 * *stop when an adaptive frame has ended. A voided step (begin_step: the step before it needs a
 * rebuild-mapping, which that step's flags asked for) is taken back: *launched one less, each
 * member's grid buffer parity and primed sums as before it was queued (it was the last). */
static int island_take(island *I, int par, frame_report *rep, int *stop, int synced, long *launched) {
  for (int k = 0; k < I->nm && !synced; ++k) {
    DR_TRY(use(I->m[k]));
    CU(cudaEventSynchronize(I->m[k]->done_ev[par]));
  }
  for (int k = 0; k < I->nm; ++k)
    if (I->m[k]->h_slot[par].bar_stuck) return island_fail_barrier(I, k, &I->m[k]->h_slot[par]);
  for (int k = 0; k < I->nm; ++k) {
    const step_ctl *c = &I->m[k]->h_slot[par];
    if (c->fix_bad) return step_fail_fix(I->m[k], c->fix_bad_id);
    if (c->bad_id != ~0ULL) return step_fail_bad(I->m[k], c->bad_id);
  }
  const step_ctl *c0 = &I->m[0]->h_slot[par];
  for (int k = 1; k < I->nm; ++k)
    if (I->m[k]->h_slot[par].performed != c0->performed || I->m[k]->h_slot[par].dt != c0->dt ||
        I->m[k]->h_slot[par].voided != c0->voided)
      return dr_fail(DR_EINTERNAL, "cuda island: GPU %d took a different step (dt %g) from GPU 0 (dt %g)", k,
                     (double)I->m[k]->h_slot[par].dt, (double)c0->dt);
  if (c0->voided) {
    if (!island_wants_rebuild(I))
      return dr_fail(DR_EINTERNAL, "cuda backend: a step was voided (begin_step) though no step before it left the "
                     "free zone (a bug in drift)");
    for (int k = 0; k < I->nm; ++k) {
      cuda_state *s = I->m[k];
      s->par ^= 1;
      if (s->unprimed) s->primed = 1, s->unprimed = 0;
    }
    --*launched;
    log_trace("step voided: the rebuild-mapping first");
    return DR_OK;
  }
  if (!c0->performed) {
    *stop = 1;
    return DR_OK;
  }
  ++rep->steps;
  rep->last_dt = c0->dt;
  rep->t = c0->t; /* k_begin: t + dt in double, as sim.c sums it */
  float vmax = 0.0f;
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *s = I->m[k];
    const step_ctl *c = &s->h_slot[par];
    s->last_par = par;
    timeline_stamps_take(s, c);
    memcpy(&s->vmax, &c->vmax_bits, sizeof s->vmax);
    if (s->vmax > vmax) vmax = s->vmax;
    s->need_rebuild |= c->leave != 0;
  }
  I->vmax = vmax;
  return DR_OK;
}

/* One step of member k (the crew's arguments: grid buffer par, fused or not, the fixed dt): the
 * priming P2G where G2P2G frames begin, the step (its graph, or the first unfused step after
 * G2P2G frames without its P2G, outside the graph), the step's event; then, where take >= 0,
 * the wait for step take's event, so that the caller reads its flags at once. */
static int job_step(island *I, int k) {
  const crew *c = &I->crew;
  cuda_state *s = I->m[k];
  const int par = c->par;
  if (k == 0) TRACE("island step: launch"); /* GPU 0's host thread: launch, wait, and the gaps between steps */
  if (c->fused && !s->primed) {
    DR_TRY(step_p2g(s, par));
    s->primed = 1;
  }
  if (c->fused) s->primed_dt = (float)c->dt_fixed; /* the priming P2G and every G2P2G take k_begin's dt */
  s->unprimed = !c->fused && s->primed;
  if (s->unprimed) {
    DR_TRY(step_launch(s, par, 0));
    s->primed = 0;
  } else {
    CU(cudaGraphLaunch(s->graph[par], s->stream));
  }
  CU(cudaEventRecord(s->done_ev[par], s->stream));
  s->par ^= 1;
  if (k == 0) TRACE("island step: wait for the step before");
  if (c->take >= 0) CU(cudaEventSynchronize(s->done_ev[c->take]));
  if (k == 0) TRACE("island step: host bookkeeping");
  return DR_OK;
}

/* A whole frame on the device(s): steps queued as graph launches, each on every member (the
 * barriers inside the graphs keep the members together), the flags of a step read STEP_LAG
 * steps later, and every member rebuilding when one must. One GPU is an island of one.
 * plan->stop (a signal, sim.c) is asked before every step is queued, i.e. right after the host
 * has read a step's flags (at most STEP_LAG + 1 steps are in flight): when it says stop, the
 * queued steps finish and their flags are read as usual, nothing more is queued (not even a
 * pending rebuild-mapping: the next frame's loop, or a resumed run's new backend, does it), and
 * rep says how far the frame got, so that sim.c checkpoints at that step's boundary. */
int island_advance_frame(void *state, const frame_plan *plan, frame_report *rep) {
  island *I = (island *)state;
  rep->steps = 0;
  rep->last_dt = 0;
  rep->stopped = 0;
  rep->t = plan->t_start;
  const long todo = plan->fixed_steps - plan->k0; /* fixed steps left in the frame */
  const int adaptive = plan->fixed_steps <= 0;
  const double dt_fixed = adaptive ? 0.0 : plan->dt_fixed;
  size_t nmax = 0;
  for (int k = 0; k < I->nm; ++k) nmax = I->m[k]->n > nmax ? I->m[k]->n : nmax;
  const int fused = !adaptive && nmax < I->m[0]->g2p2g_below; /* the same choice on every member */
  const int events = I->m[0]->events;
  int cleared = 0;
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *s = I->m[k];
    DR_TRY(use(s));
    k_frame_begin<<<1, 1, 0, s->stream>>>(dp<step_ctl>(s->ctl), plan->t0, plan->t_start, plan->k0, plan->vmax0,
                                          plan->t1, adaptive ? DT_ADAPTIVE : DT_FIXED, dt_fixed, plan->cfl_dx,
                                          plan->wave_speed, plan->dt_max, s->void_steps);
    LAUNCHED("k_frame_begin");
    /* Primed sums (the last G2P2G's P2G of this frame's first step) serve a fused or an
     * unfused first step alike, if they took this frame's dt. Else P2G runs again, as cuda_p2g()
     * does for another dt, and applies the return mapping a second time: not exact, but fixed
     * steps keep one dt per run and an adaptive frame never follows a fused one. */
    if (s->primed && (adaptive || s->primed_dt != (float)dt_fixed)) {
      DR_TRY(step_clear_grid(s, s->par));
      s->primed = 0;
      cleared = 1;
    }
    if (fused != s->graph_fused) {
      if (!fused && s->primed && I->nm > 1) {
        /* An island with spin-lock barriers launches only graphs: kernels launched one by one
         * behind a member's barrier could keep the next member's barrier from starting where
         * members share a device (island_grid_update). So P2G runs again: not exact (the return
         * mapping a second time), and only after an emission moved an island past g2p2g_below.
         * The events barrier shares the choice, which keeps the two modes comparable. */
        DR_TRY(step_clear_grid(s, s->par));
        s->primed = 0;
        cleared = 1;
      }
      s->graph_fused = fused;
      s->graphs_valid = 0;
    }
  }
  /* p2p_atomics: no barrier orders that clear before the peers' next pushes (see the island) */
  if (cleared && I->m[0]->atomics) DR_TRY(island_sync(I));
  int pending[2] = {0, 0}, np = 0, stop = 0, asked = 0;
  long launched = 0;
  for (;;) {
    if (plan->stop && plan->stop(plan->stop_ctx, (uint64_t)launched)) {
      asked = 1;
      break;
    }
    if (island_wants_rebuild(I)) {
      while (np > 0) {
        DR_TRY(island_take(I, pending[0], rep, &stop, 0, &launched));
        pending[0] = pending[1];
        --np;
      }
      if (stop) break;
      if (plan->stop && plan->stop(plan->stop_ctx, (uint64_t)launched)) { /* came while draining */
        asked = 1;
        break;
      }
      DR_TRY(island_rebuild_for(I, !events));
    }
    if (!adaptive && launched >= todo) break;
    /* after the rebuild of every member: a graph holds its peers' buffers (events: no graphs) */
    if (!events) {
      int stale = 0;
      for (int k = 0; k < I->nm; ++k) stale |= !I->m[k]->graphs_valid;
      if (stale) {
        log_trace("island: capturing graphs");
        DR_TRY(island_each(I, job_capture));
        log_trace("island: captured");
      }
    }
    const int par = I->m[0]->par;
    const int take = np == STEP_LAG ? (np ? pending[0] : par) : -1; /* the step read once this one is queued */
    if (events) {
      for (int k = 0; k < I->nm; ++k) {
        cuda_state *s = I->m[k];
        if (fused && !s->primed) {
          DR_TRY(use(s));
          DR_TRY(step_p2g(s, par));
          s->primed = 1;
        }
        if (fused) s->primed_dt = (float)dt_fixed;
      }
      DR_TRY(island_step_events(I, par, adaptive));
      for (int k = 0; k < I->nm; ++k) {
        cuda_state *s = I->m[k];
        DR_TRY(use(s));
        CU(cudaEventRecord(s->done_ev[par], s->stream));
        s->par ^= 1;
      }
    } else {
      crew *c = &I->crew;
      c->par = par;
      c->take = take;
      c->fused = fused;
      c->dt_fixed = dt_fixed;
      DR_TRY(island_each(I, job_step));
    }
    ++launched;
    pending[np++] = par;
    if (np == STEP_LAG + 1) {
      DR_TRY(island_take(I, pending[0], rep, &stop, !events, &launched));
      pending[0] = pending[1];
      np = STEP_LAG;
      if (stop) break;
    }
  }
  for (int k = 0; k < np; ++k) DR_TRY(island_take(I, pending[k], rep, &stop, 0, &launched));
  if (asked) { /* stopped early, unless the steps in flight ended the frame (k_begin's test) */
    const int ended = adaptive ? stop || plan->t1 - rep->t <= 1e-9 * (plan->t1 - plan->t0)
                               : launched >= todo;
    rep->stopped = !ended;
  }
  return DR_OK;
}

/* The phases of backend.h on the island (a fixed step driven by the host). */
static int island_rebuild_phase(void *state, int force, int *rebuilt) {
  island *I = (island *)state;
  *rebuilt = 0;
  if (!force && !island_wants_rebuild(I)) return DR_OK;
  DR_TRY(island_rebuild(I));
  *rebuilt = 1;
  return DR_OK;
}

/* p2p_atomics: a primed P2G that cuda_p2g() would drop is dropped before any peer can push (see the island). */
static int island_drop_primed(island *I, float dt) {
  if (I->nm == 1 || !I->m[0]->atomics) return DR_OK;
  int cleared = 0;
  for (int k = 0; k < I->nm; ++k)
    if (I->m[k]->primed && I->m[k]->primed_dt != dt) {
      DR_TRY(use(I->m[k]));
      DR_TRY(step_clear_grid(I->m[k], I->m[k]->par));
      I->m[k]->primed = 0;
      cleared = 1;
    }
  return cleared ? island_sync(I) : DR_OK;
}

static int island_p2g(void *state, float dt) {
  island *I = (island *)state;
  DR_TRY(island_drop_primed(I, dt));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_p2g(I->m[k], dt));
  }
  return DR_OK;
}

/* backend.h's p2g_part on the island: each member's (its boundary: blocks it shares with other
 * ranks, island_mark_shared); the boundary call first does island_p2g's care of primed sums. */
static int island_p2g_part(void *state, float dt, int part) {
  island *I = (island *)state;
  if (part == P2G_BOUNDARY) DR_TRY(island_drop_primed(I, dt));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_p2g_part(I->m[k], dt, part));
  }
  return DR_OK;
}

/* The stages of step_launch between P2G and G2P, member by member between the barriers. Every
 * member's barrier is launched before any member's grid update (island_barrier_all): where
 * members share a device (--devices 0,0) their streams may share a hardware queue, in which
 * a grid update queued behind its member's spinning barrier would keep the next member's barrier
 * from starting (a deadlock the launch order avoids). */
static int island_grid_update(void *state, float dt) {
  (void)dt;
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(island_launch_push(I->m[k], I->m[k]->par));
  }
  DR_TRY(island_barrier_all(I));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(step_grid(I->m[k], I->m[k]->par, GRID_ALL));
  }
  if (!I->m[0]->atomics) return DR_OK;
  DR_TRY(island_barrier_all(I));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(island_launch_pull(I->m[k], I->m[k]->par));
  }
  return DR_OK;
}

/* The grid update of the blocks not shared with other ranks (GRID_INTERIOR, while their sums are
 * in flight: sim.c's advance_frame_ranks) or shared with them (GRID_SHARED, once cuda_unpack_add_nodes
 * has added the other ranks' sums into each block's owner member). Every member holding a block shared
 * with another rank marked it (island_mark_shared), so the interior pass leaves it on every member.
 * Each pass starts with a barrier of all members: the first orders every member's P2G before its
 * peers read it (as island_grid_update's), the second orders the unpack (queued on member 0's
 * stream before this call, adding into the owners' copies by P2P) before the other members read
 * the owner's sums. A block's
 * reduction reads only P2G buffers, which neither pass writes (the velocities go to the separate
 * buffer and each pass clears only its own blocks of the other parity), so the two passes are the
 * whole update of island_grid_update split by blocks, with one barrier more. p2p_atomics pushes
 * into the owners before its barrier and pulls after a second one: it is not split, and the whole
 * update runs at GRID_SHARED. */
static int island_grid_update_part(void *state, float dt, int part) {
  island *I = (island *)state;
  if (I->m[0]->atomics) {
    if (part == GRID_INTERIOR) return DR_OK;
    /* the unpack into the owners' copies (plain additions) before any peer's k_push adds into
     * them with atomics */
    DR_TRY(island_barrier_all(I));
    return island_grid_update(state, dt);
  }
  DR_TRY(island_barrier_all(I));
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(step_grid(I->m[k], I->m[k]->par, part));
  }
  return DR_OK;
}

/* backend.h's g2p_interior on the island: each member's G2P of its packets whose stencils reach no
 * block shared with another rank (its xdev_boundary_order), queued behind its grid update of the
 * interior (island_grid_update_part(GRID_INTERIOR)) while the shared sums are in flight. A member's
 * G2P reads only its own copies of the blocks, which that member's interior update has finished
 * (the island's sums of them were read from the peers' P2G buffers, which no later kernel of the
 * step writes); member 0's unpack (island_unpack_add_nodes, by P2P into the owners' copies) and
 * the shared update after it touch only blocks shared with other ranks, which these packets never
 * read. island_g2p_queue then runs each member's boundary packets (g2p_rest). Members have no
 * xstream (one GPU's alone), so nothing here goes beside the step's stream. */
static int island_g2p_interior(void *state, float dt) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_g2p_interior(I->m[k], dt));
  }
  return DR_OK;
}

/* island_g2p's first half: each member's G2P and its step record queued; the members' buffers
 * change parity (last_par: the record island_g2p_collect reads). */
static int island_g2p_queue(island *I) {
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *s = I->m[k];
    DR_TRY(use(s));
    /* the flags are read below, before the next step; after cuda_g2p_interior, the boundary packets */
    if (s->tail_on) { /* the boundary's G2P behind the shared update on xstream (grid_update_part) */
      if (!s->xtail_ev) CU(cudaEventCreateWithFlags(&s->xtail_ev, cudaEventDisableTiming));
      DR_TRY(step_g2p_on(s, s->par, 0, dp<int32_t>(s->pk_order), s->n_boundary, 1, s->xstream));
      CU(cudaEventRecord(s->xtail_ev, s->xstream));
      CU(cudaStreamWaitEvent(s->stream, s->xtail_ev, 0));
    } else {
      DR_TRY(s->g2p_rest ? step_g2p_of(s, s->par, 0, dp<int32_t>(s->pk_order), s->n_boundary, 1)
                         : step_g2p(s, s->par, 0));
    }
    s->g2p_rest = s->tail_on = s->tail_armed = 0;
    DR_TRY(step_record_out(s, s->par));
    s->last_par = s->par;
    s->par ^= 1;
  }
  return DR_OK;
}

/* island_g2p's second half: waits for each member's G2P (with a gate armed, for its G2P alone:
 * g2p_ev, not the step queued behind the gate) and reads its flags. */
int island_g2p_collect(island *I) {
  float vmax = 0.0f;
  int bad = -1, fix = -1;
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *s = I->m[k];
    DR_TRY(use(s));
    if (s->gate_armed) CU(cudaEventSynchronize(s->g2p_ev));
    else CU(cudaStreamSynchronize(s->stream));
    s->xrecv_used = 0; /* the step's unpacks are done with their messages */
    const step_ctl *c = &s->h_slot[s->last_par];
    timeline_stamps_take(s, c);
    s->vote_wait_s += 1e-9 * (double)c->gate_ns;
    if (c->gate_stuck)
      return dr_fail(DR_EINTERNAL, "cuda backend: device %d: a step queued behind a gate waited %.0f s for the host "
                     "to open it, and was voided (--barrier-timeout)", s->device, s->barrier_timeout_ns * 1e-9);
    if (c->fix_bad && fix < 0) fix = k;
    if (c->bad_id != ~0ULL && bad < 0) bad = k;
    memcpy(&s->vmax, &c->vmax_bits, sizeof s->vmax);
    if (s->vmax > vmax) vmax = s->vmax;
    s->need_rebuild |= c->leave != 0;
  }
  for (int k = 0; k < I->nm; ++k)
    if (I->m[k]->h_slot[I->m[k]->last_par].bar_stuck) return island_fail_barrier(I, k, &I->m[k]->h_slot[I->m[k]->last_par]);
  for (int k = 0; k < I->nm; ++k) /* the unpacks queued before this G2P (cuda_unpack_add_nodes) */
    if (I->m[k]->unpack_check_n) {
      const size_t n = I->m[k]->unpack_check_n;
      I->m[k]->unpack_check_n = 0;
      DR_TRY(xdev_xbad_check(I->m[k], "unpack_add_nodes", n));
    }
  if (fix >= 0) return step_fail_fix(I->m[fix], I->m[fix]->h_slot[I->m[fix]->last_par].fix_bad_id);
  if (bad >= 0) return step_fail_bad(I->m[bad], I->m[bad]->h_slot[I->m[bad]->last_par].bad_id);
  I->vmax = vmax;
  return DR_OK;
}

int island_g2p(void *state, float dt) {
  (void)dt;
  island *I = (island *)state;
  DR_TRY(island_g2p_queue(I));
  return island_g2p_collect(I);
}

static int island_set_time(void *state, double t) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) I->m[k]->t_next = t;
  return DR_OK;
}

static int island_finish(void *state) { return island_sync((island *)state); }

static int island_max_speed(void *state, float *vmax) {
  *vmax = ((island *)state)->vmax;
  return DR_OK;
}

/* The same for an island driven by a rank: every member's G2P and record, and a gate on each,
 * which the next island_p2g (or island_p2g_part) begins its step behind; gate_open opens or voids
 * them all alike, so that the members' barriers of the step, queued after the vote, find every
 * member in the same step. Not where a member's next P2G is primed. */
int island_g2p_ahead(void *state, float dt, int *armed) {
  island *I = (island *)state;
  *armed = 0;
  int ok = 1;
  for (int k = 0; k < I->nm; ++k) ok &= I->m[k]->ahead_on && !I->m[k]->primed && !I->m[k]->gate_armed;
  if (!ok) return island_g2p(state, dt);
  DR_TRY(island_g2p_queue(I));
  for (int k = 0; k < I->nm; ++k) {
    cuda_state *s = I->m[k];
    DR_TRY(use(s));
    if (!s->g2p_ev) CU(cudaEventCreateWithFlags(&s->g2p_ev, cudaEventDisableTiming));
    CU(cudaEventRecord(s->g2p_ev, s->stream));
    s->gate_seq = (s->gate_seq + 1) & 0x7fffffffu;
    s->gate_armed = 1;
    s->gate_queued = 0;
  }
  *armed = 1;
  return DR_OK;
}

static int island_g2p_collect_be(void *state) { return island_g2p_collect((island *)state); }

/* Every member's gate, whatever one of them returns (none may stay shut). */
static int island_gate_open(void *state, int go) {
  island *I = (island *)state;
  int rc = DR_OK;
  for (int k = 0; k < I->nm; ++k) {
    if (!I->m[k]->gate_armed) {
      if (rc == DR_OK) rc = dr_fail(DR_EINTERNAL, "cuda backend: gate_open without g2p_ahead (member %d)", k);
      continue;
    }
    int r = use(I->m[k]);
    if (r == DR_OK) r = cuda_gate_open_one(I->m[k], go);
    else (void)cuda_gate_open_one(I->m[k], 0);
    if (rc == DR_OK) rc = r;
  }
  return rc;
}

/* Every member primes together (G2P2G is chosen for the whole island). */
static int island_projected(void *state) {
  island *I = (island *)state;
  int any = 0;
  for (int k = 0; k < I->nm; ++k) any |= I->m[k]->primed;
  return any;
}

static int island_set_last_dt(void *state, float dt) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_set_last_dt(I->m[k], dt));
  }
  return DR_OK;
}

static int island_set_projected(void *state) {
  island *I = (island *)state;
  for (int k = 0; k < I->nm; ++k) {
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_set_projected(I->m[k]));
  }
  return DR_OK;
}

static size_t island_count(void *state) {
  const island *I = (const island *)state;
  size_t n = 0;
  for (int k = 0; k < I->nm; ++k) n += I->m[k]->n;
  return n;
}

static int island_stats(void *state, backend_stats *out) {
  island *I = (island *)state;
  memset(out, 0, sizeof *out);
  for (int k = 0; k < I->nm; ++k) {
    backend_stats one;
    DR_TRY(use(I->m[k]));
    DR_TRY(cuda_stats(I->m[k], &one));
    out->rebuilds = one.rebuilds; /* every member rebuilds together */
    out->n_particles += one.n_particles;
    out->n_blocks += one.n_blocks; /* a block shared by the GPUs counts once per GPU */
    out->bytes += one.bytes;
    if (one.vote_wait_s > out->vote_wait_s) out->vote_wait_s = one.vote_wait_s; /* the members open together */
  }
  return DR_OK;
}

void island_xl_free(island *I) {
  for (int j = 0; j < I->n_xl; ++j)
    for (int k = 0; k < I->nm; ++k) free(I->xl[j].idx[k]);
  for (int j = 0; j < I->n_xl; ++j) {
    if (I->xl[j].link_map.ptr) (void)use(I->m[0]);
    dvec_free(&I->xl[j].link_map);
  }
  I->n_xl = 0;
}

static void island_destroy(void *state) {
  island *I = (island *)state;
  if (!I) return;
  crew_stop(I);
  for (int k = 0; k < I->nm; ++k) cuda_destroy(I->m[k]);
  island_xl_free(I);
  free(I->xl);
  free(I->codes);
  for (int k = 0; k < I->nm; ++k) free(I->where[k]);
  cuda_host_release(I->rec_in);
  free(I);
}

static int island_wants_rebuild_be(void *state) { return island_wants_rebuild((const island *)state); }

/* The zone G2P checks in the frame loop's graphs (lag_of), in the trace. */
void island_log_zone(const cuda_state *s) {
  log_trace("%d GPU%s: G2P checks %s", s->nm, s->nm > 1 ? "s" : "",
            s->void_steps ? "the whole free zone (a step after a leave is voided)"
                          : "the free zone less a cell a queued step");
}

/* The island with p's particles, or src's where src is not NULL: src is read once for the split
 * (island_assign_source: the positions), then once more for each member, which takes its own rows
 * as they come (member_source, cuda_upload_from's chunks), so that the host holds the positions
 * and a byte a particle, never the particles; p is split on the host (island_split). Either way
 * member k holds its particles in their order in p or src. */
static int island_make(const sim_params *prm, const int *dev, int nm, particles *p, const particle_source *src,
                       backend *out) {
  DR_TRY(island_peers(dev, nm, prm->island_reduce == ISLAND_REDUCE_P2P_ATOMICS));
  island *I = (island *)dr_calloc(1, sizeof *I, "cuda island");
  if (!I) return DR_ENOMEM;
  I->nm = nm;
  particles parts[MAX_GPUS];
  memset(parts, 0, sizeof parts);
  uint8_t *member = NULL;
  int rc = DR_OK;
  for (int k = 0; k < nm && rc == DR_OK; ++k) rc = cuda_member_new(prm, dev[k], &I->m[k]);
  if (rc == DR_OK) rc = src ? island_assign_source(I, src, &member) : island_split(I, p, parts);
  for (int k = 0; k < nm && rc == DR_OK; ++k) {
    cuda_state *s = I->m[k];
    s->nm = nm;
    s->me = k;
    s->events = prm->island_barrier == ISLAND_BARRIER_EVENTS;
    s->atomics = prm->island_reduce == ISLAND_REDUCE_P2P_ATOMICS;
    s->begin_barrier = !s->events && !s->atomics;
    s->void_steps &= !s->events; /* no device barrier at the beginning to share the flag */
    for (int q = 0, j = 0; j < nm; ++j)
      if (j != k) s->peer[q++] = I->m[j];
  }
  if (rc == DR_OK) island_log_zone(I->m[0]);
  for (int k = 0; k < nm && rc == DR_OK; ++k) {
    if (!src) {
      rc = cuda_setup(I->m[k], &parts[k], NULL);
      continue;
    }
    member_source ms;
    particle_source mine;
    rc = member_source_open(src, member, k, &ms, &mine);
    if (rc == DR_OK) rc = cuda_setup(I->m[k], NULL, &mine);
    member_source_close(&ms);
  }
  if (rc == DR_OK) rc = island_tag(I);
  if (rc == DR_OK) rc = crew_start(I);
  for (int k = 0; k < nm; ++k) particles_free(&parts[k]);
  memtally_free(member);
  if (rc) {
    island_destroy(I);
    return rc;
  }
  if (p) particles_free(p);
  /* each step's P2G queued ahead of the ranks' vote, behind a gate on every member (as one GPU's;
   * --steps-ahead, by default on where the node's ranks have GPUs of their own) */
  for (int k = 0; k < nm; ++k) I->m[k]->ahead_on = island_ahead_default(prm, nm);
  /* as for one GPU: the boundary's P2G first, its sums sent while the interior scatters; the
   * interior's G2P while they are in flight (docs/performance.md). p2p_atomics keeps the whole
   * step (its grid update is not split: island_grid_update_part). */
  const int split = !I->m[0]->atomics;
  *out = backend{
      .name = "cuda",
      .n_devices = nm,
      .state = I,
      .set_time = island_set_time,
      .rebuild = island_rebuild_phase,
      .p2g = island_p2g,
      .p2g_part = split ? island_p2g_part : NULL,
      .grid_update = island_grid_update,
      .g2p = island_g2p,
      .g2p_ahead = island_g2p_ahead,
      .g2p_collect = island_g2p_collect_be,
      .gate_open = island_gate_open,
      .max_speed = island_max_speed,
      .finish = island_finish,
      .advance_frame = island_advance_frame,
      .download = island_download,
      .snapshot = island_snapshot,
      .fetch = island_fetch,
      .fetch_rows = island_fetch_rows,
      .hold_rows = island_hold_rows,
      /* several ranks, each with its island */
      .blocks = island_blocks,
      .block_sums = xdev_sums_floats(I->m[0]),
      .sums_int64 = I->m[0]->det,
      /* the node exchange of one GPU, packed and unpacked by member 0 over P2P; the masks in one
       * call (a barrier: not queued behind the step vote's gate) */
      .node_masks = island_node_masks,
      .pack_nodes = island_pack_nodes,
      .unpack_add_nodes = island_unpack_add_nodes,
      .mark_shared = island_mark_shared,
      .grid_update_part = island_grid_update_part,
      .g2p_interior = split ? island_g2p_interior : NULL,
      .alloc_sums = island_alloc_sums,
      .free_sums = cuda_free_sums,
      .wants_rebuild = island_wants_rebuild_be,
      .set_particles = island_set_particles,
      .add_particles = island_add_particles,
      .emigrate = island_emigrate,
      .emigrate_records = island_emigrate_records,
      .read_records = island_read_records,
      .add_records = island_add_records,
      .reserve_records = island_reserve_records,
      .particle_blocks = island_particle_blocks,
      .projected = island_projected,
      .set_projected = island_set_projected,
      .set_last_dt = island_set_last_dt,
      .stats = island_stats,
      .count = island_count,
      .destroy = island_destroy,
  };
  size_t held = 0;
  char line[512];
  int len = 0;
  for (int k = 0; k < nm; ++k) {
    held += (size_t)cuda_held_bytes(I->m[k]);
    len += snprintf(line + len, sizeof line - (size_t)len, "%s%d: %zu (packets of up to %d)", k ? ", " : "", dev[k],
                    I->m[k]->n, LANES);
    if (len >= (int)sizeof line) len = (int)sizeof line - 1;
  }
  log_info("cuda island: %d GPUs (%s), %s; particles split along %c, %zu grid blocks on GPU 0, %.1f MiB of device "
           "memory in all; barrier %s, reduction %s", nm, I->m[0]->device_name, line, "xyz"[I->axis],
           I->m[0]->n_blocks, held / 1048576.0, scene_island_barrier_names[I->m[0]->events],
           scene_island_reduce_names[I->m[0]->atomics]);
  return DR_OK;
}

/* Compact storage's packets run on one GPU a rank: the island's split, its particles' moves between
 * members and its fetches take float packets. */
static int island_storage(const sim_params *prm, int nm) {
  if (prm->storage != STORAGE_COMPACT) return DR_OK;
  return dr_fail(DR_EINPUT, "parallel.storage \"compact\" runs on one GPU a rank; this rank was given an island of "
                            "%d GPUs: give each rank one GPU (--devices N) or use "
                            "storage \"float\"",
                 nm);
}

int island_create(const sim_params *prm, const int *dev, int nm, particles *p, backend *out) {
  DR_TRY(island_storage(prm, nm));
  return island_make(prm, dev, nm, p, NULL, out);
}

int island_create_from(const sim_params *prm, const int *dev, int nm, const particle_source *src, backend *out) {
  DR_TRY(island_storage(prm, nm));
  return island_make(prm, dev, nm, NULL, src, out);
}
