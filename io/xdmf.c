/* xdmf.c - DIR/frames.xdmf, a temporal collection of the frames' HDF5 files (see xdmf.h).
 *
 * XDMF 3, read by ParaView's default reader for .xdmf (Xdmf3ReaderS, also Xdmf3ReaderT). Each
 * frame is a Uniform grid:
 *   - Time: the frame's time in s;
 *   - Topology: Polyvertex, one vertex cell per particle. The Xdmf3 readers make cells only from
 *     an explicit connectivity array (without one a grid has points but no cells, and ParaView's
 *     default Surface and Points representations draw nothing), so every frame refers to the
 *     first n values of DIR/frames_vertices.bin: int64 little-endian 0, 1, ..., M-1, where M is
 *     the largest particle count so far. It is written once and rewritten only when M grows;
 *   - Geometry XYZ: frame_NNNNN.h5:/particles/position (relative paths: the folder can move);
 *   - a node attribute for each dataset of the frame but position (xdmf_frame.fields, in
 *     h5frame.h's order), of XDMF 3's AttributeType: velocity Vector (Float 4); id, material and
 *     owner Scalar (Int 8, Int 4, Int 4); logjp and J Scalar (Float 4); F and C Tensor (9 values
 *     a particle, row-major); stress Matrix (the 6 values of a symmetric tensor, xx yy zz xy yz
 *     zx, VTK's order for symmetric tensors, which ParaView names XX YY ZZ XY YZ XZ). Not Tensor6:
 *     XDMF's Tensor6 is xx xy xz yy yz zz, the order in which the legacy "XDMF Reader" expands
 *     it into 9 components, while the Xdmf3 readers pass the 6 values on as VTK's; a Matrix of 6
 *     columns reaches every reader as the 6 values written (tests/io pvpython_fields, all three
 *     readers against the file's values). The id is declared Int 8 although it is stored as
 *     uint64: both ParaView readers read "UInt 8" as 32-bit and would cut ids at 2^32, while ids
 *     never reach 2^63. material and owner are declared Int 4 whatever their width in the file
 *     (8 or 16 bits where the run's values fit: h5frame_layout_of), read and widened by HDF5 the
 *     way 16-bit floats are (checked: tests/io pvpython_open --int-mod). Every floating dataset is
 *     declared Float 4 at either output.precision:
 *     the readers read through the HDF5 library into the declared type, which converts a 16-bit
 *     dataset (binary16, bf16 and the positions' fixed point are HDF5 float types) to float32;
 *     checked with ParaView 5.11's Xdmf3 reader (tests/io pvpython_half). XDMF has no 16-bit
 *     Float, and its Function items, which ParaView does not evaluate, are not needed.
 * A frame without particles keeps the same items with zero sizes (the HDF5 datasets exist with
 * zero rows); the Xdmf3 readers give an empty grid for it. (The legacy "XDMF Reader" of
 * ParaView, Xdmf 2, reads the other frames but reports an error for an empty one.)
 * Every file is written under a temporary name in DIR and renamed when complete, the vertex file
 * before frames.xdmf, so frames.xdmf never refers to anything incomplete. */
#define _POSIX_C_SOURCE 200809L /* stat, unlink, open_memstream */
#include "xdmf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "h5frame.h"

enum { XDMF_PATH_MAX = 4096 };

#define VERTICES_FILE "frames_vertices.bin"

/* DIR/NAME, or NAME where DIR is "". */
static int join_path(char *out, const char *dir, const char *name) {
  int k = snprintf(out, XDMF_PATH_MAX, "%s%s%s", dir, dir[0] ? "/" : "", name);
  if (k < 0 || k >= XDMF_PATH_MAX)
    return dr_fail(DR_EINPUT, "output folder path too long (%zu characters): %.64s...",
                   strlen(dir), dir);
  return 0;
}

/* Closes f and renames tmp to final; on any failure (including an earlier write error recorded
 * in ferror(f)) removes tmp and records a message naming the file. */
static int finish(FILE *f, const char *tmp, const char *final) {
  int err = ferror(f) ? (errno ? errno : EIO) : 0;
  const char *call = "fprintf";
  if (!err && fflush(f) != 0) {
    err = errno;
    call = "fflush";
  }
  if (fclose(f) != 0 && !err) {
    err = errno;
    call = "fclose";
  }
  if (err) {
    (void)unlink(tmp);
    return dr_fail_at(DR_EIO, __FILE__, __LINE__, call, "cannot write %s: %s", final, strerror(err));
  }
  if (rename(tmp, final) != 0) {
    int e = errno;
    (void)unlink(tmp);
    return dr_fail_at(DR_EIO, __FILE__, __LINE__, "rename", "cannot write %s: %s (renaming %s)", final,
                      strerror(e), tmp);
  }
  return 0;
}

/* Makes sure DIR/frames_vertices.bin holds at least m values. */
static int write_vertices(const char *dir, uint64_t m) {
  char tmp[XDMF_PATH_MAX], final[XDMF_PATH_MAX];
  DR_TRY(join_path(tmp, dir, "." VERTICES_FILE ".tmp"));
  DR_TRY(join_path(final, dir, VERTICES_FILE));
  struct stat sb;
  if (stat(final, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size / 8 >= m) return 0;

  FILE *f = fopen(tmp, "wb");
  if (!f) return dr_fail_at(DR_EIO, __FILE__, __LINE__, "fopen", "cannot write %s: %s", final, strerror(errno));
  errno = 0;
  enum { CHUNK = 8192 };
  static unsigned char buf[CHUNK * 8];
  for (uint64_t i = 0; i < m && !ferror(f);) {
    size_t k = 0;
    for (; k < CHUNK && i < m; k++, i++)
      for (int b = 0; b < 8; b++) buf[8 * k + (size_t)b] = (unsigned char)(i >> (8 * b));
    if (fwrite(buf, 8, k, f) != k) break; /* ferror(f) is set */
  }
  return finish(f, tmp, final);
}

/* A data item of n rows of `cols` values (cols = 1: a 1-D array). */
static void data_item(FILE *f, uint64_t n, int cols, const char *number_type, int precision,
                      const char *format, const char *where) {
  char dims[64];
  if (cols > 1)
    snprintf(dims, sizeof dims, "%" PRIu64 " %d", n, cols);
  else
    snprintf(dims, sizeof dims, "%" PRIu64, n);
  fprintf(f,
          "          <DataItem Dimensions=\"%s\" NumberType=\"%s\" Precision=\"%d\" %s>%s"
          "</DataItem>\n",
          dims, number_type, precision, format, where);
}

static void hdf_item(FILE *f, const xdmf_frame *fr, int cols, const char *number_type,
                     int precision, const char *dataset) {
  char where[128];
  snprintf(where, sizeof where, "frame_%05d.h5:/particles/%s", fr->frame, dataset);
  data_item(f, fr->n, cols, number_type, precision, "Format=\"HDF\"", where);
}

static void attribute(FILE *f, const xdmf_frame *fr, const char *name, const char *type, int cols,
                      const char *number_type, int precision) {
  fprintf(f, "        <Attribute Name=\"%s\" AttributeType=\"%s\" Center=\"Node\">\n", name, type);
  hdf_item(f, fr, cols, number_type, precision, name);
  fprintf(f, "        </Attribute>\n");
}

static const char XDMF_HEAD[] = "<?xml version=\"1.0\" ?>\n"
                                "<!DOCTYPE Xdmf SYSTEM \"Xdmf.dtd\" []>\n"
                                "<Xdmf Version=\"3.0\">\n"
                                "  <Domain>\n"
                                "    <Grid Name=\"frames\" GridType=\"Collection\" CollectionType=\"Temporal\">\n";
static const char XDMF_TAIL[] = "    </Grid>\n"
                                "  </Domain>\n"
                                "</Xdmf>\n";

/* One frame's Grid. */
static void write_entry(FILE *f, const xdmf_frame *fr) {
  fprintf(f, "      <Grid Name=\"frame_%05d\" GridType=\"Uniform\">\n", fr->frame);
  fprintf(f, "        <Time Value=\"%.17g\"/>\n", fr->time);
  fprintf(f,
          "        <Topology TopologyType=\"Polyvertex\" NumberOfElements=\"%" PRIu64
          "\" NodesPerElement=\"1\">\n",
          fr->n);
  data_item(f, fr->n, 1, "Int", 8, "Format=\"Binary\" Endian=\"Little\"", VERTICES_FILE);
  fprintf(f, "        </Topology>\n");
  fprintf(f, "        <Geometry GeometryType=\"XYZ\">\n");
  hdf_item(f, fr, 3, "Float", 4, "position");
  fprintf(f, "        </Geometry>\n");
  const unsigned fields = fr->fields ? fr->fields : H5FRAME_DEFAULT_FIELDS;
  for (int k = H5FRAME_POSITION + 1; k < H5FRAME_FIELDS; ++k)
    if (fields & H5FRAME_BIT(k)) {
      const int cols = h5frame_field_columns[k];
      const int integer = k == H5FRAME_ID || k == H5FRAME_MATERIAL || k == H5FRAME_OWNER;
      const char *type = k == H5FRAME_STRESS ? "Matrix" : cols == 9 ? "Tensor" : cols == 3 ? "Vector" : "Scalar";
      attribute(f, fr, h5frame_field_names[k], type, cols, integer ? "Int" : "Float", k == H5FRAME_ID ? 8 : 4);
    }
  fprintf(f, "      </Grid>\n");
}

static int same_frame(const xdmf_frame *a, const xdmf_frame *b) {
  return a->frame == b->frame && a->time == b->time && a->n == b->n && a->fields == b->fields;
}

/* l's entries made those of frames[0 .. n): the first that differs and every one after it
 * formatted again, the ones before kept. */
static int update_list(xdmf_list *l, const xdmf_frame *frames, int n) {
  int keep = 0;
  while (keep < l->n && keep < n && same_frame(&l->frames[keep], &frames[keep])) ++keep;
  l->n = keep;
  l->len = keep > 0 ? l->ends[keep - 1] : 0;
  if (n > l->cap_n) {
    const int cap = n > 2 * l->cap_n ? n : 2 * l->cap_n;
    xdmf_frame *fr = realloc(l->frames, sizeof *fr * (size_t)cap);
    if (fr) l->frames = fr;
    size_t *ends = fr ? realloc(l->ends, sizeof *ends * (size_t)cap) : NULL;
    if (ends) l->ends = ends;
    if (!fr || !ends) return dr_fail(DR_ENOMEM, "out of host memory for the list of %d frames of frames.xdmf", n);
    l->cap_n = cap;
  }
  for (int i = keep; i < n; ++i) {
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) return dr_fail(DR_ENOMEM, "out of host memory for frames.xdmf's entry of frame %d", frames[i].frame);
    write_entry(m, &frames[i]);
    const int bad = ferror(m);
    if (fclose(m) != 0 || bad) {
      free(text);
      return dr_fail(DR_ENOMEM, "out of host memory for frames.xdmf's entry of frame %d", frames[i].frame);
    }
    if (l->len + len > l->cap) {
      const size_t cap = l->len + len > 2 * l->cap ? l->len + len : 2 * l->cap;
      char *t = realloc(l->text, cap);
      if (!t) {
        free(text);
        return dr_fail(DR_ENOMEM, "out of host memory for frames.xdmf's %d entries", n);
      }
      l->text = t;
      l->cap = cap;
    }
    memcpy(l->text + l->len, text, len);
    free(text);
    l->len += len;
    l->frames[i] = frames[i];
    l->ends[i] = l->len;
    l->n = i + 1;
  }
  return DR_OK;
}

static int check_frames(const char *dir, const xdmf_frame *frames, int n_frames, uint64_t *m) {
  if (!dir || n_frames < 0 || (n_frames > 0 && !frames))
    return dr_fail(DR_EINTERNAL, "xdmf_write: bad arguments (%d frames)", n_frames);
  *m = 0;
  for (int i = 0; i < n_frames; i++) {
    if (frames[i].frame < 0)
      return dr_fail(DR_EINTERNAL, "xdmf_write: negative frame number %d", frames[i].frame);
    if (frames[i].n > *m) *m = frames[i].n;
  }
  return DR_OK;
}

int xdmf_list_write(xdmf_list *l, const char *dir, const xdmf_frame *frames, int n_frames) {
  uint64_t m = 0;
  DR_TRY(check_frames(dir, frames, n_frames, &m));
  DR_TRY(update_list(l, frames, n_frames));
  DR_TRY(write_vertices(dir, m));

  char tmp[XDMF_PATH_MAX], final[XDMF_PATH_MAX];
  DR_TRY(join_path(tmp, dir, ".frames.xdmf.tmp"));
  DR_TRY(join_path(final, dir, "frames.xdmf"));
  FILE *f = fopen(tmp, "w");
  if (!f) return dr_fail_at(DR_EIO, __FILE__, __LINE__, "fopen", "cannot write %s: %s", final, strerror(errno));
  errno = 0;
  /* fwrite's errors stick in ferror(f), checked by finish() */
  fwrite(XDMF_HEAD, 1, sizeof XDMF_HEAD - 1, f);
  if (l->len > 0) fwrite(l->text, 1, l->len, f);
  fwrite(XDMF_TAIL, 1, sizeof XDMF_TAIL - 1, f);
  return finish(f, tmp, final);
}

void xdmf_list_free(xdmf_list *l) {
  free(l->text);
  free(l->ends);
  free(l->frames);
  memset(l, 0, sizeof *l);
}

int xdmf_write(const char *dir, const xdmf_frame *frames, int n_frames) {
  xdmf_list l = {0};
  const int rc = xdmf_list_write(&l, dir, frames, n_frames);
  xdmf_list_free(&l);
  return rc;
}
