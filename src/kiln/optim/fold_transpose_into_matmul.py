"""A transposed matrix feeding a matrix product becomes Gemm's transA/transB flag."""

from __future__ import annotations

from ..ir.graph import ModelGraph
from .pattern import Builder, Match, Replacement, Rule, op, rewrite_with_rules, var
from .transform import DefaultsOptions, transform

__all__ = ["fold_transpose_into_matmul", "FOLD_TRANSPOSE_RULES"]

A, B = var("a"), var("b")


def _transposed(pattern_input):  # type: ignore[no-untyped-def]
    """A 2-D Transpose of ``pattern_input``: perm (1, 0), or no perm (reversed axes)."""
    return [op("Transpose", pattern_input, perm=(1, 0)), op("Transpose", pattern_input, perm=None)]


def _fold(which: str):  # type: ignore[no-untyped-def]
    """Build ``Gemm`` with the flag of operand ``which`` ("A" or "B") flipped."""

    def build(m: Match, b: Builder, options: DefaultsOptions) -> Replacement:
        a, bb = m["a"], m["b"]
        if len(a.shape) != 2 or len(bb.shape) != 2:
            return None  # MatMul of stacks of matrices: ONNX has no transposed form
        attrs = m.attrs("mm") if m.root.op == "Gemm" else {}
        flag = "transA" if which == "A" else "transB"
        attrs = {**attrs, flag: 1 - int(attrs.get(flag, 0))}
        return b.op("Gemm", a, bb, *m.root.inputs[2:], **attrs)

    return build


FOLD_TRANSPOSE_RULES: list[Rule] = [
    # MatMul(a.T, b) -> Gemm(a, b, transA=1);  MatMul(a, b.T) -> Gemm(a, b, transB=1)
    *[Rule(op("MatMul", t, B), _fold("A"), "matmul-transposed-a") for t in _transposed(A)],
    *[Rule(op("MatMul", A, t), _fold("B"), "matmul-transposed-b") for t in _transposed(B)],
    # Gemm(a.T, b, c?, transA=t) -> Gemm(a, b, c?, transA=1-t), likewise for b
    *[
        Rule(op("Gemm", t, B, *c, name="mm"), _fold("A"), "gemm-transposed-a")
        for t in _transposed(A)
        for c in ((), (var(),))
    ],
    *[
        Rule(op("Gemm", A, t, *c, name="mm"), _fold("B"), "gemm-transposed-b")
        for t in _transposed(B)
        for c in ((), (var(),))
    ],
]


@transform("fold_transpose_into_matmul")
def fold_transpose_into_matmul(
    graph: ModelGraph, options: DefaultsOptions
) -> tuple[ModelGraph, int]:
    """Fold ``Transpose`` of a matrix feeding a 2-D ``MatMul`` or a ``Gemm`` into the Gemm's
    ``transA``/``transB`` flag (a MatMul of higher rank has no such flag and is left alone)."""
    return rewrite_with_rules(graph, FOLD_TRANSPOSE_RULES, options)
