import json

import pytest

from hominem_pipeline.core.artifacts import ArtifactNotFound, ArtifactStore


def publish(store, asset, day, version, text):
    with store.staging(asset, day) as staged:
        (staged / "x.txt").write_text(text)
        ref = store.publish(staged, asset, day, version, {"table": None, "metadata": {"rows": 1}})
    store.point_current(ref)
    return ref


def test_versions_are_immutable_and_current_moves(tmp_path):
    store = ArtifactStore(tmp_path)
    first = publish(store, "labels", "2026-11-20", "v1", "one")
    second = publish(store, "labels", "2026-11-20", "v2", "two")
    assert (first.path / "x.txt").read_text() == "one"  # the old version is still there, untouched
    assert store.current("labels", "2026-11-20").version == "v2"
    assert second.manifest["files"]["x.txt"] == "3fc4ccfe745870e2c0d99f71f30ff0656c8dedd41cc1d7d3d376b0dbe685e2f3"
    assert not list((tmp_path / "labels" / "2026-11-20").glob(".staging-*"))


def test_publishing_an_existing_version_keeps_the_first(tmp_path):
    store = ArtifactStore(tmp_path)
    publish(store, "labels", "2026-11-20", "v1", "first")
    publish(store, "labels", "2026-11-20", "v1", "second")
    assert (store.existing("labels", "2026-11-20", "v1").path / "x.txt").read_text() == "first"


def test_window_skips_missing_days_but_needs_its_own_day(tmp_path):
    store = ArtifactStore(tmp_path)
    publish(store, "labels", "2026-11-18", "a", "")
    publish(store, "labels", "2026-11-20", "b", "")
    publish(store, "labels", "2026-11-10", "old", "")
    assert [r.partition for r in store.window("labels", "2026-11-20", 7)] == ["2026-11-18", "2026-11-20"]
    with pytest.raises(ArtifactNotFound, match="hominem run --date 2026-11-21 --select 'labels'"):
        store.window("labels", "2026-11-21", 7)


def test_dangling_pointer_is_an_error(tmp_path):
    store = ArtifactStore(tmp_path)
    (tmp_path / "labels" / "2026-11-20").mkdir(parents=True)
    (tmp_path / "labels" / "2026-11-20" / "current.json").write_text(json.dumps({"version": "gone"}))
    with pytest.raises(ArtifactNotFound, match="missing"):
        store.current("labels", "2026-11-20")
