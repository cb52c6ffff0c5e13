"""Shared fixtures."""

import pytest
import torch

# Words of the QA tests' texts; anything else falls back to single letters (WordPiece).
_QA_WORDS = ("the president of france visited berlin on monday with 300 soldiers and met angela merkel . obama "
             "paris london said police court yesterday a an in was is to he she they it report company zorblax "
             "quimbey mat cat sat dog ran park").split()


@pytest.fixture(scope="session")
def tiny_qa_model(tmp_path_factory) -> str:
    """A randomly initialised BERT QA model (2 layers, width 32) with a small WordPiece vocabulary, saved as a
    model directory that `AutoModelForQuestionAnswering` and `AutoTokenizer` load by path."""
    from transformers import BertConfig, BertForQuestionAnswering, BertTokenizerFast
    path = tmp_path_factory.mktemp("tiny_qa")
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)]
    pieces = ["##" + c for c in letters] + list(".,'-$")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(_QA_WORDS)) + letters + pieces
    tokenizer = BertTokenizerFast(vocab={word: i for i, word in enumerate(vocab)}, do_lower_case=True)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertForQuestionAnswering(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def write_selector_checkpoint(path, vocab, seed: int = 0) -> str:
    """A content selector checkpoint laid out as a `model=content_selector` run writes it, with random weights."""
    from models.bottom_up import ContentSelector, ContentSelectorConfig
    from trainer.checkpoints import SELECTOR_STAGE, checkpoint_description
    torch.manual_seed(seed)
    selector = ContentSelector(ContentSelectorConfig(vocab_size=len(vocab), emb_dim=8, hidden_dim=8))
    torch.save({"sumrl": checkpoint_description(SELECTOR_STAGE, selector, vocab),
                "state_dict": {f"model.{k}": v for k, v in selector.state_dict().items()}}, path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_ls_score(tiny_qa_model, tmp_path_factory) -> str:
    """An LS-Score checkpoint directory (rewards/ls_score.py) on the tiny random BERT, untrained."""
    from rewards.ls_score import load_scorer
    path = tmp_path_factory.mktemp("tiny_ls_score")
    load_scorer(None, encoder=tiny_qa_model)[1].save(path)
    return str(path)


def run_config(run_name: str, reward=None, row_names=None, metrics=None, **fields) -> str:
    """A run's config.yaml as `trainer.train` writes it for table4: its fields and the table record of its reward."""
    from omegaconf import OmegaConf
    from trainer.evaluate import ROW_NAMES, table_record
    record = table_record(reward, metrics or {}, row_names or ROW_NAMES)
    return OmegaConf.to_yaml({"run_name": run_name, **fields, "table": record})
