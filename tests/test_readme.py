"""The README's Extending example, run as printed: the reward's module, its YAML, the grid and Table 4."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def extending_blocks() -> tuple[str, str]:
    """The Python and the shell block of the README's "A reward" item, unindented."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Extending", 1)[1].split("- **A data source**")[0]
    python, shell = (re.search(rf"```{kind}\n(.*?)\n *```", section, re.S).group(1) for kind in ("python", "bash"))
    return (re.sub(r"(?m)^  ", "", python) + "\n", re.sub(r"(?m)^  ", "", shell) + "\n")


def console_commands(folder: Path) -> Path:
    """This tree's console commands ([project.scripts]) as scripts in `folder`, whichever copy of sumrl pip installed."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    folder.mkdir()
    for name, target in scripts.items():
        module, function = target.split(":")
        (folder / name).write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                                   f"from {module} import {function}\nsys.exit({function}())\n")
        (folder / name).chmod(0o755)
    return folder


@pytest.mark.slow
def test_the_extending_example_runs_as_printed(tmp_path):
    python, shell = extending_blocks()
    (tmp_path / "my_module.py").write_text(python)
    path = f"{console_commands(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run(["bash", "-e", "-c", shell], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PATH": path, "SUMRL_CACHE": str(tmp_path / "cache"),
                               "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| Mixed w/ Length |" in done.stdout and "Mixed w/ Length on Length: " in done.stdout
    # the start of the mixed run says what it trains on; the unpenalised reward is logged beside the penalised one
    assert "training reward length × the share of its summary's trigrams that are not repeats" in done.stdout
    examples = sorted((tmp_path / "multirun" / "length").glob("*/length/examples/step_*.jsonl"))
    rows = [json.loads(line) for path in examples for line in path.read_text().splitlines()]
    assert len(examples) == 3 and all(0 <= row["reward"] <= row["reward/unpenalized"] for row in rows)
