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
    raise FileNotFoundError(
        f"no {what} on PATH (looked for {', '.join(names)}); install Debian's chromium and "
        "chromium-driver: `make browser`"
    )


def chromium(width: int = 1200, height: int = 900, offline: bool = False) -> Any:
    """A headless chromium WebDriver (the caller quits it); `offline`: every host but loopback is
    unreachable (through a proxy that is not there), as on a machine without a network."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _which(CHROMIUM, "chromium")
    offline_args = ("--proxy-server=http://127.0.0.1:9",) if offline else ()  # loopback bypasses a proxy by itself
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        *offline_args,
    ):
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


def choose_between_two_replies(
    driver: Any,
    url: str,
    message: str,
    pick: str = "A",
    strength: str = "strong",
    note: str = "",
    nudge: tuple[str, str] | None = ("empathy", "more"),
) -> dict[str, str]:
    """Open the page, ask for two replies to `message`, choose `pick` with `strength` and `note`, and
    nudge the other reply; returns the turn ids of the replies shown as A and B."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    open_page(driver, url)
    driver.find_element(By.ID, "pair-mode").click()
    driver.find_element(By.ID, "message").send_keys(message)
    driver.find_element(By.ID, "send").click()
    cards = wait_for(
        driver,
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, "#chat .pair .reply")
            if len(d.find_elements(By.CSS_SELECTOR, "#chat .pair .reply")) == 2
            else False
        ),
    )
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
    return wait_for(
        driver,
        lambda d: d.find_element(By.ID, "asked") if d.find_element(By.ID, "asked").is_displayed() else False,
        120,
    )


def screenshot(driver: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(path))
    return path


DASHBOARD_VIEWS = {  # view -> the charts it draws
    "timeline": ("chart-agreement", "chart-rhi", "chart-adapter"),
    "calibration": ("chart-cal-judge",),
    "drift": (),
    "compare": (),  # two versions compared: with one built (a first day), a line saying there is nothing earlier
    "probe": (),
    "health": ("chart-health",),
}


def open_view(driver: Any, url: str, view: str, timeout: float = 60) -> None:
    """Open the dashboard at `view` and wait until its script has drawn it (body data-ready=view); a view
    that failed (data-ready="error") raises with the status line."""
    from selenium.webdriver.common.by import By

    driver.get(f"{url}/dashboard#{view}")
    ready = wait_for(
        driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") in (view, "error"), timeout
    )
    if driver.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "error" or not ready:
        raise AssertionError(f"the dashboard's {view} view failed: {driver.find_element(By.ID, 'status').text}")


def chart_drawn(driver: Any, chart: str) -> dict[str, Any]:
    """What the dashboard drew in `chart`: its series and data points, how many of its canvas's pixels are not
    blank, and the x axis's tick labels as drawn."""
    return driver.execute_script(
        """const c = window.hominemCharts[arguments[0]]; if (!c) return null;
        const canvas = document.querySelector('#' + arguments[0] + ' canvas'); const ctx = canvas.getContext('2d');
        const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data; let ink = 0;
        for (let i = 3; i < px.length; i += 4) if (px[i] > 0) ink++;
        return {series: c.series, points: c.points, ink: ink, width: canvas.width,
                ticks: c.chart.axes[0]._values || null};""",
        chart,
    )


def probe_replies(driver: Any, prompt: str, replies: list[str], timeout: float = 300) -> None:
    """On the dashboard's Probe view: type the message and up to two replies, probe, wait for the result."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, "probe-prompt").send_keys(prompt)
    for box, text in zip(driver.find_elements(By.CLASS_NAME, "probe-reply"), replies):
        box.send_keys(text)
    driver.find_element(By.CSS_SELECTOR, "#probe-form button").click()
    wait_for(
        driver,
        lambda d: (
            d.find_element(By.ID, "status").text in ("probed",)
            or d.find_element(By.ID, "status").get_attribute("class") == "error"
        ),
        timeout,
    )
    if driver.find_element(By.ID, "status").get_attribute("class") == "error":
        raise AssertionError(f"the probe failed: {driver.find_element(By.ID, 'status').text}")


def compare_adapters(driver: Any, timeout: float = 300) -> str:
    """On the dashboard's Compare view: pick adapters (the last two, or the one twice), compare, and wait until
    both sides' replies were scored on the served reward model; returns the status line."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    Select(driver.find_element(By.ID, "compare-kind")).select_by_value("adapters")
    driver.find_element(By.CSS_SELECTOR, "#compare-form button").click()
    wait_for(
        driver,
        lambda d: (
            d.find_element(By.ID, "status").text.endswith(("on one scale", ")"))
            or d.find_element(By.ID, "status").get_attribute("class") == "error"
        ),
        timeout,
    )
    return driver.find_element(By.ID, "status").text
