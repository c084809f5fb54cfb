/* cpu.c — cpuid/xgetbv probing (x86) and the CINDER_ISA override. */
#include "cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
static unsigned long long xgetbv0(void) {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

/* AMX tile data is off for a Linux process until it asks (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XTILEDATA, Linux 5.16+); a refusal leaves AMX unused. */
static bool amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
#else
    return false;
#endif
}
#endif

static cn_cpu_features g_feat;
static cn_isa g_isa;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void detect(void) {
    cn_cpu_features f;
    memset(&f, 0, sizeof f);
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        bool osxsave = c & (1u << 27);
        unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
        bool ymm = (xcr0 & 0x6) == 0x6;
        bool zmm = (xcr0 & 0xe6) == 0xe6;
        f.fma = ymm && (c & (1u << 12));
        f.f16c = ymm && (c & (1u << 29));
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
            f.avx2 = ymm && (b & (1u << 5));
            f.avx512f = zmm && (b & (1u << 16));
            f.avx512bw = zmm && (b & (1u << 30));
            f.avx512vl = zmm && (b & (1u << 31));
            f.avx512vnni = zmm && (c & (1u << 11));
            /* edx bits 24/25: AMX-TILE/INT8; xcr0 bits 17/18: tile config and data */
            f.amx_int8 = (d & (3u << 24)) == (3u << 24) && (xcr0 & (3ull << 17)) == (3ull << 17) && amx_permitted();
        }
        if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
            f.avxvnni = ymm && (a & (1u << 4));
            f.avx512bf16 = zmm && (a & (1u << 5));
        }
    }
#elif defined(__aarch64__)
    f.neon = true;
#endif
    cn_isa isa = CN_ISA_REF;
    if (f.neon) isa = CN_ISA_NEON;
    if (f.avx2 && f.fma && f.f16c) isa = CN_ISA_AVX2;
    if (isa == CN_ISA_AVX2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni) isa = CN_ISA_AVX512;
    if (isa == CN_ISA_AVX512 && f.amx_int8) isa = CN_ISA_AMX;

    const char *cap = getenv("CINDER_ISA");
    if (cap && *cap) {
        cn_isa want = isa;
        if (!strcmp(cap, "ref")) want = CN_ISA_REF;
        else if (!strcmp(cap, "avx2")) want = CN_ISA_AVX2;
        else if (!strcmp(cap, "avx512")) want = CN_ISA_AVX512;
        else if (!strcmp(cap, "amx")) want = CN_ISA_AMX;
        else if (!strcmp(cap, "neon")) want = CN_ISA_NEON;
        /* only ever lower, within this CPU's architecture: the enum ranks x86's
         * families only, so neon caps nothing on x86, nor avx2/avx512 on arm64 */
        const bool same_arch = (want == CN_ISA_NEON) == (isa == CN_ISA_NEON);
        if (want == CN_ISA_REF || (want < isa && same_arch)) isa = want;
    }
    if (getenv("CINDER_REF") && !strcmp(getenv("CINDER_REF"), "1")) isa = CN_ISA_REF;
    if (isa != CN_ISA_AMX) f.amx_int8 = false;
    if (isa < CN_ISA_AVX512) {
        f.avx512f = f.avx512bw = f.avx512vl = f.avx512vnni = f.avx512bf16 = false;
    }
    if (isa < CN_ISA_AVX2) f.avx2 = f.fma = f.f16c = f.avxvnni = false;
    if (isa == CN_ISA_REF) f.neon = false;
    g_feat = f;
    g_isa = isa;
}

const cn_cpu_features *cn_cpu_get(void) {
    pthread_once(&g_once, detect);
    return &g_feat;
}

cn_isa cn_cpu_isa(void) {
    pthread_once(&g_once, detect);
    return g_isa;
}

const char *cn_isa_name(cn_isa isa) {
    switch (isa) {
    case CN_ISA_REF: return "ref";
    case CN_ISA_AVX2: return "avx2";
    case CN_ISA_AVX512: return "avx512";
    case CN_ISA_NEON: return "neon";
    case CN_ISA_AMX: return "amx";
    }
    return "?";
}
