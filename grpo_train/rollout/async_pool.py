"""Groups in flight across steps: bounded staleness with partial rollouts on the colocated engine
(`rollout.max_staleness` k >= 1; k = 0 is the synchronous loop, which keeps the engine's `generate`).

The pool holds (k + 1) * B groups of G completions for its engine (B: the engine's groups per step; with
algorithm.group_size auto, G and B of the groups due from a step on: `resize`). Each group is
admitted with a deadline, the step whose update trains it; every step has B deadline slots, so step s trains exactly
the B groups due at s, and its generation phase runs every unfinished completion of the pool, not only theirs:

    pool = RolloutPool(engine, spec, group_size=G, groups_per_step=B, max_staleness=k)
    pool.admit(problems, prompt_ids, step, seed)   # fill the free deadline slots of steps s .. s + k
    due, phase = pool.run(step)                     # generate until the groups due at s are complete

During step s's phase the engine holds the weights after s - 1 updates (version s - 1). The phase ends as soon as
every group due at s is complete; the other requests are paused: aborted (vLLM's `abort_request`), with their tokens
so far, the sampler's log-probs and each token's weight version kept on our side; the next phase submits them again
as prompt + prefix with what is left of the token budget, and they go on under the new weights (vLLM prefills the
prefix again: its KV cache was the old weights'). A batch does not wait for its longest completion at full price
(a synchronous step's does): while the due groups' stragglers finish, the engine's batch is filled by the groups
due at later steps.

Bound: a group admitted at step a (version a - 1) gets a deadline d <= a + k and is trained by the update from
version d - 1, so its oldest token is at most d - 1 - (a - 1) <= k versions old. It holds by construction: a phase
waits for the groups due (pacing); nothing is dropped. `check_staleness` checks it on the groups due, here as on
rollout servers (server_pool.py, whose phases differ only in how the completions are generated: `_generate`).

Reproducibility: each request has its own seed (completion j of a group: the group's seed + j, vLLM's rule for the
j-th of n samples, so an unpaused group is sampled as `generate` samples it; a resumed one: a seed mixed from the
group's seed, j and how often it was resumed); every phase starts with an empty prefix cache and submits the whole
pool in a fixed order. The engine's work after a step boundary is therefore a function of the pool's state, which
a checkpoint saves (`state_dict`): a resumed run goes on exactly as an uninterrupted one.

vLLM 0.32 also offers keeping the requests in the engine across the update and recomputing them afterwards
(`reset_prefix_cache(reset_running_requests=True)`, or `sleep(mode="keep")`): the same prefill cost, but the
requests' sampler state would live only inside vLLM, and a checkpoint could not restore it.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from grpo_train.data import Problem
from grpo_train.rollout.records import Rollout, SamplingSpec, StreamingEngine, StreamRequest, rollout_seed

STALL_STEPS = 10_000  # engine steps in a row without any output before a phase gives up (a hang, named)


@dataclass
class Completion:
    """One of a group's G completions, finished or not; versions[t] is the weight version token t was sampled at."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # None while unfinished
    resumed: int = 0  # times submitted again with a prefix

    @property
    def done(self) -> bool:
        return self.finish_reason is not None


@dataclass
class PoolGroup:
    """A prompt and its G completions in the pool."""

    problem: Problem
    prompt_ids: list[int]
    seed: int
    deadline: int  # the step that trains it
    number: int  # admission order over the run: request ids and the order of submission
    completions: list[Completion]

    @property
    def complete(self) -> bool:
        return all(c.done for c in self.completions)

    def rollouts(self, prompt_index: int) -> list[Rollout]:
        return [Rollout(prompt_index=prompt_index, prompt_token_ids=list(self.prompt_ids),
                        completion_token_ids=list(c.tokens), logprobs=list(c.logprobs), finish_reason=c.finish_reason,
                        truncated=c.finish_reason == "length", versions=list(c.versions))
                for c in self.completions]


@dataclass
class Phase:
    """What one generation phase did: rollout/ metrics (docs/metrics.md)."""

    seconds: float = 0.0
    engine_steps: int = 0
    requests: int = 0  # requests submitted (one per unfinished completion)
    resumed: int = 0  # of them, continued from a prefix
    resumed_tokens: int = 0  # their prefixes' tokens, which the engine prefills again (its KV was the old weights')
    tokens: int = 0  # tokens generated in this phase, for any group
    pool_groups: int = 0  # groups in the pool when the phase started
    problems: list[Problem] = field(default_factory=list)  # the problems of the groups due, admission order

    def add(self, later: Phase) -> None:
        """Count a later phase of the same step (dynamic sampling's extra rounds) into this one."""
        self.seconds += later.seconds
        self.engine_steps += later.engine_steps
        self.requests += later.requests
        self.resumed += later.resumed
        self.resumed_tokens += later.resumed_tokens
        self.tokens += later.tokens


class RolloutPool:
    """The groups one engine has in flight (module docstring). Every rank of a tensor-parallel engine keeps an
    identical pool: they admit the same problems with the same seeds, and the engine returns the same tokens."""

    def __init__(self, engine: StreamingEngine, spec: SamplingSpec, group_size: int, groups_per_step: int,
                 max_staleness: int) -> None:
        if max_staleness < 1:
            raise ValueError(f"max_staleness {max_staleness}: the pool is for k >= 1 (k = 0 is engine.generate)")
        self.engine = engine
        self.spec = spec  # sampling parameters; n and seed are set per request
        self.max_staleness = max_staleness  # the capacity: no trained token is ever older
        self.bound = max_staleness  # the k in force for new groups (rollout.max_staleness auto: `set_bound`)
        # (first deadline, G, B): the sizes of the groups due from that step on (algorithm.group_size auto: `resize`)
        self.sizes: list[tuple[int, int, int]] = [(0, group_size, groups_per_step)]
        self.groups: list[PoolGroup] = []
        self.admitted = 0  # groups admitted over the run

    # ------------------------------------------------------------------------------------------------
    def sizes_at(self, step: int) -> tuple[int, int]:
        """(G, B): the group size and the groups per step of the groups due at `step`."""
        _, group_size, groups = next(entry for entry in reversed(self.sizes) if entry[0] <= step)
        return group_size, groups

    @property
    def groups_per_step(self) -> int:
        return self.sizes[-1][2]  # of the groups admitted last

    def resize(self, group_size: int, groups_per_step: int, step: int) -> None:
        """Groups of `group_size` completions, `groups_per_step` per step, for the deadlines from `step` on
        (algorithm.group_size auto: a G chosen at step s applies from s + k, the first deadline with no group in
        flight; the groups due before keep the G they were admitted with)."""
        if any(g.deadline >= step for g in self.groups):
            raise ValueError(f"rollout pool: groups due at step {step} or later are already in flight; a new group "
                             f"size applies from the first deadline without any")
        self.sizes = [entry for entry in self.sizes if entry[0] < step] + [(step, group_size, groups_per_step)]

    def set_bound(self, k: int) -> None:
        """The staleness bound for the groups admitted from now on, 0 <= k <= max_staleness (rollout.max_staleness
        auto). k = 0: a step admits and completes its own groups, as the synchronous loop does. The groups in flight
        keep the deadlines they were admitted with: after a lower k their tokens may still be up to the old k
        versions old (never more than max_staleness)."""
        if not 0 <= k <= self.max_staleness:
            raise ValueError(f"rollout pool: staleness bound {k} outside 0 .. {self.max_staleness}")
        self.bound = k

    def open_slots(self, step: int) -> dict[int, int]:
        """Deadline -> its free slots, for the deadlines step .. step + k with any (in order; k: the bound in
        force)."""
        taken = Counter(g.deadline for g in self.groups)
        slots = {d: self.sizes_at(d)[1] - taken[d] for d in range(step, step + self.bound + 1)}
        return {d: free for d, free in slots.items() if free > 0}

    def admit(self, problems: list[Problem], prompt_ids: list[list[int]], step: int, seed: int,
              due_now: bool = False) -> None:
        """Admit groups at `step`, each into the earliest step in step .. step + k with a free slot (problem i gets the
        seed rollout_seed(seed, i), as `generate` seeds prompt i). `due_now`: due at `step` itself, outside the slots
        (dynamic sampling's extra round, after the step's own groups have left: `run(step)` again generates them)."""
        free = self.open_slots(step)
        for i, (problem, ids) in enumerate(zip(problems, prompt_ids, strict=True)):
            deadline = step if due_now else next((d for d, n in free.items() if n), None)
            if deadline is None:
                raise ValueError(f"the rollout pool is full at step {step}: {len(self.groups)} groups for "
                                 f"{self.groups_per_step} per step and max_staleness {self.max_staleness}")
            if not due_now:
                free[deadline] -= 1
            self.groups.append(PoolGroup(problem, list(ids), rollout_seed(seed, i), deadline, self.admitted,
                                         [Completion() for _ in range(self.sizes_at(deadline)[0])]))
            self.admitted += 1

    # ------------------------------------------------------------------------------------------------
    def run(self, step: int) -> tuple[list[PoolGroup], Phase]:
        """Step `step`'s generation phase (the engine holds version step - 1): every unfinished completion runs until
        the groups due at `step` are complete; the rest are paused. Returns the due groups (admission order), which
        leave the pool, and what the phase did."""
        started = time.perf_counter()
        due = self._due(step)
        phase = Phase(pool_groups=len(self.groups))
        self._generate(step, due, phase)
        check_staleness(due, step, self.max_staleness)
        self.groups = [g for g in self.groups if g.deadline != step]
        phase.problems = [g.problem for g in due]
        phase.seconds = time.perf_counter() - started
        return due, phase

    def _generate(self, step: int, due: list[PoolGroup], phase: Phase) -> None:
        """The colocated engine streams every unfinished completion until the `due` groups are complete, then the
        others are paused (aborted, their tokens so far kept)."""
        version = step - 1
        live: dict[str, Completion] = {}
        requests = []
        for group, j, request in self._requests(phase):
            live[request.request_id] = group.completions[j]
            requests.append(request)
        self.engine.add_requests(requests)
        idle = 0
        while not all(g.complete for g in due):
            deltas = self.engine.step()
            phase.engine_steps += 1
            idle = 0 if deltas else idle + 1
            if idle >= STALL_STEPS:
                waiting = [rid for rid, c in live.items() if not c.done]
                raise RuntimeError(f"rollout pool at step {step}: the engine returned nothing for {idle} steps in "
                                   f"a row with {len(waiting)} requests unfinished (first: {waiting[:3]})")
            for delta in deltas:
                completion = live[delta.request_id]
                completion.tokens += delta.token_ids
                completion.logprobs += delta.logprobs
                completion.versions += [version] * len(delta.token_ids)
                phase.tokens += len(delta.token_ids)
                if delta.finish_reason is not None:
                    completion.finish_reason = delta.finish_reason
                    del live[delta.request_id]
        self.engine.abort(list(live))  # paused: their tokens so far are in the pool

    def _requests(self, phase: Phase, skip: Callable[[PoolGroup, int], bool] = lambda group, j: False,
                  ) -> Iterator[tuple[PoolGroup, int, StreamRequest]]:
        """A request for each unfinished completion j of each group (admission order) that `skip` does not leave
        out, counted into `phase`."""
        for group in sorted(self.groups, key=lambda g: g.number):
            for j, completion in enumerate(group.completions):
                if not completion.done and not skip(group, j):
                    phase.requests += 1
                    phase.resumed += bool(completion.tokens)
                    phase.resumed_tokens += len(completion.tokens)
                    yield group, j, self._request(group, j, completion)

    def _due(self, step: int) -> list[PoolGroup]:
        """The groups due at `step` (admission order): exactly the step's slots, none left from an earlier step."""
        due = [g for g in self.groups if g.deadline == step]
        if len(due) != self.sizes_at(step)[1] or any(g.deadline < step for g in self.groups):
            raise RuntimeError(f"rollout pool at step {step}: {len(due)} groups due, expected "
                               f"{self.sizes_at(step)[1]}; deadlines {sorted(g.deadline for g in self.groups)}")
        return due

    def _request(self, group: PoolGroup, j: int, completion: Completion) -> StreamRequest:
        if completion.tokens:
            completion.resumed += 1
        seed = group.seed + j if not completion.resumed else rollout_seed(group.seed, j, completion.resumed)
        spec = dataclasses.replace(self.spec, n=1, seed=seed, max_tokens=self.spec.max_tokens - len(completion.tokens))
        return StreamRequest(f"pool-{group.number}-{j}-{completion.resumed}", group.prompt_ids + completion.tokens,
                             spec)

    # ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """JSON-serialisable: every group in flight with its completions so far (a checkpoint's trainer state)."""
        groups = [{"uid": g.problem.uid, "prompt_ids": g.prompt_ids, "seed": g.seed, "deadline": g.deadline,
                   "number": g.number, "completions": [dataclasses.asdict(c) for c in g.completions]}
                  for g in self.groups]
        return {"admitted": self.admitted, "bound": self.bound, "sizes": [list(entry) for entry in self.sizes],
                "groups": groups}

    def load_state_dict(self, state: dict, problems: dict[str, Problem]) -> None:
        """Restore `state_dict`'s groups; `problems` maps uid -> problem (the training set)."""
        missing = [g["uid"] for g in state["groups"] if g["uid"] not in problems]
        if missing:
            raise ValueError(f"the rollout pool holds problems the training set does not have: {missing[:3]}")
        self.admitted = int(state["admitted"])
        self.bound = int(state.get("bound", self.max_staleness))
        if "sizes" in state:  # (a checkpoint from before group_size auto with k >= 1: the constructor's sizes)
            self.sizes = [(int(d), int(g), int(b)) for d, g, b in state["sizes"]]
        self.groups = [PoolGroup(problems[g["uid"]], list(g["prompt_ids"]), int(g["seed"]), int(g["deadline"]),
                                 int(g["number"]), [Completion(**c) for c in g["completions"]])
                       for g in state["groups"]]


def check_staleness(due: list[PoolGroup], step: int, max_staleness: int) -> None:
    """The bound, on the groups due at `step` (trained by the update from version step - 1): every token sampled by
    weight version step - 1 - max_staleness or later. The colocated pool holds it by construction; rollout servers
    label each token with their own version, so a token outside the bound is an error, not a metric."""
    oldest = step - 1 - max_staleness
    for group in due:
        versions = [v for c in group.completions for v in c.versions]
        if versions and min(versions) < oldest:
            raise RuntimeError(f"rollout pool at step {step}: a token of group {group.number} was sampled by "
                               f"weight version {min(versions)}, more than rollout.max_staleness "
                               f"{max_staleness} before the learner's {step - 1}")


def token_staleness(rollouts: list[Rollout], version: int) -> list[list[int]]:
    """Per completion of `rollouts`, per token: how many weight versions before `version` (the learner's, before this
    step's update) it was sampled at."""
    return [[version - v for v in r.versions] for r in rollouts]


def staleness(rollouts: list[Rollout], version: int) -> list[int]:
    """`token_staleness`, flattened over the completions."""
    return [age for ages in token_staleness(rollouts, version) for age in ages]
