/* decode.c — the low tier: drive the model yourself, as llama.cpp's simple example does
 * with llama_batch + llama_decode. The prompt goes in as one batch; then each greedy
 * token (the largest logit) is fed back as a one-row batch until n tokens or an
 * end-of-generation token.
 *
 *   cc decode.c $(pkg-config --cflags --libs cinder) -o decode
 *   ./decode MODEL.gguf "Once upon a time" [n] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cinder.h>

static int32_t greedy(const float *logits, int32_t n_vocab) {
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT [n]\n", argv[0]);
        return 2;
    }
    const int n_gen = argc > 3 ? atoi(argv[3]) : 32;
    cn_error err = {0};
    cn_model *m = NULL;
    cn_context *c = NULL;
    cn_batch b = {0};
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = 1;
    cn_model_params mp = cn_model_default_params();
    cn_context_params cp = cn_context_default_params();
    cp.n_ctx = 512;
    if (cn_model_load(argv[1], &mp, &m, &err) != CN_STATUS_OK || cn_context_create(m, &cp, &c, &err) != CN_STATUS_OK)
        goto out;
    const cn_tokenizer *tok = cn_context_tokenizer(c);
    if (cn_tokenize_alloc(tok, argv[2], strlen(argv[2]), true, true, &ids, &n_ids, &err) != CN_STATUS_OK ||
        cn_batch_init(&b, (int32_t)n_ids + 1, &err) != CN_STATUS_OK)
        goto out;
    for (size_t i = 0; i < n_ids; i++) cn_batch_add(&b, ids[i], (int32_t)i, 0, i + 1 == n_ids);
    int32_t pos = (int32_t)n_ids;
    for (int k = 0; k < n_gen; k++) {
        if (cn_context_decode(c, &b, &err) != CN_STATUS_OK) goto out;
        const int32_t next = greedy(cn_context_logits_row(c, 0), cn_context_n_vocab(c));
        if (cn_tokenizer_is_eog(tok, next)) break;
        char piece[256];
        const size_t n = cn_token_to_piece(tok, next, false, piece, sizeof piece);
        fwrite(piece, 1, n <= sizeof piece ? n : 0, stdout);
        fflush(stdout);
        cn_batch_clear(&b);
        cn_batch_add(&b, next, pos++, 0, true);
    }
    putchar('\n');
    rc = 0;
out:
    if (rc) fprintf(stderr, "decode: %s\n", err.msg);
    free(ids);
    cn_batch_free(&b);
    cn_context_free(c);
    cn_model_free(m);
    return rc;
}
