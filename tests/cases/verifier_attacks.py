"""The verifier's adversarial suite: what a reward-hacking policy would try, and the correct answers beside it,
filed by category (each file beside it holds some categories; within a category, the cases in the order the six
adversarial passes of docs/verifier.md added them).

Each case is (category, problem, response, gold, dataset, expected, why). `expected` is the reward the
labelling conventions (grpo_train/verifier/rules.py's CONVENTIONS) give (True: the response is right). Categories:
  echo        the question's own expression handed back, re-spelled (convention 5 and the answer-form rule)
  hedge       two values offered (convention 2)
  qualifier   a bound or an approximation instead of a value ("more than 5", "about 5")
  scale       a multiplier or scale word that makes another number ("5 thousand", "5k")
  unit        a unit of the kind asked but another unit of it ("5 minutes" for hours)
  rate        a rate ("5 per day", "5 apiece") where the question asks for an amount
  operand     the box as an operand of a larger expression, or words and signs glued to it
  equation    an equation whose left side is neither a name nor equal to its right side
  invisible   content that is not printed (\\phantom), or decoration around a visible answer (\\color)
  near        a value within Math-Verify's float tolerance of the gold but not equal to it
  bad_gold    a gold that cannot be scored: judge must answer status "error" naming it
  cost        inputs that would take SymPy seconds or hours: refused at once (timed by the benchmark)
  recall      correct answers that a stricter verifier could wrongly reject (false-negative checks)
  commit      the last value committed to for the asked quantity, without a marker, and the hedges it could open
  spelling    other spellings of one number (scientific notation, other locales' separators) and ambiguous ones
  reasoning   a reasoning block: only what follows its close is the answer

Used by tests/test_verifier_attacks.py, scripts/bench/bench_verifier.py (false positives, false negatives and the
p99 time per cost input) and scripts/maint/verifier_harness.py. Not imported by the package.
"""

from __future__ import annotations

from cases.verifier_attacks_commit import COMMIT, REASONING, SPELLING
from cases.verifier_attacks_echo import ECHO
from cases.verifier_attacks_form import BAD_GOLD, COST, EQUATION, INVISIBLE, NEAR
from cases.verifier_attacks_hedge import HEDGE
from cases.verifier_attacks_qualifier import OPERAND, QUALIFIER, RATE, SCALE, UNIT
from cases.verifier_attacks_recall import RECALL
from cases.verifier_case import Case

CASES: list[Case] = [*ECHO, *HEDGE, *QUALIFIER, *SCALE, *UNIT, *RATE, *OPERAND, *EQUATION, *INVISIBLE, *NEAR,
                     *BAD_GOLD, *COST, *RECALL, *COMMIT, *SPELLING, *REASONING]
