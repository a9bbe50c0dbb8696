"""Rollout throughput (episodes/s) against the local oracle server, by client concurrency.

The oracle answers instantly, so without added latency the figure measures the client's own
cost per request (the openai client, JSON, the sandbox) and concurrency buys little; with
`--latency-ms` each request waits like a real endpoint's, and concurrency should scale
episodes/s almost linearly until the client's CPU cost binds. The server runs in its own
process (as a real endpoint would) unless `--in-process`.

    python benchmarks/rollout.py --latency-ms 20 --problems 30 --samples 4
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import sys
import time

from shopdistill_assets.agent import OraclePolicy, RolloutConfig, evaluate, serve, wait_ready
from shopdistill_assets.agent.server import serve_forever
from shopdistill_assets.sim.toy_world import toy_world


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server_main(port: int, latency_ms: float, seed: int, n_problems: int) -> None:
    catalog, problems = toy_world(seed, n_problems)
    serve_forever(OraclePolicy(problems, catalog), port=port, latency_ms=latency_ms)


def _start(latency_ms: float, args: argparse.Namespace, catalog, problems):
    """(base url, stop function) for an oracle server with the given per-request latency."""
    if args.in_process:
        server = serve(OraclePolicy(problems, catalog), latency_ms=latency_ms)
        return server.url, server.stop
    port = _free_port()
    proc = mp.get_context("spawn").Process(target=_server_main, args=(port, latency_ms, args.seed, args.problems),
                                           daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{port}/v1"
    if not wait_ready(url, timeout_s=60):
        proc.terminate()
        sys.exit("the oracle server did not come up")
    return url, lambda: (proc.terminate(), proc.join(5))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=20.0, help="added per-request latency (also runs 0)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--problems", type=int, default=30)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--in-process", action="store_true", help="server threads in this process (shares the GIL)")
    args = parser.parse_args(argv)

    catalog, problems = toy_world(args.seed, args.problems)
    episodes = args.problems * args.samples
    print(f"{episodes} episodes per run (3 requests each), oracle server "
          f"{'in-process' if args.in_process else 'in its own process'}")
    print("| latency ms | concurrency | wall s | episodes/s | requests/s | speedup vs c=1 | ASR |")
    print("|---|---|---|---|---|---|---|")
    for latency in sorted({0.0, args.latency_ms}):
        url, stop = _start(latency, args, catalog, problems)
        try:
            base = None
            for conc in args.concurrency:
                cfg = RolloutConfig(samples=args.samples, concurrency=conc, request_timeout_s=30.0)
                started = time.perf_counter()
                result = evaluate(url, "oracle", problems, catalog, cfg)
                wall = time.perf_counter() - started
                rate = episodes / wall
                base = base or rate
                requests = sum(ep.steps for ep in result.episodes)
                print(f"| {latency:.0f} | {conc} | {wall:.2f} | {rate:.1f} | {requests / wall:.0f} | "
                      f"{rate / base:.2f}x | {result.metrics['asr']:.3f} |", flush=True)
        finally:
            stop()


if __name__ == "__main__":
    main()
