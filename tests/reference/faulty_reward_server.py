#!/usr/bin/env python3
"""faulty_reward_server.py - a TEST DOUBLE of a reward server (never used by rlrun itself).

It speaks the protocol of examples/reward_server.py, but misbehaves on purpose for the first
--count requests (-1: forever), then answers correctly. The correct answer's reward is
float(label) (0 when the label is not a number), so a test can tell which sample got which reward;
extra_logs carry what the server saw: "request" (the request's index, from 0), "batch" (its sample
count), "concurrent" (requests being handled when it arrived, itself included), "meta_id" (the
sample's metadata "id"), "prompt_ok" (1 when the query starts with the prompt) and "client_port"
(the connection's: requests on one kept-alive connection share it).

Modes (--mode):
  ok           never misbehaves
  slow         sleeps --sleep seconds before answering (longer than the client's timeout)
  drop         closes the connection without a reply
  down         is not listening for the first --down-seconds (connections are refused), then ok
  garbage      HTTP 200 with a body that is not JSON
  wrong_count  one reward fewer than samples
  nan          a reward that is NaN (Python's json writes a bare NaN)
  http500      HTTP 500 with a JSON error
  huge         HTTP 200 with a body of --huge-bytes bytes
  short_extra  an extra_logs list one entry short
  collapse     a policy that unlearns: the first --count SAMPLES (not requests) are rewarded
               1, 0, 1, 0, ... by position (every group has a spread), every later one 0
--delay S delays every answer by S seconds (to hold requests in flight). Prints
"faulty_reward_server: listening on http://HOST:PORT/" once it accepts connections (mode down: at once, while it still refuses them).
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ("ok", "slow", "drop", "down", "garbage", "wrong_count", "nan", "http500", "huge", "short_extra",
         "collapse")


class State:
    lock = threading.Lock()
    requests = 0
    samples = 0
    active = 0
    args = None


def reward_of(label):
    try:
        return float(label)
    except ValueError:
        return 0.0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def send_body(self, status, body, content_type="application/json"):
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            self.close_connection = True

    def do_POST(self):
        args = State.args
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with State.lock:
            index = State.requests
            State.requests += 1
            State.active += 1
            concurrent = State.active
        try:
            self.answer(args, index, concurrent, body)
        finally:
            with State.lock:
                State.active -= 1

    def answer(self, args, index, concurrent, body):
        request = json.loads(body)
        labels = request["labels"]
        n = len(labels)
        faulty = args.count < 0 or index < args.count
        if args.delay > 0:
            time.sleep(args.delay)
        mode = args.mode if faulty else "ok"
        if mode == "slow":
            time.sleep(args.sleep)
        elif mode == "drop":
            self.close_connection = True
            return
        elif mode == "garbage":
            return self.send_body(200, b"<html>this is not JSON</html>", "text/html")
        elif mode == "http500":
            return self.send_body(500, json.dumps({"error": "the reward model is out of memory"}).encode())
        elif mode == "huge":
            return self.send_body(200, b" " * args.huge_bytes)
        rewards = [reward_of(label) for label in labels]
        if args.mode == "collapse":
            with State.lock:
                first = State.samples
                State.samples += n
            rewards = [float(first + i < args.count and i % 2 == 0) for i in range(n)]
        extra = {"request": [index] * n, "batch": [n] * n, "concurrent": [concurrent] * n,
                 "meta_id": [float(m.get("id", -1)) for m in request["metadata"]],
                 "prompt_ok": [float(q.startswith(p)) for q, p in zip(request["query"], request["prompts"])],
                 "client_port": [self.client_address[1]] * n}
        if mode == "wrong_count":
            rewards = rewards[:-1]
        elif mode == "nan":
            rewards[-1] = float("nan")
        elif mode == "short_extra":
            extra["batch"] = extra["batch"][:-1]
        reply = {"rewards": rewards, "extra_logs": extra}
        self.send_body(200, json.dumps(reply).encode())

    def log_message(self, format, *args):
        pass


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, default="ok")
    parser.add_argument("--count", type=int, default=-1, help="misbehave for this many requests; -1 = forever")
    parser.add_argument("--sleep", type=float, default=2.0, help="slow: seconds before answering")
    parser.add_argument("--delay", type=float, default=0.0, help="every request: seconds before answering")
    parser.add_argument("--down-seconds", type=float, default=1.0, help="down: seconds before listening")
    parser.add_argument("--huge-bytes", type=int, default=2 << 20)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    State.args = args
    server = ThreadingHTTPServer((args.host, args.port), Handler, bind_and_activate=False)
    server.server_bind()  # bound, not listening: connections are refused until server_activate()
    host, port = server.server_address[:2]
    if args.mode == "down":
        # Say the address at once, and refuse connections to it for --down-seconds.
        print("faulty_reward_server: listening on http://%s:%d/" % (host, port), flush=True)
        time.sleep(args.down_seconds)
        server.server_activate()
    else:
        # Say the address only once it accepts connections: a client that connects as soon as it
        # reads the line must never be refused (that would count as one more failed request).
        server.server_activate()
        print("faulty_reward_server: listening on http://%s:%d/" % (host, port), flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
