/*
 * prelude.cl: what OpenCL C needs before the core/ headers (compiled into every program ahead of
 * them): the fixed-width integer names and the float function names the headers use, then the
 * storage type of this program (FA_DTYPE: 0 f32, 1 f16 through vload_half/vstore_half, which need
 * no cl_khr_fp16, 2 bf16 as ushort through core/math/dtype.h).
 */
#define FA_OPENCL_C 1
typedef uchar uint8_t;
typedef ushort uint16_t;
typedef uint uint32_t;
typedef ulong uint64_t;
typedef char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
#define expf exp
#define logf log
#define tanhf tanh
#define fabsf fabs
