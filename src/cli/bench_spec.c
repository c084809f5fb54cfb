/* bench_spec.c — `cinder bench --spec`: speculative decoding against plain decoding on
 * one model, in the same process, interleaved: -r rounds, each a plain greedy run and a
 * speculative one (--draft MODEL or --lookup N) of -n tokens on a built-in prompt (--task
 * edit: an input-grounded edit of a C function; --task code: the start of a Python
 * module), end of text ignored so both make the same -n tokens (the library makes them
 * identical: checked here, a mismatch is an error). Reports decode tok/s of both (tokens
 * after the first over the time after the first), the speedup, the share of drafted
 * tokens accepted and the tokens made per target pass. Argument handling and output
 * only: the loops are the library's (cn_generate, cn_generate_spec). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/genopts.h"

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

static int one(cli_engine *e, const cli_gen_opts *o, const int32_t *ids, int32_t n, bool spec, double *tok_s,
               cn_spec_stats *ss, int32_t *toks) {
    cn_gen_params gp = o->gp;
    gp.on_text = NULL;
    cn_gen *g = NULL;
    cn_error err = {0};
    cn_status st = cn_gen_create(e->tok, e->n_vocab, &gp, &g, &err);
    if (st == CN_STATUS_OK)
        st = spec ? cn_generate_spec(&e->run, &o->spec, 0, ids, n, 0, g, ss, &err)
                  : cn_generate(&e->run, 0, ids, n, 0, g, &err);
    if (st != CN_STATUS_OK) {
        cn_cli_errorf("bench: %s", err.msg);
        cn_gen_free(g);
        return 1;
    }
    cn_gen_timings t;
    cn_gen_get_timings(g, &t);
    *tok_s = t.decode_tok_s;
    int32_t nt = 0;
    const int32_t *gt = cn_gen_tokens(g, &nt);
    memcpy(toks, gt, (size_t)CN_MIN(nt, o->gp.max_tokens) * sizeof *toks);
    cn_gen_free(g);
    return 0;
}

int cn_cli_bench_spec(int argc, char **argv) {
    cli_gen_opts o;
    cli_gen_opts_init(&o, "bench");
    o.gp.sampling = cn_sampling_default_params();
    o.gp.sampling.temperature = 0.0f;
    o.gp.sampling.ignore_eos = true;
    o.gp.max_tokens = 128;
    long reps = 3;
    const char *task = "edit";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--spec")) continue;
        if (!strcmp(argv[i], "-r") || !strcmp(argv[i], "--task")) {
            if (i + 1 >= argc) {
                cn_cli_errorf("bench: %s needs a value", argv[i]);
                return 2;
            }
            if (argv[i][1] == 'r') {
                char *end;
                reps = strtol(argv[++i], &end, 10);
                if (*end || reps < 1 || reps > 100) {
                    cn_cli_errorf("bench: -r wants 1..100");
                    return 2;
                }
            } else if (strcmp(task = argv[++i], "edit") && strcmp(task, "code")) {
                cn_cli_errorf("bench: --task is edit or code, not '%s'", task);
                return 2;
            }
            continue;
        }
        const int r = cli_gen_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) {
            cn_cli_errorf("bench --spec: unknown option '%s'", argv[i]);
            return 2;
        }
    }
    if (!o.draft && o.spec.lookup_n == 0) {
        cn_cli_errorf("bench --spec: give a drafter: --draft MODEL or --lookup N");
        return 2;
    }
    if (cli_gen_opts_check(&o)) return 2;
    int rc = 1;
    cli_engine e, de = {0};
    int32_t *ids = NULL, *plain_toks = NULL, *spec_toks = NULL;
    if (cli_engine_load(&e, &o)) goto done;
    const char *text = strcmp(task, "code") ? k_edit : k_code;
    int32_t n = 0;
    if (!(ids = cli_tokenize(&e, text, &n))) goto done;
    if (n + o.gp.max_tokens + 1 > e.n_ctx) {
        cn_cli_errorf("bench: the prompt (%d tokens) and -n %d do not fit the context (%d)", (int)n, (int)o.gp.max_tokens,
                      (int)e.n_ctx);
        goto done;
    }
    if (cli_engine_start(&e, &o, CN_MAX(n, CN_SPEC_MAX_DRAFT + 1), 1, 0)) goto done;
    if ((rc = cli_spec_start(&e, &de, &o)) != 0) goto done;
    rc = 1;
    plain_toks = malloc((size_t)o.gp.max_tokens * sizeof *plain_toks);
    spec_toks = malloc((size_t)o.gp.max_tokens * sizeof *spec_toks);
    if (!plain_toks || !spec_toks) {
        cn_cli_errorf("bench: out of memory");
        goto done;
    }
    double sum_p = 0, sum_s = 0;
    cn_spec_stats tot = {0};
    double warm;
    cn_spec_stats ss;
    fprintf(stderr, "cinder bench --spec: %s, task %s, %d prompt tokens, -n %d, %ld threads: warm-up", cli_model_path(&o, (char[4096]){0}, 4096), task,
            (int)n, (int)o.gp.max_tokens, o.n_threads);
    if (one(&e, &o, ids, n, false, &warm, &ss, plain_toks) || one(&e, &o, ids, n, true, &warm, &ss, spec_toks)) goto done;
    for (long r = 0; r < reps; r++) {
        fprintf(stderr, ", %ld", r + 1);
        double tp, ts;
        for (int k = 0; k < 2; k++) { /* alternate which goes first */
            const bool spec = (k == 0) == (r % 2 == 1);
            if (one(&e, &o, ids, n, spec, spec ? &ts : &tp, &ss, spec ? spec_toks : plain_toks)) goto done;
            if (spec) {
                tot.steps += ss.steps, tot.drafted += ss.drafted, tot.accepted += ss.accepted;
                tot.plain_steps += ss.plain_steps, tot.draft_evals += ss.draft_evals;
            }
        }
        if (memcmp(plain_toks, spec_toks, (size_t)o.gp.max_tokens * sizeof *spec_toks)) {
            fprintf(stderr, "\n");
            cn_cli_errorf("bench: speculative decoding made other tokens than plain decoding");
            goto done;
        }
        sum_p += tp, sum_s += ts;
    }
    fprintf(stderr, "\n");
    const double mp = sum_p / (double)reps, ms = sum_s / (double)reps;
    printf("| drafter | t | plain tok/s | speculative tok/s | speedup | accepted | tokens per pass | passes without a draft |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    printf("| %s | %ld | %.1f | %.1f | %.2fx | %.1f%% | %.2f | %.0f%% |\n", o.draft ? "draft model" : "lookup", o.n_threads,
           mp, ms, ms / mp, tot.drafted ? 100.0 * (double)tot.accepted / (double)tot.drafted : 0.0,
           tot.steps ? (double)(tot.steps + tot.accepted) / (double)tot.steps : 0.0,
           tot.steps ? 100.0 * (double)tot.plain_steps / (double)tot.steps : 0.0);
    rc = 0;
done:
    free(ids), free(plain_toks), free(spec_toks);
    cli_engine_close(&de);
    cli_engine_close(&e);
    return rc;
}
