/* cli.h — the cinder subcommands, one file each. Each takes the arguments after the
 * subcommand name (argv[0] is the subcommand) and returns the process exit code:
 * 0 success, 1 runtime failure (bad file, model error), 2 usage error. */
#ifndef CN_CLI_H
#define CN_CLI_H

int cn_cli_inspect(int argc, char **argv);
int cn_cli_tokenize(int argc, char **argv);
int cn_cli_perplexity(int argc, char **argv);
int cn_cli_explain(int argc, char **argv);
int cn_cli_run(int argc, char **argv);
int cn_cli_chat(int argc, char **argv);
int cn_cli_bench(int argc, char **argv);

/* Prints "cinder: <msg>" to stderr as one line. */
void cn_cli_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
