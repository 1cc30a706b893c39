"""The dashboard's screenshots in docs/: `hominem serve` on this project's files (the newest reward model
served for the Probe view) in headless chromium, one PNG per view.

    .venv/bin/python scripts/dashboard_screenshots.py [--project P] [--out docs/screenshots] [--views timeline probe
    ...]

Needs `make run` (at least one day of every asset) and `make browser`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hominem_pipeline.testing.browser import DASHBOARD_VIEWS, chromium, open_view, probe_replies, screenshot
from hominem_pipeline.testing.service import ServeFailed, start_serve, stop_serve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    ap.add_argument("--views", nargs="+", default=list(DASHBOARD_VIEWS), choices=list(DASHBOARD_VIEWS))
    ap.add_argument(
        "--project", type=Path, default=ROOT, help="the project whose files the dashboard shows (default: this one)"
    )
    ap.add_argument(
        "--reward-model", default="latest", help="what the Probe view scores with: latest, or a reward model folder"
    )
    args = ap.parse_args()
    project = args.project.resolve()
    try:
        proc, url, _ = start_serve(
            ["--adapter", "none", "--reward-model", args.reward_model],
            project,
            env={"HOMINEM_HOME": str(project)},
            stdout=None,
        )
    except ServeFailed as exc:
        raise SystemExit(str(exc)) from None
    try:
        driver = chromium(1280, 1600)
        try:
            for view in args.views:
                open_view(driver, url, view)
                if view == "probe":
                    probe_replies(
                        driver,
                        "I failed my driving test again. I feel so stupid.",
                        [
                            "That sounds really discouraging. Lots of people need a few tries; what "
                            "went wrong this time?",
                            "Try harder.",
                        ],
                    )
                print(screenshot(driver, args.out / f"dashboard_{view}.png"))
        finally:
            driver.quit()
    finally:
        stop_serve(proc)


if __name__ == "__main__":
    main()
