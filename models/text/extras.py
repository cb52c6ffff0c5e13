"""Dependencies that only some features need (the QA stack, the hub's datasets, wandb): asked for by the extra of
sumrl that installs them."""
from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ModuleNotFoundError):
    """A dependency of an extra of sumrl that is not installed: the commands say so in one line."""


def optional(module: str, extra: str) -> ModuleType:
    """Import a dependency that only some features need, or say which extra of sumrl installs it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name != module.split(".")[0]:
            raise
        raise MissingExtra(f"{module} is not installed; this feature needs it: pip install 'sumrl[{extra}]'",
                           name=error.name) from None
