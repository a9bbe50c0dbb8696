/* Byte buffers, orjson-style JSON writing, and the few Python string rules the corpus
 * decisions use (str.strip / str.isspace whitespace, code point slicing). */
#ifndef SD_TEXT_H
#define SD_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "json.h"

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} buf_t;

int buf_grow(buf_t *b, size_t extra);
static inline void buf_put(buf_t *b, const void *s, size_t n)
{
    if (b->len + n > b->cap && buf_grow(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
}
static inline void buf_c(buf_t *b, char c)
{
    if (b->len + 1 > b->cap && buf_grow(b, 1))
        return;
    b->p[b->len++] = c;
}
#define BUF_LIT(b, lit) buf_put((b), (lit), sizeof(lit) - 1)
void buf_i64(buf_t *b, int64_t v);
void buf_free(buf_t *b);

/* A JSON string as orjson writes it: '"', '\\' and control bytes escaped, the rest as is. */
void emit_str(buf_t *b, const char *s, size_t n);
/* A parsed value as orjson.dumps writes it; -1 where this writer cannot be exact
 * (a float whose text is not orjson's). */
int emit_value(buf_t *b, const jdoc *d, uint32_t idx);

/* Python's str.isspace() characters, read as UTF-8: length of the space at s, or 0. */
size_t py_space_at(const char *s, size_t n);
/* [*start, *end) of s without Python-whitespace at both ends (str.strip()). */
void py_strip(const char *s, size_t n, size_t *start, size_t *end);
/* Byte length of the first `cps` code points of valid UTF-8 s. */
size_t utf8_prefix(const char *s, size_t n, size_t cps);
size_t utf8_count(const char *s, size_t n);
/* ASCII digits in s. */
size_t count_digits(const char *s, size_t n);
const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m);

#endif
