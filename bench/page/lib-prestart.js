// lib-prestart.html: DuckDB-Wasm's modules are imported before boot.js starts Pyodide
// (module scripts run in document order), so the engine's worker has its Wasm to
// compile from the start of the boot instead of once the main thread is free again.
import "@duckdb/duckdb-wasm";
import "apache-arrow";
import { duckdbPrestart } from "../js/bridge.js";

duckdbPrestart();
