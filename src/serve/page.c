/* page.c — the chat page (src/serve/chat.html) embedded in the binary at build time, so
 * `cinder serve` needs no file beside it. The assembler's .incbin copies the file's bytes
 * (the Makefile makes this object depend on the .html); a NUL follows them. */
#include "serve/page.h"

__asm__(".section .rodata\n"
        ".balign 16\n"
        ".global cn_serve_chat_page\n"
        "cn_serve_chat_page:\n"
        ".incbin \"src/serve/chat.html\"\n"
        ".global cn_serve_chat_page_end\n"
        "cn_serve_chat_page_end:\n"
        ".byte 0\n"
        ".previous\n");

extern const char cn_serve_chat_page[], cn_serve_chat_page_end[];

const char *cn_serve_page(size_t *n_bytes) {
    *n_bytes = (size_t)(cn_serve_chat_page_end - cn_serve_chat_page);
    return cn_serve_chat_page;
}
