"""Shared by the Python tests: gRPC stubs generated at test time from the project's proto (protoc +
grpc_python_plugin, so the wire API itself is checked, not the C++ client), and a steady-server
process on a port it picks itself."""
import os
import re
import signal
import subprocess
import sys
import time

GOOGLEAPIS = "/usr/share/gocode/src/github.com/grpc-ecosystem/grpc-gateway/third_party/googleapis"

# The standard health protocol (grpc/health/v1/health.proto), which Debian ships no Python stubs for.
HEALTH_PROTO = """
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  enum ServingStatus { UNKNOWN = 0; SERVING = 1; NOT_SERVING = 2; SERVICE_UNKNOWN = 3; }
  ServingStatus status = 1;
}
service Health { rpc Check(HealthCheckRequest) returns (HealthCheckResponse); }
"""


def generate_stubs(work, source_dir):
    """Writes the stubs under `work` and puts them on sys.path; then `from steady.v1 import
    inference_pb2` and `import health_v1_pb2` work."""
    out = os.path.join(work, "gen")
    os.makedirs(out)
    # Saved under a name of its own: a grpc/health/v1/ module path would hide grpcio's `grpc` package.
    os.makedirs(os.path.join(work, "health"))
    with open(os.path.join(work, "health", "health_v1.proto"), "w") as f:
        f.write(HEALTH_PROTO)
    protoc = ["protoc", "-I", os.path.join(source_dir, "proto"), "-I", GOOGLEAPIS, "-I", "/usr/include",
              "-I", os.path.join(work, "health"), "--python_out=" + out]
    grpc_plugin = ["--grpc_python_out=" + out, "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin"]
    subprocess.run(protoc + ["google/api/http.proto", "google/api/annotations.proto"], check=True)
    subprocess.run(protoc + grpc_plugin + ["steady/v1/inference.proto", "health_v1.proto"], check=True)
    sys.path.insert(0, out)


class Server:
    """steady-server on a port it picks itself (read back from its log), or on `port`."""

    def __init__(self, bin_dir, log_path, args, port=0):
        self.log_path = log_path
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([os.path.join(bin_dir, "steady-server"), "--port", str(port)] + args,
                                     stderr=self.log)
        deadline = time.time() + 30
        self.port = None
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", self.read_log())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.05)
        if self.port is None:
            self.kill()
            raise RuntimeError("steady-server did not start: " + self.read_log())

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()

    def terminate(self):
        """SIGTERM; returns the exit status (bounded wait)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.kill()

    def kill(self):
        """SIGKILL (a crash at whatever instruction the process is at)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
