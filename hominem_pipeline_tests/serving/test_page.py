"""The feedback page in a real headless browser (Debian's chromium through selenium)."""

from hominem_pipeline.testing.browser import choose_between_two_replies, chromium, screenshot, wait_for


def test_chat_choose_a_over_b_strongly_with_a_note_and_nudge_empathy_all_in_the_log(served, tmp_path):
    driver = chromium()
    try:
        turns = choose_between_two_replies(
            driver,
            served.url + "/",
            "I failed my driving test today.",
            pick="A",
            strength="strong",
            note="A sounds like it cares",
            nudge=("empathy", "more"),
        )
        shot = screenshot(driver, tmp_path / "page.png")
        shown_scores = driver.find_elements("css selector", "#chat .reply .bar")
        # each piece of feedback is confirmed beside what it is about, not only in the status line at the bottom
        confirmed = [
            e.text for e in driver.find_elements("css selector", "#chat .choice .confirm, #chat .reply .confirm")
        ]
        # the emotion tags in plain words, the model's term as the tooltip; every emoji button says it in words too
        tag = driver.find_element("css selector", "#chat .reply .tags label")
        tag_words, tag_term = driver.execute_script(
            "return [arguments[0].textContent.trim(), arguments[0].title]", tag
        )
        no_emoji = "no-emoji" in driver.find_element("tag name", "body").get_attribute("class").split()
        thumb = driver.find_element("css selector", "#chat .reply .thumb")
        emoji_drawn = thumb.find_element("css selector", ".emoji").is_displayed()
        thumb_text = thumb.text
        # what the service learned of the person, from their one choice, beside their consistency
        taste = wait_for(driver, lambda d: d.find_element("css selector", "#taste").text or None, timeout=60)
    finally:
        driver.quit()
    assert taste.startswith("what it learned of you: from 1 choice:"), taste
    assert sorted(confirmed) == ["✓ saved: A over B (strong)", "✓ saved: more empathy"], confirmed
    assert tag_term == "high arousal" and tag_words.endswith("stirred up") and "arousal" not in tag_words
    assert (
        thumb_text.endswith("good") and emoji_drawn is not no_emoji
    )  # no emoji font here: the word alone, no empty box
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


def test_the_api_docs_render_with_no_network(served):
    """/docs (Swagger UI) and /redoc load their scripts from the server, not a CDN: a browser that can
    reach nothing but loopback shows every endpoint."""
    from selenium.webdriver.common.by import By

    from hominem_pipeline.testing.browser import wait_for

    driver = chromium(offline=True)
    try:
        driver.get(served.url + "/docs")
        wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".swagger-ui .opblock"), timeout=60)
        paths = {e.text for e in driver.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
        title = driver.find_element(By.CSS_SELECTOR, ".swagger-ui .info .title").text
        driver.get(served.url + "/redoc")
        wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "[data-section-id]"), timeout=60)
    finally:
        driver.quit()
    assert title.startswith("hominem") and {"/generate", "/feedback", "/v1/chat/completions"} <= {
        p.replace("\u200b", "") for p in paths
    }


def test_replies_are_shown_as_markdown_and_a_reply_cut_by_the_token_limit_ends_at_a_sentence(served, tiny_student):
    """The page renders a reply's markdown (bold, italics, lists, code) with any markup it holds shown as
    text; a reply the token limit cut is shown, and logged, up to its last finished sentence."""
    from selenium.webdriver.common.by import By
    from transformers import AutoTokenizer

    from hominem_pipeline.core.lm.generation import end_at_sentence

    tokenizer = AutoTokenizer.from_pretrained(tiny_student)
    driver = chromium()
    try:
        turns = choose_between_two_replies(
            driver, served.url + "/", "Tell me about your day.", pick="B", strength="clear"
        )
        texts = {
            c.get_attribute("data-turn"): c.find_element(By.CLASS_NAME, "text")
            for c in driver.find_elements(By.CSS_SELECTOR, "#chat .pair .reply")
        }
        nodes = {turn: {child.tag_name for child in el.find_elements(By.XPATH, "./*")} for turn, el in texts.items()}
        box = texts[turns["A"]]
        driver.execute_script(
            "renderMarkdown(arguments[0], arguments[1])",
            box,
            "**Breathe.** Then:\n- walk *slowly*\n- <script>alert(1)</script> `ok`\n\n1. rest",
        )
        html = box.get_attribute("innerHTML")
    finally:
        driver.quit()
    assert "<p><strong>Breathe.</strong> Then:</p>" in html and "<ul><li>walk <em>slowly</em></li>" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; <code>ok</code>" in html and "<ol><li>rest</li></ol>" in html
    by_id = {e["id"]: e for e in served.events()}
    for turn in turns.values():
        event = by_id[turn]
        assert nodes[turn] <= {"p", "ul", "ol"}  # drawn by the renderer, not dropped in as raw text
        if event["finish_reason"] == "length":
            # nothing after its last sentence end; or it was cut at a line break after that (the cut is not
            # idempotent then: the kept last line may be cut again), so it is shorter than what the model wrote
            reply = event["reply"]
            written = len(tokenizer(reply, add_special_tokens=False)["input_ids"])
            assert end_at_sentence(reply) == reply or written < event["completion_tokens"]
