/* The fast path's configuration, read from the dict core/native.py builds from the same
 * sources as the reference (TOOL_SCHEMAS, SYSTEM_PROMPT, the structural and gate configs). */
#include "pyglue.h"

#include <stdlib.h>
#include <string.h>

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

int config_from_dict(PyObject *cfg, sd_config *c)
{
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

void config_free(sd_config *c)
{
    for (int k = 0; k < c->n_tools; k++)
        free_tool(&c->tools[k]);
    free(c->system_prompt);
    memset(c, 0, sizeof(*c));
}
