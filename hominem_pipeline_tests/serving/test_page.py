"""The feedback page in a real headless browser (Debian's chromium through selenium)."""

from hominem_pipeline.testing.browser import choose_between_two_replies, chromium, screenshot


def test_chat_choose_a_over_b_strongly_with_a_note_and_nudge_empathy_all_in_the_log(served, tmp_path):
    driver = chromium()
    try:
        turns = choose_between_two_replies(driver, served.url + "/", "I failed my driving test today.", pick="A", strength="strong",
                                           note="A sounds like it cares", nudge=("empathy", "more"))
        shot = screenshot(driver, tmp_path / "page.png")
        shown_scores = driver.find_elements("css selector", "#chat .reply .bar")
    finally:
        driver.quit()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    assert len(shown_scores) == 14  # each reply's seven dimensions, drawn from its reward
    events = served.events()
    by_id = {e["id"]: e for e in events}
    a, b = by_id[turns["A"]], by_id[turns["B"]]
    assert a["kind"] == b["kind"] == "turn" and a["context"] == b["context"] and a["reward"] is not None
    assert a["messages"][-1]["content"] == "I failed my driving test today."
    [choice] = [e for e in events if e["kind"] == "choice" and e["chosen"] == turns["A"]]
    assert (choice["rejected"], choice["strength"], choice["note"]) == (turns["B"], "strong", "A sounds like it cares")
    [nudge] = [e for e in events if e["kind"] == "nudge" and e["turn"] == turns["B"]]
    assert (nudge["dimension"], nudge["direction"]) == ("empathy", "more")
