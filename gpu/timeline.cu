// timeline.cu - GPU marks (--help-debug: DRIFT_GPU_MARKS, the stream's timeline between backend
// entries, from events) and GPU stamps (DRIFT_GPU_STAMPS, the device's clock between a step's
// kernels, from step_ctl.stamp). Debugging aids only: off, they cost nothing on the step's path.

#include "cuda_state.h"

/* ---- the stream's timeline (DRIFT_GPU_MARKS) ------------------------------------------------
 * A diagnostic for the phases that several ranks drive: every backend entry (on_device) records an
 * event on the member's stream as it begins and as it ends, and the time from each mark to the
 * next is summed by the pair of marks. Between an entry's end and the next entry's begin nothing
 * of this stream runs, so that pair's time is the device waiting for the host (the vote, MPI);
 * between an entry's begin and its end, the device runs what the entry queued (and waits where
 * the entry waited). DRIFT_GPU_MARKS=1 logs the sums when the backend ends; =N (above 1) also
 * logs the largest pairs of every N steps (g2p calls). Off by default: recording costs the host
 * about 2 us a mark. */
enum { MARKS_POOL = 512, MARKS_PAIRS = 96 };
typedef struct marks_table {
  struct {
    const char *a, *b;
    int ta, tb;
    char ea, eb;
    long count;
    double ms;
  } pair[MARKS_PAIRS];
  int npairs;
} marks_table;
typedef struct gpu_marks {
  cudaEvent_t ev[MARKS_POOL];
  const char *name[MARKS_POOL]; /* an entry's __PRETTY_FUNCTION__ */
  int tag[MARKS_POOL];          /* the part of cuda_p2g_part and grid_update_part, else -1 */
  char end[MARKS_POOL];
  int n;                        /* marks recorded since the last fold; ev[0] holds the last one folded */
  int gate_at;                  /* with a step queued behind a shut gate (k_begin_gated): the marks recorded
                                 * before it, the only ones a fold may wait for; else -1 */
  marks_table total, win;       /* the whole run, and the steps since the last window's log */
  long period, steps;           /* DRIFT_GPU_MARKS's N; g2p calls so far */
} gpu_marks;

/* The entry's name out of its wrapper's __PRETTY_FUNCTION__. */
static void marks_entry(const char *pretty, int tag, char *out, size_t cap) {
  const char *f = pretty; /* the last " = " names F ("[with A = {float}; int (* F)(void*, A ...) = g2p]") */
  for (const char *q = strstr(pretty, " = "); q; q = strstr(q + 3, " = ")) f = q + 3;
  if (*f == '&') ++f;
  if (!strncmp(f, "cuda_", 5)) f += 5; /* the op's name (cuda_p2g: p2g), as backend.h calls it */
  size_t k = 0;
  while (f[k] && f[k] != ']' && f[k] != ';' && k + 1 < cap) out[k] = f[k], ++k;
  out[k] = 0;
  if (tag >= 0) snprintf(out + k, cap - k, "(%d)", tag);
}

static void marks_add(marks_table *t, const gpu_marks *m, int i, double ms) {
  int j = 0;
  while (j < t->npairs && !(t->pair[j].a == m->name[i - 1] && t->pair[j].ta == m->tag[i - 1] &&
                            t->pair[j].ea == m->end[i - 1] && t->pair[j].b == m->name[i] &&
                            t->pair[j].tb == m->tag[i] && t->pair[j].eb == m->end[i]))
    ++j;
  if (j == t->npairs) {
    if (j == MARKS_PAIRS) return;
    ++t->npairs;
    t->pair[j].a = m->name[i - 1], t->pair[j].ta = m->tag[i - 1], t->pair[j].ea = m->end[i - 1];
    t->pair[j].b = m->name[i], t->pair[j].tb = m->tag[i], t->pair[j].eb = m->end[i];
    t->pair[j].count = 0, t->pair[j].ms = 0.0;
  }
  t->pair[j].count += 1;
  t->pair[j].ms += ms;
}

/* Sums the time between consecutive marks up to the upto-th (waits for it), keeping that one as
 * the next window's first and the later ones after it. */
static int marks_fold_to(gpu_marks *m, int upto) {
  if (upto < 2) return DR_OK;
  CU(cudaEventSynchronize(m->ev[upto - 1]));
  for (int i = 1; i < upto; ++i) {
    float ms = 0.0f;
    CU(cudaEventElapsedTime(&ms, m->ev[i - 1], m->ev[i]));
    marks_add(&m->total, m, i, ms);
    marks_add(&m->win, m, i, ms);
  }
  const int first = upto - 1, keep = m->n - first;
  cudaEvent_t spare[MARKS_POOL];
  for (int i = 0; i < first; ++i) spare[i] = m->ev[i]; /* the folded marks' events, for reuse */
  for (int i = 0; i < keep; ++i) {
    m->ev[i] = m->ev[first + i], m->name[i] = m->name[first + i], m->tag[i] = m->tag[first + i];
    m->end[i] = m->end[first + i];
  }
  for (int i = 0; i < first; ++i) m->ev[keep + i] = spare[i];
  m->n = keep;
  if (m->gate_at >= 0) m->gate_at -= first;
  return DR_OK;
}

/* Every mark folded, or with a step queued behind a shut gate, those before it: a mark behind the
 * gate completes only once the host opens it, after the step vote (a wait for it here, before the
 * vote, would hold the gate shut until it times out). */
static int marks_fold(gpu_marks *m) { return marks_fold_to(m, m->gate_at >= 0 ? m->gate_at : m->n); }

/* Logs a table's pairs (at most limit), largest first, on stderr: every rank's. */
static void marks_log(const cuda_state *s, marks_table *t, const char *what, int limit) {
  for (int i = 0; i < t->npairs; ++i)
    for (int j = i + 1; j < t->npairs; ++j)
      if (t->pair[j].ms > t->pair[i].ms) {
        const auto x = t->pair[i];
        t->pair[i] = t->pair[j], t->pair[j] = x;
      }
  fprintf(stderr, "gpu marks, rank %d, device %d: %s: the stream's time between consecutive entry marks, by pair "
          "(ms in all, count, us each)\n", s->prm.rank, s->device, what);
  for (int i = 0; i < t->npairs && i < limit; ++i) {
    char a[64], b[64];
    marks_entry(t->pair[i].a, t->pair[i].ta, a, sizeof a), marks_entry(t->pair[i].b, t->pair[i].tb, b, sizeof b);
    fprintf(stderr, "gpu marks, rank %d, device %d: %9.2f ms %7ld x %8.1f us  %s.%s -> %s.%s\n", s->prm.rank, s->device,
            t->pair[i].ms, t->pair[i].count, 1e3 * t->pair[i].ms / (double)t->pair[i].count, a,
            t->pair[i].ea ? "end" : "begin", b, t->pair[i].eb ? "end" : "begin");
  }
}

/* DRIFT_GPU_MARKS beside the step vote's gate: shut (k_begin_gated queued), the marks so far are
 * the ones a fold may wait for; open, every one again. */
void timeline_marks_gate(cuda_state *s, int shut) {
  gpu_marks *m = s->marks;
  if (!m) return;
  if (!shut) m->gate_at = -1;
  else if (m->gate_at < 0) m->gate_at = m->n;
}

/* One mark on the member's stream; an end mark of an entry that waited for its stream folds, and
 * the end of every period-th g2p logs the window. */
int timeline_marks_record(cuda_state *s, const char *name, int tag, int end, int step_end) {
  gpu_marks *m = s->marks;
  if (m->n == MARKS_POOL) DR_TRY(marks_fold(m));
  if (m->n == MARKS_POOL) return DR_OK; /* every mark behind a shut gate (not in a step of ~20 entries): this one lost */
  if (!m->ev[m->n]) CU(cudaEventCreate(&m->ev[m->n]));
  CU(cudaEventRecord(m->ev[m->n], s->stream));
  m->name[m->n] = name, m->tag[m->n] = tag, m->end[m->n] = (char)end;
  ++m->n;
  if (end && step_end && m->period > 1 && ++m->steps % m->period == 0) {
    DR_TRY(marks_fold(m));
    char what[64];
    snprintf(what, sizeof what, "steps %ld-%ld", m->steps - m->period + 1, m->steps);
    marks_log(s, &m->win, what, 12);
    m->win.npairs = 0;
    return DR_OK;
  }
  return end && cudaEventQuery(m->ev[m->n - 1]) == cudaSuccess ? marks_fold_to(m, m->n) : DR_OK;
}

/* DRIFT_GPU_STAMPS=1: the time from each stamp of an island step (enum stamp_at) to the next, per
 * member, kept as samples (the first STAMP_SAMPLES steps) for a median and a mean, logged when the
 * backend ends. What the marks above cannot show inside a graph: the step's kernels one by one
 * (from one kernel's start to the next one's, i.e. a kernel and the gap after it). The pair
 * g2p > begin spans two steps: G2P (or G2P2G), the flags' copy, and the wait for the next step,
 * which is the host's after a rebuild-mapping or at a frame's end (the median leaves those out). */
#define STAMP_SAMPLES 65536
/* from: the last G2P before a rebuild-mapping (to the next step's first stamp), without and with
 * device allocations (g_dvec_allocs) since */
enum { ST_REBUILT = ST_COUNT, ST_REBUILT_ALLOC, ST_FROM };
typedef struct gpu_stamps {
  float *v[ST_FROM][ST_COUNT]; /* [from][to]: us */
  size_t n[ST_FROM][ST_COUNT];
  unsigned long long last_g2p; /* the last step's G2P stamp (0: none) */
  uint64_t last_rebuilds;      /* the member's rebuild-mappings at that step */
  unsigned long last_allocs;   /* g_dvec_allocs then */
  long steps;
} gpu_stamps;

static const char *const stamp_names[ST_FROM] = {
    "gate", "begin", "p2g", "barrier", "published", "passed", "grid", "g2p", "g2p, rebuild-mapping,",
    "g2p, rebuild-mapping with allocations,"};

static void stamps_add(gpu_stamps *g, int a, int b, unsigned long long t0, unsigned long long t1) {
  if (t1 < t0) return;
  if (!g->v[a][b] && !(g->v[a][b] = (float *)malloc(STAMP_SAMPLES * sizeof(float)))) return;
  if (g->n[a][b] < STAMP_SAMPLES) g->v[a][b][g->n[a][b]++] = (float)((double)(t1 - t0) * 1e-3);
}

/* A performed step's stamps (its flags' copy in the host's slot). */
void timeline_stamps_take(cuda_state *s, const step_ctl *c) {
  gpu_stamps *g = s->stamps;
  if (!g || !c->performed) return;
  ++g->steps;
  int last = -1;
  for (int i = 0; i < ST_COUNT; ++i) {
    if (!c->stamp[i]) continue;
    if (last >= 0) stamps_add(g, last, i, c->stamp[last], c->stamp[i]);
    else if (g->last_g2p) {
      const unsigned long allocs = __atomic_load_n(&g_dvec_allocs, __ATOMIC_RELAXED);
      const int from = s->rebuilds == g->last_rebuilds ? (int)ST_G2P
                       : allocs == g->last_allocs     ? (int)ST_REBUILT
                                                      : (int)ST_REBUILT_ALLOC;
      stamps_add(g, from, i, g->last_g2p, c->stamp[i]);
    }
    last = i;
  }
  g->last_g2p = c->stamp[ST_G2P];
  g->last_rebuilds = s->rebuilds;
  g->last_allocs = __atomic_load_n(&g_dvec_allocs, __ATOMIC_RELAXED);
}

static int by_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Logs the stamps' medians, means and 10th percentiles (one write: the ranks of a node share stderr), and frees them. */
void timeline_stamps_free(cuda_state *s) {
  gpu_stamps *g = s->stamps;
  if (!g) return;
  char line[4096];
  size_t at = 0;
#define STAMPS_PUT(...) \
  (void)(at < sizeof line && (at += (size_t)snprintf(line + at, sizeof line - at, __VA_ARGS__)))
  STAMPS_PUT("gpu stamps, device %d (member %d of %d): %ld steps; median (mean, count; 10th percentile) us from a stamp to the next:", s->device,
             s->me, s->nm, g->steps);
  for (int a = 0; a < ST_FROM; ++a)
    for (int b = 0; b < ST_COUNT; ++b) {
      const size_t n = g->n[a][b];
      if (n == 0) continue;
      double sum = 0.0;
      for (size_t i = 0; i < n; ++i) sum += g->v[a][b][i];
      qsort(g->v[a][b], n, sizeof(float), by_float);
      STAMPS_PUT("  %s>%s %.2f (%.2f, %zu; p10 %.2f)", stamp_names[a], stamp_names[b], (double)g->v[a][b][n / 2],
                 sum / (double)n, n, (double)g->v[a][b][n / 10]);
    }
  STAMPS_PUT("  device allocations %lu", __atomic_load_n(&g_dvec_allocs, __ATOMIC_RELAXED));
#undef STAMPS_PUT
  fprintf(stderr, "%.*s\n", (int)(at < sizeof line ? at : sizeof line - 1), line);
  for (int a = 0; a < ST_FROM; ++a)
    for (int b = 0; b < ST_COUNT; ++b) free(g->v[a][b]);
  free(g);
  s->stamps = NULL;
}

/* Logs the run's sums and frees the marks. */
void timeline_marks_free(cuda_state *s) {
  gpu_marks *m = s->marks;
  if (!m) return;
  if (marks_fold(m) != DR_OK) dr_clear();
  marks_log(s, &m->total, "the run", MARKS_PAIRS);
  for (int i = 0; i < MARKS_POOL; ++i)
    if (m->ev[i]) cudaEventDestroy(m->ev[i]);
  free(m);
  s->marks = NULL;
}

/* The marks and stamps a member keeps, as the settings ask (--help-debug); out of host memory,
 * none are kept (a debugging aid does not fail the run). */
void timeline_new(cuda_state *s) {
  const int gm = settings()->gpu_marks;
  if (gm > 0) { /* freed by destroy, which logs them */
    s->marks = (gpu_marks *)calloc(1, sizeof *s->marks);
    if (!s->marks) fprintf(stderr, "DRIFT_GPU_MARKS: out of host memory for the marks; none are kept\n");
    else s->marks->period = gm, s->marks->gate_at = -1;
  }
  g_dvec_log = settings()->gpu_stamps;
  if (g_dvec_log && !(s->stamps = (gpu_stamps *)calloc(1, sizeof *s->stamps)))
    fprintf(stderr, "DRIFT_GPU_STAMPS: out of host memory for the stamps; none are kept\n");
}
