"""Rewrites that let MindSpore's ONNX exporter (opset 11) trace common networks.

The exporter has no converter for several operators that networks use often. Before an
ONNX export, the export-time network (never the user's, never its weights) gets:

- cells swapped for equivalent compositions of exportable operators: ``nn.HSwish``
  (x * ReLU6(x + 3) / 6), ``nn.HSigmoid`` (ReLU6(x + 3) / 6), exact ``nn.GELU``
  (x / 2 * (1 + erf(x / sqrt 2)) with erf written as the ONNX ``Erf`` operator),
  ``nn.GroupNorm`` (reshape, mean, variance, normalise in fp32, affine);
- primitive attributes swapped the same way: ``ops.Unstack`` (Split + Squeeze),
  ``ops.HSwish``, ``ops.HSigmoid``, ``ops.Erf``, ``ops.L2Normalize`` (its formula);
- in a cell's methods, in a subclass of that cell's class (the method source is re-read,
  changed in the syntax tree only, and written to a private temporary file that
  MindSpore's parser reads back):
  ``x += y`` (and ``-=``, ``*=``, ``/=``) on a name, which MindSpore traces as
  ``InplaceAddExt`` and friends, to ``x = x + y``; ``~x`` (``LogicalNot``),
  ``x.cumsum``/``ops.cumsum`` (``CumSum``), ``ops.L2Normalize(axis)`` made in a method
  and bilinear ``ops.interpolate`` (``ResizeBilinearV2``) to the exportable equivalents
  in ``onnx_ops``.

Parameters are shared with the network (not copied) and keep their names.
"""
from __future__ import annotations

import ast
import functools
import inspect
import itertools
import math
import re
import textwrap
import types

from amptool.precision.apply import cell_paths, replace_cell

_AUG_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)
_COUNTER = itertools.count()


def erf_numpy(x):
    """Reference erf for the ONNX ``Erf`` marker when it runs inside MindSpore."""
    import numpy as np

    return np.vectorize(math.erf, otypes=[x.dtype])(x)


def same_as_input(x):
    return x


def _cells() -> dict:
    """Name -> replacement cell class (built once, MindSpore imported lazily)."""
    return {**_activation_cells(), **_layout_cells()}


@functools.cache
def _activation_cells() -> dict:
    from mindspore import nn, ops

    class ErfOnnx(nn.Cell):
        """erf(x), traced as the ONNX operator ``Erf`` (opset 9+)."""

        def __init__(self):
            super().__init__(auto_prefix=False)
            self.erf = ops.Custom(erf_numpy, out_shape=same_as_input, out_dtype=same_as_input,
                                  func_type="pyfunc")
            self.erf.add_prim_attr("reg_op_name", "Erf")
            self.erf.add_prim_attr("input_names", ["x"])
            self.erf.add_prim_attr("output_names", ["y"])

        def construct(self, x):
            return self.erf(x)

    class GeluErf(nn.Cell):
        """Exact GELU: x / 2 * (1 + erf(x / sqrt 2))."""

        def __init__(self):
            super().__init__(auto_prefix=False)
            self.erf = ErfOnnx()

        def construct(self, x):
            return x * 0.5 * (1.0 + self.erf(x * 0.7071067811865476))

    class HSwishOnnx(nn.Cell):
        def construct(self, x):
            return x * ops.relu6(x + 3.0) / 6.0

    class HSigmoidOnnx(nn.Cell):
        def construct(self, x):
            return ops.relu6(x + 3.0) / 6.0

    return {"ErfOnnx": ErfOnnx, "GeluErf": GeluErf, "HSwishOnnx": HSwishOnnx,
            "HSigmoidOnnx": HSigmoidOnnx}


@functools.cache
def _layout_cells() -> dict:
    import mindspore as ms
    from mindspore import nn, ops

    class UnstackOnnx(nn.Cell):
        def __init__(self, axis):
            super().__init__(auto_prefix=False)
            self.axis = axis

        def construct(self, x):
            parts = ops.split(x, 1, self.axis)
            return tuple([ops.squeeze(p, self.axis) for p in parts])

    class GroupNormOnnx(nn.Cell):
        """GroupNorm as reshape + mean + biased variance, computed in fp32."""

        def __init__(self, old):
            super().__init__(auto_prefix=False)
            self.groups = old.num_groups
            self.eps = old.eps
            self.gamma = old.gamma
            self.beta = old.beta

        def construct(self, x):
            dtype = x.dtype
            rest = x.shape[1:]
            per_group = 1
            for dim in rest:
                per_group = per_group * dim
            y = ops.reshape(ops.cast(x, ms.float32), (-1, self.groups, per_group // self.groups))
            centred = y - y.mean(axis=2, keep_dims=True)
            var = (centred * centred).mean(axis=2, keep_dims=True)
            y = ops.reshape(centred / ops.sqrt(var + self.eps), (-1,) + rest)
            affine = (rest[0],) + (1,) * (len(rest) - 1)
            y = y * ops.reshape(ops.cast(self.gamma, ms.float32), affine)
            y = y + ops.reshape(ops.cast(self.beta, ms.float32), affine)
            return ops.cast(y, dtype)

    class L2NormalizeOnnx(nn.Cell):
        def __init__(self, axis, epsilon):
            super().__init__(auto_prefix=False)
            self.axis = axis
            self.epsilon = epsilon

        def construct(self, x):
            squares = ops.sum(x * x, self.axis, keepdim=True)
            return x / ops.sqrt(ops.maximum(squares, self.epsilon))

    return {"UnstackOnnx": UnstackOnnx, "GroupNormOnnx": GroupNormOnnx,
            "L2NormalizeOnnx": L2NormalizeOnnx}


def _cell_swap(cell):
    """The replacement for a whole cell, or None."""
    from mindspore import nn

    made = _cells()
    if isinstance(cell, nn.HSwish):
        return made["HSwishOnnx"]()
    if isinstance(cell, nn.HSigmoid):
        return made["HSigmoidOnnx"]()
    if isinstance(cell, nn.GELU) and getattr(cell, "approximate", "tanh") == "none":
        return made["GeluErf"]()
    if isinstance(cell, nn.GroupNorm):
        return made["GroupNormOnnx"](cell)
    return None


def _primitive_swap(prim):
    """The cell replacing a primitive attribute, or None."""
    made = _cells()
    name = getattr(prim, "name", "")
    if name == "Unstack":
        return made["UnstackOnnx"](prim.axis)
    if name == "HSwish":
        return made["HSwishOnnx"]()
    if name == "HSigmoid":
        return made["HSigmoidOnnx"]()
    if name == "Erf":
        return made["ErfOnnx"]()
    if name == "L2Normalize":
        axis = prim.attrs.get("axis", 0)
        axis = tuple(axis) if isinstance(axis, (list, tuple)) else axis
        return made["L2NormalizeOnnx"](axis, prim.attrs.get("epsilon", 1e-4))
    return None


def _copy_precision(old, new) -> None:
    """Give ``new`` the ``to_float`` setting ``old`` had."""
    import mindspore as ms

    flags = old.get_flags() if hasattr(old, "get_flags") else {}
    for flag, dtype in (("fp16", ms.float16), ("bf16", ms.bfloat16), ("fp32", ms.float32)):
        if flags.get(flag):
            new.to_float(dtype)
            return


def rewrite_for_onnx(net) -> list:
    """Rewrite ``net`` in place for the ONNX exporter; return one line per rewrite."""
    done = []
    paths = cell_paths(net)
    for path, cell in list(paths.items()):
        new = _cell_swap(cell) if path else None
        if new is not None:
            _copy_precision(cell, new)
            replace_cell(paths, path, new)
            done.append(f"{path}: {type(cell).__name__} -> {type(new).__name__}")
    for path, cell in cell_paths(net).items():
        done.extend(_swap_primitives(path, cell))
    classes: dict = {}
    for path, cell in cell_paths(net).items():
        cls: type = type(cell)
        if cls not in classes:
            classes[cls] = exportable_class(cls)
        if classes[cls] is not None:
            cell.__class__, what = classes[cls]
            done.append(f"{path or '(root)'}: {cls.__name__} rewritten ({what})")
    return done


def _swap_primitives(path: str, cell) -> list:
    from mindspore.ops import Primitive

    done = []
    for name, value in list(vars(cell).items()):
        if not isinstance(value, Primitive):
            continue
        new = _primitive_swap(value)
        if new is None:
            continue
        _copy_precision(cell, new)
        del cell.__dict__[name]
        cell._primitives.pop(name, None)
        cell._cells[name] = new
        done.append(f"{path + '.' if path else ''}{name}: {value.name} -> {type(new).__name__}")
    return done


_HELPERS = "_amptool_onnx"  # the name rewritten sources call ``onnx_ops`` by


def _is_mindspore(value) -> bool:
    name = getattr(value, "__name__", "") if isinstance(value, types.ModuleType) else \
        getattr(value, "__module__", "") or ""
    return name.split(".")[0] == "mindspore"


class _OnnxSource(ast.NodeTransformer):
    """Rewrites, in one method's syntax tree, what the ONNX exporter cannot trace:
    ``name op= value`` -> ``name = name op value`` for + - * /; ``~x``, ``x.cumsum(...)``,
    ``ops.cumsum(...)`` and ``ops.interpolate(...)`` -> calls of ``onnx_ops``. Names are
    resolved in the function's globals: ``np.cumsum`` stays."""

    def __init__(self, names: dict):
        self.names = names
        self.changed: set = set()

    def _helper(self, name: str, node, args, keywords):
        self.changed.add(name)
        func = ast.Attribute(value=ast.Name(id=_HELPERS, ctx=ast.Load()), attr=name, ctx=ast.Load())
        return ast.copy_location(ast.Call(func=func, args=args, keywords=keywords), node)

    def visit_AugAssign(self, node):
        self.generic_visit(node)
        if not isinstance(node.target, ast.Name) or not isinstance(node.op, _AUG_OPS):
            return node
        self.changed.add("augmented assignments")
        load = ast.Name(id=node.target.id, ctx=ast.Load())
        new = ast.Assign(targets=[ast.Name(id=node.target.id, ctx=ast.Store())],
                         value=ast.BinOp(left=load, op=node.op, right=node.value))
        return ast.copy_location(new, node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Invert):
            return self._helper("invert", node, [node.operand], [])
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "L2Normalize" \
                and isinstance(func.value, ast.Name) \
                and _is_mindspore(self.names.get(func.value.id)):  # ops.L2Normalize(axis)
            return self._helper("L2Normalize", node, node.args, node.keywords)
        if isinstance(func, ast.Name) and func.id in ("cumsum", "interpolate") \
                and _is_mindspore(self.names.get(func.id)):
            return self._helper(func.id, node, node.args, node.keywords)
        if not isinstance(func, ast.Attribute) or func.attr not in ("cumsum", "interpolate"):
            return node
        owner = self.names.get(func.value.id) if isinstance(func.value, ast.Name) else None
        if isinstance(owner, types.ModuleType):  # ops.cumsum(x, ...), np.cumsum(x, ...)
            if not _is_mindspore(owner):
                return node
            return self._helper(func.attr, node, node.args, node.keywords)
        if func.attr == "cumsum":  # a tensor's method: x.cumsum(...)
            return self._helper("cumsum", node, [func.value, *node.args], node.keywords)
        return node


def from_mindspore(cls) -> bool:
    return (getattr(cls, "__module__", "") or "").split(".")[0] == "mindspore"


def user_methods(cls) -> dict:
    """Name -> plain function for methods defined outside MindSpore in ``cls``'s MRO."""
    found = {}
    for klass in reversed(cls.__mro__):
        module = getattr(klass, "__module__", "") or ""
        if module.split(".")[0] in ("mindspore", "builtins"):
            continue
        for name, value in vars(klass).items():
            if inspect.isfunction(value):
                found[name] = value
    return found


def _rewrite_function(fn):
    """``(fn rewritten by _OnnxSource, what changed)``, or None when nothing changes (or
    when its source cannot be read, it is decorated, or it calls ``super()``)."""
    free = fn.__code__.co_freevars
    if "__class__" in free:
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return None
    func = tree.body[0] if tree.body else None
    if not isinstance(func, ast.FunctionDef) or func.decorator_list:
        return None
    scope = dict(fn.__globals__)
    for name, cell in zip(free, fn.__closure__ or ()):
        try:
            scope[name] = cell.cell_contents
        except ValueError:  # a closure variable not bound yet
            pass
    visitor = _OnnxSource(scope)
    visitor.visit(tree)
    if not visitor.changed:
        return None
    cells = dict(zip(free, fn.__closure__ or ()))
    if visitor.changed - {"augmented assignments"}:
        # MindSpore resolves a method's globals by its module's name, so the helpers
        # reach the rewritten method as a closure variable.
        from amptool.export import onnx_ops

        cells[_HELPERS] = types.CellType(onnx_ops)
    if cells:  # the closure variables become an enclosing scope again
        outer = ast.parse(f"def _enclosing():\n    {' = '.join(cells)} = None\n")
        outer.body[0].body.extend([func, ast.Return(ast.Name(func.name, ast.Load()))])
        tree = outer
    text = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    path = _source_dir() / f"m{next(_COUNTER)}_{re.sub(r'[^0-9A-Za-z_]', '_', fn.__qualname__)}.py"
    path.write_text(text, encoding="utf-8")
    namespace: dict = {}
    exec(compile(text, str(path), "exec"), fn.__globals__, namespace)  # noqa: S102
    new = namespace["_enclosing"]() if cells else namespace[func.name]
    if cells:
        new = types.FunctionType(new.__code__, fn.__globals__, fn.__name__, None,
                                 tuple(cells[name] for name in new.__code__.co_freevars))
    new.__qualname__ = fn.__qualname__
    new.__defaults__, new.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
    return new, visitor.changed


@functools.cache
def _source_dir():
    """A private folder, removed at exit, holding rewritten sources for MindSpore's parser."""
    import atexit
    import shutil
    import tempfile
    from pathlib import Path

    folder = tempfile.mkdtemp(prefix="amptool-onnx-")
    atexit.register(shutil.rmtree, folder, True)
    return Path(folder)


@functools.cache
def exportable_class(cls):
    """``(subclass of cls whose methods are rewritten by _OnnxSource, what changed)``, or
    None when no method needs it."""
    methods, what = {}, set()
    for name, fn in user_methods(cls).items():
        found = _rewrite_function(fn)
        if found is not None:
            methods[name] = found[0]
            what |= found[1]
    if not methods:
        return None
    attrs = dict(methods, __module__=cls.__module__, __qualname__=cls.__qualname__)
    return type(cls.__name__, (cls,), attrs), ", ".join(sorted(what))
