/* cli.h — the cinder subcommands, one file each. Each takes the arguments after the
 * subcommand name (argv[0] is the subcommand) and returns the process exit code:
 * 0 success, 1 runtime failure (bad file, model error), 2 usage error. */
#ifndef CN_CLI_H
#define CN_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cinder.h"

int cn_cli_inspect(int argc, char **argv);
int cn_cli_tokenize(int argc, char **argv);
int cn_cli_embed(int argc, char **argv);
int cn_cli_perplexity(int argc, char **argv);
int cn_cli_explain(int argc, char **argv);
int cn_cli_run(int argc, char **argv);
int cn_cli_chat(int argc, char **argv);
int cn_cli_bench(int argc, char **argv);
int cn_cli_serve(int argc, char **argv);
int cn_cli_draft_from(int argc, char **argv);
int cn_cli_quantize(int argc, char **argv);   /* quantize.c: cinder quantize */
int cn_cli_bench_spec(int argc, char **argv); /* bench_spec.c: cinder bench --spec */
int cn_cli_grammar(int argc, char **argv);    /* grammar.c: cinder grammar check */
int cn_cli_template(int argc, char **argv);   /* template.c: cinder template render */
int cn_cli_imatrix(int argc, char **argv);    /* imatrix.c: cinder imatrix */

/* Parses a comma-separated list of integers in [lo, hi] ("1,4,8") into out[0..max):
 * false on an empty list, a bad or out-of-range item, or more than max items. */
bool cn_cli_parse_int_list(const char *s, long lo, long hi, int32_t *out, int max, int *n);

/* One character of s[0..n) (n > 0) made safe to print between quote characters: quote and
 * backslash get a backslash, \n \t \r stay escapes, other control bytes and bytes that
 * are not part of valid UTF-8 become \xNN, a valid UTF-8 sequence stays as it is. out
 * gets it NUL-terminated; returns the bytes of s it stands for. */
size_t cn_cli_escape_char(const char *s, size_t n, char quote, char out[8]);

/* --kv-type for the batched engine (serve, bench --parallel): f16 or q8_0 into a cn_type
 * (a cli_flag parse function). */
int cli_parse_kv_type(void *dst, const char *v, const char *cmd, const char *name);
/* cn_model_load with the pages read in up front (prefault): every command measures or
 * serves, and a first pass should not pay for page faults. */
cn_status cn_cli_model_load(const char *path, cn_model **out, cn_error *err);
/* The index of the largest of x[0..n) (n > 0), the first on ties. */
int32_t cn_cli_argmax(const float *x, int32_t n);

/* A monotonic clock in milliseconds (bench.c). */
double cli_now_ms(void);

/* Prints "cinder: <msg>" to stderr as one line. */
void cn_cli_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A whole file (at most 1 GiB; "-" is stdin), NUL-terminated, *n its length; NULL after an
 * error message. */
char *cn_cli_read_file(const char *path, size_t *n);

#endif
