"""The screenshot of the feedback page in docs/: `hominem serve` with this project's adapter and reward
model, one exchange in headless chromium (two replies, A chosen strongly with a note, the other nudged
toward more empathy), then a PNG of the page.

    .venv/bin/python scripts/page_screenshot.py [--out docs/screenshots/feedback_page.png]

Needs `make run` (an adapter and a reward model) and `make browser`.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.testing.browser import choose_between_two_replies, chromium, screenshot  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots" / "feedback_page.png")
    ap.add_argument("--message", default="I failed my driving test again today. I feel so stupid.")
    ap.add_argument("--adapter", default=None, help="passed to `hominem serve` (default: serving.adapter)")
    ap.add_argument("--reward-model", default=None, help="passed to `hominem serve` (default: serving.reward_model)")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    # its own log folder: the screenshot's exchange is not feedback anyone gave
    proc = subprocess.Popen([str(Path(sys.executable).parent / "hominem"), "serve", "--port", str(port), "--set", "serving.log_dir=online-screenshot",
                             "--set", "serving.max_new_tokens=96", *(["--adapter", args.adapter] if args.adapter else []),
                             *(["--reward-model", args.reward_model] if args.reward_model else [])], cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("hominem serve did not start")
                time.sleep(0.5)
        driver = chromium(1280, 1500)
        try:
            choose_between_two_replies(driver, url + "/", args.message, pick="A", strength="strong", note="A takes the feeling seriously")
            print(screenshot(driver, args.out))
        finally:
            driver.quit()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
