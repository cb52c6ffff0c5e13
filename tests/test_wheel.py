"""sumrl as a user installs it: a wheel built from this tree, installed (not editable) into a fresh venv, whose console
commands train, score and tabulate from a directory outside the clone, with a reward of the user's own."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from venvs import venv_seeing_this_python

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("pyproject.toml", "README.md", "trainer", "models", "rewards", "evaluation", "scripts", "conf",
           "hydra_plugins")
TINY = ["experiment=demo_grid", "threads=1", "data.train.n=200", "data.val_sample_size=8", "data.test_size=16"]

# A reward of the user's own: one class in their module, one YAML in their config folder.
USER_REWARD = '''
from rewards.base import Reward


class LongerIsBetter(Reward):
    name, needs_reference = "longer", False

    def __call__(self, inputs):
        return (inputs.hyp_lens.float() / 20).clamp(max=1.0)
'''


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory) -> Path:
    """The venv's bin/: a wheel of a copy of the tree (the build writes build/ beside its sources), installed without
    dependencies into a venv that sees the running interpreter's packages (no download of torch and the rest)."""
    tmp = tmp_path_factory.mktemp("wheel")
    (tmp / "src").mkdir()
    for name in SHIPPED:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, tmp / "src" / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, tmp / "src" / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp / "dist"), str(tmp / "src")], check=True)
    python = venv_seeing_this_python(tmp / "venv")
    wheel = next((tmp / "dist").glob("sumrl-*.whl"))
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)
    return tmp / "venv" / "bin"


def run(bin_dir: Path, command: str, *args: str, cwd: Path, **env: str) -> str:
    result = subprocess.run([str(bin_dir / command), *args], cwd=cwd, capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": "", **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_venv_sees_the_packages_of_a_venv_that_makes_it(tmp_path):
    """README command 2 in a user's virtualenv: the wheel's venv must see that virtualenv's packages, not the base
    interpreter's."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "outer")], check=True)
    outer = tmp_path / "outer" / "bin" / "python"
    outer_site = subprocess.run([str(outer), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                check=True, capture_output=True, text=True).stdout.strip()
    (Path(outer_site) / "only_in_the_outer_venv.py").write_text("WHERE = 'outer'\n")
    make = ("import sys; from pathlib import Path; from venvs import venv_seeing_this_python as v; "
            "print(v(Path(sys.argv[1])))")
    inner = subprocess.run([str(outer), "-c", make, str(tmp_path / "inner")], check=True, capture_output=True,
                           text=True, cwd=Path(__file__).parent).stdout.strip().splitlines()[-1]
    seen = subprocess.run([inner, "-c", "import only_in_the_outer_venv as m; print(m.WHERE)"], capture_output=True,
                          text=True, cwd=tmp_path)
    assert seen.stdout.strip() == "outer", seen.stderr[-500:]


@pytest.mark.slow
def test_the_installed_commands_train_score_and_tabulate_from_another_directory(bin_dir, tmp_path):
    site = run(bin_dir, "python", "-c", "import conf, trainer; print(trainer.__file__, conf.__file__)", cwd=tmp_path)
    assert str(ROOT) not in site and site.count(str(bin_dir.parent)) == 2  # the installed copy, configs included

    run(bin_dir, "sumrl-train", *TINY, "reward=mle", "mle_checkpoint=null", "stages.mle.steps=4",
        "stages.mle.val_every=2", "hydra.run.dir=mle", cwd=tmp_path)
    results = json.loads((tmp_path / "mle" / "results.json").read_text())
    assert results["n"] == 16 and 0 <= results["rougeL"] <= 100 and "sms" in results  # the demo corpus is built in

    (tmp_path / "articles.txt").write_text("officials in oslo declined to comment .\n\nthe mayor of madrid spoke .\n")
    run(bin_dir, "sumrl-summarize", "--checkpoint", "mle/checkpoints/best.ckpt", "--input", "articles.txt",
        "--output", "summaries.jsonl", "--beam-size", "2", cwd=tmp_path)
    summaries = [json.loads(line) for line in (tmp_path / "summaries.jsonl").read_text().splitlines()]
    assert [s["id"] for s in summaries] == ["1", "3"] and all(isinstance(s["summary"], str) for s in summaries)

    (tmp_path / "user" / "reward").mkdir(parents=True)
    (tmp_path / "user" / "mine.py").write_text(USER_REWARD)
    (tmp_path / "user" / "reward" / "longer.yaml").write_text("_target_: mine.LongerIsBetter\n")
    best = tmp_path / "mle" / "checkpoints" / "best.ckpt"
    run(bin_dir, "sumrl-train", "--config-dir", str(tmp_path / "user"), *TINY, "reward=longer",
        f"mle_checkpoint={best}", "stages.mixed.steps=2", "stages.mixed.val_every=2", "rl.samples=2",
        "hydra.run.dir=longer", cwd=tmp_path, PYTHONPATH=str(tmp_path / "user"))
    assert json.loads((tmp_path / "longer" / "results.json").read_text())["n"] == 16

    printed = run(bin_dir, "sumrl-score", "mle/summaries.jsonl", "--rewards", "rouge_l", "longer",
                  "--config-dir", "user", "-o", "scores.jsonl", cwd=tmp_path, PYTHONPATH=str(tmp_path / "user"))
    assert "| rouge_l | ROUGE-L (reward) | 16 |" in printed and "| longer | longer | 16 |" in printed
    scores = [json.loads(line) for line in (tmp_path / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 16 and all(0 <= s["rouge_l"] <= 1 and 0 <= s["longer"] <= 1 for s in scores)

    table = run(bin_dir, "sumrl-table4", "mle", "longer", "--metrics", "sms", "--resamples", "50", "--out", "table",
                cwd=tmp_path)
    assert (tmp_path / "table" / "table4.md").read_text().strip() == table.strip()
    assert "| Mixed w/ longer |" in table and "Difference from MLE+Pgen (no reward)" in table
