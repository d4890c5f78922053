"""``ufunc.at`` on kiln tensors (``np.add.at(h, idx, 1.0)``: unbuffered, repeated indices
accumulate in index order), eager and compiled, against NumPy itself.

Eagerly the call is NumPy's own on the tensor's array. Under ``kiln.compile`` ``np.add``,
``np.subtract``, ``np.multiply``, ``np.maximum`` and ``np.minimum`` are recorded as a
``ScatterND`` with the matching reduction when that is exactly NumPy's loop; anything else
(another ufunc, the unary form, a dtype mix that NumPy computes in a wider loop) is served
eagerly with one ``CaptureWarning``. Results must be bit-identical to NumPy (float sums in
NumPy's order), with NumPy's dtype and shape, and the caller's mutated arrays must match.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import kiln
from kiln import State
from kiln.errors import CaptureError, CaptureWarning, UnsupportedOperationError

DTYPES = ["float32", "float64", "int32", "int64", "bool"]
RECORDED = [np.add, np.subtract, np.multiply, np.maximum, np.minimum]


def data(shape: tuple[int, ...], dtype: Any, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.random(shape) > 0.5
    if kind in "iu":
        return rng.integers(-5, 6, shape).astype(dtype)
    return (3 * rng.standard_normal(shape)).astype(dtype)


def same(got: Any, want: Any, what: str = "result") -> None:
    """Bit-identical: dtype, shape, values (NaN where NumPy has NaN), signs of zeros."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    nan = want.dtype.kind in "fc"
    assert np.array_equal(got, want, equal_nan=nan), f"{what}:\n{got}\n!=\n{want}"
    if want.dtype.kind == "f":
        assert np.array_equal(np.signbit(got), np.signbit(want)), f"{what}: signed zeros"


def builtin_base(cls: type[BaseException]) -> type[BaseException]:
    return next(c for c in cls.__mro__ if c.__module__ == "builtins")


# -- eager ----------------------------------------------------------------------------------

INDICES_1D: dict[str, Any] = {
    "repeated": [0, 2, 0, 5, 2, 0],
    "negative": np.array([-1, -6, -1, 3]),
    "scalar": 4,
    "mask": np.array([True, False, True, True, False, False]),
    "slice": slice(None, None, -2),
    "empty": [],
    "out_of_bounds": [0, 6],
}


def _eager_check(ufunc: np.ufunc, base: np.ndarray, index: Any, *values: Any) -> None:
    want_arr = base.copy()
    shared = base.copy()
    t = kiln.asarray(shared)
    k_values = tuple(kiln.asarray(v) if isinstance(v, np.ndarray) else v for v in values)
    with np.errstate(all="ignore"):
        try:
            want = ufunc.at(want_arr, index, *values)
        except Exception as exc:
            with pytest.raises(builtin_base(type(exc))):
                ufunc.at(t, index, *k_values)
            same(t, want_arr, "after the refused call")
            return
        got = ufunc.at(t, index, *k_values)
    assert got is None and want is None
    same(t, want_arr)
    same(shared, want_arr, "the array the tensor wraps")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index", sorted(INDICES_1D))
@pytest.mark.parametrize("ufunc", RECORDED, ids=lambda u: u.__name__)
def test_eager_matches_numpy(ufunc: np.ufunc, index: str, dtype: str) -> None:
    idx = INDICES_1D[index]
    n = np.asarray(np.arange(6)[idx]).size if index != "out_of_bounds" else 2
    base = data((6,), dtype)
    _eager_check(ufunc, base, idx, data((n,), dtype, seed=1))  # one value per index
    _eager_check(ufunc, base, idx, data((), dtype, seed=2))  # a 0-d array, broadcast
    _eager_check(ufunc, base, idx, 3)  # a Python int
    _eager_check(ufunc, base, idx, 0.5)  # a Python float (NumPy's float64 loop)


@pytest.mark.parametrize("dtype", DTYPES)
def test_eager_two_dimensional_indices(dtype: str) -> None:
    base = data((3, 4), dtype)
    _eager_check(np.add, base, (slice(None), [0, 0, 3]), data((3, 3), dtype, 1))
    _eager_check(np.maximum, base, ([0, 2, 0], [1, 1, -1]), data((3,), dtype, 2))
    _eager_check(np.multiply, base, ([2, 2],), data((4,), dtype, 3))  # rows, broadcast
    _eager_check(np.minimum, base, base > 0, data((), dtype, 4))


def test_eager_refusals_match_numpy() -> None:
    _eager_check(np.add, data((4,), "float64"), [0, 1], np.ones(3))  # not broadcastable
    _eager_check(np.add, data((4,), "float64"), [0, 1], np.ones((1, 2)))
    _eager_check(np.subtract, data((4,), "bool"), [0, 1], True)  # no bool subtract
    _eager_check(np.add, data((4,), "int32"), [0, 4], 1)  # out of bounds


def test_eager_other_ufuncs_and_the_unary_form() -> None:
    _eager_check(np.divide, data((5,), "float64"), [0, 0, 3], 2.0)
    _eager_check(np.bitwise_xor, data((5,), "int64"), [1, 1, -1], 3)
    _eager_check(np.negative, data((5,), "float32"), [0, 0, 2])
    _eager_check(np.add, data((0,), "float64"), [], 1.0)  # size 0


# -- compiled -------------------------------------------------------------------------------


def compile_counted(target: Callable[..., Any], **options: Any) -> tuple[Any, Callable[[], int]]:
    calls = 0

    @functools.wraps(target)
    def counted(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        return target(*args)

    return kiln.compile(counted, **options), lambda: calls


def call_and_compare(fn: Callable[..., Any], target: Callable[..., Any], *args: Any) -> None:
    copies = [np.array(a, copy=True) for a in args]
    with np.errstate(all="ignore"):
        want = target(*copies)
        got = fn(*args)
    for i, (g, w) in enumerate(zip(got, want) if isinstance(want, tuple) else [(got, want)]):
        same(g, w, f"output {i}")
    for i, (a, c) in enumerate(zip(args, copies)):
        same(a, c, f"the caller's argument {i} after the call")


def run_compiled(target: Callable[..., Any], make: Callable[[int, int], tuple]) -> Any:
    """Capture (call 1), replay with new values, drift the size, replay the drifted capture:
    every call NumPy's answer, and no replay calls the Python function."""
    fn, calls = compile_counted(target)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CaptureWarning)
        call_and_compare(fn, target, *make(9, 0))
        call_and_compare(fn, target, *make(9, 1))
        assert calls() == 1, "the replay called the Python function"
        assert fn.state is State.Compiled, kiln.explain(fn)
        call_and_compare(fn, target, *make(13, 2))
        after = calls()
        call_and_compare(fn, target, *make(13, 3))
        call_and_compare(fn, target, *make(2, 4))
        assert calls() == after, "the drifted replay called the Python function"
    return fn


def bins(x: np.ndarray) -> np.ndarray:
    return np.clip((x + 3) // 2, -4, 3).astype(np.int64)  # negative bins too


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ufunc", RECORDED, ids=lambda u: u.__name__)
def test_compiled_scatter_into_a_created_array(ufunc: np.ufunc, dtype: str) -> None:
    if ufunc is np.subtract and dtype == "bool":
        pytest.skip("NumPy has no bool subtract")

    def scatter(x, w):
        h = np.ones(4, dtype=w.dtype)
        ufunc.at(h, bins(x), w)  # one value per index, repeats accumulate
        ufunc.at(h, [0, -1, 0], w[:1])  # constant indices, a broadcast value
        return h

    run_compiled(scatter, lambda n, s: (data((n,), "float64", s), data((n,), dtype, s + 10)))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_compiled_python_scalars(dtype: str) -> None:
    """Python scalars are float64 / int64 arrays to ``ufunc.at`` (not weak): a value the
    array's dtype holds exactly gives the same result in the narrow loop."""

    def histogram(x, h):
        np.add.at(h, bins(x), 1)
        np.add.at(h, bins(-x), 2.0 if h.dtype.kind == "f" else 2)
        np.subtract.at(h, [1, 1], 0.5 if h.dtype.kind == "f" else 7)
        np.maximum.at(h, bins(x), -1)
        return h

    run_compiled(histogram, lambda n, s: (data((n,), "float64", s), data((4,), dtype, s)))


def test_compiled_float_sums_keep_numpys_order() -> None:
    """Many float32 values summed into few cells: bit-identical only in NumPy's index order."""

    def accumulate(x, w):
        h = np.zeros(3, np.float32)
        np.add.at(h, (np.abs(x) * 7).astype(np.int64) % 3, w)
        return h

    def make(n: int, s: int) -> tuple:
        rng = np.random.default_rng(s)
        return rng.normal(size=n * 50), (
            rng.normal(size=n * 50) * 10.0 ** rng.integers(-6, 6, n * 50)
        ).astype(np.float32)

    run_compiled(accumulate, make)


def test_compiled_write_into_an_input_is_written_back() -> None:
    def update(state, x):
        np.add.at(state, (bins(x) % 3, 0), x)  # a 2-D index into the caller's array
        np.multiply.at(state[:, 1], [0, 0, -1], 2.0)  # through a view of the input
        return state.sum()

    run_compiled(update, lambda n, s: (data((3, 2), "float64", s), data((n,), "float64", s + 1)))


def test_compiled_write_through_a_view() -> None:
    def views(x):
        h = np.zeros((3, 4))
        v = h[1:, ::2]  # a strided view
        before = v.copy()
        np.add.at(v, (bins(x) % 2, -1), x)  # writes h through v
        np.maximum.at(h.T, (1, [0, 0, 2]), x[:1])  # a transposed view
        return h, v, before, v * 1.0  # the view shows the writes into h

    run_compiled(views, lambda n, s: (data((n,), "float64", s),))


def test_compiled_mask_and_slice_indices() -> None:
    def masked(x):
        h = np.ones_like(x)
        np.multiply.at(h, x > 0, 3.0)
        np.add.at(h, slice(None, None, 2), x[::2])
        np.minimum.at(h, ..., 2.5)
        return h

    run_compiled(masked, lambda n, s: (data((n,), "float64", s),))


def test_compiled_nan_in_max_and_min() -> None:
    def nan_kept(x):
        h = np.array([np.nan, 1.0, -0.0, 0.0])
        np.maximum.at(h, [0], x[:1])  # NaN in the data stays
        np.minimum.at(h, bins(x) % 4, x)
        np.maximum.at(h, [2, 3], np.array([0.0, -0.0]))
        return h

    def make(n: int, s: int) -> tuple:
        x = data((n,), "float64", s)
        x[1] = np.nan
        return (x,)

    run_compiled(nan_kept, make)


@pytest.mark.parametrize("options", [{"dynamic": True}, {"fullgraph": True}], ids=str)
def test_compiled_dynamic_and_fullgraph(options: dict) -> None:
    def scatter(x, w):
        h = np.zeros(4, np.float32)
        np.add.at(h, bins(x), w)
        np.maximum.at(h, bins(-x), w)
        return h

    fn, calls = compile_counted(scatter, **options)
    for n, s in ((9, 0), (9, 1), (13, 2), (0, 3), (1, 4)):
        call_and_compare(fn, scatter, data((n,), "float64", s), data((n,), "float32", s + 9))
    assert fn.state is State.Compiled, kiln.explain(fn)
    assert calls() == (1 if options.get("dynamic") else 2)  # static, then dynamic on drift


def test_taken_graph_exports_the_reductions_to_onnx() -> None:
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")

    def counts(state, x):
        np.add.at(state, bins(x), 1)  # int64 counts, written back into the caller's array
        np.maximum.at(state, [0, 0], x.astype(np.int64)[:2])
        return state * 2

    fn, _ = compile_counted(counts)
    fn(np.zeros(4, np.int64), data((9,), "float64"))
    graph = fn.take_graph()
    model = graph.to_onnx()
    onnx.checker.check_model(model)
    reductions = sorted(
        a.s.decode()
        for node in model.graph.node
        if node.op_type == "ScatterND"
        for a in node.attribute
        if a.name == "reduction"
    )
    assert reductions == ["add", "max"], reductions
    state, x = data((4,), "int64", 1), data((9,), "float64", 2)
    want_state = state.copy()
    want = counts(want_state, x)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # onnxruntime's own rows race with more threads
    session = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
    got = dict(zip(graph.output_names, session.run(None, dict(zip(graph.input_names, (state, x))))))
    written = [n for n in graph.output_names if "mutated" in n]
    assert len(written) == 1, graph.output_names
    same(got[written[0]], want_state, "the written-back state")
    same(got[next(n for n in graph.output_names if n not in written)], want)


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("engine", ["numpy", "jax", "onnxruntime"])
@pytest.mark.parametrize("ufunc", RECORDED, ids=lambda u: u.__name__)
def test_forced_engine_is_exact_or_refuses_naming_the_node(
    ufunc: np.ufunc, engine: str, rows: int
) -> None:
    def scatter(x):
        h = np.array([np.nan, 1.0, -0.0, 0.0], np.float32)
        ufunc.at(h, [3, 2, 3][:rows], x[:rows])  # NaN and signed zeros in the data
        ufunc.at(h, [0] * rows, x[1 : rows + 1])
        return h

    x = np.array([1.5, 2.0, -0.0, 0.25], np.float32)
    with np.errstate(all="ignore"):
        traced = kiln.trace(scatter, x)
    try:
        traced.finalize(engine=engine)
    except UnsupportedOperationError as exc:
        assert engine != "numpy"
        assert "node '" in str(exc) and "engine='numpy'" in str(exc), str(exc)
        return
    # onnxruntime races on repeated rows, and its max/min reductions drop a NaN in the data
    assert not (engine == "onnxruntime" and (rows > 1 or ufunc in (np.maximum, np.minimum)))
    with np.errstate(all="ignore"):
        same(traced(x), scatter(x.copy()), f"on {engine}")


def test_trace_from_a_signature() -> None:
    def scatter(idx, w):
        h = np.zeros(5)
        np.add.at(h, idx, w)
        return h

    traced = kiln.trace(
        scatter, signature=[kiln.TensorSpec((6,), kiln.int64), kiln.TensorSpec((6,), kiln.float64)]
    )
    idx, w = np.array([0, 4, 0, -1, 2, 0]), data((6,), "float64")
    traced.finalize()
    (got,) = traced.run([idx, w])
    same(got, scatter(idx, w))


# -- fallback -------------------------------------------------------------------------------

FALLBACKS: dict[str, tuple[Any, Callable[[np.ndarray], Any]]] = {
    "divide": (np.float32, lambda h: np.divide.at(h, [0, 0, 2], 2.0)),
    "unary_negative": (np.float32, lambda h: np.negative.at(h, [0, 0, 2])),
    # int32 + Python float: NumPy's float64 loop truncates each sum, not the value
    "int_with_float_values": (np.int32, lambda h: np.add.at(h, [0, 1, 1], -0.5)),
    # float32 + 0.1 (float64): summed in float64, each result rounded to float32
    "float32_with_an_inexact_float64": (np.float32, lambda h: np.add.at(h, [0, 0, 0], 0.1)),
}


@pytest.mark.parametrize("case", sorted(FALLBACKS))
def test_unsupported_forms_are_served_eagerly_with_one_warning(case: str) -> None:
    dtype, action = FALLBACKS[case]

    def program(x):
        h = (x * 10).astype(dtype)
        action(h)
        return h + 1

    fn, calls = compile_counted(program)
    for seed in range(3):
        x = data((4,), "float64", seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call_and_compare(fn, program, x)
        warned = [w for w in caught if issubclass(w.category, CaptureWarning)]
        assert len(warned) == (1 if seed == 0 else 0), [str(w.message) for w in caught]
        if seed == 0:
            assert ".at" in str(warned[0].message)
    assert calls() == 3 and fn.state is not State.Compiled


def test_unsupported_form_with_fullgraph_raises() -> None:
    def program(x):
        h = x.copy()
        np.divide.at(h, [0, 0], 2.0)
        return h

    with pytest.raises(CaptureError, match="divide.at"):
        kiln.compile(program, fullgraph=True)(data((3,), "float64"))


@pytest.mark.parametrize(
    ("index", "values", "error"),
    [([0, 9], 1.0, IndexError), ([0, 1], np.ones(3), ValueError), ([0, -9], 1.0, IndexError)],
)
def test_numpys_errors_under_capture(index: Any, values: Any, error: type) -> None:
    def program(x):
        h = np.zeros(4)
        np.add.at(h, index, values)
        return h + x

    with pytest.raises(error):
        kiln.compile(program)(data((4,), "float64"))


def test_replay_with_an_index_out_of_range_raises_numpys_error() -> None:
    def program(x, state):
        np.add.at(state, x.astype(np.int64), 1.0)  # the index is computed from values
        return state * 1

    fn, calls = compile_counted(program)
    call_and_compare(fn, program, np.array([0.0, 1, 3, -4]), np.zeros(4))
    call_and_compare(fn, program, np.array([3.0, 3, 3, -1]), np.zeros(4))
    assert calls() == 1 and fn.state is State.Compiled
    for bad in ([0.0, 4, 1, 1], [0.0, -5, 1, 1]):
        state = np.arange(4.0)
        with pytest.raises(IndexError, match="out of bounds"):
            program(np.array(bad), state.copy())
        with pytest.raises(IndexError, match="out of bounds"):
            fn(np.array(bad), state)
        same(state, np.arange(4.0), "the caller's array after the refused replay")
