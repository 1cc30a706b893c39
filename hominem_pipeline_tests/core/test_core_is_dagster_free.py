import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "hominem_pipeline" / "core"


def test_core_never_imports_dagster():
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "dagster"]
    assert offenders == []
    assert len(list(CORE.glob("*.py"))) >= 10  # the check really looked at the core modules
