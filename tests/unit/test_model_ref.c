/* test_model_ref.c — tiny GGUF model writer and the independent float reference forward
 * pass used by test_model.c (see test_model_ref.h). The reference shares no code with
 * src/model or src/kernels: its architecture facts come from its own switch on the
 * architecture name, its RoPE from powf, its GELU from the exact tanh formula. */
#include "test_model_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"

tiny_spec tiny_default(const char *arch) {
    tiny_spec s = {.arch = arch,
                   .n_layer = 2,
                   .n_embd = 64,
                   .n_ff = 96,
                   .n_head = 4,
                   .n_head_kv = 2,
                   .head_dim = 0,
                   .n_rot = 0,
                   .n_vocab = 80,
                   .n_swa = 0,
                   .tied = false,
                   .seed = 1};
    if (!strcmp(arch, "gemma3")) {
        s.n_layer = 7; /* layers 0-4 and 6 slide, layer 5 is global */
        s.head_dim = 32;
        s.n_swa = 5;
        s.tied = true;
    }
    return s;
}

static uint32_t lcg(uint32_t *st) {
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}
static float urand(uint32_t *st) { return (float)lcg(st) / (float)(1u << 24) * 2.0f - 1.0f; }

static bool add_t(cn_gguf_writer *w, const tiny_spec *s, const char *name, int64_t ne0, int64_t ne1, float scale,
                  float offset, uint32_t *st) {
    if (s->omit_tensor && !strcmp(name, s->omit_tensor)) return true;
    if (s->reshape_tensor && !strcmp(name, s->reshape_tensor)) ne1 += 1;
    const int64_t n = ne0 * ne1;
    float *f = malloc((size_t)n * sizeof *f);
    if (!f) return false;
    for (int64_t i = 0; i < n; i++) f[i] = offset + scale * urand(st);
    int64_t ne[2] = {ne0, ne1};
    uint32_t n_dims = ne1 == 1 ? 1 : 2;
    cn_type type = CN_TYPE_F32;
    if (s->f16_tensor && !strcmp(name, s->f16_tensor)) type = CN_TYPE_F16;
    if (s->q2k_tensor && !strcmp(name, s->q2k_tensor)) type = CN_TYPE_Q2_K;
    const cn_type_traits *tr = cn_type_traits_get(type);
    uint64_t rb = cn_type_row_bytes(type, ne0);
    uint8_t *data = malloc((size_t)(rb * (uint64_t)ne1));
    bool ok = data != NULL && rb > 0;
    if (ok) {
        for (int64_t r = 0; r < ne1; r++) tr->from_float_ref(f + r * ne0, data + r * rb, ne0);
        ok = cn_gguf_writer_add_tensor(w, name, type, n_dims, ne, data, rb * (uint64_t)ne1, NULL) == CN_STATUS_OK;
    }
    free(data);
    free(f);
    return ok;
}

static void key_u32(cn_gguf_writer *w, const tiny_spec *s, const char *suffix, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", s->arch, suffix);
    if (s->omit_key && !strcmp(key, s->omit_key)) return;
    if (s->str_key && !strcmp(key, s->str_key)) {
        cn_gguf_writer_set_str(w, key, "seven");
        return;
    }
    cn_gguf_writer_set_u32(w, key, v);
}

static void key_f32(cn_gguf_writer *w, const tiny_spec *s, const char *suffix, float v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", s->arch, suffix);
    if (s->omit_key && !strcmp(key, s->omit_key)) return;
    cn_gguf_writer_set_f32(w, key, v);
}

uint8_t *tiny_model_gguf(const tiny_spec *s, size_t *n_bytes) {
    cn_gguf_writer *w = cn_gguf_writer_new();
    if (!w) return NULL;
    const int hd = s->head_dim ? s->head_dim : s->n_embd / s->n_head;
    const int E = s->n_embd, F = s->n_ff, QD = s->n_head * hd, KVD = s->n_head_kv * hd;
    const bool gemma = !strcmp(s->arch, "gemma3");
    const bool qwen2 = !strcmp(s->arch, "qwen2");
    const bool qkn = gemma || !strcmp(s->arch, "qwen3");
    cn_gguf_writer_set_str(w, "general.architecture", s->arch);
    key_u32(w, s, "block_count", (uint32_t)s->n_layer);
    key_u32(w, s, "embedding_length", (uint32_t)E);
    key_u32(w, s, "feed_forward_length", (uint32_t)F);
    key_u32(w, s, "attention.head_count", (uint32_t)(s->head_count_override ? s->head_count_override : s->n_head));
    key_u32(w, s, "attention.head_count_kv",
            (uint32_t)(s->head_count_kv_override ? s->head_count_kv_override : s->n_head_kv));
    key_u32(w, s, "context_length", 256);
    key_f32(w, s, "attention.layer_norm_rms_epsilon", 1e-6f);
    key_f32(w, s, "rope.freq_base", gemma ? 1000000.0f : 10000.0f);
    if (s->head_dim) {
        key_u32(w, s, "attention.key_length", (uint32_t)hd);
        key_u32(w, s, "attention.value_length", (uint32_t)hd);
    }
    if (s->n_rot) key_u32(w, s, "rope.dimension_count", (uint32_t)s->n_rot);
    if (s->n_swa) key_u32(w, s, "attention.sliding_window", (uint32_t)s->n_swa);
    if (s->rope_scaling_type) {
        char key[128];
        snprintf(key, sizeof key, "%s.rope.scaling.type", s->arch);
        cn_gguf_writer_set_str(w, key, s->rope_scaling_type);
    }
    if (s->rope_scaling_factor > 0) key_f32(w, s, "rope.scaling.factor", s->rope_scaling_factor);

    uint32_t st = s->seed;
    bool ok = add_t(w, s, "token_embd.weight", E, s->n_vocab, gemma ? 0.3f : 1.0f, 0.0f, &st);
    ok = ok && add_t(w, s, "output_norm.weight", E, 1, 0.1f, 1.0f, &st);
    if (!s->tied) ok = ok && add_t(w, s, "output.weight", E, s->n_vocab, 0.3f, 0.0f, &st);
    char name[96];
#define T(suffix, ne0, ne1, scale, off) \
    (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), add_t(w, s, name, ne0, ne1, scale, off, &st))
    for (int l = 0; l < s->n_layer && ok; l++) {
        ok = ok && T("attn_norm.weight", E, 1, 0.1f, 1.0f);
        ok = ok && T("attn_q.weight", E, QD, 1.0f / sqrtf((float)E), 0.0f);
        ok = ok && T("attn_k.weight", E, KVD, 1.0f / sqrtf((float)E), 0.0f);
        ok = ok && T("attn_v.weight", E, KVD, 1.0f / sqrtf((float)E), 0.0f);
        ok = ok && T("attn_output.weight", QD, E, 1.0f / sqrtf((float)QD), 0.0f);
        if (qwen2) {
            ok = ok && T("attn_q.bias", QD, 1, 0.2f, 0.0f);
            ok = ok && T("attn_k.bias", KVD, 1, 0.2f, 0.0f);
            ok = ok && T("attn_v.bias", KVD, 1, 0.2f, 0.0f);
        }
        if (qkn) {
            ok = ok && T("attn_q_norm.weight", hd, 1, 0.1f, 1.0f);
            ok = ok && T("attn_k_norm.weight", hd, 1, 0.1f, 1.0f);
        }
        if (gemma) {
            ok = ok && T("post_attention_norm.weight", E, 1, 0.1f, 1.0f);
            ok = ok && T("post_ffw_norm.weight", E, 1, 0.1f, 1.0f);
        }
        ok = ok && T("ffn_norm.weight", E, 1, 0.1f, 1.0f);
        ok = ok && T("ffn_gate.weight", E, F, 1.0f / sqrtf((float)E), 0.0f);
        ok = ok && T("ffn_up.weight", E, F, 1.0f / sqrtf((float)E), 0.0f);
        ok = ok && T("ffn_down.weight", F, E, 1.0f / sqrtf((float)F), 0.0f);
    }
#undef T
    uint8_t *out = NULL;
    if (!ok || cn_gguf_writer_write_mem(w, &out, n_bytes, NULL) != CN_STATUS_OK) out = NULL;
    cn_gguf_writer_free(w);
    return out;
}

/* ---- the reference forward pass ---- */

typedef struct {
    const float *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv, *qn, *kn, *pan;
    const float *ffn_norm, *wg, *wu, *wd, *pfn;
} ref_layer;

struct ref_model {
    int L, E, F, H, HKV, hd, rot, V, n_swa, max_pos;
    float eps, base, base_swa, scale, pos_scale;
    bool neox, bias, qkn, post, embd_scale, gelu;
    int swa_every;
    const float *tok, *out, *out_norm;
    ref_layer *layers;
    float *kc, *vc; /* (L, max_pos, HKV*hd) */
    float *x, *xb, *q, *k, *v, *att, *o, *g, *u, *sc;
};

static const float *tensor_f32(const cn_gguf *g, const char *name) {
    int64_t i = cn_gguf_find_tensor(g, name);
    if (i < 0) return NULL;
    const cn_gguf_tensor_info *t = cn_gguf_tensor(g, i);
    return t->type == CN_TYPE_F32 ? t->data : NULL;
}

static int key_int(const cn_gguf *g, const char *arch, const char *suffix, int dflt) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    uint32_t v;
    return cn_gguf_get_u32(g, key, &v) ? (int)v : dflt;
}

static float key_float(const cn_gguf *g, const char *arch, const char *suffix, float dflt) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    float v;
    return cn_gguf_get_f32(g, key, &v) ? v : dflt;
}

ref_model *ref_model_new(const cn_gguf *g, int max_pos) {
    cn_gguf_str as;
    if (!cn_gguf_get_str(g, "general.architecture", &as) || as.len > 30) return NULL;
    char arch[32];
    memcpy(arch, as.ptr, as.len);
    arch[as.len] = 0;
    ref_model *r = calloc(1, sizeof *r);
    r->L = key_int(g, arch, "block_count", 0);
    r->E = key_int(g, arch, "embedding_length", 0);
    r->F = key_int(g, arch, "feed_forward_length", 0);
    r->H = key_int(g, arch, "attention.head_count", 0);
    r->HKV = key_int(g, arch, "attention.head_count_kv", r->H);
    r->hd = key_int(g, arch, "attention.key_length", r->E / r->H);
    r->rot = key_int(g, arch, "rope.dimension_count", r->hd);
    r->eps = key_float(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f);
    r->base = key_float(g, arch, "rope.freq_base", 10000.0f);
    r->pos_scale = 1.0f / key_float(g, arch, "rope.scaling.factor", 1.0f); /* linear scaling */
    r->max_pos = max_pos;
    r->scale = 1.0f / sqrtf((float)r->hd);
    const bool gemma = !strcmp(arch, "gemma3");
    r->neox = strcmp(arch, "llama") != 0;
    r->bias = !strcmp(arch, "qwen2");
    r->qkn = gemma || !strcmp(arch, "qwen3");
    r->post = r->embd_scale = r->gelu = gemma;
    r->swa_every = gemma ? 6 : 0;
    r->base_swa = gemma ? 10000.0f : r->base;
    r->n_swa = gemma ? key_int(g, arch, "attention.sliding_window", 0) : 0;

    r->tok = tensor_f32(g, "token_embd.weight");
    r->out = tensor_f32(g, "output.weight");
    if (!r->out) r->out = r->tok;
    r->out_norm = tensor_f32(g, "output_norm.weight");
    int64_t ti = cn_gguf_find_tensor(g, "token_embd.weight");
    r->V = ti >= 0 ? (int)cn_gguf_tensor(g, ti)->ne[1] : 0;
    bool ok = r->tok && r->out_norm && r->L > 0;
    r->layers = calloc((size_t)(r->L > 0 ? r->L : 1), sizeof *r->layers);
    char name[96];
#define W(field, suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), lw->field = tensor_f32(g, name))
    for (int l = 0; l < r->L && ok; l++) {
        ref_layer *lw = &r->layers[l];
        ok = W(attn_norm, "attn_norm.weight") && W(wq, "attn_q.weight") && W(wk, "attn_k.weight") &&
             W(wv, "attn_v.weight") && W(wo, "attn_output.weight") && W(ffn_norm, "ffn_norm.weight") &&
             W(wg, "ffn_gate.weight") && W(wu, "ffn_up.weight") && W(wd, "ffn_down.weight");
        if (r->bias) ok = ok && W(bq, "attn_q.bias") && W(bk, "attn_k.bias") && W(bv, "attn_v.bias");
        if (r->qkn) ok = ok && W(qn, "attn_q_norm.weight") && W(kn, "attn_k_norm.weight");
        if (r->post) ok = ok && W(pan, "post_attention_norm.weight") && W(pfn, "post_ffw_norm.weight");
    }
#undef W
    const int QD = r->H * r->hd, KVD = r->HKV * r->hd;
    const int wide = r->E > QD ? (r->E > r->F ? r->E : r->F) : (QD > r->F ? QD : r->F);
    r->kc = calloc((size_t)r->L * (size_t)max_pos * (size_t)KVD, sizeof(float));
    r->vc = calloc((size_t)r->L * (size_t)max_pos * (size_t)KVD, sizeof(float));
    r->x = calloc((size_t)wide, sizeof(float));
    r->xb = calloc((size_t)wide, sizeof(float));
    r->q = calloc((size_t)QD, sizeof(float));
    r->k = calloc((size_t)KVD, sizeof(float));
    r->v = calloc((size_t)KVD, sizeof(float));
    r->att = calloc((size_t)QD, sizeof(float));
    r->o = calloc((size_t)wide, sizeof(float));
    r->g = calloc((size_t)r->F, sizeof(float));
    r->u = calloc((size_t)r->F, sizeof(float));
    r->sc = calloc((size_t)max_pos, sizeof(float));
    if (!ok) {
        ref_model_free(r);
        return NULL;
    }
    return r;
}

void ref_model_free(ref_model *r) {
    if (!r) return;
    free(r->layers);
    free(r->kc);
    free(r->vc);
    free(r->x);
    free(r->xb);
    free(r->q);
    free(r->k);
    free(r->v);
    free(r->att);
    free(r->o);
    free(r->g);
    free(r->u);
    free(r->sc);
    free(r);
}

int ref_model_n_vocab(const ref_model *r) { return r->V; }

static void rms(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) out[i] = (float)(x[i] * s) * w[i];
}

/* out (n) = W (n rows of k) · x */
static void matvec(float *out, const float *W, const float *x, int k, int n) {
    for (int i = 0; i < n; i++) {
        double acc = 0;
        for (int j = 0; j < k; j++) acc += (double)W[(size_t)i * k + j] * x[j];
        out[i] = (float)acc;
    }
}

static void rope(float *v, int n_heads, int hd, int rot, double pos, float base, bool neox) {
    for (int h = 0; h < n_heads; h++) {
        float *x = v + h * hd;
        for (int i = 0; i < rot / 2; i++) {
            const double theta = pos * pow(base, -2.0 * i / rot);
            const float c = (float)cos(theta), s = (float)sin(theta);
            const int a = neox ? i : 2 * i, b = neox ? i + rot / 2 : 2 * i + 1;
            const float x0 = x[a], x1 = x[b];
            x[a] = x0 * c - x1 * s;
            x[b] = x0 * s + x1 * c;
        }
    }
}

void ref_model_step(ref_model *r, int token, int pos, float *logits) {
    const int E = r->E, F = r->F, hd = r->hd, QD = r->H * hd, KVD = r->HKV * hd;
    memcpy(r->x, r->tok + (size_t)token * E, (size_t)E * sizeof(float));
    if (r->embd_scale)
        for (int i = 0; i < E; i++) r->x[i] *= sqrtf((float)E);
    for (int l = 0; l < r->L; l++) {
        const ref_layer *w = &r->layers[l];
        const bool swa = r->swa_every && l % r->swa_every != r->swa_every - 1;
        rms(r->xb, r->x, w->attn_norm, E, r->eps);
        matvec(r->q, w->wq, r->xb, E, QD);
        matvec(r->k, w->wk, r->xb, E, KVD);
        matvec(r->v, w->wv, r->xb, E, KVD);
        if (r->bias) {
            for (int i = 0; i < QD; i++) r->q[i] += w->bq[i];
            for (int i = 0; i < KVD; i++) r->k[i] += w->bk[i], r->v[i] += w->bv[i];
        }
        if (r->qkn) {
            for (int h = 0; h < r->H; h++) rms(r->q + h * hd, r->q + h * hd, w->qn, hd, r->eps);
            for (int h = 0; h < r->HKV; h++) rms(r->k + h * hd, r->k + h * hd, w->kn, hd, r->eps);
        }
        const float base = swa ? r->base_swa : r->base;
        const double rpos = swa ? pos : pos * (double)r->pos_scale; /* sliding layers: unscaled */
        rope(r->q, r->H, hd, r->rot, rpos, base, r->neox);
        rope(r->k, r->HKV, hd, r->rot, rpos, base, r->neox);
        float *kc = r->kc + ((size_t)l * r->max_pos + pos) * KVD;
        float *vc = r->vc + ((size_t)l * r->max_pos + pos) * KVD;
        memcpy(kc, r->k, (size_t)KVD * sizeof(float));
        memcpy(vc, r->v, (size_t)KVD * sizeof(float));
        const int lo = swa && pos - r->n_swa + 1 > 0 ? pos - r->n_swa + 1 : 0;
        for (int h = 0; h < r->H; h++) {
            const int kh = h / (r->H / r->HKV);
            double mx = -1e300, sum = 0;
            for (int p = lo; p <= pos; p++) {
                const float *kp = r->kc + ((size_t)l * r->max_pos + p) * KVD + kh * hd;
                double d = 0;
                for (int i = 0; i < hd; i++) d += (double)r->q[h * hd + i] * kp[i];
                r->sc[p] = (float)(d * r->scale);
                if (r->sc[p] > mx) mx = r->sc[p];
            }
            for (int p = lo; p <= pos; p++) sum += exp(r->sc[p] - mx);
            for (int i = 0; i < hd; i++) {
                double acc = 0;
                for (int p = lo; p <= pos; p++)
                    acc += exp(r->sc[p] - mx) / sum * r->vc[((size_t)l * r->max_pos + p) * KVD + kh * hd + i];
                r->att[h * hd + i] = (float)acc;
            }
        }
        matvec(r->o, w->wo, r->att, QD, E);
        if (r->post) rms(r->o, r->o, w->pan, E, r->eps);
        for (int i = 0; i < E; i++) r->x[i] += r->o[i];
        rms(r->xb, r->x, w->ffn_norm, E, r->eps);
        matvec(r->g, w->wg, r->xb, E, F);
        matvec(r->u, w->wu, r->xb, E, F);
        for (int i = 0; i < F; i++) {
            const double gv = r->g[i];
            const double a = r->gelu ? 0.5 * gv * (1.0 + tanh(sqrt(2.0 / M_PI) * (gv + 0.044715 * gv * gv * gv)))
                                     : gv / (1.0 + exp(-gv));
            r->g[i] = (float)(a * r->u[i]);
        }
        matvec(r->o, w->wd, r->g, F, E);
        if (r->post) rms(r->o, r->o, w->pfn, E, r->eps);
        for (int i = 0; i < E; i++) r->x[i] += r->o[i];
    }
    rms(r->xb, r->x, r->out_norm, E, r->eps);
    matvec(logits, r->out, r->xb, E, r->V);
}
