/* test_jinja.c — the Jinja interpreter (src/jinja) piece by piece: whitespace
 * control, expressions with Python's semantics, loops and scoping, macros, filters,
 * tests, methods, HF's tojson, Undefined, the sandbox, errors with line numbers and the
 * three budgets.
 *
 * Every expected string is worked out by hand from jinja2's documented behaviour and
 * Python's (floor division rounds down, str(1.0) is "1.0", a set inside a for loop does
 * not outlive the iteration, json.dumps writes ", " and ": " unless indenting, ...).
 * tests/py/test_chat_templates.py holds the whole interpreter to jinja2 itself on real
 * chat templates. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja.h"

static cn_jinja_limits test_limits(void) {
    cn_jinja_limits lim = cn_jinja_default_limits();
    lim.now_unix = 1700000000; /* 2023-11-14 22:13:20 UTC */
    return lim;
}

/* Renders tmpl with vars (a JSON object, NULL: {}); on failure returns NULL with *st and
 * e set. */
static char *render_lim(const char *tmpl, const char *vars, const cn_jinja_limits *lim, cn_status *st, cn_error *e) {
    cn_jinja *t = NULL;
    *st = cn_jinja_parse(tmpl, strlen(tmpl), &t, e);
    if (*st != CN_STATUS_OK) return NULL;
    char *out = NULL;
    size_t n = 0;
    if (!vars) vars = "{}";
    *st = cn_jinja_render(t, vars, strlen(vars), lim, &out, &n, e);
    cn_jinja_free(t);
    if (*st == CN_STATUS_OK) cr_assert_eq(strlen(out), n, "length of %s", tmpl);
    return out;
}

static char *render(const char *tmpl, const char *vars, cn_status *st, cn_error *e) {
    const cn_jinja_limits lim = test_limits();
    return render_lim(tmpl, vars, &lim, st, e);
}

static void check(const char *tmpl, const char *vars, const char *want) {
    cn_status st;
    cn_error e = {0};
    char *got = render(tmpl, vars, &st, &e);
    cr_assert_eq(st, CN_STATUS_OK, "%s: %s", tmpl, e.msg);
    size_t k = 0;
    while (got[k] && got[k] == want[k]) k++;
    cr_assert_str_eq(got, want, "%s\n  first difference at byte %zu", tmpl, k);
    free(got);
}

/* The template fails with st and a message holding each of the NULL-terminated parts. */
static void check_error(const char *tmpl, const char *vars, cn_status want_st, const char *part, const char *part2) {
    cn_status st;
    cn_error e = {0};
    char *got = render(tmpl, vars, &st, &e);
    cr_assert_null(got, "%s rendered %s", tmpl, got ? got : "");
    cr_assert_eq(st, want_st, "%s: status %d: %s", tmpl, (int)st, e.msg);
    cr_assert(strstr(e.msg, part), "%s: message '%s' lacks '%s'", tmpl, e.msg, part);
    if (part2) cr_assert(strstr(e.msg, part2), "%s: message '%s' lacks '%s'", tmpl, e.msg, part2);
}

#define XS "{\"xs\": [1, 2, 3], \"d\": {\"a\": 1, \"b\": [1, 2]}, \"s\": \"h\\u00e9llo\"}"

Test(jinja, whitespace_control) {
    /* trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation
     * before a block tag on its own line goes; neither applies to {{ }} */
    check("{% if true %}\nyes\n{% endif %}\n", NULL, "yes\n");
    check("  {% if true %}\n  x\n  {% endif %}\nend", NULL, "  x\nend");
    check("a  {{ 1 }}  \nb", NULL, "a  1  \nb");
    /* - strips every whitespace character on its side, newlines included */
    check("a  \n {%- if true -%} \n b {%- endif %}", NULL, "ab");
    check("a \n {{- 'x' -}} \n b", NULL, "axb");
    /* + keeps what lstrip_blocks / trim_blocks would remove */
    check("  {%+ if true +%}\nx{% endif %}", NULL, "  \nx");
    /* comments vanish and take part in trimming like blocks */
    check("a{# note #}b\n  {# own line #}\nc", NULL, "ab\nc");
    check("a {#- x -#} b", NULL, "ab");
    /* raw keeps its text as is (its opening tag eats no newline) */
    check("{% raw %}\n{{ x }}{% if %}\n{% endraw %}", NULL, "\n{{ x }}{% if %}\n");
    /* one trailing newline of the template is dropped, not two; \r\n becomes \n */
    check("x\n\n", NULL, "x\n");
    check("a\r\nb\rc", NULL, "a\nb\nc");
}

Test(jinja, literals_and_printing) {
    check("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 0.0001 }} {{ -0.0 }}", NULL,
          "1.0 0.30000000000000004 1e+20 1e+16 1.5e-05 0.0001 -0.0");
    check("{{ true }} {{ False }} {{ none }} {{ None }}", NULL, "True False None None");
    check("{{ [1, 'a', none, true, 2.5] }} {{ {'k': \"it's\"} }} {{ (1,) }} {{ () }}", NULL,
          "[1, 'a', None, True, 2.5] {'k': \"it's\"} (1,) ()");
    /* clang-format off */
    check("{{ 'a\\tb\\n\\x41\\u00e9\\101\\q' }}", NULL, "a\tb\nA\xc3\xa9" "A\\q");
    /* clang-format on */
    check("{{ 'x' 'y' \"z\" }}{{ 1_000 }} {{ 0x1F }} {{ 0b101 }}", NULL, "xyz1000 31 5");
    check("{{ ['a\\nb', 'q\\'s'] }}", NULL, "['a\\nb', \"q's\"]");
    check("{% macro m() %}{% endmacro %}{{ m }} {{ namespace(a=[1]) }} {{ range(2, 5) }}", NULL,
          "<Macro 'm'> <Namespace {'a': [1]}> range(2, 5)");
}

Test(jinja, arithmetic_python_semantics) {
    check("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 / 2 }} {{ 4 / 2 }}", NULL,
          "3 -4 1 2 -2 3.5 2.0");
    check("{{ 2 ** 10 }} {{ 2 ** -1 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }}", NULL, "1024 0.5 4 64");
    check("{{ 1 + 2.5 }} {{ true + 1 }} {{ 'ab' * 3 }} {{ 2 * [0] }} {{ 'a' ~ 1 ~ none }}", NULL,
          "3.5 2 ababab [0, 0] a1None");
    check("{{ [1] + [2] }} {{ (1,) + (2,) }} {{ 'a' + 'b' }}", NULL, "[1, 2] (1, 2) ab");
    check("{{ '%s-%03d|%.2f' % ('x', 7, 3.14159) }} {{ '%s' % 'y' }}", NULL, "x-007|3.14 y");
    check_error("{{ 1 / 0 }}", NULL, CN_STATUS_INVALID_ARG, "division by zero", NULL);
    check_error("{{ 'a' + 1 }}", NULL, CN_STATUS_INVALID_ARG, "can only concatenate str", NULL);
}

Test(jinja, comparisons_and_logic) {
    check("{{ 1 == 1.0 }} {{ true == 1 }} {{ [1] == (1,) }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}", NULL,
          "True True False True False");
    check("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 4 not in [1] }} {{ 'x' in nothing }}", NULL,
          "True True True True False");
    /* and / or give back an operand, as in Python */
    check("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 'b' }}|{{ not [] }}", NULL, "x b |True");
    check("{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }}|{{ 'y' if 0 }}|{{ ('y' if 0) is defined }}", NULL,
          "y n||False");
    check_error("{{ 'a' < 1 }}", NULL, CN_STATUS_INVALID_ARG, "'<' not supported", NULL);
}

Test(jinja, for_loops) {
    check("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
          "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
          XS, "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;");
    check("{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }}|{% endfor %}", XS, "-2|1-3|2-|");
    check("{% for x in xs %}{{ loop.cycle('a', 'b') }}{% endfor %}", XS, "aba");
    check("{% for x in xs if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}", XS, "2:1/2 3:2/2 ");
    check("{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in xs if x > 5 %}a{% else %}none{% endfor %}", XS,
          "empty|none");
    check(
        "{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% if x == 3 %}{% break %}{% endif %}{% endfor %}",
        XS, "13");
    check("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", XS,
          "a=1;b=[1, 2];ab");
    check("{% for c in s %}[{{ c }}]{% endfor %}", XS, "[h][\xc3\xa9][l][l][o]");
    check("{% for a in [[1, 2], [3]] %}{% for b in a %}{{ loop.index }}{% endfor %},{{ loop.index }};{% endfor %}",
          NULL, "12,1;1,2;");
    check("{% for x in [1, [2, [3]]] recursive %}{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}@{{ loop.depth }} "
          "{% endif %}{% endfor %}",
          NULL, "1@1 2@2 3@3 ");
}

Test(jinja, scoping) {
    /* a set inside a loop lives for that iteration only; an if shares its scope */
    check("{% set x = 0 %}{% for i in xs %}{{ x }}{% set x = x + 1 %}{{ x }};{% endfor %}{{ x }}", XS, "01;01;01;0");
    check("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", NULL, "2");
    /* a namespace carries state out of the loop */
    check("{% set ns = namespace(n=0, s='') %}{% for i in xs %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}"
          "{% endfor %}{{ ns.n }} {{ ns.s }} {{ ns.missing is defined }}",
          XS, "6 123 False");
    check(
        "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set x %}A{{ a }}{% endset %}{{ x }}{% set y | upper %}b{% endset %}{{ y }}",
        NULL, "12A1B");
    check("{% with a = 5 %}{{ a }}{% endwith %}{{ a is defined }}", NULL, "5False");
    check_error("{% set x = 1 %}{% set x.a = 2 %}", NULL, CN_STATUS_INVALID_ARG, "non-namespace", NULL);
    /* jinja2 compiles each frame's names statically: a name the template stores (before
     * any load of it) starts as missing in that frame, hiding a render variable of that
     * name from macros called before the store; one first loaded, or first stored inside
     * an if, starts as the render variable */
    check("{% macro m() %}[{{ xs }}]{% endmacro %}{{ m() }}{% set xs = 1 %}{{ m() }}", XS, "[][1]");
    check("{% macro m() %}[{{ xs }}]{% endmacro %}{{ m() }}{{ xs|length }}{% set xs = 1 %}{{ m() }}", XS,
          "[[1, 2, 3]]3[1]");
    check("{% macro m() %}[{{ xs }}]{% endmacro %}{% if false %}{% set xs = 1 %}{% endif %}{{ m() }}", XS,
          "[[1, 2, 3]]");
    check("{% for i in [1, 2] %}{% macro m() %}<{{ v }}>{% endmacro %}{{ m() }}{% set v = i %}{{ m() }}{% endfor %}",
          NULL, "<><1><><2>");
}

/* One parsed template rendered from several threads at once gives every thread the
 * same text (the template is immutable; its constants are never reference-counted). */
#include <pthread.h>

static const char THREADED_TEMPLATE[] =
    "{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s ~ m.role[0] %}"
    "{{ m.role|upper }}: {{ m.content|trim }} {{ m|tojson }}{{ 'é'.upper() }}{{ ('ab' * 3)[1:4] }}\n{% endfor %}{{ ns.s }}";
static const char THREADED_VARS[] = "{\"messages\": [{\"role\": \"user\", \"content\": \" hi \"}, "
                                    "{\"role\": \"assistant\", \"content\": \"yo\"}]}";

static void *render_many(void *arg) {
    const cn_jinja *t = arg;
    char *first = NULL;
    for (int i = 0; i < 200; i++) {
        char *out = NULL;
        size_t n = 0;
        cn_error e;
        if (cn_jinja_render(t, THREADED_VARS, strlen(THREADED_VARS), NULL, &out, &n, &e) != CN_STATUS_OK)
            return (void *)1;
        if (first && strcmp(first, out) != 0) return (void *)1;
        if (!first) first = out;
        else free(out);
    }
    return first;
}

Test(jinja, renders_from_many_threads) {
    cn_jinja *t = NULL;
    cn_error e;
    cr_assert_eq(cn_jinja_parse(THREADED_TEMPLATE, strlen(THREADED_TEMPLATE), &t, &e), CN_STATUS_OK, "%s", e.msg);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) cr_assert_eq(pthread_create(&th[i], NULL, render_many, t), 0);
    for (int i = 0; i < 4; i++) {
        void *res = NULL;
        pthread_join(th[i], &res);
        cr_assert(res && res != (void *)1, "thread %d: a render failed or differed", i);
        cr_assert_str_eq(res, "USER: hi {\"role\": \"user\", \"content\": \" hi \"}Ébab\n"
                              "ASSISTANT: yo {\"role\": \"assistant\", \"content\": \"yo\"}Ébab\nua");
        free(res);
    }
    cn_jinja_free(t);
}

Test(jinja, macros) {
    /* a macro sees the template's variables as they are when it is called */
    check("{% set g = 1 %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 2 %}{{ m() }}", NULL, "2");
    check("{% macro m(a, b=a * 10) %}{{ a }},{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, 5) }} {{ m(b=3, a=0) }}", NULL,
          "1,10 1,5 0,3");
    check("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}", NULL, "1(2,){'k': 3}");
    check("{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}", NULL, "[]");
    check("{% macro w(t) %}<{{ t }}>{{ caller(7) }}</{{ t }}>{% endmacro %}{% call(x) w('b') %}in{{ x }}{% endcall %}",
          NULL, "<b>in7</b>");
    check("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", NULL, "321");
    check_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", NULL, CN_STATUS_INVALID_ARG, "takes not more than 1",
                NULL);
    check_error("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", NULL, CN_STATUS_INVALID_ARG, "no keyword argument 'b'",
                NULL);
}

Test(jinja, string_filters) {
    check("{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'hÉllo'|upper }}|{{ 'HÉLLO'|lower }}", NULL,
          "a b|a|HÉLLO|héllo");
    check("{{ 'hello world-foo(bar'|title }}|{{ 'hELLO wORLD'|capitalize }}|{{ 'ab'|center(6) }}|", NULL,
          "Hello World-Foo(Bar|Hello world|  ab  |");
    check("{{ 'a-b-c'|replace('-', '+') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ ' one  two '|wordcount }}", NULL,
          "a+b+c bba 2");
    check("{{ 'x\\ny\\n\\nz'|indent(2) }}|{{ 'x\\ny'|indent(2, true) }}|{{ 'x\\n\\ny'|indent(2, blank=true) }}", NULL,
          "x\n  y\n\n  z|  x\n  y|x\n  \n  y");
    check("{{ '<a & \"b\">'|e }} {{ '<i>'|safe }} {{ ('<i>'|safe) + '<b>' }} {{ '<i>' ~ ('<b>'|safe) }}", NULL,
          "&lt;a &amp; &#34;b&#34;&gt; <i> <i>&lt;b&gt; <i><b>");
    check("{{ s|length }} {{ s|reverse }} {{ s[1] }} {{ s[1:3] }} {{ s[::-2] }} {{ s|first }} {{ s|last }}", XS,
          "5 oll\xc3\xa9h \xc3\xa9 \xc3\xa9l olh h o");
    check("{{ 3.7|int }} {{ '42'|int }} {{ '4.9'|int }} {{ 'x'|int(-1) }} {{ '0x1f'|int(0, 16) }} {{ '2.5'|float }} "
          "{{ 'x'|float }} {{ 2|string ~ 'a' }}",
          NULL, "3 42 4 -1 31 2.5 0.0 2a");
    check("{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ -3|abs }} {{ 5|round }}",
          NULL, "2.0 4.0 2.67 3.0 3 5");
    check("{{ '%s=%s'|format('a', 1) }} {{ 'x' is string }} {{ 1|string is string }}", NULL, "a=1 True True");
    /* truncate: only past length + leeway (5); at a space unless killwords */
    check("{{ 'foo bar baz qux'|truncate(9) }}|{{ 'foo bar baz qux'|truncate(9, true) }}|"
          "{{ 'foo bar baz qux'|truncate(11) }}|{{ 'foo bar baz qux'|truncate(11, false, '...', 0) }}",
          NULL, "foo...|foo ba...|foo bar baz qux|foo bar...");
}

Test(jinja, list_filters) {
    check("{{ xs|join(', ') }} {{ xs|first }} {{ xs|last }} {{ xs|length }} {{ xs|sum }} {{ xs|min }} {{ xs|max }}", XS,
          "1, 2, 3 1 3 3 6 1 3");
    check("{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} {{ ['b', 'A', 'a']|sort }} "
          "{{ ['b', 'A', 'a']|sort(case_sensitive=true) }}",
          NULL, "[1, 2, 3] [3, 2, 1] ['A', 'a', 'b'] ['A', 'a', 'b']");
    check("{{ ['b', 'A', 'a', 'B']|unique|list }} {{ xs|reverse|list }} {{ d|list }} {{ d|dictsort }}", XS,
          "['b', 'A'] [3, 2, 1] ['a', 'b'] [('a', 1), ('b', [1, 2])]");
    check("{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ xs|map('string')|join('-') }}", XS,
          "[1, 3] [2] 1-2-3");
    check("{% set ms = [{'r': 'u', 'n': 1}, {'r': 'a'}, {'r': 'u', 'n': 2}] %}"
          "{{ ms|selectattr('r', 'equalto', 'u')|map(attribute='n')|list }} {{ ms|rejectattr('n')|list }} "
          "{{ ms|map(attribute='n', default=0)|list }} {{ ms|sort(attribute='r')|map(attribute='r')|join }}",
          NULL, "[1, 2] [{'r': 'a'}] [1, 0, 2] auu");
    /* generators are true even when empty and have no length, as in Python */
    check("{% if []|select %}gen{% endif %} {{ none|select|list }}", NULL, "gen []");
    check_error("{{ xs|select('odd')|length }}", XS, CN_STATUS_INVALID_ARG, "has no len()", NULL);
    check(
        "{{ []|first }}|{{ xs|default('d') }} {{ nothing|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }}",
        XS, "|[1, 2, 3] d  d");
}

Test(jinja, tests) {
    check("{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 1 is number }} {{ true is number }} "
          "{{ true is boolean }} {{ 1 is integer }} {{ 1.0 is float }} {{ 'a' is string }}",
          NULL, "False True True True True True True True True");
    check("{{ {} is mapping }} {{ [] is sequence }} {{ 'a' is iterable }} {{ 1 is iterable }} {{ x is iterable }} "
          "{{ x is sequence }} {{ none is iterable }}",
          NULL, "True True True False True True False");
    check("{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 2 is equalto 2 }} {{ 2 is in [1, 2] }} "
          "{{ 'ab' is lower }} {{ 'Ab' is upper }} {{ true is true }} {{ 1 is true }}",
          NULL, "True True True True True True False True False");
    check("{{ xs is not none }} {{ range is callable }} {{ 'upper' is filter }} {{ 'odd' is test }}", XS,
          "True True True True");
}

Test(jinja, methods) {
    check("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}",
          NULL, "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b,c'] ['a,b', 'c']");
    check("{{ '  x '.strip() }}|{{ 'xxa'.lstrip('x') }}|{{ 'axx'.rstrip('x') }}|{{ 'abc'.startswith(('x', 'a')) }} "
          "{{ 'abc'.endswith('bc') }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.rfind('c') }} {{ 'abcabc'.count('bc') }}",
          NULL, "x|a|a|True True 2 5 2");
    check("{{ 'ab'.replace('', '-') }} {{ '-'.join(['a', 'b']) }} {{ 'hi {}, {name}!'.format('you', name='x') }} "
          "{{ '{:>4}|{:.1f}'.format('a', 2.25) }} {{ 'x'.upper() }}{{ 'A b'.title() }}",
          NULL, "-a-b- a-b hi you, x!    a|2.2 XA B");
    check("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 9) }} {{ d.keys()|list }} {{ d.values()|list }} "
          "{{ d.items()|list }} {{ xs.index(2) }} {{ xs.count(1) }}",
          XS, "1 None 9 ['a', 'b'] [1, [1, 2]] [('a', 1), ('b', [1, 2])] 1 1");
    /* dict.items is the method, d['items'] the key, for a dict that has both */
    check("{% set o = {'items': 'key'} %}{{ o['items'] }} {{ o.items()|list }}", NULL, "key [('items', 'key')]");
}

Test(jinja, tojson_is_hf_json_dumps) {
    /* HF's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
     * sort_keys=False): ", " and ": " unless indenting, then "," and ": " */
    check("{{ d|tojson }}|{{ [1.0, 1e100, 'é\\n\"', none, true, 2]|tojson }}", XS,
          "{\"a\": 1, \"b\": [1, 2]}|[1.0, 1e+100, \"é\\n\\\"\", null, true, 2]");
    check("{{ d|tojson(indent=2) }}", XS, "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    2\n  ]\n}");
    check("{{ {'b': 1, 'a': {}}|tojson(sort_keys=true) }} {{ 'é'|tojson(ensure_ascii=true) }} "
          "{{ {'a': [1, 2]}|tojson(separators=(',', ':')) }} {{ [[]]|tojson(indent=0) }} {{ '<&>'|tojson }}",
          NULL, "{\"a\": {}, \"b\": 1} \"\\u00e9\" {\"a\":[1,2]} [\n[]\n] \"<&>\"");
    check("{{ {1: 'a', none: 'b', true: 'c'}|tojson }} {{ '\\x01\\x7f'|tojson }}", NULL,
          "{\"1\": \"c\", \"null\": \"b\"} \"\\u0001\x7f\"");
    check_error("{{ nothing|tojson }}", NULL, CN_STATUS_INVALID_ARG, "Undefined is not JSON serializable", NULL);
}

Test(jinja, undefined_and_sandbox) {
    /* undefined prints as nothing, is false, iterates as empty; using it otherwise fails */
    check("[{{ x }}]{% if not x %}F{% endif %}{% for i in x %}no{% endfor %}{{ x|length }}{{ d.missing }}", XS, "[]F0");
    check_error("{{ x + 1 }}", NULL, CN_STATUS_INVALID_ARG, "'x' is undefined", NULL);
    check_error("{{ d.missing.deeper }}", XS, CN_STATUS_INVALID_ARG, "'dict object' has no attribute 'missing'", NULL);
    check_error("{{ x.y }}", NULL, CN_STATUS_INVALID_ARG, "'x' is undefined", NULL);
    /* the immutable sandbox: mutating methods are refused when called */
    check("[{{ xs.append }}]", XS, "[]");
    check_error("{{ xs.append(4) }}", XS, CN_STATUS_INVALID_ARG,
                "access to attribute 'append' of 'list' object is unsafe", NULL);
    check_error("{{ d.pop('a') }}", XS, CN_STATUS_INVALID_ARG, "'pop' of 'dict' object is unsafe", NULL);
    check_error("{{ range(100001)|length }}", NULL, CN_STATUS_INVALID_ARG, "Range too big", NULL);
}

Test(jinja, globals_and_extensions) {
    check("{{ range(3)|list }} {{ range(1, 8, 3)|list }} {{ dict(a=1, b='x') }} {{ namespace(a=1).a }}", NULL,
          "[0, 1, 2] [1, 4, 7] {'a': 1, 'b': 'x'} 1");
    check("{{ strftime_now('%Y-%m-%d %H:%M') }} {{ strftime_now('%d %b %Y') }}", NULL, "2023-11-14 22:13 14 Nov 2023");
    check("a{% generation %}b{{ 1 }}{% endgeneration %}c", NULL, "ab1c");
    check("{{ bos_token }}{{ messages[0]['content'] }}{{ messages[0].role }}",
          "{\"bos_token\": \"<s>\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", "<s>hiuser");
    check("{% filter upper %}a{{ 'b' }}{% endfilter %}", NULL, "AB");
}

Test(jinja, errors_name_the_line) {
    check_error("line 1\n{{ raise_exception('Only user and assistant roles are supported!') }}", NULL,
                CN_STATUS_INVALID_ARG, "line 2", "Only user and assistant roles are supported!");
    check_error("a\nb\n{% if x %}\n{% endfor %}", NULL, CN_STATUS_INVALID_ARG, "line 4", NULL);
    check_error("{% for x in y %}", NULL, CN_STATUS_INVALID_ARG, "Unexpected end of template", "endfor");
    check_error("\n\n{{ 1 + }}", NULL, CN_STATUS_INVALID_ARG, "line 3", NULL);
    check_error("{% frobnicate %}", NULL, CN_STATUS_INVALID_ARG, "unknown tag 'frobnicate'", NULL);
    check_error("{% break %}", NULL, CN_STATUS_INVALID_ARG, "'break' outside loop", NULL);
    check_error("{{ 'x'|nosuchfilter }}", NULL, CN_STATUS_INVALID_ARG, "No filter named 'nosuchfilter'", NULL);
    check_error("{{ 'unterminated }}", NULL, CN_STATUS_INVALID_ARG, "line 1", NULL);
    /* inside an if, an unknown filter fails only when it runs (jinja2 defers it) */
    check("{% if false %}{{ x|from_json }}{% endif %}ok", NULL, "ok");
    check_error("\n{% if true %}{{ '1'|from_json }}{% endif %}", NULL, CN_STATUS_INVALID_ARG, "line 2", "from_json");
    check_error("{{ 1 }}", "[1]", CN_STATUS_INVALID_ARG, "JSON object", NULL);
    check_error("{{ 1 }}", "{\"a\": ", CN_STATUS_INVALID_ARG, "invalid JSON", NULL);
}

/* The lexer's message names the quote that opens the string left open (it once printed a
 * byte of a pointer instead). */
Test(jinja, unterminated_string_names_its_quote) {
    check_error("{{ 'unterminated }}", NULL, CN_STATUS_INVALID_ARG, "unexpected char '''", NULL);
    check_error("{{ \"unterminated }}", NULL, CN_STATUS_INVALID_ARG, "unexpected char '\"'", NULL);
}

Test(jinja, budgets) {
    cn_jinja_limits lim = test_limits();
    cn_status st;
    cn_error e = {0};
    /* an almost endless loop spends the step budget */
    lim.max_steps = 100000;
    char *out = render_lim("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", NULL,
                           &lim, &st, &e);
    cr_assert_null(out);
    cr_assert_eq(st, CN_STATUS_LIMIT, "%s", e.msg);
    cr_assert(strstr(e.msg, "step budget"), "%s", e.msg);
    /* a string that doubles each iteration hits the output budget long before memory */
    lim = test_limits();
    lim.max_output_bytes = 1 << 20;
    out = render_lim("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"
                     "{{ ns.s|length }}",
                     NULL, &lim, &st, &e);
    cr_assert_null(out);
    cr_assert_eq(st, CN_STATUS_LIMIT, "%s", e.msg);
    cr_assert(strstr(e.msg, "output budget"), "%s", e.msg);
    out = render_lim("{{ 'x' * 10000000 }}", NULL, &lim, &st, &e);
    cr_assert_null(out);
    cr_assert(strstr(e.msg, "output budget"), "%s", e.msg);
    /* unbounded recursion spends the depth budget */
    lim = test_limits();
    out = render_lim("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &lim, &st, &e);
    cr_assert_null(out);
    cr_assert_eq(st, CN_STATUS_LIMIT, "%s", e.msg);
    cr_assert(strstr(e.msg, "depth budget"), "%s", e.msg);
    /* the same templates within budget */
    lim.max_steps = 1000;
    out = render_lim("{% for i in range(10) %}{{ i }}{% endfor %}", NULL, &lim, &st, &e);
    cr_assert_str_eq(out, "0123456789");
    free(out);
}

Test(jinja, bad_input_never_crashes) {
    /* unbalanced and truncated pieces: each a clean error */
    static const char *const bad[] = {
        "{{",
        "{%",
        "{#",
        "{{ }}",
        "{% if %}",
        "{{ (((( }}",
        "{{ [1, }}",
        "{{ {1: }}",
        "{% for in x %}{% endfor %}",
        "{% set %}",
        "{% macro %}{% endmacro %}",
        "{{ a.  }}",
        "{{ a[ }}",
        "{% raw %}x",
        "{{ 'a\\x4' }}",
        "{{ 1 ]}}",
        "{% endif %}",
        "{% if 1 %}{% else %}{% else %}{% endif %}",
        "{{ x | }}",
        "{{ 99999999999999999999 }}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cn_status st;
        cn_error e = {0};
        char *out = render(bad[i], NULL, &st, &e);
        cr_assert_null(out, "%s rendered", bad[i]);
        cr_assert_neq(st, CN_STATUS_OK);
        cr_assert(e.msg[0], "%s: no message", bad[i]);
    }
    /* deep nesting is refused at parse time, not on the stack */
    char deep[4000];
    size_t k = 0;
    k += (size_t)sprintf(deep + k, "{{ ");
    for (int i = 0; i < 1000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 1000; i++) deep[k++] = ')';
    strcpy(deep + k, " }}");
    cn_jinja *t = NULL;
    cn_error e = {0};
    cr_assert_eq(cn_jinja_parse(deep, strlen(deep), &t, &e), CN_STATUS_INVALID_ARG);
    cr_assert(strstr(e.msg, "nested too deeply"), "%s", e.msg);
    cr_assert_null(t);
    /* values nested far deeper than any stack allows are refused, not recursed into, and
     * freed without recursion */
    check_error("{% set ns = namespace(t=1) %}{% for i in range(20000) %}{% set ns.t = [ns.t] %}{% endfor %}"
                "{{ ns.t }}",
                NULL, CN_STATUS_INVALID_ARG, "nested too deeply", NULL);
    check_error("{% set ns = namespace(t=1) %}{% for i in range(20000) %}{% set ns.t = [ns.t] %}{% endfor %}"
                "{{ ns.t == ns.t }}",
                NULL, CN_STATUS_INVALID_ARG, "nested too deeply", NULL);
    check_error("{% set ns = namespace(t=1) %}{% for i in range(20000) %}{% set ns.t = (ns.t,) %}{% endfor %}"
                "{{ {ns.t: 1} }}",
                NULL, CN_STATUS_INVALID_ARG, "unhashable", NULL);
    check(
        "{% set ns = namespace(t=1) %}{% for i in range(20000) %}{% set ns.t = [ns.t] %}{% endfor %}{{ ns.t|length }}",
        NULL, "1");
    /* a filter calling a filter by name counts against the depth budget */
    char maps[9000];
    size_t mk = (size_t)sprintf(maps,
                                "{%% set ns = namespace(t=[1]) %%}{%% for i in range(1000) %%}{%% set ns.t = [ns.t] %%}"
                                "{%% endfor %%}{{ ns.t|map(");
    for (int i = 0; i < 1000; i++) mk += (size_t)sprintf(maps + mk, "'map', ");
    strcpy(maps + mk, "'string')|list }}");
    check_error(maps, NULL, CN_STATUS_LIMIT, "depth budget", NULL);
    /* a length stops the read; NULL arguments are refused */
    cr_assert_eq(cn_jinja_parse("{{ 1 }}xyz", 7, &t, &e), CN_STATUS_OK);
    char *out = NULL;
    size_t n = 0;
    cr_assert_eq(cn_jinja_render(t, "{}", 2, NULL, &out, &n, &e), CN_STATUS_OK);
    cr_assert_str_eq(out, "1");
    free(out);
    cr_assert_eq(cn_jinja_render(t, "{}", 2, NULL, NULL, &n, &e), CN_STATUS_INVALID_ARG);
    cn_jinja_free(t);
    cn_jinja_free(NULL);
    cr_assert_eq(cn_jinja_parse(NULL, 3, &t, &e), CN_STATUS_INVALID_ARG);
}
