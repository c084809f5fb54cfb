/* engine.h — engine internals that tests and tools use beyond the public API in
 * include/cinder.h (the engine sections): the engine's KV caches, for checking cache
 * invariants between steps. */
#ifndef CN_ENGINE_ENGINE_H
#define CN_ENGINE_ENGINE_H

#include "cinder.h"
#include "kv/kv.h"
#include "text/tokenizer.h"

/* Views valid until cn_engine_free; read them only between steps. */
const cn_kv *cn_engine_kv(const cn_engine *e);
const cn_kv *cn_engine_draft_kv(const cn_engine *e); /* NULL without a draft model */

#endif
