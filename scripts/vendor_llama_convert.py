"""Install llama.cpp's own GGUF converters (`convert_hf_to_gguf.py`, `convert_lora_to_gguf.py` and their `conversion/`
package) from the llama-cpp-python source package on the package registry, checked against its pinned sha256, into
`.venv/share/llama.cpp/`. `hominem export --gguf` and `--gguf-lora` run them. Run by `make install`; nothing is
fetched at run time.

    .venv/bin/python scripts/vendor_llama_convert.py [--check]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"  # its converters run with the gguf-py of the same llama.cpp, shipped beside them
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
KEEP = ("convert_hf_to_gguf.py", "convert_lora_to_gguf.py", "conversion/", "gguf-py/gguf/", "LICENSE")
TARGET = Path(sys.prefix) / "share" / "llama.cpp"
STAMP = TARGET / ".installed.json"


def installed() -> bool:
    try:
        return json.loads(STAMP.read_text()) == {
            "package": PACKAGE,
            "version": VERSION,
            "sha256": SHA256,
            "keep": list(KEEP),
        }
    except (OSError, ValueError):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="Exit 1 unless the pinned converters are installed.")
    args = parser.parse_args()
    if installed():
        return
    if args.check:
        raise SystemExit(f"llama.cpp's converters are not in {TARGET}; run make install")
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"{PACKAGE}=={VERSION}",
                "-d",
                tmp,
            ],
            capture_output=True,
            text=True,
        )
        [sdist] = list(Path(tmp).glob("*.tar.gz")) or [None]
        if done.returncode or sdist is None:
            raise SystemExit(
                f"could not download {PACKAGE}=={VERSION} ({done.stderr.strip()[-300:]}); `hominem export --gguf` "
                "needs llama.cpp's converters from it. Run `make install` again when the package registry is reachable"
            )
        got = hashlib.sha256(sdist.read_bytes()).hexdigest()
        if got != SHA256:
            raise SystemExit(f"{sdist.name} does not match its pinned sha256 ({SHA256}, got {got}); not installed")
        prefix = f"{PACKAGE.replace('-', '_')}-{VERSION}/vendor/llama.cpp/"
        TARGET.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                name = member.name.removeprefix(prefix)
                if member.isfile() and member.name.startswith(prefix) and name.startswith(KEEP):
                    member.name = name
                    tar.extract(member, TARGET, filter="data")
    STAMP.write_text(json.dumps({"package": PACKAGE, "version": VERSION, "sha256": SHA256, "keep": list(KEEP)}))
    print(f"llama.cpp's GGUF converters ({PACKAGE} {VERSION}) -> {TARGET}")


if __name__ == "__main__":
    main()
