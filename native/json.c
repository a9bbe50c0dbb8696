/* JSON reader for the fast path: see json.h. Written for this project; rules checked
 * against orjson (tests/test_native.py holds the cases). */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

typedef struct {
    jdoc *d;
    const char *cur, *end;
    int depth;
    int ws; /* whitespace seen since the innermost open container began */
} P;

static int fail(P *p, const char *why)
{
    p->d->err = why;
    return -1;
}

/* A limit of this reader, not an error orjson would raise: the caller must not reject. */
static int unsupported(P *p, const char *why)
{
    p->d->unsupported = 1;
    return fail(p, why);
}

void jdoc_init(jdoc *d)
{
    memset(d, 0, sizeof(*d));
}

void jdoc_free(jdoc *d)
{
    free(d->nodes);
    free(d->arena);
    memset(d, 0, sizeof(*d));
}

static int new_node(P *p, uint32_t *idx)
{
    jdoc *d = p->d;
    if (d->count == d->cap) {
        uint32_t cap = d->cap ? d->cap * 2 : 1024;
        if (cap > (1u << 26))
            return unsupported(p, "too many values");
        jnode *n = realloc(d->nodes, (size_t)cap * sizeof(jnode));
        if (!n)
            return unsupported(p, "out of memory");
        d->nodes = n;
        d->cap = cap;
    }
    *idx = d->count++;
    return 0;
}

static inline int skip_ws(P *p)
{
    const char *q = p->cur;
    while (q < p->end && (*q == ' ' || *q == '\n' || *q == '\t' || *q == '\r'))
        q++;
    if (q != p->cur)
        p->ws = 1;
    p->cur = q;
    return q < p->end;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int read_hex4(const char *q, const char *end, unsigned *out)
{
    if (end - q < 4)
        return -1;
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(q[k]);
        if (h < 0)
            return -1;
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return 0;
}

/* Length of a valid UTF-8 sequence at q (first byte >= 0x80), or 0 when invalid, overlong,
 * a surrogate or beyond U+10FFFF (orjson refuses all of these). */
static inline int utf8_seq(const unsigned char *q, const unsigned char *end)
{
    unsigned c = q[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (end - q >= 2 && (q[1] & 0xC0) == 0x80)
            return 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        if (end - q >= 3 && (q[1] & 0xC0) == 0x80 && (q[2] & 0xC0) == 0x80) {
            if (c == 0xE0 && q[1] < 0xA0)
                return 0;
            if (c == 0xED && q[1] >= 0xA0)
                return 0;
            return 3;
        }
    } else if (c >= 0xF0 && c <= 0xF4) {
        if (end - q >= 4 && (q[1] & 0xC0) == 0x80 && (q[2] & 0xC0) == 0x80 && (q[3] & 0xC0) == 0x80) {
            if (c == 0xF0 && q[1] < 0x90)
                return 0;
            if (c == 0xF4 && q[1] >= 0x90)
                return 0;
            return 4;
        }
    }
    return 0;
}

static char *put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        *o++ = (char)cp;
    } else if (cp < 0x800) {
        *o++ = (char)(0xC0 | (cp >> 6));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *o++ = (char)(0xE0 | (cp >> 12));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *o++ = (char)(0xF0 | (cp >> 18));
        *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *o++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *o++ = (char)(0x80 | (cp & 0x3F));
    }
    return o;
}

/* Bytes before the first '"', '\\', control byte or non-ASCII byte from q. */
static inline const char *scan_plain(const char *q, const char *end)
{
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    while (end - q >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)q);
        /* signed compare: bytes >= 0x80 are negative, so this also catches non-ASCII */
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, quote), _mm_cmpeq_epi8(x, bslash)),
                                 _mm_cmplt_epi8(x, space));
        int mask = _mm_movemask_epi8(m);
        if (mask)
            return q + __builtin_ctz((unsigned)mask);
        q += 16;
    }
#endif
    while (q < end) {
        unsigned char c = (unsigned char)*q;
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80)
            return q;
        q++;
    }
    return q;
}

static int parse_string(P *p, jnode *n)
{
    const char *start = p->cur + 1, *q = start, *end = p->end;
    size_t cont = 0; /* UTF-8 continuation bytes: len - cont = code points */
    int ascii = 1, canon = 1;
    char *out = NULL; /* set once an escape forces decoding into the arena */
    for (;;) {
        const char *r = scan_plain(q, end);
        if (out) {
            memcpy(out, q, (size_t)(r - q));
            out += r - q;
        }
        q = r;
        if (q >= end)
            return fail(p, "unterminated string");
        unsigned char c = (unsigned char)*q;
        if (c == '"')
            break;
        if (c >= 0x80) {
            int k = utf8_seq((const unsigned char *)q, (const unsigned char *)end);
            if (!k)
                return fail(p, "invalid UTF-8");
            if (out) {
                memcpy(out, q, (size_t)k);
                out += k;
            }
            q += k;
            cont += (size_t)k - 1;
            ascii = 0;
            continue;
        }
        if (c < 0x20)
            return fail(p, "control character in string");
        /* an escape */
        if (!out) {
            jdoc *d = p->d;
            out = d->arena + d->arena_len;
            memcpy(out, start, (size_t)(q - start));
            out += q - start;
        }
        if (q + 1 >= end)
            return fail(p, "unterminated escape");
        char e = q[1];
        q += 2;
        switch (e) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case 'n': *out++ = '\n'; break;
        case 't': *out++ = '\t'; break;
        case 'r': *out++ = '\r'; break;
        case 'b': *out++ = '\b'; break;
        case 'f': *out++ = '\f'; break;
        case '/': *out++ = '/'; canon = 0; break;
        case 'u': {
            unsigned cp, lo;
            if (read_hex4(q, end, &cp))
                return fail(p, "bad \\u escape");
            q += 4;
            canon = 0;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail(p, "lone low surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - q < 6 || q[0] != '\\' || q[1] != 'u' || read_hex4(q + 2, end, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return fail(p, "lone high surrogate");
                q += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            char *before = out;
            out = put_utf8(out, cp);
            if (cp >= 0x80) {
                ascii = 0;
                cont += (size_t)(out - before) - 1;
            }
            break;
        }
        default:
            return fail(p, "bad escape");
        }
    }
    n->type = J_STR;
    n->raw = p->cur;
    n->raw_len = (size_t)(q + 1 - p->cur);
    if (out) {
        jdoc *d = p->d;
        n->s = d->arena + d->arena_len;
        n->len = (size_t)(out - n->s);
        d->arena_len += n->len;
    } else {
        n->s = start;
        n->len = (size_t)(q - start);
    }
    n->n = (uint32_t)(n->len - cont);
    n->ascii = (uint8_t)ascii;
    n->canon = (uint8_t)canon;
    p->cur = q + 1;
    return 0;
}

static inline int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Whether `sig` significant digits `digits` are the shortest round-trip digits of v (what
 * Python's repr and orjson write) when a literal has 16 or 17 of them. The p-digit correctly
 * rounded form is the shortest one once it round-trips, where v's rounding interval is
 * symmetric: not so at a power of two, which is left to the reference. */
static int shortest_digits(double v, const char *digits, size_t sig)
{
    int e;
    double a = fabs(v);
    if (a == 0.0 || frexp(a, &e) == 0.5)
        return 0;
    char buf[40];
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, sizeof(buf), "%.*e", p - 1, a);
        if (strtod(buf, NULL) != a)
            continue;
        if ((size_t)p != sig)
            return 0;
        size_t k = 0;
        for (const char *q = buf; *q && *q != 'e'; q++)
            if (*q != '.' && digits[k++] != *q)
                return 0;
        return k == sig;
    }
    return 0;
}

/* orjson writes a float it read back as this exact text when the text is plain decimal, its
 * digits are the shortest that round-trip (always so for at most 15 significant digits), there
 * is no trailing zero beyond "x.0", and the magnitude is one where orjson does not switch to
 * exponent notation. */
static int float_canon(const char *s, const char *int_end, const char *frac_end, int has_exp, double v)
{
    if (has_exp || frac_end == int_end)
        return 0;
    const char *digits = s[0] == '-' ? s + 1 : s;
    size_t int_len = (size_t)(int_end - digits);
    const char *frac = int_end + 1;
    size_t frac_len = (size_t)(frac_end - frac);
    if (int_len > 15 || frac_len == 0)
        return 0;
    if (frac[frac_len - 1] == '0' && frac_len != 1)
        return 0;
    size_t sig;
    char sd[40]; /* the significant digits, for literals of 16 or 17 */
    size_t n = 0;
    if (int_len == 1 && digits[0] == '0') {
        size_t z = 0;
        while (z < frac_len && frac[z] == '0')
            z++;
        if (z == frac_len)
            return 1; /* 0.0 or -0.0 */
        if (z > 3)
            return 0;
        sig = frac_len - z;
        if (sig > 15 && sig <= 17)
            memcpy(sd, frac + z, sig), n = sig;
    } else {
        int x0 = frac_len == 1 && frac[0] == '0';
        sig = int_len + (x0 ? 0 : frac_len);
        if (sig > 15 && sig <= 17) {
            memcpy(sd, digits, int_len);
            memcpy(sd + int_len, frac, frac_len);
            n = sig;
        }
    }
    if (sig <= 15)
        return 1;
    return n == sig && shortest_digits(v, sd, sig);
}

static int parse_number(P *p, jnode *n)
{
    const char *s = p->cur, *q = s, *end = p->end;
    int neg = 0;
    if (*q == '-') {
        neg = 1;
        q++;
    }
    if (q >= end || !is_digit(*q))
        return fail(p, "bad number");
    if (*q == '0') {
        q++;
    } else {
        while (q < end && is_digit(*q))
            q++;
    }
    const char *int_end = q, *frac_end = q;
    int has_exp = 0;
    if (q < end && *q == '.') {
        q++;
        if (q >= end || !is_digit(*q))
            return fail(p, "bad fraction");
        while (q < end && is_digit(*q))
            q++;
        frac_end = q;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        has_exp = 1;
        q++;
        if (q < end && (*q == '+' || *q == '-'))
            q++;
        if (q >= end || !is_digit(*q))
            return fail(p, "bad exponent");
        while (q < end && is_digit(*q))
            q++;
    }
    n->s = s;
    n->len = (size_t)(q - s);
    n->raw = s;
    n->raw_len = n->len;
    p->cur = q;
    if (frac_end == int_end && !has_exp) {
        /* an integer: orjson keeps -2**63 .. 2**64-1 as int, reads the rest as float */
        const char *dg = neg ? s + 1 : s;
        uint64_t v = 0;
        int over = 0;
        for (const char *c = dg; c < int_end; c++) {
            unsigned dv = (unsigned)(*c - '0');
            if (v > (UINT64_MAX - dv) / 10) {
                over = 1;
                break;
            }
            v = v * 10 + dv;
        }
        if (!over && (!neg || v <= (uint64_t)INT64_MAX + 1)) {
            n->type = J_INT;
            n->big = (uint8_t)(!neg && v > (uint64_t)INT64_MAX);
            n->i = neg ? (int64_t)(0 - v) : (int64_t)(n->big ? INT64_MAX : v);
            n->d = neg ? -(double)v : (double)v;
            n->canon = (uint8_t)!(neg && v == 0); /* "-0" is written "0" */
            return 0;
        }
    }
    char tmp[64];
    char *buf = n->len < sizeof(tmp) ? tmp : malloc(n->len + 1);
    if (!buf)
        return unsupported(p, "out of memory");
    memcpy(buf, s, n->len);
    buf[n->len] = 0;
    n->d = strtod(buf, NULL);
    if (buf != tmp)
        free(buf);
    if (isinf(n->d))
        return fail(p, "number is infinity");
    n->type = J_FLOAT;
    n->canon = (uint8_t)float_canon(s, int_end, frac_end, has_exp, n->d);
    return 0;
}

static int parse_value(P *p, uint32_t *out_idx);

static int keys_distinct(const jdoc *d, uint32_t obj)
{
    uint32_t keys[J_MAX_KEYS];
    uint32_t m = 0;
    for (uint32_t k = obj + 1; k < d->nodes[obj].next; k = d->nodes[k + 1].next)
        keys[m++] = k;
    for (uint32_t a = 1; a < m; a++) {
        const jnode *ka = &d->nodes[keys[a]];
        for (uint32_t b = 0; b < a; b++) {
            const jnode *kb = &d->nodes[keys[b]];
            if (ka->len == kb->len && (ka->len == 0 || (ka->s[0] == kb->s[0] && memcmp(ka->s, kb->s, ka->len) == 0)))
                return 0;
        }
    }
    return 1;
}

static int parse_container(P *p, uint32_t idx, int is_obj)
{
    jdoc *d = p->d;
    const char *open = p->cur;
    int outer_ws = p->ws;
    p->ws = 0;
    if (++p->depth > J_MAX_DEPTH)
        return unsupported(p, "nesting too deep");
    p->cur++;
    int canon = 1;
    uint32_t n = 0;
    char close = is_obj ? '}' : ']';
    if (!skip_ws(p))
        return fail(p, "unterminated container");
    if (*p->cur == close) {
        p->cur++;
    } else {
        for (;;) {
            uint32_t child;
            if (is_obj) {
                if (*p->cur != '"')
                    return fail(p, "expected a key");
                if (new_node(p, &child))
                    return -1;
                memset(&d->nodes[child], 0, sizeof(jnode));
                if (parse_string(p, &d->nodes[child]))
                    return -1;
                d->nodes[child].next = child + 1;
                canon &= d->nodes[child].canon;
                if (!skip_ws(p) || *p->cur != ':')
                    return fail(p, "expected ':'");
                p->cur++;
                if (!skip_ws(p))
                    return fail(p, "expected a value");
                if (n >= J_MAX_KEYS)
                    return unsupported(p, "too many keys");
            }
            if (parse_value(p, &child))
                return -1;
            canon &= d->nodes[child].canon;
            n++;
            if (!skip_ws(p))
                return fail(p, "unterminated container");
            if (*p->cur == ',') {
                p->cur++;
                if (!skip_ws(p))
                    return fail(p, "unterminated container");
                continue;
            }
            if (*p->cur == close) {
                p->cur++;
                break;
            }
            return fail(p, "expected ',' or a close");
        }
    }
    jnode *node = &d->nodes[idx];
    node->type = is_obj ? J_OBJ : J_ARR;
    node->n = n;
    node->next = d->count;
    node->s = node->raw = open;
    node->len = node->raw_len = (size_t)(p->cur - open);
    if (is_obj && n > 1 && !keys_distinct(d, idx))
        return unsupported(p, "duplicate key");
    node->canon = (uint8_t)(canon && !p->ws);
    p->ws = outer_ws;
    p->depth--;
    return 0;
}

static int parse_lit(P *p, jnode *n, const char *lit, size_t len, int type)
{
    if ((size_t)(p->end - p->cur) < len || memcmp(p->cur, lit, len) != 0)
        return fail(p, "unexpected character");
    n->type = (uint8_t)type;
    n->canon = 1;
    n->s = n->raw = p->cur;
    n->len = n->raw_len = len;
    p->cur += len;
    return 0;
}

static int parse_value(P *p, uint32_t *out_idx)
{
    uint32_t idx;
    if (new_node(p, &idx))
        return -1;
    *out_idx = idx;
    jnode *n = &p->d->nodes[idx];
    memset(n, 0, sizeof(*n));
    n->next = idx + 1;
    switch (*p->cur) {
    case '{': return parse_container(p, idx, 1);
    case '[': return parse_container(p, idx, 0);
    case '"': return parse_string(p, n);
    case 't': return parse_lit(p, n, "true", 4, J_TRUE);
    case 'f': return parse_lit(p, n, "false", 5, J_FALSE);
    case 'n': return parse_lit(p, n, "null", 4, J_NULL);
    default:
        if (*p->cur == '-' || is_digit(*p->cur))
            return parse_number(p, n);
        return fail(p, "unexpected character");
    }
}

int jdoc_parse(jdoc *d, const char *buf, size_t len)
{
    d->count = 0;
    d->arena_len = 0;
    d->err = NULL;
    d->unsupported = 0;
    if (d->arena_cap < len + 1) {
        free(d->arena);
        d->arena_cap = len + 1 > 65536 ? len + 1 : 65536;
        d->arena = malloc(d->arena_cap);
        if (!d->arena) {
            d->arena_cap = 0;
            d->err = "out of memory";
            d->unsupported = 1;
            return -1;
        }
    }
    P p = {d, buf, buf + len, 0, 0};
    uint32_t root;
    if (!skip_ws(&p)) {
        d->err = "empty";
        return -1;
    }
    if (parse_value(&p, &root))
        return -1;
    skip_ws(&p);
    if (p.cur != p.end) {
        d->err = "content after the value";
        return -1;
    }
    return 0;
}

uint32_t j_get(const jdoc *d, uint32_t obj, const char *key, size_t klen)
{
    const jnode *o = &d->nodes[obj];
    if (o->type != J_OBJ)
        return 0;
    for (uint32_t k = obj + 1; k < o->next; k = d->nodes[k + 1].next) {
        const jnode *kn = &d->nodes[k];
        if (kn->len == klen && memcmp(kn->s, key, klen) == 0)
            return k + 1;
    }
    return 0;
}

int j_truthy(const jnode *n)
{
    switch (n->type) {
    case J_NULL:
    case J_FALSE: return 0;
    case J_TRUE: return 1;
    case J_INT: return n->big || n->i != 0;
    case J_FLOAT: return n->d != 0.0;
    case J_STR: return n->len != 0;
    default: return n->n != 0;
    }
}
