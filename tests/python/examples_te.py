"""Every operator of examples/ written with kiln.te instead of .kiln text: the
tensor-expression style (te.compute) where a box of elements says it, and
te.Func, statement by statement, where it does not."""

from kiln import te


def matmul():
    M, N, K = te.var("M", 128), te.var("N", 128), te.var("K", 128)
    A = te.placeholder((M, K), "f32", name="A")
    B = te.placeholder((K, N), "f32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    op = te.create_operator("matmul", outputs=[C], constraints=[M > 0, N > 0, K > 0],
                            params=[M, N, K])
    TI = op.knob("TI", 32, [8, 16, 32, 64])
    TJ = op.knob("TJ", 32, [8, 16, 32, 64])
    op["C_init"].tile("i", "j", TI, TJ, "io", "jo", "ii", "ji")
    op[C].tile("i", "j", TI, TJ, "io", "jo", "ii", "ji")
    op[C].reorder("io", "jo", "k", "ii", "ji")
    op[C].after("C_init", "jo")
    op[C].cache_identity(B, "jo", "stack")
    op["C_init"].tag("io", "parallel")
    op[C].tag("io", "parallel")
    op[C].tag("ji", "vectorize")
    return op


def batch_matmul():
    BATCH, M, N, K = (te.var(n, v) for n, v in (("BATCH", 4), ("M", 48), ("N", 40), ("K", 32)))
    A = te.placeholder((BATCH, M, K), "f32", name="A")
    B = te.placeholder((BATCH, K, N), "f32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((BATCH, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k),
                   name="C")
    op = te.create_operator("batch_matmul", outputs=[C],
                            constraints=[BATCH > 0, M > 0, N > 0, K > 0],
                            params=[BATCH, M, N, K])
    T = op.knob("T", 16, [8, 16, 32])
    for cmd in (("C_init", "fuse", "b", "i", "bi"), ("C", "fuse", "b", "i", "bi"),
                ("C", "split", "j", T, "jo", "ji"), ("C", "reorder", "jo", "k", "ji"),
                ("C", "after", "C_init", "bi"), ("C_init", "tag", "bi", "parallel"),
                ("C", "tag", "bi", "parallel"), ("C", "tag", "ji", "vectorize")):
        op.command(*cmd)
    return op


def conv2d():
    f = te.Func("conv2d")
    N, C, H, W = (f.param(n, v) for n, v in (("N", 2), ("C", 4), ("H", 10), ("W", 10)))
    F, KH, KW, P = (f.param(n, v) for n, v in (("F", 6), ("KH", 3), ("KW", 3), ("P", 1)))
    f.constraint(N > 0, C > 0, F > 0)
    I = f.input("I", "f32", (N, C, H, W))
    Wt = f.input("Wt", "f32", (F, C, KH, KW))
    OH, OW = H + 2 * P - KH + 1, W + 2 * P - KW + 1
    O = f.output("O", "f32", (N, F, OH, OW))
    f.temp("Padded", "f32", (N, C, H + 2 * P, W + 2 * P))
    n, c, h, w = te.iters("n c h w")
    pad = f.compute("pad", (n, c, h, w),
                    [0 <= n, n < N, 0 <= c, c < C, 0 <= h, h < H + 2 * P, 0 <= w, w < W + 2 * P],
                    None,
                    te.select((P <= h) & (h < H + P) & (P <= w) & (w < W + P),
                              I[n, c, h - P, w - P], 0.0))
    ff, y, x = te.iters("f y x")
    rc, ky, kx = (te.reduce_axis((0, e), name=nm) for nm, e in (("c", C), ("ky", KH), ("kx", KW)))
    f.compute("O", (n, ff, y, x), [0 <= n, n < N, 0 <= ff, ff < F, 0 <= y, y < OH, 0 <= x, x < OW],
              O[n, ff, y, x],
              te.sum(pad(n, rc, y + ky, x + kx) * Wt[ff, rc, ky, kx], axis=[rc, ky, kx]))
    TX = f.knob("TX", 4, [2, 4, 8])
    f["O_init"].split("x", TX, "xo", "xi")
    f["O"].split("x", TX, "xo", "xi")
    f["O"].reorder("xo", "c", "ky", "kx", "xi")
    f["O"].after("O_init", "xo")
    f["O_init"].tag("f", "parallel")
    f["O"].tag("f", "parallel")
    f["O"].tag("xi", "vectorize")
    return f


def trmm():
    f = te.Func("trmm")
    M, N = f.param("M", 40), f.param("N", 24)
    f.constraint(M > 0, N > 0)
    A = f.input("A", "f64", (M, M))
    B = f.input("B", "f64", (M, N))
    R = f.output("R", "f64", (M, N))
    i, j, k = te.iters("i j k")
    box = [0 <= i, i < M, 0 <= j, j < N]
    f.compute("R_init", (i, j), box, R[i, j], B[i, j])
    f.compute("upd", (i, j, k), box + [i < k, k < M], R[i, j], A[k, i] * B[k, j], assign="+=")
    f.compute("scale", (i, j), box, R[i, j], 1.5 * R[i, j])
    f["upd"].reorder("i", "k", "j")
    f["upd"].split("j", 8, "jo", "ji")
    f["upd"].tag("i", "parallel")
    f["upd"].tag("ji", "vectorize")
    f["scale"].tag("i", "parallel")
    return f


def heat2d():
    f = te.Func("heat2d")
    T, N = f.param("T", 4), f.param("N", 12)
    f.constraint(T > 0, N > 2)
    A0 = f.input("A0", "f64", (N, N))
    A = f.output("A", "f64", (N, N))
    t, i, j = te.iters("t i j")
    f.compute("init", (i, j), [0 <= i, i < N, 0 <= j, j < N], A[i, j], A0[i, j])
    f.compute("step", (t, i, j), [0 <= t, t < T, 1 <= i, i < N - 1, 1 <= j, j < N - 1], A[i, j],
              0.2 * (A[i, j] + A[i - 1, j] + A[i + 1, j] + A[i, j - 1] + A[i, j + 1]))
    f["step"].skew("t", "j", 2)
    f["step"].skew("i", "j", 1)
    f["step"].reorder("j", "t", "i")
    f["step"].tag("t", "parallel")
    return f


def jacobi2d():
    f = te.Func("jacobi2d")
    T, N = f.param("T", 10), f.param("N", 64)
    f.constraint(T > 0, N > 2)
    A = f.output("A", "f32", (N, N))
    B = f.output("B", "f32", (N, N))
    t, i, j = te.iters("t i j")
    inside = [1 <= i, i < N - 1, 1 <= j, j < N - 1]
    with f.loop(t, [0 <= t, t < T]):
        f.compute("s1", (i, j), inside, B[i, j],
                  0.2 * (A[i, j] + A[i, j - 1] + A[i, j + 1] + A[i + 1, j] + A[i - 1, j]))
        f.compute("s2", (i, j), inside, A[i, j],
                  0.2 * (B[i, j] + B[i, j - 1] + B[i, j + 1] + B[i + 1, j] + B[i - 1, j]))
    TT = f.knob("TT", 8, [4, 8, 16, 32])
    TI = f.knob("TI", 32, [8, 16, 32, 64, 128])
    f["s1"].skew("t", "i", 2)
    f["s2"].skew("t", "i", 2)
    f["s2"].shift("i", 1)
    f["s1"].tile("t", "i", TT, TI, "to", "io", "ti", "ii")
    f["s2"].tile("t", "i", TT, TI, "to", "io", "ti", "ii")
    f["s2"].after("s1", "ii")
    f["s1"].tag("j", "vectorize")
    f["s2"].tag("j", "vectorize")
    return f


def lu():
    f = te.Func("lu")
    N = f.param("N", 64)
    f.constraint(N > 0)
    M = f.input("M", "f32", (N, N))
    A = f.output("A", "f32", (N, N))
    i, j, k = te.iters("i j k")
    f.compute("init", (i, j), [0 <= i, i < N, 0 <= j, j < N], A[i, j],
              te.select(i == j, M[i, j] + te.cast("f32", N), M[i, j]))
    with f.loop(i, [0 <= i, i < N]):
        with f.loop(j, [0 <= j, j < i]):
            f.compute("s1", (k,), [0 <= k, k < j], A[i, j], A[i, k] * A[k, j], assign="-=")
            f.compute("s2", (), [], A[i, j], A[i, j] / A[j, j])
        with f.loop(j, [i <= j, j < N]):
            f.compute("s3", (k,), [0 <= k, k < i], A[i, j], A[i, k] * A[k, j], assign="-=")
    f["s3"].reorder("i", "k", "j")
    f["s3"].tag("j", "vectorize")
    return f


def spmm():
    f = te.Func("spmm")
    m, n, p, nnz = (f.param(nm, v) for nm, v in (("m", 24), ("n", 16), ("p", 20), ("nnz", 96)))
    f.constraint(m > 0, n > 0)
    ptr = f.input("ptr", "i32", (m + 1,), values=(0, nnz), sorted=True)
    idx = f.input("idx", "i32", (nnz,), values=(0, p), hi_inclusive=False)
    val = f.input("val", "f32", (nnz,))
    B = f.input("B", "f32", (p, n))
    Y = f.output("Y", "f32", (m, n))
    i, k, j = te.iters("i k j")
    f.compute("Y_init", (i, j), [0 <= i, i < m, 0 <= j, j < n], Y[i, j], 0.0)
    f.compute("Y", (i, k, j), [0 <= i, i < m, ptr[i] <= k, k < ptr[i + 1], 0 <= j, j < n],
              Y[i, j], val[k] * B[idx[k], j], assign="+=")
    f["Y"].split("k", 8, "ko", "ki")
    f["Y"].cache_identity("val", "ko", "stack")
    f["Y"].cache_identity("idx", "ko", "stack")
    f["Y_init"].tag("i", "parallel")
    f["Y"].tag("i", "parallel")
    f["Y"].tag("j", "vectorize")
    return f


def segment_sum():
    f = te.Func("segment_sum")
    m, nnz = f.param("m"), f.param("nnz", 200)
    f.constraint(m > 0)
    offsets = f.input("offsets", "i32", (m + 1,), values=(0, nnz), sorted=True)
    x = f.input("x", "f32", (nnz,))
    y = f.output("y", "f32", (m,))
    i, j = te.iters("i j")
    f.compute("y_init", (i,), [0 <= i, i < m], y[i], 0.0)
    f.compute("acc", (i, j), [0 <= i, i < m, offsets[i] <= j, j < offsets[i + 1]], y[i], x[j],
              assign="+=")
    f["acc"].after("y_init", "i")
    for c in ("y_init", "acc"):
        f[c].separate("i", 4)
    for c in ("y_init", "acc"):
        f[c].split("i", 4, "io", "ii")
    for c in ("y_init", "acc"):
        f[c].tag("io", "parallel")
    return f


def histogram():
    f = te.Func("histogram")
    n, bins = f.param("n", 100000), f.param("bins", 256)
    f.constraint(n > 0)
    bin_ = f.input("bin", "i32", (n,), values=(0, bins), hi_inclusive=False)
    w = f.input("w", "f32", (n,))
    hist = f.output("hist", "f32", (bins,))
    b, k = te.iters("b k")
    f.compute("h_init", (b,), [0 <= b, b < bins], hist[b], 0.0)
    f.compute("h", (k,), [0 <= k, k < n], hist[bin_[k]], w[k], assign="+=")
    chunk = f.knob("CHUNK", 16384, [256, 1024, 4096, 16384, 65536])
    f["h"].split("k", chunk, "ko", "ki")
    f["h"].tag("ko", "parallel")
    f["h"].privatize("ko")
    return f


def conv_bn_relu():
    """The graph `block` of examples/conv_bn_relu.kiln and its four operators."""
    conv = te.Func("conv2d")
    I = conv.input("I", "f32", (1, 16, 16, 16))
    Wt = conv.input("Wt", "f32", (32, 16, 3, 3))
    O = conv.output("O", "f32", (1, 32, 14, 14))
    n, f_, y, x = te.iters("n f y x")
    c, ky, kx = te.reduce_axis((0, 16), "c"), te.reduce_axis((0, 3), "ky"), te.reduce_axis((0, 3), "kx")
    conv.compute("O", (n, f_, y, x), [0 <= n, n < 1, 0 <= f_, f_ < 32, 0 <= y, y < 14, 0 <= x,
                                      x < 14],
                 O[n, f_, y, x], te.sum(I[n, c, y + ky, x + kx] * Wt[f_, c, ky, kx],
                                        axis=[c, ky, kx]))
    TX = conv.knob("TX", 7, [2, 7, 14])
    for cmd in (("O_init", "split", "x", TX, "xo", "xi"), ("O", "split", "x", TX, "xo", "xi"),
                ("O", "reorder", "xo", "c", "ky", "kx", "xi"), ("O", "after", "O_init", "xo"),
                ("O_init", "tag", "f", "parallel"), ("O", "tag", "f", "parallel"),
                ("O", "tag", "xi", "vectorize")):
        conv.command(*cmd)

    bn = te.Func("bn_coefficients")
    gamma, beta, mean, var = (bn.input(nm, "f32", (32,)) for nm in ("gamma", "beta", "mean", "var"))
    scale, shift = bn.output("scale", "f32", (32,)), bn.output("shift", "f32", (32,))
    (ff,) = te.iters("f")
    bn.compute("s", (ff,), [0 <= ff, ff < 32], scale[ff], gamma[ff] / te.sqrt(var[ff] + 1e-5))
    bn.compute("t", (ff,), [0 <= ff, ff < 32], shift[ff], beta[ff] - mean[ff] * scale[ff])

    affine = te.Func("channel_affine")
    X = affine.input("X", "f32", (1, 32, 14, 14))
    sc, sh = affine.input("scale", "f32", (32,)), affine.input("shift", "f32", (32,))
    Y = affine.output("Y", "f32", (1, 32, 14, 14))
    n, f_, h, w = te.iters("n f h w")
    box = [0 <= n, n < 1, 0 <= f_, f_ < 32, 0 <= h, h < 14, 0 <= w, w < 14]
    affine.compute("y", (n, f_, h, w), box, Y[n, f_, h, w], X[n, f_, h, w] * sc[f_] + sh[f_])

    relu = te.Func("relu")
    RX = relu.input("X", "f32", (1, 32, 14, 14))
    RY = relu.output("Y", "f32", (1, 32, 14, 14))
    relu.compute("r", (n, f_, h, w), box, RY[n, f_, h, w], te.max(RX[n, f_, h, w], 0.0))

    g = te.Graph("block")
    g.input("x", "f32", (1, 16, 16, 16))
    for name, shape, seed, lo, hi in (("w", (32, 16, 3, 3), 1, -0.5, 0.5),
                                      ("gamma", (32,), 2, 0.5, 1.5), ("beta", (32,), 3, -0.1, 0.1),
                                      ("mean", (32,), 4, -0.2, 0.2), ("var", (32,), 5, 0.5, 2.0)):
        g.const(name, "f32", shape, random=(seed, lo, hi))
    g.call(bn, ["gamma", "beta", "mean", "var"], ["scale", "shift"])
    g.call(conv, ["x", "w"], ["y"])
    g.call(affine, ["y", "scale", "shift"], ["z"])
    g.call(relu, ["z"], ["r"])
    g.output("r")
    return g


# The example file and func or graph name each builder stands for.
EXAMPLES = {
    ("matmul", "matmul"): matmul,
    ("batch_matmul", "batch_matmul"): batch_matmul,
    ("conv2d", "conv2d"): conv2d,
    ("trmm", "trmm"): trmm,
    ("heat2d", "heat2d"): heat2d,
    ("jacobi2d", "jacobi2d"): jacobi2d,
    ("lu", "lu"): lu,
    ("spmm", "spmm"): spmm,
    ("segment_sum", "segment_sum"): segment_sum,
    ("histogram", "histogram"): histogram,
    ("conv_bn_relu", "block"): conv_bn_relu,
}
