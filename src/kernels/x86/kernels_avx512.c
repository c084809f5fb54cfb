/* kernels_avx512.c — the AVX-512 VNNI family: matmul_tmpl.h at 16 lanes with vpdpbusd.
 * Compiled with -mavx512f/bw/vl/dq/vnni (Makefile pattern rule); entered only after the
 * CPU check (x86.h). */
#define CN_X86_AVX512 1
#define CN_X86_SUFFIX(name) avx512_##name
#include "x86.h"

#include "matmul_tmpl.h"
#include "attn_tmpl.h"
#include "ops_tmpl.h"

static const cn_kernels g_avx512 = {
    .name = "avx512",
    .rmsnorm = avx512_rmsnorm,
    .rope_cache = cn_ref_rope_cache,
    .rope = avx512_rope,
    .softmax = cn_ref_softmax,
    .gated_act = avx512_gated_act,
    .quantize_rows = avx512_quantize_rows,
    .matmul = avx512_matmul,
    .attention = avx512_attention,
    .packed_size = avx512_packed_size,
    .pack = avx512_pack,
};

const cn_kernels *cn_kernels_avx512(void) {
    cn_ref_init();
    cn_x86_gelu_init();
    return &g_avx512;
}
