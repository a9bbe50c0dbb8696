/* One line decided: read (record.c), classified (structural.c), gated (the reasoning gate
 * here, the format gate in gates.c); and the context's life cycle. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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
        if (sd_classify(c, row, st))
            out = LINE_DEFER;
        else if (row->label == LABEL_AGENTIC) {
            if (!row->reasoning_score.valid) {
                if (c->cfg.null_score_reject)
                    row->verdict.code = V_REASONING_MISSING;
            } else if (row->reasoning_score.v < c->cfg.min_reasoning_score - 1e-9) {
                row->verdict.code = V_REASONING_GATE;
                row->verdict.q = row->reasoning_score.v;
            }
            if (row->verdict.code == V_KEEP && sd_format_gate(c, row, tools_len, tools_digits))
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
