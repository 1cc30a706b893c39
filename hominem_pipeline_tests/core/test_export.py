"""What one person gave, theirs to take: their turns, feedback and pairs, never another person's, in the project's
pair format, which the importer reads back."""

import json

from hominem_pipeline.core.human.preferences import parse_preference_file
from hominem_pipeline.core.online.events import context_digest
from hominem_pipeline.core.online.export import pair_json_schema, rater_data
from hominem_pipeline_tests.conftest import REPO


def events():
    out = []
    for rater, said in (("r-ana", "Ana's worry"), ("r-ben", "Ben's worry")):
        messages = [{"role": "user", "content": said}]
        turn = {
            "kind": "turn",
            "time": "2026-11-20T09:00:00+00:00",
            "rater": rater,
            "messages": messages,
            "model": "hominem",
            "adapter": None,
            "sampling": {},
            "finish_reason": "stop",
            "completion_tokens": 3,
            "context": context_digest(messages),
        }
        out += [
            turn | {"id": f"{rater}-a", "reply": f"{said}: a kind reply"},
            turn | {"id": f"{rater}-b", "reply": f"{said}: a curt reply"},
            {
                "kind": "choice",
                "id": f"{rater}-c",
                "time": "2026-11-20T09:01:00+00:00",
                "rater": rater,
                "chosen": f"{rater}-a",
                "rejected": f"{rater}-b",
                "strength": "strong",
                "note": "kinder",
            },
        ]
    return out


def test_an_export_holds_one_persons_words_alone_as_pairs_the_importer_reads(tmp_path):
    data = rater_data(events(), "r-ana")
    assert "Ben" not in json.dumps(data)
    assert [t["id"] for t in data["turns"]] == ["r-ana-a", "r-ana-b"] and [f["id"] for f in data["feedback"]] == [
        "r-ana-c"
    ]
    [pair] = data["pairs"]
    assert pair["prompt"] == "Ana's worry" and pair["chosen"] == "Ana's worry: a kind reply"
    assert pair["strength"] == "strong" and pair["note"] == "kinder" and pair["rater"] == "r-ana"
    schema = pair_json_schema()
    assert set(pair) <= set(schema["properties"]) and set(schema["required"]) <= set(pair)
    path = tmp_path / "ana.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in data["pairs"]))
    back = parse_preference_file(path, "jsonl", path.name).pairs
    assert back[["prompt", "chosen", "rejected"]].to_dict(orient="records") == [
        {k: pair[k] for k in ("prompt", "chosen", "rejected")}
    ]
    assert rater_data(events(), "r-nobody")["pairs"] == []


def test_the_shipped_pair_schema_is_the_one_the_code_writes():
    shipped = json.loads((REPO / "config" / "schemas" / "preference-pair.json").read_text())
    assert shipped == pair_json_schema()
