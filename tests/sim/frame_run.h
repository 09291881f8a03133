/* frame_run.h - for the tests that read back the frames a run wrote (test_fields, test_half):
 * the run of a scene given as JSON text into a folder, and a frame of it opened. Include after
 * simtest.h; link drift_frame_read. */
#ifndef DRIFT_TEST_FRAME_RUN_H
#define DRIFT_TEST_FRAME_RUN_H

#include "frame_read.h"
#include "simtest.h"

/* Runs the scene of JSON text json on the test's backend, its frames written into out; *s holds
 * the scene (scene_destroy it). */
static void frame_run(const char *json, const char *out, scene *s) {
  scene_from_text(json, s);
  sim_options opt = {.backend = test_backend_, .write_output = 1, .out_dir = out};
  sim *S = NULL;
  MUST(sim_create(s, &opt, MPI_COMM_WORLD, &S));
  MUST(sim_run(S));
  sim_destroy(&S);
}

/* Opens frame FRAME of the run in OUT; a file that cannot be opened fails the test and exits. */
static void frame_run_open(const char *out, int frame, frame_file *ff) {
  char path[4400];
  snprintf(path, sizeof path, "%s/frame_%05d.h5", out, frame);
  if (frame_open(ff, path) < 0) {
    fprintf(stderr, "FAIL: %s\n", ff->err);
    exit(1);
  }
}

#endif
