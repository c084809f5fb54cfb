/* run.c — `cinder run`: one prompt through the generation loop (src/gen). Text streams to
 * stdout as it becomes final and one timing summary goes to stderr; with --json, one JSON
 * object (text, finish reason, token counts, timings, logprobs when asked) goes to stdout
 * instead. --chat wraps the prompt in the model's chat template as a user message;
 * --beams N runs beam search. Argument handling and output only: the loop, stopping and
 * sampling are the library's (cn_generate, cn_beam_search). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/core.h"
#include "gen/beam.h"
#include "genopts.h"

static void usage(FILE *f) {
    fprintf(f, "usage: cinder run [-m MODEL] -p PROMPT [options]\n"
               "  generates a continuation of PROMPT: text to stdout, one timing summary to stderr\n"
               "  --json                    print one JSON object instead (text, finish_reason, timings)\n"
               "  --chat                    apply the model's chat template to PROMPT as a user message\n");
    cli_gen_opts_help(f);
}

static void stream_text(void *user, const char *text, size_t n) {
    (void)user;
    fwrite(text, 1, n, stdout);
    fflush(stdout);
}

/* Bytes as a JSON-safe string: invalid UTF-8 bytes become U+FFFD (a token's piece may be
 * part of a character). */
static json_t *json_bytes_str(const char *s, size_t n) {
    char *buf = malloc(3 * n + 1);
    if (!buf) return json_null();
    size_t k = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t len = u[i] < 0x80 ? 1 : (u[i] & 0xE0) == 0xC0 ? 2 : (u[i] & 0xF0) == 0xE0 ? 3 : (u[i] & 0xF8) == 0xF0 ? 4 : 0;
        bool ok = len > 0 && i + len <= n;
        for (size_t j = 1; ok && j < len; j++) ok = (u[i + j] & 0xC0) == 0x80;
        if (ok && len > 1) { /* overlong, surrogates, > U+10FFFF */
            uint32_t cp = u[i] & (0x7F >> len);
            for (size_t j = 1; j < len; j++) cp = (cp << 6) | (u[i + j] & 0x3F);
            const uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
            ok = cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
        }
        if (ok) {
            memcpy(buf + k, s + i, len);
            k += len;
            i += len;
        } else {
            memcpy(buf + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        }
    }
    json_t *j = json_stringn(buf, k);
    free(buf);
    return j ? j : json_null();
}

static json_t *json_token(const cn_tokenizer *tok, int32_t id, float logprob) {
    char piece[256];
    size_t n = cn_token_to_piece(tok, id, true, piece, sizeof piece);
    if (n > sizeof piece) n = 0;
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)piece[i]));
    return json_pack("{s:i, s:o, s:o, s:f}", "id", (int)id, "token", json_bytes_str(piece, n), "bytes", bytes,
                     "logprob", (double)logprob);
}

static int print_json(const cli_gen_opts *o, const cli_engine *e, const cn_gen *g, const cn_beam_result *beam,
                      const cn_spec_stats *spec) {
    cn_gen_timings t;
    cn_gen_get_timings(g, &t);
    size_t n_text;
    const char *text = cn_gen_text(g, &n_text);
    int32_t n_tok;
    const int32_t *ids = cn_gen_tokens(g, &n_tok);
    json_t *tokens = json_array();
    for (int32_t i = 0; i < n_tok; i++) json_array_append_new(tokens, json_integer(ids[i]));
    json_t *root = json_pack(
        "{s:o, s:s, s:i, s:i, s:i, s:o, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
        "text", json_stringn(text, n_text), "finish_reason", cn_finish_reason_str(cn_gen_finish_reason(g)),
        "n_prompt_tokens", t.n_prompt_tokens, "n_cached_tokens", t.n_cached_tokens, "n_generated_tokens",
        t.n_generated_tokens, "tokens", tokens, "queue_ms", t.queue_ms, "prefill_ms", t.prefill_ms, "ttft_ms",
        t.ttft_ms, "decode_ms", t.decode_ms, "total_ms", t.total_ms, "itl_mean_ms", t.itl_mean_ms, "itl_p50_ms",
        t.itl_p50_ms, "itl_p90_ms", t.itl_p90_ms, "itl_p99_ms", t.itl_p99_ms, "prefill_tok_s", t.prefill_tok_s,
        "decode_tok_s", t.decode_tok_s);
    if (!root) {
        cn_cli_errorf("run: could not build the JSON output");
        return 1;
    }
    /* < 2^63: the CLI takes and picks seeds in jansson's int64 range */
    json_object_set_new(root, "seed", json_integer((json_int_t)cn_sampler_seed(cn_gen_sampler((cn_gen *)g))));
    json_object_set_new(root, "n_ctx", json_integer(e->n_ctx));
    json_object_set_new(root, "stop_index", json_integer(cn_gen_stop_index(g)));
    if (o->gp.sampling.n_logprobs >= 0) {
        json_t *lp = json_array();
        int32_t n;
        const cn_gen_token *ti = cn_gen_token_info(g, &n);
        for (int32_t i = 0; i < n; i++) {
            json_t *entry = json_token(e->tok, ti[i].id, ti[i].logprob);
            json_t *top = json_array();
            for (int32_t k = 0; k < ti[i].n_top; k++)
                json_array_append_new(top, json_token(e->tok, ti[i].top[k].id, ti[i].top[k].logprob));
            json_object_set_new(entry, "top_logprobs", top);
            json_array_append_new(lp, entry);
        }
        json_object_set_new(root, "logprobs", lp);
        json_object_set_new(root, "logprobs_distribution",
                            json_string(o->gp.logprobs_after_chain && o->gp.beam.n_beams == 1 ? "after_chain" : "raw"));
    }
    if (beam)
        json_object_set_new(root, "beam",
                            json_pack("{s:i, s:f, s:f, s:f, s:i}", "n_beams", (int)o->gp.beam.n_beams,
                                      "length_penalty", (double)o->gp.beam.length_penalty, "score", beam->score,
                                      "sum_logprob", beam->sum_logprob, "n_finished", (int)beam->n_finished));
    if (spec)
        json_object_set_new(root, "speculation",
                            json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "drafter", o->spec.draft ? "model" : "lookup",
                                      "target_passes", (json_int_t)spec->steps, "drafted", (json_int_t)spec->drafted,
                                      "accepted", (json_int_t)spec->accepted, "plain_passes",
                                      (json_int_t)spec->plain_steps, "draft_passes", (json_int_t)spec->draft_evals));
    char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (!s) {
        cn_cli_errorf("run: could not write the JSON output");
        return 1;
    }
    puts(s);
    free(s);
    return 0;
}

/* The prompt text: -p itself, or -p as a user message in the chat template. */
static char *prompt_text(cli_gen_opts *o, const cli_engine *e) {
    if (!o->chat) return strdup(o->prompt);
    cn_chat_template *t = cli_chat_template(e, o);
    if (!t) return NULL;
    char *out = NULL;
    if (cli_add_end_of_turn_stop(o, e, t) == 0) {
        cn_chat_msg msgs[2];
        size_t n = 0;
        if (o->system) msgs[n++] = (cn_chat_msg){"system", o->system};
        msgs[n++] = (cn_chat_msg){"user", o->prompt};
        cn_error err = {0};
        if (cn_chat_render(t, msgs, n, true, &out, NULL, &err) != CN_STATUS_OK) {
            cn_cli_errorf("run: %s", err.msg);
            out = NULL;
        }
    }
    cn_chat_template_free(t);
    return out;
}

int cn_cli_run(int argc, char **argv) {
    cli_gen_opts o;
    cli_gen_opts_init(&o, "run");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        const int r = cli_gen_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            cn_cli_errorf("run: unknown option '%s' (see 'cinder run --help')", argv[i]);
            return 2;
        }
    }
    if (!o.prompt) {
        cn_cli_errorf("run: no prompt: give -p PROMPT (see 'cinder run --help')");
        return 2;
    }
    if (cli_gen_opts_check(&o)) return 2;

    int rc = 1;
    cli_engine e, de = {0};
    char *text = NULL;
    int32_t *ids = NULL;
    cn_gen *g = NULL;
    cn_error err = {0};
    if (cli_engine_load(&e, &o)) goto done;
    if (cn_gen_validate(&o.gp, e.n_vocab, &err) != CN_STATUS_OK) { /* token ids against the vocabulary */
        cn_cli_errorf("run: %s", err.msg);
        rc = 2;
        goto done;
    }
    if (!(text = prompt_text(&o, &e))) {
        rc = o.chat_template ? 2 : 1; /* a bad --chat-template NAME is a usage error */
        goto done;
    }
    int32_t n_prompt = 0;
    if (!(ids = cli_tokenize(&e, text, &n_prompt))) goto done;
    if (n_prompt == 0) {
        cn_cli_errorf("run: the prompt is empty (no tokens)");
        goto done;
    }
    if (n_prompt >= e.n_ctx) {
        cn_cli_errorf("run: the prompt is %d tokens and the context holds %d: no room to generate "
                      "(use a shorter prompt or a larger --ctx)",
                      (int)n_prompt, (int)e.n_ctx);
        goto done;
    }
    const int32_t k = o.gp.beam.n_beams;
    const int32_t n_batch = CN_MAX(CN_MIN(n_prompt, 512), k);
    int64_t n_blocks = 0;
    if (k > 1) { /* the prompt once, then each beam's own blocks (plus one copied on write) */
        const int64_t bt = cn_model_kv_params(e.model).block_tokens;
        const int64_t gen = CN_MIN((int64_t)o.gp.max_tokens, (int64_t)e.n_ctx - n_prompt);
        n_blocks = (n_prompt + bt - 1) / bt + k * ((gen + bt - 1) / bt + 2);
    }
    if (cli_engine_start(&e, &o, CN_MAX(n_batch, CN_SPEC_MAX_DRAFT + 1), k, n_blocks)) goto done;
    if ((rc = cli_spec_start(&e, &de, &o)) != 0) goto done;
    rc = 1;

    if (!o.json) o.gp.on_text = stream_text;
    o.gp.should_cancel = cli_sigint_cancel;
    if (cn_gen_create(e.tok, e.n_vocab, &o.gp, &g, &err) != CN_STATUS_OK) {
        cn_cli_errorf("run: %s", err.msg);
        rc = err.status == CN_STATUS_INVALID_ARG ? 2 : 1;
        goto done;
    }
    cli_sigint_arm();
    cn_beam_result beam;
    cn_spec_stats ss = {0};
    const bool spec = o.spec.draft || o.spec.lookup_n > 0;
    cn_status st = k > 1 ? cn_beam_search(&e.run, 0, ids, n_prompt, g, &beam, &err)
                         : cn_generate_spec(&e.run, &o.spec, 0, ids, n_prompt, 0, g, &ss, &err);
    cli_sigint_disarm();
    if (st != CN_STATUS_OK) {
        if (!o.json) fputc('\n', stdout);
        cn_cli_errorf("run: %s", err.msg);
        goto done;
    }
    if (o.json) {
        rc = print_json(&o, &e, g, k > 1 ? &beam : NULL, spec ? &ss : NULL);
    } else {
        fputc('\n', stdout);
        fflush(stdout);
        cn_gen_timings t;
        cn_gen_get_timings(g, &t);
        cli_print_timings(&t, cn_gen_finish_reason(g));
        if (spec) cli_print_spec(&ss);
        rc = 0;
    }
done:
    cn_gen_free(g);
    free(ids);
    free(text);
    cli_engine_close(&de);
    cli_engine_close(&e);
    return rc;
}
