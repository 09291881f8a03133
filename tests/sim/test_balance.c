/* test_balance - mpi/balance.c's rules for moving the cuts, against figures worked out here.
 *
 *   - threshold: an imbalance above parallel.balance_threshold moves the cuts at once, with the
 *     cost rule on or off, and the lost time starts again from 0;
 *   - cost: at a steady imbalance x, a mean compute time T per rebuild interval and n particles
 *     per rank, the cuts move at the first interval k where k T x reaches the estimate
 *     a + b x n (a, b the priors), and not one interval earlier; after that, again k intervals
 *     later (the count starts from 0);
 *   - the cost rule off, or an imbalance at or below BALANCE_COST_MIN_IMBALANCE: never, however
 *     long it lasts;
 *   - a measured rebalance replaces the per-particle prior: measured time t for m particles gives
 *     b = (t - a) / m, and a falls to t where t < a;
 *   - rent or buy: over a run whose imbalance grows by a step each interval and falls to 0 when
 *     the cuts move, the rule's lost time plus its rebalance costs stay within twice those of
 *     the best schedule (found by trying every set of rebalance intervals of a short run). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "balance.h"

#include "check.h"

static void test_threshold(void) {
  for (int cost = 0; cost <= 1; ++cost) {
    balance_model m;
    balance_init(&m, 0.2, cost);
    double est = -1;
    CHECK(balance_decide(&m, 0.19, 0.01, 1e6, &est) == BALANCE_STAY, "cost %d: 19%% below a 20%% threshold moved the cuts",
          cost);
    CHECK(fabs(m.lost_s - 0.01 * 0.19) < 1e-15, "cost %d: lost %g s, expected %g", cost, m.lost_s, 0.01 * 0.19);
    CHECK(fabs(est - (BALANCE_PRIOR_FIXED_S + BALANCE_PRIOR_PER_PARTICLE_S * 0.19e6)) < 1e-12, "cost %d: estimate %g s",
          cost, est);
    CHECK(balance_decide(&m, 0.21, 0.01, 1e6, NULL) == BALANCE_THRESHOLD, "cost %d: 21%% did not move the cuts", cost);
    CHECK(m.lost_s == 0, "cost %d: lost time %g s kept after the cuts moved", cost, m.lost_s);
    CHECK(fabs(m.lost_prev_s - 0.01 * 0.4) < 1e-15, "cost %d: lost before the move %g s, expected %g", cost,
          m.lost_prev_s, 0.01 * 0.4);
  }
}

/* The interval at which a steady imbalance x moves the cuts: the first k with k T x >= a + b x n,
 * (T x away from a tie: the interval before falls short by 5% of T x or more). */
static void test_cost_steady(void) {
  const double T = 0.021, x = 0.05, n = 2e6; /* lost 1.05 ms an interval, against a + b 1e5 */
  const double est = BALANCE_PRIOR_FIXED_S + BALANCE_PRIOR_PER_PARTICLE_S * x * n;
  const int want = (int)ceil(est / (T * x) - 1e-9);
  balance_model m;
  balance_init(&m, 0.2, 1);
  for (int round = 0; round < 2; ++round) {
    int moved_at = 0;
    for (int k = 1; k <= 10 * want && !moved_at; ++k) {
      const balance_why why = balance_decide(&m, x, T, n, NULL);
      CHECK(why == BALANCE_STAY || why == BALANCE_COST, "round %d interval %d: moved by %d", round, k, (int)why);
      if (why != BALANCE_STAY) moved_at = k;
    }
    CHECK(moved_at == want, "round %d: the cost rule moved the cuts at interval %d, expected %d (estimate %g s, %g s lost "
          "an interval)", round, moved_at, want, est, T * x);
    CHECK(m.lost_s == 0 && fabs(m.lost_prev_s - want * T * x) < 1e-12 && m.lost_prev_s >= est &&
              m.lost_prev_s - T * x < est, "round %d: lost %g s, before the move %g s",
          round, m.lost_s, m.lost_prev_s);
  }
}

static void test_never(void) {
  balance_model off, small;
  balance_init(&off, 0.2, 0);
  balance_init(&small, 0.2, 1);
  int moved_off = 0, moved_small = 0;
  for (int k = 0; k < 100000; ++k) {
    moved_off += balance_decide(&off, 0.15, 1.0, 1e6, NULL) != BALANCE_STAY;
    moved_small += balance_decide(&small, BALANCE_COST_MIN_IMBALANCE, 1.0, 1e6, NULL) != BALANCE_STAY;
  }
  CHECK(moved_off == 0, "cost rule off: the cuts moved %d times at 15%% (threshold 20%%)", moved_off);
  CHECK(moved_small == 0, "the cuts moved %d times at the smallest imbalance the cost rule ignores", moved_small);
  CHECK(off.lost_s > 1e4, "the lost time was not counted with the cost rule off: %g s", off.lost_s);
}

static void test_measured(void) {
  balance_model m;
  balance_init(&m, 0.2, 1);
  CHECK(!m.measured, "measured before any rebalance");
  balance_measured(&m, 0.030, 1e5);
  CHECK(m.measured && m.fixed_s == BALANCE_PRIOR_FIXED_S, "a measurement above the fixed part changed it: %g", m.fixed_s);
  CHECK(fabs(m.per_particle_s - (0.030 - BALANCE_PRIOR_FIXED_S) / 1e5) < 1e-18, "per particle %g s, expected %g",
        m.per_particle_s, (0.030 - BALANCE_PRIOR_FIXED_S) / 1e5);
  CHECK(fabs(balance_cost(&m, 1e5) - 0.030) < 1e-12, "the estimate for the measured count is %g s, not the 30 ms measured",
        balance_cost(&m, 1e5));
  balance_measured(&m, 0.002, 10);
  CHECK(m.fixed_s == 0.002 && m.per_particle_s == 0, "a 2 ms rebalance of 10 particles: fixed %g s, per particle %g s",
        m.fixed_s, m.per_particle_s);
  balance_measured(&m, 0, 1e5);
  CHECK(m.fixed_s == 0.002 && m.per_particle_s == 0, "an unmeasured rebalance changed the model");
}

/* Rent or buy, against every schedule: a run of K intervals whose imbalance grows by g an
 * interval from the last move (lost T x an interval, x = g j after j intervals) and a rebalance
 * of a fixed cost C (the per-particle part 0). The rule's total (lost + C per move) is at most
 * twice the best schedule's, found over all 2^K subsets of intervals to move at. */
static double schedule_cost(int K, unsigned moves, double T, double g, double C) {
  double total = 0;
  int j = 0;
  for (int k = 0; k < K; ++k) {
    ++j;
    total += T * g * j;
    if (moves >> k & 1) total += C, j = 0;
  }
  return total;
}

static void test_rent_or_buy(void) {
  const int K = 16;
  const double T = 0.01, C = BALANCE_PRIOR_FIXED_S;
  for (double g = 0.0125; g <= 0.2; g *= 2) {
    balance_model m;
    balance_init(&m, 1e9, 1);
    m.per_particle_s = 0; /* a fixed cost, as the schedules below count it */
    unsigned rule = 0;
    int j = 0;
    for (int k = 0; k < K; ++k) {
      ++j;
      if (balance_decide(&m, g * j, T, 1e6, NULL) != BALANCE_STAY) rule |= 1u << k, j = 0;
    }
    double best = INFINITY;
    for (unsigned s = 0; s < 1u << K; ++s) best = fmin(best, schedule_cost(K, s, T, g, C));
    const double got = schedule_cost(K, rule, T, g, C);
    printf("growth %.4f an interval: the rule's cost %.4f s, the best schedule's %.4f s (ratio %.2f)\n", g, got, best,
           got / best);
    CHECK(got <= 2 * best + 1e-12, "growth %g: the rule cost %g s, more than twice the best %g s", g, got, best);
  }
}

int main(void) {
  test_threshold();
  test_cost_steady();
  test_never();
  test_measured();
  test_rent_or_buy();
  if (failures_) fprintf(stderr, "test_balance: %d failure(s)\n", failures_);
  else printf("test_balance: all passed\n");
  return failures_ ? 1 : 0;
}
