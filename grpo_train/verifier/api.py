"""Answer verifier for GSM8K and MATH: extract -> normalise -> compare -> score.

    is_correct(response, gold, "gsm8k")       # -> bool, in this process
    judge(response, gold, "math", problem)    # -> Judgement(correct, formatted, answer, status, error, rule)

Batches go through `grpo_train.rewards.workers` (worker processes, hard per-item timeout). The work is split
over the modules of grpo_train/verifier/: text (what is printed, normalised spellings, plain numbers), extract
(finding the final answer), boxes (the boxed answer, and a qualifier or operand right around the box), hedge
(retractions, hedges, other values offered), form (answer-form rules, cost bound), units (scale words, the unit
asked) and compare (equality).
The rules below follow the labelling conventions of ../shared/data/README.md (numbered C1-C8 here, stated in
rules.py's CONVENTIONS); a false positive is a reward a policy learns to collect, so where a rule must guess it
refuses. Every refusal is named (Judgement.rule): rules.py lists the names in the order they run, each with a
one-line statement and an example each way; docs/verifier.md's rule list is generated from it.

Extraction, in this order; the first that finds something wins. Only what is printed counts: \\phantom{..},
zero-width characters, comments (HTML's "<!-- .. -->", LaTeX's "\\iffalse .. \\fi" and comment environment, markdown's
"[//]: # (..)" line; an unclosed one runs to the end), HTML a page does not render ("<script>", "<style>",
"<template>", "<noscript>", "<? .. ?>") and content in a colour not known to print are dropped, spaces of other widths
("\\u00a0", "\\u2009") are spaces, letters that print as Latin ones (Cyrillic "о", "а", ...; Greek "ο") are read as
them ("$5$ оr $7$" offers two values), and a footnote
("\\footnote{X}") is read as a later paragraph X (it prints below the text); a colour prints when it is a named
colour (red, blue, ...: verifier/text.py's list), a mix of them with at least 20% colour ("green!40"), or a value
(rgb, RGB, HTML, hex, gray, cmyk, hsb) at least that far from white; white, pale or unknown names ("snow",
"none"), "red!5" and "rgb(255,255,255)" hide. A printed colour, bold and sizes are decoration.
  1. `\\boxed{...}` / `\\fbox{...}` (nested braces). Boxes side by side, or with part labels between
     ("\\boxed{7} for part (a) and \\boxed{9}"), are one multi-part answer (C8). Different boxed answers are
     a hedge and score 0 (C2), unless the text between them retracts the earlier ones without a condition
     ("Wait, that is not right ... \\boxed{B}": the last counts, C3; "if that is wrong, \\boxed{B}" is a
     hedge) or a "final answer is X" statement follows the last box (it settles them, as it settles one box
     that disagrees with it), or the boxes are labelled answers to several quantities and the last is the asked
     one: each box has a label (the words before it on its line), the last label names the asked quantity (a word
     of the question from its interrogative up to its data: "What is the area of the rectangle?" -> area,
     rectangle) and no earlier one does, and no label hedges ("Width: \\boxed{4}, area: \\boxed{32}" answers 32;
     "Area: \\boxed{30}, area: \\boxed{32}" and "Guess: \\boxed{30}, area: \\boxed{32}" answer nothing). A clause about
     another quantity after the last box is not another answer ("\\boxed{5} candies, with a remainder of 3"), an
     "or" and a value in it is ("\\boxed{5} candies, or 6 if the rest are shared"). A box holding another box is a
     hedge. Words right around the box belong to it:
     a bound, an approximation, a relation or a negation just before or after it ("at least $\\boxed{5}$",
     "$x > \\boxed{5}$", "not $\\boxed{5}$", "$\\boxed{5}$ or more", "$\\boxed{5}^{+}$", "$\\boxed{5}$?",
     "$\\boxed{5}$ is wrong") leaves no answer, and so does the box as an operand of a larger expression: a number,
     operator or sign before it or a command's argument opening around it ("1\\boxed{5}", "-\\boxed{5}",
     "\\frac{\\boxed{5}}{2}", "10^{\\boxed{5}}"), past spacing, empty groups and closing brackets a power, factorial,
     product, quotient, arrow or "= value" after it ("\\boxed{5}^2", "(\\boxed{5})^2", "\\boxed{5}\\,^2", "\\boxed{5}!",
     "\\boxed{5} = 7"), a digit, lone letter, ordinal or exponent glued on ("\\boxed{5}0", "\\boxed{5}x",
     "\\boxed{5}\\text{th}", "\\boxed{5}\\mathrm{e}3"), or a scale word or a unit other than the one asked right
     after it ("$\\boxed{5}$ thousand"); inside math a term after it (a command that is not text, spacing, a
     closing or a residue's \\pmod, a lone letter that is not a unit, a bracket: "\\boxed{2}\\sqrt{3}", "\\boxed{5}\\,
     x"), and outside math arithmetic after the closing "$" ("$\\boxed{5}$ + 2"); markdown's * and _ are emphasis,
     "= x" names it, and a degree or percent sign (or word) after it is the answer's ("$\\boxed{30}^\\circ$",
     "$\\boxed{28}\\%$", "$\\boxed{28}$ percent"). A qualifier is allowed when it is what the problem asks for:
     "at most" / "at least" when it asks for a greatest or least value, "\\approx" / "about" when it asks to round
     or estimate (without the problem, what it asks is not known and such a bound is allowed). A box opening its
     line takes a line before it that is only a qualifier ("At least\n\n$$\boxed{5}$$").
  2. "The final answer is X" / "Final Answer: X" (the last one). After a task word ("## Step 2: Calculate the
     final answer", "Before giving the final answer, let me check: ...") it states only a value on its own line
     ("To get the final answer: 7").
  3. "The answer is X" / "Answer: X" (the last one). A marker that ends its line over a sentence of working,
     with a "####" line or a box after it, is a heading and states nothing ("**Answer:**\n\nJanet sells ..."), and
     so is one over two or more lines of working with a chain among them ("**Answer:**\n\nDay 1: 70 * 0.3 = 21\nDay
     2: ...\n#### 34"; not over a lone value or a single chain: "Answer:\n7\n...", "Answer:\n3 + 4 = 7\n#### 5").
  4. GSM8K's "#### N".
     For 2-4, earlier statements of the same kind must agree with the last unless a revision comes between
     ("Actually, ... the answer is 9"), and a later sentence retracting the answer for another value with a
     hedge ("Wait, no, it might be 4.") leaves no answer, as for boxes. Statements agree by the value they give:
     a true chain its result, a named value its value, a sentence its one number ("So the answer is 9 * 2 = 18."
     then "The answer is: 18"; "The answer is 3 + 2 = 5.\n#### 5"; an equation whose left sides hold a variable, its
     right side: "our answer is $a+b=-1$" then "The answer is $-1$"); "7 = 5" gives no value and agrees with none, nor
     does "\\sqrt{4} = 7". A chain of grouped thousands is one value, not a list ("34,500-33,000 = $1,500").
     In a statement, "$" before a digit whose would-be math span closes right before a digit is a price
     ("$400 + $60 = $460").
  5. MATH: a response that is just an answer ("$\\frac{1}{3}$"; not one with a hedging word: "Perhaps\n$x = 5$"), or
     whose last sentence concludes ("Therefore, there are 12 sequences."), or whose last line is an equation of
     the variable the question asks for ("Solve for $x$" ... "$x = 5$"; not after a line that hedges or negates,
     not two values: "x = 5 or x = 7", "x = \\pm 5"; "Solve for x" names x without math, "Find a number" names no
     a). GSM8K: a response that is just a value ("**18**") or a true chain ("9 * 2 = 18"), or whose complete last
     sentence names the asked quantity (a question word; "daily" for "day"; a currency sign on the value for a
     question about money: "How much ...", "dollars", "cost", ...) and gives one value in its last clause, true
     chains read as their results ("She gets $7,500 more, so her salary is 50000 + 7500 = $57,500."); a sentence
     with a hedge, a negation, a retraction, a bound or two values in that clause, or a false chain ("50000 + 5000 =
     $57,500") gives none; so does a last line that labels one value, when the label names the asked quantity or is
     "Total" / "Result" ("Total = $18", "Daily earnings: $18"). For MATH and GSM8K a last line or sentence that
     checks the work ("Check: 9 * 2 = 18.") is not the conclusion, unless it retracts or offers another value
     ("Check: $20 also works."). A response cut off mid-sentence concludes nothing.
     A statement's equation stays whole ("The answer is 7 = 5.", "So 2 + 2 = 5."): its last right side alone
     would hide a false left side; the comparison judges it.
A chat token ("<|im_end|>", "</s>") ends the response. A response that opens a reasoning block ("<think>"; or whose
first tag is "</think>": the opening tag was in the prompt) is answered only by what follows the block's close: a
value stated only inside it, the block never closed or nothing answering after it, gives no answer (reasoning_only);
later blocks are dropped to find the answer and read to check it (a hedge inside one still counts). Text before the
opening tag: the response is read whole.
Statements of different kinds (a box, "the final answer is", "the answer is", "####") must give the same number
unless a retraction comes between them ("The answer is 7. #### 5" and "\\boxed{5} #### 7" give nothing).
A statement offering two values with hedging words ("7, or maybe 5", "either 5 or 6"), two values joined in it
("$5$ / $7$", "$5$ apples or $7$ apples", "5, though 7 is also plausible"), a different value right after the
answer ("\\boxed{5} (or possibly 7)", "\\boxed{5} / 7", "\\boxed{5} (7?)", "\\boxed{5}, otherwise 7", "\\boxed{5} ou
7", "\\boxed{5} (7 if counting Tom)", "\\boxed{5} unless Tom ate 2", "The answer is 5. Or 7.", "\\boxed{5} failing that
7", "\\boxed{5} (backup 7)"; what follows a box is read without markdown emphasis, HTML tags, LaTeX spacing and
full-width brackets: "\\boxed{5} _or_ 7", "\\boxed{5}（or 7）", "\\boxed{5} \\; \\text{or} \\; 7"), or a later sentence
offering or correcting to another value ("It could also be 7.", "7 is also possible.", "7 also works.",
"Alternative answer: 7.", "Wait, 6.", "Hmm, actually I think it's 7.", a later line that is only another value or
a label, a relation, an arrow or a bullet and one, in math, code or bold or not: "#### 5\\n7", "P.S. 7", "Note: 7.",
"1) 7", "= 7", "- 7", "\\[7\\]", "`7`"; so once its decoration is dropped: box, font, size and colour commands, HTML,
table bars, a connective or a label with any separator: "\\framebox{7}", "{\\bf 7}", "<sub>7</sub>", "| 7 |", "Hence
7.", "∴ 7", "TL;DR: 7", "Answer = 7", "Seven."; others' or second answers: "Some might say 7.", "A case can be made for
7.", "I'd also accept 7.", "Then again, 7.", "Either that or 7.", "Unless it's 7.", "If not, 7.", "7 cannot be ruled
out.", "Possible answers: 5, 7."), a
value joined to the box that ends its clause ("\\boxed{5} and 7", "\\boxed{5} (also 7)", "\\boxed{5} & 7",
"$\\boxed{5}$, 7", "\\boxed{5} -> 7", "\\boxed{5} vs 7", "\\boxed{5} ≈ 7", "\\boxed{5}\\text{ (or 7)}") or giving
another value under a
condition (another reading of the question: "If the question meant weekly, it would be 35.", "Had he bought 4, the
answer would be 7.", "7 would be correct if ...") gives no answer (C2); a later check of the work ("Wait, let me check:
12 - 3 = 9.", "If we check: 3 + 2 = 5.") and a counterfactual the response denies ("... he would have 6, which is
not what the question says") do not; a chain in such a sentence offers its result, not its operands ("If there are
5 students to each teacher, 180 students would need 180/5 = 36 teachers." after \\boxed{36}; read from its opening
bracket or bare decimal point: "(60+72+42)/3 = 58", ".9*100 = 90"), and a minus sign
after a label is the value's sign ("So the answer is -50." after \\boxed{-50}; "Alt answer -7" offers -7). A
condition right after a box belongs to it only in the box's sentence ("\\boxed{5} unless Tom ate 2"); a new
paragraph starting "If" is a later sentence.
A gold value met only mid-text (a guess, an intermediate step) is never enough (C4). Format reward: the
answer was in \\boxed{} (GSM8K: or "#### N").

Comparison: one value per answer. "x = 1 or x = 2", "\\{1, 2\\}", "3 \\pm 2" and "x = 5 \\quad x = 7" are
lists; a list equals the gold when each item matches a different gold item, in any order ("a_37 = 19, a_3
= 2" answers "a_3 = 2, a_37 = 19"). A number that is bounded, approximated or excluded ("more than 5",
"about 5", "5 or more", "5 (approx.)", "5 max", "5, roughly", "5 (rounded)", "\\approx 5", "\\lesssim 5", "\\not= 5",
"any number except 5", and a few other languages: "etwa 5", "约5") is not that number, nor is a number under a
condition or a choice the gold does not state ("5 (if no apples were eaten)", "either 5"), however its words are
split over text groups ("\\text{mo}\\text{re than }5"); an approximation word anywhere in the answer ("5 apples,
roughly") counts too, and so does a lowercase -ly adverb right before the number ("basically 5", "virtually 5")
unless it keeps the number exact or affirms it ("exactly 5", "only 5", "simply 5", "clearly 5"); a frequency, a
rounding, a tentative or unverified value and an operation in words are not the number either ("often 5", "rounded:
5", "min 5", "5 (tentative)", "x = 5 (assumed)", "5 (floor)", "at the very least 5", "twice 5", "5 doubled"). A rate
("5 per day", "5 each", "5 apiece", "5 apples a week") is not the count a "how many" question asks for unless the
question (the problem's last sentence) asks for a rate: "per", "each", "every", "apiece", "a day", "daily", "rate",
"average", "fast", "speed" or "/".
An equation is read as its last right side only if every left side is a name (x, a_3, f(2), |z|, \\angle ABC, (x,
y), "the answer": no operation or number, in digits or words (English, French, German, Spanish), outside subscripts
and arguments, and no negation: "\\text{not } x", "\\text{wrong}" are no names), an expression the
problem writes alone ("m + n" in "Find $m + n$") or equal to that right side ("2 \\times 9 = 18"); "7 = 5" and
"\\text{seven} = 5" are not 5, "x + y = 0" is not 0. An equation written as the problem writes one of its givens ("a
+ b + c + d = 0") is a given restated, not an answer (unless it is the gold), and a multiple choice is answered by
its letter, not by an equation ("z = c" for (C)), or by its letter and that option's own text as the problem writes
it ("(C) Plane"; "(C) Sphere" names two options and is wrong). Plain numbers (thousands separators, `$`, `.0`, units,
percent, degrees, mixed numbers, repeating decimals; scientific notation with a factor from 1 up to 10: "1.2 \\times
10^6", "1.2e6", not "12 \\times 10^5"; other locales' groups: "1'200'000", "1.200.000" (two dot groups or more: one
is a decimal, "1.200" is 1.2), "1 234,5", "1.234,5"; comma groups stay thousands, "1,234" is 1234; number words
("twenty-five", "minus seven") are read as their digits, not ordinals, fractions or operations in words) and tuples,
intervals and matrices of them are compared exactly as
fractions without SymPy: 1.5 equals 3/2 (C7), 0.33 does not equal 1/3, 28 answers 28% (C6), but "5%" does not answer
5 when neither the gold nor the problem speaks of a percent; work in brackets after the answer that comes to it
exactly is shown work ("18 (3 + 15)", "18 (= 3 + 15)"), any other bracketed value a second one; a multiplier word or
suffix makes another number ("5 million", "5k"; right after the number also "5 score", "5 gross", "5 lakh", "5bn",
"5M", "5 grand", "5 tens", "5 quarters", "5 tenths", "5 ppm", "5 basis points", "5‰", comparisons and factors: "5
more", "5 fewer", "5 short", "5 extra", "5-fold", "5 times", and operations in words: "5 squared", "5 plus tax"),
unless it is the scale the problem asks in ("How many dozen ...", "in thousands of dollars": the word after "how
many", "how much", "number of", "in", "into" or "to" in the problem's last 300 characters: "How many more ..." asks
for "5 more"; a comparison word is also the amount when the question (the last sentence) speaks of a difference or of
what is missing: "than", "still", "need", "left", "remain", ...: "5 more apples" answers "How many does she still
need?"); a unit of the kind the problem asks in but another unit of it is another value ("5 minutes" for "How many
hours ...", "5 cm" for "How many meters", "5 cents" for "How many dollars", "5 rad" for "in degrees", "$5^\\circ$"
for "in radians"; kinds: time, length, mass, volume, money, angle); digits apart with only a space between outside
LaTeX, or a LaTeX space between digits, are two numbers ("1 2", "5\\,7" are not 12, 57; a space groups thousands
only: "1 000", "10\\,000"); an ellipsis after a number leaves it
unfinished ("5...", "5…"); a dash or hyphen before a number is a minus sign ("–5", "‐5", "－5"), not between two
("4–6" is a range); an answer written as a sentence ("Jane started 3 hours ago") is its one number, unless an
operation acts on it ("(some words) \\times \\frac{3}{3}"). Everything else goes to Math-Verify
(LaTeX -> SymPy: sets, intervals, matrices, equations) after decimals are rewritten as exact fractions, and an
equality it finds is confirmed exactly: Math-Verify compares to 15 digits, so pi + 10^-30 would pass. A GSM8K answer
is a number with at most words around it ("18 eggs", "I have 18"): an operation, a command or a variable beside it
("\\sqrt{5}", "5!", "5x", "-(5)", "5?") makes it another value.

The answer-form rule (C5 generalised: an echo is wrong even when the values are equal). A final answer
has carried out every operation the gold has carried out; an answer still holding one is the question's
expression, however it is spelled. It is about what the problem asks, so it applies when the problem is
given (training and evaluation always give it):
  - a number is answered by a number written out in digits (an integer, decimal, fraction in lowest terms,
    mixed number or repeating decimal whose period is not all nines or all zeros; a fraction with a sign in its
    denominator or two signs is not: "\\frac{-1}{-3}", "-\\frac{-1}{3}"): "99^2+99+1", "(X)+0", "1\\cdot(X)",
    "\\binom{31}{28}", "\\log_2 64", "|-3|", "\\sqrt{16}", "2^{10}", "\\frac{6}{8}", "4.\\overline{9}" and
    "\\text{five}" do not answer 9901, ..., 3/4, 5, 5;
  - otherwise the answer may not show an operation left undone that the gold does not show: a sum with
    like terms or a zero term, a product of two numbers or by 1, a fraction not in lowest terms, a power
    or function of numbers with an exact value, a radical with a square factor, of a fraction or in a
    denominator ("242^{1/2}" does not answer 11\\sqrt{2}; "\\frac{\\sqrt{2}}{2}" answers "\\frac{1}{\\sqrt2}"), and
    any function the gold does not write, by family (trigonometric; log, ln and exp; gcd; lcm; min; max; floor;
    ceil; det; binomial; each \\operatorname): the parser or SymPy evaluates some of them away ("\\gcd(X, X)",
    "\\max(X, X)", "\\log_{10} 10^{X}", "X\\sin^2 t + X\\cos^2 t" do not answer X);
  - what the problem asks for is the form: asked for a decimal, a fraction is not final; asked for a
    fraction, a repeating decimal is not; asked for a mixed number, an improper fraction or a decimal is not;
    asked for scientific notation, a factor below 1 or from 10 up is not ("52 \\times 10^{-5}"); asked to factor,
    a sum (or a product of fewer factors than the gold's) is not; asked to expand, a product of sums is not;
  - an answer written as one of the problem's math spans, or parsed to the same tree (terms of sums and
    products ordered), when the gold is not written there, is an echo ("write $\\frac{57}{160}$ as a
    decimal" -> 57/160; "(6a+4)/5-(3a+1)/4" for "simplify $\\frac{4+6a}{5}-\\frac{1+3a}{4}$").
The rule reads Math-Verify's unevaluated parse tree (and the text for what the parser evaluates itself:
binomials and fractions of literals), so it holds for every spelling of the same operation. Without the
problem only the chain echo applies ("X = ... = \\boxed{X}"). Its limit: an operation SymPy does not
evaluate on its own (log 64 / log 2 beside an irrational gold) is not seen as undone.

A gold that cannot be scored (empty, unbalanced, only delimiters, an empty part such as "\\frac{}{7}", "y =", "a^",
"^2" or "(1,)", empty tags "<answer></answer>", a chat template's or a tokenizer's token ("<unk>", "[MASK]"), a
division by zero in any spelling ("1 \\div 0", "\\frac{1}{0.0}", a divisor that comes to zero: "5/(1-1)"), boxes that
disagree, side by side or not, a placeholder such as "N/A", "N.A.", "None", "nan", "-nan", "?", "error", "xxx",
"{answer}", "no answer", "not applicable", "—", a spreadsheet's error ("#N/A", "#DIV/0!"), a blank to fill in
("FILL_IN", "ANSWER_HERE", "\\text{insert answer}", "\\square"), a GSM8K
gold that is not a number) gives status "error" naming it, for every response; a MATH gold Math-Verify cannot parse
does so for every response whose answer needs it parsed (parsing every gold up front would cost more than the
comparisons).

Safety and cost: model text is never `eval`-ed or `sympify`-ed here; only Math-Verify's LaTeX parser sees
it. An answer SymPy could spend seconds on is refused before parsing and compared as text only: longer
than 400 characters or 100 numbers and letters, brackets nested deeper than 8, a sum/product/integral/limit/
gamma, a literal of 40+ digits, a factorial or binomial of anything but a small literal, an exponent holding a
factorial, a power, a binomial or a decimal of 4+ places or whose integers multiply to more than 10^4, a
bracketed base raised to more than 12 or a bracketed sum expanding past 100 terms, a literal's power past
20000 digits (past 300 beside a function: "\\sin(10^{1000})"), a function raised past 6, a root of index past 100,
powers of powers beyond 10^4, more than 3
functions or a function of a function:
"(99!)!", "9^{99!}", "10^{999 \\cdot 999 \\cdot 999}", "\\binom{10^{99}}{10^{98}}", "(x+1)^{100}",
"\\tan(\\tan(\\tan(x+1)+1)+1)", "2^{0.5000000000001}", "(a+b+c+d+e)^{20}", "1.0000001^{10000}". Every regex
is linear on a 1 MB response. Math-Verify's own SIGALRM timeouts are off (they fail outside a main thread);
`judge_with_timeout` sets one timer per item instead, and the pool kills a worker that overruns anyway (C
code ignores signals): the timer is a last resort, not the bound.
"""

from __future__ import annotations

import functools
import re
import signal
import threading
from dataclasses import dataclass

from grpo_train.verifier.compare import UnreadableGold, answers_match, warm_up
from grpo_train.verifier.extract import extract_answer, extract_with_rule, gold_answer
from grpo_train.verifier.form import exact_value
from grpo_train.verifier.rules import take_refusal
from grpo_train.verifier.text import TEXT_WRAP, as_number, clean, forget, gsm8k_number, strip_wrappers, visible

__all__ = ["DATASETS", "Judgement", "answers_match", "extract_answer", "is_correct", "judge", "judge_with_timeout",
           "warm_up"]  # fmt: skip

DATASETS = ("gsm8k", "math")
_STRUCTURE = re.compile(r"\\(?:[dtc]?frac|sqrt|text\w*|math\w*|left|right|boxed|fbox|begin|end|cdot|times|div)\b")
_PLACEHOLDER = re.compile(
    r"[(\[<{]*\s*(?:n\s*[/.]?\s*a\.?|none|null|[-+]?nan|\?+|tbd|todo|unknown|[-–—]+|\.\.\.|\\[lcv]?dots|error|invalid|x{2,}"
    # a spreadsheet's error value, a blank to fill in, an empty box drawn as a symbol
    r"|\#(?:n/?a|value!|div/0!|ref!|name\?|num!|null!)|fill[\s_-]*in(?:[\s_-]*the[\s_-]*blank)?|insert[\s_]+(?:the[\s_]+|your[\s_]+)?answer"
    r"|\\(?:square|blacksquare|Box|boxed\s*\{\s*\})"
    r"|not\s+(?:applicable|available|given|known)|unanswerable"
    r"|(?:your[\s_]+|final[\s_]+|the[\s_]+|no[\s_]+)?(?:answer|ans|gold|result)(?:[\s_]+here)?|placeholder|missing|blank|empty)"
    r"\s*[)\]>}]*\.?",
    re.IGNORECASE,
)
# Golds with a part missing: "\\frac{}{3}", "\\sqrt{}", "x^{}", "^2", "x =", "= 5", "(1,)", "(, 2)".
_EMPTY_ARGUMENT = re.compile(
    r"\\(?:[dt]?frac|sqrt|[dt]?binom)\s*(?:\{[^{}]*\}\s*)?\{\s*\}|[\^_]\s*(?:\{\s*\}|$)|^\s*[\^_]"
    r"|(?:^|[(\[{]|\\\{)\s*,|,\s*(?:$|[)\]}]|\\\}|\\right)|,\s*,"
)
# "<|endoftext|>", "<unk>", "[MASK]": a chat template's or a tokenizer's special token, not an answer
_CHAT_MARKUP = re.compile(
    r"<\|[^|>]{1,40}\|>|</?s>|<(?:mask|unk|pad|eos|bos|cls|sep)>|\[(?:MASK|UNK|PAD|CLS|SEP|EOS|BOS)\]"
)
_TAGS = re.compile(r"</?[a-zA-Z][\w-]{0,20}>")  # "<answer></answer>" holds nothing
# A gold that divides by zero: "\\frac{1}{0}", "0/0".
_BY_ZERO = re.compile(r"\\[dt]?frac\s*(?:\{[^{}]*\}|\w)\s*(?:\{\s*0\s*\}|0(?!\d))|/\s*0(?![\d.])")
# ... or by a divisor that comes to zero: "1 \\div 0", "\\frac{1}{0.0}", "\\frac{1}{1-1}", "5/(1-1)".
_DIVISOR = re.compile(r"\\[dt]?frac\s*\{[^{}]*\}\s*\{([^{}]*)\}|(?:/|\\div)\s*(?:\(([^()]*)\)|\{([^{}]*)\}|(\d[\d.]*))")
_EMPTY_SIDE = re.compile(r"^\s*=|(?<![<>!\\])=\s*$")


@dataclass(frozen=True)
class Judgement:
    correct: bool  # the final answer equals the gold answer
    formatted: bool  # the answer was in \boxed{} (GSM8K: or "#### N")
    answer: str | None  # the extracted final answer as written; None when there is none
    status: str  # "ok", "no_answer", "timeout" or "error"
    error: str | None = None  # why it could not be scored (status "error" or "timeout")
    rule: str | None = None  # what refused the response (status "no_answer" or "ok" and not correct): a name of
    # verifier/rules.py's RULES ("not_found": no answer stated; "not_equal": another value); None otherwise


class ItemTimeout(BaseException):
    """Raised by the per-item timer; a BaseException so that a library's `except Exception` cannot eat it."""


def raise_item_timeout(signum: int, frame: object) -> None:
    """The SIGALRM handler of the per-item timers."""
    raise ItemTimeout


_handler_kept = False  # raise_item_timeout is the SIGALRM handler for the process's life (a verifier worker)


def keep_timeout_handler() -> None:
    """For a process that only scores (a verifier worker): installs raise_item_timeout once, so that each
    item's timer only sets and clears an itimer (swapping handlers around every ~70 us item took a fifth of
    its time). Whoever runs other code in the process must reinstall it afterwards (the pool's reward calls do)."""
    global _handler_kept
    signal.signal(signal.SIGALRM, raise_item_timeout)
    _handler_kept = True


@functools.lru_cache(maxsize=4096)
def _gold(gold: str, dataset: str) -> tuple[str, str | None]:
    """The gold answer to compare with, and why it cannot be scored (None when it can)."""
    if not gold.strip():
        return "", "empty gold answer"
    text, problem = gold_answer(visible(gold), dataset)
    if problem is not None:
        return "", f"gold {gold!r}: {problem}"
    stripped = strip_wrappers(text)
    if not _TAGS.sub("", TEXT_WRAP.sub(r"\1", stripped)).strip():
        return "", f"gold {gold!r} is empty once its delimiters are removed"
    if _PLACEHOLDER.fullmatch(TEXT_WRAP.sub(r"\1", stripped).strip()):
        return "", f"gold {gold!r} is a placeholder, not an answer"
    if not re.search(r"[0-9A-Za-z]", _STRUCTURE.sub("", stripped)):
        return "", f"gold {gold!r} holds no value"  # "\\frac{}{}", "\\sqrt{}"
    if _unbalanced(text) or _unbalanced(gold):
        return "", f"gold {gold!r} has unbalanced braces or brackets"
    if _CHAT_MARKUP.search(text):
        return "", f"gold {gold!r} holds a chat template's token"
    if _EMPTY_ARGUMENT.search(stripped) or _EMPTY_SIDE.search(stripped):
        return "", f"gold {gold!r} has an empty part (a fraction, root, exponent or side of an equation)"
    if _BY_ZERO.search(stripped) or any(exact_value(_first(m)) == 0 for m in _DIVISOR.finditer(stripped)):
        return "", f"gold {gold!r} divides by zero"
    if dataset == "gsm8k" and as_number(clean(text)) is None and gsm8k_number(text) is None:
        return "", f"GSM8K gold {gold!r} is not a number"
    return text, None


def _first(match: re.Match[str]) -> str:
    return next(group for group in match.groups() if group is not None)


def _unbalanced(latex: str) -> bool:
    unescaped = re.sub(r"\\.", "", latex)
    left, right = (len(re.findall(rf"\\{side}(?![a-zA-Z])", latex)) for side in ("left", "right"))
    return unescaped.count("{") != unescaped.count("}") or left != right  # "(2, 5]" is fine, "\left( 3" is not


def judge(response: str, gold: str, dataset: str, problem: str | None = None) -> Judgement:
    """Scores one response against the gold answer, without a time limit (see judge_with_timeout)."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}")
    forget()  # the per-item memo of the text functions
    gold_text, gold_error = _gold(gold, dataset)
    if gold_error is not None:
        return Judgement(False, False, None, "error", gold_error)  # a data bug, made visible
    answer, source, rule = extract_with_rule(visible(response), dataset, problem)
    if answer is None:
        return Judgement(False, False, None, "no_answer", rule=rule)
    formatted = source == "boxed" or (dataset == "gsm8k" and source == "hash")
    take_refusal()  # none left over from an item whose comparison was cut short
    try:
        correct = answers_match(answer, gold_text, dataset, response, problem)
    except UnreadableGold:  # found when an answer first needs the gold parsed
        return Judgement(False, False, answer, "error", f"gold {gold!r} cannot be parsed")
    refused = take_refusal()
    return Judgement(correct, formatted, answer, "ok", rule=None if correct else refused or "not_equal")


def judge_with_timeout(
    response: str, gold: str, dataset: str, problem: str | None = None, timeout_s: float = 5.0
) -> Judgement:
    """`judge` under a SIGALRM timer (status "timeout" when it fires). Signals only work in a main
    thread; elsewhere this runs untimed. The timer re-fires every 0.25 s in case a library swallows it."""
    if threading.current_thread() is not threading.main_thread():
        return judge(response, gold, dataset, problem)
    previous = raise_item_timeout if _handler_kept else signal.signal(signal.SIGALRM, raise_item_timeout)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout_s, 0.25)
            return judge(response, gold, dataset, problem)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)  # first thing: no alarm fires after this line
    except ItemTimeout:
        return Judgement(False, False, None, "timeout", f"over {timeout_s:g} s")
    finally:
        if previous is not raise_item_timeout:
            signal.signal(signal.SIGALRM, previous)


def is_correct(
    response: str, gold: str, dataset: str, problem: str | None = None, *, timeout_s: float = 5.0
) -> bool:
    """True when the response's final answer equals the gold answer of a GSM8K or MATH item
    (`dataset` "gsm8k" or "math"; `problem` lets echoes of the question be rejected)."""
    return judge_with_timeout(response, gold, dataset, problem, timeout_s).correct
