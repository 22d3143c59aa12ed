"""The last value a response commits to for the asked quantity, where no answer marker says so (rules stated in
docs/verifier.md; used by grpo_train/verifier/extract.py):

- the words that name the asked quantity: the question's words from its interrogative on, up to a clause that gives
  data ("What is her salary after the raise?" -> {salary}; "How much does she make every day?" -> {make, day});
- an unmarked last sentence that states that quantity's value ("... so her salary is $57,500."), or a response that
  is only a value ("**18**");
- a last line that is an equation of the variable the question asks for ("Solve for $x$" ... "$x = 5$");
- the last of several labelled boxes when its label, and no other, names the asked quantity ("Width: \\boxed{4},
  area: \\boxed{32}" for "What is the area?");
- a last line that is only a value after the working ("...\\n**18**", "Eighteen.", "→ 18"), not after a line that
  leads into it with doubt;
- the words a closing sentence shares with the question's end are its data ("He earned $130 for the first two
  weeks."), and working after the value that comes to it is no second value ("$18 every day (9 eggs x $2)");
- a letter the response defines once as the asked quantity ("Let $x$ be the number of pages ...") is asked for.

Each refuses where it must guess: a sentence with a hedge, a negation, a condition or two values, a false chain
("3 + 2 = 7"), a label that hedges or that two boxes share. Regexes over the response's last characters: linear
(the question's restated tail: one pass per shared word, at most the question's QUESTION_CHARS).
"""

from __future__ import annotations

import functools
import re

from grpo_train.verifier.form import exact_value
from grpo_train.verifier.hedge import HEDGE, RETRACTION, SENTENCE_END, UNSURE, same_answer
from grpo_train.verifier.spelling import number_words_as_digits
from grpo_train.verifier.text import APPROXIMATE, MATH_SPAN, NEGATION, QUALIFIER, as_number, math_content

CLOSING_CHARS = 2000  # how much of an unmarked response's end is read
QUESTION_CHARS = 300  # the question is at the end of a problem

_STOPWORD_LIST = (
    "how many much what which who whose whom is are was were be been being does do did will would can could should"
    " shall may might must has have had the a an of in on at to for from by and or his her their its our your my he"
    " she they it we you this that these those there total number amount value find compute calculate determine all"
    " each every per than more less altogether together now then left remaining get got give end up out"
)
_STOPWORDS = frozenset(_STOPWORD_LIST.split())
_GENERIC_NOUNS = frozenset(("total", "amount", "number", "value"))
_INTERROGATIVE = re.compile(
    r"\b(?:how\s+(?:many|much|long|far|old|fast)|what|which|find|compute|calculate|determine)\b", re.IGNORECASE
)
# Where the question's asked phrase ends and its data begins: "What is the area of a rectangle with length 8 ...".
_DATA_CLAUSE = re.compile(r"\b(?:with|if|when|given|after|before|that|which|who|where|assuming|since|because)\b|[,;:$]",
                          re.IGNORECASE)  # fmt: skip
_WORD = re.compile(r"[A-Za-z]+")


_PER_PERIOD = {"daily": "day", "hourly": "hour", "weekly": "week", "monthly": "month", "yearly": "year",
               "annually": "year", "annual": "year", "nightly": "night"}
# A question about money ("How much ...", "... in dollars") is named by a currency sign on the value ("$18").
_MONEY = re.compile(r"\bhow\s+much\b|\b(?:dollars?|money|cost\w*|price\w*|pa(?:y|id)\w*|spen[dt]\w*|earn\w*|profit"
                    r"|worth|charge\w*|sav(?:e|es|ed|ings?)|budget|cents?)\b", re.IGNORECASE)  # fmt: skip
_CURRENCY = re.compile(r"[$€£¥₹]")


def _stem(word: str) -> str:
    word = word.lower()
    word = _PER_PERIOD.get(word, word)
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


@functools.lru_cache(maxsize=256)
def asked_words(problem: str | None) -> frozenset[str]:
    """The stems of the words naming what the question asks for; empty without a problem or an interrogative.
    Cached: a GRPO group shares its problem."""
    if not problem:
        return frozenset()
    question = question_sentence(problem)
    start = _INTERROGATIVE.search(question)
    if start is None:
        return frozenset()
    phrase = question[start.end() :]
    data = _DATA_CLAUSE.search(phrase)
    phrase = phrase[: data.start()] if data is not None else phrase
    words = {_stem(w) for w in _WORD.findall(phrase) if w.lower() not in _STOPWORDS and len(w) > 2}
    if not words:  # "What is the total amount?": the generic noun is all that names it
        words = {_stem(w) for w in _WORD.findall(phrase) if w.lower() in _GENERIC_NOUNS}
    return frozenset(words | ({"$"} if _MONEY.search(question) else set()))


_FIGURE = re.compile(r"\[asy\].*?(?:\[/asy\]|\Z)", re.DOTALL)


@functools.lru_cache(maxsize=256)
def question_sentence(problem: str) -> str:
    """The question of a problem: its last sentence that asks ("...?"), or its last sentence (a note such as "(Express
    your answer as a common fraction.)" or an [asy] figure may follow the question)."""
    if "[asy]" in problem:
        problem = _FIGURE.sub(" ", problem).strip()
    sentences = re.split(r"(?<=[.!?])\s+(?=\S)", problem[-QUESTION_CHARS:].strip())
    return next((s for s in reversed(sentences) if s.rstrip(")").endswith("?")), sentences[-1])


def _names_asked(text: str, asked: frozenset[str]) -> bool:
    if "$" in asked and _CURRENCY.search(text):
        return True  # "The total is $18." for "How much does she make?"
    return any(_stem(w) in asked for w in _WORD.findall(MATH_SPAN.sub(" ", text)))


# ----------------------------------------------------------------------------------------------------
# The unmarked last sentence (GSM8K)

_HOPE_TAIL = re.compile(r"I hope it is correct\.?$", re.IGNORECASE)
_EMPHASIS = re.compile(r"\*\*|__|`|(?<![\d\s])[*_]|[*_](?![\d\s])")  # markdown's, not a product's "9 * 2"
_BARE = re.compile(r"^[\s$]*(?:\\\(|\\\[)?\s*[-+]?\$?\s*[-+]?\.?\d[\d,]*(?:\.\d+)?\s*(?:\\\)|\\\])?[\s$.]*$")
_SENTENCES = re.compile(r"(?<=[.!?])\s+(?=\S)|\n")
# A clause break inside the last sentence: the value is stated in its last clause ("She gets $7,500 more, so her
# salary is $57,500.").
_CLAUSES = re.compile(r",(?!\d{3})\s*|;\s*|\s+(?:so|thus|hence|therefore|and)\s+", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])\$?\s*-?(?:[1-9]\d{0,2}(?:[ '’]\d{3})+(?![\d,.])|\d[\d,]*(?:\.\d+)?)(?![\w])")
# An arithmetic chain ending on "= value": "3 + 2 = 5", "9 * $2 = $18", "50000*0.15=7500".
_CHAIN = re.compile(
    r"((?:(?:\$\s*)?\d[\d,]*(?:\.\d+)?\s*(?:[-+*/×÷x]|\\times|\\cdot|\\div)\s*)+\$?\s*\d[\d,]*(?:\.\d+)?)\s*=\s*\$?\s*"
    r"(-?\d[\d,]*(?:\.\d+)?)"
)
_HEDGED = re.compile(r"\b(?:either|maybe|perhaps|possibly|approximately|about|around|roughly|nearly|almost)\b", re.I)


def closing_statement(text: str, problem: str | None) -> str | None:
    """A GSM8K response's answer without a marker: the whole response when it is one value ("**18**", "$18"), else
    the last clause of a complete last sentence that names the asked quantity and gives one value, its true chains
    read as their results ("Janet makes 9 * $2 = $18 every day." -> "Janet makes $18 every day"). None otherwise."""
    text = without_check(_HOPE_TAIL.sub("", text.strip()).strip()[-CLOSING_CHARS:])
    bare = _EMPHASIS.sub("", text)
    if len(bare) <= 40 and _BARE.match(bare):
        return bare.strip(" $.")
    if len(bare) <= 80 and _BARE.match(digits := number_words_as_digits(bare)):
        return digits.strip(" $.")  # "One thousand two hundred fifty-one."
    if len(bare) <= 80 and "\n" not in bare and (result := _results(bare.rstrip(". "))) and _BARE.match(result):
        return result.strip(" $.")  # a response that is only a true chain: "3 + 2 = 5"
    asked = asked_words(problem)
    if (labelled := _LABEL_LINE.match(bare.rstrip().rsplit("\n", 1)[-1])) is not None:
        label = labelled.group(1)
        hedged = HEDGE.search(label) or UNSURE.search(label) or NEGATION.search(label) or RETRACTION.search(label)
        if not hedged and (_GENERIC_LABEL.fullmatch(label.strip()) or (asked and _names_asked(label, asked))):
            return labelled.group(2).strip()  # "Total = $18", "Daily earnings: $18"
    if not asked or not bare.rstrip().endswith((".", "!")):
        return None  # cut off mid-sentence, or nothing names the asked quantity
    sentence = _SENTENCES.split(bare.rstrip())[-1].rstrip(".! ")
    if (restated := without_question_tail(sentence, problem, asked)) is not None:
        found = _closing_clause(restated, asked)  # "He earned $130 for the first two weeks."
        if found is not None:
            return found
    found = _closing_clause(sentence, asked)
    if found is None and (unjustified := without_working(sentence)) is not None:
        found = _closing_clause(unjustified, asked)  # "She makes $18 every day (9 eggs x $2)."
    if found is None and (own := without_other_quantities(sentence, problem)) is not None:
        found = _closing_clause(own, asked)  # "There are 4 full boxes, with 5 pencils left over."
    return found


# Working after the value, at the end of the sentence: "(9 eggs x $2)", ", since 9 x 2 = 18", "because 9 * $2 is $18".
_JUSTIFICATION = re.compile(r"\s*(?:\(([^()]{1,80})\)|,?\s+(?:since|because|as|from)\s+([^,;()]{1,80}))\s*$", re.I)
_TIMES = re.compile(r"(?<=\d)\s*(?:[a-zA-Z]+\s*)?[x×]\s*(?=\$?\s*\d)")


def without_working(sentence: str) -> str | None:
    """The sentence without the working that justifies its one value at its end ("She makes $18 every day (9 eggs x
    $2)." -> "She makes $18 every day"): working whose value, or whose true chain's result, is that value; None when
    there is none, or when it hedges or gives another value."""
    match = _JUSTIFICATION.search(sentence)
    if match is None:
        return None
    work, left = match.group(1) or match.group(2), sentence[: match.start()]
    if HEDGE.search(work) or UNSURE.search(work) or NEGATION.search(work) or RETRACTION.search(work):
        return None
    values = _NUMBER.findall(MATH_SPAN.sub(" ", left))
    stated = as_number(values[0].replace("$", "").replace(",", "").strip()) if len(values) == 1 else None
    expression = re.sub(r"\bis\b", "=", _TIMES.sub("*", work.replace("\\times", "*")), flags=re.IGNORECASE)
    expression = re.sub(r"[A-Za-z$€£,]+", " ", expression)
    if stated is None or not re.search(r"[-+*/]", expression) or not re.fullmatch(r"[\d\s.*/+\-=()]+", expression):
        return None
    *lefts, right = expression.split("=")
    if lefts and ((result := as_number(right.strip())) is None or result.value != stated.value):
        return None  # "(9 x 2 = 20)", "(9 x 2 = 9)"
    value = exact_value(re.sub(r"\s+", "", lefts[-1] if lefts else right))
    return left if value is not None and value == stated.value else None


def _closing_clause(sentence: str, asked: frozenset[str]) -> str | None:
    """The value and its words in the last clause of a closing sentence (see closing_statement), else None."""
    if NEGATION.search(sentence) or HEDGE.search(sentence) or UNSURE.search(sentence) or _HEDGED.search(sentence):
        return None
    if RETRACTION.search(sentence) or "?" in sentence:
        return None
    reduced = _results(number_words_as_digits(sentence))  # "so she earns eighteen dollars"
    if reduced is None or "=" in reduced:
        return None  # a false chain: its left side would be hidden
    clauses = [clause for clause in _CLAUSES.split(reduced) if _NUMBER.search(clause)]
    if not clauses or len(_NUMBER.findall(clauses[-1])) != 1 or not _names_asked(clauses[-1], asked):
        return None
    clause = clauses[-1]
    if QUALIFIER.search(clause) or APPROXIMATE.search(clause):
        return None  # "her salary is over $57,500" (the last clause with a value is the last value)
    return clause[_NUMBER.search(clause).start() :].strip()  # the value and its words: "$57,500", "5 minutes"


# The question's end restated after the value: the common tail of the sentence and the question, word by word
# ("He earned $130 for the first two weeks." for "How much did he earn for the first two weeks?").
_TOKEN = re.compile(r"\S+")


def without_question_tail(sentence: str, problem: str | None, asked: frozenset[str] | None = None) -> str | None:
    """The sentence without the words it shares with the end of the question, as long as what is left still holds a
    value and names the asked quantity (`asked`; None: holds a value only): the question's own data restated ("They
    make $180 a week if they are open 2 days a week.") is neither a condition of the response's nor another value.
    None when the sentence does not end as the question does (two words or more) or nothing is left."""
    if not problem:
        return None
    question = question_sentence(problem)
    ours = [t.group() for t in _TOKEN.finditer(sentence.rstrip(".!? "))]
    theirs = [t.group().lower() for t in _TOKEN.finditer(question.rstrip(".!? "))]
    common = 0
    while common < min(len(ours), len(theirs)) and ours[-1 - common].lower() == theirs[-1 - common]:
        common += 1
    for shared in range(common, 1, -1):  # the longest restated tail that leaves the answer and its words
        left = " ".join(ours[: len(ours) - shared])
        if _NUMBER.search(MATH_SPAN.sub(" ", left)) and (asked is None or _names_asked(left, asked)):
            return left
    return None


# How a line leads into the value on the next: a last sentence without a value (a lead-in, not working) that hedges,
# doubts, negates or retracts ("Perhaps", "I'm not sure, but", "Wait, that was wrong."), or any line that ends on
# such a word ("... it is either", "... or", "It is not").
_DOUBT = re.compile(r"\b(?:if|unless|otherwise|either|or|could|might|may|maybe|perhaps|possibly|alternatively)\b", re.I)
_DOUBT_AT_END = re.compile(
    r"(?:\b(?:if|unless|otherwise|either|or|could|might|may|maybe|perhaps|possibly|probably|likely|not|no|wait|hmm+"
    r"|think|guess|believe|approximately|about|around|roughly|nearly|almost|least|most|over|under|than|be)|n't)\W*$",
    re.IGNORECASE,
)


def doubting_lead_in(line: str) -> bool:
    """Whether the line before a last-line answer leads into it with doubt (see _DOUBT_AT_END)."""
    if _DOUBT_AT_END.search(line):
        return True
    sentence = re.split(r"(?<=[.!?])\s+", line.strip())[-1]
    if re.search(r"\d", sentence):
        return False  # working: "Therefore, 88 daily flights / 4 = 22 flights to France or Germany."
    return bool(_DOUBT.search(sentence) or UNSURE.search(sentence) or _HEDGED.search(sentence)
                or NEGATION.search(sentence) or RETRACTION.search(sentence))


# A last line that is only a value, after the working: "...\n18", "...\n**18**", "...\n$18$". Not after a line
# that hedges, retracts, negates or asks, or that opens a list (ends with ":"); not one of several value lines
# ("5\n7"); not a numbered item ("3." under "1. ..." lines).
_ENUMERATED = re.compile(r"^\s*\d+[.)]\s", re.MULTILINE)


_POINTER = re.compile(r"^\s*(?:→|⇒|=>|->|✅|✓|✔)\s*")
_VALUE_WITH_WORDS = re.compile(r"^\s*\$?\s*-?\d[\d,]*(?:\.\d+)?\s+([A-Za-z]+(?:\s+[A-Za-z]+)?)\s*\.?\s*$")


def last_line_value(text: str, problem: str | None = None) -> str | None:
    """The last line of a response with working before it, when that line is only a number ("18", "**18**",
    "$18$", "\\(18\\)", "Eighteen."), or a number and words that name the asked quantity ("18 dollars"); None
    otherwise."""
    text = without_check(_HOPE_TAIL.sub("", text.strip()).strip()[-CLOSING_CHARS:])
    lines = [line for line in _EMPHASIS.sub("", text).split("\n") if line.strip()][-2:]
    if len(lines) < 2 or len(lines[-1]) > 80:
        return None
    lines = [number_words_as_digits(line) if len(line) <= 80 else line for line in lines]  # "Eighteen."
    lines = [_POINTER.sub("", line) for line in lines]  # "→ 18", "✅ 18"
    words, asked = _VALUE_WITH_WORDS.match(lines[-1]), asked_words(problem)
    valued = _BARE.match(lines[-1]) or (words is not None and (_names_asked(words.group(1), asked) or (
        "$" in asked and re.fullmatch(r"dollars?|USD", words.group(1), re.IGNORECASE))))  # "18 pages", "18 dollars"
    if not valued or _BARE.match(lines[-2]) or _VALUE_WITH_WORDS.match(lines[-2]):
        return None
    before, last = lines[-2].rstrip(), lines[-1].strip()
    if before.endswith((":", "?")) or "?" in last or (last.endswith(".") and _ENUMERATED.search(text)):
        return None
    if doubting_lead_in(before):
        return None
    return re.sub(r"^\\[(\[]|\\[)\]]$", "", last.strip(" $.")).strip(" $")


# A last line that labels one value: "Total = $18", "Result: 18", "Daily earnings: $18" (a label naming the asked
# quantity, or a generic one).
_LABEL_LINE = re.compile(
    r"^\s*([A-Za-z][A-Za-z' ]{0,40}?)\s*[:=]\s*(\$?\s*-?\d[\d,]*(?:\.\d+)?(?:\s+[A-Za-z]+){0,2})\s*[.!]?\s*$"
)
_GENERIC_LABEL = re.compile(r"(?:the\s+)?(?:final\s+)?(?:result|total|solution|answer)|therefore|thus|hence|so",
                            re.IGNORECASE)  # fmt: skip
# A check of the work at the end: "Check: 9 * 2 = 18.", "Verification: 2(5) + 3 = 13 ✓" (one line, after a line
# break or a sentence); it is not the answer, unless it offers another value or retracts.
_CHECK_TAIL = re.compile(
    r"(?:\n|(?<=[.!?])[ \t])[*_#>\s]*(?:check(?:ing)?|verif(?:y|ying|ication)|double[- ]check\w*)\b[^\n]{0,300}$",
    re.IGNORECASE,
)
_CHECK_OFFERS = re.compile(r"\b(?:or|also|too|alternative\w*|another|either|maybe|perhaps|might|could|instead)\b", re.I)


def without_check(text: str) -> str:
    """The text without a last line or sentence that checks the work ("So x = 5.\n\nCheck: 2(5) + 3 = 13."), when
    that check neither offers another value nor retracts; the text itself otherwise."""
    check = _CHECK_TAIL.search(text, max(0, len(text) - 400))
    if check is None or RETRACTION.search(check.group()) or _CHECK_OFFERS.search(check.group()):
        return text
    return text[: check.start()].rstrip()


def _results(sentence: str) -> str | None:
    """The sentence with each true chain written as its result; None when a chain is false."""
    parts, pos = [], 0
    for chain in _CHAIN.finditer(sentence):
        left = re.sub(r"[$,\s]", "", chain.group(1)).replace("x", "*").replace("×", "*").replace("÷", "/")
        value, result = exact_value(left), as_number(chain.group(2).replace(",", ""))
        if value is None or result is None or value != result.value:
            return None
        parts += [sentence[pos : chain.start()], "$" if "$" in chain.group() else "", chain.group(2)]
        pos = chain.end()
    return "".join(parts) + sentence[pos:]


# ----------------------------------------------------------------------------------------------------
# The asked variable's equation (MATH)

_ASKED_NAME = re.compile(r"^\s*([a-zA-Z](?:_\{?\w{1,3}\}?)?)\s*$")
_EQUATION_LINE = re.compile(r"^\s*(?:\$\$?|\\\[|\\\()?\s*([a-zA-Z](?:_\{?\w{1,3}\}?)?)\s*=\s*([^=\n]+?)\s*"
                            r"(?:\$\$?|\\\]|\\\))?\s*\.?\s*$")  # fmt: skip


@functools.lru_cache(maxsize=256)
def asked_variables(problem: str | None) -> frozenset[str]:
    """The variables the question asks for: its math spans that are one name ("Solve for $x$." -> {"x"})."""
    if not problem:
        return frozenset()
    question = re.split(r"(?<=[.!?])\s+(?=\S)", problem[-QUESTION_CHARS:].strip())[-1]
    if not re.search(r"\b(?:find|solve|what|compute|determine|value)\b", question, re.IGNORECASE):
        return frozenset()
    names = (_ASKED_NAME.match(math_content(span)) for span in MATH_SPAN.finditer(question))
    bare = _BARE_ASKED.findall(MATH_SPAN.sub(" ", question))  # "Solve for x: ...", "find the value of y"
    return frozenset([name.group(1) for name in names if name is not None] + bare)


# A variable named without math: "Solve for x: ...", "find the value of y" (not the article: "Find a number ...").
_BARE_ASKED = re.compile(r"\b(?:solve\s+for|find|value\s+of|what\s+is)\s+(?![aAI]\b)([a-zA-Z])(?![\w'])", re.I)


_IMPLIES = re.compile(r"\\(?:Rightarrow|implies|Longrightarrow)(?![a-zA-Z])|⟹|⇒")
# A letter the response lets stand for a quantity: "Let $x$ be the number of pages she reads.", "Let x = the total".
_DEFINED = re.compile(
    r"\blet\s+\$?\s*([a-zA-Z])\s*\$?\s+(?:be|denote|represent|stand\s+for|=)\s+([^.;\n]{1,100})", re.IGNORECASE
)


def defined_variables(text: str, problem: str | None) -> frozenset[str]:
    """The letters the response defines once, as the quantity the question asks for ("Let $x$ be the number of pages
    she reads." for "How many pages does she read?"); a letter defined twice, or as another quantity, is not one."""
    if "et" not in text or not (asked := asked_words(problem)):
        return frozenset()
    definitions: dict[str, list[str]] = {}
    for match in _DEFINED.finditer(text):
        definitions.setdefault(match.group(1), []).append(match.group(2))
    return frozenset(name for name, what in definitions.items() if len(what) == 1 and _names_asked(what[0], asked))


def asked_equation(text: str, problem: str | None) -> str | None:
    """The last line when it is an equation of an asked variable to one value ("$x = 5$"), as "x = 5"; else None.
    The asked variables: those the question names, and those the response defines as the asked quantity."""
    if "=" not in text[-CLOSING_CHARS:]:
        return None  # most responses without a marker: no equation at their end
    names = asked_variables(problem) | defined_variables(text, problem)
    if not names:
        return None
    lines = [line for line in without_check(text.rstrip()[-CLOSING_CHARS:]).split("\n") if line.strip()]
    if lines and (implied := _IMPLIES.split(lines[-1])) and len(implied) > 1:
        lines[-1] = implied[-1]  # "$3x = 18 \\Rightarrow x = 6$": what the line concludes
    equation = _EQUATION_LINE.match(_EMPHASIS.sub("", lines[-1])) if lines else None
    if equation is None or equation.group(1) not in names or re.search(r"\\pm|\bor\b|,|\\(?:lor|vee)", lines[-1]):
        return None  # another name, or two values ("x = 5 or x = 7", "x = \\pm 5")
    if len(lines) > 1 and doubting_lead_in(lines[-2]):
        return None  # "Perhaps\n$x = 5$", "It is not\n$x = 5$"
    return f"{equation.group(1)} = {equation.group(2).rstrip('.').strip()}"


# ----------------------------------------------------------------------------------------------------
# Labelled boxes

_LABEL = re.compile(r"[A-Za-z][A-Za-z' ]{0,60}")


def labelled_box(text: str, boxes: list[tuple[int, int, str]], problem: str | None) -> bool:
    """Whether boxes that disagree are labelled answers to several quantities, the last the asked one: every box has
    a label (the words before it on its line, since the previous box), the last label names the asked quantity and
    no earlier label does, and no label hedges, retracts or negates ("Width: \\boxed{4}, area: \\boxed{32}")."""
    if len(boxes) < 2 or not (asked := asked_words(problem)):
        return False
    labels, previous = [], 0
    for start, end, _ in boxes:
        line_start = text.rfind("\n", previous, start) + 1
        label_text = text[max(previous, line_start, start - 80) : start]
        words = " ".join(_LABEL.findall(label_text.replace("\\", " \\")))
        if not words.strip() or re.search(r"\\[a-zA-Z]", label_text.replace("\\boxed", "")):
            return False
        if HEDGE.search(words) or RETRACTION.search(words) or UNSURE.search(words) or NEGATION.search(words):
            return False
        labels.append(words)
        previous = end
    return _names_asked(labels[-1], asked) and not any(_names_asked(label, asked) for label in labels[:-1])



# ----------------------------------------------------------------------------------------------------
# Sentences about another quantity

# A value and the noun it counts: "5 pencils", "$3 change", "3 eggs".
# (Whitespace is read only after a "$": a long run of spaces before a digit stays linear.)
_VALUE = re.compile(r"(?<![\w.])(?:\$[ \t]?)?-?\d[\d,]*(?:\.\d+)?(?!\w)")
_COUNTED = re.compile(r"(?<![\w.])(?:\$[ \t]?)?-?\d[\d,]*(?:\.\d+)?[ \t]+([a-z]{3,})", re.IGNORECASE)  # the next word
_NOT_COUNTED = frozenset(("daily", "weekly", "monthly", "yearly", "annually", "hourly", "nightly", "more", "less",
                          "fewer", "extra", "times", "percent", "hundred", "thousand", "million",
                          "billion", "dozen", "left", "each", "per", "total", "altogether", "instead", "for", "the",
                          "and", "from", "with", "into", "over", "than", "after", "before", "during", "since", "until",
                          "out", "off", "are", "were", "was", "will", "would", "could", "can", "may", "might"))
_OFFERS = re.compile(r"\b(?:answer|also|instead|alternative\w*|else|otherwise|result|total|final|correct|actually)\b",
                     re.IGNORECASE)  # fmt: skip


def about_another_quantity(sentence: str, problem: str | None) -> bool:
    """Whether a sentence states values of other quantities only ("5 pencils are left over." after "\\boxed{4}" full
    boxes): each value counts a noun, no word of it names the asked quantity (nor a currency for a money question),
    and nothing in it hedges, retracts, negates or speaks of the answer."""
    asked = asked_words(problem)
    counted = _COUNTED.findall(sentence)
    if any(noun.lower() in _NOT_COUNTED for noun in counted):
        return False  # "5 more", "5 times", "5 thousand": the value of an operation or a scale, not a count
    if not asked or not counted or len(counted) != len(_VALUE.findall(sentence)) or _names_asked(sentence, asked):
        return False
    if "$" in asked and re.search(r"\b(?:dollars?|cents?|USD|euros?)\b", sentence, re.IGNORECASE):
        return False
    doubts = HEDGE.search(sentence) or UNSURE.search(sentence) or _HEDGED.search(sentence) or _OFFERS.search(sentence)
    return not (doubts or NEGATION.search(sentence) or RETRACTION.search(sentence) or "?" in sentence)


def offers_asked_value(rest: str, answer: str, problem: str | None) -> bool:
    """Whether a sentence after the answer gives the asked quantity another value with a hedge or a condition: a
    value that counts the asked noun, or a sum of money for a money question ("\\boxed{4} full boxes. 5 boxes if we
    count the partial one.", "If she sold 10 eggs she would make $20."); a value of something else under a
    condition ("if the polygon has more than 8 sides, the angle is 190 degrees") is not one."""
    if not (asked := asked_words(problem)) or not _VALUE.search(rest):
        return False
    for sentence in re.split(r"(?<=[.!;?])\s+|\n", rest[:CLOSING_CHARS]):
        if _OFFER_WORD.search(sentence) is not None:
            end = len(sentence)  # "5 boxes, or maybe 6": any value of the sentence is offered
        elif (condition := _CONDITION_WORD.search(sentence)) is not None:
            end = condition.start()  # "5 boxes if we count ...": the value the condition follows ("If the polygon had
            # 9 sides, ..." argues, it offers nothing)
        else:
            continue
        values = [m.group() for m in _COUNTED.finditer(sentence, 0, end) if _stem(m.group(1)) in asked]
        values += _MONEY_VALUE.findall(sentence, 0, end) if "$" in asked else []
        if any(not same_answer(re.sub(r"[$,\s]|[a-zA-Z]+$", "", v), answer) for v in values):
            return True
    return False


_OFFER_WORD = re.compile(r"\b(?:or|maybe|perhaps|possibly|alternatively|might|could|probably)\b", re.IGNORECASE)
_CONDITION_WORD = re.compile(r"\b(?:if|unless)\b", re.IGNORECASE)
_MONEY_VALUE = re.compile(r"\$[ \t]?\d[\d,]*(?:\.\d+)?")


# The clauses of a sentence or an answer, for trailing ones about another quantity: "4 full boxes, with 5 pencils left
# over", "4 boxes (5 pencils left over)", "4 boxes and 5 pencils remain".
_TRAILING_CLAUSE = re.compile(
    r"(?:\s*\(([^()]{1,80})\)|(?:,|;|\s+and|\s+with|,\s+with|,\s+and)\s+([^,;()]{1,80}))\s*\.?\s*$"
)


def without_other_quantities(text: str, problem: str | None, signs_kept: bool = True) -> str | None:
    """The text without its trailing clauses about another quantity (see about_another_quantity), as long as a value
    is left before them; None when there is none to drop. `signs_kept` False: an extracted statement, its currency
    signs dropped, which cannot tell another sum of money from a count for a money question."""
    if not signs_kept and "$" in asked_words(problem):
        return None
    left, dropped = text.rstrip(" ."), False
    while (clause := _TRAILING_CLAUSE.search(left)) is not None:
        words = clause.group(1) or clause.group(2)
        if not about_another_quantity(words, problem) or not _VALUE.search(left[: clause.start()]):
            break
        left, dropped = left[: clause.start()].rstrip(), True
    return left if dropped else None


def other_quantities_dropped(rest: str, problem: str | None) -> str:
    """The text after an answer without its sentences about other quantities (see about_another_quantity)."""
    parts = re.split(r"((?<=[.!;])[ \t]+|\n)", rest[:CLOSING_CHARS])  # sentences, the breaks between them kept
    return "".join(p for p in parts if not (_VALUE.search(p) and about_another_quantity(p, problem)))


# ----------------------------------------------------------------------------------------------------
# The clause after a box

# "or" a value, with only words between the box and it ("candies, or 6"): "has a remainder of 1 when divided by 2, 3, or
# 6" lists the data of another quantity.
_OR_VALUE = re.compile(
    r"[^\d.\n$]{0,40}?\b(?:or|otherwise|alternatively|else)\b[^\d.\n$]{0,20}?"
    r"(?:(?<![\\$])\$([^$\n]+?)\$|(?<![\w.])(-?\d[\d,]*(?:\.\d+)?))"
)


def other_value_in_clause(text: str, end: int, answer: str) -> bool:
    """Whether the rest of the box's sentence offers another value after an "or" ("\\boxed{5} candies, or 6 if the
    rest are shared"); a clause about another quantity ("\\boxed{5} candies, with a remainder of 3") does not."""
    rest = text[end : end + 200]  # the "or" within 40 characters of the box, its value within 20 of it
    stop = SENTENCE_END.search(rest)
    clause = rest[: stop.start()] if stop is not None else rest
    offered = _OR_VALUE.match(clause.lstrip("$ \t"))  # past the box's own math
    if offered is None:
        return False
    return not same_answer(offered.group(1) or offered.group(2).replace(",", ""), answer)
