"""Can a person teach the student one plain taste through the page, and does the student keep what it knew?

For each simulated person (a taste of `core.evaluation.tastes.TASTES`: brief, asks back, lists for how-to), a scratch
project starts as `make run` leaves one (`benchmarks/common.scratch_project`), `hominem serve` runs on it, and the
person talks to it as the page does:

- for each teaching message, two replies (`POST /generate`, n=2, `--max-tokens` long, as the page asks);
- when exactly one of them keeps the taste, a choice for it (`POST /feedback`, strength clear); when both or neither
  do, the pair is skipped (it cannot show the taste);
- the server's scheduler updates the live adapter every `online.every_events` choices, as it would for a person.

Reported after 0 and each of `--choices` choices:
- the share of replies keeping the taste, over `--held-out` messages the person never taught on (`--samples` replies
  each, sampled as served), with its standard error over messages (`tastes.taste_share`);
- the gate's quality checks on the live adapter against the start (recall, facts, instructions, sameness: the first
  `--quality-items` items of each, the replies the gate kept), each with its paired +-;
- pairs shown for each choice made; each update's wall time from the choice that started it to a reply from the
  updated adapter (or its refusal); the time of one reply while an update runs (the person chatting on, a message
  every reply plus `--think` seconds), against idle;
- the person's taste model fitted on their choices, judged on every fifth usable pair they kept back: the share of
  those choices it predicts (how many choices it needs to reach 80%).

Results go to benchmarks/results/taste_test/<taste>.json and a plot to docs/plots/taste_test.png. It takes hours on 2
cores (each choice needs about five pairs shown); `hominem_pipeline_tests` runs its path on the tiny model.

    .venv/bin/python benchmarks/taste_test.py --project P --taste asks_back --choices 25 50 100
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import scratch_project  # noqa: E402
from hominem_pipeline.core.evaluation.tastes import TASTES, Taste, is_how_to, taste_share  # noqa: E402

HOW_TO_TASKS = (
    "bake sourdough bread",
    "change a flat tyre",
    "start running",
    "learn to juggle",
    "plant tomatoes",
    "fall asleep faster",
    "write a cover letter",
    "clean a cast iron pan",
    "save money each month",
    "make cold brew coffee",
    "train a puppy to sit",
    "prepare for a job interview",
    "fix a leaking tap",
    "learn a new language",
    "organise a small closet",
    "make friends in a new city",
    "paint a room",
    "meditate",
    "care for a houseplant",
    "plan a road trip",
    "stop procrastinating",
    "cook rice on the stove",
    "back up my phone",
    "tie a tie",
    "give a wedding toast",
    "build a budget",
    "study for an exam",
    "keep a journal",
    "negotiate a raise",
    "brew green tea properly",
    "set up a home workout",
    "iron a shirt",
    "make a simple website",
    "improve my handwriting",
    "remove a coffee stain",
    "prepare for a marathon",
    "keep basil alive",
    "pack light for a trip",
    "write a short story",
    "learn to swim as an adult",
    "make pancakes",
    "clean my laptop keyboard",
    "start a vegetable garden",
    "choose a good watermelon",
    "talk to my landlord about repairs",
    "sharpen a kitchen knife",
    "teach a child to ride a bike",
    "memorise a speech",
    "make a paper airplane",
    "reduce screen time",
    "brew kombucha",
    "hang a picture frame",
    "learn chess openings",
    "make a podcast",
    "wash a wool sweater",
    "calm down before a test",
    "write a thank-you note",
    "grow herbs indoors",
    "clean windows without streaks",
    "pick a running shoe",
    "start birdwatching",
    "make homemade pizza dough",
    "learn touch typing",
    "descale a kettle",
    "ask for feedback at work",
    "make a family tree",
    "prepare a first aid kit",
    "fold a fitted sheet",
    "take better phone photos",
    "learn to knit",
    "cut my own fringe",
    "get better at small talk",
    "store fresh berries",
    "make a vision board",
    "restore an old wooden chair",
    "start composting",
    "learn to draw faces",
    "make my mornings less rushed",
    "choose a used bike",
    "season a wok",
)
HOW_TO_FORMS = ("How do I {}?", "What's the best way to {}?", "Can you give me some tips for how to {}?")


def messages(taste: Taste, seed_texts: list[str]) -> tuple[list[str], list[str]]:
    """(teaching messages, held-out messages) the taste speaks to: the seed prompts (alternating) for a taste of every
    message; how-to messages made from `HOW_TO_TASKS` (alternating) for one of how-to messages."""
    if taste.applies is None:
        pool = seed_texts
    else:
        pool = [HOW_TO_FORMS[i % len(HOW_TO_FORMS)].format(t) for i, t in enumerate(HOW_TO_TASKS)]
        pool = [m for m in pool if is_how_to(m) and taste.speaks_to(m)]
    return pool[0::2], pool[1::2]


def seed_prompts() -> list[str]:
    import yaml

    return [
        p["text"] for p in yaml.safe_load((ROOT / "config" / "prompts" / "seed_prompts.yaml").read_text())["prompts"]
    ]


class Person:
    """A simulated person at the page: asks for replies as the page does and chooses by one taste."""

    HOLD_EVERY = 5  # every 5th pair that can show the taste is kept back: the person's held-out choices

    def __init__(self, http: Any, url: str, taste: Taste, max_tokens: int):
        self.http, self.url, self.taste, self.max_tokens = http, url, taste, max_tokens
        self.shown = self.choices = 0
        self.taught: list[tuple[str, str, str]] = []  # (message, chosen, rejected) of each choice sent
        self.held: list[tuple[str, str, str]] = []  # the same, of the choices kept back

    def replies(self, message: str, n: int, seed: int, score: bool = False) -> list[dict[str, Any]]:
        body = {"prompt": message, "n": n, "max_tokens": self.max_tokens, "seed": seed, "score": score}
        answer = self.http.post(f"{self.url}/generate", json=body)
        answer.raise_for_status()
        return answer.json()["replies"]

    def answering_with(self, message: str) -> str:
        """The adapter a short reply comes from (its label)."""
        body = {"prompt": message, "max_tokens": 4, "score": False}
        return str(self.http.post(f"{self.url}/generate", json=body).json()["adapter"])

    def teach(self, message: str, seed: int) -> bool:
        """Two replies; a choice for the one that keeps the taste when only one does. True when a choice was made."""
        a, b = self.replies(message, 2, seed)
        self.shown += 1
        keeps = [self.taste.keeps(a["text"]), self.taste.keeps(b["text"])]
        if keeps[0] == keeps[1]:
            return False
        chosen, rejected = (a, b) if keeps[0] else (b, a)
        if (len(self.taught) + len(self.held) + 1) % self.HOLD_EVERY == 0:
            self.held.append((message, chosen["text"], rejected["text"]))
            return False
        body = {"kind": "choice", "chosen": chosen["turn"], "rejected": rejected["turn"], "strength": "clear"}
        self.http.post(f"{self.url}/feedback", json=body).raise_for_status()
        self.taught.append((message, chosen["text"], rejected["text"]))
        self.choices += 1
        return True

    def share(self, held_out: list[str], samples: int) -> dict[str, Any]:
        said = [[r["text"] for r in self.replies(m, samples, seed=1000 + i)] for i, m in enumerate(held_out)]
        s = taste_share(self.taste, held_out, said)
        return {"share": s.share, "standard_error": s.standard_error, "replies": s.replies, "messages": s.messages}


def quality(cfg: Any, state: Any, start: Any, items: int) -> dict[str, Any]:
    """The gate's reply checks, the live adapter against `start` (the `Live` at the start), on the first `items` of
    each: the replies the reply cache holds (the gate kept them), the rest generated."""
    from hominem_pipeline.core.evaluation.reply_checks import check_replies, judge_replies, load_reply_checks
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.online.facts import with_stated_facts
    from hominem_pipeline.core.online.reply_cache import reply_cache
    from hominem_pipeline.core.policy.lora import load_policy, merged

    sets, cache = load_reply_checks(cfg).first(items), reply_cache(cfg)
    view = with_stated_facts if cfg.serving.recall_facts else None
    live = state.current()

    def replies(version: str | None, adapter: Path | None) -> dict[str, list[str]]:
        known = cache.get(version)
        model, tokenizer = load_policy(student_path(cfg), adapter, None)
        with merged(model) if adapter is not None else contextlib.nullcontext(model):
            out = check_replies(model, tokenizer, sets, cfg.evaluation, cfg.project.seed, known, view)
        cache.put(version, known)
        return out

    now = replies(live.version, state.adapter_path(live))
    before = replies(start.version, state.adapter_path(start))
    checks, _ = judge_replies(sets, now, before, cfg.health, start.version)
    return {
        c.name: {"live": c.candidate, "start": c.reference, "difference": c.difference, "se": c.standard_error}
        for c in checks
    }


def taste_model_agreement(cfg: Any, state: Any, person: Person) -> dict[str, Any]:
    """The person's taste model (`core/attune/personal.py`, over the live reward model's outputs and the text
    features), fitted on the choices they made, judged on the choices they kept back: the share it predicts."""
    from hominem_pipeline.core.attune.personal import PersonalModel, reply_features
    from hominem_pipeline.core.reward.model import project_reward_model

    if not person.taught or not person.held:
        return {"agreement": None, "taught": len(person.taught), "held": len(person.held)}
    path = state.reward_model_path()
    reward_model = project_reward_model(path, cfg) if path is not None else None

    def features(rows: list[tuple[str, str, str]], side: int) -> Any:
        return reply_features(reward_model, [r[0] for r in rows], [r[side] for r in rows])

    names, chosen = features(person.taught, 1)
    model = PersonalModel.fit(names, chosen, features(person.taught, 2)[1])
    agreement = model.agreement(features(person.held, 1)[1], features(person.held, 2)[1])
    return {"agreement": agreement, "taught": len(person.taught), "held": len(person.held), "said": model.describe()}


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, rows in results.items():
        x = [r["choices"] for r in rows]
        ax.errorbar(
            x,
            [r["share"] for r in rows],
            yerr=[r["standard_error"] for r in rows],
            marker="o",
            capsize=3,
            label=TASTES[name].what,
        )
    ax.set_xlabel("choices made through the page")
    ax.set_ylabel("held-out replies keeping the taste")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("A person's taste, taught through the page")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def run_taste(args: argparse.Namespace, taste: Taste) -> list[dict[str, Any]]:
    import httpx2 as httpx

    from hominem_pipeline.testing.service import start_serve, stop_serve

    tmp, cfg, state = scratch_project(
        args.project.resolve(), args.adapter, {"online": {"every_minutes": None}}, like_make_run=True
    )
    start = state.current()
    teach, held_out = messages(taste, seed_prompts())
    held_out = held_out[: args.held_out]
    sets = [f"serving.max_new_tokens={args.max_tokens}", "online.every_minutes=null", "serving.live_poll_seconds=0.2"]
    proc, url, _ = start_serve(
        [f"--set={s}" for s in sets],
        cfg.root,
        env={"HOMINEM_HOME": str(cfg.root)},
        timeout=600,
        stdout=open(tmp / "serve.log", "w"),
    )
    rows: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    try:
        with httpx.Client(timeout=900) as http:
            person = Person(http, url, taste, args.max_tokens)
            idle = [_timed(person, held_out[0]) for _ in range(3)]

            def checkpoint() -> None:
                _settle(http, url)
                rows.append(
                    {
                        "choices": person.choices,
                        "shown": person.shown,
                        **person.share(held_out, args.samples),
                        "quality": quality(cfg, state, start, args.quality_items),
                        "taste_model": taste_model_agreement(cfg, state, person),
                        "live": state.current().version,
                    }
                )
                row = rows[-1]
                args.out.mkdir(parents=True, exist_ok=True)  # so far: an interrupted run keeps its checkpoints
                so_far = json.dumps({"checkpoints": rows, "updates": updates}, indent=1, default=str)
                (args.out / f"{taste.name}.partial.json").write_text(so_far + "\n")
                print(
                    f"{taste.name}: after {person.choices} choices ({person.shown} pairs shown): "
                    f"{row['share']:.1%} +- {row['standard_error']:.1%}",
                    flush=True,
                )

            checkpoint()
            goals = sorted(args.choices)
            i = 0
            while goals and i < len(teach) * 4:
                before = http.get(f"{url}/admin/live").json()["updates"]["updates"]
                if person.teach(teach[i % len(teach)], seed=i) and person.choices % cfg.online.every_events == 0:
                    updates.append(_follow(http, url, person, held_out[0], before, args.think))
                    u = updates[-1]
                    print(
                        f"{taste.name}: update after {person.choices} choices: {u['outcome']} ({u['reason']}), "
                        f"answering in {u['answering_s']} s, a reply {u['reply_s_during']} s meanwhile",
                        flush=True,
                    )
                i += 1
                if person.choices >= goals[0]:
                    goals.pop(0)
                    checkpoint()
    finally:
        stop_serve(proc)
    for row in rows:
        row["updates"] = [u for u in updates if u["after_choices"] <= row["choices"]]
        row["idle_reply_s"] = statistics.median(idle)
    shutil.rmtree(tmp, ignore_errors=True)
    return rows


def _timed(person: Person, message: str) -> float:
    t = time.monotonic()
    person.replies(message, 1, seed=7)
    return time.monotonic() - t


def _settle(http: Any, url: str, timeout: float = 1800) -> None:
    """Wait until no update runs."""
    waited = time.monotonic()
    while http.get(f"{url}/admin/live").json()["updates"]["running"] and time.monotonic() - waited < timeout:
        time.sleep(1)


def _follow(
    http: Any, url: str, person: Person, message: str, before: int, think: float, timeout: float = 1800
) -> dict[str, Any]:
    """The update the last choice started: while it runs the person keeps chatting (a message, its reply, then
    `think` seconds reading it), each reply timed; and the time until it is decided and (if promoted) a reply comes
    from it."""
    t0, during = time.monotonic(), []
    while time.monotonic() - t0 < timeout:
        status = http.get(f"{url}/admin/live").json()["updates"]
        if status["updates"] > before and status["last"] is not None:
            break
        during.append(_timed(person, message))
        time.sleep(think)
    last = status.get("last") or {}
    decided = time.monotonic() - t0
    if last.get("outcome") == "promoted":  # until a reply comes from it
        while str(last.get("version")) not in person.answering_with(message) and time.monotonic() - t0 < timeout:
            time.sleep(0.2)
    answered = time.monotonic() - t0
    return {
        "after_choices": person.choices,
        "outcome": last.get("outcome"),
        "reason": last.get("reason"),
        "stages_s": last.get("stages_s"),
        "decided_s": round(decided, 1),
        "answering_s": round(answered, 1),
        "reply_s_during": round(statistics.median(during), 2) if during else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--project", type=Path, default=ROOT, help="a project whose `make run` finished (default: this repo)"
    )
    ap.add_argument("--adapter", help="the daily adapter live at the start (default: the newest built)")
    ap.add_argument("--taste", action="append", choices=sorted(TASTES), help="the tastes taught (default: all)")
    ap.add_argument("--choices", type=int, nargs="+", default=[25, 50, 100], help="checkpoints, in choices made")
    ap.add_argument("--held-out", type=int, default=40, help="held-out messages the share is measured on")
    ap.add_argument("--samples", type=int, default=2, help="replies sampled to each held-out message")
    ap.add_argument("--max-tokens", type=int, default=64, help="tokens per reply, as the page asks")
    ap.add_argument(
        "--think", type=float, default=10.0, help="seconds the person reads a reply before the next, during an update"
    )
    ap.add_argument("--quality-items", type=int, default=24, help="items of each reply check (the online gate's)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "taste_test")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "plots" / "taste_test.png")
    args = ap.parse_args()
    results = {}
    for name in args.taste or sorted(TASTES):
        results[name] = run_taste(args, TASTES[name])
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{name}.json").write_text(json.dumps(results[name], indent=1, default=str) + "\n")
        (args.out / f"{name}.partial.json").unlink(missing_ok=True)
    print(json.dumps({k: [(r["choices"], round(r["share"], 3)) for r in v] for k, v in results.items()}))
    measured = {f.stem: json.loads(f.read_text()) for f in sorted(args.out.glob("*.json")) if f.stem in TASTES}
    plot(measured, args.plot)  # every taste measured so far, this run's and earlier runs'


if __name__ == "__main__":
    main()
