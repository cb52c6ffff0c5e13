"""ROUGE-L as a reward: LCS F-measure on token ids, batched on the input's device."""
from __future__ import annotations

import torch
from torch import Tensor

from rewards.base import RewardInput


def lcs_lengths(hyp: Tensor, hyp_lens: Tensor, ref: Tensor, ref_lens: Tensor) -> Tensor:
    """Longest-common-subsequence length of each (hyp[b, :hyp_lens[b]], ref[b, :ref_lens[b]]) pair.

    Row i of the LCS table is `cummax(max(L[i-1], shift(L[i-1]) + match_i))`: one cummax per
    position of the shorter side (LCS is symmetric), all pairs of the batch at once. Returns long [B].
    """
    n_hyp, n_ref = (torch.stack([hyp_lens.max(), ref_lens.max()]).tolist() if len(hyp_lens) else (0, 0))
    if n_hyp > n_ref:  # fewer sequential steps
        hyp, hyp_lens, ref, ref_lens, n_hyp, n_ref = ref, ref_lens, hyp, hyp_lens, n_ref, n_hyp
    hyp, ref = hyp[:, :n_hyp], ref[:, :n_ref]
    positions_t = torch.arange(n_hyp, device=hyp.device)
    positions_r = torch.arange(n_ref, device=ref.device)
    match = ((hyp.t()[:, :, None] == ref[None, :, :])
             & (positions_t[:, None, None] < hyp_lens[None, :, None])
             & (positions_r[None, None, :] < ref_lens[None, :, None])).to(torch.int32)  # [T, B, R]
    table = match.new_zeros(len(ref), n_ref + 1)  # row L[i][0..R], column 0 stays 0
    step = match.new_empty(len(ref), n_ref)
    arg = torch.empty(step.shape, dtype=torch.long, device=step.device)
    for match_i in match:  # in place: this loop is the reward's hot path
        torch.add(table[:, :-1], match_i, out=step)
        torch.maximum(step, table[:, 1:], out=step)
        torch.cummax(step, dim=1, out=(table[:, 1:], arg))
    return table[:, -1].long()


def lcs_f_measure(lcs: Tensor, hyp_lens: Tensor, ref_lens: Tensor, beta: float = 1.0) -> Tensor:
    """(1+β²)PR / (R+β²P) with P = lcs/|hyp|, R = lcs/|ref|; 0 where the LCS (or either side) is empty."""
    lcs, hyp_lens, ref_lens = lcs.double(), hyp_lens.double(), ref_lens.double()
    precision = lcs / hyp_lens.clamp(min=1)
    recall = lcs / ref_lens.clamp(min=1)
    denominator = recall + beta ** 2 * precision
    f = (1 + beta ** 2) * precision * recall / denominator.clamp(min=torch.finfo(torch.float64).tiny)
    return torch.where(lcs > 0, f, torch.zeros_like(f))


class RougeL:
    """ROUGE-L F-measure between the hypothesis and the full reference, on extended token ids.

    β = 1 is rouge-score's `rougeL`; β = 1.2 is the ROUGE-1.5.5 setting with which Clark et al.
    (2019) report ROUGE-L's correlation with human judgments.
    """

    name = "rouge_l"
    needs_reference = True

    def __init__(self, beta: float = 1.0):
        self.beta = float(beta)

    def __call__(self, inputs: RewardInput) -> Tensor:
        ref_lens = (inputs.batch.ref_sentence >= 0).sum(1)
        lcs = lcs_lengths(inputs.hyp, inputs.hyp_lens, inputs.batch.ref, ref_lens)
        return lcs_f_measure(lcs, inputs.hyp_lens, ref_lens, self.beta).float()
