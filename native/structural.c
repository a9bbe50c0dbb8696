/* The structural filter (structural.py): agentic, sub-task or reject from the proxy evidence
 * and the thinks, with the evidence JSON the reference writes. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

int sd_classify(sd_ctx *c, row_t *row, buf_t *st)
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

