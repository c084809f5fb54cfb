/* test_golden.c — the forward pass against llama.cpp: golden files tests/golden/<name>.json
 * (made by tools/reference/make_golden.py with llama-cpp-python; format in that file)
 * hold, per prompt, llama.cpp's tokens, the top-20 logits at every prompt position and
 * 64 greedy tokens with the top-20 each was chosen from. We feed the tokens as one
 * prefill batch, require |Δlogit| <= the model's bound over the reference's top-20 ids and
 * the same argmax at every position, then decode the 64 greedy tokens one at a time
 * through the KV cache (feeding llama.cpp's tokens, so one flip does not end the
 * comparison) and require the same argmax at every step. A different argmax is accepted
 * only where llama.cpp's own top-2 gap is below the model's near-tie threshold, is
 * reported, and may happen at most once per 16 positions compared.
 *
 * Bounds, and why (measured on this code; the bound is ~2x the worst case seen):
 *   stories260K (F32 weights)  bound 2e-2, near-tie 1e-3. Measured 1.8e-3 over prompts and
 *     9.5e-3 over greedy steps. We mirror llama.cpp's f16 roundings of q, K, V and the
 *     attention probabilities, and match its one-batch prefill to ~1e-5 (checked at
 *     layer 0 and the logits); but llama.cpp is not batch-invariant: the same 14 tokens
 *     fed one at a time (as the goldens' greedy steps are) give logits 2.3e-3 away from
 *     feeding them as one batch. 1e-3 is therefore out of reach for a batch-invariant
 *     engine; tools/reference/numpy_llama.py in ggml mode lands at the same 9.5e-3.
 *   tiny qwen2/qwen3/llama (F32/F16 random weights)  bound 2e-2, near-tie 1e-3 (as above).
 *   SmolLM2-135M Q4_1 / gemma-3-270m Q4_K_M  bound 4, near-tie 0.5. Measured with the ref,
 *     AVX2 and AVX-512 kernel families (their attention differs from ref in the last bits):
 *     max |Δ| 0.89-1.17 and 2.0-2.4; 3-7 of 315 and 2-5 of 292 argmaxes flipped, all at
 *     llama.cpp top-2 gaps of 0.01-0.31.
 *     Same formats and formulas as ggml (layer 0 of SmolLM2 agrees with llama.cpp's to 5
 *     digits), but a last-bit difference in a block sum's order (ggml's SIMD lanes, FMA,
 *     its approximate SIMD exp in SiLU) can flip one 8-bit rounding of the next activation,
 *     and these models' large activations (|x| ~ 60-90) amplify that through 30/18 layers;
 *     llama.cpp's own kernel variants (repacked vs generic) differ from each other by
 *     0.06-0.2 on the same logits. Reaching the 1e-3 near-tie of the F32 models would take
 *     copying ggml's per-ISA summation order bit for bit.
 * Real models must be present (scripts/setup.sh --all fetches them); tiny models are
 * regenerated at test time by make_tiny_model and checked against the
 * golden's sha256. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"

/* ---- sha256 (FIPS 180-4), to pin regenerated tiny models to their goldens ---- */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const uint8_t *p) {
    uint32_t w[64], a[8];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(a, h, sizeof a);
    for (int i = 0; i < 64; i++) {
        uint32_t S1 = ROR(a[4], 6) ^ ROR(a[4], 11) ^ ROR(a[4], 25);
        uint32_t t1 = a[7] + S1 + ((a[4] & a[5]) ^ (~a[4] & a[6])) + K256[i] + w[i];
        uint32_t S0 = ROR(a[0], 2) ^ ROR(a[0], 13) ^ ROR(a[0], 22);
        uint32_t t2 = S0 + ((a[0] & a[1]) ^ (a[0] & a[2]) ^ (a[1] & a[2]));
        memmove(a + 1, a, 7 * sizeof a[0]);
        a[4] += t1;
        a[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) h[i] += a[i];
}

static bool sha256_file(const char *path, char hex[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    uint8_t buf[64 * 1024 + 128];
    uint64_t total = 0;
    size_t n;
    for (;;) {
        n = fread(buf, 1, 64 * 1024, f);
        total += n;
        if (n < 64 * 1024) break;
        for (size_t i = 0; i < n; i += 64) sha256_block(h, buf + i);
    }
    fclose(f);
    size_t full = n / 64 * 64;
    for (size_t i = 0; i < full; i += 64) sha256_block(h, buf + i);
    size_t rest = n - full;
    memmove(buf, buf + full, rest);
    buf[rest++] = 0x80;
    while (rest % 64 != 56) buf[rest++] = 0;
    for (int i = 7; i >= 0; i--) buf[rest++] = (uint8_t)((total * 8) >> (8 * i));
    for (size_t i = 0; i < rest; i += 64) sha256_block(h, buf + i);
    for (int i = 0; i < 8; i++) sprintf(hex + 8 * i, "%08x", h[i]);
    return true;
}

Test(golden, sha256_known_answer) {
    char path[] = "/tmp/cinder_sha_XXXXXX", hex[65];
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "abc", 3), 3);
    close(fd);
    cr_assert(sha256_file(path, hex));
    unlink(path);
    cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

/* ---- locating files ---- */

static void golden_path(const char *name, char *out, size_t cap) {
    const char *d = getenv("CINDER_GOLDEN");
    snprintf(out, cap, "%s/%s.json", d && *d ? d : "tests/golden", name);
}

static void model_path(const char *kind, const char *file, char *out, size_t cap) {
    if (!strcmp(kind, "testdata")) {
        const char *d = getenv("CINDER_TESTDATA");
        snprintf(out, cap, "%s/models/%s", d && *d ? d : "../shared/testdata", file);
    } else {
        const char *d = getenv("CINDER_MODELS");
        if (d && *d) snprintf(out, cap, "%s/%s", d, file);
        else snprintf(out, cap, "%s/.cache/cinder/models/%s", getenv("HOME") ? getenv("HOME") : "", file);
    }
}

/* Regenerates a tiny model with make_tiny_model from this binary's build folder. */
static void make_tiny(const char *arch, char *out, size_t cap) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert(n > 0, "cannot find the test binary's folder");
    exe[n] = 0;
    const char *dir = dirname(exe);
    char tiny_dir[PATH_MAX], cmd[3 * PATH_MAX];
    int k1 = snprintf(tiny_dir, sizeof tiny_dir, "%s/tiny", dir);
    mkdir(tiny_dir, 0755);
    int k2 = snprintf(out, cap, "%s/tiny-%s.gguf", tiny_dir, arch);
    int k3 = snprintf(cmd, sizeof cmd, "'%s/tools/make_tiny_model' %s '%s'", dir, arch, out);
    cr_assert(k1 > 0 && k1 < PATH_MAX && k2 > 0 && (size_t)k2 < cap && k3 > 0 && k3 < 3 * PATH_MAX);
    cr_assert_eq(system(cmd), 0, "make_tiny_model failed: %s", cmd);
}

/* ---- the check ---- */

typedef struct {
    const char *name;   /* tests/golden/<name>.json */
    const char *where;  /* "testdata", "models" or a tiny arch ("tiny:qwen2") */
    const char *file;
    float bound;        /* max |Δlogit| over the reference top-20 */
    float near_tie;     /* a different argmax is accepted only where llama.cpp's top-2 gap < this */
} golden_spec;

static int top_argmax(json_t *top) { return (int)json_integer_value(json_array_get(json_array_get(top, 0), 0)); }
static float top_gap(json_t *top) {
    return (float)(json_number_value(json_array_get(json_array_get(top, 0), 1)) -
                   json_number_value(json_array_get(json_array_get(top, 1), 1)));
}

static int argmax(const float *x, int n) {
    int a = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[a]) a = i;
    return a;
}

/* max |Δ| between logits and a top-k list of [id, logit]; fails past bound. */
static float compare_top(const float *lg, int V, json_t *top, float bound, const char *what, int idx) {
    float worst = 0;
    for (size_t k = 0; k < json_array_size(top); k++) {
        json_t *pair = json_array_get(top, k);
        int id = (int)json_integer_value(json_array_get(pair, 0));
        float ref = (float)json_number_value(json_array_get(pair, 1));
        cr_assert(id >= 0 && id < V, "%s %d: reference id %d outside the vocabulary", what, idx, id);
        float d = fabsf(lg[id] - ref);
        cr_assert(d <= bound, "%s %d: token %d logit %.5f, llama.cpp %.5f (|d| %.5f > %.5f)", what, idx, id,
                  lg[id], ref, d, bound);
        worst = fmaxf(worst, d);
    }
    return worst;
}

static void run_golden(const golden_spec *gs) {
    char gpath[PATH_MAX], mpath[PATH_MAX];
    golden_path(gs->name, gpath, sizeof gpath);
    json_error_t jerr;
    json_t *root = json_load_file(gpath, 0, &jerr);
    cr_assert(root, "%s: %s (line %d)", gpath, jerr.text, jerr.line);
    const char *file = json_string_value(json_object_get(root, "model"));
    cr_assert(file && !strcmp(file, gs->file), "%s: model '%s', want %s", gpath, file ? file : "?", gs->file);
    if (!strncmp(gs->where, "tiny:", 5)) {
        make_tiny(gs->where + 5, mpath, sizeof mpath);
        char hex[65];
        cr_assert(sha256_file(mpath, hex));
        const char *want = json_string_value(json_object_get(root, "model_sha256"));
        cr_assert(want && !strcmp(hex, want), "%s: regenerated model sha256 %s, golden has %s", mpath, hex,
                  want ? want : "none");
    } else {
        model_path(gs->where, gs->file, mpath, sizeof mpath);
        cr_assert(access(mpath, R_OK) == 0,
                  "model %s is missing: run scripts/setup.sh --all (or set CINDER_MODELS)", mpath);
    }
    const int n_ctx = (int)json_integer_value(json_object_get(root, "n_ctx"));

    cn_model *m = NULL;
    cn_error err = {0};
    cn_model_params mp = cn_model_default_params();
    cr_assert_eq(cn_model_load(mpath, &mp, &m, &err), CN_STATUS_OK, "%s", err.msg);
    const int V = cn_model_hparams(m)->n_vocab;
    cn_kv_params kp = cn_model_kv_params(m);
    kp.n_blocks = (n_ctx + kp.block_tokens - 1) / kp.block_tokens;
    cn_kv *kv = NULL;
    cr_assert_eq(cn_kv_create(&kp, &kv, &err), CN_STATUS_OK, "%s", err.msg);
    cn_ctx_params cp = cn_ctx_default_params();
    cp.n_threads = 2;
    cp.n_batch_max = n_ctx;
    cp.n_ctx = n_ctx;
    cn_ctx *c = NULL;
    cr_assert_eq(cn_ctx_create(m, &cp, &c, &err), CN_STATUS_OK, "%s", err.msg);
    cn_batch b;
    cr_assert_eq(cn_batch_init(&b, n_ctx, &err), CN_STATUS_OK);
    float *lg = malloc((size_t)n_ctx * V * sizeof(float));
    float worst_prompt = 0, worst_greedy = 0;
    int n_flips = 0, n_compared = 0;

    json_t *cases = json_object_get(root, "cases");
    cr_assert(json_array_size(cases) > 0, "%s: no cases", gpath);
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        json_t *cs = json_array_get(cases, ci);
        json_t *toks = json_object_get(cs, "tokens"), *ptop = json_object_get(cs, "prompt_top");
        json_t *greedy = json_object_get(cs, "greedy"), *gtop = json_object_get(cs, "greedy_top");
        const int n = (int)json_array_size(toks);
        const int ng = (int)json_array_size(greedy);
        cr_assert(n > 0 && n + ng <= n_ctx && (int)json_array_size(ptop) == n &&
                      (int)json_array_size(gtop) == ng, "%s case %zu: malformed", gpath, ci);
        char what[64];
        snprintf(what, sizeof what, "%s case %zu prompt pos", gs->name, ci);

        cn_kv_seq_free(kv, 0);
        cn_batch_clear(&b);
        for (int i = 0; i < n; i++)
            cn_batch_add(&b, (int32_t)json_integer_value(json_array_get(toks, i)), i, 0, true);
        cr_assert_eq(cn_forward(m, c, &b, kv, lg, &err), CN_STATUS_OK, "%s", err.msg);
        for (int i = 0; i < n; i++) {
            json_t *top = json_array_get(ptop, i);
            const float *row = lg + (size_t)i * V;
            float wd = compare_top(row, V, top, gs->bound, what, i);
            if (getenv("GDEBUG")) fprintf(stderr, "pos %d worst %.5f tok %lld\n", i, wd, (long long)json_integer_value(json_array_get(toks, i)));
            worst_prompt = fmaxf(worst_prompt, wd);
            const int mine = argmax(row, V), ref = top_argmax(top);
            n_compared++;
            if (mine != ref) {
                cr_assert(top_gap(top) < gs->near_tie, "%s %d: argmax %d (logit %.5f), llama.cpp %d (logit %.5f here)",
                          what, i, mine, row[mine], ref, row[ref]);
                cr_log_info("%s %d: argmax %d vs llama.cpp %d at a near-tie (gap %.3g)", what, i, mine, ref,
                            top_gap(top));
                n_flips++;
            }
        }

        /* greedy: step 0 reads the last prompt row, step i decodes greedy[i-1] */
        float *last = malloc((size_t)V * sizeof(float));
        memcpy(last, lg + (size_t)(n - 1) * V, (size_t)V * sizeof(float));
        snprintf(what, sizeof what, "%s case %zu greedy step", gs->name, ci);
        for (int i = 0; i < ng; i++) {
            if (i > 0) {
                cn_batch_clear(&b);
                cn_batch_add(&b, (int32_t)json_integer_value(json_array_get(greedy, i - 1)), n + i - 1, 0, true);
                cr_assert_eq(cn_forward(m, c, &b, kv, last, &err), CN_STATUS_OK, "%s", err.msg);
            }
            json_t *top = json_array_get(gtop, i);
            const int mine = argmax(last, V);
            const int ref = (int)json_integer_value(json_array_get(greedy, i));
            n_compared++;
            if (mine != ref) {
                cr_assert(top_gap(top) < gs->near_tie,
                          "%s %d: first differing token: cinder %d (logit %.5f), llama.cpp %d (logit %.5f here; "
                          "its top-2 gap %.4f)", what, i, mine, last[mine], ref, last[ref], top_gap(top));
                cr_log_info("%s %d: cinder %d, llama.cpp %d at a near-tie (llama.cpp's top-2 gap %.3g); "
                            "decoding goes on with llama.cpp's token", what, i, mine, ref, top_gap(top));
                n_flips++;
            }
            worst_greedy = fmaxf(worst_greedy, compare_top(last, V, top, gs->bound, what, i));
        }
        free(last);
    }
    cr_log_info("%s: max |dlogit| over llama.cpp's top-20: prompt %.4g, greedy %.4g (bound %.4g); "
                "%d of %d argmaxes flipped at near-ties", gs->name, worst_prompt, worst_greedy, gs->bound, n_flips,
                n_compared);
    cr_assert(n_flips * 16 <= n_compared, "%s: %d of %d argmaxes differ from llama.cpp's (near-ties or not)",
              gs->name, n_flips, n_compared);
    free(lg);
    cn_batch_free(&b);
    cn_ctx_free(c);
    cn_kv_free(kv);
    cn_model_free(m);
    json_decref(root);
}

Test(golden, stories260k) {
    golden_spec gs = {"stories260k", "testdata", "stories260K.gguf", 2e-2f, 1e-3f};
    run_golden(&gs);
}

Test(golden, tiny_qwen2) {
    golden_spec gs = {"tiny-qwen2", "tiny:qwen2", "tiny-qwen2.gguf", 2e-2f, 1e-3f};
    run_golden(&gs);
}

Test(golden, tiny_qwen3) {
    golden_spec gs = {"tiny-qwen3", "tiny:qwen3", "tiny-qwen3.gguf", 2e-2f, 1e-3f};
    run_golden(&gs);
}

Test(golden, tiny_llama) {
    golden_spec gs = {"tiny-llama", "tiny:llama", "tiny-llama.gguf", 2e-2f, 1e-3f};
    run_golden(&gs);
}

Test(golden, smollm2_135m_instruct_q4_1) {
    golden_spec gs = {"smollm2-135m-instruct-q4_1", "models", "SmolLM2-135M-Instruct.Q4_1.gguf", 4.0f, 0.5f};
    run_golden(&gs);
}

Test(golden, gemma3_270m_q4_k_m) {
    golden_spec gs = {"gemma3-270m-q4_k_m", "models", "gemma-3-270m-q4_k_m.gguf", 4.0f, 0.5f};
    run_golden(&gs);
}
