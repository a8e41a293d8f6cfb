"""The public API is explicit: ``chatmem.__all__`` and ``chatmem.errors.__all__``
are pinned to exact sets, and every exception chatmem defines lives in ``chatmem.errors``."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import chatmem
from chatmem import errors

PKG = Path(chatmem.__file__).parent

PUBLIC = {
    "__version__",
    "open",
    "Memory",
    "IN_BROWSER",
    "Runtime",
    "Sessions",
    "Messages",
    "Session",
    "SessionMeta",
    "ChatMessage",
    "Message",
    "ContextStore",
    "MemoryContextStore",
    "InMemoryContextStore",
    "SQLiteContextStore",
    "IndexedDBContextStore",
    "Store",
    "MemoryStore",
    "LRUCache",
    "LFUCache",
    "Clock",
    "IdGenerator",
    "new_id",
    "system_clock",
    "extract_text",
    "estimate_tokens",
    "errors",
    "ChatmemError",
    "LimitExceeded",
    "ClockSkew",
    "QueryTimeout",
    "DEFAULT_LIMITS",
    "Limits",
    "NotFound",
    "SessionNotFound",
    "MessageNotFound",
    "FactNotFound",
    "ValidationError",
    "StorageError",
    "ImportFormatError",
    "ContextOverflow",
    "ReadOnlySQLError",
    "QueryError",
    "ProviderError",
    "LiveContext",
    "ContextMessage",
    "ContextProvider",
    "ContextUpdateStrategy",
    "DatetimeProvider",
    "ModuleStateProvider",
    "UserProfileProvider",
    "render_context_message",
    "Tokenizer",
    "EstimateTokenizer",
    "BPETokenizer",
    "ModelBudget",
    "PRESETS",
    "WindowResult",
    "fit_window",
    "Summarizer",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "RetentionPolicy",
    "MessageRetentionPolicy",
    "RetentionReport",
    "ChatProvider",
    "OpenAICompatibleProvider",
    "AnthropicProvider",
    "OfflineResponder",
    "QueryIndex",
    "SQLEngine",
    "SearchHit",
    "RetrievalConfig",
    "HybridWeights",
    "Embedder",
    "HashingEmbedder",
    "OpenAIEmbedder",
    "LocalEmbedder",
    "StaticEmbedder",
    "ImportReport",
    "Fact",
    "FactExtractor",
    "FactOp",
    "FactReport",
    "Facts",
    "OfflineFactExtractor",
    "LLMFactExtractor",
    "SyncConfig",
    "Synchronizer",
    "SyncStatus",
    "PushReport",
    "PullReport",
    "Passphrase",
    "EncryptionKey",
}

ERRORS = {
    "ChatmemError",
    "ValidationError",
    "ImportFormatError",
    "ContextOverflow",
    "ReadOnlySQLError",
    "LimitExceeded",
    "ClockSkew",
    "QueryTimeout",
    "ImportLimitExceeded",
    "NotFound",
    "SessionNotFound",
    "MessageNotFound",
    "FactNotFound",
    "StorageError",
    "QuotaExceeded",
    "RateLimited",
    "StorageFull",
    "DatabaseUnavailable",
    "ConstraintViolation",
    "DuplicateId",
    "TransactionAborted",
    "VersionConflict",
    "UpgradeBlocked",
    "DatabaseClosed",
    "IndexLocked",
    "TransportError",
    "TransportTimeout",
    "SyncError",
    "SyncOffline",
    "SyncTransientError",
    "SyncAuthError",
    "SyncPermanentError",
    "WrongPassphrase",
    "DecryptionError",
    "EncryptionConflict",
    "ProviderError",
    "ProviderAuthError",
    "ProviderNotFound",
    "ProviderRateLimited",
    "ProviderServerError",
    "ProviderTimeout",
    "ProviderUnavailable",
    "QueryError",
    "EmbeddingError",
    "UnsupportedEnvironment",
    "translate_dom_error",
}


def test_all_is_pinned() -> None:
    """``chatmem.__all__`` is exactly the documented set, and every name in it exists."""
    assert set(chatmem.__all__) == PUBLIC
    assert len(chatmem.__all__) == len(PUBLIC)
    for name in chatmem.__all__:
        assert hasattr(chatmem, name), name


def test_every_public_class_and_function_says_what_it_is() -> None:
    """Each class and function in ``chatmem.__all__`` has a docstring of its own (not one a
    base class or ``dataclass`` wrote for it); values are documented where they are defined."""
    missing = []
    for name in chatmem.__all__:
        obj = getattr(chatmem, name)
        if inspect.isclass(obj):
            doc = vars(obj).get("__doc__")
            if not doc or doc.startswith(f"{obj.__name__}("):
                missing.append(name)
        elif inspect.isfunction(obj) or inspect.ismodule(obj):
            if not obj.__doc__:
                missing.append(name)
    assert missing == []


def test_errors_all_is_pinned() -> None:
    """``chatmem.errors.__all__`` is exactly the error tree, each a ``ChatmemError``."""
    assert set(errors.__all__) == ERRORS
    for name in ERRORS - {"translate_dom_error"}:
        assert issubclass(getattr(errors, name), errors.ChatmemError), name
    assert issubclass(errors.TransportTimeout, errors.TransportError)
    assert issubclass(errors.IndexLocked, errors.StorageError)


def test_error_tree_is_drawn_whole() -> None:
    """Every error class appears in the tree drawn in the errors module's docstring."""
    import re

    drawn = set(re.findall(r"^\s*(?:[│ ]*[├└]── )?([A-Z][A-Za-z]+)\b", errors.__doc__ or "", re.M))
    assert ERRORS - {"translate_dom_error"} <= drawn


def test_every_exception_class_lives_in_errors() -> None:
    """No module but ``chatmem.errors`` defines an exception class (one tree, one place)."""
    found = []
    for path in PKG.rglob("*.py"):
        if path.name == "errors.py" and path.parent == PKG:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & (
                    ERRORS | {"Exception", "BaseException", "ValueError", "RuntimeError", "LookupError"}
                ):
                    found.append(f"{path.relative_to(PKG)}:{node.name}")
    assert found == []


def test_moved_errors_stay_importable_where_they_were() -> None:
    """``chatmem.http`` still offers the transport errors it used to define (the same classes)."""
    from chatmem import http

    assert http.TransportError is errors.TransportError
    assert http.TransportTimeout is errors.TransportTimeout


def test_import_reads_only_the_errors() -> None:
    """``import chatmem`` loads chatmem's errors alone (the page's ``ready`` waits for it); each
    public name loads its module when first used, ``from chatmem import X`` as well."""
    code = (
        "import sys, json\n"
        "import chatmem\n"
        "first = sorted(m for m in sys.modules if m.startswith('chatmem'))\n"
        "from chatmem import SyncConfig\n"
        "after = 'chatmem.sync' in sys.modules\n"
        "print(json.dumps([first, 'sqlite3' in sys.modules, after, chatmem.open.__module__,\n"
        "                  chatmem.index.__name__, set(chatmem.__all__) <= set(dir(chatmem))]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PKG.parent
    )
    first, sqlite, sync_after, open_module, index_name, listed = json.loads(out.stdout)
    assert first == ["chatmem", "chatmem.errors"]
    assert not sqlite
    assert sync_after and open_module == "chatmem.memory" and index_name == "chatmem.index" and listed
    with pytest.raises(AttributeError, match="no_such_name"):
        chatmem.no_such_name  # noqa: B018


def test_lazy_names_match_what_type_checkers_see() -> None:
    """``chatmem/__init__``'s table of lazily imported names and its ``TYPE_CHECKING`` imports
    (what mypy and editors see) name the same things from the same modules."""
    tree = ast.parse((PKG / "__init__.py").read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    seen = {
        a.name: "." * n.level + (n.module or "")
        for n in block.body
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }
    assert seen == chatmem._LAZY
