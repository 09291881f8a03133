/* settings.c - the table of drift's settings and their one parser (see settings.h).
 *
 * The table is data: one entry per setting, the value's place in drift_settings given by
 * offsetof. Defaults are text parsed like a given value, so a default is within its bounds by
 * construction. The global values are written once, on the first settings()/settings_check()
 * (pthread_once: the environment) and by settings_init (main, before any thread starts);
 * after that they are only read. This is the only file of drift that calls getenv for a
 * DRIFT_* variable. */
#include "settings.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

enum { T_BOOL, T_INT, T_DOUBLE, T_STRING, T_ENUM, T_LIST };

typedef struct setting_entry {
  const char *option; /* without the dashes; NULL: a debugging aid, environment only */
  const char *env;
  int type, kind;
  size_t offset;              /* of the value in drift_settings */
  size_t count_offset;        /* T_LIST: of the number of values */
  const char *dflt;           /* the default as a value's text; NULL: none (zero, "") */
  double lo, hi;              /* T_INT, T_DOUBLE, the numbers of a T_LIST */
  int lo_open;                /* lo itself is refused */
  const char *const *names;   /* T_ENUM: the names of the values 0, 1, ... */
  const char *meta;           /* the value's placeholder in the help */
  const char *want;           /* what a value is, in the error: "seconds" */
  const char *help;           /* one line */
} setting_entry;

/* off|on|auto: also 1 and 0 (and the other spellings of a bool) for off and on */
static const char *const ONOFFAUTO[] = {"off", "on", "auto", NULL};

#define OFF(field) offsetof(drift_settings, field)

static const setting_entry TABLE[SET_N] = {
    [SET_DEVICES] = {.option = "devices", .env = "DRIFT_DEVICES", .type = T_LIST, .kind = SETTING_USER,
                     .offset = OFF(devices), .count_offset = OFF(n_devices), .lo = 0, .hi = 255,
                     .meta = "LIST", .want = "GPU numbers",
                     .help = "cuda: the GPUs this rank drives, e.g. 2,3 (0,0 runs an island of two on one GPU), "
                             "instead of its share of the node's"},
    [SET_BARRIER_TIMEOUT] = {.option = "barrier-timeout", .env = "DRIFT_BARRIER_TIMEOUT", .type = T_DOUBLE,
                             .kind = SETTING_USER, .offset = OFF(barrier_timeout), .dflt = "120", .lo = 0,
                             .lo_open = 1, .hi = 1e6, .meta = "SECONDS", .want = "seconds",
                             .help = "cuda, several GPUs: a GPU waiting longer at the island's barrier stops the "
                                     "run with an error"},
    [SET_CUDA_AWARE_MPI] = {.option = "cuda-aware-mpi", .env = "DRIFT_CUDA_AWARE_MPI", .type = T_ENUM,
                            .kind = SETTING_USER, .offset = OFF(cuda_aware_mpi), .dflt = "auto",
                            .names = ONOFFAUTO, .meta = "on|off|auto",
                            .help = "several ranks: MPI sends device memory; auto asks Open MPI "
                                    "(MPIX_Query_cuda_support), on trusts the library without asking"},
    [SET_PINNED_MAX_MB] = {.option = "pinned-max-mb", .env = "DRIFT_PINNED_MAX_MB", .type = T_INT,
                           .kind = SETTING_USER, .offset = OFF(pinned_max_mb), .dflt = "0", .lo = 0,
                           .hi = 1048576, .meta = "MB", .want = "a whole number of MiB",
                           .help = "host buffers of particles between ranks above MB MiB are pageable, not "
                                   "page-locked; 0: no limit"},
    [SET_MIGRATE_MARGIN] = {.option = "migrate-margin", .env = "DRIFT_MIGRATE_MARGIN", .type = T_INT,
                            .kind = SETTING_USER, .offset = OFF(migrate_margin), .dflt = "1", .lo = 0, .hi = 4,
                            .meta = "M", .want = "a whole number of blocks",
                            .help = "several ranks: blocks a particle may stray past its rank's box before it "
                                    "migrates (the ranks take the largest)"},
    [SET_STEPS_AHEAD] = {.option = "steps-ahead", .env = "DRIFT_STEP_AHEAD", .type = T_ENUM, .kind = SETTING_USER,
                         .offset = OFF(steps_ahead), .dflt = "auto", .names = ONOFFAUTO, .meta = "on|off|auto",
                         .help = "queue a step's G2P before the ranks' vote ends; auto: on where the node's "
                                 "ranks have GPUs of their own, and on the CPU"},
    [SET_SNAPSHOT_HOST] = {.option = "snapshot-host", .env = "DRIFT_SNAPSHOT_HOST", .type = T_ENUM,
                           .kind = SETTING_USER, .offset = OFF(snapshot_host), .dflt = "auto", .names = ONOFFAUTO,
                           .meta = "on|off|auto",
                           .help = "cuda: the frame's snapshot, which the writer writes behind the steps, in "
                                   "pinned host memory (on) or on the GPU (off); auto: on the GPU where the "
                                   "memory plan has room for it there, else on the host (the capture then "
                                   "crosses PCIe while the steps wait)"},
    [SET_TRACE] = {.env = "DRIFT_TRACE", .type = T_BOOL, .kind = SETTING_DEBUG, .offset = OFF(trace), .dflt = "0",
                   .help = "one stderr line per host-side event, from every rank and thread, stamped in ms"},
    [SET_GPU_MARKS] = {.env = "DRIFT_GPU_MARKS", .type = T_INT, .kind = SETTING_DEBUG, .offset = OFF(gpu_marks),
                       .dflt = "0", .lo = 0, .hi = 1e9, .meta = "N", .want = "a whole number of steps",
                       .help = "cuda: time each backend entry on its stream, logged at the end and every N "
                               "steps; 0: off, 1: at the end only"},
    [SET_GPU_STAMPS] = {.env = "DRIFT_GPU_STAMPS", .type = T_BOOL, .kind = SETTING_DEBUG,
                        .offset = OFF(gpu_stamps), .dflt = "0",
                        .help = "cuda: stamp the island step's kernels and log device vectors' growth, "
                                "summed at the end"},
    [SET_TEST_HOOK] = {.env = "DRIFT_TEST_HOOK", .type = T_STRING, .kind = SETTING_DEBUG,
                       .offset = OFF(test_hook), .meta = "signal|exit|fail|rebuild|stopfile:RANK:STEP",
                       .help = "tests: rank RANK raises SIGTERM, exits or fails alone before substep STEP, or "
                               "fails alone in a rebuild-mapping, or stops (SIGSTOP) as it creates frame STEP's file"},
    [SET_ISLAND_SKEW] = {.env = "DRIFT_ISLAND_SKEW", .type = T_STRING, .kind = SETTING_DEBUG,
                         .offset = OFF(island_skew), .meta = "MEMBER:pre|post:US",
                         .help = "tests: island member MEMBER waits US microseconds before (pre) or after "
                                 "(post) its barrier every step"},
    [SET_BALANCE_PRIOR_MS] = {.env = "DRIFT_BALANCE_PRIOR_MS", .type = T_DOUBLE, .kind = SETTING_DEBUG,
                              .offset = OFF(balance_prior_ms), .lo = 0, .lo_open = 1, .hi = 1e6, .meta = "MS",
                              .want = "milliseconds",
                              .help = "tests: a rebalance's fixed cost before one is measured"},
    [SET_PROGRESS_S] = {.env = "DRIFT_PROGRESS_S", .type = T_DOUBLE, .kind = SETTING_DEBUG,
                        .offset = OFF(progress_s), .lo = 0, .lo_open = 1, .hi = 1e6, .meta = "SECONDS",
                        .want = "seconds",
                        .help = "tests: wall time between progress lines inside a frame, instead of 30 s"},
    [SET_SORT_KEYS64] = {.env = "DRIFT_SORT_KEYS64", .type = T_BOOL, .kind = SETTING_DEBUG,
                         .offset = OFF(sort_keys64), .dflt = "0",
                         .help = "cuda: 64-bit sort keys in the rebuild-mapping where 32 bits would do"},
    [SET_COLLIDER_CACHE] = {.env = "DRIFT_COLLIDER_CACHE", .type = T_INT, .kind = SETTING_DEBUG,
                            .offset = OFF(collider_cache), .dflt = "1", .lo = 1, .hi = 2, .meta = "1|2",
                            .want = "1 (cached) or 2 (refilled every step, a test hook)",
                            .help = "cuda: the samples of mesh colliders' level sets kept per grid node (1) or "
                                    "refilled every step (2), which tests compare against the cache"},
    [SET_FRAME_CHUNK] = {.env = "DRIFT_FRAME_CHUNK", .type = T_INT, .kind = SETTING_DEBUG,
                         .offset = OFF(frame_chunk), .dflt = "0", .lo = 0, .hi = 4194304, .meta = "N",
                         .want = "a whole number of particles (0: memsizes.h's MEM_FRAME_CHUNK, 4194304)",
                         .help = "tests: particles the writer takes of a frame's snapshot, and of a "
                                 "checkpoint's particles, at a time, fewer than MEM_FRAME_CHUNK (and "
                                 "MEM_CKPT_CHUNK), the rows of a resume's pieces on several ranks (fewer than "
                                 "RESUME_ROWS) and the records of a migration's round (fewer than "
                                 "MEM_MIGRATION_ROUND), so that small scenes write, read and migrate in pieces"},
    [SET_CKPT_HOLD] = {.env = "DRIFT_CKPT_HOLD", .type = T_BOOL, .kind = SETTING_DEBUG, .offset = OFF(ckpt_hold),
                       .dflt = "1",
                       .help = "tests: 0 fetches a checkpoint's rows from the live particles while the steps wait, "
                               "as where the memory plan finds no room for the backend's copy of them (1: the "
                               "copy where it fits, written behind the steps)"},
    [SET_WRITER_TEAM] = {.env = "DRIFT_WRITER_TEAM", .type = T_INT, .kind = SETTING_DEBUG,
                         .offset = OFF(writer_team), .dflt = "0", .lo = 0, .hi = 1024, .meta = "N",
                         .want = "a whole number of threads (0: half the cores the rank may use)",
                         .help = "performance: the frame writer's OpenMP team (the copies into a file in memory, "
                                 "the conversions), instead of half the rank's cores (writer.c)"},
    [SET_WRITER_INLINE] = {.env = "DRIFT_WRITER_INLINE", .type = T_BOOL, .kind = SETTING_DEBUG,
                           .offset = OFF(writer_inline), .dflt = "0",
                           .help = "tests: frames and checkpoints written in the main thread, between the "
                                   "steps, as where MPI lacks MPI_THREAD_MULTIPLE (writer.h)"},
};

/* A bool's spellings. Returns 1 or 0, or -1 for none of them. */
static int parse_bool(const char *v) {
  static const char *const on[] = {"1", "on", "true", "yes"}, *const off[] = {"0", "off", "false", "no"};
  for (int i = 0; i < 4; ++i) {
    if (!strcmp(v, on[i])) return 1;
    if (!strcmp(v, off[i])) return 0;
  }
  return -1;
}

/* A bound as a reader writes it: 1000000, not 1e+06. */
static const char *num(double x, char *buf, size_t len) {
  if (x == floor(x) && fabs(x) < 1e15) snprintf(buf, len, "%.0f", x);
  else snprintf(buf, len, "%g", x);
  return buf;
}

static int in_bounds(const setting_entry *e, double x) {
  return (e->lo_open ? x > e->lo : x >= e->lo) && x <= e->hi;
}

/* Parses v into out's field of e. Returns 0, or -1 for a value that is not valid. */
static int parse_value(const setting_entry *e, const char *v, drift_settings *out) {
  char *p = (char *)out + e->offset, *end = NULL;
  switch (e->type) {
  case T_BOOL: {
    const int b = parse_bool(v);
    if (b < 0) return -1;
    *(int *)p = b;
    return 0;
  }
  case T_INT: {
    const long x = strtol(v, &end, 10);
    if (end == v || *end || !in_bounds(e, (double)x)) return -1;
    *(int *)p = (int)x;
    return 0;
  }
  case T_DOUBLE: {
    const double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || !in_bounds(e, x)) return -1;
    *(double *)p = x;
    return 0;
  }
  case T_STRING:
    if (strlen(v) >= SETTINGS_TEXT_MAX) return -1;
    strcpy(p, v);
    return 0;
  case T_ENUM: {
    for (int i = 0; e->names[i]; ++i)
      if (!strcmp(v, e->names[i])) return *(int *)p = i, 0;
    const int b = e->names == ONOFFAUTO ? parse_bool(v) : -1;
    if (b < 0) return -1;
    *(int *)p = b ? SETTING_ON : SETTING_OFF;
    return 0;
  }
  case T_LIST: {
    int vals[SETTINGS_MAX_DEVICES], n = 0;
    const char *c = v;
    do {
      const long x = strtol(c, &end, 10);
      if (end == c || (*end && *end != ',') || !in_bounds(e, (double)x) || n == SETTINGS_MAX_DEVICES) return -1;
      vals[n++] = (int)x;
      c = end + 1;
    } while (*end);
    memcpy(p, vals, sizeof vals);
    *(int *)((char *)out + e->count_offset) = n;
    return 0;
  }
  }
  return -1;
}

/* What a valid value of e is, for the error. */
static void expected(const setting_entry *e, char *buf, size_t len) {
  char a[32], b[32];
  switch (e->type) {
  case T_BOOL: snprintf(buf, len, "on or off (1 or 0)"); break;
  case T_INT: snprintf(buf, len, "%s from %s to %s", e->want, num(e->lo, a, 32), num(e->hi, b, 32)); break;
  case T_DOUBLE:
    if (e->lo_open) snprintf(buf, len, "%s above %s, at most %s", e->want, num(e->lo, a, 32), num(e->hi, b, 32));
    else snprintf(buf, len, "%s from %s to %s", e->want, num(e->lo, a, 32), num(e->hi, b, 32));
    break;
  case T_STRING: snprintf(buf, len, "%s, at most %d characters", e->meta, SETTINGS_TEXT_MAX - 1); break;
  case T_ENUM: {
    size_t k = (size_t)snprintf(buf, len, "one of");
    for (int i = 0; e->names[i] && k < len; ++i)
      k += (size_t)snprintf(buf + k, len - k, "%s %s", i ? "," : "", e->names[i]);
    break;
  }
  case T_LIST:
    snprintf(buf, len, "a comma-separated list of at most %d %s from %s to %s", SETTINGS_MAX_DEVICES, e->want,
             num(e->lo, a, 32), num(e->hi, b, 32));
    break;
  }
}

static void source(const setting_entry *e, int from, const char *v, char *buf, size_t len) {
  if (from == SETTING_OPTION) snprintf(buf, len, "--%s '%s'", e->option, v);
  else snprintf(buf, len, "%s='%s'", e->env, v);
}

/* Takes v (from the environment or an option) for setting id, or leaves the setting as it was
 * and returns DR_EINPUT with the message in err, unless err holds an earlier one (the first
 * bad value is the one reported; the others still get read). */
static int take(drift_settings *s, int id, int from, const char *v, char *err, size_t len) {
  const setting_entry *e = &TABLE[id];
  if (parse_value(e, v, s)) {
    char src[SETTINGS_TEXT_MAX + 64], want[256];
    source(e, from, v, src, sizeof src);
    expected(e, want, sizeof want);
    if (!*err) snprintf(err, len, "%s: expected %s", src, want);
    return DR_EINPUT;
  }
  s->from[id] = (unsigned char)from;
  snprintf(s->text[id], SETTINGS_TEXT_MAX, "%s", v);
  return DR_OK;
}

static void set_default(drift_settings *s, int id) {
  const setting_entry *e = &TABLE[id];
  char *p = (char *)s + e->offset;
  if (e->type == T_DOUBLE) *(double *)p = 0.0;
  else if (e->type == T_STRING) *p = 0;
  else if (e->type == T_LIST) memset(p, 0, sizeof s->devices), *(int *)((char *)s + e->count_offset) = 0;
  else *(int *)p = 0;
  if (e->dflt) (void)parse_value(e, e->dflt, s); /* the table's defaults parse (test_settings) */
  s->from[id] = SETTING_DEFAULT;
  s->text[id][0] = 0;
}

/* The options of argv (removed from it), then the environment for the settings that no option
 * gave; keeps the settings from an option in s where keep_options. Every value is read; the
 * first bad one's message goes to err. */
static int read_into(drift_settings *s, int *argc, char **argv, int keep_options, char *err, size_t len) {
  for (int id = 0; id < SET_N; ++id)
    if (!(keep_options && s->from[id] == SETTING_OPTION)) set_default(s, id);
  int rc = DR_OK;
  *err = 0;
  for (int i = 1; argc && i < *argc;) {
    const char *a = argv[i];
    int id = -1;
    const char *v = NULL;
    int used = 1;
    if (a[0] == '-' && a[1] == '-')
      for (int k = 0; k < SET_N && id < 0; ++k) {
        const char *o = TABLE[k].option;
        const size_t n = o ? strlen(o) : 0;
        if (!o || strncmp(a + 2, o, n)) continue;
        if (a[2 + n] == '=') id = k, v = a + 3 + n;
        else if (!a[2 + n]) id = k, v = i + 1 < *argc ? argv[i + 1] : NULL, used = v ? 2 : 1;
      }
    if (id < 0) {
      ++i;
      continue;
    }
    if (!v) {
      if (!*err) snprintf(err, len, "--%s needs a value, %s (see drift --help)", TABLE[id].option, TABLE[id].meta);
      rc = DR_EINPUT;
    } else if (take(s, id, SETTING_OPTION, v, err, len)) {
      rc = DR_EINPUT;
    }
    /* removed even when refused, so that the commands' parsers report nothing of it */
    memmove(argv + i, argv + i + used, (size_t)(*argc - i - used + 1) * sizeof *argv);
    *argc -= used;
  }
  for (int id = 0; id < SET_N; ++id) {
    if (s->from[id] == SETTING_OPTION) continue;
    const char *v = getenv(TABLE[id].env);
    if (v && *v && take(s, id, SETTING_ENV, v, err, len)) rc = DR_EINPUT;
  }
  return rc;
}

int settings_read(drift_settings *out, int *argc, char **argv) {
  char err[1024];
  memset(out, 0, sizeof *out);
  const int rc = read_into(out, argc, argv, 0, err, sizeof err);
  return rc ? dr_fail(rc, "%s", err) : DR_OK;
}

static drift_settings g_;
static int g_rc_;
static char g_err_[1024];
static pthread_once_t g_once_ = PTHREAD_ONCE_INIT;

static void load_env(void) { g_rc_ = read_into(&g_, NULL, NULL, 0, g_err_, sizeof g_err_); }

const drift_settings *settings(void) {
  pthread_once(&g_once_, load_env);
  return &g_;
}

int settings_check(void) {
  pthread_once(&g_once_, load_env);
  return g_rc_ ? dr_fail(g_rc_, "%s", g_err_) : DR_OK;
}

int settings_init(int *argc, char **argv) {
  pthread_once(&g_once_, load_env); /* so that a first settings() later never reads again */
  g_rc_ = read_into(&g_, argc, argv, 0, g_err_, sizeof g_err_);
  return settings_check();
}

int settings_reload(void) {
  pthread_once(&g_once_, load_env);
  g_rc_ = read_into(&g_, NULL, NULL, 1, g_err_, sizeof g_err_);
  return settings_check();
}

const char *settings_source(setting_id id, char *buf, size_t len) {
  const drift_settings *s = settings();
  source(&TABLE[id], s->from[id], s->text[id], buf, len);
  return buf;
}

const char *settings_cuda_visible_devices(void) { return getenv("CUDA_VISIBLE_DEVICES"); }

/* Prints text from column 19, in lines of at most 100 characters; the first line after head
 * where head leaves room, else on a line of its own. */
static void wrapped(FILE *f, const char *head, const char *text) {
  enum { INDENT = 19, WIDTH = 100 };
  int col = fprintf(f, "  %s", head);
  if (col + 2 > INDENT) fputc('\n', f), col = 0;
  fprintf(f, "%*s", INDENT - col, "");
  col = INDENT;
  for (const char *w = text; *w;) {
    while (*w == ' ') ++w;
    const size_t n = strcspn(w, " ");
    if (!n) break;
    if (col > INDENT && col + 1 + (int)n > WIDTH) fprintf(f, "\n%*s", INDENT, ""), col = INDENT;
    col += fprintf(f, "%s%.*s", col > INDENT ? " " : "", (int)n, w);
    w += n;
  }
  fputc('\n', f);
}

void settings_print_help(FILE *f, int kind) {
  const drift_settings *s = settings();
  for (int id = 0; id < SET_N; ++id) {
    const setting_entry *e = &TABLE[id];
    if (e->kind != kind) continue;
    char head[128], dflt[64] = "", now[SETTINGS_TEXT_MAX + 16] = "", text[1024];
    if (kind == SETTING_USER) snprintf(head, sizeof head, "--%s %s", e->option, e->meta);
    else snprintf(head, sizeof head, "%s=%s", e->env, e->type == T_BOOL ? "1" : e->meta);
    const char *d = e->type == T_BOOL && e->dflt ? (strcmp(e->dflt, "0") ? "on" : "off") : e->dflt;
    if (d) snprintf(dflt, sizeof dflt, "default %s", d);
    if (s->from[id]) snprintf(now, sizeof now, "now %s", s->text[id]);
    if (kind == SETTING_USER)
      snprintf(text, sizeof text, "%s (%s%s%s%s%s)", e->help, e->env, *dflt ? ", " : "", dflt, *now ? "; " : "", now);
    else if (*dflt || *now)
      snprintf(text, sizeof text, "%s (%s%s%s)", e->help, dflt, *dflt && *now ? "; " : "", now);
    else
      snprintf(text, sizeof text, "%s", e->help);
    wrapped(f, head, text);
  }
}
