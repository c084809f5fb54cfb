/* jinja_format.c — Python's two string formattings, as templates use them: fmt % args
 * (printf-style: what jinja2's format filter runs, and the % operator on a string) and
 * str.format with the format-spec mini-language (format(value, spec)).
 *
 * Each is split the way Python's own implementation reads: a loop over the format that
 * copies literal text and parses one field or conversion at a time, then a function per
 * kind of conversion (strings, integers, floats). Widths and precisions are bounded
 * (4096 for %, 100000 for specs) so no conversion can ask for more than a fixed buffer;
 * everything else is written through the render's buffers, which stop at the output
 * budget. Messages are Python's. Nothing here keeps state between calls. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"
#include "jinja/jinja_impl.h"

/* ---- fmt % args ---- */

/* One fmt % args in progress: where the format is read, and the arguments used. */
typedef struct {
    const char *s;
    size_t n, i;
    jv args;        /* the right operand */
    const jv *list; /* its items when it is a tuple, else the operand alone */
    size_t n_args, next;
    const jdict *named; /* the operand when it is a dict: %(name)s looks up here */
    bool used_named;
} pct_state;

/* One conversion: %[(name)][flags][width][.precision]conv */
typedef struct {
    jv arg; /* borrowed; missing until chosen */
    char flags[8];
    int width, prec; /* -1: not given */
    char conv;
} pct_spec;

static bool pct_incomplete(jr *r) { return jr_fail(r, "incomplete format"); }

/* %(name): the dict's value for name; ps->i at the '(' */
static bool pct_named(jr *r, pct_state *ps, pct_spec *sp) {
    const char *s = ps->s;
    size_t j = ps->i + 1;
    while (j < ps->n && s[j] != ')') j++;
    if (j >= ps->n) return pct_incomplete(r);
    if (!ps->named) return jr_fail(r, "format requires a mapping");
    const jv *v = jdict_get_str(ps->named, s + ps->i + 1, j - ps->i - 1);
    if (!v) return jr_fail(r, "KeyError: '%.*s'", (int)CN_MIN(j - ps->i - 1, 64), s + ps->i + 1);
    sp->arg = *v;
    ps->used_named = true;
    ps->i = j + 1;
    return true;
}

/* The decimal number at s[*i] (stopping to grow past 100000), or v when there is none. */
static int pct_count(const char *s, size_t n, size_t *i, int v) {
    for (; *i < n && s[*i] >= '0' && s[*i] <= '9'; ++*i)
        if (v < 100000) v = (v < 0 ? 0 : v) * 10 + (s[*i] - '0');
    return v;
}

/* Reads the conversion whose '%' is just before ps->i. */
static bool pct_parse(jr *r, pct_state *ps, pct_spec *sp) {
    const char *s = ps->s;
    *sp = (pct_spec){.arg = jv_missing(), .width = -1, .prec = -1};
    if (s[ps->i] == '(' && !pct_named(r, ps, sp)) return false;
    size_t i = ps->i;
    int nfl = 0;
    while (i < ps->n && strchr("-+ #0", s[i]) && nfl < 7) sp->flags[nfl++] = s[i++];
    sp->width = pct_count(s, ps->n, &i, -1);
    if (i < ps->n && s[i] == '.') {
        i++;
        sp->prec = pct_count(s, ps->n, &i, 0);
    }
    if (sp->width > 4096 || sp->prec > 4096) return jr_fail(r, "format width or precision too large");
    if (i >= ps->n) return pct_incomplete(r);
    sp->conv = s[i++];
    ps->i = i;
    return true;
}

/* The argument of a conversion without (name): a dict operand not yet used by name is
 * the argument itself; otherwise the next positional one. */
static bool pct_take_arg(jr *r, pct_state *ps, pct_spec *sp) {
    if (!jv_is_missing(sp->arg)) return true;
    if (ps->named && !ps->used_named) sp->arg = ps->args;
    else if (ps->next >= ps->n_args) return jr_fail(r, "not enough arguments for format string");
    else sp->arg = ps->list[ps->next++];
    return true;
}

/* %s %r %a: str() (escaped into Markup), repr(); width and precision count code points */
static bool pct_str(jr *r, jbuf *o, const pct_spec *sp, bool markup) {
    jv sv;
    bool ok;
    if (sp->conv != 's') ok = jr_to_repr(r, sp->arg, &sv);
    else if (markup) ok = jr_escape(r, sp->arg, &sv);
    else ok = jr_to_str(r, sp->arg, &sv);
    if (!ok) return false;
    const size_t cps = jstr_ncp(sv.u.s);
    size_t keep = sv.u.s->len, shown = cps;
    if (sp->prec >= 0 && (size_t)sp->prec < cps) {
        keep = ju8_offset(sv.u.s, (size_t)sp->prec);
        shown = (size_t)sp->prec;
    }
    const bool left = strchr(sp->flags, '-') != NULL;
    if (!left)
        for (int k = (int)shown; k < sp->width; k++) jbuf_putc(o, ' ');
    jbuf_put(o, sv.u.s->b, keep);
    if (left)
        for (int k = (int)shown; k < sp->width; k++) jbuf_putc(o, ' ');
    jv_unref(sv);
    return true;
}

/* %d %i %x %X %o of v as Python lays it out: a sign, the '#' prefix (0x, 0X, 0o), the
 * digits of |v| zero-filled to the precision, the whole padded to the width (with zeros
 * after the sign under the '0' flag) */
static void pct_digits(jbuf *o, const pct_spec *sp, int64_t v) {
    const char conv = sp->conv, *flags = sp->flags;
    const unsigned long long av = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    char digits[32], head[8] = "";
    snprintf(digits, sizeof digits, conv == 'x' ? "%llx" : conv == 'X' ? "%llX" : conv == 'o' ? "%llo" : "%llu", av);
    snprintf(head, sizeof head, "%s%s",
             v < 0                ? "-"
             : strchr(flags, '+') ? "+"
             : strchr(flags, ' ') ? " "
                                  : "",
             !strchr(flags, '#') ? ""
             : conv == 'x'       ? "0x"
             : conv == 'X'       ? "0X"
             : conv == 'o'       ? "0o"
                                 : "");
    const int nd = (int)strlen(digits), zeros = sp->prec > nd ? sp->prec - nd : 0;
    const int len = (int)strlen(head) + zeros + nd, pad = sp->width > len ? sp->width - len : 0;
    const bool left = strchr(flags, '-') != NULL, zero_fill = !left && strchr(flags, '0') != NULL;
    if (!left && !zero_fill)
        for (int k = 0; k < pad; k++) jbuf_putc(o, ' ');
    jbuf_put(o, head, strlen(head));
    for (int k = 0; k < zeros + (zero_fill ? pad : 0); k++) jbuf_putc(o, '0');
    jbuf_put(o, digits, (size_t)nd);
    if (left)
        for (int k = 0; k < pad; k++) jbuf_putc(o, ' ');
}

/* %d %i %x %X %o %c: an integer (%d and %i take a float's integer part); %c also a
 * one-character string */
static bool pct_int(jr *r, jbuf *o, const pct_spec *sp) {
    const jv arg = sp->arg;
    const char conv = sp->conv;
    int64_t v;
    if (conv == 'c' && arg.kind == JV_STR && jstr_ncp(arg.u.s) == 1) {
        jbuf_put(o, arg.u.s->b, arg.u.s->len);
        return true;
    }
    if (jv_is_intlike(arg)) v = arg.u.i;
    else if (arg.kind == JV_FLOAT && conv != 'c' && conv != 'x' && conv != 'X' && conv != 'o' && isfinite(arg.u.f) &&
             fabs(arg.u.f) < 9.2e18)
        v = (int64_t)arg.u.f;
    else
        return jr_fail(r, "%%%c format: a%s number is required, not %s", conv,
                       conv == 'd' || conv == 'i' ? " real" : "n integer", jv_type_name(arg));
    if (conv != 'c') {
        pct_digits(o, sp, v);
        return true;
    }
    if (v < 0 || v > 0x10FFFF) return jr_fail(r, "%%c arg not in range(0x110000)");
    ju8_put(o, (uint32_t)v);
    return true;
}

/* %f %F %e %E %g %G: C's printf does these as Python does */
static bool pct_float(jr *r, jbuf *o, const pct_spec *sp) {
    if (!jv_is_num(sp->arg)) return jr_fail(r, "must be real number, not %s", jv_type_name(sp->arg));
    char spec[32], tmp[4200];
    snprintf(spec, sizeof spec, "%%%s%s%s%c", sp->flags, sp->width >= 0 ? "*" : "", sp->prec >= 0 ? ".*" : "",
             sp->conv);
    const double x = jv_to_f(sp->arg);
    if (sp->width >= 0 && sp->prec >= 0) snprintf(tmp, sizeof tmp, spec, sp->width, sp->prec, x);
    else if (sp->width >= 0) snprintf(tmp, sizeof tmp, spec, sp->width, x);
    else if (sp->prec >= 0) snprintf(tmp, sizeof tmp, spec, sp->prec, x);
    else snprintf(tmp, sizeof tmp, spec, x);
    jbuf_put(o, tmp, strlen(tmp));
    return true;
}

static bool pct_convert(jr *r, jbuf *o, const pct_spec *sp, bool markup) {
    switch (sp->conv) {
    case 's':
    case 'r':
    case 'a': return pct_str(r, o, sp, markup);
    case 'd':
    case 'i':
    case 'x':
    case 'X':
    case 'o':
    case 'c': return pct_int(r, o, sp);
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G': return pct_float(r, o, sp);
    default: return jr_fail(r, "unsupported format character '%c'", sp->conv);
    }
}

bool jr_format_percent(jr *r, jv fmt, jv args, jv *out) {
    const bool markup = fmt.flags & JF_MARKUP, tuple = args.kind == JV_LIST && (args.flags & JF_TUPLE);
    pct_state ps = {.s = fmt.u.s->b,
                    .n = fmt.u.s->len,
                    .args = args,
                    .n_args = tuple ? args.u.l->n : 1,
                    .named = args.kind == JV_DICT ? args.u.d : NULL};
    ps.list = tuple ? args.u.l->v : &ps.args;
    jbuf o;
    jr_buf_init(r, &o);
    bool ok = true;
    while (ok && ps.i < ps.n) {
        if (ps.s[ps.i] != '%') {
            size_t j = ps.i;
            while (j < ps.n && ps.s[j] != '%') j++;
            jbuf_put(&o, ps.s + ps.i, j - ps.i);
            ps.i = j;
            continue;
        }
        pct_spec sp;
        if (++ps.i >= ps.n) ok = pct_incomplete(r);
        else if (!pct_parse(r, &ps, &sp)) ok = false;
        else if (sp.conv == '%') jbuf_putc(&o, '%');
        else ok = pct_take_arg(r, &ps, &sp) && pct_convert(r, &o, &sp, markup);
    }
    /* Python skips this check when the argument can be subscripted (a dict, a list) */
    const bool mapping_like = args.kind == JV_DICT || args.kind == JV_RANGE || (args.kind == JV_LIST && !tuple);
    if (ok && !mapping_like && ps.next < ps.n_args)
        ok = jr_fail(r, "not all arguments converted during string formatting");
    if (!ok) {
        jbuf_free(&o);
        return false;
    }
    return jr_buf_to_str_as(r, &o, markup, out);
}

/* ---- format(value, spec) ---- */

/* A format spec of the mini-language subset templates use:
 * [[fill]align][sign][#][0][width][,][.precision][type] */
typedef struct {
    const char *fill;
    size_t fill_len;
    char align, sign, type; /* align 0: by the value's kind */
    bool zero, comma;
    int64_t width, prec; /* -1: not given */
} fspec;

static bool fspec_parse(const char *spec, size_t n, fspec *f) {
    *f = (fspec){.fill = " ", .fill_len = 1, .sign = '-', .width = -1, .prec = -1};
    size_t i = 0;
    uint32_t cp;
    bool ok;
    const size_t k = ju8_next(spec, n, &cp, &ok);
    if (k < n && strchr("<>^=", spec[k])) {
        f->fill = spec;
        f->fill_len = k;
        f->align = spec[k];
        i = k + 1;
    } else if (strchr("<>^=", spec[0])) {
        f->align = spec[0];
        i = 1;
    }
    if (i < n && strchr("+- ", spec[i])) f->sign = spec[i++];
    if (i < n && spec[i] == '#') i++; /* the alternate form: accepted, changes nothing here */
    if (i < n && spec[i] == '0') f->zero = true, i++;
    while (i < n && spec[i] >= '0' && spec[i] <= '9' && f->width < 100000)
        f->width = (f->width < 0 ? 0 : f->width) * 10 + (spec[i++] - '0');
    if (i < n && (spec[i] == ',' || spec[i] == '_')) f->comma = true, i++;
    if (i < n && spec[i] == '.') {
        f->prec = 0;
        i++;
        while (i < n && spec[i] >= '0' && spec[i] <= '9' && f->prec < 100000)
            f->prec = f->prec * 10 + (spec[i++] - '0');
    }
    if (i < n) f->type = spec[i++];
    return i == n && f->width < 100000 && f->prec < 100000;
}

/* The digits of ax in base 2, with a comma every three decimal digits, ... as type asks */
static void fspec_digits(unsigned long long ax, const fspec *f, char digits[80]) {
    const char type = f->type;
    if (type == 'x' || type == 'X' || type == 'o') {
        snprintf(digits, 80, type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llo", ax);
    } else if (type == 'b') {
        int k = 0;
        char t[70];
        unsigned long long y = ax;
        do {
            t[k++] = (char)('0' + (y & 1));
            y >>= 1;
        } while (y);
        for (int j = 0; j < k; j++) digits[j] = t[k - 1 - j];
        digits[k] = 0;
    } else if (type == 'c') {
        char t[5];
        t[cn_utf8_encode((uint32_t)(ax & 0x1FFFFF), t)] = 0;
        snprintf(digits, 80, "%s", t);
    } else {
        snprintf(digits, 80, "%llu", ax);
        if (f->comma) {
            char t[80];
            const size_t dl = strlen(digits);
            size_t k = 0;
            for (size_t j = 0; j < dl; j++) {
                t[k++] = digits[j];
                if ((dl - 1 - j) % 3 == 0 && j + 1 < dl) t[k++] = ',';
            }
            t[k] = 0;
            memcpy(digits, t, k + 1);
        }
    }
}

static const char *fspec_sign(const fspec *f) { return f->sign == '+' ? "+" : f->sign == ' ' ? " " : ""; }

/* An integer under types d n x X o b c (c: the character, which is not a number to pad) */
static bool fspec_int(int64_t x, const fspec *f, char num[512]) {
    const unsigned long long ax = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
    char digits[80];
    fspec_digits(ax, f, digits);
    snprintf(num, 512, "%s%s", x < 0 ? "-" : fspec_sign(f), digits);
    return f->type != 'c';
}

/* A number under types e E f F g G % (none: repr, as str() writes it) */
static void fspec_float(double x, const fspec *f, char num[512]) {
    const char type = f->type;
    if (type == 0 && f->prec < 0) {
        jpy_float_repr(x, num);
        if (f->sign != '-' && x >= 0) {
            memmove(num + 1, num, strlen(num) + 1);
            num[0] = f->sign == '+' ? '+' : ' ';
        }
        return;
    }
    char fmt[16];
    snprintf(fmt, sizeof fmt, "%%%s.*%c", fspec_sign(f), type == 0 ? 'g' : type == '%' ? 'f' : type);
    snprintf(num, 511, fmt, (int)(f->prec < 0 ? 6 : f->prec), type == '%' ? x * 100 : x);
    if (type == '%') strcat(num, "%");
}

/* body padded to the width by the fill, as align says ('=': after the sign) */
static void fspec_pad(jbuf *b, const fspec *f, const char *body, size_t body_len, bool numeric) {
    const char *fill = f->fill;
    size_t fill_len = f->fill_len;
    char align = f->align ? f->align : numeric ? '>' : '<';
    if (f->zero && numeric && f->width > 0) {
        fill = "0";
        fill_len = 1;
        align = '=';
    }
    const int64_t len = (int64_t)ju8_count(body, body_len), pad = f->width > len ? f->width - len : 0;
    const int64_t left = align == '<' ? 0 : align == '^' ? pad / 2 : align == '=' ? 0 : pad;
    if (align == '=' && body_len && strchr("+- ", body[0])) {
        jbuf_put(b, body, 1);
        body++;
        body_len--;
    }
    for (int64_t k = 0; k < (align == '=' ? pad : left); k++) jbuf_put(b, fill, fill_len);
    jbuf_put(b, body, body_len);
    for (int64_t k = 0; k < (align == '=' ? 0 : pad - left); k++) jbuf_put(b, fill, fill_len);
}

/* format(v, spec[0..n)) written into b: strings, integers and floats take a spec,
 * anything else only the empty one (str(v)). */
static bool format_spec(jr *r, jbuf *b, jv v, const char *spec, size_t n) {
    if (n == 0) {
        const char *why = NULL;
        if (!jv_write_str(b, v, &why)) return jr_buf_fail(r, b, why);
        return true;
    }
    fspec f;
    if (!fspec_parse(spec, n, &f)) return jr_fail(r, "Invalid format specifier");
    char num[512];
    const char *body = num;
    size_t body_len;
    bool numeric = true;
    if (v.kind == JV_STR && (f.type == 0 || f.type == 's')) {
        body = v.u.s->b;
        body_len = f.prec < 0 ? v.u.s->len : ju8_offset(v.u.s, (size_t)CN_MIN((size_t)f.prec, jstr_ncp(v.u.s)));
        numeric = false;
    } else if (jv_is_intlike(v) && (f.type == 0 || strchr("dnxXobc", f.type)) && f.prec < 0) {
        numeric = fspec_int(v.u.i, &f, num);
        body_len = strlen(num);
    } else if (jv_is_num(v) && (f.type == 0 || strchr("eEfFgG%", f.type))) {
        fspec_float(jv_to_f(v), &f, num);
        body_len = strlen(num);
    } else if (v.kind == JV_STR) {
        return jr_fail(r, "Unknown format code '%c' for object of type 'str'", f.type);
    } else if (jv_is_num(v)) {
        return jr_fail(r, "Unknown format code '%c' for object of type '%s'", f.type, jv_type_name(v));
    } else { /* object.__format__ takes no format spec */
        return jr_fail(r, "unsupported format string passed to %s.__format__", jv_type_name(v));
    }
    fspec_pad(b, &f, body, body_len, numeric);
    return true;
}

/* ---- str.format ---- */

/* Automatic ({}) and manual ({0}) field numbering, which one format may not mix */
typedef struct {
    int next; /* the next automatic field's index */
    bool used_auto, used_manual;
} fnumbering;

static bool numbering_switch(jr *r) {
    return jr_fail(r, "cannot switch from manual field specification to automatic field numbering");
}

/* The argument that a field name's first part f[0..p) names: none, the next positional
 * one; digits, one by index; a name, a keyword one (a new reference in *out). */
static bool field_arg(jr *r, const char *f, const char *p, const jargs *a, fnumbering *num, jv *out) {
    if (p == f) {
        if (num->used_manual) return numbering_switch(r);
        num->used_auto = true;
        if ((size_t)num->next >= a->n_pos)
            return jr_fail(r, "Replacement index %d out of range for positional args tuple", num->next);
        *out = jv_ref(a->pos[num->next++]);
        return true;
    }
    bool digits = true;
    for (const char *c = f; c < p; c++) digits = digits && *c >= '0' && *c <= '9';
    if (digits) {
        if (num->used_auto) return numbering_switch(r);
        num->used_manual = true;
        const long k = p - f < 9 ? strtol(f, NULL, 10) : LONG_MAX;
        if (k < 0 || (size_t)k >= a->n_pos)
            return jr_fail(r, "Replacement index %ld out of range for positional args tuple", k);
        *out = jv_ref(a->pos[k]);
        return true;
    }
    for (size_t k = 0; k < a->n_kw; k++)
        if (a->kw_names[k]->len == (size_t)(p - f) && !memcmp(a->kw_names[k]->b, f, (size_t)(p - f))) {
            *out = jv_ref(a->kw[k]);
            return true;
        }
    return jr_fail(r, "KeyError: '%.*s'", (int)CN_MIN(p - f, 64), f);
}

/* The .attr and [key] parts of a field name, p[0..end), applied to *v in turn (*v
 * replaced; still the caller's to release when this fails). */
static bool field_lookup(jr *r, jv *v, const char *p, const char *end) {
    while (p < end) {
        jv key, next;
        bool ok;
        const char *q = ++p;
        if (q[-1] == '.') {
            while (p < end && *p != '.' && *p != '[') p++;
            if (!jr_str(r, q, (size_t)(p - q), &key)) return false;
            ok = jr_getattr(r, *v, key, p - q < 32 ? jb_method_id(key.u.s->b) : -1, &next);
        } else {
            while (p < end && *p != ']') p++;
            if (!jr_key_from_text(r, q, p, &key)) return false;
            ok = jr_getitem(r, *v, key, &next);
            if (p < end) p++;
        }
        jv_unref(key);
        if (!ok) return false;
        jv_unref(*v);
        *v = next;
    }
    return true;
}

/* One replacement field f[0..fe) (between its braces) written into b. */
static bool format_field(jr *r, jbuf *b, const char *f, const char *fe, const jargs *a, bool markup, fnumbering *num) {
    const char *colon = NULL, *bang = NULL;
    for (const char *c = f; c < fe; c++) {
        if (*c == '[') {
            while (c < fe && *c != ']') c++;
            continue;
        }
        if (*c == '!' && !bang && !colon) bang = c;
        if (*c == ':' && !colon) {
            colon = c;
            break;
        }
    }
    const char *name_end = bang ? bang : colon ? colon : fe;
    const char *p = f; /* the end of the name's first part */
    while (p < name_end && *p != '.' && *p != '[') p++;
    jv v;
    if (!field_arg(r, f, p, a, num, &v)) return false;
    bool ok = field_lookup(r, &v, p, name_end);
    if (ok && bang) { /* !r and !a: repr(); any other conversion: str() */
        jv c;
        const char conv = bang + 1 < fe ? bang[1] : 0;
        ok = conv == 'r' || conv == 'a' ? jr_to_repr(r, v, &c) : jr_to_str(r, v, &c);
        if (ok) {
            jv_unref(v);
            v = c;
        }
    }
    if (ok && markup) { /* Markup.format escapes its arguments */
        jv e;
        ok = jr_escape(r, v, &e);
        if (ok) {
            jv_unref(v);
            v = e;
        }
    }
    if (ok) ok = format_spec(r, b, v, colon ? colon + 1 : fe, colon ? (size_t)(fe - colon - 1) : 0);
    jv_unref(v);
    return ok;
}

bool jr_str_format(jr *r, jv fmt, const jargs *a, jv *out) {
    const char *s = fmt.u.s->b;
    const size_t n = fmt.u.s->len;
    const bool markup = fmt.flags & JF_MARKUP;
    jbuf b;
    jr_buf_init(r, &b);
    fnumbering num = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < n;) {
        if (s[i] == '}') {
            if (i + 1 < n && s[i + 1] == '}') jbuf_putc(&b, '}');
            else ok = jr_fail(r, "Single '}' encountered in format string");
            i += 2;
        } else if (s[i] != '{') {
            size_t j = i;
            while (j < n && s[j] != '{' && s[j] != '}') j++;
            jbuf_put(&b, s + i, j - i);
            i = j;
        } else if (i + 1 < n && s[i + 1] == '{') {
            jbuf_putc(&b, '{');
            i += 2;
        } else { /* a field: up to the '}' outside [] */
            size_t j = i + 1;
            int nest = 0;
            while (j < n && (s[j] != '}' || nest)) {
                if (s[j] == '[') nest++;
                else if (s[j] == ']' && nest) nest--;
                j++;
            }
            if (j >= n) ok = jr_fail(r, "expected '}' before end of string");
            else ok = format_field(r, &b, s + i + 1, s + j, a, markup, &num);
            i = j + 1;
        }
    }
    if (!ok) {
        jbuf_free(&b);
        return false;
    }
    return jr_buf_to_str_as(r, &b, markup, out);
}
