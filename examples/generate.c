/* generate.c — one completion through the public API: load a model, make a context,
 * stream a reply, print its timings.
 *
 *   cc generate.c $(pkg-config --cflags --libs cinder) -o generate
 *   ./generate MODEL.gguf "Once upon a time" [max_tokens] */
#include <stdio.h>
#include <stdlib.h>

#include <cinder.h>

static void on_text(void *user, const char *text, size_t n) {
    (void)user;
    fwrite(text, 1, n, stdout);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT [max_tokens]\n", argv[0]);
        return 2;
    }
    cn_error err = {0};
    cn_model *m = NULL;
    cn_context *c = NULL;
    cn_model_params mp = cn_model_default_params();
    if (cn_model_load(argv[1], &mp, &m, &err) != CN_STATUS_OK) {
        fprintf(stderr, "generate: %s\n", err.msg);
        return 1;
    }
    cn_context_params cp = cn_context_default_params();
    if (cn_context_create(m, &cp, &c, &err) != CN_STATUS_OK) {
        fprintf(stderr, "generate: %s\n", err.msg);
        cn_model_free(m);
        return 1;
    }
    cn_gen_params gp = cn_gen_default_params();
    gp.max_tokens = argc > 3 ? atoi(argv[3]) : 32;
    gp.sampling.temperature = 0; /* greedy: the same reply every run */
    gp.on_text = on_text;
    cn_prompt prompt = {.text = argv[2]};
    cn_result r;
    int rc = 0;
    if (cn_context_generate(c, &prompt, &gp, &r, &err) != CN_STATUS_OK) {
        fprintf(stderr, "generate: %s\n", err.msg);
        rc = 1;
    } else {
        printf("\n");
        fprintf(stderr,
                "cinder %s: %d prompt tokens, %d generated (%s), prefill %.1f tok/s, decode %.1f tok/s, "
                "time to first token %.1f ms\n",
                cn_version(), r.n_prompt_tokens, r.n_tokens, cn_finish_reason_str(r.finish_reason),
                r.timings.prefill_tok_s, r.timings.decode_tok_s, r.timings.ttft_ms);
        cn_result_free(&r);
    }
    cn_context_free(c);
    cn_model_free(m);
    return rc;
}
