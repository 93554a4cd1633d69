"""A storm of one-call connections, as nginx makes them (a new connection per call), at a
steady-server while it drains on SIGTERM. Every call must either be served or find the connection
refused (which a balancer answers by sending the call to another replica): none may be refused or
reset after it was sent, which the client would see as an error. Before the drain owned its
listener (server/rpc/listener.h), 3 to 6 calls a drain failed so ("GOAWAY received", CANCELLED).

With a CERT_DIR (tests/cli/certs.bash's files) one more round runs over TLS, whose handshake
comes between the connection and its call.

Usage: drain_test.py BIN_DIR SOURCE_DIR [ROUNDS [CERT_DIR]]"""
import collections
import os
import sys
import tempfile
import threading
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steady_grpc  # noqa: E402

THREADS = 12


def storm(port, ca, stop_at, counts, lock):
    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.enable_retries", 0)]
    while time.time() < stop_at[0]:
        if ca is None:
            channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=options)
        else:
            channel = grpc.secure_channel(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(root_certificates=ca),
                                          options=options)
        check = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda x: x,
                                    response_deserializer=lambda x: x)
        try:
            check(b"", timeout=5)
            kind = "served"
        except grpc.RpcError as e:
            details = e.details() or ""
            if e.code() == grpc.StatusCode.UNAVAILABLE and ("onnection refused" in details or
                                                             "failed to connect" in details.lower()):
                kind = "refused at connect"
            else:
                kind = f"{e.code().name}: {details[:120]}"
        channel.close()
        with lock:
            counts[kind] += 1


def main():
    bin_dir, source_dir = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    cert_dir = sys.argv[4] if len(sys.argv) > 4 else None
    failed = False
    with tempfile.TemporaryDirectory() as work:
        for r in range(rounds + (1 if cert_dir else 0)):
            args = ["--model", os.path.join(source_dir, "models", "tiny-softmax"), "--drain-timeout", "3"]
            ca = None
            if r == rounds:  # the TLS round
                args += ["--tls-cert", os.path.join(cert_dir, "server.pem"),
                         "--tls-key", os.path.join(cert_dir, "server.key")]
                with open(os.path.join(cert_dir, "ca.pem"), "rb") as f:
                    ca = f.read()
            server = steady_grpc.Server(bin_dir, os.path.join(work, f"server{r}.log"), args)
            try:
                counts, lock, stop_at = collections.Counter(), threading.Lock(), [float("inf")]
                threads = [threading.Thread(target=storm, args=(server.port, ca, stop_at, counts, lock))
                           for _ in range(THREADS)]
                for t in threads:
                    t.start()
                time.sleep(1.5)
                status = None
                stop_at[0] = time.time() + 1.5  # on past the drain's start: the listener is closed by then
                status = server.terminate()
                for t in threads:
                    t.join()
            finally:
                stop_at[0] = 0
                server.kill()
            bad = {k: n for k, n in counts.items() if k not in ("served", "refused at connect")}
            ok = status == 0 and not bad and counts["served"] > 0 and counts["refused at connect"] > 0
            print(f"round {r}{' (TLS)' if ca else ''}: {dict(counts)}, exit status {status}: "
                  f"{'ok' if ok else 'FAILED'}")
            if not ok:
                failed = True
                if status != 0:
                    print(server.read_log()[-2000:])
    if failed:
        print("FAILED: a call failed after it was sent (or the storm did not cross the drain)")
        return 1
    print("PASS: every call of every drain was served or refused at connect")
    return 0


if __name__ == "__main__":
    sys.exit(main())
