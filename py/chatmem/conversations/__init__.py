"""Sessions and their messages, as the API reads and writes them: ``mem.sessions``
(``sessions``), ``mem.messages`` (``messages``), ``mem.session(id)``, the handle on one
conversation (``session``), the chat turn that stores the user's message, builds the
window and streams a model's answer (``turn``), the responder that answers from memory
without a model (``offline``), and retention policies that prune them (``retention``)."""
