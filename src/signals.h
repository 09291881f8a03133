/* signals.h - stopping a run cleanly when asked: SIGTERM (scancel, a time limit), SIGINT (Ctrl-C)
 * and SIGUSR1 (what `sbatch --signal` sends before the time limit; see jobs/drift.sbatch). The
 * handler only records the signal (async-signal-safe); the time loop (sim.c) looks at it before
 * every substep (the CUDA backend's own frame loop before it queues each step, through
 * frame_plan.stop of backend.h), every rank learns at the next step whether any rank got one (it
 * rides on the per-step allreduce), and all write a checkpoint together and exit with DR_ESTOPPED. A second
 * SIGINT ends the process at once, as Ctrl-C twice is expected to. */
#ifndef DRIFT_SIGNALS_H
#define DRIFT_SIGNALS_H

/* Installs the handlers (after MPI_Init, so that they replace any the MPI library set). */
int signals_install(void);
/* The first signal received since signals_install, or 0. */
int signals_pending(void);
/* "SIGTERM", "SIGINT", "SIGUSR1", else "signal N" (static storage). */
const char *signals_name(int sig);

#endif
