/* test_settings - the table of settings (src/settings.c): its defaults, a value from the
 * environment, an option winning over the environment and leaving argv, every kind of bad value
 * refused with one line naming where it came from and what is valid, the global's lazy read of
 * the environment and its reload, and the help. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "error.h"
#include "hostmem.h"
#include "settings.h"

static const char *const VARS[] = {"DRIFT_DEVICES",       "DRIFT_BARRIER_TIMEOUT", "DRIFT_CUDA_AWARE_MPI",
                                   "DRIFT_PINNED_MAX_MB", "DRIFT_MIGRATE_MARGIN",  "DRIFT_STEP_AHEAD",
                                   "DRIFT_TRACE",         "DRIFT_GPU_MARKS",       "DRIFT_GPU_STAMPS",
                                   "DRIFT_TEST_HOOK",     "DRIFT_ISLAND_SKEW",     "DRIFT_BALANCE_PRIOR_MS",
                                   "DRIFT_SORT_KEYS64",   "DRIFT_COLLIDER_CACHE"};

static void clear_env(void) {
  for (size_t i = 0; i < sizeof VARS / sizeof *VARS; ++i) unsetenv(VARS[i]);
}

static void test_defaults(void) {
  clear_env();
  drift_settings s;
  CHECK(settings_read(&s, NULL, NULL) == DR_OK, "defaults: %s", dr_message());
  CHECK(s.n_devices == 0, "devices: %d given", s.n_devices);
  CHECK(s.barrier_timeout == 120.0, "barrier_timeout %g", s.barrier_timeout);
  CHECK(s.cuda_aware_mpi == SETTING_AUTO, "cuda_aware_mpi %d", s.cuda_aware_mpi);
  CHECK(s.pinned_max_mb == 0, "pinned_max_mb %d", s.pinned_max_mb);
  CHECK(s.migrate_margin == 1, "migrate_margin %d", s.migrate_margin);
  CHECK(s.steps_ahead == SETTING_AUTO, "steps_ahead %d", s.steps_ahead);
  CHECK(!s.trace && !s.gpu_marks && !s.gpu_stamps && !s.sort_keys64, "debug bools %d %d %d %d", s.trace,
        s.gpu_marks, s.gpu_stamps, s.sort_keys64);
  CHECK(!s.test_hook[0] && !s.island_skew[0], "strings '%s' '%s'", s.test_hook, s.island_skew);
  CHECK(s.balance_prior_ms == 0.0, "balance_prior_ms %g", s.balance_prior_ms);
  CHECK(s.collider_cache == 1, "collider_cache %d", s.collider_cache);
  for (int id = 0; id < SET_N; ++id) CHECK(s.from[id] == SETTING_DEFAULT && !s.text[id][0], "setting %d given", id);
  /* an empty variable counts as unset */
  setenv("DRIFT_MIGRATE_MARGIN", "", 1);
  CHECK(settings_read(&s, NULL, NULL) == DR_OK && s.migrate_margin == 1, "empty variable: %d", s.migrate_margin);
  clear_env();
}

static void test_environment(void) {
  clear_env();
  setenv("DRIFT_DEVICES", "0,0,3", 1);
  setenv("DRIFT_BARRIER_TIMEOUT", "2.5", 1);
  setenv("DRIFT_STEP_AHEAD", "0", 1);
  setenv("DRIFT_CUDA_AWARE_MPI", "on", 1);
  setenv("DRIFT_TRACE", "1", 1);
  setenv("DRIFT_GPU_MARKS", "100", 1);
  setenv("DRIFT_TEST_HOOK", "signal:0:5", 1);
  setenv("DRIFT_BALANCE_PRIOR_MS", "0.2", 1);
  setenv("DRIFT_COLLIDER_CACHE", "2", 1);
  drift_settings s;
  CHECK(settings_read(&s, NULL, NULL) == DR_OK, "environment: %s", dr_message());
  CHECK(s.n_devices == 3 && s.devices[0] == 0 && s.devices[1] == 0 && s.devices[2] == 3, "devices %d: %d %d %d",
        s.n_devices, s.devices[0], s.devices[1], s.devices[2]);
  CHECK(s.from[SET_DEVICES] == SETTING_ENV && !strcmp(s.text[SET_DEVICES], "0,0,3"), "devices from %d '%s'",
        s.from[SET_DEVICES], s.text[SET_DEVICES]);
  CHECK(s.barrier_timeout == 2.5, "barrier_timeout %g", s.barrier_timeout);
  CHECK(s.steps_ahead == SETTING_OFF, "steps_ahead %d (0: off)", s.steps_ahead);
  CHECK(s.cuda_aware_mpi == SETTING_ON, "cuda_aware_mpi %d", s.cuda_aware_mpi);
  CHECK(s.trace == 1 && s.gpu_marks == 100, "trace %d marks %d", s.trace, s.gpu_marks);
  CHECK(!strcmp(s.test_hook, "signal:0:5"), "test_hook '%s'", s.test_hook);
  CHECK(s.balance_prior_ms == 0.2, "balance_prior_ms %g", s.balance_prior_ms);
  CHECK(s.collider_cache == 2, "collider_cache %d", s.collider_cache);
  CHECK(s.migrate_margin == 1 && s.from[SET_MIGRATE_MARGIN] == SETTING_DEFAULT, "margin %d", s.migrate_margin);
  clear_env();
}

static void test_options(void) {
  clear_env();
  setenv("DRIFT_MIGRATE_MARGIN", "2", 1);
  setenv("DRIFT_BARRIER_TIMEOUT", "x", 1); /* bad, but the option wins: never looked at */
  setenv("DRIFT_DEVICES", "1", 1);
  char *argv[] = {"drift", "run", "--migrate-margin", "3", "scene.json", "--barrier-timeout=7",
                  "--steps-ahead", "on", "--frames", "2", NULL};
  int argc = 10;
  drift_settings s;
  CHECK(settings_read(&s, &argc, argv) == DR_OK, "options: %s", dr_message());
  CHECK(s.migrate_margin == 3 && s.from[SET_MIGRATE_MARGIN] == SETTING_OPTION, "margin %d from %d", s.migrate_margin,
        s.from[SET_MIGRATE_MARGIN]);
  CHECK(s.barrier_timeout == 7.0, "barrier_timeout %g", s.barrier_timeout);
  CHECK(s.steps_ahead == SETTING_ON, "steps_ahead %d", s.steps_ahead);
  CHECK(s.n_devices == 1 && s.devices[0] == 1 && s.from[SET_DEVICES] == SETTING_ENV, "devices from the environment");
  /* the settings' options left argv; the command's stayed, in order */
  CHECK(argc == 5, "argc %d", argc);
  CHECK(argc == 5 && !strcmp(argv[1], "run") && !strcmp(argv[2], "scene.json") && !strcmp(argv[3], "--frames") &&
            !strcmp(argv[4], "2") && argv[5] == NULL,
        "argv after the settings' options");
  /* a refused option leaves argv too, and the options after it are read */
  clear_env();
  char *argv2[] = {"drift", "--devices", "x", "run", "--steps-ahead", "off", NULL};
  argc = 6;
  CHECK(settings_read(&s, &argc, argv2) == DR_EINPUT, "a bad option");
  dr_clear();
  CHECK(argc == 2 && !strcmp(argv2[1], "run") && argv2[2] == NULL, "argv after a bad option: %d", argc);
  CHECK(s.steps_ahead == SETTING_OFF && s.n_devices == 0, "after a bad option: %d %d", s.steps_ahead, s.n_devices);
  clear_env();
}

/* A bad value from the environment (var = value) or the command line (opt, with var unset):
 * DR_EINPUT and exactly message. */
static void refused(const char *var, const char *value, const char *opt, const char *message) {
  clear_env();
  dr_clear();
  drift_settings s;
  int rc;
  if (opt) {
    char *argv[] = {"drift", "run", (char *)opt, (char *)value, NULL};
    int argc = value ? 4 : 3;
    rc = settings_read(&s, &argc, argv);
  } else {
    setenv(var, value, 1);
    rc = settings_read(&s, NULL, NULL);
  }
  CHECK(rc == DR_EINPUT, "%s %s: rc %d", opt ? opt : var, value ? value : "", rc);
  CHECK(!strcmp(dr_message(), message), "message\n  got:  %s\n  want: %s", dr_message(), message);
  dr_clear();
  clear_env();
}

static void test_refused(void) {
  refused("DRIFT_BARRIER_TIMEOUT", "0", NULL, "DRIFT_BARRIER_TIMEOUT='0': expected seconds above 0, at most 1000000");
  refused("DRIFT_BARRIER_TIMEOUT", "1e7", NULL,
          "DRIFT_BARRIER_TIMEOUT='1e7': expected seconds above 0, at most 1000000");
  refused("DRIFT_BARRIER_TIMEOUT", "2s", NULL, "DRIFT_BARRIER_TIMEOUT='2s': expected seconds above 0, at most 1000000");
  refused(NULL, "0", "--barrier-timeout", "--barrier-timeout '0': expected seconds above 0, at most 1000000");
  refused("DRIFT_BALANCE_PRIOR_MS", "nan", NULL,
          "DRIFT_BALANCE_PRIOR_MS='nan': expected milliseconds above 0, at most 1000000");
  refused("DRIFT_MIGRATE_MARGIN", "5", NULL, "DRIFT_MIGRATE_MARGIN='5': expected a whole number of blocks from 0 to 4");
  refused("DRIFT_MIGRATE_MARGIN", "1.5", NULL,
          "DRIFT_MIGRATE_MARGIN='1.5': expected a whole number of blocks from 0 to 4");
  refused(NULL, "-1", "--migrate-margin", "--migrate-margin '-1': expected a whole number of blocks from 0 to 4");
  refused(NULL, "x", "--pinned-max-mb", "--pinned-max-mb 'x': expected a whole number of MiB from 0 to 1048576");
  refused("DRIFT_TRACE", "maybe", NULL, "DRIFT_TRACE='maybe': expected on or off (1 or 0)");
  refused("DRIFT_CUDA_AWARE_MPI", "2", NULL, "DRIFT_CUDA_AWARE_MPI='2': expected one of off, on, auto");
  refused(NULL, "sometimes", "--steps-ahead", "--steps-ahead 'sometimes': expected one of off, on, auto");
  const char *list = "a comma-separated list of at most 8 GPU numbers from 0 to 255";
  char want[256];
  static const char *const bad_lists[] = {"-1", "0,,1", "0,", "1;2", "256", "0,1,2,3,4,5,6,7,0"};
  for (size_t i = 0; i < sizeof bad_lists / sizeof *bad_lists; ++i) {
    snprintf(want, sizeof want, "DRIFT_DEVICES='%s': expected %s", bad_lists[i], list);
    refused("DRIFT_DEVICES", bad_lists[i], NULL, want);
  }
  char longer[300];
  memset(longer, 'a', sizeof longer - 1);
  longer[sizeof longer - 1] = 0;
  snprintf(want, sizeof want, "DRIFT_TEST_HOOK='%.*s", 100, longer);
  clear_env();
  setenv("DRIFT_TEST_HOOK", longer, 1);
  drift_settings s;
  CHECK(settings_read(&s, NULL, NULL) == DR_EINPUT, "a test hook of 299 characters");
  CHECK(!strncmp(dr_message(), want, strlen(want)) &&
            strstr(dr_message(), "expected signal|exit|fail|rebuild|stopfile:RANK:STEP, at most 255 characters"),
        "long string: %s", dr_message());
  dr_clear();
  refused(NULL, NULL, "--devices", "--devices needs a value, LIST (see drift --help)");
  /* several bad values: the first in the table's order is reported, the good ones are read and
   * the bad ones keep their defaults */
  clear_env();
  setenv("DRIFT_BARRIER_TIMEOUT", "x", 1);
  setenv("DRIFT_MIGRATE_MARGIN", "3", 1);
  setenv("DRIFT_TRACE", "maybe", 1);
  CHECK(settings_read(&s, NULL, NULL) == DR_EINPUT, "two bad values");
  CHECK(!strcmp(dr_message(), "DRIFT_BARRIER_TIMEOUT='x': expected seconds above 0, at most 1000000"), "first: %s",
        dr_message());
  CHECK(s.barrier_timeout == 120.0 && s.migrate_margin == 3 && s.trace == 0, "read past the bad ones: %g %d %d",
        s.barrier_timeout, s.migrate_margin, s.trace);
  dr_clear();
  clear_env();
}

/* The global: read from the environment on first use, reread on settings_reload, options kept. */
static void test_global(void) {
  clear_env();
  setenv("DRIFT_PINNED_MAX_MB", "16", 1);
  CHECK(settings_check() == DR_OK, "first use: %s", dr_message());
  CHECK(hostmem_pinned_max() == (size_t)16 << 20, "pinned max %zu", hostmem_pinned_max());
  unsetenv("DRIFT_PINNED_MAX_MB");
  CHECK(hostmem_pinned_max() == (size_t)16 << 20, "read once: %zu", hostmem_pinned_max());
  CHECK(settings_reload() == DR_OK && hostmem_pinned_max() == SIZE_MAX, "reloaded: %zu", hostmem_pinned_max());
  char *argv[] = {"drift", "--migrate-margin", "4", "bench", NULL};
  int argc = 4;
  CHECK(settings_init(&argc, argv) == DR_OK && argc == 2 && !strcmp(argv[1], "bench"), "init: %s", dr_message());
  CHECK(settings()->migrate_margin == 4, "init: margin %d", settings()->migrate_margin);
  char src[128];
  CHECK(!strcmp(settings_source(SET_MIGRATE_MARGIN, src, sizeof src), "--migrate-margin '4'"), "source %s", src);
  setenv("DRIFT_MIGRATE_MARGIN", "0", 1);
  setenv("DRIFT_DEVICES", "2,3", 1);
  CHECK(settings_reload() == DR_OK, "reload: %s", dr_message());
  CHECK(settings()->migrate_margin == 4 && settings()->n_devices == 2, "reload keeps the option: %d, devices %d",
        settings()->migrate_margin, settings()->n_devices);
  CHECK(!strcmp(settings_source(SET_DEVICES, src, sizeof src), "DRIFT_DEVICES='2,3'"), "source %s", src);
  setenv("DRIFT_GPU_MARKS", "-2", 1);
  dr_clear();
  CHECK(settings_reload() == DR_EINPUT && settings_check() == DR_EINPUT, "bad environment reloaded");
  CHECK(!strcmp(dr_message(), "DRIFT_GPU_MARKS='-2': expected a whole number of steps from 0 to 1000000000"), "%s",
        dr_message());
  dr_clear();
  clear_env();
  CHECK(settings_reload() == DR_OK && settings_check() == DR_OK, "good again");
}

static void test_help(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  settings_print_help(f, SETTING_USER);
  fclose(f);
  static const char *const user[] = {"--devices LIST", "--barrier-timeout SECONDS", "--cuda-aware-mpi on|off|auto",
                                     "--pinned-max-mb MB", "--migrate-margin M", "--steps-ahead on|off|auto",
                                     "DRIFT_BARRIER_TIMEOUT, default 120", "DRIFT_STEP_AHEAD, default auto"};
  for (size_t i = 0; i < sizeof user / sizeof *user; ++i) CHECK(strstr(text, user[i]), "help lacks '%s'", user[i]);
  CHECK(!strstr(text, "DRIFT_TRACE"), "a debugging aid in the user's help");
  for (char *line = text; *line;) {
    const size_t n = strcspn(line, "\n");
    CHECK(n <= 100, "help line of %zu characters: %.*s", n, (int)n, line);
    line += n + (line[n] != 0);
  }
  free(text);
  f = open_memstream(&text, &len);
  settings_print_help(f, SETTING_DEBUG);
  fclose(f);
  static const char *const debug[] = {"DRIFT_TRACE=1", "DRIFT_GPU_MARKS=N", "DRIFT_GPU_STAMPS=1", "DRIFT_TEST_HOOK=",
                                      "DRIFT_ISLAND_SKEW=", "DRIFT_BALANCE_PRIOR_MS=MS", "DRIFT_SORT_KEYS64=1",
                                      "DRIFT_COLLIDER_CACHE=1|2"};
  for (size_t i = 0; i < sizeof debug / sizeof *debug; ++i) CHECK(strstr(text, debug[i]), "help lacks '%s'", debug[i]);
  CHECK(!strstr(text, "--devices"), "a user setting in the debugging aids");
  free(text);
}

int main(void) {
  test_defaults();
  test_environment();
  test_options();
  test_refused();
  test_global();
  test_help();
  if (failures_) fprintf(stderr, "%d failures\n", failures_);
  else printf("test_settings: all checks passed\n");
  return failures_ ? 1 : 0;
}
