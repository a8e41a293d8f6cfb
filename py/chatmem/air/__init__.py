"""AIR's ``ContextStore`` API over chatmem (``context_store``) and its implementations on
each store (``backends``): what an app written against AIR keeps using unchanged."""
