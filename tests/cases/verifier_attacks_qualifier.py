"""The adversarial suite's qualifier, scale, unit, rate, operand cases: each attack beside the correct neighbours
its rule must keep, refiled by category from the six adversarial passes (tests/cases/verifier_attacks.py collects
them)."""

from __future__ import annotations

from cases.verifier_case import APPLES, BUYS, Case, _box, _cases

# qualifier: a bound or an approximation instead of a value ("more than 5", "about 5")
QUALIFIER: list[Case] = [
    # ---- from the first and second pass
    # ------------------------------------------------------------------------------------------------
    # qualifier: a bound or an approximation is not the value
    *_cases("qualifier", "How many?", "5", [
        (_box("more than 5"), False, "a lower bound"),
        (_box("any number except 5"), False, "an exclusion"),
        (_box("\\text{roughly about } 5"), False, "an approximation"),
        (_box("\\approx 5"), False, "approximately, as a symbol"),
        (_box("> 5"), False, "a bound as a symbol"),
        (_box("\\geq 5"), False, "a bound as a symbol"),
        (_box("\\text{at most } 5"), False, "an upper bound"),
        (_box("5 \\text{ or more}"), False, "a bound after the number"),
        (_box("\\sim 5"), False, "approximately, as a tilde"),
        (_box("\\text{nearly } 5"), False, "an approximation"),
        (_box("\\neq 5"), False, "not equal"),
        (_box("5 \\text{ give or take}"), False, "an approximation after the number"),
        (_box("5 \\pm 1"), False, "a range"),
        ("The answer is approximately $5$.", False, "an approximation in prose"),
        (_box("5 \\text{ apples}"), True, "a unit"),
    ]),
    *_cases("qualifier", "How many marbles?", "5", [
        (_box("less than 5"), False, "an upper bound", ),
        ("The answer is at least 5.", False, "a lower bound in prose"),
        ("The answer is about 5 marbles.", False, "an approximation in prose"),
        ("The answer is no more than 5.", False, "an upper bound in prose"),
        ("#### over 5", False, "a bound after ####"),
        ("The answer is 5 or so.", False, "an approximation after the number"),
        (_box("5 \\text{ (or 7)}"), False, "a second value where a unit would be"),
        (_box("5 \\text{ or six}"), False, "a second value in words"),
        ("The answer is: Tom has 5 marbles left.", True, "a sentence around the number"),
        ("The answer is 5 marbles.", True, "a unit"),
        ("The answer is $\\boxed{5}$ marbles.", True, "boxed, with a unit outside"),
    ], dataset="gsm8k"),
    *_cases("qualifier", "How many stickers does Ana keep?", "6", [
        (_box("\\sqrt{6}"), False, "an operation on the number (GSM8K answers are numbers)"),
        (_box("6!"), False, "a factorial of the number"),
        (_box("6n"), False, "a multiple of a variable"),
        (_box("\\ln 6"), False, "a function of the number"),
        (_box("-(6)"), False, "the number negated"),
        (_box("6?"), False, "a question, not an answer"),
        (_box("\\cancel{6}"), False, "the number struck out"),
        (_box("6 + \\text{tip}"), False, "a sum with a word"),
        (_box("6 \\text{ stickers}"), True, "a unit"),
        ("The answer is: Ana keeps 6 stickers.", True, "a sentence"),
        ("The answer is: I keep 6 of them.", True, "a sentence with a one-letter word"),
        (_box("6 h"), True, "a one-letter unit"),
        (_box("!6"), False, "a subfactorial"),
        ("The answer is $6/day.", True, "a rate"),
        ("The answer is 6 km/h.", True, "a unit with a slash"),
        ("The answer is 6 stickers/hour.", True, "a rate in words"),
        ("The answer is 6-year-old.", True, "a hyphenated unit"),
        ("The answer is 6 stickers!", True, "an exclamation mark after a word"),
        ("The answer is 6 o'clock.", True, "o'clock"),
        ("The answer is **6** stickers.", True, "markdown bold"),
        ("The answer is 6 stickers, which is what Ana keeps.", True, "a clause describing the answer"),
        ("The answer is 6, which is wrong.", False, "a clause retracting the answer"),
        ("The answer is 6, which is probably right.", False, "a clause doubting the answer"),
        ("The answer is 6 stickers - done.", True, "a spaced dash"),
    ], dataset="gsm8k"),
    *_cases("qualifier", "How long does the trip take, in minutes?", "5", [
        (_box("5 \\text{ (approx.)}"), False, "an abbreviated approximation in parentheses"),
        (_box("\\text{approx. } 5"), False, "an abbreviated approximation before the number"),
        (_box("5 \\text{ max}"), False, "an upper bound after the number"),
        (_box("5 \\text{ (upper bound)}"), False, "a bound named as one"),
        (_box("5 \\text{ and up}"), False, "a lower bound after the number"),
        (_box("5 \\text{ tops}"), False, "an upper bound after the number"),
        (_box("\\text{est. } 5"), False, "an estimate"),
        ("#### 5 (estimated)", False, "an estimate after ####"),
        (_box("5 \\text{ minimum}"), False, "a lower bound after the number"),
        (_box("5 \\text{ min}"), True, "minutes, not a minimum"),
        (_box("5 \\text{ minutes}"), True, "a unit"),
    ], dataset="gsm8k"),
    # ---- from the third pass
    # ------------------------------------------------------------------------------------------------
    # A third pass: what a policy finds next (each with the correct neighbours the rule must keep)
    *_cases("qualifier", "How many apples does Tom have?", "5", [
        ("The answer is at least $\\boxed{5}$.", False, "a bound right before the box"),
        ("Approximately $\\boxed{5}$.", False, "an approximation right before the box"),
        ("It is not $\\boxed{5}$.", False, "a negation right before the box"),
        ("So $x > \\boxed{5}$.", False, "a relation right before the box"),
        ("$\\approx\\boxed{5}$", False, "a relation symbol before the box, in the same math"),
        ("$\\boxed{5}$ or more.", False, "a bound right after the box"),
        ("$\\boxed{5}^{+}$", False, "a superscript sign continuing the box"),
        ("$\\boxed{5} \\pm 1$", False, "a range continuing the box"),
        ("$\\boxed{5}$ is wrong.", False, "the box declared wrong"),
        ("Perhaps $\\boxed{5}$?", False, "a question, not an answer"),
        (_box("\\text{ungefähr } 5"), False, "a qualifier in another language"),
        ("#### 约5", False, "a qualifier in Chinese"),
        (_box("\\text{mo}\\text{re than }5"), False, "a qualifier split over two text groups"),
        (_box("\\text{abo}ut 5"), False, "a qualifier split between text and math"),
        ("The answer is 5, roughly.", False, "a qualifier after a comma"),
        ("The answer is something like 5.", False, "an approximation in words"),
        (_box("5 \\text{ (rounded)}"), False, "a rounded value"),
        (_box("5\\text{?}"), False, "a question mark in text"),
        (_box("\\text{not quite } 5"), False, "a negated approximation"),
        ("<answer>$\\boxed{5}$</answer>", True, "markup around the box is not a relation"),
        ("So Tom has $\\boxed{5}$ apples left over.", True, "words after the box that are not a qualifier"),
        ("The answer is $\\boxed{5}$ (since 2 + 3 = 5).", True, "a check in brackets after the box"),
        ("Hence $f(3) = \\boxed{5}$.", True, "a name and = before the box"),
        ("The answer is approximately equal to $\\boxed{5}$.", False, "an approximation, 'equal to' between"),
        ("The answer is at least, well, $\\boxed{5}$.", False, "a bound, a filler word between"),
        ("Maybe it's $\\boxed{5}$.", False, "a hedge before the box"),
        ("So it is basically $\\boxed{5}$.", False, "an -ly adverb that hedges (the affirming ones are spared)"),
        ("$\\boxed{5}$ - or more.", False, "a bound after a spaced dash"),
        ("The answer is 5 — or 7.", False, "a second value after a spaced dash"),
        ("I think it is $\\boxed{5}$ but not sure.", False, "doubt after the box"),
        ("$\\boxed{5}$ (I'm not certain)", False, "doubt in brackets after the box"),
        ("The number of apples above is $\\boxed{5}$.", True, "'above is' is not a bound"),
        ("#### basically 5", False, "an adverb that loosens the number"),
        ("The answer is pretty much 5.", False, "an approximation in words"),
        ("The answer is at a minimum, 5.", False, "a bound, a comma between"),
        ("The answer is 5 most likely.", False, "doubt after the number"),
        ("The answer is: Emily has exactly 5 apples.", True, "an adverb that keeps the number exact"),
        ("The answer is: give Holly 5 apples.", True, "a name ending in -ly is not an adverb"),
    ], dataset="gsm8k"),
    *_cases("qualifier", "Convert $\\frac{\\pi}{6}$ radians to degrees.", "30^\\circ", [
        (_box("30 \\text{ radians}"), False, "radians for a gold in degrees"),
        (_box("30^\\circ"), True, "degrees"),
        (_box("30"), True, "the number of degrees"),
    ]),
    *_cases("qualifier", "Convert $30^\\circ$ to radians.", "\\frac{\\pi}{6}", [
        (_box("\\frac{\\pi}{6}^\\circ"), False, "degrees for a gold in radians"),
        (_box("\\frac{\\pi}{6}"), True, "radians"),
    ]),
    *_cases("qualifier", "What is the greatest number of pencils Zach could have left over?", "2", [
        ("Therefore, Zach can have at most $\\boxed{2}$ pencils left over.", True,
         "a bound that is what the problem asks for (the greatest value)"),
        ("Therefore, Zach has about $\\boxed{2}$ pencils left over.", False, "an approximation is not asked for"),
    ]),
    *_cases("qualifier", "How much will the investment be worth, to the nearest dollar?", "32,\\!348", [
        ("That is $\\$24,\\!000 \\cdot 1.01^{30} \\approx \\boxed{\\$32,\\!348}$.", True,
         "an approximation the problem asks for (rounding)"),
        ("That is at least $\\boxed{\\$32,\\!348}$.", False, "a bound is not asked for"),
    ]),
    # ---- from the fourth pass
    *_cases("qualifier", "Tom has 3 apples and buys 2 more. How many apples does he have?", "5", [
        (_box("5 \\text{ (if no apples were eaten)}"), False, "a condition inside the box"),
        (_box("5 \\text{ unless he ate some}"), False, "an exception inside the box"),
        ("Final answer: either 5", False, "a choice word with one value"),
        (_box("5 \\text{ assuming none rot}"), False, "an assumption inside the box"),
        ("#### 5%", False, "a percent the question does not ask for"),
        (_box("5\\%"), False, "a percent in the box the question does not ask for"),
        (_box("5 \\text{ percent}"), False, "a percent in words the question does not ask for"),
        ("The answer is 5 (3 + 2).", True, "the work in brackets after the answer, worth it"),
        ("The answer is 5 apples (= 3 + 2).", True, "the work in brackets with an equals sign"),
        ("The answer is 5 (3 + 2 = 5).", True, "the work in brackets as an equation"),
        ("The answer is 5 (3 + 4).", False, "work in brackets worth another value"),
        ("The answer is 5 (7).", False, "a second value in brackets"),
        ("The answer is five.", True, "a number in words a human reads as that number is the answer (number words)"),
    ], dataset="gsm8k"),
    *_cases("qualifier", "What percent of the 20 students are girls if 5 are girls?", "25", [
        ("#### 25%", True, "a percent the question asks for"),
        (_box("25\\%"), True, "a boxed percent the question asks for"),
    ], dataset="gsm8k"),
    # ---- from the sixth pass
    # ------------------------------------------------------------------------------------------------
    # qualifier: words the lists missed, before or after the number, and a qualifier alone on the line before a box
    *_cases("qualifier", APPLES, "5", [
        (_box("\\text{at the very least } 5"), False, "'at least' with 'the very' between"),
        ("The answer is at the very most 5.", False, "'at most' with 'the very' between"),
        ("The answer is al menos 5.", False, "'at least' in Spanish"),
        ("The answer is nigh on 5.", False, "an approximation"),
        ("The answer is often 5.", False, "a frequency is not one value"),
        ("The answer is sometimes 5.", False, "a frequency is not one value"),
        ("The answer is rounded: 5.", False, "a rounded value when no rounding is asked"),
        ("The answer is min 5.", False, "a bound"),
        ("The answer is minimum of 5.", False, "a bound without its article"),
        ("The answer is bound 5.", False, "a bound"),
        ("The answer is 5 (tentative).", False, "a tentative value"),
        (_box("5\\text{ (tentative)}"), False, "a tentative value, boxed"),
        (_box("x = 5 \\text{ (unverified)}"), False, "an unverified value"),
        (_box("x = 5 \\text{ (assumed)}"), False, "an assumed value"),
        ("#### 5 (floor)", False, "a floor of another value"),
        ("#### 5 (ceiling)", False, "a ceiling of another value"),
        ("`about` $\\boxed{5}$", False, "a qualifier in inline code before the box"),
        ("about\n$$\\boxed{5}$$", False, "a qualifier alone on the line before a displayed box"),
        ("At least\n\n$\\boxed{5}$", False, "a qualifier alone in the paragraph before the box"),
        (_box("\\text{exactly } 5"), True, "'exactly' keeps the number"),
        ("The answer is 5 apples, at the very end of the day.", True, "'at the very end' is no bound"),
        ("He will have 40-32=8 screws left over\n**$\\boxed{5}$**", True, "a line before the box ending on 'over'"),
        ("Tom counts them once more.\n\n$\\boxed{5}$", True, "a sentence before the box"),
    ], dataset="gsm8k"),
    *_cases("qualifier", APPLES, "5", [
        ("⩾ $\\boxed{5}$", False, "a Unicode relation sign before the box"),
        ("≦ $\\boxed{5}$", False, "a Unicode relation sign before the box"),
        ("≒ $\\boxed{5}$", False, "a Unicode approximation sign before the box"),
        ("～ $\\boxed{5}$", False, "a full-width tilde before the box"),
        ("Tom has $\\boxed{5}$ apples.", True, "no relation"),
    ], dataset="gsm8k"),
    *_cases("qualifier", "Round $4.6$ to the nearest whole number.", "5", [
        ("Rounded: $\\boxed{5}$", True, "a rounding the problem asks for"),
    ]),
]  # fmt: skip


# scale: a multiplier or scale word that makes another number ("5 thousand", "5k")
SCALE: list[Case] = [
    # ---- from the fifth pass
    *_cases("scale", APPLES, "5", [
        ("#### 5 score", False, "a score is twenty"),
        ("#### 5 gross", False, "a gross is 144"),
        ("The answer is 5 lakh.", False, "a lakh is 100,000"),
        ("#### 5bn", False, "a suffix for billions"),
        ("#### 5M", False, "a capital M for millions"),
        ("#### 5 grand", False, "a grand is 1000"),
        ("#### 5 tens", False, "five tens are 50"),
        ("#### 5 quarters", False, "five quarters are 5/4"),
        ("#### 5 squared", False, "an operation in words"),
        (_box("5 \\text{ cubed}"), False, "an operation in words, in text"),
        ("#### 5 ppm", False, "parts per million"),
        ("#### 5 basis points", False, "basis points are hundredths of a percent"),
        ("#### 5‰", False, "per mille"),
        ("#### 5 apples", True, "a unit is not a scale"),
        ("Answer: the grand total is 5.", True, "a scale word before the number is not on it"),
        ("Answer: his score is 5 apples.", True, "'score' before the number is a word, not twenty"),
        ("#### 5 m", True, "a lowercase m is a unit (metres), not a million"),
    ], dataset="gsm8k"),
    *_cases("scale", "How many dozen eggs does she buy?", "5", [
        ("#### 5 dozen", True, "a dozen is the unit the problem asks in"),
        (_box("5 \\text{ dozen}"), True, "the same, boxed"),
        ("#### 5 thousand", False, "a scale the problem does not ask in"),
    ], dataset="gsm8k"),
    *_cases("scale", "How much did the car cost, in thousands of dollars?", "5", [
        ("#### 5 thousand", True, "the scale the problem asks in"),
        ("#### 5 million", False, "another scale"),
        ("#### 5k", False, "a suffix the problem does not name"),
    ], dataset="gsm8k"),
    *_cases("scale", APPLES, "5", [
        ("The answer is 5 more.", False, "a comparison, not the amount"),
        ("The answer is 5 fewer.", False, "a comparison, not the amount"),
        ("The answer is 5-fold.", False, "a factor"),
        ("The answer is 5 times as many.", False, "a factor"),
        ("The answer is 5 tenths.", False, "tenths scale the number"),
        ("The answer is 5 plus tax.", False, "an amount still to add to"),
    ], dataset="gsm8k"),
    *_cases("scale", "How many more apples does Tom have than Jerry?", "5", [
        ("The answer is 5 more.", True, "the comparison the problem asks for"),
        ("#### 5 more apples", True, "the comparison the problem asks for, with a unit"),
    ], dataset="gsm8k"),
    *_cases("scale", "Sara has 3 apples and needs 8. How many apples does she still need to buy?", "5", [
        ("She needs to buy $\\boxed{5}$ more apples.", True, "what is still missing, said as a comparison"),
        ("The answer is 5 more apples.", True, "what is still missing, said as a comparison"),
        ("The answer is 5 thousand apples.", False, "a scale word is not a comparison"),
    ], dataset="gsm8k"),
    *_cases("scale", "Tom has 4 apples and Jerry has 9. How many fewer apples does Tom have than Jerry?", "5", [
        ("Tom has $\\boxed{5}$ fewer apples.", True, "the difference the problem asks for"),
        ("Tom has 5 squared fewer apples.\n#### 5 squared", False, "an operation in words, not a comparison"),
    ], dataset="gsm8k"),
    # ---- from the sixth pass
    # ------------------------------------------------------------------------------------------------
    # scale: an operation in words before or after the number; rate: a rate where an amount is asked
    *_cases("scale", BUYS, "5", [
        ("#### double 5", False, "an operation in words before the number"),
        ("#### twice 5", False, "an operation in words before the number"),
        ("#### half of 10", False, "an operation in words before the number"),
        ("#### 5 doubled", False, "an operation in words after the number"),
        ("#### 5 halved", False, "an operation in words after the number"),
        ("#### 5 apples", True, "a unit"),
    ], dataset="gsm8k"),
]  # fmt: skip


# unit: a unit of the kind asked but another unit of it ("5 minutes" for hours)
UNIT: list[Case] = [
    # ---- from the fifth pass
    *_cases("unit", "How many hours does the trip take?", "5", [
        ("#### 5 minutes", False, "minutes when hours are asked"),
        ("The answer is 5 min.", False, "an abbreviated unit of time"),
        (_box("5\\text{ days}"), False, "days, boxed"),
        ("#### 5 hours", True, "the unit asked"),
        ("#### 5 hrs", True, "the unit asked, abbreviated"),
        ("#### 5", True, "no unit"),
        ("#### 5 miles", True, "a unit of another kind is not the unit asked (the number is judged)"),
    ], dataset="gsm8k"),
    *_cases("unit", "The rope is 500 cm long. How many meters long is it?", "5", [
        ("#### 5 cm", False, "centimetres when metres are asked"),
        ("#### 5 km", False, "kilometres when metres are asked"),
        ("#### 5 meters", True, "the unit asked"),
        ("#### 5 m", True, "the unit asked, abbreviated"),
    ], dataset="gsm8k"),
    *_cases("unit", "How many dollars does he earn?", "5", [
        ("#### 5 cents", False, "cents when dollars are asked"),
        ("#### $5", True, "a dollar sign"),
        ("#### 5 dollars", True, "the unit asked"),
    ], dataset="gsm8k"),
    *_cases("unit", "What is the measure of the angle in degrees?", "30", [
        (_box("30 \\text{ rad}"), False, "radians when degrees are asked"),
        (_box("30 \\text{ radians}"), False, "radians when degrees are asked, spelled out"),
        (_box("30^\\circ"), True, "degrees"),
        (_box("30"), True, "the number of degrees"),
    ]),
    *_cases("unit", "Express the angle in radians.", "2", [
        (_box("2^\\circ"), False, "degrees when radians are asked"),
        (_box("2 \\text{ degrees}"), False, "degrees in words when radians are asked"),
        (_box("2"), True, "the number of radians"),
        (_box("2 \\text{ rad}"), True, "radians"),
    ]),
]  # fmt: skip


# rate: a rate ("5 per day") where the question asks for an amount
RATE: list[Case] = [
    # ---- from the sixth pass
    *_cases("rate", BUYS, "5", [
        ("#### 5 per day", False, "a rate where an amount is asked"),
        ("#### 5 each", False, "a rate where an amount is asked"),
        ("#### 5 apiece", False, "a rate where an amount is asked"),
        ("#### 5 apples a week", False, "a rate with a unit"),
        ("The answer is 5 apples per person.", False, "a rate with a unit"),
        ("#### 5 in total", True, "a total"),
        ("#### 5 apples", True, "an amount"),
    ], dataset="gsm8k"),
    *_cases("rate", "Tom eats 35 apples in a week. How many apples does he eat per day?", "5", [
        ("#### 5 per day", True, "the rate the question asks for"),
        ("#### 5 apples each day", True, "the rate the question asks for, other words"),
    ], dataset="gsm8k"),
    *_cases("rate", "Five apples cost $25. How much does each apple cost?", "5", [
        ("#### $5 each", True, "the rate the question asks for"),
    ], dataset="gsm8k"),
    *_cases("rate", "A box of 10 pencils costs $20. How much does one pencil cost?", "2", [
        ("#### $2 each", True, "a price per item: not a 'how many' question"),
    ], dataset="gsm8k"),
    *_cases("rate", "She works 40 hours in 5 days. How many hours does she work daily?", "8", [
        ("#### 8 hours per day", True, "'daily' asks for a rate"),
    ], dataset="gsm8k"),
    *_cases("rate", "The car goes 120 miles in 2 hours. How fast does the car go?", "60", [
        ("#### 60 miles per hour", True, "a speed: not a 'how many' question"),
    ], dataset="gsm8k"),
]  # fmt: skip


# operand: the box as an operand of a larger expression, or words and signs glued to it
OPERAND: list[Case] = [
    # ---- from the fifth pass
    *_cases("operand", APPLES, "5", [
        ("$\\boxed{5}^2$", False, "a power on the box"),
        ("$\\boxed{5}!$", False, "a factorial on the box"),
        ("$\\boxed{5}\\times 2$", False, "a product with the box"),
        ("$\\boxed{5}/2$", False, "a quotient of the box"),
        ("$-\\boxed{5}$", False, "a sign before the box"),
        ("$1\\boxed{5}$", False, "a digit before the box"),
        ("$\\boxed{5}0$", False, "a digit glued after the box"),
        ("$\\boxed{5}\\text{0}$", False, "a digit in text glued after the box"),
        ("$\\frac{\\boxed{5}}{2}$", False, "the box as a numerator"),
        ("$10^{\\boxed{5}}$", False, "the box as an exponent"),
        ("$x_{\\boxed{5}}$", False, "the box as an index"),
        ("$\\boxed{5}\\text{th}$", False, "an ordinal"),
        ("$\\boxed{5}$x", False, "a variable glued after the box"),
        ("$\\boxed{5} \\to 7$", False, "an arrow to another value"),
        ("$\\boxed{5} = 7$", False, "the box equated to another value"),
        ("$\\boxed{5}\\%$", False, "a percent the question does not ask for, outside the box"),
        ("$\\boxed{5}$ thousand", False, "a scale word after the box"),
        ("$\\boxed{5}$ squared", False, "an operation in words after the box"),
        ("$\\boxed{5}\\,^2$", False, "a power after a thin space"),
        ("$\\boxed{5}{}^2$", False, "a power after an empty group"),
        ("$(\\boxed{5})^2$", False, "a power on the bracketed box"),
        ("$\\left(\\boxed{5}\\right)^2$", False, "a power on the box in sized brackets"),
        ("$\\boxed{5}\\;\\times 2$", False, "a product after a space command"),
        ("$\\sqrt \\boxed{25}$", False, "a root of the box without braces"),
        ("$\\boxed{5}\\!\\!0$", False, "a digit after negative spaces"),
        ("$\\boxed{5}{0}$", False, "a digit in a group glued after the box"),
        ("$\\boxed{5}\\mathrm{e}3$", False, "an exponent glued after the box"),
        ("$\\boxed{5}\\,\\text{k}$", False, "a thousands suffix after a thin space"),
        ("$\\boxed{5}\\ \\text{million}$", False, "a scale word in text after a space"),
        ("$\\boxed{5}$ (thousand)", False, "a scale word in brackets after the box"),
        ("$\\boxed{2}\\sqrt{3}$", False, "a root multiplying the box"),
        ("$\\boxed{2}\\pi$", False, "pi multiplying the box"),
        ("$\\boxed{5}\\frac{1}{2}$", False, "a fraction after the box (a mixed number or a product)"),
        ("$\\boxed{5}\\, x$", False, "a variable after a space in math"),
        ("$\\boxed{5}\\mathrm{i}$", False, "the imaginary unit after the box"),
        ("$\\boxed{5}$ + 2", False, "arithmetic after the math closes"),
        ("$\\boxed{5}$ x 2", False, "a product in words after the math closes"),
        ("$\\boxed{5}$ per cent", False, "a percent in words the question does not ask for"),
        ("The answer is **$\\boxed{5}$**.", True, "bold around the box"),
        ("_Final answer:_ $\\boxed{5}$ _(done)_", True, "italics around the box"),
        ("So the final answer is '$\\boxed{5}$'.", True, "quotes around the box"),
        ("So $x = \\boxed{5}$.", True, "a name before the box"),
        ("$2 + 3 = \\boxed{5} = x$", True, "a name after the box"),
        ("The area is $\\boxed{5}\\text{ cm}^2$.", True, "a unit in text after the box"),
        ("$\\boxed{5}\\,\\mathrm{m}$", True, "a unit letter after a thin space"),
        ("$\\boxed{5}\\text{m}$", True, "a unit letter in text glued to the box"),
        ("$f(3) = \\left(\\boxed{5}\\right)$.", True, "sized brackets around the box, nothing after"),
        ("$\\boxed{5}$ apples", True, "a word after the box"),
    ]),
    *_cases("operand", "Simplify $k + k$.", "2k", [
        ("_Final answer:_ $\\boxed{2k}$ _(done)_", True, "the box's own letter is not a word after it"),
    ]),
    *_cases("operand", "What is the angle, in degrees?", "30", [
        ("$\\boxed{30}^\\circ$", True, "a degree sign after the box stays the answer's"),
        ("$\\boxed{30}$ minutes", True, "a unit of another kind than asked (the number is judged)"),
        ("$\\boxed{30}$ radians", False, "radians after the box when degrees are asked"),
    ]),
    *_cases("operand", "What percent of the apples are red?", "28", [
        ("$\\boxed{28}\\%$", True, "a percent sign after the box when a percent is asked"),
        ("$\\boxed{28}$ percent", True, "a percent in words after the box when a percent is asked"),
    ]),
    *_cases("operand", "What is the remainder when $17^{-1}$ is taken modulo 83?", "44", [
        ("So $17^{-1} \\equiv \\boxed{44} \\pmod{83}$.", True, "a residue's modulus after the box"),
        ("Thus the answer is $\\boxed{44}$ meters.", True, "a word after the math"),
    ]),
    *_cases("operand", "How many hours does the trip take?", "5", [
        ("$\\boxed{5}$ minutes", False, "a unit after the box, of the kind asked but another"),
        ("$\\boxed{5}$ hours", True, "the unit asked after the box"),
    ]),
]  # fmt: skip
