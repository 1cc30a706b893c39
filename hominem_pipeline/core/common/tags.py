"""The qualities a hand-written pair can test (its `tag`), and the reward dimension each one is about.

The contrast fixtures and the people's contrast pairs share one vocabulary: a tag is one of the reward
dimensions, or one of `EXTRA_TAGS`, the quirks a small judge has that people do not. A pair whose tag
has an own dimension (`own_dimension`) says which reply is better on that dimension: such people's
pairs supervise that dimension's head, and on such fixtures that dimension must prefer the better
reply. The other tags (fluency, trade-offs) say only which reply is better overall.
"""

from __future__ import annotations

from collections.abc import Sequence

EXTRA_TAGS = {
    "fluency": "gibberish, emoji strings or repetition against a plain sentence",
    "relevance": "a fluent reply to another message against a reply to this one",
    "truth": "a plain factual error against the fact",
    "tradeoff": "kindness against honesty, or the person's choice against their safety, done well against done badly",
}
# Extra tags that are about one dimension, by its meaning in config/hominem.yaml: a factual error is
# a failure of honesty and accuracy; a reply to another message does not stay on topic.
TAG_DIMENSIONS = {"truth": "epistemic_integrity", "relevance": "narrative_alignment"}


def own_dimension(tag: str | None, dimensions: Sequence[str]) -> str | None:
    """The dimension a pair tagged `tag` is about: the tag itself when it names a dimension, the
    dimension of an extra tag (`TAG_DIMENSIONS`, when it is configured), else None (overall only)."""
    if not tag:
        return None
    if tag in dimensions:
        return tag
    mapped = TAG_DIMENSIONS.get(tag)
    return mapped if mapped in dimensions else None
