/* engine.c — a few requests at once through the batched engine: every step runs one
 * forward pass over all of them, and each request's text arrives through callbacks.
 *
 *   cc engine.c $(pkg-config --cflags --libs cinder) -o engine
 *   ./engine MODEL.gguf */
#include <stdio.h>
#include <string.h>

#include <cinder.h>

#define N_REQ 3

typedef struct {
    char text[N_REQ][1024];
    size_t n[N_REQ];
    cn_finish_reason finish[N_REQ];
} replies;

typedef struct {
    replies *r;
    int i;
} slot;

static void on_text(void *user, uint64_t id, int32_t index, const char *text, size_t n) {
    (void)id;
    (void)index;
    slot *s = user;
    size_t *len = &s->r->n[s->i];
    if (*len + n < sizeof s->r->text[0]) {
        memcpy(s->r->text[s->i] + *len, text, n);
        *len += n;
    }
}

static void on_finish(void *user, uint64_t id, int32_t index, cn_finish_reason reason, const cn_gen_timings *t) {
    (void)id;
    (void)index;
    (void)t;
    slot *s = user;
    s->r->finish[s->i] = reason;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
        return 2;
    }
    static const char *const prompts[N_REQ] = {"Once upon a time", "The little dog", "In a small town"};
    cn_error err = {0};
    cn_model *m = NULL;
    cn_engine *e = NULL;
    cn_model_params mp = cn_model_default_params();
    cn_engine_params ep = cn_engine_default_params();
    ep.n_ctx = 256;
    if (cn_model_load(argv[1], &mp, &m, &err) != CN_STATUS_OK || cn_engine_create(m, &ep, &e, &err) != CN_STATUS_OK) {
        fprintf(stderr, "engine: %s\n", err.msg);
        cn_model_free(m);
        return 1;
    }
    replies r = {0};
    slot slots[N_REQ];
    for (int i = 0; i < N_REQ; i++) {
        slots[i] = (slot){&r, i};
        cn_engine_request q = cn_engine_request_default_params();
        q.prompt = prompts[i];
        q.gen.max_tokens = 24;
        q.gen.sampling.temperature = 0;
        cn_engine_callbacks cb = {.on_text = on_text, .on_finish = on_finish, .user = &slots[i]};
        uint64_t id;
        if (cn_engine_submit(e, &q, &cb, &id, &err) != CN_STATUS_OK) {
            fprintf(stderr, "engine: %s\n", err.msg);
            return 1;
        }
    }
    int32_t rows = 1;
    int steps = 0;
    while (rows > 0) {
        if (cn_engine_step(e, &rows, &err) != CN_STATUS_OK) {
            fprintf(stderr, "engine: %s\n", err.msg);
            return 1;
        }
        steps += rows > 0;
    }
    for (int i = 0; i < N_REQ; i++)
        printf("[%d] %s%.*s (%s)\n", i, prompts[i], (int)r.n[i], r.text[i], cn_finish_reason_str(r.finish[i]));
    cn_engine_stats st;
    cn_engine_get_stats(e, &st);
    printf("%d requests in %d steps (%lld rows), %lld tokens generated\n", N_REQ, steps, (long long)st.n_rows,
           (long long)st.n_generated);
    cn_engine_free(e);
    cn_model_free(m);
    return 0;
}
