"""The tiny llama of generate_model.py with text: a model folder laid out as Hugging Face lays
one out (scripts/jax-exported-data writes it to generate_text/):

- tokenizer.json: a byte-level BPE trained here (the `tokenizers` package) on text this script
  writes, its special tokens first (`<|endoftext|>` is 0, the stop token);
- tokenizer_config.json: a Jinja chat template with `bos_token` and `eos_token`, rendered as
  Hugging Face's `apply_chat_template` renders it (jinja2, trim_blocks, lstrip_blocks);
- the exports (prefill buckets 32 and 64, insert, decode, extend in chunks of 16, a 128-position
  cache), the weights and
  generation.json, as generate/ has them, with the vocabulary the tokenizer has;
- text_cases.json: JAX's greedy generations for text prompts, chat conversations and stop
  strings, each with its prompt ids, its text, and each step's log-probability of its token and
  three most likely tokens (decoded as the tokenizer decodes, special
  tokens skipped). Cases whose logit margin at a step is under 1e-3 are left out, so that an XLA
  build's last-bit differences cannot flip a token.

With a cache length as its second argument (`generate_text_model.py generate_text_long 4096`) it
writes the same folder without the cases, with that cache: a sequence there runs thousands of
steps before its cache ends it, which the tests that a client's going frees its slot need."""
import json
import os
import sys

import jax
import jax.numpy as jnp
import jinja2
import numpy as np
from jax import export
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import generate_model as gm
from export import write_safetensors

SPECIALS = ["<|endoftext|>", "<|bos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
VOCAB_SIZE = 384
MAX_NEW = 12

CHAT_TEMPLATE = """{{ bos_token }}
{% for message in messages %}
    {% if message['role'] == 'system' %}
<|system|>
{{ message['content'] }}<|end|>
    {% elif message['role'] == 'user' %}
<|user|>
{{ message['content'] }}<|end|>
    {% else %}
<|assistant|>
{{ message['content'] }}{{ eos_token }}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
<|assistant|>
{% endif %}"""

CORPUS = """The quick brown fox jumps over the lazy dog. A tiny model makes tiny answers.
Rust runs XLA through actors; each device is an actor, and each memory space too.
Hello there! How are you today? I am fine, thank you, and you?
What is the capital of France? Paris is the capital of France.
Tell me a story about a dragon who learned to code in Rust and JAX.
Numbers: 1 2 3 4 5 6 7 8 9 10 100 1000. Symbols: + - * / = < > ( ) [ ] { }.
Émilie a mangé une crème brûlée à Zürich; naïve café, señor, smørrebrød.
"""

USER_TEXTS = [
    "Hello there!", "What is the capital of France?", "Tell me a story.",
    "How are you today?", "Count to ten.", "The quick brown fox", "Rust and JAX",
    "Say something in French.", "Why is the sky blue?", "Write a haiku about actors.",
    "A tiny model", "What time is it?", "Explain XLA.", "Give me a number.", "Zürich café",
    "Who are you?", "Repeat after me: hello.", "What is 2 + 2?", "Name three colours.",
    "Good morning", "One more question.", "Translate: dog", "Make a list.", "End here.",
]


def train_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS.splitlines() * 4, trainer=trainer)
    assert tok.token_to_id("<|endoftext|>") == 0
    return tok


def render(messages, add_generation_prompt=True):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(CHAT_TEMPLATE).render(
        messages=messages, add_generation_prompt=add_generation_prompt,
        bos_token="<|bos|>", eos_token="<|endoftext|>")


def main(out, cache=None):
    tok = train_tokenizer()
    gm.VOCAB, gm.T, gm.BUCKETS = tok.get_vocab_size(), cache or 128, (32, 64)
    gm.EXTENDS = (16,)
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    json.dump({"chat_template": CHAT_TEMPLATE, "bos_token": "<|bos|>",
               "eos_token": "<|endoftext|>", "model_max_length": gm.T,
               "tokenizer_class": "PreTrainedTokenizerFast"},
              open(os.path.join(out, "tokenizer_config.json"), "w"), indent=1)
    rng = np.random.default_rng(13)
    params = gm.init(rng)
    pspec = gm.spec_of(params)
    i32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.int32)
    L, S, T, H, DH = gm.BLOCKS, gm.SLOTS, gm.T, gm.HEADS, gm.DH
    entry_spec = {n: jax.ShapeDtypeStruct((L, H, T, DH), jnp.float32) for n in "kv"}
    cache_spec = {n: jax.ShapeDtypeStruct((L, S, H, T, DH), jnp.float32) for n in "kv"}
    write = lambda name, exp: open(os.path.join(out, name), "wb").write(exp.serialize())
    for p in gm.BUCKETS:
        write(f"prefill_{p}.exported", export.export(jax.jit(gm.prefill))(pspec, i32(1, p), i32()))
    write("insert.exported",
          export.export(jax.jit(gm.insert, donate_argnums=0))(cache_spec, entry_spec, i32()))
    write("decode.exported",
          export.export(jax.jit(gm.decode, donate_argnums=1))(pspec, cache_spec, i32(S), i32(S)))
    gm.write_extends(out, pspec, entry_spec)
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    dotted = lambda p: ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in p)
    write_safetensors(os.path.join(out, "weights.safetensors"), {dotted(p): v for p, v in flat})
    json.dump({"stop_tokens": [0], "max_tokens": MAX_NEW},
              open(os.path.join(out, "generation.json"), "w"))
    if cache is not None:
        print(f"generate_text: the exports with a cache of {T} positions in {out}", file=sys.stderr)
        return

    jit_prefill = jax.jit(gm.prefill)
    jit_insert = jax.jit(gm.insert, donate_argnums=0)
    jit_decode = jax.jit(gm.decode, donate_argnums=1)

    def generate(prompt):
        """Greedy, alone in slot 0, until the stop token 0 or MAX_NEW tokens."""
        bucket = next(b for b in gm.BUCKETS if b >= len(prompt))
        tokens = np.zeros((1, bucket), np.int32)
        tokens[0, :len(prompt)] = prompt
        entry, logits = jit_prefill(params, tokens, np.int32(len(prompt)))
        cache = {n: jnp.zeros((L, S, H, T, DH), jnp.float32) for n in "kv"}
        cache = jit_insert(cache, entry, np.int32(0))
        out, margin, pos, logprobs = [], np.inf, len(prompt), []
        while True:
            l = np.asarray(logits[0], np.float64)
            top = np.sort(l)[-2:]
            margin = min(margin, float(top[1] - top[0]))
            token = int(np.argmax(l))
            out.append(token)
            # The token's log-probability and the three most likely tokens (log-softmax).
            lse = l.max() + np.log(np.exp(l - l.max()).sum())
            logprobs.append({"logprob": float(l[token] - lse),
                             "top": [int(i) for i in np.argsort(-l, kind="stable")[:3]]})
            if token == 0 or len(out) == MAX_NEW:
                return out, margin, logprobs
            step_tokens, step_pos = np.zeros(S, np.int32), np.zeros(S, np.int32)
            step_tokens[0], step_pos[0] = token, pos
            cache, all_logits = jit_decode(params, cache, step_tokens, step_pos)
            logits = all_logits[:1]
            pos += 1

    def case(kind, prompt_text, ids, **more):
        tokens, margin, logprobs = generate(ids)
        if margin < 1e-3:
            return None
        text = tok.decode(tokens, skip_special_tokens=True)
        for l in logprobs:
            l["top_text"] = [tok.decode([i], skip_special_tokens=True) for i in l["top"]]
        return {"kind": kind, "prompt_ids": ids, "tokens": tokens, "text": text,
                "finish": "stop" if tokens[-1] == 0 else "length", "min_margin": margin,
                "prompt": prompt_text, "logprobs": logprobs, **more}

    cases = []
    for text in USER_TEXTS[:12]:
        c = case("completion", text, tok.encode(text).ids)
        cases.append(c)
    for k, text in enumerate(USER_TEXTS[12:]):
        messages = [{"role": "user", "content": text}]
        if k % 3 == 1:
            messages = [{"role": "system", "content": "You are tiny."}] + messages
        if k % 3 == 2:
            messages = [{"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "Hello!"}] + messages
        rendered = render(messages)
        cases.append(case("chat", rendered, tok.encode(rendered).ids, messages=messages))
    cases = [c for c in cases if c is not None]
    # Stop strings: two characters across a token boundary of a case's text, where the text
    # has plain characters there; the answer is the text before the first match.
    for c in list(cases):
        pieces = [tok.decode(c["tokens"][:k], skip_special_tokens=True)
                  for k in range(len(c["tokens"]) + 1)]
        for k in range(2, len(pieces) - 1):
            at = len(pieces[k])
            stop = c["text"][at - 1:at + 1] if 0 < at < len(c["text"]) else ""
            if len(stop) == 2 and "\ufffd" not in stop and not stop.isspace():
                cut = c["text"][:c["text"].index(stop)]
                cases.append({**c, "kind": c["kind"] + "_stop", "stop": [stop], "text": cut,
                              "finish": "stop"})
                break
    json.dump({"jax": jax.__version__, "vocab": gm.VOCAB, "cache_len": T,
               "buckets": list(gm.BUCKETS), "max_new": MAX_NEW, "cases": cases},
              open(os.path.join(out, "text_cases.json"), "w"), indent=0, ensure_ascii=False)
    kinds = {}
    for c in cases:
        kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
    print(f"generate_text: {kinds}, vocab {gm.VOCAB}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "generate_text",
         int(sys.argv[2]) if len(sys.argv) > 2 else None)
