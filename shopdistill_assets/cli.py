"""The `shopdistill` command line."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

from shopdistill_assets.sim.arena import DEFAULT_MIX, ArenaConfig


def _mix(text: str) -> dict[str, float]:
    mix = dict(DEFAULT_MIX)
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key not in DEFAULT_MIX:
            raise argparse.ArgumentTypeError(f"unknown agent style {key!r}; styles: {', '.join(DEFAULT_MIX)}")
        mix[key] = float(value)
    return mix


def cmd_simulate(args: argparse.Namespace) -> int:
    from shopdistill_assets.sim import simulate

    cfg = ArenaConfig(
        out=Path(args.out), start_day=date.fromisoformat(args.start_day), days=args.days,
        traces_per_day=args.traces_per_day, seed=args.seed, mix=args.mix, n_products=args.products,
        corrupt_share=args.corrupt_share, reupload_share=args.reupload_share,
        other_dialect_share=args.other_dialect_share,
    )
    summary = simulate(cfg)
    print(json.dumps(summary, indent=1))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shopdistill", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="write a simulated SN15 arena (catalog, suites, firehose days)")
    sim.add_argument("--out", required=True, help="output folder")
    sim.add_argument("--start-day", default="2026-11-01", help="first day, YYYY-MM-DD")
    sim.add_argument("--days", type=int, default=1)
    sim.add_argument("--traces-per-day", type=int, default=1000)
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--mix", type=_mix, default=dict(DEFAULT_MIX),
                     help="agent style shares, e.g. agentic=0.6,subtask=0.2 (styles: %s)" % ", ".join(DEFAULT_MIX))
    sim.add_argument("--products", type=int, default=4000, help="catalog size")
    sim.add_argument("--corrupt-share", type=float, default=0.005)
    sim.add_argument("--reupload-share", type=float, default=0.01)
    sim.add_argument("--other-dialect-share", type=float, default=0.04)
    sim.set_defaults(func=cmd_simulate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
