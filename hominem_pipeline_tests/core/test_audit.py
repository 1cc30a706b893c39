"""The audit log's chain: every line carries the hash of the one before, so a line removed, edited or moved is
found and named; writers in several processes keep one chain."""

import json
import multiprocessing

from hominem_pipeline.core.online.audit import GENESIS, AuditLog


def written(path, n=5):
    log = AuditLog(path)
    for i in range(n):
        log.append(f"action{i}", "cli:test", version=f"v{i}")
    return log


def test_an_untouched_log_verifies_and_each_line_names_who_and_what(tmp_path):
    log = written(tmp_path / "audit.jsonl")
    verdict = log.verify()
    assert verdict.intact and verdict.lines == 5 and verdict.unchained == 0
    entries = log.entries()
    assert entries[0]["prev"] == GENESIS and all(b["prev"] == a["hash"] for a, b in zip(entries, entries[1:]))
    assert verdict.last == entries[-1]["hash"] and entries[2]["who"] == "cli:test" and entries[2]["version"] == "v2"


def test_an_edited_removed_or_moved_line_is_named(tmp_path):
    path = tmp_path / "audit.jsonl"
    written(path)
    lines = path.read_text().splitlines()

    def verdict(new_lines):
        path.write_text("\n".join(new_lines) + "\n")
        return AuditLog(path).verify()

    edited = json.loads(lines[2]) | {"version": "forged"}
    problems = verdict([*lines[:2], json.dumps(edited), *lines[3:]]).problems
    assert problems == [f"line 3 (action2, {edited['time']}): edited after it was written"]
    problems = verdict([*lines[:2], *lines[3:]]).problems
    assert (
        len(problems) == 1
        and problems[0].startswith("line 3 (action3")
        and "the line before it was removed" in problems[0]
    )
    problems = verdict([lines[0], lines[2], lines[1], *lines[3:]]).problems
    assert any(p.startswith("line 2 (action2") for p in problems) and any(
        p.startswith("line 3 (action1") and "out of order (it followed line 1)" in p for p in problems
    )
    assert verdict(["not json", *lines]).problems == ["line 1: not JSON (a damaged or hand-written line)"]


def test_lines_from_before_the_chain_are_counted_not_checked(tmp_path):
    path = tmp_path / "audit.jsonl"
    path.write_text(json.dumps({"time": "2026-11-01T00:00:00+00:00", "action": "start"}) + "\n")
    log = written(path, 2)
    verdict = log.verify()
    assert verdict.intact and verdict.lines == 3 and verdict.unchained == 1


def _append_many(path, who):
    log = AuditLog(path)
    for i in range(40):
        log.append("write", who, i=i)


def test_writers_in_several_processes_keep_one_chain(tmp_path):
    path = tmp_path / "audit.jsonl"
    procs = [multiprocessing.Process(target=_append_many, args=(path, f"p{k}")) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    verdict = AuditLog(path).verify()
    assert verdict.intact and verdict.lines == 120
