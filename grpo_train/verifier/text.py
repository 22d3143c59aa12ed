"""The verifier's text layer: what is printed, normalised spellings and plain numbers, without SymPy.

Everything here is regex or a linear scan over the text (safe on a 1 MB response); the rules that use it
are stated in docs/verifier.md. The normalising functions are memoised for the duration of one
item (`forget` is called before each): an answer is normalised several times on its way through the
comparison, but nothing is carried over from one response to the next.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction

MAX_BOX_CHARS = 4000  # a "boxed answer" longer than this is not an answer

# A math span: display ($$, \[) may span lines, inline ($, \() may not.
MATH_SPAN = re.compile(
    r"\$\$(.+?)(?<!\\)\$\$|\\\[(.+?)\\\]|(?<![\\$])\$([^$\n]+?)(?<!\\)\$|\\\(([^\n]+?)\\\)", re.DOTALL
)
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)


def forget() -> None:
    """Empties the per-item memo of the normalising functions below."""
    for function in (strip_wrappers, clean, canonical, as_number, gsm8k_number):
        function.cache_clear()


def math_content(match: re.Match[str]) -> str:
    return next(group for group in match.groups() if group is not None)


def matching_brace(text: str, open_pos: int, limit: int = MAX_BOX_CHARS) -> int | None:
    """Index of the `}` closing the `{` at open_pos, or None when it is not closed within `limit` chars."""
    depth = 0
    for match in _BRACE_TOKEN.finditer(text, open_pos, open_pos + limit):
        depth += {"{": 1, "}": -1}.get(match.group(), 0)
        if depth == 0:
            return match.start()
    return None


# ----------------------------------------------------------------------------------------------------
# What is printed

_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))
# Spaces of other widths print as a space: "5\u00a07" and "5\u20097" are two numbers, "1\u2009000" groups thousands.
_ZERO_WIDTH.update(dict.fromkeys(map(ord, "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
                                         "\u202f\u205f\u3000"), " "))
# Cyrillic and Greek letters that print as Latin ones are read as those: "$5$ оr $7$" (a Cyrillic о) offers two values.
# (Greek letters used in mathematics, α, ν, ρ, ..., look like no Latin letter or are kept: only omicron and capitals.)
_ZERO_WIDTH.update(
    str.maketrans("аеорсухіјѕԁԛԝһАВЕКМНОРСТХІЈЅοΟΑΒΕΖΗΙΚΜΝΡΤΥΧ", "aeopcyxijsdqwhABEKMHOPCTXIJSoOABEZHIKMNPTYX")
)
# \phantom{X} prints nothing where X would be. A colour is decoration ("\color{red}{7}" and "{\color{red} 7}"
# print 7) only when it is one of the named colours below, or a mix of them with at least a fifth of colour (xcolor's
# "green!40" is 40% green, the rest white), or a value (rgb, RGB, HTML, hex, gray, cmyk, hsb) at least that far from
# white; anything else (white, a pale or unknown name, "red!5", "rgb(255,255,255)", "transparent") hides its content.
_COLOUR_NAMES = (
    "black blue brown cyan darkgray darkgrey gray grey green lime magenta olive orange pink purple red teal"
    " violet yellow navy maroon crimson indigo gold darkblue darkred darkgreen darkorange darkviolet forestgreen"
    " royalblue midnightblue blueviolet redviolet orangered firebrick brickred mahogany plum orchid fuchsia aqua"
    " silver tan turquoise salmon coral tomato chocolate sienna seagreen skyblue steelblue cornflowerblue"
    " dodgerblue deepskyblue limegreen springgreen olivegreen junglegreen emerald cerulean ceruleanblue"
    " processblue periwinkle cadetblue rubinered rhodamine mulberry wildstrawberry bittersweet burntorange"
    " goldenrod dandelion yelloworange redorange raspberry navyblue bluegreen aquamarine carnationpink darkorchid"
    " greenyellow pinegreen rawsienna royalpurple sepia tealblue violetred yellowgreen darkcyan darkmagenta"
    " darkslateblue darkslategray darkslategrey darkolivegreen darkgoldenrod darkkhaki darksalmon darkseagreen"
    " darkturquoise deeppink hotpink indianred mediumblue mediumpurple mediumseagreen mediumvioletred olivedrab"
    " rebeccapurple slateblue slategray slategrey saddlebrown seagreen lightseagreen brightblue"
)
_VISIBLE_COLOURS = frozenset(_COLOUR_NAMES.split())
_MIN_COLOUR = 0.2  # the least share of colour (against white) that still prints
_COLOUR_COMMAND = re.compile(r"\\(?:text)?color\s*(?:\[\s*(\w{1,10})\s*\]\s*)?\{([^{}]{0,60})\}")
_HIDING = re.compile(rf"\\(?:[hv]?phantom|mathphantom)\s*(?=\{{)|{_COLOUR_COMMAND.pattern}")
_HIDING_HINT = re.compile(r"\\(?:[hv]?phantom|mathphantom|color|textcolor)")


def _colour_share(model: str | None, spec: str) -> float:
    """How far a colour is from white: 0 (white, or not known to print) to 1."""
    spec, model = spec.strip().replace("\\#", "#").lower(), (model or "").lower()
    if not model:
        if hexa := re.fullmatch(r"#([0-9a-f]{3}|[0-9a-f]{6})", spec):  # CSS spellings (KaTeX, MathJax)
            model, spec = "html", hexa.group(1)
        elif css := re.fullmatch(r"rgb\((.*)\)", spec):
            model, spec = "rgb", css.group(1)
        else:
            return _named_share(spec)
    if model == "html":
        digits = "".join(d * 2 for d in spec) if len(spec) == 3 else spec
        if not re.fullmatch(r"[0-9a-f]{6}", digits):
            return 0.0
        model, values = "rgb", [int(digits[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    else:
        values = [float(v) for v in re.findall(r"\d+(?:\.\d*)?|\.\d+", spec)]
        top = {"rgb": 255, "gray": 15, "hsb": 240}.get(model, 1)  # RGB, Gray and HSB count in whole steps
        values = [v / top for v in values] if values and max(values) > 1 else values
    if not values or max(values) > 1:
        return 0.0
    if model == "gray" and len(values) == 1:
        return 1 - values[0]
    if model == "rgb" and len(values) == 3:
        return 1 - min(values)
    if model == "cmyk" and len(values) == 4:
        return max(values)
    if model == "hsb" and len(values) == 3:
        return max(values[1], 1 - values[2])
    return 0.0  # an unknown model


def _named_share(spec: str) -> float:
    """xcolor's mix "c1!p!c2!q...": p% of c1 and the rest c2 (white when c2 is left out)."""
    parts = spec.replace(" ", "").split("!")
    if parts[0] not in _VISIBLE_COLOURS | {"white"} or len(parts) > 7:
        return 0.0
    share = 0.0 if parts[0] == "white" else 1.0
    for i in range(1, len(parts), 2):
        other = parts[i + 1] if i + 1 < len(parts) else "white"
        if not re.fullmatch(r"\d+(?:\.\d*)?", parts[i]) or other not in _VISIBLE_COLOURS | {"white"}:
            return 0.0
        weight = min(float(parts[i]), 100.0) / 100
        share = weight * share + (1 - weight) * (0.0 if other == "white" else 1.0)
    return share


# Comments are not printed: HTML's "<!-- .. -->" (markdown), LaTeX's "\\iffalse .. \\fi" and comment environment;
# an unclosed one runs to the end of the text. A footnote prints below the text: "\\footnote{X}" is read as a
# later paragraph X ("The answer is 7.\\footnote{The answer is 5.}" states two answers).
_COMMENT = re.compile(
    r"<!--.*?(?:-->|\Z)|\\iffalse\b.*?(?:\\fi\b|\Z)|\\begin\s*\{comment\}.*?(?:\\end\s*\{comment\}|\Z)"
    # HTML elements a page does not render, a processing instruction, markdown's comment line ("[//]: # (..)")
    r"|<(script|style|template|noscript)\b[^<>]{0,200}>.*?(?:</\1\s*>|\Z)|<\?.*?(?:\?>|\Z)"
    r"|^[ \t]*\[[^\]\n]{0,40}\]:[ \t]*(?:#|<>)[ \t]*\([^\n]*\)[ \t]*$",
    re.S | re.M | re.I,
)
_UNRENDERED = re.compile(r"<(?:script|style|template|noscript)\b", re.IGNORECASE)
_FOOTNOTE = re.compile(r"\\footnote\s*(?=\{)")


def _footnotes_as_paragraphs(text: str) -> str:
    """"A.\\footnote{B} C" -> "A.\n\nB\n\n C"; linear: each footnote's braces are matched once, and an unclosed
    one (its content runs to the end) ends the scan."""
    parts, pos = [], 0
    for match in _FOOTNOTE.finditer(text):
        if match.start() < pos:
            continue  # a footnote inside a footnote: already in the paragraph
        close = matching_brace(text, match.end(), len(text))
        parts += [text[pos : match.start()], "\n\n"]
        if close is None:
            return "".join(parts) + text[match.end() + 1 :]
        parts += [text[match.end() + 1 : close], "\n\n"]
        pos = close + 1
    return "".join(parts) + text[pos:]


def visible(text: str) -> str:
    """The text as printed: zero-width characters, comments, \\phantom{..} and content in an invisible colour
    dropped, a visible colour's command removed around what it colours, footnotes read as later paragraphs.
    Linear: each dropped group is skipped once."""
    text = text.translate(_ZERO_WIDTH)
    if "<!--" in text or "<?" in text or "\\iffalse" in text or "{comment}" in text or "]:" in text or (
        "<" in text and _UNRENDERED.search(text)
    ):
        text = _COMMENT.sub(" ", text)
    if "\\footnote" in text:
        text = _footnotes_as_paragraphs(text)
    if "\\" not in text or not _HIDING_HINT.search(text):
        return text
    parts, pos = [], 0
    for match in _HIDING.finditer(text):
        if match.start() < pos:
            continue  # inside a group already dropped
        parts.append(text[pos : match.start()])
        pos = match.end()
        if match.group(2) is not None and _colour_share(match.group(1), match.group(2)) >= _MIN_COLOUR:
            continue  # decoration: the command goes, what it colours stays
        after = len(text) - len(text[pos:].lstrip())
        if text.startswith("{", after):
            close = matching_brace(text, after, len(text))
            pos = len(text) if close is None else close + 1
        elif parts[-1].endswith("{"):  # "{\\color{white} 7}": the whole group goes
            parts[-1] = parts[-1][:-1]
            pos = min(_group_end(text, pos) + 1, len(text))
        else:
            pos = _group_end(text, pos)  # a colour switch lasts to the end of its group
    return "".join(parts) + text[pos:]


def _group_end(text: str, pos: int) -> int:
    """Where the group around `pos` closes: "{\\color{white} 5} 7" drops " 5" (a colour switch lasts to the
    end of its group); the end of the text outside any group."""
    depth = 0
    for match in _BRACE_TOKEN.finditer(text, pos):
        depth += {"{": 1, "}": -1}.get(match.group(), 0)
        if depth < 0:
            return match.start()
    return len(text)


# ----------------------------------------------------------------------------------------------------
# Normalised spellings

_MATH_DELIMS = re.compile(r"^\s*(?:\$\$|\$|\\\[|\\\()\s*(.*?)\s*(?:\$\$|\$|\\\]|\\\))\s*$", re.DOTALL)
_GROUPED_COMMA = re.compile(r",\s*\\!\s*|\s*\{\s*,\s*\}\s*")  # 10,\!080 and 14{,}916 (not "32, 349")
_THIN_SPACE = re.compile(r"(?<!\\)\\[,;:!](?![a-zA-Z])")
_DIGIT_SPACE = re.compile(r"(?<=\d)\\[,;:](?=\d)")  # "10\,000" groups thousands as "10 000" does; "5\,7" is two numbers
_SPACING = re.compile(
    r"(?<!\\)\\(?:left|right|displaystyle|textstyle|smash|q?quad|(?:big|Big)g?[lr]?|tiny|scriptsize|footnotesize|small"
    r"|normalsize|large|Large|LARGE|huge|Huge|bf|it|rm|sf)(?![a-zA-Z])|(?<!\\)\\ "
)
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|°|\\degree")
_DASH_MINUS = re.compile(r"(?<![\w)}\]])[\u2010\u2011\u2012\u2013\ufe63\uff0d](?=\.?\d)")
_CURRENCY = re.compile(r"\bUS\$|\\\$|\$|€|£|¥|₹|\\euro\b|\\pounds\b|\bUSD(?=\b|\d)")
TEXT_WRAP = re.compile(
    r"\\(?:text|textbf|textit|textnormal|textrm|textsf|texttt|mathrm|mathit|mathsf|mbox|mathbf|boldsymbol|bm"
    r"|underline|operatorname)\s*\{([^{}]*)\}"
)
# A trailing unit: \text{...}, a word of 3+ letters (not a command), or a short unit that is not
# a lone variable ("2x" keeps its x).
_UNIT = r"\\(?:text|textbf|textit|textnormal|textrm|mbox|mathrm)\s*\{[^{}]*\}"
_UNIT += r"|(?<![\\a-zA-Z])(?:[a-zA-Z]{3,}(?:(?:\s+|-)[a-zA-Z]+)*|cm|mm|km|kg|mg|ft|hr|lbs?|oz|yd|mi|m(?=\^))"
_TRAILING_UNIT = re.compile(rf"^(.*?\S)\s*({_UNIT})(?:\^\{{?[23]\}}?)?$")
# A number word standing alone (not the first part of a compound adjective: "two-digit", "one-sided"), or a fraction
# word: words that give a value of their own ("5 two-thirds", "5 twenty-one", "5 thirty seven").
_NUMBER_WORD_ALONE = (
    r"\b(?:(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|\w+teen|twenty|thirty|forty|fifty|sixty"
    r"|seventy|eighty|ninety|hundred|thousand|million|billion)\b(?!-[a-z])|(?:half|halves|thirds?|quarters?|fourths?"
    r"|fifths?|sixths?|sevenths?|eighths?|ninths?|tenths?|\w+teenths?|\w+tieths?|hundredths?|thousandths?)\b)"
)
_NOT_A_UNIT = re.compile(rf"\d|\b(?:or|and|not|but|than|plus|minus|nor)\b|{_NUMBER_WORD_ALONE}", re.IGNORECASE)
_PROSE_NUMBER_WORD = re.compile(_NUMBER_WORD_ALONE, re.IGNORECASE)
_SECOND_VALUE = re.compile(
    r"\bor\b|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|half|halves|thirds?|quarters?)\b", re.I
)
# A word or suffix that scales the number: "5 million", "5k" (5000), "6 \\text{ million}".
MULTIPLIER = re.compile(
    r"\b(?:hundred|thousand|million|billion|trillion|dozen)s?\b|(?<=\d)\s*k\b|\\(?:text|mathrm)\s*\{\s*k\s*\}",
    re.IGNORECASE,
)
# ... and right after a number, a rarer scale, a comparison or an operation in words: "5 score", "5 gross", "5 lakh",
# "5bn", "5M", "5 grand", "5 tens", "5 quarters", "5 tenths", "5 ppm", "5 basis points", "5‰", "5-fold", "5 times", "5
# more", "5 fewer", "5 short", "5 squared", "5 plus tax" (verifier/units.py decides: the problem may ask in it).
SCALE_AFTER_NUMBER = re.compile(
    r"(?<=\d)[\s-]*(?:\\(?:text|mathrm)\s*\{\s*)?(?:score|gross|lakhs?|crores?|grand|tens|halves|thirds|quarters|fourths"
    r"|fifths|tenths|hundredths|thousandths|squared|cubed|ppm|ppb|bps|basis\s+points?|per\s*mille|bn|mn|mil|mio"
    r"|(?-i:[MB])|fold|times|more|less|fewer|extra|short|plus|minus|doubled|tripled|quadrupled|halved)\b|‰|\\permil\b",
    re.IGNORECASE,
)
ASSIGNMENT = re.compile(r"^\s*([a-zA-Z](?:_\{?\w+\}?)?)\s*(?:=|\\in)\s*(?!=)")
EQUALS = re.compile(r"(?<![<>!\\])=(?!=)")
CHOICE = re.compile(r"^\(?([A-Ea-e])\)?$")  # a multiple-choice letter: "(C)", "c"
# Most GSM8K answers: no normalising step below changes such a string, so the functions return it at once.
_PLAIN_DECIMAL = re.compile(r"-?\d+(?:\.\d+)?")


@functools.lru_cache(maxsize=256)
def strip_wrappers(latex: str) -> str:
    """Removes math delimiters, spacing commands, currency, degrees, trailing punctuation and
    parentheses around the whole answer ("((5))" is 5)."""
    s = latex.strip()
    if _PLAIN_DECIMAL.fullmatch(s):
        return s
    while (m := _MATH_DELIMS.match(s)) and m.group(1) != s:
        s = m.group(1)
    s = re.sub(r"\\[dtc]frac", r"\\frac", s).replace("∈", "\\in ").replace("\\dbinom", "\\binom")
    s = re.sub(r"\\q?quad(?=[a-zA-Z])", " ", s)  # "\quadx_2": a missing space, not a command
    s = _SPACING.sub(" ", _THIN_SPACE.sub("", _DIGIT_SPACE.sub(" ", _GROUPED_COMMA.sub(",", s))))
    s = _DEGREES.sub("", s).replace("²", "^2").replace("³", "^3").replace("\u2212", "-")
    s = _DASH_MINUS.sub("-", s)  # "‐5", "–5", "－5": a sign (not between numbers: "4–6" is a range)
    s = re.sub(r"(\d)\s+(?=i\b)", r"\1", s)  # "9 i" is 9i (Math-Verify reads a spaced i as another symbol)
    s = _CURRENCY.sub("", s.replace("\\%", "%")).strip()
    if s.endswith((".", ",")) and not s.endswith(("..", "\\dots.", "\\ldots.")):
        s = s[:-1]  # sentence punctuation written inside the math: "$42.$"
    return _strip_outer_brackets(s.strip())


def _strip_outer_brackets(s: str) -> str:
    """ "((5))" -> "5" and "{7}" -> "7", but "(1, 2)" and "(1)(2)" keep theirs. One pass: the
    position of each bracket's partner, then peel the layers that wrap everything."""
    if not s or s[0] not in "({":
        return s
    partner, stack = {}, []
    for i, ch in enumerate(s):
        if ch in "({":
            stack.append(i)
        elif ch in ")}" and stack:
            partner[stack.pop()] = i
    has_list_mark = "," in s or ";" in s
    i, j = 0, len(s) - 1
    while i < j and s[i] in "({" and partner.get(i) == j and not (s[i] == "(" and has_list_mark):
        i, j = i + 1, j - 1
        while i <= j and s[i].isspace():
            i += 1
        while j >= i and s[j].isspace():
            j -= 1
    return s[i : j + 1]


@functools.lru_cache(maxsize=256)
def clean(latex: str, keep_assignment: bool = False) -> str:
    """Normalised answer: wrappers, a trailing unit and (unless kept) a leading "x =" removed."""
    s = strip_wrappers(latex)
    if _PLAIN_DECIMAL.fullmatch(s):
        return s
    if not keep_assignment:
        s = ASSIGNMENT.sub("", s, count=1)
    unit = _TRAILING_UNIT.match(s)
    # "5 \text{ (or 7)}" and "5 or six" end on a second value, not a unit.
    if unit and not is_text_only(s) and not MULTIPLIER.search(s) and not _NOT_A_UNIT.search(unit.group(2)):
        s = unit.group(1).strip()
    return s


def is_text_only(s: str) -> bool:
    return TEXT_WRAP.sub("", s).strip() == "" or re.fullmatch(r"[A-Za-z ]+", s) is not None


@functools.lru_cache(maxsize=256)
def canonical(latex: str) -> str:
    """A spelling-insensitive key: no spaces, `\\text{}` unwrapped, `_{8}` -> `_8`, `\\sqrt3` -> `\\sqrt{3}`,
    `\\frac34` -> `\\frac{3}{4}`, choice letters and words case-folded."""
    s = strip_wrappers(latex)
    if _PLAIN_DECIMAL.fullmatch(s):
        return s
    s = TEXT_WRAP.sub(r"\1", s)
    s = re.sub(r"_\{(\w+)\}", r"_\1", s)
    s = re.sub(r"\\sqrt\s*(\w)", r"\\sqrt{\1}", s)
    s = re.sub(r"\\frac\s*(\w)", r"\\frac{\1}", s)
    s = re.sub(r"\\frac(\{[^{}]*\})\s*(\w)", r"\\frac\1{\2}", s)
    s = re.sub(r"\s+", "", s)
    if choice := CHOICE.match(s):
        return choice.group(1).upper()
    return s.lower() if re.fullmatch(r"[A-Za-z.,;:'()-]+", s) else s


# ----------------------------------------------------------------------------------------------------
# Plain numbers

_NUMBER = re.compile(r"^[-+]?(?:[1-9]\d{0,2}(?:,\d{3})+|[1-9]\d{0,2}(?: \d{3})+|\d+|(?=\.\d))(?:\.\d+)?$")
_REPEATING = re.compile(r"^(-?)(\d*)\.(\d*)\\(?:overline|bar|dot)\s*\{?(\d+)\}?$")  # 0.1\overline{6}
_FRACTION = re.compile(r"^([-+]?)\\frac\s*(?:\{\s*(-?)\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(-?)\s*(\d+)\s*\}|(\d))$")
_SLASH_FRACTION = re.compile(r"^([-+]?)(\d+)\s*/\s*(\d+)$")
MIXED_NUMBER = re.compile(r"^(-?)(\d+)\s*\\frac\s*\{(\d+)\}\s*\{(\d+)\}$")
_PERCENT = re.compile(r"\s*(?:%|\bpercent(?:age)?|\bpct)$")
_DECIMAL_COMMA = re.compile(r"^-?\d+,\d+$")
_BASE_TEN = re.compile(r"(?<=\d)\s*_\s*(?:\{\s*10\s*\}|10)$")
_ANY_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
NUMBER_TOKEN = re.compile(r"(?<![\w.^_])-?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?(?:\s*(?:\\?%|percent\b))?(?![\w^])")
# A bound, an approximation or an exclusion around a number is not the number: "more than 5",
# "about 5", "5 or more", "any number except 5", in English or in a few other languages ("etwa 5", "约5").
# Before the number, or after it (also after a comma or in parentheses: "5, roughly", "5 (approx.)"); "min"
# after a number is minutes, so only "minimum" counts there.
_BOUND_BEFORE = (
    r"(?:more|less|fewer|greater|higher|lower|larger|smaller|bigger|other)\s+than"
    r"|at\s+(?:a\s+|the\s+)?(?:very\s+)?(?:least|most|minimum|maximum)"
    # a frequency, a rounding, a bound or a tentative value is not one exact value ("often 5", "rounded: 5")
    r"|often|sometimes|at\s+times|rounded(?:\s+(?:off|up|down))?|nigh(?:\s+on)?"
    r"|(?:min|max)(?:imum)?(?:\s+of)?|bound|tentative(?:ly)?|provisional(?:ly)?"
    # an operation in words before the number: "twice 5", "double 5", "half of 10"
    r"|twice|thrice|double|triple|quadruple|half(?:\s+of)?"
    r"|pretty\s+much|ballpark|guesstimated?|(?:most|very|quite)\s+likely"
    # an adverb right before the number ("basically 5", "virtually 5"), but not one that keeps it exact ("exactly 5",
    # "only 5"); lowercase, so that a name ("Emily 5") is not one
    r"|(?-i:(?!(?:exactly|precisely|only|finally|actually|really|totally|fully|early|daily|weekly|monthly|yearly"
    r"|hourly|family|supply|apply|reply|rely|july"
    # Words that affirm the value or order the steps ("x is simply 4", "lastly, 18"): not a bound.
    r"|simply|clearly|obviously|certainly|definitely|surely|evidently|necessarily|uniquely|correctly|truly"
    r"|consequently|accordingly|subsequently|ultimately|lastly|firstly|secondly|thirdly|explicitly|directly"
    r"|immediately|easily|undoubtedly|unambiguously|indeed)\b)[a-z]{2,}ly)"
    r"|about|around|approx(?:imately|\.)?|roughly|nearly|almost|circa|ca\.|close\s+to|up\s+to|over|under|above|quite"
    r"|below|beyond|exceeding|upwards?\s+of|in\s+excess\s+of|(?:north|south|shy|short)\s+of|on\s+the\s+order\s+of"
    r"|of\s+(?:the\s+)?order(?:\s+of)?|in\s+the\s+(?:range|region|ballpark|neighbou?rhood|vicinity)\s+of"
    r"|except(?:\s+for)?|excluding|besides|(?:anything|everything|all)\s+but|not|any|some|between|within"
    r"|(?:maybe|perhaps|possibly|probably|likely)(?:\s+(?:it'?s|it\s+is|this\s+is|the\s+answer\s+is))?"
    r"|presumably|supposedly|apparently|allegedly|est(?:imated?|\.)?|guess"
    r"|(?:upper|lower)\s+bound|a\s+(?:maximum|minimum)\s+of|as\s+(?:many|much|few|little)\s+as|something\s+like"
    r"|somewhere\s+(?:near|around|about|between)|more\s+or\s+less|give\s+or\s+take|plus\s+or\s+minus|minus"
    r"|negative|(?:a\s+)?(?:multiple|factor|divisor)\s+of|divisible\s+by"
    r"|environ|etwa|ungef(?:ä|ae)hr|aproximadamente|casi|presque|mindestens|h(?:ö|oe)chstens|au\s+(?:moins|plus)"
    r"|al\s+(?:menos|m(?:á|a)ximo)|como\s+m(?:á|a)ximo|por\s+lo\s+menos"
    r"|(?:m(?:á|a)s|menos|plus|moins)\s+de|mehr\s+als|weniger\s+als|大约|大概|约|至少|最多|超过|不到"
)
_BOUND_AFTER = (
    r"or\s+(?:more|less|fewer|so|greater|higher|lower|above|below|thereabouts|over|under)|most\s+likely|ballpark"
    r"|and\s+(?:up|upwards?|above|over|more|higher|below|under|less|lower|change|counting)|tops|more\s+or\s+less"
    r"|at\s+(?:the\s+)?(?:very\s+)?(?:least|most|best|worst|minimum|maximum)|at\s+a\s+(?:minimum|maximum)"
    r"|tentative(?:ly)?|provisional(?:ly)?|floor(?:ed)?|ceil(?:ing|ed)?|truncated"
    r"|un(?:verified|confirmed|checked|proven)|assumed|conjectur\w*|hypothetical(?:ly)?"
    r"|approx(?:imately|imate|\.)?|rough(?:ly)?|give\s+or\s+take|plus\s+or\s+minus|rounded|est(?:imated?|imate|\.)?"
    r"|max(?:imum|\.)?|minimum|(?:upper|lower)?\s*bound|guess(?:ed)?|not\s+sure|unsure|-?ish|-odd|something"
    r"|plus(?=[\s.,;)}]*$)|plus\s+change|if\s+lucky|probably|likely|maybe|perhaps|possibly|I\s+(?:think|guess|believe)"
    r"|about|around|\?"
    r"|(?:is\s+|was\s+)?(?:wrong|incorrect|not\s+(?:right|correct|the\s+answer))|左右|以上|以下"
    r"|(?:I'?m\s+|I\s+am\s+)?not\s+(?:certain|confident|100%\s+sure)|uncertain"
)
QUALIFIER = re.compile(
    rf"(?<![a-z])(?:{_BOUND_BEFORE})(?![a-z])[\s$:~,]*(?=[-+]?\.?\d|\\[a-z]*frac|\\sqrt|\\pi)"
    rf"|(?<=[\d}}$])[\s(,;:–—]*(?:{_BOUND_AFTER})(?![a-z])|(?<=\d)\s*\+\s*$",
    re.IGNORECASE,
)
# Approximation words that qualify a stated value wherever they stand in it ("5 apples, roughly").
APPROXIMATE = re.compile(
    r"(?<![a-z])(?:approx(?:imately|imate|\.)?|roughly|nearly|almost|circa|more\s+or\s+less|give\s+or\s+take"
    r"|at\s+(?:least|most)|or\s+so|-?ish|estimated|something\s+like|somewhere\s+(?:near|around|about|between))(?![a-z])",
    re.IGNORECASE,
)
# A relation other than "=": "\\geq 5", "x \\neq 5", "\\approx 5", "\\lesssim 5", "\\not= 5", "≈ 5", and every Unicode
# relation sign ("⩾ 5", "≦ 5", "≒ 5", "⊆"; not "≡", which a residue writes, as "\\equiv" is not one).
RELATION = re.compile(
    r"\\(?:n?(?:[lg]eq?(?:q|slant)?|[lg]t|less\w*|gtr\w*|sim\w*|approx\w*|cong|ll|gg|prec\w*|succ\w*)|neq?|not"
    r"|[lg]n(?:eq|eqq|sim|approx)|propto|doteq|backsim\w*|eqsim|thicksim|thickapprox)(?![a-zA-Z])"
    r"|[<>∼∽∝～〜⁓\u2241-\u2260\u2262\u2264-\u228b\u22cd\u22d6-\u22ed\u2a66-\u2afa]"
)
# A qualifier, a relation or a negation right before a box: "at least $\\boxed{5}$", "$\\geq \\boxed{5}$", "not
# $\\boxed{5}$"; and right after it: "$\\boxed{5}$ or more", "$\\boxed{5}^{+}$", "$\\boxed{5} \\pm 1$", "$\\boxed{5}$?",
# "$\\boxed{5}$ is wrong".
QUALIFIER_BEFORE_BOX = re.compile(
    rf"(?:(?<![a-z])(?:{_BOUND_BEFORE}|never|cannot)(?![a-z])|n't|(?<![\w\\])~|{RELATION.pattern})"
    r"(?:[\s$*_`:(\[,;–—-]|\b(?:or\s+)?(?:equal\s+to|equals?|well)\b)*(?:\\[(\[])?[\s$]*$",
    re.IGNORECASE,
)
QUALIFIER_AFTER_BOX = re.compile(
    rf"[\s$*_]*(?:[(\[,;:–—-]\s*)?(?:(?:but|and|though|although|yet)\s+)?(?:{_BOUND_AFTER})(?![a-z])|\s*(?:\^\s*\{{?\s*[-+]|[+±∓](?![a-zA-Z]{{2}})|-(?![a-zA-Z]{{2}}|-|\s+[a-zA-Z])|\\(?:pm|mp)(?![a-z]))"
    r"|[\s$*_]*(?:±|∓|\+\s*/\s*-|\\(?:pm|mp)(?![a-z]))"
    r"|[\s$*_]*\?",
    re.IGNORECASE,
)
NEGATION = re.compile(r"\b(?:not|never|cannot)\b|n't\b", re.IGNORECASE)


@dataclass(frozen=True)
class PlainNumber:
    value: Fraction  # exact: "0.375" -> 3/8; a percent sign is dropped (28 answers a 28% gold)
    form: str  # "integer", "decimal", "repeating" or "fraction"
    # In final form: a fraction in lowest terms with a denominator above 1 ("6/8" and "4/1" are not), a repeating
    # decimal whose period is not all nines.
    reduced: bool = True


@functools.lru_cache(maxsize=256)
def as_number(latex: str) -> PlainNumber | None:
    """A plain number or simple fraction ("1,000.5", ".5", "\\frac{3}{4}", "3/4", "2\\frac{1}{2}", "28%",
    "0.\\overline{3}")."""
    s = TEXT_WRAP.sub(r"\1", latex).strip()
    s = _PERCENT.sub("", s).strip().replace("\u2212", "-")
    s = _BASE_TEN.sub("", s)  # 39_{10} is 39
    if s.startswith("(") and s.endswith(")") and "," not in s:
        s = s[1:-1].strip()  # "( \frac{1}{3} )"
    if _NUMBER.match(s):
        form = "decimal" if "." in s else "integer"
        return PlainNumber(Fraction(s.replace(",", "").replace(" ", "")), form)
    if m := _REPEATING.match(s):  # 0.1\overline{6} = (16 - 1) / 90
        sign, whole, lead, period = m.group(1), m.group(2) or "0", m.group(3), m.group(4)
        repeat = Fraction(int(lead + period) - int(lead or "0"), 10 ** len(lead) * (10 ** len(period) - 1))
        value = int(whole) + repeat
        # A period of nines or of zeros is another spelling of a terminating number (4.9\overline{9} and 5.\overline{0}
        # are 5): not in final form.
        return PlainNumber(-value if sign else value, "repeating", reduced=set(period) not in ({"9"}, {"0"}))
    if m := MIXED_NUMBER.match(s):  # MATH's 15\frac{39}{40} is 15 + 39/40
        sign, num, den = m.group(1), int(m.group(3)), int(m.group(4))
        return _fraction(sign, int(m.group(2)) * den + num, den, den > num)
    if m := _FRACTION.match(s):
        signs = (m.group(1) == "-") + (m.group(2) == "-") + (m.group(5) == "-")
        # A sign in the denominator or two signs are an operation left undone: "\\frac{-1}{-3}", "-\\frac{-1}{3}".
        proper = signs <= 1 and m.group(5) != "-"
        return _fraction("-" if signs % 2 else "", int(m.group(3) or m.group(4)), int(m.group(6) or m.group(7)), proper)
    if m := _SLASH_FRACTION.match(s):
        return _fraction(m.group(1), int(m.group(2)), int(m.group(3)))
    return None


def _fraction(sign: str, num: int, den: int, proper: bool = True) -> PlainNumber | None:
    if den == 0:
        return None
    value = Fraction(num, den)
    reduced = proper and den > 1 and value.denominator == den
    return PlainNumber(-value if sign == "-" else value, "fraction", reduced)


def prose_number(answer: str) -> PlainNumber | None:
    """The one number of an answer written as a sentence ("Jane started 3 hours ago"), else None."""
    if re.search(r"&|\\\\", answer):
        return None  # a matrix or an aligned block is not a sentence
    words = re.findall(r"(?<![\\\w{])[A-Za-z]{3,}\b", MATH_SPAN.sub(" ", answer))
    if len(words) < 2 or NEGATION.search(answer):
        return None  # not prose ("2x + 3", "\sqrt{2} cm"), or a denial: "it is not 3"
    if _PROSE_OPERATION.search(answer):
        return None  # an operation on its number makes another value: "(some words) \times \frac{3}{3}"
    if _PROSE_NUMBER_WORD.search(MATH_SPAN.sub(" ", answer)):
        return None  # a number word beside the number: "3 two-thirds", "3 twenty-one"
    numbers = {n.strip() for n in NUMBER_TOKEN.findall(answer)}
    return as_number(numbers.pop()) if len(numbers) == 1 else None


_PROSE_OPERATION = re.compile(
    r"\\(?:[dt]?frac|times|cdot|div|sqrt|d?binom|log|ln|exp|sin|cos|tan|sum|prod|int|lim)(?![a-zA-Z])"
    r"|[\^=×÷]|\d\s*[-+/*]\s*[\d(]|\)\s*[-+/*]\s*\d"
)


def decimal_comma(latex: str) -> PlainNumber | None:
    """1000,99 read as 1000.99 (only against a decimal on the other side: "1,5" may be a list)."""
    return as_number(latex.replace(",", ".")) if _DECIMAL_COMMA.match(latex) else None


# Around a GSM8K answer's one number only words may stand ("18 eggs", "$18 in all", "5-year"): an operation, a
# command or a lone variable beside it ("\\sqrt{5}", "5!", "5x", "-(5)", "5?", "\\log 5") makes it another value.
_BETWEEN_WORDS = re.compile(r"[^\s.,:;'\"%$€£{}()!*`]+")  # markdown's **18** and `18` are emphasis
_SPACED_DASH = re.compile(r"(?<=\s)[-–—]{1,3}(?=\s|$)")  # "18 eggs - done" (a dash touching the number is a sign)
_UNIT_LETTERS = "mgshlLKCF"  # 5 m, 5 g, 5 h, 5 L, 5 K, 5 C
# A word ("eggs", "km/h", "/day", "-year-" of "18-year-old" once "old" is cut as a unit), a slash left
# by that cut, or a one-letter word or unit ("a", "I", "o'clock", "5 m").
_WORD = re.compile(rf"[-/]?[A-Za-z]{{2,}}(?:[-/][A-Za-z]+)*[-/]?|/|[aAIo{_UNIT_LETTERS}]")
_GLUED_LETTER = re.compile(r"\d([A-Za-z])(?![A-Za-z])")  # 5x, 5i, 5e: a variable or a constant; 5m: a unit
_ELLIPSIS = re.compile(r"\.\.|…|\\[lc]?dots\b")
_FACTORIAL = re.compile(r"[\d}]\s*!|!\s*[\d{]")  # "5!", "!5" (after a word, "!" is punctuation)


@functools.lru_cache(maxsize=256)
def gsm8k_number(answer: str) -> PlainNumber | None:
    """GSM8K answers are numbers: the one number of "18 eggs", with nothing but words around it. An ellipsis
    ("5...", "5…", "5\\ldots") leaves the number unfinished."""
    if _ELLIPSIS.search(answer):
        return None
    s = TEXT_WRAP.sub(r" \1 ", strip_wrappers(answer))
    if number := as_number(clean(s)):
        return number
    values = {as_number(n.rstrip(",")) for n in _ANY_NUMBER.findall(s)} - {None}
    rest = _ANY_NUMBER.sub(" ", s)
    if len(values) != 1 or _SECOND_VALUE.search(rest):
        return None  # two numbers, or one and an alternative ("5 or six")
    if not all(_WORD.fullmatch(token) for token in _BETWEEN_WORDS.findall(_SPACED_DASH.sub(" ", rest))):
        return None
    if any(letter not in _UNIT_LETTERS for letter in _GLUED_LETTER.findall(s)) or _FACTORIAL.search(s):
        return None
    return values.pop()
