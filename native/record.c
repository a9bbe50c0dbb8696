/* One primary-dialect line -> canonical row (messages, tools, proxy evidence): the C twin of
 * dialects/problem_run.py, dialogue.py and proxy_evidence.py. Where the reference would reject
 * the record (other than an empty dialogue), or where exactness is not certain, the line is
 * deferred to it. The structural filter and gates follow in decide.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "sha1.h"

#define PRIMARY "sn15.problem_run/v1"
#define MAX_ID_CHARS 256
#define MAX_CALL_ID_SUFFIX 64

/* ---- call ids: the record's own when usable and unused, else call_i_k, then _2, _3 ... ---- */

static int id_used(const sd_ctx *c, const char *s, size_t n)
{
    for (size_t k = 0; k < c->n_calls; k++) {
        const sv *id = &c->calls[k].cid;
        if (id->len == n && memcmp(id->s, s, n) == 0)
            return 1;
    }
    return 0;
}

/* Python's call_id(): a view of the chosen id (in the ids arena when built). -1 to defer. */
static int choose_call_id(sd_ctx *c, const jnode *hint, size_t step, size_t k, sv *out)
{
    char base[96];
    size_t blen;
    const char *bs;
    if (hint && hint->type == J_STR && hint->n > 0 && hint->n <= 64) {
        if (!id_used(c, hint->s, hint->len)) {
            out->s = hint->s;
            out->len = hint->len;
            return 0;
        }
        bs = hint->s;
        blen = hint->len;
    } else {
        blen = (size_t)snprintf(base, sizeof(base), "call_%zu_%zu", step, k);
        bs = base;
        if (!id_used(c, bs, blen))
            goto keep;
    }
    for (int n = 2; n <= MAX_CALL_ID_SUFFIX; n++) {
        char tmp[400];
        if (blen > 300)
            return -1;
        memcpy(tmp, bs, blen);
        size_t tl = blen + (size_t)snprintf(tmp + blen, sizeof(tmp) - blen, "_%d", n);
        if (!id_used(c, tmp, tl)) {
            bs = tmp;
            blen = tl;
            goto keep_tmp;
        }
        continue;
    keep_tmp:
        if (c->idbuf.len + blen > c->idbuf.cap)
            return -1; /* views into idbuf must not move: it is sized per line up front */
        out->s = c->idbuf.p + c->idbuf.len;
        out->len = blen;
        buf_put(&c->idbuf, bs, blen);
        return 0;
    }
    return -1;
keep:
    if (c->idbuf.len + blen > c->idbuf.cap)
        return -1;
    out->s = c->idbuf.p + c->idbuf.len;
    out->len = blen;
    buf_put(&c->idbuf, bs, blen);
    return 0;
}

/* ---- think fallback (dialogue._fallback_think / common.split_think) ------------------------- */

static int strip_tags(sd_ctx *c, const char *s, size_t n, sv *out)
{
    /* rc.replace("<think>", "").replace("</think>", "").strip() */
    buf_t *b = &c->scratch;
    b->len = 0;
    size_t i = 0;
    while (i < n) {
        if (n - i >= 7 && memcmp(s + i, "<think>", 7) == 0) {
            i += 7;
            continue;
        }
        buf_c(b, s[i++]);
    }
    /* the second replace runs over the result of the first */
    buf_t *b2 = &c->scratch2;
    b2->len = 0;
    i = 0;
    while (i < b->len) {
        if (b->len - i >= 8 && memcmp(b->p + i, "</think>", 8) == 0) {
            i += 8;
            continue;
        }
        buf_c(b2, b->p[i++]);
    }
    if (b->oom || b2->oom)
        return -1;
    size_t a, z;
    py_strip(b2->p, b2->len, &a, &z);
    /* copy into the ids arena so the view outlives the scratch buffers */
    if (c->idbuf.len + (z - a) > c->idbuf.cap)
        return -1;
    out->s = c->idbuf.p + c->idbuf.len;
    out->len = z - a;
    buf_put(&c->idbuf, b2->p + a, z - a);
    return 0;
}

static int fallback_think(sd_ctx *c, const jdoc *d, uint32_t completion, sv *out)
{
    uint32_t rc = J_GET(d, completion, "reasoning_content");
    if (rc && d->nodes[rc].type == J_STR) {
        size_t a, z;
        py_strip(d->nodes[rc].s, d->nodes[rc].len, &a, &z);
        if (z > a)
            return strip_tags(c, d->nodes[rc].s, d->nodes[rc].len, out);
    }
    out->s = "";
    out->len = 0;
    uint32_t ct = J_GET(d, completion, "content");
    if (!ct || d->nodes[ct].type != J_STR)
        return 0;
    const char *s = d->nodes[ct].s;
    size_t n = d->nodes[ct].len;
    const char *open = find_bytes(s, n, "<think>", 7);
    if (!open)
        return 0;
    size_t a, z;
    py_strip(s, (size_t)(open - s), &a, &z);
    if (z > a)
        return 0;
    const char *close = find_bytes(open, n - (size_t)(open - s), "</think>", 8);
    if (!close)
        return 0;
    const char *in = open + 7;
    if (close < in) /* "<think" and "</think>" cannot overlap so; kept for safety */
        return -1;
    py_strip(in, (size_t)(close - in), &a, &z);
    out->s = in + a;
    out->len = z - a;
    return 0;
}

/* ---- header --------------------------------------------------------------------------------- */

static int id_field(const jdoc *d, uint32_t obj, const char *key, size_t klen, opt_str *out)
{
    uint32_t v = j_get(d, obj, key, klen);
    out->valid = 0;
    if (!v || d->nodes[v].type == J_NULL)
        return 0;
    if (d->nodes[v].type != J_STR || d->nodes[v].n > MAX_ID_CHARS)
        return -1;
    out->valid = 1;
    out->s.s = d->nodes[v].s;
    out->s.len = d->nodes[v].len;
    return 0;
}

/* common._float: finite float, or int (not bool) as float; None otherwise. -1 to defer. */
static int py_float(const jdoc *d, uint32_t v, opt_f64 *out)
{
    out->valid = 0;
    if (!v)
        return 0;
    const jnode *n = &d->nodes[v];
    if (n->type == J_FLOAT) {
        if (!n->canon)
            return -1; /* a value read from text orjson would write otherwise: not certain */
        out->valid = 1;
        out->v = n->d;
    } else if (n->type == J_INT) {
        if (n->big)
            return -1;
        out->valid = 1;
        out->v = (double)n->i;
    }
    return 0;
}

static void py_int(const jdoc *d, uint32_t v, opt_i64 *out)
{
    out->valid = v && d->nodes[v].type == J_INT && !d->nodes[v].big;
    out->v = out->valid ? d->nodes[v].i : 0;
}

static void py_str(const jdoc *d, uint32_t v, opt_str *out)
{
    out->valid = v && d->nodes[v].type == J_STR;
    if (out->valid) {
        out->s.s = d->nodes[v].s;
        out->s.len = d->nodes[v].len;
    }
}

static int header(const jdoc *d, row_t *row)
{
    if (id_field(d, 0, "eval_run_id", 11, &row->eval_run_id) || id_field(d, 0, "problem_id", 10, &row->problem_id) ||
        id_field(d, 0, "miner_hotkey", 12, &row->miner_hotkey) ||
        id_field(d, 0, "validator_hotkey", 16, &row->validator_hotkey) ||
        id_field(d, 0, "agent_version_id", 16, &row->agent_version_id))
        return -1;
    if (!row->eval_run_id.valid || !row->eval_run_id.s.len || !row->problem_id.valid || !row->problem_id.s.len)
        return -1;
    static const char *const str_keys[2] = {"status", "phase"};
    for (int k = 0; k < 2; k++) {
        uint32_t v = j_get(d, 0, str_keys[k], strlen(str_keys[k]));
        if (v && d->nodes[v].type != J_NULL && d->nodes[v].type != J_STR)
            return -1;
    }
    static const char *const score_keys[2] = {"score", "reasoning_score"};
    for (int k = 0; k < 2; k++) {
        uint32_t v = j_get(d, 0, score_keys[k], strlen(score_keys[k]));
        if (!v || d->nodes[v].type == J_NULL)
            continue;
        opt_f64 f;
        if (py_float(d, v, &f) || !f.valid || !(f.v >= 0.0 && f.v <= 1.0))
            return -1;
    }
    uint32_t problem = J_GET(d, 0, "problem");
    if (problem && d->nodes[problem].type != J_NULL && d->nodes[problem].type != J_OBJ)
        return -1;
    return 0;
}

static int is_digit_c(char ch)
{
    return ch >= '0' && ch <= '9';
}

/* common.parse_updated_at, for the shapes that need no datetime: not a string or a length out
 * of 10..40 -> None; "YYYY-MM-DDTHH:MM:SSZ", valid -> itself. Anything else defers. */
static int updated_at(const jdoc *d, uint32_t v, opt_str *out)
{
    out->valid = 0;
    if (!v || d->nodes[v].type != J_STR || d->nodes[v].n < 10 || d->nodes[v].n > 40)
        return 0;
    const char *s = d->nodes[v].s;
    if (d->nodes[v].len != 20)
        return -1;
    static const char shape[] = "dddd-dd-ddTdd:dd:ddZ";
    for (int k = 0; k < 20; k++)
        if (shape[k] == 'd' ? !is_digit_c(s[k]) : s[k] != shape[k])
            return -1;
    int year = (s[0] - '0') * 1000 + (s[1] - '0') * 100 + (s[2] - '0') * 10 + (s[3] - '0');
    int month = (s[5] - '0') * 10 + (s[6] - '0'), day = (s[8] - '0') * 10 + (s[9] - '0');
    int hour = (s[11] - '0') * 10 + (s[12] - '0'), minute = (s[14] - '0') * 10 + (s[15] - '0');
    int second = (s[17] - '0') * 10 + (s[18] - '0');
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (year < 1 || month < 1 || month > 12 || hour > 23 || minute > 59 || second > 59)
        return -1;
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    if (day < 1 || day > mdays[month - 1] + (month == 2 && leap))
        return -1;
    out->valid = 1;
    out->s.s = s;
    out->s.len = 20;
    return 0;
}

static void trace_id(const opt_str *eval_run_id, const opt_str *problem_id, char out[18])
{
    static const char hex[] = "0123456789abcdef";
    sha1_ctx h;
    unsigned char digest[20];
    sha1_init(&h);
    sha1_update(&h, eval_run_id->s.s, eval_run_id->s.len);
    sha1_update(&h, "\x1f", 1);
    sha1_update(&h, problem_id->s.s, problem_id->s.len);
    sha1_final(&h, digest);
    out[0] = 't';
    out[1] = '_';
    for (int k = 0; k < 8; k++) {
        out[2 + 2 * k] = hex[digest[k] >> 4];
        out[3 + 2 * k] = hex[digest[k] & 15];
    }
}

/* ---- the dialogue -------------------------------------------------------------------------- */

static void token_text(sd_ctx *c, const char *s, size_t n)
{
    c->tok_bytes += n;
    c->tok_digits += count_digits(s, n);
    c->tok_parts++;
}

static int tool_index(const sd_ctx *c, const char *s, size_t n)
{
    for (int t = 0; t < c->cfg.n_tools; t++)
        if (c->cfg.tools[t].nlen == n && memcmp(c->cfg.tools[t].name, s, n) == 0)
            return t;
    return -1;
}

/* One step (problem_run._primary_step semantics; the reference's fast path agrees with it). */
static int dialogue_step(sd_ctx *c, const jdoc *d, uint32_t step, size_t i, buf_t *m)
{
    if (d->nodes[step].type != J_OBJ)
        return -1;
    uint32_t completion = J_GET(d, step, "completion");
    if (!completion || d->nodes[completion].type != J_OBJ)
        return -1;
    uint32_t message = J_GET(d, completion, "message");
    if (message && d->nodes[message].type == J_NULL)
        message = 0;
    if (message && d->nodes[message].type != J_OBJ)
        return -1;
    turn_t turn = {0};
    uint32_t think = message ? J_GET(d, message, "think") : 0;
    if (think && d->nodes[think].type == J_STR && d->nodes[think].len) {
        turn.think.s = d->nodes[think].s;
        turn.think.len = d->nodes[think].len;
        turn.think_cps = d->nodes[think].n;
    } else {
        if (think && d->nodes[think].type != J_NULL && d->nodes[think].type != J_STR)
            return -1; /* a non-string think: the reference rejects it (bad_field_type) */
        if (fallback_think(c, d, completion, &turn.think))
            return -1;
        turn.think_cps = utf8_count(turn.think.s, turn.think.len);
    }
    uint32_t response = message ? J_GET(d, message, "response") : 0;
    if (response && j_truthy(&d->nodes[response])) {
        if (d->nodes[response].type != J_STR)
            return -1;
        turn.content.s = d->nodes[response].s;
        turn.content.len = d->nodes[response].len;
    } else {
        turn.content.s = "";
    }
    uint32_t raw_calls = message ? J_GET(d, message, "tool_call") : 0;
    if (raw_calls && !j_truthy(&d->nodes[raw_calls]))
        raw_calls = 0;
    if (raw_calls && d->nodes[raw_calls].type != J_ARR)
        return -1;
    turn.call_lo = c->n_calls;
    size_t k = 0;
    if (raw_calls) {
        for (uint32_t item = raw_calls + 1; item < d->nodes[raw_calls].next; item = d->nodes[item].next, k++) {
            if (d->nodes[item].type != J_OBJ)
                return -1;
            uint32_t name = J_GET(d, item, "name");
            if (!name || d->nodes[name].type != J_STR || !d->nodes[name].len)
                return -1;
            call_t call = {0};
            call.name.s = d->nodes[name].s;
            call.name.len = d->nodes[name].len;
            call.tool = tool_index(c, call.name.s, call.name.len);
            uint32_t params = J_GET(d, item, "parameters");
            if (params && d->nodes[params].type == J_STR) {
                call.args.s = d->nodes[params].s;
                call.args.len = d->nodes[params].len;
                call.params = params;
                call.params_is_str = 1;
            } else {
                size_t at = c->args.len;
                if (!params)
                    BUF_LIT(&c->args, "{}");
                else if (emit_value(&c->args, d, params))
                    return -1;
                call.args_off = at;
                call.args.len = c->args.len - at;
                call.params = params;
            }
            uint32_t hint = J_GET(d, item, "tool_call_id");
            if (choose_call_id(c, hint ? &d->nodes[hint] : NULL, i, k, &call.cid))
                return -1;
            call.result = J_GET(d, item, "result");
            if ((int64_t)c->n_calls >= c->cfg.max_tool_calls ||
                sd_grow((void **)&c->calls, &c->calls_cap, c->n_calls + 1, sizeof(call_t)))
                return -1; /* many calls: the id checks here are quadratic; the reference decides */
            c->calls[c->n_calls++] = call;
        }
    }
    turn.call_hi = c->n_calls;
    /* the assistant message, then a tool message per call that carries a result */
    BUF_LIT(m, ",{\"role\":\"assistant\",\"content\":");
    emit_str(m, turn.content.s, turn.content.len);
    BUF_LIT(m, ",\"reasoning_content\":");
    emit_str(m, turn.think.s, turn.think.len);
    token_text(c, turn.content.s, turn.content.len);
    token_text(c, turn.think.s, turn.think.len);
    c->n_messages++;
    if (turn.call_hi > turn.call_lo) {
        BUF_LIT(m, ",\"tool_calls\":[");
        for (size_t j = turn.call_lo; j < turn.call_hi; j++) {
            call_t *call = &c->calls[j];
            const char *args = call->params_is_str ? call->args.s : c->args.p + call->args_off;
            if (j != turn.call_lo)
                buf_c(m, ',');
            BUF_LIT(m, "{\"id\":");
            emit_str(m, call->cid.s, call->cid.len);
            BUF_LIT(m, ",\"type\":\"function\",\"function\":{\"name\":");
            emit_str(m, call->name.s, call->name.len);
            BUF_LIT(m, ",\"arguments\":");
            emit_str(m, args, call->args.len);
            BUF_LIT(m, "}}");
            token_text(c, call->name.s, call->name.len);
            token_text(c, args, call->args.len);
            if (call->tool >= 0)
                c->tools_used |= 1u << call->tool;
        }
        buf_c(m, ']');
    }
    buf_c(m, '}');
    for (size_t j = turn.call_lo; j < turn.call_hi; j++) {
        call_t *call = &c->calls[j];
        if (!call->result)
            continue;
        const jnode *rn = &d->nodes[call->result];
        const char *text = rn->raw; /* orjson's text of the result: the raw text when canonical */
        size_t text_len = rn->raw_len;
        if (!rn->canon) {
            c->result.len = 0;
            if (emit_value(&c->result, d, call->result))
                return -1;
            text = c->result.p;
            text_len = c->result.len;
        }
        BUF_LIT(m, ",{\"role\":\"tool\",\"tool_call_id\":");
        emit_str(m, call->cid.s, call->cid.len);
        BUF_LIT(m, ",\"content\":");
        emit_str(m, text, text_len);
        buf_c(m, '}');
        token_text(c, text, text_len);
        token_text(c, "", 0);
        c->n_messages++;
    }
    if (sd_grow((void **)&c->turns, &c->turns_cap, c->n_turns + 1, sizeof(turn_t)))
        return -1;
    c->turns[c->n_turns++] = turn;
    return 0;
}

static void reset_line(sd_ctx *c, size_t line_len)
{
    c->n_calls = c->n_turns = c->n_infer = c->n_search = c->n_ev_steps = 0;
    c->ev_kept = c->ev_dropped = 0;
    c->args.len = c->result.len = 0;
    c->tok_bytes = c->tok_digits = c->tok_parts = 0;
    c->n_messages = 0;
    c->tools_used = 0;
    c->idbuf.len = 0;
    /* generated ids and stripped thinks are at most a little longer than the line; views into
     * idbuf must stay put, so it is sized once here */
    size_t need = 2 * line_len + 4096;
    if (c->idbuf.cap < need) {
        free(c->idbuf.p);
        c->idbuf.p = malloc(need);
        c->idbuf.cap = c->idbuf.p ? need : 0;
    }
}

int sd_read_primary(sd_ctx *c, const char *line, size_t len, row_t *row, buf_t *m, buf_t *ev)
{
    jdoc *d = &c->doc;
    reset_line(c, len);
    memset(row, 0, sizeof(*row));
    if ((int64_t)len > c->cfg.max_line_bytes || !c->idbuf.p || jdoc_parse(d, line, len))
        return LINE_DEFER;
    if (d->nodes[0].type != J_OBJ)
        return LINE_DEFER;
    uint32_t schema = J_GET(d, 0, "schema");
    if (schema && d->nodes[schema].type != J_NULL) {
        if (!J_STR_EQ(&d->nodes[schema], PRIMARY))
            return LINE_DEFER;
    } else if (!J_GET(d, 0, "eval_run_id") || !J_GET(d, 0, "dialogue")) {
        return LINE_DEFER;
    }
    if (header(d, row))
        return LINE_DEFER;
    uint32_t problem = J_GET(d, 0, "problem");
    if (problem && d->nodes[problem].type != J_OBJ)
        problem = 0;
    uint32_t dialogue = J_GET(d, 0, "dialogue");
    if (dialogue && d->nodes[dialogue].type != J_NULL && d->nodes[dialogue].type != J_ARR)
        return LINE_DEFER;
    if (!dialogue || d->nodes[dialogue].type == J_NULL || d->nodes[dialogue].n == 0) {
        py_str(d, J_GET(d, 0, "status"), &row->status_for_detail);
        trace_id(&row->eval_run_id, &row->problem_id, row->trace_id);
        row->empty_dialogue = 1;
        return LINE_EMPTY_DIALOGUE;
    }
    if ((int64_t)d->nodes[dialogue].n > c->cfg.max_steps)
        return LINE_DEFER; /* over_limit */
    uint32_t q = problem ? J_GET(d, problem, "query") : 0;
    if (!q || d->nodes[q].type != J_STR || !d->nodes[q].len) {
        uint32_t first = dialogue + 1, extra = 0;
        if (d->nodes[first].type == J_OBJ)
            extra = J_GET(d, first, "extra_info");
        q = extra && d->nodes[extra].type == J_OBJ ? J_GET(d, extra, "query") : 0;
        if (!q || d->nodes[q].type != J_STR || !d->nodes[q].len)
            return LINE_DEFER; /* missing_query */
    }
    row->query.s = d->nodes[q].s;
    row->query.len = d->nodes[q].len;
    size_t qa, qz;
    py_strip(row->query.s, row->query.len, &qa, &qz);
    if (qz == qa || (int64_t)d->nodes[q].n > c->cfg.max_query_chars)
        return LINE_DEFER; /* missing_query, over_limit */

    /* messages: system, user, then the steps */
    BUF_LIT(m, "[{\"role\":\"system\",\"content\":");
    emit_str(m, c->cfg.system_prompt, c->cfg.sp_len);
    BUF_LIT(m, "},{\"role\":\"user\",\"content\":");
    emit_str(m, row->query.s, row->query.len);
    buf_c(m, '}');
    c->tok_bytes += c->cfg.sp_len + row->query.len;
    c->tok_digits += c->cfg.sp_digits + count_digits(row->query.s, row->query.len);
    c->tok_parts += 4; /* system content and its empty think; user content and its empty think */
    c->n_messages = 2;
    BUF_LIT(ev, "{\"steps\":[");
    size_t i = 0;
    for (uint32_t step = dialogue + 1; step < d->nodes[dialogue].next; step = d->nodes[step].next, i++) {
        if (dialogue_step(c, d, step, i, m))
            return LINE_DEFER;
        uint32_t extra = J_GET(d, step, "extra_info");
        if (extra && d->nodes[extra].type != J_OBJ)
            extra = 0;
        if (sd_evidence_step(c, d, extra, ev))
            return LINE_DEFER;
    }
    buf_c(m, ']');
    BUF_LIT(ev, "],\"dropped\":");
    buf_i64(ev, c->ev_dropped);
    buf_c(ev, '}');
    if (m->oom || ev->oom || c->args.oom || c->result.oom || c->idbuf.oom)
        return LINE_DEFER;

    trace_id(&row->eval_run_id, &row->problem_id, row->trace_id);
    py_int(d, J_GET(d, 0, "race_id"), &row->race_id);
    py_int(d, J_GET(d, 0, "suite_id"), &row->suite_id);
    py_int(d, J_GET(d, 0, "inference_total"), &row->inference_total);
    py_int(d, J_GET(d, 0, "inference_failure_count"), &row->inference_failure_count);
    py_str(d, J_GET(d, 0, "phase"), &row->phase);
    py_str(d, J_GET(d, 0, "status"), &row->status);
    if (problem) {
        py_str(d, J_GET(d, problem, "category"), &row->category);
        py_str(d, J_GET(d, problem, "difficulty"), &row->difficulty);
    }
    if (py_float(d, J_GET(d, 0, "score"), &row->score) ||
        py_float(d, J_GET(d, 0, "reasoning_score"), &row->reasoning_score) ||
        py_float(d, J_GET(d, 0, "execution_time"), &row->execution_time))
        return LINE_DEFER;
    if (row->reasoning_score.valid) {
        double qv = row->reasoning_score.v;
        row->reasoning_coef.valid = 1;
        row->reasoning_coef.v = qv >= 0.8 ? 1.0 : 0.3 + 0.875 * qv;
    }
    if (updated_at(d, J_GET(d, 0, "updated_at"), &row->updated_at))
        return LINE_DEFER;
    row->n_steps = (int64_t)c->n_turns;
    row->n_tool_calls = (int64_t)c->n_calls;
    return LINE_ROW;
}
