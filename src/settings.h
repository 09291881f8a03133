/* settings.h - drift's settings that are not scene keys, declared once (PETSc's options database).
 *
 * Every setting has one entry in the table of settings.c: its command-line option (user settings
 * only), its DRIFT_* environment variable, its type, default, bounds and one line of help, and
 * whether it is a user setting (`drift --help`) or a debugging aid (environment only, `drift
 * --help-debug`, docs/debugging.md). The values are read once: the environment on the first call
 * of settings() or settings_check() (so that tests and library users get them without calling
 * settings_init), then the command line in settings_init, whose options win over the
 * environment. Nothing else in drift reads a DRIFT_* variable.
 *
 * A bad value is refused with one line naming where it came from and what is valid:
 *   --barrier-timeout '0': expected seconds above 0, at most 1000000
 *   DRIFT_MIGRATE_MARGIN='9': expected a whole number of blocks from 0 to 4
 * An empty variable counts as unset. */
#ifndef DRIFT_SETTINGS_H
#define DRIFT_SETTINGS_H

#include <stdio.h>

/* One per setting: indexes drift_settings.from and .text, and the table. */
typedef enum setting_id {
  /* user settings */
  SET_DEVICES,
  SET_BARRIER_TIMEOUT,
  SET_CUDA_AWARE_MPI,
  SET_PINNED_MAX_MB,
  SET_MIGRATE_MARGIN,
  SET_STEPS_AHEAD,
  SET_SNAPSHOT_HOST,
  /* debugging aids */
  SET_TRACE,
  SET_GPU_MARKS,
  SET_GPU_STAMPS,
  SET_TEST_HOOK,
  SET_ISLAND_SKEW,
  SET_BALANCE_PRIOR_MS,
  SET_SORT_KEYS64,
  SET_COLLIDER_CACHE,
  SET_WRITER_INLINE,
  SET_PROGRESS_S,
  SET_FRAME_CHUNK,
  SET_CKPT_HOLD,
  SET_WRITER_TEAM,
  SET_N
} setting_id;

enum setting_kind { SETTING_USER, SETTING_DEBUG };
/* Where a value came from. */
enum setting_from { SETTING_DEFAULT, SETTING_ENV, SETTING_OPTION };
/* The values of an on|off|auto setting (which also takes 1 and 0, as a bool does). */
enum { SETTING_OFF = 0, SETTING_ON = 1, SETTING_AUTO = 2 };

#define SETTINGS_MAX_DEVICES 8 /* an island's GPUs at most (gpu/cuda_state.h, MAX_GPUS) */
#define SETTINGS_TEXT_MAX 256

typedef struct drift_settings {
  /* --devices: the GPUs this rank drives, in order, repeats allowed (a test runs an island's
   * code on one GPU with 0,0); n_devices 0: not given (parallel.gpus_per_rank decides) */
  int devices[SETTINGS_MAX_DEVICES];
  int n_devices;
  double barrier_timeout;     /* s: an island member waiting longer at a barrier fails the run */
  int cuda_aware_mpi;         /* SETTING_OFF, SETTING_ON, SETTING_AUTO */
  int pinned_max_mb;          /* MiB: larger transfer buffers are pageable (0: no limit) */
  int migrate_margin;         /* blocks of margin before a particle migrates to another rank */
  int steps_ahead;            /* SETTING_OFF, SETTING_ON, SETTING_AUTO */
  int snapshot_host;          /* SETTING_OFF, SETTING_ON, SETTING_AUTO */
  int trace;                  /* one stderr line per host-side event (log.h) */
  int gpu_marks;              /* 0, or the period in steps of the device's time marks */
  int gpu_stamps;             /* device vectors' and steps' time stamps */
  char test_hook[SETTINGS_TEXT_MAX];   /* ACTION:RANK:STEP, checked by sim.c; "" if unset */
  char island_skew[SETTINGS_TEXT_MAX]; /* MEMBER:pre|post:US, checked by the CUDA backend; "" if unset */
  double balance_prior_ms;    /* ms, a rebalance's cost before one is measured; 0 if unset */
  int sort_keys64;            /* 64-bit sort keys where 32 bits would do */
  int collider_cache;         /* 1 filled once per mesh frame and mapping, 2 refilled every step */
  int writer_inline;          /* frames written in the main thread, as without MPI_THREAD_MULTIPLE */
  double progress_s;          /* s: wall time between progress lines inside a frame; 0 if unset (30 s) */
  int frame_chunk;            /* particles the writer fetches of a frame, and of a checkpoint, at a time; 0 if
                               * unset (MEM_FRAME_CHUNK, MEM_CKPT_CHUNK) */
  int ckpt_hold;              /* checkpoints from a copy the backend holds where the plan finds room (1), or
                               * always fetched from the live particles (0) */
  int writer_team;            /* threads of the frame writer's OpenMP team; 0 if unset (half the rank's cores) */
  /* per setting: where its value came from, and its text as given ("" for a default) */
  unsigned char from[SET_N];
  char text[SET_N][SETTINGS_TEXT_MAX];
} drift_settings;

/* The settings: the environment's (read on the first call) and the command line's once
 * settings_init has run. Never NULL; a bad environment value leaves that setting's default
 * (settings_check reports it). */
const drift_settings *settings(void);

/* Reads the environment and the settings' options from argv[1..], which it removes from argv
 * (updating *argc; a refused one too), so that the commands' own parsers never see them. Options
 * are --NAME VALUE or --NAME=VALUE; an option wins over its variable, whose bad value is then
 * never looked at. Every value is read; returns DR_EINPUT with the first bad one's one-line
 * message (dr_fail). Call it in main, before any thread starts. */
int settings_init(int *argc, char **argv);

/* The environment's first bad value as a dr_fail (DR_EINPUT), else 0: for sim_create and
 * other entry points of library users that never call settings_init. */
int settings_check(void);

/* Reads the environment again, keeping the command line's values: for tests that change a
 * variable between runs. Not thread-safe; returns like settings_check. */
int settings_reload(void);

/* Parses the environment and the options of argv (argc may be NULL: the environment alone) into
 * out, with no side effect but argv's options removed; the tests' view of settings_init. */
int settings_read(drift_settings *out, int *argc, char **argv);

/* "--devices '0,9'" or "DRIFT_DEVICES='0,9'": where a setting's value came from with the value,
 * for the message of a user that checks the value further (a string, the device count). */
const char *settings_source(setting_id id, char *buf, size_t len);

/* The CUDA runtime's CUDA_VISIBLE_DEVICES (NULL where unset): not a drift setting, read here so
 * that a message about too few GPUs can quote it. */
const char *settings_cuda_visible_devices(void);

/* Lists the settings of kind (SETTING_USER: the options; SETTING_DEBUG: the variables) with
 * their values, defaults and help, for drift --help and --help-debug. */
void settings_print_help(FILE *f, int kind);

#endif
