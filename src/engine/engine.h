/* engine.h — engine internals that tests and the CLI use beyond the public API in
 * include/cinder.h (the engine section): the engine's tokenizer and KV cache, for
 * tokenizing prompts the way submit does and for checking cache invariants. */
#ifndef CN_ENGINE_ENGINE_H
#define CN_ENGINE_ENGINE_H

#include "cinder.h"
#include "kv/kv.h"
#include "text/tokenizer.h"

/* Views valid until cn_engine_free. The KV cache must only be read between steps. */
const cn_tokenizer *cn_engine_tokenizer(const cn_engine *e);
const cn_kv *cn_engine_kv(const cn_engine *e);
const cn_kv *cn_engine_draft_kv(const cn_engine *e); /* NULL without a draft model */
/* The largest position count one sequence may reach (context and KV budget). */
int32_t cn_engine_n_ctx(const cn_engine *e);
int32_t cn_engine_max_running(const cn_engine *e); /* cn_engine_params.max_running */

#endif
