/* scene.h - a scene file (JSON, SI units) parsed and validated.
 *
 * scene_load() reads the file, rejects anything a user could get wrong (unknown keys, wrong
 * types, out-of-range or inconsistent values, bodies outside the domain, an empty scene) with a
 * one-line message "FILE: KEY: what is wrong" and DR_EINPUT, and otherwise fills a scene whose
 * defaults are documented in docs/scene-format.md. scene_parse() does the same for bytes
 * already in memory (the fuzz target, tests/fuzz/).
 *
 * Mesh bodies and colliders are read, placed and validated by both, and their level sets sized
 * exactly (levelset_plan) but not built: building takes seconds to minutes (the crawler's 121
 * frames: about a minute on two cores) and the memory a run's plan must first hold, so drift check
 * never builds them and drift run builds them once the plan fits. scene_build_levelsets() builds
 * them; whatever samples mesh bodies or runs a scene with mesh colliders calls it first. */
#ifndef DRIFT_SCENE_H
#define DRIFT_SCENE_H

#include <stddef.h>
#include <stdint.h>

#include "meshsdf.h"
#include "physics/boundary.h"
#include "physics/material.h"

#define SCENE_NAME_MAX 64

enum shape_kind { SHAPE_BOX = 0, SHAPE_SPHERE = 1, SHAPE_CYLINDER = 2, SHAPE_MESH = 3 };
enum backend_kind { BACKEND_AUTO = 0, BACKEND_CPU = 1, BACKEND_CUDA = 2 };
enum emit_mode { EMIT_NONE = 0, EMIT_RATE = 1, EMIT_RESAMPLE = 2 };
#define EMIT_MAX_PARTICLES ((1ULL << 48) - 1) /* ids of a source's particles: (body << 48) | k */

/* A particle source (body.emit; src/emit.h says when and where it emits). */
typedef struct scene_emit {
  int mode;             /* enum emit_mode; EMIT_NONE: the body is sampled once at the start */
  double start, end;    /* s; end = INFINITY when not given */
  double rate;          /* EMIT_RATE: particles per second (from rate, or volume_rate / (dx^3 / ppc)) */
  double volume_rate;   /* m^3/s as given, 0 when rate was given */
  uint64_t max_particles; /* this source emits at most this many particles over the run */
} scene_emit;

typedef struct scene_material {
  char name[SCENE_NAME_MAX];
  /* user-facing values, kept for reporting */
  double density, youngs_modulus, poisson_ratio, friction_angle, bulk_modulus, gamma;
  double viscosity; /* weakly_compressible: dynamic viscosity (Pa s), 0 when inviscid */
  double flip_blend, beta_min, beta_max; /* transfer asflip */
  double nacc_friction, nacc_cohesion, nacc_hardening, nacc_initial; /* nacc: M, beta, xi, initial logJp */
  material_params params; /* what the kernels use */
} scene_material;

typedef struct scene_body {
  int shape;            /* enum shape_kind */
  double min[3], max[3]; /* box */
  int rotated;          /* box: 1 when rotated about its centre by rotation; mesh: 1 when rotated */
  double rotation[4];   /* box, mesh: unit quaternion (w, x, y, z), identity when not rotated */
  double center[3], radius; /* sphere, cylinder */
  double axis[3], height; /* cylinder: unit axis, length along it (m) */
  /* mesh: the OBJ placed by x -> translation + R(rotation) (scale x); its level set (in world
   * coordinates) in *pool decides what is inside; bounds and volume of the placed mesh */
  double scale, translation[3];
  const levelset_pool *pool;
  int levelset;
  double mesh_lo[3], mesh_hi[3], volume;
  int material;         /* index into scene.materials */
  int ppc;              /* particles per cell, >= 1 */
  double velocity[3];   /* m/s, default 0 */
  uint64_t seed;        /* sampling seed, default: the body's index in the list */
  scene_emit emit;      /* a source: emit.mode != EMIT_NONE (then not sampled at the start) */
} scene_body;

/* A domain face: its wall type and Coulomb friction. */
typedef struct scene_face {
  int type;             /* enum boundary_kind (physics/boundary.h) */
  double friction;      /* only with BOUNDARY_SEPARATE, else 0 */
} scene_face;

/* A collider as the scene gives it (SI units, rest pose), and its keyframes. */
typedef struct scene_collider_key {
  double time;          /* s */
  double translation[3]; /* m */
  double rotation[4];   /* unit quaternion (w, x, y, z) from the axis and angle given */
  double angle;         /* degrees, as given (0 without rotation) */
} scene_collider_key;

typedef struct scene_collider {
  int shape;            /* enum sdf_shape (physics/sdf.h): plane, box, sphere, cylinder */
  double point[3], normal[3]; /* plane: a point on it, unit normal out of the solid */
  double min[3], max[3];  /* box */
  double center[3], radius; /* sphere, cylinder */
  double axis[3], height; /* cylinder: unit axis, length along it */
  /* mesh: one OBJ or a sequence of them, placed like a mesh body; reference point (rotation
   * centre) the bounding-box centre of the first placed frame; level sets levelset ..
   * levelset + n_frames - 1 in scene.collider_levelsets (in the frame centred there) */
  int n_frames;         /* 1: a static mesh */
  double fps;           /* sequences: frames per second of the mesh sequence */
  double scale, translation[3], rotation[4];
  double mesh_center[3];
  int levelset;
  int type;             /* enum boundary_kind, default sticky */
  double friction;      /* only with BOUNDARY_SEPARATE */
  int n_keys;
  scene_collider_key *keys; /* motion, sorted by time; none: static */
} scene_collider;

/* A mesh's level set as scene_load plans it (its sizes exact) and scene_build_levelsets builds it
 * (meshsdf.h). */
typedef struct scene_levelset_job {
  mesh m;               /* placed (owned) */
  double shift[3];      /* the level set's frame: vertices at x - shift */
  double band;          /* m */
  double *vel;          /* sequences: [2][3 n_verts], the velocities out of and into the frame (owned); NULL: still */
  int collider;         /* 1: into collider_levelsets, 0: body_levelsets */
  char *what;           /* names the mesh in messages (owned) */
} scene_levelset_job;

/* The level sets of one pool, planned: what the pool holds once built. */
typedef struct scene_levelset_sizes {
  int sets;
  int64_t table_n, floats_n; /* brick-table entries (int32) and brick values (float) */
} scene_levelset_sizes;

/* A planned pool's brick tables and bricks in bytes (its headers, sizeof(levelset) a set, apart). */
static inline double scene_levelset_data_bytes(const scene_levelset_sizes *z) {
  return 4.0 * (double)z->table_n + 4.0 * (double)z->floats_n;
}

enum balance_kind { BALANCE_PARTICLES = 0, BALANCE_TIME = 1 };
/* The island's barrier and reduction (cuda, several GPUs per rank): the paper's scheme (the
 * defaults) or the alternative its ablations measured (section "Ablation study on multiple GPUs") */
enum island_barrier_kind { ISLAND_BARRIER_SPIN = 0, ISLAND_BARRIER_EVENTS = 1 };
enum island_reduce_kind { ISLAND_REDUCE_DOUBLE_BUFFER = 0, ISLAND_REDUCE_P2P_ATOMICS = 1 };
/* parallel.storage: how a backend holds its particles (compact: physics/compact.h's record) */
enum storage_kind { STORAGE_FLOAT = 0, STORAGE_COMPACT = 1 };
/* Their names in scene files and on the command line, by enum value. */
extern const char *const scene_island_barrier_names[2]; /* "spin", "events" */
extern const char *const scene_island_reduce_names[2];  /* "double_buffer", "p2p_atomics" */
/* drift run's and drift bench's --island-barrier / --island-reduce (flag) with its value: the
 * value's index into island[0] / island[1]; an unknown value fails naming the flag. */
int scene_island_flag(const char *flag, const char *value, int island[2]);

typedef struct scene {
  char path[4096];       /* the file it came from, for messages */
  double domain_min[3], domain_max[3], dx;
  int frames;            /* frames to simulate after frame 0 (the initial state) */
  double fps;
  double dt;             /* > 0: fixed step (rounded down so substeps land on frame times) */
  double cfl;            /* > 0: adaptive step; exactly one of dt, cfl is set */
  int max_substeps;      /* the most substeps per frame at rest (check and run refuse more) */
  double gravity[3];     /* m/s^2, default (0, -9.81, 0) */
  int n_materials;
  scene_material *materials;
  int n_bodies;
  scene_body *bodies;
  int n_sources;         /* bodies with emit */
  scene_face faces[DR_FACES]; /* x-, x+, y-, y+, z-, z+ (enum boundary_face); default sticky */
  int n_colliders;
  scene_collider *colliders;
  char output_dir[4096]; /* default "frames" */
  int output_every;      /* default 1 */
  unsigned output_fields; /* H5FRAME_BIT (io/h5frame.h) of each dataset a frame holds, position always;
                           * default H5FRAME_DEFAULT_FIELDS, and logjp where a material is nacc */
  int output_precision;  /* enum h5frame_precision (io/frame_fields.h): float (default) or half */
  int checkpoint_every;  /* write a checkpoint every this many frames; 0 = never (default) */
  int checkpoint_keep;   /* checkpoints kept in the output folder, >= 1, default 2 */
  int preview;           /* 1: a PNG picture beside each frame file (io/preview.h), default 0 */
  int preview_color;     /* enum preview_color: by material (default) or owner (rank and device) */
  int preview_size;      /* pixels on the picture's longer side, default 512 */
  int preview_view;      /* enum preview_view: front (default, looking along -z), side, top */
  int backend;           /* enum backend_kind, default auto */
  int gpus_per_rank;     /* 0 = all visible */
  int g2p2g_below;       /* cuda: fused G2P2G for fixed steps below this many particles per GPU */
  int balance_by;        /* enum balance_kind: what "load" means for the balance between ranks */
  double balance_threshold; /* several ranks: move the cuts when the largest load exceeds the mean by this */
  int balance_cost;      /* several ranks: also move them when the time lost to the imbalance exceeds a rebalance's cost */
  double watchdog_s;     /* several ranks: s a rank waits on another before it ends the job (watchdog.h);
                          * default 300 */
  levelset_pool *collider_levelsets; /* mesh colliders' level sets (owned; the backends borrow them) */
  levelset_pool *body_levelsets;     /* mesh bodies' level sets (owned) */
  scene_levelset_sizes levelset_plan[2]; /* [0] the bodies' pool, [1] the colliders': exact before they are built */
  int n_levelset_jobs;   /* > 0: level sets planned and not yet built (scene_build_levelsets) */
  scene_levelset_job *levelset_jobs;
  int deterministic;     /* 1: P2G sums in 64-bit fixed point (physics/fixed.h), bitwise identical results
                          * whatever the threads, GPUs and ranks; default 0 */
  int island_barrier;    /* enum island_barrier_kind, default spin */
  int island_reduce;     /* enum island_reduce_kind, default double_buffer */
  int storage;           /* enum storage_kind, default float */
  char *text;            /* the file's bytes, NUL-terminated (owned; checkpoints store them) */
  size_t text_len;
  uint64_t hash;         /* scene_hash_bytes of text: a checkpoint names the scene it came from */
} scene;

/* The command line's island variants (scene_island_flag; -1: the scene's key stays) over the
 * scene's parallel.island_barrier and parallel.island_reduce. */
void scene_set_island(scene *s, const int island[2]);

/* Reads and validates path; on success *out owns its arrays (free with scene_destroy). */
int scene_load(const char *path, scene *out);
/* The same for a scene already in memory: bytes[0..len) (copied; need not end with a NUL), with
 * name standing for the file in messages and in out->path (scene_load: the file read, then this). */
int scene_parse(const char *name, const char *bytes, size_t len, scene *out);
void scene_destroy(scene *s);
/* Builds the level sets the scene plans (nothing where it has none or they are built): the pools
 * allocated exactly at their planned sizes (counted host memory, memtally.h), then each level set
 * into them. DR_ENOMEM where the host has no room (the message names the mesh). */
int scene_build_levelsets(scene *s);

/* The scene file's name of a body shape (enum shape_kind): "box", "sphere", "cylinder". */
const char *scene_shape_name(int shape);

/* The axis-aligned bounding box of body b's shape (m). */
void scene_body_bounds(const scene_body *b, double lo[3], double hi[3]);

/* Whether the point p (m) lies inside body b's shape (boxes: min <= p < max, half-open). */
int scene_body_inside(const scene_body *b, const double p[3]);

/* The colliders and their keyframes as the kernels see them (physics/boundary.h). Allocates
 * *cols (n_colliders) and *keys (*n_keys); free both. */
int scene_kernel_colliders(const scene *s, collider **cols, collider_key **keys, int *n_keys);
/* 64-bit FNV-1a of len bytes: the scene hash that checkpoints record. */
uint64_t scene_hash_bytes(const void *bytes, size_t len);

/* Largest elastic wave speed over the scene's materials (m/s), used by the CFL step. */
double scene_wave_speed(const scene *s);

/* The viscous diffusion bound on the step (s): min over the viscous materials of
 * density dx^2 / (6 viscosity) (explicit viscosity is stable below it); 0 when no material is
 * viscous (no bound). The adaptive step takes at most cfl times this. */
double scene_viscous_dt(const scene *s);

/* The largest initial speed (|velocity|, m/s) of the bodies sampled at the start, and with
 * `sources` of the particle sources too. A run's first adaptive step takes the first as its
 * max |v| (a source's speed counts from its first emission on: sim_sources.c). */
double scene_bodies_speed(const scene *s, int sources);

/* The step size the time loop starts with: the fixed dt (after rounding to land on frames), or
 * the CFL step for bodies at their initial velocities, at most cfl scene_viscous_dt. */
double scene_initial_dt(const scene *s);

/* Substeps per frame at rest: the fixed step's count, or 1/fps over the CFL step cfl dx / c of
 * the fastest wave c (in double: it may exceed an int), at least 1. */
double scene_substeps_at_rest(const scene *s);

#endif
