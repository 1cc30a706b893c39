"""Real Postgres and Redis servers from Debian's packages, started by the project for its tests and
benchmarks (and for trying the deployment profile by hand), each in its own process group and stopped
by that id.

    python -m hominem_pipeline.testing.services postgres   # prints the URL, serves until Ctrl-C
    python -m hominem_pipeline.testing.services redis

Postgres runs from a fresh cluster in a temporary folder (initdb; as root, under the `postgres` user,
which the server needs), listening on 127.0.0.1 only, trusting local connections, with one database
(`hominem`). Redis keeps nothing on disk. `make services` installs the packages (postgresql,
redis-server) once; a missing binary is an error that names that command.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

INSTALL_HINT = "run `make services` (apt-get install postgresql redis-server)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen[Any] | None, timeout: float = 15.0) -> None:
    """SIGTERM to the server's process group, then SIGKILL if it has not gone after `timeout` seconds."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout)
    except ProcessLookupError:
        pass


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise RuntimeError(f"no PostgreSQL server (/usr/lib/postgresql/*/bin/postgres): {INSTALL_HINT}")
    return Path(found[-1]).parent


class _Server:
    """A server started by `start()` and stopped by `stop()`; `with` does both (and stops one that failed to start)."""

    def start(self) -> Any:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class PostgresServer(_Server):
    """`with PostgresServer() as pg:` then `pg.url` (SQLAlchemy form) or `pg.dsn` (libpq form)."""

    def __init__(self, port: int | None = None, database: str = "hominem"):
        self.port = port or free_port()
        self.database = database
        self.user = "postgres"
        self.folder: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{self.database}"

    @property
    def dsn(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def create_database(self, name: str) -> str:
        """A second database on the same server (Dagster's storage beside MLflow's); its SQLAlchemy URL."""
        subprocess.run(
            [str(postgres_bin() / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, name],
            check=True,
            capture_output=True,
        )
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{name}"

    def _as_server_user(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv

    def start(self) -> PostgresServer:
        bin_dir = postgres_bin()
        self.folder = Path(tempfile.mkdtemp(prefix="hominem-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        data = self.folder / "data"
        subprocess.run(
            self._as_server_user(
                [str(bin_dir / "initdb"), "-D", str(data), "-U", self.user, "--auth=trust", "--no-sync", "-E", "UTF8"]
            ),
            check=True,
            capture_output=True,
        )
        self.proc = subprocess.Popen(
            self._as_server_user(
                [
                    str(bin_dir / "postgres"),
                    "-D",
                    str(data),
                    "-p",
                    str(self.port),
                    "-k",
                    str(self.folder),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                    "-c",
                    "max_connections=200",
                ]
            ),
            stdout=subprocess.DEVNULL,
            stderr=open(self.folder / "server.log", "wb"),
            start_new_session=True,
        )
        self._wait(bin_dir)
        subprocess.run(
            [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, self.database],
            check=True,
            capture_output=True,
        )
        return self

    def _wait(self, bin_dir: Path, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"postgres exited with {self.proc.returncode}: {(self.folder / 'server.log').read_text()[-2000:]}"
                )
            ready = subprocess.run(
                [str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True
            )
            if ready.returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"postgres did not accept connections on port {self.port} within {timeout:.0f}s")

    def stop(self) -> None:
        stop_group(self.proc)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


class RedisServer(_Server):
    """`with RedisServer() as redis:` then `redis.url`."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(f"no redis-server on PATH: {INSTALL_HINT}")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"redis-server did not answer on port {self.port} within 30s")

    def stop(self) -> None:
        stop_group(self.proc)


class MlflowServer(_Server):
    """`with MlflowServer(backend_uri, artifacts) as server:` then `server.url`: MLflow's tracking server on a
    database (Postgres in a deployment), storing artifacts in `artifacts` (a folder, or s3://...) and
    proxying them (`mlflow-artifacts:/`), so clients never see where they lie."""

    def __init__(self, backend_uri: str, artifacts: str | Path, port: int | None = None, workers: int = 2):
        self.backend_uri = backend_uri
        self.artifacts = str(artifacts)
        self.port = port or free_port()
        self.workers = workers
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> MlflowServer:
        import sys

        self.log = Path(tempfile.mkdtemp(prefix="hominem-mlflow-")) / "server.log"
        self.proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "mlflow"),
                "server",
                "--backend-store-uri",
                self.backend_uri,
                "--artifacts-destination",
                self.artifacts,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                str(self.workers),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.log, "wb"),
            start_new_session=True,
            env={
                **os.environ,
                "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            },  # no job-runner processes: tracking and artifacts only
        )
        import urllib.request

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"mlflow server did not answer on {self.url} within 120s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        stop_group(self.proc)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("service", choices=["postgres", "redis"])
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args(argv)
    server = PostgresServer(args.port) if args.service == "postgres" else RedisServer(args.port)
    with server:
        print(server.url, flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
