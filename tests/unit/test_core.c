/* test_core.c — the bottom layer: errors, checked arithmetic, file mapping, the thread
 * pool (every index runs exactly once per region, many regions in a row), the
 * contiguous split helper, the one thread-count rule, the growable buffer and the
 * output-file writer. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/core.h"
#include "core/cpu.h"
#include "core/outfile.h"
#include "core/pool.h"

Test(core, err_formats_and_truncates) {
    cn_error e;
    cr_assert_eq(cn_err(&e, CN_STATUS_CORRUPT, "kv %d: %s", 3, "bad"), CN_STATUS_CORRUPT);
    cr_assert_str_eq(e.msg, "kv 3: bad");
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    cn_err(&e, CN_STATUS_IO, "%s", big);
    cr_assert_eq(strlen(e.msg), CN_ERROR_MSG_LEN - 1);
    cr_assert_eq(cn_err(NULL, CN_STATUS_IO, "ignored"), CN_STATUS_IO);
}

Test(core, err_param_names_the_field_and_plain_err_clears_it) {
    cn_error e;
    cn_err_param(&e, CN_STATUS_INVALID_ARG, "top_p", "top_p = %g is out of range", 7.0);
    cr_assert_str_eq(e.param, "top_p");
    cr_assert_str_eq(e.msg, "top_p = 7 is out of range");
    cn_err(&e, CN_STATUS_IO, "no file");
    cr_assert_str_eq(e.param, "");
    cn_err_param(&e, CN_STATUS_INVALID_ARG, "x", "y");
    cn_err_clear(&e);
    cr_assert(e.status == CN_STATUS_OK && !e.param[0] && !e.msg[0]);
}

typedef struct {
    int n;
    cn_log_level last;
    char msg[64];
} log_seen;

static void log_to(void *user, cn_log_level level, const char *msg) {
    log_seen *s = user;
    s->n++;
    s->last = level;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
}

Test(core, log_hook_gets_messages_that_pass_the_level) {
    log_seen s = {0};
    cn_log_set(log_to, &s);
    cn_log_set_level(CN_LOG_WARN);
    cn_log(CN_LOG_WARN, "tokenizer: %d tokens", 3);
    cr_assert_eq(s.n, 1);
    cr_assert_eq(s.last, CN_LOG_WARN);
    cr_assert_str_eq(s.msg, "tokenizer: 3 tokens");
    cn_log(CN_LOG_INFO, "dropped");
    cr_assert_eq(s.n, 1, "info is above the warn level");
    cn_log(CN_LOG_ERROR, "kept");
    cr_assert_eq(s.n, 2);
    cr_assert_str_eq(s.msg, "kept");
    cn_log_set(NULL, NULL);
}

Test(core, checked_math) {
    uint64_t r = 7;
    cr_assert(!cn_mul_ok(1ull << 40, 1ull << 30, &r));
    cr_assert_eq(r, 7);
    cr_assert(cn_mul_ok(1ull << 20, 1ull << 30, &r));
    cr_assert_eq(r, 1ull << 50);
    cr_assert(!cn_add_ok(UINT64_MAX, 1, &r));
    cr_assert(cn_add_ok(UINT64_MAX - 1, 1, &r));
    cr_assert_eq(r, UINT64_MAX);
}

Test(core, map_missing_file_is_io_error) {
    cn_mapped_file m;
    cn_error e;
    cr_assert_eq(cn_map_file("/nonexistent/cinder/file.gguf", &m, &e), CN_STATUS_IO);
    cr_assert(strstr(e.msg, "cannot open") != NULL);
    cr_assert_eq(cn_map_file(".", &m, &e), CN_STATUS_IO); /* a directory */
    cn_unmap_file(&m);
}

Test(core, map_reads_file_bytes) {
    char path[] = "/tmp/cinder_core_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "hello", 5), 5);
    close(fd);
    cn_mapped_file m;
    cr_assert_eq(cn_map_file(path, &m, NULL), CN_STATUS_OK);
    cr_assert_eq(m.n_bytes, 5);
    cr_assert_eq(memcmp(m.data, "hello", 5), 0);
    cn_unmap_file(&m);
    unlink(path);
}

Test(core, split_covers_range_once) {
    for (int64_t n = 0; n < 50; n++)
        for (int nth = 1; nth <= 7; nth++) {
            int64_t expect = 0;
            for (int ith = 0; ith < nth; ith++) {
                int64_t b, e;
                cn_split(n, ith, nth, &b, &e);
                cr_assert_eq(b, expect);
                cr_assert(e >= b && e - b <= n / nth + 1);
                expect = e;
            }
            cr_assert_eq(expect, n);
        }
}

typedef struct {
    atomic_int hits[16];
    atomic_int total;
} pool_ctx;

static void count_fn(void *p, int ith, int nth) {
    pool_ctx *c = p;
    cr_assert(ith >= 0 && ith < nth);
    atomic_fetch_add(&c->hits[ith], 1);
    atomic_fetch_add(&c->total, 1);
}

Test(core, pool_runs_each_thread_once_per_region) {
    for (int n = 1; n <= 4; n++) {
        cn_pool *p;
        cr_assert_eq(cn_pool_create(n, &p, NULL), CN_STATUS_OK);
        cr_assert_eq(cn_pool_size(p), n);
        pool_ctx c;
        memset(&c, 0, sizeof c);
        for (int r = 0; r < 2000; r++) cn_pool_run(p, count_fn, &c);
        for (int i = 0; i < n; i++) cr_assert_eq(atomic_load(&c.hits[i]), 2000, "thread %d", i);
        cr_assert_eq(atomic_load(&c.total), 2000 * n);
        /* after a pause long enough for workers to fall asleep, they still wake */
        usleep(50 * 1000);
        cn_pool_run(p, count_fn, &c);
        cr_assert_eq(atomic_load(&c.total), 2001 * n);
        cn_pool_free(p);
    }
    cn_pool_free(NULL);
}

Test(core, pool_rejects_bad_sizes) {
    cn_pool *p = (cn_pool *)1;
    cn_error e;
    cr_assert_eq(cn_pool_create(0, &p, &e), CN_STATUS_INVALID_ARG);
    cr_assert_null(p);
    cr_assert_eq(cn_pool_create(100000, &p, &e), CN_STATUS_INVALID_ARG);
}

Test(core, null_pool_runs_inline) {
    pool_ctx c;
    memset(&c, 0, sizeof c);
    cn_pool_run(NULL, count_fn, &c);
    cr_assert_eq(atomic_load(&c.hits[0]), 1);
}

Test(core, cpu_isa_is_consistent) {
    const cn_cpu_features *f = cn_cpu_get();
    cn_isa isa = cn_cpu_isa();
    if (isa == CN_ISA_AVX512) cr_assert(f->avx512f && f->avx512vnni && f->avx2);
    if (isa == CN_ISA_AVX2) cr_assert(f->avx2 && f->fma && !f->avx512f);
    if (isa == CN_ISA_REF) cr_assert(!f->avx2 && !f->avx512f);
    cr_assert_not_null(cn_isa_name(isa));
}

/* cn_alloc_huge: 2 MiB alignment for big buffers (what lets the kernel back them with
 * huge pages), ordinary aligned memory for small ones, both writable end to end and
 * released by cn_free_aligned (ASan checks the pairing). */
Test(core, alloc_huge_alignment_and_use) {
    const size_t sizes[] = {1, 4096, (size_t)2 << 20, ((size_t)5 << 20) + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint8_t *p = cn_alloc_huge(sizes[i]);
        cr_assert_not_null(p);
        const uintptr_t align = sizes[i] >= ((size_t)2 << 20) ? ((uintptr_t)2 << 20) : CN_ALIGN;
        cr_assert_eq((uintptr_t)p % align, 0, "size %zu at %p", sizes[i], (void *)p);
        memset(p, 0xA5, sizes[i]);
        cr_assert_eq(p[sizes[i] - 1], 0xA5);
        cn_free_aligned(p);
    }
    cr_assert_null(cn_alloc_huge(SIZE_MAX - 100)); /* rounding overflows: NULL, not a tiny buffer */
}

/* ---- the one thread rule (pool.h) ---- */

Test(core, threads_zero_is_every_cpu_and_bad_counts_name_who_asked) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    cr_assert_eq(cn_threads_resolve(0), (int32_t)(n < 1 ? 1 : n > 1024 ? 1024 : n));
    cr_assert_eq(cn_threads_resolve(3), 3);
    cr_assert_eq(cn_threads_check(0, "engine", NULL), CN_STATUS_OK);
    cr_assert_eq(cn_threads_check(1024, "engine", NULL), CN_STATUS_OK);
    cn_error e = {0};
    cr_assert_eq(cn_threads_check(1025, "embedder", &e), CN_STATUS_INVALID_ARG);
    cr_assert_str_eq(e.msg, "embedder: n_threads = 1025 is out of range [0, 1024] (0 = every CPU)");
    cr_assert_str_eq(e.param, "n_threads");
    cr_assert_eq(cn_threads_check(-1, "context", &e), CN_STATUS_INVALID_ARG);
}

/* ---- the one growable buffer (buf.h) ---- */

Test(core, grow_keeps_elements_and_refuses_overflow) {
    int32_t *a = NULL;
    size_t cap = 0;
    for (int32_t i = 0; i < 1000; i++) {
        cr_assert(CN_GROW(a, cap, (size_t)i + 1));
        cr_assert_geq(cap, (size_t)i + 1);
        a[i] = i * 7;
    }
    for (int32_t i = 0; i < 1000; i++) cr_assert_eq(a[i], i * 7);
    int32_t *before = a;
    const size_t cap_before = cap;
    cr_assert_not(CN_GROW(a, cap, SIZE_MAX / 2)); /* bytes overflow: refused, untouched */
    cr_assert_eq(a, before);
    cr_assert_eq(cap, cap_before);
    cr_assert_eq(cn_grow_cap(0, 1, 4), 8);
    cr_assert_eq(cn_grow_cap(8, 9, 4), 16);
    cr_assert_eq(cn_grow_cap(8, 100, 4), 100);
    cr_assert_eq(cn_grow_cap(16, 3, 4), 16);
    free(a);
}

Test(core, buf_appends_formats_and_hands_over) {
    cn_buf b = {0};
    cr_assert(cn_buf_puts(&b, "abc"));
    cr_assert(cn_buf_putc(&b, '-'));
    cr_assert(cn_buf_printf(&b, "%d:%s", 42, "x"));
    char big[1000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = 0;
    cr_assert(cn_buf_printf(&b, "[%s]", big)); /* longer than the small first pass */
    cr_assert_eq(b.n, 3 + 1 + 4 + 1001);
    cr_assert_eq(strncmp(b.p, "abc-42:x[zzz", 12), 0);
    cr_assert_eq(b.p[b.n - 1], ']');
    size_t n = 0;
    char *s = cn_buf_take(&b, &n);
    cr_assert_eq(n, 1009);
    cr_assert_eq(strlen(s), n);
    cr_assert_null(b.p);
    free(s);
    s = cn_buf_take(&b, &n); /* nothing written: an empty string, not NULL */
    cr_assert_str_eq(s, "");
    cr_assert_eq(n, 0);
    free(s);
    b.failed = true; /* a failed write sticks: later writes are refused, take gives NULL */
    cr_assert_not(cn_buf_puts(&b, "x"));
    cr_assert_null(cn_buf_take(&b, NULL));
}

/* ---- the one output-file writer (outfile.h) ---- */

static char *tmp_dir(void) {
    char tpl[] = "/tmp/cinder-outfile-XXXXXX";
    char *d = mkdtemp(tpl);
    cr_assert_not_null(d);
    return strdup(d);
}

static size_t entries(const char *dir) {
    DIR *d = opendir(dir);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

Test(core, outfile_replaces_only_on_commit_and_leaves_nothing_on_abort) {
    char *dir = tmp_dir(), path[512];
    snprintf(path, sizeof path, "%s/out.bin", dir);
    FILE *f = fopen(path, "wb");
    fputs("old contents", f);
    fclose(f);

    cn_outfile o;
    cr_assert_eq(cn_outfile_open(&o, path, NULL), CN_STATUS_OK);
    fputs("new", o.f);
    fflush(o.f);
    cn_mapped_file m = {0};
    cr_assert_eq(cn_map_file(path, &m, NULL), CN_STATUS_OK); /* not truncated while writing */
    cr_assert_eq(m.n_bytes, 12);
    cn_unmap_file(&m);
    cr_assert_eq(entries(dir), 2);
    cn_outfile_abort(&o);
    cr_assert_eq(entries(dir), 1); /* the temporary file is gone, the old one intact */
    cr_assert_eq(cn_map_file(path, &m, NULL), CN_STATUS_OK);
    cr_assert_eq(memcmp(m.data, "old contents", 12), 0);
    cn_unmap_file(&m);
    cn_outfile_abort(&o); /* spent: a no-op */

    const mode_t old = umask(027);
    cr_assert_eq(cn_outfile_write_all(path, "fresh", 5, NULL), CN_STATUS_OK);
    umask(old);
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_assert_eq(st.st_size, 5);
    cr_assert_eq(st.st_mode & 0777, 0640); /* 0666 less the umask */
    cr_assert_eq(entries(dir), 1);

    cn_error e = {0};
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no/such/folder/x.bin", dir);
    cr_assert_eq(cn_outfile_open(&o, bad, &e), CN_STATUS_IO);
    cr_assert(strstr(e.msg, "no/such/folder/x.bin") != NULL, "%s", e.msg);
    cn_outfile_abort(&o);
    unlink(path);
    rmdir(dir);
    free(dir);
}
