"""The verifier's answer-form rules and cost bound (the rules are stated in docs/verifier.md).

`too_big` reads the answer's text before any parser sees it; `pending_operations` reads the unevaluated
SymPy tree that Math-Verify's LaTeX parser builds (it keeps `99^2 + 99 + 1` as a sum of a power, not
9901), and `evaluated_by_parser` reads from the text what the parser evaluates while parsing
("\\binom{31}{28}", "\\frac{6}{8}"). Evaluating a node here (`doit`) is safe because `too_big` bounded its size.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from sympy import Add, Basic, Function, Integer, MatrixBase, Mul, Pow, Tuple, UnevaluatedExpr, factorint
from sympy.core.relational import Relational
from sympy.logic.boolalg import Boolean
from sympy.sets.sets import Set

from grpo_train.verifier.text import EQUALS, MATH_SPAN, as_number, canonical, matching_brace, math_content

# What each bound refuses, and what such answers cost SymPy: docs/verifier.md, "Cost bounds".
MAX_SYMPY_CHARS = 400  # a longer answer is compared as text only
MAX_DEPTH = 8  # brackets nested deeper than this are not an answer (MATH golds and boxed solutions nest at most 3)
MAX_BRACES = 60
MAX_EXPONENT = 10**4  # 2^10000 has 3011 digits: still cheap for SymPy
MAX_GROUP_EXPONENT = 12  # expanding (x + 1)^100 or (x+1)^20 / (x-1)^20 is slow; MATH-500 golds raise no bracket
MAX_FUNCTIONS = 3  # trigonometric, hyperbolic, log and exp calls in one answer (MATH golds hold at most 1)
MAX_EXPANDED_TERMS = 100  # terms of a power of a bracketed sum once expanded: (a+b+c+d+e)^20 has 10626
MAX_POWER_DIGITS = 20_000  # digits of a literal's power: 1.0000001^{10000} has 70000; 2^{10000} has 3011
# A literal's power beside a function: \sin(10^{1000}) is already slow to compare, \sin(10^{100}) is not
MAX_FUNCTION_POWER_DIGITS = 300
MAX_FUNCTION_POWER = 6  # \sin^{99}(x) is slow to compare (MATH golds raise a function to at most 2)
MAX_ROOT_INDEX = 100  # \sqrt[999999]{2} is slow to compare
MAX_OPERANDS = 100  # numbers and letters in one answer (a 390-letter product is slow; MATH golds hold under 30)

# ----------------------------------------------------------------------------------------------------
# Cost bound: refuse at once what SymPy could spend seconds or hours on

_UNBOUNDED = re.compile(r"\\(?:sum|prod|int|iint|oint|lim|Gamma)(?![a-zA-Z])|\d{40,}")
_SMALL_LITERAL = re.compile(
    r"[-+]?\s*(?:\d{1,3}(?:\.\d{1,3})?|\.\d{1,3}|\d{1,3}\s*/\s*\d{1,3}|\\frac\{\d{1,3}\}\{\d{1,3}\})"
)
_FACTORIAL_OF_BIG = re.compile(r"[)}\]!]\s*!|\d{4,}\s*!")
_FUNCTION = re.compile(r"\\(?:arc)?(?:sin|cos|tan|cot|sec|csc)h?(?![a-zA-Z])|\\(?:log|ln|lg|exp)(?![a-zA-Z])")
_FUNCTION_POWER = re.compile(r"^\s*(?:_\s*(?:\{[^{}]*\}|\w)\s*)?(?:\^\s*(?:\{[^{}]*\}|\w))?")  # \log_2, \sin^2
_BINOMIAL = re.compile(r"\\[dt]?binom\b|\\choose\b")
_SMALL_BINOMIAL = re.compile(r"\\[dt]?binom\s*\{\s*\d{1,4}\s*\}\s*\{\s*\d{1,4}\s*\}")


def too_big(latex: str) -> str | None:
    """Why the answer is too big to hand to SymPy, or None. A final answer is small: it has no sum or
    integral to evaluate, shallow brackets, and exponents, factorials and binomials of small literals
    (or of short symbolic expressions). Everything else is compared as text only."""
    if len(latex) > MAX_SYMPY_CHARS or latex.count("{") > MAX_BRACES:
        return f"longer than {MAX_SYMPY_CHARS} characters or {MAX_BRACES} groups"
    if _depth(latex) > MAX_DEPTH:
        return f"brackets nested deeper than {MAX_DEPTH}"
    if _UNBOUNDED.search(latex) or _FACTORIAL_OF_BIG.search(latex):
        return "a sum, product, integral, limit, gamma, huge literal or factorial of a non-literal"
    if len(_BINOMIAL.findall(latex)) > len(_SMALL_BINOMIAL.findall(latex)):
        return "a binomial of anything but small literals"
    functions = _FUNCTION.findall(latex)
    if len(functions) > MAX_FUNCTIONS or _nested_function(latex):
        return f"more than {MAX_FUNCTIONS} functions, or a function of a function"
    if any(int(index) > MAX_ROOT_INDEX for index in _ROOT_INDEX.findall(latex)):
        return f"a root of index above {MAX_ROOT_INDEX}"
    if len(_OPERAND.findall(_COMMAND.sub(" ", latex))) > MAX_OPERANDS:
        return f"more than {MAX_OPERANDS} numbers and letters"
    stacked, plain = 1, 1  # powers of bracketed groups multiply: ((9^9)^9)^9 is 9^729
    for pos, base, exponent in _exponents(latex):
        size = abs(exact_value(exponent) or 1)
        if not _small(exponent) or (base in ")}]" and size > MAX_GROUP_EXPONENT):
            return f"the exponent {exponent[:40]!r} is not small"
        if (why := _power_too_big(latex[:pos].rstrip(), size, bool(functions))) is not None:
            return why
        stacked, plain = (stacked * size, plain) if base in ")}]" else (stacked, max(plain, size))
    if stacked * plain > MAX_EXPONENT:
        return f"powers of powers reach an exponent above {MAX_EXPONENT}"
    return None


_ROOT_INDEX = re.compile(r"\\sqrt\s*\[\s*(\d{1,9})\s*\]")
_OPERAND = re.compile(r"\d+(?:\.\d+)?|[a-zA-Z]")
_COMMAND = re.compile(r"\\[a-zA-Z]+")
_LITERAL_BASE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)$")


def _power_too_big(before: str, size: Fraction | int, function: bool = False) -> str | None:
    """Why a power of what ends `before` is too big: a literal with too many digits once raised (fewer beside a
    function: SymPy reduces a trigonometric function's argument to all its digits), a bracketed sum with too many
    terms once expanded, a function raised too high; None if it is not."""
    limit = MAX_FUNCTION_POWER_DIGITS if function else MAX_POWER_DIGITS
    if (literal := _LITERAL_BASE.search(before)) and len(literal.group(1).replace(".", "")) * size > limit:
        return f"{literal.group(1)} to the {size} has more than {limit} digits" + (" beside a function" * function)
    if _FUNCTION_END.search(before) and size > MAX_FUNCTION_POWER:
        return f"a function raised to {size}"
    terms = _bracket_terms(before) if before.endswith(")") else 1
    if terms > 1 and math.comb(int(size) + terms - 1, terms - 1) > MAX_EXPANDED_TERMS:
        return f"a sum of {terms} terms to the {size} expands past {MAX_EXPANDED_TERMS} terms"
    return None


_FUNCTION_END = re.compile(_FUNCTION.pattern.replace("(?![a-zA-Z])", "$"))


def _bracket_terms(before: str) -> int:
    """How many terms the bracketed sum that ends `before` shows at its top level."""
    depth, terms = 0, 1
    for pos in range(len(before) - 1, -1, -1):
        ch = before[pos]
        depth += (ch in ")]}") - (ch in "([{")
        if depth == 0:
            return terms
        if depth == 1 and ch in "+-" and before[:pos].rstrip()[-1:] not in ("(", "^", "_", "{", "[", ""):
            terms += 1
    return terms


def _nested_function(latex: str) -> bool:
    """Whether a function's argument holds another function: "\\sin(\\cos x)", "\\log \\log x", "\\tan^{2}{\\tan x}".
    SymPy's simplification of such towers grows fast with each level ("\\tan(\\tan(\\tan(x+1)+1)+1)" outlasts the item
    timeout)."""
    for match in _FUNCTION.finditer(latex):
        rest = _FUNCTION_POWER.sub("", latex[match.end() :], count=1).lstrip()
        if rest.startswith("\\left"):
            rest = rest[5:].lstrip()
        if _FUNCTION.match(rest):
            return True
        if rest[:1] in ("(", "{", "["):
            close = _closing(rest)
            if _FUNCTION.search(rest[: close if close is not None else len(rest)]):
                return True
    return False


def _closing(text: str) -> int | None:
    """Index of the bracket closing text[0], counting brackets of every kind."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch in "([{") - (ch in ")]}")
        if depth == 0:
            return i
    return None


def _depth(latex: str) -> int:
    depth = deepest = 0
    for ch in latex:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


def _exponents(latex: str) -> list[tuple[int, str, str]]:
    """(where its "^" is, the character before it, the text) of every exponent: `^{...}` (balanced), `^\\cmd`
    or `^x`."""
    found = []
    for match in re.finditer(r"\^\s*", latex):
        pos, base = match.end(), latex[: match.start()].rstrip()[-1:]
        if latex.startswith("{", pos):
            close = matching_brace(latex, pos, MAX_SYMPY_CHARS)
            found.append((match.start(), base, latex[pos + 1 : close] if close is not None else latex[pos:]))
        elif command := re.match(r"\\[a-zA-Z]+|.", latex[pos:]):
            found.append((match.start(), base, command.group()))
    return found


def _small(exponent: str) -> bool:
    """A small exponent: no factorial, power or binomial in it, and its integers multiply to at most
    10^4 (a bound on its size without evaluating it: "999 \\cdot 999 \\cdot 999" is not small)."""
    if _SMALL_LITERAL.fullmatch(exponent.strip()):
        return True
    if re.search(r"[!^]|\\[dt]?binom|\\choose|\.\d{4}", exponent):  # 2^{0.5000000000001}: a 10^13-th root
        return False
    return math.prod(int(n) for n in re.findall(r"\d{1,6}", exponent) if n.lstrip("0")) <= MAX_EXPONENT


# ----------------------------------------------------------------------------------------------------
# Operations left undone, read from the text where the parser evaluates them itself

_LITERAL_FRACTION = re.compile(r"\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}|(?<![\d.])(\d+)\s*/\s*(\d+)(?![\d.])")


# A function the answer writes: the parser evaluates some as it reads them (\gcd(X, X), \max(X, X), \det,
# \binom{X}{1}) and SymPy others only when simplifying (\log_{10} 10^{X}, X\sin^2 t + X\cos^2 t): the tree may
# not show them.
_WRITTEN_FUNCTION = re.compile(
    r"\\(?:operatorname\s*\{\s*(\w+)\s*\}|(?:arc)?(sin|cos|tan|cot|sec|csc)h?|(log|ln|lg|exp)"
    r"|(gcd|lcm|min|max|det|arg|Re|Im|bmod|pmod|mod|lfloor|lceil|[dt]?binom|choose))(?![a-zA-Z])"
)
_FAMILY = {"sin": "trig", "cos": "trig", "tan": "trig", "cot": "trig", "sec": "trig", "csc": "trig", "ln": "log",
           "lg": "log", "exp": "log", "dbinom": "binom", "tbinom": "binom", "choose": "binom"}  # fmt: skip


def evaluated_by_parser(latex: str) -> set[str]:
    """Operations the parse tree may not show: a binomial of literals and a fraction of literals that is not
    in lowest terms (6/8, 10/2), which the parser carries out, and every function the text writes (by family:
    sin and cos are both trigonometric, log, ln and exp logarithmic)."""
    found = set()
    for match in _WRITTEN_FUNCTION.finditer(latex):
        name = next(g for g in match.groups() if g is not None)
        found.add("function " + _FAMILY.get(name, name.lower()))
    if _SMALL_BINOMIAL.search(latex) or re.search(r"\d\s*\\choose\s*\d", latex):
        found.add("binomial")
    for match in _LITERAL_FRACTION.finditer(latex):
        num, den = (int(g) for g in (match.groups()[:2] if match.group(1) else match.groups()[2:]))
        if den == 1 or (den and math.gcd(num, den) > 1):
            found.add("fraction")
    return found


# ----------------------------------------------------------------------------------------------------
# Operations left undone, read from the unevaluated tree

_CONTAINERS = (Relational, Boolean, Set, Tuple, MatrixBase, UnevaluatedExpr)


def pending_operations(expr: Basic) -> set[str]:
    """The kinds of operation the expression still carries out ("sum", "product", "fraction", "power",
    "radical" or a function's name), visiting every node once."""
    found: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if not isinstance(node, Basic) or node.is_Atom:
            continue
        stack.extend(node.args)
        if not isinstance(node, _CONTAINERS) and (kind := _pending(node)) is not None:
            found.add(kind)
    return found


def _pending(node: Basic) -> str | None:
    if isinstance(node, Add):
        return _pending_sum(node)
    if isinstance(node, Mul):
        return _pending_product(node)
    if isinstance(node, Pow):
        return _pending_power(node)
    if isinstance(node, Function) and not node.doit().has(node.func):
        return type(node).__name__  # log_2 64 is 6, \sin(\pi/6) is 1/2, 5! is 120, |-3| is 3
    return None


def _written_terms(node: Basic) -> int:
    """How many terms a sum shows, a number times a sum counting as that sum's terms: 2x+3-(x-1) has 4."""
    if isinstance(node, Add):
        return sum(_written_terms(term) for term in node.args)
    if isinstance(node, Mul):
        sums = [f for f in node.args if isinstance(f, Add)]
        numbers = (f for f in node.args if f is not sums[0])  # 2(x+1), (x+1)/2
        if len(sums) == 1 and all(f.is_Number or (isinstance(f, Pow) and f.base.is_Number) for f in numbers):
            return _written_terms(sums[0])
    return 1


def _pending_sum(node: Add) -> str | None:
    """A sum is done when no term is zero and no two terms are alike (the evaluated sum has as many)."""
    if any(term.is_zero and term.is_Number for term in node.args):
        return "sum"
    return "sum" if len(Add.make_args(node.doit())) < _written_terms(node) else None


def _flat_factors(node: Basic) -> list[Basic]:
    if isinstance(node, Mul):
        return [f for arg in node.args for f in _flat_factors(arg)]
    return [node]


def _pending_product(node: Mul) -> str | None:
    """A product is done when it shows at most one number over at most one number, in lowest terms
    (2/3 pi; a sign aside), no explicit factor 1 except as the 1 of 1/x, and no two factors that
    combine (x*x, sqrt2*sqrt3)."""
    if Integer(1) in node.args and not (len(node.args) == 2 and _is_reciprocal(node.args[1 - node.args.index(1)])):
        return "product"  # 1*(X)
    flat = _flat_factors(node)
    if sum(factor == -1 for factor in flat) > 1:
        return "product"  # -(-(X)): two signs that cancel
    numerators, denominators, others = [], [], []
    for factor in flat:
        if factor.is_Rational:
            numerators.append(abs(factor.p))
            if factor.q != 1:
                denominators.append(factor.q)
        elif isinstance(factor, Pow) and factor.base.is_Integer and factor.exp == -1:
            denominators.append(abs(int(factor.base)))
        else:
            others.append(factor)
    if numerators.count(1) and len(numerators) > 1:
        numerators.remove(1)  # the sign of -x, the 1 of 1/x
    if len(numerators) > 1 or len(denominators) > 1:
        return "product"
    if denominators and (denominators[0] == 1 or (numerators and math.gcd(numerators[0], denominators[0]) > 1)):
        return "fraction"
    combines = len(others) > 1 and not any(isinstance(f, MatrixBase) for f in others)
    return "product" if combines and len(Mul.make_args(Mul(*others))) < len(others) else None


def _is_reciprocal(factor: Basic) -> bool:
    return isinstance(factor, Pow) and factor.exp.is_negative


def _pending_power(node: Pow) -> str | None:
    base, exp = node.args
    if base.is_Integer and exp == -1:
        return None  # a denominator
    if node.free_symbols:
        if exp in (0, 1) or (isinstance(base, Pow) and exp.is_Number and base.exp.is_Number):
            return "power"  # x^1, x^0, (x^2)^3
        return None
    if node.doit().is_Rational or (exp.is_Integer and exp != -1 and not base.is_Atom):
        return "power"  # 99^2, 8^(1/3), (sqrt 2)^2, (1 + sqrt 2)^2
    if base.is_Rational and exp.is_Rational:  # a root of a number
        if not base.is_Integer or base < 0 or exp < 0 or abs(exp.p) >= exp.q:
            return "radical"  # sqrt(3/8), sqrt(-4), 2^(-1/2), 2^(3/2)
        if any(power >= exp.q for power in factorint(int(base), limit=10**4).values()):
            return "radical"  # sqrt(242) = 11 sqrt 2
    if isinstance(base, Pow) or (exp.is_negative and base.has(Pow)):
        return "radical" if node.doit() != node else None  # 1/sqrt(2), 2/(1 + sqrt 2)
    return None


# ----------------------------------------------------------------------------------------------------
# What the problem asks for

_ASKS = {
    "decimal": re.compile(r"\bdecimals?\b", re.IGNORECASE),
    "fraction": re.compile(r"\bfraction\b", re.IGNORECASE),
    "factor": re.compile(r"\bfactor(?:i[sz]e[ds]?|i[sz]ation|ed|ing)?\b(?!\s+of\b)", re.IGNORECASE),
    "expand": re.compile(r"\bexpand(?:ed|ing)?\b|\bmultiply\s+out\b", re.IGNORECASE),
    "mixed": re.compile(r"\bmixed\s+numbers?\b", re.IGNORECASE),
    "scientific": re.compile(r"\bscientific\s+notation\b", re.IGNORECASE),
}


def asks_for(problem: str | None) -> set[str]:
    """What form the problem asks the answer in: "decimal", "fraction", "factor", "expand", "mixed" (a mixed number)
    or "scientific" (scientific notation)."""
    if not problem:
        return set()
    prose = MATH_SPAN.sub(" ", problem)  # "$x^2$ is a factor of" is not an instruction
    return {form for form, pattern in _ASKS.items() if pattern.search(prose)}


def symbolic_factors(expr: Basic) -> int:
    """How many factors with a variable a product shows, (x+1)^2 counting twice; 0 for a sum."""
    if isinstance(expr, Add):
        return 0
    count = 0
    for factor in _flat_factors(expr):
        if not factor.free_symbols:
            continue
        power = factor.exp if isinstance(factor, Pow) and factor.exp.is_Integer and factor.exp > 0 else 1
        count += int(power) if isinstance(factor, Pow) and isinstance(factor.base, Add) else 1
    return count


def unexpanded(expr: Basic) -> bool:
    """Whether a product or power of a sum with a variable is left in the expression."""
    for node in [expr, *expr.atoms(Mul, Pow)]:
        parts = node.args if isinstance(node, Mul) else node.args[:1] if isinstance(node, Pow) else ()
        power_of_sum = not isinstance(node, Pow) or (node.exp.is_Integer and node.exp > 1)
        if power_of_sum and node.free_symbols and any(isinstance(p, Add) and p.free_symbols for p in parts):
            return True
    return False


# ----------------------------------------------------------------------------------------------------
# Echoes of the question


@functools.lru_cache(maxsize=256)
def _statements(problem: str) -> tuple[frozenset[str], frozenset[str]]:
    """The problem's equations ("a + b + c + d = 0", "z = c") and the expressions it writes alone ("m + n" in
    "Find $m + n$"), canonical, from its math spans and their comma-, semicolon- or quad-separated parts."""
    equations, expressions = set(), set()
    for match in MATH_SPAN.finditer(problem):
        for part in {math_content(match), *re.split(r",|;|\\q?quad(?![a-zA-Z])", math_content(match))}:
            if key := canonical(part.strip().rstrip(".,;")):  # "\\[z = c.\\]"
                (equations if EQUALS.search(part) else expressions).add(key)
    return frozenset(equations), frozenset(expressions)


def restates_given(answer: str, gold: str, problem: str | None) -> bool:
    """An equation answered as the problem writes one of its own ("a + b + c + d = 0" for gold 0, from "such
    that $a + b + c + d = 0$"), unless that equation is the gold: a given restated, not an answer."""
    if problem is None or not EQUALS.search(answer):
        return False
    key = canonical(answer.strip().rstrip(".,;"))
    return key in _statements(problem)[0] and key != canonical(gold)


def asked_expression(side: str, problem: str | None) -> bool:
    """Whether the problem writes this expression alone, as the thing to find ("m + n" in "Find $m + n$"): such a
    left side names the value as well as a letter does ("m + n = 47")."""
    return problem is not None and canonical(side) in _statements(problem)[1]


def echoes_question(answer: str, gold: str, response: str, problem: str | None) -> bool:
    """A value-equal answer written as the question writes it ("write 57/160 as a decimal" -> 57/160):
    one of the problem's math spans (or, without the problem, the start of the response's chain
    "57/160 = ... = 57/160"), when the gold is not written there too."""
    key = canonical(answer)
    if len(key) < 2:
        return False
    if problem is not None:
        spans = {canonical(math_content(m)) for m in MATH_SPAN.finditer(problem)}
        parts = {canonical(p) for span in spans for p in re.split(r"=|,|\\quad", span)}
        return key in spans | parts and canonical(gold) not in spans | parts
    return len(key) > 3 and re.search(re.escape(key) + r"=(?!=)", re.sub(r"\s+", "", response)) is not None


# ----------------------------------------------------------------------------------------------------
# Exact arithmetic on plain numbers (the sides of "3 + 5 = 8"), without SymPy and without eval

# "x" between numbers is a times sign in prose arithmetic ("9 x 2"); a lone "x" elsewhere is a variable (no value).
_ARITH_TOKEN = re.compile(
    r"\s*(\d+(?:\.\d+)?|\.\d+|\\frac\{\d+\}\{\d+\}|\\times|\\cdot|\\div|[-+*/×÷()]|x(?=\s*[\d.(]))"
)


def exact_value(latex: str) -> Fraction | None:
    """The exact value of a short sum, difference, product or quotient of plain numbers, else None."""
    if len(latex) > 200:
        return None
    tokens, pos, text = [], 0, latex.replace(",", "").strip()
    while pos < len(text):
        match = _ARITH_TOKEN.match(text, pos)
        if match is None:
            return None
        tokens.append(match.group(1))
        pos = match.end()
    try:
        value, rest = _expression(tokens, 0)
    except (ZeroDivisionError, IndexError, ValueError):
        return None
    return value if rest == len(tokens) else None


def _expression(tokens: list[str], pos: int) -> tuple[Fraction, int]:
    value, pos = _term(tokens, pos)
    while pos < len(tokens) and tokens[pos] in "+-":
        right, after = _term(tokens, pos + 1)
        value, pos = (value + right if tokens[pos] == "+" else value - right), after
    return value, pos


def _term(tokens: list[str], pos: int) -> tuple[Fraction, int]:
    value, pos = _factor(tokens, pos)
    while pos < len(tokens) and tokens[pos] in ("*", "/", "×", "x", "÷", "\\times", "\\cdot", "\\div"):
        right, after = _factor(tokens, pos + 1)
        value, pos = (value / right if tokens[pos] in ("/", "÷", "\\div") else value * right), after
    return value, pos


def _factor(tokens: list[str], pos: int) -> tuple[Fraction, int]:
    token = tokens[pos]
    if token == "-":
        value, pos = _factor(tokens, pos + 1)
        return -value, pos
    if token == "(":
        value, pos = _expression(tokens, pos + 1)
        if tokens[pos] != ")":
            raise ValueError("unbalanced")
        return value, pos + 1
    number = as_number(token)
    if number is None:
        raise ValueError(token)
    return number.value, pos + 1
