//! The store's boundary: no crate but dq-core reaches Redis. The binaries and client crates do not even
//! depend on `redis` (the compiler keeps that), and none names a script or builds its KEYS and ARGV;
//! this test reads their sources and manifests so that it stays so. The harness (`dq-harness`, which
//! runs redis-server), the tests, and `dq-bench` (which measures Redis itself beside dq: `INFO`, and a
//! bare push script as the ceiling) are exempt.

use std::path::{Path, PathBuf};

/// Crates held to the boundary.
const HELD: &[&str] = &[
    "dq-server",
    "dq-timer",
    "dq-consumer",
    "dq-checker",
    "dq-client",
    "dq-cli",
];

/// What no source of theirs may name.
const FORBIDDEN: &[&str] = &[
    "redis::",
    "prepare_invoke",
    "store::scripts",
    "invoke_async",
    "query_async",
    "EVALSHA",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_crate_but_dq_core_reaches_redis() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut broken = Vec::new();
    for name in HELD {
        let root = crates.join(name);
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let deps = manifest.split("[dev-dependencies]").next().unwrap_or_default();
        if deps.lines().any(|l| l.trim_start().starts_with("redis")) {
            broken.push(format!("{name}/Cargo.toml depends on redis"));
        }
        if deps.contains("\"testing\"") {
            broken.push(format!(
                "{name}/Cargo.toml turns on dq-core's testing feature outside dev-dependencies"
            ));
        }
        let mut files = Vec::new();
        sources(&root.join("src"), &mut files);
        assert!(!files.is_empty(), "{name} has sources");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                for word in FORBIDDEN {
                    if line.contains(word) {
                        broken.push(format!("{}:{}: names `{word}`", file.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "outside the store's boundary:\n{}",
        broken.join("\n")
    );
}
