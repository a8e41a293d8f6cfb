"""The local embedding model: a pure-Python WordPiece tokenizer and ``StaticEmbedder``
(a static table distilled at build time from all-MiniLM-L6-v2's weights)."""

from __future__ import annotations

from .static import MODEL_FILE, StaticEmbedder, find_model_file
from .wordpiece import WordPiece

__all__ = ["MODEL_FILE", "StaticEmbedder", "WordPiece", "find_model_file"]
