/* main.c — the cinder command: dispatches to one subcommand per file. The only place
 * that turns a status into an exit code and a message. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"
#include "core/buf.h"
#include "flags.h"

bool cn_cli_parse_int_list(const char *s, long lo, long hi, int32_t *out, int max, int *n) {
    *n = 0;
    while (*s) {
        char *end;
        const long v = strtol(s, &end, 10);
        if (end == s || v < lo || v > hi || *n == max) return false;
        out[(*n)++] = (int32_t)v;
        if (*end == ',') end++;
        else if (*end) return false;
        s = end;
    }
    return *n > 0;
}

size_t cn_cli_escape_char(const char *s, size_t n, char quote, char out[8]) {
    const unsigned char *p = (const unsigned char *)s, c = p[0];
    const size_t k = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    bool ok = k && c <= 0xF4 && k <= n;
    for (size_t j = 1; ok && j < k; j++) ok = (p[j] & 0xC0) == 0x80;
    /* no overlong forms, no surrogates, nothing above U+10FFFF */
    if (ok && k == 3) ok = !(c == 0xE0 && p[1] < 0xA0) && !(c == 0xED && p[1] > 0x9F);
    if (ok && k == 4) ok = !(c == 0xF0 && p[1] < 0x90) && !(c == 0xF4 && p[1] > 0x8F);
    const char *esc = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : NULL;
    if (c == (unsigned char)quote || c == '\\') {
        snprintf(out, 8, "\\%c", c);
    } else if (esc) {
        strcpy(out, esc);
    } else if (c < 0x20 || c == 0x7F || !ok) {
        snprintf(out, 8, "\\x%02x", c);
    } else {
        memcpy(out, s, k);
        out[k] = '\0';
        return k;
    }
    return 1;
}

cn_status cn_cli_model_load(const char *path, cn_model **out, cn_error *err) {
    cn_model_params mp = cn_model_default_params();
    mp.prefault = true;
    return cn_model_load(path, &mp, out, err);
}

int32_t cn_cli_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int cli_parse_kv_type(void *dst, const char *v, const char *cmd, const char *name) {
    if (!strcmp(v, "f16")) *(cn_type *)dst = CN_TYPE_F16;
    else if (!strcmp(v, "q8_0")) *(cn_type *)dst = CN_TYPE_Q8_0;
    else {
        cn_cli_errorf("%s: %s is f16 or q8_0, got '%s'", cmd, name, v);
        return -1;
    }
    return 0;
}

static int cmd_version(int argc, char **argv) {
    const char *pos[1];
    int n_pos;
    const int rc = cli_flags_parse("version",
                                   "usage: cinder version\n\nPrints the version and the kernel family this CPU runs.\n",
                                   NULL, 0, argc, argv, pos, 0, &n_pos);
    if (rc) return CLI_FLAGS_EXIT(rc);
    printf("cinder %s\n", CN_VERSION);
    /* the kernel family this CPU gets (CINDER_ISA caps it) */
    printf("kernels %s\n", cn_kernels_family());
    return 0;
}

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"version", cmd_version, "print the version"},
    {"inspect", cn_cli_inspect, "print a GGUF file's metadata and tensor table"},
    {"tokenize", cn_cli_tokenize, "print the token ids and pieces of a text"},
    {"explain", cn_cli_explain, "show the sampler chain stage by stage on a distribution"},
    {"template", cn_cli_template, "render a conversation through a chat template (the model's or a file's)"},
    {"run", cn_cli_run, "generate text from a prompt (sampling, beams, stop strings) with timings"},
    {"chat", cn_cli_chat, "chat with a model interactively (its chat template, KV cache reuse)"},
    {"embed", cn_cli_embed, "embeddings of texts (pooled final hidden states, L2-normalized)"},
    {"serve", cn_cli_serve, "an OpenAI-compatible HTTP server on the batched engine"},
    {"grammar", cn_cli_grammar, "check a text against a JSON Schema, GBNF grammar, regex or choice list"},
    {"quantize", cn_cli_quantize, "write a model in a smaller format (Q4_K_M, Q8_0, ...), as llama-quantize does"},
    {"imatrix", cn_cli_imatrix,
     "importance matrix of a model over a text (llama-imatrix's file), for quantize --imatrix"},
    {"draft-from", cn_cli_draft_from, "cut a draft model (the first K layers) from a model, for --draft"},
    {"bench", cn_cli_bench, "measure prompt processing and generation speed (like llama-bench)"},
    {"perplexity", cn_cli_perplexity, "perplexity over a text; KV-cache type cost as KL divergence"},
};

void cn_cli_errorf(const char *fmt, ...) {
    fputs("cinder: ", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void usage(FILE *f) {
    fprintf(f, "usage: cinder <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'cinder <command> --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("cinder %s\n", CN_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    cn_cli_errorf("unknown command '%s' (try 'cinder --help')", argv[1]);
    return 2;
}

char *cn_cli_read_file(const char *path, size_t *n) {
    const bool is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        cn_cli_errorf("cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    const char *name = is_stdin ? "stdin" : path;
    cn_buf b = {0};
    char chunk[1 << 16];
    bool ok = true;
    for (size_t k; ok && (k = fread(chunk, 1, sizeof chunk, f)) > 0;) {
        if (b.n + k > ((size_t)1 << 30)) {
            cn_cli_errorf("'%s' is larger than 1 GiB", name);
            ok = false;
        } else if (!cn_buf_put(&b, chunk, k)) {
            cn_cli_errorf("out of memory reading '%s'", name);
            ok = false;
        }
    }
    if (ok && ferror(f)) {
        cn_cli_errorf("cannot read '%s'", name);
        ok = false;
    }
    if (!is_stdin) fclose(f);
    char *text = ok ? cn_buf_take(&b, n) : NULL;
    cn_buf_free(&b);
    if (ok && !text) cn_cli_errorf("out of memory reading '%s'", name);
    return text;
}
