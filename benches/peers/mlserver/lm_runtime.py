"""MLServer's runtime for the exported transformer in JAX (scripts/peers serves it with
`mlserver start`)."""
import sys
import os

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from mlserver import MLModel  # noqa: E402
from mlserver.codecs import NumpyCodec  # noqa: E402
from mlserver.types import InferenceRequest, InferenceResponse  # noqa: E402

from jax_lm import TransformerLM  # noqa: E402


class LM(MLModel):
    async def load(self) -> bool:
        self.lm = TransformerLM()
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        tokens = NumpyCodec.decode_input(payload.inputs[0])
        logits = self.lm.predict(tokens)
        return InferenceResponse(
            model_name=self.name,
            id=payload.id,
            outputs=[NumpyCodec.encode_output("output0", logits)],
        )
