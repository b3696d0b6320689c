/* ptxlab stand-in for <math.h>, for device code compiled by NVRTC.
 *
 * Why: NVRTC has no C standard headers, though every device math function (sqrtf, expf,
 * fmaxf, isnan... with float overloads) is already declared by its built-in device runtime.
 * What the built-ins lack are <math.h>'s macros: INFINITY, NAN, HUGE_VAL(F) and the M_PI
 * family that GCC's header also gives. The infinities and NaN are bit patterns:
 * __builtin_bit_cast keeps them constant expressions where NVRTC has it (12.x and 13.0 do);
 * an older NVRTC gets the device intrinsics instead. Only ptxlab's NVRTC compiles see this
 * file. */
#ifndef PTXLAB_NVRTC_MATH_H
#define PTXLAB_NVRTC_MATH_H

#if defined(__has_builtin)
#if __has_builtin(__builtin_bit_cast)
#define PTXLAB_NVRTC_BIT_CAST 1
#endif
#endif
#ifdef PTXLAB_NVRTC_BIT_CAST
#define HUGE_VALF __builtin_bit_cast(float, 0x7f800000u)
#define HUGE_VAL __builtin_bit_cast(double, 0x7ff0000000000000ull)
#define NAN __builtin_bit_cast(float, 0x7fc00000u)
#else
#define HUGE_VALF __int_as_float(0x7f800000)
#define HUGE_VAL __longlong_as_double(0x7ff0000000000000ll)
#define NAN __int_as_float(0x7fc00000)
#endif
#define INFINITY HUGE_VALF

#define M_E        2.7182818284590452354
#define M_LOG2E    1.4426950408889634074
#define M_LOG10E   0.43429448190325182765
#define M_LN2      0.69314718055994530942
#define M_LN10     2.30258509299404568402
#define M_PI       3.14159265358979323846
#define M_PI_2     1.57079632679489661923
#define M_PI_4     0.78539816339744830962
#define M_1_PI     0.31830988618379067154
#define M_2_PI     0.63661977236758134308
#define M_2_SQRTPI 1.12837916709551257390
#define M_SQRT2    1.41421356237309504880
#define M_SQRT1_2  0.70710678118654752440

#endif /* PTXLAB_NVRTC_MATH_H */
