/* A run's output read back: frame files for frames 0, 2, 4 (output.every 2), each with the
 * right particle count, the initial state in frame 0 (positions inside the bodies, the bodies'
 * velocities, materials in file order, unique ids), the time/frame/dx attributes, ids that are
 * the same set in every frame, and an XDMF file that names exactly the written frames. */
#include <sys/stat.h>

#include "frame_read.h"
#include "simtest.h"

/* Frame FRAME of the run in DIR; a file that cannot be read fails the test and exits. */
static void read_frame(const char *dir, int frame, size_t *n, float **x, float **v, uint64_t **id, int32_t **mat,
                       double *time, double *dx) {
  char path[4400];
  snprintf(path, sizeof path, "%s/frame_%05d.h5", dir, frame);
  frame_file ff;
  void *p[4] = {NULL, NULL, NULL, NULL};
  size_t rows[4] = {0, 0, 0, 0};
  int fr = -1;
  int rc = frame_open(&ff, path);
  if (!rc) rc = frame_dataset(&ff, "position", H5T_NATIVE_FLOAT, 3, &p[0], &rows[0]);
  if (!rc) rc = frame_dataset(&ff, "velocity", H5T_NATIVE_FLOAT, 3, &p[1], &rows[1]);
  if (!rc) rc = frame_dataset(&ff, "id", H5T_NATIVE_UINT64, 1, &p[2], &rows[2]);
  if (!rc) rc = frame_dataset(&ff, "material", H5T_NATIVE_INT32, 1, &p[3], &rows[3]);
  if (!rc) rc = frame_attr(&ff, "time", H5T_NATIVE_DOUBLE, time);
  if (!rc) rc = frame_attr(&ff, "dx", H5T_NATIVE_DOUBLE, dx);
  if (!rc) rc = frame_attr(&ff, "frame", H5T_NATIVE_INT, &fr);
  if (frame_close(&ff) < 0 && !rc) rc = -1;
  if (rc) {
    fprintf(stderr, "FAIL: %s\n", ff.err);
    exit(1);
  }
  CHECK(rows[1] == rows[0] && rows[2] == rows[0] && rows[3] == rows[0], "frame %d: datasets of %zu, %zu, %zu, %zu rows",
        frame, rows[0], rows[1], rows[2], rows[3]);
  CHECK(fr == frame, "frame attribute %d in frame %d", fr, frame);
  *n = rows[0];
  *x = p[0], *v = p[1], *id = p[2], *mat = p[3];
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  init(&argc, &argv);
  char dir[] = "/tmp/drift-frames-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  char out[4200];
  snprintf(out, sizeof out, "%s/out/nested", dir); /* the run creates missing folders */
  const char *json =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[0.5,0.5,0.5],\"dx\":0.025},"
      "\"time\":{\"frames\":4,\"fps\":50,\"dt\":0.002},"
      "\"materials\":{\"steel\":{\"model\":\"fixed_corotated\",\"density\":2000,\"youngs_modulus\":1e5,\"poisson_ratio\":0.3},"
      "             \"water\":{\"model\":\"weakly_compressible\",\"density\":1000,\"bulk_modulus\":1e4}},"
      "\"bodies\":[{\"shape\":\"box\",\"min\":[0.1,0.2,0.1],\"max\":[0.2,0.3,0.2],\"material\":\"water\",\"ppc\":8,\"velocity\":[0.5,0,0]},"
      "           {\"shape\":\"sphere\",\"center\":[0.35,0.3,0.3],\"radius\":0.06,\"material\":\"steel\",\"ppc\":27}],"
      "\"output\":{\"dir\":\"unused\",\"every\":2}}";
  scene s;
  scene_from_text(json, &s);
  sim_options opt = {.backend = -1, .write_output = 1, .out_dir = out};
  sim *S = NULL;
  MUST(sim_create(&s, &opt, MPI_COMM_WORLD, &S));
  MUST(sim_run(S));
  size_t total = sim_get_status(S)->particles;
  sim_destroy(&S);

  size_t n;
  float *x, *v;
  uint64_t *id;
  int32_t *mat;
  double t, dx;
  uint64_t *ids0 = NULL;
  for (int frame = 0; frame <= 4; ++frame) {
    char path[4300];
    snprintf(path, sizeof path, "%s/frame_%05d.h5", out, frame);
    struct stat sb;
    int exists = stat(path, &sb) == 0;
    CHECK(exists == (frame % 2 == 0), "frame %d %s", frame, exists ? "written but not due" : "missing");
    if (!exists) continue;
    read_frame(out, frame, &n, &x, &v, &id, &mat, &t, &dx);
    CHECK(n == total, "frame %d holds %zu particles, the run had %zu", frame, n, total);
    CHECK(fabs(t - frame / 50.0) < 1e-12, "frame %d time %g", frame, t);
    CHECK(dx == 0.025, "dx %g", dx);
    qsort(id, n, sizeof *id, cmp_u64);
    for (size_t i = 1; i < n; ++i) CHECK(id[i] != id[i - 1], "duplicate id %llu", (unsigned long long)id[i]);
    if (frame == 0) {
      size_t nwater = 0, nsteel = 0;
      for (size_t i = 0; i < n; ++i) {
        const float *p = x + 3 * i;
        if (mat[i] == 1) { /* materials in file order: steel 0, water 1 */
          ++nwater;
          CHECK(p[0] >= 0.1f && p[0] <= 0.2f && p[1] >= 0.2f && p[1] <= 0.3f, "water particle outside its box");
          CHECK(v[3 * i] == 0.5f && v[3 * i + 1] == 0.0f, "water velocity (%g, %g)", v[3 * i], v[3 * i + 1]);
        } else {
          ++nsteel;
          double r = sqrt(pow(p[0] - 0.35, 2) + pow(p[1] - 0.3, 2) + pow(p[2] - 0.3, 2));
          CHECK(mat[i] == 0 && r <= 0.06 + 1e-6, "steel particle outside its sphere (r %g)", r);
        }
      }
      /* The box spans 4x4x4 whole cells at 8 per cell; the sphere holds about its volume. */
      CHECK(nwater == 4 * 4 * 4 * 8, "%zu water particles, expected 512", nwater);
      double expect = 4.0 / 3.0 * 3.14159265 * pow(0.06, 3) / pow(0.025, 3) * 27;
      CHECK(fabs(nsteel - expect) < 0.05 * expect, "%zu steel particles, expected about %.0f", nsteel, expect);
      ids0 = malloc(n * sizeof *ids0);
      memcpy(ids0, id, n * sizeof *ids0);
    } else {
      CHECK(memcmp(ids0, id, n * sizeof *id) == 0, "frame %d has a different set of ids", frame);
    }
    free(x), free(v), free(id), free(mat);
  }
  /* The XDMF file lists frames 0, 2 and 4 and nothing else; no temporary file is left. */
  char path[4300];
  snprintf(path, sizeof path, "%s/frames.xdmf", out);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "no frames.xdmf");
  if (f) {
    char buf[65536];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    buf[len] = 0;
    fclose(f);
    CHECK(strstr(buf, "frame_00000.h5") && strstr(buf, "frame_00002.h5") && strstr(buf, "frame_00004.h5"),
          "frames.xdmf misses a frame");
    CHECK(!strstr(buf, "frame_00001.h5") && !strstr(buf, "frame_00003.h5"), "frames.xdmf names an unwritten frame");
  }
  char cmd[4400];
  snprintf(cmd, sizeof cmd, "ls -A %s | grep -v -E '^(frame_0000[024]\\.h5|frames\\.xdmf|frames_vertices\\.bin)$'", out);
  CHECK(system(cmd) != 0, "unexpected files left in the output folder (listed above)");
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  free(ids0);
  scene_destroy(&s);
  return finish("test_frames");
}
