"""Does the demo's Table 4 hold on any seed and CPU? Run the demo grid over seeds × thread counts, then count.

    python scripts/demo_robustness.py --seeds 0 1 2 3 4 --threads 1 --jobs 2 --out runs/robustness

RL trajectories are chaotic: one last-bit difference in a float reduction changes a sampled token, and the model
differs 80 steps later. Another thread count changes those reductions, so it stands in for another CPU. Each
(threads, seed) grid is README command 1 with `seed`, `threads` and its runs side by side (`--jobs`, the launcher's
`n_jobs`; the demo's 2) set, extra Hydra overrides after `--`, in its own sweep folder `<out>/t<threads>_s<seed>`,
followed by `scripts/table4.py` on it. Grids run side by side while their threads × jobs fit in `--cores`; a grid
whose table4.json exists is not run again, so an interrupted study resumes.

Prints, and writes to `<out>/robustness.md` and `robustness.json`: each grid's diagonal (each reward's difference
from MLE on its own metric, with its paired-bootstrap interval), whether all four are significant, the MLE start
the mixed runs began from (its step, and its greedy validation decodes' length and share of repeated trigrams: a
start that has not learned to stop shows there), and per reward the mean difference, the smallest lower bound and
the number of grids where it is significant.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from models.text.records import write_text
from trainer.tables import markdown_table

REPO = Path(__file__).resolve().parents[1]

REWARDS = ("rouge_l", "wms", "sms", "s_wms")


def grid_command(seed: int, threads: int, jobs: int, folder: Path, overrides: list[str]) -> str:
    train = [sys.executable, "-m", "trainer.train", "-m", "experiment=demo_grid",
             "reward=mle," + ",".join(REWARDS), f"seed={seed}", f"threads={threads}",
             f"hydra.launcher.n_jobs={jobs}", f"hydra.sweep.dir={folder}", *overrides]
    table4 = [sys.executable, str(REPO / "scripts" / "table4.py"), str(folder), "--out", str(folder)]
    return shlex.join(train) + " && " + shlex.join(table4)


def run_grids(grids: list[tuple[int, int]], jobs: int, out: Path, overrides: list[str], cores: int
              ) -> dict[tuple[int, int], float]:
    """Run each (threads, seed) grid not yet done, `jobs` runs side by side in each, as many grids at once as their
    threads fit in `cores`; their wall times in seconds (None for grids done before)."""
    pending = [g for g in grids if not (out / f"t{g[0]}_s{g[1]}" / "table4.json").exists()]
    running: dict[tuple[int, int], tuple[subprocess.Popen, float]] = {}
    seconds: dict[tuple[int, int], float] = {}
    while pending or running:
        for grid in list(pending):
            if jobs * (sum(t for t, _ in running) + grid[0]) <= cores or not running:
                threads, seed = grid
                folder = out / f"t{threads}_s{seed}"
                log = (out / f"t{threads}_s{seed}.log").open("w")
                print(f"demo_robustness: seed {seed}, {threads} thread(s) → {folder}", flush=True)
                process = subprocess.Popen(grid_command(seed, threads, jobs, folder, overrides), shell=True, cwd=REPO,
                                           stdout=log, stderr=subprocess.STDOUT)
                running[grid] = (process, time.perf_counter())
                pending.remove(grid)
        for grid, (process, start) in list(running.items()):
            if process.poll() is not None:
                del running[grid]
                seconds[grid] = time.perf_counter() - start
                if process.returncode:
                    raise SystemExit(f"demo_robustness: the grid t{grid[0]}_s{grid[1]} failed (exit "
                                     f"{process.returncode}); see {out / f't{grid[0]}_s{grid[1]}.log'}")
        time.sleep(1)
    return seconds


def diagonal(folder: Path) -> dict[str, dict]:
    """Each reward's interval on its own metric, as the grid's table4.json gives it."""
    return json.loads((folder / "table4.json").read_text())["diagonal"]


def mle_start(folder: Path, seed: int) -> dict[str, float] | None:
    """The kept MLE checkpoint's validation (its lowest loss): step, greedy tokens and repeated-trigram share."""
    path = folder / f"seed_{seed}" / "mle" / "val_curve.csv"
    if not path.exists():
        return None
    kept = min(csv.DictReader(path.open()), key=lambda point: float(point["val/loss"]))
    return {"step": int(kept["step"]), "tokens": float(kept["val/length"]),
            "repeated_trigrams": float(kept["val/repeated_trigrams"])}


def equal_length_significant(cell: dict) -> bool:
    """Whether a diagonal cell's difference at equal length excludes 0 (False for a table4 from before it had one)."""
    equal = cell.get("equal_length")
    return bool(equal and equal["significant"])


def report(grids: list[tuple[int, int]], out: Path, seconds: dict) -> tuple[str, dict]:
    cells = {f"t{t}_s{s}": diagonal(out / f"t{t}_s{s}") for t, s in grids}
    starts = {f"t{t}_s{s}": mle_start(out / f"t{t}_s{s}", s) for t, s in grids}
    names = {r: next(iter(cells.values()))[r]["row"] for r in REWARDS}  # table4's row of each reward
    table = []
    for (threads, seed), (name, row) in zip(grids, cells.items()):
        shown = [f"{row[r]['delta']:+.2f} [{row[r]['low']:+.2f}, {row[r]['high']:+.2f}]"
                 + ("*" if row[r]["significant"] else "") for r in REWARDS]
        wall = seconds.get((threads, seed))
        everywhere = all(row[r]["significant"] for r in REWARDS)
        at_equal_length = all(equal_length_significant(row[r]) for r in REWARDS)
        best = sum(row[r]["best_row"] for r in REWARDS)
        start = starts[name]
        table.append([str(threads), str(seed), *shown, "yes" if everywhere else "no",
                      "yes" if at_equal_length else "no", f"{best} of {len(REWARDS)}",
                      f"{start['step']}, {start['tokens']:.0f}, {start['repeated_trigrams']:.2f}" if start else "-",
                      f"{wall / 60:.1f}" if wall else "-"])
    lines = [markdown_table(["threads", "seed", *names.values(), "all 4", "all 4 at equal length", "best on own",
                             "MLE start: step, greedy tokens, repeats", "minutes"], table)]
    passed = sum(all(row[r]["significant"] for r in REWARDS) for row in cells.values())
    passed_equal = sum(all(equal_length_significant(row[r]) for r in REWARDS) for row in cells.values())
    summary = {r: {"mean_delta": sum(row[r]["delta"] for row in cells.values()) / len(cells),
                   "smallest_low": min(row[r]["low"] for row in cells.values()),
                   "largest_delta": max(row[r]["delta"] for row in cells.values()),
                   "smallest_delta": min(row[r]["delta"] for row in cells.values()),
                   "significant": sum(row[r]["significant"] for row in cells.values()),
                   "significant_at_equal_length": sum(equal_length_significant(row[r]) for row in cells.values()),
                   "best_row": sum(row[r]["best_row"] for row in cells.values())} for r in REWARDS}
    lines += ["", f"**{passed} of {len(cells)} grids** have all four diagonals significant (* = the 95% paired "
              f"bootstrap interval excludes 0); **{passed_equal} of {len(cells)}** at equal length (table4's "
              "length-controlled difference).", "",
              markdown_table(["reward, own metric", "mean Δ", "range of Δ", "smallest lower bound", "significant",
                              "at equal length", "best row on it"],
                             [[names[r], f"{v['mean_delta']:+.2f}", f"{v['smallest_delta']:+.2f} to "
                               f"{v['largest_delta']:+.2f}", f"{v['smallest_low']:+.2f}",
                               f"{v['significant']} of {len(cells)}",
                               f"{v['significant_at_equal_length']} of {len(cells)}", f"{v['best_row']} of {len(cells)}"]
                              for r, v in summary.items()])]
    return "\n".join(lines), {"grids": cells, "mle_starts": starts, "passed": passed,
                              "passed_at_equal_length": passed_equal, "total": len(cells),
                              "per_reward": summary}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", nargs="+", type=int, default=[1])
    parser.add_argument("--jobs", type=int, default=2, help="runs side by side within a grid (the demo's 2)")
    parser.add_argument("--out", type=Path, default=Path("runs/robustness"))
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                        help="grids run side by side while the sum of their threads × jobs fits in this")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every grid (after --)")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    grids = [(t, s) for t in sorted(args.threads) for s in args.seeds]
    seconds = run_grids(grids, args.jobs, out, args.overrides, args.cores)
    text, data = report(grids, out, seconds)
    print(text)
    write_text(out / "robustness.md", text + "\n")
    write_text(out / "robustness.json", json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
