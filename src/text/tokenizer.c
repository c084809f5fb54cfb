/* tokenizer.c — builds a tokenizer from tokenizer.ggml.* metadata (token texts, scores,
 * types, special ids and flags, with llama.cpp's defaults per model type), finds the
 * text of special tokens in the input (longest token first, as llama.cpp's
 * tokenizer_st_partition does: control/unknown tokens only when parse_special,
 * user-defined ones always), hands the raw pieces in between to the SentencePiece or
 * BPE code, and turns ids back into bytes (cn_token_to_piece, the incremental cn_detok).
 * Everything read from the file is checked (array types and lengths, id ranges); the
 * token text → id map is a hash table, so a 262k-token vocabulary loads in linear time.
 * It must not know about models beyond the metadata keys. */
#include "text/tokenizer_impl.h"
#include "core/buf.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- token text hash (the probe is cn_tok_lookup, tokenizer_impl.h) --- */

/* Later tokens with the same text replace earlier ones (llama.cpp's map does the same). */
static void hash_insert(cn_tokenizer *t, int32_t id) {
    const char *s = cn_tok_text(t, id);
    size_t n = t->text_len[id];
    uint32_t i = (uint32_t)cn_tok_hash(s, n) & t->hash_mask;
    for (;; i = (i + 1) & t->hash_mask) {
        int32_t o = t->hash[i];
        if (o < 0) break;
        if (t->text_len[o] == n && !memcmp(cn_tok_text(t, o), s, n)) {
            cn_log(CN_LOG_WARN, "tokenizer: tokens %d and %d have the same text; using %d", o, id, id);
            break;
        }
    }
    t->hash[i] = id;
}

/* --- special-token trie --- */

static int32_t trie_child(const cn_tokenizer *t, int32_t node, uint8_t b) {
    if (node < 0) return t->trie_root[b];
    for (int32_t c = t->trie[node].first_child; c >= 0; c = t->trie[c].next_sibling)
        if (t->trie[c].byte == b) return c;
    return -1;
}

static int32_t trie_new_node(cn_tokenizer *t, uint8_t b) {
    if (t->n_trie == INT32_MAX || !CN_GROW(t->trie, t->cap_trie, (size_t)t->n_trie + 1)) return -1;
    t->trie[t->n_trie] = (cn_tok_trie_node){-1, -1, -1, b};
    return t->n_trie++;
}

/* Adds id's text; keeps the first id inserted for a text. False on out of memory. */
static bool trie_insert(cn_tokenizer *t, int32_t id) {
    const uint8_t *s = (const uint8_t *)cn_tok_text(t, id);
    uint32_t n = t->text_len[id];
    int32_t node = -1;
    for (uint32_t i = 0; i < n; i++) {
        int32_t c = trie_child(t, node, s[i]);
        if (c < 0) {
            c = trie_new_node(t, s[i]);
            if (c < 0) return false;
            if (node < 0) {
                t->trie_root[s[i]] = c;
            } else {
                t->trie[c].next_sibling = t->trie[node].first_child;
                t->trie[node].first_child = c;
            }
        }
        node = c;
    }
    if (node >= 0 && t->trie[node].id < 0) t->trie[node].id = id;
    return true;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Special tokens (control, user-defined, unknown) claim input text longest first (ties:
 * lower id first), like llama.cpp's cache_special_tokens order. */
static cn_status build_specials(cn_tokenizer *t, cn_error *err) {
    for (int i = 0; i < 256; i++) t->trie_root[i] = -1;
    t->special_rank = malloc((size_t)t->n_vocab * sizeof *t->special_rank);
    uint64_t *keys = malloc((size_t)t->n_vocab * sizeof *keys);
    cn_status st = CN_STATUS_OK;
    if (!keys || !t->special_rank) {
        st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
        goto done;
    }
    /* key: (length descending, id ascending) */
    size_t n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        t->special_rank[id] = -1;
        if ((t->attr[id] & (CN_TA_SPECIAL | CN_TA_USER_DEFINED)) && t->text_len[id] > 0)
            keys[n++] = (uint64_t)(UINT32_MAX - t->text_len[id]) << 32 | (uint32_t)id;
    }
    qsort(keys, n, sizeof *keys, cmp_u64);
    for (size_t i = 0; i < n; i++) {
        int32_t id = (int32_t)(keys[i] & 0xFFFFFFFFu);
        t->special_rank[id] = (int32_t)i;
        if (!trie_insert(t, id)) {
            st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
            goto done;
        }
    }
done:
    free(keys);
    return st;
}

/* --- loading --- */

void cn_tokenizer_free(cn_tokenizer *t) {
    if (!t) return;
    free(t->pool);
    free(t->text_off);
    free(t->text_len);
    free(t->score);
    free(t->attr);
    free(t->eog);
    free(t->hash);
    free(t->trie);
    free(t->special_rank);
    cn_bpe_free(t);
    free(t);
}

static uint16_t attr_from_type(int64_t type) {
    switch (type) {
    case 1: return CN_TA_NORMAL;
    case 2: return CN_TA_UNKNOWN;
    case 3: return CN_TA_CONTROL;
    case 4: return CN_TA_USER_DEFINED;
    case 5: return CN_TA_UNUSED;
    case 6: return CN_TA_BYTE;
    default: return 0; /* undefined: rendered as nothing, never produced by merges */
    }
}

static bool vtype_is_int(cn_gguf_vtype v) {
    return v == CN_GGUF_UINT8 || v == CN_GGUF_INT8 || v == CN_GGUF_UINT16 || v == CN_GGUF_INT16 ||
           v == CN_GGUF_UINT32 || v == CN_GGUF_INT32 || v == CN_GGUF_UINT64 || v == CN_GGUF_INT64;
}

static cn_status load_tokens(cn_tokenizer *t, const cn_gguf *g, cn_error *err) {
    const char *key = "tokenizer.ggml.tokens";
    int64_t ki = cn_gguf_find_key(g, key);
    if (ki < 0) return cn_err(err, CN_STATUS_NOT_FOUND, "no %s in the file", key);
    cn_gguf_arr a;
    if (!cn_gguf_kv_arr(g, ki, &a) || a.type != CN_GGUF_STRING)
        return cn_err(err, CN_STATUS_CORRUPT, "%s is not an array of strings", key);
    if (a.n == 0) return cn_err(err, CN_STATUS_CORRUPT, "%s is empty", key);
    if (a.n > CN_TOK_MAX_VOCAB)
        return cn_err(err, CN_STATUS_LIMIT, "%s has %llu entries (limit %d)", key, (unsigned long long)a.n,
                      CN_TOK_MAX_VOCAB);
    int32_t n = (int32_t)a.n;
    t->n_vocab = n;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        cn_gguf_str s = cn_gguf_arr_str(&a, (uint64_t)i);
        if (!s.ptr && s.len) return cn_err(err, CN_STATUS_CORRUPT, "%s[%d] is unreadable", key, i);
        total += s.len + 1;
        if (total >= UINT32_MAX) return cn_err(err, CN_STATUS_LIMIT, "%s holds more than 4 GiB of text", key);
    }
    t->pool = malloc((size_t)total);
    t->text_off = malloc((size_t)n * sizeof *t->text_off);
    t->text_len = malloc((size_t)n * sizeof *t->text_len);
    t->score = calloc((size_t)n, sizeof *t->score);
    t->attr = malloc((size_t)n * sizeof *t->attr);
    t->eog = calloc((size_t)n, 1);
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)n) cap *= 2;
    t->hash = malloc((size_t)cap * sizeof *t->hash);
    if (!t->pool || !t->text_off || !t->text_len || !t->score || !t->attr || !t->eog || !t->hash)
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory for %d tokens", n);
    memset(t->hash, 0xFF, (size_t)cap * sizeof *t->hash);
    t->hash_mask = cap - 1;
    uint32_t off = 0;
    for (int32_t i = 0; i < n; i++) {
        cn_gguf_str s = cn_gguf_arr_str(&a, (uint64_t)i);
        if (s.len) memcpy(t->pool + off, s.ptr, s.len);
        t->pool[off + s.len] = 0;
        t->text_off[i] = off;
        t->text_len[i] = (uint32_t)s.len;
        t->attr[i] = CN_TA_NORMAL;
        off += (uint32_t)s.len + 1;
    }

    key = "tokenizer.ggml.scores";
    ki = cn_gguf_find_key(g, key);
    if (ki >= 0) {
        if (!cn_gguf_kv_arr(g, ki, &a) || (a.type != CN_GGUF_FLOAT32 && a.type != CN_GGUF_FLOAT64))
            return cn_err(err, CN_STATUS_CORRUPT, "%s is not an array of floats", key);
        if (a.n != (uint64_t)n)
            return cn_err(err, CN_STATUS_CORRUPT, "%s has %llu entries but there are %d tokens", key,
                          (unsigned long long)a.n, n);
        for (int32_t i = 0; i < n; i++) t->score[i] = (float)cn_gguf_arr_f64(&a, (uint64_t)i);
    }
    key = "tokenizer.ggml.token_type";
    ki = cn_gguf_find_key(g, key);
    if (ki >= 0) {
        if (!cn_gguf_kv_arr(g, ki, &a) || !vtype_is_int(a.type))
            return cn_err(err, CN_STATUS_CORRUPT, "%s is not an array of integers", key);
        if (a.n != (uint64_t)n)
            return cn_err(err, CN_STATUS_CORRUPT, "%s has %llu entries but there are %d tokens", key,
                          (unsigned long long)a.n, n);
        for (int32_t i = 0; i < n; i++) t->attr[i] = attr_from_type(cn_gguf_arr_i64(&a, (uint64_t)i));
    }
    /* Empty texts never match anything (llama.cpp renames them "[EMPTY_i]"). */
    for (int32_t i = 0; i < n; i++)
        if (t->text_len[i]) hash_insert(t, i);
    return CN_STATUS_OK;
}

/* Reads an id key: absent leaves *id; out of range or not an integer warns and leaves it. */
static void read_id(const cn_tokenizer *t, const cn_gguf *g, const char *key, int32_t *id) {
    if (cn_gguf_find_key(g, key) < 0) return;
    uint32_t v;
    if (!cn_gguf_get_u32(g, key, &v) || v >= (uint32_t)t->n_vocab) {
        cn_log(CN_LOG_WARN, "tokenizer: bad %s (not a token id below %d); ignoring it", key, t->n_vocab);
        return;
    }
    *id = (int32_t)v;
}

static void read_flag(const cn_gguf *g, const char *key, bool *flag) {
    if (cn_gguf_find_key(g, key) < 0) return;
    if (!cn_gguf_get_bool(g, key, flag)) cn_log(CN_LOG_WARN, "tokenizer: %s is not a bool; ignoring it", key);
}

/* A token found by its text becomes control (llama.cpp overrides the type of these). */
static int32_t force_control(cn_tokenizer *t, const char *text) {
    int32_t id = cn_tok_lookup(t, text, strlen(text));
    if (id >= 0 && !(t->attr[id] & CN_TA_CONTROL)) {
        cn_log(CN_LOG_DEBUG, "tokenizer: token %d '%s' becomes a control token", id, text);
        t->attr[id] = (uint16_t)((t->attr[id] & (CN_TA_LSTRIP | CN_TA_RSTRIP)) | CN_TA_CONTROL);
    }
    return id;
}

/* First of texts[] present in the vocabulary, made control; -1 if none. */
static int32_t detect(cn_tokenizer *t, const char *const *texts) {
    for (size_t i = 0; texts[i]; i++) {
        int32_t id = cn_tok_lookup(t, texts[i], strlen(texts[i]));
        if (id >= 0) return force_control(t, texts[i]);
    }
    return -1;
}

/* DeepSeek's texts use U+FF5C "｜" and U+2581 "▁". */
#define FWBAR "\xEF\xBD\x9C"
#define LOWBAR "\xE2\x96\x81"

static void set_eog(cn_tokenizer *t) {
    /* clang-format off */
    static const char *const eot_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
        "<" FWBAR "end" LOWBAR "of" LOWBAR "sentence" FWBAR ">", NULL};
    static const char *const eom_texts[] = {"<|eom_id|>", NULL};
    static const char *const fim_texts[][6] = {
        {"<|fim_prefix|>", "<fim-prefix>", "<" FWBAR "fim" LOWBAR "begin" FWBAR ">", "<PRE>", NULL},
        {"<|fim_suffix|>", "<fim-suffix>", "<" FWBAR "fim" LOWBAR "hole" FWBAR ">", "<SUF>", NULL},
        {"<|fim_middle|>", "<fim-middle>", "<" FWBAR "fim" LOWBAR "end" FWBAR ">", "<MID>", NULL},
    };
    /* FIM pad / repo / file separator end generation too. */
    static const char *const fim_end_texts[][6] = {
        {"<|fim_pad|>", "<fim-pad>", "<PAD>", NULL},
        {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL},
        {"<|file_sep|>", NULL},
    };
    /* llama.cpp's list (2025), less "</s>": newer llama.cpp forces that one to control for
     * one model and so breaks Gemma's user-defined "</s>". */
    static const char *const eog_texts[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
        "<|calls|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]",
        "[EOS]", "<|end_of_text|>", "<end_of_utterance>", NULL};
    /* Only when they are control tokens already: elsewhere they may be plain text. */
    static const char *const eog_if_control[] = {"</s>", NULL};
    /* clang-format on */

    if (t->eot < 0) t->eot = detect(t, eot_texts);
    if (t->eom < 0) t->eom = detect(t, eom_texts);
    for (size_t i = 0; i < CN_ARRAY_LEN(fim_texts); i++) detect(t, fim_texts[i]);
    for (size_t i = 0; i < CN_ARRAY_LEN(fim_end_texts); i++) {
        int32_t id = detect(t, fim_end_texts[i]);
        if (id >= 0) t->eog[id] = 1;
    }
    for (size_t i = 0; eog_texts[i]; i++) {
        int32_t id = force_control(t, eog_texts[i]);
        if (id >= 0) t->eog[id] = 1;
    }
    for (size_t i = 0; eog_if_control[i]; i++) {
        int32_t id = cn_tok_lookup(t, eog_if_control[i], strlen(eog_if_control[i]));
        if (id >= 0 && (t->attr[id] & CN_TA_CONTROL)) t->eog[id] = 1;
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;
}

static void set_fim_ids(cn_tokenizer *t, const cn_gguf *g) {
    /* fim pad/rep/sep given by id also end generation. */
    static const char *const keys[] = {"tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
                                       "tokenizer.ggml.fim_sep_token_id"};
    for (size_t i = 0; i < CN_ARRAY_LEN(keys); i++) {
        int32_t id = -1;
        read_id(t, g, keys[i], &id);
        if (id >= 0) t->eog[id] = 1;
    }
}

/* The FIM tokens (src/text/fim.c): by id from the metadata (the newer keys, then the
 * older prefix/suffix/middle ones), else by text as llama.cpp finds them, plus
 * StarCoder2's <repo_name> and <file_sep> (which llama.cpp does not look for). Only
 * looked up: which of them end generation or are control tokens is set_eog's business. */
static void set_fim(cn_tokenizer *t, const cn_gguf *g) {
    static const char *const keys[CN_FIM_N_TOKENS][2] = {
        {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id"},
        {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id"},
        {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id"},
        {"tokenizer.ggml.fim_pad_token_id", NULL},
        {"tokenizer.ggml.fim_rep_token_id", NULL},
        {"tokenizer.ggml.fim_sep_token_id", NULL},
    };
    /* clang-format off */
    static const char *const names[CN_FIM_N_TOKENS][10] = {
        {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<" FWBAR "fim" LOWBAR "begin" FWBAR ">", "<PRE>",
         LOWBAR "<PRE>", "<|code_prefix|>", "<|prefix|>", NULL},
        {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<" FWBAR "fim" LOWBAR "hole" FWBAR ">", "<SUF>",
         LOWBAR "<SUF>", "<|code_suffix|>", "<|suffix|>", NULL},
        {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<" FWBAR "fim" LOWBAR "end" FWBAR ">", "<MID>",
         LOWBAR "<MID>", "<|code_middle|>", "<|middle|>", NULL},
        {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL},
        {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<repo_name>", NULL},
        {"<|file_sep|>", "<file_sep>", NULL},
    };
    /* clang-format on */
    for (int k = 0; k < CN_FIM_N_TOKENS; k++) {
        t->fim[k] = -1;
        for (int j = 0; j < 2 && t->fim[k] < 0; j++)
            if (keys[k][j]) read_id(t, g, keys[k][j], &t->fim[k]);
        for (size_t j = 0; names[k][j] && t->fim[k] < 0; j++)
            t->fim[k] = cn_tok_lookup(t, names[k][j], strlen(names[k][j]));
    }
}

/* Strip attributes llama.cpp sets by model name (they are missing from GGUF files). */
static void set_strip_attrs(cn_tokenizer *t, const cn_gguf *g) {
    cn_gguf_str s;
    char name[128] = "";
    if (cn_gguf_get_str(g, "general.name", &s)) {
        size_t n = CN_MIN(s.len, sizeof name - 1);
        for (size_t i = 0; i < n; i++) name[i] = (char)tolower((unsigned char)s.ptr[i]);
        name[n] = 0;
    }
    if (strstr(t->pre_name, "jina-v2-de") || strstr(t->pre_name, "jina-v2-es") || strstr(t->pre_name, "jina-v2-code")) {
        int32_t id = cn_tok_lookup(t, "<mask>", 6);
        if (id >= 0) t->attr[id] |= CN_TA_LSTRIP;
    } else if (strstr(name, "phi-3") || strstr(name, "phi3")) {
        for (int32_t id = 0; id < t->n_vocab; id++)
            if (t->attr[id] & (CN_TA_SPECIAL | CN_TA_USER_DEFINED)) t->attr[id] |= CN_TA_RSTRIP;
        static const char *const off[] = {"<unk>", "<s>", "<|endoftext|>"};
        int32_t id = cn_tok_lookup(t, "</s>", 4);
        if (id >= 0) t->attr[id] |= CN_TA_RSTRIP;
        for (size_t i = 0; i < CN_ARRAY_LEN(off); i++) {
            id = cn_tok_lookup(t, off[i], strlen(off[i]));
            if (id >= 0) t->attr[id] &= (uint16_t)~CN_TA_RSTRIP;
        }
    }
}

cn_status cn_tokenizer_load(const cn_gguf *g, cn_tokenizer **out, cn_error *err) {
    *out = NULL;
    if (!g) return cn_err(err, CN_STATUS_INVALID_ARG, "no GGUF file given");
    cn_gguf_str model;
    if (cn_gguf_find_key(g, "tokenizer.ggml.model") < 0)
        return cn_err(err, CN_STATUS_NOT_FOUND, "no tokenizer.ggml.model in the file");
    if (!cn_gguf_get_str(g, "tokenizer.ggml.model", &model))
        return cn_err(err, CN_STATUS_CORRUPT, "tokenizer.ggml.model is not a string");
    cn_tok_kind kind;
    if (cn_gguf_str_eq(model, "llama")) kind = CN_TOK_SPM;
    else if (cn_gguf_str_eq(model, "gpt2")) kind = CN_TOK_BPE;
    else
        return cn_err(err, CN_STATUS_UNSUPPORTED, "tokenizer model '%.*s' is not supported (only 'llama' and 'gpt2')",
                      (int)CN_MIN(model.len, 40), model.ptr);

    cn_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory");
    t->kind = kind;
    cn_status st = load_tokens(t, g, err);
    if (st != CN_STATUS_OK) goto fail;

    char pre[64] = "";
    bool have_pre = false;
    cn_gguf_str ps;
    if (cn_gguf_get_str(g, "tokenizer.ggml.pre", &ps)) {
        snprintf(pre, sizeof pre, "%.*s", (int)CN_MIN(ps.len, sizeof pre - 1), ps.ptr);
        have_pre = true;
    }
    t->eot = t->eom = t->sep = t->pad = -1;
    if (kind == CN_TOK_SPM) {
        t->bos = 1;
        t->eos = 2;
        t->unk = 0;
        t->add_bos = true;
        t->add_space_prefix = true;
        snprintf(t->pre_name, sizeof t->pre_name, "%s", have_pre ? pre : "default");
    } else {
        /* llama.cpp defaults BPE BOS/EOS to 11, a GPT-NeoX id; none is the honest default. */
        t->bos = t->eos = t->unk = -1;
        bool bos_none = false;
        st = cn_bpe_load(t, g, have_pre ? pre : NULL, &t->add_bos, &bos_none, err);
        if (st != CN_STATUS_OK) goto fail;
        if (bos_none) t->bos = -1;
    }
    for (int32_t *id = &t->bos; id <= &t->pad; id++)
        if (*id >= t->n_vocab) *id = -1;
    read_flag(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    read_id(t, g, "tokenizer.ggml.bos_token_id", &t->bos);
    read_id(t, g, "tokenizer.ggml.eos_token_id", &t->eos);
    read_id(t, g, "tokenizer.ggml.eot_token_id", &t->eot);
    read_id(t, g, "tokenizer.ggml.eom_token_id", &t->eom);
    read_id(t, g, "tokenizer.ggml.unknown_token_id", &t->unk);
    read_id(t, g, "tokenizer.ggml.seperator_token_id", &t->sep);
    read_id(t, g, "tokenizer.ggml.padding_token_id", &t->pad);
    read_flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
    read_flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos);
    set_eog(t);
    set_fim_ids(t, g);
    set_fim(t, g);
    set_strip_attrs(t, g);

    for (int b = 0; b < 256; b++) {
        char hex[7];
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int32_t id = cn_tok_lookup(t, hex, 6);
        if (id < 0) {
            char c = (char)b;
            id = cn_tok_lookup(t, &c, 1);
        }
        t->byte_tok[b] = id;
    }
    st = build_specials(t, err);
    if (st != CN_STATUS_OK) goto fail;
    *out = t;
    return CN_STATUS_OK;
fail:
    cn_tokenizer_free(t);
    return st;
}

cn_status cn_tokenizer_load_file(const char *path, cn_tokenizer **out, cn_error *err) {
    *out = NULL;
    cn_gguf *g;
    cn_status st = cn_gguf_open(path, &g, err);
    if (st != CN_STATUS_OK) return st;
    st = cn_tokenizer_load(g, out, err);
    cn_gguf_close(g); /* the tokenizer copied what it needs */
    if (st != CN_STATUS_OK && err) {
        char msg[CN_ERROR_MSG_LEN];
        snprintf(msg, sizeof msg, "%s", err->msg);
        cn_err(err, st, "%s: %s", path, msg);
    }
    return st;
}

/* --- accessors --- */

int32_t cn_tokenizer_n_vocab(const cn_tokenizer *t) { return t->n_vocab; }
int32_t cn_tokenizer_bos(const cn_tokenizer *t) { return t->bos; }
int32_t cn_tokenizer_eos(const cn_tokenizer *t) { return t->eos; }
int32_t cn_tokenizer_eot(const cn_tokenizer *t) { return t->eot; }
bool cn_tokenizer_add_bos(const cn_tokenizer *t) { return t->add_bos && t->bos >= 0; }
bool cn_tokenizer_add_eos(const cn_tokenizer *t) { return t->add_eos && t->eos >= 0; }
const char *cn_tokenizer_model(const cn_tokenizer *t) { return t->kind == CN_TOK_SPM ? "llama" : "gpt2"; }
const char *cn_tokenizer_pre(const cn_tokenizer *t) { return t->pre_name; }

bool cn_tokenizer_is_eog(const cn_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab && t->eog[id]; }

int32_t cn_tokenizer_find(const cn_tokenizer *t, const char *text) {
    if (!text || !*text) return -1;
    return cn_tok_lookup(t, text, strlen(text));
}

const char *cn_tokenizer_token_text(const cn_tokenizer *t, int32_t id, size_t *n_bytes) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (n_bytes) *n_bytes = t->text_len[id];
    return cn_tok_text(t, id);
}

cn_token_type cn_tokenizer_token_type(const cn_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return CN_TOKEN_UNDEFINED;
    uint16_t a = t->attr[id];
    if (a & CN_TA_CONTROL) return CN_TOKEN_CONTROL;
    if (a & CN_TA_USER_DEFINED) return CN_TOKEN_USER_DEFINED;
    if (a & CN_TA_UNKNOWN) return CN_TOKEN_UNKNOWN;
    if (a & CN_TA_BYTE) return CN_TOKEN_BYTE;
    if (a & CN_TA_UNUSED) return CN_TOKEN_UNUSED;
    if (a & CN_TA_NORMAL) return CN_TOKEN_NORMAL;
    return CN_TOKEN_UNDEFINED;
}

/* --- tokenize --- */

typedef struct {
    size_t pos;
    uint32_t len;
    int32_t id, rank;
} st_match;

static int cmp_match_rank(const void *a, const void *b) {
    const st_match *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

typedef struct {
    size_t off, len;
    int32_t id; /* -1: raw text */
} fragment;

typedef struct {
    fragment *v;
    size_t n, cap;
} frag_vec;

static bool frag_push(frag_vec *a, size_t off, size_t len, int32_t id) {
    if (!CN_GROW(a->v, a->cap, a->n + 1)) return false;
    a->v[a->n++] = (fragment){off, len, id};
    return true;
}

static int cmp_match_pos(const void *a, const void *b) {
    const st_match *x = a, *y = b;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Cuts text into raw fragments and special tokens. Equivalent to llama.cpp's
 * tokenizer_st_partition: each special token, longest first, takes its leftmost
 * non-overlapping occurrences inside the still-raw text. */
static cn_status partition(const cn_tokenizer *t, const char *text, size_t len, bool parse_special, frag_vec *out) {
    const uint8_t *s = (const uint8_t *)text;
    st_match *m = NULL;
    size_t n_m = 0, cap_m = 0;
    uint8_t *state = NULL; /* 0 raw, 1 a special token, 2 whitespace stripped away */
    cn_status st = CN_STATUS_NO_MEMORY;

    for (size_t p = 0; p < len; p++) {
        int32_t node = t->trie_root[s[p]];
        for (size_t q = p + 1; node >= 0; q++) {
            int32_t id = t->trie[node].id;
            if (id >= 0 && (parse_special || !(t->attr[id] & CN_TA_SPECIAL))) {
                if (!CN_GROW(m, cap_m, n_m + 1)) goto done;
                m[n_m++] = (st_match){p, (uint32_t)(q - p), id, t->special_rank[id]};
            }
            if (q >= len) break;
            node = trie_child(t, node, s[q]);
        }
    }
    if (n_m == 0) {
        st = len && !frag_push(out, 0, len, -1) ? CN_STATUS_NO_MEMORY : CN_STATUS_OK;
        goto done;
    }
    /* Order: special rank (length desc, id asc), then position. */
    qsort(m, n_m, sizeof *m, cmp_match_rank);
    state = calloc(len, 1);
    if (!state) goto done;
    size_t n_acc = 0;
    for (size_t i = 0; i < n_m; i++) {
        size_t p = m[i].pos, e = p + m[i].len;
        bool free_span = true;
        for (size_t j = p; j < e && free_span; j++) free_span = state[j] == 0;
        if (!free_span) continue;
        memset(state + p, 1, e - p);
        uint16_t a = t->attr[m[i].id];
        if (a & CN_TA_LSTRIP)
            for (size_t j = p; j > 0 && state[j - 1] == 0 && isspace(s[j - 1]); j--) state[j - 1] = 2;
        if (a & CN_TA_RSTRIP)
            for (size_t j = e; j < len && state[j] == 0 && isspace(s[j]); j++) state[j] = 2;
        m[n_acc++] = m[i];
    }
    qsort(m, n_acc, sizeof *m, cmp_match_pos);
    size_t cur = 0;
    for (size_t i = 0; i <= n_acc; i++) {
        size_t end = i < n_acc ? m[i].pos : len;
        size_t a = cur, b = end;
        while (a < b && state[a] == 2) a++;
        while (b > a && state[b - 1] == 2) b--;
        if (b > a && !frag_push(out, a, b - a, -1)) goto done;
        if (i < n_acc) {
            if (!frag_push(out, m[i].pos, m[i].len, m[i].id)) goto done;
            cur = m[i].pos + m[i].len;
        }
    }
    st = CN_STATUS_OK;
done:
    free(m);
    free(state);
    return st;
}

/* Every id of text into *out (which the caller frees, also on error). */
static cn_status tokenize_vec(const cn_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                              cn_tok_vec *out_vec, cn_error *err) {
    cn_tok_vec out = {0};
    frag_vec frags = {0};
    cn_status st = CN_STATUS_OK;
    if (add_special && t->add_bos && t->bos >= 0 && !cn_tok_vec_push(&out, t->bos)) goto oom;
    if (len) {
        st = partition(t, text, len, parse_special, &frags);
        if (st != CN_STATUS_OK) goto oom;
    }
    bool prev_special = true; /* SentencePiece: a space before the first piece of text */
    for (size_t i = 0; i < frags.n && st == CN_STATUS_OK; i++) {
        const fragment *f = &frags.v[i];
        if (f->id >= 0) {
            if (!cn_tok_vec_push(&out, f->id)) goto oom;
            prev_special = true;
            continue;
        }
        if (t->kind == CN_TOK_SPM)
            st = cn_spm_tokenize(t, text + f->off, f->len, t->add_space_prefix && prev_special, &out, err);
        else st = cn_bpe_tokenize(t, text + f->off, f->len, &out, err);
        prev_special = false;
    }
    if (st != CN_STATUS_OK) goto fail;
    if (add_special && t->add_eos && t->eos >= 0 && !cn_tok_vec_push(&out, t->eos)) goto oom;
    goto fail;
oom:
    st = cn_err(err, CN_STATUS_NO_MEMORY, "out of memory while tokenizing");
fail:
    *out_vec = out;
    free(frags.v);
    return st;
}

cn_status cn_tokenize(const cn_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                      int32_t *ids, size_t cap, size_t *n_out, cn_error *err) {
    if (n_out) *n_out = 0;
    if (!t || !n_out || (!text && len) || (!ids && cap))
        return cn_err(err, CN_STATUS_INVALID_ARG, "cn_tokenize: missing argument");
    cn_tok_vec out = {0};
    const cn_status st = tokenize_vec(t, text, len, add_special, parse_special, &out, err);
    if (st == CN_STATUS_OK) {
        if (out.n && cap) memcpy(ids, out.v, CN_MIN(out.n, cap) * sizeof *ids);
        *n_out = out.n;
    }
    free(out.v);
    return st;
}

cn_status cn_tokenize_alloc(const cn_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                            int32_t **ids, size_t *n_ids, cn_error *err) {
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!t || !ids || !n_ids || (!text && len))
        return cn_err(err, CN_STATUS_INVALID_ARG, "cn_tokenize_alloc: missing argument");
    cn_tok_vec out = {0};
    const cn_status st = tokenize_vec(t, text, len, add_special, parse_special, &out, err);
    if (st != CN_STATUS_OK || out.n == 0) {
        free(out.v);
        return st;
    }
    *ids = out.v;
    *n_ids = out.n;
    return CN_STATUS_OK;
}

/* --- ids to bytes --- */

static void put(char *buf, size_t cap, size_t *k, const char *p, size_t n) {
    if (*k + n <= cap) memcpy(buf + *k, p, n);
    *k += n;
}

size_t cn_token_to_piece(const cn_tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap) {
    if (!t || id < 0 || id >= t->n_vocab) return 0;
    if (!buf) cap = 0;
    uint16_t a = t->attr[id];
    const char *s = cn_tok_text(t, id);
    size_t n = t->text_len[id], k = 0;
    if (a & CN_TA_SPECIAL) {
        if (render_special) put(buf, cap, &k, s, n);
        return k;
    }
    if (a & CN_TA_USER_DEFINED) {
        put(buf, cap, &k, s, n);
        return k;
    }
    if (t->kind == CN_TOK_SPM) {
        if (a & CN_TA_NORMAL) {
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && !memcmp(s + i, "\xE2\x96\x81", 3)) {
                    put(buf, cap, &k, " ", 1);
                    i += 3;
                } else {
                    put(buf, cap, &k, s + i, 1);
                    i++;
                }
            }
        } else if (a & CN_TA_BYTE) {
            unsigned v;
            char c;
            if (n == 6 && sscanf(s, "<0x%2x>", &v) == 1) {
                c = (char)v;
                put(buf, cap, &k, &c, 1);
            } else {
                put(buf, cap, &k, s, n);
            }
        }
        return k;
    }
    if (a & CN_TA_NORMAL) {
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            size_t l = cn_utf8_decode(s + i, n - i, &cp);
            int b = cn_bpe_cp_to_byte(cp);
            if (b >= 0) {
                char c = (char)b;
                put(buf, cap, &k, &c, 1);
            } else {
                put(buf, cap, &k, s + i, l); /* not a byte character: keep it as it is */
            }
            i += l;
        }
    }
    return k;
}

struct cn_detok {
    const cn_tokenizer *t;
    bool render_special;
    bool strip_space; /* the next non-empty piece loses one leading space */
    uint8_t pend[4];  /* a valid but incomplete UTF-8 sequence */
    size_t n_pend;
    char *out; /* bytes made final by the current call */
    size_t n_out, cap_out;
    char *piece;
    size_t cap_piece;
};

cn_status cn_detok_new(const cn_tokenizer *t, bool render_special, cn_detok **out) {
    *out = NULL;
    if (!t) return CN_STATUS_INVALID_ARG;
    cn_detok *d = calloc(1, sizeof *d);
    if (!d) return CN_STATUS_NO_MEMORY;
    d->t = t;
    d->render_special = render_special;
    d->strip_space = t->kind == CN_TOK_SPM && t->add_space_prefix;
    *out = d;
    return CN_STATUS_OK;
}

void cn_detok_set_strip_space(cn_detok *d, bool strip) { d->strip_space = strip; }

void cn_detok_free(cn_detok *d) {
    if (!d) return;
    free(d->out);
    free(d->piece);
    free(d);
}

static bool out_reserve(cn_detok *d, size_t more) { return CN_GROW(d->out, d->cap_out, d->n_out + more); }

static void out_put(cn_detok *d, const void *p, size_t n) {
    memcpy(d->out + d->n_out, p, n);
    d->n_out += n;
}

static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

/* Appends bytes, emitting complete valid sequences, U+FFFD for invalid ones, holding
 * back a valid prefix. Output is at most 3 bytes per input byte plus the pending ones. */
static bool feed(cn_detok *d, const uint8_t *p, size_t n) {
    if (!out_reserve(d, 3 * n + 8)) return false;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = p[i];
        if (d->n_pend == 0) {
            if (b < 0x80) {
                d->out[d->n_out++] = (char)b;
                continue;
            }
            size_t bad;
            if (cn_utf8_check(&b, 1, &bad) == 0) out_put(d, fffd, 3);
            else d->pend[d->n_pend++] = b;
            continue;
        }
        d->pend[d->n_pend] = b;
        size_t bad;
        int r = cn_utf8_check(d->pend, d->n_pend + 1, &bad);
        if (r > 0) {
            out_put(d, d->pend, (size_t)r);
            d->n_pend = 0;
        } else if (r < 0) {
            d->n_pend++;
        } else {
            out_put(d, fffd, 3); /* the pending bytes were a dead end; b starts afresh */
            d->n_pend = 0;
            i--;
        }
    }
    return true;
}

cn_status cn_detok_push(cn_detok *d, int32_t id, const char **text, size_t *n_bytes) {
    d->n_out = 0;
    *text = "";
    *n_bytes = 0;
    if (id < 0 || id >= d->t->n_vocab) return CN_STATUS_INVALID_ARG;
    size_t n = cn_token_to_piece(d->t, id, d->render_special, d->piece, d->cap_piece);
    if (n > d->cap_piece) {
        char *v = realloc(d->piece, n);
        if (!v) return CN_STATUS_NO_MEMORY;
        d->piece = v;
        d->cap_piece = n;
        n = cn_token_to_piece(d->t, id, d->render_special, d->piece, d->cap_piece);
    }
    const uint8_t *p = (const uint8_t *)d->piece;
    if (n && d->strip_space) {
        d->strip_space = false;
        if (p[0] == ' ') {
            p++;
            n--;
        }
    }
    if (!feed(d, p, n)) return CN_STATUS_NO_MEMORY;
    *text = d->out ? d->out : "";
    *n_bytes = d->n_out;
    return CN_STATUS_OK;
}

cn_status cn_detok_flush(cn_detok *d, const char **text, size_t *n_bytes) {
    d->n_out = 0;
    *text = "";
    *n_bytes = 0;
    if (d->n_pend) {
        if (!out_reserve(d, 3)) return CN_STATUS_NO_MEMORY;
        out_put(d, fffd, 3);
        d->n_pend = 0;
    }
    *text = d->out ? d->out : "";
    *n_bytes = d->n_out;
    return CN_STATUS_OK;
}

cn_status cn_detokenize(const cn_tokenizer *t, const int32_t *ids, size_t n, bool render_special, char **out,
                        size_t *n_out, cn_error *err) {
    *out = NULL;
    if (n_out) *n_out = 0;
    if (!t || (!ids && n)) return cn_err(err, CN_STATUS_INVALID_ARG, "detokenize: no tokenizer or no ids");
    const int32_t n_vocab = cn_tokenizer_n_vocab(t);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return cn_err(err, CN_STATUS_INVALID_ARG, "detokenize: id %zu is %d, outside the vocabulary [0, %d)", i,
                          ids[i], n_vocab);
    cn_detok *d = NULL;
    if (cn_detok_new(t, render_special, &d) != CN_STATUS_OK)
        return cn_err(err, CN_STATUS_NO_MEMORY, "detokenize: out of memory");
    cn_buf b = {0};
    cn_status st = CN_STATUS_OK;
    for (size_t i = 0; i <= n && st == CN_STATUS_OK; i++) {
        const char *p;
        size_t k = 0;
        st = i < n ? cn_detok_push(d, ids[i], &p, &k) : cn_detok_flush(d, &p, &k);
        if (st == CN_STATUS_OK && !cn_buf_put(&b, p, k)) st = CN_STATUS_NO_MEMORY;
    }
    cn_detok_free(d);
    size_t used = 0;
    char *buf = st == CN_STATUS_OK ? cn_buf_take(&b, &used) : NULL;
    cn_buf_free(&b);
    if (st == CN_STATUS_OK && !buf) st = CN_STATUS_NO_MEMORY;
    if (st != CN_STATUS_OK)
        return cn_err(err, st, "detokenize: %s", st == CN_STATUS_NO_MEMORY ? "out of memory" : "failed");
    *out = buf;
    if (n_out) *n_out = used;
    return CN_STATUS_OK;
}
