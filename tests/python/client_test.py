#!/usr/bin/python3
"""An independent client: Debian's python3-grpcio and python3-protobuf against a real steady-server.

Stubs are generated at test time from the project's proto (protoc + grpc_python_plugin) into a
temporary directory, so this checks the wire API itself, not the C++ client code.

Usage: client_test.py BIN_DIR SOURCE_DIR
"""
import os
import subprocess
import sys
import tempfile
import time
import unittest

BIN_DIR, SOURCE_DIR = sys.argv[1], sys.argv[2]
WORK = tempfile.mkdtemp(prefix="steady_python_")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steady_grpc  # noqa: E402

steady_grpc.generate_stubs(WORK, SOURCE_DIR)
import grpc  # noqa: E402
import health_v1_pb2 as health_pb2, health_v1_pb2_grpc as health_pb2_grpc  # noqa: E402
from steady.v1 import inference_pb2 as pb, inference_pb2_grpc as pb_grpc  # noqa: E402


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        model = os.path.join(WORK, "model")
        subprocess.run([os.path.join(BIN_DIR, "steady"), "init", "--out", model, "--preset", "tiny",
                        "--tokenizer", os.path.join(SOURCE_DIR, "tests/data/tokenizer/tokenizer.model"),
                        "--mechanism", "taylor", "--order", "2"], check=True, stdout=subprocess.DEVNULL)
        cls.server = steady_grpc.Server(BIN_DIR, os.path.join(WORK, "server.log"),
                                        ["--model", model, "--state-memory", "16M", "--session-dir",
                                         os.path.join(WORK, "sessions")])
        cls.channel = grpc.insecure_channel("127.0.0.1:%d" % cls.server.port)
        cls.stub = pb_grpc.InferenceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.rc = cls.server.terminate()
        assert cls.rc == 0, "steady-server exited with %d" % cls.rc

    def generate(self, **fields):
        """Streams one Generate call; returns (text, ids, last message)."""
        messages = list(self.stub.Generate(pb.GenerateRequest(**fields), timeout=60))
        text = "".join(m.text for m in messages)
        ids = [t for m in messages for t in m.token_ids]
        for m in messages[:-1]:
            self.assertEqual(m.finish_reason, "")
        return text, ids, messages[-1]

    def test_health_and_model_info(self):
        health = health_pb2_grpc.HealthStub(self.channel)
        self.assertEqual(health.Check(health_pb2.HealthCheckRequest(), timeout=10).status,
                         health_pb2.HealthCheckResponse.SERVING)
        info = self.stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
        self.assertEqual(info.mechanism, "taylor")
        self.assertEqual(info.vocab_size, 512)
        self.assertGreater(info.state_bytes_per_session, 0)

    def test_server_reflection_lists_the_services(self):
        # grpc.reflection.v1alpha by hand (Debian has no Python reflection package): a
        # ServerReflectionRequest with list_services = "" (field 7, length 0), raw bytes both ways.
        info = self.channel.stream_stream(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            request_serializer=lambda b: b, response_deserializer=lambda b: b)
        responses = list(info(iter([b"\x3a\x00"]), timeout=30))
        self.assertEqual(len(responses), 1)
        self.assertIn(b"steady.v1.Inference", responses[0])
        self.assertIn(b"grpc.health.v1.Health", responses[0])

    def test_create_generate_fork_export_import_delete(self):
        session = self.stub.CreateSession(pb.CreateSessionRequest(), timeout=10)
        sid = session.session_id
        self.assertTrue(sid)
        self.assertEqual(session.position, 0)
        _, ids, last = self.generate(session_id=sid, prompt="This License applies", max_tokens=0)
        self.assertEqual(ids, [])
        position = last.usage.session_position
        self.assertEqual(position, last.usage.prompt_tokens)

        fork = self.stub.ForkSession(pb.ForkSessionRequest(session_id=sid), timeout=10)
        self.assertNotEqual(fork.session_id, sid)
        self.assertEqual(fork.position, position)

        blob = b"".join(c.data for c in self.stub.ExportSession(pb.ExportSessionRequest(session_id=sid), timeout=30))
        self.assertGreater(len(blob), 0)

        def chunks():
            yield pb.ImportSessionRequest(session_id="py-imported", data=blob[:100])
            for i in range(100, len(blob), 4096):
                yield pb.ImportSessionRequest(data=blob[i:i + 4096])
        imported = self.stub.ImportSession(chunks(), timeout=30)
        self.assertEqual(imported.session_id, "py-imported")
        self.assertEqual(imported.position, position)

        # Three copies of one state continue identically.
        args = dict(prompt=" to any", max_tokens=10, temperature=0.7, top_k=20, seed=99)
        a = self.generate(session_id=sid, **args)
        b = self.generate(session_id=fork.session_id, **args)
        c = self.generate(session_id="py-imported", **args)
        self.assertEqual(a[1], b[1])
        self.assertEqual(a[1], c[1])
        self.assertEqual(a[0], c[0])
        self.assertEqual(len(a[1]), a[2].usage.completion_tokens)
        self.assertIn(a[2].finish_reason, ("length", "stop"))
        self.assertEqual(self.stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=10).position,
                         a[2].usage.session_position)

        listed = [s.session_id for s in self.stub.ListSessions(pb.ListSessionsRequest(), timeout=10).sessions]
        self.assertTrue({sid, fork.session_id, "py-imported"} <= set(listed))

        for s in (sid, fork.session_id, "py-imported"):
            self.stub.DeleteSession(pb.DeleteSessionRequest(session_id=s), timeout=10)
        with self.assertRaises(grpc.RpcError) as e:
            self.stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=10)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_errors_name_the_field(self):
        cases = [(dict(prompt="x", max_tokens=-1), "max_tokens"),
                 (dict(prompt="x", top_p=1.5), "top_p"),
                 (dict(prompt="x", temperature=float("nan")), "temperature"),
                 (dict(prompt="x", stop=[""]), "stop[0]"),
                 (dict(session_id="no/slash", prompt="x"), "session_id")]
        for fields, name in cases:
            with self.assertRaises(grpc.RpcError) as e:
                self.generate(**fields)
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, fields)
            self.assertIn(name, e.exception.details())

    def test_deadline_is_a_cancellation(self):
        sid = self.stub.CreateSession(pb.CreateSessionRequest(), timeout=10).session_id
        with self.assertRaises(grpc.RpcError) as e:
            for _ in self.stub.Generate(pb.GenerateRequest(session_id=sid, prompt="The", max_tokens=60000),
                                        timeout=0.5):
                pass
        self.assertEqual(e.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        # The engine ends the job within a step; then the session takes new work.
        deadline = time.time() + 20
        while self.stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=10).busy and time.time() < deadline:
            time.sleep(0.05)
        _, ids, last = self.generate(session_id=sid, prompt=".", max_tokens=2)
        self.assertEqual(len(ids), last.usage.completion_tokens)
        self.assertIn(last.finish_reason, ("length", "stop"))


if __name__ == "__main__":
    try:
        unittest.main(argv=sys.argv[:1], verbosity=2)
    finally:
        subprocess.run(["rm", "-rf", WORK])
