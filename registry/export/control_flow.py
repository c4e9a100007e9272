"""Rewriting a method's data-dependent ``if`` statements into ``torch.cond``.

``torch.export`` cannot branch on a tensor's value (``if not torch.isfinite(x).all()``
raises ``GuardOnDataDependentSymNode``). Each ``if`` of the method is rewritten, with
``ast``, so that at run time:

- its test is evaluated with ``and``/``or``/``not`` that also work between tensors
  (Python short-circuiting while the operands are plain values, ``torch.logical_*``
  once one is a tensor);
- a test that is a plain value runs the original branch, exactly as before;
- a test that is a tensor becomes ``torch.cond(test, then, otherwise, carried)``,
  where both branches are functions of the variables the ``if`` assigns and that
  exist before it (the others stay local to the branch).

A name first defined in both branches (``if c: y = a`` / ``else: y = b``, and so
through ``elif`` chains, which are nested ``if``s) is an output of the ``torch.cond``
like a carried one. An ``if`` whose branches ``return``, ``break``, ``continue`` or
``yield``, or that defines a name in one branch only which the function reads outside
it, cannot be a ``torch.cond`` and is left as it was (the report and the dump say so).
The rewritten function keeps the original's file and line numbers, so tracebacks
point at the user's source. Imported when the target module is.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import textwrap
from typing import Any, Dict, List, Optional, Set, Tuple

import torch

HELPER_NAMES = ("__lazypatch_and__", "__lazypatch_or__", "__lazypatch_not__",
                "__lazypatch_if__")


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def _and(left: Any, right: Any) -> Any:
    """``left and right()``; between tensors, ``torch.logical_and``."""
    if _is_tensor(left):
        other = right()
        return torch.logical_and(left, other if _is_tensor(other) else torch.tensor(bool(other)))
    if not left:
        return left
    return right()


def _or(left: Any, right: Any) -> Any:
    """``left or right()``; between tensors, ``torch.logical_or``."""
    if _is_tensor(left):
        other = right()
        return torch.logical_or(left, other if _is_tensor(other) else torch.tensor(bool(other)))
    if left:
        return left
    return right()


def _not(value: Any) -> Any:
    """``not value``; of a tensor, ``torch.logical_not``."""
    return torch.logical_not(value) if _is_tensor(value) else not value


def _if(test: Any, then: Any, otherwise: Any, carried: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """Run one branch on the carried values: ``torch.cond`` when ``test`` is a tensor."""
    if _is_tensor(test):
        if test.numel() != 1:
            raise ValueError(f"the condition of a rewritten `if` is a tensor of shape "
                             f"{tuple(test.shape)}; it must hold one element")
        return tuple(torch.cond(test.reshape(()).to(torch.bool), _unaliased(then),
                                _unaliased(otherwise), carried))
    return then(*carried) if test else otherwise(*carried)


def _unaliased(branch: Any) -> Any:
    """The branch, returning a copy of every tensor: torch.cond's outputs must not
    alias its operands nor the variables a branch reads from the function (``y = x``,
    ``y = x[0]``), which cannot be told apart from new tensors before tracing."""
    def run(*carried: Any) -> Tuple[Any, ...]:
        return tuple(result.clone() if _is_tensor(result) else result
                     for result in branch(*carried))
    return run


HELPERS = dict(zip(HELPER_NAMES, (_and, _or, _not, _if)))


class _TestRewriter(ast.NodeTransformer):
    """``a and b`` -> ``__lazypatch_and__(a, lambda: b)``; ``not a`` -> ``__lazypatch_not__(a)``."""

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        self.generic_visit(node)
        helper = "__lazypatch_and__" if isinstance(node.op, ast.And) else "__lazypatch_or__"
        result = node.values[0]
        for value in node.values[1:]:
            result = ast.Call(ast.Name(helper, ast.Load()),
                              [result, ast.Lambda(_no_arguments(), value)], [])
        return result

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.Call(ast.Name("__lazypatch_not__", ast.Load()), [node.operand], [])
        return node

    def visit_Lambda(self, node: ast.Lambda) -> Any:
        return node   # its own scope: leave a user's lambda alone


def _no_arguments() -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                         kwarg=None, defaults=[])


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _walk_scope(node: ast.AST) -> Any:
    """``ast.walk`` that does not enter nested functions, lambdas or classes."""
    if isinstance(node, _SCOPES):
        yield node
        return
    pending = [node]
    while pending:
        current = pending.pop()
        yield current
        for child in ast.iter_child_nodes(current):
            if isinstance(child, _SCOPES):
                yield child   # its name is bound here; its body is another scope
            else:
                pending.append(child)


def _assigned(statements: List[ast.stmt]) -> Set[str]:
    """Names the statements bind in the function's own scope."""
    names: Set[str] = set()
    for statement in statements:
        for node in _walk_scope(statement):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
    return names


def _loads(node: ast.AST) -> Dict[str, int]:
    """How often each name is read in ``node`` (nested functions included: a closure
    reads the variable too)."""
    counts: Dict[str, int] = {}
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load):
            counts[child.id] = counts.get(child.id, 0) + 1
    return counts


def _blocker(statements: List[ast.stmt]) -> Optional[str]:
    """Why these branch statements cannot become a function of their own, or None."""
    forbidden = (ast.Return, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom,
                 ast.Global, ast.Nonlocal, ast.Await)
    for statement in statements:
        for node in _walk_scope(statement):
            if isinstance(node, forbidden):
                return f"the branch holds `{type(node).__name__.lower()}`"
    return None


class _IfRewriter(ast.NodeTransformer):
    """Rewrites each eligible ``if`` of one function body (not nested functions)."""

    def __init__(self, parameters: Set[str], loads: Dict[str, int]) -> None:
        self.defined = set(parameters)
        self.loads = loads   # how often the whole function reads each name
        self.count = 0
        self.left_alone: List[str] = []

    def rewrite_body(self, body: List[ast.stmt]) -> List[ast.stmt]:
        result: List[ast.stmt] = []
        for statement in body:
            result.extend(self.rewrite_statement(statement))
            self.defined |= _assigned([statement])
        return result

    def rewrite_statement(self, statement: ast.stmt) -> List[ast.stmt]:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return [statement]
        if not isinstance(statement, ast.If):
            self.rewrite_inner_bodies(statement)
            return [statement]
        reads_inside = _loads(statement)   # before its branches are rewritten
        self.rewrite_branches(statement)
        then_names, else_names = _assigned(statement.body), _assigned(statement.orelse)
        carried = sorted((then_names | else_names) & self.defined)
        # first defined in both branches: outputs of the cond, like the carried ones
        both_defined = sorted((then_names & else_names) - self.defined)
        reason = self.reason_to_leave(statement, (then_names ^ else_names) - self.defined,
                                      reads_inside)
        if reason:
            self.left_alone.append(f"line {statement.lineno}: {reason}")
            return [statement]
        index = self.count
        self.count += 1
        return _cond_statements(statement, index, carried, carried + both_defined)

    def rewrite_inner_bodies(self, statement: ast.stmt) -> None:
        """The ``if``s inside a loop's, ``with``'s or ``try``'s bodies."""
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(statement, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(statement, field, self.rewrite_body(inner))

    def rewrite_branches(self, statement: ast.If) -> None:
        """Both branches rewritten; names bound inside one branch are not defined for
        the other one, nor (for sure) after the `if`: only names bound before it are
        carried."""
        before = set(self.defined)
        statement.body = self.rewrite_body(statement.body)
        self.defined = set(before)
        statement.orelse = self.rewrite_body(statement.orelse)
        self.defined = before

    def reason_to_leave(self, statement: ast.If, one_sided: Set[str],
                        reads_inside: Dict[str, int]) -> Optional[str]:
        """Why this ``if`` stays as it is (a statement no function may hold, or a name
        bound in one branch only and read after it), or None."""
        reason = _blocker(statement.body) or _blocker(statement.orelse)
        used_elsewhere = sorted(name for name in one_sided
                                if self.loads.get(name, 0) > reads_inside.get(name, 0)
                                and not name.startswith("__lazypatch_"))
        if not reason and used_elsewhere:
            reason = (f"{', '.join(used_elsewhere)} is first defined in one branch only and "
                      f"used outside the `if` (give it a value before the `if`, or in both "
                      f"branches)")
        return reason


def _cond_statements(statement: ast.If, index: int, carried: List[str],
                     outputs: List[str]) -> List[ast.stmt]:
    """The ``if`` as two functions of the ``carried`` names returning the ``outputs``,
    and one ``__lazypatch_if__(test, then, else, carried)`` call assigning them."""
    then_name, else_name = f"__lazypatch_then_{index}__", f"__lazypatch_else_{index}__"
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(name) for name in carried],
                              vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                              defaults=[])
    returned = ast.Return(ast.Tuple([ast.Name(name, ast.Load()) for name in outputs],
                                    ast.Load()))
    then_function = ast.FunctionDef(then_name, arguments, statement.body + [returned], [],
                                    None, None, type_params=[])
    else_function = ast.FunctionDef(else_name, arguments,
                                    (statement.orelse or [ast.Pass()]) + [returned], [],
                                    None, None, type_params=[])
    test = _TestRewriter().visit(statement.test)
    call = ast.Call(ast.Name("__lazypatch_if__", ast.Load()),
                    [test, ast.Name(then_name, ast.Load()), ast.Name(else_name, ast.Load()),
                     ast.Tuple([ast.Name(name, ast.Load()) for name in carried], ast.Load())],
                    [])
    target = ast.Tuple([ast.Name(name, ast.Store()) for name in outputs], ast.Store())
    assign = ast.Assign([target], call) if outputs else ast.Expr(call)
    new: List[ast.stmt] = [then_function, else_function, assign]
    for node in new:
        ast.copy_location(node, statement)
    return new


def rewrite_function(function: Any) -> Tuple[Any, str, str, List[str]]:
    """The function with its data-dependent ``if``s rewritten; also the original
    source, the rewritten source and the ``if``s left alone (with why).

    Raises ValueError when the function has no ``if`` that can be rewritten."""
    raw = inspect.getsource(function)
    source = textwrap.dedent(raw)
    tree = ast.parse(source)
    definition = tree.body[0]
    if not isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise ValueError(f"{function.__qualname__} is not defined by a def statement")
    arguments = definition.args
    parameters = {item.arg for item in arguments.posonlyargs + arguments.args
                  + arguments.kwonlyargs}
    parameters |= {item.arg for item in (arguments.vararg, arguments.kwarg) if item}
    rewriter = _IfRewriter(parameters, _loads(definition))
    definition.body = rewriter.rewrite_body(definition.body)
    if not rewriter.count:
        raise ValueError(f"{function.__qualname__} has no `if` that can become torch.cond"
                         + (f" ({'; '.join(rewriter.left_alone)})" if rewriter.left_alone
                            else ""))
    definition.decorator_list = []
    # The original's closure (``__class__`` for zero-argument super()) becomes the
    # factory's parameters, and the helpers reach the function the same way, so the
    # module's namespace is left untouched.
    free = list(function.__code__.co_freevars)
    factory = ast.FunctionDef(
        "__lazypatch_factory__",
        ast.arguments(posonlyargs=[], args=[ast.arg(name) for name in
                                            list(HELPER_NAMES) + free],
                      vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        [definition, ast.Return(ast.Name(definition.name, ast.Load()))], [], None, None,
        type_params=[])
    module = ast.Module([factory], type_ignores=[])
    ast.fix_missing_locations(module)
    first_line = function.__code__.co_firstlineno
    ast.increment_lineno(module, first_line - 1)
    rewritten_source = ast.unparse(definition)
    code = compile(module, inspect.getsourcefile(function) or "<rewritten>", "exec")
    namespace: Dict[str, Any] = {}
    exec(code, function.__globals__, namespace)
    closure = [cell.cell_contents for cell in (function.__closure__ or ())]
    rewritten = namespace["__lazypatch_factory__"](*HELPERS.values(), *closure)
    rewritten.__qualname__ = function.__qualname__
    rewritten.__module__ = function.__module__
    rewritten.__doc__ = function.__doc__
    rewritten.__defaults__ = function.__defaults__
    rewritten.__kwdefaults__ = function.__kwdefaults__
    rewritten.__lazypatch_rewritten_from__ = function
    return rewritten, source, rewritten_source, rewriter.left_alone


def write_dump(directory: str, target: str, original: str, rewritten: str,
               left_alone: List[str]) -> List[str]:
    """Write the original source, the rewritten one and their diff; return the paths."""
    import os
    os.makedirs(directory, exist_ok=True)
    stem = target.replace(":", ".").replace("/", "_")
    diff = "".join(difflib.unified_diff(original.splitlines(True),
                                        (rewritten + "\n").splitlines(True),
                                        f"{target} (original)", f"{target} (rewritten)"))
    notes = "".join(f"# left unrewritten: {item}\n" for item in left_alone)
    paths = []
    for suffix, text in (("original.py", original), ("rewritten.py", notes + rewritten + "\n"),
                         ("diff", diff)):
        path = os.path.join(directory, f"{stem}.{suffix}")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        paths.append(path)
    return paths
