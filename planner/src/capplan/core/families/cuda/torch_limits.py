"""Capability limits of torch, read from the text of ``torch/utils/cpp_extension.py``.

Pure: the caller hands in the source text (see ``capplan.adapters.torch_source``). The text is
parsed with :mod:`ast` and a tiny constant evaluator walks the statements; nothing is imported
or executed, and no regular expression ever looks at code.

Shapes seen in real releases (read from the macOS arm64 wheels of 1.13.1 .. 2.15.0 on PyPI):

- ``supported_arches = ['3.5', ..., '9.0a', ...]``: a list literal inside
  ``_get_cuda_arch_flags``; from 2.9 it is *not* sorted ('11.0' sits before '10.3').
- ``valid_arch_strings = supported_arches + [s + "+PTX" for s in supported_arches]``: the
  concatenation that makes ``+PTX`` acceptable.
- ``named_arches = collections.OrderedDict([('Kepler+Tesla', '3.7'), ...])``.
- ``CUDA_GCC_VERSIONS = {'11.0': (MINIMUM_GCC_VERSION, (10, 0)), ...}``: a plain assignment in
  1.13, an annotated one (``: VersionMap``) from 2.0, with names of module constants as bounds.

The evaluator also accepts the other spellings such a file can take (tuples, ``+=``,
``.append``/``.extend``, dict literals, ``dict(...)``, starred splices, ``if`` branches on the
CUDA version), so a future edit of the same data does not break the reader. Where a list grows
under a condition (``if cuda >= 12.8: supported_arches += [...]``) the result is the union in
first-seen order: those targets are accepted by *some* build of that release.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from capplan.core.families.cuda.capability import Capability
from capplan.errors import DataError, InvalidInputError

__all__ = [
    "CompilerBounds",
    "TorchLimits",
    "parse_torch_limits",
]

#: (minimum, maximum) compiler version as integer tuples, exactly as the file writes them. The
#: maximum is inclusive in 1.13 and exclusive from 2.0 on (the file's own comment says so).
CompilerBounds: TypeAlias = tuple[tuple[int, ...], tuple[int, ...]]

_PTX = "+PTX"
_SUPPORTED_NAMES = frozenset({"supported_arches"})
_NAMED_NAMES = frozenset({"named_arches"})
_VALID_NAMES = frozenset({"valid_arch_strings"})
_GCC_NAME = "CUDA_GCC_VERSIONS"
_CLANG_NAME = "CUDA_CLANG_VERSIONS"
# The function that has held the lists in every release from 1.13 to 2.15.
_PREFERRED_FUNCTION = "_get_cuda_arch_flags"


@dataclass(frozen=True)
class TorchLimits:
    """What one torch release's cpp_extension accepts in ``TORCH_CUDA_ARCH_LIST``."""

    package: str
    version: str | None
    supported: tuple[Capability, ...]
    named: dict[str, tuple[str, ...]] = field(hash=False)
    ptx_suffix: bool
    gcc: dict[str, CompilerBounds] = field(hash=False)
    clang: dict[str, CompilerBounds] = field(hash=False)

    @property
    def cuda_versions(self) -> tuple[str, ...]:
        """CUDA versions named by the compiler-bound tables, oldest first."""
        return tuple(sorted(set(self.gcc) | set(self.clang), key=_cuda_key))

    def to_json(self) -> dict[str, Any]:
        def bounds(table: Mapping[str, CompilerBounds]) -> dict[str, dict[str, str]]:
            return {
                cuda: {"min": _dotted(lo), "max": _dotted(hi)}
                for cuda, (lo, hi) in sorted(table.items(), key=lambda kv: _cuda_key(kv[0]))
            }

        return {
            "package": self.package,
            "version": self.version,
            "supported": [str(c) for c in self.supported],
            "named": {name: list(targets) for name, targets in self.named.items()},
            "ptx_suffix": self.ptx_suffix,
            "gcc": bounds(self.gcc),
            "clang": bounds(self.clang),
            "cuda_versions": list(self.cuda_versions),
        }

    def kb_entry(self, version: str, cuda: list[str], source: str) -> dict[str, Any]:
        """This release as one entry of kb/torch.json (the TorchRelease schema)."""
        return {
            "version": version,
            "supported": [str(c) for c in self.supported],
            "named": {name: list(targets) for name, targets in self.named.items()},
            "ptx_suffix": self.ptx_suffix,
            "cuda": cuda,
            "source": source,
        }


def parse_torch_limits(
    source: str, *, version: str | None = None, package: str = "torch"
) -> TorchLimits:
    """Read the limits from the text of ``torch/utils/cpp_extension.py``.

    Raises :class:`DataError` naming the release when the text is not Python or holds no
    recognisable ``supported_arches`` list, or when an entry is not a capability.
    """
    release = f"{package} {version}" if version else f"{package} (release unknown)"
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise DataError(
            f"{release}: cpp_extension.py is not valid Python (line {exc.lineno}: {exc.msg})",
            hint="pass the file torch/utils/cpp_extension.py itself",
        ) from None

    module_env = _Scope(None)
    _run(tree.body, module_env)

    scope = _find_scope(tree, module_env)
    raw_supported = scope.lookup_any(_SUPPORTED_NAMES) if scope is not None else None
    if not isinstance(raw_supported, list | tuple) or not raw_supported:
        raise DataError(
            f"{release}: no recognisable supported_arches list in cpp_extension.py",
            hint="expected `supported_arches = ['3.5', ...]` (a list of capability strings, "
            f"usually inside {_PREFERRED_FUNCTION}); the file may be from an unsupported release",
        )
    assert scope is not None
    supported = _capabilities(raw_supported, release)
    named = _named(scope.lookup_any(_NAMED_NAMES), release)
    ptx = _ptx_accepted(scope, named)
    return TorchLimits(
        package=package,
        version=version,
        supported=supported,
        named=named,
        ptx_suffix=ptx,
        gcc=_bounds(module_env.lookup(_GCC_NAME)),
        clang=_bounds(module_env.lookup(_CLANG_NAME)),
    )


# --------------------------------------------------------------------------------------------
# Interpretation of the few statement shapes that build the lists.


class _Unknown:
    """A value the evaluator cannot know statically (a call to os.environ, a loop variable)."""

    def __repr__(self) -> str:
        return "<unknown>"


_UNKNOWN = _Unknown()


class _Pairs(list[tuple[Any, Any]]):
    """An ordered mapping as the file spelled it (OrderedDict([...]) or a dict literal)."""


class _Scope:
    def __init__(self, parent: _Scope | None) -> None:
        self.parent = parent
        self.values: dict[str, Any] = {}
        self.has_ptx_literal = False

    def lookup(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        return self.parent.lookup(name) if self.parent is not None else _UNKNOWN

    def lookup_any(self, names: Iterable[str]) -> Any:
        for name in sorted(names):
            if name in self.values:
                return self.values[name]
        return None

    def child_copy(self) -> _Scope:
        copy = _Scope(self.parent)
        copy.values = dict(self.values)
        return copy


def _find_scope(tree: ast.Module, module_env: _Scope) -> _Scope | None:
    """The scope that defines ``supported_arches``: the preferred function, any function, or
    the module itself."""
    candidates: list[ast.FunctionDef | ast.AsyncFunctionDef] = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(_assigns(stmt, _SUPPORTED_NAMES) for stmt in ast.walk(node))
    ]
    candidates.sort(key=lambda f: (f.name != _PREFERRED_FUNCTION, f.lineno))
    for func in candidates:
        scope = _Scope(module_env)
        scope.has_ptx_literal = _mentions_ptx(func)
        _run(func.body, scope)
        if isinstance(scope.lookup_any(_SUPPORTED_NAMES), list | tuple):
            return scope
    if isinstance(module_env.lookup_any(_SUPPORTED_NAMES), list | tuple):
        module_env.has_ptx_literal = _mentions_ptx(tree)
        return module_env
    return None


def _assigns(node: ast.AST, names: frozenset[str]) -> bool:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    return any(isinstance(t, ast.Name) and t.id in names for t in targets)


def _mentions_ptx(node: ast.AST) -> bool:
    """Whether code (not a docstring) uses the literal "+PTX": the suffix is then handled."""
    docstrings = {
        id(body[0].value)
        for n in ast.walk(node)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module)
        and (body := n.body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    }
    return any(
        isinstance(n, ast.Constant) and n.value == _PTX and id(n) not in docstrings
        for n in ast.walk(node)
    )


def _run(body: list[ast.stmt], scope: _Scope) -> None:
    for stmt in body:
        _exec(stmt, scope)


def _exec(stmt: ast.stmt, scope: _Scope) -> None:
    if isinstance(stmt, ast.Assign):
        value = _eval(stmt.value, scope)
        for target in stmt.targets:
            _assign(target, value, scope)
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        _assign(stmt.target, _eval(stmt.value, scope), scope)
    elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        if isinstance(stmt.op, ast.Add):
            current = scope.lookup(stmt.target.id)
            scope.values[stmt.target.id] = _add(current, _eval(stmt.value, scope))
        else:
            scope.values[stmt.target.id] = _UNKNOWN
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        _mutating_call(stmt.value, scope)
    elif isinstance(stmt, ast.If):
        # Both branches may run in some build (the condition is usually the CUDA version):
        # keep the union, first-seen order.
        then_scope, else_scope = scope.child_copy(), scope.child_copy()
        _run(stmt.body, then_scope)
        _run(stmt.orelse, else_scope)
        for name in set(then_scope.values) | set(else_scope.values):
            scope.values[name] = _merge(
                then_scope.values.get(name, _UNKNOWN), else_scope.values.get(name, _UNKNOWN)
            )
    elif isinstance(stmt, ast.With | ast.AsyncWith):
        _run(stmt.body, scope)
    elif isinstance(stmt, ast.Try):
        _run(stmt.body, scope)
        _run(stmt.orelse, scope)
        _run(stmt.finalbody, scope)


def _assign(target: ast.expr, value: Any, scope: _Scope) -> None:
    if isinstance(target, ast.Name):
        scope.values[target.id] = value
    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
        # named_arches['Hopper'] = '9.0+PTX'
        mapping = scope.lookup(target.value.id)
        key = _eval(target.slice, scope)
        if isinstance(mapping, _Pairs) and isinstance(key, str):
            updated = _Pairs((k, v) for k, v in mapping if k != key)
            updated.append((key, value))
            scope.values[target.value.id] = updated
    elif isinstance(target, ast.Tuple | ast.List):
        items = value if isinstance(value, list | tuple) else None
        for i, element in enumerate(target.elts):
            element_value = items[i] if items is not None and i < len(items) else _UNKNOWN
            _assign(element, element_value, scope)


def _mutating_call(call: ast.Call, scope: _Scope) -> None:
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return
    name, method = func.value.id, func.attr
    current = scope.lookup(name)
    args = [_eval(a, scope) for a in call.args]
    if isinstance(current, _Pairs) and method == "update" and args:
        merged = _Pairs(current)
        merged = _merge_pairs(merged, _as_pairs(args[0]))
        scope.values[name] = merged
    elif isinstance(current, list) and not isinstance(current, _Pairs):
        if method == "append" and len(args) == 1:
            scope.values[name] = [*current, args[0]]
        elif method == "extend" and len(args) == 1 and isinstance(args[0], list | tuple):
            scope.values[name] = [*current, *args[0]]
        elif method == "insert" and len(args) == 2 and isinstance(args[0], int):
            updated = list(current)
            updated.insert(args[0], args[1])
            scope.values[name] = updated


def _eval(node: ast.expr, scope: _Scope) -> Any:
    handler = _EVALUATORS.get(type(node))
    return handler(node, scope) if handler is not None else _UNKNOWN


def _eval_constant(node: ast.expr, scope: _Scope) -> Any:
    assert isinstance(node, ast.Constant)
    return node.value


def _eval_sequence(node: ast.expr, scope: _Scope) -> Any:
    assert isinstance(node, ast.List | ast.Tuple | ast.Set)
    out: list[Any] = []
    for element in node.elts:
        if isinstance(element, ast.Starred):
            spliced = _eval(element.value, scope)
            if not isinstance(spliced, list | tuple):
                return _UNKNOWN
            out.extend(spliced)
        else:
            out.append(_eval(element, scope))
    # Lists stay lists (they carry arch strings); tuples stay tuples (they carry versions).
    return tuple(out) if isinstance(node, ast.Tuple) else out


def _eval_dict(node: ast.expr, scope: _Scope) -> Any:
    assert isinstance(node, ast.Dict)
    pairs = _Pairs()
    for key, value in zip(node.keys, node.values, strict=True):
        if key is None:  # {**other}
            pairs = _merge_pairs(pairs, _as_pairs(_eval(value, scope)))
        else:
            pairs = _merge_pairs(pairs, [(_eval(key, scope), _eval(value, scope))])
    return pairs


def _eval_name(node: ast.expr, scope: _Scope) -> Any:
    assert isinstance(node, ast.Name)
    return scope.lookup(node.id)


def _eval_binop(node: ast.expr, scope: _Scope) -> Any:
    assert isinstance(node, ast.BinOp)
    if isinstance(node.op, ast.Add):
        return _add(_eval(node.left, scope), _eval(node.right, scope))
    return _UNKNOWN


def _eval_ifexp(node: ast.expr, scope: _Scope) -> Any:
    assert isinstance(node, ast.IfExp)
    return _merge(_eval(node.body, scope), _eval(node.orelse, scope))


def _eval_call(node: ast.expr, scope: _Scope) -> Any:
    assert isinstance(node, ast.Call)
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    args = [_eval(a, scope) for a in node.args]
    if name in {"OrderedDict", "dict"}:
        pairs = _as_pairs(args[0]) if args else _Pairs()
        keywords = [(kw.arg, _eval(kw.value, scope)) for kw in node.keywords if kw.arg]
        return _merge_pairs(pairs, keywords)
    if name in {"list", "tuple"} and len(args) == 1 and isinstance(args[0], list | tuple):
        return list(args[0]) if name == "list" else tuple(args[0])
    if (
        name == "split"
        and isinstance(func, ast.Attribute)
        and isinstance(base := _eval(func.value, scope), str)
    ):
        sep = args[0] if args and isinstance(args[0], str) else None
        return base.split(sep)
    return _UNKNOWN


def _eval_listcomp(node: ast.expr, scope: _Scope) -> Any:
    """``[s + "+PTX" for s in supported_arches]``: one generator over a known list."""
    assert isinstance(node, ast.ListComp)
    if len(node.generators) != 1:
        return _UNKNOWN
    gen = node.generators[0]
    items = _eval(gen.iter, scope)
    if not isinstance(gen.target, ast.Name) or not isinstance(items, list | tuple):
        return _UNKNOWN
    out = []
    for item in items:
        inner = _Scope(scope)
        inner.values[gen.target.id] = item
        if all(_eval(cond, inner) is True for cond in gen.ifs):
            out.append(_eval(node.elt, inner))
    return out


def _eval_joinedstr(node: ast.expr, scope: _Scope) -> Any:
    """``f"{s}+PTX"``: only plain substitutions of known strings."""
    assert isinstance(node, ast.JoinedStr)
    parts: list[str] = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value)
        elif isinstance(value, ast.FormattedValue) and value.format_spec is None:
            inner = _eval(value.value, scope)
            if not isinstance(inner, str):
                return _UNKNOWN
            parts.append(inner)
        else:
            return _UNKNOWN
    return "".join(parts)


_EVALUATORS: dict[type[ast.expr], Callable[[ast.expr, _Scope], Any]] = {
    ast.Constant: _eval_constant,
    ast.List: _eval_sequence,
    ast.Tuple: _eval_sequence,
    ast.Set: _eval_sequence,
    ast.Dict: _eval_dict,
    ast.Name: _eval_name,
    ast.BinOp: _eval_binop,
    ast.IfExp: _eval_ifexp,
    ast.Call: _eval_call,
    ast.ListComp: _eval_listcomp,
    ast.JoinedStr: _eval_joinedstr,
}


def _add(left: Any, right: Any) -> Any:
    if isinstance(left, _Pairs) or isinstance(right, _Pairs):
        return _UNKNOWN
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return [*left, *right] if isinstance(left, list) else (*left, *right)
    if isinstance(left, str) and isinstance(right, str):
        return left + right
    return _UNKNOWN


def _merge(first: Any, second: Any) -> Any:
    if first is _UNKNOWN:
        return second
    if second is _UNKNOWN or first == second:
        return first
    if isinstance(first, _Pairs) and isinstance(second, _Pairs):
        return _merge_pairs(first, second)
    if isinstance(first, list) and isinstance(second, list):
        return [*first, *(x for x in second if x not in first)]
    return _UNKNOWN


def _as_pairs(value: Any) -> _Pairs:
    if isinstance(value, _Pairs):
        return value
    if isinstance(value, list | tuple) and all(
        isinstance(p, tuple | list) and len(p) == 2 for p in value
    ):
        return _Pairs((p[0], p[1]) for p in value)
    return _Pairs()


def _merge_pairs(base: Iterable[tuple[Any, Any]], extra: Iterable[tuple[Any, Any]]) -> _Pairs:
    out = _Pairs(base)
    for key, value in extra:
        index = next((i for i, (k, _) in enumerate(out) if k == key), None)
        if index is None:
            out.append((key, value))
        else:
            out[index] = (key, value)
    return out


# --------------------------------------------------------------------------------------------
# From evaluated values to typed results.


def _capabilities(raw: list[Any] | tuple[Any, ...], release: str) -> tuple[Capability, ...]:
    out: list[Capability] = []
    for item in raw:
        if not isinstance(item, str):
            raise DataError(
                f"{release}: supported_arches holds a value that is not a string: {item!r}",
                hint="expected strings such as '8.6' or '9.0a'",
            )
        try:
            capability = Capability.parse(item)
        except InvalidInputError:
            raise DataError(
                f"{release}: supported_arches holds {item!r}, which is not a CUDA capability",
                hint="expected strings such as '8.6' or '9.0a'",
            ) from None
        if capability not in out:
            out.append(capability)
    return tuple(out)


def _named(raw: Any, release: str) -> dict[str, tuple[str, ...]]:
    if raw is None:
        return {}
    pairs = _as_pairs(raw)
    out: dict[str, tuple[str, ...]] = {}
    for name, value in pairs:
        if not isinstance(name, str):
            continue
        parts: list[Any]
        if isinstance(value, str):
            parts = value.replace(" ", ";").split(";")
        elif isinstance(value, list | tuple):
            parts = list(value)
        else:
            continue
        out[name] = tuple(_target(p, release, name) for p in parts if p != "")
    return out


def _target(text: Any, release: str, name: str) -> str:
    if not isinstance(text, str):
        raise DataError(f"{release}: named arch {name!r} holds a non-string target {text!r}")
    base, ptx = (text[: -len(_PTX)], True) if text.endswith(_PTX) else (text, False)
    try:
        capability = Capability.parse(base.strip())
    except InvalidInputError:
        raise DataError(
            f"{release}: named arch {name!r} holds {text!r}, which is not a CUDA target",
            hint="expected targets such as '8.6' or '9.0+PTX'",
        ) from None
    return f"{capability}{_PTX}" if ptx else str(capability)


def _ptx_accepted(scope: _Scope, named: Mapping[str, tuple[str, ...]]) -> bool:
    valid = scope.lookup_any(_VALID_NAMES)
    if isinstance(valid, list) and all(isinstance(v, str) for v in valid):
        return any(v.endswith(_PTX) for v in valid)
    return scope.has_ptx_literal or any(t.endswith(_PTX) for ts in named.values() for t in ts)


def _bounds(raw: Any) -> dict[str, CompilerBounds]:
    if not isinstance(raw, _Pairs):
        return {}
    out: dict[str, CompilerBounds] = {}
    for cuda, value in raw:
        if (
            isinstance(cuda, str)
            and isinstance(value, tuple)
            and len(value) == 2
            and all(_is_version(v) for v in value)
        ):
            out[cuda] = (tuple(value[0]), tuple(value[1]))
    return out


def _is_version(value: Any) -> bool:
    return (
        isinstance(value, tuple)
        and len(value) > 0
        and all(isinstance(x, int) and not isinstance(x, bool) for x in value)
    )


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(x) for x in version)


def _cuda_key(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split("."))
    except ValueError:
        return (1 << 30,)
