"""gRPC `ModelStreamInfer` as a hostile client drives it, with tritonclient's own protocol
messages (its generated `service_pb2`) on raw grpcio streams; cli/tests/serve_streams.rs runs it
and checks what the server did.

`python stream_hostile.py MODE GRPC_PORT MODEL [ARG]`; prints one JSON line (`drain` prints a
`ready` line first). Modes:
- `unread COUNT`: COUNT requests sent on one stream whose answers are never read, for 4 s;
- `idle STREAMS`: STREAMS streams (each on its own connection) that send nothing; how each ended;
- `bad BYTES`: a request answered in full, then one message of BYTES raw bytes, then another
  request: how the stream ended and what it answered;
- `drain`: a long request and an idle stream; `ready` once the first token came, then every
  answer until the stream ends (the test sends SIGTERM in between)."""
import json
import sys
import threading
import time

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc


def connect(port):
    channel = grpc.insecure_channel(
        f"127.0.0.1:{port}",
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
    )
    return channel, service_pb2_grpc.GRPCInferenceServiceStub(channel)


def request(model, prompt, max_tokens, rid="", raw_bytes=None):
    r = service_pb2.ModelInferRequest(model_name=model, id=rid)
    r.parameters["max_tokens"].int64_param = max_tokens
    if raw_bytes is None:
        t = r.inputs.add(name="input_ids", datatype="INT32", shape=[len(prompt)])
        r.raw_input_contents.append(b"".join(int(p).to_bytes(4, "little") for p in prompt))
    else:
        t = r.inputs.add(name="input_ids", datatype="INT32", shape=[raw_bytes // 4])
        r.raw_input_contents.append(bytes(raw_bytes))
    return r


def final(response):
    p = response.infer_response.parameters
    return p["triton_final_response"].bool_param, p["finish_reason"].string_param


def held_open(requests, until):
    """A request iterator that sends `requests`, then keeps the stream open until `until`."""
    for r in requests:
        yield r
    until.wait()


def unread(port, model, count):
    channel, stub = connect(port)
    done = threading.Event()
    requests = [request(model, [5, 6, 7], 4000, f"r{k}") for k in range(count)]
    call = stub.ModelStreamInfer(held_open(requests, done))
    time.sleep(4)
    done.set()
    call.cancel()
    channel.close()
    return {"sent": count}


def idle(port, model, streams):
    outcomes = [None] * streams

    def one(k):
        channel, stub = connect(port)
        done = threading.Event()
        start = time.time()
        try:
            for _ in stub.ModelStreamInfer(held_open([], done)):
                pass
            outcomes[k] = {"code": "OK", "after": time.time() - start}
        except grpc.RpcError as e:
            outcomes[k] = {"code": e.code().name, "message": e.details(),
                           "after": time.time() - start}
        done.set()
        channel.close()

    threads = [threading.Thread(target=one, args=(k,)) for k in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return {"streams": outcomes}


def bad(port, model, size):
    channel, stub = connect(port)
    first_done, go_on = threading.Event(), threading.Event()

    def requests():
        yield request(model, [5, 6, 7], 3, "good")
        first_done.wait(30)
        yield request(model, [], 0, "huge", raw_bytes=size)
        yield request(model, [5, 6, 7], 3, "after")
        go_on.wait(30)

    answers = []
    try:
        for response in stub.ModelStreamInfer(requests()):
            answers.append({"id": response.infer_response.id, "error": response.error_message,
                            "final": final(response)[0]})
            if final(response)[0] and response.infer_response.id == "good":
                first_done.set()
        outcome = {"code": "OK"}
    except grpc.RpcError as e:
        outcome = {"code": e.code().name, "message": e.details()}
    go_on.set()
    channel.close()
    return {"answers": answers, **outcome}


def drain(port, model):
    channel, stub = connect(port)
    idle_channel, idle_stub = connect(port)
    done, idle_done = threading.Event(), threading.Event()
    idle_outcome = {}

    def idle_stream():
        start = time.time()
        try:
            for _ in idle_stub.ModelStreamInfer(held_open([], idle_done)):
                pass
            idle_outcome.update(code="OK")
        except grpc.RpcError as e:
            idle_outcome.update(code=e.code().name, message=e.details())
        idle_outcome["after"] = time.time() - start

    watcher = threading.Thread(target=idle_stream)
    watcher.start()
    tokens, last, ready = 0, None, False
    try:
        for response in stub.ModelStreamInfer(held_open([request(model, [5, 6, 7], 100000, "long")], done)):
            is_final, reason = final(response)
            if is_final:
                last = {"finish_reason": reason, "error": response.error_message}
            else:
                tokens += 1
                if not ready:
                    ready = True
                    print("ready", flush=True)
        code = "OK"
    except grpc.RpcError as e:
        code = f"{e.code().name}: {e.details()}"
    done.set()
    idle_done.set()
    watcher.join(timeout=30)
    channel.close()
    idle_channel.close()
    return {"code": code, "tokens": tokens, "final": last, "idle": idle_outcome}


if __name__ == "__main__":
    mode, port, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    arg = int(sys.argv[4]) if len(sys.argv) > 4 else None
    result = {"unread": lambda: unread(port, model, arg),
              "idle": lambda: idle(port, model, arg),
              "bad": lambda: bad(port, model, arg),
              "drain": lambda: drain(port, model)}[mode]()
    print(json.dumps(result), flush=True)
