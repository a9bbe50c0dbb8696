/* The Python side of the fast path: Arrow column builders handed to pyarrow, and the
 * configuration read from the dict native.py builds. */
#ifndef SD_PYGLUE_H
#define SD_PYGLUE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "fastpath.h"

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
extern const char *const COL_NAMES[N_COLS];
extern const char COL_KINDS[N_COLS + 1];

typedef struct {
    char kind;
    buf_t data;   /* strings */
    int64_t *off; /* strings: n + 1 entries */
    int64_t *v;   /* numbers (doubles bit for bit) */
    uint8_t *valid;
    size_t n, cap;
    int nulls;
} column;

int col_end(column *c, int valid);
int col_str(column *c, const char *s, size_t n, int valid);
int col_i64(column *c, int64_t v, int valid);
int col_f64(column *c, double v, int valid);
int col_null(column *c);
void columns_reset(column *cols, int release);
/* Per column (values or offsets, data or None, validity bitmap or None), as a list. */
PyObject *columns_export(column *cols);
int columns_init_types(void);

int config_from_dict(PyObject *cfg, sd_config *c);
void config_free(sd_config *c);

#endif
