/* A JSON reader that matches orjson.loads on what it accepts, and knows when a value's raw
 * text is already what orjson.dumps would write for it (so it can be copied, not rebuilt).
 *
 * One line is parsed into a tape of nodes (containers hold the index past their subtree), with
 * decoded strings in an arena no larger than the line. Anything orjson would refuse, and
 * anything this reader does not reproduce exactly (duplicate keys, very deep nesting, huge
 * objects), makes the parse fail: the caller then hands the line to the Python reference. */
#ifndef SD_JSON_H
#define SD_JSON_H

#include <stddef.h>
#include <stdint.h>

enum { J_NULL, J_FALSE, J_TRUE, J_INT, J_FLOAT, J_STR, J_ARR, J_OBJ };

typedef struct {
    uint8_t type;
    uint8_t canon;  /* raw text == orjson.dumps(orjson.loads(raw)) */
    uint8_t ascii;  /* strings: every byte < 0x80 */
    uint8_t big;    /* ints: outside int64 (only 2**63 .. 2**64-1 are ints to orjson) */
    uint32_t next;  /* index of the first node after this value's subtree */
    uint32_t n;     /* containers: children (objects: pairs); strings: code points */
    const char *s;  /* strings: decoded bytes; numbers: literal; containers: raw text */
    size_t len;
    size_t raw_len; /* strings: raw text incl. quotes starts at raw */
    const char *raw;
    int64_t i;
    double d;
} jnode;

typedef struct {
    jnode *nodes;
    uint32_t count, cap;
    char *arena;  /* decoded strings with escapes */
    size_t arena_len, arena_cap;
    const char *err; /* why the parse failed (for tests and debugging) */
    int unsupported; /* failed on a limit of this reader, not on invalid JSON */
} jdoc;

#define J_MAX_DEPTH 200
#define J_MAX_KEYS 256

void jdoc_init(jdoc *d);
void jdoc_free(jdoc *d);
/* Parse buf[0:len] (whitespace allowed around one value). 0 on success. */
int jdoc_parse(jdoc *d, const char *buf, size_t len);

/* Object lookup: index of the value under key, or 0 when absent (node 0 is never a value of
 * an object). */
uint32_t j_get(const jdoc *d, uint32_t obj, const char *key, size_t klen);
#define J_GET(d, obj, lit) j_get((d), (obj), (lit), sizeof(lit) - 1)

static inline int j_is_str_eq(const jnode *n, const char *lit, size_t len)
{
    extern int memcmp(const void *, const void *, size_t);
    return n->type == J_STR && n->len == len && memcmp(n->s, lit, len) == 0;
}
#define J_STR_EQ(node, lit) j_is_str_eq((node), (lit), sizeof(lit) - 1)

/* Python truthiness of a JSON value. */
int j_truthy(const jnode *n);

#endif
