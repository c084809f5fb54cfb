/* page.h — the chat page served at GET / (src/serve/chat.html, embedded by page.c). */
#ifndef CN_SERVE_PAGE_H
#define CN_SERVE_PAGE_H

#include <stddef.h>

/* The page's bytes (UTF-8 HTML), valid for the process's life; *n_bytes its length. */
const char *cn_serve_page(size_t *n_bytes);

#endif
