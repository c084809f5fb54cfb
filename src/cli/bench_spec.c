/* bench_spec.c — `cinder bench --spec`: speculative decoding against plain decoding on
 * one model, in the same process, interleaved: -r rounds, each a plain greedy run and a
 * speculative one (--draft MODEL or --lookup N) of -n tokens on a built-in prompt (--task
 * edit: an input-grounded edit of a C function; --task code: the start of a Python
 * module), end of text ignored so both make the same -n tokens (the library makes them
 * identical: checked here, a mismatch is an error). Reports decode tok/s of both (tokens
 * after the first over the time after the first), the speedup, the share of drafted
 * tokens accepted and the tokens made per target pass. Argument handling and output
 * only: the loops are the library's (cn_context_generate, with and without gen.lookup_n /
 * gen.draft). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "genopts.h"

#define SPEC_GROUPS (CLI_G_MODEL | CLI_G_PROMPT | CLI_G_SAMPLING | CLI_G_SPEC)

static const char k_edit[] =
    "Here is a C function:\n\n"
    "static int parse_list(const char *s, int *out, int cap) {\n"
    "    int n = 0;\n"
    "    while (*s) {\n"
    "        while (*s == ' ' || *s == ',') s++;\n"
    "        if (!*s) break;\n"
    "        char *end = NULL;\n"
    "        long v = strtol(s, &end, 10);\n"
    "        if (end == s) return -1;\n"
    "        if (n == cap) return -2;\n"
    "        out[n++] = (int)v;\n"
    "        s = end;\n"
    "    }\n"
    "    return n;\n"
    "}\n\n"
    "static double mean(const int *v, int n) {\n"
    "    double sum = 0;\n"
    "    for (int i = 0; i < n; i++) sum += v[i];\n"
    "    return n ? sum / n : 0;\n"
    "}\n\n"
    "Here are the same two functions with the variable n renamed to count, and nothing else changed:\n\n";

static const char k_code[] =
    "\"\"\"Utilities for reading and validating CSV files of sensor readings.\"\"\"\n"
    "import csv\nimport math\nfrom dataclasses import dataclass\n\n\n@dataclass\nclass Reading:\n"
    "    sensor: str\n    time: float\n    value: float\n\n\ndef parse_reading(row):\n"
    "    \"\"\"Turn one CSV row (sensor, time, value) into a Reading, raising ValueError on bad input.\"\"\"\n";

/* One greedy run of the task prompt, speculative or not: its decode tok/s and tokens. */
static int one(cn_context *c, const cli_gen_opts *o, const char *text, bool spec, double *tok_s, cn_result *r) {
    cn_gen_params gp = o->gp;
    if (!spec) gp.draft = false, gp.lookup_n = 0;
    cn_error err = {0};
    cn_result_free(r);
    const cn_prompt prompt = {.text = text};
    if (cn_context_generate(c, &prompt, &gp, r, &err) != CN_STATUS_OK) {
        cn_cli_errorf("bench: %s", err.msg);
        return 1;
    }
    *tok_s = r->timings.decode_tok_s;
    return 0;
}

static bool same_tokens(const cn_result *a, const cn_result *b) {
    if (a->n_tokens != b->n_tokens) return false;
    for (int32_t i = 0; i < a->n_tokens; i++)
        if (a->tokens[i].id != b->tokens[i].id) return false;
    return true;
}

int cn_cli_bench_spec(int argc, char **argv) {
    cli_gen_opts o;
    cli_gen_opts_init(&o, "bench");
    o.gp.sampling = cn_sampling_default_params();
    o.gp.sampling.temperature = 0.0f;
    o.gp.sampling.ignore_eos = true;
    o.gp.max_tokens = 128;
    int32_t reps = 3;
    bool spec_flag = false;
    const char *task = "edit";
    const cli_flag own[] = {
        CLI_F_BOOL("--spec", NULL, &spec_flag, "speculative against plain decoding"),
        CLI_F_NUM("-r", NULL, CLI_INT, &reps, 1, 100, "N", "rounds (default 3)"),
        CLI_F_STR("--task", NULL, &task, "edit|code", "the built-in prompt"),
    };
    const cli_flag_group extra = CLI_GROUP("bench --spec", own);
    size_t n_groups;
    const cli_flag_group *groups = cli_gen_groups(&o, SPEC_GROUPS, &extra, &n_groups);
    const int pr = cli_flags_parse("bench", "", groups, n_groups, argc, argv, NULL, 0, &(int){0});
    if (pr) return CLI_FLAGS_EXIT(pr);
    if (strcmp(task, "edit") && strcmp(task, "code")) {
        cn_cli_errorf("bench: --task is edit or code, not '%s'", task);
        return 2;
    }
    const char *bad = o.prompt                         ? "the prompt is the task's (--task edit|code), not -p"
                      : !o.draft && o.gp.lookup_n == 0 ? "give a drafter: --draft MODEL or --lookup N"
                                                       : NULL;
    if (bad) {
        cn_cli_errorf("bench --spec: %s", bad);
        return 2;
    }
    if (cli_gen_opts_check(&o, NULL, NULL)) return 2;
    cli_session s;
    cn_result plain = {0}, spec = {0};
    int rc = cli_session_open(&s, &o);
    if (rc) goto done;
    rc = 1;
    const char *text = strcmp(task, "code") ? k_edit : k_code;
    const int32_t n_threads = cn_context_n_threads(s.ctx);
    double sum_p = 0, sum_s = 0, warm;
    cn_result tot = {0};
    char path[4096];
    fprintf(stderr, "cinder bench --spec: %s, task %s, -n %d, %d threads: warm-up",
            cli_model_path(o.cmd, o.model, path, sizeof path), task, (int)o.gp.max_tokens, (int)n_threads);
    if (one(s.ctx, &o, text, false, &warm, &plain) || one(s.ctx, &o, text, true, &warm, &spec)) goto done;
    for (int32_t r = 0; r < reps; r++) {
        fprintf(stderr, ", %d", (int)r + 1);
        double tp = 0, ts = 0;
        for (int k = 0; k < 2; k++) { /* alternate which goes first */
            const bool sp = (k == 0) == (r % 2 == 1);
            if (one(s.ctx, &o, text, sp, sp ? &ts : &tp, sp ? &spec : &plain)) goto done;
            if (sp) {
                tot.spec_target_passes += spec.spec_target_passes, tot.spec_drafted += spec.spec_drafted;
                tot.spec_accepted += spec.spec_accepted, tot.spec_plain_passes += spec.spec_plain_passes;
            }
        }
        if (!same_tokens(&plain, &spec)) {
            fprintf(stderr, "\n");
            cn_cli_errorf("bench: speculative decoding made other tokens than plain decoding");
            goto done;
        }
        sum_p += tp, sum_s += ts;
    }
    fprintf(stderr, "\n");
    const double mp = sum_p / reps, ms = sum_s / reps;
    const double passes = (double)tot.spec_target_passes;
    printf(
        "| drafter | t | plain tok/s | speculative tok/s | speedup | accepted | tokens per pass | passes without a draft |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    printf("| %s | %d | %.1f | %.1f | %.2fx | %.1f%% | %.2f | %.0f%% |\n", o.draft ? "draft model" : "lookup",
           (int)n_threads, mp, ms, ms / mp,
           tot.spec_drafted ? 100.0 * (double)tot.spec_accepted / (double)tot.spec_drafted : 0.0,
           passes ? (passes + (double)tot.spec_accepted) / passes : 0.0,
           passes ? 100.0 * (double)tot.spec_plain_passes / passes : 0.0);
    rc = 0;
done:
    cn_result_free(&plain);
    cn_result_free(&spec);
    cli_session_close(&s);
    return rc;
}
