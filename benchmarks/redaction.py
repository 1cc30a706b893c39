"""Redaction before a hosted teacher reads a served turn: the project's patterns (`core/online/events.redact`) against
presidio-analyzer and scrubadub, on a labelled set written here (personal data of seven kinds, and look-alikes that
must survive: dates, times, prices, versions, order numbers).

A personal string counts as caught when it is no longer in the output; a look-alike counts as harmed when it is no
longer there. presidio runs on its pattern recognisers over a blank spaCy pipeline: its name recogniser needs a spaCy
model (en_core_web_lg), which is not on the package registry and cannot be fetched here; scrubadub's names need
spaCy or Stanford models too.

    python -m venv /tmp/redact && /tmp/redact/bin/pip install presidio-analyzer scrubadub pydantic
    PYTHONPATH=. /tmp/redact/bin/python benchmarks/redaction.py

A library not installed is left out of the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable

# (text, [(kind, the personal string)]): kinds email, phone, card, ip, url, ssn, name
CASES: list[tuple[str, list[tuple[str, str]]]] = [
    ("Write to ana.lopez@example.org when you can.", [("email", "ana.lopez@example.org")]),
    ("my work mail is j.smith+hominem@mail.co.uk", [("email", "j.smith+hominem@mail.co.uk")]),
    ("Contact: BOB_99@uni-mainz.de (office)", [("email", "BOB_99@uni-mainz.de")]),
    ("Email me at first.last@sub.domain.io, thanks", [("email", "first.last@sub.domain.io")]),
    ("Call me at +1 415-555-0132 tonight.", [("phone", "415-555-0132")]),
    ("my number is (212) 555-0199", [("phone", "555-0199")]),
    ("UK mobile: +44 7700 900123", [("phone", "7700 900123")]),
    ("appelle-moi au 06 12 34 56 78", [("phone", "06 12 34 56 78")]),
    ("Ruf an: 030 1234567 ab 9 Uhr", [("phone", "030 1234567")]),
    ("text 555.867.5309 if late", [("phone", "555.867.5309")]),
    ("The card is 4111 1111 1111 1111, expiry soon.", [("card", "4111 1111 1111 1111")]),
    ("charge 5500-0000-0000-0004 please", [("card", "5500-0000-0000-0004")]),
    ("amex 378282246310005 is mine", [("card", "378282246310005")]),
    ("my server is at 192.168.0.12 and it is down", [("ip", "192.168.0.12")]),
    ("ssh into 10.0.0.254 as root", [("ip", "10.0.0.254")]),
    ("My SSN is 078-05-1120, is that safe?", [("ssn", "078-05-1120")]),
    ("see my blog at https://annas-notes.example.net/about", [("url", "annas-notes.example.net")]),
    ("My name is Ana Lopez and I live in Lisbon.", [("name", "Ana Lopez")]),
    ("I'm John Smith, the new teacher.", [("name", "John Smith")]),
    ("My sister Maria Garcia forgot my birthday.", [("name", "Maria Garcia")]),
    ("Dr. Wei Zhang said the results were fine.", [("name", "Wei Zhang")]),
    ("Tell Priya Patel I said hello.", [("name", "Priya Patel")]),
    ("mail ana@example.org or call 415-555-0101", [("email", "ana@example.org"), ("phone", "415-555-0101")]),
]
# text, the strings in it that must survive
LOOK_ALIKES: list[tuple[str, list[str]]] = [
    ("The meeting is on 2026-11-20 at 10:30.", ["2026-11-20", "10:30"]),
    ("It costs $1,299.99 with tax.", ["1,299.99"]),
    ("Upgrade Python from 3.11.4 to 3.12.1.", ["3.11.4", "3.12.1"]),
    ("Order number 4417-2231 shipped.", ["4417-2231"]),
    ("The war lasted from 1939 to 1945.", ["1939", "1945"]),
    ("Population: 8,336,817 people.", ["8,336,817"]),
    ("Room 101, floor 3, building 12.", ["Room 101"]),
    ("ISBN 978-0-306-40615-7 is the book.", ["978-0-306-40615-7"]),
    ("The ratio was 3:2 and the score 21-14.", ["3:2", "21-14"]),
    ("Version 1.2.3.4 of the firmware.", ["1.2.3.4"]),
    ("Paris is the capital of France.", ["Paris", "France"]),
    ("Kindness matters more than being right.", ["Kindness"]),
]


def project_redactor() -> Callable[[str], str]:
    from hominem_pipeline.core.online.events import redact

    return redact


def scrubadub_redactor() -> Callable[[str], str]:
    import scrubadub

    scrubber = scrubadub.Scrubber()
    return scrubber.clean


def presidio_redactor() -> Callable[[str], str]:
    import tempfile

    import spacy
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider

    blank = tempfile.mkdtemp() + "/blank_en"
    spacy.blank("en").to_disk(blank)
    provider = NlpEngineProvider(
        nlp_configuration={"nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": blank}]}
    )
    engine = AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=["en"])

    def clean(text: str) -> str:
        found = engine.analyze(text, language="en", score_threshold=0.3)
        for r in sorted(found, key=lambda r: r.start, reverse=True):
            text = text[: r.start] + f"[{r.entity_type.lower()}]" + text[r.end :]
        return text

    return clean


REDACTORS = {"patterns (project)": project_redactor, "scrubadub": scrubadub_redactor, "presidio": presidio_redactor}


def measure(clean: Callable[[str], str]) -> dict[str, object]:
    caught: dict[str, list[bool]] = defaultdict(list)
    started = time.perf_counter()
    for text, spans in CASES:
        out = clean(text)
        for kind, value in spans:
            caught[kind].append(value not in out)
    harmed = []
    for text, keep in LOOK_ALIKES:
        out = clean(text)
        harmed += [k for k in keep if k not in out]
    ms = (time.perf_counter() - started) * 1000 / (len(CASES) + len(LOOK_ALIKES))
    by_kind = {k: f"{sum(v)}/{len(v)}" for k, v in sorted(caught.items())}
    every = [x for k, v in caught.items() if k != "name" for x in v]
    return {
        "by_kind": by_kind,
        "caught_besides_names": f"{sum(every)}/{len(every)}",
        "names": by_kind.get("name"),
        "look_alikes_harmed": f"{len(harmed)}/{sum(len(k) for _, k in LOOK_ALIKES)}",
        "harmed": harmed,
        "ms_per_text": round(ms, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # presidio's tldextract warns that it cannot fetch the suffix list
    results = {}
    for name, make in REDACTORS.items():
        try:
            clean = make()
        except ImportError as exc:
            print(f"{name}: not installed ({exc.name}); left out")
            continue
        results[name] = measure(clean)
    kinds = sorted({k for r in results.values() for k in r["by_kind"]})
    print(f"{'redactor':20} " + " ".join(f"{k:>6}" for k in kinds) + "  look-alikes harmed  ms/text")
    for name, r in results.items():
        cells = " ".join(f"{r['by_kind'].get(k, '-'):>6}" for k in kinds)
        print(f"{name:20} {cells}  {r['look_alikes_harmed']:>18}  {r['ms_per_text']:>7}")
        if r["harmed"]:
            print(f"{'':20} harmed: {', '.join(r['harmed'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
