"""Bridges to the tools chat developers already use.

Each module imports its framework, if it needs one, as an optional extra, not a dependency:

* ``chatmem.integrations.langchain`` — ``ChatmemChatMessageHistory`` (``pip install "chatmem[langchain]"``);
* ``chatmem.integrations.mcp`` — the ``chatmem-mcp`` server (``pip install "chatmem[mcp]"``);
* ``chatmem.integrations.anthropic`` — Claude through Anthropic's Messages API: the provider
  for the chat turn, and the request and answer shapes for an app's own client (no extra).
"""

__all__: list[str] = []
