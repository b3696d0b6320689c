/* ptxlab stand-in for <stdio.h>, for device code compiled by NVRTC.
 *
 * Why: NVRTC has no C standard headers, so `#include <stdio.h>` stopped a pasted kernel at
 * line 1, yet device `printf` needs no header: NVRTC's built-in device runtime declares it
 * (it becomes a call to vprintf, which the GPU and the CPU model both print). Files, puts and
 * scanf do not exist in device code, so this header declares nothing more. Only ptxlab's NVRTC
 * compiles see this file. */
#ifndef PTXLAB_NVRTC_STDIO_H
#define PTXLAB_NVRTC_STDIO_H
#endif /* PTXLAB_NVRTC_STDIO_H */
