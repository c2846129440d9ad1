//! DuckDB (the PyPI package, from `python_packages`), an engine we did not write, reading
//! the Parquet export: a query's rows as JSON.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::python_packages;

/// `gpumemprof export --format parquet TRACE -o DIR` (exit 0); returns the path of its
/// `allocations.parquet`.
pub fn export_tables(trace: &Path, dir: &Path) -> PathBuf {
    let out = Command::new(crate::analyzer_path())
        .args(["export", "--format", "parquet"])
        .arg(trace)
        .arg("-o")
        .arg(dir)
        .output()
        .expect("run gpumemprof export");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    dir.join("allocations.parquet")
}

/// The rows of `sql` (each a JSON array of its columns; big integers stay exact, other
/// values JSON has no type for are strings). Panics with DuckDB's message if the query
/// fails, or pip's if DuckDB cannot be installed: a test never passes without running it.
pub fn query(sql: &str) -> Vec<Vec<Value>> {
    let site = python_packages();
    let out = Command::new("python3")
        .env("PYTHONPATH", &site)
        .arg("-c")
        .arg(
            "import duckdb, json, sys\n\
             rows = duckdb.sql(sys.argv[1]).fetchall()\n\
             print(json.dumps([list(r) for r in rows], default=str))",
        )
        .arg(sql)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "DuckDB (from {}) could not run\n{sql}\n{}",
        site.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Value = serde_json::from_slice(&out.stdout).expect("JSON rows");
    rows.as_array()
        .expect("an array of rows")
        .iter()
        .map(|r| r.as_array().expect("a row").clone())
        .collect()
}
