/* cli.h — the cinder subcommands, one file each. Each takes the arguments after the
 * subcommand name (argv[0] is the subcommand) and returns the process exit code:
 * 0 success, 1 runtime failure (bad file, model error), 2 usage error. */
#ifndef CN_CLI_H
#define CN_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int cn_cli_inspect(int argc, char **argv);
int cn_cli_tokenize(int argc, char **argv);
int cn_cli_perplexity(int argc, char **argv);
int cn_cli_explain(int argc, char **argv);
int cn_cli_run(int argc, char **argv);
int cn_cli_chat(int argc, char **argv);
int cn_cli_bench(int argc, char **argv);
int cn_cli_serve(int argc, char **argv);
int cn_cli_draft_from(int argc, char **argv);
int cn_cli_bench_spec(int argc, char **argv); /* bench_spec.c: cinder bench --spec */

/* Parses a comma-separated list of integers in [lo, hi] ("1,4,8") into out[0..max):
 * false on an empty list, a bad or out-of-range item, or more than max items. */
bool cn_cli_parse_int_list(const char *s, long lo, long hi, int32_t *out, int max, int *n);

/* Prints "cinder: <msg>" to stderr as one line. */
void cn_cli_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A whole file (at most 1 GiB), NUL-terminated, *n its length; NULL after an error message. */
char *cn_cli_read_file(const char *path, size_t *n);

#endif
