"""Cases shared by the CPython and page tests of the approximate index's upkeep."""

from __future__ import annotations

#: statements and whether they may change the working ``embeddings`` rows other than by an append
REWRITES = {
    "DELETE FROM embeddings WHERE model = ?": True,
    "  delete from Embeddings where 1 = 1": True,
    "UPDATE main.embeddings SET scale = 1": True,
    "CREATE TABLE IF NOT EXISTS embeddings (message_id VARCHAR)": True,
    "DROP TABLE embeddings": True,
    "INSERT INTO chatmem_work.main.embeddings SELECT * FROM x.main.embeddings": True,
    "VACUUM embeddings": True,
    "USE chatmem_work": True,
    "COPY FROM DATABASE f TO chatmem_work": True,
    "ROLLBACK": True,
    'INSERT INTO "opfs_chatmem.duckdb".main.embeddings SELECT * FROM chatmem_work.main.embeddings': False,
    'DROP TABLE IF EXISTS "f".main.embeddings': False,
    "CREATE OR REPLACE TEMP TABLE vector_partition_3 AS SELECT * FROM embeddings e": False,
    "INSERT INTO vector_partition_3 SELECT * FROM embeddings e WHERE rowid > 5": False,
    "DELETE FROM embeddings_old": False,
    "DELETE FROM postings WHERE doc IN (SELECT doc FROM gone)": False,
    "SELECT * FROM embeddings": False,
    "WITH x AS (SELECT 1) SELECT * FROM embeddings": False,
    "CHECKPOINT": False,
}
