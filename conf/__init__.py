"""The configs, shipped inside the package and found through Hydra's package search path (`pkg://conf`): one group a
choice, `train.yaml` on top."""
