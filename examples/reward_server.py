#!/usr/bin/env python3
"""reward_server.py - an example reward server for rlrun's `http` reward term.

Scores a sample 1.0 when its completion's numeric answer equals its label's, else 0.0, by the rules
of rlrun's `numeric` term (orchestrator/reward/verifiers.h numeric_answer): the number right after
the last GSM8K "####" that has one, else the last number in the last \\boxed{...}, else the last
number in the text. Python standard library only.

Run it, then point rlrun at it:

    python3 examples/reward_server.py --port 8000
    build/rlrun configs/quickstart.yaml --set task.reward=http \\
        --set task.reward_url=http://127.0.0.1:8000/

(or mix it with local terms: --set 'task.reward=0.5*http + 0.5*numeric').

Protocol (OpenRLHF's remote reward model), on any path:
    POST {"query": [prompt + completion, ...], "prompts": [prompt, ...], "labels": [answer, ...],
          "metadata": [row, ...]}
    200  {"rewards": [...], "scores": [...],
          "extra_logs": {"correct": [...], "has_number": [...]}}
The completion is query[i] without prompts[i] in front. A bad request gets HTTP 400 with
{"error": "..."}. GET answers {"status": "ok"} (a health check). --port 0 takes any free port; the
first line on stdout is "reward_server: listening on http://HOST:PORT/".
"""

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_REQUEST_BYTES = 256 << 20
MAX_FRACTION_DIGITS = 18

# ---------------------------------------------------------------- numbers (as verifiers.cc)


def _is_digit(c):
    return "0" <= c <= "9"


def _is_alnum(c):
    return _is_digit(c) or "a" <= c <= "z" or "A" <= c <= "Z"


def _digits_from(t, i):
    while i < len(t) and _is_digit(t[i]):
        i += 1
    return i


def _latex_fraction_at(t, i):
    """\\frac{A}{B} (or \\dfrac, \\tfrac) at i: (None, None, A, B, end) or None."""
    j = i + 1
    for name in ("frac{", "dfrac{", "tfrac{"):
        if t.startswith(name, j):
            j += len(name)
            num_end = _digits_from(t, j)
            if num_end == j or not t.startswith("}{", num_end):
                return None
            den_end = _digits_from(t, num_end + 2)
            if den_end == num_end + 2 or den_end >= len(t) or t[den_end] != "}":
                return None
            numerator, denominator = t[j:num_end], t[num_end + 2:den_end]
            if (len(numerator) > MAX_FRACTION_DIGITS or len(denominator) > MAX_FRACTION_DIGITS
                    or not denominator.strip("0")):
                return None
            return ("", "", numerator, denominator, den_end + 1)
    return None


def _unsigned_number_at(t, i):
    """(integer, fraction, numerator, denominator, end) starting at i, or None."""
    if t[i] == "\\":
        return _latex_fraction_at(t, i)
    j = _digits_from(t, i)
    separated = False
    if 1 <= j - i <= 3:
        while (j + 3 < len(t) and t[j] == "," and _is_digit(t[j + 1]) and _is_digit(t[j + 2])
               and _is_digit(t[j + 3]) and (j + 4 == len(t) or not _is_digit(t[j + 4]))):
            j += 4
            separated = True
    integer, fraction, numerator, denominator = t[i:j], "", "", ""
    if j + 1 < len(t) and t[j] == "." and _is_digit(t[j + 1]):
        end = _digits_from(t, j + 1)
        fraction = t[j + 1:end]
        j = end
    elif not separated and integer and j + 1 < len(t) and t[j] == "/" and _is_digit(t[j + 1]):
        end = _digits_from(t, j + 1)
        den = t[j + 1:end]
        if den.strip("0") and len(integer) <= MAX_FRACTION_DIGITS and len(den) <= MAX_FRACTION_DIGITS:
            numerator, denominator, integer = integer, den, ""
            j = end
    if not integer and not fraction and not numerator:
        return None
    return (integer, fraction, numerator, denominator, j)


def _negative_before(t, i):
    k = i
    if k > 0 and t[k - 1] == "$":
        k -= 1
    if k > 0 and t[k - 1] in "-+\u2212":
        sign_start, minus = k - 1, t[k - 1] != "+"
    else:
        return False
    if sign_start == 0:
        return minus
    before = t[sign_start - 1]
    return minus and not _is_alnum(before) and before not in ".)]}"


def _starts_number(t, i):
    c = t[i]
    if _is_digit(c):
        return True
    if c == ".":
        return i + 1 < len(t) and _is_digit(t[i + 1]) and (i == 0 or (not _is_digit(t[i - 1]) and t[i - 1] != "."))
    return c == "\\"


def _number_at(t, i):
    n = _unsigned_number_at(t, i)
    return None if n is None else (_negative_before(t, i),) + n


def _last_number(t):
    last, i = None, 0
    while i < len(t):
        if _starts_number(t, i):
            n = _number_at(t, i)
            if n is not None:
                last, i = n, n[5]
                continue
        i += 1
    return last


def _normalize(n):
    negative, integer, fraction, numerator, denominator, _ = n
    if numerator:
        value = float(numerator) / float(denominator)
        return "%.15g" % (-value if negative and value != 0 else value)
    integer = integer.lstrip("0,").replace(",", "")
    fraction = fraction.rstrip("0")
    zero = not integer and not fraction
    text = ("-" if negative and not zero else "") + (integer or "0")
    return text + "." + fraction if fraction else text


def _gsm8k_answer(t):
    at = len(t)
    while at > 0:
        at = t.rfind("####", 0, at - 1 + 4)
        if at < 0:
            return None
        i = at + 4
        while i < len(t) and t[i] in " \t":
            i += 1
        if i < len(t) and t[i] == "$":
            i += 1
        if i < len(t) and t[i] in "-+\u2212":
            i += 1
        if i < len(t) and t[i] == "$":
            i += 1
        if i < len(t) and _starts_number(t, i):
            n = _number_at(t, i)
            if n is not None:
                return n
    return None


def _last_boxed(t):
    at = t.rfind("\\boxed{")
    if at < 0:
        return None
    begin, depth = at + len("\\boxed{"), 1
    for i in range(begin, len(t)):
        if t[i] == "{":
            depth += 1
        elif t[i] == "}":
            depth -= 1
            if depth == 0:
                return t[begin:i]
    return None


def numeric_answer(text):
    """The normalized number a text answers, or None (rules in the module docstring)."""
    n = _gsm8k_answer(text)
    if n is None:
        boxed = _last_boxed(text)
        n = _last_number(boxed if boxed is not None else text)
    return None if n is None else _normalize(n)


def _is_integer_text(s):
    s = s[1:] if s.startswith("-") else s
    return s != "" and all(_is_digit(c) for c in s)


def numeric_match(completion, reference):
    got, want = numeric_answer(completion), numeric_answer(reference)
    if got is None or want is None:
        return False
    if _is_integer_text(got) and _is_integer_text(want):
        return got == want
    try:
        a, b = float(got), float(want)
    except ValueError:
        return False
    if a != a or b != b or abs(a) == float("inf") or abs(b) == float("inf"):
        return False
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b))


# ---------------------------------------------------------------- the server


class BadRequest(Exception):
    pass


def score(request):
    """The reply to one parsed request (raises BadRequest)."""
    if not isinstance(request, dict):
        raise BadRequest("the request is not a JSON object")
    queries, labels = request.get("query"), request.get("labels")
    prompts = request.get("prompts") or [""] * (len(queries) if isinstance(queries, list) else 0)
    for name, value in (("query", queries), ("labels", labels), ("prompts", prompts)):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise BadRequest('"%s" must be a list of strings' % name)
    if not len(queries) == len(labels) == len(prompts):
        raise BadRequest("query, prompts and labels differ in length (%d, %d, %d)"
                         % (len(queries), len(prompts), len(labels)))
    rewards, has_number = [], []
    for query, prompt, label in zip(queries, prompts, labels):
        completion = query[len(prompt):] if query.startswith(prompt) else query
        rewards.append(1.0 if numeric_match(completion, label) else 0.0)
        has_number.append(0.0 if numeric_answer(completion) is None else 1.0)
    return {"rewards": rewards, "scores": rewards,
            "extra_logs": {"correct": rewards, "has_number": has_number}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a client sends many requests on one connection
    verbose = False

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            self.close_connection = True  # the client left (a timeout): nothing to answer

    def do_GET(self):
        self.send_json(200, {"status": "ok"})

    def do_POST(self):
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True
            return self.send_json(411, {"error": "a POST needs a Content-Length"})
        if length < 0 or length > MAX_REQUEST_BYTES:
            self.close_connection = True
            return self.send_json(413, {"error": "the request is larger than %d bytes" % MAX_REQUEST_BYTES})
        try:
            request = json.loads(self.rfile.read(length))
            reply = score(request)
        except (ValueError, UnicodeDecodeError) as e:
            return self.send_json(400, {"error": "the request is not JSON: %s" % e})
        except BadRequest as e:
            return self.send_json(400, {"error": str(e)})
        except Exception as e:  # noqa: BLE001 - a bug here must not take the server down
            return self.send_json(500, {"error": "%s: %s" % (type(e).__name__, e)})
        self.send_json(200, reply)

    def log_message(self, format, *args):
        if self.verbose:
            super().log_message(format, *args)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 = any free port")
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    args = parser.parse_args(argv)
    Handler.verbose = args.verbose
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    host, port = server.server_address[:2]
    print("reward_server: listening on http://%s:%d/" % (host, port), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
