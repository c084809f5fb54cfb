/* chat.h — chat templates: a list of {role, content} messages rendered into the prompt
 * text a chat model was trained on. cinder runs no Jinja: it recognizes the family of the
 * GGUF's tokenizer.chat_template (ChatML, Gemma, Llama-3) or takes an explicit name, and
 * renders that family in C, byte for byte as the reference template does under
 * HF transformers' Jinja settings.
 *
 * BOS: the Gemma and Llama-3 templates begin with {{ bos_token }}; the rendered text here
 * never contains BOS. Tokenize it with add_special = true so the tokenizer adds BOS as the
 * GGUF's tokenizer.ggml.add_bos_token says (true for Gemma and Llama-3 files; the ChatML
 * template of SmolLM2 has no BOS and its file says false). Rendering "<bos>" as text and
 * also adding it would give the model two BOS tokens. Special-token text in the output
 * ("<|im_start|>") is meant to be tokenized with parse_special = true. */
#ifndef CN_CHAT_H
#define CN_CHAT_H

#include "core/core.h"

#define CN_CHAT_MAX_MESSAGES      4096         /* messages per conversation */
#define CN_CHAT_MAX_PROMPT_BYTES  (64u << 20)  /* rendered prompt, and each content */
#define CN_CHAT_MAX_SYSTEM_BYTES  4096         /* a default system prompt in a template */
#define CN_CHAT_TEMPLATE_NAMES    "chatml, gemma, llama3"

typedef enum {
    CN_CHAT_CHATML = 0, /* <|im_start|>role\n...<|im_end|>\n (SmolLM2, Qwen) */
    CN_CHAT_GEMMA,      /* <start_of_turn>user\n...<end_of_turn>\n, assistant is "model" */
    CN_CHAT_LLAMA3,     /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
} cn_chat_family;

/* cn_chat_msg, cn_chat_template, from_name / from_model, free, name, end_of_turn and
 * cn_chat_render are public (include/cinder.h); plain ChatML by name has no default
 * system prompt. Below, the rules of each call in full. */

/* From the Jinja text of tokenizer.chat_template (jinja[0..len), borrowed; may be NULL
 * when the file has none): "<|im_start|>" means ChatML, "<start_of_turn>" Gemma,
 * "<|start_header_id|>" Llama-3. A ChatML template that writes a literal default system
 * turn ('<|im_start|>system\n...<|im_end|>', as SmolLM2's and Qwen2.5's do) keeps that
 * text and renders it when the conversation does not start with a system message.
 * Anything else: CN_STATUS_UNSUPPORTED, suggesting --chat-template NAME. */
cn_status cn_chat_template_detect(const char *jinja, size_t len, cn_chat_template **out,
                                  cn_error *err);

cn_chat_family cn_chat_template_family(const cn_chat_template *t);
/* cn_chat_template_end_of_turn: an end-of-generation token for the model, or a stop
 * string when the tokenizer does not mark it as one. */
/* The default system prompt taken from the template, or NULL. View valid until free. */
const char *cn_chat_template_default_system(const cn_chat_template *t);
/* True when the reference template starts with {{ bos_token }} (Gemma, Llama-3); the
 * rendered text leaves it out either way (see the top of this file). */
bool cn_chat_template_bos_in_template(const cn_chat_template *t);

/* cn_chat_render renders msgs[0..n_msgs) and, if add_generation_prompt, the opening of an assistant
 * turn. *out is a NUL-terminated string the caller frees with free(); *out_len (may be
 * NULL) its length. Errors (nothing allocated): n_msgs 0, NULL msgs/role/content, a role
 * other than system/user/assistant → CN_STATUS_INVALID_ARG; Gemma only: turns after an
 * optional leading system message must alternate user/assistant starting with user (its
 * template raises otherwise) → CN_STATUS_INVALID_ARG; more than CN_CHAT_MAX_MESSAGES
 * messages or a prompt over CN_CHAT_MAX_PROMPT_BYTES → CN_STATUS_LIMIT.
 * Per family, as the reference templates do: ChatML copies contents verbatim; Gemma
 * trims each content (Python str.strip whitespace, Unicode included), folds a leading
 * system message (untrimmed, plus "\n\n") into the first turn, and renders "assistant" as
 * "model"; Llama-3 trims each content. */

#endif
