/* ptxlab stand-in for <limits.h>, for device code compiled by NVRTC.
 *
 * Why: NVRTC has no C standard headers, and kernels use INT_MAX, UINT_MAX, CHAR_BIT (a
 * reduction's starting value, say). These are the macros libcu++'s <cuda/std/climits> defines
 * under NVRTC, spelled the same, so a source that includes both compiles. Only ptxlab's NVRTC
 * compiles see this file. */
#ifndef PTXLAB_NVRTC_LIMITS_H
#define PTXLAB_NVRTC_LIMITS_H

#define CHAR_BIT 8

#define SCHAR_MIN (-128)
#define SCHAR_MAX 127
#define UCHAR_MAX 255
#if '\xff' > 0
#define CHAR_MIN 0
#define CHAR_MAX UCHAR_MAX
#else
#define CHAR_MIN SCHAR_MIN
#define CHAR_MAX SCHAR_MAX
#endif
#define SHRT_MIN  (-SHRT_MAX - 1)
#define SHRT_MAX  0x7fff
#define USHRT_MAX 0xffff
#define INT_MIN   (-INT_MAX - 1)
#define INT_MAX   0x7fffffff
#define UINT_MAX  0xffffffff
#define LONG_MIN  (-LONG_MAX - 1)
#ifdef __LP64__
#define LONG_MAX  LLONG_MAX
#define ULONG_MAX ULLONG_MAX
#else
#define LONG_MAX  INT_MAX
#define ULONG_MAX UINT_MAX
#endif
#define LLONG_MIN  (-LLONG_MAX - 1)
#define LLONG_MAX  0x7fffffffffffffffLL
#define ULLONG_MAX 0xffffffffffffffffUL

#endif /* PTXLAB_NVRTC_LIMITS_H */
