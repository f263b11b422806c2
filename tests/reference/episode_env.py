#!/usr/bin/env python3
"""A test double environment server for rlrun's episodes (docs/environments.md), standard library
only: each episode makes two calls to the run's OpenAI endpoint through its session (the row's
prompt, then that prompt, the answer and a follow-up line as the environment's turn) and is
rewarded 1 when the first answer's first line is the row's answer.

It checks what rlrun promises and reports it in the reply's metrics: `exact` is 1 when the second
call's prompt_token_ids begin with the first call's prompt_token_ids + token_ids (the model's own
tokens kept, not re-tokenised), `turns` the calls made. It asks for temperature 1.7: a session
samples as the run does whatever the request says.

Faults on purpose, for the fault tests: --fail KIND=P makes an attempt fail that way with
probability P (KIND: drop = close the connection without a reply, hang = never answer, garbage =
a body that is not JSON, status = HTTP 500, noreward = JSON without a reward); --fail-first N
fails the first N requests (with the first KIND given). Prints "listening on URL" when ready.
"""
import argparse
import http.server
import json
import random
import sys
import threading
import time
import urllib.request

ARGS = None
LOCK = threading.Lock()
SEEN = [0]


def call(base_url, model, prompt, max_tokens):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 1.7,
                       "logprobs": 0}).encode()
    req = urllib.request.Request(base_url + "/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def fault(self):
        with LOCK:
            SEEN[0] += 1
            n = SEEN[0]
        kinds = list(ARGS.fail.items())
        if n <= ARGS.fail_first and kinds:
            return kinds[0][0]
        for kind, p in kinds:
            if random.random() < p:
                return kind
        return None

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        kind = self.fault()
        if kind == "drop":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if kind == "hang":
            time.sleep(3600)
            return
        if kind == "garbage":
            return self.reply(200, b"<html>not json")
        if kind == "status":
            return self.reply(500, {"error": "planted"})
        if kind == "noreward":
            return self.reply(200, {"score": 1})
        row, base, model = body["row"], body["base_url"], body["model"]
        max_tokens = body["sampling"]["max_tokens"]
        first = call(base, model, row["prompt"], max_tokens)
        c1 = first["choices"][0]
        text = c1["text"]
        follow = row["prompt"] + text + "\nagain:"
        second = call(base, model, follow, max_tokens)
        c2 = second["choices"][0]
        recorded = c1["prompt_token_ids"] + c1["token_ids"]
        exact = 1.0 if c2["prompt_token_ids"][:len(recorded)] == recorded else 0.0
        answer = text.split("\n")[0].strip()
        reward = 1.0 if answer == str(row["answer"]) else 0.0
        self.reply(200, {"reward": reward, "metrics": {"turns": 2.0, "exact": exact,
                                                       "ended_by_length": 1.0 if c1["finish_reason"] == "length" else 0.0}})


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--fail", action="append", default=[])
    p.add_argument("--fail-first", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    random.seed(a.seed)
    a.fail = {k: float(v) for k, v in (f.split("=") for f in a.fail)}
    ARGS = a
    server = http.server.ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{server.server_address[1]}/episode", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
