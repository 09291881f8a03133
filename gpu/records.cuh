// records.cuh - particle records (particles.h: particles_pack's layout, what travels between
// ranks) as 32-bit words on the device: where each attribute starts, from the same list, so that
// the offsets follow it. The float packets' (particles_io.cu) and the compact packets'
// (compact_io.cu) kernels that turn records into packets and back carry each attribute by name.
#ifndef DRIFT_GPU_RECORDS_CUH
#define DRIFT_GPU_RECORDS_CUH

#include "particles.h"

#define REC_WORDS_(field, type, k, what) REC_##field, REC_##field##_last_ = REC_##field + (int)(sizeof(type) * (k) / 4) - 1,
enum { PARTICLE_ATTRIBUTES(REC_WORDS_) REC_WORDS };
#undef REC_WORDS_
static_assert(REC_WORDS == 31 && REC_x == 0 && REC_id == 27 && REC_owner == 30,
              "particles.h's attributes changed: the records' kernels carry each one by name");

#endif
