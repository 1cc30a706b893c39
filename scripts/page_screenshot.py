"""The screenshot of the feedback page in docs/: `hominem serve` with this project's adapter and reward
model, one exchange in headless chromium (two replies, A chosen strongly with a note, the other nudged
toward more empathy), then a PNG of the page.

    .venv/bin/python scripts/page_screenshot.py [--out docs/screenshots/feedback_page.png]

Needs `make run` (an adapter and a reward model) and `make browser`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.testing.browser import choose_between_two_replies, chromium, screenshot  # noqa: E402
from hominem_pipeline.testing.service import ServeFailed, start_serve, stop_serve  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots" / "feedback_page.png")
    ap.add_argument("--message", default="I failed my driving test again today. I feel so stupid.")
    ap.add_argument("--adapter", default=None, help="passed to `hominem serve` (default: serving.adapter)")
    ap.add_argument("--reward-model", default=None, help="passed to `hominem serve` (default: serving.reward_model)")
    args = ap.parse_args()
    # its own log folder: the screenshot's exchange is not feedback anyone gave
    try:
        proc, url, _ = start_serve(["--set", "serving.log_dir=online-screenshot", "--set", "serving.max_new_tokens=96",
                                    *(["--adapter", args.adapter] if args.adapter else []), *(["--reward-model", args.reward_model] if args.reward_model else [])],
                                   ROOT, stdout=None)
    except ServeFailed as exc:
        raise SystemExit(str(exc)) from None
    try:
        driver = chromium(1280, 1500)
        try:
            choose_between_two_replies(driver, url + "/", args.message, pick="A", strength="strong", note="A takes the feeling seriously")
            print(screenshot(driver, args.out))
        finally:
            driver.quit()
    finally:
        stop_serve(proc)


if __name__ == "__main__":
    main()
