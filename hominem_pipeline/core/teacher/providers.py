"""Chat providers behind one small interface: Anthropic (Messages API), OpenAI (Chat Completions) and any
OpenAI-compatible server, each through its official async client.

A `ChatRequest` is provider-neutral (system prompt, user/assistant turns, sampling settings, whether
the reply must be a structured label). A backend turns it into its wire format, optionally streams the
reply, and returns a `ChatResult` with the text, the parsed structured data and the token usage. The
SDKs' own retries are off: `core/dispatch.py` retries, limits the rate and caches, the same way for
every provider. Both clients run on their aiohttp transport (the SDKs' documented option for high
concurrency): at 32 calls in flight it costs about a third less CPU per call than the default httpx.

Keys come from environment variables only and are never part of a request's fingerprint, a log line or
an error message (`redact`).
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
import re
import socket
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from hominem_pipeline.core.config import TeacherConfig

LABEL_TOOL = "record_label"


@dataclass(frozen=True)
class OutputSchema:
    """A JSON Schema the reply must follow, with its digest (computed once, used in every fingerprint)."""

    name: str
    schema: dict[str, Any]
    digest: str = ""

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(
                self, "digest", hashlib.sha256(json.dumps(self.schema, sort_keys=True).encode()).hexdigest()
            )


@dataclass(frozen=True)
class ChatRequest:
    purpose: str  # "sample", "rate" or "write": for accounting
    system: str | None
    turns: tuple[tuple[str, str], ...]  # (role, text), role "user" or "assistant", starting with "user"
    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None  # sent where the API takes one; always part of the fingerprint (sample index)
    schema: OutputSchema | None = None  # set: the reply must be one JSON object of this schema

    def identity(self) -> dict[str, Any]:
        return {
            "purpose": self.purpose,
            "system": self.system,
            "turns": [list(t) for t in self.turns],
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "schema": self.schema.digest if self.schema else None,
        }


@dataclass
class ChatResult:
    text: str  # the reply's text; for tool use, the tool input as JSON
    data: Any = None  # the parsed structured reply (None when not asked for, or unparseable)
    parse_error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> ChatResult:
        return cls(**{k: v for k, v in payload.items() if k in cls.__dataclass_fields__})


class FatalProviderError(RuntimeError):
    """The provider refuses every call (bad key, unknown model, no permission): stop the whole run."""


@dataclass(frozen=True)
class ErrorKind:
    retryable: bool
    fatal: bool
    status: int | None
    retry_after: float | None
    message: str
    unreachable: bool = False  # nothing answers at the address (connection refused, a host name that does not resolve)


def unreachable_cause(exc: BaseException) -> str | None:
    """Why nothing could answer at the address, read from the exception's causes (the SDKs report a refused
    connection as a timeout or a bare "Connection error."); None when something may have answered."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, socket.gaierror):
            return f"its host name does not resolve ({cause.strerror or cause})"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused: nothing listens on that port"
        cause = cause.__cause__ or cause.__context__
    return None


DEFAULT_ADDRESSES = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
}  # where the SDKs call without a base_url


def teacher_address(url: str | None, provider: str) -> str:
    """The address a provider's calls go to, as a person would check it (no user:password)."""
    return public_url(url) or DEFAULT_ADDRESSES.get(provider, f"the {provider} API")


PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")


def unreachable_address(url: str | None, provider: str, timeout: float = 3.0) -> str | None:
    """Why nothing can answer at the teacher's address (one TCP connection to its host and port), or None
    when something listens there, when a proxy stands between, or when the check itself times out (a slow
    network is the dispatcher's to retry)."""
    if any(os.environ.get(v) for v in PROXY_VARIABLES):
        return None
    parts = urlsplit(url or DEFAULT_ADDRESSES.get(provider, ""))
    if not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None  # the config's own check names a bad port
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return None
    except OSError as exc:
        return unreachable_cause(exc)


def classify_error(exc: BaseException) -> ErrorKind | None:
    """What an SDK exception means for the caller; None for exceptions that are not API errors."""
    import anthropic
    import openai

    timeout = (anthropic.APITimeoutError, openai.APITimeoutError)
    connection = (anthropic.APIConnectionError, openai.APIConnectionError)
    status_error = (anthropic.APIStatusError, openai.APIStatusError)
    if isinstance(exc, timeout + connection) and (why := unreachable_cause(exc)):
        return ErrorKind(True, False, None, None, why, unreachable=True)
    if isinstance(exc, timeout):
        return ErrorKind(True, False, None, None, f"timed out ({type(exc).__name__})")
    if isinstance(exc, connection):
        return ErrorKind(True, False, None, None, f"connection failed: {exc}")
    if isinstance(exc, status_error):
        status = exc.status_code
        headers = getattr(exc.response, "headers", {}) or {}
        retry_after = parse_retry_after(headers.get("retry-after-ms"), milliseconds=True)
        if retry_after is None:
            retry_after = parse_retry_after(headers.get("retry-after"))
        retryable = status in (408, 409, 429) or status >= 500
        fatal = status in (401, 403, 404)
        return ErrorKind(retryable, fatal, status, retry_after, f"HTTP {status}: {_short(exc)}")
    return None


def _short(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
    return str(exc)[:300]


def parse_retry_after(value: str | None, *, milliseconds: bool = False) -> float | None:
    """Seconds from a `retry-after` header (seconds, or an HTTP date) or `retry-after-ms`."""
    if not value:
        return None
    try:
        seconds = float(value)
        return max(0.0, seconds / 1000.0 if milliseconds else seconds)
    except ValueError:
        pass
    import datetime as dt
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - dt.datetime.now(dt.timezone.utc)).total_seconds())


def public_url(url: str | None) -> str | None:
    """`url` without user:password, for display and fingerprints."""
    if not url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), parts.query, ""))


def redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def parse_json_object(text: str) -> tuple[Any, str | None]:
    """The JSON object in a model's reply (fenced or bare, with chatter around it), or the reason there is none."""
    stripped = text.strip()
    fence = re.search(r"```(?:json)?\s*(\{.*\})\s*```", stripped, re.DOTALL)
    candidates = [fence.group(1)] if fence else []
    start, end = stripped.find("{"), stripped.rfind("}")
    if start != -1 and end > start:
        candidates.append(stripped[start : end + 1])
    if not candidates:
        return None, "the reply holds no JSON object"
    try:
        data = json.loads(candidates[0])
    except json.JSONDecodeError as exc:
        return None, f"the reply is not valid JSON ({exc.msg} at position {exc.pos})"
    except RecursionError:
        return None, "the reply's JSON is nested too deeply to read"
    if not isinstance(data, dict):
        return None, f"the reply is JSON but not an object ({type(data).__name__})"
    return data, None


def schema_instruction(schema: dict[str, Any]) -> str:
    return (
        "Reply with one JSON object and nothing else (no prose, no code fence). It must match this JSON "
        f"Schema:\n{json.dumps(schema, indent=1)}"
    )


def describe_api(provider: str, model: str, base_url: str | None, structured_output: str) -> dict[str, str]:
    """What identifies an API teacher's answers (never the key)."""
    out = {"provider": provider, "model": model, "structured_output": structured_output}
    if base_url:
        out["base_url"] = public_url(base_url) or ""
    return out


class ChatBackend(abc.ABC):
    provider: str

    def __init__(self, model: str, base_url: str | None, api_key: str | None, timeout: float, structured_output: str):
        self.model = model
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = timeout
        self.structured_output = structured_output

    def describe(self) -> dict[str, str]:
        return describe_api(self.provider, self.model, self.base_url, self.structured_output)

    def fingerprint_payload(self, request: ChatRequest) -> dict[str, Any]:
        """Everything that determines the answer: provider, model, endpoint, output mode and the request."""
        return {**self.describe(), "request": request.identity()}

    async def chat(self, request: ChatRequest, *, stream: bool) -> ChatResult:
        """One exchange; a structured request's reply is parsed here, unless the backend already did
        (tool use) or found why it cannot be (no tool call, a refusal)."""
        result = await self._exchange(request, stream=stream)
        if request.schema is not None and result.data is None and result.parse_error is None:
            result.data, result.parse_error = parse_json_object(result.text)
        return result

    @abc.abstractmethod
    async def _exchange(self, request: ChatRequest, *, stream: bool) -> ChatResult: ...

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    def _user_turns(self, request: ChatRequest) -> list[tuple[str, str]]:
        """The turns, with the schema quoted in the first user turn in prompt mode."""
        turns = list(request.turns)
        if request.schema is not None and self.structured_output == "prompt":
            role, text = turns[0]
            turns[0] = (role, f"{text}\n\n{schema_instruction(request.schema.schema)}")
        return turns


class AnthropicChat(ChatBackend):
    provider = "anthropic"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        import anthropic

        self.client = anthropic.AsyncAnthropic(
            api_key=self.api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,
            http_client=anthropic.DefaultAioHttpClient(),
        )

    async def _exchange(self, request: ChatRequest, *, stream: bool) -> ChatResult:
        # The Messages API (2026-10-21 on) rejects temperature/top_p/top_k, and SDK 2.x dropped them:
        # candidates differ by system prompt and by the model's own sampling.
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "messages": [{"role": r, "content": t} for r, t in self._user_turns(request)],
        }
        if request.system:
            kwargs["system"] = request.system
        tool_mode = request.schema is not None and self.structured_output == "tool"
        if tool_mode:
            kwargs["tools"] = [
                {
                    "name": LABEL_TOOL,
                    "description": "Record your judgement of the reply.",
                    "input_schema": request.schema.schema,
                }
            ]
            kwargs["tool_choice"] = {"type": "tool", "name": LABEL_TOOL, "disable_parallel_tool_use": True}
        if stream and not tool_mode:
            return await self._stream(kwargs)
        message = await self.client.messages.create(**kwargs)
        texts = [b.text for b in message.content if b.type == "text"]
        tools = [b for b in message.content if b.type == "tool_use" and b.name == LABEL_TOOL]
        result = ChatResult(
            text="".join(texts),
            input_tokens=message.usage.input_tokens,
            output_tokens=message.usage.output_tokens,
            finish_reason=message.stop_reason,
        )
        if tool_mode:
            if tools:
                result.data = tools[0].input
                result.text = json.dumps(tools[0].input)
            else:
                result.parse_error = f"the reply did not call the {LABEL_TOOL} tool"
        return result

    async def _stream(self, kwargs: dict[str, Any]) -> ChatResult:
        parts: list[str] = []
        result = ChatResult(text="")
        events = await self.client.messages.create(**kwargs, stream=True)
        async for event in events:
            if event.type == "message_start":
                result.input_tokens = event.message.usage.input_tokens
            elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                parts.append(event.delta.text)
            elif event.type == "message_delta":
                result.output_tokens = event.usage.output_tokens
                result.finish_reason = event.delta.stop_reason
        result.text = "".join(parts)
        return result

    async def aclose(self) -> None:
        await self.client.close()


class OpenAIChat(ChatBackend):
    provider = "openai"

    def __init__(self, *args: Any, provider: str = "openai", **kwargs: Any):
        super().__init__(*args, **kwargs)
        import openai

        self.provider = provider
        self.client = openai.AsyncOpenAI(
            api_key=self.api_key,
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(),
        )

    async def _exchange(self, request: ChatRequest, *, stream: bool) -> ChatResult:
        messages = [{"role": "system", "content": request.system}] if request.system else []
        messages += [{"role": r, "content": t} for r, t in self._user_turns(request)]
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": request.max_tokens}
        for key in ("temperature", "top_p", "seed"):
            if getattr(request, key) is not None:
                kwargs[key] = getattr(request, key)
        if request.schema is not None and self.structured_output == "json_schema":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": request.schema.name, "schema": request.schema.schema, "strict": True},
            }
        result = ChatResult(text="")
        if stream:
            parts: list[str] = []
            kwargs["stream_options"] = {"include_usage": True}
            chunks = await self._post(kwargs, stream=True)
            async for chunk in chunks:
                for choice in chunk.choices:
                    if choice.delta.content:
                        parts.append(choice.delta.content)
                    if choice.finish_reason:
                        result.finish_reason = choice.finish_reason
                if chunk.usage:
                    result.input_tokens, result.output_tokens = (
                        chunk.usage.prompt_tokens,
                        chunk.usage.completion_tokens,
                    )
            result.text = "".join(parts)
        else:
            completion = await self._post(kwargs, stream=False)
            choice = completion.choices[0]
            result.text = choice.message.content or ""
            result.finish_reason = choice.finish_reason
            if completion.usage:
                result.input_tokens, result.output_tokens = (
                    completion.usage.prompt_tokens,
                    completion.usage.completion_tokens,
                )
            refusal = getattr(choice.message, "refusal", None)
            if refusal:
                result.parse_error = f"the model refused: {refusal}"
        return result

    async def _post(self, body: dict[str, Any], *, stream: bool) -> Any:
        """`chat.completions.create` without its parameter transform: our body is plain JSON already, and
        the transform (walking every message through the SDK's TypedDict unions) cost a third of the
        client's CPU per call at high concurrency. Same endpoint, parsing, errors and auth, through the
        client's documented `post` for custom requests."""
        from openai import AsyncStream
        from openai.types.chat import ChatCompletion, ChatCompletionChunk

        return await self.client.post(
            "/chat/completions",
            body={**body, "stream": stream},
            cast_to=ChatCompletion,
            stream=stream,
            stream_cls=AsyncStream[ChatCompletionChunk],
        )

    async def aclose(self) -> None:
        await self.client.close()


class MissingKeyError(RuntimeError):
    pass


def api_key_for(cfg: TeacherConfig) -> str | None:
    """The key from the configured environment variable (never from a file)."""
    env = cfg.key_env()
    if env is None:
        return None
    key = os.environ.get(env)
    if not key:
        raise MissingKeyError(
            f"teacher.provider {cfg.provider!r} needs an API key in the environment variable {env}, which is not set; "
            f"export {env}=... (or point teacher.api.api_key_env at the variable that holds it)"
        )
    return key


def make_backend(cfg: TeacherConfig) -> ChatBackend:
    """The backend for `cfg.provider` (anthropic, openai or openai_compatible)."""
    api = cfg.api
    mode = api.resolved_structured_output(cfg.provider)
    key = api_key_for(cfg)
    common = dict(model=api.model, base_url=api.base_url, timeout=cfg.client.timeout_seconds, structured_output=mode)
    if cfg.provider == "anthropic":
        return AnthropicChat(api_key=key, **common)
    if cfg.provider == "openai":
        return OpenAIChat(api_key=key, **common)
    if cfg.provider == "openai_compatible":
        # Local servers take any key; the client insists on one, so a fixed non-secret stands in.
        return OpenAIChat(api_key=key or "no-key-needed", provider="openai_compatible", **common)
    raise ValueError(
        f"teacher.provider {cfg.provider!r} is not an API provider; use anthropic, openai or openai_compatible"
    )
