"""The transformers networks sumrl reads with (the QA rewards, LS-Score, the contextual content selector): one loader,
a local directory or a hub name."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from models.text.extras import optional


class PretrainedNotFound(ValueError):
    """A name that is neither a local model directory nor loadable from the hub."""


def load_pretrained(name: str, auto_class: str, what: str, remedy: str = "") -> tuple[Any, torch.nn.Module]:
    """(tokenizer, network) from a local directory (`~` expanded) or a hub name, the network a transformers
    `auto_class` ("AutoModel", "AutoModelForQuestionAnswering"). Its weights are fp32 whatever the checkpoint's dtype
    (transformers loads a half-precision checkpoint as is). A name that loads neither way raises PretrainedNotFound, one
    line naming `what` it was for, then `remedy`."""
    transformers = optional("transformers", "qa")
    location = str(Path(name).expanduser()) if Path(name).expanduser().exists() else name
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # a frozen network's loading bar, in every run's console
    try:
        return (transformers.AutoTokenizer.from_pretrained(location),
                getattr(transformers, auto_class).from_pretrained(location, dtype=torch.float32))
    except (OSError, ValueError) as e:
        raise PretrainedNotFound(f"{what} {name!r} is neither a local directory nor loadable from the hub "
                                 f"({str(e).splitlines()[0]}){remedy}") from None
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
