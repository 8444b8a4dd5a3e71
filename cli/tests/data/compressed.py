"""tritonclient's HTTP client sending compressed request bodies (request_compression_algorithm
gzip and deflate, and none) to `pjrt-actors serve`, as Triton takes them; cli/tests/serve_streams.rs
runs it. `python compressed.py HTTP_PORT MODEL`: one JSON line, each algorithm's output0."""
import json
import sys

import numpy as np
import tritonclient.http as httpclient

port, model = sys.argv[1], sys.argv[2]
client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
x = np.arange(8, dtype=np.float32).reshape(4, 2)
outputs = {}
for algorithm in ["gzip", "deflate", None]:
    for binary in [True, False]:
        given = httpclient.InferInput("input0", [4, 2], "FP32")
        given.set_data_from_numpy(x, binary_data=binary)
        answer = client.infer(model, [given], request_compression_algorithm=algorithm)
        outputs[f"{algorithm}/{'binary' if binary else 'json'}"] = answer.as_numpy("output0").tolist()
print(json.dumps({"input": x.tolist(), "outputs": outputs}))
