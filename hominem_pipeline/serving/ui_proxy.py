"""Dagster's and MLflow's UIs behind the service's tokens: a small authenticating reverse proxy.

Each UI listens on 127.0.0.1 on a port of its own; the proxy listens where people reach it and passes a request on
only for an admin token (the UIs show every conversation the assets hold, and can launch or wipe runs). The token
comes as `Authorization: Bearer TOKEN` (a script) or as a cookie that the proxy's login page sets (a browser:
`/_hominem/login`, the token typed once). Websockets (Dagster's live run updates) are passed on the same way.
Every refusal is written to the audit log, as the service's are.

Without tokens the UIs are open on loopback, as `hominem serve` is; bound beyond loopback without tokens, the proxy
refuses to start (`Access.check_bind`).
"""

from __future__ import annotations

import asyncio
import html
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from aiohttp import ClientSession, ClientTimeout, WSMsgType, web

from hominem_pipeline.serving.auth import Access

log = logging.getLogger(__name__)

LOGIN = "/_hominem/login"
COOKIE = "hominem_ui"
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "host",
}
NOT_PASSED_ON = HOP_BY_HOP | {"authorization", "cookie"}  # the proxy's credentials stay with it

_LOGIN_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{name}: sign in</title>
<style>body{{font:16px system-ui;margin:4em auto;max-width:28em}}input{{font:inherit;width:100%;margin:.5em 0}}</style>
</head><body><h1>{name}</h1><p>This UI shows every conversation the pipeline holds. Sign in with an admin token of
this deployment (a line <code>admin TOKEN</code> of its tokens).</p><p style="color:#b00">{error}</p>
<form method="post" action="{login}"><input type="hidden" name="next" value="{next}">
<label>Token <input type="password" name="token" autofocus required></label>
<input type="submit" value="Sign in"></form></body></html>"""


@dataclass(frozen=True)
class Route:
    """One proxied UI: where people reach it and where it really listens."""

    name: str  # Dagster | MLflow
    host: str
    port: int
    upstream: str  # http://127.0.0.1:PORT


def free_port() -> int:
    """A port nothing listens on now, on loopback (where a guarded UI itself listens)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.cookies.get(COOKIE)


def _admitted(access: Access, token: str | None) -> bool:
    caller = access.caller(f"Bearer {token}" if token else None)
    return caller is not None and caller.admin


def _safe_next(value: str) -> str:
    """A path on this proxy to go back to after signing in (never another site)."""
    parts = urlsplit(value or "/")
    return value if value.startswith("/") and not value.startswith("//") and not parts.netloc else "/"


def make_app(route: Route, access: Access) -> web.Application:
    """The proxy for one UI."""
    session: dict[str, ClientSession] = {}

    async def start(app: web.Application) -> None:
        session["client"] = ClientSession(timeout=ClientTimeout(total=None, sock_connect=10), auto_decompress=False)

    async def stop(app: web.Application) -> None:
        await session["client"].close()

    async def login(request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            form = await request.post()
            token, target = str(form.get("token", "")), _safe_next(str(form.get("next", "/")))
            if _admitted(access, token):
                access.audit("ui_sign_in", ui=route.name)
                answer = web.HTTPSeeOther(target)
                answer.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
                return answer
            access.audit("forbidden", ui=route.name, path=LOGIN, why="not an admin token")
            return _page(route, target, "That is not an admin token of this deployment.", 403)
        return _page(route, _safe_next(request.query.get("next", "/")), "", 200)

    async def proxy(request: web.Request) -> web.StreamResponse:
        if not _admitted(access, _token(request)):
            access.audit("forbidden", ui=route.name, path=request.path[:200], method=request.method)
            if request.method == "GET" and "text/html" in request.headers.get("Accept", ""):
                raise web.HTTPSeeOther(f"{LOGIN}?next={quote(request.path_qs, safe='')}")
            return web.json_response(
                {
                    "error": f"the {route.name} UI needs an admin token: Authorization: Bearer TOKEN, or sign in at "
                    f"{LOGIN}"
                },
                status=401,
            )
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return await _websocket(request, route, session["client"])
        return await _forward(request, route, session["client"])

    app = web.Application(client_max_size=1024**3)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_route("*", LOGIN, login)
    app.router.add_route("*", "/{tail:.*}", proxy)
    return app


def _page(route: Route, target: str, error: str, status: int) -> web.Response:
    text = _LOGIN_PAGE.format(name=route.name, error=html.escape(error), login=LOGIN, next=html.escape(target))
    return web.Response(text=text, content_type="text/html", status=status)


def _upstream_headers(request: web.Request, route: Route) -> dict[str, str]:
    """The request's headers as the UI should get them: its own host, none of the proxy's credentials."""
    headers = {
        k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP and k.lower() != "authorization"
    }
    cookies = [
        c for c in request.headers.get("Cookie", "").split(";") if c.strip() and not c.strip().startswith(COOKIE)
    ]
    headers.pop("Cookie", None)
    if cookies:
        headers["Cookie"] = ";".join(cookies)
    headers["Host"] = urlsplit(route.upstream).netloc
    if "Origin" in headers:
        headers["Origin"] = route.upstream
    return headers


async def _forward(request: web.Request, route: Route, client: ClientSession) -> web.StreamResponse:
    body = request.content if request.can_read_body else None
    async with client.request(
        request.method,
        route.upstream + request.path_qs,
        headers=_upstream_headers(request, route),
        data=body,
        allow_redirects=False,
    ) as upstream:
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
        answer = web.StreamResponse(status=upstream.status, headers=headers)
        await answer.prepare(request)
        async for chunk in upstream.content.iter_any():
            await answer.write(chunk)
        await answer.write_eof()
        return answer


async def _websocket(request: web.Request, route: Route, client: ClientSession) -> web.StreamResponse:
    protocols = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    theirs = web.WebSocketResponse(protocols=protocols)
    await theirs.prepare(request)
    url = "ws" + route.upstream.removeprefix("http") + request.path_qs
    async with client.ws_connect(url, protocols=protocols, headers={"Host": urlsplit(route.upstream).netloc}) as ours:

        async def pipe(source: Any, sink: Any) -> None:
            async for message in source:
                if message.type == WSMsgType.TEXT:
                    await sink.send_str(message.data)
                elif message.type == WSMsgType.BINARY:
                    await sink.send_bytes(message.data)
                else:
                    break
            await sink.close()

        await asyncio.gather(pipe(theirs, ours), pipe(ours, theirs), return_exceptions=True)
    return theirs


async def serve(routes: Sequence[Route], access: Access, ready: asyncio.Event | None = None) -> None:
    """Run the proxies until cancelled."""
    runners = []
    try:
        for route in routes:
            access.check_bind(route.host)
            runner = web.AppRunner(make_app(route, access), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, route.host, route.port).start()
            runners.append(runner)
        if ready is not None:
            ready.set()
        await asyncio.Event().wait()
    finally:
        for runner in runners:
            await runner.cleanup()


def start_in_thread(routes: Sequence[Route], access: Access, timeout: float = 30.0) -> Any:
    """The proxies on a thread of their own (a daemon: they end with the process), once they listen; an error
    starting them (a port taken, no token beyond loopback) is raised here."""
    import threading

    started, failed = threading.Event(), []

    async def main() -> None:
        ready = asyncio.Event()
        task = asyncio.ensure_future(serve(routes, access, ready))
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            failed.append(task.exception())
            started.set()
            return
        started.set()
        await task

    thread = threading.Thread(target=lambda: asyncio.run(main()), name="ui-proxy", daemon=True)
    thread.start()
    if not started.wait(timeout):
        raise TimeoutError(f"the UI proxies did not start within {timeout:.0f} s")
    if failed:
        raise failed[0]
    return thread
