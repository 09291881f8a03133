/* balance.c - when the cuts between ranks move: the threshold and cost rules (balance.h). */
#include "balance.h"

void balance_init(balance_model *m, double threshold, int use_cost) {
  *m = (balance_model){.threshold = threshold,
                       .use_cost = use_cost,
                       .fixed_s = BALANCE_PRIOR_FIXED_S,
                       .per_particle_s = BALANCE_PRIOR_PER_PARTICLE_S};
}

double balance_cost(const balance_model *m, double moved) {
  return m->fixed_s + m->per_particle_s * (moved > 0 ? moved : 0);
}

balance_why balance_decide(balance_model *m, double imbalance, double mean_compute_s, double mean_particles,
                           double *estimate_s) {
  if (imbalance < 0) imbalance = 0;
  if (mean_compute_s > 0) m->lost_s += mean_compute_s * imbalance;
  /* a rebalance moves the excess of the largest rank: about imbalance x the mean count */
  const double est = balance_cost(m, imbalance * mean_particles);
  if (estimate_s) *estimate_s = est;
  balance_why why = BALANCE_STAY;
  if (imbalance > m->threshold) why = BALANCE_THRESHOLD;
  else if (m->use_cost && imbalance > BALANCE_COST_MIN_IMBALANCE && m->lost_s >= est) why = BALANCE_COST;
  if (why != BALANCE_STAY) m->lost_prev_s = m->lost_s, m->lost_s = 0;
  return why;
}

void balance_measured(balance_model *m, double measured_s, double moved) {
  if (!(measured_s > 0)) return;
  if (measured_s < m->fixed_s) m->fixed_s = measured_s;
  m->per_particle_s = moved >= 1 ? (measured_s - m->fixed_s) / moved : m->per_particle_s;
  m->measured = 1;
}
