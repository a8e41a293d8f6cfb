"""Bridges to the tools chat developers already use.

Each module imports its framework, which is an optional extra, not a dependency:

* ``chatmem.integrations.langchain`` — ``ChatmemChatMessageHistory`` (``pip install "chatmem[langchain]"``);
* ``chatmem.integrations.mcp`` — the ``chatmem-mcp`` server (``pip install "chatmem[mcp]"``).
"""

__all__: list[str] = []
