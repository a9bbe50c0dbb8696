/* The corpus fast path: one firehose line of the primary dialect -> its canonical row, the
 * structural decision and the gate verdict, exactly as the Python reference decides them
 * (shopdistill_assets/core: dialects/problem_run.py, dialogue.py, proxy_evidence.py,
 * structural.py, gates.py). Whatever it is not sure of, it defers to that reference. */
#ifndef SD_FASTPATH_H
#define SD_FASTPATH_H

#include "json.h"
#include "text.h"

#define SD_MAX_TOOLS 32

enum { PAT_NONE = 0, PAT_PRICE = 1, PAT_SERVICE = 2, PAT_UNKNOWN = 3 };
enum { T_ANY = 0, T_STRING, T_INTEGER, T_NUMBER };

typedef struct {
    char *key;
    size_t klen;
    int type, pattern;
    int has_minlen, has_min, has_max;
    int64_t minlen;
    double min, max;
    int n_enum;
    char **enums;
    size_t *enum_len;
} prop_spec;

typedef struct {
    char *name;
    size_t nlen;
    int n_req, n_props;
    char **req;
    size_t *req_len;
    prop_spec *props;
    char *json; /* its schema as orjson writes it (the tools column) */
    size_t json_len, json_digits;
    int catalogue;
} tool_spec;

enum { LABEL_AGENTIC = 0, LABEL_SUBTASK = 1, LABEL_REJECT = 2 };

typedef struct {
    int n_tools;
    tool_spec tools[SD_MAX_TOOLS];
    char *system_prompt;
    size_t sp_len, sp_digits;
    /* structural */
    double search_excess_ratio, classify_share, templated_share;
    int64_t search_excess_min, classify_max_tokens, short_completion_tokens, terse_think_chars;
    int64_t templated_min_turns, subtask_threshold;
    int no_evidence_label, no_inference_label;
    /* gates */
    double min_reasoning_score;
    int primary_judged, null_score_reject, allow_extra;
    int64_t max_tokens;
    /* the reference's per-record work limits: beyond them it rejects (over_limit), so defer */
    int64_t max_line_bytes, max_steps, max_tool_calls, max_query_chars;
} sd_config;

/* Why a row stops at the structural filter or a gate; module.c writes the detail text. */
enum {
    V_KEEP = 0,
    V_NO_TOOL_CALLS, V_STRUCTURAL_UNCLEAR, V_NO_INFERENCE,
    V_REASONING_GATE, V_REASONING_MISSING,
    V_UNKNOWN_TOOL, V_MALFORMED_ARGUMENTS, V_UNPAIRED_TOOL_CALL, V_THINK_THEN_STOP,
    V_RECOMMEND_COUNT, V_BAD_PRODUCT_IDS, V_TOO_LONG,
};

typedef struct {
    const char *s;
    size_t len;
} sv;

typedef struct {
    int code;
    double q;          /* reasoning score */
    int64_t n;         /* message index, recommend count, tokens */
    sv text;           /* tool name, call id, product ids */
    sv args;           /* malformed: the arguments text */
    int args_from_buf; /* args.s is an offset into the arguments buffer */
} verdict_t;

/* A nullable column value. */
typedef struct {
    int valid;
    sv s;
} opt_str;
typedef struct {
    int valid;
    int64_t v;
} opt_i64;
typedef struct {
    int valid;
    double v;
} opt_f64;

/* Everything one decided line yields besides the big JSON columns (written in place). */
typedef struct {
    char trace_id[18];
    opt_str eval_run_id, problem_id, miner_hotkey, validator_hotkey, agent_version_id;
    opt_i64 race_id, suite_id, inference_total, inference_failure_count;
    opt_str phase, status, category, difficulty;
    sv query;
    opt_f64 score, reasoning_score, reasoning_coef, execution_time;
    int64_t n_steps, n_tool_calls;
    opt_str updated_at;
    int label;
    verdict_t verdict;
    /* a normalize-stage rejection (empty_dialogue) instead of a row */
    int empty_dialogue;
    opt_str status_for_detail;
} row_t;

typedef struct sd_ctx sd_ctx;

/* Outcomes of one line. */
enum { LINE_DEFER = 0, LINE_ROW = 1, LINE_EMPTY_DIALOGUE = 2 };

sd_ctx *sd_new(const sd_config *cfg);
void sd_free(sd_ctx *c);
/* Decide one line. For LINE_ROW, messages / proxy evidence / structural evidence / tools were
 * appended to the given buffers (callers roll back on LINE_DEFER); *row holds the rest, with
 * views into the context valid until the next call. */
int sd_decide(sd_ctx *c, const char *line, size_t len, row_t *row, buf_t *messages, buf_t *evidence,
              buf_t *structural, buf_t *tools);
/* The arguments buffer views of verdict_t.args point into. */
const char *sd_args_base(const sd_ctx *c);
const char *sd_last_error(const sd_ctx *c);

#endif
