"""Self-critical mixed step vs MLE step at See et al. sizes, per reward, measured in one run, with where the time goes.

    python scripts/bench_rl.py [--device cpu|cuda] [--bf16] [--steps 3] [--warmup 3] [--rewards rouge_l wms sms s_wms]
                               [--set wms.embeddings.path=vectors.txt ...] [--eos-bias 7.6] [--qa-model DIR]
                               [--memory-steps 1000] [--batch-size 16] [--eager-decode] [--operators 20]

An untrained model (samples run to the 100-token limit, the worst case), batch 16 (`--batch-size`), sources of 400
tokens, targets of 100, hidden 256, embeddings 128, vocabulary 50k. One markdown row per step: its mean time
(forward, decodes, rewards, backward, Adam), the ratio to the MLE step, the seconds and share of each section
(encode; sample + greedy decode; reward; the teacher-forced pass over the references and the samples, or at
τ ≠ 1 (and in libraries before it) the samples' rescoring and the MLE pass apart; backward; optimizer;
other: the logged diagnostics), each timed with the device synchronized (`trainer.timing.StepTimer`), and the
hours one epoch over CNN/DM's 287,113 training pairs would take at that step time and batch.

`--eos-bias B` adds B to the untrained model's </s> logit, so that samples end, as a trained model's do (7.6: samples
of about 45 tokens; its greedy rows still run to 100). The QA rewards read with `--qa-model` (default: $SUMRL_QA_MODEL,
else ~/.cache/sumrl/cloze_qa, else the installed all-MiniLM-L6-v2 with an untrained QA head: the cloze model's network,
so its cost). The library measured is the one on PYTHONPATH, named in the output: to time other code with this script,
put its checkout first on PYTHONPATH.

On CUDA the decode replays each decoder step from a captured CUDA graph (`models.decoding.CapturedStep`);
`--eager-decode` times the eager loop instead.

`--operators N` then profiles one more MLE step and one mixed step with the first reward (`torch.profiler`) and prints
the N operators that take the most time (self time on the device: CUDA kernels, or the CPU's), with their calls: on a
GPU the launches a step makes, and where the host waits for the device (`cudaStreamSynchronize`, `aten::item`).

`--memory-steps N` then runs N mixed steps with the first reward, cycling the batches, and reports the
memory in use after each (CUDA allocated, or the process's resident set on CPU): the median and the
largest value of its first tenth (after the first step, which allocates Adam's state) and of its last tenth,
and the growth of the median (on a CPU glibc's trims dip the resident set now and then; a median is blind to
them, a mean is not). The figure is `--memory-figure`, the values beside it (the same name, `.json`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
from collections import defaultdict
from functools import partial
from pathlib import Path

import torch

import trainer
from bench_training import peak_memory_gib, read_examples, see_et_al_setup
from models import decoding
from models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from models.text.batch import collate
from models.text.vectors import minilm_path
from rewards.configs import compose_rewards
from scripts.cli import positive_int
from trainer.module import SummarizationModule
from trainer.objectives import objective_for
from trainer.timing import StepTimer
from trainer.schedules import Constant


SECTIONS = ("encode", "decode", "reward", "forced", "rescore", "mle", "backward", "optimizer")
HEADINGS = {"decode": "sample + greedy", "forced": "MLE + rescoring (one pass)", "rescore": "rescoring",
            "mle": "MLE pass"}
CNNDM_TRAIN_PAIRS = 287_113


def time_steps(module: SummarizationModule, batches: list, warmup: int, device: torch.device,
               bf16: bool = False) -> dict[str, float]:
    """Mean seconds per optimizer step over the steps after `warmup`: `step` in all, and in each of `SECTIONS`
    (`other`: the rest, mostly the step's logged diagnostics), each timed with the device synchronized; and
    `sample_length`, the samples' mean length in tokens."""
    optimizer = torch.optim.Adam(module.model.parameters(), lr=1e-5)  # small: the model stays untrained
    lengths: list[float] = []
    module.log = lambda name, value, **kwargs: lengths.append(float(value)) if name == "train/sample_length" else None
    totals: dict[str, float] = defaultdict(float)
    for i, batch in enumerate(batches):
        batch = batch.to(device)
        module.timer = timer = StepTimer(device)
        with timer("step"):
            with torch.autocast(device.type, torch.bfloat16, enabled=bf16):  # as trainer=gpu (bf16-mixed) trains
                loss = module.training_step(batch, i)
            optimizer.zero_grad(set_to_none=True)
            with timer("backward"):
                loss.backward()
            with timer("optimizer"):
                optimizer.step()
        if i >= warmup:
            for section, seconds in timer.seconds.items():
                totals[section] += seconds
    means = {section: seconds / (len(batches) - warmup) for section, seconds in totals.items()}
    return means | {"other": means["step"] - sum(means.get(s, 0.0) for s in SECTIONS),
                    "sample_length": statistics.mean(lengths) if lengths else float("nan")}


def breakdown_row(label: str, times: dict[str, float], mle_step: float, batch_size: int) -> str:
    step = times["step"]
    cells = [f"{times[s]:.2f} ({100 * times[s] / step:.0f}%)" if s in times else "-" for s in (*SECTIONS, "other")]
    epoch_hours = CNNDM_TRAIN_PAIRS / batch_size * step / 3600
    return (f"| {label} | {step:.2f} | {step / mle_step:.2f} | {' | '.join(cells)} | {epoch_hours:.1f} | "
            f"{times['sample_length']:.0f} |").replace("| nan |", "| - |")


def train_step(module: SummarizationModule, batch, optimizer: torch.optim.Optimizer, bf16: bool = False) -> None:
    """One optimizer step of `module` on `batch` (forward, backward, Adam), under bf16 autocast if asked."""
    with torch.autocast(batch.device.type, torch.bfloat16, enabled=bf16):  # as trainer=gpu (bf16-mixed) trains
        loss = module.training_step(batch, 0)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def operator_table(module: SummarizationModule, batch, device: torch.device, rows: int, bf16: bool = False) -> str:
    """`torch.profiler`'s table of one training step (forward, backward, Adam) of `module`, after one untimed step:
    its `rows` costliest operators by self time on the device."""
    from torch.profiler import ProfilerActivity, profile
    optimizer = torch.optim.Adam(module.model.parameters(), lr=1e-5)
    module.log = lambda *args, **kwargs: None
    train_step(module, batch, optimizer, bf16)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        train_step(module, batch, optimizer, bf16)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=rows)


def default_qa_model() -> str | None:
    """$SUMRL_QA_MODEL, else the cloze model where scripts/train_cloze_qa.py writes it, else its base network; None
    without the `qa` extra (then only a QA reward fails, saying what to install)."""
    trained = Path(os.environ.get("SUMRL_CACHE", "~/.cache/sumrl")).expanduser() / "cloze_qa"
    if "SUMRL_QA_MODEL" in os.environ or trained.exists():
        return os.environ.get("SUMRL_QA_MODEL", str(trained))
    try:
        return minilm_path()
    except ModuleNotFoundError:
        return None


def memory_in_use_gib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device) / 2**30
    with open("/proc/self/statm") as f:  # resident pages now (ru_maxrss is a peak, blind to a slow leak)
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def memory_over_steps(module: SummarizationModule, batches: list, steps: int, device: torch.device) -> list[float]:
    optimizer = torch.optim.Adam(module.model.parameters(), lr=1e-5)
    module.log = lambda *args, **kwargs: None
    used = []
    for i in range(steps):
        train_step(module, batches[i % len(batches)].to(device), optimizer)
        used.append(memory_in_use_gib(device))
    return used


def plot_memory(used: list[float], label: str, path: Path) -> None:
    from matplotlib.figure import Figure
    figure = Figure(figsize=(6, 3.2))
    axes = figure.subplots()
    axes.plot(range(1, len(used) + 1), used)
    axes.set(xlabel="mixed step", ylabel="memory in use (GiB)", title=label, ylim=(0, max(used) * 1.15))
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed steps per row: a CPU process page-faults its heap in over its first two")
    parser.add_argument("--rewards", nargs="+", default=["rouge_l", "wms", "sms", "s_wms"])
    parser.add_argument("--set", nargs="*", default=[], metavar="LABEL.KEY=VALUE", help="reward config overrides")
    parser.add_argument("--eos-bias", type=float, default=0.0, help="added to the untrained model's </s> logit")
    parser.add_argument("--qa-model", default=None, help="the QA rewards' model (a local directory or hub name)")
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--bf16", action="store_true", help="steps under bf16 autocast, as trainer=gpu trains")
    parser.add_argument("--eager-decode", action="store_true", help="on CUDA, decode without CUDA graphs")
    parser.add_argument("--memory-steps", type=int, default=0)
    parser.add_argument("--operators", type=int, default=0, metavar="N",
                        help="profile one MLE and one mixed step; print their N costliest operators")
    parser.add_argument("--memory-figure", type=Path, default=Path("docs/rl_memory.png"))
    args, device, vocab = see_et_al_setup(parser, steps=3)
    if args.eager_decode:
        decoding.CUDA_GRAPHS = False
    n = args.warmup + args.steps
    size = args.batch_size
    examples = list(read_examples(args.data, n * size))
    batches = [collate(examples[i * size:(i + 1) * size], vocab, 400, 100) for i in range(n)]
    model = PointerGenerator(PointerGeneratorConfig(vocab_size=len(vocab), emb_dim=128, hidden_dim=256)).to(device)
    with torch.no_grad():
        model.out_vocab.bias[model.config.eos_id] += args.eos_bias
    if qa_model := args.qa_model or default_qa_model():
        os.environ["SUMRL_QA_MODEL"] = qa_model
    rewards = compose_rewards(args.rewards, args.set)

    def module(reward=None) -> SummarizationModule:
        return SummarizationModule(model, vocab, optimizer=None,
                                   objective=partial(objective_for, reward, gamma=Constant(0.9984), rl_max_len=100)).to(device)

    print(f"library {Path(trainer.__file__).resolve().parents[1]}; batch {size}, source 400, target 100, hidden 256, "
          f"emb 128, vocab {len(vocab)}, {args.threads} threads, {args.device}{' bf16 autocast' * args.bf16}"
          f"{', eager decode' * (not decoding.CUDA_GRAPHS and device.type == 'cuda')}, "
          f"{args.host_memory}, "
          f"untrained model (</s> bias "
          f"{args.eos_bias}), mean of {args.steps} steps after {args.warmup} of warm-up; seconds per step (share of "
          f"the step); epoch: {CNNDM_TRAIN_PAIRS:,} CNN/DM pairs at this step time, in hours; sample: mean tokens")
    headings = [HEADINGS.get(s, s) for s in (*SECTIONS, "other")]
    print(f"| step | seconds | × MLE step | {' | '.join(headings)} | epoch (h) | sample |\n"
          f"|{'---|' * (len(headings) + 5)}")
    mle_times = time_steps(module(), batches, args.warmup, device, args.bf16)
    print(breakdown_row("MLE", mle_times, mle_times["step"], size), flush=True)
    for name, reward in rewards.items():
        print(breakdown_row(f"mixed, {name}", time_steps(module(reward), batches, args.warmup, device, args.bf16),
                            mle_times["step"], size), flush=True)
    print(f"peak memory {peak_memory_gib(device):.2f} GiB ({'CUDA max allocated' if device.type == 'cuda' else 'max RSS'})")
    if args.operators:
        name, reward = next(iter(rewards.items()))
        for label, profiled in (("MLE", module()), (f"mixed, {name}", module(reward))):
            print(f"\n{label} step, operators by self {'CUDA' if device.type == 'cuda' else 'CPU'} time:\n"
                  f"{operator_table(profiled, batches[0].to(device), device, args.operators, args.bf16)}", flush=True)
    if args.memory_steps:
        name, reward = next(iter(rewards.items()))
        used = memory_over_steps(module(reward), batches, args.memory_steps, device)
        tenth = max(len(used) // 10, 1)
        first, last = used[1:1 + tenth], used[-tenth:]  # step 1: Adam's state
        median_first, median_last = statistics.median(first), statistics.median(last)
        print(f"memory in use over {len(used)} mixed steps ({name}), GiB: first tenth median {median_first:.3f}, "
              f"largest {max(first):.3f}; last tenth median {median_last:.3f}, largest {max(last):.3f}; growth of "
              f"the median {median_last - median_first:+.3f} ({100 * (median_last / median_first - 1):+.1f}%)")
        label = f"{len(used)} mixed steps ({name}), {args.device}, batch {size}, See et al. sizes"
        plot_memory(used, label, args.memory_figure)
        values = args.memory_figure.with_suffix(".json")
        values.write_text(json.dumps({"label": label, "gib_after_step": used}))
        print(f"figure: {args.memory_figure}, values: {values}")


if __name__ == "__main__":
    main()
