r"""Bottom-up copying with an oracle selector: how far a perfect content selector would take a pointer-generator.

    python scripts/oracle_copy_mask.py <pgen run>/checkpoints/best.ckpt --out runs/oracle \
        experiment=cnndm_sample_grid

The mask is the selector's training labels (`models.bottom_up.selection_labels`), read from each test article's
reference: an upper bound for `model=bottom_up`, not a result. The test split (from the Hydra overrides given, as
the pointer-generator's run had them) is decoded with the run's beam settings; the output is a run directory
(`config.yaml`: the run name and how it was made; `summaries.jsonl`; `results.json`) that `scripts/table4.py`
compares with the others.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from models.bottom_up import selection_labels  # noqa: E402
from models.decoding import beam_search  # noqa: E402
from trainer.batch import Batch  # noqa: E402
from trainer.checkpoints import load_model_weights  # noqa: E402
from trainer.evaluate import as_text, evaluate  # noqa: E402
from trainer.vocab import split_at_sentence_ends  # noqa: E402


def oracle_mask(batch: Batch, weight: float) -> torch.Tensor:
    """[B, S]: `weight` on the source tokens the selector's labels mark, 0 elsewhere."""
    rows = [selection_labels(source, [t for sentence in reference for t in sentence])
            for source, reference in zip(batch.sources, batch.references)]
    width = batch.src.size(1)
    return torch.tensor([row + [0] * (width - len(row)) for row in rows], dtype=torch.float) * weight


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a pointer-generator checkpoint")
    parser.add_argument("--out", type=Path, required=True, help="the run directory to write")
    parser.add_argument("--renormalize", action="store_true", help="renormalise the masked attention (else × 2)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides that give the checkpoint's data and model")
    args = parser.parse_intermixed_args(argv)  # overrides may come before or after the options

    run_name = "bottom_up_oracle" + ("_renorm" if args.renormalize else "")
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = compose("train", overrides=[*args.overrides, "reward=mle", f"run_name={run_name}",
                                          f"output_dir={args.out}"])
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    data = instantiate(cfg.data)
    data.setup()
    model = instantiate(OmegaConf.merge(cfg.model, {"config": {"vocab_size": len(data.vocab)}}))
    load_model_weights(model, args.checkpoint, data.vocab)
    model.eval()
    rows = []
    for batch in data.test_dataloader():
        with torch.no_grad():
            enc = replace(model.encode(batch), copy_mask=oracle_mask(batch, 1.0 if args.renormalize else 2.0),
                          renormalize_copy=args.renormalize)
        decoded = beam_search(model, enc, **cfg.module.beam)
        for i, (ids, n) in enumerate(zip(decoded.ids.tolist(), decoded.lengths.tolist())):
            summary = split_at_sentence_ends(data.vocab.decode(ids[:n], batch.oovs[i]))
            rows.append((batch.ids[i], summary, batch.references[i]))
    means, _ = evaluate([r[1] for r in rows], [r[2] for r in rows])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "config.yaml").write_text(OmegaConf.to_yaml({"run_name": run_name, "checkpoint": args.checkpoint,
                                                              "overrides": args.overrides}))
    with (args.out / "summaries.jsonl").open("w", encoding="utf-8") as f:
        for id_, summary, reference in rows:
            summary_text, reference_text = as_text([summary, reference])
            f.write(json.dumps({"id": id_, "summary": summary_text, "reference": reference_text, "scores": {}})
                    + "\n")
    (args.out / "results.json").write_text(json.dumps({"n": len(rows), **means}, indent=2) + "\n")
    print(json.dumps({"n": len(rows), **{k: round(v, 2) for k, v in means.items()}}))


if __name__ == "__main__":
    main()
