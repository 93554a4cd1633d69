#!/usr/bin/env python3
"""n choices by forking the state against n separate requests (docs/benchmarks.md, "n choices"):
through a running steady-gateway's /v1/completions, the same prompt, one request with "n": N against
N concurrent requests of one choice each, alternated ROUNDS times. Prints wall time, completion
tokens per second and the prompt tokens the server computed (prompt_tokens - cached_tokens, summed).
Usage: choices_bench.py URL [N] [PROMPT_WORDS] [MAX_TOKENS] [ROUNDS]"""
import json
import sys
import threading
import time
import urllib.request


def complete(url, body):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def main():
    url = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    words = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    max_tokens = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    totals = {"fork": [0.0, 0, 0], "separate": [0.0, 0, 0]}  # seconds, completion tokens, prompt computed
    for r in range(rounds):
        # A prompt new to the prefix cache each round, so neither side starts from the other's state.
        prompt = "Round %d. " % r + " ".join("license%d" % (i % 97) for i in range(words))
        base = {"model": "model", "prompt": prompt, "max_tokens": max_tokens, "temperature": 1, "seed": r}
        t = time.perf_counter()
        b = complete(url, dict(base, n=n))
        totals["fork"][0] += time.perf_counter() - t
        totals["fork"][1] += b["usage"]["completion_tokens"]
        totals["fork"][2] += b["usage"]["prompt_tokens"] - b["usage"]["prompt_tokens_details"]["cached_tokens"]
        prompt = "Round %d, again. " % r + prompt
        answers = [None] * n
        def one(i):
            answers[i] = complete(url, dict(base, prompt=prompt, seed=r * 100 + i))
        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        totals["separate"][0] += time.perf_counter() - t
        for a in answers:
            totals["separate"][1] += a["usage"]["completion_tokens"]
            totals["separate"][2] += a["usage"]["prompt_tokens"] - a["usage"]["prompt_tokens_details"]["cached_tokens"]
    print("| way | wall s | completion tokens/s | prompt tokens computed |")
    print("|---|---|---|---|")
    for way, (sec, toks, computed) in totals.items():
        label = "n = %d, one request (fork)" % n if way == "fork" else "%d requests of n = 1" % n
        print("| %s | %.2f | %.1f | %d |" % (label, sec, toks / sec, computed))


main()
