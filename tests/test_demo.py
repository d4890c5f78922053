"""The main job (``kiln demo``) runs end to end, on a small size."""

from __future__ import annotations

import subprocess
import sys

from kiln.__main__ import main


def test_demo_runs_and_shows_the_lifecycle(capsys):
    assert main(["demo", "--batch", "1", "--seq", "8", "--repeat", "2"]) == 0
    text = capsys.readouterr().out
    assert "state = Compiled" in text
    assert "shape drift" in text and "recapture_count = 1" in text
    assert "optimize()" in text and "graph block(" in text
    assert "eager NumPy" in text and "kiln compile" in text


def test_python_dash_m_kiln_help():
    result = subprocess.run(
        [sys.executable, "-m", "kiln", "--help"], capture_output=True, text=True, check=True
    )
    assert "demo" in result.stdout
