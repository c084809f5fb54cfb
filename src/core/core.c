/* core.c — error messages, aligned allocation, file mapping, clock and logging.
 * Owns no global state but the log level. */
#include "core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *cn_version(void) { return CN_VERSION; }

const char *cn_status_str(cn_status s) {
    switch (s) {
    case CN_STATUS_OK: return "ok";
    case CN_STATUS_INVALID_ARG: return "invalid argument";
    case CN_STATUS_IO: return "i/o error";
    case CN_STATUS_CORRUPT: return "corrupt input";
    case CN_STATUS_UNSUPPORTED: return "unsupported";
    case CN_STATUS_NO_MEMORY: return "out of memory";
    case CN_STATUS_NOT_FOUND: return "not found";
    case CN_STATUS_LIMIT: return "limit exceeded";
    case CN_STATUS_BUSY: return "busy";
    case CN_STATUS_CANCELLED: return "cancelled";
    }
    return "unknown status";
}

cn_status cn_err(cn_error *err, cn_status s, const char *fmt, ...) {
    if (err) {
        err->status = s;
        err->param[0] = '\0';
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

cn_status cn_err_param(cn_error *err, cn_status s, const char *param, const char *fmt, ...) {
    if (err) {
        err->status = s;
        snprintf(err->param, sizeof err->param, "%s", param ? param : "");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

void cn_err_clear(cn_error *err) {
    if (err) {
        err->status = CN_STATUS_OK;
        err->msg[0] = '\0';
        err->param[0] = '\0';
    }
}

void *cn_alloc_aligned(size_t n_bytes) {
    if (n_bytes == 0) n_bytes = 1;
    size_t rounded = (n_bytes + CN_ALIGN - 1) & ~(size_t)(CN_ALIGN - 1);
    if (rounded < n_bytes) return NULL;
    return aligned_alloc(CN_ALIGN, rounded);
}

void *cn_calloc_aligned(size_t n_bytes) {
    void *p = cn_alloc_aligned(n_bytes);
    if (p) memset(p, 0, n_bytes);
    return p;
}

void cn_free_aligned(void *p) { free(p); }

void *cn_alloc_huge(size_t n_bytes) {
    const size_t huge = (size_t)2 << 20;
    if (n_bytes < huge) return cn_alloc_aligned(n_bytes);
    const size_t rounded = (n_bytes + huge - 1) & ~(huge - 1);
    if (rounded < n_bytes) return NULL;
    void *p = aligned_alloc(huge, rounded);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p) madvise(p, rounded, MADV_HUGEPAGE); /* a hint: failure leaves normal pages */
#endif
    return p;
}

cn_status cn_map_file(const char *path, cn_mapped_file *out, cn_error *err) {
    out->data = NULL;
    out->n_bytes = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cn_err(err, CN_STATUS_IO, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return cn_err(err, CN_STATUS_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cn_err(err, CN_STATUS_IO, "'%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        out->data = (const uint8_t *)"";
        return CN_STATUS_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return cn_err(err, CN_STATUS_IO, "cannot map '%s': %s", path, strerror(e));
    out->data = p;
    out->n_bytes = (size_t)st.st_size;
    return CN_STATUS_OK;
}

void cn_unmap_file(cn_mapped_file *m) {
    if (m && m->data && m->n_bytes) munmap((void *)m->data, m->n_bytes);
    if (m) {
        m->data = NULL;
        m->n_bytes = 0;
    }
}

int64_t cn_time_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

double cn_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The level and the sink: set once by the program (cn_log_set*) and read by every
 * thread that logs; atomics, so a program may change them while the library runs. */
static _Atomic int g_log_level = -2; /* -2: not yet read from the environment */
static _Atomic(cn_log_fn) g_log_fn;  /* NULL: stderr */
static void *_Atomic g_log_user;

void cn_log_set_level(cn_log_level lvl) { g_log_level = (int)lvl; }

void cn_log_set(cn_log_fn fn, void *user) {
    g_log_user = user;
    g_log_fn = fn;
}

void cn_log(cn_log_level lvl, const char *fmt, ...) {
    int level = g_log_level;
    if (level == -2) {
        const char *e = getenv("CINDER_LOG");
        level = e ? atoi(e) + (int)CN_LOG_WARN - 1 : (int)CN_LOG_ERROR - 1;
        g_log_level = level;
    }
    if ((int)lvl > level || (int)lvl < 0) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const cn_log_fn fn = g_log_fn;
    if (fn) {
        fn(g_log_user, lvl, msg);
        return;
    }
    static const char *names[] = {"error", "warn", "info", "debug"};
    fprintf(stderr, "cinder %s: %s\n", names[lvl], msg);
}
