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

/* Counts the particles body b will have. */
uint64_t sample_count(const scene *s, int b);
/* Exact volume of body b's shape (m^3). */
double sample_shape_volume(const scene *s, int b);
/* Appends the particles of every body to p (allocates as needed). */
int sample_scene(const scene *s, particles *p);
/* The same, keeping only the points for which keep(ctx, x) is non-zero (a rank's own region):
 * the kept particles are exactly those sample_scene gives there, volumes included. */
typedef int (*sample_keep_fn)(void *ctx, const double x[3]);
int sample_scene_where(const scene *s, sample_keep_fn keep, void *ctx, particles *p);
/* Calls fn(ctx, x) for every particle position of the scene without storing any (histograms). */
typedef int (*sample_point_fn)(void *ctx, const double x[3]);
int sample_visit(const scene *s, sample_point_fn fn, void *ctx);

#endif
