/* frame_fields.c - the fields a frame may hold (see frame_fields.h). */
#include "frame_fields.h"

const char *const h5frame_field_names[H5FRAME_FIELDS] = {"position", "velocity", "id",     "material", "owner",
                                                         "logjp",    "J",        "F",      "stress",   "C"};
const int h5frame_field_columns[H5FRAME_FIELDS] = {3, 3, 1, 1, 1, 1, 1, 9, 6, 9};
const char *const h5frame_precision_names[H5FRAME_PRECISIONS] = {"float", "half"};

/* Half: position as a fixed point (its range is the domain's, known before the run); the fields
 * of order one or bounded by the physics' speeds (velocity, logjp, J, F) as binary16, whose
 * largest value is 65504; the stress (Pa: its scale is the materials' stiffness, routinely above
 * 65504) and C (1/s: a speed over a cell, above 65504 at 66 m/s over a 1 mm cell) with float32's
 * exponent range, so that no value a run produces overflows. */
enum h5frame_encoding h5frame_encoding_of(int field, int precision) {
  if (precision != H5FRAME_HALF) return H5FRAME_ENC_RAW;
  switch (field) {
  case H5FRAME_POSITION: return H5FRAME_ENC_FIXED;
  case H5FRAME_VELOCITY:
  case H5FRAME_LOGJP:
  case H5FRAME_J:
  case H5FRAME_F: return H5FRAME_ENC_HALF;
  case H5FRAME_STRESS:
  case H5FRAME_C: return H5FRAME_ENC_BF16;
  default: return H5FRAME_ENC_RAW;
  }
}

unsigned h5frame_row_bytes(int field, int precision) {
  const unsigned value = h5frame_encoding_of(field, precision) != H5FRAME_ENC_RAW ? 2u : field == H5FRAME_ID ? 8u : 4u;
  return value * (unsigned)h5frame_field_columns[field];
}

unsigned h5frame_particle_bytes(unsigned fields, int precision) {
  unsigned b = 0;
  for (int f = 0; f < H5FRAME_FIELDS; ++f)
    if (fields & H5FRAME_BIT(f)) b += h5frame_row_bytes(f, precision);
  return b;
}
