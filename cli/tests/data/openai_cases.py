"""OpenAI's own Python client (`openai`, scripts/openai-venv) against `pjrt-actors serve`'s
OpenAI routes: every case JAX recorded for the text model (text_cases.json: completions, chats,
stop strings), plain and streamed, all at once (past the model's four decode slots); the model
list; refusals in OpenAI's shape; and a stream closed after its first chunk on LONG_MODEL (a
model whose cache lets a sequence run far longer than the test). Prints one JSON line of what
it saw; cli/tests/openai.rs checks it.
`python openai_cases.py HTTP_PORT MODEL CASES_JSON IDS_ONLY_MODEL LONG_MODEL`"""
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import openai


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
        return {"text": text, "finish": c.finish_reason, "usage": [r.usage.prompt_tokens,
                r.usage.completion_tokens], "object": r.object}
    deltas, finish, usage, roles = [], None, None, []
    for chunk in call(stream=True, stream_options={"include_usage": True}, **args):
        if chunk.usage is not None:
            usage = [chunk.usage.prompt_tokens, chunk.usage.completion_tokens]
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
                      "refusals": refusals, "gone_first": first.choices[0].delta.role}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
