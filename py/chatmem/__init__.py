"""chatmem: conversation memory for AI chat apps, in the browser (Pyodide +
IndexedDB) and on CPython (memory or SQLite), behind one async API.

    mem = await chatmem.open("my-app")
    s = await mem.sessions.create(title="Hello")
    await mem.messages.append(s.session_id, "user", "Hi!")
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from . import errors
from .errors import (
    ChatmemError,
    ClockSkew,
    ContextOverflow,
    FactNotFound,
    ImportFormatError,
    LimitExceeded,
    MessageNotFound,
    NotFound,
    ProviderError,
    QueryError,
    QueryTimeout,
    ReadOnlySQLError,
    SessionNotFound,
    StorageError,
    ValidationError,
)

__version__ = "0.1.0"

#: the module defining each public name, imported when the name is first used (PEP 562):
#: ``import chatmem`` loads only the errors, so a page is ready before the modules its
#: first ``chatmem.open`` needs are read, and what it never uses (SQLite, providers) is never read
_MODULES: dict[str, tuple[str, ...]] = {
    ".chat.anthropic": ("AnthropicProvider",),
    ".air.context_store": ("ContextStore", "MemoryContextStore"),
    ".air.backends": ("IndexedDBContextStore", "InMemoryContextStore", "SQLiteContextStore"),
    ".conversations.session": ("Session",),
    ".embedding": ("Embedder", "HashingEmbedder", "LocalEmbedder", "OpenAIEmbedder", "StaticEmbedder"),
    ".records.ids": ("Clock", "IdGenerator", "new_id", "system_clock"),
    ".index": (
        "HybridWeights",
        "QueryIndex",
        "RetrievalConfig",
        "SearchHit",
        "SQLEngine",
    ),
    ".context.providers": (
        "LiveContext",
        "ContextMessage",
        "ContextProvider",
        "ContextUpdateStrategy",
        "DatetimeProvider",
        "ModuleStateProvider",
        "UserProfileProvider",
        "render_context_message",
    ),
    ".facts": (
        "Fact",
        "FactExtractor",
        "FactOp",
        "FactReport",
        "Facts",
        "LLMFactExtractor",
        "OfflineFactExtractor",
    ),
    ".stores.caches": ("LFUCache", "LRUCache"),
    ".memory": ("Memory", "open"),
    ".conversations.messages": ("Messages",),
    ".records.models": ("ChatMessage", "Message", "SessionMeta", "estimate_tokens", "extract_text"),
    ".conversations.offline": ("OfflineResponder",),
    ".chat.providers": ("ChatProvider", "OpenAICompatibleProvider"),
    ".conversations.retention": ("RetentionPolicy", "RetentionReport"),
    ".runtime": ("IN_BROWSER", "Runtime"),
    ".conversations.sessions": ("Sessions",),
    ".stores": ("MemoryStore", "Store"),
    ".context.summaries": ("ExtractiveSummarizer", "LLMSummarizer", "MessageRetentionPolicy", "Summarizer"),
    ".sync": (
        "EncryptionKey",
        "Passphrase",
        "PullReport",
        "PushReport",
        "SyncConfig",
        "Synchronizer",
        "SyncStatus",
    ),
    ".context.tokens": ("BPETokenizer", "EstimateTokenizer", "Tokenizer"),
    ".transfer.io": ("ImportReport",),
    ".records.validation": ("DEFAULT_LIMITS", "Limits"),
    ".context.window": ("PRESETS", "ModelBudget", "WindowResult", "fit_window"),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}

if TYPE_CHECKING:
    from .air.backends import IndexedDBContextStore, InMemoryContextStore, SQLiteContextStore  # noqa: F401
    from .air.context_store import ContextStore, MemoryContextStore  # noqa: F401
    from .chat.anthropic import AnthropicProvider  # noqa: F401
    from .chat.providers import ChatProvider, OpenAICompatibleProvider  # noqa: F401
    from .context.providers import (  # noqa: F401
        ContextMessage,
        ContextProvider,
        ContextUpdateStrategy,
        DatetimeProvider,
        LiveContext,
        ModuleStateProvider,
        UserProfileProvider,
        render_context_message,
    )
    from .context.summaries import ExtractiveSummarizer, LLMSummarizer, MessageRetentionPolicy, Summarizer  # noqa: F401
    from .context.tokens import BPETokenizer, EstimateTokenizer, Tokenizer  # noqa: F401
    from .context.window import PRESETS, ModelBudget, WindowResult, fit_window  # noqa: F401
    from .conversations.messages import Messages  # noqa: F401
    from .conversations.offline import OfflineResponder  # noqa: F401
    from .conversations.retention import RetentionPolicy, RetentionReport  # noqa: F401
    from .conversations.session import Session  # noqa: F401
    from .conversations.sessions import Sessions  # noqa: F401
    from .embedding import Embedder, HashingEmbedder, LocalEmbedder, OpenAIEmbedder, StaticEmbedder  # noqa: F401
    from .facts import (  # noqa: F401
        Fact,
        FactExtractor,
        FactOp,
        FactReport,
        Facts,
        LLMFactExtractor,
        OfflineFactExtractor,
    )
    from .index import (  # noqa: F401
        HybridWeights,
        QueryIndex,
        RetrievalConfig,
        SearchHit,
        SQLEngine,
    )
    from .memory import Memory, open  # noqa: F401
    from .records.ids import Clock, IdGenerator, new_id, system_clock  # noqa: F401
    from .records.models import ChatMessage, Message, SessionMeta, estimate_tokens, extract_text  # noqa: F401
    from .records.validation import DEFAULT_LIMITS, Limits  # noqa: F401
    from .runtime import IN_BROWSER, Runtime  # noqa: F401
    from .stores import MemoryStore, Store  # noqa: F401
    from .stores.caches import LFUCache, LRUCache  # noqa: F401
    from .sync import EncryptionKey, Passphrase, PullReport, PushReport, SyncConfig, Synchronizer, SyncStatus  # noqa: F401
    from .transfer.io import ImportReport  # noqa: F401


def __getattr__(name: str) -> Any:
    """A public name (or a submodule) of chatmem, imported the first time it is asked for."""
    module = _LAZY.get(name)
    if module is None:
        if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return importlib.import_module(f"{__name__}.{name}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
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
    "NotFound",
    "SessionNotFound",
    "MessageNotFound",
    "FactNotFound",
    "ValidationError",
    "StorageError",
    "ImportFormatError",
    "ContextOverflow",
    "ReadOnlySQLError",
    "LimitExceeded",
    "ClockSkew",
    "QueryTimeout",
    "Limits",
    "DEFAULT_LIMITS",
    "QueryError",
    "ProviderError",
    # context providers and the window
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
    # summaries and retention
    "Summarizer",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "RetentionPolicy",
    "MessageRetentionPolicy",
    "RetentionReport",
    # chat
    "ChatProvider",
    "OpenAICompatibleProvider",
    "AnthropicProvider",
    "OfflineResponder",
    # search
    "QueryIndex",
    "SQLEngine",
    "SearchHit",
    "RetrievalConfig",
    "HybridWeights",
    "Embedder",
    "HashingEmbedder",
    "LocalEmbedder",
    "StaticEmbedder",
    "OpenAIEmbedder",
    # export / import
    "ImportReport",
    "Fact",
    "FactExtractor",
    "FactOp",
    "FactReport",
    "Facts",
    "OfflineFactExtractor",
    "LLMFactExtractor",
    # sync
    "SyncConfig",
    "Synchronizer",
    "SyncStatus",
    "PushReport",
    "PullReport",
    "Passphrase",
    "EncryptionKey",
]
