"""Sends GenerateRequests to a steady-server and prints what came back, one line each, for the shell
tests (tests/cli/hf_chat_server.sh): stdin has one steady.v1 GenerateRequest per line in its JSON form;
stdout gets {"prompt_tokens": n, "ids": [...], "text": s} or {"error": "CODE: message"} per line.
The four bytes "@BAD" anywhere in a request's serialized form are replaced by b"\\xc3\\x28\\xff!" (not
UTF-8) before it is sent, so that a test can put invalid UTF-8 into a string field, which no protobuf
library lets a client write.

    /usr/bin/python3 chat_generate.py HOST:PORT SOURCE_DIR < requests.jsonl
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steady_grpc  # noqa: E402


def main():
    address, source_dir = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as work:
        steady_grpc.generate_stubs(work, source_dir)
        import grpc
        from google.protobuf import json_format
        from steady.v1 import inference_pb2 as pb

        channel = grpc.insecure_channel(address)
        generate = channel.unary_stream("/steady.v1.Inference/Generate", request_serializer=lambda b: b,
                                        response_deserializer=pb.GenerateResponse.FromString)
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json_format.Parse(line, pb.GenerateRequest())
            wire = request.SerializeToString().replace(b"@BAD", b"\xc3\x28\xff!")
            answer = {"prompt_tokens": 0, "ids": [], "text": ""}
            try:
                for m in generate(wire, timeout=120):
                    answer["ids"] += list(m.token_ids)
                    answer["text"] += m.text
                    if m.HasField("usage"):
                        answer["prompt_tokens"] = m.usage.prompt_tokens
            except grpc.RpcError as e:
                answer = {"error": f"{e.code().name}: {e.details()}"}
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
