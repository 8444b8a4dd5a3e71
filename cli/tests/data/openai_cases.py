"""OpenAI's own Python client (`openai`, scripts/openai-venv) against `pjrt-actors serve`'s
OpenAI routes: every case JAX recorded for the text model (text_cases.json: completions, chats,
stop strings), plain and streamed, all at once (past the model's four decode slots; the streamed
ones after the plain ones, so each finds its prompt in the prefix cache); the model
list; each token's log-probabilities, plain and streamed; refusals in OpenAI's shape; and a stream closed after its first chunk on LONG_MODEL (a
model whose cache lets a sequence run far longer than the test). Prints one JSON line of what
it saw; cli/tests/openai.rs checks it.
`python openai_cases.py HTTP_PORT MODEL CASES_JSON IDS_ONLY_MODEL LONG_MODEL`"""
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import openai


def usage_of(u):
    """Prompt, completion and cached prompt tokens (`prompt_tokens_details.cached_tokens`)."""
    return [u.prompt_tokens, u.completion_tokens, u.prompt_tokens_details.cached_tokens]


def run(client, model, case, stream):
    args = dict(model=model, max_tokens=12, temperature=0)
    if "stop" in case:
        args["stop"] = case["stop"]
    chat = case["kind"].startswith("chat")
    if chat:
        call = lambda **a: client.chat.completions.create(messages=case["messages"], **a)
    else:
        call = lambda **a: client.completions.create(prompt=case["prompt"], **a)
    if not stream:
        r = call(**args)
        c = r.choices[0]
        text = c.message.content if chat else c.text
        return {"text": text, "finish": c.finish_reason, "usage": usage_of(r.usage),
                "object": r.object}
    deltas, finish, usage, roles = [], None, None, []
    for chunk in call(stream=True, stream_options={"include_usage": True}, **args):
        if chunk.usage is not None:
            usage = usage_of(chunk.usage)
        for c in chunk.choices:
            if chat:
                if c.delta.role:
                    roles.append(c.delta.role)
                if c.delta.content:
                    deltas.append(c.delta.content)
            elif c.text:
                deltas.append(c.text)
            if c.finish_reason:
                finish = c.finish_reason
    return {"text": "".join(deltas), "finish": finish, "usage": usage, "deltas": len(deltas),
            "roles": roles}


def logprobs(client, model, case, stream):
    """A case asked with log-probabilities (a chat's top_logprobs 3, a completion's logprobs 3):
    each token's log-probability and its three alternatives' text, in order."""
    chat = case["kind"].startswith("chat")
    args = dict(model=model, max_tokens=12, temperature=0, stream=stream)
    if chat:
        call = lambda: client.chat.completions.create(messages=case["messages"], logprobs=True,
                                                      top_logprobs=3, **args)
    else:
        call = lambda: client.completions.create(prompt=case["prompt"], logprobs=3, **args)
    out = []
    for r in (call() if stream else [call()]):
        for c in r.choices:
            if c.logprobs is None:
                continue
            if chat:
                out += [{"token": e.token, "logprob": e.logprob, "bytes": e.bytes,
                         "top": [t.token for t in e.top_logprobs],
                         "top_logprobs": [t.logprob for t in e.top_logprobs]}
                        for e in c.logprobs.content or []]
            else:
                l = c.logprobs
                # A dict by text: its order is not the ranking, its values are.
                ranked = lambda top: sorted(top.items(), key=lambda kv: -kv[1])
                out += [{"token": t, "logprob": lp, "top": [k for k, _ in ranked(top)],
                         "top_logprobs": [v for _, v in ranked(top)], "offset": off}
                        for t, lp, top, off in zip(l.tokens, l.token_logprobs, l.top_logprobs,
                                                   l.text_offset)]
    return out


def refusal(call):
    try:
        call()
        return {"status": 200}
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        return {"status": e.status_code, "message": body.get("message", str(e)),
                "param": body.get("param"), "type": body.get("type")}


def main(port, model, cases_path, ids_only, long_model):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    cases = json.load(open(cases_path))["cases"]
    with ThreadPoolExecutor(16) as pool:
        plain = list(pool.map(lambda c: run(client, model, c, False), cases))
        streamed = list(pool.map(lambda c: run(client, model, c, True), cases))
    plain_cases = [c for c in cases if "stop" not in c]
    with ThreadPoolExecutor(4) as pool:
        lp_plain = list(pool.map(lambda c: logprobs(client, model, c, False), plain_cases))
        lp_streamed = list(pool.map(lambda c: logprobs(client, model, c, True), plain_cases))
    models = sorted(m.id for m in client.models.list())
    user = [{"role": "user", "content": "Hi"}]
    refusals = {
        "unknown_model": refusal(lambda: client.chat.completions.create(
            model="nope", messages=user)),
        "n": refusal(lambda: client.chat.completions.create(model=model, messages=user, n=2)),
        "tools": refusal(lambda: client.chat.completions.create(
            model=model, messages=user,
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])),
        "ids_only": refusal(lambda: client.completions.create(model=ids_only, prompt="Hi")),
        "temperature": refusal(lambda: client.completions.create(
            model=model, prompt="Hi", temperature=5)),
    }
    # A client that goes after its first chunk: the server cancels the sequence.
    gone = client.chat.completions.create(model=long_model, messages=user, max_tokens=4000,
                                          stream=True)
    first = next(iter(gone))
    gone.close()
    print(json.dumps({"plain": plain, "streamed": streamed, "models": models,
                      "logprobs_plain": lp_plain, "logprobs_streamed": lp_streamed,
                      "refusals": refusals, "gone_first": first.choices[0].delta.role}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
