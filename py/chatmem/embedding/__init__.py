"""Embedders: text to vectors. The ``Embedder`` protocol, ``HashingEmbedder`` (offline,
no model), ``OpenAIEmbedder`` (an ``/embeddings`` endpoint) and the local model: a
pure-Python WordPiece tokenizer and ``StaticEmbedder`` (a static table distilled at
build time from all-MiniLM-L6-v2's weights)."""

from __future__ import annotations

from .embedders import Embedder, HashingEmbedder, OpenAIEmbedder
from .local import LOCAL_MODEL, LocalEmbedder, default_embedder
from .static import MODEL_FILE, StaticEmbedder, find_model_file
from .wordpiece import WordPiece

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "LOCAL_MODEL",
    "MODEL_FILE",
    "LocalEmbedder",
    "default_embedder",
    "StaticEmbedder",
    "WordPiece",
    "find_model_file",
]
