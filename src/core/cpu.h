/* cpu.h — CPU feature detection, done once; kernels are chosen from it at start-up.
 * CINDER_ISA=ref|avx2|avx512|amx caps what is reported, to force a path (tests, bisects).
 * AMX (Intel's tile matrix unit) counts only when the kernel granted this process its
 * tile state (arch_prctl), which detection asks for. */
#ifndef CN_CPU_H
#define CN_CPU_H

#include <stdbool.h>

typedef struct {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16;
    bool avxvnni;
    bool amx_int8; /* AMX-TILE + AMX-INT8, OS-enabled and permitted for this process */
    bool neon;
} cn_cpu_features;

/* x86 ranks ref < avx2 < avx512 < amx (a cap only lowers); neon is the arm64 family. */
typedef enum { CN_ISA_REF = 0, CN_ISA_AVX2, CN_ISA_AVX512, CN_ISA_NEON, CN_ISA_AMX } cn_isa;

/* Detected features after the CINDER_ISA cap. Thread-safe after the first call. */
const cn_cpu_features *cn_cpu_get(void);
/* The best kernel family to use. */
cn_isa cn_cpu_isa(void);
const char *cn_isa_name(cn_isa isa);

#endif
