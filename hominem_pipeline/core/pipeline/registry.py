"""Models from the MLflow model registry, on any machine that reaches the tracking server:
`models:/hominem-lora-adapter@champion` (the live adapter), `models:/hominem-reward-model@champion` (the
reward model it serves with), `@current` (the newest built), or `models:/NAME/VERSION`.

A registry version is downloaded once into the project's `data/cache/registry/<name>/<version>/` and
read from there afterwards; `alias_version` tells a server that follows an alias when it moved. The
tracking URI is `tracking.mlflow_uri` (a tracking server in a deployment: `http://...`).
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from hominem_pipeline.core.config import HominemConfig

log = logging.getLogger(__name__)

PREFIX = "models:/"
REGISTRY_CACHE = Path("cache") / "registry"
_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[\w-]+)|/(?P<version>\d+))$")


class RegistryError(ValueError):
    """A registry URI that is malformed, or names a model, alias or version the registry does not have."""


def is_registry_uri(value: str | None) -> bool:
    return bool(value) and str(value).startswith(PREFIX)


def _parts(uri: str) -> tuple[str, str | None, str | None]:
    match = _URI.match(uri)
    if match is None:
        raise RegistryError(
            f"{uri!r} is not a registry model: use models:/NAME@ALIAS (e.g. "
            "models:/hominem-lora-adapter@champion) or models:/NAME/VERSION"
        )
    return match["name"], match["alias"], match["version"]


def _client(cfg: HominemConfig):
    import mlflow

    mlflow.set_tracking_uri(cfg.mlflow_uri)
    return mlflow.MlflowClient()


def alias_version(cfg: HominemConfig, uri: str) -> str | None:
    """The registry version `uri` names now (its alias followed); None when the alias points nowhere."""
    from mlflow.exceptions import MlflowException

    name, alias, version = _parts(uri)
    if version is not None:
        return version
    try:
        return str(_client(cfg).get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def fetch(cfg: HominemConfig, uri: str, marker: str, version: str | None = None) -> Path:
    """The folder of the registry version `uri` names (downloaded once into data/cache/registry), the one
    inside it that holds `marker` (adapter_config.json for an adapter, METADATA.json for a reward model).
    `version`: the one `alias_version` just said (not asked again)."""
    import mlflow

    name, _, _ = _parts(uri)
    version = version or alias_version(cfg, uri)
    if version is None:
        raise RegistryError(
            f"{uri}: no version of {name} has that alias in the registry at {cfg.mlflow_uri} (yet); "
            f"`hominem live promote` moves `champion`, each build moves `current`"
        )
    folder = cfg.data_dir / REGISTRY_CACHE / name / version
    if not folder.is_dir():
        partial = folder.with_name(f".{version}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        log.info("downloading %s (version %s) from %s", uri, version, cfg.mlflow_uri)
        try:
            mlflow.artifacts.download_artifacts(artifact_uri=f"{PREFIX}{name}/{version}", dst_path=str(partial))
        except Exception as exc:  # the server's own error, said with what was asked
            shutil.rmtree(partial, ignore_errors=True)
            raise RegistryError(f"{uri}: downloading version {version} from {cfg.mlflow_uri} failed: {exc}") from exc
        partial.rename(folder)  # whole or not at all
    found = sorted(folder.rglob(marker), key=lambda p: len(p.parts))
    if not found:
        raise RegistryError(f"{uri} (version {version}) has no {marker}: it is not the kind of model asked for here")
    return found[0].parent
