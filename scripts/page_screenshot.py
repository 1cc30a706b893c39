"""The screenshots of the feedback page in docs/: `hominem serve` with this project's adapter and reward
model in headless chromium. The page: one exchange (two replies, A chosen strongly with a note, the other
nudged toward more empathy). With --asked: "ask me a pair" pressed, the pair the service picked by what
the reward model does not know, with the line that says why.

    .venv/bin/python scripts/page_screenshot.py [--out docs/screenshots/feedback_page.png]
    .venv/bin/python scripts/page_screenshot.py --asked [--out docs/screenshots/asked_pair.png]

The adapter and the reward model (default: the newest built, live or not) are found under the project's own
config, then served by folder: the server runs with its own log folder, which would make `latest` look for
versions built on that log.

Needs `make run` (an adapter and a reward model) and `make browser`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.core.config.loader import load_config
from hominem_pipeline.serving.server import ServeError, resolve_adapter, resolve_reward_model
from hominem_pipeline.testing.browser import ask_for_a_pair, choose_between_two_replies, chromium, screenshot
from hominem_pipeline.testing.service import ServeFailed, start_serve, stop_serve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: docs/screenshots/feedback_page.png, or asked_pair.png with --asked",
    )
    ap.add_argument(
        "--asked",
        action="store_true",
        help='the pair "ask me a pair" brings (GET /feedback/next), with why it was picked',
    )
    ap.add_argument("--message", default="I failed my driving test again today. I feel so stupid.")
    ap.add_argument(
        "--adapter", default="latest", help="live, latest, a folder or none (as `hominem serve --adapter`)"
    )
    ap.add_argument(
        "--reward-model",
        default="adapter",
        help="adapter, latest, a folder or none (as `hominem serve --reward-model`)",
    )
    args = ap.parse_args()
    cfg = load_config(root=ROOT)
    try:
        adapter = resolve_adapter(cfg, args.adapter)
        reward_model = resolve_reward_model(cfg, args.reward_model, adapter)
    except ServeError as exc:
        raise SystemExit(str(exc)) from None
    out = args.out or ROOT / "docs" / "screenshots" / ("asked_pair.png" if args.asked else "feedback_page.png")
    # its own log folder: the screenshot's exchange is not feedback anyone gave
    try:
        proc, url, _ = start_serve(
            [
                "--set",
                "serving.log_dir=online-screenshot",
                "--set",
                "serving.max_new_tokens=96",
                "--adapter",
                str(adapter or "none"),
                "--reward-model",
                str(reward_model or "none"),
            ],
            ROOT,
            stdout=None,
        )
    except ServeFailed as exc:
        raise SystemExit(str(exc)) from None
    try:
        driver = chromium(1280, 1500)
        try:
            if args.asked:
                ask_for_a_pair(driver, url + "/")
            else:
                choose_between_two_replies(
                    driver, url + "/", args.message, pick="A", strength="strong", note="A takes the feeling seriously"
                )
            print(screenshot(driver, out))
        finally:
            driver.quit()
    finally:
        stop_serve(proc)


if __name__ == "__main__":
    main()
