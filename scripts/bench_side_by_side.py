"""Two runs side by side at one thread each, against one run at two threads: which gets more work done per minute?

    python scripts/bench_side_by_side.py --steps 100 -- experiment=cnndm_sample_grid reward=mle mle_checkpoint=null
    python scripts/bench_side_by_side.py --steps 60 -- experiment=cnndm_sample_grid reward=sms mle_checkpoint=<ckpt>
    python scripts/bench_side_by_side.py --test <ckpt> --articles 400 -- experiment=cnndm_sample_grid reward=mle

Runs the training command given after `--` for `--steps` optimizer steps (one validation, at the end, on 8 articles;
no test), first alone at `threads=2`, then twice at once at `threads=1` (seeds 0 and 1), and reads each run's
training seconds from its validation curve (so start-up, data loading and the test are not counted). With `--test`,
it times instead a test of that checkpoint on the first `--articles` test articles (wall seconds of the whole run).
Prints the seconds per step (or per test) of each run and the ratio of work done per minute, side by side against
alone. The grids of `experiment=cnndm_sample_grid` run side by side when this ratio is above 1 (docs/RESULTS.md).
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.cli import positive_int

REPO = Path(__file__).resolve().parents[1]


def command(overrides: list[str], threads: int, seed: int, folder: Path, steps: int, test: str | None) -> list[str]:
    base = [sys.executable, "-m", "trainer.train", *overrides, f"threads={threads}", f"seed={seed}",
            f"hydra.run.dir={folder}"]
    if test:
        return base + ["train=false", f"init_from={test}", "mle_checkpoint=null"]
    stage = "mle" if "reward=mle" in overrides else "mixed"
    return base + [f"stages.{stage}.steps={steps}", f"stages.{stage}.val_every={steps}", "data.val_sample_size=8",
                   "validate_at_start=false", "test=false"]


def run_together(commands: list[list[str]], folders: list[Path], test: bool, steps: int) -> list[float]:
    """Start the commands at once; each one's seconds per step (training seconds from its validation curve), or,
    for a test, its wall seconds."""
    start = time.perf_counter()
    processes = [subprocess.Popen(c, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for c in commands]
    walls = []
    for process in processes:
        _, err = process.communicate()
        walls.append(time.perf_counter() - start)
        if process.returncode:
            raise SystemExit(f"bench_side_by_side: a run failed (exit {process.returncode}):\n{err[-2000:]}")
    if test:
        return walls
    return [float(list(csv.DictReader((f / "val_curve.csv").open()))[-1]["seconds"]) / steps for f in folders]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=positive_int, default=60)
    parser.add_argument("--test", metavar="CKPT", help="time tests of this checkpoint instead of training")
    parser.add_argument("--articles", type=positive_int, default=400, help="test articles (with --test)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of the run (after --)")
    args = parser.parse_args(argv)
    overrides = args.overrides + ([f"data.test_size={args.articles}"] if args.test else [])
    unit = "s per test" if args.test else "s per step"
    with tempfile.TemporaryDirectory() as tmp:
        alone = Path(tmp) / "alone"
        pair = [Path(tmp) / f"pair_{seed}" for seed in (0, 1)]
        [t2] = run_together([command(overrides, 2, 0, alone, args.steps, args.test)], [alone], bool(args.test),
                            args.steps)
        t1 = run_together([command(overrides, 1, seed, folder, args.steps, args.test)
                           for seed, folder in zip((0, 1), pair)], pair, bool(args.test), args.steps)
    ratio = 2 / max(t1) * t2  # work per second of the pair (until its slower run ends) over the single run's
    print(f"one run at 2 threads: {t2:.3f} {unit}")
    print(f"two runs at 1 thread side by side: {t1[0]:.3f} and {t1[1]:.3f} {unit}")
    print(f"work per minute, side by side / alone: {ratio:.2f}x")


if __name__ == "__main__":
    main()
