"""Model clients: the ``ChatProvider`` protocol and its OpenAI-compatible
implementation (``providers``), Anthropic's Messages API (``anthropic``), and the
request shapes both APIs expect (``formats``). They know the wire, not the memory:
the chat turn that uses them is ``chatmem.conversations.turn``, the responder that
answers from memory without a model ``chatmem.conversations.offline``."""
