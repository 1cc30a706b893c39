"""Install the browser libraries the service's pages use (`hominem_pipeline/serving/static/vendor.json`)
into `static/vendor/`: each package's tarball from the npm registry, checked against its pinned sha512
integrity, and only the files named there. Run by `make install`; nothing is fetched at run time.

    .venv/bin/python scripts/vendor_js.py [--check]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

STATIC = Path(__file__).resolve().parents[1] / "hominem_pipeline" / "serving" / "static"
VENDOR = STATIC / "vendor"
STAMP = VENDOR / ".installed.json"  # name -> integrity of what is installed


def fetch(url: str, tries: int = 3) -> bytes:
    for attempt in range(1, tries + 1):
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                return response.read()
        except OSError as exc:
            if attempt == tries:
                raise SystemExit(
                    f"could not fetch {url} ({exc}); the dashboard's charts need it. Run `make install` "
                    "again when the npm registry "
                    "is reachable, or put the files named in "
                    "hominem_pipeline/serving/static/vendor.json into static/vendor/ by hand"
                )
            time.sleep(2 * attempt)
    raise AssertionError("unreachable")


def check_integrity(data: bytes, integrity: str, url: str) -> None:
    algorithm, _, expected = integrity.partition("-")
    got = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if got != expected:
        raise SystemExit(
            f"{url} does not match its pinned integrity ({integrity}, got {algorithm}-{got}); not installed"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only say whether every library is installed (exit 1 if not)")
    args = ap.parse_args()
    wanted = json.loads((STATIC / "vendor.json").read_text())
    installed = json.loads(STAMP.read_text()) if STAMP.is_file() else {}
    todo = {
        n: p
        for n, p in wanted.items()
        if installed.get(n) != p["integrity"] or not all((VENDOR / f).is_file() for f in p["files"].values())
    }
    if args.check:
        if todo:
            sys.exit(f"not installed: {', '.join(todo)} (run make install)")
        return
    VENDOR.mkdir(parents=True, exist_ok=True)
    for name, package in todo.items():
        data = fetch(package["tarball"])
        check_integrity(data, package["integrity"], package["tarball"])
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member, target in package["files"].items():
                extracted = tar.extractfile(member)
                if extracted is None:
                    raise SystemExit(f"{package['tarball']} has no file {member}; fix {STATIC / 'vendor.json'}")
                (VENDOR / target).write_bytes(extracted.read())
        installed[name] = package["integrity"]
        STAMP.write_text(json.dumps(installed, indent=1) + "\n")
        print(f"installed {name} ({package['what']}) into {VENDOR}")


if __name__ == "__main__":
    main()
