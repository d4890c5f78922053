"""vectorize_loops: the iterations of an unrolled Python loop batched back into array ops."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.optim import vectorize_loops
from kiln.optim.pipeline import default_pipeline

from .graphs import ops, run, traced

RNG = np.random.default_rng(7)


def optimized(fn, *args, defaults=None):
    """The recorded graph after the default pipeline (vectorize_loops included)."""
    g = traced(fn, *args)
    g.optimize(defaults=defaults)
    g.verify()
    return g


def distance_matrix(x):
    n = x.shape[0]
    D = np.zeros((n, n), x.dtype)
    for i in range(n):
        D[i] = np.sqrt(((x - x[i]) ** 2).sum(axis=1))
    return D


def row_normalize(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] / x[i].sum()
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [3, 4, 17])
def test_distance_matrix_has_no_per_row_nodes(dtype, n):
    x = RNG.standard_normal((n, 3)).astype(dtype)
    g = optimized(distance_matrix, x)
    assert len(g.nodes) <= 7, ops(g)  # a Gather, then the body once (a C-ordered sum)
    assert "Concat" not in ops(g) and ops(g).count("Sqrt") == 1
    y = RNG.standard_normal((n, 3)).astype(dtype)
    got = run(g, y)[0]
    np.testing.assert_array_equal(got, distance_matrix(y), strict=True)


def l1_between_columns(c):  # fuzz 38:3804: the rows of a transpose, each a strided view
    t = np.swapaxes(np.concatenate([c, c], axis=-2), 0, -1)
    return np.array([[np.abs(t[i] - t[j]).sum() for j in range(len(t))] for i in range(len(t))])


def weighted_by_columns(a):  # fuzz 40:3985: each product is laid out as the transpose is
    t0 = np.swapaxes(a, 0, -1)
    t1 = np.dot(a, t0)
    t2 = np.logical_or(t0, t0)
    return np.array([(t1[i] * t2).sum() for i in range(len(t1))])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn", [l1_between_columns, weighted_by_columns])
def test_a_batched_sum_adds_in_each_iterations_order(dtype, fn):
    # each iteration summed a fresh array in its memory order (pairwise); the batch, laid
    # out as its strided inputs, would be summed across rows: each batch element is laid
    # out as that iteration's array was first (kiln.Contiguous)
    c = RNG.uniform(-4, 4, (5, 4)).astype(dtype)
    g = optimized(fn, c)
    assert "kiln.Contiguous" in ops(g) and ops(g).count("ReduceSum") == 1, ops(g)
    for _ in range(20):
        y = RNG.uniform(-4, 4, (5, 4)).astype(dtype)
        np.testing.assert_array_equal(run(g, y)[0], fn(y), strict=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_loop_matches_numpy_bit_for_bit(dtype):
    x = RNG.uniform(0.1, 1.0, (9, 64)).astype(dtype)
    g = optimized(row_normalize, x)
    assert ops(g).count("ReduceSum") == 1 and "Concat" not in ops(g)
    y = RNG.uniform(0.1, 1.0, (9, 64)).astype(dtype)
    np.testing.assert_array_equal(run(g, y)[0], row_normalize(y), strict=True)


def test_compiled_function_serves_the_batched_graph():
    f = kiln.compile(row_normalize)
    for _ in range(3):
        x = RNG.uniform(0.1, 1.0, (6, 5))
        got = f(x)
        assert isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got, row_normalize(x), strict=True)
    assert ops(f.take_graph()).count("Div") == 1


def test_a_different_first_iteration_keeps_its_part():
    def fn(x):
        out = np.empty_like(x)
        out[0] = x[0]
        for i in range(1, x.shape[0]):
            out[i] = x[i] * 2.0 + x[i - 1]
        return out

    x = RNG.standard_normal((7, 4))
    g = optimized(fn, x)
    assert ops(g).count("Mul") == 1 and ops(g).count("Add") == 1
    y = RNG.standard_normal((7, 4))
    np.testing.assert_array_equal(run(g, y)[0], fn(y), strict=True)


def test_columns_stacked_along_an_inner_axis():
    def fn(x):
        return np.stack([np.tanh(x[:, j]) * 3.0 for j in range(x.shape[1])], axis=1)

    x = RNG.standard_normal((5, 6)).astype(np.float32)
    g = optimized(fn, x)
    assert ops(g).count("Tanh") == 1
    y = RNG.standard_normal((5, 6)).astype(np.float32)
    np.testing.assert_array_equal(run(g, y)[0], fn(y), strict=True)


def test_blocks_of_unequal_length_batch_the_equal_ones():
    def fn(x):
        return np.stack([x[i : i + 3].mean(axis=0) for i in range(0, x.shape[0], 3)])

    x = RNG.standard_normal((10, 4))  # blocks of 3, 3, 3 and a last one of 1
    g = optimized(fn, x)
    assert ops(g).count("ReduceMean") == 2  # the batch of three, and the short block
    y = RNG.standard_normal((10, 4))
    np.testing.assert_allclose(run(g, y)[0], fn(y), rtol=1e-15, atol=0)
    np.testing.assert_array_equal(run(g, y)[0], fn(y), strict=True)


def test_nested_loop_fills_without_per_element_nodes():
    def fn(x):
        n = x.shape[0]
        D = np.zeros((n, n))
        for i in range(n):
            for j in range(n):
                D[i, j] = np.abs(x[i] - x[j]).max()
        return D

    x = RNG.standard_normal((6, 3))
    g = optimized(fn, x)
    assert ops(g).count("ReduceMax") == 1, ops(g)
    y = RNG.standard_normal((6, 3))
    np.testing.assert_array_equal(run(g, y)[0], fn(y), strict=True)


def test_matrix_products_batch_bit_for_bit():
    def fn(x, w):
        return np.array([np.tanh(row @ w) for row in x])

    x, w = RNG.standard_normal((8, 64)), RNG.standard_normal(64)
    g = optimized(fn, x, w)
    assert ops(g).count("MatMul") == 1
    y, v = RNG.standard_normal((8, 64)), RNG.standard_normal(64)
    np.testing.assert_array_equal(run(g, y, v)[0], fn(y, v), strict=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dot_products_in_a_double_loop_batch_bit_for_bit(dtype):
    # np.dot is kiln.Dot (NumPy's own dot); its rule batches vector dots into one MatMul whose
    # loop makes the very BLAS call np.dot makes, infinities and zeros included
    def fn(x, y):
        d = np.empty((x.shape[0], y.shape[0]), x.dtype)
        for i in range(x.shape[0]):
            for j in range(y.shape[0]):
                d[i, j] = np.dot(x[i], y[j])
        return d

    x, y = RNG.standard_normal((7, 5)).astype(dtype), RNG.standard_normal((6, 5)).astype(dtype)
    g = optimized(fn, x, y)
    assert ops(g).count("MatMul") == 1 and "kiln.Dot" not in ops(g), ops(g)
    x[1, 2], x[3, :] = np.inf, -0.0
    y[2, 2], y[4, :] = 0.0, np.nan
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(run(g, x, y)[0], fn(x, y), strict=True)


def test_dot_of_one_product_is_not_batched():
    # np.dot of length-1 vectors is the bare product (-0.0 * 1 is -0.0); a MatMul adds it
    # to +0.0, so the loop keeps its per-iteration dots
    def fn(x, y):
        return np.array([np.dot(x[i], y[i]) for i in range(x.shape[0])])

    x, y = -np.zeros((4, 1)), np.ones((4, 1))
    g = optimized(fn, x, y)
    assert "MatMul" not in ops(g)
    np.testing.assert_array_equal(np.signbit(run(g, x, y)[0]), np.signbit(fn(x, y)))


def test_iterations_that_differ_are_left_alone():
    def fn(x):
        return np.concatenate([np.exp(x[0:1]), np.tanh(x[1:2]), np.sin(x[2:3]), x[3:4] * 2])

    x = RNG.standard_normal((4, 3))
    g = traced(fn, x)
    g.optimize([p for p in default_pipeline() if p is not vectorize_loops])
    out, n = vectorize_loops(g)
    assert n == 0 and out is g


def test_a_recurrence_is_not_batched():
    def fn(x):
        rows = [x[0]]
        for _ in range(5):
            rows.append(rows[-1] * 0.5 + 1.0)
        return np.stack(rows)

    x = RNG.standard_normal((2, 3))
    g = optimized(fn, x)
    assert ops(g).count("Mul") == 5  # each row needs the one before
    y = RNG.standard_normal((2, 3))
    np.testing.assert_array_equal(run(g, y)[0], fn(y), strict=True)


def test_random_draws_in_a_loop_stay_per_iteration():
    def fn(x):
        return np.stack([x[i] + np.random.standard_normal(3) for i in range(4)])

    f = kiln.compile(fn)
    x = RNG.standard_normal((4, 3))
    np.random.seed(3)
    f(x)
    np.random.seed(5)
    got = f(x)
    np.random.seed(5)
    np.testing.assert_array_equal(got, fn(x), strict=True)


def test_pass_is_idempotent_and_verifies():
    x = RNG.standard_normal((5, 3))
    g = traced(distance_matrix, x)
    g.optimize([p for p in default_pipeline() if p is not vectorize_loops])
    once, n = vectorize_loops(g)
    once.verify()
    assert n == 1
    assert vectorize_loops(once)[1] == 0


def test_empty_rows_and_single_column():
    x = np.zeros((4, 0))
    g = optimized(row_normalize, x)
    np.testing.assert_array_equal(run(g, np.zeros((4, 0)))[0], row_normalize(np.zeros((4, 0))))
    x = RNG.uniform(0.1, 1, (4, 1)).astype(np.float32)
    g = optimized(row_normalize, x)
    np.testing.assert_array_equal(run(g, x)[0], row_normalize(x), strict=True)


def test_blocks_varying_along_two_axes():
    def local_max(grid):
        h, w = grid.shape
        out = np.empty((h - 2, w - 2), grid.dtype)
        for i, j in np.ndindex(h - 2, w - 2):
            out[i, j] = grid[i : i + 3, j : j + 3].max()
        return out

    grid = RNG.standard_normal((6, 7)).astype(np.float32)
    g = optimized(local_max, grid)
    assert ops(g).count("ReduceMax") == 1, ops(g)
    other = RNG.standard_normal((6, 7)).astype(np.float32)
    np.testing.assert_array_equal(run(g, other)[0], local_max(other), strict=True)


def test_three_d_blocks_with_a_shared_axis():
    def fn(v):
        return np.stack([v[:, i : i + 2, ::2].sum(axis=(1, 2)) for i in range(v.shape[1] - 1)])

    v = RNG.standard_normal((3, 5, 4))
    g = optimized(fn, v)
    assert ops(g).count("ReduceSum") == 1, ops(g)
    other = RNG.standard_normal((3, 5, 4))
    np.testing.assert_array_equal(run(g, other)[0], fn(other), strict=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_running_sum_stored_row_by_row_is_one_cumsum(dtype):
    def fn(x):
        out = np.empty_like(x)
        out[0] = x[0]
        for i in range(1, x.shape[0]):
            out[i] = out[i - 1] + x[i] * 2
        return out

    x = (RNG.standard_normal((12, 5)) * 100).astype(dtype)
    g = optimized(fn, x)
    assert ops(g).count("CumSum") == 1 and ops(g).count("Add") == 0, ops(g)
    other = (RNG.standard_normal((12, 5)) * 100).astype(dtype)
    np.testing.assert_array_equal(run(g, other)[0], fn(other), strict=True)


def test_running_sum_of_a_shared_step():
    def fn(x):
        rows = [x]
        for _ in range(6):
            rows.append(rows[-1] + 0.1)
        return np.stack(rows)

    x = RNG.standard_normal(4)
    g = optimized(fn, x)
    assert ops(g).count("CumSum") == 1, ops(g)
    other = RNG.standard_normal(4)
    np.testing.assert_array_equal(run(g, other)[0], fn(other), strict=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_accumulation_into_one_value_is_summed_in_the_loop_order(dtype):
    def fn(x, w):
        total = np.zeros(x.shape[1], x.dtype)
        for i in range(x.shape[0]):
            total = total + x[i] * w[i]
        return total

    x = (RNG.standard_normal((40, 6)) * 100).astype(dtype)
    w = (RNG.standard_normal(40) * 10).astype(dtype)
    g = optimized(fn, x, w)
    # The total alone: one sum over the stacked rows (NumPy adds them one by one).
    assert ops(g).count("Add") == 0 and ops(g).count("ReduceSum") == 1, ops(g)
    assert "CumSum" not in ops(g), ops(g)
    x2 = (RNG.standard_normal((40, 6)) * 100).astype(dtype)
    w2 = (RNG.standard_normal(40) * 10).astype(dtype)
    np.testing.assert_array_equal(run(g, x2, w2)[0], fn(x2, w2), strict=True)


def test_accumulation_of_scalars_from_zero():
    def fn(x):
        total = 0.0
        for i in range(x.shape[0]):
            total += x[i] ** 2
        return total

    x = RNG.standard_normal(25)
    g = optimized(fn, x)
    assert ops(g).count("CumSum") == 1, ops(g)
    other = RNG.standard_normal(25)
    np.testing.assert_array_equal(run(g, other)[0], fn(other), strict=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("columns", [1, 2, 33])
def test_a_long_accumulation_adds_in_the_loop_order_not_pairwise(dtype, columns):
    # Terms of wildly different magnitudes: a pairwise sum (NumPy's along a contiguous axis)
    # rounds differently from the loop's one-by-one additions.
    def fn(x):
        total = np.zeros(x.shape[1:], x.dtype)
        for i in range(x.shape[0]):
            total += x[i]
        return total

    def data():
        return RNG.standard_normal((300, columns)) * 10.0 ** RNG.integers(-6, 6, (300, 1))

    x = data().astype(dtype)
    g = optimized(fn, x)
    assert ops(g).count("Add") == 0, ops(g)
    # One column: the running sums and their last (a sum over one column would be pairwise).
    assert ops(g).count("CumSum" if columns == 1 else "ReduceSum") == 1, ops(g)
    for _ in range(5):
        other = data().astype(dtype)
        np.testing.assert_array_equal(run(g, other)[0], fn(other), strict=True)


def test_an_accumulation_of_negative_zeros_starts_from_the_initial_zero():
    def fn(x):
        total = np.zeros(3)
        for i in range(x.shape[0]):
            total += x[i]
        return total

    x = np.full((10, 3), -0.0)
    g = optimized(fn, x)
    got = run(g, x)[0]
    np.testing.assert_array_equal(np.signbit(got), np.signbit(fn(x)))  # 0.0 + -0.0 is 0.0


FOLDS = {
    "multiply": (lambda acc, t: acc * t, "ReduceProd", 1),
    "maximum": (np.maximum, "ReduceMax", -np.inf),
    "minimum": (np.minimum, "ReduceMin", np.inf),
}
SPECIAL = np.array([0.0, -0.0, np.nan, 1.0, -1.0, np.inf, -np.inf, 0.5, 2.0])


@pytest.mark.parametrize("kind", list(FOLDS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("columns", [1, 3])
def test_accumulations_fold_into_one_reduction(kind, dtype, columns):
    combine, reduce, start = FOLDS[kind]
    is_float = np.dtype(dtype).kind == "f"

    def fn(x):
        acc = np.full(x.shape[1:], start if is_float else 1, x.dtype)
        for i in range(x.shape[0]):
            acc = combine(acc, x[i])
        return acc

    def data():
        if is_float:  # signed zeros, NaN and infinities: the bits must be the loop's
            return RNG.choice(SPECIAL, (20, columns)).astype(dtype)
        return RNG.integers(-3, 4, (20, columns)).astype(dtype)

    with np.errstate(all="ignore"):
        g = optimized(fn, data())
        ops_ = ops(g)
        # A float reduction over one column would run along its contiguous axis: left as is.
        if columns == 1 and is_float:
            assert reduce not in ops_, ops_
        else:
            assert ops_.count(reduce) == 1 and len(ops_) < 8, ops_
        for _ in range(5):
            x = data()
            got, want = run(g, x)[0], fn(x)
            np.testing.assert_array_equal(got, want, strict=True)
            assert np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("kind", ["and", "or"])
def test_boolean_accumulations_fold_into_all_and_any(kind):
    def fn(b):
        acc = np.full(b.shape[1:], kind == "and")
        for i in range(b.shape[0]):
            if kind == "and":
                acc &= b[i]
            else:
                acc = acc | b[i]
        return acc

    b = RNG.random((12, 5)) < 0.8
    g = optimized(fn, b)
    assert ops(g).count("ReduceMin" if kind == "and" else "ReduceMax") == 1, ops(g)
    for _ in range(5):
        b = RNG.random((12, 5)) < (0.9 if kind == "and" else 0.1)
        np.testing.assert_array_equal(run(g, b)[0], fn(b), strict=True)


def test_an_intermediate_sum_read_elsewhere_keeps_the_chain():
    def fn(x):
        total = x[0]
        for i in range(1, 5):
            total = total + x[i]
        half = total * 0.5
        for i in range(5, 8):
            total = total + x[i]
        return total, half

    x = RNG.standard_normal((8, 3))
    g = optimized(fn, x)
    other = RNG.standard_normal((8, 3))
    for got, want in zip(run(g, other), fn(other)):
        np.testing.assert_array_equal(got, want, strict=True)


def test_a_short_sum_of_big_slices_stays_added():
    def stencil(u):
        return u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]

    g = optimized(stencil, RNG.standard_normal((6, 6)))
    assert "CumSum" not in ops(g) and ops(g).count("Add") == 3


def test_a_loop_updating_two_arrays_row_by_row():
    def step(pos, vel):
        for p in range(pos.shape[0]):
            vel[p] = vel[p] * 0.99 - pos[p] * 0.01
            pos[p] += vel[p] * 0.01

    f = kiln.compile(step)
    for n in (6, 6, 6):
        pos, vel = RNG.standard_normal((n, 2)), RNG.standard_normal((n, 2))
        want_pos, want_vel = pos.copy(), vel.copy()
        step(want_pos, want_vel)
        assert f(pos, vel) is None
        np.testing.assert_array_equal(pos, want_pos, strict=True)
        np.testing.assert_array_equal(vel, want_vel, strict=True)
    g = f.take_graph()
    assert "kiln.SliceUpdate" not in ops(g) and ops(g).count("Add") == 1, ops(g)


def test_columns_of_a_batch_that_drifts_to_empty():
    """Fuzz 23:925: a loop over the columns of a dynamic, then empty, batch axis."""

    def fn(a):
        last = a[..., -1]
        return np.stack([np.trunc(a[:, j]) / last for j in range(a.shape[1])], axis=1)

    f = kiln.compile(fn)
    for rows in (5, 5, 0, 0, 3):
        a = RNG.standard_normal((rows, 4))
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(f(a), fn(a), strict=True)


def _pairwise_runs(matcher, parts, vl):
    """The runs as matching each pair of neighbours finds them (what _runs must agree with)."""
    runs, start = [], 0
    for i in range(1, len(parts) + 1):
        if i < len(parts) and isinstance(matcher.match([parts[i - 1], parts[i]]), vl._Batched):
            continue
        if i - start >= vl.MIN_ITERATIONS:
            runs.append((start, i))
        start = i
    return runs


def repeated_iteration(x):
    parts = []
    shared = x + 2.0
    for i in range(6):
        # iterations 2 and 3 compute exp(shared) twice (two nodes, one input): as a pair they
        # are one computation, not a batch
        parts.append(np.exp(shared if i in (2, 3) else x + float(i)))
    return np.concatenate(parts)


@pytest.mark.parametrize("fn", [repeated_iteration, distance_matrix, row_normalize])
def test_runs_read_from_the_whole_match_agree_with_pairwise_matching(fn):
    """_runs matches all parts at once and reads from that match which neighbours match as
    a pair; the runs must be those that matching every pair finds (repeated_iteration: two
    neighbours computing the same thing end a run)."""
    import importlib

    from kiln.optim.transform import DefaultsOptions

    vl = importlib.import_module("kiln.optim.vectorize_loops")
    x = RNG.standard_normal((5, 3)) if fn is not repeated_iteration else RNG.standard_normal(4)
    g = traced(fn, x)
    for t in default_pipeline()[: [t.name for t in default_pipeline()].index("vectorize_loops")]:
        if fn is repeated_iteration and t.name == "eliminate_common_subexpressions":
            continue  # it would merge the two exp(shared)
        g, _ = t(g)
    concats = [n for n in g.nodes if n.op == "Concat" and len(n.inputs) >= vl.MIN_ITERATIONS]
    assert concats
    for node in concats:
        parts = [v for v in node.inputs if v is not None]
        options = DefaultsOptions()
        expected = _pairwise_runs(vl._Matcher(g, options), parts, vl)
        assert vl._runs(vl._Matcher(g, options), parts) == expected
        if fn is repeated_iteration:
            assert expected and expected != [(0, len(parts))]


def test_alike_compares_attributes_as_values_where_their_keys_differ():
    """Signatures make alike nodes cheap to compare; nodes whose attributes are equal values
    of other types (1 and True) are still compared as the attributes themselves are."""
    import importlib

    from kiln.ir.graph import Node, Value
    from kiln.ops.registry import TensorType
    from kiln.optim.transform import DefaultsOptions

    vl = importlib.import_module("kiln.optim.vectorize_loops")
    g = traced(lambda x: x + 1.0, np.ones(3))
    t = TensorType(np.dtype("float64"), (3,))
    x = g.input_values[0]
    nodes = [
        Node("Softmax", (x,), (Value(f"s{k}", t),), attrs, f"s{k}")
        for k, attrs in enumerate([{"axis": 1}, {"axis": True}, {"axis": 1}, {"axis": 2}])
    ]
    m = vl._Matcher(g, DefaultsOptions())
    made = [(n, 0) for n in nodes]
    assert m._alike(nodes[:3], made[:3], 0)
    assert not m._alike(nodes, made, 0)
    assert m.signature(nodes[0]) is m.signature(nodes[2])


# NumPy rounds some functions differently on contiguous and strided operands (SIMD and scalar
# loops: kiln.ops.layout). Each iteration below reads one element or a row (contiguous), but
# the batch of them is a reversed view or a transpose: batched as it is, NumPy would take the
# strided loop (fuzz 45:18: np.arctan over b[::-1], an ulp off).
def atan_of_reversed_elements(b):
    t0 = b[::-1]
    return np.stack([np.arctan(t0[i]) for i in range(len(t0))])


def exp_of_reversed_rows(m):
    t = m[::-1]
    return np.stack([np.exp(t[i]) * 2 for i in range(len(t))])


def power_of_transposed_rows(m):
    t = m.T
    return np.stack([np.power(t[i], 1.7) for i in range(len(t))])


def arctan_of_columns(m):  # each iteration reads a strided column itself: NumPy's scalar loop
    return np.stack([np.arctan(m[:, j]) + 1 for j in range(m.shape[1])])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "fn",
    [atan_of_reversed_elements, exp_of_reversed_rows, power_of_transposed_rows, arctan_of_columns],
)
def test_layout_sensitive_functions_batch_bit_for_bit(dtype, fn):
    shape = (64,) if fn is atan_of_reversed_elements else (12, 40)
    x = RNG.uniform(-3, 3, shape).astype(dtype)
    if fn is power_of_transposed_rows:
        x = np.abs(x)
    g = optimized(fn, x)
    for _ in range(5):
        y = RNG.uniform(-3, 3, shape).astype(dtype)
        if fn is power_of_transposed_rows:
            y = np.abs(y)
        np.testing.assert_array_equal(run(g, y)[0], fn(y), strict=True)


def test_a_layout_sensitive_function_of_contiguous_iterations_still_batches():
    x = RNG.uniform(-3, 3, 64)
    g = optimized(atan_of_reversed_elements, x)
    assert ops(g).count("Atan") == 1 and "kiln.Contiguous" in ops(g), ops(g)


def l1_between_rows_of_a_swap(a):  # fuzz 46:3286
    t2 = np.swapaxes(a, 0, -1)
    return np.array([[np.abs(t2[i] - t2[j]).sum() for j in range(len(t2))] for i in range(len(t2))])


def test_rows_read_in_order_along_a_dynamic_axis_stay_a_view():
    # Each t2[j] is a view laid out as the swap is (its difference F-ordered, so summed in
    # that order); reading them all as a Gather made C-ordered copies, and the sums of a
    # batch of them, after the batch axis went dynamic, added in another order.
    f = kiln.compile(l1_between_rows_of_a_swap)
    for batch in (3, 3, 6, 6, 7):
        a = RNG.uniform(-4, 4, (batch, 2, 5)) * 10.0 ** RNG.integers(-3, 4, (batch, 2, 5))
        np.testing.assert_array_equal(f(a), l1_between_rows_of_a_swap(a), strict=True)
    graph = f.take_graph()
    assert "Gather" not in ops(graph), ops(graph)


@pytest.mark.parametrize(
    ("dtype", "folds"),
    [(np.int8, True), (np.uint8, True), (np.float16, True), (np.int16, False), (np.uint16, False)],
)
def test_an_extremum_chain_folds_only_into_a_reduction_that_takes_its_dtype(dtype, folds):
    def fn(x):
        best = x[0]
        for i in range(1, x.shape[0]):
            best = np.maximum(best, x[i])
        return best

    x = (RNG.standard_normal((12, 4)) * 50).astype(dtype)
    g = optimized(fn, x)  # ReduceMax takes no 16-bit integers: those chains stay as recorded
    assert ("ReduceMax" in ops(g)) is folds, ops(g)
    other = (RNG.standard_normal((12, 4)) * 50).astype(dtype)
    np.testing.assert_array_equal(run(g, other)[0], fn(other), strict=True)
