"""`hominem history ...`: the preference history index (core/online/history.py) over the interaction log."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from hominem_pipeline.cli.common import ConfigOpt, SetOpt, app, console, fail, load, setup_logging

history_app = typer.Typer(
    help="People's choices, served turns and pairs, from the index over the interaction log (sqlite, or "
    "Postgres: history.url).",
    no_args_is_help=True,
)
app.add_typer(history_app, name="history")

LimitOpt = Annotated[int, typer.Option("--limit", "-n", min=1, help="Rows shown, newest first.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the answer as JSON (total, rows, seconds).")]
ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="Ask a running `hominem serve` at this URL instead of the index here, as the rater or admin whose "
        "token is in $HOMINEM_TOKEN (a rater sees their own rows alone).",
    ),
]
TOKEN_ENV = "HOMINEM_TOKEN"
NoUpdateOpt = Annotated[
    bool,
    typer.Option("--no-update", help="Answer from the index as it is, without reading what is new in the log first."),
]


def _open(cfg, update: bool, rebuild: bool = False):
    """The index, brought up to date with the log (unless `update` is false)."""
    from hominem_pipeline.core.online.history import HistoryIndex, index_url

    url = index_url(cfg.history.url, cfg.data_dir)
    try:
        index = HistoryIndex(url)
    except Exception as exc:  # a database that cannot be reached: say which, and how to change it
        fail(
            f"cannot open the history index at {_safe(url)}: {exc.__class__.__name__}: {str(exc).splitlines()[0]}; "
            "check history.url (or $HOMINEM_HISTORY_URL)"
        )
    if update or rebuild:
        from hominem_pipeline.core.online.log import log_folder

        folder = log_folder(cfg)
        stats = (index.rebuild if rebuild else index.update)(folder, _domains(cfg) if cfg.history.domains else None)
        if stats.files:
            console.print(
                f"[dim]indexed {stats.turns} turns and {stats.feedback} feedback events from {stats.files} log files "
                f"in {stats.seconds:.1f}s ({index.backend})[/]",
                highlight=False,
            )
    return index


def _domains(cfg):
    """Each turn's domain, by the shipped encoder; loaded only when there are turns to classify."""
    classifier = None

    def domain_of(prompts: list[str]) -> list[str]:
        nonlocal classifier
        if classifier is None:
            from hominem_pipeline.core.builds.predictions import domains_for

            classifier = domains_for(cfg)
        return classifier(prompts)

    return domain_of


def _safe(url: str) -> str:
    """The URL without its password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


TEXT_SHOWN = 70  # characters of a message or a reply a table row shows (--json: the whole text)
IDS = ("id", "chosen_turn", "rejected_turn")  # in --json; a table shows what was said instead


def _cell(column: str, value) -> str:
    if value is None:
        return ""
    text = " ".join(str(value).split())
    if column == "time":
        return text[:16].replace("T", " ")  # to the minute
    if isinstance(value, float):
        return f"{value:+.2f}"
    return text if len(text) <= TEXT_SHOWN else text[: TEXT_SHOWN - 1] + "…"


def _show(page, title: str, as_json: bool) -> None:
    if as_json:
        console.print_json(
            json.dumps({"total": page.total, "rows": page.rows, "seconds": round(page.seconds, 4)}, default=str)
        )
        return
    if not page.rows:
        console.print(f"{title}: none ({page.seconds * 1000:.1f} ms)", highlight=False)
        return
    table = Table(title=f"{title}: {page.total} (newest {len(page.rows)}; {page.seconds * 1000:.1f} ms)")
    columns = [c for c in page.rows[0] if c not in IDS]
    for column in columns:
        table.add_column(
            column,
            overflow="fold",
            max_width=TEXT_SHOWN // 2 if column in ("message", "chosen", "rejected", "reply") else None,
        )
    for row in page.rows:
        table.add_row(*(_cell(c, row[c]) for c in columns))
    console.print(table)


def _remote(server: str, path: str, params: dict, title: str, as_json: bool) -> None:
    """The service's answer to one question (`serving/routes/history.py`), shown as the index's would be."""
    import os
    from types import SimpleNamespace

    import httpx2 as httpx

    token = os.environ.get(TOKEN_ENV)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        answer = httpx.get(server.rstrip("/") + path, params=params, headers=headers, timeout=120)
    except httpx.HTTPError as exc:
        fail(f"cannot reach {server}: {exc.__class__.__name__}: {exc}; is `hominem serve` running there?")
    if answer.status_code != 200:
        try:
            why = answer.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            why = answer.text[:200]
        hint = f" (set ${TOKEN_ENV} to your token)" if answer.status_code == 401 else ""
        fail(f"{server} answered {answer.status_code}: {why}{hint}")
    _show(SimpleNamespace(**answer.json()), title, as_json)


def _answer(config, sets, update: bool, as_json: bool, title: str, ask, check=None, empty=None) -> None:
    """One query's answer (`ask(index)`), from the index brought up to date first; `check(cfg)` refuses a bad key
    before; `empty(index)`: a line that helps when nothing matched."""
    setup_logging()
    cfg = load(config, sets, persist=False)
    if check is not None:
        check(cfg)
    with _open(cfg, update) as index:
        page = ask(index)
        _show(page, title, as_json)
        if not page.total and empty is not None and not as_json and (hint := empty(index)):
            console.print(f"[dim]{hint}[/]", highlight=False)


LOCAL_RATER = "local"  # the service's rater on loopback without tokens (serving.tokens)


@history_app.command("choices")
def history_choices(
    rater: Annotated[
        str,
        typer.Option(
            "--rater",
            "-r",
            help="The rater's pseudonymous id; default: local, the page's rater on loopback without tokens.",
        ),
    ] = LOCAL_RATER,
    config: ConfigOpt = None,
    sets: SetOpt = None,
    limit: LimitOpt = 20,
    as_json: JsonOpt = False,
    no_update: NoUpdateOpt = False,
    server: ServerOpt = None,
) -> None:
    """The rater's choices between two replies, newest first: the message and both replies (shortened; --json:
    whole)."""
    if server:
        params = {"limit": limit} | ({"rater": rater} if rater != LOCAL_RATER else {})
        return _remote(server, "/history/choices", params, f"choices of {rater}", as_json)

    def others(index) -> str | None:
        raters = [r for r in index.raters() if r != rater]
        return f"raters in the index: {', '.join(raters[:10])}; pass one with --rater" if raters else None

    _answer(
        config,
        sets,
        not no_update,
        as_json,
        f"choices of {rater}",
        lambda index: index.choices_of_rater(rater, limit),
        empty=others,
    )


@history_app.command("turns")
def history_turns(
    version: Annotated[
        str,
        typer.Option(
            "--version",
            "-v",
            help="The adapter version that wrote them (its folder's name; `base`: the student alone).",
        ),
    ],
    config: ConfigOpt = None,
    sets: SetOpt = None,
    limit: LimitOpt = 20,
    as_json: JsonOpt = False,
    no_update: NoUpdateOpt = False,
    server: ServerOpt = None,
) -> None:
    """The turns an adapter version served, newest first."""
    if server:
        return _remote(server, "/history/turns", {"version": version, "limit": limit}, f"turns of {version}", as_json)
    _answer(
        config,
        sets,
        not no_update,
        as_json,
        f"turns of {version}",
        lambda index: index.turns_of_version(version, limit),
    )


@history_app.command("pairs")
def history_pairs(
    domain: Annotated[
        str, typer.Option("--domain", "-d", help="A seed category (prompts.categories), e.g. emotional_support.")
    ],
    config: ConfigOpt = None,
    sets: SetOpt = None,
    limit: LimitOpt = 20,
    as_json: JsonOpt = False,
    no_update: NoUpdateOpt = False,
    server: ServerOpt = None,
) -> None:
    """People's choices on conversations of a domain, newest first."""
    if server:
        return _remote(server, "/history/pairs", {"domain": domain, "limit": limit}, f"pairs of {domain}", as_json)

    def known(cfg) -> None:
        if domain not in cfg.prompts.categories:
            fail(f"unknown domain {domain!r}: one of {', '.join(cfg.prompts.categories)} (prompts.categories)")

    _answer(
        config,
        sets,
        not no_update,
        as_json,
        f"pairs of {domain}",
        lambda index: index.pairs_of_domain(domain, limit),
        known,
    )


@history_app.command("update")
def history_update(
    config: ConfigOpt = None,
    sets: SetOpt = None,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Drop the index and read the whole log again.")] = False,
) -> None:
    """Read what is new in the interaction log into the index (every query does this first), and show the counts."""
    setup_logging()
    with _open(load(config, sets, persist=False), True, rebuild=rebuild) as index:
        counts = index.counts()
        console.print(f"{_safe(index.url)}: " + ", ".join(f"{n} {k}" for k, n in counts.items()), highlight=False)
