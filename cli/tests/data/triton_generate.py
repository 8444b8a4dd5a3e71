"""tritonclient's gRPC streaming client against `pjrt-actors serve` with a generation model:
every prompt of greedy.json sent on one stream (`start_stream`, `async_stream_infer`, a
response per token and an empty final one), the tokens compared with JAX's; then a stream
closed after its first token (on LONG_MODEL, default `lm`: a model whose cache lets a sequence
run far longer than the test), and a request after it that must still finish (its slot freed);
and bad requests on a stream, each answered with its error.
Prints one JSON line. `python triton_generate.py GRPC_PORT GREEDY_JSON COUNT [LONG_MODEL]`"""
import json
import queue
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient


def main(port, greedy_path, count, long_model="lm"):
    greedy = json.load(open(greedy_path))
    cases = greedy["cases"][:count]
    url = f"127.0.0.1:{port}"
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    for k, case in enumerate(cases):
        ids = np.array([case["prompt"]], dtype=np.int32)
        x = grpcclient.InferInput("input_ids", list(ids.shape), "INT32")
        x.set_data_from_numpy(ids)
        client.async_stream_infer("lm", [x], request_id=str(k), enable_empty_final_response=True,
                                  parameters={"max_tokens": greedy["max_new"]})
    tokens = {str(k): [] for k in range(len(cases))}
    finished, finishes, errors = set(), {}, []
    deadline = time.time() + 120
    while len(finished) < len(cases) and time.time() < deadline:
        result, error = answers.get(timeout=120)
        if error is not None:
            errors.append(str(error))
            break
        r = result.get_response()
        params = r.parameters
        if params["triton_final_response"].bool_param:
            finished.add(r.id)
            finishes[r.id] = params["finish_reason"].string_param
            continue
        tokens[r.id].append(int(result.as_numpy("output_ids")[0]))
    client.stop_stream()
    stop = greedy["stop"]
    wrong = []
    for k, case in enumerate(cases):
        want = case["tokens"]
        got = tokens[str(k)]
        if got != want:
            wrong.append({"prompt": case["prompt"], "want": want, "got": got})

    # A client that goes away mid-stream: its sequence is cancelled and its slot freed.
    first = queue.Queue()
    gone = grpcclient.InferenceServerClient(url)
    gone.start_stream(callback=lambda result, error: first.put((result, error)))
    for k in range(4):
        x = grpcclient.InferInput("input_ids", [1, 3], "INT32")
        x.set_data_from_numpy(np.array([[5, 6, 7]], dtype=np.int32))
        gone.async_stream_infer(long_model, [x], request_id=f"long{k}", parameters={"max_tokens": 100000})
    first.get(timeout=60)
    gone.stop_stream(cancel_requests=True)
    gone.close()
    after = queue.Queue()
    later = grpcclient.InferenceServerClient(url)
    later.start_stream(callback=lambda result, error: after.put((result, error)))
    x = grpcclient.InferInput("input_ids", [1, len(cases[0]["prompt"])], "INT32")
    x.set_data_from_numpy(np.array([cases[0]["prompt"]], dtype=np.int32))
    later.async_stream_infer("lm", [x], request_id="after", enable_empty_final_response=True,
                             parameters={"max_tokens": 3})
    after_tokens, after_done = [], False
    end = time.time() + 60
    while not after_done and time.time() < end:
        result, error = after.get(timeout=60)
        if error is not None:
            errors.append(str(error))
            break
        if result.get_response().parameters["triton_final_response"].bool_param:
            after_done = True
        else:
            after_tokens.append(int(result.as_numpy("output_ids")[0]))
    later.stop_stream()

    # Bad requests on a stream: each answered with its error, the stream going on.
    refused = queue.Queue()
    bad = grpcclient.InferenceServerClient(url)
    bad.start_stream(callback=lambda result, error: refused.put((result, error)))
    x = grpcclient.InferInput("tokens", [1, 2], "INT32")
    x.set_data_from_numpy(np.array([[1, 2]], dtype=np.int32))
    bad.async_stream_infer("lm", [x], request_id="wrong-name")
    y = grpcclient.InferInput("input_ids", [1, 2], "INT32")
    y.set_data_from_numpy(np.array([[1, 2]], dtype=np.int32))
    bad.async_stream_infer("nope", [y], request_id="wrong-model")
    bad.async_stream_infer("lm", [y], request_id="bad-temperature",
                           parameters={"temperature": "hot"})
    refusals = []
    for _ in range(3):
        result, error = refused.get(timeout=60)
        refusals.append(str(error) if error is not None else "answered")
    bad.stop_stream()
    expected = ["input_ids", "no generation model", "temperature"]
    refused_ok = all(any(e in r for r in refusals) for e in expected)

    ok = not wrong and not errors and len(finished) == len(cases) and after_done \
        and after_tokens == cases[0]["tokens"][:3] and refused_ok
    print(json.dumps({"ok": ok, "streams": len(finished), "wrong": wrong[:3], "errors": errors,
                      "finishes": sorted(set(finishes.values())), "after": after_tokens,
                      "stop": stop, "refusals": refusals}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), *sys.argv[4:5])
