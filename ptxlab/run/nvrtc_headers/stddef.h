/* ptxlab stand-in for <stddef.h>, for device code compiled by NVRTC.
 *
 * Why: NVRTC has no C standard headers, though its built-in device runtime already declares
 * size_t, ptrdiff_t and NULL. This file exists so `#include <stddef.h>` compiles. (offsetof is
 * not given: NVRTC has no builtin to define it with.) Only ptxlab's NVRTC compiles see it. */
#ifndef PTXLAB_NVRTC_STDDEF_H
#define PTXLAB_NVRTC_STDDEF_H
#endif /* PTXLAB_NVRTC_STDDEF_H */
