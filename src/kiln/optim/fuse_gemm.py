"""MatMul followed by an Add of a bias, on matrices, into one Gemm."""

from __future__ import annotations

from ..ir.graph import ModelGraph, Value
from .pattern import Builder, Match, Replacement, Rule, op, rewrite_with_rules, var
from .transform import DefaultsOptions, transform

__all__ = ["fuse_gemm", "GEMM_RULES"]

A, B, C = var("a"), var("b"), var("c")


def _bias_fits(c: Value, out: Value) -> bool:
    """ONNX Gemm broadcasts C to (M, N) in one direction only: each of C's (right-aligned)
    sizes must be 1 or the output's."""
    if len(c.shape) > 2:
        return False
    return all(cd == 1 or cd == od for cd, od in zip(reversed(c.shape), reversed(out.shape)))


def _matrices(m: Match) -> bool:
    return len(m["a"].shape) == 2 and len(m["b"].shape) == 2


def _matmul_add(trans_b: int):  # type: ignore[no-untyped-def]
    def build(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
        if not _matrices(m) or not _bias_fits(m["c"], m.root.outputs[0]):
            return None
        return b.op("Gemm", m["a"], m["b"], m["c"], transB=trans_b)

    return build


def _gemm_add(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
    attrs = m.attrs("gemm")
    if not _bias_fits(m["c"], m.root.outputs[0]):
        return None
    return b.op("Gemm", m["a"], m["b"], m["c"], **{**attrs, "beta": 1.0})


GEMM_RULES: list[Rule] = [
    # x @ w.T + c -> Gemm(x, w, c, transB=1)   (the form kiln.nn.linear records)
    Rule(
        op("Add", op("MatMul", A, op("Transpose", B, perm=(1, 0))), C),
        _matmul_add(trans_b=1),
        "matmul-transpose-add",
        exclusive=True,
    ),
    Rule(op("Add", op("MatMul", A, B), C), _matmul_add(trans_b=0), "matmul-add", exclusive=True),
    # Gemm(a, b) + c -> Gemm(a, b, c)   (a Gemm without C, e.g. from a folded transpose)
    Rule(op("Add", op("Gemm", A, B, name="gemm"), C), _gemm_add, "gemm-add", exclusive=True),
]


@transform("fuse_gemm")
def fuse_gemm(graph: ModelGraph, options: DefaultsOptions) -> tuple[ModelGraph, int]:
    """Rewrite ``MatMul(A, B) + C`` (either order of the Add) into ``Gemm(A, B, C)`` when A and
    B are matrices and C broadcasts to the (M, N) result, also with B given as
    ``Transpose(W)`` (``transB=1``) and for a Gemm that has no C yet."""
    return rewrite_with_rules(graph, GEMM_RULES, options)
