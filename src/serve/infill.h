/* infill.h — llama-server's fill-in-the-middle endpoint, POST /infill: its request
 * (input_prefix, input_suffix, input_extra, prompt, n_predict and the sampling fields)
 * becomes a completions request whose prompt is the FIM tokens (cn_fim_prompt: the same
 * layout and budget as llama-server), parsed by oai_parse so every value is checked in
 * one place; and its response shapes (content, stop, stop_type, timings, ...).
 *
 * Pure translation like openai.c: no sockets, no threads, no engine calls. */
#ifndef CN_SERVE_INFILL_H
#define CN_SERVE_INFILL_H

#include "serve/apis.h"

/* llama-server's default --batch-size: the prefix + suffix budget of a hole. */
#define INFILL_N_BATCH 2048

/* /infill's own names of OpenAI's fields: none but its endpoint; a request that uses
 * n_predict or repeat_penalty has them spelled so too (infill_parse). */
extern const oai_dialect INFILL_API;

/* body to r (through oai_parse_as); ar keeps the stop strings (to say which one ended it).
 * A model without FIM tokens is a 400 that says so. */
bool infill_parse(const oai_ctx *c, json_t *body, oai_request *r, api_request *ar, oai_error *e);

/* What the response needs of a finished (or running) completion. */
typedef struct {
    const char *model;
    const char *content; /* the text (streaming: this chunk's) */
    size_t n_content;
    int32_t n_prompt; /* tokens evaluated (the whole prompt) */
    bool done;        /* the final object (stop: true) */
    cn_finish_reason finish;
    int32_t stop_index;            /* the stop string that ended it, or -1 */
    const api_request *ar;         /* its stop strings */
    const cn_gen_timings *timings; /* may be NULL while streaming */
    int32_t n_predicted;           /* tokens generated so far */
} infill_out;

/* One object as llama-server writes it: a streamed chunk ({content, stop: false, ...}) or
 * the final one ({content, stop: true, stop_type, stopping_word, tokens_cached, timings,
 * ...}). */
json_t *infill_json(const infill_out *o);

/* llama-server's "timings" object (cache_n, prompt_n, prompt_ms, ..., predicted_per_second)
 * with cinder's time to first token and queue time beside them. */
json_t *infill_timings_json(const cn_gen_timings *t);

#endif
