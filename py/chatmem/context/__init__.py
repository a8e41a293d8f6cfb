"""What a model is sent: the live context modules provide (``providers``) and how it is
rendered (``render``), token counts (``tokens``), the window that fits the model
(``window``), summaries of what does not fit (``summaries``), and ``build_context`` /
``build_window``, which put them together (``builder``)."""
