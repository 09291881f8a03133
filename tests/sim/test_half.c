/* output.precision "half" against "float": the same run (a jelly block landing beside a block of
 * water, every field) written at both precisions; each frame of the half run, read back through
 * HDF5's own conversion into double, matches the float run's frame particle by particle (by id)
 * within the error docs/output.md gives each field:
 *   position  a fixed point: the domain reaches 0.5 m, so (2^14 - 1) 2^p >= 0.5 gives spacing
 *             2^-14 m, and every coordinate is within 2^-15 m;
 *   velocity, logjp, J, F  IEEE binary16: within 2^-11 of the value (2^-25 below 2^-14);
 *   stress, C  bf16: within 2^-8 of the value;
 *   id, material, owner    equal (material and owner 8-bit at both: two materials, one rank).
 * The half file's floating datasets are 16-bit, its root attributes say precision "half" and
 * position_spacing 2^-14, and its rows take 74 bytes a particle against the float file's 138;
 * the float file has no precision attribute (its layout is unchanged). The errors are not all 0:
 * the comparison sees the rounding. Both runs are in deterministic mode, so that on a GPU too
 * they compute the same values (float atomics add in no fixed order) and only the encoding
 * differs. */
#include <hdf5.h>

#include "frame_read.h"
#include "h5frame.h"
#include "simtest.h"
#include "frame_run.h"

#define N_FRAMES 2

static double *read_ds(frame_file *ff, const char *name, size_t n, int cols) {
  void *v = NULL;
  size_t rows = 0;
  if (frame_dataset(ff, name, H5T_NATIVE_DOUBLE, cols, &v, &rows) < 0 || rows != n) {
    fprintf(stderr, "FAIL: %s: %s (%zu rows, want %zu)\n", ff->path, ff->err, rows, n);
    exit(1);
  }
  return v;
}

/* Bytes of a value of /particles/NAME in the file, and its storage's bytes. */
static void ds_sizes(frame_file *ff, const char *name, size_t *value, double *storage) {
  char path[64];
  snprintf(path, sizeof path, "/particles/%s", name);
  hid_t d = H5Dopen2(ff->f, path, H5P_DEFAULT), t = d >= 0 ? H5Dget_type(d) : H5I_INVALID_HID;
  *value = t >= 0 ? H5Tget_size(t) : 0;
  *storage = d >= 0 ? (double)H5Dget_storage_size(d) : 0;
  if (t >= 0) H5Tclose(t);
  if (d >= 0) H5Dclose(d);
}

static size_t *by_id(const double *id, size_t n) {
  size_t *ix = malloc(n * sizeof *ix);
  for (size_t i = 0; i < n; ++i) ix[i] = i;
  for (size_t i = 1; i < n; ++i) /* insertion sort: a thousand particles, nearly in order */
    for (size_t j = i; j > 0 && id[ix[j - 1]] > id[ix[j]]; --j) {
      const size_t t = ix[j];
      ix[j] = ix[j - 1], ix[j - 1] = t;
    }
  return ix;
}

typedef struct field_bound {
  const char *name;
  int cols;
  double abs, rel; /* |half - float| <= abs + rel |float| */
  int half_bytes;  /* a value in the half file */
} field_bound;

int main(int argc, char **argv) {
  choose_backend(argc, argv);
  init(&argc, &argv);
  char dir[] = "/tmp/drift-half-XXXXXX";
  if (!mkdtemp(dir)) return 1;
  const char *scene_fmt =
      "{\"domain\":{\"min\":[0,0,0],\"max\":[0.5,0.5,0.5],\"dx\":0.025},"
      "\"time\":{\"frames\":2,\"fps\":20,\"dt\":0.0005},"
      "\"materials\":{\"jelly\":{\"model\":\"fixed_corotated\",\"density\":1000,\"youngs_modulus\":1e5,\"poisson_ratio\":0.3},"
      "             \"water\":{\"model\":\"weakly_compressible\",\"density\":1000,\"bulk_modulus\":1e4}},"
      "\"bodies\":[{\"shape\":\"box\",\"min\":[0.1,0.05,0.1],\"max\":[0.2,0.15,0.2],\"material\":\"jelly\",\"ppc\":8,\"velocity\":[0,-2,0]},"
      "           {\"shape\":\"box\",\"min\":[0.3,0.05,0.3],\"max\":[0.4,0.15,0.4],\"material\":\"water\",\"ppc\":8}],"
      "\"parallel\":{\"deterministic\":true},"
      "\"output\":{\"fields\":[\"position\",\"velocity\",\"id\",\"material\",\"owner\",\"logjp\","
      "\"J\",\"F\",\"stress\",\"C\"]%s}}";
  char json[4096], out_f[4200], out_h[4200];
  snprintf(out_f, sizeof out_f, "%s/float", dir);
  snprintf(out_h, sizeof out_h, "%s/half", dir);
  snprintf(json, sizeof json, scene_fmt, "");
  scene sf, sh;
  frame_run(json, out_f, &sf);
  scene_destroy(&sf);
  snprintf(json, sizeof json, scene_fmt, ",\"precision\":\"half\"");
  frame_run(json, out_h, &sh);
  scene_destroy(&sh);

  const double spacing = 0x1p-14, b16 = 0x1p-11, tiny16 = 0x1p-25, bf = 0x1p-8;
  const field_bound fields[] = {
      {"position", 3, 0.5 * spacing, 0, 2}, {"velocity", 3, tiny16, b16, 2}, {"logjp", 1, tiny16, b16, 2},
      {"J", 1, tiny16, b16, 2},             {"F", 9, tiny16, b16, 2},        {"stress", 6, 0, bf, 2},
      {"C", 9, 0, bf, 2},                   {"id", 1, 0, 0, 8},              {"material", 1, 0, 0, 1},
      {"owner", 1, 0, 0, 1}};
  const int nf = (int)(sizeof fields / sizeof *fields);
  double worst[16] = {0};
  for (int frame = 0; frame <= N_FRAMES; ++frame) {
    frame_file ff, fh;
    frame_run_open(out_f, frame, &ff);
    frame_run_open(out_h, frame, &fh);
    uint64_t n = 0, nh = 0;
    CHECK(frame_attr(&ff, "n_particles", H5T_NATIVE_UINT64, &n) == 0 &&
              frame_attr(&fh, "n_particles", H5T_NATIVE_UINT64, &nh) == 0 && n == nh && n == 1024,
          "frame %d: %llu and %llu particles, want 1024", frame, (unsigned long long)n, (unsigned long long)nh);
    double sp = 0;
    CHECK(frame_attr(&fh, "position_spacing", H5T_NATIVE_DOUBLE, &sp) == 0 && sp == spacing,
          "frame %d: position_spacing %g, want 2^-14", frame, sp);
    CHECK(H5Aexists(ff.f, "precision") == 0, "frame %d: the float file has a precision attribute", frame);
    CHECK(H5Aexists(fh.f, "precision") > 0, "frame %d: the half file has no precision attribute", frame);
    double *idf = read_ds(&ff, "id", n, 1), *idh = read_ds(&fh, "id", n, 1);
    size_t *kf = by_id(idf, n), *kh = by_id(idh, n);
    double bytes_f = 0, bytes_h = 0;
    for (int q = 0; q < nf; ++q) {
      const field_bound *b = &fields[q];
      double *vf = read_ds(&ff, b->name, n, b->cols), *vh = read_ds(&fh, b->name, n, b->cols);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i)
        for (int c = 0; c < b->cols; ++c) {
          const double x = vf[kf[i] * (size_t)b->cols + (size_t)c], y = vh[kh[i] * (size_t)b->cols + (size_t)c];
          const double err = fabs(y - x);
          if (!(err <= b->abs + b->rel * fabs(x)) && bad++ < 3)
            fprintf(stderr, "frame %d: %s[%zu][%d]: half %.9g, float %.9g: error %.3g beyond %.3g\n", frame, b->name, i,
                    c, y, x, err, b->abs + b->rel * fabs(x));
          /* relative where the relative bound is the larger, else absolute */
          if (b->rel == 0) worst[q] = fmax(worst[q], err);
          else if (b->rel * fabs(x) >= b->abs) worst[q] = fmax(worst[q], err / fabs(x));
        }
      CHECK(bad == 0, "frame %d: %s: %zu values beyond the documented error", frame, b->name, bad);
      size_t vbf = 0, vbh = 0;
      double sf = 0, sh = 0;
      ds_sizes(&ff, b->name, &vbf, &sf);
      ds_sizes(&fh, b->name, &vbh, &sh);
      CHECK((int)vbh == b->half_bytes && (int)vbf == (b->half_bytes == 2 ? 4 : b->half_bytes),
            "frame %d: %s values of %zu bytes (float file %zu), want %d", frame, b->name, vbh, vbf, b->half_bytes);
      bytes_f += sf, bytes_h += sh;
      free(vf), free(vh);
    }
    CHECK(bytes_f == 138.0 * (double)n && bytes_h == 74.0 * (double)n,
          "frame %d: rows of %g and %g bytes a particle, want 138 (float) and 74 (half)", frame, bytes_f / (double)n,
          bytes_h / (double)n);
    free(idf), free(idh), free(kf), free(kh);
    CHECK(frame_close(&ff) == 0 && frame_close(&fh) == 0, "closing frame %d", frame);
  }
  printf("largest error (relative where the relative bound dominates): ");
  for (int q = 0; q < 7; ++q) printf("%s %.3g%s", fields[q].name, worst[q], q < 6 ? ", " : "\n");
  CHECK(worst[0] > 0 && worst[1] > 0 && worst[4] > 0 && worst[5] > 0,
        "no rounding seen in position, velocity, F or stress: the half file holds the float values?");
  char cmd[4400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (failures_ == 0 && system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
  return finish("test_half");
}
