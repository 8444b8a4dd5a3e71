"""KServe's Python model server (kserve.ModelServer, the v2 protocol over REST) serving the
exported transformer in JAX. `python kserve_lm.py HTTP_PORT GRPC_PORT`"""
import sys

from kserve import InferOutput, InferRequest, InferResponse, Model, ModelServer

from jax_lm import TransformerLM


class LM(Model):
    def __init__(self):
        super().__init__("lm")
        self.lm = TransformerLM()
        self.ready = True

    def predict(self, payload: InferRequest, headers=None):
        logits = self.lm.predict(payload.inputs[0].as_numpy())
        out = InferOutput(name="output0", shape=list(logits.shape), datatype="FP32")
        out.set_data_from_numpy(logits, binary_data=False)
        return InferResponse(model_name=self.name, infer_outputs=[out], response_id=payload.id or "")


if __name__ == "__main__":
    ModelServer(http_port=int(sys.argv[1]), grpc_port=int(sys.argv[2]), workers=1).start([LM()])
