"""A real headless browser on the feedback page: Debian's chromium driven by selenium (nothing is
downloaded; `make browser` installs the two packages). Used by the page's test and by
`scripts/page_screenshot.py`."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = ("chromedriver", "chromium-driver")


def _which(names: tuple[str, ...], what: str) -> str:
    for name in names:
        if found := shutil.which(name):
            return found
    raise FileNotFoundError(f"no {what} on PATH (looked for {', '.join(names)}); install Debian's chromium and chromium-driver: `make browser`")


def chromium(width: int = 1200, height: int = 900, offline: bool = False) -> Any:
    """A headless chromium WebDriver (the caller quits it); `offline`: every host but loopback is
    unreachable (through a proxy that is not there), as on a machine without a network."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _which(CHROMIUM, "chromium")
    offline_args = ("--proxy-server=http://127.0.0.1:9",) if offline else ()  # loopback bypasses a proxy by itself
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", f"--window-size={width},{height}", *offline_args):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(executable_path=_which(DRIVER, "chromedriver")))


def wait_for(driver: Any, condition: Any, timeout: float = 120) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(condition)


def status_is(text: str) -> Any:
    """A wait condition: the page's status line reads `text`."""
    from selenium.webdriver.common.by import By

    return lambda d: d.find_element(By.ID, "status").text == text


def open_page(driver: Any, url: str) -> None:
    """Open the feedback page and wait until its script has set it up (body data-ready="1")."""
    from selenium.webdriver.common.by import By

    driver.get(url)
    wait_for(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1", 60)


def choose_between_two_replies(driver: Any, url: str, message: str, pick: str = "A", strength: str = "strong", note: str = "",
                               nudge: tuple[str, str] | None = ("empathy", "more")) -> dict[str, str]:
    """Open the page, ask for two replies to `message`, choose `pick` with `strength` and `note`, and
    nudge the other reply; returns the turn ids of the replies shown as A and B."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_page(driver, url)
    driver.find_element(By.ID, "pair-mode").click()
    driver.find_element(By.ID, "message").send_keys(message)
    driver.find_element(By.ID, "send").click()
    cards = wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#chat .pair .reply") if len(d.find_elements(By.CSS_SELECTOR, "#chat .pair .reply")) == 2 else False)
    turns = {card.find_element(By.CLASS_NAME, "label").text: card.get_attribute("data-turn") for card in cards}
    box = driver.find_element(By.CSS_SELECTOR, "#chat .choice")
    box.find_element(By.CSS_SELECTOR, f'.pick input[value="{pick}"]').click()
    box.find_element(By.CSS_SELECTOR, f'.strength input[value="{strength}"]').click()
    if note:
        box.find_element(By.CLASS_NAME, "note").send_keys(note)
    box.find_element(By.CLASS_NAME, "submit-choice").click()
    other = "B" if pick == "A" else "A"
    wait_for(driver, status_is(f"saved: {pick} over {other} ({strength})"), 30)
    if nudge is not None:
        dimension, direction = nudge
        card = next(c for c in cards if c.find_element(By.CLASS_NAME, "label").text == other)
        Select(card.find_element(By.CSS_SELECTOR, ".nudge select")).select_by_value(dimension)
        card.find_element(By.CSS_SELECTOR, f'.nudge button[data-direction="{direction}"]').click()
        wait_for(driver, status_is(f"saved: {direction} {dimension}"), 30)
    return turns


def ask_for_a_pair(driver: Any, url: str) -> Any:
    """Open the page and press "ask me a pair"; returns the `#asked` section once it shows a pair."""
    from selenium.webdriver.common.by import By

    open_page(driver, url)
    driver.find_element(By.ID, "ask-pair").click()
    return wait_for(driver, lambda d: d.find_element(By.ID, "asked") if d.find_element(By.ID, "asked").is_displayed() else False, 120)


def screenshot(driver: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    return path
