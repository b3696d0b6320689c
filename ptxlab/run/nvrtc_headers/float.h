/* ptxlab stand-in for <float.h>, for device code compiled by NVRTC.
 *
 * Why: NVRTC has no C standard headers and predefines none of the compiler's __FLT_MAX__-style
 * macros, yet kernels start a max-reduction at -FLT_MAX or compare with FLT_EPSILON. These are
 * the IEEE-754 binary32/binary64 values (the same digits as GCC's <float.h>); long double does
 * not exist in device code, so no LDBL_ macro is given. Only ptxlab's NVRTC compiles see this
 * file. */
#ifndef PTXLAB_NVRTC_FLOAT_H
#define PTXLAB_NVRTC_FLOAT_H

#define FLT_RADIX 2
#define FLT_EVAL_METHOD 0
#define DECIMAL_DIG 17

#define FLT_MANT_DIG 24
#define FLT_DIG 6
#define FLT_DECIMAL_DIG 9
#define FLT_MIN_EXP (-125)
#define FLT_MIN_10_EXP (-37)
#define FLT_MAX_EXP 128
#define FLT_MAX_10_EXP 38
#define FLT_MAX 3.40282346638528859811704183484516925e+38F
#define FLT_MIN 1.17549435082228750796873653722224568e-38F
#define FLT_EPSILON 1.19209289550781250000000000000000000e-7F
#define FLT_TRUE_MIN 1.40129846432481707092372958328991613e-45F
#define FLT_HAS_SUBNORM 1

#define DBL_MANT_DIG 53
#define DBL_DIG 15
#define DBL_DECIMAL_DIG 17
#define DBL_MIN_EXP (-1021)
#define DBL_MIN_10_EXP (-307)
#define DBL_MAX_EXP 1024
#define DBL_MAX_10_EXP 308
#define DBL_MAX 1.79769313486231570814527423731704357e+308
#define DBL_MIN 2.22507385850720138309023271733240406e-308
#define DBL_EPSILON 2.22044604925031308084726333618164062e-16
#define DBL_TRUE_MIN 4.94065645841246544176568792868221372e-324
#define DBL_HAS_SUBNORM 1

#endif /* PTXLAB_NVRTC_FLOAT_H */
