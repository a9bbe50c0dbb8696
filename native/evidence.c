/* Proxy evidence of a primary-dialect trace (dialects/proxy_evidence.py): per step, the
 * inference calls' summaries, the /search/ paths, a count of the rest; and what the structural
 * filter needs of them. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_PROXY_CALLS_KEPT 256
#define PROXY_CONTENT_HEAD 120
#define MAX_SEARCH_PATH_CHARS 128

int sd_grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t cap2 = *cap ? *cap : 64;
    while (cap2 < need)
        cap2 *= 2;
    void *q = realloc(*p, cap2 * size);
    if (!q)
        return -1;
    *p = q;
    *cap = cap2;
    return 0;
}

static int has_tool_text(const sd_ctx *c, const char *s, size_t n)
{
    if (find_bytes(s, n, "<tool_call>", 11))
        return 1;
    for (int t = 0; t < c->cfg.n_tools; t++)
        if (find_bytes(s, n, c->cfg.tools[t].name, c->cfg.tools[t].nlen))
            return 1;
    return 0;
}

static int emit_int_or_null(buf_t *b, const jdoc *d, uint32_t v)
{
    if (v && d->nodes[v].type == J_INT)
        return emit_value(b, d, v);
    BUF_LIT(b, "null");
    return 0;
}

static int inference_summary(sd_ctx *c, const jdoc *d, uint32_t call, buf_t *ev)
{
    infer_t inf = {0};
    BUF_LIT(ev, "{\"ts\":");
    if (emit_int_or_null(ev, d, J_GET(d, call, "timestamp")))
        return -1;
    uint32_t body = J_GET(d, call, "json_data");
    if (body && d->nodes[body].type == J_OBJ) {
        uint32_t mt = J_GET(d, body, "max_tokens");
        if (!mt || !j_truthy(&d->nodes[mt]))
            mt = J_GET(d, body, "max_completion_tokens");
        BUF_LIT(ev, ",\"max_tokens\":");
        if (emit_int_or_null(ev, d, mt))
            return -1;
        if (mt && d->nodes[mt].type == J_INT) {
            inf.mt_valid = 1;
            inf.mt = d->nodes[mt].big ? INT64_MAX : d->nodes[mt].i;
        }
        uint32_t tools = J_GET(d, body, "tools");
        if (tools && j_truthy(&d->nodes[tools])) {
            BUF_LIT(ev, ",\"tools\":true");
            inf.tools = 1;
        }
        uint32_t rf = J_GET(d, body, "response_format");
        if (rf && d->nodes[rf].type != J_NULL) {
            BUF_LIT(ev, ",\"response_format\":true");
            inf.response_format = 1;
        }
    }
    uint32_t resp = J_GET(d, call, "response");
    if (resp && d->nodes[resp].type == J_OBJ) {
        uint32_t usage = J_GET(d, resp, "usage");
        uint32_t ct = usage && d->nodes[usage].type == J_OBJ ? J_GET(d, usage, "completion_tokens") : 0;
        BUF_LIT(ev, ",\"completion_tokens\":");
        if (emit_int_or_null(ev, d, ct))
            return -1;
        if (ct && d->nodes[ct].type == J_INT) {
            inf.ct_valid = 1;
            inf.ct = d->nodes[ct].big ? INT64_MAX : d->nodes[ct].i;
        }
        uint32_t choices = J_GET(d, resp, "choices");
        uint32_t msg = 0;
        if (choices && d->nodes[choices].type == J_ARR && d->nodes[choices].n > 0 &&
            d->nodes[choices + 1].type == J_OBJ)
            msg = J_GET(d, choices + 1, "message");
        if (msg && d->nodes[msg].type == J_OBJ) {
            uint32_t content = J_GET(d, msg, "content");
            int have_emits = 0;
            if (content && d->nodes[content].type == J_STR) {
                const jnode *cn = &d->nodes[content];
                BUF_LIT(ev, ",\"content\":");
                emit_str(ev, cn->s, cn->ascii ? (cn->len < PROXY_CONTENT_HEAD ? cn->len : PROXY_CONTENT_HEAD)
                                              : utf8_prefix(cn->s, cn->len, PROXY_CONTENT_HEAD));
                inf.emits = has_tool_text(c, cn->s, cn->len);
                have_emits = 1;
            }
            uint32_t tc = J_GET(d, msg, "tool_calls");
            if (tc && j_truthy(&d->nodes[tc])) {
                inf.emits = 1;
                have_emits = 1;
            }
            if (have_emits) {
                if (inf.emits)
                    BUF_LIT(ev, ",\"emits_tool_call\":true");
                else
                    BUF_LIT(ev, ",\"emits_tool_call\":false");
            }
        }
    } else {
        uint32_t trunc = J_GET(d, call, "response_truncated");
        if (trunc && j_truthy(&d->nodes[trunc])) {
            BUF_LIT(ev, ",\"response_length\":");
            if (emit_int_or_null(ev, d, J_GET(d, call, "response_length")))
                return -1;
        }
    }
    buf_c(ev, '}');
    if (sd_grow((void **)&c->infer, &c->infer_cap, c->n_infer + 1, sizeof(infer_t)))
        return -1;
    c->infer[c->n_infer++] = inf;
    return 0;
}

int sd_evidence_step(sd_ctx *c, const jdoc *d, uint32_t extra, buf_t *ev)
{
    step_ev_t st = {0};
    if (c->n_ev_steps)
        buf_c(ev, ',');
    BUF_LIT(ev, "{\"ts\":");
    if (emit_int_or_null(ev, d, extra ? J_GET(d, extra, "timestamp") : 0))
        return -1;
    BUF_LIT(ev, ",\"inference\":[");
    uint32_t calls = extra ? J_GET(d, extra, "proxy_calls") : 0;
    size_t n_search = 0, search_at = c->n_search;
    if (calls && d->nodes[calls].type == J_ARR && d->nodes[calls].n > 0) {
        int64_t len = d->nodes[calls].n;
        int64_t room = MAX_PROXY_CALLS_KEPT - c->ev_kept;
        int64_t over = len - room;
        int64_t take = over > 0 ? (room > 0 ? room : 0) : len;
        int64_t bad = 0, seen = 0;
        size_t first_infer = c->n_infer;
        for (uint32_t k = calls + 1; seen < take; k = d->nodes[k].next, seen++) {
            uint32_t path = d->nodes[k].type == J_OBJ ? J_GET(d, k, "path") : 0;
            if (!path || d->nodes[path].type != J_STR) {
                bad++;
                continue;
            }
            const jnode *pn = &d->nodes[path];
            if (pn->len >= 8 && memcmp(pn->s, "/search/", 8) == 0) {
                const char *q = memchr(pn->s, '?', pn->len);
                size_t plen = q ? (size_t)(q - pn->s) : pn->len;
                size_t cps = q ? utf8_count(pn->s, plen) : pn->n;
                if (cps > MAX_SEARCH_PATH_CHARS)
                    plen = utf8_prefix(pn->s, plen, MAX_SEARCH_PATH_CHARS);
                if (sd_grow((void **)&c->search, &c->search_cap, c->n_search + 1, sizeof(sv)))
                    return -1;
                c->search[c->n_search].s = pn->s;
                c->search[c->n_search++].len = plen;
                n_search++;
            } else if (pn->len >= 10 && memcmp(pn->s, "/inference", 10) == 0) {
                if (c->n_infer != first_infer)
                    buf_c(ev, ',');
                if (inference_summary(c, d, k, ev))
                    return -1;
            } else {
                st.other++;
            }
        }
        st.n_infer = c->n_infer - first_infer;
        c->ev_kept += (over > 0 ? room : len) - bad;
        c->ev_dropped += over > 0 ? bad + over : bad;
    }
    BUF_LIT(ev, "],\"search\":[");
    for (size_t k = 0; k < n_search; k++) {
        if (k)
            buf_c(ev, ',');
        emit_str(ev, c->search[search_at + k].s, c->search[search_at + k].len);
    }
    BUF_LIT(ev, "],\"other\":");
    buf_i64(ev, st.other);
    buf_c(ev, '}');
    st.n_search = n_search;
    if (sd_grow((void **)&c->ev_steps, &c->ev_steps_cap, c->n_ev_steps + 1, sizeof(step_ev_t)))
        return -1;
    c->ev_steps[c->n_ev_steps++] = st;
    return 0;
}

