/* The format gate (gates.py::format_gate) over a primary trace read by record.c: unknown tool,
 * arguments against the tool schemas, pairing, think-then-stop, one recommend with good ids,
 * the token estimate. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int is_d(char ch)
{
    return ch >= '0' && ch <= '9';
}

/* ^\d*(\.\d+)?-\d*(\.\d+)?$ over ASCII */
static int match_price(const char *s, size_t n)
{
    size_t i = 0;
    for (int half = 0; half < 2; half++) {
        while (i < n && is_d(s[i]))
            i++;
        if (i < n && s[i] == '.') {
            i++;
            if (i >= n || !is_d(s[i]))
                return 0;
            while (i < n && is_d(s[i]))
                i++;
        }
        if (half == 0) {
            if (i >= n || s[i] != '-')
                return 0;
            i++;
        }
    }
    return i == n;
}

/* ^(S)(,(S))*$ with S one of the services */
static int match_service(const char *s, size_t n)
{
    static const char *const names[] = {"official", "freeShipping", "COD", "flashsale", "default"};
    size_t i = 0;
    for (;;) {
        const char *comma = memchr(s + i, ',', n - i);
        size_t end = comma ? (size_t)(comma - s) : n, len = end - i;
        int ok = 0;
        for (int k = 0; k < 5 && !ok; k++)
            ok = strlen(names[k]) == len && memcmp(names[k], s + i, len) == 0;
        if (!ok)
            return 0;
        if (!comma)
            return 1;
        i = end + 1;
    }
}

/* gates._value_error: 0 valid, 1 invalid, -1 defer. */
static int value_error(const jnode *v, const prop_spec *p)
{
    if (p->type == T_STRING) {
        if (v->type != J_STR)
            return 1;
        if (p->has_minlen) {
            size_t a, z;
            py_strip(v->s, v->len, &a, &z);
            if ((int64_t)utf8_count(v->s + a, z - a) < p->minlen)
                return 1;
        }
        if (p->pattern != PAT_NONE) {
            if (p->pattern == PAT_UNKNOWN || !v->ascii)
                return -1; /* \d is Unicode-aware in Python's re */
            if (!(p->pattern == PAT_PRICE ? match_price(v->s, v->len) : match_service(v->s, v->len)))
                return 1;
        }
    } else if (p->type == T_INTEGER || p->type == T_NUMBER) {
        if (v->type != J_INT && (p->type == T_INTEGER || v->type != J_FLOAT))
            return 1;
        if (v->type == J_INT && v->big) {
            if (p->has_max)
                return 1;
        } else {
            double x = v->type == J_INT ? (double)v->i : v->d;
            if (v->type == J_INT && (v->i > (1ll << 53) || v->i < -(1ll << 53)))
                return -1; /* an int compared with a float bound beyond double precision */
            if ((p->has_min && x < p->min) || (p->has_max && x > p->max))
                return 1;
        }
    }
    if (p->n_enum) {
        if (v->type != J_STR)
            return 1;
        for (int k = 0; k < p->n_enum; k++)
            if (p->enum_len[k] == v->len && memcmp(p->enums[k], v->s, v->len) == 0)
                return 0;
        return 1;
    }
    return 0;
}

/* The parsed arguments of a call: (doc, node), node 0 of adoc for string arguments. 1: not a
 * JSON object; -1 defer. */
static int call_args(sd_ctx *c, const call_t *call, const jdoc **d, uint32_t *root)
{
    if (call->params_is_str) {
        if (jdoc_parse(&c->adoc, call->args.s, call->args.len))
            return c->adoc.unsupported ? -1 : 1;
        *d = &c->adoc;
        *root = 0;
    } else if (!call->params) {
        *d = NULL; /* "{}" */
        *root = 0;
        return 0;
    } else {
        *d = &c->doc;
        *root = call->params;
    }
    return (*d)->nodes[*root].type == J_OBJ ? 0 : 1;
}

static int argument_error(sd_ctx *c, const call_t *call)
{
    const tool_spec *t = &c->cfg.tools[call->tool];
    const jdoc *d;
    uint32_t root;
    int rc = call_args(c, call, &d, &root);
    if (rc)
        return rc;
    if (!d)
        return t->n_req > 0;
    for (int k = 0; k < t->n_req; k++) {
        uint32_t v = j_get(d, root, t->req[k], t->req_len[k]);
        if (!v || d->nodes[v].type == J_NULL)
            return 1;
    }
    for (uint32_t k = root + 1; k < d->nodes[root].next; k = d->nodes[k + 1].next) {
        const jnode *key = &d->nodes[k];
        const prop_spec *p = NULL;
        for (int j = 0; j < t->n_props && !p; j++)
            if (t->props[j].klen == key->len && memcmp(t->props[j].key, key->s, key->len) == 0)
                p = &t->props[j];
        if (!p) {
            if (c->cfg.allow_extra)
                continue;
            return 1;
        }
        if (d->nodes[k + 1].type == J_NULL)
            continue;
        rc = value_error(&d->nodes[k + 1], p);
        if (rc)
            return rc;
    }
    return 0;
}

/* gates.parse_product_ids of the recommend call's product_ids; 1 bad, 0 good, -1 defer. */
static int product_ids_bad(sd_ctx *c, const call_t *call, sv *ids)
{
    const jdoc *d;
    uint32_t root;
    if (call_args(c, call, &d, &root) || !d)
        return -1; /* cannot happen after the argument check passed */
    uint32_t v = J_GET(d, root, "product_ids");
    if (!v || d->nodes[v].type != J_STR)
        return -1;
    const char *s = d->nodes[v].s;
    size_t n = d->nodes[v].len, i = 0;
    ids->s = s;
    ids->len = n;
    for (;;) {
        const char *comma = memchr(s + i, ',', n - i);
        size_t end = comma ? (size_t)(comma - s) : n, a, z;
        py_strip(s + i, end - i, &a, &z);
        if (z == a || z - a > 20)
            return 1;
        for (size_t k = i + a; k < i + z; k++)
            if (!is_d(s[k]))
                return 1;
        if (!comma)
            return 0;
        i = end + 1;
    }
}

int sd_format_gate(sd_ctx *c, row_t *row, size_t tools_len, size_t tools_digits)
{
    verdict_t *v = &row->verdict;
    for (size_t k = 0; k < c->n_calls; k++) {
        if (c->calls[k].tool < 0) {
            v->code = V_UNKNOWN_TOOL;
            v->text = c->calls[k].name;
            return 0;
        }
    }
    for (size_t k = 0; k < c->n_calls; k++) {
        const call_t *call = &c->calls[k];
        int rc = argument_error(c, call);
        if (rc < 0)
            return -1;
        if (rc) {
            v->code = V_MALFORMED_ARGUMENTS;
            v->text = call->name;
            v->args_from_buf = !call->params_is_str;
            v->args.s = call->params_is_str ? call->args.s : (const char *)(uintptr_t)call->args_off;
            v->args.len = call->args.len;
            return 0;
        }
    }
    /* pairing: every call answered before the next assistant turn; at the end only terminate
     * calls may stay open (the reference names the first open call either way) */
    for (size_t t = 0; t < c->n_turns; t++) {
        const turn_t *turn = &c->turns[t];
        const call_t *open = NULL;
        int only_terminate = 1;
        for (size_t k = turn->call_lo; k < turn->call_hi; k++) {
            if (c->calls[k].result)
                continue;
            if (!open)
                open = &c->calls[k];
            only_terminate &= c->calls[k].name.len == 9 && memcmp(c->calls[k].name.s, "terminate", 9) == 0;
        }
        if (open && (t + 1 < c->n_turns || !only_terminate)) {
            v->code = V_UNPAIRED_TOOL_CALL;
            v->text = open->cid;
            return 0;
        }
    }
    size_t index = 2;
    for (size_t t = 0; t < c->n_turns; t++) {
        const turn_t *turn = &c->turns[t];
        if (turn->call_hi == turn->call_lo) {
            size_t a, z;
            py_strip(turn->content.s, turn->content.len, &a, &z);
            if (z == a) {
                v->code = V_THINK_THEN_STOP;
                v->n = (int64_t)index;
                return 0;
            }
        }
        index++;
        for (size_t k = turn->call_lo; k < turn->call_hi; k++)
            index += c->calls[k].result != 0;
    }
    const call_t *recommend = NULL;
    int64_t n_recommend = 0;
    for (size_t k = 0; k < c->n_calls; k++) {
        if (c->calls[k].name.len == 17 && memcmp(c->calls[k].name.s, "recommend_product", 17) == 0) {
            if (!recommend)
                recommend = &c->calls[k];
            n_recommend++;
        }
    }
    if (n_recommend != 1) {
        v->code = V_RECOMMEND_COUNT;
        v->n = n_recommend;
        return 0;
    }
    int rc = product_ids_bad(c, recommend, &v->text);
    if (rc < 0)
        return -1;
    if (rc) {
        v->code = V_BAD_PRODUCT_IDS;
        return 0;
    }
    size_t bytes = c->tok_bytes + tools_len + c->tok_parts; /* parts joined by "\n" */
    size_t digits = c->tok_digits + tools_digits;
    size_t other = bytes - digits;
    int64_t tokens = (int64_t)(digits + (other + 2) / 3) + 8 * (int64_t)(c->n_messages + 1) + 12 * (int64_t)c->n_calls;
    if (tokens > c->cfg.max_tokens) {
        v->code = V_TOO_LONG;
        v->n = tokens;
    }
    return 0;
}

