"""Sampling (greedy, temperature, top-k, top-p, bans), spec-decode verification and n-gram
drafts."""

from __future__ import annotations

import pytest

pytest.importorskip("torch", reason="the model runner needs torch")

import torch  # noqa: E402

from impl.runner.ngram import propose_ngram  # noqa: E402
from impl.runner.sampler import filter_top_k_top_p, probabilities, sample  # noqa: E402
from impl.runner.sampling_params import SamplingParams  # noqa: E402
from impl.runner.spec_decode import verify, verify_greedy  # noqa: E402

GREEDY = SamplingParams()


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_greedy_takes_the_argmax_and_honours_bans() -> None:
    logits = torch.tensor([[0.1, 3.0, 2.0], [5.0, 1.0, 0.0]])
    assert sample(logits, [GREEDY, GREEDY], [None, None]) == [1, 0]
    assert sample(logits, [GREEDY, GREEDY], [None, None], banned=[(1,), ()]) == [2, 0]


def test_top_k_and_top_p_masks() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]] * 3))
    masked = filter_top_k_top_p(logits, torch.tensor([2, 0, 1]), torch.tensor([1.0, 0.7, 0.1]))
    finite = torch.isfinite(masked).tolist()
    assert finite == [[True, True, False, False],  # top-2
                      [True, True, False, False],  # nucleus 0.7: 0.5 + 0.3 reaches it
                      [True, False, False, False]]  # top-1 (and p 0.1 keeps at least one)


def test_temperature_flattens_and_sharpens() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    hot = probabilities(logits, [SamplingParams(temperature=10.0)])
    cold = probabilities(logits, [SamplingParams(temperature=0.1)])
    assert float(hot.max()) < 0.4 and float(cold.max()) > 0.99


def test_seeded_sampling_follows_the_distribution() -> None:
    params = SamplingParams(temperature=1.0, top_k=3, seed=0)
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1, 1e-9]]))
    gen = _gen(0)
    counts = [0, 0, 0, 0]
    for _ in range(2000):
        counts[sample(logits, [params], [gen])[0]] += 1
    assert counts[3] == 0
    assert abs(counts[0] / 2000 - 0.6) < 0.05 and abs(counts[2] / 2000 - 0.1) < 0.03
    first = [sample(logits, [params], [_gen(5)])[0] for _ in range(5)]
    assert len(set(first)) == 1  # same seed, same draw


def test_greedy_verification_accepts_the_matching_prefix_then_one_token() -> None:
    assert verify_greedy([4, 5, 6, 7], [4, 5, 6]) == [4, 5, 6, 7]  # all accepted + bonus
    assert verify_greedy([4, 9, 6, 7], [4, 5, 6]) == [4, 9]  # first mismatch corrects
    assert verify_greedy([8, 5, 6, 7], [4, 5, 6]) == [8]
    assert verify_greedy([3], []) == [3]
    logits = torch.nn.functional.one_hot(torch.tensor([4, 5, 1]), 8).float()
    assert verify(logits, [4, 2], GREEDY, None) == [4, 5]


def test_random_verification_keeps_certain_drafts_and_rejects_impossible_ones() -> None:
    params = SamplingParams(temperature=1.0)
    certain = torch.full((3, 6), -1e9)
    certain[0, 2] = certain[1, 3] = certain[2, 4] = 0.0  # point masses on 2, 3, 4
    assert verify(certain, [2, 3], params, _gen(0)) == [2, 3, 4]
    impossible = torch.zeros(2, 6)
    impossible[0, 1] = -1e9  # draft 1 has probability ~0: always rejected, resampled
    out = verify(impossible, [1], params, _gen(1))
    assert len(out) == 1 and out[0] != 1


def test_random_verification_preserves_the_target_distribution() -> None:
    params = SamplingParams(temperature=1.0)
    target = torch.log(torch.tensor([[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3]]))
    gen = _gen(3)
    counts = [0, 0, 0]
    for _ in range(3000):
        counts[verify(target, [1], params, gen)[0]] += 1  # draft 1 (p = 0.25)
    for count, expected in zip(counts, [0.5, 0.25, 0.25], strict=True):
        assert abs(count / 3000 - expected) < 0.04


def test_ngram_proposals() -> None:
    assert propose_ngram([1, 2, 3, 9, 1, 2], 2) == [3, 9]
    assert propose_ngram([1, 2, 3, 1, 2, 4, 1, 2], 3) == [4, 1, 2]  # most recent match
    assert propose_ngram([5, 6, 7], 3) == []
    assert propose_ngram([7, 7], 2) == [7]
    assert propose_ngram([], 2) == [] and propose_ngram([1], 2) == []


def test_sampling_params_validation() -> None:
    with pytest.raises(ValueError, match="top_p: must be in"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingParams(max_tokens=2, min_tokens=3)
    assert SamplingParams().greedy and not SamplingParams(temperature=0.5).greedy
