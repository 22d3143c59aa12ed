"""A user's Python function named in the config (`module:function` or `path/to/file.py:function`), and the
config's checks of it and of a template file.

    fn = load_function("examples/countdown/countdown.py:equation_reward")  # a file, relative to the working dir
    fn = load_function("grpo_train.rewards:overlong_penalty")              # a module on the Python path
    check_call(fn, 4, {"max_len": 256})   # the call fn(a, b, c, d, max_len=256) binds, else UserCodeError

Used for `reward.functions` (grpo_train.rewards) and `data.map_fn` (grpo_train.data). The config check
(grpo_train.config.validate) loads each one once, so that a missing module, a typo in a name or a wrong
signature is an error naming the key before any model loads; the verifier workers load them again by the
same text. A file is imported under a name derived from its resolved path (once per process), so two
files called `reward.py` in different folders do not collide.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


class UserCodeError(ValueError):
    """A `module:function` text that does not lead to a usable function; the message says why."""


def split_spec(spec: str) -> tuple[str, str]:
    """"pkg.mod:fn" -> ("pkg.mod", "fn"); the last colon separates, so a path may hold colons."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where.strip() or not name.strip():
        raise UserCodeError(f"{spec!r} is not of the form module:function or path/to/file.py:function")
    return where.strip(), name.strip()


def is_file_spec(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def _import_file(path_text: str) -> Any:
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise UserCodeError(f"file {path_text} not found (relative paths start at the working directory, "
                            f"{Path.cwd()})")
    module_name = f"grpo_user_{path.stem}_{hashlib.blake2b(str(path).encode(), digest_size=4).hexdigest()}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UserCodeError(f"{path_text} cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # before exec: dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise UserCodeError(f"importing {path_text} failed: {type(err).__name__}: {err}") from err
    return module


def _import_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        raise UserCodeError(f"module {name!r} not found ({err}); give a module on the Python path or a file path "
                            "such as path/to/file.py:function") from None
    except Exception as err:
        raise UserCodeError(f"importing module {name!r} failed: {type(err).__name__}: {err}") from err


def load_function(spec: str) -> Callable[..., Any]:
    """The callable that `spec` names; UserCodeError (module or file not found, no such name, not callable)."""
    where, name = split_spec(spec)
    module = _import_file(where) if is_file_spec(where) else _import_module(where)
    if not hasattr(module, name):
        public = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        close = difflib.get_close_matches(name, public, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f" (it has: {', '.join(public[:12]) or 'none'})"
        raise UserCodeError(f"{where} has no function {name!r}{hint}")
    fn = getattr(module, name)
    if not callable(fn):
        raise UserCodeError(f"{where}:{name} is not a function (its type is {type(fn).__name__})")
    return fn


def check_call(fn: Callable[..., Any], positional: int, kwargs: dict[str, Any]) -> None:
    """UserCodeError unless `fn` accepts `positional` positional arguments plus `kwargs` by name."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin or C function without a signature: its first call tells
    name = getattr(fn, "__name__", fn)
    missing = [p.name for p in signature.parameters.values()
               if p.kind is p.KEYWORD_ONLY and p.default is p.empty and p.name not in kwargs]
    if missing:
        raise UserCodeError(f"needs {', '.join(missing)} in the entry's kwargs (its signature: {name}{signature})")
    try:
        signature.bind(*range(positional), **kwargs)
    except TypeError as err:
        raise UserCodeError(f"its signature {name}{signature} does not accept {positional} positional arguments"
                            + (f" and the keyword arguments {sorted(kwargs)}" if kwargs else "")
                            + f" ({err})") from None
    # A function may check its kwargs' values too (the built-ins do): `fn.check_kwargs(**kwargs)` raises
    # ValueError for a value it cannot use, so that the mistake is a config error, not an error on every call.
    if callable(check := getattr(fn, "check_kwargs", None)):
        try:
            check(**kwargs)
        except (TypeError, ValueError) as err:
            raise UserCodeError(f"kwargs: {err}") from None


def raised_at(fn: Callable[..., Any], exc: BaseException) -> str:
    """Where `fn`'s call raised `exc`, as file:line: the innermost frame of the traceback in fn's own file (fn
    itself or a helper beside it; for an error inside a library, the line that called it), else fn's definition
    (the error came from checking what it returned). The path is relative to the working directory under it."""
    code = getattr(inspect.unwrap(fn), "__code__", None)  # None: a builtin, or an object with __call__
    if code is None:
        return "?"
    file = code.co_filename
    lines = [line for frame, line in traceback.walk_tb(exc.__traceback__) if frame.f_code.co_filename == file]
    line = lines[-1] if lines else code.co_firstlineno
    path = Path(file)
    with contextlib.suppress(ValueError):
        path = path.relative_to(Path.cwd())
    return f"{path}:{line}"


# ----------------------------------------------------------------------------------------------------
# Checks for the config (grpo_train.config.validate): what is wrong, as message texts; an empty list if nothing


def function_problems(spec: str, positional: int, kwargs: dict[str, Any]) -> list[str]:
    """Why `spec` cannot be called with `positional` arguments and `kwargs` (it is imported to find out)."""
    try:
        check_call(load_function(spec), positional, kwargs)
    except UserCodeError as err:
        return [f"{spec}: {err}"]
    return []


def template_problems(path_text: str, template: str) -> list[str]:
    """Why `path_text` is not a usable data.template_file with data.template `template` (Jinja syntax included)."""
    import jinja2  # comes with transformers
    import yaml

    path = Path(path_text)
    if not path.is_file():
        return [f"{path_text} not found"]
    if template == "fewshot":
        return ["replaces the built-in prompt formats' question and instruction; write any worked examples into "
                "it and use data.template chat or raw"]
    try:
        if path.suffix in (".yaml", ".yml"):
            messages = yaml.safe_load(path.read_text())
            if not (isinstance(messages, list) and messages and all(
                    isinstance(m, dict) and set(m) == {"role", "content"} and isinstance(m["content"], str)
                    for m in messages)):
                return [f"{path_text}: a .yaml template must be a list of {{role, content}} messages"]
            if template == "raw":
                return [f"{path_text}: a list of chat messages needs data.template chat"]
            for message in messages:
                jinja2.Environment().parse(message["content"])
        else:
            jinja2.Environment().parse(path.read_text())
    except yaml.YAMLError as err:
        quoting = ' (a content that starts with {{ must be quoted: content: "{{ question }}")'
        hint = quoting if "{{" in path.read_text() else ""
        return [f"{path_text}: malformed YAML{hint}: {err}"]
    except jinja2.TemplateSyntaxError as err:
        return [f"{path_text}: line {err.lineno}: Jinja syntax error: {err.message}"]
    return []
