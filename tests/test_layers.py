"""Imports run one way, down the floors of the design card: models/text < models, rewards < trainer < evaluation <
scripts."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What each floor may import from sumrl (a prefix allows its subpackages); the most specific floor applies.
ALLOWED = {
    "models.text": ("models.text",),
    "models": ("models",),
    "rewards": ("rewards", "models.text"),
    "trainer": ("trainer", "models", "rewards"),
    "evaluation": ("evaluation", "trainer", "models", "rewards"),
    "scripts": ("scripts", "evaluation", "trainer", "models", "rewards", "conf"),
}
OURS = ("models", "rewards", "trainer", "evaluation", "scripts", "conf")


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def floor(module: str) -> str:
    return max((f for f in ALLOWED if within(module, f)), key=len)


def imported(source: str, module: str) -> list[tuple[int, str]]:
    """(line, module) of every import in `source`, function-level ones too; relative ones resolved from `module`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(module.split(".")[:-node.level] + ([base] if base else []))
            found.append((node.lineno, base))
    return found


def upward_imports(source: str, module: str) -> list[str]:
    """`line: name` of each import of sumrl code that `module`'s floor may not import."""
    allowed = ALLOWED[floor(module)]
    return [f"{line}: {name}" for line, name in imported(source, module)
            if name.split(".")[0] in OURS and not any(within(name, a) for a in allowed)]


def modules() -> list[tuple[str, Path]]:
    return [(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"), path)
            for top in ("models", "rewards", "trainer", "evaluation", "scripts") for path in sorted((ROOT / top).rglob("*.py"))]


@pytest.mark.parametrize("module,path", modules(), ids=[m for m, _ in modules()])
def test_no_module_imports_upward(module, path):
    assert upward_imports(path.read_text(encoding="utf-8"), module) == []


def test_an_upward_import_is_caught():
    source = "import torch\nfrom models.text.vocab import Vocabulary\n\ndef f():\n    from trainer.data import x\n"
    assert upward_imports(source, "models.pointer_generator") == ["5: trainer.data"]
    assert upward_imports("from rewards.rouge import RougeL", "models.decoding") == ["1: rewards.rouge"]
    assert upward_imports("from models.decoding import greedy", "models.text.batch") == ["1: models.decoding"]
    assert upward_imports("from .. import decoding", "models.text.batch") == ["1: models"]
    assert upward_imports("from rewards.rouge import RougeL", "trainer.module") == []


def edits_sys_path(source: str) -> list[int]:
    """Lines that read or change `sys.path`: an installed package's modules import each other without it."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
            and node.value.id == "sys"]


@pytest.mark.parametrize("module,path", modules(), ids=[m for m, _ in modules()])
def test_no_module_edits_sys_path(module, path):
    assert edits_sys_path(path.read_text(encoding="utf-8")) == []


def test_a_sys_path_edit_is_caught():
    assert edits_sys_path("import sys\nfrom pathlib import Path\nsys.path.insert(0, str(Path('.')))\n") == [3]
    assert edits_sys_path("import os\nos.path.join('a', 'b')\n") == []
