/* gpu_query.h - what the host code may ask about GPUs without including CUDA headers. */
#ifndef DRIFT_GPU_QUERY_H
#define DRIFT_GPU_QUERY_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (respects CUDA_VISIBLE_DEVICES). A machine without a GPU or
 * without a driver has 0; that is not an error. *name gets device 0's name where there is one. */
int gpu_count(int *count, char *name, int name_len);

/* Free and total memory of device d in bytes (cudaMemGetInfo; it makes the device's context,
 * which the run needs anyway). DR_ECUDA with a message naming the call where it fails; total may
 * be NULL. */
int gpu_free_memory(int device, double *free_bytes, double *total_bytes);

/* Whether this build contains the CUDA backend. */
int gpu_backend_built(void);

#ifdef __cplusplus
}
#endif
#endif
