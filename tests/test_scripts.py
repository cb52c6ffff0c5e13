"""scripts/score.py and scripts/correlate.py end to end on tiny JSONL files, and the statistics
behind them (Williams' test)."""
from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from models.text.records import DataError, read_jsonl
from rewards.correlation import correlation, williams_matrix, williams_test
from scripts.cli import InputError

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str):
    return importlib.import_module(f"scripts.{name}")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ---------------------------------------------------------------- Williams' test

def test_williams_hand_computed():
    # Steiger (1980) case A, the example of R psych::r.test(103, .4, .5, .1), evaluated step by step.
    r12, r13, r23, n = 0.4, 0.5, 0.1, 103
    k = 1 - 0.16 - 0.25 - 0.01 + 2 * 0.4 * 0.5 * 0.1                # 0.62
    numerator = -0.1 * math.sqrt(102 * 1.1)                           # -1.059245
    denominator = math.sqrt(2 * 0.62 * 102 / 100 + 0.2025 * 0.9**3)   # sqrt(1.264800 + 0.147623)
    assert k == pytest.approx(0.62)
    t, p = williams_test(r12, r13, r23, n)
    assert t == pytest.approx(numerator / denominator, rel=1e-12)
    assert t == pytest.approx(-0.89128, abs=1e-5)
    assert p == pytest.approx(stats.t.sf(t, df=100))
    assert 2 * min(p, 1 - p) == pytest.approx(0.3749, abs=1e-4)  # psych prints "probability < 0.37"


def test_williams_equals_determinant_form():
    # Steiger's (1980) eq. (7) with |R| computed by numpy from the full correlation matrix.
    rng = np.random.default_rng(0)
    for _ in range(20):
        data = rng.normal(size=(50, 3)) @ rng.normal(size=(3, 3))
        r = np.corrcoef(data, rowvar=False)
        r12, r13, r23, n = r[0, 1], r[0, 2], r[1, 2], 50
        rbar = (r12 + r13) / 2
        expected = (r12 - r13) * math.sqrt((n - 1) * (1 + r23)
                                            / (2 * (n - 1) / (n - 3) * np.linalg.det(r) + rbar**2 * (1 - r23) ** 3))
        assert williams_test(r12, r13, r23, n)[0] == pytest.approx(expected, rel=1e-9)


def test_williams_symmetry_and_monotonicity():
    t_ab, p_ab = williams_test(0.5, 0.3, 0.4, 100)
    t_ba, p_ba = williams_test(0.3, 0.5, 0.4, 100)
    assert t_ba == pytest.approx(-t_ab) and p_ab + p_ba == pytest.approx(1.0)
    assert williams_test(0.4, 0.4, 0.7, 100) == pytest.approx((0.0, 0.5))
    # More items, or metrics that agree more with each other, make the same gap more significant.
    assert williams_test(0.5, 0.3, 0.4, 400)[1] < p_ab
    assert williams_test(0.5, 0.3, 0.8, 100)[1] < p_ab
    with pytest.raises(ValueError):
        williams_test(0.5, 0.3, 0.4, 3)
    assert all(math.isnan(v) for v in williams_test(1.0, 1.0, 1.0, 10))  # collinear: undefined


def test_williams_is_calibrated_under_the_null():
    # Human correlates equally (0.3) with two metrics that correlate 0.5: ~5% of samples reject at 0.05.
    cov = np.array([[1, 0.3, 0.3], [0.3, 1, 0.5], [0.3, 0.5, 1]])
    samples = np.random.default_rng(1).multivariate_normal(np.zeros(3), cov, size=(4000, 40))
    z = (samples - samples.mean(1, keepdims=True)) / samples.std(1, keepdims=True)
    r = np.einsum("bni,bnj->bij", z, z) / 40
    p = [williams_test(m[0, 1], m[0, 2], m[1, 2], 40)[1] for m in r]
    assert 0.04 < np.mean(np.array(p) < 0.05) < 0.06


def test_williams_matrix_pairs():
    rng = np.random.default_rng(2)
    human = rng.normal(size=60)
    metrics = {"good": human + rng.normal(size=60), "bad": human + 3 * rng.normal(size=60)}
    p = williams_matrix(human, metrics, "pearson")
    assert set(p) == {("good", "bad"), ("bad", "good")}
    assert p["good", "bad"] < 0.05 and p["good", "bad"] + p["bad", "good"] == pytest.approx(1.0)
    assert correlation(metrics["good"], human, "pearson") == pytest.approx(np.corrcoef(metrics["good"], human)[0, 1])


# ---------------------------------------------------------------- input errors

def test_bad_json_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"candidate": "a b", "reference": "a"}\n\n{"candidate": "oops"\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl:3: malformed JSON"):
        read_jsonl(path)


def test_wrong_field_names_file_line_and_field(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"candidate": "a", "reference": "b", "overall": 1},
                                                 {"candidate": "a", "reference": "b", "overall": "good"}])
    rows = read_jsonl(path)
    with pytest.raises(DataError, match=r"rows\.jsonl:1: no field 'summary'"):
        rows[0].text("summary")
    with pytest.raises(DataError, match=r"rows\.jsonl:2: field 'overall' must be a finite number"):
        rows[1].number("overall")


# ---------------------------------------------------------------- scripts end to end

REFERENCE = "The cat sat on the mat. It was happy."


def test_score_end_to_end(tmp_path, capsys):
    path = write_jsonl(tmp_path / "summaries.jsonl", [
        {"id": "same", "summary": REFERENCE, "gold": REFERENCE},
        {"id": "partial", "summary": "the cat. it sat on a mat.", "gold": REFERENCE},
        {"id": "unrelated", "summary": "Stocks fell sharply on Monday.", "gold": REFERENCE},
        {"id": "no-reference", "summary": "A cat.", "gold": None},
    ])
    out = tmp_path / "scores.jsonl"
    means = load_script("score").main([
        str(path), "--candidate-field", "summary", "--reference-field", "gold",
        "--rewards", "rouge_l", "rl12=rouge_l", "sms", "--set", "rl12.beta=1.2",
        "--tokenize", "treebank", "rl12=whitespace", "-o", str(out), "--keep", "id"])
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["line"], r["id"]) for r in lines] == [(1, "same"), (2, "partial"), (3, "unrelated"), (4, "no-reference")]
    same, partial, unrelated, no_reference = lines
    assert same["rouge_l"] == pytest.approx(1.0) and same["rl12"] == pytest.approx(1.0)
    assert same["sms"] == pytest.approx(1.0)
    # treebank tokens: hyp "the cat . it sat on a mat ." (9) vs ref "the cat sat on the mat . it was happy ." (11);
    # LCS "the cat sat on mat ." = 6 -> F1 = 2 * 6 / (9 + 11)
    assert partial["rouge_l"] == pytest.approx(0.6, abs=1e-6)
    # whitespace tokens, beta 1.2: hyp "the cat. it sat on a mat." (7) vs ref "the cat sat on the mat. it was
    # happy." (9); LCS "the sat on mat." = 4
    p, r = 4 / 7, 4 / 9
    assert partial["rl12"] == pytest.approx((1 + 1.44) * p * r / (r + 1.44 * p), abs=1e-6)
    assert same["sms"] > partial["sms"] > unrelated["sms"]
    assert no_reference["rouge_l"] is None and no_reference["sms"] is None
    assert means["rouge_l"] == pytest.approx((1.0 + 0.6 + unrelated["rouge_l"]) / 3)
    printed = capsys.readouterr().out
    # the reward's LCS F on tokens is not table4's ROUGE-L (rouge-score, stemmed): one name, one number
    assert "| rouge_l | ROUGE-L (reward) | 3 |" in printed and "| sms | SMS | 3 |" in printed
    assert "×100" in printed and "×1000" in printed


def test_score_reads_a_runs_summaries_without_flags(tmp_path):
    # the fields trainer.module writes to summaries.jsonl: id, summary, reference, scores
    path = write_jsonl(tmp_path / "summaries.jsonl", [
        {"id": "a", "summary": REFERENCE, "reference": REFERENCE, "scores": {}},
        {"id": "b", "summary": "the cat. it sat on a mat.", "reference": REFERENCE, "scores": {}}])
    means = load_script("score").main([str(path), "--rewards", "rouge_l"])
    assert means["rouge_l"] == pytest.approx((1.0 + 0.6) / 2, abs=1e-6)  # F1s worked out in test_score_end_to_end


def test_correlate_end_to_end(tmp_path, capsys):
    # Candidate k shares its first k words with the reference and is judged k: every metric that
    # rewards overlap ranks the candidates as the judges do. Reference rows (judged contrary) are
    # excluded; a null judgment drops a row from that dimension only.
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()
    filler = "one two three four five six seven eight nine ten".split()
    rows = [{"system": "model", "cand": " ".join(words[:k] + filler[k:]), "ref": " ".join(words),
             "overall": k, "grammar": None if k == 4 else -k} for k in range(1, 9)]
    rows.append({"system": "reference", "cand": " ".join(words), "ref": " ".join(words), "overall": -5, "grammar": 9})
    path = write_jsonl(tmp_path / "judged.jsonl", rows)
    results = load_script("correlate").main([
        str(path), "--human", "overall", "grammar", "--exclude", "system=reference",
        "--candidate-field", "cand", "--reference-field", "ref", "--rewards", "rouge_l", "wms"])
    for metric in ("rouge_l", "wms"):
        assert results["overall"][metric]["spearman"] == pytest.approx(1.0)
        assert results["overall"][metric]["kendall"] == pytest.approx(1.0)
        assert results["grammar"][metric]["spearman"] == pytest.approx(-1.0)
    printed = capsys.readouterr().out
    assert "## overall (n = 8)" in printed and "## grammar (n = 7)" in printed
    assert "| rouge_l | 1.000 | " in printed and "Williams test on Spearman" in printed
    # Both metrics rank the candidates alike: Williams' test is undefined, and says so.
    assert "| rouge_l | – | n/a |" in printed


def test_correlate_refuses_an_exclusion_that_matches_no_row(tmp_path):
    # `--exclude system=referenc` (a typo) excluded nothing, silently: n 199 instead of 163, another Pearson r
    rows = [{"system": system, "candidate": "a b " * k, "reference": "a b", "overall": k}
            for k, system in enumerate(["model"] * 5 + ["reference"])]
    path = write_jsonl(tmp_path / "judged.jsonl", rows)
    with pytest.raises(InputError, match=r"^--exclude system=referenc: no row of .*judged\.jsonl has that value \(its "
                                         r"values: model, reference\)$"):
        load_script("correlate").main([str(path), "--human", "overall", "--exclude", "system=referenc",
                                       "--rewards", "rouge_l"])


def test_scripts_report_bad_rows_by_file_and_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"candidate": "a b", "reference": "a b", "overall": 1}\n{"candidate": "a", "overall": 0}\n',
                    encoding="utf-8")
    with pytest.raises(DataError, match=r"broken\.jsonl:2: no field 'reference'"):
        load_script("score").main([str(path), "--rewards", "rouge_l", "--candidate-field", "candidate"])
    with pytest.raises(DataError, match=r"broken\.jsonl:2: no field 'reference'"):
        load_script("correlate").main([str(path), "--human", "overall", "--rewards", "rouge_l"])


@pytest.mark.parametrize("script, flags", [("score", []), ("correlate", ["--human", "overall"])])
def test_scripts_report_a_missing_or_undecodable_input_in_one_line(tmp_path, script, flags):
    with pytest.raises(DataError, match=r"missing\.jsonl: No such file or directory"):
        load_script(script).main([str(tmp_path / "missing.jsonl"), "--rewards", "rouge_l", *flags])
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"candidate": "a", "reference": "a", "overall": 1}\n{"candidate": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"latin1\.jsonl:2: invalid UTF-8"):
        load_script(script).main([str(path), "--rewards", "rouge_l", *flags])


def test_score_command_line_prints_one_line_for_a_missing_input(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPTS / "score.py"), str(tmp_path / "missing.jsonl"),
                             "--rewards", "rouge_l"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(SCRIPTS.parent)})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"error: {tmp_path / 'missing.jsonl'}: No such file or directory"]


@pytest.mark.parametrize("script", ["train_cloze_qa", "train_ls_score"])
def test_a_training_script_reports_a_model_it_cannot_load_in_one_line(tmp_path, monkeypatch, script):
    """The scripts that train frozen reward models start from a pretrained network (`--base`, `--encoder`)."""
    missing = str(tmp_path / "nowhere")
    held_out = []  # train_ls_score's held-out ids default to ../shared/data's list, which the tests do without
    if script == "train_ls_score":
        (tmp_path / "held_out.tsv").write_text("id\n")
        held_out = ["--held-out", str(tmp_path / "held_out.tsv"), "--select-by", "accuracy"]  # no shared dev sets
    monkeypatch.setattr(sys, "argv", [script, "--data", "data=demo", "data.train.n=40", "--minutes", "0", *held_out,
                                      "--base" if script == "train_cloze_qa" else "--encoder", missing])
    with pytest.raises(SystemExit) as exit:
        load_script(script).cli()
    message = str(exit.value.code)
    assert message.startswith("error: ") and repr(missing) in message and "\n" not in message


def test_score_reports_a_reward_config_that_refuses_its_files_in_one_line(tmp_path, monkeypatch):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"summary": "a cat .", "reference": "a cat .", "article": "a cat ."}])
    missing = str(tmp_path / "no_qa_model")
    monkeypatch.setattr(sys, "argv", ["score", str(path), "--rewards", "qa_conf",
                                      "--set", f"qa_conf.qa.model={missing}"])
    with pytest.raises(SystemExit) as exit:
        load_script("score").cli()
    message = str(exit.value.code)
    assert message.startswith(f"error: QA model {missing!r} is neither") and "\n" not in message


def test_score_reports_a_reward_that_refuses_its_settings_in_one_line(tmp_path, monkeypatch):
    """A reward's constructor refusing a setting (a plain ValueError, wrapped by Hydra) is one line, not a traceback."""
    path = write_jsonl(tmp_path / "rows.jsonl", [{"summary": "a cat .", "reference": "a cat ."}])
    monkeypatch.setattr(sys, "argv", ["score", str(path), "--rewards", "rouge_1_recall",
                                      "--set", "rouge_1_recall.measure=bogus"])
    with pytest.raises(SystemExit) as exit:
        load_script("score").cli()
    assert str(exit.value.code) == "error: measure must be recall, precision or f1, got 'bogus'"


@pytest.mark.parametrize("script, flags", [("score", []), ("correlate", ["--human", "overall"])])
@pytest.mark.parametrize("size", ["0", "-1"])
def test_batch_size_below_one_is_an_argument_error(tmp_path, capsys, script, flags, size):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"candidate": "a", "reference": "a", "overall": 1}])
    with pytest.raises(SystemExit) as exit:
        load_script(script).main([str(path), "--rewards", "rouge_l", "--batch-size", size, *flags])
    assert exit.value.code == 2
    assert f"argument --batch-size: must be at least 1, got {size}" in capsys.readouterr().err


def test_score_refuses_an_output_that_is_its_input(tmp_path, capsys):
    path = write_jsonl(tmp_path / "rows.jsonl", [{"candidate": "a", "reference": "a"}])
    before = path.read_text()
    with pytest.raises(SystemExit) as exit:
        load_script("score").main([str(path), "--rewards", "rouge_l", "-o", str(tmp_path / "." / "rows.jsonl")])
    assert exit.value.code == 2 and "is the input file" in capsys.readouterr().err
    assert path.read_text() == before


@pytest.mark.parametrize("script", ["score", "summarize"])
@pytest.mark.parametrize("output, message", [("missing/x.jsonl", "its folder {tmp}/missing does not exist"),
                                             (".", "is a folder: give a file name in it")])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(tmp_path, capsys, monkeypatch, script, output,
                                                                     message):
    """Before: a FileNotFoundError or IsADirectoryError traceback after all the decoding or scoring, and a stray
    partial file."""
    path = write_jsonl(tmp_path / "rows.jsonl", [{"summary": "a", "reference": "a", "article": "a"}])
    flags = {"score": [str(path), "--rewards", "rouge_l", "-o", str(tmp_path / output)],
             "summarize": ["--checkpoint", str(tmp_path / "none.ckpt"), "--input", str(path), "--output",
                           str(tmp_path / output)]}[script]
    loaded = load_script(script)
    monkeypatch.setattr({"score": "scripts.score.score_rows", "summarize": "trainer.export.load_summarizer"}[script],
                        lambda *a, **k: pytest.fail("worked before checking its output"))
    with pytest.raises(SystemExit) as exit:
        loaded.main(flags)
    assert exit.value.code == 2 and message.format(tmp=tmp_path.resolve()) in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl"]


@pytest.mark.parametrize("script,command", [("score", "sumrl-score"), ("correlate", "sumrl-correlate"),
                                            ("export", "sumrl-export"),
                                            ("table4", "sumrl-table4")])
def test_each_command_names_itself_in_its_help(script, command, capsys):
    with pytest.raises(SystemExit):
        load_script(script).main(["--help"])
    shown = capsys.readouterr().out
    assert shown.startswith(f"usage: {command} ") and "python scripts/" not in shown


def test_help_and_a_bad_flag_answer_before_torch_is_imported():
    """Before: every command's --help imported torch, Lightning and nltk first (6-10 s of CPU); now they load after
    the flags are parsed. One process runs all six, sumrl-train's Hydra help last, as six consoles would."""
    probe = ("import sys\n"
             "for name in ('summarize', 'score', 'correlate', 'table4', 'export'):\n"
             "    module = __import__(f'scripts.{name}', fromlist=['main'])\n"
             "    for flags in (['--help'], ['--no-such-flag']):\n"
             "        try:\n"
             "            module.main(flags)\n"
             "        except SystemExit:\n"
             "            pass\n"
             "sys.argv = ['sumrl-train', '--help']\n"
             "try:\n"
             "    __import__('trainer.train', fromlist=['main']).main()\n"
             "except SystemExit:\n"
             "    pass\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'pytorch_lightning', 'nltk', 'transformers'}))\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=SCRIPTS.parent, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
