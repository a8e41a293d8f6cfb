"""The records everything else is made of: messages and sessions (``models``), their ids
and clocks (``ids``), and the checks a record passes before it is stored, imported or
synced (``validation``). Nothing here reads or writes a store."""
