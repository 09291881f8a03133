/* material.h - constitutive parameters as the kernels see them (derived once from the scene's
 * user-facing keys by scene.c). Shared by the CPU and CUDA backends. */
#ifndef DRIFT_PHYSICS_MATERIAL_H
#define DRIFT_PHYSICS_MATERIAL_H

enum material_model {
  MODEL_FIXED_COROTATED = 0,    /* Stomakhin et al. 2012 elasticity */
  MODEL_DRUCKER_PRAGER = 1,     /* Klar et al. 2016 sand: Hencky strain, return mapping */
  MODEL_WEAKLY_COMPRESSIBLE = 2, /* Tait-type fluid: p = K (J^-gamma - 1) */
  MODEL_NACC = 3                 /* snow: non-associative Cam-Clay (Wolper et al. 2019), hardening in logJp */
};

/* How the material's particles take their velocity back from the grid (G2P). */
enum transfer_kind {
  TRANSFER_APIC = 0,  /* affine PIC (Jiang et al. 2015): v_p = sum w v_i */
  TRANSFER_ASFLIP = 1 /* Fei et al. 2021: APIC plus a FLIP share of the particle's own velocity (physics/transfer.h) */
};

typedef struct material_params {
  int model;        /* enum material_model */
  float density;    /* kg/m^3 */
  float mu, lambda; /* Lame parameters (Pa), from youngs_modulus and poisson_ratio (solids) */
  float alpha;      /* Drucker-Prager: the cone's slope from friction angle phi and the scene's fit
                     * (scene_materials.c); "compression": sqrt(2/3) * 2 sin(phi) / (3 - sin(phi)) */
  float bulk;       /* weakly compressible, NACC: bulk modulus K (Pa) */
  float gamma;      /* weakly compressible: exponent */
  float viscosity;  /* weakly compressible: dynamic viscosity mu (Pa s); 0: inviscid */
  float nacc_m2;    /* NACC: M^2, M the slope of the critical state line (friction) */
  float nacc_beta;  /* NACC: cohesion beta, the tensile strength as a fraction of p0 */
  float nacc_xi;    /* NACC: hardening xi: p0 = K (1e-5 + sinh(xi max(-logJp, 0))) */
  float nacc_logjp0; /* NACC: the particles' initial logJp (initial_compression) */
  int transfer;     /* enum transfer_kind */
  float flip_blend; /* ASFLIP: alpha, the FLIP share of the velocity update, in [0, 1] */
  float beta_min, beta_max; /* ASFLIP: positional adjustment while compressed / separating, in [0, 1] */
} material_params;

#endif
