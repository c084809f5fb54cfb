/* quantize.c — `cinder quantize IN OUT TYPE`: a model file written again in a smaller
 * format by llama-quantize's rules (cn_model_quantize does the work). Flags, the progress
 * bar on stderr (when it is a terminal) and the closing summary; nothing else. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cinder.h"
#include "cli.h"
#include "flags.h"

typedef struct {
    double t0;
    bool tty;
} progress_state;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_progress(void *user, int64_t n_done, int64_t n_tensors, uint64_t n_bytes_in) {
    const progress_state *ps = user;
    if (!ps->tty) return;
    const double dt = now_s() - ps->t0;
    const int width = 30, filled = n_tensors ? (int)(width * n_done / n_tensors) : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\r[%s] %lld/%lld tensors  %.1f MB/s ", bar, (long long)n_done, (long long)n_tensors,
            dt > 0 ? (double)n_bytes_in / 1e6 / dt : 0.0);
    if (n_done == n_tensors) fputc('\n', stderr);
    fflush(stderr);
}

int cn_cli_quantize(int argc, char **argv) {
    int32_t n_threads = 0;
    bool requant = false, pure = false;
    const char *out_type = NULL, *emb_type = NULL, *imatrix = NULL;
    const char *include[64], *exclude[64];
    int32_t n_include = 0, n_exclude = 0;
    const cli_flag flags[] = {
        CLI_F_THREADS(&n_threads),
        CLI_F_BOOL("--allow-requantize", NULL, &requant,
                   "quantize a file that is already quantized (the errors compound: prefer F32/F16/BF16)"),
        CLI_F_BOOL("--pure", NULL, &pure, "no mix: every quantized tensor gets TYPE's base type"),
        CLI_F_STR("--output-type", NULL, &out_type, "T", "type of output.weight (q8_0, q6_K, f16, ...)"),
        CLI_F_STR("--token-embedding-type", NULL, &emb_type, "T", "type of token_embd.weight"),
        CLI_F_STR("--imatrix", NULL, &imatrix, "FILE",
                  "importance matrix from llama-imatrix or cinder imatrix (GGUF or .dat): weighted\n"
                  "quantizers, llama-quantize's bytes"),
        {.name = "--include-weights",
         .kind = CLI_STRS,
         .dst = include,
         .max = 64,
         .count = &n_include,
         .metavar = "NAME",
         .help = "use the imatrix only for tensors whose name contains NAME (repeatable)"},
        {.name = "--exclude-weights",
         .kind = CLI_STRS,
         .dst = exclude,
         .max = 64,
         .count = &n_exclude,
         .metavar = "NAME",
         .help = "do not use the imatrix for tensors whose name contains NAME (repeatable)"},
    };
    const cli_flag_group groups[] = {CLI_GROUP(NULL, flags)};
    const char *pos[3];
    int n_pos;
    const int rc = cli_flags_parse(
        "quantize",
        "usage: cinder quantize IN.gguf OUT.gguf TYPE [flags]\n"
        "  TYPE: Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q6_K Q4_K_S Q4_K_M Q5_K_S Q5_K_M (Q4_K, Q5_K: the _M mixes),\n"
        "  by llama-quantize's rules and with its bytes; from F32/F16/BF16 (or a quantized file with\n"
        "  --allow-requantize). OUT is written through a temporary file: a failure leaves nothing.\n\n",
        groups, 1, argc, argv, pos, 3, &n_pos);
    if (rc) return CLI_FLAGS_EXIT(rc);
    if (n_pos < 3) {
        cn_cli_errorf("quantize: give IN.gguf OUT.gguf TYPE (see 'cinder quantize --help')");
        return 2;
    }
    if (!getenv("CINDER_LOG")) cn_log_set_level(CN_LOG_WARN); /* the fallbacks and the requantize warning */
    progress_state ps = {now_s(), isatty(2) == 1};
    cn_quantize_params p = cn_quantize_default_params();
    p.n_threads = n_threads;
    p.allow_requantize = requant;
    p.pure = pure;
    p.output_type = out_type;
    p.token_embd_type = emb_type;
    p.imatrix_path = imatrix;
    p.include_weights = include;
    p.n_include = n_include;
    p.exclude_weights = exclude;
    p.n_exclude = n_exclude;
    p.progress = on_progress;
    p.progress_user = &ps;
    cn_quantize_stats s;
    cn_error err = {0};
    const cn_status st = cn_model_quantize(pos[0], pos[1], pos[2], &p, &s, &err);
    if (st != CN_STATUS_OK) {
        if (ps.tty) fputc('\n', stderr); /* end the bar's line */
        cn_cli_errorf("quantize: %s", err.msg);
        return st == CN_STATUS_INVALID_ARG ? 2 : 1;
    }
    const double dt = now_s() - ps.t0;
    char weighted[64] = "";
    if (imatrix) snprintf(weighted, sizeof weighted, " (%lld with importance weights)", (long long)s.n_imatrix);
    fprintf(stderr,
            "cinder: quantize: wrote %s (file type %u): %lld tensors, %lld quantized%s, %lld fallbacks; "
            "%.2f MiB -> %.2f MiB (%.2f bpw) in %.2f s\n",
            pos[1], s.file_type, (long long)s.n_tensors, (long long)s.n_quantized, weighted, (long long)s.n_fallback,
            (double)s.n_bytes_in / 1048576.0, (double)s.n_bytes_out / 1048576.0,
            s.n_elem ? 8.0 * (double)s.n_bytes_out / (double)s.n_elem : 0.0, dt);
    return 0;
}
