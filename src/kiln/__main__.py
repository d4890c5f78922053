"""The ``kiln`` command: ``kiln demo`` (also ``python -m kiln demo``)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kiln", description="kiln tensor-graph runtime")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="compile a transformer block and show the graph")
    demo.add_argument("--batch", type=int, default=2)
    demo.add_argument("--seq", type=int, default=64)
    demo.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import main as demo_main

        demo_main(batch=args.batch, seq=args.seq, repeat=args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
