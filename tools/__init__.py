"""The build behind ``build.py``: shared paths and commands (``base``), the static site
(``static_site``), serving it (``serving``), the test environment (``environment``), a
throwaway PostgreSQL cluster (``postgres``), and the embedding model's derivation
(``static_model``)."""
