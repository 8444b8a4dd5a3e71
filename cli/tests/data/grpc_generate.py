"""Generation requests on one raw `ModelStreamInfer` stream (grpcio and Triton's generated
`service_pb2`): each request's tokens, finish reason and error, by its index. Parameters are
given as the stream takes them: whole numbers as int64, numbers as double, `stop` as a string of
ids. `python grpc_generate.py GRPC_PORT MODEL REQUESTS_JSON` (a list of {"prompt", "params"})."""
import json
import sys

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc


def request(model, k, prompt, params):
    r = service_pb2.ModelInferRequest(model_name=model, id=str(k))
    for name, value in params.items():
        if name == "stop":
            r.parameters[name].string_param = ",".join(str(t) for t in value)
        elif isinstance(value, int):
            r.parameters[name].int64_param = value
        else:
            r.parameters[name].double_param = value
    t = r.inputs.add(name="input_ids", datatype="INT32", shape=[len(prompt)])
    t.contents.int_contents.extend(prompt)
    return r


def main(port, model, requests):
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    out = [{"tokens": [], "finish": None, "error": ""} for _ in requests]
    calls = (request(model, k, r["prompt"], r["params"]) for k, r in enumerate(requests))
    for response in stub.ModelStreamInfer(calls, timeout=120):
        r = response.infer_response
        a = out[int(r.id)]
        if response.error_message:
            a["error"] = response.error_message
        elif r.parameters["triton_final_response"].bool_param:
            a["finish"] = r.parameters["finish_reason"].string_param
        else:
            a["tokens"].append(int.from_bytes(r.raw_output_contents[0], "little", signed=True))
    channel.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]))
