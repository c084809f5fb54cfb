/* run.c — `cinder run`: one prompt through a cn_context. Text streams to stdout as it
 * becomes final and one timing summary goes to stderr; with --json, one JSON object
 * (text, finish reason, token counts, timings, logprobs, beam and speculation figures
 * when asked) goes to stdout instead. --chat sends the prompt as a user message (the
 * context renders the chat template and stops at the end of turn); --beams N runs beam
 * search; --draft / --lookup speculate; --json-schema, --json-object, --grammar, --regex
 * and --choice constrain the output (grammar.c compiles them against the model's
 * tokenizer). --fim-prefix / --fim-suffix fill a hole: the prompt is the model's FIM
 * tokens laid out as the server's /infill lays them out (cn_fim_prompt), -p if given
 * continuing the prefix. Argument handling and output only: the loop, stopping, sampling and
 * grammars are the library's (cn_context_generate). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "genopts.h"
#include "grammar_opts.h"

#define RUN_GROUPS (CLI_G_MODEL | CLI_G_PROMPT | CLI_G_RUN | CLI_G_CHAT | CLI_G_GEN | CLI_G_SAMPLING | CLI_G_SPEC)

static const char k_usage[] = "usage: cinder run [-m MODEL] -p PROMPT [options]\n"
                              "       cinder run [-m MODEL] --fim-prefix TEXT --fim-suffix TEXT [-p START] [options]\n"
                              "  generates a continuation of PROMPT (or the middle between a prefix and a suffix):\n"
                              "  text to stdout, one timing summary to stderr\n\n";

/* --fim-prefix / --fim-suffix: the hole's FIM prompt as token ids (*ids malloc'ed). The
 * budget is /infill's: 2048 tokens for prefix and suffix, the rest of the context for
 * the repository lines. */
static int fim_tokens(const cn_context *c, const char *prefix, const char *suffix, const char *start, int32_t **ids,
                      int32_t *n) {
    cn_fim_params fp = cn_fim_default_params();
    fp.prefix = prefix;
    fp.suffix = suffix;
    fp.prompt = start;
    const int64_t room = (int64_t)cn_context_n_ctx(c) - fp.n_batch + 2;
    fp.n_extra_max = (int32_t)(room > 0 ? room : 0);
    size_t k = 0;
    cn_error err = {0};
    if (cn_fim_prompt(cn_context_tokenizer(c), &fp, ids, &k, &err) != CN_STATUS_OK) {
        cn_cli_errorf("run: --fim-prefix/--fim-suffix: %s", err.msg);
        return 1;
    }
    *n = (int32_t)k;
    return 0;
}

/* Bytes as a JSON string, made valid UTF-8 by the library (a token's piece may be part
 * of a character). */
static json_t *json_bytes_str(const char *s, size_t n) {
    char *clean = NULL;
    size_t k = 0;
    if (cn_text_utf8_clean(s, n, &clean, &k, NULL) != CN_STATUS_OK) return json_null();
    json_t *j = json_stringn(clean, k);
    free(clean);
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

static int print_json(const cli_gen_opts *o, const cn_context *c, const cn_result *r) {
    const cn_gen_timings *t = &r->timings;
    const cn_tokenizer *tok = cn_context_tokenizer(c);
    json_t *tokens = json_array();
    for (int32_t i = 0; i < r->n_tokens; i++) json_array_append_new(tokens, json_integer(r->tokens[i].id));
    json_t *root = json_pack(
        "{s:o, s:s, s:i, s:i, s:i, s:o, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "text",
        json_stringn(r->text, r->n_text), "finish_reason", cn_finish_reason_str(r->finish_reason), "n_prompt_tokens",
        t->n_prompt_tokens, "n_cached_tokens", t->n_cached_tokens, "n_generated_tokens", t->n_generated_tokens,
        "tokens", tokens, "queue_ms", t->queue_ms, "prefill_ms", t->prefill_ms, "ttft_ms", t->ttft_ms, "decode_ms",
        t->decode_ms, "total_ms", t->total_ms, "itl_mean_ms", t->itl_mean_ms, "itl_p50_ms", t->itl_p50_ms, "itl_p90_ms",
        t->itl_p90_ms, "itl_p99_ms", t->itl_p99_ms, "prefill_tok_s", t->prefill_tok_s, "decode_tok_s", t->decode_tok_s);
    if (!root) {
        cn_cli_errorf("run: could not build the JSON output");
        return 1;
    }
    /* < 2^63: the CLI takes and picks seeds in jansson's int64 range */
    json_object_set_new(root, "seed", json_integer((json_int_t)r->seed));
    json_object_set_new(root, "n_ctx", json_integer(cn_context_n_ctx(c)));
    json_object_set_new(root, "stop_index", json_integer(r->stop_index));
    const cn_gen_params *g = &o->gp;
    if (g->sampling.n_logprobs >= 0) {
        json_t *lp = json_array();
        for (int32_t i = 0; i < r->n_tokens; i++) {
            const cn_gen_token *ti = &r->tokens[i];
            json_t *entry = json_token(tok, ti->id, ti->logprob);
            json_t *top = json_array();
            for (int32_t k = 0; k < ti->n_top; k++)
                json_array_append_new(top, json_token(tok, ti->top[k].id, ti->top[k].logprob));
            json_object_set_new(entry, "top_logprobs", top);
            json_array_append_new(lp, entry);
        }
        json_object_set_new(root, "logprobs", lp);
        json_object_set_new(root, "logprobs_distribution",
                            json_string(g->logprobs_after_chain && g->beam.n_beams == 1 ? "after_chain" : "raw"));
    }
    if (g->beam.n_beams > 1)
        json_object_set_new(root, "beam",
                            json_pack("{s:i, s:f, s:f, s:f, s:i}", "n_beams", (int)g->beam.n_beams, "length_penalty",
                                      (double)g->beam.length_penalty, "score", r->beam_score, "sum_logprob",
                                      r->beam_sum_logprob, "n_finished", (int)r->beam_n_finished));
    if (g->draft || g->lookup_n > 0)
        json_object_set_new(root, "speculation",
                            json_pack("{s:s, s:I, s:I, s:I, s:I, s:I}", "drafter", g->draft ? "model" : "lookup",
                                      "target_passes", (json_int_t)r->spec_target_passes, "drafted",
                                      (json_int_t)r->spec_drafted, "accepted", (json_int_t)r->spec_accepted,
                                      "plain_passes", (json_int_t)r->spec_plain_passes, "draft_passes",
                                      (json_int_t)r->spec_draft_passes));
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

int cn_cli_run(int argc, char **argv) {
    cli_gen_opts o;
    cli_gen_opts_init(&o, "run");
    cli_grammar_opts go;
    memset(&go, 0, sizeof go);
    const cli_flag_group grammar_group = cli_grammar_group(&go);
    size_t n_groups;
    const cli_flag_group *gen_groups = cli_gen_groups(&o, RUN_GROUPS, &grammar_group, &n_groups);
    const char *fim_prefix = NULL, *fim_suffix = NULL;
    const cli_flag fim[] = {
        CLI_F_STR("--fim-prefix", NULL, &fim_prefix, "TEXT", "fill in the middle: the text before the hole"),
        CLI_F_STR("--fim-suffix", NULL, &fim_suffix, "TEXT",
                  "... and the text after it (-p, if given, starts the middle)"),
    };
    cli_flag_group groups[16];
    if (n_groups + 1 > sizeof groups / sizeof groups[0]) return 1;
    memcpy(groups, gen_groups, n_groups * sizeof *groups);
    groups[n_groups++] = CLI_GROUP("fill in the middle (code models with FIM tokens)", fim);
    const int pr = cli_flags_parse("run", k_usage, groups, n_groups, argc, argv, NULL, 0, &(int){0});
    if (pr) return CLI_FLAGS_EXIT(pr);
    const bool fill = fim_prefix || fim_suffix;
    if (!o.prompt && !fill) {
        cn_cli_errorf("run: no prompt: give -p PROMPT, or --fim-prefix/--fim-suffix (see 'cinder run --help')");
        return 2;
    }
    if (fill && o.chat) {
        cn_cli_errorf("run: --chat does not combine with --fim-prefix/--fim-suffix");
        return 2;
    }
    if (cli_gen_opts_check(&o, NULL, NULL) || cli_grammar_check_opts("run", &go)) return 2;
    if (cli_grammar_given(&go) && o.gp.beam.n_beams > 1) {
        cn_cli_errorf("run: a grammar does not combine with --beams");
        return 2;
    }

    cli_session s;
    cn_result r = {0};
    cn_grammar *grammar = NULL;
    int32_t *fim_ids = NULL;
    int rc = cli_session_open(&s, &o);
    if (rc) goto done;
    if ((rc = cli_grammar_compile("run", &go, cn_context_tokenizer(s.ctx), &grammar))) goto done;
    o.gp.grammar = grammar;
    cn_chat_msg msgs[2];
    cn_prompt prompt = {.text = o.prompt};
    if (fill) {
        int32_t n_ids = 0;
        rc = fim_tokens(s.ctx, fim_prefix, fim_suffix, o.prompt, &fim_ids, &n_ids);
        if (rc) goto done;
        prompt = (cn_prompt){.tokens = fim_ids, .n_tokens = n_ids};
    } else if (o.chat) {
        size_t n = 0;
        if (o.system) msgs[n++] = (cn_chat_msg){"system", o.system};
        msgs[n++] = (cn_chat_msg){"user", o.prompt};
        prompt = (cn_prompt){.messages = msgs, .n_messages = n};
    }
    bool streamed = false;
    if (!o.json) o.gp.on_text = cli_stream_text, o.gp.user = &streamed;
    cn_error err = {0};
    const cn_status st = cli_generate(s.ctx, &prompt, &o.gp, &r, &err);
    rc = 1;
    if (st != CN_STATUS_OK) {
        if (streamed) fputc('\n', stdout);
        cn_cli_errorf("run: %s", err.msg);
        goto done;
    }
    if (o.json) {
        rc = print_json(&o, s.ctx, &r);
    } else {
        fputc('\n', stdout);
        fflush(stdout);
        cli_print_timings(&r);
        if (o.gp.draft || o.gp.lookup_n > 0) cli_print_spec(&r);
        rc = 0;
    }
done:
    free(fim_ids);
    cn_result_free(&r);
    cn_grammar_free(grammar); /* before the context: it borrows the context's tokenizer */
    cli_session_close(&s);
    return rc;
}
