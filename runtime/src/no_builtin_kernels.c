/* The dispatch table of attngen_core: no built-in kernels. An app that links attngen_core runs
 * the kernels it registers (attngen_register_<name>()), and links those and nothing else. */
#include "attngen/kernel.h"

const attngen_kernel_info* const attngen_builtin_kernels[] = {0};
