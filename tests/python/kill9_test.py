#!/usr/bin/python3
"""kill -9 at random moments during multi-turn load, then a restart on the same --session-dir and a
check that nothing acknowledged was lost (docs/durability.md).

Each cycle starts steady-server, runs SESSIONS clients that each loop Generate turns on their own
session (random prompts and max_tokens; after each acknowledged turn the client exports the session
and keeps its bytes), and sends the server SIGKILL after a random delay. After the restart, every
session must hold either
  - its last acknowledged turn, byte for byte (the exported snapshot equals the one taken after the
    acknowledgement), or
  - that turn plus the whole turn that was in flight at the kill (its prompt entirely absorbed and a
    complete generation: position = acknowledged + prompt tokens + 0..max_tokens generated),
never less and never a prompt absorbed halfway. A state-memory of three slots for four sessions keeps
offload and restore in play.

Usage: kill9_test.py BIN_DIR SOURCE_DIR [--kills N] [--sessions N] [--seed S] [--durability turn|shutdown]
"""
import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steady_grpc  # noqa: E402

WORDS = ("the license software free you may copy work source code terms of any program modify and "
         "whale ship sea captain").split()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir")
    ap.add_argument("source_dir")
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--durability", default="turn", help="the server's --durability (shutdown: a control "
                    "that must lose turns)")
    args = ap.parse_args()
    print("kill9: --seed %d" % args.seed, flush=True)
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="steady_kill9_")
    try:
        return run(args, rng, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


class SessionRecord:
    """What the client knows for sure about one session: the last acknowledged position and the
    snapshot exported after it (None when the kill came before the export), and the turn in flight."""

    def __init__(self, sid):
        self.sid = sid
        self.acked_position = 0
        self.acked_blob = None
        self.inflight = None  # (prompt tokens, max_tokens) of a turn sent and not acknowledged
        self.acked_turns = 0


def run(args, rng, work):
    steady_grpc.generate_stubs(work, args.source_dir)
    import grpc
    from steady.v1 import inference_pb2 as pb, inference_pb2_grpc as pb_grpc

    model = os.path.join(work, "model")
    subprocess.run([os.path.join(args.bin_dir, "steady"), "init", "--out", model, "--preset", "tiny",
                    "--tokenizer", os.path.join(args.source_dir, "tests/data/tokenizer/tokenizer.model"),
                    "--mechanism", "taylor", "--order", "2", "--seed", "5"], check=True, stdout=subprocess.DEVNULL)
    sessions_dir = os.path.join(work, "sessions")
    state_bytes = None
    records = [SessionRecord("s%d" % i) for i in range(args.sessions)]
    failures = []
    totals = {"acked": 0, "inflight_present": 0, "inflight_absent": 0, "byte_checks": 0}
    prompt_tokens = {}  # prompt text -> its token count on a non-empty session

    def server_args():
        memory = "16M" if state_bytes is None else str(3 * state_bytes)  # 3 slots for 4 sessions
        return ["--model", model, "--session-dir", sessions_dir, "--state-memory", memory,
                "--durability", args.durability]

    def count_tokens(stub, text):
        if text not in prompt_tokens:
            # A prefill-only ephemeral call: usage.prompt_tokens counts BOS + the prompt's tokens.
            last = list(stub.Generate(pb.GenerateRequest(prompt=text, max_tokens=0), timeout=30))[-1]
            prompt_tokens[text] = last.usage.prompt_tokens - 1
        return prompt_tokens[text]

    def check(stub, r):
        """After a restart: the session holds its acknowledged turn, or that and the whole turn in flight."""
        try:
            got = stub.GetSession(pb.GetSessionRequest(session_id=r.sid), timeout=30)
            blob = b"".join(c.data for c in stub.ExportSession(pb.ExportSessionRequest(session_id=r.sid), timeout=30))
        except grpc.RpcError as e:
            failures.append("%s: lost (%s: %s) after %d acknowledged turns" % (r.sid, e.code(), e.details(),
                                                                               r.acked_turns))
            return
        if got.position == r.acked_position:
            if r.acked_blob is not None:
                totals["byte_checks"] += 1
                if blob != r.acked_blob:
                    failures.append("%s: the state at position %d differs from the one acknowledged" %
                                    (r.sid, got.position))
            if r.inflight:
                totals["inflight_absent"] += 1
        elif r.inflight and got.position > r.acked_position:
            prompt, max_tokens = r.inflight
            low, high = r.acked_position + prompt, r.acked_position + prompt + max_tokens
            if not low <= got.position <= high:
                failures.append("%s: position %d is neither the acknowledged %d nor a whole turn after it [%d, %d]"
                                % (r.sid, got.position, r.acked_position, low, high))
            totals["inflight_present"] += 1
            r.acked_position = got.position  # a completed turn: it is now what the session holds
        else:
            failures.append("%s: position %d, but %d was acknowledged (in flight: %s)" %
                            (r.sid, got.position, r.acked_position, r.inflight))
        r.acked_blob = blob
        r.inflight = None

    def client(stub, r, stop, local_rng):
        while not stop.is_set():
            text = " " + " ".join(local_rng.choice(WORDS) for _ in range(local_rng.randint(1, 40)))
            max_tokens = local_rng.randint(1, 12)
            try:
                n = count_tokens(stub, text)
                r.inflight = (n, max_tokens)
                last = None
                for m in stub.Generate(pb.GenerateRequest(session_id=r.sid, prompt=text, max_tokens=max_tokens),
                                       timeout=30):
                    last = m
                if last is None or not last.finish_reason:
                    return
                # Acknowledged: this turn must survive from here on.
                r.acked_position, r.acked_blob, r.inflight = last.usage.session_position, None, None
                r.acked_turns += 1
                blob = b"".join(c.data for c in stub.ExportSession(
                    pb.ExportSessionRequest(session_id=r.sid), timeout=30))
                r.acked_blob = blob
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                                    grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL):
                    failures.append("%s: %s: %s" % (r.sid, e.code(), e.details()))
                return

    started = time.time()
    for cycle in range(args.kills + 1):
        server = steady_grpc.Server(args.bin_dir, os.path.join(work, "server.log"), server_args())
        try:
            channel = grpc.insecure_channel("127.0.0.1:%d" % server.port)
            stub = pb_grpc.InferenceStub(channel)
            if cycle == 0:
                for r in records:
                    stub.CreateSession(pb.CreateSessionRequest(session_id=r.sid), timeout=30)
                state_bytes = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=30).state_bytes_per_session
            else:
                for r in records:
                    check(stub, r)
            if cycle == args.kills:
                break
            stop = threading.Event()
            threads = [threading.Thread(target=client, args=(stub, r, stop, random.Random(rng.random())))
                       for r in records]
            for t in threads:
                t.start()
            time.sleep(rng.uniform(0.05, 1.0))
            server.kill()  # SIGKILL: no drain, no shutdown write
            stop.set()
            for t in threads:
                t.join(60)
            channel.close()
        finally:
            server.kill()
        if failures:
            break
    acked = sum(r.acked_turns for r in records)
    print("kill9: %d kills in %.0f s, %d acknowledged turns, %d exported states compared byte for byte, "
          "turns in flight at a kill: %d wholly present, %d wholly absent; lost or half-applied: %d"
          % (min(cycle, args.kills), time.time() - started, acked, totals["byte_checks"],
             totals["inflight_present"], totals["inflight_absent"], len(failures)))
    for f in failures:
        print("FAIL - " + f)
    if acked < args.kills:
        print("FAIL - too few acknowledged turns (%d) to say anything" % acked)
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
