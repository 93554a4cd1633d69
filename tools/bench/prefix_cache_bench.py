#!/usr/bin/python3
"""Figures for docs/benchmarks.md ("Prefix cache and the OpenAI endpoints"), on this machine, through
steady-gateway's OpenAI-compatible endpoints in front of steady-server serving the shipped default
model as the demo does (models/tiny-softmax, --mechanism taylor --order 3):

  ttft     time to first token (first server-sent event) of a stateless chat call: a ~2,000-token
           system prompt shared by every call plus a ~20-token question of its own, prefix cache on
           vs off (two servers, calls interleaved; the first call of each is a warm-up)
  chat     a 30-turn OpenAI-style chat: stateless with the whole history each call (cache on, cache
           off) and session-bound (only the new message); per-turn latency and tokens prefilled,
           the three conversations advanced turn by turn in step
  entry    the memory of one cache entry (the state after a prompt's end) after a 100-token and a
           100,000-token prompt with constant-state Taylor, and after 100 and 10,000 tokens with the
           same weights served as softmax (KV cache), read from the server's /metrics

Usage: tools/bench/prefix_cache_bench.py [--calls N] [--turns N] [--json OUT]   (from the source root,
after the build)
"""
import argparse
import glob
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests/python"))
from replicas import free_port, wait_for_port  # noqa: E402

BIN = os.path.join(ROOT, "build/bin")
MODEL = os.path.join(ROOT, "models/tiny-softmax")
MODEL_NAME = "tiny-softmax"


class Served:
    """steady-server (+ its /metrics) and steady-gateway on free ports; stopped on exit."""

    def __init__(self, work, name, server_args):
        self.work, self.name = work, name
        self.grpc, self.http, self.metrics = free_port(), free_port(), free_port()
        self.args = ["--model", MODEL, "--port", str(self.grpc), "--metrics-port", str(self.metrics)] + server_args
        self.procs = []

    def __enter__(self):
        log = open(os.path.join(self.work, self.name + ".server.log"), "w")
        server = subprocess.Popen([os.path.join(BIN, "steady-server")] + self.args, stderr=log)
        self.procs.append(server)
        if not wait_for_port(self.grpc, server, 60):
            raise RuntimeError("steady-server did not start: " + open(log.name).read())
        glog = open(os.path.join(self.work, self.name + ".gateway.log"), "w")
        gateway = subprocess.Popen([os.path.join(BIN, "steady-gateway"), "--grpc-addr", "127.0.0.1:%d" % self.grpc,
                                    "--http-port", str(self.http)], stderr=glog)
        self.procs.append(gateway)
        if not wait_for_port(self.http, gateway):
            raise RuntimeError("steady-gateway did not start: " + open(glog.name).read())
        return self

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            p.kill()
            p.wait()

    def post(self, path, body, stream=False):
        """Returns (seconds to the first event or the whole answer, the parsed answer or last chunks)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.http, timeout=600)
        start = time.perf_counter()
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError("%s: HTTP %d %s" % (path, resp.status, resp.read()[:300]))
        if not stream:
            out = json.loads(resp.read())
            return time.perf_counter() - start, out
        first, events = None, []
        for line in resp:
            if line.startswith(b"data: "):
                if first is None:
                    first = time.perf_counter() - start
                if line.strip() == b"data: [DONE]":
                    break
                events.append(json.loads(line[6:]))
        conn.close()
        return first, events

    def metric(self, name):
        text = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics, timeout=30).read().decode()
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.split()[-1])
        raise KeyError(name)


def corpus():
    """English prose every Debian machine has: the licenses in base-files."""
    text = []
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            text.append(open(path, errors="replace").read())
    return " ".join(" ".join(text).split())


def prompt_tokens(served, text):
    _, out = served.post("/v1/completions", {"model": MODEL_NAME, "prompt": text, "max_tokens": 0})
    return out["usage"]["prompt_tokens"]


def text_of_tokens(served, words, target):
    """Corpus words (repeated as needed) that make about `target` prompt tokens: two estimates."""
    n = target
    for _ in range(2):
        text = " ".join((words * (1 + n // len(words)))[:n])
        n = max(1, round(n * target / prompt_tokens(served, text)))
    return " ".join((words * (1 + n // len(words)))[:n])


def question(i):
    return "Question %d: what does section %d say about copying, changing and sharing the covered work?" % (i, i % 9 + 1)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def ttft(on, off, system, calls):
    times = {"on": [], "off": []}
    cached = {"on": [], "off": []}
    for i in range(calls + 1):
        for name, served in (("on", on), ("off", off)):
            body = {"model": MODEL_NAME, "max_tokens": 8, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True},
                    "messages": [{"role": "system", "content": system}, {"role": "user", "content": question(i)}]}
            first, events = served.post("/v1/chat/completions", body, stream=True)
            if i == 0:
                continue  # warm-up: fills the cache of the server that has one
            times[name].append(first)
            cached[name].append(events[-1]["usage"]["prompt_tokens_details"]["cached_tokens"])
            prompt = events[-1]["usage"]["prompt_tokens"]
    return {"calls": calls, "prompt_tokens": prompt,
            "ttft_ms_on_p50": 1000 * median(times["on"]), "ttft_ms_off_p50": 1000 * median(times["off"]),
            "ttft_ms_on_max": 1000 * max(times["on"]), "ttft_ms_off_max": 1000 * max(times["off"]),
            "cached_tokens_on_p50": median(cached["on"]), "speedup_p50": median(times["off"]) / median(times["on"])}


def chat(on, off, system, turns):
    modes = {"stateless, cache on": on, "stateless, cache off": off, "session-bound": on}
    history = {m: [{"role": "system", "content": system}] for m in modes}
    on.post("/v1/sessions", {"session_id": "bench-chat"})
    rows = {m: [] for m in modes}
    for t in range(turns):
        for mode, served in modes.items():
            msg = {"role": "user", "content": question(100 + t)}
            body = {"model": MODEL_NAME, "max_tokens": 24, "temperature": 0}
            if mode == "session-bound":
                body.update(session_id="bench-chat", messages=([history[mode][0]] if t == 0 else []) + [msg])
            else:
                body["messages"] = history[mode] + [msg]
            seconds, out = served.post("/v1/chat/completions", body)
            usage = out["usage"]
            history[mode] += [msg, {"role": "assistant", "content": out["choices"][0]["message"]["content"]}]
            rows[mode].append({"turn": t + 1, "ms": 1000 * seconds, "prompt_tokens": usage["prompt_tokens"],
                               "prefilled": usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"]})
    return rows


def entry_bytes(work, mechanism_args, lengths, words):
    """Cache bytes one prompt of each length adds (only prompts' ends cached: the largest interval),
    split into the state and the ids kept to compare hits (4 bytes a token)."""
    out = {}
    with Served(work, "entry", mechanism_args + ["--prefix-cache-interval", "1048576",
                                                 "--prefix-cache-memory", "4G"]) as s:
        for i, n in enumerate(lengths):
            text = text_of_tokens(s, words[1000 * (i + 1):] + words, n)  # no prefix shared with the other
            before = s.metric("steady_prefix_cache_bytes")
            tokens = prompt_tokens(s, text)
            time.sleep(0.3)  # the engine publishes its statistics after the step that answered
            added = s.metric("steady_prefix_cache_bytes") - before
            out[n] = {"prompt_tokens": tokens, "entry_bytes": added, "ids_bytes": 4 * tokens,
                      "state_bytes": added - 4 * tokens}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=12)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--json")
    args = ap.parse_args()
    words = corpus().split()
    taylor = ["--mechanism", "taylor", "--order", "3", "--state-memory", "512M"]
    results = {}
    with tempfile.TemporaryDirectory(prefix="steady-prefix-bench-") as work:
        with Served(work, "on", taylor) as on, Served(work, "off", taylor + ["--prefix-cache-memory", "0"]) as off:
            system = text_of_tokens(off, words, 2000)
            results["ttft"] = ttft(on, off, system, args.calls)
            print(json.dumps(results["ttft"]), flush=True)
            chat_system = text_of_tokens(off, words[3000:], 500)
            results["chat"] = chat(on, off, chat_system, args.turns)
        for mode, rows in results["chat"].items():
            pick = [r for r in rows if r["turn"] in (1, 10, 20, 30)]
            print(mode, json.dumps(pick), "mean ms %.1f" % statistics.mean(r["ms"] for r in rows), flush=True)
        results["entry_taylor"] = entry_bytes(work, taylor, [100, 100000], words)
        print("taylor", json.dumps(results["entry_taylor"]), flush=True)
        results["entry_softmax"] = entry_bytes(work, ["--state-memory", "4G"], [100, 10000], words)
        print("softmax", json.dumps(results["entry_softmax"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
