/* attngen's element types: the C enum alone, which attngen.h includes, so that the Halide-free
 * core (core/dtype.h, a row per element type keyed on these values) and the generator that
 * includes it depend on this small header, not on the whole API. */
#ifndef ATTNGEN_DTYPE_H_
#define ATTNGEN_DTYPE_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attngen_dtype {
  ATTNGEN_F32 = 0,
  ATTNGEN_F16 = 1,
  ATTNGEN_BF16 = 2,
  ATTNGEN_BOOL = 3, /* one byte per element, 0 = false */
  ATTNGEN_I32 = 4,
  ATTNGEN_I8 = 5,
  ATTNGEN_DTYPE_FORCE_32BIT = 0x7fffffff
} attngen_dtype;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNGEN_DTYPE_H_ */
