"""The wheel carries the default embedding model; the page's wheel does not (the page
fetches it lazily from the site)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = "chatmem/embedding/data/minilm-l6-static-v1.bin"


def test_a_built_wheel_carries_the_model(tmp_path: Path) -> None:
    """``pip wheel .`` (as ``pip install .`` builds it) holds the same model file as the page serves."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        cwd=ROOT,
    )
    (wheel,) = tmp_path.glob("chatmem-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert names.count(MODEL) == 1
        inside = hashlib.sha256(z.read(MODEL)).hexdigest()
    served = list((ROOT / "dist" / "models").glob("*.bin"))
    assert served, "the site serves the model"
    assert inside in {hashlib.sha256(p.read_bytes()).hexdigest() for p in served}


def test_the_page_wheel_leaves_the_model_out() -> None:
    (wheel,) = (ROOT / "dist" / "wheels").glob("chatmem-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert not [n for n in z.namelist() if n.endswith(".bin")]
