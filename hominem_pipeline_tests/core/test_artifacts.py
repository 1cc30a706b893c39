from hominem_pipeline.core.pipeline.artifacts import ArtifactStore, folder_digest


def publish(store, asset, day, version, text, complete=True):
    with store.staging(asset, day) as staged:
        (staged / "x.txt").write_text(text)
        return store.publish(staged, asset, day, version, {"table": None, "metadata": {"rows": 1}}, complete=complete)


def test_versions_are_immutable_and_record_their_content(tmp_path):
    store = ArtifactStore(tmp_path)
    first = publish(store, "labels", "2026-11-20", "v1", "one")
    second = publish(store, "labels", "2026-11-20", "v2", "two")
    assert (first.path / "x.txt").read_text() == "one"  # the old version is still there, untouched
    assert [r.version for r in store.versions("labels", "2026-11-20")] == ["v1", "v2"]
    assert second.manifest["files"]["x.txt"] == "3fc4ccfe745870e2c0d99f71f30ff0656c8dedd41cc1d7d3d376b0dbe685e2f3"
    assert first.content != second.content and len(first.content) == 16
    assert not list((tmp_path / "labels" / "2026-11-20").glob(".staging-*"))


def test_publishing_an_existing_version_keeps_the_first(tmp_path):
    store = ArtifactStore(tmp_path)
    publish(store, "labels", "2026-11-20", "v1", "first")
    publish(store, "labels", "2026-11-20", "v1", "second")
    assert (store.existing("labels", "2026-11-20", "v1").path / "x.txt").read_text() == "first"


def test_find_prefers_the_complete_version_and_falls_back_to_its_partial_build(tmp_path):
    store = ArtifactStore(tmp_path)
    assert store.find("labels", "2026-11-20", "v1") is None
    partial = publish(store, "labels", "2026-11-20", "v1", "half", complete=False)
    assert partial.version.startswith("v1-partial-") and not partial.complete
    assert store.find("labels", "2026-11-20", "v1") == partial
    assert store.existing("labels", "2026-11-20", "v1") is None  # a partial build is never reused as the version
    whole = publish(store, "labels", "2026-11-20", "v1", "whole")
    assert store.find("labels", "2026-11-20", "v1") == whole
    assert store.partitions("labels") == ["2026-11-20"]


def test_folder_digest_follows_the_bytes_and_reuses_unchanged_hashes(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "w.bin").write_bytes(b"abc")
    first = folder_digest(tmp_path / "m")
    assert folder_digest(tmp_path / "m") == first
    (tmp_path / "m" / "w.bin").write_bytes(b"abd")
    assert folder_digest(tmp_path / "m") != first
