"""What the client scripts share: a check that ends the script naming what failed and tallies
what passed (`checked`, for the script's last JSON line), a call's failure as text, and JAX's
recorded requests for the served transformer with the closeness their answers are held to.
numpy is imported only where used: the OpenAI venv has none."""
import json
import sys

checked = {}


def expect(cond, what):
    if not cond:
        print(json.dumps({"failed": what}), flush=True)
        sys.exit(1)
    checked[what] = checked.get(what, 0) + 1


def failure(call):
    """The error a call raised, as text (a tritonclient error's status and message), or None
    if it succeeded."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - each client raises its own type
        status = getattr(e, "status", None)
        status = status() if callable(status) else status
        message = getattr(e, "message", None)
        message = message() if callable(message) else message
        return f"{status} {message or e or type(e).__name__}"
    return None


def recorded(npz):
    """The recorded one-sequence requests' tokens and JAX's logits for them."""
    import numpy as np
    r = np.load(npz)
    return r["tokens"], r["logits"]


def close(got, want):
    """Whether served logits are JAX's: the same shape, within 1e-4 of the largest."""
    import numpy as np
    return got.shape == want.shape and np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
