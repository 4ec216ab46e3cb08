"""The step's token budget: what padding charges, and what a preempted victim gives back."""

from __future__ import annotations

from impl.sched.scheduler import Scheduler
from tests.sched.helpers import make_request, make_scheduler, scheduled, step


def run_until_idle(s: Scheduler, limit: int = 20) -> None:
    for _ in range(limit):
        if not s.has_requests():
            return
        step(s)


def test_padding_an_admitted_decode_is_charged_to_the_budget() -> None:
    """k = 2, budget 10, blocks of 4. r's 17-token prompt hits 16 cached tokens, so it needs
    just its last token: admitted as a decode, padded to 1 + 2 placeholder drafts, 3 tokens of
    the budget. w, behind it, gets the 7 left (not 9: padded slots are scheduled slots)."""
    s = make_scheduler(block_size=4, max_num_batched_tokens=10, num_spec_tokens=2)
    prompt = range(100, 117)
    s.add_request(make_request("x", prompt, block_size=4, max_tokens=1))
    run_until_idle(s)
    s.add_request(make_request("r", prompt, block_size=4, max_tokens=4))
    s.add_request(make_request("w", range(300, 320), block_size=4, max_tokens=4))
    out = s.schedule()
    assert scheduled(out) == {"r": 3, "w": 7}
    assert out.scheduled_spec_decode_tokens == {"r": [-1, -1]}


def test_a_victim_scheduled_earlier_in_the_step_gives_its_tokens_back() -> None:
    """Priority policy, budget 4, threshold 2, blocks of 4, 6 usable blocks. a (priority 5)
    runs alone, then b (0) and c (1) arrive and are admitted behind it, so the running order is
    a, b, c. At step 5 a's decode is scheduled first, then b's chunk needs a block the pool no
    longer has and the least important running request, a, is preempted: its token goes back to
    the budget, so c still gets its 2-token chunk (1 if a's token stayed charged)."""
    s = make_scheduler(num_blocks=7, block_size=4, max_num_batched_tokens=4,
                       policy="priority", long_prefill_token_threshold=2)
    s.add_request(make_request("a", range(100, 104), block_size=4, priority=5, max_tokens=12,
                               ignore_eos=True))
    schedules = [scheduled(step(s)[0])]
    s.add_request(make_request("b", range(200, 212), block_size=4, priority=0, max_tokens=12,
                               ignore_eos=True))
    s.add_request(make_request("c", range(300, 312), block_size=4, priority=1, max_tokens=12,
                               ignore_eos=True))
    preempted = []
    for _ in range(5):
        out, _ = step(s)
        schedules.append(scheduled(out))
        preempted.append(sorted(out.preempted_req_ids or ()))
    assert schedules == [{"a": 4}] + [{"a": 1, "b": 2, "c": 1}] * 4 + [{"b": 2, "c": 2}]
    assert preempted == [[], [], [], [], ["a"]]


def test_taking_back_a_victim_returns_its_tokens_drafts_and_encoder_budget() -> None:
    """What a running request scheduled earlier in the step gives back when it is preempted:
    its tokens, its drafts' place in the output, and the encoder budget its items took."""
    from impl.core.kv_cache_manager import KVCacheBlocks
    from impl.core.multimodal import MultiModalFeature
    from impl.sched.step_plan import StepPlan

    request = make_request("m", range(100, 140),
                           mm_features=[MultiModalFeature("img", 4, 20, None)])
    plan = StepPlan(100, 50)
    plan.scheduled_running.append(request)
    plan.schedule(request, 30, KVCacheBlocks(((),)))
    plan.spec_tokens["m"] = [5, 6]
    plan.encoder_inputs["m"] = [0]
    plan.encoder_budget -= 20
    plan.take_back(request)
    assert (plan.token_budget, plan.encoder_budget) == (100, 50)
    assert plan.scheduled_running == [] and plan.num_scheduled == {}
    assert plan.spec_tokens == {} and plan.encoder_inputs == {}


def test_an_adaptive_threshold_is_floored_at_the_budgets_fair_share() -> None:
    """Threshold 16, budget 96, two long prompts: each gets 96 // 2 = 48 tokens with the
    adaptive floor (upstream's long_prefill_token_threshold_adaptive), 16 without."""
    from tests.sched.helpers import make_request, make_scheduler, scheduled, step

    for adaptive, chunk in ((False, 16), (True, 48)):
        s = make_scheduler(max_num_batched_tokens=96, long_prefill_token_threshold=16,
                           long_prefill_token_threshold_adaptive=adaptive)
        s.add_request(make_request("a", range(100, 300)))
        s.add_request(make_request("b", range(400, 600)))
        out, _ = step(s)
        assert scheduled(out) == {"a": chunk, "b": chunk}
