"""A generation model seen by Triton's own clients on every endpoint a model has: readiness,
metadata, config and statistics over HTTP (tritonclient.http) and gRPC (tritonclient.grpc),
a version it lacks refused on each; then `ModelStreamInfer` requests on raw grpcio streams (the
generated `service_pb2`, so each response's id can be read) with a stop list, and requests each
refused with its own id: an unknown parameter, a version the model lacks, input_ids in two
contents fields at once. Prints one JSON line of what it saw; cli/tests/generate_endpoints.rs
checks it. `python generation_endpoints.py HTTP_PORT GRPC_PORT MODEL PROMPT STOP_ID`"""
import json
import sys

import grpc
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException


def refused(call):
    try:
        call()
        return "answered"
    except InferenceServerException as e:
        return str(e)


def endpoints(http_port, grpc_port, model):
    h = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    g = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    stats_h = h.get_inference_statistics(model)["model_stats"][0]
    stats_g = g.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return {
        "ready": [h.is_model_ready(model), g.is_model_ready(model),
                  h.is_model_ready(model, "1"), g.is_model_ready(model, "1")],
        "metadata_http": h.get_model_metadata(model),
        "metadata_grpc": g.get_model_metadata(model, as_json=True),
        "config_http": h.get_model_config(model),
        "config_grpc": g.get_model_config(model, as_json=True)["config"],
        "stats_http": stats_h,
        "stats_grpc": stats_g,
        "every_model": sorted(s["name"] for s in h.get_inference_statistics()["model_stats"]),
        "index_http": sorted((m["name"], m["state"]) for m in h.get_model_repository_index()),
        "index_grpc": sorted((m["name"], m["state"])
                             for m in g.get_model_repository_index(as_json=True)["models"]),
        # tritonclient.http answers False for a status that is not 200, and raises nothing.
        "ready_version_2_http": h.is_model_ready(model, "2"),
        "version_2": [
            refused(lambda: g.is_model_ready(model, "2")),
            refused(lambda: h.get_model_metadata(model, "2")),
            refused(lambda: g.get_model_metadata(model, "2")),
            refused(lambda: h.get_model_config(model, "2")),
            refused(lambda: g.get_model_config(model, "2")),
            refused(lambda: h.get_inference_statistics(model, "2")),
            refused(lambda: g.get_inference_statistics(model, "2")),
        ],
    }


def request(model, prompt, rid, version="", params=None, two_contents=False):
    r = service_pb2.ModelInferRequest(model_name=model, model_version=version, id=rid)
    for name, value in (params or {}).items():
        if isinstance(value, bool):
            r.parameters[name].bool_param = value
        elif isinstance(value, int):
            r.parameters[name].int64_param = value
        else:
            r.parameters[name].string_param = value
    t = r.inputs.add(name="input_ids", datatype="INT32", shape=[len(prompt)])
    t.contents.int_contents.extend(prompt)
    if two_contents:
        t.contents.int64_contents.extend(prompt)
    return r


def stream(grpc_port, model, prompt, stop_id):
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    requests = [
        request(model, prompt, "stopped", params={"max_tokens": 12, "stop": f"[{stop_id}]"}),
        request(model, prompt, "one-stop", params={"max_tokens": 12, "stop": stop_id}),
        request(model, prompt, "unknown", params={"max_tokens": 12, "beam_width": 4}),
        request(model, prompt, "version", version="2", params={"max_tokens": 2}),
        request(model, prompt, "two-contents", params={"max_tokens": 2}, two_contents=True),
    ]
    answers = {}
    for response in stub.ModelStreamInfer(iter(requests), timeout=60):
        r = response.infer_response
        a = answers.setdefault(r.id, {"tokens": [], "error": "", "finish": None})
        if response.error_message:
            a["error"] = response.error_message
            a["model"] = r.model_name
        elif r.parameters["triton_final_response"].bool_param:
            a["finish"] = r.parameters["finish_reason"].string_param
        else:
            a["tokens"].append(int.from_bytes(r.raw_output_contents[0], "little", signed=True))
    channel.close()
    return answers


if __name__ == "__main__":
    http_port, grpc_port, model = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    prompt = [int(t) for t in sys.argv[4].split(",")]
    stop_id = int(sys.argv[5])
    print(json.dumps({**endpoints(http_port, grpc_port, model),
                      "stream": stream(grpc_port, model, prompt, stop_id)}))
