"""chatmem: conversation memory for AI chat apps, in the browser (Pyodide +
IndexedDB) and on CPython (memory or SQLite), behind one async API.

    mem = await chatmem.open("my-app")
    s = await mem.sessions.create(title="Hello")
    await mem.messages.append(s.session_id, "user", "Hi!")
"""

from __future__ import annotations

from . import errors
from .anthropic import AnthropicProvider
from .contextstore import ContextStore, MemoryContextStore
from .contextstore_backends import IndexedDBContextStore, InMemoryContextStore, SQLiteContextStore
from .conversation import Session
from .embedding import LocalEmbedder, StaticEmbedder
from .errors import (
    ChatmemError,
    ClockSkew,
    ContextOverflow,
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
from .ids import Clock, IdGenerator, new_id, system_clock
from .index import (
    Embedder,
    HashingEmbedder,
    HybridWeights,
    OpenAIEmbedder,
    QueryIndex,
    RetrievalConfig,
    SearchHit,
    SQLEngine,
)
from .live_context import (
    ContextManager,
    ContextMessage,
    ContextProvider,
    ContextUpdateStrategy,
    DatetimeProvider,
    ModuleStateProvider,
    UserProfileProvider,
    render_context_message,
)
from .lru import LFUCache, LRUCache
from .memory import Memory, open
from .messages import Messages
from .models import ChatMessage, Message, SessionMeta, estimate_tokens, extract_text
from .offline import OfflineResponder
from .providers import ChatProvider, OpenAICompatibleProvider
from .retention import MessageRetentionPolicy, RetentionPolicy, RetentionReport
from .runtime import IN_BROWSER, Runtime
from .sessions import Sessions
from .stores import MemoryStore, Store
from .summarize import ExtractiveSummarizer, LLMSummarizer, Summarizer
from .sync import (
    EncryptionKey,
    Passphrase,
    PullReport,
    PushReport,
    SyncConfig,
    SyncEngine,
    SyncStatus,
)
from .token_count import BPETokenizer, EstimateTokenizer, Tokenizer
from .transfer.io import ImportReport
from .validation import DEFAULT_LIMITS, Limits
from .window import PRESETS, ModelBudget, WindowResult, fit_window

__version__ = "0.1.0"

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
    "ContextManager",
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
    # sync
    "SyncConfig",
    "SyncEngine",
    "SyncStatus",
    "PushReport",
    "PullReport",
    "Passphrase",
    "EncryptionKey",
]
