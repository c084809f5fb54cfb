/* kernels_avx2.c — the AVX2 family: matmul_tmpl.h at 8 lanes, the 8-bit dot as
 * vpmaddubsw + vpmaddwd. Compiled with -mavx2 -mfma -mf16c (Makefile pattern rule);
 * entered only after the CPU check (x86.h). */
#define CN_X86_AVX512 0
#define CN_X86_SUFFIX(name) avx2_##name
#include "x86.h"

#include "matmul_tmpl.h"
#include "attn_tmpl.h"
#include "ops_tmpl.h"

static const cn_kernels g_avx2 = {
    .name = "avx2",
    .rmsnorm = avx2_rmsnorm,
    .rope_cache = cn_ref_rope_cache,
    .rope = avx2_rope,
    .softmax = cn_ref_softmax,
    .gated_act = avx2_gated_act,
    .quantize_rows = avx2_quantize_rows,
    .matmul = avx2_matmul,
    .attention = avx2_attention,
    .packed_size = avx2_packed_size,
    .pack = avx2_pack,
};

const cn_kernels *cn_kernels_avx2(void) {
    cn_ref_init();
    cn_x86_gelu_init();
    return &g_avx2;
}
