/* chat.h — chat templates: a conversation rendered into the prompt text a chat model was
 * trained on. The model's own tokenizer.chat_template is run by the Jinja interpreter
 * (jinja/jinja.h), byte for byte as Hugging Face's apply_chat_template renders it with
 * jinja2; hand-written C renderers of three families (ChatML, Gemma, Llama-3) serve
 * files without a template, templates the interpreter cannot parse but whose family is
 * recognized, and --chat-template NAME.
 *
 * BOS: the rendered text never contains the BOS the tokenizer adds. Jinja templates are
 * rendered with bos_token and eos_token set to the tokenizer's texts (so the text
 * matches jinja2's), and when the tokenizer adds BOS itself (tokenizer.ggml.add_bos_token)
 * a leading BOS text is removed, whoever wrote it, since the model must not see two. So
 * tokenize the result with add_special = true. A template with no model (from text,
 * `cinder template render --template FILE`) has empty bos_token and eos_token unless the
 * variables give them, and removes nothing. The hand-written Gemma and Llama-3 renderers
 * never write BOS (the GGUFs of those families say add_bos_token = true; SmolLM2's ChatML
 * has no BOS and its file says false). Rendering "<bos>" as text and also adding it would
 * give the model two BOS tokens. Special-token text in the output ("<|im_start|>") is
 * meant to be tokenized with parse_special = true. */
#ifndef CN_CHAT_H
#define CN_CHAT_H

#include "gguf/gguf.h"

#define CN_CHAT_MAX_MESSAGES 4096            /* messages per conversation */
#define CN_CHAT_MAX_PROMPT_BYTES (64u << 20) /* rendered prompt, and each content */
#define CN_CHAT_MAX_SYSTEM_BYTES 4096        /* a default system prompt in a template */
#define CN_CHAT_TEMPLATE_NAMES "chatml, gemma, llama3"

typedef enum {
    CN_CHAT_CHATML = 0, /* <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen) */
    CN_CHAT_GEMMA,      /* <start_of_turn>user\n...<end_of_turn>\n, assistant is "model" */
    CN_CHAT_LLAMA3,     /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
} cn_chat_family;

/* cn_chat_msg, cn_chat_template, from_name / from_model / from_jinja, free, name,
 * end_of_turn, source, set_clock, cn_chat_render and cn_chat_render_json are public
 * (include/cinder.h); plain ChatML by name has no default system prompt. Below, the rules
 * of each call in full. */

/* The template of a model file: g's tokenizer.chat_template run by the interpreter, with
 * tok's BOS / EOS texts (tok may be NULL: none, and no BOS removed). A template the
 * interpreter cannot parse falls back to its family's hand-written renderer when
 * cn_chat_template_detect recognizes it. No template, or neither: UNSUPPORTED (the
 * message says why and suggests --chat-template NAME). */
struct cn_tokenizer;
cn_status cn_chat_template_for_model(const cn_gguf *g, const struct cn_tokenizer *tok, cn_chat_template **out,
                                     cn_error *err);

/* From the Jinja text of tokenizer.chat_template (jinja[0..len), borrowed; may be NULL
 * when the file has none): "<|im_start|>" means ChatML, "<start_of_turn>" Gemma,
 * "<|start_header_id|>" Llama-3. A ChatML template that writes a literal default system
 * turn ('<|im_start|>system\n...<|im_end|>', as SmolLM2's and Qwen2.5's do) keeps that
 * text and renders it when the conversation does not start with a system message.
 * Anything else: CN_STATUS_UNSUPPORTED, suggesting --chat-template NAME. */
cn_status cn_chat_template_detect(const char *jinja, size_t len, cn_chat_template **out, cn_error *err);

/* The hand-written family, or for a Jinja template the family its markers show (what
 * end_of_turn follows); CN_CHAT_CHATML when it shows none. */
cn_chat_family cn_chat_template_family(const cn_chat_template *t);
bool cn_chat_template_is_jinja(const cn_chat_template *t);
/* cn_chat_template_end_of_turn: an end-of-generation token for the model, or a stop
 * string when the tokenizer does not mark it as one. A Jinja template: its family's when
 * its markers show one, else the EOS text, else "" (no stop string). */
/* The one rule for where a chat reply ends: t's end of turn when a reply must stop on it
 * as a stop string, because tok does not end generation there itself (it is no token,
 * or a token tok does not count as end-of-generation); NULL when it need not (or t is
 * NULL, or has no end of turn). View valid until t is freed. */
const char *cn_chat_end_of_turn_stop(const cn_chat_template *t, const struct cn_tokenizer *tok);
/* The default system prompt taken from the template, or NULL. View valid until free. */
const char *cn_chat_template_default_system(const cn_chat_template *t);
/* True when the reference template starts with {{ bos_token }} (Gemma, Llama-3), or a
 * Jinja template names bos_token; the rendered text leaves BOS out either way (see the
 * top of this file). */
bool cn_chat_template_bos_in_template(const cn_chat_template *t);

/* cn_chat_render renders msgs[0..n_msgs) and, if add_generation_prompt, the opening of an
 * assistant turn. *out is a NUL-terminated string the caller frees with free(); *out_len
 * (may be NULL) its length. Errors (nothing allocated): n_msgs 0, NULL msgs/role/content
 * → CN_STATUS_INVALID_ARG; more than CN_CHAT_MAX_MESSAGES messages or a prompt over
 * CN_CHAT_MAX_PROMPT_BYTES → CN_STATUS_LIMIT.
 * A Jinja template gets the messages as cn_chat_render_json would (any role, UTF-8
 * text) and fails as the template does (INVALID_ARG with its message and line).
 * The hand-written families: a role other than system/user/assistant → INVALID_ARG;
 * Gemma only: turns after an optional leading system message must alternate
 * user/assistant starting with user (its template raises otherwise) → INVALID_ARG.
 * Per family, as the reference templates do: ChatML copies contents verbatim; Gemma
 * trims each content (Python str.strip whitespace, Unicode included), folds a leading
 * system message (untrimmed, plus "\n\n") into the first turn, and renders "assistant" as
 * "model"; Llama-3 trims each content.
 *
 * cn_chat_render_json: as include/cinder.h says. Jinja templates get messages, tools
 * (None when NULL), documents (None), add_generation_prompt, bos_token, eos_token, then
 * the variables of vars_json (which may override those). Hand-written templates take
 * text parts joined and a null content as empty, and ignore vars_json. */

#endif
