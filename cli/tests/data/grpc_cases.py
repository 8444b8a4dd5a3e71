"""gRPC requests written with tritonclient's own protocol messages (its generated
`service_pb2`, the real KServe v2 proto), for the cases tritonclient's InferenceServerClient
never sends: typed contents of each kind, raw and typed together, odd parameters, versions,
long names. cli/tests/serve_hostile.rs runs it and checks the answers.

`python grpc_cases.py GRPC_PORT < CASES_JSON`; prints a JSON list, one answer per case:
{"code": "OK" | "INVALID_ARGUMENT" | ..., "message": ..., "outputs": [...], "id": ...}"""
import json
import sys

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

port, cases = sys.argv[1], json.load(sys.stdin)
channel = grpc.insecure_channel(
    f"127.0.0.1:{port}",
    options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
)
stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)


def parameter(p, value):
    # {"int64_param": 1} / {"string_param": "x"} / ...
    (kind, v), = value.items()
    setattr(p, kind, v)


def infer_request(case):
    r = service_pb2.ModelInferRequest(model_name=case["model"] * case.get("repeat", 1),
                                      model_version=case.get("version", ""), id=case.get("id", ""))
    for k, v in case.get("parameters", {}).items():
        parameter(r.parameters[k], v)
    for i in case.get("inputs", []):
        t = r.inputs.add(name=i["name"], datatype=i["datatype"], shape=i["shape"])
        for field, values in i.get("contents", {}).items():
            getattr(t.contents, field).extend(values)
    for raw in case.get("raw", []):
        r.raw_input_contents.append(bytes.fromhex(raw))
    for n in case.get("raw_zeros", []):
        r.raw_input_contents.append(bytes(n))
    for o in case.get("outputs", []):
        out = r.outputs.add(name=o["name"])
        for k, v in o.get("parameters", {}).items():
            parameter(out.parameters[k], v)
    return r


def run(case):
    method = case.get("method", "ModelInfer")
    try:
        if method == "ModelInfer":
            a = stub.ModelInfer(infer_request(case), timeout=case.get("deadline", 60))
            return {"code": "OK", "id": a.id, "model_version": a.model_version,
                    "outputs": [{"name": o.name, "datatype": o.datatype, "shape": list(o.shape),
                                 "raw": raw.hex()}
                                for o, raw in zip(a.outputs, a.raw_output_contents)]}
        if method == "ModelReady":
            a = stub.ModelReady(service_pb2.ModelReadyRequest(
                name=case["model"], version=case.get("version", "")))
            return {"code": "OK", "ready": a.ready}
        if method == "ModelMetadata":
            a = stub.ModelMetadata(service_pb2.ModelMetadataRequest(
                name=case["model"], version=case.get("version", "")))
            return {"code": "OK", "name": a.name, "versions": list(a.versions),
                    "inputs": [t.name for t in a.inputs], "outputs": [t.name for t in a.outputs]}
        if method == "ModelConfig":
            a = stub.ModelConfig(service_pb2.ModelConfigRequest(
                name=case["model"], version=case.get("version", "")))
            return {"code": "OK", "inputs": [t.name for t in a.config.input],
                    "outputs": [t.name for t in a.config.output]}
        raise ValueError(method)
    except grpc.RpcError as e:
        return {"code": e.code().name, "message": e.details() or ""}


print(json.dumps([run(c) for c in cases]))
