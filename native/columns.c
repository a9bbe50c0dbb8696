/* Arrow column builders: values, offsets and validity written by the fast path, handed to
 * pyarrow (large string data without a copy). */
#include "pyglue.h"

#include <stdlib.h>
#include <string.h>

const char *const COL_NAMES[N_COLS] = {
    "trace_id", "eval_run_id", "problem_id", "miner_hotkey", "validator_hotkey", "agent_version_id",
    "race_id", "suite_id", "phase", "status", "category", "difficulty", "query",
    "score", "reasoning_score", "reasoning_coef", "execution_time",
    "inference_total", "inference_failure_count", "n_steps", "n_tool_calls",
    "updated_at", "dialect", "day", "source_file", "source_line", "messages", "tools", "proxy_evidence",
    "structural_label", "structural_evidence", "updated_at_us", "stage", "reason", "detail", "raw_line"};
const char COL_KINDS[N_COLS + 1] = "SSSSSSIISSSSSFFFFIIIISSSSILLLSSISSSL";

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
int col_end(column *c, int valid)
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

int col_str(column *c, const char *s, size_t n, int valid)
{
    if (valid)
        buf_put(&c->data, s, n);
    return col_end(c, valid);
}

int col_i64(column *c, int64_t v, int valid)
{
    if (col_room(c))
        return -1;
    c->v[c->n] = valid ? v : 0;
    c->valid[c->n++] = (uint8_t)valid;
    c->nulls |= !valid;
    return 0;
}

int col_f64(column *c, double v, int valid)
{
    int64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    return col_i64(c, valid ? bits : 0, valid);
}

int col_null(column *c)
{
    return c->kind == 'S' || c->kind == 'L' ? col_end(c, 0) : col_i64(c, 0, 0);
}

void columns_reset(column *cols, int release)
{
    for (int k = 0; k < N_COLS; k++) {
        column *c = &cols[k];
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
PyObject *columns_export(column *cols)
{
    PyObject *out = PyList_New(N_COLS);
    if (!out)
        return NULL;
    for (int k = 0; k < N_COLS; k++) {
        column *c = &cols[k];
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

int columns_init_types(void)
{
    return PyType_Ready(&OwnedBufferType);
}
