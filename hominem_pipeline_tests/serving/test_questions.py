"""The next question: pairs imported with `hominem data import-questions`, asked through `GET /feedback/next`
and the page's "ask me a pair", each with the reason it was picked, answered with ordinary choices, never
asked again of the same person."""

import json
import os
import subprocess

import httpx2 as httpx

from hominem_pipeline.testing.browser import ask_for_a_pair, chromium, status_is, wait_for
from hominem_pipeline.testing.service import HOMINEM

PAIRS = [
    ("I lost my job today.", "I'm so sorry. Do you want to talk about what happened?", "Get another one."),
    ("Can you help me plan a birthday party?", "Sure: who is it for, and how many guests?", "No."),
    ("My cat is sick.", "That is worrying. How is she acting, and have you called a vet?", "Cats get sick."),
    ("I failed my exam.", "That hurts after working hard. What would help right now?", "Study more next time."),
]


def import_questions(project, path):
    env = {**os.environ, "HOMINEM_HOME": str(project)}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run(
        [HOMINEM, "data", "import-questions", str(path), "--format", "questions", "--config", "config/tiny.yaml"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_questions_are_asked_by_what_the_model_does_not_know_and_answered_once(served, tmp_path):
    from selenium.webdriver.common.by import By

    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "a": a, "b": b}) + "\n" for p, a, b in PAIRS) + "not json\n")
    done = import_questions(served.project, path)
    assert (
        done.returncode == 0 and "4 question(s) -> " in done.stdout and "1 unusable line(s) skipped" in done.stdout
    ), done.stdout + done.stderr
    assert "1 unusable" not in import_questions(served.project, path).stderr  # again: the same file, nothing new

    # the page: "ask me a pair" shows a pair with why it was asked; choosing A brings the next one
    driver = chromium()
    try:
        section = ask_for_a_pair(driver, served.url + "/")
        why = section.find_element(By.CLASS_NAME, "why").text
        asked = section.find_element(By.CLASS_NAME, "prompt").text
        cards = section.find_elements(By.CSS_SELECTOR, ".pair .reply")
        turns = {c.find_element(By.CLASS_NAME, "label").text: c.get_attribute("data-turn") for c in cards}
        section.find_element(By.CSS_SELECTOR, '.pick input[value="A"]').click()
        section.find_element(By.CLASS_NAME, "submit-choice").click()
        wait_for(driver, status_is("saved: A over B (clear)"), 30)
        wait_for(
            driver, lambda d: d.find_element(By.CSS_SELECTOR, "#asked .prompt").text != asked, 120
        )  # the next pair
        shown_scores = section.find_elements(By.CSS_SELECTOR, ".reply .bar")
    finally:
        driver.quit()
    assert why.startswith(("asked because", "picked at random")) and asked in {p for p, _, _ in PAIRS}
    assert len(shown_scores) == 14  # the served reward model's vector of each reply
    events = {e["id"]: e for e in served.events()}
    a = events[turns["A"]]
    assert (
        a["model"] == "question"
        and a["sampling"]["question"] == turns["A"][:-2]
        and a["sampling"]["by"] in ("information", "random")
    )
    assert (
        a["sampling"]["reason"] == why
        and a["reward"] is not None
        and a["messages"] == [{"role": "user", "content": asked}]
    )
    [choice] = [e for e in events.values() if e["kind"] == "choice" and e["chosen"] == turns["A"]]
    assert choice["rejected"] == turns["B"]
    # the choice records how the pair was picked for this person (the turns keep the first asker's)
    assert choice["asked"] == {"by": a["sampling"]["by"], "value": a["sampling"]["value"]}

    # any client: the same endpoint, each question once per person, then none left
    seen = {turns["A"][:-2]}
    while True:
        nxt = httpx.get(f"{served.url}/feedback/next", timeout=120).json()
        if nxt["question"] is None:
            break
        q = nxt["question"]
        assert (
            q["id"] not in seen
            and nxt["by"] in ("information", "random")
            and 0.0 <= nxt["value"] <= 1.0
            and nxt["pool"] >= 4
        )
        assert set(nxt["parts"]) == {"uncertainty", "disagreement", "cluster", "novelty"} and 0.0 <= nxt["p_a"] <= 1.0
        asked_again = httpx.get(f"{served.url}/feedback/next", timeout=120).json()
        again = asked_again["question"]  # asked again before an answer: same turns if the same pair
        if again["id"] == q["id"]:
            assert again["a"]["turn"] == q["a"]["turn"]
        seen.add(q["id"])
        posted = httpx.post(
            f"{served.url}/feedback",
            json={"kind": "choice", "chosen": q["b"]["turn"], "rejected": q["a"]["turn"], "strength": "slight"},
            timeout=30,
        )
        assert posted.status_code == 200, posted.text
        [logged] = [e for e in served.events() if e["id"] == posted.json()["id"]]
        shown = asked_again if again["id"] == q["id"] else nxt  # the newest ask of the pair is the one answered
        assert logged["asked"] == {"by": shown["by"], "value": round(shown["value"], 4)}
    assert len(seen) == 4 and "import more with `hominem data import-questions`" in nxt["reason"]
