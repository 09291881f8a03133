/* backend.c - choosing a backend (see backend.h). */
#include "backend.h"

#include <stdio.h>
#include <string.h>

#include "backend_cuda.h"
#include "error.h"
#include "gpu_query.h"
#include "log.h"
#include "scene.h"

/* Whether kind runs on the cuda backend (auto: where a GPU is visible and the backend built);
 * logs the choice of auto. */
static int choose_cuda(int kind, const sim_params *prm, int *cuda) {
  int ngpu = 0;
  char gpu_name[256];
  gpu_count(&ngpu, gpu_name, sizeof gpu_name);
  *cuda = 0;
  if (kind == BACKEND_CUDA) {
    if (!gpu_backend_built())
      return dr_fail(DR_EINPUT, "the cuda backend is not part of this build; run with --backend cpu (or auto)");
    if (ngpu == 0) return dr_fail(DR_EINPUT, "backend cuda requested but no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver)");
    *cuda = 1;
    return DR_OK;
  }
  if (kind == BACKEND_AUTO && ngpu > 0) {
    if (gpu_backend_built()) {
      log_info("backend auto: %d GPU(s) visible (%s), using cuda", ngpu, gpu_name);
      *cuda = 1;
      return DR_OK;
    }
    log_info("note: %d GPU(s) visible (%s) but this build has no cuda backend; using cpu", ngpu, gpu_name);
  }
  return DR_OK;
}

int backend_create(int kind, const sim_params *prm, particles *p, backend *out) {
  memset(out, 0, sizeof *out);
  int cuda = 0;
  DR_TRY(choose_cuda(kind, prm, &cuda));
  return cuda ? backend_cuda_create(prm, p, out) : backend_cpu_create(prm, p, out);
}

int backend_create_from(int kind, const sim_params *prm, const particle_source *src, backend *out) {
  memset(out, 0, sizeof *out);
  int cuda = 0;
  DR_TRY(choose_cuda(kind, prm, &cuda));
  return cuda ? backend_cuda_create_from(prm, src, out) : backend_cpu_create_from(prm, src, out);
}

int backend_source_drain(const particle_source *src, particles *p, size_t max) {
  DR_TRY(particles_reserve(p, p->n + src->n));
  const size_t end = p->n + src->n;
  while (p->n < end) {
    const size_t want = end - p->n < max ? end - p->n : max;
    DR_TRY(particle_source_take(src, p, want));
  }
  return DR_OK;
}

void backend_destroy(backend *b) {
  if (b->destroy && b->state) b->destroy(b->state);
  memset(b, 0, sizeof *b);
}

int backend_fail_particle(const sim_params *prm, uint64_t id, int m) {
  const int b = particle_id_body(id);
  const char *body = prm->body_names && b >= 0 && b < prm->n_bodies ? prm->body_names[b] : NULL;
  const char *mat = prm->material_names && m >= 0 && m < prm->n_materials ? prm->material_names[m] : "?";
  char unknown[48];
  if (!body) snprintf(unknown, sizeof unknown, "body %d", b), body = unknown;
  return dr_fail(DR_EPHYSICS,
                 "particle %llu (%s, material %s) reached a non-finite state or a runaway speed (velocity, deformation, "
                 "or more than %g cell per step); the step is too large for the material's stiffness or speed",
                 (unsigned long long)id, body, mat, (double)DR_RUNAWAY_CELLS);
}
