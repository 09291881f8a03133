/* frame_fields.h - the fields a frame may hold (output.fields): their order, bits, dataset names,
 * values per particle and their encoding in the file at each precision (output.precision). Apart from io/h5frame.h, which writes them, so that the scene parser
 * (and the scene fuzzer's build, which has neither HDF5 nor MPI) can name them. */
#ifndef DRIFT_FRAME_FIELDS_H
#define DRIFT_FRAME_FIELDS_H

#include <stddef.h>

/* The datasets a frame may hold, in the order they are written; bit H5FRAME_BIT(f) of
 * h5frame_meta.fields asks for field f. */
enum h5frame_field {
  H5FRAME_POSITION, H5FRAME_VELOCITY, H5FRAME_ID, H5FRAME_MATERIAL, H5FRAME_OWNER, H5FRAME_LOGJP,
  H5FRAME_J, H5FRAME_F, H5FRAME_STRESS, H5FRAME_C, H5FRAME_FIELDS
};
#define H5FRAME_BIT(f) (1u << (f))
/* Every frame's fields unless the scene says otherwise (logjp is added where there is NACC snow). */
#define H5FRAME_DEFAULT_FIELDS                                                                    \
  (H5FRAME_BIT(H5FRAME_POSITION) | H5FRAME_BIT(H5FRAME_VELOCITY) | H5FRAME_BIT(H5FRAME_ID) |      \
   H5FRAME_BIT(H5FRAME_MATERIAL) | H5FRAME_BIT(H5FRAME_OWNER))
/* The fields' dataset names ("position", ..., "J", "F", "stress", "C") and values per particle. */
extern const char *const h5frame_field_names[H5FRAME_FIELDS];
extern const int h5frame_field_columns[H5FRAME_FIELDS];

/* output.precision: how a frame stores its floating fields. FLOAT: float32, as in memory. HALF:
 * 16 bits a value, each field in the encoding h5frame_encoding gives (docs/output.md says why and
 * each one's error). The integer fields (id, material, owner) are the same at both. */
enum h5frame_precision { H5FRAME_FLOAT, H5FRAME_HALF, H5FRAME_PRECISIONS };
extern const char *const h5frame_precision_names[H5FRAME_PRECISIONS]; /* "float", "half" */

/* A field's encoding in the file. */
enum h5frame_encoding {
  H5FRAME_ENC_RAW,   /* the memory's bytes: float32, uint64, int32 */
  H5FRAME_ENC_HALF,  /* IEEE binary16 (pack16_half) */
  H5FRAME_ENC_BF16,  /* 16 bits with float32's 8-bit exponent (pack16_bf16) */
  H5FRAME_ENC_FIXED, /* 16-bit fixed point of the domain's extent (pack16_fixed) */
  H5FRAME_ENC_U8,    /* an int32 of the memory stored as uint8 (every value the run can give fits) */
  H5FRAME_ENC_U16    /* the same as uint16 */
};

/* A frame's layout in the file: its fields, their precision and the integer fields' widths. The
 * floating fields' widths follow from the precision; material and owner take the fewest bytes of
 * 1, 2 and 4 that hold every value the run can give (material < n_materials; owner
 * rank * 256 + device < ranks * 256): 1 and 1 on one rank with at most 256 materials, so a frame
 * of the default fields is 34 bytes a particle there, not 40 (the writer's copy into memory is
 * the frames' bound: docs/performance.md, Output). The id keeps 64 bits: it carries the body. */
typedef struct h5frame_layout {
  unsigned fields; /* H5FRAME_BIT of each dataset */
  int precision;   /* enum h5frame_precision */
  int material_bytes, owner_bytes; /* 1, 2 or 4 */
} h5frame_layout;
h5frame_layout h5frame_layout_of(unsigned fields, int precision, int n_materials, int ranks);
enum h5frame_encoding h5frame_encoding_of(const h5frame_layout *l, int field);
/* Bytes of one row of the field in the file, and of one particle of the layout's fields. */
unsigned h5frame_row_bytes(const h5frame_layout *l, int field);
unsigned h5frame_particle_bytes(const h5frame_layout *l);
/* Bytes of the buffer h5frame_put converts through (allocated once by the caller, reused frame
 * after frame) at precision half: two halves of 4M 16-bit values, one converted while the other is
 * written, so a pwrite of 8 MiB. */
#define H5FRAME_PACK_BYTES ((size_t)16 << 20)
/* The same where only material and owner are converted (narrowed: every run of at most 256 ranks
 * and 65,536 materials): 2 bytes a particle, halves of 512K values suffice, and the host plan
 * keeps the 14 MiB for the particles (a rank of 10M particles plans 64 B a particle at most). */
#define H5FRAME_NARROW_PACK_BYTES ((size_t)2 << 20)
/* The buffer a frame of these fields at this precision converts through: H5FRAME_PACK_BYTES at
 * half, H5FRAME_NARROW_PACK_BYTES where material or owner is among the fields, else 0 (nothing
 * converted); fields 0: the default set. */
size_t h5frame_pack_bytes(unsigned fields, int precision);

#endif
