"""Talking to a model: the ``ChatProvider`` protocol and its OpenAI-compatible
implementation (``providers``), Anthropic's Messages API (``anthropic``), the offline
responder that answers from memory without a model (``offline``), and the chat turn
that stores the user's message, builds the window and streams the answer (``turn``)."""
