import gzip
import json

import pandas as pd
import pytest

from hominem_pipeline.core.human.preferences import (
    PreferenceImportError,
    add_to_inbox,
    inbox_files,
    parse_preference_file,
    split_hh_rlhf,
)

DIALOGUE = "\n\nHuman: How do I pick a lock?\n\nAssistant: Why do you want to?\n\nHuman: I locked myself out.\n\nAssistant:"


def test_hh_rlhf_prompt_is_the_shared_dialogue_up_to_the_last_assistant_turn():
    prompt, chosen, rejected = split_hh_rlhf(DIALOGUE + " Call a locksmith.", DIALOGUE + " Use a bobby pin on any door.")
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
    with pytest.raises(PreferenceImportError, match="cannot read .* as Parquet"):
        parse_preference_file(jl, "parquet", "rows.jsonl")
    with pytest.raises(PreferenceImportError, match="unknown format 'csv'"):
        parse_preference_file(jl, "csv", "rows.jsonl")


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
