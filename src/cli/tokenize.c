/* tokenize.c — `cinder tokenize`: the token ids (and pieces) of a text under a model's
 * tokenizer. Needs only the tokenizer metadata, so vocab-only GGUF files work. stdout
 * carries the result only; errors are one line on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "text/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: cinder tokenize -m MODEL.gguf [--ids] [--no-bos] [--no-special] TEXT\n"
               "\n"
               "  -m, --model PATH  GGUF file with tokenizer metadata (a vocab-only file will do)\n"
               "  --ids             print only the ids, space-separated, on one line\n"
               "  --no-bos          add no BOS/EOS tokens (default: as the model says)\n"
               "  --no-special      treat special-token text as plain text (default: parse it)\n"
               "\n"
               "Default output: one line per token, id<TAB>'piece' (piece escaped).\n");
}

/* Prints piece[0..n) between quotes: C-style escapes for quotes, backslashes and control
 * bytes, \xNN for bytes that are not part of valid UTF-8. */
static void print_escaped(const char *piece, size_t n) {
    const unsigned char *p = (const unsigned char *)piece;
    putchar('\'');
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c == '\\' || c == '\'') {
            printf("\\%c", c);
        } else if (c == '\n') {
            fputs("\\n", stdout);
        } else if (c == '\t') {
            fputs("\\t", stdout);
        } else if (c == '\r') {
            fputs("\\r", stdout);
        } else if (c < 0x20 || c == 0x7F) {
            printf("\\x%02x", c);
        } else if (c < 0x80) {
            putchar(c);
        } else {
            /* a complete, well-formed multi-byte sequence goes out as is */
            size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
            bool ok = need && c <= 0xF4 && i + need <= n;
            for (size_t j = 1; ok && j < need; j++) ok = (p[i + j] & 0xC0) == 0x80;
            if (ok && need == 3) {
                ok = !(c == 0xE0 && p[i + 1] < 0xA0) && !(c == 0xED && p[i + 1] > 0x9F);
            } else if (ok && need == 4) {
                ok = !(c == 0xF0 && p[i + 1] < 0x90) && !(c == 0xF4 && p[i + 1] > 0x8F);
            }
            if (ok) {
                fwrite(p + i, 1, need, stdout);
                i += need;
                continue;
            }
            printf("\\x%02x", c);
        }
        i++;
    }
    putchar('\'');
}

int cn_cli_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL;
    bool ids_only = false, no_bos = false, no_special = false, opts_done = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!opts_done && a[0] == '-' && a[1]) {
            if (!strcmp(a, "--")) {
                opts_done = true;
            } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
                usage(stdout);
                return 0;
            } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
                if (i + 1 >= argc) {
                    cn_cli_errorf("tokenize: %s needs a file name", a);
                    return 2;
                }
                model = argv[++i];
            } else if (!strcmp(a, "--ids")) {
                ids_only = true;
            } else if (!strcmp(a, "--no-bos")) {
                no_bos = true;
            } else if (!strcmp(a, "--no-special")) {
                no_special = true;
            } else {
                cn_cli_errorf("tokenize: unknown option '%s' (try 'cinder tokenize --help')", a);
                return 2;
            }
        } else if (!text) {
            text = a;
        } else {
            cn_cli_errorf("tokenize: more than one text given (quote the text)");
            return 2;
        }
    }
    if (!model) {
        cn_cli_errorf("tokenize: no model given (-m MODEL.gguf)");
        return 2;
    }
    if (!text) {
        cn_cli_errorf("tokenize: no text given");
        return 2;
    }

    cn_error err;
    cn_gguf *g = NULL;
    cn_tokenizer *t = NULL;
    int32_t *ids = NULL;
    int rc = 1;
    if (cn_gguf_open(model, &g, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", err.msg);
        goto done;
    }
    if (cn_tokenizer_load(g, &t, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s: %s", model, err.msg);
        goto done;
    }
    size_t len = strlen(text), n = 0;
    if (cn_tokenize(t, text, len, !no_bos, !no_special, NULL, 0, &n, &err) != CN_STATUS_OK) {
        cn_cli_errorf("tokenize: %s", err.msg);
        goto done;
    }
    ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        cn_cli_errorf("tokenize: out of memory");
        goto done;
    }
    if (cn_tokenize(t, text, len, !no_bos, !no_special, ids, n, &n, &err) != CN_STATUS_OK) {
        cn_cli_errorf("tokenize: %s", err.msg);
        goto done;
    }
    if (ids_only) {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    } else {
        char small[256];
        for (size_t i = 0; i < n; i++) {
            size_t m = cn_token_to_piece(t, ids[i], true, small, sizeof small);
            char *piece = small;
            if (m > sizeof small) {
                piece = malloc(m);
                if (!piece) {
                    cn_cli_errorf("tokenize: out of memory");
                    goto done;
                }
                cn_token_to_piece(t, ids[i], true, piece, m);
            }
            printf("%d\t", ids[i]);
            print_escaped(piece, m);
            putchar('\n');
            if (piece != small) free(piece);
        }
    }
    if (fflush(stdout) != 0) {
        cn_cli_errorf("tokenize: cannot write the output");
        goto done;
    }
    rc = 0;
done:
    free(ids);
    cn_tokenizer_free(t);
    cn_gguf_close(g);
    return rc;
}
