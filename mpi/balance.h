/* balance.h - when the cuts between ranks move (sim.c, redistribute).
 *
 * Two rules, checked at every rebuild-mapping of several ranks:
 *   threshold  the largest rank's load exceeds the mean by parallel.balance_threshold (20%);
 *   cost       (parallel.balance_cost, on by default) the step time lost to the imbalance since
 *              the cuts last moved has grown past what moving them is estimated to cost.
 *
 * The cost rule is the rent-or-buy rule of dynamic load balancing (Menon et al., SC'12, "A
 * distributed dynamic load balancer for iterative applications"): an imbalance below the
 * threshold is paid at every step for as long as it lasts (weak_4 on 4 x H200 settled at 12%,
 * 7 ms a frame for the rest of the run), and a rebalance costs once. Moving the cuts as soon as
 * the time lost equals the cost of moving them never pays more than twice what the best
 * schedule would.
 *
 * The time lost over a rebuild interval is the mean rank's compute time times the imbalance of
 * the measure the cuts balance (particles or time, balance_by): what the lighter ranks wait for
 * the largest. A rebalance's cost is a + b M for M particles moved: a the fixed part (the load's
 * histogram, the cuts, a rebuild-mapping), b per particle (packing, copies, MPI). Until a
 * rebalance has been timed, a and b are priors; each rebalance then measures itself, and b
 * follows the measurement. Every input is agreed by all ranks (the step vote), so that every
 * rank takes the same decision. */
#ifndef DRIFT_BALANCE_H
#define DRIFT_BALANCE_H

typedef struct balance_model {
  double threshold;   /* the threshold rule's fraction (parallel.balance_threshold) */
  int use_cost;       /* the cost rule (parallel.balance_cost) */
  double lost_s;      /* the step time lost to the imbalance since the cuts last moved */
  double lost_prev_s; /* what lost_s was when the cuts last moved (for the log) */
  double fixed_s;     /* a rebalance's cost: a, s */
  double per_particle_s; /* and b, s per particle moved */
  int measured;       /* a rebalance has been timed */
} balance_model;

/* Below this imbalance the cost rule never moves the cuts: step times vary by about that much
 * from step to step, and moving the cuts for it would chase noise. */
#define BALANCE_COST_MIN_IMBALANCE 0.02
/* balance_by time: the load is each rank's compute time since the cuts last moved, and neither
 * rule moves the cuts before that holds this many steps. Timed over a rebuild interval alone (a
 * few steps, the first ones with the start's costs in them) the load is noise of several percent,
 * and a low threshold then moves the cuts at almost every frame, millions of particles each time
 * (docs/performance.md, the decisions table). */
#define BALANCE_TIME_MIN_STEPS 100
/* The priors, from weak_2's rebalance on 2 x H100 with the buffers reserved at the start
 * (docs/performance.md): 623,190 particles moved in 32.4 ms, of which 6.2 ms the histogram and
 * the cuts, and the rest (the device's pack and copy, MPI through host memory between two
 * processes of one node, the arrivals' rebuild-mapping) 42 ns a particle; rounded up. */
#define BALANCE_PRIOR_FIXED_S 6e-3
#define BALANCE_PRIOR_PER_PARTICLE_S 50e-9

void balance_init(balance_model *m, double threshold, int use_cost);

/* What a rebalance now is estimated to cost, moving moved particles. */
double balance_cost(const balance_model *m, double moved);

/* Why the cuts move at this rebuild-mapping, if they do. */
typedef enum { BALANCE_STAY = 0, BALANCE_THRESHOLD, BALANCE_COST } balance_why;

/* The decision at a rebuild-mapping. imbalance: the largest load over the mean, minus 1, in the
 * measure the cuts balance; mean_compute_s: the mean rank's compute time since the last
 * rebuild-mapping; mean_particles: particles per rank. Adds the interval's lost time, and starts
 * it again from 0 when the cuts move. *estimate_s: the cost the cost rule compared it with. */
balance_why balance_decide(balance_model *m, double imbalance, double mean_compute_s, double mean_particles,
                           double *estimate_s);

/* A rebalance that moved moved particles took measured_s (the slowest rank's time): b follows
 * it (and a, where the whole took less than a). */
void balance_measured(balance_model *m, double measured_s, double moved);

#endif
