#!/usr/bin/env python3
"""calculator_env.py - an example environment for rlrun: multiplication with a calculator tool.

The model is asked "What is 268 times 813?", too hard for a 135M model to work out. It has a
calculator: whatever multiplication it writes in its first answer ("268 * 813", "268 x 813",
"268 times 813") the environment computes and replies, as the user, "The calculator says
217884." The model answers again, and the episode is rewarded
1 when that final answer's first number is the product (an answer without a calculation is
scored the same way on its own). Standard library plus the `openai` client.

Run it, then point rlrun at it (configs/smollm2-calculator.yaml does):

    python3 examples/calculator_env.py --port 8770       # needs `pip install openai`
    build/rlrun configs/smollm2-calculator.yaml

Protocol (docs/environments.md): rlrun POSTs one episode
    {"episode_id", "attempt", "base_url", "model", "api_key", "row": {"prompt", "answer", ...},
     "eval", "sampling": {...}, "max_calls", "timeout_seconds"}
and this server runs it against base_url (an OpenAI endpoint bound to the episode's session, so
every call is recorded with its exact tokens) and answers
    200 {"reward": 0 or 1, "correct": bool, "metrics": {"tool_called", "right_operands", "turns"}}
A request it cannot use gets HTTP 400. The first line on stdout is "listening on URL".
"""

import argparse
import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai

SYSTEM = "You have a calculator. Write the multiplication you need, like 12 * 34, and the calculator will answer."
TOOL_REPLY = "The calculator says {result}."
EXPRESSION = re.compile(r"(\d+)\s*(?:\*|x|×|times|multiplied by)\s*(\d+)")
NUMBER = re.compile(r"-?\d[\d,]*")
OPERANDS = re.compile(r"(\d+)\D+(\d+)")


def first_number(text):
    m = NUMBER.search(text)
    return m.group(0).replace(",", "") if m else None


def run_episode(request):
    row = request["row"]
    client = openai.OpenAI(base_url=request["base_url"], api_key=request.get("api_key", "none"),
                           timeout=request.get("timeout_seconds", 300), max_retries=2)
    model = request["model"]
    answer = str(row["answer"]).strip()
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": row["prompt"]}]
    reply = client.chat.completions.create(model=model, messages=messages, max_tokens=32)
    text = reply.choices[0].message.content
    metrics = {"tool_called": 0.0, "right_operands": 0.0, "turns": 1.0}
    call = EXPRESSION.search(text)
    if call:
        a, b = int(call.group(1)), int(call.group(2))
        metrics["tool_called"] = 1.0
        asked = OPERANDS.search(row["prompt"])
        if asked and {a, b} == {int(asked.group(1)), int(asked.group(2))}:
            metrics["right_operands"] = 1.0
        messages += [{"role": "assistant", "content": text},
                     {"role": "user", "content": TOOL_REPLY.format(result=a * b)}]
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=16)
        text = reply.choices[0].message.content
        metrics["turns"] = 2.0
    correct = first_number(text) == answer
    return {"reward": 1.0 if correct else 0.0, "correct": correct, "metrics": metrics}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        try:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            request["row"]["prompt"], request["row"]["answer"], request["base_url"]
        except (ValueError, KeyError, TypeError) as e:
            return self.send(400, {"error": f"not an episode request: {e}"})
        try:
            self.send(200, run_episode(request))
        except openai.APIError as e:  # the run's endpoint refused a call (e.g. the session ended)
            self.send(502, {"error": f"the model endpoint answered: {e}"})


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8770)
    a = p.parse_args()
    server = ThreadingHTTPServer((a.host, a.port), Handler)
    server.daemon_threads = True
    print(f"listening on http://{a.host}:{server.server_address[1]}/episode", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
