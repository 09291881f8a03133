/* sample.h - fills bodies with particles: stratified random sampling of every grid cell that
 * the body's shape covers (ppc points per cell, one per stratum), keeping the points inside the
 * shape. Particle volume is the shape's exact volume divided by the body's particle count, so
 * the body's total mass is density times its volume whatever the sampling noise. Ids are
 * (body << 48) | (cell index in the body's bounding cells * ppc + stratum): unique, stable, and
 * computable from the cell alone (so ranks can later sample only their own cells). */
#ifndef DRIFT_SAMPLE_H
#define DRIFT_SAMPLE_H

#include <stdint.h>

#include "particles.h"
#include "scene.h"

#define MAX_CELL_SAMPLES 1000 /* the largest ppc (scene.c) */

/* Counts the particles body b will have at the start (0 for a source: emit.h). */
uint64_t sample_count(const scene *s, int b);
/* Exact volume of body b's shape (m^3). */
double sample_shape_volume(const scene *s, int b);
/* The body's bounding cells [lo, hi) in cells of the domain grid (cell i spans
 * [domain_min + i dx, domain_min + (i+1) dx)). */
void sample_body_cells(const scene *s, const scene_body *b, int64_t lo[3], int64_t hi[3]);
/* The ppc stratified points (3 ppc doubles into pts) of cell c (domain grid cell coordinates)
 * from random stream (seed, stream), before the inside test: what the sampling of bodies and
 * the resampling sources (emit.h) place in a cell. */
void sample_cell(const scene *s, const scene_body *b, const int64_t c[3], uint64_t seed, uint64_t stream,
                 double *pts);

/* Appends the particles of every body but the sources to p (allocates as needed). */
int sample_scene(const scene *s, particles *p);
/* The same, keeping only the points for which keep(ctx, x) is non-zero (a rank's own region):
 * the kept particles are exactly those sample_scene gives there, volumes included. */
typedef int (*sample_keep_fn)(void *ctx, const double x[3]);
int sample_scene_where(const scene *s, sample_keep_fn keep, void *ctx, particles *p);
/* The same particles as a particle_source (particles.h), sampled chunk by chunk as the consumer
 * asks (a run's creation streams them into its backend, none held beyond a chunk): open counts
 * each body's particles in a pass that stores nothing (their volume needs the count) and the
 * kept ones (the source's n); the source's chunks, one after the other, are exactly what
 * sample_scene_where gives. The stream holds the scene and keep's ctx until closed. */
typedef struct sample_stream sample_stream;
int sample_stream_open(const scene *s, sample_keep_fn keep, void *ctx, sample_stream **out);
particle_source sample_stream_source(sample_stream *st);
/* The largest particle mass (kg, as the particles store it) of the scene's bodies, sources
 * excepted: the same on every rank, whichever particles it keeps. */
double sample_stream_mass_max(const sample_stream *st);
void sample_stream_close(sample_stream **st);
/* Calls fn(ctx, x) for every particle position of the scene without storing any (histograms),
 * the sources' shapes included as if sampled (where their particles will be: the initial cuts
 * between ranks). */
typedef int (*sample_point_fn)(void *ctx, const double x[3]);
int sample_visit(const scene *s, sample_point_fn fn, void *ctx);

#endif
