#!/usr/bin/python3
"""Figures for docs/deployment.md and docs/benchmarks.md ("Replicas"), on this machine:

  failover    32 sessions x 60 turns through nginx over 3 replicas; kill -9 the replica holding the
              most sessions after 40% of the turns. Failover time per moved session = kill -> its
              first acknowledged turn (clients retry every 0.2 s); acknowledged turns lost.
  resume      the same kill under steady-loadtest --retries 0 (32 sessions x 20 turns, cut streams
              resumed: --resume 3): failed turns (goal 0), calls resumed, and failover time per
              moved session = kill -> its first acknowledged turn, over ROUNDS runs
  store       per-turn latency of one replica with --session-dir vs --session-store redis://
              (steady-loadtest --sessions 8 --turns 25, median over ROUNDS interleaved rounds)
  throughput  steady-loadtest closed loop (concurrency 16, 400 ephemeral requests, spread by nginx)
              through nginx over 1 and over 3 replicas, interleaved rounds; on a 2-core machine the
              replicas share the same cores

Usage: tools/bench/replicas_bench.py [--rounds N] [--lease-ms MS] [--only PART...]   (from the source root, after the
build; needs redis-server, nginx and steady-gateway: scripts/install-deps.sh)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests/python"))
import replicas  # noqa: E402
import replicas_test  # noqa: E402
import steady_grpc  # noqa: E402

BIN = os.path.join(ROOT, "build/bin")


def percentile(values, p):
    return replicas_test.percentile(values, p)


def failover(work, lease_ms, runs):
    times, lost, moved_total = [], 0, 0
    for run in range(runs):
        run_work = os.path.join(work, "failover%d" % run)
        os.makedirs(run_work)
        with replicas.Topology(BIN, ROOT, run_work, replicas=3, lease_ms=lease_ms, gateway=False) as t:
            killed, moved = {}, []
            # 60 turns a session, so the kill lands well inside the load.
            during, pause = replicas_test.kill_busiest(t, moved, killed, turns=60)
            client, loads = replicas_test.run_load(t, t.nginx_addr, 60, 0.2, replicas_test.retryable,
                                                   during, prefix="b%d-" % run, max_retries=100, pause=pause)
            for l in loads:
                final = client.get(l.sid).position
                lost += final < l.position  # a position below the last acknowledged one: lost turns
            times += [l.first_ok_after["kill"] - killed["t"] for l in moved if "kill" in l.first_ok_after]
            moved_total += len(moved)
    return {"runs": runs, "moved_sessions": moved_total, "lease_ms": lease_ms,
            "failover_p50_s": percentile(times, 50), "failover_p99_s": percentile(times, 99),
            "sessions_with_lost_turns": lost}


def resume_failover(work, lease_ms, runs):
    times, failed, resumed, moved_total = [], 0, 0, 0
    for run in range(runs):
        run_work = os.path.join(work, "resume%d" % run)
        os.makedirs(run_work)
        with replicas.Topology(BIN, ROOT, run_work, replicas=3, lease_ms=lease_ms, gateway=False) as t:
            problems = []
            report, victim, killed, holders = replicas_test.loadtest_kill(t, "loadtest.json", ["--retries", "0"],
                                                                          problems)
            if not report:
                raise RuntimeError("; ".join(problems))
            t0 = report["summary"]["start_unix_s"]
            moved = {int(sid.rsplit("-", 1)[1]) for sid, h in holders.items() if h == victim}
            first = {}
            for r in report["requests"]:
                done = t0 + r["start_s"] + r["e2e_ms"] / 1e3
                if r["code"] == "OK" and r["session"] in moved and done > killed:
                    first[r["session"]] = min(first.get(r["session"], 1e9), done - killed)
            times += list(first.values())
            failed += report["summary"]["failed"]
            resumed += report["summary"]["resumed"]
            moved_total += len(moved)
    return {"runs": runs, "moved_sessions": moved_total, "lease_ms": lease_ms, "failed_turns": failed,
            "resumed_calls": resumed, "failover_p50_s": percentile(times, 50),
            "failover_p99_s": percentile(times, 99)}


def loadtest(addr, args, out):
    subprocess.run([os.path.join(BIN, "steady-loadtest"), "--addr", addr, "--json", out] + args, check=True,
                   stdout=subprocess.DEVNULL)
    return json.load(open(out))["summary"]


def store_cost(work, rounds):
    rows = {"directory": [], "redis": []}
    os.makedirs(os.path.join(work, "store"))
    t = replicas.Topology(BIN, ROOT, os.path.join(work, "store"), replicas=0, gateway=False)
    try:
        t.start_redis()
        for r in range(rounds):
            for kind in ("directory", "redis"):
                store = (["--session-dir", os.path.join(work, "store", "dir%d" % r)] if kind == "directory"
                         else ["--session-store", t.redis_url])
                server = steady_grpc.Server(BIN, os.path.join(work, "store-%s.log" % kind),
                                            ["--model", t.model] + store)
                try:
                    rows[kind].append(loadtest("127.0.0.1:%d" % server.port,
                                               ["--sessions", "8", "--turns", "25", "--prompt-tokens", "uniform:32:96",
                                                "--output-tokens", "uniform:8:24", "--seed", str(r)],
                                               os.path.join(work, "store-%s-%d.json" % (kind, r))))
                finally:
                    server.terminate()
    finally:
        t.close()
    med = lambda xs: sorted(xs)[len(xs) // 2]
    out = {}
    for kind, summaries in rows.items():
        out[kind] = {k: med([s[m][q] for s in summaries]) for k, (m, q) in
                     {"ttft_p50_ms": ("ttft_ms", "p50"), "ttft_p99_ms": ("ttft_ms", "p99"),
                      "e2e_p50_ms": ("e2e_ms", "p50"), "e2e_p99_ms": ("e2e_ms", "p99")}.items()}
    out["redis_vs_directory_e2e_p50"] = out["redis"]["e2e_p50_ms"] / out["directory"]["e2e_p50_ms"]
    return out


def throughput(work, rounds):
    runs = {1: [], 3: []}
    for r in range(rounds):  # interleaved: this VM's speed drifts
        for n in (1, 3):
            with replicas.Topology(BIN, ROOT, os.path.join(work, "tp%d-%d" % (n, r)), replicas=n, gateway=False) as t:
                runs[n].append(loadtest(t.nginx_addr, ["--concurrency", "16", "--requests", "400", "--prompt-tokens",
                                                       "fixed:64", "--output-tokens", "fixed:16", "--seed", str(r)],
                                        os.path.join(work, "tp%d-%d.json" % (n, r)))["output_tokens_per_s"])
    out = {"%d_replicas" % n: sorted(v)[len(v) // 2] for n, v in runs.items()}
    out["ratio_3_vs_1"] = out["3_replicas"] / out["1_replicas"]
    out["rounds"] = {"%d_replicas" % n: v for n, v in runs.items()}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lease-ms", type=int, default=1500)
    ap.add_argument("--only", nargs="+", choices=["failover", "resume", "store", "throughput"],
                    help="run only these parts (each holds the CPU for minutes: split a long run)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="steady_replicas_bench_")
    try:
        steady_grpc.generate_stubs(work, ROOT)
        for name, fn in (("failover", lambda: failover(work, args.lease_ms, args.rounds)),
                         ("resume", lambda: resume_failover(work, args.lease_ms, args.rounds)),
                         ("store", lambda: store_cost(work, args.rounds)),
                         ("throughput", lambda: throughput(work, args.rounds))):
            if not args.only or name in args.only:
                print(json.dumps({name: fn()}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
