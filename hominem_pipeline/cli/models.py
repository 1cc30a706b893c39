"""`hominem reward-probe`, `compare` and `export`: look at and use the models a run built."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from hominem_pipeline.cli.common import (
    ConfigOpt,
    SetOpt,
    app,
    artifact_for,
    audited,
    console,
    fail,
    load,
    setup_logging,
)


@app.command("reward-probe")
def reward_probe(
    prompt: Annotated[Optional[str], typer.Option("--prompt", "-p", help="The user's message.")] = None,
    response: Annotated[
        Optional[list[str]],
        typer.Option("--response", "-r", help="A reply to score; repeat the option to compare several."),
    ] = None,
    fixtures: Annotated[
        bool,
        typer.Option(
            "--fixtures",
            help="Score the contrast fixtures (fixtures.file) instead: how often the better reply wins, per "
            "tag, and the pairs lost.",
        ),
    ] = False,
    model: Annotated[
        Optional[Path], typer.Option("--model", "-m", help="A reward model folder (default: the newest built one).")
    ] = None,
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: Annotated[
        Optional[str], typer.Option("--date", "-d", help="Use that day's reward model (default: the newest).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON instead of a table.")] = False,
) -> None:
    """Score replies to one prompt with the reward model: each dimension, the scalar, intensity and safety
    with their uncertainty, the dimensions on which the replies differ most, and the calibrated
    probability that the first reply is preferred over each other. With --fixtures: the model on the
    hand-written contrast fixtures."""
    from hominem_pipeline.core.reward.model import project_reward_model

    cfg = load(config, sets)
    if not fixtures and (prompt is None or not response):
        fail("give --prompt TEXT and at least one --response TEXT, or --fixtures")
    path = model or artifact_for(cfg, "reward_model", date)[1].path
    if fixtures:
        _probe_fixtures(cfg, path, as_json)
        return
    try:
        rm = project_reward_model(path, cfg)
        outputs = rm.score([prompt] * len(response), response)
        people = rm.people_column([prompt] * len(response), response)
    except (FileNotFoundError, ValueError, TypeError) as exc:
        fail(str(exc))
    if as_json:
        scored = [o.as_dict() for o in outputs]
        for row, value in zip(scored, [] if people is None else people):
            row["people_score"] = float(value)
        console.print_json(json.dumps(scored))
        return
    _print_scores(rm, path, prompt, response, outputs, people)


def _print_scores(rm, path: Path, prompt: str, response: list[str], outputs: list, people) -> None:
    """The replies' scores as a table (each dimension, the people's score, the scalar, intensity and safety with
    their spread), the scalar's combination, the dimensions they differ on most, P(#1 preferred) over each."""
    console.print(f"[dim]reward model {path}[/]")
    for i, text in enumerate(response, 1):
        console.print(f"[bold]#{i}[/] {text if len(text) <= 160 else text[:157] + '...'}")
    rows = [(d, [o.vector[d] for o in outputs], [o.uncertainty[d] for o in outputs]) for d in rm.dimensions]
    if people is not None:  # the people's score (no spread: one fit), which the scalar reads beside the vector
        rows.append(("people's score", [float(p) for p in people], [0.0] * len(outputs)))
    rows += [
        (k, [getattr(o, k) for o in outputs], [o.uncertainty[k] for o in outputs])
        for k in ("scalar", "reward_intensity", "safety_score")
    ]
    spread = {name: max(values) - min(values) for name, values, _ in rows[: len(rm.dimensions)]}
    top = {d for d in sorted(spread, key=spread.get, reverse=True)[:3] if spread[d] > 0} if len(outputs) > 1 else set()
    table = Table(title=f"prompt: {prompt if len(prompt) <= 80 else prompt[:77] + '...'}")
    table.add_column("output")
    for i in range(len(outputs)):
        table.add_column(f"#{i + 1} (± sd)", justify="right")
    if len(outputs) > 1:
        table.add_column("spread", justify="right")
    for name, values, sds in rows:
        cells = [f"{v:+.3f} ± {s:.3f}" for v, s in zip(values, sds)]
        label = f"[bold yellow]{name} *[/]" if name in top else name
        extra = [f"{max(values) - min(values):.3f}"] if len(outputs) > 1 else []
        table.add_row(label, *cells, *extra, end_section=name == rm.dimensions[-1])
    console.print(table)
    if (combo := rm.metadata.scalar) is not None:
        terms = [f"{w:.2f} {d}" for d, w in combo.weights.items() if w > 0]
        terms += [f"{combo.people:.2f} people's score"] if combo.people > 0 else []
        console.print(
            f"scalar = tanh({' + '.join(terms) or '0'} {combo.intercept:+.2f}): a reply at least as good "
            "on every dimension and on the people's score never scores lower"
        )
    if top:
        console.print(
            "[yellow]*[/] the dimensions on which the replies differ most: "
            f"{', '.join(sorted(top, key=spread.get, reverse=True))}"
        )
    for j in range(1, len(response)):
        p = rm.probability(outputs[0].scalar - outputs[j].scalar)
        console.print(f"P(#1 preferred over #{j + 1}) = {p:.3f}   (calibrated, temperature {rm.temperature:.3f})")


def _probe_fixtures(cfg, path: Path, as_json: bool) -> None:
    from hominem_pipeline.core.evaluation.fixtures import (
        FIXTURES_JSON,
        FixtureReport,
        fixtures_file_digest,
        load_fixtures,
        score_fixtures,
    )
    from hominem_pipeline.core.reward.model import project_reward_model

    if cfg.fixtures.file is None:
        fail("fixtures.file is null: no contrast fixtures to score; --set fixtures.file=PATH names a file")
    try:  # the check's scores; a missing or unreadable file is scored again
        kept = json.loads((path / FIXTURES_JSON).read_text())
    except (OSError, ValueError):
        kept = {}
    if isinstance(kept, dict) and kept.get("fixtures_digest") == fixtures_file_digest(
        cfg
    ):  # the check's scores, on this very file
        report, source = (
            FixtureReport.from_dict(kept),
            f"read from the reward_fixtures check's scores ({path / FIXTURES_JSON})",
        )
    else:
        try:
            items = load_fixtures(cfg.path(cfg.fixtures.file), cfg.dimension_names)
            if not as_json:
                console.print(
                    f"[dim]scoring {len(items)} fixture pairs (the model's check did not score this file)[/]",
                    highlight=False,
                )
            report, source = score_fixtures(project_reward_model(path, cfg), items), "scored here"
        except (FileNotFoundError, ValueError, TypeError) as exc:
            fail(str(exc))
    if as_json:
        console.print_json(json.dumps(report.as_dict()))
        return
    console.print(f"[dim]reward model {path}\nfixtures {cfg.path(cfg.fixtures.file)}: {source}[/]", highlight=False)
    _print_fixture_report(cfg.fixtures, report)


def _mark(value: float, floor: float, bold: str = "") -> str:
    return f"[{bold}{'green' if value >= floor else 'red'}]{value:.0%}[/]"


def _print_fixture_report(f, report) -> None:
    """The fixture report as a table per tag (by the scalar, and by the tag's own dimension), each pair lost, and
    the goals (`fixtures.min_*`)."""
    dims = report.dimensions
    table = Table(title="the better reply scored higher: by the scalar, and by the tag's own dimension")
    for column in ("tag", "pairs", "scalar", "own dimension", "by it"):
        table.add_column(column, justify="left" if column in ("tag", "own dimension") else "right")
    for tag, value in report.by_tag.items():
        own = dims is not None and tag in dims.by_tag
        table.add_row(
            tag,
            str(report.counts[tag]),
            _mark(value, f.min_tag_accuracy),
            report.dimension_of.get(tag, "-"),
            _mark(dims.by_tag[tag], f.min_dimension_tag_accuracy) if own else "-",
        )
    overall = (
        _mark(dims.accuracy, f.min_dimension_accuracy, "bold ") + f" of {dims.pairs}" if dims is not None else "-"
    )
    scalar = _mark(report.accuracy, f.min_accuracy, "bold ")
    table.add_row("[bold]all[/]", str(report.pairs), scalar, "", overall, end_section=True)
    console.print(table)
    for x in report.failures:
        lost = f"x [{x['tag']}] {x['prompt']}\n    better: {x['better']}\n    worse:  {x['worse']}   "
        console.print(escape(lost + f"(scalar gap {x['gap']:+.3f})"), style="red")
    for x in [] if dims is None else dims.failures:
        where = x["tag"] if x["tag"] == x["dimension"] else f"{x['tag']}: {x['dimension']}"
        lost = f"x [{where}] {x['prompt']}\n    better: {x['better']}\n    worse:  {x['worse']}   "
        console.print(escape(lost + f"({x['dimension']} gap {x['gap']:+.3f})"), style="yellow")
    console.print(
        f"goal: the scalar at least {f.min_accuracy:.0%} overall and {f.min_tag_accuracy:.0%} in every "
        "tag (fixtures.min_accuracy, "
        f"fixtures.min_tag_accuracy); each tag's own dimension at least {f.min_dimension_accuracy:.0%} overall and "
        f"{f.min_dimension_tag_accuracy:.0%} in every tag (fixtures.min_dimension_accuracy, "
        "fixtures.min_dimension_tag_accuracy)"
    )


PromptsOpt = Annotated[
    Optional[list[str]], typer.Option("--prompt", "-p", help="A prompt to answer; repeat for several.")
]
EvalSetOpt = Annotated[
    bool,
    typer.Option(
        "--eval-set",
        help="Use the held-out evaluation prompts (of the newest prompts partition), and judge the "
        "adapter on the people's held-out pairs first.",
    ),
]
AdapterOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--adapter",
        "-a",
        help="Adapter folder, or `live` (the one that passed the gate) (default: the newest built one, live or not).",
    ),
]
JudgeOpt = Annotated[
    Optional[Path],
    typer.Option("--reward-model", "-m", help="Reward model folder (default: the one the adapter was trained with)."),
]
AdapterDateOpt = Annotated[
    Optional[str], typer.Option("--date", "-d", help="Use that day's adapter (default: the newest).")
]


@app.command()
def compare(
    prompt: PromptsOpt = None,
    eval_set: EvalSetOpt = False,
    adapter: AdapterOpt = None,
    reward_model: JudgeOpt = None,
    config: ConfigOpt = None,
    sets: SetOpt = None,
    date: AdapterDateOpt = None,
) -> None:
    """Base and base+adapter side by side: their replies (greedy), reward vectors, intensity and safety,
    what changed, and the reward model's calibrated probability that the adapter's reply is preferred.
    With --eval-set, first how often the adapter's implicit reward orders the people's held-out pairs as
    people did (the base: 50%), judged by no model of ours."""
    import pandas as pd

    from hominem_pipeline.core.policy.lora import adapter_reward_model
    from hominem_pipeline.core.reward.model import project_reward_model

    setup_logging()
    cfg = load(config, sets)
    texts = list(prompt or [])
    ref = artifact_for(cfg, "lora_adapter", date)[1] if adapter is None else None
    adapter_path = _live_adapter(cfg) if str(adapter) == "live" else adapter or ref.path
    if reward_model is None:
        reward_model = (
            adapter_reward_model(adapter_path, cfg.data_dir) or artifact_for(cfg, "reward_model", None)[1].path
        )
    judged = (
        _evaluation_of(cfg, adapter_path, reward_model) if eval_set else None
    )  # what the evaluation stage already computed
    if eval_set and judged is None:
        _, prompts_ref = artifact_for(cfg, "prompts", None)
        table = pd.read_parquet(prompts_ref.file("prompts.parquet"))
        texts += list(table.loc[table["split"] == "eval", "text"])
    if not texts and judged is None:
        fail("nothing to compare on; pass --prompt TEXT (repeatable) or --eval-set")
    try:
        rm_model = project_reward_model(reward_model, cfg)
        rows = _compare_rows(cfg, texts, adapter_path, rm_model, judged)
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    console.print(f"[dim]adapter {adapter_path} ({_live_status(cfg, adapter_path)})\nreward model {reward_model}[/]")
    if judged is not None:
        console.print(
            f"[dim]the {len(rows) - len(texts)} evaluation prompts' replies and scores: read from "
            f"evaluation {judged.partition} {judged.version} (the same adapter and reward model); generated here: "
            f"{len(texts)} prompt(s) of --prompt[/]",
            highlight=False,
        )
    elif eval_set:
        console.print(
            "[dim]no evaluation of this adapter with this reward model is built: every reply generated here[/]",
            highlight=False,
        )
    if eval_set:
        _print_people(cfg, adapter_path, judged)
    _print_rows(rows, rm_model.dimensions)


def _print_rows(rows: list, dimensions: list[str]) -> None:
    """Each prompt's two replies and their scores side by side, then the adapter's win rate."""
    import pandas as pd

    from hominem_pipeline.core.evaluation.compare import outcome

    wins = 0.0
    for row in rows:
        console.rule(row.prompt if len(row.prompt) <= 100 else row.prompt[:97] + "...")
        replies = Table(show_header=True, expand=True)
        replies.add_column("base")
        replies.add_column("base + adapter")
        replies.add_row(*(row.replies[side] or "(empty reply: not scored)" for side in ("base", "adapter")))
        console.print(replies)
        scores = Table(show_header=True)
        for column in ("output", "base", "adapter", "change"):
            scores.add_column(column, justify="left" if column == "output" else "right")
        for name, b in row.scores["base"].items():
            a = row.scores["adapter"][name]
            change = a - b
            # NaN: an empty side
            colour = "dim" if pd.isna(change) or abs(change) <= 0.005 else "green" if change > 0 else "red"
            changed = f"[{colour}]{change:+.3f}[/]"
            scores.add_row(name, f"{b:+.3f}", f"{a:+.3f}", changed, end_section=name == dimensions[-1])
        console.print(scores)
        console.print(f"P(adapter's reply preferred) = {row.p_adapter_preferred:.3f}")
        wins += outcome(row.scores["base"]["scalar"], row.scores["adapter"]["scalar"])
    if len(rows) > 1:
        console.print(
            f"[bold]adapter's win rate {wins / len(rows):.1%} ({wins:g} of {len(rows)} prompts; a tie "
            "counts half, as in the evaluation stage)[/]"
        )


def _compare_rows(cfg, texts: list[str], adapter_path: Path, rm_model, judged) -> list:
    """The evaluation's rows read back (`judged`: its version, or None), then those of `texts` generated here."""
    import pandas as pd

    from hominem_pipeline.core.evaluation.compare import side_by_side, side_by_side_from_evaluation
    from hominem_pipeline.core.lm.models import student_path

    rows = []
    if judged is not None:
        rows = side_by_side_from_evaluation(pd.read_parquet(judged.file("generations.parquet")), rm_model)
    if texts:
        rows += side_by_side(
            texts,
            student_path=student_path(cfg),
            adapter_path=adapter_path,
            reward_model=rm_model,
            cfg=cfg.evaluation,
            seed=cfg.project.seed,
        )
    return rows


def _evaluation_of(cfg, adapter_path: Path, reward_model: Path):
    """The evaluation version built on this adapter with this reward model (the newest), or None."""
    from hominem_pipeline.core.pipeline.lineage import lineage

    data = lineage(cfg)
    want = {"lora_adapter": Path(adapter_path).resolve(), "reward_model": Path(reward_model).resolve()}
    for day in reversed(data.store.partitions("evaluation")):
        for ref in reversed(data.store.versions("evaluation", day)):
            inputs = ref.manifest.get("inputs", {})
            found = {
                a: [data.store.existing(a, i["partition"], i["version"]) for i in inputs.get(a, [])] for a in want
            }
            if ref.manifest.get("complete", True) and all(
                len(v) == 1 and v[0] is not None and v[0].path.resolve() == want[a] for a, v in found.items()
            ):
                return ref
    return None


def _print_people(cfg, adapter_path: Path, judged=None) -> None:
    """The adapter's implicit reward on the people's held-out pairs (`evaluation.compare.people_figures`), read
    from its evaluation (`judged`) when that holds them."""
    from hominem_pipeline.core.builds.reward_model import people_pairs
    from hominem_pipeline.core.evaluation.compare import adapter_people_figures
    from hominem_pipeline.core.evaluation.fixtures import base_logp_cache
    from hominem_pipeline.core.lm.models import student_path
    from hominem_pipeline.core.reward.feature_cache import FEATURE_CACHE, SHIPPED_FEATURES

    summary = json.loads(judged.file("summary.json").read_text()) if judged is not None else {}
    if "people_accuracy" in summary:
        f = summary
    else:
        people = people_pairs(cfg, "held_out")
        if people is None:
            console.print(
                "[yellow]no people's held-out pairs configured (reward_model.people_pairs[].held_out): "
                "the adapter is judged by the reward model alone[/]"
            )
            return
        f = adapter_people_figures(
            student_path(cfg),
            adapter_path,
            people,
            cfg.evaluation.batch_size,
            base_logp_cache(student_path(cfg), cfg.data_dir / FEATURE_CACHE, cfg.path(SHIPPED_FEATURES)),
        )
    console.print(
        f"[bold]people's held-out pairs: the adapter's implicit reward orders {f['people_accuracy']:.1%} "
        f"+- {f['people_standard_error']:.1%} "
        f"of {f['people_pairs']} as people did[/] (the base: 50%; mean margin {f['people_mean_margin']:+.2f} nats; "
        f"TRL's rewards/accuracies on pairs no model here trained on)"
    )


def _live_adapter(cfg) -> Path:
    from hominem_pipeline.core.online.live import LiveState

    path = LiveState(cfg.data_dir).adapter_path()
    if path is None:
        fail("no adapter is live (none has passed the gate); `hominem live status` lists the candidates and why")
    return path


def _live_status(cfg, adapter_path: Path) -> str:
    """Whether `adapter_path` is live, a candidate the gate refused (and why), or not gated yet."""
    from hominem_pipeline.core.online.live import LiveState

    state = LiveState(cfg.data_dir)
    live = state.adapter_path()
    if live is not None and live.resolve() == Path(adapter_path).resolve():
        return "live"
    refused = [c for c in state.candidates() if state.absolute(c["adapter"]).resolve() == Path(adapter_path).resolve()]
    return f"not live: the gate refused it ({refused[0]['reason']})" if refused else "not live"


@app.command()
def export(
    adapter: Annotated[
        Path,
        typer.Option("--adapter", "-a", help="A LoRA adapter folder (data/lora_adapter/<date>/<version>), or `live`."),
    ],
    merged: Annotated[
        Optional[Path], typer.Option("--merged", "-o", help="New folder for the merged model (HF safetensors).")
    ] = None,
    gguf: Annotated[
        Optional[Path],
        typer.Option("--gguf", help="New GGUF file: the merged student for llama.cpp and LM Studio."),
    ] = None,
    gguf_type: Annotated[str, typer.Option("--gguf-type", help="f16 | q8_0 (about half the size).")] = "f16",
    gguf_lora: Annotated[
        Optional[Path],
        typer.Option("--gguf-lora", help="New GGUF file: the adapter alone, for a runner that applies it to a base."),
    ] = None,
    base: Annotated[
        Optional[Path],
        typer.Option("--base", help="The base model folder (default: the project's student, models.student.path)."),
    ] = None,
) -> None:
    """The student with an adapter, out: a plain HF model (--merged: safetensors + tokenizer, for transformers), a
    GGUF file (--gguf: what llama.cpp and LM Studio load, written by llama.cpp's own converter), or the adapter alone
    as a GGUF LoRA (--gguf-lora). Each GGUF gets a sidecar FILE.json naming the adapter version and its digest."""
    from hominem_pipeline.core.lm.models import student_path

    if merged is None and gguf is None and gguf_lora is None:
        fail("nothing to write: pass --merged DIR, --gguf FILE and/or --gguf-lora FILE")
    setup_logging()
    cfg = load(None)
    outs = {k: str(v) for k, v in (("merged", merged), ("gguf", gguf), ("gguf_lora", gguf_lora)) if v}
    with audited(cfg, "export", adapter=str(adapter), **outs) as details:
        if str(adapter) == "live":
            adapter = _live_adapter(cfg)
        details["adapter"] = str(adapter)
        try:
            written = _export(cfg, adapter, base or student_path(cfg), merged, gguf, gguf_type, gguf_lora)
        except (FileNotFoundError, FileExistsError, ValueError, RuntimeError) as exc:
            fail(str(exc))
        details |= {k: v.get("sha256") for k, v in written.items() if v.get("sha256")}
    _track_export(cfg, written)


def _export(cfg, adapter: Path, base: Path, merged, gguf, gguf_type: str, gguf_lora) -> dict[str, dict]:
    """Write what was asked; print each."""
    from hominem_pipeline.core.policy.export import export_merged
    from hominem_pipeline.core.policy.gguf import export_gguf, export_gguf_lora

    written = {}
    if merged is not None:
        written["merged"] = info = export_merged(adapter, merged, base)
        console.print(f"merged {info['adapter']} into {info['base']} -> {merged}  (HF safetensors)")
    if gguf is not None:
        written["gguf"] = info = export_gguf(adapter, gguf, base, gguf_type)
        console.print(f"{gguf}: {info['format']}, {info['bytes'] / 1e6:.0f} MB, sha256 {info['sha256'][:16]}")
        console.print(f"  LM Studio: put it in a folder of its models directory; llama.cpp: llama-cli -m {gguf}")
    if gguf_lora is not None:
        written["gguf_lora"] = info = export_gguf_lora(adapter, gguf_lora, base)
        console.print(f"{gguf_lora}: {info['format']}; llama.cpp: --lora {gguf_lora} over the student's GGUF")
    return written


def _track_export(cfg, written: dict[str, dict]) -> None:
    """An MLflow run naming what was exported (skipped where MLflow is not installed: the inference-only install)."""
    try:
        import mlflow  # noqa: F401
    except ImportError:
        return
    import datetime as dt
    import uuid

    from hominem_pipeline.core.pipeline.tracking import Tracker

    tracker = Tracker(cfg.mlflow_uri, cfg.tracking.experiment, cfg.path(cfg.tracking.artifact_root))
    day = dt.date.today().isoformat()
    with tracker.stage_run(
        asset="export", partition=day, dagster_run_id=f"export-{uuid.uuid4().hex[:12]}", tags={}
    ) as run:
        run.log_params({f"{kind}.{k}": v for kind, info in written.items() for k, v in info.items()})
