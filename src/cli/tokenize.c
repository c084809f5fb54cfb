/* tokenize.c — `cinder tokenize`: the token ids (and pieces) of a text under a model's
 * tokenizer. Needs only the tokenizer metadata, so vocab-only GGUF files work. stdout
 * carries the result only; errors are one line on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cinder.h"
#include "cli.h"
#include "flags.h"

/* piece[0..n) between single quotes, escaped (cn_cli_escape_char). */
static void print_escaped(const char *piece, size_t n) {
    putchar('\'');
    for (size_t i = 0; i < n;) {
        char esc[8];
        i += cn_cli_escape_char(piece + i, n - i, '\'', esc);
        fputs(esc, stdout);
    }
    putchar('\'');
}

int cn_cli_tokenize(int argc, char **argv) {
    const char *model = NULL;
    bool ids_only = false, no_bos = false, no_special = false;
    const cli_flag flags[] = {
        CLI_F_STR("--model", "-m", &model, "PATH", "GGUF file with tokenizer metadata (a vocab-only file will do)"),
        CLI_F_BOOL("--ids", NULL, &ids_only, "print only the ids, space-separated, on one line"),
        CLI_F_BOOL("--no-bos", NULL, &no_bos, "add no BOS/EOS tokens (default: as the model says)"),
        CLI_F_BOOL("--no-special", NULL, &no_special, "treat special-token text as plain text (default: parse it)"),
    };
    const cli_flag_group groups[] = {CLI_GROUP(NULL, flags)};
    const char *pos[2];
    int n_pos;
    int rc = cli_flags_parse("tokenize", NULL, groups, 1, argc, argv, pos, 2, &n_pos);
    if (rc == CLI_FLAGS_HELP) {
        printf("usage: cinder tokenize -m MODEL.gguf [options] TEXT\n\n");
        cli_flags_help(stdout, groups, 1);
        printf("\nDefault output: one line per token, id<TAB>'piece' (piece escaped).\n");
        return 0;
    }
    if (rc) return rc;
    const char *bad = n_pos > 1 ? "more than one text given (quote the text)"
                      : !model  ? "no model given (-m MODEL.gguf)"
                      : !n_pos  ? "no text given"
                                : NULL;
    if (bad) {
        cn_cli_errorf("tokenize: %s", bad);
        return 2;
    }

    cn_error err;
    cn_tokenizer *t = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    rc = 1;
    if (cn_tokenizer_load_file(model, &t, &err) != CN_STATUS_OK) {
        cn_cli_errorf("%s", err.msg);
        goto done;
    }
    if (cn_tokenize_alloc(t, pos[0], strlen(pos[0]), !no_bos, !no_special, &ids, &n, &err) != CN_STATUS_OK) {
        cn_cli_errorf("tokenize: %s", err.msg);
        goto done;
    }
    if (ids_only) {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    for (size_t i = 0; i < n && !ids_only; i++) {
        char small[256];
        const size_t m = cn_token_to_piece(t, ids[i], true, small, sizeof small);
        char *piece = m > sizeof small ? malloc(m) : small;
        if (!piece) {
            cn_cli_errorf("tokenize: out of memory");
            goto done;
        }
        if (piece != small) cn_token_to_piece(t, ids[i], true, piece, m);
        printf("%d\t", ids[i]);
        print_escaped(piece, m);
        putchar('\n');
        if (piece != small) free(piece);
    }
    if (fflush(stdout) != 0) {
        cn_cli_errorf("tokenize: cannot write the output");
        goto done;
    }
    rc = 0;
done:
    free(ids);
    cn_tokenizer_free(t);
    return rc;
}
