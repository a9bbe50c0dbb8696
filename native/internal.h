/* State shared by record.c (the reader) and decide.c (structural filter and gates). */
#ifndef SD_INTERNAL_H
#define SD_INTERNAL_H

#include <stdio.h>

#include "fastpath.h"

typedef struct {
    sv name;
    int tool; /* index into cfg.tools, -1 when unknown */
    sv cid;
    uint32_t params; /* node of `parameters` in the line, 0 when absent */
    int params_is_str;
    size_t args_off; /* arguments text in sd_ctx.args unless params_is_str */
    sv args;         /* .s valid only when params_is_str */
    uint32_t result; /* node of `result`, 0 when absent */
} call_t;

typedef struct {
    sv think, content;
    size_t think_cps; /* code points: len(think) in Python */
    size_t call_lo, call_hi;
} turn_t;

typedef struct {
    int mt_valid, ct_valid, response_format, emits, tools;
    int64_t mt, ct;
} infer_t;

typedef struct {
    size_t n_infer, n_search;
    int64_t other;
} step_ev_t;

struct sd_ctx {
    sd_config cfg;
    jdoc doc, adoc;
    call_t *calls;
    size_t n_calls, calls_cap;
    turn_t *turns;
    size_t n_turns, turns_cap;
    infer_t *infer;
    size_t n_infer, infer_cap;
    sv *search;
    size_t n_search, search_cap;
    step_ev_t *ev_steps;
    size_t n_ev_steps, ev_steps_cap;
    int64_t ev_kept, ev_dropped;
    buf_t args, result, idbuf, scratch, scratch2, shapes;
    size_t *shape_off, *shape_len, shape_cap;
    uint64_t *shape_hash;
    size_t tok_bytes, tok_digits, tok_parts, n_messages;
    uint32_t tools_used;
    const char *err;
};


int sd_read_primary(sd_ctx *c, const char *line, size_t len, row_t *row, buf_t *m, buf_t *ev);
/* One step's proxy calls appended to the evidence JSON and to c's structural counts. */
int sd_evidence_step(sd_ctx *c, const jdoc *d, uint32_t extra, buf_t *ev);
/* Label, verdict and structural evidence of a read trace; -1 to defer. */
int sd_classify(sd_ctx *c, row_t *row, buf_t *st);
/* The first format failure into row->verdict (V_KEEP when none); -1 to defer. */
int sd_format_gate(sd_ctx *c, row_t *row, size_t tools_len, size_t tools_digits);
/* Grow *p (of *cap items of `size` bytes) to hold `need`; -1 when out of memory. */
int sd_grow(void **p, size_t *cap, size_t need, size_t size);

#endif
