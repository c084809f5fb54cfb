/* test_model_ref.h — test helpers for the model tests: tiny random-weight GGUF models
 * written with our GGUF writer (any of the four architectures, optionally broken in one
 * chosen way), and an independent float reference forward pass (llama2.c style: plain
 * loops, double dot products, powf RoPE angles, one token at a time) that reads F32
 * weights straight from a GGUF. */
#ifndef TEST_MODEL_REF_H
#define TEST_MODEL_REF_H

#include "gguf/gguf.h"

typedef struct {
    const char *arch;
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_rot, n_vocab, n_swa;
    bool tied; /* no output.weight */
    uint32_t seed;
    /* ways to break the file (NULL/0: none) */
    const char *omit_tensor;    /* leave this tensor out */
    const char *reshape_tensor; /* give this tensor one more row */
    const char *f16_tensor;     /* store this tensor as F16 */
    const char *q2k_tensor;     /* store this tensor as Q2_K (unsupported by the matmul) */
    const char *omit_key;       /* leave this metadata key out (full name) */
    const char *str_key;        /* write this key as a string instead */
    int head_count_override;    /* write this attention.head_count instead */
    int head_count_kv_override;
    const char *rope_scaling_type;
    float rope_scaling_factor; /* written as rope.scaling.factor when > 0 */
} tiny_spec;

tiny_spec tiny_default(const char *arch);
/* malloc'd GGUF bytes; NULL on failure. */
uint8_t *tiny_model_gguf(const tiny_spec *s, size_t *n_bytes);

typedef struct ref_model ref_model;
/* g must outlive the reference; max_pos positions of KV are kept. NULL on a model it
 * cannot run (non-F32 weights). */
ref_model *ref_model_new(const cn_gguf *g, int max_pos);
void ref_model_free(ref_model *r);
int ref_model_n_vocab(const ref_model *r);
/* Runs one token at pos (positions must come in order 0, 1, ...); logits (n_vocab). */
void ref_model_step(ref_model *r, int token, int pos, float *logits);

#endif
