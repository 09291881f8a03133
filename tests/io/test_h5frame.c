/* test_h5frame - one rank: a frame written by h5frame_write and read back with the HDF5 API
 * (shapes, types, every value, every attribute), empty frames, overwriting, failures that must
 * leave nothing behind and name the path, h5frame_path, and frames.xdmf checked against the
 * frame files it names (and written by a run's xdmf_list the same, byte for byte). With
 * --speed-xdmf N DIR it measures the two ways of writing frames.xdmf instead (speed_xdmf). */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <mpi.h>
#include <sys/stat.h>
#include <time.h>

#include "error.h"
#include "h5frame.h"
#include "io_check.h"
#include "xdmf.h"

enum { MAXN = 16 };

typedef struct frame_buf {
  size_t n;
  float pos[3 * MAXN], vel[3 * MAXN];
  uint64_t id[MAXN];
  int32_t mat[MAXN], own[MAXN];
  float jp[MAXN];
} frame_buf;

/* Known values that differ per particle, component and seed; ids above 2^32. */
static void fill(frame_buf *b, size_t n, int seed) {
  b->n = n;
  for (size_t i = 0; i < n; i++) {
    for (int c = 0; c < 3; c++) {
      b->pos[3 * i + c] = (float)seed + 0.5f * (float)i + 0.125f * (float)c;
      b->vel[3 * i + c] = -(float)seed - 0.25f * (float)i - 2.0f * (float)c;
    }
    b->id[i] = ((uint64_t)1 << 40) + 1000u * (uint64_t)seed + 17u * i;
    b->mat[i] = (int32_t)((i + (size_t)seed) % 3);
    b->own[i] = (int32_t)(i % 2); /* rank 0, device i % 2 */
    b->jp[i] = -0.01f * (float)(seed + 1) * (float)(i + 1);
  }
}

static h5frame_data data_of(const frame_buf *b) {
  return (h5frame_data){.n = b->n, .position = b->pos, .velocity = b->vel, .id = b->id,
                        .material = b->mat, .owner = b->own, .logjp = b->jp};
}

/* The file's type of an integer field of `bytes` bytes (h5frame_layout_of's widths). */
static hid_t int_type(int bytes) { return bytes == 1 ? H5T_STD_U8LE : bytes == 2 ? H5T_STD_U16LE : H5T_STD_I32LE; }

/* Reads DIR/frame_NNNNN.h5 and compares it with b and the metadata (written by one rank): the
 * integer fields in the fewest bytes that hold the scene's materials and one rank's owners, read
 * back as int32 through HDF5's conversion, as ParaView and drift's tools read them. */
static void check_frame(const char *dir, const h5frame_meta *meta, const frame_buf *b,
                        const char *materials) {
  const int material_bytes = meta->n_materials <= 256 ? 1 : meta->n_materials <= 65536 ? 2 : 4;
  char path[4096];
  h5frame_path(dir, meta->frame, path, sizeof path);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  CHECK(f >= 0, "cannot open %s", path);
  if (f < 0) return;
  size_t n = b->n;
  hsize_t d3[2] = {n, 3}, d1[2] = {n, 0};
  frame_buf r;
  memset(&r, 0, sizeof r);
  if (!read_dataset(f, "/particles/position", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d3, r.pos))
    CHECK(!memcmp(r.pos, b->pos, 3 * n * sizeof(float)), "%s: positions differ", path);
  if (!read_dataset(f, "/particles/velocity", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d3, r.vel))
    CHECK(!memcmp(r.vel, b->vel, 3 * n * sizeof(float)), "%s: velocities differ", path);
  if (!read_dataset(f, "/particles/id", H5T_STD_U64LE, H5T_NATIVE_UINT64, 1, d1, r.id))
    for (size_t i = 0; i < n; i++)
      CHECK(r.id[i] == b->id[i], "%s: id[%zu] = %llu, want %llu", path, i,
            (unsigned long long)r.id[i], (unsigned long long)b->id[i]);
  if (!read_dataset(f, "/particles/material", int_type(material_bytes), H5T_NATIVE_INT32, 1, d1, r.mat))
    CHECK(!memcmp(r.mat, b->mat, n * sizeof(int32_t)), "%s: materials differ", path);
  if (!read_dataset(f, "/particles/owner", H5T_STD_U8LE, H5T_NATIVE_INT32, 1, d1, r.own))
    CHECK(!memcmp(r.own, b->own, n * sizeof(int32_t)), "%s: owners differ", path);
  /* NACC snow's plastic state: written only when asked for */
  const int has = H5Lexists(f, "/particles/logjp", H5P_DEFAULT) > 0;
  CHECK(has == ((meta->fields & H5FRAME_BIT(H5FRAME_LOGJP)) != 0), "%s: /particles/logjp %s", path, has ? "written unasked" : "missing");
  if (has && !read_dataset(f, "/particles/logjp", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, d1, r.jp))
    CHECK(!memcmp(r.jp, b->jp, n * sizeof(float)), "%s: logjp differs", path);
  uint64_t cnt = 0;
  unsigned cf = 0, want = (meta->fields ? meta->fields : H5FRAME_DEFAULT_FIELDS);
  CHECK(h5frame_count(path, &cnt, &cf) == 0 && cnt == n && cf == want, "h5frame_count %s: %llu, fields 0x%x, want 0x%x",
        path, (unsigned long long)cnt, cf, want);

  double t = -1, dx = -1;
  int32_t frame = -1;
  uint64_t np = 12345;
  if (!read_attr(f, "time", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &t))
    CHECK(t == meta->time, "%s: time %g, want %g", path, t, meta->time);
  if (!read_attr(f, "frame", H5T_STD_I32LE, H5T_NATIVE_INT32, &frame))
    CHECK(frame == meta->frame, "%s: frame %d, want %d", path, (int)frame, meta->frame);
  if (!read_attr(f, "dx", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &dx))
    CHECK(dx == meta->dx, "%s: dx %g, want %g", path, dx, meta->dx);
  if (!read_attr(f, "n_particles", H5T_STD_U64LE, H5T_NATIVE_UINT64, &np))
    CHECK(np == n, "%s: n_particles %llu, want %zu", path, (unsigned long long)np, n);
  check_attr_string(f, "units", "SI: m, s, kg");
  check_attr_string(f, "materials", materials);
  check_attr_string(f, "owner_encoding", "rank*256+device");
  char names[256] = "";
  for (int k = 0; k < H5FRAME_FIELDS; k++) /* the datasets written, in h5frame.h's order */
    if (want & H5FRAME_BIT(k))
      snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? "," : "", h5frame_field_names[k]);
  check_attr_string(f, "fields", names);
  CHECK(H5Fclose(f) >= 0, "H5Fclose %s", path);
}

static void test_write_read(const char *dir) {
  static const char *const names[] = {"sand", "water", "jelly"};
  frame_buf b;
  fill(&b, 5, 1);
  h5frame_meta meta = {.frame = 7, .time = 0.125, .dx = 0.01, .n_materials = 3,
                       .material_names = names};
  h5frame_data d = data_of(&b);
  dr_clear();
  int st = h5frame_write(MPI_COMM_SELF, dir, &meta, &d);
  CHECK(st == 0, "h5frame_write: %s", dr_message());
  check_no_open_handles("after h5frame_write");
  check_frame(dir, &meta, &b, "sand,water,jelly");
  int tmp = 0;
  CHECK(count_entries(dir, &tmp) == 1 && tmp == 0, "%s should hold frame_00007.h5 only", dir);

  /* Overwriting a frame replaces it entirely (fewer particles, other values, with logjp). */
  fill(&b, 2, 9);
  d = data_of(&b);
  meta.time = 0.25;
  meta.fields = H5FRAME_DEFAULT_FIELDS | H5FRAME_BIT(H5FRAME_LOGJP);
  st = h5frame_write(MPI_COMM_WORLD, dir, &meta, &d);
  CHECK(st == 0, "h5frame_write (overwrite): %s", dr_message());
  check_frame(dir, &meta, &b, "sand,water,jelly");

  /* No particles, no materials: zero-sized datasets, NULL arrays allowed. */
  h5frame_meta m0 = {.frame = 0, .time = 0.0, .dx = 0.5, .n_materials = 0, .material_names = NULL};
  h5frame_data d0 = {.n = 0};
  fill(&b, 0, 0);
  st = h5frame_write(MPI_COMM_WORLD, dir, &m0, &d0);
  CHECK(st == 0, "h5frame_write (empty): %s", dr_message());
  check_frame(dir, &m0, &b, "");
  CHECK(count_entries(dir, &tmp) == 2 && tmp == 0, "%s should hold two frames", dir);

  /* 300 materials: material in 16 bits, values past 255 kept. */
  static char many_names[300][8];
  const char *many[300];
  for (int k = 0; k < 300; ++k) {
    snprintf(many_names[k], sizeof many_names[k], "m%d", k);
    many[k] = many_names[k];
  }
  fill(&b, MAXN, 3);
  for (size_t i = 0; i < b.n; ++i) b.mat[i] = 299 - 17 * (int32_t)i;
  d = data_of(&b);
  h5frame_meta m300 = {.frame = 8, .time = 0.5, .dx = 0.01, .n_materials = 300, .material_names = many};
  st = h5frame_write(MPI_COMM_WORLD, dir, &m300, &d);
  CHECK(st == 0, "h5frame_write (300 materials): %s", dr_message());
  static char joined[300 * 5];
  joined[0] = 0;
  for (int k = 0; k < 300; ++k) snprintf(joined + strlen(joined), sizeof joined - strlen(joined), "%sm%d", k ? "," : "", k);
  check_frame(dir, &m300, &b, joined);
}

/* A failing write returns non-zero with a message containing `want` (and the path `path_part`),
 * and leaves neither the temporary nor the final file. */
static void expect_failure(const char *dir, int frame, const h5frame_data *d, const char *want,
                           const char *path_part) {
  static const char *const names[] = {"sand"};
  h5frame_meta meta = {.frame = frame, .time = 1.0, .dx = 0.1, .n_materials = 1,
                       .material_names = names};
  dr_clear();
  int st = h5frame_write(MPI_COMM_WORLD, dir, &meta, d);
  const char *msg = dr_message();
  CHECK(st != 0, "writing frame %d into %s should fail", frame, dir);
  CHECK(strstr(msg, want) != NULL, "message \"%s\" should contain \"%s\"", msg, want);
  CHECK(strstr(msg, path_part) != NULL, "message \"%s\" should name %s", msg, path_part);
  char final[4096], tmp[4096];
  h5frame_path(dir, frame, final, sizeof final);
  char name[32];
  snprintf(name, sizeof name, ".frame_%05d.h5.tmp", frame);
  join_path(tmp, sizeof tmp, dir, name);
  struct stat sb;
  CHECK(stat(final, &sb) != 0 || S_ISDIR(sb.st_mode), "%s left behind", final);
  CHECK(stat(tmp, &sb) != 0 || S_ISDIR(sb.st_mode), "%s left behind", tmp);
  check_no_open_handles("after a failed write");
  printf("expected failure: %s\n", msg);
}

static void test_failures(const char *base) {
  frame_buf b;
  fill(&b, 3, 2);
  h5frame_data d = data_of(&b);
  char dir[4096], file[4096], blocker[4096], inside[4096];

  /* A folder below a regular file (permissions do not stop root; this does). */
  join_path(file, sizeof file, base, "somefile");
  FILE *f = fopen(file, "w");
  CHECK(f && fclose(f) == 0, "cannot create %s", file);
  join_path(dir, sizeof dir, file, "x");
  expect_failure(dir, 1, &d, "somefile/x", "somefile/x");
  /* A folder that does not exist. */
  join_path(dir, sizeof dir, base, "no_such_folder");
  expect_failure(dir, 1, &d, "no_such_folder", "no_such_folder");
  CHECK(!exists(dir), "%s was created", dir);

  /* H5Fcreate fails: a folder sits where the temporary file would go. */
  join_path(blocker, sizeof blocker, base, ".frame_00003.h5.tmp");
  CHECK(mkdir(blocker, 0700) == 0, "mkdir %s: %s", blocker, strerror(errno));
  expect_failure(base, 3, &d, ".frame_00003.h5.tmp: Is a directory (H5Fcreate failed", "frame_00003.h5: ");
  rmdir(blocker);

  /* rename fails: a non-empty folder sits under the final name; the temporary file goes. */
  join_path(blocker, sizeof blocker, base, "frame_00004.h5");
  join_path(inside, sizeof inside, blocker, "keep");
  CHECK(mkdir(blocker, 0700) == 0, "mkdir %s: %s", blocker, strerror(errno));
  f = fopen(inside, "w");
  CHECK(f && fclose(f) == 0, "cannot create %s", inside);
  expect_failure(base, 4, &d, "Is a directory", "frame_00004.h5");
  remove(inside);
  rmdir(blocker);

  /* HDF5 fails in the middle of the file (an attribute over the 64 KiB object header limit):
   * the handles opened so far are closed and the temporary file goes. */
  {
    static char huge[70000];
    memset(huge, 'm', sizeof huge - 1);
    const char *const names[] = {huge};
    h5frame_meta meta = {.frame = 6, .time = 1.0, .dx = 0.1, .n_materials = 1,
                         .material_names = names};
    char final[4096];
    h5frame_path(base, 6, final, sizeof final);
    dr_clear();
    int st = h5frame_write(MPI_COMM_WORLD, base, &meta, &d);
    CHECK(st == DR_EIO, "a 70 kB attribute should fail with DR_EIO, got %d", st);
    CHECK(strstr(dr_message(), "H5Acreate2 failed") && strstr(dr_message(), final) && !strstr(dr_message(), ".tmp"),
          "message \"%s\" should name %s, not its temporary name", dr_message(), final);
    CHECK(!exists(final), "%s left behind", final);
    check_no_open_handles("after a failure inside the file");
    printf("expected failure: %s\n", dr_message());
  }

  /* Bad arguments: a bug in the caller. */
  h5frame_data bad = d;
  bad.owner = NULL;
  expect_failure(base, 5, &bad, "NULL array", "");
  /* A material index beyond the file's 8 bits (one material): an internal error naming the field,
   * nothing left behind. */
  frame_buf wide;
  fill(&wide, 3, 2);
  wide.mat[1] = 256;
  h5frame_data too_wide = data_of(&wide);
  expect_failure(base, 5, &too_wide, "1 values of material beyond its 8-bit width", "");
  dr_clear();
  CHECK(h5frame_write(MPI_COMM_WORLD, base, NULL, &d) == DR_EINTERNAL, "NULL meta accepted");

  int tmp = 0;
  CHECK(count_entries(base, &tmp) == 1 && tmp == 0, "%s should hold somefile only", base);
}

static void test_path(void) {
  char out[64];
  h5frame_path("out/run", 42, out, sizeof out);
  CHECK(!strcmp(out, "out/run/frame_00042.h5"), "h5frame_path gave %s", out);
  h5frame_path("", 123456, out, sizeof out);
  CHECK(!strcmp(out, "frame_123456.h5"), "h5frame_path gave %s", out);
  memset(out, 'x', sizeof out);
  h5frame_path("out", 1, out, 8);
  CHECK(!strcmp(out, "out/fra") && out[8] == 'x', "h5frame_path overran its buffer: %.8s", out);
}

/* ---- frames.xdmf ---- */

/* The value of attribute `name` in the tag starting at p (up to its '>'), copied to out. */
static int tag_attr(const char *p, const char *name, char *out, size_t len) {
  const char *end = strchr(p, '>');
  char key[64];
  snprintf(key, sizeof key, " %s=\"", name);
  const char *a = strstr(p, key);
  if (!a || !end || a > end) return -1;
  a += strlen(key);
  const char *q = strchr(a, '"');
  if (!q || (size_t)(q - a) >= len) return -1;
  memcpy(out, a, (size_t)(q - a));
  out[q - a] = 0;
  return 0;
}

/* Element nesting: every <X ...> closed by </X> in order, <X .../> and <? ?>, <! > skipped. */
static int xml_balanced(const char *s) {
  char stack[32][32];
  int depth = 0;
  for (const char *p = strchr(s, '<'); p; p = strchr(p + 1, '<')) {
    if (p[1] == '?' || p[1] == '!') continue;
    const char *end = strchr(p, '>');
    if (!end) return 0;
    int closing = p[1] == '/';
    const char *name = p + 1 + closing;
    size_t l = strcspn(name, " />");
    if (l == 0 || l >= 32) return 0;
    if (closing) {
      if (depth == 0 || strncmp(stack[depth - 1], name, l) || stack[depth - 1][l]) return 0;
      depth--;
    } else if (end[-1] != '/') {
      if (depth == 32) return 0;
      memcpy(stack[depth], name, l);
      stack[depth++][l] = 0;
    }
  }
  return depth == 0;
}

/* Every DataItem of the file: HDF ones must name an existing dataset of the stated shape,
 * Binary ones a file holding enough int64 values 0, 1, 2, ... */
static void check_data_items(const char *dir, const char *s, int *n_hdf) {
  *n_hdf = 0;
  for (const char *p = strstr(s, "<DataItem"); p; p = strstr(p + 1, "<DataItem")) {
    char dims[64], format[16], ref[512], path[4096];
    CHECK(!tag_attr(p, "Dimensions", dims, sizeof dims), "DataItem without Dimensions");
    CHECK(!tag_attr(p, "Format", format, sizeof format), "DataItem without Format");
    const char *c = strchr(p, '>') + 1, *e = strstr(c, "</DataItem>");
    if (!e || (size_t)(e - c) >= sizeof ref) {
      CHECK(0, "bad DataItem content");
      continue;
    }
    memcpy(ref, c, (size_t)(e - c));
    ref[e - c] = 0;
    unsigned long long rows = 0, cols = 1;
    int k = sscanf(dims, "%llu %llu", &rows, &cols);
    CHECK(k >= 1, "bad Dimensions \"%s\"", dims);
    if (!strcmp(format, "HDF")) {
      (*n_hdf)++;
      char *colon = strchr(ref, ':');
      CHECK(colon && ref[0] != '/', "HDF reference \"%s\" is not relative file:/dataset", ref);
      if (!colon) continue;
      *colon = 0;
      join_path(path, sizeof path, dir, ref);
      hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
      CHECK(f >= 0, "%s names %s, which does not open", "frames.xdmf", path);
      if (f < 0) continue;
      hid_t ds = H5Dopen2(f, colon + 1, H5P_DEFAULT);
      CHECK(ds >= 0, "%s has no dataset %s", path, colon + 1);
      if (ds >= 0) {
        hid_t sp = H5Dget_space(ds);
        hsize_t got[2] = {0, 1};
        int r = H5Sget_simple_extent_dims(sp, got, NULL);
        CHECK(r == k && got[0] == rows && (k == 1 || got[1] == cols),
              "%s:%s has another shape than \"%s\"", path, colon + 1, dims);
        H5Sclose(sp);
        H5Dclose(ds);
      }
      H5Fclose(f);
    } else {
      CHECK(!strcmp(format, "Binary"), "unexpected Format %s", format);
      join_path(path, sizeof path, dir, ref);
      FILE *f = fopen(path, "rb");
      CHECK(f != NULL, "frames.xdmf names %s, which does not open", path);
      if (!f) continue;
      for (unsigned long long i = 0; i < rows; i++) {
        unsigned char v[8];
        uint64_t x = 0;
        if (fread(v, 1, 8, f) != 8) {
          CHECK(0, "%s holds fewer than %llu values", path, rows);
          break;
        }
        for (int j = 0; j < 8; j++) x |= (uint64_t)v[j] << (8 * j);
        if (x != i) {
          CHECK(0, "%s: value %llu is %llu", path, i, (unsigned long long)x);
          break;
        }
      }
      fclose(f);
    }
  }
}

static void test_xdmf(const char *dir) {
  static const char *const names[] = {"sand"};
  const xdmf_frame frames[3] = {{.frame = 0, .time = 0.0, .n = 5},
                                {.frame = 5, .time = 0.1, .n = 0},
                                {.frame = 10, .time = 1.0 / 3.0, .n = 3,
                                 .fields = H5FRAME_DEFAULT_FIELDS | H5FRAME_BIT(H5FRAME_LOGJP)}};
  frame_buf b;
  for (int k = 0; k < 3; k++) {
    fill(&b, (size_t)frames[k].n, k);
    h5frame_meta meta = {.frame = frames[k].frame, .time = frames[k].time, .dx = 0.1,
                         .n_materials = 1, .material_names = names, .fields = frames[k].fields};
    h5frame_data d = data_of(&b);
    CHECK(h5frame_write(MPI_COMM_WORLD, dir, &meta, &d) == 0, "h5frame_write: %s", dr_message());
    CHECK(xdmf_write(dir, frames, k + 1) == 0, "xdmf_write: %s", dr_message());
  }

  char path[4096];
  join_path(path, sizeof path, dir, "frames.xdmf");
  FILE *f = fopen(path, "rb");
  CHECK(f != NULL, "cannot open %s", path);
  if (!f) return;
  static char s[1 << 16];
  size_t len = fread(s, 1, sizeof s - 1, f);
  s[len] = 0;
  fclose(f);

  CHECK(xml_balanced(s), "%s is not well nested", path);
  CHECK(strstr(s, "CollectionType=\"Temporal\"") != NULL, "no temporal collection");
  const char *p = s;
  int grids = 0;
  while ((p = strstr(p, "<Grid Name=\"frame_"))) {
    char want[64], time[64] = "", count[32] = "";
    CHECK(grids < 3, "more than 3 frame grids");
    if (grids >= 3) break;
    const xdmf_frame *fr = &frames[grids];
    snprintf(want, sizeof want, "<Grid Name=\"frame_%05d\"", fr->frame);
    CHECK(!strncmp(p, want, strlen(want)), "grid %d should be frame %d", grids, fr->frame);
    const char *next = strstr(p + 1, "<Grid Name=\"frame_");
    const char *t = strstr(p, "<Time ");
    CHECK(t && (!next || t < next) && !tag_attr(t, "Value", time, sizeof time),
          "frame %d has no Time", fr->frame);
    CHECK(strtod(time, NULL) == fr->time, "frame %d: Time %s, want %.17g", fr->frame, time,
          fr->time);
    const char *topo = strstr(p, "<Topology ");
    CHECK(topo && (!next || topo < next) &&
              !tag_attr(topo, "NumberOfElements", count, sizeof count),
          "frame %d has no Topology", fr->frame);
    CHECK(strtoull(count, NULL, 10) == fr->n, "frame %d: %s elements, want %llu", fr->frame,
          count, (unsigned long long)fr->n);
    CHECK(strstr(topo, "TopologyType=\"Polyvertex\"") == topo + strlen("<Topology "),
          "frame %d is not Polyvertex", fr->frame);
    snprintf(want, sizeof want, ">frame_%05d.h5:/particles/position<", fr->frame);
    const char *pos = strstr(p, want);
    CHECK(pos && (!next || pos < next), "frame %d: no geometry from %s", fr->frame, want);
    static const char *const attrs[] = {"velocity", "id", "material", "owner"};
    for (int a = 0; a < 4; a++) {
      snprintf(want, sizeof want, "<Attribute Name=\"%s\"", attrs[a]);
      const char *q = strstr(p, want);
      CHECK(q && (!next || q < next), "frame %d: no attribute %s", fr->frame, attrs[a]);
    }
    const char *jp = strstr(p, "<Attribute Name=\"logjp\"");
    const int want_jp = (fr->fields & H5FRAME_BIT(H5FRAME_LOGJP)) != 0;
    CHECK((jp && (!next || jp < next)) == want_jp, "frame %d: attribute logjp %s", fr->frame,
          want_jp ? "missing" : "listed for a frame without it");
    grids++;
    p++;
  }
  CHECK(grids == 3, "%d frame grids, want 3", grids);
  int n_hdf = 0;
  check_data_items(dir, s, &n_hdf);
  CHECK(n_hdf == 3 * 5 + 1, "%d HDF data items, want 16 (logjp in the last frame)", n_hdf);

  /* The vertex file grows with the largest frame and never shrinks. */
  struct stat sb;
  join_path(path, sizeof path, dir, "frames_vertices.bin");
  CHECK(stat(path, &sb) == 0 && sb.st_size == 5 * 8, "%s should hold 5 values", path);
  const xdmf_frame big[2] = {{.frame = 0, .time = 0, .n = 5}, {.frame = 1, .time = 1, .n = 9}};
  CHECK(xdmf_write(dir, big, 2) == 0, "xdmf_write: %s", dr_message());
  CHECK(stat(path, &sb) == 0 && sb.st_size == 9 * 8, "%s should hold 9 values", path);
  CHECK(xdmf_write(dir, big, 1) == 0, "xdmf_write: %s", dr_message());
  CHECK(stat(path, &sb) == 0 && sb.st_size == 9 * 8, "%s should still hold 9 values", path);
  /* No frames at all is still a valid (empty) collection. */
  CHECK(xdmf_write(dir, NULL, 0) == 0, "xdmf_write (no frames): %s", dr_message());

  int tmp = 0;
  CHECK(count_entries(dir, &tmp) == 3 + 2 && tmp == 0, "%s: 3 frames, xdmf, vertices", dir);

  /* A folder that cannot be written: the message names the file, nothing is left. */
  char bad[4096];
  join_path(bad, sizeof bad, dir, "frame_00000.h5/sub");
  dr_clear();
  CHECK(xdmf_write(bad, frames, 3) != 0, "xdmf_write into %s should fail", bad);
  CHECK(strstr(dr_message(), bad) != NULL, "message \"%s\" should name %s", dr_message(), bad);
  printf("expected failure: %s\n", dr_message());
}

/* The whole of file path into a malloc'd buffer (*len bytes); NULL when it cannot be read. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t cap = 0;
  *len = 0;
  for (;;) {
    if (*len == cap) {
      char *b = realloc(buf, cap = cap ? 2 * cap : 65536);
      if (!b) break;
      buf = b;
    }
    const size_t got = fread(buf + *len, 1, cap - *len, f);
    *len += got;
    if (got == 0) break;
  }
  fclose(f);
  return buf;
}

/* xdmf_list_write, as a run calls it after every frame (frames appended; after a resume a frame
 * written again and the list cut after it; other fields, times and counts), writes the file
 * xdmf_write writes for the same list, byte for byte. */
static void test_xdmf_list(const char *base) {
  char a[4096], b[4096], pa[4200], pb[4200];
  join_path(a, sizeof a, base, "list");
  join_path(b, sizeof b, base, "whole");
  CHECK(mkdir(a, 0755) == 0 && mkdir(b, 0755) == 0, "mkdir %s, %s", a, b);
  join_path(pa, sizeof pa, a, "frames.xdmf");
  join_path(pb, sizeof pb, b, "frames.xdmf");
  enum { N = 40 };
  xdmf_frame frames[N];
  for (int k = 0; k < N; ++k)
    frames[k] = (xdmf_frame){.frame = 2 * k, .time = k / 48.0, .n = (uint64_t)(1000 + 37 * k),
                             .fields = k % 3 ? 0 : H5FRAME_DEFAULT_FIELDS | H5FRAME_BIT(H5FRAME_F)};
  /* the writes' lists: n frames each, the frame at `changed` (if >= 0) written again first */
  const struct {
    int n, changed;
  } writes[] = {{1, -1}, {2, -1}, {3, -1}, {10, -1}, {20, -1}, {8, 7}, {9, -1}, {30, 4}, {40, -1}, {0, -1}, {5, -1}};
  xdmf_list l = {0};
  for (size_t w = 0; w < sizeof writes / sizeof *writes; ++w) {
    if (writes[w].changed >= 0) { /* a resume: that frame written again with other particles */
      frames[writes[w].changed].n += 11;
      frames[writes[w].changed].time += 1e-3;
    }
    CHECK(xdmf_list_write(&l, a, frames, writes[w].n) == 0, "xdmf_list_write (%d frames): %s", writes[w].n,
          dr_message());
    CHECK(xdmf_write(b, frames, writes[w].n) == 0, "xdmf_write (%d frames): %s", writes[w].n, dr_message());
    size_t la = 0, lb = 0;
    char *sa = slurp(pa, &la), *sb = slurp(pb, &lb);
    CHECK(sa && sb && la == lb && !memcmp(sa, sb, la), "write %zu (%d frames): the list's file differs from the "
          "whole one (%zu against %zu bytes)", w, writes[w].n, la, lb);
    CHECK(l.n == writes[w].n, "write %zu: the list holds %d entries, want %d", w, l.n, writes[w].n);
    free(sa), free(sb);
  }
  xdmf_list_free(&l);
  CHECK(l.text == NULL && l.n == 0, "xdmf_list_free left the list");
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* --speed-xdmf N DIR: frames.xdmf written into DIR after each of N frames of the default fields, as
 * a run writes it, by xdmf_write (every entry formatted again) and by a run's xdmf_list (each
 * entry's text kept): each one's write at 100, 1000 and N frames (ms) and all N writes (s).
 * docs/performance.md, Decisions, Output. */
static int speed_xdmf(int n, const char *dir) {
  xdmf_frame *frames = calloc((size_t)n, sizeof *frames);
  if (!frames || n < 1) return 1;
  for (int k = 0; k < n; ++k) frames[k] = (xdmf_frame){.frame = k, .time = k / 24.0, .n = 3114752};
  const int at[3] = {100, 1000, n};
  for (int way = 0; way < 2; ++way) {
    xdmf_list l = {0};
    double ms[3] = {0, 0, 0}, total = 0.0;
    for (int k = 1; k <= n; ++k) {
      const double t0 = now_s();
      const int rc = way ? xdmf_list_write(&l, dir, frames, k) : xdmf_write(dir, frames, k);
      const double t = now_s() - t0;
      if (rc) {
        fprintf(stderr, "--speed-xdmf: %s\n", dr_message());
        return 1;
      }
      total += t;
      for (int i = 0; i < 3; ++i)
        if (k == at[i]) ms[i] = 1e3 * t;
    }
    xdmf_list_free(&l);
    printf("%-28s the write at 100 / 1000 / %d frames %.2f / %.2f / %.2f ms, all %d writes %.1f s\n",
           way ? "xdmf_list_write (kept text)" : "xdmf_write (formatted)", n, ms[0], ms[1], ms[2], n, total);
  }
  free(frames);
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (argc == 4 && !strcmp(argv[1], "--speed-xdmf")) {
    const int rc = speed_xdmf(atoi(argv[2]), argv[3]);
    MPI_Finalize();
    return rc;
  }
  char base[] = "/tmp/drift_test_h5frame_XXXXXX";
  if (!mkdtemp(base)) {
    perror("mkdtemp");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  char d1[4096], d2[4096], d3[4096];
  join_path(d1, sizeof d1, base, "write");
  join_path(d2, sizeof d2, base, "fail");
  join_path(d3, sizeof d3, base, "xdmf");
  CHECK(mkdir(d1, 0755) == 0 && mkdir(d2, 0755) == 0 && mkdir(d3, 0755) == 0, "mkdir");

  test_path();
  test_write_read(d1);
  test_failures(d2);
  test_xdmf(d3);
  test_xdmf_list(base);

  if (failures_ == 0) rm_rf(base);
  else fprintf(stderr, "files kept in %s\n", base);
  printf("test_h5frame: %s (%d failed checks)\n", failures_ ? "FAILED" : "passed", failures_);
  MPI_Finalize();
  return failures_ ? 1 : 0;
}
