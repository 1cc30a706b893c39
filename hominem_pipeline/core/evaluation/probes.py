"""The probing suite (trade-off behaviour, adversarial consistency, counterfactual queries, reward
attribution): what a reward model values, and where it contradicts itself.

Every probe reads a *scorer*: anything with `dimensions` and `raw_scores(prompts, replies)` returning
"vector" (n, D) and "scalar" (n,) (a `RewardModel`, or a toy in the tests).

- **Trade-offs** (`config/probes/tradeoffs.yaml`): two replies to one message, each better on one side of
  a trade (empathy vs honesty, agency vs safety, curiosity vs relevance), with the side each dimension
  should take and the reply the scalar should prefer written down. A version that flips a choice the
  version before made is a regression (`flipped`).
- **Adversarial consistency**: meaning-preserving rewrites (typos, paraphrase, an irrelevant sentence,
  sentences reordered) of both replies of a contrast pair, and a polite or rude frame around the person's
  message: the scalar should barely move (mean |shift|) and the pair's order should not flip (flip rate).
- **Counterfactuals** (`config/probes/counterfactuals.yaml`): the same reply with one property changed (a
  fact made wrong, the feeling acknowledged or not, a harmful step added): the named dimension should move
  the named way, more than any other dimension moves.
- **Attribution**: occlusion. Each span of a reply is left out in turn and the reply scored again; the
  change per dimension is that span's attribution. Occlusion, not integrated gradients, because the
  heads also read columns computed outside the differentiable path (the guards' student log-probabilities
  and the people's score), and because it needs nothing but scoring, so it explains any scorer the same way.
"""

from __future__ import annotations

import html
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

TRADES = ("empathy_vs_honesty", "agency_vs_safety", "curiosity_vs_relevance")


# --- the probe files --------------------------------------------------------------------------------


@dataclass(frozen=True)
class TradeOff:
    id: str
    trade: str
    prompt: str
    a: str
    b: str
    a_higher: tuple[str, ...]  # dimensions on which a should score higher
    b_higher: tuple[str, ...]
    prefer: str  # "a" or "b": the reply the scalar should prefer


@dataclass(frozen=True)
class Counterfactual:
    id: str
    change: str  # what was changed, e.g. fact_wrong
    dimension: str  # the dimension that should move
    direction: int  # +1: up, -1: down
    prompt: str
    reply: str
    changed: str


def _rows(path: Path, what: str) -> list[dict[str, Any]]:
    import yaml

    try:
        rows = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{what} file {path} does not exist; set probes.{what} to a YAML list, or to null for none"
        ) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not readable YAML ({exc})") from None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path} is not a list of mappings; write one '- id: ...' entry per {what[:-1]}")
    return rows


def _text(row: dict[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: needs non-empty text for {key}")
    return value.strip()


def _dims(value: Any, dimensions: Sequence[str], where: str, key: str, empty: bool = False) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or (not names and not empty) or any(n not in dimensions for n in names):
        raise ValueError(f"{where}: {key} is {value!r}; give one or more of the dimensions {', '.join(dimensions)}")
    return tuple(names)


def _entries(path: Path, what: str, keys: set[str]):
    """(where, row, id) of each entry of a probe file: its keys known, its id non-empty and used once."""
    seen = set()
    for i, row in enumerate(_rows(path, what), 1):
        where = f"{path}, entry {i}"
        unknown = sorted(set(row) - keys)
        if unknown:
            raise ValueError(f"{where}: unknown keys {unknown}")
        rid = _text(row, "id", where)
        if rid in seen:
            raise ValueError(f"{where}: id {rid!r} is used twice")
        seen.add(rid)
        yield where, row, rid


def load_tradeoffs(path: str | Path, dimensions: Sequence[str]) -> list[TradeOff]:
    """The trade-off scenarios in `path` (YAML: id, trade, prompt, a, b, a_higher, b_higher, prefer)."""
    out = []
    for where, row, sid in _entries(
        Path(path), "tradeoffs", {"id", "trade", "prompt", "a", "b", "a_higher", "b_higher", "prefer"}
    ):
        if row.get("trade") not in TRADES:
            raise ValueError(f"{where}: trade is {row.get('trade')!r}; use one of {', '.join(TRADES)}")
        if row.get("prefer") not in ("a", "b"):
            raise ValueError(
                f"{where}: prefer is {row.get('prefer')!r}; write a or b (the reply the scalar should prefer)"
            )
        a_hi, b_hi = (
            _dims(row.get("a_higher", []), dimensions, where, "a_higher", True),
            _dims(row.get("b_higher", []), dimensions, where, "b_higher", True),
        )
        if not a_hi and not b_hi:
            raise ValueError(f"{where}: name the dimensions a or b should win (a_higher, b_higher)")
        if set(a_hi) & set(b_hi):
            raise ValueError(f"{where}: {sorted(set(a_hi) & set(b_hi))} cannot favour both replies")
        out.append(
            TradeOff(
                sid,
                row["trade"],
                _text(row, "prompt", where),
                _text(row, "a", where),
                _text(row, "b", where),
                a_hi,
                b_hi,
                row["prefer"],
            )
        )
    return out


def load_counterfactuals(path: str | Path, dimensions: Sequence[str]) -> list[Counterfactual]:
    """The counterfactual queries in `path` (YAML: id, change, dimension, direction up|down, prompt, reply,
    changed)."""
    out = []
    for where, row, cid in _entries(
        Path(path), "counterfactuals", {"id", "change", "dimension", "direction", "prompt", "reply", "changed"}
    ):
        (dim,) = _dims(row.get("dimension"), dimensions, where, "dimension")[:1]
        if row.get("direction") not in ("up", "down"):
            raise ValueError(
                f"{where}: direction is {row.get('direction')!r}; write up or down (how {dim} should "
                "move from reply to changed)"
            )
        reply, changed = _text(row, "reply", where), _text(row, "changed", where)
        if reply == changed:
            raise ValueError(f"{where}: reply and changed are the same text")
        out.append(
            Counterfactual(
                cid,
                _text(row, "change", where),
                dim,
                1 if row["direction"] == "up" else -1,
                _text(row, "prompt", where),
                reply,
                changed,
            )
        )
    return out


# --- trade-offs -------------------------------------------------------------------------------------


def tradeoff_results(scorer: Any, scenarios: Sequence[TradeOff]) -> pd.DataFrame:
    """Per scenario: the scalar gap (a - b), the reply it prefers and whether that is the written side,
    each dimension's gap, and whether every named dimension took its side."""
    dims = list(scorer.dimensions)
    prompts = [s.prompt for s in scenarios]
    ra, rb = both_sides(scorer, prompts, [s.a for s in scenarios], [s.b for s in scenarios])
    gaps = np.asarray(ra["vector"]) - np.asarray(rb["vector"])
    rows = []
    for i, s in enumerate(scenarios):
        gap = float(ra["scalar"][i] - rb["scalar"][i])
        choice = "a" if gap > 0 else "b"
        sides = [gaps[i, dims.index(d)] > 0 for d in s.a_higher] + [gaps[i, dims.index(d)] < 0 for d in s.b_higher]
        rows.append(
            {
                "id": s.id,
                "trade": s.trade,
                "prompt": s.prompt,
                "scalar_gap": gap,
                "choice": choice,
                "expected": s.prefer,
                "as_expected": choice == s.prefer,
                "dimensions_as_expected": bool(all(sides)),
                **{f"gap_{d}": float(gaps[i, j]) for j, d in enumerate(dims)},
            }
        )
    return pd.DataFrame(rows)


def flipped(today: pd.DataFrame, before: pd.DataFrame | None) -> list[str]:
    """The scenarios whose choice differs from the earlier version's (the same id): regressions when the
    earlier choice was the expected one, fixes otherwise (both are listed; `regressions` keeps the first)."""
    if before is None or not len(before):
        return []
    old = dict(zip(before["id"], before["choice"]))
    return [i for i, c in zip(today["id"], today["choice"]) if i in old and old[i] != c]


def regressions(today: pd.DataFrame, before: pd.DataFrame | None) -> list[str]:
    """Scenarios the earlier version chose as expected and this one does not."""
    if before is None or not len(before):
        return []
    was = dict(zip(before["id"], before["as_expected"]))
    return [i for i, ok in zip(today["id"], today["as_expected"]) if was.get(i) and not ok]


# --- adversarial consistency ------------------------------------------------------------------------

SYNONYMS = {
    "big": "large",
    "help": "assist",
    "maybe": "perhaps",
    "really": "truly",
    "start": "begin",
    "hard": "difficult",
    "talk": "speak",
    "quick": "fast",
    "happy": "glad",
    "show": "demonstrate",
    "buy": "purchase",
    "get": "obtain",
    "often": "frequently",
    "enough": "sufficient",
    "about": "roughly",
    "try": "attempt",
    "need": "require",
    "very": "quite",
}
CONTRACTIONS = {
    "do not": "don't",
    "it is": "it's",
    "i am": "i'm",
    "cannot": "can't",
    "you are": "you're",
    "that is": "that's",
    "does not": "doesn't",
    "is not": "isn't",
    "we are": "we're",
    "they are": "they're",
    "will not": "won't",
    "i have": "i've",
}
INSERTIONS = (
    "By the way, it is a Tuesday.",
    "Also, the sky was clear this morning.",
    "Incidentally, this reply is written in English.",
)
POLITE = "Hello, I hope you are well. {prompt} Thank you so much for your help."
RUDE = "Answer this and don't waste my time. {prompt} Hurry up."


def sentences(text: str) -> list[str]:
    """The text cut after each `.`, `!` or `?` that a space follows."""
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def _match_case(word: str, like: str) -> str:
    return word.capitalize() if like[:1].isupper() else word


def typos(text: str, rng: random.Random, share: float = 0.15) -> str:
    """Two neighbouring inner letters swapped in about `share` of the words of 4+ letters (at least one)."""
    words = text.split(" ")
    long_ = [i for i, w in enumerate(words) if sum(c.isalpha() for c in w) >= 4]
    if not long_:
        return text
    hit = [i for i in long_ if rng.random() < share] or [rng.choice(long_)]
    for i in hit:
        w = words[i]
        letters = [k for k in range(1, len(w) - 2) if w[k].isalpha() and w[k + 1].isalpha()]
        if letters:
            k = rng.choice(letters)
            words[i] = w[:k] + w[k + 1] + w[k] + w[k + 2 :]
    return " ".join(words)


def paraphrase(text: str, rng: random.Random | None = None) -> str:
    """Contractions made and unmade, and a few words swapped for synonyms: the meaning stays."""
    out = text
    for long_, short in CONTRACTIONS.items():  # contract what is long, expand what is short
        if re.search(rf"\b{long_}\b", out, re.IGNORECASE):
            out = re.sub(rf"\b{long_}\b", lambda m, s=short: _match_case(s, m.group(0)), out, flags=re.IGNORECASE)
        elif re.search(rf"\b{re.escape(short)}\b", out, re.IGNORECASE):
            out = re.sub(
                rf"\b{re.escape(short)}\b", lambda m, s=long_: _match_case(s, m.group(0)), out, flags=re.IGNORECASE
            )
    for word, other in SYNONYMS.items():
        out = re.sub(rf"\b{word}\b", lambda m, s=other: _match_case(s, m.group(0)), out, flags=re.IGNORECASE)
    return out


def insertion(text: str, rng: random.Random) -> str:
    """An irrelevant sentence after the first sentence (or at the end)."""
    parts, extra = sentences(text), rng.choice(INSERTIONS)
    return " ".join(parts[:1] + [extra] + parts[1:])


def reorder(text: str, rng: random.Random | None = None) -> str:
    """The sentences in reverse order (a one-sentence reply is unchanged)."""
    return " ".join(reversed(sentences(text)))


REPLY_REWRITES: dict[str, Callable[[str, random.Random], str]] = {
    "typos": typos,
    "paraphrase": paraphrase,
    "insertion": insertion,
    "reorder": reorder,
}
PROMPT_FRAMES = {"polite_frame": POLITE, "rude_frame": RUDE}
PERTURBATIONS = (*REPLY_REWRITES, *PROMPT_FRAMES)


def rewrite(name: str, prompt: str, reply: str, rng: random.Random) -> tuple[str, str]:
    """(prompt, reply) after the perturbation `name`: a frame changes the message, a rewrite the reply."""
    if name in PROMPT_FRAMES:
        return PROMPT_FRAMES[name].format(prompt=prompt), reply
    return prompt, REPLY_REWRITES[name](reply, rng)


def both_sides(
    scorer: Any, prompts: Sequence[str], a: Sequence[str], b: Sequence[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`scorer.raw_scores` of two replies to each prompt, side a then side b."""
    return scorer.raw_scores(list(prompts), list(a)), scorer.raw_scores(list(prompts), list(b))


def adversarial(
    scorer: Any,
    prompts: Sequence[str],
    better: Sequence[str],
    worse: Sequence[str],
    seed: int,
    perturbations: Sequence[str] = PERTURBATIONS,
) -> pd.DataFrame:
    """Per perturbation: the pairs it changed, the share whose order (by the scalar) flipped, and the mean
    and largest |shift| of a reply's scalar. A rewrite is applied to both replies of a pair (an insertion
    the same sentence); a frame to the message. Pairs a rewrite leaves unchanged are not counted."""
    unknown = sorted(set(perturbations) - set(PERTURBATIONS))
    if unknown:
        raise ValueError(f"unknown perturbations {unknown}; choose from {', '.join(PERTURBATIONS)}")
    n = len(prompts)
    base_a, base_b = (np.asarray(r["scalar"], dtype=np.float64) for r in both_sides(scorer, prompts, better, worse))
    rows = []
    for name in perturbations:
        rng = random.Random(f"{seed}:{name}")
        p2, a2, b2 = [], [], []
        for p, a, b in zip(prompts, better, worse):
            state = rng.getstate()
            pa, ra = rewrite(name, p, a, rng)
            rng.setstate(state)  # the same draw for both replies (the same inserted sentence)
            _, rb = rewrite(name, p, b, rng)
            p2.append(pa), a2.append(ra), b2.append(rb)
        keep = [i for i in range(n) if (p2[i], a2[i], b2[i]) != (prompts[i], better[i], worse[i])]
        if not keep:
            rows.append(
                {
                    "perturbation": name,
                    "pairs": 0,
                    "flip_rate": None,
                    "mean_shift": None,
                    "max_shift": None,
                    "example": None,
                }
            )
            continue
        pa = [p2[i] for i in keep]
        na = np.asarray(scorer.raw_scores(pa, [a2[i] for i in keep])["scalar"], dtype=np.float64)
        nb = np.asarray(scorer.raw_scores(pa, [b2[i] for i in keep])["scalar"], dtype=np.float64)
        oa, ob = base_a[keep], base_b[keep]
        flips = np.sign(na - nb) != np.sign(oa - ob)
        shifts = np.abs(np.concatenate([na - oa, nb - ob]))
        first = keep[0]
        rows.append(
            {
                "perturbation": name,
                "pairs": len(keep),
                "flip_rate": float(flips.mean()),
                "mean_shift": float(shifts.mean()),
                "max_shift": float(shifts.max()),
                "example": {"prompt": p2[first], "better": a2[first], "worse": b2[first]},
            }
        )
    return pd.DataFrame(rows)


# --- counterfactuals --------------------------------------------------------------------------------


def counterfactual_results(scorer: Any, items: Sequence[Counterfactual]) -> pd.DataFrame:
    """Per query: the named dimension's change (changed - reply), whether it moved the named way, whether
    it moved more than every other dimension, and the others' mean |change|."""
    dims = list(scorer.dimensions)
    prompts = [c.prompt for c in items]
    before, after = both_sides(scorer, prompts, [c.reply for c in items], [c.changed for c in items])
    delta = np.asarray(after["vector"]) - np.asarray(before["vector"])
    rows = []
    for i, c in enumerate(items):
        j = dims.index(c.dimension)
        others = np.abs(np.delete(delta[i], j))
        rows.append(
            {
                "id": c.id,
                "change": c.change,
                "dimension": c.dimension,
                "direction": "up" if c.direction > 0 else "down",
                "moved": float(delta[i, j]),
                "right_way": bool(delta[i, j] * c.direction > 0),
                "largest": bool(abs(delta[i, j]) > (others.max() if len(others) else 0.0)),
                "others_mean_abs": float(others.mean()) if len(others) else 0.0,
                "scalar_moved": float(after["scalar"][i] - before["scalar"][i]),
                **{f"delta_{d}": float(delta[i, k]) for k, d in enumerate(dims)},
            }
        )
    return pd.DataFrame(rows)


# --- attribution ------------------------------------------------------------------------------------


def spans(text: str, words: int) -> list[tuple[int, int]]:
    """Character spans of consecutive groups of `words` words (whitespace kept out)."""
    found = [m.span() for m in re.finditer(r"\S+", text)]
    return [(found[i][0], found[min(i + words, len(found)) - 1][1]) for i in range(0, len(found), words)]


def occlusion(scorer: Any, prompt: str, reply: str, words: int = 1) -> pd.DataFrame:
    """Each span of `words` words of `reply`, and per dimension (and the scalar) how much the full reply
    scores above the reply without it: positive, the span raises that output. Without its only span a reply
    is empty, which scores 0 (the middle of every output's range)."""
    if not reply.strip():
        raise ValueError("attribution needs a non-empty reply")
    cuts = spans(reply, max(1, int(words)))
    variants = [reply] + [re.sub(r"\s{2,}", " ", (reply[:a] + reply[b:]).strip()) for a, b in cuts]
    # a reply that is one span leaves nothing to score without it: nothing scores 0, the middle of every range
    scored = [i for i, v in enumerate(variants) if v]
    raw = scorer.raw_scores([prompt] * len(scored), [variants[i] for i in scored])
    dims = list(scorer.dimensions)
    vec, scal = np.zeros((len(variants), len(dims))), np.zeros(len(variants))
    vec[scored], scal[scored] = np.asarray(raw["vector"]), np.asarray(raw["scalar"])
    rows = [
        {
            "start": a,
            "end": b,
            "text": reply[a:b],
            "scalar": float(scal[0] - scal[k + 1]),
            **{d: float(vec[0, j] - vec[k + 1, j]) for j, d in enumerate(dims)},
        }
        for k, (a, b) in enumerate(cuts)
    ]
    return pd.DataFrame(rows)


def attribution_html(
    prompt: str, reply: str, table: pd.DataFrame, dimensions: Sequence[str], title: str = "Attribution"
) -> str:
    """One highlighted copy of the reply per output (the scalar, then each dimension): green raises it,
    red lowers it, the shade by the span's share of the largest |attribution| of that output."""
    blocks = []
    for out in ["scalar", *dimensions]:
        top = float(table[out].abs().max()) or 1.0
        parts, at = [], 0
        for row in table.itertuples():
            parts.append(html.escape(reply[at : row.start]))
            v = getattr(row, out) if out != "scalar" else row.scalar
            alpha = min(1.0, abs(v) / top)
            colour = f"rgba(47,158,68,{alpha:.2f})" if v > 0 else f"rgba(224,49,49,{alpha:.2f})"
            parts.append(
                f'<span class="span" style="background:{colour}" title="{out} {v:+.4f}">{html.escape(row.text)}</span>'
            )
            at = row.end
        parts.append(html.escape(reply[at:]))
        blocks.append(f'<div class="output"><h3>{html.escape(out)}</h3><p>{"".join(parts)}</p></div>')
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>" + html.escape(title) + "</title><style>"
        "body{font-family:system-ui,sans-serif;max-width:60rem;margin:1rem auto;color:#212529}"
        ".span{border-radius:3px;padding:0 1px}h3{margin:.8rem 0 "
        ".2rem;font-size:.95rem}.prompt{color:#495057}</style></head><body>"
        f"<h2>{html.escape(title)}</h2><p class='prompt'><b>Message:</b> {html.escape(prompt)}</p>"
        "<p>Each word group left out in turn (occlusion): green raises the output, red lowers it; hover "
        "for the figure.</p>" + "".join(blocks) + "</body></html>"
    )


# --- the manifold's shape ---------------------------------------------------------------------------


def pca(vectors: np.ndarray, components: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(coordinates (n, k), explained variance ratio (k,)) of the centred vectors."""
    x = np.asarray(vectors, dtype=np.float64)
    if x.ndim != 2 or len(x) < 2:
        raise ValueError(f"PCA needs at least 2 vectors, got shape {x.shape}")
    x = x - x.mean(0)
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    var = s**2
    k = min(components, vt.shape[0])
    return x @ vt[:k].T, (var[:k] / var.sum()) if var.sum() > 0 else np.zeros(k)


def correlations(vectors: np.ndarray, dimensions: Sequence[str]) -> pd.DataFrame:
    """Pearson correlation of every pair of dimensions over the vectors (NaN where one is constant)."""
    x = np.asarray(vectors, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.corrcoef(x, rowvar=False)
    return pd.DataFrame(c, index=list(dimensions), columns=list(dimensions))


def collisions(agreement: np.ndarray, dimensions: Sequence[str]) -> list[dict[str, Any]]:
    """Pairs of dimensions whose reward gradients point against each other (GDA < 0), most
    opposed first."""
    out = [
        {"a": dimensions[i], "b": dimensions[j], "gda": float(agreement[i, j])}
        for i in range(len(dimensions))
        for j in range(i + 1, len(dimensions))
        if agreement[i, j] < 0
    ]
    return sorted(out, key=lambda r: r["gda"])


def plot_manifold_map(
    coords: np.ndarray,
    explained: np.ndarray,
    labels: Sequence[str],
    path: Path,
    title: str,
    chosen: Sequence[bool | None] | None = None,
) -> Path:
    """The replies' vectors on their first two principal components, coloured by `labels` (e.g. category);
    with `chosen`, people's chosen replies drawn as filled circles and their rejected ones as crosses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    names = sorted(set(labels))
    cmap = plt.get_cmap("tab10")
    y = coords[:, 1] if coords.shape[1] > 1 else np.zeros(len(coords))
    for k, name in enumerate(names):
        idx = [i for i, lab in enumerate(labels) if lab == name]
        ax.scatter(coords[idx, 0], y[idx], s=18, color=cmap(k % 10), label=name, alpha=0.75)
    if chosen is not None:
        for flag, marker in ((True, "o"), (False, "x")):
            idx = [i for i, c in enumerate(chosen) if c is flag]
            if idx:
                style = (
                    {"facecolors": "none", "edgecolors": "k"} if flag else {"color": "k"}
                )  # an "x" has no face to fill
                ax.scatter(
                    coords[idx, 0],
                    y[idx],
                    s=60,
                    marker=marker,
                    label=f"people {'chose' if flag else 'rejected'}",
                    **style,
                )
    ax.set_xlabel(f"PC1 ({explained[0]:.0%} of the variance)")
    ax.set_ylabel(f"PC2 ({explained[1]:.0%})" if len(explained) > 1 else "")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
