/* test_fuzz_corpus.c — replays the libFuzzer harnesses of tests/fuzz (the GGUF reader,
 * tokenizer, chat templates, the Jinja interpreter, the HTTP body mapping, the stop-string
 * filter, the regex and GBNF grammar front ends, the imatrix reader) over their
 * committed corpora
 * (tests/fuzz/corpus/NAME: seeds, and every input a fuzzing run found worth keeping,
 * crashes made regression inputs included), so `make test` runs them under ASan+UBSan.
 * Each corpus file also gets every truncation and 64 deterministic mutations (flips,
 * insertions, deletions). Each input sits in a buffer of exactly its length, so a read
 * one byte past the end is caught. A harness aborts on any broken property. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CN_FUZZ_NO_ENTRY
#include "../fuzz/fuzz_chat.c"
#include "../fuzz/fuzz_gbnf.c"
#include "../fuzz/fuzz_imatrix.c"
#include "../fuzz/fuzz_jinja.c"
#include "../fuzz/fuzz_openai.c"
#include "../fuzz/fuzz_regex.c"
#include "../fuzz/fuzz_stop.c"
#include "../fuzz/fuzz_tokenizer.c"

/* defined by the copy of tests/fuzz/fuzz_gguf.c that test_gguf_fuzz.c includes */
int fuzz_gguf_one(const uint8_t *data, size_t size);

typedef int (*fuzz_fn)(const uint8_t *data, size_t size);

static uint64_t mut_state;
static uint32_t mut_rnd(uint32_t n) {
    mut_state = mut_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(mut_state >> 33) % n;
}

static void run_exact(fuzz_fn fn, const uint8_t *p, size_t n) {
    uint8_t *b = malloc(n ? n : 1);
    cr_assert_not_null(b);
    memcpy(b, p, n);
    fn(b, n);
    free(b);
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(len > 0 ? (size_t)len : 1);
    cr_assert_not_null(b);
    cr_assert_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* Every file of tests/fuzz/corpus/name through fn, with truncations and mutations;
 * returns how many files (and how many of them the harness accepted). */
static int replay(const char *name, fuzz_fn fn, int *n_accepted) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", name);
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "no corpus folder %s (run the tests from the checkout's root)", dir);
    int n_files = 0;
    *n_accepted = 0;
    struct dirent *de;
    mut_state = 12345;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        size_t n = 0;
        uint8_t *data = read_all(path, &n);
        n_files++;
        uint8_t *b = malloc(n ? n : 1);
        memcpy(b, data, n);
        *n_accepted += fn(b, n) == 0;
        free(b);
        const size_t step = n > 256 ? n / 64 : 1;
        for (size_t t = 0; t < n; t += step) run_exact(fn, data, t);
        uint8_t *m = malloc(n + 16);
        for (int k = 0; k < 64; k++) {
            size_t mn = n;
            memcpy(m, data, n);
            for (int e = 0, ne = 1 + (int)mut_rnd(4); e < ne; e++) {
                const uint32_t op = mut_rnd(3);
                if (op == 0 && mn > 0) {
                    m[mut_rnd((uint32_t)mn)] ^= (uint8_t)(1u << mut_rnd(8));
                } else if (op == 1 && mn < n + 16) {
                    const size_t at = mut_rnd((uint32_t)mn + 1);
                    memmove(m + at + 1, m + at, mn - at);
                    m[at] = (uint8_t)mut_rnd(256);
                    mn++;
                } else if (mn > 0) {
                    const size_t at = mut_rnd((uint32_t)mn);
                    memmove(m + at, m + at + 1, mn - at - 1);
                    mn--;
                }
            }
            run_exact(fn, m, mn);
        }
        free(m);
        free(data);
    }
    closedir(d);
    return n_files;
}

#define CORPUS_TEST(name, fn, min_files)                                                                            \
    Test(fuzz_corpus, name, .timeout = 300) {                                                                       \
        int accepted = 0;                                                                                           \
        const int n = replay(#name, fn, &accepted);                                                                 \
        cr_assert_geq(n, min_files, "the %s corpus has %d files", #name, n);                                        \
        cr_assert_gt(accepted, 0, "no %s corpus file was accepted: the seeds test nothing past the checks", #name); \
    }

CORPUS_TEST(gguf, fuzz_gguf_one, 4)
CORPUS_TEST(tokenizer, fuzz_tokenizer_one, 10)
CORPUS_TEST(chat, fuzz_chat_one, 10)
CORPUS_TEST(openai, fuzz_openai_one, 10)
CORPUS_TEST(stop, fuzz_stop_one, 8)
CORPUS_TEST(regex, fuzz_regex_one, 10)
CORPUS_TEST(gbnf, fuzz_gbnf_one, 10)
CORPUS_TEST(jinja, fuzz_jinja_one, 30)
CORPUS_TEST(imatrix, fuzz_imatrix_one, 4)
