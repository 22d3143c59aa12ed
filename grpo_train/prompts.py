"""Prompts: a Problem as the text / token ids the model sees, from a built-in format or a template file.

    renderer = PromptRenderer(tokenizer, cfg.data)
    ids = renderer.check_length(problem, cfg.model.max_model_len - cfg.rollout.max_tokens)

Built-in formats (`data.template`):
- `chat`: the tokenizer's chat template; optional system message (`data.system_prompt`; empty sends none,
  though a model's template may add its own default), then one user turn "question\\ninstruction".
- `fewshot`: the same, preceded by `data.num_shots` worked examples as user/assistant turns. Synthetic
  problems get synthetic examples (categories in turn, fixed seed, answered "3 + 4 = 7. The answer is
  \\boxed{7}."); GSM8K and MATH problems get the built-in examples below (at most 4), so prompts never
  depend on which files are present.
- `raw`: "Question: ...\\nAnswer:" for base models, preceded by the same examples when num_shots > 0
  (no system prompt, no instruction).

A template file (`data.template_file`) replaces the question and instruction with a Jinja template over the
problem's record (Problem.record(): question, gold, uid, kind and the row's fields, e.g. {{ numbers }}); a
field the record lacks is an error naming the problem. Two forms:
- a text file (.jinja, .txt, ...): with `data.template: chat` the rendered text is the user turn (after
  data.system_prompt, if any); with `raw` it is the whole prompt. Jinja drops one trailing newline.
- a .yaml / .yml file: a list of {role, content} messages, each content a Jinja template, through the chat
  template. A last message with role assistant is continued by the model (a prefill such as "<think>").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from grpo_train.config import TEMPLATES, DataConfig
from grpo_train.data import DataError, Problem
from grpo_train.synthetic import synthetic_shots


class PromptTooLongError(ValueError):
    """A rendered prompt that does not fit the model's context; the message names the problem uid."""


# Built-in worked examples for the fewshot and raw templates: (question, worked answer). Written for this
# project in the style of each dataset; they are not rows of GSM8K or MATH.
GSM8K_SHOTS = (
    (
        "A baker fills 4 trays with 12 cookies each. She gives away 15 cookies. How many cookies are left?",
        "She bakes 4 * 12 = 48 cookies. After giving away 15 she has 48 - 15 = 33 left. "
        "The answer is \\boxed{33}.",
    ),
    (
        "Tom reads 25 pages on each weekday and 40 pages on each day of the weekend. "
        "How many pages does he read in a week?",
        "On 5 weekdays he reads 5 * 25 = 125 pages and on 2 weekend days 2 * 40 = 80 pages. "
        "In total he reads 125 + 80 = 205 pages. The answer is \\boxed{205}.",
    ),
    (
        "A bike costs $240. Maria has saved $90 and saves $30 more every week. "
        "How many more weeks must she save to buy the bike?",
        "She still needs 240 - 90 = $150. At $30 a week that takes 150 / 30 = 5 weeks. "
        "The answer is \\boxed{5}.",
    ),
    (
        "A garden has 3 rows of 8 tomato plants, and each plant gives 6 tomatoes. Half of the tomatoes are "
        "sold. How many tomatoes are sold?",
        "There are 3 * 8 = 24 plants, giving 24 * 6 = 144 tomatoes. Half of them is 144 / 2 = 72. "
        "The answer is \\boxed{72}.",
    ),
)
MATH_SHOTS = (
    (
        "Solve for $x$: $3x - 7 = 11$.",
        "Adding 7 to both sides gives $3x = 18$, so $x = 6$. The answer is \\boxed{6}.",
    ),
    (
        "What is the sum of the interior angles of a hexagon, in degrees?",
        "The interior angles of an $n$-gon sum to $180(n-2)$ degrees. "
        "For $n = 6$ this is $180 \\cdot 4 = 720$. The answer is \\boxed{720}.",
    ),
    (
        "Simplify $\\frac{18}{24}$.",
        "The greatest common divisor of 18 and 24 is 6, so $\\frac{18}{24} = \\frac{3}{4}$. "
        "The answer is \\boxed{\\frac{3}{4}}.",
    ),
    (
        "Find all real $x$ such that $x^2 - 5x + 6 = 0$.",
        "The quadratic factors as $(x - 2)(x - 3) = 0$, so $x = 2$ or $x = 3$. The answer is \\boxed{2, 3}.",
    ),
)
_BUILTIN_SHOTS = {"gsm8k": GSM8K_SHOTS, "math": MATH_SHOTS}


class PromptRenderer:
    """Turns a Problem into the prompt text / token ids of the configured template."""

    def __init__(self, tokenizer: Any, cfg: DataConfig):
        if cfg.template not in TEMPLATES:
            raise ValueError(f"data.template: {cfg.template!r} is not one of {', '.join(TEMPLATES)}")
        if cfg.template != "raw" and not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"data.template={cfg.template}: the tokenizer has no chat template; use data.template=raw "
                "for base models"
            )
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.num_shots = 0 if cfg.template == "chat" or cfg.template_file else cfg.num_shots
        self.template = TemplateFile(cfg.template_file) if cfg.template_file else None
        examples = synthetic_shots(cfg.synthetic, self.num_shots)
        self._synthetic_shots = [(example.question, example.solution) for example in examples]

    def shots(self, problem: Problem) -> list[tuple[str, str]]:
        """The (question, worked answer) examples shown before `problem`."""
        if self.num_shots == 0:
            return []
        if "category" in problem.meta:
            return self._synthetic_shots
        if problem.dataset not in _BUILTIN_SHOTS:
            raise ValueError(f"data.template=fewshot: there are no built-in examples for data.kind "
                             f"{problem.dataset}; write the prompt in a data.template_file")
        builtin = _BUILTIN_SHOTS[problem.dataset]
        if self.num_shots > len(builtin):
            raise ValueError(
                f"data.num_shots={self.num_shots}: there are only {len(builtin)} built-in "
                f"{problem.dataset} examples"
            )
        return list(builtin[: self.num_shots])

    def _user_turn(self, question: str) -> str:
        return f"{question}\n{self.cfg.instruction}" if self.cfg.instruction else question

    def text(self, problem: Problem) -> str:
        if self.template is not None:
            return self._from_template(problem)
        shots = self.shots(problem)
        if self.cfg.template == "raw":
            blocks = [f"Question: {q}\nAnswer: {a}" for q, a in shots]
            return "\n\n".join([*blocks, f"Question: {problem.question}\nAnswer:"])
        messages = [{"role": "system", "content": self.cfg.system_prompt}] if self.cfg.system_prompt else []
        for question, answer in shots:
            messages += [
                {"role": "user", "content": self._user_turn(question)},
                {"role": "assistant", "content": answer},
            ]
        messages.append({"role": "user", "content": self._user_turn(problem.question)})
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _from_template(self, problem: Problem) -> str:
        assert self.template is not None
        # The question and the gold also go by the names the data gives them (data.question_key / answer_key).
        aliases = {key: value for key, value in ((self.cfg.question_key, problem.question),
                                                 (self.cfg.answer_key, problem.gold)) if key}
        rendered = self.template.render(problem, aliases)
        if isinstance(rendered, str) and self.cfg.template == "raw":
            return rendered
        if isinstance(rendered, str):
            system = [{"role": "system", "content": self.cfg.system_prompt}] if self.cfg.system_prompt else []
            rendered = [*system, {"role": "user", "content": rendered}]
        prefill = rendered[-1]["role"] == "assistant"  # the model continues that message
        return self.tokenizer.apply_chat_template(rendered, tokenize=False, add_generation_prompt=not prefill,
                                                  continue_final_message=prefill)

    def token_ids(self, problem: Problem) -> list[int]:
        # Chat templates write their own special tokens (BOS included where the model wants one); raw text
        # gets the tokenizer's usual ones, as a base model saw in pretraining.
        add_special = self.cfg.template == "raw"
        return list(self.tokenizer(self.text(problem), add_special_tokens=add_special)["input_ids"])

    def check_length(self, problem: Problem, max_prompt_tokens: int) -> list[int]:
        """The prompt's token ids; PromptTooLongError naming the problem when they exceed the budget."""
        ids = self.token_ids(problem)
        if len(ids) > max_prompt_tokens:
            raise PromptTooLongError(
                f"problem {problem.uid}: the prompt is {len(ids)} tokens, over the budget of "
                f"{max_prompt_tokens} (model.max_model_len - rollout.max_tokens); raise model.max_model_len, "
                "or shorten the prompt (data.num_shots, data.system_prompt)"
            )
        return ids


class TemplateFile:
    """`data.template_file` compiled once: a Jinja text template, or (.yaml / .yml) a list of chat messages
    whose contents are Jinja templates. A field the record lacks is a DataError naming the problem."""

    def __init__(self, path: str):
        import jinja2  # comes with transformers

        self.path = path
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
        text = Path(path).read_text()
        self.messages: list[tuple[str, Any]] | None = None
        if Path(path).suffix in (".yaml", ".yml"):
            self.messages = [(m["role"], env.from_string(m["content"])) for m in yaml.safe_load(text)]
        else:
            self.text = env.from_string(text)

    def render(self, problem: Problem, aliases: dict[str, Any] | None = None) -> str | list[dict[str, str]]:
        """The prompt text, or the chat messages, for `problem`; `aliases` are more names for its fields."""
        import jinja2

        record = {**(aliases or {}), **problem.record()}
        try:
            if self.messages is None:
                return self.text.render(record)
            return [{"role": role, "content": template.render(record)} for role, template in self.messages]
        except jinja2.UndefinedError as err:
            raise DataError(f"data.template_file {self.path}: problem {problem.uid}: {err.message}; its record has "
                            f"{', '.join(sorted(record))}") from None
