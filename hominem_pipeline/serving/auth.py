"""Who may call the service, who they are in the log, and the audit trail.

Tokens come from `serving.tokens_file` and the environment variable `serving.tokens_env`, one
`rater TOKEN` or `admin TOKEN` per line (the variable may separate them with commas). Without any
token the service is open, but only on loopback. A caller is known in the log only by a pseudonymous
id derived from their token (`r-` and 12 hex digits of its SHA-256), never by the token itself.
Unauthorised calls and admin actions go to `audit.jsonl`, append-only, fsynced and hash-chained
(`core/online/audit.py`).
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hominem_pipeline.core.online.audit import AuditLog

LOOPBACK = {"127.0.0.1", "::1", "localhost"}
ROLES = ("rater", "admin")
MIN_TOKEN_CHARS = 16


class AccessError(ValueError):
    """The token configuration is unusable or unsafe."""


@dataclass(frozen=True)
class Caller:
    rater: str
    admin: bool


LOCAL = Caller("local", admin=True)  # loopback without tokens: the person at this machine


def rater_id(token: str) -> str:
    return "r-" + hashlib.sha256(token.encode()).hexdigest()[:12]


def parse_tokens(text: str, source: str) -> dict[str, str]:
    """token -> role from `rater TOKEN` / `admin TOKEN` lines (or comma-separated entries); # comments."""
    tokens: dict[str, str] = {}
    entries = [e for line in text.splitlines() for e in line.split("#", 1)[0].split(",")]
    for number, entry in enumerate(entries, 1):
        parts = entry.split()
        if not parts:
            continue
        if len(parts) != 2 or parts[0] not in ROLES:
            raise AccessError(
                f"{source}, entry {number}: expected `rater TOKEN` or `admin TOKEN`, got {len(parts)} "
                f"word(s) starting {parts[0][:12]!r}"
            )
        role, token = parts
        if len(token) < MIN_TOKEN_CHARS:
            raise AccessError(
                f"{source}, entry {number}: a {role} token of {len(token)} characters is too easy to "
                "guess; use at least "
                f"{MIN_TOKEN_CHARS}, e.g. from `python -c 'import secrets; print(secrets.token_urlsafe(24))'`"
            )
        tokens[token] = role
    return tokens


class Access:
    def __init__(self, tokens: dict[str, str], audit_path: Path):
        self.tokens = tokens
        self.audit_path = Path(audit_path)
        self.audit_path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._log = AuditLog(self.audit_path)

    @classmethod
    def from_settings(
        cls, tokens_file: Path | None, tokens_env: str, audit_path: Path, repo: Path | None = None
    ) -> Access:
        tokens: dict[str, str] = {}
        if tokens_file is not None:
            path = Path(tokens_file).resolve()
            if not path.is_file():
                raise AccessError(
                    f"serving.tokens_file {tokens_file} does not exist; create it (`rater TOKEN` lines) "
                    "or set tokens_file: null"
                )
            if repo is not None and path.is_relative_to(Path(repo).resolve()):
                raise AccessError(
                    f"serving.tokens_file {path} is inside the project folder, where it could be "
                    f"committed; move it outside {repo}"
                )
            tokens |= parse_tokens(path.read_text(), f"serving.tokens_file {path}")
        if os.environ.get(tokens_env):
            tokens |= parse_tokens(os.environ[tokens_env], f"${tokens_env}")
        return cls(tokens, audit_path)

    @property
    def open(self) -> bool:
        return not self.tokens

    def check_bind(self, host: str) -> None:
        if self.open and host not in LOOPBACK:
            raise AccessError(
                f"serving.host {host!r} is reachable beyond this machine, and no token is configured; "
                "set serving.tokens_file "
                f"or the environment variable of serving.tokens_env (`rater TOKEN` lines), or serve on 127.0.0.1"
            )

    def caller(self, authorization: str | None) -> Caller | None:
        """The caller an Authorization header names; None when it names no configured token."""
        if self.open:
            return LOCAL
        if not authorization or not authorization.lower().startswith("bearer "):
            return None
        token = authorization[7:].strip()
        role = self.tokens.get(token)
        return None if role is None else Caller(rater_id(token), admin=role == "admin")

    def audit(self, action: str, **details: Any) -> None:
        """One line in the chained audit log (`core/online/audit.py`), written before the call is answered; who
        did it is the caller's rater id, else the service."""
        with self._lock:
            self._log.append(action, str(details.get("rater") or "service"), **details)

    def audit_entries(self) -> list[dict[str, Any]]:
        return self._log.entries()
