/* validate.c — the request checks the API mappings share (see validate.h). */
#include "serve/validate.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool val_bad(oai_error *e, const char *param, const char *fmt, ...) {
    char msg[sizeof e->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return oai_fail(e, 400, "invalid_request_error", param, NULL, "%s", msg);
}

bool val_oom(oai_error *e) { return oai_fail(e, 503, "server_error", NULL, NULL, "out of memory"); }

bool val_in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}

const char *val_unknown_key(json_t *o, const char *const *allowed, size_t n) {
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (!val_in_list(k, allowed, n)) return k;
    }
    return NULL;
}

bool val_only_keys(json_t *o, const char *path, const char *const *allowed, size_t n, oai_error *e) {
    const char *k = val_unknown_key(o, allowed, n);
    if (!k) return true;
    char p[96];
    snprintf(p, sizeof p, "%s%s%.40s", path, *path ? "." : "", k);
    return oai_fail(e, 400, "invalid_request_error", p, "unsupported_parameter", "unsupported field '%s'", p);
}

const char *val_str(json_t *o, const char *k) {
    json_t *t = json_object_get(o, k);
    return json_is_string(t) ? json_string_value(t) : "";
}
