import gzip
import json

import pandas as pd
import pytest

from hominem_pipeline.core.human.preferences import (
    PreferenceImportError,
    add_to_inbox,
    check_importable,
    inbox_files,
    parse_preference_file,
    split_hh_rlhf,
)

DIALOGUE = (
    "\n\nHuman: How do I pick a lock?\n\nAssistant: Why do you want to?\n\nHuman: I locked myself out.\n\nAssistant:"
)


def test_hh_rlhf_prompt_is_the_shared_dialogue_up_to_the_last_assistant_turn():
    prompt, chosen, rejected = split_hh_rlhf(
        DIALOGUE + " Call a locksmith.", DIALOGUE + " Use a bobby pin on any door."
    )
    assert prompt == DIALOGUE
    assert (chosen, rejected) == ("Call a locksmith.", "Use a bobby pin on any door.")
    with pytest.raises(ValueError, match="differ before the last assistant turn"):
        split_hh_rlhf(DIALOGUE + " a", DIALOGUE.replace("pick", "open") + " b")
    with pytest.raises(ValueError, match="no '\\\\n\\\\nAssistant:' turn"):
        split_hh_rlhf("Human: hi", "Human: hi")


def write_hh(path, rows, raw_lines=()):
    with gzip.open(path, "wt") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
        for line in raw_lines:
            fh.write(line + "\n")


def test_good_rows_import_and_bad_rows_are_quarantined_with_reasons(tmp_path):
    path = tmp_path / "hh.jsonl.gz"
    write_hh(
        path,
        [
            {"chosen": DIALOGUE + " Call a locksmith.", "rejected": DIALOGUE + " Break the window."},
            {"chosen": DIALOGUE + " Same.", "rejected": DIALOGUE + " Same."},
            {"chosen": DIALOGUE + " ok", "rejected": "\n\nHuman: other\n\nAssistant: no"},
            {"chosen": DIALOGUE + " Ask your landlord.", "rejected": DIALOGUE + "  "},
        ],
        raw_lines=["{not json"],
    )
    parsed = parse_preference_file(path, "hh-rlhf", "hh.jsonl.gz")
    assert list(parsed.pairs.chosen) == ["Call a locksmith."]
    assert parsed.pairs.source.iloc[0] == "human:hh-rlhf" and parsed.pairs.source_row.iloc[0] == 0
    reasons = dict(zip(parsed.quarantine.source_row, parsed.quarantine.reason))
    assert reasons[1] == "chosen and rejected replies are identical"
    assert reasons[2] == "`chosen` and `rejected` differ before the last assistant turn"
    assert reasons[3] == "empty chosen or rejected reply"
    assert reasons[4].startswith("not JSON")


def test_jsonl_and_parquet_rows_need_prompt_chosen_rejected(tmp_path):
    rows = [{"prompt": "p", "chosen": "good", "rejected": "bad"}, {"prompt": "p", "chosen": "x"}]
    jl = tmp_path / "rows.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in rows))
    parsed = parse_preference_file(jl, "jsonl", "rows.jsonl")
    assert len(parsed.pairs) == 1 and parsed.quarantine.reason.iloc[0] == "missing or non-text fields ['rejected']"
    pq = tmp_path / "rows.parquet"
    pd.DataFrame(rows[:1]).to_parquet(pq)
    assert list(parse_preference_file(pq, "parquet", "rows.parquet").pairs.rejected) == ["bad"]
    with pytest.raises(PreferenceImportError, match="is not a readable Parquet file") as junk:
        parse_preference_file(jl, "parquet", "rows.jsonl")
    assert "this is not a parquet file.); export it again" in str(
        junk.value
    )  # pyarrow's reason whole, not cut mid-sentence
    with pytest.raises(PreferenceImportError, match="unknown format 'csv'"):
        parse_preference_file(jl, "csv", "rows.jsonl")


def test_a_rows_tag_is_kept_and_a_bad_one_is_quarantined(tmp_path):
    """A tag names the quality a pair tests (a dimension's name makes it supervise that dimension's head)."""
    rows = [
        {"prompt": "p", "chosen": "good", "rejected": "bad", "tag": "empathy"},
        {"prompt": "q", "chosen": "good", "rejected": "bad"},
        {"prompt": "r", "chosen": "good", "rejected": "bad", "tag": 3},
    ]
    jl = tmp_path / "rows.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in rows))
    parsed = parse_preference_file(jl, "jsonl", "rows.jsonl")
    assert parsed.pairs["tag"].iloc[0] == "empathy" and pd.isna(parsed.pairs["tag"].iloc[1])
    assert (
        parsed.quarantine.reason.iloc[0]
        == "`tag` must be a non-empty text (a dimension, or a quality like truth), got 3"
    )
    pq = tmp_path / "rows.parquet"
    pd.DataFrame(rows[:2]).to_parquet(pq)  # the second row's tag is missing there
    tags = parse_preference_file(pq, "parquet", "rows.parquet").pairs["tag"]
    assert tags.iloc[0] == "empathy" and pd.isna(tags.iloc[1])


def test_inbox_is_content_addressed_so_a_second_import_is_a_no_op(tmp_path):
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}))
    target, added = add_to_inbox(src, "jsonl", tmp_path / "data", "2026-11-20")
    assert added and target.name.endswith(".jsonl")
    assert add_to_inbox(src, "jsonl", tmp_path / "data", "2026-11-20") == (target, False)
    [(path, fmt, sha)] = inbox_files(tmp_path / "data", "2026-11-20")
    assert (path, fmt) == (target, "jsonl") and len(sha) == 64
    with pytest.raises(PreferenceImportError, match="does not exist"):
        add_to_inbox(tmp_path / "missing.jsonl", "jsonl", tmp_path / "data", "2026-11-20")


def test_a_file_that_cannot_be_imported_is_named_with_the_fix_and_never_reaches_the_inbox(tmp_path):
    data = tmp_path / "data"
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(
        json.dumps({"prompt": "Caf\u00e9?", "chosen": "Oui", "rejected": "Non"}, ensure_ascii=False).encode("latin-1")
    )
    fake = tmp_path / "rows.parquet"
    fake.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}')
    cut = tmp_path / "cut.jsonl.gz"
    with gzip.open(cut, "wt") as fh:
        fh.write(json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) * 50)
    cut.write_bytes(cut.read_bytes()[:-12])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    useless = tmp_path / "useless.jsonl"
    useless.write_text(json.dumps({"prompt": "  ", "chosen": "a", "rejected": "b"}) + "\n{not json\n")
    for path, fmt, says in [
        (latin, "jsonl", r"is not UTF-8 text .* save it as UTF-8"),
        (fake, "parquet", r"not a readable Parquet file .* --format jsonl"),
        (cut, "jsonl", r"cannot read .*cut.jsonl.gz as gzipped JSON lines"),
        (empty, "jsonl", r"holds no rows; .* `prompt`, `chosen` and `rejected`"),
        (useless, "jsonl", r"holds no usable pair: 1 row\(s\): empty prompt; 1 row\(s\): not JSON"),
    ]:
        with pytest.raises(PreferenceImportError, match=says) as caught:
            add_to_inbox(path, fmt, data, "2026-11-20")
        assert str(path) in str(caught.value)
    assert (
        inbox_files(data, "2026-11-20") == [] and not (data / "inbox" / "human_preferences" / "2026-11-20").exists()
    )  # nothing poisons the day


def test_lines_that_are_not_json_keep_their_text_in_the_quarantine(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) + "\n{half an object, no end\n")
    parsed = check_importable(path, "jsonl")
    assert len(parsed.pairs) == 1 and parsed.quarantine.raw.iloc[0] == "{half an object, no end"


def test_an_unreadable_file_already_in_an_inbox_does_not_block_the_day(tmp_path):
    from hominem_pipeline.core.builds.human_preferences import _parse_or_quarantine

    bad = tmp_path / "0123456789abcdef.parquet"
    bad.write_text("not parquet")
    parsed = _parse_or_quarantine(bad, "parquet")
    assert (
        parsed.pairs.empty
        and parsed.quarantine.reason.iloc[0].startswith("unreadable file: ")
        and "not a readable Parquet file" in parsed.quarantine.reason.iloc[0]
    )


def test_every_reward_model_learns_from_the_shipped_peoples_pairs_unless_told_not_to(tiny_cfg, tmp_path):
    import gzip

    from hominem_pipeline.core.builds.reward_model import people_pairs
    from hominem_pipeline.core.config import PeoplePairsConfig
    from hominem_pipeline.core.evaluation.fixtures import load_fixtures

    shipped = people_pairs(tiny_cfg)
    hh = shipped[shipped["source"] == "shipped:hh-rlhf-harmless-1800.jsonl.gz"]
    ours = shipped[shipped["source"] == "shipped:hominem-contrast-pairs.jsonl"]
    assert (
        len(hh) == 1600
        and len(ours) >= 150
        and len(shipped) == len(hh) + len(ours)
        and (shipped["weight"] == 1.0).all()
    )
    # the heads read the file's first 600 (reward_model.people_pairs[0].heads) and every hand-written pair; the
    # people's score all.
    # The file's last 200 (held_out) are apart: every adapter is judged on them, so the daily adapter never learns from
    # them
    assert hh["heads"].tolist() == [True] * 600 + [False] * 1000 and ours["heads"].all()
    held, every = people_pairs(tiny_cfg, "held_out"), people_pairs(tiny_cfg, "all")
    assert (
        len(held) == 200
        and held["source"].eq("shipped:hh-rlhf-harmless-1800.jsonl.gz").all()
        and not held["heads"].any()
    )
    assert (
        list(every["pair_id"]) == list(hh["pair_id"]) + list(held["pair_id"]) + list(ours["pair_id"])
        and every["held_out"].sum() == 200
    )
    with pytest.raises(ValueError, match=r"part is 'test'; pass train, held_out or all"):
        people_pairs(tiny_cfg, "test")
    assert hh["prompt"].str.endswith("\n\nAssistant:").all() and (shipped["chosen"] != shipped["rejected"]).all()
    # the hand-written training pairs never share a prompt or a reply with the contrast fixtures they are measured on
    fixtures = load_fixtures(tiny_cfg.path(tiny_cfg.fixtures.file), tiny_cfg.dimension_names)
    assert not set(ours["prompt"]) & {f.prompt for f in fixtures}
    assert not (set(ours["chosen"]) | set(ours["rejected"])) & (
        {f.better for f in fixtures} | {f.worse for f in fixtures}
    )

    def with_files(*files):
        rm = tiny_cfg.reward_model
        specs = [PeoplePairsConfig(file=f, format="hh-rlhf") for f in files]
        return tiny_cfg.model_copy(update={"reward_model": rm.model_copy(update={"people_pairs": specs})})

    assert people_pairs(with_files()) is None
    broken = tmp_path / "broken.jsonl.gz"
    with gzip.open(broken, "wt") as f:
        f.write(
            '{"chosen": "\\n\\nHuman: hi\\n\\nAssistant: hello", "rejected": "\\n\\nHuman: '
            'hi\\n\\nAssistant: go away"}\n{"chosen": 3}\n'
        )
    with pytest.raises(
        ValueError,
        match=r"people_pairs\[1\].file .*broken.jsonl.gz has 1 unusable rows \(line 2: `chosen` and `rejected` "
        r"must both be strings\); mend the file or check its format \(hh-rlhf\)",
    ):
        people_pairs(with_files("config/human/hh-rlhf-harmless-1800.jsonl.gz", str(broken)))
    with pytest.raises(FileNotFoundError, match=r"people_pairs\[0\].file .*nowhere.jsonl does not exist"):
        people_pairs(with_files("nowhere.jsonl"))
    too_many = tiny_cfg.model_copy(
        update={
            "reward_model": tiny_cfg.reward_model.model_copy(
                update={
                    "people_pairs": [
                        PeoplePairsConfig(
                            file="config/human/hh-rlhf-harmless-1800.jsonl.gz", format="hh-rlhf", held_out=1800
                        )
                    ]
                }
            )
        }
    )
    with pytest.raises(ValueError, match=r"people_pairs\[0\].held_out is 1800, but .* has 1800 pairs; hold out fewer"):
        people_pairs(too_many)


def test_the_shipped_helpfulness_pairs_import_and_stay_apart_from_the_fixtures(tiny_cfg):
    from hominem_pipeline.core.evaluation.fixtures import load_fixtures
    from hominem_pipeline.core.human.preferences import parse_preference_file

    folder = tiny_cfg.path("config/human")
    parsed = parse_preference_file(folder / "hominem-helpfulness-pairs.jsonl", "jsonl", "helpfulness")
    pairs = parsed.pairs
    assert parsed.quarantine.empty and len(pairs) >= 40 and (pairs["tag"] == "helpfulness").all()
    contrast = parse_preference_file(folder / "hominem-contrast-pairs.jsonl", "jsonl", "contrast").pairs
    fixtures = load_fixtures(tiny_cfg.path(tiny_cfg.fixtures.file), tiny_cfg.dimension_names)
    texts = set(pairs["prompt"]) | set(pairs["chosen"]) | set(pairs["rejected"])
    assert not texts & ({f.prompt for f in fixtures} | {f.better for f in fixtures} | {f.worse for f in fixtures})
    assert not set(pairs["prompt"]) & set(contrast["prompt"]) and pairs["prompt"].is_unique
    # a model that learns from them must also meet helpful replies that are the shorter one
    assert (pairs["chosen"].str.len() < pairs["rejected"].str.len()).mean() >= 0.25
