/* frame_fields.c - the fields a frame may hold (see frame_fields.h). */
#include "frame_fields.h"

const char *const h5frame_field_names[H5FRAME_FIELDS] = {"position", "velocity", "id",     "material", "owner",
                                                         "logjp",    "J",        "F",      "stress",   "C"};
const int h5frame_field_columns[H5FRAME_FIELDS] = {3, 3, 1, 1, 1, 1, 1, 9, 6, 9};
const char *const h5frame_precision_names[H5FRAME_PRECISIONS] = {"float", "half"};

h5frame_layout h5frame_layout_of(unsigned fields, int precision, int n_materials, int ranks) {
  const double owners = 256.0 * (ranks > 1 ? ranks : 1);
  return (h5frame_layout){.fields = fields,
                          .precision = precision,
                          .material_bytes = n_materials <= 256 ? 1 : n_materials <= 65536 ? 2 : 4,
                          .owner_bytes = owners <= 256.0 ? 1 : owners <= 65536.0 ? 2 : 4};
}

static enum h5frame_encoding narrowed(int bytes) {
  return bytes == 1 ? H5FRAME_ENC_U8 : bytes == 2 ? H5FRAME_ENC_U16 : H5FRAME_ENC_RAW;
}

/* Half: position as a fixed point (its range is the domain's, known before the run); the fields
 * of order one or bounded by the physics' speeds (velocity, logjp, J, F) as binary16, whose
 * largest value is 65504; the stress (Pa: its scale is the materials' stiffness, routinely above
 * 65504) and C (1/s: a speed over a cell, above 65504 at 66 m/s over a 1 mm cell) with float32's
 * exponent range, so that no value a run produces overflows. */
enum h5frame_encoding h5frame_encoding_of(const h5frame_layout *l, int field) {
  if (field == H5FRAME_MATERIAL) return narrowed(l->material_bytes);
  if (field == H5FRAME_OWNER) return narrowed(l->owner_bytes);
  if (l->precision != H5FRAME_HALF) return H5FRAME_ENC_RAW;
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

unsigned h5frame_row_bytes(const h5frame_layout *l, int field) {
  unsigned value;
  switch (h5frame_encoding_of(l, field)) {
  case H5FRAME_ENC_RAW: value = field == H5FRAME_ID ? 8u : 4u; break;
  case H5FRAME_ENC_U8: value = 1u; break;
  default: value = 2u; break;
  }
  return value * (unsigned)h5frame_field_columns[field];
}

unsigned h5frame_particle_bytes(const h5frame_layout *l) {
  unsigned b = 0;
  for (int f = 0; f < H5FRAME_FIELDS; ++f)
    if (l->fields & H5FRAME_BIT(f)) b += h5frame_row_bytes(l, f);
  return b;
}

size_t h5frame_pack_bytes(unsigned fields, int precision) {
  if (!fields) fields = H5FRAME_DEFAULT_FIELDS;
  if (precision == H5FRAME_HALF) return H5FRAME_PACK_BYTES;
  return (fields & (H5FRAME_BIT(H5FRAME_MATERIAL) | H5FRAME_BIT(H5FRAME_OWNER))) ? H5FRAME_NARROW_PACK_BYTES : 0;
}
