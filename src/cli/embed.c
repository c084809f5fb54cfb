/* embed.c — `cinder embed`: one embedding per text (cn_embedder: the model's final hidden
 * states pooled and L2-normalized), printed one JSON array of floats per line, in input
 * order; one timing line to stderr. Texts come as arguments, or one per line from
 * --file (- for stdin). Argument handling and output only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cinder.h"
#include "cli.h"
#include "core/buf.h"
#include "flags.h"
#include "genopts.h"

#define EMBED_MAX_TEXTS 65536

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Lines of f into *texts (malloc'ed, each too); false when there are too many or memory
 * ran out (after printing why). */
static bool read_lines(FILE *f, char ***texts, size_t *n) {
    char *line = NULL;
    size_t cap = 0, cap_texts = *n;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        if (*n == EMBED_MAX_TEXTS) {
            cn_cli_errorf("embed: more than %d texts", EMBED_MAX_TEXTS);
            free(line);
            return false;
        }
        if (!CN_GROW(*texts, cap_texts, *n + 1) || !((*texts)[*n] = strdup(line))) {
            cn_cli_errorf("embed: out of memory");
            free(line);
            return false;
        }
        (*n)++;
    }
    free(line);
    return true;
}

int cn_cli_embed(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *pooling = NULL;
    int32_t n_threads = 0;
    bool no_norm = false;
    cn_embedder_params ep = cn_embedder_default_params();
    const cli_flag flags[] = {
        CLI_F_MODEL(&model),
        CLI_F_THREADS(&n_threads),
        CLI_F_STR("--pooling", NULL, &pooling, "KIND",
                  "mean, cls or last (default: the model's <arch>.pooling_type, else last)"),
        CLI_F_BOOL("--no-normalize", NULL, &no_norm, "leave the vectors as pooled (default: unit L2 norm)"),
        CLI_F_NUM("--batch", "-b", CLI_INT, &ep.n_batch, 8, 65536, "N",
                  "tokens per forward pass, and so the longest text (default 512)"),
        CLI_F_STR("--file", "-f", &file, "PATH", "one text per line (- for stdin) instead of arguments"),
    };
    const cli_flag_group groups[] = {CLI_GROUP(NULL, flags)};
    const char *pos[256];
    int n_pos = 0;
    int rc = cli_flags_parse("embed", NULL, groups, 1, argc, argv, pos, 256, &n_pos);
    if (rc == CLI_FLAGS_HELP) {
        printf("usage: cinder embed [-m MODEL] [options] TEXT... (or --file PATH)\n"
               "  one embedding per text: a JSON array of floats per line, in order\n\n");
        cli_flags_help(stdout, groups, 1);
        return 0;
    }
    if (rc) return rc;
    if (!!n_pos == !!file) {
        cn_cli_errorf("embed: give the texts as arguments or --file PATH (one of them)");
        return 2;
    }
    cn_error err = {0};
    if (pooling && cn_pooling_from_name(pooling, &ep.pooling, &err) != CN_STATUS_OK) {
        cn_cli_errorf("embed: --pooling: %s", err.msg);
        return 2;
    }
    ep.n_threads = n_threads;
    ep.normalize = !no_norm;

    char buf[4096];
    char **texts = NULL;
    size_t n = 0;
    float *vec = NULL;
    cn_model *m = NULL;
    cn_embedder *e = NULL;
    rc = 1;
    const char *path = cli_model_path("embed", model, buf, sizeof buf);
    if (!path) goto done;
    if (file) {
        FILE *f = strcmp(file, "-") ? fopen(file, "r") : stdin;
        if (!f) {
            cn_cli_errorf("embed: cannot read %s", file);
            goto done;
        }
        const bool ok = read_lines(f, &texts, &n);
        if (f != stdin) fclose(f);
        if (!ok) goto done;
    }
    if (cn_cli_model_load(path, &m, &err) != CN_STATUS_OK || cn_embedder_create(m, &ep, &e, &err) != CN_STATUS_OK) {
        cn_cli_errorf("embed: %s", err.msg);
        goto done;
    }
    const size_t n_texts = file ? n : (size_t)n_pos;
    const int32_t dim = cn_embedder_n_embd(e);
    if (n_texts && !(vec = malloc(n_texts * (size_t)dim * sizeof *vec))) {
        cn_cli_errorf("embed: out of memory");
        goto done;
    }
    const double t0 = now_ms();
    if (cn_embedder_embed_texts(e, file ? (const char *const *)texts : pos, n_texts, vec, &err) != CN_STATUS_OK) {
        cn_cli_errorf("embed: %s", err.msg);
        goto done;
    }
    const double ms = now_ms() - t0;
    for (size_t i = 0; i < n_texts; i++) {
        putchar('[');
        for (int32_t j = 0; j < dim; j++) printf(j ? ",%.9g" : "%.9g", (double)vec[i * (size_t)dim + j]);
        puts("]");
    }
    if (fflush(stdout) != 0) {
        cn_cli_errorf("embed: cannot write the output");
        goto done;
    }
    fprintf(stderr, "cinder: embedded %zu texts (%d floats each, pooling %s%s) in %.1f ms, %.1f texts/s\n", n_texts,
            dim, cn_pooling_name(cn_embedder_pooling(e)), ep.normalize ? ", L2-normalized" : "", ms,
            ms > 0 ? 1e3 * (double)n_texts / ms : 0.0);
    rc = 0;
done:
    free(vec);
    for (size_t i = 0; i < n; i++) free(texts[i]);
    free(texts);
    cn_embedder_free(e);
    cn_model_free(m);
    return rc;
}
