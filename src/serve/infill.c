/* infill.c — POST /infill (see infill.h). The request is llama-server's: input_prefix
 * and input_suffix (strings, required), input_extra ([{filename, text}], optional),
 * prompt (a string that continues the prefix), n_predict, and the sampling fields its
 * /completion takes that cinder has (temperature, top_k, top_p, min_p, typical_p,
 * repeat_penalty, presence_penalty, frequency_penalty, seed, stop, stream, ignore_eos,
 * logit_bias). The fields editors send that only tune llama-server itself (cache_prompt:
 * the prefix cache is always on; t_max_prompt_ms, t_max_predict_ms, n_indent, samplers,
 * response_fields, id_slot) are accepted and have no effect. Anything else is a 400
 * naming the field. */
#include "serve/infill.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "serve/validate.h"

/* Copied into the completions body as they are (the names oai_parse knows). */
static const char *const PASS_FIELDS[] = {"model",
                                          "temperature",
                                          "top_k",
                                          "top_p",
                                          "min_p",
                                          "typical_p",
                                          "presence_penalty",
                                          "frequency_penalty",
                                          "repetition_penalty",
                                          "seed",
                                          "stop",
                                          "stream",
                                          "ignore_eos",
                                          "logit_bias",
                                          "max_tokens"};
/* Accepted with no effect (see the top of the file). */
static const char *const IGNORED_FIELDS[] = {"cache_prompt", "t_max_prompt_ms", "t_max_predict_ms", "n_indent",
                                             "samplers",     "response_fields", "id_slot"};
static const char *const OWN_FIELDS[] = {"input_prefix", "input_suffix", "input_extra",
                                         "prompt",       "n_predict",    "repeat_penalty"};

const oai_dialect INFILL_API = {OAI_COMPLETION, "/infill", NULL, 0};

/* input_extra into chunks (views into body). */
static bool parse_extra(json_t *x, cn_fim_chunk **out, size_t *n, oai_error *e) {
    *out = NULL;
    *n = 0;
    if (!x || json_is_null(x)) return true;
    if (!json_is_array(x))
        return val_bad(e, "input_extra", "'input_extra' must be an array of {\"filename\": string, \"text\": string}");
    const size_t cnt = json_array_size(x);
    if (cnt == 0) return true;
    *out = calloc(cnt, sizeof **out);
    if (!*out) return val_oom(e);
    static const char *const keys[] = {"filename", "text"};
    for (size_t i = 0; i < cnt; i++) {
        json_t *c = json_array_get(x, i), *fn = json_object_get(c, "filename"), *text = json_object_get(c, "text");
        if (!json_is_object(c) || !json_is_string(text))
            return val_bad(e, "input_extra", "input_extra[%zu] must be an object with a string \"text\"", i);
        if (fn && !json_is_null(fn) && !json_is_string(fn))
            return val_bad(e, "input_extra", "input_extra[%zu].filename must be a string", i);
        const char *k = val_unknown_key(c, keys, ARRAY_LEN(keys));
        if (k)
            return oai_fail(e, 400, "invalid_request_error", "input_extra", "unsupported_parameter",
                            "unsupported field 'input_extra[%zu].%.40s'", i, k);
        (*out)[i].filename = json_is_string(fn) ? json_string_value(fn) : NULL;
        (*out)[i].text = json_string_value(text);
    }
    *n = cnt;
    return true;
}

/* A string field with no NUL inside (the FIM layout takes C strings). */
static bool get_text(json_t *body, const char *k, bool required, const char **out, oai_error *e) {
    json_t *x = json_object_get(body, k);
    *out = NULL;
    if (!x || json_is_null(x)) {
        if (required) return val_bad(e, k, "'%s' is required", k);
        return true;
    }
    if (!json_is_string(x)) return val_bad(e, k, "'%s' must be a string", k);
    if (strlen(json_string_value(x)) != json_string_length(x))
        return val_bad(e, k, "'%s' must not contain NUL characters", k);
    *out = json_string_value(x);
    return true;
}

/* The completions body: the FIM tokens as the prompt, the passed fields, n_predict as
 * max_tokens (-1: none). */
static json_t *completions_body(json_t *body, const int32_t *ids, size_t n, oai_error *e) {
    json_t *b = json_object(), *p = json_array();
    if (!b || !p) {
        json_decref(b);
        json_decref(p);
        return val_oom(e), NULL;
    }
    for (size_t i = 0; i < n; i++) json_array_append_new(p, json_integer(ids[i]));
    json_object_set_new(b, "prompt", p);
    for (size_t i = 0; i < ARRAY_LEN(PASS_FIELDS); i++) {
        json_t *x = json_object_get(body, PASS_FIELDS[i]);
        if (x) json_object_set(b, PASS_FIELDS[i], x);
    }
    json_t *rp = json_object_get(body, "repeat_penalty");
    if (rp && !json_object_get(body, "repetition_penalty")) json_object_set(b, "repetition_penalty", rp);
    json_t *np = json_object_get(body, "n_predict");
    if (np && !json_is_null(np) && !json_object_get(body, "max_tokens")) {
        const bool minus_one = (json_is_integer(np) && json_integer_value(np) == -1) ||
                               (json_is_real(np) && json_real_value(np) == -1.0);
        if (!minus_one) json_object_set(b, "max_tokens", np); /* -1: until the context is full */
    }
    return b;
}

bool infill_parse(const oai_ctx *c, json_t *body, oai_request *r, api_request *ar, oai_error *e) {
    memset(r, 0, sizeof *r);
    memset(ar, 0, sizeof *ar);
    ar->kind = API_INFILL;
    if (!json_is_object(body)) return val_bad(e, "body", "the body must be a JSON object");
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) {
        if (!val_in_list(k, PASS_FIELDS, ARRAY_LEN(PASS_FIELDS)) &&
            !val_in_list(k, IGNORED_FIELDS, ARRAY_LEN(IGNORED_FIELDS)) &&
            !val_in_list(k, OWN_FIELDS, ARRAY_LEN(OWN_FIELDS)))
            return oai_fail(e, 400, "invalid_request_error", k, "unsupported_parameter",
                            "unsupported field '%s' for /infill", k);
    }
    for (int f = CN_FIM_PRE; f <= CN_FIM_MID; f++)
        if (cn_tokenizer_fim(c->tok, (cn_fim_token)f) < 0)
            return oai_fail(e, 400, "invalid_request_error", NULL, "fim_not_supported",
                            "this model cannot fill in the middle: its vocabulary has no FIM %s token "
                            "(tokenizer.ggml.fim_%s_token_id, or a known text such as <|fim_%s|>)",
                            f == CN_FIM_PRE   ? "prefix"
                            : f == CN_FIM_SUF ? "suffix"
                                              : "middle",
                            f == CN_FIM_PRE   ? "pre"
                            : f == CN_FIM_SUF ? "suf"
                                              : "mid",
                            f == CN_FIM_PRE   ? "prefix"
                            : f == CN_FIM_SUF ? "suffix"
                                              : "middle");
    json_t *np = json_object_get(body, "n_predict");
    if (np && !json_is_null(np) && !json_is_number(np))
        return val_bad(e, "n_predict", "'n_predict' must be an integer");
    cn_fim_params fp = cn_fim_default_params();
    if (!get_text(body, "input_prefix", true, &fp.prefix, e) || !get_text(body, "input_suffix", true, &fp.suffix, e) ||
        !get_text(body, "prompt", false, &fp.prompt, e))
        return false;
    cn_fim_chunk *extra = NULL;
    if (!parse_extra(json_object_get(body, "input_extra"), &extra, &fp.n_extra, e)) {
        free(extra);
        return false;
    }
    fp.extra = extra;
    fp.n_batch = INFILL_N_BATCH;
    /* llama-server: the extra context fills n_ctx - n_batch - 2 * n_predict, with its
     * server-wide n_predict at its default -1 */
    const int64_t room = (int64_t)c->n_ctx - INFILL_N_BATCH + 2;
    fp.n_extra_max = (int32_t)(room > 0 ? room : 0);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    cn_error err = {0};
    const cn_status st = cn_fim_prompt(c->tok, &fp, &ids, &n_ids, &err);
    free(extra);
    if (st == CN_STATUS_NO_MEMORY) return oai_fail(e, 503, "server_error", NULL, NULL, "%s", err.msg);
    if (st != CN_STATUS_OK)
        return oai_fail(e, 400, "invalid_request_error", err.param[0] ? err.param : NULL, NULL, "%s", err.msg);
    json_t *b = completions_body(body, ids, n_ids, e);
    free(ids);
    if (!b) return false;
    /* errors name the fields this request used: llama-server's n_predict and
     * repeat_penalty where they stood for OpenAI's */
    oai_name names[2];
    size_t n_names = 0;
    if (json_object_get(b, "max_tokens") && !json_object_get(body, "max_tokens"))
        names[n_names++] = (oai_name){"max_tokens", "n_predict"};
    if (json_object_get(b, "repetition_penalty") && !json_object_get(body, "repetition_penalty"))
        names[n_names++] = (oai_name){"repetition_penalty", "repeat_penalty"};
    oai_dialect api = INFILL_API;
    api.names = names;
    api.n_names = n_names;
    const bool ok = oai_parse_as(c, &api, b, r, e);
    json_decref(b);
    if (!ok) return false;
    for (int32_t i = 0; i < r->gen.n_stop; i++) {
        ar->stops[i] = strdup(r->stops[i]);
        if (!ar->stops[i]) return val_oom(e);
        ar->n_stops = i + 1;
    }
    return true;
}

json_t *infill_timings_json(const cn_gen_timings *t) {
    const int32_t n_eval = t->n_prompt_tokens - t->n_cached_tokens;
    /* prefill_ms ends at the first token, decode_ms runs from there to the last */
    const double dec_ms = t->decode_ms;
    const int32_t n_dec = t->n_generated_tokens > 1 ? t->n_generated_tokens - 1 : 0;
    return json_pack(
        "{s:i,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:f,s:f,s:f}", "cache_n", t->n_cached_tokens, "prompt_n", n_eval, "prompt_ms",
        t->prefill_ms, "prompt_per_token_ms", n_eval > 0 ? t->prefill_ms / n_eval : 0.0, "prompt_per_second",
        t->prefill_ms > 0 ? 1e3 * n_eval / t->prefill_ms : 0.0, "predicted_n", t->n_generated_tokens, "predicted_ms",
        dec_ms, "predicted_per_token_ms", n_dec > 0 ? dec_ms / n_dec : 0.0, "predicted_per_second",
        n_dec > 0 && dec_ms > 0 ? 1e3 * n_dec / dec_ms : 0.0, "ttft_ms", t->ttft_ms, "queue_ms", t->queue_ms);
}

json_t *infill_json(const infill_out *o) {
    json_t *content = json_stringn(o->content ? o->content : "", o->n_content);
    json_t *res = json_pack("{s:i,s:o,s:[],s:i,s:b,s:s,s:i,s:i}", "index", 0, "content",
                            content ? content : json_string(""), "tokens", "id_slot", 0, "stop", o->done, "model",
                            o->model, "tokens_predicted", o->n_predicted, "tokens_evaluated", o->n_prompt);
    if (!res || !o->done) return res;
    const bool word = o->finish == CN_FINISH_STOP && o->stop_index >= 0;
    const char *type = o->finish == CN_FINISH_LENGTH ? "limit"
                       : word                        ? "word"
                       : o->finish == CN_FINISH_STOP ? "eos"
                                                     : "none";
    json_object_set_new(res, "stop_type", json_string(type));
    json_object_set_new(res, "stopping_word", json_string(word ? o->ar->stops[o->stop_index] : ""));
    json_object_set_new(res, "truncated", json_false());
    json_object_set_new(res, "has_new_line", json_boolean(o->content && memchr(o->content, '\n', o->n_content)));
    json_object_set_new(res, "tokens_cached",
                        json_integer(o->timings ? o->timings->n_cached_tokens + o->timings->n_generated_tokens : 0));
    json_object_set_new(res, "finish_reason", json_string(oai_finish_str(o->finish)));
    if (o->timings) json_object_set_new(res, "timings", infill_timings_json(o->timings));
    return res;
}
