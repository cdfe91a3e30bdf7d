/*
 * cpu_amx.h: whether the AMX-BF16 tile products (cpu_amx.c) may run in this process, and why not.
 *
 * AMX needs three things: the CPU's tile instructions (CPUID leaf 7 subleaf 0, EDX bit 24
 * AMX-TILE and bit 22 AMX-BF16), the OS's tile state enabled (XCR0 bits 17 XTILECFG and 18
 * XTILEDATA), and, on Linux 5.16 and later, the process's permission for the large tile data
 * state, asked once with arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): without it the
 * first tile instruction kills the process with SIGILL. The AMX paths also convert P (and in the
 * backward dS) to bf16 pairs with AVX512-BF16 (cpu_bf16dp.c), so that is required too.
 *
 * The permission is asked where the AMX products are wanted (cpu_amx_wanted: by default, or with
 * FA_CPU_ISA=amx) and the CPU and OS have them; it makes every signal frame of the process larger
 * by the tile data (8 KiB), which FA_CPU_ISA=avx512 avoids. Otherwise only the facts are read,
 * for the device line.
 */
#ifndef FA_CPU_AMX_H
#define FA_CPU_AMX_H

#include <stddef.h>
#include <stdint.h>

/* What the CPU and the OS report (read by cpu_amx_read_facts, or made up by a test). */
typedef struct cpu_amx_facts {
  int amx_tile, amx_bf16; /* CPUID.(7,0):EDX bits 24, 22 */
  int avx512bf16;         /* CPUID.(7,1):EAX bit 5 */
  int osxsave;            /* CPUID.1:ECX bit 27: XGETBV may be used */
  uint64_t xcr0;          /* XGETBV(0), 0 without OSXSAVE */
} cpu_amx_facts;

typedef enum cpu_amx_state {
  CPU_AMX_NO = 0,  /* cannot run: the reason says why */
  CPU_AMX_PRESENT, /* CPU and OS have it; the permission was not asked */
  CPU_AMX_READY    /* the permission was granted: the tile products may run */
} cpu_amx_state;

/* Asks the OS for the tile data state; returns 0 when granted, else an errno value. */
typedef int (*cpu_amx_request_fn)(void);

/* The decision from the facts: CPU_AMX_NO with the reason in why; CPU_AMX_PRESENT when request is
   NULL; else request() is called and its refusal (non-zero) gives CPU_AMX_NO with its errno in
   the reason. Pure apart from request(), so a test drives every branch. */
cpu_amx_state cpu_amx_decide(const cpu_amx_facts *facts, cpu_amx_request_fn request, char *why,
                             size_t n);

/* Whether FA_CPU_ISA's value (NULL when unset) wants the AMX products: unset or empty (AMX is the
   default wherever it can run) and "amx" do; any other value names a build without them. */
int cpu_amx_wanted(const char *fa_cpu_isa);

/* This machine's facts (all 0 off x86-64). */
void cpu_amx_read_facts(cpu_amx_facts *facts);

/* Linux's permission request (ARCH_REQ_XCOMP_PERM, then ARCH_GET_XCOMP_PERM to confirm): 0 or an
   errno value; ENOSYS off Linux x86-64. */
int cpu_amx_request_linux(void);

/* The AMX-BF16 tile product: cpu_kernels.h's gemm_bf16 on tiles (cpu_amx.c), for the bf16
   forward and backward. */
void cpu_gemm_bf16_amx(int m, int n, int k2, const uint32_t *a, ptrdiff_t lda, const uint32_t *b,
                       ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accumulate);

/* The same product from tiled operands, the bf16 forward's layout where its tiles are whole
   (cpu_forward.c): C (m x n fp32, row stride ldc) = A·B or += A·B, where A and B are stored as
   16 x 16-word tiles of 1 KB one after another, rows 64 bytes apart: A's tile (row block r, pair
   block q) at a + (r * kt + q) * 256 words and B's tile (pair block q, column block j) at
   b + (j * kt + q) * 256, kt = k2 / 16. m and n multiples of 32 and k2 of 16 (the caller pads
   with zeros). A tile then lies on 16 consecutive cache lines, which the hardware prefetchers
   follow; a row-major B tile's rows lie a K tile's width apart (16-core AMX host, 256 x 256
   tiles, head dim 128: the two products 7-20% faster). */
void cpu_gemm_bf16_amx_tiled(int m, int n, int k2, const uint32_t *a, const uint32_t *b, float *c,
                             ptrdiff_t ldc, int accumulate);

#endif /* FA_CPU_AMX_H */
