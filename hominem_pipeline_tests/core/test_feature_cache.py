"""The reward features cache: what a frozen network computed for a text, kept on disk by content."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hominem_pipeline.core.reward import feature_cache
from hominem_pipeline.core.reward.feature_cache import FeatureCache, cached_rows, ids_key, text_key
from hominem_pipeline_tests.core.test_reward_model import DIMS, small_cfg, toy_labels


def test_rows_outlive_the_process_per_namespace_and_the_oldest_go_first(tmp_path, monkeypatch):
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    cache = FeatureCache(tmp_path, ["net", "abc"], 3)
    cache.add(["a", "b"], rows[:2])
    cache.add(["b", "c"], rows[1:3])  # b is held already: only c is written
    again = FeatureCache(tmp_path, ["net", "abc"], 3)  # another process
    assert len(again) == 3 and np.array_equal(again.get(["c"])["c"], rows[2])
    assert again.get(["a", "zzz"]).keys() == {"a"} and (again.hits, again.misses) == (2, 1)
    assert len(FeatureCache(tmp_path, ["net", "other weights"], 3)) == 0  # another network reads none of them
    # a foreign or torn file is ignored, not fatal
    (again.folder / "shard-00000000000000000000-bad.npz").write_bytes(b"not a shard")
    (again.folder / ".shard-x.npz.123.tmp").write_bytes(b"torn")
    assert len(FeatureCache(tmp_path, ["net", "abc"], 3)) == 3
    (again.folder / "shard-00000000000000000000-bad.npz").unlink()

    small = FeatureCache(tmp_path, ["net", "abc"], 3, max_rows=3)
    small.add(["d"], rows[3:])  # 4 rows > 3: the oldest shard (a, b) goes
    assert set(FeatureCache(tmp_path, ["net", "abc"], 3).get(["a", "b", "c", "d"])) == {"c", "d"}

    monkeypatch.setattr(feature_cache, "COMPACT_AT", 2)
    many = FeatureCache(tmp_path / "compact", ["n"], 3)
    for i, key in enumerate("pqr"):
        many.add([key], rows[i : i + 1])
    assert len(list(many.folder.glob("shard-*.npz"))) == 1  # merged once there were more than 2
    assert set(FeatureCache(tmp_path / "compact", ["n"], 3).get(list("pqr"))) == set("pqr")


def test_cached_rows_compute_only_what_is_missing(tmp_path):
    cache, asked = FeatureCache(tmp_path, ["n"], 2), []

    def compute(todo):
        asked.append(list(todo))
        return torch.tensor([[float(i), 1.0] for i in todo])

    first = cached_rows(cache, ["x", "y"], compute, 2)
    second = cached_rows(cache, ["y", "z", "x"], compute, 2)
    assert asked == [[0, 1], [1]]  # z alone, at its position in the second call
    assert second.tolist() == [[1.0, 1.0], [1.0, 1.0], [0.0, 1.0]] and first.tolist() == [[0.0, 1.0], [1.0, 1.0]]
    assert text_key("a", "bc") != text_key("ab", "c") and ids_key([1, 2]) != ids_key([2, 1])


def test_a_second_training_reads_the_texts_it_read_before_and_fits_the_same_heads(tiny_student, tmp_path):
    """The reward model of the next day reads the shipped pairs' features from the cache: no backbone or
    guard pass for them, and the same model as without the cache."""
    import pandas as pd

    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline.core.reward.training import RewardSources, train_reward_model

    cfg = small_cfg(
        guards=["reply_logp", "prompt_gain"], backbone={"path": None, "finetune": "frozen"}, head_fit="ridge"
    )
    people = pd.DataFrame(
        {
            "prompt": ["How was it?", "Any news?", "How are you?"],
            "chosen": ["Quiet, thanks.", "None yet.", "Well, and you?"],
            "rejected": ["zq xv", "asd qwe", "mlk poi"],
        }
    )
    cache, runs = tmp_path / "cache", []
    for name, folder in (("first", cache), ("second", cache), ("without", None)):
        metrics = train_reward_model(
            toy_labels(),
            dimensions=DIMS,
            sources=RewardSources(tiny_student, feature_cache=folder),
            cfg=cfg,
            out_dir=tmp_path / name,
            seed=0,
            data_digest="c",
            date="2026-11-20",
            human_pairs=people,
        ).metrics
        runs.append(metrics)
    texts = len(toy_labels()) + 2 * len(people)
    assert runs[0]["feature_cache_pooled_hits"] == 0 and runs[0]["feature_cache_guards_hits"] == 0
    assert runs[1]["feature_cache_pooled_hits"] == texts and runs[1]["feature_cache_guards_hits"] == texts
    assert "feature_cache_pooled_hits" not in runs[2]
    prompts, replies = ["How is it going?"] * 2, ["It was a good day, thanks.", "wug zq blorp xv"]
    scores = [
        RewardModel.load(tmp_path / name).raw_scores(prompts, replies)["scalar"]
        for name in ("first", "second", "without")
    ]
    assert np.allclose(scores[0], scores[1], atol=1e-5) and np.allclose(scores[0], scores[2], atol=1e-4)


def test_rows_of_another_width_are_not_read(tmp_path):
    """A namespace that left the width out: the same folder read as another width holds nothing."""
    FeatureCache(tmp_path, ["n"], 3).add(["a"], np.ones((1, 3)))
    other = FeatureCache(tmp_path, ["n"], 4)
    assert other.folder == FeatureCache(tmp_path, ["n"], 3).folder and len(other) == 0


def test_shipped_rows_are_read_never_written_and_a_fresh_clone_measures_none_of_them(
    tiny_student, tmp_path, monkeypatch
):
    """Rows shipped with the project (`hominem data ship-features`) serve a scorer with an empty cache:
    the student reads only what was not shipped, and the shipped rows equal the measured ones."""
    from hominem_pipeline.core.reward.guards import GuardScorer

    prompts, replies = ["How was it?", "How was it?", "Any news?"], ["Quiet, thanks.", "zq xv", "None yet."]
    first = GuardScorer(["reply_logp", "prompt_gain"], tiny_student, cache=tmp_path / "maintainer")
    measured = first(prompts, replies)
    shipped = tmp_path / "config" / "human" / "features"
    path = first.disk_cache().ship([text_key(p, r) for p, r in zip(prompts, replies)], shipped)
    assert path.parent == shipped and path.stem == first.disk_cache().folder.name
    try:
        first.disk_cache().ship([text_key("never", "read")], shipped)
        raise AssertionError("shipping a row nobody measured must fail")
    except KeyError as exc:
        assert "compute them before shipping" in str(exc)

    fresh = GuardScorer(["reply_logp", "prompt_gain"], tiny_student, cache=tmp_path / "fresh-clone", shipped=shipped)
    read: list[list[str]] = []
    real = fresh._measure
    monkeypatch.setattr(fresh, "_measure", lambda p, r: read.append(list(r)) or real(p, r))
    got = fresh(prompts + ["Any news?"], replies + ["Nothing at all."])
    assert read == [["Nothing at all."]]  # only the reply nobody shipped
    assert torch.allclose(got[:3], measured) and fresh.disk_cache().shipped == 3
    assert (
        len(list(fresh.disk_cache().folder.glob("shard-*.npz"))) == 1
    )  # the new reply's shard; nothing shipped written again
    other = GuardScorer(
        ["reply_logp"], tiny_student, cache=tmp_path / "other", shipped=shipped
    )  # another setting: another namespace
    assert other.disk_cache().shipped == 0


def test_the_shipped_rows_cover_every_shipped_text_as_training_and_scoring_read_it(tiny_student):
    """config/human/features/ holds, per shipped file (the people's pairs the heads read, the contrast
    fixtures), the guard columns and the pooled backbone row of every reply, keyed as the reward model
    reads them (the same tokenizer, judge frame and window). After changing config/human/, the fixtures,
    the judge's frame or the guards, run `hominem data ship-features` and commit the folder."""
    import json

    from transformers import AutoTokenizer

    from hominem_pipeline.core.builds.shipping import shipped_texts
    from hominem_pipeline.core.config.loader import load_config
    from hominem_pipeline.core.pipeline.artifacts import optional_file_digest
    from hominem_pipeline.core.reward.encoding import judge_frame, make_encoder
    from hominem_pipeline.core.teacher.base import rubric_system
    from hominem_pipeline_tests.conftest import REPO

    cfg = load_config(root=REPO)
    folder = cfg.path(feature_cache.SHIPPED_FEATURES)
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    assert manifest["file_digests"] == {
        f: optional_file_digest(cfg.path(f))
        for f in [s.file for s in cfg.reward_model.people_pairs] + [cfg.fixtures.file]
    }
    tokenizer = AutoTokenizer.from_pretrained(tiny_student)  # SmolLM2's own tokenizer and chat template
    assert cfg.reward_model.backbone.frame == "judge_question"
    encode = make_encoder(
        tokenizer,
        judge_frame(tokenizer, rubric_system(cfg.labeling), cfg.labeling.scalar_question),
        cfg.reward_model.max_length,
    )
    texts = dict(shipped_texts(cfg))
    kinds: dict[str, set[str]] = {}
    for name, entry in manifest["files"].items():
        if (
            entry["features"].startswith("people_") or "files" in entry
        ):  # the people's score's projection and its rows, the rows of
            continue  # the held-out pairs and the reference's: below
        with np.load(folder / name, allow_pickle=False) as saved:
            keys, rows = set(saved["keys"].tolist()), saved["rows"]
        wanted = {
            ids_key(encode(p, r)) if entry["features"] == "pooled" else text_key(p, r) for p, r in texts[entry["file"]]
        }
        assert wanted == keys and rows.shape[0] == len(keys) and np.isfinite(rows).all(), name
        kinds.setdefault(entry["features"], set()).add(entry["file"])
        if entry["features"] == "guards":
            assert entry["columns"] == list(cfg.reward_model.guards) and rows.shape[1] == len(cfg.reward_model.guards)
        if (
            entry["features"] == "student_logps"
        ):  # (summed log-probability, tokens) of each fixture reply under the base student
            assert entry["columns"] == ["sum", "tokens"] and (rows[:, 0] < 0).all() and (rows[:, 1] >= 1).all()
    fixtures = Path(cfg.fixtures.file).name
    assert kinds == {"guards": set(texts), "pooled": set(texts), "student_logps": {fixtures}} and len(texts) == 3
    # the people's score's projection for the configured encoder and length, and the rows of every
    # shipped people's pair's replies (the heads' and the score's own) read through it
    from hominem_pipeline.core.builds.reward_model import people_pairs
    from hominem_pipeline.core.reward.people import EncoderStates, Projection

    [projection_name] = [n for n, e in manifest["files"].items() if e["features"] == "people_projection"]
    [rows_name] = [n for n, e in manifest["files"].items() if e["features"] == "people_projected"]
    assert (
        cfg.reward_model.people_score.encoder == "encoder"
        and manifest["files"][rows_name]["max_length"] == cfg.reward_model.people_score.max_length
    )
    projection = Projection.load(folder / projection_name)
    pairs = people_pairs(
        cfg, "all"
    )  # the projection reads every shipped reply's text, the held-out ones' too (never their choice)
    with np.load(folder / rows_name, allow_pickle=False) as saved:
        keys, rows = set(saved["keys"].tolist()), saved["rows"]
    assert keys == {
        text_key(p, r) for p, c, j in zip(pairs["prompt"], pairs["chosen"], pairs["rejected"]) for r in (c, j)
    }
    assert (
        rows.shape == (len(keys), projection.basis.shape[1])
        and projection.basis.shape == (2 * 6 * 384, 256)
        and np.isfinite(rows).all()
    )
    # the texts the invariance pairs make from the pairs the model reads, read through the same projection
    from hominem_pipeline.core.reward.invariance import invariance_pairs

    sources = cfg.reward_model.people_score.invariance.sources
    invariance = [n for n, e in manifest["files"].items() if e["features"] == "people_invariance"]
    assert len(invariance) == (1 if sources else 0)
    if sources:
        train = people_pairs(cfg)
        made = invariance_pairs(list(train["prompt"]), list(train["chosen"]), range(len(train)), sources)
        with np.load(folder / invariance[0], allow_pickle=False) as saved:
            assert set(saved["keys"].tolist()) == {text_key(p, r) for p, r in made.texts}
            assert saved["rows"].shape == (len(made.texts), projection.basis.shape[1])
        assert manifest["files"][invariance[0]]["sources"] == sources
    from hominem_pipeline.core.lm.models import encoder_path

    # named for the installed encoder, so that a fresh clone's fit finds it
    assert (
        EncoderStates(encoder_path(cfg), cfg.reward_model.people_score.max_length).projection_file(folder).name
        == projection_name
    )
    assert sorted([p.name for p in folder.glob("*.npz")] + [p.name for p in folder.glob("*.safetensors")]) == sorted(
        manifest["files"]
    )
    # the base student's log-probabilities of the people's held-out pairs' replies (the evaluation's implicit reward
    # reads them) ...
    [held_name] = [n for n, e in manifest["files"].items() if e["features"] == "student_logps" and "files" in e]
    held = people_pairs(cfg, "held_out")
    with np.load(folder / held_name, allow_pickle=False) as saved:
        assert set(saved["keys"].tolist()) == {
            text_key(p, r) for p, c, j in zip(held["prompt"], held["chosen"], held["rejected"]) for r in (c, j)
        }
        assert (saved["rows"][:, 0] < 0).all() and (saved["rows"][:, 1] >= 1).all()
    # ... and the reference's of every pair the daily adapter learns from, as the dual trainer encodes them
    from hominem_pipeline.core.policy.dual import sequence_key
    from hominem_pipeline.core.policy.sequences import pair_sequences

    [reference_name] = [n for n, e in manifest["files"].items() if e["features"] == "reference_logps"]
    assert (
        manifest["files"][reference_name]["max_length"] == cfg.policy.max_length and cfg.policy.dual.people_share > 0
    )
    with np.load(folder / reference_name, allow_pickle=False) as saved:
        keys, logps = set(saved["keys"].tolist()), saved["logps"]
    train = people_pairs(cfg)
    assert (
        keys == {sequence_key(s) for pair in pair_sequences(tokenizer, train, cfg.policy.max_length) for s in pair}
        and (logps < 0).all()
    )
    # ... and the people's start every daily adapter begins from, trained on those pairs as policy.dual.people_start
    # says
    from safetensors import safe_open

    from hominem_pipeline.core.policy.people_start import lora_shape, pairs_key

    [start_name] = [n for n, e in manifest["files"].items() if e["features"] == "people_start"]
    with safe_open(str(folder / start_name), "pt") as fh:
        settings = json.loads(fh.metadata()["settings"])
    start = cfg.policy.dual.people_start
    assert (settings["pairs_key"], settings["lora"], settings["max_steps"], settings["learning_rate"]) == (
        pairs_key(train),
        lora_shape(cfg.policy.lora),
        start.max_steps,
        start.learning_rate,
    )


def test_a_saved_model_scores_from_the_rows_its_training_computed(tiny_student, tmp_path, monkeypatch):
    """With the feature cache, a saved model on a frozen backbone reads the pooled states training
    computed (the day's candidates, scored again by the pairs stage) and gives the scores of a full pass."""
    from hominem_pipeline.core.reward import dataset
    from hominem_pipeline.core.reward.model import RewardModel
    from hominem_pipeline.core.reward.training import RewardSources, train_reward_model

    cfg = small_cfg(guards=["reply_logp"], backbone={"path": None, "finetune": "frozen"}, head_fit="ridge")
    cache = tmp_path / "cache"
    train_reward_model(
        toy_labels(),
        dimensions=DIMS,
        sources=RewardSources(tiny_student, feature_cache=cache),
        cfg=cfg,
        out_dir=tmp_path / "rm",
        seed=0,
        data_digest="c",
        date="2026-11-20",
    )
    labels = toy_labels()
    prompts, replies = (
        list(labels["prompt"]) + ["How is it going?"],
        list(labels["response"]) + ["A reply nobody read."],
    )
    plain = RewardModel.load(tmp_path / "rm").raw_scores(prompts, replies, uncertainty=True)
    cached = RewardModel.load(tmp_path / "rm")
    cached.use_feature_cache(cache)
    read: list[int] = []
    real = dataset.length_sorted_batches
    monkeypatch.setattr(
        dataset, "length_sorted_batches", lambda encoded, *a: read.append(len(encoded)) or real(encoded, *a)
    )
    scores = cached.raw_scores(prompts, replies, uncertainty=True)
    assert read == [1]  # the backbone read the one new reply; the others came from training's rows
    for key in ("scalar", "vector", "safety_score"):
        assert np.allclose(scores[key], plain[key], atol=1e-5) and np.allclose(
            scores["std"][key], plain["std"][key], atol=1e-5
        )
