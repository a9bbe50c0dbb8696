/* Python glue: `Decider(config).decide(lines, source_file, first_line, day)` runs the fast
 * path over a batch of raw lines and hands back Arrow-ready column buffers for the rows it
 * decided, ledger rows for the empty dialogues it rejected, and the indices of the lines it
 * deferred to the Python reference. `dump(bytes)` exposes the JSON reader for tests. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "fastpath.h"

#define RAW_LINE_LIMIT 65536

/* ---- column builders ------------------------------------------------------------------------ */

/* The decided batch's columns, in DECIDED_SCHEMA order (native.py checks the names). Kinds:
 * 'S' string, 'L' large string, 'I' int64, 'F' float64. */
enum {
    C_TRACE_ID, C_EVAL_RUN_ID, C_PROBLEM_ID, C_MINER_HOTKEY, C_VALIDATOR_HOTKEY, C_AGENT_VERSION_ID,
    C_RACE_ID, C_SUITE_ID, C_PHASE, C_STATUS, C_CATEGORY, C_DIFFICULTY, C_QUERY,
    C_SCORE, C_REASONING_SCORE, C_REASONING_COEF, C_EXECUTION_TIME,
    C_INFERENCE_TOTAL, C_INFERENCE_FAILURE_COUNT, C_N_STEPS, C_N_TOOL_CALLS,
    C_UPDATED_AT, C_DIALECT, C_DAY, C_SOURCE_FILE, C_SOURCE_LINE, C_MESSAGES, C_TOOLS, C_PROXY_EVIDENCE,
    C_STRUCTURAL_LABEL, C_STRUCTURAL_EVIDENCE, C_UPDATED_AT_US, C_STAGE, C_REASON, C_DETAIL, C_RAW_LINE,
    N_COLS
};
static const char *const COL_NAMES[N_COLS] = {
    "trace_id", "eval_run_id", "problem_id", "miner_hotkey", "validator_hotkey", "agent_version_id",
    "race_id", "suite_id", "phase", "status", "category", "difficulty", "query",
    "score", "reasoning_score", "reasoning_coef", "execution_time",
    "inference_total", "inference_failure_count", "n_steps", "n_tool_calls",
    "updated_at", "dialect", "day", "source_file", "source_line", "messages", "tools", "proxy_evidence",
    "structural_label", "structural_evidence", "updated_at_us", "stage", "reason", "detail", "raw_line"};
static const char COL_KINDS[N_COLS + 1] = "SSSSSSIISSSSSFFFFIIIISSSSILLLSSISSSL";

typedef struct {
    char kind;
    buf_t data;   /* strings */
    int64_t *off; /* strings: n + 1 entries */
    int64_t *v;   /* numbers (doubles bit for bit) */
    uint8_t *valid;
    size_t n, cap;
    int nulls;
} column;

static int col_room(column *c)
{
    if (c->n + 2 <= c->cap)
        return 0;
    size_t cap = c->cap ? c->cap * 2 : 1024;
    int64_t *off = realloc(c->off, cap * sizeof(int64_t));
    if (!off)
        return -1;
    c->off = off;
    int64_t *v = realloc(c->v, cap * sizeof(int64_t));
    if (!v)
        return -1;
    c->v = v;
    uint8_t *valid = realloc(c->valid, cap);
    if (!valid)
        return -1;
    c->valid = valid;
    if (c->n == 0)
        c->off[0] = 0;
    c->cap = cap;
    return 0;
}

/* Close a string value written into c->data since the last row. */
static int col_end(column *c, int valid)
{
    if (col_room(c))
        return -1;
    if (!valid)
        c->data.len = (size_t)c->off[c->n];
    c->valid[c->n] = (uint8_t)valid;
    c->nulls |= !valid;
    c->off[c->n + 1] = (int64_t)c->data.len;
    c->n++;
    return c->data.oom ? -1 : 0;
}

static int col_str(column *c, const char *s, size_t n, int valid)
{
    if (valid)
        buf_put(&c->data, s, n);
    return col_end(c, valid);
}

static int col_i64(column *c, int64_t v, int valid)
{
    if (col_room(c))
        return -1;
    c->v[c->n] = valid ? v : 0;
    c->valid[c->n++] = (uint8_t)valid;
    c->nulls |= !valid;
    return 0;
}

static int col_f64(column *c, double v, int valid)
{
    int64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    return col_i64(c, valid ? bits : 0, valid);
}

static int col_null(column *c)
{
    return c->kind == 'S' || c->kind == 'L' ? col_end(c, 0) : col_i64(c, 0, 0);
}

typedef struct {
    PyObject_HEAD
    sd_ctx *ctx;
    sd_config cfg;
    PyObject *argument_error; /* gates.argument_error, for the detail of a malformed call */
    PyObject *null_score_detail;
    PyObject *stages;   /* reason -> stage */
    PyObject *fallback; /* the reference: (source_file, source_line, raw, day) -> decided row dict */
    column col[N_COLS];
} Decider;

/* ---- configuration -------------------------------------------------------------------------- */

static char *dup_utf8(PyObject *s, size_t *len)
{
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u)
        return NULL;
    char *out = malloc((size_t)n + 1);
    if (!out) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(out, u, (size_t)n + 1);
    if (len)
        *len = (size_t)n;
    return out;
}

static int get_num(PyObject *d, const char *key, double *out)
{
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v) {
        PyErr_Format(PyExc_KeyError, "config needs %s", key);
        return -1;
    }
    *out = PyFloat_AsDouble(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int get_i64(PyObject *d, const char *key, int64_t *out)
{
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v) {
        PyErr_Format(PyExc_KeyError, "config needs %s", key);
        return -1;
    }
    *out = PyLong_AsLongLong(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int opt_num(PyObject *v, int *has, double *out)
{
    *has = v != Py_None;
    if (*has)
        *out = PyFloat_AsDouble(v);
    return PyErr_Occurred() ? -1 : 0;
}

/* tool: (name, schema_json, catalogue, required, props); prop: (key, type, minLength, minimum,
 * maximum, pattern_id, enum) with None for absent parts. */
static int read_tool(PyObject *item, tool_spec *t)
{
    PyObject *name, *json, *required, *props;
    int catalogue;
    if (!PyArg_ParseTuple(item, "UUpOO", &name, &json, &catalogue, &required, &props))
        return -1;
    if (!(t->name = dup_utf8(name, &t->nlen)) || !(t->json = dup_utf8(json, &t->json_len)))
        return -1;
    t->json_digits = count_digits(t->json, t->json_len);
    t->catalogue = catalogue;
    t->n_req = (int)PyList_Size(required);
    t->req = calloc((size_t)t->n_req + 1, sizeof(char *));
    t->req_len = calloc((size_t)t->n_req + 1, sizeof(size_t));
    for (int k = 0; k < t->n_req; k++)
        if (!(t->req[k] = dup_utf8(PyList_GetItem(required, k), &t->req_len[k])))
            return -1;
    t->n_props = (int)PyList_Size(props);
    t->props = calloc((size_t)t->n_props + 1, sizeof(prop_spec));
    for (int k = 0; k < t->n_props; k++) {
        prop_spec *p = &t->props[k];
        PyObject *key, *minlen, *mn, *mx, *enums;
        if (!PyArg_ParseTuple(PyList_GetItem(props, k), "UiOOOiO", &key, &p->type, &minlen, &mn, &mx, &p->pattern,
                              &enums))
            return -1;
        if (!(p->key = dup_utf8(key, &p->klen)))
            return -1;
        p->has_minlen = minlen != Py_None;
        p->minlen = p->has_minlen ? PyLong_AsLongLong(minlen) : 0;
        if (opt_num(mn, &p->has_min, &p->min) || opt_num(mx, &p->has_max, &p->max))
            return -1;
        if (enums != Py_None) {
            p->n_enum = (int)PyList_Size(enums);
            p->enums = calloc((size_t)p->n_enum + 1, sizeof(char *));
            p->enum_len = calloc((size_t)p->n_enum + 1, sizeof(size_t));
            for (int j = 0; j < p->n_enum; j++)
                if (!(p->enums[j] = dup_utf8(PyList_GetItem(enums, j), &p->enum_len[j])))
                    return -1;
        }
    }
    return PyErr_Occurred() ? -1 : 0;
}

static int Decider_init(Decider *self, PyObject *args, PyObject *kwds)
{
    PyObject *cfg;
    static char *kwlist[] = {"config", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", kwlist, &PyDict_Type, &cfg))
        return -1;
    sd_config *c = &self->cfg;
    memset(c, 0, sizeof(*c));
    PyObject *tools = PyDict_GetItemString(cfg, "tools");
    PyObject *sp = PyDict_GetItemString(cfg, "system_prompt");
    if (!tools || !PyList_Check(tools) || PyList_Size(tools) > SD_MAX_TOOLS || !sp) {
        PyErr_SetString(PyExc_ValueError, "config needs tools (at most 32) and system_prompt");
        return -1;
    }
    c->n_tools = (int)PyList_Size(tools);
    for (int k = 0; k < c->n_tools; k++)
        if (read_tool(PyList_GetItem(tools, k), &c->tools[k]))
            return -1;
    if (!(c->system_prompt = dup_utf8(sp, &c->sp_len)))
        return -1;
    c->sp_digits = count_digits(c->system_prompt, c->sp_len);
    int64_t no_evidence, no_inference, null_reject, allow_extra;
    if (get_num(cfg, "search_excess_ratio", &c->search_excess_ratio) ||
        get_num(cfg, "classify_share", &c->classify_share) || get_num(cfg, "templated_share", &c->templated_share) ||
        get_i64(cfg, "search_excess_min", &c->search_excess_min) ||
        get_i64(cfg, "classify_max_tokens", &c->classify_max_tokens) ||
        get_i64(cfg, "short_completion_tokens", &c->short_completion_tokens) ||
        get_i64(cfg, "terse_think_chars", &c->terse_think_chars) ||
        get_i64(cfg, "templated_min_turns", &c->templated_min_turns) ||
        get_i64(cfg, "subtask_threshold", &c->subtask_threshold) ||
        get_i64(cfg, "no_evidence_label", &no_evidence) || get_i64(cfg, "no_inference_label", &no_inference) ||
        get_num(cfg, "min_reasoning_score", &c->min_reasoning_score) ||
        get_i64(cfg, "null_score_reject", &null_reject) || get_i64(cfg, "allow_extra", &allow_extra) ||
        get_i64(cfg, "max_tokens", &c->max_tokens) || get_i64(cfg, "max_line_bytes", &c->max_line_bytes) ||
        get_i64(cfg, "max_steps", &c->max_steps) || get_i64(cfg, "max_tool_calls", &c->max_tool_calls) ||
        get_i64(cfg, "max_query_chars", &c->max_query_chars))
        return -1;
    c->no_evidence_label = (int)no_evidence;
    c->no_inference_label = (int)no_inference;
    c->null_score_reject = (int)null_reject;
    c->allow_extra = (int)allow_extra;
    self->argument_error = PyDict_GetItemString(cfg, "argument_error");
    self->null_score_detail = PyDict_GetItemString(cfg, "null_score_detail");
    self->stages = PyDict_GetItemString(cfg, "stages");
    self->fallback = PyDict_GetItemString(cfg, "fallback");
    if (!self->argument_error || !self->null_score_detail || !self->stages || !self->fallback) {
        PyErr_SetString(PyExc_ValueError, "config needs argument_error, null_score_detail, stages and fallback");
        return -1;
    }
    Py_INCREF(self->fallback);
    for (int k = 0; k < N_COLS; k++)
        self->col[k].kind = COL_KINDS[k];
    Py_INCREF(self->argument_error);
    Py_INCREF(self->null_score_detail);
    Py_INCREF(self->stages);
    self->ctx = sd_new(c);
    if (!self->ctx) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void free_tool(tool_spec *t)
{
    free(t->name);
    free(t->json);
    for (int k = 0; k < t->n_req; k++)
        free(t->req[k]);
    free(t->req);
    free(t->req_len);
    for (int k = 0; k < t->n_props; k++) {
        free(t->props[k].key);
        for (int j = 0; j < t->props[k].n_enum; j++)
            free(t->props[k].enums[j]);
        free(t->props[k].enums);
        free(t->props[k].enum_len);
    }
    free(t->props);
}

static void reset_columns(Decider *self, int release)
{
    for (int k = 0; k < N_COLS; k++) {
        column *c = &self->col[k];
        c->n = 0;
        c->nulls = 0;
        c->data.len = 0;
        if (c->off)
            c->off[0] = 0;
        if (release) {
            buf_free(&c->data);
            free(c->off);
            free(c->v);
            free(c->valid);
            c->off = c->v = NULL;
            c->valid = NULL;
            c->cap = 0;
        }
    }
}

static void Decider_dealloc(Decider *self)
{
    sd_free(self->ctx);
    for (int k = 0; k < self->cfg.n_tools; k++)
        free_tool(&self->cfg.tools[k]);
    free(self->cfg.system_prompt);
    reset_columns(self, 1);
    Py_XDECREF(self->argument_error);
    Py_XDECREF(self->null_score_detail);
    Py_XDECREF(self->stages);
    Py_XDECREF(self->fallback);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ---- rejection details (the reference's f-strings, with Python's own repr and format) ------- */

static PyObject *str_of(sv v)
{
    return PyUnicode_DecodeUTF8(v.s, (Py_ssize_t)v.len, "strict");
}

static PyObject *repr_prefix(sv v, Py_ssize_t chars)
{
    PyObject *s = str_of(v);
    if (!s)
        return NULL;
    PyObject *cut = PyUnicode_Substring(s, 0, chars);
    Py_DECREF(s);
    if (!cut)
        return NULL;
    PyObject *r = PyObject_Repr(cut);
    Py_DECREF(cut);
    return r;
}

static PyObject *format_g(double q)
{
    PyObject *f = PyFloat_FromDouble(q);
    if (!f)
        return NULL;
    PyObject *spec = PyUnicode_FromString("g");
    PyObject *out = spec ? PyObject_Format(f, spec) : NULL;
    Py_XDECREF(spec);
    Py_DECREF(f);
    return out;
}

/* (reason, detail) of a verdict; detail may refer to the structural evidence text. */
static PyObject *verdict_detail(Decider *self, const verdict_t *v, const char **reason, sv evidence)
{
    PyObject *a = NULL, *b = NULL, *out = NULL;
    switch (v->code) {
    case V_NO_TOOL_CALLS:
        *reason = "no_tool_calls";
        return PyUnicode_FromString("no tool calls");
    case V_STRUCTURAL_UNCLEAR:
        *reason = "structural_unclear";
        return PyUnicode_FromString("no proxy calls recorded");
    case V_NO_INFERENCE:
        *reason = "no_inference";
        return str_of(evidence);
    case V_REASONING_GATE:
        *reason = "reasoning_gate";
        a = format_g(v->q);
        b = format_g(self->cfg.min_reasoning_score);
        if (a && b)
            out = PyUnicode_FromFormat("reasoning_score %U < %U", a, b);
        break;
    case V_REASONING_MISSING:
        *reason = "reasoning_missing";
        Py_INCREF(self->null_score_detail);
        return self->null_score_detail;
    case V_UNKNOWN_TOOL:
        *reason = "unknown_tool";
        a = repr_prefix(v->text, 60);
        if (a)
            out = PyUnicode_FromFormat("tool %U", a);
        break;
    case V_MALFORMED_ARGUMENTS: {
        *reason = "malformed_arguments";
        sv args = v->args;
        if (v->args_from_buf)
            args.s = sd_args_base(self->ctx) + (uintptr_t)v->args.s;
        a = str_of(v->text);
        b = str_of(args);
        PyObject *err = a && b ? PyObject_CallFunctionObjArgs(self->argument_error, a, b, NULL) : NULL;
        if (err && err != Py_None)
            out = PyUnicode_FromFormat("%U: %U", a, err);
        else if (err) /* the reference found nothing wrong: the fast path must not decide */
            PyErr_SetString(PyExc_AssertionError, "fast path and argument_error disagree");
        Py_XDECREF(err);
        break;
    }
    case V_UNPAIRED_TOOL_CALL:
        *reason = "unpaired_tool_call";
        a = repr_prefix(v->text, PY_SSIZE_T_MAX);
        if (a)
            out = PyUnicode_FromFormat("call %U has no result", a);
        break;
    case V_THINK_THEN_STOP:
        *reason = "think_then_stop";
        return PyUnicode_FromFormat("message %lld has no tool call and no content", (long long)v->n);
    case V_RECOMMEND_COUNT:
        *reason = "recommend_count";
        return PyUnicode_FromFormat("%lld recommend_product calls", (long long)v->n);
    case V_BAD_PRODUCT_IDS:
        *reason = "bad_product_ids";
        a = repr_prefix(v->text, 80);
        if (a)
            out = PyUnicode_FromFormat("product_ids=%U", a);
        break;
    case V_TOO_LONG:
        *reason = "too_long";
        return PyUnicode_FromFormat("%lld tokens > %lld", (long long)v->n, (long long)self->cfg.max_tokens);
    default:
        PyErr_SetString(PyExc_AssertionError, "unknown verdict");
        return NULL;
    }
    Py_XDECREF(a);
    Py_XDECREF(b);
    return out;
}

/* ---- one batch ------------------------------------------------------------------------------ */

static int add_opt(column *c, const opt_str *v)
{
    return col_str(c, v->s.s, v->s.len, v->valid);
}

static int add_pystr(column *c, PyObject *s)
{
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    return u ? col_str(c, u, (size_t)n, 1) : -1;
}

static const char *const LABELS[3] = {"agentic", "subtask", "reject"};
#define MISSING_US INT64_MIN

/* recency.updated_at_us of a canonical "YYYY-MM-DDTHH:MM:SSZ" (days from the civil date). */
static int64_t updated_at_us(const opt_str *t)
{
    if (!t->valid)
        return MISSING_US;
    const char *s = t->s.s;
#define D2(p) ((s[p] - '0') * 10 + (s[p + 1] - '0'))
    int64_t y = D2(0) * 100 + D2(2), m = D2(5), d = D2(8);
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400, yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t days = era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
    int64_t secs = days * 86400 + D2(11) * 3600 + D2(14) * 60 + D2(17);
#undef D2
    return secs * 1000000;
}

/* Every column of a decided trace row except the ones written in place. */
static int add_row(Decider *self, const row_t *r, PyObject *day, PyObject *file, long long line_no, size_t st_start)
{
    column *c = self->col;
    int rc = col_str(&c[C_TRACE_ID], r->trace_id, 18, 1) | add_opt(&c[C_EVAL_RUN_ID], &r->eval_run_id) |
             add_opt(&c[C_PROBLEM_ID], &r->problem_id) | add_opt(&c[C_MINER_HOTKEY], &r->miner_hotkey) |
             add_opt(&c[C_VALIDATOR_HOTKEY], &r->validator_hotkey) |
             add_opt(&c[C_AGENT_VERSION_ID], &r->agent_version_id) |
             col_i64(&c[C_RACE_ID], r->race_id.v, r->race_id.valid) |
             col_i64(&c[C_SUITE_ID], r->suite_id.v, r->suite_id.valid) | add_opt(&c[C_PHASE], &r->phase) |
             add_opt(&c[C_STATUS], &r->status) | add_opt(&c[C_CATEGORY], &r->category) |
             add_opt(&c[C_DIFFICULTY], &r->difficulty) | col_str(&c[C_QUERY], r->query.s, r->query.len, 1) |
             col_f64(&c[C_SCORE], r->score.v, r->score.valid) |
             col_f64(&c[C_REASONING_SCORE], r->reasoning_score.v, r->reasoning_score.valid) |
             col_f64(&c[C_REASONING_COEF], r->reasoning_coef.v, r->reasoning_coef.valid) |
             col_f64(&c[C_EXECUTION_TIME], r->execution_time.v, r->execution_time.valid) |
             col_i64(&c[C_INFERENCE_TOTAL], r->inference_total.v, r->inference_total.valid) |
             col_i64(&c[C_INFERENCE_FAILURE_COUNT], r->inference_failure_count.v, r->inference_failure_count.valid) |
             col_i64(&c[C_N_STEPS], r->n_steps, 1) | col_i64(&c[C_N_TOOL_CALLS], r->n_tool_calls, 1) |
             add_opt(&c[C_UPDATED_AT], &r->updated_at) | col_str(&c[C_DIALECT], "sn15.problem_run/v1", 19, 1) |
             add_pystr(&c[C_DAY], day) | add_pystr(&c[C_SOURCE_FILE], file) | col_i64(&c[C_SOURCE_LINE], line_no, 1) |
             col_end(&c[C_MESSAGES], 1) | col_end(&c[C_TOOLS], 1) | col_end(&c[C_PROXY_EVIDENCE], 1) |
             col_str(&c[C_STRUCTURAL_LABEL], LABELS[r->label], strlen(LABELS[r->label]), 1) |
             col_end(&c[C_STRUCTURAL_EVIDENCE], 1) | col_i64(&c[C_UPDATED_AT_US], updated_at_us(&r->updated_at), 1) |
             col_null(&c[C_RAW_LINE]);
    if (rc) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        return -1;
    }
    if (r->verdict.code == V_KEEP)
        return col_null(&c[C_STAGE]) | col_null(&c[C_REASON]) | col_null(&c[C_DETAIL]);
    const char *reason = NULL;
    column *ev = &c[C_STRUCTURAL_EVIDENCE];
    sv evidence = {ev->data.p + st_start, ev->data.len - st_start};
    PyObject *detail = verdict_detail(self, &r->verdict, &reason, evidence);
    if (!detail)
        return -1;
    PyObject *stage = PyDict_GetItemString(self->stages, reason);
    if (!stage) {
        Py_DECREF(detail);
        PyErr_Format(PyExc_KeyError, "no stage for %s", reason);
        return -1;
    }
    rc = add_pystr(&c[C_STAGE], stage) | col_str(&c[C_REASON], reason, strlen(reason), 1) |
         add_pystr(&c[C_DETAIL], detail);
    Py_DECREF(detail);
    return rc ? -1 : 0;
}

/* The ledger-shaped row of an empty dialogue (normalize.ledger_row with record_identity);
 * 1 when the reference should write it. */
static int add_empty_dialogue(Decider *self, const row_t *r, PyObject *day, PyObject *file, long long line_no,
                              const char *line, size_t len)
{
    column *c = self->col;
    PyObject *stage = PyDict_GetItemString(self->stages, "empty_dialogue");
    if (!stage) {
        PyErr_SetString(PyExc_KeyError, "no stage for empty_dialogue");
        return -1;
    }
    /* "status=<status or None>, no steps", built with memcpy: a status may hold NUL bytes */
    char detail[400];
    size_t dn = 0;
    const char *st = r->status_for_detail.valid ? r->status_for_detail.s.s : "None";
    size_t st_len = r->status_for_detail.valid ? r->status_for_detail.s.len : 4;
    if (st_len > 300)
        return 1;
    memcpy(detail, "status=", 7);
    dn = 7;
    memcpy(detail + dn, st, st_len);
    dn += st_len;
    memcpy(detail + dn, ", no steps", 10);
    dn += 10;
    int rc = 0;
    for (int k = 0; k < N_COLS; k++) {
        switch (k) {
        case C_TRACE_ID: rc |= col_str(&c[k], r->trace_id, 18, 1); break;
        case C_EVAL_RUN_ID: rc |= add_opt(&c[k], &r->eval_run_id); break;
        case C_PROBLEM_ID: rc |= add_opt(&c[k], &r->problem_id); break;
        case C_MINER_HOTKEY: rc |= add_opt(&c[k], &r->miner_hotkey); break;
        case C_DAY: rc |= add_pystr(&c[k], day); break;
        case C_SOURCE_FILE: rc |= add_pystr(&c[k], file); break;
        case C_SOURCE_LINE: rc |= col_i64(&c[k], line_no, 1); break;
        case C_STAGE: rc |= add_pystr(&c[k], stage); break;
        case C_REASON: rc |= col_str(&c[k], "empty_dialogue", 14, 1); break;
        case C_DETAIL: rc |= col_str(&c[k], detail, dn, 1); break;
        case C_RAW_LINE: rc |= col_str(&c[k], line, len, 1); break;
        default: rc |= col_null(&c[k]);
        }
    }
    if (rc && !PyErr_Occurred())
        PyErr_NoMemory();
    return rc ? -1 : 0;
}

/* A row decided by the Python reference (a dict keyed by column name). */
static int add_pyrow(Decider *self, PyObject *row)
{
    if (!PyDict_Check(row)) {
        PyErr_SetString(PyExc_TypeError, "the fallback must return a dict");
        return -1;
    }
    for (int k = 0; k < N_COLS; k++) {
        column *c = &self->col[k];
        PyObject *v = PyDict_GetItemString(row, COL_NAMES[k]);
        int rc;
        if (!v || v == Py_None) {
            rc = col_null(c);
        } else if (c->kind == 'S' || c->kind == 'L') {
            Py_ssize_t n;
            const char *u = PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, &n) : NULL;
            if (!u) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_TypeError, "%s must be str", COL_NAMES[k]);
                return -1;
            }
            rc = col_str(c, u, (size_t)n, 1);
        } else if (c->kind == 'I') {
            long long x = PyLong_AsLongLong(v);
            if (x == -1 && PyErr_Occurred())
                return -1;
            rc = col_i64(c, x, 1);
        } else {
            double x = PyFloat_AsDouble(v);
            if (x == -1.0 && PyErr_Occurred())
                return -1;
            rc = col_f64(c, x, 1);
        }
        if (rc) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

/* Memory handed to Arrow without a copy: a buffer-protocol object that frees it when the
 * last array using it goes. */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t len;
} OwnedBuffer;

static int OwnedBuffer_getbuffer(OwnedBuffer *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->p ? self->p : (char *)"", self->len, 1, flags);
}

static void OwnedBuffer_dealloc(OwnedBuffer *self)
{
    free(self->p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs OwnedBuffer_as_buffer = {(getbufferproc)OwnedBuffer_getbuffer, NULL};

static PyTypeObject OwnedBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shopdistill_assets.core._corpus_native.OwnedBuffer",
    .tp_basicsize = sizeof(OwnedBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)OwnedBuffer_dealloc,
    .tp_as_buffer = &OwnedBuffer_as_buffer,
    .tp_doc = "Bytes the fast path wrote, owned by the arrays built on them.",
};

/* Hand a column's string data over; the column gets a fresh buffer of the same capacity
 * (untouched pages cost nothing until written). */
static PyObject *take_data(column *c)
{
    OwnedBuffer *b = PyObject_New(OwnedBuffer, &OwnedBufferType);
    if (!b)
        return NULL;
    b->p = c->data.p;
    b->len = (Py_ssize_t)c->data.len;
    size_t cap = c->data.cap;
    c->data.p = cap ? malloc(cap) : NULL;
    c->data.cap = c->data.p ? cap : 0;
    c->data.len = 0;
    return (PyObject *)b;
}

static PyObject *bitmap(const uint8_t *valid, size_t n)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((n + 7) / 8));
    if (!out)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    memset(p, 0, (n + 7) / 8);
    for (size_t k = 0; k < n; k++)
        if (valid[k])
            p[k >> 3] |= (unsigned char)(1u << (k & 7));
    return out;
}

/* Per column (values or offsets, data or None, validity bitmap or None); string offsets are
 * int32 for 'S' columns, int64 for 'L' ones, as Arrow lays them out. */
static PyObject *export_columns(Decider *self)
{
    PyObject *out = PyList_New(N_COLS);
    if (!out)
        return NULL;
    for (int k = 0; k < N_COLS; k++) {
        column *c = &self->col[k];
        if (col_room(c)) {
            Py_DECREF(out);
            return PyErr_NoMemory();
        }
        PyObject *first = NULL, *data = NULL;
        if (c->kind == 'S') {
            if (c->data.len > INT32_MAX) {
                Py_DECREF(out);
                PyErr_SetString(PyExc_OverflowError, "string column over 2 GiB in one batch");
                return NULL;
            }
            first = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((c->n + 1) * sizeof(int32_t)));
            if (first) {
                int32_t *o = (int32_t *)PyBytes_AS_STRING(first);
                for (size_t j = 0; j <= c->n; j++)
                    o[j] = (int32_t)c->off[j];
            }
        } else if (c->kind == 'L') {
            first = PyBytes_FromStringAndSize((const char *)c->off, (Py_ssize_t)((c->n + 1) * sizeof(int64_t)));
        } else {
            first = PyBytes_FromStringAndSize((const char *)c->v, (Py_ssize_t)(c->n * sizeof(int64_t)));
        }
        if (c->kind == 'L' && c->data.len >= 65536)
            data = take_data(c);
        else if (c->kind == 'S' || c->kind == 'L')
            data = PyBytes_FromStringAndSize(c->data.p ? c->data.p : "", (Py_ssize_t)c->data.len);
        else
            data = Py_NewRef(Py_None);
        PyObject *valid = c->nulls ? bitmap(c->valid, c->n) : Py_NewRef(Py_None);
        PyObject *t = first && data && valid ? PyTuple_Pack(3, first, data, valid) : NULL;
        Py_XDECREF(first);
        Py_XDECREF(data);
        Py_XDECREF(valid);
        if (!t) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, k, t);
    }
    return out;
}

static PyObject *Decider_decide(Decider *self, PyObject *args)
{
    PyObject *lines, *file, *day;
    long long first_line;
    if (!PyArg_ParseTuple(args, "ULO!U", &file, &first_line, &PyList_Type, &lines, &day))
        return NULL;
    reset_columns(self, 0);
    PyObject *result = NULL;
    Py_ssize_t n = PyList_GET_SIZE(lines), fast = 0;
    column *c = self->col;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *raw = PyList_GET_ITEM(lines, i);
        if (!PyBytes_Check(raw)) {
            PyErr_SetString(PyExc_TypeError, "lines must be bytes");
            goto done;
        }
        const char *line = PyBytes_AS_STRING(raw);
        size_t len = (size_t)PyBytes_GET_SIZE(raw);
        long long line_no = first_line + i;
        row_t row;
        size_t st_start = c[C_STRUCTURAL_EVIDENCE].data.len;
        int out = sd_decide(self->ctx, line, len, &row, &c[C_MESSAGES].data, &c[C_PROXY_EVIDENCE].data,
                            &c[C_STRUCTURAL_EVIDENCE].data, &c[C_TOOLS].data);
        if (out == LINE_EMPTY_DIALOGUE && len > RAW_LINE_LIMIT)
            out = LINE_DEFER; /* the kept raw text would be cut, maybe mid-character: the reference's job */
        if (out == LINE_ROW) {
            if (add_row(self, &row, day, file, line_no, st_start))
                goto done;
            fast++;
            continue;
        }
        if (out == LINE_EMPTY_DIALOGUE) {
            int rc = add_empty_dialogue(self, &row, day, file, line_no, line, len);
            if (rc < 0)
                goto done;
            if (rc == 0) {
                fast++;
                continue;
            }
        }
        PyObject *line_obj = PyLong_FromLongLong(line_no);
        PyObject *decided = line_obj ? PyObject_CallFunctionObjArgs(self->fallback, file, line_obj, raw, day, NULL) : NULL;
        Py_XDECREF(line_obj);
        if (!decided)
            goto done;
        int rc = add_pyrow(self, decided);
        Py_DECREF(decided);
        if (rc)
            goto done;
    }
    PyObject *columns = export_columns(self);
    if (columns)
        result = Py_BuildValue("(Nnn)", columns, n, fast);
done:
    reset_columns(self, 0);
    return result;
}

static PyMethodDef Decider_methods[] = {
    {"decide", (PyCFunction)Decider_decide, METH_VARARGS,
     "decide(source_file, first_line, lines, day) -> (columns, n_rows, n_fast): one decided row per line"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject DeciderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "shopdistill_assets.core._corpus_native.Decider",
    .tp_basicsize = sizeof(Decider),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Decider_init,
    .tp_dealloc = (destructor)Decider_dealloc,
    .tp_methods = Decider_methods,
    .tp_doc = "The corpus fast path over batches of raw firehose lines.",
};

/* dump(data) -> (bytes as orjson.dumps(orjson.loads(data)) writes them, or None; why not; whether
 * that is a limit of this reader rather than invalid JSON). Tests compare it with orjson. */
static PyObject *dump(PyObject *mod, PyObject *arg)
{
    (void)mod;
    if (!PyBytes_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "bytes expected");
        return NULL;
    }
    jdoc d;
    jdoc_init(&d);
    buf_t b = {0};
    PyObject *out;
    if (jdoc_parse(&d, PyBytes_AS_STRING(arg), (size_t)PyBytes_GET_SIZE(arg)))
        out = Py_BuildValue("(OsO)", Py_None, d.err, d.unsupported ? Py_True : Py_False);
    else if (emit_value(&b, &d, 0) || b.oom)
        out = Py_BuildValue("(OsO)", Py_None, "a float this writer cannot reproduce", Py_True);
    else
        out = Py_BuildValue("(y#OO)", b.p ? b.p : "", (Py_ssize_t)b.len, Py_None, Py_False);
    jdoc_free(&d);
    buf_free(&b);
    return out;
}

static PyMethodDef module_methods[] = {
    {"dump", dump, METH_O, "dump(data) -> (orjson-style bytes or None, error or None, unsupported)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_corpus_native", "The corpus fast path (see shopdistill_assets/core/native.py).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__corpus_native(void)
{
    if (PyType_Ready(&DeciderType) < 0 || PyType_Ready(&OwnedBufferType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m)
        return NULL;
    PyObject *names = PyTuple_New(N_COLS);
    for (int k = 0; names && k < N_COLS; k++)
        PyTuple_SET_ITEM(names, k, PyUnicode_FromString(COL_NAMES[k]));
    if (!names || PyModule_AddObject(m, "COLUMNS", names) < 0) {
        Py_XDECREF(names);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&DeciderType);
    if (PyModule_AddObject(m, "Decider", (PyObject *)&DeciderType) < 0) {
        Py_DECREF(&DeciderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
