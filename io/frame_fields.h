/* frame_fields.h - the fields a frame may hold (output.fields): their order, bits, dataset names
 * and values per particle. Apart from io/h5frame.h, which writes them, so that the scene parser
 * (and the scene fuzzer's build, which has neither HDF5 nor MPI) can name them. */
#ifndef DRIFT_FRAME_FIELDS_H
#define DRIFT_FRAME_FIELDS_H

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

#endif
