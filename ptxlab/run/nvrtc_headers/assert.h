/* ptxlab stand-in for <assert.h>, for device code compiled by NVRTC.
 *
 * Why: NVRTC has no C standard headers, though its built-in device runtime already defines
 * `assert` (a failed one calls the device's __assertfail, which traps the kernel). This file
 * exists so `#include <assert.h>` compiles, and does what the real header does on each
 * inclusion: it defines assert again after NDEBUG, so `#define NDEBUG` before the include turns
 * asserts off. The definition is NVRTC's own. No include guard, as in the C standard. Only
 * ptxlab's NVRTC compiles see this file. */
#undef assert
#ifdef NDEBUG
#define assert(e) (static_cast<void>(0))
#else
#define assert(e) ((e) ? static_cast<void>(0) \
                       : __assertfail(#e, __FILE__, __LINE__, __PRETTY_FUNCTION__, sizeof(char)))
#endif
