"""The verifier's extraction of the final answer from a response (order and rules stated in docs/verifier.md).

Regexes and linear scans only: safe on a 1 MB response.
"""

from __future__ import annotations

import re

from grpo_train.verifier.boxes import BOX_START, SIGN_AFTER_BOX, box_is_operand, box_qualified, boxed_answer, find_boxes
from grpo_train.verifier.commit import (
    asked_equation,
    closing_statement,
    labelled_box,
    last_line_value,
    offers_asked_value,
    other_quantities_dropped,
    other_value_in_clause,
    without_check,
    without_other_quantities,
    without_question_tail,
)
from grpo_train.verifier.hedge import (
    HEDGE,
    RETRACTION,
    SENTENCE_END,
    SPAN_CHARS,
    UNSURE,
    alternative_follows,
    disowned_after,
    offered_later,
    offers_several,
    retracts,
    same_answer,
    stated_value,
)
from grpo_train.verifier.spelling import number_words_as_digits
from grpo_train.verifier.text import (
    EQUALS,
    MATH_SPAN,
    NEGATION,
    NUMBER_TOKEN,
    QUALIFIER,
    as_number,
    clean,
    gsm8k_number,
    matching_brace,
    math_content,
)

CLOSING_CHARS = 2000  # how much of an unmarked response's end we read for its closing sentence
HEADING_CHARS = 2000  # how much of the working under an "Answer:" heading is read to tell it from a statement
MAX_STATEMENTS = 50  # statements of the answer compared with each other (each costs a few microseconds)
_JOINED_VALUE = re.compile(
    r"\s*(?:[A-Za-z]+\s+){0,3}(?:or\b|\\text\s*\{\s*or|and\b|/|,|;|\|)\s*(?=\$|\\\(|[-+]?\.?\d)|\s*(?:or\b|\\text\s*\{\s*or)"
)
_FINAL_ANSWER = re.compile(r"final answer(?:\s+is)?[\s:*]*", re.IGNORECASE)
_ANSWER_IS = re.compile(r"\banswer(?:\s+is|\s*:|(?=\s*(?:\$|\\[\[(])))[\s:*]*", re.IGNORECASE)
_HASH_ANSWER = re.compile(r"####[ \t]*")
# Markdown emphasis around a stated answer, with a full stop inside or outside it: "**4**.", "**4.**", "*4*".
_MARKDOWN_EDGES = re.compile(r"^[\s*_]*[*_](?=\S)|(?<=\S)\s*(?:[*_]+\s*\.?|\.\s*[*_]+)\s*$")
_CHAT_TOKEN = re.compile(r"<\|[^|>]{1,40}\|>|</s>")  # "<|im_start|>user": the next turn, not the answer
_HOPE_TAIL = re.compile(r"I hope it is correct\.?$", re.IGNORECASE)
_LIST_JOINER = re.compile(r"\s*(?:,\s*(?:and|or)?|and|or)\s*", re.IGNORECASE)
# A sentence also starts after displayed math: "... \\geq 2.$$ Therefore, it increases by 100%."
_CLOSING_BREAK = re.compile(r"\.\s+|\n|(?<=\$\$)\s+(?=[A-Z])|(?<=\\\])\s*(?=[A-Z])")
_LAST_IS_WORD = re.compile(r".*\b(?:is|are|equals)\s+(?=\S)", re.DOTALL)
_LAST_IS = re.compile(r".*(?:\b(?:is|are|equals)|(?<![<>!\\])=)\s+(?=\S)", re.DOTALL)
_GENERIC_LEAD = re.compile(r"^(?:therefore|thus|hence|so|(?:final\s+)?answer|result|total)\s*[:=]\s*(?=\S)", re.I)
_UNSURE_WORD = re.compile(r"\b(?:maybe|perhaps|possibly|probably|likely|I\s+(?:think|guess|believe))\b", re.I)
_CONCLUSION = re.compile(
    r"\b(?:therefore|thus|hence|so|finally|answer|total|result|is|are|equals|find|found|obtain|conclude|solution|get|gets"
    r"|got|gives|yields)\b",
    re.IGNORECASE,
)


# Dollar signs of prices: a "$" before a digit whose would-be math span closes right before a digit ("9 x $2 = $18").
_PRICES = re.compile(r"(?<![\\$])\$\d[^$\n]{0,80}?\$\d")
_PRICE_SIGN = re.compile(r"(?<![\\$])\$(?=\d)")


def _span_after(text: str, pos: int) -> str | None:
    """The answer right after a marker: a math span, else the sentence's end ("... $V$ is 120." -> 120).
    A sentence that qualifies its value ("approximately $5$") or joins two with "or" is returned whole,
    math unwrapped, for the comparison to judge; one that hedges ("7, or maybe 5") gives None."""
    rest = text[pos : pos + SPAN_CHARS].lstrip()
    if "$" in rest and _PRICES.search(rest):
        rest = _PRICE_SIGN.sub("", rest)  # "$400 + $60 = $460": the signs of prices, not math
    end = SENTENCE_END.search(rest, 1)
    sentence = _HOPE_TAIL.sub("", (rest[: end.start()] if end else rest).rstrip())
    if offers_several(sentence):
        return None
    unwrapped = MATH_SPAN.sub(lambda m: math_content(m), sentence)
    if (span := MATH_SPAN.match(rest)) is not None:
        if alternative_follows(rest, span.end(), math_content(span), bare_or=False):
            return None  # "The answer is $5$ (or $7$)."
        if end is not None and alternative_follows(rest, end.start(), math_content(span), bare_or=False):
            return None  # "The answer is $5$. Or 7."
        # "$5$ or $7$", "$5$ apples or $7$ apples", "$5$ / $7$", "$5$ and $7$": a list, for the comparison to judge.
        joined = _JOINED_VALUE.match(rest, span.end())
        return unwrapped if joined is not None else math_content(span)
    sentence = sentence.removeprefix("$")  # "$90." is a price, not a math span
    sentence = _describing_clause_kept(sentence, _after_last_is(sentence))
    if end is not None and alternative_follows(rest, end.start(), sentence, bare_or=False):
        return None  # "The answer is 5. Or 7."
    spans = list(MATH_SPAN.finditer(sentence))
    if len(spans) == 1 and not QUALIFIER.search(sentence) and not re.search(r"\bor\b", sentence):
        return math_content(spans[0])
    return MATH_SPAN.sub(lambda m: math_content(m), sentence)  # "$5$ or $7$" -> "5 or 7", a list


def _describing_clause_kept(sentence: str, tail: str) -> str:
    """The sentence whole when what follows its last "is" holds no value and only describes the answer ("18
    apples, which is the total"); the tail otherwise ("the number of ways is 12" -> 12; "18, which is wrong" ->
    no value: a retraction or a negation is not a description)."""
    if tail is sentence or MATH_SPAN.search(tail) or re.search(r"\d", tail):
        return tail
    if NEGATION.search(tail) or RETRACTION.search(tail) or HEDGE.search(tail) or UNSURE.search(tail):
        return tail
    head = sentence[: len(sentence) - len(tail)]
    if "," not in head or re.search(r"\d", head[head.rindex(",") :]):
        return sentence  # "5, though 7 is also plausible": two values, for the comparison to judge
    return head[: head.rindex(",")].strip()  # "18 apples, which is ..." -> "18 apples"


def _after_last_is(sentence: str) -> str:
    """What follows the sentence's last "is" / "are" / "equals" / "=" outside math ("The roots are $x = 2$ or
    $x = -3$" -> "$x = 2$ or $x = -3$"); the sentence itself without one."""
    masked = MATH_SPAN.sub(lambda m: "$" + "_" * (len(m.group()) - 2) + "$", sentence)
    last_is = _LAST_IS.match(masked)
    if last_is is None:
        return sentence
    if not masked[: last_is.end()].rstrip().endswith("="):
        return sentence[last_is.end() :]
    # A prose equation ("The answer is 7 = 5.", "So 2 + 2 = 5."): the chain whole, from its left side, for the
    # equation rule to judge; its last right side alone would hide a false left side.
    word = _LAST_IS_WORD.match(masked)
    start = word.end() if word is not None else 0
    equals = masked.index("=", start)
    bracket = masked.rfind("(", start, equals)
    if bracket > start and masked[start:bracket].strip() and ")" not in masked[bracket:equals]:
        return sentence[start:bracket].strip()  # "18 (6 × 3 = 18)": the work in brackets checks the value before it
    dash = max(masked.rfind(" — ", start, equals), masked.rfind(" – ", start, equals))
    if dash > start and masked[start:dash].strip():
        return sentence[start:dash].strip()  # "18 — 3 + 15 = 18": a spaced dash sets the work apart, as brackets do
    return sentence[_left_side_start(masked, start, equals) :].strip()


def _left_side_start(text: str, start: int, equals: int) -> int:
    """Where the left side of the equation at `equals` begins: back over symbols, numbers and one-letter names
    ("So 2 + 2 = 5" -> "2 + 2"); the word before the "=" when there is nothing else ("total = 5")."""
    text = re.sub(r"\\[a-zA-Z]+", lambda m: "\\" + "#" * (len(m.group()) - 1), text)  # "\\cdot" is a symbol
    pos = equals
    while pos > start and not (text[pos - 1].isalpha() and pos - 2 >= start and text[pos - 2].isalpha()):
        pos -= 1
    if not re.search(r"[\w$]", text[pos:equals]):
        word = re.search(r"[A-Za-z']+\s*$", text[start:pos])
        pos = start + word.start() if word is not None else pos
    while pos < equals and text[pos] in " ,:;":
        pos += 1
    return pos


def _last_statement(text: str, marker: re.Pattern[str]) -> tuple[str, str | None, int]:
    """("none", None, 0) without the marker; ("hedge:<rule>", None, 0) when its answer hedges (statement_hedged), when
    an earlier statement of the same marker since the last retraction gives another value ("The answer is 5. The
    answer is 7.", as two boxes would: statements_disagree), or when a retraction after it offers another ("The
    answer is 5. Wait, no, it might be 7.": retracted_for_other); else ("ok", answer, where the last statement
    starts)."""
    matches = list(marker.finditer(text))
    if matches and marker is _FINAL_ANSWER:
        matches = [match for match in matches if _states(text, match)]  # not "Step 2: Find the final answer"
    if marker is not _HASH_ANSWER and any("\n" in match.group() for match in matches):
        answer_after = max(text.rfind("####"), text.rfind("\\boxed"))  # once: a scan per match would be quadratic
        matches = [match for match in matches if not _heading(text, match, answer_after)]
    if not matches:
        return "none", None, 0
    if len(matches) > MAX_STATEMENTS:
        return "hedge:too_many_statements", None, 0  # "The answer is 5." written thousands of times answers nothing
    span = _span_after(text, matches[-1].end())
    if span is None:
        return "hedge:statement_hedged", None, 0
    answer = span.strip() or None
    for earlier, later in zip(reversed(matches[:-1]), reversed(matches[1:]), strict=True):
        if retracts(text[earlier.end() : later.start()]):
            break
        stated = _span_after(text, earlier.end())
        if stated is not None and answer is not None and not _same_statement(stated.strip(), answer):
            return "hedge:statements_disagree", None, 0
    if answer is not None and _retracted_after(text, matches[-1].end(), answer):
        return "hedge:retracted_for_other", None, 0
    return "ok", answer, matches[-1].start()


def _same_statement(first: str, second: str) -> bool:
    """Two statements of the answer agree: the same text or number, or the same value given ("So the answer is
    9 * 2 = 18." then "The answer is: 18")."""
    if same_answer(first, second) or same_answer(stated_value(first), stated_value(second)):
        return True
    return _named_equation_value(first) == second.strip() or _named_equation_value(second) == first.strip()


def _named_equation_value(statement: str) -> str | None:
    """The right side of "a+b=-1" when every left side holds a variable (a side of numbers could be a false chain: "7 =
    5" and "\\sqrt{4} = 7" give none): "Therefore our answer is $a+b=-1$." agrees with "The answer is $-1$."."""
    *lefts, last = EQUALS.split(statement) if EQUALS.search(statement) else [""]
    if not lefts or not all(re.search(r"[a-zA-Z]", re.sub(r"\\[a-zA-Z]+", "", left)) for left in lefts):
        return None
    return last.strip()


def _retracted_after(text: str, pos: int, answer: str) -> bool:
    """A sentence after the stated answer that retracts it and offers another value with a hedge ("Wait, no,
    it might be 7."); a check that only restates the work ("Wait, let me check: 2 + 3 = 5.") does not, nor a line
    that gives the statement's value again ("The answer is 3 + 2 = 5.\n#### 5")."""
    rest = text[pos:]
    end = SENTENCE_END.search(rest, 1)
    return offered_later(rest[end.end() :] if end else "", answer, by_value=True)


def _closing_answer(text: str, problem: str | None = None) -> str | None:
    """The answer of a MATH response without a marker: the whole response when it is one short math
    span or a few words ("$\\frac{1}{3}$", "28 percent"); else the last math span or the only number
    of a concluding last sentence ("Therefore, there are 12 sequences.", "The matrix is: $M$")."""
    text = without_check(_HOPE_TAIL.sub("", text.strip()).strip()[-CLOSING_CHARS:])  # only the end can conclude
    if len(text) <= SPAN_CHARS and (whole := MATH_SPAN.fullmatch(text.rstrip(".,"))) is not None:
        return math_content(whole)
    if len(text) <= 40 and text.count(" ") <= 3:
        # a bare answer such as "1/3" (garbage then fails to match); "Perhaps\n$x = 5$" offers a guess
        return None if HEDGE.search(text) or UNSURE.search(text) else _GENERIC_LEAD.sub("", text)
    if not text.endswith((".", "$", "\\]", "\\)")):
        return None  # cut off mid-sentence
    boundaries = [m.end() for m in _CLOSING_BREAK.finditer(text[:-1])]
    sentence = text[boundaries[-1] if boundaries else 0 :]
    prose = MATH_SPAN.sub(" $ ", sentence)
    if NEGATION.search(prose) or not (_CONCLUSION.search(prose) or re.search(r":\s*\$", prose)):
        return None
    if _UNSURE_WORD.search(prose):
        return None  # "Maybe there are 12 sequences."
    if (restated := without_question_tail(sentence, problem)) is not None:
        sentence = restated  # "There are 8 possible values for $a$." for "How many possible values ... for $a$?"
    if offers_several(sentence):
        return None
    whole, sentence = sentence, _after_last_is(sentence)  # "... = 2/3 Therefore, the probability is 2/3."
    if spans := list(MATH_SPAN.finditer(sentence)):
        between = [sentence[a.end() : b.start()] for a, b in zip(spans, spans[1:], strict=False)]
        if between and all(_LIST_JOINER.fullmatch(gap) for gap in between):
            return ", ".join(math_content(span) for span in spans)  # "The roots are $2$ and $-3$."
        return math_content(spans[-1])
    if EQUALS.search(sentence):
        return sentence.rstrip(".")  # "Therefore, 3 + 4 = 7.": the chain, for the equation rule
    if not MATH_SPAN.search(whole):
        sentence = number_words_as_digits(sentence)  # "Therefore, there are twelve sequences."
    numbers = {n.strip() for n in NUMBER_TOKEN.findall(sentence)}
    if not numbers and len(spans := list(MATH_SPAN.finditer(whole))) == 1:
        return math_content(spans[0])  # "Therefore $x \\geq 5$ is the solution."
    return numbers.pop() if len(numbers) == 1 else None


def extract_answer(response: str, dataset: str, problem: str | None = None) -> tuple[str | None, str]:
    """The final answer and its source: boxed, final_answer, answer_is, hash or closing (`problem` tells which
    bounds around a box answer it). A chat token ends the response; after a closed reasoning block that is followed
    by an answer, only what follows is read (the reasoning's tentative answers are not statements).
    Source "conflict": different boxed answers, a hedge, or statements of the answer in different forms (a box,
    "the final answer is", "the answer is", "####") that give different numbers; "none": no answer found."""
    answer, source, _ = extract_with_rule(response, dataset, problem)
    return answer, source


def extract_with_rule(response: str, dataset: str, problem: str | None = None) -> tuple[str | None, str, str | None]:
    """extract_answer and, when it finds no answer, the rule that left none (a name of verifier/rules.py's RULES:
    "not_found" when nothing was found)."""
    if "<" in response and (chat := _CHAT_TOKEN.search(response)) is not None:
        response = response[: chat.start()]  # "#### 18<|im_end|>": the next turn is not the answer
    if (reasoned := _after_reasoning(response)) is not None:
        outside, after = reasoned
        answer, source = _extract_checked(outside, dataset, problem)
        if source.startswith("none"):
            if outside and _extract_checked(response, dataset, problem)[0] is not None:
                return None, "none", "reasoning_only"  # a value stated only inside the block: a tentative answer
            return _with_rule(answer, source) if outside else (None, "none", "reasoning_only")
        if after != outside:  # later blocks: read with what they hold, their hedges count
            whole, whole_source = _extract_checked(_THINK_TAG.sub(" ", after), dataset, problem)
            if whole is None or not same_answer(whole, answer):
                return _with_rule(None, whole_source if whole is None else "conflict:statements_disagree")
        return _with_rule(answer, source)
    return _with_rule(*_extract_checked(response, dataset, problem))


_THINK_TAG = re.compile(r"</?think>")
_LATER_BLOCK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)


def _after_reasoning(response: str) -> tuple[str, str] | None:
    """For a response that opens a reasoning block ("<think>..."; or whose first tag is "</think>": the opening tag
    was in the prompt): (the text outside every block, the text after the first block's close); "" for both when
    the block never closes. None for a response that opens no block (a tag later in the text: read whole)."""
    if "think>" not in response:
        return None  # most responses: no tag
    close, opening = response.find("</think>"), response.find("<think>")
    opens = response.lstrip().startswith("<think>") or (close != -1 and (opening == -1 or close < opening))
    if not opens:
        return None
    if close == -1:
        return "", ""
    after = response[close + len("</think>") :]
    return (_LATER_BLOCK.sub(" ", after) if "<think>" in after else after), after


def _with_rule(answer: str | None, source: str) -> tuple[str | None, str, str | None]:
    """(answer, source, rule) from the internal source, which names the rule after "conflict:" / "none:"."""
    kind, _, rule = source.partition(":")
    if answer is not None:
        return answer, kind, None
    return None, kind, rule or "not_found"


def _extract_checked(response: str, dataset: str, problem: str | None) -> tuple[str | None, str]:
    lowered = response.lower()
    answer, source, pos = _extract(response, lowered, dataset, problem)
    if answer is not None and source != "closing" and _contradicted(response, lowered, answer, pos):
        return None, "conflict:statement_kinds_disagree"  # "\\boxed{5} #### 7", "The answer is 7.\n#### 5"
    if answer is not None and source != "boxed":
        answer = _MARKDOWN_EDGES.sub("", answer) or None  # "The answer is **4**.", "**Answer: 4**": emphasis
    if answer is not None and source in ("final_answer", "answer_is") and len(NUMBER_TOKEN.findall(answer)) > 1:
        answer = without_other_quantities(answer, problem, signs_kept=False) or answer  # "4 boxes (5 pencils left)"
    return answer, source


def _extract(response: str, lowered: str, dataset: str, problem: str | None) -> tuple[str | None, str, int]:
    """extract_answer without the agreement of statements, and where the answer's statement starts. Without an
    answer, the source names the rule that refused ("conflict:boxes_disagree"; "none:box_unfinished")."""
    boxes = find_boxes(response)
    if boxes is None:
        return None, "conflict:too_many_boxes", 0
    if boxes:
        box_rule = "boxes_disagree"  # different boxed answers, or a box in a box
        answer = boxed_answer(response, boxes)
        if answer is None and labelled_box(response, boxes, problem):
            answer = boxes[-1][2]  # "Width: \\boxed{4}, area: \\boxed{32}": the asked quantity's box
        if answer is not None:
            end = boxes[-1][1]
            later = offered_later(response[end:], answer)
            if later and offered_later(other_quantities_dropped(response[end:], problem), answer) is False:
                later = False  # "\\boxed{4} full boxes. 5 pencils are left over.": another quantity
            later = later or offers_asked_value(response[end:], answer, problem)  # "5 boxes if ..."
            if alternative_follows(response, end, answer, bare_or=True) or later or other_value_in_clause(
                    response, end, answer):
                return None, "conflict:other_value_after_box", 0  # "$\\boxed{5}$ (or 7)", "... But it could be 7."
            if disowned_after(response[end:]):
                return None, "conflict:answer_disowned", 0  # "$\\boxed{5}$. Wait, that is wrong."
            after = response[end:]
            final = _last_match(after, _FINAL_ANSWER) if "final answer" in lowered[end:] else None
            stated = _span_after(after, final.end()) if final is not None and _states(after, final) else ""
            # A final-answer statement after the last box settles it ("... is the final answer." states nothing).
            settled = stated is None or (bool(stated.strip(" .")) and not _agree(stated, answer))
            if settled:
                box_rule = "statement_hedged"  # a final-answer statement after the box that gives it no value
            elif box_qualified(response, boxes[-1], problem):
                box_rule = "box_qualified"
            elif box_is_operand(response, boxes[-1], problem):
                box_rule = "box_operand"
            else:
                sign = SIGN_AFTER_BOX.match(response, end)
                sign_text = "" if sign is None else "\\%" if "cent" in sign.group().lower() else sign.group().strip()
                return answer + sign_text, "boxed", boxes[-1][0]
        found, statement, start = _last_statement(response[boxes[-1][1] :], _FINAL_ANSWER)
        if statement is not None:
            return statement, "final_answer", boxes[-1][1] + start
        return None, "conflict:" + (found.partition(":")[2] or box_rule), 0
    if BOX_START.search(response):
        return None, "none:box_unfinished", 0  # a \boxed{ never closed (cut off in the answer) or left empty
    for marker, source in ((_FINAL_ANSWER, "final_answer"), (_ANSWER_IS, "answer_is"), (_HASH_ANSWER, "hash")):
        found, span, start = _last_statement(response, marker)
        if found.startswith("hedge"):
            return None, "conflict:" + found.partition(":")[2], 0  # "The answer is 7, or maybe it is 5."
        if span is not None:
            return (None, "conflict:answer_disowned", 0) if disowned_after(response[start:]) else (span, source, start)
    if dataset == "math":
        answer = _closing_answer(response, problem) or asked_equation(response, problem)
    else:
        answer = closing_statement(response, problem) or asked_equation(response, problem)  # "... so her salary is
        # $57,500.": the asked quantity's value; "Let $x$ be the number of pages." ... "$x = 108$"
    # a last line that is only a value ("...\n**18**"); MATH: a closing sentence as GSM8K's ("The polygon has 15
    # sides.")
    answer = answer or last_line_value(response, problem)
    answer = answer or (dataset == "math" and closing_statement(response, problem)) or None
    if answer is not None:
        return answer, "closing", len(response)
    return None, "none", 0


def _last_match(text: str, marker: re.Pattern[str]) -> re.Match[str] | None:
    last = None
    for last in marker.finditer(text):  # noqa: B007 - only the last one is wanted
        pass
    return last


_VALUE_START = re.compile(r"[\\$]|[-+]?\.?\d")
_STATEMENT_KINDS = ((_FINAL_ANSWER, "final answer"), (_ANSWER_IS, "answer"), (_HASH_ANSWER, "####"), (BOX_START, "\\"))


def _contradicted(response: str, lowered: str, answer: str, pos: int) -> bool:
    """Whether the last statement of another kind (a box, "the final answer is", "the answer is", "####") gives
    another number than the answer, or hedges, unless a retraction stands between it and the answer's statement
    ("The answer is 8. Wait, I miscounted ... \\boxed{7}" is a revision, C3). Only numbers are compared: two
    spellings of one expression are not told apart here."""
    value = None
    for marker, key in _STATEMENT_KINDS:
        if key not in lowered:
            continue  # most responses state their answer once: a substring test spares the regex
        other = _last_match(response, marker)
        if other is None or other.start() <= pos < other.end() or abs(other.start() - pos) < 2:
            continue
        if other.end() <= pos and not response[other.end() : pos].strip(" \t$*:([\\"):
            continue  # the marker of the answer's own statement ("The answer is $\\boxed{5}$")
        heading_like = marker is not BOX_START and marker is not _HASH_ANSWER and "\n" in other.group()
        if heading_like and _heading(response, other, max(response.rfind("####"), response.rfind("\\boxed"))):
            continue  # "**Answer:**" over the working
        if marker is BOX_START and pos <= other.start() < pos + len(answer) + 40:
            continue  # the box of the answer's own statement
        if other.start() < pos and (retracts(response[other.end() : pos]) or (
            marker is BOX_START and _FINAL_ANSWER.match(response, pos)
        )):  # fmt: skip
            continue  # revised (C3), or boxes settled by a final-answer statement after them
        if marker is BOX_START:
            close = matching_brace(response, other.end()) if response.startswith("{", other.end()) else None
            if close is None:
                continue
            stated: str | None = response[other.end() + 1 : close]
        elif marker is _HASH_ANSWER:  # GSM8K's "#### N" is a line holding a number, not a markdown heading
            stated = response[other.end() :].split("\n", 1)[0]
            if as_number(clean(number_words_as_digits(stated))) is None:  # "#### seven" states 7
                continue
        else:
            if marker is _FINAL_ANSWER and not _states(response, other):
                continue  # "Before giving the final answer, we check 3 cases." states nothing
            stated = _span_after(response, other.end())
            if stated is not None and NEGATION.match(stated.lstrip()):
                continue  # "The answer is not 9, since ..." rules a value out
        if value is None and (value := _plain_value(answer)) is None:
            return False
        if stated is None:
            return True  # "\\boxed{5}. The final answer is 5 or maybe 7."
        stated_value = _plain_value(BOX_START.sub("", stated))
        if stated_value is not None and stated_value != value:
            return True
    return False


# Words before "the final answer" that name a task, not a statement: "## Step 2: Calculate the final answer",
# "Before giving the final answer, let me check: 5 - 2 = 3."
_TASK_BEFORE = re.compile(
    r"\b(?:calculat\w*|comput\w*|find\w*|determin\w*|get|getting|giv\w*|stat\w*|writ\w*|reach\w*|arriv\w*\s+at"
    r"|obtain\w*|before|after|to|for|towards?)\s+(?:(?:the|our|a|my|your|its)\s+)?$",
    re.IGNORECASE,
)


def _heading(text: str, marker: re.Match[str], answer_after: int) -> bool:
    """An answer marker that heads the working rather than stating a value ("**Answer:**\n\nJanet sells 16 - 3 - 4 =
    9 eggs ...\n#### 18"): it ends its line, the next line is a sentence (four words or more) that does not start
    with a value, and a "####" line or a box later gives the answer (`answer_after`: where the last one starts)."""
    if "\n" not in marker.group() or answer_after <= marker.end():
        return False
    working = text[marker.end() : min(answer_after, marker.end() + HEADING_CHARS)]  # bounded: a scan per marker
    lines = [line for line in working.split("\n") if line.strip()]
    first = lines[0].strip(" \t*_$.:") if lines else ""
    if len(lines) >= 2 and any("=" in line for line in lines) and len(first.split()) > 1 and as_number(first) is None:
        return True  # lines of working with a chain among them ("Day 1: 70(.30)=21 crickets\nDay 2: ...")
    if _VALUE_START.match(text, marker.end()) is not None:
        # A chain of working under the heading ("Answer:\n10 * 8 = 80 liters\nThere are 290 - 80 = 210 left\n...
        # #### 15"), with another line of it before the "####" or box: working, not a value ("Answer:\n7\n#### 5" and
        # "Answer:\n3 + 4 = 7\n#### 5" state one).
        return len(lines) >= 2 and _WORKING_CHAIN.search(lines[0]) is not None
    return len(text[marker.end() : marker.end() + 200].split("\n", 1)[0].split()) >= 4  # "Answer:\nseven": a word


_WORKING_CHAIN = re.compile(r"\d[^=\n]{0,80}?(?:[-+*/×÷]|\\times|\\cdot)[^=\n]{0,80}?\d[^=\n]{0,40}=")


_IS = re.compile(r"\bis\b", re.IGNORECASE)


def _states(text: str, marker: re.Match[str]) -> bool:
    """Whether a "final answer" marker states one: "the final answer is" (also after "We find"), "Final answer:", or
    a value right after. After a task word ("Calculate the final answer", "Before giving the final answer, let me
    check: 5 - 2 = 3") only a value on the same line states one ("To get the final answer: 7")."""
    if _IS.search(marker.group()):
        return True
    value_after = _VALUE_START.match(text, marker.end()) is not None
    if _TASK_BEFORE.search(text[max(0, marker.start() - 40) : marker.start()]):
        return value_after and "\n" not in marker.group()
    return ":" in marker.group() or value_after  # "Final answer:"


def _agree(stated: str | None, answer: str) -> bool:
    """Whether a statement gives the answer: the same text or the same number."""
    if stated is None:
        return False
    value = _plain_value(BOX_START.sub("", stated))
    return same_answer(stated.strip(), answer) or (value is not None and value == _plain_value(answer))


def _plain_value(text: str) -> object | None:
    """The number a statement gives ("18", "\\$18.00", "Janet makes $18 a day"), else None."""
    if not re.search(r"\d", text):
        text = number_words_as_digits(text)  # "#### seven" gives 7 against "\\boxed{5}"
    number = as_number(clean(text)) or (gsm8k_number(text) if re.search(r"\d", text) else None)
    return number.value if number is not None else None


def gold_answer(gold: str, dataset: str) -> tuple[str, str | None]:
    """The gold answer and what is wrong with it (None when it can be scored): GSM8K's text after
    "####", the boxed answer of a MATH solution (its boxes must agree), else the text as is."""
    if dataset == "gsm8k" and "####" in gold:
        return gold.rsplit("####", 1)[1].strip(), None
    if BOX_START.search(gold):
        boxes = find_boxes(gold) or []
        answer = boxed_answer(gold, boxes) if boxes else None
        if answer is None or any(not same_answer(box[2], boxes[0][2]) for box in boxes):  # "\\boxed{1}\\boxed{2}"
            return "", "its boxed answers are empty, unclosed or disagree"
        return answer, None
    return gold.strip(), None
