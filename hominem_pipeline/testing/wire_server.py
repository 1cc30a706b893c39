"""A local HTTP server that speaks the Anthropic Messages and OpenAI Chat Completions wire formats.

Tests and benchmarks point the official `anthropic` and `openai` clients at it (base_url) to exercise
the real client code paths offline: structured output (Anthropic tool use, OpenAI `json_schema`, JSON
in the prompt), streaming (server-sent events in both formats), usage accounting, and failures on
demand: HTTP errors with `retry-after`, hangs (timeouts), dropped connections and invalid labels.

Answers are deterministic functions of the request, so a test knows what to expect (with `drift`, each
answer also carries the count of answers served so far, the way a sampling model never says the same
thing twice: a test can tell a replayed answer from one asked again):
- a rating request gets a label whose scores follow simple cues in the reply (feeling words raise
  empathy, a question raises curiosity, a very short reply lowers everything);
- a memory-extraction request (core/online/facts.py) gets a JSON list of the facts `facts_answer` finds;
- any other request gets a reply made from the system prompt and the user's message.

    python -m hominem_pipeline.testing.wire_server --latency 0.1   # prints the URL, serves until killed
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FEELING_WORDS = ("feel", "sorry", "understand", "hear you", "sounds", "hard", "care")


@dataclass
class Fault:
    """What to do instead of answering, for requests whose body contains `match` (None: any request).

    kind: "status" (reply with `status`, and `retry_after` seconds if set), "hang" (wait `seconds`
    before answering), "drop" (close the connection without a reply), "invalid" (a rating request gets
    a label with out-of-range and missing fields), "garbage" (a rating request gets text that is not JSON).
    `times`: how many requests it applies to (None: all).
    """

    kind: str
    match: str | None = None
    times: int | None = 1
    status: int = 500
    retry_after: float | None = None
    seconds: float = 0.0


def _words(text: str) -> int:
    return max(1, len(text.split()))


def _unit(*parts: Any) -> float:
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def judge(reply: str, dimensions: list[str]) -> dict[str, Any]:
    """A deterministic label for `reply` with cues a test can steer."""
    low = reply.lower()
    n = len(reply.split())
    base = -0.6 if n < 6 else 0.1
    warmth = 0.5 if any(w in low for w in FEELING_WORDS) else 0.0
    question = 0.4 if "?" in reply else 0.0
    vector = {}
    for d in dimensions:
        bump = warmth if d in ("empathy", "social_coherence") else question if d == "curiosity" else 0.2 * warmth
        vector[d] = round(max(-1.0, min(1.0, base + bump + 0.2 * (_unit(reply, d) - 0.5))), 4)
    scalar = round(sum(vector.values()) / len(vector), 4)
    return {
        "rationale": "Warm and engaged."
        if warmth
        else ("Too short to help." if n < 6 else "Adequate but impersonal."),
        "vector": vector,
        "scalar": scalar,
        "reward_intensity": round(min(1.0, abs(scalar) + 0.2), 4),
        "safety_score": 0.1 if "dangerous" in low else 0.95,
    }


def invalid_label(dimensions: list[str]) -> dict[str, Any]:
    vector = {d: 0.0 for d in dimensions[1:]}
    vector[dimensions[0]] = 7.5
    return {"rationale": "", "vector": vector, "scalar": 3.0, "reward_intensity": 0.5}


FACTS_REQUEST = (
    "You read one message a user sent to an assistant and list the facts"  # core/online/facts.py's FACTS_SYSTEM
)


def facts_answer(message: str) -> str:
    """A memory-extraction request's answer: a JSON list of facts. It finds "allergic to X" and "my
    name is X"; a message with the word "invent" also gets a fact that is not in it (which the reader
    must drop), and one with "ramble" gets prose instead of JSON."""
    if "ramble" in message:
        return "Sure! The user seems to be talking about their day."
    items = []
    if m := re.search(r"allergic to ([a-z ]+?)[.!,]", message):
        items.append(
            {"question": "What am I allergic to?", "answer": f"You are allergic to {m.group(1)}.", "fact": m.group(1)}
        )
    if m := re.search(r"[Mm]y name is ([A-Z]\w+)", message):
        items.append({"question": "What is my name?", "answer": f"Your name is {m.group(1)}.", "fact": m.group(1)})
    if "invent" in message:
        items.append({"question": "Where was I born?", "answer": "You were born in Atlantis.", "fact": "Atlantis"})
    return json.dumps(items)


def _reply_text(system: str | None, user: str, seed: Any) -> str:
    topic = " ".join(user.split()[:12])
    if system and "curt" in system.lower():
        return "Just deal with it."
    opener = "That sounds hard, and I hear you." if system and "warm" in system.lower() else "Here is a thought."
    variant = int(_unit(system, user, seed) * 1000)
    return f'{opener} About "{topic}": what matters most to you here? (take {variant})'


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stall
    server: WireServer._HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def do_POST(self) -> None:  # noqa: N802
        owner = self.server.owner
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        body = json.loads(raw or b"{}")
        api = (
            "anthropic"
            if self.path.rstrip("/").endswith("/messages")
            else "openai"
            if self.path.rstrip("/").endswith("/chat/completions")
            else None
        )
        owner._record(self.path, body, self.headers)
        if api is None:
            return self._json(404, {"error": {"type": "not_found_error", "message": f"no route {self.path}"}})
        key = (
            self.headers.get("x-api-key") or (self.headers.get("authorization") or "").removeprefix("Bearer ").strip()
        )
        if owner.api_key is not None and key != owner.api_key:
            return self._json(401, {"error": {"type": "authentication_error", "message": "invalid x-api-key"}})
        fault = owner._take_fault(raw.decode("utf-8", "replace"))
        if owner.latency:
            time.sleep(owner.latency)
        if fault is not None:
            if fault.kind == "status":
                headers = {"retry-after": f"{fault.retry_after:g}"} if fault.retry_after is not None else {}
                return self._json(
                    fault.status,
                    {"type": "error", "error": {"type": "api_error", "message": f"injected {fault.status}"}},
                    headers,
                )
            if fault.kind == "hang":
                time.sleep(fault.seconds)
            if fault.kind == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return None
        return self._answer(api, body, fault)

    # -- answers -----------------------------------------------------------------------------------
    def _answer(self, api: str, body: dict[str, Any], fault: Fault | None) -> None:
        system, turns = _conversation(api, body)
        schema = _label_schema(api, body, turns)
        user = turns[0][1] if turns else ""
        if schema is not None:
            dims = list(schema["properties"]["vector"]["properties"])
            reply = _between(user, "The assistant replied:\n<<<\n", "\n>>>")
            label = invalid_label(dims) if fault and fault.kind == "invalid" else judge(reply, dims)
            if suffix := self.server.owner._drift():
                label["rationale"] += suffix
            data: Any = label
            text = "I cannot rate that, sorry." if fault and fault.kind == "garbage" else json.dumps(label)
        elif system and system.startswith(FACTS_REQUEST):
            data, text = None, facts_answer(_between(user, "<<<\n", "\n>>>"))
        else:
            data, text = (
                None,
                _reply_text(system, user, body.get("seed", body.get("metadata"))) + self.server.owner._drift(),
            )
            words = text.split()
            limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or 1_000_000)
            text = " ".join(words[:limit])
        usage_in = _words(json.dumps(body.get("messages", ""))) + _words(system or "")
        usage_out = _words(text)
        truncated = data is None and len(text.split()) >= int(body.get("max_tokens") or 1_000_000)
        if api == "anthropic":
            tool = bool(body.get("tools")) and schema is not None and not (fault and fault.kind == "garbage")
            if body.get("stream"):
                return self._anthropic_stream(text, usage_in, usage_out, "max_tokens" if truncated else "end_turn")
            content = (
                [{"type": "tool_use", "id": "toolu_01", "name": body["tools"][0]["name"], "input": data}]
                if tool
                else [{"type": "text", "text": text}]
            )
            return self._json(
                200,
                {
                    "id": "msg_01",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model"),
                    "content": content,
                    "stop_reason": "tool_use" if tool else ("max_tokens" if truncated else "end_turn"),
                    "stop_sequence": None,
                    "usage": {"input_tokens": usage_in, "output_tokens": usage_out},
                },
            )
        finish = "length" if truncated else "stop"
        if body.get("stream"):
            return self._openai_stream(body, text, usage_in, usage_out, finish)
        return self._json(
            200,
            {
                "id": "chatcmpl-01",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": finish,
                        "logprobs": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": usage_in,
                    "completion_tokens": usage_out,
                    "total_tokens": usage_in + usage_out,
                },
            },
        )

    def _anthropic_stream(self, text: str, usage_in: int, usage_out: int, stop: str) -> None:
        events = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_01",
                        "type": "message",
                        "role": "assistant",
                        "model": "m",
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": usage_in, "output_tokens": 1},
                    },
                },
            ),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            ),
        ]
        for piece in _pieces(text):
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
                )
            )
        events += [
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": usage_out},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        self._sse("".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events))

    def _openai_stream(self, body: dict[str, Any], text: str, usage_in: int, usage_out: int, finish: str) -> None:
        def chunk(
            delta: dict[str, Any], finish_reason: str | None, usage: dict[str, int] | None = None, choices: bool = True
        ) -> str:
            payload = {
                "id": "chatcmpl-01",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": body.get("model"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}] if choices else [],
                "usage": usage,
            }
            return f"data: {json.dumps(payload)}\n\n"

        out = chunk({"role": "assistant", "content": ""}, None)
        out += "".join(chunk({"content": piece}, None) for piece in _pieces(text))
        out += chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            out += chunk(
                {},
                None,
                {"prompt_tokens": usage_in, "completion_tokens": usage_out, "total_tokens": usage_in + usage_out},
                choices=False,
            )
        self._sse(out + "data: [DONE]\n\n")

    # -- transport ---------------------------------------------------------------------------------
    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, text: str) -> None:
        data = text.encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def _between(text: str, start: str, end: str) -> str:
    i = text.find(start)
    if i < 0:
        return text
    j = text.find(end, i + len(start))
    return text[i + len(start) : j if j >= 0 else None]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def _conversation(api: str, body: dict[str, Any]) -> tuple[str | None, list[tuple[str, str]]]:
    messages = body.get("messages") or []
    if api == "anthropic":
        system = body.get("system")
        system = _content_text(system) if system is not None else None
        return system, [(m["role"], _content_text(m["content"])) for m in messages]
    system = next((_content_text(m["content"]) for m in messages if m["role"] == "system"), None)
    return system, [(m["role"], _content_text(m["content"])) for m in messages if m["role"] != "system"]


def _label_schema(api: str, body: dict[str, Any], turns: list[tuple[str, str]]) -> dict[str, Any] | None:
    if api == "anthropic" and body.get("tools"):
        return body["tools"][0]["input_schema"]
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return fmt["json_schema"]["schema"]
    if turns and "JSON Schema:\n" in turns[0][1]:
        match = re.search(r"JSON Schema:\n(\{.*\})\s*$", turns[0][1], re.DOTALL)
        if match:
            return json.loads(match.group(1))
    return None


class WireServer:
    """`with WireServer(latency=0.1) as server:` then point clients at `server.url` (Anthropic) or
    `server.url + "/v1"` (OpenAI)."""

    class _HTTPServer(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 256
        owner: WireServer

        def handle_error(self, request: Any, client_address: Any) -> None:
            if isinstance(sys.exc_info()[1], ConnectionError):
                return  # a client that timed out or hung up: expected in fault tests
            super().handle_error(request, client_address)

    def __init__(
        self,
        *,
        latency: float = 0.0,
        api_key: str | None = "test-key",
        host: str = "127.0.0.1",
        port: int = 0,
        drift: bool = False,
    ):
        self.latency = latency
        self.drift = drift
        self._answers = 0
        self.api_key = api_key
        self.faults: list[Fault] = []
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd = self._HTTPServer((host, port), _Handler)
        self._httpd.owner = self
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def add_fault(self, fault: Fault) -> Fault:
        with self._lock:
            self.faults.append(fault)
        return fault

    def _take_fault(self, body: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times == 0 or (fault.match is not None and fault.match not in body):
                    continue
                if fault.times is not None:
                    fault.times -= 1
                return fault
        return None

    def _drift(self) -> str:
        """With `drift`, a suffix that makes this answer unlike any other (the count of answers so far)."""
        if not self.drift:
            return ""
        with self._lock:
            self._answers += 1
            return f" (answer {self._answers})"

    def _record(self, path: str, body: dict[str, Any], headers: Any) -> None:
        with self._lock:
            self.requests.append(
                {
                    "path": path,
                    "body": body,
                    "headers": {k.lower(): v for k, v in headers.items()},
                    "at": time.monotonic(),
                }
            )

    def count(self, path_suffix: str = "") -> int:
        with self._lock:
            return sum(1 for r in self.requests if r["path"].endswith(path_suffix))

    def start(self) -> WireServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="wire-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> WireServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    parser.add_argument("--api-key", default="test-key", help="the key clients must send")
    args = parser.parse_args(argv)
    server = WireServer(latency=args.latency, api_key=args.api_key, host=args.host, port=args.port)
    print(server.url, flush=True)
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()
        sys.exit(0)


if __name__ == "__main__":
    main()
