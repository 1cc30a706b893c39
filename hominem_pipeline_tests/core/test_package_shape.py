import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "hominem_pipeline" / "core"


def test_core_never_imports_dagster():
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "dagster"]
    assert offenders == []
    assert len(list(CORE.rglob("*.py"))) >= 40  # the check really looked at the core modules


PACKAGE = CORE.parent
MAX_LINES = 600


def _graph() -> dict[str, set[str]]:
    from hominem_pipeline.core.pipeline.lineage import _imports, _module_file

    graph = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(("hominem_pipeline", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(
            ".__init__"
        )
        own = name + ".__init__" if path.name == "__init__.py" else name
        graph[name] = {
            m for m in _imports(path.read_text(), own) if _module_file(m, PACKAGE) is not None and m != name
        }
    return graph


def test_no_import_cycles_at_any_depth():
    """Function-level imports count too: a cycle there is one a refactor turns into an import error."""
    graph = _graph()
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []
    assert len(graph) > 40


def test_no_module_is_over_600_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_mlflow_telemetry_is_off_unless_the_user_turns_it_on():
    import os
    import subprocess
    import sys

    probe = (
        "import os, hominem_pipeline, mlflow.telemetry.utils as t; "
        "print(os.environ['MLFLOW_DISABLE_TELEMETRY'], t.MLFLOW_DISABLE_TELEMETRY.get())"
    )
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_DISABLE_TELEMETRY"}
    assert subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.split() == ["true", "True"]
    chosen = subprocess.run(
        [sys.executable, "-c", probe],
        env={**env, "MLFLOW_DISABLE_TELEMETRY": "false"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert chosen.stdout.split() == ["false", "False"]


MAX_FUNCTION_LINES, MAX_PARAMETERS = 80, 10


def test_no_function_is_over_80_lines_or_takes_more_than_10_parameters():
    """A function longer than a screen is several functions; more than ten parameters are settings that belong
    in a dataclass (as RewardSources, DualStart, GateSides, PairRules do)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                params -= 1 if a.args and a.args[0].arg in ("self", "cls") else 0
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES or params > MAX_PARAMETERS:
                    found.append(
                        f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}: {lines} lines, {params} params"
                    )
    assert found == []


def test_core_holds_packages_only():
    """core/ is packages by what they are (config, pipeline, lm, common, reward, ...); a loose module goes in one."""
    loose = sorted(p.name for p in CORE.glob("*.py") if p.name != "__init__.py")
    assert loose == []
    assert {"config", "pipeline", "lm", "common", "reward", "policy", "online"} <= {p.name for p in CORE.iterdir()}


def test_ruff_formats_and_lints_clean():
    """`make lint`: ruff format and ruff check (pyproject.toml's settings) find nothing in the package, the tests,
    the benchmarks and the scripts."""
    import subprocess
    import sys

    repo = PACKAGE.parent
    folders = ["hominem_pipeline", "hominem_pipeline_tests", "benchmarks", "scripts"]
    for command in (["format", "--check"], ["check"]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *command, *folders], cwd=repo, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_docs_stay_short_enough_to_read():
    """The README (at most 150 lines, none over 200 characters) starts with the two commands; ARCHITECTURE at most
    25 KB, BENCHMARKS at most 40 KB."""
    repo = PACKAGE.parent
    readme = (repo / "README.md").read_text().splitlines()
    assert len(readme) <= 150
    assert [n for n, line in enumerate(readme, 1) if len(line) > 200] == []
    assert any(line.startswith("make run") for line in readme[:6]) and any(
        line.startswith("make test") for line in readme[:6]
    )
    assert (repo / "docs" / "ARCHITECTURE.md").stat().st_size <= 25_000
    assert (repo / "docs" / "BENCHMARKS.md").stat().st_size <= 40_000
