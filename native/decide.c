/* The structural filter (structural.py) and the reasoning and format gates (gates.py) over a
 * line read by record.c, and the context's life cycle. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- structural ---------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int points;
} signal_t;

static void put_signals(buf_t *b, const signal_t *sig, int n)
{
    buf_c(b, '{');
    for (int k = 0; k < n; k++) {
        if (k)
            buf_c(b, ',');
        buf_c(b, '"');
        buf_put(b, sig[k].name, strlen(sig[k].name));
        BUF_LIT(b, "\":");
        buf_i64(b, sig[k].points);
    }
    buf_c(b, '}');
}

static int grow_scratch(sd_ctx *c, size_t n)
{
    if (n <= c->shape_cap)
        return 0;
    size_t cap = n < 64 ? 64 : n * 2;
    size_t *off = realloc(c->shape_off, cap * sizeof(size_t));
    if (off)
        c->shape_off = off;
    size_t *len = realloc(c->shape_len, cap * sizeof(size_t));
    if (len)
        c->shape_len = len;
    uint64_t *h = realloc(c->shape_hash, cap * sizeof(uint64_t));
    if (h)
        c->shape_hash = h;
    if (!off || !len || !h)
        return -1;
    c->shape_cap = cap;
    return 0;
}

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* " ".join(think.translate(no digits).lower().split()) of an ASCII think, or its first
 * `max_words` words (structural._shape_head); -1 for a non-ASCII think (Unicode lower/split). */
static int think_shape(buf_t *out, const char *s, size_t n, size_t max_words)
{
    int in_word = 0;
    size_t words = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x80)
            return -1;
        if (ch >= '0' && ch <= '9')
            continue;
        int space = ch == ' ' || (ch >= 0x09 && ch <= 0x0d) || (ch >= 0x1c && ch <= 0x1f);
        if (space) {
            in_word = 0;
            continue;
        }
        if (!in_word) {
            if (words == max_words)
                return 0;
            if (words)
                buf_c(out, ' ');
            words++;
            in_word = 1;
        }
        buf_c(out, (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch));
    }
    return 0;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* The largest number of thinks that share one shape (or head, with max_words 8); -1 to defer. */
static int64_t most_common_shape(sd_ctx *c, size_t max_words)
{
    size_t n = c->n_turns;
    buf_t *b = &c->shapes;
    b->len = 0;
    if (grow_scratch(c, n))
        return -1;
    size_t *off = c->shape_off, *len = c->shape_len;
    uint64_t *h = c->shape_hash;
    for (size_t k = 0; k < n; k++) {
        off[k] = b->len;
        if (think_shape(b, c->turns[k].think.s, c->turns[k].think.len, max_words))
            return -1;
        len[k] = b->len - off[k];
    }
    if (b->oom)
        return -1;
    for (size_t k = 0; k < n; k++)
        h[k] = hash_bytes(b->p + off[k], len[k]);
    size_t best = 0;
    for (size_t a = 0; a < n; a++) {
        size_t same = 0;
        for (size_t z = 0; z < n; z++)
            same += h[z] == h[a] && len[z] == len[a] && memcmp(b->p + off[z], b->p + off[a], len[a]) == 0;
        if (same > best)
            best = same;
        if (best * 2 > n)
            break; /* a majority: no other shape can hold more */
    }
    return (int64_t)best;
}

/* terse_thinks and templated_thinks; -1 to defer (a non-ASCII think: Unicode lower/split). */
static int think_signals(sd_ctx *c, signal_t *sig, int *n_sig)
{
    size_t n = c->n_turns;
    if (!n)
        return 0;
    if (n > 4096 || grow_scratch(c, n))
        return -1;
    size_t *lens = c->shape_len;
    for (size_t k = 0; k < n; k++)
        lens[k] = c->turns[k].think_cps;
    qsort(lens, n, sizeof(size_t), cmp_size);
    double med = n % 2 ? (double)lens[n / 2] : ((double)lens[n / 2 - 1] + (double)lens[n / 2]) / 2.0;
    if (med < (double)c->cfg.terse_think_chars)
        sig[(*n_sig)++] = (signal_t){"terse_thinks", 1};
    if ((int64_t)n < c->cfg.templated_min_turns)
        return 0;
    /* heads first, as the reference does: a head is a function of the shape, so when no head
     * reaches the share, no shape does */
    int64_t heads = most_common_shape(c, 8);
    if (heads < 0)
        return -1;
    if ((double)heads / (double)n < c->cfg.templated_share)
        return 0;
    int64_t best = most_common_shape(c, (size_t)-1);
    if (best < 0)
        return -1;
    if ((double)best / (double)n >= c->cfg.templated_share)
        sig[(*n_sig)++] = (signal_t){"templated_thinks", 1};
    return 0;
}

static int classify(sd_ctx *c, row_t *row, buf_t *st)
{
    const sd_config *cfg = &c->cfg;
    if (c->n_calls == 0) {
        row->label = LABEL_REJECT;
        row->verdict.code = V_NO_TOOL_CALLS;
        BUF_LIT(st, "{\"basis\":\"dialogue\",\"note\":\"no tool calls\"}");
        return 0;
    }
    int64_t inference = 0, searches = 0, n_calls = 0, busy_steps = 0, classify_calls = 0;
    int any_emits = 0, any_tools = 0, busy0 = 0, busy_later = 0;
    for (size_t k = 0; k < c->n_ev_steps; k++) {
        const step_ev_t *s = &c->ev_steps[k];
        int busy = s->n_infer || s->n_search || s->other;
        inference += (int64_t)s->n_infer;
        searches += (int64_t)s->n_search;
        n_calls += (int64_t)(s->n_infer + s->n_search) + s->other;
        busy_steps += busy;
        if (k == 0)
            busy0 = busy;
        else
            busy_later |= busy;
    }
    if (!busy_steps && !c->ev_dropped) {
        row->label = cfg->no_evidence_label;
        if (row->label == LABEL_REJECT)
            row->verdict.code = V_STRUCTURAL_UNCLEAR;
        BUF_LIT(st, "{\"basis\":\"none\",\"note\":\"no proxy calls recorded\"}");
        return 0;
    }
    for (size_t k = 0; k < c->n_infer; k++) {
        const infer_t *f = &c->infer[k];
        classify_calls += (f->mt_valid && f->mt <= cfg->classify_max_tokens) || f->response_format ||
                          (f->ct_valid && f->ct < cfg->short_completion_tokens && !f->emits);
        any_emits |= f->emits;
        any_tools |= f->tools;
    }
    int64_t catalogue = 0;
    for (size_t k = 0; k < c->n_calls; k++)
        catalogue += c->calls[k].tool >= 0 && cfg->tools[c->calls[k].tool].catalogue;
    int64_t n_steps = c->n_turns > 1 ? (int64_t)c->n_turns : 1;
    signal_t sig[12];
    int n_sig = 0;
    if (c->n_ev_steps >= 2 && busy0 && !busy_later)
        sig[n_sig++] = (signal_t){"hung_on_step0", 2};
    if ((double)searches > cfg->search_excess_ratio * (double)(catalogue > 1 ? catalogue : 1) &&
        searches - catalogue >= cfg->search_excess_min)
        sig[n_sig++] = (signal_t){"search_excess", 2};
    else if (catalogue && llabs(searches - catalogue) <= 1)
        sig[n_sig++] = (signal_t){"search_matches", -1};
    if (inference) {
        if ((double)classify_calls / (double)inference >= cfg->classify_share)
            sig[n_sig++] = (signal_t){"classify_calls", 2};
        if (any_emits)
            sig[n_sig++] = (signal_t){"emits_tool_call", -2};
        if (any_tools)
            sig[n_sig++] = (signal_t){"native_tools", -2};
        double per_step = (double)inference / (double)n_steps;
        if (per_step >= 0.5 && per_step <= 2)
            sig[n_sig++] = (signal_t){"inference_per_step", -1};
        else if (per_step < 0.5)
            sig[n_sig++] = (signal_t){"few_inference", 1};
    } else if (searches) {
        sig[n_sig++] = (signal_t){"no_inference", 2};
    }
    char counts[256];
    snprintf(counts, sizeof(counts),
             "{\"proxy_calls\":%lld,\"inference_calls\":%lld,\"search_calls\":%lld,\"dialogue_catalogue_calls\":%lld,"
             "\"steps\":%lld,\"steps_with_proxy_calls\":%lld}",
             (long long)n_calls, (long long)inference, (long long)searches, (long long)catalogue,
             (long long)c->n_turns, (long long)busy_steps);
    if (inference == 0 && cfg->no_inference_label == LABEL_REJECT) {
        row->label = LABEL_REJECT;
        row->verdict.code = V_NO_INFERENCE;
        BUF_LIT(st, "{\"basis\":\"proxy\",\"signals\":");
        put_signals(st, sig, n_sig);
        BUF_LIT(st, ",\"counts\":");
        buf_put(st, counts, strlen(counts));
        buf_c(st, '}');
        return 0;
    }
    if (think_signals(c, sig, &n_sig))
        return -1;
    int64_t score = 0;
    for (int k = 0; k < n_sig; k++)
        score += sig[k].points;
    row->label = score >= cfg->subtask_threshold ? LABEL_SUBTASK : LABEL_AGENTIC;
    BUF_LIT(st, "{\"basis\":\"proxy\",\"score\":");
    buf_i64(st, score);
    BUF_LIT(st, ",\"signals\":");
    put_signals(st, sig, n_sig);
    BUF_LIT(st, ",\"counts\":");
    buf_put(st, counts, strlen(counts));
    buf_c(st, '}');
    return 0;
}

/* ---- format gate --------------------------------------------------------------------------- */

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

static int format_gate(sd_ctx *c, row_t *row, size_t tools_len, size_t tools_digits)
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

/* ---- one line ------------------------------------------------------------------------------- */

int sd_decide(sd_ctx *c, const char *line, size_t len, row_t *row, buf_t *m, buf_t *ev, buf_t *st, buf_t *tools)
{
    size_t m0 = m->len, ev0 = ev->len, st0 = st->len, t0 = tools->len;
    int out = sd_read_primary(c, line, len, row, m, ev);
    if (out == LINE_ROW) {
        size_t tools_len = 2, tools_digits = 0;
        int first = 1;
        buf_c(tools, '[');
        for (int t = 0; t < c->cfg.n_tools; t++) {
            if (!(c->tools_used & (1u << t)))
                continue;
            if (!first)
                buf_c(tools, ',');
            tools_len += c->cfg.tools[t].json_len + !first;
            tools_digits += c->cfg.tools[t].json_digits;
            buf_put(tools, c->cfg.tools[t].json, c->cfg.tools[t].json_len);
            first = 0;
        }
        buf_c(tools, ']');
        if (classify(c, row, st))
            out = LINE_DEFER;
        else if (row->label == LABEL_AGENTIC) {
            if (!row->reasoning_score.valid) {
                if (c->cfg.null_score_reject)
                    row->verdict.code = V_REASONING_MISSING;
            } else if (row->reasoning_score.v < c->cfg.min_reasoning_score - 1e-9) {
                row->verdict.code = V_REASONING_GATE;
                row->verdict.q = row->reasoning_score.v;
            }
            if (row->verdict.code == V_KEEP && format_gate(c, row, tools_len, tools_digits))
                out = LINE_DEFER;
        }
        if (m->oom || ev->oom || st->oom || tools->oom || c->shapes.oom)
            out = LINE_DEFER;
    }
    if (out == LINE_DEFER) {
        m->len = m0;
        ev->len = ev0;
        st->len = st0;
        tools->len = t0;
    }
    return out;
}

const char *sd_args_base(const sd_ctx *c)
{
    return c->args.p;
}

sd_ctx *sd_new(const sd_config *cfg)
{
    sd_ctx *c = calloc(1, sizeof(sd_ctx));
    if (!c)
        return NULL;
    c->cfg = *cfg;
    jdoc_init(&c->doc);
    jdoc_init(&c->adoc);
    return c;
}

void sd_free(sd_ctx *c)
{
    if (!c)
        return;
    jdoc_free(&c->doc);
    jdoc_free(&c->adoc);
    free(c->calls);
    free(c->turns);
    free(c->infer);
    free(c->search);
    free(c->ev_steps);
    buf_free(&c->args);
    buf_free(&c->result);
    buf_free(&c->idbuf);
    buf_free(&c->scratch);
    buf_free(&c->scratch2);
    buf_free(&c->shapes);
    free(c->shape_off);
    free(c->shape_len);
    free(c->shape_hash);
    free(c);
}
