"""The client `scripts/main --serve` drives the server with: tritonclient's HTTP and gRPC
clients (the venv scripts/triton-venv makes), CONCURRENT of them (half each protocol) for
SECONDS, one one-sequence request in flight each, every answer checked against JAX's recorded
logits. Prints requests/s and latency percentiles per protocol; exits 1 on a wrong answer.

`python kserve_client.py HTTP_PORT GRPC_PORT REQUESTS_NPZ [CONCURRENT [SECONDS]]`"""
import sys
import threading
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

http_port, grpc_port, npz = sys.argv[1], sys.argv[2], np.load(sys.argv[3])
concurrent = int(sys.argv[4]) if len(sys.argv) > 4 else 16
seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 10.0
tokens, logits = npz["tokens"], npz["logits"]
latencies = {"http": [], "grpc": []}
wrong = []


def run(k):
    protocol = "grpc" if k % 2 else "http"
    if protocol == "grpc":
        client, mod = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}"), grpcclient
    else:
        client, mod = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}"), httpclient
    stop, i = time.monotonic() + seconds, k
    while time.monotonic() < stop:
        r = i % len(tokens)
        x = mod.InferInput("tokens", [1, 8], "INT32")
        x.set_data_from_numpy(tokens[r:r + 1])
        t = time.perf_counter()
        got = client.infer("lm", [x]).as_numpy("output0")
        latencies[protocol].append(time.perf_counter() - t)
        want = logits[r:r + 1]
        if np.abs(got - want).max() > 1e-4 * np.abs(want).max():
            wrong.append(r)
        i += concurrent


threads = [threading.Thread(target=run, args=(k,)) for k in range(concurrent)]
for t in threads:
    t.start()
for t in threads:
    t.join()
total = 0
for protocol, lat in latencies.items():
    lat = np.array(lat) * 1e6
    total += len(lat)
    print(f"{protocol:>5}: {len(lat) / seconds:8.0f} requests/s  p50 {np.percentile(lat, 50):8.0f} us"
          f"  p99 {np.percentile(lat, 99):8.0f} us  ({concurrent // 2} clients)")
print(f"checked {total} answers against JAX's recorded logits: {len(wrong)} wrong")
sys.exit(1 if wrong or total == 0 else 0)
