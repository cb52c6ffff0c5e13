"""A Hydra sweeper for grids whose mixed points start from an MLE point of the same sweep (`hydra/sweeper=staged`).

Hydra finds sweepers only in the `hydra_plugins` package, hence this folder outside the project's layers. Beside a
parallel launcher (`hydra/launcher=joblib`), Hydra's basic sweeper would start a seed's mixed runs in the same batch
as its MLE run, before that run has written its checkpoint; this one batches every `reward=mle` point before all the
others, whatever the order of the command's overrides, and stops before the mixed points if an MLE point failed.
"""
# no `from __future__ import annotations`: Hydra execs plugin modules outside sys.modules, where dataclasses cannot
# resolve string annotations
from dataclasses import dataclass
from typing import Dict, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.types import Override

MLE_POINT = "reward=mle"


@dataclass
class StagedSweeperConf:
    _target_: str = "hydra_plugins.sumrl_sweeper.staged_sweeper.StagedSweeper"
    max_batch_size: Optional[int] = None   # points per batch within a stage (None: the whole stage)
    params: Optional[Dict[str, str]] = None


ConfigStore.instance().store(group="hydra/sweeper", name="staged", node=StagedSweeperConf, provider="sumrl")


def staged_batches(points: list[list[str]], max_batch_size: int | None) -> list[list[list[str]]]:
    """The MLE points, then the others, each stage cut into batches of at most `max_batch_size` points."""
    stages = [[p for p in points if MLE_POINT in p], [p for p in points if MLE_POINT not in p]]
    return [batch for stage in stages if stage for batch in BasicSweeper.split_overrides_to_chunks(stage, max_batch_size)]


class StagedSweeper(BasicSweeper):
    """Hydra's basic sweeper (the cartesian product of the sweep's values), batched by stage (`staged_batches`)."""

    def split_arguments(self, overrides: list[Override], max_batch_size: Optional[int]) -> list[list[list[str]]]:
        return staged_batches(BasicSweeper.split_arguments(overrides, None)[0], max_batch_size)
