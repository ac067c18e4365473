# THE list of kernel variants attngen builds. Everything else derives from it: the build rules
# (attngen_add_kernel), the runtime's dispatch table (attngen_write_registry), and through that
# table the test cases and benchmark registrations, which iterate over the built-in kernels.
# Name scheme: docs/variants.md.
#
# Each entry: ISA-independent parameters; the list is generated for every ISA in
# ATTNGEN_KERNEL_ISAS. Key block 0 is the ISA's default form (whole score rows on CPUs, key
# blocks on CUDA); a number asks for the online-softmax form with blocks of that many keys.
# When two kernels fit a call equally well, the runtime takes the one listed first.
set(ATTNGEN_VARIANTS
    # op        head dim (qk v)  mask    mask tensor  softcap  key block
    "attention  64 64            none    none         0        0"
    "attention  64 64            causal  none         0        0"
    "attention  80 80            causal  none         0        0"
    "attention  40 24            none    none         0        0"
    "attention  64 64            none    bool         0        0"
    "attention  64 64            causal  additive     0        0"
    "attention  64 64            causal  none         1        0"
    "attention  64 64            none    none         0        64"
    "attention  64 64            causal  none         0        64"
    "attention  40 24            causal  bool         0        32"
    "linear     -  -             none    none         0        0"
    "mha        64 64            none    none         0        0"
    "mha        64 64            causal  none         0        0"
)
