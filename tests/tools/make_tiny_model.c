/* make_tiny_model.c — writes small random-weight GGUF models for forward-pass tests.
 *
 *   make_tiny_model ARCH OUT.gguf [TOKENIZER.gguf]     ARCH: qwen2, qwen3, llama
 *
 * Each model has the tensor names and metadata keys llama.cpp loads for its architecture
 * (gguf-py constants), tiny dimensions (n_embd 64, 4 query heads and 2 key/value heads of
 * 16, feed-forward 128, 2 layers, context 256) and the SentencePiece vocabulary of
 * stories260K (every tokenizer.ggml.* key copied through cinder's reader; default
 * $CINDER_TESTDATA/models/stories260K.gguf, else ../shared/testdata/models/...), so
 * llama.cpp loads it and makes goldens from it (tools/reference/make_golden.py).
 *
 * Weights come from a fixed-seed splitmix64 stream turned into floats by integer-to-float
 * conversion and one multiply, and the f16 tensor is rounded here: no libm transcendental,
 * no dependence on the code under test, so the bytes are identical on every machine (the
 * goldens pin their sha256). Scales keep activations near unit size and spread the logits
 * (std ~2) so greedy choices are rarely near-ties.
 *
 *   qwen2: attention q/k/v biases, separate output.weight, token_embd stored F16, NeoX rope
 *   qwen3: per-head attn_q_norm/attn_k_norm, no biases, output tied to token_embd, NeoX rope
 *   llama: plain llama (adjacent-pair rope, base 10000), separate output.weight
 * Everything else is F32. The writer writes only what it is given; this file decides. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

#define N_EMBD 64
#define N_HEAD 4
#define N_HEAD_KV 2
#define HEAD_DIM 16
#define N_FF 128
#define N_LAYER 2
#define N_CTX 256

typedef struct {
    const char *arch;
    uint64_t seed;
    float rope_base;
    float rms_eps;
    bool qkv_bias;
    bool qk_norm;
    bool tied_output;
    bool embd_f16;
} tiny_spec;

static const tiny_spec SPECS[] = {
    {"qwen2", 0x7153a2b1c0ffee02ull, 1000000.0f, 1e-6f, true, false, false, true},
    {"qwen3", 0x7153a2b1c0ffee03ull, 1000000.0f, 1e-6f, false, true, true, false},
    {"llama", 0x7153a2b1c0ffee01ull, 10000.0f, 1e-5f, false, false, false, false},
};

/* --- deterministic numbers --- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-a, a): a 24-bit signed integer (exact in float) times a / 2^23. */
static float uniform(uint64_t *s, float a) {
    int32_t r = (int32_t)(splitmix64(s) >> 40) - (1 << 23);
    return (float)r * (a * 0x1p-23f);
}

/* f32 -> IEEE half, round to nearest even (finite inputs of modest size only). */
static uint16_t to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffffu;
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u); /* never reached with our scales */
    if (exp <= 0) {                                   /* subnormal half */
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* a carry into exp is right */
    return (uint16_t)(sign | h);
}

/* --- building the file --- */

typedef struct {
    cn_gguf_writer *w;
    uint64_t rng;
    float *buf;     /* scratch, large enough for the largest tensor */
    uint16_t *hbuf; /* the same, for the f16 tensor */
    cn_error *err;
} builder;

/* Adds a tensor of ne[0] x ne[1] values uniform in [center - a, center + a). */
static cn_status add(builder *b, const char *name, int64_t ne0, int64_t ne1, float center, float a, cn_type type) {
    int64_t n = ne0 * ne1;
    for (int64_t i = 0; i < n; i++) b->buf[i] = center + uniform(&b->rng, a);
    int64_t ne[2] = {ne0, ne1};
    uint32_t n_dims = ne1 == 1 ? 1 : 2;
    if (type == CN_TYPE_F16) {
        for (int64_t i = 0; i < n; i++) b->hbuf[i] = to_f16(b->buf[i]);
        return cn_gguf_writer_add_tensor(b->w, name, type, n_dims, ne, b->hbuf, (uint64_t)n * 2, b->err);
    }
    return cn_gguf_writer_add_tensor(b->w, name, CN_TYPE_F32, n_dims, ne, b->buf, (uint64_t)n * 4, b->err);
}

/* A matrix with fan_in inputs: uniform with variance 1/fan_in (unit-size outputs). */
static cn_status add_mat(builder *b, const char *name, int64_t fan_in, int64_t n_out) {
    return add(b, name, fan_in, n_out, 0.0f, (float)sqrt(3.0 / (double)fan_in), CN_TYPE_F32);
}

static cn_status add_norm(builder *b, const char *name, int64_t n) {
    return add(b, name, n, 1, 1.0f, 0.1f, CN_TYPE_F32);
}

static cn_status add_layer(builder *b, const tiny_spec *sp, int il) {
    char name[96];
    cn_status st = CN_STATUS_OK;
#define T(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)
    const int64_t nq = N_HEAD * HEAD_DIM, nkv = N_HEAD_KV * HEAD_DIM;
    if (!st) st = add_norm(b, T("attn_norm.weight"), N_EMBD);
    if (!st) st = add_mat(b, T("attn_q.weight"), N_EMBD, nq);
    if (!st) st = add_mat(b, T("attn_k.weight"), N_EMBD, nkv);
    if (!st) st = add_mat(b, T("attn_v.weight"), N_EMBD, nkv);
    if (sp->qkv_bias) {
        if (!st) st = add(b, T("attn_q.bias"), nq, 1, 0.0f, 0.5f, CN_TYPE_F32);
        if (!st) st = add(b, T("attn_k.bias"), nkv, 1, 0.0f, 0.5f, CN_TYPE_F32);
        if (!st) st = add(b, T("attn_v.bias"), nkv, 1, 0.0f, 0.5f, CN_TYPE_F32);
    }
    if (sp->qk_norm) {
        if (!st) st = add_norm(b, T("attn_q_norm.weight"), HEAD_DIM);
        if (!st) st = add_norm(b, T("attn_k_norm.weight"), HEAD_DIM);
    }
    if (!st) st = add_mat(b, T("attn_output.weight"), nq, N_EMBD);
    if (!st) st = add_norm(b, T("ffn_norm.weight"), N_EMBD);
    if (!st) st = add_mat(b, T("ffn_gate.weight"), N_EMBD, N_FF);
    if (!st) st = add_mat(b, T("ffn_up.weight"), N_EMBD, N_FF);
    if (!st) st = add_mat(b, T("ffn_down.weight"), N_FF, N_EMBD);
#undef T
    return st;
}

static cn_status copy_tokenizer(cn_gguf_writer *w, const char *path, uint32_t *n_vocab, cn_error *err) {
    cn_gguf *g = NULL;
    cn_status st = cn_gguf_open(path, &g, err);
    if (st) return st;
    char key[256];
    for (int64_t i = 0; i < cn_gguf_n_kv(g) && !st; i++) {
        cn_gguf_str k = cn_gguf_kv_key(g, i);
        if (k.len < 10 || k.len >= sizeof key || memcmp(k.ptr, "tokenizer.", 10) != 0) continue;
        memcpy(key, k.ptr, k.len);
        key[k.len] = 0;
        st = cn_gguf_writer_copy_kv(w, g, i, key, err);
    }
    cn_gguf_arr toks;
    if (!st && !cn_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks))
        st = cn_err(err, CN_STATUS_NOT_FOUND, "%s: no tokenizer.ggml.tokens", path);
    if (!st) *n_vocab = (uint32_t)toks.n;
    cn_gguf_close(g);
    return st;
}

static cn_status build(const tiny_spec *sp, const char *tok_path, const char *out, cn_error *err) {
    builder b = {.w = cn_gguf_writer_new(), .rng = sp->seed, .err = err};
    cn_status st = CN_STATUS_OK;
    uint32_t n_vocab = 0;
    if (!b.w) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    char key[128];
#define K(suffix) (snprintf(key, sizeof key, "%s." suffix, sp->arch), key)
    char name[64];
    snprintf(name, sizeof name, "tiny-%s", sp->arch);
    st = cn_gguf_writer_set_str(b.w, "general.architecture", sp->arch);
    if (!st) st = cn_gguf_writer_set_str(b.w, "general.name", name);
    if (!st) st = cn_gguf_writer_set_u32(b.w, "general.file_type", sp->embd_f16 ? 1 : 0);
    if (!st) st = cn_gguf_writer_set_u32(b.w, K("context_length"), N_CTX);
    if (!st) st = cn_gguf_writer_set_u32(b.w, K("embedding_length"), N_EMBD);
    if (!st) st = cn_gguf_writer_set_u32(b.w, K("block_count"), N_LAYER);
    if (!st) st = cn_gguf_writer_set_u32(b.w, K("feed_forward_length"), N_FF);
    if (!st) st = cn_gguf_writer_set_u32(b.w, K("attention.head_count"), N_HEAD);
    if (!st) st = cn_gguf_writer_set_u32(b.w, K("attention.head_count_kv"), N_HEAD_KV);
    if (!st) st = cn_gguf_writer_set_u32(b.w, K("attention.key_length"), HEAD_DIM);
    if (!st) st = cn_gguf_writer_set_u32(b.w, K("attention.value_length"), HEAD_DIM);
    if (!st) st = cn_gguf_writer_set_u32(b.w, K("rope.dimension_count"), HEAD_DIM);
    if (!st) st = cn_gguf_writer_set_f32(b.w, K("rope.freq_base"), sp->rope_base);
    if (!st) st = cn_gguf_writer_set_f32(b.w, K("attention.layer_norm_rms_epsilon"), sp->rms_eps);
#undef K
    if (!st) st = copy_tokenizer(b.w, tok_path, &n_vocab, err);
    if (!st) st = cn_gguf_writer_set_u32(b.w, (snprintf(key, sizeof key, "%s.vocab_size", sp->arch), key), n_vocab);
    if (!st && (n_vocab == 0 || n_vocab > 65536))
        st = cn_err(err, CN_STATUS_UNSUPPORTED, "%s: vocabulary of %u tokens", tok_path, n_vocab);
    if (!st) {
        b.buf = malloc((size_t)N_EMBD * n_vocab * sizeof(float));
        b.hbuf = malloc((size_t)N_EMBD * n_vocab * sizeof(uint16_t));
        if (!b.buf || !b.hbuf) st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    }
    /* Embeddings and output at +-0.5: with unit-RMS normed states, logits of std ~2. */
    if (!st) st = add(&b, "token_embd.weight", N_EMBD, n_vocab, 0.0f, 0.5f, sp->embd_f16 ? CN_TYPE_F16 : CN_TYPE_F32);
    if (!st) st = add_norm(&b, "output_norm.weight", N_EMBD);
    if (!st && !sp->tied_output) st = add(&b, "output.weight", N_EMBD, n_vocab, 0.0f, 0.5f, CN_TYPE_F32);
    for (int il = 0; il < N_LAYER && !st; il++) st = add_layer(&b, sp, il);
    if (!st) st = cn_gguf_writer_write_file(b.w, out, err);
    if (st && err && err->status == CN_STATUS_OK) cn_err(err, st, "building %s failed", out);
    free(b.buf);
    free(b.hbuf);
    cn_gguf_writer_free(b.w);
    return st;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: make_tiny_model qwen2|qwen3|llama OUT.gguf [TOKENIZER.gguf]\n");
        return 2;
    }
    const tiny_spec *sp = NULL;
    for (size_t i = 0; i < CN_ARRAY_LEN(SPECS); i++)
        if (strcmp(argv[1], SPECS[i].arch) == 0) sp = &SPECS[i];
    if (!sp) {
        fprintf(stderr, "make_tiny_model: unknown architecture '%s' (qwen2, qwen3, llama)\n", argv[1]);
        return 2;
    }
    char tok[4096];
    if (argc == 4) {
        snprintf(tok, sizeof tok, "%s", argv[3]);
    } else {
        const char *td = getenv("CINDER_TESTDATA");
        snprintf(tok, sizeof tok, "%s/models/stories260K.gguf", td && *td ? td : "../shared/testdata");
    }
    cn_error err = {0};
    if (build(sp, tok, argv[2], &err) != CN_STATUS_OK) {
        fprintf(stderr, "make_tiny_model: %s\n", err.msg);
        return 1;
    }
    return 0;
}
