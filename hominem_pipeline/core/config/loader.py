"""Reading the configuration: `config/hominem.yaml`, then a user's overlay (`--config`, with the overlays
it `extends`), then overrides; an unknown key or a bad value fails at once with the key's path, the
value and what is allowed."""

from __future__ import annotations

import os
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

import hominem_pipeline
from hominem_pipeline.core.common.files import write_text_atomic
from hominem_pipeline.core.config import (
    DEFAULT_CONFIG_RELPATH,
    ConfigError,
    HominemConfig,
)


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """Overlay `overlay` on `base`: mappings merge key by key, anything else (lists, values, null, which
    means None) replaces."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _overlay_chain(path: Path, root: Path, seen: tuple[Path, ...]) -> list[tuple[Path, dict[str, Any]]]:
    """The overlay at `path` after the overlays its `extends:` names (a path or a list, relative to the
    project root, each with its own `extends`), in the order they apply: a file combines others, e.g.
    the dual training overlay with the encoder reward model, and sets only what it adds."""
    if path in seen:
        loop = " -> ".join(str(s) for s in (*seen, path))
        raise ConfigError(f"config file {path} extends itself ({loop}); remove the loop in `extends:`")
    data = _read_yaml(path)
    extends = data.pop("extends", None) or []
    if isinstance(extends, str):
        extends = [extends]
    if not isinstance(extends, list) or not all(isinstance(e, str) for e in extends):
        raise ConfigError(
            f"config file {path}: `extends:` must be a path or a list of paths (relative to the project "
            f"root), got {extends!r}"
        )
    chain: list[tuple[Path, dict[str, Any]]] = []
    for name in extends:
        parent = (root / name).resolve()
        if not parent.is_file():
            raise ConfigError(
                f"config file {path} extends {name}, which does not exist under {root}; give a path "
                "relative to the project root"
            )
        chain += _overlay_chain(parent, root, seen + (path,))
    return chain + [(path, data)]


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass an existing YAML file with --config")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {exc.object[exc.start : exc.start + 1]!r} at "
            f"offset {exc.start}); save it as UTF-8"
        ) from None
    try:
        data = yaml.safe_load(text) or {}
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(
            f"config file {path} is not valid YAML: {exc if isinstance(exc, yaml.YAMLError) else 'nested too deeply'}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections, got {type(data).__name__}")
    return data


def _field_at(loc: tuple[Any, ...]) -> Any:
    """The pydantic FieldInfo at a validation error's location, or None (list items, dict values)."""
    model: Any = HominemConfig
    info = None
    for part in loc:
        if isinstance(part, int) and typing.get_origin(model) is list:
            model = typing.get_args(model)[0]  # an item of a list field: descend into its type
            continue
        fields = getattr(model, "model_fields", None)
        if not isinstance(part, str) or not fields or part not in fields:
            return None
        info = fields[part]
        model = info.annotation
    return info


def _allowed(loc: tuple[Any, ...]) -> str:
    """The field's whole allowed range ('2 <= value <= 16'), read from its constraints."""
    info = _field_at(loc)
    if info is None:
        return ""
    symbols = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >="}
    parts = []
    for meta in info.metadata:
        for attr, sym in symbols.items():
            if getattr(meta, attr, None) is not None:
                parts.append(f"{sym} {getattr(meta, attr)}")
    if not parts:
        return ""
    lower = [p for p in parts if p.startswith(">")]
    upper = [p for p in parts if p.startswith("<")]
    if len(lower) == 1 and len(upper) == 1:
        return f"{lower[0].split()[1]} {'<=' if lower[0].startswith('>=') else '<'} value {upper[0]}"
    return ", ".join(f"value {p}" for p in parts)


def format_validation_error(exc: ValidationError, source: str) -> str:
    lines = [f"invalid configuration ({source}):"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = ".".join(str(p) for p in loc) or "<root>"
        if err["type"] == "extra_forbidden":
            lines.append(f"  {path}: unknown key (value {err['input']!r}); remove it or fix its spelling")
            continue
        value = err.get("input")
        shown = "" if isinstance(value, dict) else f" = {value!r}"
        allowed = _allowed(loc)
        hint = f" (allowed: {allowed})" if allowed else ""
        info = _field_at(loc)
        meaning = f"\n    {path}: {info.description}" if info is not None and info.description else ""
        lines.append(f"  {path}{shown}: {err['msg']}{hint}{meaning}")
    return "\n".join(lines)


class Setting(typing.NamedTuple):
    key: str  # dotted
    value: Any  # as YAML would hold it; None for a section
    meaning: str  # the field's description
    section: bool  # a group of settings, not one


def describe(cfg: HominemConfig, prefixes: list[str]) -> list[Setting]:
    """Every setting under each prefix ("" for all; a section such as
    `policy.dual`, or one key), from the models' `Field(description=...)`. An unknown prefix raises
    KeyError naming the keys there are."""
    from pydantic import BaseModel

    rows: list[Setting] = []

    def walk(model: type[BaseModel], data: dict[str, Any], path: str) -> None:
        for name, info in model.model_fields.items():
            if info.exclude:
                continue
            section = (
                info.annotation
                if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel)
                else None
            )
            rows.append(
                Setting(path + name, None if section else data[name], info.description or "", section is not None)
            )
            if section:
                walk(section, data[name], f"{path}{name}.")

    walk(HominemConfig, cfg.model_dump(mode="json"), "")
    picked: list[Setting] = []
    for prefix in prefixes:
        found = [r for r in rows if not prefix or r.key == prefix or r.key.startswith(prefix + ".")]
        if not found:
            sections = ", ".join(r.key for r in rows if "." not in r.key)
            raise KeyError(f"no setting {prefix!r}; the sections are {sections} (e.g. `hominem config policy.dual`)")
        picked += [r for r in found if r not in picked]
    return picked


def find_project_root(start: Path | None = None) -> Path:
    """The folder holding `config/hominem.yaml`: $HOMINEM_HOME, else the nearest parent of `start`
    (default: cwd), else the checkout this package was installed from."""
    env = os.environ.get("HOMINEM_HOME")
    if env:
        root = Path(env).resolve()
        if not (root / DEFAULT_CONFIG_RELPATH).is_file():
            raise ConfigError(f"HOMINEM_HOME={env} has no {DEFAULT_CONFIG_RELPATH}; point it at the project folder")
        return root
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / DEFAULT_CONFIG_RELPATH).is_file():
            return candidate
    package_parent = Path(hominem_pipeline.__file__).resolve().parents[1]
    if (package_parent / DEFAULT_CONFIG_RELPATH).is_file():
        return package_parent
    raise ConfigError(
        f"no {DEFAULT_CONFIG_RELPATH} found above {here}; run from the hominem project folder or set HOMINEM_HOME"
    )


DATA_DIR = "${data_dir}"  # in any setting: project.data_dir as configured, so the stores under it move with it


def with_data_dir(node: Any, data_dir: str) -> Any:
    """`node` with every `${data_dir}` in its strings replaced by `data_dir`."""
    if isinstance(node, str):
        return node.replace(DATA_DIR, data_dir)
    if isinstance(node, dict):
        return {k: with_data_dir(v, data_dir) for k, v in node.items()}
    if isinstance(node, list):
        return [with_data_dir(v, data_dir) for v in node]
    return node


def load_config(
    overlay: str | os.PathLike[str] | None = None,
    *,
    root: Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> HominemConfig:
    """Load the project's default config, overlay a user's file and then `overrides` (used by tests)."""
    root = (root or find_project_root()).resolve()
    default_path = root / DEFAULT_CONFIG_RELPATH
    data = _read_yaml(default_path)
    sources = [str(default_path)]
    if overlay is not None:
        overlay_path = Path(overlay).resolve()
        if overlay_path != default_path:
            for path, layer in _overlay_chain(overlay_path, root, ()):
                data = deep_merge(data, layer)
                sources.append(str(path))
    if overrides:
        data = deep_merge(data, overrides)
        sources.append("overrides")
    data_dir = (data.get("project") or {}).get("data_dir")
    if isinstance(data_dir, str) and data_dir:
        data = with_data_dir(data, data_dir.rstrip("/") or "/")
    try:
        return HominemConfig.model_validate(
            {**data, "root": root, "overlay": Path(overlay).resolve() if overlay is not None else None}
        )
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, " + ".join(sources))) from None


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """`["policy.mode=dual", "preferences.guard_dimension=null"]` as nested overrides; values are YAML
    (numbers, booleans, null, lists)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise ConfigError(f"--set {item!r}: write KEY=VALUE with a dotted key, e.g. --set policy.mode=dual")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML ({exc})") from None
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {item!r}: {'.'.join(parts[:-1])} was set to a value by an earlier --set")
        node[parts[-1]] = value
    return out


def write_set_overlay(
    overlay: str | os.PathLike[str] | None, overrides: dict[str, Any], root: Path | None = None
) -> Path:
    """An overlay file extending `overlay` with `overrides`, under data/overlays/ (named by its content),
    validated first: what `--set` runs with, so a Dagster run and any later command read the same."""
    import hashlib

    root = (root or find_project_root()).resolve()
    base = load_config(
        overlay, root=root, overrides=overrides
    )  # fails here, naming the key, before anything is written
    content = {**({"extends": [str(Path(overlay).resolve())]} if overlay is not None else {}), **overrides}
    text = "# written by `hominem --set`: the overlay below plus the --set values\n" + yaml.safe_dump(
        content, sort_keys=True
    )
    path = base.data_dir / "overlays" / f"set-{hashlib.sha256(text.encode()).hexdigest()[:12]}.yaml"
    if not path.is_file():
        write_text_atomic(path, text)
    return path
