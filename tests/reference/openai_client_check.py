"""Drives `rlrun serve` with the official `openai` Python client, as a user would.

usage: openai_client_check.py BASE_URL MODEL

Checks chat completion (the server applies the chat template), streaming, n > 1 with a seed,
logprobs, the token-id extension fields (prompt_token_ids, token_ids), completions from token ids,
stop strings, and that bad requests raise the client's typed errors. Prints one line per check;
exits 1 at the first failure, saying what was expected.
"""
import sys

import openai


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def extra(choice, name):
    # Extension fields ride along as pydantic extras.
    return (choice.model_extra or {}).get(name)


def main():
    base_url, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)

    check(model in [m.id for m in client.models.list().data], f"GET /v1/models lists {model}")

    question = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    chat = client.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=24)
    answer = chat.choices[0].message.content
    print(f"   chat answer: {answer!r}")
    check(chat.object == "chat.completion" and chat.choices[0].message.role == "assistant", "chat completion shape")
    check("paris" in answer.lower(), "the chat template is applied (the instruct model answers Paris)")
    ids, prompt_ids = extra(chat.choices[0], "token_ids"), extra(chat.choices[0], "prompt_token_ids")
    check(isinstance(ids, list) and len(ids) == chat.usage.completion_tokens, "token_ids extension matches usage")
    check(isinstance(prompt_ids, list) and len(prompt_ids) == chat.usage.prompt_tokens, "prompt_token_ids extension")
    check(chat.choices[0].finish_reason in ("stop", "length"), "finish_reason")

    pieces, streamed_ids, finish = [], [], None
    for chunk in client.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=24,
                                                stream=True):
        for c in chunk.choices:
            pieces.append(c.delta.content or "")
            streamed_ids += extra(c, "token_ids") or []
            finish = c.finish_reason or finish
    check("".join(pieces) == answer, "a greedy stream's deltas join to the whole answer")
    check(streamed_ids == ids and finish == chat.choices[0].finish_reason, "a stream carries the same token ids")

    many = client.chat.completions.create(model=model, messages=question, temperature=1.0, max_tokens=8, n=3,
                                          seed=7)
    again = client.chat.completions.create(model=model, messages=question, temperature=1.0, max_tokens=8, n=3,
                                           seed=7)
    check([c.index for c in many.choices] == [0, 1, 2], "n=3 gives choices 0, 1, 2")
    check([c.message.content for c in many.choices] == [c.message.content for c in again.choices],
          "the same seed gives the same choices")

    lp = client.chat.completions.create(model=model, messages=question, temperature=0, max_tokens=8, logprobs=True)
    content = lp.choices[0].logprobs.content
    check(len(content) == len(extra(lp.choices[0], "token_ids")) and all(t.logprob <= 0 for t in content),
          "chat logprobs: one per token, each <= 0")

    comp = client.completions.create(model=model, prompt=prompt_ids, max_tokens=6, temperature=0, logprobs=0)
    check(extra(comp.choices[0], "prompt_token_ids") == prompt_ids, "completions take token ids as the prompt")
    check(extra(comp.choices[0], "token_ids") == ids[:len(extra(comp.choices[0], "token_ids"))],
          "the same prompt ids continue as the chat did")
    check(len(comp.choices[0].logprobs.token_logprobs) == len(extra(comp.choices[0], "token_ids")),
          "completion logprobs: one per token")

    stopped = client.completions.create(model=model, prompt="Count: 1, 2, 3, 4, 5,", max_tokens=20, temperature=0,
                                        stop=[" 8"])
    print(f"   stopped text: {stopped.choices[0].text!r}")
    check(" 8" not in stopped.choices[0].text and stopped.choices[0].finish_reason == "stop", "stop strings cut the text")

    def expect_error(kind, code, **kwargs):
        try:
            client.completions.create(**kwargs)
        except kind as e:
            check(code is None or e.code == code, f"{kind.__name__} ({e.status_code}, code {e.code})")
            return
        check(False, f"{kwargs} raised {kind.__name__}")

    expect_error(openai.NotFoundError, "model_not_found", model="no-such-model", prompt="x")
    expect_error(openai.BadRequestError, "context_length_exceeded", model=model, prompt="x", max_tokens=10**9)
    expect_error(openai.BadRequestError, "context_length_exceeded", model=model, prompt="hello " * 5000)
    expect_error(openai.BadRequestError, None, model=model, prompt="x", temperature=7)
    print("all checks passed")


if __name__ == "__main__":
    main()
