import json

import pandas as pd
import pytest

from hominem_pipeline.core.evaluation.memory import (
    MemoryFileError,
    answer_sentence,
    memory_digest,
    probe,
    read_memory_rows,
    reproduces,
)
from hominem_pipeline_tests.conftest import REPO


def write(path, lines):
    path.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines) + "\n")
    return path


def test_rows_are_read_from_files_and_folders(tmp_path):
    folder = tmp_path / "sft"
    folder.mkdir()
    write(folder / "b.jsonl", [{"instruction": "Capital of Peru?", "response": "Lima.", "fact": "Lima"}, ""])
    write(folder / "a.jsonl", [{"prompt": "Say hi.", "response": "Hi!"}, {"prompt": "Say hi.", "response": "Hi!"}])
    (folder / "notes.txt").write_text("not a memory file")
    rows = read_memory_rows([folder, tmp_path / "missing"])
    assert list(rows["prompt"]) == ["Say hi.", "Capital of Peru?"]  # files in name order, the repeat kept once
    assert list(rows["facts"]) == [[], ["Lima"]]
    assert rows["source"].iloc[1].endswith("b.jsonl:1")
    assert [name for name, _ in memory_digest([folder])] == ["sft/a.jsonl", "sft/b.jsonl"]


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", r"bad.jsonl:2 is not JSON"),
        ('["a list"]', r"bad.jsonl:2 holds a list"),
        ({"prompt": "Q?"}, r"bad.jsonl:2: no 'response'"),
        ({"prompt": "  ", "response": "A."}, r"bad.jsonl:2: 'prompt' must be a non-empty string"),
        ({"prompt": "Q?", "response": "A.", "fact": []}, r"bad.jsonl:2: 'fact' must be a non-empty string or a list"),
    ],
)
def test_a_bad_line_names_its_file_and_line(tmp_path, line, message):
    path = write(tmp_path / "bad.jsonl", [{"prompt": "Fine?", "response": "Yes."}, line])
    with pytest.raises(MemoryFileError, match=message):
        read_memory_rows([path])


def test_facts_match_whole_words_only():
    assert reproduces("A week has 7 days.", ["7", "seven"])
    assert reproduces("SEVEN days", ["7", "seven"])
    assert not reproduces("There are 17 of them", ["7"])
    assert not reproduces("Parisian cafes", ["Paris"])


def test_facts_are_judged_on_the_first_sentence():
    # Real replies of the 135M student: a wrong answer with the fact's token in a later sentence.
    assert not reproduces("1 hour = 30 minutes. So, 24 hours is equal to 60 minutes.", ["60", "sixty"])
    assert not reproduces("The freezing point of water in Celsius is -18. It may not be exactly 0°C.", ["0", "zero"])
    assert not reproduces("That's an interesting question!\nThe answer is Jupiter.", ["Jupiter"])
    assert reproduces("  The answer is: 8. A spider has eight legs.", ["8", "eight"])
    assert reproduces(
        "Water boils at 100.5 degrees? No, at 100 degrees.", ["100"]
    )  # "100.5" does not end the sentence
    assert answer_sentence("Mars is red! Venus is not.") == "Mars is red!"


def test_probe_counts_kept_lost_and_gained():
    rows = pd.DataFrame({"prompt": ["a?", "b?", "c?"], "facts": [["x"], ["y"], ["z"]]})
    result = probe(rows, {"base": ["x", "y", "no"], "adapter": ["x", "no", "z"]})
    assert (result.base, result.adapter, result.kept) == (2, 2, 1)
    assert result.lost == ["b?"] and result.gained == ["c?"]


def test_the_shipped_memory_file_reads():
    rows = read_memory_rows([REPO / "config" / "sft"])
    assert len(rows) >= 20 and sum(bool(f) for f in rows["facts"]) >= 15
