"""The rollout pool of rollout.max_staleness k >= 1 (grpo_train/rollout/async_pool.py), over a model-free engine whose
completions have random lengths: the staleness bound, whole groups per step, resumed prefixes with their versions,
and a resume from the pool's state. The real vLLM engine under the pool: tests/test_rollout.py."""

import json
import random
from collections import Counter

import pytest

from grpo_train.data import Problem
from grpo_train.rollout import RolloutPool, SamplingSpec, StreamDelta, StreamRequest, staleness


class RandomLengthEngine:
    """Implements StreamingEngine without a model: a request's tokens and length follow from its seed alone (a long
    tail: most requests stop within a quarter of max_tokens, one in five draws up to 1.5 x max_tokens and may end
    by "length"); at most `batch` requests
    advance one token per step, first come first served, like a scheduler with a full batch.

    It also checks what a pool sends it: a request aborted after n tokens must come back at the next submission (the
    pool resubmits every paused completion in its next phase) as its prompt + those n tokens with max_tokens - n,
    else add_requests fails, listing them. A fresh engine knows of no paused one (a pool restored from its state)."""

    def __init__(self, batch: int = 64) -> None:
        self.batch = batch
        self.running: dict[str, list] = {}  # id -> [rng, tokens left before a stop, max_tokens left, prompt + tokens]
        self.paused: Counter = Counter()  # (prompt + tokens so far, max_tokens left) of each aborted request

    def add_requests(self, requests: list[StreamRequest]) -> None:
        for r in requests:
            self.paused[tuple(r.token_ids), r.spec.max_tokens] -= 1  # a resumed one; a fresh one goes below 0
            rng = random.Random(r.spec.seed)
            tail = rng.random() < 0.2
            stop_after = rng.randint(1, 3 * r.spec.max_tokens // 2 if tail else max(1, r.spec.max_tokens // 4))
            self.running[r.request_id] = [rng, stop_after, r.spec.max_tokens, list(r.token_ids)]
        lost = [(len(ids), left) for (ids, left), n in self.paused.items() if n > 0]
        assert not lost, f"paused requests (prompt + prefix length, max_tokens left) not resubmitted as such: {lost}"
        self.paused.clear()

    def step(self) -> list[StreamDelta]:
        deltas = []
        for request_id in list(self.running)[: self.batch]:
            state = self.running[request_id]
            rng, state[1], state[2] = state[0], state[1] - 1, state[2] - 1
            finish = "stop" if state[1] == 0 else "length" if state[2] == 0 else None
            state[3].append(rng.randrange(1000))
            deltas.append(StreamDelta(request_id, state[3][-1:], [-rng.random()], finish))
            if finish:
                del self.running[request_id]
        return deltas

    def abort(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            _, _, left, ids = self.running.pop(request_id)
            self.paused[tuple(ids), left] += 1


def problems(n: int) -> list[Problem]:
    return [Problem(f"p{i}", f"question {i}", str(i), "gsm8k") for i in range(n)]


def train_steps(pool: RolloutPool, steps: range, data: list[Problem]) -> list:
    """The trainer's use of the pool: at each step admit as many new groups as there are free slots, then run the
    step's phase. Returns [(step, due groups, phase)]."""
    out = []
    for step in steps:
        free = sum(pool.open_slots(step).values())
        assert free % pool.groups_per_step == 0
        start = pool.admitted
        new = data[start : start + free]
        pool.admit(new, [[7, 8, i] for i in range(start, start + free)], step, seed=step)
        out.append((step, *pool.run(step)))
    return out


@pytest.mark.parametrize("k, groups, group_size, batch", [(1, 2, 4, 64), (2, 3, 2, 5), (3, 1, 8, 16), (1, 4, 3, 7)])
def test_staleness_never_exceeds_k_and_every_group_is_trained_whole_at_its_deadline(k, groups, group_size, batch):
    pool = RolloutPool(RandomLengthEngine(batch), SamplingSpec(n=group_size, temperature=1.0, max_tokens=40),
                       group_size=group_size, groups_per_step=groups, max_staleness=k)
    data = problems(200)
    admitted_at: dict[str, int] = {}
    trained: list[str] = []
    resumed = 0
    for step in range(1, 16):
        before = {id(c): (list(c.tokens), list(c.versions)) for g in pool.groups for c in g.completions}
        free = sum(pool.open_slots(step).values())
        for p in data[pool.admitted : pool.admitted + free]:
            admitted_at[p.uid] = step
        [(_, due, phase)] = train_steps(pool, range(step, step + 1), data)
        resumed += phase.resumed
        assert len(due) == groups and all(g.complete and g.deadline == step for g in due)
        assert len(pool.groups) == groups * k  # the pool stays full: k steps' groups in flight
        for group in due:
            trained.append(group.problem.uid)
            assert step - admitted_at[group.problem.uid] <= k
            rollouts = group.rollouts(0)
            assert len(rollouts) == group_size
            ages = staleness(rollouts, step - 1)
            assert ages and min(ages) >= 0 and max(ages) <= k
            for r in rollouts:
                assert len(r.completion_token_ids) == len(r.logprobs) == len(r.versions) <= 40
                assert r.versions == sorted(r.versions) and r.truncated == (r.finish_reason == "length")
        # A paused completion keeps its tokens and their versions; the new ones are this phase's version.
        for group in due + pool.groups:
            for c in group.completions:
                tokens, versions = before.get(id(c), ([], []))
                assert c.tokens[: len(tokens)] == tokens and c.versions[: len(versions)] == versions
                assert set(c.versions[len(versions):]) <= {step - 1}
    assert len(trained) == len(set(trained)) == 15 * groups  # each group trained once, in admission order
    assert trained == [p.uid for p in data[: 15 * groups]]
    assert resumed > 0  # completions were paused and went on (else the test shows nothing)


def test_a_pool_restored_from_its_state_goes_on_exactly():
    """A checkpoint's pool state (through JSON, as trainer_state.json holds it) with a fresh engine produces the same
    groups, tokens, log-probs and versions as the pool that went on."""
    spec = SamplingSpec(n=3, temperature=1.0, max_tokens=30)
    data = problems(100)
    straight = RolloutPool(RandomLengthEngine(9), spec, group_size=3, groups_per_step=2, max_staleness=2)
    train_steps(straight, range(1, 6), data)
    state = json.loads(json.dumps(straight.state_dict()))
    assert any(c["tokens"] and c["finish_reason"] is None for g in state["groups"] for c in g["completions"])
    resumed = RolloutPool(RandomLengthEngine(9), spec, group_size=3, groups_per_step=2, max_staleness=2)
    resumed.load_state_dict(state, {p.uid: p for p in data})
    ours, theirs = train_steps(resumed, range(6, 11), data), train_steps(straight, range(6, 11), data)
    for (_, mine, _), (_, ref, _) in zip(ours, theirs, strict=True):
        assert [g.problem.uid for g in mine] == [g.problem.uid for g in ref]
        assert [g.rollouts(0) for g in mine] == [g.rollouts(0) for g in ref]
    with pytest.raises(ValueError, match="training set does not have"):
        resumed.load_state_dict(state, {})


def test_the_pool_refuses_what_it_cannot_hold():
    with pytest.raises(ValueError, match="k >= 1"):
        RolloutPool(RandomLengthEngine(), SamplingSpec(n=2, temperature=1.0), 2, 2, max_staleness=0)
    pool = RolloutPool(RandomLengthEngine(), SamplingSpec(n=2, temperature=1.0), 2, 2, max_staleness=1)
    with pytest.raises(ValueError, match="pool is full at step 1"):
        pool.admit(problems(5), [[1]] * 5, step=1, seed=0)


def test_a_new_group_size_applies_from_the_first_deadline_without_groups_in_flight():
    """algorithm.group_size auto with k >= 1: a G chosen at step s (with B = N / G) applies to the groups due from
    s + k on; those due at s .. s + k - 1 are in flight with the G they were admitted with and are trained with it.
    The sizes go through the pool's state (a checkpoint)."""
    k, budget = 2, 12
    spec = SamplingSpec(n=4, temperature=1.0, max_tokens=20)
    pool = RolloutPool(RandomLengthEngine(16), spec, group_size=4, groups_per_step=budget // 4, max_staleness=k)
    data = problems(200)
    choices = {3: 6, 4: 2, 7: 4}  # step -> G chosen there
    trained = {}
    for step in range(1, 12):
        if step in choices:
            pool.resize(choices[step], budget // choices[step], step + k)
            with pytest.raises(ValueError, match="already in flight"):
                pool.resize(3, 4, step + k - 1)  # a deadline whose groups were admitted
        if step == 6:
            state = json.loads(json.dumps(pool.state_dict()))
            pool2 = RolloutPool(RandomLengthEngine(16), spec, group_size=4, groups_per_step=3, max_staleness=k)
            pool2.load_state_dict(state, {p.uid: p for p in data})
            assert pool2.sizes == pool.sizes and [pool2.sizes_at(d) for d in range(12)] == [
                pool.sizes_at(d) for d in range(12)]
        free = pool.open_slots(step)
        start = pool.admitted
        new = data[start: start + sum(free.values())]
        pool.admit(new, [[7, 8, i] for i in range(len(new))], step, seed=step)
        due, _ = pool.run(step)
        trained[step] = {len(g.completions) for g in due}, len(due)
        assert all(len(g.rollouts(0)) == len(g.completions) for g in due)
    # G in force: 4 until step 4 (= 2 + k), 6 at step 5 (3 + k), 2 from step 6 (4 + k) to 8, 4 from step 9 (7 + k).
    want = {s: 4 if s < 5 else 6 if s == 5 else 2 if s < 9 else 4 for s in range(1, 12)}
    assert trained == {s: ({g}, budget // g) for s, g in want.items()}
    assert [pool.sizes_at(s) for s in range(1, 12)] == [(g, budget // g) for g in want.values()]
