"""Work that shares the page's one thread: long Python work cut into slices that yield to
the event loop (``slices``), and waiting for work that outlives its caller's
cancellation (``settle``)."""
