"""Operators defined in Python, the way TVM's ``te`` defines them.

A small tensor-expression builder that produces a structured operator
(``kiln.v1.OperatorDef``), so that a client never writes the .kiln language::

    from kiln import te

    n = te.var("n")                                   # a run-time size
    A = te.placeholder((n, n), "f32", name="A")
    B = te.placeholder((n, n), "f32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

    op = te.create_operator("matmul", outputs=[C], constraints=[n > 0])
    TI = op.knob("TI", 32, [8, 16, 32, 64])
    op[C].tile("i", "j", TI, 32, "io", "jo", "ii", "ji")
    op[C].tag("io", "parallel")
    op.definition()                                   # the kiln.v1.OperatorDef

kiln validates the result exactly as it validates text, and names the field
of a mistake (``computations[0].domain[1]``). What each piece becomes:

- ``var``: a param (``param n;``, or ``param m = 64;`` with a value);
- ``placeholder``: an input buffer, optionally with a value spec
  (``values=(0, nnz)``, ``sorted=True``);
- ``compute``: a computation over the box ``0 <= i < extent`` storing into a
  buffer of the same name: an output when listed in ``outputs``, else a
  temporary. Its iterators are named after the lambda's parameters;
- ``sum``/``prod``/``max``/``min`` with ``axis``: a reduction over the
  reduce axes, the whole right-hand side;
- ``op[C].split(...)`` and every other method: one schedule command on
  computation ``C``, with loops named by strings (docs/language.md lists
  the commands and their arguments).
"""

import inspect
import numbers

from kiln.v1 import operator_pb2 as pb

__all__ = [
    "Expr", "Var", "IterVar", "Tensor", "Operator", "Knob",
    "var", "placeholder", "compute", "reduce_axis", "create_operator",
    "sum", "prod", "max", "min", "select", "cast", "call",
    "exp", "log", "sqrt", "abs", "tanh", "sigmoid", "floor", "ceil",
]

_DTYPES = {"bool": pb.BOOL, "i32": pb.I32, "i64": pb.I64, "f32": pb.F32, "f64": pb.F64,
           "int32": pb.I32, "int64": pb.I64, "float32": pb.F32, "float64": pb.F64}


def _dtype(name):
    try:
        return _DTYPES[str(name)]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r} (expected one of bool, i32, i64, f32, f64)")


def _expr(value):
    """Anything usable in an expression, as an Expr."""
    if isinstance(value, (Expr, _Reduce)):
        return value
    if isinstance(value, bool):
        return Expr(pb.Expr(bool_value=value))
    if isinstance(value, numbers.Integral):
        return Expr(pb.Expr(int_value=int(value)))
    if isinstance(value, numbers.Real):
        return Expr(pb.Expr(float_value=float(value)))
    raise TypeError(f"{value!r} ({type(value).__name__}) is not an expression")


class Expr:
    """An expression node. Arithmetic and comparisons build larger ones;
    ``&``, ``|`` and ``~`` are the language's ``and``, ``or`` and ``not``."""

    __slots__ = ("proto", "refs")

    def __init__(self, proto, refs=()):
        self.proto = proto
        self.refs = frozenset(refs)  # the params and tensors it mentions

    def _binary(self, op, other, swap=False):
        lhs, rhs = (_expr(other), self) if swap else (self, _expr(other))
        return Expr(pb.Expr(binary=pb.Binary(op=op, lhs=lhs.proto, rhs=rhs.proto)),
                    lhs.refs | rhs.refs)

    def __add__(self, o): return self._binary(pb.ADD, o)
    def __radd__(self, o): return self._binary(pb.ADD, o, True)
    def __sub__(self, o): return self._binary(pb.SUB, o)
    def __rsub__(self, o): return self._binary(pb.SUB, o, True)
    def __mul__(self, o): return self._binary(pb.MUL, o)
    def __rmul__(self, o): return self._binary(pb.MUL, o, True)
    def __truediv__(self, o): return self._binary(pb.DIV, o)
    def __rtruediv__(self, o): return self._binary(pb.DIV, o, True)
    def __floordiv__(self, o): return self._binary(pb.DIV, o)
    def __rfloordiv__(self, o): return self._binary(pb.DIV, o, True)
    def __mod__(self, o): return self._binary(pb.MOD, o)
    def __rmod__(self, o): return self._binary(pb.MOD, o, True)
    def __lt__(self, o): return self._binary(pb.LT, o)
    def __le__(self, o): return self._binary(pb.LE, o)
    def __gt__(self, o): return self._binary(pb.GT, o)
    def __ge__(self, o): return self._binary(pb.GE, o)
    def __eq__(self, o): return self._binary(pb.EQ, o)  # noqa: an expression, not a test
    def __ne__(self, o): return self._binary(pb.NE, o)
    def __and__(self, o): return self._binary(pb.AND, o)
    def __or__(self, o): return self._binary(pb.OR, o)
    def __neg__(self): return Expr(pb.Expr(unary=pb.Unary(op=pb.NEG, operand=self.proto)), self.refs)
    def __invert__(self): return Expr(pb.Expr(unary=pb.Unary(op=pb.NOT, operand=self.proto)), self.refs)
    __hash__ = object.__hash__

    def __bool__(self):
        raise TypeError("a kiln expression has no truth value here: use & and | for 'and' and "
                        "'or', and te.select for a choice")


class Var(Expr):
    """A name: a param, a knob, or an iterator."""

    __slots__ = ("name",)

    def __init__(self, name):
        super().__init__(pb.Expr(name=name))
        self.name = name

    def __repr__(self):
        return f"Var({self.name!r})"


class _Param(Var):
    __slots__ = ("value",)

    def __init__(self, name, value):
        super().__init__(name)
        self.value = value
        self.refs = frozenset([self])


class IterVar(Var):
    """A reduce axis: an iterator and its half-open range [lo, hi)."""

    __slots__ = ("lo", "hi")

    def __init__(self, name, lo, hi):
        super().__init__(name)
        self.lo, self.hi = _expr(lo), _expr(hi)


class Knob(Var):
    """A schedule constant the tuner chooses: ``knob TI = 32 in [8, 16, 32];``."""

    __slots__ = ("value", "candidates")

    def __init__(self, name, value, candidates):
        super().__init__(name)
        self.value, self.candidates = int(value), [int(c) for c in candidates]


class _Reduce:
    """``sum(k in ...) body``: only the whole value of a compute."""

    def __init__(self, op, body, axes):
        self.op, self.body = op, _expr(body)
        self.axes = list(axes) if isinstance(axes, (list, tuple)) else [axes]
        for a in self.axes:
            if not isinstance(a, IterVar):
                raise TypeError(f"axis {a!r}: expected a te.reduce_axis")

    def __getattr__(self, name):
        raise TypeError(f"te.{self.op}(...) is the whole value of a compute, not part of an "
                        "expression")


class Tensor:
    """A buffer: an input (placeholder) or what a compute stores into."""

    def __init__(self, name, shape, dtype, kind, computation=None, values=None, sorted=False):
        self.name, self.shape, self.dtype = name, [_expr(e) for e in shape], dtype
        self.kind, self.computation = kind, computation
        self.values, self.sorted = values, sorted

    def __getitem__(self, indices):
        if not isinstance(indices, tuple):
            indices = (indices,)
        indices = [_expr(i) for i in indices]
        refs = {self}.union(*(i.refs for i in indices))
        return Expr(pb.Expr(index=pb.Index(buffer=self.name, indices=[i.proto for i in indices])),
                    refs)

    @property
    def axis(self):
        """The iterators of the computation that makes this tensor."""
        return [Var(n) for n in self.computation.iterators] if self.computation else []

    def __repr__(self):
        return f"Tensor({self.name!r})"


def var(name, value=None):
    """A param: ``param name;`` (a run-time argument of the kernel) or, with a
    value, ``param name = value;``."""
    return _Param(name, value)


def placeholder(shape, dtype="f32", name="placeholder", values=None, sorted=False):
    """An input buffer. ``values=(lo, hi)`` declares its values in [lo, hi]
    (``in [lo, hi]``), what makes indexing by it provably in bounds."""
    return Tensor(name, shape, dtype, pb.Buffer.INPUT, values=values, sorted=sorted)


def reduce_axis(dom, name="k"):
    """A reduction iterator over [lo, hi)."""
    lo, hi = dom
    return IterVar(name, lo, hi)


def _reduction(op, expr, axis):
    if axis is None:
        if op in ("max", "min") and isinstance(expr, tuple) and len(expr) == 2:
            return call(op, *expr)
        raise TypeError(f"te.{op}: give axis= (a te.reduce_axis or a list of them)")
    return _Reduce(op, expr, axis)


def sum(expr, axis=None):  # noqa: A001 (the name TVM uses)
    """``sum(k in lo <= k < hi) expr`` over the reduce axes."""
    return _reduction("sum", expr, axis)


def prod(expr, axis=None):
    return _reduction("prod", expr, axis)


def max(expr, *rest, axis=None):  # noqa: A001
    """A max-reduction with ``axis``; ``max(a, b)`` without it is the elementwise maximum."""
    return _reduction("max", (expr, rest[0]) if rest else expr, axis)


def min(expr, *rest, axis=None):  # noqa: A001
    return _reduction("min", (expr, rest[0]) if rest else expr, axis)


def call(name, *args):
    """A function of the language: ``exp``, ``sqrt``, ``select``, ``max``, a cast..."""
    args = [_expr(a) for a in args]
    return Expr(pb.Expr(call=pb.Call(name=name, args=[a.proto for a in args])),
                frozenset().union(*(a.refs for a in args)))


def select(cond, a, b):
    return call("select", cond, a, b)


def cast(dtype, x):
    _dtype(dtype)
    return call({"int32": "i32", "int64": "i64", "float32": "f32", "float64": "f64"}.get(dtype, dtype), x)


def _math(name):
    def f(x):
        return call(name, x)
    f.__name__ = name
    f.__doc__ = f"``{name}(x)``"
    return f


exp, log, sqrt, abs, tanh, floor, ceil = (_math(n) for n in  # noqa: A001
                                          ("exp", "log", "sqrt", "abs", "tanh", "floor", "ceil"))


def sigmoid(x):
    return 1.0 / (1.0 + exp(-x))


class _Computation:
    def __init__(self, name, iterators, shape, value, tensor):
        self.name, self.iterators, self.shape = name, iterators, shape
        self.value, self.tensor = value, tensor


def compute(shape, fcompute, name="compute", dtype=None):
    """A tensor computed element by element: ``fcompute(i, j, ...)`` gives the
    value at (i, j, ...), a te.sum(...) for a reduction. The iterators take
    the lambda's parameter names."""
    shape = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    params = list(inspect.signature(fcompute).parameters)
    if len(params) != len(shape):
        raise TypeError(f"compute {name}: the function takes {len(params)} iterators but the "
                        f"shape has {len(shape)} extents")
    iterators = [Var(p) for p in params]
    value = fcompute(*iterators)
    if not isinstance(value, _Reduce):
        value = _expr(value)
    tensor = Tensor(name, shape, dtype or "f32", pb.Buffer.TEMP)
    tensor.computation = _Computation(name, params, tensor.shape, value, tensor)
    return tensor


class _Stage:
    """The schedule commands of one computation: every method is a command."""

    def __init__(self, op, target):
        self._op, self._target = op, target

    def __getattr__(self, command):
        if command.startswith("_"):
            raise AttributeError(command)

        def add(*args):
            self._op.command(self._target, command, *args)
        add.__name__ = command
        return add


def _arg(a):
    if isinstance(a, bool):
        raise TypeError("a schedule argument is a number, a name, a string or a list")
    if isinstance(a, numbers.Integral):
        return pb.ScheduleArg(number=int(a))
    if isinstance(a, (Var, Tensor)):
        return pb.ScheduleArg(name=a.name)
    if isinstance(a, (list, tuple)):
        return pb.ScheduleArg(list=pb.ScheduleArgList(items=[_arg(x) for x in a]))
    if isinstance(a, Text):
        return pb.ScheduleArg(text=str(a))
    if isinstance(a, str):
        return pb.ScheduleArg(name=a)
    raise TypeError(f"schedule argument {a!r}: expected a number, a name, a list or te.Text")


class Text(str):
    """A quoted string argument of a schedule command (apply_sch's isl map)."""


class Operator:
    """One kiln func: its params, buffers, computations and schedule."""

    def __init__(self, name, outputs, constraints=(), fast_math=False, params=None):
        self.name = name
        self.outputs = list(outputs)
        self.params = params
        self.constraints = [_expr(c) for c in constraints]
        self.fast_math = fast_math
        self.knobs = []
        self.schedule = []

    def __getitem__(self, tensor):
        """``op[C]``: the schedule of C's computation (or of buffer C)."""
        return _Stage(self, tensor.name if isinstance(tensor, Tensor) else str(tensor))

    def knob(self, name, value, candidates):
        k = Knob(name, value, candidates)
        self.knobs.append(k)
        return k

    def command(self, target, op, *args):
        self.schedule.append(pb.ScheduleCommand(
            target=target.name if isinstance(target, Tensor) else target, op=op,
            args=[_arg(a) for a in args]))

    def definition(self):
        """The operator as a kiln.v1.OperatorDef."""
        tensors = _tensors_of(self.outputs)
        d = pb.OperatorDef(name=self.name, fast_math=self.fast_math)
        params = _params_of(tensors, self.constraints)
        if self.params is not None:
            missing = [p.name for p in params if p not in self.params]
            if missing:
                raise ValueError(f"params={[p.name for p in self.params]} leaves out "
                                 f"{', '.join(missing)}")
            params = list(self.params)
        for p in params:
            d.params.add(name=p.name, **({} if p.value is None else {"value": int(p.value)}))
        d.constraints.extend(c.proto for c in self.constraints)
        outputs = {t.name for t in self.outputs}
        for t in tensors:
            b = d.buffers.add(name=t.name, dtype=_dtype(t.dtype))
            b.kind = (pb.Buffer.OUTPUT if t.name in outputs
                      else t.kind if t.kind == pb.Buffer.INPUT else pb.Buffer.TEMP)
            b.shape.extend(e.proto for e in t.shape)
            if t.values is not None:
                lo, hi = t.values
                b.values.lo.CopyFrom(_expr(lo).proto)
                b.values.hi.CopyFrom(_expr(hi).proto)
                b.values.hi_inclusive = True
            b.sorted = bool(t.sorted)
        for t in tensors:
            if t.computation is not None:
                _add_computation(d, t.computation)
        for k in self.knobs:
            d.knobs.add(name=k.name, value=k.value, candidates=k.candidates)
        d.schedule.extend(self.schedule)
        return d

    def operator(self):
        """The operator as a kiln.v1.Operator, what a request carries."""
        return pb.Operator(**{"def": self.definition()})


def create_operator(name, outputs, constraints=(), fast_math=False, params=None):
    """The func that computes ``outputs`` (a tensor or a list of them), with
    every input and intermediate tensor they read. Its params are those the
    tensors and constraints mention, by name, or ``params`` in that order (the
    order of the kernel's run-time arguments)."""
    if isinstance(outputs, Tensor):
        outputs = [outputs]
    for t in outputs:
        if t.computation is None:
            raise TypeError(f"output {t.name}: an output is made by te.compute")
    return Operator(name, outputs, constraints, fast_math, params)


def _refs_of(c):
    """What a computation's value, shape and reduce axes mention."""
    refs = set()
    value = c.value
    if isinstance(value, _Reduce):
        refs |= value.body.refs
        for a in value.axes:
            refs |= a.lo.refs | a.hi.refs
    else:
        refs |= value.refs
    for e in c.shape:
        refs |= e.refs
    return refs


def _tensors_of(outputs):
    """Every tensor the outputs depend on: the inputs first, then each
    computed tensor after those it reads."""
    order, seen = [], set()

    def visit(t):
        if id(t) in seen:
            return
        seen.add(id(t))
        if t.computation is not None:
            for r in sorted(_refs_of(t.computation), key=lambda x: x.name):
                if isinstance(r, Tensor):
                    visit(r)
        order.append(t)
    for t in outputs:
        visit(t)
    names = {}
    for t in order:
        if names.setdefault(t.name, t) is not t:
            raise ValueError(f"two different tensors are named {t.name!r}")
    return ([t for t in order if t.kind == pb.Buffer.INPUT] +
            [t for t in order if t.kind != pb.Buffer.INPUT])


def _params_of(tensors, constraints):
    """The params every shape, value spec, computation and constraint mentions."""
    refs = set()
    for t in tensors:
        for e in t.shape:
            refs |= e.refs
        if t.values is not None:
            refs |= _expr(t.values[0]).refs | _expr(t.values[1]).refs
        if t.computation is not None:
            refs |= _refs_of(t.computation)
    for c in constraints:
        refs |= c.refs
    params = sorted((r for r in refs if isinstance(r, _Param)), key=lambda p: p.name)
    names = {}
    for p in params:
        if names.setdefault(p.name, p) is not p:
            raise ValueError(f"two different params are named {p.name!r}")
    return params


def _add_computation(d, c):
    comp = d.computations.add(name=c.name, iterators=c.iterators)
    for it, extent in zip(c.iterators, c.shape):
        comp.domain.append((Var(it) >= 0).proto)
        comp.domain.append((Var(it) < extent).proto)
    comp.store.buffer = c.tensor.name
    comp.store.indices.extend(Var(it).proto for it in c.iterators)
    if isinstance(c.value, _Reduce):
        r = comp.reduction
        r.op = c.value.op
        r.iterators.extend(a.name for a in c.value.axes)
        for a in c.value.axes:
            r.domain.append((Var(a.name) >= a.lo).proto)
            r.domain.append((Var(a.name) < a.hi).proto)
        r.body.CopyFrom(c.value.body.proto)
    else:
        comp.value.CopyFrom(c.value.proto)
