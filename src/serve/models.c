/* models.c — the served models by name, loaded on demand, least recently used idle one
 * unloaded (see models.h for the contract).
 *
 * DESIGN. The table is an array of pointers to entries that live until models_free
 * (a file that leaves the folder is marked gone, never freed), so a request may keep a
 * pointer without the lock. Each entry moves UNLOADED -> LOADING -> LOADED ->
 * UNLOADING -> UNLOADED (or LOADING -> FAILED); the thread that moves it out of a
 * stable state does the slow part (load, or free) alone with the lock released, then
 * takes the lock again, sets the new state and wakes every waiter. LOADING and UNLOADING
 * count against models_max like LOADED: memory is given back before more is taken.
 * Nothing here calls the engine with the lock held. */
#include "serve/models.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "cinder_gguf.h"
#include "core/buf.h"

#define WAKE_MS 50

typedef struct {
    char name[256];
    smodel *to;
} alias;

struct models {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* an entry changed state, or a hold was released */
    bool multi, draining;
    char *dir;
    int max_loaded;
    cn_server_load_fn load;
    void *load_user;
    oai_ctx base;
    cn_metrics *mx;
    cn_metrics_series *server_ms; /* answers not routed to a model */
    gcache *gc;
    smodel **v;
    int n;
    size_t cap;
    alias *aliases;
    int n_aliases;
    uint64_t clock;
};

double serve_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void serve_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += (long)ms * 1000000L;
    t.tv_sec += t.tv_nsec / 1000000000L;
    t.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(cv, mu, &t);
}

cn_status serve_err(cn_error *err, cn_status s, const char *fmt, ...) {
    if (!err) return s;
    memset(err, 0, sizeof *err);
    err->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return s;
}

static models *table_new(const oai_ctx *base, cn_metrics *mx) {
    models *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->base = *base;
    r->mx = mx;
    return r;
}

/* A new entry (lock held or table not shared yet); NULL: no memory. */
static smodel *entry_add(models *r, const char *id, const char *file) {
    if (!CN_GROW(r->v, r->cap, (size_t)r->n + 1)) return NULL;
    smodel *sm = calloc(1, sizeof *sm);
    if (!sm) return NULL;
    snprintf(sm->id, sizeof sm->id, "%s", id);
    snprintf(sm->file, sizeof sm->file, "%s", file);
    sm->ms = cn_metrics_series_get(r->mx, id);
    r->v[r->n++] = sm;
    return sm;
}

models *models_new_single(const char *id, const oai_ctx *base, cn_metrics *mx) {
    models *r = table_new(base, mx);
    if (!r) return NULL;
    smodel *sm = entry_add(r, id, "");
    if (!sm) {
        models_free(r);
        return NULL;
    }
    sm->state = SM_LOADING; /* until models_set_engine */
    r->server_ms = sm->ms;
    sm->oc = *base;
    sm->oc.model_id = sm->id;
    return r;
}

bool models_multi(const models *r) { return r->multi; }

cn_metrics_series *models_server_series(const models *r) { return r->server_ms; }

/* What a request is parsed against, from the engine. */
static void fill_ctx(models *r, smodel *sm, cn_engine *e) {
    sm->oc = r->base;
    sm->oc.model_id = sm->id;
    sm->oc.routed = r->multi;
    sm->oc.tok = cn_engine_tokenizer(e);
    sm->oc.chat = cn_engine_chat_template(e);
    sm->oc.eot_stop = cn_engine_end_of_turn_stop(e);
    sm->oc.n_ctx = cn_engine_n_ctx(e);
    sm->oc.n_vocab = cn_engine_n_vocab(e);
    sm->oc.has_draft = cn_engine_has_draft(e);
    const int32_t mr = cn_engine_max_running(e);
    sm->oc.max_n = mr < CN_ENGINE_MAX_N ? mr : CN_ENGINE_MAX_N;
}

void models_set_engine(models *r, cn_engine *e) {
    pthread_mutex_lock(&r->mu);
    smodel *sm = r->v[0];
    sm->e = e;
    fill_ctx(r, sm, e);
    sm->state = SM_LOADED;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void models_set_embedder(models *r, cn_embedder *emb) {
    pthread_mutex_lock(&r->mu);
    r->v[0]->emb = emb;
    pthread_mutex_unlock(&r->mu);
}

/* ---- the folder ---- */

/* The id of a file name: without ".gguf"; false for a name that is not served (hidden,
 * another extension, too long). */
static bool id_of(const char *name, char *id, size_t n) {
    const size_t len = strlen(name);
    if (name[0] == '.' || len <= 5 || len >= n || strcmp(name + len - 5, ".gguf")) return false;
    memcpy(id, name, len - 5);
    id[len - 5] = 0;
    return true;
}

/* Rescans the folder (lock not held): new files are added, files gone are marked. */
static void rescan(models *r) {
    DIR *d = opendir(r->dir);
    if (!d) return;
    char(*names)[256] = NULL;
    int n = 0;
    size_t cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char id[256], path[4096];
        if (!id_of(de->d_name, id, sizeof id)) continue;
        struct stat st;
        /* every name but a folder's: what cannot be loaded (a FIFO, a corrupt file) is
           listed and fails with a clear error when asked for */
        if (snprintf(path, sizeof path, "%s/%s", r->dir, de->d_name) >= (int)sizeof path || stat(path, &st) ||
            S_ISDIR(st.st_mode))
            continue;
        if (!CN_GROW(names, cap, (size_t)n + 1)) break;
        snprintf(names[n++], 256, "%s", de->d_name);
    }
    closedir(d);
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        bool seen = false;
        for (int k = 0; k < n && !seen; k++) seen = !strcmp(names[k], r->v[i]->file);
        r->v[i]->gone = !seen;
    }
    for (int k = 0; k < n; k++) {
        bool known = false;
        for (int i = 0; i < r->n && !known; i++) known = !strcmp(names[k], r->v[i]->file);
        char id[256];
        if (!known && id_of(names[k], id, sizeof id)) entry_add(r, id, names[k]);
    }
    pthread_mutex_unlock(&r->mu);
    free(names);
}

/* The entry for a name: an id, an alias, or a file name (lock held). */
static smodel *find(models *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (!r->v[i]->gone && !strcmp(r->v[i]->id, name)) return r->v[i];
    for (int i = 0; i < r->n_aliases; i++)
        if (!strcmp(r->aliases[i].name, name) && !r->aliases[i].to->gone) return r->aliases[i].to;
    for (int i = 0; i < r->n; i++)
        if (!r->v[i]->gone && !strcmp(r->v[i]->file, name)) return r->v[i];
    return NULL;
}

cn_status models_new_dir(const cn_server_params *p, const oai_ctx *base, cn_metrics *mx, gcache *gc, models **out,
                         cn_error *err) {
    *out = NULL;
    if (!p->load) return serve_err(err, CN_STATUS_INVALID_ARG, "server: several models need a loader");
    DIR *d = opendir(p->models_dir);
    if (!d)
        return serve_err(err, CN_STATUS_IO, "cannot read the models folder '%.300s': %s", p->models_dir,
                         strerror(errno));
    closedir(d);
    models *r = table_new(base, mx);
    const size_t n_dir = strlen(p->models_dir) + 1;
    if (r) r->dir = malloc(n_dir);
    if (r && r->dir && p->n_aliases > 0) r->aliases = calloc((size_t)p->n_aliases, sizeof *r->aliases);
    if (!r || !r->dir || (p->n_aliases > 0 && !r->aliases)) {
        models_free(r);
        return serve_err(err, CN_STATUS_NO_MEMORY, "server: out of memory");
    }
    memcpy(r->dir, p->models_dir, n_dir);
    r->multi = true;
    r->max_loaded = p->models_max;
    r->load = p->load;
    r->load_user = p->load_user;
    r->gc = gc;
    r->server_ms = cn_metrics_series_get(mx, "");
    rescan(r);
    for (int i = 0; i < p->n_aliases; i++) {
        const char *a = p->aliases[i], *eq = strchr(a, '=');
        if (!eq || eq == a || !eq[1] || (size_t)(eq - a) >= sizeof r->aliases[i].name) {
            models_free(r);
            return serve_err(err, CN_STATUS_INVALID_ARG, "alias '%.200s' is not NAME=FILE", a);
        }
        alias *al = &r->aliases[r->n_aliases];
        memcpy(al->name, a, (size_t)(eq - a));
        al->name[eq - a] = 0;
        char file[300];
        snprintf(file, sizeof file, "%s", eq + 1);
        al->to = find(r, file);
        if (!al->to) {
            char with[310];
            snprintf(with, sizeof with, "%s.gguf", file);
            al->to = find(r, with);
        }
        if (!al->to) {
            models_free(r);
            return serve_err(err, CN_STATUS_INVALID_ARG, "alias '%.200s': no model '%.200s' in %.300s", a, eq + 1,
                             p->models_dir);
        }
        if (find(r, al->name)) {
            serve_err(err, CN_STATUS_INVALID_ARG, "alias '%.200s': the name '%.200s' is already served", a, al->name);
            models_free(r);
            return CN_STATUS_INVALID_ARG;
        }
        r->n_aliases++;
    }
    *out = r;
    return CN_STATUS_OK;
}

/* ---- loading and unloading ---- */

static int64_t mtime_ns(const struct stat *st) {
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* A load failure's message for clients: the folder's path (the server's business) cut
 * from it, the file named as in the folder. */
static void set_fail(models *r, smodel *sm, cn_status st, const char *msg, const struct stat *fs) {
    sm->state = SM_FAILED;
    sm->fail_status = st;
    sm->fail_size = fs ? fs->st_size : -1;
    sm->fail_mtime_ns = fs ? mtime_ns(fs) : -1;
    if (!msg || !*msg) msg = "unknown error";
    const size_t nd = strlen(r->dir);
    size_t k = 0;
    for (const char *p = msg; *p && k + 1 < sizeof sm->fail_msg;) {
        if (!strncmp(p, r->dir, nd) && p[nd] == '/') {
            p += nd + 1;
            continue;
        }
        sm->fail_msg[k++] = *p++;
    }
    sm->fail_msg[k] = 0;
}

/* Frees a loaded model's engine and weights (lock held on entry and exit, released
 * meanwhile; sm is UNLOADING so nobody else touches it). */
static void unload(models *r, smodel *sm) {
    sm->state = SM_UNLOADING;
    cn_engine *e = sm->e;
    cn_embedder *emb = sm->emb;
    cn_model *m = sm->m;
    const cn_tokenizer *tok = sm->oc.tok;
    sm->e = NULL;
    sm->emb = NULL;
    sm->m = NULL;
    pthread_mutex_unlock(&r->mu);
    gcache_drop_tokenizer(r->gc, tok);
    cn_embedder_free(emb);
    cn_engine_free(e);
    cn_model_free(m);
#if defined(__GLIBC__)
    malloc_trim(0); /* the engine's smaller buffers live in the heap: give its pages back */
#endif
    pthread_mutex_lock(&r->mu);
    sm->state = SM_UNLOADED;
    cn_metrics_model_unload(r->mx, sm->ms);
    pthread_cond_broadcast(&r->cv);
}

/* Loads sm (lock held on entry and exit, released while loading). True: loaded. */
static bool load(models *r, smodel *sm) {
    sm->state = SM_LOADING;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->dir, sm->file);
    pthread_mutex_unlock(&r->mu);
    cn_model *m = NULL;
    cn_engine *e = NULL;
    cn_embedder *emb = NULL;
    cn_error err = {0};
    const double t0 = serve_now_s();
    cn_status st = r->load(r->load_user, path, &m, &e, &emb, &err);
    const double dt = serve_now_s() - t0;
    if (st == CN_STATUS_OK && (!m || !e)) st = serve_err(&err, CN_STATUS_INVALID_ARG, "the loader made no engine");
    struct stat fs;
    const bool have_stat = stat(path, &fs) == 0;
    pthread_mutex_lock(&r->mu);
    cn_metrics_model_load(r->mx, sm->ms, dt, st == CN_STATUS_OK);
    if (st == CN_STATUS_OK) {
        sm->m = m;
        sm->e = e;
        sm->emb = emb;
        fill_ctx(r, sm, e);
        sm->state = SM_LOADED;
    } else {
        set_fail(r, sm, st, err.msg, have_stat ? &fs : NULL);
    }
    pthread_cond_broadcast(&r->cv);
    return st == CN_STATUS_OK;
}

/* Before a load that unloads another model: is the file a readable GGUF at all (its
 * header, metadata and tensor table checked, no weights read)? A corrupt file then costs
 * no loaded model its place. Lock held on entry and exit, released meanwhile; false with
 * sm FAILED. */
static bool precheck(models *r, smodel *sm) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->dir, sm->file);
    pthread_mutex_unlock(&r->mu);
    cn_gguf *g = NULL;
    cn_error err = {0};
    const cn_status st = cn_gguf_open(path, &g, &err);
    cn_gguf_close(g);
    struct stat fs;
    const bool have_stat = stat(path, &fs) == 0;
    pthread_mutex_lock(&r->mu);
    if (st == CN_STATUS_OK || (sm->state != SM_UNLOADED && sm->state != SM_FAILED)) return true;
    cn_metrics_model_load(r->mx, sm->ms, 0, false);
    set_fail(r, sm, st, err.msg, have_stat ? &fs : NULL);
    pthread_cond_broadcast(&r->cv);
    return false;
}

/* A failed entry is tried again when memory was short, or its file changed since. */
static bool retry_failed(models *r, const smodel *sm) {
    if (sm->fail_status == CN_STATUS_NO_MEMORY) return true;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->dir, sm->file);
    struct stat fs;
    if (stat(path, &fs)) return sm->fail_size != -1;
    return fs.st_size != sm->fail_size || mtime_ns(&fs) != sm->fail_mtime_ns;
}

static int load_failed(const smodel *sm, oai_error *e) {
    if (sm->fail_status == CN_STATUS_NO_MEMORY)
        oai_fail(e, 503, "server_error", "model", "model_load_failed", "the model '%.200s' could not be loaded: %s",
                 sm->id, sm->fail_msg);
    else
        oai_fail(e, 500, "server_error", "model", "model_load_failed", "the model '%.200s' could not be loaded: %s",
                 sm->id, sm->fail_msg);
    return 0;
}

/* Entries taking memory (loaded, or on the way in or out); lock held. */
static int n_resident(const models *r) {
    int k = 0;
    for (int i = 0; i < r->n; i++) {
        const smodel_state st = r->v[i]->state;
        k += st == SM_LOADING || st == SM_LOADED || st == SM_UNLOADING;
    }
    return k;
}

/* The least recently used loaded model no request holds, or NULL; lock held. */
static smodel *lru_idle(const models *r) {
    smodel *best = NULL;
    for (int i = 0; i < r->n; i++) {
        smodel *x = r->v[i];
        if (x->state == SM_LOADED && x->n_holds == 0 && (!best || x->used < best->used)) best = x;
    }
    return best;
}

int models_acquire(models *r, const char *name, double deadline_s, bool (*gone)(void *), void *arg, smodel **out,
                   cn_metrics_series **series, oai_error *e) {
    *out = NULL;
    *series = r->server_ms;
    if (r->multi && name) {
        pthread_mutex_lock(&r->mu);
        const bool known = find(r, name) != NULL;
        pthread_mutex_unlock(&r->mu);
        if (!known) rescan(r); /* a file copied in since */
    }
    pthread_mutex_lock(&r->mu);
    smodel *sm = NULL;
    if (!r->multi) {
        sm = r->v[0];
    } else if (name) {
        sm = find(r, name);
        if (!sm) {
            pthread_mutex_unlock(&r->mu);
            return oai_fail(e, 404, "invalid_request_error", "model", "model_not_found",
                            "The model '%.200s' does not exist: GET /v1/models lists the models of this server", name);
        }
    } else {
        int k = 0;
        for (int i = 0; i < r->n; i++)
            if (!r->v[i]->gone) k++, sm = r->v[i];
        if (k != 1) {
            pthread_mutex_unlock(&r->mu);
            return oai_fail(e, 400, "invalid_request_error", "model", NULL,
                            "'model' is required: this server serves several models (GET /v1/models lists them)");
        }
    }
    *series = sm->ms;
    int rc = 1;
    bool tried = false;   /* this thread has loaded it once: it does not load it again */
    bool checked = false; /* this thread has prechecked the file */
    for (;;) {
        if (sm->state == SM_LOADED) {
            sm->n_holds++;
            sm->used = ++r->clock;
            *out = sm;
            break;
        }
        if (r->draining) { /* nothing is loaded or waited for any more */
            rc = oai_fail(e, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
            break;
        }
        if (!r->multi) { /* the one model is still loading */
            rc = oai_fail(e, 503, "server_error", NULL, "model_loading", "the model is still loading");
            break;
        }
        if (sm->state == SM_FAILED && (tried || !retry_failed(r, sm))) {
            rc = load_failed(sm, e);
            break;
        }
        if (sm->state == SM_UNLOADED || sm->state == SM_FAILED) {
            if (r->max_loaded <= 0 || n_resident(r) < r->max_loaded) {
                tried = true;
                if (!load(r, sm)) {
                    rc = load_failed(sm, e);
                    break;
                }
                continue;
            }
            smodel *victim = lru_idle(r);
            if (victim && !checked) {
                checked = true;
                if (!precheck(r, sm)) {
                    rc = load_failed(sm, e);
                    break;
                }
                continue; /* the table may have changed meanwhile */
            }
            if (victim) {
                unload(r, victim);
                continue;
            }
        }
        /* loading or unloading elsewhere, or every loaded model busy: wait */
        if (serve_now_s() > deadline_s) {
            rc = oai_fail(e, 504, "timeout_error", "model", "timeout",
                          "the model '%.200s' did not become ready in time (%s)", sm->id,
                          sm->state == SM_LOADING ? "still loading" : "every loaded model is busy (--models-max)");
            break;
        }
        serve_timed_wait(&r->cv, &r->mu, WAKE_MS);
        if (gone && sm->state != SM_LOADED) {
            pthread_mutex_unlock(&r->mu);
            const bool left = gone(arg);
            pthread_mutex_lock(&r->mu);
            if (left) {
                rc = -1;
                break;
            }
        }
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void models_hold(models *r, smodel *sm) {
    pthread_mutex_lock(&r->mu);
    sm->n_holds++;
    pthread_mutex_unlock(&r->mu);
}

void models_release(models *r, smodel *sm) {
    if (!sm) return;
    pthread_mutex_lock(&r->mu);
    sm->n_holds--;
    sm->used = ++r->clock;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* ---- listing ---- */

static const char *state_str(smodel_state s) {
    static const char *const names[] = {"unloaded", "loading", "loaded", "unloading", "failed"};
    return names[s];
}

json_t *models_list(models *r) {
    if (r->multi) rescan(r);
    json_t *data = json_array();
    if (!data) return NULL;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        const smodel *sm = r->v[i];
        if (sm->gone) continue;
        json_t *m = json_pack("{s:s,s:s,s:I,s:s}", "id", sm->id, "object", "model", "created", (json_int_t)time(NULL),
                              "owned_by", "cinder");
        if (!m) continue;
        if (sm->state == SM_LOADED) json_object_set_new(m, "max_model_len", json_integer(sm->oc.n_ctx));
        if (r->multi) {
            json_object_set_new(m, "status", json_string(state_str(sm->state)));
            if (sm->state == SM_FAILED) json_object_set_new(m, "error", json_string(sm->fail_msg));
            json_t *al = json_array();
            for (int k = 0; k < r->n_aliases; k++)
                if (r->aliases[k].to == sm) json_array_append_new(al, json_string(r->aliases[k].name));
            json_object_set_new(m, "aliases", al);
        }
        json_array_append_new(data, m);
    }
    for (int k = 0; k < r->n_aliases; k++) {
        const smodel *sm = r->aliases[k].to;
        if (sm->gone) continue;
        json_t *m = json_pack("{s:s,s:s,s:I,s:s,s:s,s:s}", "id", r->aliases[k].name, "object", "model", "created",
                              (json_int_t)time(NULL), "owned_by", "cinder", "alias_of", sm->id, "status",
                              state_str(sm->state));
        if (m && sm->state == SM_LOADED) json_object_set_new(m, "max_model_len", json_integer(sm->oc.n_ctx));
        json_array_append_new(data, m);
    }
    pthread_mutex_unlock(&r->mu);
    return data;
}

int models_snapshot(models *r, smodel **out, bool *held, int max) {
    pthread_mutex_lock(&r->mu);
    int k = 0;
    for (int i = 0; i < r->n && k < max; i++) {
        smodel *sm = r->v[i];
        if (!sm->ms || (sm->gone && sm->state != SM_LOADED)) continue;
        held[k] = sm->state == SM_LOADED;
        if (held[k]) sm->n_holds++;
        out[k++] = sm;
    }
    pthread_mutex_unlock(&r->mu);
    return k;
}

void models_drain(models *r) {
    pthread_mutex_lock(&r->mu);
    r->draining = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void models_free(models *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) {
        smodel *sm = r->v[i];
        if (sm->m) { /* loaded here (the model handed in is its caller's) */
            gcache_drop_tokenizer(r->gc, sm->oc.tok);
            cn_embedder_free(sm->emb);
            cn_engine_free(sm->e);
            cn_model_free(sm->m);
        }
        free(sm);
    }
    free(r->v);
    free(r->aliases);
    free(r->dir);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}
