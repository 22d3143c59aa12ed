"""Whether a response commits to one value: retractions, hedges and other values offered beside the answer
(the rules stated in docs/verifier.md; used by grpo_train/verifier/extract.py and boxes.py).

Regexes and linear scans only: safe on a 1 MB response.
"""

from __future__ import annotations

import re

from grpo_train.verifier.form import exact_value
from grpo_train.verifier.spelling import NUMBER_WORD, number_words_as_digits
from grpo_train.verifier.text import EQUALS, MATH_SPAN, NUMBER_TOKEN, as_number, canonical, clean, gsm8k_number

SPAN_CHARS = 300  # how far after "the answer is" we read the answer
RETRACTION = re.compile(
    r"\b(?:wait|actually|oops|mistake|misread|not right|incorrect|wrong|re-?check\w*|re-?do\w*"
    r"|re-?calculat\w*|re-?consider\w*|correction|on second thought|on (?:further )?reflection|revis\w*"
    r"|let me (?:fix|correct))\b",
    re.IGNORECASE,
)
# Words that offer a value as one possibility among others: a hedge, never a retraction.
HEDGE = re.compile(
    r"\b(?:if|unless|otherwise|in case|possib\w*|alternativ\w*|either|or|could|might|(?:maybe|perhaps)(?!\s+I\b))\b",
    re.IGNORECASE,
)
UNSURE = re.compile(r"\b(?:probabl\w*|likely|sure|guess\w*|believe|think)\b", re.IGNORECASE)
_HEDGE_WORD = r"(?:alternatively|maybe|perhaps|possibly)"
_ALTERNATIVE = re.compile(rf"[\s$]*(?:(?:[.;,]|\()\s*(?:or\b|{_HEDGE_WORD}\b)|(?:or\s+)?{_HEDGE_WORD}\b)", re.I)
_ALTERNATIVE_AFTER_BOX = re.compile(
    # One character per repetition (a run of dots or dashes can be split only one way: no exponential backtracking).
    rf"[\s$*_]*(?:\\text\s*\{{\s*)?(?:[.;,(\[?!…—–-][\s*_]*)*(?:\\text\s*\{{\s*)?"
    rf"(?:or\b|otherwise\b|else\b|unless\b|failing\s+that\b|if\s+not\b|\\lor\b|\\vee\b|\|(?!\|)|{_HEDGE_WORD}\b"
    r"|(?:o|ou|oder|oppure|или)\b|或者?)",  # "or" in a few other languages
    re.I,
)
# A value joined to the box, ending its clause: "\\boxed{5} and 7", "\\boxed{5} (also 7)", "\\boxed{5} & 7", "\\boxed{5}
# = 7", "\\boxed{5} -> 7", "\\boxed{5} vs 7", "\\boxed{5} ~ 7".
_JOINED_AFTER_BOX = re.compile(
    r"[\s$*_]*(?:\\text\s*\{\s*)?(?:[,(\[][\s*_]*)?(?:\\text\s*\{\s*)?(?:and|also|plus|as\s+well\s+as|&|\\&|vs\.?|versus|->|→|⇒|~"
    r"|=|≈|≡|⇔|⟺|↔|\\(?:to|rightarrow|Rightarrow|implies|sim|approx|equiv|iff|[Ll]eftrightarrow|simeq|cong)(?![a-zA-Z]))"
    r"\s*(?:\$\s*)?",
    re.I,
)
_VALUE_ENDS = re.compile(r"\s*\??\s*[)\]]?\s*\}?\s*(?:[.,;$]|$)")  # "(7?)", "\\text{(7)}."
_CLAUSE_ENDS = re.compile(r"\s*\$?\s*\??\s*[)\]}]{0,2}\s*\$?\s*(?:[.,;!]|$)")
# In the box's sentence only: a line break is crossed when the line goes on in lowercase ("\\boxed{5}\n unless ..."); a
# new paragraph or sentence ("\n\nIf we check: 3 + 2 = 5") is later text. (The lookahead stops at the next line break,
# so a run of line breaks is read in linear time.)
_CONDITION_AFTER_BOX = re.compile(
    r"(?:[ \t$*_]|\n(?=[ \t$*_]*(?-i:[a-z,;(\[—–-])))*(?:[,;(\[—–-]\s*)?(?:\\text\s*\{\s*)?(?:if|unless|except)\b", re.I
)
# A bracket right after a box naming another value with a condition or a hedge: "\\boxed{5} (7 if counting Tom)".
_BRACKET_AFTER_BOX = re.compile(r"[\s$*_]*[(\[]([^()\[\]]{1,80})[)\]]")
_CONDITION = re.compile(
    r"\b(?:if|unless|otherwise|else|or|maybe|perhaps|possibly|alternativ\w*|alt\.?|backup|fallback|runner-?up"
    r"|second\s+(?:choice|guess|best)|close|failing"
    r"|(?:an)?other\s+(?:possible\s+)?(?:answer|value|option|solution|possibility))\b",
    re.I,
)  # not "when" ("(when divided by 4)") nor a bare "other" ("(the other 2 were broken)")
# A lone value right after a box, bracketed or after a slash: "\\boxed{5} (7?)", "\\boxed{5} / 7".
_VALUE_AFTER_BOX = re.compile(
    r"[\s$*_]*(?:\\text\s*\{\s*)?(?:/|[(\[]\s*(?=[^()\[\]]{1,40}[)\]]))\s*(?:or\s+)?|[\s$]*[,;]\s*(?=[-+]?\.?\d)"
)
# A later sentence offering another value: "It could also be 7.", "7 is also possible.", "Alternatively, 7."
_OFFERED = re.compile(
    r"\b(?:could|might|may|possibly|perhaps|maybe)\s+(?:also\s+|even\s+|just\s+|well\s+)?(?:be|equal)\s+"
    r"|\b(?:alternative|backup|second|other|another|different)(?:\s+possible)?\s+(?:answer|guess|option|possibility"
    r"|solution|value)s?\b[\s:=*]*(?:is\s+|would\s+be\s+)?"
    r"|\b(?:alternatively|or\s+(?:maybe|perhaps|possibly|else))\b[\s,:}]*(?:it\s+(?:is|could\s+be)\s+)?"
    # others' answers, a second choice, a case for another value: "Some might say 7.", "I'd also accept 7.", "Then
    # again, 7.", "Either that or 7.", "Unless it's 7.", "If not, 7.", "Backup: 7."
    r"|\b(?:some(?:one|\s+people)?|others?|many|people)\s+(?:(?:might|may|would|could|will|can)\s+)?"
    r"(?:say|argue|claim|answer|prefer|get|pick|choose|think)s?\b[\s,:]*(?:(?:that|it'?s|it\s+is)\s+)?"
    r"|\bcase\s+(?:can|could|might)\s+be\s+made\s+for\s+|\b(?:would|could|might|will|can)\s+also\s+accept\s+|'d\s+also\s+accept\s+"
    r"|\bthen\s+again\b[\s,:]*(?:(?:it'?s|it\s+is|maybe)\s+)?|\beither\s+(?:that|this|it|so)\s+or\s+"
    r"|\bunless\s+(?:it'?s|it\s+is|the\s+answer\s+is)\s+|^\W*if\s+not\b[\s,:]*(?:(?:then\s+)?(?:it'?s|it\s+is)\s+)?"
    r"|\b(?:backup|fallback|runner-?up|second\s+(?:choice|guess|best))\b[\s:=*-]*(?:(?:is|would\s+be)\s+)?",
    re.IGNORECASE,
)
_OFFERED_AFTER = re.compile(
    r"\s+(?:is|are|would\s+be|seems|might\s+be|could\s+be)\s+(?:also\s+|equally\s+)?(?:possible|plausible|valid"
    r"|correct|right|acceptable|an?\s+(?:option|possibility|alternative|candidate))\b"
    r"|\s+(?:also|too|equally|as\s+well)\s+(?:works?|fits?|counts?|holds?|applies|satisfies)\b",
    re.IGNORECASE,
)
# A later sentence giving another value under a condition: another reading of the question offered beside the
# answer ("If the question meant weekly, it would be 35.", "7 would be correct if the sequence started at 0.").
_CONDITION_WORD = re.compile(r"\b(?:if|unless|assuming|suppos\w+|had|were|otherwise|instead)\b", re.IGNORECASE)
_WOULD_GIVE = re.compile(
    r"(?:\bwould\s+(?:be|have|get|give|equal|make|become|need|cost|take|pay|earn|spend|total)"
    r"|\b(?:answer|result|total)\s+(?:is|becomes|will\s+be))\b[\s:,=]*(?:(?:only|just|exactly|then|the\s+answer)\s+)*"
    r"\$?\s*",
    re.IGNORECASE,
)
# ... or the value the conditional sentence ends on: "If he ate one, then 4.", "If we count Tom, it is 6."
_ENDS_ON_VALUE = re.compile(
    r"(?:,|\bthen\b)\s*(?:(?:it|that|this)\s+(?:is|becomes|will\s+be)\s+|it's\s+)?\$?\s*([-+]?\.?\d[\d,]*(?:\.\d+)?)"
    r"\$?\s*[.!]?\s*$",
    re.IGNORECASE,
)
_WOULD_BE_RIGHT = re.compile(r"\$?\s+would\s+be\s+(?:the\s+)?(?:correct|right|valid|answer)\b", re.IGNORECASE)
_DENIED = re.compile(
    r"\b(?:not|never|wrong|incorrect|too|impossible|invalid|extraneous|contradict\w*|cannot)\b|n't\b", re.IGNORECASE
)
_RULED_OUT = re.compile(
    r"\b(?:not|never|cannot|extraneous|reject\w*|ruled?\s+out|discard\w*|invalid|impossible|violat\w*|would)\b|n't\b",
    re.IGNORECASE,
)
_ANY_VALUE = re.compile(rf"\d|\$|{NUMBER_WORD.pattern}", re.I)  # a digit or a number word (spelling.py)
# A value that is not excluded is offered: "7 cannot be ruled out.", "Can't rule out 7."; a list of candidates offers
# each of its values ("Possible answers: 5, 7."); "If not, 7." is a condition, not a denial.
_NOT_RULED_OUT = re.compile(
    r"\b(?:can(?:not|'t)|could(?:\s+not|n't)|is(?:\s+not|n't)|not|never)\s+(?:be\s+|been\s+)?(?:rule[sd]?\s+out|exclud\w*)\b",
    re.IGNORECASE,
)
_CANDIDATES = re.compile(
    r"\b(?:(?:possible|candidate|potential|plausible)\s+(?:answers|values|solutions|results)|candidates)\s*(?::|=|are\b|include\b)",
    re.I,
)
_IF_NOT = re.compile(r"\bif\s+not\b", re.IGNORECASE)
_INTERJECTION = re.compile(r"^[\s*_>]*(?:(?:hmm+|hm+|oh|ah|uh|well|no|so|but)\b[\s,.!]*)*", re.I)
_ARITHMETIC = re.compile(r"[-+*/×÷=<>]|\\(?:times|cdot|div)(?![a-zA-Z])")
_FILLER = re.compile(
    r"(?:[\s,:]*\b(?:it|is|it's|was|could|might|would|should|be|also|even|just|the|answer|value|possibly|maybe"
    r"|perhaps))*[\s,:*_}]*",
    re.IGNORECASE,
)
# The first value of a clause: a box, a math span or a number (whichever comes first).
_FIRST_VALUE = re.compile(
    r"\\(?:boxed|fbox)\s*\{([^{}]*)\}|(?<![\\$])\$([^$\n]+?)\$|(?<![\w.])(-?\d[\d,]*(?:\.\d+)?)(?![\w])"
)
# A later line that is only a value, or a label, a relation, an arrow or a bullet and a value, a whole line ("#### 5
# \n7", "\\boxed{5}\n\n$7$", "\\[7\\]", "`7`", "\\textbf{7}", "P.S. 7", "Note: 7", "Alt answer - 7", "1) 7", "= 7",
# "- 7"): another value put beside the answer. A hyphen after a label separates only before a space: in
# "So the answer is -50." and "Alt answer -7" it is the sign of the value.
_BARE_VALUE = re.compile(
    r"[\s*_>#`]*(?:[-+•]\s+)?"
    r"(?:[A-Za-z][A-Za-z. ]{0,20}?(?:\s*(?:[:.)–—]|-(?=\s))|\s(?=[-+]\.?\d))\s*(?:[*_]+\s*)?|\d{1,2}[.)]\s+"
    r"|(?:=|->|→|⇒|-(?=\s))\s*)?"
    r"(?:(?:\$\$?|\\\[|\\\()\s*)?(?:\\(?:mathbf|textbf|mathrm|text|boxed)\s*\{\s*(?:\}\s*)?)?"
    r"([-+]?\.?\d[\d,]*(?:\.\d+)?)(?:\s*\})?(?:\s*(?:\$\$?|\\\]|\\\)))?[\s*_`]*(?:[.!]\s*)?"
)
# The same once the line's decoration is dropped: HTML tags, a box, font, size or colour command, math delimiters,
# markdown, table bars, a footnote's mark, a connective ("So 7.", "Hence 7.", "∴ 7", "=> 7") or a label with any
# separator ("TL;DR: 7", "In short, 7.", "Answer = 7"), and an "or": "\\framebox{7}", "\\colorbox{yellow}{7}", "{\\bf
# 7}", "\\large 7", "<sub>7</sub>", "| 7 |", "> Note: or 7", "[^1]: or 7", "$\\frac{14}{2}$", "Seven.".
_LINE_DECORATION = re.compile(
    r"</?[a-zA-Z][\w-]{0,20}(?:\s[^<>]{0,80})?>"
    r"|\\(?:f?colorbox|textcolor|color)\s*(?:\[[^\[\]]{0,20}\]\s*)?\{[^{}]{0,40}\}(?:\s*\{[^{}]{0,40}\}(?=\s*\{))?"
    r"|\\(?:[a-zA-Z]*box|text[a-z]*|math[a-z]*|emph|underline|uline|bf|it|rm|sf|tt|sc|bm|boldsymbol|displaystyle|textstyle"
    r"|tiny|scriptsize|footnotesize|small|normalsize|large|Large|LARGE|huge|Huge|therefore|quad|qquad)(?![a-zA-Z])"
    r"(?:\s*\[[^\[\]]{0,40}\])?|\\[()\[\],;: ]|\$+|\[\^?\w{1,8}\]:?",
)
_LINE_LABEL = re.compile(
    r"[\s*_>#|`]*(?:[-+•]\s+)?(?:\d{1,2}[.)]\s+)?"
    r"(?:(?:so|thus|hence|therefore|in\s+short|tl;?\s*dr)\b[\s,:;]*|(?:=|->|→|⇒|=>|⟹|∴|-(?=\s))\s*"
    r"|[A-Za-z][A-Za-z.;' ]{0,20}?\s*[:.)\-–—=,]\s*)?(?:or\s+)?",
    re.IGNORECASE,
)
_NUMBER_WORDS = {
    word: str(value)
    for value, word in enumerate(("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                                  "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
                                  "eighteen", "nineteen", "twenty"))
}  # fmt: skip


def _line_value(line: str) -> str | None:
    """The value a line states alone once its decoration is dropped (see _LINE_DECORATION), else None."""
    if len(line) > 120 or line.count(" ") > 8 or not _ANY_VALUE.search(line):
        return None  # a value alone on a line is a few words at most; most lines after an answer hold none
    undecorated = _LINE_DECORATION.sub(" ", line)
    for bare in (undecorated[_LINE_LABEL.match(undecorated).end() :], undecorated):  # "Seven." is no label
        bare = bare.strip(" \t.!*_`>#|")
        if "\\" not in bare:
            bare = bare.replace("{", " ").replace("}", " ").strip()
        if bare.lower() in _NUMBER_WORDS:
            return _NUMBER_WORDS[bare.lower()]
        if (digits := number_words_as_digits(bare)) != bare and as_number(digits) is not None:
            return digits  # "Twenty-five."
        if bare and as_number(clean(bare)) is not None:
            return bare
    return None


SENTENCE_END = re.compile(r"\.(?=\s|$)|\n")
SENTENCE_BREAK = re.compile(r"(?<=[.!?;])\s+|\n")


def retracts(gap: str) -> bool:
    """A gap retracts the boxes before it when a sentence of it says they are wrong without a condition
    or an alternative ("Wait, that is not right", not "if that is wrong") and the sentence that leads
    to the next box offers no alternative ("alternatively, it could be")."""
    if RETRACTION.search(gap) is None:
        return False
    sentences = SENTENCE_BREAK.split(gap)
    retracting = [s for s in sentences if RETRACTION.search(s)]
    return any(not HEDGE.search(s) for s in retracting) and not HEDGE.search(sentences[-1])


def same_answer(first: str, second: str) -> bool:
    """Whether two boxes of one response agree (same text, or same number: 15\\frac{39}{40} and 639/40)."""
    if first == second:
        return True  # one box, compared with itself by boxes.py's boxed_answer
    numbers = as_number(clean(number_words_as_digits(first))), as_number(clean(number_words_as_digits(second)))
    same_number = None not in numbers and numbers[0].value == numbers[1].value
    return same_number or canonical(first) == canonical(second)


_NAMED = re.compile(r"[A-Za-z](?:_\{?\w{1,4}\}?)?")  # "x", "a_3", "a_{37}": one letter, subscripted or not


_PLAIN_VALUE = re.compile(r"-?\d+(?:\.\d+)?")


def stated_value(statement: str) -> str:
    """What a statement gives, to compare it with another statement of the response: the value a true chain ends
    on ("9 * 2 = 18" -> "18", "x = {9}" -> "9", "3 + 2 = 5 apples" -> "5"), the one number of a sentence ("Tom has
    5 apples" -> "5"), else the statement itself ("7 = 5" keeps its false left side and agrees with neither)."""
    if _PLAIN_VALUE.fullmatch(statement):
        return statement  # most statements: "18"
    sides = [side.strip(" $") for side in EQUALS.split(statement)]
    if len(sides) > 1:
        *lefts, last = sides
        value = gsm8k_number(last.rstrip(". "))
        if value is None or not all(
            _NAMED.fullmatch(left) or exact_value(clean(left)) == value.value for left in lefts
        ):
            return statement
        statement = last.rstrip(". ")
    number = gsm8k_number(statement)
    if number is None:
        return statement
    value = number.value
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


# What follows a box is read without its decoration: markdown emphasis and HTML tags around words ("_or_", "<i>or</i>"),
# LaTeX spacing ("\\; \\text{or} \\; 7") and full-width or CJK brackets ("（or 7）", "【or 7】") are plain text.
_AFTER_DECORATION = re.compile(
    r"</?[a-zA-Z][\w-]{0,20}(?:\s[^<>]{0,80})?>|(?<![\w\\])[*_]+(?=[A-Za-z])|(?<=[A-Za-z])[*_]+(?![\w{])"
    r"|\\[,;:! ]|\\q?quad(?![a-zA-Z])"
)
_BRACKETS = str.maketrans("（）【】〔〕［］｛｝「」『』", "()[][][]{}\"\"\"\"")


def _plain_after(text: str, pos: int) -> str:
    window = text[pos : pos + 2 * SPAN_CHARS].translate(_BRACKETS)
    decorated = "<" in window or "_" in window or "*" in window or "\\" in window
    return _AFTER_DECORATION.sub(" ", window) if decorated else window


def alternative_follows(text: str, pos: int, answer: str, bare_or: bool) -> bool:
    """A different value offered right after the answer: "\\boxed{5} (or possibly 7)", "The answer is 5.
    Or 7.", "\\boxed{5}, or maybe it is 7" (after a box a plain "or" too: "\\boxed{5} or 7"). The value
    must follow the hedging word, with at most words such as "it could be" between: "Alternatively, we check
    3 x 6 = 18" offers nothing."""
    text, pos = _plain_after(text, pos), 0
    pattern = _ALTERNATIVE_AFTER_BOX if bare_or else _ALTERNATIVE
    if bare_or and (bracket := _BRACKET_AFTER_BOX.match(text, pos)) and _CONDITION.search(bracket.group(1)):
        values = [v for m in _FIRST_VALUE.finditer(bracket.group(1)) for v in m.groups() if v is not None]
        if any(not same_answer(v.strip(), answer) for v in values):
            return True  # "\\boxed{5} (7 if counting Tom)", "\\boxed{5} (other possible answer: 7)"
    if bare_or and (condition := _CONDITION_AFTER_BOX.match(text, pos)) is not None:
        clause = SENTENCE_END.split(text[condition.end() : condition.end() + SPAN_CHARS], maxsplit=1)[0]
        values = [v for m in _FIRST_VALUE.finditer(clause) for v in m.groups() if v is not None]
        if any(not same_answer(v.strip(), answer) for v in values):
            return True  # "\\boxed{5} unless Tom ate 2": the answer under a condition, another value otherwise
    near = pos + SPAN_CHARS  # what is right after the box: a bounded window keeps a run of "$ $ ..." cheap
    if bare_or and (match := _VALUE_AFTER_BOX.match(text, pos, near)) is not None and match.end() > pos:
        value = _FIRST_VALUE.match(text, match.end())
        if value is not None and _VALUE_ENDS.match(text[value.end() : value.end() + 10]):
            return not same_answer(next(g for g in value.groups() if g is not None), answer)
    if bare_or and (joined := _JOINED_AFTER_BOX.match(text, pos, near)) is not None:
        value = _FIRST_VALUE.match(text, joined.end())
        if value is not None and _CLAUSE_ENDS.match(text[value.end() : value.end() + 12]):
            return not same_answer(_first_group(value), answer)  # "\\boxed{5} and 7.": a second value
    if (match := pattern.match(text, pos, near)) is None:
        return False
    filler = _FILLER.match(text, match.end())
    value = _FIRST_VALUE.match(text, filler.end())
    return value is not None and not same_answer(next(g for g in value.groups() if g is not None), answer)


def offers_several(sentence: str) -> bool:
    """A sentence that offers two values with hedging words: "7, or maybe it is 5", "5 (or possibly 7)"."""
    prose = MATH_SPAN.sub(" $ ", sentence)
    values = len(MATH_SPAN.findall(sentence)) + len(NUMBER_TOKEN.findall(prose))
    hedged = re.search(r"\b(?:either|maybe|perhaps|possibly|alternatively)\b", prose, re.I)
    return values > 1 and hedged is not None


# A sentence that disowns what came before it, naming no value: "Wait, that is wrong.", "Hmm, this can't be right.",
# "I made a mistake." (not "that is not wrong", nor a step called wrong: "subtracting first would be wrong").
_DISOWNS = re.compile(
    r"\b(?:(?:that|this|it|which|my\s+answer|the\s+answer(?:\s+above)?)(?:'s|\s+is|\s+was|\s+seems|\s+must\s+be|\s+looks)?"
    r"\s+(?:wrong|incorrect|not\s+(?:right|correct)|a\s+mistake)|(?:that|this|it)\s+(?:can(?:no|')t|doesn't|does\s+not"
    r"|isn't|is\s+not)\s+(?:be\s+|seem\s+|look\s+)?(?:right|correct)|I\s+made\s+(?:a|an)\s+(?:mistake|error)|oops)\b"
    r"(?:\s+(?:somewhere|here|above|there|again|after\s+all))?[\s.!]*$",  # where the sentence ends
    re.IGNORECASE,
)


_DISOWN_WORD = re.compile(r"wrong|correct|right|mistake|error|oops", re.IGNORECASE)


def disowned_after(rest: str) -> bool:
    """Whether a sentence after the answer disowns it without giving another value ("$\\boxed{18}$. Wait, that is
    wrong."): the value left standing is one the response calls wrong. A later sentence that states a value again
    (a correction, a check) is left to the other rules."""
    if not _DISOWN_WORD.search(rest, 0, 400):
        return False  # most responses: nothing after the answer calls anything wrong
    for sentence in SENTENCE_BREAK.split(rest[:400]):
        if _DISOWNS.search(sentence.rstrip()):
            return not _ANY_VALUE.search(rest[rest.find(sentence) + len(sentence) :])
    return False


def offered_later(rest: str, answer: str, by_value: bool = False) -> bool:
    """A sentence that retracts the answer with a hedge and names another value ("Wait, no, it might be 7."), or
    that offers another value as possible ("It could also be 7.", "However, 7 is also possible.") or under a
    condition ("If the question meant weekly, it would be 35."), or that is only another value ("7"). `by_value`:
    the answer is a statement, compared by the value it gives (`stated_value`)."""
    if not _ANY_VALUE.search(rest):
        return False  # nothing after the answer names a value (most responses end there)
    answer = stated_value(answer) if by_value else answer
    for line in rest.split("\n"):
        if (bare := _BARE_VALUE.fullmatch(line)) is not None and not same_answer(bare.group(1), answer):
            return True
        if (value := _line_value(line)) is not None and not same_answer(value, answer):
            return True
    for sentence in SENTENCE_BREAK.split(rest):
        sentence = number_words_as_digits(sentence)  # "Wait, no, it might be seven."
        values = []
        if RETRACTION.search(sentence) and HEDGE.search(sentence):  # "Wait, no, it might be 7."
            values = _values_in(sentence)
        elif (
            (RETRACTION.match(_INTERJECTION.sub("", sentence)) or UNSURE.search(sentence))
            and RETRACTION.search(sentence)
            and not _ARITHMETIC.search(sentence)
        ):
            # "Wait, 6.", "Hmm, actually I think it's 7.": a correction to another value, not a check ("Wait, let me
            # check: 12 - 3 = 9.")
            values = _values_in(sentence)[-1:]
        if _NOT_RULED_OUT.search(sentence):
            values += [_first_group(m) for m in _FIRST_VALUE.finditer(sentence)]
        elif (listed := _CANDIDATES.search(sentence)) is not None:
            values += [_first_group(m) for m in _FIRST_VALUE.finditer(sentence, listed.end())]
        elif not _RULED_OUT.search(_IF_NOT.sub("if", sentence)):  # "The other solution is 3, which is extraneous."
            for offer in _OFFERED.finditer(sentence):
                if (value := _FIRST_VALUE.match(sentence, offer.end())) is not None:
                    values.append(next(g for g in value.groups() if g is not None))
            for value in _FIRST_VALUE.finditer(sentence):
                if _OFFERED_AFTER.match(sentence, value.end()):
                    values.append(next(g for g in value.groups() if g is not None))
        if _CONDITION_WORD.search(sentence) and not _DENIED.search(sentence):  # another reading's value
            values += [
                value for would in _WOULD_GIVE.finditer(sentence) if (value := _value_at(sentence, would.end()))
            ]
            values += [
                _first_group(value)
                for value in _FIRST_VALUE.finditer(sentence)
                if _WOULD_BE_RIGHT.match(sentence, value.end())
            ]
            # Its last 60 characters: a search of the whole sentence from every comma would be quadratic.
            values += [ending.group(1)] if (ending := _ENDS_ON_VALUE.search(sentence.rstrip()[-60:])) else []
        if any(not same_answer(v.strip(), answer) for v in values):
            return True
    return False


# An arithmetic chain from a value to its result: "180/5 = 36", "20 * 3 = $60" (a decimal point may be inside it).
_CHAIN_FROM = re.compile(r"(?:[^=;!?\n.]|\.(?=\d)){1,60}?=\s*\$?\s*[-+]?\.?\d[\d,]*(?:\.\d+)?")


def _chain_result(sentence: str, pos: int) -> tuple[str, int] | None:
    """(result, end) of a true chain starting at `pos` ("180/5 = 36" -> "36"), else None."""
    chain = _CHAIN_FROM.match(sentence, pos)
    if chain is not None and (result := stated_value(chain.group())) != chain.group():
        return result, chain.end()
    return None


def _value_at(sentence: str, pos: int) -> str | None:
    """The value a clause gives from `pos`: the result of a true chain ("would need 180/5 = 36 teachers" -> 36),
    else its first value ("would be 35")."""
    value = _FIRST_VALUE.match(sentence, pos)
    if value is None:
        return None
    chain = _chain_result(sentence, pos)
    return chain[0] if chain is not None else _first_group(value)


_BARE_POINT = re.compile(r"(?<![\w.])\.\d")


def _values_in(sentence: str) -> list[str]:
    """The values a sentence names, a true chain counted by its result ("If we redo it, 9*2 = 18." -> ["18"])."""
    values, pos = [], 0
    while (value := _FIRST_VALUE.search(sentence, pos)) is not None:
        begin = value.start()
        while begin > pos and sentence[begin - 1] == "(":
            begin -= 1  # "(60+72+42)/3 = 58": the chain opens with its bracket
        if (point := _BARE_POINT.search(sentence, pos, value.start())) is not None:
            begin = point.start()  # ".9*100 = 90": a decimal without its 0
        chain = _chain_result(sentence, begin) if begin < value.start() else None
        result, pos = chain or _chain_result(sentence, value.start()) or (_first_group(value), value.end())
        values.append(result)
    return values


def _first_group(match: re.Match[str]) -> str:
    return next(group for group in match.groups() if group is not None)
