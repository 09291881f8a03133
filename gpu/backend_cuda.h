/* backend_cuda.h - the CUDA backend (gpu/backend_cuda.cu): the backend.h interface on one
 * device, callable from the C host code. */
#ifndef DRIFT_BACKEND_CUDA_H
#define DRIFT_BACKEND_CUDA_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the CUDA backend on one device and uploads the particles (takes them over: *p is left
 * empty, as with backend_cpu_create). Fails with DR_ECUDA naming the call on a CUDA error, and
 * with DR_ENOMEM naming what was needed and what the device has free when memory runs out. */
int backend_cuda_create(const sim_params *prm, particles *p, backend *out);
/* The same from a particle source (backend.h's backend_create_from): one device uploads it chunk
 * by chunk (MEM_CREATE_CHUNK particles staged on the host at a time) into buffers sized for all
 * of it first; an island of several gathers it on the host for its split. */
int backend_cuda_create_from(const sim_params *prm, const particle_source *src, backend *out);

#ifdef __cplusplus
}
#endif
#endif
