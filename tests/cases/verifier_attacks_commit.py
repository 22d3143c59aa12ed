"""The adversarial suite's cases for the recall rules (tests/cases/verifier_attacks.py collects them): each new
way to credit an answer beside the hedges it could open, shown refused.

  commit     the last value committed to for the asked quantity: an unmarked last sentence (GSM8K), the last of
             labelled boxes, an equation of the asked variable, a box with a clause about another quantity after it
  spelling   other spellings of one number: number words, scientific notation, other locales' separators, a decimal
             comma, currency after the value, trailing zeros, units spelled out; ambiguous separators stay refused
  reasoning  a reasoning block: only what follows its close is the answer
"""

from __future__ import annotations

from cases.verifier_case import Case, _box, _cases

SALARY = "Maria earns $50,000 a year and gets a 15% raise. What is her salary after the raise?"
EGGS = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast and bakes muffins with four. She sells the "
        "remainder for $2 per egg. How much does she make every day?")
CANDIES = "23 candies are shared equally among 4 children. How many candies does each child get?"
RECTANGLE = "A rectangle has length 8 and width 4. What is the area of the rectangle?"
SOLVE = "Solve for $x$: $2x + 3 = 13$."
TRIP = "A trip takes 300 minutes. How many hours does the trip take?"
CITY = "A city has 1200 blocks with 1000 people on each block. How many people live in the city?"
APPLES = "Tom has 3 apples and buys 2 more. How many apples does Tom have?"

COMMIT: list[Case] = [
    # An unmarked last sentence that states the asked quantity's value (GSM8K).
    *_cases("commit", SALARY, "57500", [
        ("The raise is 50000 * 0.15 = $7,500, so her salary is $57,500.", True, "the asked quantity, last clause"),
        ("She gets 50000*0.15=7500 more.\nSo her salary is 50000 + 7500 = $57,500.", True, "a true chain"),
        ("Her new salary is 57,500 dollars.", True, "the unit spelled out"),
        ("So her salary is $57,500 or $60,000.", False, "two values in the last sentence"),
        ("So her salary is $60,000 or $57,500.", False, "two values, the gold last"),
        ("Her salary is $57,500, or $60,000.", False, "a second value after a comma"),
        ("So her salary is not $57,500.", False, "a negated value"),
        ("Her salary isn't $57,500.", False, "a negated value, contracted"),
        ("Her salary might be $57,500.", False, "a hedged value"),
        ("I think her salary is $57,500.", False, "an unsure value"),
        ("Her salary is about $57,500.", False, "an approximation"),
        ("Her salary is at least $57,500.", False, "a bound"),
        ("Her salary is $57,500 if the raise applies.", False, "a condition"),
        ("Her salary is 50000 + 5000 = $57,500.", False, "a false chain"),
        ("Her salary is $57,500?", False, "a question"),
        ("Wait, her salary is $57,500.", False, "a correction with nothing before it"),
        ("She earns $50,000 and the raise is 15%, so her salary is", False, "cut off"),
        ("Let me compute 50000 + 7500 = 57500 step by step.", False, "no word of the asked quantity"),
        ("Her salary is $57,500 thousand.", False, "a scale word after it"),
    ], dataset="gsm8k"),
    *_cases("commit", EGGS, "18", [
        ("She sells 16 - 3 - 4 = 9 eggs.\nJanet makes 9 * $2 = $18 every day.", True, "the asked verb, a chain"),
        ("She sells 16 - 3 - 4 = 9 eggs.", False, "an intermediate step names no asked word"),
        ("**18**", True, "a response that is only the value"),
        ("18 or 20", False, "a bare response with two values"),
        ("**18?**", False, "a bare value as a question"),
        ("She sells 9 eggs.\nThe total is $18.", True, "a money question named by the currency sign"),
        ("Janet earns $18 daily.", True, "'daily' names 'every day'"),
        ("The total is $18 or $20.", False, "two prices"),
        ("The eggs cost $2.", False, "another price is another value"),
        ("9 * 2 = 18", True, "a response that is only a true chain"),
        ("9 * 2 = 19", False, "only a false chain"),
        ("9 * 2 = 18 or 20", False, "a chain, then two values"),
        ("Janet makes $18.\n\nCheck: 9 * 2 = 18.", True, "a check after the closing sentence"),
        ("Janet makes $18.\n\nCheck: actually 9 * 2 = 20.", False, "a check that retracts"),
        ("Janet makes $18.\n\nCheck: $20 also works.", False, "a check that offers another value"),
        ("She sells 9 eggs.\nTotal = $18", True, "a last line labelled 'Total'"),
        ("She sells 9 eggs.\nDaily earnings: $18", True, "a last line whose label names the asked quantity"),
        ("She sells 9 eggs.\nTotal = $18 or $20", False, "a labelled line with two values"),
        ("She sells 9 eggs.\nMaybe total = $18", False, "a hedged label"),
        ("She sells 16 - 3 - 4 = 9 eggs.\nEggs sold: 9", False, "a label naming another quantity"),
    ], dataset="gsm8k"),
    *_cases("commit", TRIP, "5", [
        ("The trip takes 300 / 60 = 5 hours.", True, "the unit asked"),
        ("The trip takes 5 minutes.", False, "another unit of the kind asked"),
        ("The trip takes 300 minutes.", False, "the question's own figure, in another unit"),
    ], dataset="gsm8k"),
    # A final box with a clause about another quantity after it (a remainder, a check).
    *_cases("commit", CANDIES, "5", [
        ("Each child gets $\\boxed{5}$ candies, with a remainder of 3.", True, "a remainder after the box"),
        ("$\\boxed{5}$\n\nCheck: 5 * 4 = 20, and 3 are left over.", True, "a check after the box"),
        ("$\\boxed{5}$, or 6 if the leftovers are shared.", False, "another value under a condition"),
        ("Each child gets $\\boxed{5}$ candies, or 6 if the rest are shared.", False, "'or' a value, words between"),
        ("Each child gets $\\boxed{5}$ candies and 3 are left over.", True, "another quantity in the box's clause"),
        ("$\\boxed{5}$\n\nIt could also be 6.", False, "another value offered later"),
    ], dataset="gsm8k"),
    # The last of several labelled boxes, its label the asked quantity.
    *_cases("commit", RECTANGLE, "32", [
        ("Length: $\\boxed{8}$, width: $\\boxed{4}$, area: $\\boxed{32}$.", True, "the asked quantity's box last"),
        ("Length = \\boxed{8}\n\nWidth = \\boxed{4}\n\nArea = \\boxed{32}", True, "labels on their own lines"),
        ("Area: \\boxed{30}\nArea: \\boxed{32}", False, "two boxes for the asked quantity"),
        ("Area maybe: \\boxed{30}, area: \\boxed{32}", False, "a hedged label"),
        ("Guess: \\boxed{30}, area: \\boxed{32}", False, "an earlier box that names no quantity... is a guess"),
        ("\\boxed{30}, area: \\boxed{32}", False, "an earlier box without a label"),
        ("Length: \\boxed{8}, width: \\boxed{4}, area: \\boxed{32} or \\boxed{30}", False, "two boxes for the area"),
        ("Length: \\boxed{8}, width: \\boxed{4}, area: \\boxed{32} (or 30)", False, "another value after the box"),
        ("Area: \\boxed{32}, perimeter: \\boxed{24}", False, "the asked quantity's box not last"),
    ]),
    *_cases("commit", RECTANGLE, "8", [
        ("Length: \\boxed{8}, width: \\boxed{4}, area: \\boxed{32}", False, "an earlier label's value is not it"),
    ]),
    *_cases("commit", None, "32", [
        ("Width: \\boxed{4}\nArea: \\boxed{32}", False, "without the problem the asked quantity is not known"),
    ]),
    # An equation of the asked variable on the last line.
    *_cases("commit", SOLVE, "5", [
        ("Subtract 3: $2x = 10$. Divide by 2:\n$x = 5$", True, "the asked variable's equation"),
        ("Subtracting 3 and halving:\n\n$$x = 5$$", True, "in display math"),
        ("We solve it.\n$x = 5$ or $x = 7$", False, "two values"),
        ("We solve it.\n$x = \\pm 5$", False, "plus or minus"),
        ("Perhaps\n$x = 5$", False, "a hedge on the line before"),
        ("Maybe it is\n\n$x = 5$", False, "a hedge on the line before, a blank line between"),
        ("We solve it.\n$x \\approx 5$", False, "an approximation"),
        ("We solve it.\n$x = 5$?", False, "a question"),
        ("So $x = 5$.\n\nCheck: $2 \\cdot 5 + 3 = 13$.", True, "a check after the closing sentence"),
        ("So $x = 5$.\n\nCheck: $x = 7$ also works.", False, "a check offering another value"),
    ]),
    *_cases("commit", "Solve for x: 2x + 3 = 13.", "5", [
        ("Subtract 3 and divide by 2.\nx = 5", True, "the asked variable named without math"),
        ("Subtract 3 and divide by 2.\ny = 5", False, "another variable"),
    ]),
    *_cases("commit", "Find a number that is 3 more than 2.", "5", [
        ("We add three to two to get the number we want.\na = 5", False, "'Find a number' asks for no variable a"),
    ]),
]

# Recall rule 1, more commitments: a last line that is only a value (after working), the question's own end restated
# after the value, a MATH closing sentence without a conclusion word, a letter the response defines as the asked
# quantity; and rule 4: a value the response then calls wrong is disowned.
LLOYD = ("Lloyd earns $10 an hour tutoring. He tutored 5 hours in the first week and 8 in the second. How much did he "
         "earn for the first two weeks?")
MOVIES = ("Tom has $20 and a movie costs $10. How many movies can he see if he saw 5 movies on a Friday or Saturday "
          "already?")
POLYGON = "A polygon has 90 diagonals. How many sides does the polygon have?"
PAIRS = "Given $\\gcd(a,b)=210$ and $a<b$, how many possible values are there for $a$?"
CYLINDER = ("A cylinder has volume $45\\pi$ and radius 3. What is the height in centimeters of the cylinder?\n[asy]\n"
            "size(120);\nlabel(\"$h$\",(3.4,0));\n[/asy]")
TIP = "Ashley's order is $15 and she tips $3. What is the total amount that Ashley should give the delivery man?"
PAGES = "Ann reads 12 pages a day for 9 days. How many pages does she read?"

COMMIT += [
    # A last line that is only a value, after the working.
    *_cases("commit", EGGS, "18", [
        ("She sells 16 - 3 - 4 = 9 eggs at $2 each.\n18", True, "a last line that is only the value"),
        ("She sells 16 - 3 - 4 = 9 eggs at $2 each.\n\n**18**", True, "a bold last line"),
        ("She sells 16 - 3 - 4 = 9 eggs at $2 each.\n$18$", True, "a last line in math"),
        ("She sells 16 - 3 - 4 = 9 eggs at $2 each.\n\\(18\\)", True, "a last line in \\( \\)"),
        ("She sells 16 - 3 - 4 = 9 eggs at $2 each.\nEighteen.", True, "a last line in words"),
        ("She sells 16 - 3 - 4 = 9 eggs at $2 each.\n18 dollars", True, "a last line in dollars, asked in money"),
        ("She sells 9 eggs, or 10 if one hatches.\n18", True, "an 'or' in the working, not leading into the value"),
        ("She sells 9 eggs at $2 each.\n18\n20", False, "two value lines"),
        ("She sells 9 eggs at $2 each.\n20\n18", False, "two value lines, the gold last"),
        ("She sells 9 eggs at $2 each.\n18 or 20", False, "two values on the last line"),
        ("She sells 9 eggs at $2 each.\nEighteen or twenty", False, "two values in words on the last line"),
        ("She sells 9 eggs at $2 each.\nPerhaps\n18", False, "a hedge leading into the value"),
        ("She sells 9 eggs at $2 each, so it is either\n18", False, "a line ending on a hedge word"),
        ("She sells 9 eggs at $2 each. I am not sure.\n18", False, "doubt right before the value"),
        ("She sells 9 eggs at $2 each. It is not\n18", False, "a negation leading into the value"),
        ("She sells 9 eggs at $2 each. Wait, that was wrong.\n18", False, "a retraction right before the value"),
        ("She sells 9 eggs at $2 each. The candidates are:\n18", False, "a line that opens a list"),
        ("She sells 9 eggs at $2 each.\n18?", False, "a value as a question"),
        ("1. She sells 9 eggs.\n2. Each is $2.\n18.", False, "a numbered item, not a value"),
        ("She sells 9 eggs at $2 each.\n18 eggs", False, "a value with words naming another quantity"),
        ("She sells 9 eggs at $2 each.\n18 thousand", False, "a scale word"),
        ("She sells 9 eggs at $2 each.\n~18", False, "an approximation sign"),
        ("She sells 9 eggs at $2 each.\n18\n\nWait, that is wrong.", False, "the value then called wrong"),
        ("She sells 9 eggs at $2 each.\n→ 18", True, "an arrow before the last line's value"),
        ("She sells 9 eggs at $2 each.\n→ 18\n→ 20", False, "two value lines after arrows"),
        ("She sells 9 eggs at $2 each.\n→ 18 or 20", False, "two values after an arrow"),
        ("She sells 9 eggs at $2 each.\nAnswer = 18", True, "a last line labelled 'Answer'"),
        ("She sells 9 eggs at $2 each.\nTherefore: 18", True, "a last line labelled 'Therefore'"),
        ("She sells 9 eggs at $2 each.\nMaybe answer = 18", False, "a hedged 'Answer' label"),
        ("She sells 9 eggs at $2 each.\nTherefore: 18 or 20", False, "two values after 'Therefore:'"),
        # Working after the closing sentence's value that justifies it.
        ("She sells 9 eggs.\nShe makes $18 every day (9 eggs × $2).", True, "a parenthesis of working after it"),
        ("She sells 9 eggs.\nShe makes $18 every day, since 9 × 2 = 18.", True, "a 'since' clause of working"),
        ("She sells 9 eggs.\nShe makes $18 every day (9 eggs × $2 = $20).", False, "working with a false result"),
        ("She sells 9 eggs.\nShe makes $18 every day (10 × 2).", False, "working of another value"),
        ("She sells 9 eggs.\nShe makes $18 every day (9 + 2).", False, "working of another value, a sum"),
        ("She sells 9 eggs.\nShe makes $18 every day (or $20).", False, "another value in a parenthesis"),
        ("She sells 9 eggs.\nShe makes $18 every day (20 on weekends).", False, "another value, no operation"),
        ("She sells 9 eggs.\nShe makes $18 every day (maybe 9 × 2).", False, "hedged working"),
        ("She sells 9 eggs.\nShe makes $18 every day, since 9 × 2 = 18 or 20.", False, "two results in the working"),
    ], dataset="gsm8k"),
    *_cases("commit", POLYGON, "15", [
        ("The number of diagonals is $n(n-3)/2 = 90$, so $n^2 - 3n - 180 = 0$.\n$15$", True, "MATH: a last line"),
        ("The number of diagonals is $n(n-3)/2 = 90$.\n$15$\n$12$", False, "MATH: two value lines"),
        ("The number of diagonals is $n(n-3)/2 = 90$. Perhaps\n$15$", False, "MATH: a hedge before it"),
    ]),
    # The question's own end restated after the value is its data, not a condition or another value.
    *_cases("commit", LLOYD, "130", [
        ("He tutored 5 + 8 = 13 hours.\nHe earned $130 for the first two weeks.", True, "the question's end restated"),
        ("He tutored 13 hours.\nHe earned $130 or $140 for the first two weeks.", False, "two values, then the end"),
        ("He tutored 13 hours.\nHe might have earned $130 for the first two weeks.", False, "a hedge, then the end"),
        ("He tutored 13 hours.\nHe earned $130 if he worked for the first two weeks.", False, "a condition of its own"),
        ("He tutored 13 hours.\nHe did not earn $130 for the first two weeks.", False, "a negation, then the end"),
        ("He tutored 13 hours.\nHe earned $130 for the first two weeks, or $140.", False, "a value after the end"),
    ], dataset="gsm8k"),
    *_cases("commit", MOVIES, "1", [
        ("He has $10 left.\nHe can see 1 movies if he saw 5 movies on a Friday or Saturday already.", True,
         "the question's condition and its 'or' restated"),
        ("He has $10 left.\nHe can see 1 or 2 movies if he saw 5 movies on a Friday or Saturday already.", False,
         "two values before the restated end"),
    ], dataset="gsm8k"),
    *_cases("commit", PAIRS, "8", [
        ("Each prime goes to $a$ or $b$.\nThere are 8 possible values for $a$.", True, "MATH: the end restated"),
        ("Each prime goes to $a$ or $b$.\nThere are 8 or 9 possible values for $a$.", False, "MATH: two values"),
        ("Each prime goes to $a$ or $b$.\nMaybe there are 8 possible values for $a$.", False, "MATH: a hedge word"),
    ]),
    # MATH: a closing sentence that names the asked quantity, without a conclusion word.
    *_cases("commit", POLYGON, "15", [
        ("We solve $n(n-3)/2 = 90$.\nThe polygon has 15 sides.", True, "MATH: a closing sentence"),
        ("We solve $n(n-3)/2 = 90$.\nThe polygon might have 15 sides.", False, "MATH: a hedge in it"),
        ("We solve $n(n-3)/2 = 90$.\nThe polygon has 15 or 16 sides.", False, "MATH: two values in it"),
        ("We solve $n(n-3)/2 = 90$.\nThe polygon has about 15 sides.", False, "MATH: an approximation"),
        ("We solve $n(n-3)/2 = 90$.\nMaybe there are 15 sides.", False, "MATH: 'Maybe' opening a concluding sentence"),
        ("We solve $n(n-3)/2 = 90$.\nI think there are 15 sides.", False, "MATH: 'I think' in a concluding sentence"),
    ]),
    # A question that names only a generic noun ("the total amount"); a question before a figure or a note.
    *_cases("commit", TIP, "18", [
        ("Her order is $15 and the tip $3.\nSo the total amount is $18.", True, "the generic noun asked"),
        ("Her order is $15 and the tip $3.\nSo the total amount is $18 or $20.", False, "two values"),
        ("Order: $\\boxed{15}$, tip: $\\boxed{3}$, total amount: $\\boxed{18}$.", True, "labelled boxes"),
        ("Total amount: $\\boxed{15}$, total amount: $\\boxed{18}$.", False, "two boxes for the asked quantity"),
    ], dataset="gsm8k"),
    *_cases("commit", CYLINDER, "5", [
        ("Radius: $\\boxed{3}$.\nThe height: $\\boxed{5}$.", True, "labelled boxes, the question before a figure"),
        ("Height: $\\boxed{4}$.\nThe height: $\\boxed{5}$.", False, "two boxes for the asked quantity"),
        ("The height: $\\boxed{5}$.\nRadius: $\\boxed{3}$.", False, "the asked quantity's box not last"),
    ]),
    # A letter the response defines as the asked quantity, then its equation on the last line.
    *_cases("commit", PAGES, "108", [
        ("Let $x$ be the number of pages she reads.\nShe reads 12 a day for 9 days.\n$x = 108$", True,
         "a letter defined as the asked quantity"),
        ("Let x be the number of pages she reads.\nx = 12 * 9\nx = 108", True, "without math delimiters"),
        ("Let $x$ be the number of pages she reads.\n$x = 108$ or $x = 109$", False, "two values"),
        ("Let $x$ be the number of pages she reads.\nPerhaps\n$x = 108$", False, "a hedge before it"),
        ("Let $x$ be the number of days.\n$x = 108$", False, "a letter defined as another quantity"),
        ("Let $x$ be the number of pages.\nLet $x$ be the number of days.\n$x = 108$", False, "defined twice"),
        ("She reads 12 a day for 9 days.\n$x = 108$", False, "a letter never defined"),
        ("Let $x$ be the number of pages she reads.\n$y = 108$", False, "another letter"),
    ], dataset="gsm8k"),
    # A sentence or clause about another quantity after the answer (a remainder) is no second value; one that gives
    # the asked quantity another value with a hedge or a condition is.
    *_cases("commit", "29 pencils are packed in boxes of 6. How many full boxes are there?", "4", [
        ("So there are $\\boxed{4}$ full boxes. 5 pencils are left over.", True, "a box, then a remainder sentence"),
        ("29 = 4 * 6 + 5.\nThere are 4 full boxes, with 5 pencils left over.", True, "a closing clause, a remainder"),
        ("29 = 4 * 6 + 5.\nThere are 4 full boxes and 5 pencils remain.", True, "'and' a remainder"),
        ("**Answer:** 4 full boxes (5 pencils left over)", True, "a statement, a remainder in brackets"),
        ("The answer is 4 boxes, and 5 pencils remain.", True, "a statement, a remainder clause"),
        ("So there are $\\boxed{4}$ full boxes. 5 boxes if we count the partial one.", False,
         "the asked quantity again, under a condition"),
        ("So there are $\\boxed{4}$ full boxes. 5 more.", False, "a bare comparison after the box"),
        ("So there are $\\boxed{4}$ full boxes. 5 pencils, or maybe 6 boxes.", False, "a hedge after the box"),
        ("So there are $\\boxed{4}$ full boxes. Actually 5 pencils remain.", False, "a correction word"),
        ("29 = 4 * 6 + 5.\nThere are 4 full boxes, with 5 boxes left over.", False, "the asked noun in the clause"),
        ("29 = 4 * 6 + 5.\nThere are 4 full boxes and 5 more.", False, "a comparison clause"),
        ("29 = 4 * 6 + 5.\nThere are 4 full boxes, or 5 pencils maybe.", False, "a hedged clause"),
        ("**Answer:** 4 full boxes (or 5)", False, "another value in brackets"),
        ("The answer is 4 boxes, and 5 boxes remain.", False, "the asked noun twice"),
        ("The answer is 4 boxes, and 5.", False, "a bare second value"),
    ], dataset="gsm8k"),
    *_cases("commit", EGGS, "18", [
        ("She makes $\\boxed{18}$ dollars. She keeps 3 eggs.", True, "a box, then eggs kept"),
        ("She sells 9 eggs.\nShe makes $18 every day, with 3 eggs left.", True, "a closing clause about eggs"),
        ("She makes $\\boxed{18}$ dollars. If she sold 10 eggs she would make $20.", False,
         "another sum under a condition"),
        ("She makes $\\boxed{18}$ dollars. 20 dollars.", False, "another sum after the box"),
        ("The answer is $18, and 20 weekly.", False, "another sum per week, the sign dropped"),
        ("The answer is $18, and she keeps 3 eggs.", False, "a money statement's clause (signs dropped)"),
        ("She sells 9 eggs.\nShe makes $18 every day, and 20 weekly.", False, "a weekly sum in the closing sentence"),
        ("She sells 9 eggs.\nShe makes $18 every day, and $20 on weekends.", False, "another sum, a sign"),
    ], dataset="gsm8k"),
    # MATH: "we get" concludes; what a line of implications ends on is its equation.
    *_cases("commit", "Solve for $x$: $3x - 7 = 11$.", "6", [
        ("Adding 7 and dividing by 3, we get $x = 6$.", True, "'we get' concludes"),
        ("Add 7 to both sides.\n$3x = 18 \\Rightarrow x = 6$", True, "the end of an implication"),
        ("Add 7 to both sides.\n$$3x = 18 \\implies x = 6$$", True, "\\implies"),
        ("Adding 7, we get $x = 6$ or $x = 7$.", False, "two values after 'we get'"),
        ("Maybe we get $x = 6$.", False, "a hedge"),
        ("Add 7 to both sides.\n$3x = 18 \\Rightarrow x = 6$ or $x = 7$", False, "two values at the end"),
        ("Perhaps\n$3x = 18 \\Rightarrow x = 6$", False, "a hedge before it"),
        ("We get $3x = 18$.", False, "an intermediate equation"),
    ]),
    # A value the response then calls wrong, with no value after: disowned (rule answer_disowned).
    *_cases("commit", EGGS, "18", [
        ("She makes 9 * 2 = $18.\nThe answer is $\\boxed{18}$. Wait, that is wrong.", False, "a box called wrong"),
        ("The answer is 18. Hmm, this can't be right.", False, "a statement called wrong"),
        ("#### 18\nOops", False, "'Oops' after ####"),
        ("$\\boxed{18}$\nI made a mistake somewhere.", False, "a mistake owned after the box"),
        ("The answer is $\\boxed{18}$. That's not correct.", False, "'not correct' after the box"),
        ("The answer is $\\boxed{18}$. Wait, that is wrong. 9 * 2 = 18, so 18 it is.", True,
         "called wrong, then stated again"),
        ("The answer is $\\boxed{18}$. Selling before eating would be wrong.", True, "a step called wrong"),
        ("The answer is $\\boxed{18}$. This is not wrong.", True, "'not wrong'"),
    ], dataset="gsm8k"),
]

SPELLING: list[Case] = [
    *_cases("spelling", CITY, "1200000", [
        ("The answer is $1.2 \\times 10^6$.", True, "scientific notation"),
        ("The answer is \\boxed{1.2 \\times 10^{6}}.", True, "scientific notation, boxed"),
        ("The answer is 1.2e6.", True, "e-notation"),
        ("The answer is 1\u2009200\u2009000.", True, "thin spaces between groups"),
        ("The answer is 1'200'000.", True, "apostrophes between groups"),
        ("The answer is 1.200.000.", True, "dots between groups (two of them: not a decimal)"),
        ("So the city has 1 200 000 people.", True, "spaces between groups, unmarked last sentence"),
        ("The answer is 12 \\times 10^5.", False, "a factor of 10 or more is an operation, not the notation"),
        ("The answer is 1.2 \\times 10^6 or 1.3 \\times 10^6.", False, "two values in scientific notation"),
        ("The answer is about 1.2 \\times 10^6.", False, "an approximation"),
        ("The answer is 1.2 \\times 10^6 thousand.", False, "a scale word after it"),
        ("The answer is $\\boxed{1.2 \\times 10^6}^2$.", False, "the box as an operand"),
        ("The answer is 1.2e6 or 1.3e6.", False, "two values in e-notation"),
        ("The answer is 1'200'000 or 1'300'000.", False, "two values with apostrophes"),
        ("The answer is 1.200.000 or 1.300.000.", False, "two values with dots"),
        ("The answer is 1,2e6.", False, "a decimal comma in e-notation is not read"),
        ("The answer is 1.2.", False, "the mantissa alone"),
    ], dataset="gsm8k"),
    *_cases("spelling", "How much is 1.2 times 1000?", "1.2", [
        ("The answer is 1.200.000.", False, "dot groups read as thousands, not as a decimal"),
    ], dataset="gsm8k"),
    *_cases("spelling", APPLES, "1234.5", [
        ("The answer is 1 234,5.", True, "space groups before a decimal comma"),
        ("The answer is 1.234,5.", True, "a dot group before a decimal comma"),
        ("The answer is 1,234.5.", True, "comma groups before a decimal point"),
        ("The answer is 1 234,5 or 1 234,6.", False, "two values"),
        ("The answer is 1.234,5.6.", False, "a decimal comma and a point"),
    ], dataset="gsm8k"),
    *_cases("spelling", APPLES, "1.234", [
        ("The answer is 1,234.", False, "1,234 groups thousands: it is 1234"),
    ], dataset="gsm8k"),
    *_cases("spelling", APPLES, "1234", [
        ("The answer is 1.234.", False, "one dot group is a decimal: 1.234"),
        ("The answer is 1,234.", True, "comma groups"),
    ], dataset="gsm8k"),
    *_cases("spelling", APPLES, "15", [
        ("The answer is 1,5.", False, "1,5 is no grouping of 15"),
    ], dataset="gsm8k"),
    *_cases("spelling", APPLES, "12.5", [
        ("The answer is 12,5.", True, "a decimal comma against a decimal gold"),
    ], dataset="gsm8k"),
    *_cases("spelling", APPLES, "125", [
        ("The answer is 12,5.", False, "a decimal comma is not a thousands separator"),
    ], dataset="gsm8k"),
    *_cases("spelling", SALARY, "57500", [
        ("The answer is 57500 $.", True, "a currency sign after the value"),
        ("The answer is 57,500€.", True, "a euro sign after the value"),
        ("The answer is \\boxed{57.500 €}", False, "one dot group is a decimal (57.5), even before a euro sign"),
        ("The answer is 57,500.00.", True, "trailing zeros"),
    ], dataset="gsm8k"),
    # Number words (recall rule 2): an English cardinal read as its digits where a final answer is read; an ordinal, a
    # fraction, an operation in words, another language, or two values in words are not one cardinal.
    *_cases("spelling", EGGS, "18", [
        ("The answer is eighteen.", True, "a number in words after 'The answer is'"),
        ("#### Eighteen", True, "a number in words after ####, capitalised"),
        ("She sells 16 - 3 - 4 = 9 eggs for 9 * 2 = 18 dollars.\nSo she makes eighteen dollars every day.", True,
         "a number in words in an unmarked last sentence"),
        ("The answer is eighteen or twenty.", False, "two values in words"),
        ("The answer is eighteen, no, twenty.", False, "a retraction inside the answer, in words"),
        ("The answer is twenty, no, eighteen.", False, "a retraction inside the answer, the gold last"),
        ("The answer is eighteen. Wait, no, it might be twenty.", False, "a hedged retraction to a value in words"),
        ("The answer is 18. Wait, no, it might be twenty.", False, "a retraction in words after digits"),
        ("#### twenty\nThe answer is $\\boxed{18}$.", False, "#### in words gives another value than the box"),
        ("Janet has eighteen dollars to spend, so she goes to the market.", False, "a number word only mid-text"),
        ("The answer is the eighteenth.", False, "an ordinal is not the cardinal"),
        ("The answer is a few dollars.", False, "'a few' is no number"),
        ("The answer is several dollars.", False, "'several' is no number"),
        ("The answer is dix-huit.", False, "number words in another language are not read"),
        ("The answer is eighteen thousand.", False, "a scale word makes another number (18000)"),
    ], dataset="gsm8k"),
    *_cases("spelling", EGGS, "3", [
        ("So she makes $18 every day, with three eggs left.", False,
         "a number word for another quantity after the answer is not the answer"),
    ], dataset="gsm8k"),
    *_cases("spelling", APPLES, "5", [
        ("The answer is five or seven.", False, "two values in words"),
        ("The answer is five, no, seven.", False, "a retraction inside the answer"),
        ("The answer is cinq.", False, "French is not read"),
        ("The answer is fifth.", False, "an ordinal"),
        ("The answer is five hundred.", False, "five hundred is 500"),
        ("The answer is the fifth one.", False, "an ordinal then 'one'"),
        ("Final answer: five", True, "a number in words after 'Final answer:'"),
    ], dataset="gsm8k"),
    *_cases("spelling", APPLES, "7", [
        ("The answer is five or seven.", False, "two values in words, the gold last"),
        ("The answer is five, no, seven.", False, "a retraction inside the answer, the gold last"),
    ], dataset="gsm8k"),
    *_cases("spelling", APPLES, "1", [
        ("The answer is the blue one.", False, "'one' after a determiner is a pronoun"),
        ("The answer is one half.", False, "a fraction in words"),
        ("The answer is one.", True, "one"),
    ], dataset="gsm8k"),
    *_cases("spelling", APPLES, "205", [
        ("The answer is twenty five.", False, "twenty five is 25"),
        ("The answer is two hundred and five.", True, "'and' after hundred"),
        ("The answer is two hundred five.", True, "without 'and'"),
    ], dataset="gsm8k"),
    *_cases("spelling", None, "25", [
        ("Working it out.\nSo the final answer is $\\boxed{\\text{twenty-five}}$.", True, "hyphenated, in a box"),
        ("So the final answer is $\\boxed{\\text{Twenty Five}}$.", True, "spaces, capitals"),
        ("So the final answer is $\\boxed{\\text{twenty-five or thirty}}$.", False, "two values in a box"),
        ("So the final answer is $\\boxed{\\text{twenty-five}}$, or maybe thirty.", False, "another value after it"),
        ("So the final answer is $\\boxed{\\text{vingt-cinq}}$.", False, "French"),
        ("So the final answer is $\\boxed{\\text{thirty minus five}}$.", False, "an operation in words"),
        ("So the final answer is $\\boxed{\\text{twenty-fifth}}$.", False, "an ordinal"),
    ]),
    *_cases("spelling", "Find $x$ if $x + 7 = 0$.", "-7", [
        (_box("\\text{minus seven}"), True, "a sign word before the number"),
        (_box("\\text{negative seven}"), True, "'negative'"),
        (_box("\\text{seven}"), False, "the sign left out"),
    ]),
    *_cases("spelling", CITY, "1200000", [
        ("The answer is one million two hundred thousand.", True, "millions and thousands in words"),
        ("The answer is twelve hundred thousand.", False, "'twelve hundred' is not read (a scale after a teen)"),
        ("The answer is one million two hundred thousand people, or maybe more.", False, "a hedge after it"),
    ], dataset="gsm8k"),
    *_cases("spelling", "How many sequences are there?", "12", [
        ("Counting each case, therefore, there are twelve sequences.", True, "a MATH closing sentence in words"),
        ("Counting each case, therefore, there are twelve or thirteen sequences.", False, "two values"),
    ]),
    *_cases("spelling", APPLES, "-5", [
        ("The answer is \u22125.", True, "a unicode minus"),
        ("The answer is \u22125 or 5.", False, "two values, unicode minus"),
    ], dataset="gsm8k"),
    *_cases("spelling", EGGS, "18", [
        ("The answer is 18,00 €.", True, "a decimal comma with zero cents"),
        ("The answer is 18,00.", True, "a decimal comma with zero cents, no sign"),
        ("The answer is 18,05 €.", False, "a decimal comma with cents is another value"),
        ("The answer is 18,00 or 20,00 €.", False, "two values with decimal commas"),
        ("The answer is USD 18.", True, "a currency code before the value"),
        ("The answer is USD 18 or USD 20.", False, "two values with currency codes"),
    ], dataset="gsm8k"),
    *_cases("spelling", EGGS, "1800", [
        ("The answer is 18,00 €.", False, "two digits after a comma are no thousands group"),
        ("The answer is 1.800,00 €.", True, "a dot group and zero cents"),
    ], dataset="gsm8k"),
    *_cases("spelling", CITY, "1200000", [
        ("The answer is 1.2 x 10^6.", True, "scientific notation with a letter x"),
        ("The answer is 1.2 × 10⁶ people.", True, "scientific notation with a superscript power"),
        ("The answer is 1.2 million people.", True, "a scale word that gives the gold's value"),
        ("The answer is 1200 thousand.", True, "a scale word on a larger number, the same value"),
        ("The answer is 12 x 10^5.", False, "a factor of 10 or more, with a letter x"),
        ("The answer is 1.2 x 10^5.", False, "another power"),
        ("The answer is 1.2 million or 1.3 million.", False, "two values with scale words"),
        ("The answer is about 1.2 million.", False, "an approximation with a scale word"),
        ("The answer is 1.2 million million.", False, "two scale words"),
        ("The answer is 1.2 billion.", False, "another scale"),
    ], dataset="gsm8k"),
    *_cases("spelling", CITY, "1.2", [
        ("The answer is 1.2 million.", False, "a scale word makes another number than the gold's"),
    ], dataset="gsm8k"),
    *_cases("spelling", "Tom buys 5 boxes of 12 eggs. How many eggs does he buy?", "60", [
        ("He buys 5 dozen eggs.", True, "'dozen' that gives the gold's value"),
        ("He buys 5 dozen eggs, or 61.", False, "another value after it"),
    ], dataset="gsm8k"),
    *_cases("spelling", "Tom buys 5 boxes of 12 eggs. How many boxes does he buy?", "5", [
        ("He buys 5 dozen eggs.", False, "'dozen' makes 60, not the 5 asked"),
    ], dataset="gsm8k"),
    *_cases("spelling", APPLES, "108", [
        ("The answer is a hundred and eight.", True, "'a hundred'"),
        ("The answer is a hundred and eight or a hundred and nine.", False, "two values with 'a hundred'"),
        ("The answer is a hundred or so.", False, "an approximation"),
    ], dataset="gsm8k"),
    *_cases("spelling", SALARY, "57500", [
        ("The answer is US$57,500.", True, "'US$' before the value"),
        ("The answer is USD57,500.", True, "'USD' glued to the value"),
        ("The answer is $57.5k.", True, "a 'k' suffix that gives the gold's value"),
        ("The answer is USD 57,500 or USD 60,000.", False, "two values with currency codes"),
    ], dataset="gsm8k"),
    *_cases("spelling", "For how many two-digit primes is the sum of the digits equal to 8?", "3", [
        ("The answer is 3 two-digit primes.", True, "the asked noun with a compound adjective after the value"),
        ("The answer is 3 whole-number primes.", True, "a hyphenated word in the noun"),
        ("The answer is 3 two-thirds.", False, "a fraction in words after the value"),
        ("The answer is 3 two thirds.", False, "a fraction in words, no hyphen"),
        ("The answer is $\\boxed{3 \\text{ two-thirds}}$.", False, "a fraction in words in the box"),
        ("The answer is 3 twenty-one.", False, "a number in words after the value"),
        ("The answer is 3 thirty seven.", False, "a number in words, no hyphen"),
        ("The answer is 3 twenty.", False, "a tens word after the value"),
        ("The answer is 3 sixteenths.", False, "a fraction word ending in -teenths"),
        ("The answer is 3 or 4 two-digit primes.", False, "two values before the noun"),
    ]),
    *_cases("spelling", "A TV costs $\\$$1500. How many customers buy it?", "9", [
        ("The answer is USD 9.", True, "MATH: a currency code"),
    ]),
    *_cases("spelling", "A car drives 60 km per hour for 3 hours. How many kilometers does it travel?", "180", [
        ("The answer is \\boxed{180\\,\\mathrm{km}}.", True, "a unit abbreviated"),
        ("The answer is \\boxed{180 \\text{ kilometers}}.", True, "a unit spelled out"),
        ("The answer is 180000 m.", False, "another unit of the kind asked"),
        ("The answer is \\boxed{180 \\text{ miles}}.", False, "another unit, the same number"),
    ], dataset="gsm8k"),
]

REASONING: list[Case] = [
    *_cases("reasoning", APPLES, "5", [
        ("<think>3 + 2 = 5</think>\n\nThe answer is 5.", True, "the answer after the block"),
        ("<think>hmm</think>\n\nTom has 5 apples.", True, "an unmarked sentence after the block"),
        ("<think>hmm</think>\n\n**5**", True, "a bare value after the block"),
        ("<think>The answer is 5.</think>", False, "a value only inside the block"),
        ("<think>The answer is 5.</think>\n\nI'm not sure.", False, "inside only, nothing stated after"),
        ("<think>The answer is 5.", False, "a block never closed"),
        ("<think>\\boxed{5}", False, "a box in a block never closed"),
        ("  <think>\nSo \\boxed{5}\n", False, "a block never closed, after spaces"),
        ("The answer is 5.</think>", False, "the opening tag in the prompt, nothing after the close"),
        ("<think>x</think> <think>\\boxed{5}</think>", False, "a value only inside a second block"),
        ("<think>x</think>\\boxed{5}<think>or 7</think>", False, "a hedge inside a later block"),
        ("<think>x</think>\n\nTom has 5 apples or 7 apples.", False, "two values after the block"),
        ("<think>x</think>\n\n5 or 7", False, "two bare values after the block"),
    ], dataset="gsm8k"),
]
