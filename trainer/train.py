"""`sumrl-train` and `python -m trainer.train`: Hydra's command line for a run (`trainer.run`), which ends in one line
where a setting or a file stops it. A resume's settings are read from its folder (`trainer.folders`)."""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

# Registered here, in the process that launches a sweep: Hydra's launchers hand every job this process's resolvers
# (hydra.core.singleton), so a resolver registered only inside a job is gone from the next job in that worker.
import trainer.precision  # noqa: F401
from trainer.folders import with_saved_settings


@hydra.main(version_base="1.3", config_path="pkg://conf", config_name="train")
def train(cfg: DictConfig) -> None:
    # the trainer's imports (torch, Lightning) once Hydra has parsed the command: --help answers at once
    from trainer.run import run
    from trainer.settings import REFUSALS
    try:
        run(cfg)
    except REFUSALS as error:
        raise SystemExit(f"{type(error).__name__}: {error}") from None


def main() -> None:
    sys.argv = [sys.argv[0], *with_saved_settings(sys.argv[1:])]
    train()


if __name__ == "__main__":
    main()
