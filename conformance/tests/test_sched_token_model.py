"""The token model and the fake runner: deterministic, and stopping where the plans say."""

from __future__ import annotations

from dataclasses import replace

from conformance.sched.runner import FakeRunner
from conformance.sched.token_model import TokenModel
from conformance.systems.protocol import CachedRequest, NewRequest, Scheduled
from workloads.model import EngineConfig, PlanSpec, RequestSpec, Workload

EOS, STOP = 2, 13


def make(*requests: RequestSpec, plans: tuple[PlanSpec, ...] = (), seed: int = 0,
         spec: int = 0) -> Workload:
    return Workload("t", "token model test", EngineConfig(num_spec_tokens=spec), requests,
                    plans=plans, token_seed=seed)


def req(rid: str, max_tokens: int = 50, **kw: object) -> RequestSpec:
    return RequestSpec(rid, 0, (5, 6, 7), max_tokens, eos_token_id=EOS, **kw)  # type: ignore[arg-type]


def test_tokens_are_a_pure_function_of_seed_request_and_position() -> None:
    a = TokenModel(make(req("x"), req("y")))
    b = TokenModel(make(req("y"), req("x")))
    assert [a.token("x", i) for i in range(40)] == [b.token("x", i) for i in range(40)]
    assert [a.token("x", i) for i in range(40)] != [a.token("y", i) for i in range(40)]
    c = TokenModel(make(req("x"), seed=1))
    assert [a.token("x", i) for i in range(40)] != [c.token("x", i) for i in range(40)]


def test_eos_comes_at_the_plan_but_not_before_min_tokens() -> None:
    m = TokenModel(make(req("x"), req("y", min_tokens=9), req("z", stop_token_ids=(STOP,)),
                        plans=(PlanSpec("x", eos_at=4), PlanSpec("y", eos_at=4))))
    xs = [m.token("x", i) for i in range(50)]
    assert xs.index(EOS) == 4
    assert [m.token("y", i) for i in range(50)].index(EOS) == 9
    zs = [m.token("z", i) for i in range(100)]
    assert EOS not in zs and zs.count(STOP) <= 1  # a stop token appears only where planned


def test_stop_tokens_hit_for_some_requests_and_never_before_min_tokens() -> None:
    requests = [req(f"s{i}", stop_token_ids=(STOP,), min_tokens=5) for i in range(40)]
    m = TokenModel(make(*requests))
    hits = [[m.token(r.request_id, i) for i in range(50)].index(STOP)
            for r in requests if STOP in [m.token(r.request_id, i) for i in range(50)]]
    assert 5 <= len(hits) < 40 and min(hits) >= 5


def test_acceptance_follows_the_plan_and_drafts_match_the_accepted_prefix() -> None:
    m = TokenModel(make(req("x"), req("y"), plans=(PlanSpec("x", spec_acceptance=(3, 0, 2)),),
                        spec=3))
    assert [m.accepted("x", i, 3) for i in range(5)] == [3, 0, 2, 0, 0]
    assert all(0 <= m.accepted("y", i, 3) <= 3 for i in range(20))
    drafts = m.draft("x", 10, 3, 2)
    assert drafts[:2] == [m.token("x", 10), m.token("x", 11)] and drafts[2] != m.token("x", 12)


def test_the_runner_samples_only_at_the_end_of_what_it_knows() -> None:
    w = make(RequestSpec("x", 0, tuple(range(100, 140)), 8, eos_token_id=EOS), spec=2,
             plans=(PlanSpec("x", spec_acceptance=(1,)),))
    runner = FakeRunner(w, async_scheduling=False)
    empty = Scheduled((), (), (), 0, (), (), (), ())
    chunk = replace(empty, new_reqs=(NewRequest("x", 40, 0, ((1, 2),)),),
                    num_scheduled_tokens=(("x", 32),), total_num_scheduled_tokens=32)
    assert runner.execute(chunk).sampled_token_ids == ((),)  # a partial prefill samples nothing
    rest = replace(empty, cached_reqs=(CachedRequest("x", False, 32, 0, ((3,),)),),
                   num_scheduled_tokens=(("x", 8),), total_num_scheduled_tokens=8)
    out = runner.execute(rest)
    model = runner.model
    assert out.sampled_token_ids == ((model.token("x", 0),),)
    [(rid, drafts)] = runner.take_drafts(out)
    assert rid == "x" and drafts[0] == model.token("x", 1) and len(drafts) == 2
    verify = replace(empty, cached_reqs=(CachedRequest("x", False, 40, 1, None),),
                     num_scheduled_tokens=(("x", 3),), total_num_scheduled_tokens=3,
                     spec_tokens=(("x", tuple(drafts)),))
    # The plan accepts one draft: that token plus the bonus token.
    assert runner.execute(verify).sampled_token_ids == ((model.token("x", 1),
                                                         model.token("x", 2)),)


def test_the_runner_knows_a_prompt_by_what_the_scheduler_sends() -> None:
    """A closed-loop turn (`after`) arrives with its predecessor's prompt and output before its
    own tokens, and a streaming session's next part with its kept outputs: the prompt the
    runner must finish before it samples is the scheduled one, not the workload file's new
    tokens. (It once took the file's: such a turn sampled at every prefill chunk.)"""
    w = make(RequestSpec("x", 0, tuple(range(100, 110)), 8, eos_token_id=EOS))
    runner = FakeRunner(w, async_scheduling=False)
    empty = Scheduled((), (), (), 0, (), (), (), ())
    chunk = replace(empty, new_reqs=(NewRequest("x", 40, 0, ((1, 2),)),),
                    num_scheduled_tokens=(("x", 32),), total_num_scheduled_tokens=32)
    assert runner.execute(chunk).sampled_token_ids == ((),)  # 32 of 40: nothing yet
    rest = replace(empty, cached_reqs=(CachedRequest("x", False, 32, 0, ((3,),)),),
                   num_scheduled_tokens=(("x", 8),), total_num_scheduled_tokens=8)
    assert runner.execute(rest).sampled_token_ids == ((runner.model.token("x", 0),),)
