/* test_stop.c — the stream filter (src/gen/stop.c): stop strings inside one piece and
 * across two and three pieces, false partial matches released, overlapping candidates,
 * several stop strings, multi-byte characters next to stop strings, the final flush, and a
 * property test against a naive reference (the whole text searched at once) over random
 * texts, random piece splits and random stop strings. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "gen/stop.h"

/* Collects what the filter emits: the concatenation and each chunk separately. */
typedef struct {
    char text[8192];
    size_t len;
    char chunks[64][256];
    int n_chunks;
} sink;

static bool utf8_ok(const unsigned char *s, size_t n) {
    /* Structural check only (lead byte, then the right number of continuation bytes):
     * enough to catch a chunk that starts or ends inside a character. */
    size_t i = 0;
    while (i < n) {
        size_t len = s[i] < 0x80             ? 1
                     : (s[i] & 0xE0) == 0xC0 ? 2
                     : (s[i] & 0xF0) == 0xE0 ? 3
                     : (s[i] & 0xF8) == 0xF0 ? 4
                                             : 0;
        if (len == 0 || n - i < len) return false;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

static void collect(void *user, const char *text, size_t n) {
    sink *s = user;
    cr_assert_gt(n, 0, "empty emit");
    cr_assert(utf8_ok((const unsigned char *)text, n), "emitted chunk splits a UTF-8 character");
    cr_assert_lt(s->len + n, sizeof s->text);
    memcpy(s->text + s->len, text, n);
    s->len += n;
    s->text[s->len] = 0;
    if (s->n_chunks < 64 && n < 256) {
        memcpy(s->chunks[s->n_chunks], text, n);
        s->chunks[s->n_chunks][n] = 0;
    }
    s->n_chunks++;
}

static cn_stop_filter *make(sink *s, const char *const *stops, size_t n) {
    memset(s, 0, sizeof *s);
    cn_stop_filter *f = NULL;
    cn_error e;
    cr_assert_eq(cn_stop_filter_new(stops, n, collect, s, &f, &e), CN_STATUS_OK, "%s", e.msg);
    return f;
}

/* Pushes a piece; returns whether a stop string ended the stream. */
static bool push(cn_stop_filter *f, const char *piece) {
    bool stopped = true;
    cn_error e;
    cr_assert_eq(cn_stop_filter_push(f, piece, strlen(piece), &stopped, &e), CN_STATUS_OK, "%s", e.msg);
    return stopped;
}

Test(stop, finish_reason_names) {
    cr_assert_str_eq(cn_finish_reason_str(CN_FINISH_STOP), "stop");
    cr_assert_str_eq(cn_finish_reason_str(CN_FINISH_LENGTH), "length");
    cr_assert_str_eq(cn_finish_reason_str(CN_FINISH_CANCELLED), "cancelled");
    cr_assert_str_eq(cn_finish_reason_str(CN_FINISH_NONE), "none");
    cr_assert_str_eq(cn_finish_reason_str((cn_finish_reason)99), "unknown");
}

Test(stop, inside_one_piece_with_text_after) {
    const char *stops[] = {"STOP"};
    sink s;
    cn_stop_filter *f = make(&s, stops, 1);
    cr_assert(!push(f, "Hello, "));
    cr_assert(push(f, "world STOP and more"));
    cr_assert_str_eq(s.text, "Hello, world ");
    cr_assert_eq(cn_stop_filter_reason(f), CN_FINISH_STOP);
    cr_assert_eq(cn_stop_filter_stop_index(f), 0);
    cr_assert_eq(cn_stop_filter_held(f), 0);
    cn_error e;
    bool stopped;
    cr_assert_eq(cn_stop_filter_push(f, "x", 1, &stopped, &e), CN_STATUS_INVALID_ARG);
    cn_stop_filter_finish(f, CN_FINISH_LENGTH); /* no-op: already ended */
    cr_assert_str_eq(s.text, "Hello, world ");
    cr_assert_eq(cn_stop_filter_reason(f), CN_FINISH_STOP);
    cn_stop_filter_free(f);
}

Test(stop, spans_two_pieces) {
    const char *stops[] = {"</end>"};
    sink s;
    cn_stop_filter *f = make(&s, stops, 1);
    cr_assert(!push(f, "abc</e"));
    cr_assert_str_eq(s.text, "abc");
    cr_assert_eq(cn_stop_filter_held(f), 3);
    cr_assert(push(f, "nd>tail"));
    cr_assert_str_eq(s.text, "abc");
    cr_assert_eq(cn_stop_filter_stop_index(f), 0);
    cn_stop_filter_free(f);
}

Test(stop, begins_in_one_piece_ends_two_pieces_later) {
    const char *stops[] = {"</end>"};
    sink s;
    cn_stop_filter *f = make(&s, stops, 1);
    cr_assert(!push(f, "x<"));
    cr_assert_str_eq(s.text, "x");
    cr_assert(!push(f, "/en"));
    cr_assert_str_eq(s.text, "x");
    cr_assert_eq(cn_stop_filter_held(f), 4);
    cr_assert(push(f, "d>y"));
    cr_assert_str_eq(s.text, "x");
    cr_assert_eq(s.n_chunks, 1);
    cn_stop_filter_free(f);
}

Test(stop, false_partial_released_when_broken) {
    const char *stops[] = {"</end>"};
    sink s;
    cn_stop_filter *f = make(&s, stops, 1);
    cr_assert(!push(f, "a</e"));
    cr_assert_str_eq(s.text, "a");
    cr_assert(!push(f, "x"));
    cr_assert_str_eq(s.text, "a</ex");
    cr_assert_eq(s.n_chunks, 2);
    cr_assert_str_eq(s.chunks[0], "a");
    cr_assert_str_eq(s.chunks[1], "</ex");
    cr_assert_eq(cn_stop_filter_held(f), 0);
    cn_stop_filter_finish(f, CN_FINISH_LENGTH);
    cr_assert_str_eq(s.text, "a</ex");
    cr_assert_eq(cn_stop_filter_reason(f), CN_FINISH_LENGTH);
    cr_assert_eq(cn_stop_filter_stop_index(f), -1);
    cn_stop_filter_free(f);
}

Test(stop, overlapping_candidates) {
    const char *stops[] = {"abab"};
    sink s;
    cn_stop_filter *f = make(&s, stops, 1);
    cr_assert(!push(f, "x"));
    cr_assert(!push(f, "aba"));
    cr_assert_eq(cn_stop_filter_held(f), 3);
    cr_assert(push(f, "bab"));
    cr_assert_str_eq(s.text, "x");
    cn_stop_filter_free(f);

    /* "aab" in "aaab": the candidate at offset 0 dies, the one at 1 completes. */
    const char *stops2[] = {"aab"};
    f = make(&s, stops2, 1);
    cr_assert(!push(f, "a"));
    cr_assert(!push(f, "a"));
    cr_assert(!push(f, "a"));
    cr_assert_str_eq(s.text, "a");
    cr_assert(push(f, "b"));
    cr_assert_str_eq(s.text, "a");
    cn_stop_filter_free(f);
}

Test(stop, shorter_stop_matches_first) {
    /* "cd" completes inside a still-possible "abcdef" that starts earlier: the filter
     * waits, and the earlier-starting one wins when it completes. */
    const char *stops[] = {"abcdef", "cd"};
    sink s;
    cn_stop_filter *f = make(&s, stops, 2);
    cr_assert(!push(f, "abc"));
    cr_assert(!push(f, "d"));
    cr_assert_eq(s.len, 0);
    cr_assert(push(f, "ef"));
    cr_assert_eq(s.len, 0);
    cr_assert_eq(cn_stop_filter_stop_index(f), 0);
    cn_stop_filter_free(f);

    /* ... and when the longer one breaks, the shorter one stops at its own offset. */
    f = make(&s, stops, 2);
    cr_assert(!push(f, "abc"));
    cr_assert(!push(f, "d"));
    cr_assert(push(f, "eX"));
    cr_assert_str_eq(s.text, "ab");
    cr_assert_eq(cn_stop_filter_stop_index(f), 1);
    cn_stop_filter_free(f);

    /* ... and when the stream ends while waiting, the complete one still cuts. */
    f = make(&s, stops, 2);
    cr_assert(!push(f, "abcd"));
    cn_stop_filter_finish(f, CN_FINISH_LENGTH);
    cr_assert_str_eq(s.text, "ab");
    cr_assert_eq(cn_stop_filter_reason(f), CN_FINISH_STOP);
    cr_assert_eq(cn_stop_filter_stop_index(f), 1);
    cn_stop_filter_free(f);

    /* Same start offset: the shorter completes first and stops at once. */
    const char *stops2[] = {"\n\nUser:", "\n"};
    f = make(&s, stops2, 2);
    cr_assert(push(f, "hi\n\nUser: x"));
    cr_assert_str_eq(s.text, "hi");
    cr_assert_eq(cn_stop_filter_stop_index(f), 1);
    cn_stop_filter_free(f);

    /* Disjoint stops: the one that occurs first in the text wins, whatever the order. */
    const char *stops3[] = {"world", "lo"};
    f = make(&s, stops3, 2);
    cr_assert(push(f, "hello world"));
    cr_assert_str_eq(s.text, "hel");
    cr_assert_eq(cn_stop_filter_stop_index(f), 1);
    cn_stop_filter_free(f);
}

Test(stop, multibyte_next_to_stop) {
    const char *stops[] = {"日本"};
    sink s;
    cn_stop_filter *f = make(&s, stops, 1);
    cr_assert(!push(f, "café "));
    cr_assert(!push(f, "日"));
    cr_assert_str_eq(s.text, "café ");
    cr_assert_eq(cn_stop_filter_held(f), 3);
    cr_assert(push(f, "本語"));
    cr_assert_str_eq(s.text, "café ");
    cn_stop_filter_free(f);

    /* Same lead byte (E6) in 日 and 本: the partial match must compare whole bytes. */
    const char *stops2[] = {"日x"};
    f = make(&s, stops2, 1);
    cr_assert(!push(f, "日"));
    cr_assert(!push(f, "本"));
    cr_assert_str_eq(s.text, "日本");
    cr_assert_eq(cn_stop_filter_held(f), 0);
    cn_stop_filter_finish(f, CN_FINISH_STOP);
    cr_assert_str_eq(s.text, "日本");
    cn_stop_filter_free(f);

    /* An emoji (4 bytes) around a stop string that begins with one. */
    const char *stops3[] = {"🎉end", "é!"};
    f = make(&s, stops3, 2);
    cr_assert(!push(f, "ok🎉"));
    cr_assert_str_eq(s.text, "ok");
    cr_assert(!push(f, "e"));
    cr_assert(!push(f, "🎉"));
    cr_assert_str_eq(s.text, "ok🎉e");
    cr_assert(!push(f, "é"));
    cr_assert_str_eq(s.text, "ok🎉e🎉");
    cr_assert(!push(f, "?é"));
    cr_assert_str_eq(s.text, "ok🎉e🎉é?");
    cr_assert(push(f, "!x"));
    cr_assert_str_eq(s.text, "ok🎉e🎉é?");
    cr_assert_eq(cn_stop_filter_stop_index(f), 1);
    cn_stop_filter_free(f);

    /* A long stop string next to multi-byte text: only the candidate is held, not "the
     * last max_len - 1 bytes", so nothing is cut mid-character (collect checks). */
    const char *stops4[] = {"zzzzzzzzzz"};
    f = make(&s, stops4, 1);
    cr_assert(!push(f, "éé日🎉z"));
    cr_assert_str_eq(s.text, "éé日🎉");
    cr_assert(!push(f, "zé"));
    cr_assert_str_eq(s.text, "éé日🎉zzé");
    cn_stop_filter_free(f);
}

Test(stop, flush_releases_held_text_exactly_once) {
    const char *stops[] = {"</end>"};
    sink s;
    cn_stop_filter *f = make(&s, stops, 1);
    cr_assert(!push(f, "abc</e"));
    cr_assert_str_eq(s.text, "abc");
    cn_stop_filter_finish(f, CN_FINISH_STOP); /* an end-of-generation token */
    cr_assert_str_eq(s.text, "abc</e");
    cr_assert_eq(cn_stop_filter_held(f), 0);
    cr_assert_eq(cn_stop_filter_reason(f), CN_FINISH_STOP);
    cr_assert_eq(cn_stop_filter_stop_index(f), -1);
    cn_stop_filter_finish(f, CN_FINISH_STOP);
    cn_stop_filter_finish(f, CN_FINISH_CANCELLED);
    cr_assert_str_eq(s.text, "abc</e");
    cr_assert_eq(s.n_chunks, 2);
    cr_assert_eq(cn_stop_filter_reason(f), CN_FINISH_STOP);
    cn_stop_filter_free(f);

    f = make(&s, stops, 1);
    cr_assert(!push(f, "<"));
    cn_stop_filter_finish(f, CN_FINISH_CANCELLED);
    cr_assert_str_eq(s.text, "<");
    cr_assert_eq(cn_stop_filter_reason(f), CN_FINISH_CANCELLED);
    cn_stop_filter_free(f);

    f = make(&s, stops, 1); /* nothing pushed, nothing emitted */
    cn_stop_filter_finish(f, CN_FINISH_LENGTH);
    cr_assert_eq(s.n_chunks, 0);
    cr_assert_eq(cn_stop_filter_reason(f), CN_FINISH_LENGTH);
    cn_stop_filter_free(f);
}

Test(stop, no_stop_strings_pass_through) {
    sink s;
    cn_stop_filter *f = make(&s, NULL, 0);
    const char *pieces[] = {"<", "/end", ">", "日本", "🎉"};
    for (size_t i = 0; i < CN_ARRAY_LEN(pieces); i++) {
        cr_assert(!push(f, pieces[i]));
        cr_assert_eq(s.n_chunks, (int)i + 1);
        cr_assert_str_eq(s.chunks[i], pieces[i]);
        cr_assert_eq(cn_stop_filter_held(f), 0);
    }
    cr_assert(!push(f, ""));
    cr_assert_eq(s.n_chunks, 5);
    cr_assert_eq(cn_stop_filter_reason(f), CN_FINISH_NONE);
    cn_stop_filter_finish(f, CN_FINISH_LENGTH);
    cr_assert_str_eq(s.text, "</end>日本🎉");
    cr_assert_eq(cn_stop_filter_reason(f), CN_FINISH_LENGTH);
    cn_stop_filter_free(f);
}

static void ignore(void *user, const char *text, size_t n) { (void)user, (void)text, (void)n; }

Test(stop, bad_arguments) {
    cn_stop_filter *f = (cn_stop_filter *)1;
    cn_error e;
    const char *empty[] = {"ok", ""};
    cr_assert_eq(cn_stop_filter_new(empty, 2, ignore, NULL, &f, &e), CN_STATUS_INVALID_ARG);
    cr_assert_null(f);
    cr_assert(strstr(e.msg, "stop string 1 is empty"), "%s", e.msg);
    const char *null_str[] = {NULL};
    cr_assert_eq(cn_stop_filter_new(null_str, 1, ignore, NULL, &f, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_stop_filter_new(NULL, 1, ignore, NULL, &f, &e), CN_STATUS_INVALID_ARG);
    const char *ok[] = {"x"};
    cr_assert_eq(cn_stop_filter_new(ok, 1, NULL, NULL, &f, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_stop_filter_new(ok, 1, ignore, NULL, NULL, &e), CN_STATUS_INVALID_ARG);

    const char *many[CN_STOP_MAX_STRINGS + 1];
    for (int i = 0; i <= CN_STOP_MAX_STRINGS; i++) many[i] = "x";
    cr_assert_eq(cn_stop_filter_new(many, CN_STOP_MAX_STRINGS + 1, ignore, NULL, &f, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_stop_filter_new(many, CN_STOP_MAX_STRINGS, ignore, NULL, &f, &e), CN_STATUS_OK);
    cn_stop_filter_free(f);

    char longest[CN_STOP_MAX_LEN + 2];
    memset(longest, 'y', sizeof longest);
    longest[CN_STOP_MAX_LEN] = 0;
    const char *at_limit[] = {longest};
    cr_assert_eq(cn_stop_filter_new(at_limit, 1, ignore, NULL, &f, &e), CN_STATUS_OK);
    cn_stop_filter_free(f);
    longest[CN_STOP_MAX_LEN] = 'y';
    longest[CN_STOP_MAX_LEN + 1] = 0;
    cr_assert_eq(cn_stop_filter_new(at_limit, 1, ignore, NULL, &f, &e), CN_STATUS_INVALID_ARG);

    /* Not UTF-8: a lone continuation byte (would match inside a character), an overlong
     * '/', a surrogate, a truncated sequence. */
    const char *bad_utf8[] = {"\xA5", "\xC0\xAF", "\xED\xA0\x80", "\xE6\x97"};
    for (size_t i = 0; i < CN_ARRAY_LEN(bad_utf8); i++) {
        cr_assert_eq(cn_stop_filter_new(&bad_utf8[i], 1, ignore, NULL, &f, &e), CN_STATUS_INVALID_ARG, "case %zu", i);
        cr_assert(strstr(e.msg, "UTF-8"), "%s", e.msg);
    }

    cr_assert_eq(cn_stop_filter_new(ok, 1, ignore, NULL, &f, &e), CN_STATUS_OK);
    cr_assert_eq(cn_stop_filter_push(f, NULL, 3, NULL, &e), CN_STATUS_INVALID_ARG);
    cr_assert_eq(cn_stop_filter_push(f, NULL, 0, NULL, &e), CN_STATUS_OK);
    cr_assert_eq(cn_stop_filter_push(NULL, "a", 1, NULL, &e), CN_STATUS_INVALID_ARG);
    cn_stop_filter_free(f);
    cn_stop_filter_free(NULL);
}

/* --- property test against a naive reference --- */

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) { /* xorshift64*, uniform enough for test data */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 2685821657736338717ull) >> 33) % n;
}

/* Characters of 1 to 4 bytes, few enough that stop strings occur often. */
static const char *const ALPHABET[] = {"a", "b", "<", "é", "日", "🎉"};

static size_t random_chars(char *out, size_t n_chars) {
    size_t len = 0;
    for (size_t i = 0; i < n_chars; i++) {
        const char *c = ALPHABET[rnd(CN_ARRAY_LEN(ALPHABET))];
        memcpy(out + len, c, strlen(c));
        len += strlen(c);
    }
    out[len] = 0;
    return len;
}

static size_t char_len(unsigned char c) { return c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4; }

/* The whole text at once: the first offset where any stop string occurs; among those at
 * the same offset the shortest, then the lowest index. Returns the offset or -1. */
static long reference(const char *text, size_t len, char stops[][64], size_t n_stops, int *idx) {
    for (size_t i = 0; i < len; i++) {
        int best = -1;
        for (size_t k = 0; k < n_stops; k++) {
            size_t sl = strlen(stops[k]);
            if (sl <= len - i && memcmp(text + i, stops[k], sl) == 0 && (best < 0 || sl < strlen(stops[best])))
                best = (int)k;
        }
        if (best >= 0) {
            *idx = best;
            return (long)i;
        }
    }
    *idx = -1;
    return -1;
}

static bool is_proper_prefix_of_a_stop(const char *s, size_t n, char stops[][64], size_t n_stops) {
    for (size_t k = 0; k < n_stops; k++)
        if (n < strlen(stops[k]) && memcmp(s, stops[k], n) == 0) return true;
    return false;
}

Test(stop, property_random_texts_and_splits) {
    rng_state = 0x9E3779B97F4A7C15ull;
    int n_stopped = 0, n_waited = 0;
    for (int iter = 0; iter < 4000; iter++) {
        char text[1024];
        size_t len = random_chars(text, rnd(60));
        char stops[3][64];
        const char *stop_ptrs[3];
        size_t n_stops = 1 + rnd(3), max_len = 0;
        for (size_t k = 0; k < n_stops; k++) {
            random_chars(stops[k], 1 + rnd(4));
            stop_ptrs[k] = stops[k];
            max_len = CN_MAX(max_len, strlen(stops[k]));
        }
        int want_idx;
        long want_pos = reference(text, len, stops, n_stops, &want_idx);
        size_t want_len = want_pos < 0 ? len : (size_t)want_pos;

        sink s;
        cn_stop_filter *f = make(&s, stop_ptrs, n_stops);
        size_t pos = 0;
        bool stopped = false;
        while (pos < len && !stopped) {
            /* A piece of 0 to 5 whole characters. */
            size_t end = pos, n_chars = rnd(6);
            for (size_t c = 0; c < n_chars && end < len; c++) end += char_len(text[end]);
            cn_error e;
            cr_assert_eq(cn_stop_filter_push(f, text + pos, end - pos, &stopped, &e), CN_STATUS_OK, "%s", e.msg);
            pos = end;
            cr_assert(s.len <= want_len && memcmp(s.text, text, s.len) == 0,
                      "iter %d: emitted text is not a prefix of the expected output", iter);
            if (stopped) break;
            /* Nothing lost or duplicated, and held text is held only while it may still
             * become a stop string (so it is released as soon as it cannot). */
            size_t held = cn_stop_filter_held(f);
            cr_assert_eq(s.len + held, pos, "iter %d", iter);
            cr_assert_lt(held, max_len, "iter %d", iter);
            if (held > 0)
                cr_assert(is_proper_prefix_of_a_stop(text + s.len, held, stops, n_stops),
                          "iter %d: held text that cannot become a stop string", iter);
            if (want_pos >= 0 && pos >= (size_t)want_pos + strlen(stops[want_idx])) n_waited++;
        }
        if (!stopped) cn_stop_filter_finish(f, CN_FINISH_LENGTH);
        cr_assert_eq(s.len, want_len, "iter %d: got %zu bytes, want %zu", iter, s.len, want_len);
        cr_assert_eq(memcmp(s.text, text, want_len), 0, "iter %d", iter);
        cr_assert_eq(cn_stop_filter_stop_index(f), want_idx, "iter %d", iter);
        cr_assert_eq(cn_stop_filter_reason(f), want_pos >= 0 ? CN_FINISH_STOP : CN_FINISH_LENGTH);
        if (want_pos >= 0) n_stopped++;
        cn_stop_filter_free(f);
    }
    /* The random cases exercise both outcomes and the wait for an earlier candidate. */
    cr_assert_gt(n_stopped, 1000);
    cr_assert_lt(n_stopped, 3900);
    cr_assert_gt(n_waited, 0);
}
