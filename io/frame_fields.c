/* frame_fields.c - the fields a frame may hold (see frame_fields.h). */
#include "frame_fields.h"

const char *const h5frame_field_names[H5FRAME_FIELDS] = {"position", "velocity", "id",     "material", "owner",
                                                         "logjp",    "J",        "F",      "stress",   "C"};
const int h5frame_field_columns[H5FRAME_FIELDS] = {3, 3, 1, 1, 1, 1, 1, 9, 6, 9};
