"""Recall probe: real GSM8K / MATH-500 problems, their gold answers rendered in the forms policies write (recall rules
1-3 of docs/verifier.md's #59 section), beside the same forms with a wrong value and hedges; our verifier beside
Math-Verify on each form.

    .venv/bin/python scripts/bench/verifier_recall_probe.py [--gsm8k 150] [--math 100] [--seed 59] [--show 3]

Problems are drawn with `--seed` from ../shared/data (GSM8K test; MATH-500 items whose gold is a plain number); the
script says so and exits 0 when the folder is absent. Each problem gets every form that applies to it (a spelling
that needs four digits is only made for golds of four digits or more; currency only for money questions; a unit
only where the question names one; an equation only where the question asks for a variable). The forms are
templates written from the rules, not from our verifier's code:

  spelling  the value after "The answer is" or in a box: number words (hyphenated, with "and"), scientific notation
            (LaTeX, e), thousands grouped by a space, a thin space, a narrow no-break space, LaTeX's "\\,", "{,}", an
            apostrophe or dots, a decimal comma, a unicode minus, currency before / after (with and without a space,
            "USD", "dollars"), trailing zeros, the asked unit spelled out or abbreviated
  commit    the last value committed to: a closing sentence restating the question's words, "the number of ... is",
            "Therefore, ... is", the last of labelled boxes, a box then a remainder or a check, "x = v" for the asked
            variable (a MATH variable, or one the response lets stand for the asked quantity), bold / heading answer
            lines, a last line that is only the value, "####"
  think     a reasoning block closed before the answer
  hedge     two candidates ("or", two boxes, "either"), "maybe" / "probably", a disowned value, the value only inside a
            reasoning block (closed with nothing after, never closed), the value in another unit than asked

Each honest form is also made with a wrong value (the gold + 1, or x 2 for a scale form) in the same template: a
wrong credit there is a false positive. Math-Verify is `verify(parse("$" + gold + "$"), parse(response))`, as
scripts/bench/bench_verifier.py runs it. Prints per form: n, honest missed (ours / Math-Verify), wrong credited,
hedges credited; then per family; with --show, up to that many of our misses and false credits per form.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import sys
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
from grpo_train.verifier import judge_with_timeout, warm_up  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"

# ---------------------------------------------------------------- numbers spelled


def num(d: Decimal) -> str:
    """The plain decimal spelling: '18', '-8', '12.5'."""
    s = format(d.normalize(), "f") if d != d.to_integral_value() else str(int(d))
    return s


def words(n: int, hyphen: bool = True, use_and: bool = False) -> str | None:
    ones = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
            "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
    tens = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
    if n < 0:
        inner = words(-n, hyphen, use_and)
        return None if inner is None else "minus " + inner
    if n >= 10**9:
        return None

    def below_1000(k: int) -> list[str]:
        out = []
        if k >= 100:
            out += [ones[k // 100], "hundred"]
            k %= 100
            if k and use_and:
                out.append("and")
        if k >= 20:
            t = tens[k // 10]
            if k % 10:
                out += [f"{t}-{ones[k % 10]}"] if hyphen else [t, ones[k % 10]]
            else:
                out.append(t)
        elif k:
            out.append(ones[k])
        return out

    if n == 0:
        return "zero"
    parts = []
    for scale, name in ((10**6, "million"), (10**3, "thousand"), (1, "")):
        if n >= scale:
            parts += below_1000(n // scale) + ([name] if name else [])
            n %= scale
    return " ".join(parts)


def grouped(d: Decimal, sep: str, dec: str = ".") -> str:
    sign = "-" if d < 0 else ""
    s = num(abs(d))
    whole, _, frac = s.partition(".")
    groups = []
    while len(whole) > 3:
        groups.insert(0, whole[-3:])
        whole = whole[:-3]
    groups.insert(0, whole)
    return sign + sep.join(groups) + (dec + frac if frac else "")


def scientific(d: Decimal) -> tuple[str, str] | None:
    """('1.08 \\times 10^{2}', '1.08e2') for 108; None for small or non-integer values."""
    if d != d.to_integral_value() or abs(d) < 100:
        return None
    sign = "-" if d < 0 else ""
    digits = str(abs(int(d)))
    exp = len(digits) - 1
    mant = digits[0] + ("." + digits[1:].rstrip("0") if digits[1:].rstrip("0") else "")
    return f"{sign}{mant} \\times 10^{{{exp}}}", f"{sign}{mant}e{exp}"


# ---------------------------------------------------------------- the question


_PRONOUN = {"he", "she", "they", "it", "we", "you", "i"}
_DETS = {"the", "his", "her", "their", "its", "our", "my", "your", "each", "this", "that", "all"}
_IRREGULAR = {"have": "had", "make": "made", "spend": "spent", "buy": "bought", "sell": "sold", "get": "got",
              "pay": "paid", "take": "took", "give": "gave", "eat": "ate", "read": "read", "run": "ran",
              "find": "found", "lose": "lost", "win": "won", "write": "wrote", "drive": "drove", "ride": "rode",
              "bring": "brought", "catch": "caught", "see": "saw", "put": "put", "cut": "cut", "sit": "sat",
              "swim": "swam", "throw": "threw", "do": "did", "go": "went", "grow": "grew", "keep": "kept",
              "leave": "left", "feed": "fed", "build": "built", "sleep": "slept", "send": "sent", "draw": "drew",
              "fly": "flew", "bake": "baked", "pick": "picked", "use": "used", "need": "needed", "save": "saved",
              "earn": "earned", "collect": "collected", "owe": "owed", "break": "broke"}  # fmt: skip
_UNITS = {  # the asked unit -> its abbreviation, another unit and the factor into it
    "hours": ("h", "minutes", 60), "minutes": ("min", "seconds", 60), "seconds": ("s", None, None),
    "miles": ("mi", None, None), "feet": ("ft", "inches", 12), "inches": ("in", None, None),
    "pounds": ("lbs", "ounces", 16), "ounces": ("oz", None, None), "kilograms": ("kg", "grams", 1000),
    "grams": ("g", None, None), "meters": ("m", "centimeters", 100), "kilometers": ("km", "meters", 1000),
    "gallons": ("gal", "quarts", 4), "liters": ("L", "milliliters", 1000), "days": ("days", "hours", 24),
    "weeks": ("wks", "days", 7), "years": ("yr", "months", 12), "cents": ("¢", None, None),
    "centimeters": ("cm", None, None), "dollars": ("USD", "cents", 100),
}


def lower_first(sentence: str) -> str:
    """'She reads ...' -> 'she reads ...'; a name or '{v}' stays."""
    first = sentence.split(" ", 1)[0]
    return sentence[0].lower() + sentence[1:] if first.lower() in _PRONOUN | _DETS | {"there"} else sentence


def third_person(verb: str) -> str:
    if verb in ("have",):
        return "has"
    if verb in ("do", "go"):
        return verb + "es"
    if re.search(r"(?:s|sh|ch|x|z)$", verb):
        return verb + "es"
    if re.search(r"[^aeiou]y$", verb):
        return verb[:-1] + "ies"
    return verb + "s"


def past(verb: str) -> str:
    if verb in _IRREGULAR:
        return _IRREGULAR[verb]
    if verb.endswith("e"):
        return verb + "d"
    if re.search(r"[^aeiou]y$", verb):
        return verb[:-1] + "ied"
    return verb + "ed"


def question_of(problem: str) -> str:
    sentences = re.split(r"(?<=[.?!])\s+", problem.strip())
    asked = [s for s in sentences if s.endswith("?")]
    return (asked[-1] if asked else sentences[-1]).strip()


def asked(problem: str, dataset: str) -> dict:
    """What the question asks, read from its words: {'noun', 'closing' (a sentence template with {v}), 'money',
    'unit', 'variable'}; a key is absent where the question's form does not give it."""
    q = question_of(problem)
    out: dict = {}
    sign = r"\\\$" if dataset == "math" else r"\$"  # MATH's "$" opens math; its money is "\$"
    out["money"] = bool(re.search(sign + r"|\bdollars?\b|\bmoney\b|\bhow much (?:does|did|do|will|would) .*\b(?:cost|"
                                  r"pay|spend|earn|make|save|charge)", problem, re.I))  # fmt: skip
    out["money"] = out["money"] and not re.search(r"\bcents\b", q, re.I)  # "In cents, what is ...": not dollars
    aux_words = r"(?:do|does|did|will|would|can|could|are|were|is|was|has|have|had|remain|remained)"
    if m := re.search(rf"\bhow many ((?:(?!{aux_words}\b)[a-z][a-z\-]*)(?: (?!{aux_words}\b)[a-z][a-z\-]*)?)"
                      rf"(?= {aux_words}\b)", q, re.I):  # the noun up to the verb: "how many pages does"
        noun = m.group(1)
        rest = q[m.end():].rstrip("?").strip()
        aux_m = re.match(r"(do|does|did|will|would|can|could)\s+(.*)", rest, re.I)
        out["noun"] = noun
        if noun.lower() in _UNITS:
            out["unit"] = noun.lower()
        if aux_m:
            aux, body = aux_m.group(1).lower(), aux_m.group(2)
            toks = body.split()
            k = 0
            if toks and (toks[0].lower() in _PRONOUN or toks[0][:1].isupper()):
                k = 1
                while k < len(toks) and toks[k][:1].isupper() and toks[k].lower() not in _PRONOUN:
                    k += 1  # "Mr. Smith", "Mary Ann"
            elif toks and toks[0].lower() in _DETS and len(toks) > 1:
                k = 2
            if k and k < len(toks):
                subj, verb, tail = " ".join(toks[:k]), toks[k].lower(), " ".join(toks[k + 1 :])
                subj = subj[0].upper() + subj[1:]
                if aux == "does":
                    v = third_person(verb)
                elif aux == "did":
                    v = past(verb)
                elif aux == "do":
                    v = verb
                else:
                    v = f"{aux} {verb}"
                out["closing"] = re.sub(r"\s+", " ", f"{subj} {v} {{v}} {noun} {tail}").strip() + "."
        elif m2 := re.match(r"(are|were|is|was)\s+there\b\s*(.*)", rest, re.I):
            closing = f"There {m2.group(1).lower()} {{v}} {noun} {m2.group(2)}"
            out["closing"] = re.sub(r"\s+", " ", closing).strip() + "."
        elif m2 := re.match(r"(are|were|is|was|remain|remained|will be|would be)\b\s*(.*)", rest, re.I):
            out["closing"] = re.sub(r"\s+", " ", f"{{v}} {noun} {m2.group(1).lower()} {m2.group(2)}").strip() + "."
            out["closing"] = out["closing"][0].upper() + out["closing"][1:]
    elif m := re.search(r"\bhow much (?:money )?(do|does|did|will|would)\s+(.*)\?", q, re.I):
        aux, body = m.group(1).lower(), m.group(2)
        toks = body.split()
        if len(toks) >= 2 and (toks[0].lower() in _PRONOUN or toks[0][:1].isupper()):
            verb = toks[1].lower()
            v = {"does": third_person, "did": past, "do": lambda x: x}.get(aux, lambda x: f"{aux} {x}")(verb)
            amount = "${v}" if out["money"] else "{v}"
            out["closing"] = re.sub(r"\s+", " ", f"{toks[0]} {v} {amount} {' '.join(toks[2:])}").strip() + "."
            out["closing"] = out["closing"][0].upper() + out["closing"][1:]
    if m := re.search(r"\bwhat (?:is|was|will be|would be|are) (the [a-z][a-z' \-]*?)(?=\s+(?:in|for|if|when|that|"
                      r"after|on|at|from|to|with|between|does|do|did|will|would)\b|\?|,)", q, re.I):  # fmt: skip
        out["noun_phrase"] = m.group(1)
    if m := re.search(r"\b(?:value of|solve for|find|compute|what is|determine)\s*\$\s*([a-zA-Z])\s*\$", q):
        out["variable"] = m.group(1)
    if m := re.search(r"\bin ((?:[a-z]+ )?(?:dollars|hours|minutes|seconds|miles|feet|inches|pounds|ounces|"
                      r"kilograms|grams|meters|kilometers|gallons|liters|days|weeks|years|cents|centimeters))\b", q):
        out["unit"] = m.group(1).split()[-1]
    return out


# ---------------------------------------------------------------- the forms


def honest_forms(p: dict, v: Decimal) -> dict[str, str]:
    """form name -> response text for the value v (the gold's, or a wrong one in the same template)."""
    a, work, s = p["asked"], p["work"], num(v)
    f: dict[str, str] = {}
    pre = (work + "\n") if work else ""
    is_int = v == v.to_integral_value()
    if is_int and abs(v) < 10**9:
        n = int(v)
        f["spell:words"] = f"{pre}The answer is {words(n)}."
        f["spell:words-and"] = f"{pre}The answer is {words(n, use_and=True)}."
        f["spell:words-nohyphen"] = f"{pre}The answer is {words(n, hyphen=False)}."
        f["spell:words-capital"] = f"{pre}{words(n)[0].upper() + words(n)[1:]}."
        f["spell:words-boxed"] = f"{pre}The answer is $\\boxed{{\\text{{{words(n)}}}}}$."
        if noun := a.get("noun"):
            f["spell:words-noun"] = f"{pre}The answer is {words(n)} {noun}."
    if sci := scientific(v):
        f["spell:sci-latex"] = f"{pre}The answer is ${sci[0]}$."
        f["spell:sci-boxed"] = f"{pre}The answer is $\\boxed{{{sci[0]}}}$."
        f["spell:sci-e"] = f"{pre}The answer is {sci[1]}."
        f["spell:sci-E+"] = f"{pre}The answer is {sci[1].replace('e', 'E+')}."
        ascii_sci = re.sub(r"[{}]", "", sci[0].replace("\\times", "x"))  # "1.08 x 10^2"
        f["spell:sci-x"] = f"{pre}The answer is {ascii_sci}."
        unicode_sci = re.sub(r"[{}]", "", sci[0].replace("\\times", "\u00d7"))  # "1.08 × 10^2"
        f["spell:sci-unicode"] = f"{pre}The answer is {unicode_sci}."
    if is_int and abs(v) >= 1000:
        for scale, word in ((10**9, "billion"), (10**6, "million"), (10**3, "thousand")):
            if abs(v) >= scale:
                f["spell:scale-word"] = f"{pre}The answer is {num(v / scale)} {word}."
                break
    if is_int and 100 < v < 200:
        f["spell:words-a-hundred"] = f"{pre}The answer is a {words(int(v), use_and=True).removeprefix('one ')}."
    if abs(v) >= 1000:
        for name, sep in (("space", " "), ("thin", "\u2009"), ("nnbsp", "\u202f"), ("apostrophe", "'"),
                          ("rsquo", "\u2019")):  # fmt: skip
            f[f"spell:sep-{name}"] = f"{pre}The answer is {grouped(v, sep)}."
        f["spell:sep-latex-thin"] = f"{pre}The answer is $\\boxed{{{grouped(v, chr(92) + ',')}}}$."
        f["spell:sep-latex-brace"] = f"{pre}The answer is $\\boxed{{{grouped(v, '{,}')}}}$."
        if abs(v) >= 10**6 or not is_int:
            f["spell:sep-dot"] = f"{pre}The answer is {grouped(v, '.', ',')}."
    if not is_int:
        f["spell:decimal-comma"] = f"{pre}The answer is {s.replace('.', ',')}."
        f["spell:decimal-comma-boxed"] = f"{pre}The answer is $\\boxed{{{s.replace('.', ',')}}}$."
    if v < 0:
        f["spell:unicode-minus"] = f"{pre}The answer is {s.replace('-', chr(0x2212))}."
        f["spell:unicode-minus-boxed"] = f"{pre}$\\boxed{{{s.replace('-', chr(0x2212))}}}$"
    if is_int:
        f["spell:zeros"] = f"{pre}The answer is {s}.00."
        f["spell:zeros-boxed"] = f"{pre}The answer is $\\boxed{{{s}.0}}$."
    if a["money"] and v >= 0:
        f["spell:cur-before"] = f"{pre}The answer is ${s}."
        f["spell:cur-before-latex"] = f"{pre}The answer is $\\boxed{{\\${s}}}$."
        f["spell:cur-after"] = f"{pre}The answer is {s}$."
        f["spell:cur-after-space"] = f"{pre}The answer is {s} $."
        f["spell:cur-euro-after"] = f"{pre}The answer is {s} €."
        if is_int:
            f["spell:cur-euro-comma"] = f"{pre}The answer is {s},00 €."
        f["spell:cur-usd"] = f"{pre}The answer is USD {s}."
        f["spell:cur-usd-after"] = f"{pre}The answer is {s} USD."
        f["spell:cur-us-dollar"] = f"{pre}The answer is US${s}."
        f["spell:cur-dollars"] = f"{pre}The answer is {s} dollars."
        f["spell:cur-dollars-boxed"] = f"{pre}The answer is $\\boxed{{{s} \\text{{ dollars}}}}$."
        if is_int:
            f["spell:cur-zeros"] = f"{pre}The answer is ${grouped(v, ',')}.00."
        if abs(v) >= 1000:
            f["spell:cur-dot-comma"] = f"{pre}The answer is {grouped(v, '.', ',')},00 €."
    if unit := a.get("unit"):
        abbr = _UNITS[unit][0]
        f["spell:unit-spelled"] = f"{pre}The answer is {s} {unit}."
        f["spell:unit-abbr"] = f"{pre}The answer is {s} {abbr}."
        f["spell:unit-boxed"] = f"{pre}The answer is $\\boxed{{{s}\\text{{ {unit}}}}}$."
    elif noun := a.get("noun"):
        f["spell:noun-after"] = f"{pre}The answer is {s} {noun}."
        f["spell:noun-boxed"] = f"{pre}$\\boxed{{{s} \\text{{ {noun}}}}}$"
    # ---- commitments
    money = "$" if a["money"] and v >= 0 else ""
    if closing := a.get("closing"):
        f["commit:closing"] = pre + closing.replace("${v}", money + s).replace("{v}", s)
        f["commit:closing-so"] = pre + "So " + lower_first(closing).replace("${v}", money + s).replace("{v}", s)
    if noun := a.get("noun"):
        f["commit:number-of"] = f"{pre}So the number of {noun} is {s}."
        f["commit:therefore-noun"] = f"{pre}Therefore, the total number of {noun} is {s}."
        f["commit:labelled-boxes"] = (f"{pre}First step: $\\boxed{{{num(v + 7)}}}$ in the first part.\n"
                                      f"Number of {noun}: $\\boxed{{{s}}}$")
    if np := a.get("noun_phrase"):
        f["commit:the-x-is"] = f"{pre}So {np} is {money}{s}."
        f["commit:therefore-x"] = f"{pre}Therefore, {np} is {money}{s}."
        f["commit:labelled-boxes-x"] = (f"{pre}Intermediate: $\\boxed{{{num(v + 7)}}}$.\n"
                                        f"{np[0].upper() + np[1:]}: $\\boxed{{{s}}}$.")
    f["commit:box-remainder"] = f"{pre}The answer is $\\boxed{{{s}}}$, with 3 left over."
    f["commit:box-check"] = f"{pre}$\\boxed{{{s}}}$\n\nCheck: substituting back gives a total of {num(v + 5)}."
    f["commit:box-then-other"] = f"{pre}So the answer is $\\boxed{{{s}}}$. (The first total was {num(v * 2 + 3)}.)"
    if var := a.get("variable"):
        f["commit:var-eq"] = f"{pre}${var} = {s}$"
        f["commit:var-eq-display"] = f"{pre}$$\n{var} = {s}\n$$"
        f["commit:var-eq-so"] = f"{pre}So ${var} = {s}$."
    if noun := a.get("noun"):
        f["commit:let-x"] = f"Let $x$ be the number of {noun}.\n{pre}$x = {s}$"
    f["commit:bold-final"] = f"{pre}**Final answer:** {s}"
    f["commit:bold-final-in"] = f"{pre}**Final answer: {s}**"
    f["commit:bold-answer"] = f"{pre}**Answer:** {money}{s}"
    f["commit:heading"] = f"{pre}### Final Answer\n{s}"
    f["commit:heading-boxed"] = f"{pre}### Final Answer\n$\\boxed{{{s}}}$"
    f["commit:final-plain"] = f"{pre}Final answer: {s}"
    f["commit:therefore-answer"] = f"{pre}Therefore, the answer is {s}."
    f["commit:last-line"] = f"{pre}{s}"
    f["commit:last-line-bold"] = f"{pre}**{s}**"
    f["commit:last-line-math"] = f"{pre}${s}$"
    f["commit:last-line-paren"] = f"{pre}\\({s}\\)"
    f["commit:hashes"] = f"{pre}#### {s}"
    f["commit:label-answer"] = f"{pre}Answer = {s}"
    f["commit:therefore-colon"] = f"{pre}Therefore: {s}"
    if work:
        f["commit:arrow"] = f"{pre}\u2192 {s}"  # a last line after the working
    # ---- reasoning blocks
    think = f"<think>\n{work or 'Working it out.'}\nSo it is {s}.\n</think>\n\n"
    f["think:answer"] = f"{think}The answer is {s}."
    f["think:boxed"] = f"{think}$\\boxed{{{s}}}$"
    f["think:bare"] = f"{think}{s}"
    if closing := a.get("closing"):
        f["think:closing"] = think + closing.replace("${v}", money + s).replace("{v}", s)
    f["think:bold"] = f"{think}**Final answer:** {s}"
    return f


def hedge_forms(p: dict, g: Decimal) -> dict[str, str]:
    """form name -> a response that must not be credited though it names the gold g."""
    a, work, s = p["asked"], p["work"], num(g)
    w = num(g + 1)
    pre = (work + "\n") if work else ""
    f = {
        "hedge:or": f"{pre}The answer is {s} or {w}.",
        "hedge:or-gold-last": f"{pre}The answer is {w} or {s}.",
        "hedge:two-boxes": f"{pre}The answer is $\\boxed{{{s}}}$ or $\\boxed{{{w}}}$.",
        "hedge:either": f"{pre}It is either {s} or {w}.",
        "hedge:maybe": f"{pre}The answer is maybe {s}.",
        "hedge:probably": f"{pre}The answer is probably {s}, but I am not sure.",
        "hedge:maybe-last": f"{pre}Maybe {s}?",
        "hedge:disowned": f"{pre}The answer is not {s}.",
        "hedge:disowned-after": f"{pre}The answer is $\\boxed{{{s}}}$. Wait, that is wrong.",
        "hedge:think-only": f"<think>\n{work or 'Working it out.'}\nThe answer is {s}.\n</think>",
        "hedge:think-unclosed": f"<think>\n{work or 'Working it out.'}\nThe answer is {s}.",
        "hedge:think-boxed-only": f"<think>\n{work or 'Working.'}\n$\\boxed{{{s}}}$\n</think>\n\nI cannot decide.",
        "hedge:approx": f"{pre}The answer is approximately {s}.",
        "hedge:box-or": f"{pre}$\\boxed{{{s} \\text{{ or }} {w}}}$",
        "hedge:last-line-two": f"{pre}{s}\n{w}",
        "hedge:last-line-perhaps": f"{pre}Perhaps\n{s}",
        "hedge:arrows-two": f"{pre}\u2192 {s}\n\u2192 {w}",
        "hedge:oops": f"{pre}#### {s}\nOops, that is wrong.",
    }
    if g == g.to_integral_value() and abs(g) < 10**9:
        f["hedge:words-or"] = f"{pre}The answer is {words(int(g))} or {words(int(g + 1))}."
    if closing := a.get("closing"):
        money = "$" if a["money"] and g >= 0 else ""
        f["hedge:closing-or"] = pre + closing.replace("${v}", f"{money}{s} or {money}{w}").replace("{v}", f"{s} or {w}")
        f["hedge:closing-maybe"] = pre + "Maybe " + lower_first(closing).replace("${v}", money + s).replace("{v}", s)
    if var := a.get("variable"):
        f["hedge:var-or"] = f"{pre}${var} = {s}$ or ${var} = {w}$"
    if unit := a.get("unit"):
        other, factor = _UNITS[unit][1], _UNITS[unit][2]
        if other:
            f["hedge:other-unit"] = f"{pre}The answer is {num(g * factor)} {other}."
            f["hedge:other-unit-closing"] = f"{pre}So it takes {num(g * factor)} {other}."
            f["hedge:gold-other-unit"] = f"{pre}The answer is {s} {other}."
    return f


# ---------------------------------------------------------------- the problems


def load(n_gsm8k: int, n_math: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    problems = []
    gsm = [json.loads(line) for line in (DATA / "gsm8k_test.jsonl").read_text().splitlines() if line.strip()]
    for row in rng.sample(gsm, min(n_gsm8k, len(gsm))):
        lines = row["answer"].split("\n")
        gold = lines[-1].split("####")[-1].strip().replace(",", "")
        work = "\n".join(re.sub(r"<<[^>]*>>", "", x) for x in lines[:-2])  # the working without its last line
        problems.append({"dataset": "gsm8k", "problem": row["question"], "gold": gold, "work": work})
    math = [json.loads(line) for line in (DATA / "math500_test.jsonl").read_text().splitlines() if line.strip()]
    numeric = [r for r in math if re.fullmatch(r"-?\d+(?:\.\d+)?", r["answer"].strip())]
    for row in rng.sample(numeric, min(n_math, len(numeric))):
        first = row["solution"].split("\n\n")[0]
        work = first if "boxed" not in first and row["answer"] not in first and len(first) < 400 else ""
        problems.append({"dataset": "math", "problem": row["problem"], "gold": row["answer"].strip(), "work": work})
    for p in problems:
        p["asked"] = asked(p["problem"], p["dataset"])
    return problems


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gsm8k", type=int, default=150, help="GSM8K test problems drawn")
    ap.add_argument("--math", type=int, default=100, help="MATH-500 problems drawn (plain-number golds)")
    ap.add_argument("--seed", type=int, default=59)
    ap.add_argument("--show", type=int, default=0, help="print up to this many of our misses / false credits per form")
    ap.add_argument("--no-mv", action="store_true", help="skip Math-Verify (ours only, faster)")
    return ap


def main() -> None:
    args = parser().parse_args()
    if not (DATA / "gsm8k_test.jsonl").exists() or not (DATA / "math500_test.jsonl").exists():
        print(f"skipped: {DATA} has no gsm8k_test.jsonl / math500_test.jsonl (the probe needs real problems)")
        return
    logging.disable(logging.WARNING)
    if not args.no_mv:
        from math_verify import parse, verify
    warm_up()
    problems = load(args.gsm8k, args.math, args.seed)
    # counts[form] = [n honest, ours missed, MV missed, n wrong, ours credited, MV credited]
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * 6)
    examples: dict[str, list[str]] = defaultdict(list)
    start = time.perf_counter()

    def score(response: str, p: dict) -> tuple[bool, bool]:
        ours = judge_with_timeout(response, p["gold"], p["dataset"], p["problem"], timeout_s=5.0).correct
        mv = False if args.no_mv else bool(verify(parse(f"${p['gold']}$"), parse(response)))
        return ours, mv

    for p in problems:
        g = Decimal(p["gold"])
        wrong = g + 1
        good, bad = honest_forms(p, g), honest_forms(p, wrong)
        for form, response in good.items():
            ours, mv = score(response, p)
            c = counts[form]
            c[0] += 1
            c[1] += not ours
            c[2] += not mv
            if not ours and len(examples[form]) < args.show:
                examples[form].append(f"missed [{p['gold']}] {response[-160:]!r}")
            if form in bad:
                ours, mv = score(bad[form], p)
                c[3] += 1
                c[4] += ours
                c[5] += mv
                if ours and len(examples[form]) < 2 * args.show:
                    examples[form].append(f"credited wrong [{p['gold']}] {bad[form][-160:]!r}")
        for form, response in hedge_forms(p, g).items():
            ours, mv = score(response, p)
            c = counts[form]
            c[3] += 1
            c[4] += ours
            c[5] += mv
            if ours and len(examples[form]) < args.show:
                examples[form].append(f"credited hedge [{p['gold']}] {response[-160:]!r}")
    seconds = time.perf_counter() - start
    n_g = sum(p["dataset"] == "gsm8k" for p in problems)
    print(f"{len(problems)} problems ({n_g} GSM8K, {len(problems) - n_g} MATH-500), seed {args.seed}, {seconds:.0f} s")
    print(f"{'form':28s} {'honest':>6s} {'missed ours/MV':>15s} {'wrong|hedge':>11s} {'credited ours/MV':>17s}")
    families: dict[str, list[int]] = defaultdict(lambda: [0] * 6)
    for form in sorted(counts):
        c = counts[form]
        fam = families[form.split(":")[0]]
        for i in range(6):
            fam[i] += c[i]
        print(f"{form:28s} {c[0]:6d} {c[1]:7d} /{c[2]:5d}  {c[3]:11d} {c[4]:8d} /{c[5]:5d}")
        for e in examples.get(form, []):
            print("      " + e)
    print("\nper family")
    total = [0] * 6
    for name, c in sorted(families.items()):
        total = [t + x for t, x in zip(total, c, strict=True)]
        print(f"{name:28s} {c[0]:6d} {c[1]:7d} /{c[2]:5d}  {c[3]:11d} {c[4]:8d} /{c[5]:5d}")
    print(f"{'total':28s} {total[0]:6d} {total[1]:7d} /{total[2]:5d}  {total[3]:11d} {total[4]:8d} /{total[5]:5d}")


if __name__ == "__main__":
    main()
