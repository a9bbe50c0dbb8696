/* Python glue: `Decider(config).decide(lines, source_file, first_line, day)` runs the fast
 * path over a batch of raw lines and hands back Arrow-ready column buffers for the rows it
 * decided, ledger rows for the empty dialogues it rejected, and the indices of the lines it
 * deferred to the Python reference. `dump(bytes)` exposes the JSON reader for tests. */
#include "pyglue.h"

#include <stdlib.h>
#include <string.h>


#define RAW_LINE_LIMIT 65536

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

static int Decider_init(Decider *self, PyObject *args, PyObject *kwds)
{
    PyObject *cfg;
    static char *kwlist[] = {"config", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", kwlist, &PyDict_Type, &cfg))
        return -1;
    if (config_from_dict(cfg, &self->cfg))
        return -1;
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
    self->ctx = sd_new(&self->cfg);
    if (!self->ctx) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void Decider_dealloc(Decider *self)
{
    sd_free(self->ctx);
    config_free(&self->cfg);
    columns_reset(self->col, 1);
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

static PyObject *Decider_decide(Decider *self, PyObject *args)
{
    PyObject *lines, *file, *day;
    long long first_line;
    if (!PyArg_ParseTuple(args, "ULO!U", &file, &first_line, &PyList_Type, &lines, &day))
        return NULL;
    columns_reset(self->col, 0);
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
    PyObject *columns = columns_export(self->col);
    if (columns)
        result = Py_BuildValue("(Nnn)", columns, n, fast);
done:
    columns_reset(self->col, 0);
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
    if (PyType_Ready(&DeciderType) < 0 || columns_init_types() < 0)
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
