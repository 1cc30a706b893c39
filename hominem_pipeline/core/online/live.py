"""Which adapter is live: `<data_dir>/live/current.json` and `history.json`.

`current.json` names the adapter (and its reward model) the service answers with; no file means the
base student alone. `history.json` lists every promotion, refusal, rollback, freeze, unfreeze, the slow
loop's adjustments (`slow_loop.py`) and notes,
with its time, who did it, the reason and the gate's figures. Both files are replaced whole (a temp
file, fsynced, renamed over the old one) under one lock, so a process killed mid-write leaves the
previous state and two writers (the server's scheduler, `hominem live`) never interleave.

`current.json` is written first and carries the history entry that made it (and its number); a process
killed between the two writes leaves a history one entry short, which the next writer restores from
`current.json` (marked `recovered`). Which adapter was live before is replayed from the history as a
stack: a promotion pushes, a rollback pops (or, to a named version, pops down to it), so a second
rollback goes one further back rather than undoing the first.

Adapter folders are immutable: a daily `lora_adapter` version or an online update's
`live/adapters/<version>/`. `check_adapter` refuses one that could not serve: a missing or truncated
file, a NaN weight, or an adapter trained on another base.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from hominem_pipeline.core.common.files import write_text_atomic

log = logging.getLogger(__name__)

LIVE_DIR = "live"
CURRENT = "current.json"
HISTORY = "history.json"
ONLINE_ADAPTERS = "adapters"  # live/adapters/<version>/: the online updates' adapters
HEALTH = "health.json"  # beside an online update's adapter: its partial RHI (what `promotion.health_of` reads)
REPLIES = "replies"  # live/replies/<version>.json: the gate's replies of each adapter it judged (gate.ReplyCache)
ACTIONS = (
    "promote",
    "refuse",
    "rollback",
    "freeze",
    "unfreeze",
    "adjust",
    "note",
)  # adjust: the slow loop changed the next adapters' settings


class LiveError(RuntimeError):
    """A live-state change that cannot be made (unknown version, frozen, nothing to roll back to)."""


class BadAdapter(ValueError):
    """An adapter folder that cannot serve: what is wrong with it, by file."""


@dataclass(frozen=True)
class Live:
    """What `current.json` says: the live adapter (None: the base alone) and whether updates are frozen."""

    version: str | None  # the adapter's version id; None: the base student alone
    adapter: str | None  # its folder (relative to the data folder when inside it)
    reward_model: str | None  # the reward model that scores its replies and gates its successors
    since: str  # when it became live (ISO 8601, UTC)
    entry: int  # the index of the history entry that last changed this file; -1: nothing ever changed
    frozen: dict[str, str] | None = None  # {"since", "reason", "by"} while online updates are frozen
    change: dict[str, Any] | None = None  # that history entry itself: restored from here if a crash lost it

    @property
    def is_base(self) -> bool:
        return self.version is None


BASE = Live(version=None, adapter=None, reward_model=None, since="", entry=-1)


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def write_state_file(path: Path, payload: Any) -> None:
    """Replace `path` by `payload` as JSON, whole and durably (`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(payload, indent=2, default=str) + "\n", durable=True)


class LiveState:
    """The live pointer of one data folder. Every change goes through `_change`, under the lock."""

    def __init__(self, data_dir: Path):
        self.data_dir = Path(data_dir)
        self.dir = self.data_dir / LIVE_DIR
        self.current_path, self.history_path = self.dir / CURRENT, self.dir / HISTORY

    # -- reading ------------------------------------------------------------------------------------

    def current(self) -> Live:
        """The live adapter; `BASE` when nothing was ever promoted (or everything rolled back)."""
        if not self.current_path.is_file():
            return BASE
        try:
            raw = json.loads(self.current_path.read_text())
            return Live(**raw)
        except (ValueError, TypeError) as exc:  # only a hand edit gets here: writes are atomic
            raise LiveError(
                f"{self.current_path} is not a live pointer ({exc}); restore it from {self.history_path} "
                "with `hominem live rollback VERSION`"
            ) from None

    def history(self) -> list[dict[str, Any]]:
        if not self.history_path.is_file():
            return []
        try:
            entries = json.loads(self.history_path.read_text())
        except ValueError as exc:
            raise LiveError(
                f"{self.history_path} is not valid JSON ({exc}); it is only ever replaced whole, so it "
                "was edited by hand"
            ) from None
        if not isinstance(entries, list):
            raise LiveError(f"{self.history_path} holds {type(entries).__name__}, not a list of entries")
        return entries

    def adapter_path(self, live: Live | None = None) -> Path | None:
        live = self.current() if live is None else live
        return None if live.adapter is None else self.absolute(live.adapter)

    def reward_model_path(self, live: Live | None = None) -> Path | None:
        live = self.current() if live is None else live
        return None if live.reward_model is None else self.absolute(live.reward_model)

    def stack(self, history: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """The adapters that were live, oldest first, the live one last (the base, version None, at the bottom)."""
        stack: list[dict[str, Any]] = [{"version": None, "adapter": None, "reward_model": None}]
        for e in self.history() if history is None else history:
            if e["action"] == "promote":
                stack.append({k: e.get(k) for k in ("version", "adapter", "reward_model")})
            elif e["action"] == "rollback":
                versions = [s["version"] for s in stack]
                if e.get("version") in versions:
                    del stack[versions.index(e.get("version")) + 1 :]
                else:
                    stack.append({k: e.get(k) for k in ("version", "adapter", "reward_model")})
        return stack

    def candidates(self) -> list[dict[str, Any]]:
        """Adapters the gate refused and that have not been live since, newest first, each with its refusal."""
        last: dict[str, dict[str, Any]] = {}
        for e in self.history():
            if e["action"] in ("promote", "rollback", "refuse") and e.get("version"):
                last.pop(e["version"], None)
                last[e["version"]] = e
        return [e for e in reversed(last.values()) if e["action"] == "refuse"]

    # -- changing -----------------------------------------------------------------------------------

    def promote(
        self, version: str, adapter: Path, reward_model: Path | None, *, gate: dict[str, Any], reason: str, by: str
    ) -> Live:
        """Make `adapter` live (its gate passed: `gate` holds the figures); refused while frozen."""

        def change(current: Live, history: list[dict[str, Any]]) -> tuple[Live, dict[str, Any]]:
            if current.frozen:
                raise LiveError(
                    f"live updates are frozen since {current.frozen['since']} "
                    f"({current.frozen['reason']}); `hominem live unfreeze` first"
                )
            if version == current.version:
                raise LiveError(f"{version} is already live")
            entry = self._entry(
                "promote", version, adapter, reward_model, reason, by, gate=gate, previous=current.version
            )
            return Live(version, entry["adapter"], entry["reward_model"], entry["time"], -1), entry

        return self._change(change)

    def refuse(
        self, version: str, adapter: Path, reward_model: Path | None, *, gate: dict[str, Any], reason: str, by: str
    ) -> None:
        """Record that the gate refused `adapter`: it stays on disk as a candidate, with the reason."""
        self._change(
            lambda current, history: (
                current,
                self._entry("refuse", version, adapter, reward_model, reason, by, gate=gate, live=current.version),
            )
        )

    def rollback(self, version: str | None = None, *, reason: str, by: str, **extra: Any) -> Live:
        """Make the adapter live before the current one live again, or `version` (one that was live, by its id;
        "base" for the base student). Allowed while frozen: rolling back is how a bad update is undone."""

        def change(current: Live, history: list[dict[str, Any]]) -> tuple[Live, dict[str, Any]]:
            stack = self.stack(history)
            if version is None:
                if len(stack) < 2:
                    raise LiveError("nothing to roll back: the base student is live and no adapter was live before")
                target = stack[-2]
            else:
                wanted = None if version == "base" else version
                was_live = [
                    e for e in history if e["action"] in ("promote", "rollback") and e.get("version") == wanted
                ]
                if wanted is not None and not was_live:
                    raise LiveError(
                        f"{version} was never live; `hominem live status` lists the ones that were "
                        "(promote a candidate with `hominem live promote`)"
                    )
                target = (
                    {"version": None, "adapter": None, "reward_model": None}
                    if wanted is None
                    else {k: was_live[-1].get(k) for k in ("version", "adapter", "reward_model")}
                )
                if wanted == current.version:
                    raise LiveError(f"{version} is already live")
            if target["adapter"] is not None and not self.absolute(target["adapter"]).is_dir():
                raise LiveError(f"cannot roll back to {target['version']}: its folder {target['adapter']} is gone")
            entry = {
                "time": utc_now(),
                "action": "rollback",
                "version": target["version"],
                "adapter": target["adapter"],
                "reward_model": target["reward_model"],
                "reason": reason,
                "by": by,
                "previous": current.version,
                **extra,
            }
            return Live(
                target["version"], target["adapter"], target["reward_model"], entry["time"], -1, current.frozen
            ), entry

        return self._change(change)

    def freeze(self, *, reason: str, by: str, **extra: Any) -> Live:
        """Stop online updates and promotions until `unfreeze`; the live adapter keeps serving. `extra`: more
        fields of the history entry (the slow loop's step)."""

        def change(current: Live, history: list[dict[str, Any]]) -> tuple[Live, dict[str, Any]]:
            if current.frozen:
                raise LiveError(f"already frozen since {current.frozen['since']} ({current.frozen['reason']})")
            entry = {
                "time": utc_now(),
                "action": "freeze",
                "version": current.version,
                "reason": reason,
                "by": by,
                **extra,
            }
            return Live(**{**asdict(current), "frozen": {"since": entry["time"], "reason": reason, "by": by}}), entry

        return self._change(change)

    def unfreeze(self, *, by: str, reason: str = "", **extra: Any) -> Live:
        def change(current: Live, history: list[dict[str, Any]]) -> tuple[Live, dict[str, Any]]:
            if not current.frozen:
                raise LiveError("live updates are not frozen")
            return Live(**{**asdict(current), "frozen": None}), {
                "time": utc_now(),
                "action": "unfreeze",
                "version": current.version,
                "reason": reason,
                "by": by,
                **extra,
            }

        return self._change(change)

    def adjust(self, *, reason: str, by: str, **extra: Any) -> None:
        """Record a change of the next adapters' settings (the slow loop's `step`, its factor and the day it applies
        from)."""
        self._change(
            lambda current, history: (
                current,
                {
                    "time": utc_now(),
                    "action": "adjust",
                    "version": current.version,
                    "reason": reason,
                    "by": by,
                    **extra,
                },
            )
        )

    def note(self, text: str, *, by: str) -> None:
        """A note about the live adapter, kept in the history beside the changes."""
        if not text.strip():
            raise LiveError(
                'an empty note; write what you noticed, e.g. hominem live note "warmer replies, forgets my name"'
            )
        self._change(
            lambda current, history: (
                current,
                {"time": utc_now(), "action": "note", "version": current.version, "note": text.strip(), "by": by},
            )
        )

    # -- internals ----------------------------------------------------------------------------------

    def _relative(self, path: Path | None) -> str | None:
        if path is None:
            return None
        path = Path(path).resolve()
        try:
            return str(path.relative_to(self.data_dir.resolve()))
        except ValueError:
            return str(path)

    def absolute(self, stored: str) -> Path:
        """A path as stored in current.json or the history (relative to the data folder when inside it)."""
        p = Path(stored)
        return p if p.is_absolute() else self.data_dir / p

    def _entry(
        self, action: str, version: str, adapter: Path, reward_model: Path | None, reason: str, by: str, **extra: Any
    ) -> dict[str, Any]:
        return {
            "time": utc_now(),
            "action": action,
            "version": version,
            "adapter": self._relative(adapter),
            "reward_model": self._relative(reward_model),
            "reason": reason,
            "by": by,
            **extra,
        }

    def _change(self, change) -> Any:
        """Under the lock: read both files, restore a history entry a crash lost, apply `change`
        (current, history) -> (new current, history entry), write current.json, then the history."""
        from filelock import FileLock

        self.dir.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.dir / ".lock"), timeout=60):
            for torn in self.dir.glob(
                ".*.json.*.tmp"
            ):  # a writer killed mid-write left it; nobody else writes while we hold the lock
                torn.unlink(missing_ok=True)
            current, history = self.current(), self.history()
            if current.entry >= len(history) and current.change:  # killed after current.json, before history.json
                history.append({**current.change, "recovered": True})
            new, entry = change(current, history)
            entry = _finite(entry)
            history.append(entry)
            if new is not current:
                new = replace(new, entry=len(history) - 1, change=entry)
                write_state_file(self.current_path, asdict(new))
            write_state_file(self.history_path, history)
            log.info(
                "live: %s %s (%s)",
                entry["action"],
                entry.get("version") or "base",
                entry.get("reason") or entry.get("note", ""),
            )
            return new


def _finite(entry: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN: a gate figure that could not be measured is written as null."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    return clean(entry)


def check_adapter(folder: Path, base_checksum: str | None = None) -> dict[str, Any]:
    """Whether `folder` is an adapter that can serve: its PEFT config, every weight file readable whole
    and finite, and (given the live base's checksum) trained on that base. Returns its METADATA (or {});
    raises BadAdapter naming the file and what is wrong."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder)
    if not folder.is_dir():
        raise BadAdapter(f"{folder}: no such adapter folder")
    config = folder / "adapter_config.json"
    try:
        json.loads(config.read_text())
    except (OSError, ValueError) as exc:
        raise BadAdapter(f"{config}: not a readable PEFT adapter config ({exc})") from None
    weights = sorted(folder.glob("adapter_model*.safetensors"))
    if not weights:
        raise BadAdapter(f"{folder}: no adapter_model.safetensors")
    for path in weights:
        try:
            tensors = load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise BadAdapter(f"{path}: unreadable ({exc}); the file is damaged or cut short") from None
        bad = [name for name, t in tensors.items() if t.is_floating_point() and not bool(t.isfinite().all())]
        if bad:
            raise BadAdapter(f"{path}: {len(bad)} weight tensors hold NaN or infinite values (first: {bad[0]})")
    meta_path = folder / "METADATA.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    if base_checksum is not None:
        if not meta.get("base_checksum"):
            raise BadAdapter(
                f"{folder}: no METADATA.json with the base checksum it was trained on; only adapters the "
                "pipeline built can go live"
            )
        if meta["base_checksum"] != base_checksum:
            raise BadAdapter(
                f"{folder}: trained on another base (checksum {meta['base_checksum'][:12]}..., the live "
                f"student's is {base_checksum[:12]}...)"
            )
    return meta


def find_adapter(data_dir: Path, version: str) -> Path:
    """The folder of adapter `version`: a daily `lora_adapter/<day>/<version>` or an online update's
    `live/adapters/<version>`."""
    data_dir = Path(data_dir)
    online = data_dir / LIVE_DIR / ONLINE_ADAPTERS / version
    found = ([online] if online.is_dir() else []) + sorted((data_dir / "lora_adapter").glob(f"*/{version}"))
    if not found:
        raise LiveError(
            f"no adapter {version!r} in {data_dir / 'lora_adapter'} or {online.parent}; `hominem live "
            "status` lists the candidates"
        )
    return found[0]
