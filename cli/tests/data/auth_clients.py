"""Real clients against `pjrt-actors serve --api-key-file` (cli/tests/serve_auth.rs starts it
and runs this): tritonclient's HTTP and gRPC clients without a key (the probes answer, every
other route is refused: 401 / UNAUTHENTICATED), with a wrong key, and with a right one sent as
`Authorization: Bearer` headers or gRPC metadata (inference checked against JAX's logits); and
OpenAI's own client with `api_key=`, right and wrong. Prints one JSON line of what it saw;
exits 1 on a failure.

`python auth_clients.py HTTP_PORT GRPC_PORT REQUESTS_NPZ KEY GENERATION_MODEL [OPENAI=1]`"""
import json
import sys

from checks import checked, close, expect, failure, recorded

http_port, grpc_port, requests_npz, key, gen_model = sys.argv[1:6]
with_openai = len(sys.argv) > 6
MODEL = "lm"


if not with_openai:
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    tokens, logits = recorded(requests_npz)

    def http_infer(client, headers=None):
        t = httpclient.InferInput("tokens", [1, 8], "INT32")
        t.set_data_from_numpy(tokens[:1].astype(np.int32))
        return client.infer(MODEL, [t], headers=headers).as_numpy(OUTPUT)

    def grpc_infer(client, headers=None):
        t = grpcclient.InferInput("tokens", [1, 8], "INT32")
        t.set_data_from_numpy(tokens[:1].astype(np.int32))
        return client.infer(MODEL, [t], headers=headers).as_numpy(OUTPUT)

    http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    right = {"Authorization": f"Bearer {key}"}
    wrong = {"Authorization": f"Bearer {key}x"}
    grpc_right = {"authorization": f"Bearer {key}"}
    grpc_wrong = {"authorization": "Bearer nope"}

    # The probes stay open.
    expect(http.is_server_live() and http.is_server_ready(), "http probes open")
    expect(http.is_model_ready(MODEL), "http model ready open")
    expect(grpc.is_server_live() and grpc.is_server_ready(), "grpc probes open")
    expect(grpc.is_model_ready(MODEL), "grpc model ready open")

    # Everything else needs the key.
    for what, headers in [("none", None), ("wrong", wrong)]:
        for route, call in [
            ("infer", lambda: http_infer(http, headers)),
            ("metadata", lambda: http.get_model_metadata(MODEL, headers=headers)),
            ("config", lambda: http.get_model_config(MODEL, headers=headers)),
            ("statistics", lambda: http.get_inference_statistics(MODEL, headers=headers)),
            ("repository", lambda: http.get_model_repository_index(headers=headers)),
            ("server metadata", lambda: http.get_server_metadata(headers=headers)),
        ]:
            err = failure(call)
            expect(err is not None and "401" in err, f"http {route} refused ({what} key): {err}")
    for what, headers in [("none", None), ("wrong", grpc_wrong)]:
        for route, call in [
            ("infer", lambda: grpc_infer(grpc, headers)),
            ("metadata", lambda: grpc.get_model_metadata(MODEL, headers=headers)),
            ("config", lambda: grpc.get_model_config(MODEL, headers=headers)),
            ("statistics", lambda: grpc.get_inference_statistics(MODEL, headers=headers)),
            ("repository", lambda: grpc.get_model_repository_index(headers=headers)),
        ]:
            err = failure(call)
            expect(err is not None and "UNAUTHENTICATED" in err,
                   f"grpc {route} refused ({what} key): {err}")

    # With the key: real answers.
    meta = http.get_model_metadata(MODEL, headers=right)
    OUTPUT = meta["outputs"][0]["name"]
    expect(close(http_infer(http, right), logits[:1]), "http infer with the key")
    expect(meta["name"] == MODEL, "http metadata with the key")
    expect(close(grpc_infer(grpc, grpc_right), logits[:1]), "grpc infer with the key")
    expect(grpc.get_model_metadata(MODEL, headers=grpc_right).name == MODEL,
           "grpc metadata with the key")
    expect(len(http.get_model_repository_index(headers=right)) >= 2, "http repository with the key")
else:
    import openai

    base = f"http://127.0.0.1:{http_port}/v1"
    good = openai.OpenAI(base_url=base, api_key=key, max_retries=0)
    bad = openai.OpenAI(base_url=base, api_key="not-the-key", max_retries=0)
    ids = [m.id for m in good.models.list().data]
    expect(gen_model in ids, f"openai models with the key: {ids}")
    r = good.completions.create(model=gen_model, prompt="The", max_tokens=4, temperature=0)
    expect(r.usage.completion_tokens >= 1 and isinstance(r.choices[0].text, str),
           "openai completion with the key")
    for route, call in [
        ("models", lambda: bad.models.list()),
        ("completions", lambda: bad.completions.create(model=gen_model, prompt="The", max_tokens=4)),
        ("chat", lambda: bad.chat.completions.create(
            model=gen_model, messages=[{"role": "user", "content": "hi"}], max_tokens=4)),
    ]:
        try:
            call()
            expect(False, f"openai {route} with a wrong key was answered")
        except openai.AuthenticationError as e:
            expect(e.status_code == 401 and e.code == "invalid_api_key",
                   f"openai {route} refused: {e.status_code} {e.code}")
    checked["completion_tokens"] = r.usage.completion_tokens
    checked["prompt_tokens"] = r.usage.prompt_tokens

print(json.dumps({"checked": checked}), flush=True)
