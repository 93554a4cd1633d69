#!/usr/bin/python3
"""Load with faults (docs/deployment.md, "Load with faults"; not in CI): many concurrent multi-turn
streams through nginx against the replica set of docs/deployment.md (redis-server with its append-only
file fsynced, 3 steady-server replicas on --session-store redis://, nginx), while a replica is killed
(SIGKILL) and restarted every few minutes, Redis is killed and restarted once, and (--nginx-restart)
nginx is restarted once.

The load is steady-loadtest's multi-turn mode with --retries 0 and --resume RESUME (default 3: a
stream cut by a replica's or nginx's death is resumed within the same call, clients/loadtest/resume.h;
--resume 0 shows what a client that does not resume sees): every failure a client would see is
counted. Reports, in OUT_DIR/faults.json and on stdout:
  - cut calls resumed, by the fault that cut them; those a replay of their committed turn completed
    (the server's stored outcome: a turn committed before its last message reached the client), and
    resumed calls that ended "cancelled" (a partial turn kept: goal none, session turns are sent
    all_or_nothing);
  - failed calls by gRPC code, split by cause: in flight on a killed replica (nginx cannot resend a
    gRPC call it has passed on), in flight or sent while nginx was down (or within RECONNECT_S after,
    while the client reconnects), and unexplained (goal: none);
  - acknowledged turns lost: sessions whose position on the server ends behind their last
    acknowledged turn (steady-loadtest checks every session at the end; goal: none);
  - p50/p99 time to first token and inter-token latency over time, as OUT_DIR/faults.png with the
    faults marked (and RSS over time);
  - RSS of every process after the warm-up and at the end (goal: growth within 10% for the processes
    that ran throughout: replica0, which is never killed, and nginx unless restarted).

Usage (from the source root, after the build; redis-server and nginx: scripts/install-deps.sh):
  flock /tmp/steady-cpu.lock /usr/bin/python3 tools/bench/faults_bench.py --duration-s 3600
  [--sessions 1000] [--think-ms 20000] [--prompt-tokens uniform:16:48] [--output-tokens uniform:8:24]
  [--kill-every-s 180] [--down-s 15] [--redis-down-s 2] [--lease-ms 10000] [--nginx-restart] [--resume 3]
  [--out-dir build/faults]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests/python"))
import replicas  # noqa: E402

BIN = os.path.join(ROOT, "build/bin")
# A gRPC client whose connection nginx cut fails its calls at once (UNAVAILABLE) until it has
# reconnected, after a backoff (1 s, then x1.6, jittered): calls sent this long after nginx is back
# still count as nginx's restart.
RECONNECT_S = 5


def percentile(values, p):
    values = sorted(values)
    if not values:
        return None
    k = (len(values) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def rss_kb(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


class RssSampler(threading.Thread):
    """Every `period` s, the RSS of every process of the topology (nginx's workers too) and of the
    load generator; one series per process instance ("replica1", "replica1 (2)" after a restart)."""

    def __init__(self, topology, extra, period):
        super().__init__(daemon=True)
        self.t, self.extra, self.period = topology, extra, period
        self.series = {}   # instance -> [(unix time, kB)]
        self.instances = {}  # (name, pid) -> instance
        self.stop = threading.Event()

    def instance(self, name, pid):
        key = (name, pid)
        if key not in self.instances:
            n = sum(1 for (other, _) in self.instances if other == name)
            self.instances[key] = name if n == 0 else "%s (%d)" % (name, n + 1)
        return self.instances[key]

    def sample(self):
        now = time.time()
        procs = dict(self.extra)
        for name, p in list(self.t.procs.items()):
            if p.poll() is None:
                procs[name] = p.pid
        for name, pid in procs.items():
            pids = [(name, pid)]
            if name == "nginx":
                pids += [("nginx worker", c) for c in children(pid)]
            for n, q in pids:
                kb = rss_kb(q)
                if kb is not None:
                    self.series.setdefault(self.instance(n, q), []).append((now, kb))

    def run(self):
        while not self.stop.wait(self.period):
            self.sample()


def schedule(args):
    """[(seconds after the load's start, fault, target)]."""
    faults = []
    t, victims = args.kill_every_s, ["replica1", "replica2"]
    while t + args.down_s + 30 < args.duration_s:
        faults.append((t, "kill", victims[len(faults) % 2]))
        t += args.kill_every_s
    def add_apart(at, fault):  # at least down_s + 20 s from the other faults, 30 s before the end
        while any(abs(at - f[0]) < args.down_s + 20 for f in faults):
            at += 10
        if at + 30 < args.duration_s:
            faults.append((at, fault, fault))
    add_apart(args.duration_s * 0.5, "redis")
    if args.nginx_restart:
        add_apart(args.duration_s * 0.8, "nginx")
    return sorted(faults)


def run(args, work):
    t = replicas.Topology(BIN, ROOT, work, replicas=3, lease_ms=args.lease_ms, model=args.model, gateway=False,
                          server_args=["--mechanism", "taylor", "--order", str(args.order)],
                          state_memory=args.state_memory)
    events = []  # {"at", "fault", "target", ...} in unix time
    with t:
        report = os.path.join(args.out_dir, "loadtest.json")
        load = subprocess.Popen(
            [os.path.join(BIN, "steady-loadtest"), "--addr", t.nginx_addr, "--sessions", str(args.sessions),
             "--duration", str(args.duration_s), "--think-time-ms", str(args.think_ms), "--prompt-tokens",
             args.prompt_tokens, "--output-tokens", args.output_tokens, "--retries", "0", "--resume", str(args.resume), "--seed", "1",
             "--json", report], stdout=open(os.path.join(args.out_dir, "loadtest.txt"), "w"),
            stderr=subprocess.STDOUT)
        sampler = RssSampler(t, {"steady-loadtest": load.pid}, args.rss_period_s)
        start = time.time()
        sampler.start()
        try:
            for at, fault, target in schedule(args):
                while time.time() < start + at:
                    if load.poll() is not None:
                        raise RuntimeError("steady-loadtest ended early: see %s/loadtest.txt" % args.out_dir)
                    time.sleep(0.2)
                event = {"at": time.time(), "fault": fault, "target": target}
                if fault == "kill":
                    held = replicas.lease_holders(t)
                    event["sessions_held"] = sorted(int(s.rsplit("-", 1)[1]) for s, h in held.items() if h == target)
                    t.kill(target)
                    event["killed_at"] = time.time()
                    time.sleep(args.down_s)
                    event["restart_at"] = time.time()
                    t.start_replica(int(target[len("replica"):]))
                    event["up_at"] = time.time()
                elif fault == "redis":
                    t.kill("redis")
                    event["killed_at"] = time.time()
                    time.sleep(args.redis_down_s)
                    t.start_redis()
                    event["up_at"] = time.time()
                else:
                    t.kill("nginx")
                    event["killed_at"] = time.time()
                    t.start_nginx()
                    event["up_at"] = time.time()
                events.append(event)
                print("fault: %s %s at %.0f s (down %.1f s)" % (fault, target, event["at"] - start,
                                                                   event["up_at"] - event["killed_at"]), flush=True)
            load.wait(args.duration_s + 600)
        finally:
            sampler.sample()  # the end
            sampler.stop.set()
            if load.poll() is None:
                load.kill()
        waits = {}
        for i in range(3):
            try:
                waits["replica%d" % i] = {"waits": t.metric(i, "steady_store_waits_total"),
                                          "waits_failed": t.metric(i, "steady_store_waits_failed_total")}
            except Exception as e:  # a replica that did not come back is in the report as such
                waits["replica%d" % i] = str(e)
    return start, events, sampler.series, waits, json.load(open(report))


def analyze(args, start, events, rss, waits, report):
    t0 = report["summary"]["start_unix_s"]
    requests = report["requests"]
    for r in requests:
        r["sent"] = t0 + r["start_s"]
        r["ended"] = r["sent"] + (r["e2e_ms"] or 0) / 1e3
    # Failed calls, by cause.
    causes = {"in flight on a killed replica": 0, "nginx restart": 0, "unexplained": 0}
    unexplained = []
    for r in requests:
        if r["code"] == "OK" or r.get("applied_unacknowledged"):
            continue
        cause = "unexplained"
        for e in events:
            if e["fault"] == "kill" and r["session"] in e["sessions_held"] and r["sent"] <= e["killed_at"] <= r["ended"] + 1:
                cause = "in flight on a killed replica"
            elif e["fault"] == "nginx" and r["sent"] <= e["up_at"] + RECONNECT_S and r["ended"] >= e["at"] - 1:
                cause = "nginx restart"
        causes[cause] += 1
        if cause == "unexplained":
            unexplained.append({k: r.get(k) for k in ("session", "turn", "code", "error")} | {"sent_s": r["sent"] - start})
    # Cuts resumed, by the fault that caused them (the cut seen within 5 s after it began).
    resumed = {}
    for r in requests:
        for cut in r.get("cut_s", []):
            when, cause = t0 + cut, "other"
            for e in events:
                if e["at"] - 1 <= when <= e["up_at"] + RECONNECT_S + 5:
                    cause = "%s %s" % (e["fault"], e["target"]) if e["fault"] == "kill" else e["fault"] + " restart"
            resumed[cause] = resumed.get(cause, 0) + 1
    # Resumed calls completed by a replay of their committed turn, by fault (the first cut's), and
    # resumed calls that ended short of their turn ("cancelled": a partial turn kept and replayed).
    replayed, short = {}, 0
    for r in requests:
        if not r.get("cut_s") or r["code"] != "OK":
            continue
        short += r.get("finish_reason") == "cancelled"
        if r.get("replayed"):
            when, cause = t0 + r["cut_s"][0], "other"
            for e in events:
                if e["at"] - 1 <= when <= e["up_at"] + RECONNECT_S + 5:
                    cause = "%s %s" % (e["fault"], e["target"]) if e["fault"] == "kill" else e["fault"] + " restart"
            replayed[cause] = replayed.get(cause, 0) + 1
    # Latency over time, by when calls were sent.
    width = args.bucket_s
    buckets = {}
    for r in requests:
        b = int((r["sent"] - start) // width)
        slot = buckets.setdefault(b, {"ttft": [], "itl": [], "failed": 0, "calls": 0})
        slot["calls"] += 1
        if r["code"] == "OK" and r["ttft_ms"] is not None:
            slot["ttft"].append(r["ttft_ms"])
            slot["itl"].extend(r.get("itl_ms", []))
        elif r["code"] != "OK":
            slot["failed"] += 1
    timeline = [{"t_s": b * width + width / 2, "calls": s["calls"], "failed": s["failed"],
                 "ttft_p50_ms": percentile(s["ttft"], 50), "ttft_p99_ms": percentile(s["ttft"], 99),
                 "itl_p50_ms": percentile(s["itl"], 50), "itl_p99_ms": percentile(s["itl"], 99)}
                for b, s in sorted(buckets.items())]
    # RSS after the warm-up and at the end, per process instance.
    warm = start + args.warmup_s
    memory = {}
    for name, points in rss.items():
        after = [kb for when, kb in points if when >= warm] or [points[0][1]]
        memory[name] = {"start_mb": after[0] / 1024, "end_mb": points[-1][1] / 1024,
                        "growth": points[-1][1] / after[0] - 1, "from_s": points[0][0] - start,
                        "to_s": points[-1][0] - start}
    ok_calls = [r for r in requests if r["code"] == "OK"]
    itl_all = [g for r in ok_calls for g in r.get("itl_ms", [])]
    summary = report["summary"]
    return {
        "config": {k: v for k, v in vars(args).items()},
        "cpu": cpu_name(),
        "turns": {"sent": summary["requests"], "acknowledged": summary["completed"] - summary["applied_unacknowledged"],
                  "applied_unacknowledged": summary["applied_unacknowledged"], "failed": summary["failed"],
                  "failed_mid_stream": summary["failed_mid_stream"]},
        "resumed_calls": summary.get("resumed", 0),
        "resumes_by_fault": resumed,
        "replayed_by_fault": replayed,
        "resumed_calls_ended_cancelled": short,
        "errors_by_code": summary["errors"],
        "session_errors": summary["session_errors"],
        "failed_by_cause": causes,
        "unexplained_failures": unexplained[:50],
        "sessions_checked": summary["sessions_checked"],
        "sessions_with_acknowledged_turns_lost": summary["sessions_lost_turns"],
        "ttft_ms": {"p50": percentile([r["ttft_ms"] for r in ok_calls], 50),
                    "p99": percentile([r["ttft_ms"] for r in ok_calls], 99)},
        "itl_ms": {"p50": percentile(itl_all, 50), "p99": percentile(itl_all, 99)},
        "throughput_turns_per_s": summary["requests_per_s"],
        "output_tokens_per_s": summary["output_tokens_per_s"],
        "faults": [{k: (v - start if k in ("at", "killed_at", "restart_at", "up_at") else v)
                    for k, v in e.items() if k != "sessions_held"} | {"sessions_held": len(e.get("sessions_held", []))}
                   for e in events],
        "store_waits": waits,
        "rss": memory,
        "timeline": timeline,
    }


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return "%s, %d vCPUs" % (line.split(":", 1)[1].strip(), os.cpu_count())
    return "unknown"


def chart(result, rss, start, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tl = result["timeline"]
    minutes = [p["t_s"] / 60 for p in tl]
    fig, axes = plt.subplots(4, 1, figsize=(12, 11), sharex=True,
                             gridspec_kw={"height_ratios": [3, 3, 1.3, 2]})
    for ax, key, title in ((axes[0], "ttft", "Time to first token (ms)"), (axes[1], "itl", "Inter-token latency (ms)")):
        for q, style in (("p50", "-"), ("p99", "--")):
            ax.plot(minutes, [p["%s_%s_ms" % (key, q)] for p in tl], style, label=q)
        ax.set_yscale("log")
        ax.set_ylabel(title)
        ax.legend(loc="upper left", fontsize=8)
    axes[2].bar(minutes, [p["failed"] for p in tl], width=result["config"]["bucket_s"] / 60 * 0.8, color="tab:red")
    axes[2].set_ylabel("failed calls")
    for name, points in sorted(rss.items()):
        axes[3].plot([(w - start) / 60 for w, _ in points], [kb / 1024 for _, kb in points], label=name)
    axes[3].set_ylabel("RSS (MB)")
    axes[3].set_yscale("log")
    axes[3].legend(loc="upper left", fontsize=7, ncol=4)
    axes[3].set_xlabel("minutes")
    colors = {"kill": "tab:red", "redis": "tab:purple", "nginx": "tab:orange"}
    for e in result["faults"]:
        for ax in axes:
            ax.axvline(e["at"] / 60, color=colors[e["fault"]], alpha=0.5, linewidth=1)
        axes[0].annotate("%s %s" % (e["fault"], e["target"]) if e["fault"] == "kill" else "%s restart" % e["fault"],
                         (e["at"] / 60, 1), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                         va="top", ha="right", color=colors[e["fault"]])
    for ax in axes:
        ax.grid(True, alpha=0.3)
    c = result["config"]
    fig.suptitle("%d streams, think %.0f s, 3 replicas + Redis + nginx on %s; replica killed every %.0f s"
                 % (c["sessions"], c["think_ms"] / 1000, result["cpu"], c["kill_every_s"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration-s", type=float, default=3600)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--think-ms", type=float, default=20000, help="mean pause before each turn (exponential)")
    ap.add_argument("--prompt-tokens", default="uniform:16:48")
    ap.add_argument("--output-tokens", default="uniform:8:24")
    ap.add_argument("--kill-every-s", type=float, default=180)
    ap.add_argument("--down-s", type=float, default=15, help="how long a killed replica stays down")
    ap.add_argument("--lease-ms", type=int, default=10000, help="steady-server's --lease-ms (its default)")
    ap.add_argument("--redis-down-s", type=float, default=2, help="how long Redis stays down")
    ap.add_argument("--nginx-restart", action="store_true", help="also restart nginx once (kills its streams)")
    ap.add_argument("--resume", type=int, default=3, help="steady-loadtest's --resume (0: cut streams fail)")
    ap.add_argument("--model", default=os.path.join(ROOT, "models/tiny-softmax"))
    ap.add_argument("--order", type=int, default=2, help="served as taylor of this order")
    ap.add_argument("--state-memory", default="256M")
    ap.add_argument("--warmup-s", type=float, default=60, help="RSS 'at start' is taken after this")
    ap.add_argument("--bucket-s", type=float, default=20)
    ap.add_argument("--rss-period-s", type=float, default=5)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "build/faults"))
    ap.add_argument("--from-raw", action="store_true",
                    help="no run: analyze OUT_DIR/raw.json and loadtest.json from an earlier one again")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    raw_path = os.path.join(args.out_dir, "raw.json")
    if args.from_raw:
        with open(raw_path) as f:
            raw = json.load(f)
        report = json.load(open(os.path.join(args.out_dir, "loadtest.json")))
        args = argparse.Namespace(**(vars(args) | raw["config"]))
        start, events, waits = raw["start"], raw["events"], raw["store_waits"]
        rss = {k: [tuple(p) for p in v] for k, v in raw["rss"].items()}
    else:
        work = tempfile.mkdtemp(prefix="steady_faults_")
        try:
            start, events, rss, waits, report = run(args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        # What the run saw, so that the analysis can be redone (--from-raw) without a new run.
        with open(raw_path, "w") as f:
            json.dump({"config": {k: v for k, v in vars(args).items() if k != "from_raw"}, "start": start,
                       "events": events, "rss": rss, "store_waits": waits}, f)
    result = analyze(args, start, events, rss, waits, report)
    with open(os.path.join(args.out_dir, "faults.json"), "w") as f:
        json.dump(result, f, indent=1)
    chart(result, rss, start, os.path.join(args.out_dir, "faults.png"))
    brief = {k: result[k] for k in ("turns", "resumed_calls", "resumes_by_fault", "replayed_by_fault",
                                    "resumed_calls_ended_cancelled", "errors_by_code", "failed_by_cause", "sessions_checked",
                                    "sessions_with_acknowledged_turns_lost", "ttft_ms", "itl_ms",
                                    "throughput_turns_per_s", "store_waits")}
    brief["rss"] = {k: "%.0f -> %.0f MB (%+.1f%%)" % (v["start_mb"], v["end_mb"], 100 * v["growth"])
                    for k, v in result["rss"].items()}
    print(json.dumps(brief, indent=1))
    print("wrote %s/faults.json, %s/faults.png, %s/loadtest.json" % ((args.out_dir,) * 3))


if __name__ == "__main__":
    main()
