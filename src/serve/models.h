/* models.h — the models a server answers for, by name: the one model the caller loaded
 * (cn_server_set_engine), or every GGUF file of a folder (cn_server_params.models_dir),
 * each loaded by the first request that names it and unloaded, least recently used and
 * idle first, when more than models_max would be loaded.
 *
 * A request holds its model (models_acquire ... models_release) from routing until its
 * last byte: a held model is never unloaded, so its engine, tokenizer and oai_ctx stay
 * valid for the request. Loading runs on the thread of the request that asked first,
 * outside every lock: requests for other models go on, requests for the same one wait
 * (their connection threads sleep on a condition variable, watching their deadline and
 * their client). A file that fails to load (corrupt, unsupported) is remembered with
 * its size and time: asking again fails at once until the file changes.
 *
 * Thread-safe: one mutex for the table, never held while loading, unloading or calling
 * the engine. */
#ifndef CN_SERVE_MODELS_H
#define CN_SERVE_MODELS_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cinder.h"
#include "serve/gcache.h"
#include "serve/metrics.h"
#include "serve/openai.h"
#include "serve/server.h"

/* What the server and the table share: a monotonic clock in seconds, a condition wait
 * of at most ms, and an error filled as the library's calls fill it (s returned). */
double serve_now_s(void);
void serve_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms);
cn_status serve_err(cn_error *err, cn_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

typedef enum { SM_UNLOADED, SM_LOADING, SM_LOADED, SM_UNLOADING, SM_FAILED } smodel_state;

/* One served model. The fields a request reads (e, oc, ms) are stable while it holds
 * the model. */
typedef struct smodel {
    char id[256];   /* the served name: the file name without .gguf */
    char file[256]; /* the file in the folder; "" for the model handed in */
    smodel_state state;
    cn_model *m;           /* loaded from the folder (NULL for the model handed in) */
    cn_engine *e;          /* while loaded */
    cn_embedder *emb;      /* while loaded: /v1/embeddings (NULL: 503) */
    oai_ctx oc;            /* while loaded: what its requests are parsed against */
    cn_metrics_series *ms; /* its metrics (NULL: no memory for them) */
    int n_holds;           /* requests using it: never unloaded while > 0 */
    uint64_t used;         /* recency stamp (the table's clock) */
    bool gone;             /* the file left the folder */
    cn_status fail_status; /* the last load's failure (state SM_FAILED) */
    char fail_msg[400];
    off_t fail_size; /* the file as it was when it failed */
    int64_t fail_mtime_ns;
} smodel;

typedef struct models models;

/* A table for one model handed in later (models_set_engine); base: the server's part of
 * every oai_ctx (speculation default, grammar cache and budget). NULL: no memory. */
models *models_new_single(const char *id, const oai_ctx *base, cn_metrics *mx);
/* A table of the folder p->models_dir, scanned now; aliases (p->aliases, "NAME=FILE")
 * checked against it. Errors: INVALID_ARG (a malformed alias, one naming no file, or a
 * name served twice), IO (the folder cannot be read), NO_MEMORY. */
cn_status models_new_dir(const cn_server_params *p, const oai_ctx *base, cn_metrics *mx, gcache *gc, models **out,
                         cn_error *err);
/* Unloads every model it loaded (not the one handed in). NULL: no-op. */
void models_free(models *r);

bool models_multi(const models *r);
/* The series of answers not routed to a model (with one model: that model's). */
cn_metrics_series *models_server_series(const models *r);
/* Single model: it is ready, serving e (borrowed). */
void models_set_engine(models *r, cn_engine *e);
/* Single model: /v1/embeddings through emb (borrowed). */
void models_set_embedder(models *r, cn_embedder *emb);

/* The model a request names (name NULL: the request has none; with one model, that one;
 * with several, the only one in the folder, else 400), loaded if it is not (waiting if
 * another request loads it, or for an idle model to unload when models_max are loaded).
 * gone(arg) is asked while waiting: true ends the wait (the client left). Returns 1 with
 * *out held; 0 with *e filled (404 model_not_found, 500 model_load_failed, 503 out of
 * memory / loading / shutting down, 504 past deadline); -1 when the client left.
 * *series: the metrics series the answer counts under (the named model's, or the
 * server's own). */
int models_acquire(models *r, const char *name, double deadline_s, bool (*gone)(void *), void *arg, smodel **out,
                   cn_metrics_series **series, oai_error *e);
/* One more hold on a model already held. */
void models_hold(models *r, smodel *sm);
void models_release(models *r, smodel *sm);

/* /v1/models' data array (the folder rescanned first); NULL: no memory. */
json_t *models_list(models *r);

/* For /metrics: every model with a series, each loaded one held (*held[i] true; release
 * those after reading their engines' stats). Returns the count (at most max). */
int models_snapshot(models *r, smodel **out, bool *held, int max);

/* New acquires fail (503 shutting_down) and waiting ones stop waiting. */
void models_drain(models *r);

#endif
