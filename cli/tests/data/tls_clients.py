"""tritonclient's HTTP and gRPC clients against `pjrt-actors serve --tls-cert/--tls-key`
(cli/tests/serve_tls.rs makes the certificates and starts it): over HTTPS and gRPC with TLS,
trusting the test's CA, inference checked against JAX's logits; clients trusting another CA
refused. With CLIENT_PEM and CLIENT_KEY (the server given --tls-client-ca): the gRPC client
with its certificate answered, without one refused. Prints one JSON line; exits 1 on a failure.

`python tls_clients.py HTTP_PORT GRPC_PORT REQUESTS_NPZ CA_PEM OTHER_CA_PEM [CLIENT_PEM CLIENT_KEY]`"""
import json
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from checks import checked, close, expect, failure, recorded

http_port, grpc_port, requests_npz, ca, other_ca = sys.argv[1:6]
client_pem, client_key = (sys.argv[6], sys.argv[7]) if len(sys.argv) > 7 else (None, None)
MODEL = "lm"
tokens, logits = recorded(requests_npz)


def infer(module, client):
    t = module.InferInput("tokens", [2, 8], "INT32")
    t.set_data_from_numpy(tokens[:2].astype(np.int32))
    meta = client.get_model_metadata(MODEL)
    name = meta["outputs"][0]["name"] if isinstance(meta, dict) else meta.outputs[0].name
    return client.infer(MODEL, [t]).as_numpy(name)


def grpc_client(root, with_cert=True):
    kw = dict(ssl=True, root_certificates=root)
    if client_pem and with_cert:
        kw.update(private_key=client_key, certificate_chain=client_pem)
    return grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}", **kw)


grpc = grpc_client(ca)
expect(grpc.is_server_ready(), "grpc over TLS ready")
expect(close(infer(grpcclient, grpc), logits[:2]), "grpc over TLS infer")
err = failure(lambda: grpc_client(other_ca).is_server_live())
expect(err is not None, "grpc trusting another CA refused")
checked["grpc other CA"] = err
if client_pem:
    err = failure(lambda: grpc_client(ca, with_cert=False).is_server_live())
    expect(err is not None, "grpc without a client certificate refused")
    checked["grpc no client cert"] = err
else:
    https = httpclient.InferenceServerClient(
        f"127.0.0.1:{http_port}", ssl=True, ssl_options={"ca_certs": ca})
    expect(https.is_server_ready(), "https ready")
    expect(close(infer(httpclient, https), logits[:2]), "https infer")
    other = httpclient.InferenceServerClient(
        f"127.0.0.1:{http_port}", ssl=True, ssl_options={"ca_certs": other_ca})
    err = failure(lambda: other.is_server_live())
    expect(err is not None, "https trusting another CA refused")
    checked["https other CA"] = err

print(json.dumps({"checked": checked}), flush=True)
