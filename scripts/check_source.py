"""Source guard rails that no maintained linter covers; run by ``make test`` before pytest.

1. **Size ceiling**: no Python source file over 1,000 lines (environment data builders included), so
   every module stays readable in one sitting.
2. **Private names stay private**: no module imports another project module's private name
   (``from gym_envfactory.x import _y``) or reaches one through a module object (``x_mod._y``).  A
   name used across modules is a public seam and gets a public name and a docstring.

Exit status 1 with one line per finding (``path:line: message``), else 0.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CEILING = 1000
FOLDERS = ("gym_envfactory", "generators", "training", "ui", "recipes", "env_images", "tests", "bench", "scripts")
PROJECT = ("gym_envfactory", "generators", "training", "ui")
SKIP_PARTS = {"__pycache__", "_catalog", "build", ".venv"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _project_module(module: str | None, level: int) -> bool:
    return level > 0 or (module is not None and module.split(".")[0] in PROJECT)


def check_file(path: Path) -> list[str]:
    """Findings for one file (empty when clean)."""
    rel = path.relative_to(ROOT)
    text = path.read_text(encoding="utf-8")
    out = []
    n = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if n > CEILING:
        out.append(f"{rel}:1: {n} lines, over the {CEILING}-line ceiling: split it by responsibility")
    try:
        tree = ast.parse(text, filename=str(rel))
    except SyntaxError as exc:
        return [*out, f"{rel}:{exc.lineno}: syntax error: {exc.msg}"]
    modules: set[str] = set()  # local names bound to project modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and _project_module(node.module, node.level):
            for a in node.names:
                own_package = rel.name == "__init__.py" and node.module == ".".join(rel.parent.parts)
                if _private(a.name) and not own_package:  # a package may import its own private submodule
                    out.append(f"{rel}:{node.lineno}: imports private name {a.name!r} from "
                               f"{'.' * node.level}{node.module or ''}")
                else:
                    modules.add(a.asname or a.name)  # may be a submodule; attribute use checked below
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PROJECT:
                    modules.add(a.asname or a.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            chain = []
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in modules and base.id not in ("self", "cls"):
                # a module object (or a class imported from one) reaching a private name
                if base.id[:1].islower() or chain:
                    out.append(f"{rel}:{node.lineno}: reaches private name {node.attr!r} through {base.id!r}")
    return out


def main() -> int:
    """Check every Python file of the project; print findings; exit status 1 when there are any."""
    findings: list[str] = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if SKIP_PARTS.isdisjoint(path.relative_to(ROOT).parts):
                findings.extend(check_file(path))
    for f in findings:
        print(f)
    print(f"check_source: {len(findings)} finding(s)", file=sys.stderr)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
