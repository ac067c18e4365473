# THE list of kernel variants attngen builds. Everything else derives from it: the build rules
# (attngen_add_kernel), the runtime's dispatch table (attngen_write_registry), and through that
# table the test cases and benchmark registrations, which iterate over the built-in kernels.
# Name scheme: docs/variants.md.
#
# Each entry: ISA-independent parameters; the list is generated for every ISA in
# ATTNGEN_KERNEL_ISAS.
set(ATTNGEN_VARIANTS
    # op        head dim (qk v)  mask    mask tensor  softcap
    "attention  64 64            none    none         0"
    "attention  64 64            causal  none         0"
    "attention  80 80            causal  none         0"
    "attention  40 24            none    none         0"
    "attention  64 64            none    bool         0"
    "attention  64 64            causal  additive     0"
    "attention  64 64            causal  none         1"
    "linear     -  -             none    none         0"
    "mha        64 64            none    none         0"
    "mha        64 64            causal  none         0"
)
