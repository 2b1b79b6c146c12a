"""The constrained-decoding acceptance suite: constraints, prompts that suit them, and validators.

Every case holds the constraint the engine enforces and an independent
check of the output: `jsonschema` for JSON Schema, `json.loads` for plain
JSON, `re.fullmatch` for regexes, the `lark` package's Earley parser (on
an equivalent grammar written in lark's own syntax) for Lark grammars,
and membership for `choice`. The constraints are designed to terminate:
objects close (`additionalProperties: false`), strings have `maxLength`,
arrays `maxItems`, regexes and grammars use bounded repetition.

llguidance emits an object's properties in the schema's order (a valid
subset of what the schema allows), so the `good` samples list them so.

Regexes use `[0-9]`, never `\\d`: llguidance compiles Rust regexes, where
`\\d` is any Unicode digit, and Python's `re` would disagree.

Imported by tests/test_constraints.py and tests/test_constraints_server.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

import jsonschema
import lark

from tritongen.engine.options import GenerateConstraint

MAX_TOKENS = 160  # room enough for every case to finish on its own
TEMPERATURES_AND_SEEDS = [(0.0, None), (0.8, 1), (0.8, 2), (0.8, 3)]


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # json_schema, json, regex, lark, choice
    prompt: str  # the user message
    schema: Optional[dict] = None  # json_schema
    pattern: str = ""  # regex
    grammar: str = ""  # lark: llguidance's Lark dialect, what the engine enforces
    check_grammar: str = ""  # lark: the same language in the lark package's syntax, for validation
    choices: tuple[str, ...] = ()
    # Outputs the constraint must accept / reject; a test checks the validator agrees with llguidance on them.
    good: tuple[str, ...] = ()
    bad: tuple[str, ...] = ()

    def constraint(self) -> GenerateConstraint:
        if self.kind == "json_schema":
            return GenerateConstraint("json_schema", json.dumps(self.schema))
        if self.kind == "json":
            return GenerateConstraint("json")
        if self.kind == "regex":
            return GenerateConstraint("regex", self.pattern)
        if self.kind == "lark":
            return GenerateConstraint("lark", self.grammar)
        return GenerateConstraint.choice(list(self.choices))

    def guided_decoding(self) -> dict:
        """The vLLM-style `sampling_parameters.guided_decoding` object for this case."""
        if self.kind == "json_schema":
            return {"json": self.schema}
        if self.kind == "json":
            return {"json_object": True}
        if self.kind == "regex":
            return {"regex": self.pattern}
        if self.kind == "lark":
            return {"grammar": self.grammar}
        return {"choice": list(self.choices)}

    def guide_tensors(self) -> tuple[str, str] | None:
        """(guided_decoding_guide_type, guided_decoding_guide), or None where only sampling_parameters can say it."""
        if self.kind == "json_schema":
            return "json_schema", json.dumps(self.schema)
        if self.kind == "json":
            return "json", ""
        if self.kind == "regex":
            return "regex", self.pattern
        if self.kind == "lark":
            return "lark", self.grammar
        return None

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.prompt}]

    @cached_property
    def _parser(self) -> lark.Lark:
        return lark.Lark(self.check_grammar, parser="earley", start="start")

    def validate(self, text: str) -> Optional[str]:
        """None when `text` is a valid output; otherwise what is wrong with it."""
        try:
            if self.kind in ("json_schema", "json"):
                value = json.loads(text)
                if self.kind == "json_schema":
                    jsonschema.validate(value, self.schema, cls=jsonschema.Draft202012Validator)
            elif self.kind == "regex":
                if re.fullmatch(self.pattern, text) is None:
                    return f"does not fullmatch {self.pattern!r}"
            elif self.kind == "lark":
                self._parser.parse(text)
            elif text not in self.choices:
                return f"not one of {list(self.choices)}"
        except (ValueError, jsonschema.ValidationError, lark.exceptions.LarkError) as exc:
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return None


def _obj(properties: dict, required: list[str] | None = None) -> dict:
    """A closed object: no properties beyond those listed."""
    return {"type": "object", "properties": properties, "required": list(properties) if required is None else required,
            "additionalProperties": False}


def _str(max_length: int = 40, **kw) -> dict:
    return {"type": "string", "maxLength": max_length, **kw}


def _int(lo: int, hi: int) -> dict:
    return {"type": "integer", "minimum": lo, "maximum": hi}


def _num(lo: float, hi: float) -> dict:
    return {"type": "number", "minimum": lo, "maximum": hi}


def _enum(*values: str) -> dict:
    return {"type": "string", "enum": list(values)}


def _array(items: dict, max_items: int, min_items: int = 0) -> dict:
    return {"type": "array", "items": items, "minItems": min_items, "maxItems": max_items}


_DATE = "(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_ORDER = '{{"order_id": 7, "customer": {{"name": "Bo"{vip}}}, "items": [{items}]}}'

JSON_SCHEMA_CASES = [
    Case("person", "json_schema",
         "Describe a person named Alice who is 30 years old as a JSON object with name and age.",
         schema=_obj({"name": _str(30), "age": _int(0, 120)})),
    Case("address", "json_schema",
         "Give a JSON object for a customer with a name and a postal address (street, city, 5-digit zip code).",
         schema=_obj({"name": _str(30), "address": _obj({"street": _str(40), "city": _str(30),
                                                         "zip": _str(5, pattern="^[0-9]{5}$")})})),
    Case("product", "json_schema",
         "Describe a product sold in an online shop as JSON: name, category and price in dollars.",
         schema=_obj({"name": _str(40), "category": _enum("book", "electronics", "clothing", "food", "toys"),
                      "price": _num(0, 10000)})),
    Case("todo_list", "json_schema", "List up to four things to do this weekend as a JSON array of short strings.",
         schema=_array(_str(24), 4, 1)),
    Case("weather", "json_schema",
         "Report the weather in Paris as JSON with city, temperature in Celsius and conditions.",
         schema=_obj({"city": _str(30), "temperature_c": _num(-50, 60),
                      "conditions": _enum("sunny", "cloudy", "rainy", "snowy", "windy")})),
    Case("book", "json_schema", "Describe a famous novel as JSON: title, author, publication year and genres.",
         schema=_obj({"title": _str(60), "author": _str(40), "year": _int(1400, 2025),
                      "genres": _array(_enum("fiction", "mystery", "romance", "science fiction", "fantasy",
                                             "history", "adventure"), 3, 1)})),
    Case("meeting", "json_schema",
         "Plan a team meeting as JSON: a title, the date (YYYY-MM-DD) and up to three attendees with name and email.",
         schema=_obj({"title": _str(40), "date": _str(10, pattern=f"^{_DATE}$"),
                      "attendees": _array(_obj({"name": _str(30), "email": _str(40)}), 3)})),
    Case("review", "json_schema", "Rate the movie Titanic from 1 to 5 stars and add a short comment, as JSON.",
         schema=_obj({"stars": _int(1, 5), "comment": _str(100)})),
    Case("store_hours", "json_schema",
         "Is the bakery open on Sundays? Answer as JSON with open (true/false) and a reason.",
         schema=_obj({"open": {"type": "boolean"}, "reason": _str(80)})),
    Case("rgb", "json_schema", "Give the RGB values of the color orange as JSON with r, g and b.",
         schema=_obj({"r": _int(0, 255), "g": _int(0, 255), "b": _int(0, 255)})),
    Case("order", "json_schema",
         "Write a JSON order: an order id, the customer (name and whether they are a VIP) and up to three items, "
         "each with a SKU like AB-1234 and a quantity.",
         schema=_obj({"order_id": _int(1, 999999), "customer": _obj({"name": _str(30), "vip": {"type": "boolean"}}),
                      "items": _array(_obj({"sku": _str(7, pattern="^[A-Z]{2}-[0-9]{4}$"), "quantity": _int(1, 10)}),
                                      3, 1)}),
         good=(_ORDER.format(vip=', "vip": false', items='{"sku": "AB-1234", "quantity": 2}'),),
         bad=(_ORDER.format(vip=', "vip": false', items=""),
              _ORDER.format(vip=', "vip": false', items='{"sku": "AB-12345", "quantity": 2}'),
              _ORDER.format(vip=', "vip": false', items='{"sku": "AB-1234", "quantity": 11}'),
              _ORDER.format(vip="", items='{"sku": "AB-1234", "quantity": 2}'),
              _ORDER.format(vip=', "vip": false, "x": 1', items='{"sku": "AB-1234", "quantity": 2}'))),
    Case("recipe", "json_schema",
         "Give a simple pancake recipe as JSON: name, servings, up to six ingredients and a difficulty.",
         schema=_obj({"name": _str(40), "servings": _int(1, 12), "ingredients": _array(_str(30), 6, 1),
                      "difficulty": _enum("easy", "medium", "hard")})),
    Case("location", "json_schema", "Give the latitude and longitude of Tokyo as JSON.",
         schema=_obj({"city": _str(30), "lat": _num(-90, 90), "lon": _num(-180, 180)}),
         good=('{"city": "Tokyo", "lat": 35.68, "lon": 139.69}', '{"city": "", "lat": -90, "lon": 180.0}'),
         bad=('{"city": "Tokyo", "lat": 95, "lon": 139.69}', '{"city": "Tokyo", "lat": 35.68, "lon": -180.5}',
              '{"city": "Tokyo", "lat": 35.68}')),
    Case("sentiment", "json_schema",
         "Classify the sentiment of 'I loved this phone, the battery lasts forever!' as JSON with a label and a "
         "confidence between 0 and 1.",
         schema=_obj({"label": _enum("positive", "negative", "neutral"), "confidence": _num(0, 1)})),
    Case("profile", "json_schema",
         "Create a user profile as JSON with a lowercase username and, optionally, a short bio and an age.",
         schema=_obj({"username": _str(16, pattern="^[a-z][a-z0-9_]{2,15}$"), "bio": _str(80), "age": _int(13, 120)},
                     required=["username"]),
         good=('{"username": "ada_99"}', '{"username": "ada", "bio": "Mathematician.", "age": 36}'),
         bad=('{"username": "Ada"}', '{"bio": "x"}', '{"username": "ada", "age": 12}',
              '{"username": "ada", "bio": "' + "x" * 81 + '"}')),
]

REGEX_CASES = [
    Case("date", "regex",
         "On what date did the Apollo 11 mission land on the Moon? Answer with the date as YYYY-MM-DD.",
         pattern=_DATE, good=("1969-07-20", "2024-12-31"), bad=("1969-7-20", "2024-13-01", "1969-07-20 ")),
    Case("time", "regex", "What time do most offices open in the morning? Answer in 24-hour HH:MM format.",
         pattern="([01][0-9]|2[0-3]):[0-5][0-9]"),
    Case("email", "regex", "Make up an email address for a support team at a company called Acme.",
         pattern="[a-z0-9._]{1,20}@[a-z0-9]{1,15}\\.(com|org|net|edu)",
         good=("support@acme.com", "help.desk@acme.org"), bad=("support@acme", "Support@acme.com", "a@b.io")),
    Case("identifier", "regex", "Suggest a Python variable name for the number of users in a database.",
         pattern="[A-Za-z_][A-Za-z0-9_]{0,30}", good=("num_users", "_x", "N"), bad=("2users", "num users", "")),
    Case("function_name", "regex", "Suggest a snake_case name for a function that computes the average of a list.",
         pattern="[a-z][a-z0-9]{0,10}(_[a-z0-9]{1,10}){0,4}"),
    Case("phone", "regex", "Write a US phone number for a pizza shop in the format (555) 123-4567.",
         pattern="\\([0-9]{3}\\) [0-9]{3}-[0-9]{4}"),
    Case("semver", "regex",
         "What is a typical version number for a first stable software release? Use MAJOR.MINOR.PATCH.",
         pattern="(0|[1-9][0-9]{0,2})\\.(0|[1-9][0-9]{0,2})\\.(0|[1-9][0-9]{0,2})"),
    Case("hex_color", "regex", "Give the hex code of a dark blue color, like #1a2b3c.", pattern="#[0-9a-f]{6}"),
    Case("ipv4", "regex", "Give an example of a private IPv4 address used in home networks.",
         pattern=f"{_OCTET}(\\.{_OCTET}){{3}}", good=("192.168.1.1", "10.0.0.255"),
         bad=("256.1.1.1", "192.168.1", "01.2.3.4")),
    Case("sentence", "regex", "Describe the ocean in one short sentence.",
         pattern="[A-Z][a-z]{0,12}( [a-z]{1,12}){0,12}\\."),
]

_ARITH = """
start: expr
expr: term (ADD term){0,4}
term: factor (MUL factor){0,3}
factor: NUMBER | "(" inner ")"
inner: NUMBER (ADD NUMBER){1,3}
ADD: "+" | "-"
MUL: "*" | "/"
NUMBER: /[0-9]{1,5}/
"""
_ARITH_CHECK = """
start: expr
expr: term (ADD term) ~ 0..4
term: factor (MUL factor) ~ 0..3
factor: NUMBER | "(" inner ")"
inner: NUMBER (ADD NUMBER) ~ 1..3
ADD: "+" | "-"
MUL: "*" | "/"
NUMBER: /[0-9]{1,5}/
"""

_ROBOT = """
start: command ("\\n" command){0,5}
command: move | turn | pick | say
move: "move " DIRECTION " " STEPS
turn: "turn " SIDE
pick: "pick up " OBJECT
say: "say \\"" WORDS "\\""
DIRECTION: "forward" | "back"
SIDE: "left" | "right"
OBJECT: "box" | "ball" | "cup" | "key"
STEPS: /[1-9][0-9]?/
WORDS: /[A-Za-z ,!]{1,30}/
"""
_ROBOT_CHECK = """
start: command ("\\n" command) ~ 0..5
command: move | turn | pick | say
move: "move " DIRECTION " " STEPS
turn: "turn " SIDE
pick: "pick up " OBJECT
say: "say \\"" WORDS "\\""
DIRECTION: "forward" | "back"
SIDE: "left" | "right"
OBJECT: "box" | "ball" | "cup" | "key"
STEPS: /[1-9][0-9]?/
WORDS: /[A-Za-z ,!]{1,30}/
"""

_SQL = """
start: "SELECT " columns " FROM " NAME where?
columns: "*" | NAME (", " NAME){0,3}
where: " WHERE " NAME " " OP " " value
value: NUMBER | "'" TEXT "'"
OP: "=" | "<" | ">"
NAME: /[a-z][a-z_]{0,15}/
NUMBER: /[0-9]{1,6}/
TEXT: /[A-Za-z ]{1,20}/
"""
_SQL_CHECK = """
start: "SELECT " columns " FROM " NAME where?
columns: "*" | NAME (", " NAME) ~ 0..3
where: " WHERE " NAME " " OP " " value
value: NUMBER | "'" TEXT "'"
OP: "=" | "<" | ">"
NAME: /[a-z][a-z_]{0,15}/
NUMBER: /[0-9]{1,6}/
TEXT: /[A-Za-z ]{1,20}/
"""

_CONFIG = """
start: entry ("\\n" entry){0,5}
entry: KEY "=" value
value: NUMBER | BOOL | QUOTED
KEY: /[a-z][a-z_]{0,19}/
NUMBER: /[0-9]{1,5}/
BOOL: "true" | "false"
QUOTED: /"[a-z0-9 ._]{0,24}"/
"""
_CONFIG_CHECK = """
start: entry ("\\n" entry) ~ 0..5
entry: KEY "=" value
value: NUMBER | BOOL | QUOTED
KEY: /[a-z][a-z_]{0,19}/
NUMBER: /[0-9]{1,5}/
BOOL: "true" | "false"
QUOTED: /"[a-z0-9 ._]{0,24}"/
"""

_LOGIC = """
start: disj
disj: conj (" or " conj){0,3}
conj: atom (" and " atom){0,3}
atom: VAR | "not " VAR | "true" | "false"
VAR: /[a-z]/
"""
_LOGIC_CHECK = """
start: disj
disj: conj (" or " conj) ~ 0..3
conj: atom (" and " atom) ~ 0..3
atom: VAR | "not " VAR | "true" | "false"
VAR: /[a-z]/
"""

LARK_CASES = [
    Case("arithmetic", "lark", "Write an arithmetic expression that equals 42, using only integers and + - * / ( ).",
         grammar=_ARITH, check_grammar=_ARITH_CHECK,
         good=("42", "6*7", "(40+2)", "100/5-58+0", "2*(20+1)", "1+2+3+4+5"),
         bad=("", "1+", "((1+2))", "1+2+3+4+5+6", "4 2", "(7)", "123456")),
    Case("robot_commands", "lark",
         "Write commands for a robot, one per line, to fetch a ball: move forward N, move back N, turn left, "
         "turn right, pick up OBJECT, say \"TEXT\".",
         grammar=_ROBOT, check_grammar=_ROBOT_CHECK,
         good=("turn left", 'move forward 3\nturn left\npick up ball\nsay "Got it!"'),
         bad=("move forward 0", "turn up", "move forward 3\n", 'say ""', "jump", "turn left\n" * 6 + "turn left")),
    Case("sql_select", "lark", "Write a SQL query that selects the names of users older than 30 from the users table.",
         grammar=_SQL, check_grammar=_SQL_CHECK,
         good=("SELECT * FROM users", "SELECT name FROM users WHERE age > 30",
               "SELECT name, email FROM users WHERE city = 'Paris'"),
         bad=("SELECT FROM users", "select * from users", "SELECT * FROM users WHERE age >= 30",
              "SELECT a, b, c, d, e FROM t")),
    Case("config_file", "lark", "Write a small config file for a web server with key=value lines: port, debug, root.",
         grammar=_CONFIG, check_grammar=_CONFIG_CHECK,
         good=("port=8080", 'port=8080\ndebug=true\nroot="public html"'),
         bad=("port = 8080", "Port=1", "debug=yes", 'root="/var"', "port=8080\n")),
    Case("boolean_logic", "lark", "Write a boolean expression over variables a, b and c using and, or, not.",
         grammar=_LOGIC, check_grammar=_LOGIC_CHECK,
         good=("a", "true", "a and not b or c", "not a or not b or not c or true", "t or f"),
         bad=("a and", "not true", "a or b or c or d or e", "ab", "(a)")),
]

CHOICE_CASES = [
    Case("yes_no", "choice", "Is water wet? Answer yes or no.", choices=("yes", "no"),
         good=("yes", "no"), bad=("y", "yes no", "Yes")),
    Case("primary_color", "choice", "Which color is the sky on a clear day: red, green or blue?",
         choices=("red", "green", "blue")),
    Case("sentiment_label", "choice", "What is the sentiment of 'This is the worst pizza I have ever had.'?",
         choices=("positive", "negative", "neutral")),
]

JSON_CASES = [
    Case("any_json_cat", "json", "Describe a cat as a small JSON object with its name and color.",
         good=('{"name": "Tom", "color": "grey"}', "[1, 2]", "null", '"x"'), bad=("{name: 1}", "[1, 2", "")),
    Case("any_json_list", "json", "Give the first five prime numbers as a JSON array."),
]

SUITE: list[Case] = JSON_SCHEMA_CASES + REGEX_CASES + LARK_CASES + CHOICE_CASES + JSON_CASES


def suite_runs(cases: list[Case] = SUITE) -> list[tuple[Case, float, Optional[int]]]:
    """Every (case, temperature, seed); the kinds with the longest outputs first, so no long run starts last."""
    order = {"json": 0, "json_schema": 1, "lark": 2, "regex": 3, "choice": 4}
    return [(c, t, s) for c in sorted(cases, key=lambda c: order[c.kind]) for t, s in TEMPERATURES_AND_SEEDS]


@dataclass
class Outcome:
    case: str
    temperature: float
    seed: Optional[int]
    finish_reason: str
    text: str
    error: Optional[str] = None  # why the output is invalid (None: valid or cut)
    num_tokens: int = 0

    @property
    def natural(self) -> bool:
        """Finished on its own: anything but a max_tokens cut (and not a failed request)."""
        return self.finish_reason not in ("max_tokens", "", "error")

    @property
    def valid(self) -> bool:
        """Only a natural finish can be valid; a cut output never counts."""
        return self.natural and self.error is None


def judge(case: Case, temperature: float, seed: Optional[int], finish_reason: str, text: str,
          num_tokens: int = 0) -> Outcome:
    outcome = Outcome(case.name, temperature, seed, finish_reason, text, num_tokens=num_tokens)
    if outcome.natural:
        outcome.error = case.validate(text)
    return outcome


@dataclass
class Figures:
    runs: int = 0
    natural: int = 0
    valid: int = 0
    invalid: list[Outcome] = field(default_factory=list)
    cut: list[Outcome] = field(default_factory=list)

    @property
    def natural_pct(self) -> float:
        return 100.0 * self.natural / max(self.runs, 1)

    @property
    def valid_pct(self) -> float:
        """Valid outputs among natural finishes (the acceptance: all of them)."""
        return 100.0 * self.valid / max(self.natural, 1)

    def line(self) -> str:
        return (f"runs={self.runs} natural finishes={self.natural} ({self.natural_pct:.1f}%) "
                f"valid={self.valid}/{self.natural} natural ({self.valid_pct:.1f}%) cut by max_tokens={len(self.cut)}")


def summarize(outcomes: list[Outcome]) -> Figures:
    f = Figures(runs=len(outcomes))
    for o in outcomes:
        f.natural += o.natural
        f.valid += o.valid
        if o.natural and not o.valid:
            f.invalid.append(o)
        if not o.natural:
            f.cut.append(o)
    return f


def report(outcomes: list[Outcome], title: str) -> Figures:
    """Print the figures, per kind and overall, and every failure; return the overall figures."""
    kinds = {c.name: c.kind for c in SUITE}
    print(f"\n{title}")
    for kind in ("json_schema", "regex", "lark", "choice", "json"):
        part = [o for o in outcomes if kinds.get(o.case) == kind]
        if part:
            print(f"  {kind:12s} {summarize(part).line()}")
    figures = summarize(outcomes)
    print(f"  {'all':12s} {figures.line()}")
    for o in figures.invalid:
        print(f"  INVALID {o.case} t={o.temperature} seed={o.seed} {o.finish_reason}: {o.error} <- {o.text!r}")
    for o in figures.cut:
        print(f"  CUT {o.case} t={o.temperature} seed={o.seed} {o.finish_reason} ({o.num_tokens} tokens): "
              f"{o.text[:80]!r}")
    return figures
