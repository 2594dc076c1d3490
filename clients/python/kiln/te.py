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

import contextlib
import inspect
import numbers

from kiln.v1 import operator_pb2 as pb

__all__ = [
    "Expr", "Var", "IterVar", "Tensor", "Operator", "Knob", "Func", "Graph", "Text",
    "ValueComputation", "var", "iters", "placeholder", "compute", "reduce_axis",
    "create_operator",
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
    """A schedule constant the tuner chooses: ``knob TI = 32 in [8, 16, 32];``, with defaults
    by target as ``by_target={"avx512f": 64}`` (``... for avx512f = 64``) and a default fitted
    to the target as ``fit=(MR + NR) * KB * 4 <= te.target_size("l1d_bytes")`` (``... fit
    CONDITION``)."""

    __slots__ = ("value", "candidates", "by_target", "fit")

    def __init__(self, name, value, candidates, by_target=None, fit=None):
        super().__init__(name)
        self.value, self.candidates = int(value), [int(c) for c in candidates]
        self.by_target = {str(f): int(v) for f, v in (by_target or {}).items()}
        self.fit = None if fit is None else _expr(fit)


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
        self.hi_inclusive = True

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


TARGET_SIZES = ("l1d_bytes", "l2_bytes", "l3_bytes", "vector_bytes", "vector_registers")


def target_size(name):
    """A size of the target the kernel is compiled for, for a knob's ``fit``: ``l1d_bytes``,
    ``l2_bytes``, ``l3_bytes`` (a core's caches), ``vector_bytes`` or ``vector_registers``
    (docs/language.md)."""
    if name not in TARGET_SIZES:
        raise ValueError(f"{name!r} is no target size; expected one of {', '.join(TARGET_SIZES)}")
    return Var(name)


def var(name, value=None):
    """A param: ``param name;`` (a run-time argument of the kernel) or, with a
    value, ``param name = value;``."""
    return _Param(name, value)


def placeholder(shape, dtype="f32", name="placeholder", values=None, sorted=False,
                hi_inclusive=True):
    """An input buffer. ``values=(lo, hi)`` declares its values in [lo, hi]
    (``in [lo, hi]``; ``hi_inclusive=False``: ``in [lo, hi)``), what makes
    indexing by it provably in bounds; ``sorted=True`` that they never
    decrease."""
    t = Tensor(name, shape, dtype, pb.Buffer.INPUT, values=values, sorted=sorted)
    t.hi_inclusive = hi_inclusive
    return t


def reduce_axis(dom, name="k"):
    """A reduction iterator over [lo, hi)."""
    lo, hi = dom
    return IterVar(name, lo, hi)


def _reduction(op, expr, axis):
    if axis is None:
        raise TypeError(f"te.{op}: give axis= (a te.reduce_axis or a list of them)")
    return _Reduce(op, expr, axis)


def _extremum(op, expr, rest, axis):
    if not rest:
        return _reduction(op, expr, axis)
    if axis is not None:
        raise TypeError(f"te.{op}: axis= reduces one expression; {op}(a, b, ...) takes none")
    # The language's max and min take two arguments: fold the rest in.
    out = call(op, expr, rest[0])
    for e in rest[1:]:
        out = call(op, out, e)
    return out


def sum(expr, axis=None):  # noqa: A001 (the name TVM uses)
    """``sum(k in lo <= k < hi) expr`` over the reduce axes."""
    return _reduction("sum", expr, axis)


def prod(expr, axis=None):
    return _reduction("prod", expr, axis)


def max(expr, *rest, axis=None):  # noqa: A001
    """A max-reduction with ``axis``; ``max(a, b, ...)`` without it is the elementwise maximum."""
    return _extremum("max", expr, rest, axis)


def min(expr, *rest, axis=None):  # noqa: A001
    """A min-reduction with ``axis``; ``min(a, b, ...)`` without it is the elementwise minimum."""
    return _extremum("min", expr, rest, axis)


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

    def knob(self, name, value, candidates, by_target=None, fit=None):
        """A knob; ``by_target={"avx512f": 64}`` gives its default on targets with a CPU
        feature (the last listed feature the target has wins); ``fit=CONDITION`` makes the
        largest candidate for which CONDITION holds on the target the default (it reads knobs,
        params and ``target_size(...)``; applied after ``by_target``), or ``fit=lambda k:
        CONDITION`` to read the knob itself."""
        k = Knob(name, value, candidates, by_target, None)
        if fit is not None:
            k.fit = _expr(fit(k) if callable(fit) else fit)
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
            missing = [p.name for p in params if not any(p is q for q in self.params)]
            if missing:
                raise ValueError(f"params={[p.name for p in self.params]} leaves out "
                                 f"{', '.join(missing)}")
            params = list(self.params)
        for p in params:
            d.params.add(name=p.name, **({} if p.value is None else {"value": int(p.value)}))
        d.constraints.extend(c.proto for c in self.constraints)
        outputs = {t.name for t in self.outputs}
        for t in tensors:
            _add_buffer(d, t, pb.Buffer.OUTPUT if t.name in outputs
                        else t.kind if t.kind == pb.Buffer.INPUT else pb.Buffer.TEMP)
        for t in tensors:
            if t.computation is not None:
                _add_computation(d, t.computation)
        for k in self.knobs:
            knob = d.knobs.add(name=k.name, value=k.value, candidates=k.candidates,
                               target_defaults=[pb.TargetDefault(feature=f, value=v)
                                                for f, v in k.by_target.items()])
            if k.fit is not None:
                knob.fit.CopyFrom(k.fit.proto)
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


def _add_buffer(d, t, kind):
    b = d.buffers.add(name=t.name, dtype=_dtype(t.dtype), kind=kind)
    b.shape.extend(e.proto for e in t.shape)
    if t.values is not None:
        lo, hi = t.values
        b.values.lo.CopyFrom(_expr(lo).proto)
        b.values.hi.CopyFrom(_expr(hi).proto)
        b.values.hi_inclusive = t.hi_inclusive
    b.sorted = bool(t.sorted)


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


# ---------------------------------------------------------------------------
# Funcs written statement by statement

def iters(names):
    """Iterators by name: ``i, j, k = te.iters("i j k")``."""
    return tuple(Var(n) for n in names.split())


_ASSIGN = {"=": pb.SET, "+=": pb.ADD_TO, "-=": pb.SUB_FROM, "*=": pb.MUL_BY}


class ValueComputation:
    """A computation that stores nothing; reading it, ``pad(n, c, y, x)``,
    inlines its value there."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *indices):
        return call(self.name, *indices)


class Func(Operator):
    """A func written statement by statement, as the language writes it: for
    what te.compute's boxes cannot say (several statements on one buffer, a
    domain that is not a box or is read from data, value computations)::

        f = te.Func("trmm")
        M, N = f.param("M", 40), f.param("N", 24)
        f.constraint(M > 0, N > 0)
        A = f.input("A", "f64", (M, M))
        B = f.input("B", "f64", (M, N))
        R = f.output("R", "f64", (M, N))
        i, j, k = te.iters("i j k")
        f.compute("R_init", (i, j), [0 <= i, i < M, 0 <= j, j < N], R[i, j], B[i, j])
        f.compute("upd", (i, j, k), [0 <= i, i < M, 0 <= j, j < N, i < k, k < M],
                  R[i, j], A[k, i] * B[k, j], assign="+=")
        f["upd"].reorder("i", "k", "j")

    Params, buffers and computations keep the order they are made in, which
    is the order of the func (computations run in that order). Computations
    made inside ``with f.loop(t, domain):`` are inside that algorithm loop
    (``for t in domain { ... }``): they run in order once for each value of
    ``t``, which comes before their own iterators::

        t, i = te.iters("t i")
        with f.loop(t, [0 <= t, t < T]):
            f.compute("s1", (i,), [1 <= i, i < N - 1], B[i], A[i - 1] + A[i + 1])
            f.compute("s2", (i,), [1 <= i, i < N - 1], A[i], B[i])
    """

    def __init__(self, name, fast_math=False):
        super().__init__(name, [], (), fast_math)
        self._params, self._buffers, self._comps = [], [], []
        self._loops, self._open = [], []

    @contextlib.contextmanager
    def loop(self, iterator, domain):
        """``for iterator in domain { ... }`` around the computations made inside."""
        parent = self._open[-1] if self._open else None
        self._loops.append((iterator.name, [_expr(c) for c in domain], parent))
        self._open.append(len(self._loops) - 1)
        try:
            yield iterator
        finally:
            self._open.pop()

    def param(self, name, value=None):
        p = _Param(name, value)
        self._params.append(p)
        return p

    def constraint(self, *conditions):
        self.constraints.extend(_expr(c) for c in conditions)

    def _buffer(self, kind, name, dtype, shape, values=None, sorted=False, hi_inclusive=True):
        t = Tensor(name, shape, dtype, kind, values=values, sorted=sorted)
        t.hi_inclusive = hi_inclusive
        self._buffers.append(t)
        return t

    def input(self, name, dtype, shape, values=None, sorted=False, hi_inclusive=True):
        """``input name : dtype[shape] in [lo, hi] sorted;`` (values=(lo, hi))."""
        return self._buffer(pb.Buffer.INPUT, name, dtype, shape, values, sorted, hi_inclusive)

    def output(self, name, dtype, shape):
        return self._buffer(pb.Buffer.OUTPUT, name, dtype, shape)

    def temp(self, name, dtype, shape):
        return self._buffer(pb.Buffer.TEMP, name, dtype, shape)

    def compute(self, name, iterators, domain, store, value, assign="="):
        """``compute name(iterators) in domain: store assign value;``. ``store``
        is ``R[i, j]``, or None for a value computation, which is returned to
        be read as ``name(i, ...)``; ``value`` may be te.sum(..., axis=...)."""
        if store is not None and store.proto.WhichOneof("node") != "index":
            raise TypeError(f"compute {name}: store to a buffer element, as R[i, j]")
        if assign not in _ASSIGN:
            raise ValueError(f"compute {name}: assign {assign!r} is not one of {list(_ASSIGN)}")
        self._comps.append((name, [v.name for v in iterators], [_expr(c) for c in domain],
                            store, _expr(value), assign, self._open[-1] if self._open else None))
        return ValueComputation(name) if store is None else None

    def definition(self):
        d = pb.OperatorDef(name=self.name, fast_math=self.fast_math)
        for p in self._params:
            d.params.add(name=p.name, **({} if p.value is None else {"value": int(p.value)}))
        d.constraints.extend(c.proto for c in self.constraints)
        for t in self._buffers:
            _add_buffer(d, t, t.kind)
        for it, domain, parent in self._loops:
            loop = d.loops.add(iterator=it)
            loop.domain.extend(e.proto for e in domain)
            if parent is not None:
                loop.parent = parent
        for name, its, domain, store, value, assign, loop in self._comps:
            c = d.computations.add(name=name, iterators=its)
            if loop is not None:
                c.loop = loop
            c.domain.extend(e.proto for e in domain)
            if store is not None:
                c.store.buffer = store.proto.index.buffer
                c.store.indices.extend(store.proto.index.indices)
                c.store.assign = _ASSIGN[assign]
            if isinstance(value, _Reduce):
                r = c.reduction
                r.op = value.op
                r.iterators.extend(a.name for a in value.axes)
                for a in value.axes:
                    r.domain.append((Var(a.name) >= a.lo).proto)
                    r.domain.append((Var(a.name) < a.hi).proto)
                r.body.CopyFrom(value.body.proto)
            else:
                c.value.CopyFrom(value.proto)
        for k in self.knobs:
            d.knobs.add(name=k.name, value=k.value, candidates=k.candidates)
        d.schedule.extend(self.schedule)
        return d


# ---------------------------------------------------------------------------
# Graphs

class Graph:
    """A graph of operators (``graph NAME { ... }``): inputs, constants, calls
    in order, outputs. Produces a kiln.v1.GraphDef::

        g = te.Graph("block")
        x = g.input("x", "f32", (1, 16, 16, 16))
        w = g.const("w", "f32", (32, 16, 3, 3), random=(1, -0.5, 0.5))
        (y,) = g.call(conv2d, [x, w], ["y"])       # conv2d: a te operator or Func
        g.output(y)
    """

    def __init__(self, name):
        self.name = name
        self._tensors, self._calls, self._ops, self._outputs = [], [], {}, []

    def input(self, name, dtype, shape):
        self._tensors.append(pb.Tensor(name=name, kind=pb.Tensor.INPUT, dtype=_dtype(dtype),
                                       shape=[int(e) for e in shape]))
        return name

    def const(self, name, dtype, shape, fill=None, random=None, values=None):
        """A constant: ``fill`` (every element), ``random=(seed, lo, hi)`` or ``values``."""
        t = pb.Tensor(name=name, kind=pb.Tensor.CONST, dtype=_dtype(dtype),
                      shape=[int(e) for e in shape])
        if fill is not None:
            t.fill = float(fill)
        elif random is not None:
            seed, lo, hi = random
            t.random.CopyFrom(pb.RandomInit(seed=int(seed), lo=float(lo), hi=float(hi)))
        elif values is not None:
            t.values.values.extend(float(v) for v in values)
        self._tensors.append(t)
        return name

    def call(self, op, args, results, **bindings):
        """``results = op(args, NAME = INT);``; returns the results' names."""
        d = op.definition() if isinstance(op, Operator) else op
        known = self._ops.setdefault(d.name, d)
        if known != d:
            raise ValueError(f"graph {self.name}: two different operators are named '{d.name}'; "
                             "a graph calls operators by name, so give them different names")
        self._calls.append(pb.GraphCall(results=list(results), op=d.name, args=list(args),
                                        bindings={k: int(v) for k, v in bindings.items()}))
        return tuple(results)

    def output(self, *names):
        self._outputs.extend(names)

    def definition(self):
        return pb.GraphDef(name=self.name, operators=list(self._ops.values()),
                           tensors=self._tensors, calls=self._calls, outputs=self._outputs)

    def operator(self):
        return pb.Operator(graph=self.definition())
