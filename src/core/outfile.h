/* outfile.h — the one way the library writes a file a user named (a quantized model, an
 * importance matrix, a draft model, a perplexity logits file): into a new temporary file
 * beside it, renamed over the name only once everything is written and synced.
 *
 * What that promises: an existing file under the name is never truncated or touched
 * before success (a failed or interrupted write leaves it as it was); nothing is left
 * behind on failure (the temporary file is removed); on success the data is on disk
 * (fsync of the file, then of its folder after the rename); the file gets the mode any
 * file the user writes gets (0666 less the umask: open(O_EXCL), not mkstemp's 0600).
 *
 *   cn_outfile o;
 *   if ((st = cn_outfile_open(&o, path, err))) return st;
 *   ... fwrite(..., o.f) ...
 *   st = ok ? cn_outfile_commit(&o, err) : (cn_outfile_abort(&o), st);
 *
 * Not thread-safe per object; any number may be open at once. */
#ifndef CN_CORE_OUTFILE_H
#define CN_CORE_OUTFILE_H

#include <stdio.h>

#include "core.h"

typedef struct {
    FILE *f;    /* write here (buffered); NULL once committed or aborted */
    char *tmp;  /* the temporary file's name */
    char *path; /* the name it becomes */
} cn_outfile;

/* Creates the temporary file next to path. IO (naming path and why) when it cannot be
 * made, NO_MEMORY; *o is then zeroed, and cn_outfile_abort on it is a no-op. */
cn_status cn_outfile_open(cn_outfile *o, const char *path, cn_error *err);
/* Flushes, syncs, closes and renames over path; IO when any of it fails (the message
 * names path and errno's reason, EIO for a write error found late), and then the
 * temporary file is gone as after abort. *o is spent either way. */
cn_status cn_outfile_commit(cn_outfile *o, cn_error *err);
/* Closes and removes the temporary file; path untouched. A zeroed or spent *o: no-op. */
void cn_outfile_abort(cn_outfile *o);

/* The whole of bytes[0..n) to path through a cn_outfile. */
cn_status cn_outfile_write_all(const char *path, const void *bytes, size_t n, cn_error *err);

#endif
