/* make_frames DIR N_FRAMES N[,N1,...] [--all-fields] [--half] - writes N_FRAMES frames and DIR/frames.xdmf
 * for the ParaView test (pvpython_open.py). N is the particle count of every frame, or a
 * comma-separated list of one count per frame (0 allowed). DIR is created if missing. Values are
 * a function of (frame, particle); ids start at 2^32 + 1000 * frame (so that a reader that cuts
 * them to 32 bits is caught) and frame k has time 0.25 * k. The frames hold the default fields,
 * or with --all-fields every field of h5frame.h (logjp, J, F, stress and C too); with --half at
 * output.precision "half" (the positions' fixed point for |x| <= 2.5 m: spacing 2^-11 m). */
#include <errno.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"
#include "h5frame.h"
#include "xdmf.h"

enum { MAX_FRAMES = 64 };

static int parse_counts(const char *arg, int n_frames, uint64_t *counts) {
  const char *p = arg;
  for (int k = 0; k < n_frames; k++) {
    char *end = NULL;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p) return -1;
    counts[k] = v;
    if (*end == ',') {
      p = end + 1;
    } else if (*end == 0) {
      if (k == 0) { /* one count for every frame */
        for (int j = 1; j < n_frames; j++) counts[j] = v;
        return 0;
      }
      return k == n_frames - 1 ? 0 : -1;
    } else {
      return -1;
    }
  }
  return *p == 0 ? 0 : -1;
}

static int write_all(const char *dir, int n_frames, const uint64_t *counts, int all_fields, int half) {
  static const char *const names[] = {"sand", "water"};
  xdmf_frame frames[MAX_FRAMES];
  for (int k = 0; k < n_frames; k++) {
    size_t n = (size_t)counts[k];
    float *pos = malloc(3 * n * sizeof *pos + 1), *vel = malloc(3 * n * sizeof *vel + 1);
    uint64_t *id = malloc(n * sizeof *id + 1);
    int32_t *mat = malloc(n * sizeof *mat + 1), *own = malloc(n * sizeof *own + 1);
    /* the opt-in fields: one buffer, cut in four (logjp and J n values each, F 9n, stress 6n, C 9n) */
    float *more = all_fields ? malloc(26 * n * sizeof *more + 1) : NULL;
    if (!pos || !vel || !id || !mat || !own || (all_fields && !more)) {
      free(pos), free(vel), free(id), free(mat), free(own), free(more);
      return dr_fail(DR_ENOMEM, "make_frames: out of memory for %zu particles", n);
    }
    for (size_t i = 0; i < n; i++) {
      for (int c = 0; c < 3; c++) {
        pos[3 * i + c] = 0.01f * (float)i + 0.1f * (float)c + 0.05f * (float)k;
        vel[3 * i + c] = (float)c - 1.0f + 0.0137f * (float)i; /* not all exact in 16 bits */
      }
      id[i] = ((uint64_t)1 << 32) + 1000u * (uint64_t)k + i; /* above 2^32: no 32-bit cut */
      mat[i] = (int32_t)(i % 2);
      own[i] = (int32_t)(i % 4); /* rank 0, devices 0 to 3 */
    }
    float *jp = more, *J = more ? more + n : NULL, *F = more ? more + 2 * n : NULL;
    float *stress = more ? more + 11 * n : NULL, *C = more ? more + 17 * n : NULL;
    for (size_t i = 0; i < n && more; i++) {
      jp[i] = -0.001f * (float)i;
      J[i] = 1.0f + 0.001f * (float)i;
      for (int q = 0; q < 9; q++) {
        F[9 * i + q] = (q % 4 == 0 ? 1.0f : 0.0f) + 0.0001f * (float)(q + i);
        C[9 * i + q] = 0.01f * (float)q;
      }
      for (int q = 0; q < 6; q++) stress[6 * i + q] = 100.0f * (float)(q + 1) + 1234.5f * (float)i; /* Pa */
    }
    const unsigned fields = all_fields ? (1u << H5FRAME_FIELDS) - 1 : H5FRAME_DEFAULT_FIELDS;
    h5frame_meta meta = {.frame = k, .time = 0.25 * k, .dx = 0.01, .n_materials = 2,
                         .material_names = names, .fields = fields,
                         .precision = half ? H5FRAME_HALF : H5FRAME_FLOAT, .extent = 2.5};
    h5frame_data d = {.n = n, .position = pos, .velocity = vel, .id = id, .material = mat,
                      .owner = own, .logjp = jp, .J = J, .F = F, .stress = stress, .C = C};
    int st = h5frame_write(MPI_COMM_WORLD, dir, &meta, &d);
    free(pos), free(vel), free(id), free(mat), free(own), free(more);
    if (st) return st;
    frames[k] = (xdmf_frame){.frame = k, .time = meta.time, .n = counts[k], .fields = fields};
    DR_TRY(xdmf_write(dir, frames, k + 1));
  }
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int st = 0;
  uint64_t counts[MAX_FRAMES];
  int all_fields = 0, half = 0, bad = argc < 4;
  for (int a = 4; a < argc; ++a) {
    if (!strcmp(argv[a], "--all-fields")) all_fields = 1;
    else if (!strcmp(argv[a], "--half")) half = 1;
    else bad = 1;
  }
  int n_frames = bad ? 0 : atoi(argv[2]);
  if (n_frames < 1 || n_frames > MAX_FRAMES || parse_counts(argv[3], n_frames, counts) != 0) {
    fprintf(stderr, "usage: make_frames DIR N_FRAMES(1..%d) N[,N1,...] [--all-fields] [--half]\n", MAX_FRAMES);
    st = DR_EINPUT;
  } else if (mkdir(argv[1], 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "make_frames: mkdir %s: %s\n", argv[1], strerror(errno));
    st = DR_EIO;
  } else {
    st = write_all(argv[1], n_frames, counts, all_fields, half);
    if (st) fprintf(stderr, "make_frames: %s\n", dr_message());
    else printf("make_frames: %d frames in %s\n", n_frames, argv[1]);
  }
  MPI_Finalize();
  return st ? 1 : 0;
}
