/* outfile.c — temporary file, write, fsync, rename, fsync the folder (outfile.h says
 * what that promises). The temporary name is path + ".tmpNNNNN", made with O_EXCL so
 * two writers never share one, tried a few times when the name is taken. */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void spent(cn_outfile *o) {
    free(o->tmp);
    free(o->path);
    *o = (cn_outfile){0};
}

cn_status cn_outfile_open(cn_outfile *o, const char *path, cn_error *err) {
    *o = (cn_outfile){0};
    const size_t n = strlen(path) + 16;
    o->tmp = malloc(n);
    o->path = strdup(path);
    if (!o->tmp || !o->path) {
        spent(o);
        return cn_err(err, CN_STATUS_NO_MEMORY, "out of memory writing '%s'", path);
    }
    int fd = -1;
    for (unsigned k = 0; k < 100 && fd < 0; k++) {
        snprintf(o->tmp, n, "%s.tmp%05u", path, ((unsigned)getpid() + k * 7919u) % 100000u);
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0 || !(o->f = fdopen(fd, "wb"))) {
        const int e = errno;
        if (fd >= 0) {
            close(fd);
            unlink(o->tmp);
        }
        spent(o);
        return cn_err(err, CN_STATUS_IO, "cannot create a file next to '%s': %s", path, strerror(e));
    }
    return CN_STATUS_OK;
}

/* The folder's entry is on disk too: a rename is only durable once its folder is synced.
 * Best effort: some file systems refuse fsync on a folder, and the data itself is
 * already synced. */
static void sync_folder(const char *path) {
    char *copy = strdup(path);
    if (!copy) return;
    const int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(copy);
}

cn_status cn_outfile_commit(cn_outfile *o, cn_error *err) {
    if (!o->f) return cn_err(err, CN_STATUS_INVALID_ARG, "outfile: committed twice");
    errno = 0;
    bool ok = !ferror(o->f) && fflush(o->f) == 0 && fsync(fileno(o->f)) == 0;
    int e = errno;
    if (fclose(o->f) != 0 && ok) ok = false, e = errno;
    o->f = NULL;
    if (ok && rename(o->tmp, o->path) != 0) {
        const int re = errno;
        unlink(o->tmp);
        cn_status st = cn_err(err, CN_STATUS_IO, "cannot rename the output to '%s': %s", o->path, strerror(re));
        spent(o);
        return st;
    }
    if (!ok) {
        unlink(o->tmp);
        cn_status st = cn_err(err, CN_STATUS_IO, "cannot write '%s': %s", o->path, strerror(e ? e : EIO));
        spent(o);
        return st;
    }
    sync_folder(o->path);
    spent(o);
    return CN_STATUS_OK;
}

void cn_outfile_abort(cn_outfile *o) {
    if (o->f) {
        fclose(o->f);
        unlink(o->tmp);
    }
    spent(o);
}

cn_status cn_outfile_write_all(const char *path, const void *bytes, size_t n, cn_error *err) {
    cn_outfile o;
    cn_status st = cn_outfile_open(&o, path, err);
    if (st) return st;
    if (n && fwrite(bytes, 1, n, o.f) != n) {
        const int e = errno;
        cn_outfile_abort(&o);
        return cn_err(err, CN_STATUS_IO, "cannot write '%s': %s", path, strerror(e ? e : EIO));
    }
    return cn_outfile_commit(&o, err);
}
