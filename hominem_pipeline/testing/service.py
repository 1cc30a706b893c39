"""`hominem serve` started for a test, a benchmark or a script: on a free loopback port, in its own
process group (stopped by that group, so nothing it starts outlives it), ready once /healthz answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hominem_pipeline.serving.ui_proxy import free_port

HOMINEM = str(Path(sys.executable).parent / "hominem")


class ServeFailed(RuntimeError):
    """The server exited, or did not answer /healthz in time; the message holds what it printed when captured."""


def start_serve(
    args: Sequence[str],
    cwd: Path,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 180,
    stdout: Any = subprocess.DEVNULL,
    port: int | None = None,
    hominem: str = HOMINEM,
) -> tuple[subprocess.Popen, str, float]:
    """`hominem serve --port PORT *args` run in `cwd` (with `env` added to this process's environment; `hominem`:
    the command, another venv's);
    returns (process, base URL, seconds until /healthz answered 200). `stdout`: subprocess.DEVNULL,
    subprocess.PIPE (text, stderr with it; read it from `stop_serve`) or None (this process's)."""
    import httpx2 as httpx

    port = port or free_port()
    started = time.monotonic()
    proc = subprocess.Popen(
        [hominem, "serve", "--port", str(port), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        start_new_session=True,
        stdout=stdout,
        stderr=subprocess.STDOUT if stdout is subprocess.PIPE else stdout,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    while True:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise ServeFailed(f"hominem serve exited with {proc.returncode}" + (f":\n{out}" if out else ""))
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return proc, url, time.monotonic() - started
        except httpx.TransportError:
            pass
        if time.monotonic() - started > timeout:
            out = stop_serve(proc)
            raise ServeFailed(
                f"hominem serve did not answer /healthz within {timeout:.0f} s" + (f":\n{out}" if out else "")
            )
        time.sleep(0.2)


def stop_serve(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 60) -> str:
    """Signal the server's process group (SIGTERM: a graceful stop; SIGKILL: a crash), wait for it, and
    return what it printed when its output was captured (SIGKILL after `timeout` s if it will not stop)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return out or ""
