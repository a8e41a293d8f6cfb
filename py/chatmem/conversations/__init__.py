"""Sessions and their messages, as the API reads and writes them: ``mem.sessions``
(``sessions``), ``mem.messages`` (``messages``), ``mem.session(id)``, the handle on one
conversation (``session``), and retention policies that prune them (``retention``)."""
