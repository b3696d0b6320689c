/* ptxlab stand-in for <stdlib.h>, for device code compiled by NVRTC.
 *
 * Why: NVRTC has no C standard headers, though its built-in device runtime already declares
 * what of <stdlib.h> exists on the device: malloc, free, abs, labs, llabs. This file exists so
 * `#include <stdlib.h>` compiles; exit, rand, qsort and the like are host-only and stay
 * undeclared. Only ptxlab's NVRTC compiles see this file. */
#ifndef PTXLAB_NVRTC_STDLIB_H
#define PTXLAB_NVRTC_STDLIB_H
#endif /* PTXLAB_NVRTC_STDLIB_H */
