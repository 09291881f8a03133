/* test_preview - output.preview read back with libpng.
 *
 * Two bodies, steel on the left (x 0.05-0.2, deep in z: 0.05-0.45) and water on the right
 * (x 0.3-0.45, shallow: z 0.05-0.2), in a domain 0.5 x 0.4 x 0.5 m:
 *   - front view (along -z), 200 px: the picture is 200 x 160 (the domain's aspect); steel's
 *     colour on the left, water's on the right and never the other way round, the background
 *     above the bodies, the outline on the border; each body's shade is the one preview.h gives
 *     for the depth of its face nearest the viewer (steel's z = 0.45 is near, water's 0.2 far);
 *   - side view (along -x, -z to the right): where the bodies overlap (z < 0.2) the water, nearer
 *     the viewer at +x, hides the steel (the depth buffer); the steel shows elsewhere, far and dark;
 *   - a temporary name that cannot be written (a folder in its way) fails the run with one line
 *     naming the preview file, and leaves no preview.
 * On several ranks (the mpi test): the same scene on all ranks and alone on rank 0 give
 * byte-identical pixels at frame 0 (the ranks' depth buffers combined), no temporary file is left,
 * and the picture coloured by owner shows one colour per rank.
 * argv[1]: cpu or cuda (the particles come from the backend's download, as frames do). */
#include <png.h>
#include <sys/stat.h>

#include "preview.h"
#include "sim/simtest.h"

static const char *SCENE =
    "{\"domain\":{\"min\":[0,0,0],\"max\":[0.5,0.4,0.5],\"dx\":0.025},"
    "\"time\":{\"frames\":1,\"fps\":50,\"dt\":0.002},"
    "\"materials\":{\"steel\":{\"model\":\"fixed_corotated\",\"density\":2000,\"youngs_modulus\":1e5,\"poisson_ratio\":0.3},"
    "             \"water\":{\"model\":\"weakly_compressible\",\"density\":1000,\"bulk_modulus\":1e4}},"
    "\"bodies\":[{\"shape\":\"box\",\"min\":[0.05,0.05,0.05],\"max\":[0.2,0.25,0.45],\"material\":\"steel\"},"
    "           {\"shape\":\"box\",\"min\":[0.3,0.05,0.05],\"max\":[0.45,0.25,0.2],\"material\":\"water\"}],"
    "\"output\":{\"preview\":true,\"preview_size\":200,\"preview_view\":\"%s\",\"preview_color\":\"%s\"}}";

typedef struct image {
  int w, h;
  unsigned char *rgb; /* h rows of 3 w bytes */
} image;

static int read_png(const char *path, image *im) {
  png_image p;
  memset(&p, 0, sizeof p);
  p.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&p, path)) {
    CHECK(0, "cannot read %s: %s", path, p.message);
    return -1;
  }
  p.format = PNG_FORMAT_RGB;
  im->w = (int)p.width, im->h = (int)p.height;
  im->rgb = malloc(PNG_IMAGE_SIZE(p));
  if (!png_image_finish_read(&p, NULL, im->rgb, 0, NULL)) {
    CHECK(0, "cannot decode %s: %s", path, p.message);
    free(im->rgb);
    return -1;
  }
  return 0;
}

static const unsigned char *px(const image *im, int col, int row) { return im->rgb + 3 * ((size_t)row * im->w + col); }

/* The shade k with rgb = round(k palette[c]) (each channel within rounding), or -1 if none. */
static double shade_of(const unsigned char *rgb, int c) {
  unsigned char pal[3];
  preview_palette(c, pal);
  const double k = (double)(rgb[0] + rgb[1] + rgb[2]) / (pal[0] + pal[1] + pal[2]);
  for (int a = 0; a < 3; ++a)
    if (fabs(rgb[a] - k * pal[a]) > 1.5) return -1;
  return k >= PREVIEW_SHADE_MIN - 0.01 && k <= 1.0 + 1e-9 ? k : -1;
}

static int is_color(const unsigned char *rgb, const unsigned char c[3]) {
  return rgb[0] == c[0] && rgb[1] == c[1] && rgb[2] == c[2];
}

/* Whether k is a shade that preview.h gives a particle between depths a and b (m from the
 * domain's face nearest the viewer): 1 for the nearest particle of the scene, PREVIEW_SHADE_MIN for
 * the farthest. In both views the nearest particles lie within a sampling stratum (0.0125 m) of
 * a body's face 0.05 m deep, the farthest within one of a face 0.45 m deep. */
static int shade_near(double k, double a, double b) {
  const double n0 = 0.05, n1 = 0.0625, f0 = 0.4375, f1 = 0.45, c = 1.0 - PREVIEW_SHADE_MIN;
  const double hi = a <= n1 ? 1.0 : 1.0 - c * (a - n1) / (f1 - n1), lo = 1.0 - c * (b - n0) / (f0 - n0);
  return k > 0 && k <= hi + 0.005 && k >= lo - 0.005;
}

static void run_scene(const char *view, const char *color, const char *out, MPI_Comm comm, int expect_rc) {
  char json[4096];
  snprintf(json, sizeof json, SCENE, view, color);
  dr_clear(); /* a failure of an earlier case must not stand in for this one's message */
  scene s;
  scene_from_text(json, &s);
  CHECK(s.preview == 1 && s.preview_size == 200, "scene: preview %d size %d", s.preview, s.preview_size);
  sim_options opt = {.backend = test_backend_, .write_output = 1, .out_dir = out};
  sim *S = NULL;
  MUST(sim_create(&s, &opt, comm, &S));
  int rc = sim_run(S);
  CHECK(rc == expect_rc, "%s: sim_run returned %d (%s), expected %d", out, rc, rc ? dr_message() : "", expect_rc);
  sim_destroy(&S);
  scene_destroy(&s);
}

static void check_front(const char *dir) {
  char path[4400];
  snprintf(path, sizeof path, "%s/frame_00000.png", dir);
  image im;
  if (read_png(path, &im)) return;
  CHECK(im.w == 200 && im.h == 160, "front: %d x %d pixels, expected 200 x 160", im.w, im.h);
  if (im.w != 200 || im.h != 160) return;
  /* 400 px/m; rows run down from y = 0.4. Bodies: steel cols 20-80, water 120-180, rows 60-140. */
  int steel = 0, water = 0, wrong = 0, bg = 0;
  for (int row = 0; row < im.h; ++row)
    for (int col = 0; col < im.w; ++col) {
      const unsigned char *p = px(&im, col, row);
      const int s = shade_of(p, 0) > 0, w = shade_of(p, 1) > 0;
      steel += s, water += w;
      if ((s && col >= 100) || (w && col < 100)) ++wrong;
      const int border = row == 0 || col == 0 || row == im.h - 1 || col == im.w - 1;
      if (row < 50) { /* above the bodies (y > 0.275 m): nothing but background and outline */
        if (!is_color(p, border ? preview_outline : preview_background)) ++bg;
      }
    }
  CHECK(wrong == 0, "front: %d pixels of a material on the other body's half", wrong);
  CHECK(bg == 0, "front: %d pixels above the bodies are not background/outline", bg);
  /* each body covers its 60 x 80 px rectangle, up to the discs' rims */
  CHECK(steel > 0.9 * 60 * 80 && steel < 1.2 * 66 * 86, "front: %d steel pixels, expected about 4800", steel);
  CHECK(water > 0.9 * 60 * 80 && water < 1.2 * 66 * 86, "front: %d water pixels, expected about 4800", water);
  /* the centres: steel's near face at z 0.45 (0.05 m deep), water's at z 0.2 (0.3 m deep); the
   * nearest particle whose disc covers a pixel lies within two particle spacings (0.025 m) behind
   * the face */
  const double ks = shade_of(px(&im, 50, 100), 0), kw = shade_of(px(&im, 150, 100), 1);
  CHECK(shade_near(ks, 0.05, 0.075), "front: steel's centre has shade %.3f, expected that of 0.05-0.075 m deep", ks);
  CHECK(shade_near(kw, 0.3, 0.325), "front: water's centre has shade %.3f, expected that of 0.3-0.325 m deep", kw);
  /* between the bodies and beside them: background */
  CHECK(is_color(px(&im, 100, 100), preview_background), "front: the gap between the bodies is not background");
  CHECK(is_color(px(&im, 10, 100), preview_background), "front: left of the steel is not background");
  CHECK(is_color(px(&im, 0, 100), preview_outline), "front: the left border is not the outline");
  free(im.rgb);
}

static void check_side(const char *dir) {
  char path[4400];
  snprintf(path, sizeof path, "%s/frame_00000.png", dir);
  image im;
  if (read_png(path, &im)) return;
  /* side: u = -z (z = 0.5 at col 0), v = y: 200 x 160 again */
  CHECK(im.w == 200 && im.h == 160, "side: %d x %d pixels, expected 200 x 160", im.w, im.h);
  if (im.w != 200 || im.h != 160) return;
  /* z 0.1 (col 160): the water (x up to 0.45, 0.05 m deep) hides the steel behind it */
  const double kw = shade_of(px(&im, 160, 100), 1);
  CHECK(shade_near(kw, 0.05, 0.075), "side: at z 0.1 shade %.3f of water, expected that of 0.05-0.075 m deep", kw);
  /* z 0.35 (col 60): only the steel, its face x 0.2 is 0.3 m deep */
  const double ks = shade_of(px(&im, 60, 100), 0);
  CHECK(shade_near(ks, 0.3, 0.325), "side: at z 0.35 shade %.3f of steel, expected that of 0.3-0.325 m deep", ks);
  int steel_right = 0;
  for (int row = 65; row < 135; ++row) /* inside both bodies' y (the discs' rims differ) */
    for (int col = 125; col < 175; ++col)
      if (shade_of(px(&im, col, row), 0) > 0) {
        if (getenv("DEBUG_PREVIEW")) fprintf(stderr, "steel at col %d row %d\n", col, row);
        ++steel_right;
      }
  CHECK(steel_right == 0, "side: %d steel pixels where the water is in front (z 0.06-0.19, y 0.07-0.24)", steel_right);
  free(im.rgb);
}

/* No .frame_*.png.tmp left in dir. */
static void check_no_tmp(const char *dir) {
  char path[4400];
  for (int f = 0; f <= 1; ++f) {
    snprintf(path, sizeof path, "%s/.frame_%05d.png.tmp", dir, f);
    CHECK(access(path, F_OK) != 0, "%s was left behind", path);
    snprintf(path, sizeof path, "%s/frame_%05d.png", dir, f);
    CHECK(access(path, F_OK) == 0, "%s is missing", path);
  }
}

static int same_pixels(const char *a, const char *b) {
  image x, y;
  if (read_png(a, &x)) return 0;
  if (read_png(b, &y)) return free(x.rgb), 0;
  int same = x.w == y.w && x.h == y.h && !memcmp(x.rgb, y.rgb, (size_t)x.w * x.h * 3);
  free(x.rgb), free(y.rgb);
  return same;
}

int main(int argc, char **argv) {
  init(&argc, &argv);
  choose_backend(argc, argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  char base[] = "/tmp/drift-preview-XXXXXX", dir[4200], ref[4200];
  if (rank == 0 && !mkdtemp(base)) return 1;
  MPI_Bcast(base, sizeof base, MPI_CHAR, 0, MPI_COMM_WORLD);

  if (nranks == 1) {
    snprintf(dir, sizeof dir, "%s/front", base);
    run_scene("front", "material", dir, MPI_COMM_WORLD, 0);
    check_front(dir);
    check_no_tmp(dir);
    snprintf(dir, sizeof dir, "%s/side", base);
    run_scene("side", "material", dir, MPI_COMM_WORLD, 0);
    check_side(dir);
    /* a folder where the temporary file goes: the run fails naming the preview */
    snprintf(dir, sizeof dir, "%s/blocked/.frame_00000.png.tmp", base);
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    MUST(system(cmd));
    snprintf(dir, sizeof dir, "%s/blocked", base);
    run_scene("front", "material", dir, MPI_COMM_WORLD, DR_EIO);
    char want[4300];
    snprintf(want, sizeof want, "cannot write preview %s/frame_00000.png", dir);
    CHECK(strstr(dr_message(), want) && !strchr(dr_message(), '\n'), "message '%s' does not name %s in one line",
          dr_message(), want);
    dr_clear();
    snprintf(want, sizeof want, "%s/frame_00000.png", dir);
    CHECK(access(want, F_OK) != 0, "%s exists after a failed write", want);
  } else {
    /* all ranks, then rank 0 alone: the same pixels */
    snprintf(dir, sizeof dir, "%s/ranks", base);
    snprintf(ref, sizeof ref, "%s/one", base);
    run_scene("side", "material", dir, MPI_COMM_WORLD, 0);
    if (rank == 0) {
      run_scene("side", "material", ref, MPI_COMM_SELF, 0);
      check_side(dir);
      check_no_tmp(dir);
      char a[4300], b[4300];
      snprintf(a, sizeof a, "%s/frame_00000.png", dir);
      snprintf(b, sizeof b, "%s/frame_00000.png", ref);
      CHECK(same_pixels(a, b), "%s (%d ranks) and %s (1 rank) differ", a, nranks, b);
    }
    /* coloured by owner: one colour per rank (cpu: owner = rank * 256, one device) */
    snprintf(dir, sizeof dir, "%s/owner", base);
    run_scene("front", "owner", dir, MPI_COMM_WORLD, 0);
    if (rank == 0) {
      char a[4300];
      snprintf(a, sizeof a, "%s/frame_00000.png", dir);
      image im;
      if (!read_png(a, &im)) {
        int *seen = calloc((size_t)nranks + 1, sizeof *seen), other = 0;
        for (int i = 0; i < im.w * im.h; ++i) {
          const unsigned char *p = im.rgb + 3 * i;
          int hit = 0;
          for (int r = 0; r <= nranks && !hit; ++r)
            if (shade_of(p, r) > 0) ++seen[r], hit = 1;
          if (!hit && !is_color(p, preview_background) && !is_color(p, preview_outline)) ++other;
        }
        for (int r = 0; r < nranks; ++r) CHECK(seen[r] > 100, "owner: %d pixels of rank %d's colour", seen[r], r);
        CHECK(seen[nranks] == 0 && other == 0, "owner: %d pixels of a colour no rank has, %d of none", seen[nranks],
              other);
        free(seen);
        free(im.rgb);
      }
    }
  }
  if (rank == 0 && !failures_ && !getenv("DRIFT_TEST_KEEP")) { /* DRIFT_TEST_KEEP=1 keeps the pictures */
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    if (system(cmd)) {
    }
  }
  int f = failures_, all = 0;
  MPI_Allreduce(&f, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  failures_ = all;
  return finish("test_preview");
}
