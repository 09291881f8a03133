/* xdmf.c - DIR/frames.xdmf, a temporal collection of the frames' HDF5 files (see xdmf.h).
 *
 * XDMF 3 (ParaView's default reader for .xdmf, "XDMF Reader" / Xdmf3ReaderS). Each frame is a
 * Uniform grid: a Polyvertex topology with one vertex cell per particle, XYZ geometry from
 * frame_NNNNN.h5:/particles/position and node attributes velocity, id, material and owner.
 * A frame with no particles gets an empty grid with inline (XML) empty data items and no
 * references to its HDF5 file, whose zero-sized datasets readers handle unevenly.
 * Written to DIR/.frames.xdmf.tmp, then renamed to DIR/frames.xdmf. */
#include "xdmf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "error.h"

enum { XDMF_PATH_MAX = 4096 };

/* Data item of `n` rows of `cols` values (cols = 1: a 1-D array) read from the frame file. */
static void data_item(FILE *f, const char *indent, uint64_t n, int cols, const char *number_type,
                      int precision, int frame, const char *dataset) {
  char dims[64];
  if (cols > 1)
    snprintf(dims, sizeof dims, "%" PRIu64 " %d", n, cols);
  else
    snprintf(dims, sizeof dims, "%" PRIu64, n);
  if (n == 0) {
    fprintf(f, "%s<DataItem Dimensions=\"%s\" NumberType=\"%s\" Precision=\"%d\" Format=\"XML\">"
               "</DataItem>\n",
            indent, dims, number_type, precision);
    return;
  }
  fprintf(f,
          "%s<DataItem Dimensions=\"%s\" NumberType=\"%s\" Precision=\"%d\" Format=\"HDF\">"
          "frame_%05d.h5:/particles/%s</DataItem>\n",
          indent, dims, number_type, precision, frame, dataset);
}

static void attribute(FILE *f, const xdmf_frame *fr, const char *name, const char *type, int cols,
                      const char *number_type, int precision) {
  fprintf(f, "        <Attribute Name=\"%s\" AttributeType=\"%s\" Center=\"Node\">\n", name, type);
  data_item(f, "          ", fr->n, cols, number_type, precision, fr->frame, name);
  fprintf(f, "        </Attribute>\n");
}

static void write_body(FILE *f, const xdmf_frame *frames, int n_frames) {
  fprintf(f, "<?xml version=\"1.0\" ?>\n"
             "<!DOCTYPE Xdmf SYSTEM \"Xdmf.dtd\" []>\n"
             "<Xdmf Version=\"3.0\">\n"
             "  <Domain>\n"
             "    <Grid Name=\"frames\" GridType=\"Collection\" CollectionType=\"Temporal\">\n");
  for (int i = 0; i < n_frames; i++) {
    const xdmf_frame *fr = &frames[i];
    fprintf(f, "      <Grid Name=\"frame_%05d\" GridType=\"Uniform\">\n", fr->frame);
    fprintf(f, "        <Time Value=\"%.17g\"/>\n", fr->time);
    fprintf(f,
            "        <Topology TopologyType=\"Polyvertex\" NumberOfElements=\"%" PRIu64
            "\" NodesPerElement=\"1\"/>\n",
            fr->n);
    fprintf(f, "        <Geometry GeometryType=\"XYZ\">\n");
    data_item(f, "          ", fr->n, 3, "Float", 4, fr->frame, "position");
    fprintf(f, "        </Geometry>\n");
    attribute(f, fr, "velocity", "Vector", 3, "Float", 4);
    attribute(f, fr, "id", "Scalar", 1, "UInt", 8);
    attribute(f, fr, "material", "Scalar", 1, "Int", 4);
    attribute(f, fr, "owner", "Scalar", 1, "Int", 4);
    fprintf(f, "      </Grid>\n");
  }
  fprintf(f, "    </Grid>\n"
             "  </Domain>\n"
             "</Xdmf>\n");
}

int xdmf_write(const char *dir, const xdmf_frame *frames, int n_frames) {
  if (!dir || n_frames < 0 || (n_frames > 0 && !frames))
    return dr_fail(DR_EINTERNAL, "xdmf_write: bad arguments (%d frames)", n_frames);
  for (int i = 0; i < n_frames; i++)
    if (frames[i].frame < 0)
      return dr_fail(DR_EINTERNAL, "xdmf_write: negative frame number %d", frames[i].frame);

  char tmp[XDMF_PATH_MAX], final[XDMF_PATH_MAX];
  const char *sep = dir[0] ? "/" : "";
  int k1 = snprintf(tmp, sizeof tmp, "%s%s.frames.xdmf.tmp", dir, sep);
  int k2 = snprintf(final, sizeof final, "%s%sframes.xdmf", dir, sep);
  if (k1 < 0 || k1 >= (int)sizeof tmp || k2 < 0 || k2 >= (int)sizeof final)
    return dr_fail(DR_EINPUT, "output folder path too long (%zu characters): %.64s...",
                   strlen(dir), dir);

  FILE *f = fopen(tmp, "w");
  if (!f) return dr_fail_at(DR_EIO, __FILE__, __LINE__, "fopen", "%s: %s", tmp, strerror(errno));
  errno = 0;
  write_body(f, frames, n_frames);
  /* fprintf's errors are sticky in ferror(); a full disk often shows only at fflush/fclose. */
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
    return dr_fail_at(DR_EIO, __FILE__, __LINE__, call, "writing %s: %s", tmp, strerror(err));
  }
  if (rename(tmp, final) != 0) {
    int e = errno;
    (void)unlink(tmp);
    return dr_fail_at(DR_EIO, __FILE__, __LINE__, "rename", "%s -> %s: %s", tmp, final,
                      strerror(e));
  }
  return 0;
}
