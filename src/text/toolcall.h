/* toolcall.h — how chat models write function calls, as data, and the reader that takes
 * a reply apart (content, reasoning, calls) as it streams. The public half is in
 * include/cinder.h ("tool calls"); here the format table that the grammar layer's tool
 * front end (src/grammar/tools.c) builds its grammar from, so the reader and the grammar
 * agree on every trigger by construction. */
#ifndef CN_TOOLCALL_H
#define CN_TOOLCALL_H

#include <stdbool.h>

#include "core/core.h"

#define CN_TOOL_MAX_TRIGGERS 3
#define CN_TOOL_MAX_CALL_BYTES (1u << 20) /* one call's text, trigger to close */

/* One way a call starts: open is the text that starts it; with at_start it counts only
 * as the first thing in the reply (after whitespace); array: open is followed by a JSON
 * array of call objects, not one object; close follows the object (or the array), ""
 * when nothing does. A call object is {"name": NAME, ARGS_KEY: {...}}. */
typedef struct {
    const char *open;
    const char *close;
    bool at_start;
    bool array;
} cn_tool_trigger;

typedef struct {
    const char *name;     /* "hermes", ... */
    const char *args_key; /* "arguments" or "parameters" */
    cn_tool_trigger trig[CN_TOOL_MAX_TRIGGERS];
    int n_trig;
} cn_tool_spec;

/* The spec of format f (a cn_tool_format from cinder.h); NULL for CN_TOOL_FORMAT_NONE. */
const cn_tool_spec *cn_tool_spec_of(int f);

#endif
