"""Responses in the forms policies write, written for this set (not drawn from ../shared/data): honest answers
in the spellings and commitments of recall rules 1-3, beside wrong answers and hedges in the same forms. Each is
(response, gold, dataset, problem, expected, why); `expected` by the labelling conventions (rules.py's CONVENTIONS).

Used by tests/test_verifier_styles.py (our verdicts) and scripts/bench/verifier_policy_styles.py (our misses and
wrong credits beside Math-Verify's). KNOWN_MISSES: honest answers we still score 0, and why.
"""

from __future__ import annotations

SALARY = "Maria earns $50,000 a year and gets a 15% raise. What is her salary after the raise?"
EGGS = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast and bakes muffins with four. She sells the "
        "remainder for $2 per egg. How much does she make every day?")
BAKERY = "A bakery sells 48 muffins in the morning and 35 in the afternoon. How many muffins does it sell in all?"
PAGES = "Ann reads 12 pages a day for 9 days. How many pages does she read?"
BUS = "A bus trip of 270 km takes 4.5 hours. What is the bus's average speed in km per hour?"
PENCILS = "29 pencils are packed in boxes of 6. How many full boxes are there?"
GARDEN = "A garden is 12 m long and 7 m wide. What is the area of the garden in square meters?"
STARS = "Light travels about 300000 km each second. How many kilometers does it travel in 4000 seconds?"
TEMPERATURE = "The temperature was 3 degrees and fell by 11 degrees. What is the temperature now, in degrees?"
RECIPE = "A recipe uses 2.5 cups of flour per cake. How many cups of flour are needed for 5 cakes?"
MOVIE = "A movie starts at 150 minutes past noon and lasts 90 minutes. How many hours after noon does it end?"
SOLVE = "Solve for $x$: $3x - 7 = 11$."
LINE = "Find the value of $k$ such that the line $y = kx + 2$ passes through $(3, 14)$."
SQUARE = "What is the area of a square whose diagonal is $6$?"
SERIES = "Compute $1 + 2 + \\cdots + 100$."
PROBABILITY = ("Two fair coins are flipped. What is the probability that both show heads? Express your answer as a "
               "decimal.")

STYLES: list[tuple[str, str, str, str | None, bool, str]] = [
    # ---- the last value committed to, without a marker
    ("She gets 50,000 * 0.15 = $7,500 more.\nSo her salary is 50,000 + 7,500 = $57,500.", "57500", "gsm8k", SALARY,
     True, "closing sentence with a chain"),
    ("Her raise is $7,500, so her new salary is $57,500.", "57500", "gsm8k", SALARY, True, "closing, last clause"),
    ("She has 16 - 3 - 4 = 9 eggs left to sell.\nJanet makes 9 * 2 = $18 every day.", "18", "gsm8k", EGGS, True,
     "closing on the asked verb"),
    ("In the morning 48, in the afternoon 35.\nThe bakery sells 48 + 35 = 83 muffins in all.", "83", "gsm8k", BAKERY,
     True, "closing with 'in all'"),
    ("12 pages a day for 9 days.\nShe reads 108 pages.", "108", "gsm8k", PAGES, True, "a short closing sentence"),
    ("**108**", "108", "gsm8k", PAGES, True, "only the value, bold"),
    ("Each box holds 6 pencils: 29 = 4 * 6 + 5.\nThere are $\\boxed{4}$ full boxes, with 5 pencils left over.",
     "4", "gsm8k", PENCILS, True, "a box, then the remainder"),
    ("$\\boxed{4}$\n\nCheck: 4 * 6 = 24 and 29 - 24 = 5 pencils remain.", "4", "gsm8k", PENCILS, True,
     "a box, then a check"),
    ("Length: $\\boxed{12}$ m, width: $\\boxed{7}$ m, area: $\\boxed{84}$ square meters.", "84", "gsm8k", GARDEN,
     True, "labelled boxes, the asked one last"),
    ("We isolate $x$: $3x = 18$.\n$x = 6$", "6", "math", SOLVE, True, "an equation of the asked variable"),
    ("Substituting the point: $14 = 3k + 2$, so $3k = 12$.\n\n$$k = 4$$", "4", "math", LINE, True,
     "the asked variable in display math"),
    ("The side is $6/\\sqrt{2} = 3\\sqrt{2}$, so the area is $(3\\sqrt{2})^2 = 18$.", "18", "math", SQUARE, True,
     "MATH closing sentence"),
    # ---- reasoning blocks
    ("<think>\n9 days at 12 pages is 108.\n</think>\n\nShe reads 108 pages.", "108", "gsm8k", PAGES, True,
     "an unmarked sentence after the block"),
    ("<think>\n48 + 35 = 83\n</think>\n\n83", "83", "gsm8k", BAKERY, True, "a bare value after the block"),
    ("<think>\nThe sum is n(n+1)/2 = 5050.\n</think>\n\nThe sum is $\\boxed{5050}$.", "5050", "math", SERIES, True,
     "a box after the block"),
    # ---- spellings of one number
    ("Light covers 300000 * 4000 km.\nThe answer is $1.2 \\times 10^9$.", "1200000000", "gsm8k", STARS, True,
     "scientific notation"),
    ("The answer is 1.2e9 km.", "1200000000", "gsm8k", STARS, True, "e-notation"),
    ("The answer is 1\u2009200\u2009000\u2009000 km.", "1200000000", "gsm8k", STARS, True, "thin-space groups"),
    ("The answer is 1'200'000'000.", "1200000000", "gsm8k", STARS, True, "apostrophe groups"),
    ("The answer is 1.200.000.000 km.", "1200000000", "gsm8k", STARS, True, "dot groups"),
    ("The answer is 57.500,00 €.", "57500", "gsm8k", SALARY, True, "dot group and decimal comma, euro after"),
    ("The answer is 57500 $.", "57500", "gsm8k", SALARY, True, "dollar sign after"),
    ("The answer is $57,500.00.", "57500", "gsm8k", SALARY, True, "trailing zeros"),
    ("The answer is \u22128 degrees.", "-8", "gsm8k", TEMPERATURE, True, "unicode minus, unit spelled out"),
    ("The answer is 60 km/h.", "60", "gsm8k", BUS, True, "a unit abbreviated"),
    ("The answer is 12,5 cups.", "12.5", "gsm8k", RECIPE, True, "a decimal comma"),
    ("The answer is \\boxed{0,25}.", "0.25", "math", PROBABILITY, True, "a decimal comma, boxed"),
    ("The movie ends 4 hours after noon.", "4", "gsm8k", MOVIE, True, "the asked unit in a closing sentence"),
    ("The answer is eighteen dollars.", "18", "gsm8k", EGGS, True, "a number word"),
    ("The answer is one hundred eight.", "108", "gsm8k", PAGES, True, "number words"),
    ("Ann reads 12 pages a day.\nOver 9 days that is 12 * 9 pages.\n108", "108", "gsm8k", PAGES, True,
     "a last line that is only the value"),
    ("12 pages a day for 9 days.\n\n**One hundred eight.**", "108", "gsm8k", PAGES, True,
     "a last line in words, bold"),
    ("We add 48 and 35.\nThe bakery sells 83 muffins in all.", "83", "gsm8k", BAKERY, True,
     "the question's own end restated"),
    ("Let $x$ be the number of pages she reads.\nShe reads 12 pages on each of 9 days.\n$x = 108$", "108", "gsm8k",
     PAGES, True, "a letter defined as the asked quantity"),
    ("The diagonal is $6$, so the side is $3\\sqrt{2}$.\nThe square has area 18.", "18", "math", SQUARE, True,
     "MATH closing sentence without a conclusion word"),
    ("Her raise is 15% of $50,000.\nThe answer is 57.500,00 €.", "57500", "gsm8k", SALARY, True,
     "euro cents after a dot group"),
    ("The answer is 18,00 €.", "18", "gsm8k", EGGS, True, "a decimal comma with zero cents"),
    ("The answer is USD 18.", "18", "gsm8k", EGGS, True, "a currency code before the value"),
    ("The answer is $\\boxed{18}$.\n\nCheck: 9 eggs at $2 is $18, and 3 + 4 = 7 eggs were used.", "18", "gsm8k",
     EGGS, True, "a check naming other quantities"),
    # ---- wrong answers and hedges in the same forms
    ("12 pages a day for 9 days.\n108\n109", "108", "gsm8k", PAGES, False, "two value lines"),
    ("12 pages a day for 9 days. Perhaps\n108", "108", "gsm8k", PAGES, False, "a hedge leading into the last line"),
    ("The answer is $\\boxed{108}$. Wait, that is wrong.", "108", "gsm8k", PAGES, False, "a box then called wrong"),
    ("Let $x$ be the number of days.\n$x = 108$", "108", "gsm8k", PAGES, False, "a letter for another quantity"),
    ("The diagonal is $6$.\nMaybe the square has area 18.", "18", "math", SQUARE, False, "MATH: a hedged closing"),
    ("So her salary is $57,500 or $60,000.", "57500", "gsm8k", SALARY, False, "two values"),
    ("So her salary is not $57,500.", "57500", "gsm8k", SALARY, False, "a disowned value"),
    ("Her salary is probably $57,500.", "57500", "gsm8k", SALARY, False, "an unsure value"),
    ("She has 16 - 3 - 4 = 9 eggs left to sell.", "9", "gsm8k", EGGS, False, "an intermediate step"),
    ("<think>\nShe reads 108 pages.\n</think>", "108", "gsm8k", PAGES, False, "only inside the block"),
    ("<think>\nShe reads 108 pages.", "108", "gsm8k", PAGES, False, "a block never closed"),
    ("Area: $\\boxed{80}$, area: $\\boxed{84}$.", "84", "gsm8k", GARDEN, False, "two boxes for the asked quantity"),
    ("Area: $\\boxed{84}$, length: $\\boxed{12}$.", "84", "gsm8k", GARDEN, False, "the asked box not last"),
    ("We isolate $x$.\n$x = 6$ or $x = 7$", "6", "math", SOLVE, False, "two values of the variable"),
    ("The answer is 1,200.", "1.2", "gsm8k", STARS, False, "1,200 groups thousands"),
    ("The answer is 1.200.", "1200", "gsm8k", STARS, False, "one dot group is a decimal"),
    ("The movie ends 240 minutes after noon.", "4", "gsm8k", MOVIE, False, "another unit than asked"),
    ("The answer is 12 \\times 10^8.", "1200000000", "gsm8k", STARS, False, "not scientific notation"),
    ("$\\boxed{4}$ full boxes, or 5 if a partial box counts.", "4", "gsm8k", PENCILS, False, "another value after"),
]

# Honest answers still scored 0 (none left: number words score under the number_words rule).
KNOWN_MISSES: set[str] = set()
