/* tokenizer_bpe.c — byte-level BPE (model "gpt2"): the pre-tokenizer (a list of regexes
 * chosen by tokenizer.ggml.pre, applied one after the other: each splits every piece
 * the previous ones made into its matches and the gaps between them), GPT-2's
 * byte-to-unicode mapping, and the rank-ordered merge of adjacent symbols inside each
 * pre-token. The regexes run on PCRE2 (UTF + UCP, JIT when available), compiled once
 * per tokenizer. The family table groups pre-tokenizer names as llama.cpp does; the
 * patterns are the ones the models' tokenizer.json files carry (PCRE2 takes them as
 * they are; non-ASCII characters are written \x{...} so no editor normalizes them).
 * No special tokens here: tokenizer.c has already cut them out. */
#include "text/merge_heap.h"
#include "text/tokenizer_impl.h"
#include "core/buf.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- byte <-> unicode (GPT-2) --- */

/* Printable Latin-1 bytes stand for themselves; the other 68 bytes map, in order, to
 * U+0100 onwards. */
static bool byte_is_self(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The 68 others, in byte order: 0x00-0x20, 0x7F-0xA0, 0xAD. */
uint32_t cn_bpe_byte_to_cp(uint8_t b) {
    if (byte_is_self(b)) return b;
    if (b <= 0x20) return 256u + b;
    if (b <= 0xA0) return 256u + 33 + (b - 0x7Fu);
    return 256u + 67; /* 0xAD */
}

int cn_bpe_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_self((int)cp) ? (int)cp : -1;
    if (cp < 256 + 33) return (int)(cp - 256);
    if (cp < 256 + 67) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

/* --- pre-tokenizer families --- */

/* clang-format off */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* (?i:'s|'t|...) spelled out, as llama.cpp does, so that only ASCII letters fold. */
#define RE_CONTRACT "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3                                                                        \
    RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                    \
    RE_CONTRACT "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* U+0800..U+4E00 is in the models' own pattern, as is. */
#define RE_CJK_HANGUL "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define RE_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

typedef struct {
    const char *family;
    const char *re[CN_TOK_MAX_REGEXES]; /* NULL-terminated */
    bool ignore_merges, add_bos, bos_none;
} pre_family;

static const pre_family families[] = {
    {"default",
     {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL},
     false, false, false},
    {"gpt-2", {RE_GPT2, NULL}, false, false, false},
    {"llama3", {RE_LLAMA3, NULL}, true, true, false},
    {"qwen2", {RE_QWEN2, NULL}, false, false, false},
    {"chatglm4", {RE_LLAMA3, NULL}, false, false, true},
    {"starcoder", {"\\p{N}", RE_GPT2, NULL}, false, false, false},
    {"falcon",
     {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]", NULL},
     false, false, false},
    {"deepseek-llm",
     {"[\\r\\n]",
      "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
      "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
      "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-"
      "\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
      "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
      "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
      "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
      "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-"
      "\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-"
      "\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}"
      "\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-"
      "\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
      "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"
      "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"
      "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
      "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
      "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
      "\\x{1E900}-\\x{1E943}]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
      "\\s+$", RE_CJK_HANGUL, "\\p{N}+", NULL},
     false, false, false},
    {"deepseek-coder",
     {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK_HANGUL, "\\p{N}", NULL},
     false, false, false},
    {"deepseek-v3",
     {"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?"
      "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      NULL},
     false, false, false},
    {"bloom", {RE_BLOOM, NULL}, false, false, false},
    {"viking", {RE_BLOOM, "\\p{N}", NULL}, false, false, false},
    {"tekken",
     {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
      "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
      "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
      NULL},
     true, true, false},
    {"chameleon",
     {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
      "[\\p{P}!-/:-@\\[-`{-~]", RE_GPT2, NULL},
     false, true, false},
};

/* tokenizer.ggml.pre names and the family each belongs to. */
static const struct {
    const char *name, *family;
} pre_names[] = {
    {"default", "default"},
    {"gpt-2", "gpt-2"}, {"gpt2", "gpt-2"}, {"phi-2", "gpt-2"}, {"jina-es", "gpt-2"},
    {"jina-de", "gpt-2"}, {"gigachat", "gpt-2"}, {"jina-v1-en", "gpt-2"},
    {"jina-v2-es", "gpt-2"}, {"jina-v2-de", "gpt-2"}, {"jina-v2-code", "gpt-2"},
    {"roberta-bpe", "gpt-2"}, {"mpt", "gpt-2"}, {"olmo", "gpt-2"}, {"jais", "gpt-2"},
    {"llama3", "llama3"}, {"llama-v3", "llama3"}, {"llama-bpe", "llama3"},
    {"falcon3", "llama3"}, {"dbrx", "llama3"}, {"smaug-bpe", "llama3"},
    {"qwen2", "qwen2"}, {"deepseek-r1-qwen", "qwen2"}, {"megrez", "qwen2"},
    {"stablelm2", "qwen2"},
    {"chatglm-bpe", "chatglm4"},
    {"starcoder", "starcoder"}, {"refact", "starcoder"}, {"command-r", "starcoder"},
    {"smollm", "starcoder"}, {"codeshell", "starcoder"}, {"exaone", "starcoder"},
    {"minerva-7b", "starcoder"},
    {"falcon", "falcon"},
    {"deepseek-llm", "deepseek-llm"},
    {"deepseek-coder", "deepseek-coder"},
    {"deepseek-v3", "deepseek-v3"},
    {"poro-chat", "bloom"}, {"bloom", "bloom"}, {"gpt3-finnish", "bloom"},
    {"viking", "viking"},
    {"tekken", "tekken"},
    {"chameleon", "chameleon"},
};

/* clang-format on */

struct cn_bpe_pre {
    int n;
    pcre2_code *re[CN_TOK_MAX_REGEXES];
    bool jit;
};

static const pre_family *find_family(const char *name) {
    for (size_t i = 0; i < CN_ARRAY_LEN(families); i++)
        if (!strcmp(families[i].family, name)) return &families[i];
    return NULL;
}

static cn_status compile_pre(const pre_family *f, cn_bpe_pre **out, cn_error *err) {
    cn_bpe_pre *p = calloc(1, sizeof *p);
    if (!p) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    p->jit = true;
    for (int i = 0; f->re[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        p->re[i] = pcre2_compile((PCRE2_SPTR)f->re[i], PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
        if (!p->re[i]) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(ec, msg, sizeof msg);
            for (int j = 0; j < i; j++) pcre2_code_free(p->re[j]);
            free(p);
            return cn_err(err, CN_STATUS_UNSUPPORTED, "pre-tokenizer '%s' regex %d does not compile at offset %zu: %s",
                          f->family, i, (size_t)eo, (const char *)msg);
        }
        p->n = i + 1;
        if (pcre2_jit_compile(p->re[i], PCRE2_JIT_COMPLETE) != 0) p->jit = false;
    }
    *out = p;
    return CN_STATUS_OK;
}

/* --- merges --- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* Rank and result of merging (l, r); false if they do not merge. */
static bool merge_find(const cn_tokenizer *t, int32_t l, int32_t r, int32_t *rank, int32_t *res) {
    if (l < 0 || r < 0 || !t->merge_key) return false;
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (uint32_t i = (uint32_t)mix64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        if (t->merge_key[i] == UINT64_MAX) return false;
        if (t->merge_key[i] == key) {
            *rank = t->merge_rank[i];
            *res = t->merge_out[i];
            return true;
        }
    }
}

static cn_status load_merges(cn_tokenizer *t, const cn_gguf *g, cn_error *err) {
    const char *key = "tokenizer.ggml.merges";
    int64_t ki = cn_gguf_find_key(g, key);
    if (ki < 0) return cn_err(err, CN_STATUS_NOT_FOUND, "BPE vocabulary without %s", key);
    cn_gguf_arr a;
    if (!cn_gguf_kv_arr(g, ki, &a) || a.type != CN_GGUF_STRING)
        return cn_err(err, CN_STATUS_CORRUPT, "%s is not an array of strings", key);
    if (a.n > CN_TOK_MAX_MERGES)
        return cn_err(err, CN_STATUS_LIMIT, "%s has %llu entries (limit %d)", key, (unsigned long long)a.n,
                      CN_TOK_MAX_MERGES);
    uint32_t cap = 16;
    while (cap < 2 * a.n) cap *= 2;
    t->merge_key = malloc(cap * sizeof *t->merge_key);
    t->merge_rank = malloc(cap * sizeof *t->merge_rank);
    t->merge_out = malloc(cap * sizeof *t->merge_out);
    if (!t->merge_key || !t->merge_rank || !t->merge_out)
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for %llu merges", (unsigned long long)a.n);
    memset(t->merge_key, 0xFF, cap * sizeof *t->merge_key);
    t->merge_mask = cap - 1;
    char *buf = NULL;
    size_t buf_cap = 0;
    cn_status st = CN_STATUS_OK;
    for (uint64_t j = 0; j < a.n; j++) {
        cn_gguf_str s = cn_gguf_arr_str(&a, j);
        if (!s.ptr) {
            st = cn_err(err, CN_STATUS_CORRUPT, "%s[%llu] is unreadable", key, (unsigned long long)j);
            break;
        }
        /* "left right": split at the first space after the first byte. */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) {
            st = cn_err(err, CN_STATUS_CORRUPT, "%s[%llu] '%.*s' is not two tokens separated by a space", key,
                        (unsigned long long)j, (int)CN_MIN(s.len, 40), s.ptr);
            break;
        }
        size_t nl = (size_t)(sp - s.ptr), nr = s.len - nl - 1;
        int32_t l = cn_tok_lookup(t, s.ptr, nl), r = cn_tok_lookup(t, sp + 1, nr);
        if (l < 0 || r < 0) {
            st = cn_err(err, CN_STATUS_CORRUPT, "%s[%llu] '%.*s' names a token not in the vocabulary", key,
                        (unsigned long long)j, (int)CN_MIN(s.len, 40), s.ptr);
            break;
        }
        if (nl + nr > buf_cap) {
            free(buf);
            buf_cap = 2 * (nl + nr);
            buf = malloc(buf_cap);
            if (!buf) {
                st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
                break;
            }
        }
        memcpy(buf, s.ptr, nl);
        memcpy(buf + nl, sp + 1, nr);
        int32_t res = cn_tok_lookup(t, buf, nl + nr);
        if (res < 0) {
            st = cn_err(err, CN_STATUS_CORRUPT, "%s[%llu] '%.*s' merges into a token not in the vocabulary", key,
                        (unsigned long long)j, (int)CN_MIN(s.len, 40), s.ptr);
            break;
        }
        uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
        uint32_t i = (uint32_t)mix64(k) & t->merge_mask;
        while (t->merge_key[i] != UINT64_MAX && t->merge_key[i] != k) i = (i + 1) & t->merge_mask;
        if (t->merge_key[i] == k) continue; /* a repeated pair keeps its first (best) rank */
        t->merge_key[i] = k;
        t->merge_rank[i] = (int32_t)j;
        t->merge_out[i] = res;
        t->n_merges++;
    }
    free(buf);
    return st;
}

cn_status cn_bpe_load(cn_tokenizer *t, const cn_gguf *g, const char *pre_name, bool *add_bos_default, bool *bos_none,
                      cn_error *err) {
    cn_status st = load_merges(t, g, err);
    if (st != CN_STATUS_OK) return st;

    const char *fam = NULL;
    if (!pre_name) {
        cn_log(CN_LOG_WARN, "tokenizer: BPE vocabulary without tokenizer.ggml.pre; using the "
                            "'default' pre-tokenizer (quality may suffer)");
        fam = "default";
    } else {
        for (size_t i = 0; i < CN_ARRAY_LEN(pre_names); i++)
            if (!strcmp(pre_names[i].name, pre_name)) fam = pre_names[i].family;
        if (!fam) {
            cn_log(CN_LOG_WARN, "tokenizer: unknown pre-tokenizer '%s'; using the gpt-2 regex", pre_name);
            fam = "gpt-2";
        }
    }
    const pre_family *f = find_family(fam);
    st = compile_pre(f, &t->pre, err);
    if (st != CN_STATUS_OK) return st;
    t->ignore_merges = f->ignore_merges;
    *add_bos_default = f->add_bos;
    *bos_none = f->bos_none;
    snprintf(t->pre_name, sizeof t->pre_name, "%s", pre_name ? pre_name : "default");

    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t n = cn_utf8_encode(cn_bpe_byte_to_cp((uint8_t)b), u);
        t->bpe_byte_tok[b] = cn_tok_lookup(t, u, n);
    }
    return CN_STATUS_OK;
}

void cn_bpe_free(cn_tokenizer *t) {
    free(t->merge_key);
    free(t->merge_rank);
    free(t->merge_out);
    if (t->pre) {
        for (int i = 0; i < t->pre->n; i++) pcre2_code_free(t->pre->re[i]);
        free(t->pre);
    }
}

/* --- pre-tokenization --- */

typedef struct {
    size_t *v; /* pairs (start, end) */
    size_t n, cap;
} span_vec;

static bool span_push(span_vec *a, size_t s, size_t e) {
    if (!CN_GROW(a->v, a->cap, a->n + 2)) return false;
    a->v[a->n++] = s;
    a->v[a->n++] = e;
    return true;
}

/* Splits clean[0..len) (valid UTF-8) into pre-tokens. */
static cn_status pretokenize(const cn_bpe_pre *p, const char *clean, size_t len, span_vec *out, cn_error *err) {
    span_vec cur = {0}, next = {0};
    cn_status st = CN_STATUS_OK;
    pcre2_match_data *md = NULL;
    pcre2_match_context *mc = NULL;
    pcre2_jit_stack *js = NULL;
    if (len && !span_push(&cur, 0, len)) goto oom;
    mc = pcre2_match_context_create(NULL);
    if (!mc) goto oom;
    if (p->jit) {
        js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
        if (!js) goto oom;
        pcre2_jit_stack_assign(mc, NULL, js);
    }
    for (int r = 0; r < p->n; r++) {
        md = pcre2_match_data_create_from_pattern(p->re[r], NULL);
        if (!md) goto oom;
        next.n = 0;
        for (size_t f = 0; f < cur.n; f += 2) {
            const char *subj = clean + cur.v[f];
            size_t n = cur.v[f + 1] - cur.v[f], pos = 0, gap = 0;
            while (pos < n) {
                int rc = pcre2_match(p->re[r], (PCRE2_SPTR)subj, n, pos, PCRE2_NO_UTF_CHECK, md, mc);
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) {
                    PCRE2_UCHAR msg[128];
                    pcre2_get_error_message(rc, msg, sizeof msg);
                    st = cn_err(err, CN_STATUS_LIMIT, "pre-tokenizer regex failed: %s", (const char *)msg);
                    goto fail;
                }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                size_t ms = ov[0], me = ov[1];
                if (me <= ms) { /* empty match: not a piece; move one character on */
                    uint32_t cp;
                    pos = ms + cn_utf8_decode(subj + ms, n - ms, &cp);
                    continue;
                }
                if (ms > gap && !span_push(&next, cur.v[f] + gap, cur.v[f] + ms)) goto oom;
                if (!span_push(&next, cur.v[f] + ms, cur.v[f] + me)) goto oom;
                pos = gap = me;
            }
            if (gap < n && !span_push(&next, cur.v[f] + gap, cur.v[f] + n)) goto oom;
        }
        pcre2_match_data_free(md);
        md = NULL;
        span_vec tmp = cur;
        cur = next;
        next = tmp;
    }
    *out = cur;
    cur.v = NULL;
    goto fail;
oom:
    st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory while pre-tokenizing");
fail:
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    pcre2_jit_stack_free(js);
    free(cur.v);
    free(next.v);
    return st;
}

cn_status cn_bpe_pretokenize(const cn_tokenizer *t, const char *text, size_t len, char **clean, size_t **offs,
                             size_t *n_words, cn_error *err) {
    size_t n_clean;
    if (!cn_utf8_sanitize(text, len, clean, &n_clean)) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    span_vec w = {0};
    cn_status st = pretokenize(t->pre, *clean, n_clean, &w, err);
    if (st != CN_STATUS_OK) {
        free(*clean);
        *clean = NULL;
        return st;
    }
    *offs = w.v;
    *n_words = w.n / 2;
    return CN_STATUS_OK;
}

/* --- merging inside one pre-token --- */

typedef struct {
    int32_t prev, next, id; /* id: the token this symbol is, -1 if none */
    uint32_t n;             /* bytes covered; 0 once merged into its left neighbour */
} bpe_sym;

static bool add_bigram(const cn_tokenizer *t, const bpe_sym *sym, int32_t l, int32_t r, cn_merge_heap *h) {
    if (l < 0 || r < 0) return true;
    int32_t rank, res;
    if (!merge_find(t, sym[l].id, sym[r].id, &rank, &res)) return true;
    cn_merge b = {l, r, (double)rank, sym[l].id, sym[r].id};
    return cn_merge_push(h, b);
}

/* Emits the tokens of one pre-token word[0..n) (raw bytes). sym/h are scratch. */
static bool bpe_word(const cn_tokenizer *t, const uint8_t *word, size_t n, bpe_sym *sym, cn_merge_heap *h, char *enc,
                     cn_tok_vec *out) {
    if (t->ignore_merges) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += cn_utf8_encode(cn_bpe_byte_to_cp(word[i]), enc + k);
        int32_t id = cn_tok_lookup(t, enc, k);
        if (id >= 0) return cn_tok_vec_push(out, id);
    }
    /* One symbol per byte: each byte is one character of the byte-encoded word. */
    for (size_t i = 0; i < n; i++)
        sym[i] = (bpe_sym){(int32_t)i - 1, i + 1 == n ? -1 : (int32_t)i + 1, t->bpe_byte_tok[word[i]], 1};
    h->n = 0;
    for (size_t i = 1; i < n; i++)
        if (!add_bigram(t, sym, (int32_t)i - 1, (int32_t)i, h)) return false;
    while (h->n) {
        cn_merge b = cn_merge_pop(h);
        bpe_sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->id != b.tag0 || r->id != b.tag1) continue; /* stale */
        int32_t rank, res;
        merge_find(t, l->id, r->id, &rank, &res);
        l->id = res;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        if (!add_bigram(t, sym, l->prev, b.left, h)) return false;
        if (!add_bigram(t, sym, b.left, l->next, h)) return false;
    }
    for (int32_t i = 0; i != -1; i = sym[i].next) {
        if (sym[i].id >= 0) {
            if (!cn_tok_vec_push(out, sym[i].id)) return false;
            continue;
        }
        /* A byte whose character is not in the vocabulary (only an unmerged single byte
         * can be here): llama.cpp then tries each byte of the character's UTF-8 as a
         * one-byte token. */
        char u[4];
        size_t k = cn_utf8_encode(cn_bpe_byte_to_cp(word[i]), u);
        for (size_t j = 0; j < k; j++) {
            int32_t id = cn_tok_lookup(t, u + j, 1);
            if (id >= 0 && !cn_tok_vec_push(out, id)) return false;
        }
    }
    return true;
}

cn_status cn_bpe_tokenize(const cn_tokenizer *t, const char *text, size_t len, cn_tok_vec *out, cn_error *err) {
    char *clean = NULL;
    size_t *offs = NULL, n_words = 0;
    cn_status st = cn_bpe_pretokenize(t, text, len, &clean, &offs, &n_words, err);
    if (st != CN_STATUS_OK) return st;
    size_t longest = 0;
    for (size_t w = 0; w < n_words; w++) longest = CN_MAX(longest, offs[2 * w + 1] - offs[2 * w]);
    bpe_sym *sym = malloc((longest + 1) * sizeof *sym);
    char *enc = malloc(2 * longest + 1); /* every byte-encoded character is 1 or 2 bytes */
    cn_merge_heap h = {0};
    st = CN_STATUS_OK;
    if (!sym || !enc) st = CN_STATUS_NO_MEMORY;
    for (size_t w = 0; w < n_words && st == CN_STATUS_OK; w++) {
        const uint8_t *word = (const uint8_t *)clean + offs[2 * w];
        if (!bpe_word(t, word, offs[2 * w + 1] - offs[2 * w], sym, &h, enc, out)) st = CN_STATUS_NO_MEMORY;
    }
    free(sym);
    free(enc);
    free(h.v);
    free(clean);
    free(offs);
    if (st != CN_STATUS_OK) return cn_err(err, st, "out of memory while tokenizing");
    return st;
}
