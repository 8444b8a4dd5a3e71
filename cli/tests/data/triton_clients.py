"""Real KServe v2 clients (tritonclient's HTTP and gRPC clients, pinned by scripts/triton-venv)
against a running `pjrt-actors serve` of the exported transformer (cli/tests/serve.rs starts
it and runs this): metadata, readiness, JSON and binary inference over HTTP, gRPC inference,
each protocol error, then many concurrent clients for a bounded time, every answer checked
against JAX's recorded logits, then Triton's model configuration and statistics. Prints one JSON line of what it checked; exits 1 on a failure.

`python triton_clients.py HTTP_PORT GRPC_PORT REQUESTS_NPZ [CONCURRENT SECONDS]`"""
import json
import sys
import threading
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from checks import checked, expect, recorded
from checks import close as close_to

http_port, grpc_port, requests_npz = sys.argv[1], sys.argv[2], sys.argv[3]
concurrent = int(sys.argv[4]) if len(sys.argv) > 4 else 64
seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 3.0
MODEL = "lm"
tokens, logits = recorded(requests_npz)


def close(got, r):
    """Whether `got` is JAX's answer to the rows from `r`."""
    return close_to(got, logits[r:r + len(got)])


def refused(call, status_words):
    try:
        call()
    except InferenceServerException as e:
        text = (str(e.status()) + " " + e.message()).lower()
        return any(w.lower() in text for w in status_words), text
    return False, "no error"


http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")

# Health and metadata, both protocols.
expect(http.is_server_live() and http.is_server_ready(), "http health")
expect(http.is_model_ready(MODEL), "http model ready")
expect(not http.is_model_ready("nope"), "http unknown model not ready")
meta = http.get_model_metadata(MODEL)
expect(meta["inputs"][0]["name"] == "tokens" and meta["inputs"][0]["datatype"] == "INT32"
       and meta["inputs"][0]["shape"] == [-1, 8], f"http metadata {meta}")
expect(meta["outputs"][0]["datatype"] == "FP32" and meta["outputs"][0]["shape"] == [-1, 64],
       "http output metadata")
expect(http.get_server_metadata()["name"] == "pjrt-actors", "http server metadata")
expect(grpc.is_server_live() and grpc.is_server_ready() and grpc.is_model_ready(MODEL),
       "grpc health")
gmeta = grpc.get_model_metadata(MODEL)
expect(gmeta.inputs[0].name == "tokens" and list(gmeta.inputs[0].shape) == [-1, 8],
       "grpc metadata")


def http_infer(rows, r, binary):
    x = httpclient.InferInput("tokens", list(rows.shape), "INT32")
    x.set_data_from_numpy(rows, binary_data=binary)
    out = httpclient.InferRequestedOutput(meta["outputs"][0]["name"], binary_data=binary)
    return http.infer(MODEL, [x], outputs=[out]).as_numpy(meta["outputs"][0]["name"])


def grpc_infer(client, rows):
    x = grpcclient.InferInput("tokens", list(rows.shape), "INT32")
    x.set_data_from_numpy(rows)
    return client.infer(MODEL, [x]).as_numpy(meta["outputs"][0]["name"])


# One and several rows, JSON and binary tensors, and gRPC.
for r, n in ((0, 1), (5, 3), (20, 16)):
    expect(close(http_infer(tokens[r:r + n], r, True), r), "http binary inference")
    expect(close(http_infer(tokens[r:r + n], r, False), r), "http json inference")
    expect(close(grpc_infer(grpc, tokens[r:r + n]), r), "grpc inference")
# The default: outputs not named, all returned (binary, as tritonclient asks).
x = httpclient.InferInput("tokens", [1, 8], "INT32")
x.set_data_from_numpy(tokens[:1])
expect(close(http.infer(MODEL, [x]).as_numpy(meta["outputs"][0]["name"]), 0),
       "http inference, outputs not named")

# Every error the protocol says, as its status.
def bad_input(name="tokens", shape=(1, 8), dtype="INT32", data=None, model=MODEL, client="http"):
    data = tokens[:shape[0]] if data is None else data
    mod = httpclient if client == "http" else grpcclient
    x = mod.InferInput(name, list(shape), dtype)
    x.set_data_from_numpy(data)
    c = http if client == "http" else grpc
    return lambda: c.infer(model, [x])


for client in ("http", "grpc"):
    ok, text = refused(bad_input(model="nope", client=client), ["404", "not_found", "unknown model"])
    expect(ok, f"{client} unknown model: {text}")
    ok, text = refused(bad_input(name="wrong", client=client), ["400", "invalid", "input"])
    expect(ok, f"{client} wrong input name: {text}")
    ok, text = refused(bad_input(dtype="FP32", data=tokens[:1].astype(np.float32), client=client),
                       ["400", "invalid", "datatype"])
    expect(ok, f"{client} wrong datatype: {text}")
    ok, text = refused(bad_input(shape=(1, 7), data=tokens[:1, :7], client=client),
                       ["400", "invalid", "shape"])
    expect(ok, f"{client} wrong shape: {text}")
    ok, text = refused(bad_input(shape=(17, 8), data=np.zeros((17, 8), np.int32), client=client),
                       ["400", "invalid", "max_batch_size"])
    expect(ok, f"{client} batch over the limit: {text}")

# Many concurrent clients for a bounded time, every answer checked (half HTTP, half gRPC).
stop = time.monotonic() + seconds
wrong, done, errors = [], [0] * concurrent, []


def client_loop(k):
    try:
        mine = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}") if k % 2 else \
            httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        i = k
        while time.monotonic() < stop:
            r = i % len(tokens)
            rows = tokens[r:r + 1]
            if k % 2:
                got = grpc_infer(mine, rows)
            else:
                x = httpclient.InferInput("tokens", [1, 8], "INT32")
                x.set_data_from_numpy(rows)
                got = mine.infer(MODEL, [x]).as_numpy(meta["outputs"][0]["name"])
            if not close(got, r):
                wrong.append(r)
            done[k] += 1
            i += concurrent
    except Exception as e:  # noqa: BLE001
        errors.append(repr(e))


threads = [threading.Thread(target=client_loop, args=(k,)) for k in range(concurrent)]
for t in threads:
    t.start()
for t in threads:
    t.join()
expect(not errors, f"concurrent clients failed: {errors[:3]}")
expect(not wrong, f"wrong answers: {wrong[:5]}")
expect(all(d > 0 for d in done), "every concurrent client answered")
# Triton's model configuration and statistics, read by its own clients over both protocols.
config = http.get_model_config(MODEL)
expect(config["name"] == MODEL and config["max_batch_size"] == 16
       and config["input"][0]["data_type"] == "TYPE_INT32" and config["input"][0]["dims"] == [8]
       and config["output"][0]["data_type"] == "TYPE_FP32" and config["output"][0]["dims"] == [64]
       and config["instance_group"][0]["kind"] == "KIND_CPU"
       and 16 in config["dynamic_batching"]["preferred_batch_size"], f"http model config {config}")
gconfig = grpc.get_model_config(MODEL).config
expect(gconfig.name == MODEL and gconfig.max_batch_size == 16 and gconfig.input[0].data_type == 8
       and list(gconfig.input[0].dims) == [8] and gconfig.output[0].name == meta["outputs"][0]["name"],
       f"grpc model config {gconfig}")
answered = sum(done)
stats = http.get_inference_statistics(MODEL)["model_stats"][0]
inference = stats["inference_stats"]
# Every request this script made that the model ran counts as a success: at least the
# concurrent ones; each has a queue and compute time; batches are fewer than rows inferred.
expect(stats["name"] == MODEL and inference["success"]["count"] >= answered
       and inference["queue"]["count"] >= answered and inference["compute_infer"]["ns"] > 0
       and 0 < stats["execution_count"] <= stats["inference_count"]
       and inference["success"]["ns"] >= inference["compute_infer"]["ns"] / 16
       and stats["batch_stats"] and stats["last_inference"] > 0, f"http statistics {stats}")
gstats = grpc.get_inference_statistics(MODEL).model_stats[0]
expect(gstats.inference_stats.success.count >= inference["success"]["count"]
       and gstats.execution_count >= stats["execution_count"], f"grpc statistics {gstats}")
all_stats = http.get_inference_statistics()["model_stats"]
expect([m["name"] for m in all_stats] == [MODEL], "statistics of every model")
ok, text = refused(lambda: http.get_model_config("nope"), ["404", "unknown model"])
expect(ok, f"http config of an unknown model: {text}")
ok, text = refused(lambda: grpc.get_inference_statistics("nope"), ["not_found", "unknown model"])
expect(ok, f"grpc statistics of an unknown model: {text}")
metrics = __import__("urllib.request").request.urlopen(f"http://127.0.0.1:{http_port}/metrics").read()
expect(b'model="lm"' in metrics, "metrics by model")
print(json.dumps({"ok": True, "concurrent_answers": sum(done), "checked": checked}), flush=True)
