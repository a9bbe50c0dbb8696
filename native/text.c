#define _GNU_SOURCE
#include "text.h"

#include <stdlib.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

int buf_grow(buf_t *b, size_t extra)
{
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

void buf_free(buf_t *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

void buf_i64(buf_t *b, int64_t v)
{
    char tmp[24];
    int k = 24;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[--k] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        tmp[--k] = '-';
    buf_put(b, tmp + k, (size_t)(24 - k));
}

void emit_str(buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    /* worst case: every byte becomes \u00XX; reserve once, then write without checks */
    if (b->len + 6 * n + 2 + 16 > b->cap && buf_grow(b, 6 * n + 2 + 16))
        return;
    char *o = b->p + b->len;
    const char *q = s, *end = s + n;
    *o++ = '"';
    while (q < end) {
#ifdef __SSE2__
        const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), ctl = _mm_set1_epi8(0x1f);
        while (end - q >= 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)q);
            _mm_storeu_si128((__m128i *)o, x); /* copied whole; the cursor moves past clean bytes only */
            __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                                     _mm_cmpeq_epi8(_mm_max_epu8(x, ctl), ctl));
            int mask = _mm_movemask_epi8(m);
            if (mask) {
                int k = __builtin_ctz((unsigned)mask);
                q += k;
                o += k;
                goto escape;
            }
            q += 16;
            o += 16;
        }
#endif
        if (q >= end)
            break;
        if (*q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) {
            *o++ = *q++;
            continue;
        }
#ifdef __SSE2__
    escape:
#endif
        {
            unsigned char c = (unsigned char)*q++;
            *o++ = '\\';
            switch (c) {
            case '"': *o++ = '"'; break;
            case '\\': *o++ = '\\'; break;
            case '\n': *o++ = 'n'; break;
            case '\r': *o++ = 'r'; break;
            case '\t': *o++ = 't'; break;
            case '\b': *o++ = 'b'; break;
            case '\f': *o++ = 'f'; break;
            default:
                *o++ = 'u';
                *o++ = '0';
                *o++ = '0';
                *o++ = hex[c >> 4];
                *o++ = hex[c & 15];
            }
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
}

int emit_value(buf_t *b, const jdoc *d, uint32_t idx)
{
    const jnode *n = &d->nodes[idx];
    if (n->canon) {
        buf_put(b, n->raw, n->raw_len);
        return 0;
    }
    switch (n->type) {
    case J_STR:
        emit_str(b, n->s, n->len);
        return 0;
    case J_INT:
        buf_c(b, '0'); /* the only int written differently: "-0" */
        return 0;
    case J_FLOAT:
        return -1;
    case J_ARR: {
        buf_c(b, '[');
        for (uint32_t k = idx + 1; k < n->next; k = d->nodes[k].next) {
            if (k != idx + 1)
                buf_c(b, ',');
            if (emit_value(b, d, k))
                return -1;
        }
        buf_c(b, ']');
        return 0;
    }
    case J_OBJ: {
        buf_c(b, '{');
        for (uint32_t k = idx + 1; k < n->next; k = d->nodes[k + 1].next) {
            if (k != idx + 1)
                buf_c(b, ',');
            emit_str(b, d->nodes[k].s, d->nodes[k].len);
            buf_c(b, ':');
            if (emit_value(b, d, k + 1))
                return -1;
        }
        buf_c(b, '}');
        return 0;
    }
    default:
        buf_put(b, n->raw, n->raw_len);
        return 0;
    }
}

size_t py_space_at(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    if (!n)
        return 0;
    if (u[0] < 0x80)
        return (u[0] == ' ' || (u[0] >= 0x09 && u[0] <= 0x0d) || (u[0] >= 0x1c && u[0] <= 0x1f)) ? 1 : 0;
    if (n >= 2 && u[0] == 0xC2 && (u[1] == 0x85 || u[1] == 0xA0))
        return 2;
    if (n >= 3 && u[0] == 0xE1 && u[1] == 0x9A && u[2] == 0x80)
        return 3; /* U+1680 */
    if (n >= 3 && u[0] == 0xE2 && u[1] == 0x80 && ((u[2] >= 0x80 && u[2] <= 0x8A) || u[2] == 0xA8 || u[2] == 0xA9 || u[2] == 0xAF))
        return 3; /* U+2000..200A, 2028, 2029, 202F */
    if (n >= 3 && u[0] == 0xE2 && u[1] == 0x81 && u[2] == 0x9F)
        return 3; /* U+205F */
    if (n >= 3 && u[0] == 0xE3 && u[1] == 0x80 && u[2] == 0x80)
        return 3; /* U+3000 */
    return 0;
}

/* Length of the Python-whitespace character ending at s[n-1], or 0. */
static size_t py_space_before(const char *s, size_t n)
{
    if (!n)
        return 0;
    if ((unsigned char)s[n - 1] < 0x80)
        return py_space_at(s + n - 1, 1);
    for (size_t k = 2; k <= 3 && k <= n; k++)
        if (py_space_at(s + n - k, k) == k)
            return k;
    return 0;
}

void py_strip(const char *s, size_t n, size_t *start, size_t *end)
{
    size_t a = 0, z = n, k;
    while (a < z && (k = py_space_at(s + a, z - a)) != 0)
        a += k;
    while (z > a && (k = py_space_before(s + a, z - a)) != 0)
        z -= k;
    *start = a;
    *end = z;
}

size_t utf8_prefix(const char *s, size_t n, size_t cps)
{
    size_t i = 0;
    while (i < n && cps) {
        unsigned char c = (unsigned char)s[i];
        i += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        cps--;
    }
    return i < n ? i : n;
}

size_t utf8_count(const char *s, size_t n)
{
    size_t cont = 0;
    for (size_t i = 0; i < n; i++)
        cont += ((unsigned char)s[i] & 0xC0) == 0x80;
    return n - cont;
}

size_t count_digits(const char *s, size_t n)
{
    size_t c = 0, i = 0;
#ifdef __SSE2__
    const __m128i lo = _mm_set1_epi8('0' - 1), hi = _mm_set1_epi8('9' + 1), zero = _mm_setzero_si128();
    while (i + 16 <= n) {
        /* per-byte counters (a digit subtracts -1), summed every 255 blocks before they wrap */
        __m128i acc = zero;
        size_t end = n - i >= 255 * 16 ? i + 255 * 16 : i + ((n - i) & ~(size_t)15);
        for (; i < end; i += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(s + i));
            /* digits are ASCII, so signed compares are safe: bytes >= 0x80 are negative */
            acc = _mm_sub_epi8(acc, _mm_and_si128(_mm_cmpgt_epi8(x, lo), _mm_cmplt_epi8(x, hi)));
        }
        __m128i sums = _mm_sad_epu8(acc, zero);
        c += (size_t)_mm_cvtsi128_si32(sums) + (size_t)_mm_cvtsi128_si32(_mm_srli_si128(sums, 8));
    }
#endif
    for (; i < n; i++)
        c += s[i] >= '0' && s[i] <= '9';
    return c;
}

const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m)
{
    return memmem(hay, n, needle, m);
}
