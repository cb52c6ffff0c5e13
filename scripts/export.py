r"""Export a trained summarizer as a folder to share or upload to the Hugging Face hub: `model.safetensors`,
`config.json`, `vocab.txt` and a model card (`README.md`) with the run's data, reward and test scores.

    sumrl-export runs/…/<run>            my-summarizer    # the run's checkpoints/best.ckpt
    sumrl-export runs/…/checkpoints/last.ckpt my-summarizer
    sumrl-summarize --checkpoint my-summarizer --input articles.txt --output summaries.jsonl
    python -c "import huggingface_hub as h; h.upload_folder(folder_path='my-summarizer', repo_id='<you>/my-summarizer')"

The folder is written whole or not at all; an existing folder of that name is replaced only by `--force`.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from scripts.cli import InputError, command


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sumrl-export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path, help="a checkpoint file, or a run folder (its checkpoints/best.ckpt)")
    parser.add_argument("output", type=Path, help="the folder to write")
    parser.add_argument("--force", action="store_true", help="replace the output folder if it exists")
    args = parser.parse_args(argv)
    checkpoint = args.checkpoint / "checkpoints" / "best.ckpt" if args.checkpoint.is_dir() else args.checkpoint
    if args.output.exists() and not args.force:
        raise InputError(f"{args.output} exists: give a new folder, or --force to replace it")
    if args.output.exists() and not args.output.is_dir():
        raise InputError(f"{args.output} is a file: give a folder")
    from trainer.export import export_summarizer
    config = export_summarizer(checkpoint, args.output)
    print(f"exported {checkpoint} to {args.output}/ ({config['trained'].get('row') or config['stage']}): "
          "model.safetensors, config.json, vocab.txt, README.md")


cli = command(main)  # the console command: bad input is one line, not a traceback

if __name__ == "__main__":
    cli()
