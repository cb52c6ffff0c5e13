"""A trained summarizer as a folder that loads without sumrl's run folders and uploads to the Hugging Face hub as it
is: `model.safetensors` (the weights), `config.json` (the model's class and settings, how its data read text, the
decoder its run was tested with), `vocab.txt` (one word a line, in id order) and `README.md` (a model card).
`load_summarizer` reads it (or a checkpoint) for `sumrl-summarize --checkpoint <folder>`;
`huggingface_hub.upload_folder(folder_path=<folder>, repo_id=...)` uploads it."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from models.pointer_generator import PointerGenerator, PointerGeneratorConfig
from models.text.vocab import Vocabulary
from trainer.checkpoints import CheckpointError, checkpoint_info, data_reading, load_weights

FILES = ("model.safetensors", "config.json", "vocab.txt", "README.md")
FORMAT = "sumrl-summarizer/1"  # config.json's `format`: what `exported_info` reads
SUMMARIZER = f"{PointerGenerator.__module__}.{PointerGenerator.__qualname__}"


def export_summarizer(checkpoint: Path, folder: Path) -> dict[str, Any]:
    """Writes `checkpoint`'s model as an exported folder, whole or not at all (built beside it, then renamed into
    place); the run's config.yaml and results.json, where they sit beside its checkpoints, fill the model card.
    Returns config.json's contents."""
    info = checkpoint_info(checkpoint)
    if info.get("stage") not in ("mle", "mixed"):
        raise CheckpointError(f"checkpoint {checkpoint} is not a summarizer's (its stage is {info.get('stage')!r})")
    run = Path(checkpoint).expanduser().resolve().parent.parent
    settings = OmegaConf.to_container(OmegaConf.load(run / "config.yaml")) if (run / "config.yaml").is_file() else {}
    results = json.loads((run / "results.json").read_text()) if (run / "results.json").is_file() else {}
    config = {"format": FORMAT, "model_class": info["model_class"], "model_config": info["model_config"],
              "stage": info["stage"], "reading": info["reading"], "decoding": decoding_of(settings),
              "trained": {"data": settings.get("data", {}).get("name"), "run": settings.get("run_name"),
                          "seed": settings.get("seed"), "row": settings.get("table", {}).get("row")},
              "test": {k: v for k, v in results.items() if not isinstance(v, dict)}}
    folder = Path(folder).expanduser().resolve()
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        weights = {k.removeprefix("model."): v.contiguous() for k, v in info["state_dict"].items()
                   if k.startswith("model.")}
        save_file(weights, building / "model.safetensors", metadata={"format": "pt"})
        (building / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (building / "vocab.txt").write_text("".join(f"{word}\n" for word in info["vocab"]), encoding="utf-8")
        (building / "README.md").write_text(model_card(config, folder.name))
        if folder.exists():
            shutil.rmtree(folder)
        building.rename(folder)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return config


def decoding_of(settings: dict[str, Any]) -> dict[str, Any] | None:
    """The beam its run was tested with (`module.beam`), as sumrl-summarize's flags name it."""
    beam = settings.get("module", {}).get("beam")
    if not beam:
        return None
    processors = beam.get("processors") or {}
    return {"beam_size": beam.get("beam_size"), "min_length": (processors.get("min_length") or {}).get("min_len", 0),
            "block_trigrams": "block_trigrams" in processors, "length_penalty": beam.get("length_penalty", 1.0)}


def model_card(config: dict[str, Any], name: str) -> str:
    """README.md: the hub's metadata header, what the model is, its test scores and how to use it."""
    trained, decoding, test = config["trained"], config["decoding"], config["test"]
    flags = "" if not decoding else (f" --beam-size {decoding['beam_size']} --min-length {decoding['min_length']}"
                                     f"{' --block-trigrams' * decoding['block_trigrams']}")
    scores = "".join(f"| {key} | {value:.2f} |\n" for key, value in test.items() if isinstance(value, float))
    size = config["model_config"]
    return (f"---\nlibrary_name: sumrl\npipeline_tag: summarization\nlanguage: en\n"
            f"tags: [summarization, pointer-generator, reinforcement-learning, sumrl]\n---\n\n"
            f"# {name}\n\nA pointer-generator summarizer ({config['model_class']}, embeddings {size.get('emb_dim')}, "
            f"hidden {size.get('hidden_dim')}, vocabulary {size.get('vocab_size')}) trained with sumrl: "
            f"{trained.get('row') or config['stage']}, data `{trained.get('data')}`, seed {trained.get('seed')}.\n\n"
            + (f"## Test scores\n\n{test.get('n')} test articles, decoded{flags or ' as its run tested'}.\n\n"
               f"| metric | score |\n|---|---:|\n{scores}\n" if scores else "")
            + "## Use\n\nArticles are raw text, one per line (or JSONL/CSV with an `article` field):\n\n"
            f"```bash\nsumrl-summarize --checkpoint {name} --input articles.txt --output summaries.jsonl{flags}\n```\n\n"
            "Files: `model.safetensors` (weights), `config.json` (model settings, how text is read, the test's "
            "decoder), `vocab.txt` (one word a line, in id order). Upload with "
            f"`huggingface_hub.upload_folder(folder_path=\"{name}\", repo_id=\"<you>/{name}\")`.\n")


def exported_info(folder: Path) -> dict[str, Any]:
    """An exported folder read as `checkpoint_info` reads a checkpoint (its `model.` weights, vocabulary, reading)."""
    folder = Path(folder).expanduser()
    missing = [name for name in FILES[:3] if not (folder / name).is_file()]
    if missing:
        raise CheckpointError(f"{folder} is not an exported summarizer (no {', '.join(missing)}): give a checkpoint "
                              "file, or a folder sumrl-export wrote")
    try:
        config = json.loads((folder / "config.json").read_text())
        weights = load_file(folder / "model.safetensors")
    except (json.JSONDecodeError, SafetensorError) as error:
        raise CheckpointError(f"{folder}: cannot read its files ({type(error).__name__}: "
                              f"{str(error).splitlines()[0]})") from None
    if config.get("format") != FORMAT:
        raise CheckpointError(f"{folder / 'config.json'}: format {config.get('format')!r}, not {FORMAT!r}")
    with (folder / "vocab.txt").open(encoding="utf-8", newline="") as lines:  # a word is never split
        vocab = lines.read().split("\n")[:-1]
    return {**config, "vocab": vocab, "state_dict": {f"model.{k}": v for k, v in weights.items()}}


def reading_of(info: dict[str, Any], path: Path) -> dict[str, Any]:
    """How the checkpoint's data read text: recorded in it, or, for a checkpoint from before sumrl recorded it, in the
    config.yaml of the run that wrote it (`<run>/checkpoints/<name>.ckpt`)."""
    if info.get("reading"):
        return info["reading"]
    config = path.resolve().parent.parent / "config.yaml"
    if not config.is_file():
        raise CheckpointError(f"checkpoint {path} does not record how its data was read (raw or pretokenized text), "
                              f"and its run's {config} is not there")
    data = OmegaConf.load(config).data
    return data_reading(data.pretokenized, data.max_source_len, data.max_target_len)


def load_summarizer(path: Path, device: torch.device) -> tuple[PointerGenerator, Vocabulary, dict[str, Any]]:
    """The pointer-generator of a checkpoint or of a folder `sumrl-export` wrote, in eval mode on `device`, its
    vocabulary and its data's reading."""
    info = exported_info(path) if path.is_dir() else checkpoint_info(path)
    if info.get("stage") not in ("mle", "mixed"):
        raise CheckpointError(f"checkpoint {path} is not a summarizer's (its stage is {info.get('stage')!r})")
    if info.get("model_class", SUMMARIZER) != SUMMARIZER:  # older checkpoints name no class: pointer-generators
        raise CheckpointError(f"checkpoint {path} holds a {info['model_class']}, whose frozen parts (a content "
                              "selector) are not in the checkpoint: sumrl-summarize decodes pointer-generators")
    model = PointerGenerator(PointerGeneratorConfig(**info["model_config"]))
    load_weights(model, info)
    return model.to(device).eval(), Vocabulary(info["vocab"]), reading_of(info, path)
